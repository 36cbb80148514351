package cluster

// Tests of Config.CPUs: they need root and a writable CPU controller, and
// skip without. Every group they create has this process's ID in its name
// and is checked to be gone afterwards.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// requireCPUGroups skips the test unless capped groups can be created here.
func requireCPUGroups(t *testing.T) {
	t.Helper()
	if err := CheckCPUGroups(); err != nil {
		t.Skipf("CPU cgroups unavailable (needs root and a writable cgroup v1 cpu or v2 cpu controller): %v", err)
	}
}

// spin is the test binary as a busy process: it prints its cgroups (so the
// test sees it was in its group from its first code), then keeps every
// CPU it may use busy for the duration d.
func spin(d string) int {
	dur, err := time.ParseDuration(d)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	b, _ := os.ReadFile("/proc/self/cgroup")
	fmt.Printf("gomaxprocs %d\n%s", runtime.GOMAXPROCS(0), b)
	var stop atomic.Bool
	for range runtime.GOMAXPROCS(0) {
		go func() {
			x := uint64(1)
			for !stop.Load() {
				x = x*6364136223846793005 + 1442695040888963407
			}
			_ = x
		}()
	}
	time.Sleep(dur) // the busy goroutines run meanwhile: this is the load, not a wait
	stop.Store(true)
	return 0
}

// ownGroups lists the groups of this process's runs still present.
func ownGroups(t *testing.T) []string {
	t.Helper()
	h, err := findCPUHierarchy()
	if err != nil {
		t.Fatal(err)
	}
	m, _ := filepath.Glob(filepath.Join(h.base, fmt.Sprintf("%s%d-*", cgroupNamePrefix, os.Getpid())))
	return m
}

// A busy process in a group capped at 0.2 cores uses about 0.2 cores: its
// CPU time over its lifetime (the cgroup's usage on v2, the kernel's
// accounting of the process on v1, whose cpu controller keeps no usage)
// stays under 1.5x the cap although it tries to use every core, the
// controller says it throttled it, and the group is gone after Close.
func TestCPUGroupsCapABusyProcess(t *testing.T) {
	requireCPUGroups(t)
	const cpus = 0.2
	g, err := NewCPUGroups(1, cpus)
	if err != nil {
		t.Fatal(err)
	}
	dir := g.Dir(0)
	t.Cleanup(func() { g.Close() })
	name, args := g.Command(0, os.Args[0], nil)
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "GOSSIPTRAIN_SPIN=1500ms")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("the capped process: %v: %s", err, out.String())
	}
	wall := time.Since(start)
	if !strings.Contains(out.String(), filepath.Base(dir)) {
		t.Errorf("the process did not start in its group %s; it printed:\n%s", filepath.Base(dir), out.String())
	}
	st, err := g.Stat(0)
	if err != nil {
		t.Fatal(err)
	}
	used := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	how := "process CPU time"
	if st.Usage >= 0 {
		used, how = st.Usage, "cgroup usage"
	}
	cores := used.Seconds() / wall.Seconds()
	t.Logf("%s: %v in %v: %.3f cores (cap %g); %d of %d periods throttled; %s",
		how, used.Round(time.Millisecond), wall.Round(time.Millisecond), cores, cpus, st.Throttled, st.Periods, firstLine(out.String()))
	if cores > 1.5*cpus {
		t.Errorf("the capped process used %.3f cores, more than 1.5x its cap of %g", cores, cpus)
	}
	if cores < 0.25*cpus {
		t.Errorf("the capped process used %.3f cores: it hardly ran (cap %g)", cores, cpus)
	}
	if st.Throttled == 0 {
		t.Errorf("cpu.stat says the group was never throttled (%d periods): is the quota in force?", st.Periods)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("group %s still exists after Close: %v", dir, err)
	}
}

// Run with CPUs starts every peer inside a group of its own (it is in it
// from its first code) and removes the groups afterwards; so does an
// interrupted run.
func TestRunCapsEveryPeer(t *testing.T) {
	requireCPUGroups(t)
	for _, interrupt := range []bool{false, true} {
		t.Run(fmt.Sprintf("interrupted=%v", interrupt), func(t *testing.T) {
			behaviour := "ok"
			if interrupt {
				behaviour = "hang"
			}
			cfg := fakeConfig(t, 3, func(int) string { return behaviour })
			cfg.CPUs = 0.5
			allowed, err := allowedCPUs()
			if err != nil {
				t.Fatal(err)
			}
			plan, _ := pinPlan(allowed, 3, cfg.CPUs)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var during []string
			if interrupt {
				cfg.ProgressEvery = 20 * time.Millisecond
				cfg.OnProgress = func(ps []PeerProgress) {
					if during == nil {
						during = ownGroups(t)
					}
					cancelWhenTraining(3, cancel)(ps)
				}
			}
			res, err := Run(ctx, cfg)
			if interrupt && !errors.Is(err, context.Canceled) {
				t.Fatalf("Run: %v, want context.Canceled", err)
			} else if !interrupt && err != nil {
				t.Fatal(err)
			}
			assertAllGone(t, res)
			for i, p := range res.Peers {
				b, err := os.ReadFile(p.Log)
				if err != nil {
					t.Fatal(err)
				}
				want := fmt.Sprintf("%s%d-", cgroupNamePrefix, os.Getpid())
				if !strings.Contains(string(b), want) || !strings.Contains(string(b), "-peer"+strconv.Itoa(i)) {
					t.Errorf("peer %d did not run in its group %s…peer%d; its log:\n%s", i, want, i, b)
				}
				// Bound to its share of the CPUs from its first code, or
				// free where three half cores do not pack (one CPU).
				wantCPUs := fmt.Sprint(allowed)
				if plan != nil {
					wantCPUs = fmt.Sprint(plan[i])
				}
				if !strings.Contains(string(b), `"allowed_cpus":"`+wantCPUs+`"`) {
					t.Errorf("peer %d ran on CPUs other than %s; its log:\n%s", i, wantCPUs, b)
				}
			}
			if interrupt && len(during) != 3 {
				t.Errorf("groups while the run was on: %v, want 3", during)
			}
			if left := ownGroups(t); len(left) > 0 {
				t.Errorf("groups left behind: %v", left)
			}
		})
	}
}

