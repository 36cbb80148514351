package gossiptest

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// BenchFeatures is the model size of the benchmark gradients: 2^24 hashed
// features plus the bias row.
const BenchFeatures = 1<<24 + 1

// GradOfSize returns a width-1 gradient of random distinct indices below
// 2^24 with normal values whose Grad message (F32, no compression, a
// 52-byte sender) is within 1% of size bytes, and that message's size.
func GradOfSize(seed uint64, size int) (model.Sparse, int) {
	r := rand.New(rand.NewPCG(seed, 0x67726164))
	c := wire.NewCodec(wire.F32, wire.None, wire.Limits{MaxMessage: 1 << 24, MaxRows: 1 << 22, MaxValues: 1 << 22, MaxWidth: 1, MaxString: 256, MaxList: 16})
	h := wire.Header{Job: "bench", Sender: "12D3KooWGzBTz6yjNNkpe4ZiZzFRtaWm7jdQVrDPt4dUvnbskFmT"}
	rows := max(1, size/6)
	for {
		set := make(map[uint32]bool, rows)
		for len(set) < rows {
			set[r.Uint32N(1<<24)] = true
		}
		idx := make([]uint32, 0, rows)
		for k := range set {
			idx = append(idx, k)
		}
		slices.Sort(idx)
		g := model.Sparse{Idx: idx, Val: make([]float32, rows)}
		for i := range g.Val {
			g.Val[i] = float32(r.NormFloat64() * 0.1)
		}
		msg, err := c.AppendGrad(nil, h, 100, 1, &g)
		if err != nil {
			panic(err)
		}
		if d := len(msg) - size; d*100 <= size && -d*100 <= size {
			return g, len(msg)
		}
		rows = max(1, rows*size/len(msg))
	}
}

// BenchExchange measures one worker sending size-byte gradient messages to
// one owner through Exchanges on the given transports, keeping at most
// window messages in flight (the flow control a training loop does: an
// Exchange never blocks on the network, so a sender must pace itself). It
// reports messages/s and, through SetBytes, MB/s of wire messages, and the
// repairs needed per message. Every message is delivered (Poke repairs a
// lost tail) before the clock stops. The retransmit buffer holds 256
// messages, and as many are sent before the clock starts, so that its slots
// hold their buffers and allocations are those of the steady state.
func BenchExchange(b *testing.B, worker, owner gossip.Transport, size, window int) {
	cfg := gossip.DefaultConfig()
	cfg.Job = "bench"
	cfg.Wire.Limits.Features = BenchFeatures
	cfg.RetransmitMessages = 256
	warm := cfg.RetransmitMessages
	g, n := GradOfSize(1, size)
	sem := make(chan struct{}, window)
	var delivered, target atomic.Int64
	target.Store(int64(warm))
	reached := make(chan struct{}, 1)
	ox, err := gossip.New(owner, cfg, gossip.Handlers{Grad: func(m *gossip.Grad) {
		if m.Rows.Len() != g.Len() {
			b.Errorf("delivered %d rows, sent %d", m.Rows.Len(), g.Len())
		}
		<-sem
		if delivered.Add(1) == target.Load() {
			reached <- struct{}{}
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer ox.Close()
	wx, err := gossip.New(worker, cfg, gossip.Handlers{})
	if err != nil {
		b.Fatal(err)
	}
	defer wx.Close()
	ctx := context.Background()
	wait, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := wx.WaitOwner(wait, owner.Self()); err != nil {
		b.Fatal(err)
	}
	run := func(from, to int) {
		for i := from; i < to; i++ {
			sem <- struct{}{}
			if err := wx.SendGrad(ctx, owner.Self(), uint64(i), 0, 100, &g); err != nil {
				b.Fatal(err)
			}
		}
		for {
			select {
			case <-reached:
				return
			case <-time.After(200 * time.Millisecond):
				if _, err := ox.Poke(ctx, worker.Self(), gossip.StreamGrad); err != nil {
					b.Fatal(err)
				}
			case <-wait.Done():
				b.Fatalf("%d of %d delivered after 60s", delivered.Load(), to)
			}
		}
	}
	run(0, warm)
	repaired := ox.Stats().Repaired
	target.Store(int64(warm + b.N))
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	run(warm, warm+b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	b.ReportMetric(float64(ox.Stats().Repaired-repaired)/float64(b.N), "repaired/msg")
}
