package wire

import (
	"fmt"
	"slices"

	"github.com/gossiptrain/gossiptrain/model"
)

// CoreOp says what a training-protocol message (KindCore) asks or answers.
// The protocol itself is node/train's (docs/protocol.md); this package only
// carries it, bounded.
//
// WARNING: the numbers are protocol. Append new ops at the end; never
// renumber or reuse a retired number.
type CoreOp uint8

// Core operations.
const (
	// CorePush: a worker's contribution to one round for the shards of one
	// owner (Rows: summed gradient rows; Examples: the batch's examples;
	// Shards: every shard whose rows of the round are all here), and the
	// rows it wants next (Want, values as of Through rounds).
	CorePush CoreOp = 1
	// CorePull: rows wanted (Want, as of Through rounds), no contribution.
	CorePull CoreOp = 2
	// CoreReply: an owner's answer to a push or pull (Req): the values of
	// the wanted rows, Width per row, aligned with the request's Want; or
	// with FlagRows, Rows itself (the full-copy gather). Through: the
	// owner's progress.
	CoreReply CoreOp = 3
	// CoreForward: a primary's applied rows for its replicas (Round: the
	// round in sync mode, a sequence number otherwise; Rows; Examples).
	CoreForward CoreOp = 4
	// CoreAck: acknowledges a forward or a state transfer (Req).
	CoreAck CoreOp = 5
	// CoreState: a shard's weights and optimizer state handed to a new
	// holder (Shards: one shard; Rows: its rows with state, StateWidth
	// values each; Clocks: per worker, the rounds applied).
	CoreState CoreOp = 6
	// CoreRaft: a message of the configuration agreement (Blob: an etcd
	// raft message, protobuf-encoded).
	CoreRaft CoreOp = 7
	// CoreJoin: a peer asks to join the run (Member: its raft ID).
	CoreJoin CoreOp = 8
	// CoreJoinReply: the answer (Text: the leader's peer ID or why not;
	// Req: the leader's raft ID; Member, as on every message, the
	// sender's).
	CoreJoinReply CoreOp = 9
	// CoreLeave: a member asks the leader to remove it gracefully.
	CoreLeave CoreOp = 10
	// CoreFinished: the sender has every final value it needs; peers exit
	// once every member has said so.
	CoreFinished CoreOp = 11
	// CoreHash: asks an owner for the hashes of its shards (Shards), or
	// with FlagReply answers with them (Clocks: shard -> hash).
	CoreHash CoreOp = 12
	// CoreCut: a worker's cut of an ssp/async checkpoint (Req: the
	// checkpoint's configuration; Round: the first round it has not
	// pushed), or with FlagReply an owner's answer that its shards are
	// exported.
	CoreCut CoreOp = 13
	// CoreReady: an ssp/async owner tells the raft leader that, under the
	// configuration Req, every member is done and every contribution is
	// applied to the shards it is primary for. Once every member of that
	// configuration has said so, the leader proposes one marked final.
	CoreReady  CoreOp = 14
	coreOpLast        = CoreReady
)

func (o CoreOp) String() string {
	switch o {
	case CorePush:
		return "push"
	case CorePull:
		return "pull"
	case CoreReply:
		return "reply"
	case CoreForward:
		return "forward"
	case CoreAck:
		return "ack"
	case CoreState:
		return "state"
	case CoreRaft:
		return "raft"
	case CoreJoin:
		return "join"
	case CoreJoinReply:
		return "join-reply"
	case CoreLeave:
		return "leave"
	case CoreFinished:
		return "finished"
	case CoreHash:
		return "hash"
	case CoreCut:
		return "cut"
	case CoreReady:
		return "ready"
	}
	return fmt.Sprintf("core-op-%d", uint8(o))
}

// CoreFlags qualify a core message. Bits not defined here must be 0.
type CoreFlags uint16

