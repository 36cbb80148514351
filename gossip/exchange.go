package gossip

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// Grad is one worker's gradient message for this owner, reassembled from
// its parts. It is only valid during the Handlers.Grad call: its slices
// are reused for the stream's next message, so copy (or sum) what you keep.
type Grad struct {
	From     string       // the worker (authenticated sender)
	Clock    uint64       // the worker's clock
	Epoch    uint64       // the ring epoch the worker computed owners with
	Seq      uint64       // sequence number of the first part in the worker's stream to this owner
	Parts    int          // parts it travelled in
	Examples int          // examples behind the summed gradient
	Values   wire.Values  // the value format it travelled in (lossy formats are rounded)
	Rows     model.Sparse // the rows, Config.Width values each, strictly ascending
}

// Params is one owner's params message, reassembled from its parts. Like
// Grad, it is only valid during the Handlers.Params call.
type Params struct {
	From  string       // the owner (authenticated sender), or self with Config.LoopParams
	Clock uint64       // the owner's clock when it published
	Epoch uint64       // the ring epoch of the owner's shards
	Seq   uint64       // sequence number of the first part in the owner's params stream
	Parts int          // parts it travelled in
	Ack   wire.Ack     // the owner's progress: through clock and per-worker applied clocks
	Rows  model.Sparse // the new values of the changed rows, Config.Width values each
}

// Handlers receive what the Exchange delivers. All three are called from
// the Exchange's single delivery goroutine, never concurrently with each
// other, so they need no locking among themselves; each must return
// quickly (they may call SendGrad and SendParams). A nil handler discards.
type Handlers struct {
	// Grad receives gradients addressed to this node, in sequence order per
	// worker.
	Grad func(g *Grad)
	// Params receives params messages, in sequence order per owner.
	Params func(p *Params)
	// Error receives stream failures the training layer may act on: ErrGone
	// (a hole no sender can fill: fatal for the stream in sync mode) and
	// ErrProtocol (a sender broke the part protocol; the message is
	// dropped).
	Error func(err error)
}

// Exchange is the reliable, validated, sequenced message layer of one
// training peer over a Transport. See the package doc for how it is driven.
type Exchange struct {
	cfg         Config
	tr          Transport
	self        string
	h           Handlers
	gradTopic   string // this node's own grad topic
	paramsTopic string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	subs   []func()
	closed atomic.Bool

	// Sending. gradMu serialises gradient sends (the grad codec, the grad
	// out-streams' appends and gs); paramsMu the same for params.
	gradMu      sync.Mutex
	gradCodec   *wire.Codec
	gradLoopSeq uint64 // this node's stream of gradients to itself
	gradLoopInc uint64 // and its incarnation
	gs          sendState
	gradEmit    func([]byte) error

	paramsMu     sync.Mutex
	paramsTopics []string // every receiver's params topic (SetParamsPeers)
	paramsPeers  []string // and the receivers
	paramsFailed []bool   // per receiver, during a SendParams: a part failed to publish
	paramsCodec  *wire.Codec
	paramsOut    *outStream
	ack          wire.Ack
	ps           sendState
	paramsEmit   func([]byte) error
	// startMu guards paramsStart: per receiver's params topic, the first
	// sequence number of paramsOut published to it. A repair request for
	// earlier numbers is told they were never its (FetchReply.First).
	startMu     sync.Mutex
	paramsStart map[string]uint64

	outMu   sync.Mutex             // guards gradOut (the map, not the streams)
	gradOut map[string]*outStream  // by owner
	pushMu  sync.Mutex             // guards pushers
	pushers map[string]chan pushed // GradStreams, ParamsStreams: per peer, messages to push

	// Receiving.
	inbox     chan item
	localMu   sync.Mutex
	local     []item // loopback and control items, unbounded (self-generated)
	localWake chan struct{}
	streamsMu sync.Mutex
	streams   map[streamKey]*inStream
	rx        *wire.Codec   // delivery goroutine only
	rxMsg     wire.Message  // delivery goroutine only
	decoders  chan *decoder // free decoders for validators and repairs (a sync.Pool would be emptied by every GC)
	bufs      sync.Pool     // *[]byte, for loopback copies
	repairSem chan struct{}

	stats counters
}

