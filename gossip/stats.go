package gossip

import (
	"errors"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// Reason is why an incoming message was rejected.
type Reason uint8

// Rejection reasons. The first six are the wire decoder's sentinels.
const (
	ReasonMalformed Reason = iota // wire.ErrMalformed: garbage, truncation, bad codes
	ReasonTooLarge                // wire.ErrTooLarge: over a size limit
	ReasonVersion                 // wire.ErrVersion
	ReasonKind                    // wire.ErrKind, or a kind (or lossy params) not allowed on the topic
	ReasonNonFinite               // wire.ErrNonFinite: NaN or Inf values
	ReasonRange                   // wire.ErrRange: an index past the model's features, a bad count
	ReasonJob                     // another job's message
	ReasonSender                  // header sender differs from the authenticated sender
	ReasonWidth                   // rows of another width than the model's
	ReasonEpoch                   // Config.CheckEpoch refused the epoch
	ReasonProtocol                // a part out of order or inconsistent with its message (ErrProtocol)
	numReasons
)

var reasonNames = [numReasons]string{"malformed", "too_large", "version", "kind", "non_finite", "range", "job", "sender", "width", "epoch", "protocol"}

// String is the reason's name in reports, e.g. "non_finite".
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// reasonOf maps a wire decode error to its reason.
func reasonOf(err error) Reason {
	switch {
	case errors.Is(err, wire.ErrTooLarge):
		return ReasonTooLarge
	case errors.Is(err, wire.ErrVersion):
		return ReasonVersion
	case errors.Is(err, wire.ErrKind):
		return ReasonKind
	case errors.Is(err, wire.ErrNonFinite):
		return ReasonNonFinite
	case errors.Is(err, wire.ErrRange):
		return ReasonRange
	}
	return ReasonMalformed
}

// Rejections counts rejected incoming messages (pubsub and repaired) by
// reason.
type Rejections [numReasons]uint64

// Total is the sum over reasons.
func (r Rejections) Total() uint64 {
	var t uint64
	for _, n := range r {
		t += n
	}
	return t
}

// Map returns the nonzero counts keyed by reason name, for reports.
func (r Rejections) Map() map[string]uint64 {
	m := make(map[string]uint64)
	for i, n := range r {
		if n > 0 {
			m[Reason(i).String()] = n
		}
	}
	return m
}
