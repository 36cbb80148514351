package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/metrics"
	"github.com/gossiptrain/gossiptrain/node/membership"
	"github.com/gossiptrain/gossiptrain/node/ring"
	"github.com/gossiptrain/gossiptrain/peerlog"
)

// memberTag protects member connections from the connection manager's
// trimming.
const memberTag = "gossiptrain-member"

// helloTimeout bounds one hello exchange.
const helloTimeout = 10 * time.Second

// Node is one gossiptrain peer: a libp2p host with its gossipsub router,
// discovery, the membership driver and the status server. New starts it;
// Close (or Leave then Close) stops it. All methods are safe for concurrent
// use.
type Node struct {
	cfg   Config
	log   zerolog.Logger
	key   crypto.PrivKey
	self  peer.ID
	start time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	host   host.Host
	bw     *bandwidth // bytes on every libp2p stream
	nat    *natState  // relays, AutoNAT, hole punching; connection kinds
	ps     *pubsub.PubSub
	tr     *tracer
	gater  *gater
	dialer *dialer
	mdns   mdns.Service
	kad    *dht.IpfsDHT
	boot   []peer.AddrInfo
	master string

	topicsMu sync.Mutex
	topics   map[string]*pubsub.Topic

	members *pubsub.Topic
	sub     *pubsub.Subscription
	val     *beatValidator

	// driver plumbing
	beats      chan *beatBuf
	addrUpd    chan []string
	leaveReq   chan chan struct{}
	outbox     chan []byte
	driverDone chan struct{}
	reachedCh  chan struct{}

	mu        sync.RWMutex // guards st and subs
	st        State
	stats     membership.Stats
	subs      map[*subscriber]struct{}
	beatAddrs []string

	helloMu sync.Mutex
	hellos  map[peer.ID]bool // hello started with a connected peer
	helloOK map[peer.ID]bool // hello completed and compatible
	// helloOther: hello completed, of another job (never admitted)
	helloOther map[peer.ID]bool
	ours       hello // what this peer says in its hello
	diag       *diag // what Diagnose reports

	statusSrv  *http.Server
	statusAddr string
	dash       *metrics.Dashboard // the status server's dashboard (status.go)

	refused, scoreKicks, localDrops atomic.Uint64
	penalties                       *penalties // rejected direct-stream pushes (Penalize)
	closeOnce                       sync.Once
	closeErr                        error
	leaveOnce                       sync.Once
	leaveErr                        error
}

// New starts a peer: it loads (or creates) the identity, starts the libp2p
// host and gossipsub, joins the job's members topic, starts discovery, the
// membership driver and the status server, and logs every address the peer
// can be dialled on. log receives the node's own events; libp2p's logs go
// wherever RouteLibp2pLogs sent them.
func New(cfg Config, log zerolog.Logger) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	key, err := loadKey(&cfg, log)
	if err != nil {
		return nil, err
	}
	psk, err := cfg.swarmKey()
	if err != nil {
		return nil, err
	}
	boot, err := bootstrapPeers(&cfg)
	if err != nil {
		return nil, err
	}
	self, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	n := &Node{
		cfg: cfg, log: log, key: key, self: self, start: time.Now(), boot: boot, penalties: newPenalties(),
		tr:         &tracer{},
		gater:      newGater(),
		topics:     map[string]*pubsub.Topic{},
		beats:      make(chan *beatBuf, 256),
		addrUpd:    make(chan []string, 1),
		leaveReq:   make(chan chan struct{}),
		outbox:     make(chan []byte, 64),
		driverDone: make(chan struct{}),
		reachedCh:  make(chan struct{}),
		subs:       map[*subscriber]struct{}{},
		hellos:     map[peer.ID]bool{},
		helloOK:    map[peer.ID]bool{},
		helloOther: map[peer.ID]bool{},
	}
	n.master = n.masterID()
	n.ours = n.cfg.hello(n.master)
	n.diag = newDiag(boot)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	if err := n.startNet(psk); err != nil {
		n.shutdown()
		return nil, err
	}
	return n, nil
}

// loadKey returns Config.Key, the identity file's key, or a random key.
func loadKey(cfg *Config, log zerolog.Logger) (crypto.PrivKey, error) {
	switch {
	case cfg.Key != nil:
		return cfg.Key, nil
	case cfg.Identity == "":
		log.Warn().Msg("no --identity file: this peer gets a new random peer ID on every start")
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		return k, err
	}
	k, created, err := LoadOrCreateIdentity(cfg.Identity)
	if err != nil {
		return nil, err
	}
	if created {
		log.Info().Str("file", cfg.Identity).Msg("created a new identity (keep this file: it is the peer's ID)")
	}
	return k, nil
}

