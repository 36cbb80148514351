package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/report"
)

// LocalConfig is a run of "gossiptrain cluster": a job of Peers local
// processes on the user's data or a generated set, one peer alone first
// (the baseline), and a result table.
type LocalConfig struct {
	Peers int
	// Dir is the run directory (the command line gives it a default).
	Dir string
	// Job is the peers' --job, SwarmKey their key file ("": a new key).
	Job, SwarmKey string
	// Save is the file peer 0 saves the trained model to ("": none).
	Save string
	// Baseline first runs one peer alone, under the same Caps, on all the
	// data the peers split.
	Baseline bool
	// Target is the test log-loss the runs are timed to (0: the lone
	// peer's final plus 0.5%); EvalPoints the evaluations along the way
	// (--eval-every overrides; not known for compressed training data).
	Target     float64
	EvalPoints int
	Caps       Caps
	NetNS      *NetNS
	// LogLevel is the peers' --log-level.
	LogLevel string
	Train    TrainFlags
	Log      zerolog.Logger
	// Out gets the result table; Cmdline is the command line report.md
	// names.
	Out     io.Writer
	Cmdline string
}

// localData is the data of a cluster run: what every peer gets, how it is
// split, and the baseline's share.
type localData struct {
	pass, local  []string // every peer's train flags; the baseline's
	split        dataSplit
	meta         *data.GenMeta // the generated set's meta.json, if any
	trainAll     string        // --train of all the data, for the baseline
	baselineEval int64         // the baseline's --eval-every (0: its own default)
}

// RunLocal runs the cluster command: it generates the data when there is
// no --train (DefaultData, with --eval-points evaluations along the way),
// splits it among the peers, resolves the model once from all of it,
// runs the baseline and then the peers, and prints the result table and
// writes report.md into Dir. Interrupted, it still prints the table of
// what the peers did.
func RunLocal(ctx context.Context, cfg LocalConfig) error {
	log, tf := cfg.Log, cfg.Train
	d, err := cfg.data()
	if err != nil {
		return err
	}
	resolved, _, err := resolveModel(tf, d.pass, log)
	if err != nil {
		return err
	}
	common := append(append(withoutFlag(d.pass, "train"), d.split.common...), resolved...)
	var base *Result
	if cfg.Baseline {
		if base, err = cfg.runBaseline(ctx, d, resolved); err != nil {
			return fmt.Errorf("--baseline: %w", err)
		}
	}
	rc := DefaultConfig()
	rc.Peers, rc.Dir, rc.Job, rc.NetNS, rc.Log = cfg.Peers, cfg.Dir, cfg.Job, cfg.NetNS, log
	rc.SwarmKey = cfg.SwarmKey
	cfg.Caps.apply(&rc)
	rc.TrainArgs = append(common, "--log-level", cfg.LogLevel)
	rc.PeerArgs = func(i int) []string {
		a := d.split.own(i)
		if i == 0 && cfg.Save != "" {
			a = append(a, "--save", cfg.Save)
		}
		if i > 0 && d.baselineEval > 0 {
			a = append(a, "--eval-every", "0") // (peer 0's curve is the cluster's: the others evaluate at the end)
		}
		return append(a, perPeer(tf, i)...)
	}
	rc.ProgressEvery = progressEvery(tf)
	if cfg.NetNS != nil {
		if _, err := CleanupStale(); err != nil {
			log.Warn().Err(err).Msg("removing namespaces left by an earlier run")
		}
	}
	log.Info().Int("peers", cfg.Peers).Str("dir", cfg.Dir).Str("split", d.split.how).Msg("starting the cluster")
	res, err := Run(ctx, rc)
	if err != nil {
		if errors.Is(err, context.Canceled) && res != nil && len(res.Peers) > 0 {
			// Interrupted: the peers wrote partial reports; show them.
			if ferr := finish(cfg.Out, res, base, d.meta, cfg.Cmdline, cfg.Target, log); ferr != nil {
				log.Warn().Err(ferr).Msg("no result table for the interrupted run")
			}
		}
		return err
	}
	if err := finish(cfg.Out, res, base, d.meta, cfg.Cmdline, cfg.Target, log); err != nil {
		return err
	}
	if base != nil && cfg.Caps.CPUs <= 0 && cfg.Peers > 1 {
		fmt.Fprint(cfg.Out, uncappedNote(cfg.Peers, runtime.NumCPU()))
	}
	return nil
}

