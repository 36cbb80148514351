package model

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// NewMLP's initial weights depend on the seed alone, not on the shard
// count: peers with different --shards would still start alike, and the
// row a weight lands in is what it is.
func TestNewMLPInit(t *testing.T) {
	opt := DefaultOptConfig(AdaGrad)
	a, err := NewMLP(50, 3, 8, 4, opt, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewMLP(50, 3, 8, 16, opt, 7)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewMLP(50, 3, 8, 4, opt, 8)
	if err != nil {
		t.Fatal(err)
	}
	if a.Layout.Features != 50+3+2 || a.Width() != 8 || a.Hidden != 8 || a.Bias2() != 54 {
		t.Fatalf("layout %v, hidden %d, b2 row %d: want 55 rows of 8, b2 at 54", a.Layout, a.Hidden, a.Bias2())
	}
	differ := 0
	for k := range uint32(a.Layout.Features) {
		ra, rb, rc := a.Row(k), b.Row(k), c.Row(k)
		if !slicesEqual(ra, rb) {
			t.Fatalf("row %d differs between 4 and 16 shards: %v vs %v", k, ra, rb)
		}
		if !slicesEqual(ra, rc) {
			differ++
		}
		bound := math.Sqrt(6.0 / 50)
		if k > 50 {
			bound = math.Sqrt(6.0 / 8)
		}
		for _, v := range ra {
			switch {
			case k == a.Bias() || k == a.Bias2():
				if v != 0 {
					t.Fatalf("bias row %d starts at %v, want 0", k, v)
				}
			case math.Abs(float64(v)) > bound || v == 0:
				t.Fatalf("row %d weight %v outside ±%.3f or 0", k, v, bound)
			}
		}
	}
	if differ < 50 {
		t.Errorf("another seed changed only %d rows", differ)
	}
}

func slicesEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestNewMLPShapes(t *testing.T) {
	opt := DefaultOptConfig(SGD)
	for _, tc := range []struct {
		name                   string
		classes, hidden, shard int
	}{
		{"no hidden units", 3, 0, 4},
		{"fewer units than classes", 10, 8, 4},
		{"one class", 1, 8, 4},
		{"too many units", 3, MaxHidden + 1, 4},
	} {
		if _, err := NewMLP(10, tc.classes, tc.hidden, tc.shard, opt, 1); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", tc.name, err)
		}
	}
	if _, err := New(MLP, 10, 3, 4, opt); !errors.Is(err, ErrConfig) {
		t.Errorf("New(MLP): err = %v, want ErrConfig pointing at NewMLP", err)
	}
	if _, err := NewMLP(10, 3, 8, 4, DefaultOptConfig(FTRL), 1); err != nil {
		t.Errorf("mlp with ftrl: %v (ftrl starts from nonzero weights)", err)
	}
}

// An MLP saves as format version 2 with its hidden size and loads back
// bit-identical; a linear model still saves as version 1, which older
// binaries read.
func TestMLPFileRoundTrip(t *testing.T) {
	m, err := NewMLP(30, 4, 6, 8, DefaultOptConfig(AdaGrad), 3)
	if err != nil {
		t.Fatal(err)
	}
	m.OwnAll()
	m.State[2][5] = 1.5
	var buf bytes.Buffer
	if _, err := m.Save(&buf, SaveOptions{State: true}); err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint32(buf.Bytes()[8:]); v != FormatVersion {
		t.Errorf("mlp file version %d, want %d", v, FormatVersion)
	}
	got, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != MLP || got.Hidden != 6 || got.Classes != 4 || got.Hash() != m.Hash() || got.State[2][5] != 1.5 {
		t.Errorf("read back %v hidden %d classes %d hash %x (want %x)", got.Kind, got.Hidden, got.Classes, got.Hash(), m.Hash())
	}
	lin, err := New(Softmax, 30, 4, 8, DefaultOptConfig(AdaGrad))
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if _, err := lin.Save(&buf, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint32(buf.Bytes()[8:]); v != FormatVersion {
		t.Errorf("softmax file version %d, want %d", v, FormatVersion)
	}
}
