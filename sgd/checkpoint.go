package sgd

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gossiptrain/gossiptrain/model"
)

// CheckpointConfig configures checkpoints of a distributed run.
//
// The coordinator picks a round every Every; when a worker reaches it (its
// copy complete through the round before, its own shards' optimizer state
// applied through it), it writes DIR/<peer ID>/round-<R>.gt (the full read
// copy of the weights and the optimizer state of the shards it owns, model
// file format with a checksum) and then DIR/<peer ID>/round-<R>.json (the
// round, configuration, and this worker's position in its data). Both are
// written to a temporary file, synced and renamed, so a crash or a full
// disk leaves the previous checkpoint intact; the .json is written last,
// so a checkpoint without it is incomplete and ignored. Keep checkpoints
// per peer are kept.
//
// Resume restarts a whole job: the coordinator asks every peer for its
// newest complete checkpoint and all resume from the newest round every
// peer has, each from its own files.
type CheckpointConfig struct {
	Dir    string
	Every  time.Duration
	Resume bool
	Keep   int
}

// Validate reports a bad field.
func (c CheckpointConfig) Validate() error {
	switch {
	case c.Every < 0:
		return fmt.Errorf("%w: checkpoint interval %v, want >= 0", ErrConfig, c.Every)
	case (c.Every > 0 || c.Resume) && c.Dir == "":
		return fmt.Errorf("%w: checkpoints need a directory", ErrConfig)
	case c.Keep < 0:
		return fmt.Errorf("%w: keep %d checkpoints, want >= 0", ErrConfig, c.Keep)
	}
	return nil
}

// ErrCheckpoint is wrapped by checkpoint errors.
var ErrCheckpoint = errors.New("checkpoint")

// checkpointMeta is the .json half of a checkpoint.
type checkpointMeta struct {
	Round     uint64   `json:"round"`
	Config    uint64   `json:"config"`
	Members   []string `json:"members"`
	Epoch     int      `json:"epoch"`        // 0-based epoch the worker was reading
	EpochRows int64    `json:"epoch_rows"`   // rows of that epoch already trained on
	Examples  int64    `json:"examples"`     // training examples so far
	Steps     int64    `json:"steps"`        //
	Time      string   `json:"time"`         // RFC 3339
	Shards    []int    `json:"owned_shards"` // shards whose optimizer state the .gt holds
	// Replicas are the shards this peer held as a replica (--replicas 2);
	// their weights and optimizer state are in the .replicas file.
	Replicas []int `json:"replica_shards,omitempty"`
}

// peerDir is this peer's checkpoint directory.
func (d *Dist) peerDir() string { return filepath.Join(d.cfg.Checkpoint.Dir, d.cfg.Self) }

// maybeCheckpoint writes the checkpoint of the announced round when this
// worker is about to compute it. A failure is logged and counted, never
// fatal: training goes on and the previous checkpoint stays.
//
// pending is the number of rows of the batch about to be trained on (read,
// so counted in the epoch's rows, but not in the checkpoint).
func (d *Dist) maybeCheckpoint(pending int) error {
	if d.cfg.Checkpoint.Dir == "" || d.ckptRound == 0 || d.ckptRound <= d.ckptDone || d.clock < d.ckptRound {
		return nil
	}
	r := d.clock
	d.ckptDone = d.ckptRound
	start := time.Now()
	if err := d.writeCheckpoint(r, int64(pending)); err != nil {
		d.log.Error().Err(err).Uint64("round", r).Msg("checkpoint failed; the previous one is kept and training goes on")
		return nil
	}
	d.dsum.Checkpoints++
	d.log.Info().Uint64("round", r).Str("dir", d.peerDir()).Dur("took", time.Since(start)).Msg("checkpoint written")
	return nil
}

