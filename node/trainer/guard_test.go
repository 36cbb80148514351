package trainer

import (
	"context"
	"math"
	"sync"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// sgdPeers makes every peer train with plain SGD (AdaGrad's normalised
// steps would hide what a huge value does), with the owners' row guard at
// bound (0: the default; -1: off).
func sgdPeers(bound float64) setup {
	return func(i int, cfg *Config, h *Hooks) {
		opt := model.DefaultOptConfig(model.SGD)
		opt.LR = 2 // (the planted data are learnt in 2 epochs of 600 rows)
		m, err := model.New(model.Logreg, 500, 2, 16, opt)
		if err != nil {
			panic(err)
		}
		cfg.Core.Model = m
		cfg.Core.Guard.MaxRowGrad = bound
	}
}

// withBigRow is peer 2's data with one row replaced by the row
// "0 6:3e38" (a float32 the parser accepts), batches as they were.
func withBigRow(i int) func(int) (data.Source, error) {
	rows := planted(uint64(i+1), 600, 500, 5) // (as startPeersOn's own)
	if i != 2 {
		return func(int) (data.Source, error) { return &rowsSource{b: rows}, nil }
	}
	var b data.Batch
	b.Reset()
	for r := range rows.Rows() {
		if r == 30 {
			b.Add(6, 3e38)
			b.EndRow(0)
			continue
		}
		idx, val := rows.Row(r)
		for j, k := range idx {
			b.Add(k, val[j])
		}
		b.EndRow(rows.Labels[r])
	}
	return func(int) (data.Source, error) { return &rowsSource{b: b}, nil }
}

// TestFaultyMemberBounded is the acceptance for a member's bad
// values: with the defaults, one row "0 6:3e38" in one peer's data, or one
// round of pushes of that peer with every value 1e30 (a bug, not a
// campaign), changes the honest peers' final test log-loss by less than 1%
// against a run without it. With the owners' guard off the same faults
// wreck the model (the test shows the attack happens).
func TestFaultyMemberBounded(t *testing.T) {
	run := func(bound float64, open func(i int) func(int) (data.Source, error), burst bool) []Summary {
		var also func(context.Context, *memLink, []train.Member)
		if burst {
			also = func(_ context.Context, ml *memLink, _ []train.Member) {
				var once sync.Once
				var round uint64
				ml.mu.Lock()
				ml.tamper = func(from string, m *wire.Core) {
					if from != "peer02" || m.Op != wire.CorePush || m.Rows.Len() == 0 || m.Round < 3 {
						return
					}
					once.Do(func() { round = m.Round })
					if m.Round != round {
						return
					}
					for i := range m.Rows.Val {
						m.Rows.Val[i] = 1e30
					}
				}
				ml.mu.Unlock()
			}
		}
		sums, errs := startPeersOn(t, 3, train.Sync, train.Need, 1, also, sgdPeers(bound), open)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("peer %d: %v", i, err)
			}
		}
		return sums
	}
	clean := run(0, nil, false)[0].Final.LogLoss
	for _, tc := range []struct {
		name  string
		open  func(i int) func(int) (data.Source, error)
		burst bool
	}{
		{"a row of 3e38", withBigRow, false},
		{"a round of pushes of 1e30", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guarded := run(0, tc.open, tc.burst)
			for i, s := range guarded {
				if d := math.Abs(s.Final.LogLoss-clean) / clean; !(d < 0.01) {
					t.Errorf("peer %d: test log-loss %.4f with the fault, %.4f without: %.1f%% apart, want under 1%%", i, s.Final.LogLoss, clean, 100*d)
				}
				if i == 0 && s.Core.RowsDropped == 0 && guarded[1].Core.RowsDropped == 0 && guarded[2].Core.RowsDropped == 0 {
					t.Errorf("no owner dropped a row: the fault did not reach the guard")
				}
			}
			open := guarded[0].Final.LogLoss
			wrecked := run(-1, tc.open, tc.burst)[0].Final.LogLoss
			t.Logf("test log-loss: clean %.4f, with the fault %.4f (guard on), %.4f (guard off)", clean, open, wrecked)
			if !(math.Abs(wrecked-clean)/clean > 0.05) && !math.IsNaN(wrecked) && !math.IsInf(wrecked, 0) {
				t.Errorf("with the guard off the fault changed the log-loss only to %.4f (clean %.4f): the test shows nothing", wrecked, clean)
			}
		})
	}
}
