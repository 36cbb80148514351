package train

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// Envelope is a message to send: To is a peer ID (this peer's own ID
// included: the driver delivers those back without the network).
type Envelope struct {
	To  string
	Msg *wire.Core
}

// ComputeReq asks the driver to compute the gradient of the batch of Round
// (the Round-th batch it supplied since the core started, counting from
// the first round) on Weights: len(Keys)*Width values, row i holding model
// row Keys[i]. The driver answers with Computed; the core asks for one at
// a time. With windows of local steps (Config.LocalSteps) the batch is a
// window's batches, Weights are wide rows (model.AppendWide: weights, then
// optimizer state) and the answer is each row's change after training
// them (sgd.Window).
type ComputeReq struct {
	Round    uint64
	Keys     []uint32
	Weights  []float32
	Examples int
	// Workers is the number of workers whose windows' changes the owners
	// add up (the round's configuration's; 1 with Combine Mean, which
	// averages them): each trains as if the others' steps counted in its
	// optimizer state too (sgd.Window).
	Workers int
}

// FetchResult answers a Fetch: the values of the keys asked for
// (len(Keys)*Width, row-major), or with all shards the rows they hold.
type FetchResult struct {
	ID     uint64
	Keys   []uint32
	Values []float32
	Rows   model.Sparse // Fetch with all: every row of every shard that is not zero
	Hashes []uint64     // FetchHashes: per shard
	Final  bool         // the values are final
}

// CheckpointReq asks the driver to write this peer's part of a checkpoint:
// Shards are the exports of the shards it holds (weights and optimizer
// state, model.Model.AppendShard) as of the end of round Round-1, and
// Worker says the worker's data position is the one before its batch of
// Round.
type CheckpointReq struct {
	Round   uint64
	Config  uint64
	Members []string // the workers of Round
	Shards  map[int][]byte
	Worker  bool
	// WorkerRound is the round whose batch the worker's data position is
	// before: Round in sync mode, the worker's own cut in ssp/async (a
	// resumed run starts every worker at Round, each at that position).
	WorkerRound uint64
}

// Event is something the driver logs and reports: a configuration that
// took effect, a shard promoted, a handoff, a leader change.
type Event struct {
	Kind    EventKind
	Config  uint64
	Start   uint64
	Members []string
	Joined  []string
	Left    []string
	Crashed []string
	Shards  int    // owned (primary) shards after a configuration; shards moved
	Rows    int    // EvDropped: the rows dropped
	Peer    string // the other side of a handoff, the leader
	Text    string
	Final   bool // EvConfig: the configuration that ends an ssp/async run
}

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	EvConfig    EventKind = iota + 1 // a configuration took effect here
	EvPromoted                       // shards lost with every holder restarted from their initial values
	EvHandedOff                      // shards handed to their new holder
	EvReceived                       // shards received from their previous holder
	EvLeader                         // this peer became the raft leader
	EvFinal                          // every worker is done: the values are final
	EvLost                           // contributions lost with a crashed peer
	EvDropped                        // gradient rows of a push dropped as over Config.Guard.MaxRowGrad (Rows of them, from Peer)
)

// Ready is what the core decided since the last Ready: what to send, what
// to compute, what to write, what happened. Its slices are the driver's to
// keep, but for Messages: the slice of envelopes is valid until the next
// call of Ready, which fills its array again (the envelopes' messages are
// the driver's to keep). A slice per Ready was the most frequent
// allocation of a round (TestWindowRoundAllocations).
type Ready struct {
	Messages []Envelope
	// Compute, when not nil, is the next gradient to compute.
	Compute *ComputeReq
	// WantBatches is how many more batches the core wants than it has
	// (the driver answers with Batch or EndOfData).
	WantBatches int
	Fetched     []FetchResult
	Checkpoints []CheckpointReq
	Events      []Event
	// Done: training is over for this peer and every member has its final
	// values (or this peer left): the driver may stop.
	Done bool
	// Left: this peer left the run gracefully (Done is set too).
	Left bool
	// Err is fatal: ErrRemoved, ErrRefused, or a broken invariant.
	Err error
}

