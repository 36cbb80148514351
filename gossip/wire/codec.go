package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Codec encodes and decodes messages with reusable buffers: once its
// buffers have grown to the largest message seen, encoding into a reused
// dst and decoding into a reused Message allocate nothing.
//
// A Codec is NOT safe for concurrent use: keep one per goroutine (its zstd
// encoder and decoder are created on first use and kept).
type Codec struct {
	values   Values
	compress Compress
	lim      Limits
	fb       *Feedback

	raw    []byte // body before compression (encode), after decompression (decode)
	comp   []byte // compressed body (encode)
	out    []byte // messages emitted by Split*
	hdr    []byte // scratch header for size trials
	cuts   []int  // part boundaries found by Split*
	w      bitWriter
	r      bitReader
	pend   pending // feedback to commit once a message is produced
	intern map[string]string

	// sparse scratch
	bm     [64]uint64
	rank   [1 << maxResidueBits]uint32
	res    [1 << maxResidueBits]uint32
	gaps   []uint64
	vals   []float32
	newRes []float32
	half   []uint16
	q      []int8
	huff   huffEnc
	hdec   huffDec

	decValues Values // value format of the message being decoded

	zenc *zstd.Encoder
	zdec *zstd.Decoder
}

// pending is a feedback update that becomes true once its message is out.
type pending struct {
	idx   []uint32
	width int
}

// internMax bounds the interned strings (job names, peer IDs, addresses) a
// codec keeps so that repeated strings decode without allocating.
const internMax = 4096

// NewCodec returns a codec that encodes values as v and compresses bodies
// with c, within lim. It panics if v, c or lim is invalid: check them with
// Config.Validate (Config.NewCodec does) when they come from a user.
func NewCodec(v Values, c Compress, lim Limits) *Codec {
	cfg := Config{Values: v, Compress: c, Limits: lim}
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("wire.NewCodec: %v", err))
	}
	return &Codec{values: v, compress: c, lim: lim, intern: make(map[string]string)}
}

// Values returns the value format the codec encodes with.
func (c *Codec) Values() Values { return c.values }

// Compress returns the compressor the codec encodes with.
func (c *Codec) Compress() Compress { return c.compress }

// Limits returns the codec's limits.
func (c *Codec) Limits() Limits { return c.lim }

// SetFeedback makes Grad encodes add fb's residuals to each row before
// quantising and store the new residuals, only for messages actually
// produced (an encode that fails or is too large leaves fb unchanged).
// nil turns feedback off.
func (c *Codec) SetFeedback(fb *Feedback) { c.fb = fb }

// AppendGrad appends a Grad message carrying rows s (Width values each,
// summed over examples examples) to dst. It fails with ErrTooLarge if the
// message would exceed Limits.MaxMessage; SplitGrad cuts it into parts.
// On error dst is returned unchanged.
func (c *Codec) AppendGrad(dst []byte, h Header, examples, width int, s *model.Sparse) ([]byte, error) {
	body, flags, err := c.sparseBody(KindGrad, examples, nil, width, s, 0, s.Len())
	if err != nil {
		return dst, err
	}
	return c.assemble(dst, &h, KindGrad, flags, body)
}

// AppendParams appends a Params message carrying an owner's new values for
// rows s. Like AppendGrad, but no example count and no error feedback.
func (c *Codec) AppendParams(dst []byte, h Header, width int, s *model.Sparse) ([]byte, error) {
	body, flags, err := c.sparseBody(KindParams, 0, nil, width, s, 0, s.Len())
	if err != nil {
		return dst, err
	}
	return c.assemble(dst, &h, KindParams, flags, body)
}

// AppendParamsAck appends a ParamsAck message: an owner's new values for
// rows s, like AppendParams, plus its progress a. a.Applied must be
// strictly ascending by Worker (ErrMalformed otherwise) and hold at most
// Limits.MaxList entries (ErrTooLarge).
func (c *Codec) AppendParamsAck(dst []byte, h Header, a *Ack, width int, s *model.Sparse) ([]byte, error) {
	body, flags, err := c.sparseBody(KindParamsAck, 0, a, width, s, 0, s.Len())
	if err != nil {
		return dst, err
	}
	return c.assemble(dst, &h, KindParamsAck, flags, body)
}

