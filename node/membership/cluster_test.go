package membership

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// This file is the fake network of the scenario and property tests (etcd
// raft's "network" idea): N Membership values, one queue of beats in flight,
// a fake clock, and knobs to delay, drop, partition and crash. Everything is
// deterministic for a given seed. It broadcasts like gossipsub: a beat goes
// to every other running peer; a peer does not receive its own beats.

var epoch0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type flight struct {
	at   time.Time
	n    int // send order, for a stable queue
	from string
	to   string
	beat Beat
}

// node is one simulated peer and what its Readys reported.
type node struct {
	id   string
	m    *Membership
	up   bool
	next time.Time

	joined, left, died, restarted []string // since the last expect-events
	rejected                      []Rejection
	reached                       int
	lastEpoch                     uint64
}

type cluster struct {
	t    testing.TB
	cfg  Config // template: Self and Incarnation are set per peer
	now  time.Time
	rng  *rand.Rand
	inc  uint64 // incarnation counter: strictly growing across joins and restarts
	sent int

	nodes map[string]*node
	order []string // creation order: delivery and tick order are deterministic
	queue []flight

	delay, jitter time.Duration // each delivery takes delay + U[0, jitter)
	drop          float64       // probability a delivery is lost...
	maxDropRun    int           // ...but never more than this many in a row per link
	dropRun       map[[2]string]int
	cut           map[[2]string]bool // partitioned links, both directions

	history map[string][]Beat // every beat each peer sent, for replays
}

func newCluster(t testing.TB, seed uint64) *cluster {
	cfg := DefaultConfig()
	cfg.Job = "job1"
	return &cluster{
		t: t, cfg: cfg, now: epoch0, rng: rand.New(rand.NewPCG(seed, 0x5eed)),
		inc: uint64(epoch0.UnixNano()), nodes: map[string]*node{},
		delay: 10 * time.Millisecond, dropRun: map[[2]string]int{}, cut: map[[2]string]bool{},
		history: map[string][]Beat{},
	}
}

// start runs a peer with a fresh incarnation (join, or restart of a crashed
// peer under the same ID).
func (c *cluster) start(id string) {
	cfg := c.cfg
	cfg.Self = id
	c.inc++
	cfg.Incarnation = c.inc
	cfg.Addrs = []string{"/ip4/10.0.0.1/tcp/4001/p2p/" + id}
	m, err := New(cfg, c.now)
	if err != nil {
		c.t.Fatalf("start %s: %v", id, err)
	}
	n := c.nodes[id]
	if n == nil {
		n = &node{id: id}
		c.nodes[id] = n
		c.order = append(c.order, id)
	}
	n.m, n.up, n.next, n.lastEpoch, n.reached = m, true, c.now, m.View().Epoch, 0 // a new process
	c.handle(n, m.Tick(c.now))
}

// crash stops a peer: no more ticks, and nothing more from or to it.
func (c *cluster) crash(id string) {
	c.node(id).up = false
	c.queue = slices.DeleteFunc(c.queue, func(f flight) bool { return f.from == id || f.to == id })
}

// leave makes a peer announce its departure, then stop.
func (c *cluster) leave(id string) {
	n := c.node(id)
	c.handle(n, n.m.Leave(c.now))
	n.up = false
	c.queue = slices.DeleteFunc(c.queue, func(f flight) bool { return f.to == id })
}

func (c *cluster) node(id string) *node {
	n := c.nodes[id]
	if n == nil {
		c.t.Fatalf("no peer %q", id)
	}
	return n
}

// partition cuts every link between peers of different groups.
func (c *cluster) partition(groups ...[]string) {
	clear(c.cut)
	group := map[string]int{}
	for g, ids := range groups {
		for _, id := range ids {
			group[id] = g
		}
	}
	for _, a := range c.order {
		for _, b := range c.order {
			if ga, ok := group[a]; ok {
				if gb, ok := group[b]; ok && ga != gb {
					c.cut[[2]string{a, b}] = true
				}
			}
		}
	}
}

func (c *cluster) heal() { clear(c.cut) }

// handle records a Ready and broadcasts its beats.
func (c *cluster) handle(n *node, rd Ready) {
	if rd.View.Epoch < n.lastEpoch {
		c.t.Errorf("%v %s: epoch went back from %d to %d", c.elapsed(), n.id, n.lastEpoch, rd.View.Epoch)
	}
	n.lastEpoch = rd.View.Epoch
	if !slices.Contains(rd.View.Members, n.id) {
		c.t.Errorf("%v %s: own view %v lacks itself", c.elapsed(), n.id, rd.View.Members)
	}
	n.joined = append(n.joined, rd.Joined...)
	n.left = append(n.left, rd.Left...)
	n.died = append(n.died, rd.Died...)
	n.restarted = append(n.restarted, rd.Restarted...)
	n.rejected = append(n.rejected, rd.Rejected...)
	if rd.Reached {
		n.reached++
	}
	n.next = rd.Next
	for _, b := range rd.Send {
		c.history[n.id] = append(c.history[n.id], b)
		for _, to := range c.order {
			if to != n.id && c.nodes[to].up {
				c.post(n.id, to, b)
			}
		}
	}
}

