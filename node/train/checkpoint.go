package train

import "github.com/gossiptrain/gossiptrain/gossip/wire"

// Checkpoints (sync mode; docs/protocol.md, "Checkpoints").
//
// The leader schedules one as a configuration: the same members, with
// Checkpoint set, starting at round R like any other configuration, so
// every peer learns it before any round R is applied. Each holder of a
// shard at round R exports the shard (weights and optimizer state) just
// before it applies round R to it, which is its state at the end of round
// R-1 on every holder alike; once it has exported every shard it holds at
// R, the core asks the driver to write them with Ready.Checkpoints, with
// Worker set when this peer is a worker of round R (the driver adds its
// data position before the batch of round R). A resumed run starts at R
// (Config.Start) from those exports: the rounds and the examples after it
// are the same as if nothing had stopped.

// ckptPending is a checkpoint whose parts are being taken here.
type ckptPending struct {
	config      uint64
	shards      map[int][]byte
	workerRound uint64 // ssp/async: the worker's cut
	workerDone  bool   // ssp/async: the worker's cut is taken (or it is no worker of it)
	shardsDone  bool   // ssp/async: the shards are exported
}

// maxCkptPending bounds the checkpoints being exported at once: one that
// cannot complete here (a shard that arrived already past its round) is
// dropped when newer ones come.
const maxCkptPending = 2

// ckptDue returns the configuration whose checkpoint is due at round r, or
// nil.
func (c *Core) ckptDue(r uint64) *tconf {
	if c.cfg.Mode != Sync {
		return nil
	}
	t := c.cs.at(r)
	if t == nil || !t.Checkpoint || t.Start != r {
		return nil
	}
	return t
}

// beforeApply exports the shards of ss that a checkpoint due at round r
// needs, before round r is applied to them.
func (o *owner) beforeApply(r uint64, ss []uint32) {
	c := o.c
	t := c.ckptDue(r)
	if t == nil || r <= o.ckptDone {
		return
	}
	p := o.ckpt[r]
	if p == nil {
		p = &ckptPending{config: t.ID, shards: map[int][]byte{}}
		o.ckpt[r] = p
		for len(o.ckpt) > maxCkptPending {
			delete(o.ckpt, minKey(o.ckpt))
		}
	}
	for _, s := range ss {
		if _, ok := p.shards[int(s)]; !ok && c.m.Owns(int(s)) {
			p.shards[int(s)] = c.m.AppendShard(nil, int(s), true)
		}
	}
	o.ckptMaybeDone(r)
}

// ckptMaybeDone hands the checkpoint of round r to the driver once every
// shard this peer holds at r is exported.
func (o *owner) ckptMaybeDone(r uint64) {
	c := o.c
	p := o.ckpt[r]
	if p == nil {
		return
	}
	for s := range c.shards {
		if _, ok := p.shards[s]; !ok && c.holdsAt(s, r) {
			return
		}
	}
	t := c.cs.at(r)
	o.ckptEmit(r, t, p, r)
}

// ckptEmit hands checkpoint r (of configuration t) to the driver.
func (o *owner) ckptEmit(r uint64, t *tconf, p *ckptPending, workerRound uint64) {
	c := o.c
	o.ckptDone = r
	for k := range o.ckpt {
		if k <= r {
			delete(o.ckpt, k)
		}
	}
	c.rd.Checkpoints = append(c.rd.Checkpoints, CheckpointReq{
		Round: r, Config: p.config, Shards: p.shards, Members: t.peers(),
		Worker: t.isMember(c.cfg.Self, c.cfg.ID), WorkerRound: workerRound,
	})
}

// pendingFor returns the pending checkpoint of configuration t (ssp/async),
// creating it.
func (o *owner) pendingFor(t *tconf) *ckptPending {
	p := o.ckpt[t.Start]
	if p == nil || p.config != t.ID {
		p = &ckptPending{config: t.ID, shards: map[int][]byte{}}
		o.ckpt[t.Start] = p
		for len(o.ckpt) > maxCkptPending {
			delete(o.ckpt, minKey(o.ckpt))
		}
		if !t.isMember(o.c.cfg.Self, o.c.cfg.ID) {
			p.workerDone = true
		}
	}
	return p
}

