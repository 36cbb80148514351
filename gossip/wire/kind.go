package wire

import "fmt"

// Version is the wire format version, the first byte of every message. A
// decoder rejects any other value with ErrVersion. Bump it on any change
// that an older decoder would misread, or that makes peers of two releases
// unable to work together: peers compare it when they meet (node's hello).
// 2 added stream incarnations; 3 is the same message format, sent over
// unsigned gossipsub with beats signed in their payload (node/beatsig.go);
// 4 added KindCore, the training core's messages.
const Version byte = 4

// Kind says what a message carries: the second byte of every message.
//
// WARNING: the numbers are protocol. Append new kinds at the end (or take
// them from the reserved range); never renumber or reuse a retired number.
type Kind uint8

// Message kinds.
const (
	// KindInvalid is never sent; a zero Kind in a Message means "not decoded".
	KindInvalid Kind = 0
	// KindGrad: a worker's summed gradient for one owner (Message.Grad fields).
	KindGrad Kind = 1
	// KindParams: an owner's new values for the rows it changed.
	KindParams Kind = 2
	// KindBeat: a membership heartbeat or join/leave announcement.
	KindBeat Kind = 3
	// KindFetch: a repair request over a direct stream.
	KindFetch Kind = 4
	// KindFetchReply: the answer to a Fetch; the replayed messages follow it
	// on the stream.
	KindFetchReply Kind = 5
	// KindParamsAck: an owner's new values for the rows it changed, like
	// Params, plus its progress (Message.Ack): the through clock workers wait
	// on and the newest clock applied from each worker, for flow control.
	// Every part of a split body carries the same Ack. The training exchange
	// (package gossip) sends this kind on the params topic, not Params.
	KindParamsAck Kind = 6
	// KindControl: a control request on a direct stream (join, leave,
	// status, model snapshot, shard handoff; Message.Control).
	KindControl Kind = 7
	// KindControlReply: the answer to a Control (Message.ControlReply); a
	// bulk payload may follow as frames.
	KindControlReply Kind = 8
	// KindCore: a message of the training protocol core (Message.Core: a
	// push, pull, reply, forward, shard state, raft message, join, …; see
	// CoreOp). Wire version 4 replaced gradients and params (KindGrad,
	// KindParamsAck) with it.
	KindCore Kind = 9

	// KindReservedFirst..KindReservedLast are set aside for later kinds.
	// Decoders of this version reject them with ErrKind. (6..9 were taken
	// from this range.)
	KindReservedFirst Kind = 10
	KindReservedLast  Kind = 31
)

// String names the kind as it appears in logs and error messages.
func (k Kind) String() string {
	switch k {
	case KindInvalid:
		return "invalid"
	case KindGrad:
		return "grad"
	case KindParams:
		return "params"
	case KindBeat:
		return "beat"
	case KindFetch:
		return "fetch"
	case KindFetchReply:
		return "fetch-reply"
	case KindParamsAck:
		return "params-ack"
	case KindControl:
		return "control"
	case KindControlReply:
		return "control-reply"
	case KindCore:
		return "core"
	}
	if k >= KindReservedFirst && k <= KindReservedLast {
		return fmt.Sprintf("reserved-%d", uint8(k))
	}
	return fmt.Sprintf("kind-%d", uint8(k))
}

// known reports whether this version can decode kind k.
func (k Kind) known() bool { return k >= KindGrad && k <= KindCore }

// Sparse reports whether messages of kind k carry a sparse body (rows and
// values): Grad, Params and ParamsAck.
func (k Kind) Sparse() bool {
	return k == KindGrad || k == KindParams || k == KindParamsAck || k == KindCore
}
