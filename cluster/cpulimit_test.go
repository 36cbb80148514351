package cluster

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// The limit is read from the process's own group and every group above it
// in its hierarchy, the smallest wins, and "no limit" is told apart.
func TestCPULimitFromCgroupFiles(t *testing.T) {
	const v1mounts = "31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
	const v2mounts = "29 24 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
	cases := []struct {
		name, mounts, self string
		files              map[string]string
		want               float64 // 0: none
	}{
		{"v1 own group", v1mounts, "4:cpu,cpuacct:/run/peer0\n", map[string]string{
			"/sys/fs/cgroup/cpu,cpuacct/run/peer0/cpu.cfs_quota_us": "40000\n", "/sys/fs/cgroup/cpu,cpuacct/run/peer0/cpu.cfs_period_us": "100000\n",
			"/sys/fs/cgroup/cpu,cpuacct/run/cpu.cfs_quota_us": "-1\n", "/sys/fs/cgroup/cpu,cpuacct/run/cpu.cfs_period_us": "100000\n",
			"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 0.4},
		{"v1 parent smaller", v1mounts, "4:cpu,cpuacct:/run/peer0\n", map[string]string{
			"/sys/fs/cgroup/cpu,cpuacct/run/peer0/cpu.cfs_quota_us": "300000\n", "/sys/fs/cgroup/cpu,cpuacct/run/peer0/cpu.cfs_period_us": "100000\n",
			"/sys/fs/cgroup/cpu,cpuacct/run/cpu.cfs_quota_us": "150000\n", "/sys/fs/cgroup/cpu,cpuacct/run/cpu.cfs_period_us": "100000\n"}, 1.5},
		{"v1 no quota", v1mounts, "4:cpu,cpuacct:/\n", map[string]string{
			"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 0},
		{"v2 own group", v2mounts, "0::/user.slice/run/peer1\n", map[string]string{
			"/sys/fs/cgroup/user.slice/run/peer1/cpu.max": "20000 100000\n", "/sys/fs/cgroup/user.slice/run/cpu.max": "max 100000\n"}, 0.2},
		{"v2 max everywhere", v2mounts, "0::/user.slice\n", map[string]string{
			"/sys/fs/cgroup/user.slice/cpu.max": "max 100000\n"}, 0},
		{"container: the mount root is its own group", "31 30 0:28 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", "4:cpu:/docker/abc\n", map[string]string{
			"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "250000\n", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, 2.5},
		{"no cgroup file system", "22 1 0:5 / /proc rw - proc proc rw\n", "0::/\n", nil, 0},
	}
	for _, tc := range cases {
		read := func(name string) ([]byte, error) {
			if v, ok := tc.files[name]; ok {
				return []byte(v), nil
			}
			return nil, os.ErrNotExist
		}
		got, ok := cpuLimitIn(tc.mounts, tc.self, read)
		switch {
		case tc.want == 0 && ok:
			t.Errorf("%s: limit %g, want none", tc.name, got)
		case tc.want != 0 && (!ok || math.Abs(got-tc.want) > 1e-9):
			t.Errorf("%s: limit %g (%v), want %g", tc.name, got, ok, tc.want)
		}
	}
}

// A process started in a group capped at 0.4 cores reads its limit as 0.4
// and defaults to one training thread, where Go's runtime gives it
// GOMAXPROCS 2.
func TestCPULimitInACappedGroup(t *testing.T) {
	requireCPUGroups(t)
	g, err := NewCPUGroups(1, 0.4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	name, args := g.Command(0, os.Args[0], nil)
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "GOSSIPTRAIN_CPU_LIMIT=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the capped process: %v: %s", err, out)
	}
	var limit float64
	var ok bool
	var threads int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "limit %g %v threads %d", &limit, &ok, &threads); err != nil {
		t.Fatalf("the capped process printed %q: %v", out, err)
	}
	if !ok || math.Abs(limit-0.4) > 1e-6 || threads != 1 {
		t.Errorf("in a group capped at 0.4 cores: limit %g (%v), default threads %d; want 0.4 and 1", limit, ok, threads)
	}
	t.Logf("capped process: %s; this one: GOMAXPROCS %d", strings.TrimSpace(string(out)), runtime.GOMAXPROCS(0))
}
