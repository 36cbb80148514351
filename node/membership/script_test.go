package membership

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/node/ring"
)

// TestScenarios runs every testdata/*.txt script. A script is one command
// per line; '#' starts a comment. Commands:
//
//	config key=value...      heartbeat= dead= mingap= minpeers= (peers started
//	                         later use them), delay= jitter= drop= maxdroprun=
//	join ID...               start peers now, one after another
//	restart ID               start a crashed peer again, newer incarnation
//	crash ID                 stop a peer: no ticks, nothing from or to it
//	leave ID                 the peer sends Leave, then stops
//	partition A B | C D      cut links between the groups
//	heal                     restore all links
//	advance DUR              let time pass, delivering beats and ticking
//	within DUR expect-...    advance until the expectation holds, at most DUR
//	expect-agree ID... [epoch=N]
//	                         the peers share one view, its members are exactly
//	                         these peers, and each has it Agreed
//	expect-epoch ID N        ID's view has epoch N
//	expect-events ID joined=A,B left= died= restarted=
//	                         events ID reported since its last expect-events
//	                         (a key left out must have no events)
//	expect-reached ID N      ID reported Reached N times
//	expect-rejected ID reason=N...
//	                         ID's Stats.Rejected (reasons left out must be 0)
//	replay FROM TO [kind=K] [inc=prev] [back=N]
//	                         deliver to TO again a beat FROM sent: the latest
//	                         (or N before it) of those of kind K (alive, join,
//	                         leave) and, with inc=prev, of an earlier
//	                         incarnation than FROM's current one
//	inject TO key=value...   deliver a made-up beat: from= job= kind= inc= seq=
//	                         epoch= members=A,B (defaults: a valid Alive beat)
//	ring-save NAME ID        remember the ring of ID's view
//	expect-ring NAME ID      the ring of ID's view assigns every shard as saved
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in testdata: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScript(t, f) })
	}
}

