package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/rs/zerolog"
)

// logBuf collects the logs of a test's nodes; they are printed only if the
// test fails (nodes may log after the test returns, which t.Log forbids).
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// testLog returns a logger for one test and its buffer; the output is
// shown if the test fails, or always with GOSSIPTRAIN_TEST_LOGS=1.
func testLog(t *testing.T) (zerolog.Logger, *logBuf) {
	lb := &logBuf{}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("GOSSIPTRAIN_TEST_LOGS") != "" {
			t.Logf("node logs:\n%s", lb.String())
		}
	})
	return zerolog.New(zerolog.ConsoleWriter{Out: lb, NoColor: true, TimeFormat: "15:04:05.000"}).With().Timestamp().Logger(), lb
}

// fastConfig is a loopback configuration with short timings: beats every
// 100ms, death after 1s, gossipsub heartbeats every 100ms.
func fastConfig(job string) Config {
	c := DefaultConfig()
	c.Job = job
	c.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	c.Heartbeat = 100 * time.Millisecond
	c.DeadAfter = time.Second
	c.Shards = 64
	c.GossipSub.HeartbeatInterval = 100 * time.Millisecond
	c.GossipSub.HeartbeatInitialDelay = 10 * time.Millisecond
	c.RedialMin, c.RedialMax = 50*time.Millisecond, 500*time.Millisecond
	c.DialTimeout = 2 * time.Second
	c.LeaveTimeout = 2 * time.Second
	return c
}

