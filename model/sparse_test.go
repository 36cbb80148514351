package model

import (
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
