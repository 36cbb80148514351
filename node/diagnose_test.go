package node

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// deadAddr is a bootstrap address where nothing listens: a loopback port
// that was free a moment ago, with a valid peer ID.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", port, testPeerID)
}

// A peer whose --peer is dead logs the dial error at once, and its
// diagnosis names the peer, the error, the failures and what it means.
func TestDiagnoseDeadBootstrapPeer(t *testing.T) {
	log, lb := testLog(t)
	cfg := fastConfig("dead")
	cfg.MinPeers = 2
	cfg.Peers = []string{deadAddr(t)}
	n := startNode(t, cfg, log, "lonely")
	waitFor(t, 5*time.Second, func() (bool, string) {
		return strings.Contains(lb.String(), "cannot reach a bootstrap peer"), "no dial error logged"
	})
	var d Diagnosis
	waitFor(t, 5*time.Second, func() (bool, string) {
		d = n.Diagnose()
		return len(d.Bootstrap) == 1 && d.Bootstrap[0].Failures >= 2, fmt.Sprintf("diagnosis %+v", d)
	})
	b := d.Bootstrap[0]
	if b.ID != testPeerID || b.Connected || !strings.Contains(b.LastError, "connection refused") || !strings.Contains(b.Hint, "nothing listens") {
		t.Errorf("bootstrap peer %+v: want its ID, not connected, connection refused and a hint", b)
	}
	if strings.Contains(b.LastError, "\n") {
		t.Errorf("the error is not on one line: %q", b.LastError)
	}
	if d.Formed() || d.Members != 1 || d.MinPeers != 2 {
		t.Errorf("diagnosis %+v: want 1 of 2 members, not formed", d)
	}
	reasons := strings.Join(d.Reasons(), "\n")
	for _, want := range []string{"1 of --min-peers 2 members", "--peer 12D3…", "dials failed, the last:", "connection refused", "nothing listens"} {
		if !strings.Contains(reasons, want) {
			t.Errorf("reasons lack %q:\n%s", want, reasons)
		}
	}
	if c := strings.Count(lb.String(), "cannot reach a bootstrap peer"); c != 1 {
		t.Errorf("the first failure should be logged once (the rest go to the diagnosis), logged %d times", c)
	}
}

// A --peer of another job is named with its job: today's hello passed it
// over in silence, and the peer waited for ever.
func TestDiagnoseBootstrapPeerOfAnotherJob(t *testing.T) {
	log, lb := testLog(t)
	a := startNode(t, fastConfig("jobA"), log, "a")
	cfg := fastConfig("jobB")
	cfg.MinPeers = 2
	cfg.Peers = []string{a.Addrs()[0]}
	b := startNode(t, cfg, log, "b")
	waitFor(t, 5*time.Second, func() (bool, string) {
		d := b.Diagnose()
		return len(d.Bootstrap) == 1 && d.Bootstrap[0].Job == "jobA", fmt.Sprintf("diagnosis %+v", d)
	})
	reasons := strings.Join(b.Diagnose().Reasons(), "\n")
	if !strings.Contains(reasons, `is in job "jobA", this peer in job "jobB"`) {
		t.Errorf("reasons do not name the other job:\n%s", reasons)
	}
	waitFor(t, 5*time.Second, func() (bool, string) {
		return strings.Contains(lb.String(), "a --peer is in another job"), "the other job is not logged"
	})
	waitFor(t, 5*time.Second, func() (bool, string) {
		d := a.Diagnose()
		return slices.Contains(d.OtherJobs, PeerJob{ID: b.Self().String(), Job: "jobB"}), fmt.Sprintf("a's diagnosis %+v", d)
	})
	if r := strings.Join(a.Diagnose().Reasons(), "\n"); !strings.Contains(r, `is in job "jobB"`) {
		t.Errorf("a's reasons do not name b's job:\n%s", r)
	}
}

