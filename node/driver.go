package node

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/node/membership"
	"github.com/gossiptrain/gossiptrain/node/ring"
)

// State is a consistent snapshot of what the driver decided last.
type State struct {
	// View is the membership view: epoch, sorted members, incarnations,
	// set hash.
	View membership.View
	// Ring assigns shards for View.Members under the configured topology.
	// Move ownership to it only when Agreed.
	Ring *ring.Ring
	// RingHash is xxhash64 of the ring's primaries in shard order (each ID
	// followed by '\n'): peers with equal RingHash assign every shard alike.
	RingHash uint64
	// Agreed reports that every other member's latest beat announced exactly
	// View's epoch and set hash.
	Agreed bool
	// Reached reports that the member count has reached Config.MinPeers at
	// least once.
	Reached bool
}

// Event reports a change of the membership view or of its agreement. The
// driver sends one for every change, in order.
type Event struct {
	State
	// Time is when the driver decided it.
	Time time.Time
	// Joined, Left, Died and Restarted are the peers that changed in this
	// step (see membership.Ready). A restarted peer kept its ID, hence its
	// shards, but its process and state are new.
	Joined, Left, Died, Restarted []string
	// Missed counts the events this subscriber lost before this one
	// because it fell more than maxQueued events behind (0 normally).
	Missed int
}

// maxQueued bounds the events queued for one slow subscriber; beyond it
// the oldest are dropped and the next event delivered says how many.
const maxQueued = 1024

// subscriber queues events for one Subscribe caller; a goroutine forwards
// them to out, so the driver never blocks on a slow reader.
type subscriber struct {
	mu     sync.Mutex
	q      []Event
	missed int
	notify chan struct{}
	stop   chan struct{}
	out    chan Event
	once   sync.Once
}

func (s *subscriber) push(ev Event) {
	s.mu.Lock()
	if len(s.q) >= maxQueued {
		s.q = s.q[1:]
		s.missed++
	}
	s.q = append(s.q, ev)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *subscriber) forward() {
	defer close(s.out)
	for {
		s.mu.Lock()
		if len(s.q) == 0 {
			s.mu.Unlock()
			select {
			case <-s.notify:
				continue
			case <-s.stop:
				return
			}
		}
		ev := s.q[0]
		s.q = s.q[1:]
		ev.Missed, s.missed = s.missed, 0
		s.mu.Unlock()
		select {
		case s.out <- ev:
		case <-s.stop:
			return
		}
	}
}

func (s *subscriber) cancel() { s.once.Do(func() { close(s.stop) }) }

// Subscribe returns a channel that receives an Event for every change of
// the view or of its agreement from now on, starting with the current
// state, and a function that ends the subscription. The channel is closed
// when the subscription ends or the node closes. Events queue for a slow
// reader (up to maxQueued); it never slows the driver.
func (n *Node) Subscribe() (<-chan Event, func()) {
	s := &subscriber{notify: make(chan struct{}, 1), stop: make(chan struct{}), out: make(chan Event)}
	n.mu.Lock()
	if n.subs == nil { // closed
		n.mu.Unlock()
		close(s.out)
		return s.out, func() {}
	}
	n.subs[s] = struct{}{}
	s.push(Event{State: n.st, Time: time.Now()})
	n.mu.Unlock()
	go s.forward()
	return s.out, func() {
		n.mu.Lock()
		delete(n.subs, s)
		n.mu.Unlock()
		s.cancel()
	}
}

func (n *Node) closeSubscribers() {
	n.mu.Lock()
	subs := n.subs
	n.subs = nil
	n.mu.Unlock()
	for s := range subs {
		s.cancel()
	}
}

// State returns the driver's current decisions.
func (n *Node) State() State {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.st
}

// View returns the current membership view.
func (n *Node) View() membership.View { return n.State().View }

// Ring returns the ring of the current view (not necessarily agreed yet;
// see State).
func (n *Node) Ring() *ring.Ring { return n.State().Ring }

// Agreed reports whether the current view is agreed by every member.
func (n *Node) Agreed() bool { return n.State().Agreed }

// ringHash hashes a ring's assignment (see State.RingHash).
func ringHash(r *ring.Ring) uint64 {
	d := xxhash.New()
	for _, p := range r.Assignment() {
		d.WriteString(p)
		d.WriteString("\n")
	}
	return d.Sum64()
}

