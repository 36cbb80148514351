package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/node/membership"
)

// RejectReason says why the members-topic validator refused a message.
// Status.RejectedBy counts them by String.
type RejectReason uint8

// Reasons for refusing a message on the members topic.
const (
	// RejectMalformed: not a valid gossip/wire message, or a beat that
	// breaks the membership invariants (zero incarnation/seq/epoch, unsorted
	// or empty member IDs, empty addresses).
	RejectMalformed RejectReason = 1 + iota
	// RejectOversize: over a size limit: the message, a string, a list, more
	// than 16 addresses, an address over 256 bytes or an ID over 128.
	RejectOversize
	// RejectVersion: a wire format version this peer does not speak.
	RejectVersion
	// RejectKind: a wire message that is not a beat.
	RejectKind
	// RejectJob: a beat of another job.
	RejectJob
	// RejectSender: the header's sender is not an Ed25519 peer ID, so no
	// key to check the beat's signature with.
	RejectSender
	// RejectReplay: the sender's (incarnation, seq) is not newer than one
	// already accepted. Such messages are ignored rather than rejected, so
	// an honest peer forwarding a late copy is not penalised.
	RejectReplay
	// RejectRefused: the author or the forwarding peer is blocked: refused
	// at the hello (different max message size) or disconnected for a low
	// gossipsub score.
	RejectRefused
	// RejectUnverified: the forwarding peer has not completed the hello
	// yet. Ignored, not rejected: it is a race of a fresh connection, and
	// the sender beats again within a heartbeat.
	RejectUnverified
	// RejectSignature: the beat's signature is not its header sender's
	// (a forged sender, or a beat altered on the way).
	RejectSignature
	numRejectReasons
)

var rejectNames = [...]string{"", "malformed", "oversize", "version", "kind", "job", "sender", "replay", "refused", "unverified", "signature"}

// String names the reason as Status.RejectedBy does.
func (r RejectReason) String() string {
	if r > 0 && r < numRejectReasons {
		return rejectNames[r]
	}
	return fmt.Sprintf("reject(%d)", uint8(r))
}

// maxEpoch mirrors membership's bound on announced epochs (2^62).
const maxEpoch = 1 << 62

// beatLimits are the membership limits a validator enforces before a beat
// is forwarded, so that gossipsub scores down a peer that sends them.
type beatLimits struct {
	maxMembers, maxAddrs, maxAddrLen, maxIDLen int
}

func membershipLimits() beatLimits {
	mc := membership.DefaultConfig()
	return beatLimits{maxMembers: mc.MaxMembers, maxAddrs: mc.MaxAddrs, maxAddrLen: mc.MaxAddrLen, maxIDLen: mc.MaxIDLen}
}

// beatBuf carries one decoded beat from the validator to the driver as the
// pubsub message's ValidatorData. Beat's slices alias msg's; the driver puts
// the buffer back in the pool after membership.Receive, which copies what
// it keeps.
type beatBuf struct {
	msg  wire.Message
	beat membership.Beat
}

// stamp is the newest (incarnation, seq) accepted from a sender.
type stamp struct{ inc, seq uint64 }

func (s stamp) newer(o stamp) bool { return s.inc > o.inc || s.inc == o.inc && s.seq > o.seq }

// beatValidator checks messages on the members topic before gossipsub
// forwards them. It is safe for concurrent use: pubsub runs validators on
// several goroutines; a mutex guards the codec and the replay table (beats
// are a few per second per peer, so it is never contended in practice).
type beatValidator struct {
	self    peer.ID
	job     string
	lim     beatLimits
	refused func(peer.ID) bool // blocked peers; may be nil
	// verified reports whether a directly connected peer completed the
	// hello; nil accepts every peer.
	verified func(peer.ID) bool

	mu         sync.Mutex
	codec      *wire.Codec
	last       map[string]stamp     // by author ID string
	keys       map[string]senderKey // by author ID string
	signed     []byte               // scratch: beatSigDomain + beat
	maxTracked int

	pool   sync.Pool
	counts [numRejectReasons]atomic.Uint64
	// onReject is told about every refused message (the node logs a
	// sample). May be nil. Called without locks held.
	onReject func(from peer.ID, r RejectReason, err error)
}

