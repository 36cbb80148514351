package node

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/node/membership"
	"github.com/gossiptrain/gossiptrain/node/ring"
)

// Topology says how shards are placed on peers.
type Topology string

// Topologies.
const (
	// TopologyRing spreads shards over all members by consistent hashing.
	TopologyRing Topology = "ring"
	// TopologyMaster puts every shard on one peer, the master; the others
	// are workers only. It is the parameter-server baseline.
	TopologyMaster Topology = "master"
)

// EnvelopeOverhead is the room Config.MaxMessageSize keeps for gossipsub's
// own envelope around a payload: the topic name (at most MaxTopicLen) and
// protobuf framing, with room to spare for an author, sequence number and
// signature should gossipsub's signing ever be turned back on. A payload of at most
// MaxMessageSize - EnvelopeOverhead bytes always fits (see Node.MaxPayload).
const EnvelopeOverhead = 1024

// MaxTopicLen bounds the topic names Node.Join accepts, so that
// EnvelopeOverhead always holds.
const MaxTopicLen = 512

// maxJobLen bounds a job name; it appears in topic names, the mDNS service
// name and every wire header.
const maxJobLen = 64

var jobRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Config sets up one peer. The CLI fills it from flags (cli/cmd_peer.go names
// the flag of each field); every peer of a job must agree on Job, Shards,
// VNodes, Replicas, MaxLoadPercent, Topology/Master and MaxMessageSize, and
// should use the same Heartbeat and DeadAfter.
type Config struct {
	// Job names the training job: its members topic is
	// "gossiptrain/<Job>/members", the mDNS service and DHT rendezvous are
	// derived from it (and from the swarm key), and beats of other jobs are rejected. 1-64 characters
	// from [A-Za-z0-9._-], starting with a letter or digit. Required.
	Job string
	// Listen are the multiaddrs to listen on. TCP and QUIC (quic-v1) are
	// supported; with a swarm key only TCP is used (libp2p's private
	// networks do not support QUIC) and other addresses are dropped with a
	// warning. An address beyond loopback (0.0.0.0 and :: included) needs a
	// swarm key (SwarmKey or PSK): Validate refuses it without one. Default
	// /ip4/0.0.0.0/tcp/0: every interface, TCP, a free port.
	Listen []string
	// Identity is the path of the Ed25519 key file that fixes the peer ID;
	// it is created (0600, directory 0700) when missing. Empty means a new
	// random identity every run (logged as a warning), unless Key is set.
	Identity string
	// Key, when not nil, is the identity to use instead of Identity (tests
	// and embedders). It must be an Ed25519 key.
	Key crypto.PrivKey
	// Peers are bootstrap peers: full multiaddrs ending in /p2p/<peer ID>.
	// They are dialled at start and redialled with backoff for as long as
	// the node runs.
	Peers []string
	// PeersFile names a file with more bootstrap addresses, one per line;
	// blank lines and lines starting with '#' are ignored.
	PeersFile string
	// MDNS turns on multicast DNS discovery on the LAN. It needs a
	// multicast-capable interface shared with the other peers (the loopback
	// interface usually has no MULTICAST flag).
	MDNS bool
	// DHT turns on a Kademlia DHT (go-libp2p-kad-dht, private protocol
	// prefix /gossiptrain) and a rendezvous on the job name, so peers that
	// only share a bootstrap peer find each other.
	DHT bool
	// SwarmKey is the path of a pre-shared key file in the
	// /key/swarm/psk/1.0.0/ format (gossiptrain keygen --swarm). With it the
	// peer talks only to peers holding the same key (libp2p's private
	// network: a connection without the key fails before any protocol
	// runs), and the mDNS service name and DHT rendezvous are derived from
	// the job and the key. Required when any Listen address is beyond
	// loopback; empty is allowed on loopback only. See docs/security.md.
	SwarmKey string
	// PSK, when not nil, is the swarm key itself, instead of the SwarmKey
	// file (embedders and tests): 32 bytes. Give one of PSK and SwarmKey.
	PSK pnet.PSK
	// PeersAllowed, when not empty, names a file of the peer IDs this peer
	// may connect to and accept connections from: one a line, '#' starts a
	// comment, blank lines are ignored. Every other peer is refused (this
	// peer itself is always allowed). The file is re-read when it changes
	// (see allow.go): peers removed from it are disconnected and refused.
	PeersAllowed string
	// NAT says how the peer deals with NATs (see nat.go): NATAuto (default)
	// finds out with AutoNAT whether it is reachable, reserves a slot on a
	// relay of the job when it is not, and upgrades relayed connections by
	// hole punching; NATPrivate and NATPublic skip the detection; NATOff
	// does none of it. NATAuto is NATOff when every Listen address is
	// loopback.
	NAT NATMode
	// Relay makes this peer a circuit relay (v2) for the peers of its job,
	// and only for them: peers that cannot reach each other directly talk
	// through it until hole punching gives them a direct connection. Run
	// it on peers every other peer can reach (a public address).
	Relay bool

	// Heartbeat is how often the peer announces itself on the members
	// topic. Default 500ms (membership.DefaultConfig): ten beats per
	// DeadAfter.
	Heartbeat time.Duration
	// DeadAfter is how long a member may stay silent before it is declared
	// dead. Default 5s. At least 2*Heartbeat.
	DeadAfter time.Duration
	// MinPeers is the member count (self included) that training waits
	// for; Node logs when it is first reached and WaitMinPeers returns.
	// Default 1.
	MinPeers int

	// VNodes is the number of ring points per member. Default 64.
	VNodes int
	// Shards is the number of virtual shards, a power of two. Default 256.
	Shards int
	// Replicas is the number of owners per shard (primary first). Default 1.
	Replicas int
	// MaxLoadPercent bounds the shards one member holds (consistent hashing
	// with bounded loads, see package ring); 0 is plain consistent hashing.
	// Default 125.
	MaxLoadPercent int
	// Topology is TopologyRing (default) or TopologyMaster.
	Topology Topology
	// Master is the peer ID that holds every shard with TopologyMaster.
	// Empty means the peer ID of the first bootstrap peer (Peers, then
	// PeersFile), or this peer when there is none: start the master first
	// and point the workers at it.
	Master string

	// Spec is what every peer of the job must agree on beyond the fields
	// above: the model's kind, dimension and classes, the mode, the
	// optimizer…, as flag name and value pairs (the CLI fills it from the
	// model and flags; see Spec). The hello carries it with the ring's
	// settings (Shards, Replicas, VNodes, Topology and the master), and a
	// peer of the job that differs in any setting both name is refused on
	// both sides, every difference logged. Empty: only the ring and the
	// message size are compared (gossiptrain peer).
	Spec Spec

	// StatusAddr is the host:port of the HTTP status server (GET /status);
	// port 0 picks a free port, logged at start. Empty turns it off.
	StatusAddr string

	// ConnLimit is the number of connections libp2p's resource manager
	// allows from one IPv4 address (one IPv6 /56). go-libp2p's default is 8,
	// which is too few when many peers sit behind one NAT address; the
	// inbound connection rate allowed per address and the system-wide
	// connection limits scale with it (ConnLimit/8 times the defaults when
	// above 8). Loopback is never limited. Default 8.
	ConnLimit int
	// MaxMessageSize is gossipsub's maximum message size in bytes. Every peer
	// of a job must use the same value (a hello exchanged on connect checks
	// it and refuses peers that differ): a message over a receiver's limit
	// is dropped with no error. Payloads may use MaxMessageSize -
	// EnvelopeOverhead bytes. Default 1 MiB + EnvelopeOverhead, so that a
	// gossip/wire message of its default 1 MiB limit fits.
	MaxMessageSize int
	// OutboundQueueSize is gossipsub's per-peer queue of outgoing RPCs.
	// Publish never blocks: when the queue is full messages are dropped
	// (counted as DroppedRPC). Default 1024, for training traffic (pubsub's
	// own default is 32).
	OutboundQueueSize int
	// ValidateQueueSize is gossipsub's queue of incoming messages waiting
	// for validation; overflow is dropped (counted). Default 1024 (pubsub's
	// default is 32).
	ValidateQueueSize int
	// GossipSub are the router parameters; DefaultConfig uses
	// pubsub.DefaultGossipSubParams(). Tests shorten HeartbeatInterval and
	// HeartbeatInitialDelay so meshes form faster.
	GossipSub pubsub.GossipSubParams

	// DialTimeout bounds one connection attempt. Default 5s.
	DialTimeout time.Duration
	// RedialMin and RedialMax bound the exponential backoff between attempts
	// to reconnect to a bootstrap peer or a member: the first retry comes
	// after RedialMin, each failure doubles the wait (with ±25% jitter) up
	// to RedialMax. Defaults 250ms and 10s.
	RedialMin, RedialMax time.Duration
	// LeaveTimeout bounds how long Close waits for the other members to
	// acknowledge this peer's Leave (their next beat no longer lists it)
	// before shutting down anyway. Default 3s.
	LeaveTimeout time.Duration
	// BlockFor is how long a peer refused at the hello (different
	// settings) or disconnected for a bad gossipsub score stays
	// blocked. Default 1m.
	BlockFor time.Duration
	// LibLogLevel is the least severe level of gossipsub's own log records
	// passed to the node's logger (RouteLibp2pLogs does the same for the
	// rest of go-libp2p). Default warn: libp2p is chatty below it.
	LibLogLevel zerolog.Level
}

// DefaultConfig returns the defaults; the caller sets Job (and usually
// Identity, Peers or MDNS).
func DefaultConfig() Config {
	mc := membership.DefaultConfig()
	rc := ring.DefaultConfig()
	return Config{
		// TCP only: libp2p's private networks (the swarm key) support
		// nothing else.
		Listen:            []string{"/ip4/0.0.0.0/tcp/0"},
		Heartbeat:         mc.Heartbeat, // 500ms: ten beats per DeadAfter
		DeadAfter:         mc.DeadAfter, // 5s: survives GC pauses and lost beats
		MinPeers:          1,
		VNodes:            rc.VNodes,         // 64
		Shards:            rc.Shards,         // 256
		Replicas:          rc.Replicas,       // 1
		MaxLoadPercent:    rc.MaxLoadPercent, // 125
		Topology:          TopologyRing,
		NAT:               NATAuto,                  // off by itself on loopback-only listens
		ConnLimit:         8,                        // go-libp2p's own default per IP
		MaxMessageSize:    1<<20 + EnvelopeOverhead, // a 1 MiB wire message plus envelope
		OutboundQueueSize: 1024,                     // training bursts; pubsub's 32 drops them
		ValidateQueueSize: 1024,
		GossipSub:         pubsub.DefaultGossipSubParams(),
		DialTimeout:       5 * time.Second,
		RedialMin:         250 * time.Millisecond, // a restarted peer is back within a beat
		RedialMax:         10 * time.Second,       // bounded: a peer back after a long outage is found within 10s
		LeaveTimeout:      3 * time.Second,        // a few beats' worth
		BlockFor:          time.Minute,
		LibLogLevel:       zerolog.WarnLevel,
	}
}

// FieldError is a Config field with a bad value. It wraps ErrConfig; the CLI
// maps Field to the flag that sets it.
type FieldError struct {
	Field string // the Config field, e.g. "DeadAfter"
	Msg   string // what is wrong, naming the value
}

// Error implements error.
func (e *FieldError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrConfig, e.Field, e.Msg)
}

