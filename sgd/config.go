package sgd

import (
	"fmt"
	"slices"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/node/ring"
)

// tconfig is one training configuration: which peers are workers from
// round start on, and the ring of owners that goes with them
// (docs/protocol.md, "Membership changes"). Configurations are numbered;
// every peer learns them from the coordinator, through any owner's params
// messages, and keeps them in ID order.
type tconfig struct {
	id         uint64
	start      uint64
	checkpoint uint64
	members    []string // workers, sorted
	crashed    []string // members of the previous configuration removed as dead
	ring       *ring.Ring

	owners     []string       // members owning some shard (primary or replica), sorted
	ownerIdx   map[string]int // index into owners
	shardOwner [][]int        // per shard: indices into owners, primary first
	primaryOf  []string       // per shard: its primary
	prims      []string       // owners that are primary of some shard, sorted
}

// newTConfig builds the configuration c with ring r over shards shards.
func newTConfig(c wire.TrainConfig, r *ring.Ring, shards int) (*tconfig, error) {
	if r.Shards() != shards {
		return nil, fmt.Errorf("%w: ring of %d shards for a model of %d", ErrConfig, r.Shards(), shards)
	}
	t := &tconfig{
		id: c.ID, start: c.Start, checkpoint: c.Checkpoint,
		members: slices.Clone(c.Members), crashed: slices.Clone(c.Crashed), ring: r,
		ownerIdx: map[string]int{}, shardOwner: make([][]int, shards), primaryOf: make([]string, shards),
	}
	for _, m := range r.Members() {
		if !slices.Contains(t.members, m) {
			return nil, fmt.Errorf("%w: ring member %s is not a worker of configuration %d", ErrConfig, short(m), c.ID)
		}
		if len(r.Replicated(m)) > 0 {
			t.ownerIdx[m] = len(t.owners)
			t.owners = append(t.owners, m)
		}
	}
	for s := range t.shardOwner {
		for _, o := range r.Owners(s) {
			t.shardOwner[s] = append(t.shardOwner[s], t.ownerIdx[o])
		}
		t.primaryOf[s] = r.Primary(s)
	}
	for _, o := range t.owners {
		if len(r.Owned(o)) > 0 {
			t.prims = append(t.prims, o)
		}
	}
	return t, nil
}

// wire returns the configuration as it travels.
func (t *tconfig) wire() wire.TrainConfig {
	return wire.TrainConfig{ID: t.id, Start: t.start, Checkpoint: t.checkpoint, Members: t.members, Crashed: t.crashed}
}

// isMember reports whether p is a worker of t.
func (t *tconfig) isMember(p string) bool {
	_, ok := slices.BinarySearch(t.members, p)
	return ok
}

// owns reports whether p owns shard s in t (any role).
func (t *tconfig) owns(p string, s int) bool {
	i, ok := t.ownerIdx[p]
	return ok && slices.Contains(t.shardOwner[s], i)
}

// primaries returns the members that are primary of some shard, sorted
// (computed once: the coordinator is asked for at every poll).
func (t *tconfig) primaries() []string { return t.prims }

// configs is the sequence of configurations a peer knows, in ID order.
type configs struct {
	list    []*tconfig
	crashed map[string]bool // every peer any configuration removed as dead
}

// cur is the newest configuration.
func (cs *configs) cur() *tconfig {
	if len(cs.list) == 0 {
		return nil
	}
	return cs.list[len(cs.list)-1]
}

// at returns the configuration that governs round r: the newest with
// start <= r (the oldest known one if none).
func (cs *configs) at(r uint64) *tconfig {
	for i := len(cs.list) - 1; i > 0; i-- {
		if cs.list[i].start <= r {
			return cs.list[i]
		}
	}
	return cs.list[0]
}

// byID returns the configuration with id, or nil.
func (cs *configs) byID(id uint64) *tconfig {
	for _, c := range cs.list {
		if c.id == id {
			return c
		}
	}
	return nil
}

// add appends c if it is newer than every known configuration; it reports
// whether it did.
func (cs *configs) add(c *tconfig) bool {
	if cur := cs.cur(); cur != nil && c.id <= cur.id {
		return false
	}
	cs.list = append(cs.list, c)
	if cs.crashed == nil {
		cs.crashed = map[string]bool{}
	}
	for _, p := range c.crashed {
		cs.crashed[p] = true
	}
	for _, p := range c.members {
		delete(cs.crashed, p) // removed as crashed once, back since (it rejoined)
	}
	// Rounds of configurations older than the one before the current are
	// long finished; forget them.
	if len(cs.list) > 8 {
		cs.list = slices.Delete(cs.list, 0, len(cs.list)-8)
	}
	return true
}

// primaryFor is the peer responsible for publishing shard s's values of
// round r: the primary of the configuration of round r, unless that peer
// has since been removed as crashed, in which case the primary of the
// newest configuration (which promoted the shard).
func (cs *configs) primaryFor(r uint64, s int) string {
	p := cs.at(r).primaryOf[s]
	if cs.crashed[p] && !cs.cur().isMember(p) {
		return cs.cur().primaryOf[s]
	}
	return p
}
