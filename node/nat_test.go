package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	circuit "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

func TestEffectiveNAT(t *testing.T) {
	for _, tc := range []struct {
		mode   NATMode
		listen []string
		want   NATMode
	}{
		{NATAuto, []string{"/ip4/0.0.0.0/tcp/4001"}, NATAuto},
		{NATAuto, []string{"/ip4/127.0.0.1/tcp/0", "/ip6/::1/tcp/0"}, NATOff}, // loopback only: nothing to traverse
		{NATAuto, []string{"/ip4/127.0.0.1/tcp/0", "/ip4/10.0.0.5/tcp/0"}, NATAuto},
		{NATPrivate, []string{"/ip4/127.0.0.1/tcp/0"}, NATPrivate}, // asked for explicitly
		{NATPublic, []string{"/ip4/0.0.0.0/tcp/4001"}, NATPublic},
		{NATOff, []string{"/ip4/0.0.0.0/tcp/4001"}, NATOff},
	} {
		c := DefaultConfig()
		c.NAT, c.Listen = tc.mode, tc.listen
		if got := c.effectiveNAT(); got != tc.want {
			t.Errorf("--nat %s, --listen %v: effective %s, want %s", tc.mode, tc.listen, got, tc.want)
		}
	}
	c := DefaultConfig()
	c.Job, c.NAT = "j", "upnp"
	var fe *FieldError
	if err := c.Validate(); !errors.As(err, &fe) || fe.Field != "NAT" || !strings.Contains(fe.Msg, `"upnp"`) {
		t.Errorf("Validate with NAT %q: %v, want a FieldError on NAT naming the value", c.NAT, err)
	}
	if DefaultConfig().NAT != NATAuto {
		t.Errorf("default NAT mode %q, want auto", DefaultConfig().NAT)
	}
}

// fakeConn is a connection with only a remote address.
type fakeConn struct {
	network.Conn
	remote ma.Multiaddr
}

func (c fakeConn) RemoteMultiaddr() ma.Multiaddr { return c.remote }

func TestKindOf(t *testing.T) {
	const relayID, destID = "12D3KooWMmJ8q8UFu9nz4VxpapZrBnh1qNJsnag65snfo4KZDxWC", "12D3KooWJjJ3xBuGYq7cYsoSp7NuzTFBuuRpNdwnm73fGRvzGP38"
	direct := fakeConn{remote: ma.StringCast("/ip4/192.0.0.195/udp/4001/quic-v1")}
	relayed := fakeConn{remote: ma.StringCast("/ip4/192.0.0.194/tcp/4001/p2p/" + relayID + "/p2p-circuit")}
	for _, tc := range []struct {
		conns   []network.Conn
		punched bool
		want    ConnKind
	}{
		{nil, false, ""},
		{[]network.Conn{direct}, false, ConnDirect},
		{[]network.Conn{direct}, true, ConnHolePunched},
		{[]network.Conn{relayed}, false, ConnRelayed},
		{[]network.Conn{relayed}, true, ConnRelayed}, // the punched connection is gone
		{[]network.Conn{relayed, direct}, true, ConnHolePunched},
		{[]network.Conn{relayed, direct}, false, ConnDirect},
	} {
		if got := kindOf(tc.conns, tc.punched); got != tc.want {
			t.Errorf("kindOf(%d conns, punched %v) = %q, want %q", len(tc.conns), tc.punched, got, tc.want)
		}
	}
	got := relayIDs([]ma.Multiaddr{
		ma.StringCast("/ip4/192.0.0.194/tcp/4001/p2p/" + relayID + "/p2p-circuit"),
		ma.StringCast("/ip4/192.0.0.194/udp/4001/quic-v1/p2p/" + relayID + "/p2p-circuit"),
		ma.StringCast("/ip4/192.0.0.196/tcp/4001/p2p/" + destID + "/p2p-circuit"),
	})
	if strings.Join(got, ",") != destID+","+relayID {
		t.Errorf("relayIDs = %v, want [%s %s]", got, destID, relayID)
	}
}

// helloHost is a bare libp2p host (relay transport on, nothing else) that
// answers gossiptrain's hello as a peer of job does: with the same framing
// and fields as a Node, so that relays and peers take it for one.
func helloHost(t *testing.T, job string, maxMessage int) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics(), libp2p.EnableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	h.SetStreamHandler(HelloProtocol, func(s network.Stream) {
		defer s.Close()
		if _, err := readHello(s); err != nil {
			s.Reset()
			return
		}
		s.Write(appendHello(nil, hello{Job: job, MaxMessageSize: uint64(maxMessage), WireVersion: wire.Version}))
		s.CloseWrite()
		io.Copy(io.Discard, io.LimitReader(s, maxHello))
	})
	return h
}

