package gossip

import (
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// RepairProtocol is the direct-stream protocol a receiver asks a sender on
// for messages it missed (docs/protocol.md).
const RepairProtocol = "/gossiptrain/repair/1"

// PushProtocol is the direct-stream protocol of gradients sent with
// Config.GradStreams: one message per request, an empty response.
const PushProtocol = "/gossiptrain/grad-push/1"

// ParamsPushProtocol is the same for params (Config.ParamsStreams).
const ParamsPushProtocol = "/gossiptrain/params-push/1"

// GradTopic is the pubsub topic carrying workers' gradients to owner: only
// the owner subscribes, so gossipsub routes it to the owner alone.
func GradTopic(job, owner string) string { return "gossiptrain/" + job + "/grad/" + owner }

// ParamsTopic is the pubsub topic carrying owners' new values to peer:
// only peer subscribes, and every owner publishes its params stream on
// every peer's topic. One shared topic would let gossipsub relay each
// message between the receivers, which on small clusters (every peer in
// every mesh) multiplied the params traffic by up to N-1: measured with 3
// peers, one peer sent 3.1 MB where the others sent 1.4 MB. Per-peer
// topics make the all-gather exactly one copy per receiver.
func ParamsTopic(job, peer string) string { return "gossiptrain/" + job + "/params/" + peer }

// Stream says which kind of sequenced stream a message belongs to. A
// sender numbers each stream separately: a worker its gradients to each
// owner, an owner its params.
type Stream uint8

// Streams.
const (
	// StreamGrad: a worker's gradients to one owner (KindGrad on the
	// owner's grad topic).
	StreamGrad Stream = 1
	// StreamParams: an owner's new values with its progress (KindParamsAck
	// on the params topic).
	StreamParams Stream = 2
)

// String returns "grad" or "params".
func (s Stream) String() string {
	switch s {
	case StreamGrad:
		return "grad"
	case StreamParams:
		return "params"
	}
	return fmt.Sprintf("stream-%d", uint8(s))
}

// Config configures an Exchange. The CLI maps flags onto it; the training
// layer sets Width, Wire.Limits.Features and CheckEpoch from the model and
// the membership.
type Config struct {
	// Job is the training job: topic names derive from it and messages of
	// other jobs are rejected. Required.
	Job string
	// GradStreams sends gradients to their owner over direct streams
	// (PushProtocol) instead of gossipsub: the secure channel authenticates
	// the sender, so no per-message signature is made or checked. The
	// messages are sequenced and repaired exactly as on gossipsub; a push
	// that fails or finds the sender's queue full is a loss the repair
	// fills. Params stay on gossipsub. Every Exchange accepts pushes,
	// whatever its own setting.
	GradStreams bool
	// ParamsStreams sends params to every receiver over direct streams
	// (ParamsPushProtocol) in the same way: one message per receiver,
	// where gossipsub publishes one per receiver's topic.
	ParamsStreams bool
	// Width is the number of values per row of the model (1 for logistic
	// regression, the classes for softmax). Messages of another width are
	// rejected.
	Width int
	// Wire configures the codecs: Values and Compress are how gradients are
	// sent (params always travel as lossless F32, docs/protocol.md); Limits
	// bound every message sent and accepted. Set Limits.Features to
	// model.Layout.Features so out-of-range indices are rejected.
	// Limits.MaxMessage must not exceed the transport's payload limit.
	Wire wire.Config
	// RetransmitMessages bounds each outgoing stream's retransmit buffer in
	// messages (parts). A receiver that asks for an evicted message gets
	// ErrGone.
	RetransmitMessages int
	// RetransmitBytes bounds each outgoing stream's retransmit buffer in
	// bytes. At least Wire.Limits.MaxMessage.
	RetransmitBytes int
	// EarlyMessages bounds, per incoming stream, the messages that arrived
	// ahead of a gap and wait for it to be repaired. Beyond it, early
	// messages are dropped and fetched again by the repair.
	EarlyMessages int
	// EarlyBytes bounds the same buffer in bytes.
	EarlyBytes int
	// RepairDelay is how long a receiver waits after seeing a gap before
	// asking the sender, so messages merely reordered can arrive first.
	// Failed repairs back off from it, doubling, up to RepairTimeout.
	RepairDelay time.Duration
	// RepairTimeout bounds one repair round trip (request and reply).
	RepairTimeout time.Duration
	// RepairConcurrency bounds the repair requests in flight at once.
	RepairConcurrency int
	// MaxReplyBytes bounds the messages one repair reply carries; the
	// requester asks again for the rest.
	MaxReplyBytes int
	// Inbox is the number of incoming messages queued for the delivery
	// goroutine before the transport's deliver blocks.
	Inbox int
	// LoopParams delivers this node's own params messages to the Params
	// handler too (with From = self), so the training loop applies every
	// owner's params, its own included, the same way. Gradients a worker
	// sends to itself (it owns shards) are always looped back.
	LoopParams bool
	// CheckEpoch, when set, is asked about every incoming Grad and
	// ParamsAck: a non-nil error rejects the message (counted under
	// Rejections.Epoch; on p2p it lowers the sender's peer score, so reject
	// only absurd epochs, not merely stale ones). It is called from
	// transport validator goroutines and the delivery goroutine,
	// concurrently: it must be safe for concurrent use and fast.
	CheckEpoch func(kind wire.Kind, sender string, epoch uint64) error
	// Log receives repair failures, lost messages and protocol violations.
	Log zerolog.Logger
	// Penalize, when set, is told the sender of every direct-stream push
	// (PushProtocol, ParamsPushProtocol) that validation rejected. Gossipsub
	// scores the senders of rejected messages itself; streams have no score,
	// so the node counts these the same way and disconnects a peer that
	// keeps sending them (node.Node.Penalize). Called on the stream's
	// goroutine: it must not block.
	Penalize func(peer string)
}

// DefaultConfig returns the configuration gossiptrain runs with; Job and
// Width must still be set.
func DefaultConfig() Config {
	return Config{
		Width: 1,
		Wire:  wire.DefaultConfig(),
		// Sync mode needs one message per owner per round to survive until
		// the next barrier; 1024 parts cover many rounds of async traffic
		// (a few ms of flushes each) at the sizes the issue recommends.
		RetransmitMessages: 1024,
		// 32 MiB per stream: 32 full-size (1 MiB) parts, or the 1024
		// messages above at 32 KiB. A worker keeps one stream per owner.
		RetransmitBytes: 32 << 20,
		// Out-of-order messages held while a gap is repaired: a window of a
		// few hundred messages covers a repair round trip at full speed.
		EarlyMessages: 1024,
		EarlyBytes:    32 << 20,
		// Gossipsub over one link rarely reorders; 5 ms lets a message that
		// was merely late arrive before asking for it.
		RepairDelay: 5 * time.Millisecond,
		// A repair moves at most MaxReplyBytes over a direct stream
		// (5-10x faster than pubsub here); 10 s is generous on any LAN.
		RepairTimeout:     10 * time.Second,
		RepairConcurrency: 4,
		MaxReplyBytes:     16 << 20,
		Inbox:             1024,
		LoopParams:        true,
		Log:               zerolog.Nop(),
	}
}

// Validate reports the first field out of its domain, wrapping ErrConfig.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: Config.%s %s", ErrConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Job == "" || strings.ContainsAny(c.Job, "/ \t\n"):
		return bad("Job", "%q: want a non-empty name without '/' or spaces", c.Job)
	case len(c.Job) > c.Wire.Limits.MaxString:
		return bad("Job", "%q: longer than Wire.Limits.MaxString (%d)", c.Job, c.Wire.Limits.MaxString)
	case c.Width < 1 || c.Width > c.Wire.Limits.MaxWidth:
		return bad("Width", "%d: want 1..Wire.Limits.MaxWidth (%d)", c.Width, c.Wire.Limits.MaxWidth)
	}
	if err := c.Wire.Validate(); err != nil {
		return fmt.Errorf("%w: Config.Wire: %w", ErrConfig, err)
	}
	switch {
	case c.RetransmitMessages < 1:
		return bad("RetransmitMessages", "%d: want >= 1", c.RetransmitMessages)
	case c.RetransmitBytes < c.Wire.Limits.MaxMessage:
		return bad("RetransmitBytes", "%d: want >= Wire.Limits.MaxMessage (%d)", c.RetransmitBytes, c.Wire.Limits.MaxMessage)
	case c.EarlyMessages < 1:
		return bad("EarlyMessages", "%d: want >= 1", c.EarlyMessages)
	case c.EarlyBytes < c.Wire.Limits.MaxMessage:
		return bad("EarlyBytes", "%d: want >= Wire.Limits.MaxMessage (%d)", c.EarlyBytes, c.Wire.Limits.MaxMessage)
	case c.RepairDelay < 0:
		return bad("RepairDelay", "%v: want >= 0", c.RepairDelay)
	case c.RepairTimeout <= 0:
		return bad("RepairTimeout", "%v: want > 0", c.RepairTimeout)
	case c.RepairConcurrency < 1:
		return bad("RepairConcurrency", "%d: want >= 1", c.RepairConcurrency)
	case c.MaxReplyBytes < c.Wire.Limits.MaxMessage:
		return bad("MaxReplyBytes", "%d: want >= Wire.Limits.MaxMessage (%d)", c.MaxReplyBytes, c.Wire.Limits.MaxMessage)
	case c.Inbox < 1:
		return bad("Inbox", "%d: want >= 1", c.Inbox)
	}
	return nil
}
