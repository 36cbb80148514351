package sim

import (
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/node/train"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "replay this seed only (with -v: its event trace)")
	seedsFlag = flag.Int("seeds", 0, "seeds per mix (0: the CI default; thousands for a soak)")
	mixFlag   = flag.String("mix", "", "run only the mixes whose name starts with this")
	dumpFlag  = flag.Int("dump", 0, "with -seed: log every core's state at this tick")
	shardFlag = flag.Int("shard", -1, "with -seed: log every trace event of this shard")
	firstFlag = flag.Uint64("first", 1, "the first seed of each mix (seeds first..first+seeds-1: a soak beyond the seeds run before)")
	loadFlag  = flag.Int("load", 0, "ring load bound (MaxLoadPercent) for every mix instead of its own")
)

// mix is a family of schedules: one configuration of the run and of its
// faults; seeds vary everything else.
type mix struct {
	name  string
	seeds int
	opts  func(seed uint64) Options
}

// base is the options every mix starts from. Its ring keeps the load bound
// of 125% that the mixes' seeds (and TestFixedSeeds' schedules) were found
// with; the default bound, 100% since the scaling issue, moves more shards
// between remaining members on churn and fails on more seeds (200 seeds
// per mix: go test ./node/train/sim -run TestSeeds -seeds 200 -load 100
// fails sync/full-churn 14, 41, 141, 165, 167, 196, sync/encoded 18, 70,
// ssp/partition 75, async/partition 75, sync/crash-r1 187; with -load 125
// sync/crash-r1 187, sync/full-churn 42, 165, all fixed since, as is
// sync/encoded 192, found at 300 seeds).
func base(seed uint64, mode train.Mode, replicas int) Options {
	return Options{
		Seed: seed, Mode: mode, Staleness: 2, Gather: train.Need, Peers: 3, Replicas: replicas, Shards: 16, VNodes: 8, MaxLoadPercent: 125,
		Dim: 200, Rows: 60, Batch: 6, Fields: 4, Epochs: 1, MaxTicks: 40000,
		Faults: Faults{DeadAfter: 40},
	}
}

