package gossip

import (
	"errors"
	"sync/atomic"

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

// Stats are an Exchange's counters since it started. Message counts are
// wire messages (parts) unless named logical.
type Stats struct {
	Sent      uint64 // parts published (loopback to self excluded)
	SentBytes uint64 // their bytes
	Recv      uint64 // parts accepted in sequence (pubsub, repair and loopback)
	RecvBytes uint64 // their bytes
	Delivered uint64 // logical messages passed to the handlers

	Repaired       uint64 // parts that arrived through a repair reply and were delivered
	Duplicates     uint64 // valid parts seen again after delivery (a repair raced the original)
	Early          uint64 // parts that arrived ahead of a gap and were held
	EarlyDropped   uint64 // early parts dropped because the early buffer was full (fetched again later)
	RepairRequests uint64 // repair requests sent (gap repairs and Pokes)
	RepairFailures uint64 // repair requests that failed (transport error, bad reply)
	Gone           uint64 // sequence numbers senders reported as no longer available
	Served         uint64 // repair requests answered
	ServedMsgs     uint64 // messages sent in repair replies
	Evicted        uint64 // messages evicted from retransmit buffers
	PublishErrors  uint64 // Publish calls that returned an error (messages kept for repair)

	Rejected  Rejections     // incoming messages rejected, by reason
	Transport TransportStats // the transport's own counters (Dropped: router drops)
}

type counters struct {
	sent, sentBytes, recv, recvBytes, delivered               atomic.Uint64
	repaired, duplicates, early, earlyDropped, repairRequests atomic.Uint64
	repairFailures, gone, served, servedMsgs, evicted         atomic.Uint64
	publishErrors                                             atomic.Uint64
	rejected                                                  [numReasons]atomic.Uint64
}

func (c *counters) snapshot() Stats {
	s := Stats{
		Sent: c.sent.Load(), SentBytes: c.sentBytes.Load(), Recv: c.recv.Load(), RecvBytes: c.recvBytes.Load(),
		Delivered: c.delivered.Load(), Repaired: c.repaired.Load(), Duplicates: c.duplicates.Load(),
		Early: c.early.Load(), EarlyDropped: c.earlyDropped.Load(), RepairRequests: c.repairRequests.Load(),
		RepairFailures: c.repairFailures.Load(), Gone: c.gone.Load(), Served: c.served.Load(),
		ServedMsgs: c.servedMsgs.Load(), Evicted: c.evicted.Load(), PublishErrors: c.publishErrors.Load(),
	}
	for i := range c.rejected {
		s.Rejected[i] = c.rejected[i].Load()
	}
	return s
}
