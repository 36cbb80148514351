package sgd

import (
	"context"
	"errors"
	"fmt"

	"github.com/gossiptrain/gossiptrain/gossip"
	"math"
	"slices"
	"time"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// The owner half of the loop: gradients in, optimizer steps, parameters
// out. In sync mode an owner applies round r once every worker of the
// round's configuration has sent its round-r gradient (or has finished, or
// was removed as crashed), summing in worker order. In ssp and async modes
// it applies every gradient on arrival and publishes what changed every
// Flush.

// ownsAny reports whether this peer owns shards in the current configuration.
func (d *Dist) ownsAny() bool {
	cur := d.cs.cur()
	if cur == nil {
		return false
	}
	_, ok := cur.ownerIdx[d.cfg.Self]
	return ok
}

// onParams applies an owner's new values to the read copy and records its
// progress. Clocks in an Ack are counts: Through = n says rounds 0..n-1 of
// the sender's shards are complete, Applied = n that the worker's clocks
// 0..n-1 are applied; Done says everything is.
func (d *Dist) onParams(e *event) {
	if e.config.ID > 0 {
		d.learnConfig(e.config)
	}
	if d.cs.cur() == nil {
		return // not started yet: the snapshot will carry these values
	}
	// The shards the sender answers for at that point.
	var newer bool
	T := e.through
	for s := range d.shardThrough {
		var p string
		if T == Done {
			p = d.cs.cur().primaryOf[s]
		} else if T > 0 {
			p = d.cs.primaryFor(T-1, s)
		}
		if p != e.from {
			continue
		}
		if T > d.shardThrough[s] {
			d.shardThrough[s] = T
			newer = true
		}
	}
	// Sync: a message of a round the copy already has (sent before a
	// joiner's snapshot was taken) is skipped. SSP and async: every message
	// holds the owner's latest values of its rows, in order, so all apply,
	// except rows that a later configuration's owner has already sent.
	switch {
	case e.from == d.cfg.Self || e.rows.Len() == 0:
	case d.cfg.Mode == Sync:
		if newer || e.force || T == 0 {
			d.m.SetRows(&e.rows)
		}
	default:
		d.m.SetRows(d.unsuperseded(e))
	}
	for _, a := range e.applied {
		if a.Worker == d.cfg.Self && a.Clock > d.acked[e.from] {
			d.acked[e.from] = a.Clock
		}
	}
}

// unsuperseded returns the rows of params message e that no newer
// configuration's owner has sent yet, and records e's configuration for
// their shards. Messages of one sender arrive in order, but two senders'
// do not: when a shard changes hands (join, leave, handoff), the previous
// owner's last values can arrive after the new owner's, which already
// include them (the new owner starts from the handed-over state). Without
// this, a peer that got them in that order would keep the stale values,
// and the peers would end with different models.
func (d *Dist) unsuperseded(e *event) *model.Sparse {
	c := e.config.ID
	if c == 0 {
		return &e.rows
	}
	// One pass; rows are copied to d.keep only once one is skipped.
	w, copied := d.width, false
	for i, k := range e.rows.Idx {
		s := k & d.mask
		if d.shardConfig[s] > c {
			if !copied {
				d.keep.Reset()
				d.keep.Idx = append(d.keep.Idx, e.rows.Idx[:i]...)
				d.keep.Val = append(d.keep.Val, e.rows.Val[:i*w]...)
				copied = true
			}
			d.dsum.Superseded++
			continue
		}
		d.shardConfig[s] = c
		if copied {
			d.keep.Append(k, e.rows.Val[i*w:(i+1)*w])
		}
	}
	if !copied {
		return &e.rows
	}
	return &d.keep
}

// onGrad takes a worker's gradient for this owner's shards.
func (d *Dist) onGrad(e *event) {
	if d.cs.cur() == nil {
		d.in.recycle(e)
		return
	}
	if d.cfg.Mode == Sync {
		if e.clock < d.nextApply {
			d.in.recycle(e) // a round already applied (a removed worker's late message)
			return
		}
		r := d.rounds[e.clock]
		if r == nil {
			r = &round{grads: map[string]*event{}}
			d.rounds[e.clock] = r
		}
		if old := r.grads[e.from]; old != nil {
			d.in.recycle(old)
		}
		r.grads[e.from] = e
		if e.examples == 0 {
			d.markDone(e.from, e.clock)
		}
		return
	}
	if e.examples > 0 && e.rows.Len() > 0 {
		d.applyAsync(e)
	}
	if e.examples == 0 {
		d.markDone(e.from, e.clock)
	}
	if e.clock+1 > d.appliedW[e.from] {
		d.appliedW[e.from] = e.clock + 1 // a count of clocks
		d.ackDue = true
	}
	d.in.recycle(e)
}

// appliedMin is the through count an async owner announces: the fewest
// clocks applied of any current worker not finished.
func (d *Dist) appliedMin() uint64 {
	through := uint64(math.MaxUint64)
	for _, w := range d.cs.cur().members {
		if _, ok := d.doneAt[w]; !ok {
			through = min(through, d.appliedW[w])
		}
	}
	return through
}

// splitByRole splits g into d.primRows (shards primary(s) says this peer
// is primary of) and d.replRows (shards cfg gives it as a replica),
// placing each shard's state accordingly.
func (d *Dist) splitByRole(g *model.Sparse, primary func(s int) bool, cfg *tconfig) {
	d.primRows.Reset()
	d.replRows.Reset()
	w := d.width
	last, lastRole := -1, 0 // 1 primary, 2 replica, 0 neither
	for i, k := range g.Idx {
		s := int(k & d.mask)
		if s != last {
			last, lastRole = s, 0
			switch {
			case !d.owned(s):
			case primary(s):
				d.place(s, true)
				lastRole = 1
			case cfg.owns(d.cfg.Self, s):
				d.place(s, false)
				lastRole = 2
			}
		}
		switch lastRole {
		case 1:
			d.primRows.Append(k, g.Val[i*w:(i+1)*w])
		case 2:
			d.replRows.Append(k, g.Val[i*w:(i+1)*w])
		}
	}
}

// applyAsync applies an ssp/async gradient: rows of owned shards now, rows
// of shards waiting for their state later, rows of shards handed off to
// their new owner.
func (d *Dist) applyAsync(e *event) {
	d.sum.Reset()
	w := d.width
	var fwd map[string]*model.Sparse
	for i, k := range e.rows.Idx {
		s := int(k & d.mask)
		row := e.rows.Val[i*w : (i+1)*w]
		switch {
		case d.pending[s] != nil:
			b := d.in.get()
			b.kind, b.from, b.clock, b.examples = evGrad, e.from, e.clock, e.examples
			b.rows.Append(k, row)
			d.buffered[s] = append(d.buffered[s], b)
		case d.owned(s):
			d.sum.Append(k, row)
		case len(d.forward[s]) > 0:
			if fwd == nil {
				fwd = map[string]*model.Sparse{}
			}
			for _, o := range d.forward[s] {
				if fwd[o] == nil {
					fwd[o] = &model.Sparse{}
				}
				fwd[o].Append(k, row)
			}
		}
	}
	if d.sum.Len() > 0 {
		cur := d.cs.cur()
		d.splitByRole(&d.sum, func(s int) bool { return cur.primaryOf[s] == d.cfg.Self }, cur)
		if d.primRows.Len() > 0 {
			d.m.Apply(&d.primRows, e.examples, d.ownerStep)
			d.markDirty(&d.primRows)
		}
		if d.replRows.Len() > 0 {
			d.shadow.Apply(&d.replRows, e.examples, d.ownerStep)
		}
		d.ownerStep++
		d.dsum.Applied++
	}
	for o, rows := range fwd {
		// Forwarded as this peer's own message: the examples count scales
		// the rows exactly as the original message would have.
		if err := d.sendTo(o, d.clock, d.cs.cur().id, e.examples, rows); err != nil {
			d.log.Warn().Err(err).Str("to", o).Msg("forwarding gradient rows of a handed-off shard")
		}
	}
}

// markDirty records rows to publish at the next flush: those of shards
// this peer is primary of.
func (d *Dist) markDirty(g *model.Sparse) {
	cur := d.cs.cur()
	for _, k := range g.Idx {
		if cur.primaryOf[k&d.mask] == d.cfg.Self {
			d.dirtyRow(k)
		}
	}
}

// dirtyRow adds row k to the dirty set, once.
func (d *Dist) dirtyRow(k uint32) {
	if w, b := k/64, uint64(1)<<(k%64); d.dirtyMark[w]&b == 0 {
		d.dirtyMark[w] |= b
		d.dirty = append(d.dirty, k)
	}
}

// markShardDirty records every row of shard s (this peer's as primary) to
// publish at the next flush.
func (d *Dist) markShardDirty(s int) {
	l := &d.m.Layout
	for slot := 0; slot < l.PerShard; slot++ {
		k := l.Feature(s, slot)
		if !l.Valid(k) {
			return // padding from here on
		}
		d.dirtyRow(k)
	}
}

// markDone records that worker w has no more data from clock c on.
func (d *Dist) markDone(w string, c uint64) {
	if old, ok := d.doneAt[w]; !ok || c < old {
		d.doneAt[w] = c
	}
}

// ownerWork applies ready sync rounds or flushes, and promotes shards
// whose handoff timed out.
func (d *Dist) ownerWork() error {
	if d.cs.cur() == nil {
		return nil
	}
	for s, h := range d.pending {
		if h.asked && time.Since(h.started) > d.cfg.HandoffTimeout {
			d.log.Warn().Int("shard", s).Str("from", short(h.from)).Msg("handoff timed out: promoting from the read copy")
			d.promote(s, false)
		}
	}
	if d.cfg.Mode == Sync {
		return d.applyReady()
	}
	if time.Since(d.lastFlush) >= d.cfg.Flush {
		return d.flush()
	}
	return nil
}

// applyReady applies, in round order, every sync round whose contributions
// are all in, and publishes each round's new values.
func (d *Dist) applyReady() error {
	for {
		c := d.nextApply
		cfg := d.cs.at(c)
		if _, owner := cfg.ownerIdx[d.cfg.Self]; !owner {
			return nil // a worker only in this round's configuration
		}
		for _, h := range d.pending {
			if h.round <= c {
				return nil // a shard of this round waits for its state
			}
		}
		r := d.rounds[c]
		complete, live := true, 0
		entries := 0
		for _, w := range cfg.members {
			if dc, ok := d.doneAt[w]; ok && dc <= c {
				if e := r.grad(w); e != nil && dc == c {
					if e.examples > 0 {
						live++ // crashed after sending its gradient of this round
					} else {
						entries++ // its "done" marker: no examples
					}
				}
				continue // finished (or crashed) before or at this round
			}
			live++
			if r == nil || r.grads[w] == nil {
				complete = false
			}
		}
		if live+entries == 0 || d.allDone(cfg, c) {
			return d.publishFinal()
		}
		if !complete {
			return nil
		}
		d.live = live
		if err := d.applyRound(c, cfg, r); err != nil {
			return err
		}
		delete(d.rounds, c)
		d.nextApply++
	}
}

// allDone reports whether every worker of cfg has finished by round c and
// no later configuration adds workers.
func (d *Dist) allDone(cfg *tconfig, c uint64) bool {
	cur := d.cs.cur()
	if cur.start > c && cur != cfg {
		return false
	}
	for _, w := range cur.members {
		if dc, ok := d.doneAt[w]; !ok || dc > c {
			return false
		}
	}
	return true
}

// applyRound sums round c's contributions in worker order, applies them
// and publishes the changed rows of the shards this peer answers for.
func (d *Dist) applyRound(c uint64, cfg *tconfig, r *round) error {
	d.sum.Reset()
	n := 0
	d.applied = 0
	for _, w := range cfg.members {
		e := r.grads[w]
		if e == nil {
			continue
		}
		if e.examples > 0 {
			n += e.examples
			d.applied++
			addSparse(&d.tmp, &d.sum, &e.rows, d.width)
			d.sum, d.tmp = d.tmp, d.sum
		}
	}
	for _, e := range r.grads {
		d.in.recycle(e)
	}
	if d.applied < len(cfg.members) {
		d.dsum.RoundsDegraded++
	}
	// Rows go to the read copy for the shards this peer is primary of in
	// round c, to the shadow for its replica shards; rows of shards not
	// owned here (misrouted: never in a correct run) are dropped rather
	// than applied twice.
	d.splitByRole(&d.sum, func(s int) bool { return d.cs.primaryFor(c, s) == d.cfg.Self }, cfg)
	if n > 0 {
		if d.primRows.Len() > 0 {
			d.m.Apply(&d.primRows, n, int64(c))
		}
		if d.replRows.Len() > 0 {
			d.shadow.Apply(&d.replRows, n, int64(c))
		}
		d.dsum.Applied += int64(d.applied)
	}
	d.out.Reset()
	for _, k := range d.primRows.Idx {
		d.out.Append(k, d.m.Row(k))
	}
	if !d.publishesFor(c) {
		return nil
	}
	return d.publish(c, c+1, false)
}

// publishesFor reports whether this peer is responsible for some shard's
// values of round c.
func (d *Dist) publishesFor(c uint64) bool {
	for s := range d.shardThrough {
		if d.cs.primaryFor(c, s) == d.cfg.Self {
			return true
		}
	}
	return false
}

// publish sends d.out as this owner's values with through (a count of
// complete rounds), the current configuration and checkpoint round.
func (d *Dist) publish(clock, through uint64, force bool) error {
	d.ack.Through = through
	d.ack.Force = force
	cfg := d.cs.cur().wire()
	cfg.Checkpoint = d.ckptRound
	d.ack.Config = cfg
	if d.cfg.Mode == Sync {
		d.ack.Applied = d.ack.Applied[:0]
	}
	// A receiver that has gone (or not yet subscribed) gets its copy by
	// repair; the loop does not wait for it longer than StallAfter.
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.StallAfter)
	defer cancel()
	if err := d.net.SendParams(ctx, clock, d.cs.cur().id, &d.ack, &d.out); err != nil {
		if !errors.Is(err, gossip.ErrUnpublished) {
			return fmt.Errorf("round %d: publishing parameters: %w", clock, err)
		}
		d.dsum.Unpublished++ // sequenced and buffered: the receivers repair it
	}
	d.dsum.Published++
	return nil
}

