package train

import (
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// The agreement on configurations (docs/protocol.md, "Configurations").
//
// Every member runs an etcd raft node (RawNode: pure, like this core) whose
// replicated log holds the training configurations. Voters are at most
// Config.Voters members, the others learners, so agreement costs the same
// with hundreds of peers. Only the leader proposes, and it proposes a
// configuration only as a whole: who trains from which round, who crashed,
// who left, whether to checkpoint. A configuration takes effect when it is
// committed, that is when a majority of the voters has it, so two sides of
// a partition can never both change the run, and every peer applies the
// same configurations in the same order.
//
// Elections use this core's own timer instead of raft's, because raft
// draws its election jitter from crypto/rand: a follower that has heard
// nothing from a leader for ElectionTicks raft ticks, plus a jitter drawn
// from Config.Seed, campaigns. Raft's own election timeout is set out of
// reach (and check-quorum off, since it depends on it): the lease a
// follower gives its leader is the core's (authority.go, A4), and so is
// the leader's step-down when no majority of its voters answers
// (checkQuorum, C11).

// agreement is the core's raft member and, when leader, the proposer.
type agreement struct {
	c      *Core
	rn     *raft.RawNode
	store  *raft.MemoryStorage
	group  map[uint64]string // raft ID -> peer ID, from the log
	voters []uint64
	lead   uint64
	heard  uint64 // tick anything was last heard from the leader
	wait   uint64 // ticks of silence before campaigning
	rng    uint64
	sub    int

	join   joining // while joining, and a voter's question "who leads?" (A3)
	leader leading // while leader

	// This peer leaving.
	leaving bool
	leaveAt uint64
}

// joining is the agreement's state while this peer joins the run (it asks
// its contact, then the leader, to be admitted), and a joined voter's
// question "who leads?" after it missed a promotion (authority.go, A3).
type joining struct {
	contact string
	named   uint64 // the raft node the contact named as leader (authority.go, A3)
	// A3 for a voter that missed a promotion: the raft node that sent
	// leader messages this peer refused (unknown: a learner as far as its
	// log says), when it last asked its voters who leads, and the node a
	// voter named.
	suspect  uint64
	askedWho uint64
	vouched  uint64
	askedAt  uint64
	asked    bool
	answered uint64 // tick anything was last heard while joining
	askingAt uint64 // tick the joiner turned to its contact
	nextAsk  int    // the next of Config.Contacts to turn to
}

// leading is the agreement's state while this peer leads: the members it
// admitted or was asked to let go, and the configuration it proposed.
type leading struct {
	joins  map[uint64]string // admitted raft IDs not yet workers -> peer
	leaves map[uint64]bool   // members that asked to leave
	// ready (ssp/async): per member ID, the newest configuration under
	// which that member's owner had every member done and every
	// contribution applied (CoreReady); the leader proposes the final
	// configuration once every member is ready under the current one.
	ready map[uint64]uint64
	prop  *tconf // proposed, not yet applied
	// propTerm is the raft term prop was proposed in: once an entry of a
	// later term is applied, prop was applied before it or is gone.
	propTerm uint64
	propAt   uint64
	ccAt     uint64 // tick a conf change was proposed (0: none in flight)
	// quorumAt counts the raft ticks since this leader last checked that
	// a majority of its voters answered it (checkQuorum, C11).
	quorumAt int
	ckptAt   uint64
	// transfers counts the attempts to hand leadership over (a leader
	// that is not a worker).
	transfers int
}

// raftLogger discards raft's logs: what matters reaches the driver as
// events. (raft's default logger writes to stderr.)
type raftLogger struct{}

func (raftLogger) Debug(...any)            {}
func (raftLogger) Debugf(string, ...any)   {}
func (raftLogger) Error(...any)            {}
func (raftLogger) Errorf(string, ...any)   {}
func (raftLogger) Info(...any)             {}
func (raftLogger) Infof(string, ...any)    {}
func (raftLogger) Warning(...any)          {}
func (raftLogger) Warningf(string, ...any) {}
func (raftLogger) Fatal(v ...any)          { panic(fmt.Sprint(v...)) }
func (raftLogger) Fatalf(f string, v ...any) {
	panic(fmt.Sprintf(f, v...))
}
func (raftLogger) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (raftLogger) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }

