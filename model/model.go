package model

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
)

// MaxClasses bounds Classes for softmax models: a row of that many float32
// is still a small message, and a mistyped --classes fails fast.
const MaxClasses = 1 << 16

// Model is the parameter storage of one peer: the full read copy of the
// weights, plus the optimizer state of the shards this peer owns.
//
// A Model is not safe for concurrent use; the caller serialises Apply,
// SetRows and reads (the trainer and the node driver run one loop each).
type Model struct {
	// Kind is the model family.
	Kind Kind
	// Dim is the number of input features; the bias is row Dim.
	Dim uint64
	// Classes is 2 for Logreg and the number of classes for Softmax and MLP.
	Classes int
	// Hidden is the MLP's number of hidden units (its row width); 0 for the
	// linear kinds.
	Hidden int
	// LabelBase is the label of class 0 in the input files (multiclass data
	// labelled 1..K has LabelBase 1). Stored so a saved model predicts the
	// labels it was trained on; unused by the arithmetic.
	LabelBase int64
	// Layout maps rows to positions in W and the shards' ranges.
	Layout Layout
	// Opt is the optimizer owners apply.
	Opt OptConfig
	// Steps is one more than the largest step number passed to Apply (0 for
	// a fresh model). It is saved, so a resumed run continues the schedule.
	Steps int64
	// Examples is the number of training examples the model has seen
	// (saved from format version 3 on; 0 when unknown).
	Examples int64
	// Input says what the model was trained on, so eval and predict can
	// warn when told to read other input (saved from format version 3 on;
	// zero when unknown).
	Input Input
	// Meta is free-form text saved with the model (data set, flags, peer);
	// nil is fine.
	Meta map[string]string
	// W holds every weight, shard-major as Layout describes: the full read
	// copy. Padding slots (features >= Layout.Features) stay 0.
	W []float32
	// State is the optimizer state of each shard, nil for shards not owned
	// here. An owned shard has Layout.ShardSize()·Opt.Kind.StatePerWeight()
	// floats (an empty, non-nil slice for SGD), ordered like the shard's
	// weights; FTRL interleaves z and n per weight.
	State [][]float32
}

// Input describes the input a model was trained on.
type Input struct {
	// Format is the input format's name as data.Format.String gives it
	// ("libsvm", "criteo", "idx", "cache"); "" when unknown.
	Format string
	// ZeroBased is --zero-based: libsvm feature indices start at 0.
	ZeroBased bool
	// SignedLabels says a binary model's training labels were written
	// -1/+1 rather than 0/1, so its predicted labels are too (Label;
	// saved from format version 4 on).
	SignedLabels bool
}

// New returns a zero model with no shard owned. For Logreg classes must be 0
// or 2 (both mean binary); for Softmax it is the number of classes, >= 2.
// dim is the number of input features, 1..2^32-1; shards is a power of two.
func New(kind Kind, dim uint64, classes, shards int, opt OptConfig) (*Model, error) {
	if kind == MLP {
		return nil, fmt.Errorf("%w: an mlp needs a hidden size and initial weights: use NewMLP", ErrConfig)
	}
	m, err := newShape(kind, dim, classes, 0, shards, opt)
	if err != nil {
		return nil, err
	}
	m.W = make([]float32, m.Layout.Len())
	return m, nil
}

// MaxHidden bounds an MLP's hidden units: a row of that many float32 is
// 16 KiB, still a small part of a message.
const MaxHidden = 4096

// NewMLP returns an MLP with hidden ReLU units and no shard owned, its
// weights initialised from seed alone, so every peer that calls it with the
// same arguments holds the same model: W1 and W2 uniform in ±sqrt(6/fan_in)
// (He et al. 2015's variance for ReLU layers, fan_in = dim for W1, hidden
// for W2), biases 0. Zero weights would never train: every hidden unit
// would get the same gradient.
func NewMLP(dim uint64, classes, hidden, shards int, opt OptConfig, seed uint64) (*Model, error) {
	m, err := newShape(MLP, dim, classes, hidden, shards, opt)
	if err != nil {
		return nil, err
	}
	m.W = make([]float32, m.Layout.Len())
	a1 := math.Sqrt(6 / float64(dim))
	a2 := math.Sqrt(6 / float64(hidden))
	for k := range uint32(dim) {
		initRow(m.Row(k), seed, k, a1)
	}
	for j := range classes {
		k := m.Bias() + 1 + uint32(j)
		initRow(m.Row(k), seed, k, a2)
	}
	return m, nil
}

// initRow fills row k with uniform values in [-a, a) from a counter-based
// generator (splitmix64 of seed, row and column), so a row's values do not
// depend on the layout or on the order rows are initialised in.
func initRow(row []float32, seed uint64, k uint32, a float64) {
	for c := range row {
		x := seed ^ uint64(k)<<20 ^ uint64(c)
		x += 0x9e3779b97f4a7c15
		x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
		x = (x ^ x>>27) * 0x94d049bb133111eb
		x ^= x >> 31
		u := float64(x>>11) / (1 << 53) // [0, 1)
		row[c] = float32((2*u - 1) * a)
	}
}

