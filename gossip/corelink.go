package gossip

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// The core link carries the training core's messages (wire.Core, package
// node/train) between peers: point to point, authenticated, validated,
// bounded, and without sequencing or repair, which the core does itself
// (it retries every RetryTicks and drops duplicates by request number).
//
// Each sender keeps one long-lived stream (CoreProtocol) to each receiver
// and writes frames on it: a uvarint length, then one wire message of at
// most Limits.MaxMessage bytes. A message whose encoded body is larger goes
// as consecutive parts (wire.Codec.AppendCorePart, the same Seq, Part
// 0..Parts-1), which the receiver joins into one body of at most
// CoreLinkConfig.MaxBody bytes before decoding it.
//
// Why parts and not one large frame: every frame on the stream then has the
// same small bound (MaxMessage, 1 MiB), so a frame length is checked and
// its buffer allocated before reading it, and only a body being joined can
// grow, one part at a time as bytes really arrive, under its own per-sender
// bound. A single large frame would need a large frame bound for every
// frame, and a buffer grown as it is read to keep a lying length from
// allocating. The cost is a header per MiB (under 100 bytes), and the
// encoding is the wire format's own (KindCore parts).

// CoreProtocol is the stream protocol of the core link.
const CoreProtocol = "/gossiptrain/core/1"

// Tuning of the core link. Not configuration: each is set for the reason
// given and nothing a user runs changes it.
const (
	// coreBatch: small messages queued for one peer are written together
	// up to this many bytes, one stream write for many messages.
	coreBatch = 64 << 10
	// coreOpenTimeout bounds opening a stream (dialling included).
	coreOpenTimeout = 10 * time.Second
	// coreBackoffMin..Max: after a failed open or write, the next attempt
	// to that peer waits this long, doubling (the first retry is at once:
	// a connection that dropped is usually back at the next dial).
	coreBackoffMin = 50 * time.Millisecond
	coreBackoffMax = 5 * time.Second
	// coreOpenTries: a batch whose stream cannot be opened is tried this
	// many times (with the backoff above) before it is dropped: peers of a
	// run start their links a few hundred ms apart, and a message dropped
	// then costs the core a retry interval (2 s) at round 0.
	coreOpenTries = 5
	// coreBigBody: after a body larger than this, encoders, decoders and
	// buffers are dropped instead of kept, so a 64 MiB state transfer does
	// not leave 64 MiB (and the codec's scratch) held per peer.
	coreBigBody = 4 << 20
)

// coreIdle is how long a peer's sender waits for a message before it
// closes its stream and goroutine (peers that left must not keep either).
// A variable for tests (read when a link starts).
var coreIdle = 2 * time.Minute

// CoreLinkConfig configures a CoreLink.
type CoreLinkConfig struct {
	// Job is the training job: messages of other jobs are refused.
	Job string
	// Limits bound every message sent and accepted (wire.Core.Check);
	// frames on a stream are at most Limits.MaxMessage bytes. The zero
	// value means wire.DefaultLimits().
	Limits wire.Limits
	// Values is the value format of push rows (CorePush Rows); lossy
	// formats are allowed. Every other value travels as lossless F32, or
	// as Raw (lossless too) when Values is Raw.
	Values wire.Values
	// Queue bounds the messages waiting for one destination (0: 256). A
	// message beyond it is dropped and counted (QueueFull): the core sends
	// it again. It also bounds the messages decoded and waiting for
	// deliver.
	Queue int
	// QueueBytes bounds the encoded bytes waiting for one destination (0:
	// 64 MiB). A message that finds its queue empty is always taken, so a
	// message of any size up to MaxBody can go.
	QueueBytes int
	// MaxBody bounds the body of one message joined from parts, in bytes:
	// what a receiver holds per sender at most, and the largest message
	// Send encodes. 0 means the most a body within Limits can take
	// (CoreMaxBody): a shard's state transfer of up to Limits.MaxValues
	// values always fits.
	MaxBody int
	// Log receives debug lines for every refused message (with the peer
	// and the reason) and stream failure, and warnings for messages that
	// do not encode (a bug in the caller).
	Log zerolog.Logger
}

