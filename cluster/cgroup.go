package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrCgroup marks a failure to set up, use or remove the CPU cgroups of
// Config.CPUs.
var ErrCgroup = errors.New("cpu cgroups")

// cgroupPeriod is the CPU bandwidth period of the groups: the kernel's
// default, 100 ms. A peer capped at C cores may run C x 100 ms of CPU time
// in every 100 ms, then waits for the next period.
const cgroupPeriod = 100 * time.Millisecond

// MinCPUs is the smallest Config.CPUs: the kernel's smallest quota is 1 ms
// per period.
const MinCPUs = 0.01

// cgroupNamePrefix starts the name of every cgroup this package creates:
// "gossiptrain-<pid>-<run>-peer<i>", with the process ID (decimal) of the
// program that runs the cluster, so parallel runs never collide and a
// crashed run's groups can be told and removed (CleanupStaleCgroups).
const cgroupNamePrefix = "gossiptrain-"

var cgroupNameRe = regexp.MustCompile(`^gossiptrain-([0-9]+)-([0-9]+)-peer([0-9]+)$`)

// cgroupRuns numbers the capped runs of this process, for unique names.
var cgroupRuns atomic.Int64

// cpuHierarchy is where this machine's CPU controller lets us create
// groups.
type cpuHierarchy struct {
	v2   bool   // cgroup v2 (cpu.max), else v1 (cpu.cfs_quota_us)
	base string // the directory new groups are created in
}

func (h cpuHierarchy) String() string {
	if h.v2 {
		return "cgroup v2 at " + h.base
	}
	return "cgroup v1 cpu controller at " + h.base
}

// findCPUHierarchy finds a CPU controller to create groups in: cgroup v2
// when its cpu controller is available, else the v1 cpu controller's
// mount. The error says what is missing.
func findCPUHierarchy() (cpuHierarchy, error) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return cpuHierarchy{}, fmt.Errorf("cluster: %w: cannot read /proc/self/mountinfo (Linux only): %v", ErrCgroup, err)
	}
	own, _ := os.ReadFile("/proc/self/cgroup")
	return findCPUHierarchyIn(string(mounts), string(own))
}

// findCPUHierarchyIn is findCPUHierarchy on the contents of
// /proc/self/mountinfo and /proc/self/cgroup.
func findCPUHierarchyIn(mountinfo, selfCgroup string) (cpuHierarchy, error) {
	v1, v2 := cgroupMounts(mountinfo)
	own1, _, _, _ := ownCgroups(selfCgroup) // our own group ("1:cpu:/docker/…")
	var why []string
	if v2 != nil {
		ctrl, err := os.ReadFile(filepath.Join(v2[0], "cgroup.controllers"))
		if err == nil && hasWord(string(ctrl), "cpu") {
			return cpuHierarchy{v2: true, base: v2[0]}, nil
		}
		why = append(why, fmt.Sprintf("cgroup v2 at %s has no cpu controller (%s lists %q)", v2[0],
			filepath.Join(v2[0], "cgroup.controllers"), strings.TrimSpace(string(ctrl))))
	}
	if v1 != nil {
		base := v1[0]
		// Create the groups below our own group when the mount shows it
		// (a container's mount root is its own group).
		if rel, ok := strings.CutPrefix(own1, v1[1]); ok && rel != "" && rel != "/" {
			if st, err := os.Stat(filepath.Join(base, rel)); err == nil && st.IsDir() {
				base = filepath.Join(base, rel)
			}
		}
		return cpuHierarchy{base: base}, nil
	}
	if len(why) == 0 {
		why = append(why, "no cgroup file system is mounted (neither cgroup2 nor a cgroup v1 cpu controller in /proc/self/mountinfo)")
	}
	return cpuHierarchy{}, fmt.Errorf("cluster: %w: --cpus needs a CPU controller to cap the peers with: %s", ErrCgroup, strings.Join(why, "; "))
}

