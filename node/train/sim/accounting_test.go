package sim

import (
	"testing"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// TestAccounting: a message a peer sends itself counts for nothing; every
// other counts its encoded bytes as received; only training traffic (to a
// running receiver before its final round) counts per peer and op and in
// the parts, and the parts (header, shard lists, indices, values) add up
// to the training bytes.
func TestAccounting(t *testing.T) {
	w := newWorkload(Options{Dim: 200, Shards: 16, Rows: 1, Batch: 1}, &rng{s: 1})
	enc := newEncoder()
	fail := func(format string, args ...any) { t.Errorf(format, args...) }
	a := newAccounting(true, true, enc, func() model.Layout { return w.newModel().Layout }, fail)
	push := &wire.Core{Op: wire.CorePush, Round: 3, Examples: 6, Shards: []uint32{1, 5},
		Rows: model.Sparse{Idx: []uint32{20, 90, 150}, Val: []float32{0.5, -1, 2}}, RowWidth: 1}
	pull := &wire.Core{Op: wire.CorePull, Round: 3, Shards: []uint32{5}, Want: []uint32{90, 91}}
	size := func(m *wire.Core) int {
		b, err := enc.encode("peer00", m)
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	sp, sq := size(push), size(pull)
	a.count("peer00", "peer00", push, sp, true)
	a.count("peer00", "peer01", push, sp, true)
	a.count("peer00", "peer01", pull, sq, true)
	a.count("peer00", "peer02", push, sp, false)
	var r Result
	a.report(&r)
	if r.Received["peer00"] != 0 || r.Received["peer01"] != int64(sp+sq) || r.Received["peer02"] != int64(sp) {
		t.Errorf("received %v, want peer01 %d, peer02 %d", r.Received, sp+sq, sp)
	}
	if r.TrainBytes["peer01"] != int64(sp+sq) || r.TrainMsgs["peer01"] != 2 || r.TrainBytes["peer02"] != 0 || r.TrainMsgs["peer02"] != 0 {
		t.Errorf("training bytes %v messages %v, want peer01 only: %d in 2", r.TrainBytes, r.TrainMsgs, sp+sq)
	}
	if r.OpBytes["push"] != int64(sp) || r.OpMsgs["push"] != 1 || r.OpBytes["pull"] != int64(sq) || r.OpMsgs["pull"] != 1 {
		t.Errorf("per op: bytes %v messages %v", r.OpBytes, r.OpMsgs)
	}
	p := r.Parts
	if sum := p.Header + p.Shards + p.Index + p.Values; sum != int64(sp+sq) {
		t.Errorf("parts %+v add up to %d, want the training bytes %d", p, sum, sp+sq)
	}
	if p.Header <= 0 || p.Shards <= 0 || p.Values <= 0 || p.LocalIndex <= 0 {
		t.Errorf("parts %+v: a part a push and a pull have is 0", p)
	}
}
