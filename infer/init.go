package infer

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/usage"
)

// Warm starts (train --init FILE): the file fixes the model's shape. The
// flags that define it (--model, --dim, --classes, --hidden, --label-base,
// --interactions), when given, must agree with it; those not given take
// the file's values, so nothing about the model is inferred from the data.
// The run's optimizer flags apply (model.WarmStart says what becomes of
// the file's optimizer state); --shards is the file's unless given.

// loadInit reads the --init model and fills in spec what the file fixes.
// Errors name --init, or the flag that disagrees with the file and both
// values (TestTrainInitMismatch).
func loadInit(spec *Spec, log zerolog.Logger) (*model.Model, error) {
	path := spec.Init
	if _, err := os.Stat(path); err != nil {
		return nil, usage.Flag("init", "%v", PlainPathError(err))
	}
	m, err := model.LoadFile(path)
	switch {
	case errors.Is(err, model.ErrAddressSpace):
		return nil, usage.Flag("init", "%s: %v", path, err)
	case err != nil:
		return nil, fmt.Errorf("--init %s: %w", path, err)
	}
	if spec.Kind == 0 {
		spec.Kind = m.Kind
	}
	if spec.Dim == 0 {
		spec.Dim = m.Dim
	}
	if spec.Classes == 0 {
		spec.Classes = m.Classes
	}
	if !spec.HiddenGiven {
		spec.Hidden = m.Hidden
	}
	if err := m.Matches(spec.Kind, spec.Dim, spec.Classes, spec.Hidden); err != nil {
		name := "model"
		switch {
		case m.Kind != spec.Kind:
		case m.Dim != spec.Dim:
			name = "dim"
		case m.Classes != spec.Classes:
			name = "classes"
		default:
			name = "hidden"
		}
		return nil, usage.Flag(name, "%v (--init %s)", err, path)
	}
	if !spec.LabelBaseAuto && m.Kind.Multiclass() && int64(spec.LabelBase) != m.LabelBase {
		return nil, usage.Flag("label-base", "%d, but the model of --init %s has label base %d", spec.LabelBase, path, m.LabelBase)
	}
	spec.LabelBase, spec.LabelBaseAuto = int(m.LabelBase), false
	inter, err := ModelInteractions(m)
	if err != nil {
		return nil, fmt.Errorf("--init %s: %w", path, err)
	}
	switch {
	case len(spec.Interactions) == 0:
		spec.Interactions = inter
	case !slices.Equal(spec.Interactions, inter):
		return nil, usage.Flag("interactions", "%q, but the model of --init %s was trained with %q", spec.Interactions, path, inter)
	}
	switch spec.Scale {
	case ScaleOn:
		return nil, usage.Flag("scale", "on: a warm start (--init) goes on in the units the model's weights are in, the raw features'; give --scale off or auto")
	default:
		spec.Scale = ScaleOff
	}
	if !spec.ShardsGiven {
		spec.Shards, spec.ShardsGiven = m.Layout.Shards, true
	}
	if len(spec.Train) > 0 {
		WarnInput(log, m, path, spec.Train[0], spec.Format, spec.ZeroBased, true)
	}
	return m, nil
}

// warmStart makes the --init model the run's: the run's optimizer (with
// the L2 strength resolved), its shards, its flags and labels recorded.
func warmStart(spec Spec, in inferred, init *model.Model, log zerolog.Logger) (*model.Model, error) {
	oc := spec.Opt
	oc.L2 = in.l2
	m, notes, err := init.WarmStart(oc, spec.Shards)
	if err != nil {
		return nil, usage.Flag("init", "%s: %v", spec.Init, err)
	}
	for _, n := range notes {
		log.Info().Str("init", spec.Init).Msg("--init: " + n)
	}
	if in.signed && m.Kind == model.Logreg {
		m.Input.SignedLabels = true // the file's, unless this data shows -1
	}
	if m.Meta == nil {
		m.Meta = map[string]string{}
	}
	m.Meta["flags"] = spec.Given
	m.Meta["init"] = spec.Init
	log.Info().Str("init", spec.Init).Int64("steps", m.Steps).Int64("examples", m.Examples).Int64("nonzeros", m.NonZeros()).
		Msg("--init: training goes on from the saved model")
	return m, nil
}

// warnOutliers warns when a few rows of file(s) hold feature indices far
// above the rest's (data.IndexTail.IndexOutliers): with --dim inferred,
// they size the model (TestTrainWarnsOfOutlyingIndices).
func warnOutliers(log zerolog.Logger, sr data.ScanResult, zeroBased bool, what string) {
	o, ok := sr.Tail.IndexOutliers()
	if !ok {
		return
	}
	// As the file writes it: libsvm text counts from 1 unless --zero-based.
	off := uint64(0)
	if sr.Format == data.FormatLibSVM && !zeroBased {
		off = 1
	}
	rows := make([]string, 0, len(o.Named))
	for _, r := range o.Named {
		rows = append(rows, fmt.Sprintf("%v (index %d)", r.Place, uint64(r.MaxIndex)+off))
	}
	log.Warn().Int64("rows", o.Rows).Int64("of", o.Of).Strs("at", rows).Uint64("dim", o.Dim).Uint64("dim_without_them", o.Typical).
		Msgf("a few rows of the %s data hold feature indices far above the rest: they make --dim %d, the others fit in %d. Fix those rows, or give --dim (rows beyond it are then bad lines: --skip-bad-lines skips them)", what, o.Dim, o.Typical)
}
