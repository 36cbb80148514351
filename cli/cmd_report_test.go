package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/report"
)

// writePeerReport writes one peer's report as a peer would: a start line,
// evaluations, round lines and (unless crashed) a summary.
func writePeerReport(t *testing.T, path, id, topo string, examples int64, seconds float64, sent int64, crashed bool) {
	t.Helper()
	w, err := report.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(report.Start{Type: report.TypeStart, PeerID: id, Version: "test",
		Config: map[string]string{"topology": topo, "mode": "sync", "batch": "100", "report": path}})
	m := report.Metrics{TestExamples: 50, TestLogLoss: 0.4, TestError: 0.1, TestAUC: 0.9, TestAccuracy: 0.9}
	w.Write(report.Eval{Type: report.TypeEval, PeerID: id, Examples: examples, Seconds: seconds, Metrics: m})
	for k := int64(1); k <= 4; k++ {
		w.Write(report.Round{Type: report.TypeRound, PeerID: id, Clock: k, Examples: examples * k / 4,
			Seconds: seconds * float64(k) / 4, BytesSent: sent * k / 4, BytesRecv: 1e6 * k / 4})
	}
	if !crashed {
		w.Write(report.Summary{Type: report.TypeSummary, PeerID: id, Examples: examples, Seconds: seconds, Metrics: m,
			Peers: 3, Topology: topo, Mode: "sync", Batch: 100, Rounds: 4, BytesSent: sent, BytesRecv: 1e6, ModelHash: "h"})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// Three master peers (the master sends 9 MB, workers 1 MB; 600 examples
// each; the slowest takes 12 s: 1800/12 = 150 examples/s) and three ring
// peers (3 MB each; slowest 6 s: 300 examples/s; one crashed before its
// summary). Ring throughput is 300/150 = 2.0x master's; the master's busiest
// peer sent 9/3 = 3.0x the bytes of ring's busiest.
func TestReportCommandEndToEnd(t *testing.T) {
	dir := t.TempDir()
	for i, sec := range []float64{10, 10, 12} {
		sent := int64(1e6)
		if i == 0 {
			sent = 9e6
		}
		os.MkdirAll(filepath.Join(dir, "vm", fmt.Sprint(i)), 0o755)
		writePeerReport(t, filepath.Join(dir, "vm", fmt.Sprint(i), "master.jsonl"), fmt.Sprintf("m%d", i+1), "master", 600, sec, sent, false)
	}
	for i, sec := range []float64{4, 4, 6} {
		writePeerReport(t, filepath.Join(dir, fmt.Sprintf("ring-%d.jsonl", i)), fmt.Sprintf("r%d", i+1), "ring", 600, sec, 3e6, i == 2)
	}
	code, out, stderr := gt(t, "report", dir)
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"configuration", "examples/s", "master/sync/b100", "ring/sync/b100",
		"ring throughput is 2.0x master's; the master's busiest peer sent 3.0x the bytes of ring's busiest peer"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| master/sync/b100 | 3 | 1800 | 12.00 | 150 |", "| ring/sync/b100 | 3 | 1800 | 6.00 | 300 |",
		"peer r3", "has no summary line", "| r3 (no summary) | 600 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	var bench []struct {
		Topology       string  `json:"topology"`
		ExamplesPerSec float64 `json:"examples_per_sec"`
		Peers          []struct {
			PeerID    string `json:"peer_id"`
			BytesSent int64  `json:"bytes_sent"`
		} `json:"peers"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, "bench.json"))
	if err := json.Unmarshal(b, &bench); err != nil || len(bench) != 2 || bench[0].ExamplesPerSec != 150 ||
		bench[1].ExamplesPerSec != 300 || len(bench[0].Peers) != 3 || bench[0].Peers[0].BytesSent != 9e6 {
		t.Fatalf("bench.json %s (%v): want master 150 examples/s with m1 sending 9e6 bytes, ring 300", b, err)
	}
	for _, f := range []string{"error_vs_examples", "error_vs_seconds", "throughput", "peer_net_out"} {
		for _, ext := range []string{".png", ".svg"} {
			if st, err := os.Stat(filepath.Join(dir, f+ext)); err != nil || st.Size() == 0 {
				t.Errorf("%s%s: %v; want a non-empty plot", f, ext, err)
			}
		}
	}

	// --out after the paths, with one file given twice.
	other := filepath.Join(dir, "elsewhere")
	ring0 := filepath.Join(dir, "ring-0.jsonl")
	code, out, stderr = gt(t, "report", ring0, ring0, "--out", other)
	if code != 0 || !strings.Contains(out, "ring/sync/b100") {
		t.Fatalf("report FILE FILE --out: exit %d, stdout %q, stderr %s", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(other, "report.md")); err != nil {
		t.Fatalf("--out after the paths: %v", err)
	}
}

func TestReportCommandErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad", "peer.jsonl")
	os.MkdirAll(filepath.Dir(bad), 0o755)
	os.WriteFile(bad, []byte("{\"type\":\"start\",\"config\":{\"batch\":\"1\"}}\n{\"type\":\"round\",\n"), 0o644)
	empty := filepath.Join(dir, "empty")
	os.MkdirAll(empty, 0o755)
	os.WriteFile(filepath.Join(empty, "notes.txt"), []byte("no reports here"), 0o644)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"report"}, 2, "no report files or directories given"},
		{[]string{"report", filepath.Join(dir, "missing")}, 2, "missing: no such file"},
		{[]string{"report", empty}, 2, "no *.jsonl report files"},
		{[]string{"report", filepath.Dir(bad)}, 1, "peer.jsonl:2"},
		{[]string{"report", "--bogus", dir}, 2, "flag provided but not defined: -bogus"},
	}
	for _, c := range cases {
		code, _, stderr := gt(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
}
