package wire

import (
	"fmt"
	"math/bits"
)

// Canonical, length-limited Huffman codes for small alphabets (at most 256
// symbols: float exponents, i8 magnitude classes). A message carries its own
// table, so the code fits each message's value distribution.
//
// Table on the wire: lo (8 bits), hi (8 bits), then a 4-bit code length for
// every symbol lo..hi (0 = absent). lo and hi are present symbols. Codes are
// canonical (shorter first, then by symbol) and written bit-reversed so the
// LSB-first reader can index a table with the next bits.

// huffMaxLen bounds code lengths: the decode table has at most 2^11 entries
// and any 256-symbol alphabet fits.
const huffMaxLen = 11

// huffEnc builds and holds the code of one message. Its arrays are reused,
// so building allocates nothing.
type huffEnc struct {
	count   [256]uint32 // symbol frequencies, filled by the caller
	code    [256]uint16 // bit-reversed canonical code
	size    [256]uint8  // code length, 0 for absent symbols
	lo, hi  int         // smallest and largest present symbol
	order   [256]uint16 // present symbols by ascending count
	w       [256]int
	blCount [257]int
}

// build computes the code for the counts. At least one count is nonzero.
func (h *huffEnc) build() {
	n := 0
	h.lo, h.hi = -1, -1
	for s, c := range h.count {
		h.size[s] = 0
		if c == 0 {
			continue
		}
		if h.lo < 0 {
			h.lo = s
		}
		h.hi = s
		// insertion sort by (count, symbol)
		i := n
		for i > 0 && h.count[h.order[i-1]] > c {
			h.order[i] = h.order[i-1]
			i--
		}
		h.order[i] = uint16(s)
		n++
	}
	if n == 0 {
		panic("wire: huffman code of an empty alphabet")
	}
	clear(h.blCount[:])
	if n == 1 {
		h.blCount[1] = 1 // a lone symbol still costs one bit: see decodeValues
	} else {
		for i := 0; i < n; i++ {
			h.w[i] = int(h.count[h.order[i]])
		}
		minimumRedundancy(h.w[:n])
		for i := 0; i < n; i++ {
			h.blCount[h.w[i]]++
		}
		limitLengths(&h.blCount, huffMaxLen)
	}
	// Longest codes to the rarest symbols.
	i := 0
	for l := huffMaxLen; l >= 1; l-- {
		for c := h.blCount[l]; c > 0; c-- {
			h.size[h.order[i]] = uint8(l)
			i++
		}
	}
	var next [huffMaxLen + 1]uint32
	canonicalStarts(&h.blCount, &next)
	for s := h.lo; s <= h.hi; s++ {
		if l := h.size[s]; l > 0 {
			h.code[s] = uint16(bits.Reverse32(next[l]) >> (32 - uint(l)))
			next[l]++
		}
	}
}

// canonicalStarts sets next[l] to the first canonical code of length l.
func canonicalStarts(blCount *[257]int, next *[huffMaxLen + 1]uint32) {
	code := uint32(0)
	for l := 1; l <= huffMaxLen; l++ {
		code = (code + uint32(blCount[l-1])) << 1
		next[l] = code
	}
}

// writeTable writes the code lengths.
func (h *huffEnc) writeTable(w *bitWriter) {
	w.write(uint64(h.lo), 8)
	w.write(uint64(h.hi), 8)
	for s := h.lo; s <= h.hi; s++ {
		w.write(uint64(h.size[s]), 4)
	}
}

// put writes symbol s.
func (h *huffEnc) put(w *bitWriter, s int) {
	w.write(uint64(h.code[s]), uint(h.size[s]))
}

// minimumRedundancy replaces the weights A, sorted ascending, by optimal
// (Huffman) code lengths, in place, in O(n): the algorithm of A. Moffat and
// J. Katajainen, "In-place calculation of minimum-redundancy codes",
// WADS 1995. len(A) >= 2.
func minimumRedundancy(A []int) {
	n := len(A)
	// Phase 1: left to right, combine the two smallest; A[i] becomes a
	// parent pointer for consumed internal nodes.
	A[0] += A[1]
	root, leaf := 0, 2
	for next := 1; next < n-1; next++ {
		if leaf >= n || A[root] < A[leaf] {
			A[next] = A[root]
			A[root] = next
			root++
		} else {
			A[next] = A[leaf]
			leaf++
		}
		if leaf >= n || (root < next && A[root] < A[leaf]) {
			A[next] += A[root]
			A[root] = next
			root++
		} else {
			A[next] += A[leaf]
			leaf++
		}
	}
	// Phase 2: right to left, internal node depths.
	A[n-2] = 0
	for next := n - 3; next >= 0; next-- {
		A[next] = A[A[next]] + 1
	}
	// Phase 3: right to left, leaf depths.
	avail, used, depth := 1, 0, 0
	root, next := n-2, n-1
	for avail > 0 {
		for root >= 0 && A[root] == depth {
			used++
			root--
		}
		for avail > used {
			A[next] = depth
			next--
			avail--
		}
		avail = 2 * used
		depth++
		used = 0
	}
}