// sendState is the per-call state of a send, read by the emit callback.
type sendState struct {
	ctx    context.Context
	owner  string     // a gradient's owner
	out    *outStream // nil for a gradient to self
	kind   Stream
	loop   bool     // also (or only) deliver locally
	local  bool     // only deliver locally (gradient to self)
	topics []string // publish to these topics instead of out.topic (params: one per receiver)
	failed []bool   // per topic: a publish failed (params)
	err    error    // first Publish error
}

type decoder struct {
	c *wire.Codec
	m wire.Message
}

// New starts an Exchange on tr: it subscribes to this node's grad topic
// and the params topic, serves repair requests on RepairProtocol and starts
// its delivery goroutine. Close stops it. One Exchange per transport: a
// second would take over the repair handler.
//
// Sequence numbers start at 0 for every stream and live as long as the
// Exchange: a peer that restarts with a new Exchange starts again at 0, and
// receivers that knew the old one drop its messages as duplicates (a
// restarted peer rejoins under a new incarnation: issue 5).

func New(tr Transport, cfg Config, h Handlers) (*Exchange, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	self := tr.Self()
	if len(self) > cfg.Wire.Limits.MaxString {
		return nil, fmt.Errorf("%w: peer ID %q longer than Wire.Limits.MaxString (%d)", ErrConfig, self, cfg.Wire.Limits.MaxString)
	}
	lim := cfg.Wire.Limits
	gradCodec, err := cfg.Wire.NewCodec()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := &Exchange{
		cfg:         cfg,
		tr:          tr,
		self:        self,
		h:           h,
		gradTopic:   GradTopic(cfg.Job, self),
		paramsTopic: ParamsTopic(cfg.Job, self),
		ctx:         ctx,
		cancel:      cancel,
		gradCodec:   gradCodec,
		paramsCodec: wire.NewCodec(wire.F32, cfg.Wire.Compress, lim),
		gradOut:     make(map[string]*outStream),
		paramsStart: make(map[string]uint64),
		gradLoopInc: nextIncarnation(),
		inbox:       make(chan item, cfg.Inbox),
		localWake:   make(chan struct{}, 1),
		streams:     make(map[streamKey]*inStream),
		rx:          wire.NewCodec(wire.F32, wire.None, lim),
		repairSem:   make(chan struct{}, cfg.RepairConcurrency),
	}
	x.paramsOut = x.newOutStream(x.paramsTopic)
	x.gradEmit = x.emitGrad
	x.paramsEmit = x.emitParams
	x.decoders = make(chan *decoder, 2*runtime.GOMAXPROCS(0)+cfg.RepairConcurrency)
	x.bufs.New = func() any { return new([]byte) }

	for _, s := range []struct {
		topic string
		kind  Stream
	}{{x.gradTopic, StreamGrad}, {x.paramsTopic, StreamParams}} {
		kind := s.kind
		cancelSub, err := tr.Subscribe(s.topic,
			func(from string, msg []byte) (any, error) { return x.validate(kind, from, msg) },
			func(from string, msg []byte, v any) {
				dec, _ := v.(*decoder)
				x.enqueue(item{kind: kind, from: from, data: msg, src: srcPubsub, dec: dec})
			})
		if err != nil {
			x.Close()
			return nil, fmt.Errorf("gossip: subscribe to %s: %w", s.topic, err)
		}
		x.subs = append(x.subs, cancelSub)
	}
	tr.Serve(RepairProtocol, x.serve)
	tr.Serve(PushProtocol, func(ctx context.Context, from string, req []byte, w io.Writer) error {
		return x.servePush(StreamGrad, from, req)
	})
	tr.Serve(ParamsPushProtocol, func(ctx context.Context, from string, req []byte, w io.Writer) error {
		return x.servePush(StreamParams, from, req)
	})
	x.wg.Add(1)
	go x.deliverLoop()
	return x, nil
}

// Close unsubscribes, stops the delivery and repair goroutines and waits
// for them. Handlers are not called after Close returns. Sends after Close
// fail with ErrClosed; repair requests are still answered from the
// retransmit buffers (the transport keeps the handler).
func (x *Exchange) Close() error {
	if x.closed.Swap(true) {
		return nil
	}
	x.cancel() // first: a transport goroutine blocked on a full inbox gives up
	for _, c := range x.subs {
		c()
	}
	x.wg.Wait()
	return nil
}

// Self is this node's peer ID.
func (x *Exchange) Self() string { return x.self }

