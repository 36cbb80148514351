package cli

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/gossiptrain/gossiptrain/cluster"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/report"
)

func clusterCmd() *command {
	c := newCommand("cluster", "train on several local peers at once and report on the run", "[--peers N] [--dir DIR] [train flags]")
	f := &clusterFlags{}
	c.group("Cluster", func(fs *flag.FlagSet) {
		fs.IntVar(&f.peers, "peers", 4, "number of local peer `processes`")
		fs.StringVar(&f.dir, "dir", "", "run `DIR`: identities, each peer's report and log, report.md and plots\n(default ./gossiptrain-runs/<time>-cluster)")
		fs.StringVar(&f.job, "job", "cluster", "job `name` the peers get (--job)")
		fs.StringVar(&f.swarmKey, "swarm-key", "", "swarm key `FILE` every peer gets (--swarm-key; 'gossiptrain keygen --swarm FILE'). Default: a\nnew key for each run, written to DIR/swarm.key (mode 0600): only this run's peers can\nconnect to each other, also with --netns")
		fs.StringVar(&f.save, "save", "", "peer 0 saves the trained model to `FILE` (every peer ends with the same model)")
		fs.BoolVar(&f.baseline, "baseline", true, "first run one peer alone (plain train) on all the data the peers split, under the same\n--cpus cap, and print the cluster's speedup against it, in examples/s and in the time to a\ntarget test log-loss: does the cluster pay? --baseline=false skips it")
		fs.Float64Var(&f.target, "target-logloss", 0, "time the runs to this test `log-loss` (time to accuracy); 0 is one peer alone's final test\nlog-loss plus 0.5%")
		fs.IntVar(&f.points, "eval-points", 20, "evaluations of the test set along the way (`N`, evenly spaced; peer 0 evaluates, the others\nonly at the end): the curves and the time to accuracy; --eval-every overrides")
	})
	c.group("VM emulation", f.cf.register)
	c.group("Network emulation", f.nf.register)
	f.tp = registerTrainFlags(c, skipAlso("save"))
	c.group("Logging", f.lf.register)
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
	c.run = f.run
	return c
}

// clusterFlags are the flags of cluster; run runs it.
type clusterFlags struct {
	tp       *trainPass // train's flags, passed to every peer
	peers    int
	dir      string
	job      string
	swarmKey string
	save     string
	baseline bool
	target   float64
	points   int
	cf       cpuFlags
	nf       netFlags
	lf       logFlags
}

func (f *clusterFlags) run(c *command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, args[0])
	}
	log, err := f.lf.logger()
	if err != nil {
		return err
	}
	if f.peers < 1 {
		return usageErr("peers", "want at least 1, got %d", f.peers)
	}
	if err := checkAccuracyFlags(f.target, f.points); err != nil {
		return err
	}
	caps, err := f.cf.caps(c)
	if err != nil {
		return err
	}
	netns, err := f.nf.config(c)
	if err != nil {
		return err
	}
	if err := checkSwarmKeyFlag(f.swarmKey); err != nil {
		return err
	}
	if err := infer.CheckApart([]infer.FlagPath{{Flag: "save", Path: f.save}}, f.tp.inputs()); err != nil {
		return err
	}
	if f.dir == "" {
		f.dir = defaultRunDir("cluster")
	}
	if err := checkInputsOutsideRun("dir", f.dir, f.tp.inputs(), []string{"baseline"},
		[]string{"peer-*", report.ReportMDFile, report.BenchJSONFile, "*.png", "*.svg", "swarm.key"}); err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	return cluster.RunLocal(ctx, cluster.LocalConfig{Peers: f.peers, Dir: f.dir, Job: f.job, SwarmKey: f.swarmKey, Save: f.save,
		Baseline: f.baseline, Target: f.target, EvalPoints: f.points, Caps: caps, NetNS: netns, LogLevel: f.lf.level,
		Train: f.tp, Log: log, Out: c.stdout(), Cmdline: strings.Join(os.Args, " ")})
}
