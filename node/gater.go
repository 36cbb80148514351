package node

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// gater refuses connections to and from peers blocked for a while: peers
// refused at the hello or disconnected for a bad gossipsub score. It is
// safe for concurrent use (libp2p calls it from many goroutines).
type gater struct {
	mu      sync.Mutex
	blocked map[peer.ID]time.Time // until when
	now     func() time.Time
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

// InterceptPeerDial refuses dials to blocked peers.
func (g *gater) InterceptPeerDial(p peer.ID) bool { return !g.isBlocked(p) }

// InterceptAddrDial allows every address of a peer that may be dialled.
func (g *gater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return !g.isBlocked(p) }

// InterceptAccept lets every inbound connection reach the handshake; the
// peer is known only after it.
func (g *gater) InterceptAccept(network.ConnMultiaddrs) bool { return true }

// InterceptSecured refuses blocked peers once their identity is known.
func (g *gater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return !g.isBlocked(p)
}

// InterceptUpgraded allows every upgraded connection.
func (g *gater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }
