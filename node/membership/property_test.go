package membership

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestRandomSchedules runs many seeded random schedules on the fake
// network: 3-6 peers joining at random times, random delivery delays (up to
// 300ms, so beats overtake each other), random drops (up to 40%, never more
// than 3 in a row per link), and, in some schedules, a crash followed by a
// restart (quick or slow), a graceful leave, and a partition into two
// groups for 1-10s that then heals. The delays and drops stay
// below the dead threshold: at most (3+1)*500ms + 300ms = 2.3s of silence
// against DeadAfter 5s. Checked:
//   - no peer that kept running is ever reported dead (unless a partition
//     cut it off);
//   - once churn stops, all running peers agree (same members, epoch and
//     SetHash, each Agreed) within DeadAfter + 2 hops, a hop being the
//     longest a beat can take to get through: (3+1) heartbeats + jitter;
//   - epochs never go back and every view holds its owner (checked on every
//     Ready by the cluster).
func TestRandomSchedules(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	var took []time.Duration
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		d, err := randomSchedule(t, seed)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		took = append(took, d)
	}
	slices.Sort(took)
	t.Logf("%d schedules: agreement after the last event within p50 %v, p99 %v, max %v",
		seeds, took[len(took)/2], took[len(took)*99/100], took[len(took)-1])
}

func randomSchedule(t *testing.T, seed uint64) (time.Duration, error) {
	c := newCluster(t, seed)
	rng := rand.New(rand.NewPCG(seed, 99))
	c.delay = time.Millisecond
	c.jitter = time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
	c.drop = 0.4 * rng.Float64()
	c.maxDropRun = 3

	type event struct {
		at time.Duration
		do func()
	}
	n := 3 + rng.IntN(4)
	ids := []string{"p0", "p1", "p2", "p3", "p4", "p5"}[:n]
	var evs []event
	for _, id := range ids {
		evs = append(evs, event{time.Duration(rng.Int64N(int64(3 * time.Second))), func() { c.start(id) }})
	}
	victims := map[string]bool{}
	if rng.IntN(2) == 0 { // crash one peer, restart it 0-8s later
		id := ids[rng.IntN(n)]
		victims[id] = true
		crash := 4*time.Second + time.Duration(rng.Int64N(int64(4*time.Second)))
		restart := crash + time.Duration(rng.Int64N(int64(8*time.Second)))
		evs = append(evs, event{crash, func() { c.crash(id) }}, event{restart, func() { c.start(id) }})
	}
	if rng.IntN(3) == 0 { // one peer leaves for good
		id := ids[rng.IntN(n)]
		if !victims[id] {
			victims[id] = true
			evs = append(evs, event{4*time.Second + time.Duration(rng.Int64N(int64(6*time.Second))), func() { c.leave(id) }})
		}
	}
	partitioned := false
	if rng.IntN(3) == 0 { // split the peers in two for 1-10s, then heal
		partitioned = true
		perm := rng.Perm(n)
		var left, right []string
		for i, p := range perm {
			if i < 1+rng.IntN(n-1) {
				left = append(left, ids[p])
			} else {
				right = append(right, ids[p])
			}
		}
		from := 4*time.Second + time.Duration(rng.Int64N(int64(6*time.Second)))
		to := from + time.Second + time.Duration(rng.Int64N(int64(9*time.Second)))
		evs = append(evs, event{from, func() { c.partition(left, right) }}, event{to, c.heal})
	}
	slices.SortStableFunc(evs, func(a, b event) int { return int(a.at - b.at) })
	for _, e := range evs {
		c.advance(epoch0.Add(e.at).Sub(c.now))
		e.do()
	}
	// After the last event every running peer has heard every other (or
	// declared it dead) by DeadAfter; from then on each beat reaches each
	// peer within maxDropRun+1 heartbeats plus the jitter: one such hop to
	// learn the highest epoch for the common set, one more to hear everyone
	// announce it.
	hop := time.Duration(c.maxDropRun+1)*c.cfg.Heartbeat + c.jitter
	limit := c.cfg.DeadAfter + 2*hop
	took, err := c.within(limit, func() error { return c.agree(c.upIDs()) })
	if err != nil {
		return 0, fmt.Errorf("%d peers, jitter %v, drop %.2f: no agreement %v after the last event (%v): %v\n%s",
			n, c.jitter, c.drop, limit, evs[len(evs)-1].at, err, c.describe())
	}
	for _, id := range c.order {
		for _, d := range c.nodes[id].died {
			if !victims[d] && !partitioned {
				return 0, fmt.Errorf("%s declared %s dead, but it never stopped (jitter %v, drop %.2f)", id, d, c.jitter, c.drop)
			}
		}
	}
	return took, nil
}
