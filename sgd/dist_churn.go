package sgd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// Membership changes (docs/protocol.md, "Membership changes").
//
// The coordinator is the smallest live primary of the current
// configuration (the smallest live member if no primary is alive). It
// alone proposes configurations: joiners that asked to join, leavers that
// asked to leave, and members the membership declares dead, removed only
// while a majority of the configuration is alive (a partition's minority
// waits instead of training on its own). A new configuration starts at
// round nextApply+1 of the coordinator: every worker must see the
// coordinator's params of round nextApply before computing round
// nextApply+1, and they come after the announcement, so in sync mode every
// worker switches at the same round. In ssp and async modes workers switch
// when they learn it and owners forward late rows.

// coordinator returns the peer that proposes configuration changes.
func (d *Dist) coordinator() string {
	cur := d.cs.cur()
	if cur == nil {
		return ""
	}
	for _, p := range cur.primaries() {
		if d.alive[p] && !d.cs.crashed[p] {
			return p
		}
	}
	for _, p := range cur.members {
		if d.alive[p] {
			return p
		}
	}
	return ""
}

// updateParamsPeers publishes params to the live workers of the current
// configuration and the live peers that just left it gracefully. A peer
// the membership considers dead is left out, so publishing never waits for
// a subscriber that is gone; if it comes back (a partition heals), the
// gap in its params streams is repaired from the retransmit buffers.
func (d *Dist) updateParamsPeers() {
	cur := d.cs.cur()
	if cur == nil {
		return
	}
	var peers []string
	for _, p := range append(slices.Clone(cur.members), d.leavers...) {
		if d.alive[p] || p == d.cfg.Self {
			peers = append(peers, p)
		}
	}
	d.net.SetParamsPeers(peers)
}

// onAlive takes the membership's live set.
func (d *Dist) onAlive(members []string) {
	clear(d.alive)
	for _, p := range members {
		d.alive[p] = true
	}
	d.alive[d.cfg.Self] = true
	d.updateParamsPeers()
	// A joiner or leaver that vanished is forgotten.
	for p := range d.pendingJoin {
		if !d.alive[p] {
			delete(d.pendingJoin, p)
		}
	}
}

// coordinate proposes a new configuration when this peer coordinates and
// something changed; it also schedules checkpoints.
func (d *Dist) coordinate() {
	cur := d.cs.cur()
	if cur == nil || d.coordinator() != d.cfg.Self || d.lastAck == Done || d.finished {
		return // (a finished job: peers exiting are not crashes)
	}
	if d.cfg.Checkpoint.Every > 0 && time.Now().After(d.nextCkptAt) {
		d.nextCkptAt = time.Now().Add(d.cfg.Checkpoint.Every)
		if d.nextApply+1 > d.ckptRound {
			d.ckptRound = d.nextApply + 1
			if err := d.announce(); err != nil {
				d.log.Warn().Err(err).Msg("announcing a checkpoint")
			}
		}
	}
	// One change at a time: the last one must have started here.
	started := d.nextApply >= cur.start
	if d.cfg.Mode != Sync {
		started = d.clock >= cur.start || d.done
	}
	if !started {
		return
	}
	var join, leave, dead []string
	for p := range d.pendingJoin {
		if !cur.isMember(p) {
			join = append(join, p)
		}
	}
	for p := range d.pendingLeave {
		if cur.isMember(p) {
			leave = append(leave, p)
		}
	}
	liveMembers := 0
	for _, p := range cur.members {
		if d.alive[p] {
			liveMembers++
		} else if !slices.Contains(leave, p) {
			dead = append(dead, p)
		}
	}
	if len(dead) > 0 && 2*liveMembers <= len(cur.members) {
		if len(join)+len(leave) == 0 {
			return // no majority: wait for the partition to heal
		}
		dead = nil
	}
	if len(join)+len(leave)+len(dead) == 0 {
		return
	}
	members := slices.Clone(cur.members)
	members = slices.DeleteFunc(members, func(p string) bool { return slices.Contains(leave, p) || slices.Contains(dead, p) })
	members = append(members, join...)
	slices.Sort(members)
	members = slices.Compact(members)
	if len(members) == 0 {
		return
	}
	slices.Sort(dead)
	next := wire.TrainConfig{ID: cur.id + 1, Start: max(d.nextApply, d.clock) + 1, Members: members, Crashed: dead}
	if !d.ownsAny() {
		next.Start = d.clock + 1
	}
	for _, p := range join {
		delete(d.pendingJoin, p)
	}
	for _, p := range leave {
		delete(d.pendingLeave, p)
	}
	d.log.Info().Uint64("config", next.ID).Uint64("start", next.Start).Int("members", len(members)).
		Strs("join", shorts(join)).Strs("leave", shorts(leave)).Strs("dead", shorts(dead)).Msg("new training configuration")
	d.learnConfig(next)
	if err := d.announce(); err != nil {
		d.log.Warn().Err(err).Msg("announcing the configuration")
	}
}

