package wire

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// KindCore body:
//
//	op        1 byte
//	flags     uvarint
//	member, config, round, through, req, examples: uvarints
//	shards    uvarint n, then n uvarints: the first shard, then gaps-1
//	clocks    uvarint n, then n pairs: member (first, then gap-1), clock
//	text      uvarint length, bytes
//	blob      uvarint length, bytes
//	width     uvarint: the rows' width
//	rows      uvarint length, then a sparse section (as Grad's) of width
//	want      uvarint length, then uvarint n and an index block
//	values    uvarint length, then uvarint n and an F32 value block
//	          (with Raw: n uvarint gaps, n little-endian float32s)
//
// Sections are length-prefixed so each bit stream ends where its section
// does. Push rows travel in the codec's value format (lossy formats with
// error feedback when the codec has it); every other value is lossless,
// F32 or, when the codec's format is Raw, Raw: params and handed-over
// state must be bit-identical everywhere.

// maxCoreWidth bounds a core message's row width: a shard's state rows
// carry the optimizer state beside the weights (up to 3 floats a weight).
func (c *Codec) maxCoreWidth() int { return 4 * c.lim.MaxWidth }

// AppendCore appends m as a KindCore message. It fails with ErrTooLarge if
// it would exceed Limits.MaxMessage: CoreBody and the message layer's
// parts carry larger ones.
func (c *Codec) AppendCore(dst []byte, h Header, m *Core) ([]byte, error) {
	body, flags, err := c.CoreBody(m)
	if err != nil {
		return dst, err
	}
	return c.assemble(dst, &h, KindCore, flags, body)
}

// CoreBody encodes m's body (compressed when that helps) and returns it
// (aliasing the codec's buffers: valid until its next use) with the
// header flags that go with it. A body larger than Limits.MaxMessage is
// not an error here: the caller cuts it into parts (AppendCorePart).
func (c *Codec) CoreBody(m *Core) ([]byte, byte, error) {
	c.pend = pending{}
	if m.Op < CorePush || m.Op > coreOpLast || m.Flags&^coreFlags != 0 {
		return nil, 0, fmt.Errorf("%w: encode core: op %d flags %#x", ErrMalformed, m.Op, m.Flags)
	}
	values := F32
	if m.Op == CorePush || c.values == Raw {
		values = c.values // (raw is lossless: everything may travel raw)
	}
	raw, err := c.appendCoreHead(append(c.raw[:0], byte(m.Op)), m)
	if err != nil {
		return nil, 0, err
	}
	width := m.RowWidth
	if m.Rows.Len() == 0 && width == 0 {
		width = 1
	}
	if width < 1 || width > c.maxCoreWidth() {
		return nil, 0, fmt.Errorf("%w: encode core: row width %d", ErrRange, width)
	}
	if len(m.Rows.Val) != m.Rows.Len()*width {
		return nil, 0, fmt.Errorf("%w: encode core: %d values for %d rows of width %d", ErrMalformed, len(m.Rows.Val), m.Rows.Len(), width)
	}
	raw = binary.AppendUvarint(raw, uint64(width))
	// Rows.
	saved := c.values
	c.values = values
	fb := c.fb
	if m.Op != CorePush || !values.Lossy() {
		fb = nil
	}
	raw, err = c.section(raw, func(dst []byte) ([]byte, error) {
		return c.appendSparse(dst, width, &m.Rows, 0, m.Rows.Len(), fb)
	})
	c.values = saved
	if err != nil {
		c.raw = raw[:0]
		return nil, 0, fmt.Errorf("encode core rows: %w", err)
	}
	if fb != nil {
		c.pend = pending{idx: m.Rows.Idx, width: width}
	}
	if raw, err = c.appendCoreLists(raw, m, values); err != nil {
		c.raw = raw[:0]
		return nil, 0, err
	}
	c.raw = raw
	pend := c.pend
	body, flags, err := c.finishCoreBody()
	c.pend = pend
	return body, flags | byte(values), err
}