// appendAck appends the Ack section of a ParamsAck body:
//
//	uvarint through, uvarint n, n x (string worker, uvarint clock)
func (c *Codec) appendAck(dst []byte, a *Ack) ([]byte, error) {
	if len(a.Applied) > c.lim.MaxList {
		return dst, fmt.Errorf("%w: ack of %d workers, limit %d", ErrTooLarge, len(a.Applied), c.lim.MaxList)
	}
	dst = binary.AppendUvarint(dst, a.Through)
	dst = binary.AppendUvarint(dst, uint64(len(a.Applied)))
	for i, wc := range a.Applied {
		if len(wc.Worker) > c.lim.MaxString {
			return dst, fmt.Errorf("%w: ack worker %d of %d bytes, limit %d", ErrTooLarge, i, len(wc.Worker), c.lim.MaxString)
		}
		if i > 0 && wc.Worker <= a.Applied[i-1].Worker {
			return dst, fmt.Errorf("%w: ack worker %d %q not after %q (want strictly ascending)", ErrMalformed, i, wc.Worker, a.Applied[i-1].Worker)
		}
		dst = appendString(dst, wc.Worker)
		dst = binary.AppendUvarint(dst, wc.Clock)
	}
	dst, err := c.appendConfig(dst, &a.Config)
	if err != nil {
		return dst, err
	}
	var flags byte
	if a.Force {
		flags |= ackForce
	}
	return append(dst, flags), nil
}

// ackForce is bit 0 of the Ack's flags byte: Ack.Force. The other bits are
// reserved and must be 0.
const ackForce = 1

// appendConfig appends a TrainConfig: its ID, and when not 0 the rest.
func (c *Codec) appendConfig(dst []byte, cf *TrainConfig) ([]byte, error) {
	dst = binary.AppendUvarint(dst, cf.ID)
	if cf.ID == 0 {
		return dst, nil
	}
	dst = binary.AppendUvarint(dst, cf.Start)
	dst = binary.AppendUvarint(dst, cf.Checkpoint)
	for _, l := range [][]string{cf.Members, cf.Crashed} {
		for i := 1; i < len(l); i++ {
			if l[i] <= l[i-1] {
				return dst, fmt.Errorf("%w: config list entry %d %q not after %q (want strictly ascending)", ErrMalformed, i, l[i], l[i-1])
			}
		}
	}
	var err error
	if dst, err = c.appendList(dst, "config members", cf.Members); err != nil {
		return dst, err
	}
	return c.appendList(dst, "config crashed", cf.Crashed)
}

// config reads a TrainConfig written by appendConfig.
func (r *cursor) config(cf *TrainConfig) {
	cf.ID = r.uvarint("config id")
	if cf.ID == 0 || r.err != nil {
		cf.Start, cf.Checkpoint = 0, 0
		cf.Members, cf.Crashed = cf.Members[:0], cf.Crashed[:0]
		return
	}
	cf.Start = r.uvarint("config start")
	cf.Checkpoint = r.uvarint("config checkpoint")
	cf.Members = r.list("config members", cf.Members)
	cf.Crashed = r.list("config crashed", cf.Crashed)
	for _, l := range [][]string{cf.Members, cf.Crashed} {
		for i := 1; i < len(l) && r.err == nil; i++ {
			if l[i] <= l[i-1] {
				r.err = fmt.Errorf("%w: config list entry %d %q not after %q", ErrMalformed, i, l[i], l[i-1])
			}
		}
	}
}

// AppendBeat appends a heartbeat message.
func (c *Codec) AppendBeat(dst []byte, h Header, b *Beat) ([]byte, error) {
	if b.State > BeatLeave {
		return dst, fmt.Errorf("%w: beat state %d", ErrRange, b.State)
	}
	raw := c.raw[:0]
	raw = binary.AppendUvarint(raw, b.Incarnation)
	raw = binary.AppendUvarint(raw, b.Seq)
	raw = binary.AppendUvarint(raw, b.Epoch)
	raw = binary.LittleEndian.AppendUint64(raw, b.SetHash)
	raw = append(raw, byte(b.State))
	var err error
	if raw, err = c.appendList(raw, "members", b.Members); err != nil {
		return dst, err
	}
	if raw, err = c.appendList(raw, "addrs", b.Addrs); err != nil {
		return dst, err
	}
	c.raw = raw
	body, flags, err := c.finishBody(KindBeat)
	if err != nil {
		return dst, err
	}
	return c.assemble(dst, &h, KindBeat, flags, body)
}

