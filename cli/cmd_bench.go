package cli

import (
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gossiptrain/gossiptrain/cluster"
	"github.com/gossiptrain/gossiptrain/report"
)

// benchDefaultBatch is bench's batch when --batches is not given: large
// enough that a round's messages are big and few (batches of 100-10,000
// are what field reports of this setup used).
const benchDefaultBatch = 1000

func benchCmd() *command {
	c := newCommand("bench", "run several configurations on the same data and report on them (report.md, bench.json, plots)",
		"[--peers N|1,2,4,8] [--cpus C] [--topologies master,ring] [--modes sync,async] [--batches 1000] [--examples N] [--out DIR] [train flags]")
	f := &benchFlags{
		peersList:  defaultList{vals: []string{"4"}},
		topologies: defaultList{vals: []string{"master", "ring"}},
		modes:      defaultList{vals: []string{"sync"}},
		batches:    defaultList{vals: []string{strconv.Itoa(benchDefaultBatch)}},
		localSteps: defaultList{vals: []string{"auto"}},
	}
	c.group("Benchmark", func(fs *flag.FlagSet) {
		fs.Var(&f.peersList, "peers", "local peer `processes` in every configuration, or a list of counts for a scaling series\n(1,2,4,8): 1 is one plain train process alone on all the data, the baseline of the\nreport's speedup and efficiency columns and plot")
		fs.Var(&f.topologies, "topologies", "`list` of topologies to run: master (every shard on peer 0: the parameter server) and/or ring")
		fs.Var(&f.modes, "modes", "`list` of modes to run: sync, ssp (with --staleness) and/or async")
		fs.Var(&f.batches, "batches", "`list` of batch sizes (examples per peer and step) to run, e.g. 1,100,1000,10000")
		fs.Var(&f.localSteps, "local-steps", "`list` of window sizes to run (train's --local-steps: batches a worker trains on its own\ncopy between exchanges), e.g. 1,4,16; 1 exchanges every batch, auto is train's default (2 for more than 5 sync peers, 1 for more than 4 ssp or async ones)")
		fs.Int64Var(&f.examples, "examples", 1_000_000, "training examples of every configuration (all peers together): the generated data set's\nrows, or whole passes over --train (--epochs) that add up to at least this many")
		fs.StringVar(&f.out, "out", "", "output `DIR`: data/ (generated), runs/<configuration>/ (reports, logs), report.md,\nbench.json and the plots (default ./gossiptrain-runs/<time>-bench)")
		fs.BoolVar(&f.stopOnError, "stop-on-error", false, "stop at the first configuration that fails (default: report it and go on)")
		fs.Float64Var(&f.target, "target-logloss", 0, "time every configuration to this test `log-loss` (time to accuracy: the training seconds until\nit first gets there); 0 is one peer alone's final test log-loss plus 0.5% (with --peers 1,N)")
		fs.IntVar(&f.evalPoints, "eval-points", 20, "evaluations of the test set along the way, for the curves and time to accuracy: `N` evenly\nspaced in the training examples (one peer of a cluster evaluates, so the others do not pay\nfor it: in sync it pauses its training meanwhile, in ssp and async it evaluates beside it;\nevery peer evaluates at the end; a run alone pauses for its evaluations; times leave the\npauses and the end of the run out); --eval-every overrides")
		fs.BoolVar(&f.apart, "apart", true, "in a scaling series, also run every peer count as that many plain train processes started at\nonce under the same caps, each on the data one peer trains on, exchanging nothing: what the\nhost gives that many processes (two capped processes share a core and its caches; each pays\nits own start), apart from what the exchange costs. report.md's \"Processes apart\" gives\nthem and each configuration's examples/s over theirs. --apart=false: not run")
		fs.IntVar(&f.repeat, "repeat", 1, "run the whole plan `N` times, interleaved (every configuration once, then all again), and print\neach configuration's examples/s and speedup in every repetition and their median (also in\nDIR/repeats.md): on a shared machine one run moves by 15% or more. report.md is the first\nrepetition's; the others are in DIR/repeats/<k>/")
	})
	c.group("VM emulation", f.cf.register)
	c.group("Network emulation", f.nf.register)
	f.tp = registerTrainFlags(c, skipAlso("batch", "topology", "mode", "epochs", "save", "local-steps"))
	c.group("Logging", f.lf.register)
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
VMs (root; C x N should fit in the machine's cores). Even capped, N processes
on one machine share its caches and memory, and each pays its own start: so
every count N also runs as N plain train processes at once, each on one
peer's data, exchanging nothing (--apart). What they train together over
what one trains alone is what the host gives N processes, and report.md
gives each configuration's examples/s over theirs: the exchange's cost,
apart from the host's.`
	c.example = `  gossiptrain bench --out bench1
  sudo gossiptrain bench --netns --rate 100mbit --peers 4 --topologies master,ring --modes sync
  sudo gossiptrain bench --cpus 0.4 --peers 1,2,4 --modes sync,async --out scaling
  sudo gossiptrain bench --cpus 0.4 --peers 1,2,4 --netns --rate 100mbit --topologies master,ring
  gossiptrain bench --modes sync,ssp,async --staleness 4 --batches 100,1000,10000 --examples 2000000`
	c.run = f.run
	return c
}

// benchVariants are the configurations of --topologies, --modes, --batches
// and --local-steps, every combination of them.
func benchVariants(topologies, modes, batches, localSteps []string) ([]cluster.Variant, error) {
	var vs []cluster.Variant
	for _, t := range topologies {
		if t != "master" && t != "ring" {
			return nil, usageErr("topologies", "%q: want master or ring", t)
		}
		for _, m := range modes {
			if m != "sync" && m != "ssp" && m != "async" {
				return nil, usageErr("modes", "%q: want sync, ssp or async", m)
			}
			for _, b := range batches {
				n, err := strconv.Atoi(b)
				if err != nil || n < 1 {
					return nil, usageErr("batches", "%q is not a batch size (a whole number >= 1)", b)
				}
				for _, hs := range localSteps {
					h := 0 // auto
					if hs != "auto" {
						var err error
						if h, err = strconv.Atoi(hs); err != nil || h < 1 || h > 1<<16 {
							return nil, usageErr("local-steps", "%q is not a window size (auto, or a whole number 1..65536)", hs)
						}
					}
					vs = append(vs, cluster.Variant{Topology: t, Mode: m, Batch: n, LocalSteps: h})
				}
			}
		}
	}
	if len(vs) == 0 {
		return nil, usageErr("topologies", "nothing to run: give at least one topology, mode and batch")
	}
	return vs, nil
}

// checkAccuracyFlags checks cluster's and bench's time-to-accuracy flags:
// --target-logloss and --eval-points.
func checkAccuracyFlags(target float64, points int) error {
	if target < 0 || math.IsNaN(target) || math.IsInf(target, 0) {
		return usageErr("target-logloss", "%v: want a log-loss > 0, or 0 for one peer alone's final plus 0.5%%", target)
	}
	if points < 0 {
		return usageErr("eval-points", "want 0 or more, got %d", points)
	}
	return nil
}

// checkBenchCombine refuses, before anything runs, a --combine that
// one of the window sizes of --local-steps cannot take (mean and capped need
// windows, trimmed one batch), naming both flags; with auto, train's
// own choice fits every size.
func checkBenchCombine(c *command, vs []cluster.Variant) error {
	f := c.flags.Lookup("combine")
	if f == nil {
		return nil
	}
	for _, v := range vs {
		switch comb := f.Value.String(); {
		case comb == "mean" && v.LocalSteps == 1:
			return usageErr("combine", "mean averages windows' changes: --local-steps 1 (exchange every batch) cannot take it; drop 1 from --local-steps or use --combine auto")
		case comb == "capped" && v.LocalSteps == 1:
			return usageErr("combine", "capped combines windows' changes: --local-steps 1 (exchange every batch) cannot take it; drop 1 from --local-steps or use --combine auto")
		case comb == "trimmed" && v.LocalSteps > 1:
			return usageErr("combine", "trimmed combines one batch's gradients: --local-steps %d cannot take it; use --local-steps 1 or auto", v.LocalSteps)
		}
	}
	return nil
}

// parsePeerList parses bench's --peers: one count, or a list of counts
// for a scaling series.
func parsePeerList(vals []string) ([]int, error) {
	var out []int
	for _, v := range vals {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, usageErr("peers", "%q is not a number of peers (a whole number >= 1)", v)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, usageErr("peers", "give at least one number of peers")
	}
	return out, nil
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
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(l.vals, p) {
			l.vals = append(l.vals, p)
		}
	}
	return nil
}

