package model_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/sgd"
)

const adultTrain, adultTest = "../testdata/realdata/adult.train.gz", "../testdata/realdata/adult.test.gz"

// trainAdult trains a logreg model on Adult with --dim 2^20 (a sparse
// model: 128 of its rows are set).
func trainAdult(t *testing.T) *model.Model {
	t.Helper()
	oc := model.DefaultOptConfig(model.AdaGrad)
	oc.L2 = 1e-5
	m, err := model.New(model.Logreg, 1<<20, 0, 256, oc)
	if err != nil {
		t.Fatal(err)
	}
	m.OwnAll()
	m.Input = model.Input{Format: "libsvm", SignedLabels: true}
	cfg := sgd.DefaultConfig()
	cfg.Epochs = 2
	opt := data.Options{Dim: m.Dim}
	open := func(int) (data.Source, error) { return data.Open([]string{adultTrain}, opt) }
	if _, err := sgd.Train(context.Background(), m, cfg, open, nil, sgd.Hooks{}); err != nil {
		t.Fatal(err)
	}
	return m
}

// predictRows scores every row of a libsvm file as predict does.
func predictRows(t *testing.T, m *model.Model, path string) [][]float64 {
	t.Helper()
	src, err := data.Open([]string{path}, data.Options{Dim: m.Dim, ZeroBased: m.Input.ZeroBased, NoLabels: true})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	sc := sgd.NewScorer(m)
	var out [][]float64
	var b data.Batch
	for {
		n, err := src.Next(&b, 1000)
		for r := range n {
			idx, val := b.Row(r)
			out = append(out, append([]float64(nil), sc.Row(idx, val, false)...))
		}
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// numpyScores runs testdata/score_export.py on an export and a libsvm file.
func numpyScores(t *testing.T, export, rows string) [][]float64 {
	t.Helper()
	out, err := exec.Command("/usr/bin/python3", "testdata/score_export.py", export, rows).CombinedOutput()
	if err != nil {
		t.Fatalf("score_export.py %s: %v\n%s", filepath.Base(export), err, out)
	}
	var res [][]float64
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var row []float64
		for _, f := range strings.Fields(line) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("score_export.py %s printed %q", filepath.Base(export), line)
			}
			row = append(row, v)
		}
		res = append(res, row)
	}
	return res
}

func needNumpy(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import numpy").Run(); err != nil {
		t.Skip("/usr/bin/python3 has no numpy")
	}
}

// writeExports writes m in every format into dir.
func writeExports(t *testing.T, m *model.Model, dir, name string) []string {
	t.Helper()
	var paths []string
	for _, f := range []struct {
		format model.ExportFormat
		ext    string
	}{{model.ExportNPZ, ".npz"}, {model.ExportJSON, ".json"}, {model.ExportText, ".txt"}} {
		var b bytes.Buffer
		if err := m.Export(&b, f.format); err != nil {
			t.Fatalf("%v: %v", f.format, err)
		}
		p := filepath.Join(dir, name+f.ext)
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// compare fails unless got and want agree to tol everywhere.
func compare(t *testing.T, what string, got, want [][]float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, predict scored %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s row %d: %d values, predict gave %d", what, i+1, len(got[i]), len(want[i]))
		}
		for c := range want[i] {
			worst = max(worst, math.Abs(got[i][c]-want[i][c]))
		}
	}
	t.Logf("%s: %d rows, largest difference from predict %.3g", what, len(want), worst)
	if worst > tol {
		t.Errorf("%s: probabilities differ from predict's by up to %g, want at most %g", what, worst, tol)
	}
}

