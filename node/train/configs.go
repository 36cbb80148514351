package train

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// tconf is one training configuration: the workers from round Start on,
// and the placement of shards over them. Configurations are numbered 1, 2,
// …; they are the replicated state of the raft group, so every peer learns
// the same ones in the same order.
type tconf struct {
	ID    uint64
	Start uint64
	// Members are the workers (sorted by peer ID); each is also a holder of
	// the shards the placement gives it.
	Members []Member
	// Crashed and Left are the members of the previous configuration this
	// one removed, as dead or at their request.
	Crashed []Member
	Left    []Member
	// Checkpoint: every holder writes its shards as of the end of round
	// Start-1, every worker its data position at round Start.
	Checkpoint bool
	// Final (ssp/async): every member was done and every contribution
	// applied under the configuration before, as each holder told the
	// leader: the values are final. Only crashes change the run after it
	// (their configurations stay final).
	Final bool

	place   Placement
	index   map[string]int // peer -> index in Members
	owners  [][]string     // per shard, primary first
	holders map[string][]int
}

// errEntry reports an entry this version cannot read.
var errEntry = errors.New("train: bad configuration entry")

// entry kinds (the first byte of a raft entry's data). Protocol: append only.
const entryConfig = 1

// encode appends the configuration as a raft entry.
func (t *tconf) encode(dst []byte) []byte {
	dst = append(dst, entryConfig)
	dst = binary.AppendUvarint(dst, t.ID)
	dst = binary.AppendUvarint(dst, t.Start)
	var flags uint64
	if t.Checkpoint {
		flags |= 1
	}
	if t.Final {
		flags |= 2
	}
	dst = binary.AppendUvarint(dst, flags)
	for _, l := range [][]Member{t.Members, t.Crashed, t.Left} {
		dst = binary.AppendUvarint(dst, uint64(len(l)))
		for _, m := range l {
			dst = binary.AppendUvarint(dst, uint64(len(m.Peer)))
			dst = append(dst, m.Peer...)
			dst = binary.AppendUvarint(dst, m.ID)
			dst = binary.AppendUvarint(dst, m.Since)
		}
	}
	return dst
}

// decodeConf reads an entry written by encode.
func decodeConf(b []byte) (*tconf, error) {
	if len(b) == 0 || b[0] != entryConfig {
		return nil, fmt.Errorf("%w: kind %v", errEntry, b[:min(1, len(b))])
	}
	b = b[1:]
	var err error
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			err = fmt.Errorf("%w: truncated", errEntry)
			return 0
		}
		b = b[n:]
		return v
	}
	t := &tconf{}
	t.ID, t.Start = uv(), uv()
	flags := uv()
	t.Checkpoint, t.Final = flags&1 != 0, flags&2 != 0
	for _, l := range []*[]Member{&t.Members, &t.Crashed, &t.Left} {
		n := uv()
		if err != nil || n > 1<<16 {
			return nil, fmt.Errorf("%w: list of %d", errEntry, n)
		}
		for range n {
			sl := uv()
			if err != nil || sl > uint64(len(b)) {
				return nil, fmt.Errorf("%w: peer ID", errEntry)
			}
			m := Member{Peer: string(b[:sl])}
			b = b[sl:]
			m.ID, m.Since = uv(), uv()
			*l = append(*l, m)
		}
	}
	if err != nil || len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes left", errEntry, len(b))
	}
	return t, nil
}

// build derives the placement and lookups of t.
func (t *tconf) build(place PlaceFunc, shards int) error {
	peers := make([]string, len(t.Members))
	t.index = make(map[string]int, len(t.Members))
	for i, m := range t.Members {
		if i > 0 && m.Peer <= t.Members[i-1].Peer {
			return fmt.Errorf("%w: configuration %d: members not sorted", errEntry, t.ID)
		}
		peers[i] = m.Peer
		t.index[m.Peer] = i
	}
	if len(peers) == 0 {
		return fmt.Errorf("%w: configuration %d has no members", errEntry, t.ID)
	}
	p, err := place(peers)
	if err != nil {
		return fmt.Errorf("configuration %d: %w", t.ID, err)
	}
	t.place = p
	t.owners = make([][]string, shards)
	t.holders = map[string][]int{}
	for s := range t.owners {
		os := p.Owners(s)
		if len(os) == 0 {
			return fmt.Errorf("%w: configuration %d: shard %d has no owner", errEntry, t.ID, s)
		}
		for _, o := range os {
			if _, ok := t.index[o]; !ok {
				return fmt.Errorf("%w: configuration %d: shard %d owner %s is not a member", errEntry, t.ID, s, o)
			}
			t.holders[o] = append(t.holders[o], s)
		}
		t.owners[s] = os
	}
	return nil
}

