package sim

import (
	"fmt"
	"slices"
	"sort"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// network is the simulated links between the peers: the messages in
// flight, each with the network step it arrives at, and the pairs of peers
// a partition cuts apart. During the chaos window (Faults.Chaos) it drops,
// duplicates and delays what it is given (Faults.Drop, Dup, Delay: delays
// reorder); a message a peer sends itself takes no step and meets no
// fault. A cut pair loses what it sends each other at delivery. It also
// keeps what each peer last heard of every process: the membership a
// peer's gossip would give its core (alive).
//
// It draws from the run's one stream, in the order the run sends.
type network struct {
	r        *rng
	f        Faults
	inFlight []msgInFlight
	seq      int                // the order messages were posted in: ties of arrival go by it
	cut      map[[2]string]bool // partitioned pairs of peers
	lastSeen map[[2]string]int  // (peer, member ID) -> the last tick peer heard that process
	// watch logs what happens to a message about the watched shard
	// (Options.WatchShard): "drop", "send".
	watch func(what, from, to string, m *wire.Core)
}

// msgInFlight is a message on its way.
type msgInFlight struct {
	from, to string
	to2      *proc // the process it was sent to (a restart does not get it)
	msg      *wire.Core
	at       int // the network step it arrives at
	seq      int
}

func newNetwork(r *rng, f Faults, watch func(what, from, to string, m *wire.Core)) *network {
	return &network{r: r, f: f, cut: map[[2]string]bool{}, lastSeen: map[[2]string]int{}, watch: watch}
}

// post puts msg from peer from on its way to peer to (its process dst, if
// running) at network step now; chaos says whether the faults of the
// chaos window apply.
func (n *network) post(from, to string, dst *proc, msg *wire.Core, now int, chaos bool) {
	if to == from {
		n.seq++
		n.inFlight = append(n.inFlight, msgInFlight{from: from, to: to, to2: dst, msg: msg, at: now, seq: n.seq})
		return
	}
	f := n.f
	if chaos && f.Drop > 0 && n.r.float() < f.Drop {
		n.watch("drop", from, to, msg)
		return
	}
	n.watch("send", from, to, msg)
	copies := 1
	if chaos && f.Dup > 0 && n.r.float() < f.Dup {
		copies = 2
	}
	for range copies {
		delay := 1
		if chaos && f.Delay > 0 {
			delay += n.r.intn(f.Delay + 1)
		}
		n.seq++
		n.inFlight = append(n.inFlight, msgInFlight{from: from, to: to, to2: dst, msg: msg, at: now + delay, seq: n.seq})
	}
}

// due takes the messages that arrive by step now off the network, in the
// order they arrive (then were posted).
func (n *network) due(now int) []msgInFlight {
	var due []msgInFlight
	keep := n.inFlight[:0]
	for _, m := range n.inFlight {
		if m.at <= now {
			due = append(due, m)
		} else {
			keep = append(keep, m)
		}
	}
	n.inFlight = keep
	sort.Slice(due, func(i, j int) bool {
		if due[i].at != due[j].at {
			return due[i].at < due[j].at
		}
		return due[i].seq < due[j].seq
	})
	return due
}

// isCut reports whether a partition separates peers a and b.
func (n *network) isCut(a, b string) bool { return n.cut[[2]string{a, b}] }

// partition cuts every peer of peers in side off from every peer not in it.
func (n *network) partition(peers []string, side map[string]bool) {
	for _, a := range peers {
		for _, b := range peers {
			if side[a] != side[b] {
				n.cut[[2]string{a, b}] = true
			}
		}
	}
}

// heal ends every partition.
func (n *network) heal() { clear(n.cut) }

// hear records at tick that every running process (peer, member ID) of run
// heard every other one not cut off from it.
func (n *network) hear(tick int, run []*proc) {
	for _, a := range run {
		for _, b := range run {
			if !n.isCut(a.peer, b.peer) {
				n.lastSeen[[2]string{a.peer, fmt.Sprint(b.member)}] = tick
			}
		}
	}
}

// alive is the member IDs of the processes of procs that peer heard
// within the last dead ticks before tick, ascending: what its membership
// calls alive.
func (n *network) alive(tick, dead int, peer string, procs []*proc) []uint64 {
	var ids []uint64
	for _, b := range procs {
		if t, ok := n.lastSeen[[2]string{peer, fmt.Sprint(b.member)}]; ok && tick-t < dead {
			ids = append(ids, b.member)
		}
	}
	slices.Sort(ids)
	return ids
}
