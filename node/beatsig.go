package node

import (
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Beats are the only gossipsub messages that other peers relay (the members
// topic has a mesh; the training topics are routed straight from author to
// receiver, see gossip/p2p), so they are the only ones that carry a
// signature of their own: the encoded beat followed by the Ed25519
// signature of beatSigDomain + beat by the key of the peer the beat's header
// names as its sender. Gossipsub's per-message signatures are off
// (StrictNoSign, see newPubSub): on the training topics they cost a third of
// a ring peer's CPU and proved nothing the connection does not.

// beatSigDomain prefixes the signed bytes, so that a beat signature is never
// valid as any other signature made with a peer's identity key (libp2p's
// own, such as Noise handshakes or peer records, use other prefixes).
const beatSigDomain = "gossiptrain/beat:"

// beatSigSize is the size of an Ed25519 signature.
const beatSigSize = 64

// errBeatKey: the identity key cannot sign beats (not Ed25519).
var errBeatKey = errors.New("node: identity key does not make 64-byte Ed25519 signatures")

// signBeat returns beat followed by its signature with key, in a new slice.
func signBeat(key crypto.PrivKey, beat []byte) ([]byte, error) {
	msg := make([]byte, 0, len(beatSigDomain)+len(beat))
	msg = append(append(msg, beatSigDomain...), beat...)
	sig, err := key.Sign(msg)
	if err != nil {
		return nil, fmt.Errorf("node: sign beat: %w", err)
	}
	if len(sig) != beatSigSize {
		return nil, fmt.Errorf("%w: got %d bytes", errBeatKey, len(sig))
	}
	out := make([]byte, 0, len(beat)+beatSigSize)
	return append(append(out, beat...), sig...), nil
}

// splitSigned splits a members-topic payload into the beat and its
// signature; ok is false when it is too short to hold a signature.
func splitSigned(data []byte) (beat, sig []byte, ok bool) {
	if len(data) < beatSigSize {
		return nil, nil, false
	}
	n := len(data) - beatSigSize
	return data[:n], data[n:], true
}

// senderKey is a beat sender's peer ID and public key, both derived from
// the ID string in the beat's header.
type senderKey struct {
	id  peer.ID
	pub crypto.PubKey
}

// parseSender decodes a peer ID string and extracts the public key it
// embeds. Ed25519 peer IDs carry their key inline, so a beat needs no key
// of its own; IDs of other key types are refused.
func parseSender(s string) (senderKey, error) {
	id, err := peer.Decode(s)
	if err != nil {
		return senderKey{}, fmt.Errorf("sender %.60q is not a peer ID: %w", s, err)
	}
	pub, err := id.ExtractPublicKey()
	if err != nil {
		return senderKey{}, fmt.Errorf("sender %.60q carries no public key: %w", s, err)
	}
	if pub.Type() != crypto.Ed25519 {
		return senderKey{}, fmt.Errorf("sender %.60q has a %v key; gossiptrain peers are Ed25519", s, pub.Type())
	}
	return senderKey{id: id, pub: pub}, nil
}