// Stats counts what a core did. Monotone counters.
type Stats struct {
	Rounds        uint64 // rounds this worker pushed
	Examples      uint64 // examples in them
	Applied       uint64 // contributions (worker, round, shard group) applied as primary
	Replicated    uint64 // forwards applied as replica
	Degraded      uint64 // sync rounds applied without a member that crashed
	Resent        uint64 // requests sent again (retry or new owner)
	Moved         uint64 // requests answered "moved"
	Rejected      uint64 // messages refused by role (not from whom they must come)
	Stale         uint64 // messages of a configuration or round this peer is past
	HandedOff     uint64 // shards sent to a new holder
	Received      uint64 // shards received from a previous holder
	Promoted      uint64 // shards restarted from initial values (every holder lost)
	Lost          uint64 // contributions lost with a crashed worker (async: buffered behind a gap)
	Refreshes     uint64 // async: a replica's copy that missed a contribution, asked of the primary again
	MaxStaleness  uint64 // rounds of others' contributions missing from values a round was computed with (ssp/async bound)
	RowsDropped   uint64 // gradient rows dropped as over Config.Guard.MaxRowGrad (guard.go, G2)
	ConfigChanges uint64
}

// Core is one peer's distributed training protocol: worker, owner of the
// shards its placement gives it, and member of the raft group that agrees
// on configurations. Events in (Tick, Receive, Alive, Batch, Computed,
// Leave, Fetch, Finish), decisions out (Ready). It does no I/O, reads no
// clock and starts no goroutine; it is not safe for concurrent use.
type Core struct {
	cfg   Config
	m     *model.Model
	width int
	// xw is the width of the rows workers and owners exchange (pushes,
	// forwards, a workset's values): the model's rows, or with windows of
	// local steps its wide rows, weights then optimizer state.
	xw     int
	shards int
	mask   uint32
	tick   uint64

	cs      configs
	alive   map[uint64]bool // member IDs the driver's membership says are alive
	aliveOK bool            // Alive was called at least once
	joined  bool            // a configuration with this member applied
	started bool            // worker started (first configuration applied)

	ag agreement
	w  worker
	o  owner

	rd        Ready
	spare     []Envelope // the Messages of the Ready before the last, to fill again
	stats     Stats
	finished  map[string]bool // members that sent CoreFinished
	finishing bool            // Finish was called
	doneSent  bool            // Ready.Done reported
	company   uint64          // tick some other member was last alive
	quorumAt  uint64          // tick the raft group last had a quorum, or was not needed (agreement.quorumGone)
	removedAt uint64          // tick a configuration removed this peer as dead (0: not removed)
	err       error
}

// lingering reports whether this peer was removed as dead while alive and
// only takes part in agreement until the leader demotes it.
func (c *Core) lingering() bool { return c.removedAt != 0 }

// New returns a core. With cfg.Initial it bootstraps the run's first
// configuration together with the other initial members; else it asks
// cfg.Contact to be admitted.
func New(cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := cfg.Model
	if cfg.Guard.MaxRowGrad == 0 {
		cfg.Guard.MaxRowGrad = DefaultMaxRowGrad(m.Kind)
	}
	c := &Core{
		cfg: cfg, m: m, width: m.Layout.Width, xw: m.StateWidth(cfg.LocalSteps > 1 && !cfg.LocalState), shards: m.Layout.Shards, mask: uint32(m.Layout.Shards - 1),
		alive: map[uint64]bool{}, finished: map[string]bool{},
	}
	if cfg.Start == 0 || cfg.Initial == nil {
		// (A resumed run keeps the shards loaded from its checkpoint
		// until its first configuration says which are its own.)
		for s := range m.State {
			m.Disown(s)
		}
	}
	c.w.init(c)
	c.o.init(c)
	if err := c.ag.init(c); err != nil {
		return nil, err
	}
	c.flush()
	return c, nil
}