// masterID is the master of TopologyMaster: Config.Master, else the first
// bootstrap peer, else this peer.
func (n *Node) masterID() string {
	switch {
	case n.cfg.Master != "":
		return n.cfg.Master
	case len(n.boot) > 0:
		return n.boot[0].ID.String()
	}
	return n.self.String()
}

// startNet brings everything up in order; on error the caller shuts down
// whatever started.
func (n *Node) startNet(psk pnet.PSK) error {
	n.bw = newBandwidth()
	n.nat = newNATState(&n.cfg, n.log)
	if err := n.loadAllow(); err != nil { // before the host: no connection goes unchecked (allow.go)
		return err
	}
	h, err := buildHost(&n.cfg, n.key, psk, n.gater, n.bw, n.log, n.nat.hostOptions()...)
	if err != nil {
		return err
	}
	n.host = h
	if err := n.nat.start(h); err != nil {
		return err
	}
	n.dialer = newDialer(h, &n.cfg, n.log) // before gossipsub: its score inspector may block peers
	n.dialer.onDial = n.dialed
	if n.nat.mode != NATOff {
		n.dialer.connect = n.dialer.connectOrRelay
	}
	libLog := slog.New(zerolog.NewSlogHandler(n.log.With().Str("component", "pubsub").Logger().Level(max(n.log.GetLevel(), n.cfg.LibLogLevel))))
	n.ps, err = newPubSub(n.ctx, h, &n.cfg, n.tr, libLog, n.inspectScores)
	if err != nil {
		return err
	}
	membersTopic := MembersTopic(n.cfg.Job)
	n.nat.setSubscribed(func(p peer.ID) bool { return slices.Contains(n.ps.ListPeers(membersTopic), p) })
	// Hello first, so that no connection goes unchecked.
	h.SetStreamHandler(HelloProtocol, n.handleHello)
	h.Network().Notify(&network.NotifyBundle{
		ConnectedF:    func(_ network.Network, c network.Conn) { n.connected(c.RemotePeer()) },
		DisconnectedF: func(_ network.Network, c network.Conn) { n.disconnected(c.RemotePeer()) },
	})

	n.val = newBeatValidator(n.self, n.cfg.Job, n.MaxPayload())
	n.val.refused = n.gater.isBlocked
	n.val.verified = n.helloDone
	sampled := n.log.Sample(&zerolog.BurstSampler{Burst: 5, Period: 10 * time.Second})
	n.val.onReject = func(from peer.ID, r RejectReason, err error) {
		ev := sampled.Warn()
		if r == RejectReplay || r == RejectUnverified { // also happen in honest clusters
			ev = sampled.Debug()
		}
		ev.Str("from", from.String()).Str("reason", r.String()).Err(err).Msg("rejected a message on the members topic")
	}
	topic := MembersTopic(n.cfg.Job)
	if err := n.ps.RegisterTopicValidator(topic, n.val.validate, pubsub.WithValidatorInline(true)); err != nil {
		return fmt.Errorf("node: members topic validator: %w", err)
	}
	if n.members, err = n.Join(topic); err != nil {
		return err
	}
	if n.sub, err = n.members.Subscribe(pubsub.WithBufferSize(256)); err != nil {
		return fmt.Errorf("node: subscribe to %s: %w", topic, err)
	}

	for _, a := range fullAddrs(h) {
		n.log.Info().Str("addr", a).Msg(peerlog.Listening)
	}
	if psk != nil {
		n.log.Info().Str("swarm_key", n.cfg.SwarmKey).Msg("private swarm: only peers with the same swarm key can connect (TCP only)")
	}

	n.wg.Go(func() { n.dialer.run(n.ctx) })
	n.wg.Go(n.watchAllow)
	for _, ai := range n.boot {
		n.dialer.add(ai, wantBootstrap)
	}
	if n.cfg.MDNS {
		if n.mdns, err = startMDNS(h, n.cfg.Job, psk, n.dialer, n.log); err != nil {
			return err
		}
		n.log.Info().Str("service", mdnsServiceName(n.cfg.Job, psk)).Msg("mDNS discovery on (needs a multicast-capable interface shared with the other peers)")
	}
	if n.cfg.DHT {
		if n.kad, err = startDHT(n.ctx, h, n.boot); err != nil {
			return err
		}
		n.wg.Go(func() { dhtLoop(n.ctx, h, n.kad, rendezvous(n.cfg.Job, psk), n.dialer, n.log) })
		n.log.Info().Str("rendezvous", rendezvous(n.cfg.Job, psk)).Msg("DHT discovery on")
	}
	m, err := membership.New(n.membershipConfig(), time.Now())
	if err != nil {
		return fmt.Errorf("node: membership: %w", err)
	}
	n.initState(m)
	if n.cfg.StatusAddr != "" { // after initState: Status reads the state
		if err := n.startStatus(); err != nil {
			return err
		}
	}
	addrSub, err := h.EventBus().Subscribe(new(event.EvtLocalAddressesUpdated))
	if err != nil {
		return fmt.Errorf("node: address events: %w", err)
	}
	n.wg.Go(func() { n.watchAddrs(addrSub) })
	n.wg.Go(n.readBeats)
	n.wg.Go(n.publishLoop)
	n.wg.Go(func() { n.drive(m) })
	return nil
}