// member returns p's member record in t.
func (t *tconf) member(p string) (Member, bool) {
	i, ok := t.index[p]
	if !ok {
		return Member{}, false
	}
	return t.Members[i], true
}

// isMember reports whether member id is a worker of t.
func (t *tconf) isMember(p string, id uint64) bool {
	m, ok := t.member(p)
	return ok && m.ID == id
}

// primary is shard s's primary in t.
func (t *tconf) primary(s int) string { return t.owners[s][0] }

// holds reports whether p holds shard s in t (any role).
func (t *tconf) holds(p string, s int) bool { return slices.Contains(t.owners[s], p) }

// peers returns the members' peer IDs.
func (t *tconf) peers() []string {
	out := make([]string, len(t.Members))
	for i, m := range t.Members {
		out[i] = m.Peer
	}
	return out
}

// configs is the sequence of configurations this peer has applied, in ID
// order, and what they imply.
type configs struct {
	list []*tconf
	// removedIn[id] is the configuration that removed member id (crashed
	// or left), so rounds routed to it can be rerouted.
	removedIn map[uint64]*tconf
	crashed   map[uint64]bool
}

// cur is the newest configuration (nil before the first).
func (cs *configs) cur() *tconf {
	if len(cs.list) == 0 {
		return nil
	}
	return cs.list[len(cs.list)-1]
}

// at returns the configuration of round r: the newest with Start <= r (the
// first if none).
func (cs *configs) at(r uint64) *tconf {
	for i := len(cs.list) - 1; i > 0; i-- {
		if cs.list[i].Start <= r {
			return cs.list[i]
		}
	}
	return cs.list[0]
}

// byID returns configuration id, or nil.
func (cs *configs) byID(id uint64) *tconf {
	for _, t := range cs.list {
		if t.ID == id {
			return t
		}
	}
	return nil
}

// add appends t, which must be the next ID.
func (cs *configs) add(t *tconf) {
	cs.list = append(cs.list, t)
	if cs.removedIn == nil {
		cs.removedIn = map[uint64]*tconf{}
		cs.crashed = map[uint64]bool{}
	}
	for _, m := range t.Crashed {
		cs.removedIn[m.ID] = t
		cs.crashed[m.ID] = true
	}
	for _, m := range t.Left {
		cs.removedIn[m.ID] = t
	}
}

// route returns the peer that applies shard s's round r in sync mode: its
// primary in the configuration of round r, or, when that member has since
// crashed, the primary the configuration that removed it promoted (and so
// on, should that one have crashed too).
func (cs *configs) route(s int, r uint64) string {
	p, _ := cs.routeConf(s, r)
	return p
}

// routeConf is route, with the configuration that names the peer (its
// member there is the one that applies the round).
func (cs *configs) routeConf(s int, r uint64) (string, *tconf) {
	t := cs.at(r)
	for range len(cs.list) {
		p := t.primary(s)
		m, _ := t.member(p)
		if !cs.crashed[m.ID] {
			return p, t
		}
		next := cs.removedIn[m.ID]
		if next == nil || next.ID <= t.ID {
			return p, t
		}
		t = next
	}
	return t.primary(s), t
}

// ConfigEntry is the raft entry data of a configuration (ID, first round,
// workers) as the agreement writes it: for tests that forge one (a hostile
// peer must not get it applied).
func ConfigEntry(id, start uint64, members []Member) []byte {
	return (&tconf{ID: id, Start: start, Members: members}).encode(nil)
}