// initState sets the state before the driver starts: alone, at epoch 1.
func (n *Node) initState(m *membership.Membership) {
	v := m.View()
	r, err := n.ringFor(v.Members)
	if err != nil {
		panic("node: ring of a lone peer: " + err.Error()) // Config.Validate checked the ring config
	}
	n.mu.Lock()
	n.st = State{View: v, Ring: r, RingHash: ringHash(r), Agreed: true, Reached: n.cfg.MinPeers <= 1}
	n.stats = m.Stats()
	n.mu.Unlock()
	if n.st.Reached {
		close(n.reachedCh)
	}
}

// readBeats moves beats from the members subscription to the driver,
// dropping this peer's own messages (gossipsub delivers them locally).
func (n *Node) readBeats() {
	for {
		msg, err := n.sub.Next(n.ctx)
		if err != nil {
			return
		}
		if msg.ReceivedFrom == n.self {
			continue
		}
		buf, ok := msg.ValidatorData.(*beatBuf)
		if !ok {
			continue // cannot happen: the validator sets it for every accepted remote message
		}
		select {
		case n.beats <- buf:
		case <-n.ctx.Done():
			return
		}
	}
}

// publishLoop publishes encoded beats in order. Publish hands a message to
// gossipsub's validation pipeline and returns; it blocks only while that
// queue is full, which must not stall the driver.
func (n *Node) publishLoop() {
	for {
		select {
		case <-n.ctx.Done():
			return
		case data := <-n.outbox:
			if err := n.members.Publish(n.ctx, data); err != nil && n.ctx.Err() == nil {
				n.log.Warn().Err(err).Msg("publish beat")
			}
		}
	}
}

// leaving tracks an announced Leave until every member acknowledged it.
type leaving struct {
	done    chan struct{}
	pending map[string]bool
	resend  time.Time
}

// drive is the one goroutine that owns the membership core: beats, ticks,
// address changes and the leave request come in; beats go out, the ring is
// recomputed, dials are started, events are sent.
func (n *Node) drive(m *membership.Membership) {
	defer close(n.driverDone)
	codec := wire.NewCodec(wire.F32, wire.None, n.val.codec.Limits())
	self := n.self.String()
	var (
		buf     []byte
		lv      *leaving
		members = map[peer.ID]bool{}
		timer   = time.NewTimer(0)
	)
	defer timer.Stop()
	for {
		var (
			rd membership.Ready
			in *beatBuf
		)
		select {
		case <-n.ctx.Done():
			return
		case now := <-timer.C:
			if lv != nil && lv.done != nil && !now.Before(lv.resend) {
				rd = m.Leave(now) // repeat until acknowledged
				lv.resend = now.Add(n.cfg.Heartbeat)
			} else {
				rd = m.Tick(now)
			}
		case in = <-n.beats:
			rd = m.Receive(in.beat, time.Now())
		case addrs := <-n.addrUpd:
			if err := m.SetAddrs(addrs); err != nil {
				n.log.Warn().Err(err).Msg("cannot announce the new addresses")
			} else {
				n.log.Info().Strs("addrs", addrs).Msg("addresses changed")
			}
			continue
		case done := <-n.leaveReq:
			now := time.Now()
			rd = m.Leave(now)
			lv = &leaving{done: done, pending: map[string]bool{}, resend: now.Add(n.cfg.Heartbeat)}
			for _, id := range m.View().Members {
				if id != self {
					lv.pending[id] = true
				}
			}
			n.log.Info().Int("members", len(lv.pending)).Msg("announcing leave")
		}

		for i := range rd.Send {
			var err error
			if buf, err = appendBeat(codec, buf[:0], &rd.Send[i]); err != nil {
				n.log.Error().Err(err).Msg("encode beat") // our own beat: a bug or absurd limits
				continue
			}
			signed, err := signBeat(n.key, buf)
			if err != nil {
				n.log.Error().Err(err).Msg("sign beat") // Config.Validate checked the key type
				continue
			}
			select {
			case n.outbox <- signed:
			default:
				n.localDrops.Add(1) // the publisher is stuck; a later beat replaces this one
			}
		}
		from := ""
		if in != nil {
			from = in.beat.From
		}
		n.apply(m, &rd, members, from)
		if lv != nil && lv.done != nil {
			if in != nil && !slices.Contains(in.beat.Members, self) {
				delete(lv.pending, in.beat.From)
			}
			for _, l := range [][]string{rd.Left, rd.Died} {
				for _, id := range l {
					delete(lv.pending, id)
				}
			}
			if len(lv.pending) == 0 {
				close(lv.done)
				lv.done = nil
			}
		}
		if in != nil {
			n.val.release(in)
		}
		next := rd.Next
		if lv != nil && lv.done != nil && (next.IsZero() || lv.resend.Before(next)) {
			next = lv.resend
		}
		if next.IsZero() {
			next = time.Now().Add(time.Hour) // left and alone: only events wake us
		}
		timer.Reset(time.Until(next))
	}
}

