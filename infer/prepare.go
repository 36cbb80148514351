// Package infer works out, before any training, what a command's flags
// leave open, and checks the files the command reads and writes.
//
// Prepare is train's part: from one scan of the training data it infers
// the model kind (--model auto: logreg for binary labels, else softmax),
// the dimension (--dim: the largest feature index + 1), the classes and
// their label base, the L2 strength of --l2 auto (1/rows, liblinear's C=1)
// and the feature scaling of --scale auto, then builds the model. Every
// caller that needs the model train would build calls it: train itself
// (alone or as a peer), and cluster, bench and launch, which resolve the
// model once from all the data so that peers reading different files
// build the same one. eval and predict call the file checks (Expand,
// CheckIDXLabels, CheckWritableFile) and WarnInput, which compares what
// they read with the input a model file says it was trained on.
//
// Its errors about flags are usage errors (package usage) naming the flag.
package infer

import (
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/human"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/usage"
)

// Epoch defaults: standalone train with --epochs auto holds out every
// AutoHoldout-th training row (--holdout) and runs until the loss on the
// held-out rows has not improved by more than AutoHoldoutTol of the best
// for AutoPatience epochs in a row, keeping the best epoch's model, for
// at most AutoMaxEpochs epochs (sgd.Config.Holdout). With --holdout off
// it runs until the training loss stops improving (AutoStopTol), after
// at least AutoMinEpochs. A peer of a distributed run holds out the rows
// of its own part the same way and ends its data when their loss stops
// improving, for at most DistMaxEpochs; the run ends when every peer has
// stopped (node/trainer, Config.Holdout). With --holdout off it runs
// DistEpochs.
const (
	AutoHoldout    = 10
	AutoPatience   = 2
	AutoHoldoutTol = 1e-3
	AutoStopTol    = 1e-3
	AutoMinEpochs  = 3
	AutoMaxEpochs  = 200
	DistEpochs     = 5
	DistMaxEpochs  = 20
	// An MLP's training loss keeps falling by more than 0.1% an epoch long
	// after its test metrics have nearly settled (it starts to memorise:
	// on Fashion-MNIST test accuracy gains 0.05 points an epoch over
	// epochs 14-20), so auto caps it at 20.
	AutoMLPEpochs = 20
)

// Scale is --scale: whether training alone brings numeric features to
// unit size.
type Scale string

// The values of --scale.
const (
	ScaleAuto Scale = "auto" // when the data is scanned anyway
	ScaleOn   Scale = "on"   // scan for it
	ScaleOff  Scale = "off"  // the features as they are
)

// Spec is what train's flags say about the data, the model and the run,
// parsed and checked one by one (the command line does that); a zero
// Kind, Dim or Classes is left to Prepare to infer.
type Spec struct {
	// Train are --train's patterns, Test --test ("": none).
	Train []string
	Test  string
	// Format is --format (data.FormatAuto: from the file names).
	Format data.Format
	// TrainLabels and TestLabels are the IDX labels files ("": beside
	// the images, by the standard name).
	TrainLabels, TestLabels string
	ZeroBased, SkipBad      bool
	// MaxValue is --max-value: the training data's bound (0: none).
	MaxValue float64
	// Part and Parts are --part I/N (0, 0: all the rows).
	Part, Parts int
	// Cache is --cache: the training data's binary cache file ("": none).
	Cache string
	// Interactions are --interactions: namespaces crossed as VW's -q and
	// --cubic (data.ParseInteractions), for VW and Criteo input.
	Interactions []string
	// LabelBase is --label-base unless LabelBaseAuto (the smallest
	// training label).
	LabelBase     int
	LabelBaseAuto bool

	// Kind is --model (0: auto), Classes --classes (0: inferred; given,
	// at least 2), Dim --dim (0: inferred).
	Kind    model.Kind
	Classes int
	Dim     uint64
	// Hidden and InitSeed are the MLP's --hidden and --init-seed;
	// HiddenGiven says --hidden was given.
	Hidden      int
	HiddenGiven bool
	InitSeed    uint64
	// Init is --init: the model file training starts from ("": a new
	// model). It fixes the model's shape (see loadInit).
	Init string
	// Shards is --shards; unless ShardsGiven, a model with fewer rows
	// gets fewer (a power of two).
	Shards      int
	ShardsGiven bool
	// Opt is the optimizer; its L2 is --l2 unless L2Auto (1/rows).
	Opt    model.OptConfig
	L2Auto bool

	// Epochs is --epochs (0: auto).
	Epochs int
	// Holdout is --holdout: every Holdout-th training row is held out
	// and stops training (0: off; see AutoHoldout). HoldoutGiven says
	// the flag was given: with --epochs N only then are rows held out.
	Holdout      int
	HoldoutGiven bool
	Scale        Scale
	// Distributed says the run is a peer of a job: --epochs auto is at
	// most DistMaxEpochs (DistEpochs with --holdout off) and nothing is
	// scaled.
	Distributed bool
	// Given is the flags the user gave, as --name=value, saved with the
	// model (inspect shows them).
	Given string
}