// Acceptance (issue 33, item 7): a logreg model trained on Adult, exported
// as npz, json and text, read by /usr/bin/python3 with numpy alone
// (testdata/score_export.py), gives predict's probabilities on Adult's
// test set to 1e-6; so do a softmax and an mlp on rows of their own.
func TestExportScoredByNumpy(t *testing.T) {
	needNumpy(t)
	dir := t.TempDir()
	m := trainAdult(t)
	want := predictRows(t, m, adultTest)
	for _, p := range writeExports(t, m, dir, "adult") {
		compare(t, "adult "+filepath.Ext(p), numpyScores(t, p, adultTest), want, 1e-6)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	var rows strings.Builder
	for range 200 {
		for k := range 50 {
			if rng.IntN(4) == 0 {
				fmt.Fprintf(&rows, " %d:%.4g", k, rng.NormFloat64())
			}
		}
		rows.WriteString("\n")
	}
	rowsPath := filepath.Join(dir, "rows.svm")
	os.WriteFile(rowsPath, []byte(rows.String()), 0o644)

	soft, err := model.New(model.Softmax, 50, 4, 8, model.DefaultOptConfig(model.SGD))
	if err != nil {
		t.Fatal(err)
	}
	mlp, err := model.NewMLP(50, 3, 16, 8, model.DefaultOptConfig(model.SGD), 7)
	if err != nil {
		t.Fatal(err)
	}
	for _, mm := range []*model.Model{soft, mlp} {
		for k := range uint32(50) {
			if k%3 == 0 { // rows left zero are not exported
				clear(mm.Row(k))
				continue
			}
			for c := range mm.Row(k) {
				mm.Row(k)[c] = float32(rng.NormFloat64())
			}
		}
		for c := range mm.Row(mm.Bias2()) {
			mm.Row(mm.Bias2())[c] = float32(rng.NormFloat64())
		}
		mm.Input = model.Input{Format: "libsvm", ZeroBased: true}
		want := predictRows(t, mm, rowsPath)
		for _, p := range writeExports(t, mm, dir, mm.Kind.String()) {
			compare(t, mm.Kind.String()+" "+filepath.Ext(p), numpyScores(t, p, rowsPath), want, 1e-6)
		}
	}
}

// The json and npz exports hold what the format's documentation says:
// metadata, the nonzero rows ascending with their indices, the bias; the
// npz arrays carry numpy headers of the documented types and shapes.
func TestExportContents(t *testing.T) {
	m, err := model.New(model.Logreg, 1<<20, 0, 16, model.DefaultOptConfig(model.SGD))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []uint32{7, 3, 1<<20 - 1, 17, 16} {
		m.Row(k)[0] = float32(k) / 4
	}
	m.Row(m.Bias())[0] = -0.5
	m.Input = model.Input{Format: "libsvm", SignedLabels: true}
	var b bytes.Buffer
	if err := m.Export(&b, model.ExportJSON); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Format    string    `json:"format"`
		Kind      string    `json:"kind"`
		Dim       uint64    `json:"dim"`
		Classes   int       `json:"classes"`
		Labels    []int     `json:"labels"`
		ZeroBased bool      `json:"zero_based"`
		Bias      float64   `json:"bias"`
		Index     []uint32  `json:"index"`
		Weight    []float64 `json:"weight"`
	}
	if err := json.Unmarshal(b.Bytes(), &j); err != nil {
		t.Fatalf("%v in %s", err, b.String())
	}
	if j.Format != "gossiptrain-export" || j.Kind != "logreg" || j.Dim != 1<<20 || j.Classes != 2 || fmt.Sprint(j.Labels) != "[-1 1]" ||
		j.Bias != -0.5 || fmt.Sprint(j.Index) != "[3 7 16 17 1048575]" || fmt.Sprint(j.Weight) != "[0.75 1.75 4 4.25 262143.75]" {
		t.Errorf("json export: %+v", j)
	}
	b.Reset()
	if err := m.Export(&b, model.ExportNPZ); err != nil {
		t.Fatal(err)
	}
	z, err := zip.NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	heads := map[string]string{}
	for _, f := range z.File {
		r, _ := f.Open()
		all, _ := io.ReadAll(r)
		if len(all) < 10 || string(all[:8]) != "\x93NUMPY\x01\x00" {
			t.Fatalf("%s is not a .npy file", f.Name)
		}
		n := 10 + int(all[8]) + int(all[9])<<8
		if n%64 != 0 || all[n-1] != '\n' {
			t.Errorf("%s: header of %d bytes, want a multiple of 64 ending in a newline", f.Name, n)
		}
		heads[f.Name] = strings.TrimSpace(string(all[10:n]))
		if f.Name == "index.npy" && fmt.Sprint(all[n:]) != fmt.Sprint([]byte{3, 0, 0, 0, 7, 0, 0, 0, 16, 0, 0, 0, 17, 0, 0, 0, 255, 255, 15, 0}) {
			t.Errorf("index.npy holds %v", all[n:])
		}
	}
	for name, want := range map[string]string{
		"kind.npy":   "{'descr': '<U6', 'fortran_order': False, 'shape': (), }",
		"index.npy":  "{'descr': '<u4', 'fortran_order': False, 'shape': (5,), }",
		"weight.npy": "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }",
		"bias.npy":   "{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
		"labels.npy": "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }",
	} {
		if heads[name] != want {
			t.Errorf("%s header %q, want %q", name, heads[name], want)
		}
	}
	b.Reset()
	if err := m.Export(&b, model.ExportText); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2+5+1 || lines[2] != "3\t0.75" || lines[7] != "1048576\t-0.5" {
		t.Errorf("text export:\n%s", b.String())
	}
	if _, err := model.ParseExportFormat("csv"); err == nil {
		t.Error("ParseExportFormat(csv) accepted")
	}
}
