package train

import (
	"math"
	"slices"
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
)

// TestGuardRows pins G2: a row whose norm is over bound x examples is
// dropped, the others kept as they are; with none over, nothing is copied
// or allocated; bound 0 keeps everything.
func TestGuardRows(t *testing.T) {
	rows := &model.Sparse{Idx: []uint32{1, 5, 9, 12}, Val: []float32{
		3, 4, // norm 5
		30, 40, // norm 50
		-6, 8, // norm 10
		1e30, 0, // a bug
	}}
	var buf model.Sparse
	got, dropped := GuardRows(rows, 2, 2, 5, &buf) // bound 5 per example, 2 examples: 10
	if dropped != 2 || !slices.Equal(got.Idx, []uint32{1, 9}) || !slices.Equal(got.Val, []float32{3, 4, -6, 8}) {
		t.Errorf("GuardRows kept %v %v (dropped %d), want rows 1 and 9 (dropped 2)", got.Idx, got.Val, dropped)
	}
	if got, dropped := GuardRows(rows, 2, 2, 0, &buf); got != rows || dropped != 0 {
		t.Errorf("bound 0 changed the rows")
	}
	ok := &model.Sparse{Idx: []uint32{1, 9}, Val: []float32{3, 4, -6, 8}}
	allocs := testing.AllocsPerRun(100, func() {
		if got, dropped := GuardRows(ok, 2, 2, 5, &buf); got != ok || dropped != 0 {
			t.Fatal("rows within the bound changed")
		}
	})
	if allocs != 0 {
		t.Errorf("GuardRows allocates %v times for rows within the bound, want 0", allocs)
	}
}

// TestGuardAtTheOwner pins G1 and G2 where pushes arrive: a push claiming
// more examples than the job's batch is refused whole; a push with a row
// of 1e30 is kept without that row, and the drop is counted and reported.
func TestGuardAtTheOwner(t *testing.T) {
	tn := newTNet(t, 2, 3, Sync)
	tn.leader()
	c := tn.cores["p0"]
	c.cfg.Guard.MaxExamples, c.cfg.Guard.MaxRowGrad = 100, 10
	k := &contribution{from: "p1", member: MemberID("p1", 1), round: 3, examples: 1000,
		rows: model.Sparse{Idx: []uint32{0, 4}, Val: []float32{1, 2}}}
	before := c.stats.Rejected
	if c.o.guard(k) || c.stats.Rejected != before+1 {
		t.Errorf("a push of 1000 examples with a batch of 100 was taken")
	}
	k.examples = 100
	k.rows = model.Sparse{Idx: []uint32{0, 4, 8}, Val: []float32{1, 1e30, -2}}
	if !c.o.guard(k) {
		t.Fatal("a push within the batch was refused")
	}
	if !slices.Equal(k.rows.Idx, []uint32{0, 8}) || c.stats.RowsDropped != 1 {
		t.Errorf("after the guard: rows %v, %d dropped; want rows 0 and 8, 1 dropped", k.rows.Idx, c.stats.RowsDropped)
	}
	rd := c.Ready()
	var ev *Event
	for i := range rd.Events {
		if rd.Events[i].Kind == EvDropped {
			ev = &rd.Events[i]
		}
	}
	if ev == nil || ev.Rows != 1 || ev.Peer != "p1" {
		t.Errorf("no EvDropped event naming p1 and 1 row: %+v", rd.Events)
	}
}