// uncappedNote tells a user who compared an uncapped cluster with one
// peer alone what the comparison was: N peers sharing this machine's
// cores against one process that had them to itself, not N VMs against
// one; and the command that compares like with like
// (TestUncappedNote).
func uncappedNote(peers, cores int) string {
	c := math.Floor(0.8*float64(cores)/float64(peers)*100) / 100
	if c < 0.05 {
		return fmt.Sprintf("note: no --cpus cap: the %d peers shared this machine's %d cores while the lone process had them to itself; %d capped peers do not fit in %d cores\n", peers, cores, peers, cores)
	}
	return fmt.Sprintf("note: no --cpus cap: the %d peers shared this machine's %d cores while the lone process had them to itself; to compare %d VMs with one, cap every peer and the lone process alike (root): gossiptrain cluster --cpus %g\n",
		peers, cores, peers, c)
}

// data generates or splits the run's data.
func (cfg LocalConfig) data() (localData, error) {
	tf := cfg.Train
	d := localData{pass: tf.Args(perPeerFlags...), local: tf.LocalArgs(perPeerFlags...)}
	var err error
	if patterns := trainPatterns(tf); len(patterns) > 0 {
		if d.split, err = splitData(patterns, cfg.Peers); err != nil {
			return d, err
		}
		d.meta = d.split.meta
		d.trainAll = "--train=" + tf.Value("train")
		d.pass = append(d.pass, d.trainAll)
		if !tf.Set("eval-every") && cfg.EvalPoints > 0 {
			files, _, err := infer.Expand(patterns, "train")
			if err != nil {
				return d, err
			}
			if rows := rowsOf(files, d.meta); rows > 0 {
				d.evalEvery(tf, rows, cfg)
			} else {
				cfg.Log.Warn().Int("eval_points", cfg.EvalPoints).Msg("the rows of --train are not known (compressed text, a cache or a stream): no evaluations along the way, so the time to accuracy is the end's; give --eval-every N (examples of a peer) for a curve")
			}
		}
		return d, nil
	}
	gen := DefaultData()
	gen.Parts = cfg.Peers
	m, err := ensureData(filepath.Join(cfg.Dir, "data"), gen, cfg.Log)
	if err != nil {
		return d, err
	}
	d.meta = &m
	d.trainAll = "--train=" + strings.Join(m.Files, ",")
	d.pass = append(d.pass, d.trainAll)
	extra := generatedFlags(tf, m)
	d.pass = append(d.pass, extra...)
	d.local = append(d.local, extra...)
	if !tf.Set("eval-every") && cfg.EvalPoints > 0 {
		d.evalEvery(tf, m.Rows, cfg)
	}
	d.split, err = splitData(m.Files, cfg.Peers)
	return d, err
}

// evalEvery spaces --eval-points evaluations along the way, and the final
// one, over rows training rows: the curves of report.md and the time to
// accuracy. They count a peer's own examples; peer 0 alone evaluates along
// the way (PeerArgs).
func (d *localData) evalEvery(tf TrainFlags, rows int64, cfg LocalConfig) {
	ep, err := strconv.Atoi(tf.Value("epochs"))
	if tf.Value("epochs") == "auto" {
		// What each peer runs for --epochs auto with --holdout off;
		// with held-out rows the peers stop on them, most often
		// about as early.
		ep, err = infer.DistEpochs, nil
	}
	if err == nil && ep > 0 {
		d.pass = append(d.pass, "--eval-every="+strconv.FormatInt(max(rows*int64(ep)/int64(cfg.Peers)/int64(cfg.EvalPoints), 1), 10))
		d.baselineEval = max(rows*int64(ep)/int64(cfg.EvalPoints), 1)
	}
}

// rowsOf is about the number of training rows in files, for spacing
// evaluations: the generator's count when the files are all of its set
// (meta), else the lines of plain text files and the images an IDX
// file's header counts; 0 when neither is known (compressed text, a
// cache, a stream). TestClusterEvalPointsOnUserData.
func rowsOf(files []string, meta *data.GenMeta) int64 {
	if meta != nil && len(files) == len(meta.Files) {
		all := true
		for _, f := range files {
			all = all && slices.ContainsFunc(meta.Files, func(g string) bool { return filepath.Base(g) == filepath.Base(f) })
		}
		if all {
			return meta.Rows
		}
	}
	var rows int64
	buf := make([]byte, 1<<20)
	for _, name := range files {
		if data.IsStream(name) {
			return 0
		}
		f, err := data.DetectFormat(name)
		if err != nil || f == data.FormatCache {
			return 0
		}
		if f == data.FormatIDX {
			n, err := data.IDXCount(name) // (its header says: compressed or not)
			if err != nil {
				return 0
			}
			rows += n
			continue
		}
		n, ok := countLines(name, buf)
		if !ok {
			return 0
		}
		rows += n
	}
	return rows
}

