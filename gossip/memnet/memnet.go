package memnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gossiptrain/gossiptrain/gossip"
)

// Errors. Each is wrapped with the node, topic or protocol at fault.
var (
	// ErrTooLarge: a payload over Config.MaxPayload (gossipsub would drop
	// it silently; memnet refuses it loudly, like the p2p transport).
	ErrTooLarge = errors.New("memnet: payload over the size limit")
	// ErrUnreachable: the node or its peer is crashed, partitioned away,
	// unknown, or a DropIf rule refused the request.
	ErrUnreachable = errors.New("memnet: peer unreachable")
	// ErrNoProtocol: the peer serves no handler for the protocol.
	ErrNoProtocol = errors.New("memnet: protocol not served")
	// ErrSubscribed: the node is already subscribed to the topic.
	ErrSubscribed = errors.New("memnet: already subscribed")
	// ErrClosed: the network was closed.
	ErrClosed = errors.New("memnet: network closed")
	// ErrConfig: a Config field is out of its domain.
	ErrConfig = errors.New("memnet: invalid config")
	// ErrReset: a long-lived stream was aborted (by its receiver, a crash,
	// a partition, ResetStreams or Close).
	ErrReset = errors.New("memnet: stream reset")
)

// Config configures a Network.
type Config struct {
	// Seed seeds the random faults (drop rate, reorder), so a run with one
	// publishing goroutine drops and reorders the same messages every time.
	Seed uint64
	// QueueLength bounds each node's queue of undelivered messages; a
	// message beyond it is dropped and counted, as gossipsub drops when
	// its queues are full.
	QueueLength int
	// MaxPayload is the largest payload Publish accepts.
	MaxPayload int
	// Manual turns off the delivery goroutines: nothing is delivered until
	// Step or Flush, which deliver on the caller's goroutine in a fixed
	// order (nodes by ID). Delays are ignored. For fully deterministic
	// tests of transport users that have no goroutines of their own.
	Manual bool
}

// DefaultConfig returns seed 1, 65536 queued messages per node and a
// 1 MiB payload limit (gossipsub's default maximum message size).
func DefaultConfig() Config {
	return Config{Seed: 1, QueueLength: 1 << 16, MaxPayload: 1 << 20}
}

// Validate reports the first field out of its domain.
func (c Config) Validate() error {
	switch {
	case c.QueueLength < 1:
		return fmt.Errorf("%w: Config.QueueLength %d, want >= 1", ErrConfig, c.QueueLength)
	case c.MaxPayload < 1:
		return fmt.Errorf("%w: Config.MaxPayload %d, want >= 1", ErrConfig, c.MaxPayload)
	}
	return nil
}

// Envelope is a message in flight, as DropIf rules see it.
type Envelope struct {
	Topic string // pubsub topic; empty for a direct request
	Proto string // direct-stream protocol; empty for pubsub
	From  string // sending node
	To    string // receiving node
	Data  []byte // payload or request; read-only
}

// Network is a set of in-memory nodes and the faults between them. All
// methods are safe for concurrent use.
type Network struct {
	cfg Config
	wg  sync.WaitGroup

	mu        sync.Mutex
	rng       *rand.Rand
	nodes     map[string]*Node
	ids       []string            // sorted
	topicSubs map[string][]string // topic -> sorted subscriber IDs
	changed   chan struct{}       // closed and replaced when subscriptions or liveness change
	closed    bool

	dropRate      float64
	dropNext      int
	rules         map[int]func(Envelope) bool
	ruleSeq       int
	reorderRate   float64
	reorderWindow int
	delay         time.Duration
	group         map[string]int // partition groups; nil when healed
	crashed       map[string]bool
	streams       map[*stream]struct{} // open long-lived streams
	streamWG      sync.WaitGroup       // their handler goroutines
}

// New returns an empty network.
func New(cfg Config) (*Network, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Network{
		cfg:       cfg,
		rng:       rand.New(rand.NewPCG(cfg.Seed, 0x6d656d6e6574)),
		nodes:     make(map[string]*Node),
		topicSubs: make(map[string][]string),
		changed:   make(chan struct{}),
		rules:     make(map[int]func(Envelope) bool),
		crashed:   make(map[string]bool),
		streams:   make(map[*stream]struct{}),
	}, nil
}

