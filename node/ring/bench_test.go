package ring

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkNew builds the default ring (64 vnodes, 4096 shards, exact load
// bound) for 16 and 256 members, with one and two replicas. A ring is built
// once per membership change, so milliseconds are fine; the figure to watch
// is how it grows with members.
func BenchmarkNew(b *testing.B) {
	for _, n := range []int{16, 256} {
		for _, replicas := range []int{1, 2} {
			b.Run(fmt.Sprintf("members=%d/replicas=%d", n, replicas), func(b *testing.B) {
				ids := peerIDs(rand.New(rand.NewPCG(1, 2)), n)
				cfg := DefaultConfig()
				cfg.Replicas = replicas
				b.ReportAllocs()
				for b.Loop() {
					if _, err := New(cfg, ids); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n*cfg.VNodes), "ns/point")
			})
		}
	}
}

// BenchmarkOwners is the lookup a sender does per shard when it splits a
// gradient by owner: it must not allocate.
func BenchmarkOwners(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Replicas = 2
	r, err := New(cfg, peerIDs(rand.New(rand.NewPCG(1, 2)), 16))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for s := range cfg.Shards {
			n += len(r.Owners(s))
		}
	}
	if n == 0 {
		b.Fatal("no owners")
	}
	b.ReportMetric(float64(b.N*cfg.Shards)/b.Elapsed().Seconds()/1e6, "Mlookups/s")
}