// appendCoreHead appends the fields of m's body before its rows: the
// numbers, the shards and clocks (each ascending, as gaps), the text and
// the blob.
func (c *Codec) appendCoreHead(raw []byte, m *Core) ([]byte, error) {
	for _, v := range []uint64{uint64(m.Flags), m.Member, m.Config, m.Round, m.Through, m.Req, m.Examples} {
		raw = binary.AppendUvarint(raw, v)
	}
	if len(m.Shards) > c.lim.MaxList || len(m.Clocks) > c.lim.MaxList {
		return raw, fmt.Errorf("%w: encode core: %d shards, %d clocks, limit %d", ErrTooLarge, len(m.Shards), len(m.Clocks), c.lim.MaxList)
	}
	raw = binary.AppendUvarint(raw, uint64(len(m.Shards)))
	for i, s := range m.Shards {
		g := uint64(s)
		if i > 0 {
			if s <= m.Shards[i-1] {
				return raw, fmt.Errorf("%w: encode core: shards not ascending", ErrMalformed)
			}
			g = uint64(s - m.Shards[i-1] - 1)
		}
		raw = binary.AppendUvarint(raw, g)
	}
	raw = binary.AppendUvarint(raw, uint64(len(m.Clocks)))
	for i, mc := range m.Clocks {
		g := mc.Member
		if i > 0 {
			if mc.Member <= m.Clocks[i-1].Member {
				return raw, fmt.Errorf("%w: encode core: clocks not ascending by member", ErrMalformed)
			}
			g = mc.Member - m.Clocks[i-1].Member - 1
		}
		raw = binary.AppendUvarint(raw, g)
		raw = binary.AppendUvarint(raw, mc.Clock)
	}
	if len(m.Text) > c.lim.MaxString {
		return raw, fmt.Errorf("%w: encode core: text of %d bytes", ErrTooLarge, len(m.Text))
	}
	raw = appendString(raw, m.Text)
	raw = binary.AppendUvarint(raw, uint64(len(m.Blob)))
	raw = append(raw, m.Blob...)
	return raw, nil
}

// appendCoreLists appends the sections of m's body after its rows: the
// wanted rows and the values.
func (c *Codec) appendCoreLists(raw []byte, m *Core, values Values) ([]byte, error) {
	var err error
	// Want.
	if len(m.Want) > c.lim.MaxRows {
		return raw, fmt.Errorf("%w: encode core: %d wanted rows, limit %d", ErrTooLarge, len(m.Want), c.lim.MaxRows)
	}
	raw, err = c.section(raw, func(dst []byte) ([]byte, error) {
		dst = binary.AppendUvarint(dst, uint64(len(m.Want)))
		if len(m.Want) == 0 {
			return dst, nil
		}
		if values == Raw {
			return c.appendRawIndices(dst, m.Want, 0)
		}
		w := &c.w
		w.reset(dst)
		if err := c.writeIndices(w, m.Want, 0); err != nil {
			return dst, err
		}
		return w.finish(), nil
	})
	if err != nil {
		return raw, fmt.Errorf("encode core want: %w", err)
	}
	// Values.
	if len(m.Values) > c.lim.MaxValues {
		return raw, fmt.Errorf("%w: encode core: %d values, limit %d", ErrTooLarge, len(m.Values), c.lim.MaxValues)
	}
	raw, err = c.section(raw, func(dst []byte) ([]byte, error) {
		dst = binary.AppendUvarint(dst, uint64(len(m.Values)))
		if len(m.Values) == 0 {
			return dst, nil
		}
		if values == Raw {
			return c.appendRawValues(dst, m.Values, 1, 0)
		}
		w := &c.w
		w.reset(dst)
		if err := c.writeF32(w, m.Values, 1, 0, false); err != nil {
			return dst, err
		}
		return w.finish(), nil
	})
	if err != nil {
		return raw, fmt.Errorf("encode core values: %w", err)
	}
	return raw, nil
}

// finishCoreBody compresses c.raw when that makes it smaller; unlike
// finishBody it allows bodies over MaxMessage (they travel in parts).
func (c *Codec) finishCoreBody() ([]byte, byte, error) {
	saved := c.lim.MaxMessage
	c.lim.MaxMessage = max(saved, len(c.raw))
	body, flags, err := c.finishBody(KindCore)
	c.lim.MaxMessage = saved
	return body, flags, err
}

// section appends a length-prefixed section written by fill.
func (c *Codec) section(dst []byte, fill func([]byte) ([]byte, error)) ([]byte, error) {
	// Reserve a 5-byte length (bodies are far below 2^35), then fix it.
	at := len(dst)
	dst = append(dst, 0x80, 0x80, 0x80, 0x80, 0)
	out, err := fill(dst)
	if err != nil {
		return dst[:at], err
	}
	n := uint64(len(out) - at - 5)
	for i := range 4 {
		out[at+i] = byte(n>>(7*i))&0x7f | 0x80
	}
	out[at+4] = byte(n >> 28)
	return out, nil
}

