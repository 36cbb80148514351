package sim

import (
	"sort"
	"strings"
)

// schedule is the fault events still to come, in the order of their
// ticks: those drawn for the chaos window (Faults: partitions, crashes,
// restarts, joins, leaves, each at a random tick of it) and those the run
// adds as it goes (a restarted or removed peer's start, a partition's
// heal). Which peer an event strikes is drawn when it fires (sim.fire).
type schedule struct {
	r      *rng
	events []scheduled
}

// scheduled is one fault event: kind is "partition", "crash", "restart",
// "join", "leave", "heal" or "start:PEER"; dur is how long a partition
// lasts and (halved) how long a restarted peer stays down.
type scheduled struct {
	at   int
	kind string
	dur  int
}

// draw schedules f's events at random ticks of its chaos window.
func (q *schedule) draw(f Faults) {
	add := func(n int, kind string) {
		for range n {
			at := 20 + q.r.intn(max(1, f.Chaos-20))
			q.events = append(q.events, scheduled{at: at, kind: kind, dur: 20 + q.r.intn(max(1, f.DeadAfter*3))})
		}
	}
	add(f.Partitions, "partition")
	add(f.Crashes, "crash")
	add(f.Restarts, "restart")
	add(f.Joins, "join")
	add(f.Leaves, "leave")
	q.sort()
}

func (q *schedule) sort() {
	sort.SliceStable(q.events, func(i, j int) bool { return q.events[i].at < q.events[j].at })
}

// add schedules e after the events of its tick already scheduled.
func (q *schedule) add(e scheduled) {
	q.events = append(q.events, e)
	q.sort()
}

// pop takes the next event due by tick.
func (q *schedule) pop(tick int) (scheduled, bool) {
	if len(q.events) == 0 || q.events[0].at > tick {
		return scheduled{}, false
	}
	e := q.events[0]
	q.events = q.events[1:]
	return e, true
}

// pending reports whether a start or a heal is still to come: the run is
// not over before them.
func (q *schedule) pending() bool {
	for _, e := range q.events {
		if strings.HasPrefix(e.kind, "start:") || e.kind == "heal" {
			return true
		}
	}
	return false
}

// faults fires the events due now.
func (s *sim) faults() {
	for {
		e, ok := s.sched.pop(s.tick)
		if !ok {
			return
		}
		s.fire(e)
	}
}

// fire acts out e on the running processes; an event that needs more
// running processes than there are (a crash that would leave none) is
// skipped.
func (s *sim) fire(e scheduled) {
	run := s.running()
	var live []*proc
	for _, p := range run {
		if !p.done && !p.core.Finishing() {
			live = append(live, p)
		}
	}
	switch e.kind {
	case "crash", "restart":
		if len(live) < 2 {
			return
		}
		p := live[s.r.intn(len(live))]
		s.crash(p)
		if e.kind == "restart" {
			s.sched.add(scheduled{at: s.tick + e.dur/2 + 1, kind: "start:" + p.peer})
		}
	case "join":
		if len(live) == 0 {
			return
		}
		name := peerName(s.nextPeer)
		s.nextPeer++
		s.start(name, live[s.r.intn(len(live))].peer)
	case "leave":
		if len(live) < 2 {
			return
		}
		p := live[s.r.intn(len(live))]
		s.logf("%s leaves", p.peer)
		p.core.Leave()
		s.handle(p)
	case "partition":
		if len(run) < 2 {
			return
		}
		s.partition(run, e.dur)
	case "heal":
		s.logf("partition healed")
		s.net.heal()
	default:
		if strings.HasPrefix(e.kind, "start:") {
			name := strings.TrimPrefix(e.kind, "start:")
			if s.byPeer[name] != nil || len(live) == 0 {
				return
			}
			s.start(name, live[s.r.intn(len(live))].peer)
		}
	}
}

// partition cuts a random minority of run off for dur ticks.
func (s *sim) partition(run []*proc, dur int) {
	k := 1 + s.r.intn(max(1, len(run)/2))
	perm := make([]int, len(run))
	for i := range perm {
		perm[i] = i
	}
	for i := len(perm) - 1; i > 0; i-- {
		j := s.r.intn(i + 1)
		perm[i], perm[j] = perm[j], perm[i]
	}
	side := map[string]bool{}
	for _, i := range perm[:k] {
		side[run[i].peer] = true
	}
	var peers, names []string
	for _, a := range run {
		peers = append(peers, a.peer)
		if side[a.peer] {
			names = append(names, a.peer)
		}
	}
	s.net.partition(peers, side)
	s.logf("partition: %v cut off for %d ticks", names, dur)
	s.sched.add(scheduled{at: s.tick + dur, kind: "heal"})
}
