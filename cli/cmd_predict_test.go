package cli

import (
	"bytes"
	"compress/gzip"
	bin "encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/report"
)

// evalJSON runs eval and decodes its JSON line.
func evalJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	code, out, stderr := gt(t, append([]string{"eval"}, args...)...)
	if code != 0 {
		t.Fatalf("eval %v: exit %d: %s", args, code, stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("eval output %q: %v", out, err)
	}
	return m
}

// predictions runs predict and parses its lines.
func predictions(t *testing.T, args ...string) [][]float64 {
	t.Helper()
	code, out, stderr := gt(t, append([]string{"predict"}, args...)...)
	if code != 0 {
		t.Fatalf("predict %v: exit %d: %s", args, code, stderr)
	}
	return parsePredictions(t, out)
}

func parsePredictions(t *testing.T, out string) [][]float64 {
	t.Helper()
	var rows [][]float64
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var row []float64
		for _, f := range strings.Fields(line) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("prediction line %q: %v", line, err)
			}
			row = append(row, v)
		}
		rows = append(rows, row)
	}
	return rows
}

// binaryMetrics computes log-loss (clamped as eval clamps) and AUC (ties
// count half) from P(y=1) and 0/1 labels, independently of package sgd.
func binaryMetrics(p []float64, y []int) (logloss, auc float64) {
	for i := range p {
		q := p[i]
		if y[i] == 0 {
			q = 1 - p[i]
		}
		logloss -= math.Log(min(max(q, 1e-15), 1-1e-15))
	}
	idx := make([]int, len(p))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmpFloat(p[a], p[b]) })
	// Rank-sum with average ranks for ties.
	var pos, rankSum float64
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && p[idx[j]] == p[idx[i]] {
			j++
		}
		avg := float64(i+j+1) / 2
		for k := i; k < j; k++ {
			if y[idx[k]] == 1 {
				pos++
				rankSum += avg
			}
		}
		i = j
	}
	neg := float64(len(p)) - pos
	return logloss / float64(len(p)), (rankSum - pos*(pos+1)/2) / (pos * neg)
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// readLibSVM returns the labels of a libsvm file (plain or .gz) and its
// lines without them.
func readLibSVM(t *testing.T, path string) (labels []string, unlabelled string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	b, _ := io.ReadAll(r)
	var sb strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		label, rest, _ := strings.Cut(line, " ")
		labels = append(labels, label)
		sb.WriteString(rest + "\n")
	}
	return labels, sb.String()
}

// Acceptance (issue 12): predict's probabilities give the AUC and log-loss
// eval reports, to 1e-6, on libsvm, gzipped and IDX input, labelled and
// unlabelled, one line per row in input order; eval --predictions writes
// the same lines.
func TestPredictMatchesEval(t *testing.T) {
	dir := t.TempDir()
	train, test := "../testdata/realdata/adult.train.gz", "../testdata/realdata/adult.test.gz"
	m := filepath.Join(dir, "adult.gt")
	if code, _, stderr := gt(t, "train", "--train", train, "--epochs", "2", "--save", m); code != 0 {
		t.Fatalf("train: %s", stderr)
	}
	ev := evalJSON(t, "--model", m, "--test", test)
	labels, unlabelled := readLibSVM(t, test)
	y := make([]int, len(labels))
	for i, l := range labels {
		if l == "+1" || l == "1" {
			y[i] = 1
		}
	}
	plain := filepath.Join(dir, "adult.test")
	gz, _ := os.ReadFile(test)
	zr, _ := gzip.NewReader(bytes.NewReader(gz))
	raw, _ := io.ReadAll(zr)
	os.WriteFile(plain, raw, 0o644)
	nolab := filepath.Join(dir, "adult-nolabels.test")
	os.WriteFile(nolab, []byte(unlabelled), 0o644)

	var first [][]float64
	for _, in := range []string{test, plain, nolab} {
		rows := predictions(t, "--model", m, "--data", in)
		if len(rows) != len(y) {
			t.Fatalf("%s: %d prediction lines for %d rows", in, len(rows), len(y))
		}
		p := make([]float64, len(rows))
		for i, r := range rows {
			if len(r) != 1 || r[0] < 0 || r[0] > 1 {
				t.Fatalf("%s line %d: %v, want one probability", in, i+1, r)
			}
			p[i] = r[0]
		}
		ll, auc := binaryMetrics(p, y)
		t.Logf("%s: log-loss %.8f (eval %.8f), AUC %.8f (eval %.8f)", filepath.Base(in), ll, ev["test_logloss"], auc, ev["test_auc"])
		if math.Abs(ll-ev["test_logloss"].(float64)) > 1e-6 || math.Abs(auc-ev["test_auc"].(float64)) > 1e-6 {
			t.Errorf("%s: predictions give log-loss %.8f and AUC %.8f; eval reports %v and %v", in, ll, auc, ev["test_logloss"], ev["test_auc"])
		}
		if first == nil {
			first = rows
		} else if !slices.EqualFunc(first, rows, slices.Equal) {
			t.Errorf("%s: predictions differ from the gzipped labelled file's", in)
		}
	}
	// eval --predictions writes the same lines; --raw writes logits.
	evp := filepath.Join(dir, "eval.pred")
	evalJSON(t, "--model", m, "--test", test, "--predictions", evp)
	b, _ := os.ReadFile(evp)
	if got := parsePredictions(t, string(b)); !slices.EqualFunc(first, got, slices.Equal) {
		t.Errorf("eval --predictions wrote other numbers than predict")
	}
	rawRows := predictions(t, "--model", m, "--data", nolab, "--raw")
	for i, r := range rawRows {
		if p := 1 / (1 + math.Exp(-r[0])); math.Abs(p-first[i][0]) > 1e-12 {
			t.Fatalf("line %d: --raw %v gives P %v, predict says %v", i+1, r[0], p, first[i][0])
		}
	}
	// --out writes the same to a file.
	out := filepath.Join(dir, "p.txt")
	if code, _, stderr := gt(t, "predict", "--model", m, "--data", test, "--out", out); code != 0 {
		t.Fatal(stderr)
	}
	b, _ = os.ReadFile(out)
	if got := parsePredictions(t, string(b)); !slices.EqualFunc(first, got, slices.Equal) {
		t.Errorf("--out wrote other numbers")
	}
}

