package e2e

// Peers behind NAT (issue 13), tested in network namespaces this test
// creates: a public peer that relays (--relay) and two peers, each behind a
// NAT router of its own (Linux nftables masquerade and a stateful firewall),
// train one job with the real binary and default flags (--nat auto).
//
//	            "internet" 192.0.0.192/26 (a bridge in namespace inet)
//	     ┌─────────────────────┬──────────────────────┬────────────────────┐
//	 pub 192.0.0.194      router A .195            router B .196
//	 (--relay)            masquerade + firewall    masquerade + firewall
//	                         │ 10.77.1.0/24            │ 10.77.2.0/24
//	                      peer A 10.77.1.2          peer B 10.77.2.2
//
// The "internet" uses part of 192.0.0.0/24 (IANA's IETF protocol
// assignments, not routed on the internet): go-libp2p treats RFC 1918 and
// documentation addresses as private and then neither runs AutoNAT on
// them nor hole punches them, while 192.0.0.64 and up count as public.
// No namespace has a link to the host's own network: nothing leaves it.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/gossiptrain/gossiptrain/report"
)

// natNet is one run's namespaces: names start with prefix, which holds
// this process's ID.
type natNet struct {
	prefix string
}

const (
	natPubIP  = "192.0.0.194"
	natNetLen = "/26"
)

// The namespaces of a natNet.
func (n natNet) ns(role string) string { return n.prefix + role }

var natRoles = []string{"inet", "pub", "ra", "rb", "a", "b"}

// requireNATNetns skips unless this machine can build the topology: root,
// iproute2, nftables, and a kernel with nftables NAT.
func requireNATNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("NAT test: needs root to create network namespaces")
	}
	for _, c := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("NAT test: the %s command is missing (Debian: apt-get install iproute2 nftables)", c)
		}
	}
	probe := fmt.Sprintf("nat%s-probe", strconv.FormatInt(int64(os.Getpid()), 36))
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("NAT test: cannot create a network namespace: %v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", probe).Run()
	cmd := exec.Command("ip", "netns", "exec", probe, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(routerRules(""))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("NAT test: this kernel has no nftables NAT (nft_masq): %v: %s", err, out)
	}
	for _, a := range []string{natPubIP, "192.0.0.195"} {
		if !manet.IsPublicAddr(ma.StringCast("/ip4/" + a + "/tcp/4001")) {
			t.Fatalf("go-multiaddr now counts %s as private: move the test's internet to another range libp2p treats as public", a)
		}
	}
}

// run runs one command; the error shows its output.
func natRun(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// routerRules is a home router: source NAT (masquerade, with masqFlags)
// of the LAN onto the WAN, and a stateful firewall that drops whatever
// arrives on the WAN side unless it answers something sent from inside.
func routerRules(masqFlags string) string {
	return `table ip nat {
	chain masq { type nat hook postrouting priority srcnat; policy accept; oifname "wan" masquerade ` + masqFlags + `; }
}
table inet fw {
	chain routed { type filter hook forward priority filter; policy drop; iifname "lan" oifname "wan" accept; ct state established,related accept; }
	chain tohost { type filter hook input priority filter; policy accept; iifname "wan" ct state established,related accept; iifname "wan" drop; }
}
`
}

// setupNATNet builds the topology; t.Cleanup kills what runs in it and
// removes it, also when the test fails. Every link lives inside the
// namespaces: the host's network is never touched.
func setupNATNet(t *testing.T, tag, masqFlags string) natNet {
	t.Helper()
	n := natNet{prefix: fmt.Sprintf("nat%s-%s-", strconv.FormatInt(int64(os.Getpid()), 36), tag)}
	t.Cleanup(func() { n.teardown(t) })
	for _, role := range natRoles {
		if err := natRun("ip", "netns", "add", n.ns(role)); err != nil {
			t.Fatal(err)
		}
		if err := natRun("ip", "-n", n.ns(role), "link", "set", "lo", "up"); err != nil {
			t.Fatal(err)
		}
	}
	inet := n.ns("inet")
	steps := [][]string{
		{"ip", "-n", inet, "link", "add", "name", "br0", "type", "bridge"},
		{"ip", "-n", inet, "link", "set", "br0", "up"},
		{"ip", "-n", inet, "link", "add", "name", "vpub", "type", "veth", "peer", "name", "eth0", "netns", n.ns("pub")},
		{"ip", "-n", inet, "link", "set", "vpub", "master", "br0", "up"},
		{"ip", "-n", n.ns("pub"), "addr", "add", natPubIP + natNetLen, "dev", "eth0"},
		{"ip", "-n", n.ns("pub"), "link", "set", "eth0", "up"},
	}
	for i, side := range []string{"a", "b"} {
		router, lan := n.ns("r"+side), fmt.Sprintf("10.77.%d.", i+1)
		wan := fmt.Sprintf("192.0.0.%d", 195+i)
		steps = append(steps,
			[]string{"ip", "-n", inet, "link", "add", "name", "v" + side, "type", "veth", "peer", "name", "wan", "netns", router},
			[]string{"ip", "-n", inet, "link", "set", "v" + side, "master", "br0", "up"},
			[]string{"ip", "-n", router, "addr", "add", wan + natNetLen, "dev", "wan"},
			[]string{"ip", "-n", router, "link", "set", "wan", "up"},
			[]string{"ip", "-n", router, "link", "add", "name", "lan", "type", "veth", "peer", "name", "eth0", "netns", n.ns(side)},
			[]string{"ip", "-n", router, "addr", "add", lan + "1/24", "dev", "lan"},
			[]string{"ip", "-n", router, "link", "set", "lan", "up"},
			[]string{"ip", "-n", n.ns(side), "addr", "add", lan + "2/24", "dev", "eth0"},
			[]string{"ip", "-n", n.ns(side), "link", "set", "eth0", "up"},
			[]string{"ip", "-n", n.ns(side), "route", "add", "default", "via", lan + "1"},
			[]string{"ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		)
	}
	for _, s := range steps {
		if err := natRun(s...); err != nil {
			t.Fatal(err)
		}
	}
	for _, side := range []string{"a", "b"} {
		cmd := exec.Command("ip", "netns", "exec", n.ns("r"+side), "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(routerRules(masqFlags))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("router %s: nft: %v: %s", side, err, out)
		}
	}
	return n
}

// teardown kills every process left in the namespaces and deletes them,
// then checks that none is left.
func (n natNet) teardown(t *testing.T) {
	for _, role := range natRoles {
		ns := n.ns(role)
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, p := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(p); err == nil {
					if proc, err := os.FindProcess(pid); err == nil {
						proc.Kill()
					}
				}
			}
		}
		exec.Command("ip", "netns", "del", ns).Run() // its veths go with it
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), n.prefix) {
		t.Errorf("namespaces left behind:\n%s", out)
	}
}

