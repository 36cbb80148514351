package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
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
	localSteps     int // batches a window (1: a gradient every batch)
}

func (b benchConfig) dirName() string {
	name := fmt.Sprintf("%s-%s-b%d", b.topology, b.mode, b.batch)
	switch {
	case b.localSteps == 0:
		name += "-hauto"
	case b.localSteps > 1:
		name += fmt.Sprintf("-h%d", b.localSteps)
	}
	return name
}

func benchCmd() *command {
	c := newCommand("bench", "run several configurations on the same data and report on them (report.md, bench.json, plots)",
		"[--peers N|1,2,4,8] [--cpus C] [--topologies master,ring] [--modes sync,async] [--batches 1000] [--examples N] [--out DIR] [train flags]")
	var (
		peersList   = defaultList{vals: []string{"4"}}
		cf          cpuFlags
		topologies  = defaultList{vals: []string{"master", "ring"}}
		modes       = defaultList{vals: []string{"sync"}}
		batches     = defaultList{vals: []string{strconv.Itoa(benchDefaultBatch)}}
		localSteps  = defaultList{vals: []string{"auto"}}
		examples    int64
		out         string
		nf          netFlags
		lf          logFlags
		stopOnError bool
		repeat      int
		target      float64
		evalPoints  int
	)
	c.group("Benchmark", func(fs *flag.FlagSet) {
		fs.Var(&peersList, "peers", "local peer `processes` in every configuration, or a list of counts for a scaling series\n(1,2,4,8): 1 is one plain train process alone on all the data, the baseline of the\nreport's speedup and efficiency columns and plot")
		fs.Var(&topologies, "topologies", "`list` of topologies to run: master (every shard on peer 0: the parameter server) and/or ring")
		fs.Var(&modes, "modes", "`list` of modes to run: sync, ssp (with --staleness) and/or async")
		fs.Var(&batches, "batches", "`list` of batch sizes (examples per peer and step) to run, e.g. 1,100,1000,10000")
		fs.Var(&localSteps, "local-steps", "`list` of window sizes to run (train's --local-steps: batches a worker trains on its own\ncopy between exchanges), e.g. 1,4,16; 1 exchanges every batch, auto is train's default")
		fs.Int64Var(&examples, "examples", 1_000_000, "training examples of every configuration (all peers together): the generated data set's\nrows, or whole passes over --train (--epochs) that add up to at least this many")
		fs.StringVar(&out, "out", "", "output `DIR`: data/ (generated), runs/<configuration>/ (reports, logs), report.md,\nbench.json and the plots (default ./gossiptrain-runs/<time>-bench)")
		fs.BoolVar(&stopOnError, "stop-on-error", false, "stop at the first configuration that fails (default: report it and go on)")
		fs.Float64Var(&target, "target-logloss", 0, "time every configuration to this test `log-loss` (time to accuracy: the training seconds until\nit first gets there); 0 is one peer alone's final test log-loss plus 0.5% (with --peers 1,N)")
		fs.IntVar(&evalPoints, "eval-points", 20, "evaluations of the test set along the way, for the curves and time to accuracy: `N` evenly\nspaced in the training examples (one peer of a cluster evaluates, so the others do not pay\nfor it; every peer evaluates at the end); --eval-every overrides")
		fs.IntVar(&repeat, "repeat", 1, "run the whole plan `N` times, interleaved (every configuration once, then all again), and print\neach configuration's examples/s and speedup in every repetition and their median (also in\nDIR/repeats.md): on a shared machine one run moves by 15% or more. report.md is the first\nrepetition's; the others are in DIR/repeats/<k>/")
	})
	c.group("VM emulation", cf.register)
	c.group("Network emulation", nf.register)
	tp := registerTrainFlags(c, mergeSkip(clusterSkipFlags, "batch", "topology", "mode", "epochs", "save", "local-steps"))
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
traffic over all links.

Measuring scaling: --peers 1,2,4,8 runs every configuration at each of
these peer counts, and 1 as one plain 'gossiptrain train' process on all the
data (the same data the peers split among themselves): the report then gives
each run's speedup (its examples/s over that one peer's), efficiency
(speedup / peers) and the bytes a peer received per example it trained, and
plots speedup against peers with the ideal line. On one machine peers share
its cores, so N uncapped peers on 2 cores measure nothing: give --cpus C to
cap every peer (and the lone peer) at C cores with a cgroup, as on N equal
VMs (root; C x N should fit in the machine's cores).`
	c.example = `  gossiptrain bench --out bench1
  sudo gossiptrain bench --netns --rate 100mbit --peers 4 --topologies master,ring --modes sync
  sudo gossiptrain bench --cpus 0.4 --peers 1,2,4 --modes sync,async --out scaling
  sudo gossiptrain bench --cpus 0.4 --peers 1,2,4 --netns --rate 100mbit --topologies master,ring
  gossiptrain bench --modes sync,ssp,async --staleness 4 --batches 100,1000,10000 --examples 2000000`
	c.run = func(c *command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, args[0])
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		counts, err := parsePeerList(peersList.vals)
		if err != nil {
			return err
		}
		// A list of counts is a scaling series: 1 is one plain train
		// process alone, the baseline of every speedup.
		series := len(counts) > 1
		if series && !containsInt(counts, 1) {
			counts = append(counts, 1)
			log.Info().Msg("--peers: a scaling series runs one peer alone too (1: plain train on all the data), the baseline of its speedups")
		}
		if repeat < 1 {
			return usageErr("repeat", "want at least 1, got %d", repeat)
		}
		if target < 0 || math.IsNaN(target) || math.IsInf(target, 0) {
			return usageErr("target-logloss", "%v: want a log-loss > 0, or 0 for one peer alone's final plus 0.5%%", target)
		}
		if evalPoints < 0 {
			return usageErr("eval-points", "want 0 or more, got %d", evalPoints)
		}
		slices.Sort(counts)
		clusterCounts := counts
		if series {
			clusterCounts = counts[1:]
		}
		maxPeers := counts[len(counts)-1]
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
					for _, hs := range localSteps.vals {
						h := 0 // auto
						if hs != "auto" {
							var err error
							if h, err = strconv.Atoi(hs); err != nil || h < 1 || h > 1<<16 {
								return usageErr("local-steps", "%q is not a window size (auto, or a whole number 1..65536)", hs)
							}
						}
						cfgs = append(cfgs, benchConfig{topology: t, mode: m, batch: n, localSteps: h})
					}
				}
			}
		}
		if len(cfgs) == 0 {
			return usageErr("topologies", "nothing to run: give at least one topology, mode and batch")
		}
		if examples < int64(maxPeers) {
			return usageErr("examples", "want at least one example per peer (%d), got %d", maxPeers, examples)
		}
		if err := cf.check(c); err != nil {
			return err
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
		local := tp.localArgs(perPeerFlags...) // what a plain train (the baseline) takes of them
		var trainPats []string
		epochs := 1
		if len(tp.trainPatterns()) == 0 {
			gen := data.DefaultGenConfig()
			gen.Rows, gen.Parts, gen.Seed = examples, maxPeers, 1
			if series {
				gen.Parts = seriesParts(counts, examples) // whole files for every count
			}
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
			trainPats = m.Files
			var extra []string
			if !c.set("test") {
				extra = append(extra, "--test="+m.TestFile)
			}
			if !c.set("dim") {
				extra = append(extra, "--dim="+strconv.FormatUint(m.Features, 10))
			}
			pass = append(append(pass, "--train="+strings.Join(m.Files, ",")), extra...)
			local = append(local, extra...)
		} else {
			trainPats = tp.trainPatterns()
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
		// runFlags are the flags of a run of n peers (or one alone).
		runFlags := func(n int) []string {
			a := append(append([]string(nil), resolved...), "--epochs", strconv.Itoa(epochs), "--log-level", lf.level)
			if !c.set("eval-every") && evalPoints > 0 {
				// evalPoints evaluations along the way and the final one:
				// the curves of the report and the time to accuracy. Eval
				// lines count a peer's own examples.
				a = append(a, "--eval-every", strconv.FormatInt(max(examples*int64(epochs)/int64(n)/int64(evalPoints), 1), 10))
			}
			return a
		}
		// evalOnlyFirst: in a cluster only peer 0 evaluates along the way
		// (its model is every peer's in sync, and a good estimate in ssp
		// and async); the others evaluate once, at the end, so the
		// cluster pays for one peer's evaluations as the lone peer does.
		evalOnlyFirst := func(i int) []string {
			if i == 0 || c.set("eval-every") {
				return nil
			}
			return []string{"--eval-every", "0"}
		}
		splits := map[int]peerSplit{}
		for _, n := range clusterCounts {
			if splits[n], err = splitData(trainPats, n); err != nil {
				return err
			}
		}

		// The plan: the baselines first, then every configuration at every
		// peer count.
		type benchRun struct {
			peers int
			bc    benchConfig
			alone bool // the baseline: one plain train process
		}
		var plan []benchRun
		if series {
			for _, b := range batches.vals {
				n, _ := strconv.Atoi(b)
				plan = append(plan, benchRun{peers: 1, bc: benchConfig{topology: "single", mode: "local", batch: n}, alone: true})
			}
		}
		for _, n := range clusterCounts {
			for _, bc := range cfgs {
				plan = append(plan, benchRun{peers: n, bc: bc})
			}
		}
		dirName := func(r benchRun) string {
			switch {
			case r.alone:
				return fmt.Sprintf("single-b%d", r.bc.batch)
			case series:
				return fmt.Sprintf("%s-%dp", r.bc.dirName(), r.peers)
			}
			return r.bc.dirName()
		}

		cmdline := strings.Join(os.Args, " ")
		ids := filepath.Join(out, "identities")
		var failures []string
		var ran []string // this invocation's run directories, of the first repetition
		repDirs := make([][]string, repeat)
		if err := os.RemoveAll(filepath.Join(out, "repeats")); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		for n := range repeat * len(plan) {
			rep, k := n/len(plan), n%len(plan)
			r := plan[k]
			name := dirName(r)
			dir := filepath.Join(out, "runs", name)
			if rep > 0 {
				dir = filepath.Join(out, "repeats", strconv.Itoa(rep+1), name)
			}
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			ev := log.Info().Str("configuration", name).Int("peers", r.peers).Int("of", repeat*len(plan)).Int("n", n+1)
			if repeat > 1 {
				ev = ev.Int("repetition", rep+1)
			}
			ev.Msg("running")
			start := time.Now()
			var res *cluster.Result
			var err error
			if r.alone {
				args := append(append(append([]string(nil), local...), "--train="+strings.Join(trainPats, ",")), runFlags(1)...)
				args = append(append(args, "--batch", strconv.Itoa(r.bc.batch)), tp.baselineCache()...)
				res, err = runBaseline(ctx, dir, args, cf, progressEvery(tp), log)
			} else {
				split := splits[r.peers]
				cfg := cluster.DefaultConfig()
				cfg.Peers, cfg.Dir, cfg.Identities, cfg.NetNS, cfg.Log = r.peers, dir, ids, netns, log
				cf.apply(&cfg)
				cfg.Job = "bench-" + name
				cfg.TrainArgs = append(append(append(withoutFlag(pass, "train"), split.common...), runFlags(r.peers)...),
					"--topology", r.bc.topology, "--mode", r.bc.mode, "--batch", strconv.Itoa(r.bc.batch),
					"--local-steps", localStepsArg(r.bc.localSteps))
				cfg.PeerArgs = func(i int) []string { return append(append(split.own(i), tp.perPeer(i)...), evalOnlyFirst(i)...) }
				cfg.ProgressEvery = progressEvery(tp)
				res, err = cluster.Run(ctx, cfg)
			}
			if rep == 0 {
				ran = append(ran, dir)
			}
			repDirs[rep] = append(repDirs[rep], dir)
			if err != nil {
				if ctx.Err() != nil {
					return err
				}
				if stopOnError {
					return fmt.Errorf("configuration %s: %w", name, err)
				}
				log.Error().Err(err).Str("configuration", name).Msg("configuration failed; going on with the next")
				what := name
				if repeat > 1 {
					what = fmt.Sprintf("%s (repetition %d)", name, rep+1)
				}
				failures = append(failures, fmt.Sprintf("configuration %s failed: %s", what, firstLine(err.Error())))
				continue
			}
			log.Info().Str("configuration", name).Str("took", roundDur(time.Since(start)).String()).
				Str("dir", res.Dir).Msg("configuration done")
		}

		var groups []*report.Config
		if series {
			// Each run on its own: the same configuration at several peer
			// counts. Only this invocation's runs, so every speedup is
			// against the baseline measured here.
			var sets [][]*report.Run
			for _, dir := range ran {
				if _, err := os.Stat(dir); err != nil {
					continue // the run failed before it started
				}
				runs, err := readReports(dir)
				if err != nil {
					return err
				}
				if len(runs) > 0 {
					sets = append(sets, runs)
				}
			}
			if groups, err = report.GroupSeries(sets); err != nil {
				return err
			}
		} else {
			runs, err := readReports(filepath.Join(out, "runs"))
			if err != nil {
				return err
			}
			if groups, err = report.GroupRuns(runs); err != nil {
				return err
			}
		}
		if len(groups) == 0 {
			return errors.New(strings.Join(failures, "; "))
		}
		summarize := func(g []*report.Config) []report.BenchConfig {
			bs := report.Summarize(g)
			if target > 0 {
				report.AddTimeToTarget(bs, target, 0)
			}
			return bs
		}
		title := fmt.Sprintf("gossiptrain bench: %d peers", maxPeers)
		if series {
			title = fmt.Sprintf("gossiptrain bench: scaling series of %s peers", joinInts(counts))
		}
		if cf.cpus > 0 {
			title += ", " + cf.describe()
		}
		if netns != nil {
			title += ", links " + netns.String()
		}
		if err := report.WriteBench(out, groups, report.WithCommand(cmdline), report.WithTitle(title), report.WithWarnings(failures...), report.WithTarget(target)); err != nil {
			return fmt.Errorf("--out %s: %w", out, err)
		}
		if err := report.WriteSummaryTable(c.stdout(), summarize(groups)); err != nil {
			return err
		}
		if repeat > 1 {
			reps := make([][]report.BenchConfig, repeat)
			for i, dirs := range repDirs {
				if reps[i], err = summarizeRuns(dirs, series, target); err != nil {
					return err
				}
			}
			var md bytes.Buffer
			writeRepeats(&md, reps)
			fmt.Fprintf(c.stdout(), "\n%s", md.String())
			path := filepath.Join(out, "repeats.md")
			if err := os.WriteFile(path, []byte("# "+title+": repetitions\n\nCommand: `"+cmdline+"`\n\n"+md.String()), 0o644); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			fmt.Fprintf(c.stdout(), "repetitions: %s\n", path)
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

// summarizeRuns summarizes one repetition's run directories (a scaling
// series groups each run on its own, as the main report does).
func summarizeRuns(dirs []string, series bool, target float64) ([]report.BenchConfig, error) {
	var sets [][]*report.Run
	var all []*report.Run
	for _, dir := range dirs {
		if _, err := os.Stat(dir); err != nil {
			continue // the run failed before it started
		}
		runs, err := readReports(dir)
		if err != nil {
			return nil, err
		}
		if len(runs) > 0 {
			sets = append(sets, runs)
			all = append(all, runs...)
		}
	}
	var groups []*report.Config
	var err error
	if series {
		groups, err = report.GroupSeries(sets)
	} else {
		groups, err = report.GroupRuns(all)
	}
	if err != nil {
		return nil, err
	}
	bs := report.Summarize(groups)
	if target > 0 {
		report.AddTimeToTarget(bs, target, 0)
	}
	return bs, nil
}

// writeRepeats writes, for each configuration of the first repetition,
// its examples/s in every repetition and their median, likewise its
// speedup when the runs have a baseline, and its steady-state rounds/s
// (report.RoundTimes) when the runs have round lines. A configuration
// missing from a repetition (it failed there) shows "-" and counts in no
// median.
func writeRepeats(w io.Writer, reps [][]report.BenchConfig) {
	fmt.Fprintf(w, "Every configuration in each of %d interleaved repetitions, and the median:\n\n", len(reps))
	speedup := func(b report.BenchConfig) float64 {
		if b.Baseline == "" {
			return math.NaN()
		}
		return float64(b.Speedup)
	}
	toTarget := func(b report.BenchConfig) float64 {
		if b.Baseline == "" {
			return math.NaN()
		}
		return float64(b.SpeedupToTarget)
	}
	steady := func(b report.BenchConfig) float64 {
		if !(b.Steady > 0) { // NaN: too few round lines (a plain train); 0: none summarized
			return math.NaN()
		}
		return float64(b.Steady)
	}
	columns := []struct {
		title  string
		value  func(report.BenchConfig) float64
		format func(float64) string
	}{
		{"examples/s", func(b report.BenchConfig) float64 { return float64(b.ExamplesPerSec) }, humanCount},
		{"speedup", speedup, func(v float64) string { return fmt.Sprintf("%.2f", v) }},
		{"speedup to target", toTarget, func(v float64) string { return fmt.Sprintf("%.2f", v) }},
		{"steady rounds/s", steady, func(v float64) string { return fmt.Sprintf("%.1f", v) }},
	}
	// A column shows when some configuration of the first repetition has it.
	shown := columns[:1]
	for _, c := range columns[1:] {
		if slices.ContainsFunc(reps[0], func(b report.BenchConfig) bool { return !math.IsNaN(c.value(b)) }) {
			shown = append(shown, c)
		}
	}
	fmt.Fprint(w, "| configuration |")
	for _, c := range shown {
		fmt.Fprintf(w, " %s | median |", c.title)
	}
	fmt.Fprint(w, "\n|---|")
	for range shown {
		fmt.Fprint(w, "---|---:|")
	}
	fmt.Fprintln(w)
	for _, b := range reps[0] {
		fmt.Fprintf(w, "| %s |", b.Name)
		for _, c := range shown {
			var cells []string
			var vs []float64
			for _, rep := range reps {
				i := slices.IndexFunc(rep, func(o report.BenchConfig) bool { return o.Name == b.Name })
				v := math.NaN()
				if i >= 0 {
					v = c.value(rep[i])
				}
				if math.IsNaN(v) {
					cells = append(cells, "-")
					continue
				}
				cells = append(cells, c.format(v))
				vs = append(vs, v)
			}
			m := "-"
			if len(vs) > 0 {
				m = c.format(report.Median(vs))
			}
			fmt.Fprintf(w, " %s | %s |", strings.Join(cells, ", "), m)
		}
		fmt.Fprintln(w)
	}
}

// readReports reads every report file under dir.
func readReports(dir string) ([]*report.Run, error) {
	files, err := findReports([]string{dir})
	if err != nil {
		return nil, err
	}
	var runs []*report.Run
	for _, f := range files {
		r, err := report.ReadFile(f)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// localStepsArg is train's --local-steps for a window size (0: auto).
func localStepsArg(h int) string {
	if h == 0 {
		return "auto"
	}
	return strconv.Itoa(h)
}
