package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/report"
)

// A standalone train rejects the distributed flags a distributed run would
// reject, and checks --test, --save, --report and --checkpoint-dir before
// it reads any data: a mistyped flag fails at once, naming it, with exit
// status 2 (issue 12, "fail fast").
func TestTrainFailsFastNamingTheFlag(t *testing.T) {
	dir := t.TempDir()
	svm := filepath.Join(dir, "a.svm")
	os.WriteFile(svm, []byte("1 1:1\n0 2:1\n"), 0o644)
	images := filepath.Join(dir, "train-images-idx3-ubyte")
	os.WriteFile(images, []byte{0, 0, 8, 3}, 0o644)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "foo"}, `--mode: "foo": want sync, ssp or async`},
		{[]string{"--values", "f8"}, "--values: "},
		{[]string{"--gather", "some"}, `--gather: "some": want need or full`},
		{[]string{"--topology", "star"}, "--topology: "},
		{[]string{"--replicas", "0"}, "--replicas: "},
		{[]string{"--progress-every", "-1s"}, "--progress-every: must not be negative"},
		{[]string{"--mode", "ssp", "--staleness", "0"}, "--staleness: "},
		{[]string{"--checkpoint-every", "1m"}, "--checkpoint-dir: required with --checkpoint-every"},
		{[]string{"--checkpoint-dir", filepath.Join(file, "ckpt")}, "--checkpoint-dir: "},
		{[]string{"--test", filepath.Join(dir, "tset.svm")}, `--test: "` + filepath.Join(dir, "tset.svm") + `": no such file`},
		{[]string{"--test", dir}, "--test: " + dir + " is a directory"},
		{[]string{"--save", filepath.Join(dir, "missing", "m.gt")}, "--save: " + filepath.Join(dir, "missing", "m.gt") + ": directory " + filepath.Join(dir, "missing") + " does not exist"},
		{[]string{"--save", dir}, "--save: " + dir + " is a directory"},
		{[]string{"--report", filepath.Join(file, "r.jsonl")}, "--report: "},
		{[]string{"--epochs", "0"}, `"0" is not auto or a number of epochs`},
		{[]string{"--holdout", "1"}, `"1" is not off or a number >= 2`},
		{[]string{"--holdout", "some"}, `"some" is not off or a number >= 2`},
		{[]string{"--scale", "maybe"}, `--scale: "maybe": want auto, on or off`},
		{[]string{"--nonfinite", "drop"}, `--nonfinite: "drop": want fail or skip`},
		{[]string{"--max-value", "-1"}, "--max-value: -1: want 0 (no bound) or a finite bound > 0"},
		{[]string{"--stall-timeout", "-1s"}, "--stall-timeout: -1s: want 0 (wait for ever) or a positive duration"},
	}
	for _, c := range cases {
		start := time.Now()
		code, _, stderr := gt(t, append([]string{"train", "--train", svm}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%v: took %v to fail", c.args, d)
		}
	}
	// IDX images without their labels name the labels flag.
	code, _, stderr := gt(t, "train", "--train", images)
	if code != 2 || !strings.Contains(stderr, "--train-labels: "+images+" has no labels file beside it") {
		t.Errorf("IDX without labels: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = gt(t, "train", "--train", svm, "--test", images)
	if code != 2 || !strings.Contains(stderr, "--test-labels: ") {
		t.Errorf("IDX test without labels: exit %d, stderr %q", code, stderr)
	}
	// Nothing was left behind by the checks.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 3 {
		t.Errorf("the checks left files in %s: %v", dir, ents)
	}
}

// A mistyped --test fails before training, however long training would
// take: no model is lost to a typo found after the last epoch.
func TestMistypedTestFailsBeforeTraining(t *testing.T) {
	dir := t.TempDir()
	svm := filepath.Join(dir, "a.svm")
	var b strings.Builder
	for i := range 20000 {
		b.WriteString([]string{"1 1:1 3:0.5\n", "0 2:1 3:0.25\n"}[i%2])
	}
	os.WriteFile(svm, []byte(b.String()), 0o644)
	save := filepath.Join(dir, "m.gt")
	start := time.Now()
	code, _, stderr := gt(t, "train", "--train", svm, "--test", filepath.Join(dir, "a.smv"), "--epochs", "1000", "--save", save)
	took := time.Since(start)
	if code != 2 || !strings.Contains(stderr, "--test: ") {
		t.Fatalf("exit %d, stderr %q; want a usage error naming --test", code, stderr)
	}
	if took > 2*time.Second {
		t.Errorf("failed after %v; want well under 2 s (before training)", took)
	}
	if _, err := os.Stat(save); err == nil {
		t.Errorf("a model was saved")
	}
}

// Labels: softmax on -1/+1 labels trains with the smallest label as class
// 0 (the warning about a rare stray class: infer's TestRareLabelWarning).
func TestTrainLabelChecks(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 400 {
		if i == 16 {
			b.WriteString("2 1:1\n") // line 17: the typo
			continue
		}
		b.WriteString([]string{"+1 1:1 3:1\n", "-1 2:1 3:1\n"}[i%2])
	}
	pm := filepath.Join(dir, "pm.svm")
	os.WriteFile(pm, []byte(strings.ReplaceAll(b.String(), "2 1:1\n", "")), 0o644)
	rep := filepath.Join(dir, "r.jsonl")
	code, _, stderr := gt(t, "train", "--train", pm, "--test", pm, "--model", "softmax", "--epochs", "3", "--report", rep)
	if code != 0 {
		t.Fatalf("softmax on -1/+1 labels: exit %d: %s", code, stderr)
	}
	r, err := report.ReadFile(rep)
	if err != nil || r.Summary == nil {
		t.Fatalf("report: %v", err)
	}
	if s := r.Summary; s.TestAccuracy < 0.99 {
		t.Errorf("softmax on -1/+1 labels: test accuracy %v", r.Summary.TestAccuracy)
	}
}

func TestEvalBatchZeroIsAUsageError(t *testing.T) {
	dir := t.TempDir()
	svm := filepath.Join(dir, "a.svm")
	os.WriteFile(svm, []byte("1 1:1\n0 2:1\n"), 0o644)
	m := filepath.Join(dir, "m.gt")
	if code, _, stderr := gt(t, "train", "--train", svm, "--epochs", "1", "--save", m); code != 0 {
		t.Fatal(stderr)
	}
	code, _, stderr := gt(t, "eval", "--model", m, "--test", svm, "--batch", "0")
	if code != 2 || !strings.Contains(stderr, "--batch: must be at least 1") {
		t.Errorf("eval --batch 0: exit %d, stderr %q", code, stderr)
	}
}

func TestHelpTexts(t *testing.T) {
	_, top, _ := gt(t, "help")
	train := helpOf(t, "train")
	eval := helpOf(t, "eval")
	for _, c := range []struct{ where, text, want string }{
		{"help", top, "MLP"},
		{"train --help", train, "--model mlp"},
		{"train --help", train, "(a kind here; eval's, predict's and inspect's --model is a model file)"},
		{"eval --help", eval, "(a file here; train's --model is the kind"},
	} {
		if !strings.Contains(c.text, c.want) {
			t.Errorf("%s lacks %q", c.where, c.want)
		}
	}
	if i := strings.Index(train, "--job name"); i < 0 || strings.Contains(train[i:i+200], "(required)") {
		t.Errorf("train --help: --job still says required (or is missing)")
	}
}

func helpOf(t *testing.T, cmd string) string {
	t.Helper()
	var out, errb strings.Builder
	if code := Main([]string{cmd, "--help"}, &out, &errb); code != 0 {
		t.Fatalf("%s --help: exit %d", cmd, code)
	}
	return out.String()
}

// An empty or broken --test fails before training with exit 2 naming
// --test (and the file and line of a broken one), saving nothing, however
// long the training would have taken (issue 33: "test data: evaluate: no
// examples" came after training).
func TestTrainChecksTestBeforeTraining(t *testing.T) {
	dir := t.TempDir()
	svm := filepath.Join(dir, "a.svm")
	var b strings.Builder
	for i := range 20000 {
		b.WriteString([]string{"1 1:1 3:0.5\n", "0 2:1 3:0.25\n"}[i%2])
	}
	os.WriteFile(svm, []byte(b.String()), 0o644)
	empty := filepath.Join(dir, "empty.svm")
	os.WriteFile(empty, []byte("# only a comment\n\n"), 0o644)
	broken := filepath.Join(dir, "broken.svm")
	os.WriteFile(broken, []byte("1 1:1\n0 2:1\n1 3:x\n"), 0o644)
	save := filepath.Join(dir, "m.gt")
	for _, c := range []struct{ test, want string }{
		{empty, "--test: " + empty + " has no examples"},
		{broken, "--test: " + broken + ":3"},
	} {
		start := time.Now()
		code, _, stderr := gt(t, "train", "--train", svm, "--test", c.test, "--epochs", "1000", "--save", save)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("--test %s: exit %d, stderr %q; want exit 2 and %q", c.test, code, stderr, c.want)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("--test %s: failed after %v; want before training", c.test, took)
		}
		if _, err := os.Stat(save); err == nil {
			t.Errorf("--test %s: a model was saved", c.test)
		}
	}
}