// Unwrap returns ErrConfig.
func (e *FieldError) Unwrap() error { return ErrConfig }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate reports the first field that is out of range as a *FieldError.
func (c Config) Validate() error {
	switch {
	case c.Job == "":
		return fieldErr("Job", "required: name the training job (peers of other jobs are ignored)")
	case len(c.Job) > maxJobLen || !jobRe.MatchString(c.Job):
		return fieldErr("Job", "%q: want 1-%d characters from A-Z a-z 0-9 . _ -, starting with a letter or digit", c.Job, maxJobLen)
	case len(c.Listen) == 0:
		return fieldErr("Listen", "no listen address: give at least one multiaddr such as /ip4/0.0.0.0/tcp/4001 (with a swarm key) or /ip4/127.0.0.1/tcp/0")
	}
	for _, s := range c.Listen {
		if _, err := ma.NewMultiaddr(s); err != nil {
			return fieldErr("Listen", "%q is not a multiaddr: %v", s, err)
		}
	}
	for _, s := range c.Peers {
		if _, err := ParsePeerAddr(s); err != nil {
			return fieldErr("Peers", "%v", err)
		}
	}
	if err := c.Spec.Validate(); err != nil {
		return fieldErr("Spec", "%v", err)
	}
	if len(c.Spec) > maxSpecItems-ringSpecItems {
		return fieldErr("Spec", "%d settings, at most %d", len(c.Spec), maxSpecItems-ringSpecItems)
	}
	if c.PSK != nil && len(c.PSK) != 32 {
		return fieldErr("PSK", "%d bytes: a swarm key is 32 bytes", len(c.PSK))
	}
	if c.PSK != nil && c.SwarmKey != "" {
		return fieldErr("SwarmKey", "%s given with PSK: give one of them", c.SwarmKey)
	}
	if c.Key != nil && c.Key.Type() != crypto.Ed25519 {
		return fieldErr("Key", "a %v key: gossiptrain identities are Ed25519", c.Key.Type())
	}
	switch {
	case c.Heartbeat <= 0:
		return fieldErr("Heartbeat", "%v: want > 0", c.Heartbeat)
	case c.DeadAfter < 2*c.Heartbeat:
		return fieldErr("DeadAfter", "%v: want at least twice the heartbeat (%v)", c.DeadAfter, 2*c.Heartbeat)
	case c.MinPeers < 1 || c.MinPeers > membership.DefaultConfig().MaxMembers:
		return fieldErr("MinPeers", "%d: want 1..%d", c.MinPeers, membership.DefaultConfig().MaxMembers)
	}
	rc := c.ringConfig()
	if err := rc.Validate(); err != nil {
		var field string
		switch {
		case rc.VNodes < 1 || rc.VNodes > 1<<16:
			field = "VNodes"
		case rc.Shards < 1 || rc.Shards&(rc.Shards-1) != 0 || rc.Shards > 1<<20:
			field = "Shards"
		case rc.Replicas < 1:
			field = "Replicas"
		default:
			field = "MaxLoadPercent"
		}
		return fieldErr(field, "%v", strings.TrimPrefix(err.Error(), ring.ErrConfig.Error()+": "))
	}
	switch c.NAT {
	case NATAuto, NATPrivate, NATPublic, NATOff:
	default:
		return fieldErr("NAT", "%q: want auto, private, public or off", c.NAT)
	}
	switch c.Topology {
	case TopologyRing, TopologyMaster:
	default:
		return fieldErr("Topology", "%q: want ring or master", c.Topology)
	}
	if c.Master != "" {
		if _, err := peer.Decode(c.Master); err != nil {
			return fieldErr("Master", "%q is not a peer ID: %v", c.Master, err)
		}
	}
	if c.StatusAddr != "" {
		if _, _, err := net.SplitHostPort(c.StatusAddr); err != nil {
			return fieldErr("StatusAddr", "%q: want host:port, e.g. 127.0.0.1:0 (%v)", c.StatusAddr, err)
		}
	}
	switch {
	case c.ConnLimit < 1 || c.ConnLimit > 1<<16:
		return fieldErr("ConnLimit", "%d: want 1..65536", c.ConnLimit)
	case c.MaxMessageSize < 4096+EnvelopeOverhead || c.MaxMessageSize > 256<<20:
		return fieldErr("MaxMessageSize", "%d: want %d..%d bytes", c.MaxMessageSize, 4096+EnvelopeOverhead, 256<<20)
	case c.OutboundQueueSize < 1:
		return fieldErr("OutboundQueueSize", "%d: want at least 1", c.OutboundQueueSize)
	case c.ValidateQueueSize < 1:
		return fieldErr("ValidateQueueSize", "%d: want at least 1", c.ValidateQueueSize)
	case c.GossipSub.HeartbeatInterval <= 0:
		return fieldErr("GossipSub", "HeartbeatInterval %v: want > 0 (start from pubsub.DefaultGossipSubParams())", c.GossipSub.HeartbeatInterval)
	case c.GossipSub.Dlo > c.GossipSub.D || c.GossipSub.D > c.GossipSub.Dhi || c.GossipSub.Dlo < 1:
		return fieldErr("GossipSub", "D %d, Dlo %d, Dhi %d: want 1 <= Dlo <= D <= Dhi", c.GossipSub.D, c.GossipSub.Dlo, c.GossipSub.Dhi)
	case c.DialTimeout <= 0:
		return fieldErr("DialTimeout", "%v: want > 0", c.DialTimeout)
	case c.RedialMin <= 0:
		return fieldErr("RedialMin", "%v: want > 0", c.RedialMin)
	case c.RedialMax < c.RedialMin:
		return fieldErr("RedialMax", "%v: want at least RedialMin (%v)", c.RedialMax, c.RedialMin)
	case c.LeaveTimeout < 0:
		return fieldErr("LeaveTimeout", "%v: want >= 0", c.LeaveTimeout)
	case c.BlockFor <= 0:
		return fieldErr("BlockFor", "%v: want > 0", c.BlockFor)
	}
	// Last, so that a caller that accepts a missing key (a check of flags
	// for a run that will not listen) knows every other field is valid.
	if c.SwarmKey == "" && c.PSK == nil {
		if a := beyondLoopback(c.Listen); a != "" {
			return fieldErr("SwarmKey", "required: listen address %s is reachable beyond this machine, and without a swarm key "+
				"any host that reaches it can join the job. Make a key with 'gossiptrain keygen --swarm job.key', copy it to every "+
				"peer (mode 0600) and pass --swarm-key job.key; or listen on loopback only (--listen /ip4/127.0.0.1/tcp/0)", a)
		}
	}
	return nil
}

