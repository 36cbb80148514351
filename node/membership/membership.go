package membership

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
)

// View is one peer's idea of the member set. A View and its slices are never
// modified after a Membership returns it: keep it as long as you like.
type View struct {
	// Epoch numbers this peer's views: it grows by at least one whenever
	// Members or Incarnations change, and jumps to a higher epoch other
	// members announce for the same set (see the package doc).
	Epoch uint64
	// Members is the member set: sorted peer IDs, self included.
	Members []string
	// Incarnations[i] is the incarnation of Members[i] this peer accepted.
	Incarnations []uint64
	// SetHash is xxhash64 over, for each member in order, uvarint(len(ID)),
	// the ID bytes and the incarnation as 8 bytes big-endian. Two views
	// agree exactly when Epoch and SetHash are equal.
	SetHash uint64
}

// Ready is what one call decided. Its slices (but not View, nor the Beats'
// own slices) are reused by the next call: copy what you keep.
type Ready struct {
	// Send are the beats to publish on the members topic, in order.
	Send []Beat
	// Changed reports that View differs from the previous call's (members,
	// incarnations or epoch).
	Changed bool
	// View is the current view, always filled.
	View View
	// Agreed reports that every other member's latest beat carries exactly
	// View's Epoch and SetHash: the view is settled and ownership may move
	// to the ring of View.Members. It is true for a peer alone.
	Agreed bool
	// Joined are peers that became members in this call (new, back from
	// dead, or back with a newer incarnation after a Leave).
	Joined []string
	// Left are members that announced a graceful Leave.
	Left []string
	// Died are members silent for DeadAfter.
	Died []string
	// Restarted are members that came back with a newer incarnation before
	// they were declared dead: still members, but their process, and the
	// state it held, is new. Treat as a leave followed by a join.
	Restarted []string
	// Rejected are the beats refused, with the reason.
	Rejected []Rejection
	// Reached is true in the one Ready where the member count first reaches
	// Config.MinPeers.
	Reached bool
	// Dial lists addresses, from the Addrs of beats, of members that just
	// joined or changed address; the driver may connect to them directly.
	Dial []string
	// Next is when the driver must call Tick at the latest: the next beat
	// or the next death deadline. Zero after Leave with nobody to watch.
	Next time.Time
}

// Stats counts what a Membership has seen since New.
type Stats struct {
	Received     uint64             // beats passed to Receive
	Accepted     uint64             // beats accepted
	Rejected     [NumReasons]uint64 // beats rejected, indexed by Reason
	Sent         uint64             // beats emitted
	Joins        uint64             // peers that became members
	Leaves       uint64             // members that left gracefully
	Deaths       uint64             // members declared dead
	Restarts     uint64             // members seen with a newer incarnation while alive
	EpochChanges uint64             // views published with a new epoch
}

type peerState uint8

const (
	alive peerState = iota
	dead            // silent for DeadAfter; a newer beat brings it back
	gone            // left; only a newer incarnation brings it back
)

// peer is what we know of another peer from its own beats.
type peer struct {
	state    peerState
	inc, seq uint64    // of the last accepted beat
	heard    time.Time // when the last beat was accepted
	since    time.Time // when it died or left
	epoch    uint64    // announced in its last beat
	setHash  uint64    // announced in its last beat
	addrs    []string
}

// Membership is one peer's membership core: events in, decisions out. It
// does no I/O, reads no clock and starts no goroutine; the caller passes the
// time in. It is not safe for concurrent use: one driver goroutine owns it.
type Membership struct {
	cfg   Config
	inc   uint64
	seq   uint64
	addrs []string

	peers   map[string]*peer
	nAlive  int // peers in state alive (self not included)
	view    View
	maxSeen uint64 // highest epoch in any accepted beat
	dirty   bool   // the member set changed since the view was built

	now      time.Time
	nextBeat time.Time
	lastSent time.Time
	sentAny  bool
	left     bool
	reached  bool
	stats    Stats

	// Scratch reused by every call, handed out in Ready.
	send                             [1]Beat
	nsend                            int
	joined, leftIDs, died, restarted []string
	rejected                         []Rejection
	dial                             []string
	changed                          bool
	digest                           *xxhash.Digest
	hashBuf                          []byte
}