// membershipConfig builds the membership core's configuration.
func (n *Node) membershipConfig() membership.Config {
	mc := membership.DefaultConfig()
	mc.Self, mc.Job = n.self.String(), n.cfg.Job
	mc.Heartbeat, mc.DeadAfter, mc.MinPeers = n.cfg.Heartbeat, n.cfg.DeadAfter, n.cfg.MinPeers
	mc.MinGap = min(mc.MinGap, mc.Heartbeat)
	mc.Addrs = n.announceAddrs()
	n.beatAddrs = mc.Addrs
	return mc
}

// announceAddrs are the addresses sent in beats: full /p2p/ multiaddrs,
// non-loopback ones when the host has any (a loopback address sent to
// another machine, or another network namespace, leads to the wrong host),
// else loopback; at most the membership limit.
func (n *Node) announceAddrs() []string {
	lim := membershipLimits()
	all := fullAddrs(n.host)
	var out []string
	for _, a := range all {
		if len(a) <= lim.maxAddrLen && !isLoopbackAddr(a) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		for _, a := range all {
			if len(a) <= lim.maxAddrLen {
				out = append(out, a)
			}
		}
	}
	if len(out) > lim.maxAddrs {
		out = out[:lim.maxAddrs]
	}
	return out
}

// watchAddrs tells the driver when the host's addresses change.
func (n *Node) watchAddrs(sub event.Subscription) {
	defer sub.Close()
	for {
		select {
		case <-n.ctx.Done():
			return
		case _, ok := <-sub.Out():
			if !ok {
				return
			}
			addrs := n.announceAddrs()
			n.mu.Lock()
			same := slices.Equal(addrs, n.beatAddrs)
			n.beatAddrs = addrs
			n.mu.Unlock()
			if same {
				continue
			}
			select { // latest wins
			case <-n.addrUpd:
			default:
			}
			n.addrUpd <- addrs
		}
	}
}

// Self returns this peer's ID.
func (n *Node) Self() peer.ID { return n.self }

// Host returns the libp2p host, for protocols of other layers (repair and
// model-copy streams).
func (n *Node) Host() host.Host { return n.host }

// PubSub returns the host's gossipsub router. Prefer Join and
// RegisterValidator, which reuse joined topics and set their peer-score
// parameters.
func (n *Node) PubSub() *pubsub.PubSub { return n.ps }

// Config returns the configuration the node runs with.
func (n *Node) Config() Config { return n.cfg }

// MaxPayload is the largest message payload every peer of the job accepts:
// Config.MaxMessageSize - EnvelopeOverhead. Size gossip/wire limits with it.
func (n *Node) MaxPayload() int { return n.cfg.MaxMessageSize - EnvelopeOverhead }

// Addrs returns the addresses this peer can be dialled on, as full
// multiaddrs ending in /p2p/<ID>.
func (n *Node) Addrs() []string { return fullAddrs(n.host) }

// Master returns the peer ID that holds every shard with TopologyMaster
// (Config.Master, else the first bootstrap peer, else this peer). It is
// meaningless with TopologyRing.
func (n *Node) Master() string { return n.master }

