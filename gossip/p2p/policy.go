package p2p

import (
	"crypto/sha256"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
)

// PubSubOptions are the gossipsub options this Transport is built for:
// messages are not signed (StrictNoSign: none is made, and a message that
// carries a signature, an author or a sequence number is rejected), and
// MessageID names them.
//
// Why no signatures: the training topics route every message straight from
// its author to its one receiver (only the receiver subscribes to its
// topic, so nobody relays), and the libp2p connection it arrives on has
// already proven who sent it (see authorOf). A gossipsub signature proves
// the same thing again, at a cost measured here (4 peers, 100 Mbit/s links,
// batch 1000): signing, pubsub's verification of its own publishes and the
// receiver's verification took about a quarter of a ring peer's CPU, and
// dropping them raised the ring's throughput by about 30% on 2 cores.
// Messages that are relayed (membership beats) carry a signature of their
// own, made by the node package.
func PubSubOptions() []pubsub.Option {
	return []pubsub.Option{
		pubsub.WithMessageSignaturePolicy(pubsub.StrictNoSign),
		pubsub.WithNoAuthor(),
		pubsub.WithMessageIdFn(MessageID),
	}
}

// MessageID names a gossipsub message, for its seen-cache and the message
// IDs of IHAVE/IWANT gossip, by what it carries: SHA-256 of the topic and
// the payload. Gossipsub's default, author and sequence number, is only
// unforgeable when messages are signed, and these carry neither. Two
// messages with the same payload on one topic are the same message (every
// gossip/wire header names its sender, stream and sequence number), and
// nobody can give another payload a message's ID before it is sent.
// SHA-256 runs at about 2 GB/s on a core with SHA-NI: well under 1% of a
// peer's CPU at training traffic.
func MessageID(m *pb.Message) string {
	h := sha256.New()
	h.Write([]byte(m.GetTopic()))
	h.Write([]byte{0})
	h.Write(m.GetData())
	var sum [sha256.Size]byte
	return string(h.Sum(sum[:0]))
}
