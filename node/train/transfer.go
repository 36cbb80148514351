package train

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// Configurations taking effect, and shards changing hands
// (docs/protocol.md, "Handoff").
//
// Sync: configuration j starts at round S. A shard's holders during round
// S-1 (its route and the replicas that follow it) keep it; a holder new in
// j gets it from the route of round S-1 once that peer has applied round
// S-1, pushed, not asked for: the sender knows when, the receiver does not.
// If the route crashes first, the configuration that removes it reroutes
// round S-1 to the replica it promotes, which then owes the shard instead.
// Ssp and async: the shard's primary in the previous configuration (or its
// first live replica) sends it at once, with every worker's applied
// rounds, and stops applying it; pushes for it get "moved". A new holder
// buffers what arrives for the shard until its state is in. A shard whose
// every possible holder crashed restarts from its initial values
// (promoted) and is counted: with --replicas 1 a crash loses the shards of
// the peer that crashed.

// applyConfig makes configuration t the newest.
func (c *Core) applyConfig(t *tconf) {
	if err := t.build(c.cfg.Place, c.shards); err != nil {
		c.fail(err)
		return
	}
	prev := c.cs.cur()
	// Where round Start-1 of each shard went before t: a crash in t moves
	// it to a promoted peer, which takes the shard over.
	// The rounds that may still be unapplied somewhere: from the one
	// before this worker's clock (sync workers are within one round of
	// each other) to Start-1.
	var oldRoute map[uint64][][]string
	if prev != nil && c.cfg.Mode == Sync && t.Start > 0 && len(t.Crashed) > 0 && c.joined {
		oldRoute = map[uint64][][]string{}
		lo := max(c.w.first, c.w.clock) - min(max(c.w.first, c.w.clock), 1)
		for r := range c.o.rounds {
			lo = min(lo, r) // contributions here to a round still open (a joiner's first round is not the run's)
		}
		for r := lo; r < t.Start; r++ {
			rs := make([][]string, c.shards)
			for s := range rs {
				rs[s] = c.holdersAt(s, r)
			}
			oldRoute[r] = rs
		}
	}
	c.cs.add(t)
	c.stats.ConfigChanges++
	self := c.cfg.Self
	isMember := t.isMember(self, c.cfg.ID)
	wasMember := prev != nil && prev.isMember(self, c.cfg.ID)
	if wasMember && !isMember {
		for _, m := range t.Crashed {
			if m.ID == c.cfg.ID {
				// Removed as dead while alive (it was cut off). Its work
				// is others' now; as a raft voter it still counts toward
				// the group's quorum, so it stays in the group until the
				// leader demotes it (Core.lingering), then fails.
				c.removedAt = max(c.tick, 1)
				return
			}
		}
		// Left at its request: work up to the start, then hand over.
		c.w.leave.leaving = true
		if c.cfg.Mode == Sync {
			c.w.leave.stopAt = t.Start
		} else {
			c.w.leave.stopAt = max(c.w.clock, 1)
			if c.w.stash != nil || c.w.computing {
				c.w.leave.stopAt = c.w.clock + 1
			}
		}
	}
	if isMember && !c.joined {
		c.joined = true
		me, _ := t.member(self)
		c.w.start(me.Since)
	}
	c.o.takeovers(oldRoute, t)
	c.o.configChanged(prev, t)
	if c.joined && c.err == nil {
		c.o.ckptConfig(t)
		c.cutConfig(t)
	}
	if c.joined {
		c.o.recheckPulls()
	}
	if c.w.started {
		c.w.rerouteAll()
	}
	if c.ag.leader.prop != nil && t.ID >= c.ag.leader.prop.ID {
		c.ag.leader.prop = nil
	}
	ev := Event{Kind: EvConfig, Config: t.ID, Start: t.Start, Members: t.peers(), Final: t.Final}
	if prev != nil {
		for _, m := range t.Members {
			if !prev.isMember(m.Peer, m.ID) {
				ev.Joined = append(ev.Joined, m.Peer)
			}
		}
	}
	for _, m := range t.Left {
		ev.Left = append(ev.Left, m.Peer)
	}
	for _, m := range t.Crashed {
		ev.Crashed = append(ev.Crashed, m.Peer)
	}
	ev.Shards = len(t.holders[self])
	n := 0
	for s := range c.shards {
		if t.primary(s) == self {
			n++
		}
	}
	ev.Shards = n
	if t.Checkpoint {
		ev.Text = "checkpoint"
	}
	c.event(ev)
}

// holdersAt returns the peers that hold shard s while round r is applied
// (sync): its route and the replicas of round r's configuration that have
// not crashed.
func (c *Core) holdersAt(s int, r uint64) []string {
	t := c.cs.at(r)
	out := []string{c.cs.route(s, r)}
	for _, h := range t.owners[s] {
		if !slices.Contains(out, h) && !c.o.crashedPeer(t, h) {
			out = append(out, h)
		}
	}
	return out
}

// takeovers acts on shards whose round Start-1 moved to another peer
// because its route crashed (sync): the new route waits for the shard from
// the survivors that held it (the first of them owes it, as it is), or,
// when none survived, restarts it at the first round it is sent.
func (o *owner) takeovers(oldRoute map[uint64][][]string, t *tconf) {
	c := o.c
	if oldRoute == nil || !c.joined {
		return
	}
	crashed := map[string]bool{}
	for _, m := range t.Crashed {
		crashed[m.Peer] = true
	}
	self := c.cfg.Self
	rounds := make([]uint64, 0, len(oldRoute))
	for r := range oldRoute {
		rounds = append(rounds, r)
	}
	slices.Sort(rounds)
	for s := range c.shards {
		for _, r := range rounds {
			old := oldRoute[r][s]
			if !crashed[old[0]] {
				continue
			}
			var survivors []string
			for _, h := range old[1:] {
				if !crashed[h] {
					survivors = append(survivors, h)
				}
			}
			if c.routeMe(s, r) && !o.currentFor(s, r, true) {
				// Ask the survivors of this round and of the later ones:
				// the holders of a later round have it further on (the
				// crashed primary may have applied it, or a copy kept
				// here was dropped since).
				a := &await{since: c.tick, takeover: true, takenAt: r, prev: o.prevAlive(s, r)}
				for _, r2 := range rounds {
					if r2 < r {
						continue
					}
					at := c.cs.at(r2)
					for _, h := range oldRoute[r2][s] {
						m, ok := at.member(h)
						if !ok {
							m, ok = t.member(h)
						}
						if ok && h != self && !crashed[h] && !slices.ContainsFunc(a.from, func(x Member) bool { return x.Peer == h }) {
							a.from = append(a.from, m)
						}
					}
				}
				if len(a.from) == 0 && !a.prev && r > 0 {
					// Nobody of these rounds survived: the replicas of the
					// round before have the shard as of this one (its
					// answers waited for them). A crash that took a new
					// holder's handoff with it left the shard with an
					// old replica only (sync/encoded seed 67 restarted
					// it from nothing).
					at := c.cs.at(r - 1)
					for _, h := range at.owners[s][1:] {
						if m, ok := at.member(h); ok && h != self && !c.cs.crashed[m.ID] && c.isAlive(m.ID) {
							a.from = append(a.from, m)
						}
					}
				}
				o.awaiting[s] = a
				break
			}
			if c.routeMe(s, r) && o.held.has(s) && o.sync.through[s] == r {
				// Current as of round r, which is this peer's now: the
				// holders of later rounds may have it further on (the
				// crashed route applied it and handed it on). Ask them
				// first (await.keep).
				a := &await{since: c.tick, takeover: true, takenAt: r, keep: true}
				for _, r2 := range rounds {
					if r2 <= r {
						continue
					}
					at := c.cs.at(r2)
					for _, h := range oldRoute[r2][s] {
						m, ok := at.member(h)
						if ok && h != self && !crashed[h] && !slices.ContainsFunc(a.from, func(x Member) bool { return x.Peer == h }) {
							a.from = append(a.from, m)
						}
					}
				}
				if len(a.from) > 0 {
					o.awaiting[s] = a
				}
				break
			}
			if c.routeMe(s, r) && o.held.has(s) && o.sync.through[s] > r {
				// Round r moved here, and the copy here is past it (the
				// crashed route applied it and handed the shard on before
				// its answers went: they waited for a replica that missed
				// the round). This peer applies round r no more, so that
				// replica never gets it forwarded: where it holds the
				// shard further on, it gets the copy from here
				// (docs/protocol.md, "Handoff", rule H19; TestFixedSeeds
				// sync/full-churn 1046: the
				// replica routed the next round and waited for round r
				// forever).
				after := c.cs.at(o.sync.through[s])
				for _, h := range survivors {
					m, ok := after.member(h)
					if !ok || h == self || c.cs.crashed[m.ID] || !after.holds(h, s) && c.cs.route(s, o.sync.through[s]) != h {
						continue
					}
					o.addOwe(owe{to: h, member: m.ID, shard: s, round: o.sync.through[s]})
				}
			}
			if len(survivors) > 0 && c.isMeIn(survivors[0], c.cs.at(r)) && !c.routeMe(s, r) && o.held.has(s) {
				to, rt := c.cs.routeConf(s, r)
				m, _ := rt.member(to)
				o.addOwe(owe{to: to, member: m.ID, shard: s, takeover: true, round: r})
				break
			}
		}
	}
}

