package e2e

// Acceptance checks of the single-peer trainer on real and generated data,
// run the way a user runs them: through the CLI with default flags. They
// take a few seconds each; -short skips them.

import (
	"compress/gzip"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/report"
)

// trainReport runs train with args plus a report file and returns the summary.
func trainReport(t *testing.T, args ...string) *report.Summary {
	t.Helper()
	rep := filepath.Join(t.TempDir(), "run.jsonl")
	code, _, stderr := gt(t, append([]string{"train", "--report", rep}, args...)...)
	if code != 0 {
		t.Fatalf("train %v: exit %d: %s", args, code, stderr)
	}
	r, err := report.ReadFile(rep)
	if err != nil || r.Summary == nil {
		t.Fatalf("report: %v (summary %v)", err, r)
	}
	return r.Summary
}

// fashionMNIST returns the directory of Debian's Fashion-MNIST files, or
// skips the test when they are not installed.
func fashionMNIST(t *testing.T) string {
	t.Helper()
	dir := "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(filepath.Join(dir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")
	}
	return dir
}

// Issue 2: on Fashion-MNIST, softmax regression with the command
// (other flags at their defaults) reaches at least 84% test accuracy.
func TestAcceptanceFashionMNIST(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := fashionMNIST(t)
	s := trainReport(t, "--train", filepath.Join(dir, "train-images-idx3-ubyte.gz"),
		"--test", filepath.Join(dir, "t10k-images-idx3-ubyte.gz"), "--model", "softmax", "--classes", "10", "--dim", "784")
	t.Logf("Fashion-MNIST: accuracy %.4f, log-loss %.4f, %d examples in %.1fs", s.TestAccuracy, s.TestLogLoss, s.Examples, s.Seconds)
	if s.TestExamples != 10000 || s.TestAccuracy < 0.84 {
		t.Errorf("test accuracy %.4f on %d examples; want >= 0.84 on 10000", s.TestAccuracy, s.TestExamples)
	}
}

// The MLP (one hidden layer of 128 ReLU units) beats softmax regression
// on Fashion-MNIST: at least 86% test accuracy in 5 epochs, where softmax
// reaches 84-85% (scikit-learn's MLPClassifier with 100 units: 87.7% in
// the Fashion-MNIST benchmark table, github.com/zalandoresearch/fashion-mnist).
func TestAcceptanceFashionMNISTMLP(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := fashionMNIST(t)
	s := trainReport(t, "--train", filepath.Join(dir, "train-images-idx3-ubyte.gz"),
		"--test", filepath.Join(dir, "t10k-images-idx3-ubyte.gz"), "--model", "mlp", "--hidden", "128",
		"--lr", "0.05", "--l2", "0", "--epochs", "5")
	t.Logf("Fashion-MNIST MLP: accuracy %.4f, log-loss %.4f, %d examples in %.1fs (%.0f/s)", s.TestAccuracy, s.TestLogLoss, s.Examples, s.Seconds, s.ExamplesPerSec)
	if s.TestExamples != 10000 || s.TestAccuracy < 0.86 {
		t.Errorf("test accuracy %.4f on %d examples; want >= 0.86 on 10000", s.TestAccuracy, s.TestExamples)
	}
}

// Issue 2: on real libsvm data, adagrad with 10 epochs and defaults comes
// within 1 accuracy point and 2% log-loss of liblinear's L2-regularised
// logistic regression (liblinear-train -s 0, C=1; figures from
// ../shared/data/README.md, measured with Debian's liblinear-tools).
func TestAcceptanceLiblinear(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := "../testdata/realdata"
	for _, c := range []struct {
		name              string
		accuracy, logloss float64
	}{
		{"adult", 0.8593, 0.2981},
		{"imdb5k", 0.8640, 0.3290},
	} {
		if acc, ll, ok := liblinear(t, filepath.Join(dir, c.name+".train.gz"), filepath.Join(dir, c.name+".test.gz")); ok {
			t.Logf("%s: liblinear-train -s 0 measured here: accuracy %.4f, log-loss %.4f (README: %.4f, %.4f)", c.name, acc, ll, c.accuracy, c.logloss)
			c.accuracy, c.logloss = acc, ll
		}
		s := trainReport(t, "--train", filepath.Join(dir, c.name+".train.gz"), "--test", filepath.Join(dir, c.name+".test.gz"),
			"--optimizer", "adagrad", "--epochs", "10")
		t.Logf("%s: accuracy %.4f (liblinear %.4f), log-loss %.4f (liblinear %.4f)", c.name, s.TestAccuracy, c.accuracy, s.TestLogLoss, c.logloss)
		if float64(s.TestAccuracy) < c.accuracy-0.01 {
			t.Errorf("%s: accuracy %.4f, more than 1 point below liblinear's %.4f", c.name, s.TestAccuracy, c.accuracy)
		}
		if float64(s.TestLogLoss) > c.logloss*1.02 {
			t.Errorf("%s: log-loss %.4f, more than 2%% above liblinear's %.4f", c.name, s.TestLogLoss, c.logloss)
		}
	}
}

