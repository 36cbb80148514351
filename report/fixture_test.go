package report

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"
)

// peerSpec is one peer's report in a test fixture: round figures every
// peer would write, and the summary when finished.
type peerSpec struct {
	id                  string
	topology, mode      string
	batch               int
	examples            int64
	seconds             float64
	rounds              int64
	sent, recv          int64
	rss                 int64
	cpu                 float64
	wait                float64
	owned               int
	hash                string
	dropped, rejected   int64
	noSummary           bool      // crashed: start, evals and rounds only
	evalErr             []float64 // test error at evenly spaced evaluations
	flags               map[string]string
	summaryPeers        int // Summary.Peers, 0 means the number of peers of the fixture's config
	noTopologyInSummary bool
	stopped             string            // partial: why it stopped early ("" ran to the end), at round rounds
	effective           map[string]string // Start.Effective
	// training and paused: the summary's TrainingSeconds and
	// PausedSeconds; the eval lines pause in proportion (paused at the last).
	training, paused float64
}

// writeFixture writes a report file per peer into dir and reads them back.
func writeFixture(t *testing.T, dir string, specs []peerSpec) []*Run {
	t.Helper()
	count := map[string]int{}
	for _, s := range specs {
		count[ConfigName(s.topology, s.mode, s.batch)]++
	}
	var runs []*Run
	for i, s := range specs {
		path := filepath.Join(dir, fmt.Sprintf("%02d-%s.jsonl", i, s.id))
		w, err := Create(path)
		if err != nil {
			t.Fatal(err)
		}
		flags := map[string]string{"topology": s.topology, "mode": s.mode, "batch": fmt.Sprint(s.batch),
			"report": path, "train": "data/train-*.svm", "dim": "1024"}
		for k, v := range s.flags {
			flags[k] = v
		}
		w.Write(Start{Type: TypeStart, Time: "2026-01-02T03:04:05Z", PeerID: s.id, Version: "test", Config: flags, Effective: s.effective})
		n := len(s.evalErr)
		for j, e := range s.evalErr {
			frac := float64(j+1) / float64(n)
			w.Write(Eval{Type: TypeEval, PeerID: s.id, Examples: int64(frac * float64(s.examples)), Seconds: frac * s.seconds, Paused: frac * s.paused,
				Metrics: Metrics{TestExamples: 100, TestLogLoss: Num(e + 0.3), TestError: Num(e), TestAUC: Num(1 - e), TestAccuracy: Num(1 - e)}})
		}
		for k := int64(1); k <= s.rounds; k++ {
			frac := float64(k) / float64(s.rounds)
			w.Write(Round{Type: TypeRound, PeerID: s.id, Clock: k, Examples: int64(frac * float64(s.examples)),
				Seconds: frac * s.seconds, BytesSent: int64(frac * float64(s.sent)), BytesRecv: int64(frac * float64(s.recv)),
				WaitSeconds: s.wait / float64(s.rounds),
				Resources:   Resources{CPUPercent: Num(s.cpu), PeakRSSBytes: s.rss}})
		}
		if !s.noSummary {
			peers := s.summaryPeers
			if peers == 0 {
				peers = count[ConfigName(s.topology, s.mode, s.batch)]
			}
			sum := Summary{Type: TypeSummary, PeerID: s.id, Examples: s.examples, Seconds: s.seconds,
				ExamplesPerSec: Num(float64(s.examples) / s.seconds), ModelHash: s.hash,
				Resources: Resources{CPUPercent: Num(s.cpu), PeakRSSBytes: s.rss, DiskReadBytes: 3e6},
				Peers:     peers, Topology: s.topology, Mode: s.mode, Batch: s.batch, Rounds: s.rounds,
				WaitSeconds: s.wait, BytesSent: s.sent, BytesRecv: s.recv, PubsubDropped: s.dropped,
				Rejected: s.rejected, Owned: s.owned, Shards: 256, TrainingSeconds: s.training, PausedSeconds: s.paused}
			if n > 0 {
				e := s.evalErr[n-1]
				sum.Metrics = Metrics{TestExamples: 100, TestLogLoss: Num(e + 0.3), TestError: Num(e), TestAUC: Num(1 - e), TestAccuracy: Num(1 - e)}
			}
			if s.stopped != "" {
				nan := Num(math.NaN())
				sum.Metrics = Metrics{TestLogLoss: nan, TestError: nan, TestAUC: nan, TestAccuracy: nan}
				sum.Partial, sum.StoppedAt, sum.Stopped = true, s.rounds, s.stopped
			}
			if s.noTopologyInSummary {
				sum.Topology, sum.Mode, sum.Batch = "", "", 0
			}
			w.Write(sum)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	return runs
}

// benchFixture is the master-vs-ring benchmark the tests check by hand:
//
//	master/sync/b100: 4 peers x 1000 examples; seconds 10, 10, 10, 20;
//	  m1 (the master) sends 8 MB, the others 1 MB; 10 rounds.
//	  examples/s = 4000/20 = 200; rounds/s = 10/20 = 0.5;
//	  bytes/example = 11e6/4000 = 2750.
//	ring/sync/b100: 4 peers x 1000 examples; seconds 5, 5, 5, 8; each
//	  sends 2 MB; 10 rounds.
//	  examples/s = 4000/8 = 500; rounds/s = 1.25; bytes/example = 2000.
//
// So ring throughput is 2.5x master's, and the master's busiest peer sent
// 8/2 = 4.0x the bytes of ring's busiest peer.
func benchFixture() []peerSpec {
	var specs []peerSpec
	for i, sec := range []float64{10, 10, 10, 20} {
		sent, owned := int64(1e6), 0
		if i == 0 {
			sent, owned = 8e6, 256
		}
		specs = append(specs, peerSpec{id: fmt.Sprintf("m%d", i+1), topology: "master", mode: "sync", batch: 100,
			examples: 1000, seconds: sec, rounds: 10, sent: sent, recv: 2e6, rss: 256 << 20, cpu: 150, wait: 1.5,
			owned: owned, hash: "aaaa", evalErr: []float64{0.3, 0.2}})
	}
	for i, sec := range []float64{5, 5, 5, 8} {
		specs = append(specs, peerSpec{id: fmt.Sprintf("r%d", i+1), topology: "ring", mode: "sync", batch: 100,
			examples: 1000, seconds: sec, rounds: 10, sent: 2e6, recv: 2e6, rss: 128 << 20, cpu: 90, wait: 0.5,
			owned: 64, hash: "bbbb", evalErr: []float64{0.28, 0.18}})
	}
	// Written in an order GroupRuns must not depend on.
	specs[0], specs[6] = specs[6], specs[0]
	return specs
}