// Tick advances the core's logical time by one tick.
func (c *Core) Tick() {
	c.tick++
	c.ag.tick()
	if c.lingering() {
		c.flush()
		return
	}
	c.w.tick()
	c.o.tick()
	if c.finishing && !c.doneSent && c.tick%uint64(max(1, c.cfg.RetryTicks/4)) == 0 {
		c.sendFinished() // a lost CoreFinished would keep the others waiting
	}
	if t := c.cs.cur(); t != nil && c.aliveOK && (len(t.Members) > 1 || !t.isMember(c.cfg.Self, c.cfg.ID)) {
		// A peer cut off from a majority of its configuration waits for
		// the partition to heal; if that majority has gone for good (the
		// run ended without it, or they crashed), it fails loudly. So does
		// a peer outside the configuration (a leaver) whose members all went.
		n := 0
		for _, m := range t.Members {
			if m.ID == c.cfg.ID || c.alive[m.ID] {
				n++
			}
		}
		if 2*n > len(t.Members) {
			c.company = c.tick
		}
		if c.tick-c.company > uint64(30*c.cfg.RetryTicks) && !c.doneSent {
			err := fmt.Errorf("%w: no majority of the configuration alive for %d ticks", ErrAlone, c.tick-c.company)
			if gone := c.ag.quorumGone(); gone != nil {
				// Most voters are gone too (M7 comes before C7): say so,
				// or the error hides why nothing could follow
				// (TestScripts/m7-alone-names-the-lost-voters).
				err = fmt.Errorf("%w; %d of its %d raft voters are gone too (%s): no configuration can follow",
					err, len(gone), len(c.ag.voters), strings.Join(gone, ", "))
			}
			c.fail(err)
		}
	}
	if gone := c.ag.quorumGone(); gone == nil {
		c.quorumAt = c.tick
	} else if c.tick-c.quorumAt > uint64(30*c.cfg.RetryTicks) && c.err == nil {
		c.fail(fmt.Errorf("%w: %d of its %d raft voters gone (%s) for %d ticks, and the run needs a configuration only they can agree",
			ErrNoQuorum, len(gone), len(c.ag.voters), strings.Join(gone, ", "), c.tick-c.quorumAt))
	}
	c.flush()
}

// Alive tells the core which members are alive (the driver's membership
// view, as member IDs). The raft leader removes members of the current
// configuration that are not.
func (c *Core) Alive(ids []uint64) {
	back := false
	for _, id := range ids {
		if c.aliveOK && !c.alive[id] {
			back = true
		}
	}
	clear(c.alive)
	for _, id := range ids {
		c.alive[id] = true
	}
	if back && !c.lingering() {
		// A peer came back (a partition healed): what waits for it may
		// have been lost; ask again now rather than at the next backoff.
		c.w.retryAll()
	}
	c.alive[c.cfg.ID] = true
	c.aliveOK = true
	c.flush()
}