// post queues one delivery, unless the link drops it.
func (c *cluster) post(from, to string, b Beat) {
	link := [2]string{from, to}
	if c.drop > 0 && c.dropRun[link] < c.maxDropRun && c.rng.Float64() < c.drop {
		c.dropRun[link]++
		return
	}
	c.dropRun[link] = 0
	d := c.delay
	if c.jitter > 0 {
		d += time.Duration(c.rng.Int64N(int64(c.jitter)))
	}
	c.sent++
	f := flight{at: c.now.Add(d), n: c.sent, from: from, to: to, beat: b}
	i := sort.Search(len(c.queue), func(i int) bool {
		q := c.queue[i]
		return q.at.After(f.at) || q.at.Equal(f.at) && q.n > f.n
	})
	c.queue = slices.Insert(c.queue, i, f)
}

// step runs the earliest pending event (deliveries due, then ticks due) if it
// is no later than limit, and reports whether it ran one.
func (c *cluster) step(limit time.Time) bool {
	t := limit
	found := false
	if len(c.queue) > 0 && !c.queue[0].at.After(t) {
		t, found = c.queue[0].at, true
	}
	for _, id := range c.order {
		n := c.nodes[id]
		if n.up && !n.next.IsZero() && !n.next.After(t) {
			t, found = n.next, true
		}
	}
	if !found {
		return false
	}
	c.now = later(c.now, t)
	for len(c.queue) > 0 && !c.queue[0].at.After(c.now) {
		f := c.queue[0]
		c.queue = c.queue[1:]
		n := c.nodes[f.to]
		if !n.up || c.cut[[2]string{f.from, f.to}] {
			continue
		}
		c.handle(n, n.m.Receive(f.beat, c.now))
	}
	for _, id := range c.order {
		if n := c.nodes[id]; n.up && !n.next.IsZero() && !n.next.After(c.now) {
			c.handle(n, n.m.Tick(c.now))
		}
	}
	return true
}

// advance lets d pass.
func (c *cluster) advance(d time.Duration) {
	end := c.now.Add(d)
	for c.step(end) {
	}
	c.now = end
}

// within advances until cond holds, at most d; it returns how long it took
// and whether cond held.
func (c *cluster) within(d time.Duration, cond func() error) (time.Duration, error) {
	start, end := c.now, c.now.Add(d)
	for {
		err := cond()
		if err == nil {
			return c.now.Sub(start), nil
		}
		if !c.step(end) {
			c.now = end
			if err := cond(); err != nil {
				return d, err
			}
			return d, nil
		}
	}
}

// agree checks that the listed peers hold the same view, whose members are
// exactly those peers, and that each sees it settled (Agreed).
func (c *cluster) agree(ids []string) error {
	want := slices.Sorted(slices.Values(ids))
	var first View
	for i, id := range ids {
		n := c.node(id)
		v := n.m.View()
		if !slices.Equal(v.Members, want) {
			return fmt.Errorf("%s sees members %v, want %v", id, v.Members, want)
		}
		if i == 0 {
			first = v
		} else if v.Epoch != first.Epoch || v.SetHash != first.SetHash {
			return fmt.Errorf("%s has epoch %d hash %x, %s has epoch %d hash %x", id, v.Epoch, v.SetHash, ids[0], first.Epoch, first.SetHash)
		}
		if !n.m.Agreed() {
			var lag []string
			for _, o := range v.Members {
				if p := n.m.peers[o]; p != nil && (p.epoch != v.Epoch || p.setHash != v.SetHash) {
					lag = append(lag, fmt.Sprintf("%s last announced epoch %d hash %x at %v", o, p.epoch, p.setHash, p.heard.Sub(epoch0)))
				}
			}
			return fmt.Errorf("%s (epoch %d hash %x) has not seen every member announce its view: %v", id, v.Epoch, v.SetHash, lag)
		}
	}
	return nil
}

func (c *cluster) elapsed() time.Duration { return c.now.Sub(epoch0) }

// upIDs lists running peers in creation order.
func (c *cluster) upIDs() []string {
	var out []string
	for _, id := range c.order {
		if c.nodes[id].up {
			out = append(out, id)
		}
	}
	return out
}

func (c *cluster) describe() string {
	var b strings.Builder
	for _, id := range c.order {
		n := c.nodes[id]
		v := n.m.View()
		fmt.Fprintf(&b, "  %s up=%v epoch=%d members=%v agreed=%v\n", id, n.up, v.Epoch, v.Members, n.m.Agreed())
	}
	return b.String()
}
