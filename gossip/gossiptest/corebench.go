package gossiptest

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// PullMessage returns a pull like a worker's: 64 wanted rows of a 2^24-row
// model, two shards and a clock per member of a 4-peer run (~200 bytes on
// the wire).
func PullMessage() *wire.Core {
	r := rand.New(rand.NewPCG(1, 2))
	m := &wire.Core{Op: wire.CorePull, Member: 3, Config: 2, Round: 100, Through: 99, Req: 4711,
		Shards: []uint32{5, 9}, Clocks: []wire.MemberClock{{Member: 1, Clock: 99}, {Member: 2, Clock: 98}, {Member: 3, Clock: 99}, {Member: 4, Clock: 99}}}
	k := uint32(0)
	for range 64 {
		k += 1 + r.Uint32N(1<<18)
		m.Want = append(m.Want, k)
	}
	return m
}

// PushMessage returns a push of rows random rows (width 1, normal values,
// indices below 2^24) and as many wanted rows: ~240k rows make a ~1 MiB
// body, which travels in two parts.
func PushMessage(rows int) *wire.Core {
	r := rand.New(rand.NewPCG(3, 4))
	m := &wire.Core{Op: wire.CorePush, Member: 3, Config: 2, Round: 100, Through: 99, Req: 4712, Examples: 512,
		Shards: []uint32{5, 9}, RowWidth: 1}
	step := uint32(1<<24) / uint32(rows)
	k := uint32(0)
	for range rows {
		k += 1 + r.Uint32N(step)
		m.Rows.Idx = append(m.Rows.Idx, k)
		m.Rows.Val = append(m.Rows.Val, float32(r.NormFloat64()*0.01))
	}
	m.Want = append([]uint32(nil), m.Rows.Idx[:rows/8]...)
	return m
}

// BenchCoreLink measures core links over the given transports: b.N copies
// of msg from a's link to c's, at most window in flight (Send never
// blocks: a sender that outruns its queue drops). It reports messages/s,
// MB/s of stream bytes (frames) and allocations per message, both links
// included (the receiver decodes every message into a new wire.Core: the
// one deliver owns), and the process's CPU time per message: both ends
// and the kernel's work for their sockets. With window 1 each message is
// sent alone, after the one before was delivered: a sync round's
// messages, paying every wake-up. Every message must arrive.
func BenchCoreLink(b *testing.B, a, c gossip.Transport, cfg gossip.CoreLinkConfig, msg *wire.Core, window int) {
	tokens := make(chan struct{}, window)
	var got atomic.Int64
	var target atomic.Int64
	done := make(chan struct{}, 1)
	recv, err := gossip.NewCoreLink(c, cfg, func(string, *wire.Core) {
		<-tokens
		if got.Add(1) == target.Load() {
			done <- struct{}{}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer recv.Close()
	send, err := gossip.NewCoreLink(a, cfg, func(string, *wire.Core) {})
	if err != nil {
		b.Fatal(err)
	}
	defer send.Close()
	wait := func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		deadline := time.Now().Add(5 * time.Minute)
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if s := send.Stats(); s.Dropped != 0 || time.Now().After(deadline) {
				b.Fatalf("%d of %d messages delivered; sender %+v (window %d)", got.Load(), target.Load(), s, window)
			}
		}
	}
	// Warm up: open the stream and grow the buffers.
	target.Store(int64(window))
	for range window {
		tokens <- struct{}{}
		send.Send(c.Self(), msg)
	}
	wait()
	got.Store(0)
	target.Store(int64(b.N))
	s0 := send.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	for range b.N {
		tokens <- struct{}{}
		send.Send(c.Self(), msg)
	}
	wait()
	el, cpu := time.Since(start).Seconds(), processCPU()-cpu0
	b.StopTimer()
	s := send.Stats()
	if s.Dropped != 0 {
		b.Fatalf("%d messages dropped: window %d too large for the queue", s.Dropped, window)
	}
	b.ReportMetric(float64(b.N)/el, "msgs/s")
	b.ReportMetric(float64(s.SentBytes-s0.SentBytes)/el/1e6, "MB/s")
	b.ReportMetric(cpu.Seconds()*1e6/float64(b.N), "cpu-µs/msg")
}

// processCPU is the CPU time (user and system) this process has used: both
// links, the transport's goroutines and the kernel's work for its sockets.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchCoreLinkFanout measures one link sending b.N copies of msg spread
// over the receivers' links, at most window in flight to each: from one
// goroutine taking the receivers in turn (a core's driver), or with
// parallel from one goroutine per receiver, which contend for the link's
// one encoder. It reports messages/s.
func BenchCoreLinkFanout(b *testing.B, a gossip.Transport, receivers []gossip.Transport, cfg gossip.CoreLinkConfig, msg *wire.Core, window int, parallel bool) {
	send, err := gossip.NewCoreLink(a, cfg, func(string, *wire.Core) {})
	if err != nil {
		b.Fatal(err)
	}
	defer send.Close()
	k := len(receivers)
	tokens := make([]chan struct{}, k)
	var got atomic.Int64
	for i, tr := range receivers {
		tokens[i] = make(chan struct{}, window)
		l, err := gossip.NewCoreLink(tr, cfg, func(string, *wire.Core) {
			<-tokens[i]
			got.Add(1)
		})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
	}
	await := func(n int64) {
		deadline := time.Now().Add(5 * time.Minute)
		for got.Load() < n {
			if s := send.Stats(); s.Dropped != 0 || time.Now().After(deadline) {
				b.Fatalf("%d of %d delivered; sender %+v", got.Load(), n, s)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	sendTo := func(i, n int) {
		for range n {
			tokens[i] <- struct{}{}
			send.Send(receivers[i].Self(), msg)
		}
	}
	for i := range k { // warm up: streams and buffers
		sendTo(i, window)
	}
	await(int64(k * window))
	got.Store(0)
	per := (b.N + k - 1) / k
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if parallel {
		var wg sync.WaitGroup
		for i := range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sendTo(i, per)
			}()
		}
		wg.Wait()
	} else {
		for range per {
			for i := range k {
				sendTo(i, 1)
			}
		}
	}
	await(int64(k * per))
	el := time.Since(start).Seconds()
	b.StopTimer()
	b.ReportMetric(float64(k*per)/el, "msgs/s")
}
