package train

import (
	"bytes"
	"fmt"
	"slices"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// Raft authority (docs/protocol.md, "Configurations"): which raft messages
// a peer lets reach its etcd raft node.
//
// etcd raft trusts its transport: it follows the sender of any append of a
// higher term, voter or not; it takes a vote request from anyone; and it
// panics on a commit index past the end of its log or an entry that
// contradicts a committed one. Every node of the raft group is a peer the
// leader admitted, but a learner (a joiner not yet a worker, a member
// beyond Config.Voters) must never lead. So before a message reaches raft:
//
//	A1  it comes from a node of the group, as itself (the link stamps the
//	    sender's peer ID), and is addressed to this node;
//	A2  its type is one raft nodes exchange: appends, heartbeats, votes,
//	    timeout-now and their responses. Proposals (only the leader
//	    proposes), snapshots (this core never compacts its log, so no
//	    honest leader sends one) and raft's local types are refused;
//	A3  what only a leader or a candidate sends (appends, heartbeats,
//	    timeout-now, votes, pre-votes) comes from a voter as this peer knows
//	    the voters; a peer that knows none yet (a joiner without the log)
//	    takes them from the raft node its contact named as leader, and a
//	    peer whose log missed the promotion of the node that now sends it
//	    appends asks its voters who leads (CoreJoin) and takes them from the
//	    node one of them names. Those of a term older than this node's
//	    pass: raft never acts on them but to answer with its own term, which
//	    tells a deposed leader that it is;
//	A4  a vote or pre-vote request is refused while this peer has had an
//	    append or a heartbeat of its leader within an election timeout
//	    (agreement.receive), unless it is a leadership transfer (the
//	    leader's own timeout-now): the leader lease that raft's
//	    check-quorum gives, which this core cannot turn on (its elections
//	    are its own, see agreement). A voter cut off and back, or one that
//	    votes at every term, cannot unseat a working leader. The
//	    lease holds only as long as the leader has a majority: a leader
//	    that has heard from no majority of its voters within an election
//	    timeout steps down (agreement.checkQuorum, C11), so a leader cut
//	    off with one follower does not keep that follower's vote forever;
//	A5  an append or heartbeat fits the local log: a heartbeat's commit
//	    index lies within the log; an append's entries follow its previous
//	    index one by one, normal or conf-change entries only, their terms
//	    never falling and never above the message's; none contradicts an
//	    entry this peer has committed;
//	A6  a panic inside raft fails this peer (ErrRaft, naming the sender)
//	    instead of ending the process.
//
// TestRaftAuthority pins A1-A5, TestRaftPanicFailsThePeer A6, and the
// hostile-peer tests (node/trainer) send every kind of forgery.

// leads reports whether raft message type t is one only a leader or a
// candidate sends.
func leads(t pb.MessageType) bool {
	switch t {
	case pb.MsgApp, pb.MsgHeartbeat, pb.MsgTimeoutNow, pb.MsgVote, pb.MsgPreVote:
		return true
	}
	return false
}

// exchanged reports whether raft message type t is one raft nodes send
// each other (A2).
func exchanged(t pb.MessageType) bool {
	switch t {
	case pb.MsgApp, pb.MsgAppResp, pb.MsgHeartbeat, pb.MsgHeartbeatResp, pb.MsgTimeoutNow,
		pb.MsgVote, pb.MsgVoteResp, pb.MsgPreVote, pb.MsgPreVoteResp:
		return true
	}
	return false
}

// transferContext is the context etcd raft puts on the votes of a
// leadership transfer (raft's campaignTransfer).
var transferContext = []byte("CampaignTransfer")

// mayStep reports whether raft message m from peer from may reach the raft
// node (A1-A5).
func (a *agreement) mayStep(from string, m *pb.Message) bool {
	c := a.c
	if p, ok := a.group[m.GetFrom()]; !ok || p != from || m.GetTo() != c.cfg.ID || m.GetFrom() == c.cfg.ID {
		return false // A1
	}
	t := m.GetType()
	if !exchanged(t) {
		return false // A2
	}
	if leads(t) && m.GetTerm() >= a.rn.BasicStatus().GetTerm() && !a.mayLead(m.GetFrom()) {
		if t == pb.MsgApp || t == pb.MsgHeartbeat {
			a.join.suspect = m.GetFrom() // (ask the voters who leads: tick)
		}
		return false // A3 (of an older term raft only answers it: a deposed leader learns it was)
	}
	if (t == pb.MsgVote || t == pb.MsgPreVote) && a.inLease() && !bytes.Equal(m.GetContext(), transferContext) {
		return false // A4
	}
	switch t {
	case pb.MsgHeartbeat:
		last, err := a.store.LastIndex()
		return err == nil && m.GetCommit() <= last // A5
	case pb.MsgApp:
		return a.fitsLog(m) // A5
	}
	return true
}

// mayLead reports whether raft node id may send what a leader or a
// candidate sends (A3).
func (a *agreement) mayLead(id uint64) bool {
	if slices.Contains(a.voters, id) {
		return true
	}
	// A joiner knows no voters until the log tells it: it trusts the node
	// its contact named as leader (receive, CoreJoinReply).
	if len(a.voters) == 0 && id == a.join.named {
		return true
	}
	// A voter that missed the entries promoting the leader trusts the
	// node one of its voters named (vouch).
	return id == a.join.vouched && id != 0
}

// vouch takes a voter's answer to "who leads?": the node it names may
// lead here (A3), until the log tells this peer the voters again (a new
// entry, or the named node's messages stop: then it is asked anew).
func (a *agreement) vouch(from string, msg *wire.Core) {
	if msg.Req == 0 || msg.Text == "" || msg.Flags&wire.FlagRefused != 0 {
		return
	}
	for _, v := range a.voters {
		if a.group[v] == from && v != a.c.cfg.ID {
			if p, ok := a.group[msg.Req]; ok && p == msg.Text && msg.Req == a.join.suspect {
				a.join.vouched, a.join.suspect = msg.Req, 0
			}
			return
		}
	}
}

// inLease reports whether this peer has heard from a leader within an
// election timeout, or leads itself (A4).
func (a *agreement) inLease() bool {
	if a.isLeader() {
		return true
	}
	return a.lead != 0 && a.c.tick-a.heard < uint64(a.c.cfg.Raft.ElectionTicks*a.c.cfg.Raft.Every)
}

// fitsLog checks an append against the local log (A5).
func (a *agreement) fitsLog(m *pb.Message) bool {
	prev, prevTerm, term := m.GetIndex(), m.GetLogTerm(), m.GetTerm()
	if prev > 1<<62 || prevTerm > term {
		return false
	}
	committed := a.rn.BasicStatus().GetCommit()
	last := prevTerm
	for i, e := range m.GetEntries() {
		switch e.GetType() {
		case pb.EntryNormal, pb.EntryConfChange:
		default:
			return false
		}
		idx, et := e.GetIndex(), e.GetTerm()
		if idx != prev+1+uint64(i) || et < last || et > term {
			return false
		}
		last = et
		if idx <= committed {
			if have, err := a.store.Term(idx); err != nil || have != et {
				return false // raft would panic: it contradicts a committed entry
			}
		}
	}
	return true
}

// step hands m to raft, turning a panic inside raft into this peer's
// failure (A6): raft panics only on a broken invariant of its own log, and
// the run must say so rather than the process dying with a stack trace.
func (a *agreement) step(from string, m *pb.Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s from %s: %v", ErrRaft, m.GetType(), short(from), r)
			a.c.fail(err)
		}
	}()
	return a.rn.Step(m)
}
