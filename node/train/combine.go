package train

import (
	"fmt"
	"slices"

	"github.com/gossiptrain/gossiptrain/model"
)

// Combine is how an owner combines the contributions of a sync round
// (guard.go, G3).
type Combine uint8

// Combines.
const (
	// Sum adds every worker's gradient: the model then takes the mean over
	// every example of the round, as one worker with all the batches would.
	Sum Combine = iota
	// Trimmed takes, for each coordinate of each row, the per-example
	// gradients of the workers that touched the row, drops the t largest
	// and the t smallest (t = max(1, k/4) for k >= 3 workers; none for
	// fewer), and averages the rest: a coordinate-wise trimmed mean (Yin
	// et al., "Byzantine-robust distributed learning", ICML 2018), which
	// one worker in four cannot move beyond the honest workers' range. It
	// costs honest runs some quality (a row's extreme honest values are
	// dropped too), and nothing is trimmed for rows fewer than three
	// workers touch (rare features), so it is an option, not the default.
	Trimmed
	// Mean, with windows of local steps, adds to each row's weights the
	// mean of the changes of the workers that touched it (their optimizer
	// state changes are still summed): each worker's window starts from
	// the same values, so the sum of N workers' changes moves a row N
	// times as far as one worker's steps would; the mean moves it as far
	// (parameter mixing: Zinkevich et al., NIPS 2010; local SGD). Sync: the
	// mean over the workers whose push touched the row; ssp and async
	// apply each push as it comes, its weight changes scaled by 1/N for
	// the N workers of the pushing worker's configuration (worker.go).
	Mean
	// Capped, with windows of local steps, adds to each row's weights the
	// sum of the changes of the workers that touched it, but at most
	// CappedFactor times their mean (their optimizer state changes are
	// summed; each window trains as Sum's do, as if the other workers'
	// squared gradients counted too: sgd.Window.Run). The sum is right
	// for a row the workers move a little each window, as one peer taking
	// all their steps would; it overshoots a row each worker's window
	// brings near the optimum of its data (the frequent rows, the bias):
	// there the sum of k workers' changes is k times the distance, and
	// from k = 3 on the row swings further past the optimum each window
	// than it started (sum diverged at H = 16 in docs/scaling.md). The mean
	// never overshoots but moves the rows the workers share a k-th of the
	// way a lone peer would. Capped moves them up to 1.8 times one window's
	// change: a swing back of at most 0.8 of the distance, which dies out,
	// and nearly the sum's progress where two workers share a row.
	// Measured (docs/scaling.md, "How windows combine"): 4 peers end
	// within 0.1% of a lone peer's log-loss at H = 4 to 16, where sum
	// loses 0.9-4% from H = 8 and mean 0.8-1.1% at every H. Ssp and async
	// apply each push as it comes, not knowing which other workers touch
	// a row: their pushes' weight changes are scaled by min(N,
	// CappedFactor)/N for the N workers of the configuration (worker.go).
	Capped
)

// CappedFactor bounds Capped's combination of a row's changes at this
// many times their mean (Capped).
const CappedFactor = 1.8

func (c Combine) String() string {
	switch c {
	case Sum:
		return "sum"
	case Trimmed:
		return "trimmed"
	case Mean:
		return "mean"
	case Capped:
		return "capped"
	}
	return fmt.Sprintf("combine(%d)", uint8(c))
}

// ParseCombine parses a Combine's name.
func ParseCombine(s string) (Combine, error) {
	switch s {
	case "sum":
		return Sum, nil
	case "trimmed":
		return Trimmed, nil
	case "mean":
		return Mean, nil
	case "capped":
		return Capped, nil
	}
	return 0, fmt.Errorf("%w: combine %q: want sum, trimmed, mean or capped", ErrConfig, s)
}

// trimmer holds TrimmedSum's scratch.
type trimmer struct {
	pos  []int
	vals []float64
	row  []float32
}

// TrimmedSum sets dst to the trimmed combination of parts (each a worker's
// summed gradient rows, of examples[i] examples, sorted by index), scaled
// back to a sum: each coordinate is the trimmed mean of the touching
// workers' per-example values times their examples, so that the model's
// mean over the round's examples (model.Apply divides by them) is the
// trimmed mean where the touching workers are all the workers. A row that
// fewer than three workers touch is their plain sum.
func (tr *trimmer) TrimmedSum(dst *model.Sparse, parts []*model.Sparse, examples []uint64, width int) {
	dst.Reset()
	tr.pos = slices.Grow(tr.pos[:0], len(parts))[:len(parts)]
	clear(tr.pos)
	tr.row = slices.Grow(tr.row[:0], width)[:width]
	var touch []int
	for {
		// The smallest index any part still has.
		next, any := uint32(0), false
		for i, p := range parts {
			if tr.pos[i] < len(p.Idx) && (!any || p.Idx[tr.pos[i]] < next) {
				next, any = p.Idx[tr.pos[i]], true
			}
		}
		if !any {
			return
		}
		touch = touch[:0]
		var ex uint64
		for i, p := range parts {
			if tr.pos[i] < len(p.Idx) && p.Idx[tr.pos[i]] == next {
				touch = append(touch, i)
				ex += examples[i]
			}
		}
		k := len(touch)
		for c := range width {
			if k < 3 {
				s := float32(0)
				for _, i := range touch {
					s += parts[i].Val[tr.pos[i]*width+c]
				}
				tr.row[c] = s
				continue
			}
			tr.vals = tr.vals[:0]
			for _, i := range touch {
				tr.vals = append(tr.vals, float64(parts[i].Val[tr.pos[i]*width+c])/float64(max(1, examples[i])))
			}
			slices.Sort(tr.vals)
			t := max(1, k/4)
			mean := 0.0
			for _, v := range tr.vals[t : k-t] {
				mean += v
			}
			mean /= float64(k - 2*t)
			tr.row[c] = float32(mean * float64(ex))
		}
		dst.Append(next, tr.row)
		for _, i := range touch {
			tr.pos[i]++
		}
	}
}

// MeanSum sets dst to the combination of window changes parts (wide rows
// of sw values, the first width the weights' changes, the rest optimizer
// state's; sorted by index): for each row, the mean of the weight changes
// of the parts that have it times min(k, capped) for the k parts that have
// it (1: Mean; CappedFactor: Capped), and the sum of their state changes.
func (tr *trimmer) MeanSum(dst *model.Sparse, parts []*model.Sparse, width, sw int, capped float32) {
	dst.Reset()
	tr.pos = slices.Grow(tr.pos[:0], len(parts))[:len(parts)]
	clear(tr.pos)
	tr.row = slices.Grow(tr.row[:0], sw)[:sw]
	for {
		next, any := uint32(0), false
		for i, p := range parts {
			if tr.pos[i] < len(p.Idx) && (!any || p.Idx[tr.pos[i]] < next) {
				next, any = p.Idx[tr.pos[i]], true
			}
		}
		if !any {
			return
		}
		clear(tr.row)
		k := 0
		for i, p := range parts {
			if tr.pos[i] < len(p.Idx) && p.Idx[tr.pos[i]] == next {
				v := p.Val[tr.pos[i]*sw : (tr.pos[i]+1)*sw]
				for c := range v {
					tr.row[c] += v[c]
				}
				k++
				tr.pos[i]++
			}
		}
		div := float32(k) // (Mean: the sum over k)
		if capped > 1 && k > 1 {
			div = float32(k) / min(float32(k), capped) // (the sum over k/min(k, capped): min(k, capped) times the mean)
		}
		for c := range width {
			tr.row[c] /= div
		}
		dst.Append(next, tr.row)
	}
}
