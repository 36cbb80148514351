package train

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// TestValidateLocalState: optimizer state kept by the workers
// (Config.LocalState) is refused without windows of local steps and with
// FTRL, whose weights follow from the state the owners hold; with windows
// and AdaGrad or SGD it is taken.
func TestValidateLocalState(t *testing.T) {
	cfg := func(opt model.OptKind, steps int) Config {
		m, err := model.New(model.Logreg, 64, 2, 4, model.DefaultOptConfig(opt))
		if err != nil {
			t.Fatal(err)
		}
		c := DefaultConfig()
		c.Self, c.ID, c.Model, c.Place, c.Contact = "x", 1, m, placeMod, "y"
		c.LocalSteps, c.LocalState = steps, true
		return c
	}
	for _, tc := range []struct {
		opt   model.OptKind
		steps int
		want  string // "" when valid
	}{
		{model.AdaGrad, 0, "needs windows of local steps"},
		{model.AdaGrad, 1, "needs windows of local steps"},
		{model.FTRL, 4, "FTRL"},
		{model.AdaGrad, 4, ""},
		{model.SGD, 2, ""},
	} {
		err := cfg(tc.opt, tc.steps).Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v, local steps %d: %v, want it taken", tc.opt, tc.steps, err)
		case tc.want != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v, local steps %d: %v, want ErrConfig saying %q", tc.opt, tc.steps, err, tc.want)
		}
	}
	if _, err := New(cfg(model.FTRL, 4)); !errors.Is(err, ErrConfig) {
		t.Errorf("New with FTRL and local state: %v, want ErrConfig", err)
	}
}

