package data

import (
	"math"
	"slices"
	"testing"
)

// ScalingFor standardises dense numeric features, divides sparse large ones
// by their largest |value| and leaves binary ones alone; Rescaled applies
// it row by row, adding the centred features a row lacks, in index order.
func TestScalingAndRescaled(t *testing.T) {
	dir := t.TempDir()
	// Feature 1: dense, values 2, 4, 6, 8 (mean 5, sd sqrt(5)).
	// Feature 2: binary one-hot. Feature 3: sparse, one value of -10.
	// Feature 4: dense, small values in [0, 1] (0.1, 0.2, 0.3, 0.2).
	p := writeFile(t, dir, "a.svm", "1 1:2 2:1 4:0.1\n0 1:4 4:0.2\n1 1:6 2:1 3:-10 4:0.3\n0 1:8 4:0.2\n")
	sr, err := Scan([]string{p}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(func(yield func(uint32) bool) {
		for k := range sr.Numeric {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(got, []uint32{0, 2, 3}) {
		t.Fatalf("numeric features %v, want [0 2 3] (0-based)", got)
	}
	sc := ScalingFor(sr, 10)
	sd := math.Sqrt(5)
	sd4 := math.Sqrt((0.01+0.04+0.09+0.04)/4 - 0.2*0.2)
	want := &Scaling{
		Scale:   []float32{float32(1 / sd), 1, 0.1, float32(1 / sd4)},
		Shift:   []float32{5, 0, 0, 0.2},
		Centred: []uint32{0, 3},
	}
	near := func(a, b float32) bool { return math.Abs(float64(a-b)) <= 1e-5*math.Abs(float64(b)) }
	if !slices.EqualFunc(sc.Scale, want.Scale, near) || !slices.EqualFunc(sc.Shift, want.Shift, near) || !slices.Equal(sc.Centred, want.Centred) {
		t.Fatalf("scaling %+v, want %+v", *sc, *want)
	}
	if n, c := sc.Scaled(); n != 3 || c != 2 {
		t.Errorf("Scaled() = %d, %d; want 3, 2", n, c)
	}
	src, err := Open([]string{p}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := readAll(Rescaled(src, sc), 3)
	if err != nil {
		t.Fatal(err)
	}
	s0, s3 := sc.Scale[0], sc.Scale[3]
	f := func(x float32) float32 { return (x - 5) * s0 }
	g := func(x float32) float32 { return (x - sc.Shift[3]) * s3 }
	wantRows := []row{
		{1, []uint32{0, 1, 3}, []float32{f(2), 1, g(0.1)}},
		{0, []uint32{0, 3}, []float32{f(4), g(0.2)}},
		{1, []uint32{0, 1, 2, 3}, []float32{f(6), 1, -1, g(0.3)}},
		{0, []uint32{0, 3}, []float32{f(8), g(0.2)}},
	}
	if got := rows(&b); !equalRows(got, wantRows) {
		t.Errorf("rescaled rows\n%v\nwant\n%v", got, wantRows)
	}
	// A row without a centred feature gets it: -shift·scale.
	q := writeFile(t, dir, "b.svm", "1 2:1\n")
	src, _ = Open([]string{q}, Options{})
	b, _ = readAll(Rescaled(src, sc), 3)
	if got := rows(&b); !equalRows(got, []row{{1, []uint32{0, 1, 3}, []float32{-5 * s0, 1, -sc.Shift[3] * s3}}}) {
		t.Errorf("row without the centred features: %v", got)
	}
	// Binary data needs no scaling.
	r := writeFile(t, dir, "c.svm", "1 1:1 3:1\n0 2:1\n")
	sr, _ = Scan([]string{r}, Options{})
	if sc := ScalingFor(sr, 10); sc != nil {
		t.Errorf("binary data: scaling %+v, want nil", *sc)
	}
}

func equalRows(a, b []row) bool {
	return slices.EqualFunc(a, b, func(x, y row) bool {
		return x.label == y.label && slices.Equal(x.idx, y.idx) && slices.Equal(x.val, y.val)
	})
}