// Node is one peer on the network: a gossip.Transport.
type Node struct {
	net  *Network
	id   string
	cond *sync.Cond // on net.mu: the queue changed or the network closed

	// guarded by net.mu
	queue    []queued
	head     int
	held     []held
	subs     map[string]*subscription
	handlers map[string]func(ctx context.Context, from string, req []byte, w io.Writer) error
	streamH  map[string]*streamHandler

	published, publishedBytes, received, receivedBytes   atomic.Uint64
	rejected, dropped, requests, served                  atomic.Uint64
	streamSent, streamRecv, streamsOpened, streamsServed atomic.Uint64
}

var _ gossip.Transport = (*Node)(nil)

type queued struct {
	topic, from string
	data        []byte
	at          time.Time // deliver no earlier
}

type held struct {
	q     queued
	after int // released once this many later messages are queued
}

type subscription struct {
	validate func(from string, msg []byte) (any, error)
	deliver  func(from string, msg []byte, v any)
}

// NewNode adds a node with peer ID id (it panics if id is taken: a test
// bug) and, unless Config.Manual, starts its delivery goroutine.
func (n *Network) NewNode(id string) *Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.nodes[id]; ok {
		panic(fmt.Sprintf("memnet: node %q added twice", id))
	}
	nd := &Node{net: n, id: id, subs: make(map[string]*subscription),
		handlers: make(map[string]func(context.Context, string, []byte, io.Writer) error),
		streamH:  make(map[string]*streamHandler)}
	nd.cond = sync.NewCond(&n.mu)
	n.nodes[id] = nd
	i, _ := slices.BinarySearch(n.ids, id)
	n.ids = slices.Insert(n.ids, i, id)
	if !n.cfg.Manual && !n.closed {
		n.wg.Add(1)
		go nd.run()
	}
	return nd
}

// Close stops every delivery goroutine and waits for them. Undelivered
// messages are discarded. Long-lived streams are reset, and Close waits
// for their handlers to return.
func (n *Network) Close() {
	n.mu.Lock()
	n.closed = true
	for _, nd := range n.nodes {
		nd.cond.Broadcast()
	}
	n.notify()
	n.resetStreams(func(*stream) bool { return true })
	n.mu.Unlock()
	n.wg.Wait()
	n.streamWG.Wait()
}

// notify wakes Ready waiters. Callers hold n.mu.
func (n *Network) notify() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// SetDropRate drops each pubsub message to each receiver with probability p.
func (n *Network) SetDropRate(p float64) {
	n.mu.Lock()
	n.dropRate = p
	n.mu.Unlock()
}

// DropNext drops the next k pubsub messages (counted per receiver).
func (n *Network) DropNext(k int) {
	n.mu.Lock()
	n.dropNext = k
	n.mu.Unlock()
}

// DropIf drops every message (pubsub or direct request) for which f returns
// true until remove is called; a dropped request fails with ErrUnreachable.
// f runs with the network locked: it must not call the Network.
func (n *Network) DropIf(f func(Envelope) bool) (remove func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ruleSeq++
	id := n.ruleSeq
	n.rules[id] = f
	return func() {
		n.mu.Lock()
		delete(n.rules, id)
		n.mu.Unlock()
	}
}

// SetReorder holds back each pubsub message with probability rate and
// releases it after 1..window (uniform) later messages to the same
// receiver, or as soon as the receiver has nothing else to deliver: it
// arrives late, never lost. rate 0 turns reordering off.
func (n *Network) SetReorder(rate float64, window int) {
	n.mu.Lock()
	n.reorderRate, n.reorderWindow = rate, max(window, 1)
	n.mu.Unlock()
}

// SetDelay delays every pubsub message published from now on by d.
func (n *Network) SetDelay(d time.Duration) {
	n.mu.Lock()
	n.delay = d
	n.mu.Unlock()
}

// Partition splits the network: nodes in different groups cannot reach each
// other; nodes in no group form one more group together. Messages already
// queued are still delivered.
func (n *Network) Partition(groups ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.group = make(map[string]int)
	for i, g := range groups {
		for _, id := range g {
			n.group[id] = i + 1
		}
	}
	n.resetStreams(func(s *stream) bool { return n.cut(s.from, s.to) })
	n.notify()
}

