package gossip_test

import (
	"context"
	"io"
	"maps"
	"sync"
	"testing"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/gossiptest"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// A hostile peer's messages are rejected with the right reason and never
// delivered; honest traffic around them flows.
func TestExchangeRejectsHostilePeer(t *testing.T) {
	net := newNet(t, true) // Flush hands every message over before Sync
	w, o := newPeer(t, net, "w", testConfig()), newPeer(t, net, "o", testConfig())
	evil := net.NewNode("evil")
	ctx := context.Background()
	if err := evil.Ready(ctx, gossip.GradTopic(job, "o"), 1); err != nil {
		t.Fatal(err)
	}
	// Variants of every case (what a test publishes again after gossipsub
	// lost one) differ in their bytes and are rejected for the same reason.
	var cases []gossiptest.Hostile
	seen := map[string]bool{}
	for v := range uint64(3) {
		for _, tc := range gossiptest.HostileVariants(job, "evil", "w", 1<<20, 1024, v) {
			if seen[string(tc.Msg)] {
				t.Fatalf("%s: variant %d repeats the bytes of an earlier message", tc.Name, v)
			}
			seen[string(tc.Msg)] = true
			cases = append(cases, tc)
		}
	}
	var want gossip.Rejections
	for _, tc := range cases {
		topic := gossip.GradTopic(job, "o")
		if tc.Params {
			topic = gossip.ParamsTopic(job, "w")
		}
		// memnet's limit is 1 MiB: the oversize message reaches the
		// Exchange, whose limit is 1 KiB.
		if err := evil.Publish(ctx, topic, tc.Msg); err != nil {
			t.Fatalf("%s: %v", tc.Name, err)
		}
		if !tc.Params {
			want[tc.Want]++
		}
	}
	sendGrads(t, w, "o", 0, 2)
	net.Flush()
	awaitGrads(t, o, 2, "w")
	if err := o.x.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// The params-topic cases go to w's own params topic.
	if err := w.x.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// The owner sees every gradient-topic case.
	if got := o.x.Rejected(); got != want {
		t.Errorf("owner rejected %v, want %v", got.Map(), want.Map())
	}
	var wantW gossip.Rejections
	for _, tc := range cases {
		if tc.Params {
			wantW[tc.Want]++
		}
	}
	if gotW := w.x.Rejected(); gotW != wantW {
		t.Errorf("worker rejected %v, want %v", gotW.Map(), wantW.Map())
	}
	select {
	case g := <-o.grads:
		t.Errorf("delivered %+v", g)
	case p := <-o.params:
		t.Errorf("delivered params %+v", p)
	case p := <-w.params:
		t.Errorf("delivered params to the worker %+v", p)
	default:
	}
	if s, sw := o.node.Stats(), w.node.Stats(); s.Rejected+sw.Rejected != uint64(len(cases)) {
		t.Errorf("transports counted %d+%d rejections, want %d", s.Rejected, sw.Rejected, len(cases))
	}
}

// An authenticated sender that breaks the part protocol loses the message,
// not the stream.
func TestExchangeDropsBrokenParts(t *testing.T) {
	net := newNet(t, false)
	o := newPeer(t, net, "o", testConfig())
	bad := net.NewNode("bad")
	ctx := context.Background()
	if err := bad.Ready(ctx, gossip.GradTopic(job, "o"), 1); err != nil {
		t.Fatal(err)
	}
	c := wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits())
	part := func(seq uint64, part, parts uint16, clock uint64, idx uint32) []byte {
		msg, err := c.AppendGrad(nil, wire.Header{Job: job, Sender: "bad", Clock: clock, Seq: seq, Part: part, Parts: parts}, 1, 1,
			&model.Sparse{Idx: []uint32{idx}, Val: []float32{1}})
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	for _, msg := range [][]byte{
		part(0, 1, 2, 0, 5), // a part 1 with no part 0: dropped
		part(1, 0, 2, 1, 5), // clock 1, part 0 of 2...
		part(2, 1, 2, 2, 6), // ...whose part 1 says clock 2: both dropped
		part(3, 0, 2, 3, 5), // clock 3, part 0...
		part(4, 1, 2, 3, 4), // ...part 1 goes backwards (4 < 5): dropped
		part(5, 0, 2, 5, 5), // clock 5 is fine
		part(6, 1, 2, 5, 9),
	} {
		if err := bad.Publish(ctx, gossip.GradTopic(job, "o"), msg); err != nil {
			t.Fatal(err)
		}
	}
	g := <-o.grads
	if g.clock != 5 || len(g.rows.Idx) != 2 || g.rows.Idx[1] != 9 {
		t.Fatalf("delivered clock %d rows %v, want clock 5 rows [5 9]", g.clock, g.rows.Idx)
	}
	if err := o.x.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if r := o.x.Rejected(); r[gossip.ReasonProtocol] != 3 || r.Total() != 3 {
		t.Errorf("rejected %v, want 3 protocol violations", r.Map())
	}
	for range 3 {
		if err := <-o.errs; err == nil {
			t.Error("nil error")
		}
	}
}

// The same hostile messages pushed over direct streams (PushProtocol,
// ParamsPushProtocol) are rejected with the same reasons: the push path
// checks what the gossipsub validator checks, with the stream's
// authenticated peer as the sender.
func TestExchangeRejectsHostilePushes(t *testing.T) {
	net := newNet(t, true)
	var mu sync.Mutex
	penalized := map[string]int{}
	cfg := testConfig()
	cfg.Penalize = func(p string) {
		mu.Lock()
		penalized[p]++
		mu.Unlock()
	}
	w, o := newPeer(t, net, "w", cfg), newPeer(t, net, "o", cfg)
	evil := net.NewNode("evil")
	ctx := context.Background()
	cases := gossiptest.HostileCases(job, "evil", "w", 1<<20, 1024)
	var wantO, wantW gossip.Rejections
	for _, tc := range cases {
		to, proto := "o", gossip.PushProtocol
		if tc.Params {
			to, proto = "w", gossip.ParamsPushProtocol
			wantW[tc.Want]++
		} else {
			wantO[tc.Want]++
		}
		rc, err := evil.Request(ctx, to, proto, tc.Msg)
		if err != nil {
			t.Fatalf("%s: %v", tc.Name, err)
		}
		if _, err := io.Copy(io.Discard, rc); err == nil {
			t.Errorf("%s: pushed without an error; want the stream reset", tc.Name)
		}
		rc.Close()
	}
	if err := o.x.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.x.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := o.x.Rejected(); got != wantO {
		t.Errorf("owner rejected %v, want %v", got.Map(), wantO.Map())
	}
	if got := w.x.Rejected(); got != wantW {
		t.Errorf("worker rejected %v, want %v", got.Map(), wantW.Map())
	}
	select {
	case g := <-o.grads:
		t.Errorf("delivered %+v", g)
	case p := <-w.params:
		t.Errorf("delivered params %+v", p)
	default:
	}
	// Every rejected push counts against its sender (the node disconnects
	// a peer that keeps sending them), and against nobody else.
	mu.Lock()
	defer mu.Unlock()
	if want := map[string]int{"evil": len(cases)}; !maps.Equal(penalized, want) {
		t.Errorf("penalized %v, want %v", penalized, want)
	}
}
