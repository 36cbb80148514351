package membership

import (
	"fmt"
	"testing"
	"time"
)

// settled returns a Membership with n-1 other live members that all
// announce its view, and the beats they keep sending.
func settled(b *testing.B, n int) (*Membership, []Beat, time.Time) {
	m, err := New(testConfig("self"), epoch0)
	if err != nil {
		b.Fatal(err)
	}
	now := epoch0
	beats := make([]Beat, n-1)
	for i := range beats {
		beats[i] = Beat{Job: "job1", From: fmt.Sprintf("peer%04d", i), Incarnation: 1, Seq: 1, Epoch: 1, Kind: Join,
			Addrs: []string{"/ip4/10.0.0.1/tcp/4001"}}
		m.Receive(beats[i], now)
	}
	v := m.View()
	for i := range beats {
		beats[i].Kind, beats[i].Epoch, beats[i].SetHash, beats[i].Members = Alive, v.Epoch, v.SetHash, v.Members
		beats[i].Seq++
		m.Receive(beats[i], now)
	}
	if !m.Agreed() || len(m.View().Members) != n {
		b.Fatalf("setup: %d members, agreed %v", len(m.View().Members), m.Agreed())
	}
	return m, beats, now
}

// BenchmarkReceive is the steady state of a 64-peer job: every member beats
// every 500ms and this peer handles each beat (and ticks once per round).
// It must not allocate.
func BenchmarkReceive(b *testing.B) {
	for _, n := range []int{16, 64, 256} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			m, beats, now := settled(b, n)
			step := 500 * time.Millisecond / time.Duration(len(beats))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				p := &beats[i%len(beats)]
				p.Seq++
				now = now.Add(step)
				rd := m.Receive(*p, now)
				if rd.Changed || rd.Rejected != nil {
					b.Fatalf("steady state changed: %+v", rd)
				}
				if i%len(beats) == 0 {
					m.Tick(now)
				}
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "beats/s")
			// One peer handles (n-1) beats per heartbeat; express the cost
			// as a share of one core.
			b.ReportMetric(100*float64(b.Elapsed().Nanoseconds())/float64(b.N)*float64(n-1)/5e8, "%core@500ms")
		})
	}
}