// cgroupMounts finds, in the contents of /proc/self/mountinfo, the cgroup
// v1 cpu controller's mount and the cgroup v2 mount, each as [mount point,
// mount root] (nil when absent).
func cgroupMounts(mountinfo string) (v1, v2 []string) {
	sc := bufio.NewScanner(strings.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		root, point := unescapeMount(f[3]), unescapeMount(f[4])
		switch g[0] {
		case "cgroup2":
			if v2 == nil {
				v2 = []string{point, root}
			}
		case "cgroup":
			for _, o := range strings.Split(g[2], ",") {
				if o == "cpu" && v1 == nil {
					v1 = []string{point, root}
				}
			}
		}
	}
	return v1, v2
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// CPUGroups are one cgroup per peer, each capped at the same number of
// cores: what makes N peers on one machine behave like N equal VMs (N
// uncapped processes on 2 cores share them and measure nothing). A process
// joins group i before it runs any of its own code (see Command), and
// Close removes the groups.
type CPUGroups struct {
	h    cpuHierarchy
	cpus float64
	dirs []string
}

// NewCPUGroups creates n groups capped at cpus cores each (the quota is
// cpus x 100 ms per 100 ms period). On error nothing is left behind; the
// error names --cpus and what is missing (root, a writable controller).
func NewCPUGroups(n int, cpus float64) (*CPUGroups, error) {
	if math.IsNaN(cpus) || cpus < MinCPUs {
		return nil, fmt.Errorf("cluster: %w: CPUs %g: want at least %g (1 ms of CPU time per 100 ms)", ErrConfig, cpus, MinCPUs)
	}
	h, err := findCPUHierarchy()
	if err != nil {
		return nil, err
	}
	g := &CPUGroups{h: h, cpus: cpus}
	name := fmt.Sprintf("%s%d-%d-", cgroupNamePrefix, os.Getpid(), cgroupRuns.Add(1))
	for i := range n {
		dir := filepath.Join(h.base, name+"peer"+strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			g.Close()
			return nil, g.mkdirError(dir, err)
		}
		g.dirs = append(g.dirs, dir)
		if err := g.limit(dir); err != nil {
			g.Close()
			return nil, err
		}
	}
	return g, nil
}

func (g *CPUGroups) mkdirError(dir string, err error) error {
	hint := ""
	switch {
	case errors.Is(err, os.ErrPermission) && os.Geteuid() != 0:
		hint = ": creating cgroups needs root (or a delegated cgroup): run as root, or without --cpus"
	case errors.Is(err, os.ErrPermission), errors.Is(err, syscall.EROFS):
		hint = ": the cgroup file system is read-only here (a container without a writable cgroup mount?): run without --cpus"
	}
	return fmt.Errorf("cluster: %w: --cpus: cannot create %s (%s): %v%s", ErrCgroup, dir, g.h, err, hint)
}

// limit writes the quota into group dir.
func (g *CPUGroups) limit(dir string) error {
	period := cgroupPeriod.Microseconds()
	quota := int64(math.Round(g.cpus * float64(period)))
	write := func(file, v string) error {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			return fmt.Errorf("cluster: %w: --cpus: writing %q to %s: %v", ErrCgroup, v, p, err)
		}
		return nil
	}
	if g.h.v2 {
		if err := enableCPUController(g.h.base); err != nil {
			return err
		}
		return write("cpu.max", fmt.Sprintf("%d %d", quota, period))
	}
	if err := write("cpu.cfs_period_us", strconv.FormatInt(period, 10)); err != nil {
		return err
	}
	return write("cpu.cfs_quota_us", strconv.FormatInt(quota, 10))
}

// enableCPUController turns on the cpu controller for base's children
// (cgroup v2), unless it is on.
func enableCPUController(base string) error {
	p := filepath.Join(base, "cgroup.subtree_control")
	cur, err := os.ReadFile(p)
	if err == nil && hasWord(string(cur), "cpu") {
		return nil
	}
	if err := os.WriteFile(p, []byte("+cpu"), 0o644); err != nil {
		return fmt.Errorf("cluster: %w: --cpus: enabling the cpu controller in %s: %v (a cgroup v2 group with processes of its own cannot enable controllers for children; run as root in the root cgroup, or in a delegated one)", ErrCgroup, p, err)
	}
	return nil
}

