package p2p

import (
	"testing"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// An unsigned message's author is the neighbour it came from (the
// connection proved who that is); a signed one's is its signer, even when
// a neighbour relayed it.
func TestAuthorOf(t *testing.T) {
	signer, relay := peer.ID("signer"), peer.ID("relay")
	unsigned := &pubsub.Message{Message: &pb.Message{Data: []byte("x"), From: []byte(signer)}, ReceivedFrom: relay}
	if got := authorOf(unsigned); got != relay {
		t.Errorf("unsigned message with a From field: author %q, want the neighbour %q", got, relay)
	}
	signed := &pubsub.Message{Message: &pb.Message{Data: []byte("x"), From: []byte(signer), Signature: []byte("sig")}, ReceivedFrom: relay}
	if got := authorOf(signed); got != signer {
		t.Errorf("signed message relayed: author %q, want the signer %q", got, signer)
	}
}

// MessageID depends on the topic and every byte of the payload, and on
// nothing else: a copy of a message is a duplicate whoever relays it.
func TestMessageID(t *testing.T) {
	topic := func(s string) *string { return &s }
	base := &pb.Message{Topic: topic("gossiptrain/j/grad/a"), Data: []byte("payload")}
	same := &pb.Message{Topic: topic("gossiptrain/j/grad/a"), Data: []byte("payload"), From: []byte("someone")}
	if MessageID(base) != MessageID(same) {
		t.Error("the same topic and payload got different IDs")
	}
	for name, m := range map[string]*pb.Message{
		"other topic":               {Topic: topic("gossiptrain/j/grad/b"), Data: []byte("payload")},
		"other payload":             {Topic: topic("gossiptrain/j/grad/a"), Data: []byte("payloae")},
		"shorter":                   {Topic: topic("gossiptrain/j/grad/a"), Data: []byte("payloa")},
		"topic and payload shifted": {Topic: topic("gossiptrain/j/grad/ap"), Data: []byte("ayload")},
	} {
		if MessageID(m) == MessageID(base) {
			t.Errorf("%s: same ID as the original", name)
		}
	}
}
