package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/membership"
)

const (
	selfID   = "12D3KooWEuQpbAyLHLUeuVP76S437TmCa34vq4G4tKrK5eZ11oJy"
	authorID = "12D3KooWMM2ytcRo6aurg488ya48f1DHxB3hZBVUR6zKCbLQCcdw"
)

// looseCodec encodes what a hostile peer might send: limits far above the
// validator's.
func looseCodec() *wire.Codec {
	l := wire.DefaultLimits()
	l.MaxMessage, l.MaxString, l.MaxList = 4<<20, 4096, 1<<16
	return wire.NewCodec(wire.F32, wire.None, l)
}

// goodBeat is a well-formed Alive beat from authorID for job ctr1.
func goodBeat() membership.Beat {
	return membership.Beat{
		Job: "ctr1", From: authorID, Incarnation: 7, Seq: 3, Epoch: 5, SetHash: 0xabcdef,
		Members: []string{authorID, selfID}, // ascending: "12D3KooWE" < "12D3KooWM"? checked below
		Addrs:   []string{"/ip4/10.0.0.6/tcp/4001/p2p/" + authorID},
		Kind:    membership.Alive,
	}
}

func encode(t testing.TB, b membership.Beat) []byte {
	t.Helper()
	out, err := appendBeat(looseCodec(), nil, &b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func init() {
	// goodBeat's member list must be strictly ascending.
	if !(selfID < authorID) {
		panic("test IDs out of order")
	}
}

func TestBeatCheck(t *testing.T) {
	good := goodBeat()
	good.Members = []string{selfID, authorID}
	with := func(edit func(b *membership.Beat)) []byte {
		b := good
		b.Members = append([]string(nil), good.Members...)
		b.Addrs = append([]string(nil), good.Addrs...)
		edit(&b)
		return encode(t, b)
	}
	ids := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			s := fmt.Sprintf("%0*d", size, i)
			out[i] = s
		}
		return out
	}
	fetch, err := looseCodec().AppendFetch(nil, wire.Header{Job: "ctr1", Sender: authorID}, &wire.Fetch{Origin: authorID, From: 1, To: 2})
	if err != nil {
		t.Fatal(err)
	}
	grad, err := looseCodec().AppendGrad(nil, wire.Header{Job: "ctr1", Sender: authorID}, 1, 1, &model.Sparse{Idx: []uint32{3}, Val: []float32{1}})
	if err != nil {
		t.Fatal(err)
	}
	v2 := with(func(*membership.Beat) {})
	v2[0] = wire.Version + 1
	tests := []struct {
		name string
		data []byte
		want RejectReason // 0 = accepted
	}{
		{"good beat", with(func(*membership.Beat) {}), 0},
		{"good leave", with(func(b *membership.Beat) { b.Kind = membership.Leave }), 0},
		{"empty", nil, RejectMalformed},
		{"text", []byte("hello there, general kenobi"), RejectVersion},
		{"beat with reserved flag bits", append([]byte{wire.Version, 3, 0xf0}, "junk"...), RejectMalformed},
		{"truncated", with(func(*membership.Beat) {})[:20], RejectMalformed},
		{"other version", v2, RejectVersion},
		{"a fetch", fetch, RejectKind},
		{"a gradient", grad, RejectKind},
		{"other job", with(func(b *membership.Beat) { b.Job = "mnist" }), RejectJob},
		{"no sender", with(func(b *membership.Beat) { b.From = "" }), RejectSender},
		{"sender of 129 bytes", with(func(b *membership.Beat) { b.From = strings.Repeat("s", 129) }), RejectSender},
		{"incarnation 0", with(func(b *membership.Beat) { b.Incarnation = 0 }), RejectMalformed},
		{"seq 0", with(func(b *membership.Beat) { b.Seq = 0 }), RejectMalformed},
		{"epoch 0", with(func(b *membership.Beat) { b.Epoch = 0 }), RejectMalformed},
		{"epoch 2^62+1", with(func(b *membership.Beat) { b.Epoch = 1<<62 + 1 }), RejectMalformed},
		{"epoch 2^62", with(func(b *membership.Beat) { b.Epoch = 1 << 62 }), 0},
		{"17 addresses", with(func(b *membership.Beat) { b.Addrs = ids(17, 8) }), RejectOversize},
		{"16 addresses", with(func(b *membership.Beat) { b.Addrs = ids(16, 8) }), 0},
		{"address of 257 bytes", with(func(b *membership.Beat) { b.Addrs = []string{strings.Repeat("a", 257)} }), RejectOversize},
		{"empty address", with(func(b *membership.Beat) { b.Addrs = []string{""} }), RejectMalformed},
		{"member ID of 129 bytes", with(func(b *membership.Beat) { b.Members = []string{strings.Repeat("m", 129)} }), RejectOversize},
		{"empty member", with(func(b *membership.Beat) { b.Members = []string{"", "x"} }), RejectMalformed},
		{"unsorted members", with(func(b *membership.Beat) { b.Members = []string{authorID, selfID} }), RejectMalformed},
		{"duplicate members", with(func(b *membership.Beat) { b.Members = []string{selfID, selfID} }), RejectMalformed},
		{"4097 members", with(func(b *membership.Beat) { b.Members = ids(4097, 4) }), RejectOversize},
		{"4096 members", with(func(b *membership.Beat) { b.Members = ids(4096, 4) }), 0},
		{"over the payload limit", with(func(b *membership.Beat) { b.Members = ids(4096, 128) }), RejectOversize},
	}
	v := newBeatValidator(peer.ID("self"), "ctr1", 64<<10)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf beatBuf
			got, err := v.check(tt.data, &buf)
			if got != tt.want {
				t.Fatalf("check = %v (%v), want %v", got, err, tt.want)
			}
			if got == 0 {
				return
			}
			if err == nil {
				t.Errorf("reason %v with no error", got)
			}
		})
	}
}