// countLines counts the newlines of a plain (not compressed) file; ok is
// false for a compressed one or when it cannot be read. A file larger than
// countSample is not read through: its lines are estimated from those of
// its first countSample bytes, which is all the spacing of evaluations
// needs, and a 45 GB training file is not read once more before the run.
func countLines(name string, buf []byte) (n int64, ok bool) {
	f, err := os.Open(name)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, false
	}
	var read int64
	for read < countSample {
		k, err := f.Read(buf)
		if read == 0 && data.IsCompressed(name, buf[:k]) {
			return 0, false
		}
		read += int64(k)
		n += int64(bytes.Count(buf[:k], []byte{'\n'}))
		if err == io.EOF {
			return n, true
		}
		if err != nil {
			return 0, false
		}
	}
	if read >= st.Size() {
		return n, true
	}
	return n * st.Size() / read, true
}

// countSample is how much of a training file countLines reads.
const countSample = 8 << 20

// generatedFlags are the --test and --dim of a generated data set, unless
// the user gave them.
func generatedFlags(tf TrainFlags, m data.GenMeta) []string {
	var extra []string
	if !tf.Set("test") {
		extra = append(extra, "--test="+m.TestFile)
	}
	if !tf.Set("dim") {
		extra = append(extra, "--dim="+strconv.FormatUint(m.Features, 10))
	}
	return extra
}

// runBaseline runs one plain train on the same data, model, epochs and
// cap as the peers.
func (cfg LocalConfig) runBaseline(ctx context.Context, d localData, resolved []string) (*Result, error) {
	tf := cfg.Train
	args := append(append(append([]string(nil), d.local...), d.trainAll), resolved...)
	if d.baselineEval > 0 {
		args = append(args, "--eval-every", strconv.FormatInt(d.baselineEval, 10))
	}
	if tf.Value("epochs") == "auto" && tf.Value("holdout") == "off" {
		args = append(withoutFlag(args, "epochs"), "--epochs", strconv.Itoa(infer.DistEpochs)) // as every peer runs it
	}
	// Otherwise --epochs auto, or N, as the peers: with held-out rows
	// (--holdout, on by default) the lone train stops on them as each
	// peer does on its own.
	args = append(append(args, baselineCache(tf)...), "--log-level", cfg.LogLevel)
	return runBaseline(ctx, filepath.Join(cfg.Dir, "baseline"), args, cfg.Caps, progressEvery(tf), cfg.Log)
}

// finish prints the result table and writes report.md and plots into the
// run directory; base is the run of --baseline (nil without), which the
// table and report.md compare the cluster with.
func finish(w io.Writer, res, base *Result, meta *data.GenMeta, cmdline string, target float64, log zerolog.Logger) error {
	runs, err := res.Reports()
	if err != nil {
		return err
	}
	if base != nil {
		// The lone peer's report joins the cluster's: report.Summarize
		// measures the cluster's speedup against it.
		b, err := base.Reports()
		if err != nil {
			return fmt.Errorf("--baseline: %w", err)
		}
		runs = append(runs, b...)
	}
	cfgs, err := report.GroupRuns(runs)
	if err != nil {
		return err
	}
	bs := report.Summarize(cfgs)
	wholeLifePeaks(bs, res, base)
	if target > 0 {
		report.AddTimeToTarget(bs, target, 0)
	}
	var planted report.Planted
	if meta != nil {
		planted = report.Planted{LogLoss: meta.PlantedTestLogLoss, AUC: meta.PlantedTestAUC}
	}
	if err := report.WriteClusterTable(w, bs, planted); err != nil {
		return err
	}
	if err := report.WriteBench(res.Dir, cfgs, report.WithCommand(cmdline), report.WithTitle("gossiptrain cluster run"), report.WithTarget(target)); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	fmt.Fprintf(w, "report: %s (plots, bench.json and every peer's report and log in %s)\n", filepath.Join(res.Dir, report.ReportMDFile), res.Dir)
	for _, b := range bs {
		for _, warn := range b.Warnings {
			log.Warn().Str("configuration", b.Name).Msg(warn)
		}
	}
	return nil
}

// wholeLifePeaks raises each peer's peak resident memory in bs to the
// kernel's count at its exit (PeerResult.PeakRSS), where that is higher: a
// report's peak is taken when the peer writes its summary, and what a peer
// does after it (handing shards over as it leaves) must show too
// (TestWholeLifePeaks).
func wholeLifePeaks(bs []report.BenchConfig, results ...*Result) {
	peak := map[string]int64{}
	for _, res := range results {
		if res == nil {
			continue
		}
		for _, pr := range res.Peers {
			if pr.Report != "" && pr.PeakRSS > 0 {
				peak[filepath.Clean(pr.Report)] = pr.PeakRSS
			}
		}
	}
	for i := range bs {
		for j := range bs[i].Peers {
			p := &bs[i].Peers[j]
			if v := peak[filepath.Clean(p.File)]; v > p.PeakRSSBytes {
				p.PeakRSSBytes = v
			}
		}
	}
}