func runScript(t *testing.T, path string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := newCluster(t, 1)
	rings := map[string][]string{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		where := fmt.Sprintf("%s:%d: %s", path, line, strings.Join(fields, " "))
		if err := runCommand(c, rings, fields); err != nil {
			t.Fatalf("%s: %v\nat %v:\n%s", where, err, c.elapsed(), c.describe())
		}
		t.Logf("%8v  %s", c.elapsed(), strings.Join(fields, " "))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func runCommand(c *cluster, rings map[string][]string, f []string) error {
	cmd, args := f[0], f[1:]
	kv, pos := splitArgs(args)
	need := func(n int) error {
		if len(pos) != n {
			return fmt.Errorf("%s wants %d plain arguments, got %d", cmd, n, len(pos))
		}
		return nil
	}
	switch cmd {
	case "config":
		return applyConfig(c, kv)
	case "join":
		for _, id := range pos {
			if n := c.nodes[id]; n != nil {
				return fmt.Errorf("peer %s exists; use restart", id)
			}
			c.start(id)
		}
	case "restart":
		if err := need(1); err != nil {
			return err
		}
		if c.node(pos[0]).up {
			return fmt.Errorf("peer %s is running; crash it first", pos[0])
		}
		c.start(pos[0])
	case "crash":
		if err := need(1); err != nil {
			return err
		}
		c.crash(pos[0])
	case "leave":
		if err := need(1); err != nil {
			return err
		}
		c.leave(pos[0])
	case "partition":
		var groups [][]string
		cur := []string{}
		for _, a := range args {
			if a == "|" {
				groups, cur = append(groups, cur), []string{}
			} else {
				cur = append(cur, a)
			}
		}
		c.partition(append(groups, cur)...)
	case "heal":
		c.heal()
	case "advance":
		if err := need(1); err != nil {
			return err
		}
		d, err := time.ParseDuration(pos[0])
		if err != nil {
			return err
		}
		c.advance(d)
	case "within":
		if len(args) < 2 {
			return fmt.Errorf("within wants a duration and an expect command")
		}
		d, err := time.ParseDuration(args[0])
		if err != nil {
			return err
		}
		took, err := c.within(d, func() error { return runCommand(c, rings, args[1:]) })
		if err != nil {
			return fmt.Errorf("not within %v: %w", d, err)
		}
		c.t.Logf("          (held after %v)", took)
	case "expect-agree":
		if err := c.agree(pos); err != nil {
			return err
		}
		if e, ok := kv["epoch"]; ok {
			return expectEpoch(c, pos[0], e)
		}
	case "expect-epoch":
		if err := need(2); err != nil {
			return err
		}
		return expectEpoch(c, pos[0], pos[1])
	case "expect-events":
		if err := need(1); err != nil {
			return err
		}
		n := c.node(pos[0])
		for _, ev := range []struct {
			key string
			got *[]string
		}{{"joined", &n.joined}, {"left", &n.left}, {"died", &n.died}, {"restarted", &n.restarted}} {
			want := list(kv[ev.key])
			if got := slices.Sorted(slices.Values(*ev.got)); !slices.Equal(got, want) {
				return fmt.Errorf("%s: %s = %v, want %v", pos[0], ev.key, got, want)
			}
			*ev.got = nil
		}
	case "expect-reached":
		if err := need(2); err != nil {
			return err
		}
		if got := strconv.Itoa(c.node(pos[0]).reached); got != pos[1] {
			return fmt.Errorf("%s reported Reached %s times, want %s", pos[0], got, pos[1])
		}
	case "expect-rejected":
		if err := need(1); err != nil {
			return err
		}
		st := c.node(pos[0]).m.Stats()
		for r := Reason(1); r < numReasons; r++ {
			want := kv[r.String()]
			if want == "" {
				want = "0"
			}
			if got := strconv.FormatUint(st.Rejected[r], 10); got != want {
				return fmt.Errorf("%s rejected %s beats for %s, want %s (rejections: %v)", pos[0], got, r, want, c.node(pos[0]).rejected)
			}
		}
	case "replay":
		if err := need(2); err != nil {
			return err
		}
		from, to := c.node(pos[0]), c.node(pos[1])
		var h []Beat
		for _, b := range c.history[pos[0]] {
			if kv["kind"] != "" && b.Kind.String() != kv["kind"] ||
				kv["inc"] == "prev" && b.Incarnation >= from.m.Incarnation() {
				continue
			}
			h = append(h, b)
		}
		back, _ := strconv.Atoi(kv["back"])
		if back >= len(h) {
			return fmt.Errorf("%s sent only %d such beats", pos[0], len(h))
		}
		c.handle(to, to.m.Receive(h[len(h)-1-back], c.now))
	case "inject":
		if err := need(1); err != nil {
			return err
		}
		b, err := makeBeat(c, kv)
		if err != nil {
			return err
		}
		to := c.node(pos[0])
		c.handle(to, to.m.Receive(b, c.now))
	case "ring-save", "expect-ring":
		if err := need(2); err != nil {
			return err
		}
		r, err := ring.New(ring.DefaultConfig(), c.node(pos[1]).m.View().Members)
		if err != nil {
			return err
		}
		if cmd == "ring-save" {
			rings[pos[0]] = r.Assignment()
		} else if !slices.Equal(rings[pos[0]], r.Assignment()) {
			return fmt.Errorf("ring of %s's view %v differs from %s", pos[1], r.Members(), pos[0])
		}
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	return nil
}

func splitArgs(args []string) (map[string]string, []string) {
	kv := map[string]string{}
	var pos []string
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	return kv, pos
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return slices.Sorted(slices.Values(strings.Split(s, ",")))
}

func expectEpoch(c *cluster, id, want string) error {
	if got := strconv.FormatUint(c.node(id).m.View().Epoch, 10); got != want {
		return fmt.Errorf("%s has epoch %s, want %s", id, got, want)
	}
	return nil
}

func applyConfig(c *cluster, kv map[string]string) error {
	for k, v := range kv {
		var err error
		dur := func(p *time.Duration) { *p, err = time.ParseDuration(v) }
		switch k {
		case "heartbeat":
			dur(&c.cfg.Heartbeat)
		case "dead":
			dur(&c.cfg.DeadAfter)
		case "mingap":
			dur(&c.cfg.MinGap)
		case "delay":
			dur(&c.delay)
		case "jitter":
			dur(&c.jitter)
		case "minpeers":
			c.cfg.MinPeers, err = strconv.Atoi(v)
		case "maxdroprun":
			c.maxDropRun, err = strconv.Atoi(v)
		case "drop":
			c.drop, err = strconv.ParseFloat(v, 64)
		default:
			return fmt.Errorf("unknown config key %q", k)
		}
		if err != nil {
			return fmt.Errorf("config %s=%s: %v", k, v, err)
		}
	}
	return nil
}

func makeBeat(c *cluster, kv map[string]string) (Beat, error) {
	b := Beat{Job: c.cfg.Job, From: "x", Incarnation: 1, Seq: 1, Epoch: 1, Kind: Alive}
	for k, v := range kv {
		var err error
		u := func(p *uint64) { *p, err = strconv.ParseUint(v, 10, 64) }
		switch k {
		case "from":
			b.From = v
		case "job":
			b.Job = v
		case "inc":
			u(&b.Incarnation)
		case "seq":
			u(&b.Seq)
		case "epoch":
			u(&b.Epoch)
		case "members":
			b.Members = strings.Split(v, ",")
		case "kind":
			switch v {
			case "alive":
				b.Kind = Alive
			case "join":
				b.Kind = Join
			case "leave":
				b.Kind = Leave
			default:
				var k uint64
				k, err = strconv.ParseUint(v, 10, 8)
				b.Kind = BeatKind(k)
			}
		default:
			return b, fmt.Errorf("unknown beat field %q", k)
		}
		if err != nil {
			return b, fmt.Errorf("%s=%s: %v", k, v, err)
		}
	}
	return b, nil
}
