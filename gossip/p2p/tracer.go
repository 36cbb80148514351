package p2p

import (
	"sync/atomic"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// Tracer is a pubsub.RawTracer that counts the messages gossipsub drops,
// for a PubSub built outside the node package (tests, tools): install it
// with pubsub.WithRawTracer and pass Drops in Config.Drops. The node
// package has its own tracer with the same counts.
type Tracer struct {
	droppedRPC, queueFull, undeliverable atomic.Uint64
}

var _ pubsub.RawTracer = (*Tracer)(nil)

// NewTracer returns a zeroed tracer.
func NewTracer() *Tracer { return &Tracer{} }

// Drops is the number of messages dropped so far: outgoing RPCs dropped on
// full peer queues, incoming messages dropped on a full or throttled
// validation queue, and messages a slow subscriber missed.
func (t *Tracer) Drops() uint64 {
	return t.droppedRPC.Load() + t.queueFull.Load() + t.undeliverable.Load()
}

// OnNewOutboundStream implements pubsub.RawTracer.
func (t *Tracer) OnNewOutboundStream(peer.ID, protocol.ID) {}

// OnClosedOutboundStream implements pubsub.RawTracer.
func (t *Tracer) OnClosedOutboundStream(peer.ID) {}

// Join implements pubsub.RawTracer.
func (t *Tracer) Join(string) {}

// Leave implements pubsub.RawTracer.
func (t *Tracer) Leave(string) {}

// Graft implements pubsub.RawTracer.
func (t *Tracer) Graft(peer.ID, string) {}

// Prune implements pubsub.RawTracer.
func (t *Tracer) Prune(peer.ID, string) {}

// ValidateMessage implements pubsub.RawTracer.
func (t *Tracer) ValidateMessage(*pubsub.Message) {}

// DeliverMessage implements pubsub.RawTracer.
func (t *Tracer) DeliverMessage(*pubsub.Message) {}

// RejectMessage counts validation-queue drops.
func (t *Tracer) RejectMessage(_ *pubsub.Message, reason string) {
	if reason == pubsub.RejectValidationQueueFull || reason == pubsub.RejectValidationThrottled {
		t.queueFull.Add(1)
	}
}

// DuplicateMessage implements pubsub.RawTracer.
func (t *Tracer) DuplicateMessage(*pubsub.Message) {}

// ThrottlePeer implements pubsub.RawTracer.
func (t *Tracer) ThrottlePeer(peer.ID) {}

// RecvRPC implements pubsub.RawTracer.
func (t *Tracer) RecvRPC(*pubsub.RPC) {}

// SendRPC implements pubsub.RawTracer.
func (t *Tracer) SendRPC(*pubsub.RPC, peer.ID) {}

// DropRPC counts an outgoing RPC dropped.
func (t *Tracer) DropRPC(*pubsub.RPC, peer.ID) { t.droppedRPC.Add(1) }

// UndeliverableMessage counts a message a slow subscriber missed.
func (t *Tracer) UndeliverableMessage(*pubsub.Message) { t.undeliverable.Add(1) }
