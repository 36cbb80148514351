package ring

import (
	"math/rand/v2"
	"testing"
)

// TestBalanceEverySize is the balance promise of the defaults: for every
// member count N from 4 to 256, over several random sets of peer IDs, every
// member holds floor(S/N) or ceil(S/N) shards as primary, and the busiest
// holds at most 1.1 times the mean S/N.
func TestBalanceEverySize(t *testing.T) {
	sets := 3
	if testing.Short() || raceEnabled {
		sets = 1
	}
	// The exact bound with 4096 shards (not the defaults: see Config).
	cfg := DefaultConfig()
	cfg.Shards, cfg.MaxLoadPercent = 4096, 100
	S := cfg.Shards
	rng := rand.New(rand.NewPCG(12, 12))
	worst, worstN := 0.0, 0
	for n := 4; n <= 256; n++ {
		lo, hi := S/n, (S+n-1)/n
		for range sets {
			ids := peerIDs(rng, n)
			r, err := New(cfg, ids)
			if err != nil {
				t.Fatal(err)
			}
			l := loads(r)
			most := 0
			for _, m := range ids {
				if l[m] < lo || l[m] > hi {
					t.Fatalf("%d members: %s holds %d shards, want %d..%d", n, m, l[m], lo, hi)
				}
				most = max(most, l[m])
			}
			ratio := float64(most) * float64(n) / float64(S)
			if ratio > worst {
				worst, worstN = ratio, n
			}
			if ratio > 1.1 {
				t.Errorf("%d members: the busiest holds %d shards, %.3f times the mean %.2f", n, most, ratio, float64(S)/float64(n))
			}
		}
	}
	t.Logf("%d shards, %d vnodes: busiest/mean at most %.4f (at %d members) over N = 4..256, %d sets each", S, cfg.VNodes, worst, worstN, sets)
}