func (a *agreement) init(c *Core) error {
	a.c = c
	a.store = raft.NewMemoryStorage()
	a.group = map[uint64]string{}
	a.leader.joins = map[uint64]string{}
	a.leader.leaves = map[uint64]bool{}
	a.leader.ready = map[uint64]uint64{}
	a.rng = c.cfg.Seed ^ c.cfg.ID ^ 0x9e3779b97f4a7c15
	if c.cfg.Initial != nil {
		// Every initial member starts from the same log: the raft
		// membership (the first wantVoters members by peer ID as voters,
		// the rest as learners) and the first configuration, committed at
		// term 1. A log, not a snapshot: a joiner gets it by plain
		// appends (raft refuses a snapshot whose membership lacks it).
		first := &tconf{ID: 1, Start: c.cfg.Start, Members: slices.Clone(c.cfg.Initial)}
		for i := range first.Members {
			first.Members[i].Since = c.cfg.Start
		}
		var ents []*pb.Entry
		for i, m := range first.Members {
			typ := pb.ConfChangeAddNode
			if i >= a.wantVoters(len(first.Members)) {
				typ = pb.ConfChangeAddLearnerNode
			}
			data, err := proto.Marshal(&pb.ConfChange{Type: typ.Enum(), NodeId: new(m.ID), Context: []byte(m.Peer)})
			if err != nil {
				return err
			}
			ents = append(ents, &pb.Entry{Type: pb.EntryConfChange.Enum(), Term: new(uint64(1)), Index: new(uint64(len(ents) + 1)), Data: data})
		}
		ents = append(ents, &pb.Entry{Type: pb.EntryNormal.Enum(), Term: new(uint64(1)), Index: new(uint64(len(ents) + 1)), Data: first.encode(nil)})
		if err := a.store.Append(ents); err != nil {
			return err
		}
		if err := a.store.SetHardState(&pb.HardState{Term: new(uint64(1)), Commit: new(uint64(len(ents)))}); err != nil {
			return err
		}
	} else {
		a.join.contact = c.cfg.Contact
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID: c.cfg.ID, Storage: a.store,
		HeartbeatTick: c.cfg.Raft.HeartbeatTicks,
		ElectionTick:  1 << 30, // elections are this core's (see above)
		MaxSizePerMsg: 256 << 10, MaxInflightMsgs: 64,
		PreVote: true, DisableProposalForwarding: true, StepDownOnRemoval: true,
		Logger: raftLogger{},
	})
	if err != nil {
		return fmt.Errorf("%w: raft: %w", ErrConfig, err)
	}
	a.rn = rn
	a.newWait()
	if c.cfg.Initial != nil && c.cfg.Initial[0].ID == c.cfg.ID {
		// The first initial member (a voter: voters are the first by peer
		// ID) means to campaign at once, so the run has a leader within a
		// round trip, not after an election timeout. It does not work yet:
		// raft makes a node a voter only once it has applied the bootstrap
		// configuration, in its first Ready, and ignores this campaign, so
		// the first leader comes after an election timeout (1-2 s with the
		// default 10ms tick). Campaigning at the first tick instead works,
		// but changes the simulator's schedules; it waits for the chaos
		// fixes (issue 10).
		if err := a.rn.Campaign(); err != nil {
			return fmt.Errorf("raft campaign: %w", err)
		}
	}
	return nil
}