// Stats returns the Exchange's counters, with the transport's.
func (x *Exchange) Stats() Stats {
	s := x.stats.snapshot()
	s.Transport = x.tr.Stats()
	return s
}

// Rejected returns the rejected-message counts by reason.
func (x *Exchange) Rejected() Rejections { return x.stats.snapshot().Rejected }

// WaitOwner blocks until owner is subscribed to its grad topic (so a
// gradient published now can reach it), or ctx ends. It returns at once for
// this node itself.
func (x *Exchange) WaitOwner(ctx context.Context, owner string) error {
	if owner == x.self {
		return nil
	}
	return x.tr.Ready(ctx, GradTopic(x.cfg.Job, owner), 1)
}

// WaitPeers blocks until every peer in peers (other than this node) is
// subscribed to its params topic, so params published now reach it, or ctx
// ends.
func (x *Exchange) WaitPeers(ctx context.Context, peers []string) error {
	for _, p := range peers {
		if p == x.self {
			continue
		}
		if err := x.tr.Ready(ctx, ParamsTopic(x.cfg.Job, p), 1); err != nil {
			return err
		}
	}
	return nil
}

// SetParamsPeers sets the peers SendParams publishes to (this node is left
// out: it gets its own params by loopback with Config.LoopParams). Call it
// when the member set changes; it applies from the next SendParams. A
// peer listed for the first time receives the params stream from the next
// message on: a repair request for earlier ones is told they were never
// its. A peer dropped and listed again (it was unreachable a while) keeps
// its place and repairs what it missed; one that restarted needs
// ResetPeer.
func (x *Exchange) SetParamsPeers(peers []string) {
	x.paramsMu.Lock()
	defer x.paramsMu.Unlock()
	x.paramsTopics = x.paramsTopics[:0]
	x.paramsPeers = x.paramsPeers[:0]
	next := x.paramsOut.nextSeq()
	x.startMu.Lock()
	defer x.startMu.Unlock()
	for _, p := range peers {
		if p != x.self {
			t := ParamsTopic(x.cfg.Job, p)
			x.paramsTopics = append(x.paramsTopics, t)
			x.paramsPeers = append(x.paramsPeers, p)
			if _, ok := x.paramsStart[t]; !ok {
				x.paramsStart[t] = next
			}
		}
	}
}

// ResetPeer starts this node's streams to peer afresh: peer (re)joined the
// run with a new Exchange, so it needs the params stream only from the
// next message on, and gradients to it go on a new stream (a new
// incarnation, from sequence number 0). Call it before sending to peer.
func (x *Exchange) ResetPeer(peer string) {
	x.paramsMu.Lock()
	next := x.paramsOut.nextSeq()
	x.startMu.Lock()
	x.paramsStart[ParamsTopic(x.cfg.Job, peer)] = next
	x.startMu.Unlock()
	x.paramsMu.Unlock()
	x.gradMu.Lock()
	x.outMu.Lock()
	delete(x.gradOut, peer)
	x.outMu.Unlock()
	x.gradMu.Unlock()
}

// paramsFirst is the first params sequence number peer was sent.
func (x *Exchange) paramsFirst(peer string) uint64 {
	x.startMu.Lock()
	defer x.startMu.Unlock()
	if f, ok := x.paramsStart[ParamsTopic(x.cfg.Job, peer)]; ok {
		return f
	}
	return x.paramsOut.nextSeq() // never a receiver: nothing was its
}