// natPeer is one gossiptrain process in a namespace.
type natPeer struct {
	name, ns, id string
	cmd          *exec.Cmd
	log          bytes.Buffer
	err          error
	done         chan struct{}
}

func (p *natPeer) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// TestNATTraversalInNetworkNamespaces trains one job across two NATs, in
// two kinds of NAT: Linux's plain masquerade keeps a socket's source port
// for every destination (endpoint-independent mapping), so hole punching
// connects A and B directly; "masquerade random" picks a new port for every
// destination (a symmetric NAT), which no hole punch gets through, so A and
// B stay on the relay, and say so. Both runs end with one model.
func TestNATTraversalInNetworkNamespaces(t *testing.T) {
	bin := binary(t)
	requireNATNetns(t)
	dir := t.TempDir()
	if out, err := exec.Command(bin, "gen", "--out", filepath.Join(dir, "data"), "--rows", "30000", "--test-rows", "5000",
		"--features", "65536", "--fields", "20", "--parts", "3", "--seed", "3").CombinedOutput(); err != nil {
		t.Fatalf("gen: %v: %s", err, out)
	}
	idents := newIdentities(t, 3) // pub, a, b

	swarmKey := filepath.Join(dir, "swarm.key")
	if out, err := exec.Command(bin, "keygen", "--swarm", swarmKey).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v: %s", err, out)
	}
	// Peers beyond loopback need the swarm key, and a private swarm runs
	// over TCP only: relaying and hole punching (TCP simultaneous open)
	// through the swarm key's protection.
	keyFlags := []string{"--swarm-key", swarmKey}
	for _, tc := range []struct {
		name, masq string
		flags      []string // for every peer
		want       string   // the kind A and B report for each other
	}{
		{"cone", "", keyFlags, "hole_punched"},
		{"symmetric", "random", keyFlags, "relayed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := setupNATNet(t, tc.name[:1]+strconv.Itoa(len(tc.name)), tc.masq)
			natTrain(t, bin, nw, dir, idents, tc.flags, tc.want)
		})
	}
}