// Dir returns group i's directory.
func (g *CPUGroups) Dir(i int) string { return g.dirs[i] }

// CPUs is the cores each group may use.
func (g *CPUGroups) CPUs() float64 { return g.cpus }

// String describes the groups for logs.
func (g *CPUGroups) String() string {
	return fmt.Sprintf("%d groups of %g cores (%s)", len(g.dirs), g.cpus, g.h)
}

// Command returns the command line that runs name with args inside group
// i: a shell writes its own process ID into the group's cgroup.procs and
// then executes the command in its place, so the process is capped from
// its first instruction (Go's runtime then sees the limit too and sizes
// GOMAXPROCS by it) and keeps the process ID it was started with.
func (g *CPUGroups) Command(i int, name string, args []string) (string, []string) {
	procs := filepath.Join(g.dirs[i], "cgroup.procs")
	script := `echo $$ > "$0" || { echo "gossiptrain: cannot join the cgroup of --cpus ($0)" >&2; exit 125; }; exec "$@"`
	return "/bin/sh", append([]string{"-c", script, procs, name}, args...)
}

// CPUStat is a group's CPU accounting.
type CPUStat struct {
	Periods   int64         // enforcement periods with runnable processes
	Throttled int64         // periods in which the group used its whole quota
	Usage     time.Duration // CPU time used (cgroup v2 only; -1 when the controller does not say)
}

// Stat reads group i's cpu.stat.
func (g *CPUGroups) Stat(i int) (CPUStat, error) {
	st := CPUStat{Usage: -1}
	b, err := os.ReadFile(filepath.Join(g.dirs[i], "cpu.stat"))
	if err != nil {
		return st, fmt.Errorf("cluster: %w: %v", ErrCgroup, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "nr_periods":
			st.Periods = n
		case "nr_throttled":
			st.Throttled = n
		case "usage_usec":
			st.Usage = time.Duration(n) * time.Microsecond
		}
	}
	return st, nil
}

// Close removes the groups. Processes still in one (a peer's children
// that outlived it) are moved to the parent group first; a group the
// kernel still counts a dying process in is retried for up to 5 s.
func (g *CPUGroups) Close() error {
	if g == nil {
		return nil
	}
	var errs []error
	for _, dir := range g.dirs {
		errs = append(errs, removeCgroup(dir))
	}
	g.dirs = nil
	return errors.Join(errs...)
}

// removeCgroup moves dir's processes to its parent and removes it.
func removeCgroup(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	parentProcs := filepath.Join(filepath.Dir(dir), "cgroup.procs")
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(b)) {
				os.WriteFile(parentProcs, []byte(pid), 0o644) // a process that exits meanwhile is gone anyway
			}
		}
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("cluster: %w: removing %s: %v", ErrCgroup, dir, err)
		}
		time.Sleep(20 * time.Millisecond) // the kernel lets go of exited processes in microseconds: poll
	}
}

// CheckCPUGroups reports why Config.CPUs cannot work on this machine (no
// CPU controller, not root, a read-only cgroup file system), or nil, by
// creating and removing one capped group.
func CheckCPUGroups() error {
	g, err := NewCPUGroups(1, 0.5)
	if err != nil {
		return err
	}
	return g.Close()
}

// CleanupStaleCgroups removes the groups left behind by runs whose
// process is gone (killed with SIGKILL: its peers died with it, but the
// groups stay), and returns the groups it removed. Runs of live processes
// are left alone. A machine without a CPU controller has nothing to clean.
func CleanupStaleCgroups() ([]string, error) {
	h, err := findCPUHierarchy()
	if err != nil {
		return nil, nil
	}
	ents, err := os.ReadDir(h.base)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w: %v", ErrCgroup, err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		m := cgroupNameRe.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		dir := filepath.Join(h.base, e.Name())
		if err := removeCgroup(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, dir)
	}
	return removed, errors.Join(errs...)
}
