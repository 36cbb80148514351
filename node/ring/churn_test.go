package ring

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// loads returns the number of shards each member of r holds as primary.
func loads(r *Ring) map[string]int {
	l := map[string]int{}
	for _, p := range r.Assignment() {
		l[p]++
	}
	return l
}

func maxOverMean(r *Ring) float64 {
	most := 0
	for _, m := range r.Members() {
		most = max(most, len(r.Owned(m)))
	}
	return float64(most) * float64(len(r.Members())) / float64(r.Shards())
}

func percentile(xs []float64, p float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[int(p*float64(len(s)-1)+0.5)]
}

// TestBalance measures the busiest of 16 peers against the mean (16 shards)
// over many random peer-ID sets with 64 vnodes and 256 shards. Plain
// consistent hashing cannot promise a bound: shard counts are discrete and
// random. A bounded-load rule must keep every set within its bound,
// ceil(max(S, S*pct/100)/N) shards.
func TestBalance(t *testing.T) {
	const sets, peers = 1000, 16
	rng := rand.New(rand.NewPCG(7, 7))
	for _, mode := range modes {
		cfg := DefaultConfig()
		cfg.Shards, cfg.MaxLoadPercent = 256, mode.pct
		bound := capBound(cfg, peers)
		var ratios []float64
		over := 0
		for range sets {
			r, err := New(cfg, peerIDs(rng, peers))
			if err != nil {
				t.Fatal(err)
			}
			ratios = append(ratios, maxOverMean(r))
			for m, l := range loads(r) {
				if mode.pct != 0 && l > bound {
					over++
					t.Errorf("%s: %s holds %d shards, bound %d", mode.name, m, l, bound)
				}
			}
		}
		t.Logf("%-10s %d sets of %d peers: busiest/mean p50 %.3f p90 %.3f p99 %.3f max %.3f",
			mode.name, sets, peers, percentile(ratios, .5), percentile(ratios, .9), percentile(ratios, .99), slices.Max(ratios))
		if over > 10 {
			t.Fatalf("%s: too many members over the bound", mode.name)
		}
	}
}

// capBound is the most shards a member may hold under cfg's load bound with
// n members: ceil(T/n), T = max(S, ceil(S*pct/100)).
func capBound(cfg Config, n int) int {
	total := max(cfg.Shards, (cfg.Shards*cfg.MaxLoadPercent+99)/100)
	return (total + n - 1) / n
}

// TestCapacities checks the capacity split by hand: T = max(S,
// ceil(S*pct/100)) units, T/n each, one more for the T%n members whose point
// 0 comes first.
func TestCapacities(t *testing.T) {
	tests := []struct {
		shards, pct int
		rank0       []int32
		excluded    []bool
		w           []int32 // by member index; excluded members keep 0
	}{
		{4, 100, []int32{2, 0, 1}, []bool{false, false, false}, []int32{1, 1, 2}},
		{4, 100, []int32{2, 0, 1}, []bool{false, false, true}, []int32{2, 2, 0}},
		{4, 125, []int32{1, 0}, []bool{false, false}, []int32{2, 3}},          // T = 5
		{256, 125, []int32{0, 1, 2}, make([]bool, 3), []int32{107, 107, 106}}, // T = 320
	}
	for _, tt := range tests {
		live := 0
		for _, x := range tt.excluded {
			if !x {
				live++
			}
		}
		got := make([]int32, len(tt.excluded))
		capacities(tt.shards, tt.pct, tt.rank0, tt.excluded, live, got)
		if !slices.Equal(got, tt.w) {
			t.Errorf("capacities(%d, %d, %v, %v) = %v, want %v", tt.shards, tt.pct, tt.rank0, tt.excluded, got, tt.w)
		}
	}
}

// TestLoadBound: for any member count, nobody holds more than ceil(T/N)
// shards, T = max(S, ceil(S*pct/100)), in every bounded mode.
func TestLoadBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for _, pct := range []int{100, 125} {
		cfg := DefaultConfig()
		cfg.MaxLoadPercent = pct
		for n := 1; n <= 300; n += 1 + n/8 {
			r, err := New(cfg, peerIDs(rng, n))
			if err != nil {
				t.Fatal(err)
			}
			bound := capBound(cfg, n)
			for m, l := range loads(r) {
				if l > bound {
					t.Errorf("pct %d, %d members: %s holds %d shards, bound %d", pct, n, m, l, bound)
				}
			}
		}
	}
}

// churn counts, between ring a and ring b, shards whose primary moved to a
// member that is not in a (to a newcomer), away from a member that is not in
// b (off a leaver), and between members present in both.
func churn(a, b *Ring) (toNew, offGone, between int) {
	inA, inB := map[string]bool{}, map[string]bool{}
	for _, m := range a.Members() {
		inA[m] = true
	}
	for _, m := range b.Members() {
		inB[m] = true
	}
	for _, s := range Moved(a, b) {
		switch {
		case !inA[b.Primary(s)]:
			toNew++
		case !inB[a.Primary(s)]:
			offGone++
		default:
			between++
		}
	}
	return
}