// newBeatValidator returns a validator for job's members topic; payloads
// (signed beats) may be up to maxPayload bytes.
func newBeatValidator(self peer.ID, job string, maxPayload int) *beatValidator {
	lim := membershipLimits()
	wl := wire.DefaultLimits()
	wl.MaxMessage = maxPayload - beatSigSize
	wl.MaxString = lim.maxAddrLen // IDs (<= maxIDLen) are checked below
	wl.MaxList = lim.maxMembers
	v := &beatValidator{
		self:       self,
		job:        job,
		lim:        lim,
		codec:      wire.NewCodec(wire.F32, wire.None, wl),
		last:       map[string]stamp{},
		keys:       map[string]senderKey{},
		maxTracked: 2 * lim.maxMembers,
	}
	v.pool.New = func() any { return new(beatBuf) }
	return v
}

// counts returns the refusals by reason (index 0 unused).
func (v *beatValidator) rejected() [numRejectReasons]uint64 {
	var out [numRejectReasons]uint64
	for i := range out {
		out[i] = v.counts[i].Load()
	}
	return out
}

// validate is the pubsub.ValidatorEx of the members topic. Own messages
// (published locally) are accepted without decoding: the driver drops
// them. from is the neighbour that forwarded the message; the beat's author
// is its header's sender, proven by the beat's signature.
func (v *beatValidator) validate(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	if from == v.self {
		return pubsub.ValidationAccept
	}
	if v.verified != nil && !v.verified(from) {
		return v.refuse(from, RejectUnverified, fmt.Errorf("forwarder %s has not completed the hello", from))
	}
	if v.refused != nil && v.refused(from) {
		return v.refuse(from, RejectRefused, fmt.Errorf("forwarder %s is blocked", from))
	}
	beat, sig, ok := splitSigned(msg.GetData())
	if !ok {
		return v.refuse(from, RejectMalformed, fmt.Errorf("%d bytes from %s: shorter than a signature", len(msg.GetData()), from))
	}
	buf := v.pool.Get().(*beatBuf)
	v.mu.Lock()
	reason, err := v.check(beat, buf)
	if reason == 0 {
		reason, err = v.verify(buf.msg.Header.Sender, beat, sig)
	}
	if reason == 0 {
		st := stamp{buf.beat.Incarnation, buf.beat.Seq}
		last, seen := v.last[buf.beat.From]
		if seen && !st.newer(last) {
			reason = RejectReplay
			err = fmt.Errorf("%s beat from %s incarnation %d seq %d: not newer than incarnation %d seq %d",
				buf.beat.Kind, buf.beat.From, st.inc, st.seq, last.inc, last.seq)
		} else {
			if !seen && len(v.last) >= v.maxTracked {
				for k := range v.last { // evict one: membership still rejects its replays
					delete(v.last, k)
					break
				}
			}
			v.last[buf.beat.From] = st
		}
	}
	v.mu.Unlock()
	if reason != 0 {
		v.pool.Put(buf)
		return v.refuse(from, reason, err)
	}
	msg.ValidatorData = buf
	return pubsub.ValidationAccept
}

func (v *beatValidator) refuse(from peer.ID, r RejectReason, err error) pubsub.ValidationResult {
	v.counts[r].Add(1)
	if v.onReject != nil {
		v.onReject(from, r, err)
	}
	if r == RejectReplay || r == RejectUnverified {
		return pubsub.ValidationIgnore
	}
	return pubsub.ValidationReject
}

// verify checks that sig is sender's signature of beat and that sender is
// not blocked. Senders' keys are cached: decoding an ID and extracting its
// key for every beat would allocate. The caller holds v.mu.
func (v *beatValidator) verify(sender string, beat, sig []byte) (RejectReason, error) {
	k, ok := v.keys[sender]
	if !ok {
		var err error
		if k, err = parseSender(sender); err != nil {
			return RejectSender, err
		}
		if len(v.keys) >= v.maxTracked {
			clear(v.keys)
		}
		v.keys[sender] = k
	}
	if v.refused != nil && v.refused(k.id) {
		return RejectRefused, fmt.Errorf("author %s is blocked", sender)
	}
	v.signed = append(append(v.signed[:0], beatSigDomain...), beat...)
	if good, err := k.pub.Verify(v.signed, sig); err != nil || !good {
		return RejectSignature, fmt.Errorf("beat from %s: signature does not verify under its key", sender)
	}
	return 0, nil
}

// release returns a buffer handed out as ValidatorData.
func (v *beatValidator) release(b *beatBuf) {
	b.beat = membership.Beat{}
	v.pool.Put(b)
}