// ckptWorker records this worker's cut of checkpoint t (ssp/async).
func (o *owner) ckptWorker(t *tconf, cut uint64) {
	if t.Start <= o.ckptDone {
		return
	}
	p := o.pendingFor(t)
	p.workerRound, p.workerDone = cut, true
	o.ckptAsyncDone(t, p)
}

// ckptShards exports every shard this peer holds for checkpoint t
// (ssp/async: every live worker's cut is in).
func (o *owner) ckptShards(t *tconf) {
	c := o.c
	if t.Start <= o.ckptDone {
		return
	}
	p := o.pendingFor(t)
	for s := range c.shards {
		if o.held.has(s) && c.m.Owns(s) {
			p.shards[s] = c.m.AppendShard(nil, s, true)
		}
	}
	p.shardsDone = true
	o.ckptAsyncDone(t, p)
}

func (o *owner) ckptAsyncDone(t *tconf, p *ckptPending) {
	if p.workerDone && p.shardsDone {
		o.ckptEmit(t.Start, t, p, p.workerRound)
	}
}

// ckptConfig starts the checkpoint of configuration t at this peer when it
// holds no shard at its round (a worker only: its data position is still
// part of the checkpoint).
func (o *owner) ckptConfig(t *tconf) {
	c := o.c
	if c.ckptDue(t.Start) != t || t.Start <= o.ckptDone || o.ckpt[t.Start] != nil {
		return
	}
	for s := range c.shards {
		if c.holdsAt(s, t.Start) {
			return // its exports will complete it
		}
	}
	o.ckpt[t.Start] = &ckptPending{config: t.ID, shards: map[int][]byte{}}
	o.ckptMaybeDone(t.Start)
}

func minKey(m map[uint64]*ckptPending) uint64 {
	first := true
	var k0 uint64
	for k := range m {
		if first || k < k0 {
			k0, first = k, false
		}
	}
	return k0
}

// Checkpoints in ssp and async mode: a consistent cut by pausing.
//
// Owners apply each worker's contributions as they come, so no round
// boundary is a cut there. A configuration with Checkpoint set instead
// pauses every worker: once it has applied it, a worker computes nothing
// more, pushes what it had computed, and waits until every push is
// answered (applied and replicated). Its cut is then its clock, the first
// round it has not pushed; it sends it (CoreCut, Req: the configuration's
// ID, Round: its cut) to every member. An owner that has the cut of every
// live worker of the configuration holds exactly each worker's rounds
// before its cut: it exports the shards it holds and answers every cut
// (CoreCut with FlagReply). A worker goes on once every live member has
// answered, or when a newer configuration comes (a crash during the
// checkpoint: that checkpoint may be incomplete, and --resume passes over
// an incomplete one), or after 16 retry intervals. Resuming starts every
// worker at the configuration's start round, each at its own data
// position.

// cutState is a worker's part of an ssp/async checkpoint.
type cutState struct {
	t      *tconf
	round  uint64 // the cut, once sent (0 with sent false: not yet)
	sent   bool
	sentAt uint64
	since  uint64 // tick the pause began
	done   map[string]bool
}

// ownerCut is an owner's part: the cuts received.
type ownerCut struct {
	t        *tconf
	cuts     map[uint64]uint64 // member -> its cut
	exported bool
}

// cutConfig starts a paused checkpoint at a worker and owner of t
// (ssp/async).
func (c *Core) cutConfig(t *tconf) {
	if c.cfg.Mode == Sync || !t.Checkpoint || !c.joined {
		return
	}
	if t.isMember(c.cfg.Self, c.cfg.ID) && !c.w.final && !c.w.leave.leaving {
		c.w.cut = &cutState{t: t, since: c.tick, done: map[string]bool{}}
	}
	if c.o.async.cut == nil || c.o.async.cut.t.ID < t.ID {
		c.o.async.cut = &ownerCut{t: t, cuts: map[uint64]uint64{}}
	}
}