// prevNow reports whether takeover a of shard s can count on the peer
// that applies round takenAt-1 (prevAlive), and marks it so: also when it
// could not as the wait began, since a crash may have moved that round to
// a live replica, which hands the shard over as of takenAt (sync/encoded
// seed 67 restarted a shard from nothing while that replica had it).
func (o *owner) prevNow(s int, a *await) bool {
	if o.prevAlive(s, a.takenAt) {
		a.prev = true
		return true
	}
	return false
}

// prevAlive reports whether the peer that applies shard s's round r-1 is
// another live member, which hands the shard over as of round r.
func (o *owner) prevAlive(s int, r uint64) bool {
	c := o.c
	if r == 0 {
		return false
	}
	p, t := c.cs.routeConf(s, r-1)
	m, ok := t.member(p)
	return ok && !c.isMeIn(p, t) && !c.cs.crashed[m.ID] && c.isAlive(m.ID)
}

// currentFor reports whether this peer's copy of shard s holds every round
// before r that was answered: it applied round r already, it was a holder
// of s in the configuration of the round it is at (whose primary forwards
// each round to its holders before answering), or it got the copy after
// round r became this peer's. A copy kept from an older configuration may
// miss rounds applied since by others.
//
// strict (a crash's takeover) asks more of a holder of the round its copy
// is at: that it holds the shard in every round from there to r, or that
// a handoff on its way brings the copy further. A copy kept from a
// configuration that held the shard here long ago does not get those
// rounds applied: holders that have crashed now applied them
// (sync/fast-chaos seed 1951: a copy handed on as of round 1 and kept
// counted as current for round 7, so the shard was neither taken over nor
// restarted, and the last peer waited for round 1 forever). A round a push
// moves here (lazyTakeover) is not strict: sync/fast-chaos seed 1149
// stalled when it was, its copy's handoff still on its way.
func (o *owner) currentFor(s int, r uint64, strict bool) bool {
	c := o.c
	if !o.held.has(s) {
		return false
	}
	if o.sync.through[s] > r {
		return true
	}
	if at := c.cs.at(o.sync.through[s]); at.holds(c.cfg.Self, s) && c.isMeIn(c.cfg.Self, at) {
		// A holder of the round it is at: it gets that round applied.
		if !strict || o.holdsEvery(s, o.sync.through[s], r) {
			return true
		}
		if a := o.awaiting[s]; a != nil && !a.takeover && a.round <= r {
			return true // a handoff brings it up to a round on its way here
		}
	}
	if o.sync.through[s] == r && o.sync.handedAs[s] == r {
		// Handed over as of round r by the peer that applied round r-1:
		// the copy that peer would send again (sync/chaos seed 1225 asked
		// it again, and it never answered the handoff it had paid).
		return true
	}
	// Or it got the copy once this peer was the round's route.
	_, t := c.cs.routeConf(s, r)
	return o.sync.gotIn[s] >= t.ID
}

// holdsEvery reports whether this process holds shard s in the
// configuration of every round from lo up to hi (lo alone when lo >= hi).
func (o *owner) holdsEvery(s int, lo, hi uint64) bool {
	c := o.c
	holds := func(r uint64) bool {
		at := c.cs.at(r)
		return at.holds(c.cfg.Self, s) && c.isMeIn(c.cfg.Self, at)
	}
	if !holds(lo) {
		return false
	}
	for _, t := range c.cs.list { // (the configurations of the rounds between start at their first round)
		if t.Start > lo && t.Start < hi && !holds(t.Start) {
			return false
		}
	}
	return true
}

// holdsAt reports whether this process holds shard s while round r is
// applied (sync).
func (c *Core) holdsAt(s int, r uint64) bool {
	if c.routeMe(s, r) {
		return true
	}
	t := c.cs.at(r)
	return t.holds(c.cfg.Self, s) && c.isMeIn(c.cfg.Self, t) && !c.cs.crashed[c.cfg.ID]
}

// configChanged updates what this owner holds, owes and waits for.
func (o *owner) configChanged(prev, t *tconf) {
	c := o.c
	self := c.cfg.Self
	if !c.joined {
		return // configurations before this process joined are its predecessors'
	}
	if prev == nil {
		// The first configuration: shards start fresh, or as loaded from
		// a checkpoint.
		if !t.isMember(self, c.cfg.ID) {
			return
		}
		for s := range c.shards {
			if !t.holds(self, s) {
				c.m.Disown(s) // (loaded from a checkpoint, but not this peer's now)
				continue
			}
			o.held.add(s)
			if c.m.State[s] == nil {
				if c.cfg.Start > 0 {
					c.fail(fmt.Errorf("%w: resuming at round %d, shard %d is this peer's but was not loaded from its checkpoint", ErrConfig, c.cfg.Start, s))
					return
				}
				c.m.Own(s)
			}
			o.setThrough(int(s), t.Start)
			o.sync.gotIn[s] = t.ID
		}
		return
	}
	if c.cfg.Mode == Sync {
		if t.Start > 0 {
			for s := range c.shards {
				if !t.holds(self, s) || o.awaiting[s] != nil {
					continue
				}
				if c.holdsAt(s, t.Start-1) {
					continue // it applies round Start-1 itself
				}
				if o.held.has(s) && o.sync.through[s] >= t.Start {
					continue
				}
				o.await(s, t.Start, prev)
			}
		}
		o.owesOf(t)
	} else {
		for s := range c.shards {
			newHolders := []string{}
			for _, h := range t.owners[s] {
				if !prev.holds(h, s) && !o.crashedPeer(t, h) {
					newHolders = append(newHolders, h)
				}
			}
			if len(newHolders) > 0 && o.senderAsync(prev, t, s) == self && prev.isMember(self, c.cfg.ID) {
				for _, h := range newHolders {
					if h != self {
						m, _ := t.member(h)
						o.addOwe(owe{to: h, member: m.ID, shard: s, conf: t.ID})
					}
				}
			}
			// A copy held here though prev did not give this peer the
			// shard is one it handed over and has not freed yet (its
			// handoff not acknowledged): the holders of prev applied
			// contributions since, so it waits for their copy like a
			// newcomer (async/chaos seed 27 handed such a copy on and lost
			// a worker's rounds).
			if t.holds(self, s) && o.awaiting[s] == nil && (!o.held.has(s) || !prev.holds(self, s)) {
				o.await(s, 0, prev)
			}
		}
	}
	// Forwards and handoffs to peers that crashed will never be
	// acknowledged: drop them (nothing waits for a dead replica).
	for _, m := range t.Crashed {
		for id, f := range o.fwd {
			if f.to == m.Peer {
				delete(o.fwd, id)
				for _, k := range f.of {
					k.acks--
				}
			}
		}
		for id, x := range o.xfer {
			if x.to == m.Peer {
				delete(o.xfer, id)
			}
		}
	}
	for s := range c.shards {
		o.maybeFree(s)
	}
	o.askState()
}

// await starts waiting for shard s's state (as of round r in sync).
func (o *owner) await(s int, r uint64, prev *tconf) {
	a := &await{round: r, since: o.c.tick, conf: o.c.cs.cur().ID}
	for _, h := range prev.owners[s] {
		if m, ok := prev.member(h); ok {
			a.from = append(a.from, m)
		}
	}
	o.awaiting[s] = a
}

// senderAsync is the peer that hands shard s from prev to t in ssp/async:
// prev's primary unless it crashed, else prev's first live replica.
func (o *owner) senderAsync(prev, t *tconf, s int) string {
	for _, h := range prev.owners[s] {
		if !o.crashedPeer(prev, h) {
			return h
		}
	}
	return ""
}

func (o *owner) addOwe(w owe) {
	if o.paid[w] {
		return
	}
	for _, x := range o.owes {
		if x == w {
			return
		}
	}
	o.owes = append(o.owes, w)
}

