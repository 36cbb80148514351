package trainer

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// compactIndices gives what sorting, deduplicating and searching gives,
// in both of its ways (bitmap ranks for a dim up to 64 per index, sorting
// above), over the indices of several parts as over one.
func TestCompactIndices(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		n   int
		dim uint64
	}{{0, 10}, {1, 1}, {5, 3}, {1000, 1 << 10}, {1000, 64000}, {1000, 1 << 24}, {50000, 1 << 20}, {3, 1 << 32}} {
		idx := make([]uint32, tc.n)
		for i := range idx {
			idx[i] = uint32(r.Uint64N(tc.dim))
		}
		want := slices.Clone(idx)
		slices.Sort(want)
		want = slices.Compact(want)
		orig := slices.Clone(idx)
		var parts [][]uint32 // cut at random
		for rest := idx; ; {
			k := r.IntN(len(rest) + 1)
			parts = append(parts, rest[:k])
			if rest = rest[k:]; len(rest) == 0 {
				break
			}
		}
		got := compactIndices(parts, tc.dim)
		if !slices.Equal(got, want) {
			t.Fatalf("n %d dim %d: features %v, want %v", tc.n, tc.dim, got, want)
		}
		for i, k := range orig {
			if idx[i] >= uint32(len(got)) || got[idx[i]] != k {
				t.Fatalf("n %d dim %d: index %d (%d) renumbered %d", tc.n, tc.dim, i, k, idx[i])
			}
		}
	}
}

// go test ./node/trainer -run '^$' -bench CompactIndices
func BenchmarkCompactIndices(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	// A test set of 20,000 rows of 39 features over 2^24, frequent values
	// repeating (a Zipf draw per field).
	z := rand.NewZipf(r, 1.2, 1, 1<<19)
	src := make([]uint32, 20000*39)
	for i := range src {
		src[i] = uint32((uint64(i%39)<<19 | z.Uint64()) % (1 << 24))
	}
	idx := make([]uint32, len(src))
	for _, way := range []struct {
		name string
		dim  uint64
	}{{"bitmap", 1 << 24}, {"sort", 0}} {
		b.Run(way.name, func(b *testing.B) {
			for b.Loop() {
				copy(idx, src)
				compactIndices([][]uint32{idx}, way.dim)
			}
		})
	}
}

// The evaluator a peer builds while it starts training, and one
// evaluation, on a generated Criteo-like test set of 20,000 rows over 2^24
// features (bench's default data):
// go test ./node/trainer -run '^$' -bench Evaluator -benchmem
func BenchmarkEvaluator(b *testing.B) {
	dir := b.TempDir()
	g := data.DefaultGenConfig()
	g.Rows, g.TestRows = 1000, 20000
	meta, err := data.Generate(dir, g, nil)
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.New(model.Logreg, g.Features, 2, 256, model.OptConfig{Kind: model.AdaGrad, LR: 0.1, Eps: 1e-6})
	if err != nil {
		b.Fatal(err)
	}
	test := func() (data.Source, error) {
		return data.Open([]string{meta.TestFile}, data.Options{Dim: g.Features})
	}
	b.Run("build", func(b *testing.B) {
		for b.Loop() {
			if _, err := newEvaluator(m, test); err != nil {
				b.Fatal(err)
			}
		}
	})
	ev, err := newEvaluator(m, test)
	if err != nil {
		b.Fatal(err)
	}
	values := make([]float32, len(ev.keys)*ev.compact.Layout.Width)
	for i := range values {
		values[i] = float32(i%7) / 100
	}
	b.Run("evaluate", func(b *testing.B) {
		for b.Loop() {
			if _, err := ev.evaluate(values, 1000); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestReadAll: the test set read in batches is the rows as they were, in
// order, weights included (rows of weight 1 in batches before the first
// weighted row read with weight 1), for sets of less than a batch, of
// whole batches and of a part batch more; and read back in batches of any
// size (partsSource, what the evaluator reads), the batches are those of
// the rows read as one batch.
func TestReadAll(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, rows := range []int{1, 999, 1000, 2500} {
		for _, weighted := range []bool{false, true} {
			var want data.Batch
			for i := range rows {
				for k := range uint32(1 + r.IntN(5)) {
					want.Add(k*1000+uint32(r.IntN(1000)), r.Float32())
				}
				w := float32(1)
				if weighted && i >= rows*3/4 {
					w = 0.5 // (only in the last batch)
				}
				want.EndRowWeighted(float32(r.IntN(2)), w)
			}
			parts, err := readAll(&memSource{b: &want})
			if err != nil {
				t.Fatal(err)
			}
			var got data.Batch
			for i := range parts {
				if parts[i].Rows() > 1000 || cap(parts[i].Indices) != parts[i].NNZ() {
					t.Errorf("%d rows (weighted %v): part %d of %d rows, %d nonzeros in room for %d", rows, weighted, i, parts[i].Rows(), parts[i].NNZ(), cap(parts[i].Indices))
				}
				got.AppendRows(&parts[i])
			}
			for _, max := range []int{1, 300, 1000, 4000} {
				ps, ms := &partsSource{parts: parts}, &memSource{b: &want}
				var a, b data.Batch
				for k := 0; ; k++ {
					n, err := ps.Next(&a, max)
					m, err2 := ms.Next(&b, max)
					if n != m || err != err2 || !slices.Equal(a.Labels, b.Labels) || !slices.Equal(a.Offsets, b.Offsets) ||
						!slices.Equal(a.Indices, b.Indices) || !slices.Equal(a.Values, b.Values) || !slices.Equal(a.Weights, b.Weights) {
						t.Fatalf("%d rows (weighted %v), batches of %d: batch %d of the parts has %d rows (%v), of the rows as one batch %d (%v)", rows, weighted, max, k, n, err, m, err2)
					}
					if err != nil {
						break
					}
				}
				if s := ps.Stats().Rows; s != int64(rows) {
					t.Errorf("%d rows: the parts' source says %d read", rows, s)
				}
			}
			if !slices.Equal(got.Labels, want.Labels) || !slices.Equal(got.Offsets, want.Offsets) ||
				!slices.Equal(got.Indices, want.Indices) || !slices.Equal(got.Values, want.Values) || !slices.Equal(got.Weights, want.Weights) {
				t.Errorf("%d rows (weighted %v): read %d rows, %d nonzeros, %d weights; want %d, %d, %d",
					rows, weighted, got.Rows(), got.NNZ(), len(got.Weights), want.Rows(), want.NNZ(), len(want.Weights))
			}
		}
	}
}