// writeIDX writes an IDX images file (and labels file, if labels is not
// nil) of n images of rows x cols pixels.
func writeIDX(t *testing.T, images, labelsPath string, pix [][]byte, labels []byte, rows, cols int) {
	t.Helper()
	var b bytes.Buffer
	for _, v := range []uint32{0x803, uint32(len(pix)), uint32(rows), uint32(cols)} {
		bin.Write(&b, bin.BigEndian, v)
	}
	for _, p := range pix {
		b.Write(p)
	}
	os.WriteFile(images, b.Bytes(), 0o644)
	if labels == nil {
		return
	}
	b.Reset()
	bin.Write(&b, bin.BigEndian, uint32(0x801))
	bin.Write(&b, bin.BigEndian, uint32(len(labels)))
	b.Write(labels)
	os.WriteFile(labelsPath, b.Bytes(), 0o644)
}

// On IDX images (softmax over 3 classes, and an MLP), predict writes one
// line of class probabilities per image, with or without a labels file,
// whose log-loss and accuracy are eval's.
func TestPredictIDXMulticlass(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	const n, side = 600, 4
	pix := make([][]byte, n)
	labels := make([]byte, n)
	for i := range pix {
		c := byte(rng.IntN(3))
		p := make([]byte, side*side)
		for j := range p {
			if rng.IntN(3) == 0 || j%3 == int(c) {
				p[j] = byte(rng.IntN(256))
			}
		}
		pix[i], labels[i] = p, c
	}
	images := filepath.Join(dir, "train-images-idx3-ubyte")
	writeIDX(t, images, filepath.Join(dir, "train-labels-idx1-ubyte"), pix, labels, side, side)
	alone := filepath.Join(dir, "alone")
	os.Mkdir(alone, 0o755)
	unlabelled := filepath.Join(alone, "t-images-idx3-ubyte")
	writeIDX(t, unlabelled, "", pix, nil, side, side)
	for _, kind := range []string{"softmax", "mlp"} {
		m := filepath.Join(dir, kind+".gt")
		args := []string{"train", "--train", images, "--model", kind, "--epochs", "3", "--save", m}
		if kind == "mlp" {
			args = append(args, "--hidden", "8")
		}
		if code, _, stderr := gt(t, args...); code != 0 {
			t.Fatalf("train %s: %s", kind, stderr)
		}
		ev := evalJSON(t, "--model", m, "--test", images)
		for _, in := range []string{images, unlabelled} {
			rows := predictions(t, "--model", m, "--data", in)
			if len(rows) != n {
				t.Fatalf("%s %s: %d lines for %d images", kind, in, len(rows), n)
			}
			var ll float64
			right := 0
			for i, r := range rows {
				if len(r) != 3 {
					t.Fatalf("%s line %d: %v, want 3 probabilities", kind, i+1, r)
				}
				ll -= math.Log(min(max(r[labels[i]], 1e-15), 1-1e-15))
				best := 0
				for c := range r {
					if r[c] > r[best] {
						best = c
					}
				}
				if best == int(labels[i]) {
					right++
				}
			}
			ll /= n
			acc := float64(right) / n
			if math.Abs(ll-ev["test_logloss"].(float64)) > 1e-6 || math.Abs(acc-ev["test_accuracy"].(float64)) > 1e-9 {
				t.Errorf("%s %s: predictions give log-loss %.8f accuracy %.4f; eval %v %v", kind, filepath.Base(in), ll, acc, ev["test_logloss"], ev["test_accuracy"])
			}
		}
	}
}