// AppendFetch appends a repair request.
func (c *Codec) AppendFetch(dst []byte, h Header, f *Fetch) ([]byte, error) {
	if err := c.checkRange(f.From, f.To); err != nil {
		return dst, err
	}
	if len(f.Origin) > c.lim.MaxString {
		return dst, fmt.Errorf("%w: fetch origin of %d bytes, limit %d", ErrTooLarge, len(f.Origin), c.lim.MaxString)
	}
	if len(f.Topic) > c.lim.MaxString {
		return dst, fmt.Errorf("%w: fetch topic of %d bytes, limit %d", ErrTooLarge, len(f.Topic), c.lim.MaxString)
	}
	raw := appendString(c.raw[:0], f.Origin)
	raw = appendString(raw, f.Topic)
	raw = binary.AppendUvarint(raw, f.From)
	raw = binary.AppendUvarint(raw, f.To-f.From)
	c.raw = raw
	body, flags, err := c.finishBody(KindFetch)
	if err != nil {
		return dst, err
	}
	return c.assemble(dst, &h, KindFetch, flags, body)
}

// AppendFetchReply appends the reply to a Fetch (the replayed messages are
// framed after it by the caller).
func (c *Codec) AppendFetchReply(dst []byte, h Header, f *FetchReply) ([]byte, error) {
	if err := c.checkRange(f.From, f.To); err != nil {
		return dst, err
	}
	if len(f.Origin) > c.lim.MaxString {
		return dst, fmt.Errorf("%w: fetch origin of %d bytes, limit %d", ErrTooLarge, len(f.Origin), c.lim.MaxString)
	}
	if len(f.Topic) > c.lim.MaxString {
		return dst, fmt.Errorf("%w: fetch topic of %d bytes, limit %d", ErrTooLarge, len(f.Topic), c.lim.MaxString)
	}
	span := f.To - f.From + 1
	if f.Count > span || uint64(len(f.Gone)) > span-f.Count {
		return dst, fmt.Errorf("%w: %d messages and %d gone in a range of %d", ErrRange, f.Count, len(f.Gone), span)
	}
	raw := appendString(c.raw[:0], f.Origin)
	raw = appendString(raw, f.Topic)
	raw = binary.AppendUvarint(raw, f.From)
	raw = binary.AppendUvarint(raw, f.To-f.From)
	raw = binary.AppendUvarint(raw, f.Count)
	raw = binary.AppendUvarint(raw, f.Incarnation)
	raw = binary.AppendUvarint(raw, f.First)
	raw = binary.AppendUvarint(raw, uint64(len(f.Gone)))
	next := f.From
	for i, s := range f.Gone {
		if s < next || s > f.To {
			return dst, fmt.Errorf("%w: gone[%d] = %d, want ascending within %d..%d", ErrRange, i, s, f.From, f.To)
		}
		raw = binary.AppendUvarint(raw, s-next)
		next = s + 1
	}
	c.raw = raw
	body, flags, err := c.finishBody(KindFetchReply)
	if err != nil {
		return dst, err
	}
	return c.assemble(dst, &h, KindFetchReply, flags, body)
}

func (c *Codec) checkRange(from, to uint64) error {
	if to < from {
		return fmt.Errorf("%w: fetch range %d..%d ends before it starts", ErrRange, from, to)
	}
	if to-from >= uint64(c.lim.MaxList) {
		return fmt.Errorf("%w: fetch range %d..%d holds %d numbers, limit %d", ErrTooLarge, from, to, to-from+1, c.lim.MaxList)
	}
	return nil
}

