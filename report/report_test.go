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

// CPU use is measured with the scheduler's precision, not in the kernel's
// 10ms ticks (windows of a few milliseconds read 0% or, on 2 cores, 600%),
// and a window too short to measure is reported as unknown.
func TestSamplerCPU(t *testing.T) {
	spin := func(d time.Duration) float64 {
		x := 0.0
		for start := time.Now(); time.Since(start) < d; {
			for j := range 1000 {
				x += math.Sqrt(float64(j))
			}
		}
		return x
	}
	for i := range 10 {
		s := NewSampler()
		spin(2 * time.Millisecond)
		if pct := float64(s.Sample().CPUPercent); !math.IsNaN(pct) {
			t.Fatalf("window %d of 2ms: CPU %.1f%%, want unknown (NaN): too short to measure", i, pct)
		}
	}
	limit := 100*float64(runtime.NumCPU())*1.1 + 1
	for i := range 3 {
		s := NewSampler()
		spin(minCPUWindow + 20*time.Millisecond)
		if pct := float64(s.Sample().CPUPercent); !(pct > 0 && pct <= limit) {
			t.Fatalf("window %d of %v spinning: CPU %.1f%%, want above 0 and at most %.0f%% (%d CPUs)",
				i, minCPUWindow+20*time.Millisecond, pct, limit, runtime.NumCPU())
		}
	}
	if got := (Resources{CPUPercent: Num(math.NaN())}).String(); !strings.HasPrefix(got, "cpu -,") {
		t.Errorf("unknown CPU formats as %q", got)
	}
}

func TestSamplerReadsThisProcess(t *testing.T) {
	s := NewSampler()
	// Burn CPU over a window long enough to measure.
	x := 0.0
	for start := time.Now(); time.Since(start) < minCPUWindow; {
		for i := 0; i < 100_000; i++ {
			x += math.Sqrt(float64(i))
		}
	}
	r := s.Sample()
	if r.PeakRSSBytes <= 0 || !(float64(r.CPUPercent) > 0) || x == 0 {
		t.Fatalf("sample %+v: want positive peak RSS and CPU", r)
	}
}

// Frequent (every round) reads /proc at most once a second: within that,
// memory figures repeat; Sample reads them again; CPU is always current.
func TestSamplerFrequentReusesProcFigures(t *testing.T) {
	s := NewSampler()
	first := s.Frequent()
	if first.PeakRSSBytes <= 0 {
		t.Fatalf("first Frequent %+v: want the peak RSS read", first)
	}
	grow := make([]byte, 64<<20)
	for i := 0; i < len(grow); i += 4096 {
		grow[i] = 1 // a byte a page: resident
	}
	s.procAt = time.Now() // as if read just now (touching 64 MiB can take a second under -race on a loaded VM)
	if r := s.Frequent(); r.PeakRSSBytes != first.PeakRSSBytes {
		t.Errorf("Frequent within %v after 64 MiB more: peak RSS %d, want the cached %d", procEvery, r.PeakRSSBytes, first.PeakRSSBytes)
	}
	if r := s.Sample(); r.PeakRSSBytes < first.PeakRSSBytes+32<<20 {
		t.Errorf("Sample after 64 MiB more: peak RSS %d, want at least %d", r.PeakRSSBytes, first.PeakRSSBytes+32<<20)
	}
	s.procAt = s.procAt.Add(-procEvery)
	if r := s.Frequent(); r.PeakRSSBytes < first.PeakRSSBytes+32<<20 {
		t.Errorf("Frequent %v later: peak RSS %d, want it read again (at least %d)", procEvery, r.PeakRSSBytes, first.PeakRSSBytes+32<<20)
	}
	runtime.KeepAlive(grow)
}
