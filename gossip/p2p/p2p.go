package p2p

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// Errors, wrapped with the topic, peer or protocol at fault.
var (
	// ErrTooLarge: a payload over Config.MaxPayload, a request over
	// Config.MaxRequest or a response over Config.MaxResponse. Gossipsub
	// would drop an oversize message with no error; this transport refuses
	// it before.
	ErrTooLarge = errors.New("p2p: over the size limit")
	// ErrSubscribed: the topic already has a subscription on this transport.
	ErrSubscribed = errors.New("p2p: already subscribed")
	// ErrNotReady: no subscriber of a topic became known in time to publish.
	ErrNotReady = errors.New("p2p: no subscriber known")
	// ErrClosed: the transport was closed.
	ErrClosed = errors.New("p2p: transport closed")
	// ErrConfig: a Config field is out of its domain.
	ErrConfig = errors.New("p2p: invalid config")
)

// Config configures a Transport.
type Config struct {
	// MaxPayload is the largest payload Publish accepts: gossipsub's
	// maximum message size minus room for its envelope (with the node
	// package: node.Config.MaxMessageSize - node.EnvelopeOverhead). A
	// payload at or over gossipsub's limit would reach nobody, silently.
	MaxPayload int
	// ReadyTimeout bounds how long Publish waits for a first subscriber on
	// a topic this node does not subscribe to (a grad topic: the owner must
	// be subscribed, or gossipsub publishes to nobody), when ctx does not
	// end sooner.
	ReadyTimeout time.Duration
	// SubscriptionBuffer is gossipsub's per-subscription queue
	// (pubsub.WithBufferSize): messages beyond it, while deliver is slow,
	// are dropped by gossipsub.
	SubscriptionBuffer int
	// StreamTimeout is the deadline of a whole direct request/response
	// stream when the request's ctx has none sooner.
	StreamTimeout time.Duration
	// MaxRequest bounds a direct-stream request in bytes.
	MaxRequest int
	// MaxResponse bounds the bytes a requester reads from one response.
	MaxResponse int64
	// TopicScore, when set, is applied to every topic this transport joins
	// (pubsub.Topic.SetScoreParams), so validator rejections there lower
	// the sender's gossipsub score (P4). Requires a PubSub built with peer
	// scoring.
	TopicScore *pubsub.TopicScoreParams
	// Join, when set, joins topics instead of PubSub.Join: the node
	// package's Node.Join, which caches topics and gives each the node's
	// peer-score parameters (a topic can be joined only once per PubSub, so
	// everything on one node must join through one place). Topics it
	// returns are the caller's: Close leaves them open.
	Join func(topic string) (*pubsub.Topic, error)
	// Drops, when set, reports the messages gossipsub dropped (full
	// outbound or validation queues, slow subscribers), for Stats: the
	// node package's tracer, or a Tracer installed with
	// pubsub.WithRawTracer.
	Drops func() uint64
	// Admit, when set, decides whether a peer may open a stream of any
	// protocol this transport serves (Serve, HandleStream): the node
	// package's Node.Admitted, which admits peers that completed the
	// job's hello. A refused stream is reset before anything of it is read
	// (counted in TransportStats.Refused). Called on the stream's
	// goroutine; it may wait (for a hello under way), bounded by ctx.
	Admit func(ctx context.Context, peer string) bool
}

// DefaultConfig returns the configuration for gossipsub's default 1 MiB
// message size with the node package's envelope allowance (1 KiB).
func DefaultConfig() Config {
	return Config{
		MaxPayload:         1 << 20,          // node: 1 MiB + 1 KiB gossipsub limit - 1 KiB envelope
		ReadyTimeout:       10 * time.Second, // peers find each other within seconds on a LAN
		SubscriptionBuffer: 1024,             // a few rounds of traffic from every worker
		StreamTimeout:      30 * time.Second, // a repair moves at most tens of MiB
		MaxRequest:         64 << 10,         // a repair request is under 1 KiB
		MaxResponse:        64 << 20,         // gossip.Config.MaxReplyBytes (16 MiB) with room
	}
}

// Validate reports the first field out of its domain.
func (c Config) Validate() error {
	switch {
	case c.MaxPayload < 1:
		return fmt.Errorf("%w: Config.MaxPayload %d, want >= 1", ErrConfig, c.MaxPayload)
	case c.ReadyTimeout <= 0:
		return fmt.Errorf("%w: Config.ReadyTimeout %v, want > 0", ErrConfig, c.ReadyTimeout)
	case c.SubscriptionBuffer < 1:
		return fmt.Errorf("%w: Config.SubscriptionBuffer %d, want >= 1", ErrConfig, c.SubscriptionBuffer)
	case c.StreamTimeout <= 0:
		return fmt.Errorf("%w: Config.StreamTimeout %v, want > 0", ErrConfig, c.StreamTimeout)
	case c.MaxRequest < 1:
		return fmt.Errorf("%w: Config.MaxRequest %d, want >= 1", ErrConfig, c.MaxRequest)
	case c.MaxResponse < 1:
		return fmt.Errorf("%w: Config.MaxResponse %d, want >= 1", ErrConfig, c.MaxResponse)
	}
	return nil
}

// Transport is the libp2p gossip.Transport: gossipsub topics and direct
// streams of one host.
type Transport struct {
	h      host.Host
	ps     *pubsub.PubSub
	cfg    Config
	self   peer.ID
	selfID string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ids    sync.Map // peer.ID -> string: String() encodes base58 on every call

	mu     sync.Mutex
	topics map[string]*topicState
	protos []protocol.ID
	closed bool

	published, publishedBytes, received, receivedBytes atomic.Uint64
	rejected, requests, served, streamSent, streamRecv atomic.Uint64
	streamsOpened, streamsServed, refused              atomic.Uint64
}

var _ gossip.Transport = (*Transport)(nil)

// topicState is a joined topic. peers and changed are guarded by
// Transport.mu.
type topicState struct {
	t          *pubsub.Topic
	evh        *pubsub.TopicEventHandler
	peers      int           // subscribers known, self excluded
	changed    chan struct{} // closed and replaced when peers changes
	subscribed bool
	meshReady  bool // a publish waited for the topic's mesh once
	owned      bool // joined here (not through Config.Join): Close closes it
}

// New returns a transport over h and ps (one gossipsub router per host;
// the node package creates both). Topics are joined on first use (through
// Config.Join when set) and reused.
func New(h host.Host, ps *pubsub.PubSub, cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Transport{h: h, ps: ps, cfg: cfg, self: h.ID(), selfID: h.ID().String(), ctx: ctx, cancel: cancel,
		topics: make(map[string]*topicState)}, nil
}

// Close ends subscriptions, topic watchers and stream handlers, and closes
// the topics it joined itself (not those from Config.Join).
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	protos := t.protos
	t.mu.Unlock()
	for _, p := range protos {
		t.h.RemoveStreamHandler(p)
	}
	t.cancel()
	t.wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ts := range t.topics {
		ts.evh.Cancel()
		if ts.owned {
			ts.t.Close() // fails only while a subscription is open; ours are cancelled
		}
	}
	return nil
}

func (t *Transport) id(p peer.ID) string {
	if s, ok := t.ids.Load(p); ok {
		return s.(string)
	}
	s := p.String()
	t.ids.Store(p, s)
	return s
}

// Self implements gossip.Transport.
func (t *Transport) Self() string { return t.selfID }

