package model

import (
	"runtime"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// untouchedRuns covers the slice in order; values written are in runs it
// reads; and on Linux without swap the pages never written are runs it
// skips.
func TestUntouchedRunsCoverWhatWasWritten(t *testing.T) {
	v := make([]float32, 4<<20) // 16 MiB, fresh from the OS
	written := []int{0, 5, 1 << 20, 1<<20 + 1, 3<<20 + 17, len(v) - 1}
	for _, i := range written {
		v[i] = float32(i + 1)
	}
	next, skipped := 0, 0
	untouchedRuns(v, func(lo, hi int, zero bool) {
		if lo != next || hi <= lo || hi > len(v) {
			t.Fatalf("run [%d, %d) after one ending at %d (len %d)", lo, hi, next, len(v))
		}
		next = hi
		if zero {
			skipped += hi - lo
			for _, i := range written {
				if i >= lo && i < hi {
					t.Errorf("value %d (written) in a run said untouched: [%d, %d)", i, lo, hi)
				}
			}
		}
	})
	if next != len(v) {
		t.Fatalf("runs end at %d, want %d", next, len(v))
	}
	if _, _, _, ok := residency(v); ok && skipped < len(v)/2 {
		t.Errorf("%d of %d values in untouched runs; want most: only %d values were written", skipped, len(v), len(written))
	} else if !ok {
		t.Logf("%s: residency is not known here (swap, or not Linux): everything is read", runtime.GOOS)
	}
}

// Hash and NonZeros give what reading every weight gives, and where pages
// can be told untouched they leave them so: a 64 MiB model with a few
// rows set stays a few pages resident.
func TestHashAndNonZerosReadOnlyTouchedPages(t *testing.T) {
	m, err := New(Logreg, 1<<24, 2, 256, OptConfig{Kind: AdaGrad, LR: 0.1, Eps: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []uint32{0, 1, 255, 256, 70000, 1 << 20, 1<<24 - 1, m.Bias()} {
		m.Row(k)[0] = float32(k%97) + 0.5
	}
	before := residentPages(m.W)
	hash, nz := m.Hash(), m.NonZeros()
	after := residentPages(m.W)
	if before >= 0 && after > before+4 {
		t.Errorf("hashing made %d more pages of the weights resident (%d before)", after-before, before)
	}
	// What reading everything gives.
	hs := make([]uint64, m.Layout.Shards)
	var buf [chunkBytes]byte
	var want int64
	for s := range hs {
		lo, hi := m.Layout.ShardRange(s)
		d := xxhash.New()
		for w := m.W[lo:hi]; len(w) > 0; {
			n := min(len(w), chunkBytes/4)
			d.Write(putFloats(buf[:], w[:n]))
			w = w[n:]
		}
		hs[s] = d.Sum64()
		for _, v := range m.W[lo : lo+m.Layout.shardRows(s)] {
			if v != 0 {
				want++
			}
		}
	}
	if h := CombineHashes(m.Layout, hs); h != hash {
		t.Errorf("hash %x, reading every weight gives %x", hash, h)
	}
	if nz != want || nz != 8 {
		t.Errorf("%d nonzeros, reading every weight gives %d (8 rows were set)", nz, want)
	}
}

// residentPages counts the resident pages v spans, -1 when unknown.
func residentPages(v []float32) int {
	res, _, _, ok := residency(v)
	if !ok {
		return -1
	}
	n := 0
	for _, r := range res {
		if r {
			n++
		}
	}
	return n
}