// owesOf lists, in sync mode, the shards this peer must hand over for
// configuration t: those whose round Start-1 it applies, to their holders
// new in t, and, for a peer that t lets leave, those it replicates in that
// round. (An older configuration's handoff that a crash rerouted is asked
// for by its receiver: askState, askBehind.)
func (o *owner) owesOf(t *tconf) {
	c := o.c
	if t.Start == 0 {
		return
	}
	// A leaver that replicates the round before hands its copy over too
	// (the same values as the route's: a replica applies every round the
	// route does, and the receiver installs the first copy and
	// acknowledges the other). Until a new holder has one, the leaver's
	// is the only other copy: freed as soon as the leaver's last round was
	// applied (its worker sees no later round, so maybeFree never waits),
	// the shard was lost with two copies and one crash when the route
	// crashed before its handoff arrived (sync/full-churn seeds 577 and
	// 1828). The owe keeps the copy, and the leaver running, until a new
	// holder acknowledges it, or crashes.
	leaver := c.leaving() && !t.isMember(c.cfg.Self, c.cfg.ID)
	for s := range c.shards {
		if !c.routeMe(s, t.Start-1) && !(leaver && o.held.has(s) && c.holdsAt(s, t.Start-1)) {
			continue
		}
		holders := c.holdersAt(s, t.Start-1)
		for _, h := range t.owners[s] {
			if !slices.Contains(holders, h) && !o.crashedPeer(t, h) {
				m, _ := t.member(h)
				o.addOwe(owe{to: h, member: m.ID, shard: s, round: t.Start})
			}
		}
	}
}

// askState asks, for every shard this peer waits for (sync, not a
// takeover), the peer that now applies the round before the handoff; it
// runs when configurations change and every RetryTicks.
func (o *owner) askState() {
	c := o.c
	if c.cfg.Mode != Sync {
		return
	}
	o.askBehind()
	for _, s := range sortedInts(o.awaiting) {
		a := o.awaiting[s]
		if !a.takeover && o.final && o.sync.finalAt > 0 && a.round >= o.sync.finalAt && o.held.has(s) && o.sync.through[s] >= o.sync.finalAt {
			// The copy held here has the run's last round applied, and no
			// round runs after it: a handoff as of a later round would
			// bring this copy (docs/protocol.md, "The end of a run", E12;
			// TestFixedSeeds h4/sync/chaos 257: a crash after the end
			// made this peer await a shard as of the round after the last
			// from the last round's route, which had sent it its copy as
			// of that round already and would not again, and every final
			// pull of the shard here waited forever).
			delete(o.awaiting, s)
			continue
		}
		if a.takeover {
			// Ask the survivors for the shard as they have it.
			flags := wire.FlagAsk | wire.FlagMoved
			if a.keep {
				flags |= wire.FlagReply // ("no copy" is an answer too)
			}
			for _, m := range a.from {
				if m.Peer != c.cfg.Self && !c.cs.crashed[m.ID] {
					c.send(m.Peer, &wire.Core{Op: wire.CoreState, Flags: flags, Shards: []uint32{uint32(s)}, Round: a.takenAt})
				}
			}
			if !a.keep && o.prevNow(s, a) {
				p, _ := c.cs.routeConf(s, a.takenAt-1)
				c.send(p, &wire.Core{Op: wire.CoreState, Flags: wire.FlagAsk, Shards: []uint32{uint32(s)}, Round: a.takenAt})
			}
			continue
		}
		if a.round == 0 {
			continue
		}
		p, t := c.cs.routeConf(s, a.round-1)
		if c.isMeIn(p, t) {
			if !o.held.has(s) {
				// A crash moved the round before the handoff here, to a
				// peer without the shard: ask its holders, and those of
				// the handoff's round, for the shard as they have it
				// (sync/full-churn seed 48 asked nobody, and the round's
				// primary waited for this replica forever).
				// The shard may come from any of them until each has
				// said it has none (a.from, mayStillCome).
				asked := map[string]bool{c.cfg.Self: true}
				var from []Member
				for _, r := range []uint64{a.round - 1, a.round} {
					at := c.cs.at(r)
					for _, h := range at.owners[s] {
						if m, ok := at.member(h); ok && !asked[h] && !c.cs.crashed[m.ID] {
							asked[h] = true
							from = append(from, m)
							c.send(h, &wire.Core{Op: wire.CoreState, Flags: wire.FlagAsk | wire.FlagMoved, Shards: []uint32{uint32(s)}, Round: a.round - 1})
						}
					}
				}
				if !a.noCopy {
					a.noCopy, a.from = true, from
				}
			}
			continue
		}
		c.send(p, &wire.Core{Op: wire.CoreState, Flags: wire.FlagAsk, Shards: []uint32{uint32(s)}, Round: a.round})
		if m, _ := t.member(p); o.leaverGone(m) {
			o.askPastLeaver(s, a.round)
		}
		if a.noCopy {
			o.askReplicasBefore(s, a, p)
		}
	}
}

// askReplicasBefore asks the live replicas of round a.round-1 of shard s
// for the shard as of a.round, as a takeover asks survivors
// (FlagAsk|FlagMoved), when this peer, the route of a.round, waits for its
// handoff and the peer that now applies the round before (asked, p) said
// it has none and waits for the shard from this side itself (a.noCopy).
// Those replicas are what mayStillCome counts on then; a replica that got
// the round's forward has the shard as of a.round, which the handoff would
// have brought (docs/protocol.md, "Handoff", rule H33). Without the asks
// nobody sent it: the route of a.round-1 crashed after it applied the
// round, its handoff lost on the way, and the configuration that removed
// it, starting later, moved that round to a peer that never held the
// shard, which waited for this peer's handoff of a later round
// (TestFixedSeeds sync/chaos 1510). A replica's copy as of an earlier
// round is not installed (stateWanted).
func (o *owner) askReplicasBefore(s int, a *await, p string) {
	c := o.c
	if a.round == 0 || !c.routeMe(s, a.round) {
		return // (a takeover's ask comes from the route of its round: onAsk)
	}
	at := c.cs.at(a.round - 1)
	for _, h := range at.owners[s] {
		m, ok := at.member(h)
		if !ok || h == p || h == c.cfg.Self || c.cs.crashed[m.ID] || !c.isAlive(m.ID) {
			continue
		}
		c.send(h, &wire.Core{Op: wire.CoreState, Flags: wire.FlagAsk | wire.FlagMoved, Shards: []uint32{uint32(s)}, Round: a.round})
	}
}

// askBehind asks again, for every shard whose takeover installed a copy
// older than the round it took over (sync.behind), the holders that
// takeover asked and the peer that applies the round before, for the
// shard as of that round (docs/protocol.md, "Handoff", rule H32). This
// peer applies no round on such a copy: the round before is that peer's,
// and a copy as of the round taken over replaces it (ff) once one comes.
// The takeover asked each of them once, and its wait ended with the first
// copy; but that peer may have refused the ask (a joiner's ask came to a
// leaver that had not applied the configurations admitting the joiner, and
// was dropped as from no member), and the holders sent their copies as
// they were then. Since, that peer may have applied the round before and
// forwarded it to the holders, or handed the shard on to them, and left:
// asked again, a holder whose copy is further on than the one it paid
// with pays again (H16). Without it the taker held the round unapplied for
// good (TestScripts/h32-takeover-asks-again, TestFixedSeeds
// sync/fast-chaos 725). The asks stop once a copy as of that round or
// later is installed, a round is applied, the copy is freed, or the shard
// is awaited again.
func (o *owner) askBehind() {
	c := o.c
	for _, s := range sortedInts(o.sync.behind) {
		a := o.sync.behind[s]
		if !o.held.has(s) || !o.sync.ff[s] || o.sync.through[s] >= a.takenAt || o.awaiting[s] != nil {
			delete(o.sync.behind, s)
			continue
		}
		for _, m := range a.from {
			if m.Peer != c.cfg.Self && !c.cs.crashed[m.ID] {
				c.send(m.Peer, &wire.Core{Op: wire.CoreState, Flags: wire.FlagAsk | wire.FlagMoved, Shards: []uint32{uint32(s)}, Round: a.takenAt})
			}
		}
		if o.prevAlive(s, a.takenAt) {
			p, _ := c.cs.routeConf(s, a.takenAt-1)
			c.send(p, &wire.Core{Op: wire.CoreState, Flags: wire.FlagAsk, Shards: []uint32{uint32(s)}, Round: a.takenAt})
		}
	}
}

// leaverGone reports whether member m left the run at its request (no
// configuration removed it as crashed) and the membership now declares
// it dead.
func (o *owner) leaverGone(m Member) bool {
	c := o.c
	return c.aliveOK && c.cs.removedIn[m.ID] != nil && !c.cs.crashed[m.ID] && !c.isAlive(m.ID)
}

