package gossip

import "errors"

// Errors of the package. Each is wrapped with %w together with what is at
// fault; test with errors.Is.
var (
	// ErrConfig: a configuration field is out of its domain (the message
	// names it).
	ErrConfig = errors.New("gossip: invalid config")
	// ErrProtocol: a peer broke the core link's framing (a part out of
	// order, parts that disagree, a frame over the bound): its stream is
	// reset.
	ErrProtocol = errors.New("gossip: stream protocol violation")
)