// next returns a pseudo-random number (splitmix64).
func (a *agreement) next() uint64 {
	a.rng += 0x9e3779b97f4a7c15
	z := a.rng
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// newWait draws the silence after which this peer campaigns.
func (a *agreement) newWait() {
	base := uint64(a.c.cfg.Raft.ElectionTicks * a.c.cfg.Raft.Every)
	a.wait = base + a.next()%base
}

func (a *agreement) isLeader() bool { return a.lead == a.c.cfg.ID && a.lead != 0 }

func (a *agreement) leaderPeer() string { return a.group[a.lead] }

func (a *agreement) isVoter() bool { return slices.Contains(a.voters, a.c.cfg.ID) }

// tick advances raft's clock and campaigns after a silent leader.
func (a *agreement) tick() {
	c := a.c
	if a.sub++; a.sub >= c.cfg.Raft.Every {
		a.sub = 0
		a.rn.Tick()
		a.checkQuorum()
	}
	if a.isLeader() {
		a.heard = c.tick
	} else if a.isVoter() && c.tick-a.heard > a.wait {
		a.heard = c.tick
		a.newWait()
		a.rn.Campaign()
	}
	if a.leaving && !a.isLeader() && c.tick-a.leaveAt >= uint64(c.cfg.RetryTicks) {
		a.askLeave()
	}
	if a.join.suspect != 0 && slices.Contains(a.voters, a.join.suspect) {
		a.join.suspect = 0 // the log caught up: it is a voter here now
	}
	if a.join.suspect != 0 && c.joined && c.tick-a.join.askedWho >= uint64(c.cfg.RetryTicks)/4 {
		// Leader messages came from a node this peer's log calls a
		// learner: ask the voters it knows who leads (A3).
		a.join.askedWho = c.tick
		for _, v := range a.voters {
			if p, ok := a.group[v]; ok && v != c.cfg.ID {
				c.send(p, &wire.Core{Op: wire.CoreJoin})
			}
		}
	}
}

// checkQuorum is the leader's half of raft's check-quorum (C11), run on
// this core's clock since raft's own election timeout is out of reach: a
// leader that has not heard from a majority of its voters (an append or
// heartbeat answered) within an election timeout steps down to follower.
// Followers keep a lease on their leader (authority.go, A4); without this
// half, a leader cut off with one voter of a majority's group kept that
// voter following it after the majority had removed the leader, and the
// majority's pre-votes were refused forever (TestFixedSeeds sync/chaos 23,
// TestScripts/c11-leader-without-quorum-steps-down).
//
// Raft takes MsgCheckQuorum only as a local message; RawNode.Step lets a
// local message through only from one of raft's local targets, so it goes
// as from LocalAppendThread (raft reads no sender on it). Raft tracks who
// answered (Progress.RecentActive, set by append and heartbeat responses,
// cleared by each check) and steps down when no majority did.
//
// A leader that is its configuration's only member keeps leading: it goes
// final without a commit (E5, alone), which holds only while no other node
// can lead, and no other member could carry the run anyway. Stepping down,
// it stopped with ErrNoQuorum (C7) instead of finishing when a dead voter
// it could not remove was left in its group (TestFixedSeeds ssp/chaos 466).
func (a *agreement) checkQuorum() {
	if !a.isLeader() || a.onlyMember(a.c.cs.cur()) {
		a.leader.quorumAt = 0
		return
	}
	if a.leader.quorumAt++; a.leader.quorumAt < a.c.cfg.Raft.ElectionTicks {
		return
	}
	a.leader.quorumAt = 0
	if err := a.rn.Step(&pb.Message{From: new(raft.LocalAppendThread), Type: pb.MsgCheckQuorum.Enum()}); err != nil {
		a.c.fail(fmt.Errorf("%w: check quorum: %w", ErrRaft, err))
	}
}

// receive handles raft, join and leave messages.
func (a *agreement) receive(from string, msg *wire.Core) {
	c := a.c
	switch msg.Op {
	case wire.CoreRaft:
		var m pb.Message
		if err := proto.Unmarshal(msg.Blob, &m); err != nil {
			c.stats.Rejected++
			return
		}
		if !a.mayStep(from, &m) {
			c.stats.Rejected++
			return
		}
		if t := m.GetType(); m.GetFrom() == a.lead && (t == pb.MsgApp || t == pb.MsgHeartbeat) {
			// Only what the leader sends as leader renews its lease (A4)
			// and puts off this peer's campaign, as raft restarts its
			// election timer only on appends and heartbeats. A leader
			// deposed by C11 that campaigned renewed its old follower's
			// lease with each pre-vote, so the vote that followed was
			// refused as in lease, election after election
			// (TestFixedSeeds sync/chaos 607).
			a.heard = c.tick
		}
		a.join.answered = c.tick
		if err := a.step(from, &m); err != nil {
			c.stats.Rejected++
		}
	case wire.CoreJoin:
		a.onJoin(from, msg)
	case wire.CoreJoinReply:
		if msg.Flags&wire.FlagRefused == 0 || msg.Text != "" || msg.Req != 0 {
			a.join.answered = c.tick
		}
		if a.c.joined {
			a.vouch(from, msg) // a voter's answer to "who leads?" (authority.go, A3)
			return
		}
		if a.join.contact == "" || (from != a.join.contact && from != a.leaderPeer()) || a.c.joined {
			return // not asked, or admitted already
		}
		if msg.Flags&wire.FlagRefused != 0 {
			if msg.Text != "" {
				c.fail(fmt.Errorf("%w: %s says: %s", ErrRefused, short(from), msg.Text))
			}
			return // no leader yet: ask again later
		}
		if msg.Req != 0 && msg.Text != "" {
			// Trust the member we asked for who leads: accept that raft
			// node's messages until the log tells us the group. Never
			// over what the log said: a late answer of a contact that
			// was not the leader once mapped the contact's raft ID to the
			// leader's peer, back when the reply carried the leader's ID
			// in Member, which every message sets to its sender's
			// (sync/fast-chaos seed 238: the leader's messages to that
			// member went to another peer, and the member never learned
			// a configuration again).
			if _, known := a.group[msg.Req]; !known {
				a.group[msg.Req] = msg.Text
			}
			if a.group[msg.Req] == msg.Text {
				a.join.named = msg.Req
			}
			a.join.contact = msg.Text
		}
	case wire.CoreLeave:
		t := c.cs.cur()
		if t == nil || !t.isMember(from, msg.Member) {
			c.stats.Rejected++
			return
		}
		a.leader.leaves[msg.Member] = true
	}
}

// onJoin answers a peer asking to join: the leader admits it (as a raft
// learner first, then as a worker of the next configuration); anyone else
// says who leads.
func (a *agreement) onJoin(from string, msg *wire.Core) {
	c := a.c
	reply := &wire.Core{Op: wire.CoreJoinReply}
	switch {
	case msg.Member == 0:
		return
	case !a.isLeader():
		if a.lead == 0 || !c.joined {
			// (A peer that is joining itself vouches for no leader: its
			// own may be gone, and joiners that sent each other to it
			// kept each other waiting forever, sync/fast-chaos seed 143.)
			reply.Flags = wire.FlagRefused // no leader known: ask again
		} else {
			reply.Text, reply.Req = a.leaderPeer(), a.lead
		}
	case a.finishing():
		reply.Flags, reply.Text = wire.FlagRefused, "the job is finishing"
	default:
		if p, ok := a.group[msg.Member]; ok && p != from {
			c.stats.Rejected++
			return // a member ID taken by another peer
		}
		if t := c.cs.cur(); (t == nil || !t.isMember(from, msg.Member)) && !a.admit(from, msg.Member) {
			c.stats.Rejected++
			// Not (yet) alive here, or too many joining: ask again. Req
			// says the leader answered (the joiner waits on, rather than
			// turning to another member).
			reply.Flags, reply.Req = wire.FlagRefused, c.cfg.ID
			break
		}
		reply.Text, reply.Req = c.cfg.Self, c.cfg.ID
	}
	c.send(from, reply)
}

// maxJoins bounds the joins the leader keeps pending (J3): peers join a
// few at a time, and each waits only until it is a worker.
const maxJoins = 64

// admit records peer from's request to join as member id, and reports
// whether it is pending now. Only what a remote peer cannot inflate:
//
//	J1  only a member the membership knows alive: a peer that beats on the
//	    members topic, which takes the job's key and a hello with the job's
//	    settings; a stranger's request changes nothing;
//	J2  one pending join a peer: a request under a new member ID (a
//	    restart) replaces the older one;
//	J3  at most maxJoins pending in all;
//	J4  a pending join whose peer is no longer alive is dropped
//	    (reconcileGroup): it asks again if it comes back.
//
// TestJoinsBounded pins J1-J4, TestJoinFloodIsCheap the cost of 10,000
// forged requests.
func (a *agreement) admit(from string, id uint64) bool {
	c := a.c
	if c.aliveOK && !c.alive[id] {
		return false // J1
	}
	for pid, p := range a.leader.joins {
		if p == from && pid != id {
			delete(a.leader.joins, pid) // J2
		}
	}
	if _, ok := a.leader.joins[id]; !ok && len(a.leader.joins) >= maxJoins {
		return false // J3
	}
	a.leader.joins[id] = from
	return true
}

// leave starts this peer's graceful leave.
func (a *agreement) leave() {
	if a.leaving {
		return
	}
	a.leaving = true
	a.c.markLeaving()
	if a.isLeader() {
		a.leader.leaves[a.c.cfg.ID] = true
		return
	}
	a.askLeave()
}

func (a *agreement) askLeave() {
	c := a.c
	a.leaveAt = c.tick
	t := c.cs.cur()
	if t == nil || !t.isMember(c.cfg.Self, c.cfg.ID) || a.lead == 0 {
		return
	}
	c.send(a.leaderPeer(), &wire.Core{Op: wire.CoreLeave})
}

// work runs raft's Ready loop, the joiner's requests and the leader's
// proposals. It reports whether anything happened.
func (a *agreement) work() (progress bool) {
	c := a.c
	defer func() {
		// (A6: raft panics only on a broken invariant of its own log.)
		if r := recover(); r != nil {
			c.fail(fmt.Errorf("%w: %v", ErrRaft, r))
			progress = false
		}
	}()
	if !c.joined && a.join.contact != "" && (!a.join.asked || c.tick-a.join.askedAt >= uint64(c.cfg.RetryTicks)/4) {
		if !a.join.asked {
			a.join.answered = c.tick
		}
		if c.tick-a.join.answered > uint64(16*c.cfg.RetryTicks) {
			c.fail(fmt.Errorf("%w: no member of the run answered for %d ticks (the run may have ended)", ErrRefused, c.tick-a.join.answered))
			return false
		}
		if c.tick-max(a.join.answered, a.join.askingAt) > uint64(2*c.cfg.RetryTicks) {
			// The leader it was sent to has gone quiet (it left, or
			// crashed): ask the member it started from who leads now,
			// and when that one is silent too, the others in turn.
			next := c.cfg.Contact
			if a.join.contact == c.cfg.Contact && len(c.cfg.Contacts) > 0 {
				next = c.cfg.Contacts[a.join.nextAsk%len(c.cfg.Contacts)]
				a.join.nextAsk++
			}
			a.join.contact, a.join.askingAt = next, c.tick
		}
		a.join.asked, a.join.askedAt = true, c.tick
		c.send(a.join.contact, &wire.Core{Op: wire.CoreJoin})
	}
	if a.isLeader() {
		a.propose()
	}
	for a.rn.HasReady() {
		progress = true
		rd := a.rn.Ready()
		if rd.SoftState != nil && rd.SoftState.Lead != a.lead {
			a.lead = rd.SoftState.Lead
			a.heard = c.tick
			if a.isLeader() {
				c.event(Event{Kind: EvLeader, Peer: c.cfg.Self})
				if a.leaving {
					a.leader.leaves[c.cfg.ID] = true
				}
			} else if a.leaving && a.lead != 0 {
				a.askLeave() // a leader at last: ask it now
			}
		}
		if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
			if err := a.store.ApplySnapshot(rd.Snapshot); err != nil {
				c.fail(fmt.Errorf("raft snapshot: %w", err))
				return false
			}
			a.applySnapshotData(rd.Snapshot.GetData(), rd.Snapshot.GetMetadata().GetConfState())
		}
		if err := a.store.Append(rd.Entries); err != nil {
			c.fail(fmt.Errorf("raft append: %w", err))
			return false
		}
		if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
			a.store.SetHardState(rd.HardState)
		}
		for _, m := range rd.Messages {
			p, ok := a.group[m.GetTo()]
			if !ok {
				continue
			}
			b, err := proto.Marshal(m)
			if err != nil {
				c.fail(fmt.Errorf("raft message: %w", err))
				return false
			}
			c.send(p, &wire.Core{Op: wire.CoreRaft, Blob: b})
		}
		for _, e := range rd.CommittedEntries {
			a.apply(e)
		}
		a.rn.Advance(rd)
	}
	return progress
}