// askPastLeaver asks the route of round r for shard s as of round r+1,
// when this peer waits for the shard as of r from a leaver that is dead
// (docs/protocol.md, "Handoff", rule H30;
// TestScripts/m4-leaver-crashes-before-its-handoff). The leaver left, so
// no configuration removes it as crashed and no takeover moves its
// handoff; the route of round r holds the shard as of r (it held it in
// the round before, or got it) and applies r without this peer, but its
// answers of r wait for this peer's acknowledgement of the forward, which
// waits for the leaver's copy. The ask is the one a replica that missed
// round r sends (forwardSync): that route sends its copy once it has
// applied r, this peer installs it, and the forward of r, applied in the
// copy, is acknowledged. The leaver is still asked: a copy of it that
// comes first is installed, and a later one acknowledged
// (TestScripts/h30-leaver-only-cut-off).
func (o *owner) askPastLeaver(s int, r uint64) {
	c := o.c
	q, t := c.cs.routeConf(s, r)
	m, ok := t.member(q)
	if !ok || c.isMeIn(q, t) || c.cs.crashed[m.ID] || !c.isAlive(m.ID) {
		return // (this peer routes r: not covered, see Open problems)
	}
	c.send(q, &wire.Core{Op: wire.CoreState, Flags: wire.FlagAsk, Shards: []uint32{uint32(s)}, Round: r + 1})
}

// onAsk takes a new holder's request for a shard: owed once this peer has
// applied the round before (if it applies it), unless sent already.
func (o *owner) onAsk(from string, msg *wire.Core) {
	c := o.c
	if len(msg.Shards) != 1 || int(msg.Shards[0]) >= c.shards || msg.Round == 0 && (c.cfg.Mode != Sync || msg.Flags&wire.FlagMoved == 0) {
		// (A takeover may be of round 0: its route crashed after it
		// applied the round and handed the shard on. H27;
		// TestScripts/h27-takeover-of-round-0: refused here, the taker
		// restarted the shard from nothing.)
		c.stats.Rejected++
		return
	}
	s := int(msg.Shards[0])
	cur := c.cs.cur()
	if cur == nil || !c.joined {
		return // it asks again
	}
	if c.cfg.Mode != Sync {
		// A replica's copy misses a contribution this primary applied
		// (askRefresh): it gets the shard as it is here. Round is the
		// asker's own number for the request.
		m, member := cur.member(from)
		if !member || m.ID != msg.Member || !cur.holds(from, s) || cur.primary(s) != c.cfg.Self {
			c.stats.Rejected++
			return
		}
		if !o.held.has(s) && o.awaiting[s] != nil {
			// This primary has no copy yet: it waits for a handoff,
			// maybe from the asker itself. Say so, and the asker's own
			// copy stands (ssp/fast-chaos seed 935: each waited for the
			// other, and the replica's hole was skipped as lost while the
			// forward that filled it came again and again, deferred).
			c.send(from, &wire.Core{Op: wire.CoreState, Flags: wire.FlagRefused, Shards: msg.Shards, Round: msg.Round})
			return
		}
		if !o.usable(s, 0) {
			c.stats.Rejected++
			return
		}
		o.oweOrResend(owe{to: from, member: msg.Member, shard: s, conf: cur.ID, round: msg.Round})
		return
	}
	if msg.Flags&wire.FlagMoved != 0 {
		// A takeover: the asker now applies round Round of the shard (its
		// route crashed); this peer, a survivor, has it as it is.
		if p, t := c.cs.routeConf(s, msg.Round); p != from || !t.isMember(from, msg.Member) {
			c.stats.Rejected++
			return
		}
		if !o.held.has(s) {
			// No copy here: say so (the taker waits for the answers of
			// those it asked before it applies a round on a copy:
			// settleWait). When the taker's own copy is current
			// (FlagReply), from now on take the shard only from the
			// route of the round before its handoff, not from the
			// crashed route, whose copy would fork it from the taker's.
			if a := o.awaiting[s]; a != nil && !a.takeover && msg.Flags&wire.FlagReply != 0 {
				a.refused = true
			}
			c.send(from, &wire.Core{Op: wire.CoreState, Flags: wire.FlagRefused | wire.FlagMoved, Shards: msg.Shards, Round: msg.Round})
			return
		}
		o.oweOrResend(owe{to: from, member: msg.Member, shard: s, takeover: true, round: msg.Round})
		return
	}
	if _, ok := o.memberOf(from, msg.Member); !ok || !o.heldBy(from, s) || !c.routeMe(s, msg.Round-1) {
		// Dropped: also an honest ask of a configuration not applied here
		// yet. Its sender asks again while it waits (askState), also once
		// a takeover installed an older copy (askBehind, H32;
		// TestScripts/h32-takeover-asks-again).
		c.stats.Rejected++
		return
	}
	a := o.awaiting[s]
	waitsOnAsker := a != nil && (!a.takeover && a.round > msg.Round || a.takeover && a.takenAt > msg.Round)
	if !o.held.has(s) && (a == nil || o.neverComes(s) || waitsOnAsker) {
		// Handed over and dropped here already (a leaver's copy went to
		// the holder that crashed since), or never to come here (its own
		// takeover waits for peers that all crashed, and no round is this
		// peer's to restart it at), or to come only as of a later round,
		// from the asker's side of the chain (sync/fast-chaos seed 88: a
		// leaver that had handed the shard to peers that crashed since
		// waited for it as of round 7 from the peer asking it as of round
		// 6, and each waited for the other): say so, so the asker stops
		// counting on this peer (sync/chaos seed 270 waited on such a
		// leaver forever).
		flags := wire.FlagRefused
		if waitsOnAsker {
			flags |= wire.FlagAsk // (and waits for it from the asker's side: await.noCopy)
		}
		c.send(from, &wire.Core{Op: wire.CoreState, Flags: flags, Shards: msg.Shards, Round: msg.Round})
		return
	}
	o.oweOrResend(owe{to: from, member: msg.Member, shard: s, round: msg.Round})
	o.catchUp(s, msg.Round, from)
}

// catchUp starts taking over shard s from the holders of rounds r-1 and r
// when this peer owes it as of round r but its copy is older and never
// gets round r-1 applied here: a crash moved that round here after its
// primary had applied it (the takeover of that crash looked only at the
// rounds still open), and this peer's worker is past round r, so every
// worker's contribution to r-1 was answered there. The round's replicas
// have the shard further on; as a takeover that keeps its own copy, this
// peer asks them for it (sync/fast-chaos seed 1863: the new holder of
// round r asked this peer for 40,000 ticks while the replica had the
// copy it owed).
func (o *owner) catchUp(s int, r uint64, asker string) {
	c := o.c
	if !o.held.has(s) || o.sync.through[s]+1 != r || !c.workerStarted() || c.Round() <= r || o.sync.settle[s] != nil {
		return
	}
	if a := o.awaiting[s]; a != nil && (a.takeover || a.round <= r) {
		return
	}
	p, t := c.cs.routeConf(s, r-1)
	orig := c.cs.at(r - 1)
	if p != c.cfg.Self || t.ID == orig.ID {
		return
	}
	if ra := o.rounds[r-1]; ra != nil {
		for _, k := range ra.contrib {
			if k.set.has(s) {
				return // (the round is still open here)
			}
		}
	}
	a := &await{since: c.tick, takeover: true, takenAt: r - 1, keep: true}
	for _, at := range []*tconf{orig, c.cs.at(r)} {
		for _, h := range at.owners[s] {
			m, ok := at.member(h)
			if ok && h != c.cfg.Self && h != asker && !c.cs.crashed[m.ID] && !slices.ContainsFunc(a.from, func(x Member) bool { return x.Peer == h }) {
				a.from = append(a.from, m)
			}
		}
	}
	if len(a.from) == 0 {
		return
	}
	o.awaiting[s] = a
	o.askState()
}

// oweOrResend owes w (a peer asked for the shard), or, if it was sent
// already (and is sent again until acknowledged), sends it again now: that
// the peer asks means the copy was lost.
func (o *owner) oweOrResend(w owe) {
	if o.paid[w] {
		if as, ok := o.sync.paidAs[w]; ok && o.c.cfg.Mode == Sync && o.held.has(w.shard) && o.sync.through[w.shard] > as && !o.xferTo(w.to, w.shard) {
			// Paid with a copy older than this one, which the asker
			// took (acknowledged) and still asks past: a takeover's owe
			// of round r paid, as the shard was then, before this peer
			// had applied round r-1 (sync/chaos seed 1440 asked again
			// for an hour, then restarted the shard from nothing while
			// this peer held it).
			o.repay(w)
			return
		}
		o.resendXfer(w.to, w.shard)
		return
	}
	o.addOwe(w)
}

