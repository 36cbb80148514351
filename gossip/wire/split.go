package wire

import (
	"errors"
	"fmt"

	"github.com/gossiptrain/gossiptrain/model"
)

// SplitGrad encodes s as Grad messages of at most Limits.MaxMessage bytes
// each and calls emit with every one, in order. It never drops a row: the
// parts' rows, concatenated, are s. Sizes are exact, not estimated: a run
// of rows is encoded and, if the message would be too large, halved until it
// fits; the next part starts with the run length that last fitted. A body
// that fits whole is measured with its real header, so it is split only if
// it would really exceed the limit; the parts of a split body are measured
// with the widest Part/Parts header (at most 4 bytes more). A single row too
// large for a message is ErrTooLarge.
//
// Part i is sent with Part = i, Parts = n and Seq = h.Seq + i (callers
// advance their sequence counter by the returned n). Every part carries the
// full examples count: receivers count it once per (sender, clock), when
// they have all Parts. Error feedback (SetFeedback) is applied to each part
// as it is emitted.
//
// msg is only valid during the call to emit (it is the codec's buffer); an
// error from emit stops the split and is returned with the parts emitted.
// A body that fits is encoded once; a split body is encoded twice (once to
// find the cuts, once to emit).
func (c *Codec) SplitGrad(h Header, examples, width int, s *model.Sparse, emit func(msg []byte) error) (int, error) {
	return c.split(KindGrad, h, examples, nil, width, s, emit)
}

// SplitParams is SplitGrad for Params messages.
func (c *Codec) SplitParams(h Header, width int, s *model.Sparse, emit func(msg []byte) error) (int, error) {
	return c.split(KindParams, h, 0, nil, width, s, emit)
}

// SplitParamsAck is SplitGrad for ParamsAck messages: every part carries
// the whole Ack a, so each part costs its size and a receiver can read the
// owner's progress from any part.
func (c *Codec) SplitParamsAck(h Header, a *Ack, width int, s *model.Sparse, emit func(msg []byte) error) (int, error) {
	return c.split(KindParamsAck, h, 0, a, width, s, emit)
}

func (c *Codec) split(kind Kind, h Header, examples int, ack *Ack, width int, s *model.Sparse, emit func([]byte) error) (int, error) {
	hl, err := c.maxHeaderLen(&h, kind)
	if err != nil {
		return 0, err
	}
	one := h // the header of a body that fits whole: Part 0 of 1
	one.Part, one.Parts = 0, 1
	c.hdr, _ = c.appendHeader(c.hdr[:0], &one, kind, 0)
	hl1 := len(c.hdr)
	n := s.Len()
	chunk := n
	if width >= 1 {
		chunk = max(1, min(n, c.lim.MaxRows, c.lim.MaxValues/width))
	}
	c.cuts = c.cuts[:0]
	var body []byte
	var flags byte
	for lo := 0; ; {
		hi := min(lo+chunk, n)
		for {
			body, flags, err = c.sparseBody(kind, examples, ack, width, s, lo, hi)
			size := hl + len(body)
			if lo == 0 && hi == n {
				size = hl1 + len(body) // exact: the only part
			}
			if err == nil && size <= c.lim.MaxMessage {
				break
			}
			if err != nil && !errors.Is(err, ErrTooLarge) {
				return 0, err
			}
			if hi-lo <= 1 {
				if err == nil {
					err = fmt.Errorf("%w: encode %s: row %d alone takes %d bytes, limit %d", ErrTooLarge, kind, lo, size, c.lim.MaxMessage)
				}
				return 0, err
			}
			hi = lo + (hi-lo)/2
		}
		c.cuts = append(c.cuts, hi)
		chunk, lo = hi-lo, hi
		if lo >= n {
			break
		}
	}
	parts := len(c.cuts)
	if parts > 65535 {
		return 0, fmt.Errorf("%w: encode %s: %d parts, limit 65535", ErrTooLarge, kind, parts)
	}
	if parts == 1 {
		// The last trial is the message.
		if c.out, err = c.assemble(c.out[:0], &one, kind, flags, body); err != nil {
			return 0, err
		}
		return 1, emit(c.out)
	}
	base := h.Seq
	lo := 0
	for i, hi := range c.cuts {
		body, flags, err = c.sparseBody(kind, examples, ack, width, s, lo, hi)
		if err != nil {
			return i, err
		}
		h.Part, h.Parts, h.Seq = uint16(i), uint16(parts), base+uint64(i)
		if c.out, err = c.assemble(c.out[:0], &h, kind, flags, body); err != nil {
			return i, err
		}
		if err = emit(c.out); err != nil {
			return i, err
		}
		lo = hi
	}
	return parts, nil
}
