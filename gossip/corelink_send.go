package gossip

import (
	"context"
	"math/rand/v2"
	"time"
)

// A destination's sender goroutine: it writes the queue to the peer's
// stream, small messages together, reopening the stream with backoff.

// sender writes d's queue to d's peer until the link closes or the queue
// stays empty for coreIdle. Small messages are written together.
func (l *CoreLink) sender(d *coreDest) {
	defer l.wg.Done()
	defer l.closeStream(d)
	idle := time.NewTimer(l.idle)
	defer idle.Stop()
	var carry *[]byte
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case first = <-d.ch:
			case <-idle.C:
				if l.retire(d) {
					return
				}
				idle.Reset(l.idle)
				continue
			case <-l.ctx.Done():
				return
			}
		}
		d.bytes.Add(-int64(len(*first)))
		out, n, batched := *first, 1, false
		if len(out) < coreBatch {
			batched = true
			d.batch = append(d.batch[:0], out...)
			l.putBuf(first)
		collect:
			for len(d.batch) < coreBatch {
				select {
				case b := <-d.ch:
					if len(d.batch)+len(*b) > coreBatch {
						carry = b
						break collect
					}
					d.bytes.Add(-int64(len(*b)))
					d.batch = append(d.batch, *b...)
					l.putBuf(b)
					n++
				default:
					break collect
				}
			}
			out = d.batch
		}
		l.write(d, out, n)
		l.unsent.Add(-int64(n))
		if !batched {
			l.putBuf(first)
		}
		if !idle.Stop() {
			select {
			case <-idle.C:
			default:
			}
		}
		idle.Reset(l.idle)
	}
}

// retire removes an idle destination, unless a message arrived.
func (l *CoreLink) retire(d *coreDest) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.ch) > 0 {
		return false
	}
	d.gone = true
	if l.dests[d.peer] == d {
		delete(l.dests, d.peer)
	}
	return true
}

// write writes out (n messages) to d's stream, opening one if needed; a
// failed write is tried once more on a new stream (the peer may have
// restarted, or the connection dropped and came back), then the messages
// are dropped.
func (l *CoreLink) write(d *coreDest, out []byte, n int) {
	opens, writes := 0, 0
	for l.ctx.Err() == nil {
		if d.w == nil && !l.open(d) {
			// A peer that is starting has no handler yet: try a few
			// times (0, 50, 100, 200 ms of backoff) before dropping.
			if opens++; opens >= coreOpenTries {
				break
			}
			continue
		}
		_, err := d.w.Write(out)
		if err == nil {
			d.backoff = 0
			l.c.sent.Add(uint64(n))
			l.c.sentBytes.Add(uint64(len(out)))
			return
		}
		l.cfg.Log.Debug().Err(err).Str("peer", d.peer).Msg("core link: write failed; reopening the stream")
		l.closeStream(d)
		l.failed(d)
		if writes++; writes >= 2 {
			break
		}
	}
	l.c.sendErrors.Add(uint64(n))
}

// open opens a stream to d's peer, after d's backoff.
func (l *CoreLink) open(d *coreDest) bool {
	if wait := time.Until(d.next); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-l.ctx.Done():
			t.Stop()
			return false
		}
	}
	ctx, cancel := context.WithTimeout(l.ctx, coreOpenTimeout)
	w, err := l.tr.OpenStream(ctx, d.peer, CoreProtocol)
	cancel()
	if err != nil {
		l.cfg.Log.Debug().Err(err).Str("peer", d.peer).Dur("backoff", d.backoff).Msg("core link: cannot open a stream")
		l.failed(d)
		return false
	}
	l.c.streamsOpened.Add(1)
	d.w = w
	d.stop = context.AfterFunc(l.ctx, func() { w.Close() })
	return true
}

// failed schedules d's next attempt: at once after a first failure, then
// after a doubling backoff with jitter.
func (l *CoreLink) failed(d *coreDest) {
	d.next = time.Now().Add(d.backoff + time.Duration(rand.Int64N(int64(d.backoff/4)+1)))
	d.backoff = min(max(2*d.backoff, coreBackoffMin), coreBackoffMax)
}

// closeStream closes d's stream, unless Close's AfterFunc did.
func (l *CoreLink) closeStream(d *coreDest) {
	if d.w == nil {
		return
	}
	if d.stop() {
		d.w.Close()
	}
	d.w, d.stop = nil, nil
}
