package job

// A standalone run's checkpoints and interrupts. With --checkpoint-dir and
// --checkpoint-every, train alone writes DIR/alone.ckpt every so often: a
// model file with the optimizer state, the step, and where in the data it
// is (the epoch and its rows trained on) in its meta, written atomically
// (model.SaveFile), so a crash leaves the previous one whole. --resume
// continues from it, reading and skipping the rows done; with one thread or
// many the model it ends with is the one an uninterrupted run trains, bit
// for bit (TestTrainAloneResumesBitIdentical). The first SIGINT or SIGTERM
// ends training after the batches already read, saves --save marked
// partial (and a checkpoint there, with --checkpoint-dir) and writes the
// report's summary; a second exits at once with status 130, saving
// nothing (TestTrainAloneCtrlCSavesAPartialModel).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/sgd"
	"github.com/gossiptrain/gossiptrain/usage"
)

// AloneCheckpointFile is the file a standalone train writes its
// checkpoints to, in --checkpoint-dir.
const AloneCheckpointFile = "alone.ckpt"

// AloneCheckpointPath is the checkpoint file of a standalone run in dir.
func AloneCheckpointPath(dir string) string { return filepath.Join(dir, AloneCheckpointFile) }

// The meta keys of a standalone checkpoint.
const (
	ckptKind          = "checkpoint"    // "standalone"
	ckptEpoch         = "epoch"         // 0-based epoch in progress
	ckptRows          = "epoch_rows"    // its rows trained on
	ckptEpochLoss     = "epoch_loss"    // whole epochs' training loss, comma-separated
	ckptLossSum       = "epoch_lossSum" // the epoch in progress's loss sum
	ckptEpochExamples = "epoch_examples"
	ckptBatch         = "batch"
)

// exitInterrupted is the exit status of a run stopped at once by a second
// signal.
const exitInterrupted = 130

// AloneSignals returns the context of a standalone run: the first SIGINT
// or SIGTERM cancels it (training stops after the batches already read,
// and RunAlone saves what it has), a second one runs cleanup (which must
// be quick) and exits the process at once with status 130. stop stops
// watching.
func AloneSignals(log zerolog.Logger, cleanup func()) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	c := make(chan os.Signal, 2)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-c:
			log.Warn().Str("signal", s.String()).Msg("stopping after the batches already read: saving the model marked partial and the report's summary (a second signal exits at once, saving nothing)")
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-c:
			log.Warn().Str("signal", s.String()).Msg("second signal: exiting at once")
			if cleanup != nil {
				cleanup()
			}
			os.Exit(exitInterrupted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(c)
		close(done)
		cancel()
	}
}

// resumeAlone loads the standalone checkpoint into the plan's model when
// --resume asks for it and returns where training goes on (nil: from the
// start). --resume fails without a checkpoint; --resume=auto starts
// afresh then. A checkpoint of another model or batch size fails, naming
// what differs.
func (cfg Config) resumeAlone() (*sgd.Position, error) {
	if !cfg.Resume || cfg.CheckpointDir == "" {
		return nil, nil
	}
	log, m := cfg.Log, cfg.Plan.Model
	path := AloneCheckpointPath(cfg.CheckpointDir)
	ck, err := model.LoadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if cfg.ResumeOrStart {
			log.Info().Str("file", path).Msg("--resume=auto: no checkpoint yet, starting from the beginning")
			return nil, nil
		}
		return nil, usage.Flag("resume", "no checkpoint in --checkpoint-dir %s (%s does not exist); --resume=auto starts afresh then", cfg.CheckpointDir, path)
	}
	if err != nil {
		return nil, usage.Flag("resume", "%v", err)
	}
	pos, err := checkCheckpoint(ck, m, cfg.Batch)
	if err != nil {
		return nil, usage.Flag("resume", "%s: %v", path, err)
	}
	copy(m.W, ck.W)
	for s := range m.State {
		if m.Opt.Kind.StatePerWeight() == 0 {
			break // SGD keeps no state
		}
		if ck.State[s] == nil {
			return nil, usage.Flag("resume", "%s: shard %d has no optimizer state (not a standalone checkpoint)", path, s)
		}
		m.State[s] = ck.State[s]
	}
	m.Steps, m.Examples = ck.Steps, ck.Examples
	log.Info().Str("file", path).Int("epoch", pos.Epoch+1).Int64("epoch_rows", pos.Rows).Int64("examples", ck.Examples).
		Msg("resuming from the standalone checkpoint: the rows done are read and skipped")
	return pos, nil
}

