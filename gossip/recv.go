package gossip

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// source says where an incoming item came from.
type source uint8

const (
	srcPubsub  source = iota // the transport's subscription
	srcRepair                // a repair reply
	srcLocal                 // loopback from this node
	srcMarker                // end of a repair: update the stream's repair state
	srcSkip                  // Exchange.Skip
	srcBarrier               // Exchange.Sync: close done
)

// item is one unit of work for the delivery goroutine.
type item struct {
	kind   Stream
	from   string
	data   []byte
	src    source
	pooled *[]byte       // data's pooled buffer (loopback), returned after use
	dec    *decoder      // data decoded and checked by the validator, returned after use
	st     *inStream     // markers and skips
	err    error         // marker: the repair's transport error
	gone   error         // marker: ErrGone
	skip   skipTo        // marker: the stream starts later for this node
	clear  bool          // marker: the stream's gap repair finished
	done   chan struct{} // barrier: closed when reached
}

// skipTo says that stream incarnation inc was sent to this node from
// sequence number first on (FetchReply.First).
type skipTo struct {
	inc, first uint64
}

type streamKey struct {
	kind Stream
	from string
}

// noEarly is earlyMin when nothing is held.
const noEarly = math.MaxUint64

// inStream is one incoming sequenced stream: one worker's gradients to
// this node, or one owner's params. The delivery goroutine owns every
// plain field; other goroutines (repairs, Poke) read the atomics.
type inStream struct {
	kind  Stream
	from  string
	topic string // the topic its messages are published on, named in a Fetch

	nextA     atomic.Uint64 // mirror of next
	earlyMinA atomic.Uint64 // lowest held early sequence number, noEarly if none
	fetching  atomic.Bool   // a gap repair is scheduled or in flight

	errMu sync.Mutex
	err   error // the ErrGone that stalled the stream, until Skip

	inc        uint64 // the sender's incarnation of the stream (0: none seen yet)
	next       uint64
	early      map[uint64]earlyMsg
	earlyBytes int
	failures   int  // consecutive failed gap repairs (backoff)
	floating   bool // after Skip with nothing held: accept the next message whatever its number
	resync     bool // drop parts until a part 0 starts a message
	partial    bool // a message is being assembled
	part       uint16
	parts      uint16
	grad       Grad
	params     Params
}

type earlyMsg struct {
	data []byte
	src  source
}

func (s *inStream) setErr(err error) {
	s.errMu.Lock()
	s.err = err
	s.errMu.Unlock()
}

// Err returns the error that stalled the stream (wrapping ErrGone), or nil.
func (s *inStream) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// stream returns the incoming stream of kind from from, creating it.
func (x *Exchange) stream(kind Stream, from string) *inStream {
	k := streamKey{kind, from}
	x.streamsMu.Lock()
	defer x.streamsMu.Unlock()
	s := x.streams[k]
	if s == nil {
		s = &inStream{kind: kind, from: from, early: make(map[uint64]earlyMsg)}
		s.earlyMinA.Store(noEarly)
		if kind == StreamGrad {
			s.topic = x.gradTopic
		} else {
			s.topic = x.paramsTopic
		}
		x.streams[k] = s
	}
	return s
}

// StreamErr returns the error that stalled the stream of kind from peer
// (wrapping ErrGone), or nil.
func (x *Exchange) StreamErr(peer string, kind Stream) error {
	x.streamsMu.Lock()
	s := x.streams[streamKey{kind, peer}]
	x.streamsMu.Unlock()
	if s == nil {
		return nil
	}
	return s.Err()
}

// NextSeq returns the sequence number the stream of kind from peer expects
// next (0 for a stream never heard from). Every number below it has been
// delivered or skipped.
func (x *Exchange) NextSeq(peer string, kind Stream) uint64 {
	x.streamsMu.Lock()
	s := x.streams[streamKey{kind, peer}]
	x.streamsMu.Unlock()
	if s == nil {
		return 0
	}
	return s.nextA.Load()
}