// Receive handles a message from peer from (authenticated by the
// transport). Malformed messages are refused and counted; messages from
// peers without the right to send them change nothing. The core may keep
// msg's slices (it never writes to them), so the caller hands msg over:
// it must not change it afterwards (gossip.CoreLink decodes every message
// into a fresh wire.Core; a copy per push cost the owner a tenth of its
// time in BenchmarkRound).
func (c *Core) Receive(from string, msg *wire.Core) {
	if err := msg.Check(c.cfg.Limits); err != nil {
		c.stats.Rejected++
		return
	}
	if c.lingering() && msg.Op != wire.CoreRaft {
		return
	}
	switch msg.Op {
	case wire.CoreRaft, wire.CoreJoin, wire.CoreJoinReply, wire.CoreLeave:
		c.ag.receive(from, msg)
	case wire.CorePush, wire.CorePull:
		c.o.receive(from, msg)
	case wire.CoreReply:
		c.w.reply(from, msg)
	case wire.CoreForward:
		c.o.forward(from, msg)
	case wire.CoreState:
		c.o.state(from, msg)
	case wire.CoreAck:
		c.o.ack(from, msg)
	case wire.CoreFinished:
		if t := c.cs.cur(); t != nil && t.isMember(from, msg.Member) {
			c.finished[from] = true
		} else {
			c.stats.Rejected++
		}
	case wire.CoreHash:
		if msg.Flags&wire.FlagReply != 0 {
			c.w.hashReply(from, msg)
		} else {
			c.o.hash(from, msg)
		}
	case wire.CoreReady:
		if t := c.cs.cur(); t != nil && t.isMember(from, msg.Member) && msg.Req <= t.ID {
			c.ag.onReady(msg.Member, msg.Req)
		} else {
			c.stats.Rejected++
		}
	case wire.CoreCut:
		if msg.Flags&wire.FlagReply != 0 {
			c.w.cutReply(from, msg)
		} else {
			c.o.cutReceived(from, msg)
		}
	}
	c.flush()
}

// Batch gives the core the next batch: the sorted distinct rows it touches
// and its examples (> 0). Batches are numbered by rounds in the order given.
// The core keeps keys until the batch's round is pushed, and never writes
// to them: the caller hands them over and must not change them afterwards
// (a copy here was a tenth of a windowed round's allocated bytes,
// BenchmarkWindowRound).
func (c *Core) Batch(keys []uint32, examples int) {
	if c.lingering() {
		return
	}
	c.w.addBatch(keys, examples)
	c.flush()
}

// EndOfData tells the core there are no more batches.
func (c *Core) EndOfData() {
	if c.lingering() {
		return
	}
	c.w.endOfData()
	c.flush()
}

// Computed gives the gradient of ComputeReq round (len(Keys)*Width values,
// the sum over the batch's examples) and its summed loss. The core keeps
// grad until the round's push is sent, which copies it, and always before
// it asks for the next gradient: the driver may compute the next
// ComputeReq's into the same slice. The driver is done with the request's
// Weights once it calls Computed: the core writes the next round's values
// into them. A nil gradient
// says the batch contributes nothing (the driver dropped it: its gradient
// was not finite): the round's push carries no rows and no examples, so
// owners divide by the other workers' examples only.
func (c *Core) Computed(round uint64, grad []float32, loss float64) {
	if c.lingering() {
		return
	}
	c.w.computed(round, grad, loss)
	c.flush()
}

// Leave asks the run to remove this peer gracefully: its shards go to their
// new holders, then Ready.Left.
func (c *Core) Leave() {
	c.ag.leave()
	c.flush()
}

// Fetch asks the owners for the values of keys (sorted, distinct), or with
// all for every row of every shard, as of this worker's current round (sync:
// its next push waits until the answer is in) or the final values once
// training is over. The answer comes in Ready.Fetched with id.
func (c *Core) Fetch(id uint64, keys []uint32, all bool) {
	if c.lingering() {
		return
	}
	c.w.fetch(id, keys, all, false)
	c.flush()
}

// FetchHashes asks the owners for the hashes of their shards
// (model.Model.ShardHash), for the model's hash without copying it.
func (c *Core) FetchHashes(id uint64) {
	if c.lingering() {
		return
	}
	c.w.fetch(id, nil, false, true)
	c.flush()
}

// Finish says this peer has every final value it needs; once every member
// of the configuration has said so, Ready.Done.
func (c *Core) Finish() {
	c.finishing = true
	c.sendFinished()
	c.flush()
}

