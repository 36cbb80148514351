package gossip

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// Repair. A receiver that sees a gap in a stream (a later sequence number
// arrived first) holds the early messages and, after Config.RepairDelay,
// asks the sender over RepairProtocol for the missing range (one wire
// Fetch, naming the sender and the stream's topic). The sender answers
// with a FetchReply and the messages it still holds, framed; those that
// were evicted are listed as Gone. The replayed messages go through the
// same checks and sequencing as pubsub ones. At most one gap repair per
// stream is in flight: the delivery goroutine schedules it (wantRepair)
// and learns its end from a marker queued after the replayed messages
// (repairDone), then schedules another if a gap remains. Tail loss (no
// later message ever arrives) is repaired by Poke.

// wantRepair schedules a gap repair of st unless one is in flight or the
// stream is stalled on ErrGone. Delivery goroutine only.
func (x *Exchange) wantRepair(st *inStream) {
	if st.Err() != nil || !st.fetching.CompareAndSwap(false, true) {
		return
	}
	delay := x.cfg.RepairDelay
	for i := 0; i < st.failures && delay < x.cfg.RepairTimeout; i++ {
		delay *= 2
	}
	delay = min(delay, x.cfg.RepairTimeout)
	x.wg.Add(1)
	go x.repairGap(st, delay)
}

// repairGap runs one gap repair of st after delay.
func (x *Exchange) repairGap(st *inStream, delay time.Duration) {
	defer x.wg.Done()
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-x.ctx.Done():
			t.Stop()
			return
		}
	}
	select {
	case x.repairSem <- struct{}{}:
	case <-x.ctx.Done():
		return
	}
	marker := item{src: srcMarker, st: st, clear: true}
	from, lo := st.nextA.Load(), st.earlyMinA.Load()
	if lo != noEarly && lo > from {
		to := min(lo-1, from+uint64(x.cfg.Wire.Limits.MaxList)-1)
		_, marker.skip, marker.gone, marker.err = x.fetch(x.ctx, st, from, to)
	}
	<-x.repairSem
	x.enqueue(marker)
}

// repairDone processes the marker that ends a repair. Delivery goroutine only.
func (x *Exchange) repairDone(it item) {
	st := it.st
	if it.skip.inc == st.inc && it.skip.first > st.next {
		// The sender started sending this stream to this node at
		// skip.first (it joined later): nothing before is missing.
		x.cfg.Log.Debug().Str("from", st.from).Str("stream", st.kind.String()).
			Uint64("from_seq", st.next).Uint64("to_seq", it.skip.first).Msg("stream starts later: skipping")
		st.next = it.skip.first
		st.nextA.Store(st.next)
		lo := uint64(noEarly)
		for seq, e := range st.early {
			if seq < st.next {
				delete(st.early, seq)
				st.earlyBytes -= len(e.data)
			} else {
				lo = min(lo, seq)
			}
		}
		st.earlyMinA.Store(lo)
		x.drain(st)
	}
	if it.gone != nil && st.Err() == nil {
		st.setErr(it.gone)
		x.cfg.Log.Error().Err(it.gone).Msg("stream stalled")
		if x.h.Error != nil {
			x.h.Error(it.gone)
		}
	}
	if !it.clear {
		return // a Poke's marker: the gap repair's own marker will come
	}
	if it.err != nil {
		st.failures++
		x.cfg.Log.Warn().Err(it.err).Str("from", st.from).Str("stream", st.kind.String()).Int("failures", st.failures).Msg("repair failed, will retry")
	} else {
		st.failures = 0
	}
	st.fetching.Store(false)
	if len(st.early) > 0 && st.next < st.earlyMinA.Load() {
		x.wantRepair(st)
	}
}

// Poke asks peer for every message of its stream of kind after the last
// one delivered here: the repair of tail loss, which no later message
// reveals. The training loop calls it when a barrier has waited too long.
// It returns the number of messages fetched, once the delivery goroutine
// has handled them (so their handlers have run). An error wraps ErrGone if
// peer no longer holds some of them (in sync mode the stream cannot
// continue; in async mode see Skip), or ErrRepair. Like Sync, it must not
// be called from a handler.
func (x *Exchange) Poke(ctx context.Context, peer string, kind Stream) (int, error) {
	if x.closed.Load() {
		return 0, ErrClosed
	}
	if peer == x.self {
		return 0, nil // loopback never loses
	}
	st := x.stream(kind, peer)
	from := st.nextA.Load()
	n, skip, gone, err := x.fetch(ctx, st, from, from+uint64(x.cfg.Wire.Limits.MaxList)-1)
	if gone != nil || skip.first > 0 {
		x.enqueue(item{src: srcMarker, st: st, gone: gone, skip: skip})
	}
	if serr := x.Sync(ctx); err == nil && serr != nil {
		err = serr
	}
	switch {
	case gone != nil:
		return n, gone
	case err != nil:
		return n, err
	}
	return n, st.Err()
}