// Skip gives up on the hole in the stream of kind from peer after ErrGone
// (async mode: better to go on without the lost messages than to stop).
// The stream resumes at the first message held beyond the hole, or, with
// none held, at whatever message from peer arrives next; a message whose
// first parts are lost is dropped whole. Skip is carried out by the
// delivery goroutine after the items queued before it.
func (x *Exchange) Skip(peer string, kind Stream) error {
	if x.closed.Load() {
		return ErrClosed
	}
	x.pushLocal(item{src: srcSkip, st: x.stream(kind, peer)}, nil)
	return nil
}

// Sync returns once the delivery goroutine has handled every message the
// transport handed to this Exchange before the call (delivered, held or
// rejected), and every repaired message already queued; or when ctx ends.
// It must not be called from a handler (the delivery goroutine would wait
// for itself).
func (x *Exchange) Sync(ctx context.Context) error {
	done := make(chan struct{})
	if !x.enqueue(item{src: srcBarrier, done: done}) {
		return ErrClosed
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-x.ctx.Done():
		return ErrClosed
	}
}

// enqueue hands an item from the transport or a repair to the delivery
// goroutine, blocking while the inbox is full (backpressure: gossipsub then
// drops, and the drop is repaired).
func (x *Exchange) enqueue(it item) bool {
	select {
	case x.inbox <- it:
		return true
	case <-x.ctx.Done():
		return false
	}
}

// pushLocal queues a self-generated item; msg (may be nil) is copied into a
// pooled buffer. It never blocks, so a handler can send to itself.
func (x *Exchange) pushLocal(it item, msg []byte) {
	if msg != nil {
		b := x.bufs.Get().(*[]byte)
		*b = append((*b)[:0], msg...)
		it.data, it.pooled = *b, b
	}
	x.localMu.Lock()
	x.local = append(x.local, it)
	x.localMu.Unlock()
	select {
	case x.localWake <- struct{}{}:
	default:
	}
}

// deliverLoop is the delivery goroutine: every incoming message is
// decoded, sequenced, reassembled and handed to the handlers here.
func (x *Exchange) deliverLoop() {
	defer x.wg.Done()
	var batch []item
	for {
		select {
		case it := <-x.inbox:
			x.handle(it)
		case <-x.localWake:
			x.localMu.Lock()
			batch, x.local = x.local, batch[:0]
			x.localMu.Unlock()
			for i := range batch {
				x.handle(batch[i])
				batch[i] = item{}
			}
		case <-x.ctx.Done():
			return
		}
	}
}

func (x *Exchange) handle(it item) {
	switch it.src {
	case srcMarker:
		x.repairDone(it)
	case srcSkip:
		x.skip(it.st)
	case srcBarrier:
		close(it.done)
	default:
		x.receive(it)
	}
	if it.pooled != nil {
		x.bufs.Put(it.pooled)
	}
	if it.dec != nil {
		x.putDecoder(it.dec)
	}
}

// receive checks one message and sequences it.
func (x *Exchange) receive(it item) {
	m := &x.rxMsg
	if it.dec != nil {
		m = &it.dec.m // the validator decoded and checked it
	} else if r, err := x.check(x.rx, m, it.kind, it.from, it.data); err != nil {
		x.stats.rejected[r].Add(1)
		x.cfg.Log.Debug().Err(err).Str("from", it.from).Str("stream", it.kind.String()).Str("reason", r.String()).Msg("message rejected")
		return
	}
	st := x.stream(it.kind, it.from)
	if m.Incarnation != st.inc {
		if m.Incarnation < st.inc {
			x.stats.duplicates.Add(1) // from a stream the sender has since started again
			return
		}
		x.restart(st, m.Incarnation)
	}
	seq := m.Seq
	if st.floating && seq >= st.next {
		st.floating = false
		st.next = seq
	}
	switch {
	case seq < st.next:
		x.stats.duplicates.Add(1)
		return
	case seq > st.next:
		x.hold(st, seq, it)
		return
	}
	x.accept(st, m, it.src, len(it.data))
	x.drain(st)
}

