package infer

import (
	"fmt"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/usage"
)

// metaInteractions is the model meta key that records --interactions, so
// eval and predict read rows as train did.
const metaInteractions = "interactions"

// ModelInteractions returns the interactions a model was trained with
// (--interactions, recorded in the model file).
func ModelInteractions(m *model.Model) ([]string, error) {
	list, err := data.ParseInteractions(m.Meta[metaInteractions])
	if err != nil {
		return nil, fmt.Errorf("the model file's interactions: %w", err)
	}
	return list, nil
}

// checkInteractions checks that --interactions crosses the namespaces of
// input that has them: VW text and Criteo TSV.
func checkInteractions(spec Spec, first string) error {
	if len(spec.Interactions) == 0 {
		return nil
	}
	f := spec.Format
	if f == data.FormatAuto {
		var err error
		if f, err = data.DetectFormat(first); err != nil {
			return usage.Flag("train", "%v", err)
		}
	}
	if f != data.FormatVW && f != data.FormatCriteo {
		return usage.Flag("interactions", "%s is %v input, which has no namespaces to cross (VW text and Criteo TSV have them)", first, f)
	}
	return nil
}

// spoolStdin copies standard input (or another stream) to a temporary file
// when it is read more than once: Prepare's scan and then the epochs, the
// epochs without a cache, the test set once per evaluation.
func (p *Plan) spoolStdin(spec Spec) error {
	var err error
	switch {
	case needsScan(spec):
		err = p.spool(p.TrainFiles[0], "train", "a scan to infer what the flags leave open, then the epochs; "+
			"with --model, --dim and --l2 given, and --epochs 1 or --cache FILE, it is streamed")
	case p.Epochs > 1 && spec.Cache == "":
		err = p.spool(p.TrainFiles[0], "train", "one pass per epoch; --cache FILE would read it once")
	}
	if err == nil && spec.Test != "" {
		err = p.spool(spec.Test, "test", "once per evaluation")
	}
	return err
}

// spool copies a stream input (standard input, a pipe) that must be read
// more than once to a temporary file, logging it.
func (p *Plan) spool(name, flagName, why string) error {
	if !data.IsStream(name) {
		return nil
	}
	n, rm, err := data.Spool(name, "")
	if err != nil {
		return fmt.Errorf("--%s: %w", flagName, err)
	}
	p.spools = append(p.spools, rm)
	what := name
	if name == data.Stdin {
		what = "standard input"
	}
	p.log.Info().Str("input", name).Int64("bytes", n).Str("flag", "--"+flagName).
		Msgf("%s is read more than once (%s): copied to a temporary file, removed at the end", what, why)
	return nil
}

// RemoveSpools removes the temporary copies of streamed input; call it
// when the run is over.
func (p *Plan) RemoveSpools() {
	for _, rm := range p.spools {
		if err := rm(); err != nil {
			p.log.Warn().Err(err).Msg("removing the temporary copy of standard input")
		}
	}
	p.spools = nil
}
