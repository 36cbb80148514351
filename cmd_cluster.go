package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/cluster"
	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/human"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node"
	"github.com/gossiptrain/gossiptrain/report"
)

// Flags of train that cluster and bench set on every peer themselves (or
// handle in their own way), so they do not pass them through. --swarm-key:
// cluster.Run gives every peer the run's key (cluster and launch take a
// --swarm-key of their own); --peers-allowed: the peers' IDs are the run's.
var clusterSkipFlags = map[string]bool{
	"job": true, "identity": true, "report": true, "listen": true, "peer": true, "peers-file": true,
	"log-format": true, "log-level": true, "mdns": true, "dht": true, "status-addr": true,
	"min-peers": true, "part": true, "swarm-key": true, "peers-allowed": true,
}

// trainPass is train's flags registered on a cluster or bench command:
// what the user sets there is passed to every peer's train.
type trainPass struct {
	names  map[string]bool   // the train flags registered on the outer command
	groups map[string]string // each one's group in train's help: "Data", "Model", "Run", …
	c      *command          // the outer command
}

// registerTrainFlags registers train's flags on c under train's groups,
// except skip and those c already has.
func registerTrainFlags(c *command, skip map[string]bool) *trainPass {
	tc, _ := newTrainCommand()
	tp := &trainPass{names: map[string]bool{}, groups: map[string]string{}, c: c}
	for _, g := range tc.groups {
		var names []string
		for _, n := range g.names {
			if !skip[n] && c.flags.Lookup(n) == nil {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			continue
		}
		c.group("train: "+g.title, func(fs *flag.FlagSet) {
			for _, n := range names {
				f := tc.flags.Lookup(n)
				fs.Var(f.Value, n, f.Usage)
				tp.names[n] = true
				tp.groups[n] = g.title
			}
		})
	}
	return tp
}

// args returns the pass-through flags the user set, as --name=value, except
// those in leave.
func (tp *trainPass) args(leave ...string) []string {
	var out []string
	tp.c.flags.Visit(func(f *flag.Flag) {
		if tp.names[f.Name] && !contains(leave, f.Name) {
			out = append(out, "--"+f.Name+"="+f.Value.String())
		}
	})
	return out
}

// trainPatterns returns --train's patterns.
func (tp *trainPass) trainPatterns() []string {
	if f := tp.c.flags.Lookup("train"); f != nil {
		if l, ok := f.Value.(*listFlag); ok {
			return *l
		}
	}
	return nil
}

// value returns the current value of pass-through flag name ("" if none).
func (tp *trainPass) value(name string) string {
	if f := tp.c.flags.Lookup(name); f != nil && tp.names[name] {
		return f.Value.String()
	}
	return ""
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// netFlags are the network emulation flags of cluster and bench.
type netFlags struct {
	netns             bool
	rate, delay, loss string
}

func (n *netFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&n.netns, "netns", false, "run every peer in a network namespace of its own, joined to a bridge by a veth pair whose\nlink is shaped with tc: one machine behaves like several VMs with real link limits\n(Linux, root, iproute2). Everything is removed afterwards, also on Ctrl-C or failure")
	fs.StringVar(&n.rate, "rate", "1gbit", "--netns: each peer's link `rate` in each direction (tc-tbf): 100mbit, 1gbit, …")
	fs.StringVar(&n.delay, "delay", "", "--netns: one-way `delay` between any two peers (tc-netem): 1ms, 500us; the round trip is twice it")
	fs.StringVar(&n.loss, "loss", "", "--netns: `percentage` of packets lost between two peers (tc-netem): 0.1%")
}

// config returns the cluster.NetNS the flags ask for, or nil without
// --netns.
func (n *netFlags) config(c *command) (*cluster.NetNS, error) {
	if !n.netns {
		for _, f := range []string{"delay", "loss"} {
			if c.set(f) {
				return nil, usageErr(f, "needs --netns (links are shaped inside network namespaces)")
			}
		}
		if c.set("rate") {
			return nil, usageErr("rate", "needs --netns (links are shaped inside network namespaces)")
		}
		return nil, nil
	}
	ns := &cluster.NetNS{Rate: n.rate, Delay: n.delay, Loss: n.loss}
	if err := ns.Validate(); err != nil {
		switch {
		case strings.Contains(err.Error(), "Rate"):
			return nil, usageErr("rate", "%v", err)
		case strings.Contains(err.Error(), "Delay"):
			return nil, usageErr("delay", "%v", err)
		default:
			return nil, usageErr("loss", "%v", err)
		}
	}
	return ns, nil
}

// checkSwarmKeyFlag checks the --swarm-key of cluster and launch before
// any work: a key file the peers could not load fails now, not in every
// peer.
func checkSwarmKeyFlag(path string) error {
	if path == "" {
		return nil
	}
	if _, err := node.LoadSwarmKey(path); err != nil {
		return usageErr("swarm-key", "%v", err)
	}
	return nil
}

// defaultRunDir is ./gossiptrain-runs/<time>-<what>.
func defaultRunDir(what string) string {
	return filepath.Join("gossiptrain-runs", time.Now().Format("20060102-150405")+"-"+what)
}

// peerSplit says how the training data is divided among the peers.
type peerSplit struct {
	common []string           // --train for every peer (with --part), or nothing
	own    func(int) []string // each peer's --train FILE or --part I/N
	how    string             // for the log
	meta   *data.GenMeta      // the generator's meta.json when the data has one
}

// splitData divides --train among n peers: one file each when the
// patterns name exactly n files, every n-th file when they name a multiple
// of n (peer i reads files i, i+n, …: no peer reads rows it skips), else
// --part i/n of all of them.
func splitData(patterns []string, n int) (peerSplit, error) {
	files, _, err := infer.Expand(patterns, "train")
	if err != nil {
		return peerSplit{}, err
	}
	s := peerSplit{}
	if m, err := data.ReadGenMeta(filepath.Join(filepath.Dir(files[0]), "meta.json")); err == nil {
		s.meta = &m
	}
	if len(files) == n && n > 1 {
		s.own = func(i int) []string { return []string{"--train", files[i]} }
		s.how = "one file per peer"
		return s, nil
	}
	if n > 1 && len(files)%n == 0 {
		s.own = func(i int) []string {
			var own []string
			for k := i; k < len(files); k += n {
				own = append(own, files[k])
			}
			return []string{"--train", strings.Join(own, ",")}
		}
		s.how = fmt.Sprintf("%d files per peer", len(files)/n)
		return s, nil
	}
	s.common = []string{"--train", strings.Join(patterns, ",")}
	s.own = func(i int) []string { return []string{"--part", fmt.Sprintf("%d/%d", i+1, n)} }
	s.how = fmt.Sprintf("every peer reads every %d-th row (--part i/%d)", n, n)
	if n == 1 {
		s.own = func(int) []string { return nil }
		s.how = "one peer reads everything"
	}
	return s, nil
}

// resolveModel runs train's own checks and inference once, here, on the
// pass-through flags (the model kind, dimension, classes and --l2 auto, from
// one scan of all the training files) and returns the flags that make every
// peer build exactly that model, so peers that read different files agree.
func resolveModel(args []string, log zerolog.Logger) ([]string, *infer.Plan, error) {
	tc, tf := newTrainCommand()
	if err := tc.parse(args); err != nil {
		return nil, nil, err
	}
	spec, err := tf.spec(tc)
	if err != nil {
		return nil, nil, err
	}
	plan, err := infer.Prepare(spec, log)
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

// clusterDefaultData is the data set cluster generates when given no
// --train: small enough that 4 peers train it in well under a minute on 2
// cores, large enough for a model to learn (test log-loss within a few
// percent of the planted model's).
func clusterDefaultData() data.GenConfig {
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

func clusterCmd() *command {
	c := newCommand("cluster", "train on several local peers at once and report on the run", "[--peers N] [--dir DIR] [train flags]")
	var (
		peers    int
		dir, job string
		swarmKey string
		save     string
		baseline bool
		target   float64
		points   int
		cf       cpuFlags
		nf       netFlags
		lf       logFlags
	)
	c.group("Cluster", func(fs *flag.FlagSet) {
		fs.IntVar(&peers, "peers", 4, "number of local peer `processes`")
		fs.StringVar(&dir, "dir", "", "run `DIR`: identities, each peer's report and log, report.md and plots\n(default ./gossiptrain-runs/<time>-cluster)")
		fs.StringVar(&job, "job", "cluster", "job `name` the peers get (--job)")
		fs.StringVar(&swarmKey, "swarm-key", "", "swarm key `FILE` every peer gets (--swarm-key; 'gossiptrain keygen --swarm FILE'). Default: a\nnew key for each run, written to DIR/swarm.key (mode 0600): only this run's peers can\nconnect to each other, also with --netns")
		fs.StringVar(&save, "save", "", "peer 0 saves the trained model to `FILE` (every peer ends with the same model)")
		fs.BoolVar(&baseline, "baseline", true, "first run one peer alone (plain train) on all the data the peers split, under the same\n--cpus cap, and print the cluster's speedup against it, in examples/s and in the time to a\ntarget test log-loss: does the cluster pay? --baseline=false skips it")
		fs.Float64Var(&target, "target-logloss", 0, "time the runs to this test `log-loss` (time to accuracy); 0 is one peer alone's final test\nlog-loss plus 0.5%")
		fs.IntVar(&points, "eval-points", 20, "evaluations of the test set along the way (`N`, evenly spaced; peer 0 evaluates, the others\nonly at the end): the curves and the time to accuracy; --eval-every overrides")
	})
	c.group("VM emulation", cf.register)
	c.group("Network emulation", nf.register)
	tp := registerTrainFlags(c, mergeSkip(clusterSkipFlags, "save"))
	c.group("Logging", lf.register)
	c.help = `
Start --peers local processes of 'gossiptrain train', ports chosen
automatically and bootstrapped to the first, split the training data among
them, show one combined progress line, and when they are done print a result
table (per peer: examples/s, bytes sent and received, CPU, peak memory; the
final test figures; whether every peer ended with the same model) and write
report.md and plots into the run directory ('gossiptrain report' on it).

Every train flag below is passed to every peer. The data is split by files
when --train names exactly --peers files (gossiptrain gen --parts N writes
them), else with --part i/N. With no --train at all, a Criteo-like synthetic
data set with a planted model is generated into DIR/data (200k rows, 2^20
features), and the table compares the result with the planted model.

--netns runs every peer in its own network namespace with a shaped link
(root): --rate 100mbit makes a master topology's link the bottleneck it is on
real VMs. --cpus 0.4 caps every peer at 0.4 cores with a cgroup (root), as
on VMs of that size: peers on one machine otherwise share its cores, and
N uncapped peers on 2 cores say nothing about N VMs. --baseline first runs
one plain 'gossiptrain train' on all the data under the same cap, and the
table then gives the cluster's speedup against it (its examples/s over the
lone peer's) and efficiency (speedup / peers). 'gossiptrain bench --peers
1,2,4,8' runs a whole scaling series.

Every peer gets a swarm key: a new one per run in DIR/swarm.key (mode 0600),
or --swarm-key FILE. Peers listen on 127.0.0.1 (with --netns, on their
namespace's address).

Ctrl-C stops the whole job at once: cluster sends every peer SIGUSR1, on which
a peer stops without the graceful leave SIGTERM starts (handing shards to peers
that stop too would only wait for them), writes its report marked partial
(null test metrics, the round it stopped at) and exits, within about a second;
cluster then prints the table of what they did and exits with status 130. A
peer that fails stops the others the same way. A peer still running 10s after
the signal gets SIGKILL.`
	c.example = `  gossiptrain cluster                                   # 4 peers on a generated data set
  gossiptrain cluster --peers 3 --topology master --mode async
  gossiptrain cluster --train 'data/train-*.svm' --test data/test.svm --dim 16777216 --batch 1000
  sudo gossiptrain cluster --netns --rate 100mbit --delay 1ms
  sudo gossiptrain cluster --cpus 0.4 --baseline --batch 1000   # 4 peers vs one, each on 0.4 cores`
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
		if err := cf.check(c); err != nil {
			return err
		}
		netns, err := nf.config(c)
		if err != nil {
			return err
		}
		if err := checkSwarmKeyFlag(swarmKey); err != nil {
			return err
		}
		if dir == "" {
			dir = defaultRunDir("cluster")
		}
		ctx, cancel := signalContext()
		defer cancel()

		pass := tp.args(perPeerFlags...)
		local := tp.localArgs(perPeerFlags...) // what the baseline's plain train takes of them
		var split peerSplit
		var meta *data.GenMeta
		var trainAll string    // --train of all the data, for the baseline
		var baselineEval int64 // the baseline's --eval-every (0: its own default)
		if len(tp.trainPatterns()) == 0 {
			gen := clusterDefaultData()
			gen.Parts = peers
			m, err := ensureData(filepath.Join(dir, "data"), gen, log)
			if err != nil {
				return err
			}
			meta = &m
			trainAll = "--train=" + strings.Join(m.Files, ",")
			pass = append(pass, trainAll)
			var extra []string
			if !c.set("test") {
				extra = append(extra, "--test="+m.TestFile)
			}
			if !c.set("dim") {
				extra = append(extra, "--dim="+strconv.FormatUint(m.Features, 10))
			}
			pass = append(pass, extra...)
			local = append(local, extra...)
			if !c.set("eval-every") && points > 0 {
				// --eval-points evaluations along the way, and the final
				// one: the curves of report.md and the time to accuracy.
				// They count a peer's own examples; peer 0 alone evaluates
				// along the way (PeerArgs).
				ep, err := strconv.Atoi(tp.value("epochs"))
				if tp.value("epochs") == "auto" {
					ep, err = infer.DistEpochs, nil // what each peer runs for --epochs auto
				}
				if err == nil && ep > 0 {
					pass = append(pass, "--eval-every="+strconv.FormatInt(max(m.Rows*int64(ep)/int64(peers)/int64(points), 1), 10))
					baselineEval = max(m.Rows*int64(ep)/int64(points), 1)
				}
			}
			split, err = splitData(m.Files, peers)
			if err != nil {
				return err
			}
		} else {
			split, err = splitData(tp.trainPatterns(), peers)
			if err != nil {
				return err
			}
			meta = split.meta
			trainAll = "--train=" + tp.value("train")
			pass = append(pass, trainAll)
		}
		resolved, _, err := resolveModel(pass, log)
		if err != nil {
			return err
		}
		common := append(append(withoutFlag(pass, "train"), split.common...), resolved...)
		var base *cluster.Result
		if baseline {
			// The same data, model, epochs and cap, on one plain train.
			args := append(append(append([]string(nil), local...), trainAll), resolved...)
			if baselineEval > 0 {
				args = append(args, "--eval-every", strconv.FormatInt(baselineEval, 10))
			}
			if tp.value("epochs") == "auto" {
				args = append(withoutFlag(args, "epochs"), "--epochs", strconv.Itoa(infer.DistEpochs)) // as every peer runs it
			}
			args = append(append(args, tp.baselineCache()...), "--log-level", lf.level)
			if base, err = runBaseline(ctx, filepath.Join(dir, "baseline"), args, cf, progressEvery(tp), log); err != nil {
				return fmt.Errorf("--baseline: %w", err)
			}
		}
		cfg := cluster.DefaultConfig()
		cfg.Peers, cfg.Dir, cfg.Job, cfg.NetNS, cfg.Log = peers, dir, job, netns, log
		cfg.SwarmKey = swarmKey
		cf.apply(&cfg)
		cfg.TrainArgs = append(common, "--log-level", lf.level)
		cfg.PeerArgs = func(i int) []string {
			a := split.own(i)
			if i == 0 && save != "" {
				a = append(a, "--save", save)
			}
			if i > 0 && baselineEval > 0 {
				a = append(a, "--eval-every", "0") // (peer 0's curve is the cluster's: the others evaluate at the end)
			}
			return append(a, tp.perPeer(i)...)
		}
		cfg.ProgressEvery = progressEvery(tp)
		if netns != nil {
			if _, err := cluster.CleanupStale(); err != nil {
				log.Warn().Err(err).Msg("removing namespaces left by an earlier run")
			}
		}
		log.Info().Int("peers", peers).Str("dir", dir).Str("split", split.how).Msg("starting the cluster")
		res, err := cluster.Run(ctx, cfg)
		if err != nil {
			if errors.Is(err, context.Canceled) && res != nil && len(res.Peers) > 0 {
				// Interrupted: the peers wrote partial reports; show them.
				if ferr := finishClusterBaseline(c.stdout(), res, base, meta, strings.Join(os.Args, " "), target, log); ferr != nil {
					log.Warn().Err(ferr).Msg("no result table for the interrupted run")
				}
			}
			return err
		}
		return finishClusterBaseline(c.stdout(), res, base, meta, strings.Join(os.Args, " "), target, log)
	}
	return c
}

// finishCluster prints the result table and writes report.md and plots
// into the run directory.
func finishCluster(w io.Writer, res *cluster.Result, meta *data.GenMeta, cmdline string, log zerolog.Logger) error {
	return finishClusterBaseline(w, res, nil, meta, cmdline, 0, log)
}

// finishClusterBaseline is finishCluster with the run of --baseline (nil
// without), which the table and report.md compare the cluster with.
func finishClusterBaseline(w io.Writer, res, base *cluster.Result, meta *data.GenMeta, cmdline string, target float64, log zerolog.Logger) error {
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
	if target > 0 {
		report.AddTimeToTarget(bs, target, 0)
	}
	if err := writeClusterTable(w, res, bs, meta); err != nil {
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

// writeClusterTable prints a run's result: a row per peer, totals, the
// final test figures and whether the peers agree.
func writeClusterTable(w io.Writer, res *cluster.Result, bs []report.BenchConfig, meta *data.GenMeta) error {
	var alone *report.BenchConfig // the --baseline run
	for i, b := range bs {
		if b.Topology == "single" && len(bs) > 1 {
			alone = &bs[i]
		}
	}
	for _, b := range bs {
		if alone != nil && b.Name == alone.Name {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(w, "\n%s: %d peers, %s mode, batch %d\n", b.Topology, b.PeerCount, b.Mode, b.Batch)
		fmt.Fprintln(tw, "peer\tpeer ID\texamples\texamples/s\tsent MB\treceived MB\tCPU %\tpeak RSS MiB\twait s\towned shards\t")
		var cpu float64
		var rss int64
		for i, p := range b.Peers {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.1f\t%.1f\t%s\t%.0f\t%.2f\t%d\t\n", i, shortID(p.PeerID), p.Examples,
				human.Count(float64(p.ExamplesPerSec)), float64(p.BytesSent)/1e6, float64(p.BytesRecv)/1e6,
				percent(float64(p.CPUPercent)), float64(p.PeakRSSBytes)/(1<<20), p.WaitSeconds, p.OwnedShards)
			cpu += finiteOr(float64(p.CPUPercent))
			rss += p.PeakRSSBytes
		}
		fmt.Fprintf(tw, "total\t\t%d\t%s\t%.1f\t%.1f\t%.0f\t%.0f\t\t\t\n", b.Examples, human.Count(float64(b.ExamplesPerSec)),
			float64(b.BytesSent)/1e6, float64(b.BytesRecv)/1e6, cpu, float64(rss)/(1<<20))
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "%.1f s, %d rounds; cluster throughput %s examples/s, %.0f bytes sent per example\n",
			b.Seconds, b.Rounds, human.Count(float64(b.ExamplesPerSec)), finiteOr(float64(b.BytesPerExample)))
		if !math.IsNaN(float64(b.Steady)) {
			fmt.Fprintf(w, "steady state (each peer's first and last tenth of rounds left out): %.1f rounds/s, a round %.1f ms (p50), %.1f ms (p90), %.1f ms (p99)\n",
				float64(b.Steady), float64(b.P50), float64(b.P90), float64(b.P99))
		}
		if !math.IsNaN(float64(b.TestLogLoss)) {
			fmt.Fprintf(w, "test log-loss %.4f", float64(b.TestLogLoss))
			if meta != nil && meta.PlantedTestLogLoss > 0 {
				fmt.Fprintf(w, " (the planted model that made the labels: %.4f)", meta.PlantedTestLogLoss)
			}
			if auc := float64(b.TestAUC); !math.IsNaN(auc) {
				fmt.Fprintf(w, ", AUC %.4f", auc)
				if meta != nil && meta.PlantedTestAUC > 0 {
					fmt.Fprintf(w, " (planted %.4f)", meta.PlantedTestAUC)
				}
			}
			fmt.Fprintf(w, ", accuracy %.4f\n", float64(b.TestAccuracy))
		}
		writeHashLine(w, b)
		if alone != nil && b.Baseline == alone.Name {
			fmt.Fprintf(w, "one peer alone (plain train on all the data, same cap): %s examples/s in %.1f s, test log-loss %.4f; the cluster's speedup %s, efficiency %s (speedup / %d peers); a peer received %.0f bytes per example it trained\n",
				human.Count(float64(alone.ExamplesPerSec)), alone.Seconds, finiteOr(float64(alone.TestLogLoss)), fmtTimes(b.Speedup), fmtEff(b.Efficiency), b.Workers, finiteOr(float64(b.RecvBytesPerExample)))
			writeTargetLine(w, b, *alone)
		}
	}
	return nil
}

// fmtEff formats an efficiency ("0.27"), "-" when it is unknown.
func fmtEff(n report.Num) string {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

// fmtTimes formats a speedup ("0.54x"), "-" when it is unknown.
func fmtTimes(n report.Num) string {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 2, 64) + "x"
}

// writeHashLine says whether the peers that ran to the end agree on the
// model, and which stopped early (their models are partial, so they are
// not compared).
func writeHashLine(w io.Writer, b report.BenchConfig) {
	var stopped []string
	hash := ""
	same := len(b.Peers) > 0
	for i, p := range b.Peers {
		switch {
		case p.Partial:
			stopped = append(stopped, fmt.Sprintf("peer %d %s at round %d", i, p.Stopped, p.StoppedAt))
			same = same && p.Stopped == b.Peers[0].Stopped && p.StoppedAt == b.Peers[0].StoppedAt
		case p.Finished && hash == "":
			hash = p.ModelHash
		}
	}
	note := ""
	if len(stopped) > 0 {
		note = " (stopped early, partial models not compared: " + strings.Join(stopped, ", ") + ")"
	}
	switch {
	case len(b.Peers) > 0 && len(stopped) == len(b.Peers) && same:
		fmt.Fprintf(w, "every peer stopped before the end of training (%s at round %d): the models are partial, not compared\n",
			b.Peers[0].Stopped, b.Peers[0].StoppedAt)
	case len(b.Peers) > 0 && len(stopped) == len(b.Peers):
		fmt.Fprintf(w, "every peer stopped before the end of training: the models are partial%s\n", note)
	case b.ModelHashesAgree && hash != "" && len(stopped) == 0:
		fmt.Fprintf(w, "model hashes agree: yes, every peer ends with model %s\n", hash)
	case b.ModelHashesAgree && hash != "":
		fmt.Fprintf(w, "model hashes agree: yes, every peer that ran to the end has model %s%s\n", hash, note)
	default:
		fmt.Fprintf(w, "model hashes agree: NO (see the warnings)%s\n", note)
	}
}

// percent formats a CPU percentage, "-" when it is unknown (a peer
// without a summary line).
func percent(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 0, 64)
}

func shortID(id string) string {
	if len(id) > 16 {
		return id[:2] + "*" + id[len(id)-6:]
	}
	return id
}

func finiteOr(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
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

func mergeSkip(m map[string]bool, more ...string) map[string]bool {
	out := map[string]bool{}
	for k, v := range m {
		out[k] = v
	}
	for _, k := range more {
		out[k] = true
	}
	return out
}

// progressEvery is the peers' --progress-every, which the combined progress
// line follows too.
func progressEvery(tp *trainPass) time.Duration {
	d, err := time.ParseDuration(tp.value("progress-every"))
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

// perPeerFlags are pass-through flags whose value each peer needs a
// version of its own, so they are not passed as they are (see perPeer).
var perPeerFlags = []string{"train", "metrics-addr", "cache"}

// perPeer returns peer i's own versions of the per-peer flags: its
// --metrics-addr HOST:PORT+i (HOST:0, a free port, stays as it is) and its
// --cache FILE.peerI (peers must not share a cache file).
func (tp *trainPass) perPeer(i int) []string {
	var a []string
	if tp.names["metrics-addr"] && tp.c.set("metrics-addr") {
		addr := tp.value("metrics-addr")
		if host, port, err := splitHostPort(addr); err == nil && port != 0 {
			addr = host + ":" + strconv.Itoa(port+i)
		}
		a = append(a, "--metrics-addr", addr)
	}
	if tp.c.set("cache") {
		a = append(a, "--cache", fmt.Sprintf("%s.peer%d", tp.value("cache"), i))
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

// writeTargetLine says how soon the cluster and the lone peer reached the
// target test log-loss (time to accuracy, report.Accuracy).
func writeTargetLine(w io.Writer, b, alone report.BenchConfig) {
	t := float64(b.Target)
	if math.IsNaN(t) {
		return
	}
	when := func(s report.Num) string {
		if math.IsNaN(float64(s)) {
			return "never"
		}
		return fmt.Sprintf("after %.1f s", float64(s))
	}
	fmt.Fprintf(w, "time to accuracy (test log-loss %.4f, one peer alone's final + 0.5%% unless --target-logloss): one peer alone %s, the cluster %s: %s\n",
		t, when(alone.SecondsToTarget), when(b.SecondsToTarget), fmtTimes(b.SpeedupToTarget))
}
