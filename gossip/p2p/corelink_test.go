package p2p

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/gossiptest"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

const coreJob = "p2p-core-test"

// coreRx records what a link delivers, by sender.
type coreRx struct {
	mu  sync.Mutex
	got map[string][]*wire.Core
}

func newCoreRx() *coreRx { return &coreRx{got: make(map[string][]*wire.Core)} }

func (r *coreRx) deliver(from string, m *wire.Core) {
	r.mu.Lock()
	r.got[from] = append(r.got[from], m)
	r.mu.Unlock()
}

func (r *coreRx) from(peer string) []*wire.Core {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*wire.Core(nil), r.got[peer]...)
}

func (r *coreRx) count(peer string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[peer])
}

// bigLimits are the limits of a run whose shards' state transfers reach
// tens of MiB (node/train's simulator runs with the same row and value
// bounds).
func bigLimits() wire.Limits {
	lim := wire.DefaultLimits()
	lim.MaxRows = 1 << 24
	lim.MaxValues = 1 << 26
	return lim
}

func coreLink(t testing.TB, n *testNode, cfg gossip.CoreLinkConfig, rx *coreRx) *gossip.CoreLink {
	t.Helper()
	l, err := gossip.NewCoreLink(n.tr, cfg, rx.deliver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func checkCoreStream(t *testing.T, what string, got, want []*wire.Core) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages delivered, %d sent", what, len(got), len(want))
	}
	for i := range want {
		if !gossiptest.SameCore(got[i], want[i]) {
			t.Fatalf("%s: message %d differs", what, i)
		}
	}
}

// TestCoreLinkP2P: three libp2p hosts on loopback send each other
// messages of every op and a few to themselves: each receiver gets all of
// each sender's, in order, bit for bit. Then a 64 MiB shard state goes
// from one to another and arrives whole and exact, and a connection
// closed in the middle of a stream of messages is survived: the messages
// after it arrive, in order.
func TestCoreLinkP2P(t *testing.T) {
	const perPair, self = 500, 50
	nodes := newNodes(t, 3, testCfg())
	cfg := gossip.DefaultCoreLinkConfig()
	cfg.Job = coreJob
	cfg.Limits = bigLimits()
	cfg.MaxBody = 0 // derived from the limits
	cfg.Queue = perPair + self
	ids := make([]string, len(nodes))
	links := make([]*gossip.CoreLink, len(nodes))
	rxs := make([]*coreRx, len(nodes))
	for i, n := range nodes {
		ids[i] = n.tr.Self()
		rxs[i] = newCoreRx()
		links[i] = coreLink(t, n, cfg, rxs[i])
	}
	sent := make([]map[string][]*wire.Core, len(nodes))
	var wg sync.WaitGroup
	for i := range nodes {
		sent[i] = make(map[string][]*wire.Core)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 9))
			for k := range uint64(perPair) {
				for j, to := range ids {
					if j == i && k%(perPair/self) != 0 {
						continue
					}
					m := gossiptest.CoreMessage(r, k, 300)
					sent[i][to] = append(sent[i][to], m.Clone())
					links[i].Send(to, m)
				}
			}
		}()
	}
	wg.Wait()
	for j, to := range ids {
		for i, from := range ids {
			want := len(sent[i][to])
			waitFor(t, fmt.Sprintf("%d messages %d -> %d", want, i, j), func() bool { return rxs[j].count(from) >= want })
			checkCoreStream(t, fmt.Sprintf("%d -> %d", i, j), rxs[j].from(from), sent[i][to])
		}
	}
	for i, l := range links {
		if s := l.Stats(); s.Dropped != 0 || s.Rejected.Total() != 0 || s.Local != self {
			t.Fatalf("node %d: stats %+v", i, s)
		}
	}

	// A shard state of over 64 MiB on the wire: 5Mi rows of 4 values (a
	// weight and its optimizer state), 80 MiB of float32.
	state := gossiptest.StateMessage(rand.New(rand.NewPCG(5, 5)), 5<<20, 4)
	before := links[0].Stats().SentBytes
	n1 := rxs[1].count(ids[0])
	links[0].Send(ids[1], state)
	waitFor(t, "the state transfer", func() bool { return rxs[1].count(ids[0]) == n1+1 })
	if sz := links[0].Stats().SentBytes - before; sz < 64<<20 {
		t.Fatalf("the state message took %d bytes: want at least 64 MiB", sz)
	} else {
		t.Logf("state message: %d rows x %d, %.1f MiB on the stream", state.Rows.Len(), state.RowWidth, float64(sz)/(1<<20))
	}
	if got := rxs[1].from(ids[0])[n1]; !gossiptest.SameCore(got, state) {
		t.Fatal("the state message arrived changed")
	}
	state = nil
	runtime.GC()

	// A connection closed while node 0 streams to node 2.
	const total, cut = 400, 200
	n2 := rxs[2].count(ids[0])
	for k := range uint64(total) {
		if k == cut {
			if err := nodes[0].tr.h.Network().ClosePeer(nodes[2].tr.h.ID()); err != nil {
				t.Fatal(err)
			}
		}
		links[0].Send(ids[2], &wire.Core{Op: wire.CoreAck, Req: 1<<40 + k})
		time.Sleep(time.Millisecond) // a message now and then, as a core sends
	}
	waitFor(t, "the last message after the reset", func() bool {
		got := rxs[2].from(ids[0])
		return len(got) > n2 && got[len(got)-1].Req == 1<<40+total-1
	})
	got := rxs[2].from(ids[0])[n2:]
	after := 0
	for i, m := range got {
		if i > 0 && m.Req <= got[i-1].Req {
			t.Fatalf("req %d delivered after req %d", m.Req-1<<40, got[i-1].Req-1<<40)
		}
		if m.Req >= 1<<40+cut {
			after++
		}
	}
	// The few sent right after the close may die with the connection;
	// every later one arrives.
	if after < total-cut-10 {
		t.Fatalf("%d of the %d messages sent after the reset arrived", after, total-cut)
	}
	s := links[0].Stats()
	t.Logf("connection reset: %d of %d messages arrived (%d of %d sent after it); sender %+v", len(got), total, after, total-cut, s)
	if s.StreamsOpened < 3 {
		t.Fatalf("%d streams opened: the stream to node 2 was not reopened", s.StreamsOpened)
	}
}

