package train

import (
	"errors"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// raftMsg wraps a raft message as the core link carries it.
func raftMsg(t testing.TB, m *pb.Message) *wire.Core {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return &wire.Core{Op: wire.CoreRaft, Blob: b}
}

// TestRaftAuthority pins authority.go's A1-A5: four members, three voters
// and a learner; the learner, a voter that is not the leader, and the
// leader each send what raft would obey, and what may reach raft is
// exactly what a leader, a candidate or a follower of this group may send.
// Then every refused message goes through Receive: no core fails, and the
// leader, term and configuration stay.
func TestRaftAuthority(t *testing.T) {
	tn := newTNet(t, 4, 3, Sync)
	lead := tn.leader()
	var voter, learner string
	for _, name := range tn.names {
		c := tn.cores[name]
		switch {
		case name == lead:
		case c.ag.isVoter() && voter == "":
			voter = name
		case !c.ag.isVoter():
			learner = name
		}
	}
	if voter == "" || learner == "" {
		t.Fatalf("want a voter and a learner besides the leader %s: voter %q learner %q", lead, voter, learner)
	}
	target := tn.cores[voter] // the follower every message is addressed to
	term := target.ag.rn.BasicStatus().GetTerm()
	commit := target.ag.rn.BasicStatus().GetCommit()
	last, _ := target.ag.store.LastIndex()
	lastTerm, _ := target.ag.store.Term(last)
	idOf := func(name string) uint64 { return tn.cores[name].cfg.ID }
	to := idOf(voter)
	forged := ConfigEntry(99, 1000, []Member{{Peer: learner, ID: idOf(learner)}})
	app := func(from string, term, prev, prevTerm uint64, ents ...*pb.Entry) *pb.Message {
		return &pb.Message{Type: pb.MsgApp.Enum(), From: new(idOf(from)), To: &to, Term: &term, Index: &prev, LogTerm: &prevTerm,
			Commit: new(prev + uint64(len(ents))), Entries: ents}
	}
	ent := func(idx, term uint64, typ pb.EntryType) *pb.Entry {
		return &pb.Entry{Type: typ.Enum(), Index: &idx, Term: &term, Data: forged}
	}
	msg := func(typ pb.MessageType, from string, term uint64) *pb.Message {
		return &pb.Message{Type: typ.Enum(), From: new(idOf(from)), To: &to, Term: &term, Index: &last, LogTerm: &lastTerm}
	}
	cases := []struct {
		name string
		from string // the peer the link says sent it
		m    *pb.Message
		want bool
		rule string
	}{
		{"learner: append of a higher term", learner, app(learner, term+5, last, lastTerm, ent(last+1, term+5, pb.EntryNormal)), false, "A3"},
		{"learner: heartbeat of a higher term", learner, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(idOf(learner)), To: &to, Term: new(term + 5)}, false, "A3"},
		{"learner: heartbeat of this term", learner, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(idOf(learner)), To: &to, Term: &term}, false, "A3"},
		{"learner: vote", learner, msg(pb.MsgVote, learner, term+1), false, "A3"},
		{"learner: pre-vote", learner, msg(pb.MsgPreVote, learner, term+1), false, "A3"},
		{"learner: timeout-now", learner, msg(pb.MsgTimeoutNow, learner, term), false, "A3"},
		{"learner: heartbeat of an older term (raft answers with its term)", learner, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(idOf(learner)), To: &to, Term: new(term - 1)}, true, "A3"},
		{"learner: append response", learner, &pb.Message{Type: pb.MsgAppResp.Enum(), From: new(idOf(learner)), To: &to, Term: &term, Index: &last}, true, "A2"},
		{"stranger's stream claiming the learner", "mallory", msg(pb.MsgAppResp, learner, term), false, "A1"},
		{"learner claiming the leader's raft ID", learner, msg(pb.MsgHeartbeat, lead, term), false, "A1"},
		{"to another node", learner, &pb.Message{Type: pb.MsgAppResp.Enum(), From: new(idOf(learner)), To: new(idOf(lead)), Term: &term}, false, "A1"},
		{"proposal", lead, msg(pb.MsgProp, lead, term), false, "A2"},
		{"snapshot", lead, &pb.Message{Type: pb.MsgSnap.Enum(), From: new(idOf(lead)), To: &to, Term: &term,
			Snapshot: &pb.Snapshot{Data: forged, Metadata: &pb.SnapshotMetadata{Index: new(last + 100), Term: &term}}}, false, "A2"},
		{"local type", lead, msg(pb.MsgHup, lead, term), false, "A2"},
		{"voter: pre-vote while the leader is heard", lead, msg(pb.MsgPreVote, lead, term+1), false, "A4"},
		{"voter: vote while the leader is heard", lead, msg(pb.MsgVote, lead, term+1), false, "A4"},
		{"voter: vote of a leadership transfer", lead, func() *pb.Message {
			m := msg(pb.MsgVote, lead, term+1)
			m.Context = []byte("CampaignTransfer")
			return m
		}(), true, "A4"},
		{"leader: heartbeat within the log", lead, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(idOf(lead)), To: &to, Term: &term, Commit: &commit}, true, "A5"},
		{"leader: heartbeat committing past the log's end", lead, &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(idOf(lead)), To: &to, Term: &term, Commit: new(last + 1000000)}, false, "A5"},
		{"leader: append after the log", lead, app(lead, term, last, lastTerm, ent(last+1, term, pb.EntryNormal)), true, "A5"},
		{"leader: append with a gap", lead, app(lead, term, last, lastTerm, ent(last+2, term, pb.EntryNormal)), false, "A5"},
		{"leader: append with terms falling", lead, app(lead, term, last, lastTerm, ent(last+1, term, pb.EntryNormal), ent(last+2, term-1, pb.EntryNormal)), false, "A5"},
		{"leader: append of a term above the message's", lead, app(lead, term, last, lastTerm, ent(last+1, term+1, pb.EntryNormal)), false, "A5"},
		{"leader: conf change v2 entry", lead, app(lead, term, last, lastTerm, ent(last+1, term, pb.EntryConfChangeV2)), false, "A5"},
		{"leader: append contradicting a committed entry", lead, app(lead, term, commit-1, func() uint64 { x, _ := target.ag.store.Term(commit - 1); return x }(),
			ent(commit, lastTerm+1, pb.EntryNormal)), false, "A5"},
	}
	for _, tc := range cases {
		if got := target.ag.mayStep(tc.from, tc.m); got != tc.want {
			t.Errorf("%s (%s): mayStep %v, want %v", tc.name, tc.rule, got, tc.want)
		}
	}
	// Through Receive, every refused one, as a hostile peer would send them.
	before := target.stats.Rejected
	refused := 0
	for _, tc := range cases {
		if !tc.want {
			target.Receive(tc.from, raftMsg(t, tc.m))
			refused++
		}
	}
	if got := target.stats.Rejected - before; got != uint64(refused) {
		t.Errorf("Receive refused %d messages, want %d", got, refused)
	}
	rd := target.Ready()
	if rd.Err != nil {
		t.Fatalf("the voter failed: %v", rd.Err)
	}
	if st := target.ag.rn.BasicStatus(); st.GetTerm() != term || target.Leader() != lead {
		t.Errorf("after the forgeries: term %d leader %s, want term %d leader %s", st.GetTerm(), target.Leader(), term, lead)
	}
	tn.run(200)
	if got := target.ConfigID(); got != 1 {
		t.Errorf("configuration %d after the forgeries, want 1 (nothing forged committed)", got)
	}
}

// TestRaftPanicFailsThePeer pins A6: a message that would make raft panic
// (here a heartbeat committing past the log's end, stepped past the
// checks) fails the peer with ErrRaft naming the sender; the process goes
// on.
func TestRaftPanicFailsThePeer(t *testing.T) {
	tn := newTNet(t, 3, 3, Sync)
	lead := tn.leader()
	var follower string
	for _, name := range tn.names {
		if name != lead {
			follower = name
		}
	}
	c := tn.cores[follower]
	term := c.ag.rn.BasicStatus().GetTerm()
	m := &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(tn.cores[lead].cfg.ID), To: new(c.cfg.ID), Term: &term, Commit: new(uint64(1000006))}
	err := c.ag.step(lead, m)
	if !errors.Is(err, ErrRaft) {
		t.Fatalf("step: %v, want ErrRaft", err)
	}
	if rd := c.Ready(); !errors.Is(rd.Err, ErrRaft) {
		t.Errorf("Ready.Err %v, want ErrRaft", rd.Err)
	}
}