func (c *Core) sendFinished() {
	t := c.cs.cur()
	if t == nil {
		return
	}
	c.finished[c.cfg.Self] = true
	for _, m := range t.Members {
		if m.Peer != c.cfg.Self {
			c.send(m.Peer, &wire.Core{Op: wire.CoreFinished})
		}
	}
	if !t.isMember(c.cfg.Self, c.cfg.ID) {
		return
	}
	// The leavers still around too: a leaver that is a voter goes once
	// the members finished, and none of them would tell it else (E14;
	// TestScripts/e14-leaving-voter-at-the-end).
	var sent []string
	for _, u := range c.cs.list {
		for _, m := range u.Left {
			if m.Peer != c.cfg.Self && c.alive[m.ID] && !t.isMember(m.Peer, m.ID) && !slices.Contains(sent, m.Peer) {
				sent = append(sent, m.Peer)
				c.send(m.Peer, &wire.Core{Op: wire.CoreFinished})
			}
		}
	}
}

// membersFinished reports whether some member of the newest configuration
// said CoreFinished and every other did too or, unless all, is dead: a
// leaver learns so that the run is over (E14, E16).
func (c *Core) membersFinished(all bool) bool {
	t := c.cs.cur()
	if t == nil {
		return false
	}
	n := 0
	for _, m := range t.Members {
		switch {
		case c.finished[m.Peer]:
			n++
		case all || c.isAlive(m.ID):
			return false
		}
	}
	return n > 0
}

// Ready returns what the core decided since the last call.
func (c *Core) Ready() Ready {
	rd := c.rd
	clear(c.spare) // (the driver is done with them: drop the messages)
	c.rd = Ready{Messages: c.spare[:0]}
	c.spare = rd.Messages
	return rd
}

// WantBatches is how many more batches the core wants than it has now
// (Ready.WantBatches as of the latest call).
func (c *Core) WantBatches() int {
	if c.lingering() || c.err != nil {
		return 0
	}
	return c.w.wantBatches()
}

// Stats returns the core's counters.
func (c *Core) Stats() Stats { return c.stats }

// FirstRound is the round this worker started at (its first batch's).
func (c *Core) FirstRound() uint64 { return c.w.first }

// Finishing reports whether training is over here (final values, or
// leaving).
func (c *Core) Finishing() bool { return c.w.final || c.w.leave.leaving || c.finishing }

// Round is the worker's clock: the next round it computes.
func (c *Core) Round() uint64 { return c.w.clock }

// What one role knows of another. The agreement, the worker and the owner
// read no field of each other (TestRolesKeepToThemselves): what one needs
// of another's state is one of these.

// workerStarted reports whether the worker started (it has a first round).
func (c *Core) workerStarted() bool { return c.w.started }

// dataDone reports whether the worker pushed every batch of its data.
func (c *Core) dataDone() bool { return c.w.dataDone }

// workerDone reports whether the worker reached the end of its data and
// pushed every round before it.
func (c *Core) workerDone() bool { return c.w.ended && c.w.clock >= c.w.lastData }

// workerFinal reports whether an owner answered this worker FlagFinal:
// training is over.
func (c *Core) workerFinal() bool { return c.w.final }

// ownerFinal reports whether this peer's owner holds final values.
func (c *Core) ownerFinal() bool { return c.o.final }

// readyFor is the configuration this owner last told the leader it is
// ready under (ssp/async, CoreReady).
func (c *Core) readyFor() uint64 { return c.o.async.readyFor }

// leaving reports whether this peer asked to leave the run.
func (c *Core) leaving() bool { return c.w.leave.leaving }

// markLeaving makes the worker leave: it pushes its last rounds, up to the
// round the leader agrees on.
func (c *Core) markLeaving() { c.w.leave.leaving = true }

// peerOf is the peer of a raft member ID, as the agreement's log has it.
func (c *Core) peerOf(id uint64) (string, bool) {
	p, ok := c.ag.group[id]
	return p, ok
}

