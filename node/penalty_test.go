package node

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Rejections in a row reach the disconnect threshold at the sixth, as
// gossipsub's invalid-message score does; spread out, they decay and never
// do; the count starts afresh after a peer is reported low.
func TestPenaltiesDecayLikeGossipsub(t *testing.T) {
	now := time.Unix(1000, 0)
	ps := newPenalties()
	ps.now = func() time.Time { return now }
	p := peer.ID("pusher")
	for i := 1; i <= 5; i++ {
		if score, low := ps.add(p); low {
			t.Fatalf("rejection %d: low already (score %.0f)", i, score)
		}
	}
	if score, low := ps.add(p); !low || score > disconnectThreshold {
		t.Fatalf("sixth rejection in a row: score %.0f low %v, want below %.0f", score, low, disconnectThreshold)
	}
	if _, low := ps.add(p); low {
		t.Fatal("after being reported low the count did not start afresh")
	}
	q := peer.ID("rare")
	for i := range 100 {
		now = now.Add(10 * time.Second) // 0.9^10: a third of the count is left
		if score, low := ps.add(q); low {
			t.Fatalf("a rejection every 10 s: low after %d (score %.0f)", i+1, score)
		}
	}
}

// The table stays bounded when many identities are penalized once.
func TestPenaltiesBounded(t *testing.T) {
	ps := newPenalties()
	for i := range 3 * maxPenalized {
		ps.add(peer.ID(string(rune(i)) + "x"))
	}
	if n := len(ps.counts); n > maxPenalized {
		t.Fatalf("%d entries, limit %d", n, maxPenalized)
	}
}

// A peer whose pushes keep being rejected is disconnected and blocked, like
// one with a low gossipsub score, and the others carry on without it.
func TestPenalizeDisconnectsAndBlocks(t *testing.T) {
	log, _ := testLog(t)
	cfg := fastConfig("penalize")
	nodes := startCluster(t, 3, cfg, log)
	waitFor(t, 5*time.Second, agreed(nodes))
	honest, bad := nodes[:2], nodes[2]
	for i, judge := range honest {
		for k := range 6 {
			if k == 5 && judge.gater.isBlocked(bad.Self()) {
				t.Fatalf("node %d blocked the bad peer after %d rejections, before the sixth", i, k)
			}
			judge.Penalize(bad.Self().String())
		}
		judge.Penalize("not a peer ID") // ignored
		judge.Penalize(judge.Self().String())
		waitFor(t, 5*time.Second, func() (bool, string) {
			c := judge.Host().Network().Connectedness(bad.Self())
			return c != network.Connected && judge.gater.isBlocked(bad.Self()), "still connected: " + c.String()
		})
		if got := judge.Status().Network.ScoreDisconnects; got != 1 {
			t.Errorf("node %d: ScoreDisconnects = %d, want 1", i, got)
		}
		if judge.gater.isBlocked(judge.Self()) {
			t.Errorf("node %d penalized itself", i)
		}
	}
	waitFor(t, cfg.DeadAfter+3*time.Second, agreed(honest))
}
