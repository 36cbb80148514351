package data

import (
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// writeFile writes content to dir/name and returns the path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// readAll reads every row of src (in batches of max) into one batch.
func readAll(src Source, max int) (Batch, error) {
	var all, b Batch
	all.Reset()
	for {
		_, err := src.Next(&b, max)
		all.AppendRows(&b)
		if err == io.EOF {
			return all, nil
		}
		if err != nil {
			return all, err
		}
	}
}

// openAll opens the patterns and reads every row.
func openAll(t testing.TB, patterns []string, opt Options) Batch {
	t.Helper()
	src, err := Open(patterns, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	b, err := readAll(src, 7)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// row is one row in a form tests can compare with ==.
type row struct {
	label float32
	idx   []uint32
	val   []float32
}

func rows(b *Batch) []row {
	var out []row
	for r := range b.Rows() {
		i, v := b.Row(r)
		out = append(out, row{b.Labels[r], slices.Clone(i), slices.Clone(v)})
	}
	return out
}

func sameBatch(a, b *Batch) bool {
	return slices.Equal(a.Labels, b.Labels) && slices.Equal(a.Offsets, b.Offsets) &&
		slices.Equal(a.Indices, b.Indices) && slices.Equal(a.Values, b.Values)
}

// checkCSR checks the invariants every Source promises.
func checkCSR(b *Batch, dim uint64, classes int) error {
	if dim == 0 {
		dim = MaxDim
	}
	if len(b.Offsets) != len(b.Labels)+1 || b.Offsets[0] != 0 || len(b.Indices) != len(b.Values) || b.Offsets[len(b.Offsets)-1] != len(b.Indices) {
		return errors.New("CSR shape broken")
	}
	for r := range b.Rows() {
		if b.Offsets[r+1] < b.Offsets[r] {
			return errors.New("offsets decrease")
		}
		l := b.Labels[r]
		if l != float32(int(l)) || l < 0 || (classes == 0 && l > 1) || (classes > 0 && int(l) >= classes) {
			return errors.New("bad label")
		}
		idx, val := b.Row(r)
		for i, k := range idx {
			if uint64(k) >= dim {
				return errors.New("index outside dim")
			}
			if i > 0 && k <= idx[i-1] {
				return errors.New("indices not strictly ascending")
			}
			if math.IsNaN(float64(val[i])) || math.IsInf(float64(val[i]), 0) {
				return errors.New("value not finite")
			}
		}
	}
	return nil
}
