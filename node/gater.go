package node

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// gater refuses connections to and from peers blocked for a while (peers
// refused at the hello or disconnected for a bad gossipsub score) and,
// with Config.PeersAllowed, peers not on the allow-list (allow.go). It is
// safe for concurrent use (libp2p calls it from many goroutines).
type gater struct {
	mu      sync.Mutex
	blocked map[peer.ID]time.Time // until when
	now     func() time.Time

	self   peer.ID          // always allowed
	allow  map[peer.ID]bool // the allow-list; nil: every peer may connect
	denied atomic.Uint64    // connections refused by the allow-list after the handshake
}

var _ connmgr.ConnectionGater = (*gater)(nil)

func newGater() *gater {
	return &gater{blocked: map[peer.ID]time.Time{}, now: time.Now}
}

// block refuses p until now+d; it reports whether p was not blocked
// before, so a peer refused by two hellos at once is reported once.
func (g *gater) block(p peer.ID, d time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	until, was := g.blocked[p]
	g.blocked[p] = now.Add(d)
	return !was || !now.Before(until)
}

// isBlocked reports whether p is blocked now, forgetting expired entries.
func (g *gater) isBlocked(p peer.ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.blocked[p]
	if !ok {
		return false
	}
	if g.now().Before(until) {
		return true
	}
	delete(g.blocked, p)
	return false
}

// allowed reports whether the allow-list lets p connect: always without
// one, and always for this peer itself.
func (g *gater) allowed(p peer.ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.allow == nil || p == g.self || g.allow[p]
}

// setAllowed replaces the allow-list (nil: everyone) and returns the peers
// it added and removed, sorted.
func (g *gater) setAllowed(self peer.ID, ids []peer.ID) (added, removed []peer.ID) {
	var next map[peer.ID]bool
	if ids != nil {
		next = make(map[peer.ID]bool, len(ids))
		for _, p := range ids {
			next[p] = true
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for p := range next {
		if !g.allow[p] {
			added = append(added, p)
		}
	}
	for p := range g.allow {
		if !next[p] {
			removed = append(removed, p)
		}
	}
	g.self, g.allow = self, next
	slices.Sort(added)
	slices.Sort(removed)
	return added, removed
}

// refuses reports whether connections to and from p are refused now.
func (g *gater) refuses(p peer.ID) bool { return g.isBlocked(p) || !g.allowed(p) }

// InterceptPeerDial refuses dials to blocked peers and peers not allowed.
func (g *gater) InterceptPeerDial(p peer.ID) bool { return !g.refuses(p) }

// InterceptAddrDial allows every address of a peer that may be dialled.
func (g *gater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return !g.refuses(p) }

// InterceptAccept lets every inbound connection reach the handshake; the
// peer is known only after it.
func (g *gater) InterceptAccept(network.ConnMultiaddrs) bool { return true }

// InterceptSecured refuses blocked peers and peers not allowed once their
// identity is known (after the handshake, before any protocol).
func (g *gater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	if !g.allowed(p) {
		g.denied.Add(1)
		return false
	}
	return !g.isBlocked(p)
}

// InterceptUpgraded allows every upgraded connection.
func (g *gater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }
