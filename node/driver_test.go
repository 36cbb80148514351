package node

import (
	"fmt"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// What a member's beat may make this peer dial: the sender's own
// addresses on IP addresses that lead somewhere, at most maxDialAddrs of
// them (maxRelayedAddrs relayed), each once.
func TestDialableAddrs(t *testing.T) {
	id, err := peer.Decode(authorID)
	if err != nil {
		t.Fatal(err)
	}
	own := func(a string) string { return a + "/p2p/" + authorID }
	relay := "/ip4/192.0.2.7/tcp/4001/p2p/" + selfID + "/p2p-circuit"
	for _, c := range []struct {
		addr, why string // why "": dialled
	}{
		{own("/ip4/10.0.0.6/tcp/4001"), ""},
		{own("/ip6/2001:db8::6/udp/4001/quic-v1"), ""},
		{own(relay), ""},
		{"/ip4/10.0.0.9/tcp/4001/p2p/" + selfID, "another peer's"},
		{own("/dns4/evil.example/tcp/4001"), "not an IP address (/dns4)"},
		{own("/dnsaddr/evil.example"), "not an IP address"},
		{own("/ip4/0.0.0.0/tcp/4001"), "unspecified"},
		{own("/ip6/::/tcp/4001"), "unspecified"},
		{own("/ip4/224.0.0.251/udp/5353/quic-v1"), "multicast"},
		{own("/ip4/255.255.255.255/tcp/4001"), "broadcast"},
		{own("/ip4/169.254.169.254/tcp/80"), "link-local"},
		{own("/ip6/fe80::1/tcp/4001"), "link-local"},
		{own("/ip6/::ffff:169.254.169.254/tcp/80"), "link-local"},
		{own("/ip4/127.0.0.1/tcp/22"), "loopback"},
		{own("/ip4/169.254.1.1/tcp/1/p2p/" + selfID + "/p2p-circuit"), "link-local"},
		{"/ip4/10.0.0.6/tcp/4001", "not a peer address"},
	} {
		ok, refused := dialableAddrs(id, []string{c.addr}, false)
		switch {
		case c.why == "" && (len(ok) != 1 || len(refused) != 0):
			t.Errorf("%s: dialled %v, refused %v; want it dialled", c.addr, ok, refused)
		case c.why != "" && (len(ok) != 0 || len(refused) != 1 || !strings.Contains(refused[0], c.why)):
			t.Errorf("%s: dialled %v, refused %v; want it refused as %q", c.addr, ok, refused, c.why)
		}
	}
	// A cluster on loopback only dials loopback addresses.
	if ok, _ := dialableAddrs(id, []string{own("/ip4/127.0.0.1/tcp/4001")}, true); len(ok) != 1 {
		t.Errorf("a loopback peer refuses another's loopback address")
	}
	// 12 direct and 3 relayed addresses, one repeated: the first 6
	// direct and the first 2 relayed.
	var many []string
	for i := range 12 {
		many = append(many, own(fmt.Sprintf("/ip4/10.0.0.%d/tcp/4001", i+1)))
	}
	for i := range 3 {
		many = append(many, own(fmt.Sprintf("/ip4/192.0.2.%d/tcp/4001/p2p/%s/p2p-circuit", i+1, selfID)))
	}
	many = append(many, many[0])
	ok, refused := dialableAddrs(id, many, false)
	if len(ok) != maxDialAddrs || ok[0].String() != "/ip4/10.0.0.1/tcp/4001" || ok[5].String() != "/ip4/10.0.0.6/tcp/4001" ||
		!strings.Contains(ok[6].String(), "192.0.2.1") || !strings.Contains(ok[7].String(), "192.0.2.2") {
		t.Errorf("16 addresses: dialled %v", ok)
	}
	if len(refused) != 1 || !strings.Contains(refused[0], "7 more: at most 8") {
		t.Errorf("16 addresses: refused %v, want one line for the 7 over the cap", refused)
	}
}