// SendGrad sends g, a worker's summed gradient over examples examples for
// owner's rows at clock and epoch, on owner's stream. Large bodies are
// split into parts, each with its own sequence number and kept in the
// stream's retransmit buffer; an empty g is sent too (owners count every
// worker's examples). A gradient for this node itself is looped back to
// the Grad handler without touching the network.
//
// Call it from one goroutine at a time per Exchange (it serialises anyway).
// Errors: an encode error (indices out of range, NaN) sends nothing; an
// error wrapping ErrUnpublished means the message is sequenced and will be
// repaired, so do not send it again.
func (x *Exchange) SendGrad(ctx context.Context, owner string, clock, epoch uint64, examples int, g *model.Sparse) error {
	if x.closed.Load() {
		return ErrClosed
	}
	if owner == "" {
		return fmt.Errorf("gossip: SendGrad: empty owner")
	}
	x.gradMu.Lock()
	defer x.gradMu.Unlock()
	h := wire.Header{Job: x.cfg.Job, Sender: x.self, Clock: clock, Epoch: epoch}
	x.gs = sendState{ctx: ctx, kind: StreamGrad, owner: owner}
	if owner == x.self {
		h.Seq, h.Incarnation = x.gradLoopSeq, x.gradLoopInc
		x.gs.loop, x.gs.local = true, true
	} else {
		x.gs.out = x.gradStream(owner)
		h.Seq, h.Incarnation = x.gs.out.nextSeq(), x.gs.out.inc
	}
	n, err := x.gradCodec.SplitGrad(h, examples, x.cfg.Width, g, x.gradEmit)
	if owner == x.self {
		x.gradLoopSeq += uint64(n)
	}
	pubErr := x.gs.err
	x.gs = sendState{}
	if err != nil {
		if n > 0 { // cannot happen: SplitGrad finds every cut before emitting
			x.cfg.Log.Error().Err(err).Str("owner", owner).Int("parts", n).Msg("gradient split failed after emitting parts")
		}
		return fmt.Errorf("gossip: send grad to %s clock %d: %w", owner, clock, err)
	}
	if pubErr != nil {
		return fmt.Errorf("%w: grad to %s clock %d (%d parts from seq %d): %w", ErrUnpublished, owner, clock, n, h.Seq, pubErr)
	}
	return nil
}

// SendParams publishes an owner's new values p (Config.Width values per
// row, lossless float32) with its progress ack on the params stream, split
// into parts when large. ack.Applied may be in any order (it is sorted into
// the message; a worker listed twice is an error). With Config.LoopParams
// the message is also delivered to this node's Params handler. Errors are
// as for SendGrad.
func (x *Exchange) SendParams(ctx context.Context, clock, epoch uint64, ack *wire.Ack, p *model.Sparse) error {
	if x.closed.Load() {
		return ErrClosed
	}
	x.paramsMu.Lock()
	defer x.paramsMu.Unlock()
	x.ack.Through = ack.Through
	x.ack.Applied = append(x.ack.Applied[:0], ack.Applied...)
	x.ack.Force = ack.Force
	x.ack.Config.ID, x.ack.Config.Start, x.ack.Config.Checkpoint = ack.Config.ID, ack.Config.Start, ack.Config.Checkpoint
	x.ack.Config.Members = append(x.ack.Config.Members[:0], ack.Config.Members...)
	x.ack.Config.Crashed = append(x.ack.Config.Crashed[:0], ack.Config.Crashed...)
	slices.SortFunc(x.ack.Applied, func(a, b wire.WorkerClock) int { return strings.Compare(a.Worker, b.Worker) })
	h := wire.Header{Job: x.cfg.Job, Sender: x.self, Clock: clock, Epoch: epoch, Seq: x.paramsOut.nextSeq(), Incarnation: x.paramsOut.inc}
	x.paramsFailed = append(x.paramsFailed[:0], make([]bool, len(x.paramsTopics))...)
	x.ps = sendState{ctx: ctx, kind: StreamParams, out: x.paramsOut, loop: x.cfg.LoopParams, topics: x.paramsTopics, failed: x.paramsFailed}
	n, err := x.paramsCodec.SplitParamsAck(h, &x.ack, x.cfg.Width, p, x.paramsEmit)
	pubErr := x.ps.err
	x.ps = sendState{}
	if err != nil {
		if n > 0 {
			x.cfg.Log.Error().Err(err).Int("parts", n).Msg("params split failed after emitting parts")
		}
		return fmt.Errorf("gossip: send params clock %d: %w", clock, err)
	}
	if pubErr != nil {
		return fmt.Errorf("%w: params clock %d (%d parts from seq %d): %w", ErrUnpublished, clock, n, h.Seq, pubErr)
	}
	return nil
}

func (x *Exchange) emitGrad(msg []byte) error   { return x.emit(&x.gs, msg) }
func (x *Exchange) emitParams(msg []byte) error { return x.emit(&x.ps, msg) }

