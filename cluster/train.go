package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/human"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/model"
)

// TrainFlags are train's flags as the cluster, bench or launch command line
// gave them: what the user sets there passes to every peer's train. The
// command line implements it (it knows train's flags); RunLocal, RunBench
// and RunLaunch read it.
type TrainFlags interface {
	// Args are the flags the user set, as --name=value, except those
	// named in leave; LocalArgs only those a plain train (no --job, the
	// baseline) takes: its Data, Model and Run flags.
	Args(leave ...string) []string
	LocalArgs(leave ...string) []string
	// Value is a flag's value ("" when it is not one of train's flags
	// here); Set says whether the user set it.
	Value(name string) string
	Set(name string) bool
	// Resolve runs train's own checks and inference (infer.Prepare) on a
	// train command line.
	Resolve(args []string, log zerolog.Logger) (*infer.Plan, error)
}

// perPeerFlags are pass-through flags whose value each peer needs a
// version of its own, so they are not passed as they are (see perPeer).
var perPeerFlags = []string{"train", "metrics-addr", "cache"}

// trainPatterns are --train's patterns (none: generate the data).
func trainPatterns(tf TrainFlags) []string {
	if v := tf.Value("train"); v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

// perPeer returns peer i's own versions of the per-peer flags: its
// --metrics-addr HOST:PORT+i (HOST:0, a free port, stays as it is) and its
// --cache FILE.peerI (peers must not share a cache file).
func perPeer(tf TrainFlags, i int) []string {
	var a []string
	if tf.Set("metrics-addr") {
		addr := tf.Value("metrics-addr")
		if host, port, err := splitHostPort(addr); err == nil && port != 0 {
			addr = host + ":" + strconv.Itoa(port+i)
		}
		a = append(a, "--metrics-addr", addr)
	}
	if tf.Set("cache") {
		a = append(a, "--cache", fmt.Sprintf("%s.peer%d", tf.Value("cache"), i))
	}
	return a
}

func splitHostPort(addr string) (string, int, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", 0, errors.New("no port")
	}
	p, err := strconv.Atoi(addr[i+1:])
	return addr[:i], p, err
}

// baselineCache is the baseline's --cache: its own file, since it reads
// all the data where each peer reads its part.
func baselineCache(tf TrainFlags) []string {
	if tf.Set("cache") {
		return []string{"--cache", tf.Value("cache") + ".alone"}
	}
	return nil
}

// progressEvery is the peers' --progress-every, which the combined progress
// line follows too.
func progressEvery(tf TrainFlags) time.Duration {
	d, err := time.ParseDuration(tf.Value("progress-every"))
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

// withoutFlag drops --name=value entries from args.
func withoutFlag(args []string, name string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "--"+name+"=") {
			out = append(out, a)
		}
	}
	return out
}

// resolveModel runs train's own checks and inference once, here, on the
// pass-through flags (the model kind, dimension, classes and --l2 auto, from
// one scan of all the training files) and returns the flags that make every
// peer build exactly that model, so peers that read different files agree.
func resolveModel(tf TrainFlags, args []string, log zerolog.Logger) ([]string, *infer.Plan, error) {
	plan, err := tf.Resolve(args, log)
	if err != nil {
		return nil, nil, err
	}
	m := plan.Model
	out := []string{"--model", m.Kind.String(), "--dim", strconv.FormatUint(m.Dim, 10),
		"--shards", strconv.Itoa(m.Layout.Shards), "--l2", strconv.FormatFloat(m.Opt.L2, 'g', -1, 64)}
	if m.Kind.Multiclass() {
		out = append(out, "--classes", strconv.Itoa(m.Classes), "--label-base", strconv.FormatInt(m.LabelBase, 10))
	}
	if m.Kind == model.MLP {
		out = append(out, "--hidden", strconv.Itoa(m.Hidden))
	}
	plan.Model = nil // the peers build their own; this one was only for the checks
	return out, plan, nil
}

// DefaultData is the data set cluster (and launch) generates when given no
// --train: small enough that 4 peers train it in well under a minute on 2
// cores, large enough for a model to learn (test log-loss within a few
// percent of the planted model's).
func DefaultData() data.GenConfig {
	cfg := data.DefaultGenConfig()
	cfg.Rows = 200_000
	cfg.TestRows = 20_000
	cfg.Features = 1 << 20
	cfg.Fields = 39
	cfg.Seed = 1
	return cfg
}

// ensureData generates cfg into dir unless dir already holds it.
func ensureData(dir string, cfg data.GenConfig, log zerolog.Logger) (data.GenMeta, error) {
	if m, err := data.ReadGenMeta(filepath.Join(dir, "meta.json")); err == nil &&
		m.Rows == cfg.Rows && m.TestRows == cfg.TestRows && m.Features == cfg.Features &&
		m.Fields == cfg.Fields && m.Seed == cfg.Seed && len(m.Files) == cfg.Parts {
		log.Info().Str("dir", dir).Msg("reusing the generated data set")
		return m, nil
	}
	start := time.Now()
	log.Info().Str("dir", dir).Int64("rows", cfg.Rows).Int64("test_rows", cfg.TestRows).
		Uint64("features", cfg.Features).Int("parts", cfg.Parts).Msg("generating a synthetic data set (gossiptrain gen)")
	m, err := data.Generate(dir, cfg, nil)
	if err != nil {
		return m, err
	}
	log.Info().Float64("planted_test_logloss", human.Round4(m.PlantedTestLogLoss)).Str("took", human.Duration(time.Since(start)).String()).
		Msg("data set written")
	return m, nil
}

// Caps are the VM emulation of cluster and bench: every peer capped at
// CPUs cores (0: uncapped), bound to its own CPUs unless Unpinned (see
// Config.CPUs and Config.Unpinned).
type Caps struct {
	CPUs     float64
	Unpinned bool
}

// apply sets the cap and the binding in cfg.
func (c Caps) apply(cfg *Config) {
	cfg.CPUs, cfg.Unpinned = c.CPUs, c.Unpinned
}

// Describe is how the cap reads in titles and tables.
func (c Caps) Describe() string {
	if c.CPUs <= 0 {
		return "uncapped"
	}
	return fmt.Sprintf("each capped at %g cores", c.CPUs)
}

// runBaseline runs one plain train process (no --job: training alone) in
// dir with args, capped like the peers: the one-peer baseline a cluster's
// throughput is compared with.
func runBaseline(ctx context.Context, dir string, args []string, caps Caps, every time.Duration, log zerolog.Logger) (*Result, error) {
	cfg := DefaultConfig()
	cfg.Peers, cfg.Dir, cfg.Job, cfg.Log = 1, dir, "baseline", log
	cfg.Standalone = true
	caps.apply(&cfg)
	cfg.TrainArgs = args
	cfg.ProgressEvery = every
	log.Info().Str("dir", dir).Float64("cpus", caps.CPUs).Msg("one peer alone: plain train on all the data (the baseline)")
	return Run(ctx, cfg)
}
