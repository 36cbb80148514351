package gossip_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/gossiptest"
	"github.com/gossiptrain/gossiptrain/gossip/memnet"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

const coreJob = "core-test"

// coreRx records what a link delivers, by sender.
type coreRx struct {
	mu  sync.Mutex
	got map[string][]*wire.Core
	n   int
	// block, when not nil, holds every delivery until it is closed.
	block chan struct{}
}

func newCoreRx() *coreRx { return &coreRx{got: make(map[string][]*wire.Core)} }

func (r *coreRx) deliver(from string, m *wire.Core) {
	if r.block != nil {
		<-r.block
	}
	r.mu.Lock()
	r.got[from] = append(r.got[from], m)
	r.n++
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

// waitCond waits until cond holds, failing the test after a generous
// deadline (the machine may be loaded).
func waitCond(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func coreCfg() gossip.CoreLinkConfig {
	cfg := gossip.DefaultCoreLinkConfig()
	cfg.Job = coreJob
	return cfg
}

func newCoreNet(t testing.TB) *memnet.Network {
	t.Helper()
	net, err := memnet.New(memnet.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(net.Close)
	return net
}

func newLink(t testing.TB, tr gossip.Transport, cfg gossip.CoreLinkConfig, rx *coreRx) *gossip.CoreLink {
	t.Helper()
	l, err := gossip.NewCoreLink(tr, cfg, rx.deliver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if rx.block != nil {
			select {
			case <-rx.block:
			default:
				close(rx.block)
			}
		}
		l.Close()
	})
	return l
}

// scribble overwrites m's contents: Send must have encoded it already.
func scribble(m *wire.Core) {
	for i := range m.Rows.Val {
		m.Rows.Val[i] = -999
	}
	for i := range m.Values {
		m.Values[i] = 12345
	}
	for i := range m.Blob {
		m.Blob[i] ^= 0xff
	}
	m.Req += 1 << 40
}

// checkStream checks that got is exactly want, in order, bit for bit.
func checkStream(t *testing.T, what string, got, want []*wire.Core) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages delivered, %d sent", what, len(got), len(want))
	}
	for i := range want {
		if !gossiptest.SameCore(got[i], want[i]) {
			t.Fatalf("%s: message %d differs:\ngot  %+v\nwant %+v", what, i, *got[i], *want[i])
		}
	}
}

// TestCoreLinkMemnet: four peers send each other thousands of messages of
// every op (many cut into parts: frames are at most 2 KiB here), and a few
// to themselves; every receiver gets every message of every sender, in
// the order it was sent, bit for bit, although each sender scribbles over
// a message as soon as Send returns.
func TestCoreLinkMemnet(t *testing.T) {
	const peers, perPair, self = 4, 1000, 100
	net := newCoreNet(t)
	cfg := coreCfg()
	cfg.Limits.MaxMessage = 2048
	cfg.Queue = perPair + self // nothing may be dropped: Send does not wait
	ids := make([]string, peers)
	links := make([]*gossip.CoreLink, peers)
	rxs := make([]*coreRx, peers)
	for i := range ids {
		ids[i] = fmt.Sprintf("p%d", i)
		rxs[i] = newCoreRx()
		links[i] = newLink(t, net.NewNode(ids[i]), cfg, rxs[i])
	}
	sent := make([]map[string][]*wire.Core, peers) // sender -> receiver -> messages
	var wg sync.WaitGroup
	for i := range ids {
		sent[i] = make(map[string][]*wire.Core)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for k := range uint64(perPair) {
				for j, to := range ids {
					if j == i && k%(perPair/self) != 0 {
						continue
					}
					m := gossiptest.CoreMessage(r, k, 200)
					sent[i][to] = append(sent[i][to], m.Clone())
					links[i].Send(to, m)
					scribble(m)
				}
			}
		}()
	}
	wg.Wait()
	for j, to := range ids {
		for i, from := range ids {
			want := len(sent[i][to])
			waitCond(t, fmt.Sprintf("%s's %d messages to %s", from, want, to), func() bool { return rxs[j].count(from) >= want })
		}
	}
	for j, to := range ids {
		for i, from := range ids {
			checkStream(t, from+" -> "+to, rxs[j].from(from), sent[i][to])
		}
	}
	parts := 0
	for i := range ids {
		for _, m := range sent[i][ids[(i+1)%peers]] {
			if m.Rows.Len() > 100 {
				parts++
			}
		}
	}
	if parts == 0 {
		t.Fatal("no message large enough to need parts: the test does not test joining")
	}
	for i, l := range links {
		s := l.Stats()
		want := uint64((peers - 1) * perPair)
		if s.Sent != want || s.Received != want || s.Local != self || s.Dropped != 0 || s.Rejected.Total() != 0 {
			t.Errorf("%s: stats %+v, want %d sent and received, %d local, nothing dropped or rejected", ids[i], s, want, self)
		}
		if s.StreamsOpened != peers-1 {
			t.Errorf("%s opened %d streams, want one per peer (%d)", ids[i], s.StreamsOpened, peers-1)
		}
	}
}