// TestRelayOnlyForTheJob runs a relay (--relay), a peer of its job behind
// "NAT" (--nat private: on loopback nothing is really behind a NAT, so the
// peer is told), a peer of another job, and a bare host that speaks the
// job's hello. The job's peer gets a relay slot by itself (autorelay fed
// with the job's relays), the stranger is refused a slot and a circuit,
// and a relayed connection between the job's peers is reported as relayed
// in the status, its text and the connection kinds the report takes.
func TestRelayOnlyForTheJob(t *testing.T) {
	log, _ := testLog(t)
	rc := fastConfig("natjob")
	rc.Relay = true // NAT is off on loopback; the relay service runs anyway
	r := startNode(t, rc, log, "relay")
	boot := r.Addrs()[0]

	ac := fastConfig("natjob")
	ac.NAT, ac.Peers = NATPrivate, []string{boot}
	a := startNode(t, ac, log, "a")

	xc := fastConfig("otherjob")
	xc.NAT, xc.Peers = NATPrivate, []string{boot}
	x := startNode(t, xc, log, "x")

	// The job's peer reserves a slot through autorelay, and only it.
	waitFor(t, 30*time.Second, func() (bool, string) {
		s := r.Status()
		return s.NAT.RelayReservations >= 1, "the job's peer holds no relay reservation on the relay"
	})
	if s := r.Status(); !s.NAT.Relay {
		t.Errorf("relay status: relay %v, want true", s.NAT.Relay)
	}

	rinfo := peer.AddrInfo{ID: r.Self(), Addrs: r.Host().Addrs()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := circuit.Reserve(ctx, x.Host(), rinfo); err == nil {
		t.Error("a peer of another job got a relay reservation")
	}
	viaRelay := ma.StringCast(boot + "/p2p-circuit") // <relay addr>/p2p/<relay>/p2p-circuit
	if err := x.Host().Connect(ctx, peer.AddrInfo{ID: a.Self(), Addrs: []ma.Multiaddr{viaRelay}}); err == nil {
		t.Error("a peer of another job connected to the job's peer through the relay")
	}
	if s := r.Status(); s.NAT.RelayRefused < 2 {
		t.Errorf("relay refused %d requests, want at least 2 (a reservation and a circuit)", s.NAT.RelayRefused)
	}

	// A peer of the job that reaches a only through the relay.
	z := helloHost(t, "natjob", rc.MaxMessageSize)
	if err := z.Connect(ctx, rinfo); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() (bool, string) {
		return r.nat.jobPeer(z.ID(), 0), "the relay has not completed a hello with the bare job peer"
	})
	if err := z.Connect(ctx, peer.AddrInfo{ID: a.Self(), Addrs: []ma.Multiaddr{viaRelay}}); err != nil {
		t.Fatalf("the job's peers cannot connect through the relay: %v", err)
	}
	waitFor(t, 20*time.Second, func() (bool, string) {
		k := a.ConnectionKinds()[z.ID().String()]
		return k == string(ConnRelayed), "a's connection kinds " + fmtJSON(a.ConnectionKinds()) + ": want " + z.ID().String() + " relayed"
	})
	st := a.Status()
	var found bool
	for _, c := range st.Connections {
		if c.Peer == z.ID().String() {
			found = true
			if c.Kind != string(ConnRelayed) || !strings.Contains(c.Addr, "/p2p-circuit") || !c.JobPeer {
				t.Errorf("a's status for the relayed peer: %+v, want kind relayed, a /p2p-circuit address, job peer", c)
			}
		}
	}
	if !found {
		t.Errorf("a's status lists no connection to %s: %+v", z.ID(), st.Connections)
	}
	if s := r.Status(); s.NAT.RelayCircuits < 1 {
		t.Errorf("relay admitted %d circuits, want 1", s.NAT.RelayCircuits)
	}
	// The JSON a dashboard reads, and the text 'gossiptrain status' prints.
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back Status
	if err := json.Unmarshal(b, &back); err != nil || back.NAT == nil || back.NAT.Mode != "private" {
		t.Errorf("status JSON round trip: %v, nat %+v", err, back.NAT)
	}
	var text bytes.Buffer
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NAT\nprivate, reachability private", "CONNECTIONS", z.ID().String(), "relayed"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, text.String())
		}
	}
}

func fmtJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestGossipsubSurvivesClosingTheRelayedConnection: after a hole punch the
// relayed connection is closed. When the two peers' gossipsub writers sat
// on different connections, gossipsub alone would forget the peer's
// subscriptions for good (see closeRelayed); both sides must still know
// each other's subscriptions afterwards.
func TestGossipsubSurvivesClosingTheRelayedConnection(t *testing.T) {
	log, _ := testLog(t)
	rc := fastConfig("natjob")
	rc.Relay = true
	r := startNode(t, rc, log, "relay")
	boot := r.Addrs()[0]
	ac := fastConfig("natjob")
	ac.NAT, ac.Peers = NATPrivate, []string{boot}
	a := startNode(t, ac, log, "a")
	a.nat.closeGrace.Store(int64(time.Hour)) // the test closes the relayed connection itself
	waitFor(t, 30*time.Second, func() (bool, string) {
		return r.Status().NAT.RelayReservations >= 1, "a holds no relay reservation"
	})

	// b: a bare host that speaks the hello and gossipsub, subscribed to the
	// job's members topic, reaching a through the relay only.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := helloHost(t, "natjob", rc.MaxMessageSize)
	ps, err := pubsub.NewGossipSub(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	topic := MembersTopic("natjob")
	tp, err := ps.Join(topic)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Subscribe(); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx, peer.AddrInfo{ID: r.Self(), Addrs: r.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() (bool, string) { return r.nat.jobPeer(b.ID(), 0), "no hello between the relay and b" })
	// b's side of the NAT logic, as a Node runs it (b says no hello itself:
	// it is told a is of its job).
	bc := fastConfig("natjob")
	bc.NAT = NATPrivate
	nb := newNATState(&bc, log.With().Str("node", "b").Logger())
	nb.closeGrace.Store(int64(time.Hour))
	if err := nb.start(b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nb.close)
	nb.setSubscribed(func(p peer.ID) bool { return slices.Contains(ps.ListPeers(topic), p) })
	if err := b.Connect(ctx, peer.AddrInfo{ID: a.Self(), Addrs: []ma.Multiaddr{ma.StringCast(boot + "/p2p-circuit")}}); err != nil {
		t.Fatal(err)
	}
	nb.helloDone(a.Self(), true)
	knowEachOther := func() (bool, string) {
		ab, ba := slices.Contains(a.PubSub().ListPeers(topic), b.ID()), slices.Contains(ps.ListPeers(topic), a.Self())
		return ab && ba, fmt.Sprintf("a knows b's subscription to the members topic: %v; b knows a's: %v", ab, ba)
	}
	waitFor(t, 20*time.Second, knowEachOther)

	// A direct connection appears (as a hole punch makes one), and b's
	// gossipsub writer moves to it while a's stays on the relayed one.
	if err := b.Connect(network.WithForceDirectDial(ctx, "test"), peer.AddrInfo{ID: a.Self(), Addrs: a.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	streams := func(relayed bool, dir network.Direction) []network.Stream {
		var out []network.Stream
		for _, c := range b.Network().ConnsToPeer(a.Self()) {
			if isRelayed(c.RemoteMultiaddr()) == relayed {
				for _, s := range c.GetStreams() {
					if isPubSubStream(s) && s.Stat().Direction == dir {
						out = append(out, s)
					}
				}
			}
		}
		return out
	}
	if len(streams(true, network.DirOutbound)) != 1 || len(streams(true, network.DirInbound)) != 1 {
		t.Fatalf("b's gossipsub streams on the relayed connection: %d out, %d in; want 1 and 1",
			len(streams(true, network.DirOutbound)), len(streams(true, network.DirInbound)))
	}
	streams(true, network.DirOutbound)[0].Reset()
	waitFor(t, 20*time.Second, func() (bool, string) {
		return len(streams(false, network.DirOutbound)) == 1, "b's gossipsub writer did not move to the direct connection"
	})

	a.nat.closeRelayed(b.ID())
	if k := kindOf(a.Host().Network().ConnsToPeer(b.ID()), false); k != ConnDirect {
		t.Fatalf("after closeRelayed a's connection to b is %q, want direct", k)
	}
	waitFor(t, 20*time.Second, knowEachOther)
}
