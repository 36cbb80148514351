package node

import (
	"math"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// penalties scores peers for rejected messages that gossipsub does not see
// (direct-stream pushes), with gossipsub's numbers for rejected messages
// (see pubsub.go): a count that decays by invalidMessageDecay a second and
// weighs invalidMessageWeight * count^2, so a peer below
// disconnectThreshold, about six rejections in a row, is disconnected and
// blocked as gossipsub's score inspector would. Safe for concurrent use.
type penalties struct {
	mu     sync.Mutex
	counts map[peer.ID]penalty
	now    func() time.Time
}

type penalty struct {
	count float64
	at    time.Time
}

// maxPenalized bounds the table; when full, entries that have decayed to
// nothing are dropped first, then the whole table (a flood of identities
// costs the attacker a connection each, and they get blocked anyway).
const maxPenalized = 4096

func newPenalties() *penalties {
	return &penalties{counts: map[peer.ID]penalty{}, now: time.Now}
}

// add counts one rejection of p and reports its score and whether it is
// now below disconnectThreshold (the count restarts then: p gets blocked).
func (ps *penalties) add(p peer.ID) (score float64, low bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	now := ps.now()
	e := ps.counts[p]
	if !e.at.IsZero() {
		e.count *= math.Pow(invalidMessageDecay, now.Sub(e.at).Seconds())
	}
	e.count++
	e.at = now
	score = invalidMessageWeight * e.count * e.count
	if score < disconnectThreshold {
		delete(ps.counts, p)
		return score, true
	}
	if _, ok := ps.counts[p]; !ok && len(ps.counts) >= maxPenalized {
		for q, o := range ps.counts {
			if o.count*math.Pow(invalidMessageDecay, now.Sub(o.at).Seconds()) < 0.01 {
				delete(ps.counts, q)
			}
		}
		if len(ps.counts) >= maxPenalized {
			clear(ps.counts)
		}
	}
	ps.counts[p] = e
	return score, false
}

// Penalize counts a message from id that a validator outside gossipsub
// rejected (gossip.Config.Penalize: a direct-stream push). A peer that
// keeps sending them is disconnected and blocked for Config.BlockFor, like
// one whose gossipsub score falls (Status: ScoreDisconnects). Unknown IDs
// are ignored.
func (n *Node) Penalize(id string) {
	p, err := peer.Decode(id)
	if err != nil || p == n.self {
		return
	}
	score, low := n.penalties.add(p)
	if !low || n.gater.isBlocked(p) {
		return
	}
	n.scoreKicks.Add(1)
	n.log.Warn().Str("peer", id).Float64("score", score).Dur("blocked_for", n.cfg.BlockFor).
		Msg("disconnecting peer: it keeps pushing messages that validation rejects")
	n.block(p)
}