// Core flags.
const (
	// FlagDone: the worker has no more data (a push with 0 examples).
	FlagDone CoreFlags = 1 << 0
	// FlagFinal: every worker is done and everything is applied: the
	// values in this reply are final.
	FlagFinal CoreFlags = 1 << 1
	// FlagResend: a push sent again to a shard's new owner after its old
	// one crashed or handed it over.
	FlagResend CoreFlags = 1 << 2
	// FlagMoved: a reply refusing the request's shards (Shards), which the
	// sender no longer owns: send them to their new owner.
	FlagMoved CoreFlags = 1 << 3
	// FlagRows: a reply carrying Rows (indices and values) instead of
	// Values aligned with a want list.
	FlagRows CoreFlags = 1 << 4
	// FlagRefused: a join reply that says no (Text: why); on a state
	// message, "I have no copy of the shard" (with FlagMoved: to a
	// takeover's ask; with FlagAsk: "and I wait for it from your side
	// of the handoffs myself").
	FlagRefused CoreFlags = 1 << 5
	// FlagReply: the answer of an op that has no reply op of its own
	// (hash); on a takeover's ask (FlagAsk|FlagMoved), "answer even if
	// you have no copy".
	FlagReply CoreFlags = 1 << 6
	// FlagAll: a pull of every row of Shards (a full copy).
	FlagAll CoreFlags = 1 << 7
	// FlagAsk: a state message that asks for the shard (Shards, as of
	// Round) instead of carrying it: a new holder whose handoff has not
	// come asks the peer that now applies the round before.
	FlagAsk CoreFlags = 1 << 8
	// FlagFresh: a state message (ssp, async) of a shard restarted from
	// nothing since some workers last contributed: a worker its clocks do
	// not list starts with its next contribution (it has no rounds to
	// catch up). On an ssp/async forward: the worker's first contribution
	// to such a shard at the primary.
	FlagFresh CoreFlags = 1 << 9
	coreFlags           = 1<<10 - 1
)

// MemberClock is one entry of a per-worker list: a member (its raft ID) and
// a count (rounds applied), or for CoreHash a shard and its hash.
type MemberClock struct {
	Member uint64
	Clock  uint64
}

// Core is a training-protocol message (KindCore): one struct for every op,
// with the fields each op uses (see CoreOp). Decode reuses its slices.
type Core struct {
	Op       CoreOp
	Flags    CoreFlags
	Member   uint64   // the sender's member ID (raft node ID) in the run
	Config   uint64   // the newest configuration ID the sender has applied
	Round    uint64   // the round (or sequence number) the message is about
	Through  uint64   // push, pull: values wanted as of this many rounds; reply: the owner's progress; sync final state: the round after the last
	Req      uint64   // request number, echoed by replies and acks
	Examples uint64   // push, forward: examples behind the rows
	Shards   []uint32 // strictly ascending shard numbers
	// Rows are gradient rows (push), summed rows (forward), changed rows
	// (reply with FlagRows) or a shard's state (state): RowWidth values per
	// row, strictly ascending indices.
	Rows     model.Sparse
	RowWidth int
	Want     []uint32      // strictly ascending rows wanted
	Values   []float32     // reply: values of the request's Want, row-major
	Clocks   []MemberClock // strictly ascending by Member
	Blob     []byte        // raft message bytes
	Text     string        // join reply: the leader's peer ID, or why not
}

// Reset empties m, keeping its slices' capacity.
func (m *Core) Reset() {
	*m = Core{
		Shards: m.Shards[:0], Rows: model.Sparse{Idx: m.Rows.Idx[:0], Val: m.Rows.Val[:0]},
		Want: m.Want[:0], Values: m.Values[:0], Clocks: m.Clocks[:0], Blob: m.Blob[:0],
	}
}

// Clone returns a deep copy of m.
func (m *Core) Clone() *Core {
	c := *m
	c.Shards = slices.Clone(m.Shards)
	c.Rows = model.Sparse{Idx: slices.Clone(m.Rows.Idx), Val: slices.Clone(m.Rows.Val)}
	c.Want = slices.Clone(m.Want)
	c.Values = slices.Clone(m.Values)
	c.Clocks = slices.Clone(m.Clocks)
	c.Blob = slices.Clone(m.Blob)
	return &c
}

