package train_test

import (
	"fmt"
	"testing"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// TestWindowRoundAllocations pins what a steady-state round of windowed
// peers allocates (the product rule: hot loops allocate nothing in steady
// state): 4 sync peers, windows of 1, 4 and 16 batches of 1,000 bench-like
// rows, every message through the wire codec as in BenchmarkWindowRound.
// What is left is a fixed number a message, whatever the rows: the
// messages themselves, which the driver and the receiving core keep
// (wire.Core and its decoded slices, a request, a contribution, an
// answer's values), and a push's five slices (worker.sizeParts). A round
// allocated 165 times a peer at commit 9ceb297 (a slice per Ready, the
// owners' list, each owner's part in four slices of its own, lists of
// shards grown one append at a time, the batch's keys copied).
func TestWindowRoundAllocations(t *testing.T) {
	if train.RaceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	const peers, maxPerPeer = 4, 80
	for _, h := range []int{1, 4, 16} {
		t.Run(fmt.Sprintf("h=%d", h), func(t *testing.T) {
			rn := newRoundNet(t, train.Sync, peers, h, wire.F32, 1<<20)
			rn.runTo(8)
			allocs := testing.AllocsPerRun(20, func() { rn.runTo(rn.round() + 1) })
			t.Logf("%v allocations a round, %.1f a peer", allocs, allocs/peers)
			if allocs/peers > maxPerPeer {
				t.Errorf("a round of %d peers, windows of %d batches: %v allocations, %.1f a peer; want at most %d a peer", peers, h, allocs, allocs/peers, maxPerPeer)
			}
		})
	}
}