// Plan is a training run whose inputs are checked and whose model exists.
type Plan struct {
	Model *model.Model
	// TrainFiles are --train's files, TrainBytes their total size (the
	// ETA of progress lines).
	TrainFiles []string
	TrainBytes int64
	// TrainOpt and TestOpt read the training and test data as the model
	// needs them.
	TrainOpt, TestOpt data.Options
	// Test is the test file ("": none), Cache the training data's cache.
	Test, Cache string
	// Epochs is the number of passes (--epochs auto resolved); EpochsAuto
	// says it was auto (training alone then stops when the loss does).
	Epochs     int
	EpochsAuto bool
	// Holdout holds out every Holdout-th training row and stops when
	// their loss stops improving (0: no rows held out): --holdout with
	// --epochs auto, or given with --epochs N.
	Holdout int
	// L2Rows is the row count behind --l2 auto when it is this peer's
	// own files' (0: --l2 given, or --part, whose scan saw the job's
	// rows): a peer of a job scales it by the peers (job.RunPeer).
	L2Rows int64
	// Scale changes the features while training alone (--scale); nil for
	// none. The model's rows are mapped back at the end.
	Scale *data.Scaling
	// spools remove the temporary copies of standard input (data.Spool).
	spools []func() error
	log    zerolog.Logger
}

