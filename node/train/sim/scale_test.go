package sim

import (
	"flag"
	"strings"
	"testing"
	"time"
)

var (
	scaleFlag       = flag.Bool("scale", false, "TestScale: run 4 to 256 peers (several minutes, about 3 GB) instead of 4, 12 and 32")
	scaleShardsFlag = flag.Int("scale-shards", 0, "TestScale: this many shards instead of the ring's default (to measure what the shard count costs)")
)

// TestScale is the scaling series of docs/scaling.md: the real protocol
// core of 4, 12 and 32 peers (with -scale 4 to 256) in sync mode
// with the default gather and ring, no faults. It checks what a user of a
// large cluster would: every run ends with every contribution applied and
// one model equal to a serial run's (the simulator's own checks); every
// peer holds floor(S/N) or ceil(S/N) shards and the busiest at most 1.1x
// the mean; and the traffic a peer receives per example stays flat: per
// example over the share of rows that live on other peers, every size
// within 1.3x of 4 peers. With -scale it also checks the raw figure, bytes
// per example per peer, at 256 peers within 1.3x of 4 peers (the scaling
// issue's criterion), which does not hold today: docs/scaling.md says why.
//
//	go test ./node/train/sim -run TestScale -v            # 4, 12, 32 peers
//	go test ./node/train/sim -run TestScale -v -scale -timeout 30m
//	go test ./node/train/sim -run TestScale -v -scale-shards 256  # the price of 4096
func TestScale(t *testing.T) {
	sizes := []int{4, 12, 32} // 12: S/N is not whole
	if testing.Short() || raceEnabled {
		sizes = []int{4, 12}
	}
	if *scaleFlag {
		sizes = []int{4, 8, 12, 16, 32, 64, 100, 128, 256}
	}
	const rounds = 4
	var points []ScalePoint
	for _, n := range sizes {
		start := time.Now()
		o := ScaleOptions(n, rounds)
		if *scaleShardsFlag > 0 {
			o.Shards = *scaleShardsFlag
		}
		p, res := Measure(o)
		t.Logf("%3d peers: %d rounds, %d ticks, %.1f B/example/peer (max %.1f), %.1f msgs/round/peer, shards %d..%d, %v",
			n, p.Rounds, res.Ticks, p.BytesPerExample, p.BytesPerExampleMax, p.MsgsPerRound, p.MaxOwned, p.MinOwned, time.Since(start).Round(time.Millisecond))
		if res.Failed() {
			t.Fatalf("%d peers: %d violations:\n  %s", n, len(res.Violations), strings.Join(res.Violations, "\n  "))
		}
		if p.Rounds < rounds {
			t.Errorf("%d peers: %d rounds, want %d", n, p.Rounds, rounds)
		}
		lo, hi := p.Shards/n, (p.Shards+n-1)/n
		if p.MinOwned < lo || p.MaxOwned > hi {
			t.Errorf("%d peers: the peers hold %d..%d of %d shards, want %d..%d", n, p.MinOwned, p.MaxOwned, p.Shards, lo, hi)
		}
		if p.Balance > 1.1 {
			t.Errorf("%d peers: the busiest holds %d shards, %.3f times the mean", n, p.MaxOwned, p.Balance)
		}
		points = append(points, p)
	}
	var b strings.Builder
	if err := WriteScaleTable(&b, points); err != nil {
		t.Fatal(err)
	}
	t.Logf("the series (B = bytes received from other peers before the final round):\n%s", b.String())
	first := points[0]
	for _, p := range points[1:] {
		if r := p.BytesPerRemote / first.BytesPerRemote; r > 1.3 {
			t.Errorf("%d peers receive %.1f B per example over the remote share, %.2fx the %.1f of %d peers (want <= 1.3x)",
				p.Peers, p.BytesPerRemote, r, first.BytesPerRemote, first.Peers)
		}
	}
	if last := points[len(points)-1]; last.Peers == 256 {
		if r := last.BytesPerExample / first.BytesPerExample; r > 1.3 {
			t.Errorf("NOT MET (the scaling issue's criterion): 256 peers receive %.1f B per example per peer, %.2fx the %.1f of 4 peers (want <= 1.3x); "+
				"the remote share alone, 255/256 over 3/4, is 1.33x (docs/scaling.md)", last.BytesPerExample, r, first.BytesPerExample)
		}
	}
}
