package train

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// TestJoinsBounded pins agree.go's J1-J4 at the leader: a join from a peer
// the membership does not know alive is refused and kept nowhere; a known
// one is pending; a peer asking again under a new member ID replaces its
// request; no more than maxJoins are pending; a pending join whose peer
// stops being alive is dropped.
func TestJoinsBounded(t *testing.T) {
	tn := newTNet(t, 3, 3, Sync)
	c := tn.cores[tn.leader()]
	var alive []uint64
	for _, name := range tn.names {
		alive = append(alive, tn.cores[name].cfg.ID)
	}
	join := func(peer string, id uint64) {
		c.Receive(peer, &wire.Core{Op: wire.CoreJoin, Member: id})
		c.Ready()
	}
	// J1: a stranger.
	before := c.stats.Rejected
	join("stranger", MemberID("stranger", 1))
	if len(c.ag.leader.joins) != 0 || c.stats.Rejected != before+1 {
		t.Fatalf("a join from a peer not alive: pending %v, refused %d; want none pending, one refused", c.ag.leader.joins, c.stats.Rejected-before)
	}
	// Known alive: pending.
	x1, x2 := MemberID("x", 1), MemberID("x", 2)
	c.Alive(append(alive, x1, x2))
	join("x", x1)
	if c.ag.leader.joins[x1] != "x" {
		t.Fatalf("a join from a live peer: pending %v, want x", c.ag.leader.joins)
	}
	// J2: the same peer under another ID replaces it.
	join("x", x2)
	if len(c.ag.leader.joins) != 1 || c.ag.leader.joins[x2] != "x" {
		t.Fatalf("the same peer asking under a new ID: pending %v, want only x's new ID", c.ag.leader.joins)
	}
	// J3: at most maxJoins.
	var many []uint64
	for i := range 2 * maxJoins {
		many = append(many, MemberID(fmt.Sprintf("y%d", i), 1))
	}
	c.Alive(append(append(alive, x2), many...))
	for i, id := range many {
		join(fmt.Sprintf("y%d", i), id)
	}
	if len(c.ag.leader.joins) > maxJoins {
		t.Fatalf("%d joins pending, want at most %d", len(c.ag.leader.joins), maxJoins)
	}
	// J4: peers no longer alive are dropped.
	c.Alive(alive)
	c.Tick()
	c.Ready()
	if len(c.ag.leader.joins) != 0 {
		t.Fatalf("%d joins pending after their peers died, want 0", len(c.ag.leader.joins))
	}
}

