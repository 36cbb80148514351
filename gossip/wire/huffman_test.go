package wire

import (
	"container/heap"
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