// DefaultCoreLinkConfig returns wire.DefaultLimits, lossless F32 push rows,
// 256 messages and 64 MiB queued per destination (the core retries what
// is dropped; a few hundred messages are several rounds of traffic), and
// MaxBody derived from the limits. Job must still be set.
func DefaultCoreLinkConfig() CoreLinkConfig {
	lim := wire.DefaultLimits()
	return CoreLinkConfig{Limits: lim, Values: wire.F32, Queue: 256, QueueBytes: 64 << 20, MaxBody: CoreMaxBody(lim)}
}

// CoreMaxBody returns the largest body of a core message within lim, with
// room: the fixed fields, lists, text and blob in MaxMessage + 25 bytes a
// list entry, and at most 5 bytes (the widest code: an 11-bit exponent
// code and 24 bits) for each row index, wanted row, row value and value.
func CoreMaxBody(lim wire.Limits) int {
	return lim.MaxMessage + 64<<10 + 25*lim.MaxList + lim.MaxString + 16*lim.MaxRows + 10*lim.MaxValues
}

// withDefaults fills the zero fields.
func (c CoreLinkConfig) withDefaults() CoreLinkConfig {
	if c.Limits == (wire.Limits{}) {
		c.Limits = wire.DefaultLimits()
	}
	if c.Queue == 0 {
		c.Queue = 256
	}
	if c.QueueBytes == 0 {
		c.QueueBytes = 64 << 20
	}
	if c.MaxBody == 0 {
		c.MaxBody = CoreMaxBody(c.Limits)
	}
	return c
}

// Validate reports the first field out of its domain (zero fields take
// their defaults first).
func (c CoreLinkConfig) Validate() error {
	c = c.withDefaults()
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: CoreLinkConfig.Limits: %w", ErrConfig, err)
	}
	switch {
	case c.Job == "" || len(c.Job) > c.Limits.MaxString:
		return fmt.Errorf("%w: CoreLinkConfig.Job %q: want 1..%d bytes", ErrConfig, c.Job, c.Limits.MaxString)
	case c.Values > wire.Raw:
		return fmt.Errorf("%w: CoreLinkConfig.Values %d: want f32, f16, i8 or raw", ErrConfig, c.Values)
	case c.Queue < 1:
		return fmt.Errorf("%w: CoreLinkConfig.Queue %d: want >= 1", ErrConfig, c.Queue)
	case c.QueueBytes < 1:
		return fmt.Errorf("%w: CoreLinkConfig.QueueBytes %d: want >= 1", ErrConfig, c.QueueBytes)
	case c.MaxBody < c.Limits.MaxMessage || c.MaxBody > 1<<40:
		return fmt.Errorf("%w: CoreLinkConfig.MaxBody %d: want Limits.MaxMessage (%d)..2^40", ErrConfig, c.MaxBody, c.Limits.MaxMessage)
	}
	return nil
}

// CoreLinkStats are a CoreLink's counters since it started.
type CoreLinkStats struct {
	Sent          uint64 // messages written to peers' streams (a message in parts counts once)
	SentBytes     uint64 // their bytes on the streams (frames)
	Received      uint64 // messages from peers passed to deliver
	ReceivedBytes uint64 // their bytes on the streams (frames)
	Local         uint64 // messages to this peer itself passed to deliver
	// Dropped = QueueFull + SendErrors + EncodeErrors: messages Send took
	// that never left.
	Dropped       uint64
	QueueFull     uint64 // the destination's queue (or the local one) was full
	SendErrors    uint64 // no stream could be opened to the peer, or the write failed
	EncodeErrors  uint64 // the message does not encode within the limits (a bug in the caller)
	StreamsOpened uint64 // streams opened to peers
	StreamResets  uint64 // peers' streams reset for breaking the protocol
	// Rejected counts refused incoming messages (frames, for those refused
	// before their message is known) by reason.
	Rejected Rejections
}

type linkCounters struct {
	sent, sentBytes, received, receivedBytes, local atomic.Uint64
	queueFull, sendErrors, encodeErrors             atomic.Uint64
	streamsOpened, streamResets                     atomic.Uint64
	rejected                                        [numReasons]atomic.Uint64
}

