package train_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/ring"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// BenchmarkRound measures the protocol core's own work per example in a
// fault-free run: N peers, each a worker and the owner of its shards,
// exchanging every message through the wire codec (encoded and decoded,
// as gossip.CoreLink does), with the gradient computation left out (a
// fixed gradient). It is what the peers spend on the protocol and on
// applying, the work beside a lone `train`'s parsing and computing, and
// what decides whether N peers train N times faster than one (issue
// "Scaling"). ns/example is the time of all N peers' work (run on one
// goroutine) per example the cluster trains, which is also what one peer
// spends per example it trains when the work is even; peers=1 is one
// peer owning every shard, the protocol's cost with nothing to share.
// B/op and allocs/op are the whole cluster's per round.
//
//	go test ./node/train -run '^$' -bench Round -benchmem
func BenchmarkRound(b *testing.B) {
	for _, mode := range []train.Mode{train.Sync, train.Async} {
		for _, n := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/peers=%d", mode, n), func(b *testing.B) { benchRound(b, mode, n, 1, wire.F32) })
		}
	}
}

// BenchmarkWindowRound is BenchmarkRound with windows of h local steps
// (train.Config.LocalSteps): a round is h batches, rows travel wide
// (weights and AdaGrad's accumulator), and the "changes" are fixed. It
// measures what the exchange costs per example as windows grow (ns/example
// over every example of the window), with the link's lossless formats.
//
//	go test ./node/train -run '^$' -bench WindowRound -benchmem
func BenchmarkWindowRound(b *testing.B) {
	for _, values := range []wire.Values{wire.F32, wire.Raw} {
		for _, h := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("sync/peers=4/h=%d/%s", h, values), func(b *testing.B) { benchRound(b, train.Sync, 4, h, values) })
		}
	}
}

const (
	benchDim    = 1 << 24
	benchBatch  = 1000
	benchFields = 39
	benchShards = 256
)

// benchBatches reads n batches of rows from the generator of `gossiptrain
// gen` (the data of the bench command: click-like, 39 fields, Zipf
// popularity): the sorted distinct rows each touches, with the bias row,
// as a worker's Preparer gives them to its core.
func benchBatches(b testing.TB, seed uint64, n int, dim uint64) [][]uint32 {
	cfg := data.DefaultGenConfig()
	cfg.Rows, cfg.TestRows, cfg.Features, cfg.Fields, cfg.Seed = int64(n*benchBatch), 0, dim, benchFields, seed
	meta, err := data.Generate(b.TempDir(), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	src, err := data.Open(meta.Files, data.Options{Dim: dim})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	out := make([][]uint32, n)
	var batch data.Batch
	for i := range out {
		k, err := src.Next(&batch, benchBatch)
		if err != nil || k != benchBatch {
			b.Fatalf("batch %d: %d rows, %v", i, k, err)
		}
		keys := append(slices.Clone(batch.Indices), uint32(dim)) // the bias row
		slices.Sort(keys)
		out[i] = slices.Compact(keys)
	}
	return out
}

type benchPeer struct {
	name    string
	core    *train.Core
	batches [][]uint32
	next    int
	grad    []float32
	enc     *wire.Codec
}

type benchMsg struct {
	from, to string
	msg      []byte     // encoded, between peers
	self     *wire.Core // to itself: as it is (the trainer's inbox)
}

func benchRound(b *testing.B, mode train.Mode, n, h int, values wire.Values) {
	rn := newRoundNet(b, mode, n, h, values, benchDim)
	// Warm up: every peer's first rounds pull values no push asked for.
	rn.runTo(8)
	start := rn.round()
	b.ReportAllocs()
	b.ResetTimer()
	rn.runTo(start + uint64(b.N))
	b.StopTimer()
	rounds := float64(rn.round() - start)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(rounds*float64(n*benchBatch*h)), "ns/example")
	b.ReportMetric(0, "ns/op")
}

// roundNet is N peers of a fault-free run exchanging every message through
// the wire codec, as BenchmarkRound describes, driven on one goroutine.
type roundNet struct {
	tb    testing.TB
	h     int // batches a round
	lim   wire.Limits
	peers map[string]*benchPeer
	order []*benchPeer
	dec   *wire.Codec
	bufs  [][]byte // encoded messages delivered: their buffers, to encode into again (as gossip.CoreLink pools them)
	queue []benchMsg
	head  int
}