// repayOlder owes again, now, the takeovers this peer paid with an older
// copy of shard s than the one it just installed: it paid a survivor's
// copy while the handoff of a later round was still on its way here (a
// partition held it), and the taker, whose copy stopped at a round a
// leaver applied, asks no more (sync/chaos seed 1991 waited for that
// round forever). The taker takes a further copy (await.ff). Not to the
// peer the copy came from, which has it (sync/fast-chaos seed 428).
func (o *owner) repayOlder(s int, from string) {
	var due []owe
	for w, as := range o.sync.paidAs {
		if w.shard == s && w.takeover && w.to != from && o.sync.through[s] > as && !o.xferTo(w.to, s) {
			due = append(due, w)
		}
	}
	slices.SortFunc(due, func(a, b owe) int { // (map order is random)
		return cmp.Or(cmp.Compare(a.to, b.to), cmp.Compare(a.round, b.round), cmp.Compare(a.member, b.member))
	})
	for _, w := range due {
		o.repay(w)
	}
}

// repay owes w again, though it was paid: the copy that paid it is older
// than the one this peer holds now.
func (o *owner) repay(w owe) {
	delete(o.paid, w)
	delete(o.sync.paidAs, w)
	o.addOwe(w)
}

// xferTo reports whether a copy of shard s sent to peer to waits for its
// acknowledgement.
func (o *owner) xferTo(to string, s int) bool {
	for _, x := range o.xfer {
		if x.to == to && x.shard == s {
			return true
		}
	}
	return false
}

// neverComes reports whether shard s, awaited here by a takeover, can
// never arrive: every peer it waits for crashed, it waits for no peer of
// the round before, and no contribution waits here to restart it with.
func (o *owner) neverComes(s int) bool {
	a := o.awaiting[s]
	if a == nil || !a.takeover || a.prev {
		return false
	}
	for _, m := range a.from {
		if !o.c.cs.crashed[m.ID] {
			return false
		}
	}
	return !o.contributionWaits(s)
}

// contributionWaits reports whether a push or pull of shard s waits here
// for the shard: a restart will answer it (at the round lastRoundFor
// names, or once pushes of the lost round come, H31, or at H29's
// timeout), so the shard still comes here.
func (o *owner) contributionWaits(s int) bool {
	for _, ra := range o.rounds {
		for _, k := range ra.contrib {
			if k.set.has(s) {
				return true
			}
		}
	}
	for _, k := range o.pending {
		if k.op == wire.CorePull && k.set.has(s) && k.through != Final {
			return true
		}
	}
	return false
}

// resendXfer sends again, at most every quarter retry interval, the
// unacknowledged copy of shard s to peer to.
func (o *owner) resendXfer(to string, s int) {
	c := o.c
	for _, id := range sortedKeys(o.xfer) {
		if x := o.xfer[id]; x.to == to && x.shard == s && c.tick-x.sentAt >= uint64(max(1, c.cfg.RetryTicks/4)) {
			x.sentAt = c.tick
			c.stats.Resent++
			c.send(x.to, x.msg)
		}
	}
}

// onNoCopy takes the answer of the peer that applies the round before a
// takeover that it no longer has the shard: the takeover stops waiting for
// it (and may restart the shard if nobody else has it).
func (o *owner) onNoCopy(from string, msg *wire.Core) {
	c := o.c
	if len(msg.Shards) != 1 || int(msg.Shards[0]) >= c.shards {
		c.stats.Rejected++
		return
	}
	s := int(msg.Shards[0])
	a := o.awaiting[s]
	if c.cfg.Mode != Sync {
		// The primary asked for a refresh has no copy (onAsk): this
		// one stands, and the forwards held for it apply.
		if a == nil || !a.own || len(a.from) != 1 || a.from[0].Peer != from || a.from[0].ID != msg.Member || msg.Round != refreshNum(a) {
			c.stats.Rejected++
			return
		}
		delete(o.awaiting, s)
		return
	}
	if msg.Flags&wire.FlagMoved != 0 {
		// A survivor's "no copy" to a takeover's ask: a takeover that
		// keeps its own copy counts on it (await.keep), one that
		// installed another's holds its rounds until it comes
		// (settleWait).
		if a != nil && a.keep && msg.Round == a.takenAt {
			o.keepWithout(s, a, from, msg.Member)
		}
		if a != nil && !a.takeover && a.noCopy && a.round > 0 && msg.Round == a.round-1 {
			// A holder asked for a handoff whose round before a crash
			// moved here (askState) has none: one fewer to wait for.
			a.from = slices.DeleteFunc(a.from, func(m Member) bool { return m.Peer == from && m.ID == msg.Member })
		}
		o.settled(s, from)
		return
	}
	if a != nil && !a.takeover && msg.Round == a.round && a.round > 0 && msg.Flags&wire.FlagAsk != 0 {
		// The handoff's sender has no copy (see await.noCopy).
		if p, t := c.cs.routeConf(s, a.round-1); p != from || !t.isMember(from, msg.Member) {
			c.stats.Rejected++
			return
		}
		a.noCopy = true
		return
	}
	if a != nil && !a.takeover && msg.Round == a.round && a.round > 0 {
		// The handoff's sender has no copy and does not wait for one: it
		// handed the shard on as of this round already, under a
		// configuration this one replaced at the same round (a leaver's
		// handoff, then a join), and freed it. Those it handed it to have
		// it as of this round: ask them, as a takeover asks survivors
		// (sync/fast-chaos seed 116 asked the leaver for 1,400 ticks).
		if p, t := c.cs.routeConf(s, a.round-1); p != from || !t.isMember(from, msg.Member) {
			c.stats.Rejected++
			return
		}
		if holders := o.handedTo(s, a.round); len(holders) > 0 {
			a.takeover, a.takenAt, a.from, a.prev = true, a.round, holders, false
			o.askState()
		}
		return
	}
	if a == nil || !a.takeover || !a.prev || msg.Round != a.takenAt {
		return
	}
	if p, t := c.cs.routeConf(s, a.takenAt-1); p != from || !t.isMember(from, msg.Member) {
		c.stats.Rejected++
		return
	}
	if o.held.has(s) && o.sync.through[s] == a.takenAt && !slices.ContainsFunc(a.from, func(m Member) bool { return !c.cs.crashed[m.ID] }) {
		// This peer's copy is as of the takeover's round, the peer that
		// applied the round before has none to hand over (it handed it
		// to holders that crashed since), and no survivor is asked: the
		// copy here is what that peer would have sent. It stands
		// (marking prev false would not end the wait: prevNow sets it
		// again while that peer lives; sync/fast-chaos seed 88).
		delete(o.awaiting, s)
		return
	}
	a.prev = false
}

// handedTo returns the live members other than this peer that held shard
// s in a configuration starting at round r other than the newest: those a
// handoff as of round r went to.
func (o *owner) handedTo(s int, r uint64) []Member {
	c := o.c
	cur := c.cs.cur()
	var out []Member
	for _, t := range c.cs.list {
		if t == cur || t.Start != r {
			continue
		}
		for _, h := range t.owners[s] {
			m, ok := t.member(h)
			if !ok || h == c.cfg.Self || c.cs.crashed[m.ID] || !c.isAlive(m.ID) || !cur.isMember(h, m.ID) ||
				slices.ContainsFunc(out, func(x Member) bool { return x.Peer == h }) {
				continue
			}
			out = append(out, m)
		}
	}
	return out
}

// keepWithout takes peer p's answer to takeover a (await.keep) that its
// copy of shard s is not further on than this one: once no holder asked
// may still have it further on, this peer's copy stands.
func (o *owner) keepWithout(s int, a *await, p string, member uint64) {
	i := slices.IndexFunc(a.from, func(m Member) bool { return m.Peer == p && m.ID == member })
	if i < 0 {
		o.c.stats.Rejected++
		return
	}
	a.from = slices.Delete(a.from, i, i+1)
	if len(a.from) == 0 {
		if a.all {
			o.sync.lostOK[s] = a.takenAt + 1 // nobody has it further on
		}
		delete(o.awaiting, s)
	}
}