// newShape is New without the weights (W nil): readers allocate them as
// the data arrives. hidden is the MLP's hidden units (0 otherwise).
func newShape(kind Kind, dim uint64, classes, hidden, shards int, opt OptConfig) (*Model, error) {
	width := 0
	rows := dim + 1
	switch kind {
	case Logreg:
		if classes != 0 && classes != 2 {
			return nil, fmt.Errorf("%w: logreg is binary, got %d classes (use softmax)", ErrConfig, classes)
		}
		classes, width = 2, 1
	case Softmax:
		if classes < 2 || classes > MaxClasses {
			return nil, fmt.Errorf("%w: softmax needs 2..%d classes, got %d", ErrConfig, MaxClasses, classes)
		}
		width = classes
	case MLP:
		if classes < 2 || classes > MaxClasses {
			return nil, fmt.Errorf("%w: mlp needs 2..%d classes, got %d", ErrConfig, MaxClasses, classes)
		}
		if hidden < 1 || hidden > MaxHidden {
			return nil, fmt.Errorf("%w: mlp needs 1..%d hidden units, got %d", ErrConfig, MaxHidden, hidden)
		}
		if hidden < classes {
			return nil, fmt.Errorf("%w: mlp with %d hidden units for %d classes: b2 is stored in one row of hidden width, want hidden >= classes", ErrConfig, hidden, classes)
		}
		width = hidden
		rows = dim + uint64(classes) + 2
	default:
		return nil, fmt.Errorf("%w: unknown model kind %d", ErrConfig, kind)
	}
	if kind != MLP && hidden != 0 {
		return nil, fmt.Errorf("%w: %v has no hidden units, got %d", ErrConfig, kind, hidden)
	}
	if dim == 0 || dim >= MaxFeatures {
		return nil, fmt.Errorf("%w: dim %d, want 1..%d (indices are uint32 and the bias takes row dim)", ErrConfig, dim, uint64(MaxFeatures-1))
	}
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	if rows > MaxFeatures {
		return nil, fmt.Errorf("%w: dim %d and %d classes make %d rows, more than %d", ErrConfig, dim, classes, rows, uint64(MaxFeatures))
	}
	l, err := NewLayout(rows, width, shards)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Model{
		Kind:    kind,
		Dim:     dim,
		Classes: classes,
		Hidden:  hidden,
		Layout:  l,
		Opt:     opt,
		State:   make([][]float32, shards),
	}, nil
}

// Width is the number of floats per row (1 for Logreg, Classes for Softmax).
func (m *Model) Width() int { return m.Layout.Width }

// Bias returns the index of the bias row, Dim (b1 for an MLP).
func (m *Model) Bias() uint32 { return uint32(m.Dim) }

// Bias2 returns the index of an MLP's output bias row b2, Dim+Classes+1;
// for the linear kinds it is Bias. Regularisation skips both.
func (m *Model) Bias2() uint32 {
	if m.Kind == MLP {
		return uint32(m.Dim) + uint32(m.Classes) + 1
	}
	return uint32(m.Dim)
}

// Own allocates zeroed optimizer state for shard s, making this peer able to
// Apply gradients to it. Owning an owned shard changes nothing.
func (m *Model) Own(s int) {
	if m.State[s] == nil {
		m.State[s] = make([]float32, m.Layout.ShardSize()*m.Opt.Kind.StatePerWeight())
	}
}

// OwnAll owns every shard (single-peer training, master topology).
func (m *Model) OwnAll() {
	for s := range m.State {
		m.Own(s)
	}
}

// Owns reports whether shard s is owned here.
func (m *Model) Owns(s int) bool { return m.State[s] != nil }

// Disown drops shard s's optimizer state; its weights stay in the read copy.
func (m *Model) Disown(s int) { m.State[s] = nil }

// Owned returns the owned shards in ascending order, appended to dst.
func (m *Model) Owned(dst []int) []int {
	for s, st := range m.State {
		if st != nil {
			dst = append(dst, s)
		}
	}
	return dst
}

// Row returns row k's Width weights, aliasing W. k must be a valid row
// (< Dim+1).
func (m *Model) Row(k uint32) []float32 {
	if !m.Layout.Valid(k) {
		panic(fmt.Sprintf("model: row %d out of range (%d rows)", k, m.Layout.Features))
	}
	off := m.Layout.Offset(k)
	return m.W[off : off+m.Layout.Width : off+m.Layout.Width]
}

// Gather resets out and appends the current values of rows idx (ascending,
// valid) to it. It allocates only while out grows.
func (m *Model) Gather(idx []uint32, out *Sparse) {
	out.Reset()
	for _, k := range idx {
		out.Append(k, m.Row(k))
	}
}