// applySnapshotData installs the first configuration carried by a raft
// snapshot (this core never compacts, so the only snapshot is the
// bootstrap one).
func (a *agreement) applySnapshotData(data []byte, cs *pb.ConfState) {
	c := a.c
	t, err := decodeConf(data)
	if err != nil {
		c.fail(fmt.Errorf("raft snapshot: %w", err))
		return
	}
	a.voters = slices.Clone(cs.GetVoters())
	for _, m := range t.Members {
		a.group[m.ID] = m.Peer
	}
	if c.cs.cur() == nil {
		c.applyConfig(t)
	}
}

// apply applies one committed entry: a raft membership change, or a
// training configuration.
func (a *agreement) apply(e *pb.Entry) {
	c := a.c
	if a.leader.prop != nil && e.GetTerm() > a.leader.propTerm {
		// A later leader's entry: a proposal of this peer as an earlier
		// leader is in the log before it, applied, or was dropped; either
		// way its fence (holdPush) is over.
		defer func() {
			if a.leader.prop != nil && (c.cs.cur() == nil || c.cs.cur().ID < a.leader.prop.ID) {
				a.leader.prop = nil
			}
		}()
	}
	switch e.GetType() {
	case pb.EntryConfChange:
		var cc pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			c.fail(fmt.Errorf("raft conf change: %w", err))
			return
		}
		cs := a.rn.ApplyConfChange(&cc)
		a.voters = slices.Clone(cs.GetVoters())
		a.join.vouched = 0 // the log says who votes again (authority.go, A3)
		id := cc.GetNodeId()
		switch cc.GetType() {
		case pb.ConfChangeAddNode, pb.ConfChangeAddLearnerNode:
			if ctx := cc.GetContext(); len(ctx) > 0 {
				a.group[id] = string(ctx)
			}
		case pb.ConfChangeRemoveNode:
			if id != c.cfg.ID {
				delete(a.group, id)
			}
		}
		a.leader.ccAt = 0
	case pb.EntryNormal:
		if len(e.GetData()) == 0 {
			// A new leader's empty entry, or a conf change raft refused
			// (one was pending) and logged as an empty entry: propose
			// the next one now.
			a.leader.ccAt = 0
			return
		}
		t, err := decodeConf(e.GetData())
		if err != nil {
			c.fail(fmt.Errorf("raft entry %d: %w", e.GetIndex(), err))
			return
		}
		cur := c.cs.cur()
		if cur == nil && t.ID != 1 || cur != nil && t.ID != cur.ID+1 {
			return // proposed twice (a leader change): the first one counts
		}
		c.applyConfig(t)
	}
}