// New starts a peer's membership at time now: alone, at epoch 1. The first
// Tick sends a Join beat.
func New(cfg Config, now time.Time) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Membership{
		cfg:      cfg,
		inc:      cfg.Incarnation,
		addrs:    slices.Clone(cfg.Addrs),
		peers:    map[string]*peer{},
		now:      now,
		nextBeat: now,
		digest:   xxhash.New(),
	}
	if m.inc == 0 {
		m.inc = uint64(now.UnixNano())
	}
	m.dirty = true
	m.rebuild()
	m.stats.EpochChanges = 0 // the first view is not a change
	return m, nil
}

// Incarnation returns this process's incarnation.
func (m *Membership) Incarnation() uint64 { return m.inc }

// View returns the current view.
func (m *Membership) View() View { return m.view }

// Stats returns the counters.
func (m *Membership) Stats() Stats { return m.stats }

// Agreed reports whether every other member's latest beat carries exactly
// the current view (see Ready.Agreed).
func (m *Membership) Agreed() bool {
	for _, id := range m.view.Members {
		if id == m.cfg.Self {
			continue
		}
		p := m.peers[id]
		if p.epoch != m.view.Epoch || p.setHash != m.view.SetHash {
			return false
		}
	}
	return true
}

// SetAddrs replaces the addresses sent in this peer's beats from the next
// beat on. It fails with ErrConfig if they break MaxAddrs or MaxAddrLen.
func (m *Membership) SetAddrs(addrs []string) error {
	if err := m.cfg.checkAddrs(addrs); err != nil {
		return fmt.Errorf("%w: SetAddrs: %v", ErrConfig, err)
	}
	m.addrs = slices.Clone(addrs)
	return nil
}

// Tick lets time pass: it declares members silent for DeadAfter dead,
// forgets peers gone for Forget, and sends a beat when one is due. Call it
// no later than Ready.Next; calling it more often is harmless.
func (m *Membership) Tick(now time.Time) Ready {
	m.begin(now)
	for id, p := range m.peers {
		switch {
		case p.state == alive && m.now.Sub(p.heard) >= m.cfg.DeadAfter:
			p.state, p.since = dead, m.now
			m.nAlive--
			m.died = append(m.died, id)
			m.stats.Deaths++
			m.dirty = true
		case p.state != alive && m.now.Sub(p.since) >= m.cfg.Forget:
			delete(m.peers, id)
		}
	}
	slices.Sort(m.died) // map order is random; Ready is deterministic
	return m.finish()
}