// TestCoreLinkLossyPush: push rows travel in the configured format, to
// peers and to the sender itself alike (the same rounding); other values
// stay exact.
func TestCoreLinkLossyPush(t *testing.T) {
	net := newCoreNet(t)
	cfg := coreCfg()
	cfg.Values = wire.F16
	ra, rb := newCoreRx(), newCoreRx()
	a := newLink(t, net.NewNode("a"), cfg, ra)
	newLink(t, net.NewNode("b"), cfg, rb)
	push := &wire.Core{Op: wire.CorePush, Rows: model.Sparse{Idx: []uint32{1, 9}, Val: []float32{0.1, -3.3}}, RowWidth: 1,
		Want: []uint32{4}, Examples: 5}
	reply := &wire.Core{Op: wire.CoreReply, Values: []float32{0.1}, Req: 3}
	for _, to := range []string{"a", "b"} {
		a.Send(to, push)
		a.Send(to, reply)
	}
	waitCond(t, "deliveries", func() bool { return ra.count("a") == 2 && rb.count("a") == 2 })
	self, peer := ra.from("a"), rb.from("a")
	if !gossiptest.SameCore(self[0], peer[0]) {
		t.Fatalf("self push %v, peer push %v: want the same rounding", self[0].Rows.Val, peer[0].Rows.Val)
	}
	if v := peer[0].Rows.Val[0]; v == 0.1 || v < 0.0999 || v > 0.1001 {
		t.Fatalf("push row value %v, want 0.1 rounded to f16", v)
	}
	for _, got := range []*wire.Core{self[1], peer[1]} {
		if !gossiptest.SameCore(got, reply) {
			t.Fatalf("reply %+v, want exactly %+v", got, reply)
		}
	}
}