// TestCoreLinkHostileP2P: over libp2p the sender is the connection's
// authenticated peer: a peer that names another in its headers is
// refused, and its stream reset; a huge length prefix is refused without
// allocating it; an honest peer's messages flow on.
func TestCoreLinkHostileP2P(t *testing.T) {
	nodes := newNodes(t, 3, testCfg())
	victim, honest, evil := nodes[0], nodes[1], nodes[2]
	cfg := gossip.DefaultCoreLinkConfig()
	cfg.Job = coreJob
	rv := newCoreRx()
	vl := coreLink(t, victim, cfg, rv)
	hl := coreLink(t, honest, cfg, newCoreRx())
	ctx := context.Background()
	c := wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits())
	forged, err := c.AppendCore(nil, wire.Header{Job: coreJob, Sender: honest.tr.Self()}, &wire.Core{Op: wire.CoreAck, Req: 5})
	if err != nil {
		t.Fatal(err)
	}
	own, err := c.AppendCore(nil, wire.Header{Job: coreJob, Sender: evil.tr.Self()}, &wire.Core{Op: wire.CoreAck, Req: 6})
	if err != nil {
		t.Fatal(err)
	}
	var want gossip.Rejections
	for _, tc := range []struct {
		name   string
		bytes  []byte
		reason gossip.Reason
	}{
		{"forged sender", wire.AppendFrame(nil, forged), gossip.ReasonSender},
		{"huge length prefix", binary.AppendUvarint(nil, 4<<30), gossip.ReasonTooLarge},
	} {
		w, err := evil.tr.OpenStream(ctx, victim.tr.Self(), gossip.CoreProtocol)
		if err != nil {
			t.Fatal(err)
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		if _, err := w.Write(tc.bytes); err != nil {
			t.Fatal(err)
		}
		want[tc.reason]++
		waitFor(t, tc.name+" refused", func() bool { return vl.Stats().Rejected == want })
		runtime.ReadMemStats(&m1)
		if grew := m1.TotalAlloc - m0.TotalAlloc; grew > 256<<20 {
			t.Fatalf("%s: %d MiB allocated", tc.name, grew>>20)
		}
		// The stream is reset: writes fail (once the reset has come back).
		waitFor(t, tc.name+": the stream reset", func() bool {
			_, err := w.Write(wire.AppendFrame(nil, own))
			return err != nil
		})
		w.Close()
		hl.Send(victim.tr.Self(), &wire.Core{Op: wire.CoreAck, Req: uint64(len(rv.from(honest.tr.Self())))})
	}
	waitFor(t, "the honest messages", func() bool { return rv.count(honest.tr.Self()) == 2 })
	if rv.count(evil.tr.Self()) != 0 {
		t.Fatalf("delivered a message from the hostile peer: %+v", rv.from(evil.tr.Self()))
	}
	if s := vl.Stats(); s.StreamResets != 2 {
		t.Fatalf("stats %+v: want 2 streams reset", s)
	}
}

// BenchmarkCoreLinkP2P: core messages between two libp2p hosts over
// loopback TCP (noise or TLS, yamux): pull, small pulls (64 wanted rows),
// 128 in flight; pull1, the same one at a time, each sent once the one
// before was delivered (a sync round's latency-bound messages: compare
// its cpu-µs/msg with pull's to see what a lone message's wake-ups cost);
// push1MiB, a push of 240k rows (two parts).
func BenchmarkCoreLinkP2P(b *testing.B) {
	for _, bc := range []struct {
		name   string
		msg    *wire.Core
		window int
	}{
		{"pull", gossiptest.PullMessage(), 128},
		{"pull1", gossiptest.PullMessage(), 1},
		{"push1MiB", gossiptest.PushMessage(240_000), 16},
	} {
		b.Run(bc.name, func(b *testing.B) {
			nodes := newNodes(b, 2, testCfg())
			cfg := gossip.DefaultCoreLinkConfig()
			cfg.Job = "bench"
			gossiptest.BenchCoreLink(b, nodes[0].tr, nodes[1].tr, cfg, bc.msg, bc.window)
		})
	}
}

// waitFor polls cond until it holds, failing the test after 20s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	// Generous: an 80 MiB state under -race on two loaded cores took
	// over 20 s in CI; a wait that ends when cond holds costs nothing more.
	deadline := time.After(2 * time.Minute)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("waited 2 minutes for %s", what)
		}
	}
}

// waitUntil polls cond for at most d and reports whether it held.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
