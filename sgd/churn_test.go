package sgd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/model"
)

// Churn scenarios on the in-memory transport (issue 5): scripted joins,
// leaves, crashes and partitions, asserting the invariants: every survivor
// ends with the same model, every shard is finalised by a live owner, and
// in sync mode every round applies exactly the contributions of its live
// workers.

var ids4 = []string{"peer-a", "peer-b", "peer-c", "peer-d"}

// checkEnd asserts the survivors' common end state.
func checkEnd(t *testing.T, h *harness, survivors ...string) {
	t.Helper()
	ref := h.peers[survivors[0]]
	for _, id := range survivors {
		pr := h.peers[id]
		if pr.m.Hash() != ref.m.Hash() {
			t.Errorf("%s ends with model hash %x, %s with %x", id, pr.m.Hash(), ref.id, ref.m.Hash())
		}
		if pr.sum.Covered != h.shards {
			t.Errorf("%s: %d of %d shards finalised by a live owner", id, pr.sum.Covered, h.shards)
		}
	}
}

// checkApplied asserts that every sync round an owner applied took the
// contributions of all live workers of its configuration.
func checkApplied(t *testing.T, h *harness, ids ...string) {
	t.Helper()
	for _, id := range ids {
		for _, r := range h.peers[id].rounds() {
			if r.Live > 0 && r.Applied != r.Live {
				t.Errorf("%s round %d: applied %d contributions for %d live workers", id, r.Clock, r.Applied, r.Live)
			}
		}
	}
}

// A fourth peer joins three that are training: it copies the model,
// takes over about a quarter of the shards, and all four end alike.
func TestJoinMidRun(t *testing.T) {
	for _, mode := range []Mode{Sync, Async} {
		t.Run(mode.String(), func(t *testing.T) {
			ds := genDistSet(t)
			h := newHarness(t, newNet(t), ds, mode, 50)
			h.parts = 4
			// Retransmit buffers far smaller than the run so far: the
			// joiner must not ask for (long evicted) messages from before
			// it joined.
			h.gtweak = func(c *gossip.Config) { c.RetransmitMessages = 8 }
			for i, id := range ids4[:3] {
				h.start(id, ids4[:3], i+1)
			}
			h.waitRound(h.peers["peer-a"], 20)
			// The joiner's ID sorts first: once admitted it coordinates.
			all := []string{"peer-0", "peer-a", "peer-b", "peer-c"}
			d := h.start("peer-0", all, 4)
			h.wait(all...)
			checkEnd(t, h, all...)
			checkApplied(t, h, all...)
			s := d.sum
			t.Logf("%s: the joiner joined in %.3fs copying %d bytes, owns %d of %d shards; configs %d", mode, s.JoinSeconds, s.JoinBytes, s.Owned, h.shards, s.Configs)
			if s.JoinBytes == 0 || s.Owned < h.shards/8 || s.Owned > h.shards/2 || s.Configs != 2 {
				t.Errorf("joiner: %d model bytes copied, owns %d of %d shards, final configuration %d; want a copy, about a quarter, and 2",
					s.JoinBytes, s.Owned, h.shards, s.Configs)
			}
			if s.Examples == 0 {
				t.Errorf("joiner trained on no examples")
			}
		})
	}
}

// A peer leaves gracefully mid-run: it hands its shards over, the others
// finish alike and every shard is owned by a remaining peer.
func TestGracefulLeave(t *testing.T) {
	for _, mode := range []Mode{Sync, Async} {
		t.Run(mode.String(), func(t *testing.T) {
			ds := genDistSet(t)
			h := newHarness(t, newNet(t), ds, mode, 50)
			h.parts = 4
			for i, id := range ids4 {
				h.start(id, ids4, i+1)
			}
			c := h.peers["peer-c"]
			h.waitRound(c, 20)
			c.d.Leave()
			<-c.done
			if !errors.Is(c.err, ErrLeft) {
				t.Fatalf("peer-c: %v, want ErrLeft\n%s", c.err, c.d.DebugState())
			}
			rest := []string{"peer-a", "peer-b", "peer-d"}
			h.wait(rest...)
			checkEnd(t, h, rest...)
			checkApplied(t, h, rest...)
			if c.sum.Examples == 0 || c.sum.Examples >= h.peers["peer-a"].sum.Examples {
				t.Errorf("leaver trained %d examples, peer-a %d: want the leaver to stop early", c.sum.Examples, h.peers["peer-a"].sum.Examples)
			}
			for _, id := range rest {
				if h.peers[id].sum.Configs != 2 || h.peers[id].sum.Members != 3 {
					t.Errorf("%s ends in configuration %d with %d members, want 2 and 3", id, h.peers[id].sum.Configs, h.peers[id].sum.Members)
				}
			}
		})
	}
}