// holdPush reports whether this worker must not push yet: as leader it has
// proposed a configuration that starts after its next round (sync mode:
// nobody can reach that start before this push, so it is safe until the
// configuration commits).
func (a *agreement) holdPush() bool {
	return a.leader.prop != nil && a.c.cfg.Mode == Sync
}

// propose is the leader's duty: one raft membership change at a time
// (admit joiners as learners, keep Voters voters, remove peers no
// configuration names), and the next training configuration when members
// died, asked to leave or wait to join, or a checkpoint is due.
func (a *agreement) propose() {
	c := a.c
	cur := c.cs.cur()
	if cur == nil {
		return
	}
	// Once every live member has its final values (CoreFinished, and this
	// peer has them too), nothing changes the run: members that exit
	// now, one after another, are not crashes to repair, and taking their
	// shards over would fill the last peers' memory with a model nobody
	// reads again (TestNoMovesAfterTheEnd).
	if c.finishing && c.allFinished() {
		return
	}
	// Once the values are final only crashes change the run: the peers
	// still fetch the final values, and a dead owner's replica must take
	// its shards over for that.
	final := a.finishing()
	if a.leader.prop != nil && (cur.ID >= a.leader.prop.ID || c.tick-a.leader.propAt > uint64(8*c.cfg.RetryTicks)) {
		a.leader.prop = nil // applied, superseded, or lost with a leader change
	}
	a.reconcileGroup(cur)
	me, ok := cur.member(c.cfg.Self)
	if !ok || me.ID != c.cfg.ID {
		a.handOver(cur)
		return
	}
	if a.leader.prop != nil {
		return
	}
	dead, left, joined := a.changes(cur, final)
	next, ckpt := a.nextConfig(cur, final, dead, left, joined)
	if next == nil {
		return
	}
	if ckpt {
		a.leader.ckptAt = c.tick
	}
	if err := a.rn.Propose(next.encode(nil)); err != nil {
		return
	}
	a.leader.prop, a.leader.propAt, a.leader.propTerm = next, c.tick, a.rn.BasicStatus().GetTerm()
}

// handOver, on a leader that is not a worker of the run (it cannot fence
// rounds), hands leadership to a live voter of cur, trying the next one
// every retry interval.
func (a *agreement) handOver(cur *tconf) {
	c := a.c
	if len(cur.Members) > 0 && c.tick-a.leader.propAt > uint64(c.cfg.RetryTicks) {
		a.leader.propAt = c.tick
		var to []uint64
		for _, m := range cur.Members {
			if slices.Contains(a.voters, m.ID) && c.isAlive(m.ID) {
				to = append(to, m.ID)
			}
		}
		if len(to) > 0 {
			// Abort the transfer under way first: raft sends its
			// MsgTimeoutNow once, and gives a transfer up only after an
			// election timeout, which this core's own elections leave
			// out of reach; a lost one would keep this leader from
			// ever handing over (and from proposing meanwhile). Each
			// attempt tries the next voter.
			a.rn.TransferLeader(c.cfg.ID)
			a.rn.TransferLeader(to[a.leader.transfers%len(to)])
			a.leader.transfers++
		}
	}
}