// TestBeatEncodingRoundTrip: every kind of beat the membership core emits
// passes the validator and comes out identical.
func TestBeatEncodingRoundTrip(t *testing.T) {
	v := newBeatValidator(peer.ID("self"), "ctr1", 64<<10)
	for _, kind := range []membership.BeatKind{membership.Join, membership.Alive, membership.Leave} {
		b := goodBeat()
		b.Members = []string{selfID, authorID}
		b.Kind = kind
		var buf beatBuf
		if r, err := v.check(encode(t, b), &buf); r != 0 {
			t.Fatalf("%v beat rejected: %v %v", kind, r, err)
		}
		if !reflect.DeepEqual(buf.beat, b) {
			t.Errorf("%v beat: decoded %+v, want %+v", kind, buf.beat, b)
		}
	}
}

func pubsubMsg(data []byte, from peer.ID) *pubsub.Message {
	return &pubsub.Message{Message: &pb.Message{Data: data}, ReceivedFrom: from}
}

// newKey returns a fresh Ed25519 identity and its peer ID.
func newKey(t testing.TB) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, id
}

func TestValidatorSignaturesReplaysAndRefusals(t *testing.T) {
	self := peer.ID("self")
	key, author := newKey(t)
	otherKey, other := newKey(t)
	refusedKey, refusedPeer := newKey(t)
	v := newBeatValidator(self, "ctr1", 64<<10)
	v.refused = func(p peer.ID) bool { return p == refusedPeer }
	beatBy := func(from peer.ID, k crypto.PrivKey, inc, seq uint64, edit func([]byte)) []byte {
		b := goodBeat()
		b.From = from.String()
		b.Members = []string{selfID, b.From}
		slices.Sort(b.Members)
		b.Addrs = []string{"/ip4/10.0.0.6/tcp/4001/p2p/" + b.From}
		b.Incarnation, b.Seq = inc, seq
		enc := encode(t, b)
		out, err := signBeat(k, enc)
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(out)
		}
		return out
	}
	beat := func(inc, seq uint64) []byte { return beatBy(author, key, inc, seq, nil) }
	steps := []struct {
		name string
		msg  *pubsub.Message
		want pubsub.ValidationResult
	}{
		{"first beat", pubsubMsg(beat(7, 3), author), pubsub.ValidationAccept},
		{"same beat again (a replay)", pubsubMsg(beat(7, 3), author), pubsub.ValidationIgnore},
		{"older seq", pubsubMsg(beat(7, 2), author), pubsub.ValidationIgnore},
		{"next seq, relayed by another peer", pubsubMsg(beat(7, 4), other), pubsub.ValidationAccept},
		{"older incarnation, higher seq", pubsubMsg(beat(6, 99), author), pubsub.ValidationIgnore},
		{"restarted: newer incarnation, seq 1", pubsubMsg(beat(8, 1), author), pubsub.ValidationAccept},
		{"forwarded by a refused peer", pubsubMsg(beat(8, 2), refusedPeer), pubsub.ValidationReject},
		{"by a refused author", pubsubMsg(beatBy(refusedPeer, refusedKey, 1, 1, nil), author), pubsub.ValidationReject},
		{"forged sender: signed by another peer's key", pubsubMsg(beatBy(author, otherKey, 8, 3, nil), other), pubsub.ValidationReject},
		{"altered after signing", pubsubMsg(beatBy(author, key, 8, 3, func(b []byte) { b[len(b)-beatSigSize-1] ^= 1 }), other), pubsub.ValidationReject},
		{"signature altered", pubsubMsg(beatBy(author, key, 8, 3, func(b []byte) { b[len(b)-1] ^= 1 }), other), pubsub.ValidationReject},
		{"unsigned beat", pubsubMsg(encode(t, goodBeat()), author), pubsub.ValidationReject},
		{"sender is not a peer ID", pubsubMsg(beatBy(peer.ID("not-a-key"), key, 8, 3, nil), author), pubsub.ValidationReject},
		{"after all that, the next beat", pubsubMsg(beat(8, 3), author), pubsub.ValidationAccept},
		{"our own message", pubsubMsg([]byte("not even decoded"), self), pubsub.ValidationAccept},
		{"shorter than a signature", pubsubMsg([]byte{wire.Version, 3, 0}, author), pubsub.ValidationReject},
	}
	for _, s := range steps {
		if got := v.validate(context.Background(), s.msg.ReceivedFrom, s.msg); got != s.want {
			t.Errorf("%s: %v, want %v", s.name, got, s.want)
		}
		if s.want == pubsub.ValidationAccept && s.msg.ReceivedFrom != self {
			buf, ok := s.msg.ValidatorData.(*beatBuf)
			if !ok || buf.beat.From != author.String() {
				t.Errorf("%s: ValidatorData = %#v, want the decoded beat", s.name, s.msg.ValidatorData)
			} else {
				v.release(buf)
			}
		}
	}
	got := v.rejected()
	// The unsigned beat loses its last 64 bytes to the signature, so what
	// is left does not decode: malformed, like a too-short message.
	want := [numRejectReasons]uint64{RejectReplay: 3, RejectRefused: 2, RejectSignature: 3, RejectMalformed: 2, RejectSender: 1}
	if got != want {
		t.Errorf("counts = %v, want %v", got, want)
	}
}