// Standalone runs plain train processes: no job flags, capped too; one,
// or several at once.
func TestRunStandalone(t *testing.T) {
	cfg := fakeConfig(t, 1, func(int) string { return "ok" })
	cfg.Standalone = true
	cfg.PeerArgs = nil
	if CheckCPUGroups() == nil {
		cfg.CPUs = 0.5
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := res.Reports()
	if err != nil {
		t.Fatal(err)
	}
	if s := runs[0].Summary; s == nil || s.Topology != "single" || s.Examples != 500 {
		t.Fatalf("summary %+v, want the plain train's", s)
	}
	if left := ownGroups(t); cfg.CPUs > 0 && len(left) > 0 {
		t.Errorf("groups left behind: %v", left)
	}
	// Several: plain train processes at once (bench's processes apart), each
	// with its own report.
	cfg.Peers = 3
	res, err = Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if runs, err = res.Reports(); err != nil || len(runs) != 3 {
		t.Fatalf("3 standalone processes: %d reports, %v", len(runs), err)
	}
	for i, r := range runs {
		if s := r.Summary; s == nil || s.Topology != "single" {
			t.Errorf("process %d: summary %+v, want a plain train's", i, s)
		}
	}
	if left := ownGroups(t); cfg.CPUs > 0 && len(left) > 0 {
		t.Errorf("groups left behind: %v", left)
	}
	cfg.NetNS = &NetNS{Rate: "100mbit"}
	if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
		t.Errorf("Standalone in network namespaces: %v, want ErrConfig", err)
	}
}

// CPUs works with network namespaces: the group is joined outside the
// namespace (ip netns exec remounts /sys), the peers still find each other.
func TestRunCapsPeersInNamespaces(t *testing.T) {
	requireCPUGroups(t)
	requireNetNS(t)
	cfg := fakeConfig(t, 2, func(int) string { return "ok" })
	cfg.CPUs = 0.5
	cfg.NetNS = &NetNS{Rate: "100mbit"}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range res.Peers {
		b, _ := os.ReadFile(p.Log)
		if !strings.Contains(string(b), fmt.Sprintf("%s%d-", cgroupNamePrefix, os.Getpid())) {
			t.Errorf("peer %d ran outside its group; its log:\n%s", i, b)
		}
		if !strings.HasPrefix(p.Addr, "/ip4/"+subnetPrefix) {
			t.Errorf("peer %d listened on %q, not in its namespace", i, p.Addr)
		}
	}
	if left := ownGroups(t); len(left) > 0 {
		t.Errorf("groups left behind: %v", left)
	}
	if left := leftovers(t, res.NetNS); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}

func TestCPUsValidate(t *testing.T) {
	for _, c := range []float64{-1, 0.001} {
		cfg := DefaultConfig()
		cfg.Dir, cfg.CPUs = t.TempDir(), c
		if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "CPUs") {
			t.Errorf("CPUs %g: %v, want ErrConfig naming CPUs", c, err)
		}
	}
}

// The hierarchy is found from mountinfo; without any, the error names
// --cpus and what is missing.
func TestFindCPUHierarchy(t *testing.T) {
	v1 := "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
		"32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n" +
		"40 30 0:37 / /nonexistent/unified rw,relatime - cgroup2 cgroup2 rw\n"
	h, err := findCPUHierarchyIn(v1, "1:cpu:/\n0::/\n")
	if err != nil || h.v2 || h.base != "/sys/fs/cgroup/cpu" {
		t.Errorf("v1 with a cgroup2 mount without cpu: %+v, %v; want v1 at /sys/fs/cgroup/cpu", h, err)
	}
	comounted := "25 24 0:22 / /sys/fs/cgroup/cpu\\040cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
	if h, err := findCPUHierarchyIn(comounted, ""); err != nil || h.base != "/sys/fs/cgroup/cpu cpuacct" {
		t.Errorf("co-mounted cpu,cpuacct: %+v, %v", h, err)
	}
	_, err = findCPUHierarchyIn("22 1 0:21 / /proc rw - proc proc rw\n", "")
	if !errors.Is(err, ErrCgroup) || !strings.Contains(err.Error(), "--cpus") || !strings.Contains(err.Error(), "no cgroup file system") {
		t.Errorf("no cgroups: %v, want ErrCgroup naming --cpus and what is missing", err)
	}
}

// A run killed with SIGKILL leaves its groups; CleanupStaleCgroups removes
// those of dead processes only.
func TestCleanupStaleCgroups(t *testing.T) {
	requireCPUGroups(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	pid := dead.ProcessState.Pid()
	if alive(pid) {
		t.Skip("the PID of a finished process is already reused")
	}
	h, err := findCPUHierarchy()
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(h.base, fmt.Sprintf("%s%d-1-peer0", cgroupNamePrefix, pid))
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroup(stale) })
	live, err := NewCPUGroups(1, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	removed, err := CleanupStaleCgroups()
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != stale {
		t.Errorf("removed %v, want [%s]", removed, stale)
	}
	if _, err := os.Stat(live.Dir(0)); err != nil {
		t.Errorf("the live run's group went: %v", err)
	}
}
