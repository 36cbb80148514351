package report

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Unrelated runs with the same topology, mode and batch are rows of their
// own (issue 33: report DIR1 DIR2 merged them into one row): two lone
// trains, and two cluster runs of one job name written into their own
// directories; one job's reports copied one per directory stay one run.
func TestGroupRunsKeepsRunsApart(t *testing.T) {
	root := t.TempDir()
	dir := func(name string) string {
		d := filepath.Join(root, name)
		os.MkdirAll(d, 0o755)
		return d
	}
	var runs []*Run
	alone := peerSpec{id: "", topology: "single", mode: "local", batch: 100, examples: 1000, seconds: 2, rounds: 0, hash: "aaaa"}
	runs = append(runs, writeFixture(t, dir("alone1"), []peerSpec{alone})...)
	runs = append(runs, writeFixture(t, dir("alone2"), []peerSpec{alone})...)
	job := map[string]string{"job": "cluster"}
	peer := func(id string) peerSpec {
		return peerSpec{id: id, topology: "ring", mode: "sync", batch: 100, examples: 1000, seconds: 2, rounds: 10, hash: "bbbb", flags: job}
	}
	runs = append(runs, writeFixture(t, dir("run1"), []peerSpec{peer("a1"), peer("a2")})...)
	runs = append(runs, writeFixture(t, dir("run2"), []peerSpec{peer("b1"), peer("b2")})...)
	other := map[string]string{"job": "vms"}
	vm := func(id string) peerSpec {
		return peerSpec{id: id, topology: "master", mode: "sync", batch: 100, examples: 1000, seconds: 2, rounds: 10, hash: "cccc", flags: other}
	}
	runs = append(runs, writeFixture(t, dir("vm1"), []peerSpec{vm("v1")})...)
	runs = append(runs, writeFixture(t, dir("vm2"), []peerSpec{vm("v2")})...)

	cfgs, err := GroupRuns(runs)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	peers := map[string]int{}
	for _, c := range cfgs {
		names = append(names, c.Name)
		peers[c.Name] = len(c.Peers)
	}
	want := map[string]int{
		"single/local/b100 (alone1/00-)": 1,
		"single/local/b100 (alone2/00-)": 1,
		"master/sync/b100":               2,
		"ring/sync/b100 (cluster@run1)":  2,
		"ring/sync/b100 (cluster@run2)":  2,
	}
	if len(cfgs) != len(want) {
		t.Fatalf("configurations %q; want %d rows", names, len(want))
	}
	for n, p := range want {
		if !slices.Contains(names, n) || peers[n] != p {
			t.Errorf("configurations %q (peers %v); want %q with %d peers", names, peers, n, p)
		}
	}
	bs := Summarize(cfgs)
	for _, b := range bs {
		if b.Topology == "ring" && b.PeerCount != 2 {
			t.Errorf("%s: %d peers, want its own 2", b.Name, b.PeerCount)
		}
	}
}