// benchFlags are the flags of bench; run runs it.
type benchFlags struct {
	tp          *trainPass // train's flags, passed to every peer
	peersList   defaultList
	cf          cpuFlags
	topologies  defaultList
	modes       defaultList
	batches     defaultList
	localSteps  defaultList
	examples    int64
	out         string
	nf          netFlags
	lf          logFlags
	stopOnError bool
	repeat      int
	apart       bool
	target      float64
	evalPoints  int
}

func (f *benchFlags) run(c *command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, args[0])
	}
	log, err := f.lf.logger()
	if err != nil {
		return err
	}
	counts, err := parsePeerList(f.peersList.vals)
	if err != nil {
		return err
	}
	// A list of counts is a scaling series: 1 is one plain train
	// process alone, the baseline of every speedup.
	if len(counts) > 1 && !slices.Contains(counts, 1) {
		counts = append(counts, 1)
		log.Info().Msg("--peers: a scaling series runs one peer alone too (1: plain train on all the data), the baseline of its speedups")
	}
	if f.repeat < 1 {
		return usageErr("repeat", "want at least 1, got %d", f.repeat)
	}
	if err := checkAccuracyFlags(f.target, f.evalPoints); err != nil {
		return err
	}
	slices.Sort(counts)
	variants, err := benchVariants(f.topologies.vals, f.modes.vals, f.batches.vals, f.localSteps.vals)
	if err != nil {
		return err
	}
	if err := checkBenchCombine(c, variants); err != nil {
		return err
	}
	if maxPeers := counts[len(counts)-1]; f.examples < int64(maxPeers) {
		return usageErr("examples", "want at least one example per peer (%d), got %d", maxPeers, f.examples)
	}
	caps, err := f.cf.caps(c)
	if err != nil {
		return err
	}
	netns, err := f.nf.config(c)
	if err != nil {
		return err
	}
	if f.out == "" {
		f.out = defaultRunDir("bench")
	}
	if err := checkInputsOutsideRun("out", f.out, f.tp.inputs(), []string{"runs", "repeats"},
		[]string{report.ReportMDFile, report.BenchJSONFile, "*.png", "*.svg"}); err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	return cluster.RunBench(ctx, cluster.BenchConfig{Counts: counts, Variants: variants, Examples: f.examples, Dir: f.out,
		StopOnError: f.stopOnError, Repeat: f.repeat, Apart: f.apart && len(counts) > 1, Target: f.target, EvalPoints: f.evalPoints, Caps: caps, NetNS: netns,
		LogLevel: f.lf.level, Train: f.tp, Log: log, Out: c.stdout(), Cmdline: strings.Join(os.Args, " ")})
}