// announce publishes the current configuration with no rows and this
// owner's progress unchanged, so every peer learns it now.
func (d *Dist) announce() error {
	d.out.Reset()
	through := d.nextApply
	if d.cfg.Mode != Sync {
		through = d.lastAck
		d.fillApplied()
	}
	if d.lastAck == Done {
		through = Done
	}
	return d.publish(d.clock, through, false)
}

// publishFinal announces that every contribution is applied (through =
// Done), with any rows not yet published.
func (d *Dist) publishFinal() error {
	if d.lastAck == Done {
		return nil
	}
	d.lastAck = Done
	d.finalSent = true
	if !d.publishesFor(d.nextApply) && d.cfg.Mode == Sync {
		return nil
	}
	if d.cfg.Mode != Sync {
		d.gatherDirty()
	} else {
		d.out.Reset()
	}
	d.ack.Applied = d.ack.Applied[:0]
	for _, w := range d.cs.cur().members {
		d.ack.Applied = append(d.ack.Applied, wire.WorkerClock{Worker: w, Clock: Done})
	}
	return d.publish(d.nextApply, Done, false)
}

// fillApplied sets the Ack's per-worker applied clocks (ssp/async): of
// the current workers and of every worker that sent gradients here (a
// leaver waits for these acknowledgements to reach its last round).
func (d *Dist) fillApplied() {
	d.ack.Applied = d.ack.Applied[:0]
	ws := slices.Clone(d.cs.cur().members)
	for w := range d.appliedW {
		if !slices.Contains(ws, w) {
			ws = append(ws, w)
		}
	}
	slices.Sort(ws)
	for _, w := range ws {
		c := d.appliedW[w]
		if _, ok := d.doneAt[w]; ok {
			c = Done
		}
		d.ack.Applied = append(d.ack.Applied, wire.WorkerClock{Worker: w, Clock: c})
	}
}

