package node

// Peers behind NAT: reachability detection (AutoNAT), circuit relays (v2)
// among the job's peers, hole punching (DCUtR), and the report of how each
// connection travels. go-libp2p does the work; this file chooses its
// options, limits the relay service to the job, feeds autorelay with the
// job's relays, and watches the results.
//
// The sequence for two peers A and B behind NATs and a public peer R that
// runs with Config.Relay:
//
//  1. A and B dial R (their --peer). AutoNAT v1 on A asks R to dial A back
//     at the address R observed; A's NAT drops the dial, so A learns it is
//     private (NATPrivate skips this step).
//  2. A's autorelay asks relayCandidates for relays: job peers it is
//     connected to directly that speak circuit v2's hop protocol. It
//     reserves a slot on R; R's jobACL admits only peers that completed
//     this job's hello. A's addresses now include
//     /ip4/<R>/tcp/4001/p2p/<R>/p2p-circuit, and A's beats carry them.
//  3. B's dialer sees A's new addresses and dials through R (dialer.connect
//     falls back to relay addresses when direct ones fail): a relayed
//     connection, inbound at A.
//  4. A's hole punching service (DCUtR) coordinates over that connection:
//     both peers dial each other's observed public address at once, and
//     each NAT lets the other's packets in as replies. On success
//     natState closes the relayed connection, so every stream moves to the
//     direct one; on failure traffic stays on the relay, and both peers
//     report the pair as relayed.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/rs/zerolog"
)

// NATMode says how a peer deals with NATs (Config.NAT, --nat).
type NATMode string

// NAT modes.
const (
	// NATAuto finds out whether the peer is reachable (AutoNAT v1 asks
	// connected peers to dial it back; AutoNAT v2 checks each address),
	// reserves a relay slot on a reachable peer of the job when it is not,
	// and upgrades relayed connections to direct ones by hole punching
	// (DCUtR). It also answers other peers' AutoNAT requests and asks the
	// router for a port mapping (UPnP, NAT-PMP). On loopback-only listens
	// it is NATOff.
	NATAuto NATMode = "auto"
	// NATPrivate is NATAuto for a peer known to be unreachable: it skips
	// AutoNAT's verdict (which needs a peer with a public address to dial
	// it back) and reserves a relay slot as soon as a job peer offers one.
	NATPrivate NATMode = "private"
	// NATPublic is NATAuto for a peer known to be reachable (a VM with a
	// public address and an open port): it never reserves relay slots.
	NATPublic NATMode = "public"
	// NATOff turns all of it off: no AutoNAT, no relayed connections, no
	// hole punching; peers connect directly or not at all.
	NATOff NATMode = "off"
)

// ConnKind says how the traffic with a peer travels.
type ConnKind string

// Connection kinds, as the status and the report name them.
const (
	// ConnDirect is a direct connection (TCP or QUIC between the peers'
	// addresses, through NATs that let it through).
	ConnDirect ConnKind = "direct"
	// ConnHolePunched is a direct connection opened by hole punching
	// (DCUtR) after the peers first met through a relay.
	ConnHolePunched ConnKind = "hole_punched"
	// ConnRelayed is a connection through a circuit relay: every byte
	// crosses the relay peer's links.
	ConnRelayed ConnKind = "relayed"
)

// Tuning of autorelay for a job's relays: go-libp2p's defaults are made for
// finding strangers' relays on the public DHT (wait 3 minutes for 4
// candidates, back off an hour after a refusal); a job has a handful of
// relays it knows.
const (
	// relayMinCandidates: one relay of the job is enough to start.
	relayMinCandidates = 1
	// relayBootDelay: how long autorelay waits for more candidates than
	// relayMinCandidates before reserving; no wait.
	relayBootDelay = 0
	// relayBackoff: how long a relay that refused a reservation is not
	// asked again (go-libp2p: 1h). A refusal is usually a hello still in
	// flight, or a relay that restarted.
	relayBackoff = 15 * time.Second
	// relayPollInterval: how often autorelay may ask relayCandidates for
	// relays (go-libp2p: 30s); it asks only while it holds fewer than
	// relayWanted reservations.
	relayPollInterval = 5 * time.Second
	// relayWanted: reservations a private peer keeps (two relays, so that
	// one can leave).
	relayWanted = 2
	// relayMaxCircuits bounds the relayed connections to one peer that a
	// relay carries at once (go-libp2p: 16): every other peer of a job may
	// need one.
	relayMaxCircuits = 256
	// relayCloseGrace is how long a relayed connection stays open after a
	// direct one to the same peer appeared, so a hole punch's own
	// bookkeeping on it completes.
	relayCloseGrace = time.Second
	// pubsubCheckDelay is how long after a relayed connection closed (a
	// direct one staying) gossipsub's view of the peer is checked; its
	// writers restart within milliseconds, or 100ms+ after a second
	// failure.
	pubsubCheckDelay = 3 * time.Second
)

