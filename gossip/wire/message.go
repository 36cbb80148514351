package wire

import "github.com/gossiptrain/gossiptrain/model"

// Header is the part of every message that a validator reads before the
// body: who sent it, for which job, at which clock and ring epoch.
//
// On encode, Version, Kind, Values and Compress are ignored (the codec sets
// them); Parts 0 means a single message (Part 0 of 1). On decode every field
// is set.
type Header struct {
	Version  byte     // wire format version (always Version after a successful decode)
	Kind     Kind     // what the body is
	Values   Values   // value format of a sparse body (F32 for other kinds)
	Compress Compress // compressor the body travelled with
	Job      string   // training job name; receivers drop other jobs' messages
	Sender   string   // libp2p peer ID string of the sender
	Clock    uint64   // the sender's clock (round) when it produced the message
	Epoch    uint64   // the ring/membership epoch the sender computed owners with
	// Incarnation names the sender's sequence space: a stream the sender
	// starts again (a restarted process, a receiver added anew) gets a
	// larger one, and receivers start that stream again from its first
	// message. 0 on messages that are not sequenced.
	Incarnation uint64
	Seq         uint64 // per-sender sequence number: a gap is a lost message to repair
	Part        uint16 // index of this part, 0 <= Part < Parts
	Parts       uint16 // number of parts the body was split into, >= 1
}

// BeatState is what a heartbeat announces.
type BeatState uint8

// Heartbeat states. The numbers are protocol.
const (
	BeatAlive BeatState = 0 // periodic "still here"
	BeatJoin  BeatState = 1 // the sender is joining
	BeatLeave BeatState = 2 // the sender is leaving gracefully
)

// String returns "alive", "join" or "leave".
func (s BeatState) String() string {
	switch s {
	case BeatAlive:
		return "alive"
	case BeatJoin:
		return "join"
	case BeatLeave:
		return "leave"
	}
	return "beat-state-invalid"
}

// Beat is the body of a membership heartbeat. Its meaning belongs to
// node/membership; this package only carries it, bounded.
type Beat struct {
	Incarnation uint64    // bumped when the sender restarts
	Seq         uint64    // heartbeat sequence within the incarnation
	Epoch       uint64    // the sender's membership epoch
	SetHash     uint64    // hash of the sender's member set, to spot divergent views
	State       BeatState // alive, join or leave
	Members     []string  // member peer IDs as the sender sees them (at most MaxList)
	Addrs       []string  // the sender's listen multiaddrs (at most MaxList)
}

// Fetch asks a peer over a direct stream to resend the messages that Origin
// published on Topic with sequence numbers From..To (inclusive). A sender
// numbers each of its streams separately (a worker's gradients to each
// owner, an owner's params), so Origin and Topic together name the sequence
// space.
type Fetch struct {
	Origin string // peer ID whose messages are wanted
	Topic  string // the topic they were published on (the stream)
	From   uint64 // first sequence number
	To     uint64 // last sequence number, From <= To, at most MaxList numbers
}

// FetchReply answers a Fetch. It is followed on the same stream by Count
// complete messages (each framed with AppendFrame), the ones of From..To
// that the responder still has, in sequence order; Gone lists the numbers it
// no longer has, so the requester can ask another peer or give up loudly.
type FetchReply struct {
	Origin string // as in the Fetch
	Topic  string // as in the Fetch
	From   uint64 // as in the Fetch
	To     uint64 // as in the Fetch
	Count  uint64 // messages that follow the reply on the stream
	// Incarnation is the stream's (as in its messages' headers); First is
	// the first sequence number of it the requester was sent: numbers
	// below it went out before the requester was a receiver (a peer that
	// joined later) and are neither sent nor Gone.
	Incarnation uint64
	First       uint64
	Gone        []uint64 // strictly ascending sequence numbers in From..To that are not available
}

// WorkerClock is one entry of an Ack: the newest clock an owner has
// applied from one worker.
type WorkerClock struct {
	Worker string // the worker's peer ID
	Clock  uint64 // the newest clock of that worker's gradients the owner has applied
}

// Ack is the progress an owner announces with its new values
// (KindParamsAck). The wire does not interpret the clocks; their meaning is
// the training protocol's. (The gossipsub exchange that used it was replaced
// by the protocol core's link: docs/history.md.)
type Ack struct {
	// Through is the owner's through clock: it has applied every live
	// worker's gradients up to it.
	Through uint64
	// Applied lists, per worker, the newest clock applied from it, strictly
	// ascending by Worker (byte order), at most Limits.MaxList entries. It
	// may be empty (sync mode needs only Through).
	Applied []WorkerClock
	// Config is the newest training configuration the owner knows (ID 0:
	// none). Every owner sends it with every params message, so the whole
	// cluster learns a change from whichever owner it hears first.
	Config TrainConfig
	// Force asks receivers to take the rows even if their copy already
	// counts Through complete for the sender's shards: an owner that
	// promoted shards of a crashed one republishes them so every copy
	// agrees again.
	Force bool
}

// TrainConfig is a training configuration: which peers train, from which round
// (docs/protocol.md, "Membership changes"). The wire does not interpret it.
type TrainConfig struct {
	ID         uint64   // increasing; 0 means no configuration
	Start      uint64   // first round its worker set applies to (sync)
	Checkpoint uint64   // round after which every owner writes a checkpoint (0: none)
	Members    []string // the workers, strictly ascending
	Crashed    []string // members of the previous configuration removed as dead, strictly ascending
}

// Message is a decoded message: the header and the body of its kind. Decode
// fills a caller's Message and reuses its slices, so a receive loop that
// keeps one Message allocates nothing in steady state. Fields of other kinds
// keep stale contents; read only those of Header.Kind.
type Message struct {
	Header
	// Grad, Params and ParamsAck:
	Examples int          // Grad: examples behind the summed gradient (every part carries the total)
	Width    int          // values per row
	Sparse   model.Sparse // the rows of this part
	// ParamsAck (every part carries the whole Ack):
	Ack Ack
	// Beat:
	Beat Beat
	// Fetch:
	Fetch Fetch
	// FetchReply:
	Reply FetchReply
	// Control and ControlReply:
	Control      Control
	ControlReply ControlReply
	// Core:
	Core Core
}
