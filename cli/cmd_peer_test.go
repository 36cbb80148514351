package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/node"
)

const peerA = "12D3KooWEuQpbAyLHLUeuVP76S437TmCa34vq4G4tKrK5eZ11oJy"

// testSwarmKey writes a new swarm key into the test's directory.
func testSwarmKey(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.key")
	if _, err := node.CreateSwarmKey(path, false); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPeerFlagsToConfig(t *testing.T) {
	key := testSwarmKey(t)
	c, p := newPeerCommand()
	err := c.parse([]string{
		"--job", "ctr1", "--swarm-key", key, "--listen", "/ip4/0.0.0.0/tcp/4001", "--peer", "/ip4/10.0.0.5/tcp/4001/p2p/" + peerA,
		"--dead-after", "3s", "--heartbeat", "250ms", "--shards", "512", "--topology", "master",
		"--conn-limit", "64", "--mdns", "--min-peers", "4", "--libp2p-log-level", "error",
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := p.config()
	if err != nil {
		t.Fatal(err)
	}
	want := node.DefaultConfig()
	switch {
	case cfg.Job != "ctr1" || len(cfg.Listen) != 1 || cfg.Listen[0] != "/ip4/0.0.0.0/tcp/4001":
		t.Errorf("job/listen: %q %v", cfg.Job, cfg.Listen)
	case len(cfg.Peers) != 1 || !cfg.MDNS || cfg.DHT:
		t.Errorf("discovery: peers %v mdns %v dht %v", cfg.Peers, cfg.MDNS, cfg.DHT)
	case cfg.DeadAfter != 3*time.Second || cfg.Heartbeat != 250*time.Millisecond || cfg.MinPeers != 4:
		t.Errorf("timings: %v %v %d", cfg.DeadAfter, cfg.Heartbeat, cfg.MinPeers)
	case cfg.Shards != 512 || cfg.Topology != node.TopologyMaster || cfg.VNodes != want.VNodes:
		t.Errorf("ring: %d shards, %s, %d vnodes", cfg.Shards, cfg.Topology, cfg.VNodes)
	case cfg.ConnLimit != 64 || cfg.MaxMessageSize != want.MaxMessageSize:
		t.Errorf("network: conn limit %d, max message %d", cfg.ConnLimit, cfg.MaxMessageSize)
	}
	// Without --listen, the default (TCP on every interface), with the key.
	c, p = newPeerCommand()
	if err := c.parse([]string{"--job", "x", "--swarm-key", key}); err != nil {
		t.Fatal(err)
	}
	if cfg, err := p.config(); err != nil || strings.Join(cfg.Listen, " ") != "/ip4/0.0.0.0/tcp/0" || cfg.SwarmKey != key {
		t.Errorf("default listen %v, key %q, %v; want /ip4/0.0.0.0/tcp/0 and %s", cfg.Listen, cfg.SwarmKey, err, key)
	}
}

// Beyond loopback a peer needs --swarm-key: without it, peer and train
// refuse to start (exit 2), naming the flag and how to make a key; on
// loopback no key is needed, and a lone train (no --job) needs none.
func TestPeerNeedsSwarmKeyBeyondLoopback(t *testing.T) {
	for _, args := range [][]string{
		{"--job", "x"}, // the default --listen: every interface
		{"--job", "x", "--listen", "/ip4/0.0.0.0/tcp/4001"},
		{"--job", "x", "--listen", "/ip4/127.0.0.1/tcp/0,/ip6/::/tcp/0"},
	} {
		c, p := newPeerCommand()
		if err := c.parse(args); err != nil {
			t.Fatal(err)
		}
		_, err := p.config()
		if !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
			continue
		}
		for _, want := range []string{"--swarm-key:", "gossiptrain keygen --swarm job.key", "--swarm-key job.key", "0600", "127.0.0.1"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v: %q does not say %q", args, err, want)
			}
		}
	}
	for _, args := range [][]string{
		{"--job", "x", "--listen", "/ip4/127.0.0.1/tcp/0"},
		{"--job", "x", "--listen", "/ip6/::1/tcp/0,/ip4/127.0.0.1/udp/0/quic-v1"},
	} {
		c, p := newPeerCommand()
		if err := c.parse(args); err != nil {
			t.Fatal(err)
		}
		if _, err := p.config(); err != nil {
			t.Errorf("%v: %v, want no error on loopback", args, err)
		}
	}

	data := filepath.Join(t.TempDir(), "train.svm")
	if err := os.WriteFile(data, []byte("1 1:1\n0 2:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := Main([]string{"train", "--job", "x", "--train", data, "--dim", "4", "--epochs", "1"}, &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "--swarm-key") || !strings.Contains(errOut.String(), "keygen --swarm") {
		t.Errorf("train --job x with the default --listen and no key: exit %d, %q; want 2 naming --swarm-key", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	code = Main([]string{"train", "--train", data, "--dim", "4", "--epochs", "1", "--log-level", "error"}, &out, &errOut)
	if code != 0 {
		t.Errorf("a lone train (no --job) without a key: exit %d, %q; want 0", code, errOut.String())
	}
}

func TestPeersAllowedFlag(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("# the job\n"+peerA+"\n"), 0o644)
	os.WriteFile(bad, []byte(peerA+"\n\nvm3\n"), 0o644)
	c, p := newPeerCommand()
	if err := c.parse([]string{"--job", "x", "--listen", "/ip4/127.0.0.1/tcp/0", "--peers-allowed", good}); err != nil {
		t.Fatal(err)
	}
	if cfg, err := p.config(); err != nil || cfg.PeersAllowed != good {
		t.Errorf("--peers-allowed %s: PeersAllowed %q, %v", good, cfg.PeersAllowed, err)
	}
	c, p = newPeerCommand()
	if err := c.parse([]string{"--job", "x", "--listen", "/ip4/127.0.0.1/tcp/0", "--peers-allowed", bad}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.config(); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--peers-allowed: "+bad+":3:") {
		t.Errorf("a bad allow-list: %v, want a usage error naming --peers-allowed and %s:3", err, bad)
	}
}

func TestPeerFlagErrorsNameTheFlag(t *testing.T) {
	tests := []struct {
		args []string
		flag string
	}{
		{[]string{}, "--job"},
		{[]string{"--job", "a/b"}, "--job"},
		{[]string{"--job", "x", "--dead-after", "100ms"}, "--dead-after"},
		{[]string{"--job", "x", "--shards", "100"}, "--shards"},
		{[]string{"--job", "x", "--peer", "/ip4/10.0.0.5/tcp/4001"}, "--peer"},
		{[]string{"--job", "x", "--listen", "10.0.0.5:4001"}, "--listen"},
		{[]string{"--job", "x", "--topology", "star"}, "--topology"},
		{[]string{"--job", "x", "--dht"}, "--dht"},
		{[]string{"--job", "x", "--status-addr", "nonsense"}, "--status-addr"},
		{[]string{"--job", "x", "--libp2p-log-level", "loud"}, "--libp2p-log-level"},
	}
	for _, tt := range tests {
		c, p := newPeerCommand()
		if err := c.parse(tt.args); err != nil {
			t.Fatal(err)
		}
		_, err := p.config()
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.flag+":") {
			t.Errorf("%v: error %v, want a usage error naming %s", tt.args, err, tt.flag)
		}
	}
}

func TestKeygenCommand(t *testing.T) {
	dir := t.TempDir()
	swarm, id := filepath.Join(dir, "swarm.key"), filepath.Join(dir, "keys", "id")
	var out, errOut bytes.Buffer
	if code := Main([]string{"keygen", "--swarm", swarm, "--identity", id}, &out, &errOut); code != 0 {
		t.Fatalf("keygen exit %d: %s", code, errOut.String())
	}
	if _, err := node.LoadSwarmKey(swarm); err != nil {
		t.Error(err)
	}
	if _, err := node.LoadIdentity(id); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "peer ID 12D3KooW") {
		t.Errorf("keygen output %q does not print the peer ID", out.String())
	}
	before, _ := os.ReadFile(swarm)
	errOut.Reset()
	if code := Main([]string{"keygen", "--swarm", swarm}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "--force") {
		t.Errorf("keygen over an existing key: exit %d, %q; want 1 and a hint at --force", code, errOut.String())
	}
	if after, _ := os.ReadFile(swarm); !bytes.Equal(before, after) {
		t.Error("the existing swarm key was changed")
	}
	if code := Main([]string{"keygen"}, &out, &errOut); code != 2 {
		t.Errorf("keygen without a file: exit %d, want 2", code)
	}
}

func TestStatusCommand(t *testing.T) {
	st := node.Status{PeerID: peerA, Job: "ctr1", Epoch: 4, Members: []string{peerA}, OwnedShards: []int{1, 2},
		Topology: "ring", Shards: 4, ShardCounts: map[string]int{peerA: 4}, Agreed: true}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(st)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	var out, errOut bytes.Buffer
	if code := Main([]string{"status", addr}, &out, &errOut); code != 0 {
		t.Fatalf("status exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "4 (agreed") || !strings.Contains(out.String(), peerA) {
		t.Errorf("status output:\n%s", out.String())
	}
	out.Reset()
	if code := Main([]string{"status", addr, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("status --json exit %d: %s", code, errOut.String())
	}
	var back node.Status
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Epoch != 4 || back.PeerID != peerA {
		t.Errorf("status --json gave %q (%v)", out.String(), err)
	}
	errOut.Reset()
	if code := Main([]string{"status", "127.0.0.1:1"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "127.0.0.1:1") {
		t.Errorf("unreachable peer: exit %d, %q", code, errOut.String())
	}
}

func TestPeerHelpTeaches(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"peer", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"multicast", "--conn-limit", "NAT", "--swarm-key", "TCP only", "--peers-allowed", "docs/security.md", "Identity:", "Network:", "Discovery:", "Cluster:", "Logging:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("peer --help does not mention %q", want)
		}
	}
}