// ConfigID is the newest configuration applied (0: none yet).
func (c *Core) ConfigID() uint64 {
	if t := c.cs.cur(); t != nil {
		return t.ID
	}
	return 0
}

// Members returns the peers of the newest configuration.
func (c *Core) Members() []string {
	if t := c.cs.cur(); t != nil {
		return t.peers()
	}
	return nil
}

// Primaries returns, per shard, its primary in the newest configuration.
func (c *Core) Primaries() []string {
	t := c.cs.cur()
	if t == nil {
		return nil
	}
	out := make([]string, c.shards)
	for s := range out {
		out[s] = t.primary(s)
	}
	return out
}

// Holders returns, per shard, its holders in the newest configuration,
// primary first.
func (c *Core) Holders() [][]string {
	t := c.cs.cur()
	if t == nil {
		return nil
	}
	out := make([][]string, c.shards)
	for s := range out {
		out[s] = slices.Clone(t.owners[s])
	}
	return out
}

// Holds reports whether this peer holds shard s's state.
func (c *Core) Holds(s int) bool { return c.o.held.has(s) && c.o.awaiting[s] == nil }

// Sizes reports the lengths of the core's queues (the simulator bounds
// them).
func (c *Core) Sizes() map[string]int {
	return map[string]int{
		"requests": len(c.w.reqs), "worksets": len(c.w.ws), "batches": len(c.w.batches), "fetches": len(c.w.fetches),
		"pending": len(c.o.pending), "deferred": len(c.o.queue.deferred), "rounds": len(c.o.rounds),
		"forwards": len(c.o.fwd), "transfers": len(c.o.xfer), "owes": len(c.o.owes),
	}
}

// Leader returns the raft leader's peer ID as this peer knows it ("": none).
func (c *Core) Leader() string { return c.ag.leaderPeer() }

// send queues msg for peer to, stamped with this member's ID and newest
// configuration.
func (c *Core) send(to string, msg *wire.Core) {
	msg.Member = c.cfg.ID
	if t := c.cs.cur(); t != nil {
		msg.Config = t.ID
	}
	c.rd.Messages = append(c.rd.Messages, Envelope{To: to, Msg: msg})
}

// event records an event for the driver.
func (c *Core) event(e Event) { c.rd.Events = append(c.rd.Events, e) }

// trace tells Config.Trace, if any.
func (c *Core) trace(e TraceEvent) {
	if c.cfg.Trace != nil {
		c.cfg.Trace(e)
	}
}

// traceMsg traces what an owner did with a worker's message (no
// allocation unless tracing).
func (c *Core) traceMsg(kind TraceKind, shards []uint32, round, member uint64, from string, req uint64) {
	if c.cfg.Trace != nil {
		c.cfg.Trace(TraceEvent{Kind: kind, Shards: shards, Round: round, Members: []uint64{member}, Peer: from, Req: req})
	}
}

// fail records a fatal error.
func (c *Core) fail(err error) {
	if c.err == nil {
		c.err = err
		c.rd.Err = err
	}
}