// Prepare infers what spec leaves open from one pass over the training
// data (when anything is open) and builds the model.
func Prepare(spec Spec, log zerolog.Logger) (plan *Plan, err error) {
	if len(spec.Train) == 0 {
		return nil, usage.Flag("train", "no training data given (e.g. --train 'data/train*.svm')")
	}
	files, size, err := ExpandData(spec.Train, "train")
	if err != nil {
		return nil, err
	}
	if spec.Test == data.Stdin && slices.Contains(files, data.Stdin) {
		return nil, usage.Flag("test", "standard input (-) cannot be both --train and --test: give one of them as a file")
	}
	var init *model.Model
	if spec.Init != "" {
		if init, err = loadInit(&spec, log); err != nil {
			return nil, err
		}
	}
	if err := checkInteractions(spec, files[0]); err != nil {
		return nil, err
	}
	p := &Plan{TrainFiles: files, TrainBytes: size, Test: spec.Test, Cache: spec.Cache, EpochsAuto: spec.Epochs == 0, Epochs: spec.Epochs, log: log}
	defer func() {
		if err != nil {
			p.RemoveSpools()
		}
	}()
	if p.EpochsAuto {
		p.Epochs = AutoMaxEpochs
		if spec.Distributed {
			p.Epochs = DistMaxEpochs
			if spec.Holdout == 0 {
				p.Epochs = DistEpochs
			}
		}
	}
	if p.EpochsAuto || spec.HoldoutGiven {
		p.Holdout = spec.Holdout
	}
	base := data.Options{
		Format:       spec.Format,
		ZeroBased:    spec.ZeroBased,
		Dim:          spec.Dim,
		SkipBad:      spec.SkipBad,
		MaxValue:     spec.MaxValue, // the training data's bound (not the test set's: see below)
		Interactions: spec.Interactions,
	}
	if err := p.spoolStdin(spec); err != nil {
		return nil, err
	}
	in, err := inferFromData(spec, base, files, log)
	if err != nil {
		return nil, err
	}
	if (spec.Format == data.FormatCriteo || spec.Format == data.FormatVW) && in.dim == 0 {
		return nil, usage.Flag("dim", "%v input is hashed into --dim features: give it (e.g. --dim 16777216)", spec.Format)
	}
	if in.l2Rows > 0 && spec.Parts <= 1 {
		// The scan counted this peer's own files; with --part it counted
		// the whole shared input, the job's rows.
		p.L2Rows = in.l2Rows
	}
	base.Dim = in.dim
	if in.kind.Multiclass() {
		base.Classes = in.classes
		base.LabelBase = in.labelBase
	}
	p.TrainOpt = base
	p.TrainOpt.Part, p.TrainOpt.Parts = spec.Part, spec.Parts
	p.TrainOpt.Labels = spec.TrainLabels
	p.TestOpt = base
	// --max-value keeps values that would overflow a gradient out of
	// training; evaluating computes none.
	p.TestOpt.Labels, p.TestOpt.MaxValue = spec.TestLabels, 0
	if err := p.TrainOpt.Validate(); err != nil {
		return nil, usage.Wrap(err)
	}
	if in.kind == model.MLP && p.EpochsAuto && !spec.Distributed {
		p.Epochs = AutoMLPEpochs
	}
	if init != nil {
		p.Model, err = warmStart(spec, in, init, log)
	} else {
		p.Model, err = buildModel(spec, in, files[0])
	}
	if err != nil {
		return nil, err
	}
	if init != nil && !spec.Distributed {
		// Training alone owns every shard's optimizer state (job.RunAlone):
		// the file may hold none (buildModel checks a new model's whole
		// reservation before it makes it).
		if err := p.Model.CheckOwnAll(); err != nil {
			return nil, usage.Flag(dimFlag(spec), "%v", err)
		}
	}
	if spec.Scale != ScaleOff && !spec.Distributed && in.scan != nil {
		if p.Scale = data.ScalingFor(*in.scan, in.dim); p.Scale != nil {
			n, centred := p.Scale.Scaled()
			log.Info().Int("features", n).Int("standardised", centred).
				Msg("--scale: training on numeric features brought to unit size (dense ones standardised, sparse ones divided by their largest |value|); the model is saved in the raw features' units")
		}
	}
	m := p.Model
	log.Info().Str("model", m.Kind.String()).Uint64("dim", m.Dim).Int("classes", m.Classes).
		Str("layout", m.Layout.String()).Str("optimizer", m.Opt.String()).
		Float64("model_MiB", float64(len(m.W))*4/(1<<20)).Msg("model ready")
	return p, nil
}

// inferred is what Prepare takes from the flags or infers from the data.
type inferred struct {
	kind      model.Kind
	dim       uint64
	classes   int
	labelBase int
	l2        float64
	l2Rows    int64            // the rows --l2 auto counted (0: --l2 given)
	signed    bool             // the training labels include -1 (binary labels -1/+1)
	scan      *data.ScanResult // the scan of libsvm or cached input, for --scale
}