// CoreLink sends the training core's messages to peers and delivers
// theirs: one long-lived stream per (sender, receiver), frames of at most
// Limits.MaxMessage bytes, messages larger than that in parts. It keeps no
// order across peers and repairs nothing: a message lost with a broken
// connection or a full queue is lost (counted); the core sends it again.
//
// Send is safe for concurrent use and never blocks. deliver is called on
// one goroutine, sequentially; a peer's messages arrive in the order that
// peer sent them (unless one is lost). One CoreLink per Transport: it
// handles CoreProtocol's streams.
type CoreLink struct {
	tr      Transport
	cfg     CoreLinkConfig
	idle    time.Duration // coreIdle when the link started
	self    string
	deliver func(from string, msg *wire.Core)

	ctx      context.Context
	cancel   context.CancelFunc
	unhandle func()
	unsent   atomic.Int64 // messages queued for peers and not yet written (Flush)

	// The encoder: one codec behind a mutex. Send's caller is the
	// driver's one goroutine, so the mutex is uncontended; per-destination
	// codecs would hold a codec's scratch per peer for nothing.
	encMu  sync.Mutex
	enc    *wire.Codec
	locDec *wire.Codec // decodes lossy pushes to self
	hdr    []byte
	loc    []byte
	seq    uint64

	mu     sync.Mutex
	closed bool
	dests  map[string]*coreDest
	ins    map[string]*coreIn // each peer's newest incoming stream
	wg     sync.WaitGroup     // senders and readers
	dwg    sync.WaitGroup     // the delivery goroutine

	in    chan coreItem   // decoded messages from peers
	local chan *wire.Core // messages to self

	bufs sync.Pool // *[]byte: encoded messages
	c    linkCounters
}

// coreItem is a decoded message waiting for deliver.
type coreItem struct {
	from  string
	msg   *wire.Core
	bytes int
}

// coreIn is a peer's incoming stream.
type coreIn struct{ r io.ReadCloser }

// coreDest is one destination: its queue and its sender goroutine.
type coreDest struct {
	peer  string
	ch    chan *[]byte
	bytes atomic.Int64 // encoded bytes in ch

	mu   sync.Mutex // orders enqueue against retirement
	gone bool       // retired: Send makes a new one

	// the sender goroutine's own
	w       io.WriteCloser
	stop    func() bool // stops the AfterFunc that closes w on Close
	backoff time.Duration
	next    time.Time // no attempt before
	batch   []byte
}

// NewCoreLink starts a link over tr: it serves CoreProtocol streams and
// calls deliver (on one goroutine, sequentially; deliver owns msg) with
// every valid message from a peer and every message Send addresses to
// this peer itself. Close stops it.
func NewCoreLink(tr Transport, cfg CoreLinkConfig, deliver func(from string, msg *wire.Core)) (*CoreLink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deliver == nil {
		return nil, fmt.Errorf("%w: NewCoreLink: deliver is nil", ErrConfig)
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	l := &CoreLink{
		tr: tr, cfg: cfg, idle: coreIdle, self: tr.Self(), deliver: deliver, ctx: ctx, cancel: cancel,
		enc: wire.NewCodec(cfg.Values, wire.None, cfg.Limits), locDec: wire.NewCodec(wire.F32, wire.None, cfg.Limits),
		dests: make(map[string]*coreDest), ins: make(map[string]*coreIn),
		in: make(chan coreItem, cfg.Queue), local: make(chan *wire.Core, cfg.Queue),
	}
	l.dwg.Add(1)
	go l.run()
	l.unhandle = tr.HandleStream(CoreProtocol, l.serve)
	return l, nil
}

// Close stops the link: it no longer accepts streams, closes its own,
// and returns once no goroutine of it runs; deliver is not called after.
// Queued messages are dropped. Close must not be called from deliver.
func (l *CoreLink) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	ins := make([]*coreIn, 0, len(l.ins))
	for _, in := range l.ins {
		ins = append(ins, in)
	}
	l.mu.Unlock()
	l.unhandle()
	l.cancel() // senders close their streams (AfterFunc); readers and delivery stop waiting
	for _, in := range ins {
		in.r.Close()
	}
	l.wg.Wait()
	l.dwg.Wait()
	return nil
}

// Flush waits until every message queued for another peer has been
// written to its stream (or given up on), or ctx ends. A peer that is done
// calls it before Close, so its last messages (answers, acknowledgements,
// "finished") reach their peers instead of being dropped with the queue.
func (l *CoreLink) Flush(ctx context.Context) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for l.unsent.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Stats returns the link's counters.
func (l *CoreLink) Stats() CoreLinkStats {
	c := &l.c
	s := CoreLinkStats{
		Sent: c.sent.Load(), SentBytes: c.sentBytes.Load(), Received: c.received.Load(),
		ReceivedBytes: c.receivedBytes.Load(), Local: c.local.Load(), QueueFull: c.queueFull.Load(),
		SendErrors: c.sendErrors.Load(), EncodeErrors: c.encodeErrors.Load(),
		StreamsOpened: c.streamsOpened.Load(), StreamResets: c.streamResets.Load(),
	}
	s.Dropped = s.QueueFull + s.SendErrors + s.EncodeErrors
	for i := range c.rejected {
		s.Rejected[i] = c.rejected[i].Load()
	}
	return s
}