// changes is what the next configuration changes of cur: the members that
// died or asked to leave, and the admitted joiners to add. After the final
// round only crashes count.
func (a *agreement) changes(cur *tconf, final bool) (dead, left, joined []Member) {
	c := a.c
	for _, m := range cur.Members {
		switch {
		case a.leader.leaves[m.ID] && !final: // (after the final round a leave changes nothing)
			left = append(left, m)
		case !c.isAlive(m.ID):
			dead = append(dead, m)
		}
	}
	for id, p := range a.leader.joins {
		if final {
			break
		}
		if _, inGroup := a.group[id]; !inGroup || !c.isAlive(id) && c.aliveOK {
			continue // a learner first; and alive
		}
		if _, taken := cur.member(p); taken {
			continue // its old incarnation goes first (removed as dead)
		}
		joined = append(joined, Member{Peer: p, ID: id})
	}
	return dead, left, joined
}

// nextConfig is the configuration that follows cur with these changes, a
// checkpoint when one is due, and (ssp/async) the final one when every
// member is ready; nil when there is nothing to change. ckpt: it takes the
// scheduled checkpoint.
func (a *agreement) nextConfig(cur *tconf, final bool, dead, left, joined []Member) (next *tconf, ckpt bool) {
	c := a.c
	ckpt = c.cfg.CheckpointTicks > 0 && c.tick-a.leader.ckptAt >= uint64(c.cfg.CheckpointTicks) && c.workerStarted() && !c.dataDone() && !final
	// Ssp/async: the values are final once every holder says every member
	// is done and applied under this configuration, and nothing changes
	// it meanwhile. Agreed here, not decided by each holder alone: a
	// holder that went final under its newest configuration could miss a
	// newer one (a joiner to wait for, a shard it now applies).
	fin := c.cfg.Mode != Sync && !cur.Final && len(dead)+len(left)+len(joined) == 0 && a.allReady(cur)
	if fin {
		ckpt = false
	}
	if len(dead)+len(left)+len(joined) == 0 && !ckpt && !fin {
		return nil, false
	}
	next = &tconf{ID: cur.ID + 1, Crashed: dead, Left: left, Checkpoint: ckpt, Final: cur.Final || fin}
	next.Start = max(cur.Start, c.Round()+1)
	if c.cfg.Mode != Sync || final {
		// (After the final round no round runs again: shards move as
		// they are, at once.)
		next.Start = max(cur.Start, c.Round())
	}
	if c.cfg.Mode != Sync && ckpt && len(dead)+len(left)+len(joined) > 0 {
		// A cut needs the same members throughout: membership first.
		ckpt, next.Checkpoint = false, false
	}
	if cur.Checkpoint && next.Start == cur.Start && c.cfg.Mode == Sync {
		// The checkpoint of cur's start is due at the same round: the
		// newer configuration of that round keeps it.
		next.Checkpoint = true
	}
	gone := map[uint64]bool{}
	for _, m := range dead {
		gone[m.ID] = true
	}
	for _, m := range left {
		gone[m.ID] = true
	}
	for _, m := range cur.Members {
		if !gone[m.ID] {
			next.Members = append(next.Members, m)
		}
	}
	for _, m := range joined {
		m.Since = next.Start
		next.Members = append(next.Members, m)
	}
	if len(next.Members) == 0 {
		return nil, false
	}
	sortMembers(next.Members)
	sortMembers(next.Crashed)
	sortMembers(next.Left)
	return next, ckpt
}

// finishing reports whether the run's values are final, or about to be, as
// this peer knows: its worker has final values, the current configuration
// is the final one, or (ssp/async) its owner ended alone. No join is
// admitted then; only crashes change the run.
func (a *agreement) finishing() bool {
	c := a.c
	cur := c.cs.cur()
	return c.workerFinal() || cur != nil && cur.Final || c.cfg.Mode != Sync && c.ownerFinal()
}

// allReady reports whether every member of cur has said it is ready under
// cur (CoreReady).
func (a *agreement) allReady(cur *tconf) bool {
	for _, m := range cur.Members {
		if a.leader.ready[m.ID] != cur.ID {
			return false
		}
	}
	return len(cur.Members) > 0
}

// alone reports whether no configuration that changes who works can
// follow cur but one this peer proposes: it is cur's only member (only a
// member of the newest configuration proposes the next), the leader, and
// what it has proposed, if anything, keeps the members (a final or
// checkpoint configuration). An owner alone need not wait for the final
// configuration to commit: raft may have lost its quorum (a dead voter
// that is no member), and nothing could change the run anyway.
func (a *agreement) alone(cur *tconf) bool {
	if !a.onlyMember(cur) || !a.isLeader() {
		return false
	}
	return a.leader.prop == nil || len(a.leader.prop.Members) == 1 && a.leader.prop.Members[0].ID == a.c.cfg.ID
}

// onlyMember reports whether this peer is cur's only member.
func (a *agreement) onlyMember(cur *tconf) bool {
	return cur != nil && len(cur.Members) == 1 && cur.Members[0].Peer == a.c.cfg.Self && cur.Members[0].ID == a.c.cfg.ID
}

