package train

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

// ckptPending is a checkpoint whose shards are being exported here.
type ckptPending struct {
	config uint64
	shards map[int][]byte
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
	o.ckptDone = r
	for k := range o.ckpt {
		if k <= r {
			delete(o.ckpt, k)
		}
	}
	t := c.cs.at(r)
	c.rd.Checkpoints = append(c.rd.Checkpoints, CheckpointReq{
		Round: r, Config: p.config, Shards: p.shards, Members: t.peers(),
		Worker: t.isMember(c.cfg.Self, c.cfg.ID),
	})
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