// Join returns the pubsub topic name, joining it on first use; later calls
// return the same *pubsub.Topic. Every topic gets the node's peer-score
// parameters, so messages a validator rejects lower their sender's score.
func (n *Node) Join(name string) (*pubsub.Topic, error) {
	if len(name) == 0 || len(name) > MaxTopicLen {
		return nil, fmt.Errorf("node: topic name of %d bytes: want 1..%d", len(name), MaxTopicLen)
	}
	n.topicsMu.Lock()
	defer n.topicsMu.Unlock()
	if t, ok := n.topics[name]; ok {
		return t, nil
	}
	t, err := n.ps.Join(name)
	if err != nil {
		return nil, fmt.Errorf("node: join topic %s: %w", name, err)
	}
	if err := t.SetScoreParams(TopicScoreParams()); err != nil {
		t.Close()
		return nil, fmt.Errorf("node: score parameters for %s: %w", name, err)
	}
	n.topics[name] = t
	return t, nil
}

// RegisterValidator installs v as the validator of topic (one per topic;
// call it before Join's first Subscribe so that no message slips through).
// Returning pubsub.ValidationReject drops the message and lowers the
// forwarding peer's score; a peer that keeps sending rejected messages is
// disconnected and blocked for Config.BlockFor. Return ValidationIgnore for
// messages that are useless but not proof of misbehaviour (late, duplicate).
func (n *Node) RegisterValidator(topic string, v pubsub.ValidatorEx, opts ...pubsub.ValidatorOpt) error {
	if err := n.ps.RegisterTopicValidator(topic, v, opts...); err != nil {
		return fmt.Errorf("node: validator for %s: %w", topic, err)
	}
	return nil
}

// Bandwidth returns the bytes this peer has received and sent on all its
// libp2p streams (gossipsub, repair, hello, DHT...) since it started: the
// traffic the application puts on the network, before transport framing
// and encryption.
func (n *Node) Bandwidth() (in, out int64) {
	s := n.bw.GetBandwidthTotals()
	return s.TotalIn, s.TotalOut
}

// LastHeard is when bytes last arrived from peer id on any stream, as
// libp2p read them (zero: never, or not a peer ID). A barrier that waits
// for a peer still sending to it is waiting on a busy link, not a loss.
func (n *Node) LastHeard(id string) time.Time {
	p, err := peer.Decode(id)
	if err != nil {
		return time.Time{}
	}
	return n.bw.lastHeard(p)
}

// PubSubCounters returns what the gossipsub tracer counted (drops,
// rejections) over all topics.
func (n *Node) PubSubCounters() PubSubCounters { return n.tr.counters() }

// WaitMinPeers blocks until the member set has reached Config.MinPeers
// (self included) once, or ctx ends, or the node closes.
func (n *Node) WaitMinPeers(ctx context.Context) error {
	select {
	case <-n.reachedCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.driverDone:
		return ErrClosed
	}
}

// connected starts the hello with a newly connected peer (once per peer
// while it stays connected).
func (n *Node) connected(p peer.ID) {
	n.helloMu.Lock()
	started := n.hellos[p]
	n.hellos[p] = true
	n.helloMu.Unlock()
	if !started {
		go n.sayHello(p)
	}
}

func (n *Node) disconnected(p peer.ID) {
	if n.host.Network().Connectedness(p) == network.Connected {
		return
	}
	n.helloMu.Lock()
	delete(n.hellos, p)
	delete(n.helloOK, p)
	delete(n.helloOther, p)
	n.helloMu.Unlock()
}

// helloDone reports whether p completed a compatible hello on its current
// connection.
func (n *Node) helloDone(p peer.ID) bool {
	n.helloMu.Lock()
	defer n.helloMu.Unlock()
	return n.helloOK[p]
}

// sayHello sends our hello to p and checks its answer. A peer that does not
// speak the protocol (another libp2p application, a DHT-only peer) is left
// alone, but its messages on the members topic are ignored.
func (n *Node) sayHello(p peer.ID) {
	ctx, cancel := context.WithTimeout(n.ctx, helloTimeout)
	defer cancel()
	s, err := n.host.NewStream(ctx, p, HelloProtocol)
	if err != nil {
		n.log.Debug().Str("peer", p.String()).Err(err).Msg("no hello from peer")
		return
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(helloTimeout))
	if _, err := s.Write(appendHello(nil, n.ours)); err != nil {
		s.Reset()
		return
	}
	// Keep our side open until the reply is read: the other side waits for
	// our close before it acts on a mismatch.
	theirs, err := readHello(s)
	if err != nil {
		s.Reset()
		n.log.Debug().Str("peer", p.String()).Err(err).Msg("bad hello reply")
		return
	}
	_ = s.Close()
	n.checkHello(p, theirs)
}