func mixes() []mix {
	var out []mix
	add := func(name string, seeds int, f func(seed uint64) Options) {
		out = append(out, mix{name: name, seeds: seeds, opts: f})
	}
	for _, mode := range []train.Mode{train.Sync, train.SSP, train.Async} {
		m := mode
		add(fmt.Sprintf("%s/clean", m), 20, func(seed uint64) Options { return base(seed, m, 1) })
		add(fmt.Sprintf("%s/lossy", m), 40, func(seed uint64) Options {
			o := base(seed, m, 1)
			o.Faults.Drop, o.Faults.Dup, o.Faults.Delay, o.Faults.Chaos = 0.05, 0.05, 6, 3000
			return o
		})
		add(fmt.Sprintf("%s/join", m), 40, func(seed uint64) Options {
			o := base(seed, m, 1)
			o.Faults.Joins, o.Faults.Chaos = 2, 300
			return o
		})
		add(fmt.Sprintf("%s/leave", m), 40, func(seed uint64) Options {
			o := base(seed, m, 2)
			o.Peers = 4
			o.Faults.Leaves, o.Faults.Chaos = 1, 300
			return o
		})
		// One copy of each shard, and a leave on a network that reorders:
		// a leaver's handoff is the only way its shards' rounds reach
		// their new primary (no mix had a leave with one replica in a
		// ring; see fast-leave for what was lost).
		add(fmt.Sprintf("%s/leave-r1", m), 20, func(seed uint64) Options {
			o := base(seed, m, 1)
			o.Peers = 4
			o.Faults.Leaves, o.Faults.Delay, o.Faults.Chaos = 1, 3, 300
			return o
		})
		// A fast network (ten network steps a tick, as loopback is to the
		// core's 10 ms tick), the product's 64 shards with the exact load
		// bound, and a leave: many rounds go by while a configuration
		// reaches the peers one by one, so owners answer pushes from workers
		// that do not know it yet ("moved" for some shards, values for the
		// others, in either order): a worker took such an answer for its
		// whole push and the moved shards never got its round (11 of the
		// first 100 seeds failed, in async and ssp alike).
		add(fmt.Sprintf("%s/fast-leave", m), 20, func(seed uint64) Options {
			o := base(seed, m, 1)
			o.Peers, o.Steps, o.Rows, o.Batch, o.Shards, o.VNodes, o.MaxLoadPercent = 4, 10, 1500, 5, 64, 64, 100
			o.Faults.Leaves, o.Faults.Delay, o.Faults.Chaos = 1, 20, 100
			return o
		})
		add(fmt.Sprintf("%s/crash-r2", m), 40, func(seed uint64) Options {
			o := base(seed, m, 2)
			o.Peers = 4
			o.Faults.Crashes, o.Faults.Chaos = 1, 300
			return o
		})
		add(fmt.Sprintf("%s/crash-r1", m), 40, func(seed uint64) Options {
			o := base(seed, m, 1)
			o.Peers = 4
			o.Faults.Crashes, o.Faults.Chaos = 1, 300
			return o
		})
		add(fmt.Sprintf("%s/restart", m), 40, func(seed uint64) Options {
			o := base(seed, m, 2)
			o.Peers = 4
			o.Faults.Restarts, o.Faults.Chaos = 1, 300
			return o
		})
		add(fmt.Sprintf("%s/partition", m), 40, func(seed uint64) Options {
			o := base(seed, m, 2)
			o.Peers = 5
			o.Faults.Partitions, o.Faults.Chaos = 1, 400
			return o
		})
		// The master topology: one peer holds every shard, the others
		// none (an owner of nothing still ends the run: async/master
		// never ended before).
		add(fmt.Sprintf("%s/master", m), 20, func(seed uint64) Options {
			o := base(seed, m, 1)
			o.Master = true
			o.Faults.Drop, o.Faults.Dup, o.Faults.Delay, o.Faults.Chaos = 0.05, 0.05, 6, 3000
			return o
		})
		add(fmt.Sprintf("%s/master-churn", m), 20, func(seed uint64) Options {
			o := base(seed, m, 1)
			o.Master, o.Peers = true, 4
			o.Faults.Joins, o.Faults.Leaves, o.Faults.Chaos = 1, 1, 300
			return o
		})
		add(fmt.Sprintf("%s/chaos", m), 20, func(seed uint64) Options {
			o := base(seed, m, 2)
			o.Peers = 5
			o.Rows = 120
			o.Faults = Faults{Drop: 0.02, Dup: 0.02, Delay: 4, Crashes: 1, Restarts: 1, Joins: 1, Leaves: 1, Partitions: 1, Chaos: 600, DeadAfter: 40}
			return o
		})
	}
	for _, mode := range []train.Mode{train.Sync, train.SSP, train.Async} {
		m := mode
		// Every fault of chaos on the fast network of fast-leave.
		add(fmt.Sprintf("%s/fast-chaos", m), 10, func(seed uint64) Options {
			o := base(seed, m, 2)
			o.Peers, o.Steps, o.Rows, o.Batch, o.Shards, o.VNodes, o.MaxLoadPercent = 5, 10, 600, 5, 64, 64, 100
			o.Faults = Faults{Drop: 0.02, Dup: 0.02, Delay: 20, Crashes: 1, Restarts: 1, Joins: 1, Leaves: 1, Partitions: 1, Chaos: 600, DeadAfter: 40}
			return o
		})
	}
	add("sync/full-clean", 20, func(seed uint64) Options {
		o := base(seed, train.Sync, 1)
		o.Gather = train.Full
		return o
	})
	add("sync/full-churn", 40, func(seed uint64) Options {
		o := base(seed, train.Sync, 2)
		o.Gather, o.Peers = train.Full, 4
		o.Faults = Faults{Drop: 0.02, Delay: 3, Crashes: 1, Joins: 1, Leaves: 1, Chaos: 400, DeadAfter: 40}
		return o
	})
	add("sync/encoded", 10, func(seed uint64) Options {
		o := base(seed, train.Sync, 2)
		o.Encode, o.Peers = true, 4
		o.Faults = Faults{Drop: 0.02, Delay: 3, Crashes: 1, Joins: 1, Chaos: 400, DeadAfter: 40}
		return o
	})
	// Every message through the wire codec with full read copies: replies
	// carry rows (FlagRows), often none, which the codec sends without a
	// width.
	add("sync/encoded-full", 10, func(seed uint64) Options {
		o := base(seed, train.Sync, 2)
		o.Encode, o.Gather, o.Peers = true, train.Full, 4
		o.Faults = Faults{Drop: 0.02, Delay: 3, Crashes: 1, Joins: 1, Chaos: 400, DeadAfter: 40}
		return o
	})
	// Every mix again with windows of 4 local steps (h4/...): a round is a
	// window, workers push their changes with optimizer state, owners add
	// them. Full gather keeps no optimizer state, so its mixes have no
	// window variant (train.Config.Validate refuses it).
	for _, mx := range slices.Clone(out) {
		if mx.opts(1).Gather == train.Full {
			continue
		}
		f := mx.opts
		add("h4/"+mx.name, mx.seeds, func(seed uint64) Options {
			o := f(seed)
			o.LocalSteps = 4
			return o
		})
	}
	// Windows combined by their mean (train.Mean) and by the capped sum
	// (train.Capped), clean and with every fault, in each mode.
	for _, comb := range []train.Combine{train.Mean, train.Capped} {
		for _, mode := range []train.Mode{train.Sync, train.SSP, train.Async} {
			for _, name := range []string{"clean", "chaos"} {
				f := mixesByNameIn(out)[fmt.Sprintf("%s/%s", mode, name)].opts
				add(fmt.Sprintf("h4-%v/%s/%s", comb, mode, name), 20, func(seed uint64) Options {
					o := f(seed)
					o.LocalSteps, o.Combine = 4, comb
					return o
				})
			}
		}
	}
	// Windows whose workers keep the optimizer state (Options.LocalState):
	// weights only on the wire, each process's own accumulators, combined
	// as the command line's auto does for logreg windows of 4 (the sum in
	// sync, the mean in ssp and async).
	for _, mode := range []train.Mode{train.Sync, train.SSP, train.Async} {
		comb := train.Sum
		if mode != train.Sync {
			comb = train.Mean
		}
		for _, name := range []string{"clean", "chaos"} {
			f := mixesByNameIn(out)[fmt.Sprintf("%s/%s", mode, name)].opts
			add(fmt.Sprintf("h4-local/%s/%s", mode, name), 20, func(seed uint64) Options {
				o := f(seed)
				o.LocalSteps, o.LocalState, o.Combine = 4, true, comb
				return o
			})
		}
	}
	return out
}