// Heal ends a partition.
func (n *Network) Heal() {
	n.mu.Lock()
	n.group = nil
	n.notify()
	n.mu.Unlock()
}

// Crash disconnects node id: its queued messages are lost, it receives and
// sends nothing, and requests to or from it fail, until Restore.
func (n *Network) Crash(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.crashed[id] = true
	if nd := n.nodes[id]; nd != nil {
		nd.dropped.Add(uint64(len(nd.queue) - nd.head + len(nd.held)))
		nd.queue, nd.head, nd.held = nd.queue[:0], 0, nil
	}
	n.resetStreams(func(s *stream) bool { return s.from == id || s.to == id })
	n.notify()
}

// Restore reconnects a crashed node (its subscriptions and handlers are
// still registered).
func (n *Network) Restore(id string) {
	n.mu.Lock()
	delete(n.crashed, id)
	n.notify()
	n.mu.Unlock()
}

// cut reports whether a and b cannot reach each other. Callers hold n.mu.
func (n *Network) cut(a, b string) bool {
	return n.crashed[a] || n.crashed[b] || n.group != nil && n.group[a] != n.group[b]
}

// ruled reports whether a DropIf rule drops e. Callers hold n.mu.
func (n *Network) ruled(e Envelope) bool {
	for _, f := range n.rules {
		if f(e) {
			return true
		}
	}
	return false
}

// Self implements gossip.Transport.
func (nd *Node) Self() string { return nd.id }

// Publish implements gossip.Transport: msg is copied once and queued for
// every subscriber of topic but the publisher, subject to the faults.
func (nd *Node) Publish(ctx context.Context, topic string, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memnet: publish on %s: %w", topic, err)
	}
	n := nd.net
	if len(msg) > n.cfg.MaxPayload {
		return fmt.Errorf("%w: %d bytes on %s, limit %d", ErrTooLarge, len(msg), topic, n.cfg.MaxPayload)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		return ErrClosed
	case n.crashed[nd.id]:
		return fmt.Errorf("%w: %s is crashed", ErrUnreachable, nd.id)
	}
	data := append([]byte(nil), msg...)
	nd.published.Add(1)
	nd.publishedBytes.Add(uint64(len(msg)))
	var at time.Time
	if n.delay > 0 {
		at = time.Now().Add(n.delay)
	}
	for _, id := range n.topicSubs[topic] {
		if id == nd.id {
			continue // never delivered to the publisher itself
		}
		to := n.nodes[id]
		if n.cut(nd.id, id) || n.drop(Envelope{Topic: topic, From: nd.id, To: id, Data: data}) {
			to.dropped.Add(1)
			continue
		}
		to.enqueue(queued{topic: topic, from: nd.id, data: data, at: at})
	}
	return nil
}

// drop applies the drop faults. Callers hold n.mu.
func (n *Network) drop(e Envelope) bool {
	if n.dropNext > 0 {
		n.dropNext--
		return true
	}
	if n.ruled(e) {
		return true
	}
	return n.dropRate > 0 && n.rng.Float64() < n.dropRate
}

// enqueue queues q, applying reordering. Callers hold net.mu.
func (nd *Node) enqueue(q queued) {
	n := nd.net
	if len(nd.queue)-nd.head+len(nd.held) >= n.cfg.QueueLength {
		nd.dropped.Add(1)
		return
	}
	if n.reorderRate > 0 && n.rng.Float64() < n.reorderRate {
		nd.held = append(nd.held, held{q: q, after: 1 + n.rng.IntN(n.reorderWindow)})
	} else {
		nd.queue = append(nd.queue, q)
		kept := nd.held[:0]
		for _, h := range nd.held {
			if h.after--; h.after <= 0 {
				nd.queue = append(nd.queue, h.q)
			} else {
				kept = append(kept, h)
			}
		}
		nd.held = kept
	}
	nd.cond.Signal()
}