// natTrain runs the job in nw and checks the reports and A's live status.
func natTrain(t *testing.T, bin string, nw natNet, dir string, idents *identities, flags []string, want string) {
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	names := []string{"pub", "a", "b"}
	// 40 epochs keep training going well past the first relayed
	// connection: hole punching begins only after AutoNAT's verdict and a
	// relay reservation, and a run of a few seconds can end before it.
	peers := make([]*natPeer, 3)
	var wg sync.WaitGroup
	for i, name := range names {
		args := []string{"netns", "exec", nw.ns(name), bin, "train", "--job", "nat", "--min-peers", "3", "--log-format", "json",
			"--identity", filepath.Join(idents.dir, fmt.Sprintf("id%d", i)),
			"--train", filepath.Join(dir, "data", fmt.Sprintf("train-%05d-of-00003.svm", i+1)),
			"--test", filepath.Join(dir, "data", "test.svm"), "--dim", "65536", "--epochs", "40", "--batch", "100",
			"--listen", "/ip4/0.0.0.0/tcp/4001", "--status-addr", "127.0.0.1:7070",
			"--report", filepath.Join(out, name+".jsonl")}
		args = append(args, flags...)
		if name == "pub" {
			args = append(args, "--relay")
		} else {
			args = append(args, "--peer", fmt.Sprintf("/ip4/%s/tcp/4001/p2p/%s", natPubIP, idents.ids[0]))
		}
		p := &natPeer{name: name, ns: nw.ns(name), id: idents.ids[i], done: make(chan struct{})}
		p.cmd = exec.CommandContext(ctx, "ip", args...)
		w := &lockedBuf{b: &p.log}
		p.cmd.Stdout, p.cmd.Stderr = w, w
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		peers[i] = p
		wg.Add(1)
		go func() { defer wg.Done(); p.err = p.cmd.Wait(); close(p.done) }()
	}
	a, b := peers[1], peers[2]

	// While they train, A's status ('gossiptrain status', run in A's
	// namespace) must come to show B with the expected kind.
	line := regexp.MustCompile(regexp.QuoteMeta(b.id) + `\s+(direct|hole_punched|relayed)\s`)
	var seen, lastStatus string
	for seen != want && !a.exited() {
		st, err := exec.CommandContext(ctx, "ip", "netns", "exec", a.ns, bin, "status", "127.0.0.1:7070").CombinedOutput()
		if err == nil {
			lastStatus = string(st)
			if m := line.FindStringSubmatch(lastStatus); m != nil {
				seen = m[1]
			}
		}
		select {
		case <-a.done:
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // polling a live process, not waiting for luck
		}
	}
	wg.Wait()

	runs := map[string]*report.Run{}
	for _, p := range peers {
		if p.err != nil {
			for _, q := range peers {
				t.Logf("peer %s (%v): NAT log:\n%s\nlog tail:\n%s", q.name, q.err, natLogLines(q), tail(q.log.String(), 3000))
			}
			t.Fatalf("peer %s: %v", p.name, p.err)
		}
		run, err := report.ReadFile(filepath.Join(out, p.name+".jsonl"))
		if err != nil || run.Summary == nil {
			t.Fatalf("peer %s report: %v\n%s", p.name, err, tail(p.log.String(), 4000))
		}
		runs[p.name] = run
	}
	hash := runs["pub"].Summary.ModelHash
	for _, p := range peers {
		if h := runs[p.name].Summary.ModelHash; h != hash || h == "" {
			t.Errorf("peer %s ends with model_hash %q, pub with %q", p.name, h, hash)
		}
	}
	conns := func(of, to *natPeer) string { return runs[of.name].Summary.Connections[to.id] }
	pub := peers[0]
	if k := conns(a, b); k != want {
		t.Errorf("A's report: connection to B %q, want %q (all: %v)\n%s", k, want, runs["a"].Summary.Connections, natLogLines(a))
	}
	if k := conns(b, a); k != want {
		t.Errorf("B's report: connection to A %q, want %q (all: %v)\n%s", k, want, runs["b"].Summary.Connections, natLogLines(b))
	}
	for _, p := range []*natPeer{a, b} {
		if k := conns(p, pub); k != "direct" {
			t.Errorf("%s's report: connection to the public peer %q, want direct", p.name, k)
		}
		if k := conns(pub, p); k != "direct" {
			t.Errorf("pub's report: connection to %s %q, want direct", p.name, k)
		}
	}
	if seen != want {
		t.Errorf("A's live status never showed B as %s (last: %q); last status:\n%s", want, seen, lastStatus)
	}
	t.Logf("model %s; A and B: %s (report and status); status of A:\n%s\nA's NAT log:\n%s", hash, want, lastStatus, natLogLines(a))
	if want == "relayed" {
		t.Logf("this NAT maps every destination to a new port: hole punching cannot work, and the peers report their connection as relayed")
	}
}

// natLogLines returns a peer's log lines about NAT traversal.
func natLogLines(p *natPeer) string {
	var out []string
	for _, l := range strings.Split(p.log.String(), "\n") {
		if strings.Contains(l, `"component":"nat"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// lockedBuf lets a process's stdout and stderr share one buffer.
type lockedBuf struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