// Two peers with different swarm keys never connect; the dialling peer's
// diagnosis says the handshake failed and names the swarm key.
func TestDiagnoseSwarmKeyMismatch(t *testing.T) {
	log, _ := testLog(t)
	dir := t.TempDir()
	ka, kb := filepath.Join(dir, "a.key"), filepath.Join(dir, "b.key")
	for _, k := range []string{ka, kb} {
		if _, err := CreateSwarmKey(k, false); err != nil {
			t.Fatal(err)
		}
	}
	ca := fastConfig("psk")
	ca.SwarmKey = ka
	a := startNode(t, ca, log, "a")
	cb := fastConfig("psk")
	cb.SwarmKey, cb.MinPeers, cb.Peers = kb, 2, []string{a.Addrs()[0]}
	b := startNode(t, cb, log, "b")
	var d Diagnosis
	waitFor(t, 10*time.Second, func() (bool, string) {
		d = b.Diagnose()
		return len(d.Bootstrap) == 1 && d.Bootstrap[0].Failures >= 1, fmt.Sprintf("diagnosis %+v", d)
	})
	// go-libp2p reports "message was too large" or, when the handshake
	// hangs, a timeout: either hint names the swarm key.
	if h := d.Bootstrap[0].Hint; !strings.Contains(h, "swarm-key") {
		t.Errorf("hint %q for %q, want one naming the swarm key", h, d.Bootstrap[0].LastError)
	}
	if r := strings.Join(d.Reasons(), "\n"); !strings.Contains(r, "--swarm-key "+kb) || !strings.Contains(r, "same key file") {
		t.Errorf("reasons do not mention the swarm key:\n%s", r)
	}
}

// Issue 10, item 13: two peers of one job with different settings are
// refused on both sides at connect, each naming the flag and both values;
// the peer that dialled learns that its bootstrap peer refused it.
func TestSpecMismatchRefusedOnBothSides(t *testing.T) {
	log, lb := testLog(t)
	ca := fastConfig("spec")
	ca.MinPeers = 2
	ca.Spec = Spec{{"model", "logreg"}, {"dim", "1048576"}}
	a := startNode(t, ca, log, "a")
	cb := ca
	cb.Spec = Spec{{"model", "logreg"}, {"dim", "16777216"}}
	cb.Peers = []string{a.Addrs()[0]}
	b := startNode(t, cb, log, "b")
	waitFor(t, 5*time.Second, func() (bool, string) {
		da, db := a.Diagnose(), b.Diagnose()
		return len(da.Refused) >= 1 && len(db.Refused) >= 1, fmt.Sprintf("a refused %v, b refused %v", da.Refused, db.Refused)
	})
	da, db := a.Diagnose(), b.Diagnose()
	ra, rb := da.Refused[0], db.Refused[0]
	if ra.ID != b.Self().String() || ra.Bootstrap || da.BootstrapRefusal() != nil {
		t.Errorf("a's refusal %+v: want b, not a bootstrap peer", ra)
	}
	if rb.ID != a.Self().String() || !rb.Bootstrap || !errors.Is(db.BootstrapRefusal(), ErrIncompatible) {
		t.Errorf("b's refusal %+v: want a, its bootstrap peer", rb)
	}
	wantA := "--dim: this peer 1048576, peer " + ShortID(b.Self().String()) + " 16777216"
	wantB := "--dim: this peer 16777216, peer " + ShortID(a.Self().String()) + " 1048576"
	if !strings.Contains(ra.Err.Error(), wantA) || strings.Contains(ra.Err.Error(), "--model") {
		t.Errorf("a's refusal %q: want %q and nothing about --model", ra.Err, wantA)
	}
	if !strings.Contains(rb.Err.Error(), wantB) {
		t.Errorf("b's refusal %q: want %q", rb.Err, wantB)
	}
	waitFor(t, 5*time.Second, func() (bool, string) {
		l := lb.String()
		return strings.Contains(l, wantA) && strings.Contains(l, wantB), "the log lacks one of the refusals"
	})
	if r := strings.Join(db.Reasons(), "\n"); !strings.Contains(r, "was refused: "+wantB) {
		t.Errorf("b's reasons do not say its --peer refused it:\n%s", r)
	}
	for _, n := range []*Node{a, b} {
		if m := n.View().Members; len(m) != 1 {
			t.Errorf("%s has members %v, want only itself", n.Self(), m)
		}
	}
	// The refusal is logged once on each side, though each side says
	// hello on the connection and answers the other's.
	if c := strings.Count(lb.String(), "refusing peer"); c != 2 {
		t.Errorf("%d refusals logged, want 2 (one on each side)", c)
	}
}

// The ring's settings are in every hello: peers with different --shards
// are refused although neither has a Spec.
func TestRingSettingsInTheHello(t *testing.T) {
	log, _ := testLog(t)
	a := startNode(t, fastConfig("ring"), log, "a")
	cb := fastConfig("ring")
	cb.Shards, cb.Peers = 128, []string{a.Addrs()[0]}
	b := startNode(t, cb, log, "b")
	waitFor(t, 5*time.Second, func() (bool, string) {
		r := b.Diagnose().BootstrapRefusal()
		return r != nil && strings.Contains(r.Error(), "--shards: this peer 128"), fmt.Sprintf("refusal %v", r)
	})
}
