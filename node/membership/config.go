package membership

import (
	"errors"
	"fmt"
	"time"
)

// Config sets up one peer's membership core. The driver fills it from flags
// and the libp2p host; every peer of a job should use the same timings.
type Config struct {
	// Self is this peer's ID (the libp2p peer ID string). Required.
	Self string
	// Job names the training job; beats of other jobs are rejected, so two
	// jobs can share a swarm. Required.
	Job string
	// Incarnation tells this process apart from earlier runs of the same
	// peer ID; it must grow across restarts. 0 means now.UnixNano() at New,
	// which grows as long as the clock does not go back between runs.
	Incarnation uint64
	// Heartbeat is how often this peer announces itself. Default 500ms:
	// ten beats fit in DeadAfter, so a few lost messages never kill a peer.
	Heartbeat time.Duration
	// DeadAfter is how long a member may stay silent before it is declared
	// dead. Default 5s: long enough for GC pauses and gossipsub's
	// multi-hop delivery, short enough that a crashed owner's shards move
	// within a few seconds. Must be at least 2*Heartbeat.
	DeadAfter time.Duration
	// MinGap is the least time between two beats of this peer. A view
	// change sends a beat at once (peers converge within one delivery
	// instead of one Heartbeat) unless the previous beat is younger than
	// MinGap; then it goes out MinGap after that one. Default 100ms; at most
	// Heartbeat.
	MinGap time.Duration
	// MinPeers is the member count (self included) at which training may
	// start; Ready.Reached reports the first time it is reached. Default 1.
	MinPeers int
	// MaxMembers bounds the member set (self included). A beat listing more
	// members is malformed; a new sender beyond it is refused. Default 4096.
	MaxMembers int
	// MaxAddrs bounds the addresses one beat may carry. Default 16.
	MaxAddrs int
	// MaxAddrLen bounds the length of one address string. Default 256.
	MaxAddrLen int
	// MaxIDLen bounds the length of a peer ID. Default 128 (libp2p
	// Ed25519 IDs are 52 characters).
	MaxIDLen int
	// Forget is how long a dead or departed peer's last (incarnation, seq)
	// is kept to reject its replayed beats. Default 10m: well beyond
	// gossipsub's 2-minute seen-message cache, which stops most replays
	// earlier. Must be at least DeadAfter.
	Forget time.Duration
	// Addrs are this peer's dialable multiaddrs, sent in every beat. The
	// driver may change them later with SetAddrs.
	Addrs []string
}

// DefaultConfig returns the defaults; the caller fills Self and Job.
func DefaultConfig() Config {
	return Config{
		Heartbeat:  500 * time.Millisecond, // 10 beats per DeadAfter
		DeadAfter:  5 * time.Second,        // survives GC pauses and lost beats
		MinGap:     100 * time.Millisecond, // at most 10 beats/s per peer on churn
		MinPeers:   1,                      // start alone unless told otherwise
		MaxMembers: 4096,                   // a beat's member list stays < 1 MB
		MaxAddrs:   16,                     // a host rarely has more listen addrs
		MaxAddrLen: 256,                    // longest sane multiaddr
		MaxIDLen:   128,                    // libp2p IDs are 52 chars
		Forget:     10 * time.Minute,       // >> gossipsub's 2m seen cache
	}
}

// Validate reports the first field that is out of range, wrapped in
// ErrConfig.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	switch {
	case c.Self == "":
		return bad("Self is empty: set it to the peer ID")
	case c.MaxIDLen < 1:
		return bad("MaxIDLen %d: want at least 1", c.MaxIDLen)
	case len(c.Self) > c.MaxIDLen:
		return bad("Self %q is longer than MaxIDLen %d", c.Self, c.MaxIDLen)
	case c.Job == "":
		return bad("Job is empty")
	case c.Heartbeat <= 0:
		return bad("Heartbeat %v: want > 0", c.Heartbeat)
	case c.DeadAfter < 2*c.Heartbeat:
		return bad("DeadAfter %v: want at least 2*Heartbeat (%v)", c.DeadAfter, 2*c.Heartbeat)
	case c.MinGap < 0 || c.MinGap > c.Heartbeat:
		return bad("MinGap %v: want 0..Heartbeat (%v)", c.MinGap, c.Heartbeat)
	case c.MaxMembers < 1:
		return bad("MaxMembers %d: want at least 1", c.MaxMembers)
	case c.MinPeers < 1 || c.MinPeers > c.MaxMembers:
		return bad("MinPeers %d: want 1..MaxMembers (%d)", c.MinPeers, c.MaxMembers)
	case c.MaxAddrs < 0:
		return bad("MaxAddrs %d: want at least 0", c.MaxAddrs)
	case c.MaxAddrLen < 1:
		return bad("MaxAddrLen %d: want at least 1", c.MaxAddrLen)
	case c.Forget < c.DeadAfter:
		return bad("Forget %v: want at least DeadAfter (%v)", c.Forget, c.DeadAfter)
	}
	if err := c.checkAddrs(c.Addrs); err != nil {
		return bad("Addrs: %v", err)
	}
	return nil
}

// checkAddrs applies the limits peers apply to our beats.
func (c Config) checkAddrs(addrs []string) error {
	if len(addrs) > c.MaxAddrs {
		return fmt.Errorf("%d addresses, limit MaxAddrs %d", len(addrs), c.MaxAddrs)
	}
	for i, a := range addrs {
		if a == "" || len(a) > c.MaxAddrLen {
			return fmt.Errorf("address %d (%.40q) is empty or longer than MaxAddrLen %d", i, a, c.MaxAddrLen)
		}
	}
	return nil
}

// Errors of this package; test them with errors.Is. Rejection.Err wraps the
// one matching its Reason.
var (
	// ErrConfig marks an invalid Config or SetAddrs argument.
	ErrConfig = errors.New("membership: invalid config")
	// ErrWrongJob: the beat belongs to another job.
	ErrWrongJob = errors.New("membership: wrong job")
	// ErrMalformed: the beat breaks a protocol limit or invariant.
	ErrMalformed = errors.New("membership: malformed beat")
	// ErrReplay: the beat's (incarnation, seq) is not newer than the last
	// accepted from its sender.
	ErrReplay = errors.New("membership: replayed or stale beat")
	// ErrLeft: the sender left and this beat is not from a newer
	// incarnation.
	ErrLeft = errors.New("membership: beat from a peer that left")
	// ErrSelf: the beat carries our own peer ID.
	ErrSelf = errors.New("membership: beat with our own ID")
	// ErrFull: the member set is at MaxMembers.
	ErrFull = errors.New("membership: member set full")
)
