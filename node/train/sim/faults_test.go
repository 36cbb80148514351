package sim

import (
	"testing"
)

// TestScheduleDraw: the schedule holds as many events of each kind as
// Faults asks, each at a tick of the chaos window past the first 20, in
// tick order; an event added later goes after those of its tick; pop
// hands out only the events due; a start or a heal still to come keeps
// the run going (pending).
func TestScheduleDraw(t *testing.T) {
	f := Faults{Partitions: 2, Crashes: 3, Restarts: 1, Joins: 2, Leaves: 1, Chaos: 300, DeadAfter: 40}
	q := schedule{r: &rng{s: 3}}
	q.draw(f)
	count := map[string]int{}
	for i, e := range q.events {
		count[e.kind]++
		if e.at < 20 || e.at >= f.Chaos {
			t.Errorf("%s at tick %d, outside 20..%d", e.kind, e.at, f.Chaos-1)
		}
		if i > 0 && e.at < q.events[i-1].at {
			t.Errorf("event %d at tick %d after one at %d", i, e.at, q.events[i-1].at)
		}
	}
	want := map[string]int{"partition": 2, "crash": 3, "restart": 1, "join": 2, "leave": 1}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%d %s events, want %d", count[k], k, n)
		}
	}
	if q.pending() {
		t.Error("pending with no start or heal scheduled")
	}
	first := q.events[0].at
	if _, ok := q.pop(first - 1); ok {
		t.Errorf("pop before tick %d gave an event", first)
	}
	q.add(scheduled{at: first, kind: "heal"})
	if !q.pending() {
		t.Error("not pending with a heal scheduled")
	}
	if q.events[0].kind == "heal" {
		t.Errorf("a heal added at tick %d went before the event already there", first)
	}
	n := 0
	for {
		if _, ok := q.pop(f.Chaos); !ok {
			break
		}
		n++
	}
	if n != 10 || len(q.events) != 0 {
		t.Errorf("popped %d events, %d left, want 10 and 0", n, len(q.events))
	}
}
