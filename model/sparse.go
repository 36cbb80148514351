package model

// Sparse is a set of parameter rows: sorted, distinct feature indices and
// Width values for each, row-major. It is the unit that travels between
// peers: a worker's gradient for one owner, an owner's new weights for
// everyone. The slices are reused; Reset keeps their capacity.
type Sparse struct {
	Idx []uint32  // feature indices, strictly ascending
	Val []float32 // len(Idx) * width values; row i is Val[i*width:(i+1)*width]
}

// Reset empties s, keeping its capacity.
func (s *Sparse) Reset() {
	s.Idx = s.Idx[:0]
	s.Val = s.Val[:0]
}

// Len is the number of rows.
func (s *Sparse) Len() int { return len(s.Idx) }

// Append adds row k with values v. Callers keep k ascending.
func (s *Sparse) Append(k uint32, v []float32) {
	s.Idx = append(s.Idx, k)
	s.Val = append(s.Val, v...)
}

// Sorted reports whether Idx is strictly ascending and Val has width values
// per row: the invariant every producer keeps and every decoder checks.
func (s *Sparse) Sorted(width int) bool {
	if len(s.Val) != len(s.Idx)*width {
		return false
	}
	for i := 1; i < len(s.Idx); i++ {
		if s.Idx[i] <= s.Idx[i-1] {
			return false
		}
	}
	return true
}

// Add sets dst to a + b, rows of width w merged by index and the values of
// rows in both added (a sync owner sums the contributions of a round with
// it; so does the simulator's serial reference). dst must not alias a or b.
func (dst *Sparse) Add(a, b *Sparse, w int) {
	dst.Reset()
	i, j := 0, 0
	for i < len(a.Idx) || j < len(b.Idx) {
		switch {
		case j >= len(b.Idx) || (i < len(a.Idx) && a.Idx[i] < b.Idx[j]):
			dst.Append(a.Idx[i], a.Val[i*w:(i+1)*w])
			i++
		case i >= len(a.Idx) || b.Idx[j] < a.Idx[i]:
			dst.Append(b.Idx[j], b.Val[j*w:(j+1)*w])
			j++
		default:
			dst.Idx = append(dst.Idx, a.Idx[i])
			for x := range w {
				dst.Val = append(dst.Val, a.Val[i*w+x]+b.Val[j*w+x])
			}
			i++
			j++
		}
	}
}