// join returns the joined topic, joining it and starting its peer watcher
// the first time.
func (t *Transport) join(topic string) (*topicState, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if ts := t.topics[topic]; ts != nil {
		return ts, nil
	}
	var tp *pubsub.Topic
	var err error
	owned := t.cfg.Join == nil
	if owned {
		tp, err = t.ps.Join(topic)
	} else {
		tp, err = t.cfg.Join(topic)
	}
	if err != nil {
		return nil, fmt.Errorf("p2p: join %s: %w", topic, err)
	}
	if t.cfg.TopicScore != nil {
		if err := tp.SetScoreParams(t.cfg.TopicScore); err != nil {
			if owned {
				tp.Close()
			}
			return nil, fmt.Errorf("p2p: score parameters of %s: %w", topic, err)
		}
	}
	evh, err := tp.EventHandler()
	if err != nil {
		if owned {
			tp.Close()
		}
		return nil, fmt.Errorf("p2p: watch %s: %w", topic, err)
	}
	ts := &topicState{t: tp, evh: evh, changed: make(chan struct{}), owned: owned}
	t.topics[topic] = ts
	t.wg.Add(1)
	go t.watch(ts)
	return ts, nil
}

// watch follows a topic's subscribers. The event handler starts with a
// join event for every subscriber already known.
func (t *Transport) watch(ts *topicState) {
	defer t.wg.Done()
	for {
		ev, err := ts.evh.NextPeerEvent(t.ctx)
		if err != nil {
			return
		}
		t.mu.Lock()
		switch ev.Type {
		case pubsub.PeerJoin:
			ts.peers++
		case pubsub.PeerLeave:
			ts.peers--
		}
		close(ts.changed)
		ts.changed = make(chan struct{})
		t.mu.Unlock()
	}
}

// await blocks until ts has at least n subscribers besides self.
func (t *Transport) await(ctx context.Context, topic string, ts *topicState, n int) error {
	for {
		t.mu.Lock()
		have, ch := ts.peers, ts.changed
		t.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: %d of %d subscribers of %s: %w", ErrNotReady, have, n, topic, ctx.Err())
		case <-t.ctx.Done():
			return ErrClosed
		}
	}
}

// Publish implements gossip.Transport. A payload over MaxPayload is refused
// with ErrTooLarge. Publish makes sure the message has somewhere to go,
// waiting at most ReadyTimeout (and no longer than ctx allows; then
// ErrNotReady):
//
//   - On a topic this node does not subscribe to (a grad topic), gossipsub
//     sends to fanout peers picked from the topic's known subscribers, so
//     Publish waits for one. pubsub.WithReadiness cannot do this: for a
//     topic without a mesh it never reports ready.
//   - On a topic it subscribes to (params), gossipsub v0.17 sends only to
//     the topic's mesh (flood publishing is off by default), which forms at
//     the first heartbeat after peers subscribe; a message published before
//     reaches nobody. So the first publish on such a topic with known
//     subscribers waits for a mesh peer (pubsub.WithReadiness); a peer alone
//     on the topic publishes at once.
//
// msg is copied: gossipsub keeps the slice it is given.
func (t *Transport) Publish(ctx context.Context, topic string, msg []byte) error {
	if len(msg) > t.cfg.MaxPayload {
		return fmt.Errorf("%w: %d-byte payload on %s, limit %d (gossipsub would drop it silently)", ErrTooLarge, len(msg), topic, t.cfg.MaxPayload)
	}
	ts, err := t.join(topic)
	if err != nil {
		return err
	}
	t.mu.Lock()
	subscribed, peers, meshReady := ts.subscribed, ts.peers, ts.meshReady
	t.mu.Unlock()
	var opts []pubsub.PubOpt
	pctx := ctx
	switch {
	case !subscribed:
		wait, cancel := context.WithTimeout(ctx, t.cfg.ReadyTimeout)
		err := t.await(wait, topic, ts, 1)
		cancel()
		if err != nil {
			return err
		}
	case peers > 0 && !meshReady:
		opts = append(opts, pubsub.WithReadiness(pubsub.MinTopicSize(1)))
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, t.cfg.ReadyTimeout)
		defer cancel()
	}
	if err := ts.t.Publish(pctx, append([]byte(nil), msg...), opts...); err != nil {
		if len(opts) > 0 && ctx.Err() == nil {
			return fmt.Errorf("%w: no mesh peer on %s within %v: %w", ErrNotReady, topic, t.cfg.ReadyTimeout, err)
		}
		return fmt.Errorf("p2p: publish on %s: %w", topic, err)
	}
	if len(opts) > 0 {
		t.mu.Lock()
		ts.meshReady = true
		t.mu.Unlock()
	}
	t.published.Add(1)
	t.publishedBytes.Add(uint64(len(msg)))
	return nil
}

