package gossip_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/memnet"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

const job = "test-job"

// testConfig splits anything over 1 KiB into parts, so multi-part messages
// are the common case.
func testConfig() gossip.Config {
	cfg := gossip.DefaultConfig()
	cfg.Job = job
	cfg.Width = 1
	cfg.Wire.Limits.MaxMessage = 1024
	cfg.Wire.Limits.Features = 1 << 20
	return cfg
}

// gotGrad and gotParams are the copies the handlers keep.
type gotGrad struct {
	from            string
	clock, examples int
	parts           int
	rows            model.Sparse
}

type gotParams struct {
	from    string
	clock   int
	through uint64
	applied []wire.WorkerClock
	rows    model.Sparse
}

type peer struct {
	id     string
	node   *memnet.Node
	x      *gossip.Exchange
	grads  chan gotGrad
	params chan gotParams
	errs   chan error
}

func clone(s model.Sparse) model.Sparse {
	return model.Sparse{Idx: slices.Clone(s.Idx), Val: slices.Clone(s.Val)}
}

func newPeer(t *testing.T, net *memnet.Network, id string, cfg gossip.Config) *peer {
	t.Helper()
	p := &peer{id: id, node: net.NewNode(id), grads: make(chan gotGrad, 10000), params: make(chan gotParams, 10000), errs: make(chan error, 100)}
	x, err := gossip.New(p.node, cfg, gossip.Handlers{
		Grad: func(g *gossip.Grad) {
			p.grads <- gotGrad{from: g.From, clock: int(g.Clock), examples: g.Examples, parts: g.Parts, rows: clone(g.Rows)}
		},
		Params: func(m *gossip.Params) {
			p.params <- gotParams{from: m.From, clock: int(m.Clock), through: m.Ack.Through, applied: slices.Clone(m.Ack.Applied), rows: clone(m.Rows)}
		},
		Error: func(err error) { p.errs <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	p.x = x
	t.Cleanup(func() { x.Close() })
	return p
}

func newNet(t *testing.T, manual bool) *memnet.Network {
	t.Helper()
	cfg := memnet.DefaultConfig()
	cfg.Manual = manual
	n, err := memnet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// rowsFor is the gradient a test worker sends at clock c: its size cycles
// through 1 to ~4 parts of 1 KiB; row k has index c + 3k and value c + k/4,
// so every row can be checked by hand.
func rowsFor(c int) model.Sparse {
	var s model.Sparse
	n := 3 + (c%4)*400
	for k := range n {
		s.Append(uint32(c+3*k), []float32{float32(c) + float32(k)/4})
	}
	return s
}

// gradParts is the number of parts clock c's gradient travels in under
// testConfig, found by the codec itself.
func gradParts(t *testing.T, c int) int {
	t.Helper()
	cfg := testConfig()
	codec, err := cfg.Wire.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	g := rowsFor(c)
	h := wire.Header{Job: job, Sender: "w", Clock: uint64(c), Epoch: 1}
	n, err := codec.SplitGrad(h, 10+c, 1, &g, func([]byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func checkRows(t *testing.T, what string, c int, got model.Sparse) {
	t.Helper()
	want := rowsFor(c)
	if !slices.Equal(got.Idx, want.Idx) || !slices.Equal(got.Val, want.Val) {
		t.Fatalf("%s clock %d: %d rows differ from the %d sent", what, c, got.Len(), want.Len())
	}
}

// awaitGrads receives n gradients on p from each of the senders, each
// sender's in clock order, Poking the senders whenever nothing arrives for
// a while: the training loop's barrier timeout.
func awaitGrads(t *testing.T, p *peer, n int, senders ...string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.After(30 * time.Second)
	next := map[string]int{}
	for _, s := range senders {
		next[s] = 0
	}
	for left := n * len(senders); left > 0; {
		select {
		case g := <-p.grads:
			c, ok := next[g.from]
			if !ok || g.clock != c || g.examples != 10+c {
				t.Fatalf("delivered %s clock %d examples %d, want clock %d examples %d", g.from, g.clock, g.examples, c, 10+c)
			}
			checkRows(t, "grad", c, g.rows)
			next[g.from]++
			left--
		case <-time.After(50 * time.Millisecond):
			for _, s := range senders {
				if _, err := p.x.Poke(ctx, s, gossip.StreamGrad); err != nil {
					t.Fatalf("poke: %v", err)
				}
			}
		case <-deadline:
			t.Fatalf("delivered %v of %d each; stats %+v", next, n, p.x.Stats())
		}
	}
}

func awaitParams(t *testing.T, p *peer, from string, n int) {
	t.Helper()
	ctx := context.Background()
	deadline := time.After(30 * time.Second)
	for c := 0; c < n; {
		select {
		case m := <-p.params:
			if m.from != from || m.clock != c || m.through != uint64(c) {
				t.Fatalf("%s: params from %s clock %d through %d, want %s clock %d", p.id, m.from, m.clock, m.through, from, c)
			}
			checkRows(t, "params", c, m.rows)
			c++
		case <-time.After(50 * time.Millisecond):
			if _, err := p.x.Poke(ctx, from, gossip.StreamParams); err != nil {
				t.Fatalf("poke: %v", err)
			}
		case <-deadline:
			t.Fatalf("%s: %d of %d params delivered; stats %+v", p.id, c, n, p.x.Stats())
		}
	}
}

func sendGrads(t *testing.T, w *peer, owner string, from, to int) {
	t.Helper()
	for c := from; c < to; c++ {
		g := rowsFor(c)
		if err := w.x.SendGrad(context.Background(), owner, uint64(c), 1, 10+c, &g); err != nil {
			t.Fatal(err)
		}
	}
}

// On a clean network every message arrives once, whole, in order, with no
// repair; bodies over the limit travel in parts.
func TestExchangeDelivers(t *testing.T) {
	net := newNet(t, false)
	w, o := newPeer(t, net, "w", testConfig()), newPeer(t, net, "o", testConfig())
	if err := w.x.WaitOwner(context.Background(), "o"); err != nil {
		t.Fatal(err)
	}
	sendGrads(t, w, "o", 0, 8)
	awaitGrads(t, o, 8, "w")
	s := o.x.Stats()
	if s.Repaired != 0 || s.Delivered != 8 || s.Rejected.Total() != 0 {
		t.Errorf("clean run: %+v", s)
	}
	if ws := w.x.Stats(); ws.Sent != s.Recv || ws.Sent <= 8 {
		t.Errorf("worker sent %d parts, owner accepted %d (want equal, and more than 8: some split)", ws.Sent, s.Recv)
	}
	if ws := w.x.Stats(); ws.SentBytes != s.RecvBytes {
		t.Errorf("sent %d bytes, received %d", ws.SentBytes, s.RecvBytes)
	}
}

// The acceptance test of the messaging layer: drops and reordering on
// every topic, two workers and an owner sending at once, and still every
// message is delivered exactly once, in order per stream, with repairs
// doing the work.
func TestExchangeRepairsDropsAndReordering(t *testing.T) {
	net := newNet(t, false)
	cfg := testConfig()
	w, o, r := newPeer(t, net, "w", cfg), newPeer(t, net, "o", cfg), newPeer(t, net, "r", cfg)
	ctx := context.Background()
	if err := w.x.WaitOwner(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	o.x.SetParamsPeers([]string{"w", "o", "r"})
	if err := o.x.WaitPeers(ctx, []string{"w", "r"}); err != nil {
		t.Fatal(err)
	}
	net.SetDropRate(0.2)
	net.SetReorder(0.2, 5)
	const n = 120
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c := range n {
			p := rowsFor(c)
			ack := wire.Ack{Through: uint64(c), Applied: []wire.WorkerClock{{Worker: "w", Clock: uint64(c)}, {Worker: "r", Clock: uint64(c)}}}
			if err := o.x.SendParams(ctx, uint64(c), 1, &ack, &p); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c := range n {
			g := rowsFor(c)
			if err := r.x.SendGrad(ctx, "o", uint64(c), 1, 10+c, &g); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	sendGrads(t, w, "o", 0, n)
	awaitGrads(t, o, n, "w", "r")
	wg.Wait()
	awaitParams(t, w, "o", n)
	awaitParams(t, r, "o", n)
	awaitParams(t, o, "o", n) // LoopParams: the owner's own, through the same path
	os, ws := o.x.Stats(), w.x.Stats()
	if os.Repaired == 0 || ws.Repaired == 0 {
		t.Errorf("nothing repaired at a 20%% drop rate: owner %d, worker %d", os.Repaired, ws.Repaired)
	}
	if os.Transport.Dropped == 0 {
		t.Error("memnet dropped nothing")
	}
	if os.Rejected.Total() != 0 || ws.Rejected.Total() != 0 {
		t.Errorf("honest messages rejected: %v %v", os.Rejected.Map(), ws.Rejected.Map())
	}
	for _, p := range []*peer{w, o, r} {
		select {
		case err := <-p.errs:
			t.Errorf("%s: stream error %v", p.id, err)
		default:
		}
	}
	t.Logf("owner: recv %d parts, repaired %d, early %d, duplicates %d, repair requests %d; memnet dropped %d",
		os.Recv, os.Repaired, os.Early, os.Duplicates, os.RepairRequests, os.Transport.Dropped)
}

// Tail loss: the last message is lost and nothing follows to reveal it;
// Poke fetches it.
func TestExchangePokeRepairsTailLoss(t *testing.T) {
	net := newNet(t, false)
	w, o := newPeer(t, net, "w", testConfig()), newPeer(t, net, "o", testConfig())
	ctx := context.Background()
	if err := w.x.WaitOwner(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	sendGrads(t, w, "o", 0, 4)
	remove := net.DropIf(func(e memnet.Envelope) bool { return e.Topic != "" })
	sendGrads(t, w, "o", 4, 6) // lost
	remove()
	held := gradParts(t, 0) + gradParts(t, 1) + gradParts(t, 2) + gradParts(t, 3)
	lost := gradParts(t, 4) + gradParts(t, 5)
	if lost < 3 {
		t.Fatalf("clocks 4 and 5 take %d parts; the test wants a multi-part one", lost)
	}
	for c := range 4 {
		if g := <-o.grads; g.clock != c {
			t.Fatalf("clock %d delivered, want %d", g.clock, c)
		}
	}
	if err := o.x.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if next := o.x.NextSeq("w", gossip.StreamGrad); next != uint64(held) {
		t.Fatalf("next seq %d, want %d (the parts of clocks 0..3)", next, held)
	}
	n, err := o.x.Poke(ctx, "w", gossip.StreamGrad)
	if err != nil || n != lost {
		t.Fatalf("Poke fetched %d, %v; want the %d lost parts", n, err, lost)
	}
	for c := 4; c < 6; c++ {
		select {
		case g := <-o.grads: // Poke returns after delivery
			if g.clock != c {
				t.Fatalf("clock %d delivered, want %d", g.clock, c)
			}
			checkRows(t, "grad", c, g.rows)
		default:
			t.Fatalf("clock %d not delivered when Poke returned", c)
		}
	}
	if s := o.x.Stats(); s.Repaired != uint64(lost) {
		t.Errorf("repaired %d, want %d", s.Repaired, lost)
	}
	// Nothing more to fetch: Poke is harmless.
	if n, err := o.x.Poke(ctx, "w", gossip.StreamGrad); n != 0 || err != nil {
		t.Errorf("second Poke: %d, %v", n, err)
	}
}

// A hole the sender can no longer fill is surfaced as ErrGone (handler,
// StreamErr, Poke, counter); Skip resumes after it.
func TestExchangeGoneAndSkip(t *testing.T) {
	net := newNet(t, true) // deliveries only on Flush
	wcfg := testConfig()
	wcfg.RetransmitMessages = 2
	ocfg := testConfig()
	ocfg.RepairDelay = time.Hour // no automatic gap repair: Poke decides
	w, o := newPeer(t, net, "w", wcfg), newPeer(t, net, "o", ocfg)
	ctx := context.Background()
	single := func(c int) model.Sparse { return model.Sparse{Idx: []uint32{uint32(c)}, Val: []float32{float32(c)}} }
	net.DropNext(1) // seq 0
	for c := range 5 {
		g := single(c)
		if err := w.x.SendGrad(ctx, "o", uint64(c), 1, 1, &g); err != nil {
			t.Fatal(err)
		}
	}
	net.Flush()
	if err := o.x.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if s := o.x.Stats(); s.Early != 4 || s.Delivered != 0 {
		t.Fatalf("early %d delivered %d, want 4 held and none delivered", s.Early, s.Delivered)
	}
	n, err := o.x.Poke(ctx, "w", gossip.StreamGrad)
	if !errors.Is(err, gossip.ErrGone) || n != 2 {
		t.Fatalf("Poke: %d fetched, %v; want 2 (seqs 3, 4) and ErrGone", n, err)
	}
	if err := <-o.errs; !errors.Is(err, gossip.ErrGone) {
		t.Errorf("handler error %v", err)
	}
	if err := o.x.StreamErr("w", gossip.StreamGrad); !errors.Is(err, gossip.ErrGone) {
		t.Errorf("StreamErr %v", err)
	}
	if s := o.x.Stats(); s.Gone != 3 || s.Delivered != 0 {
		t.Errorf("gone %d delivered %d, want seqs 0..2 gone, nothing delivered", s.Gone, s.Delivered)
	}
	if ev := w.x.Stats().Evicted; ev != 3 {
		t.Errorf("sender evicted %d, want 3", ev)
	}
	if err := o.x.Skip("w", gossip.StreamGrad); err != nil {
		t.Fatal(err)
	}
	if err := o.x.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for c := 1; c < 5; c++ {
		select {
		case g := <-o.grads:
			if g.clock != c || g.rows.Idx[0] != uint32(c) {
				t.Fatalf("after Skip: clock %d, want %d", g.clock, c)
			}
		default:
			t.Fatalf("after Skip: clock %d not delivered", c)
		}
	}
	if err := o.x.StreamErr("w", gossip.StreamGrad); err != nil {
		t.Errorf("StreamErr after Skip: %v", err)
	}
}

// A message the transport refuses to publish is sequenced and buffered:
// the send reports ErrUnpublished and the receiver repairs it.
func TestExchangeUnpublishedIsRepaired(t *testing.T) {
	net := newNet(t, false)
	w, o := newPeer(t, net, "w", testConfig()), newPeer(t, net, "o", testConfig())
	ctx := context.Background()
	if err := w.x.WaitOwner(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	net.Crash("w")
	g := rowsFor(3)
	if err := w.x.SendGrad(ctx, "o", 3, 1, 13, &g); !errors.Is(err, gossip.ErrUnpublished) {
		t.Fatalf("send while crashed: %v", err)
	}
	net.Restore("w")
	if n, err := o.x.Poke(ctx, "w", gossip.StreamGrad); err != nil || n != gradParts(t, 3) || n < 2 {
		t.Fatalf("Poke: %d, %v; want the %d parts of clock 3", n, err, gradParts(t, 3))
	}
	gg := <-o.grads
	if gg.clock != 3 {
		t.Fatalf("clock %d", gg.clock)
	}
	checkRows(t, "grad", 3, gg.rows)
	if s := w.x.Stats(); s.PublishErrors != 1 || s.Sent != 0 {
		t.Errorf("publish errors %d sent %d, want 1 and 0", s.PublishErrors, s.Sent)
	}
}

// A worker that owns shards sends to itself without the network, and an
// owner receives its own params with LoopParams.
func TestExchangeLoopback(t *testing.T) {
	net := newNet(t, false)
	a := newPeer(t, net, "a", testConfig())
	ctx := context.Background()
	for c := range 3 {
		g := rowsFor(c)
		if err := a.x.SendGrad(ctx, "a", uint64(c), 1, 10+c, &g); err != nil {
			t.Fatal(err)
		}
		ack := wire.Ack{Through: uint64(c)}
		if err := a.x.SendParams(ctx, uint64(c), 1, &ack, &g); err != nil {
			t.Fatal(err)
		}
	}
	awaitGrads(t, a, 3, "a")
	awaitParams(t, a, "a", 3)
	// Only params touch the network (no one else is subscribed: they reach
	// nobody, and that is fine).
	if s := a.x.Stats(); s.Sent != a.node.Stats().Published || s.Sent < 3 {
		t.Errorf("exchange sent %d, transport published %d", s.Sent, a.node.Stats().Published)
	}
}

func TestExchangeSendErrors(t *testing.T) {
	net := newNet(t, false)
	w := newPeer(t, net, "w", testConfig())
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		g    model.Sparse
		want error
	}{
		{"index past Features", model.Sparse{Idx: []uint32{1 << 20}, Val: []float32{1}}, wire.ErrRange},
		{"NaN", model.Sparse{Idx: []uint32{1}, Val: []float32{float32(nan())}}, wire.ErrNonFinite},
		{"descending", model.Sparse{Idx: []uint32{5, 1}, Val: []float32{1, 1}}, wire.ErrMalformed},
	} {
		if err := w.x.SendGrad(ctx, "o", 0, 1, 1, &tc.g); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Nothing was sequenced: the next message is seq 0.
	g := rowsFor(1)
	if err := w.x.SendGrad(ctx, "o", 0, 1, 1, &g); err != nil {
		t.Fatal(err)
	}
	ack := wire.Ack{Applied: []wire.WorkerClock{{Worker: "x", Clock: 1}, {Worker: "x", Clock: 2}}}
	if err := w.x.SendParams(ctx, 0, 1, &ack, &g); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("ack with a worker twice: %v", err)
	}
	w.x.Close()
	if err := w.x.SendGrad(ctx, "o", 0, 1, 1, &g); !errors.Is(err, gossip.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func nan() float64 { var z float64; return z / z }

func TestConfigValidate(t *testing.T) {
	base := testConfig()
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*gossip.Config){
		"Job empty":          func(c *gossip.Config) { c.Job = "" },
		"Job slash":          func(c *gossip.Config) { c.Job = "a/b" },
		"Width 0":            func(c *gossip.Config) { c.Width = 0 },
		"Width over limit":   func(c *gossip.Config) { c.Width = 2000 },
		"Wire":               func(c *gossip.Config) { c.Wire.Values = 7 },
		"RetransmitMessages": func(c *gossip.Config) { c.RetransmitMessages = 0 },
		"RetransmitBytes":    func(c *gossip.Config) { c.RetransmitBytes = 1000 },
		"EarlyMessages":      func(c *gossip.Config) { c.EarlyMessages = 0 },
		"EarlyBytes":         func(c *gossip.Config) { c.EarlyBytes = 10 },
		"RepairDelay":        func(c *gossip.Config) { c.RepairDelay = -1 },
		"RepairTimeout":      func(c *gossip.Config) { c.RepairTimeout = 0 },
		"RepairConcurrency":  func(c *gossip.Config) { c.RepairConcurrency = 0 },
		"MaxReplyBytes":      func(c *gossip.Config) { c.MaxReplyBytes = 1 },
		"Inbox":              func(c *gossip.Config) { c.Inbox = 0 },
	} {
		c := base
		mut(&c)
		err := c.Validate()
		if !errors.Is(err, gossip.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
			continue
		}
		field := name
		if i := len(field); i > 0 {
			field = fmt.Sprint("Config.", name[:min(len(name), indexSpace(name))])
		}
		if !containsString(err.Error(), field) {
			t.Errorf("%s: error %q does not name %s", name, err, field)
		}
	}
}

func indexSpace(s string) int {
	for i, r := range s {
		if r == ' ' {
			return i
		}
	}
	return len(s)
}

func containsString(s, sub string) bool {
	return len(sub) == 0 || len(s) >= len(sub) && (s[:len(sub)] == sub || containsString(s[1:], sub))
}
