package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/human"
	"github.com/gossiptrain/gossiptrain/report"
	"github.com/gossiptrain/gossiptrain/usage"
)

// BenchFeatures is the feature space of bench's generated data: a
// Criteo-sized hashed space, so that gradient and parameter messages are
// large (tens to hundreds of KiB a round) and the network matters.
const BenchFeatures = 1 << 24

// Variant is one configuration bench runs at every peer count.
type Variant struct {
	Topology, Mode string
	Batch          int
	LocalSteps     int // batches a window (1: a gradient every batch; 0: train's default, auto)
}

func (v Variant) dirName() string {
	name := fmt.Sprintf("%s-%s-b%d", v.Topology, v.Mode, v.Batch)
	switch {
	case v.LocalSteps == 0:
		name += "-hauto"
	case v.LocalSteps > 1:
		name += fmt.Sprintf("-h%d", v.LocalSteps)
	}
	return name
}

// localStepsArg is train's --local-steps for a window size (0: auto).
func localStepsArg(h int) string {
	if h == 0 {
		return "auto"
	}
	return strconv.Itoa(h)
}

// BenchConfig is a run of "gossiptrain bench": every Variant at every peer
// count on the same data, then report.md, bench.json and the plots.
type BenchConfig struct {
	// Counts are the peer counts, sorted; more than one is a scaling
	// series, whose count 1 is one plain train process alone on all the
	// data, the baseline of every speedup.
	Counts   []int
	Variants []Variant
	// Examples is every configuration's training examples (all peers
	// together): the generated set's rows, or whole passes over --train.
	Examples int64
	// Dir is the output directory (the command line gives it a default).
	Dir         string
	StopOnError bool
	// Repeat runs the whole plan that many times, interleaved.
	Repeat int
	// Apart, in a scaling series, also runs every peer count n > 1 as n
	// plain train processes at once, each on peer i's data, under the
	// same caps: processes apart (report.Apart).
	Apart bool
	// Target and EvalPoints are as LocalConfig's.
	Target     float64
	EvalPoints int
	Caps       Caps
	NetNS      *NetNS
	LogLevel   string
	Train      TrainFlags
	Log        zerolog.Logger
	// Out gets the summary table; Cmdline is the command line report.md
	// names.
	Out     io.Writer
	Cmdline string
}

func (cfg BenchConfig) series() bool { return len(cfg.Counts) > 1 }

// benchRun is one run of the plan.
type benchRun struct {
	peers int
	v     Variant
	alone bool // the baseline: one plain train process
	apart bool // processes apart: peers plain train processes, exchanging nothing
}

// benchData is what every run of a bench trains on.
type benchData struct {
	pass, local []string // the peers' train flags; a plain train's
	patterns    []string // --train of all the data
	resolved    []string // the model's flags (resolveModel)
	epochs      int
}

// RunBench runs a bench: the data (generated once, or the user's, passed
// whole enough times to make Examples), the plan (the baselines first,
// then every Variant at every peer count, Repeat times), and the report.
// A configuration that fails is reported and the bench goes on, unless
// StopOnError.
func RunBench(ctx context.Context, cfg BenchConfig) error {
	log := cfg.Log
	if cfg.NetNS != nil {
		if removed, err := CleanupStale(); err != nil {
			return err
		} else if len(removed) > 0 {
			log.Info().Strs("runs", removed).Msg("removed the namespaces an earlier run left behind")
		}
	}
	d, err := cfg.data()
	if err != nil {
		return err
	}
	plan := cfg.plan()
	splits := map[int]dataSplit{}
	for _, r := range plan {
		if _, ok := splits[r.peers]; !ok && !r.alone {
			if splits[r.peers], err = splitData(d.patterns, r.peers); err != nil {
				return err
			}
		}
	}
	ran, err := cfg.runPlan(ctx, plan, d, splits)
	if err != nil {
		return err
	}
	return cfg.report(ran)
}