// effectiveNAT resolves NATAuto to NATOff when every listen address is
// loopback: no NAT sits between loopback peers, and the services would only
// add connections and goroutines.
func (c *Config) effectiveNAT() NATMode {
	if c.NAT != NATAuto {
		return c.NAT
	}
	for _, s := range c.Listen {
		m, err := ma.NewMultiaddr(s)
		if err != nil || !manet.IsIPLoopback(m) {
			return NATAuto
		}
	}
	return NATOff
}

// natState runs the NAT side of a node: it supplies autorelay's candidates,
// the relay service's access list and the hole punching tracer, and keeps
// what status and reports show. Safe for concurrent use: libp2p calls it
// from many goroutines.
type natState struct {
	mode  NATMode // effective mode
	relay bool    // offer relaying (Config.Relay)
	log   zerolog.Logger

	mu       sync.Mutex
	h        host.Host
	hellos   map[peer.ID]bool     // hello finished on the current connection: true when the peer is of this job
	changed  chan struct{}        // closed and replaced whenever hellos changes
	punched  map[peer.ID]bool     // a hole punch with the peer succeeded; cleared when it disconnects
	last     map[peer.ID]ConnKind // job peers: how the connection was the last time it was open
	logged   map[peer.ID]ConnKind // the kind last logged, per job peer
	hadRelay map[peer.ID]bool     // a relayed connection to the peer was open at the last change
	// subscribed reports whether gossipsub knows the peer's subscriptions
	// (it lists the peer on the job's members topic); nil until the node
	// has its gossipsub.
	subscribed func(peer.ID) bool
	reach      network.Reachability // AutoNAT v1's verdict (or the forced one)
	reachable  []string             // addresses AutoNAT v2 confirmed reachable
	relays     []string             // relays this peer holds a reservation with (from its circuit addresses)

	svc  *relayv2.Relay
	subs []event.Subscription
	done chan struct{}
	wg   sync.WaitGroup

	punchOK, punchFailed        atomic.Uint64 // hole punch attempts
	relayReserved, relayRefused atomic.Uint64 // reservations granted and refused by this peer's relay
	relayCircuits               atomic.Uint64 // relayed connections this peer's relay admitted
	closeGrace                  atomic.Int64  // relayCloseGrace in ns (tests lengthen it)
	pubsubRepairs               atomic.Uint64 // gossipsub streams restarted because it lost a peer's subscriptions
}

func newNATState(cfg *Config, log zerolog.Logger) *natState {
	t := &natState{
		mode:     cfg.effectiveNAT(),
		relay:    cfg.Relay,
		log:      log.With().Str("component", "nat").Logger(),
		hellos:   map[peer.ID]bool{},
		changed:  make(chan struct{}),
		punched:  map[peer.ID]bool{},
		last:     map[peer.ID]ConnKind{},
		logged:   map[peer.ID]ConnKind{},
		hadRelay: map[peer.ID]bool{},
		done:     make(chan struct{}),
	}
	t.closeGrace.Store(int64(relayCloseGrace))
	return t
}

// hostOptions are the libp2p options of the mode.
func (t *natState) hostOptions() []libp2p.Option {
	if t.mode == NATOff {
		return []libp2p.Option{libp2p.DisableRelay()}
	}
	opts := []libp2p.Option{
		libp2p.EnableRelay(), // dial through relays, accept relayed connections
		libp2p.EnableAutoRelayWithPeerSource(t.relayCandidates,
			autorelay.WithMinCandidates(relayMinCandidates),
			autorelay.WithBootDelay(relayBootDelay),
			autorelay.WithBackoff(relayBackoff),
			autorelay.WithMinInterval(relayPollInterval),
			autorelay.WithNumRelays(relayWanted)),
		libp2p.EnableHolePunching(holepunch.WithTracer(punchTracer{t})),
		libp2p.EnableNATService(), // dial other peers back for their AutoNAT v1
		libp2p.EnableAutoNATv2(),  // per-address reachability, client and server
		libp2p.NATPortMap(),       // UPnP / NAT-PMP port mapping when the router offers it
	}
	switch t.mode {
	case NATPrivate:
		opts = append(opts, libp2p.ForceReachabilityPrivate())
	case NATPublic:
		opts = append(opts, libp2p.ForceReachabilityPublic())
	}
	return opts
}

