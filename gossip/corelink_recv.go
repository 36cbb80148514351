package gossip

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// The receiving side: one reader per incoming stream checks every frame,
// joins parts, decodes, and queues messages for the delivery goroutine.

// serve reads one peer's incoming stream: the transport's handler.
func (l *CoreLink) serve(from string, r io.ReadCloser) {
	in := &coreIn{r: r}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		r.Close()
		return
	}
	// A sender keeps one stream to each receiver: a new one replaces the
	// old, which its sender gave up (a dropped connection, a restart).
	if old := l.ins[from]; old != nil {
		old.r.Close()
	}
	l.ins[from] = in
	l.wg.Add(1)
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		if l.ins[from] == in {
			delete(l.ins, from)
		}
		l.mu.Unlock()
		l.wg.Done()
	}()
	rd := &coreReader{l: l, from: from, br: bufio.NewReaderSize(r, 64<<10), dec: l.newDecoder()}
	if rd.loop() {
		r.Close() // before counting: who sees the count sees the reset
		l.c.streamResets.Add(1)
	}
}

func (l *CoreLink) newDecoder() *wire.Codec {
	return wire.NewCodec(wire.F32, wire.None, l.cfg.Limits)
}

// reject counts and logs a refused message.
func (l *CoreLink) reject(from string, r Reason, err error) {
	l.c.rejected[r].Add(1)
	l.cfg.Log.Debug().Err(err).Str("peer", from).Stringer("reason", r).Msg("core link: message refused")
}

// coreReader reads one incoming stream.
type coreReader struct {
	l     *CoreLink
	from  string
	br    *bufio.Reader
	dec   *wire.Codec
	frame []byte

	// A message in parts being joined: its first part's header, the body
	// so far, the next part expected (0: none under way), its frame bytes.
	ah    wire.Header
	asm   []byte
	next  uint16
	bytes int
}

// errStream is an I/O error of the stream itself (a reset, a closed
// connection): the stream ends, and no message is blamed.
type errStream struct{ err error }

func (e errStream) Error() string { return e.err.Error() }

// loop reads frames until the stream ends (false) or breaks the protocol
// (true: reset it).
func (rd *coreReader) loop() bool {
	for rd.l.ctx.Err() == nil {
		frame, n, err := rd.readFrame()
		if err != nil {
			var se errStream
			switch {
			case errors.Is(err, io.EOF):
				return false
			case errors.As(err, &se):
				rd.l.cfg.Log.Debug().Err(err).Str("peer", rd.from).Msg("core link: stream ended")
				return false
			}
			rd.l.reject(rd.from, reasonOf(err), err)
			return true
		}
		if rd.handle(frame, n) {
			return true
		}
	}
	return false
}

// readFrame reads the next frame: io.EOF at a clean end between frames,
// an errStream when the stream fails, a wire error (ErrTooLarge,
// ErrMalformed) when the peer breaks the framing. A length is checked
// before anything is read or allocated for it.
func (rd *coreReader) readFrame() ([]byte, int, error) {
	var n uint64
	k := 0
	for shift := uint(0); ; shift += 7 {
		c, err := rd.br.ReadByte()
		if err != nil {
			if err == io.EOF && k == 0 {
				return nil, 0, io.EOF
			}
			if err == io.EOF {
				return nil, 0, fmt.Errorf("%w: stream ends inside a frame length", wire.ErrMalformed)
			}
			return nil, 0, errStream{err}
		}
		k++
		if k > binary.MaxVarintLen64 || k == binary.MaxVarintLen64 && c > 1 {
			return nil, 0, fmt.Errorf("%w: frame length overflows", wire.ErrMalformed)
		}
		n |= uint64(c&0x7f) << shift
		if c < 0x80 {
			break
		}
	}
	lim := rd.l.cfg.Limits.MaxMessage
	switch {
	case n > uint64(lim):
		return nil, 0, fmt.Errorf("%w: frame of %d bytes, limit %d", wire.ErrTooLarge, n, lim)
	case n == 0:
		return nil, 0, fmt.Errorf("%w: empty frame", wire.ErrMalformed)
	}
	if cap(rd.frame) < int(n) {
		rd.frame = make([]byte, n, max(int(n), min(2*cap(rd.frame), lim)))
	}
	f := rd.frame[:n]
	if _, err := io.ReadFull(rd.br, f); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, 0, fmt.Errorf("%w: stream ends inside a frame of %d bytes", wire.ErrMalformed, n)
		}
		return nil, 0, errStream{err}
	}
	return f, k + int(n), nil
}

