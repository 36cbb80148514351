package data

import "math"

// Scaling is an affine change of features that a standalone trainer
// applies while it trains, so the optimizer sees numeric features of
// comparable size: feature k becomes (x_k - Shift[k])·Scale[k] for
// k < len(Scale); other features keep their values. Centred features
// (Shift != 0) are listed in Centred, ascending: after scaling they are
// present in every row, since an absent one (a 0) becomes -Shift·Scale.
// Model rows learnt on scaled features map back to the raw ones exactly
// (model.Model.Unscale), so a saved model needs no scaling to predict.
type Scaling struct {
	Scale   []float32
	Shift   []float32
	Centred []uint32
}

// ScalingFor picks a scaling from the scan of the training data: every
// numeric feature (ScanResult.Numeric) is standardised (centred on its
// mean and divided by its standard deviation) when it appears in at least
// half the rows, and divided by its largest |value| when it is sparse
// with values beyond [-1, 1] (centring would make every row carry it).
// Binary and one-hot features are left alone. It returns nil when nothing needs scaling, and considers only
// features below dim.
func ScalingFor(sr ScanResult, dim uint64) *Scaling {
	top := -1
	for k := range sr.Numeric {
		if uint64(k) < dim && int(k) > top {
			top = int(k)
		}
	}
	if top < 0 || sr.Rows == 0 {
		return nil
	}
	s := &Scaling{Scale: make([]float32, top+1), Shift: make([]float32, top+1)}
	for k := range s.Scale {
		s.Scale[k] = 1
	}
	rows := float64(sr.Rows)
	for k := range top + 1 {
		st := sr.Numeric[uint32(k)]
		if st == nil {
			continue
		}
		mean := st.Sum / rows
		sd := math.Sqrt(max(st.SumSq/rows-mean*mean, 0))
		if 2*st.NonZero >= sr.Rows && sd > 1e-6*st.MaxAbs {
			s.Scale[k], s.Shift[k] = float32(1/sd), float32(mean)
			if s.Shift[k] != 0 {
				s.Centred = append(s.Centred, uint32(k))
			}
			continue
		}
		if st.MaxAbs > 1 {
			s.Scale[k] = float32(1 / st.MaxAbs)
		}
	}
	return s
}

// Scaled returns the number of features the scaling changes and how many
// of them it centres.
func (s *Scaling) Scaled() (scaled, centred int) {
	if s == nil {
		return 0, 0
	}
	for k, f := range s.Scale {
		if f != 1 || s.Shift[k] != 0 {
			scaled++
		}
	}
	return scaled, len(s.Centred)
}

// Rescaled returns a Source that reads src and applies sc to every row
// (src itself when sc is nil). Rows stay sorted by feature. Without centred
// features it costs one multiplication per nonzero; with them it rebuilds
// each row into a second batch it keeps. It allocates nothing once its
// buffers have grown. Closing it closes src.
func Rescaled(src Source, sc *Scaling) Source {
	if sc == nil || len(sc.Scale) == 0 {
		return src
	}
	return &rescaled{src: src, sc: sc}
}

type rescaled struct {
	src Source
	sc  *Scaling
	tmp Batch
}

func (r *rescaled) Next(b *Batch, max int) (int, error) {
	n, err := r.src.Next(b, max)
	scale, shift := r.sc.Scale, r.sc.Shift
	if len(r.sc.Centred) == 0 {
		vals := b.Values[:len(b.Indices)]
		for i, k := range b.Indices {
			if int(k) < len(scale) {
				vals[i] *= scale[k]
			}
		}
		return n, err
	}
	t := &r.tmp
	t.Reset()
	cen := r.sc.Centred
	for row := range b.Rows() {
		idx, val := b.Row(row)
		c := 0
		for i, k := range idx {
			for c < len(cen) && cen[c] < k {
				t.Add(cen[c], -shift[cen[c]]*scale[cen[c]])
				c++
			}
			if c < len(cen) && cen[c] == k {
				c++
			}
			v := val[i]
			if int(k) < len(scale) {
				v = (v - shift[k]) * scale[k]
			}
			t.Add(k, v)
		}
		for ; c < len(cen); c++ {
			t.Add(cen[c], -shift[cen[c]]*scale[cen[c]])
		}
		t.EndRow(b.Labels[row])
	}
	b.Offsets, t.Offsets = t.Offsets, b.Offsets
	b.Indices, t.Indices = t.Indices, b.Indices
	b.Values, t.Values = t.Values, b.Values
	return n, err
}

func (r *rescaled) Stats() Stats { return r.src.Stats() }
func (r *rescaled) Close() error { return r.src.Close() }