// A peer crashes mid-run; the membership declares it dead; with two
// replicas its shards' optimizer state survives on their secondaries and
// the survivors end alike; with one, its shards are promoted from the read
// copies.
func TestCrash(t *testing.T) {
	for _, replicas := range []int{2, 1} {
		t.Run(fmt.Sprintf("replicas=%d", replicas), func(t *testing.T) {
			ds := genDistSet(t)
			h := newHarness(t, newNet(t), ds, Sync, 50)
			h.parts, h.replicas = 4, replicas
			for i, id := range ids4 {
				h.start(id, ids4, i+1)
			}
			c := h.peers["peer-c"]
			h.waitRound(c, 20)
			h.net.Crash("peer-c")
			c.cancel()
			<-c.done
			rest := []string{"peer-a", "peer-b", "peer-d"}
			for _, id := range rest {
				h.peers[id].d.SetAlive(rest)
			}
			h.wait(rest...)
			checkEnd(t, h, rest...)
			checkApplied(t, h, rest...)
			var degraded, promoted int64
			for _, id := range rest {
				degraded += h.peers[id].sum.RoundsDegraded
				promoted += int64(h.peers[id].sum.Promoted)
			}
			t.Logf("replicas %d: rounds without the dead worker %d, shards promoted from read copies %d", replicas, degraded, promoted)
			if replicas == 2 && promoted != 0 {
				t.Errorf("with 2 replicas %d shards were promoted from read copies; want their secondaries to take over", promoted)
			}
			if replicas == 1 && promoted == 0 {
				t.Errorf("with 1 replica no shard was promoted")
			}
		})
	}
}

// A 2|2 partition has no majority: nobody is removed, training waits, and
// when the partition heals it goes on with everyone, to the same model.
func TestPartitionWithoutMajorityWaitsAndHeals(t *testing.T) {
	ds := genDistSet(t)
	h := newHarness(t, newNet(t), ds, Sync, 50)
	h.parts = 4
	for i, id := range ids4 {
		h.start(id, ids4, i+1)
	}
	a := h.peers["peer-a"]
	h.waitRound(a, 10)
	left, right := []string{"peer-a", "peer-b"}, []string{"peer-c", "peer-d"}
	h.net.Partition(left, right)
	for _, id := range left {
		h.peers[id].d.SetAlive(left)
	}
	for _, id := range right {
		h.peers[id].d.SetAlive(right)
	}
	before := len(a.rounds())
	time.Sleep(300 * time.Millisecond) // a partition lasts a while; nothing to wait for
	stalled := len(a.rounds())
	h.net.Heal()
	for _, id := range ids4 {
		h.peers[id].d.SetAlive(ids4)
	}
	h.wait(ids4...)
	checkEnd(t, h, ids4...)
	if stalled-before > 2 {
		t.Errorf("peer-a completed %d rounds during a partition without majority; want it to wait", stalled-before)
	}
	if a.sum.Configs != 1 {
		t.Errorf("configuration %d at the end; want 1: nobody removed", a.sum.Configs)
	}
}

// Checkpoints are written at the rounds the coordinator picks; a job
// restarted with Resume continues from the newest common round, not from
// zero, and ends where an uninterrupted run ends.
func TestCheckpointAndResume(t *testing.T) {
	ds := genDistSet(t)
	dir := t.TempDir()
	ids := ids4[:3]
	h := newHarness(t, newNet(t), ds, Sync, 50)
	h.parts = 3
	h.tweak = func(c *DistConfig) { c.Checkpoint = CheckpointConfig{Dir: dir, Every: 20 * time.Millisecond} }
	for i, id := range ids {
		h.start(id, ids, i+1)
	}
	h.waitRound(h.peers["peer-a"], 60)
	for _, id := range ids {
		h.peers[id].cancel() // kill the whole job
	}
	for _, id := range ids {
		<-h.peers[id].done
	}
	written := checkpointRounds(filepath.Join(dir, "peer-a"))
	if len(written) == 0 {
		t.Fatalf("no checkpoint written in %s", dir)
	}
	h2 := newHarness(t, newNet(t), ds, Sync, 50)
	h2.parts = 3
	h2.tweak = func(c *DistConfig) { c.Checkpoint = CheckpointConfig{Dir: dir, Resume: true} }
	for i, id := range ids {
		h2.start(id, ids, i+1)
	}
	h2.wait(ids...)
	checkEnd(t, h2, ids...)
	a := h2.peers["peer-a"]
	t.Logf("checkpoints at rounds %v; resumed at round %d, ended at round %d", written, a.sum.ResumedAt, a.sum.Rounds)
	if a.sum.ResumedAt == 0 || a.sum.ResumedAt > written[0] {
		t.Errorf("resumed at round %d; want a checkpoint round, at most %d", a.sum.ResumedAt, written[0])
	}
	full := cluster(t, newNet(t), ds, 3, Sync, 50, "ring", adagrad())
	if a.sum.Rounds != full[0].sum.Rounds {
		t.Errorf("resumed run ended at round %d, an uninterrupted one at %d", a.sum.Rounds, full[0].sum.Rounds)
	}
	if a.m.Hash() != full[0].m.Hash() {
		t.Errorf("resumed run ends with model %x, an uninterrupted one with %x", a.m.Hash(), full[0].m.Hash())
	}
}

