package train

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Table tests of the core's decisions, each case computed by hand:
// routing (which peer applies a shard's round), readiness (when a round
// applies: contributions required) and handoffs (who owes which shard to
// whom after a configuration change). Placements are scPlace's: shard s
// goes to members[s mod n] then the replicas-1 after it, members sorted.

// decisionConfigs builds a chain of configurations: each entry is
// "start members [crashed=a,b] [left=c]", members comma separated.
func decisionConfigs(t *testing.T, replicas int, specs ...string) *configs {
	t.Helper()
	cs := &configs{}
	for i, spec := range specs {
		f := strings.Fields(spec)
		var start uint64
		if _, err := fmt.Sscan(f[0], &start); err != nil {
			t.Fatalf("configuration %q: %v", spec, err)
		}
		tc := &tconf{ID: uint64(i + 1), Start: start}
		for _, p := range strings.Split(f[1], ",") {
			tc.Members = append(tc.Members, Member{Peer: p, ID: MemberID(p, 1)})
		}
		for _, kv := range f[2:] {
			k, v, _ := strings.Cut(kv, "=")
			for _, p := range strings.Split(v, ",") {
				m := Member{Peer: p, ID: MemberID(p, 1)}
				switch k {
				case "crashed":
					tc.Crashed = append(tc.Crashed, m)
				case "left":
					tc.Left = append(tc.Left, m)
				default:
					t.Fatalf("configuration %q: unknown %q", spec, k)
				}
			}
		}
		sortMembers(tc.Members)
		if err := tc.build(func(ms []string) (Placement, error) { return scPlace{ms, replicas}, nil }, 4); err != nil {
			t.Fatal(err)
		}
		cs.add(tc)
	}
	return cs
}

// TestRouteTable: configs.routeConf, the sync route of shard s's round r:
// the primary of round r's configuration, or, when that member crashed
// since, the primary the configuration that removed it names (and so on).
// docs/protocol.md, "Roles" (Route) and H12.
func TestRouteTable(t *testing.T) {
	// 1: p0,p1,p2 from round 0: s0 p0, s1 p1, s2 p2, s3 p0.
	// 2: p2 crashed, from round 5, p0,p1: s0 p0, s1 p1, s2 p0, s3 p1.
	// 3: p3 joins, from round 8, p0,p1,p3: s0 p0, s1 p1, s2 p3, s3 p0.
	// 4: p0 crashed, from round 10, p1,p3: s0 p1, s1 p3, s2 p1, s3 p3.
	cs := decisionConfigs(t, 1,
		"0 p0,p1,p2",
		"5 p0,p1 crashed=p2",
		"8 p0,p1,p3",
		"10 p1,p3 crashed=p0")
	cases := []struct {
		shard int
		round uint64
		want  string
		conf  uint64
	}{
		{1, 0, "p1", 1},  // nobody crashed: configuration 1's primary
		{1, 9, "p1", 3},  // configuration 3's
		{2, 3, "p1", 4},  // p2 crashed (conf 2 names p0), p0 crashed too (conf 4 names p1)
		{2, 5, "p1", 4},  // configuration 2's p0, crashed in 4
		{2, 8, "p3", 3},  // configuration 3's p3, alive
		{3, 4, "p3", 4},  // p0 (conf 1) crashed in 4
		{3, 6, "p1", 2},  // configuration 2's p1
		{3, 9, "p3", 4},  // configuration 3's p0, crashed in 4
		{0, 12, "p1", 4}, // configuration 4's own
		{1, 4, "p1", 1},  // a live primary keeps its rounds whatever came later
	}
	for _, tc := range cases {
		p, rt := cs.routeConf(tc.shard, tc.round)
		if p != tc.want || rt.ID != tc.conf {
			t.Errorf("route of shard %d round %d: %s in configuration %d, want %s in %d", tc.shard, tc.round, p, rt.ID, tc.want, tc.conf)
		}
	}
}

// TestRouteOfModes: a worker sends round r's rows to the sync route of r,
// but in ssp and async to the newest configuration's primary, whatever
// the round (docs/protocol.md R1, R5).
func TestRouteOfModes(t *testing.T) {
	for _, tc := range []struct {
		mode  Mode
		shard int
		round uint64
		want  string
	}{
		{Sync, 2, 3, "p2"},  // round 3 is configuration 1's: p2 alive
		{Sync, 2, 7, "p0"},  // configuration 2's
		{Async, 2, 3, "p0"}, // the newest configuration's primary
		{Async, 3, 0, "p1"},
		{SSP, 2, 3, "p0"},
	} {
		c := &Core{cfg: Config{Mode: tc.mode}}
		c.w.c = c
		c.cs = *decisionConfigs(t, 1, "0 p0,p1,p2", "5 p0,p1 left=p2")
		if got := c.w.routeOf(tc.shard, tc.round); got != tc.want {
			t.Errorf("%v: shard %d round %d goes to %s, want %s", tc.mode, tc.shard, tc.round, got, tc.want)
		}
	}
}