// check decodes data (a beat without its signature) into buf and applies
// the static rules: a beat of our job within the membership limits. It
// returns 0 and fills buf.beat when the beat passes. The caller holds v.mu
// (the codec is not safe for concurrent use).
func (v *beatValidator) check(data []byte, buf *beatBuf) (RejectReason, error) {
	if err := v.codec.Decode(data, &buf.msg); err != nil {
		switch {
		case errors.Is(err, wire.ErrTooLarge):
			return RejectOversize, err
		case errors.Is(err, wire.ErrVersion):
			return RejectVersion, err
		case errors.Is(err, wire.ErrKind):
			return RejectKind, err
		}
		return RejectMalformed, err
	}
	h, b := &buf.msg.Header, &buf.msg.Beat
	author := h.Sender // proven by the signature, which the caller checks next
	switch {
	case h.Kind != wire.KindBeat:
		return RejectKind, fmt.Errorf("a %s message from %.60q on the members topic", h.Kind, h.Sender)
	case h.Job != v.job:
		return RejectJob, fmt.Errorf("beat from %.60q for job %.60q, we run %q", h.Sender, h.Job, v.job)
	case h.Sender == "" || len(h.Sender) > v.lim.maxIDLen:
		return RejectSender, fmt.Errorf("beat with a sender of %d bytes", len(h.Sender))
	case b.Incarnation == 0 || b.Seq == 0:
		return RejectMalformed, fmt.Errorf("beat from %s: incarnation %d seq %d: both must be > 0", author, b.Incarnation, b.Seq)
	case b.Epoch == 0 || b.Epoch > maxEpoch:
		return RejectMalformed, fmt.Errorf("beat from %s: epoch %d outside 1..2^62", author, b.Epoch)
	case len(b.Members) > v.lim.maxMembers:
		return RejectOversize, fmt.Errorf("beat from %s lists %d members, limit %d", author, len(b.Members), v.lim.maxMembers)
	case len(b.Addrs) > v.lim.maxAddrs:
		return RejectOversize, fmt.Errorf("beat from %s carries %d addresses, limit %d", author, len(b.Addrs), v.lim.maxAddrs)
	}
	for i, id := range b.Members {
		switch {
		case id == "":
			return RejectMalformed, fmt.Errorf("beat from %s: member %d is empty", author, i)
		case len(id) > v.lim.maxIDLen:
			return RejectOversize, fmt.Errorf("beat from %s: member %d has %d bytes, limit %d", author, i, len(id), v.lim.maxIDLen)
		case i > 0 && id <= b.Members[i-1]:
			return RejectMalformed, fmt.Errorf("beat from %s: members not strictly ascending at %d", author, i)
		}
	}
	for i, a := range b.Addrs {
		switch {
		case a == "":
			return RejectMalformed, fmt.Errorf("beat from %s: address %d is empty", author, i)
		case len(a) > v.lim.maxAddrLen:
			return RejectOversize, fmt.Errorf("beat from %s: address %d has %d bytes, limit %d", author, i, len(a), v.lim.maxAddrLen)
		}
	}
	buf.beat = membership.Beat{
		Job:         h.Job,
		From:        h.Sender,
		Incarnation: b.Incarnation,
		Seq:         b.Seq,
		Epoch:       b.Epoch,
		SetHash:     b.SetHash,
		Members:     b.Members,
		Addrs:       b.Addrs,
		Kind:        beatKind(b.State),
	}
	return 0, nil
}

// beatKind maps the wire's beat state onto the membership kind (the two
// packages number them differently).
func beatKind(s wire.BeatState) membership.BeatKind {
	switch s {
	case wire.BeatJoin:
		return membership.Join
	case wire.BeatLeave:
		return membership.Leave
	}
	return membership.Alive
}

// beatState is the inverse of beatKind.
func beatState(k membership.BeatKind) wire.BeatState {
	switch k {
	case membership.Join:
		return wire.BeatJoin
	case membership.Leave:
		return wire.BeatLeave
	}
	return wire.BeatAlive
}

// appendBeat encodes a beat the membership core emitted.
func appendBeat(c *wire.Codec, dst []byte, b *membership.Beat) ([]byte, error) {
	h := wire.Header{Job: b.Job, Sender: b.From, Epoch: b.Epoch, Seq: b.Seq}
	wb := wire.Beat{
		Incarnation: b.Incarnation,
		Seq:         b.Seq,
		Epoch:       b.Epoch,
		SetHash:     b.SetHash,
		State:       beatState(b.Kind),
		Members:     b.Members,
		Addrs:       b.Addrs,
	}
	return c.AppendBeat(dst, h, &wb)
}