// authorOf returns who sent m: its signer when it is signed (gossipsub has
// verified the signature by the time a validator runs), else the neighbour
// it came from, whose identity the connection's handshake proved: the
// author of a message sent straight from it, the relay of a copy gossiped
// by a third peer. This node's own publishes have ReceivedFrom = itself.
func authorOf(m *pubsub.Message) peer.ID {
	if m.Signature != nil {
		return peer.ID(m.From)
	}
	return m.ReceivedFrom
}

// Subscribe implements gossip.Transport. validate runs as the topic's
// gossipsub validator (ValidationReject on error, which costs the sender
// peer score when Config.TopicScore is set) with from = the message's
// author (see authorOf), not a neighbour that relayed it. This node's own
// messages are accepted by the validator unexamined (gossipsub validates
// local publishes too) and skipped at delivery, so deliver never sees them.
func (t *Transport) Subscribe(topic string, validate func(from string, msg []byte) (any, error), deliver func(from string, msg []byte, v any)) (func(), error) {
	ts, err := t.join(topic)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if ts.subscribed {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrSubscribed, topic)
	}
	ts.subscribed = true
	t.mu.Unlock()
	val := func(_ context.Context, _ peer.ID, m *pubsub.Message) pubsub.ValidationResult {
		author := authorOf(m)
		if author == t.self {
			return pubsub.ValidationAccept
		}
		v, err := validate(t.id(author), m.Data)
		if err != nil {
			t.rejected.Add(1)
			return pubsub.ValidationReject
		}
		m.ValidatorData = v // handed to deliver with the message
		return pubsub.ValidationAccept
	}
	unsubscribe := func() {
		t.mu.Lock()
		ts.subscribed = false
		t.mu.Unlock()
	}
	if err := t.ps.RegisterTopicValidator(topic, val); err != nil {
		unsubscribe()
		return nil, fmt.Errorf("p2p: validator for %s: %w", topic, err)
	}
	sub, err := ts.t.Subscribe(pubsub.WithBufferSize(t.cfg.SubscriptionBuffer))
	if err != nil {
		t.ps.UnregisterTopicValidator(topic)
		unsubscribe()
		return nil, fmt.Errorf("p2p: subscribe to %s: %w", topic, err)
	}
	ctx, stop := context.WithCancel(t.ctx)
	done := make(chan struct{})
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer close(done)
		defer sub.Cancel()
		for {
			m, err := sub.Next(ctx)
			if err != nil {
				return
			}
			author := authorOf(m)
			if author == t.self {
				continue
			}
			t.received.Add(1)
			t.receivedBytes.Add(uint64(len(m.Data)))
			deliver(t.id(author), m.Data, m.ValidatorData)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			stop()
			<-done
			t.ps.UnregisterTopicValidator(topic)
			unsubscribe()
		})
	}, nil
}

// Ready implements gossip.Transport.
func (t *Transport) Ready(ctx context.Context, topic string, n int) error {
	ts, err := t.join(topic)
	if err != nil {
		return err
	}
	return t.await(ctx, topic, ts, n)
}