// run is the delivery goroutine.
func (l *CoreLink) run() {
	defer l.dwg.Done()
	for {
		select {
		case it := <-l.in:
			l.c.received.Add(1)
			l.c.receivedBytes.Add(uint64(it.bytes))
			l.deliver(it.from, it.msg)
		case m := <-l.local:
			l.c.local.Add(1)
			l.deliver(l.self, m)
		case <-l.ctx.Done():
			return
		}
	}
}

// Send sends msg to peer to (this peer's own ID: delivered back without the
// network). It encodes msg before it returns (the caller may reuse msg)
// and never blocks: a message that does not fit its destination's queue
// is dropped and counted (QueueFull), as is one that fails msg.Check
// within Limits or does not encode (EncodeErrors, logged as a warning:
// the receiver would refuse it). After Close, Send drops everything.
func (l *CoreLink) Send(to string, msg *wire.Core) {
	if err := msg.Check(l.cfg.Limits); err != nil {
		l.c.encodeErrors.Add(1)
		l.cfg.Log.Warn().Err(err).Str("peer", to).Stringer("op", msg.Op).Msg("core link: message out of the limits; dropped")
		return
	}
	if to == l.self {
		l.sendLocal(msg)
		return
	}
	d := l.dest(to)
	if d == nil {
		return // closed
	}
	if len(d.ch) == cap(d.ch) {
		l.c.queueFull.Add(1) // before encoding: a full queue costs nothing
		return
	}
	b, err := l.encode(msg)
	if err != nil {
		l.c.encodeErrors.Add(1)
		l.cfg.Log.Warn().Err(err).Str("peer", to).Stringer("op", msg.Op).Msg("core link: message does not encode; dropped")
		return
	}
	switch l.enqueue(d, to, b) {
	case enqueued:
	case queueFull:
		l.c.queueFull.Add(1)
		l.putBuf(b)
	case linkClosed:
		l.putBuf(b)
	}
}

type enqueueResult uint8

const (
	enqueued enqueueResult = iota
	queueFull
	linkClosed
)

// enqueue queues b for to, on d or on the destination that replaced d
// after it retired.
func (l *CoreLink) enqueue(d *coreDest, to string, b *[]byte) enqueueResult {
	for {
		d.mu.Lock()
		if !d.gone {
			break
		}
		d.mu.Unlock()
		if d = l.dest(to); d == nil {
			return linkClosed
		}
	}
	defer d.mu.Unlock()
	n := int64(len(*b))
	if q := d.bytes.Load(); q > 0 && q+n > int64(l.cfg.QueueBytes) {
		return queueFull
	}
	d.bytes.Add(n)
	select {
	case d.ch <- b:
		l.unsent.Add(1)
		return enqueued
	default:
		d.bytes.Add(-n)
		return queueFull
	}
}

// dest returns to's destination, starting its sender; nil once closed.
func (l *CoreLink) dest(to string) *coreDest {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	d := l.dests[to]
	if d == nil {
		d = &coreDest{peer: to, ch: make(chan *[]byte, l.cfg.Queue)}
		l.dests[to] = d
		l.wg.Add(1)
		go l.sender(d)
	}
	return d
}

// sendLocal queues a copy of msg for deliver. A push in a lossy format
// goes through the codec, so this peer's own contribution is rounded
// exactly as the copies the other peers receive.
func (l *CoreLink) sendLocal(msg *wire.Core) {
	var m *wire.Core
	if msg.Op == wire.CorePush && l.cfg.Values.Lossy() {
		var err error
		if m, err = l.roundTrip(msg); err != nil {
			l.c.encodeErrors.Add(1)
			l.cfg.Log.Warn().Err(err).Str("peer", l.self).Stringer("op", msg.Op).Msg("core link: message does not encode; dropped")
			return
		}
	} else {
		m = msg.Clone()
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return
	}
	select {
	case l.local <- m:
	default:
		l.c.queueFull.Add(1)
	}
}