func (c *Codec) appendList(dst []byte, what string, l []string) ([]byte, error) {
	if len(l) > c.lim.MaxList {
		return dst, fmt.Errorf("%w: %d %s, limit %d", ErrTooLarge, len(l), what, c.lim.MaxList)
	}
	dst = binary.AppendUvarint(dst, uint64(len(l)))
	for i, s := range l {
		if len(s) > c.lim.MaxString {
			return dst, fmt.Errorf("%w: %s[%d] of %d bytes, limit %d", ErrTooLarge, what, i, len(s), c.lim.MaxString)
		}
		dst = appendString(dst, s)
	}
	return dst, nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// sparseBody encodes the body of a Grad, Params or ParamsAck (with ack)
// message for rows [lo, hi) of s, compressed if that helps. It returns the
// body (aliasing c's buffers) and the flags byte. A Grad encode with
// feedback leaves the residual update pending in c.pend.
func (c *Codec) sparseBody(kind Kind, examples int, ack *Ack, width int, s *model.Sparse, lo, hi int) ([]byte, byte, error) {
	c.pend = pending{}
	if width < 1 {
		return nil, 0, fmt.Errorf("%w: encode %s: width %d, want >= 1", ErrRange, kind, width)
	}
	if width > c.lim.MaxWidth {
		return nil, 0, fmt.Errorf("%w: encode %s: width %d, limit %d", ErrTooLarge, kind, width, c.lim.MaxWidth)
	}
	if len(s.Val) != len(s.Idx)*width {
		return nil, 0, fmt.Errorf("%w: encode %s: %d values for %d rows of width %d", ErrMalformed, kind, len(s.Val), len(s.Idx), width)
	}
	raw := c.raw[:0]
	var fb *Feedback
	if kind == KindGrad {
		if examples < 0 || examples > MaxExamples {
			return nil, 0, fmt.Errorf("%w: encode grad: examples %d, want 0..%d", ErrRange, examples, int64(MaxExamples))
		}
		raw = binary.AppendUvarint(raw, uint64(examples))
		fb = c.fb
	}
	if kind == KindParamsAck {
		var err error
		if raw, err = c.appendAck(raw, ack); err != nil {
			c.raw = raw[:0]
			return nil, 0, fmt.Errorf("encode %s: %w", kind, err)
		}
	}
	raw = binary.AppendUvarint(raw, uint64(width))
	raw, err := c.appendSparse(raw, width, s, lo, hi, fb)
	c.raw = raw[:0]
	if err != nil {
		return nil, 0, fmt.Errorf("encode %s: %w", kind, err)
	}
	c.raw = raw
	if fb != nil {
		c.pend = pending{idx: s.Idx[lo:hi], width: width}
	}
	body, flags, err := c.finishBody(kind)
	flags |= byte(c.values)
	return body, flags, err
}

// finishBody checks the size of c.raw and compresses it if that makes it
// smaller. flags carries the compressor actually used.
func (c *Codec) finishBody(kind Kind) ([]byte, byte, error) {
	if kind != KindGrad {
		c.pend = pending{} // only a Grad body just built may carry a feedback update
	}
	raw := c.raw
	if len(raw) > c.lim.MaxMessage {
		return nil, 0, fmt.Errorf("%w: encode %s: body of %d bytes, limit %d", ErrTooLarge, kind, len(raw), c.lim.MaxMessage)
	}
	switch c.compress {
	case Zstd:
		comp := binary.AppendUvarint(c.comp[:0], uint64(len(raw)))
		comp = c.zstdEncoder().EncodeAll(raw, comp)
		c.comp = comp
		if len(comp) < len(raw) {
			return comp, byte(Zstd) << 2, nil
		}
	case S2:
		need := s2.MaxEncodedLen(len(raw))
		if cap(c.comp) < need {
			c.comp = make([]byte, need)
		}
		comp := s2.EncodeBetter(c.comp[:need], raw)
		if len(comp) < len(raw) {
			return comp, byte(S2) << 2, nil
		}
	}
	return raw, 0, nil
}

// headerLen returns the length of h's header with Part and Parts at their
// widest (three bytes each), an upper bound for any part's header.
func (c *Codec) maxHeaderLen(h *Header, kind Kind) (int, error) {
	w := *h
	w.Part, w.Parts = 65534, 65535
	var err error
	c.hdr, err = c.appendHeader(c.hdr[:0], &w, kind, 0)
	return len(c.hdr), err
}

// assemble appends header and body to dst, checks the size and commits any
// pending feedback.
func (c *Codec) assemble(dst []byte, h *Header, kind Kind, flags byte, body []byte) ([]byte, error) {
	pend := c.pend
	c.pend = pending{}
	start := len(dst)
	out, err := c.appendHeader(dst, h, kind, flags)
	if err != nil {
		return dst, err
	}
	out = append(out, body...)
	if len(out)-start > c.lim.MaxMessage {
		return dst[:start], fmt.Errorf("%w: encode %s: message of %d bytes, limit %d (split the body: SplitGrad, SplitParams)", ErrTooLarge, kind, len(out)-start, c.lim.MaxMessage)
	}
	if pend.idx != nil {
		c.fb.store(c.newRes, pend.idx, pend.width)
	}
	return out, nil
}

// Header layout:
//
//	version  1 byte
//	kind     1 byte
//	flags    1 byte: bits 0-1 Values, bits 2-3 Compress, bits 4-7 zero
//	job      uvarint length, bytes
//	sender   uvarint length, bytes
//	clock, epoch, seq, part, parts: uvarints
//
// then the body: as encoded, or for Zstd a uvarint of the decompressed
// length and one zstd frame, or for S2 one s2 block (which starts with its
// decompressed length).
func (c *Codec) appendHeader(dst []byte, h *Header, kind Kind, flags byte) ([]byte, error) {
	if len(h.Job) > c.lim.MaxString {
		return dst, fmt.Errorf("%w: job name of %d bytes, limit %d", ErrTooLarge, len(h.Job), c.lim.MaxString)
	}
	if len(h.Sender) > c.lim.MaxString {
		return dst, fmt.Errorf("%w: sender of %d bytes, limit %d", ErrTooLarge, len(h.Sender), c.lim.MaxString)
	}
	part, parts := h.Part, h.Parts
	if parts == 0 {
		parts = 1
	}
	if part >= parts {
		return dst, fmt.Errorf("%w: part %d of %d", ErrRange, part, parts)
	}
	dst = append(dst, Version, byte(kind), flags)
	dst = appendString(dst, h.Job)
	dst = appendString(dst, h.Sender)
	dst = binary.AppendUvarint(dst, h.Clock)
	dst = binary.AppendUvarint(dst, h.Epoch)
	dst = binary.AppendUvarint(dst, h.Incarnation)
	dst = binary.AppendUvarint(dst, h.Seq)
	dst = binary.AppendUvarint(dst, uint64(part))
	dst = binary.AppendUvarint(dst, uint64(parts))
	return dst, nil
}

func (c *Codec) zstdEncoder() *zstd.Encoder {
	if c.zenc == nil {
		win := zstd.MinWindowSize
		for win < c.lim.MaxMessage && win < zstd.MaxWindowSize {
			win <<= 1
		}
		enc, err := zstd.NewWriter(nil,
			zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderCRC(false), // the decoder validates every field; the transport checks integrity
			zstd.WithWindowSize(win),
			zstd.WithEncoderLevel(zstd.SpeedDefault))
		if err != nil {
			panic(fmt.Sprintf("wire: zstd encoder options: %v", err))
		}
		c.zenc = enc
	}
	return c.zenc
}

func (c *Codec) zstdDecoder() *zstd.Decoder {
	if c.zdec == nil {
		win := uint64(max(zstd.MinWindowSize, c.lim.MaxMessage))
		dec, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(uint64(c.lim.MaxMessage)),
			zstd.WithDecoderMaxWindow(win),
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			panic(fmt.Sprintf("wire: zstd decoder options: %v", err))
		}
		c.zdec = dec
	}
	return c.zdec
}