// data generates the data set unless --train names one, and resolves the
// model from it.
func (cfg BenchConfig) data() (benchData, error) {
	tf, log := cfg.Train, cfg.Log
	d := benchData{pass: tf.Args(perPeerFlags...), local: tf.LocalArgs(perPeerFlags...), epochs: 1}
	user := trainPatterns(tf)
	if len(user) == 0 {
		gen := data.DefaultGenConfig()
		gen.Rows, gen.Parts, gen.Seed = cfg.Examples, cfg.Counts[len(cfg.Counts)-1], 1
		if cfg.series() {
			gen.Parts = seriesParts(cfg.Counts, cfg.Examples) // whole files for every count
		}
		gen.TestRows = min(max(cfg.Examples/10, 1000), 20_000) // evaluations stay cheap next to training
		gen.Features = BenchFeatures
		if tf.Set("dim") {
			dim, err := strconv.ParseUint(tf.Value("dim"), 10, 64)
			if err != nil {
				return d, usage.Flag("dim", "%q is not a number", tf.Value("dim"))
			}
			gen.Features = dim
		}
		m, err := ensureData(filepath.Join(cfg.Dir, "data"), gen, log)
		if err != nil {
			return d, err
		}
		d.patterns = m.Files
		extra := generatedFlags(tf, m)
		d.pass = append(append(d.pass, "--train="+strings.Join(m.Files, ",")), extra...)
		d.local = append(d.local, extra...)
	} else {
		d.patterns = user
		d.pass = append(d.pass, "--train="+tf.Value("train"))
	}
	var err error
	resolved, prep, err := resolveModel(tf, d.pass, log)
	if err != nil {
		return d, err
	}
	d.resolved = resolved
	if len(user) > 0 {
		sr, err := data.Scan(prep.TrainFiles, prep.TrainOpt)
		if err != nil {
			return d, err
		}
		if sr.Rows == 0 {
			return d, usage.Flag("train", "the training data has no rows")
		}
		d.epochs = int((cfg.Examples + sr.Rows - 1) / sr.Rows)
		log.Info().Int64("rows", sr.Rows).Int("epochs", d.epochs).Int64("examples", int64(d.epochs)*sr.Rows).
			Msg("--examples: whole passes over --train")
	}
	return d, nil
}

// plan lists the runs: the baselines first (one per batch size, in a
// scaling series), then every Variant at every peer count.
func (cfg BenchConfig) plan() []benchRun {
	var plan []benchRun
	counts := cfg.Counts
	if cfg.series() {
		var batches []int
		for _, v := range cfg.Variants {
			if !slices.Contains(batches, v.Batch) {
				batches = append(batches, v.Batch)
			}
		}
		for _, b := range batches {
			plan = append(plan, benchRun{peers: 1, v: Variant{Topology: "single", Mode: "local", Batch: b}, alone: true})
		}
		counts = counts[1:]
		if cfg.Apart {
			for _, n := range counts {
				for _, b := range batches {
					plan = append(plan, benchRun{peers: n, v: Variant{Topology: "apart", Mode: "local", Batch: b}, apart: true})
				}
			}
		}
	}
	for _, n := range counts {
		for _, v := range cfg.Variants {
			plan = append(plan, benchRun{peers: n, v: v})
		}
	}
	return plan
}

// dirName is a run's directory under runs/.
func (cfg BenchConfig) dirName(r benchRun) string {
	switch {
	case r.alone:
		return fmt.Sprintf("single-b%d", r.v.Batch)
	case r.apart:
		return fmt.Sprintf("apart-b%d-%dp", r.v.Batch, r.peers)
	case cfg.series():
		return fmt.Sprintf("%s-%dp", r.v.dirName(), r.peers)
	}
	return r.v.dirName()
}

// runArgs are the train flags of a run of n peers (or one alone).
func (cfg BenchConfig) runArgs(d benchData, n int) []string {
	a := append(append([]string(nil), d.resolved...), "--epochs", strconv.Itoa(d.epochs), "--log-level", cfg.LogLevel)
	if !cfg.Train.Set("eval-every") && cfg.EvalPoints > 0 {
		// EvalPoints evaluations along the way and the final one: the
		// curves of the report and the time to accuracy. Eval lines count
		// a peer's own examples.
		a = append(a, "--eval-every", strconv.FormatInt(max(cfg.Examples*int64(d.epochs)/int64(n)/int64(cfg.EvalPoints), 1), 10))
	}
	return a
}

// evalOnlyFirst: in a cluster only peer 0 evaluates along the way (its
// model is every peer's in sync, and a good estimate in ssp and async);
// the others evaluate once, at the end, so the cluster pays for one peer's
// evaluations as the lone peer does.
func (cfg BenchConfig) evalOnlyFirst(i int) []string {
	if i == 0 || cfg.Train.Set("eval-every") {
		return nil
	}
	return []string{"--eval-every", "0"}
}

// benchRan is what runPlan ran: the run directories of the first
// repetition and those of every repetition (processes apart excepted), the
// aparts of every repetition, and what failed.
type benchRan struct {
	ran      []string
	repDirs  [][]string
	aparts   [][]report.Apart
	failures []string
}

