package model

import "slices"

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
// It sizes dst once and copies the rows past either set's end at once
// (BenchmarkSparseAdd); TestSparseAddRandom pins the result.
func (dst *Sparse) Add(a, b *Sparse, w int) {
	na, nb := len(a.Idx), len(b.Idx)
	idx := slices.Grow(dst.Idx[:0], na+nb)[:na+nb]
	val := slices.Grow(dst.Val[:0], (na+nb)*w)[:(na+nb)*w]
	av, bv := a.Val[:na*w], b.Val[:nb*w]
	i, j, n := 0, 0, 0
	if w == 2 {
		// (Rows of weight and AdaGrad accumulator, a window's: assigned
		// rather than copied.)
		for i < na && j < nb {
			ka, kb := a.Idx[i], b.Idx[j]
			out := val[2*n : 2*n+2]
			switch {
			case ka < kb:
				idx[n], out[0], out[1] = ka, av[2*i], av[2*i+1]
				i++
			case kb < ka:
				idx[n], out[0], out[1] = kb, bv[2*j], bv[2*j+1]
				j++
			default:
				idx[n], out[0], out[1] = ka, av[2*i]+bv[2*j], av[2*i+1]+bv[2*j+1]
				i++
				j++
			}
			n++
		}
	}
	for i < na && j < nb {
		ka, kb := a.Idx[i], b.Idx[j]
		out := val[n*w : (n+1)*w]
		switch {
		case ka < kb:
			idx[n] = ka
			copy(out, av[i*w:(i+1)*w])
			i++
		case kb < ka:
			idx[n] = kb
			copy(out, bv[j*w:(j+1)*w])
			j++
		default:
			idx[n] = ka
			x, y := av[i*w:(i+1)*w], bv[j*w:(j+1)*w]
			for c := range out {
				out[c] = x[c] + y[c]
			}
			i++
			j++
		}
		n++
	}
	n += copy(idx[n:], a.Idx[i:])
	copy(val[(n-(na-i))*w:], av[i*w:])
	m := copy(idx[n:], b.Idx[j:])
	copy(val[n*w:], bv[j*w:])
	n += m
	dst.Idx, dst.Val = idx[:n], val[:n*w]
}
