package node

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
)

const testPeerID = "12D3KooWEuQpbAyLHLUeuVP76S437TmCa34vq4G4tKrK5eZ11oJy"

func TestConfigValidate(t *testing.T) {
	rsa, _, err := crypto.GenerateSecp256k1Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		edit      func(c *Config)
		wantField string // "" = valid
		wantMsg   string
	}{
		{"defaults with a job", func(c *Config) {}, "", ""},
		{"no job", func(c *Config) { c.Job = "" }, "Job", "required"},
		{"job with a slash", func(c *Config) { c.Job = "a/b" }, "Job", `"a/b"`},
		{"job starting with a dot", func(c *Config) { c.Job = ".x" }, "Job", `".x"`},
		{"job of 65 chars", func(c *Config) { c.Job = strings.Repeat("j", 65) }, "Job", "1-64"},
		{"job of 64 chars", func(c *Config) { c.Job = strings.Repeat("j", 64) }, "", ""},
		{"no listen", func(c *Config) { c.Listen = nil }, "Listen", "no listen address"},
		{"bad listen", func(c *Config) { c.Listen = []string{"tcp://0.0.0.0:4001"} }, "Listen", `"tcp://0.0.0.0:4001"`},
		{"peer without /p2p", func(c *Config) { c.Peers = []string{"/ip4/10.0.0.5/tcp/4001"} }, "Peers", "/p2p/"},
		{"peer with /p2p", func(c *Config) { c.Peers = []string{"/ip4/10.0.0.5/tcp/4001/p2p/" + testPeerID} }, "", ""},
		{"peer ID only", func(c *Config) { c.Peers = []string{"/p2p/" + testPeerID} }, "Peers", "no transport address"},
		{"secp256k1 key", func(c *Config) { c.Key = rsa }, "Key", "Ed25519"},
		{"zero heartbeat", func(c *Config) { c.Heartbeat = 0 }, "Heartbeat", "0s"},
		{"dead-after below 2 beats", func(c *Config) { c.Heartbeat, c.DeadAfter = time.Second, 1999*time.Millisecond }, "DeadAfter", "1.999s"},
		{"dead-after at 2 beats", func(c *Config) { c.Heartbeat, c.DeadAfter = time.Second, 2*time.Second }, "", ""},
		{"min peers 0", func(c *Config) { c.MinPeers = 0 }, "MinPeers", "0"},
		{"shards not a power of two", func(c *Config) { c.Shards = 100 }, "Shards", "100"},
		{"vnodes 0", func(c *Config) { c.VNodes = 0 }, "VNodes", "0"},
		{"replicas 0", func(c *Config) { c.Replicas = 0 }, "Replicas", "0"},
		{"load bound 50%", func(c *Config) { c.MaxLoadPercent = 50 }, "MaxLoadPercent", "50"},
		{"unknown topology", func(c *Config) { c.Topology = "star" }, "Topology", `"star"`},
		{"bad master", func(c *Config) { c.Topology, c.Master = TopologyMaster, "alice" }, "Master", `"alice"`},
		{"good master", func(c *Config) { c.Topology, c.Master = TopologyMaster, testPeerID }, "", ""},
		{"status addr without port", func(c *Config) { c.StatusAddr = "localhost" }, "StatusAddr", `"localhost"`},
		{"conn limit 0", func(c *Config) { c.ConnLimit = 0 }, "ConnLimit", "0"},
		{"message size too small", func(c *Config) { c.MaxMessageSize = 1000 }, "MaxMessageSize", "1000"},
		{"outbound queue 0", func(c *Config) { c.OutboundQueueSize = 0 }, "OutboundQueueSize", "0"},
		{"validate queue 0", func(c *Config) { c.ValidateQueueSize = 0 }, "ValidateQueueSize", "0"},
		{"gossip heartbeat 0", func(c *Config) { c.GossipSub.HeartbeatInterval = 0 }, "GossipSub", "HeartbeatInterval"},
		{"redial max below min", func(c *Config) { c.RedialMin, c.RedialMax = time.Second, time.Millisecond }, "RedialMax", "1ms"},
		{"block for 0", func(c *Config) { c.BlockFor = 0 }, "BlockFor", "0s"},
		{"short PSK", func(c *Config) { c.PSK = c.PSK[:16] }, "PSK", "16 bytes"},
		{"PSK and SwarmKey", func(c *Config) { c.SwarmKey = "job.key" }, "SwarmKey", "give one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Job = "ctr1"
			c.PSK = testPSK(t) // the default listen address needs one
			tt.edit(&c)
			err := c.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrConfig) {
				t.Fatalf("Validate() = %v, want a *FieldError wrapping ErrConfig", err)
			}
			if fe.Field != tt.wantField || !strings.Contains(fe.Msg, tt.wantMsg) {
				t.Errorf("Validate() = field %q msg %q, want field %q msg containing %q", fe.Field, fe.Msg, tt.wantField, tt.wantMsg)
			}
		})
	}
}

// testPSK returns a new random swarm key.
func testPSK(t *testing.T) pnet.PSK {
	t.Helper()
	psk := make(pnet.PSK, 32)
	if _, err := rand.Read(psk); err != nil {
		t.Fatal(err)
	}
	return psk
}