// TestJoinFloodIsCheap: 10,000 join requests from peers the membership
// does not know (what a stranger that reached the link could send) cost
// the leader under 0.1 s of core time and leave its state under 1 MiB
// larger. (Under the race detector only the state is checked: it slows the
// core tenfold.)
func TestJoinFloodIsCheap(t *testing.T) {
	tn := newTNet(t, 3, 3, Sync)
	c := tn.cores[tn.leader()]
	msgs := make([]*wire.Core, 10000)
	from := make([]string, len(msgs))
	for i := range msgs {
		from[i] = fmt.Sprintf("s%d", i)
		msgs[i] = &wire.Core{Op: wire.CoreJoin, Member: MemberID(from[i], uint64(i))}
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	// The core's own time: this thread's CPU time (a loaded machine
	// stretches the wall clock, not the work), wall time where the
	// system cannot say.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0, hasCPU := threadCPU()
	start := time.Now()
	for i, m := range msgs {
		c.Receive(from[i], m)
		c.Ready() // the driver takes the replies away
	}
	took := time.Since(start)
	if cpu1, ok := threadCPU(); ok && hasCPU {
		took = cpu1 - cpu0
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	grew := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	runtime.KeepAlive(msgs) // (they were on the heap before: only what the core kept counts)
	t.Logf("10,000 forged joins: %v of core time, heap %+d bytes, %d pending", took, grew, len(c.ag.leader.joins))
	if took > 100*time.Millisecond && !raceEnabled {
		t.Errorf("10,000 forged joins took %v, want under 0.1 s", took)
	}
	if grew > 1<<20 {
		t.Errorf("the leader's heap grew %d bytes, want under 1 MiB", grew)
	}
	if len(c.ag.leader.joins) != 0 {
		t.Errorf("%d joins pending, want 0", len(c.ag.leader.joins))
	}
}

// TestDeferredBounded pins owner.go's D1-D5 on a joiner (it knows no
// configuration, so it keeps what comes, within the bounds) and on a member
// (messages of configurations far ahead are refused).
func TestDeferredBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Self, cfg.ID, cfg.Model, cfg.Place, cfg.Contact = "joiner", MemberID("joiner", 1), testModel(t), placeMod, "p0"
	cfg.Limits.Features = cfg.Model.Layout.Features
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	push := func(from string, req uint64, rows int) *wire.Core {
		m := &wire.Core{Op: wire.CorePush, Member: MemberID(from, 1), Config: 3, Round: 5, Req: req, RowWidth: 1, Shards: []uint32{0, 1, 2, 3}}
		for k := range rows {
			m.Rows.Idx = append(m.Rows.Idx, uint32(k))
			m.Rows.Val = append(m.Rows.Val, 1)
		}
		return m
	}
	// D2: one peer fills at most half the queue, and the queue holds at
	// most maxDeferred.
	for i := range maxDeferred {
		c.Receive("a", push("a", uint64(i+1), 1))
	}
	if got := c.o.queue.deferFrom["a"]; got != maxDeferred/2 {
		t.Errorf("peer a has %d deferred, want %d (half the queue)", got, maxDeferred/2)
	}
	for _, p := range []string{"b", "c"} {
		for i := range maxDeferred / 2 {
			c.Receive(p, push(p, uint64(i+1), 1))
		}
	}
	if len(c.o.queue.deferred) != maxDeferred {
		t.Errorf("%d deferred, want %d", len(c.o.queue.deferred), maxDeferred)
	}
	// D5: the same request again is kept once.
	c.o.queue.take()
	c.Receive("a", push("a", 7, 1))
	c.Receive("a", push("a", 7, 1))
	if len(c.o.queue.deferred) != 1 {
		t.Errorf("one request sent twice: %d deferred, want 1", len(c.o.queue.deferred))
	}
	// D3: bytes, under a limit made small for the test.
	if got := deferredLimit(&c.m.Layout); got != 256<<20 {
		t.Errorf("deferredLimit %d for a tiny model, want the 256 MiB floor", got)
	}
	c.o.queue.take()
	c.o.queue.deferLimit = 64 << 10
	per := msgBytes(push("a", 1, 60))
	for i := range 1000 {
		p := fmt.Sprintf("q%d", i%64)
		c.Receive(p, push(p, uint64(i+1), 60))
	}
	if c.o.queue.deferBytes > c.o.queue.deferLimit || len(c.o.queue.deferred) != c.o.queue.deferLimit/per {
		t.Errorf("%d deferred of %d bytes each: %d bytes, limit %d; want the queue full to the limit", len(c.o.queue.deferred), per, c.o.queue.deferBytes, c.o.queue.deferLimit)
	}

	// D4 on a member: a configuration far ahead is refused.
	tn := newTNet(t, 3, 3, Sync)
	tn.leader()
	m := tn.cores["p0"]
	before := m.stats.Rejected
	far := &wire.Core{Op: wire.CorePush, Member: MemberID("p1", 1), Config: 1 + maxConfigAhead + 1, Round: 3, Req: 1, Shards: []uint32{0}}
	m.Receive("p1", far)
	if m.stats.Rejected != before+1 || len(m.o.queue.deferred) != 0 {
		t.Errorf("a push of configuration %d (newest here 1): refused %d, deferred %d; want refused", far.Config, m.stats.Rejected-before, len(m.o.queue.deferred))
	}
	near := &wire.Core{Op: wire.CorePush, Member: MemberID("p1", 1), Config: 3, Round: 3, Req: 2, Shards: []uint32{0}}
	m.Receive("p1", near)
	if len(m.o.queue.deferred) != 1 {
		t.Errorf("a push of configuration 3 (newest here 1): %d deferred, want 1", len(m.o.queue.deferred))
	}
}

// TestOwnerMapsBounded pins O8: a member's pushes of rounds far past the
// owner's progress are refused (they would be keys of its rounds map), and
// one member has at most maxPendingPer requests waiting.
func TestOwnerMapsBounded(t *testing.T) {
	tn := newTNet(t, 2, 3, Sync)
	tn.leader()
	c := tn.cores["p0"]
	from, id := "p1", MemberID("p1", 1)
	before := c.stats.Rejected
	for r := range 100 {
		c.Receive(from, &wire.Core{Op: wire.CorePush, Member: id, Config: 1, Round: maxRoundsAhead + 10 + uint64(r), Req: uint64(r + 1), Shards: []uint32{0, 2}})
	}
	if c.stats.Rejected != before+100 || len(c.o.rounds) != 0 {
		t.Errorf("100 pushes of rounds past the horizon: %d refused, %d rounds kept; want 100 refused, none kept", c.stats.Rejected-before, len(c.o.rounds))
	}
	for r := range 2 * maxPendingPer {
		c.Receive(from, &wire.Core{Op: wire.CorePull, Member: id, Config: 1, Round: 5, Through: 5, Req: uint64(1000 + r), Shards: []uint32{0}})
	}
	n := 0
	for _, k := range c.o.pending {
		if k.member == id {
			n++
		}
	}
	if n > maxPendingPer {
		t.Errorf("%d pulls of one member pending, want at most %d", n, maxPendingPer)
	}
}

// TestNoMovesAfterTheEnd: once every member has its final values (each
// said CoreFinished), a member that exits is not a crash to repair: the
// leader proposes no configuration, so no shard moves to the peers still
// there.
func TestNoMovesAfterTheEnd(t *testing.T) {
	tn := newTNet(t, 3, 3, Sync)
	lead := tn.leader()
	for _, name := range tn.names {
		tn.cores[name].Finish()
		tn.collect(name)
	}
	tn.deliver(1 << 16)
	var alive []uint64
	for _, name := range tn.names {
		if name == lead || len(alive) == 0 {
			alive = append(alive, tn.cores[name].cfg.ID)
		}
	}
	for _, name := range tn.names {
		tn.cores[name].Alive(alive) // the third member exited
		tn.collect(name)
	}
	tn.run(2000)
	if id := tn.cores[lead].ConfigID(); id != 1 {
		t.Errorf("configuration %d after a member exited at the end, want 1 (nothing proposed)", id)
	}
}