// handle checks one frame and delivers its message (or its last part's):
// true when the frame breaks the stream's protocol (reset it). A message
// whose header is right but whose body is not is refused alone.
func (rd *coreReader) handle(frame []byte, n int) bool {
	l := rd.l
	h, body, err := rd.dec.CoreChunk(frame)
	if err != nil {
		l.reject(rd.from, reasonOf(err), err)
		return true
	}
	switch {
	case h.Job != l.cfg.Job:
		l.reject(rd.from, ReasonJob, fmt.Errorf("job %q, this link's is %q", h.Job, l.cfg.Job))
		return true
	case h.Sender != rd.from:
		l.reject(rd.from, ReasonSender, fmt.Errorf("header names sender %q on %s's stream", h.Sender, rd.from))
		return true
	}
	if h.Parts == 1 {
		if rd.next != 0 {
			l.reject(rd.from, ReasonProtocol, fmt.Errorf("%w: a whole message inside message %d's parts", ErrProtocol, rd.ah.Seq))
			return true
		}
		return rd.decode(&h, body, l.cfg.Limits.MaxMessage, n)
	}
	if h.Part == 0 {
		if rd.next != 0 {
			l.reject(rd.from, ReasonProtocol, fmt.Errorf("%w: message %d starts inside message %d's parts", ErrProtocol, h.Seq, rd.ah.Seq))
			return true
		}
		rd.ah, rd.asm, rd.bytes = h, rd.asm[:0], 0
	} else if h.Part != rd.next || h.Seq != rd.ah.Seq || h.Parts != rd.ah.Parts || h.Values != rd.ah.Values || h.Compress != rd.ah.Compress {
		l.reject(rd.from, ReasonProtocol, fmt.Errorf("%w: part %d/%d of message %d, expected part %d/%d of message %d",
			ErrProtocol, h.Part, h.Parts, h.Seq, rd.next, rd.ah.Parts, rd.ah.Seq))
		return true
	}
	if len(rd.asm)+len(body) > l.cfg.MaxBody {
		l.reject(rd.from, ReasonTooLarge, fmt.Errorf("%w: message %d's parts exceed %d bytes (MaxBody)", wire.ErrTooLarge, h.Seq, l.cfg.MaxBody))
		return true
	}
	if need := len(rd.asm) + len(body); need > cap(rd.asm) {
		// Grow by doubling, as bytes arrive, never past MaxBody: a
		// claimed part count allocates nothing.
		b := make([]byte, len(rd.asm), min(max(need, 2*cap(rd.asm)), l.cfg.MaxBody))
		copy(b, rd.asm)
		rd.asm = b
	}
	rd.asm = append(rd.asm, body...)
	rd.bytes += n
	rd.next = h.Part + 1
	if rd.next < h.Parts {
		return false
	}
	rd.next = 0
	brk := rd.decode(&rd.ah, rd.asm, l.cfg.MaxBody, rd.bytes)
	if cap(rd.asm) > coreBigBody {
		rd.asm = nil
	}
	return brk
}

// decode decodes and checks a body and queues its message for deliver. A
// bad body is refused and counted; the stream goes on.
func (rd *coreReader) decode(h *wire.Header, body []byte, maxBody, n int) bool {
	l := rd.l
	m := new(wire.Core)
	err := rd.dec.DecodeCoreBody(*h, body, maxBody, m)
	if err == nil {
		err = m.Check(l.cfg.Limits)
	}
	if len(body) > coreBigBody {
		rd.dec = l.newDecoder() // drop the scratch a large body grew
	}
	if err != nil {
		l.reject(rd.from, reasonOf(err), err)
		return false
	}
	select {
	case l.in <- coreItem{from: rd.from, msg: m, bytes: n}:
	case <-l.ctx.Done():
	}
	return false
}