// decodeError wraps a body error with where it happened.
func decodeError(h *Header, err error) error {
	return fmt.Errorf("decode %s from %q seq %d part %d/%d: %w", h.Kind, h.Sender, h.Seq, h.Part, h.Parts, err)
}

// Decode parses msg into out, reusing out's slices, and validates it:
// version, kind, flags, every length against Limits and the remaining input
// (before allocating), strictly ascending indices below Limits.Features,
// finite values, no trailing bytes. Errors wrap one of the package
// sentinels. On error out holds partial data.
//
// Strings in out (job, sender, members, addresses, origin) are interned by
// the codec; out holds no reference to msg.
func (c *Codec) Decode(msg []byte, out *Message) error {
	if len(msg) > c.lim.MaxMessage {
		return fmt.Errorf("%w: message of %d bytes, limit %d", ErrTooLarge, len(msg), c.lim.MaxMessage)
	}
	pos, err := c.readHeader(msg, &out.Header)
	if err != nil {
		return err
	}
	h := &out.Header
	body := msg[pos:]
	if h.Kind == KindCore && h.Parts > 1 {
		// A part of a larger body: the receiver reassembles the parts'
		// chunks (CoreChunk) and decodes them whole (DecodeCoreBody);
		// out.Core is left empty.
		out.Core.Reset()
		return nil
	}
	switch h.Compress {
	case Zstd:
		if body, err = c.unzstd(body); err != nil {
			return decodeError(h, err)
		}
	case S2:
		if body, err = c.uns2(body); err != nil {
			return decodeError(h, err)
		}
	}
	switch h.Kind {
	case KindGrad, KindParams, KindParamsAck:
		err = c.readSparseBody(body, out)
	case KindBeat:
		err = c.readBeat(body, &out.Beat)
	case KindFetch:
		err = c.readFetch(body, &out.Fetch)
	case KindFetchReply:
		err = c.readFetchReply(body, &out.Reply)
	case KindControl:
		err = c.readControl(body, &out.Control)
	case KindControlReply:
		err = c.readControlReply(body, &out.ControlReply)
	case KindCore:
		err = c.readCore(body, out.Values, &out.Core)
	}
	if err != nil {
		return decodeError(h, err)
	}
	return nil
}