// learnConfig records a configuration learnt from a params message, a
// control reply or this peer's own proposal, and acts on it.
func (d *Dist) learnConfig(c wire.TrainConfig) {
	if c.Checkpoint > d.ckptRound {
		d.ckptRound = c.Checkpoint
	}
	if cur := d.cs.cur(); cur != nil && c.ID <= cur.id {
		return
	}
	r, err := d.cfg.RingFor(c.Members)
	if err != nil {
		d.log.Error().Err(err).Uint64("config", c.ID).Msg("cannot build the ring of a configuration")
		return
	}
	t, err := newTConfig(c, r, d.m.Layout.Shards)
	if err != nil {
		d.log.Error().Err(err).Msg("bad configuration")
		return
	}
	prev := d.cs.cur()
	d.cs.add(t)
	d.applyConfig(prev, t)
}

// applyConfig acts on a new configuration t following prev (nil for the
// first one).
func (d *Dist) applyConfig(prev, t *tconfig) {
	self := d.cfg.Self
	// Params go to the new workers and, for one more round, to those who
	// leave gracefully (so their last values are confirmed).
	d.leavers = d.leavers[:0]
	for _, p := range t.members {
		if prev == nil || !prev.isMember(p) {
			d.alive[p] = true // the coordinator admitted it; the membership confirms later
		}
	}
	if prev != nil {
		for _, p := range prev.members {
			if !t.isMember(p) && !slices.Contains(t.crashed, p) {
				d.leavers = append(d.leavers, p)
			}
		}
	}
	d.updateParamsPeers()
	for _, p := range t.crashed {
		d.alive[p] = false
		if d.cfg.Mode == Sync {
			d.markDone(p, d.nextApply)
		} else {
			d.markDone(p, d.appliedW[p])
		}
	}
	if prev == nil {
		// The first configuration: owned shards start fresh (or from a
		// checkpoint, loaded before).
		for s := range d.shardThrough {
			if t.owns(self, s) && !d.owned(s) {
				d.own(s, t.primaryOf[s] == self)
			}
		}
	} else {
		d.transfer(prev, t)
	}
	var joined, left []string
	if prev != nil {
		for _, p := range t.members {
			if !prev.isMember(p) {
				joined = append(joined, p)
				if p != self {
					d.forgetPeer(p)
				}
			}
		}
		for _, p := range prev.members {
			if !t.isMember(p) {
				left = append(left, p)
			}
		}
		if prev.isMember(self) && !t.isMember(self) {
			if d.leaving {
				d.leaveStart = t.start
			} else {
				// Removed while alive (a partition's minority that the
				// majority declared dead): this copy is stale and no
				// longer receives values; the driver joins again.
				d.log.Warn().Uint64("config", t.id).Msg("removed from the training configuration while alive")
				d.joined = false
				d.err = ErrRemoved
			}
		}
	}
	if d.done {
		// Owners new to this configuration have not heard that this
		// worker finished.
		if err := d.sendDone(); err != nil {
			d.log.Warn().Err(err).Msg("telling new owners this worker is done")
		}
	}
	if d.h.Change != nil {
		d.h.Change(ChangePoint{Config: t.id, Start: t.start, Members: t.members, Crashed: t.crashed,
			Joined: joined, Left: left, Owned: len(t.ring.Owned(self))})
	}
}