// flush runs the work that events may have unblocked, until nothing
// changes, and fills the parts of Ready that are states (not queues).
func (c *Core) flush() {
	if c.err != nil {
		c.rd.Err = c.err
		return
	}
	if c.lingering() {
		c.ag.work()
		if !c.ag.isVoter() || c.tick-c.removedAt > uint64(10*c.cfg.RetryTicks) {
			c.fail(ErrRemoved)
			c.rd.Err = c.err
		}
		return
	}
	// Until a pass makes no progress: each pass that does used up
	// something an event brought (a raft Ready, a deferred message
	// handled, a round applied, a push sent), but nothing proves the
	// roles cannot feed each other forever, so 64 passes cap it: a flush
	// always returns, and what it leaves stays in the roles' state for the
	// next flush (every Tick ends with one). The cap changes nothing in
	// practice: no flush of the simulator's TestTraceDigest (10 seeds x 95
	// mixes, counted 2026-11-29 on commit 901fc37) needed more than 4
	// passes.
	for range 64 {
		progress := c.ag.work()
		if c.o.work() {
			progress = true
		}
		if c.w.work() {
			progress = true
		}
		if !progress {
			break
		}
	}
	c.rd.WantBatches = c.w.wantBatches()
	if c.w.leave.left && !c.doneSent && (c.membersFinished(true) || c.o.drained() && (!c.ag.isVoter() || c.tick-c.company > uint64(c.cfg.RetryTicks) || c.membersFinished(false))) {
		// A leaver goes once it holds nothing and is no voter (a voter
		// that goes would count against the quorum: it leaves once the
		// leader made it a learner, once no majority of its
		// configuration is left to make it one, or once the members
		// said they finished, E14). Once every member said it finished
		// it goes at once, holding shards or not: nothing reads them
		// again (E8), and a handoff still unacknowledged would wait for
		// members that exit (E16; TestScripts/e16-*).
		c.doneSent = true
		c.rd.Done, c.rd.Left = true, true
	}
	if c.finishing && !c.doneSent && c.allFinished() {
		c.doneSent = true
		c.rd.Done = true
	}
	if c.err != nil {
		c.rd.Err = c.err
	}
}

// allFinished reports whether every live member has said CoreFinished.
func (c *Core) allFinished() bool {
	t := c.cs.cur()
	if t == nil {
		return true
	}
	for _, m := range t.Members {
		if !c.finished[m.Peer] && (c.alive[m.ID] || !c.aliveOK) {
			return false
		}
	}
	return true
}

// isMeIn reports whether peer p, as configuration t names it, is this
// process: the peer ID is shared by every incarnation of a peer, so a peer
// named by a configuration of before this process joined is its
// predecessor.
func (c *Core) isMeIn(p string, t *tconf) bool {
	return p == c.cfg.Self && t.isMember(p, c.cfg.ID)
}

// routeMe reports whether this process applies shard s's round r (sync).
func (c *Core) routeMe(s int, r uint64) bool {
	p, t := c.cs.routeConf(s, r)
	return c.isMeIn(p, t)
}

// isPrimary reports whether this process is shard s's primary in the
// newest configuration.
func (c *Core) isPrimary(s int) bool {
	t := c.cs.cur()
	return c.joined && t.primary(s) == c.cfg.Self && t.isMember(c.cfg.Self, c.cfg.ID)
}

// applyRows applies contributions to owned rows: gradients summed over
// examples take an optimizer step (round r's, for SGD's schedule); with
// windows of local steps the rows are the workers' summed changes, added
// (model.AddDeltas; model.AddWeightDeltas when the workers keep the
// optimizer state, Config.LocalState).
func (c *Core) applyRows(rows *model.Sparse, examples uint64, step int64) {
	if c.cfg.LocalSteps > 1 {
		if c.cfg.LocalState {
			c.m.AddWeightDeltas(rows)
			return
		}
		c.m.AddDeltas(rows)
		return
	}
	c.m.Apply(rows, int(examples), step)
}

// isAlive reports whether member id is alive as far as the core knows.
func (c *Core) isAlive(id uint64) bool { return !c.aliveOK || c.alive[id] }

// shardOf is row k's shard.
func (c *Core) shardOf(k uint32) int { return int(k & c.mask) }

// Voters are the raft group's voters (member IDs) as this peer knows them.
func (c *Core) Voters() []uint64 { return slices.Clone(c.ag.voters) }

// String describes the core's state for a stuck run's diagnostics.
func (c *Core) String() string {
	t := c.cs.cur()
	id := uint64(0)
	var members []string
	if t != nil {
		id = t.ID
		members = shortAll(t.peers())
	}
	return fmt.Sprintf("%s tick %d config %d members %v leader %s | worker %s | owner %s",
		short(c.cfg.Self), c.tick, id, members, short(c.ag.leaderPeer()), c.w.String(), c.o.String())
}

