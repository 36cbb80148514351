package trainer

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// TestPeersStopOnHeldOutRows: three sync peers whose rows have labels of
// pure noise (a model of them only memorises, so the loss on held-out rows
// rises from the first epochs) each stop on their own held-out rows well
// before the cap of 30 epochs, after Patience epochs without an
// improvement, having trained whole epochs of their rows that are not held
// out and none past the stop; the run ends with one model hash on every
// peer and a final evaluation. So too with windows of 4 local steps, and
// in ssp and async mode (where the peers' final fetches agree).
func TestPeersStopOnHeldOutRows(t *testing.T) {
	for _, c := range []struct {
		mode       train.Mode
		localSteps int
	}{{train.Sync, 1}, {train.Sync, 4}, {train.SSP, 1}, {train.Async, 1}} {
		t.Run(fmt.Sprintf("%s-local-steps-%d", c.mode, c.localSteps), func(t *testing.T) { testPeersStopOnHeldOutRows(t, c.mode, c.localSteps) })
	}
}

func testPeersStopOnHeldOutRows(t *testing.T, mode train.Mode, localSteps int) {
	const epochs, holdout, patience = 30, 5, 2
	open := func(i int) func(int) (data.Source, error) {
		rows := planted(uint64(i+1), 600, 500, 5)
		rng := rand.New(rand.NewPCG(uint64(i+1), 3))
		for r := range rows.Labels {
			rows.Labels[r] = float32(rng.IntN(2))
		}
		return func(int) (data.Source, error) { return &rowsSource{b: rows}, nil }
	}
	sums, errs := startPeersOn(t, 3, mode, train.Need, 1, nil, func(i int, cfg *Config, h *Hooks) {
		cfg.Epochs, cfg.Holdout, cfg.Patience, cfg.HoldoutTol = epochs, holdout, patience, 1e-3
		cfg.Core.LocalSteps = localSteps
	}, open)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("peer %d: %v", i, err)
		}
	}
	for i, s := range sums {
		l := s.HoldoutLoss
		t.Logf("peer %d: %d epochs, held-out loss %.4f", i, s.Epochs, l)
		if !s.Converged || s.Epochs >= epochs {
			t.Errorf("peer %d ran %d of %d epochs (stopped by the held-out rule: %v), want a stop before the cap", i, s.Epochs, epochs, s.Converged)
		}
		if s.HoldoutRows != 600/holdout {
			t.Errorf("peer %d held out %d rows, want %d", i, s.HoldoutRows, 600/holdout)
		}
		if len(l) != s.Epochs || len(l) < patience+1 {
			t.Fatalf("peer %d: %d held-out losses for %d epochs, want one an epoch and at least %d", i, len(l), s.Epochs, patience+1)
		}
		best := l[0]
		for _, v := range l[:len(l)-patience] {
			best = min(best, v)
		}
		for _, v := range l[len(l)-patience:] {
			if v < best*(1-1e-3) {
				t.Errorf("peer %d stopped although epoch loss %.4f improved on the best before, %.4f", i, v, best)
			}
		}
		if want := int64(s.Epochs) * (600 - 600/holdout); s.Examples != want {
			t.Errorf("peer %d trained %d examples, want %d (%d whole epochs of the rows not held out)", i, s.Examples, want, s.Epochs)
		}
		if !s.Evaluated {
			t.Errorf("peer %d: no final evaluation", i)
		}
		if s.ModelHash != sums[0].ModelHash {
			t.Errorf("peer %d ends with model %x, peer 0 with %x", i, s.ModelHash, sums[0].ModelHash)
		}
	}
}