// payOwes sends the shards that are due.
func (o *owner) payOwes() bool {
	c := o.c
	progress := false
	keep := o.owes[:0]
	for _, w := range o.owes {
		cur := c.cs.cur()
		if m, ok := cur.member(w.to); ok && c.cs.crashed[m.ID] || !ok && (!c.aliveOK || !o.peerAlive(w.to)) {
			// Gone: it crashed, or left and went (a leaver still alive
			// applies its last rounds: it gets what they need).
			progress = true
			continue
		}
		if !o.usable(w.shard, min(w.round, o.sync.through[w.shard])) {
			keep = append(keep, w)
			continue
		}
		if c.cfg.Mode == Sync && !w.takeover && o.sync.through[w.shard] < w.round &&
			(!o.final || o.sync.through[w.shard] < o.sync.finalAt && c.routeMe(w.shard, o.sync.through[w.shard])) {
			// Rounds before the handoff's are still this peer's to apply:
			// hand the shard over after them. Also when this owner is
			// final but the shard lacks a round before the last that is
			// routed here: a final shard received from another peer makes
			// an owner final while its own last round may still be on its
			// way, and a copy handed over without it is never finished
			// (sync/leave-r1 seed 50 with -load 100 stalled on it).
			keep = append(keep, w)
			continue
		}
		if c.cfg.Mode == Sync && w.takeover && o.sync.through[w.shard] < w.round && c.routeMe(w.shard, o.sync.through[w.shard]) && !o.final {
			// The taker applies round w.round on; the rounds before it
			// are still this peer's to apply: hand it over after them.
			keep = append(keep, w)
			continue
		}
		// (Past the round: this peer applied later rounds too, so the new
		// holder is a replica that gets the state as it is now, then the
		// forwards of the rounds after.)
		o.sendState(w)
		o.paid[w] = true
		o.sync.paidAs[w] = o.sync.through[w.shard]
		progress = true
	}
	clear(o.owes[len(keep):])
	o.owes = keep
	return progress
}

// isMemberAnywhere reports whether peer p is a member of the newest
// configuration (with any member ID).
func (o *owner) isMemberAnywhere(p string) bool {
	_, ok := o.c.cs.cur().member(p)
	return ok
}

// sendState hands shard w.shard to w.to.
func (o *owner) sendState(w owe) {
	c := o.c
	msg := &wire.Core{Op: wire.CoreState, Shards: []uint32{uint32(w.shard)}, Round: o.sync.through[w.shard]}
	if o.final {
		msg.Flags |= wire.FlagFinal // no round runs again: as it is
		if c.cfg.Mode == Sync {
			// The end as this peer knows it, which the copy's round may
			// be short of (its last round routed elsewhere): taken for
			// the end, it let the receiver hand its own copy on before
			// the last round it routed (E15;
			// testdata/e15-final-copy-names-the-end.txt).
			msg.Through = o.sync.finalAt
		}
	}
	msg.RowWidth = c.m.ExportRows(w.shard, true, &msg.Rows)
	if c.cfg.Mode != Sync {
		// The configuration it is handed over for (the receiver refuses
		// an older copy still sent again), and no older copy to the same
		// peer is sent again from now on.
		msg.Round = w.conf
		if o.fresh.has(w.shard) {
			msg.Flags |= wire.FlagFresh
		}
		for id, x := range o.xfer {
			if x.to == w.to && x.shard == w.shard {
				delete(o.xfer, id)
			}
		}
		for _, id := range sortedKeys(o.async.applied[w.shard]) {
			msg.Clocks = append(msg.Clocks, wire.MemberClock{Member: id, Clock: o.async.applied[w.shard][id]})
		}
		for _, id := range sortedKeys(o.async.doneAt) {
			msg.Clocks = append(msg.Clocks, wire.MemberClock{Member: id | doneBit, Clock: o.async.doneAt[id]})
		}
		slices.SortFunc(msg.Clocks, func(a, b wire.MemberClock) int {
			switch {
			case a.Member < b.Member:
				return -1
			case a.Member > b.Member:
				return 1
			}
			return 0
		})
	}
	x := &stateOut{to: w.to, req: o.newReq(), shard: w.shard, msg: msg, sentAt: c.tick}
	msg.Req = x.req
	o.xfer[x.req] = x
	c.stats.HandedOff++
	c.trace(TraceEvent{Kind: TraceSend, Shards: msg.Shards, Peer: w.to, Req: x.req, Round: msg.Round})
	c.send(w.to, msg)
	c.event(Event{Kind: EvHandedOff, Shards: 1, Peer: w.to, Text: fmt.Sprintf("shard %d", w.shard)})
}

// doneBit marks, in a state transfer's clocks, a worker's done round.
// Member IDs never have it set (MemberID clears it).
const doneBit = 1 << 63

// state takes a shard handed over: after the checks of the message, it
// finds the wait the copy answers (stateWait), checks that the copy is
// wanted (stateWanted), imports it and installs it (installState).
func (o *owner) state(from string, msg *wire.Core) {
	c := o.c
	if msg.Flags&wire.FlagRefused != 0 {
		o.onNoCopy(from, msg)
		return
	}
	if msg.Flags&wire.FlagAsk != 0 {
		o.onAsk(from, msg)
		return
	}
	cur := c.cs.cur()
	if cur == nil || msg.Config > cur.ID {
		o.deferMsg(from, msg)
		return
	}
	if len(msg.Shards) != 1 || int(msg.Shards[0]) >= c.shards {
		c.stats.Rejected++
		return
	}
	s := int(msg.Shards[0])
	if !o.heldBy(from, s) {
		c.stats.Rejected++ // only a holder of the shard can hand it over
		return
	}
	a, done := o.stateWait(from, msg, s, cur)
	if done || !o.stateWanted(from, msg, s, a, cur) {
		return
	}
	if !o.importState(s, msg) {
		return
	}
	o.installState(from, msg, s, a, cur)
}

// stateWait is the wait (await) a copy of shard s answers: the one this
// peer has, or one this copy makes up for (a takeover's copy further on, a
// handoff this holder stopped waiting for, the primary's final values).
// done: the copy was handled already (installed while waiting for a later
// handoff, rule H19).
func (o *owner) stateWait(from string, msg *wire.Core, s int, cur *tconf) (a *await, done bool) {
	c := o.c
	a = o.awaiting[s]
	if c.cfg.Mode == Sync {
		o.settled(s, from) // (whether installed or not, its copy came)
	}
	if a == nil && c.cfg.Mode == Sync && (o.sync.ff[s] || o.fresh.has(s)) && o.held.has(s) && (msg.Round > o.sync.through[s] || msg.Round == o.sync.through[s] && o.fresh.has(s)) {
		// A takeover installed a copy, or restarted the shard from nothing;
		// this one is further on (a survivor had rounds the crashed
		// primary applied and answered), or as far as the copy that went
		// on without the rounds it lacked.
		a = &await{takeover: true}
	}
	if a == nil && c.cfg.Mode == Sync && o.held.has(s) && msg.Round > o.sync.through[s] && !c.routeMe(s, o.sync.through[s]) &&
		c.cs.route(s, msg.Round-1) == from && c.holdsAt(s, msg.Round) {
		// A handoff this holder stopped waiting for: its wait was a
		// takeover of an earlier round (a crash rerouted that round here),
		// which ended when the takeover's copy came; the round after it
		// belongs to another peer, which hands the shard on as of the
		// round this peer applies next. The copy is further on than the
		// one held here, and this peer applies none of the rounds between.
		a = &await{round: msg.Round}
	}
	if a != nil && c.cfg.Mode == Sync && !a.takeover && msg.Round < a.round && msg.Flags&wire.FlagFinal == 0 &&
		o.held.has(s) && msg.Round > o.sync.through[s] && c.cs.route(s, msg.Round-1) == from {
		// A copy further on than the one held here, from the peer that
		// applies the round before it, while this peer waits for a
		// handoff of a later round: the answer to a replica's ask for a
		// round it missed (forward, "behind"). That peer forwards the
		// rounds after it, and its answers wait for them, so the handoff
		// waits for this replica to catch up: installed, it goes on
		// waiting for the handoff (docs/protocol.md, "Handoff", rule H19;
		// TestFixedSeeds sync/chaos 1226 took it for a copy sent again, and
		// the run stalled).
		if !o.importState(s, msg) {
			return nil, true
		}
		o.setThrough(int(s), msg.Round)
		o.sync.gotIn[s] = cur.ID
		o.sync.handedAs[s] = msg.Round
		o.fresh.del(s)
		c.stats.Received++
		c.trace(TraceEvent{Kind: TraceInstall, Shards: msg.Shards, Peer: from, Req: msg.Req, Round: msg.Round})
		c.send(from, &wire.Core{Op: wire.CoreAck, Req: msg.Req})
		return nil, true
	}
	if a == nil && c.cfg.Mode != Sync && msg.Flags&wire.FlagFinal != 0 && o.held.has(s) && cur.primary(s) == from && from != c.cfg.Self {
		// The primary's final values, to its replica (copyFinal): they
		// replace this copy, which may differ in the last bits.
		a = &await{conf: msg.Round}
	}
	return a, false
}

