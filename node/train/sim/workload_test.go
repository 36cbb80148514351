package sim

import (
	"math"
	"slices"
	"testing"
)

// TestWorkloadBatches: a feed hands out every row of every epoch once, a
// round's rows at a time (the last round what is left), then nothing;
// each batch's keys are its rows' distinct keys and the bias, ascending;
// a peer's rows are the same for every process of it and another peer's
// differ.
func TestWorkloadBatches(t *testing.T) {
	o := Options{Seed: 5, Dim: 50, Rows: 10, Batch: 3, Fields: 4, Epochs: 2, Shards: 4}
	w := newWorkload(o, &rng{s: 1})
	f := feed{rows: w.data("peer01")}
	var sizes []int
	for {
		keys, n := w.next(&f)
		if n == 0 {
			break
		}
		sizes = append(sizes, n)
		if !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
			t.Fatalf("batch keys %v are not distinct and ascending", keys)
		}
		if keys[len(keys)-1] != uint32(o.Dim) {
			t.Fatalf("batch keys %v lack the bias row %d", keys, o.Dim)
		}
	}
	if !slices.Equal(sizes, []int{3, 3, 3, 3, 3, 3, 2}) {
		t.Fatalf("batches of %v rows, want six of 3 and one of 2 (20 rows)", sizes)
	}
	if _, n := w.next(&f); n != 0 {
		t.Fatal("a batch after the end of the data")
	}
	a, b := w.data("peer01"), w.data("peer02")
	if len(a) != o.Rows || !slices.EqualFunc(a, f.rows, rowEqual) || slices.EqualFunc(a, b, rowEqual) {
		t.Fatal("a peer's rows differ between processes, or two peers have the same")
	}
}

func rowEqual(x, y row) bool { return x.label == y.label && slices.Equal(x.keys, y.keys) }

// TestLogregGrad: the gradient is the derivative of the summed log loss:
// every component within 1e-3 of a central difference of the loss.
func TestLogregGrad(t *testing.T) {
	o := Options{Seed: 9, Dim: 40, Rows: 8, Batch: 8, Fields: 5, Epochs: 1, Shards: 4}
	w := newWorkload(o, &rng{s: 2})
	rows := w.data("peer00")
	keys := w.batchKeys(rows)
	wt := make([]float32, len(keys))
	for i := range wt {
		wt[i] = float32(i%5)*0.3 - 0.6
	}
	g, _ := logregGrad(rows, keys, wt, uint32(o.Dim), w.at)
	const eps = 1e-2
	for i := range keys {
		up, down := slices.Clone(wt), slices.Clone(wt)
		up[i] += eps
		down[i] -= eps
		_, lu := logregGrad(rows, keys, up, uint32(o.Dim), w.at)
		_, ld := logregGrad(rows, keys, down, uint32(o.Dim), w.at)
		num := (lu - ld) / (float64(up[i]) - float64(down[i]))
		if math.Abs(num-float64(g[i])) > 1e-3*max(1, math.Abs(num)) {
			t.Errorf("key %d: gradient %v, the loss's slope %v", keys[i], g[i], num)
		}
	}
}
