package ring

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// point is one virtual node: a position on the ring and the member (index
// into Ring.members) that put it there.
type point struct {
	pos    uint64
	member int32
	vnode  int32
}

// Ring maps shards to owners. It is immutable once built and safe for
// concurrent use; slices it returns are either fresh copies or documented as
// read-only.
type Ring struct {
	cfg     Config
	members []string // sorted, distinct
	k       int      // owners per shard: min(Replicas, len(members))
	owners  []string // owners of shard s at [s*k, (s+1)*k), primary first
	primary []string // owners[s*k] for every s
}

// New builds the ring of a member set. The result depends only on cfg and
// the set: duplicates are removed and order does not matter. It fails with
// ErrConfig, ErrNoMembers or ErrBadMember.
func New(cfg Config, members []string) (*Ring, error) {
	if cfg.Hash == nil {
		cfg.Hash = xxhash.Sum64
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	set := slices.Clone(members)
	slices.Sort(set)
	set = slices.Compact(set)
	if len(set) == 0 {
		return nil, ErrNoMembers
	}
	if set[0] == "" {
		return nil, fmt.Errorf("%w: empty ID in member list", ErrBadMember)
	}
	r := &Ring{cfg: cfg, members: set, k: min(cfg.Replicas, len(set))}
	pts := r.points()
	start := shardStarts(cfg, pts)
	var idx []int32
	if cfg.MaxLoadPercent == 0 {
		idx = plainOwners(pts, start, len(set), r.k)
	} else {
		idx = boundedOwners(cfg, pts, start, len(set), r.k)
	}
	r.owners = make([]string, len(idx))
	for i, m := range idx {
		r.owners[i] = set[m]
	}
	r.primary = make([]string, cfg.Shards)
	for s := range r.primary {
		r.primary[s] = r.owners[s*r.k]
	}
	return r, nil
}

// points places VNodes points per member, sorted by position. Member m's
// point i sits at Hash(m + "#" + decimal(i)), for example "peerA#0" ..
// "peerA#63". Equal positions are ordered by member ID, then by i, so every
// peer sorts them the same way.
func (r *Ring) points() []point {
	v := r.cfg.VNodes
	pts := make([]point, 0, len(r.members)*v)
	var buf []byte
	for mi, m := range r.members {
		for i := range v {
			buf = pointKey(buf[:0], m, i)
			pts = append(pts, point{pos: r.cfg.Hash(buf), member: int32(mi), vnode: int32(i)})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.pos, b.pos); c != 0 {
			return c
		}
		if c := cmp.Compare(a.member, b.member); c != 0 {
			return c // members are sorted, so this is ID order
		}
		return cmp.Compare(a.vnode, b.vnode)
	})
	return pts
}

// pointKey appends the byte string whose hash places point i of member m:
// m + "#" + decimal(i), for example "peerA#63".
func pointKey(buf []byte, m string, i int) []byte {
	return strconv.AppendInt(append(append(buf, m...), '#'), int64(i), 10)
}

// shardKey appends the byte string whose hash places shard s on the ring:
// "shard#" + decimal(s), for example "shard#17".
func shardKey(buf []byte, s int) []byte {
	return strconv.AppendInt(append(buf, "shard#"...), int64(s), 10)
}

// shardStarts returns, for every shard, the index of the first point at or
// after the shard's position (clockwise), wrapping to 0 past the end.
func shardStarts(cfg Config, pts []point) []int {
	start := make([]int, cfg.Shards)
	var buf []byte
	for s := range start {
		buf = shardKey(buf[:0], s)
		h := cfg.Hash(buf)
		j := sort.Search(len(pts), func(i int) bool { return pts[i].pos >= h })
		if j == len(pts) {
			j = 0
		}
		start[s] = j
	}
	return start
}

// capacities gives every member a capacity: the most shards it may hold as
// primary. The total is T = max(S, ceil(S*pct/100)); each of the n live
// members gets T/n, and the T%n live members whose point 0 comes first on the
// ring get one more. So no member exceeds ceil(T/n), and when n changes by
// one only a few capacities change (the ranks by point 0 stay put), which
// keeps the shards that move between remaining members few. Integer
// arithmetic: every machine agrees. rank0 lists member indices by position
// of their point 0.
func capacities(shards, pct int, rank0 []int32, excluded []bool, live int, out []int32) {
	total := max(shards, (shards*pct+99)/100)
	base, extra := int32(total/live), total%live
	for _, m := range rank0 {
		if excluded[m] {
			continue
		}
		out[m] = base
		if extra > 0 {
			out[m]++
			extra--
		}
	}
}

// assign places every shard, in shard order, on the first member clockwise
// from it that is not excluded and holds fewer shards than its capacity
// (Mirrokni, Thorup, Zadimoghaddam, "Consistent Hashing with Bounded Loads",
// SODA 2018). It returns the primary member index per shard.
func assign(cfg Config, pts []point, start []int, rank0 []int32, excluded []bool, live int) []int32 {
	room := make([]int32, len(excluded))
	capacities(cfg.Shards, cfg.MaxLoadPercent, rank0, excluded, live, room)
	out := make([]int32, cfg.Shards)
	for s, j := range start {
		// The capacities of live members add up to at least Shards, so
		// some member always has room: the walk ends within one turn.
		for {
			m := pts[j].member
			if !excluded[m] && room[m] > 0 {
				room[m]--
				out[s] = m
				break
			}
			if j++; j == len(pts) {
				j = 0
			}
		}
	}
	return out
}