// stateWanted reports whether a copy answers wait a (nil: none) and is
// further on than the one held here; when not, it is acknowledged or
// counted stale as the case needs.
func (o *owner) stateWanted(from string, msg *wire.Core, s int, a *await, cur *tconf) bool {
	c := o.c
	if a == nil || (c.cfg.Mode == Sync && !a.takeover && msg.Round < a.round && msg.Flags&wire.FlagFinal == 0) {
		if o.held.has(s) {
			c.send(from, &wire.Core{Op: wire.CoreAck, Req: msg.Req}) // a copy sent again
		} else {
			c.stats.Stale++
			if c.cfg.Mode != Sync && !cur.holds(c.cfg.Self, s) {
				// Not this peer's shard any more, nor awaited: its holders
				// now got it from the holders after this one. Say so, or a
				// leaver waits for this answer forever (async/chaos 495).
				c.send(from, &wire.Core{Op: wire.CoreAck, Req: msg.Req})
			}
		}
		return false
	}
	if a.keep && msg.Round <= o.sync.through[s] {
		// Not further on than the copy held here: the same as "no copy".
		c.send(from, &wire.Core{Op: wire.CoreAck, Req: msg.Req})
		o.keepWithout(s, a, from, msg.Member)
		return false
	}
	if a.refused && !a.takeover && a.round > 0 && from != c.cs.route(s, a.round-1) {
		// The crashed route's late copy: the round before the handoff
		// is another peer's now, whose copy this is not.
		c.stats.Stale++
		return false
	}
	if c.cfg.Mode != Sync && msg.Round < a.conf && msg.Flags&wire.FlagFinal == 0 {
		// A copy handed over for an earlier configuration, sent again: a
		// holder between then and now may have applied more.
		c.stats.Stale++
		c.send(from, &wire.Core{Op: wire.CoreAck, Req: msg.Req})
		return false
	}
	return true
}

// installState makes an imported copy of shard s held here: its rounds
// (sync) or its workers' clocks (ssp/async), the waits that follow (the
// next handoff, a takeover's settling), final values; then acknowledges
// it.
func (o *owner) installState(from string, msg *wire.Core, s int, a *await, cur *tconf) {
	c := o.c
	if c.cfg.Mode == Sync {
		o.setThrough(int(s), msg.Round)
		o.sync.gotIn[s] = cur.ID
		o.sync.handedAs[s] = 0
		if !a.takeover {
			o.sync.handedAs[s] = msg.Round
		}
		o.fresh.del(s) // (a real copy replaces one restarted from nothing)
		o.repayOlder(s, from)
	} else {
		clear(o.async.applied[s])
		o.fresh.del(s)
		if msg.Flags&wire.FlagFresh != 0 {
			// Restarted from nothing at a holder before: a worker with no
			// clock here has no earlier rounds to send (ssp/chaos seed
			// 1332: a restarted shard handed on lost this, and its new
			// primary held every ssp answer for a worker's rounds that
			// went with the holders that crashed).
			o.fresh.add(s)
			o.freshAt[s] = c.tick
		}
		for _, mc := range msg.Clocks {
			if mc.Member&doneBit != 0 {
				id := mc.Member &^ doneBit
				if d, ok := o.async.doneAt[id]; !ok || mc.Clock < d {
					o.async.doneAt[id] = mc.Clock
				}
				continue
			}
			o.async.applied[s][mc.Member] = mc.Clock
		}
	}
	o.held.add(s)
	delete(o.awaiting, s)
	if c.cfg.Mode == Sync && !a.takeover && msg.Flags&wire.FlagFinal == 0 {
		o.awaitNext(s)
	}
	if a.takeover && c.cfg.Mode == Sync {
		o.sync.ff[s] = true
		delete(o.sync.behind, s)
		if msg.Round < a.takenAt {
			o.sync.behind[s] = a // (askBehind, H32)
		}
		if !a.keep {
			// The other holders asked may have it further on: hold the
			// rounds until they answer (settleWait).
			var pending []Member
			for _, m := range a.from {
				if m.Peer != from && m.Peer != c.cfg.Self && !c.cs.crashed[m.ID] {
					pending = append(pending, m)
				}
			}
			if len(pending) > 0 {
				o.sync.settle[s] = &settleWait{pending: pending, until: c.tick + uint64(2*c.cfg.RetryTicks)}
			}
		}
	}
	if msg.Flags&wire.FlagFinal != 0 {
		if !o.final {
			o.final = true // handed over after the last round: the run's values are final
			o.copyFinal(cur)
		}
		if c.cfg.Mode == Sync {
			o.sync.finalAt = max(o.sync.finalAt, msg.Round, msg.Through) // (E15)
		}
	}
	c.stats.Received++
	c.trace(TraceEvent{Kind: TraceInstall, Shards: msg.Shards, Peer: from, Req: msg.Req, Round: msg.Round})
	c.event(Event{Kind: EvReceived, Shards: 1, Peer: from, Text: fmt.Sprintf("shard %d", s)})
	c.send(from, &wire.Core{Op: wire.CoreAck, Req: msg.Req})
}

// awaitNext makes this peer, whose copy of shard s is as of a round it
// neither applies nor replicates (sync), wait for the handoff as of the
// first later round it holds: no round is applied to its copy here until
// then. A handoff it awaited for a configuration that another replaced at
// the same round came after a newer configuration had made it a holder of
// a later round; that configuration's wait was never set (it waited
// already), the copy counted as current for the later round, and the
// peer that applied the rounds between was never asked (sync/chaos seed
// 1418 in TestFixedSeeds: the route of the later round waited for the
// round before it, which was another peer's, while that peer pulled the
// later round from it).
func (o *owner) awaitNext(s int) {
	c := o.c
	r := o.sync.through[s]
	if c.holdsAt(s, r) || o.awaiting[s] != nil {
		return
	}
	next, ok := uint64(0), false
	for _, t := range c.cs.list {
		if t.Start > r && (!ok || t.Start < next) && c.cs.at(t.Start) == t && c.holdsAt(s, t.Start) {
			next, ok = t.Start, true
		}
	}
	if ok {
		o.await(s, next, c.cs.at(next-1))
	}
}

// importState writes the rows of a shard's state msg into shard s's
// weights and optimizer state; a state of the wrong width, or one the
// model refuses, is counted as rejected and changes nothing.
func (o *owner) importState(s int, msg *wire.Core) bool {
	c := o.c
	if msg.Rows.Len() > 0 && msg.RowWidth != c.m.StateWidth(true) {
		// (A state with no rows, a shard no contribution has touched, has
		// no width on the wire: the codec keeps one form of "no rows".)
		c.stats.Rejected++
		return false
	}
	if err := c.m.ImportRows(s, true, &msg.Rows); err != nil {
		c.stats.Rejected++
		return false
	}
	return true
}

// heldBy reports whether peer p holds shard s in some configuration this
// peer knows (the only peers that may hand it over).
func (o *owner) heldBy(p string, s int) bool {
	for _, t := range o.c.cs.list {
		if t.holds(p, s) {
			return true
		}
	}
	return false
}

// needed reports whether this peer still needs shard s: it holds it in the
// newest configuration, or (sync) applies or replicates rounds of it not
// applied yet.
func (o *owner) needed(s int) bool {
	c := o.c
	if c.cs.cur().holds(c.cfg.Self, s) {
		return true
	}
	if c.cfg.Mode == Sync {
		return c.holdsAt(s, o.sync.through[s])
	}
	return false
}

// maybeFree drops shard s's state once nobody needs it here: not held in
// the newest configuration, every round of it this peer applies applied,
// handed over.
func (o *owner) maybeFree(s int) {
	c := o.c
	if !o.held.has(s) || o.needed(s) {
		return
	}
	for _, w := range o.owes {
		if w.shard == s {
			return
		}
	}
	for _, x := range o.xfer {
		if x.shard == s {
			return
		}
	}
	if c.cfg.Mode == Sync && o.answersWait(s) {
		// Its last rounds' answers wait for their forwards: they are read
		// from this copy. Freed, a leaver answered them with the zeros of
		// a reset shard, and a push of the round sent again made it take
		// the round over and apply it a second time without a worker
		// that had crashed meanwhile (sync/fast-chaos seed 32).
		return
	}
	if c.cfg.Mode == Sync && !c.leaving() && c.Round() < o.sync.through[s]+2 {
		// Keep it until this worker has seen every owner apply the round
		// after (so the new holders have it): should the peer handing it
		// over crash before its copy arrives, a survivor still has it.
		// With full read copies too: a read copy holds the weights but not
		// the optimizer state (sync/full-churn seed 55 restarted a shard
		// from nothing when only need-gather kept it).
		return
	}
	o.held.del(s)
	delete(o.sync.ff, s)
	clear(o.async.applied[s])
	c.trace(TraceEvent{Kind: TraceFree, Shards: []uint32{uint32(s)}})
	if c.cfg.Gather == Full {
		c.m.Disown(s) // the weights stay as the read copy
	} else {
		c.m.ResetShard(s)
	}
}

// answersWait reports whether a sync answer of a round applied to shard s
// here has yet to go: a forward of it not acknowledged, or a push of it
// not answered.
func (o *owner) answersWait(s int) bool {
	for _, f := range o.fwd {
		if slices.Contains(f.shards, uint32(s)) {
			return true
		}
	}
	for _, k := range o.pending {
		if k.op == wire.CorePush && k.set.has(s) && k.round < o.sync.through[s] {
			return true
		}
	}
	return false
}