// Issue 2: one epoch over 1M generated rows with 2^24 features reaches a test
// log-loss within 3% of the planted model's (the command).
func TestAcceptanceGenOneEpoch(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := t.TempDir()
	code, _, stderr := gt(t, "gen", "--out", dir, "--rows", "1000000", "--test-rows", "100000", "--features", "16777216", "--fields", "39", "--seed", "1")
	if code != 0 {
		t.Fatalf("gen: %s", stderr)
	}
	meta, err := data.ReadGenMeta(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := trainReport(t, "--train", filepath.Join(dir, "train*.svm"), "--test", meta.TestFile, "--model", "logreg",
		"--dim", "16777216", "--batch", "100", "--epochs", "1", "--lr", "0.1", "--optimizer", "adagrad", "--l2", "1e-6")
	gap := float64(s.TestLogLoss)/meta.PlantedTestLogLoss - 1
	t.Logf("gen 1M: test log-loss %.4f, planted %.4f (gap %.2f%%), %.0f examples/s", s.TestLogLoss, meta.PlantedTestLogLoss, 100*gap, s.ExamplesPerSec)
	if s.Examples != 1000000 || gap > 0.03 {
		t.Errorf("log-loss %.4f is %.2f%% above the planted %.4f (want <= 3%%) after %d examples", s.TestLogLoss, 100*gap, meta.PlantedTestLogLoss, s.Examples)
	}
}

// liblinear trains liblinear's L2-regularised logistic regression (-s 0,
// C=1) on train and returns its test accuracy and log-loss, when Debian's
// liblinear-tools are installed (ok false otherwise).
func liblinear(t *testing.T, train, test string) (accuracy, logloss float64, ok bool) {
	if _, err := exec.LookPath("liblinear-train"); err != nil {
		return 0, 0, false
	}
	dir := t.TempDir()
	gunzip := func(src string) string {
		dst := filepath.Join(dir, strings.TrimSuffix(filepath.Base(src), ".gz"))
		f, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(dst)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, zr); err != nil {
			t.Fatal(err)
		}
		out.Close()
		return dst
	}
	tr, te := gunzip(train), gunzip(test)
	mod, pred := filepath.Join(dir, "model"), filepath.Join(dir, "pred")
	if out, err := exec.Command("liblinear-train", "-s", "0", "-q", tr, mod).CombinedOutput(); err != nil {
		t.Fatalf("liblinear-train: %v: %s", err, out)
	}
	if out, err := exec.Command("liblinear-predict", "-b", "1", te, mod, pred).CombinedOutput(); err != nil {
		t.Fatalf("liblinear-predict: %v: %s", err, out)
	}
	// The prediction file starts with "labels A B", then "predicted pA pB"
	// per test row; the true labels are the test file's first column.
	pl, _ := os.ReadFile(pred)
	tl, _ := os.ReadFile(te)
	preds := strings.Split(strings.TrimSpace(string(pl)), "\n")
	rows := strings.Split(strings.TrimSpace(string(tl)), "\n")
	header := strings.Fields(preds[0])
	if len(header) != 3 || len(preds)-1 != len(rows) {
		t.Fatalf("liblinear-predict output: header %q, %d predictions for %d rows", preds[0], len(preds)-1, len(rows))
	}
	var right int
	for i, row := range rows {
		truth := strings.Fields(row)[0]
		f := strings.Fields(preds[i+1])
		if f[0] == truth {
			right++
		}
		p := 0.0
		for j, lab := range header[1:] {
			if lab == truth {
				p, _ = strconv.ParseFloat(f[1+j], 64)
			}
		}
		logloss -= math.Log(max(p, 1e-15))
	}
	n := float64(len(rows))
	return float64(right) / n, logloss / n, true
}