// checkCheckpoint checks that checkpoint ck continues model m trained with
// batches of batch rows, and returns its position.
func checkCheckpoint(ck, m *model.Model, batch int) (*sgd.Position, error) {
	if ck.Meta[ckptKind] != "standalone" {
		return nil, errors.New("not a standalone checkpoint")
	}
	if err := ck.Matches(m.Kind, m.Dim, m.Classes, m.Hidden); err != nil {
		return nil, fmt.Errorf("a checkpoint of another model: %w", err)
	}
	switch {
	case ck.Hidden != m.Hidden:
		return nil, fmt.Errorf("a checkpoint of %d hidden units, this run has %d", ck.Hidden, m.Hidden)
	case ck.Layout.Shards != m.Layout.Shards || len(ck.W) != len(m.W):
		return nil, fmt.Errorf("a checkpoint of %d shards, this run has %d", ck.Layout.Shards, m.Layout.Shards)
	case ck.Opt != m.Opt:
		return nil, fmt.Errorf("a checkpoint trained with other optimizer settings (%+v; this run: %+v): resume with the same flags", ck.Opt, m.Opt)
	case ck.Meta[ckptBatch] != strconv.Itoa(batch):
		return nil, fmt.Errorf("a checkpoint trained with --batch %s, this run has %d: resume with the same flags", ck.Meta[ckptBatch], batch)
	}
	var pos sgd.Position
	var err error
	ints := []struct {
		key string
		v   *int64
	}{{ckptRows, &pos.Rows}, {ckptEpochExamples, &pos.Examples}}
	epoch, err := strconv.Atoi(ck.Meta[ckptEpoch])
	if err != nil || epoch < 0 {
		return nil, fmt.Errorf("bad %s %q in its meta", ckptEpoch, ck.Meta[ckptEpoch])
	}
	pos.Epoch = epoch
	for _, f := range ints {
		if *f.v, err = strconv.ParseInt(ck.Meta[f.key], 10, 64); err != nil || *f.v < 0 {
			return nil, fmt.Errorf("bad %s %q in its meta", f.key, ck.Meta[f.key])
		}
	}
	if pos.LossSum, err = strconv.ParseFloat(ck.Meta[ckptLossSum], 64); err != nil {
		return nil, fmt.Errorf("bad %s %q in its meta", ckptLossSum, ck.Meta[ckptLossSum])
	}
	if l := ck.Meta[ckptEpochLoss]; l != "" {
		for _, v := range strings.Split(l, ",") {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("bad %s %q in its meta", ckptEpochLoss, l)
			}
			pos.EpochLoss = append(pos.EpochLoss, x)
		}
	}
	return &pos, nil
}

// saveAloneCheckpoint writes the model as it is at pos, with its optimizer
// state, into the checkpoint file, atomically.
func (cfg Config) saveAloneCheckpoint(pos sgd.Position) error {
	m := cfg.Plan.Model
	ck := *m // the same weights and state, with the checkpoint's meta
	ck.Examples = m.Examples + pos.RunExamples
	ck.Meta = maps.Clone(m.Meta)
	if ck.Meta == nil {
		ck.Meta = map[string]string{}
	}
	losses := make([]string, len(pos.EpochLoss))
	for i, l := range pos.EpochLoss {
		losses[i] = strconv.FormatFloat(l, 'g', -1, 64)
	}
	ck.Meta[ckptKind], ck.Meta[ckptBatch] = "standalone", strconv.Itoa(cfg.Batch)
	ck.Meta[ckptEpoch], ck.Meta[ckptRows] = strconv.Itoa(pos.Epoch), strconv.FormatInt(pos.Rows, 10)
	ck.Meta[ckptEpochLoss], ck.Meta[ckptLossSum] = strings.Join(losses, ","), strconv.FormatFloat(pos.LossSum, 'g', -1, 64)
	ck.Meta[ckptEpochExamples] = strconv.FormatInt(pos.Examples, 10)
	path := AloneCheckpointPath(cfg.CheckpointDir)
	if err := ck.SaveFile(path, model.SaveOptions{State: true}); err != nil {
		return fmt.Errorf("--checkpoint-dir: %w", err)
	}
	cfg.Log.Info().Str("file", path).Int("epoch", pos.Epoch+1).Int64("epoch_rows", pos.Rows).Int64("examples", ck.Examples).Msg("checkpoint written")
	return nil
}

// markAlonePartial records in the model's meta that a standalone run
// stopped early, why, and where: the epoch in progress (1-based) and its
// rows trained on (the model's examples count is in its header).
func markAlonePartial(m *model.Model, why string, pos sgd.Position) {
	meta := maps.Clone(m.Meta)
	if meta == nil {
		meta = map[string]string{}
	}
	meta["partial"], meta["stopped"] = "true", why
	meta["stopped_at_epoch"], meta["stopped_at_epoch_rows"] = strconv.Itoa(pos.Epoch+1), strconv.FormatInt(pos.Rows, 10)
	m.Meta = meta
}

// RemoveSaveTemps removes the temporary files a save of each of paths in
// progress leaves beside it (model.SaveFile writes .NAME.tmp-* and renames
// it), for a process about to exit in the middle of one.
func RemoveSaveTemps(paths ...string) {
	for _, p := range paths {
		if p == "" {
			continue
		}
		tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*"))
		for _, t := range tmps {
			os.Remove(t)
		}
	}
}