// start runs once the host is up: it starts the relay service (Relay),
// watches reachability, relay addresses and connections.
func (t *natState) start(h host.Host) error {
	t.mu.Lock()
	t.h = h
	t.mu.Unlock()
	h.Network().Notify(&network.NotifyBundle{
		ConnectedF:    func(_ network.Network, c network.Conn) { t.connChanged(c.RemotePeer()) },
		DisconnectedF: func(_ network.Network, c network.Conn) { t.connChanged(c.RemotePeer()) },
	})
	if t.relay {
		res := relayv2.DefaultResources()
		res.Limit = nil // training traffic: no byte or time limit on a relayed connection
		res.MaxCircuits = relayMaxCircuits
		svc, err := relayv2.New(h, relayv2.WithResources(res), relayv2.WithACL(jobACL{t}))
		if err != nil {
			return fmt.Errorf("node: start the relay service: %w", err)
		}
		t.svc = svc
		t.log.Info().Msg("relaying for this job's peers (circuit relay v2): peers that cannot reach each other talk through this peer until hole punching connects them")
	}
	if t.mode == NATOff {
		return nil
	}
	t.log.Info().Str("nat", string(t.mode)).Msg("NAT traversal on: AutoNAT, relays of the job, hole punching")
	sub, err := h.EventBus().Subscribe([]any{
		new(event.EvtLocalReachabilityChanged),
		new(event.EvtHostReachableAddrsChanged),
		new(event.EvtAutoRelayAddrsUpdated),
	})
	if err != nil {
		return fmt.Errorf("node: NAT events: %w", err)
	}
	t.subs = append(t.subs, sub)
	t.wg.Go(func() { t.watch(sub) })
	return nil
}

// close stops the relay service and the watchers (before the host closes).
func (t *natState) close() {
	select {
	case <-t.done:
		return
	default:
		close(t.done)
	}
	for _, s := range t.subs {
		s.Close()
	}
	t.wg.Wait()
	if t.svc != nil {
		t.svc.Close()
	}
}

// watch logs and records reachability and relay-address changes.
func (t *natState) watch(sub event.Subscription) {
	for {
		select {
		case <-t.done:
			return
		case e, ok := <-sub.Out():
			if !ok {
				return
			}
			switch e := e.(type) {
			case event.EvtLocalReachabilityChanged:
				t.mu.Lock()
				t.reach = e.Reachability
				t.mu.Unlock()
				switch e.Reachability {
				case network.ReachabilityPublic:
					t.log.Info().Msg("reachability: public (other peers can dial this peer)")
				case network.ReachabilityPrivate:
					if t.relay {
						t.log.Warn().Msg("reachability: private, but --relay is on: only peers that can reach this one can use its relay")
					}
					t.log.Info().Msg("reachability: private (behind a NAT or firewall): reserving a slot on a relay of the job; hole punching will try to connect peers directly")
				default:
					t.log.Info().Msg("reachability: unknown")
				}
			case event.EvtHostReachableAddrsChanged:
				addrs := make([]string, 0, len(e.Reachable))
				for _, a := range e.Reachable {
					addrs = append(addrs, a.String())
				}
				t.mu.Lock()
				t.reachable = addrs
				t.mu.Unlock()
				t.log.Debug().Strs("reachable", addrs).Msg("AutoNAT v2 confirmed addresses")
			case event.EvtAutoRelayAddrsUpdated:
				relays := relayIDs(e.RelayAddrs)
				t.mu.Lock()
				t.relays = relays
				t.mu.Unlock()
				if len(relays) > 0 {
					t.log.Info().Strs("relays", relays).Msg("reserved relay slots: peers that cannot dial this peer reach it through these relays")
				} else {
					t.log.Info().Msg("no relay reservation left")
				}
			}
		}
	}
}

