package report

import (
	"bytes"
	"strings"
	"testing"
)

// With a lone peer's run beside the cluster's, the table says how the
// busiest peer's peak memory compares with it.
func TestClusterTableMemoryLine(t *testing.T) {
	alone := BenchConfig{Name: "single/local/b100", Topology: "single", PeerCount: 1,
		Peers: []BenchPeer{{PeakRSSBytes: 1000 << 20}}}
	ring := BenchConfig{Name: "ring/sync/b100/4p", Topology: "ring", PeerCount: 4, Scaling: Scaling{Baseline: alone.Name}, Workers: 4,
		Peers: []BenchPeer{{PeakRSSBytes: 300 << 20}, {PeakRSSBytes: 370 << 20}, {PeakRSSBytes: 310 << 20}, {PeakRSSBytes: 290 << 20}}}
	var out bytes.Buffer
	if err := WriteClusterTable(&out, []BenchConfig{ring, alone}, Planted{}); err != nil {
		t.Fatal(err)
	}
	if want := "peak memory: the busiest peer 370 MiB, 37% of one peer alone's 1000 MiB"; !strings.Contains(out.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, out.String())
	}
}
