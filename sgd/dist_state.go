package sgd

import (
	"github.com/gossiptrain/gossiptrain/model"
)

// Where an owner keeps its shards' optimizer state.
//
// A primary applies gradients to the read copy (Model.W) and publishes the
// new values. A replica (a secondary owner, --replicas 2) receives the same
// gradients and applies them too, so its optimizer state survives its
// primary's crash; but it must not apply them to the read copy, which
// follows the primary's published values: a round's params may arrive
// before the replica applies that round, and applying on top would count
// the round twice. So a replica applies to a shadow model, a second copy
// of the weights used only for its replica shards. When a replica becomes
// primary its shadow rows become the read copy's (and are republished when
// the old primary crashed, so every copy agrees). The shadow costs one more
// copy of the weights, allocated only on peers that hold replicas.

// holder returns the model holding shard s's state (nil: neither).
func (d *Dist) holder(s int) *model.Model {
	switch {
	case d.m.Owns(s):
		return d.m
	case d.shadow != nil && d.shadow.Owns(s):
		return d.shadow
	}
	return nil
}

// owned reports whether this peer holds state for shard s.
func (d *Dist) owned(s int) bool { return d.holder(s) != nil }

// shadowModel returns the shadow model, creating it.
func (d *Dist) shadowModel() *model.Model {
	if d.shadow == nil {
		d.shadow = d.m.Clone()
		for s := range d.shadow.State {
			d.shadow.Disown(s)
		}
	}
	return d.shadow
}

// place moves shard s's state to where its role says: the read copy when
// primary, the shadow when replica. Moving to primary copies the shadow's
// weights of the shard into the read copy; moving to replica copies the
// read copy's into the shadow.
func (d *Dist) place(s int, primary bool) *model.Model {
	h := d.holder(s)
	switch {
	case h == nil:
		return nil
	case primary && h == d.shadow:
		d.m.LoadShard(s, d.shadow.ShardBytes(s, true))
		d.shadow.Disown(s)
		return d.m
	case !primary && h == d.m:
		d.shadowModel().LoadShard(s, d.m.ShardBytes(s, true))
		d.m.Disown(s)
		return d.shadow
	}
	return h
}

// own gives this peer fresh state for shard s in the role given.
func (d *Dist) own(s int, primary bool) {
	if d.owned(s) {
		d.place(s, primary)
		return
	}
	if primary {
		d.m.Own(s)
	} else {
		sh := d.shadowModel()
		lo, hi := d.m.Layout.ShardRange(s)
		copy(sh.W[lo:hi], d.m.W[lo:hi])
		sh.Own(s)
	}
}
