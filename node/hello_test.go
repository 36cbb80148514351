package node

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

func TestHelloRoundTrip(t *testing.T) {
	for _, h := range []hello{
		{Job: "ctr1", MaxMessageSize: 1<<20 + 1024, WireVersion: 1, Spec: Spec{{"dim", "1048576"}, {"model", "logreg"}}},
		{Job: strings.Repeat("j", maxJobLen), MaxMessageSize: 1 << 40, WireVersion: 255,
			Spec: Spec{{strings.Repeat("f", maxSpecFlag), strings.Repeat("v", maxSpecValue)}, {"x", ""}}},
		{Job: "", MaxMessageSize: 0, WireVersion: 0},
	} {
		frame := appendHello(nil, h)
		got, err := readHello(bytes.NewReader(frame))
		if err != nil || !reflect.DeepEqual(got, h) {
			t.Errorf("round trip of %+v: got %+v, %v", h, got, err)
		}
	}
	// The exact bytes of a small hello: length 16, "GTH2", size 300 as a
	// uvarint (0xac 0x02), job length 2, "ab", version 1, one setting:
	// name length 1, "d", value length 2, "16".
	want := []byte{16, 'G', 'T', 'H', '2', 0xac, 0x02, 2, 'a', 'b', 1, 1, 1, 'd', 2, '1', '6'}
	if got := appendHello(nil, hello{Job: "ab", MaxMessageSize: 300, WireVersion: 1, Spec: Spec{{"d", "16"}}}); !bytes.Equal(got, want) {
		t.Errorf("encoding = %v, want %v", got, want)
	}
	// An older release's hello (GTH1: no settings) still parses, marked V1.
	v1 := []byte{10, 'G', 'T', 'H', '1', 0xac, 0x02, 2, 'a', 'b', 1}
	if got, err := readHello(bytes.NewReader(v1)); err != nil || !got.V1 || got.Job != "ab" || got.MaxMessageSize != 300 || got.WireVersion != 1 {
		t.Errorf("GTH1 hello: %+v, %v; want job ab, size 300, version 1, V1", got, err)
	}
}

func TestHelloRejectsGarbage(t *testing.T) {
	frame := func(body string) []byte { return append([]byte{byte(len(body))}, body...) }
	tests := []struct {
		name  string
		frame []byte
	}{
		{"empty", nil},
		{"length only", []byte{5}},
		{"too long", []byte{0xff, 0x7f}},
		{"body shorter than its length", append([]byte{9}, "GTH2\x01"...)},
		{"wrong magic", frame("GTH9\x00\x00")},
		{"job length past end", frame("GTH2\x01\x09x")},
		{"missing version", frame("GTH2\x01\x01x")},
		{"missing setting count", frame("GTH2\x01\x01x\x01")},
		{"v1 trailing byte", frame("GTH1\x01\x01x\x01\x00")},
		{"trailing byte", frame("GTH2\x01\x01x\x01\x00\x00")},
		{"setting past end", frame("GTH2\x01\x01x\x01\x01\x05ab")},
		{"too many settings", frame("GTH2\x01\x01x\x01\x41")},
		{"empty setting name", frame("GTH2\x01\x01x\x01\x01\x00\x00")},
		{"setting twice", frame("GTH2\x01\x01x\x01\x02\x01d\x00\x01d\x00")},
		{"job over 64", frame("GTH2\x01\x41" + strings.Repeat("j", 66))},
	}
	for _, tt := range tests {
		if h, err := readHello(bytes.NewReader(tt.frame)); !errors.Is(err, ErrHello) {
			t.Errorf("%s: readHello = %+v, %v; want ErrHello", tt.name, h, err)
		}
	}
}

func TestHelloCompatible(t *testing.T) {
	spec := Spec{{"shards", "256"}, {"model", "logreg"}, {"dim", "1048576"}, {"mode", "sync"}}
	ours := hello{Job: "ctr1", MaxMessageSize: 1000, WireVersion: 1, Spec: spec}
	with := func(f func(h *hello)) hello {
		h := ours
		h.Spec = slices.Clone(spec)
		f(&h)
		return h
	}
	tests := []struct {
		name   string
		theirs hello
		want   []string // nil = compatible; else every string the error must contain
	}{
		{"same", ours, nil},
		{"other job, other everything", hello{Job: "mnist", MaxMessageSize: 5, WireVersion: 9, Spec: Spec{{"dim", "784"}}}, nil},
		{"same job, other size", with(func(h *hello) { h.MaxMessageSize = 2000 }), []string{"--max-message-size: this peer 1000, peer 12D3…ABCxyz 2000"}},
		{"same job, other wire version", with(func(h *hello) { h.WireVersion = 2 }), []string{"wire version", "this peer 1, peer 12D3…ABCxyz 2"}},
		{"other dim", with(func(h *hello) { h.Spec[2].Value = "16777216" }), []string{
			`--dim: this peer 1048576, peer 12D3…ABCxyz 16777216; every peer of job "ctr1" must run with the same values`}},
		{"other dim and mode", with(func(h *hello) { h.Spec[2].Value = "7"; h.Spec[3].Value = "async" }), []string{
			"--dim: this peer 1048576, peer 12D3…ABCxyz 7", "--mode: this peer sync, peer 12D3…ABCxyz async"}},
		{"a setting only one side names", with(func(h *hello) { h.Spec = append(h.Spec, SpecItem{"hidden", "128"}) }), nil},
		{"fewer settings", with(func(h *hello) { h.Spec = h.Spec[:1] }), nil},
		{"an older release", hello{Job: "ctr1", MaxMessageSize: 1000, WireVersion: 1, V1: true}, []string{"older gossiptrain release"}},
	}
	for _, tt := range tests {
		err := compatible(ours, tt.theirs)
		var ie *IncompatibleError
		if errors.As(err, &ie) {
			ie.Peer = "12D3KooWLongPeerIdentityABCxyz"
		}
		if (tt.want == nil) != (err == nil) {
			t.Errorf("%s: compatible = %v, want %q", tt.name, err, tt.want)
			continue
		}
		if err != nil && !errors.Is(err, ErrIncompatible) {
			t.Errorf("%s: %v does not wrap ErrIncompatible", tt.name, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tt.name, err, w)
			}
		}
		// Both sides refuse each other.
		if (compatible(tt.theirs, ours) == nil) != (err == nil) {
			t.Errorf("%s: the check is not symmetric", tt.name)
		}
	}
}

// FuzzHello: any input either parses into a hello that re-encodes to the
// same body, or fails with ErrHello; nothing panics.
func FuzzHello(f *testing.F) {
	f.Add(appendHello(nil, hello{Job: "ctr1", MaxMessageSize: 1 << 20, WireVersion: 1, Spec: Spec{{"dim", "9"}}}))
	f.Add([]byte{10, 'G', 'T', 'H', '1', 0xac, 0x02, 2, 'a', 'b', 1})
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
		if h.V1 {
			return // this release never writes GTH1
		}
		again, err := readHello(bytes.NewReader(appendHello(nil, h)))
		if err != nil || !reflect.DeepEqual(again, h) {
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
