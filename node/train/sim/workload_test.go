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

// TestLocalStateWindow: a window whose worker keeps its own state
// (Options.LocalState) is the window of wide rows with that state in
// place of the fetched one: from plain weights and the worker's
// accumulators, at the rate for two workers, it returns one value a row,
// the wide window's weight change (the same loss), and leaves in the
// worker's state the accumulators the wide window ends with (its change
// added), rows outside the window untouched; the wide window's fetched
// accumulators are scaled by 1/workers (twice the worker's here), the
// worker's own are not.
func TestLocalStateWindow(t *testing.T) {
	o := Options{Seed: 3, Dim: 60, Rows: 40, Batch: 5, Fields: 4, Epochs: 1, Shards: 4, LocalSteps: 4, LocalState: true}
	w := newWorkload(o, &rng{s: 4})
	rows := w.batchRows(w.data("peer00"), 1)
	keys := w.batchKeys(rows)
	acc := w.newState()
	for k := range acc {
		acc[k] = float32(k%5) * 0.25
	}
	vals := make([]float32, len(keys))
	var wide []float32
	for i, k := range keys {
		vals[i] = float32(int(k)%7-3) * 0.125
		wide = append(wide, vals[i], 2*acc[k])
	}
	own := slices.Clone(acc)
	dl, ll := w.window(rows, keys, vals, 4, 2, own)
	dw, lw := w.window(rows, keys, wide, 4, 2, nil)
	if len(dl) != len(keys) || ll != lw {
		t.Fatalf("local state: %d values for %d rows, loss %v; want one a row and the wide window's loss %v", len(dl), len(keys), ll, lw)
	}
	grew := 0
	for i, k := range keys {
		if dl[i] != dw[2*i] {
			t.Errorf("row %d: weight change %v, the wide window's %v", k, dl[i], dw[2*i])
		}
		if d := own[k] - acc[k]; d != dw[2*i+1] {
			t.Errorf("row %d: accumulator changed by %v, the wide window's by %v", k, d, dw[2*i+1])
		}
		if own[k] > acc[k] {
			grew++
		}
	}
	if grew == 0 {
		t.Error("no accumulator grew")
	}
	for k := range acc {
		if !slices.Contains(keys, uint32(k)) && own[k] != acc[k] {
			t.Errorf("row %d, outside the window: accumulator %v, was %v", k, own[k], acc[k])
		}
	}
}