// Serve implements gossip.Transport. A request is one frame (uvarint
// length, bytes) of at most MaxRequest bytes; the response is whatever h
// writes, buffered, and the stream's write side is closed after it. An
// error from h resets the stream. The whole exchange has StreamTimeout.
func (t *Transport) Serve(proto string, h func(ctx context.Context, from string, req []byte, w io.Writer) error) {
	pid := protocol.ID(proto)
	t.mu.Lock()
	t.protos = append(t.protos, pid)
	t.mu.Unlock()
	t.h.SetStreamHandler(pid, func(s network.Stream) {
		ctx, cancel := context.WithTimeout(t.ctx, t.cfg.StreamTimeout)
		defer cancel()
		if !t.admit(ctx, s) {
			return
		}
		t.served.Add(1)
		stop := context.AfterFunc(ctx, func() { s.Reset() })
		defer stop()
		if err := s.SetDeadline(time.Now().Add(t.cfg.StreamTimeout)); err != nil {
			s.Reset()
			return
		}
		req, err := wire.ReadFrame(bufio.NewReader(&countReader{r: s, n: &t.streamRecv}), nil, t.cfg.MaxRequest)
		if err != nil {
			s.Reset()
			return
		}
		bw := bufio.NewWriterSize(&countWriter{w: s, n: &t.streamSent}, 64<<10)
		if err := h(ctx, t.id(s.Conn().RemotePeer()), req, bw); err != nil {
			s.Reset()
			return
		}
		if err := bw.Flush(); err != nil {
			s.Reset()
			return
		}
		s.Close()
	})
}

