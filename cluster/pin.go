package cluster

import (
	"fmt"
	"math"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Pinning. A cgroup's quota caps how much CPU time a peer gets, not where
// it runs: four peers capped at 0.4 core on a 2-core machine float over
// both cores, each one's threads landing on whichever core is free, so
// every peer finds its caches holding another peer's data at every switch.
// A VM's vCPUs are its own. So with Config.CPUs each peer is also bound to
// ceil(CPUs) of the machine's CPUs, packed so that no CPU is asked for more
// than one core's time: peers 0 and 2 on CPU 0, 1 and 3 on CPU 1 in the
// example. Measured on this project's 2-core machine (docs/scaling.md):
// four peers at 0.4 core went from 245k to 424k-437k examples/s in all when
// they were bound in the middle of one run.

// pinPlan returns the CPUs (of allowed, the CPUs this process may run on)
// each of n processes capped at cpus cores should be bound to, or nil and
// why not: when a process could use every allowed CPU anyway, or when the
// processes cannot be packed without asking some CPU for more than one
// core (left free, the kernel spreads them better).
func pinPlan(allowed []int, n int, cpus float64) ([][]int, string) {
	k := int(math.Ceil(cpus - 1e-9))
	switch {
	case n <= 0 || cpus <= 0:
		return nil, "no caps"
	case len(allowed) == 0:
		return nil, "no CPUs known"
	case k >= len(allowed):
		return nil, fmt.Sprintf("each peer may use all %d CPUs", len(allowed))
	}
	load := make([]float64, len(allowed))
	plan := make([][]int, n)
	for i := range plan {
		// The k least loaded CPUs, the first ones on ties: round robin
		// when all caps are equal.
		picked := make([]bool, len(allowed))
		for range k {
			best := -1
			for c := range allowed {
				if !picked[c] && (best < 0 || load[c] < load[best]-1e-9) {
					best = c
				}
			}
			picked[best] = true
			load[best] += cpus / float64(k)
			plan[i] = append(plan[i], allowed[best])
		}
	}
	for c, l := range load {
		if l > 1+1e-9 {
			return nil, fmt.Sprintf("%d peers of %g cores do not fit on %d CPUs without asking CPU %d for %.2f cores", n, cpus, len(allowed), allowed[c], l)
		}
	}
	return plan, ""
}

// allowedCPUs returns the CPUs this process may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("cluster: %w: reading the CPUs this process may use: %v", ErrCgroup, err)
	}
	var cpus []int
	for c := range 8 * int(unsafe.Sizeof(set)) {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// describePlan is a plan for logs: "peer 0: CPU 0, peer 1: CPU 1".
func describePlan(plan [][]int) string {
	var b strings.Builder
	for i, cpus := range plan {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("peer " + strconv.Itoa(i) + ": CPU ")
		for j, c := range cpus {
			if j > 0 {
				b.WriteString("+")
			}
			b.WriteString(strconv.Itoa(c))
		}
	}
	return b.String()
}

// startOn starts cmd bound to cpus (none: unbound). A child inherits the
// CPU affinity of the thread that forks it, and Go forks on the calling
// goroutine's thread: so this thread is locked, bound, forks, and is given
// its own affinity back. The process is bound from its first instruction,
// with every thread it ever starts.
func startOn(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("cluster: %w: reading this thread's CPUs: %v", ErrCgroup, err)
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("cluster: %w: binding to CPUs %v: %v", ErrCgroup, cpus, err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil {
		// Leave the thread locked: the goroutine keeps it, and no other
		// goroutine runs on a thread bound to the peer's CPUs.
		return fmt.Errorf("cluster: %w: giving this thread its CPUs back: %v (start: %v)", ErrCgroup, rerr, err)
	}
	runtime.UnlockOSThread()
	return err
}