// restart starts st again for the sender's new incarnation inc: the
// sender restarted, or started a new stream to this node. Nothing of the
// old one is wanted any more.
func (x *Exchange) restart(st *inStream, inc uint64) {
	if st.inc != 0 {
		x.cfg.Log.Info().Str("from", st.from).Str("stream", st.kind.String()).Uint64("at_seq", st.next).Msg("the sender started its stream again")
	}
	st.inc = inc
	st.next = 0
	st.nextA.Store(0)
	clear(st.early)
	st.earlyBytes = 0
	st.earlyMinA.Store(noEarly)
	st.failures = 0
	st.floating, st.resync, st.partial = false, false, false
	st.setErr(nil)
}

// hold keeps a message that arrived ahead of a gap and schedules a repair.
func (x *Exchange) hold(st *inStream, seq uint64, it item) {
	if _, ok := st.early[seq]; !ok {
		if len(st.early) >= x.cfg.EarlyMessages || st.earlyBytes+len(it.data) > x.cfg.EarlyBytes {
			x.stats.earlyDropped.Add(1)
		} else {
			data := it.data
			if it.pooled != nil {
				data = append([]byte(nil), data...) // the pooled buffer goes back after this item
			}
			st.early[seq] = earlyMsg{data: data, src: it.src}
			st.earlyBytes += len(data)
			x.stats.early.Add(1)
			if seq < st.earlyMinA.Load() {
				st.earlyMinA.Store(seq)
			}
		}
	} else {
		x.stats.duplicates.Add(1)
	}
	x.wantRepair(st)
}

// drain delivers held messages that are now in sequence.
func (x *Exchange) drain(st *inStream) {
	changed := false
	for len(st.early) > 0 {
		e, ok := st.early[st.next]
		if !ok {
			break
		}
		delete(st.early, st.next)
		st.earlyBytes -= len(e.data)
		changed = true
		m := &x.rxMsg
		if r, err := x.check(x.rx, m, st.kind, st.from, e.data); err != nil {
			// It passed when it arrived; only CheckEpoch can change its mind.
			x.stats.rejected[r].Add(1)
			x.cfg.Log.Warn().Err(err).Str("from", st.from).Uint64("seq", st.next).Msg("held message rejected on delivery")
			break
		}
		x.accept(st, m, e.src, len(e.data))
	}
	if changed {
		lo := uint64(noEarly)
		for s := range st.early {
			lo = min(lo, s)
		}
		st.earlyMinA.Store(lo)
	}
	if len(st.early) > 0 && st.next < st.earlyMinA.Load() {
		x.wantRepair(st)
	}
}

// accept takes the in-sequence part m: it advances the stream, adds the
// part to the message being assembled and delivers the message when its
// last part is in. Parts that break the protocol drop their message.
func (x *Exchange) accept(st *inStream, m *wire.Message, src source, size int) {
	st.next++
	st.nextA.Store(st.next)
	x.stats.recv.Add(1)
	x.stats.recvBytes.Add(uint64(size))
	if src == srcRepair {
		x.stats.repaired.Add(1)
	}
	if m.Part == 0 {
		if st.partial {
			x.violation(st, m, fmt.Errorf("a new message starts at seq %d before the last one's %d parts are in", m.Seq, st.parts))
		}
		st.partial, st.resync = true, false
		st.part, st.parts = 0, m.Parts
		switch st.kind {
		case StreamGrad:
			g := &st.grad
			g.From, g.Clock, g.Epoch, g.Seq, g.Parts = st.from, m.Clock, m.Epoch, m.Seq, int(m.Parts)
			g.Examples, g.Values = m.Examples, m.Values
			g.Rows.Idx = append(g.Rows.Idx[:0], m.Sparse.Idx...)
			g.Rows.Val = append(g.Rows.Val[:0], m.Sparse.Val...)
		case StreamParams:
			p := &st.params
			p.From, p.Clock, p.Epoch, p.Seq, p.Parts = st.from, m.Clock, m.Epoch, m.Seq, int(m.Parts)
			p.Ack.Through = m.Ack.Through
			p.Ack.Applied = append(p.Ack.Applied[:0], m.Ack.Applied...)
			p.Ack.Force = m.Ack.Force
			c := &m.Ack.Config
			p.Ack.Config.ID, p.Ack.Config.Start, p.Ack.Config.Checkpoint = c.ID, c.Start, c.Checkpoint
			p.Ack.Config.Members = append(p.Ack.Config.Members[:0], c.Members...)
			p.Ack.Config.Crashed = append(p.Ack.Config.Crashed[:0], c.Crashed...)
			p.Rows.Idx = append(p.Rows.Idx[:0], m.Sparse.Idx...)
			p.Rows.Val = append(p.Rows.Val[:0], m.Sparse.Val...)
		}
	} else {
		if st.resync {
			return // the message's first parts were skipped
		}
		if err := x.continues(st, m); err != nil {
			x.violation(st, m, err)
			st.partial, st.resync = false, true
			return
		}
		st.part = m.Part
		rows := &st.grad.Rows
		if st.kind == StreamParams {
			rows = &st.params.Rows
		}
		rows.Idx = append(rows.Idx, m.Sparse.Idx...)
		rows.Val = append(rows.Val, m.Sparse.Val...)
	}
	if m.Part+1 < m.Parts {
		return
	}
	st.partial = false
	x.stats.delivered.Add(1)
	switch st.kind {
	case StreamGrad:
		if x.h.Grad != nil {
			x.h.Grad(&st.grad)
		}
	case StreamParams:
		if x.h.Params != nil {
			x.h.Params(&st.params)
		}
	}
}