// Request implements gossip.Transport. The stream's deadline is ctx's, or
// StreamTimeout from now if sooner; cancelling ctx resets the stream. The
// response errors with ErrTooLarge past MaxResponse bytes.
func (t *Transport) Request(ctx context.Context, peerID string, proto string, req []byte) (io.ReadCloser, error) {
	if len(req) > t.cfg.MaxRequest {
		return nil, fmt.Errorf("%w: %d-byte request to %s, limit %d", ErrTooLarge, len(req), peerID, t.cfg.MaxRequest)
	}
	p, err := peer.Decode(peerID)
	if err != nil {
		return nil, fmt.Errorf("p2p: request %s: peer %q: %w", proto, peerID, err)
	}
	s, err := t.h.NewStream(ctx, p, protocol.ID(proto))
	if err != nil {
		return nil, fmt.Errorf("p2p: request %s to %s: %w", proto, peerID, err)
	}
	t.requests.Add(1)
	dl := time.Now().Add(t.cfg.StreamTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	frame := wire.AppendFrame(nil, req)
	if err := s.SetDeadline(dl); err != nil {
		stop()
		s.Reset()
		return nil, err
	}
	if _, err := s.Write(frame); err != nil {
		stop()
		s.Reset()
		return nil, fmt.Errorf("p2p: request %s to %s: %w", proto, peerID, err)
	}
	t.streamSent.Add(uint64(len(frame)))
	if err := s.CloseWrite(); err != nil {
		stop()
		s.Reset()
		return nil, fmt.Errorf("p2p: request %s to %s: %w", proto, peerID, err)
	}
	return &response{s: s, stop: stop, left: t.cfg.MaxResponse, max: t.cfg.MaxResponse, n: &t.streamRecv}, nil
}

type response struct {
	s    network.Stream
	stop func() bool
	left int64 // bytes still allowed
	max  int64
	n    *atomic.Uint64
}

func (r *response) Read(p []byte) (int, error) {
	if r.left <= 0 {
		// One more byte means the response is over the limit.
		var one [1]byte
		if n, _ := r.s.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("%w: response over %d bytes", ErrTooLarge, r.max)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.s.Read(p)
	r.left -= int64(n)
	r.n.Add(uint64(n))
	return n, err
}

func (r *response) Close() error {
	r.stop()
	return r.s.Close()
}

type countReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

type countWriter struct {
	w io.Writer
	n *atomic.Uint64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(uint64(n))
	return n, err
}

// streamChunk is the most OpenStream's writer hands libp2p in one call:
// each chunk gets a fresh write deadline, so StreamTimeout bounds a stall
// (no progress), not the time a 64 MiB write takes.
const streamChunk = 1 << 20

// OpenStream implements gossip.Transport with a libp2p stream (dialling
// the peer if it is not connected). A write that makes no progress for
// StreamTimeout fails (the receiver stopped reading or the connection is
// gone) and resets the stream.
func (t *Transport) OpenStream(ctx context.Context, peerID, proto string) (io.WriteCloser, error) {
	p, err := peer.Decode(peerID)
	if err != nil {
		return nil, fmt.Errorf("p2p: open %s: peer %q: %w", proto, peerID, err)
	}
	s, err := t.h.NewStream(ctx, p, protocol.ID(proto))
	if err != nil {
		return nil, fmt.Errorf("p2p: open %s to %s: %w", proto, peerID, err)
	}
	t.streamsOpened.Add(1)
	return &outStream{s: s, timeout: t.cfg.StreamTimeout, n: &t.streamSent}, nil
}

// outStream is OpenStream's write side.
type outStream struct {
	s       network.Stream
	timeout time.Duration
	n       *atomic.Uint64
	abort   atomic.Bool // a write failed or is under way: Close resets
}

func (o *outStream) Write(p []byte) (int, error) {
	o.abort.Store(true)
	done := 0
	for done < len(p) {
		k := min(len(p)-done, streamChunk)
		if err := o.s.SetWriteDeadline(time.Now().Add(o.timeout)); err != nil {
			return done, err
		}
		w, err := o.s.Write(p[done : done+k])
		done += w
		o.n.Add(uint64(w))
		if err != nil {
			return done, err
		}
	}
	o.abort.Store(false)
	return done, nil
}

// Close closes the stream (the receiver reads the rest, then io.EOF), or
// resets it when a write failed or is blocked.
func (o *outStream) Close() error {
	if o.abort.Load() {
		return o.s.Reset()
	}
	return o.s.Close()
}

// HandleStream implements gossip.Transport: from is the connection's
// remote peer, whose identity the security handshake proved.
func (t *Transport) HandleStream(proto string, h func(from string, r io.ReadCloser)) (cancel func()) {
	pid := protocol.ID(proto)
	t.mu.Lock()
	t.protos = append(t.protos, pid)
	t.mu.Unlock()
	t.h.SetStreamHandler(pid, func(s network.Stream) {
		ctx, cancel := context.WithTimeout(t.ctx, t.cfg.StreamTimeout)
		ok := t.admit(ctx, s)
		cancel()
		if !ok {
			return
		}
		t.streamsServed.Add(1)
		h(t.id(s.Conn().RemotePeer()), &inStream{s: s, n: &t.streamRecv})
		s.Close()
	})
	var once sync.Once
	return func() { once.Do(func() { t.h.RemoveStreamHandler(pid) }) }
}

// inStream is HandleStream's read side.
type inStream struct {
	s network.Stream
	n *atomic.Uint64
}

func (r *inStream) Read(p []byte) (int, error) {
	k, err := r.s.Read(p)
	r.n.Add(uint64(k))
	return k, err
}

// Close aborts the stream: the sender's writes fail.
func (r *inStream) Close() error { return r.s.Reset() }

// admit applies Config.Admit to a new incoming stream, resetting it when
// refused.
func (t *Transport) admit(ctx context.Context, s network.Stream) bool {
	if t.cfg.Admit == nil || t.cfg.Admit(ctx, t.id(s.Conn().RemotePeer())) {
		return true
	}
	t.refused.Add(1)
	s.Reset()
	return false
}

// Stats implements gossip.Transport. Dropped comes from Config.Drops.
func (t *Transport) Stats() gossip.TransportStats {
	s := gossip.TransportStats{
		Published: t.published.Load(), PublishedBytes: t.publishedBytes.Load(),
		Received: t.received.Load(), ReceivedBytes: t.receivedBytes.Load(),
		Rejected: t.rejected.Load(), Requests: t.requests.Load(), Served: t.served.Load(),
		StreamSent: t.streamSent.Load(), StreamRecv: t.streamRecv.Load(),
		StreamsOpened: t.streamsOpened.Load(), StreamsServed: t.streamsServed.Load(),
		Refused: t.refused.Load(),
	}
	if t.cfg.Drops != nil {
		s.Dropped = t.cfg.Drops()
	}
	return s
}