// quorumGone returns the voters that are gone (short peer IDs, or raft IDs
// of peers not in the group) when most of them are and the run needs the
// group: a member of the current configuration is dead (only a new
// configuration removes it), or this owner waits for the final one.
// Otherwise nil. A run that ends, a peer that lingers or is leaving, or
// one that has not met the membership yet, needs nothing of the group.
func (a *agreement) quorumGone() []string {
	c := a.c
	cur := c.cs.cur()
	if cur == nil || !c.aliveOK || len(a.voters) == 0 || c.Finishing() || c.lingering() || c.doneSent {
		return nil
	}
	var gone []string
	for _, id := range a.voters {
		if id != c.cfg.ID && !c.alive[id] {
			if p, ok := a.group[id]; ok {
				gone = append(gone, short(p))
			} else {
				gone = append(gone, fmt.Sprintf("%x", id))
			}
		}
	}
	if 2*len(gone) < len(a.voters) {
		return nil
	}
	needed := c.cfg.Mode != Sync && c.readyFor() == cur.ID && !cur.Final
	for _, m := range cur.Members {
		needed = needed || !c.isAlive(m.ID)
	}
	if !needed {
		return nil
	}
	return gone
}

// onReady takes a member's CoreReady for configuration id.
func (a *agreement) onReady(member, id uint64) {
	if id > a.leader.ready[member] {
		a.leader.ready[member] = id
	}
}

// reconcileGroup proposes at most one raft membership change: add pending
// joiners as learners, remove peers that no configuration needs, promote
// learners until there are Voters voters.
func (a *agreement) reconcileGroup(cur *tconf) {
	c := a.c
	if c.aliveOK {
		for id := range a.leader.joins {
			if !c.alive[id] {
				delete(a.leader.joins, id) // J4
			}
		}
	}
	if a.leader.ccAt != 0 && c.tick-a.leader.ccAt < uint64(4*c.cfg.RetryTicks) {
		return // one at a time
	}
	if a.dropDeadVoter(cur) {
		return
	}
	// Voters among the members up to wantVoters, before a leaver's vote
	// goes (demoteLeaver): an even number of voters meanwhile would lose
	// the quorum with any one of them.
	want := a.wantVoters(len(cur.Members))
	n := countFunc(a.voters, func(id uint64) bool { return cur.isMember(a.group[id], id) })
	promoting, done := false, false
	if n < want {
		promoting, done = a.promoteLearner(cur)
	}
	if done || a.demoteLeaver(cur, promoting) || a.addLearners(cur) || a.removeGone(cur) || a.readdCutOff(cur) ||
		n > want && a.demoteExtra(cur) {
		return
	}
	// Joiners that are workers now need no more admitting.
	for id, p := range a.leader.joins {
		if cur.isMember(p, id) {
			delete(a.leader.joins, id)
		}
	}
	for id := range a.leader.leaves {
		if _, ok := cur.member(a.group[id]); !ok {
			delete(a.leader.leaves, id)
		}
	}
}

// proposeCC proposes one raft membership change, and notes when.
func (a *agreement) proposeCC(t pb.ConfChangeType, id uint64, peer string) {
	cc := &pb.ConfChange{Type: t.Enum(), NodeId: new(id), Context: []byte(peer)}
	if a.rn.ProposeConfChange(cc) == nil {
		a.leader.ccAt = a.c.tick
	}
}

// dropDeadVoter proposes to remove a dead voter, or first to promote a
// live learner in its place; it reports whether it proposed a change. A
// dead voter first: every voter the group keeps that cannot vote brings
// it closer to losing its quorum at the next failure. A live learner of
// the configuration takes a vote before the dead one goes (three voters,
// one dead, then two, survive no other failure; with the learner's vote
// the group survives one more at once).
func (a *agreement) dropDeadVoter(cur *tconf) bool {
	c := a.c
	if c.aliveOK && len(a.voters) > 2 {
		live := countFunc(a.voters, func(id uint64) bool { return c.alive[id] })
		for _, id := range a.voters {
			if id == c.cfg.ID || c.alive[id] {
				continue
			}
			if live < c.cfg.Voters {
				st := a.rn.Status()
				for _, m := range cur.Members {
					if _, ok := a.group[m.ID]; ok && !slices.Contains(a.voters, m.ID) && c.isAlive(m.ID) && st.Progress[m.ID].Match >= st.GetCommit() {
						a.proposeCC(pb.ConfChangeAddNode, m.ID, m.Peer)
						return true
					}
				}
			}
			a.proposeCC(pb.ConfChangeRemoveNode, id, "")
			return true
		}
	}
	return false
}

// promoteLearner proposes to make a learner of cur a voter. Only a learner
// that has the log through the commit index: it has answered lately (one
// that crashed since it was heard of would be a voter that cannot vote),
// and it can vote at once. While one catches up (promoting), a leaver
// keeps its vote. done: it proposed a change.
func (a *agreement) promoteLearner(cur *tconf) (promoting, done bool) {
	c := a.c
	st := a.rn.Status()
	for _, m := range cur.Members {
		if _, ok := a.group[m.ID]; !ok || slices.Contains(a.voters, m.ID) || !c.isAlive(m.ID) {
			continue
		}
		if st.Progress[m.ID].Match >= st.GetCommit() {
			a.proposeCC(pb.ConfChangeAddNode, m.ID, m.Peer)
			return promoting, true
		}
		promoting = true
	}
	return promoting, false
}