// A checkpoint that cannot be written (the directory is a file) is logged,
// keeps the previous one, and does not stop training.
func TestCheckpointFailureIsNotFatal(t *testing.T) {
	ds := genDistSet(t)
	dir := t.TempDir()
	blocker := filepath.Join(dir, "peer-a")
	if err := os.WriteFile(blocker, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, newNet(t), ds, Sync, 50)
	h.parts = 2
	h.tweak = func(c *DistConfig) { c.Checkpoint = CheckpointConfig{Dir: dir, Every: 10 * time.Millisecond} }
	ids := ids4[:2]
	for i, id := range ids {
		h.start(id, ids, i+1)
	}
	h.wait(ids...)
	checkEnd(t, h, ids...)
	if n := h.peers["peer-a"].sum.Checkpoints; n != 0 {
		t.Errorf("peer-a wrote %d checkpoints into a file; want failures", n)
	}
	if n := h.peers["peer-b"].sum.Checkpoints; n == 0 {
		t.Errorf("peer-b wrote no checkpoint")
	}
}

// A 3|1 partition: the majority declares the lone peer dead and trains on
// without it; the lone peer cannot form a configuration and waits. When
// the partition heals, it learns it was removed (ErrRemoved: its copy is
// stale), and, restarted as the command restarts it, joins the run again
// like a new peer; all four end alike.
func TestPartitionMinorityRemovedAndRejoins(t *testing.T) {
	ds := genDistSet(t)
	h := newHarness(t, newNet(t), ds, Sync, 50)
	h.parts = 4
	h.tweak = func(c *DistConfig) { c.Epochs = 40 } // long enough to rejoin before the end
	for i, id := range ids4 {
		h.start(id, ids4, i+1)
	}
	a, d := h.peers["peer-a"], h.peers["peer-d"]
	h.waitRound(a, 10)
	major := []string{"peer-a", "peer-b", "peer-c"}
	h.net.Partition(major, []string{"peer-d"})
	for _, id := range major {
		h.peers[id].d.SetAlive(major)
	}
	d.d.SetAlive([]string{"peer-d"})
	// The majority moves on: a configuration without peer-d.
	deadline := time.Now().Add(time.Minute)
	removed := func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, c := range a.changes {
			if slices.Contains(c.Crashed, "peer-d") {
				return true
			}
		}
		return false
	}
	for !removed() {
		if time.Now().After(deadline) {
			t.Fatalf("the majority did not remove peer-d")
		}
		time.Sleep(time.Millisecond) // polling the loop's state; no event to wait on
	}
	stuck := len(d.rounds())
	time.Sleep(200 * time.Millisecond) // the partition lasts a while
	if n := len(d.rounds()) - stuck; n > 2 {
		t.Errorf("peer-d completed %d rounds alone in a minority; want it to wait", n)
	}
	h.net.Heal()
	for _, id := range ids4 {
		h.peers[id].d.SetAlive(ids4)
	}
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		t.Fatalf("peer-d still running a minute after the partition healed")
	}
	if !errors.Is(d.err, ErrRemoved) {
		t.Fatalf("peer-d: %v, want ErrRemoved", d.err)
	}
	if rs := a.rounds(); len(rs) > 0 {
		t.Logf("peer-d removed; peer-a at round %d", rs[len(rs)-1].Clock)
	}
	d2 := h.start("peer-d", ids4, 4)
	h.wait(ids4...)
	checkEnd(t, h, ids4...)
	checkApplied(t, h, ids4...)
	t.Logf("peer-d rejoined in %.3fs copying %d bytes; final configuration %d with %d members", d2.sum.JoinSeconds, d2.sum.JoinBytes, d2.sum.Configs, d2.sum.Members)
	if d2.sum.JoinBytes == 0 || d2.sum.Members != 4 || d2.sum.Owned == 0 {
		t.Errorf("rejoined peer-d copied %d bytes, ends with %d members, owns %d shards; want a copy, 4 and some",
			d2.sum.JoinBytes, d2.sum.Members, d2.sum.Owned)
	}
}

