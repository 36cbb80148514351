package trainer

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// hostile sends every honest peer, until ctx ends, well-formed messages of
// every op with every field it can set: the honest peers' member IDs, the
// configurations and rounds they are at (and far-future ones), shards and
// rows of the model, huge values, wants, clocks, raft messages that claim
// to come from the honest voters or from itself (votes, appends of a
// forged configuration that names only the hostile peer, snapshots,
// heartbeats with a high term and a commit index past every log's end),
// requests to join as itself and under IDs nobody holds, leaves, finished
// and hash answers (only that op, unless only is 0). It holds the job's
// key (the link lets it through) but is not a member: the membership does
// not know it alive, so its joins are refused, and the link stamps its own
// peer ID, which it cannot forge.
func hostile(ctx context.Context, ml *memLink, self string, initial []train.Member, shards, dim int, only wire.CoreOp) int {
	rng := rand.New(rand.NewPCG(42, 42))
	send := link{ml, self}
	me := train.Member{Peer: self, ID: train.MemberID(self, 1)}
	forged := train.ConfigEntry(2, 3, []train.Member{me})
	sent := 0
	pick := func() train.Member { return initial[rng.IntN(len(initial))] }
	for burst := 0; ctx.Err() == nil; burst++ {
		if burst%10 == 0 {
			time.Sleep(time.Millisecond) // about 30 messages a millisecond: a flood, not a denial of service
		}
		for _, to := range initial {
			claim := pick()
			m := &wire.Core{
				Op:       only,
				Flags:    wire.CoreFlags(rng.IntN(int(wire.FlagFresh) << 1)), // any of the defined flags
				Member:   claim.ID,
				Config:   uint64(rng.IntN(4)),
				Round:    uint64(rng.IntN(60)),
				Through:  uint64(rng.IntN(60)),
				Req:      uint64(rng.IntN(8)),
				Examples: uint64(1 + rng.IntN(100)),
			}
			if only == 0 {
				m.Op = wire.CoreOp(1 + rng.IntN(int(wire.CoreReady)))
			}
			if rng.IntN(4) == 0 {
				m.Member = me.ID
			}
			if rng.IntN(8) == 0 {
				m.Config = uint64(1 << (10 + rng.IntN(40))) // a far-future configuration
			}
			if m.Op == wire.CoreJoin {
				m.Member = me.ID // it asks to join, as itself
				if rng.IntN(2) == 0 {
					m.Member = rng.Uint64() // under IDs nobody holds
				}
			}
			var ss []uint32
			for s := range shards {
				if rng.IntN(3) == 0 {
					ss = append(ss, uint32(s))
				}
			}
			m.Shards = ss
			width := 1
			if m.Op == wire.CoreState {
				width = 2 // logreg + AdaGrad: weight and accumulator
			}
			m.RowWidth = width
			for k := 0; k < dim; k++ {
				if rng.IntN(20) == 0 {
					m.Rows.Idx = append(m.Rows.Idx, uint32(k))
					for range width {
						m.Rows.Val = append(m.Rows.Val, 1e6)
					}
				}
			}
			for k := 0; k < dim; k += 1 + rng.IntN(40) {
				m.Want = append(m.Want, uint32(k))
				m.Values = append(m.Values, -1e6)
			}
			for _, mm := range initial {
				m.Clocks = append(m.Clocks, wire.MemberClock{Member: mm.ID, Clock: uint64(rng.IntN(100))})
			}
			slices.SortFunc(m.Clocks, func(a, b wire.MemberClock) int { return cmp.Compare(a.Member, b.Member) })
			if m.Op == wire.CoreRaft {
				typ := []pb.MessageType{pb.MessageType_MsgApp, pb.MessageType_MsgVote, pb.MessageType_MsgPreVote,
					pb.MessageType_MsgHeartbeat, pb.MessageType_MsgSnap, pb.MessageType_MsgTimeoutNow}[rng.IntN(6)]
				term := uint64(1 + rng.IntN(50))
				idx := uint64(rng.IntN(20))
				commit := idx + 1
				if rng.IntN(3) == 0 {
					commit = 1000006 // past the end of every log: raft panics on it
				}
				from := claim.ID
				if rng.IntN(2) == 0 {
					from = me.ID // as itself, the raft node it asked to be
				}
				rm := &pb.Message{Type: &typ, From: &from, To: &to.ID, Term: &term, LogTerm: &term, Index: &idx, Commit: &commit}
				if typ == pb.MessageType_MsgApp {
					rm.Entries = []*pb.Entry{{Type: pb.EntryType_EntryNormal.Enum(), Term: &term, Index: new(idx + 1), Data: forged}}
				}
				if typ == pb.MessageType_MsgSnap {
					rm.Snapshot = &pb.Snapshot{Data: forged, Metadata: &pb.SnapshotMetadata{Index: new(idx + 100), Term: &term,
						ConfState: &pb.ConfState{Voters: []uint64{me.ID}}}}
				}
				b, err := proto.Marshal(rm)
				if err != nil {
					panic(err)
				}
				m.Blob = b
			}
			if rng.IntN(2) == 0 {
				m.Text = pick().Peer
			} else {
				m.Text = self
			}
			if m.Check(wire.DefaultLimits()) != nil {
				continue // the link would reject it before the core
			}
			send.Send(to.Peer, m)
			sent++
		}
	}
	return sent
}