// CoreChunk returns the header of a KindCore message and its body bytes as
// they travelled (compressed as the header says): one part of a body cut
// by AppendCorePart, or a whole one.
func (c *Codec) CoreChunk(msg []byte) (Header, []byte, error) {
	var h Header
	pos, err := c.readHeader(msg, &h)
	if err != nil {
		return h, nil, err
	}
	if h.Kind != KindCore {
		return h, nil, fmt.Errorf("%w: %s, want core", ErrKind, h.Kind)
	}
	return h, msg[pos:], nil
}

// AppendCorePart appends part h.Part of h.Parts of a body cut into chunks
// (chunk is the part's bytes; flags as CoreBody returned them).
func (c *Codec) AppendCorePart(dst []byte, h Header, flags byte, chunk []byte) ([]byte, error) {
	start := len(dst)
	out, err := c.appendHeader(dst, &h, KindCore, flags)
	if err != nil {
		return dst, err
	}
	out = append(out, chunk...)
	if len(out)-start > c.lim.MaxMessage {
		return dst[:start], fmt.Errorf("%w: core part of %d bytes, limit %d", ErrTooLarge, len(out)-start, c.lim.MaxMessage)
	}
	return out, nil
}

// DecodeCoreBody decodes a reassembled body (maxBody bounds it, after
// decompression) of a message whose header is h into out.
func (c *Codec) DecodeCoreBody(h Header, body []byte, maxBody int, out *Core) error {
	saved := c.lim.MaxMessage
	c.lim.MaxMessage = max(saved, maxBody)
	defer func() { c.lim.MaxMessage = saved }()
	if len(body) > c.lim.MaxMessage {
		return fmt.Errorf("%w: core body of %d bytes, limit %d", ErrTooLarge, len(body), c.lim.MaxMessage)
	}
	var err error
	switch h.Compress {
	case Zstd:
		body, err = c.unzstd(body)
	case S2:
		body, err = c.uns2(body)
	}
	if err != nil {
		return decodeError(&h, err)
	}
	if err := c.readCore(body, h.Values, out); err != nil {
		return decodeError(&h, err)
	}
	return nil
}

// readCore decodes a KindCore body into out.
func (c *Codec) readCore(body []byte, values Values, out *Core) error {
	out.Reset()
	if len(body) < 1 {
		return fmt.Errorf("%w: empty core body", ErrMalformed)
	}
	out.Op = CoreOp(body[0])
	if out.Op < CorePush || out.Op > coreOpLast {
		return fmt.Errorf("%w: core op %d", ErrMalformed, body[0])
	}
	if values.Lossy() && out.Op != CorePush {
		return fmt.Errorf("%w: core %s in %s: only pushes may be lossy", ErrMalformed, out.Op, values)
	}
	r := cursor{c: c, b: body, pos: 1}
	flags := r.uvarint("flags")
	if flags&^uint64(coreFlags) != 0 {
		return fmt.Errorf("%w: core flags %#x", ErrMalformed, flags)
	}
	out.Flags = CoreFlags(flags)
	out.Member, out.Config, out.Round = r.uvarint("member"), r.uvarint("config"), r.uvarint("round")
	out.Through, out.Req, out.Examples = r.uvarint("through"), r.uvarint("req"), r.uvarint("examples")
	n := r.uvarint("shard count")
	if r.err != nil {
		return r.err
	}
	if n > uint64(c.lim.MaxList) {
		return fmt.Errorf("%w: %d shards, limit %d", ErrTooLarge, n, c.lim.MaxList)
	}
	if n > uint64(len(body)-r.pos) {
		return fmt.Errorf("%w: %d shards in %d bytes", ErrMalformed, n, len(body)-r.pos)
	}
	// Room for them at once (n is at most the bytes left): appended one by
	// one, a list of 64 shards took seven allocations (BenchmarkWindowRound).
	out.Shards = slices.Grow(out.Shards, int(n))
	prev := uint64(0)
	for i := range n {
		s := r.uvarint("shard")
		if i > 0 {
			s += prev + 1
		}
		if s > 1<<31 || r.err != nil {
			return fmt.Errorf("%w: shard %d (%v)", ErrMalformed, s, r.err)
		}
		out.Shards = append(out.Shards, uint32(s))
		prev = s
	}
	n = r.uvarint("clock count")
	if r.err != nil {
		return r.err
	}
	if n > uint64(c.lim.MaxList) {
		return fmt.Errorf("%w: %d clocks, limit %d", ErrTooLarge, n, c.lim.MaxList)
	}
	if n > uint64(len(body)-r.pos) {
		return fmt.Errorf("%w: %d clocks in %d bytes", ErrMalformed, n, len(body)-r.pos)
	}
	out.Clocks = slices.Grow(out.Clocks, int(n))
	prev = 0
	for i := range n {
		m := r.uvarint("clock member")
		if i > 0 {
			m += prev + 1
			if m <= prev {
				return fmt.Errorf("%w: clock member overflows", ErrMalformed)
			}
		}
		out.Clocks = append(out.Clocks, MemberClock{Member: m, Clock: r.uvarint("clock")})
		prev = m
	}
	out.Text = r.str("text")
	bl := r.uvarint("blob length")
	if r.err != nil {
		return r.err
	}
	if bl > uint64(len(body)-r.pos) || bl > uint64(c.lim.MaxMessage) {
		return fmt.Errorf("%w: blob of %d bytes, %d left", ErrMalformed, bl, len(body)-r.pos)
	}
	out.Blob = append(out.Blob[:0], body[r.pos:r.pos+int(bl)]...)
	r.pos += int(bl)
	width := r.uvarint("width")
	if r.err != nil {
		return r.err
	}
	if width < 1 || width > uint64(c.maxCoreWidth()) {
		return fmt.Errorf("%w: row width %d", ErrRange, width)
	}
	out.RowWidth = int(width)
	rows, err := r.section("rows")
	if err != nil {
		return err
	}
	saved := c.decValues
	c.decValues = values
	err = c.readSparse(rows, 0, out.RowWidth, &out.Rows)
	c.decValues = saved
	if err != nil {
		return fmt.Errorf("core rows: %w", err)
	}
	if out.Rows.Len() == 0 {
		out.RowWidth = 0
	}
	want, err := r.section("want")
	if err != nil {
		return err
	}
	if err := c.readIndexSection(want, values == Raw, &out.Want); err != nil {
		return fmt.Errorf("core want: %w", err)
	}
	vals, err := r.section("values")
	if err != nil {
		return err
	}
	if err := c.readValueSection(vals, values == Raw, &out.Values); err != nil {
		return fmt.Errorf("core values: %w", err)
	}
	return r.end()
}