// pop takes the next message, releasing held ones when nothing else is
// queued. Callers hold net.mu.
func (nd *Node) pop() (queued, bool) {
	if nd.head == len(nd.queue) {
		if len(nd.held) == 0 {
			return queued{}, false
		}
		for _, h := range nd.held {
			nd.queue = append(nd.queue, h.q)
		}
		nd.held = nd.held[:0]
	}
	q := nd.queue[nd.head]
	nd.queue[nd.head] = queued{}
	nd.head++
	if nd.head == len(nd.queue) {
		nd.queue, nd.head = nd.queue[:0], 0
	}
	return q, true
}

// run is the node's delivery goroutine: one per node, so deliveries to a
// node are sequential and in queue order.
func (nd *Node) run() {
	n := nd.net
	defer n.wg.Done()
	var timer *time.Timer
	for {
		n.mu.Lock()
		var q queued
		var ok bool
		for !n.closed {
			if q, ok = nd.pop(); ok {
				break
			}
			nd.cond.Wait()
		}
		n.mu.Unlock()
		if !ok {
			return
		}
		if wait := time.Until(q.at); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			<-timer.C // Close waits for at most one delay
		}
		nd.dispatch(q)
	}
}

// dispatch validates and delivers one message.
func (nd *Node) dispatch(q queued) {
	n := nd.net
	n.mu.Lock()
	sub := nd.subs[q.topic]
	down := n.crashed[nd.id]
	n.mu.Unlock()
	switch {
	case down:
		nd.dropped.Add(1)
		return
	case sub == nil:
		return // unsubscribed since it was queued
	}
	v, err := sub.validate(q.from, q.data)
	if err != nil {
		nd.rejected.Add(1)
		return
	}
	nd.received.Add(1)
	nd.receivedBytes.Add(uint64(len(q.data)))
	sub.deliver(q.from, q.data, v)
}

// Step delivers one queued message (Manual mode): the next one of the
// first node, by ID, that has one. It reports whether there was one.
func (n *Network) Step() bool {
	n.mu.Lock()
	for _, id := range n.ids {
		nd := n.nodes[id]
		if q, ok := nd.pop(); ok {
			n.mu.Unlock()
			nd.dispatch(q)
			return true
		}
	}
	n.mu.Unlock()
	return false
}

// Flush delivers until nothing is queued (Manual mode), one message per
// node in ID order per pass, including messages published by the handlers
// it runs, and returns how many it delivered.
func (n *Network) Flush() int {
	total := 0
	for {
		progressed := false
		n.mu.Lock()
		ids := slices.Clone(n.ids)
		n.mu.Unlock()
		for _, id := range ids {
			n.mu.Lock()
			nd := n.nodes[id]
			q, ok := nd.pop()
			n.mu.Unlock()
			if ok {
				nd.dispatch(q)
				total++
				progressed = true
			}
		}
		if !progressed {
			return total
		}
	}
}

// Subscribe implements gossip.Transport. Messages published after it
// returns are queued for this node; the publisher never receives its own.
func (nd *Node) Subscribe(topic string, validate func(from string, msg []byte) (any, error), deliver func(from string, msg []byte, v any)) (func(), error) {
	n := nd.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := nd.subs[topic]; ok {
		return nil, fmt.Errorf("%w: %s to %s", ErrSubscribed, nd.id, topic)
	}
	s := &subscription{validate: validate, deliver: deliver}
	nd.subs[topic] = s
	ids := n.topicSubs[topic]
	i, _ := slices.BinarySearch(ids, nd.id)
	n.topicSubs[topic] = slices.Insert(ids, i, nd.id)
	n.notify()
	var once sync.Once
	return func() {
		once.Do(func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if nd.subs[topic] == s {
				delete(nd.subs, topic)
				ids := n.topicSubs[topic]
				if i, ok := slices.BinarySearch(ids, nd.id); ok {
					n.topicSubs[topic] = slices.Delete(ids, i, i+1)
				}
				n.notify()
			}
		})
	}, nil
}

// Ready implements gossip.Transport: subscribers that are crashed or
// partitioned away from this node do not count.
func (nd *Node) Ready(ctx context.Context, topic string, want int) error {
	n := nd.net
	for {
		n.mu.Lock()
		have := 0
		for _, id := range n.topicSubs[topic] {
			if id != nd.id && !n.cut(nd.id, id) {
				have++
			}
		}
		ch, closed := n.changed, n.closed
		n.mu.Unlock()
		switch {
		case have >= want:
			return nil
		case closed:
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("memnet: %s waiting for %d subscribers of %s, %d reachable: %w", nd.id, want, topic, have, ctx.Err())
		}
	}
}