// mixesByNameIn indexes mixes by name.
func mixesByNameIn(ms []mix) map[string]mix {
	all := map[string]mix{}
	for _, mx := range ms {
		all[mx.name] = mx
	}
	return all
}

// TestSeeds runs every mix over its seeds (or -seeds N each), or replays
// -seed N.
func TestSeeds(t *testing.T) {
	start := time.Now()
	runs, fails, noQuorum := 0, 0, 0
	for _, mx := range mixes() {
		if *mixFlag != "" && !strings.HasPrefix(mx.name, *mixFlag) {
			continue
		}
		n := mx.seeds
		if *seedsFlag > 0 {
			n = *seedsFlag
		}
		for i := range n {
			seed := *firstFlag + uint64(i)
			if *seedFlag != 0 {
				if i > 0 {
					break
				}
				seed = *seedFlag
			}
			o := mx.opts(seed)
			if *loadFlag != 0 {
				o.MaxLoadPercent = *loadFlag
			}
			o.Record = *seedFlag != 0 && testing.Verbose()
			o.DumpAt = *dumpFlag
			o.WatchShard = *shardFlag + 1
			res := Run(o)
			runs++
			if res.NoQuorum && !res.Failed() {
				noQuorum++
				t.Logf("%s seed %d: the raft group lost its quorum; the peers stopped with ErrNoQuorum", mx.name, seed)
			}
			if res.Failed() {
				fails++
				t.Errorf("%s seed %d: %d violations (replay: go test ./node/train/sim -run TestSeeds -mix %s -seed %d -v):\n  %s",
					mx.name, seed, len(res.Violations), mx.name, seed, strings.Join(res.Violations, "\n  "))
				if fails > 10 {
					t.Fatal("too many failures")
				}
			}
			if o.Record {
				for _, l := range res.Trace {
					t.Log(l)
				}
				t.Logf("ticks %d rounds %d model %x stats %+v", res.Ticks, res.Rounds, res.Model, res.Stats)
			}
		}
	}
	t.Logf("%d runs, %d failed, %d stopped on a lost raft quorum (ErrNoQuorum, checked: most voters gone), %v",
		runs, fails, noQuorum, time.Since(start).Round(time.Millisecond))
}