// FuzzBeatValidator feeds arbitrary bytes to the validator's decode and
// checks. Nothing may panic, and whatever it accepts must pass the
// membership core's own static checks: the validator may be stricter than
// the core, never looser.
func FuzzBeatValidator(f *testing.F) {
	b := goodBeat()
	b.Members = []string{selfID, authorID}
	f.Add(encode(f, b))
	b.Kind, b.Addrs = membership.Leave, nil
	f.Add(encode(f, b))
	f.Add([]byte{1, 3, 0, 4, 'c', 't', 'r', '1'})
	f.Add([]byte{})
	v := newBeatValidator(peer.ID("self"), "ctr1", 64<<10)
	mc := membership.DefaultConfig()
	mc.Self, mc.Job = "observer", "ctr1"
	f.Fuzz(func(t *testing.T, data []byte) {
		var buf beatBuf
		r, err := v.check(data, &buf)
		if r != 0 {
			if err == nil {
				t.Fatalf("reason %v without an error", r)
			}
			return
		}
		m, err := membership.New(mc, time.Unix(100, 0))
		if err != nil {
			t.Fatal(err)
		}
		rd := m.Receive(buf.beat, time.Unix(101, 0))
		for _, rej := range rd.Rejected {
			if rej.Reason == membership.ReasonMalformed || rej.Reason == membership.ReasonJob {
				t.Fatalf("validator accepted a beat the core rejects: %v", rej.Err)
			}
		}
	})
}