// promoteLost restarts shards whose every possible holder crashed (or
// that waited too long), and frees shards no longer needed.
func (o *owner) promoteLost() bool {
	c := o.c
	progress := false
	for _, s := range sortedInts(o.awaiting) {
		a := o.awaiting[s]
		// Only the peer that applies the round before restarts a lost
		// shard (a takeover): a new holder waits for whoever does, since
		// two holders restarting it on their own would disagree.
		timeout := !a.all && (c.tick-a.since > uint64(16*c.cfg.RetryTicks) && (a.takeover && !(a.prev && o.prevAlive(s, a.takenAt)) || c.cfg.Mode != Sync) ||
			a.keep && c.tick-a.since > uint64(2*c.cfg.RetryTicks)) // (every holder asked answers at once)
		if !timeout && o.mayStillCome(s) {
			continue
		}
		if (a.own || a.keep) && o.held.has(s) {
			// The primary's copy did not come (own), or no holder of a
			// later round answered (keep): go on with this one.
			if a.all {
				o.sync.lostOK[s] = a.takenAt + 1 // (every member asked crashed)
			}
			delete(o.awaiting, s)
			progress = true
			continue
		}
		round := a.round
		if a.takeover {
			// Every holder crashed: restart the shard at the latest round
			// a worker sends it (the rounds before were answered by the
			// holders that crashed, their values are gone with them).
			r, ok := o.lastRoundFor(s)
			switch {
			case ok:
				round = max(r, a.takenAt) // (the rounds before are not this peer's to apply)
			case o.final && c.cfg.Mode == Sync:
				// Lost after the last round: no contribution will come
				// to restart it at; its final values are its initial ones,
				// as of the round after the last, like every other shard
				// (as of a newer configuration's start, past it, it raised
				// the final round its holders waited for: sync/partition
				// seed 751).
				round = c.cs.cur().Start
				if o.sync.finalAt > 0 {
					round = o.sync.finalAt
				}
			case c.cfg.Mode == Sync && timeout && o.owedAt(s) > 0:
				// No push or pull has come here for 16 retry intervals:
				// the workers, past the lost rounds, push or pull to the
				// holder this peer owes the shard to as of a later round,
				// which waits for this peer's handoff. Restart it as of
				// that round and hand it over (H29;
				// testdata/h29-takeover-no-worker-reaches.txt: each peer
				// waited for the other forever).
				// Not before the timeout: a push of an earlier round may
				// still be on its way, and restarted past it, the shard
				// would drop it.
				round = max(o.owedAt(s), a.takenAt)
			default:
				continue
			}
			o.fresh.add(s)
			o.freshAt[s] = c.tick
		}
		delete(o.awaiting, s)
		if c.cfg.Gather == Full {
			c.m.Disown(s)
			c.m.Own(s) // weights from the read copy, fresh optimizer state
		} else {
			c.m.ResetShard(s)
			if c.cfg.InitShard != nil {
				c.cfg.InitShard(c.m, s)
			}
			c.m.Own(s)
		}
		o.held.add(s)
		if c.cfg.Mode == Sync {
			o.setThrough(int(s), round)
			o.sync.gotIn[s] = c.cs.cur().ID
			o.sync.handedAs[s] = 0
		} else {
			clear(o.async.applied[s])
			o.fresh.add(s) // each worker's next contribution is the first
		}
		c.stats.Promoted++
		c.trace(TraceEvent{Kind: TracePromote, Shards: []uint32{uint32(s)}, Round: round})
		c.event(Event{Kind: EvPromoted, Shards: 1, Text: fmt.Sprintf("shard %d (waited for round %d, takeover %v, timeout %v, from %v, holders %v)",
			s, a.round, a.takeover, timeout, a.from, c.holdersAt(s, max(a.round, 1)-1))})
		progress = true
	}
	// The shards held here, not every shard: this runs at every step.
	o.held.each(func(s int) {
		if !o.needed(s) {
			o.maybeFree(s) // (drops s only)
		}
	})
	return progress
}

// owedAt returns the earliest round this peer owes shard s as of to
// another holder (not a takeover's), or 0.
func (o *owner) owedAt(s int) uint64 {
	r := uint64(0)
	for _, w := range o.owes {
		if w.shard == s && !w.takeover && (r == 0 || w.round < r) {
			r = w.round
		}
	}
	return r
}

// lastRoundFor returns the highest round a contribution to shard s waits
// to be applied at (sync), or with none, the latest round a pull of it
// waits for.
func (o *owner) lastRoundFor(s int) (uint64, bool) {
	best, ok := uint64(0), false
	for r, ra := range o.rounds {
		for _, k := range ra.contrib {
			if k.set.has(s) && (!ok || r > best) {
				best, ok = r, true
			}
		}
	}
	if ok {
		return best, ok
	}
	// No push: workers past the lost rounds only pull, each the values as
	// of the round it computes next (sync/chaos seed 746 waited for a push
	// of a round every live worker had been answered for).
	for _, k := range o.pending {
		if k.op == wire.CorePull && k.set.has(s) && k.through != Final && (!ok || k.through > best) && o.pullIsPast(k) {
			best, ok = k.through, true
		}
	}
	return best, ok
}

// pullIsPast reports whether a sync pull of the values as of round t
// shows that the rounds before t were applied: its sender was a worker of
// round t-1 (it pulls t only once its push of t-1 was answered), or no
// worker of round t-1 is left to push it (none crashed is left). A member
// whose first round is t (a joiner) pulls t whatever became of t-1, so
// its pull shows nothing (docs/protocol.md, H31). Taken for proof, a
// takeover restarted a lost shard at a joiner's pull of t while the live
// workers of t-1 had not pushed it yet: their pushes, come later, were
// answered unapplied (TestFixedSeeds sync/chaos 2), or, at the leaver
// that had routed t-1 and handed on and freed its copy since, restarted
// the shard a second time, whose copy forked from the first (sync/chaos
// 1257: a replica differed from its primary).
func (o *owner) pullIsPast(k *contribution) bool {
	c := o.c
	if c.cfg.Mode != Sync || k.through == 0 {
		return true
	}
	t := c.cs.at(k.through - 1)
	if t.isMember(k.from, k.member) {
		return true
	}
	for _, m := range t.Members {
		if !c.cs.crashed[m.ID] {
			return false
		}
	}
	return true
}

// mayStillCome reports whether a peer that may hold shard s's state is
// alive: in sync mode a holder of round Start-1 (its route follows crashes
// to the replica a configuration promoted), otherwise a holder of the
// configuration before the one that gave the shard to this peer.
func (o *owner) mayStillCome(s int) bool {
	c := o.c
	a := o.awaiting[s]
	if c.cfg.Mode == Sync && a.takeover && !a.keep && o.prevNow(s, a) {
		return true
	}
	if c.cfg.Mode == Sync && !a.takeover {
		if a.round == 0 {
			return false
		}
		if p, t := c.cs.routeConf(s, a.round-1); a.noCopy && c.isMeIn(p, t) {
			// A crash moved the round before the handoff here, and this
			// peer has no copy: the holders of that round and of the
			// handoff's that askState asked may have it, until each says
			// it has none or crashes. Restarted at once, the shard forked
			// from the copy a replica handed over a step later
			// (sync/fast-chaos seed 875 in TestFixedSeeds: "replica
			// differs from primary").
			return slices.ContainsFunc(a.from, func(m Member) bool {
				return m.Peer != c.cfg.Self && !c.cs.crashed[m.ID] && c.isAlive(m.ID)
			})
		}
		hs := c.holdersAt(s, a.round-1)
		at := c.cs.at(a.round - 1)
		for i, h := range hs {
			if a.noCopy {
				// The route said it has none: only a live replica of
				// that round, or a live peer this wait counts on, may.
				if m, ok := at.member(h); i > 0 && ok && h != c.cfg.Self && !c.cs.crashed[m.ID] && c.isAlive(m.ID) {
					return true
				}
				continue
			}
			if i == 0 && !c.routeMe(s, a.round-1) || i > 0 && !c.isMeIn(h, at) {
				return true
			}
		}
		if a.noCopy {
			return slices.ContainsFunc(a.from, func(m Member) bool {
				return m.Peer != c.cfg.Self && !c.cs.crashed[m.ID] && c.isAlive(m.ID)
			})
		}
		return false
	}
	for _, m := range a.from {
		if m.Peer != c.cfg.Self && !c.cs.crashed[m.ID] {
			return true
		}
	}
	return false
}

func sortedInts[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var _ = model.Sparse{}
