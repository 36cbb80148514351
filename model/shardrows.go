package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
)

// Shards travel between peers as wide sparse rows (a handoff, a promoted
// replica's copy, a full copy for a joiner): only the rows that are not
// zero, each with its Width weights followed by its optimizer state
// (Width·StatePerWeight floats, in the order State keeps them). A CTR
// model of 2^29 rows whose shard holds a few thousand touched rows moves a
// few thousand rows, not 2^21.

// StateWidth is the width of a shard's wide rows: the weights and, with
// state, their optimizer state.
func (m *Model) StateWidth(withState bool) int {
	if !withState {
		return m.Layout.Width
	}
	return m.Layout.Width * (1 + m.Opt.Kind.StatePerWeight())
}

// ExportRows appends shard s's rows that are not all zero to dst, as wide
// rows of StateWidth(withState) values (withState needs s owned here). It
// returns the width.
func (m *Model) ExportRows(s int, withState bool, dst *Sparse) int {
	if withState && m.State[s] == nil {
		panic(fmt.Sprintf("model: exporting the state of shard %d, which is not owned here", s))
	}
	m.visitRows(s, withState, anyValue, func(k uint32, row, srow []float32) {
		dst.Idx = append(dst.Idx, k)
		dst.Val = append(dst.Val, row...)
		dst.Val = append(dst.Val, srow...)
	})
	return m.StateWidth(withState)
}

func allZero(v []float32) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}

// ImportRows replaces shard s with wide rows (ExportRows' output): the
// shard's weights become 0 except for rows, and with withState s becomes
// owned here with the rows' state (0 elsewhere). Rows must lie in shard s,
// be ascending and finite; on error m is unchanged.
func (m *Model) ImportRows(s int, withState bool, rows *Sparse) error {
	l := &m.Layout
	w, sw := l.Width, m.StateWidth(withState)
	if len(rows.Val) != rows.Len()*sw {
		return fmt.Errorf("%w: %d values for %d rows of width %d", ErrCorrupt, len(rows.Val), rows.Len(), sw)
	}
	for i, k := range rows.Idx {
		if !l.Valid(k) || l.Shard(k) != s || (i > 0 && k <= rows.Idx[i-1]) {
			return fmt.Errorf("%w: row %d is not a row of shard %d, or out of order", ErrCorrupt, k, s)
		}
	}
	for _, v := range rows.Val {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: a value of shard %d is %v", ErrCorrupt, s, v)
		}
	}
	lo, hi := l.ShardRange(s)
	clear(m.W[lo:hi])
	spw := m.Opt.Kind.StatePerWeight()
	if withState {
		m.State[s] = make([]float32, l.ShardSize()*spw)
	}
	for i, k := range rows.Idx {
		slot := l.Slot(k)
		v := rows.Val[i*sw : (i+1)*sw]
		copy(m.W[lo+slot*w:lo+(slot+1)*w], v[:w])
		if withState {
			copy(m.State[s][slot*w*spw:(slot+1)*w*spw], v[w:])
		}
	}
	return nil
}

// ResetShard zeroes shard s's weights and drops its state (not owned).
func (m *Model) ResetShard(s int) {
	lo, hi := m.Layout.ShardRange(s)
	clear(m.W[lo:hi])
	m.State[s] = nil
}

// ShardHash is the xxhash64 of shard s's weights (little-endian float32,
// padding included). Hash combines every shard's, so peers that hold
// different shards can compute the model's hash together.
func (m *Model) ShardHash(s int) uint64 {
	lo, hi := m.Layout.ShardRange(s)
	d := xxhash.New()
	var buf [chunkBytes]byte
	untouchedRuns(m.W[lo:hi], func(a, b int, zero bool) {
		if zero {
			// The bytes of zeros, without reading the pages.
			for n := b - a; n > 0; {
				k := min(n, chunkBytes/4)
				d.Write(zeroChunk[:4*k])
				n -= k
			}
			return
		}
		for w := m.W[lo+a : lo+b]; len(w) > 0; {
			n := min(len(w), chunkBytes/4)
			d.Write(putFloats(buf[:], w[:n]))
			w = w[n:]
		}
	})
	return d.Sum64()
}

// zeroChunk is chunkBytes of zeros.
var zeroChunk [chunkBytes]byte

// CombineHashes is the model hash of a layout whose shards hash to hashes
// (ShardHash, in shard order): what Hash returns for a whole model.
func CombineHashes(l Layout, hashes []uint64) uint64 {
	d := xxhash.New()
	var hdr [16]byte
	binary.LittleEndian.PutUint64(hdr[0:], l.Features)
	binary.LittleEndian.PutUint32(hdr[8:], uint32(l.Width))
	binary.LittleEndian.PutUint32(hdr[12:], uint32(l.Shards))
	d.Write(hdr[:])
	var b [8]byte
	for _, h := range hashes {
		binary.LittleEndian.PutUint64(b[:], h)
		d.Write(b[:])
	}
	return d.Sum64()
}
