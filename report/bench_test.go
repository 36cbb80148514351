package report

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func configNames(cfgs []*Config) []string {
	var s []string
	for _, c := range cfgs {
		s = append(s, c.Name)
	}
	return s
}

func peerIDs(c *Config) []string {
	var s []string
	for _, r := range c.Peers {
		s = append(s, runPeerID(r))
	}
	return s
}

func TestGroupRunsIsStableAndOrderIndependent(t *testing.T) {
	runs := writeFixture(t, t.TempDir(), benchFixture())
	rev := slices.Clone(runs)
	slices.Reverse(rev)
	for _, in := range [][]*Run{runs, rev} {
		cfgs, err := GroupRuns(in)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := configNames(cfgs), []string{"master/sync/b100", "ring/sync/b100"}; !slices.Equal(got, want) {
			t.Fatalf("configurations %v, want %v", got, want)
		}
		if got, want := peerIDs(cfgs[0]), []string{"m1", "m2", "m3", "m4"}; !slices.Equal(got, want) {
			t.Errorf("master peers %v, want %v", got, want)
		}
		if got, want := peerIDs(cfgs[1]), []string{"r1", "r2", "r3", "r4"}; !slices.Equal(got, want) {
			t.Errorf("ring peers %v, want %v", got, want)
		}
	}
}

func TestGroupRunsOrdersTopologiesModesBatches(t *testing.T) {
	mk := func(topo, mode string, batch int) *Run {
		return &Run{Path: topo + mode, Summary: &Summary{Topology: topo, Mode: mode, Batch: batch}}
	}
	cfgs, err := GroupRuns([]*Run{mk("ring", "async", 10), mk("ring", "sync", 1000), mk("master", "ssp", 10),
		mk("ring", "sync", 10), mk("single", "local", 10), mk("master", "sync", 10), mk("star", "sync", 10)})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"single/local/b10", "master/sync/b10", "master/ssp/b10", "ring/sync/b10", "ring/sync/b1000",
		"ring/async/b10", "star/sync/b10"}
	if got := configNames(cfgs); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// The summary's figures win; the start line's flags fill what it lacks.
func TestGroupRunsKeyFromSummaryThenFlags(t *testing.T) {
	cases := []struct {
		name    string
		run     *Run
		want    string
		wantErr string
	}{
		{"summary wins", &Run{Path: "a.jsonl", Start: &Start{Config: map[string]string{"topology": "master", "mode": "async", "batch": "7"}},
			Summary: &Summary{Topology: "ring", Mode: "sync", Batch: 100}}, "ring/sync/b100", ""},
		{"flags fill a bare summary", &Run{Path: "a.jsonl", Start: &Start{Config: map[string]string{"topology": "ring", "mode": "async", "batch": "50"}},
			Summary: &Summary{}}, "ring/async/b50", ""},
		{"crashed peer: flags only", &Run{Path: "a.jsonl", Start: &Start{Config: map[string]string{"topology": "master", "mode": "ssp", "batch": "20"}}},
			"master/ssp/b20", ""},
		{"single-peer train", &Run{Path: "a.jsonl", Start: &Start{Config: map[string]string{"batch": "100", "train": "x.svm"}}, Summary: &Summary{}},
			"single/local/b100", ""},
		{"nothing at all", &Run{Path: "empty.jsonl"}, "", "empty.jsonl has neither a start nor a summary line"},
		{"bad batch flag", &Run{Path: "b.jsonl", Start: &Start{Config: map[string]string{"batch": "ten"}}}, "", `b.jsonl: start line flag batch="ten"`},
		{"no batch anywhere", &Run{Path: "c.jsonl", Summary: &Summary{Topology: "ring", Mode: "sync"}}, "", "c.jsonl: no batch"},
		{"mode missing", &Run{Path: "d.jsonl", Summary: &Summary{Topology: "ring", Batch: 5}}, "", `d.jsonl: topology "ring", mode ""`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfgs, err := GroupRuns([]*Run{c.run})
			if c.wantErr != "" {
				if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want ErrConfig naming %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(cfgs) != 1 || cfgs[0].Name != c.want {
				t.Fatalf("configurations %v, want [%s]", configNames(cfgs), c.want)
			}
		})
	}
}

