package model

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

// mustPanic fails t unless f panics with a message containing want.
func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic, want one mentioning %q", want)
		}
		if msg, _ := r.(string); !strings.Contains(msg, want) {
			t.Fatalf("panic %v, want one mentioning %q", r, want)
		}
	}()
	f()
}

func mustNew(t testing.TB, kind Kind, dim uint64, classes, shards int, opt OptConfig) *Model {
	t.Helper()
	m, err := New(kind, dim, classes, shards, opt)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestParseKinds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Kind
		ok   bool
	}{
		{"logreg", Logreg, true},
		{"Softmax", Softmax, true},
		{" logreg ", Logreg, true},
		{"mlp", MLP, true},
		{"MLP", MLP, true},
		{"perceptron", 0, false},
		{"", 0, false},
	} {
		got, err := ParseKind(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseKind(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrConfig) {
			t.Errorf("ParseKind(%q) error %v does not wrap ErrConfig", tc.in, err)
		}
		if tc.ok && got.String() != strings.ToLower(strings.TrimSpace(tc.in)) {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
	for _, tc := range []struct {
		in   string
		want OptKind
		ok   bool
	}{
		{"sgd", SGD, true},
		{"AdaGrad", AdaGrad, true},
		{"ftrl", FTRL, true},
		{"adam", 0, false},
	} {
		got, err := ParseOptKind(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseOptKind(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() != strings.ToLower(tc.in) {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
}

func TestOptConfigValidate(t *testing.T) {
	for _, k := range []OptKind{SGD, AdaGrad, FTRL} {
		if err := DefaultOptConfig(k).Validate(); err != nil {
			t.Errorf("DefaultOptConfig(%v).Validate() = %v", k, err)
		}
	}
	with := func(k OptKind, f func(*OptConfig)) OptConfig {
		c := DefaultOptConfig(k)
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		c    OptConfig
		want string // substring of the error naming the field
	}{
		{"zero lr", with(SGD, func(c *OptConfig) { c.LR = 0 }), "lr 0"},
		{"nan lr", with(AdaGrad, func(c *OptConfig) { c.LR = math.NaN() }), "lr NaN"},
		{"negative decay", with(SGD, func(c *OptConfig) { c.Decay = -1 }), "decay -1"},
		{"decay on adagrad", with(AdaGrad, func(c *OptConfig) { c.Decay = 0.1 }), "only sgd"},
		{"l1 on sgd", with(SGD, func(c *OptConfig) { c.L1 = 1 }), "only ftrl"},
		{"negative l2", with(FTRL, func(c *OptConfig) { c.L2 = -0.5 }), "l2 -0.5"},
		{"ftrl beta 0", with(FTRL, func(c *OptConfig) { c.Beta = 0 }), "beta"},
		{"adagrad eps 0", with(AdaGrad, func(c *OptConfig) { c.Eps = 0 }), "eps"},
		{"unknown kind", OptConfig{Kind: 9, LR: 1}, "unknown optimizer"},
		{"negative power", with(SGD, func(c *OptConfig) { c.Power = -1 }), "power"},
	} {
		err := tc.c.Validate()
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want ErrConfig mentioning %q", tc.name, err, tc.want)
		}
	}
	// Settings that other optimizers ignore are accepted.
	if err := with(FTRL, func(c *OptConfig) { c.L1, c.L2, c.Eps = 2, 1, 5 }).Validate(); err != nil {
		t.Errorf("ftrl with l1, l2: %v", err)
	}
}

func TestNewShapes(t *testing.T) {
	sgd := DefaultOptConfig(SGD)
	for _, tc := range []struct {
		kind         Kind
		dim          uint64
		classes      int
		shards       int
		ok           bool
		width, per   int
		wantClasses  int
		wantFeatures uint64
	}{
		{Logreg, 10, 0, 4, true, 1, 3, 2, 11},
		{Logreg, 10, 2, 1, true, 1, 11, 2, 11},
		{Softmax, 7, 3, 2, true, 3, 4, 3, 8},
		{Logreg, 10, 3, 4, false, 0, 0, 0, 0},
		{Softmax, 7, 1, 2, false, 0, 0, 0, 0},
		{Logreg, 0, 0, 1, false, 0, 0, 0, 0},
		{Logreg, 1 << 32, 0, 1, false, 0, 0, 0, 0},
		{Logreg, 10, 0, 3, false, 0, 0, 0, 0}, // not a power of two
		{Logreg, 2, 0, 16, false, 0, 0, 0, 0}, // more shards than rows
		{Kind(9), 2, 0, 1, false, 0, 0, 0, 0}, // unknown kind
	} {
		m, err := New(tc.kind, tc.dim, tc.classes, tc.shards, sgd)
		if !tc.ok {
			if err == nil || !errors.Is(err, ErrConfig) {
				t.Errorf("New(%v, %d, %d, %d) = %v, want an ErrConfig", tc.kind, tc.dim, tc.classes, tc.shards, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("New(%v, %d, %d, %d): %v", tc.kind, tc.dim, tc.classes, tc.shards, err)
		}
		if m.Width() != tc.width || m.Layout.PerShard != tc.per || m.Classes != tc.wantClasses ||
			m.Layout.Features != tc.wantFeatures || len(m.W) != tc.shards*tc.per*tc.width {
			t.Errorf("New(%v, %d, %d, %d) = width %d, %d per shard, %d classes, %d features, len(W) %d",
				tc.kind, tc.dim, tc.classes, tc.shards, m.Width(), m.Layout.PerShard, m.Classes, m.Layout.Features, len(m.W))
		}
		if m.Bias() != uint32(tc.dim) {
			t.Errorf("Bias() = %d, want %d", m.Bias(), tc.dim)
		}
	}
	if _, err := New(Logreg, 4, 0, 1, OptConfig{Kind: SGD}); !errors.Is(err, ErrConfig) {
		t.Errorf("New with lr 0 = %v, want ErrConfig", err)
	}
}

func TestOwnership(t *testing.T) {
	for _, tc := range []struct {
		opt       OptKind
		stateSize int // per shard: 3 slots x 2 classes x state per weight
	}{
		{SGD, 0}, {AdaGrad, 6}, {FTRL, 12},
	} {
		m := mustNew(t, Softmax, 10, 2, 4, DefaultOptConfig(tc.opt)) // 11 rows, 3 slots per shard
		if m.Owns(1) {
			t.Fatalf("%v: fresh model owns shard 1", tc.opt)
		}
		m.Own(1)
		if !m.Owns(1) || m.Owns(0) || len(m.State[1]) != tc.stateSize {
			t.Errorf("%v: after Own(1): owns(1)=%v owns(0)=%v len(state)=%d, want true false %d",
				tc.opt, m.Owns(1), m.Owns(0), len(m.State[1]), tc.stateSize)
		}
		if tc.stateSize > 0 {
			m.State[1][0] = 5
			m.Own(1) // idempotent: keeps the state
			if m.State[1][0] != 5 {
				t.Errorf("%v: Own of an owned shard reset its state", tc.opt)
			}
		}
		m.OwnAll()
		if got := m.Owned(nil); len(got) != 4 {
			t.Errorf("%v: Owned after OwnAll = %v", tc.opt, got)
		}
		m.Disown(2)
		if got := m.Owned(nil); len(got) != 3 || got[2] != 3 {
			t.Errorf("%v: Owned after Disown(2) = %v, want [0 1 3]", tc.opt, got)
		}
	}
}

func TestRowsGatherSetRows(t *testing.T) {
	m := mustNew(t, Softmax, 5, 2, 2, DefaultOptConfig(SGD)) // rows 0..5, width 2, 3 slots per shard
	for k := uint32(0); k <= 5; k++ {
		r := m.Row(k)
		r[0], r[1] = float32(k), float32(10*k)
	}
	// Shard-major: shard 0 holds rows 0, 2, 4; shard 1 holds 1, 3, 5.
	want := []float32{0, 0, 2, 20, 4, 40, 1, 10, 3, 30, 5, 50}
	for i := range want {
		if m.W[i] != want[i] {
			t.Fatalf("W = %v, want %v", m.W, want)
		}
	}
	var s Sparse
	m.Gather([]uint32{1, 4, 5}, &s)
	if !s.Sorted(2) || len(s.Idx) != 3 || s.Val[0] != 1 || s.Val[2] != 4 || s.Val[5] != 50 {
		t.Fatalf("Gather = %+v", s)
	}
	p := Sparse{Idx: []uint32{0, 3}, Val: []float32{-1, -2, -3, -4}}
	m.SetRows(&p)
	if r := m.Row(0); r[0] != -1 || r[1] != -2 {
		t.Errorf("row 0 after SetRows = %v", r)
	}
	if r := m.Row(3); r[0] != -3 || r[1] != -4 {
		t.Errorf("row 3 after SetRows = %v", r)
	}
	if r := m.Row(4); r[0] != 4 {
		t.Errorf("SetRows changed row 4: %v", r)
	}
	mustPanic(t, "out of range", func() { m.Row(6) })
	mustPanic(t, "values for", func() { m.SetRows(&Sparse{Idx: []uint32{1}, Val: []float32{1}}) })
	if testing.AllocsPerRun(100, func() { m.Gather([]uint32{1, 4, 5}, &s) }) != 0 {
		t.Error("Gather into a grown Sparse allocates")
	}
}

func TestHashNonZerosClone(t *testing.T) {
	a := mustNew(t, Logreg, 9, 0, 4, DefaultOptConfig(AdaGrad)) // 10 rows, 3 slots per shard, 2 padding slots
	a.Row(3)[0] = 1.5
	a.Row(9)[0] = -2 // bias
	a.OwnAll()
	a.State[0][1] = 7
	a.Meta = map[string]string{"k": "v"}
	if got := a.NonZeros(); got != 2 {
		t.Errorf("NonZeros = %d, want 2", got)
	}
	b := a.Clone()
	if a.Hash() != b.Hash() {
		t.Fatal("clone hashes differently")
	}
	b.State[0][1] = 8
	b.Meta["k"] = "w"
	b.W[0] = 1
	if a.State[0][1] != 7 || a.Meta["k"] != "v" || a.W[0] != 0 {
		t.Fatal("Clone shares storage with the original")
	}
	if a.Hash() == b.Hash() {
		t.Error("different weights, same hash")
	}
	b.W[0] = 0
	if a.Hash() != b.Hash() {
		t.Error("state or meta changed the hash; it covers weights and layout only")
	}
	// -0 and +0 are different bits: the hash is of the bytes.
	b.W[0] = float32(math.Copysign(0, -1))
	if a.Hash() == b.Hash() {
		t.Error("-0 and +0 hash the same")
	}
	// Same weights in another layout hash differently.
	c := mustNew(t, Logreg, 9, 0, 2, DefaultOptConfig(AdaGrad))
	d := mustNew(t, Logreg, 9, 0, 1, DefaultOptConfig(AdaGrad))
	if len(c.W) == len(d.W) && c.Hash() == d.Hash() {
		t.Error("different layouts, same hash")
	}
}

func TestMatches(t *testing.T) {
	m := mustNew(t, Softmax, 784, 10, 4, DefaultOptConfig(SGD))
	for _, tc := range []struct {
		kind    Kind
		dim     uint64
		classes int
		want    string
	}{
		{Softmax, 784, 10, ""},
		{Logreg, 784, 0, "model is softmax"},
		{Softmax, 785, 10, "dim 784"},
		{Softmax, 784, 9, "10 classes"},
	} {
		err := m.Matches(tc.kind, tc.dim, tc.classes, 0)
		if tc.want == "" {
			if err != nil {
				t.Errorf("Matches(%v, %d, %d) = %v", tc.kind, tc.dim, tc.classes, err)
			}
			continue
		}
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Matches(%v, %d, %d) = %v, want ErrMismatch mentioning %q", tc.kind, tc.dim, tc.classes, err, tc.want)
		}
	}
}

// Unscale turns rows learnt on (x - shift)·scale into rows for x that give
// the same scores.
func TestUnscale(t *testing.T) {
	m, err := New(Softmax, 4, 3, 2, DefaultOptConfig(AdaGrad))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.W {
		m.W[i] = float32(i%7) - 3
	}
	want := m.Clone()
	scale := []float32{0.5, 1, 0.25}
	shift := []float32{2, 0, -4}
	x := []float32{3, 1, -2, 7}
	score := func(m *Model, x []float32) []float64 {
		z := make([]float64, m.Classes)
		for c := range z {
			z[c] = float64(m.Row(m.Bias())[c])
			for k, v := range x {
				z[c] += float64(m.Row(uint32(k))[c]) * float64(v)
			}
		}
		return z
	}
	scaled := slices.Clone(x)
	for k := range scale {
		scaled[k] = (x[k] - shift[k]) * scale[k]
	}
	before := score(want, scaled)
	m.Unscale(scale, shift)
	after := score(m, x)
	for c := range before {
		if math.Abs(before[c]-after[c]) > 1e-5 {
			t.Errorf("class %d: score %v on the scaled row, %v after Unscale on the raw row", c, before[c], after[c])
		}
	}
	if got := m.Row(3); !slices.Equal(got, want.Row(3)) {
		t.Errorf("row 3 (not scaled) changed: %v, was %v", got, want.Row(3))
	}
}