// inspect describes a model, and what the file records makes eval and
// predict warn when told to read the input otherwise.
func TestInspect(t *testing.T) {
	dir := t.TempDir()
	svm := filepath.Join(dir, "a.svm")
	os.WriteFile(svm, []byte("1 1:1 3:2\n0 2:1 3:1\n1 1:1\n0 2:1 3:3\n"), 0o644)
	m := filepath.Join(dir, "m.gt")
	if code, _, stderr := gt(t, "train", "--train", svm, "--epochs", "4", "--save", m, "--zero-based"); code != 0 {
		t.Fatal(stderr)
	}
	code, out, stderr := gt(t, "inspect", m, "--json")
	if code != 0 {
		t.Fatal(stderr)
	}
	var info modelInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatal(err)
	}
	if info.Kind != "logreg" || info.Dim != 4 || info.Examples != 16 || info.Rounds != 4 || info.InputFormat != "libsvm" ||
		info.ZeroBased == nil || !*info.ZeroBased || !strings.Contains(info.Flags, "--zero-based=true") || len(info.Largest) == 0 || len(info.ModelHash) != 16 {
		t.Errorf("inspect --json: %+v", info)
	}
	code, text, _ := gt(t, "inspect", m)
	for _, want := range []string{"kind", "logreg", "input", "format libsvm, zero-based true", "model_hash", info.ModelHash, "largest weights"} {
		if code != 0 || !strings.Contains(text, want) {
			t.Errorf("inspect text lacks %q:\n%s", want, text)
		}
	}
	// An old-version model file loads and says its input is unknown.
	code, text, _ = gt(t, "inspect", "../model/testdata/v1-logreg.gt")
	if code != 0 || !strings.Contains(text, "format unknown, zero-based unknown") {
		t.Errorf("inspect of a version 1 file: exit %d\n%s", code, text)
	}
	mod, err := model.LoadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	var warn bytes.Buffer
	infer.WarnInput(zerolog.New(&warn), mod, m, svm, data.FormatAuto, true, false)
	if warn.Len() != 0 {
		t.Errorf("reading as trained: warnings %s", warn.String())
	}
	infer.WarnInput(zerolog.New(&warn), mod, m, svm, data.FormatAuto, false, true)
	if !strings.Contains(warn.String(), "--zero-based differs") {
		t.Errorf("--zero-based=false on a zero-based model: no warning (%s)", warn.String())
	}
	warn.Reset()
	infer.WarnInput(zerolog.New(&warn), mod, m, "x-images-idx3-ubyte", data.FormatAuto, true, false)
	if !strings.Contains(warn.String(), "trained on libsvm input and this is idx") {
		t.Errorf("IDX input for a libsvm model: no warning (%s)", warn.String())
	}
	// predict reads a zero-based model's input zero-based unless told.
	rows := predictions(t, "--model", m, "--data", svm)
	if len(rows) != 4 {
		t.Errorf("%d rows", len(rows))
	}
}

// A model trained on standardised features (--scale auto, the default on
// numeric data) is saved in the raw features' units: eval of the saved
// file on the raw test rows reports the metrics of train's last
// evaluation.
func TestScaledModelSavesRawUnits(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 8))
	var b strings.Builder
	for range 300 {
		x1, x2, x3 := 1000+300*rng.NormFloat64(), 0.05+0.01*rng.NormFloat64(), float64(rng.IntN(2))
		z := (x1-1000)/300 - (x2-0.05)/0.01 + x3 + 0.5*rng.NormFloat64()
		y := 0
		if z > 0 {
			y = 1
		}
		fmt.Fprintf(&b, "%d 1:%.3f 2:%.5f", y, x1, x2)
		if x3 != 0 {
			b.WriteString(" 3:1")
		}
		b.WriteString("\n")
	}
	svm := filepath.Join(dir, "num.svm")
	os.WriteFile(svm, []byte(b.String()), 0o644)
	m, rep := filepath.Join(dir, "m.gt"), filepath.Join(dir, "r.jsonl")
	// --holdout off: every row trained on, so the fit to the training
	// rows (the test set here) is the whole data's.
	if code, _, stderr := gt(t, "train", "--train", svm, "--test", svm, "--holdout", "off", "--save", m, "--report", rep); code != 0 {
		t.Fatal(stderr)
	}
	r, err := report.ReadFile(rep)
	if err != nil || r.Summary == nil {
		t.Fatalf("report: %v", err)
	}
	ev := evalJSON(t, "--model", m, "--test", svm)
	if got, want := ev["test_logloss"].(float64), float64(r.Summary.TestLogLoss); math.Abs(got-want) > 1e-5*want {
		t.Errorf("eval of the saved model: log-loss %v; train's last evaluation %v", got, want)
	}
	if got, want := ev["test_accuracy"].(float64), float64(r.Summary.TestAccuracy); got != want || want < 0.9 {
		t.Errorf("eval of the saved model: accuracy %v; train's last evaluation %v (want >= 0.9)", got, want)
	}
	if ev["model_hash"] != nil && ev["model_hash"] != r.Summary.ModelHash {
		t.Errorf("model_hash %v, report %v", ev["model_hash"], r.Summary.ModelHash)
	}
}