// Receive handles a beat that arrived on the members topic. The transport
// must already have checked that b.From signed it (node/beatsig.go).
func (m *Membership) Receive(b Beat, now time.Time) Ready {
	m.begin(now)
	m.stats.Received++
	if reason, err := m.check(&b); err != nil {
		m.reject(&b, reason, err)
		return m.finish()
	}
	p := m.peers[b.From]
	if p != nil {
		if p.state == gone && b.Incarnation <= p.inc {
			m.reject(&b, ReasonLeft, fmt.Errorf("%w: %s beat from %q incarnation %d seq %d; it left in incarnation %d",
				ErrLeft, b.Kind, b.From, b.Incarnation, b.Seq, p.inc))
			return m.finish()
		}
		if b.Incarnation < p.inc || b.Incarnation == p.inc && b.Seq <= p.seq {
			m.reject(&b, ReasonReplay, fmt.Errorf("%w: %s beat from %q incarnation %d seq %d; last accepted incarnation %d seq %d",
				ErrReplay, b.Kind, b.From, b.Incarnation, b.Seq, p.inc, p.seq))
			return m.finish()
		}
	}
	joining := b.Kind != Leave && (p == nil || p.state != alive)
	if joining && m.nAlive+1 >= m.cfg.MaxMembers {
		m.reject(&b, ReasonFull, fmt.Errorf("%w: %s beat from %q: %d members, limit %d",
			ErrFull, b.Kind, b.From, m.nAlive+1, m.cfg.MaxMembers))
		return m.finish()
	}

	m.stats.Accepted++
	m.maxSeen = max(m.maxSeen, b.Epoch)
	if p == nil {
		if b.Kind == Leave && len(m.peers) >= 2*m.cfg.MaxMembers {
			return m.finish() // a stranger's Leave: nothing to remove, no room to remember it
		}
		p = &peer{state: dead, since: m.now}
		m.peers[b.From] = p
	}
	restart := p.state == alive && b.Incarnation > p.inc
	p.inc, p.seq, p.epoch, p.setHash, p.heard = b.Incarnation, b.Seq, b.Epoch, b.SetHash, m.now

	if b.Kind == Leave {
		if p.state == alive {
			m.nAlive--
			m.leftIDs = append(m.leftIDs, b.From)
			m.stats.Leaves++
			m.dirty = true
		}
		p.state, p.since = gone, m.now
		return m.finish()
	}
	switch {
	case joining:
		p.state = alive
		m.nAlive++
		m.joined = append(m.joined, b.From)
		m.stats.Joins++
		m.dirty = true
	case restart:
		m.restarted = append(m.restarted, b.From)
		m.stats.Restarts++
		m.dirty = true
	}
	if joining || !slices.Equal(p.addrs, b.Addrs) {
		p.addrs = append(p.addrs[:0], b.Addrs...)
		m.dial = append(m.dial, b.Addrs...)
	}
	return m.finish()
}

// Leave announces a graceful departure: it returns a Leave beat to publish
// and stops the periodic beats. Calling it again re-sends the Leave (with a
// new seq), for drivers that want to repeat it over a lossy network. The
// view and Receive keep working, so the driver can finish its handoffs.
func (m *Membership) Leave(now time.Time) Ready {
	m.begin(now)
	m.left = true
	m.emit(Leave)
	return m.finish()
}

// begin resets the per-call scratch and advances the clock (never back).
func (m *Membership) begin(now time.Time) {
	if now.After(m.now) {
		m.now = now
	}
	m.joined, m.leftIDs, m.died, m.restarted = m.joined[:0], m.leftIDs[:0], m.died[:0], m.restarted[:0]
	m.rejected, m.dial = m.rejected[:0], m.dial[:0]
	m.changed = false
	m.nsend = 0
}

func (m *Membership) reject(b *Beat, r Reason, err error) {
	m.stats.Rejected[r]++
	m.rejected = append(m.rejected, Rejection{From: b.From, Kind: b.Kind, Reason: r, Err: err})
}

// finish settles the view and the epoch, sends a beat when one is due and
// assembles the Ready.
func (m *Membership) finish() Ready {
	m.rebuild()
	m.adopt()
	if m.changed && !m.left {
		// Tell the others at once, but keep MinGap between beats.
		soon := m.now
		if m.sentAny {
			soon = later(soon, m.lastSent.Add(m.cfg.MinGap))
		}
		if soon.Before(m.nextBeat) {
			m.nextBeat = soon
		}
	}
	if !m.left && m.nsend == 0 && !m.now.Before(m.nextBeat) {
		kind := Alive
		if !m.sentAny {
			kind = Join
		}
		m.emit(kind)
	}
	rd := Ready{
		Changed:   m.changed,
		View:      m.view,
		Agreed:    m.Agreed(),
		Joined:    nilIfEmpty(m.joined),
		Left:      nilIfEmpty(m.leftIDs),
		Died:      nilIfEmpty(m.died),
		Restarted: nilIfEmpty(m.restarted),
		Dial:      nilIfEmpty(m.dial),
		Next:      m.next(),
	}
	if m.nsend > 0 {
		rd.Send = m.send[:m.nsend]
	}
	if len(m.rejected) > 0 {
		rd.Rejected = m.rejected
	}
	if !m.reached && len(m.view.Members) >= m.cfg.MinPeers {
		m.reached, rd.Reached = true, true
	}
	return rd
}

