package trainer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// TestWindower: batches are grouped h at a time, a new epoch closes the
// window under way, the window's keys are the union of its batches' and
// its position the one before its first batch; flush gives the rest.
func TestWindower(t *testing.T) {
	p := func(keys ...uint32) *sgd.Prepared { return &sgd.Prepared{Keys: keys} }
	w := windower{h: 3}
	if got := w.add(p(1, 5), 0, 0); got != nil {
		t.Fatalf("a window after one batch of 3")
	}
	w.add(p(2, 5), 0, 10)
	got := w.add(p(5, 9), 0, 20)
	if got == nil || len(got.batches) != 3 || !slices.Equal(got.keys, []uint32{1, 2, 5, 9}) || got.row != 0 || got.epoch != 0 {
		t.Fatalf("the first window: %+v, want 3 batches, keys 1 2 5 9, from row 0", got)
	}
	w.add(p(7), 0, 30)
	got = w.add(p(3), 1, 0) // a new epoch: the window of one batch before it closes
	if got == nil || len(got.batches) != 1 || !slices.Equal(got.keys, []uint32{7}) || got.row != 30 {
		t.Fatalf("the window cut by the epoch: %+v, want 1 batch, keys 7, from row 30", got)
	}
	got = w.flush()
	if got == nil || got.epoch != 1 || !slices.Equal(got.keys, []uint32{3}) {
		t.Fatalf("flush: %+v, want epoch 1's one batch", got)
	}
	if w.flush() != nil {
		t.Fatalf("flush with nothing under way gave a window")
	}
}

// TestMergeKeys: the union of two ascending key lists is what sorting
// their concatenation and dropping repeats gives, appended after what dst
// holds, for lists that are empty, equal, disjoint, nested or drawn at
// random; unionKeys of several batches likewise.
func TestMergeKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	draw := func(n int, max uint32) []uint32 {
		k := make([]uint32, n)
		for i := range k {
			k[i] = r.Uint32N(max)
		}
		slices.Sort(k)
		return slices.Compact(k)
	}
	want := func(lists ...[]uint32) []uint32 {
		var all []uint32
		for _, l := range lists {
			all = append(all, l...)
		}
		slices.Sort(all)
		return slices.Compact(all)
	}
	a := draw(500, 2000)
	cases := [][2][]uint32{
		{nil, nil}, {nil, {1, 2}}, {{1, 2}, nil}, {a, a}, {{1, 3, 5}, {2, 4, 6}},
		{{1, 2, 3}, {7, 8}}, {{7, 8}, {1, 2, 3}}, {a, a[100:200]}, {{0, ^uint32(0)}, {0, 5, ^uint32(0)}},
	}
	for range 50 {
		cases = append(cases, [2][]uint32{draw(r.IntN(300), 1000), draw(r.IntN(300), 1000)})
	}
	for _, c := range cases {
		dst := []uint32{42, 43}
		got := mergeKeys(dst, c[0], c[1])
		if !slices.Equal(got[:2], []uint32{42, 43}) || !slices.Equal(got[2:], want(c[0], c[1])) {
			t.Fatalf("mergeKeys(%v, %v) appended %v, want %v", c[0], c[1], got[2:], want(c[0], c[1]))
		}
	}
	var scratch [2][]uint32
	for h := 1; h <= 16; h++ {
		var batches []*sgd.Prepared
		var lists [][]uint32
		for range h {
			k := draw(r.IntN(400), 5000)
			lists = append(lists, k)
			batches = append(batches, &sgd.Prepared{Keys: k})
		}
		if got := unionKeys(&scratch, batches); !slices.Equal(got, want(lists...)) {
			t.Fatalf("unionKeys of %d batches: %d keys, want %d", h, len(got), len(want(lists...)))
		}
	}
}

// TestPeersTrainInWindows: with windows of 4 local steps, three peers end
// with one model (sync: bit for bit; ssp and async: the peers' fetches
// agree) of a quality near one peer's on all the data, every example
// trained once per epoch.
func TestPeersTrainInWindows(t *testing.T) {
	ref := reference(t, 3)
	for _, mode := range []train.Mode{train.Sync, train.SSP, train.Async} {
		t.Run(mode.String(), func(t *testing.T) {
			sums, errs := startPeersSetup(t, 3, mode, train.Need, 1, nil, func(i int, cfg *Config, h *Hooks) {
				cfg.Core.LocalSteps = 4
			})
			for i, err := range errs {
				if err != nil {
					t.Fatalf("peer %d: %v", i, err)
				}
			}
			for i, s := range sums {
				if !s.Evaluated || s.Final.LogLoss > ref.LogLoss*1.05 {
					t.Errorf("peer %d: final evaluation %+v: one peer on all the data reaches %.4f", i, s.Final, ref.LogLoss)
				}
				if s.ModelHash != sums[0].ModelHash {
					t.Errorf("peer %d ends with model %x, peer 0 with %x", i, s.ModelHash, sums[0].ModelHash)
				}
				if s.Examples != 1200 {
					t.Errorf("peer %d trained %d examples, want 1200 (600 rows, 2 epochs)", i, s.Examples)
				}
				if want := int64(2 * 3); s.Rounds != want { // 600 rows in batches of 50: 12 a epoch, 3 windows of 4
					t.Errorf("peer %d ran %d rounds, want %d windows", i, s.Rounds, want)
				}
			}
			t.Logf("%s: test log-loss %.4f (one peer on all the data %.4f)", mode, sums[0].Final.LogLoss, ref.LogLoss)
		})
	}
}

// windowBatches prepares n batches of 1000 rows of bench's generated data
// (Criteo-like, 39 fields, Zipf popularity, 2^24 features).
func windowBatches(b *testing.B, n int) []*sgd.Prepared {
	g := data.DefaultGenConfig()
	g.Rows, g.TestRows = int64(n*1000), 0
	meta, err := data.Generate(b.TempDir(), g, nil)
	if err != nil {
		b.Fatal(err)
	}
	src, err := data.Open(meta.Files, data.Options{Dim: g.Features})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	m, err := model.New(model.Logreg, g.Features, 2, 256, model.DefaultOptConfig(model.AdaGrad))
	if err != nil {
		b.Fatal(err)
	}
	pr := sgd.NewPreparer(m)
	out := make([]*sgd.Prepared, n)
	var batch data.Batch
	for i := range out {
		if k, err := src.Next(&batch, 1000); k != 1000 {
			b.Fatalf("batch %d: %d rows, %v", i, k, err)
		}
		out[i] = new(sgd.Prepared)
		pr.Prepare(&batch, out[i])
	}
	return out
}

// The union of a window's batches' keys, as the windower makes it for
// every window (h batches of 1000 rows of bench's data):
// go test ./node/trainer -run '^$' -bench UnionKeys -benchmem
func BenchmarkUnionKeys(b *testing.B) {
	batches := windowBatches(b, 16)
	for _, h := range []int{4, 16} {
		b.Run(fmt.Sprintf("h=%d", h), func(b *testing.B) {
			var scratch [2][]uint32
			keys := 0
			for b.Loop() {
				keys += len(unionKeys(&scratch, batches[:h]))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(keys), "ns/key")
		})
	}
}
