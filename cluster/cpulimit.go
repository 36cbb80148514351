package cluster

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CPULimit returns the CPU bandwidth this process may use, in cores, as
// its cgroup caps it (the smallest cap on the way from its own group up to
// the hierarchy's root; cgroup v2 cpu.max or v1 cpu.cfs_quota_us), and
// false when nothing caps it or the caps cannot be read (not Linux, no
// cgroup file system).
//
// Go's runtime reads the same limit but never sets GOMAXPROCS below 2, so
// a process capped at 0.4 cores runs two threads of Go code that share
// 0.4 cores: for training that is worse than one (a lone train capped at
// 0.4 core ran about 25% faster with --threads 1; docs/scaling.md).
func CPULimit() (float64, bool) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return 0, false
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	return cpuLimitIn(string(mounts), string(own), os.ReadFile)
}

// cpuLimitIn is CPULimit on the contents of /proc/self/mountinfo and
// /proc/self/cgroup, reading the groups' files with read.
func cpuLimitIn(mountinfo, selfCgroup string, read func(string) ([]byte, error)) (float64, bool) {
	v1, v2 := cgroupMounts(mountinfo)
	own1, have1, own2, have2 := ownCgroups(selfCgroup)
	best, found := math.Inf(1), false
	consider := func(cores float64) {
		if cores > 0 && cores < best {
			best, found = cores, true
		}
	}
	// walk reads limit in every group from dir up to the mount point.
	walk := func(point, root, own string, limit func(dir string) (float64, bool)) {
		rel, ok := strings.CutPrefix(own, root)
		if !ok {
			rel = "/" // (a group outside the mount's view: only the mount's own)
		}
		dir := filepath.Join(point, rel)
		for {
			if c, ok := limit(dir); ok {
				consider(c)
			}
			if dir == point || !strings.HasPrefix(dir, point) {
				return
			}
			dir = filepath.Dir(dir)
		}
	}
	if v2 != nil && have2 {
		walk(v2[0], v2[1], own2, func(dir string) (float64, bool) {
			b, err := read(filepath.Join(dir, "cpu.max"))
			if err != nil {
				return 0, false
			}
			f := strings.Fields(string(b))
			if len(f) != 2 || f[0] == "max" {
				return 0, false
			}
			q, err1 := strconv.ParseFloat(f[0], 64)
			p, err2 := strconv.ParseFloat(f[1], 64)
			if err1 != nil || err2 != nil || p <= 0 {
				return 0, false
			}
			return q / p, true
		})
	}
	if v1 != nil && have1 {
		walk(v1[0], v1[1], own1, func(dir string) (float64, bool) {
			qb, err1 := read(filepath.Join(dir, "cpu.cfs_quota_us"))
			pb, err2 := read(filepath.Join(dir, "cpu.cfs_period_us"))
			if err1 != nil || err2 != nil {
				return 0, false
			}
			q, err1 := strconv.ParseFloat(strings.TrimSpace(string(qb)), 64)
			p, err2 := strconv.ParseFloat(strings.TrimSpace(string(pb)), 64)
			if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
				return 0, false // -1: no quota
			}
			return q / p, true
		})
	}
	return best, found
}

// DefaultThreads is the training threads a process should use by default:
// the CPUs Go may run it on (GOMAXPROCS, given as procs), or its cgroup CPU
// limit rounded up when that is fewer (at least 1).
func DefaultThreads(procs int) int {
	if limit, ok := CPULimit(); ok {
		return max(1, min(procs, int(math.Ceil(limit-1e-9))))
	}
	return procs
}

// ownCgroups finds, in the contents of /proc/self/cgroup, this process's
// group in the v1 cpu controller's hierarchy ("4:cpu,cpuacct:/docker/…")
// and in the v2 hierarchy ("0::/user.slice/…"), and whether each is there.
func ownCgroups(selfCgroup string) (v1 string, has1 bool, v2 string, has2 bool) {
	for _, line := range strings.Split(selfCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, has2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				v1, has1 = parts[2], true
			}
		}
	}
	return v1, has1, v2, has2
}
