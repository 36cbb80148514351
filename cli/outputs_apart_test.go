package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/infer"
)

// Every path a command writes is checked against every path it reads
// before any work (infer.CheckApart): --save, --report, --cache, --out and
// --predictions naming an input, a symbolic or hard link to it, or its
// /proc/self/fd alias fail with exit 2 naming both flags, and the input is
// left as it was (issue 33, item 2).
func TestOutputsNeverOverwriteInputs(t *testing.T) {
	dir := t.TempDir()
	svm := filepath.Join(dir, "train.svm")
	test := filepath.Join(dir, "test.svm")
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "%d %d:1 %d:0.5\n", i%2, 1+i%7, 8+i%3)
	}
	os.WriteFile(svm, []byte(b.String()), 0o644)
	lines := strings.SplitAfter(b.String(), "\n")
	os.WriteFile(test, []byte(strings.Join(lines[:20], "")), 0o644)
	model := filepath.Join(dir, "m.gt")
	if code, _, stderr := gt(t, "train", "--train", svm, "--epochs", "1", "--save", model); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	symlink := filepath.Join(dir, "link.svm")
	os.Symlink(svm, symlink)
	hardlink := filepath.Join(dir, "hard.svm")
	os.Link(test, hardlink)
	modelLink := filepath.Join(dir, "m-link.gt")
	os.Symlink(model, modelLink)
	f, err := os.Open(svm)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fdAlias := fmt.Sprintf("/proc/self/fd/%d", f.Fd())

	inputs := []string{svm, test, model}
	before := map[string][]byte{}
	for _, p := range inputs {
		before[p], _ = os.ReadFile(p)
	}
	rel, _ := filepath.Rel(mustGetwd(t), svm)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"train", "--train", svm, "--save", svm}, "--save: " + svm + " is the file --train reads"},
		{[]string{"train", "--train", filepath.Join(dir, "*.svm"), "--save", test}, "--save: " + test + " is the file --train reads"},
		{[]string{"train", "--train", svm, "--report", symlink}, "--report: " + symlink + " is the file --train reads (" + svm + ", through a link)"},
		{[]string{"train", "--train", svm, "--test", test, "--report", hardlink}, "--report: " + hardlink + " is the file --test reads (" + test + ", through a link)"},
		{[]string{"train", "--train", svm, "--cache", rel}, "--cache: " + rel + " is the file --train reads: writing it would destroy that input"},
		{[]string{"train", "--train", svm, "--save", fdAlias}, "--save: " + fdAlias + " is the file --train reads"},
		{[]string{"train", "--train", svm, "--save", filepath.Join(dir, "new.gt"), "--report", filepath.Join(dir, "new.gt")}, "--report: " + filepath.Join(dir, "new.gt") + " is the file --save writes too"},
		{[]string{"predict", "--model", model, "--data", test, "--out", test}, "--out: " + test + " is the file --data reads"},
		{[]string{"predict", "--model", model, "--data", test, "--out", modelLink}, "--out: " + modelLink + " is the file --model reads"},
		{[]string{"eval", "--model", model, "--test", test, "--predictions", hardlink}, "--predictions: " + hardlink + " is the file --test reads"},
		{[]string{"eval", "--model", model, "--test", test, "--predictions", model}, "--predictions: " + model + " is the file --model reads"},
		{[]string{"cluster", "--train", svm, "--save", symlink}, "--save: " + symlink + " is the file --train reads"},
		{[]string{"export", "--model", model, "--format", "json", "--out", modelLink}, "--out: " + modelLink + " is the file --model reads"},
	}
	for _, c := range cases {
		code, _, stderr := gt(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
		for _, p := range inputs {
			if got, _ := os.ReadFile(p); !bytes.Equal(got, before[p]) {
				t.Fatalf("%v changed %s", c.args, p)
			}
		}
		if fi, err := os.Lstat(symlink); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%v replaced the link %s", c.args, symlink)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "new.gt")); err == nil {
		t.Error("a refused train wrote --save")
	}
	// Outputs apart from the inputs still work, and - is never a file.
	if code, _, stderr := gt(t, "predict", "--model", model, "--data", test, "--out", "-"); code != 0 {
		t.Errorf("predict --out -: exit %d: %s", code, stderr)
	}
}

