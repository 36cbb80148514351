package node

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestAdmittedOnlyAfterSameJobHello: Admitted (the gate of every training
// protocol, p2p Config.Admit) admits a peer of this job once its hello
// passed, and never a connected peer of another job, nor one refused at
// the hello for different settings, nor one not connected.
func TestAdmittedOnlyAfterSameJobHello(t *testing.T) {
	log, _ := testLog(t)
	cfg := fastConfig("admit")
	nodes := startCluster(t, 2, cfg, log)
	waitFor(t, 20*time.Second, agreed(nodes))
	a, b := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if !a.Admitted(ctx, b.Self().String()) {
		t.Errorf("a member of the job is not admitted")
	}

	other := fastConfig("another-job")
	o := startNode(t, other, log, "other")
	odd := fastConfig("admit")
	odd.Shards = 128 // refused at the hello: --shards differs
	x := startNode(t, odd, log, "odd")
	for _, n := range []*Node{o, x} {
		if err := n.host.Connect(ctx, peer.AddrInfo{ID: a.Self(), Addrs: a.host.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if a.Admitted(ctx, o.Self().String()) {
		t.Errorf("a peer of another job is admitted")
	}
	if a.Admitted(ctx, x.Self().String()) {
		t.Errorf("a peer refused at the hello is admitted")
	}
	if a.Admitted(ctx, "not a peer id") {
		t.Errorf("a malformed peer ID is admitted")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusals took %v: a finished hello of another job should refuse at once", d)
	}
}
