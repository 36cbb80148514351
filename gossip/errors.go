package gossip

import "errors"

// Errors of the Exchange. Each is wrapped with %w together with the peer,
// stream and sequence numbers at fault; test with errors.Is.
var (
	// ErrConfig: a Config field is out of its domain (the message names it).
	ErrConfig = errors.New("gossip: invalid config")
	// ErrGone: a sender no longer has messages a receiver is missing (its
	// retransmit buffer evicted them). The stream cannot be delivered in
	// order past the hole: in sync mode that is fatal for the stream; in
	// async mode the training layer may call Exchange.Skip and go on.
	ErrGone = errors.New("gossip: missing messages are gone from the sender")
	// ErrUnpublished: the transport refused to publish a message after it
	// was sequenced and buffered for retransmission. The message is not
	// lost: its receiver repairs the gap (or Poke fetches it). Do not send
	// the same rows again: they would be applied twice.
	ErrUnpublished = errors.New("gossip: message sequenced but not published")
	// ErrRepair: a repair request failed (transport error, a malformed or
	// inconsistent reply).
	ErrRepair = errors.New("gossip: repair failed")
	// ErrClosed: the Exchange was closed.
	ErrClosed = errors.New("gossip: exchange closed")
	// ErrProtocol: an accepted message breaks the stream protocol (a part
	// out of order, parts that disagree, rows not ascending across parts):
	// the logical message is dropped.
	ErrProtocol = errors.New("gossip: stream protocol violation")
)

// GoneError is the error of a stream stalled on a hole its sender can no
// longer fill: errors.Is(err, ErrGone), and errors.As gives the sender, so
// the training layer can ask it why (a peer cut off in a partition's
// minority finds out that it was removed from the run).
type GoneError struct {
	From   string // the sender
	Stream Stream // which of its streams
	msg    string
}

func (e *GoneError) Error() string { return e.msg }

// Unwrap makes errors.Is(err, ErrGone) hold.
func (e *GoneError) Unwrap() error { return ErrGone }
