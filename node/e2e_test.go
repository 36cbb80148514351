package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The multi-process tests run the real gossiptrain binary. It is built once,
// on first use, from the module's main package; GOSSIPTRAIN_BIN points them
// at a prebuilt binary instead. -short skips them.

var (
	binOnce sync.Once
	binPath string
	binDir  string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func gossiptrainBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process test: skipped with -short")
	}
	binOnce.Do(func() {
		if p := os.Getenv("GOSSIPTRAIN_BIN"); p != "" {
			binPath = p
			return
		}
		if binDir, binErr = os.MkdirTemp("", "gossiptrain-e2e"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "gossiptrain")
		start := time.Now()
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/gossiptrain/gossiptrain").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build github.com/gossiptrain/gossiptrain: %v\n%s", err, out)
		}
		t.Logf("built %s in %v", binPath, time.Since(start).Round(time.Millisecond))
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is one gossiptrain peer process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *logBuf
	status string // host:port of its status server
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// startPeer runs "gossiptrain peer ARGS" (inside network namespace ns when
// ns is not empty) with JSON logs, and waits until its status server is up.
// The process is killed at the end of the test.
func startPeer(t *testing.T, name, ns string, args ...string) *proc {
	t.Helper()
	argv := append([]string{gossiptrainBin(t), "peer", "--log-format", "json", "--log-level", "debug"}, args...)
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	p := &proc{name: name, log: &logBuf{}, exited: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(p.log, line)
			var rec struct {
				Message string `json:"message"`
				Addr    string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Message == "status server listening" {
				select {
				case addr <- rec.Addr:
				default:
				}
			}
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, p.log.String())
		}
	})
	select {
	case p.status = <-addr:
	case <-p.exited:
		t.Fatalf("%s exited before its status server started: %v\n%s", name, p.err, p.log.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no status server after 20s\n%s", name, p.log.String())
	}
	return p
}

// kill sends SIGKILL and waits for the process to go.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// fetch asks the process for its status.
func (p *proc) fetch() (*Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return FetchStatus(ctx, p.status)
}

// clusterAgrees reports whether every process reports the same agreed
// epoch, member set (exactly the processes' own IDs) and ring.
func clusterAgrees(procs []*proc) (bool, string, []*Status) {
	var sts []*Status
	var want []string
	for _, p := range procs {
		s, err := p.fetch()
		if err != nil {
			return false, fmt.Sprintf("%s: %v", p.name, err), nil
		}
		sts = append(sts, s)
		want = append(want, s.PeerID)
	}
	slices.Sort(want)
	for i, s := range sts {
		switch {
		case !slices.Equal(s.Members, want):
			return false, fmt.Sprintf("%s has %d members %v, want %v", procs[i].name, len(s.Members), s.Members, want), sts
		case !s.Agreed:
			return false, fmt.Sprintf("%s at epoch %d, not agreed", procs[i].name, s.Epoch), sts
		case s.Epoch != sts[0].Epoch || s.RingHash != sts[0].RingHash || s.SetHash != sts[0].SetHash:
			return false, fmt.Sprintf("%s at epoch %d ring %s, %s at epoch %d ring %s",
				procs[i].name, s.Epoch, s.RingHash, procs[0].name, sts[0].Epoch, sts[0].RingHash), sts
		}
	}
	return true, "", sts
}

