package node

import (
	"sync/atomic"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// PubSubCounters are what the gossipsub tracer counted since the node
// started, over all topics. Gossipsub drops instead of blocking or failing,
// so these are the only trace of lost messages.
type PubSubCounters struct {
	// Delivered counts messages delivered to local subscribers.
	Delivered uint64 `json:"delivered"`
	// DroppedRPC counts outgoing RPCs dropped, typically because a peer's
	// outbound queue (Config.OutboundQueueSize) was full.
	DroppedRPC uint64 `json:"dropped_rpc"`
	// Rejected counts messages refused by a validator (ValidationReject),
	// for a bad signature, or from a blacklisted peer.
	Rejected uint64 `json:"rejected"`
	// Ignored counts messages a validator ignored (ValidationIgnore, e.g.
	// replayed beats) and those dropped because the validation queue
	// (Config.ValidateQueueSize) was full or throttled.
	Ignored uint64 `json:"ignored"`
	// ValidationQueueFull counts the part of Ignored dropped because the
	// validation queue was full or throttled.
	ValidationQueueFull uint64 `json:"validation_queue_full"`
	// Undeliverable counts messages dropped because a local subscriber did
	// not read fast enough.
	Undeliverable uint64 `json:"undeliverable"`
	// Throttled counts peers throttled by the peer gater.
	Throttled uint64 `json:"throttled"`
	// Duplicates counts messages seen before (normal in gossip).
	Duplicates uint64 `json:"duplicates"`
}

// Dropped is the sum of the counters that mean a message was lost:
// DroppedRPC, ValidationQueueFull and Undeliverable.
func (c PubSubCounters) Dropped() uint64 {
	return c.DroppedRPC + c.ValidationQueueFull + c.Undeliverable
}

// tracer is a pubsub.RawTracer that counts. Its methods are called from
// pubsub's event loop and must not block.
type tracer struct {
	delivered, droppedRPC, rejected, ignored, queueFull atomic.Uint64
	undeliverable, throttled, duplicates                atomic.Uint64
}

var _ pubsub.RawTracer = (*tracer)(nil)

func (t *tracer) counters() PubSubCounters {
	return PubSubCounters{
		Delivered:           t.delivered.Load(),
		DroppedRPC:          t.droppedRPC.Load(),
		Rejected:            t.rejected.Load(),
		Ignored:             t.ignored.Load(),
		ValidationQueueFull: t.queueFull.Load(),
		Undeliverable:       t.undeliverable.Load(),
		Throttled:           t.throttled.Load(),
		Duplicates:          t.duplicates.Load(),
	}
}

// OnNewOutboundStream implements pubsub.RawTracer.
func (t *tracer) OnNewOutboundStream(peer.ID, protocol.ID) {}

// OnClosedOutboundStream implements pubsub.RawTracer.
func (t *tracer) OnClosedOutboundStream(peer.ID) {}

// Join implements pubsub.RawTracer.
func (t *tracer) Join(string) {}

// Leave implements pubsub.RawTracer.
func (t *tracer) Leave(string) {}

// Graft implements pubsub.RawTracer.
func (t *tracer) Graft(peer.ID, string) {}

// Prune implements pubsub.RawTracer.
func (t *tracer) Prune(peer.ID, string) {}

// ValidateMessage implements pubsub.RawTracer.
func (t *tracer) ValidateMessage(*pubsub.Message) {}

// DeliverMessage counts a delivered message.
func (t *tracer) DeliverMessage(*pubsub.Message) { t.delivered.Add(1) }

// RejectMessage counts a rejected or ignored message by kind of reason.
func (t *tracer) RejectMessage(_ *pubsub.Message, reason string) {
	switch reason {
	case pubsub.RejectValidationIgnored:
		t.ignored.Add(1)
	case pubsub.RejectValidationQueueFull, pubsub.RejectValidationThrottled:
		t.ignored.Add(1)
		t.queueFull.Add(1)
	default:
		t.rejected.Add(1)
	}
}

// DuplicateMessage counts a duplicate.
func (t *tracer) DuplicateMessage(*pubsub.Message) { t.duplicates.Add(1) }

// ThrottlePeer counts a throttled peer.
func (t *tracer) ThrottlePeer(peer.ID) { t.throttled.Add(1) }

// RecvRPC implements pubsub.RawTracer.
func (t *tracer) RecvRPC(*pubsub.RPC) {}

// SendRPC implements pubsub.RawTracer.
func (t *tracer) SendRPC(*pubsub.RPC, peer.ID) {}

// DropRPC counts an outgoing RPC dropped.
func (t *tracer) DropRPC(*pubsub.RPC, peer.ID) { t.droppedRPC.Add(1) }

// UndeliverableMessage counts a message a slow subscriber missed.
func (t *tracer) UndeliverableMessage(*pubsub.Message) { t.undeliverable.Add(1) }