// inferFromData infers what the flags leave open from one pass over the
// data: the model kind, the dimension, the classes and their label base,
// and the row count behind --l2 auto.
func inferFromData(spec Spec, base data.Options, files []string, log zerolog.Logger) (inferred, error) {
	in := inferred{kind: spec.Kind, dim: spec.Dim, classes: spec.Classes, labelBase: spec.LabelBase, l2: spec.Opt.L2}
	if !needsScan(spec) {
		return in, nil
	}
	scanOpt := base
	scanOpt.Labels = spec.TrainLabels
	start := time.Now()
	log.Info().Strs("files", files).Msg("scanning the training data to infer what the flags leave open")
	sr, err := data.Scan(spec.Train, scanOpt)
	if err != nil {
		return in, LabelsFlag(err, "train-labels")
	}
	log.Info().Int64("rows", sr.Rows).Int64("nonzeros", sr.NNZ).Str("took", human.Duration(time.Since(start)).String()).Msg("scan done")
	if sr.Rows == 0 {
		return in, usage.Flag("train", "the training data has no rows")
	}
	if sr.Format == data.FormatLibSVM || sr.Format == data.FormatCache {
		in.scan = &sr
	}
	in.signed = sr.Labels[-1] > 0
	if in.dim == 0 {
		warnOutliers(log, sr, spec.ZeroBased, "training")
		if in.dim, err = inferDim(spec, scanOpt, sr, log); err != nil {
			return in, err
		}
		log.Info().Uint64("dim", in.dim).Msg("--dim inferred from the data (largest feature index + 1)")
	}
	k, lo, ok := sr.Classes()
	if in.kind == 0 {
		switch {
		case !ok:
			return in, usage.Flag("model", "cannot tell the model from the labels (not all integers, or over 1000 distinct); give --model")
		case k == 0 && spec.Classes == 0:
			in.kind = model.Logreg
			log.Info().Msg("--model auto: logreg (the labels are binary)")
		default:
			in.kind = model.Softmax
			log.Info().Int("labels", len(sr.Labels)).Msg("--model auto: softmax (the labels are classes)")
		}
	}
	warnRareLabels(log, sr, in.kind)
	if in.kind.Multiclass() {
		if spec.LabelBaseAuto {
			// The smallest training label is class 0, as --help says
			// (so -1/+1 labels are classes 0 and 2 of 3).
			in.labelBase = min(lo, 0)
			if ok && len(sr.Labels) > 0 {
				in.labelBase = int(slices.Min(slices.Collect(maps.Keys(sr.Labels))))
			}
		}
		if in.classes == 0 {
			hi := math.Inf(-1)
			for l := range sr.Labels {
				hi = max(hi, l)
			}
			in.classes = max(int(hi)-in.labelBase+1, 2)
			log.Info().Int("classes", in.classes).Int("label_base", in.labelBase).Msg("--classes inferred from the training labels (largest label - label base + 1)")
		}
	}
	if spec.L2Auto {
		in.l2, in.l2Rows = 1/float64(sr.Rows), sr.Rows
		log.Info().Float64("l2", in.l2).Int64("rows", sr.Rows).Msg("--l2 auto: 1/rows, the strength of liblinear's C=1")
	}
	return in, nil
}

// needsScan says whether the flags leave anything to infer from a scan of
// the training data.
func needsScan(spec Spec) bool {
	return spec.Kind == 0 || spec.Dim == 0 || spec.L2Auto ||
		(spec.Kind.Multiclass() && (spec.Classes == 0 || spec.LabelBaseAuto)) ||
		(spec.Scale == ScaleOn && !spec.Distributed)
}

// inferDim is the dimension of the training data (and of the test data,
// when there is one): its largest feature index + 1.
func inferDim(spec Spec, scanOpt data.Options, sr data.ScanResult, log zerolog.Logger) (uint64, error) {
	dim := max(sr.Dim, uint64(sr.MaxIndex+1))
	if spec.Test != "" {
		to := scanOpt
		to.Labels, to.MaxValue = spec.TestLabels, 0
		tr, err := data.Scan([]string{spec.Test}, to)
		if err != nil {
			if lerr := LabelsFlag(err, "test-labels"); lerr != err {
				return 0, lerr
			}
			return 0, usage.Flag("test", "%v", err) // as train's check of --test (TestTrainChecksTestBeforeTraining)
		}
		warnOutliers(log, tr, spec.ZeroBased, "test")
		dim = max(dim, tr.Dim, uint64(tr.MaxIndex+1))
	}
	if dim == 0 {
		return 0, usage.Flag("dim", "cannot infer the dimension: the training data has no features")
	}
	return dim, nil
}