// apply acts on one Ready: logs, ring, dials, state, events. from is the
// sender of the beat the Ready answers ("" for a tick or a leave): every
// address in rd.Dial comes from its beat.
func (n *Node) apply(m *membership.Membership, rd *membership.Ready, members map[peer.ID]bool, from string) {
	for _, id := range rd.Joined {
		n.log.Info().Str("peer", id).Msg("member joined")
	}
	for _, id := range rd.Restarted {
		n.log.Info().Str("peer", id).Msg("member restarted (new incarnation: same shards, new state)")
	}
	for _, id := range rd.Left {
		n.log.Info().Str("peer", id).Msg("member left")
	}
	for _, id := range rd.Died {
		n.log.Warn().Str("peer", id).Dur("dead_after", n.cfg.DeadAfter).Msg("member declared dead")
	}
	for _, r := range rd.Rejected {
		n.log.Debug().Str("from", r.From).Str("reason", r.Reason.String()).Err(r.Err).Msg("membership rejected a beat")
	}
	if len(rd.Dial) > 0 {
		n.dialAnnounced(from, rd.Dial, rd.View.Members)
	}

	n.mu.Lock()
	prev := n.st
	st := prev
	st.View, st.Agreed = rd.View, rd.Agreed
	if rd.Reached {
		st.Reached = true
	}
	if !slices.Equal(prev.View.Members, rd.View.Members) {
		if r, err := n.ringFor(rd.View.Members); err != nil {
			n.log.Error().Err(err).Msg("cannot build the ring of the new member set; keeping the previous one")
		} else {
			st.Ring, st.RingHash = r, ringHash(r)
		}
	}
	n.st = st
	n.stats = m.Stats()
	n.mu.Unlock()

	changed := rd.Changed || st.Agreed != prev.Agreed
	if rd.Changed {
		owned := len(st.Ring.Owned(n.self.String()))
		n.log.Info().Uint64("epoch", st.View.Epoch).Int("members", len(st.View.Members)).
			Int("owned", owned).Int("shards", st.Ring.Shards()).Bool("agreed", st.Agreed).Msg("member set")
	}
	if st.Agreed && (!prev.Agreed || rd.Changed) && len(st.View.Members) > 1 {
		n.log.Info().Uint64("epoch", st.View.Epoch).Int("members", len(st.View.Members)).
			Str("ring_hash", hex64(st.RingHash)).Msg("members agreed")
	}
	if rd.Reached && n.cfg.MinPeers > 1 { // a lone peer reached 1 in initState
		n.log.Info().Int("min_peers", n.cfg.MinPeers).Int("members", len(st.View.Members)).Msg("min peers reached")
		close(n.reachedCh)
	}
	if rd.Changed {
		n.protectMembers(st.View.Members, members)
	}
	if changed {
		ev := Event{
			State: st, Time: time.Now(),
			Joined: slices.Clone(rd.Joined), Left: slices.Clone(rd.Left),
			Died: slices.Clone(rd.Died), Restarted: slices.Clone(rd.Restarted),
		}
		n.mu.RLock()
		for s := range n.subs {
			s.push(ev)
		}
		n.mu.RUnlock()
	}
}

// protectMembers keeps the connection manager from trimming connections to
// members and tells the dialer who to keep connected.
func (n *Node) protectMembers(ids []string, members map[peer.ID]bool) {
	now := map[peer.ID]bool{}
	for _, s := range ids {
		if id, err := peer.Decode(s); err == nil && id != n.self {
			now[id] = true
		}
	}
	cm := n.host.ConnManager()
	for id := range now {
		if !members[id] {
			cm.Protect(id, memberTag)
		}
	}
	for id := range members {
		if !now[id] {
			cm.Unprotect(id, memberTag)
		}
	}
	clear(members)
	for id := range now {
		members[id] = true
	}
	n.dialer.setMembers(now)
}

// maxDialAddrs caps the addresses of one member the dialer tries: a beat
// may carry 16 (membership's MaxAddrs), and every member dials them all
// and redials them while the sender is a member, so a hostile member
// could aim the cluster's dials at 16 addresses of its choosing. Up to
// maxRelayedAddrs of them are relay circuits (a peer behind NAT lists its
// direct addresses first, and they may all be unreachable).
const (
	maxDialAddrs    = 8
	maxRelayedAddrs = 2
)

