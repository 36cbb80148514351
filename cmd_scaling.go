package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/cluster"
)

// cpuFlags is --cpus of cluster and bench: every peer capped by a cgroup.
type cpuFlags struct {
	cpus float64
	pin  bool
}

func (f *cpuFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&f.cpus, "cpus", 0, "cap every peer process at this many CPU `cores` (0.4: 40 ms of CPU time per 100 ms), each in a\ncgroup of its own, as if each ran on a VM of that size: N peers on one machine compare with\none peer only when each gets its share (Linux, root, a cgroup v1 or v2 cpu controller;\nthe groups are removed afterwards, also on Ctrl-C). 0: uncapped")
	fs.BoolVar(&f.pin, "pin", true, "with --cpus: also bind each peer to its own ceil(C) of this machine's CPUs, packed so that\nno CPU is asked for more than one core (4 peers at 0.4 on 2 CPUs: two on each), as a VM's vCPUs\nare its own. Left free, capped peers float over every core and each finds its caches full of\nanother peer's data (measured once, 4 peers at 0.4 core bound midway through a run: 245k to\n424k-437k examples/s; the lone peer gains too). --pin=false: free")
}

// apply sets the cap and the binding in cfg.
func (f *cpuFlags) apply(cfg *cluster.Config) {
	cfg.CPUs, cfg.Unpinned = f.cpus, !f.pin
}

// check validates --cpus and that this machine can cap processes.
func (f *cpuFlags) check(c *command) error {
	if !c.set("cpus") || f.cpus == 0 {
		return nil
	}
	if !(f.cpus >= cluster.MinCPUs) {
		return usageErr("cpus", "%g: want at least %g cores (1 ms of CPU time per 100 ms), or 0 for uncapped", f.cpus, cluster.MinCPUs)
	}
	if err := cluster.CheckCPUGroups(); err != nil {
		return fmt.Errorf("--cpus %g: this machine cannot cap processes: %w", f.cpus, err)
	}
	return nil
}

// describe is how the cap reads in titles and tables.
func (f *cpuFlags) describe() string {
	if f.cpus <= 0 {
		return "uncapped"
	}
	return fmt.Sprintf("each capped at %g cores", f.cpus)
}

// baselineTrainGroups are the groups of train's flags a plain train (no
// --job) takes: a baseline gets the user's flags of these groups only.
var baselineTrainGroups = map[string]bool{"Data": true, "Model": true, "Run": true}

// localArgs returns the pass-through flags of baselineTrainGroups the user
// set, as --name=value, except those in leave.
func (tp *trainPass) localArgs(leave ...string) []string {
	var out []string
	tp.c.flags.Visit(func(f *flag.Flag) {
		if tp.names[f.Name] && baselineTrainGroups[tp.groups[f.Name]] && !contains(leave, f.Name) {
			out = append(out, "--"+f.Name+"="+f.Value.String())
		}
	})
	return out
}

// baselineCache is the baseline's --cache: its own file, since it reads
// all the data where each peer reads its part.
func (tp *trainPass) baselineCache() []string {
	if tp.c.set("cache") {
		return []string{"--cache", tp.value("cache") + ".alone"}
	}
	return nil
}

// runBaseline runs one plain train process (no --job: training alone) in
// dir with args, capped at cpus cores like the peers: the one-peer
// baseline a cluster's throughput is compared with.
func runBaseline(ctx context.Context, dir string, args []string, cf cpuFlags, every time.Duration, log zerolog.Logger) (*cluster.Result, error) {
	cfg := cluster.DefaultConfig()
	cfg.Peers, cfg.Dir, cfg.Job, cfg.Log = 1, dir, "baseline", log
	cfg.Standalone = true
	cf.apply(&cfg)
	cpus := cf.cpus
	cfg.TrainArgs = args
	cfg.ProgressEvery = every
	log.Info().Str("dir", dir).Float64("cpus", cpus).Msg("one peer alone: plain train on all the data (the baseline)")
	return cluster.Run(ctx, cfg)
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
		if !containsInt(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, usageErr("peers", "give at least one number of peers")
	}
	return out, nil
}

func containsInt(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// seriesParts is the number of files to generate for a scaling series of
// these peer counts: their least common multiple, so every count gets
// whole files; the largest count when that multiple is too large (the
// others then split with --part).
func seriesParts(counts []int, rows int64) int {
	l := 1
	for _, n := range counts {
		l = lcm(l, n)
		if l > 64 {
			l = 0
			break
		}
	}
	if l == 0 || int64(l) > rows {
		l = 1
		for _, n := range counts {
			l = max(l, n)
		}
	}
	return l
}

func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

func joinInts(s []int) string {
	p := make([]string, len(s))
	for i, v := range s {
		p[i] = strconv.Itoa(v)
	}
	return strings.Join(p, ",")
}