// TestCoreLinkQueueFull: a receiver that stops delivering makes its
// senders' queues fill; Send then drops and counts, never blocks, and what
// was queued arrives in order once the receiver goes on.
func TestCoreLinkQueueFull(t *testing.T) {
	net := newCoreNet(t)
	cfg := coreCfg()
	cfg.Queue = 16
	ra, rb := newCoreRx(), newCoreRx()
	rb.block = make(chan struct{})
	a := newLink(t, net.NewNode("a"), cfg, ra)
	newLink(t, net.NewNode("b"), cfg, rb)
	const total = 2000
	r := rand.New(rand.NewPCG(1, 1))
	var sent []*wire.Core
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := range uint64(total) {
			m := gossiptest.CoreMessage(r, k, 5)
			sent = append(sent, m)
			a.Send("b", m.Clone())
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Send blocked on a receiver that does not read")
	}
	s := a.Stats()
	if s.QueueFull == 0 || s.Dropped != s.QueueFull {
		t.Fatalf("stats %+v: want drops, all for a full queue", s)
	}
	close(rb.block)
	// Every message that was not dropped arrives, in order.
	want := total - int(s.Dropped)
	waitCond(t, "the queued messages", func() bool { return rb.count("a") >= want })
	got := rb.from("a")
	if len(got) != want {
		t.Fatalf("%d delivered, want %d (sent %d, dropped %d)", len(got), want, total, s.Dropped)
	}
	for i, m := range got {
		if !gossiptest.SameCore(m, sent[m.Req]) {
			t.Fatalf("message %d (req %d) differs from what was sent", i, m.Req)
		}
		if i > 0 && m.Req <= got[i-1].Req {
			t.Fatalf("message req %d delivered after req %d", m.Req, got[i-1].Req)
		}
	}
	// The link works on: a message sent now arrives.
	a.Send("b", &wire.Core{Op: wire.CoreAck, Req: 1 << 50})
	waitCond(t, "a message after the drops", func() bool { return rb.count("a") == want+1 })
}

// TestCoreLinkReconnects: a dropped connection (memnet.ResetStreams) and a
// crash of the receiver are survived: messages sent afterwards arrive, on
// a new stream, still in order; what was sent while the peer was down is
// counted as send errors.
func TestCoreLinkReconnects(t *testing.T) {
	net := newCoreNet(t)
	ra, rb := newCoreRx(), newCoreRx()
	a := newLink(t, net.NewNode("a"), coreCfg(), ra)
	newLink(t, net.NewNode("b"), coreCfg(), rb)
	req := uint64(0)
	send := func(n int) {
		for range n {
			a.Send("b", &wire.Core{Op: wire.CoreAck, Req: req})
			req++
		}
	}
	send(100)
	waitCond(t, "the first 100", func() bool { return rb.count("a") == 100 })
	if k := net.ResetStreams("a", "b"); k != 1 {
		t.Fatalf("reset %d streams, want 1", k)
	}
	send(100)
	waitCond(t, "100 after the reset", func() bool { return rb.count("a") == 200 })
	net.Crash("b")
	send(50) // lost: b is down
	waitCond(t, "the sends to a crashed peer to fail", func() bool { return a.Stats().SendErrors == 50 })
	net.Restore("b")
	// The sender backs off after failures: the next message may find it
	// waiting, but it goes out (after at most the longest backoff).
	send(100)
	waitCond(t, "100 after the restore", func() bool { return rb.count("a") == 300 })
	got := rb.from("a")
	for i, m := range got {
		want := uint64(i)
		if i >= 200 {
			want += 50
		}
		if m.Req != want {
			t.Fatalf("message %d has req %d, want %d", i, m.Req, want)
		}
	}
	// The sender counts a message once its write returns, which may be
	// after the receiver has it: wait for the count, then check it.
	waitCond(t, "the sender to count 300 sent", func() bool { return a.Stats().Sent >= 300 })
	if s := a.Stats(); s.StreamsOpened != 3 || s.Sent != 300 {
		t.Fatalf("stats %+v: want 3 streams opened (start, reset, restore) and 300 sent", s)
	}
}

// TestCoreLinkIdle: a destination that has nothing to send for a while
// closes its stream and goroutine; a later message opens a new one.
func TestCoreLinkIdle(t *testing.T) {
	defer gossip.SetCoreIdle(20 * time.Millisecond)()
	net := newCoreNet(t)
	rb := newCoreRx()
	na := net.NewNode("a")
	a := newLink(t, na, coreCfg(), newCoreRx())
	newLink(t, net.NewNode("b"), coreCfg(), rb)
	a.Send("b", &wire.Core{Op: wire.CoreAck, Req: 1})
	waitCond(t, "the first message", func() bool { return rb.count("a") == 1 })
	waitCond(t, "the idle sender to retire", func() bool { return a.Destinations() == 0 })
	a.Send("b", &wire.Core{Op: wire.CoreAck, Req: 2})
	waitCond(t, "the second message", func() bool { return rb.count("a") == 2 })
	if got := na.Stats().StreamsOpened; got != 2 {
		t.Fatalf("%d streams opened, want 2", got)
	}
}

