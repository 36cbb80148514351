package trainer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/gossip/memnet"
	"github.com/gossiptrain/gossiptrain/node/train"
)

func newNet(t *testing.T) *memnet.Network {
	t.Helper()
	n, err := memnet.New(memnet.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

func viewOf(peers []string, incs []uint64) func() View {
	return func() View { return View{Peers: peers, Incarnations: incs} }
}

// Peers that start together all bootstrap one first set, the peers that
// answer, whoever probes first; a member of the view that runs no trainer
// (peer-0: it answers no probe) is left out, though its ID is the smallest.
func TestStartersAgreeOnOneFirstSet(t *testing.T) {
	net := newNet(t)
	net.NewNode("peer-0")
	peers := []string{"peer-a", "peer-b", "peer-c", "peer-d"}
	incs := []uint64{1, 2, 3, 4}
	view := viewOf(append([]string{"peer-0"}, peers...), append([]uint64{9}, incs...))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	entries := make([]Entry, len(peers))
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		s := NewStarter(net.NewNode(p), "job", p, train.MemberID(p, incs[i]), zerolog.Nop())
		wg.Go(func() {
			// The coordinator comes last, so the others must wait for it.
			if i == 0 {
				time.Sleep(200 * time.Millisecond)
			}
			entries[i], errs[i] = s.Enter(ctx, view, len(peers), 20*time.Millisecond)
		})
	}
	wg.Wait()
	for i, e := range entries {
		if errs[i] != nil {
			t.Fatalf("%s: %v", peers[i], errs[i])
		}
		if e.Contact != "" || len(e.Initial) != len(peers) {
			t.Fatalf("%s enters with %+v, want the four members as the first set", peers[i], e)
		}
		if !slices.Equal(e.Initial, entries[0].Initial) {
			t.Errorf("%s bootstraps %v, %s %v", peers[i], e.Initial, peers[0], entries[0].Initial)
		}
	}
}

// A peer whose process is not in the set a running member started with (it
// came later, or restarted: a new incarnation) joins through that member;
// a peer that finds only ended members fails.
func TestStarterJoinsARunUnderWay(t *testing.T) {
	net := newNet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := NewStarter(net.NewNode("peer-a"), "job", "peer-a", train.MemberID("peer-a", 1), zerolog.Nop())
	b := NewStarter(net.NewNode("peer-b"), "job", "peer-b", train.MemberID("peer-b", 1), zerolog.Nop())
	if _, err := a.Enter(ctx, viewOf([]string{"peer-a", "peer-b"}, []uint64{1, 1}), 1, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enter(ctx, viewOf([]string{"peer-a", "peer-b"}, []uint64{1, 1}), 1, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	a.Running()
	b.Running()
	// peer-0 would coordinate by its ID, but a run is under way.
	z := NewStarter(net.NewNode("peer-0"), "job", "peer-0", train.MemberID("peer-0", 1), zerolog.Nop())
	e, err := z.Enter(ctx, viewOf([]string{"peer-0", "peer-a", "peer-b"}, []uint64{1, 1, 1}), 1, time.Millisecond)
	if err != nil || e.Contact == "" || e.Initial != nil {
		t.Fatalf("a newcomer enters with %+v, %v: want to join through a running member", e, err)
	}
	// peer-b restarted: same peer ID, a new incarnation (its transport
	// node is named apart here only because memnet names must be unique).
	r := NewStarter(net.NewNode("peer-b-restarted"), "job", "peer-b", train.MemberID("peer-b", 2), zerolog.Nop())
	e, err = r.Enter(ctx, viewOf([]string{"peer-a", "peer-b"}, []uint64{1, 2}), 1, time.Millisecond)
	if err != nil || e.Contact != "peer-a" {
		t.Fatalf("a restarted peer enters with %+v, %v: want to join through peer-a", e, err)
	}
	a.Ended()
	b.Ended()
	y := NewStarter(net.NewNode("peer-y"), "job", "peer-y", train.MemberID("peer-y", 1), zerolog.Nop())
	if _, err := y.Enter(ctx, viewOf([]string{"peer-a", "peer-b", "peer-y"}, []uint64{1, 1, 1}), 1, time.Millisecond); !errors.Is(err, ErrRunEnded) {
		t.Fatalf("a peer that finds only ended members: %v, want ErrRunEnded", err)
	}
}
