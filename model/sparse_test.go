package model

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// Add merges two sparse sets by index and adds the rows both hold.
func TestSparseAdd(t *testing.T) {
	a := &Sparse{Idx: []uint32{1, 4, 9}, Val: []float32{1, 10, 4, 40, 9, 90}}
	b := &Sparse{Idx: []uint32{0, 4, 12}, Val: []float32{0.5, 5, 2, 20, 12, 120}}
	var dst Sparse
	dst.Add(a, b, 2)
	if want := []uint32{0, 1, 4, 9, 12}; !slices.Equal(dst.Idx, want) {
		t.Fatalf("indices %v, want %v", dst.Idx, want)
	}
	if want := []float32{0.5, 5, 1, 10, 6, 60, 9, 90, 12, 120}; !slices.Equal(dst.Val, want) {
		t.Fatalf("values %v, want %v", dst.Val, want)
	}
	dst.Add(&Sparse{}, a, 2) // reused: the old rows are gone
	if !slices.Equal(dst.Idx, a.Idx) || !slices.Equal(dst.Val, a.Val) {
		t.Fatalf("empty + a = %v %v, want a", dst.Idx, dst.Val)
	}
}

// randomSparse is n distinct rows (at most max) drawn from [0, max) of
// width w, sorted.
func randomSparse(r *rand.Rand, n int, max uint32, w int) *Sparse {
	n = min(n, int(max))
	set := map[uint32]bool{}
	for len(set) < n {
		set[r.Uint32N(max)] = true
	}
	s := &Sparse{}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		row := make([]float32, w)
		for x := range row {
			row[x] = float32(r.NormFloat64())
		}
		s.Append(k, row)
	}
	return s
}

// Add on random sets of every width from 1 to 3, overlapping a little or
// much, into a reused dst: each row of either set once, ascending, and a
// row in both the sum of its two.
func TestSparseAddRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var dst Sparse
	for trial := range 300 {
		w := 1 + trial%3
		a := randomSparse(r, r.IntN(200), uint32(50+r.IntN(1000)), w)
		b := randomSparse(r, r.IntN(200), uint32(50+r.IntN(1000)), w)
		want := map[uint32][]float32{}
		for _, s := range []*Sparse{a, b} {
			for i, k := range s.Idx {
				row := s.Val[i*w : (i+1)*w]
				if old, ok := want[k]; ok {
					sum := make([]float32, w)
					for x := range sum {
						sum[x] = old[x] + row[x]
					}
					row = sum
				}
				want[k] = row
			}
		}
		dst.Add(a, b, w)
		if !dst.Sorted(w) || dst.Len() != len(want) {
			t.Fatalf("trial %d: %d rows (sorted %v), want %d", trial, dst.Len(), dst.Sorted(w), len(want))
		}
		for i, k := range dst.Idx {
			if !slices.Equal(dst.Val[i*w:(i+1)*w], want[k]) {
				t.Fatalf("trial %d: row %d = %v, want %v", trial, k, dst.Val[i*w:(i+1)*w], want[k])
			}
		}
	}
}

// The sum a sync owner makes of two workers' window changes (rows of
// weight and AdaGrad accumulator, about 13,000 rows each of 2^24, half
// of them in both):
// go test ./model -run '^$' -bench SparseAdd -benchmem
func BenchmarkSparseAdd(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	shared := randomSparse(r, 6500, 1<<24, 2)
	x := randomSparse(r, 6500, 1<<24, 2)
	y := randomSparse(r, 6500, 1<<24, 2)
	var a, c, dst Sparse
	a.Add(shared, x, 2)
	c.Add(shared, y, 2)
	for b.Loop() {
		dst.Add(&a, &c, 2)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*dst.Len()), "ns/row")
}