// section returns the next length-prefixed section.
func (r *cursor) section(what string) ([]byte, error) {
	l := r.uvarint(what)
	if r.err != nil {
		return nil, r.err
	}
	if l > uint64(len(r.b)-r.pos) {
		return nil, fmt.Errorf("%w: %s section of %d bytes, %d left", ErrMalformed, what, l, len(r.b)-r.pos)
	}
	b := r.b[r.pos : r.pos+int(l)]
	r.pos += int(l)
	return b, nil
}

func (c *Codec) readIndexSection(b []byte, raw bool, out *[]uint32) error {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return fmt.Errorf("%w: bad count", ErrMalformed)
	}
	if n > uint64(c.lim.MaxRows) {
		return fmt.Errorf("%w: %d indices, limit %d", ErrTooLarge, n, c.lim.MaxRows)
	}
	if n > 8*uint64(len(b)-k) {
		return fmt.Errorf("%w: %d indices in %d bytes", ErrMalformed, n, len(b))
	}
	*out = grow((*out)[:0], int(n))
	if n == 0 {
		if k != len(b) {
			return fmt.Errorf("%w: bytes after an empty list", ErrMalformed)
		}
		return nil
	}
	if raw {
		used, err := c.readRawIndices(b[k:], *out)
		if err == nil && k+used != len(b) {
			err = fmt.Errorf("%w: %d bytes after the list", ErrMalformed, len(b)-k-used)
		}
		return err
	}
	r := &c.r
	r.reset(b[k:])
	if err := c.readIndices(r, *out); err != nil {
		return err
	}
	if !r.rest() {
		return fmt.Errorf("%w: trailing bits", ErrMalformed)
	}
	return nil
}

func (c *Codec) readValueSection(b []byte, raw bool, out *[]float32) error {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return fmt.Errorf("%w: bad count", ErrMalformed)
	}
	if n > uint64(c.lim.MaxValues) {
		return fmt.Errorf("%w: %d values, limit %d", ErrTooLarge, n, c.lim.MaxValues)
	}
	if n > 8*uint64(len(b)-k) {
		return fmt.Errorf("%w: %d values in %d bytes", ErrMalformed, n, len(b))
	}
	*out = grow((*out)[:0], int(n))
	if n == 0 {
		if k != len(b) {
			return fmt.Errorf("%w: bytes after an empty list", ErrMalformed)
		}
		return nil
	}
	if raw {
		return readRawValues(b[k:], *out, 1)
	}
	r := &c.r
	r.reset(b[k:])
	if err := c.readF32(r, *out, 1); err != nil {
		return err
	}
	if !r.rest() {
		return fmt.Errorf("%w: trailing bits", ErrMalformed)
	}
	return nil
}