// continues checks that part m (> 0) continues the message in assembly.
func (x *Exchange) continues(st *inStream, m *wire.Message) error {
	if !st.partial {
		return fmt.Errorf("part %d of %d at seq %d, no message in assembly", m.Part, m.Parts, m.Seq)
	}
	if m.Part != st.part+1 || m.Parts != st.parts {
		return fmt.Errorf("part %d of %d at seq %d, expected part %d of %d", m.Part, m.Parts, m.Seq, st.part+1, st.parts)
	}
	var clock, epoch uint64
	var rows []uint32
	switch st.kind {
	case StreamGrad:
		clock, epoch, rows = st.grad.Clock, st.grad.Epoch, st.grad.Rows.Idx
		if m.Examples != st.grad.Examples {
			return fmt.Errorf("part %d at seq %d says %d examples, part 0 said %d", m.Part, m.Seq, m.Examples, st.grad.Examples)
		}
	case StreamParams:
		clock, epoch, rows = st.params.Clock, st.params.Epoch, st.params.Rows.Idx
		if m.Ack.Through != st.params.Ack.Through || len(m.Ack.Applied) != len(st.params.Ack.Applied) {
			return fmt.Errorf("part %d at seq %d carries another ack than part 0", m.Part, m.Seq)
		}
	}
	if m.Clock != clock || m.Epoch != epoch {
		return fmt.Errorf("part %d at seq %d has clock %d epoch %d, part 0 had %d, %d", m.Part, m.Seq, m.Clock, m.Epoch, clock, epoch)
	}
	if len(rows) > 0 && len(m.Sparse.Idx) > 0 && m.Sparse.Idx[0] <= rows[len(rows)-1] {
		return fmt.Errorf("part %d at seq %d starts at row %d, not after the previous part's %d", m.Part, m.Seq, m.Sparse.Idx[0], rows[len(rows)-1])
	}
	return nil
}

func (x *Exchange) violation(st *inStream, m *wire.Message, err error) {
	x.stats.rejected[ReasonProtocol].Add(1)
	err = fmt.Errorf("%w: %s stream of %s: %w", ErrProtocol, st.kind, st.from, err)
	x.cfg.Log.Warn().Err(err).Msg("message dropped")
	if x.h.Error != nil {
		x.h.Error(err)
	}
}

// skip carries out Exchange.Skip on the delivery goroutine.
func (x *Exchange) skip(st *inStream) {
	st.setErr(nil)
	st.failures = 0
	st.partial, st.resync = false, true
	if lo := st.earlyMinA.Load(); lo != noEarly {
		if lo > st.next {
			st.next = lo
			st.nextA.Store(lo)
		}
		x.drain(st)
		return
	}
	st.floating = true
}
