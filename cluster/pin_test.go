package cluster

import (
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPinPlan(t *testing.T) {
	for _, c := range []struct {
		allowed []int
		n       int
		cpus    float64
		want    string // fmt of the plan, or "" for none
	}{
		{[]int{0, 1}, 4, 0.4, "[[0] [1] [0] [1]]"},                 // two on each CPU: 0.8 cores asked of each
		{[]int{0, 1}, 1, 0.4, "[[0]]"},                             // the lone baseline
		{[]int{0, 1}, 8, 0.2, "[[0] [1] [0] [1] [0] [1] [0] [1]]"}, // 0.8 of each
		{[]int{0, 1}, 2, 1, "[[0] [1]]"},                           // a whole CPU each
		{[]int{2, 5}, 2, 0.5, "[[2] [5]]"},                         // the CPUs this process may use, not 0..n
		{[]int{0, 1, 2, 3}, 2, 1.5, "[[0 1] [2 3]]"},               // ceil(1.5) CPUs each, 0.75 of each asked
		{[]int{0, 1, 2, 3}, 3, 1.5, ""},                            // the third would ask 1.5 of two CPUs
		{[]int{0, 1}, 3, 0.6, ""},                                  // 1.2 cores of one CPU: left to the kernel
		{[]int{0, 1}, 2, 1.5, ""},                                  // each may use both anyway
		{[]int{0, 1}, 4, 0.5, "[[0] [1] [0] [1]]"},                 // exactly full
		{nil, 2, 0.5, ""},
	} {
		plan, why := pinPlan(c.allowed, c.n, c.cpus)
		got := ""
		if plan != nil {
			got = fmt.Sprint(plan)
		} else if why == "" {
			t.Errorf("pinPlan(%v, %d, %g): no plan and no reason", c.allowed, c.n, c.cpus)
		}
		if got != c.want {
			t.Errorf("pinPlan(%v, %d, %g) = %s (%s), want %s", c.allowed, c.n, c.cpus, got, why, c.want)
		}
	}
}

// startOn binds the child from its start and gives the calling thread its
// own CPUs back.
func TestStartOnBindsTheChildOnly(t *testing.T) {
	allowed, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(allowed) < 2 {
		t.Skipf("one CPU (%v): nothing to bind to", allowed)
	}
	runtime.LockOSThread() // startOn's thread is this one: check it after
	defer runtime.UnlockOSThread()
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	want := allowed[len(allowed)-1]
	cmd := exec.Command("grep", "Cpus_allowed_list", "/proc/self/status")
	var out strings.Builder
	cmd.Stdout = &out
	if err := startOn(cmd, []int{want}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != fmt.Sprintf("Cpus_allowed_list:\t%d", want) {
		t.Errorf("the child says %q, want CPU %d only", got, want)
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the calling thread's CPUs: %d after, %d before", after.Count(), before.Count())
	}
}