// startNode starts a node closed at the end of the test.
func startNode(t *testing.T, cfg Config, log zerolog.Logger, name string) *Node {
	t.Helper()
	n, err := New(cfg, log.With().Str("node", name).Logger())
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// startCluster starts k nodes one after another, each pointed at the first.
func startCluster(t *testing.T, k int, cfg Config, log zerolog.Logger) []*Node {
	t.Helper()
	nodes := []*Node{startNode(t, cfg, log, "n0")}
	for i := 1; i < k; i++ {
		c := cfg
		c.Peers = []string{nodes[0].Addrs()[0]}
		nodes = append(nodes, startNode(t, c, log, fmt.Sprintf("n%d", i)))
	}
	return nodes
}

// waitFor polls cond every 10ms until it holds or timeout passes; then the
// test fails with cond's last explanation.
func waitFor(t *testing.T, timeout time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ids(nodes []*Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Self().String()
	}
	slices.Sort(out)
	return out
}

// agreed reports whether every node holds the same agreed view of exactly
// the given nodes and the same ring.
func agreed(nodes []*Node) func() (bool, string) {
	want := ids(nodes)
	return func() (bool, string) {
		first := nodes[0].State()
		for i, n := range nodes {
			st := n.State()
			switch {
			case !slices.Equal(st.View.Members, want):
				return false, fmt.Sprintf("node %d has members %v, want %v", i, st.View.Members, want)
			case !st.Agreed:
				return false, fmt.Sprintf("node %d (epoch %d) not agreed", i, st.View.Epoch)
			case st.View.Epoch != first.View.Epoch || st.View.SetHash != first.View.SetHash:
				return false, fmt.Sprintf("node %d at epoch %d, node 0 at %d", i, st.View.Epoch, first.View.Epoch)
			case st.RingHash != first.RingHash:
				return false, fmt.Sprintf("node %d ring %x, node 0 ring %x", i, st.RingHash, first.RingHash)
			}
		}
		return true, ""
	}
}

func TestClusterAgreesOnMembersAndOwners(t *testing.T) {
	log, _ := testLog(t)
	cfg := fastConfig("agree")
	start := time.Now()
	nodes := startCluster(t, 4, cfg, log)
	took := waitFor(t, 5*time.Second, agreed(nodes))
	t.Logf("4 in-process peers agreed %v after the last start (%v after the first)", took, time.Since(start))

	// Every shard has exactly one primary among the members, and each
	// node's Status reports the shards the shared ring gives it.
	r := nodes[0].Ring()
	seen := map[int]string{}
	total := 0
	for _, n := range nodes {
		st := n.Status()
		if !slices.Equal(st.OwnedShards, r.Owned(st.PeerID)) {
			t.Errorf("%s reports %v, ring says %v", st.PeerID, st.OwnedShards, r.Owned(st.PeerID))
		}
		for _, s := range st.OwnedShards {
			if other, dup := seen[s]; dup {
				t.Errorf("shard %d owned by %s and %s", s, other, st.PeerID)
			}
			seen[s] = st.PeerID
		}
		total += len(st.OwnedShards)
		for r := range st.RejectedBy {
			if r != "replay" && r != "unverified" && r != "membership_replay" {
				t.Errorf("%s rejected messages in an honest cluster: %v", st.PeerID, st.RejectedBy)
			}
		}
	}
	if total != cfg.Shards {
		t.Errorf("members own %d shards in all, want %d", total, cfg.Shards)
	}
}

func TestGracefulLeaveBeatsDeadAfter(t *testing.T) {
	log, _ := testLog(t)
	cfg := fastConfig("leave")
	cfg.DeadAfter = 3 * time.Second // a leave must not wait for it
	nodes := startCluster(t, 3, cfg, log)
	waitFor(t, 5*time.Second, agreed(nodes))

	start := time.Now()
	if err := nodes[2].Leave(context.Background()); err != nil {
		t.Fatalf("Leave: %v (the other members should have acknowledged)", err)
	}
	acked := time.Since(start)
	took := waitFor(t, cfg.DeadAfter, agreed(nodes[:2]))
	t.Logf("leave acknowledged after %v; the others agreed without it after %v", acked, took)
	for _, n := range nodes[:2] {
		s := n.Status().Membership
		if s.Leaves != 1 || s.Deaths != 0 {
			t.Errorf("%s counted %d leaves, %d deaths; want 1 leave, 0 deaths", n.Self(), s.Leaves, s.Deaths)
		}
	}
}

func TestCrashDetectedAfterDeadAfter(t *testing.T) {
	log, _ := testLog(t)
	cfg := fastConfig("crash")
	nodes := startCluster(t, 3, cfg, log)
	waitFor(t, 5*time.Second, agreed(nodes))
	before := nodes[0].State().View.Epoch

	nodes[2].shutdown() // no Leave: a crash as the others see it
	took := waitFor(t, cfg.DeadAfter+2*time.Second, agreed(nodes[:2]))
	t.Logf("crash: the other two agreed without the dead peer after %v (DeadAfter %v)", took, cfg.DeadAfter)
	if took < cfg.DeadAfter-cfg.Heartbeat {
		t.Errorf("dead peer dropped after %v, before DeadAfter %v", took, cfg.DeadAfter)
	}
	if e := nodes[0].State().View.Epoch; e <= before {
		t.Errorf("epoch %d after the crash, want above %d", e, before)
	}
	for _, n := range nodes[:2] {
		if s := n.Status().Membership; s.Deaths != 1 {
			t.Errorf("%s counted %d deaths, want 1", n.Self(), s.Deaths)
		}
	}
}

// TestRestartKeepsIDAndShards: a peer that crashes and comes back with the
// same key, on the same port, gets its ID and shards back; the bootstrap
// peer's restart is found by redialling, not by the restarted peer.
func TestRestartKeepsIDAndShards(t *testing.T) {
	log, _ := testLog(t)
	cfg := fastConfig("restart")
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c0 := cfg
	c0.Key = key
	n0 := startNode(t, c0, log, "n0")
	c0.Listen = []string{strings.TrimSuffix(n0.Addrs()[0], "/p2p/"+n0.Self().String())} // same port on restart
	c1 := cfg
	c1.Peers = []string{n0.Addrs()[0]}
	n1 := startNode(t, c1, log, "n1")
	n2 := startNode(t, c1, log, "n2")
	waitFor(t, 5*time.Second, agreed([]*Node{n0, n1, n2}))
	owned := n0.Status().OwnedShards
	ringBefore := n0.State().RingHash

	n0.shutdown()
	waitFor(t, cfg.DeadAfter+2*time.Second, agreed([]*Node{n1, n2}))
	again := startNode(t, c0, log, "n0-again")
	if again.Self() != n0.Self() {
		t.Fatalf("restarted with ID %s, was %s", again.Self(), n0.Self())
	}
	took := waitFor(t, 5*time.Second, agreed([]*Node{again, n1, n2}))
	t.Logf("restarted bootstrap peer re-joined after %v", took)
	if got := again.Status().OwnedShards; !slices.Equal(got, owned) {
		t.Errorf("restarted peer owns %v, owned %v before", got, owned)
	}
	if again.State().RingHash != ringBefore {
		t.Error("the ring after the restart differs from the ring before")
	}
}

func TestSwarmKeyKeepsStrangersOut(t *testing.T) {
	log, _ := testLog(t)
	dir := t.TempDir()
	keyA, keyB := dir+"/a.key", dir+"/b.key"
	if _, err := CreateSwarmKey(keyA, false); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateSwarmKey(keyB, false); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig("private")
	cfg.SwarmKey = keyA
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"} // QUIC is dropped
	nodes := startCluster(t, 2, cfg, log)
	for _, a := range nodes[0].Addrs() {
		if strings.Contains(a, "quic") {
			t.Errorf("private peer listens on %s: QUIC cannot carry a swarm key", a)
		}
	}
	waitFor(t, 5*time.Second, agreed(nodes))

	stranger := cfg
	stranger.SwarmKey = keyB
	stranger.Peers = []string{nodes[0].Addrs()[0]}
	s := startNode(t, stranger, log, "stranger")
	// Wait for proof that it tried (and failed) twice, not for luck.
	waitFor(t, 5*time.Second, func() (bool, string) {
		f := s.Status().Network.DialFailures
		return f >= 2, fmt.Sprintf("stranger failed %d dials", f)
	})
	for _, n := range nodes {
		if slices.Contains(n.View().Members, s.Self().String()) {
			t.Errorf("%s lists the stranger as a member", n.Self())
		}
		if n.Host().Network().Connectedness(s.Self()) == network.Connected {
			t.Errorf("%s is connected to the stranger", n.Self())
		}
	}
	if m := s.View().Members; len(m) != 1 {
		t.Errorf("stranger sees members %v, want only itself", m)
	}
}

func TestMaxMessageSizeMismatchRefused(t *testing.T) {
	log, lb := testLog(t)
	cfg := fastConfig("sizes")
	nodes := startCluster(t, 2, cfg, log)
	waitFor(t, 5*time.Second, agreed(nodes))

	odd := cfg
	odd.MaxMessageSize = cfg.MaxMessageSize * 2
	odd.Peers = []string{nodes[0].Addrs()[0]}
	o := startNode(t, odd, log, "odd")
	// Each side refuses the other when it reads the other's hello: wait
	// for both (the two happen concurrently).
	waitFor(t, 5*time.Second, func() (bool, string) {
		r, ro := nodes[0].Status().Network.RefusedPeers, o.Status().Network.RefusedPeers
		return r >= 1 && ro >= 1, fmt.Sprintf("bootstrap peer refused %d peers, the odd peer %d", r, ro)
	})
	// Beats from a peer whose hello failed are never accepted.
	for _, n := range nodes {
		if slices.Contains(n.View().Members, o.Self().String()) {
			t.Errorf("%s lists the refused peer as a member", n.Self())
		}
	}
	if !strings.Contains(lb.String(), "--max-message-size: this peer") {
		t.Error("the refusal is not explained in the log")
	}
}

func TestQUICOnly(t *testing.T) {
	log, _ := testLog(t)
	cfg := fastConfig("quic")
	cfg.Listen = []string{"/ip4/127.0.0.1/udp/0/quic-v1"}
	nodes := startCluster(t, 3, cfg, log)
	waitFor(t, 5*time.Second, agreed(nodes))
	for _, c := range nodes[1].Host().Network().Conns() {
		if !strings.Contains(c.RemoteMultiaddr().String(), "quic-v1") {
			t.Errorf("connection over %s, want QUIC", c.RemoteMultiaddr())
		}
	}
}

func TestMasterTopology(t *testing.T) {
	log, _ := testLog(t)
	cfg := fastConfig("master")
	cfg.Topology = TopologyMaster
	nodes := startCluster(t, 3, cfg, log)
	waitFor(t, 5*time.Second, agreed(nodes))
	master := nodes[0].Self().String()
	for _, n := range nodes {
		st := n.Status()
		if st.Master != master {
			t.Errorf("%s names master %s, want the bootstrap peer %s", st.PeerID, st.Master, master)
		}
		want := 0
		if st.PeerID == master {
			want = cfg.Shards
		}
		if len(st.OwnedShards) != want {
			t.Errorf("%s owns %d shards, want %d", st.PeerID, len(st.OwnedShards), want)
		}
	}
}

func TestEventsAndMinPeers(t *testing.T) {
	log, _ := testLog(t)
	cfg := fastConfig("events")
	cfg.MinPeers = 3
	n0 := startNode(t, cfg, log, "n0")
	events, stop := n0.Subscribe()
	defer stop()
	first := <-events
	if len(first.View.Members) != 1 || first.Reached {
		t.Fatalf("first event %+v: want the lone peer, min peers not reached", first.State)
	}
	reached := make(chan error, 1)
	go func() { reached <- n0.WaitMinPeers(context.Background()) }()

	c := cfg
	c.Peers = []string{n0.Addrs()[0]}
	n1 := startNode(t, c, log, "n1")
	waitFor(t, 5*time.Second, agreed([]*Node{n0, n1}))
	select {
	case err := <-reached:
		t.Fatalf("WaitMinPeers returned (%v) with 2 of 3 members", err)
	default:
	}
	n2 := startNode(t, c, log, "n2")
	if err := <-reached; err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, agreed([]*Node{n0, n1, n2}))

	// The events tell the same story: both joins, and a final agreed view
	// of the three; epochs never go back.
	joined := map[string]bool{}
	var last Event
	for len(joined) < 2 || !last.Agreed || len(last.View.Members) < 3 {
		select {
		case ev := <-events:
			if ev.View.Epoch < last.View.Epoch {
				t.Fatalf("epoch went back from %d to %d", last.View.Epoch, ev.View.Epoch)
			}
			for _, id := range ev.Joined {
				joined[id] = true
			}
			last = ev
		case <-time.After(5 * time.Second):
			t.Fatalf("events stopped at %+v with joins %v", last.State, joined)
		}
	}
	if !joined[n1.Self().String()] || !joined[n2.Self().String()] || !last.Reached {
		t.Errorf("joins %v reached %v: want both newcomers and min peers reached", joined, last.Reached)
	}
}

func TestClusterWithDHT(t *testing.T) {
	log, _ := testLog(t)
	cfg := fastConfig("dht-cluster")
	cfg.DHT = true
	nodes := startCluster(t, 3, cfg, log)
	waitFor(t, 5*time.Second, agreed(nodes))
	// Every node's DHT routing table holds the other two.
	waitFor(t, 5*time.Second, func() (bool, string) {
		for _, n := range nodes {
			if s := n.kad.RoutingTable().Size(); s != 2 {
				return false, fmt.Sprintf("%s has %d peers in its DHT routing table, want 2", n.Self(), s)
			}
		}
		return true, ""
	})
}