// TestFixedSeeds replays schedules that once broke the protocol (each
// comment says how), including chaos schedules: they must keep passing.
func TestFixedSeeds(t *testing.T) {
	type fixed struct {
		mix  string
		seed uint64
		was  string
	}
	cases := []fixed{
		{"async/master", 1, "a member that is primary of no shard (the master topology) never said it was ready: the run never ended"},
		{"ssp/master", 1, "a member that is primary of no shard (the master topology) never said it was ready: the run never ended"},
		{"sync/chaos", 2, "a takeover replaced the handoff of the round before"},
		{"sync/chaos", 3, "a leaver that had dropped its copy was waited for"},
		{"sync/chaos", 4, "a takeover was sent before the rounds its sender still applied"},
		{"sync/chaos", 9, "a leaver gone for good was still a source"},
		{"sync/chaos", 26, "a copy kept from an older configuration passed for current"},
		{"sync/chaos", 48, "a leaver left as a raft voter: the group lost its quorum"},
		{"sync/chaos", 61, "a handoff to a leaver that still applied its last rounds was dropped"},
		{"sync/chaos", 97, "a peer that ended alone was owed its rounds"},
		{"sync/chaos", 34, "a leaver dropped from the raft group while cut off never learned the configurations since; later, an earlier leader's fence held its pushes forever"},
		{"sync/chaos", 37, "a takeover's copy that lacked rounds its crashed holders had answered waited for them forever"},
		{"sync/chaos", 20, "a takeover from a later round left an earlier round routed here waiting forever"},
		{"sync/chaos", 62, "a shard restarted from nothing ignored a survivor's copy and diverged from its replica"},
		{"sync/chaos", 47, "a handoff after a takeover's rounds was acknowledged and not installed"},
		{"ssp/chaos", 6, "a leaver whose run had gone waited forever"},
		{"ssp/chaos", 2, "an applied push waited for shards moved away since"},
		{"ssp/chaos", 41, "values were declared final while a leaver's last pushes were still on their way"},
		{"async/chaos", 10, "a leaver waited forever for a replica to acknowledge a forward of configurations ago"},
		{"ssp/chaos", 42, "a learner that had crashed unnoticed was made a voter: two of four voters dead"},
		{"sync/full-churn", 26, "a joiner admitted as the run ended never filled its read copy"},
		{"ssp/chaos", 31, "a joiner handed its shards after the final round never knew the values were final"},
		{"ssp/chaos", 65, "shards restarted from nothing held ssp answers back for workers whose rounds went with them"},
		{"ssp/chaos", 53, "a restarted peer was never handed a shard its predecessor had been handed by the same holder"},
		{"ssp/chaos", 26, "a forward naming a shard handed over since was acknowledged and not applied to the others"},
		{"async/chaos", 13, "a dead voter was removed before a learner took a vote: two voters, and one crashed"},
		{"async/chaos", 14, "the raft group had two voters, and one crashed: no quorum"},
		{"sync/full-churn", 37, "a leaver's vote went before another member's came: two voters, and one crashed"},
		{"async/chaos", 29, "a handoff's copy sent again for a later configuration was installed though older than the holder's"},
		{"async/chaos", 5, "a leader that had left lost its transfer's MsgTimeoutNow and stayed leader, proposing nothing"},
		{"async/chaos", 77, "a forward of the crashed primary applied by the new primary never reached its replicas"},
		{"async/chaos", 2, "forwards to a leaver that had gone were retried forever"},
		{"async/chaos", 6, "peers removed while alive left the raft group without a quorum"},
		{"ssp/partition", 10, "a shard lost with all its holders was judged before its configuration"},
		{"async/crash-r2", 39, "shards moved after the final round were looked for at their old primary"},
		{"async/lossy", 34, "a gap was given up on without any crash"},
		{"sync/full-churn", 11, "a lost handoff was resent only after the sender crashed"},
		{"sync/encoded", 192, "a shard state with no rows arrived without a width (the codec's one form of no rows) and was refused, until the shard restarted from nothing"},
		{"sync/crash-r1", 187, "a shard whose only holder crashed as the run ended waited forever for a contribution to restart it at"},
		{"async/chaos", 300, "a primary that went final under its newest configuration missed a push for a shard the next one gave it"},
		{"ssp/chaos", 256, "a primary decided alone that the values were final; the others waited for one that never did"},
		{"sync/full-churn", 55, "with full read copies a replica freed its copy as soon as it applied the round before a handoff; the primary crashed before its copy arrived, and the shard restarted from nothing"},
		{"sync/chaos", 270, "a takeover waited for the peer of the round before, a leaver whose own takeover waited for peers that had all crashed"},
		{"sync/chaos", 438, "a handoff paid to a crashed incarnation of the new holder was never sent to its restarted successor, which waited forever"},
		{"async/chaos", 27, "a holder given a shard back kept the copy it had handed over, not yet freed, and handed it on without the rounds applied meanwhile"},
		{"async/chaos", 384, "a replica whose forward was lost became the primary after the primary that sent it handed the shard on and crashed: a worker's round was gone"},
		{"async/chaos", 627, "a replica missed a forward its primary never sent again, and was the only copy left"},
		{"async/chaos", 969, "a replica missed a forward its primary never sent again, and was the only copy left"},
		{"async/chaos", 495, "a leaver's handoff to a peer that no longer held the shard was never acknowledged: the leaver never exited"},
		{"ssp/chaos", 209, "a restarted worker took the answer to its predecessor's request of the same number for its own, and computed a round too stale"},
		{"ssp/chaos", 834, "a restarted worker took the answer to its predecessor's request of the same number for its own, and computed a round too stale"},
		{"ssp/chaos", 343, "a replica missed a forward of a primary that then handed the shard on and crashed; its ask went only to that primary, and the round was skipped"},
		{"ssp/chaos", 255, "a primary handing a shard to a new primary asked that one for its copy, which held its own handoff"},
		{"sync/chaos", 1225, "a takeover of a round whose copy had been handed over as of that round asked its sender again, which never answered a handoff it had paid"},
		{"sync/chaos", 1388, "a takeover of a round whose copy had been handed over as of that round asked its sender again, which never answered a handoff it had paid"},
		{"sync/chaos", 1660, "a takeover of a round whose copy had been handed over as of that round asked its sender again, which never answered a handoff it had paid"},
		{"sync/chaos", 746, "a shard whose every holder crashed waited for a push to restart at, while every live worker was past its round and only pulled"},
		{"sync/chaos", 635, "the crashed route of a round had handed the shard on; the replica that took the round over applied it again without the crashed route's contribution, and the two copies differed"},
		{"async/fast-leave", 6, "an owner that had applied a new configuration answered a push's other shards before its 'moved' for some: the worker took the answer for its whole push, and the moved shards never got the round"},
		{"async/fast-leave", 43, "a push narrowed by 'moved' and kept for a gap was answered later without naming its shards: the worker took the answer for its whole push"},
		{"sync/chaos", 1372, "a shard was freed while its last round's answers still waited for their forwards (answered with a reset shard's values)"},
		{"sync/chaos", 1418, "a shard was freed while its last round's answers still waited for their forwards; in a later schedule, a handoff awaited for a configuration replaced at the same round was installed after a newer one made the peer the next round's route, and it never waited for that round's handoff: each of two peers waited for the other's round"},
		{"sync/chaos", 884, "a voter whose log missed the promotion of a learner that then led refused its appends as a learner's (raft authority A3) and stalled the run: it now asks its voters who leads"},
		{"sync/chaos", 1801, "a shard was freed while its last round's answers still waited for their forwards; replicas ended unlike their primary"},
		{"sync/fast-chaos", 32, "a leaver freed a shard whose last forward was lost, then took a resent push of that round over and applied it a second time without a crashed worker"},
		{"sync/fast-chaos", 100, "a takeover applied a round on the first copy that came (a replica's) while the next round's holder's further copy was a step behind"},
		{"sync/chaos", 1440, "a takeover's owe paid with a copy from before the round was acknowledged, and the holder ignored the asks for the round since: the shard restarted from nothing while it held it"},
		{"sync/chaos", 1805, "a worker's push of a round whose route left went to the next round's route, which said 'moved', back and forth forever, while the shard waited there to restart"},
		{"sync/chaos", 165, "two shards restarted from nothing each waited for a worker's contribution that the crashed holder had answered, while the other shard held that worker up"},
		{"sync/chaos", 1885, "a shard restarted from nothing waited forever for a leaver's contribution that the crashed holder had answered"},
		{"sync/fast-chaos", 88, "a replica taking over waited for the leaver that applied the round before, which had handed the shard to peers that crashed and waited for it from the replica: a stall"},
		{"ssp/chaos", 1427, "the run went final without a joiner's first round (lost in transit), whose later pushes waited behind the gap: a leaver the owner had no clock of counted as in"},
		{"ssp/chaos", 1332, "a shard restarted from nothing and handed on lost its restart: its new primary held every ssp answer for rounds that went with the crashed holders"},
		{"sync/fast-chaos", 428, "a survivor that got a further copy from the taker itself paid it back, twice, and ignored its asks since: the shard restarted from nothing while it held it (found with the fix for sync/chaos 1991)"},
		{"sync/fast-chaos", 238, "a joiner's late join answer from a contact that did not lead mapped the contact's raft ID to the leader's peer: the leader's messages to that member went to another peer, and it never learned a configuration again"},
		{"sync/fast-chaos", 869, "a survivor's copy stopped at a round a leaver had applied and handed to holders that crashed since: the takeover waited for that round forever"},
		{"sync/fast-chaos", 648, "a new holder waited for the shard from the round before's route, which waited for it, as a takeover of a later round, from the new holder: every holder that had it crashed"},
		{"ssp/fast-chaos", 935, "a replica asked its primary for a refresh of its copy; the primary had none and waited for that replica's handoff, and ignored the ask: the replica's hole was skipped as lost while the forward that filled it, deferred, came again and again"},
		{"sync/fast-chaos", 116, "a leaver handed on a shard it had restarted from nothing, freed it, and then a join replaced the leave's configuration at the same round: the joiner asked the leaver for the shard for 1,400 ticks, and a late push of the round before made the leaver restart the shard a second time, so the joiner's copy forked from its replica's"},
		{"sync/fast-chaos", 937, "a joiner asked a leaver for a shard the leaver had restarted from nothing, handed to others and freed; it asked until the leaver restarted the shard a second time for a late push of an earlier round and handed that copy over: the joiner's copy forked from its replica's"},
		{"sync/fast-chaos", 1863, "a shard's primary applied a round, handed the shard on (the handoff was dropped) and crashed; the crash moved that closed round to a peer with an older copy, which owed the shard to the next round's holder but never applied the round again, and the holder asked it for 40,000 ticks while the round's replica held the copy"},
		{"sync/fast-chaos", 1951, "a peer kept a copy of a shard it had handed on as of round 1; when both later holders crashed and the round moved to it, that copy counted as current for round 7, so the shard was neither taken over nor restarted and the last peer waited for it forever"},
		{"sync/fast-chaos", 143, "joiners whose contact had been removed asked each other, and each answered with the leader it had heard of, long gone: every answer counted as hearing from the run, so none gave up, and the run never ended"},
		{"sync/chaos", 1991, "a survivor paid a takeover with its copy while the handoff of a later round was held by a partition, and never sent the later copy: the taker waited for a leaver's round forever"},
		{"sync/full-churn", 577, "a leaving replica freed its copy after its last round, and the primary crashed before its handoff to the new holder arrived: the shard was lost with two copies and one crash"},
		{"sync/full-churn", 1828, "a leaving replica freed its copy after its last round, and the primary crashed before its handoff to the new holder arrived: the shard was lost with two copies and one crash"},
		{"sync/chaos", 295, "a crash moved a round, long applied and handed on by the crashed route, to a new holder that took it over from the replica that missed it: applied again without the crashed worker, the shard forked from the copy handed on"},
		{"sync/full-churn", 1046, "a crash moved a round to the peer it had been handed to as of the round after; that peer never applied it again, and the replica that missed it, the next round's route, waited for it forever"},
		{"sync/chaos", 1226, "a replica that missed a round asked the round's route for its copy, and took the answer, further on than its own, for a copy sent again while it waited for a later handoff: the route's answers waited for that replica forever"},
		{"sync/fast-chaos", 438, "both workers of a round crashed before the peer a handoff had made the round's route got either push: it waited for them forever"},
		{"sync/fast-chaos", 572, "every worker of a round crashed before its route got their pushes (after three peers were removed at once): it waited for them forever"},
		{"sync/fast-chaos", 1545, "a crash made a peer the route of the round before a handoff it awaited: it waited for that handoff from itself, while another member had the shard further on"},
		{"ssp/fast-chaos", 937, "a holder replaying its deferred forwards applied a worker's round, handed the shard on, then applied the worker's next round (deferred again behind it) and acknowledged it: the copy handed on lacked it, and a crash left that copy the only one"},
		{"async/fast-chaos", 1788, "a forward of a shard's primary, dropped and sent again, came four configurations later and was refused as not from a recent primary: the worker's round was a hole at the new primary, whose only other copy had crashed, and was given up on as lost"},
		{"sync/partition", 751, "a shard lost with its holders after the last round restarted as of the newest configuration's start, past the last round: the final round its holders waited for rose with it, and no shard ever got there"},
		{"sync/chaos", 11, "a replica refused, as no longer the round's route, the forward of a route a crash had removed while it was cut off with a leaver, and acknowledged it: the route answered the leaver, the leaver went, and the round's new route waited for its contribution forever"},
		{"sync/fast-chaos", 875, "a crash moved the round before a handoff to the new holder that awaited it, which asked the shard's live replica for its copy and restarted the shard from nothing in the same step: the copy came a step later, was ignored, and the replica differed from the primary"},
		{"async/chaos", 92, "the raft group lost its quorum, rightly (four voters, two crashed), in an earlier version's schedule (TestQuorumLossIsReported)"},
		{"async/chaos", 273, "the raft group lost its quorum, rightly (every voter but one gone), in an earlier version's schedule (TestQuorumLossIsReported)"},
		{"async/chaos", 124, "a primary whose values were final applied the forward of a primary before it, cut off and removed since, after it had answered final pulls: the peers fetched different models"},
		{"async/fast-chaos", 78, "a new primary applied the crashed primary's forward of a worker's round and forwarded it on; the worker's push of that round, sent again, was answered at once while that forward was lost, and the round went with the new primary when it was removed"},
		{"h4/async/chaos", 12, "a peer cut off as the run ended fetched the final values last: a primary removed since had been replaced by its replica, whose copy differed in the last bits (async replicas apply forwards in each worker's order, not the primary's: E9), and five shards whose two holders had finished and exited had restarted from nothing (the simulator allows only those to differ)"},
		{"h4/sync/chaos", 134, "the simulator compared the replica of a shard restarted from nothing after the end with the shard's final primary, which had finished, exited and been declared crashed since"},
		{"h4/ssp/chaos", 776, "the simulator compared when fetches ended with when a shard was restarted from nothing: two peers had its final values before the loss and the third its restart, and all three fetches ended after the restart"},
		{"h4/sync/encoded", 768, "the simulator required the primary named after the end to hold a shard: the joiner that held its final values awaited it again as of the round after the last, which never runs"},
		{"sync/leave", 80, "the simulator compared a replica with the primary a leave's configuration applied after the end named, which the peers exited before the handoff reached"},
		{"h4/sync/encoded", 77, "a crashed worker's push of its last round, with data, reached one primary and not the others: those applied the round without it as the last and answered the workers final, and that primary waited for their pushes of the next round forever (E10)"},
		{"h4/sync/encoded", 82, "a stall at the end after a join and a crash; passes with E10, fails without it (not traced further)"},
		{"h4/sync/chaos", 167, "a stall at the end with three peers removed and rejoining as the run ended; passes with E10, fails without it"},
		{"h4/sync/chaos", 73, "a stall at the end after a leave and two crashes: every final pull of two shards went to the leaver, which had handed them on and freed them; passes with E10, fails without it"},
		{"h4/sync/chaos", 88, "a stall at the end after two crashes and a leave; passes with E10, fails without it (not traced further)"},
		{"h4/sync/chaos", 257, "a crash after the end made a peer that held a shard's final values await it as of the round after the last from the last round's route, which had sent its copy as of that round already and would not again: every final pull of the shard there waited forever (E12)"},
		{"h4/ssp/chaos", 30, "a primary applied a worker's round, its forward to the replica was lost, and it crashed after the values went final; the replica, primary since, answered the worker's push of that round, sent again, without applying it, and the round was lost (E11)"},
		{"h4/async/chaos", 161, "a primary crashed after the values went final with a worker's round its replica had not got (the forward cut off); the replica, primary since, answered the worker's push of it, sent again, without applying it (E11)"},
		{"h4/sync/chaos", 299, "a crash's configuration gave a takeover the last round of a shard; a leaver's final copy of another shard, as of the round before the last, made the taker take that for the end, and it handed the shard to a joiner, its new primary, before it applied that round: the joiner never answered its final pulls (E15)"},
		{"h4-mean/sync/chaos", 299, "the schedule of h4/sync/chaos 299 with windows combined by their mean: the same stall (E15)"},
		{"h4/async/chaos", 387, "both holders of a shard were gone after the values went final; its new primary restarted it, sent its replica the final copy, then applied a worker's two late rounds, whose forwards came in reverse order: the replica took the later for the worker's first round there and dropped the earlier, and ended different from the primary (H28)"},
		{"h4-mean/async/chaos", 387, "the schedule of h4/async/chaos 387 with windows combined by their mean: the same replica (H28)"},
		{"h4/sync/fast-chaos", 330, "a partitioned leader removed every other member and the shards restarted over and over; a crash then gave a lost shard's rounds to a peer with no copy that no push or pull reached, while the holder it owed the shard to as of the next round had the workers' pulls and waited for its handoff: each waited for the other (H29)"},
		{"h4/sync/encoded", 729, "the leader admitted a joiner after its done push of the last round; one route learned of the join's configuration before it applied that round and waited for the next forever, while the others had applied it as the last and answered the workers final (E10: only a configuration starting at the next round keeps the run going)"},
		{"sync/leave-r1", 562, "a leave's configuration started past the last round; the leaver's handoff of two shards to a member reached it after it had finished and exited, and the leaver, whose values were final, waited for the acknowledgement until it found every other member gone and failed (E16)"},
		{"sync/leave-r1", 920, "the schedule of seed 562 with one shard: the leaver's handoff of shard 3 reached its new holder after it had finished and exited (E16)"},
		{"sync/chaos", 1257, "both holders of round 3 of a shard crashed; the peer that took the round over restarted the shard from nothing at round 4, on the pull of a joiner whose first round was 4, while the two surviving workers had not pushed round 3 yet, and handed that copy to the round's holders; it left and freed it, then their pushes of round 3 came and it restarted the shard a second time, applied round 3 and handed that copy to a joiner, the new replica: the replica differed from its primary (H31: only a pull from a worker of the round before counts)"},
		{"sync/fast-chaos", 725, "a crash gave round 2 of a shard to a joiner, which installed a survivor's copy as of round 1 and stopped waiting; its one ask to the route of round 1, a leaver, came before the leaver had applied the configurations that admitted the joiner and was dropped as from no member; the leaver applied round 1 and handed the shard only to another holder, and the joiner held round 2 unapplied for good (H32: the taker asks again every retry interval)"},
		{"sync/fast-chaos", 1321, "stalled on the code of b14c32a (H31) with raft sound at the end, found by a soak of seeds 1,301-2,000; it passes since H32 (a takeover holding a copy older than its round asks again), which of its asks mattered is not traced"},
		{"sync/chaos", 23, "a partition cut the raft leader off with one voter; the majority removed the leader and a second voter crashed, so the majority needed that voter, which kept following the old leader (its heartbeats held the voter's lease, A4) while the majority dropped them as from a node no longer in the group: the majority's pre-votes were refused for 40,000 ticks (C11: a leader with no majority steps down)"},
		{"sync/chaos", 607, "a leader cut off in a minority stepped down (C11) and campaigned after the heal; a voter that still took it for its leader counted each of its pre-votes as hearing from it, so its lease was renewed just before each vote came and the vote was refused (A4), election after election: only appends and heartbeats renew a lease"},
		{"sync/chaos", 1510, "the route of round 6 of a shard crashed after it applied the round and forwarded it to its replica, its handoff to the route of round 7 lost on the way; the configuration that removed it, starting at round 8, moved round 6 to a peer that never held the shard and that waited for round 7's route to hand it over as of round 8; it said so to round 7's route, which then counted on the replica's copy and never asked for it (H33: the replicas of the round before are asked)"},
		{"ssp/chaos", 466, "the only member of the run led a raft group with a dead voter it could not remove (two voters); stepping down for lack of a majority (C11 without its exception) it lost E5's right to go final alone and stopped with ErrNoQuorum"},
	}
	// Schedules found with the exact load bound (-load 100), which moves
	// more shards between remaining members on a leave or join.
	exact := []fixed{
		{"sync/leave-r1", 50, "a shard handed over final by another peer made its receiver final while its own last round was still on the way: it handed a shard on without that round, and its new holder never finished it"},
		{"sync/leave-r1", 257, "a shard handed over final by another peer made its receiver final while its own last round was still on the way: it handed a shard on without that round, and its new holder never finished it"},
	}
	all := mixesByName()
	run := func(mixName string, seed uint64, load int, was string) {
		mx, ok := all[mixName]
		if !ok {
			t.Fatalf("no mix %s", mixName)
		}
		o := mx.opts(seed)
		if load != 0 {
			o.MaxLoadPercent = load
		}
		res := Run(o)
		if res.Failed() {
			t.Errorf("%s seed %d load %d (once: %s): %d violations:\n  %s", mixName, seed, o.MaxLoadPercent, was, len(res.Violations), strings.Join(res.Violations, "\n  "))
		} else if res.NoQuorum {
			t.Errorf("%s seed %d load %d (once: %s): the raft group lost its quorum (it finished before)", mixName, seed, o.MaxLoadPercent, was)
		}
	}
	for _, tc := range cases {
		run(tc.mix, tc.seed, 0, tc.was)
	}
	for _, tc := range exact {
		run(tc.mix, tc.seed, 100, tc.was)
	}
}