// TestPlainJoinLeave: with plain consistent hashing a join moves shards only
// to the newcomer, a leave moves only the leaver's shards, and a join moves
// S/(N+1) shards on average.
func TestPlainJoinLeave(t *testing.T) {
	const trials, peers = 300, 16
	rng := rand.New(rand.NewPCG(9, 9))
	cfg := DefaultConfig()
	cfg.MaxLoadPercent = 0
	total := 0
	for range trials {
		ids := peerIDs(rng, peers+1)
		old, _ := New(cfg, ids[:peers])
		grown, _ := New(cfg, ids)
		toNew, _, between := churn(old, grown)
		if between != 0 || toNew != len(grown.Owned(ids[peers])) {
			t.Fatalf("join: %d shards moved between old members, %d to the newcomer who owns %d",
				between, toNew, len(grown.Owned(ids[peers])))
		}
		total += toNew
		gone := ids[rng.IntN(peers)]
		shrunk, _ := New(cfg, slices.DeleteFunc(slices.Clone(ids[:peers]), func(m string) bool { return m == gone }))
		_, off, between := churn(old, shrunk)
		if between != 0 || off != len(old.Owned(gone)) {
			t.Fatalf("leave: %d moved between others, %d off the leaver who owned %d", between, off, len(old.Owned(gone)))
		}
	}
	mean, want := float64(total)/trials, float64(cfg.Shards)/(peers+1)
	t.Logf("plain join of a 17th peer moves %.2f shards on average (S/(N+1) = %.2f)", mean, want)
	if mean < 0.9*want || mean > 1.1*want {
		t.Errorf("join moves %.2f shards on average, want %.2f +-10%%", mean, want)
	}
}

// TestStandbyTakesOver: with two replicas, when a primary leaves, each of
// its shards goes to that shard's standby, in both modes.
func TestStandbyTakesOver(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	for _, mode := range modes {
		cfg := DefaultConfig()
		cfg.Replicas = 2
		cfg.MaxLoadPercent = mode.pct
		for trial := range 60 {
			ids := peerIDs(rng, 2+trial%20)
			r, _ := New(cfg, ids)
			gone := ids[rng.IntN(len(ids))]
			after, _ := New(cfg, slices.DeleteFunc(slices.Clone(ids), func(m string) bool { return m == gone }))
			for _, s := range r.Owned(gone) {
				if after.Primary(s) != r.Owners(s)[1] {
					t.Fatalf("%s, %d members: shard %d: standby was %s, new primary %s",
						mode.name, len(ids), s, r.Owners(s)[1], after.Primary(s))
				}
			}
		}
	}
}

// busiest returns the most shards any member present in both a and b
// sends or receives between them (as primary).
func busiest(a, b *Ring) int {
	inA, inB := map[string]bool{}, map[string]bool{}
	for _, m := range a.Members() {
		inA[m] = true
	}
	for _, m := range b.Members() {
		inB[m] = true
	}
	io := map[string]int{}
	most := 0
	for _, s := range Moved(a, b) {
		for _, m := range []string{a.Primary(s), b.Primary(s)} {
			if inA[m] && inB[m] {
				io[m]++
				most = max(most, io[m])
			}
		}
	}
	return most
}

// TestBoundedChurn measures what the load bound costs in movement (the
// table in the package doc): a join still moves about S/(N+1) shards to the
// newcomer, plus some between old members as capacities shrink; a leave
// moves the leaver's shards plus some. It checks the price stays what the
// doc says: the shards moved between remaining members are at most 4% of
// S on average, and no remaining member sends or receives more shards than
// the newcomer receives (or the leaver sends), so a rebalance takes no
// longer than the least movement possible would.
func TestBoundedChurn(t *testing.T) {
	trials := 100
	if testing.Short() || raceEnabled {
		trials = 20
	}
	for _, pct := range []int{100, 125} {
		rng := rand.New(rand.NewPCG(11, 11))
		cfg := DefaultConfig()
		cfg.MaxLoadPercent, cfg.Shards = pct, 4096 // the tables in doc.go
		S := float64(cfg.Shards)
		for _, peers := range []int{4, 16, 64, 256} {
			var joinNew, joinBetween, joinBusy, leaveOff, leaveBetween, leaveBusy []float64
			for range trials {
				ids := peerIDs(rng, peers+1)
				old, _ := New(cfg, ids[:peers])
				grown, _ := New(cfg, ids)
				n, _, b := churn(old, grown)
				joinNew, joinBetween = append(joinNew, float64(n)), append(joinBetween, float64(b))
				joinBusy = append(joinBusy, float64(busiest(old, grown)))
				gone := ids[rng.IntN(peers)]
				shrunk, _ := New(cfg, slices.DeleteFunc(slices.Clone(ids[:peers]), func(m string) bool { return m == gone }))
				_, o, b := churn(old, shrunk)
				leaveOff, leaveBetween = append(leaveOff, float64(o)), append(leaveBetween, float64(b))
				leaveBusy = append(leaveBusy, float64(busiest(old, shrunk)))
			}
			t.Logf("pct %d S %d N=%3d join: to newcomer %6.1f (S/(N+1) %6.1f), between old mean %5.1f p99 %3.0f, busiest old %5.1f | leave: off leaver %6.1f, between others mean %5.1f p99 %3.0f, busiest other %5.1f",
				pct, cfg.Shards, peers, mean(joinNew), S/float64(peers+1), mean(joinBetween), percentile(joinBetween, .99), mean(joinBusy),
				mean(leaveOff), mean(leaveBetween), percentile(leaveBetween, .99), mean(leaveBusy))
			for _, c := range []struct {
				what           string
				moved, between []float64
				busy           []float64
			}{{"join", joinNew, joinBetween, joinBusy}, {"leave", leaveOff, leaveBetween, leaveBusy}} {
				if m := mean(c.between); m > 0.04*S {
					t.Errorf("pct %d, N=%d: a %s moves %.1f shards between remaining members on average, more than 4%% of %d", pct, peers, c.what, m, cfg.Shards)
				}
				if mean(c.busy) > mean(c.moved) {
					t.Errorf("pct %d, N=%d: on a %s the busiest remaining member moves %.1f shards on average, more than the %.1f of the member that comes or goes",
						pct, peers, c.what, mean(c.busy), mean(c.moved))
				}
			}
		}
	}
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