// TestHandoffTable: owner.owesOf, the shards a peer must hand over when a
// configuration takes effect: those whose round Start-1 it applies (its
// route, a crash's takeover included) to each holder new in the
// configuration that did not hold them then (docs/protocol.md H1, H2, H12).
func TestHandoffTable(t *testing.T) {
	cases := []struct {
		name     string
		replicas int
		prev     string
		next     string
		// owes per peer: "shard>peer" sorted
		owes map[string][]string
	}{
		{
			// 1: s0 p0, s1 p1, s2 p0, s3 p1; 2: s0 p0, s1 p1, s2 p2, s3 p0.
			name: "join", replicas: 1,
			prev: "0 p0,p1", next: "3 p0,p1,p2",
			owes: map[string][]string{"p0": {"2>p2"}, "p1": {"3>p0"}},
		},
		{
			// 1: s0 p0, s1 p1, s2 p2, s3 p0; 2: s0 p0, s1 p2, s2 p0, s3 p2.
			// The leaver hands over the shard it routes.
			name: "leave", replicas: 1,
			prev: "0 p0,p1,p2", next: "3 p0,p2 left=p1",
			owes: map[string][]string{"p0": {"3>p2"}, "p1": {"1>p2"}, "p2": {"2>p0"}},
		},
		{
			// 1: s0 p0,p1; s1 p1,p2; s2 p2,p0; s3 p0,p1.
			// 2: s0 p0,p2; s1 p2,p0; s2 p0,p2; s3 p2,p0.
			// p1 crashed: its round 2 of s1 moves to p2 (configuration 2's
			// primary), which owes p0 its copy; p0 routes s0 and s3 and
			// owes p2 both; s2's holders stay.
			name: "crash with replicas", replicas: 2,
			prev: "0 p0,p1,p2", next: "3 p0,p2 crashed=p1",
			owes: map[string][]string{"p0": {"0>p2", "3>p2"}, "p2": {"1>p0"}},
		},
		{
			// Nobody new: nothing owed.
			name: "crash, no replicas, no newcomer", replicas: 1,
			prev: "0 p0,p1,p2", next: "3 p0,p1 crashed=p2",
			// 1: s0 p0, s1 p1, s2 p2, s3 p0; 2: s0 p0, s1 p1, s2 p0, s3 p1.
			// s2's round 2 moves to p0 itself (takeover: it waits for
			// no copy, restarts); s3 moves from p0 to p1.
			owes: map[string][]string{"p0": {"3>p1"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := decisionConfigs(t, tc.replicas, tc.prev, tc.next)
			next := cs.cur()
			for _, m := range cs.list[0].Members {
				c := &Core{cfg: Config{Self: m.Peer, ID: m.ID, Mode: Sync}, shards: 4, cs: *cs}
				c.o.c, c.w.c = c, c
				c.o.held = newShardSet(4)
				for s := range 4 {
					if cs.list[0].holds(m.Peer, s) {
						c.o.held.add(s)
					}
				}
				c.w.leave.leaving = slices.ContainsFunc(next.Left, func(l Member) bool { return l.ID == m.ID })
				c.o.owesOf(next)
				var got []string
				for _, w := range c.o.owes {
					if w.round != next.Start {
						t.Errorf("%s owes shard %d as of round %d, want %d", m.Peer, w.shard, w.round, next.Start)
					}
					got = append(got, fmt.Sprintf("%d>%s", w.shard, w.to))
				}
				slices.Sort(got)
				if want := tc.owes[m.Peer]; !slices.Equal(got, want) {
					t.Errorf("%s owes %v, want %v", m.Peer, got, want)
				}
			}
		})
	}
}

// TestReadinessTable: a sync route applies round r of a shard only once
// every member of r's configuration that has not crashed since has
// contributed (docs/protocol.md O1): three peers, one batch each; p0
// routes shard 0; the other peers' pushes to p0 are held and only some
// delivered (p0's own, to itself, takes no network).
func TestReadinessTable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  []string
		applied bool
	}{
		{"every member", []string{"deliver to=p0 op=push"}, true},
		{"only its own", nil, false},
		{"one missing", []string{"deliver to=p0 op=push from=p1"}, false},
		{"one missing, sent twice by another", []string{"dup to=p0 op=push from=p1", "deliver to=p0 op=push from=p1"}, false},
		{"one missing and crashed", []string{"crash p2", "alive", "tick 50", "deliver to=p0 op=push from=p1"}, true},
		{"one missing, crashed, not yet removed", []string{"crash p2", "tick 50", "deliver to=p0 op=push from=p1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sn := &scNet{t: t, procs: map[string]*scProc{}}
			run := func(cmd string) {
				if _, err := sn.command(strings.Fields(cmd)); err != nil {
					t.Fatalf("%s: %v\n%s", cmd, err, sn.describe())
				}
			}
			for _, cmd := range []string{"peers 3 voters=1", "run until=leader", "hold to=p0 op=push",
				"batch p0 keys=0,4", "batch p1 keys=0,8", "batch p2 keys=0,12", "end p0", "end p1", "end p2", "tick 2"} {
				run(cmd)
			}
			for _, cmd := range tc.script {
				run(cmd)
			}
			run("tick 2")
			p0 := sn.procs["p0"].core
			if got := p0.o.sync.through[0] > 0; got != tc.applied {
				t.Errorf("shard 0's round 0 applied: %v, want %v (stats %s)", got, tc.applied, statsLine(p0.Stats()))
			}
		})
	}
}