// limitLengths rewrites a count-of-lengths histogram so no code is longer
// than max, keeping the Kraft sum at exactly 1: each step takes two leaves
// at the deepest level i, moves one up to their parent's place at i-1 and
// hangs the other with a leaf from the deepest level j < i-1 that has one
// (the procedure of ITU T.81 / JPEG Annex K.3, "Adjust_BITS").
func limitLengths(blCount *[257]int, max int) {
	for i := len(blCount) - 1; i > max; i-- {
		for blCount[i] > 0 {
			j := i - 2
			for blCount[j] == 0 {
				j--
			}
			blCount[i] -= 2
			blCount[i-1]++
			blCount[j+1] += 2
			blCount[j]--
		}
	}
}

// huffDec is the decoding side: a table indexed by the next `bits` bits of
// the stream. An entry is symbol<<4 | length; length 0 marks a bit pattern
// that no code starts with.
type huffDec struct {
	table [1 << huffMaxLen]uint16
	bits  uint
	mask  uint64
	lo    int
	hi    int
}

// readTable reads a table whose symbols must be <= maxSym.
func (d *huffDec) readTable(r *bitReader, maxSym int) error {
	lo, ok1 := r.read(8)
	hi, ok2 := r.read(8)
	if !ok1 || !ok2 {
		return fmt.Errorf("%w: truncated code table", ErrMalformed)
	}
	if hi < lo || int(hi) > maxSym {
		return fmt.Errorf("%w: code table symbols %d..%d, want lo <= hi <= %d", ErrMalformed, lo, hi, maxSym)
	}
	d.lo, d.hi = int(lo), int(hi)
	var blCount [257]int
	var size [256]uint8
	kraft := 0
	longest := 0
	for s := d.lo; s <= d.hi; s++ {
		l, ok := r.read(4)
		if !ok {
			return fmt.Errorf("%w: truncated code table", ErrMalformed)
		}
		if l > huffMaxLen {
			return fmt.Errorf("%w: code length %d for symbol %d, want <= %d", ErrMalformed, l, s, huffMaxLen)
		}
		size[s] = uint8(l)
		if l > 0 {
			blCount[l]++
			kraft += 1 << (huffMaxLen - l)
			longest = max(longest, int(l))
		}
	}
	if size[d.lo] == 0 || size[d.hi] == 0 {
		return fmt.Errorf("%w: code table ends at absent symbols %d..%d", ErrMalformed, lo, hi)
	}
	if kraft > 1<<huffMaxLen {
		return fmt.Errorf("%w: over-subscribed code table", ErrMalformed)
	}
	d.bits = uint(longest)
	d.mask = 1<<d.bits - 1
	clear(d.table[:1<<d.bits])
	var next [huffMaxLen + 1]uint32
	canonicalStarts(&blCount, &next)
	for s := d.lo; s <= d.hi; s++ {
		l := uint(size[s])
		if l == 0 {
			continue
		}
		rev := bits.Reverse32(next[l]) >> (32 - l)
		next[l]++
		e := uint16(s)<<4 | uint16(l)
		for j := rev; j < 1<<d.bits; j += 1 << l {
			d.table[j] = e
		}
	}
	return nil
}

// decode reads one symbol. ok is false on a pattern no code starts with or
// on truncated input.
func (d *huffDec) decode(r *bitReader) (sym uint, ok bool) {
	if r.n < d.bits {
		r.refill()
	}
	e := d.table[r.acc&d.mask]
	l := uint(e & 15)
	if l == 0 || l > r.n {
		return 0, false
	}
	r.acc >>= l
	r.n -= l
	return uint(e >> 4), true
}