// writeCheckpoint writes the checkpoint of round r.
func (d *Dist) writeCheckpoint(r uint64, pending int64) error {
	dir := d.peerDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	base := filepath.Join(dir, fmt.Sprintf("round-%d", r))
	var repl []int
	if d.shadow != nil {
		repl = d.shadow.Owned(nil)
	}
	if len(repl) > 0 && d.cfg.Mode == Sync && d.nextApply < r {
		// A peer that is only a replica does not wait for its own applies
		// before computing the next round; its replicas must be as of
		// round r-1 like every primary's state.
		return fmt.Errorf("%w: replica shards applied through round %d, not %d yet", ErrCheckpoint, d.nextApply, r)
	}
	if err := d.m.SaveFile(base+".gt", model.SaveOptions{State: true}); err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if len(repl) > 0 {
		if err := writeFileAtomic(base+".replicas", appendReplicas(nil, d.shadow, repl)); err != nil {
			return fmt.Errorf("%w: %w", ErrCheckpoint, err)
		}
	}
	meta := checkpointMeta{Round: r, Config: d.cs.cur().id, Members: d.cs.cur().members,
		Epoch: d.t.epoch, EpochRows: d.t.epochRows - pending, Examples: d.t.sum.Examples, Steps: d.t.sum.Steps,
		Time: time.Now().UTC().Format(time.RFC3339), Shards: d.m.Owned(nil), Replicas: repl}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(base+".json", b); err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	d.pruneCheckpoints()
	return nil
}

// writeFileAtomic writes b to path through a synced temporary file in the
// same directory and a rename; on error the old file stays.
func writeFileAtomic(path string, b []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(b); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// checkpointRounds lists the complete checkpoints in dir, newest first.
func checkpointRounds(dir string) []uint64 {
	ents, _ := os.ReadDir(dir)
	var rounds []uint64
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "round-") || !strings.HasSuffix(name, ".json") {
			continue
		}
		r, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "round-"), ".json"), 10, 64)
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("round-%d.gt", r))); err == nil {
			rounds = append(rounds, r)
		}
	}
	slices.Sort(rounds)
	slices.Reverse(rounds)
	return rounds
}

// pruneCheckpoints keeps the newest Keep checkpoints (at least 2).
func (d *Dist) pruneCheckpoints() {
	keep := max(d.cfg.Checkpoint.Keep, 2)
	rounds := checkpointRounds(d.peerDir())
	for _, r := range rounds[min(keep, len(rounds)):] {
		base := filepath.Join(d.peerDir(), fmt.Sprintf("round-%d", r))
		os.Remove(base + ".json")
		os.Remove(base + ".gt")
		os.Remove(base + ".replicas")
	}
}

// resumeRound is the newest complete checkpoint round of this peer when
// resuming (0: none, or not resuming).
func (d *Dist) resumeRound() uint64 {
	if !d.cfg.Checkpoint.Resume {
		return 0
	}
	if r := checkpointRounds(d.peerDir()); len(r) > 0 {
		return r[0]
	}
	return 0
}

// agreeResume picks the round a whole job resumes from: the newest round
// every peer has (peers keep two, and a crash during a checkpoint leaves
// some a round behind).
func (d *Dist) agreeResume(others []uint64) (uint64, error) {
	mine := checkpointRounds(d.peerDir())
	if len(mine) == 0 {
		return 0, fmt.Errorf("%w: --resume: no complete checkpoint in %s", ErrCheckpoint, d.peerDir())
	}
	r := mine[0]
	for i, o := range others {
		if o == 0 {
			return 0, fmt.Errorf("%w: --resume: peer %d of the job has no checkpoint (each peer resumes from its own files in %s/<peer ID>)", ErrCheckpoint, i+1, d.cfg.Checkpoint.Dir)
		}
		r = min(r, o)
	}
	if !slices.Contains(mine, r) {
		return 0, fmt.Errorf("%w: --resume: peers' newest checkpoints (round %d here, %d elsewhere) have no round in common", ErrCheckpoint, mine[0], r)
	}
	return r, nil
}