// Issue 10: a hostile peer that is not a member and sends forged messages
// of every kind changes no honest peer's model: in sync the three honest
// peers end with the model a run without it ends with, bit for bit, and
// finish. Each op alone first (a flood of one op once stalled every peer:
// pushes claiming a later configuration filled a queue every step
// re-read), then all of them mixed, with both gathers.
func TestHostilePeerChangesNoModel(t *testing.T) {
	clean := map[train.Gather]uint64{}
	for _, gather := range []train.Gather{train.Need, train.Full} {
		sums, errs := startPeers(t, 3, train.Sync, gather, 1)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("clean run, peer %d: %v", i, err)
			}
		}
		clean[gather] = sums[0].ModelHash
	}
	attack := func(t *testing.T, gather train.Gather, only wire.CoreOp) {
		var sent int
		attacked, errs := startPeersWith(t, 3, train.Sync, gather, 1, func(ctx context.Context, ml *memLink, initial []train.Member) {
			sent = hostile(ctx, ml, "peer-h", initial, 16, 500, only)
		})
		var refused uint64
		for i, err := range errs {
			if err != nil {
				t.Fatalf("attacked run, peer %d: %v", i, err)
			}
			if attacked[i].ModelHash != clean[gather] {
				t.Errorf("peer %d ends with model %x under attack, %x without", i, attacked[i].ModelHash, clean[gather])
			}
			refused += attacked[i].Core.Rejected
		}
		t.Logf("the hostile peer sent %d messages; the honest cores refused %d by role", sent, refused)
		if sent == 0 {
			t.Errorf("the hostile peer sent nothing: the attack did not happen")
		}
	}
	for op := wire.CorePush; op <= wire.CoreReady; op++ {
		t.Run(op.String(), func(t *testing.T) { attack(t, train.Need, op) })
	}
	for _, gather := range []train.Gather{train.Need, train.Full} {
		t.Run("every-op-"+gather.String(), func(t *testing.T) { attack(t, gather, 0) })
	}
}

// In async the end is agreed (CoreReady to the leader, then a final
// configuration): a stranger claiming members' IDs and telling the leader
// every member is ready under every configuration, or sending anything
// else, neither ends the run early nor keeps it from ending; the honest
// peers end with one model, having trained every example.
func TestHostilePeerCannotEndAnAsyncRun(t *testing.T) {
	for _, only := range []wire.CoreOp{wire.CoreReady, 0} {
		t.Run("op-"+only.String(), func(t *testing.T) {
			var sent int
			sums, errs := startPeersWith(t, 3, train.Async, train.Need, 1, func(ctx context.Context, ml *memLink, initial []train.Member) {
				sent = hostile(ctx, ml, "peer-h", initial, 16, 500, only)
			})
			var refused uint64
			for i, err := range errs {
				if err != nil {
					t.Fatalf("peer %d: %v", i, err)
				}
				if sums[i].ModelHash != sums[0].ModelHash {
					t.Errorf("peer %d ends with model %x, peer 0 with %x", i, sums[i].ModelHash, sums[0].ModelHash)
				}
				if sums[i].Examples != sums[0].Examples || sums[i].Examples == 0 {
					t.Errorf("peer %d trained %d examples, peer 0 %d: want all of its part", i, sums[i].Examples, sums[0].Examples)
				}
				refused += sums[i].Core.Rejected
			}
			t.Logf("the hostile peer sent %d messages; the honest cores refused %d by role", sent, refused)
			if sent == 0 || refused == 0 {
				t.Errorf("sent %d, refused %d: the attack did not happen", sent, refused)
			}
		})
	}
}