// Check reports the first field out of its domain: an op or flag this
// version does not know, lists out of order or longer than lim allows, rows
// that do not match their width, indices at or above lim.Features (when
// set), or values that are not finite. Decode checks the same; the training
// core calls it on messages that did not come through a decoder.
func (m *Core) Check(lim Limits) error {
	switch {
	case m.Op < CorePush || m.Op > coreOpLast:
		return fmt.Errorf("%w: core op %d", ErrMalformed, m.Op)
	case m.Flags&^coreFlags != 0:
		return fmt.Errorf("%w: core flags %#x", ErrMalformed, m.Flags)
	case len(m.Shards) > lim.MaxList || len(m.Clocks) > lim.MaxList:
		return fmt.Errorf("%w: %d shards, %d clocks, limit %d", ErrTooLarge, len(m.Shards), len(m.Clocks), lim.MaxList)
	case len(m.Want) > lim.MaxRows || m.Rows.Len() > lim.MaxRows:
		return fmt.Errorf("%w: %d wanted rows, %d rows, limit %d", ErrTooLarge, len(m.Want), m.Rows.Len(), lim.MaxRows)
	case len(m.Values) > lim.MaxValues || len(m.Rows.Val) > lim.MaxValues:
		return fmt.Errorf("%w: %d values, %d row values, limit %d", ErrTooLarge, len(m.Values), len(m.Rows.Val), lim.MaxValues)
	case m.RowWidth < 0 || (m.Rows.Len() > 0 && m.RowWidth == 0) || len(m.Rows.Val) != m.Rows.Len()*m.RowWidth:
		return fmt.Errorf("%w: %d row values for %d rows of width %d", ErrMalformed, len(m.Rows.Val), m.Rows.Len(), m.RowWidth)
	case len(m.Text) > lim.MaxString:
		return fmt.Errorf("%w: text of %d bytes, limit %d", ErrTooLarge, len(m.Text), lim.MaxString)
	case len(m.Blob) > lim.MaxMessage:
		return fmt.Errorf("%w: blob of %d bytes, limit %d", ErrTooLarge, len(m.Blob), lim.MaxMessage)
	}
	if !ascending32(m.Shards) || !ascending32(m.Want) || !ascending32(m.Rows.Idx) {
		return fmt.Errorf("%w: shards, wanted rows or row indices not strictly ascending", ErrMalformed)
	}
	for i := 1; i < len(m.Clocks); i++ {
		if m.Clocks[i].Member <= m.Clocks[i-1].Member {
			return fmt.Errorf("%w: clocks not strictly ascending by member", ErrMalformed)
		}
	}
	if lim.Features > 0 {
		if n := len(m.Want); n > 0 && uint64(m.Want[n-1]) >= lim.Features {
			return fmt.Errorf("%w: wanted row %d, %d rows", ErrRange, m.Want[n-1], lim.Features)
		}
		if n := m.Rows.Len(); n > 0 && uint64(m.Rows.Idx[n-1]) >= lim.Features {
			return fmt.Errorf("%w: row %d, %d rows", ErrRange, m.Rows.Idx[n-1], lim.Features)
		}
	}
	for _, v := range m.Values {
		if !finite(v) {
			return fmt.Errorf("%w: value %v", ErrNonFinite, v)
		}
	}
	for _, v := range m.Rows.Val {
		if !finite(v) {
			return fmt.Errorf("%w: row value %v", ErrNonFinite, v)
		}
	}
	return nil
}

func ascending32(s []uint32) bool {
	for i := 1; i < len(s); i++ {
		if s[i] <= s[i-1] {
			return false
		}
	}
	return true
}

func finite(v float32) bool { return v-v == 0 }