// rank0 lists member indices ordered by the position of their point 0 (ties
// by ID, as on the ring).
func rank0(pts []point, n int) []int32 {
	out := make([]int32, 0, n)
	for _, p := range pts {
		if p.vnode == 0 {
			out = append(out, p.member)
		}
	}
	return out
}

// boundedOwners computes the owner indices of every shard under the load bound.
// The primary comes from assign over all members. Owner number j (j >= 1) is
// the primary the shard would get if owners 0..j-1 all left: assign over the
// members minus those j. So when a primary leaves, its secondary becomes the
// primary, exactly. Assignments for the same excluded set are shared.
func boundedOwners(cfg Config, pts []point, start []int, n, k int) []int32 {
	idx := make([]int32, cfg.Shards*k)
	excluded := make([]bool, n)
	r0 := rank0(pts, n)
	prim := assign(cfg, pts, start, r0, excluded, n)
	for s, m := range prim {
		idx[s*k] = m
	}
	memo := map[string][]int32{}
	var key []byte
	set := make([]int32, 0, k)
	for j := 1; j < k; j++ {
		for s := range cfg.Shards {
			set = append(set[:0], idx[s*k:s*k+j]...)
			slices.Sort(set)
			key = key[:0]
			for _, m := range set {
				key = binary.LittleEndian.AppendUint32(key, uint32(m))
			}
			a, ok := memo[string(key)]
			if !ok {
				clear(excluded)
				for _, m := range set {
					excluded[m] = true
				}
				a = assign(cfg, pts, start, r0, excluded, n-len(set))
				memo[string(key)] = a
			}
			idx[s*k+j] = a[s]
		}
	}
	return idx
}

// plainOwners returns owner indices: it walks clockwise from each shard and takes the first k distinct
// members: classic consistent hashing.
func plainOwners(pts []point, start []int, n, k int) []int32 {
	idx := make([]int32, len(start)*k)
	seen := make([]bool, n)
	for s, j := range start {
		got := idx[s*k : s*k : (s+1)*k]
		for len(got) < k {
			m := pts[j].member
			if !seen[m] {
				seen[m] = true
				got = append(got, m)
			}
			if j++; j == len(pts) {
				j = 0
			}
		}
		for _, m := range got {
			seen[m] = false
		}
	}
	return idx
}

// Config returns the configuration the ring was built with (Hash filled in).
func (r *Ring) Config() Config { return r.cfg }

// Shards returns the number of shards S.
func (r *Ring) Shards() int { return r.cfg.Shards }

// Owners returns the min(Replicas, len(Members())) distinct owners of shard,
// primary first. The slice aliases the ring's storage: read it, never write
// it. It panics if shard is outside 0..Shards()-1.
func (r *Ring) Owners(shard int) []string {
	return r.owners[shard*r.k : (shard+1)*r.k : (shard+1)*r.k]
}

// Primary returns the member that applies updates to shard. It panics if
// shard is outside 0..Shards()-1.
func (r *Ring) Primary(shard int) string { return r.primary[shard] }

// Owned returns, ascending, the shards whose primary is member (none if it
// is not a member).
func (r *Ring) Owned(member string) []int {
	var out []int
	for s, p := range r.primary {
		if p == member {
			out = append(out, s)
		}
	}
	return out
}

// Replicated returns, ascending, the shards member owns as primary or
// standby.
func (r *Ring) Replicated(member string) []int {
	var out []int
	for s := range r.cfg.Shards {
		if slices.Contains(r.Owners(s), member) {
			out = append(out, s)
		}
	}
	return out
}

// Members returns a sorted copy of the member set.
func (r *Ring) Members() []string { return slices.Clone(r.members) }

// Assignment returns a copy of the primary of every shard, indexed by shard:
// two rings assign alike exactly when these slices are equal.
func (r *Ring) Assignment() []string { return slices.Clone(r.primary) }

// Moved returns, ascending, the shards whose primary differs between a and
// b. A nil ring has no primaries, so Moved(nil, b) lists every shard of b.
// Rings with different shard counts cannot be compared shard by shard: every
// shard of the larger one is reported.
func Moved(a, b *Ring) []int {
	var pa, pb []string
	if a != nil {
		pa = a.primary
	}
	if b != nil {
		pb = b.primary
	}
	n := max(len(pa), len(pb))
	var out []int
	for s := range n {
		if len(pa) != len(pb) || pa[s] != pb[s] {
			out = append(out, s)
		}
	}
	return out
}

// Master returns the master topology: every shard has master as its primary
// and only owner, whatever cfg.Replicas says. It is New(cfg, {master}) and
// panics if cfg is invalid or master is empty, since callers control both.
func Master(cfg Config, master string) *Ring {
	r, err := New(cfg, []string{master})
	if err != nil {
		panic(fmt.Sprintf("ring.Master(%q): %v", master, err))
	}
	return r
}
