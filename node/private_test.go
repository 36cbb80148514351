package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
)

// rawHost starts a bare libp2p host on loopback, with psk's private
// network when psk is not nil: what an intruder would run, no gossiptrain
// code involved.
func rawHost(t *testing.T, psk pnet.PSK) host.Host {
	t.Helper()
	opts := []libp2p.Option{
		libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		libp2p.DisableMetrics(),
	}
	if psk != nil {
		opts = append(opts, libp2p.PrivateNetwork(psk), libp2p.Transport(tcp.NewTCPTransport))
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// addrInfo is n's loopback address for a raw dial.
func addrInfo(t *testing.T, n *Node) peer.AddrInfo {
	t.Helper()
	ai, err := ParsePeerAddr(n.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	return ai
}

// With a swarm key, a host without it, or with another key, cannot connect
// at all: the handshake fails before any protocol, so it learns nothing
// (no hello, no identify). A host with the key connects, so the dials
// themselves are sound.
func TestPrivateNetworkRefusesRawDials(t *testing.T) {
	log, _ := testLog(t)
	psk := testPSK(t)
	cfg := fastConfig("private-raw")
	cfg.PSK = psk
	nodes := startCluster(t, 2, cfg, log)
	waitFor(t, 5*time.Second, agreed(nodes))
	target := addrInfo(t, nodes[0])

	for _, tc := range []struct {
		name string
		psk  pnet.PSK
	}{{"no key", nil}, {"another key", testPSK(t)}} {
		h := rawHost(t, tc.psk)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := h.Connect(ctx, target)
		cancel()
		if err == nil {
			t.Errorf("%s: a raw host connected to a keyed node", tc.name)
		}
		if protos, _ := h.Peerstore().GetProtocols(target.ID); len(protos) > 0 {
			t.Errorf("%s: the raw host learnt the node's protocols %v", tc.name, protos)
		}
		if nodes[0].Host().Network().Connectedness(h.ID()) == network.Connected {
			t.Errorf("%s: the node is connected to the raw host", tc.name)
		}
	}
	if r := nodes[0].Status().Network.RefusedPeers; r != 0 {
		t.Errorf("the node refused %d peers at the hello: keyless hosts must never reach it", r)
	}

	// Control: the same dial with the key gets through.
	h := rawHost(t, psk)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Connect(ctx, target); err != nil {
		t.Fatalf("a raw host with the key could not connect: %v", err)
	}
}

// edKey returns a new Ed25519 identity and its peer ID.
func edKey(t *testing.T) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, id
}

func writeAllow(t *testing.T, path string, lines ...string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as editors and scp -p leave it: whole
		t.Fatal(err)
	}
}

func connected(a, b *Node) bool {
	return a.Host().Network().Connectedness(b.Self()) == network.Connected
}

// The allow-list shuts a key holder out: one not listed cannot connect;
// one removed from the file while connected is disconnected within a few
// seconds (the file is polled every 2s) and stays out; a bad edit is
// logged and changes nothing.
func TestAllowListReload(t *testing.T) {
	log, lb := testLog(t)
	psk := testPSK(t)
	keyB, idB := edKey(t)
	keyC, idC := edKey(t)
	allow := filepath.Join(t.TempDir(), "peers-allowed")
	writeAllow(t, allow, "# the job's peers", idB.String()+"  # b")

	cfg := fastConfig("allow")
	cfg.PSK = psk
	ca := cfg
	ca.PeersAllowed = allow
	a := startNode(t, ca, log, "a")
	cb := cfg
	cb.Key, cb.Peers = keyB, []string{a.Addrs()[0]}
	b := startNode(t, cb, log, "b")
	waitFor(t, 5*time.Second, agreed([]*Node{a, b}))

	cc := cfg
	cc.Key, cc.Peers = keyC, []string{a.Addrs()[0]}
	c := startNode(t, cc, log, "c")
	waitFor(t, 5*time.Second, func() (bool, string) {
		d := a.gater.denied.Load()
		return d >= 2, fmt.Sprintf("the allow-list refused %d connections", d)
	})
	if connected(a, c) || slices.Contains(a.View().Members, idC.String()) {
		t.Fatal("a peer not on the allow-list connected or joined")
	}
	if a.Allowed(idC) || !a.Allowed(idB) || !a.Allowed(a.Self()) {
		t.Errorf("Allowed: c %v, b %v, self %v; want false, true, true", a.Allowed(idC), a.Allowed(idB), a.Allowed(a.Self()))
	}

	// b is compromised: list c instead.
	writeAllow(t, allow, idC.String())
	took := waitFor(t, 6*time.Second, func() (bool, string) {
		return !connected(a, b) && connected(a, c), fmt.Sprintf("a connected to b: %v, to c: %v", connected(a, b), connected(a, c))
	})
	t.Logf("b disconnected and c let in %v after the edit", took.Round(time.Millisecond))
	if !strings.Contains(lb.String(), "allow-list changed") || !strings.Contains(lb.String(), idB.String()) {
		t.Error("the change is not logged with the peer removed")
	}
	// b keeps redialling a (its bootstrap peer) and is refused every time.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if connected(a, b) {
			t.Fatal("the removed peer connected again")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A bad edit keeps the list in force.
	writeAllow(t, allow, idC.String(), "not-a-peer-id")
	waitFor(t, 6*time.Second, func() (bool, string) {
		return strings.Contains(lb.String(), allow+":2:"), "the bad line is not logged"
	})
	if !connected(a, c) || !a.Allowed(idC) || a.Allowed(idB) {
		t.Error("a bad allow-list edit changed who may connect")
	}
}

// A bad allow-list stops the node from starting, naming the file and line.
func TestAllowListBadFileRefusesStart(t *testing.T) {
	log, _ := testLog(t)
	bad := filepath.Join(t.TempDir(), "allowed")
	writeAllow(t, bad, "# ok", "", "12D3KooW-nope")
	cfg := fastConfig("allow-bad")
	cfg.PeersAllowed = bad
	_, err := New(cfg, log)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "PeersAllowed" || !strings.Contains(fe.Msg, bad+":3:") {
		t.Errorf("New with a bad allow-list: %v, want a FieldError on PeersAllowed naming %s:3", err, bad)
	}
}

func TestReadPeersAllowed(t *testing.T) {
	_, id1 := edKey(t)
	_, id2 := edKey(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		want       []peer.ID
		wantErr    string // in the error, after the path
	}{
		{"ids, comments, blanks", "# job ctr1\n\n" + id1.String() + "\n  " + id2.String() + "  # vm2\n", []peer.ID{id1, id2}, ""},
		{"not an ID", id1.String() + "\nQmNotAnID\n", nil, ":2: \"QmNotAnID\" is not a peer ID"},
		{"two on a line", id1.String() + " " + id2.String() + "\n", nil, ":1: "},
		{"only comments", "# nobody\n\n", nil, " lists no peer ID"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
		if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadPeersAllowed(path)
		if tc.wantErr == "" {
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, ErrPeersAllowed) || !strings.Contains(err.Error(), path+tc.wantErr) {
			t.Errorf("%s: err %v, want ErrPeersAllowed with %q", tc.name, err, path+tc.wantErr)
		}
	}
	if _, err := ReadPeersAllowed(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}