// roundTrip encodes and decodes msg.
func (l *CoreLink) roundTrip(msg *wire.Core) (*wire.Core, error) {
	l.encMu.Lock()
	defer l.encMu.Unlock()
	body, flags, err := l.enc.CoreBody(msg)
	if err != nil {
		return nil, err
	}
	if l.loc, err = l.enc.AppendCorePart(l.loc[:0], wire.Header{Job: l.cfg.Job, Sender: l.self}, flags, nil); err != nil {
		return nil, err
	}
	l.loc = append(l.loc, body...)
	h, b, err := l.locDec.CoreChunk(l.loc)
	if err != nil {
		return nil, err
	}
	m := new(wire.Core)
	if err := l.locDec.DecodeCoreBody(h, b, l.cfg.MaxBody, m); err != nil {
		return nil, err
	}
	if len(body) > coreBigBody {
		l.dropEncoder()
		l.locDec = wire.NewCodec(wire.F32, wire.None, l.cfg.Limits)
	}
	return m, nil
}

// dropEncoder replaces the encoder and its scratch. Callers hold encMu.
func (l *CoreLink) dropEncoder() {
	l.enc = wire.NewCodec(l.cfg.Values, wire.None, l.cfg.Limits)
	l.hdr, l.loc = nil, nil
}

// encode returns msg's frames in a pooled buffer: one frame, or one per
// part when the message is larger than Limits.MaxMessage.
func (l *CoreLink) encode(msg *wire.Core) (*[]byte, error) {
	l.encMu.Lock()
	defer l.encMu.Unlock()
	body, flags, err := l.enc.CoreBody(msg)
	if err != nil {
		return nil, err
	}
	if len(body) > l.cfg.MaxBody {
		return nil, fmt.Errorf("%w: core body of %d bytes, limit %d (MaxBody)", wire.ErrTooLarge, len(body), l.cfg.MaxBody)
	}
	l.seq++
	h := wire.Header{Job: l.cfg.Job, Sender: l.self, Seq: l.seq}
	if l.hdr, err = l.enc.AppendCorePart(l.hdr[:0], h, flags, nil); err != nil {
		return nil, err
	}
	bp := l.getBuf()
	b := (*bp)[:0]
	lim := l.cfg.Limits.MaxMessage
	if len(l.hdr)+len(body) <= lim {
		b = binary.AppendUvarint(b, uint64(len(l.hdr)+len(body)))
		b = append(b, l.hdr...)
		b = append(b, body...)
		*bp = b
		return bp, nil
	}
	wide := h
	wide.Part, wide.Parts = 65534, 65535
	if l.hdr, err = l.enc.AppendCorePart(l.hdr[:0], wide, flags, nil); err != nil {
		l.putBuf(bp)
		return nil, err
	}
	chunk := lim - len(l.hdr)
	parts := (len(body) + chunk - 1) / chunk
	if parts > 65535 {
		l.putBuf(bp)
		return nil, fmt.Errorf("%w: core body of %d bytes needs %d parts, limit 65535", wire.ErrTooLarge, len(body), parts)
	}
	if need := len(body) + parts*(len(l.hdr)+binary.MaxVarintLen32); cap(b) < need {
		b = make([]byte, 0, need)
	}
	for p := range parts {
		h.Part, h.Parts = uint16(p), uint16(parts)
		if l.hdr, err = l.enc.AppendCorePart(l.hdr[:0], h, flags, nil); err != nil {
			l.putBuf(bp)
			return nil, err
		}
		c := body[p*chunk : min(len(body), (p+1)*chunk)]
		b = binary.AppendUvarint(b, uint64(len(l.hdr)+len(c)))
		b = append(b, l.hdr...)
		b = append(b, c...)
	}
	*bp = b
	if len(body) > coreBigBody {
		l.dropEncoder()
	}
	return bp, nil
}

func (l *CoreLink) getBuf() *[]byte {
	if b, ok := l.bufs.Get().(*[]byte); ok {
		return b
	}
	return new([]byte)
}

// putBuf returns b to the pool, unless it is big (a large message's
// buffer is left to the garbage collector).
func (l *CoreLink) putBuf(b *[]byte) {
	if cap(*b) > coreBigBody {
		return
	}
	*b = (*b)[:0]
	l.bufs.Put(b)
}
