package data

import (
	"container/heap"
	"math/bits"
	"slices"
)

// Outlying indices. With --dim inferred, the largest index of the training
// data sizes the model: one stray "50000000:1" on a line of Adult (whose
// indices stop at 127) makes a model of 50 million rows. IndexTail follows
// the largest index of every row during a scan and tells when a few rows
// lie far above the rest, naming them.

// IndexTail gathers the distribution of rows' largest feature index. The
// zero value is ready; Add it every row that has a feature.
type IndexTail struct {
	rows int64
	// hist counts rows by the bit length of their largest index + 1:
	// bucket b holds values v+1 in [2^(b-1), 2^b).
	hist [34]int64
	top  tailHeap // the rows of the largest indices, at most tailPlaces
}

// tailPlaces is how many of the most outlying rows IndexOutliers names.
const tailPlaces = 10

// TailRow is a row and its largest feature index (0-based).
type TailRow struct {
	Place    Place
	MaxIndex uint32
}

// tailHeap is a min-heap of rows by MaxIndex (then later place first out,
// so among equals the first rows read stay).
type tailHeap []TailRow

func (h tailHeap) Len() int           { return len(h) }
func (h tailHeap) Less(i, j int) bool { return h[i].MaxIndex < h[j].MaxIndex }
func (h tailHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *tailHeap) Push(x any)        { *h = append(*h, x.(TailRow)) }
func (h *tailHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Add records a row whose largest feature index is maxIndex.
func (t *IndexTail) Add(maxIndex uint32, p Place) {
	t.rows++
	t.hist[bits.Len64(uint64(maxIndex)+1)]++
	switch {
	case len(t.top) < tailPlaces:
		heap.Push(&t.top, TailRow{p, maxIndex})
	case maxIndex > t.top[0].MaxIndex:
		t.top[0] = TailRow{p, maxIndex}
		heap.Fix(&t.top, 0)
	}
}

// Outliers describes rows whose largest index lies far above the others'.
type Outliers struct {
	// Rows is the number of outlying rows, of Of rows with features.
	Rows, Of int64
	// Typical is the largest index + 1 of the rows that are not among the
	// top 0.1% (at least one row left out), rounded up to a power of two:
	// the --dim the data needs without its outlying rows.
	Typical uint64
	// Dim is what the outlying rows make --dim (the largest index + 1).
	Dim uint64
	// Named are the most outlying rows (at most 10), largest index first.
	Named []TailRow
}

// OutlierFactor is how far above the typical rows' indices a row's must
// lie to be outlying: 16 times.
const OutlierFactor = 16

// IndexOutliers reports whether a few rows hold indices far above the
// rest, the rule being: leave out the top 0.1% of rows by largest index
// (at least one row) and take the largest index + 1 of those left,
// rounded up to a power of two (Typical); the rows whose largest index + 1
// is at least OutlierFactor times Typical are outlying, and they are "a
// few" when they are at most 0.01% of the rows (at least one). Data whose
// large indices are common (hashed features spread over the whole space)
// has no outliers by this rule; one stray index among Adult's 26,049 rows
// is one.
func (t *IndexTail) IndexOutliers() (Outliers, bool) {
	if t.rows < 2 {
		return Outliers{}, false
	}
	leave := max(1, t.rows/1000)
	// The bucket of the row at rank rows-leave (1-based, ascending).
	var seen int64
	b := 0
	for ; b < len(t.hist); b++ {
		seen += t.hist[b]
		if seen >= t.rows-leave {
			break
		}
	}
	typical := uint64(1) << b // >= every largest index + 1 in buckets <= b
	// Outlying rows: v+1 >= OutlierFactor·typical = 2^(b+4), which is
	// exactly buckets >= b+5.
	var out int64
	for c := b + 5; c < len(t.hist); c++ {
		out += t.hist[c]
	}
	if out == 0 || out > max(1, t.rows/10000) {
		return Outliers{}, false
	}
	o := Outliers{Rows: out, Of: t.rows, Typical: typical}
	named := slices.Clone(t.top)
	slices.SortStableFunc(named, func(x, y TailRow) int {
		if x.MaxIndex != y.MaxIndex {
			if x.MaxIndex > y.MaxIndex {
				return -1
			}
			return 1
		}
		if x.Place.File != y.Place.File {
			return 0
		}
		return int(x.Place.Line - y.Place.Line)
	})
	for _, r := range named {
		if uint64(r.MaxIndex)+1 >= OutlierFactor*typical {
			o.Named = append(o.Named, r)
		}
	}
	o.Dim = uint64(named[0].MaxIndex) + 1
	return o, true
}
