package cli

import (
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/cluster"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/node"
)

// The flags cluster, bench and launch share: train's flags, passed to
// every peer; --cpus and --netns, which emulate VMs and their links.

// Flags of train that cluster and bench set on every peer themselves (or
// handle in their own way), so they do not pass them through. --swarm-key:
// cluster.Run gives every peer the run's key (cluster and launch take a
// --swarm-key of their own); --peers-allowed: the peers' IDs are the run's.
var clusterSkipFlags = map[string]bool{
	"job": true, "identity": true, "report": true, "listen": true, "peer": true, "peers-file": true,
	"log-format": true, "log-level": true, "mdns": true, "dht": true, "status-addr": true,
	"min-peers": true, "part": true, "swarm-key": true, "peers-allowed": true,
	"init": true, "save-state": true, // train alone only
}

// skipAlso is clusterSkipFlags and more.
func skipAlso(more ...string) map[string]bool {
	out := map[string]bool{}
	for k, v := range clusterSkipFlags {
		out[k] = v
	}
	for _, k := range more {
		out[k] = true
	}
	return out
}

// trainPass is train's flags registered on a cluster, bench or launch
// command: what the user sets there is passed to every peer's train. It is
// the command's cluster.TrainFlags.
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

// baselineTrainGroups are the groups of train's flags a plain train (no
// --job) takes: a baseline gets the user's flags of these groups only.
var baselineTrainGroups = map[string]bool{"Data": true, "Model": true, "Run": true}

// Args returns the pass-through flags the user set, as --name=value,
// except those in leave.
func (tp *trainPass) Args(leave ...string) []string {
	return tp.visit(func(f *flag.Flag) bool { return !slices.Contains(leave, f.Name) })
}

// LocalArgs returns the pass-through flags of baselineTrainGroups the user
// set, as --name=value, except those in leave.
func (tp *trainPass) LocalArgs(leave ...string) []string {
	return tp.visit(func(f *flag.Flag) bool {
		return baselineTrainGroups[tp.groups[f.Name]] && !slices.Contains(leave, f.Name)
	})
}

// visit returns the pass-through flags the user set that keep says to
// keep, as --name=value.
func (tp *trainPass) visit(keep func(*flag.Flag) bool) []string {
	var out []string
	tp.c.flags.Visit(func(f *flag.Flag) {
		if tp.names[f.Name] && keep(f) {
			out = append(out, "--"+f.Name+"="+f.Value.String())
		}
	})
	return out
}

// Value returns the current value of pass-through flag name ("" if none).
func (tp *trainPass) Value(name string) string {
	if f := tp.c.flags.Lookup(name); f != nil && tp.names[name] {
		return f.Value.String()
	}
	return ""
}

// Set reports whether the user gave the flag.
func (tp *trainPass) Set(name string) bool { return tp.c.set(name) }

// Resolve runs train's checks and inference on a train command line.
func (tp *trainPass) Resolve(args []string, log zerolog.Logger) (*infer.Plan, error) {
	tc, tf := newTrainCommand()
	if err := tc.parse(args); err != nil {
		return nil, err
	}
	spec, err := tf.spec(tc)
	if err != nil {
		return nil, err
	}
	return infer.Prepare(spec, log)
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
		for _, f := range []string{"delay", "loss", "rate"} {
			if c.set(f) {
				return nil, usageErr(f, "needs --netns (links are shaped inside network namespaces)")
			}
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

// cpuFlags is --cpus of cluster and bench: every peer capped by a cgroup.
type cpuFlags struct {
	cpus float64
	pin  bool
}

func (f *cpuFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&f.cpus, "cpus", 0, "cap every peer process at this many CPU `cores` (0.4: 40 ms of CPU time per 100 ms), each in a\ncgroup of its own, as if each ran on a VM of that size: N peers on one machine compare with\none peer only when each gets its share (Linux, root, a cgroup v1 or v2 cpu controller;\nthe groups are removed afterwards, also on Ctrl-C). 0: uncapped")
	fs.BoolVar(&f.pin, "pin", true, "with --cpus: also bind each peer to its own ceil(C) of this machine's CPUs, packed so that\nno CPU is asked for more than one core (4 peers at 0.4 on 2 CPUs: two on each), as a VM's vCPUs\nare its own. Left free, capped peers float over every core and each finds its caches full of\nanother peer's data (measured once, 4 peers at 0.4 core bound midway through a run: 245k to\n424k-437k examples/s; the lone peer gains too). --pin=false: free")
}

// caps checks --cpus, and that this machine can cap processes, and
// returns the caps it asks for.
func (f *cpuFlags) caps(c *command) (cluster.Caps, error) {
	caps := cluster.Caps{CPUs: f.cpus, Unpinned: !f.pin}
	if !c.set("cpus") || f.cpus == 0 {
		return caps, nil
	}
	if !(f.cpus >= cluster.MinCPUs) {
		return caps, usageErr("cpus", "%g: want at least %g cores (1 ms of CPU time per 100 ms), or 0 for uncapped", f.cpus, cluster.MinCPUs)
	}
	if err := cluster.CheckCPUGroups(); err != nil {
		return caps, fmt.Errorf("--cpus %g: this machine cannot cap processes: %w", f.cpus, err)
	}
	return caps, nil
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

// inputs are the data files the peers read (--train, --test, globs
// expanded, and their IDX labels), for infer.CheckApart.
func (tp *trainPass) inputs() []infer.FlagPath {
	value := func(name string) string {
		if f := tp.c.flags.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	var train listFlag
	train.Set(value("train"))
	in := infer.InputFiles(train, "train", value("train-labels"), "train-labels")
	if test := value("test"); test != "" {
		in = append(in, infer.InputFiles([]string{test}, "test", value("test-labels"), "test-labels")...)
	}
	return in
}

// checkInputsOutsideRun fails when an input file (in) is one that a run
// directory's command writes or removes: a file under one of dir's subdirs,
// or one of dir's files matching a pattern of files (filepath.Match), so
// cluster and bench never overwrite or remove their own data
// (TestRunDirsApartFromInputs).
func checkInputsOutsideRun(dirFlag, dir string, in []infer.FlagPath, subdirs, files []string) error {
	for _, f := range in {
		abs, err := filepath.Abs(f.Path)
		if err != nil {
			continue
		}
		real := abs
		if r, err := filepath.EvalSymlinks(abs); err == nil {
			real = r
		}
		for _, p := range []string{abs, real} {
			for _, sub := range subdirs {
				under, _ := filepath.Abs(filepath.Join(dir, sub))
				if r, err := filepath.EvalSymlinks(under); err == nil {
					under = r
				}
				if strings.HasPrefix(p, under+string(filepath.Separator)) {
					return usageErr(dirFlag, "%s: --%s %s is under %s, which this command writes and removes; move the data or give another --%s", dir, f.Flag, f.Path, filepath.Join(dir, sub), dirFlag)
				}
			}
			for _, pat := range files {
				if d, _ := filepath.Abs(dir); filepath.Dir(p) == d || infer.SamePath(filepath.Dir(p), dir) {
					if ok, _ := filepath.Match(pat, filepath.Base(p)); ok {
						return usageErr(dirFlag, "%s: --%s %s is a file this command writes there (%s); move the data or give another --%s", dir, f.Flag, f.Path, pat, dirFlag)
					}
				}
			}
		}
	}
	return nil
}
