package membership

import "fmt"

// BeatKind says why a beat was sent. The numbers are protocol (the wire
// codec sends them): append new kinds, never renumber.
type BeatKind uint8

// Beat kinds.
const (
	// Alive is the periodic heartbeat.
	Alive BeatKind = 1
	// Join is a peer's first beat after it starts. Receivers treat it as
	// Alive; it only makes logs and traces readable.
	Join BeatKind = 2
	// Leave announces a graceful departure: receivers drop the sender at
	// once instead of waiting DeadAfter.
	Leave BeatKind = 3
)

// String names the kind for logs.
func (k BeatKind) String() string {
	switch k {
	case Alive:
		return "alive"
	case Join:
		return "join"
	case Leave:
		return "leave"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Beat is what a peer publishes on the members topic. The wire codec
// (gossip/wire) encodes these fields; the node package signs each encoded
// beat with From's key and checks that signature on arrival, so From is
// authentic by the time Receive sees it.
//
// Beats a Membership emits stay valid after the call: their slices are
// never modified afterwards.
type Beat struct {
	Job         string   // training job; must equal Config.Job
	From        string   // sender peer ID; the beat is signed with its key
	Incarnation uint64   // sender process's incarnation: grows across restarts
	Seq         uint64   // 1, 2, 3, ... within an incarnation
	Epoch       uint64   // sender's member-set epoch, >= 1
	SetHash     uint64   // hash of the sender's view (see View.SetHash)
	Members     []string // sender's member IDs, strictly ascending, <= MaxMembers
	Addrs       []string // sender's dialable multiaddrs, <= MaxAddrs
	Kind        BeatKind // Alive, Join or Leave
}

// maxEpoch keeps epochs far from overflow: no honest run gets near 2^62
// view changes, so a larger value is a broken peer.
const maxEpoch = 1 << 62

// Reason says why a beat was rejected. Stats.Rejected is indexed by it.
type Reason uint8

// Rejection reasons.
const (
	ReasonJob       Reason = 1 + iota // another job's beat
	ReasonMalformed                   // broken limit or invariant
	ReasonReplay                      // (incarnation, seq) not newer than the last accepted
	ReasonLeft                        // sender left; not a newer incarnation
	ReasonSelf                        // our own ID: an echo, or a duplicate identity
	ReasonFull                        // new sender while the set is at MaxMembers
	numReasons
)

// NumReasons sizes arrays indexed by Reason (index 0 is unused).
const NumReasons = int(numReasons)

var reasonNames = [...]string{"", "job", "malformed", "replay", "left", "self", "full"}

// String names the reason for logs and metrics labels.
func (r Reason) String() string {
	if r > 0 && r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Rejection is a beat Receive refused.
type Rejection struct {
	From   string   // claimed sender
	Kind   BeatKind // claimed kind
	Reason Reason
	Err    error // wraps the sentinel for Reason and names what is wrong
}

// check validates a beat against the static rules: job, shape and limits.
// It does not look at the sender's history.
func (m *Membership) check(b *Beat) (Reason, error) {
	c := &m.cfg
	if b.Job != c.Job {
		return ReasonJob, fmt.Errorf("%w: beat from %.60q is for job %.60q, we run %q", ErrWrongJob, b.From, b.Job, c.Job)
	}
	malformed := func(format string, args ...any) (Reason, error) {
		return ReasonMalformed, fmt.Errorf("%w: %s beat from %.60q: "+format,
			append([]any{ErrMalformed, b.Kind, b.From}, args...)...)
	}
	switch {
	case b.From == "":
		return malformed("empty sender")
	case len(b.From) > c.MaxIDLen:
		return malformed("sender ID of %d bytes, limit %d", len(b.From), c.MaxIDLen)
	case b.From == c.Self:
		return ReasonSelf, fmt.Errorf("%w: beat from %q incarnation %d (ours %d): our own echo or a second process with this identity",
			ErrSelf, b.From, b.Incarnation, m.inc)
	case b.Kind != Alive && b.Kind != Join && b.Kind != Leave:
		return malformed("unknown kind %d", uint8(b.Kind))
	case b.Incarnation == 0:
		return malformed("incarnation 0")
	case b.Seq == 0:
		return malformed("seq 0")
	case b.Epoch == 0 || b.Epoch > maxEpoch:
		return malformed("epoch %d outside 1..2^62", b.Epoch)
	case len(b.Members) > c.MaxMembers:
		return malformed("%d members, limit %d", len(b.Members), c.MaxMembers)
	case len(b.Addrs) > c.MaxAddrs:
		return malformed("%d addresses, limit %d", len(b.Addrs), c.MaxAddrs)
	}
	for i, id := range b.Members {
		if id == "" || len(id) > c.MaxIDLen {
			return malformed("member %d is empty or longer than %d bytes", i, c.MaxIDLen)
		}
		if i > 0 && id <= b.Members[i-1] {
			return malformed("members not strictly ascending at %d (%.60q after %.60q)", i, id, b.Members[i-1])
		}
	}
	for i, a := range b.Addrs {
		if a == "" || len(a) > c.MaxAddrLen {
			return malformed("address %d is empty or longer than %d bytes", i, c.MaxAddrLen)
		}
	}
	return 0, nil
}