// SetRows overwrites the rows in p with p's values: how a peer applies the
// new weights an owner published. Optimizer state is untouched. p must have
// Width values per row and valid indices (decoders check both).
func (m *Model) SetRows(p *Sparse) {
	w := m.Layout.Width
	if len(p.Val) != len(p.Idx)*w {
		panic(fmt.Sprintf("model: SetRows with %d values for %d rows of width %d", len(p.Val), len(p.Idx), w))
	}
	for i, k := range p.Idx {
		copy(m.Row(k), p.Val[i*w:(i+1)*w])
	}
}

// Unscale maps rows learnt on affinely scaled features back to the raw
// features: a model trained on x'_k = (x_k - shift[k])·scale[k] (k <
// len(scale) <= Dim) computes w'_k·x'_k + b', which is w_k·x_k + b with
// w_k = w'_k·scale[k] and b = b' - Σ_k w_k·shift[k], the sum taken over k
// in ascending order in float64 for every value of the bias row (an MLP's
// b1: its first layer is linear in x). Optimizer state is left in the
// training units, so call it when training is over.
func (m *Model) Unscale(scale, shift []float32) {
	if uint64(len(scale)) > m.Dim || len(shift) != len(scale) {
		panic(fmt.Sprintf("model: Unscale with %d factors and %d shifts for dim %d", len(scale), len(shift), m.Dim))
	}
	bias := m.Row(m.Bias())
	acc := make([]float64, len(bias))
	for c, v := range bias {
		acc[c] = float64(v)
	}
	for k, f := range scale {
		row := m.Row(uint32(k))
		for c := range row {
			row[c] *= f
			if shift[k] != 0 {
				acc[c] -= float64(row[c]) * float64(shift[k])
			}
		}
	}
	for c := range bias {
		bias[c] = float32(acc[c])
	}
}

// Hash returns an xxhash64 of the layout (features, width, shards) and,
// in shard order, each shard's ShardHash: two models hash equal exactly
// when their layouts and weights are bit-identical (up to hash
// collisions). Optimizer state, Steps and Meta are not included. Peers
// that hold different shards compute it together with CombineHashes.
func (m *Model) Hash() uint64 {
	hs := make([]uint64, m.Layout.Shards)
	for s := range hs {
		hs[s] = m.ShardHash(s)
	}
	return CombineHashes(m.Layout, hs)
}

// NonZeros counts the weights that are not 0, padding excluded.
func (m *Model) NonZeros() int64 {
	var n int64
	l := &m.Layout
	for s := 0; s < l.Shards; s++ {
		lo, _ := l.ShardRange(s)
		rows := l.shardRows(s)
		w := m.W[lo : lo+rows*l.Width]
		untouchedRuns(w, func(a, b int, zero bool) {
			if zero {
				return
			}
			for _, v := range w[a:b] {
				if v != 0 {
					n++
				}
			}
		})
	}
	return n
}

// shardRows is the number of real (non-padding) rows in shard s: the slots j
// with j·Shards + s < Features.
func (l *Layout) shardRows(s int) int {
	if uint64(s) >= l.Features {
		return 0
	}
	return int((l.Features - uint64(s) + uint64(l.Shards) - 1) / uint64(l.Shards))
}

// Clone returns a deep copy of m: weights, state and meta.
func (m *Model) Clone() *Model {
	c := *m
	c.W = append([]float32(nil), m.W...)
	c.State = make([][]float32, len(m.State))
	for s, st := range m.State {
		if st != nil {
			c.State[s] = append(make([]float32, 0, len(st)), st...)
		}
	}
	c.Meta = maps.Clone(m.Meta)
	return &c
}

// Matches reports, wrapping ErrMismatch, how m differs from the shape a run
// asks for (a train --init model against --model, --dim, --classes and
// --hidden), naming both values. hidden is ignored for the linear kinds.
func (m *Model) Matches(kind Kind, dim uint64, classes, hidden int) error {
	if kind == Logreg && classes == 0 {
		classes = 2
	}
	switch {
	case m.Kind != kind:
		return fmt.Errorf("%w: model is %v, run wants %v", ErrMismatch, m.Kind, kind)
	case m.Dim != dim:
		return fmt.Errorf("%w: model has dim %d, run wants %d", ErrMismatch, m.Dim, dim)
	case m.Classes != classes:
		return fmt.Errorf("%w: model has %d classes, run wants %d", ErrMismatch, m.Classes, classes)
	case kind == MLP && m.Hidden != hidden:
		return fmt.Errorf("%w: model has %d hidden units, run wants %d", ErrMismatch, m.Hidden, hidden)
	}
	return nil
}

// chunkBytes is the size of the conversion buffers used to hash and write
// weights without materialising a second copy of W.
const chunkBytes = 64 << 10

// putFloats writes v little endian into buf (len >= 4·len(v)) and returns
// the written prefix.
func putFloats(buf []byte, v []float32) []byte {
	buf = buf[:4*len(v)]
	for i, f := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
	}
	return buf
}

// getFloats decodes len(v) little-endian floats from buf into v.
func getFloats(v []float32, buf []byte) {
	buf = buf[:4*len(v)]
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
	}
}
