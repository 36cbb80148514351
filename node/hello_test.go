package node

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

func TestHelloRoundTrip(t *testing.T) {
	for _, h := range []hello{
		{Job: "ctr1", MaxMessageSize: 1<<20 + 1024, WireVersion: 1},
		{Job: strings.Repeat("j", maxJobLen), MaxMessageSize: 1 << 40, WireVersion: 255},
		{Job: "", MaxMessageSize: 0, WireVersion: 0},
	} {
		frame := appendHello(nil, h)
		got, err := readHello(bytes.NewReader(frame))
		if err != nil || got != h {
			t.Errorf("round trip of %+v: got %+v, %v", h, got, err)
		}
	}
	// The exact bytes of a small hello: length 10, "GTH1", size 300 as a
	// uvarint (0xac 0x02), job length 2, "ab", version 1.
	want := []byte{10, 'G', 'T', 'H', '1', 0xac, 0x02, 2, 'a', 'b', 1}
	if got := appendHello(nil, hello{Job: "ab", MaxMessageSize: 300, WireVersion: 1}); !bytes.Equal(got, want) {
		t.Errorf("encoding = %v, want %v", got, want)
	}
}

func TestHelloRejectsGarbage(t *testing.T) {
	tests := []struct {
		name  string
		frame []byte
	}{
		{"empty", nil},
		{"length only", []byte{5}},
		{"too long", []byte{0xff, 0x7f}},
		{"wrong magic", append([]byte{6}, "GTH2\x00\x00"...)},
		{"job length past end", append([]byte{7}, "GTH1\x01\x09x"...)},
		{"missing version", append([]byte{7}, "GTH1\x01\x01x"...)},
		{"trailing byte", append([]byte{9}, "GTH1\x01\x01x\x01\x00"...)},
		{"job over 64", append(append([]byte{72}, "GTH1\x01\x41"...), bytes.Repeat([]byte{'j'}, 66)...)},
	}
	for _, tt := range tests {
		if h, err := readHello(bytes.NewReader(tt.frame)); !errors.Is(err, ErrHello) {
			t.Errorf("%s: readHello = %+v, %v; want ErrHello", tt.name, h, err)
		}
	}
}

func TestHelloCompatible(t *testing.T) {
	ours := hello{Job: "ctr1", MaxMessageSize: 1000, WireVersion: 1}
	tests := []struct {
		name   string
		theirs hello
		want   string // "" = compatible
	}{
		{"same", ours, ""},
		{"other job, other size", hello{Job: "mnist", MaxMessageSize: 5, WireVersion: 9}, ""},
		{"same job, other size", hello{Job: "ctr1", MaxMessageSize: 2000, WireVersion: 1}, "max message size 2000, this peer 1000"},
		{"same job, other wire version", hello{Job: "ctr1", MaxMessageSize: 1000, WireVersion: 2}, "wire version 2"},
	}
	for _, tt := range tests {
		err := compatible(ours, tt.theirs)
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: compatible = %v, want %q", tt.name, err, tt.want)
		}
	}
}

// FuzzHello: any input either parses into a hello that re-encodes to the
// same body, or fails with ErrHello; nothing panics.
func FuzzHello(f *testing.F) {
	f.Add(appendHello(nil, hello{Job: "ctr1", MaxMessageSize: 1 << 20, WireVersion: 1}))
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := readHello(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrHello) {
				t.Fatalf("error %v does not wrap ErrHello", err)
			}
			return
		}
		again, err := readHello(bytes.NewReader(appendHello(nil, h)))
		if err != nil || again != h {
			t.Fatalf("re-encoding %+v gives %+v, %v", h, again, err)
		}
	})
}

func TestGaterBlocksUntilExpiry(t *testing.T) {
	g := newGater()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	p, err := peer.Decode(testPeerID)
	if err != nil {
		t.Fatal(err)
	}
	if !g.InterceptPeerDial(p) {
		t.Fatal("an unknown peer is blocked")
	}
	g.block(p, time.Minute)
	if g.InterceptPeerDial(p) || g.InterceptSecured(0, p, nil) {
		t.Fatal("a blocked peer may connect")
	}
	now = now.Add(59 * time.Second)
	if !g.isBlocked(p) {
		t.Fatal("unblocked before its time")
	}
	now = now.Add(time.Second)
	if g.isBlocked(p) || !g.InterceptPeerDial(p) {
		t.Fatal("still blocked after BlockFor")
	}
	if len(g.blocked) != 0 {
		t.Errorf("expired entry kept: %v", g.blocked)
	}
}