// Serve implements gossip.Transport.
func (nd *Node) Serve(proto string, h func(ctx context.Context, from string, req []byte, w io.Writer) error) {
	nd.net.mu.Lock()
	nd.handlers[proto] = h
	nd.net.mu.Unlock()
}

// Request implements gossip.Transport: the handler runs on its own
// goroutine and streams its response through a pipe, so a slow reader
// slows the handler as a real stream would. Requests are never dropped by
// DropRate or DropNext; DropIf rules, crashes and partitions fail them.
func (nd *Node) Request(ctx context.Context, peer string, proto string, req []byte) (io.ReadCloser, error) {
	n := nd.net
	n.mu.Lock()
	to := n.nodes[peer]
	var h func(context.Context, string, []byte, io.Writer) error
	var err error
	switch {
	case n.closed:
		err = ErrClosed
	case to == nil:
		err = fmt.Errorf("%w: no node %q", ErrUnreachable, peer)
	case n.cut(nd.id, peer):
		err = fmt.Errorf("%w: %s cannot reach %s (crash or partition)", ErrUnreachable, nd.id, peer)
	case n.ruled(Envelope{Proto: proto, From: nd.id, To: peer, Data: req}):
		err = fmt.Errorf("%w: request %s from %s to %s dropped by a rule", ErrUnreachable, proto, nd.id, peer)
	default:
		if h = to.handlers[proto]; h == nil {
			err = fmt.Errorf("%w: %s does not serve %s", ErrNoProtocol, peer, proto)
		}
	}
	n.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nd.requests.Add(1)
	to.served.Add(1)
	nd.streamSent.Add(uint64(len(req)))
	to.streamRecv.Add(uint64(len(req)))
	req = append([]byte(nil), req...)
	pr, pw := io.Pipe()
	hctx, cancel := context.WithCancel(ctx)
	go func() {
		err := h(hctx, nd.id, req, &countWriter{w: pw, a: &to.streamSent, b: &nd.streamRecv})
		pw.CloseWithError(err)
	}()
	return &response{pr: pr, cancel: cancel}, nil
}

type countWriter struct {
	w    io.Writer
	a, b *atomic.Uint64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.a.Add(uint64(n))
	c.b.Add(uint64(n))
	return n, err
}

type response struct {
	pr     *io.PipeReader
	cancel context.CancelFunc
}

func (r *response) Read(p []byte) (int, error) { return r.pr.Read(p) }

func (r *response) Close() error {
	r.cancel()
	return r.pr.Close()
}

// streamHandler is a HandleStream registration; a pointer, so that a
// cancel removes only its own.
type streamHandler struct {
	h func(from string, r io.ReadCloser)
}

// stream is a long-lived stream: a pipe from its opener to the handler of
// its receiver. Writes block until the handler reads them, as a stream
// whose receiver stops reading blocks once its window is full.
type stream struct {
	from, to string
	pr       *io.PipeReader
	pw       *io.PipeWriter
	sent     *atomic.Uint64 // the opener's StreamSent
	recv     *atomic.Uint64 // the receiver's StreamRecv
}

// reset aborts s: pending and later writes fail with ErrReset, reads
// with io.ErrClosedPipe. (Closing only the read side: a pipe whose write
// side is closed too reports io.ErrClosedPipe to writers.)
func (s *stream) reset() {
	s.pr.CloseWithError(ErrReset)
}

// resetStreams resets every open stream for which f is true. Callers hold
// n.mu.
func (n *Network) resetStreams(f func(*stream) bool) int {
	k := 0
	for s := range n.streams {
		if f(s) {
			s.reset()
			delete(n.streams, s)
			k++
		}
	}
	return k
}

// ResetStreams aborts every long-lived stream between a and b (either
// direction), as a dropped connection would, and returns how many there
// were. Both nodes stay reachable: new streams open at once.
func (n *Network) ResetStreams(a, b string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.resetStreams(func(s *stream) bool { return s.from == a && s.to == b || s.from == b && s.to == a })
}

