package model

import (
	"bytes"
	"runtime"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// untouchedRuns covers the slice in order; values written are in runs it
// reads; and on Linux without swap the pages never written are runs it
// skips.
func TestUntouchedRunsCoverWhatWasWritten(t *testing.T) {
	v := freshFloats(t, 4<<20) // 16 MiB, never written
	written := []int{0, 5, 1 << 20, 1<<20 + 1, 3<<20 + 17, len(v) - 1}
	for _, i := range written {
		v[i] = float32(i + 1)
	}
	next, skipped := 0, 0
	untouchedRuns(v, func(lo, hi int, zero bool) {
		if lo != next || hi <= lo || hi > len(v) {
			t.Fatalf("run [%d, %d) after one ending at %d (len %d)", lo, hi, next, len(v))
		}
		next = hi
		if zero {
			skipped += hi - lo
			for _, i := range written {
				if i >= lo && i < hi {
					t.Errorf("value %d (written) in a run said untouched: [%d, %d)", i, lo, hi)
				}
			}
		}
	})
	if next != len(v) {
		t.Fatalf("runs end at %d, want %d", next, len(v))
	}
	if _, _, _, ok := residency(v); ok && skipped < len(v)/2 {
		t.Errorf("%d of %d values in untouched runs; want most: only %d values were written", skipped, len(v), len(written))
	} else if !ok {
		t.Logf("%s: residency is not known here (swap, or not Linux): everything is read", runtime.GOOS)
	}
}

// Hash and NonZeros give what reading every weight gives, and where pages
// can be told untouched they leave them so: a 64 MiB model with a few
// rows set stays a few pages resident.
func TestHashAndNonZerosReadOnlyTouchedPages(t *testing.T) {
	m, err := New(Logreg, 1<<24, 2, 256, OptConfig{Kind: AdaGrad, LR: 0.1, Eps: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []uint32{0, 1, 255, 256, 70000, 1 << 20, 1<<24 - 1, m.Bias()} {
		m.Row(k)[0] = float32(k%97) + 0.5
	}
	before := residentPages(m.W)
	hash, nz := m.Hash(), m.NonZeros()
	after := residentPages(m.W)
	if before >= 0 && after > before+4 {
		t.Errorf("hashing made %d more pages of the weights resident (%d before)", after-before, before)
	}
	// What reading everything gives.
	hs := make([]uint64, m.Layout.Shards)
	var buf [chunkBytes]byte
	var want int64
	for s := range hs {
		lo, hi := m.Layout.ShardRange(s)
		d := xxhash.New()
		for w := m.W[lo:hi]; len(w) > 0; {
			n := min(len(w), chunkBytes/4)
			d.Write(putFloats(buf[:], w[:n]))
			w = w[n:]
		}
		hs[s] = d.Sum64()
		for _, v := range m.W[lo : lo+m.Layout.shardRows(s)] {
			if v != 0 {
				want++
			}
		}
	}
	if h := CombineHashes(m.Layout, hs); h != hash {
		t.Errorf("hash %x, reading every weight gives %x", hash, h)
	}
	if nz != want || nz != 8 {
		t.Errorf("%d nonzeros, reading every weight gives %d (8 rows were set)", nz, want)
	}
}

// residentPages counts the resident pages v spans, -1 when unknown.
func residentPages(v []float32) int {
	res, _, _, ok := residency(v)
	if !ok {
		return -1
	}
	n := 0
	for _, r := range res {
		if r {
			n++
		}
	}
	return n
}

// ExportRows gives the rows reading every weight gives, state included,
// for widths 1 and 3 (rows of a softmax straddle pages), without making
// the pages of untouched rows resident.
func TestExportRowsSkipsUntouchedPages(t *testing.T) {
	for _, tc := range []struct {
		kind    Kind
		classes int
	}{{Logreg, 2}, {Softmax, 3}} {
		m, err := New(tc.kind, 1<<22, tc.classes, 16, OptConfig{Kind: AdaGrad, LR: 0.1, Eps: 1e-6})
		if err != nil {
			t.Fatal(err)
		}
		m.OwnAll()
		w := m.Layout.Width
		var g Sparse
		for _, k := range []uint32{0, 16, 17 * 16, 1 << 16, 1<<16 + 16, 3 << 20, 1<<22 - 16} {
			g.Idx = append(g.Idx, k)
			for c := range w {
				g.Val = append(g.Val, float32(c+1)*0.25)
			}
		}
		m.Apply(&g, 1, 0)
		before := residentPages(m.W)
		got := make([]Sparse, m.Layout.Shards)
		for s := range got {
			m.ExportRows(s, true, &got[s])
		}
		if after := residentPages(m.W); before >= 0 && after > before+4 {
			t.Errorf("%v: exporting made %d more pages of the weights resident (%d before)", tc.kind, after-before, before)
		}
		rows := 0
		for s := range got {
			// What reading every row gives.
			var want Sparse
			lo, _ := m.Layout.ShardRange(s)
			spw := m.Opt.Kind.StatePerWeight()
			for slot := range m.Layout.shardRows(s) {
				row := m.W[lo+slot*w : lo+(slot+1)*w]
				srow := m.State[s][slot*w*spw : (slot+1)*w*spw]
				if allZero(row) && allZero(srow) {
					continue
				}
				want.Idx = append(want.Idx, m.Layout.Feature(s, slot))
				want.Val = append(append(want.Val, row...), srow...)
			}
			if !slices.Equal(got[s].Idx, want.Idx) || !slices.Equal(got[s].Val, want.Val) {
				t.Errorf("%v: shard %d exports rows %v, reading every row gives %v", tc.kind, s, got[s].Idx, want.Idx)
			}
			rows += len(want.Idx)
		}
		if rows != len(g.Idx) {
			t.Errorf("%v: %d rows exported, want the %d applied", tc.kind, rows, len(g.Idx))
		}
	}
}

// Saving a large sparse model writes what it holds (it reads back the
// same) without making the pages of untouched rows resident.
func TestSaveSkipsUntouchedPages(t *testing.T) {
	m, err := New(Logreg, 1<<24, 2, 64, OptConfig{Kind: AdaGrad, LR: 0.1, Eps: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	m.OwnAll()
	g := Sparse{Idx: []uint32{3, 64, 1 << 20, 1<<24 - 1}, Val: []float32{0.5, -1, 2, 0.25}}
	m.Apply(&g, 1, 0)
	before := residentPages(m.W)
	var b bytes.Buffer
	if _, err := m.Save(&b, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if after := residentPages(m.W); before >= 0 && after > before+4 {
		t.Errorf("saving made %d more pages of the weights resident (%d before)", after-before, before)
	}
	r, err := Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Hash() != m.Hash() || r.NonZeros() != 4 {
		t.Errorf("read back: hash %x nonzeros %d; saved %x with 4", r.Hash(), r.NonZeros(), m.Hash())
	}
}