// loadCheckpoint loads this peer's checkpoint of round r into the model
// and the trainer.
func (d *Dist) loadCheckpoint(r uint64) error {
	base := filepath.Join(d.peerDir(), fmt.Sprintf("round-%d", r))
	b, err := os.ReadFile(base + ".json")
	if err != nil {
		return fmt.Errorf("%w: --resume from round %d: %w", ErrCheckpoint, r, err)
	}
	var meta checkpointMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return fmt.Errorf("%w: %s.json: %w", ErrCheckpoint, base, err)
	}
	saved, err := model.LoadFile(base + ".gt")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if !saved.Layout.Equal(d.m.Layout) || saved.Kind != d.m.Kind || saved.Opt.Kind != d.m.Opt.Kind {
		return fmt.Errorf("%w: %s.gt holds another model (%s, %v) than this run's (%s, %v)", ErrCheckpoint, base, saved.Kind, saved.Layout, d.m.Kind, d.m.Layout)
	}
	copy(d.m.W, saved.W)
	for s := range saved.State {
		if saved.State[s] != nil {
			d.m.Own(s)
			copy(d.m.State[s], saved.State[s])
		}
	}
	d.m.Steps = saved.Steps
	if len(meta.Replicas) > 0 {
		b, err := os.ReadFile(base + ".replicas")
		if err != nil {
			return fmt.Errorf("%w: %s.json lists replica shards: %w", ErrCheckpoint, base, err)
		}
		if err := loadReplicas(d.shadowModel(), b, meta.Replicas); err != nil {
			return fmt.Errorf("%w: %s.replicas: %w", ErrCheckpoint, base, err)
		}
	}
	d.t.epoch, d.t.skipRows = meta.Epoch, meta.EpochRows
	d.t.sum.Examples, d.t.sum.Steps = meta.Examples, meta.Steps
	d.ckptDone = r
	d.dsum.ResumedAt = r
	d.log.Info().Uint64("round", r).Int("epoch", meta.Epoch+1).Int64("examples", meta.Examples).Msg("resumed from checkpoint")
	return nil
}

// appendReplicas appends the replica file of shards held by m: for each
// shard, uvarint shard number, uvarint length, then the shard's export
// (Model.AppendShard with state, which carries its own checksum).
func appendReplicas(dst []byte, m *model.Model, shards []int) []byte {
	var exp []byte
	for _, s := range shards {
		exp = m.AppendShard(exp[:0], s, true)
		dst = binary.AppendUvarint(dst, uint64(s))
		dst = binary.AppendUvarint(dst, uint64(len(exp)))
		dst = append(dst, exp...)
	}
	return dst
}

// loadReplicas loads a replica file into m (the shadow model), which then
// owns exactly the shards listed in want.
func loadReplicas(m *model.Model, b []byte, want []int) error {
	var got []int
	for len(b) > 0 {
		s, k := binary.Uvarint(b)
		if k <= 0 || s >= uint64(len(m.State)) {
			return fmt.Errorf("%w: bad shard number after %d shards", model.ErrCorrupt, len(got))
		}
		b = b[k:]
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return fmt.Errorf("%w: shard %d: length %d past the end", model.ErrCorrupt, s, n)
		}
		if err := m.LoadShard(int(s), b[k:k+int(n)]); err != nil {
			if !errors.Is(err, model.ErrCorrupt) {
				err = fmt.Errorf("%w: %w", model.ErrCorrupt, err)
			}
			return fmt.Errorf("shard %d: %w", s, err)
		}
		if !m.Owns(int(s)) {
			return fmt.Errorf("%w: shard %d saved without its optimizer state", model.ErrCorrupt, s)
		}
		got = append(got, int(s))
		b = b[k+int(n):]
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("%w: holds shards %v, the .json lists %v", model.ErrCorrupt, got, want)
	}
	return nil
}