// HandleStream implements gossip.Transport.
func (nd *Node) HandleStream(proto string, h func(from string, r io.ReadCloser)) (cancel func()) {
	sh := &streamHandler{h: h}
	n := nd.net
	n.mu.Lock()
	nd.streamH[proto] = sh
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		if nd.streamH[proto] == sh {
			delete(nd.streamH, proto)
		}
		n.mu.Unlock()
	}
}

// OpenStream implements gossip.Transport: the receiver's handler starts
// on its own goroutine. Crashes, partitions and DropIf rules (Envelope
// with Proto set, Data nil) refuse the stream with ErrUnreachable; a crash
// or partition also resets streams already open across it.
func (nd *Node) OpenStream(ctx context.Context, peer, proto string) (io.WriteCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memnet: open %s to %s: %w", proto, peer, err)
	}
	n := nd.net
	n.mu.Lock()
	to := n.nodes[peer]
	var sh *streamHandler
	var err error
	switch {
	case n.closed:
		err = ErrClosed
	case to == nil:
		err = fmt.Errorf("%w: no node %q", ErrUnreachable, peer)
	case n.cut(nd.id, peer):
		err = fmt.Errorf("%w: %s cannot reach %s (crash or partition)", ErrUnreachable, nd.id, peer)
	case n.ruled(Envelope{Proto: proto, From: nd.id, To: peer}):
		err = fmt.Errorf("%w: stream %s from %s to %s dropped by a rule", ErrUnreachable, proto, nd.id, peer)
	default:
		if sh = to.streamH[proto]; sh == nil {
			err = fmt.Errorf("%w: %s does not handle streams of %s", ErrNoProtocol, peer, proto)
		}
	}
	if err != nil {
		n.mu.Unlock()
		return nil, err
	}
	pr, pw := io.Pipe()
	s := &stream{from: nd.id, to: peer, pr: pr, pw: pw, sent: &nd.streamSent, recv: &to.streamRecv}
	n.streams[s] = struct{}{}
	n.streamWG.Add(1)
	n.mu.Unlock()
	nd.streamsOpened.Add(1)
	to.streamsServed.Add(1)
	go func() {
		defer n.streamWG.Done()
		sh.h(nd.id, streamReader{s})
		s.reset()
		n.mu.Lock()
		delete(n.streams, s)
		n.mu.Unlock()
	}()
	return &streamWriter{s: s}, nil
}

type streamWriter struct {
	s     *stream
	abort atomic.Bool // a write failed or is under way: Close resets
}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.abort.Store(true)
	k, err := w.s.pw.Write(p)
	w.s.sent.Add(uint64(k))
	w.s.recv.Add(uint64(k))
	if err == nil {
		w.abort.Store(false)
	}
	return k, err
}

// Close ends the stream: the handler reads what was written, then io.EOF;
// or, when a write failed or is blocked, aborts it (ErrReset on both
// sides), as libp2p's stream is reset.
func (w *streamWriter) Close() error {
	if w.abort.Load() {
		return w.s.pw.CloseWithError(ErrReset)
	}
	return w.s.pw.Close()
}

type streamReader struct{ s *stream }

func (r streamReader) Read(p []byte) (int, error) { return r.s.pr.Read(p) }

// Close aborts the stream: the opener's writes fail with ErrReset.
func (r streamReader) Close() error {
	r.s.reset()
	return nil
}

// Stats implements gossip.Transport. Dropped counts messages to this node
// lost to faults, full queues or a crash.
func (nd *Node) Stats() gossip.TransportStats {
	return gossip.TransportStats{
		Published: nd.published.Load(), PublishedBytes: nd.publishedBytes.Load(),
		Received: nd.received.Load(), ReceivedBytes: nd.receivedBytes.Load(),
		Rejected: nd.rejected.Load(), Dropped: nd.dropped.Load(),
		Requests: nd.requests.Load(), Served: nd.served.Load(),
		StreamSent: nd.streamSent.Load(), StreamRecv: nd.streamRecv.Load(),
		StreamsOpened: nd.streamsOpened.Load(), StreamsServed: nd.streamsServed.Load(),
	}
}
