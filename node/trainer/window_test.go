package trainer

import (
	"slices"
	"testing"

	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// TestWindower: batches are grouped h at a time, a new epoch closes the
// window under way, the window's keys are the union of its batches' and
// its position the one before its first batch; flush gives the rest.
func TestWindower(t *testing.T) {
	p := func(keys ...uint32) *sgd.Prepared { return &sgd.Prepared{Keys: keys} }
	w := windower{h: 3}
	if got := w.add(p(1, 5), 0, 0); got != nil {
		t.Fatalf("a window after one batch of 3")
	}
	w.add(p(2, 5), 0, 10)
	got := w.add(p(5, 9), 0, 20)
	if got == nil || len(got.batches) != 3 || !slices.Equal(got.keys, []uint32{1, 2, 5, 9}) || got.row != 0 || got.epoch != 0 {
		t.Fatalf("the first window: %+v, want 3 batches, keys 1 2 5 9, from row 0", got)
	}
	w.add(p(7), 0, 30)
	got = w.add(p(3), 1, 0) // a new epoch: the window of one batch before it closes
	if got == nil || len(got.batches) != 1 || !slices.Equal(got.keys, []uint32{7}) || got.row != 30 {
		t.Fatalf("the window cut by the epoch: %+v, want 1 batch, keys 7, from row 30", got)
	}
	got = w.flush()
	if got == nil || got.epoch != 1 || !slices.Equal(got.keys, []uint32{3}) {
		t.Fatalf("flush: %+v, want epoch 1's one batch", got)
	}
	if w.flush() != nil {
		t.Fatalf("flush with nothing under way gave a window")
	}
}

// TestPeersTrainInWindows: with windows of 4 local steps, three peers end
// with one model (sync: bit for bit; ssp and async: the peers' fetches
// agree) of a quality near one peer's on all the data, every example
// trained once per epoch.
func TestPeersTrainInWindows(t *testing.T) {
	ref := reference(t, 3)
	for _, mode := range []train.Mode{train.Sync, train.SSP, train.Async} {
		t.Run(mode.String(), func(t *testing.T) {
			sums, errs := startPeersSetup(t, 3, mode, train.Need, 1, nil, func(i int, cfg *Config, h *Hooks) {
				cfg.Core.LocalSteps = 4
			})
			for i, err := range errs {
				if err != nil {
					t.Fatalf("peer %d: %v", i, err)
				}
			}
			for i, s := range sums {
				if !s.Evaluated || s.Final.LogLoss > ref.LogLoss*1.05 {
					t.Errorf("peer %d: final evaluation %+v: one peer on all the data reaches %.4f", i, s.Final, ref.LogLoss)
				}
				if s.ModelHash != sums[0].ModelHash {
					t.Errorf("peer %d ends with model %x, peer 0 with %x", i, s.ModelHash, sums[0].ModelHash)
				}
				if s.Examples != 1200 {
					t.Errorf("peer %d trained %d examples, want 1200 (600 rows, 2 epochs)", i, s.Examples)
				}
				if want := int64(2 * 3); s.Rounds != want { // 600 rows in batches of 50: 12 a epoch, 3 windows of 4
					t.Errorf("peer %d ran %d rounds, want %d windows", i, s.Rounds, want)
				}
			}
			t.Logf("%s: test log-loss %.4f (one peer on all the data %.4f)", mode, sums[0].Final.LogLoss, ref.LogLoss)
		})
	}
}