func (c *Codec) readHeader(msg []byte, h *Header) (int, error) {
	*h = Header{}
	if len(msg) < 3 {
		return 0, fmt.Errorf("%w: %d bytes, shorter than any header", ErrMalformed, len(msg))
	}
	if msg[0] != Version {
		return 0, fmt.Errorf("%w: version %d, this peer speaks %d", ErrVersion, msg[0], Version)
	}
	h.Version = msg[0]
	h.Kind = Kind(msg[1])
	if !h.Kind.known() {
		return 0, fmt.Errorf("%w: kind %d (%s)", ErrKind, msg[1], h.Kind)
	}
	flags := msg[2]
	h.Values = Values(flags & 3)
	h.Compress = Compress(flags >> 2 & 3)
	switch {
	case flags&0xf0 != 0:
		return 0, fmt.Errorf("%w: %s: reserved flag bits %#02x set", ErrMalformed, h.Kind, flags)
	case h.Compress > S2:
		return 0, fmt.Errorf("%w: %s: compressor %d", ErrMalformed, h.Kind, h.Compress)
	case h.Values != F32 && !h.Kind.Sparse():
		return 0, fmt.Errorf("%w: %s: value format %s on a kind without values", ErrMalformed, h.Kind, h.Values)
	}
	pos := 3
	var err error
	if h.Job, pos, err = c.readString(msg, pos, "job"); err != nil {
		return 0, err
	}
	if h.Sender, pos, err = c.readString(msg, pos, "sender"); err != nil {
		return 0, err
	}
	var v [6]uint64
	for i := range v {
		x, k := binary.Uvarint(msg[pos:])
		if k <= 0 {
			return 0, fmt.Errorf("%w: %s from %q: header byte %d: bad varint", ErrMalformed, h.Kind, h.Sender, pos)
		}
		v[i] = x
		pos += k
	}
	h.Clock, h.Epoch, h.Incarnation, h.Seq = v[0], v[1], v[2], v[3]
	if v[5] == 0 || v[5] > 65535 || v[4] >= v[5] {
		return 0, fmt.Errorf("%w: %s from %q seq %d: part %d of %d", ErrMalformed, h.Kind, h.Sender, h.Seq, v[4], v[5])
	}
	h.Part, h.Parts = uint16(v[4]), uint16(v[5])
	return pos, nil
}

// readString reads a length-prefixed string at b[pos:].
func (c *Codec) readString(b []byte, pos int, what string) (string, int, error) {
	n, k := binary.Uvarint(b[pos:])
	if k <= 0 {
		return "", pos, fmt.Errorf("%w: byte %d: bad %s length", ErrMalformed, pos, what)
	}
	if n > uint64(c.lim.MaxString) {
		return "", pos, fmt.Errorf("%w: byte %d: %s of %d bytes, limit %d", ErrTooLarge, pos, what, n, c.lim.MaxString)
	}
	pos += k
	if n > uint64(len(b)-pos) {
		return "", pos, fmt.Errorf("%w: byte %d: %s of %d bytes, %d left", ErrMalformed, pos, what, n, len(b)-pos)
	}
	return c.str(b[pos : pos+int(n)]), pos + int(n), nil
}

// str interns b.
func (c *Codec) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := c.intern[string(b)]; ok {
		return s
	}
	if len(c.intern) >= internMax {
		clear(c.intern)
	}
	s := string(b)
	c.intern[s] = s
	return s
}

func (c *Codec) unzstd(body []byte) ([]byte, error) {
	n, k := binary.Uvarint(body)
	if k <= 0 {
		return nil, fmt.Errorf("%w: bad zstd length", ErrMalformed)
	}
	if n > uint64(c.lim.MaxMessage) {
		return nil, fmt.Errorf("%w: zstd body claims %d bytes, limit %d", ErrTooLarge, n, c.lim.MaxMessage)
	}
	if uint64(cap(c.raw)) < n {
		c.raw = make([]byte, 0, n)
	}
	out, err := c.zstdDecoder().DecodeAll(body[k:], c.raw[:0])
	if cap(out) <= 2*c.lim.MaxMessage {
		c.raw = out[:0]
	}
	switch {
	case errors.Is(err, zstd.ErrDecoderSizeExceeded), errors.Is(err, zstd.ErrWindowSizeExceeded), errors.Is(err, zstd.ErrFrameSizeExceeded):
		return nil, fmt.Errorf("%w: zstd body over its declared %d bytes: %v", ErrTooLarge, n, err)
	case err != nil:
		return nil, fmt.Errorf("%w: zstd: %v", ErrMalformed, err)
	case uint64(len(out)) != n:
		return nil, fmt.Errorf("%w: zstd body of %d bytes, declared %d", ErrMalformed, len(out), n)
	}
	return out, nil
}

