package wire

import (
	"bytes"
	"container/heap"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// refHuffmanCost is the cost sum(count*length) of an optimal prefix code,
// by the textbook heap construction: the sum of all merged weights.
func refHuffmanCost(counts []int) int {
	h := &intHeap{}
	for _, c := range counts {
		if c > 0 {
			heap.Push(h, c)
		}
	}
	if h.Len() == 1 {
		return (*h)[0]
	}
	cost := 0
	for h.Len() > 1 {
		a, b := heap.Pop(h).(int), heap.Pop(h).(int)
		cost += a + b
		heap.Push(h, a+b)
	}
	return cost
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func TestHuffmanHandChecked(t *testing.T) {
	// Counts 1, 1, 2, 4: lengths 3, 3, 2, 1.
	var h huffEnc
	h.count[10], h.count[11], h.count[12], h.count[13] = 1, 1, 2, 4
	h.build()
	want := map[int]uint8{10: 3, 11: 3, 12: 2, 13: 1}
	for s, l := range want {
		if h.size[s] != l {
			t.Errorf("length of symbol %d = %d, want %d", s, h.size[s], l)
		}
	}
	if h.lo != 10 || h.hi != 13 {
		t.Errorf("lo, hi = %d, %d, want 10, 13", h.lo, h.hi)
	}
	// Canonical codes (MSB first): 13 -> 0, 12 -> 10, 10 -> 110, 11 -> 111;
	// stored bit-reversed.
	for s, c := range map[int]uint16{13: 0b0, 12: 0b01, 10: 0b011, 11: 0b111} {
		if h.code[s] != c {
			t.Errorf("code of %d = %b, want %b", s, h.code[s], c)
		}
	}
}

// On random alphabets the code is optimal whenever the optimum fits in 11
// bits, never longer than 11 bits, and always a valid prefix code that
// decodes what it encoded.
func TestHuffmanRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 500; trial++ {
		var h huffEnc
		n := 1 + r.IntN(256)
		counts := make([]int, 256)
		for i := 0; i < n; i++ {
			s := r.IntN(256)
			switch trial % 3 {
			case 0:
				counts[s] = 1 + r.IntN(1000)
			case 1: // geometric-like: forces long codes
				counts[s] = 1 << r.IntN(24)
			case 2:
				counts[s] = 1 + r.IntN(3)
			}
		}
		for s, c := range counts {
			h.count[s] = uint32(c)
		}
		h.build()
		kraft, cost, maxLen := 0, 0, 0
		present := 0
		for s, c := range counts {
			l := int(h.size[s])
			if (c > 0) != (l > 0) {
				t.Fatalf("trial %d: symbol %d count %d length %d", trial, s, c, l)
			}
			if l > 0 {
				present++
				kraft += 1 << (huffMaxLen - l)
				cost += c * l
				maxLen = max(maxLen, l)
			}
		}
		if maxLen > huffMaxLen || kraft > 1<<huffMaxLen {
			t.Fatalf("trial %d: max length %d, Kraft %d/%d", trial, maxLen, kraft, 1<<huffMaxLen)
		}
		if present > 1 && kraft != 1<<huffMaxLen {
			t.Fatalf("trial %d: incomplete code, Kraft %d/%d", trial, kraft, 1<<huffMaxLen)
		}
		if ref := refHuffmanCost(counts); present > 1 && maxLen < huffMaxLen && cost != ref {
			t.Fatalf("trial %d: cost %d, optimal %d", trial, cost, ref)
		} else if cost < ref {
			t.Fatalf("trial %d: cost %d below the optimum %d", trial, cost, ref)
		}

		// Round trip a message of every present symbol, shuffled.
		var syms []int
		for s, c := range counts {
			for i := 0; i < min(c, 5); i++ {
				syms = append(syms, s)
			}
		}
		r.Shuffle(len(syms), func(i, j int) { syms[i], syms[j] = syms[j], syms[i] })
		var w bitWriter
		h.writeTable(&w)
		for _, s := range syms {
			h.put(&w, s)
		}
		buf := w.finish()
		var rd bitReader
		rd.reset(buf)
		var d huffDec
		if err := d.readTable(&rd, 255); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		for i, s := range syms {
			got, ok := d.decode(&rd)
			if !ok || int(got) != s {
				t.Fatalf("trial %d: symbol %d = %d (ok %v), want %d", trial, i, got, ok, s)
			}
		}
		if !rd.rest() {
			t.Fatalf("trial %d: bits left over", trial)
		}
	}
}

func TestHuffmanTableRejects(t *testing.T) {
	table := func(lo, hi int, lens ...uint64) []byte {
		var w bitWriter
		w.write(uint64(lo), 8)
		w.write(uint64(hi), 8)
		for _, l := range lens {
			w.write(l, 4)
		}
		w.write(0, 32)
		return w.finish()
	}
	for _, c := range []struct {
		name string
		buf  []byte
		max  int
	}{
		{"hi below lo", table(5, 4), 255},
		{"symbol above max", table(0, 8, 1, 0, 0, 0, 0, 0, 0, 0, 1), 7},
		{"length 12", table(0, 1, 12, 1), 255},
		{"over-subscribed", table(0, 2, 1, 1, 1), 255},
		{"absent first symbol", table(0, 2, 0, 1, 1), 255},
		{"truncated", []byte{0}, 255},
	} {
		var r bitReader
		r.reset(c.buf)
		var d huffDec
		if err := d.readTable(&r, c.max); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// TestF32Stream: writeF32 writes exactly the stream of the format (code
// table; per value the exponent's code, the sign, the mantissa, written
// one field at a time here), with codes short enough to go out with the
// value's other 24 bits in one write and codes too long for it (up to 11
// bits), and readF32 reads every value back, at the stream's end too
// (where fewer than a whole value's bits are left to load at once).
func TestF32Stream(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	c := NewCodec(F32, None, DefaultLimits())
	for trial := range 200 {
		n := 1 + r.IntN(3000)
		src := make([]float32, n)
		for i := range src {
			// Exponents geometric around 120 (codes from 1 to 11 bits),
			// signs and mantissas at random.
			e := uint32(120)
			for e > 1 && r.IntN(trial%3+2) == 0 {
				e--
			}
			if trial%5 == 0 {
				e = uint32(r.IntN(255)) // every length in one message
			}
			src[i] = math.Float32frombits(r.Uint32()&0x807fffff | e<<23)
		}
		var got bitWriter
		if err := c.writeF32(&got, src, 1, 0, false); err != nil {
			t.Fatal(err)
		}
		stream := got.finish()
		var want bitWriter
		h := &c.huff // (as writeF32 left it: the code of src)
		h.writeTable(&want)
		for _, v := range src {
			u := math.Float32bits(v)
			h.put(&want, int(u>>23&0xff))
			want.write(uint64(u>>31), 1)
			want.write(uint64(u&0x7fffff), 23)
		}
		if !bytes.Equal(stream, want.finish()) {
			t.Fatalf("trial %d: %d values: the stream differs from the format's", trial, n)
		}
		var rd bitReader
		rd.reset(stream)
		back := make([]float32, n)
		if err := c.readF32(&rd, back, 1); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		for i := range src {
			if math.Float32bits(back[i]) != math.Float32bits(src[i]) {
				t.Fatalf("trial %d: value %d read %v, wrote %v", trial, i, back[i], src[i])
			}
		}
		if !rd.rest() {
			t.Fatalf("trial %d: bits left over", trial)
		}
	}
}

// TestRiceParam: the parameter is the cheapest of the candidates up to
// the mean's bit length (at most 3 below it, at most 31), each costed on
// its own (the smallest on a tie).
func TestRiceParam(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := range 500 {
		gaps := make([]uint64, 1+r.IntN(200))
		sum := uint64(0)
		scale := uint64(1) << r.IntN(34)
		for i := range gaps {
			gaps[i] = r.Uint64N(scale)
			if trial%4 == 0 && r.IntN(10) == 0 {
				gaps[i] = scale * 50 // outliers
			}
			sum += gaps[i]
		}
		k0 := bits.Len64(sum / uint64(len(gaps)))
		best, bestCost := 0, uint64(math.MaxUint64) // (0 when no candidate is at most 31)
		for k := max(0, k0-3); k <= min(k0, 31); k++ {
			cost := uint64(len(gaps)) * uint64(k+1)
			for _, g := range gaps {
				cost += g >> k
			}
			if cost < bestCost {
				best, bestCost = k, cost
			}
		}
		if got := riceParam(gaps, sum); got != uint(best) {
			t.Fatalf("trial %d: riceParam %d, want %d", trial, got, best)
		}
	}
}
