package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/report"
)

// gt runs one command line in-process and returns its exit status, stdout
// and stderr.
func gt(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(append(args, "--log-level", "warn"), &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelpListsEveryFlagWithDefaults(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"train", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("train --help: exit %d, stderr %s", code, errb.String())
	}
	help := out.String()
	for _, want := range []string{"--train FILE", "--dim features", "--optimizer optimizer", "(default \"adagrad\")",
		"--batch int", "(default 100)", "--l2 strength", "(default \"auto\")", "Examples:"} {
		if !strings.Contains(help, want) {
			t.Errorf("train --help lacks %q", want)
		}
	}
	out.Reset()
	if code := Main([]string{"help"}, &out, &errb); code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	for _, c := range []string{"train", "eval", "gen"} {
		if !strings.Contains(out.String(), "\n  "+c+" ") {
			t.Errorf("help does not list the %s command:\n%s", c, out.String())
		}
	}
}

func TestUsageErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	svm := filepath.Join(dir, "a.svm")
	os.WriteFile(svm, []byte("1 1:1\n0 2:1\n"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"train"}, "--train: no training data given"},
		{[]string{"train", "--train", filepath.Join(dir, "nothing*.svm")}, "--train: "},
		{[]string{"train", "--train", svm, "--optimizer", "adam"}, "--optimizer: "},
		{[]string{"train", "--train", svm, "--batch", "0"}, "--batch: must be at least 1"},
		{[]string{"train", "--train", svm, "--threads", "0"}, "--threads: want at least 1, got 0"},
		{[]string{"train", "--train", svm, "--part", "5/4"}, "--part: \"5/4\" is not I/N"},
		{[]string{"train", "--train", svm, "--l2", "lots"}, "--l2: \"lots\" is not auto or a number"},
		{[]string{"train", "--train", svm, "--shards", "3"}, "--shards: "},
		{[]string{"train", "--train", svm, "--l1", "0.1"}, "--l1: L1 needs --optimizer ftrl"},
		{[]string{"train", "--train", svm, "--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"train", "--train", svm, "--model", "softmax", "--hidden", "64"}, "--hidden: --hidden and --init-seed are for --model mlp"},
		{[]string{"train", "--train", svm, "--model", "mlp", "--hidden", "0"}, "--hidden: want 1..4096 hidden units, got 0"},
		{[]string{"train", "--train", svm, "--model", "mlp", "--hidden", "1"}, "--hidden: 1 hidden units for 2 classes"},
		{[]string{"eval", "--test", svm}, "--model: required"},
		{[]string{"gen"}, "--out: required"},
	}
	for _, c := range cases {
		code, _, stderr := gt(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

func TestBadLineStopsTheRunNamingFileLineAndToken(t *testing.T) {
	dir := t.TempDir()
	svm := filepath.Join(dir, "bad.svm")
	os.WriteFile(svm, []byte("1 1:1 2:1\n0 3:1\n1 4:x\n0 1:1\n"), 0o644)
	code, _, stderr := gt(t, "train", "--train", svm, "--dim", "8", "--l2", "0")
	if code != 1 || !strings.Contains(stderr, "bad.svm:3:") || !strings.Contains(stderr, `"4:x"`) {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming bad.svm:3 and token 4:x", code, stderr)
	}
	rep := filepath.Join(dir, "run.jsonl")
	code, _, stderr = gt(t, "train", "--train", svm, "--dim", "8", "--l2", "0", "--epochs", "5", "--skip-bad-lines", "--report", rep)
	if code != 0 {
		t.Fatalf("--skip-bad-lines: exit %d: %s", code, stderr)
	}
	r, err := report.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	if r.Summary == nil || r.Summary.BadLines != 1 || r.Summary.Examples != 3*5 {
		t.Fatalf("summary %+v: want 1 bad line and 3 rows x 5 epochs", r.Summary)
	}
}

// TestTrainSaveEval runs the README's single-peer workflow on a small
// generated set: gen, train with a report and a model file, eval the model.
func TestTrainSaveEval(t *testing.T) {
	dir := t.TempDir()
	code, out, stderr := gt(t, "gen", "--out", dir, "--rows", "20000", "--test-rows", "4000", "--features", "65536", "--fields", "10", "--seed", "7")
	if code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr)
	}
	var meta struct {
		Planted float64 `json:"planted_test_logloss"`
		Test    string  `json:"test_file"`
	}
	if err := json.Unmarshal([]byte(out), &meta); err != nil || meta.Planted <= 0 {
		t.Fatalf("gen printed %q (%v): want meta JSON with planted_test_logloss", out, err)
	}
	rep, mod := filepath.Join(dir, "run.jsonl"), filepath.Join(dir, "model.gt")
	code, _, stderr = gt(t, "train", "--train", filepath.Join(dir, "train*.svm"), "--test", meta.Test,
		"--dim", "65536", "--epochs", "2", "--eval-every", "10000", "--l2", "1e-6", "--report", rep, "--save", mod)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	r, err := report.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	if r.Start == nil || r.Start.Config["dim"] != "65536" {
		t.Errorf("report start line %+v: want the flags", r.Start)
	}
	if len(r.Evals) != 4 || r.Evals[0].Examples != 10000 || r.Evals[3].Examples != 40000 {
		t.Errorf("report has %d eval lines (%+v); want 4, every 10000 examples", len(r.Evals), r.Evals)
	}
	s := r.Summary
	if s == nil || s.Examples != 40000 || s.ModelNonzeros == 0 || float64(s.TestLogLoss) <= meta.Planted ||
		float64(s.TestLogLoss) > 1.15*meta.Planted {
		t.Fatalf("summary %+v: want 40000 examples and a test log-loss just above the planted %.4f", s, meta.Planted)
	}
	code, out, stderr = gt(t, "eval", "--model", mod, "--test", meta.Test)
	if code != 0 {
		t.Fatalf("eval: exit %d: %s", code, stderr)
	}
	var ev struct {
		LogLoss  float64 `json:"test_logloss"`
		Examples int64   `json:"test_examples"`
	}
	if err := json.Unmarshal([]byte(out), &ev); err != nil {
		t.Fatalf("eval printed %q: %v", out, err)
	}
	if ev.Examples != 4000 || ev.LogLoss != float64(s.TestLogLoss) {
		t.Errorf("eval: %d examples, log-loss %v; want 4000 and the training run's %v", ev.Examples, ev.LogLoss, s.TestLogLoss)
	}

	// A damaged model file is refused with a clear error.
	b, _ := os.ReadFile(mod)
	b[len(b)/2] ^= 0x40
	bad := filepath.Join(dir, "bad.gt")
	os.WriteFile(bad, b, 0o644)
	code, _, stderr = gt(t, "eval", "--model", bad, "--test", meta.Test)
	if code != 1 || !strings.Contains(stderr, "bad.gt") || !strings.Contains(stderr, "corrupt") {
		t.Errorf("eval of a damaged model: exit %d, %q; want exit 1 naming the file as corrupt", code, stderr)
	}
}

// With no --model, --classes or --label-base, labels 1..3 make a softmax
// model over three classes based at 1, and labels -1/+1 a logistic one.
func TestModelAndClassesInferredFromLabels(t *testing.T) {
	dir := t.TempDir()
	multi := filepath.Join(dir, "multi.svm")
	var b strings.Builder
	for i := 0; i < 300; i++ {
		c := 1 + i%3
		fmt.Fprintf(&b, "%d %d:1 %d:0.5\n", c, c, 4+i%2)
	}
	os.WriteFile(multi, []byte(b.String()), 0o644)
	bin := filepath.Join(dir, "bin.svm")
	os.WriteFile(bin, []byte("+1 1:1\n-1 2:1\n+1 1:1 3:1\n-1 2:1 3:1\n"), 0o644)

	for _, c := range []struct {
		file            string
		kind            string
		classes, base   int
		accuracyAtLeast float64
	}{
		{multi, "softmax", 3, 1, 0.99},
		{bin, "logreg", 2, 0, 0.99},
	} {
		mod := filepath.Join(dir, "m.gt")
		code, _, stderr := gt(t, "train", "--train", c.file, "--test", c.file, "--epochs", "20", "--save", mod)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.file, code, stderr)
		}
		m, err := model.LoadFile(mod)
		if err != nil {
			t.Fatal(err)
		}
		if m.Kind.String() != c.kind || m.Classes != c.classes || m.LabelBase != int64(c.base) {
			t.Errorf("%s: model %s with %d classes based at %d; want %s, %d, %d", c.file, m.Kind, m.Classes, m.LabelBase, c.kind, c.classes, c.base)
		}
		code, out, _ := gt(t, "eval", "--model", mod, "--test", c.file)
		var ev struct {
			Accuracy float64 `json:"test_accuracy"`
		}
		json.Unmarshal([]byte(out), &ev)
		if code != 0 || ev.Accuracy < c.accuracyAtLeast {
			t.Errorf("%s: eval exit %d, accuracy %v; want >= %v", c.file, code, ev.Accuracy, c.accuracyAtLeast)
		}
	}
}
