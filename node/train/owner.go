package train

import (
	"fmt"
	"slices"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// The owner half of the core (docs/protocol.md, "Owners").
//
// Sync: an owner applies round r of a shard once every member of round r's
// configuration (but those known to have crashed) has contributed to it,
// summing in member order, forwards the sum to the shard's replicas, and
// only when they have acknowledged it answers the round's pushes with the
// values they want. Ssp and async: an owner applies each worker's pushes in
// that worker's order as they arrive, forwards them, and answers once the
// values are as fresh as asked (ssp: every worker's contributions through
// the round asked for).

// contribution is a push (or pull) this owner has to answer.
type contribution struct {
	from     string
	member   uint64
	req      uint64
	op       wire.CoreOp
	flags    wire.CoreFlags
	round    uint64
	through  uint64
	examples uint64
	shards   []uint32
	set      shardSet
	rows     model.Sparse
	want     []uint32
	applied  bool   // its rows are in the model (async), or the round is (sync)
	acks     int    // forwards of it not acknowledged yet (async)
	since    uint64 // tick it arrived (async long poll of done workers)
	// narrowed: some of the message's shards were answered "moved", so
	// the answer names the shards it answers (the worker keeps asking
	// for the others).
	narrowed bool
	// first: the shards restarted from nothing it was the worker's first
	// contribution to (async, H28).
	first []uint32
}

// roundAcc collects the contributions of one sync round.
type roundAcc struct {
	contrib []*contribution
}

// fwdOut is a forward waiting for its acknowledgement.
type fwdOut struct {
	to     string
	req    uint64
	msg    *wire.Core
	sentAt uint64
	tries  int
	round  uint64          // sync
	shards []uint32        // sync: the shards whose replies wait for it
	of     []*contribution // async: the pushes whose replies wait for it
}

// stateOut is a shard handed to a new holder, waiting for its ack.
type stateOut struct {
	to     string
	req    uint64
	shard  int
	msg    *wire.Core
	sentAt uint64
	tries  int
}

// owe is a shard this owner must send to a new holder once it has applied
// every round before round (sync) or at once (async).
type owe struct {
	to       string
	member   uint64 // ssp/async: to's member ID (a peer restarted since is owed the shard again)
	conf     uint64 // ssp/async: the configuration that made to a new holder (one that does again owes a new copy)
	shard    int
	round    uint64
	takeover bool // sync: the state as it is, to the peer taking over a crashed primary's rounds
}

// settleWait holds back a sync takeover's installed copy while holders it
// asked, which may have the shard further on, have not answered: applying
// a round on the first copy that came would fork the shard from a further
// one that came a moment later (sync/fast-chaos seed 100: a replica's copy
// came first, the next round's holder's a step later, and the taker had
// applied the round again without its crashed route's contribution).
type settleWait struct {
	pending []Member // asked, not answered (a copy, or "no copy")
	until   uint64   // tick it stops waiting for them
}

// await is a shard whose state this owner waits for.
type await struct {
	round    uint64   // sync: the round the state must be as of
	conf     uint64   // ssp/async: the configuration it waits since (a copy handed over for an earlier one is stale)
	since    uint64   // tick
	from     []Member // who may send it (sync: takeovers; ssp/async: all)
	takeover bool     // sync: taking over a crashed primary's rounds, as of whatever round its survivors have
	takenAt  uint64   // takeover: the round it applies from (its survivors check it is its route)
	// prev (takeover): the peer that applies round takenAt-1 is alive and
	// hands the shard over as of takenAt, as it would have to the primary
	// that crashed; whichever copy comes first is installed, and a later
	// one further on replaces it (ff) until this peer applies a round.
	prev bool
	// own (ssp/async): a replica whose copy misses a contribution the
	// primary applied asked the primary for its copy (askRefresh); if it
	// never comes, the replica's own copy stands.
	own bool
	// keep (sync takeover): this peer's copy holds every round before
	// takenAt, but the crashed route may have applied round takenAt and
	// handed the shard on to the holder of a later round before its
	// forward reached this peer (sync/chaos seed 635): that holder's copy
	// is further on, and applying the round again here, without the
	// crashed route's contribution, would fork the shard. The holders of
	// later rounds (from) are asked first; each sends its copy or says it
	// has none, and when none is further on, this copy stands.
	keep bool
	// refused (sync, a new holder): this peer told a takeover that it has
	// no copy of the round before its handoff, so only that round's route
	// may send it now, not the crashed route whose copy is late.
	refused bool
	// noCopy (sync, a new holder): the peer that now applies the round
	// before the handoff said it has no copy (it waits for the shard
	// itself, as of a later round, from this side). With every holder
	// that could have it crashed, the shard is lost, and this peer, the
	// route of the handoff's round, restarts it there (sync/fast-chaos
	// seed 648: each of the two waited for the other).
	noCopy bool
	// all (with keep): every live member of the run is asked, and the
	// wait ends only when each has answered or crashed, never on a
	// timeout: the answer decides that contributions answered by holders
	// that crashed are gone (lostCheck).
	all bool
}

// owner is the role that holds this peer's shards: it applies the
// contributions pushed to them, answers pulls, and hands shards over
// (docs/protocol.md, "Owners", "Handoff"). State that only one mode uses
// lives in sync or async.
type owner struct {
	c    *Core
	held shardSet
	// fresh: shards restarted from nothing (every holder lost), in every
	// mode: sync, no round applied since; ssp/async, a worker with no
	// clock here has no earlier rounds to send (a handoff carries it as
	// FlagFresh). freshAt: per shard, the tick it was restarted.
	fresh   shardSet
	freshAt []uint64
	// maxThrough is the most rounds applied to any shard here, ever (O8).
	maxThrough uint64
	awaiting   map[int]*await
	rounds     map[uint64]*roundAcc
	step       int64
	pending    []*contribution // answered later (sync: round not applied; ssp: not fresh; async: acks)
	fwd        map[uint64]*fwdOut
	xfer       map[uint64]*stateOut
	owes       []owe
	paid       map[owe]bool
	nextReq    uint64
	final      bool
	ckpt       map[uint64]*ckptPending // checkpoints being exported, by round
	ckptDone   uint64                  // the newest checkpoint round handed to the driver

	sync  syncOwner  // state only sync mode uses
	async asyncOwner // state only ssp and async modes use
	queue deferQueue // messages handled later
	bufs  ownerScratch
}

// syncOwner is an owner's state that only sync mode uses: rounds are
// applied whole, per shard, in order, and handoffs and takeovers carry a
// shard's round (docs/protocol.md, "Owners" and "Handoff").
type syncOwner struct {
	through  []uint64                // rounds applied, per shard (setThrough)
	paidAs   map[owe]uint64          // the round the copy that paid an owe was as of
	finalAt  uint64                  // the round after the last, as far as known (0: not known)
	ff       map[int]bool            // takeovers: shards a copy further on may still replace
	settle   map[int]*settleWait     // takeovers: installed copies other holders may still better
	behind   map[int]*await          // takeovers that installed a copy older than the round they took over, per shard (askBehind)
	past     map[uint64]uint64       // per member ID, the newest round it pushed here
	lostOK   map[int]uint64          // per shard, round+1 of a round whose missing answered contributions are gone (lostCheck)
	scanned  uint64                  // the tick applySync last looked for rounds no contribution will come for
	gotIn    []uint64                // per shard, the newest configuration when its copy was installed or restarted here
	handedAs []uint64                // per shard, the round of the handoff copy installed last (0: none, or a takeover's)
	changed  map[uint64]changedRound // full gather: rows changed by round
}

// asyncOwner is an owner's state that only ssp and async modes use: pushes
// are applied as they come, per worker clock, and the end of the run and
// checkpoints are agreed through readiness and cuts.
type asyncOwner struct {
	served   shardSet            // shards whose values this peer answered as final (pushAsync)
	applied  []map[uint64]uint64 // async: per shard, member -> clocks applied
	doneAt   map[uint64]uint64   // async: member -> its done round
	gapSince map[gapKey]uint64   // tick a worker's contribution to a shard was first seen behind a gap
	cut      *ownerCut           // the newest checkpoint's cuts
	// readyFor and readyAt: the configuration this owner last told the
	// leader it is ready under (CoreReady), and when.
	readyFor, readyAt uint64
}

// deferQueue holds the messages an owner handles later: of a configuration
// not applied yet, or behind a gap; with its accounting (deferNarrowed's
// bounds).
type deferQueue struct {
	deferred   []deferredMsg
	deferKeys  map[deferKey]struct{}
	deferFrom  map[string]int
	deferBytes int
	deferLimit int  // deferredLimit
	retrying   bool // work is handling the deferred messages again
}

// ownerScratch is kept between calls: these run at every step.
type ownerScratch struct {
	scratch   model.Sparse
	sum, tmp  model.Sparse
	seen      map[uint64]struct{} // applyRound's scratch: members with a contribution
	roundList []uint64            // applySync's scratch: the rounds waiting, in order
	list      []uint32            // applyGroups' scratch: the ready shards
	trim      trimmer             // applyGroup's scratch with Combine Trimmed
}

// Bounds of the deferred queue: messages kept to handle again once this
// peer has applied their configuration, installed the shard they need, or
// received the rounds before them. Every entry is a remote peer's choice,
// so each is bounded (docs/protocol.md, "Owners", rule O9):
//
//	D1  only from a member of a known configuration or a node of the raft
//	    group, under the member ID it has there (a configuration this peer
//	    has not applied can only name peers the group admitted); a joiner,
//	    which knows no configuration yet, keeps what comes, within D2-D4;
//	D2  at most maxDeferred messages, and at most half of them from one
//	    peer;
//	D3  at most deferredBytes bytes (rows, wants, values and blobs);
//	D4  no message of a configuration more than maxConfigAhead past the
//	    newest applied here (no honest peer runs that far ahead: each
//	    configuration commits at a majority before the next is proposed);
//	D5  once per request: a message sent again while it waits replaces
//	    nothing.
//
// A message beyond a bound is dropped and counted (Stats.Rejected); an
// honest sender asks again. Messages of a configuration not applied yet
// are kept as they are until it is (work skips them), so a flood of them
// costs one comparison each per step, not a handling.
//
// TestDeferredBounded floods each bound.
const (
	maxDeferred    = 1 << 12
	maxConfigAhead = 64
)

// deferredLimit is the bound D3 on the bytes of the deferred queue: room
// for a few shards' state (a joiner gets the state of every shard it takes
// over, and may get it before the configuration that gives it the shards),
// and at least 256 MiB.
func deferredLimit(l *model.Layout) int {
	shardState := (l.Features/uint64(l.Shards) + 1) * uint64(l.Width) * 3 * 4 // weights and up to two optimizer slots
	return int(min(max(256<<20, 8*shardState), 1<<40))
}

// deferKey identifies a deferred message (D5).
type deferKey struct {
	from       string
	op         wire.CoreOp
	req, round uint64
}

// msgBytes is what msg holds in memory beyond its fixed fields.
func msgBytes(msg *wire.Core) int {
	return 128 + 4*(len(msg.Shards)+len(msg.Rows.Idx)+len(msg.Rows.Val)+len(msg.Want)+len(msg.Values)) +
		16*len(msg.Clocks) + len(msg.Blob) + len(msg.Text)
}

// deferMsg keeps a message to handle again later, within the bounds above.
func (o *owner) deferMsg(from string, msg *wire.Core) {
	o.deferNarrowed(from, msg, false)
}

// deferContrib keeps contribution k to handle again later, remembering
// whether some of its shards were answered "moved" already (its answer
// must then name the shards it answers: see contribution.narrowed).
func (o *owner) deferContrib(k *contribution) {
	o.deferNarrowed(k.from, o.asMsg(k), k.narrowed)
}

func (o *owner) deferNarrowed(from string, msg *wire.Core, narrowed bool) {
	c := o.c
	cur := c.cs.cur()
	p, inGroup := c.peerOf(msg.Member)
	_, member := o.memberOf(from, msg.Member)
	if cur != nil && (!member && (!inGroup || p != from) || msg.Config > cur.ID+maxConfigAhead) {
		c.stats.Rejected++ // D1, D4
		return
	}
	key := deferKey{from, msg.Op, msg.Req, msg.Round}
	if o.queue.has(key) {
		return // D5
	}
	if o.queue.full(from, msgBytes(msg)) {
		c.stats.Rejected++ // D2, D3
		return
	}
	if !o.queue.retrying {
		msg = msg.Clone() // (a deferred message handled again is this owner's already)
	}
	o.queue.keep(deferredMsg{from, msg, c.tick, narrowed})
	if !o.queue.retrying && (msg.Op == wire.CorePush || msg.Op == wire.CorePull) {
		c.traceMsg(TraceDefer, msg.Shards, msg.Round, msg.Member, from, msg.Req)
	}
}

// keep appends d to the deferred queue and counts it.
func (q *deferQueue) keep(d deferredMsg) {
	q.deferred = append(q.deferred, d)
	q.deferKeys[deferKey{d.from, d.msg.Op, d.msg.Req, d.msg.Round}] = struct{}{}
	q.deferFrom[d.from]++
	q.deferBytes += msgBytes(d.msg)
}

// take empties the deferred queue and returns what it held.
func (q *deferQueue) take() []deferredMsg {
	ds := q.deferred
	q.deferred = nil
	clear(q.deferKeys)
	clear(q.deferFrom)
	q.deferBytes = 0
	return ds
}

// has reports whether a message with key is queued already (D5).
func (q *deferQueue) has(key deferKey) bool {
	_, dup := q.deferKeys[key]
	return dup
}

// full reports whether a message of size bytes from a peer would take the
// queue over its bounds: in all, per sender, in bytes (D2, D3).
func (q *deferQueue) full(from string, size int) bool {
	return len(q.deferred) >= maxDeferred || 2*q.deferFrom[from] >= maxDeferred || q.deferBytes+size > q.deferLimit
}

// asyncOrder sorts shards for a worker's contribution of round r (ssp and
// async: each worker's contributions apply to a shard in round order): the
// shards to apply it to now, those that already have it left out; gap when
// an earlier round of the worker is still missing for one of them (it may
// come: wait). Once a peer has crashed, a gap that lasts 16 retry intervals
// is given up on (those rounds went with a holder that crashed): skipped
// counts them. first: the worker's push itself, or a forward its primary
// marked as the worker's first to a shard restarted from nothing (H28).
func (o *owner) asyncOrder(member, r uint64, shards []uint32, first bool) (apply []uint32, gap bool, skipped uint64) {
	c := o.c
	for _, s := range shards {
		a := o.appliedOf(int(s), member)
		switch {
		case a > r:
			continue // applied already
		case a < r:
			_, known := o.async.applied[s][member]
			g := gapKey{member, s}
			if !known && o.fresh.has(int(s)) && (first || c.isPrimary(int(s))) {
				// Restarted from nothing: the worker's earlier rounds
				// went with the holders that crashed. The peer that
				// applies the push decides which round is the worker's
				// first; a replica takes the forward its primary marked
				// so: two forwards that came in reverse order made a
				// replica take the later for the first and drop the
				// earlier, which the primary had applied (H28;
				// testdata/h28-replica-of-a-restarted-shard.txt).
			} else if since, ok := o.async.gapSince[g]; !ok {
				o.async.gapSince[g] = c.tick
				gap = true
				continue
			} else if len(c.cs.crashed) == 0 || c.tick-since <= uint64(16*c.cfg.RetryTicks) {
				// (Without a crash nothing is lost: the worker sends its
				// earlier rounds until they are acknowledged.)
				gap = true
				continue
			} else {
				skipped = max(skipped, r-a)
			}
		}
		apply = append(apply, s)
	}
	return apply, gap, skipped
}

// gapKey is a worker's contributions to a shard (async apply order).
type gapKey struct {
	member uint64
	shard  uint32
}

type deferredMsg struct {
	from     string
	msg      *wire.Core
	at       uint64
	narrowed bool // a contribution some of whose shards were answered "moved"
}

func (o *owner) init(c *Core) {
	o.c = c
	o.held = newShardSet(c.shards)
	o.fresh = newShardSet(c.shards)
	o.async.served = newShardSet(c.shards)
	o.freshAt = make([]uint64, c.shards)
	o.sync.through = make([]uint64, c.shards)
	o.awaiting = map[int]*await{}
	o.rounds = map[uint64]*roundAcc{}
	o.async.applied = make([]map[uint64]uint64, c.shards)
	for s := range o.async.applied {
		o.async.applied[s] = map[uint64]uint64{}
	}
	o.async.doneAt = map[uint64]uint64{}
	o.fwd = map[uint64]*fwdOut{}
	o.xfer = map[uint64]*stateOut{}
	o.paid = map[owe]bool{}
	o.sync.paidAs = map[owe]uint64{}
	o.sync.ff = map[int]bool{}
	o.sync.settle = map[int]*settleWait{}
	o.sync.behind = map[int]*await{}
	o.sync.past = map[uint64]uint64{}
	o.sync.lostOK = map[int]uint64{}
	o.bufs.seen = map[uint64]struct{}{}
	o.async.gapSince = map[gapKey]uint64{}
	o.queue.deferKeys = map[deferKey]struct{}{}
	o.queue.deferFrom = map[string]int{}
	o.queue.deferLimit = deferredLimit(&c.m.Layout)
	o.nextReq = reqBase(c.cfg.ID)
	o.sync.gotIn = make([]uint64, c.shards)
	o.sync.handedAs = make([]uint64, c.shards)
	o.sync.changed = map[uint64]changedRound{}
	o.ckpt = map[uint64]*ckptPending{}
}

func (o *owner) String() string {
	lo, hi := uint64(Final), uint64(0)
	for s := range o.c.shards {
		if o.held.has(s) {
			lo, hi = min(lo, o.sync.through[s]), max(hi, o.sync.through[s])
		}
	}
	return fmt.Sprintf("held %d through %d..%d awaiting %d rounds %d pending %d deferred %d fwd %d xfer %d owes %d final %v",
		o.held.count(), lo, hi, len(o.awaiting), len(o.rounds), len(o.pending), len(o.queue.deferred), len(o.fwd), len(o.xfer), len(o.owes), o.final)
}

// drained reports whether nothing this owner sent waits for an answer and
// it holds no shard any more (a leaver may go).
func (o *owner) drained() bool {
	return len(o.fwd) == 0 && len(o.xfer) == 0 && len(o.owes) == 0 && o.held.empty()
}

// reqBase is where this incarnation's request numbers start: a peer that
// restarts with the same name must not take an answer meant for its
// predecessor as its own (ssp/chaos seed 209: a worker took the reply to
// its predecessor's push of round 0, request 10, for its own request 10 of
// round 6, and computed a round three rounds stale; an acknowledgement
// can likewise mark a forward as delivered that never was). Member IDs
// are hashes: 24 of their bits put incarnations 2^32 requests apart.
func reqBase(id uint64) uint64 { return (id & (1<<24 - 1)) << 32 }

func (o *owner) newReq() uint64 {
	o.nextReq++
	return o.nextReq
}

func (o *owner) tick() {
	c := o.c
	for _, s := range sortedInts(o.sync.settle) {
		if w := o.sync.settle[s]; c.tick >= w.until || !o.held.has(s) {
			delete(o.sync.settle, s) // (an asked holder that never answers crashed, or the copy left)
		}
	}
	if c.tick%uint64(c.cfg.RetryTicks) == 0 {
		o.askState()
		o.askRefreshAgain()
	}
	for _, id := range sortedKeys(o.fwd) {
		f := o.fwd[id]
		if cur := c.cs.cur(); cur != nil && c.aliveOK {
			if _, member := cur.member(f.to); !member && !o.peerAlive(f.to) {
				// It left and is gone: nothing will acknowledge, nothing
				// waits for its copy.
				delete(o.fwd, id)
				for _, k := range f.of {
					k.acks--
				}
				continue
			}
		}
		if c.tick-f.sentAt >= uint64(c.cfg.RetryTicks)<<min(f.tries, 3) {
			f.tries++
			f.sentAt = c.tick
			c.stats.Resent++
			c.send(f.to, f.msg)
		}
	}
	for _, id := range sortedKeys(o.xfer) {
		x := o.xfer[id]
		if cur := c.cs.cur(); cur != nil && c.aliveOK {
			if _, member := cur.member(x.to); !member && !o.peerAlive(x.to) {
				delete(o.xfer, id) // it left, and is gone: nothing will acknowledge
				o.maybeFree(x.shard)
				continue
			}
		}
		if c.tick-x.sentAt >= uint64(c.cfg.RetryTicks)<<min(x.tries, 3) {
			x.tries++
			x.sentAt = c.tick
			c.stats.Resent++
			c.send(x.to, x.msg)
		}
	}
}

// peerAlive reports whether some member ID of peer p is alive.
func (o *owner) peerAlive(p string) bool {
	for _, t := range o.c.cs.list {
		if m, ok := t.member(p); ok && o.c.alive[m.ID] {
			return true
		}
	}
	return false
}

// memberOf returns the member record of peer from with ID id in some
// configuration this peer knows (workers removed since still get their
// last pushes answered).
func (o *owner) memberOf(from string, id uint64) (Member, bool) {
	cs := &o.c.cs
	for i := len(cs.list) - 1; i >= 0; i-- {
		if m, ok := cs.list[i].member(from); ok && m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// receive takes a push or a pull.
func (o *owner) receive(from string, msg *wire.Core) { o.receiveNarrowed(from, msg, false) }

// receiveNarrowed takes a push or a pull, one handled before whose answer
// must name its shards when narrowed.
func (o *owner) receiveNarrowed(from string, msg *wire.Core, narrowed bool) {
	c := o.c
	cur := c.cs.cur()
	if cur == nil || msg.Config > cur.ID {
		o.deferNarrowed(from, msg, narrowed)
		return
	}
	if !o.admits(from, msg, cur) {
		return
	}
	set := o.msgShards(msg)
	if set == nil {
		return
	}
	moved, all := o.refuseMoved(from, msg, set)
	if all {
		return
	}
	k := o.contribOf(from, msg, set, moved, narrowed)
	if msg.Op == wire.CorePull {
		o.addPending(k)
		return
	}
	if !o.guard(k) {
		return
	}
	if c.cfg.Mode == Sync {
		o.pushSync(k)
	} else {
		o.pushAsync(k)
	}
}

// admits reports whether a push or pull comes from a member of the run, for
// a round it takes part in and no further ahead than an honest worker can
// be (O8); when not, it is rejected (a member removed as dead is told).
func (o *owner) admits(from string, msg *wire.Core, cur *tconf) bool {
	c := o.c
	m, ok := o.memberOf(from, msg.Member)
	if !ok {
		c.stats.Rejected++
		return false
	}
	if c.cs.crashed[m.ID] && !cur.isMember(from, m.ID) {
		// A member the run removed as dead (a partition's minority): tell
		// it, so it joins again instead of waiting for answers forever.
		c.stats.Rejected++
		c.send(from, &wire.Core{Op: wire.CoreReply, Flags: wire.FlagRefused, Req: msg.Req, Round: msg.Round})
		return false
	}
	if msg.Op == wire.CorePush && c.cfg.Mode == Sync {
		if t := c.cs.at(msg.Round); !t.isMember(from, msg.Member) {
			c.stats.Rejected++ // not a worker of that round
			return false
		}
	}
	if msg.Op == wire.CorePush && msg.Round < m.Since {
		c.stats.Rejected++
		return false
	}
	if msg.Round > o.horizon(cur) {
		c.stats.Rejected++ // O8: no honest worker is that far ahead
		return false
	}
	if msg.Op == wire.CorePush && c.cfg.Mode == Sync && msg.Round > o.sync.past[m.ID] {
		o.sync.past[m.ID] = msg.Round // (it was answered every round before: lostCheck)
	}
	return true
}

// msgShards is the set of shards a push or pull names, nil (rejected) when
// its rows or wanted keys lie outside them, or its rows have the wrong
// width.
func (o *owner) msgShards(msg *wire.Core) shardSet {
	c := o.c
	// Rows must lie in the shards the message names.
	set := newShardSet(c.shards)
	for _, s := range msg.Shards {
		if int(s) >= c.shards {
			c.stats.Rejected++
			return nil
		}
		set.add(int(s))
	}
	for _, k := range msg.Rows.Idx {
		if !set.has(c.shardOf(k)) {
			c.stats.Rejected++
			return nil
		}
	}
	for _, k := range msg.Want {
		if !set.has(c.shardOf(k)) {
			c.stats.Rejected++
			return nil
		}
	}
	if msg.Op == wire.CorePush && (msg.RowWidth != c.xw && msg.Rows.Len() > 0) {
		c.stats.Rejected++
		return nil
	}
	return set
}

// refuseMoved answers "moved" for the shards of set routed elsewhere (the
// worker sends them to their owner), and takes them out of set; all: no
// shard was left.
func (o *owner) refuseMoved(from string, msg *wire.Core, set shardSet) (moved []uint32, all bool) {
	c := o.c
	for _, s := range msg.Shards {
		if o.routesHere(int(s), msg) {
			continue
		}
		if c.cfg.Mode == Sync && msg.Op == wire.CorePush && o.usable(int(s), msg.Round) && o.sync.through[s] > msg.Round {
			continue // applied here since (handed over): answered as a copy sent again
		}
		if c.cfg.Mode == Sync && msg.Op == wire.CorePush && msg.Flags&wire.FlagResend != 0 && c.routeMe(int(s), msg.Round+1) {
			if a := o.awaiting[int(s)]; a != nil && a.takeover && a.takenAt == msg.Round+1 {
				// The round's route left and went unanswered (the worker
				// sends it to the next round's, worker.successor), and the
				// shard, lost with its holders, restarts here at the next
				// round: this push says a worker waits for it, and is
				// answered with the restarted values (sync/chaos seed 1805
				// answered "moved" and the worker sent it back and forth
				// forever).
				continue
			}
		}
		moved = append(moved, s)
	}
	if len(moved) > 0 {
		c.stats.Moved++
		c.traceMsg(TraceMoved, moved, msg.Round, msg.Member, from, msg.Req)
		c.send(from, &wire.Core{Op: wire.CoreReply, Flags: wire.FlagMoved, Req: msg.Req, Round: msg.Round, Shards: moved})
		if len(moved) == len(msg.Shards) {
			return moved, true
		}
		for _, s := range moved {
			set.del(int(s))
		}
	}
	return moved, false
}

// contribOf is the contribution of a push or pull to the shards of set,
// without the rows and wanted keys of the moved shards.
func (o *owner) contribOf(from string, msg *wire.Core, set shardSet, moved []uint32, narrowed bool) *contribution {
	c := o.c
	k := &contribution{from: from, member: msg.Member, req: msg.Req, op: msg.Op, flags: msg.Flags, round: msg.Round,
		through: msg.Through, examples: msg.Examples, set: set, since: c.tick, narrowed: narrowed}
	if len(moved) == 0 && strictlyAscending(msg.Shards) {
		k.shards = msg.Shards // the set's list (msgShards checked them), kept as msg.Want is
	} else {
		k.shards = set.list(make([]uint32, 0, set.count()))
	}
	k.want = msg.Want // kept, not copied: Receive's caller hands msg over
	if len(moved) > 0 {
		k.rows = filterRows(&msg.Rows, k.shards, c.xw, c.mask)
		k.want, k.narrowed = nil, true // (the moved shards' rows are not this owner's to give)
		for _, key := range msg.Want {
			if set.has(c.shardOf(key)) {
				k.want = append(k.want, key)
			}
		}
	} else {
		k.rows = msg.Rows
	}
	return k
}

// strictlyAscending reports whether l is ascending without repeats.
func strictlyAscending(l []uint32) bool {
	for i := 1; i < len(l); i++ {
		if l[i] <= l[i-1] {
			return false
		}
	}
	return true
}

// routesHere reports whether this peer answers for shard s in msg: sync,
// the round's route (a pull reads the values of round Round); otherwise
// the newest configuration's primary.
func (o *owner) routesHere(s int, msg *wire.Core) bool {
	c := o.c
	if c.cfg.Mode == Sync {
		return c.routeMe(s, msg.Round)
	}
	return c.isPrimary(s)
}

// pushSync records a sync contribution.
func (o *owner) pushSync(k *contribution) {
	c := o.c
	o.lazyTakeover(k.shards, k.round)
	// A shard restarted from nothing has no history: a worker that sends
	// a later round than it waits at was answered that round by the
	// holder that crashed, and will never send the earlier one. Restart
	// at the later round; earlier sends are answered as applied.
	for _, s := range k.shards {
		if !o.held.has(int(s)) || k.round <= o.sync.through[s] {
			continue
		}
		if o.fresh.has(int(s)) {
			o.setThrough(int(s), k.round)
			continue
		}
		if o.sync.ff[int(s)] && (c.routeMe(int(s), o.sync.through[s]) || o.routeGone(int(s), o.sync.through[s])) {
			// So with a takeover's copy, as its survivors had it: a
			// worker sends round k.round only once it was answered the
			// rounds before, so those the copy lacks were applied by the
			// route that crashed, and no survivor had them. They are
			// lost; the shard goes on from here as if restarted (a copy
			// that has them may still replace it, see state).
			lost := k.round - o.sync.through[s]
			o.setThrough(int(s), k.round)
			o.fresh.add(int(s))
			o.freshAt[s] = c.tick
			c.stats.Lost += lost
			c.trace(TraceEvent{Kind: TracePromote, Shards: []uint32{s}, Round: k.round})
			c.event(Event{Kind: EvLost, Shards: 1, Text: fmt.Sprintf("shard %d: %d rounds before round %d lost with the holders that crashed", s, lost, k.round)})
		}
	}
	dup := true
	for _, s := range k.shards {
		if o.sync.through[s] <= k.round {
			dup = false
		}
	}
	if dup {
		k.applied = true // already applied: answer with the values now
		o.addPending(k)
		return
	}
	ra := o.rounds[k.round]
	if ra == nil {
		ra = &roundAcc{}
		o.rounds[k.round] = ra
	}
	for i, old := range ra.contrib {
		if old.member == k.member && old.set.equal(k.set) {
			// Sent again: keep the first rows, answer the newest request.
			ra.contrib[i].req = k.req
			return
		}
	}
	ra.contrib = append(ra.contrib, k)
	o.addPending(k)
}

// routeGone reports whether the peer that applies shard s's round r left
// the run and went: it handed the round's result to holders that have all
// crashed since, or the takeover would have had it from them (sync/fast-
// chaos seed 869 waited for that round forever on a survivor's copy).
func (o *owner) routeGone(s int, r uint64) bool {
	c := o.c
	p, t := c.cs.routeConf(s, r)
	m, ok := t.member(p)
	return ok && p != c.cfg.Self && !c.cs.cur().isMember(p, m.ID) && c.aliveOK && !c.alive[m.ID]
}

// lazyTakeover starts taking over shards this peer routes round r of but
// does not hold (its configuration's crash moved an older round here that
// it did not know was still open): it asks the round's surviving holders.
func (o *owner) lazyTakeover(shards []uint32, r uint64) {
	c := o.c
	for _, sh := range shards {
		s := int(sh)
		if o.currentFor(s, r, false) || !c.routeMe(s, r) {
			continue
		}
		if a := o.awaiting[s]; a != nil && (a.takeover && a.takenAt <= r || !a.takeover && a.round <= r) {
			continue // (a takeover from a later round is one from this round now)
		}
		a := &await{since: c.tick, takeover: true, takenAt: r, prev: o.prevAlive(s, r)}
		at := c.cs.at(r)
		for i, h := range c.holdersAt(s, r) {
			if i == 0 {
				continue // the route: this peer
			}
			if m, ok := at.member(h); ok && !c.cs.crashed[m.ID] {
				a.from = append(a.from, m)
			}
		}
		if old := o.awaiting[s]; old != nil && !old.takeover && old.round > r+1 {
			// A handoff of a later round was awaited: its sender applies
			// the rounds before it and may have this shard further on
			// (the crashed route applied round r and handed the shard on
			// before its answers went, which waited for a replica that
			// missed the round). A copy from that replica alone applied
			// round r a second time without the crashed worker's
			// contribution, and the shard forked (docs/protocol.md,
			// "Handoff", rule H12; TestFixedSeeds sync/chaos 295).
			if p, t := c.cs.routeConf(s, old.round-1); p != c.cfg.Self && !slices.ContainsFunc(a.from, func(x Member) bool { return x.Peer == p }) {
				if m, ok := t.member(p); ok && !c.cs.crashed[m.ID] {
					a.from = append(a.from, m)
				}
			}
		}
		if old := o.awaiting[s]; old != nil && old.takeover {
			// Those asked for the later round have it further on.
			for _, m := range old.from {
				if !slices.ContainsFunc(a.from, func(x Member) bool { return x.ID == m.ID }) {
					a.from = append(a.from, m)
				}
			}
		}
		o.awaiting[s] = a
		o.askState()
	}
}

// setThrough records that shard s has rounds before r applied.
func (o *owner) setThrough(s int, r uint64) {
	o.sync.through[s] = r
	o.maxThrough = max(o.maxThrough, r)
}

// maxRoundsAhead bounds how far past this owner's progress a round may be
// (O8): rounds are keys of the owner's maps, chosen by the sender.
const maxRoundsAhead = 1024

// horizon is the last round this owner takes a message about (O8): a
// worker pushes round r only once it has the values of round r-1 (sync),
// or runs at most its staleness ahead of what it was answered (ssp), so no
// honest worker is more than a few rounds past the owner's own worker,
// the newest configuration's start, or the rounds applied here. Async
// workers do not wait for each other, so there the window is the data's
// whole length: rounds count batches, and a fast worker may be far ahead.
func (o *owner) horizon(cur *tconf) uint64 {
	if o.c.cfg.Mode == Async {
		return Final
	}
	return max(o.c.Round(), cur.Start, o.maxThrough) + maxRoundsAhead
}

// maxPendingPer bounds the requests one member has waiting for an answer
// here (O8): a worker has a round's push, a prefetch and a few fetches out
// at a time.
const maxPendingPer = 256

// addPending queues contribution k for an answer, once per request (a
// request sent again while its answer waits is answered once).
func (o *owner) addPending(k *contribution) {
	n := 0
	for i, p := range o.pending {
		if p.from == k.from && p.req == k.req && p.op == k.op {
			if k.op == wire.CorePull || k.op == wire.CoreHash {
				o.pending[i] = k // the newest asks for what is still wanted
			}
			return
		}
		if p.member == k.member {
			n++
		}
	}
	if n >= maxPendingPer {
		o.c.stats.Rejected++ // O8: it asks again
		return
	}
	o.pending = append(o.pending, k)
}

// recheckPulls answers "moved" for the shards of waiting pulls that a new
// configuration routes elsewhere, so the worker asks their new owner. So it
// does for the answers that applied ssp and async pushes wait for: their
// shards' values are the new primary's to give now (this peer may hold
// them no more, and would wait for them forever).
func (o *owner) recheckPulls() {
	c := o.c
	for _, k := range o.pending {
		if k.op != wire.CorePull && k.op != wire.CoreHash && (k.op != wire.CorePush || c.cfg.Mode == Sync) {
			continue
		}
		msg := &wire.Core{Op: k.op, Round: k.round}
		var moved []uint32
		for _, s := range k.shards {
			if !o.routesHere(int(s), msg) {
				moved = append(moved, s)
			}
		}
		if len(moved) == 0 {
			continue
		}
		c.stats.Moved++
		c.traceMsg(TraceMoved, moved, k.round, k.member, k.from, k.req)
		c.send(k.from, &wire.Core{Op: wire.CoreReply, Flags: wire.FlagMoved, Req: k.req, Round: k.round, Shards: moved})
		for _, s := range moved {
			k.set.del(int(s))
		}
		k.shards = k.set.list(nil)
		k.narrowed = true
		var want []uint32
		for _, key := range k.want {
			if k.set.has(c.shardOf(key)) {
				want = append(want, key)
			}
		}
		k.want = want
	}
	keep := o.pending[:0]
	for _, k := range o.pending {
		if len(k.shards) > 0 || k.op == wire.CorePush && c.cfg.Mode == Sync {
			keep = append(keep, k)
		}
	}
	clear(o.pending[len(keep):])
	o.pending = keep
}

// pushAsync applies an ssp or async contribution in its worker's order.
func (o *owner) pushAsync(k *contribution) {
	c := o.c
	for _, s := range k.shards {
		if o.awaiting[int(s)] != nil || !o.held.has(int(s)) {
			o.deferContrib(k)
			return
		}
	}
	if o.final && !slices.ContainsFunc(k.shards, func(s uint32) bool { return !o.async.served.has(int(s)) }) {
		// Every worker's contributions up to its done round are in: this
		// one was answered before (a copy sent again), or went to a
		// holder that crashed and a shard restarted since, whose values
		// were already served as final. Nothing changes the final values.
		k.applied = true
		o.addPending(k)
		return
	}
	apply, gap, skipped := o.asyncOrder(k.member, k.round, k.shards, true)
	if gap {
		o.deferContrib(k)
		return
	}
	if o.final {
		// A primary that took a shard over since the values went final
		// (a crash) may lack contributions the crashed primary applied
		// but never answered (their forwards lost): their workers send
		// them again, and they are applied until this peer has answered
		// the shard as final (docs/protocol.md, "The end of a run", E11;
		// TestFixedSeeds h4/ssp/chaos 30 and h4/async/chaos 161 answered
		// such a push unapplied, and the worker's round was lost).
		apply = slices.DeleteFunc(apply, func(s uint32) bool { return o.async.served.has(int(s)) })
	}
	if len(apply) == 0 {
		k.applied = true // a copy sent again
		o.addPending(k)
		return
	}
	rows := o.rowsOf(&k.rows, apply, len(k.shards))
	if k.examples > 0 && rows.Len() > 0 {
		c.applyRows(rows, k.examples, o.step)
		o.step++
		c.stats.Applied++
	}
	if k.examples > 0 {
		c.trace(TraceEvent{Kind: TraceApply, Shards: apply, Round: k.round, Members: []uint64{k.member}})
	}
	for _, s := range apply {
		if _, known := o.async.applied[s][k.member]; !known && o.fresh.has(int(s)) {
			k.first = append(k.first, s) // (H28)
		}
		o.async.applied[s][k.member] = k.round + 1
		delete(o.async.gapSince, gapKey{k.member, s})
	}
	if skipped > 0 {
		c.stats.Lost += skipped
		c.event(Event{Kind: EvLost, Shards: len(k.shards), Text: fmt.Sprintf("%d rounds of a worker lost with a crashed holder", skipped)})
	}
	if k.flags&wire.FlagDone != 0 {
		if d, ok := o.async.doneAt[k.member]; !ok || k.round < d {
			o.async.doneAt[k.member] = k.round
		}
	}
	k.applied = true
	o.forwardAsync(k)
	o.addPending(k)
}

// asMsg rebuilds a contribution's message (to handle it again later).
func (o *owner) asMsg(k *contribution) *wire.Core {
	return &wire.Core{Op: k.op, Flags: k.flags, Member: k.member, Round: k.round, Through: k.through, Req: k.req,
		Examples: k.examples, Shards: k.shards, Rows: k.rows, RowWidth: o.c.xw, Want: k.want, Config: o.c.ConfigID()}
}

// appliedOf is member's clocks applied to shard s (its first round when
// none yet).
func (o *owner) appliedOf(s int, member uint64) uint64 {
	if a, ok := o.async.applied[s][member]; ok {
		return a
	}
	for i := len(o.c.cs.list) - 1; i >= 0; i-- {
		for _, m := range o.c.cs.list[i].Members {
			if m.ID == member {
				return m.Since
			}
		}
	}
	return 0
}

// forwardAsync sends an applied contribution's rows to the replicas of its
// shards.
func (o *owner) forwardAsync(k *contribution) {
	c := o.c
	cur := c.cs.cur()
	byPeer := map[string][]uint32{}
	for _, s := range k.shards {
		for _, h := range cur.owners[s][1:] {
			if h != c.cfg.Self {
				byPeer[h] = append(byPeer[h], s)
			}
		}
	}
	for _, p := range sortedStrings(byPeer) {
		parts := [][]uint32{byPeer[p]}
		if len(k.first) > 0 {
			// The worker's first to a shard restarted from nothing goes
			// in a message of its own, marked so (H28).
			rest := slices.DeleteFunc(slices.Clone(byPeer[p]), func(s uint32) bool { return slices.Contains(k.first, s) })
			first := slices.DeleteFunc(slices.Clone(byPeer[p]), func(s uint32) bool { return !slices.Contains(k.first, s) })
			parts = [][]uint32{rest, first}
		}
		for i, ss := range parts {
			if len(ss) == 0 {
				continue
			}
			o.forwardTo(p, k, ss, i == 1)
		}
	}
}

// forwardTo sends peer p the forward of k's rows of shards ss; first marks
// it as the worker's first to those shards since they restarted from
// nothing (H28).
func (o *owner) forwardTo(p string, k *contribution, ss []uint32, first bool) {
	c := o.c
	msg := &wire.Core{Op: wire.CoreForward, Round: k.round, Examples: k.examples, Shards: ss, RowWidth: c.xw,
		Rows: filterRows(&k.rows, ss, c.xw, c.mask), Clocks: []wire.MemberClock{{Member: k.member, Clock: k.round}}}
	if k.flags&wire.FlagDone != 0 {
		msg.Flags = wire.FlagDone
	}
	if first {
		msg.Flags |= wire.FlagFresh
	}
	f := &fwdOut{to: p, req: o.newReq(), msg: msg, sentAt: c.tick, of: []*contribution{k}}
	msg.Req = f.req
	o.fwd[f.req] = f
	k.acks++
	c.send(p, msg)
}

func sortedStrings[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// work applies what can be applied, answers what can be answered, hands
// over shards that are due. It reports progress.
func (o *owner) work() bool {
	if o.cutCheck() {
		return true
	}
	c := o.c
	if c.cs.cur() == nil {
		return false
	}
	progress := false
	if len(o.queue.deferred) > 0 {
		o.queue.retrying = true // (traced when first deferred, not at every retry)
		defer func() { o.queue.retrying = false }()
	}
	for len(o.queue.deferred) > 0 {
		ds := o.queue.take()
		curID := c.cs.cur().ID
		for _, d := range ds {
			if d.msg.Config > curID {
				o.queue.keep(d) // its configuration is not here yet: nothing about it changed
				continue
			}
			switch d.msg.Op {
			case wire.CoreForward:
				o.forward(d.from, d.msg)
			case wire.CoreState:
				o.state(d.from, d.msg)
			default:
				o.receiveNarrowed(d.from, d.msg, d.narrowed)
			}
		}
		if len(o.queue.deferred) >= len(ds) {
			break
		}
		progress = true
		// Ssp and async: again until nothing more applies, before any
		// shard is handed over below. Messages wait here in the order
		// they came, and a worker's rounds apply in order, so a forward
		// of round r+1 that came before round r's is deferred again in
		// the pass that applies round r. A copy handed over between the
		// two would lack round r+1, which this peer then applies and
		// acknowledges, and the primary answers the worker
		// (ssp/fast-chaos seed 937: the copy's next holder was the one
		// a crash left, and the contribution was lost). Sync: one pass
		// a step (its handoffs wait for a round to be applied).
		if c.cfg.Mode == Sync {
			break
		}
	}
	if c.cfg.Mode == Sync {
		for o.applySync() {
			progress = true
		}
	} else if o.checkFinalAsync() {
		progress = true
	}
	if o.payOwes() {
		progress = true
	}
	if o.promoteLost() {
		progress = true
	}
	if o.answer() {
		progress = true
	}
	return progress
}

// applySync applies the lowest round that has a complete group of shards.
// It reports whether it applied one.
func (o *owner) applySync() bool {
	c := o.c
	rs := o.bufs.roundList[:0] // (a scratch slice: this runs at every step)
	for r := range o.rounds {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	o.bufs.roundList = rs
	for _, r := range rs {
		if o.applyRound(r) {
			return true
		}
	}
	// After crashes, once a tick (not on the way of every message): the
	// rounds no contribution will come for, and the shards whose missing
	// contributions may be gone.
	if len(c.cs.crashed) == 0 || o.sync.scanned == c.tick {
		return false
	}
	o.sync.scanned = c.tick
	// A round no contribution will ever come for: every worker of its
	// configuration crashed. Applied with none, so the shards it holds
	// up go on (docs/protocol.md, "Handoff", rule H20; TestFixedSeeds
	// sync/fast-chaos 438: the two
	// workers of a round crashed, one after the other, before the peer a
	// handoff had made its route got either push, and the run waited for
	// it forever).
	for s := range c.shards {
		r := o.sync.through[s]
		if !o.held.has(s) || o.rounds[r] != nil || !c.routeMe(s, r) || o.awaiting[s] != nil || !o.allCrashed(r) ||
			!o.currentFor(s, r, true) {
			continue
		}
		o.rounds[r] = &roundAcc{}
		if o.applyRound(r) {
			o.sync.scanned = 0 // (look again: the next round may be one too)
			return true
		}
		delete(o.rounds, r)
	}
	for s := range c.shards {
		o.lostCheck(s)
	}
	return false
}

// lostCheck starts, for shard s, finding out whether the contributions
// its next round here waits for are gone: this peer routes the round, its
// copy is current for it, and every worker of the round whose
// contribution has not come has pushed a later round here since, so it
// was answered for this one, by a holder that applied the round (a crash
// moved the round here since). Such a worker never sends it again. Every
// live member is asked for the shard as of the round (a keep-takeover that
// waits for all of them, with no timeout: a member cut off may be the one
// that holds it further on). A copy further on is installed; if none has
// one, the round is applied without those contributions, counted lost
// (applyRound), and the simulator checks that no live peer's copy has
// them (TraceLost). Also when a handoff as of the round after was awaited
// from this round's route, which a crash made this peer: it would wait for
// itself (docs/protocol.md, "Handoff", rule H21; TestFixedSeeds
// sync/fast-chaos 1545, where another member had the shard further on).
func (o *owner) lostCheck(s int) {
	c := o.c
	r := o.sync.through[s]
	if !o.held.has(s) || r == 0 || o.fresh.has(s) || o.sync.lostOK[s] == r+1 || !c.routeMe(s, r) || !o.usable(s, r) {
		return // (a shard restarted from nothing has its own rule: applyRound's waited)
	}
	// A handoff as of the round after, awaited from the route of this
	// round, which a crash made this peer: it never comes (its sender is
	// this peer, which never gets the round's contributions), and the
	// ask below brings a copy that is further on, if any (1545).
	a := o.awaiting[s]
	selfWait := a != nil && !a.takeover && a.round == r+1
	if a != nil && !selfWait || a == nil && !o.currentFor(s, r, true) {
		return
	}
	t := c.cs.at(r)
	missing := false
	for _, m := range t.Members {
		if c.cs.crashed[m.ID] || o.covers(r, m.ID, s) {
			continue
		}
		if o.sync.past[m.ID] <= r {
			return // it may still send it
		}
		missing = true
	}
	if !missing {
		return
	}
	a = &await{since: c.tick, takeover: true, keep: true, all: true, takenAt: r}
	for _, m := range c.cs.cur().Members {
		if m.Peer != c.cfg.Self && !c.cs.crashed[m.ID] {
			a.from = append(a.from, m)
		}
	}
	if len(a.from) == 0 {
		o.sync.lostOK[s] = r + 1
		return
	}
	o.awaiting[s] = a
	o.askState()
}

// covers reports whether member id's contribution to round r, for shard
// s, has come here.
func (o *owner) covers(r uint64, id uint64, s int) bool {
	ra := o.rounds[r]
	if ra == nil {
		return false
	}
	for _, k := range ra.contrib {
		if k.member == id && k.set.has(s) {
			return true
		}
	}
	return false
}

// allCrashed reports whether every member of round r's configuration has
// crashed since.
func (o *owner) allCrashed(r uint64) bool {
	for _, m := range o.c.cs.at(r).Members {
		if !o.c.cs.crashed[m.ID] {
			return false
		}
	}
	return true
}

// applyRound applies the shards of round r that are complete, as one group
// per set of contributors. It reports whether it applied any.
func (o *owner) applyRound(r uint64) bool {
	c := o.c
	ra := o.rounds[r]
	t := c.cs.at(r)
	if len(o.sync.lostOK) == 0 && o.fresh.empty() && o.someMissing(ra, t) {
		return false
	}
	required := make([]Member, 0, len(t.Members))
	for _, m := range t.Members {
		if !c.cs.crashed[m.ID] {
			required = append(required, m)
		}
	}
	ready := newShardSet(c.shards) // (made here, not returned by readyIn: on the stack)
	o.readyIn(r, ready)
	if ready.empty() {
		return false
	}
	cover := o.coverage(ra)
	cur := c.cs.cur()
	waited := o.waitedFresh(ready)
	lostSet := o.lostIn(r, ready)
	lost := o.narrowReady(r, ready, required, cover, waited, lostSet, cur)
	if ready.empty() {
		return false
	}
	o.applyGroups(r, t, ra, ready, cover)
	o.countLost(r, ready, cover, lostSet, lost)
	if !o.roundLeft(r) {
		delete(o.rounds, r)
	}
	return true
}

// someMissing reports whether a live member of t has no contribution in
// ra: then round r applies to no shard, unless shards were restarted from
// nothing or found lost.
func (o *owner) someMissing(ra *roundAcc, t *tconf) bool {
	c := o.c
	// Without shards restarted from nothing or found lost, a round
	// applies only once every live member's contribution is here: most
	// pushes find one missing, and the work below (every shard, a
	// shard set per member) would come to nothing.
	clear(o.bufs.seen)
	for _, k := range ra.contrib {
		o.bufs.seen[k.member] = struct{}{}
	}
	for _, m := range t.Members {
		if _, ok := o.bufs.seen[m.ID]; !ok && !c.cs.crashed[m.ID] {
			return true
		}
	}
	return false
}

// readyIn adds to ready the shards this peer applies in round r now.
func (o *owner) readyIn(r uint64, ready shardSet) {
	c := o.c
	for s := range c.shards {
		if o.sync.through[s] == r && o.usable(s, r) && c.routeMe(s, r) { // (usable: not settling)
			ready.add(s)
		}
	}
}

// coverage is the shards each member contributed to in ra (its
// contributions may be split).
func (o *owner) coverage(ra *roundAcc) map[uint64]shardSet {
	c := o.c
	cover := map[uint64]shardSet{}
	for _, k := range ra.contrib {
		cs := cover[k.member]
		if cs == nil {
			cs = newShardSet(c.shards)
			cover[k.member] = cs
		}
		cs.or(k.set)
	}
	return cover
}

// waitedFresh is the shards of ready restarted from nothing that have
// waited two retry intervals for their first round: a worker whose
// contribution has not come may have been answered that round by the
// holder that crashed, and will never send it again (sync/chaos seed 165:
// two restarted shards each waited for a worker the other one held up).
// Applied without it; the contribution went with that holder, counted
// lost.
func (o *owner) waitedFresh(ready shardSet) (waited shardSet) {
	c := o.c
	if !o.fresh.empty() { // (rarely: no allocation on the way of every round)
		for s := range c.shards {
			if ready.has(s) && o.fresh.has(s) && c.tick-o.freshAt[s] > uint64(2*c.cfg.RetryTicks) {
				if waited == nil {
					waited = newShardSet(c.shards)
				}
				waited.add(s)
			}
		}
	}
	return waited
}

// lostIn is the shards of ready whose missing contributions are known to
// be gone (lostCheck): the workers were answered round r by holders that
// crashed. (The map holds only shards waiting: one a copy moved past since
// is dropped here, so the rounds after do not look at it again.)
func (o *owner) lostIn(r uint64, ready shardSet) (lostSet shardSet) {
	c := o.c
	for s, next := range o.sync.lostOK {
		switch {
		case !o.held.has(s) || o.sync.through[s] >= next:
			delete(o.sync.lostOK, s)
		case ready.has(s) && next == r+1:
			if lostSet == nil {
				lostSet = newShardSet(c.shards)
			}
			lostSet.add(s)
		}
	}
	return lostSet
}

// narrowReady keeps in ready the shards of round r every required member
// contributed to, or need not wait for: shards whose missing
// contributions are gone (lostSet: their members are returned, as lost),
// shards restarted from nothing that waited long enough (waited), shards
// restarted from nothing for a member gone since.
func (o *owner) narrowReady(r uint64, ready shardSet, required []Member, cover map[uint64]shardSet, waited, lostSet shardSet, cur *tconf) (lost []uint64) {
	c := o.c
	for _, m := range required {
		cs := cover[m.ID]
		if lostSet != nil && o.sync.past[m.ID] > r && (cs == nil || !lostSet.subset(cs)) {
			lost = append(lost, m.ID)
			cs = union(cs, lostSet)
		}
		if waited != nil && (cs == nil || !waited.subset(cs)) {
			cs = union(cs, waited)
			c.stats.Lost++
			c.event(Event{Kind: EvLost, Shards: waited.count(), Text: fmt.Sprintf("round %d of shards restarted from nothing applied without %s's contribution (answered by a holder that crashed)", r, short(m.Peer))})
		}
		if !cur.isMember(m.Peer, m.ID) && !o.fresh.empty() {
			// A member gone since (it left, its rounds answered) will not
			// send again: a shard restarted from nothing does not wait
			// for it.
			cs = union(cs, o.fresh)
		}
		if cs != nil {
			ready.and(cs)
		} else {
			ready.clear()
		}
	}
	return lost
}

// applyGroups applies round r to the ready shards, grouped by who
// contributed to them (a crashed member's push may have reached this owner
// for some shards only). (The groups stay here, not returned: on the
// stack, as BenchmarkRound's allocations show.)
func (o *owner) applyGroups(r uint64, t *tconf, ra *roundAcc, ready shardSet, cover map[uint64]shardSet) {
	c := o.c
	members := t.Members
	var groups []shardSet
	var keys []string
	o.bufs.list = ready.list(o.bufs.list[:0])
	for _, s := range o.bufs.list {
		key := make([]byte, 0, len(members))
		for _, m := range members {
			if cs := cover[m.ID]; cs != nil && cs.has(int(s)) {
				key = append(key, 1)
			} else {
				key = append(key, 0)
			}
		}
		i := slices.Index(keys, string(key))
		if i < 0 {
			i = len(keys)
			keys = append(keys, string(key))
			groups = append(groups, newShardSet(c.shards))
		}
		groups[i].add(int(s))
	}
	for _, g := range groups {
		o.applyGroup(r, t, ra, g)
	}
}

// countLost counts and reports, per shard of lostSet applied in round r,
// the contributions it was applied without.
func (o *owner) countLost(r uint64, ready shardSet, cover map[uint64]shardSet, lostSet shardSet, lost []uint64) {
	c := o.c
	if lostSet != nil {
		for _, s := range lostSet.list(nil) {
			if !ready.has(int(s)) {
				continue
			}
			delete(o.sync.lostOK, int(s))
			var gone []uint64
			for _, id := range lost {
				if cs := cover[id]; cs == nil || !cs.has(int(s)) {
					gone = append(gone, id)
				}
			}
			if len(gone) == 0 {
				continue
			}
			c.stats.Lost += uint64(len(gone))
			c.trace(TraceEvent{Kind: TraceLost, Shards: []uint32{s}, Round: r, Members: gone})
			c.event(Event{Kind: EvLost, Shards: 1, Text: fmt.Sprintf("round %d of shard %d applied without %d contributions answered by holders that crashed", r, s, len(gone))})
		}
	}
}

// roundLeft reports whether a shard this peer applies in round r has not
// had it yet: a round is done when every shard this peer applies in it is.
func (o *owner) roundLeft(r uint64) bool {
	c := o.c
	left := false
	for s := range c.shards {
		if o.sync.through[s] == r && o.held.has(s) && c.routeMe(s, r) {
			left = true
		}
	}
	return left
}

// applyGroup applies round r to the shards of g: the sum of the members'
// rows in member order, over their examples, then forwards it to the
// replicas.
func (o *owner) applyGroup(r uint64, t *tconf, ra *roundAcc, g shardSet) {
	c := o.c
	w := c.xw
	o.bufs.sum.Reset()
	n := uint64(0)
	contributors, done := 0, 0
	var ids []uint64
	trimmed := c.cfg.Combine == Trimmed || c.cfg.Combine == Mean || c.cfg.Combine == Capped // (one part a member, combined below)
	var parts []*model.Sparse
	var partEx []uint64
	for _, m := range t.Members {
		counted := false
		for _, k := range ra.contrib {
			if k.member != m.ID || !overlap(k.set, g) {
				continue
			}
			if !counted {
				counted = true
				contributors++
				if k.examples > 0 {
					ids = append(ids, m.ID)
				}
				n += k.examples
				if k.flags&wire.FlagDone != 0 {
					done++
				}
				if trimmed {
					parts, partEx = append(parts, &model.Sparse{}), append(partEx, k.examples)
				}
			}
			if k.rows.Len() == 0 {
				continue
			}
			part := &k.rows
			if !k.set.subset(g) {
				o.bufs.scratch = filterSet(&k.rows, g, w, c.mask, o.bufs.scratch)
				part = &o.bufs.scratch
			}
			if trimmed {
				// (G3: one part a member, its contributions to the group added.)
				last := parts[len(parts)-1]
				o.bufs.tmp.Add(last, part, w)
				*last, o.bufs.tmp = o.bufs.tmp, *last
				continue
			}
			o.bufs.tmp.Add(&o.bufs.sum, part, w)
			o.bufs.sum, o.bufs.tmp = o.bufs.tmp, o.bufs.sum
		}
	}
	switch {
	case c.cfg.Combine == Mean:
		o.bufs.trim.MeanSum(&o.bufs.sum, parts, c.width, w, 1)
	case c.cfg.Combine == Capped:
		o.bufs.trim.MeanSum(&o.bufs.sum, parts, c.width, w, CappedFactor)
	case trimmed:
		o.bufs.trim.TrimmedSum(&o.bufs.sum, parts, partEx, w)
	}
	if contributors < len(t.Members) {
		c.stats.Degraded++
	}
	shards := g.list(make([]uint32, 0, g.count())) // (the trace may keep it)
	o.beforeApply(r, shards)
	if n > 0 && o.bufs.sum.Len() > 0 {
		c.applyRows(&o.bufs.sum, n, int64(r))
	}
	c.stats.Applied++
	for _, s := range shards {
		o.setThrough(int(s), r+1)
		o.fresh.del(int(s))
		delete(o.sync.ff, int(s))
		if a := o.awaiting[int(s)]; a != nil && !a.takeover && a.round <= r+1 {
			delete(o.awaiting, int(s)) // it got there itself (its route changed)
		}
	}
	c.trace(TraceEvent{Kind: TraceApply, Shards: shards, Round: r, Members: ids})
	if c.cfg.Gather == Full {
		o.noteChanged(r, g, o.bufs.sum.Idx)
	}
	// The last round is one every member of its configuration contributed
	// to as done (E10). A crashed member that did not contribute counts as
	// not done: its push of this round, with data, may have reached other
	// primaries and not this one. Those would wait for the next round,
	// whose pushes the workers answered final here never send (TestFixedSeeds
	// h4/sync/encoded 77: a crashed joiner's push of its last round reached
	// one primary only, the others answered that round as the last, and that
	// primary waited for the next forever). So every primary ends at the
	// first round all done after the crashed members are out of the
	// configuration, whatever of theirs it got.
	allDone := contributors == len(t.Members) && done == contributors && !o.joinsAfter(r)
	if allDone {
		o.final = true
		o.sync.finalAt = max(o.sync.finalAt, r+1)
	}
	// Forward to the replicas of these shards.
	byPeer := map[string][]uint32{}
	for _, s := range shards {
		for _, h := range t.owners[s] {
			if h != c.cfg.Self && !o.crashedPeer(t, h) {
				byPeer[h] = append(byPeer[h], s)
			}
		}
	}
	for _, p := range sortedStrings(byPeer) {
		ss := byPeer[p]
		msg := &wire.Core{Op: wire.CoreForward, Round: r, Examples: n, Shards: ss, RowWidth: w,
			Rows: filterRows(&o.bufs.sum, ss, w, c.mask)}
		if allDone {
			msg.Flags |= wire.FlagFinal // replicas know the values are final too
		}
		for _, id := range ids {
			msg.Clocks = append(msg.Clocks, wire.MemberClock{Member: id, Clock: r})
		}
		slices.SortFunc(msg.Clocks, func(a, b wire.MemberClock) int { return cmpU64(a.Member, b.Member) })
		f := &fwdOut{to: p, req: o.newReq(), msg: msg, sentAt: c.tick, round: r, shards: ss}
		msg.Req = f.req
		o.fwd[f.req] = f
		c.send(p, msg)
	}
}

// joinsAfter reports whether a configuration starting at round r+1 adds
// workers: then every worker being done at round r does not end the run.
// Only a start of r+1 counts: every route of round r knows such a
// configuration before it applies r, for the leader that proposed it held
// its own push of r until it applied it (R12), and a push of a newer
// configuration waits (O6). A configuration starting later may reach one
// route before it applies r and another after, and the two would end
// the run at different rounds (E10; TestFixedSeeds h4/sync/encoded 729:
// a join proposed after the leader's done push of the last round reached
// one route before that round, which waited for the next forever, while
// the others answered the workers final).
func (o *owner) joinsAfter(r uint64) bool {
	t := o.c.cs.at(r)
	for _, later := range o.c.cs.list {
		if later.Start != r+1 {
			continue
		}
		for _, m := range later.Members {
			if !t.isMember(m.Peer, m.ID) {
				return true
			}
		}
	}
	return false
}

// crashedPeer reports whether peer p (as member of t) has crashed since.
func (o *owner) crashedPeer(t *tconf, p string) bool {
	m, ok := t.member(p)
	return ok && o.c.cs.crashed[m.ID]
}

func overlap(a, b shardSet) bool {
	for i := range a {
		if a[i]&b[i] != 0 {
			return true
		}
	}
	return false
}

// filterSet returns the rows of rs whose shard is in set, into dst.
func filterSet(rs *model.Sparse, set shardSet, width int, mask uint32, dst model.Sparse) model.Sparse {
	dst.Reset()
	for i, k := range rs.Idx {
		if set.has(int(k & mask)) {
			dst.Append(k, rs.Val[i*width:(i+1)*width])
		}
	}
	return dst
}

// usable reports whether shard s's state here serves round r: held, and
// not waiting for a state as of round r or earlier (a holder may wait for
// the shard as of a later round, after handing it over meanwhile).
func (o *owner) usable(s int, r uint64) bool {
	if !o.held.has(s) {
		return false
	}
	if o.sync.settle[s] != nil {
		return false // (its copy may still be replaced)
	}
	a := o.awaiting[s]
	return a == nil || o.c.cfg.Mode == Sync && !a.takeover && a.round > r && r != Final
}

// settled takes peer p's answer to a takeover's ask for shard s (its
// copy, or "no copy"): the copy installed here waits for one peer fewer.
func (o *owner) settled(s int, p string) {
	w := o.sync.settle[s]
	if w == nil {
		return
	}
	w.pending = slices.DeleteFunc(w.pending, func(m Member) bool { return m.Peer == p })
	if len(w.pending) == 0 {
		delete(o.sync.settle, s)
	}
}

// waitingForward reports whether a forward of shard s's round r (sync)
// waits for its acknowledgement.
func (o *owner) waitingForward(s uint32, r uint64) bool {
	for _, f := range o.fwd {
		if f.of == nil && f.round == r {
			if _, ok := slices.BinarySearch(f.shards, s); ok {
				return true
			}
		}
	}
	return false
}

// forwardWaitsAsync reports whether a forward of ssp/async push k's
// contribution (its worker's round, to one of its shards) waits for its
// acknowledgement here. A push of a contribution applied already is
// answered only once its replicas have it, as the push that applied it is
// (k.acks): the contribution may have been applied from the crashed
// primary's forward, and forwarded on from here, with no push waiting for
// that forward; answered at once, the worker's round was gone when the
// forward was lost and this peer was removed (async/fast-chaos seed 78 in
// TestFixedSeeds). Sync has the same rule (waitingForward).
func (o *owner) forwardWaitsAsync(k *contribution) bool {
	for _, f := range o.fwd {
		if f.of == nil || len(f.msg.Clocks) != 1 || f.msg.Clocks[0].Member != k.member || f.msg.Clocks[0].Clock != k.round {
			continue
		}
		for _, s := range f.msg.Shards {
			if k.set.has(int(s)) {
				return true
			}
		}
	}
	return false
}

// answerable reports whether contribution k can be answered now.
func (o *owner) answerable(k *contribution) bool {
	c := o.c
	if k.op == wire.CorePush && c.cfg.Mode == Sync {
		for _, s := range k.shards {
			if o.sync.through[s] <= k.round || o.waitingForward(s, k.round) {
				return false
			}
		}
		return true
	}
	if k.op == wire.CorePush && (k.acks > 0 || o.forwardWaitsAsync(k)) {
		return false
	}
	for _, s := range k.shards {
		if !o.usable(int(s), k.through) {
			return false
		}
	}
	if o.final && c.cfg.Mode != Sync {
		for _, s := range k.shards {
			if c.isPrimary(int(s)) && o.handsOver(int(s)) {
				return false // its replicas get the final values first (copyFinal)
			}
			if k.op != wire.CorePush && c.isPrimary(int(s)) && !o.async.served.has(int(s)) && o.pushWaits(int(s)) {
				return false // a push sent again waits behind a gap (pushAsync)
			}
		}
	}
	if k.through == Final || o.final {
		if o.final && c.cfg.Mode == Sync {
			// Final once the last round is applied to every shard asked
			// for, not only to the ones whose contributions came first: a
			// round applied in groups (a late push for some shards) made
			// an owner answer final values without its last round
			// (sync/full-churn seed 118).
			for _, s := range k.shards {
				if o.sync.through[s] < o.sync.finalAt {
					return false
				}
			}
		}
		return o.final // (final values answer any request: no round runs again)
	}
	if c.cfg.Mode == Sync {
		for _, s := range k.shards {
			if o.sync.through[s] < k.through {
				return false
			}
		}
		return true
	}
	// Done workers poll: answer when final or after a while.
	if k.op == wire.CorePush && k.flags&wire.FlagDone != 0 && !o.final && c.tick-k.since < uint64(c.cfg.RetryTicks)/4 {
		return false
	}
	if k.through > 0 && c.cfg.Mode == SSP {
		for _, s := range k.shards {
			if o.throughAsync(int(s)) < k.through {
				return false
			}
		}
	}
	return true
}

// throughAsync is the rounds of every live, not done worker applied to
// shard s (ssp's "through").
func (o *owner) throughAsync(s int) uint64 {
	c := o.c
	th := uint64(Final)
	for _, m := range c.cs.cur().Members {
		if _, done := o.async.doneAt[m.ID]; done {
			continue
		}
		if _, known := o.async.applied[s][m.ID]; !known && o.fresh.has(s) {
			// Restarted from nothing: a worker's rounds before its next
			// contribution went with the holders that crashed; it is not
			// behind here (and may wait for this answer to send more).
			continue
		}
		th = min(th, o.appliedOf(s, m.ID))
	}
	return th
}

// answer replies to every contribution that can be answered.
func (o *owner) answer() bool {
	progress := false
	keep := o.pending[:0]
	for _, k := range o.pending {
		if !o.answerable(k) {
			keep = append(keep, k)
			continue
		}
		o.reply(k)
		progress = true
	}
	clear(o.pending[len(keep):])
	o.pending = keep
	return progress
}

// reply answers contribution k with the values it wants.
func (o *owner) reply(k *contribution) {
	c := o.c
	msg := &wire.Core{Op: wire.CoreReply, Req: k.req, Round: k.round}
	if k.narrowed && k.op != wire.CoreHash {
		msg.Shards = k.shards // (a hash answer names its shards in Clocks)
	}
	if o.final {
		msg.Flags |= wire.FlagFinal
		if c.cfg.Mode != Sync {
			for _, s := range k.shards {
				o.async.served.add(int(s))
			}
		}
	}
	switch {
	case k.op == wire.CoreHash:
		msg.Op, msg.Flags = wire.CoreHash, msg.Flags|wire.FlagReply
		for _, s := range k.shards {
			msg.Clocks = append(msg.Clocks, wire.MemberClock{Member: uint64(s), Clock: c.m.ShardHash(int(s))})
		}
	case k.flags&wire.FlagAll != 0:
		msg.Flags |= wire.FlagRows
		msg.RowWidth = c.width
		for _, s := range k.shards {
			c.m.ExportRows(int(s), false, &msg.Rows)
		}
		sortRows(&msg.Rows, c.width)
	case c.cfg.Gather == Full && k.op == wire.CorePush:
		msg.Flags |= wire.FlagRows
		msg.RowWidth = c.width
		keys := o.changedFor(k)
		for _, key := range keys {
			msg.Rows.Append(key, c.m.Row(key))
		}
	default:
		msg.Values = make([]float32, 0, len(k.want)*c.xw)
		if c.xw != c.width {
			msg.Values = c.m.AppendWideRows(msg.Values, k.want) // a window's rows carry their optimizer state
			break
		}
		for _, key := range k.want {
			msg.Values = append(msg.Values, c.m.Row(key)...)
		}
	}
	if c.cfg.Mode == Sync {
		msg.Through = k.round + 1
	} else {
		th := uint64(Final)
		for _, s := range k.shards {
			th = min(th, o.throughAsync(int(s)))
		}
		msg.Through = th
	}
	c.traceMsg(TraceAnswer, k.shards, k.round, k.member, k.from, k.req)
	c.send(k.from, msg)
}

// changedFor returns the rows changed in the round a full-gather push
// belongs to, in its shards, sorted.
func (o *owner) changedFor(k *contribution) []uint32 {
	c := o.c
	var out []uint32
	ch := o.sync.changed[k.round]
	for _, key := range ch.keys {
		if k.set.has(c.shardOf(key)) {
			out = append(out, key)
		}
	}
	// Shards whose round this peer did not apply itself (it got them
	// later in a handoff, or resynced): every row, since which changed is
	// not known here.
	var all model.Sparse
	for _, s := range k.shards {
		if ch.shards == nil || !ch.shards.has(int(s)) {
			c.m.ExportRows(int(s), false, &all)
		}
	}
	out = append(out, all.Idx...)
	slices.Sort(out)
	return slices.Compact(out)
}

// changedRound is what a sync round changed here (full gather): the rows,
// and the shards it was applied to.
type changedRound struct {
	keys   []uint32
	shards shardSet
}

// noteChanged records rows of shards g changed by round r, and forgets
// rounds long past.
func (o *owner) noteChanged(r uint64, g shardSet, keys []uint32) {
	ch := o.sync.changed[r]
	if ch.shards == nil {
		ch.shards = newShardSet(o.c.shards)
	}
	ch.shards.or(g)
	ch.keys = append(ch.keys, keys...)
	o.sync.changed[r] = ch
	for old := range o.sync.changed {
		if old+4 < r {
			delete(o.sync.changed, old)
		}
	}
}

// forward takes a primary's forwarded rows (this peer is a replica): it
// checks them (forwardValid), keeps the shards to apply them to
// (forwardKept), applies them as the mode does (forwardSync,
// forwardAsyncMode) and acknowledges them.
func (o *owner) forward(from string, msg *wire.Core) {
	c := o.c
	cur := c.cs.cur()
	if cur == nil || msg.Config > cur.ID {
		o.deferMsg(from, msg)
		return
	}
	if !o.forwardValid(from, msg) {
		return
	}
	if msg = o.forwardKept(from, msg, cur); msg == nil {
		return
	}
	ack := false
	if c.cfg.Mode == Sync {
		ack = o.forwardSync(from, msg)
	} else {
		ack = o.forwardAsyncMode(from, msg)
	}
	if ack {
		c.send(from, &wire.Core{Op: wire.CoreAck, Req: msg.Req})
	}
}

// forwardValid reports whether a forward comes from a member, from the
// primary of each of its shards, with rows of those shards only; when it
// does not, it is rejected (and acknowledged when nothing waits on it).
func (o *owner) forwardValid(from string, msg *wire.Core) bool {
	c := o.c
	if _, ok := o.memberOf(from, msg.Member); !ok || msg.RowWidth != c.xw && msg.Rows.Len() > 0 {
		c.stats.Rejected++
		return false
	}
	for _, s := range msg.Shards {
		if int(s) >= c.shards || !o.isPrimaryFor(from, int(s), msg.Round) {
			// Not from the primary (as far back as this peer looks): a
			// member's forward of long ago, sent again until acknowledged.
			// Nothing to apply, but an answer, or it never stops (a leaver
			// waits for it to go).
			c.stats.Rejected++
			if c.cfg.Mode == Sync && !o.pastAll(msg.Shards, msg.Round) {
				// Sync: from the round's route before a crash moved the
				// round (the sender was declared crashed: it is gone, or
				// cut off and removed). Its answers of the round wait for
				// this acknowledgement; given for a round no live holder
				// has applied, they told a leaver its round was done, the
				// leaver went, and the round's new route waited for its
				// contribution forever (sync/chaos seed 11 in
				// TestFixedSeeds). Unanswered, the workers send the round
				// to its new route.
				return false
			}
			c.send(from, &wire.Core{Op: wire.CoreAck, Req: msg.Req})
			return false
		}
	}
	set := newShardSet(c.shards)
	set.fromList(msg.Shards)
	for _, k := range msg.Rows.Idx {
		if !set.has(c.shardOf(k)) {
			c.stats.Rejected++
			return false
		}
	}
	return true
}

// forwardKept is the forward with the shards this replica applies it to
// now; nil when it was acknowledged (none) or deferred (one is not usable
// yet).
func (o *owner) forwardKept(from string, msg *wire.Core, cur *tconf) *wire.Core {
	c := o.c
	var keep []uint32
	for _, s := range msg.Shards {
		a := o.awaiting[int(s)]
		switch {
		case a != nil && c.cfg.Mode == Sync && !a.takeover && a.round > msg.Round && !o.held.has(int(s)):
			// The state this holder waits for is as of a later round: it
			// includes this one.
			continue
		case a == nil && !o.held.has(int(s)):
			// Not a holder any more (handed over), or not yet in the
			// primary's view: nothing to apply to.
			continue
		case c.cfg.Mode != Sync && o.final && cur.primary(int(s)) != from:
			// Ssp and async values that are final change no more: a
			// forward of a primary before (cut off and removed since)
			// carries a contribution the run went final without, as a
			// push that reaches final values does. Applied at the
			// primary after it had answered final pulls, the peers
			// fetched different models (async/chaos seed 124 in
			// TestFixedSeeds). The primary's own forwards still apply:
			// its replicas get what it applied before it went final.
			continue
		case !o.usable(int(s), msg.Round):
			o.deferMsg(from, msg)
			return nil
		}
		keep = append(keep, s)
	}
	if len(keep) == 0 {
		c.send(from, &wire.Core{Op: wire.CoreAck, Req: msg.Req})
		return nil
	}
	if len(keep) < len(msg.Shards) {
		// Apply it to those only: a shard handed over since must not
		// keep the others from their rows.
		m := *msg
		m.Shards = keep
		m.Rows = filterRows(&msg.Rows, keep, c.xw, c.mask)
		msg = &m
	}
	return msg
}

// forwardSync applies a sync forward per shard: those at its round, not
// those past it (a copy sent again, or a state received since); for those
// behind it (a round this replica missed) it asks for the shard and defers
// the forward. It reports whether to acknowledge it.
func (o *owner) forwardSync(from string, msg *wire.Core) bool {
	c := o.c
	ready := newShardSet(c.shards)
	var behind []uint32
	for _, sh := range msg.Shards {
		switch {
		case o.sync.through[sh] == msg.Round:
			ready.add(int(sh))
		case o.sync.through[sh] < msg.Round:
			behind = append(behind, sh)
		}
	}
	if !ready.empty() {
		rows := &msg.Rows
		if ready.count() < len(msg.Shards) {
			o.bufs.scratch = filterSet(&msg.Rows, ready, c.xw, c.mask, o.bufs.scratch)
			rows = &o.bufs.scratch
		}
		applied := ready.list(nil)
		o.beforeApply(msg.Round, applied)
		if msg.Examples > 0 && rows.Len() > 0 {
			c.applyRows(rows, msg.Examples, int64(msg.Round))
		}
		for _, sh := range applied {
			o.setThrough(int(sh), msg.Round+1)
		}
		if c.cfg.Gather == Full {
			o.noteChanged(msg.Round, ready, rows.Idx)
		}
		c.stats.Replicated++
		ids := make([]uint64, len(msg.Clocks))
		for i, mc := range msg.Clocks {
			ids[i] = mc.Member
		}
		c.trace(TraceEvent{Kind: TraceApply, Shards: applied, Round: msg.Round, Members: ids, Replica: true, Peer: from})
	}
	if msg.Flags&wire.FlagFinal != 0 && len(behind) == 0 {
		o.final = true
		o.sync.finalAt = max(o.sync.finalAt, msg.Round+1)
	}
	if len(behind) > 0 {
		for _, sh := range behind {
			if a := o.awaiting[int(sh)]; a == nil || a.round < msg.Round+1 {
				o.awaiting[int(sh)] = &await{round: msg.Round + 1, since: c.tick}
			}
			c.send(from, &wire.Core{Op: wire.CoreState, Flags: wire.FlagAsk, Shards: []uint32{sh}, Round: msg.Round + 1})
		}
		o.deferMsg(from, msg)
		return false
	}
	return true
}

// forwardAsyncMode applies an ssp or async forward in its worker's order
// (asyncOrder), and forwards it on for the shards this peer is primary of
// now. It reports whether to acknowledge it.
// rowsOf returns the rows of a contribution to of shards that lie in the
// shards of apply (ssp/async: those it applies to now): rows itself when
// it applies to all, else the owner's scratch.
func (o *owner) rowsOf(rows *model.Sparse, apply []uint32, of int) *model.Sparse {
	if len(apply) >= of {
		return rows
	}
	c := o.c
	set := newShardSet(c.shards)
	set.fromList(apply)
	o.bufs.scratch = filterSet(rows, set, c.xw, c.mask, o.bufs.scratch)
	return &o.bufs.scratch
}

func (o *owner) forwardAsyncMode(from string, msg *wire.Core) bool {
	c := o.c
	if len(msg.Clocks) != 1 {
		c.stats.Rejected++
		return false
	}
	wk := msg.Clocks[0]
	apply, gap, _ := o.asyncOrder(wk.Member, wk.Clock, msg.Shards, msg.Flags&wire.FlagFresh != 0)
	if gap {
		o.askRefresh(from, wk.Member, wk.Clock, msg.Shards)
		o.deferMsg(from, msg)
		return false
	}
	if len(apply) > 0 {
		rows := o.rowsOf(&msg.Rows, apply, len(msg.Shards))
		if msg.Examples > 0 && rows.Len() > 0 {
			c.applyRows(rows, msg.Examples, o.step)
			o.step++
		}
		var first []uint32
		for _, s := range apply {
			if _, known := o.async.applied[s][wk.Member]; !known && o.fresh.has(int(s)) {
				first = append(first, s) // (H28)
			}
			o.async.applied[s][wk.Member] = wk.Clock + 1
			delete(o.async.gapSince, gapKey{wk.Member, s})
		}
		if msg.Examples > 0 {
			c.trace(TraceEvent{Kind: TraceApply, Shards: apply, Round: wk.Clock, Members: []uint64{wk.Member}, Replica: true, Peer: from})
		}
		if msg.Flags&wire.FlagDone != 0 {
			if d, ok := o.async.doneAt[wk.Member]; !ok || wk.Clock < d {
				o.async.doneAt[wk.Member] = wk.Clock
			}
		}
		c.stats.Replicated++
		// A forward of the primary before (it crashed or handed the
		// shard over since) that reaches this peer as the primary now:
		// its replicas need it too, and only this peer sends them.
		var prim []uint32
		for _, s := range apply {
			if c.isPrimary(int(s)) {
				prim = append(prim, s)
			}
		}
		if len(prim) > 0 {
			k := &contribution{member: wk.Member, round: wk.Clock, examples: msg.Examples, flags: msg.Flags & wire.FlagDone,
				shards: prim, rows: filterRows(rows, prim, c.xw, c.mask), first: first}
			o.forwardAsync(k)
		}
	}
	return true
}

// pastAll reports whether this peer holds every shard of shards with
// round r applied (sync).
func (o *owner) pastAll(shards []uint32, r uint64) bool {
	for _, s := range shards {
		if int(s) >= o.c.shards || !o.held.has(int(s)) || o.sync.through[s] <= r {
			return false
		}
	}
	return true
}

// askRefresh (ssp/async) asks primary p for its copy of every shard of
// shards that has missed a contribution of member's before round r for a
// retry interval: p sends a worker's contributions in order, so the
// missing one is not coming again (its forward was lost and the primary
// that sent it crashed or handed the shard on since; the copy handed on had
// it: async/chaos seeds 384, 627 and 969). Until the copy comes the shard is
// awaited, and the forwards after it wait.
func (o *owner) askRefresh(p string, member, r uint64, shards []uint32) {
	c := o.c
	cur := c.cs.cur()
	for _, sh := range shards {
		s := int(sh)
		since, ok := o.async.gapSince[gapKey{member, sh}]
		if !ok || c.tick-since < uint64(c.cfg.RetryTicks) || o.appliedOf(s, member) >= r ||
			o.awaiting[s] != nil || !o.held.has(s) || !cur.holds(c.cfg.Self, s) {
			continue
		}
		q := cur.primary(s)
		if q == c.cfg.Self || o.handsOver(s) {
			continue // (a peer that hands the shard on has the copy the primary waits for)
		}
		m, ok := cur.member(q)
		if !ok {
			continue
		}
		a := &await{conf: cur.ID, since: c.tick, from: []Member{m}, own: true}
		o.awaiting[s] = a
		c.stats.Refreshes++
		o.sendRefreshAsk(s, a)
	}
}

// handsOver reports whether this peer owes shard s to another or waits for
// a handoff of it to be acknowledged.
func (o *owner) handsOver(s int) bool {
	for _, w := range o.owes {
		if w.shard == s {
			return true
		}
	}
	for _, x := range o.xfer {
		if x.shard == s {
			return true
		}
	}
	return false
}

// sendRefreshAsk asks a's primary for its copy of shard s; the request's
// round is this peer's own number for it (the tick it first asked, plus
// one), the same every time it asks again.
func (o *owner) sendRefreshAsk(s int, a *await) {
	o.c.send(a.from[0].Peer, &wire.Core{Op: wire.CoreState, Flags: wire.FlagAsk, Shards: []uint32{uint32(s)}, Round: refreshNum(a)})
}

// refreshNum is the number a refresh ask carries in Round, and the
// primary's "no copy" answer with it (onNoCopy).
func refreshNum(a *await) uint64 { return a.since + 1 }

// askRefreshAgain asks again for the copies askRefresh waits for (a request
// or its answer may be lost), and stops waiting for one whose primary is
// another peer now: the configuration's handoff has taken over.
func (o *owner) askRefreshAgain() {
	c := o.c
	cur := c.cs.cur()
	for _, s := range sortedInts(o.awaiting) {
		a := o.awaiting[s]
		if !a.own || len(a.from) != 1 {
			continue
		}
		if cur.primary(s) != a.from[0].Peer || !cur.holds(c.cfg.Self, s) {
			delete(o.awaiting, s)
			continue
		}
		c.stats.Resent++
		o.sendRefreshAsk(s, a)
	}
}

// isPrimaryFor reports whether peer p applies shard s: for sync round r its
// route, otherwise it is or was the primary in a configuration this peer
// knows (forwards of an owner that has just handed the shard over may
// still arrive).
func (o *owner) isPrimaryFor(p string, s int, r uint64) bool {
	c := o.c
	if c.cfg.Mode == Sync {
		return c.cs.route(s, r) == p
	}
	// Every configuration known, not only the last few: a forward dropped
	// and sent again can come several configurations later (async/fast-
	// chaos seed 1788: refused four configurations on, it left a hole in
	// the worker's rounds at the shard's new primary, whose holder with
	// the round had crashed; the hole was given up on as lost, though the
	// forward that filled it had come).
	for i := len(c.cs.list) - 1; i >= 0; i-- {
		if c.cs.list[i].primary(s) == p {
			return true
		}
	}
	return false
}

// ack takes the acknowledgement of a forward or a state transfer.
func (o *owner) ack(from string, msg *wire.Core) {
	c := o.c
	if f := o.fwd[msg.Req]; f != nil && f.to == from {
		delete(o.fwd, msg.Req)
		for _, k := range f.of {
			k.acks--
		}
		return
	}
	if x := o.xfer[msg.Req]; x != nil && x.to == from {
		delete(o.xfer, msg.Req)
		o.maybeFree(x.shard)
		return
	}
	c.stats.Stale++
}

// hash answers a request for shard hashes.
func (o *owner) hash(from string, msg *wire.Core) {
	c := o.c
	if _, ok := o.memberOf(from, msg.Member); !ok {
		c.stats.Rejected++
		return
	}
	k := &contribution{from: from, member: msg.Member, req: msg.Req, op: wire.CoreHash, round: msg.Round, through: msg.Through}
	k.set = newShardSet(c.shards)
	for _, s := range msg.Shards {
		if int(s) >= c.shards || !o.routesHere(int(s), msg) {
			c.stats.Rejected++
			return
		}
		k.set.add(int(s))
	}
	k.shards = k.set.list(nil)
	o.addPending(k)
}

// checkFinalAsync declares the values final once every worker of the
// configuration is done and all of its pushes are applied here.
func (o *owner) checkFinalAsync() bool {
	c := o.c
	if o.final {
		return false
	}
	cur := c.cs.cur()
	primary := false
	for s := range c.shards {
		primary = primary || c.isPrimary(s)
	}
	if !primary {
		// Primary of no shard (the master topology's other peers, or a
		// ring with more members than shards): no push comes here, so no
		// done push either. Ready once its own worker is done; the
		// primaries say when every push is applied (async/master never
		// ended before).
		if !c.workerDone() {
			return false
		}
		return o.sayReady(cur)
	}
	for _, m := range cur.Members {
		d, ok := o.async.doneAt[m.ID]
		if !ok {
			return false
		}
		for s := range c.shards {
			if c.isPrimary(s) && o.held.has(s) && o.appliedOf(s, m.ID) < d+1 {
				return false
			}
		}
	}
	// And every leaver still around: it ends with a done push of the
	// round it stopped at (applied here only once every push of it before
	// that is), and pushes that reach an owner whose values are final go
	// nowhere. (Shards restarted since its pushes, or handed over without
	// its clocks, have none of it to wait for.)
	for _, t := range c.cs.list {
		for _, m := range t.Left {
			if !c.isAlive(m.ID) || cur.isMember(m.Peer, m.ID) {
				continue
			}
			d, ok := o.async.doneAt[m.ID]
			if !ok {
				return false
			}
			for s := range c.shards {
				if !c.isPrimary(s) || !o.held.has(s) {
					continue
				}
				if a, known := o.async.applied[s][m.ID]; known && a < d+1 || !known && o.deferredPush(m.ID, s) {
					// (Unknown, and a later push of it waits here behind
					// the gap: its first push to this shard was lost and
					// is sent again. ssp/chaos seed 1427 went final
					// without a joiner's first round, which left at once.)
					return false
				}
			}
		}
	}
	for s := range c.shards {
		if c.isPrimary(s) && (!o.held.has(s) || o.awaiting[s] != nil) {
			return false
		}
	}
	return o.sayReady(cur)
}

// pushWaits reports whether a push of shard s waits here behind a gap
// (deferred).
func (o *owner) pushWaits(s int) bool {
	for _, d := range o.queue.deferred {
		if d.msg.Op == wire.CorePush && slices.Contains(d.msg.Shards, uint32(s)) {
			return true
		}
	}
	return false
}

// deferredPush reports whether a push of member to shard s waits here
// behind a gap (deferred).
func (o *owner) deferredPush(member uint64, s int) bool {
	for _, d := range o.queue.deferred {
		if d.msg.Op == wire.CorePush && d.msg.Member == member && slices.Contains(d.msg.Shards, uint32(s)) {
			return true
		}
	}
	return false
}

// sayReady tells the leader this owner is ready under cur (every push it
// is owed is applied), again now and then until the final configuration
// comes (a message can be lost, the leader can change); under the final
// configuration, or alone, the values are final. It reports progress.
func (o *owner) sayReady(cur *tconf) bool {
	c := o.c
	if !cur.Final && !c.ag.alone(cur) {
		if o.async.readyFor != cur.ID || c.tick-o.async.readyAt >= uint64(c.cfg.RetryTicks)/4 {
			o.async.readyFor, o.async.readyAt = cur.ID, c.tick
			if c.ag.isLeader() {
				c.ag.onReady(c.cfg.ID, cur.ID)
			} else if l := c.ag.leaderPeer(); l != "" {
				c.send(l, &wire.Core{Op: wire.CoreReady, Req: cur.ID})
			}
			return true
		}
		return false
	}
	o.final = true
	o.copyFinal(cur)
	return true
}

// copyFinal owes each replica of every shard this primary holds a copy of
// its final values (ssp/async; docs/protocol.md, "The end of a run", E9).
// A replica applies forwards in each worker's round order, not in the
// primary's order, so its copy differs from the primary's in the last bits;
// a replica that takes a shard over after some peers fetched the final
// values would serve the others different ones (h4/async/chaos seed 12 in
// TestFixedSeeds: a primary removed after three peers had fetched, and the
// fourth fetched its replica's copy). Final answers wait until the copies
// are acknowledged (answerable).
func (o *owner) copyFinal(cur *tconf) {
	c := o.c
	if c.cfg.Mode == Sync {
		return // (sync replicas apply the rounds in order: bit-identical)
	}
	for s := range c.shards {
		if !c.isPrimary(s) || !o.held.has(s) {
			continue
		}
		for _, h := range cur.owners[s][1:] {
			if m, ok := cur.member(h); ok && h != c.cfg.Self {
				o.addOwe(owe{to: h, member: m.ID, shard: s, conf: cur.ID})
			}
		}
	}
}

// setRows writes rows an owner sent into the read copy (full gather),
// except rows of shards this peer holds: its own values are the truth.
func (o *owner) setRows(rows *model.Sparse) {
	c := o.c
	w := c.width
	for i, k := range rows.Idx {
		if s := c.shardOf(k); o.held.has(s) && o.needed(s) {
			continue
		}
		copy(c.m.Row(k), rows.Val[i*w:(i+1)*w])
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