// A peer reachable beyond loopback needs a swarm key; loopback does not
// (issue 30: a keyless third peer joined a run and poisoned its model).
func TestValidateSwarmKeyBeyondLoopback(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "job.key")
	if _, err := CreateSwarmKey(keyFile, false); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		listen  []string
		key     func(c *Config)
		wantErr bool
	}{
		{"default listen, no key", DefaultConfig().Listen, func(*Config) {}, true},
		{"0.0.0.0, no key", []string{"/ip4/0.0.0.0/tcp/4001"}, func(*Config) {}, true},
		{"::, no key", []string{"/ip6/::/tcp/4001"}, func(*Config) {}, true},
		{"a LAN address, no key", []string{"/ip4/10.0.0.5/tcp/4001"}, func(*Config) {}, true},
		{"loopback then 0.0.0.0 QUIC, no key", []string{"/ip4/127.0.0.1/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}, func(*Config) {}, true},
		{"a DNS name, no key", []string{"/dns4/localhost/tcp/4001"}, func(*Config) {}, true},
		{"127.0.0.1, no key", []string{"/ip4/127.0.0.1/tcp/0"}, func(*Config) {}, false},
		{"::1 and 127.0.0.1 QUIC, no key", []string{"/ip6/::1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}, func(*Config) {}, false},
		{"0.0.0.0 with a PSK", []string{"/ip4/0.0.0.0/tcp/4001"}, func(c *Config) { c.PSK = testPSK(t) }, false},
		{"0.0.0.0 with a key file", []string{"/ip4/0.0.0.0/tcp/4001"}, func(c *Config) { c.SwarmKey = keyFile }, false},
		{"default listen with a key file", DefaultConfig().Listen, func(c *Config) { c.SwarmKey = keyFile }, false},
	} {
		c := DefaultConfig()
		c.Job, c.Listen = "ctr1", tc.listen
		tc.key(&c)
		err := c.Validate()
		if !tc.wantErr {
			if err != nil {
				t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "SwarmKey" {
			t.Errorf("%s: Validate() = %v, want a *FieldError on SwarmKey", tc.name, err)
			continue
		}
		for _, want := range []string{"gossiptrain keygen --swarm", "--swarm-key", "0600", "127.0.0.1"} {
			if !strings.Contains(fe.Msg, want) {
				t.Errorf("%s: message %q does not say %q", tc.name, fe.Msg, want)
			}
		}
	}
	if l := DefaultConfig().Listen; len(l) != 1 || l[0] != "/ip4/0.0.0.0/tcp/0" {
		t.Errorf("default Listen %v, want TCP only (a swarm key's private network is TCP only)", l)
	}
}

func TestBootstrapPeersMergesFlagsAndFile(t *testing.T) {
	other := "12D3KooWMM2ytcRo6aurg488ya48f1DHxB3hZBVUR6zKCbLQCcdw"
	file := filepath.Join(t.TempDir(), "peers.txt")
	text := "# cluster\n\n/ip4/10.0.0.6/tcp/4001/p2p/" + other + "\n  /ip4/10.0.0.5/udp/4001/quic-v1/p2p/" + testPeerID + "  \n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Peers = []string{"/ip4/10.0.0.5/tcp/4001/p2p/" + testPeerID}
	cfg.PeersFile = file
	got, err := bootstrapPeers(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The flag's peer comes first (it is the default master) and keeps both
	// of its addresses; the file's other peer follows.
	if len(got) != 2 || got[0].ID.String() != testPeerID || got[1].ID.String() != other {
		t.Fatalf("peers = %v, want [%s %s]", got, testPeerID, other)
	}
	if len(got[0].Addrs) != 2 {
		t.Errorf("first peer has addrs %v, want the tcp and the quic one", got[0].Addrs)
	}

	bad := filepath.Join(t.TempDir(), "bad.txt")
	if err := os.WriteFile(bad, []byte("# ok\n/ip4/10.0.0.6/tcp/4001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.PeersFile = bad
	_, err = bootstrapPeers(&cfg)
	if !errors.Is(err, ErrPeerAddr) || !strings.Contains(err.Error(), bad+":2:") {
		t.Errorf("bad peers file: err = %v, want ErrPeerAddr naming %s:2", err, bad)
	}
}

func TestMasterID(t *testing.T) {
	self, err := peer.Decode(testPeerID)
	if err != nil {
		t.Fatal(err)
	}
	other := "12D3KooWMM2ytcRo6aurg488ya48f1DHxB3hZBVUR6zKCbLQCcdw"
	third := "12D3KooWQvHvRpB7h3d7ZLT2Du5V7BrSNTs4xqsX8qUpHtmFxwjj"
	otherID, _ := peer.Decode(other)
	tests := []struct {
		name   string
		master string
		boot   []peer.AddrInfo
		want   string
	}{
		{"alone", "", nil, testPeerID},
		{"first bootstrap peer", "", []peer.AddrInfo{{ID: otherID}}, other},
		{"explicit master wins", third, []peer.AddrInfo{{ID: otherID}}, third},
	}
	for _, tt := range tests {
		n := &Node{self: self, boot: tt.boot}
		n.cfg.Master = tt.master
		if got := n.masterID(); got != tt.want {
			t.Errorf("%s: masterID() = %s, want %s", tt.name, got, tt.want)
		}
	}
}