func short(id string) string {
	if len(id) > 10 {
		return "…" + id[len(id)-6:]
	}
	return id
}

func shortAll(ids []string) []string {
	out := slices.Clone(ids)
	for i := range out {
		out[i] = short(out[i])
	}
	return out
}

// Debug describes the core's state in detail (the simulator prints it for
// a stuck run).
func (c *Core) Debug() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n  %s\n", c.String(), c.ag.String())
	o := &c.o
	for s := range c.shards {
		if !o.held.has(s) && o.awaiting[s] == nil {
			continue
		}
		fmt.Fprintf(&b, "  shard %d held %v through %d", s, o.held.has(s), o.sync.through[s])
		if c.cfg.Mode != Sync {
			for _, id := range sortedKeys(o.async.applied[s]) {
				fmt.Fprintf(&b, " %x:%d", id&0xffff, o.async.applied[s][id])
			}
			fmt.Fprintf(&b, " done %v", o.async.doneAt)
		}
		if a := o.awaiting[s]; a != nil {
			fmt.Fprintf(&b, " awaiting round %d takeover %v (at %d, prev %v) from %v", a.round, a.takeover, a.takenAt, a.prev, a.from)
		}
		if w := o.sync.settle[s]; w != nil {
			fmt.Fprintf(&b, " settling until %d for %v", w.until, w.pending)
		}
		if t := c.cs.cur(); t != nil && c.cfg.Mode == Sync {
			p, rt := c.cs.routeConf(s, o.sync.through[s])
			m, _ := rt.member(p)
			fmt.Fprintf(&b, " route(%d)=%s/%x in configuration %d (me %v)", o.sync.through[s], short(p), m.ID&0xffff, rt.ID, c.routeMe(s, o.sync.through[s]))
		}
		b.WriteString("\n")
	}
	for _, w := range o.owes {
		fmt.Fprintf(&b, "  owes shard %d to %s at round %d takeover %v\n", w.shard, short(w.to), w.round, w.takeover)
	}
	for r, ra := range o.rounds {
		t := c.cs.at(r)
		var req []string
		for _, m := range t.Members {
			if !c.cs.crashed[m.ID] {
				req = append(req, fmt.Sprintf("%s/%x", short(m.Peer), m.ID&0xffff))
			}
		}
		fmt.Fprintf(&b, "  round %d (configuration %d) requires %v\n", r, t.ID, req)
		for _, k := range ra.contrib {
			fmt.Fprintf(&b, "  round %d contribution from %s/%x shards %v\n", r, short(k.from), k.member&0xffff, k.shards)
		}
	}
	for _, k := range o.pending {
		fmt.Fprintf(&b, "  pending %s from %s/%x req %d round %d through %d shards %v applied %v acks %d\n", k.op, short(k.from), k.member&0xffff, k.req, k.round, k.through, k.shards, k.applied, k.acks)
	}
	for _, d := range o.queue.deferred {
		fmt.Fprintf(&b, "  deferred %s from %s round %d config %d shards %v\n", d.msg.Op, short(d.from), d.msg.Round, d.msg.Config, d.msg.Shards)
	}
	for _, f := range o.fwd {
		fmt.Fprintf(&b, "  forward to %s round %d shards %v tries %d\n", short(f.to), f.round, f.shards, f.tries)
	}
	for _, t := range c.cs.list {
		fmt.Fprintf(&b, "  configuration %d start %d members %d crashed %d left %d\n", t.ID, t.Start, len(t.Members), len(t.Crashed), len(t.Left))
	}
	for _, id := range sortedKeys(c.w.reqs) {
		r := c.w.reqs[id]
		fmt.Fprintf(&b, "  request %d %s to %s round %d through %d shards %v tries %d\n", id, r.op, short(r.to), r.round, r.through, r.shards, r.tries)
	}
	return b.String()
}
