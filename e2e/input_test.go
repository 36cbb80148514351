package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sh runs a bash pipeline (with $GT the gossiptrain binary) in dir and
// returns its standard output, failing on a non-zero exit.
func sh(t *testing.T, dir, pipeline string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", "set -o pipefail; "+pipeline)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GT="+binary(t))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", pipeline, err, errb.String())
	}
	return out.String()
}

// The issue's pipes, run by a shell against the binary: `head -1000
// test.svm | gossiptrain predict --model m.gt --data -` writes exactly
// 1,000 probabilities, equal to those predict writes for the same 1,000
// rows in a file, and so do gzipped libsvm, Criteo TSV and VW text through
// a pipe (and /dev/stdin, and --out -); `train --train -` trains the model
// the file trains, and `eval --test -` reports the file's metrics.
func TestPredictThroughPipes(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"svm", "criteo"} {
		if code, _, stderr := gt(t, "gen", "--out", filepath.Join(dir, f), "--rows", "5000", "--test-rows", "2000", "--format", map[string]string{"svm": "libsvm", "criteo": "criteo"}[f]); code != 0 {
			t.Fatalf("gen: %s", stderr)
		}
	}
	writeVWSet(t, filepath.Join(dir, "train.vw"), 3000, 1)
	writeVWSet(t, filepath.Join(dir, "test.vw"), 2000, 2)
	for _, tc := range []struct {
		name, train, test string
		flags             string
	}{
		{"libsvm", "svm/train.svm", "svm/test.svm", "--dim 16777216"},
		{"criteo", "criteo/train.tsv", "criteo/test.tsv", "--dim 1048576 --interactions aA"},
		{"vw", "train.vw", "test.vw", "--dim 262144 --interactions ab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			common := "--model logreg --epochs 2 --l2 1e-5 --log-level warn " + tc.flags
			sh(t, dir, fmt.Sprintf("$GT train --train %s %s --save %s.gt", tc.train, common, tc.name))
			sh(t, dir, fmt.Sprintf("cat %s | $GT train --train - %s --save %s-stdin.gt", tc.train, common, tc.name))
			first := fmt.Sprintf("%s-1000.txt", tc.name)
			sh(t, dir, fmt.Sprintf("head -n 1000 %s > %s && gzip -k %s", tc.test, first, first))
			want := sh(t, dir, fmt.Sprintf("$GT predict --model %s.gt --data %s --log-level warn", tc.name, first))
			if n := strings.Count(want, "\n"); n != 1000 {
				t.Fatalf("%d predictions for the 1,000-row file", n)
			}
			for _, pipe := range []string{
				fmt.Sprintf("head -n 1000 %s | $GT predict --model %s.gt --data - --log-level warn", tc.test, tc.name),
				fmt.Sprintf("head -n 1000 %s | $GT predict --model %s.gt --data /dev/stdin --out - --log-level warn", tc.test, tc.name),
				fmt.Sprintf("cat %s.gz | $GT predict --model %s.gt --data - --log-level warn", first, tc.name),
				fmt.Sprintf("head -n 1000 %s | $GT predict --model %s-stdin.gt --data - --log-level warn", tc.test, tc.name),
			} {
				if got := sh(t, dir, pipe); got != want {
					t.Errorf("%s: %d lines differ from the file's %d", pipe, strings.Count(got, "\n"), strings.Count(want, "\n"))
				}
			}
			evFile := sh(t, dir, fmt.Sprintf("$GT eval --model %s.gt --test %s --log-level warn", tc.name, tc.test))
			evPipe := sh(t, dir, fmt.Sprintf("cat %s | $GT eval --model %s.gt --test - --log-level warn", tc.test, tc.name))
			var a, b map[string]any
			json.Unmarshal([]byte(evFile), &a)
			json.Unmarshal([]byte(evPipe), &b)
			if a["test_logloss"] == nil || a["test_logloss"] != b["test_logloss"] || a["test_examples"] != b["test_examples"] {
				t.Errorf("eval of the file %s, through a pipe %s", evFile, evPipe)
			}
			evStdinModel := sh(t, dir, fmt.Sprintf("$GT eval --model %s-stdin.gt --test %s --log-level warn", tc.name, tc.test))
			var c map[string]any
			json.Unmarshal([]byte(evStdinModel), &c)
			if c["test_logloss"] != a["test_logloss"] {
				t.Errorf("trained through a pipe: %v, from the file: %v", c["test_logloss"], a["test_logloss"])
			}
		})
	}
}

