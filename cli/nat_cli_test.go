package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/node"
)

// --nat and --relay reach node.Config; a bad --nat is a usage error naming
// the flag and the value.
func TestNATFlags(t *testing.T) {
	key := testSwarmKey(t) // the default --listen reaches beyond loopback
	c, p := newPeerCommand()
	if err := c.parse([]string{"--job", "x", "--swarm-key", key}); err != nil {
		t.Fatal(err)
	}
	cfg, err := p.config()
	if err != nil || cfg.NAT != node.NATAuto || cfg.Relay {
		t.Errorf("defaults: nat %q relay %v (%v), want auto and false", cfg.NAT, cfg.Relay, err)
	}
	c, p = newPeerCommand()
	if err := c.parse([]string{"--job", "x", "--swarm-key", key, "--nat", "private", "--relay"}); err != nil {
		t.Fatal(err)
	}
	if cfg, err := p.config(); err != nil || cfg.NAT != node.NATPrivate || !cfg.Relay {
		t.Errorf("--nat private --relay: nat %q relay %v (%v)", cfg.NAT, cfg.Relay, err)
	}
	c, p = newPeerCommand()
	if err := c.parse([]string{"--job", "x", "--nat", "upnp"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.config(); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), `--nat: "upnp"`) {
		t.Errorf("--nat upnp: %v, want a usage error naming --nat and the value", err)
	}
}