// relayIDs returns the relays' peer IDs in circuit addresses
// (<relay addr>/p2p/<relay>/p2p-circuit), sorted and unique.
func relayIDs(addrs []ma.Multiaddr) []string {
	var out []string
	for _, a := range addrs {
		relay, _ := ma.SplitFunc(a, func(c ma.Component) bool { return c.Protocol().Code == ma.P_CIRCUIT })
		if id, err := relay.ValueForProtocol(ma.P_P2P); err == nil && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// helloDone records the end of the hello with p: jobPeer is true when p
// speaks this job and is compatible. Only such peers are relay candidates,
// and only they may use this peer's relay.
func (t *natState) helloDone(p peer.ID, jobPeer bool) {
	t.mu.Lock()
	t.hellos[p] = jobPeer
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
	t.connChanged(p)
}

// jobPeer reports whether p completed this job's hello, waiting up to wait
// for a hello still in flight (a reservation often arrives right after the
// connection, before the hello ends).
func (t *natState) jobPeer(p peer.ID, wait time.Duration) bool {
	var timeout <-chan time.Time
	for {
		t.mu.Lock()
		ok, done := t.hellos[p]
		changed := t.changed
		t.mu.Unlock()
		if done || wait <= 0 {
			return ok
		}
		if timeout == nil {
			tm := time.NewTimer(wait)
			defer tm.Stop()
			timeout = tm.C
		}
		select {
		case <-changed:
		case <-timeout:
			return false
		case <-t.done:
			return false
		}
	}
}

// relayCandidates is autorelay's peer source: the job's peers this peer is
// connected to directly that run a relay (they speak circuit v2's hop
// protocol, so identify has told us), at most num of them. Relays outside
// the job are never used: the relay sees the job's traffic.
func (t *natState) relayCandidates(_ context.Context, num int) <-chan peer.AddrInfo {
	t.mu.Lock()
	h := t.h
	var ids []peer.ID
	for p, ok := range t.hellos {
		if ok {
			ids = append(ids, p)
		}
	}
	t.mu.Unlock()
	ch := make(chan peer.AddrInfo, max(num, 0))
	defer close(ch)
	if h == nil {
		return ch // autorelay starts before New returns
	}
	slices.Sort(ids)
	for _, p := range ids {
		if len(ch) >= num {
			break
		}
		if kindOf(h.Network().ConnsToPeer(p), false) != ConnDirect {
			continue
		}
		if ps, err := h.Peerstore().SupportsProtocols(p, proto.ProtoIDv2Hop); err != nil || len(ps) == 0 {
			continue
		}
		ch <- peer.AddrInfo{ID: p, Addrs: h.Peerstore().Addrs(p)}
	}
	return ch
}

// jobACL limits this peer's relay to the job: a reservation needs a
// completed hello of this job (waiting for one in flight), and a relayed
// connection needs both ends to have one. With a swarm key no other peer
// can even connect.
type jobACL struct{ t *natState }

// AllowReserve implements relayv2.ACLFilter.
func (a jobACL) AllowReserve(p peer.ID, addr ma.Multiaddr) bool {
	if a.t.jobPeer(p, helloTimeout) {
		a.t.relayReserved.Add(1)
		a.t.log.Debug().Str("peer", p.String()).Msg("relay reservation granted")
		return true
	}
	a.t.relayRefused.Add(1)
	a.t.log.Info().Str("peer", p.String()).Str("addr", addr.String()).Msg("relay reservation refused: not a peer of this job")
	return false
}

// AllowConnect implements relayv2.ACLFilter.
func (a jobACL) AllowConnect(src peer.ID, _ ma.Multiaddr, dest peer.ID) bool {
	if a.t.jobPeer(src, helloTimeout) && a.t.jobPeer(dest, 0) {
		a.t.relayCircuits.Add(1)
		return true
	}
	a.t.relayRefused.Add(1)
	a.t.log.Info().Str("from", src.String()).Str("to", dest.String()).Msg("relayed connection refused: not between peers of this job")
	return false
}

// connectOrRelay is the dialer's connection attempt with NAT traversal on:
// like connectDirect, unless the peer has relay addresses (it announced
// its reservations in its beats): then the swarm dials its direct
// addresses first and the relayed ones after a short delay, and hole
// punching later replaces a relayed connection with a direct one.
func (d *dialer) connectOrRelay(ctx context.Context, ai peer.AddrInfo) error {
	if !slices.ContainsFunc(ai.Addrs, isRelayed) && !slices.ContainsFunc(d.h.Peerstore().Addrs(ai.ID), isRelayed) {
		return d.connectDirect(ctx, ai)
	}
	return d.h.Connect(ctx, ai)
}

// isRelayed reports whether a connection's remote address goes through a
// circuit relay.
func isRelayed(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

// kindOf classifies a peer's open connections: direct (hole punched when
// punched) if any is direct, relayed if all are relayed, "" with none.
func kindOf(conns []network.Conn, punched bool) ConnKind {
	var direct, relayed bool
	for _, c := range conns {
		if isRelayed(c.RemoteMultiaddr()) {
			relayed = true
		} else {
			direct = true
		}
	}
	switch {
	case direct && punched:
		return ConnHolePunched
	case direct:
		return ConnDirect
	case relayed:
		return ConnRelayed
	}
	return ""
}

// connChanged updates p's recorded kind after a connection opened or
// closed, and closes relayed connections that a direct one replaced (their
// long-lived streams, gossipsub's among them, would otherwise keep
// crossing the relay).
func (t *natState) connChanged(p peer.ID) {
	t.mu.Lock()
	h := t.h
	if h == nil {
		t.mu.Unlock()
		return
	}
	conns := h.Network().ConnsToPeer(p)
	if len(conns) == 0 {
		delete(t.punched, p)
		delete(t.hellos, p) // the next connection says hello again
		delete(t.logged, p)
		delete(t.hadRelay, p)
		t.mu.Unlock()
		return
	}
	kind := kindOf(conns, t.punched[p])
	relayNow := slices.ContainsFunc(conns, func(c network.Conn) bool { return isRelayed(c.RemoteMultiaddr()) })
	relayGone := t.hadRelay[p] && !relayNow && kind != ConnRelayed && t.hellos[p]
	t.hadRelay[p] = relayNow
	// A direct connection next to a relayed one is a hole punch (or a
	// direct dial) that just succeeded: the relayed one closes after
	// relayCloseGrace, and the kind is logged then.
	replaced := kind != ConnRelayed && relayNow
	if t.hellos[p] {
		t.last[p] = kind
		if t.logged[p] != kind && !replaced {
			t.logged[p] = kind
			ev := t.log.Info() // relayed and hole punched are news; direct is the rule
			if kind == ConnDirect {
				ev = t.log.Debug()
			}
			ev.Str("peer", p.String()).Str("connection", string(kind)).Msg("connection to a job peer")
		}
	}
	t.mu.Unlock()
	if replaced {
		time.AfterFunc(time.Duration(t.closeGrace.Load()), func() { t.closeRelayed(p) })
	}
	if relayGone {
		time.AfterFunc(pubsubCheckDelay, func() { t.checkPubSub(p) })
	}
}

// setSubscribed installs the check of gossipsub's view (Node, once its
// gossipsub runs).
func (t *natState) setSubscribed(f func(peer.ID) bool) {
	t.mu.Lock()
	t.subscribed = f
	t.mu.Unlock()
}

// checkPubSub runs on both peers pubsubCheckDelay after their relayed
// connection closed: if gossipsub lost p's subscriptions anyway (its
// writers restarted in an order that made it forget them, see
// closeRelayed), it resets every gossipsub stream with p once more. Both
// writers then restart after gossipsub's backoff (100ms and more for a
// second restart), long after each side has forgotten the other, so each
// learns the other's subscriptions from the new streams' hellos.
func (t *natState) checkPubSub(p peer.ID) {
	select {
	case <-t.done:
		return
	default:
	}
	t.mu.Lock()
	f, job := t.subscribed, t.hellos[p]
	t.mu.Unlock()
	conns := t.h.Network().ConnsToPeer(p)
	if f == nil || !job || kindOf(conns, false) != ConnDirect || f(p) {
		return
	}
	t.pubsubRepairs.Add(1)
	t.log.Info().Str("peer", p.String()).Msg("gossipsub lost the peer's subscriptions when the relayed connection closed: restarting its gossipsub streams")
	for _, c := range conns {
		for _, s := range c.GetStreams() {
			if isPubSubStream(s) {
				_ = s.Reset()
			}
		}
	}
}

// closeRelayed closes p's relayed connections if a direct one is still
// open.
//
// gossipsub (v0.17) needs help here. When the stream it writes to a peer
// dies while the peer stays connected, it forgets the peer's subscriptions
// and opens a new stream, and it learns them again only if the peer's own
// writer restarts too. If the two writers sat on different connections
// (one opened on the relayed connection, the other on the direct one that
// appeared meanwhile: a matter of scheduling), closing the relayed
// connection would leave one side publishing nothing to the other for the
// rest of the run. So when a gossipsub stream dies with the relayed
// connection, the gossipsub streams on the direct connections are reset
// too, and both sides start afresh and announce their subscriptions.
func (t *natState) closeRelayed(p peer.ID) {
	select {
	case <-t.done:
		return
	default:
	}
	conns := t.h.Network().ConnsToPeer(p)
	if !slices.ContainsFunc(conns, func(c network.Conn) bool { return !isRelayed(c.RemoteMultiaddr()) }) {
		return
	}
	var pubsubLost bool
	for _, c := range conns {
		if isRelayed(c.RemoteMultiaddr()) {
			pubsubLost = pubsubLost || slices.ContainsFunc(c.GetStreams(), isPubSubStream)
			t.log.Debug().Str("peer", p.String()).Str("addr", c.RemoteMultiaddr().String()).Msg("closing the relayed connection: a direct one replaced it")
			_ = c.Close()
		}
	}
	if !pubsubLost {
		return
	}
	for _, c := range conns {
		if isRelayed(c.RemoteMultiaddr()) {
			continue
		}
		for _, s := range c.GetStreams() {
			if isPubSubStream(s) {
				_ = s.Reset()
			}
		}
	}
}

// isPubSubStream reports whether s is one of gossipsub's (or floodsub's)
// long-lived streams.
func isPubSubStream(s network.Stream) bool {
	p := string(s.Protocol())
	return strings.HasPrefix(p, "/meshsub/") || strings.HasPrefix(p, "/floodsub/")
}

// punchTracer receives go-libp2p's hole punching events.
type punchTracer struct{ t *natState }

// Trace implements holepunch.EventTracer. It runs on the hole puncher's
// goroutines.
func (pt punchTracer) Trace(e *holepunch.Event) {
	t := pt.t
	switch ev := e.Evt.(type) {
	case *holepunch.EndHolePunchEvt:
		if ev.Success {
			t.punchOK.Add(1)
			t.mu.Lock()
			t.punched[e.Remote] = true
			t.mu.Unlock()
			t.log.Info().Str("peer", e.Remote.String()).Dur("took", ev.EllapsedTime).Msg("hole punch succeeded: direct connection")
			t.connChanged(e.Remote)
		} else {
			t.punchFailed.Add(1)
			t.log.Info().Str("peer", e.Remote.String()).Str("error", ev.Error).Msg("hole punch attempt failed (traffic stays on the relay; libp2p retries up to 3 times)")
		}
	case *holepunch.DirectDialEvt:
		if ev.Success {
			t.log.Debug().Str("peer", e.Remote.String()).Msg("direct dial succeeded before any hole punch")
		}
	case *holepunch.ProtocolErrorEvt:
		t.log.Debug().Str("peer", e.Remote.String()).Str("error", ev.Error).Msg("hole punching protocol error")
	}
}

// NATStatus is the NAT side of a peer's status.
type NATStatus struct {
	// Mode is the effective --nat mode: auto, private, public or off.
	Mode string `json:"mode"`
	// Reachability is AutoNAT's verdict (or the forced one): public,
	// private or unknown.
	Reachability string `json:"reachability"`
	// ReachableAddrs are the addresses AutoNAT v2 confirmed other peers can
	// dial.
	ReachableAddrs []string `json:"reachable_addrs,omitempty"`
	// Relays are the relays this peer holds a reservation with: peers that
	// cannot dial it reach it through them.
	Relays []string `json:"relays,omitempty"`
	// Relay is true when this peer relays for the job (--relay).
	Relay bool `json:"relay"`
	// RelayReservations and RelayCircuits count the reservations and the
	// relayed connections this peer's relay granted; RelayRefused counts
	// both refused to peers outside the job.
	RelayReservations uint64 `json:"relay_reservations"`
	RelayCircuits     uint64 `json:"relay_circuits"`
	RelayRefused      uint64 `json:"relay_refused"`
	// HolePunches counts successful and failed hole punch attempts.
	HolePunchesOK     uint64 `json:"hole_punches_ok"`
	HolePunchesFailed uint64 `json:"hole_punches_failed"`
}

// ConnStatus is one connected peer: how the traffic with it travels.
type ConnStatus struct {
	Peer string `json:"peer"`
	// Kind is direct, hole_punched or relayed.
	Kind string `json:"kind"`
	// Addr is the remote address of the connection streams use (a
	// /p2p-circuit address for a relayed one).
	Addr string `json:"addr"`
	// JobPeer is true when the peer completed this job's hello.
	JobPeer bool `json:"job_peer"`
}

// status returns the NAT status and one ConnStatus per connected peer,
// sorted by peer ID.
func (t *natState) status() (NATStatus, []ConnStatus) {
	t.mu.Lock()
	h := t.h
	s := NATStatus{
		Mode:              string(t.mode),
		Reachability:      reachabilityName(t.reach),
		ReachableAddrs:    slices.Clone(t.reachable),
		Relays:            slices.Clone(t.relays),
		Relay:             t.relay,
		RelayReservations: t.relayReserved.Load(),
		RelayCircuits:     t.relayCircuits.Load(),
		RelayRefused:      t.relayRefused.Load(),
		HolePunchesOK:     t.punchOK.Load(),
		HolePunchesFailed: t.punchFailed.Load(),
	}
	punched := maps.Clone(t.punched)
	hellos := maps.Clone(t.hellos)
	t.mu.Unlock()
	conns := []ConnStatus{}
	if h == nil {
		return s, conns
	}
	for _, p := range h.Network().Peers() {
		cs := h.Network().ConnsToPeer(p)
		kind := kindOf(cs, punched[p])
		if kind == "" {
			continue
		}
		addr := ""
		for _, c := range cs { // the connection new streams take: direct first
			if kind == ConnRelayed || !isRelayed(c.RemoteMultiaddr()) {
				addr = c.RemoteMultiaddr().String()
				break
			}
		}
		conns = append(conns, ConnStatus{Peer: p.String(), Kind: string(kind), Addr: addr, JobPeer: hellos[p]})
	}
	sort.Slice(conns, func(i, j int) bool { return conns[i].Peer < conns[j].Peer })
	return s, conns
}

// kinds returns, for every peer of the job this peer was connected to, how
// the connection was the last time it was open.
func (t *natState) kinds() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]string, len(t.last))
	for p, k := range t.last {
		out[p.String()] = string(k)
	}
	return out
}