// runPlan runs the plan Repeat times, interleaved.
func (cfg BenchConfig) runPlan(ctx context.Context, plan []benchRun, d benchData, splits map[int]dataSplit) (benchRan, error) {
	log := cfg.Log
	var out benchRan
	out.repDirs = make([][]string, cfg.Repeat)
	out.aparts = make([][]report.Apart, cfg.Repeat)
	if err := os.RemoveAll(filepath.Join(cfg.Dir, "repeats")); err != nil {
		return out, fmt.Errorf("--out: %w", err)
	}
	for n := range cfg.Repeat * len(plan) {
		rep, r := n/len(plan), plan[n%len(plan)]
		name := cfg.dirName(r)
		dir := filepath.Join(cfg.Dir, "runs", name)
		if rep > 0 {
			dir = filepath.Join(cfg.Dir, "repeats", strconv.Itoa(rep+1), name)
		}
		if err := os.RemoveAll(dir); err != nil {
			return out, fmt.Errorf("--out: %w", err)
		}
		ev := log.Info().Str("configuration", name).Int("peers", r.peers).Int("of", cfg.Repeat*len(plan)).Int("n", n+1)
		if cfg.Repeat > 1 {
			ev = ev.Int("repetition", rep+1)
		}
		ev.Msg("running")
		start := time.Now()
		res, err := cfg.runOne(ctx, r, name, dir, d, splits[r.peers])
		if r.apart && err == nil {
			var l report.Apart
			if l, err = readApart(res, r); err == nil {
				out.aparts[rep] = append(out.aparts[rep], l)
			}
		} else if !r.apart {
			if rep == 0 {
				out.ran = append(out.ran, dir)
			}
			out.repDirs[rep] = append(out.repDirs[rep], dir)
		}
		if err != nil {
			if ctx.Err() != nil {
				return out, err
			}
			if cfg.StopOnError {
				return out, fmt.Errorf("configuration %s: %w", name, err)
			}
			log.Error().Err(err).Str("configuration", name).Msg("configuration failed; going on with the next")
			what := name
			if cfg.Repeat > 1 {
				what = fmt.Sprintf("%s (repetition %d)", name, rep+1)
			}
			out.failures = append(out.failures, fmt.Sprintf("configuration %s failed: %s", what, firstLine(err.Error())))
			continue
		}
		log.Info().Str("configuration", name).Str("took", human.Duration(time.Since(start)).String()).
			Str("dir", res.Dir).Msg("configuration done")
	}
	return out, nil
}

// readApart reads the figures of processes apart from their reports.
func readApart(res *Result, r benchRun) (report.Apart, error) {
	runs, err := res.Reports()
	if err != nil {
		return report.Apart{}, err
	}
	return report.ReadApart(runs, r.peers, r.v.Batch)
}

// runOne runs one run of the plan in dir.
func (cfg BenchConfig) runOne(ctx context.Context, r benchRun, name, dir string, d benchData, split dataSplit) (*Result, error) {
	tf := cfg.Train
	if r.alone {
		args := append(append(append([]string(nil), d.local...), "--train="+strings.Join(d.patterns, ",")), cfg.runArgs(d, 1)...)
		args = append(append(args, "--batch", strconv.Itoa(r.v.Batch)), baselineCache(tf)...)
		return runBaseline(ctx, dir, args, cfg.Caps, progressEvery(tf), cfg.Log)
	}
	if r.apart {
		return cfg.runApart(ctx, r, dir, d, split)
	}
	rc := DefaultConfig()
	rc.Peers, rc.Dir, rc.Identities, rc.NetNS, rc.Log = r.peers, dir, filepath.Join(cfg.Dir, "identities"), cfg.NetNS, cfg.Log
	cfg.Caps.apply(&rc)
	rc.Job = "bench-" + name
	rc.TrainArgs = append(append(append(withoutFlag(d.pass, "train"), split.common...), cfg.runArgs(d, r.peers)...),
		"--topology", r.v.Topology, "--mode", r.v.Mode, "--batch", strconv.Itoa(r.v.Batch),
		"--local-steps", localStepsArg(r.v.LocalSteps))
	rc.PeerArgs = func(i int) []string { return append(append(split.own(i), perPeer(tf, i)...), cfg.evalOnlyFirst(i)...) }
	rc.ProgressEvery = progressEvery(tf)
	return Run(ctx, rc)
}

// runApart runs r.peers processes apart: that many plain train
// processes at once under the peers' caps, process i on peer i's data and
// epochs, evaluating only at the end (after its training time).
func (cfg BenchConfig) runApart(ctx context.Context, r benchRun, dir string, d benchData, split dataSplit) (*Result, error) {
	tf := cfg.Train
	rc := DefaultConfig()
	rc.Peers, rc.Dir, rc.Job, rc.Log = r.peers, dir, "apart", cfg.Log
	rc.Standalone = true
	cfg.Caps.apply(&rc)
	rc.TrainArgs = append(append(append(append([]string(nil), d.local...), split.common...), cfg.runArgs(d, r.peers)...),
		"--batch", strconv.Itoa(r.v.Batch), "--eval-every", "0")
	rc.PeerArgs = func(i int) []string {
		own := split.own(i)
		if tf.Set("cache") {
			own = append(own, "--cache", fmt.Sprintf("%s.apart%d-%d", tf.Value("cache"), r.peers, i))
		}
		return own
	}
	rc.ProgressEvery = progressEvery(tf)
	cfg.Log.Info().Str("dir", dir).Int("processes", r.peers).Float64("cpus", cfg.Caps.CPUs).
		Msg("processes apart: plain train processes at once, each on one peer's data, exchanging nothing")
	return Run(ctx, rc)
}

