package trainer

import (
	"context"
	"errors"
	"slices"
	"strings"
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
	// The other running member is its fallback, should the contact go
	// silent while it joins.
	if want := map[string]string{"peer-a": "peer-b", "peer-b": "peer-a"}[e.Contact]; !slices.Equal(e.Contacts, []string{want}) {
		t.Errorf("a newcomer joining through %s has the fallbacks %v, want [%s]", e.Contact, e.Contacts, want)
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

// modPlace gives shard s to the (s mod n)-th of n peers.
type modPlace []string

func (p modPlace) Owners(s int) []string { return []string{p[s%len(p)]} }

func placeMod(members []string) (train.Placement, error) { return modPlace(members), nil }

// enterAll runs a starter per peer with --resume (--resume=auto with
// orStart) and the given points.
func enterAll(t *testing.T, peers []string, points map[string][]ResumePoint, orStart bool) ([]Entry, []error) {
	t.Helper()
	net := newNet(t)
	incs := make([]uint64, len(peers))
	for i := range incs {
		incs[i] = uint64(i + 1)
	}
	view := viewOf(peers, incs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entries := make([]Entry, len(peers))
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		s := NewStarter(net.NewNode(p), "job", p, train.MemberID(p, incs[i]), zerolog.Nop())
		s.SetResume(points[p], placeMod, 6, orStart)
		wg.Go(func() { entries[i], errs[i] = s.Enter(ctx, view, len(peers), 10*time.Millisecond) })
	}
	wg.Wait()
	return entries, errs
}

// Peers started with --resume agree on the newest checkpoint round that
// every worker of it has, whole: a round one peer did not finish writing
// is passed over; with none anywhere, --resume=auto starts a new run.
func TestStartersResumeFromTheNewestCompleteCheckpoint(t *testing.T) {
	peers := []string{"peer-a", "peer-b", "peer-c"}
	pt := func(r uint64, shards ...int) ResumePoint {
		return ResumePoint{Round: r, Members: peers, Shards: shards}
	}
	full := map[string][]ResumePoint{
		"peer-a": {pt(40, 0, 3), pt(80, 0, 3)},
		"peer-b": {pt(40, 1, 4), pt(80, 1, 4)},
		"peer-c": {pt(40, 2, 5), pt(80, 2, 5)},
	}
	for _, tc := range []struct {
		name   string
		points map[string][]ResumePoint
		want   uint64
	}{
		{"all have 80", full, 80},
		{"peer-c was killed writing 80", map[string][]ResumePoint{"peer-a": full["peer-a"], "peer-b": full["peer-b"], "peer-c": full["peer-c"][:1]}, 40},
		{"no checkpoint anywhere, --resume=auto", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries, errs := enterAll(t, peers, tc.points, true)
			for i, e := range entries {
				if errs[i] != nil {
					t.Fatalf("%s: %v", peers[i], errs[i])
				}
				if len(e.Initial) != 3 || e.Resume != tc.want {
					t.Errorf("%s enters with %+v, want the 3 peers resuming at round %d", peers[i], e, tc.want)
				}
			}
		})
	}
}

// When no round is whole (a peer's file lacks a shard the placement gives
// it), every peer fails, with a message naming the peer and the shards.
func TestStartersRefuseAnIncompleteCheckpoint(t *testing.T) {
	peers := []string{"peer-a", "peer-b", "peer-c"}
	pts := map[string][]ResumePoint{
		"peer-a": {{Round: 40, Members: peers, Shards: []int{0, 3}}},
		"peer-b": {{Round: 40, Members: peers, Shards: []int{1}}},
		"peer-c": {{Round: 40, Members: peers, Shards: []int{2, 5}}},
	}
	_, errs := enterAll(t, peers, pts, false)
	for i, err := range errs {
		if !errors.Is(err, ErrCannotResume) || !strings.Contains(err.Error(), "peer-b lacks shards [4] of round 40") {
			t.Errorf("%s: %v, want ErrCannotResume naming peer-b's missing shard 4", peers[i], err)
		}
	}
}

// A peer still reading its checkpoints (its starter made, SetResume not
// called yet) is waited for, not judged to have none: the coordinator once
// failed the whole resume with "has no checkpoint of round 434" because
// that peer answered its probe before it had listed its files
// (TestE2ERestartFromCheckpoint/async, seen once in CI).
func TestStartersWaitForAPeerStillReadingItsCheckpoints(t *testing.T) {
	peers := []string{"peer-a", "peer-b", "peer-c"}
	pts := map[string][]ResumePoint{
		"peer-a": {{Round: 40, Members: peers, Shards: []int{0, 3}}},
		"peer-b": {{Round: 40, Members: peers, Shards: []int{1, 4}}},
		"peer-c": {{Round: 40, Members: peers, Shards: []int{2, 5}}},
	}
	net := newNet(t)
	view := viewOf(peers, []uint64{1, 1, 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ss []*Starter
	for _, p := range peers {
		ss = append(ss, NewStarter(net.NewNode(p), "job", p, train.MemberID(p, 1), zerolog.Nop()))
	}
	entries := make([]Entry, len(peers))
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	// peer-a (the coordinator) and peer-c enter; peer-b has not listed its
	// checkpoints yet.
	for _, i := range []int{0, 2} {
		ss[i].SetResume(pts[peers[i]], placeMod, 6, false)
		wg.Go(func() { entries[i], errs[i] = ss[i].Enter(ctx, view, len(peers), 5*time.Millisecond) })
	}
	time.Sleep(100 * time.Millisecond) // (twenty probe rounds)
	ss[1].SetResume(pts["peer-b"], placeMod, 6, false)
	wg.Go(func() { entries[1], errs[1] = ss[1].Enter(ctx, view, len(peers), 5*time.Millisecond) })
	wg.Wait()
	for i, e := range entries {
		if errs[i] != nil || len(e.Initial) != 3 || e.Resume != 40 {
			t.Errorf("%s enters with %+v, %v: want the 3 peers resuming at round 40", peers[i], e, errs[i])
		}
	}
}

// --resume when no peer has a checkpoint (an empty --checkpoint-dir, or
// only damaged files) fails on every peer with ErrNoCheckpoint instead of
// starting over from round 0; --resume=auto starts over
// (TestStartersResumeFromTheNewestCompleteCheckpoint).
func TestStartersWithoutAnyCheckpointFail(t *testing.T) {
	peers := []string{"peer-a", "peer-b", "peer-c"}
	entries, errs := enterAll(t, peers, nil, false)
	for i, err := range errs {
		if !errors.Is(err, ErrNoCheckpoint) || !errors.Is(err, ErrCannotResume) || entries[i].Initial != nil {
			t.Errorf("%s: %+v, %v: want ErrNoCheckpoint and no entry", peers[i], entries[i], err)
		}
	}
}

// The coordinator's choice from real files: a newest checkpoint that is
// cut short on one peer, or has a byte flipped, is not listed by that
// peer (ScanResume), and the peers resume from the round before it
// instead of failing to load it.
func TestStartersResumeFromTheRoundBeforeADamagedFile(t *testing.T) {
	peers := []string{"peer-a", "peer-b", "peer-c"}
	for _, damage := range []string{"cut in half", "a byte flipped"} {
		t.Run(damage, func(t *testing.T) {
			m := newModel(t, 500)
			points := map[string][]ResumePoint{}
			for i, p := range peers {
				dir := t.TempDir()
				shards := map[int][]byte{}
				for _, sh := range []int{i, i + 3} { // placeMod's shards of peer i
					m.Own(sh)
					shards[sh] = m.AppendShard(nil, sh, true)
				}
				for _, r := range []uint64{40, 80} {
					info := CheckpointInfo{Job: "job", Peer: p, Round: r, Members: peers, Worker: true, Model: modelDesc(m)}
					if err := writeCheckpoint(dir, info, shards, 2, nil); err != nil {
						t.Fatal(err)
					}
				}
				if p == "peer-b" {
					damageFile(t, ckptPath(dir, 80), damage)
				}
				sc, err := ScanResume(dir, "job", m)
				if err != nil {
					t.Fatal(err)
				}
				points[p] = sc.Points
			}
			if len(points["peer-b"]) != 1 {
				t.Fatalf("peer-b lists %+v, want round 40 only", points["peer-b"])
			}
			entries, errs := enterAll(t, peers, points, false)
			for i, e := range entries {
				if errs[i] != nil || len(e.Initial) != 3 || e.Resume != 40 {
					t.Errorf("%s enters with %+v, %v: want the 3 peers resuming at round 40", peers[i], e, errs[i])
				}
			}
		})
	}
}

// A peer started with --resume that has no checkpoint, and finds the run
// under way, joins it: the no-checkpoint failure is the coordinator's
// decision when starting a run, not a check of this peer's own files.
func TestStarterWithResumeAndNoCheckpointJoinsARunUnderWay(t *testing.T) {
	net := newNet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := NewStarter(net.NewNode("peer-a"), "job", "peer-a", train.MemberID("peer-a", 1), zerolog.Nop())
	if _, err := a.Enter(ctx, viewOf([]string{"peer-a"}, []uint64{1}), 1, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	a.Running()
	z := NewStarter(net.NewNode("peer-0"), "job", "peer-0", train.MemberID("peer-0", 1), zerolog.Nop())
	z.SetResume(nil, placeMod, 6, false)
	e, err := z.Enter(ctx, viewOf([]string{"peer-0", "peer-a"}, []uint64{1, 1}), 1, time.Millisecond)
	if err != nil || e.Contact != "peer-a" {
		t.Fatalf("a --resume peer without checkpoints enters with %+v, %v: want to join through peer-a", e, err)
	}
}

// A peer that probed before the coordinator decided asks again soon, not
// only after the whole retry: the members a coordinator starts with enter
// the run within a fraction of retry of it (each peer's training clock
// runs from its own entry).
func TestEnterAsksAgainSoon(t *testing.T) {
	net := newNet(t)
	peers := []string{"peer-a", "peer-b", "peer-c"}
	incs := []uint64{1, 1, 1}
	view := viewOf(peers, incs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const retry = 2 * time.Second
	entered := make([]time.Time, len(peers))
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		s := NewStarter(net.NewNode(p), "job", p, train.MemberID(p, incs[i]), zerolog.Nop())
		wg.Go(func() {
			if i == 0 { // the coordinator (the smallest ID) comes last
				time.Sleep(300 * time.Millisecond)
			}
			_, errs[i] = s.Enter(ctx, view, len(peers), retry)
			entered[i] = time.Now()
		})
	}
	wg.Wait()
	for i := range peers {
		if errs[i] != nil {
			t.Fatalf("%s: %v", peers[i], errs[i])
		}
		// Probing at 0, retry/8, 3·retry/8 (then 7·retry/8, …): the first
		// probe after the coordinator's decision at about 300 ms is at
		// 750 ms. Asking again only after retry entered 1.7 s after it.
		if late := entered[i].Sub(entered[0]); late > retry/2 {
			t.Errorf("%s entered %v after the coordinator, want within %v", peers[i], late, retry/2)
		}
	}
}
