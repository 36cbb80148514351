package cluster

import (
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/report"
)

// The cluster table shows a peer's peak memory over its whole life: the
// kernel's count at exit where it is above what the peer's report saw when
// it wrote its summary, and the report's where the process's is unknown.
func TestWholeLifePeaks(t *testing.T) {
	bs := []report.BenchConfig{{Peers: []report.BenchPeer{
		{File: "/runs/r/peer-0.jsonl", PeakRSSBytes: 300 << 20},
		{File: "/runs/r/peer-1.jsonl", PeakRSSBytes: 300 << 20},
		{File: "/runs/r/peer-2.jsonl", PeakRSSBytes: 300 << 20},
	}}}
	res := &Result{Peers: []PeerResult{
		{Report: "/runs/r/peer-0.jsonl", PeakRSS: 2245 << 20},  // grew after its summary
		{Report: "/runs/r/./peer-1.jsonl", PeakRSS: 200 << 20}, // (a sampling the kernel counts lower: kept)
		{Report: "/runs/r/peer-2.jsonl"},                       // unknown (a remote peer)
	}}
	wholeLifePeaks(bs, res, nil)
	for i, want := range []int64{2245 << 20, 300 << 20, 300 << 20} {
		if got := bs[0].Peers[i].PeakRSSBytes; got != want {
			t.Errorf("peer %d: peak %d MiB, want %d MiB", i, got>>20, want>>20)
		}
	}
}

// TestUncappedNote: an uncapped cluster's comparison with one peer alone
// says it was not VMs against one, and suggests a cap that fits the
// machine (4 peers on 2 cores: 0.4 each).
func TestUncappedNote(t *testing.T) {
	n := uncappedNote(4, 2)
	for _, want := range []string{"the 4 peers shared this machine's 2 cores", "gossiptrain cluster --cpus 0.4"} {
		if !strings.Contains(n, want) {
			t.Errorf("note %q lacks %q", n, want)
		}
	}
	if n := uncappedNote(64, 2); strings.Contains(n, "cluster --cpus") {
		t.Errorf("64 peers on 2 cores: note %q suggests a cap that cannot fit", n)
	}
}