// report writes report.md, bench.json and the plots of the runs, prints
// the summary table and, with Repeat, every repetition's figures.
func (cfg BenchConfig) report(br benchRan) error {
	ran, repDirs, failures := br.ran, br.repDirs, br.failures
	var groups []*report.Config
	var err error
	if cfg.series() {
		// Each run on its own: the same configuration at several peer
		// counts. Only this invocation's runs, so every speedup is
		// against the baseline measured here.
		var sets [][]*report.Run
		for _, dir := range ran {
			if _, err := os.Stat(dir); err != nil {
				continue // the run failed before it started
			}
			runs, err := report.ReadDir(dir)
			if err != nil && len(failures) > 0 {
				continue // a failed configuration, named in failures
			} else if err != nil {
				return err
			}
			if len(runs) > 0 {
				sets = append(sets, runs)
			}
		}
		groups, err = report.GroupSeries(sets)
	} else {
		var runs []*report.Run
		if runs, err = report.ReadDir(filepath.Join(cfg.Dir, "runs")); err == nil {
			groups, err = report.GroupRuns(runs)
		}
	}
	if err != nil {
		return err
	}
	if len(groups) == 0 {
		return errors.New(strings.Join(failures, "; "))
	}
	title := cfg.title()
	if err := report.WriteBench(cfg.Dir, groups, report.WithCommand(cfg.Cmdline), report.WithTitle(title), report.WithWarnings(failures...), report.WithTarget(cfg.Target), report.WithApart(br.aparts[0])); err != nil {
		return fmt.Errorf("--out %s: %w", cfg.Dir, err)
	}
	bs := report.Summarize(groups)
	if cfg.Target > 0 {
		report.AddTimeToTarget(bs, cfg.Target, 0)
	}
	if err := report.WriteSummaryTable(cfg.Out, bs); err != nil {
		return err
	}
	aparts := slices.Clone(br.aparts[0])
	report.AddApartSpeedups(aparts, bs)
	if err := report.WriteApart(cfg.Out, aparts, bs); err != nil {
		return err
	}
	if cfg.Repeat > 1 {
		if err := cfg.writeRepeats(title, repDirs, br.aparts); err != nil {
			return err
		}
	}
	fmt.Fprintf(cfg.Out, "report: %s\n", filepath.Join(cfg.Dir, report.ReportMDFile))
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "; "))
	}
	return nil
}

// title is report.md's title.
func (cfg BenchConfig) title() string {
	title := fmt.Sprintf("gossiptrain bench: %d peers", cfg.Counts[len(cfg.Counts)-1])
	if cfg.series() {
		counts := make([]string, len(cfg.Counts))
		for i, n := range cfg.Counts {
			counts[i] = strconv.Itoa(n)
		}
		title = fmt.Sprintf("gossiptrain bench: scaling series of %s peers", strings.Join(counts, ","))
	}
	if cfg.Caps.CPUs > 0 {
		title += ", " + cfg.Caps.Describe()
	}
	if cfg.NetNS != nil {
		title += ", links " + cfg.NetNS.String()
	}
	return title
}

// writeRepeats prints every repetition's figures and their medians, and
// writes them to Dir/repeats.md.
func (cfg BenchConfig) writeRepeats(title string, repDirs [][]string, aparts [][]report.Apart) error {
	reps := make([][]report.BenchConfig, cfg.Repeat)
	for i, dirs := range repDirs {
		var err error
		if reps[i], err = report.SummarizeDirs(dirs, cfg.series(), cfg.Target); err != nil {
			return err
		}
	}
	var md bytes.Buffer
	report.WriteRepeats(&md, reps)
	report.WriteApartRepeats(&md, reps, aparts)
	fmt.Fprintf(cfg.Out, "\n%s", md.String())
	path := filepath.Join(cfg.Dir, "repeats.md")
	if err := os.WriteFile(path, []byte("# "+title+": repetitions\n\nCommand: `"+cfg.Cmdline+"`\n\n"+md.String()), 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	fmt.Fprintf(cfg.Out, "repetitions: %s\n", path)
	return nil
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
