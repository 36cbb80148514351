package sim

import (
	"slices"
	"testing"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

func testNetwork(f Faults) *network {
	r := rng{s: 7}
	return newNetwork(&r, f, func(what, from, to string, m *wire.Core) {})
}

// TestNetworkCleanDelivery: outside the chaos window every message arrives
// once, one step after it was sent, in the order sent; a message a peer
// sends itself arrives in the step it was sent.
func TestNetworkCleanDelivery(t *testing.T) {
	n := testNetwork(Faults{Drop: 1, Dup: 1, Delay: 9}) // (faults that must not act outside chaos)
	for i := range 5 {
		n.post("a", "b", nil, &wire.Core{Round: uint64(i)}, 10, false)
	}
	n.post("a", "a", nil, &wire.Core{Round: 99}, 10, false)
	if got := n.due(10); len(got) != 1 || got[0].msg.Round != 99 {
		t.Fatalf("at step 10: %v, want only the message to itself", got)
	}
	got := n.due(11)
	var rounds []uint64
	for _, m := range got {
		rounds = append(rounds, m.msg.Round)
	}
	if !slices.Equal(rounds, []uint64{0, 1, 2, 3, 4}) {
		t.Fatalf("at step 11: rounds %v, want 0..4 in order", rounds)
	}
	if left := n.due(1000); len(left) != 0 {
		t.Fatalf("%d messages arrived twice", len(left))
	}
}

// TestNetworkChaos: in the chaos window Drop 1 loses every message but a
// peer's own, Dup 1 doubles every one, and Delay d delays each by 1..d+1
// steps, reordering some, while due keeps arrival order.
func TestNetworkChaos(t *testing.T) {
	n := testNetwork(Faults{Drop: 1})
	n.post("a", "b", nil, &wire.Core{}, 0, true)
	n.post("a", "a", nil, &wire.Core{}, 0, true)
	if got := n.due(100); len(got) != 1 || got[0].to != "a" {
		t.Fatalf("Drop 1: %d arrived, want only the message to itself", len(got))
	}
	n = testNetwork(Faults{Dup: 1})
	n.post("a", "b", nil, &wire.Core{}, 0, true)
	if got := n.due(100); len(got) != 2 {
		t.Fatalf("Dup 1: %d copies arrived, want 2", len(got))
	}
	n = testNetwork(Faults{Delay: 4})
	for i := range 200 {
		n.post("a", "b", nil, &wire.Core{Round: uint64(i)}, 0, true)
	}
	got := n.due(1000)
	reordered := false
	for i, m := range got {
		if m.at < 1 || m.at > 5 {
			t.Fatalf("message %d arrives at step %d, want 1..5", m.msg.Round, m.at)
		}
		if i > 0 && m.at < got[i-1].at {
			t.Fatalf("due returns step %d after step %d", m.at, got[i-1].at)
		}
		if i > 0 && m.msg.Round < got[i-1].msg.Round {
			reordered = true
		}
	}
	if len(got) != 200 || !reordered {
		t.Fatalf("%d of 200 arrived, reordered %v", len(got), reordered)
	}
}

// TestNetworkPartition: a partition cuts every pair across its sides both
// ways and no pair within a side; a peer stops hearing the processes cut
// off from it DeadAfter ticks after it last heard them; heal ends it.
func TestNetworkPartition(t *testing.T) {
	n := testNetwork(Faults{})
	peers := []string{"a", "b", "c"}
	run := []*proc{{peer: "a", member: 1}, {peer: "b", member: 2}, {peer: "c", member: 3}}
	n.hear(1, run)
	n.partition(peers, map[string]bool{"c": true})
	for _, pair := range [][2]string{{"a", "c"}, {"c", "a"}, {"b", "c"}, {"c", "b"}} {
		if !n.isCut(pair[0], pair[1]) {
			t.Errorf("%s and %s are not cut", pair[0], pair[1])
		}
	}
	if n.isCut("a", "b") || n.isCut("b", "a") {
		t.Error("a and b, on one side, are cut")
	}
	for tick := 2; tick <= 11; tick++ {
		n.hear(tick, run)
	}
	if got := n.alive(11, 20, "a", run); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("a calls %v alive 10 ticks into the partition, want all (DeadAfter 20)", got)
	}
	if got := n.alive(21, 20, "a", run); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("a calls %v alive 20 ticks after it last heard c, want [1 2]", got)
	}
	n.heal()
	if n.isCut("a", "c") {
		t.Error("heal left a and c cut")
	}
}