func (c *Codec) uns2(body []byte) ([]byte, error) {
	n, err := s2.DecodedLen(body)
	if err != nil {
		return nil, fmt.Errorf("%w: s2: %v", ErrMalformed, err)
	}
	if n > c.lim.MaxMessage {
		return nil, fmt.Errorf("%w: s2 body claims %d bytes, limit %d", ErrTooLarge, n, c.lim.MaxMessage)
	}
	if cap(c.raw) < n {
		c.raw = make([]byte, 0, n)
	}
	out, err := s2.Decode(c.raw[:cap(c.raw)], body)
	if err != nil {
		return nil, fmt.Errorf("%w: s2: %v", ErrMalformed, err)
	}
	return out, nil
}

func (c *Codec) readSparseBody(body []byte, out *Message) error {
	c.decValues = out.Values
	pos := 0
	out.Examples = 0
	if out.Kind == KindGrad {
		ex, k := binary.Uvarint(body)
		if k <= 0 {
			return fmt.Errorf("%w: bad example count", ErrMalformed)
		}
		if ex > MaxExamples {
			return fmt.Errorf("%w: %d examples, limit %d", ErrRange, ex, uint64(MaxExamples))
		}
		out.Examples = int(ex)
		pos = k
	}
	if out.Kind == KindParamsAck {
		var err error
		if pos, err = c.readAck(body, &out.Ack); err != nil {
			return err
		}
	}
	w, k := binary.Uvarint(body[pos:])
	if k <= 0 {
		return fmt.Errorf("%w: bad width", ErrMalformed)
	}
	if w == 0 {
		return fmt.Errorf("%w: width 0", ErrMalformed)
	}
	if w > uint64(c.lim.MaxWidth) {
		return fmt.Errorf("%w: width %d, limit %d", ErrTooLarge, w, c.lim.MaxWidth)
	}
	out.Width = int(w)
	return c.readSparse(body, pos+k, out.Width, &out.Sparse)
}

// readAck reads the Ack section at the start of a ParamsAck body into a,
// reusing a.Applied, and returns the position after it.
func (c *Codec) readAck(body []byte, a *Ack) (int, error) {
	r := cursor{c: c, b: body}
	a.Through = r.uvarint("through")
	n := r.uvarint("ack count")
	a.Applied = a.Applied[:0]
	if r.err != nil {
		return 0, r.err
	}
	if n > uint64(c.lim.MaxList) {
		return 0, fmt.Errorf("%w: ack of %d workers, limit %d", ErrTooLarge, n, c.lim.MaxList)
	}
	if n > uint64(len(body)-r.pos)/2 { // every entry takes at least two bytes
		return 0, fmt.Errorf("%w: ack of %d workers in %d bytes", ErrMalformed, n, len(body)-r.pos)
	}
	for i := uint64(0); i < n; i++ {
		w := r.str("ack worker")
		clock := r.uvarint("ack clock")
		if r.err != nil {
			return 0, r.err
		}
		if i > 0 && w <= a.Applied[i-1].Worker {
			return 0, fmt.Errorf("%w: ack worker %d %q not after %q", ErrMalformed, i, w, a.Applied[i-1].Worker)
		}
		a.Applied = append(a.Applied, WorkerClock{Worker: w, Clock: clock})
	}
	r.config(&a.Config)
	if r.err != nil {
		return 0, r.err
	}
	if r.pos >= len(body) {
		return 0, fmt.Errorf("%w: ack without its flags byte", ErrMalformed)
	}
	flags := body[r.pos]
	if flags&^ackForce != 0 {
		return 0, fmt.Errorf("%w: ack flags %#x", ErrMalformed, flags)
	}
	a.Force = flags&ackForce != 0
	return r.pos + 1, nil
}

// cursor reads the uvarints and strings of small bodies.
type cursor struct {
	c   *Codec
	b   []byte
	pos int
	err error
}