// writeVWSet writes n VW rows with two namespaces of string features, u
// (one of 12 users) and i (one of 12 items), whose label depends on the
// pair alone: P(y=1) = sigmoid(T[u][i]) for a table T of ±2.5 with no
// user or item effect, so only the interaction ab can learn it. Every
// fifth row weighs 2 and every seventh 0.5; a few rows carry a tag.
func writeVWSet(t *testing.T, path string, n int, seed uint64) {
	t.Helper()
	table := rand.New(rand.NewPCG(42, 42))
	var T [12][12]float64
	for u := range T {
		for i := range T[u] {
			T[u][i] = 2.5
			if table.IntN(2) == 0 {
				T[u][i] = -2.5
			}
		}
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	var sb strings.Builder
	for r := range n {
		u, i := rng.IntN(12), rng.IntN(12)
		y := -1
		if rng.Float64() < 1/(1+math.Exp(-T[u][i])) {
			y = 1
		}
		w := ""
		switch {
		case r%5 == 0:
			w = " 2"
		case r%7 == 0:
			w = " 0.5"
		}
		tag := ""
		if r%11 == 0 {
			tag = fmt.Sprintf(" 'row%d", r)
		}
		fmt.Fprintf(&sb, "%d%s%s |a user_%d |b item_%d\n", y, w, tag, u, i)
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The acceptance of VW input: a VW file with two namespaces of string
// features whose label depends on their interaction, trained with
// --interactions ab (and --l2 auto, liblinear's C=1), reaches the
// weighted test log-loss that scikit-learn's logistic regression (C=1,
// the same importance weights) reaches on the same features hashed by an
// independent implementation of VW's definitions (data/testdata/vwhash.py),
// to 1%; without the interaction both sit near the no-information
// log-loss, far above. Read through a pipe the test set gives the same
// log-loss.
func TestVWInteractionsLearn(t *testing.T) {
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import sklearn, scipy, numpy").CombinedOutput(); err != nil {
		t.Skipf("needs scikit-learn for /usr/bin/python3 (apt-get install python3-sklearn): %v %s", err, out)
	}
	dir := t.TempDir()
	train, test := filepath.Join(dir, "train.vw"), filepath.Join(dir, "test.vw")
	writeVWSet(t, train, 20000, 1)
	writeVWSet(t, test, 5000, 2)
	const dim = "262144"
	loss := func(inter string) (ours, ref float64) {
		m := filepath.Join(dir, "m"+inter+".gt")
		args := []string{"train", "--train", train, "--dim", dim, "--save", m}
		if inter != "" {
			args = append(args, "--interactions", inter)
		}
		if code, _, stderr := gt(t, args...); code != 0 {
			t.Fatalf("train %v: %s", args, stderr)
		}
		ours = evalJSON(t, "--model", m, "--test", test)["test_logloss"].(float64)
		out, err := exec.Command(py, "../data/testdata/vwhash.py", "--C", "1", "--fit", train, test, dim, inter).Output()
		if err != nil {
			t.Fatalf("vwhash.py --fit: %v", err)
		}
		var r struct{ Logloss float64 }
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
		return ours, r.Logloss
	}
	with, withRef := loss("ab")
	without, withoutRef := loss("")
	t.Logf("test log-loss with --interactions ab %.4f (scikit-learn %.4f), without %.4f (scikit-learn %.4f)", with, withRef, without, withoutRef)
	if math.Abs(with-withRef) > 0.01*withRef {
		t.Errorf("with ab: %.4f, scikit-learn on the same hashed features %.4f: more than 1%% apart", with, withRef)
	}
	if math.Abs(without-withoutRef) > 0.01*withoutRef {
		t.Errorf("without: %.4f, scikit-learn %.4f: more than 1%% apart", without, withoutRef)
	}
	if with > 0.8*without {
		t.Errorf("the interaction bought too little: %.4f with, %.4f without", with, without)
	}
	// Through a pipe: the same test log-loss.
	piped := sh(t, dir, fmt.Sprintf("cat %s | $GT eval --model %s --test - --log-level warn", test, filepath.Join(dir, "mab.gt")))
	var p map[string]any
	json.Unmarshal([]byte(piped), &p)
	if got, _ := p["test_logloss"].(float64); got != with {
		t.Errorf("through a pipe: %v, from the file: %v", got, with)
	}
}