// handleHello answers a peer's hello with ours and checks it once the peer
// has read the answer (it closes its side), so that both sides learn of a
// mismatch before either disconnects.
func (n *Node) handleHello(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(helloTimeout))
	p := s.Conn().RemotePeer()
	theirs, err := readHello(s)
	if err != nil {
		s.Reset()
		n.log.Debug().Str("peer", p.String()).Err(err).Msg("bad hello")
		return
	}
	if _, err := s.Write(appendHello(nil, n.ours)); err == nil {
		_ = s.CloseWrite()
		_, _ = io.Copy(io.Discard, io.LimitReader(s, maxHello)) // until the peer closes
	}
	n.checkHello(p, theirs)
}

// checkHello acts on a peer's hello: a peer of another job is noted (and
// logged when it is a bootstrap peer: it will never be a member), a peer
// of this job whose settings differ is refused.
func (n *Node) checkHello(p peer.ID, theirs hello) {
	boot := n.diag.isBootstrap(p)
	if n.diag.helloFrom(p, theirs.Job, n.cfg.Job) {
		n.log.Warn().Str("peer", p.String()).Str("its_job", theirs.Job).Str("job", n.cfg.Job).
			Msg("a --peer is in another job: it will never be a member of this one (check --job on both)")
	} else if theirs.Job != n.cfg.Job {
		n.log.Debug().Str("peer", p.String()).Str("its_job", theirs.Job).Msg("connected to a peer of another job")
	}
	err := compatible(n.ours, theirs)
	defer n.nat.helloDone(p, err == nil && theirs.Job == n.cfg.Job)
	if err != nil {
		var ie *IncompatibleError
		if errors.As(err, &ie) {
			ie.Peer = p.String()
		}
		if !n.block(p) {
			return // refused already: each side says hello on the same connection
		}
		n.refused.Add(1)
		n.diag.refuse(p, err, time.Now())
		n.log.Error().Str("peer", p.String()).Bool("bootstrap_peer", boot).Err(err).Dur("blocked_for", n.cfg.BlockFor).
			Msg("refusing peer: its settings differ from this peer's")
		return
	}
	if n.host.Network().Connectedness(p) != network.Connected {
		return // gone meanwhile: the next connection says hello again
	}
	n.helloMu.Lock()
	if theirs.Job == n.cfg.Job {
		n.helloOK[p] = true
	} else {
		n.helloOther[p] = true // never admitted (Admitted)
	}
	n.helloMu.Unlock()
}