// dialAnnounced hands the dialer the addresses from's beat announced,
// when from is a member of the view (members), keeping only those
// dialableAddrs allows. Addresses another peer announced on someone
// else's behalf are never dialled (TestForgedBeatAddressesNotDialled).
func (n *Node) dialAnnounced(from string, addrs, members []string) {
	id, err := peer.Decode(from)
	if err != nil || id == n.self || !slices.Contains(members, from) {
		return
	}
	n.mu.RLock()
	loopbackOK := len(n.beatAddrs) > 0 && !slices.ContainsFunc(n.beatAddrs, func(a string) bool { return !isLoopbackAddr(a) })
	n.mu.RUnlock()
	ok, refused := dialableAddrs(id, addrs, loopbackOK)
	if len(refused) > 0 {
		n.log.Debug().Str("peer", from).Strs("refused", refused).Int("dialled", len(ok)).Msg("addresses a member announced that are not dialled")
	}
	n.dialer.announce(id, ok)
}

// dialableAddrs picks, from the addresses a beat of id announced, those
// the dialer may try, and says why it refused the others:
//
//   - an address must end in /p2p/<id>: a peer announces its own
//     addresses, never another's (that would aim the cluster's dials, and
//     a peer's identity, at an address of the sender's choosing);
//   - it must start with an IP address: a /dns name would make every
//     member resolve and dial a name the sender picked, and an honest
//     peer announces its listen IPs only (fullAddrs);
//   - not 0.0.0.0 or ::, multicast, broadcast or link-local (169.254/16
//     holds cloud metadata services; fe80::/10 cannot be dialled without
//     a zone); loopback only when loopbackOK (this peer's own addresses
//     are loopback: a cluster on one machine; otherwise a loopback address
//     would reach a service of this machine, not the sender);
//   - at most maxDialAddrs, maxRelayedAddrs of them relay circuits,
//     direct ones first, each once.
//
// The address family is not checked against this peer's listen
// addresses: dialling out over IPv6 works from a peer that listens on
// IPv4 only, and a dial that fails costs one attempt.
func dialableAddrs(id peer.ID, addrs []string, loopbackOK bool) (ok []ma.Multiaddr, refused []string) {
	var direct, relayed []ma.Multiaddr
	for _, s := range addrs {
		why := ""
		ai, err := ParsePeerAddr(s)
		switch {
		case err != nil:
			why = "not a peer address"
		case ai.ID != id:
			why = "another peer's"
		default:
			why = notDialable(ai.Addrs[0], loopbackOK)
		}
		if why != "" {
			refused = append(refused, fmt.Sprintf("%.120s: %s", s, why))
			continue
		}
		a := ai.Addrs[0]
		l := &direct
		if _, err := a.ValueForProtocol(ma.P_CIRCUIT); err == nil {
			l = &relayed
		}
		if !containsAddr(*l, a.String()) {
			*l = append(*l, a)
		}
	}
	found := len(direct) + len(relayed)
	relayed = relayed[:min(len(relayed), maxRelayedAddrs)]
	direct = direct[:min(len(direct), maxDialAddrs-len(relayed))]
	if n := len(direct) + len(relayed); n < found {
		refused = append(refused, fmt.Sprintf("%d more: at most %d addresses of one member are dialled, %d of them relayed", found-n, maxDialAddrs, maxRelayedAddrs))
	}
	return append(direct, relayed...), refused
}

// notDialable says why a (transport) address announced in a beat is not
// dialled, or "".
func notDialable(a ma.Multiaddr, loopbackOK bool) string {
	if len(a) == 0 {
		return "empty"
	}
	c := a[0]
	if p := c.Protocol().Code; p != ma.P_IP4 && p != ma.P_IP6 {
		return "not an IP address (/" + c.Protocol().Name + ")"
	}
	ip, err := netip.ParseAddr(c.Value())
	if err != nil {
		return "not an IP address"
	}
	ip = ip.Unmap()
	switch {
	case ip.IsUnspecified():
		return "unspecified address"
	case ip.IsMulticast():
		return "multicast address"
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast address"
	case ip.IsLinkLocalUnicast():
		return "link-local address"
	case ip.IsLoopback() && !loopbackOK:
		return "loopback address (this peer is not on loopback only)"
	}
	return ""
}

// hex64 formats a hash as 16 hex digits with a 0x prefix.
func hex64(x uint64) string { return fmt.Sprintf("0x%016x", x) }
