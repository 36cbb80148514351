package gossiptest

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// CoreMessage returns a valid core message with every field of its op
// set from r: op i%12+1, Req = Round = i (so a receiver can check order),
// up to rows rows of width 1..3 (all lossless F32 values), wanted rows,
// values, shards, clocks, text and a blob. It passes wire.DefaultLimits'
// Check when rows <= MaxRows.
func CoreMessage(r *rand.Rand, i uint64, rows int) *wire.Core {
	m := &wire.Core{Op: wire.CoreOp(1 + i%12), Flags: wire.CoreFlags(r.IntN(1 << 9)), Member: r.Uint64() >> 1,
		Config: r.Uint64N(100), Round: i, Through: r.Uint64(), Req: i, Examples: r.Uint64N(10000)}
	for s := range 64 {
		if r.IntN(4) == 0 {
			m.Shards = append(m.Shards, uint32(s))
		}
	}
	id := uint64(0)
	for range r.IntN(5) {
		id += 1 + r.Uint64N(1<<40)
		m.Clocks = append(m.Clocks, wire.MemberClock{Member: id, Clock: r.Uint64()})
	}
	if r.IntN(2) == 0 {
		m.Text = "peer-" + string(rune('a'+r.IntN(26)))
	}
	if n := r.IntN(3) * r.IntN(60); n > 0 {
		m.Blob = make([]byte, n)
		for j := range m.Blob {
			m.Blob[j] = byte(r.Uint32())
		}
	}
	width := 1 + r.IntN(3)
	k := uint32(0)
	for range r.IntN(rows + 1) {
		k += 1 + uint32(r.IntN(3000))
		m.Rows.Idx = append(m.Rows.Idx, k)
		for range width {
			m.Rows.Val = append(m.Rows.Val, float32(r.NormFloat64()))
		}
	}
	if m.Rows.Len() > 0 {
		m.RowWidth = width
	}
	k = 0
	for range r.IntN(rows/2 + 1) {
		k += 1 + uint32(r.IntN(3000))
		m.Want = append(m.Want, k)
	}
	for range r.IntN(rows/2 + 1) {
		m.Values = append(m.Values, float32(r.NormFloat64()))
	}
	return m
}

// StateMessage returns a shard's state transfer (CoreState) of n rows of
// width values each: the largest message the training core sends.
func StateMessage(r *rand.Rand, n, width int) *wire.Core {
	m := &wire.Core{Op: wire.CoreState, Shards: []uint32{3}, Round: 7, Req: 1, RowWidth: width,
		Clocks: []wire.MemberClock{{Member: 1, Clock: 7}, {Member: 2, Clock: 6}}}
	m.Rows.Idx = make([]uint32, n)
	m.Rows.Val = make([]float32, n*width)
	for i := range m.Rows.Idx {
		m.Rows.Idx[i] = uint32(3 + 256*i)
	}
	for i := range m.Rows.Val {
		m.Rows.Val[i] = float32(r.NormFloat64())
	}
	return m
}

// SameCore reports whether two core messages carry the same values, bit
// for bit (empty and nil slices are the same; RowWidth does not matter
// without rows).
func SameCore(a, b *wire.Core) bool {
	norm := func(m *wire.Core) wire.Core {
		x := *m.Clone()
		for _, s := range []*[]uint32{&x.Shards, &x.Want} {
			if len(*s) == 0 {
				*s = nil
			}
		}
		if len(x.Clocks) == 0 {
			x.Clocks = nil
		}
		if len(x.Blob) == 0 {
			x.Blob = nil
		}
		if len(x.Values) == 0 {
			x.Values = nil
		}
		if x.Rows.Len() == 0 {
			x.Rows, x.RowWidth = model.Sparse{}, 0
		}
		return x
	}
	na, nb := norm(a), norm(b)
	// Compare floats by bits: DeepEqual would call two equal-bit NaNs
	// different and -0 equal to 0.
	bitsOf := func(v []float32) []uint32 {
		out := make([]uint32, len(v))
		for i, f := range v {
			out[i] = math.Float32bits(f)
		}
		return out
	}
	if !slices.Equal(bitsOf(na.Rows.Val), bitsOf(nb.Rows.Val)) || !slices.Equal(bitsOf(na.Values), bitsOf(nb.Values)) {
		return false
	}
	na.Rows.Val, nb.Rows.Val, na.Values, nb.Values = nil, nil, nil, nil
	return reflect.DeepEqual(na, nb)
}