// waitAgree polls the processes every 50ms until they agree; the test fails
// if that takes longer than limit.
func waitAgree(t *testing.T, limit time.Duration, procs []*proc) (time.Duration, []*Status) {
	t.Helper()
	start := time.Now()
	for {
		ok, why, sts := clusterAgrees(procs)
		if ok {
			return time.Since(start), sts
		}
		if time.Since(start) > limit {
			t.Fatalf("no agreement within %v: %s", limit, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// churnScenario is the acceptance scenario on four peers started by
// start(i): they agree within 5s of the last start; after one is killed
// with SIGKILL the other three agree without it within dead-after + 2s; the
// killed peer restarted with the same identity comes back with the same peer
// ID and shards. It returns the running processes.
func churnScenario(t *testing.T, deadAfter time.Duration, start func(i int) *proc) []*proc {
	procs := make([]*proc, 4)
	t0 := time.Now()
	for i := range procs {
		procs[i] = start(i)
	}
	took, sts := waitAgree(t, 5*time.Second, procs)
	t.Logf("4 processes agreed on epoch %d, %d members, ring %s: %v after the last start (%v after the first)",
		sts[0].Epoch, len(sts[0].Members), sts[0].RingHash, took, time.Since(t0))
	owned := map[string][]int{}
	total := 0
	for _, s := range sts {
		owned[s.PeerID] = s.OwnedShards
		total += len(s.OwnedShards)
	}
	if total != sts[0].Shards {
		t.Errorf("members own %d shards in all, want %d", total, sts[0].Shards)
	}
	victim := 2
	victimID, ring := sts[victim].PeerID, sts[0].RingHash

	procs[victim].cmd.Process.Signal(syscall.SIGKILL)
	<-procs[victim].exited
	rest := slices.Delete(slices.Clone(procs), victim, victim+1)
	took, sts3 := waitAgree(t, deadAfter+2*time.Second, rest)
	t.Logf("SIGKILL: the other 3 agreed on epoch %d without it after %v (dead-after %v)", sts3[0].Epoch, took, deadAfter)
	if sts3[0].Epoch <= sts[0].Epoch {
		t.Errorf("epoch %d after the crash, want above %d", sts3[0].Epoch, sts[0].Epoch)
	}

	procs[victim] = start(victim)
	took, sts = waitAgree(t, 5*time.Second, procs)
	t.Logf("restarted peer re-joined, all 4 agreed on epoch %d after %v", sts[0].Epoch, took)
	if sts[victim].PeerID != victimID {
		t.Errorf("restarted with peer ID %s, was %s", sts[victim].PeerID, victimID)
	}
	if !slices.Equal(sts[victim].OwnedShards, owned[victimID]) || sts[0].RingHash != ring {
		t.Errorf("restarted peer owns %v (ring %s), owned %v (ring %s) before", sts[victim].OwnedShards, sts[0].RingHash, owned[victimID], ring)
	}
	return procs
}

func TestProcessesLoopback(t *testing.T) {
	bin := gossiptrainBin(t)
	dir := t.TempDir()
	keyA, keyB := filepath.Join(dir, "a.key"), filepath.Join(dir, "b.key")
	for _, k := range []string{keyA, keyB} {
		if out, err := exec.Command(bin, "keygen", "--swarm", k).CombinedOutput(); err != nil {
			t.Fatalf("keygen --swarm: %v\n%s", err, out)
		}
	}
	const deadAfter = 2 * time.Second
	common := []string{"--job", "e2e", "--listen", "/ip4/127.0.0.1/tcp/0", "--status-addr", "127.0.0.1:0",
		"--dead-after", deadAfter.String(), "--heartbeat", "250ms", "--gossip-heartbeat", "200ms"}
	var first string
	start := func(i int) *proc {
		args := append(slices.Clone(common), "--swarm-key", keyA, "--identity", filepath.Join(dir, fmt.Sprintf("id%d", i)))
		if i > 0 {
			args = append(args, "--peer", first)
		}
		p := startPeer(t, fmt.Sprintf("peer%d", i), "", args...)
		if i == 0 {
			s, err := p.fetch()
			if err != nil {
				t.Fatal(err)
			}
			first = s.Addrs[0]
		}
		return p
	}
	procs := churnScenario(t, deadAfter, start)

	// A fifth peer with another swarm key cannot connect: wait until it has
	// failed to dial (twice, or once on a loaded machine, where a refused
	// handshake can take seconds), then check that nobody lists it.
	stranger := startPeer(t, "stranger", "", append(slices.Clone(common), "--swarm-key", keyB, "--peer", first)...)
	deadline := time.Now().Add(30 * time.Second)
	var ss *Status
	for {
		s, err := stranger.fetch()
		if err != nil {
			t.Fatal(err)
		}
		if ss = s; s.Network.DialFailures >= 2 || (s.Network.DialFailures >= 1 && time.Now().After(deadline.Add(-20*time.Second))) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stranger made %d failed dials in 30s, want at least 1", s.Network.DialFailures)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(ss.Members) != 1 {
		t.Errorf("the stranger sees members %v, want only itself", ss.Members)
	}
	if ok, why, sts := clusterAgrees(procs); !ok {
		t.Errorf("the cluster lost its agreement: %s", why)
	} else {
		for _, s := range sts {
			if slices.Contains(s.Members, ss.PeerID) {
				t.Errorf("%s lists the stranger", s.PeerID)
			}
		}
	}

	// SIGTERM is a graceful leave: the others drop the peer well before
	// dead-after, and it exits with status 0.
	leaving := procs[1]
	t0 := time.Now()
	leaving.cmd.Process.Signal(syscall.SIGTERM)
	took, _ := waitAgree(t, deadAfter, []*proc{procs[0], procs[2], procs[3]})
	t.Logf("SIGTERM: the other 3 agreed without the leaver after %v", took)
	select {
	case <-leaving.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the peer did not exit within 5s of SIGTERM")
	}
	if leaving.err != nil || !strings.Contains(leaving.log.String(), "left the cluster gracefully") {
		t.Errorf("after SIGTERM: exit %v after %v; want status 0 and a graceful leave in the log", leaving.err, time.Since(t0))
	}
}

// TestProcessesMDNSInNetworkNamespaces runs the same scenario with --mdns
// and no --peer: four network namespaces on a bridge, so discovery crosses
// a real (virtual) interface. It needs root and iproute2.
func TestProcessesMDNSInNetworkNamespaces(t *testing.T) {
	gossiptrainBin(t)
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network namespaces need the ip command (iproute2)")
	}
	pid := os.Getpid()
	nw := netnsNet{
		bridge: fmt.Sprintf("gtbr%d", pid%1000000),
		prefix: fmt.Sprintf("10.%d.%d", 200+pid%50, pid/50%250),
	}
	for i := range 4 {
		nw.ns = append(nw.ns, fmt.Sprintf("gtns%d-%d", pid, i))
	}
	t.Cleanup(nw.teardown) // registered first: runs after the processes are killed
	if err := nw.setup(); err != nil {
		if strings.Contains(err.Error(), "Operation not permitted") {
			t.Skipf("cannot create network namespaces here: %v", err)
		}
		t.Fatal(err)
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "job.key") // a peer beyond loopback needs one
	if _, err := CreateSwarmKey(key, false); err != nil {
		t.Fatal(err)
	}
	const deadAfter = 2 * time.Second
	start := func(i int) *proc {
		return startPeer(t, fmt.Sprintf("ns-peer%d", i), nw.ns[i],
			"--mdns", "--job", "e2e-mdns", "--swarm-key", key, "--listen", "/ip4/0.0.0.0/tcp/4001",
			"--status-addr", fmt.Sprintf("%s.%d:8080", nw.prefix, i+1),
			"--identity", filepath.Join(dir, fmt.Sprintf("id%d", i)),
			"--dead-after", deadAfter.String(), "--heartbeat", "250ms", "--gossip-heartbeat", "200ms")
	}
	churnScenario(t, deadAfter, start)
}

// netnsNet is a bridge with one veth per namespace: namespace i has
// PREFIX.(i+1)/24 on its eth0, the bridge PREFIX.254, so the test reaches
// every status server from the root namespace.
type netnsNet struct {
	bridge, prefix string
	ns             []string
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (n netnsNet) setup() error {
	steps := [][]string{
		{"link", "add", n.bridge, "type", "bridge"},
		{"addr", "add", n.prefix + ".254/24", "dev", n.bridge},
		{"link", "set", n.bridge, "multicast", "on", "up"},
	}
	for i, ns := range n.ns {
		host, peer := fmt.Sprintf("gtv%d-%d", os.Getpid()%1000000, i), fmt.Sprintf("gtp%d-%d", os.Getpid()%1000000, i)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"link", "add", host, "type", "veth", "peer", "name", peer},
			[]string{"link", "set", peer, "netns", ns},
			[]string{"link", "set", host, "master", n.bridge},
			[]string{"link", "set", host, "multicast", "on", "up"},
			[]string{"-n", ns, "link", "set", peer, "name", "eth0"},
			[]string{"-n", ns, "addr", "add", fmt.Sprintf("%s.%d/24", n.prefix, i+1), "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "multicast", "on", "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0"},
		)
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	return nil
}

// teardown deletes the namespaces (their veth pairs go with them) and the
// bridge, ignoring what was never created.
func (n netnsNet) teardown() {
	var errs []error
	for _, ns := range n.ns {
		if err := ipCmd("netns", "del", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	if err := ipCmd("link", "del", n.bridge); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "netns teardown:", err)
	}
}
