package e2e

// Model files and what is done with them (issue 33, items 5 and 7): a
// model's file follows the features its data used, not --dim; an
// address-space limit is named before training; outlying indices are
// warned of; export, predict --labels and train --init.

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const adultTrain, adultTest = "../testdata/realdata/adult.train.gz", "../testdata/realdata/adult.test.gz"

// trainAdult trains a logreg model on Adult with args and returns its file.
func trainAdult(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	code, _, stderr := gt(t, append([]string{"train", "--train", adultTrain, "--save", path}, args...)...)
	if code != 0 {
		t.Fatalf("train %v: exit %d: %s", args, code, stderr)
	}
	return path
}

// predictLines runs predict with args and returns its output's lines, each
// split into fields.
func predictLines(t *testing.T, args ...string) [][]string {
	t.Helper()
	code, out, stderr := gt(t, append([]string{"predict"}, args...)...)
	if code != 0 {
		t.Fatalf("predict %v: exit %d: %s", args, code, stderr)
	}
	var lines [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		lines = append(lines, strings.Fields(l))
	}
	return lines
}

// modelHash is inspect's model_hash of a model file.
func modelHash(t *testing.T, path string) string {
	t.Helper()
	code, out, stderr := gt(t, "inspect", path, "--json")
	if code != 0 {
		t.Fatalf("inspect %s: exit %d: %s", path, code, stderr)
	}
	var info struct {
		Hash string `json:"model_hash"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("inspect %s: %v: %s", path, err, out)
	}
	return info.Hash
}

// noStackDump fails when stderr holds a Go runtime crash.
func noStackDump(t *testing.T, stderr string) {
	t.Helper()
	for _, s := range []string{"goroutine ", "fatal error", "runtime: out of memory", "panic:"} {
		if strings.Contains(stderr, s) {
			t.Errorf("stderr holds a runtime crash (%q):\n%s", s, stderr)
		}
	}
}

// Acceptance (issue 33, item 7): export of a trained logreg model read by
// /usr/bin/python3 with numpy reproduces predict's probabilities to 1e-6
// on the test set, from each format (model/testdata/score_export.py is
// the numpy that docs/usage.md shows).
func TestExportMatchesPredict(t *testing.T) {
	binary(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import numpy").Run(); err != nil {
		t.Skip("/usr/bin/python3 has no numpy")
	}
	dir := t.TempDir()
	m := trainAdult(t, dir, "adult.gt", "--epochs", "3")
	want := predictLines(t, "--model", m, "--data", adultTest)
	for _, ext := range []string{"npz", "json", "txt"} {
		out := filepath.Join(dir, "adult."+ext)
		if code, _, stderr := gt(t, "export", "--model", m, "--out", out); code != 0 {
			t.Fatalf("export --out %s: exit %d: %s", out, code, stderr)
		}
		py, err := exec.Command("/usr/bin/python3", "../model/testdata/score_export.py", out, adultTest).Output()
		if err != nil {
			t.Fatalf("score_export.py %s: %v", out, err)
		}
		got := strings.Split(strings.TrimSpace(string(py)), "\n")
		if len(got) != len(want) {
			t.Fatalf("%s: numpy scored %d rows, predict %d", ext, len(got), len(want))
		}
		worst := 0.0
		for i := range want {
			p, err1 := strconv.ParseFloat(strings.TrimSpace(got[i]), 64)
			q, err2 := strconv.ParseFloat(want[i][0], 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s row %d: %q vs %q", ext, i+1, got[i], want[i])
			}
			worst = max(worst, math.Abs(p-q))
		}
		if worst > 1e-6 {
			t.Errorf("%s: numpy's probabilities differ from predict's by up to %g, want <= 1e-6", ext, worst)
		}
		t.Logf("%s: %d rows, largest difference from predict %.3g", ext, len(want), worst)
	}
	// --format is told by --out's extension; a name without one needs it.
	code, _, stderr := gt(t, "export", "--model", m, "--out", filepath.Join(dir, "weights"))
	if code != 2 || !strings.Contains(stderr, "--format") {
		t.Errorf("export --out weights (no extension): exit %d, want 2 naming --format: %s", code, stderr)
	}
}

// predict --labels adds the predicted label, written as the training data
// writes labels (Adult: -1/+1); the share of rows whose label column is
// their true label is eval's accuracy.
func TestPredictLabels(t *testing.T) {
	binary(t)
	dir := t.TempDir()
	m := trainAdult(t, dir, "adult.gt", "--epochs", "3")
	lines := predictLines(t, "--model", m, "--data", adultTest, "--labels")
	truth := gzLabels(t, adultTest)
	if len(lines) != len(truth) {
		t.Fatalf("%d predictions for %d rows", len(lines), len(truth))
	}
	right := 0
	for i, f := range lines {
		if len(f) != 2 || (f[1] != "1" && f[1] != "-1") {
			t.Fatalf("row %d: %q, want a probability and a label -1 or 1", i+1, f)
		}
		p, _ := strconv.ParseFloat(f[0], 64)
		if (p > 0.5) != (f[1] == "1") {
			t.Errorf("row %d: P(1) %v with label %s", i+1, p, f[1])
		}
		if f[1] == truth[i] {
			right++
		}
	}
	acc := evalJSON(t, "--model", m, "--test", adultTest)["test_accuracy"].(float64)
	if got := float64(right) / float64(len(lines)); math.Abs(got-acc) > 1e-12 {
		t.Errorf("predicted labels right on %v of rows, eval's accuracy is %v", got, acc)
	}
}

// gzLabels returns the first field of every line of a gzipped libsvm file,
// "+1" written "1".
func gzLabels(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, l := range gzLines(t, path) {
		if f := strings.Fields(l); len(f) > 0 {
			out = append(out, strings.TrimPrefix(f[0], "+"))
		}
	}
	return out
}

// train --init goes on where a run stopped: one epoch saved with
// --save-state, then one more with --init, is bit for bit the model of two
// epochs in one run, for each optimizer. Flags that define the model must
// agree with the file (the error names both values); a peer of a job
// refuses --init.
func TestTrainInit(t *testing.T) {
	binary(t)
	dir := t.TempDir()
	for _, opt := range []string{"adagrad", "ftrl", "sgd"} {
		two := trainAdult(t, dir, opt+"-two.gt", "--scale", "off", "--epochs", "2", "--optimizer", opt)
		one := trainAdult(t, dir, opt+"-one.gt", "--scale", "off", "--epochs", "1", "--optimizer", opt, "--save-state")
		more := trainAdult(t, dir, opt+"-more.gt", "--init", one, "--epochs", "1", "--optimizer", opt)
		if h1, h2 := modelHash(t, more), modelHash(t, two); h1 != h2 {
			t.Errorf("%s: 1 epoch, then 1 with --init: model %s; 2 epochs in one run: %s", opt, h1, h2)
		}
	}
	one := filepath.Join(dir, "adagrad-one.gt")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--dim", "200"}, []string{"--dim", "dim 127", "200"}},
		{[]string{"--model", "softmax"}, []string{"--model", "logreg", "softmax"}},
		{[]string{"--job", "j", "--min-peers", "2", "--listen", "/ip4/127.0.0.1/tcp/0"}, []string{"--init", "not implemented"}},
		{[]string{"--scale", "on"}, []string{"--scale"}},
	} {
		code, _, stderr := gt(t, append([]string{"train", "--train", adultTrain, "--init", one}, c.args...)...)
		if code != 2 {
			t.Errorf("train --init %v: exit %d, want 2: %s", c.args, code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("train --init %v: the error does not name %q: %s", c.args, w, stderr)
			}
		}
	}
	if code, _, stderr := gt(t, "train", "--train", adultTrain, "--save-state"); code != 2 || !strings.Contains(stderr, "--save") {
		t.Errorf("train --save-state without --save: exit %d, want 2 naming --save: %s", code, stderr)
	}
}

// Acceptance (issue 33, item 5): train --dim 3000000000 --save on Adult
// exits 0 with a model file under 10 MB that eval reads (its figures those
// of the model of Adult's own dimension), under a 2 GiB memory cgroup when
// this host lets the test make one (cgroup v1, as root).
func TestTrainSparseSaveAtHugeDim(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	small := trainAdult(t, dir, "small.gt", "--epochs", "2")
	big := filepath.Join(dir, "big.gt")
	args := []string{"train", "--train", adultTrain, "--epochs", "2", "--dim", "3000000000", "--save", big, "--log-level", "warn"}
	cmd := exec.Command(bin, args...)
	if cg := memoryCgroup(t, 2<<30); cg != "" {
		// The shell joins the group, then becomes gossiptrain.
		cmd = exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg, bin}, args...)...)
		t.Logf("under a memory cgroup of 2 GiB (%s)", cg)
	} else {
		t.Logf("no memory cgroup here: the run has no memory limit")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("train --dim 3000000000: %v\n%s", err, out)
	}
	noStackDump(t, string(out))
	st, err := os.Stat(big)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() >= 10<<20 {
		t.Errorf("the model file of --dim 3000000000 is %d bytes, want under 10 MB", st.Size())
	}
	t.Logf("model file: %d bytes", st.Size())
	e1 := evalJSON(t, "--model", big, "--test", adultTest)
	e2 := evalJSON(t, "--model", small, "--test", adultTest)
	for _, k := range []string{"test_accuracy", "test_logloss", "model_nonzeros"} {
		if math.Abs(e1[k].(float64)-e2[k].(float64)) > 1e-9 {
			t.Errorf("eval of the --dim 3000000000 model: %s %v; of the --dim 127 one: %v", k, e1[k], e2[k])
		}
	}
}

// memoryCgroup makes a cgroup v1 memory group limited to limit bytes and
// returns its directory, removed at the end of the test; "" where none can
// be made.
func memoryCgroup(t *testing.T, limit int64) string {
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		return ""
	}
	dir := filepath.Join(root, fmt.Sprintf("gossiptrain-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return ""
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		return ""
	}
	// No swap beyond the limit, where the kernel accounts it.
	os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644)
	return dir
}

// Acceptance (issue 33, item 5): under an address-space limit of 4 GiB
// (ulimit -v, prlimit --as), train --dim 3000000000 stops within seconds
// with exit status 2 and an error naming --dim, the bytes and the limit;
// no runtime stack dump, no model file.
func TestTrainUnderAddressSpaceLimit(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	save := filepath.Join(dir, "m.gt")
	cmd := exec.Command("/bin/sh", "-c", `ulimit -v 4194304 && exec "$@"`, "sh", bin,
		"train", "--train", adultTrain, "--dim", "3000000000", "--save", save, "--log-level", "warn")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("train --dim 3000000000 under ulimit -v 4 GiB: %v, want exit status 2:\n%s", err, out)
	}
	noStackDump(t, string(out))
	for _, w := range []string{"--dim", "24000002048 bytes", "RLIMIT_AS", "4294967296 bytes"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("the error does not name %q:\n%s", w, out)
		}
	}
	// The acceptance line says 2 s; a loaded test machine gets slack.
	if took > 10*time.Second {
		t.Errorf("took %v to refuse", took)
	}
	t.Logf("refused in %v: %s", took.Round(time.Millisecond), out)
	if _, err := os.Stat(save); err == nil {
		t.Errorf("%s was written", save)
	}
}

// With --dim inferred, one stray index far above Adult's makes a warning
// naming its file and line and the --dim it makes; the model file stays
// small (its rows, not 50 million weights).
func TestTrainWarnsOfOutlyingIndices(t *testing.T) {
	binary(t)
	dir := t.TempDir()
	stray := filepath.Join(dir, "stray.svm")
	lines := gzLines(t, adultTrain)
	lines[99] += " 50000000:1"
	if err := os.WriteFile(stray, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	save := filepath.Join(dir, "m.gt")
	code, _, stderr := gt(t, "train", "--train", stray, "--epochs", "1", "--save", save)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, w := range []string{stray + ":100 (index 50000000)", "--dim 50000000", "fit in 128"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("the warning does not name %q: %s", w, stderr)
		}
	}
	if st, err := os.Stat(save); err != nil || st.Size() > 64<<10 {
		t.Errorf("model file: %v, %v; want under 64 KiB", st, err)
	}
	// Adult itself has no outlier: no warning.
	if code, _, stderr := gt(t, "train", "--train", adultTrain, "--epochs", "1"); code != 0 || strings.Contains(stderr, "far above") {
		t.Errorf("Adult: exit %d, stderr %s", code, stderr)
	}
}

// gzLines returns the lines of a gzipped text file.
func gzLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out
}
