package job

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"

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

// TestLocalStateFor pins where a job's windows keep the optimizer state
// (localStateFor, --optimizer-state): auto keeps AdaGrad's sums with the
// workers for an MLP (unless the job writes checkpoints, which hold the
// owners' state) and with the owners for a sparse linear model; the
// flag's value when given; never without windows or AdaGrad state to
// keep; and the report's start line says which.
func TestLocalStateFor(t *testing.T) {
	mk := func(kind model.Kind, opt model.OptKind) *model.Model {
		var m *model.Model
		var err error
		if kind == model.MLP {
			m, err = model.NewMLP(64, 10, 16, 4, model.DefaultOptConfig(opt), 1)
		} else {
			m, err = model.New(kind, 1<<10, 2, 4, model.DefaultOptConfig(opt))
		}
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		kind  model.Kind
		opt   model.OptKind
		h     int
		given string
		ckpt  string
		want  bool
	}{
		{model.MLP, model.AdaGrad, 8, "auto", "", true},
		{model.MLP, model.AdaGrad, 8, "auto", "ckpt", false},
		{model.MLP, model.AdaGrad, 8, "workers", "ckpt", true},
		{model.Logreg, model.AdaGrad, 4, "auto", "", false},
		{model.Softmax, model.AdaGrad, 4, "auto", "", false},
		{model.Logreg, model.AdaGrad, 4, "workers", "", true},
		{model.MLP, model.AdaGrad, 8, "owners", "", false},
		{model.MLP, model.AdaGrad, 1, "auto", "", false},
		{model.Logreg, model.AdaGrad, 1, "workers", "", false},
		{model.MLP, model.SGD, 8, "auto", "", false},
		{model.Logreg, model.FTRL, 4, "auto", "", false},
	} {
		m := mk(tc.kind, tc.opt)
		d := Dist{Mode: train.Sync, LocalSteps: tc.h, AutoCombine: true, OptimizerState: tc.given, CheckpointDir: tc.ckpt}
		if got := d.localStateFor(m); got != tc.want {
			t.Errorf("%v, %v, H = %d, --optimizer-state %s, --checkpoint-dir %q: workers keep the state %v, want %v", tc.kind, tc.opt, tc.h, tc.given, tc.ckpt, got, tc.want)
		}
		want := map[bool]string{true: "workers", false: "owners"}[tc.want]
		if eff := jobEffective(d, m); eff["optimizer-state"] != want {
			t.Errorf("%v, %v, H = %d, --optimizer-state %s: the report says %q, want %q", tc.kind, tc.opt, tc.h, tc.given, eff["optimizer-state"], want)
		}
	}
}

// TestWarnWideWindows: a job warns, naming --local-steps and the window
// that suits it, when it starts with more workers than its window suits
// (train.AutoLocalSteps for that many: in sync where the owners sum the
// windows, in ssp and async whatever they combine), and says nothing
// where the window suits them or a sync combine cannot overshoot.
func TestWarnWideWindows(t *testing.T) {
	for _, tc := range []struct {
		mode    train.Mode
		h       int
		kind    model.Kind
		combine train.Combine
		members int
		warn    bool
	}{
		{train.Sync, 4, model.Logreg, train.Sum, 8, true},
		{train.Sync, 3, model.Logreg, train.Sum, 8, true},
		{train.Sync, 2, model.Logreg, train.Sum, 8, false},
		{train.Sync, 4, model.Logreg, train.Sum, 4, false},
		{train.Sync, 4, model.MLP, train.Sum, 8, false},       // (auto: capped)
		{train.Sync, 4, model.Logreg, train.Capped, 8, false}, // (given)
		{train.Async, 8, model.Logreg, train.Mean, 8, true},
		{train.SSP, 2, model.Logreg, train.Mean, 5, true},
		{train.Async, 8, model.MLP, train.Mean, 8, false},
		{train.Async, 8, model.Logreg, train.Mean, 4, false},
		{train.Async, 1, model.Logreg, train.Sum, 8, false},
		{train.Sync, 1, model.Logreg, train.Sum, 32, false},
		{train.Sync, 4, model.Logreg, train.Sum, 5, false},
		{train.Sync, 4, model.Logreg, train.Sum, 6, true},
	} {
		var buf bytes.Buffer
		d := Dist{Mode: tc.mode, LocalSteps: tc.h, AutoCombine: tc.combine == train.Sum, Combine: tc.combine}
		warnWideWindows(zerolog.New(&buf), d, tc.kind, tc.members)
		got := buf.String()
		if (got != "") != tc.warn {
			t.Errorf("%v, H = %d, %v, %v, %d members: logged %q, want a warning: %v", tc.mode, tc.h, tc.kind, tc.combine, tc.members, got, tc.warn)
			continue
		}
		if tc.warn {
			suits := train.AutoLocalSteps(tc.mode, tc.members)
			for _, want := range []string{`"level":"warn"`, fmt.Sprintf("%d workers' windows of %d batches", tc.members, tc.h), fmt.Sprintf("--local-steps %d", suits)} {
				if !strings.Contains(got, want) {
					t.Errorf("%d members, H = %d: the warning %q lacks %q", tc.members, tc.h, got, want)
				}
			}
		}
	}
}
