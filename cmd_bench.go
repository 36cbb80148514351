package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gossiptrain/gossiptrain/cluster"
	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/report"
)

// benchDefaultFeatures is the feature space of bench's generated data: a
// Criteo-sized hashed space, so that gradient and parameter messages are
// large (tens to hundreds of KiB a round) and the network matters.
const benchDefaultFeatures = 1 << 24

// benchDefaultBatch is bench's batch when --batches is not given: large
// enough that a round's messages are big and few (batches of 100-10,000
// are what field reports of this setup used).
const benchDefaultBatch = 1000

// benchConfig is one configuration bench runs.
type benchConfig struct {
	topology, mode string
	batch          int
}

func (b benchConfig) dirName() string { return fmt.Sprintf("%s-%s-b%d", b.topology, b.mode, b.batch) }

func benchCmd() *command {
	c := newCommand("bench", "run several configurations on the same data and report on them (report.md, bench.json, plots)",
		"[--peers N] [--topologies master,ring] [--modes sync,async] [--batches 1000] [--examples N] [--out DIR] [train flags]")
	var (
		peers       int
		topologies  = defaultList{vals: []string{"master", "ring"}}
		modes       = defaultList{vals: []string{"sync"}}
		batches     = defaultList{vals: []string{strconv.Itoa(benchDefaultBatch)}}
		examples    int64
		out         string
		nf          netFlags
		lf          logFlags
		stopOnError bool
	)
	c.group("Benchmark", func(fs *flag.FlagSet) {
		fs.IntVar(&peers, "peers", 4, "local peer `processes` in every configuration")
		fs.Var(&topologies, "topologies", "`list` of topologies to run: master (every shard on peer 0: the parameter server) and/or ring")
		fs.Var(&modes, "modes", "`list` of modes to run: sync, ssp (with --staleness) and/or async")
		fs.Var(&batches, "batches", "`list` of batch sizes (examples per peer and step) to run, e.g. 1,100,1000,10000")
		fs.Int64Var(&examples, "examples", 1_000_000, "training examples of every configuration (all peers together): the generated data set's\nrows, or whole passes over --train (--epochs) that add up to at least this many")
		fs.StringVar(&out, "out", "", "output `DIR`: data/ (generated), runs/<configuration>/ (reports, logs), report.md,\nbench.json and the plots (default ./gossiptrain-runs/<time>-bench)")
		fs.BoolVar(&stopOnError, "stop-on-error", false, "stop at the first configuration that fails (default: report it and go on)")
	})
	c.group("Network emulation", nf.register)
	tp := registerTrainFlags(c, mergeSkip(clusterSkipFlags, "batch", "topology", "mode", "epochs", "save"))
	c.group("Logging", lf.register)
	c.help = `
Run every combination of --topologies, --modes and --batches as a cluster of
--peers local peers (see 'gossiptrain cluster'), each on the same data and the
same number of training examples, then write DIR/report.md (a summary table,
the master-vs-ring comparison, a table per configuration with every peer's
CPU, memory, network, disk and barrier wait, and the plots), DIR/bench.json
(the same figures) and the plots (PNG and SVG), and print the summary table.

Without --train, a Criteo-like data set of --examples rows (2^24 hashed
features, 39 fields, one file per peer) is generated once into DIR/data and
reused by later runs with the same --out. Every train flag below is passed to
every peer; the peers keep their identities across configurations, so sync
runs of the master and the ring compute bit-identical models.

With --netns --rate 100mbit each peer's link is limited as on a VM with a
100 Mbit/s NIC: the master's link saturates while the ring spreads the
traffic over all links.`
	c.example = `  gossiptrain bench --out bench1
  sudo gossiptrain bench --netns --rate 100mbit --peers 4 --topologies master,ring --modes sync
  gossiptrain bench --modes sync,ssp,async --staleness 4 --batches 100,1000,10000 --examples 2000000`
	c.run = func(c *command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, args[0])
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		if peers < 1 {
			return usageErr("peers", "want at least 1, got %d", peers)
		}
		var cfgs []benchConfig
		for _, t := range topologies.vals {
			if t != "master" && t != "ring" {
				return usageErr("topologies", "%q: want master or ring", t)
			}
			for _, m := range modes.vals {
				if m != "sync" && m != "ssp" && m != "async" {
					return usageErr("modes", "%q: want sync, ssp or async", m)
				}
				for _, b := range batches.vals {
					n, err := strconv.Atoi(b)
					if err != nil || n < 1 {
						return usageErr("batches", "%q is not a batch size (a whole number >= 1)", b)
					}
					cfgs = append(cfgs, benchConfig{topology: t, mode: m, batch: n})
				}
			}
		}
		if len(cfgs) == 0 {
			return usageErr("topologies", "nothing to run: give at least one topology, mode and batch")
		}
		if examples < int64(peers) {
			return usageErr("examples", "want at least one example per peer (%d), got %d", peers, examples)
		}
		netns, err := nf.config(c)
		if err != nil {
			return err
		}
		if out == "" {
			out = defaultRunDir("bench")
		}
		ctx, cancel := signalContext()
		defer cancel()
		if netns != nil {
			if removed, err := cluster.CleanupStale(); err != nil {
				return err
			} else if len(removed) > 0 {
				log.Info().Strs("runs", removed).Msg("removed the namespaces an earlier run left behind")
			}
		}

		// The data: generated once, or the user's, passed whole enough
		// times to make --examples.
		pass := tp.args(perPeerFlags...)
		var split peerSplit
		epochs := 1
		if len(tp.trainPatterns()) == 0 {
			gen := data.DefaultGenConfig()
			gen.Rows, gen.Parts, gen.Seed = examples, peers, 1
			gen.TestRows = min(max(examples/10, 1000), 20_000) // evaluations stay cheap next to training
			gen.Features = benchDefaultFeatures
			if c.set("dim") {
				d, err := strconv.ParseUint(tp.value("dim"), 10, 64)
				if err != nil {
					return usageErr("dim", "%q is not a number", tp.value("dim"))
				}
				gen.Features = d
			}
			m, err := ensureData(filepath.Join(out, "data"), gen, log)
			if err != nil {
				return err
			}
			pass = append(pass, "--train="+strings.Join(m.Files, ","))
			if !c.set("test") {
				pass = append(pass, "--test="+m.TestFile)
			}
			if !c.set("dim") {
				pass = append(pass, "--dim="+strconv.FormatUint(m.Features, 10))
			}
			if split, err = splitData(m.Files, peers); err != nil {
				return err
			}
		} else {
			if split, err = splitData(tp.trainPatterns(), peers); err != nil {
				return err
			}
			pass = append(pass, "--train="+tp.value("train"))
		}
		resolved, job, err := resolveModel(pass, log)
		if err != nil {
			return err
		}
		if len(tp.trainPatterns()) > 0 {
			sr, err := data.Scan(job.trainFiles, job.trainOpt)
			if err != nil {
				return err
			}
			if sr.Rows == 0 {
				return usageErr("train", "the training data has no rows")
			}
			epochs = int((examples + sr.Rows - 1) / sr.Rows)
			log.Info().Int64("rows", sr.Rows).Int("epochs", epochs).Int64("examples", int64(epochs)*sr.Rows).
				Msg("--examples: whole passes over --train")
		}
		common := append(append(withoutFlag(pass, "train"), split.common...), resolved...)
		common = append(common, "--epochs", strconv.Itoa(epochs), "--log-level", lf.level)
		if !c.set("eval-every") {
			// Four evaluations along the way and the final one: the curves
			// of the report. Eval lines count a peer's own examples.
			common = append(common, "--eval-every", strconv.FormatInt(max(examples*int64(epochs)/int64(peers)/4, 1), 10))
		}

		cmdline := strings.Join(os.Args, " ")
		ids := filepath.Join(out, "identities")
		var failures []string
		for k, bc := range cfgs {
			dir := filepath.Join(out, "runs", bc.dirName())
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			cfg := cluster.DefaultConfig()
			cfg.Peers, cfg.Dir, cfg.Identities, cfg.NetNS, cfg.Log = peers, dir, ids, netns, log
			cfg.Job = "bench-" + bc.dirName()
			cfg.TrainArgs = append(append([]string(nil), common...),
				"--topology", bc.topology, "--mode", bc.mode, "--batch", strconv.Itoa(bc.batch))
			cfg.PeerArgs = func(i int) []string { return append(split.own(i), tp.perPeer(i)...) }
			cfg.ProgressEvery = progressEvery(tp)
			log.Info().Str("configuration", bc.dirName()).Int("of", len(cfgs)).Int("n", k+1).Msg("running")
			start := time.Now()
			res, err := cluster.Run(ctx, cfg)
			if err != nil {
				if ctx.Err() != nil {
					return err
				}
				if stopOnError {
					return fmt.Errorf("configuration %s: %w", bc.dirName(), err)
				}
				log.Error().Err(err).Str("configuration", bc.dirName()).Msg("configuration failed; going on with the next")
				failures = append(failures, fmt.Sprintf("configuration %s failed: %s", bc.dirName(), firstLine(err.Error())))
				continue
			}
			log.Info().Str("configuration", bc.dirName()).Str("took", roundDur(time.Since(start)).String()).
				Str("dir", res.Dir).Msg("configuration done")
		}

		files, err := findReports([]string{filepath.Join(out, "runs")})
		if err != nil {
			return err
		}
		var runs []*report.Run
		for _, f := range files {
			r, err := report.ReadFile(f)
			if err != nil {
				return err
			}
			runs = append(runs, r)
		}
		groups, err := report.GroupRuns(runs)
		if err != nil {
			return err
		}
		title := fmt.Sprintf("gossiptrain bench: %d peers", peers)
		if netns != nil {
			title += ", links " + netns.String()
		}
		if err := report.WriteBench(out, groups, report.WithCommand(cmdline), report.WithTitle(title), report.WithWarnings(failures...)); err != nil {
			return fmt.Errorf("--out %s: %w", out, err)
		}
		if err := report.WriteSummaryTable(c.stdout(), report.Summarize(groups)); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout(), "report: %s\n", filepath.Join(out, report.ReportMDFile))
		if len(failures) > 0 {
			return errors.New(strings.Join(failures, "; "))
		}
		return nil
	}
	return c
}

// defaultList is a comma-separated list flag with a default that the
// first value given replaces (a listFlag would append to it); repeated
// values count once.
type defaultList struct {
	vals []string
	set  bool
}

func (l *defaultList) String() string { return strings.Join(l.vals, ",") }

// Get makes --help quote the default like a string flag's.
func (l *defaultList) Get() any { return l.String() }

func (l *defaultList) Set(s string) error {
	if !l.set {
		l.vals, l.set = nil, true
	}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" && !contains(l.vals, p) {
			l.vals = append(l.vals, p)
		}
	}
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