func newRoundNet(tb testing.TB, mode train.Mode, n, h int, values wire.Values, dim uint64) *roundNet {
	lim := wire.DefaultLimits()
	lim.MaxMessage = 64 << 20
	lim.MaxRows, lim.MaxValues = 1<<24, 1<<26
	rn := &roundNet{tb: tb, h: max(1, h), lim: lim, peers: map[string]*benchPeer{}, dec: wire.NewCodec(wire.F32, wire.None, lim)}
	var members []train.Member
	for i := range n {
		name := fmt.Sprintf("peer%02d", i)
		p := &benchPeer{name: name, batches: windows(benchBatches(tb, uint64(i+1), 64, dim), h), enc: wire.NewCodec(values, wire.None, lim)}
		rn.peers[name] = p
		rn.order = append(rn.order, p)
		members = append(members, train.Member{Peer: name, ID: train.MemberID(name, 1)})
	}
	slices.SortFunc(members, func(a, c train.Member) int {
		if a.Peer < c.Peer {
			return -1
		}
		return 1
	})
	rc := ring.DefaultConfig()
	rc.Shards = benchShards
	for _, p := range rn.order {
		m, err := model.New(model.Logreg, dim, 2, benchShards, model.DefaultOptConfig(model.AdaGrad))
		if err != nil {
			tb.Fatal(err)
		}
		m.W = make([]float32, m.Layout.Len())
		cfg := train.DefaultConfig()
		cfg.Self, cfg.ID = p.name, train.MemberID(p.name, 1)
		cfg.Mode, cfg.Model, cfg.Initial = mode, m, members
		cfg.LocalSteps = h
		cfg.Place = func(ms []string) (train.Placement, error) { return ring.New(rc, ms) }
		cfg.Limits = lim
		cfg.Limits.Features = m.Layout.Features
		if p.core, err = train.New(cfg); err != nil {
			tb.Fatal(err)
		}
	}
	for _, p := range rn.order {
		rn.drain(p)
	}
	return rn
}

// round is the first peer's round.
func (rn *roundNet) round() uint64 { return rn.order[0].core.Round() }

// runTo delivers messages (and ticks when none is left) until the first
// peer is at round r.
func (rn *roundNet) runTo(r uint64) {
	for rn.round() < r {
		if !rn.step() {
			for _, p := range rn.order {
				p.core.Tick()
				rn.drain(p)
			}
		}
	}
}

// drain queues what p's core decided: its messages (encoded, but to
// itself), its batches, its gradients (fixed), until it decides nothing.
func (rn *roundNet) drain(p *benchPeer) {
	tb := rn.tb
	for {
		rd := p.core.Ready()
		for _, e := range rd.Messages {
			if e.To == p.name {
				rn.queue = append(rn.queue, benchMsg{from: p.name, to: e.To, self: e.Msg})
				continue
			}
			body, flags, err := p.enc.CoreBody(e.Msg)
			if err != nil {
				tb.Fatal(err)
			}
			var buf []byte
			if n := len(rn.bufs); n > 0 {
				buf, rn.bufs = rn.bufs[n-1][:0], rn.bufs[:n-1]
			}
			m, err := p.enc.AppendCorePart(buf, wire.Header{Job: "bench", Sender: p.name, Parts: 1}, flags, body)
			if err != nil {
				tb.Fatal(err)
			}
			rn.queue = append(rn.queue, benchMsg{from: p.name, to: e.To, msg: m})
		}
		if rd.Err != nil {
			tb.Fatal(rd.Err)
		}
		for p.core.WantBatches() > 0 {
			k := p.batches[p.next%len(p.batches)]
			p.next++
			p.core.Batch(k, benchBatch*rn.h)
		}
		if c := rd.Compute; c != nil {
			if cap(p.grad) < len(c.Weights) {
				p.grad = make([]float32, len(c.Weights))
				for i := range p.grad {
					p.grad[i] = 1e-3
				}
			}
			p.core.Computed(c.Round, p.grad[:len(c.Weights)], 0.5)
			continue
		}
		if len(rd.Messages) == 0 {
			return
		}
	}
}

// step delivers the next message queued; false when none is.
func (rn *roundNet) step() bool {
	tb := rn.tb
	if rn.head == len(rn.queue) {
		return false
	}
	m := rn.queue[rn.head]
	rn.head++
	if rn.head > 4096 {
		rn.queue, rn.head = append(rn.queue[:0], rn.queue[rn.head:]...), 0
	}
	p := rn.peers[m.to]
	if m.self != nil {
		p.core.Receive(m.from, m.self)
		rn.drain(p)
		return true
	}
	msg := new(wire.Core) // handed over to Receive, as gossip.CoreLink does
	h, body, err := rn.dec.CoreChunk(m.msg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := rn.dec.DecodeCoreBody(h, body, rn.lim.MaxMessage, msg); err != nil {
		tb.Fatal(err)
	}
	rn.bufs = append(rn.bufs, m.msg) // (msg holds copies)
	p.core.Receive(m.from, msg)
	rn.drain(p)
	return true
}

// windows groups batches' keys h at a time (the union of each group's).
func windows(batches [][]uint32, h int) [][]uint32 {
	if h <= 1 {
		return batches
	}
	var out [][]uint32
	for i := 0; i+h <= len(batches); i += h {
		var keys []uint32
		for _, k := range batches[i : i+h] {
			keys = append(keys, k...)
		}
		slices.Sort(keys)
		out = append(out, slices.Compact(keys))
	}
	return out
}