// beyondLoopback returns the first of addrs that is not a loopback
// address (0.0.0.0 and :: listen on every interface, so they count), or "".
// An address that names no IP (a DNS name) counts as beyond loopback.
// TestValidateSwarmKeyBeyondLoopback pins it.
func beyondLoopback(addrs []string) string {
	for _, s := range addrs {
		m, err := ma.NewMultiaddr(s)
		if err != nil || !manet.IsIPLoopback(m) {
			return s
		}
	}
	return ""
}

// ringConfig is the ring configuration the fields describe.
func (c Config) ringConfig() ring.Config {
	rc := ring.DefaultConfig()
	rc.VNodes, rc.Shards, rc.Replicas, rc.MaxLoadPercent = c.VNodes, c.Shards, c.Replicas, c.MaxLoadPercent
	return rc
}

// MembersTopic is the pubsub topic carrying a job's membership beats.
func MembersTopic(job string) string { return "gossiptrain/" + job + "/members" }

// ParsePeerAddr parses a bootstrap address: a multiaddr that ends in
// /p2p/<peer ID>. The error names the address and what is missing.
func ParsePeerAddr(s string) (peer.AddrInfo, error) {
	s = strings.TrimSpace(s)
	m, err := ma.NewMultiaddr(s)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("%w: %q is not a multiaddr: %v", ErrPeerAddr, s, err)
	}
	ai, err := peer.AddrInfoFromP2pAddr(m)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("%w: %q: want an address ending in /p2p/<peer ID>, as a peer logs at start (%v)", ErrPeerAddr, s, err)
	}
	if len(ai.Addrs) == 0 {
		return peer.AddrInfo{}, fmt.Errorf("%w: %q has a peer ID but no transport address (want e.g. /ip4/10.0.0.5/tcp/4001/p2p/%s)", ErrPeerAddr, s, ai.ID)
	}
	return *ai, nil
}

// Errors of this package; test them with errors.Is.
var (
	// ErrConfig marks an invalid Config (see FieldError).
	ErrConfig = errors.New("node: invalid config")
	// ErrIdentity marks an identity key file that cannot be used.
	ErrIdentity = errors.New("node: bad identity file")
	// ErrSwarmKey marks a swarm key file that cannot be used.
	ErrSwarmKey = errors.New("node: bad swarm key file")
	// ErrPeerAddr marks a bootstrap address that cannot be dialled.
	ErrPeerAddr = errors.New("node: bad peer address")
	// ErrExists is returned when a key file to be created already exists.
	ErrExists = errors.New("node: file exists")
	// ErrClosed is returned by methods of a closed Node.
	ErrClosed = errors.New("node: closed")
	// ErrStatus marks a failed status request (FetchStatus).
	ErrStatus = errors.New("node: status request failed")
	// ErrHello marks a malformed hello from a peer.
	ErrHello = errors.New("node: bad hello")
	// ErrIncompatible marks a peer of the same job refused at the hello
	// because its settings differ (see IncompatibleError).
	ErrIncompatible = errors.New("node: incompatible peer")
)