// report refuses an --out whose report.md or bench.json is a report file
// it reads.
func TestReportOutputApartFromInputs(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "report.md")
	writePeerReport(t, in, "p1", "ring", 1000, 1, 1000, false)
	before, _ := os.ReadFile(in)
	code, _, stderr := gt(t, "report", "--out", dir, in)
	if want := "--out: " + in + ", which report writes, is the report file"; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, want)
	}
	if got, _ := os.ReadFile(in); !bytes.Equal(got, before) {
		t.Error("report overwrote its input")
	}
}

func mustGetwd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// trainedModel trains a small logreg model and returns its file and a test
// set for it.
func trainedModel(t *testing.T, dir string, extra ...string) (modelPath, test string) {
	t.Helper()
	test = filepath.Join(dir, "t.svm")
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "%d %d:1\n", i%2, 1+i%2)
	}
	os.WriteFile(test, []byte(b.String()), 0o644)
	modelPath = filepath.Join(dir, "m.gt")
	if code, _, stderr := gt(t, append([]string{"train", "--train", test, "--epochs", "1", "--save", modelPath}, extra...)...); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	return modelPath, test
}

// Predictions files are created mode 0644, as any file a user writes, not
// the 0600 of a temporary file (issue 33).
func TestPredictionsFileMode(t *testing.T) {
	dir := t.TempDir()
	m, test := trainedModel(t, dir)
	out, preds := filepath.Join(dir, "p.txt"), filepath.Join(dir, "e.txt")
	if code, _, stderr := gt(t, "predict", "--model", m, "--data", test, "--out", out); code != 0 {
		t.Fatalf("predict: exit %d: %s", code, stderr)
	}
	if code, _, stderr := gt(t, "eval", "--model", m, "--test", test, "--predictions", preds); code != 0 {
		t.Fatalf("eval: exit %d: %s", code, stderr)
	}
	for _, f := range []string{out, preds} {
		st, err := os.Stat(f)
		if err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("%s: %v, mode %v; want 0644", f, err, st.Mode().Perm())
		}
	}
}

// predict on input with no rows fails (exit 2, naming --data) and writes
// no --out, instead of an empty file and exit 0 (issue 33).
func TestPredictEmptyInputFails(t *testing.T) {
	dir := t.TempDir()
	m, _ := trainedModel(t, dir)
	empty := filepath.Join(dir, "empty.svm")
	os.WriteFile(empty, []byte("# no rows\n"), 0o644)
	out := filepath.Join(dir, "p.txt")
	code, _, stderr := gt(t, "predict", "--model", m, "--data", empty, "--out", out)
	if want := "--data: " + empty + ": no rows to score"; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, want)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an empty --out was written")
	}
}

// cluster and bench refuse data inside what they write in their run
// directory (runs/, repeats/, baseline/, peer-N files, report.md, the
// plots): they would overwrite or remove it. Data elsewhere in it, such as
// a bench's generated data/ reused, is fine.
func TestRunDirsApartFromInputs(t *testing.T) {
	dir := t.TempDir()
	for _, sub := range []string{"runs/x", "baseline", "data"} {
		os.MkdirAll(filepath.Join(dir, sub), 0o755)
	}
	write := func(rel string) string {
		p := filepath.Join(dir, rel)
		os.WriteFile(p, []byte("1 1:1\n0 2:1\n"), 0o644)
		return p
	}
	inRuns, inBase, peerFile, data := write("runs/x/a.svm"), write("baseline/a.svm"), write("peer-0.jsonl"), write("data/train.svm")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--out", dir, "--train", inRuns}, "--out: " + dir + ": --train " + inRuns + " is under " + filepath.Join(dir, "runs")},
		{[]string{"cluster", "--dir", dir, "--train", inBase}, "--dir: " + dir + ": --train " + inBase + " is under " + filepath.Join(dir, "baseline")},
		{[]string{"cluster", "--dir", dir, "--train", data, "--test", peerFile}, "--dir: " + dir + ": --test " + peerFile + " is a file this command writes there"},
	}
	for _, c := range cases {
		code, _, stderr := gt(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
	if err := checkInputsOutsideRun("out", dir, []infer.FlagPath{{Flag: "train", Path: data}}, []string{"runs", "repeats"}, []string{"report.md"}); err != nil {
		t.Errorf("a bench's own data/ as --train: %v", err)
	}
}