// buildModel makes the model of spec and what was inferred: its shards,
// its label base, the input it is trained on and the flags given, which
// inspect shows and eval and predict warn by.
func buildModel(spec Spec, in inferred, first string) (*model.Model, error) {
	classes := in.classes
	if in.kind == model.Logreg {
		classes = 2
	}
	shards := spec.Shards
	if !spec.ShardsGiven {
		// A model smaller than the default shard count (Adult has 127
		// features) gets as many shards as it has rows, rounded down to a
		// power of two.
		for uint64(shards) > in.dim+1 && shards > 1 {
			shards /= 2
		}
	}
	oc := spec.Opt
	oc.L2 = in.l2
	if in.kind == model.MLP && spec.Hidden < classes {
		return nil, usage.Flag("hidden", "%d hidden units for %d classes: want at least as many units as classes", spec.Hidden, classes)
	}
	// The dense reservation checked before it is made: under an
	// address-space limit (ulimit -v) Go's runtime would die with a stack
	// dump (TestTrainUnderAddressSpaceLimit). Training alone owns every
	// shard's optimizer state; a peer of a job checks its weights alone:
	// which shards' state it will own is not known yet.
	hidden := 0
	if in.kind == model.MLP {
		hidden = spec.Hidden
	}
	if err := model.CheckReservation(in.kind, in.dim, classes, hidden, shards, oc.Kind, !spec.Distributed); err != nil {
		if errors.Is(err, model.ErrAddressSpace) { // (a shape New refuses is named below)
			return nil, usage.Flag(dimFlag(spec), "%d: %v; a smaller --dim, --optimizer sgd (no state) or a higher limit would do", in.dim, err)
		}
	}
	var mod *model.Model
	var err error
	if in.kind == model.MLP {
		mod, err = model.NewMLP(in.dim, classes, spec.Hidden, shards, oc, spec.InitSeed)
	} else {
		mod, err = model.New(in.kind, in.dim, classes, shards, oc)
	}
	if err != nil {
		return nil, usage.Flag("shards", "%v", err)
	}
	mod.LabelBase = int64(in.labelBase)
	// Predicted labels are written as the training data wrote them
	// (predict --labels): -1/+1 when it had -1. Without a scan this is
	// not known and they are 0/1.
	mod.Input.SignedLabels = in.kind == model.Logreg && in.signed
	// What the model was trained on, for inspect and for eval's and
	// predict's warnings.
	inFormat := spec.Format
	if in.scan != nil {
		inFormat = in.scan.Format
	} else if inFormat == data.FormatAuto {
		if f, err := data.DetectFormat(first); err == nil {
			inFormat = f
		}
	}
	if inFormat != data.FormatAuto {
		mod.Input.Format, mod.Input.ZeroBased = inFormat.String(), spec.ZeroBased
	}
	mod.Meta = map[string]string{"flags": spec.Given}
	if len(spec.Interactions) > 0 {
		mod.Meta[metaInteractions] = strings.Join(spec.Interactions, ",")
	}
	return mod, nil
}

// OpenTrain opens the training data for one epoch (the cache when there
// is one), with the scaling of --scale.
func (p *Plan) OpenTrain(epoch int) (data.Source, error) {
	var src data.Source
	var err error
	if p.Cache != "" {
		src, err = data.OpenCached(p.TrainFiles, p.TrainOpt, p.Cache)
	} else {
		src, err = data.Open(p.TrainFiles, p.TrainOpt)
	}
	if err != nil {
		return nil, err
	}
	return data.Rescaled(src, p.Scale), nil
}

// OpenTest returns what opens the test data, or nil when there is none.
func (p *Plan) OpenTest() func() (data.Source, error) {
	if p.Test == "" {
		return nil
	}
	return func() (data.Source, error) {
		src, err := data.Open([]string{p.Test}, p.TestOpt)
		if err != nil {
			return nil, err
		}
		return data.Rescaled(src, p.Scale), nil
	}
}

// dimFlag names the flag an address-space error is about: --dim, which
// sizes the model (with --init, the file's).
func dimFlag(spec Spec) string {
	if spec.Init != "" {
		return "init"
	}
	return "dim"
}