func reachabilityName(r network.Reachability) string {
	switch r {
	case network.ReachabilityPublic:
		return "public"
	case network.ReachabilityPrivate:
		return "private"
	}
	return "unknown"
}

// ConnectionKinds returns, for every peer of the job this peer was
// connected to during the run, how the traffic with it travelled the last
// time the connection was open: "direct", "hole_punched" or "relayed"
// (ConnKind). Peers that left are kept with their last kind.
func (n *Node) ConnectionKinds() map[string]string { return n.nat.kinds() }

// writeNAT writes the NAT line and the connections table of a status.
func writeNAT(w io.Writer, s *Status) error {
	if s.NAT == nil {
		return nil
	}
	nat := s.NAT
	line := fmt.Sprintf("%s, reachability %s", nat.Mode, nat.Reachability)
	if len(nat.Relays) > 0 {
		line += ", relays " + strings.Join(nat.Relays, " ")
	}
	if nat.Relay {
		line += fmt.Sprintf("; relaying for the job (%d reservations, %d circuits, %d refused)", nat.RelayReservations, nat.RelayCircuits, nat.RelayRefused)
	}
	if nat.HolePunchesOK+nat.HolePunchesFailed > 0 {
		line += fmt.Sprintf("; hole punches %d ok, %d failed", nat.HolePunchesOK, nat.HolePunchesFailed)
	}
	if _, err := fmt.Fprintf(w, "\nNAT\n%s\n", line); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nCONNECTIONS (%d)\tKIND\tADDRESS\t\n", len(s.Connections))
	for _, c := range s.Connections {
		mark := ""
		if !c.JobPeer {
			mark = "(not of this job)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Peer, c.Kind, c.Addr, mark)
	}
	return tw.Flush()
}