// mixesByName is mixes() keyed by name.
func mixesByName() map[string]mix {
	all := map[string]mix{}
	for _, mx := range mixes() {
		all[mx.name] = mx
	}
	return all
}

// TestQuorumLossIsReported replays schedules whose faults take most of the
// raft voters away before the group can replace them (raft commits nothing
// without a majority): the peers must stop with train.ErrNoQuorum, which
// the simulator checks against who is really gone, instead of waiting
// forever. (Should the group learn to survive one of them, move it to
// TestFixedSeeds.)
func TestQuorumLossIsReported(t *testing.T) {
	cases := []struct {
		mix  string
		seed uint64
		how  string
	}{
		{"async/chaos", 42, "four voters, two crashed"},
		{"ssp/chaos", 171, "two voters, one crashed"},
		// (A TestFixedSeeds case before, for a replica that handed on its
		// own copy without a worker's round; this schedule loses the
		// quorum.)
		{"async/chaos", 1280, "three voters: the leader crashed, then its successor, before the first was replaced"},
	}
	all := mixesByName()
	for _, tc := range cases {
		res := Run(all[tc.mix].opts(tc.seed))
		if res.Failed() {
			t.Errorf("%s seed %d (%s): %d violations:\n  %s", tc.mix, tc.seed, tc.how, len(res.Violations), strings.Join(res.Violations, "\n  "))
		} else if !res.NoQuorum {
			t.Errorf("%s seed %d (%s): no peer stopped with ErrNoQuorum", tc.mix, tc.seed, tc.how)
		}
	}
}