// transfer works out which shards this peer gains and loses between prev
// and t: gained shards are asked from their previous owner (or promoted
// from the read copy when it crashed), shards of a crashed primary that
// this peer held as a replica are republished.
func (d *Dist) transfer(prev, t *tconfig) {
	self := d.cfg.Self
	if _, was := prev.ownerIdx[self]; !was {
		if _, is := t.ownerIdx[self]; is && d.cfg.Mode == Sync {
			d.nextApply = max(d.nextApply, t.start)
		}
	}
	for s := range d.shardThrough {
		if !t.owns(self, s) {
			if prev.owns(self, s) && d.cfg.Mode != Sync {
				// Async: rows for it that still arrive go to its new owners.
				d.forward[s] = slices.Clone(t.ring.Owners(s))
			}
			continue
		}
		if prev.owns(self, s) {
			if d.cs.crashed[prev.primaryOf[s]] && t.primaryOf[s] == self && prev.primaryOf[s] != self {
				// Promoted from replica: the state is here, and the crashed
				// primary's last values may not have reached everyone.
				d.place(s, true)
				d.log.Info().Int("shard", s).Msg("promoted a replica shard of a crashed owner")
				d.toRepublish = append(d.toRepublish, s)
			}
			continue
		}
		// Gained: find a live previous owner to hand it over.
		from := ""
		for _, o := range prev.ring.Owners(s) {
			if d.alive[o] && !d.cs.crashed[o] && o != self {
				from = o
				break
			}
		}
		if from == "" {
			d.promote(s, true)
			continue
		}
		round := t.start
		if d.cfg.Mode != Sync {
			round = 0
		}
		d.pending[s] = &handoff{from: from, round: round}
	}
	d.requestHandoffs()
	d.republishDense()
}

// promote makes this peer own shard s with fresh optimizer state and the
// read copy's weights (the previous owner crashed or never answered).
// With dense, the shard's rows are republished so every copy agrees.
func (d *Dist) promote(s int, dense bool) {
	delete(d.pending, s)
	d.own(s, d.cs.cur().primaryOf[s] == d.cfg.Self)
	d.dsum.Promoted++
	for _, b := range d.buffered[s] {
		d.applyAsync(b)
		d.in.recycle(b)
	}
	delete(d.buffered, s)
	if dense && d.cs.cur().primaryOf[s] == d.cfg.Self {
		d.toRepublish = append(d.toRepublish, s)
	}
}

// republishDense publishes every row of the shards promoted since the
// last call (d.toRepublish), in one message (split by size), so every copy
// takes this peer's values for shards whose owner crashed.
func (d *Dist) republishDense() {
	if len(d.toRepublish) == 0 {
		return
	}
	slices.Sort(d.toRepublish)
	d.out.Reset()
	l := &d.m.Layout
	// Rows in ascending feature order: slot-major across the shards.
	for slot := 0; slot < l.PerShard; slot++ {
		for _, s := range d.toRepublish {
			if k := l.Feature(s, slot); l.Valid(k) {
				d.out.Append(k, d.m.Row(k))
			}
		}
	}
	shards := len(d.toRepublish)
	d.toRepublish = d.toRepublish[:0]
	through := d.nextApply
	if d.cfg.Mode != Sync {
		through = d.lastAck
	}
	if err := d.publish(d.clock, through, true); err != nil {
		d.log.Warn().Err(err).Int("shards", shards).Msg("republishing promoted shards")
	}
}

// onLeaveRequest starts a graceful leave of this peer.
func (d *Dist) onLeaveRequest() {
	if d.leaving {
		return
	}
	d.leaving = true
	d.leftAt = time.Now()
	cur := d.cs.cur()
	if cur == nil || !cur.isMember(d.cfg.Self) {
		d.leaveStart = d.clock // not training yet: nothing to hand over
		return
	}
	if len(cur.members) == 1 {
		d.leaveStart = d.clock
		return
	}
	d.log.Info().Msg("leaving: asking the coordinator for a configuration without this peer")
	if d.coordinator() == d.cfg.Self {
		d.pendingLeave[d.cfg.Self] = true
		return
	}
	go d.askLeave()
}

