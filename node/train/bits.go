package train

import "math/bits"

// shardSet is a set of shard numbers as a bitmap.
type shardSet []uint64

func newShardSet(shards int) shardSet { return make(shardSet, (shards+63)/64) }

func (b shardSet) add(s int)           { b[s>>6] |= 1 << (s & 63) }
func (b shardSet) del(s int)           { b[s>>6] &^= 1 << (s & 63) }
func (b shardSet) has(s int) bool      { return b[s>>6]&(1<<(s&63)) != 0 }
func (b shardSet) clear()              { clear(b) }
func (b shardSet) copyFrom(o shardSet) { copy(b, o) }

func (b shardSet) empty() bool {
	for _, w := range b {
		if w != 0 {
			return false
		}
	}
	return true
}

func (b shardSet) count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// and sets b to b ∩ o.
func (b shardSet) and(o shardSet) {
	for i := range b {
		b[i] &= o[i]
	}
}

// andNot sets b to b \ o.
func (b shardSet) andNot(o shardSet) {
	for i := range b {
		b[i] &^= o[i]
	}
}

// union returns a new set b ∪ o; b may be nil (no set).
func union(b, o shardSet) shardSet {
	x := make(shardSet, len(o))
	copy(x, o)
	if b != nil {
		x.or(b)
	}
	return x
}

// or sets b to b ∪ o.
func (b shardSet) or(o shardSet) {
	for i := range b {
		b[i] |= o[i]
	}
}

// subset reports whether b ⊆ o.
func (b shardSet) subset(o shardSet) bool {
	for i := range b {
		if b[i]&^o[i] != 0 {
			return false
		}
	}
	return true
}

func (b shardSet) equal(o shardSet) bool {
	for i := range b {
		if b[i] != o[i] {
			return false
		}
	}
	return true
}

// list appends the members of b in ascending order to dst.
func (b shardSet) list(dst []uint32) []uint32 {
	b.each(func(s int) { dst = append(dst, uint32(s)) })
	return dst
}

// each calls f with the members of b in ascending order, without
// allocating. f may remove the member it is given, not others.
func (b shardSet) each(f func(s int)) {
	for i, w := range b {
		for w != 0 {
			f(i*64 + bits.TrailingZeros64(w))
			w &= w - 1
		}
	}
}

// fromList sets b to the shards in l (those below its size).
func (b shardSet) fromList(l []uint32) {
	clear(b)
	for _, s := range l {
		if int(s) < len(b)*64 {
			b.add(int(s))
		}
	}
}
