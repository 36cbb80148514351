package trainer

import (
	"sync"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// TestSyncEvaluationPausesTraining: in sync mode an evaluation along the
// way pauses its peer's worker (pause.go): no gradient is computed while
// it runs, its wall time is counted in the eval points' Paused (growing by
// at least each evaluation's time) and in Summary.PausedSeconds, and the
// training time ends at the last round, before the run's end phase. In
// async the evaluations run beside training: nothing pauses.
func TestSyncEvaluationPausesTraining(t *testing.T) {
	const slow = 30 * time.Millisecond // each evaluation takes at least this long
	type span struct{ begin, end time.Time }
	for _, mode := range []train.Mode{train.Sync, train.Async} {
		t.Run(mode.String(), func(t *testing.T) {
			var mu sync.Mutex
			computes, evals := map[int][]span{}, map[int][]span{}
			points := map[int][]sgd.EvalPoint{}
			sums, errs := startPeersSetup(t, 2, mode, train.Need, 1, nil, func(i int, cfg *Config, h *Hooks) {
				cfg.EvalEvery = 200 // of 1200 examples: up to 5 along the way, and the final one
				cfg.observe = func(w work, done bool) {
					now := time.Now()
					mu.Lock()
					spans := computes
					if w == workEval {
						spans = evals
					}
					if done {
						spans[i][len(spans[i])-1].end = now
					} else {
						spans[i] = append(spans[i], span{begin: now})
					}
					mu.Unlock()
					if w == workEval && !done {
						time.Sleep(slow) // a slow evaluator
					}
				}
				h.Eval = func(p sgd.EvalPoint) {
					mu.Lock()
					points[i] = append(points[i], p)
					mu.Unlock()
				}
			})
			for i, err := range errs {
				if err != nil {
					t.Fatalf("peer %d: %v", i, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for i, s := range sums {
				pts := points[i]
				if mode == train.Sync {
					for _, e := range evals[i] {
						for _, c := range computes[i] {
							if c.begin.Before(e.end) && e.begin.Before(c.end) {
								t.Fatalf("peer %d: a gradient computed from %v to %v, during an evaluation from %v to %v",
									i, c.begin.Format(time.StampMicro), c.end.Format(time.StampMicro), e.begin.Format(time.StampMicro), e.end.Format(time.StampMicro))
							}
						}
					}
				}
				// In async the worker trains on while the first evaluation
				// runs, past the points of the others.
				want := 3
				if mode != train.Sync {
					want = 2
				}
				if len(pts) < want || len(evals[i]) != len(pts) || !s.Evaluated {
					t.Fatalf("peer %d: %d eval points, %d evaluations (final: %v); want at least %d along the way and the final one", i, len(pts), len(evals[i]), s.Evaluated, want-1)
				}
				if s.TrainingSeconds <= 0 || s.TrainingSeconds >= s.Seconds {
					t.Errorf("peer %d: training %.3f s of %.3f s; want the time to the last round, before the end of the run", i, s.TrainingSeconds, s.Seconds)
				}
				last := pts[len(pts)-1]
				if last.Examples != 1200 || last.Paused != s.PausedSeconds {
					t.Errorf("peer %d: final point at %d examples, paused %.3f s; want 1200 and the summary's %.3f s", i, last.Examples, last.Paused, s.PausedSeconds)
				}
				if mode != train.Sync {
					for _, p := range pts {
						if p.Paused != 0 {
							t.Errorf("peer %d (%v): paused %.3f s at %d examples; nothing pauses", i, mode, p.Paused, p.Examples)
						}
					}
					continue
				}
				prev := 0.0
				for k, p := range pts[:len(pts)-1] {
					if p.Paused < prev+slow.Seconds() {
						t.Errorf("peer %d: evaluation %d at %d examples: paused %.3f s in all, %.3f s before it; each pauses at least %v", i, k+1, p.Examples, p.Paused, prev, slow)
					}
					prev = p.Paused
				}
				if last.Paused != prev {
					t.Errorf("peer %d: the final evaluation (after the last round) added %.3f s of pause", i, last.Paused-prev)
				}
				if s.PausedSeconds >= s.TrainingSeconds {
					t.Errorf("peer %d: paused %.3f s of %.3f s of training", i, s.PausedSeconds, s.TrainingSeconds)
				}
			}
		})
	}
}