// completeLeave runs after this peer stopped working: it keeps serving
// until the shards it owned are handed over and its last values are out.
func (d *Dist) completeLeave() error {
	deadline := time.Now().Add(d.cfg.HandoffTimeout)
	_, err := d.waitUntil(func() bool {
		if time.Now().After(deadline) {
			return true
		}
		if d.cfg.Mode != Sync {
			// Every remaining worker has sent this peer all it routed here
			// before switching (this peer forwards what belongs to the new
			// owners), and has seen our acknowledgements of them.
			for _, w := range d.cs.cur().members {
				if _, done := d.doneAt[w]; !done && d.appliedW[w] < d.leaveStart {
					return false
				}
			}
			return d.lastAck == d.appliedMin()
		}
		// Our last round applied and published, and the next round done
		// by the others (so our values reached them).
		if d.ownsAny() && d.nextApply < d.leaveStart {
			return false
		}
		return slices.Min(d.shardThrough) > d.leaveStart || len(d.cs.cur().members) == 0
	})
	if err != nil {
		return err
	}
	d.log.Info().Dur("took", time.Since(d.leftAt)).Msg("left the training job")
	return ErrLeft
}

func shorts(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = short(id)
	}
	return out
}

// onGone handles a sync stream stalled on messages its sender no longer
// has. Usually that is fatal: the run cannot stay consistent. But a peer
// cut off in a partition's minority sees exactly this when the partition
// heals (the majority trained on without it), before the messages that
// would tell it so, which are held behind the hole. So it first asks the
// sender for its configuration (once per sender, off the loop).
func (d *Dist) onGone(err error) {
	fatal := fmt.Errorf("a lost message cannot be repaired, the run cannot stay consistent: %w", err)
	var ge *gossip.GoneError
	if !errors.As(err, &ge) {
		if d.err == nil {
			d.err = fatal
		}
		return
	}
	if d.goneAsked[ge.From] {
		return // asked already; the answer decides
	}
	if d.goneAsked == nil {
		d.goneAsked = map[string]bool{}
	}
	d.goneAsked[ge.From] = true
	go func() {
		ctx, cancel := context.WithTimeout(d.ctx, 5*time.Second)
		defer cancel()
		rep, _, rerr := d.request(ctx, ge.From, wire.Control{Op: wire.OpStatus}, 1<<20)
		e := d.in.get()
		e.kind, e.from, e.err = evGone, ge.From, fatal
		e.config = wire.TrainConfig{}
		if rerr == nil {
			e.config = rep.Config
		}
		d.in.put(e)
	}()
}

// onGoneStatus decides on a stalled stream from its sender's status: a
// newer configuration without this peer means it was removed (ErrRemoved:
// the driver joins again); anything else is the fatal error.
func (d *Dist) onGoneStatus(e *event) {
	if d.err != nil {
		return
	}
	cur := d.cs.cur()
	if e.config.ID > 0 && (cur == nil || e.config.ID > cur.id) && !slices.Contains(e.config.Members, d.cfg.Self) {
		d.log.Warn().Str("from", short(e.from)).Uint64("config", e.config.ID).
			Msg("removed from the training configuration while cut off: joining again")
		d.joined = false
		d.err = ErrRemoved
		return
	}
	d.err = e.err
}

// forgetPeer drops what this peer knew of p from before p (re)joined: a
// peer removed while it was cut off comes back under the same ID as a new
// worker and owner, with a new Exchange (its streams start again), from
// the configuration's start round.
func (d *Dist) forgetPeer(p string) {
	d.net.ResetPeer(p)
	delete(d.doneAt, p)
	delete(d.appliedW, p)
	delete(d.firstTo, p)
	delete(d.acked, p)
	delete(d.lastParams, p)
	delete(d.goneAsked, p)
}