func (r *cursor) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	x, k := binary.Uvarint(r.b[r.pos:])
	if k <= 0 {
		r.err = fmt.Errorf("%w: body byte %d: bad %s", ErrMalformed, r.pos, what)
		return 0
	}
	r.pos += k
	return x
}

func (r *cursor) str(what string) string {
	if r.err != nil {
		return ""
	}
	var s string
	s, r.pos, r.err = r.c.readString(r.b, r.pos, what)
	return s
}

// list reads a counted list of strings into l.
func (r *cursor) list(what string, l []string) []string {
	n := r.uvarint("list count")
	l = l[:0]
	if r.err != nil {
		return l
	}
	if n > uint64(r.c.lim.MaxList) {
		r.err = fmt.Errorf("%w: %d %s, limit %d", ErrTooLarge, n, what, r.c.lim.MaxList)
		return l
	}
	if n > uint64(len(r.b)-r.pos) { // every string takes at least its length byte
		r.err = fmt.Errorf("%w: %d %s in %d bytes", ErrMalformed, n, what, len(r.b)-r.pos)
		return l
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		l = append(l, r.str(what))
	}
	return l
}

func (r *cursor) end() error {
	if r.err == nil && r.pos != len(r.b) {
		r.err = fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(r.b)-r.pos)
	}
	return r.err
}

func (c *Codec) readBeat(body []byte, b *Beat) error {
	r := cursor{c: c, b: body}
	b.Incarnation = r.uvarint("incarnation")
	b.Seq = r.uvarint("seq")
	b.Epoch = r.uvarint("epoch")
	if r.err == nil {
		if len(body)-r.pos < 9 {
			return fmt.Errorf("%w: truncated beat", ErrMalformed)
		}
		b.SetHash = binary.LittleEndian.Uint64(body[r.pos:])
		b.State = BeatState(body[r.pos+8])
		r.pos += 9
		if b.State > BeatLeave {
			return fmt.Errorf("%w: beat state %d", ErrMalformed, b.State)
		}
	}
	b.Members = r.list("members", b.Members)
	b.Addrs = r.list("addrs", b.Addrs)
	return r.end()
}

func (c *Codec) readFetch(body []byte, f *Fetch) error {
	r := cursor{c: c, b: body}
	f.Origin = r.str("origin")
	f.Topic = r.str("topic")
	f.From = r.uvarint("from")
	span := r.uvarint("span")
	if err := r.end(); err != nil {
		return err
	}
	if span >= uint64(c.lim.MaxList) {
		return fmt.Errorf("%w: fetch of %d numbers, limit %d", ErrTooLarge, span+1, c.lim.MaxList)
	}
	if f.From+span < f.From {
		return fmt.Errorf("%w: fetch range %d+%d overflows", ErrRange, f.From, span)
	}
	f.To = f.From + span
	return nil
}

func (c *Codec) readFetchReply(body []byte, f *FetchReply) error {
	r := cursor{c: c, b: body}
	f.Origin = r.str("origin")
	f.Topic = r.str("topic")
	f.From = r.uvarint("from")
	span := r.uvarint("span")
	f.Count = r.uvarint("count")
	f.Incarnation = r.uvarint("incarnation")
	f.First = r.uvarint("first")
	n := r.uvarint("gone count")
	f.Gone = f.Gone[:0]
	if r.err != nil {
		return r.err
	}
	if span >= uint64(c.lim.MaxList) {
		return fmt.Errorf("%w: reply range of %d numbers, limit %d", ErrTooLarge, span+1, c.lim.MaxList)
	}
	if f.From+span < f.From {
		return fmt.Errorf("%w: reply range %d+%d overflows", ErrRange, f.From, span)
	}
	f.To = f.From + span
	if f.Count > span+1 || n > span+1-f.Count {
		return fmt.Errorf("%w: %d messages and %d gone in a range of %d", ErrRange, f.Count, n, span+1)
	}
	if n > uint64(len(body)-r.pos) {
		return fmt.Errorf("%w: %d gone numbers in %d bytes", ErrMalformed, n, len(body)-r.pos)
	}
	next := f.From
	for i := uint64(0); i < n; i++ {
		d := r.uvarint("gone")
		if r.err != nil {
			return r.err
		}
		if next > f.To || d > f.To-next {
			return fmt.Errorf("%w: gone[%d] beyond %d", ErrRange, i, f.To)
		}
		f.Gone = append(f.Gone, next+d)
		next += d + 1
	}
	return r.end()
}