// flush publishes an async/SSP owner's changed rows and progress.
func (d *Dist) flush() error {
	d.lastFlush = time.Now()
	if (!d.ownsAny() && len(d.appliedW) == 0) || d.lastAck == Done {
		return nil
	}
	// through counts the clocks every live worker's contributions are in for.
	through := uint64(math.MaxUint64)
	allDone := true
	for _, w := range d.cs.cur().members {
		if _, ok := d.doneAt[w]; ok {
			continue
		}
		allDone = false
		through = min(through, d.appliedW[w])
	}
	if allDone {
		return d.publishFinal()
	}
	if len(d.dirty) == 0 && through == d.lastAck && !d.ackDue {
		return nil
	}
	d.ackDue = false
	d.gatherDirty()
	d.fillApplied()
	d.lastAck = through
	return d.publish(d.clock, through, false)
}

// gatherDirty fills d.out with the current values of the dirty rows and
// clears the dirty set. Rows of shards this peer is no longer primary of
// (handed to a joiner or, when leaving, to the next owner since they were
// marked) are dropped: their new owner publishes them, under the same
// configuration number, and two owners' values of one row in one
// configuration could reach peers in either order.
func (d *Dist) gatherDirty() {
	slices.Sort(d.dirty)
	d.out.Reset()
	cur := d.cs.cur()
	for _, k := range d.dirty {
		if cur.primaryOf[k&d.mask] == d.cfg.Self {
			d.out.Append(k, d.m.Row(k))
		}
		d.dirtyMark[k/64] &^= 1 << (k % 64)
	}
	d.dirty = d.dirty[:0]
}

// addSparse sets dst = a + b (rows merged by index; values of common rows
// added as a[i] + b[i], in that order, so the result depends only on the
// order of the calls).
func addSparse(dst, a, b *model.Sparse, w int) {
	dst.Reset()
	i, j := 0, 0
	for i < len(a.Idx) || j < len(b.Idx) {
		switch {
		case j >= len(b.Idx) || (i < len(a.Idx) && a.Idx[i] < b.Idx[j]):
			dst.Append(a.Idx[i], a.Val[i*w:(i+1)*w])
			i++
		case i >= len(a.Idx) || b.Idx[j] < a.Idx[i]:
			dst.Append(b.Idx[j], b.Val[j*w:(j+1)*w])
			j++
		default:
			dst.Idx = append(dst.Idx, a.Idx[i])
			for c := 0; c < w; c++ {
				dst.Val = append(dst.Val, a.Val[i*w+c]+b.Val[j*w+c])
			}
			i++
			j++
		}
	}
}
