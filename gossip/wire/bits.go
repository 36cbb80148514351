package wire

import (
	"encoding/binary"
	"math/bits"
)

// bitWriter appends a bit stream to a byte slice, least significant bit
// first: the first bit written is bit 0 of the first byte.
type bitWriter struct {
	buf []byte
	acc uint64 // pending bits, LSB first
	n   uint   // number of pending bits, < 32 between calls
}

func (w *bitWriter) reset(buf []byte) {
	w.buf, w.acc, w.n = buf, 0, 0
}

// write appends the low nb bits of v. nb <= 32 and v < 1<<nb.
func (w *bitWriter) write(v uint64, nb uint) {
	w.acc |= v << w.n
	w.n += nb
	if w.n >= 32 {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(w.acc))
		w.acc >>= 32
		w.n -= 32
	}
}

// rice appends g in the Rice code with parameter k <= 31: g>>k zero bits,
// a one bit, then the k low bits of g.
func (w *bitWriter) rice(g uint64, k uint) {
	q := g >> k
	if q+1+uint64(k) <= 32 {
		w.write((g&(1<<k-1))<<(q+1)|1<<q, uint(q)+1+k)
		return
	}
	for q >= 32 {
		w.write(0, 32)
		q -= 32
	}
	w.write(1<<q, uint(q)+1)
	w.write(g&(1<<k-1), k)
}

// finish pads the stream with zero bits to a whole byte and returns it.
func (w *bitWriter) finish() []byte {
	for w.n > 0 {
		w.buf = append(w.buf, byte(w.acc))
		w.acc >>= 8
		if w.n < 8 {
			w.n = 0
		} else {
			w.n -= 8
		}
	}
	return w.buf
}

// bitReader reads what bitWriter wrote. It never reads past its slice:
// reads past the end report failure, and every loop consumes input, so a
// hostile stream costs at most time proportional to its length.
type bitReader struct {
	buf []byte
	pos int    // next byte to load into acc
	acc uint64 // bits [0, n) are the next bits of the stream; higher bits are the following bits or zero
	n   uint   // valid bits in acc, <= 63
}

func (r *bitReader) reset(buf []byte) {
	r.buf, r.pos, r.acc, r.n = buf, 0, 0, 0
}

// refill loads bytes until at least 56 bits are valid or the input ends.
func (r *bitReader) refill() {
	if r.pos+8 <= len(r.buf) {
		r.acc |= binary.LittleEndian.Uint64(r.buf[r.pos:]) << r.n
		r.pos += int((63 - r.n) >> 3)
		r.n |= 56
		return
	}
	for r.n <= 55 && r.pos < len(r.buf) {
		r.acc |= uint64(r.buf[r.pos]) << r.n
		r.pos++
		r.n += 8
	}
}

// read returns the next nb <= 56 bits.
func (r *bitReader) read(nb uint) (uint64, bool) {
	if r.n < nb {
		r.refill()
		if r.n < nb {
			return 0, false
		}
	}
	v := r.acc & (1<<nb - 1)
	r.acc >>= nb
	r.n -= nb
	return v, true
}

// rice reads a Rice-coded number with parameter k <= 31.
func (r *bitReader) rice(k uint) (uint64, bool) {
	var q uint64
	for {
		if r.n < 32 {
			r.refill()
			if r.n == 0 {
				return 0, false
			}
		}
		valid := r.acc & (1<<r.n - 1)
		if valid != 0 {
			tz := uint(bits.TrailingZeros64(valid))
			q += uint64(tz)
			r.acc >>= tz + 1
			r.n -= tz + 1
			break
		}
		q += uint64(r.n)
		r.acc >>= r.n
		r.n = 0
		if q >= 1<<32 {
			return 0, false
		}
	}
	rem, ok := r.read(k)
	return q<<k | rem, ok
}

// rest reports whether the stream is exhausted except for at most 7 zero
// padding bits: the canonical end of a body.
func (r *bitReader) rest() bool {
	return r.pos == len(r.buf) && r.n < 8 && r.acc&(1<<r.n-1) == 0
}