// emit handles one encoded part: into the retransmit buffer, to the
// network (unless an earlier part failed to publish to that receiver: the
// rest stay buffered for repair), and to the local queue for loopback. It never
// fails, so a split always sequences every part.
func (x *Exchange) emit(s *sendState, msg []byte) error {
	if s.loop {
		x.pushLocal(item{kind: s.kind, from: x.self, src: srcLocal}, msg)
	}
	if s.local {
		return nil
	}
	buf := s.out.add(msg, &x.stats)
	if s.topics == nil {
		switch {
		case s.kind == StreamGrad && x.cfg.GradStreams:
			x.push(s.owner, PushProtocol, buf)
		case s.err == nil:
			s.err = x.publish(s.ctx, s.out.topic, buf)
		}
		return nil
	}
	if x.cfg.ParamsStreams {
		for _, p := range x.paramsPeers {
			x.push(p, ParamsPushProtocol, buf)
		}
		return nil
	}
	// Params: one publish per receiver; a receiver whose publish failed
	// gets no later part of this message either (it repairs them in order).
	for i, t := range s.topics {
		if s.failed[i] {
			continue
		}
		if err := x.publish(s.ctx, t, buf); err != nil {
			s.failed[i] = true
			if s.err == nil {
				s.err = err
			}
		}
	}
	return nil
}

// publish hands one buffered part to the transport, counting it.
func (x *Exchange) publish(ctx context.Context, topic string, buf []byte) error {
	if err := x.tr.Publish(ctx, topic, buf); err != nil {
		x.stats.publishErrors.Add(1)
		return err
	}
	x.stats.sent.Add(1)
	x.stats.sentBytes.Add(uint64(len(buf)))
	return nil
}

// gradStream returns the out-stream to owner, creating it.
func (x *Exchange) gradStream(owner string) *outStream {
	x.outMu.Lock()
	defer x.outMu.Unlock()
	s := x.gradOut[owner]
	if s == nil {
		s = x.newOutStream(GradTopic(x.cfg.Job, owner))
		x.gradOut[owner] = s
	}
	return s
}

// validate is the transport validator of the topic of kind. An accepted
// message's decoder goes with it to delivery, which then need not decode
// it again (and returns the decoder).
func (x *Exchange) validate(kind Stream, from string, msg []byte) (*decoder, error) {
	d := x.getDecoder()
	r, err := x.check(d.c, &d.m, kind, from, msg)
	if err != nil {
		x.putDecoder(d)
		x.stats.rejected[r].Add(1)
		return nil, fmt.Errorf("gossip: %s message from %s rejected (%s): %w", kind, from, r, err)
	}
	return d, nil
}

// getDecoder takes a free decoder or makes one.
func (x *Exchange) getDecoder() *decoder {
	select {
	case d := <-x.decoders:
		return d
	default:
		return &decoder{c: wire.NewCodec(wire.F32, wire.None, x.cfg.Wire.Limits)}
	}
}

// putDecoder keeps d for reuse unless enough are kept.
func (x *Exchange) putDecoder(d *decoder) {
	select {
	case x.decoders <- d:
	default:
	}
}

// check decodes msg into m and checks it belongs on the stream of kind
// from sender from. On error it returns the reason.
func (x *Exchange) check(c *wire.Codec, m *wire.Message, kind Stream, from string, msg []byte) (Reason, error) {
	if err := c.Decode(msg, m); err != nil {
		return reasonOf(err), err
	}
	switch {
	case m.Job != x.cfg.Job:
		return ReasonJob, fmt.Errorf("job %q, this is %q", m.Job, x.cfg.Job)
	case kind == StreamGrad && m.Kind != wire.KindGrad, kind == StreamParams && m.Kind != wire.KindParamsAck:
		return ReasonKind, fmt.Errorf("%s message on a %s topic", m.Kind, kind)
	case kind == StreamParams && m.Values != wire.F32:
		return ReasonKind, fmt.Errorf("params in %s: params travel as lossless f32", m.Values)
	case m.Sender != from:
		return ReasonSender, fmt.Errorf("header sender %q, sent by %q", m.Sender, from)
	case m.Width != x.cfg.Width:
		return ReasonWidth, fmt.Errorf("rows of width %d, model width %d", m.Width, x.cfg.Width)
	}
	if x.cfg.CheckEpoch != nil {
		if err := x.cfg.CheckEpoch(m.Kind, m.Sender, m.Epoch); err != nil {
			return ReasonEpoch, fmt.Errorf("epoch %d: %w", m.Epoch, err)
		}
	}
	return 0, nil
}