// Admitted reports whether peer id may use this job's training protocols
// (the core link, start probes, dashboard figures): it completed a hello
// of this job with the same settings on its current connection, which in
// a keyed job took the key to connect at all. A stream that comes while
// the hello is under way waits for it, up to helloTimeout or ctx; a peer
// blocked or gone is refused at once. Safe for concurrent use.
func (n *Node) Admitted(ctx context.Context, id string) bool {
	p, err := peer.Decode(id)
	if err != nil {
		return false
	}
	deadline := time.Now().Add(helloTimeout)
	for {
		n.helloMu.Lock()
		ok, other := n.helloOK[p], n.helloOther[p]
		n.helloMu.Unlock()
		if ok || other {
			return ok
		}
		if n.gater.isBlocked(p) || n.host.Network().Connectedness(p) != network.Connected || time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-n.ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// inspectScores is gossipsub's score inspector: it disconnects and blocks
// peers whose score fell below disconnectThreshold (they keep sending
// messages that validators reject). Called from pubsub's goroutine: the
// work happens on another.
func (n *Node) inspectScores(scores map[peer.ID]float64) {
	for p, s := range scores {
		if lowScore(s) && !n.gater.isBlocked(p) {
			n.scoreKicks.Add(1)
			n.log.Warn().Str("peer", p.String()).Float64("score", s).Dur("blocked_for", n.cfg.BlockFor).
				Msg("disconnecting peer: its gossipsub score fell below the disconnect threshold (rejected messages)")
			n.block(p)
		}
	}
}

// block disconnects p and refuses it for Config.BlockFor: connections are
// gated, its pubsub messages dropped, the dialer forgets it. It reports
// whether p was not blocked already.
func (n *Node) block(p peer.ID) bool {
	newly := n.gater.block(p, n.cfg.BlockFor)
	n.dialer.forget(p)
	go func() {
		n.ps.BlacklistPeer(p)
		_ = n.host.Network().ClosePeer(p)
	}()
	return newly
}

// Leave announces a graceful departure on the members topic and waits
// until every other member has acknowledged it (its next beat no longer
// lists this peer), or ctx ends. Beats stop; the node keeps following the
// others' beats, so the caller can finish handing off shards before Close.
// Calling it again returns the first call's result.
func (n *Node) Leave(ctx context.Context) error {
	n.leaveOnce.Do(func() { n.leaveErr = n.leave(ctx) })
	return n.leaveErr
}

func (n *Node) leave(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case n.leaveReq <- done:
	case <-n.driverDone:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-n.driverDone:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("node: leave not acknowledged by every member: %w", ctx.Err())
	}
}

// dialed is the dialer's report of a finished dial: the first failure to
// reach a bootstrap peer is logged at once with what it usually means (the
// later ones go to the diagnosis Diagnose returns).
func (n *Node) dialed(p peer.ID, err error) {
	line, first := n.diag.dialed(p, err)
	if first {
		ev := n.log.Warn().Str("peer", p.String()).Str("error", line)
		if h := dialHint(line); h != "" {
			ev = ev.Str("hint", h)
		}
		ev.Str("retry_up_to_every", n.cfg.RedialMax.String()).Msg("cannot reach a bootstrap peer (--peer); retrying with backoff")
	}
}

// Close leaves gracefully (waiting at most Config.LeaveTimeout for the
// others to acknowledge, unless Leave already ran), then stops discovery,
// the driver, the status server, gossipsub and the host. It is idempotent.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaveTimeout)
		if err := n.Leave(ctx); err != nil && !errors.Is(err, ErrClosed) {
			n.log.Warn().Err(err).Msg("leaving without every member's acknowledgement")
		} else if err == nil {
			n.log.Info().Msg("left the cluster gracefully")
		}
		cancel()
		n.closeErr = n.shutdown()
	})
	return n.closeErr
}

// CloseNow stops the node without leaving gracefully: for a peer whose
// whole job is stopping, where waiting for the others' acknowledgement
// would only wait for peers that are stopping too. The others notice after
// Config.DeadAfter, as for a crash. Close after CloseNow does nothing.
func (n *Node) CloseNow() error {
	n.closeOnce.Do(func() { n.closeErr = n.shutdown() })
	return n.closeErr
}

// shutdown stops everything New started, in reverse order.
func (n *Node) shutdown() error {
	var errs []error
	if n.statusSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		errs = append(errs, n.statusSrv.Shutdown(ctx))
		cancel()
	}
	if n.cancel != nil {
		n.cancel()
	}
	if n.mdns != nil {
		errs = append(errs, n.mdns.Close())
	}
	if n.kad != nil {
		errs = append(errs, n.kad.Close())
	}
	if n.sub != nil {
		n.sub.Cancel()
	}
	n.wg.Wait()
	n.closeSubscribers()
	if n.nat != nil {
		n.nat.close()
	}
	if n.host != nil {
		errs = append(errs, n.host.Close())
	}
	return errors.Join(errs...)
}

// isLoopbackAddr reports whether a multiaddr string is on 127.0.0.0/8 or ::1.
func isLoopbackAddr(s string) bool {
	ip, _, ok := ipOf(s)
	return ok && ip.IsLoopback()
}

// ipOf extracts the IP of "/ip4/A/..." or "/ip6/A/...".
func ipOf(s string) (net.IP, string, bool) {
	var proto, rest string
	switch {
	case len(s) > 5 && s[:5] == "/ip4/":
		proto, rest = "ip4", s[5:]
	case len(s) > 5 && s[:5] == "/ip6/":
		proto, rest = "ip6", s[5:]
	default:
		return nil, "", false
	}
	end := len(rest)
	for i := range rest {
		if rest[i] == '/' {
			end = i
			break
		}
	}
	ip := net.ParseIP(rest[:end])
	return ip, proto, ip != nil
}

// ringFor builds the ring of a member set under the configured topology.
func (n *Node) ringFor(members []string) (*ring.Ring, error) {
	if n.cfg.Topology == TopologyMaster {
		return ring.Master(n.cfg.ringConfig(), n.master), nil
	}
	return ring.New(n.cfg.ringConfig(), members)
}
