package infer

import (
	"maps"
	"slices"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// warnRareLabels warns about labels so rare they look like typos: with
// three or more distinct labels, one with fewer rows than 1% of the median
// label's (a stray 2 among -1/+1 labels would otherwise silently make
// --model auto a 3-class softmax). The warning names the first rows.
func warnRareLabels(log zerolog.Logger, sr data.ScanResult, kind model.Kind) {
	if len(sr.Labels) < 3 || sr.LabelsCapped {
		return
	}
	counts := slices.Sorted(maps.Values(sr.Labels))
	median := counts[len(counts)/2]
	for _, l := range slices.Sorted(maps.Keys(sr.Labels)) {
		n := sr.Labels[l]
		if n*100 >= median {
			continue
		}
		var where []string
		for _, p := range sr.LabelPlaces[l] {
			where = append(where, p.String())
		}
		ev := log.Warn().Float64("label", l).Int64("rows", n).Int64("of_rows", sr.Rows).Strs("first_rows", where)
		binaryWithout := true
		for o := range sr.Labels {
			if o != l && o != 0 && o != 1 && o != -1 {
				binaryWithout = false
			}
		}
		if binaryWithout {
			ev.Msgf("label %g is on only %d rows: a typo? Without it the labels are binary (logreg); with it --model auto makes a softmax over every label from the smallest to the largest. Fix those rows, or give --model logreg (they then fail as bad labels, or are skipped with --skip-bad-lines)", l, n)
			continue
		}
		ev.Msgf("label %g is on only %d rows, under 1%% of a typical label's: a typo?", l, n)
	}
}

// WarnInput warns when the input eval or predict reads (its first file,
// format f, zeroBased, and whether --zero-based was given) differs from
// the model's training input, which the model file records from format
// version 3 on.
func WarnInput(log zerolog.Logger, m *model.Model, modelPath, first string, f data.Format, zeroBased, zbGiven bool) {
	if m.Input.Format == "" {
		return // an older model file: the input is not known
	}
	got := f
	if got == data.FormatAuto {
		if d, err := data.DetectFormat(first); err == nil {
			got = d
		}
	}
	if got != data.FormatAuto && got.String() != m.Input.Format && m.Input.Format != data.FormatCache.String() && got != data.FormatCache {
		log.Warn().Str("model", modelPath).Str("trained_on", m.Input.Format).Str("reading", got.String()).
			Msgf("the model was trained on %s input and this is %s: its features may mean other things", m.Input.Format, got)
	}
	if zbGiven && zeroBased != m.Input.ZeroBased && (got == data.FormatLibSVM || got == data.FormatAuto) {
		log.Warn().Str("model", modelPath).Bool("trained_zero_based", m.Input.ZeroBased).Bool("zero_based", zeroBased).
			Msg("--zero-based differs from the model's training: every feature index is read one off what the model learnt")
	}
}
