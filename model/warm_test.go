package model

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

// rowsOf returns every row of m, in feature order.
func rowsOf(m *Model) [][]float32 {
	var out [][]float32
	for k := uint32(0); uint64(k) < m.Layout.Features; k++ {
		out = append(out, slices.Clone(m.Row(k)))
	}
	return out
}

// A model saved with its state and warm-started goes on exactly as if it
// had never stopped, in the same layout or another; without the state, or
// with another optimizer, it goes on from its weights with fresh rates,
// and WarmStart says which.
func TestWarmStartContinuesTraining(t *testing.T) {
	opt := OptConfig{Kind: AdaGrad, LR: 0.3, Eps: 1e-6, L2: 0.01}
	grads := []Sparse{
		{Idx: []uint32{1, 5, 9, 40}, Val: []float32{0.5, -1, 2, 0.25, 0.1, 0.2, -0.3, 0.4, 1, 1, 1, 1}},
		{Idx: []uint32{5, 33, 40}, Val: []float32{1, 0, -1, 2, 2, 2, 0.5, 0.5, 0.5}},
		{Idx: []uint32{0, 5, 40}, Val: []float32{-1, -1, -1, 0.3, 0.2, 0.1, 3, 2, 1}},
	}
	ref := mustNew(t, Softmax, 40, 3, 8, opt)
	ref.OwnAll()
	for i := range grads {
		ref.Apply(&grads[i], 2, int64(i))
	}
	for _, shards := range []int{8, 4, 32} {
		m := mustNew(t, Softmax, 40, 3, 8, opt)
		m.OwnAll()
		m.Apply(&grads[0], 2, 0)
		m.Apply(&grads[1], 2, 1)
		got, err := Read(bytes.NewReader(encode(t, m, SaveOptions{State: true})))
		if err != nil {
			t.Fatal(err)
		}
		got, notes, err := got.WarmStart(opt, shards)
		if err != nil {
			t.Fatal(err)
		}
		if len(notes) == 0 || !strings.Contains(notes[0], "state of 8 of 8 shards carried over") {
			t.Errorf("%d shards: notes %q, want the state carried over", shards, notes)
		}
		if got.Layout.Shards != shards || got.Steps != 2 {
			t.Errorf("%d shards: layout %v steps %d", shards, got.Layout, got.Steps)
		}
		got.OwnAll()
		got.Apply(&grads[2], 2, got.Steps)
		if !slices.EqualFunc(rowsOf(got), rowsOf(ref), slices.Equal) {
			t.Errorf("%d shards: the warm-started model's third step differs from an uninterrupted run's", shards)
		}
	}
	// Without state: fresh AdaGrad rates, so the third step differs.
	m := mustNew(t, Softmax, 40, 3, 8, opt)
	m.OwnAll()
	m.Apply(&grads[0], 2, 0)
	m.Apply(&grads[1], 2, 1)
	nostate, _ := Read(bytes.NewReader(encode(t, m, SaveOptions{})))
	nostate, notes, err := nostate.WarmStart(opt, 8)
	if err != nil || len(notes) != 1 || !strings.Contains(notes[0], "holds no optimizer state") {
		t.Errorf("without state: %v, notes %q", err, notes)
	}
	if !slices.EqualFunc(rowsOf(nostate), rowsOf(m), slices.Equal) {
		t.Error("without state: the weights changed")
	}
	// Another optimizer: the state is dropped.
	withState, _ := Read(bytes.NewReader(encode(t, m, SaveOptions{State: true})))
	ftrl := DefaultOptConfig(FTRL)
	other, notes, err := withState.WarmStart(ftrl, 8)
	if err != nil || len(notes) != 1 || !strings.Contains(notes[0], "adagrad state does not fit ftrl: dropped") || len(other.Owned(nil)) != 0 || other.Opt != ftrl {
		t.Errorf("adagrad file, ftrl run: %v, notes %q, owned %v, opt %v", err, notes, other.Owned(nil), other.Opt)
	}
	if _, _, err := withState.WarmStart(OptConfig{Kind: AdaGrad}, 8); !errors.Is(err, ErrConfig) {
		t.Errorf("invalid optimizer settings: %v", err)
	}
}

func TestMatchesHidden(t *testing.T) {
	m, err := NewMLP(10, 3, 8, 2, DefaultOptConfig(SGD), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Matches(MLP, 10, 3, 8); err != nil {
		t.Error(err)
	}
	if err := m.Matches(MLP, 10, 3, 16); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "8 hidden units, run wants 16") {
		t.Errorf("hidden 16 against 8: %v", err)
	}
}