// TestCoreLinkRefusesInvalid: a message the receiver would refuse (out of
// order shards, an index past the model, a blob over MaxMessage) is not
// sent, to a peer or to self: counted as an encode error.
func TestCoreLinkRefusesInvalid(t *testing.T) {
	net := newCoreNet(t)
	cfg := coreCfg()
	cfg.Limits.Features = 100
	ra, rb := newCoreRx(), newCoreRx()
	a := newLink(t, net.NewNode("a"), cfg, ra)
	newLink(t, net.NewNode("b"), cfg, rb)
	bad := []*wire.Core{
		{Op: wire.CoreAck, Shards: []uint32{3, 1}},
		{Op: wire.CorePull, Want: []uint32{100}},
		{Op: wire.CoreRaft, Blob: make([]byte, cfg.Limits.MaxMessage+1)},
		{Op: 99},
	}
	for _, m := range bad {
		a.Send("b", m)
		a.Send("a", m)
	}
	a.Send("b", &wire.Core{Op: wire.CoreAck, Req: 1})
	waitCond(t, "the valid message", func() bool { return rb.count("a") == 1 })
	if s := a.Stats(); s.EncodeErrors != uint64(2*len(bad)) || s.Dropped != s.EncodeErrors || s.Sent != 1 || ra.count("a") != 0 {
		t.Fatalf("stats %+v, %d delivered to self: want %d encode errors, 1 sent", s, ra.count("a"), 2*len(bad))
	}
}