var digestFlag = flag.String("digest", "", "write, per seed of every mix (-seeds, default 10; -mix filters), a hash of its whole trace, model, stats and traffic to this file")

// TestTraceDigest writes the fingerprint of a fixed set of schedules: a
// refactoring step that claims no behaviour change must leave the file
// byte for byte equal (run it on both commits and diff the files). It
// runs only with -digest:
//
//	go test ./node/train/sim -run TestTraceDigest -digest /tmp/before.txt
func TestTraceDigest(t *testing.T) {
	if *digestFlag == "" {
		t.Skip("fingerprints schedules only with -digest FILE")
	}
	n := 10
	if *seedsFlag > 0 {
		n = *seedsFlag
	}
	var out strings.Builder
	for _, mx := range mixes() {
		if *mixFlag != "" && !strings.HasPrefix(mx.name, *mixFlag) {
			continue
		}
		for i := range n {
			seed := *firstFlag + uint64(i)
			o := mx.opts(seed)
			o.Record, o.Fingerprint = true, true
			res := Run(o)
			h := fnv.New64a()
			for _, l := range res.Trace {
				io.WriteString(h, l)
				h.Write([]byte{'\n'})
			}
			fmt.Fprintf(h, "fingerprint %x ticks %d rounds %d model %x violations %q noquorum %v\n", res.Fingerprint, res.Ticks, res.Rounds, res.Model, res.Violations, res.NoQuorum)
			for _, m := range []any{res.Stats, res.Received, res.Examples, res.TrainBytes, res.TrainMsgs, res.OpBytes, res.OpMsgs, res.Owned} {
				fmt.Fprintf(h, "%v\n", m) // fmt prints maps sorted by key
			}
			fmt.Fprintf(&out, "%s %d %016x %d events\n", mx.name, seed, h.Sum64(), len(res.Trace))
		}
	}
	if err := os.WriteFile(*digestFlag, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