// fetch asks st's sender for sequence numbers from..to and queues the
// messages it returns for delivery. gone wraps ErrGone when the sender
// reported some as evicted; err wraps ErrRepair on any failure.
func (x *Exchange) fetch(ctx context.Context, st *inStream, from, to uint64) (n int, skip skipTo, gone, err error) {
	x.stats.repairRequests.Add(1)
	defer func() {
		if err != nil {
			x.stats.repairFailures.Add(1)
			err = fmt.Errorf("%w: %s stream of %s, seq %d..%d: %w", ErrRepair, st.kind, st.from, from, to, err)
		}
	}()
	d := x.getDecoder()
	defer x.putDecoder(d)
	req, err := d.c.AppendFetch(nil, wire.Header{Job: x.cfg.Job, Sender: x.self}, &wire.Fetch{Origin: st.from, Topic: st.topic, From: from, To: to})
	if err != nil {
		return 0, skip, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, x.cfg.RepairTimeout)
	defer cancel()
	rc, err := x.tr.Request(ctx, st.from, RepairProtocol, req)
	if err != nil {
		return 0, skip, nil, err
	}
	defer rc.Close()
	br := bufio.NewReader(rc)
	max := x.cfg.Wire.Limits.MaxMessage
	head, err := wire.ReadFrame(br, nil, max)
	if err != nil {
		return 0, skip, nil, fmt.Errorf("reply: %w", err)
	}
	m := &d.m
	if err := d.c.Decode(head, m); err != nil {
		return 0, skip, nil, fmt.Errorf("reply: %w", err)
	}
	r := &m.Reply
	switch {
	case m.Kind != wire.KindFetchReply:
		return 0, skip, nil, fmt.Errorf("reply is a %s message", m.Kind)
	case m.Job != x.cfg.Job || m.Sender != st.from:
		return 0, skip, nil, fmt.Errorf("reply from %q for job %q", m.Sender, m.Job)
	case r.Origin != st.from || r.Topic != st.topic || r.From != from || r.To != to:
		return 0, skip, nil, fmt.Errorf("reply for %s on %s %d..%d", r.Origin, r.Topic, r.From, r.To)
	}
	if r.First > from && r.Incarnation != 0 {
		skip = skipTo{inc: r.Incarnation, first: r.First}
	}
	if len(r.Gone) > 0 {
		x.stats.gone.Add(uint64(len(r.Gone)))
		gone = &GoneError{From: st.from, Stream: st.kind, msg: fmt.Sprintf("%v: %s stream of %s: %d of seq %d..%d evicted (first %d), %d messages still held",
			ErrGone, st.kind, st.from, len(r.Gone), from, to, r.Gone[0], r.Count)}
	}
	count := r.Count
	for i := uint64(0); i < count; i++ {
		msg, err := wire.ReadFrame(br, nil, max)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return n, skip, gone, fmt.Errorf("message %d of %d: %w", i+1, count, err)
		}
		if !x.enqueue(item{kind: st.kind, from: st.from, data: msg, src: srcRepair}) {
			return n, skip, gone, ErrClosed
		}
		n++
	}
	return n, skip, gone, nil
}

// serve answers a repair request: the requester's own grad stream from
// this node, or this node's params stream.
func (x *Exchange) serve(_ context.Context, from string, req []byte, w io.Writer) error {
	d := x.getDecoder()
	defer x.putDecoder(d)
	m := &d.m
	if err := d.c.Decode(req, m); err != nil {
		return fmt.Errorf("gossip: repair request from %s: %w", from, err)
	}
	f := m.Fetch
	switch {
	case m.Kind != wire.KindFetch:
		return fmt.Errorf("gossip: repair request from %s is a %s message", from, m.Kind)
	case m.Job != x.cfg.Job || m.Sender != from:
		return fmt.Errorf("gossip: repair request from %s says job %q sender %q", from, m.Job, m.Sender)
	case f.Origin != x.self:
		return fmt.Errorf("gossip: repair request from %s for %s's messages: only their sender serves them", from, f.Origin)
	}
	var out *outStream
	var first uint64 // grad streams start at 0 with their incarnation
	switch f.Topic {
	case ParamsTopic(x.cfg.Job, from):
		out = x.paramsOut
		first = x.paramsFirst(from)
	case GradTopic(x.cfg.Job, from):
		x.outMu.Lock()
		out = x.gradOut[from]
		x.outMu.Unlock()
	default:
		return fmt.Errorf("gossip: repair request from %s for topic %q: not a stream of ours it receives", from, f.Topic)
	}
	x.stats.served.Add(1)
	var body []byte
	var count uint64
	var gone []uint64
	var inc uint64
	if out != nil {
		inc = out.inc
		if lo := max(f.From, first); lo <= f.To {
			body, count, gone = out.collect(nil, lo, f.To, x.cfg.MaxReplyBytes, nil, wire.AppendFrame)
		}
	}
	x.stats.servedMsgs.Add(count)
	reply := wire.FetchReply{Origin: f.Origin, Topic: f.Topic, From: f.From, To: f.To, Count: count, Gone: gone, Incarnation: inc, First: first}
	head, err := d.c.AppendFetchReply(nil, wire.Header{Job: x.cfg.Job, Sender: x.self}, &reply)
	if err != nil {
		return fmt.Errorf("gossip: repair reply to %s: %w", from, err)
	}
	if _, err := w.Write(wire.AppendFrame(nil, head)); err != nil {
		return err
	}
	_, err = w.Write(body)
	return err
}