// TestCoreMaxBody: the largest body Limits allow, with the widest codes
// (indices spread over 2^32, values of every exponent, lists with huge
// gaps), fits in CoreMaxBody: a state transfer within the limits is never
// refused for its size.
func TestCoreMaxBody(t *testing.T) {
	lim := wire.DefaultLimits()
	lim.MaxRows, lim.MaxValues, lim.MaxList = 1<<12, 1<<14, 256
	r := rand.New(rand.NewPCG(8, 8))
	spread := func(n int) []uint32 {
		set := map[uint32]bool{}
		for len(set) < n {
			set[r.Uint32()] = true
		}
		out := make([]uint32, 0, n)
		for k := range set {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	value := func() float32 {
		for {
			if v := math.Float32frombits(r.Uint32()); !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
				return v
			}
		}
	}
	width := lim.MaxValues / lim.MaxRows
	m := &wire.Core{Op: wire.CoreState, Flags: 1<<9 - 1, Member: math.MaxUint64, Config: math.MaxUint64, Round: math.MaxUint64,
		Through: math.MaxUint64, Req: math.MaxUint64, Examples: math.MaxUint64, RowWidth: width,
		Text: strings.Repeat("x", lim.MaxString), Blob: make([]byte, lim.MaxMessage)}
	m.Shards = spread(lim.MaxList)
	for i := range m.Shards {
		m.Shards[i] >>= 1 // shards are below 2^31
	}
	for i, k := range spread(lim.MaxList) {
		m.Clocks = append(m.Clocks, wire.MemberClock{Member: uint64(k)<<32 | uint64(i), Clock: math.MaxUint64})
	}
	m.Rows.Idx = spread(lim.MaxRows)
	for range lim.MaxValues {
		m.Rows.Val = append(m.Rows.Val, value())
	}
	m.Want = spread(lim.MaxRows)
	for range lim.MaxValues {
		m.Values = append(m.Values, value())
	}
	if err := m.Check(lim); err != nil {
		t.Fatal(err)
	}
	body, _, err := wire.NewCodec(wire.F32, wire.None, lim).CoreBody(m)
	if err != nil {
		t.Fatal(err)
	}
	if max := gossip.CoreMaxBody(lim); len(body) > max {
		t.Fatalf("worst-case body of %d bytes, CoreMaxBody %d", len(body), max)
	} else {
		t.Logf("worst-case body %d bytes, CoreMaxBody %d", len(body), max)
	}
}

func TestCoreLinkConfig(t *testing.T) {
	net := newCoreNet(t)
	nd := net.NewNode("a")
	for _, tc := range []struct {
		name string
		edit func(*gossip.CoreLinkConfig)
		want string
	}{
		{"no job", func(c *gossip.CoreLinkConfig) { c.Job = "" }, "Job"},
		{"bad values", func(c *gossip.CoreLinkConfig) { c.Values = 7 }, "Values"},
		{"negative queue", func(c *gossip.CoreLinkConfig) { c.Queue = -1 }, "Queue"},
		{"small body", func(c *gossip.CoreLinkConfig) { c.MaxBody = 100 }, "MaxBody"},
		{"bad limits", func(c *gossip.CoreLinkConfig) { c.Limits.MaxRows = 0 }, "Limits"},
	} {
		cfg := coreCfg()
		tc.edit(&cfg)
		_, err := gossip.NewCoreLink(nd, cfg, func(string, *wire.Core) {})
		if !errors.Is(err, gossip.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrConfig naming %s", tc.name, err, tc.want)
		}
	}
	// Zero fields take their defaults.
	l, err := gossip.NewCoreLink(nd, gossip.CoreLinkConfig{Job: "j"}, func(string, *wire.Core) {})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

// frame frames one message as the link does.
func frame(msg []byte) []byte { return wire.AppendFrame(nil, msg) }

// coreBytes encodes m with the given header fields (F32, no limits on
// indices): what a hostile peer can put in a frame.
func coreBytes(t testing.TB, job, sender string, m *wire.Core) []byte {
	t.Helper()
	b, err := wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits()).AppendCore(nil, wire.Header{Job: job, Sender: sender}, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hostileCase is what a hostile peer writes on its stream, the reason the
// victim must give, and whether the victim resets the stream for it.
type hostileCase struct {
	name  string
	bytes []byte
	want  gossip.Reason
	reset bool
}

// HostileCoreCases returns a case per way a peer can break the core link,
// for a victim with DefaultLimits but Features = features and MaxBody =
// maxBody. evil is the hostile peer's ID, honest another peer's.
func hostileCoreCases(t testing.TB, evil, honest string, features uint32, maxBody int) []hostileCase {
	ok := &wire.Core{Op: wire.CoreAck, Req: 1}
	beat, err := wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits()).AppendBeat(nil, wire.Header{Job: coreJob, Sender: evil}, &wire.Beat{Members: []string{evil}})
	if err != nil {
		t.Fatal(err)
	}
	valid := coreBytes(t, coreJob, evil, ok)
	badBody := append([]byte(nil), valid...)
	badBody = append(badBody[:len(badBody)-3], 0xff, 0xff, 0xff) // the sections no longer add up
	lossyReply := coreBytes(t, coreJob, evil, &wire.Core{Op: wire.CoreReply, Values: []float32{1}})
	lossyReply[2] |= byte(wire.F16) // only pushes may be lossy
	// Parts: 1 MiB chunks of a body, under one message number, past maxBody.
	c := wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits())
	var tooBig []byte
	parts := maxBody/(1<<20-512) + 2
	chunk := make([]byte, 1<<20-512)
	for p := range parts {
		b, err := c.AppendCorePart(nil, wire.Header{Job: coreJob, Sender: evil, Seq: 9, Part: uint16(p), Parts: uint16(parts + 5)}, 0, chunk)
		if err != nil {
			t.Fatal(err)
		}
		tooBig = append(tooBig, frame(b)...)
	}
	part1, err := c.AppendCorePart(nil, wire.Header{Job: coreJob, Sender: evil, Seq: 9, Part: 1, Parts: 2}, 0, []byte{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	return []hostileCase{
		// Bad bodies under a good header: refused alone.
		{"index past the model", frame(coreBytes(t, coreJob, evil, &wire.Core{Op: wire.CorePull, Want: []uint32{features}})), gossip.ReasonRange, false},
		{"body that does not decode", frame(badBody), gossip.ReasonMalformed, false},
		{"lossy reply", frame(lossyReply), gossip.ReasonMalformed, false},
		// Protocol breaks: the stream is reset.
		{"wrong job", frame(coreBytes(t, "not-"+coreJob, evil, ok)), gossip.ReasonJob, true},
		{"forged sender", frame(coreBytes(t, coreJob, honest, ok)), gossip.ReasonSender, true},
		{"not a core message", frame(beat), gossip.ReasonKind, true},
		{"garbage frame", frame(gossiptest.Garbage(5, 300)), gossip.ReasonVersion, true},
		{"length prefix overflows", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, gossip.ReasonMalformed, true},
		{"huge length prefix", binary.AppendUvarint(nil, 4<<30), gossip.ReasonTooLarge, true},
		{"part without its first", frame(part1), gossip.ReasonProtocol, true},
		{"parts past MaxBody", tooBig, gossip.ReasonTooLarge, true},
		{"empty frame", []byte{0}, gossip.ReasonMalformed, true},
	}
}

// TestCoreLinkHostilePeer: a peer that writes garbage, lies about its
// identity or job, sends other kinds, breaks the framing or sends bodies
// that fail the checks is refused and counted by reason; a framing or
// protocol break resets its stream (its next write fails), a bad body
// alone does not (its next valid message is delivered). An honest peer's
// messages keep flowing throughout, in order, and no length a peer
// claims is allocated before the bytes arrive.
func TestCoreLinkHostilePeer(t *testing.T) {
	net := newCoreNet(t)
	cfg := coreCfg()
	cfg.Limits.Features = 1000
	cfg.MaxBody = 4 << 20
	var logs syncBuffer
	cfg.Log = zerolog.New(&logs).Level(zerolog.DebugLevel)
	ra, rh := newCoreRx(), newCoreRx()
	vl := newLink(t, net.NewNode("victim"), cfg, ra)
	honest := newLink(t, net.NewNode("honest"), cfg, rh)
	evil := net.NewNode("evil")

	// The honest peer sends all along.
	stop := make(chan struct{})
	var honestSent atomic.Uint64
	var hw sync.WaitGroup
	hw.Add(1)
	go func() {
		defer hw.Done()
		for k := uint64(0); ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			if ra.count("honest") >= int(k)-10 { // stay within the queue
				honest.Send("victim", &wire.Core{Op: wire.CoreAck, Req: k})
				honestSent.Add(1)
			} else {
				k--
				time.Sleep(100 * time.Microsecond) // pacing, not waiting for a condition
			}
		}
	}()

	ctx := context.Background()
	valid := frame(coreBytes(t, coreJob, "evil", &wire.Core{Op: wire.CoreAck, Req: 77}))
	var want gossip.Rejections
	for _, tc := range hostileCoreCases(t, "evil", "honest", 1000, cfg.MaxBody) {
		w, err := evil.OpenStream(ctx, "victim", gossip.CoreProtocol)
		if err != nil {
			t.Fatal(err)
		}
		before := vl.Stats()
		var m0 runtime.MemStats
		runtime.ReadMemStats(&m0)
		_, werr := w.Write(tc.bytes)
		want[tc.want]++
		waitCond(t, tc.name+" to be refused", func() bool { return vl.Stats().Rejected == want })
		if tc.reset {
			// The reader counts the refusal, then resets the stream and
			// counts that: wait for both before comparing.
			waitCond(t, tc.name+" to reset the stream", func() bool { return vl.Stats().StreamResets > before.StreamResets })
		}
		var m1 runtime.MemStats
		runtime.ReadMemStats(&m1)
		if grew := m1.TotalAlloc - m0.TotalAlloc; grew > 64<<20 {
			t.Errorf("%s: the victim allocated %d MiB", tc.name, grew>>20)
		}
		after := vl.Stats()
		if tc.reset {
			if after.StreamResets != before.StreamResets+1 {
				t.Errorf("%s: %d stream resets, want %d", tc.name, after.StreamResets, before.StreamResets+1)
			}
			if werr == nil {
				_, werr = w.Write(valid)
			}
			if !errors.Is(werr, memnet.ErrReset) {
				t.Errorf("%s: the stream was not reset: write error %v", tc.name, werr)
			}
		} else {
			if werr != nil {
				t.Fatalf("%s: write: %v", tc.name, werr)
			}
			n := ra.count("evil")
			if _, err := w.Write(valid); err != nil {
				t.Fatalf("%s: the stream was reset for a bad body: %v", tc.name, err)
			}
			waitCond(t, "evil's valid message after "+tc.name, func() bool { return ra.count("evil") == n+1 })
			if after.StreamResets != before.StreamResets {
				t.Errorf("%s: the stream was reset for a bad body", tc.name)
			}
		}
		w.Close()
	}
	// A truncated frame: the stream ends inside it.
	w, err := evil.OpenStream(ctx, "victim", gossip.CoreProtocol)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(valid[:len(valid)-2]); err != nil {
		t.Fatal(err)
	}
	w.Close()
	want[gossip.ReasonMalformed]++
	waitCond(t, "the truncated frame to be refused", func() bool { return vl.Stats().Rejected == want })

	close(stop)
	hw.Wait()
	n := int(honestSent.Load())
	waitCond(t, "the honest peer's messages", func() bool { return ra.count("honest") == n })
	for i, m := range ra.from("honest") {
		if m.Req != uint64(i) {
			t.Fatalf("honest message %d has req %d", i, m.Req)
		}
	}
	for _, m := range ra.from("evil") {
		if m.Req != 77 {
			t.Fatalf("delivered a hostile message %+v", m)
		}
	}
	if s := vl.Stats(); s.Received != uint64(n+ra.count("evil")) {
		t.Fatalf("stats %+v: %d received, want %d", s, s.Received, n+ra.count("evil"))
	}
	// Each refusal is logged at debug with the peer and the reason.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	refused := 0
	for _, line := range lines {
		if strings.Contains(line, "message refused") {
			refused++
			if !strings.Contains(line, `"level":"debug"`) || !strings.Contains(line, `"peer":"evil"`) || !strings.Contains(line, `"reason":`) {
				t.Fatalf("log line %s: want debug, the peer and the reason", line)
			}
		}
	}
	if refused != int(want.Total()) {
		t.Fatalf("%d refusals logged, %d counted", refused, want.Total())
	}
}

// syncBuffer is a bytes.Buffer for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A peer that is done flushes its link before closing it: every message
// it queued reaches the other peer, though Close drops what is queued.
func TestCoreLinkFlushBeforeClose(t *testing.T) {
	net := newCoreNet(t)
	cfg := coreCfg()
	cfg.Queue = 4096
	rxA, rxB := newCoreRx(), newCoreRx()
	a, err := gossip.NewCoreLink(net.NewNode("a"), cfg, rxA.deliver)
	if err != nil {
		t.Fatal(err)
	}
	newLink(t, net.NewNode("b"), cfg, rxB)
	r := rand.New(rand.NewPCG(5, 5))
	const n = 2000
	for i := range uint64(n) {
		a.Send("b", gossiptest.CoreMessage(r, i, 20))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	a.Close()
	waitCond(t, "every flushed message delivered", func() bool { return rxB.count("a") == n })
	if s := a.Stats(); s.Sent != n {
		t.Errorf("sent %d of %d before Close", s.Sent, n)
	}
}
