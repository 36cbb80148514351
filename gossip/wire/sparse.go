package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/gossiptrain/gossiptrain/model"
)

// Sparse section of a Grad, Params or ParamsAck body:
//
//	uvarint rows
//	if rows > 0, a bit stream (LSB first) padded with zero bits to a byte,
//	ending the body:
//	  index block:
//	    b     4 bits   residue bits, 0..12
//	    map   2^b bits if b > 0: which residues k mod 2^b occur
//	    K     5 bits   Rice parameter
//	    rows Rice(K) gaps of the compact indices (below)
//	  value block, by the Values flag:
//	    F32: code table (exponents 0..255), then per value:
//	         code(exponent), sign (1 bit), mantissa (23 bits)
//	    F16: code table (exponents 0..31), then per value:
//	         code(exponent), sign (1 bit), mantissa (10 bits)
//	    I8:  scale (32 bits, float32), code table (classes 0..7), then per
//	         value: code(c), and if c > 0 a sign bit and the c-1 low bits
//	         of |q|, where c = bit length of |q| and |q| <= 127
//
// Compact indices: a gradient for one owner holds only features of the
// owner's shards, k mod S in a fixed subset of residues. With L of the 2^b
// residues present, index k maps to (k >> b)*L + rank(k mod 2^b), an
// order-preserving map onto a space 2^b/L times smaller, so every gap costs
// log2(2^b/L) fewer bits (2 bits for 4 equal owners of 256 shards). The
// encoder picks b by estimated net gain (b = 0 disables it). Gaps
// g_i = c_i - c_{i-1} - 1 (g_0 = c_0) are Rice-coded with the parameter that
// minimises this message's exact size; the format cannot express a
// non-ascending index list.

const maxResidueBits = 12

// sparseMinBits is the fewest bits a row's index takes.
const sparseMinBits = 1