// demoteLeaver: a voter the configuration no longer names (a leaver
// serving its last rounds) becomes a learner now, before it goes: a voter
// that has gone counts against the quorum until removed, and removing it
// needs that quorum. Not while a learner is being promoted.
func (a *agreement) demoteLeaver(cur *tconf, promoting bool) bool {
	c := a.c
	for _, id := range a.voters {
		if id != c.cfg.ID && !cur.isMember(a.group[id], id) && !promoting {
			a.proposeCC(pb.ConfChangeAddLearnerNode, id, a.group[id])
			return true
		}
	}
	return false
}

// addLearners proposes to add as a learner an admitted joiner, or a member
// of the configuration the group lost (removed as a dead voter while the
// configuration still had it).
func (a *agreement) addLearners(cur *tconf) bool {
	c := a.c
	for _, id := range sortedKeys(a.leader.joins) {
		if _, ok := a.group[id]; !ok {
			a.proposeCC(pb.ConfChangeAddLearnerNode, id, a.leader.joins[id])
			return true
		}
	}
	// Members of the configuration the group lost (removed as dead voters
	// while the configuration still had them) come back as learners.
	for _, m := range cur.Members {
		if _, ok := a.group[m.ID]; !ok && c.isAlive(m.ID) {
			a.proposeCC(pb.ConfChangeAddLearnerNode, m.ID, m.Peer)
			return true
		}
	}
	return false
}

// removeGone: peers no configuration needs leave the group once gone: a
// leaver still serves its last rounds (and must learn the configurations
// that come meanwhile), a peer removed while cut off learns it was.
func (a *agreement) removeGone(cur *tconf) bool {
	c := a.c
	for _, id := range sortedKeys(a.group) {
		if _, pending := a.leader.joins[id]; pending {
			continue
		}
		if !cur.isMember(a.group[id], id) && id != c.cfg.ID && c.aliveOK && !c.alive[id] {
			a.proposeCC(pb.ConfChangeRemoveNode, id, "")
			return true
		}
	}
	return false
}

// readdCutOff: a peer dropped from the group while it was cut off, and
// heard from again, comes back as a learner: a leaver still serves its
// last rounds and must learn the configurations since (the route of a
// round it replicates may have changed); a member removed as dead while
// alive must learn that it was, or it waits forever.
func (a *agreement) readdCutOff(cur *tconf) bool {
	c := a.c
	if c.aliveOK {
		for _, t := range c.cs.list {
			for _, l := range [][]Member{t.Left, t.Crashed} {
				for _, m := range l {
					if _, ok := a.group[m.ID]; !ok && m.ID != c.cfg.ID && c.alive[m.ID] && !cur.isMember(m.Peer, m.ID) {
						a.proposeCC(pb.ConfChangeAddLearnerNode, m.ID, m.Peer)
						return true
					}
				}
			}
		}
	}
	return false
}

// demoteExtra makes one voter too many (members left or crashed) a
// learner again, a dead one first.
func (a *agreement) demoteExtra(cur *tconf) bool {
	c := a.c
	var pick uint64
	for _, id := range a.voters {
		if id != c.cfg.ID && cur.isMember(a.group[id], id) && (pick == 0 || !c.isAlive(id)) {
			pick = id
		}
	}
	if pick != 0 {
		a.proposeCC(pb.ConfChangeAddLearnerNode, pick, a.group[pick])
		return true
	}
	return false
}

// wantVoters is how many voters the raft group keeps with n members: at
// most Config.Voters, and an odd number: an even number of voters survives
// no more failures than one fewer, and there are more of them to fail (two
// voters lose the quorum with either).
func (a *agreement) wantVoters(n int) int {
	w := min(a.c.cfg.Voters, n)
	if w > 1 && w%2 == 0 {
		w--
	}
	return w
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	ks := make([]uint64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// String describes the raft member for Core.Debug.
func (a *agreement) String() string {
	st := a.rn.Status()
	var b strings.Builder
	fmt.Fprintf(&b, "raft term %d lead %x state %v commit %d applied %d voters %x learners %x",
		st.GetTerm(), a.lead&0xffff, st.RaftState, st.GetCommit(), st.Applied, st.Config.Voters.IDs(), st.Config.Learners)
	for _, id := range sortedKeys(st.Progress) {
		pr := st.Progress[id]
		fmt.Fprintf(&b, " [%x match %d next %d %v active %v", id&0xffff, pr.Match, pr.Next, pr.State, pr.RecentActive)
		if p, ok := a.group[id]; !ok {
			b.WriteString(" not in the group")
		} else {
			b.WriteString(" " + short(p))
		}
		b.WriteString("]")
	}
	if a.leader.prop != nil {
		fmt.Fprintf(&b, " proposing %d (at %d)", a.leader.prop.ID, a.leader.propAt)
	}
	fmt.Fprintf(&b, " joins %v leaves %v ccAt %d", a.leader.joins, a.leader.leaves, a.leader.ccAt)
	return b.String()
}

func countFunc[T any](s []T, f func(T) bool) int {
	n := 0
	for _, v := range s {
		if f(v) {
			n++
		}
	}
	return n
}
