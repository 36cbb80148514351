package node

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// bandwidth is a metrics.Reporter with exact totals. go-libp2p's own
// BandwidthCounter updates its totals from a background sweeper about once a
// second, so a short run or the end of a long one reads low; a report of
// bytes on the wire per training example needs the exact count. Per
// protocol totals are kept too (gossipsub vs repair vs hello); rates are not
// computed (the report derives them from totals and time).
type bandwidth struct {
	in, out atomic.Int64
	heard   sync.Map // peer.ID -> *atomic.Int64: when bytes last came from it (unix ns)

	mu    sync.Mutex
	proto map[protocol.ID]*[2]atomic.Int64
}

var _ metrics.Reporter = (*bandwidth)(nil)

func newBandwidth() *bandwidth { return &bandwidth{proto: map[protocol.ID]*[2]atomic.Int64{}} }

func (b *bandwidth) LogSentMessage(n int64) { b.out.Add(n) }
func (b *bandwidth) LogRecvMessage(n int64) { b.in.Add(n) }

func (b *bandwidth) LogSentMessageStream(n int64, p protocol.ID, _ peer.ID) { b.counter(p)[1].Add(n) }
func (b *bandwidth) LogRecvMessageStream(n int64, p protocol.ID, from peer.ID) {
	b.counter(p)[0].Add(n)
	now := time.Now().UnixNano()
	if v, ok := b.heard.Load(from); ok {
		v.(*atomic.Int64).Store(now)
		return
	}
	v := new(atomic.Int64)
	v.Store(now)
	b.heard.Store(from, v)
}

// lastHeard is when bytes last arrived from p on any stream (zero: never).
func (b *bandwidth) lastHeard(p peer.ID) time.Time {
	if v, ok := b.heard.Load(p); ok {
		return time.Unix(0, v.(*atomic.Int64).Load())
	}
	return time.Time{}
}

func (b *bandwidth) counter(p protocol.ID) *[2]atomic.Int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.proto[p]
	if c == nil {
		c = new([2]atomic.Int64)
		b.proto[p] = c
	}
	return c
}

func (b *bandwidth) GetBandwidthForPeer(peer.ID) metrics.Stats { return metrics.Stats{} }

func (b *bandwidth) GetBandwidthForProtocol(p protocol.ID) metrics.Stats {
	c := b.counter(p)
	return metrics.Stats{TotalIn: c[0].Load(), TotalOut: c[1].Load()}
}

func (b *bandwidth) GetBandwidthTotals() metrics.Stats {
	return metrics.Stats{TotalIn: b.in.Load(), TotalOut: b.out.Load()}
}

func (b *bandwidth) GetBandwidthByPeer() map[peer.ID]metrics.Stats { return nil }

func (b *bandwidth) GetBandwidthByProtocol() map[protocol.ID]metrics.Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := make(map[protocol.ID]metrics.Stats, len(b.proto))
	for p, c := range b.proto {
		m[p] = metrics.Stats{TotalIn: c[0].Load(), TotalOut: c[1].Load()}
	}
	return m
}

func (b *bandwidth) Reset() {
	b.in.Store(0)
	b.out.Store(0)
	b.mu.Lock()
	clear(b.proto)
	b.mu.Unlock()
}

func (b *bandwidth) TrimIdle(time.Time) {}
