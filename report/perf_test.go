package report

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkRead measures parsing a long run's report: a round line per
// round, as the distributed loop writes them (the bulk of a report file).
func BenchmarkRead(b *testing.B) {
	var buf bytes.Buffer
	w := NewWriter(nopCloser{&buf})
	const rounds = 10000
	for k := int64(1); k <= rounds; k++ {
		w.Write(Round{Type: TypeRound, PeerID: "12D3KooWExamplePeer", Clock: k, Examples: 100 * k, Seconds: float64(k) / 50,
			BytesSent: 4000 * k, BytesRecv: 3900 * k, WaitSeconds: 0.001, Resources: Resources{CPUPercent: 97.5, PeakRSSBytes: 1 << 28}})
	}
	w.Close()
	data := buf.Bytes()
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		r, err := Read(bytes.NewReader(data), "bench.jsonl")
		if err != nil || len(r.Rounds) != rounds {
			b.Fatalf("read %d rounds, err %v", len(r.Rounds), err)
		}
	}
	b.ReportMetric(float64(rounds)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

// BenchmarkSummarize measures the figures of 8 configurations of 16 peers,
// each with 100 evaluations and 1000 round lines.
func BenchmarkSummarize(b *testing.B) {
	var runs []*Run
	for c := 0; c < 8; c++ {
		for p := 0; p < 16; p++ {
			r := &Run{Path: fmt.Sprintf("c%d-p%d.jsonl", c, p)}
			for k := int64(1); k <= 1000; k++ {
				r.Rounds = append(r.Rounds, Round{Clock: k, Examples: 100 * k, Seconds: float64(k), BytesSent: 10 * k})
			}
			for k := int64(1); k <= 100; k++ {
				r.Evals = append(r.Evals, Eval{Examples: 1000 * k, Seconds: float64(10 * k), Metrics: Metrics{TestError: 0.2}})
			}
			r.Summary = &Summary{PeerID: fmt.Sprintf("peer%02d", p), Examples: 100000, Seconds: 1000, Topology: "ring",
				Mode: "sync", Batch: 1 << c, Rounds: 1000, BytesSent: 10000, Metrics: Metrics{TestExamples: 1, TestError: 0.2}}
			runs = append(runs, r)
		}
	}
	cfgs, err := GroupRuns(runs)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if bs := Summarize(cfgs); len(bs) != 8 {
			b.Fatalf("%d configurations", len(bs))
		}
	}
	b.ReportMetric(float64(len(runs))*float64(b.N)/b.Elapsed().Seconds(), "peer-reports/s")
}
