package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	ma "github.com/multiformats/go-multiaddr"
)

func TestMDNSServiceName(t *testing.T) {
	k1, k2 := testPSK(t), testPSK(t)
	// A DNS-SD service label: underscore, at most 15 letters/digits/hyphens
	// (RFC 6335), then the transport.
	re := regexp.MustCompile(`^_[a-z0-9-]{1,15}\._udp$`)
	names := map[string]string{}
	for _, tc := range []struct {
		what string
		job  string
		psk  pnet.PSK
	}{{"ctr1", "ctr1", nil}, {"ctr2", "ctr2", nil}, {"ctr1 with key 1", "ctr1", k1}, {"ctr2 with key 1", "ctr2", k1}, {"ctr1 with key 2", "ctr1", k2}} {
		name := mdnsServiceName(tc.job, tc.psk)
		if !re.MatchString(name) {
			t.Errorf("%s: service name %q is not a valid DNS-SD service", tc.what, name)
		}
		if other, ok := names[name]; ok {
			t.Errorf("%s and %s share the mDNS service %s", tc.what, other, name)
		}
		names[name] = tc.what
		if again := mdnsServiceName(tc.job, append(pnet.PSK(nil), tc.psk...)); again != name {
			t.Errorf("%s: service name %s then %s: not a function of the job and key", tc.what, name, again)
		}
	}
	// Without a key the name is the job's hash (as before keys were
	// required); a listener cannot test job names against a keyed one.
	if got := mdnsServiceName("ctr1", nil); got != fmt.Sprintf("_gt-%012x._udp", xxhash.Sum64String("ctr1")>>16) {
		t.Errorf("keyless service name %s changed", got)
	}
}

func TestRendezvousName(t *testing.T) {
	k1, k2 := testPSK(t), testPSK(t)
	if got := rendezvous("ctr1", nil); got != "gossiptrain/ctr1" {
		t.Errorf("keyless rendezvous %q, want gossiptrain/ctr1", got)
	}
	a, b, c := rendezvous("ctr1", k1), rendezvous("ctr1", k2), rendezvous("ctr2", k1)
	if a == b || a == c || b == c {
		t.Errorf("rendezvous of (ctr1,k1) %s, (ctr1,k2) %s, (ctr2,k1) %s: want all different", a, b, c)
	}
	if strings.Contains(a, "ctr1") {
		t.Errorf("keyed rendezvous %q names the job", a)
	}
	if rendezvous("ctr1", k1) != a {
		t.Error("the keyed rendezvous is not a function of the job and key")
	}
}

// testHost starts a bare host with a dialer, as Node does, closed at the end
// of the test.
func testHost(t *testing.T, cfg Config) (host.Host, *dialer) {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	log, _ := testLog(t)
	h, err := buildHost(&cfg, key, nil, newGater(), newBandwidth(), log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := newDialer(h, &cfg, log)
	done := make(chan struct{})
	go func() { d.run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		h.Close()
	})
	return h, d
}

// TestDHTRendezvousConnectsStrangers: B and C know only the bootstrap peer
// A; the DHT rendezvous on the job name makes B and C connect directly.
func TestDHTRendezvousConnectsStrangers(t *testing.T) {
	cfg := fastConfig("dht")
	log, _ := testLog(t)
	ha, da := testHost(t, cfg)
	hb, db := testHost(t, cfg)
	hc, dc := testHost(t, cfg)
	boot := []peer.AddrInfo{{ID: ha.ID(), Addrs: ha.Addrs()}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, x := range []struct {
		h    host.Host
		d    *dialer
		boot []peer.AddrInfo
	}{{ha, da, nil}, {hb, db, boot}, {hc, dc, boot}} {
		for _, ai := range x.boot {
			x.d.add(ai, wantBootstrap)
		}
		kad, err := startDHT(ctx, x.h, x.boot)
		if err != nil {
			t.Fatal(err)
		}
		defer kad.Close()
		go dhtLoop(ctx, x.h, kad, rendezvous(cfg.Job, nil), x.d, log)
	}
	// The DHT's own routing-table refresh may connect B and C first; the
	// rendezvous must also hand each to the other's dialer as found there.
	found := func(d *dialer, id peer.ID) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		t := d.targets[id]
		return t != nil && t.want&wantFound != 0
	}
	took := waitFor(t, 20*time.Second, func() (bool, string) {
		switch {
		case hb.Network().Connectedness(hc.ID()) != network.Connected:
			return false, fmt.Sprintf("B and C not connected (B knows %d peers)", len(hb.Network().Peers()))
		case !found(db, hc.ID()) || !found(dc, hb.ID()):
			return false, "B and C have not found each other at the rendezvous"
		}
		return true, ""
	})
	t.Logf("B and C met through the DHT rendezvous after %v", took)
}

// TestDialerRedialsWithBackoff: a bootstrap peer that is down is retried
// with growing waits, and connected as soon as it is back.
func TestDialerRedialsWithBackoff(t *testing.T) {
	cfg := fastConfig("redial")
	cfg.RedialMin, cfg.RedialMax = 20*time.Millisecond, 160*time.Millisecond
	ha, _ := testHost(t, cfg)
	addr := ha.Addrs()[0]
	hb, db := testHost(t, cfg)

	// A peer ID nobody listens for at A's address: every dial fails.
	ghostKey, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	ghost, _ := peer.IDFromPrivateKey(ghostKey)
	db.add(peer.AddrInfo{ID: ghost, Addrs: []ma.Multiaddr{addr}}, wantBootstrap)
	waitFor(t, 5*time.Second, func() (bool, string) {
		f := db.failures.Load()
		return f >= 5, fmt.Sprintf("%d failed dials", f)
	})
	db.mu.Lock()
	backoff := db.targets[ghost].backoff
	db.mu.Unlock()
	if backoff != cfg.RedialMax {
		t.Errorf("after 5 failures the backoff is %v, want the cap %v", backoff, cfg.RedialMax)
	}

	// A real peer is connected at once, and again after it drops.
	db.add(peer.AddrInfo{ID: ha.ID(), Addrs: ha.Addrs()}, wantBootstrap)
	waitFor(t, 5*time.Second, func() (bool, string) {
		return hb.Network().Connectedness(ha.ID()) == network.Connected, "not connected to A"
	})
	if err := hb.Network().ClosePeer(ha.ID()); err != nil {
		t.Fatal(err)
	}
	took := waitFor(t, 5*time.Second, func() (bool, string) {
		return hb.Network().Connectedness(ha.ID()) == network.Connected, "A not redialled"
	})
	t.Logf("redialled a dropped bootstrap peer after %v", took)
}
