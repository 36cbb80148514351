package model

import "fmt"

// Warm starts: train --init continues from a saved model. The file fixes
// the model's shape (Matches checks a run's flags against it); the run's
// flags fix the optimizer's settings and the shard count.

// WarmStart makes m, read from a file, ready to go on training with the
// optimizer opt in a layout of shards shards, and returns what it did for
// the log. The file's optimizer state is kept when opt is of the same kind
// (AdaGrad's sums, FTRL's z and n: training continues at the rates it had
// reached) and dropped otherwise; without state every weight starts from
// its value with fresh per-coordinate rates (FTRL rebuilds each z from its
// weight, see Apply). Steps continue, so SGD's decaying rate goes on from
// where it was. The settings of opt (rate, L2...) replace the file's.
func (m *Model) WarmStart(opt OptConfig, shards int) (*Model, []string, error) {
	if err := opt.Validate(); err != nil {
		return nil, nil, err
	}
	var notes []string
	owned := len(m.Owned(nil))
	switch {
	case owned > 0 && opt.Kind != m.Opt.Kind:
		for s := range m.State {
			m.Disown(s)
		}
		notes = append(notes, fmt.Sprintf("the file's %v state does not fit %v: dropped, every weight goes on from its value with fresh per-coordinate rates", m.Opt.Kind, opt.Kind))
	case owned > 0 && opt.Kind.StatePerWeight() > 0:
		notes = append(notes, fmt.Sprintf("the file's %v state of %d of %d shards carried over: training goes on at the rates it had reached", opt.Kind, owned, m.Layout.Shards))
	case opt.Kind.StatePerWeight() > 0:
		notes = append(notes, fmt.Sprintf("the file holds no optimizer state (train --save-state writes it): every weight goes on from its value with fresh %v rates", opt.Kind))
	}
	m.Opt = opt
	if shards != m.Layout.Shards {
		r, err := m.Reshard(shards)
		if err != nil {
			return nil, nil, err
		}
		notes = append(notes, fmt.Sprintf("rows moved from the file's %d shards to %d", m.Layout.Shards, shards))
		m = r
	}
	return m, notes, nil
}

// Reshard returns a copy of m in a layout of shards shards: every row with
// a nonzero value, and its optimizer state where its shard is owned here.
// The copy owns every shard if m owns any (rows from shards not owned get
// zero state: no history). It reads only the pages m's rows were written
// in.
func (m *Model) Reshard(shards int) (*Model, error) {
	r, err := newShape(m.Kind, m.Dim, m.Classes, m.Hidden, shards, m.Opt)
	if err != nil {
		return nil, err
	}
	r.LabelBase, r.Steps, r.Examples, r.Input, r.Meta = m.LabelBase, m.Steps, m.Examples, m.Input, m.Meta
	r.W = make([]float32, r.Layout.Len())
	if len(m.Owned(nil)) > 0 {
		r.OwnAll()
	}
	w := m.Layout.Width
	spw := m.Opt.Kind.StatePerWeight()
	for s := range m.Layout.Shards {
		m.visitRows(s, m.State[s] != nil, anyBits, func(k uint32, row, srow []float32) {
			copy(r.Row(k), row)
			if srow != nil {
				j := r.Layout.Slot(k) * w * spw
				copy(r.State[r.Layout.Shard(k)][j:j+w*spw], srow)
			}
		})
	}
	return r, nil
}
