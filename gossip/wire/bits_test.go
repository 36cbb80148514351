package wire

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestBitsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	type item struct {
		v    uint64
		n    uint
		rice bool
	}
	var items []item
	var w bitWriter
	for i := 0; i < 20000; i++ {
		if r.IntN(2) == 0 {
			n := uint(r.IntN(33))
			v := r.Uint64() & (1<<n - 1)
			items = append(items, item{v, n, false})
			w.write(v, n)
		} else {
			k := uint(r.IntN(32))
			v := r.Uint64() >> (r.IntN(64))
			v = min(v, 1<<k*200) // keep unary parts reasonable
			items = append(items, item{v, k, true})
			w.rice(v, k)
		}
	}
	buf := w.finish()
	var rd bitReader
	rd.reset(buf)
	for i, it := range items {
		var got uint64
		var ok bool
		if it.rice {
			got, ok = rd.rice(it.n)
		} else {
			got, ok = rd.read(it.n)
		}
		if !ok || got != it.v {
			t.Fatalf("item %d (%+v): got %d ok %v", i, it, got, ok)
		}
	}
	if !rd.rest() {
		t.Fatal("bits left over")
	}
	if _, ok := rd.read(8); ok {
		t.Fatal("read past the end")
	}
}

// Rice(k) of g is g>>k zeros, a one, then k bits: count them by hand.
func TestRiceLength(t *testing.T) {
	for _, c := range []struct {
		g    uint64
		k    uint
		bits int
	}{
		{0, 0, 1}, {5, 0, 6}, {5, 2, 1 + 1 + 2}, {4095, 12, 13}, {4096, 12, 14}, {100, 1, 50 + 1 + 1}, {1 << 20, 3, 1<<17 + 1 + 3},
	} {
		var w bitWriter
		w.rice(c.g, c.k)
		if got := len(w.buf)*8 + int(w.n); got != c.bits {
			t.Errorf("rice(%d, %d) took %d bits, want %d", c.g, c.k, got, c.bits)
		}
	}
}

func TestFastDiv(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for d := uint32(1); d <= 4096; d++ {
		var f fastDiv
		f.init(d)
		for _, n := range []uint32{0, 1, d - 1, d, d + 1, ^uint32(0), ^uint32(0) - d + 1, r.Uint32(), r.Uint32(), r.Uint32()} {
			q, m := f.divmod(n)
			if q != n/d || m != n%d {
				t.Fatalf("%d / %d = %d rem %d, want %d rem %d", n, d, q, m, n/d, n%d)
			}
		}
	}
}

// TestIndexStream: writeIndices writes each gap as bitWriter.rice does
// (read back here with bitReader.rice, gap by gap) and readIndices reads
// the list back, for lists whose gaps are all short, and lists with gaps
// too long to write or read in one step (32 zeros and more), ending the
// stream or not.
func TestIndexStream(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	c := NewCodec(F32, None, DefaultLimits())
	for trial := range 300 {
		n := 1 + r.IntN(2000)
		set := map[uint32]bool{}
		for len(set) < n {
			k := r.Uint32N(1 << 24)
			switch trial % 3 {
			case 1:
				k = k &^ 3 // one residue of 4 (an owner's shards)
			case 2:
				if r.IntN(20) == 0 {
					k = r.Uint32() // far apart: long unary parts
				}
			}
			set[k] = true
		}
		idx := make([]uint32, 0, n)
		for k := range set {
			idx = append(idx, k)
		}
		slices.Sort(idx)
		var w bitWriter
		if err := c.writeIndices(&w, idx, 0); err != nil {
			t.Fatal(err)
		}
		tail := uint64(r.IntN(1 << 10))
		if trial%2 == 1 {
			w.write(tail, 10) // a stream that goes on after the list
		}
		stream := w.finish()

		var rd bitReader
		rd.reset(stream)
		got := make([]uint32, n)
		if err := c.readIndices(&rd, got); err != nil || !slices.Equal(got, idx) {
			t.Fatalf("trial %d: readIndices: %v, equal %v", trial, err, slices.Equal(got, idx))
		}
		if trial%2 == 1 {
			if v, ok := rd.read(10); !ok || v != tail {
				t.Fatalf("trial %d: the bits after the list read %d, %v, want %d", trial, v, ok, tail)
			}
		}

		// The same stream, gap by gap: the gaps writeIndices computed
		// (c.gaps), each as rice wrote it.
		rd.reset(stream)
		b, _ := rd.read(4)
		for left := uint(0); b > 0 && left < 1<<b; left += 32 {
			rd.read(min(1<<b-left, 32)) // the residue map
		}
		K, _ := rd.read(5)
		for i, g := range c.gaps[:n] {
			if v, ok := rd.rice(uint(K)); !ok || v != g {
				t.Fatalf("trial %d: gap %d read %d, %v, want %d", trial, i, v, ok, g)
			}
		}
	}
}
