package report

import (
	"bytes"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
)

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// A report written with undefined metrics reads back with them undefined,
// and the public field names are the ones tools read.
func TestRoundTripKeepsNamesAndNulls(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(nopCloser{&buf})
	w.Write(Eval{Type: TypeEval, Examples: 100, Seconds: 1.5, Metrics: Metrics{TestLogLoss: 0.5, TestAUC: Num(math.NaN())}})
	w.Write(Summary{Type: TypeSummary, Examples: 200, ExamplesPerSec: 50, ModelNonzeros: 7, Metrics: Metrics{TestAUC: Num(math.Inf(1))}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{`"type":"eval"`, `"examples":100`, `"seconds":1.5`, `"test_logloss":0.5`, `"test_auc":null`,
		`"type":"summary"`, `"examples_per_sec":50`, `"model_nonzeros":7`, `"bytes_sent":0`, `"cpu_percent":0`} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %s:\n%s", want, text)
		}
	}
	r, err := Read(strings.NewReader(text), "r.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Evals) != 1 || r.Evals[0].Examples != 100 || !math.IsNaN(float64(r.Evals[0].TestAUC)) || r.Summary == nil || r.Summary.Examples != 200 {
		t.Fatalf("read back %+v", r)
	}
}

func TestReadNamesTheBadLine(t *testing.T) {
	_, err := Read(strings.NewReader("{\"type\":\"eval\"}\nnot json\n"), "run.jsonl")
	if err == nil || !strings.Contains(err.Error(), "run.jsonl:2") {
		t.Fatalf("error %v; want it to name run.jsonl:2", err)
	}
}

// CPU use over windows of a few milliseconds is measured, not rounded to
// the kernel's 10ms ticks: it used to read 0% or, on 2 cores, 600%.
func TestSamplerCPUOnShortWindows(t *testing.T) {
	limit := 100*float64(runtime.NumCPU())*1.05 + 1
	x := 0.0
	for i := range 40 {
		s := NewSampler()
		for start := time.Now(); time.Since(start) < 2*time.Millisecond; {
			for j := range 1000 {
				x += math.Sqrt(float64(j))
			}
		}
		pct := float64(s.Sample().CPUPercent)
		if pct <= 0 || pct > limit {
			t.Fatalf("window %d of 2ms spinning: CPU %.1f%%, want above 0 and at most %.0f%% (%d CPUs)", i, pct, limit, runtime.NumCPU())
		}
	}
	if x == 0 {
		t.Fatal("no work done")
	}
}

func TestSamplerReadsThisProcess(t *testing.T) {
	s := NewSampler()
	// Burn 5ms of CPU.
	x := 0.0
	for start := processCPU(); processCPU()-start < 5*time.Millisecond; {
		for i := 0; i < 1_000_000; i++ {
			x += math.Sqrt(float64(i))
		}
	}
	r := s.Sample()
	if r.PeakRSSBytes <= 0 || float64(r.CPUPercent) <= 0 || x == 0 {
		t.Fatalf("sample %+v: want positive peak RSS and CPU", r)
	}
}