// appendSparse appends the sparse section for rows [lo, hi) of s. With fb
// non-nil, the rows' residuals are added first and the new residuals are
// left in c.newRes for commitFeedback.
func (c *Codec) appendSparse(dst []byte, width int, s *model.Sparse, lo, hi int, fb *Feedback) ([]byte, error) {
	idx := s.Idx[lo:hi]
	vals := s.Val[lo*width : hi*width]
	n := len(idx)
	if n > c.lim.MaxRows {
		return dst, fmt.Errorf("%w: %d rows, limit %d", ErrTooLarge, n, c.lim.MaxRows)
	}
	if len(vals) > c.lim.MaxValues {
		return dst, fmt.Errorf("%w: %d rows x width %d = %d values, limit %d", ErrTooLarge, n, width, len(vals), c.lim.MaxValues)
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	if n == 0 {
		return dst, nil
	}
	src := vals
	if fb != nil {
		if err := fb.check(width, idx); err != nil {
			return dst, err
		}
		c.vals = grow(c.vals, len(vals))
		fb.add(c.vals, vals, idx, width)
		src = c.vals
		c.newRes = grow(c.newRes, len(vals))
	}
	if c.values == Raw {
		start := len(dst)
		dst, err := c.appendRawIndices(dst, idx, lo)
		if err == nil {
			dst, err = c.appendRawValues(dst, src, width, lo)
		}
		if err != nil {
			return dst[:start], err
		}
		if fb != nil {
			clear(c.newRes[:len(src)]) // lossless: nothing left over
		}
		return dst, nil
	}
	w := &c.w
	w.reset(dst)
	if err := c.writeIndices(w, idx, lo); err != nil {
		return dst, err
	}
	var err error
	switch c.values {
	case F32:
		err = c.writeF32(w, src, width, lo, fb != nil)
	case F16:
		err = c.writeF16(w, src, width, lo, fb != nil)
	case I8:
		err = c.writeI8(w, src, width, lo, fb != nil)
	}
	if err != nil {
		return dst, err
	}
	return w.finish(), nil
}

// Raw rows (Values Raw), byte-aligned, after the row count:
//
//	rows uvarint gaps g_i = k_i - k_{i-1} - 1 (g_0 = k_0)
//	rows x width float32 values, 4 bytes little-endian each
//
// Nothing to choose or count per message: a row costs a few nanoseconds to
// write and to read, where the entropy-coded formats cost tens.

// appendRawIndices appends idx as uvarint gaps, checking that they
// ascend strictly and lie below Limits.Features.
func (c *Codec) appendRawIndices(dst []byte, idx []uint32, lo int) ([]byte, error) {
	dst = slices.Grow(dst, binary.MaxVarintLen32*len(idx))
	prev := int64(-1)
	for i, k := range idx {
		if int64(k) <= prev {
			return dst, fmt.Errorf("%w: row %d: index %d after %d: indices not strictly ascending", ErrMalformed, lo+i, k, prev)
		}
		if c.lim.Features > 0 && uint64(k) >= c.lim.Features {
			return dst, fmt.Errorf("%w: row %d: index %d, want < %d features", ErrRange, lo+i, k, c.lim.Features)
		}
		dst = binary.AppendUvarint(dst, uint64(int64(k)-prev-1))
		prev = int64(k)
	}
	return dst, nil
}

// appendRawValues appends src as little-endian float32s, refusing NaN and
// Inf as every format does.
func (c *Codec) appendRawValues(dst []byte, src []float32, width, lo int) ([]byte, error) {
	at := len(dst)
	dst = slices.Grow(dst, 4*len(src))[:at+4*len(src)]
	out := dst[at:]
	for i, v := range src {
		u := math.Float32bits(v)
		if u&0x7f800000 == 0x7f800000 {
			return dst[:at], c.nonFinite(lo, i, width, v)
		}
		binary.LittleEndian.PutUint32(out[4*i:], u)
	}
	return dst, nil
}

// readRawIndices reads len(idx) uvarint gaps from b and returns how many
// bytes they took.
func (c *Codec) readRawIndices(b []byte, idx []uint32) (int, error) {
	pos := 0
	next := uint64(0) // the smallest index the next row may have
	limit := uint64(math.MaxUint32) + 1
	if c.lim.Features > 0 {
		limit = min(limit, c.lim.Features)
	}
	for i := range idx {
		g, k := binary.Uvarint(b[pos:])
		if k <= 0 {
			return 0, fmt.Errorf("%w: row %d: bad or truncated index gap", ErrMalformed, i)
		}
		pos += k
		if g >= limit || next+g >= limit {
			return 0, fmt.Errorf("%w: row %d: index past %d features", ErrRange, i, limit)
		}
		idx[i] = uint32(next + g)
		next += g + 1
	}
	return pos, nil
}

// readRawValues reads len(val) little-endian float32s, exactly the rest of
// b, refusing NaN and Inf.
func readRawValues(b []byte, val []float32, width int) error {
	if len(b) != 4*len(val) {
		return fmt.Errorf("%w: %d bytes for %d raw values", ErrMalformed, len(b), len(val))
	}
	for i := range val {
		u := binary.LittleEndian.Uint32(b[4*i:])
		if u&0x7f800000 == 0x7f800000 {
			return fmt.Errorf("%w: row %d value %d: exponent 255 (NaN or Inf)", ErrNonFinite, i/width, i%width)
		}
		val[i] = math.Float32frombits(u)
	}
	return nil
}

func (c *Codec) writeIndices(w *bitWriter, idx []uint32, lo int) error {
	clear(c.bm[:])
	prev := int64(-1)
	for i, k := range idx {
		if int64(k) <= prev {
			return fmt.Errorf("%w: row %d: index %d after %d: indices not strictly ascending", ErrMalformed, lo+i, k, prev)
		}
		if c.lim.Features > 0 && uint64(k) >= c.lim.Features {
			return fmt.Errorf("%w: row %d: index %d, want < %d features", ErrRange, lo+i, k, c.lim.Features)
		}
		c.bm[k>>6&63] |= 1 << (k & 63)
		prev = int64(k)
	}
	b := chooseResidueBits(&c.bm, len(idx))
	mask := uint32(1)<<b - 1
	if b > 0 {
		clear(c.bm[:])
		for _, k := range idx {
			r := k & mask
			c.bm[r>>6] |= 1 << (r & 63)
		}
	}
	L := uint32(0)
	for r := uint32(0); r <= mask; r++ {
		if b == 0 || c.bm[r>>6]>>(r&63)&1 != 0 {
			c.rank[r] = L
			L++
		}
	}
	w.write(uint64(b), 4)
	writeBitmap(w, &c.bm, b)

	c.gaps = grow(c.gaps, len(idx))
	next, sum := uint64(0), uint64(0)
	for i, k := range idx {
		kc := uint64(k>>b)*uint64(L) + uint64(c.rank[k&mask])
		g := kc - next
		c.gaps[i] = g
		sum += g
		next = kc + 1
	}
	K := riceParam(c.gaps[:len(idx)], sum)
	w.write(uint64(K), 5)
	for _, g := range c.gaps[:len(idx)] {
		if q := g >> K; q+1+uint64(K) <= 32 {
			w.write((g&(1<<K-1))<<(q+1)|1<<q, uint(q)+1+K) // (rice's common case, inlined)
			continue
		}
		w.rice(g, K)
	}
	return nil
}

// chooseResidueBits returns the residue width b in 0..12 whose estimated
// saving n*log2(2^b/L_b) - 2^b bits is largest (0 if none saves anything),
// where L_b is the number of residues mod 2^b present in bm (the map of
// residues mod 4096).
func chooseResidueBits(bm *[64]uint64, n int) uint {
	cur := *bm
	best, bestGain := uint(0), 0.0
	for b := maxResidueBits; b >= 1; b-- {
		words := max(1, (1<<b)/64)
		L := 0
		for _, x := range cur[:words] {
			L += bits.OnesCount64(x)
		}
		gain := float64(n)*math.Log2(float64(uint(1)<<b)/float64(L)) - float64(uint(1)<<b)
		if gain > bestGain {
			best, bestGain = uint(b), gain
		}
		// Fold to residues mod 2^(b-1).
		if b-1 >= 6 {
			half := (1 << (b - 1)) / 64
			for i := 0; i < half; i++ {
				cur[i] |= cur[i+half]
			}
		} else {
			hb := uint(1) << (b - 1)
			cur[0] = (cur[0] | cur[0]>>hb) & (1<<hb - 1)
		}
	}
	return best
}

func writeBitmap(w *bitWriter, bm *[64]uint64, b uint) {
	if b == 0 {
		return
	}
	if b < 5 {
		w.write(bm[0]&(1<<(1<<b)-1), 1<<b)
		return
	}
	for i := 0; i < (1<<b)/32; i++ {
		w.write(bm[i/2]>>(32*(i%2))&0xffffffff, 32)
	}
}

// riceParam returns the Rice parameter with the fewest bits for gaps: the
// smallest of the (up to 4) candidates k0-3 … k0 below the mean's bit
// length k0 whose exact cost is least, every candidate's cost summed in
// one pass over the gaps.
func riceParam(gaps []uint64, sum uint64) uint {
	n := uint64(len(gaps))
	k0 := bits.Len64(sum / n)
	lo, hi := max(0, k0-3), min(k0, 31)
	var q [4]uint64 // q[j]: the sum of the gaps >> (lo+j)
	s0, s1, s2, s3 := uint(lo), uint(lo+1), uint(lo+2), uint(lo+3)
	for _, g := range gaps {
		q[0] += g >> s0
		q[1] += g >> s1
		q[2] += g >> s2
		q[3] += g >> s3
	}
	best, bestCost := uint(0), uint64(math.MaxUint64)
	for k := lo; k <= hi; k++ {
		if cost := n*uint64(k+1) + q[k-lo]; cost < bestCost {
			best, bestCost = uint(k), cost
		}
	}
	return best
}

func (c *Codec) nonFinite(lo, i, width int, v float32) error {
	return fmt.Errorf("%w: row %d value %d is %v", ErrNonFinite, lo+i/width, i%width, v)
}

func (c *Codec) writeF32(w *bitWriter, src []float32, width, lo int, fb bool) error {
	h := &c.huff
	clear(h.count[:])
	for i, v := range src {
		e := math.Float32bits(v) >> 23 & 0xff
		if e == 0xff {
			return c.nonFinite(lo, i, width, v)
		}
		h.count[e]++
	}
	h.build()
	h.writeTable(w)
	for _, v := range src {
		u := math.Float32bits(v)
		e := u >> 23 & 0xff
		if l := uint(h.size[e]); l <= 8 {
			// The exponent's code and the 24 bits after it in one
			// write (at most 32 bits): the same stream, one call.
			w.write(uint64(h.code[e])|uint64(u>>31|(u&0x7fffff)<<1)<<l, l+24)
			continue
		}
		h.put(w, int(e))
		w.write(uint64(u>>31|(u&0x7fffff)<<1), 24)
	}
	if fb {
		clear(c.newRes[:len(src)])
	}
	return nil
}

func (c *Codec) writeF16(w *bitWriter, src []float32, width, lo int, fb bool) error {
	h := &c.huff
	clear(h.count[:])
	c.half = grow(c.half, len(src))
	for i, v := range src {
		if math.Float32bits(v)>>23&0xff == 0xff {
			return c.nonFinite(lo, i, width, v)
		}
		x := min(max(v, -halfMax), halfMax)
		hb := toHalf(x)
		c.half[i] = hb
		h.count[hb>>10&0x1f]++
		if fb {
			c.newRes[i] = v - fromHalf(hb)
		}
	}
	h.build()
	h.writeTable(w)
	for _, hb := range c.half[:len(src)] {
		h.put(w, int(hb>>10&0x1f))
		w.write(uint64(hb>>15|(hb&0x3ff)<<1), 11)
	}
	return nil
}

// i8Scale returns max|v|/127 for the values, adjusted down by an ulp if
// 127*scale would overflow, or an error for a non-finite value.
func (c *Codec) i8Scale(src []float32, width, lo int) (float32, error) {
	var m float32
	for i, v := range src {
		if math.Float32bits(v)>>23&0xff == 0xff {
			return 0, c.nonFinite(lo, i, width, v)
		}
		m = max(m, float32(math.Abs(float64(v))))
	}
	scale := m / 127
	for math.IsInf(float64(127*scale), 0) {
		scale = math.Nextafter32(scale, 0)
	}
	return scale, nil
}

func (c *Codec) writeI8(w *bitWriter, src []float32, width, lo int, fb bool) error {
	scale, err := c.i8Scale(src, width, lo)
	if err != nil {
		return err
	}
	inv := 0.0
	if scale > 0 {
		inv = 1 / float64(scale)
	}
	h := &c.huff
	clear(h.count[:])
	c.q = grow(c.q, len(src))
	for i, v := range src {
		q := int32(math.Round(float64(v) * inv))
		q = min(max(q, -127), 127)
		c.q[i] = int8(q)
		a := q
		if a < 0 {
			a = -a
		}
		h.count[bits.Len32(uint32(a))]++
		if fb {
			c.newRes[i] = v - float32(q)*scale
		}
	}
	w.write(uint64(math.Float32bits(scale)), 32)
	h.build()
	h.writeTable(w)
	for _, q := range c.q[:len(src)] {
		sign, a := uint32(0), uint32(q)
		if q < 0 {
			sign, a = 1, uint32(-int32(q))
		}
		cls := bits.Len32(a)
		h.put(w, cls)
		if cls > 0 {
			w.write(uint64(sign|(a&(1<<(cls-1)-1))<<1), uint(cls))
		}
	}
	return nil
}

// readSparse decodes a sparse section of the given width from body[pos:],
// which must end exactly where the section ends.
func (c *Codec) readSparse(body []byte, pos, width int, out *model.Sparse) error {
	rows, k := binary.Uvarint(body[pos:])
	if k <= 0 {
		return fmt.Errorf("%w: body byte %d: bad row count", ErrMalformed, pos)
	}
	pos += k
	if rows > uint64(c.lim.MaxRows) {
		return fmt.Errorf("%w: %d rows, limit %d", ErrTooLarge, rows, c.lim.MaxRows)
	}
	nv := rows * uint64(width)
	if nv > uint64(c.lim.MaxValues) {
		return fmt.Errorf("%w: %d rows x width %d values, limit %d", ErrTooLarge, rows, width, c.lim.MaxValues)
	}
	out.Reset()
	if rows == 0 {
		if pos != len(body) {
			return fmt.Errorf("%w: %d bytes after an empty sparse body", ErrMalformed, len(body)-pos)
		}
		return nil
	}
	if c.decValues == Raw {
		// A row's index takes at least a byte, a value four.
		if rows+4*nv > uint64(len(body)-pos) {
			return fmt.Errorf("%w: %d raw rows of width %d cannot fit in %d bytes", ErrMalformed, rows, width, len(body)-pos)
		}
		out.Idx = grow(out.Idx, int(rows))
		out.Val = grow(out.Val, int(nv))
		k, err := c.readRawIndices(body[pos:], out.Idx)
		if err != nil {
			return err
		}
		return readRawValues(body[pos+k:], out.Val, width)
	}
	// Every row takes at least one index bit and every value at least one
	// code bit: check before allocating.
	if rows+nv > 8*uint64(len(body)-pos) {
		return fmt.Errorf("%w: %d rows of width %d cannot fit in %d bytes", ErrMalformed, rows, width, len(body)-pos)
	}
	r := &c.r
	r.reset(body[pos:])
	n := int(rows)
	out.Idx = grow(out.Idx, n)
	out.Val = grow(out.Val, int(nv))
	if err := c.readIndices(r, out.Idx); err != nil {
		return err
	}
	var err error
	switch c.decValues {
	case F32:
		err = c.readF32(r, out.Val, width)
	case F16:
		err = c.readF16(r, out.Val, width)
	case I8:
		err = c.readI8(r, out.Val, width)
	}
	if err != nil {
		return err
	}
	if !r.rest() {
		return fmt.Errorf("%w: trailing bits after the sparse body", ErrMalformed)
	}
	return nil
}

func (c *Codec) readIndices(r *bitReader, idx []uint32) error {
	bv, ok := r.read(4)
	if !ok {
		return fmt.Errorf("%w: truncated index block", ErrMalformed)
	}
	if bv > maxResidueBits {
		return fmt.Errorf("%w: residue bits %d, want <= %d", ErrMalformed, bv, maxResidueBits)
	}
	b := uint(bv)
	L := uint32(1)
	c.res[0] = 0
	if b > 0 {
		L = 0
		nb := uint(1) << b
		for base := uint(0); base < nb; base += 32 {
			chunk := min(nb-base, 32)
			m, ok := r.read(chunk)
			if !ok {
				return fmt.Errorf("%w: truncated residue map", ErrMalformed)
			}
			for m != 0 {
				c.res[L] = uint32(base) + uint32(bits.TrailingZeros64(m))
				L++
				m &= m - 1
			}
		}
		if L == 0 {
			return fmt.Errorf("%w: empty residue map", ErrMalformed)
		}
	}
	kv, ok := r.read(5)
	if !ok {
		return fmt.Errorf("%w: truncated index block", ErrMalformed)
	}
	K := uint(kv)
	space := uint64(1) << (32 - b) * uint64(L)
	limit := uint64(1) << 32
	if c.lim.Features > 0 {
		limit = c.lim.Features
	}
	var div fastDiv
	div.init(L)
	next := uint64(0)
	for i := range idx {
		if r.n < 32+K {
			r.refill()
		}
		var g uint64
		if tz := uint(bits.TrailingZeros64(r.acc)); tz+1+K <= r.n {
			// The whole code is loaded (bits past n are the stream's
			// next or zero, so a one below n ends the zeros): what
			// rice reads, without its loop.
			x := r.acc >> (tz + 1)
			g = uint64(tz)<<K | x&(1<<K-1)
			r.acc = x >> K
			r.n -= tz + 1 + K
		} else {
			var ok bool
			if g, ok = r.rice(K); !ok {
				return fmt.Errorf("%w: truncated index %d", ErrMalformed, i)
			}
		}
		kc := next + g
		if kc >= space {
			return fmt.Errorf("%w: row %d: index beyond 2^32", ErrRange, i)
		}
		q, m := div.divmod(uint32(kc))
		k := uint64(q)<<b | uint64(c.res[m])
		if k >= limit {
			return fmt.Errorf("%w: row %d: index %d, want < %d", ErrRange, i, k, limit)
		}
		idx[i] = uint32(k)
		next = kc + 1
	}
	return nil
}

// fastDiv divides 32-bit numbers by a fixed divisor with a multiplication:
// D. Lemire, O. Kaser, N. Kurz, "Faster remainder by direct computation",
// Software: Practice and Experience 49(6), 2019 (exact for 32-bit n and d).
type fastDiv struct {
	d     uint32
	m     uint64
	shift uint
	pow2  bool
}

func (f *fastDiv) init(d uint32) {
	f.d = d
	f.pow2 = d&(d-1) == 0
	f.shift = uint(bits.TrailingZeros32(d))
	if !f.pow2 {
		f.m = math.MaxUint64/uint64(d) + 1
	}
}

func (f *fastDiv) divmod(n uint32) (q, r uint32) {
	if f.pow2 {
		return n >> f.shift, n & (f.d - 1)
	}
	hi, _ := bits.Mul64(f.m, uint64(n))
	q = uint32(hi)
	return q, n - q*f.d
}

func (c *Codec) readF32(r *bitReader, val []float32, width int) error {
	d := &c.hdec
	if err := d.readTable(r, 255); err != nil {
		return err
	}
	for i := range val {
		if r.n < 35 {
			r.refill()
		}
		if r.n >= 35 {
			// A whole value is in acc (a code is at most 11 bits): no
			// bound to check but the code's.
			t := d.table[r.acc&d.mask]
			if l := uint(t & 15); l != 0 && t>>4 != 0xff {
				x := r.acc >> l
				r.acc = x >> 24
				r.n -= l + 24
				val[i] = math.Float32frombits(uint32(x&1)<<31 | uint32(t>>4)<<23 | uint32(x>>1&0x7fffff))
				continue
			}
		}
		e, ok := d.decode(r)
		if !ok {
			return fmt.Errorf("%w: value %d: bad or truncated exponent code", ErrMalformed, i)
		}
		if e == 0xff {
			return fmt.Errorf("%w: row %d value %d: exponent 255 (NaN or Inf)", ErrNonFinite, i/width, i%width)
		}
		x, ok := r.read(24)
		if !ok {
			return fmt.Errorf("%w: value %d: truncated mantissa", ErrMalformed, i)
		}
		val[i] = math.Float32frombits(uint32(x&1)<<31 | uint32(e)<<23 | uint32(x>>1))
	}
	return nil
}

func (c *Codec) readF16(r *bitReader, val []float32, width int) error {
	d := &c.hdec
	if err := d.readTable(r, 31); err != nil {
		return err
	}
	for i := range val {
		if r.n < 22 {
			r.refill()
		}
		e, ok := d.decode(r)
		if !ok {
			return fmt.Errorf("%w: value %d: bad or truncated exponent code", ErrMalformed, i)
		}
		if e == 0x1f {
			return fmt.Errorf("%w: row %d value %d: half exponent 31 (NaN or Inf)", ErrNonFinite, i/width, i%width)
		}
		x, ok := r.read(11)
		if !ok {
			return fmt.Errorf("%w: value %d: truncated mantissa", ErrMalformed, i)
		}
		val[i] = math.Float32frombits(halfBits(uint32(x&1), uint32(e), uint32(x>>1)))
	}
	return nil
}

func (c *Codec) readI8(r *bitReader, val []float32, width int) error {
	sb, ok := r.read(32)
	if !ok {
		return fmt.Errorf("%w: truncated i8 scale", ErrMalformed)
	}
	scale := math.Float32frombits(uint32(sb))
	if s := float64(scale); math.IsNaN(s) || math.IsInf(s, 0) || math.IsInf(float64(127*scale), 0) {
		return fmt.Errorf("%w: i8 scale %v", ErrNonFinite, scale)
	}
	if sb>>31 != 0 {
		return fmt.Errorf("%w: negative i8 scale %v", ErrMalformed, scale)
	}
	d := &c.hdec
	if err := d.readTable(r, 7); err != nil {
		return err
	}
	for i := range val {
		if r.n < 18 {
			r.refill()
		}
		cls, ok := d.decode(r)
		if !ok {
			return fmt.Errorf("%w: value %d: bad or truncated class code", ErrMalformed, i)
		}
		q := int32(0)
		if cls > 0 {
			x, ok := r.read(cls)
			if !ok {
				return fmt.Errorf("%w: value %d: truncated magnitude", ErrMalformed, i)
			}
			q = int32(1<<(cls-1) | x>>1)
			if x&1 != 0 {
				q = -q
			}
		}
		val[i] = float32(q) * scale
	}
	return nil
}

// grow returns s resized to n, reallocating only when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
