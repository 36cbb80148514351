package job

import (
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// TestCombineFor pins what --combine auto gives a job's windows
// (combineFor, docs/distributed.md "Windows of local steps"): in sync mode
// the sum for windows of up to 4 batches of a linear model, capped for
// larger windows and for the mlp; what the command line chose otherwise
// (mean in ssp and async, the flag's value when given).
func TestCombineFor(t *testing.T) {
	for _, tc := range []struct {
		mode  train.Mode
		h     int
		kind  model.Kind
		auto  bool
		given train.Combine
		want  train.Combine
	}{
		{train.Sync, 4, model.Logreg, true, train.Sum, train.Sum},
		{train.Sync, 2, model.Softmax, true, train.Sum, train.Sum},
		{train.Sync, 8, model.Logreg, true, train.Sum, train.Capped},
		{train.Sync, 16, model.Logreg, true, train.Sum, train.Capped},
		{train.Sync, 4, model.MLP, true, train.Sum, train.Capped},
		{train.Sync, 1, model.MLP, true, train.Sum, train.Sum},
		{train.Async, 8, model.Logreg, true, train.Mean, train.Mean},
		{train.SSP, 8, model.MLP, true, train.Mean, train.Mean},
		{train.Sync, 16, model.Logreg, false, train.Sum, train.Sum},
		{train.Sync, 4, model.MLP, false, train.Mean, train.Mean},
	} {
		d := Dist{Mode: tc.mode, LocalSteps: tc.h, AutoCombine: tc.auto, Combine: tc.given}
		if got := d.combineFor(tc.kind); got != tc.want {
			t.Errorf("%v, H = %d, %v, auto %v, given %v: %v, want %v", tc.mode, tc.h, tc.kind, tc.auto, tc.given, got, tc.want)
		}
	}
}

// TestJobEffectiveCombine: a peer's report start line keeps the combine
// and window size the job used, so report.md shows "capped (given: auto)"
// instead of the flag's "auto" alone.
func TestJobEffectiveCombine(t *testing.T) {
	m, err := model.New(model.Logreg, 1<<10, 2, 4, model.DefaultOptConfig(model.AdaGrad))
	if err != nil {
		t.Fatal(err)
	}
	eff := jobEffective(Dist{Mode: train.Sync, LocalSteps: 16, AutoCombine: true, Combine: train.Sum}, m)
	if eff["combine"] != "capped" || eff["local-steps"] != "16" {
		t.Errorf("effective %v, want combine capped and local-steps 16", eff)
	}
	if eff := jobEffective(Dist{Mode: train.Async, LocalSteps: 8, AutoCombine: true, Combine: train.Mean}, m); eff["combine"] != "mean" {
		t.Errorf("async: effective %v, want combine mean", eff)
	}
}