func TestGroupRunsRefusesAPeerTwice(t *testing.T) {
	a := &Run{Path: "run1/p.jsonl", Summary: &Summary{PeerID: "P", Topology: "ring", Mode: "sync", Batch: 1}}
	b := &Run{Path: "run2/p.jsonl", Summary: &Summary{PeerID: "P", Topology: "ring", Mode: "sync", Batch: 1}}
	_, err := GroupRuns([]*Run{a, b})
	if err == nil || !strings.Contains(err.Error(), "run1/p.jsonl") || !strings.Contains(err.Error(), "run2/p.jsonl") {
		t.Fatalf("error %v, want one naming both files", err)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestSummarizeByHand(t *testing.T) {
	cfgs, err := GroupRuns(writeFixture(t, t.TempDir(), benchFixture()))
	if err != nil {
		t.Fatal(err)
	}
	bs := Summarize(cfgs)
	// See benchFixture for where the figures come from.
	want := []struct {
		name                                         string
		examples                                     int64
		seconds, eps, rps, bpe                       float64
		sent, busiest                                int64
		busiestPeer                                  string
		logloss, testErr, auc                        float64
		curveExamples                                []int64
		curveErr                                     []float64
		peer0NetOut, peer0NetIn, peer0Disk, peer0RSS float64
	}{
		{"master/sync/b100", 4000, 20, 200, 0.5, 2750, 11e6, 8e6, "m1", 0.5, 0.2, 0.8,
			[]int64{2000, 4000}, []float64{0.3, 0.2}, 0.8, 0.2, 0.3, 256 << 20},
		{"ring/sync/b100", 4000, 8, 500, 1.25, 2000, 8e6, 2e6, "r1", 0.48, 0.18, 0.82,
			[]int64{2000, 4000}, []float64{0.28, 0.18}, 0.4, 0.4, 0.6, 128 << 20},
	}
	if len(bs) != len(want) {
		t.Fatalf("%d configurations, want %d", len(bs), len(want))
	}
	for i, w := range want {
		b := bs[i]
		if b.Name != w.name || b.Examples != w.examples || !near(b.Seconds, w.seconds) ||
			!near(float64(b.ExamplesPerSec), w.eps) || !near(float64(b.RoundsPerSec), w.rps) ||
			!near(float64(b.BytesPerExample), w.bpe) || b.BytesSent != w.sent ||
			b.BusiestBytesSent != w.busiest || b.BusiestPeer != w.busiestPeer {
			t.Errorf("%s: examples %d, seconds %g, examples/s %g, rounds/s %g, bytes/example %g, sent %d, busiest %s %d; want %+v",
				b.Name, b.Examples, b.Seconds, b.ExamplesPerSec, b.RoundsPerSec, b.BytesPerExample, b.BytesSent, b.BusiestPeer, b.BusiestBytesSent, w)
		}
		if !near(float64(b.TestLogLoss), w.logloss) || !near(float64(b.TestError), w.testErr) || !near(float64(b.TestAUC), w.auc) {
			t.Errorf("%s: test log-loss %g error %g AUC %g; want %g %g %g", b.Name, b.TestLogLoss, b.TestError, b.TestAUC, w.logloss, w.testErr, w.auc)
		}
		if !b.ModelHashesAgree || len(b.Warnings) != 0 {
			t.Errorf("%s: hashes agree %v, warnings %q; want agreement and no warnings", b.Name, b.ModelHashesAgree, b.Warnings)
		}
		var cx []int64
		var ce []float64
		for _, p := range b.Curve {
			cx = append(cx, p.Examples)
			ce = append(ce, float64(p.TestError))
		}
		if !slices.Equal(cx, w.curveExamples) || !slices.EqualFunc(ce, w.curveErr, near) {
			t.Errorf("%s: curve examples %v errors %v; want %v %v", b.Name, cx, ce, w.curveExamples, w.curveErr)
		}
		p := b.Peers[0]
		if !near(float64(p.NetOutMBps), w.peer0NetOut) || !near(float64(p.NetInMBps), w.peer0NetIn) ||
			!near(float64(p.DiskReadMBps), w.peer0Disk) || float64(p.PeakRSSBytes) != w.peer0RSS || !p.Finished {
			t.Errorf("%s: first peer %+v; want net out %g in %g disk %g MB/s, RSS %g", b.Name, p, w.peer0NetOut, w.peer0NetIn, w.peer0Disk, w.peer0RSS)
		}
	}
}

// A peer without a summary line is kept, with figures from its last round
// line, and the configuration says so.
func TestCrashedPeerIsIncludedWithAWarning(t *testing.T) {
	var specs []peerSpec
	for _, s := range benchFixture() {
		if s.topology == "ring" {
			s.noSummary = s.id == "r1"
			specs = append(specs, s)
		}
	}
	cfgs, err := GroupRuns(writeFixture(t, t.TempDir(), specs))
	if err != nil {
		t.Fatal(err)
	}
	b := Summarize(cfgs)[0]
	p := b.Peers[0]
	if p.PeerID != "r1" || p.Finished || p.Examples != 1000 || p.Seconds != 5 || p.BytesSent != 2e6 ||
		!near(p.WaitSeconds, 0.5) || float64(p.CPUPercent) != 90 || p.Rounds != 10 {
		t.Fatalf("crashed peer %+v; want r1 unfinished with 1000 examples, 5 s, 2 MB sent, 0.5 s waiting, 90%% CPU, 10 rounds", p)
	}
	if b.Examples != 4000 || !near(float64(b.ExamplesPerSec), 500) {
		t.Errorf("examples %d, examples/s %g: want the crashed peer's 1000 counted: 4000 and 500", b.Examples, b.ExamplesPerSec)
	}
	if !near(float64(b.TestError), 0.18) {
		t.Errorf("test error %g from %s: want a finished peer's 0.18", b.TestError, b.Peers[1].PeerID)
	}
	if len(b.Warnings) != 1 || !strings.Contains(b.Warnings[0], "peer r1") || !strings.Contains(b.Warnings[0], "no summary line") {
		t.Fatalf("warnings %q; want one about r1's missing summary", b.Warnings)
	}
}

func TestWarnings(t *testing.T) {
	cases := []struct {
		name   string
		change func(s []peerSpec)
		want   string
	}{
		{"hashes disagree", func(s []peerSpec) { s[3].hash = "cccc" }, "model hashes disagree: the peers ended with different models: bbbb on r1, r2, r3; cccc on r4"},
		{"pubsub drops", func(s []peerSpec) { s[1].dropped = 7 }, "peer r2: gossipsub dropped 7 messages"},
		{"rejected", func(s []peerSpec) { s[2].rejected = 3 }, "peer r3 rejected 3 messages"},
		{"missing reports", func(s []peerSpec) {
			for i := range s {
				s[i].summaryPeers = 6
			}
		}, "4 reports, but the run had 6 peers: the figures miss 2 peers"},
		{"mixed runs", func(s []peerSpec) {
			for i := range s {
				s[i].summaryPeers = 2
			}
		}, "4 reports, but the run had 2 peers: were two runs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var specs []peerSpec
			for i := 1; i <= 4; i++ {
				specs = append(specs, peerSpec{id: "r" + string(rune('0'+i)), topology: "ring", mode: "sync", batch: 10,
					examples: 100, seconds: 1, rounds: 10, hash: "bbbb"})
			}
			c.change(specs)
			cfgs, err := GroupRuns(writeFixture(t, t.TempDir(), specs))
			if err != nil {
				t.Fatal(err)
			}
			b := Summarize(cfgs)[0]
			if len(b.Warnings) != 1 || !strings.Contains(b.Warnings[0], c.want) {
				t.Fatalf("warnings %q; want exactly one containing %q", b.Warnings, c.want)
			}
			if agree := c.name != "hashes disagree"; b.ModelHashesAgree != agree {
				t.Errorf("ModelHashesAgree = %v, want %v", b.ModelHashesAgree, agree)
			}
		})
	}
}

// A peer that left early has a model of its own: its hash is not compared
// (the report used to say "model hashes disagree"), its null metrics are
// not the configuration's, and a warning and its table row say where it
// stopped.
func TestPartialPeerNotCompared(t *testing.T) {
	var specs []peerSpec
	for i := 1; i <= 4; i++ {
		specs = append(specs, peerSpec{id: fmt.Sprintf("r%d", i), topology: "ring", mode: "sync", batch: 10,
			examples: 100, seconds: 1, rounds: 10, hash: "bbbb", evalErr: []float64{0.3, 0.2}})
	}
	specs[0].hash, specs[0].rounds, specs[0].examples, specs[0].stopped = "cccc", 4, 40, "left"
	cfgs, err := GroupRuns(writeFixture(t, t.TempDir(), specs))
	if err != nil {
		t.Fatal(err)
	}
	b := Summarize(cfgs)[0]
	if !b.ModelHashesAgree || b.PartialPeers != 1 {
		t.Errorf("hashes agree %v, partial peers %d; want agreement among the 3 that ran to the end, 1 partial", b.ModelHashesAgree, b.PartialPeers)
	}
	if len(b.Warnings) != 1 || !strings.Contains(b.Warnings[0], "peer r1 stopped early (left) at round 4: its model is partial") {
		t.Errorf("warnings %q: want one saying r1 left at round 4", b.Warnings)
	}
	if !near(float64(b.TestError), 0.2) {
		t.Errorf("test error %v: want a complete peer's 0.2, not the partial peer's null", b.TestError)
	}
	p := b.Peers[0]
	if !p.Partial || p.StoppedAt != 4 || p.Stopped != "left" || !math.IsNaN(float64(p.TestLogLoss)) {
		t.Errorf("partial peer %+v: want partial, stopped at 4 (left), null metrics", p)
	}
	if row := strings.Join(peerRow(p), " "); !strings.Contains(row, "r1 (partial: left at round 4)") {
		t.Errorf("table row %q does not say the peer is partial", row)
	}
}

func TestCompare(t *testing.T) {
	cfgs, err := GroupRuns(writeFixture(t, t.TempDir(), benchFixture()))
	if err != nil {
		t.Fatal(err)
	}
	bs := Summarize(cfgs)
	cmp := Compare(bs)
	if len(cmp) != 1 || !near(float64(cmp[0].ThroughputRatio), 2.5) || !near(float64(cmp[0].BusiestBytesRatio), 4) {
		t.Fatalf("comparisons %+v; want one with throughput ratio 500/200 = 2.5 and bytes ratio 8/2 = 4", cmp)
	}
	const want = "4 peers, sync mode, batch 100: ring throughput is 2.5x master's; the master's busiest peer sent 4.0x the bytes of ring's busiest peer"
	if got := cmp[0].Sentence(); got != want {
		t.Errorf("sentence %q\nwant     %q", got, want)
	}
	bs[1].BusiestBytesSent = 0
	if got := Compare(bs)[0].Sentence(); !strings.Contains(got, "sent n/ax") {
		t.Errorf("with a ring that sent nothing: %q; want the ratio n/a", got)
	}
	if got := Compare(bs[:1]); len(got) != 0 {
		t.Errorf("master alone compared: %+v", got)
	}
}

func TestFmtNum(t *testing.T) {
	cases := []struct {
		in   float64
		want string
	}{{math.NaN(), "-"}, {math.Inf(1), "-"}, {0, "0"}, {1234.4, "1234"}, {100, "100"}, {12.345, "12.35"},
		{1, "1.00"}, {0.5, "0.5000"}, {0.00012, "0.0001"}}
	for _, c := range cases {
		if got := fmtNum(c.in); got != c.want {
			t.Errorf("fmtNum(%g) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestPeerName(t *testing.T) {
	cases := []struct {
		p    BenchPeer
		want string
	}{
		{BenchPeer{PeerID: "12D3KooWLtT7vtFqmRkQ4dEWfJx2jgThpbnKiHChmSXKyrnc3hYz"}, "12*nc3hYz"},
		{BenchPeer{PeerID: "short-id"}, "short-id"},
		{BenchPeer{File: "runs/vm1/ring.jsonl"}, "ring"},
	}
	for _, c := range cases {
		if got := peerName(c.p); got != c.want {
			t.Errorf("peerName(%+v) = %q, want %q", c.p, got, c.want)
		}
	}
}

// A whole job stopped at one round gets one warning, not one per peer.
func TestPartialWarnings(t *testing.T) {
	stopped := func(id string, at int64) BenchPeer {
		return BenchPeer{PeerID: id, Finished: true, Partial: true, Stopped: "job stopped", StoppedAt: at}
	}
	all := partialWarnings([]BenchPeer{stopped("a", 7), stopped("b", 7)})
	if len(all) != 1 || !strings.Contains(all[0], "every peer stopped early (job stopped) at round 7") {
		t.Errorf("every peer stopped at round 7: %q", all)
	}
	mixed := partialWarnings([]BenchPeer{stopped("a", 7), stopped("b", 8), {PeerID: "c", Finished: true}})
	if len(mixed) != 2 || !strings.Contains(mixed[1], "peer b stopped early (job stopped) at round 8") {
		t.Errorf("two peers stopped at different rounds: %q", mixed)
	}
}

// A run without a test set: every peer's summary says 0 test examples and
// 0 for each metric (what a peer writes then); the configuration's test
// figures are undefined, not a perfect log-loss of 0.
func TestNoTestSetLeavesMetricsUndefined(t *testing.T) {
	var specs []peerSpec
	for _, id := range []string{"a", "b"} {
		specs = append(specs, peerSpec{id: id, topology: "ring", mode: "sync", batch: 100, examples: 1000, seconds: 2, rounds: 10, hash: "h"})
	}
	cfgs, err := GroupRuns(writeFixture(t, t.TempDir(), specs))
	if err != nil {
		t.Fatal(err)
	}
	bs := Summarize(cfgs)
	if len(bs) != 1 {
		t.Fatalf("%d configurations, want 1", len(bs))
	}
	for _, m := range []Num{bs[0].TestLogLoss, bs[0].TestError, bs[0].TestAUC, bs[0].TestAccuracy} {
		if !math.IsNaN(float64(m)) {
			t.Errorf("test metrics %+v; want every one undefined (NaN)", bs[0].Metrics)
			break
		}
	}
	if !math.IsNaN(float64(bs[0].Peers[0].TestLogLoss)) {
		t.Errorf("peer's test log-loss %g; want undefined", bs[0].Peers[0].TestLogLoss)
	}
}