// checkReplicasMatch asserts that every replica's copy of a shard (the
// shadow's weights and optimizer state) is bit-identical to its primary's:
// in sync mode both apply the same sums in the same order.
func checkReplicasMatch(t *testing.T, h *harness, ids ...string) {
	t.Helper()
	primary := map[int][]byte{}
	for _, id := range ids {
		m := h.peers[id].d.m
		for _, s := range m.Owned(nil) {
			primary[s] = m.ShardBytes(s, true)
		}
	}
	var checked, differ int
	for _, id := range ids {
		sh := h.peers[id].d.shadow
		if sh == nil {
			continue
		}
		for _, s := range sh.Owned(nil) {
			checked++
			if p, ok := primary[s]; !ok || !bytes.Equal(p, sh.ShardBytes(s, true)) {
				differ++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no replica shard to check")
	}
	if differ > 0 {
		t.Errorf("%d of %d replica shards differ from their primary's weights and optimizer state", differ, checked)
	}
}

// With --replicas 2, a resumed job restores the replicas' optimizer state
// too: after it, every replica still matches its primary, so a primary
// that crashes later is replaced by an exact copy.
func TestResumeKeepsReplicaState(t *testing.T) {
	ds := genDistSet(t)
	dir := t.TempDir()
	ids := ids4[:3]
	h := newHarness(t, newNet(t), ds, Sync, 50)
	h.parts, h.replicas = 3, 2
	h.tweak = func(c *DistConfig) { c.Checkpoint = CheckpointConfig{Dir: dir, Every: 20 * time.Millisecond} }
	for i, id := range ids {
		h.start(id, ids, i+1)
	}
	h.waitRound(h.peers["peer-a"], 60)
	for _, id := range ids {
		h.peers[id].cancel()
	}
	for _, id := range ids {
		<-h.peers[id].done
	}
	h2 := newHarness(t, newNet(t), ds, Sync, 50)
	h2.parts, h2.replicas = 3, 2
	h2.tweak = func(c *DistConfig) { c.Checkpoint = CheckpointConfig{Dir: dir, Resume: true} }
	for i, id := range ids {
		h2.start(id, ids, i+1)
	}
	h2.wait(ids...)
	checkEnd(t, h2, ids...)
	if h2.peers["peer-a"].sum.ResumedAt == 0 {
		t.Fatal("did not resume")
	}
	checkReplicasMatch(t, h2, ids...)
}

// A replica file round-trips, and a damaged or mismatched one is refused
// with model.ErrCorrupt, never half-loaded silently.
func TestReplicaFile(t *testing.T) {
	newModel := func() *model.Model {
		m, err := model.New(model.Logreg, 1000, 2, 8, adagrad())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	src := newModel()
	for _, s := range []int{1, 5} {
		src.Own(s)
		lo, _ := src.Layout.ShardRange(s)
		for i := range 3 { // a few real slots (the shard's end is padding)
			src.W[lo+i] = float32(lo + i)
			src.State[s][i] = float32(i + s)
		}
	}
	b := appendReplicas(nil, src, []int{1, 5})
	dst := newModel()
	if err := loadReplicas(dst, b, []int{1, 5}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []int{1, 5} {
		if !bytes.Equal(dst.ShardBytes(s, true), src.ShardBytes(s, true)) {
			t.Errorf("shard %d differs after the round trip", s)
		}
	}
	flipped := bytes.Clone(b)
	flipped[len(flipped)-20] ^= 1 // inside the last shard's export
	for name, c := range map[string]struct {
		b    []byte
		want []int
	}{
		"truncated":      {b[:len(b)-3], []int{1, 5}},
		"a flipped bit":  {flipped, []int{1, 5}},
		"shards swapped": {append(appendReplicas(nil, src, []int{5}), appendReplicas(nil, src, []int{1})...), []int{1, 5}},
		"other shards":   {b, []int{1, 6}},
		"a shard number": {append([]byte{99}, b[1:]...), []int{1, 5}},
	} {
		if err := loadReplicas(newModel(), c.b, c.want); !errors.Is(err, model.ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}