// paused reports whether the worker computes nothing new (an ssp/async
// checkpoint's cut is being taken).
func (w *worker) paused() bool { return w.cut != nil }

// cutWork sends the worker's cut once it is quiet, sends it again to the
// members that have not answered, and ends the pause. It reports whether
// anything happened.
func (w *worker) cutWork() bool {
	c := w.c
	k := w.cut
	if k == nil {
		return false
	}
	if cur := c.cs.cur(); cur.ID > k.t.ID || c.tick-k.since > uint64(16*c.cfg.RetryTicks) || w.final || w.leave.leaving {
		w.cut = nil // superseded, given up, or over
		return true
	}
	if !k.sent {
		if w.computing || w.stash != nil {
			return false // (what it computed goes before its cut)
		}
		k.sent, k.round = true, w.clock
		c.o.ckptWorker(k.t, w.clock)
	} else if c.tick-k.sentAt < uint64(c.cfg.RetryTicks) {
		return false
	}
	k.sentAt = c.tick
	waiting := false
	for _, m := range k.t.Members {
		if k.done[m.Peer] || !c.isAlive(m.ID) {
			continue
		}
		waiting = true
		c.send(m.Peer, &wire.Core{Op: wire.CoreCut, Req: k.t.ID, Round: k.round})
	}
	if !waiting {
		w.cut = nil
	}
	return true
}

// cutReply notes an owner's answer to this worker's cut.
func (w *worker) cutReply(from string, msg *wire.Core) {
	k := w.cut
	if k == nil || msg.Req != k.t.ID || !k.t.isMember(from, msg.Member) {
		return
	}
	k.done[from] = true
	for _, m := range k.t.Members {
		if !k.done[m.Peer] && w.c.isAlive(m.ID) {
			return
		}
	}
	w.cut = nil
}

// cutReceived records a worker's cut at this owner; with every live
// worker's, it exports the shards it holds and answers them all.
func (o *owner) cutReceived(from string, msg *wire.Core) {
	c := o.c
	k := o.async.cut
	if k == nil || msg.Req != k.t.ID {
		if k != nil && msg.Req < k.t.ID {
			c.stats.Stale++
		}
		return // not this checkpoint (one not applied yet: the worker sends again)
	}
	m, ok := k.t.member(from)
	if !ok || m.ID != msg.Member {
		c.stats.Rejected++
		return
	}
	k.cuts[m.ID] = msg.Round
	if k.exported {
		c.send(from, &wire.Core{Op: wire.CoreCut, Flags: wire.FlagReply, Req: k.t.ID})
		return
	}
	o.cutCheck()
}

// cutCheck exports the shards this peer holds once every live worker's cut
// is in and every round before it is applied to each of them (pushes and
// forwards may still be on their way when a cut comes: a worker sends its
// cut once everything before it is pushed, not answered, since an ssp
// answer waits for the other workers' progress, which the cut stops), and
// answers the cuts.
func (o *owner) cutCheck() bool {
	c := o.c
	k := o.async.cut
	if k == nil || k.exported {
		return false
	}
	if cur := c.cs.cur(); cur.ID > k.t.ID {
		o.async.cut = nil // a newer configuration came first: this one is abandoned
		return false
	}
	for _, w := range k.t.Members {
		cut, in := k.cuts[w.ID]
		if !in {
			if c.isAlive(w.ID) {
				return false
			}
			continue
		}
		for s := range c.shards {
			if o.held.has(s) && o.appliedOf(s, w.ID) < cut {
				return false
			}
		}
	}
	k.exported = true
	o.ckptShards(k.t)
	for _, w := range k.t.Members {
		if _, in := k.cuts[w.ID]; in {
			c.send(w.Peer, &wire.Core{Op: wire.CoreCut, Flags: wire.FlagReply, Req: k.t.ID})
		}
	}
	return true
}