// emit prepares this call's beat, carrying the current view.
func (m *Membership) emit(kind BeatKind) {
	m.seq++
	m.send[0] = Beat{
		Job:         m.cfg.Job,
		From:        m.cfg.Self,
		Incarnation: m.inc,
		Seq:         m.seq,
		Epoch:       m.view.Epoch,
		SetHash:     m.view.SetHash,
		Members:     m.view.Members,
		Addrs:       m.addrs,
		Kind:        kind,
	}
	m.nsend = 1
	m.sentAny = true
	m.lastSent = m.now
	m.nextBeat = m.now.Add(m.cfg.Heartbeat)
	m.stats.Sent++
}

// rebuild publishes a new view if the member set changed. Its epoch is the
// highest epoch a live member announces for exactly this set, if that is
// above ours; otherwise one more than any epoch seen so far.
func (m *Membership) rebuild() {
	if !m.dirty {
		return
	}
	m.dirty = false
	type member struct {
		id  string
		inc uint64
	}
	ms := make([]member, 0, m.nAlive+1)
	ms = append(ms, member{m.cfg.Self, m.inc})
	for id, p := range m.peers {
		if p.state == alive {
			ms = append(ms, member{id, p.inc})
		}
	}
	slices.SortFunc(ms, func(a, b member) int { return cmp.Compare(a.id, b.id) })
	v := View{Members: make([]string, len(ms)), Incarnations: make([]uint64, len(ms))}
	m.digest.Reset()
	for i, x := range ms {
		v.Members[i], v.Incarnations[i] = x.id, x.inc
		m.hashBuf = binary.AppendUvarint(m.hashBuf[:0], uint64(len(x.id)))
		m.hashBuf = append(m.hashBuf, x.id...)
		m.hashBuf = binary.BigEndian.AppendUint64(m.hashBuf, x.inc)
		m.digest.Write(m.hashBuf)
	}
	v.SetHash = m.digest.Sum64()
	if v.SetHash == m.view.SetHash && m.view.Epoch != 0 {
		return // same set again (cannot happen within one call; cheap guard)
	}
	if c := m.candidate(v.SetHash); c > m.view.Epoch {
		v.Epoch = c
	} else {
		v.Epoch = max(m.view.Epoch, m.maxSeen) + 1
	}
	m.view = v
	m.changed = true
	m.stats.EpochChanges++
}

// adopt moves to a higher epoch that a live member announces for our exact
// set.
func (m *Membership) adopt() {
	if c := m.candidate(m.view.SetHash); c > m.view.Epoch {
		v := m.view
		v.Epoch = c
		m.view = v
		m.changed = true
		m.stats.EpochChanges++
	}
}

// candidate returns the highest epoch that a live member's latest beat
// announces together with setHash, or 0.
func (m *Membership) candidate(setHash uint64) uint64 {
	var best uint64
	for _, p := range m.peers {
		if p.state == alive && p.setHash == setHash {
			best = max(best, p.epoch)
		}
	}
	return best
}

// next is the latest time Tick must run: the next beat, or the earliest
// moment a live member would be declared dead.
func (m *Membership) next() time.Time {
	var t time.Time
	if !m.left {
		t = m.nextBeat
	}
	for _, p := range m.peers {
		if p.state == alive {
			d := p.heard.Add(m.cfg.DeadAfter)
			if t.IsZero() || d.Before(t) {
				t = d
			}
		}
	}
	return t
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