// TestLocalStateWindowsMoveWeightsOnly runs two peers of a sync run with
// windows of 4 local steps and AdaGrad, with the optimizer state kept by
// the owners and by the workers (Config.LocalState), and checks what a
// user would: with local state every compute request gives plain rows (1
// value a row, no accumulator), every push carries weight changes only
// (RowWidth 1 = Layout.Width), and the owners end with the weights the
// pushes add up to (summed in member order, round by round) and their
// accumulators untouched (zero); without it requests and pushes are wide
// (2 values a row) and the owners add the pushes' accumulator changes
// too. With local state, a wide push (the width of windows that carry
// state) is rejected and counted (Stats.Rejected), and changes nothing.
func TestLocalStateWindowsMoveWeightsOnly(t *testing.T) {
	for _, local := range []bool{false, true} {
		name := map[bool]string{false: "owners' state", true: "local state"}[local]
		t.Run(name, func(t *testing.T) {
			sn := &scNet{t: t, procs: map[string]*scProc{}}
			xw := 2 // (logreg with AdaGrad: a weight and its accumulator)
			if local {
				xw = 1
			}
			type pushKey struct {
				from, to string
				round    uint64
			}
			pushes := map[pushKey]*wire.Core{}
			var widths []string
			sn.onSend = func(m scMsg) {
				if m.msg.Op != wire.CorePush || m.msg.Rows.Len() == 0 {
					return
				}
				if m.msg.RowWidth != xw {
					widths = append(widths, fmt.Sprintf("%s->%s round %d: push of width %d", m.from, m.to, m.msg.Round, m.msg.RowWidth))
				}
				k := pushKey{m.from, m.to, m.msg.Round}
				if pushes[k] == nil {
					pushes[k] = m.msg.Clone()
				}
			}
			computes := 0
			sn.onCompute = func(p *scProc, req *ComputeReq) {
				computes++
				if len(req.Weights) != len(req.Keys)*xw {
					widths = append(widths, fmt.Sprintf("%s round %d: %d values for %d rows", p.name, req.Round, len(req.Weights), len(req.Keys)))
				}
			}
			cmd := func(line string) {
				t.Helper()
				if _, err := sn.command(strings.Fields(line)); err != nil {
					t.Fatalf("%s: %v\n%s", line, err, sn.describe())
				}
			}
			state := map[bool]string{false: "off", true: "on"}[local]
			cmd("peers 2 voters=3 data=4 examples=1 opt=adagrad local=4 localstate=" + state)
			if local {
				// p1's push of round 1 to p0 held: a copy of it as wide
				// rows, the width of windows that carry state, is refused.
				cmd("hold from=p1 to=p0 op=push round=1")
				var held *wire.Core
				for range 2000 {
					for _, m := range sn.queue {
						if m.from == "p1" && m.to == "p0" && m.msg.Op == wire.CorePush && m.msg.Round == 1 && m.msg.Rows.Len() > 0 {
							held = m.msg
						}
					}
					if held != nil {
						break
					}
					sn.tickAll(true)
				}
				if held == nil {
					t.Fatalf("p1 never pushed round 1 to p0\n%s", sn.describe())
				}
				wide := held.Clone()
				wide.RowWidth = 2
				wide.Rows.Val = nil
				for _, v := range held.Rows.Val {
					wide.Rows.Val = append(wide.Rows.Val, v, 1)
				}
				p0 := sn.procs["p0"].core
				w0, s0 := slices.Clone(p0.m.W), cloneState(p0.m.State)
				before := p0.Stats().Rejected
				p0.Receive("p1", wide)
				sn.handle(sn.procs["p0"])
				if got := p0.Stats().Rejected - before; got != 1 {
					t.Errorf("a wide push to a core whose workers keep the state: %d rejected, want 1", got)
				}
				if !slices.Equal(p0.m.W, w0) || !slices.EqualFunc(p0.m.State, s0, slices.Equal[[]float32]) {
					t.Errorf("a rejected wide push changed the owner's model")
				}
				cmd("release")
			}
			cmd("run until=done")
			for _, n := range sn.names {
				if p := sn.procs[n]; !p.done || p.err != nil {
					t.Fatalf("%s: %s", n, sn.ending(p))
				}
			}
			if computes != 8 || len(widths) > 0 {
				t.Errorf("%d compute requests (want 8: 4 windows each); wrong widths:\n%s", computes, strings.Join(widths, "\n"))
			}
			// The owners' rows: the pushes' changes added round by round,
			// each round's summed in member order (model.AddDeltas: an
			// accumulator kept at zero or above).
			want := map[string][][2]float32{} // per owner, per row: weight, accumulator
			rounds := uint64(0)
			for k := range pushes {
				rounds = max(rounds, k.round+1)
			}
			for _, owner := range sn.names {
				rows := make([][2]float32, 64)
				for r := range rounds {
					var sum [64][2]float32
					for _, from := range sn.names {
						msg := pushes[pushKey{from, owner, r}]
						if msg == nil {
							continue
						}
						for i, k := range msg.Rows.Idx {
							for c := range xw {
								sum[k][c] += msg.Rows.Val[i*xw+c]
							}
						}
					}
					for k := range rows {
						rows[k][0] += sum[k][0]
						rows[k][1] = max(0, rows[k][1]+sum[k][1])
					}
				}
				want[owner] = rows
			}
			changed := 0
			for _, owner := range sn.names {
				m := sn.procs[owner].core.m
				for k := range uint32(64) {
					if !m.Owns(m.Layout.Shard(k)) {
						continue
					}
					got := m.AppendWide(nil, k)
					w := want[owner][k]
					if got[0] != w[0] || got[1] != w[1] {
						t.Errorf("%s row %d: weight %v accumulator %v, want %v %v (the pushes' sums)", owner, k, got[0], got[1], w[0], w[1])
					}
					if w[0] != 0 {
						changed++
					}
					if local && got[1] != 0 {
						t.Errorf("%s row %d: accumulator %v; the workers keep the state, the owner's must stay zero", owner, k, got[1])
					}
					if !local && w[0] != 0 && got[1] == 0 {
						t.Errorf("%s row %d: accumulator 0 after pushes of the owners' state", owner, k)
					}
				}
			}
			if changed < 16 {
				t.Errorf("%d rows changed, want every row of the 8 windows (3 keys each)", changed)
			}
		})
	}
}

func cloneState(st [][]float32) [][]float32 {
	out := make([][]float32, len(st))
	for i, s := range st {
		out[i] = slices.Clone(s)
	}
	return out
}
