package main

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

func TestPeerFlagsToConfig(t *testing.T) {
	c, p := newPeerCommand()
	err := c.parse([]string{
		"--job", "ctr1", "--listen", "/ip4/0.0.0.0/tcp/4001", "--peer", "/ip4/10.0.0.5/tcp/4001/p2p/" + peerA,
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
	// Without --listen, the defaults (TCP and QUIC on every interface).
	c, p = newPeerCommand()
	if err := c.parse([]string{"--job", "x"}); err != nil {
		t.Fatal(err)
	}
	if cfg, err := p.config(); err != nil || strings.Join(cfg.Listen, " ") != strings.Join(want.Listen, " ") {
		t.Errorf("default listen %v, %v; want %v", cfg.Listen, err, want.Listen)
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
	if code := run([]string{"keygen", "--swarm", swarm, "--identity", id}, &out, &errOut); code != 0 {
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
	if code := run([]string{"keygen", "--swarm", swarm}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "--force") {
		t.Errorf("keygen over an existing key: exit %d, %q; want 1 and a hint at --force", code, errOut.String())
	}
	if after, _ := os.ReadFile(swarm); !bytes.Equal(before, after) {
		t.Error("the existing swarm key was changed")
	}
	if code := run([]string{"keygen"}, &out, &errOut); code != 2 {
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
	if code := run([]string{"status", addr}, &out, &errOut); code != 0 {
		t.Fatalf("status exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "4 (agreed") || !strings.Contains(out.String(), peerA) {
		t.Errorf("status output:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"status", addr, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("status --json exit %d: %s", code, errOut.String())
	}
	var back node.Status
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Epoch != 4 || back.PeerID != peerA {
		t.Errorf("status --json gave %q (%v)", out.String(), err)
	}
	errOut.Reset()
	if code := run([]string{"status", "127.0.0.1:1"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "127.0.0.1:1") {
		t.Errorf("unreachable peer: exit %d, %q", code, errOut.String())
	}
}

func TestPeerHelpTeaches(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"peer", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"multicast", "--conn-limit", "NAT", "--swarm-key", "TCP only", "Identity:", "Network:", "Discovery:", "Cluster:", "Logging:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("peer --help does not mention %q", want)
		}
	}
}
