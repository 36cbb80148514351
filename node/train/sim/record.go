package sim

import "fmt"

// recorder keeps what a run reports as it goes: its readable trace
// (Options.Record) and its violations (at most 20 kept; every one is
// traced), each line stamped with the tick it happened at.
type recorder struct {
	record     bool
	tick       *int // the run's clock
	trace      []string
	violations []string
	failed     bool
}

func (r *recorder) logf(format string, args ...any) {
	if r.record {
		r.trace = append(r.trace, fmt.Sprintf("%5d ", *r.tick)+fmt.Sprintf(format, args...))
	}
}

// violate records a violation of check what (its name and invariant, as
// "replicas (I6)").
func (r *recorder) violate(what, format string, args ...any) {
	msg := fmt.Sprintf("tick %d: %s: ", *r.tick, what) + fmt.Sprintf(format, args...)
	r.failed = true
	if len(r.violations) < 20 {
		r.violations = append(r.violations, msg)
	}
	r.logf("VIOLATION %s", msg)
}