// TestTrimmedMean pins G3: one worker of four pushing huge values moves a
// trimmed row no further than the honest workers' range; a row only two
// workers touch is their sum; with equal examples and nothing to trim the
// trimmed sum equals the plain sum.
func TestTrimmedMean(t *testing.T) {
	const ex = 10
	part := func(vals ...float32) *model.Sparse {
		p := &model.Sparse{}
		for i, v := range vals {
			if !math.IsNaN(float64(v)) {
				p.Append(uint32(i), []float32{v * ex})
			}
		}
		return p
	}
	nan := float32(math.NaN()) // (not touched)
	parts := []*model.Sparse{
		part(1, 1, nan),
		part(2, 3, 5),
		part(3, nan, 7),
		part(1e6, nan, nan), // the bad worker
	}
	var tr trimmer
	var dst model.Sparse
	tr.TrimmedSum(&dst, parts, []uint64{ex, ex, ex, ex}, 1)
	if !slices.Equal(dst.Idx, []uint32{0, 1, 2}) {
		t.Fatalf("rows %v, want 0, 1, 2", dst.Idx)
	}
	// Row 0: four touch it, t = 1: drop 1 and 1e6, mean of 2 and 3 = 2.5,
	// times 40 examples.
	if got := dst.Val[0]; got != 2.5*4*ex {
		t.Errorf("row 0: %v, want %v (the bad worker trimmed)", got, 2.5*4*ex)
	}
	// Rows 1 and 2: two touch each: their sum.
	if dst.Val[1] != (1+3)*ex || dst.Val[2] != (5+7)*ex {
		t.Errorf("rows 1, 2: %v %v, want the plain sums %v %v", dst.Val[1], dst.Val[2], (1+3)*ex, (5+7)*ex)
	}
	// Trimmed needs sync: ssp and async apply each push alone.
	cfg := DefaultConfig()
	cfg.Self, cfg.ID, cfg.Model, cfg.Place, cfg.Contact = "x", 1, testModel(t), placeMod, "y"
	cfg.Combine, cfg.Mode = Trimmed, Async
	if err := cfg.Validate(); err == nil {
		t.Errorf("combine trimmed with async validated")
	}
}

// TestCappedCombine pins Mean and Capped (combine.go): a row one worker
// changed moves by its change under both; a row k workers changed moves by
// the mean of their weight changes times 1 (Mean) or min(k, 1.8)
// (Capped): the sum for one, 0.9 of it for two, 1.8 times the mean for
// four; the optimizer state's changes are summed under both.
func TestCappedCombine(t *testing.T) {
	const width, sw = 1, 2 // (logreg with AdaGrad: a weight and its accumulator)
	part := func(rows ...[3]float32) *model.Sparse {
		p := &model.Sparse{}
		for _, r := range rows {
			p.Append(uint32(r[0]), []float32{r[1], r[2]})
		}
		return p
	}
	parts := []*model.Sparse{
		part([3]float32{0, 1, 1}, [3]float32{1, 2, 1}, [3]float32{2, 4, 1}),
		part([3]float32{1, 4, 1}, [3]float32{2, 4, 1}),
		part([3]float32{2, 4, 1}),
		part([3]float32{2, 4, 1}),
	}
	var tr trimmer
	for _, tc := range []struct {
		capped float32
		want   []float32 // weights' changes of rows 0, 1, 2
	}{
		{1, []float32{1, 3, 4}},                // the mean
		{CappedFactor, []float32{1, 5.4, 7.2}}, // one: its change; two: 0.9 of the sum; four: 1.8 times the mean
	} {
		var dst model.Sparse
		tr.MeanSum(&dst, parts, width, sw, tc.capped)
		if !slices.Equal(dst.Idx, []uint32{0, 1, 2}) {
			t.Fatalf("capped %v: rows %v, want 0, 1, 2", tc.capped, dst.Idx)
		}
		for i, want := range tc.want {
			if got := dst.Val[i*sw]; math.Abs(float64(got-want)) > 1e-5 {
				t.Errorf("capped %v: row %d moves %v, want %v", tc.capped, i, got, want)
			}
			if got, wantG := dst.Val[i*sw+1], float32([]int{1, 2, 4}[i]); got != wantG {
				t.Errorf("capped %v: row %d's accumulator changes by %v, want the sum %v", tc.capped, i, got, wantG)
			}
		}
	}
	// Capped combines windows: one batch's gradients cannot take it.
	cfg := DefaultConfig()
	cfg.Self, cfg.ID, cfg.Model, cfg.Place, cfg.Contact = "x", 1, testModel(t), placeMod, "y"
	cfg.Combine = Capped
	if err := cfg.Validate(); err == nil {
		t.Errorf("combine capped without windows validated")
	}
	cfg.LocalSteps = 4
	if err := cfg.Validate(); err != nil {
		t.Errorf("combine capped with windows of 4: %v", err)
	}
}
