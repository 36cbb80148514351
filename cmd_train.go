package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/cluster"
	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/metrics"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/report"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// dataFlags are the flags that say how to read training and test data.
type dataFlags struct {
	train       listFlag
	test        string
	format      string
	trainLabels string
	testLabels  string
	zeroBased   bool
	skipBad     bool
	maxValue    float64
	part        string
	cache       string
	labelBase   string
	inter       string // --interactions
}

func (d *dataFlags) register(fs *flag.FlagSet) {
	fs.Var(&d.train, "train", "training data: a `FILE` or a quoted glob ('data/train*.svm'); repeat the flag or separate\nwith commas for several; .gz and .zst are decompressed on the fly. - is standard input\n(cat data | gossiptrain train --train - ...): copied to a temporary file when it must be read\nmore than once (a scan, then epochs), streamed with --epochs 1 and nothing to infer")
	fs.StringVar(&d.test, "test", "", "test data `FILE` for evaluation (same format as --train; - is standard input, when --train is not)")
	fs.StringVar(&d.format, "format", "auto", "input `format`: libsvm (svmlight; a label may carry a weight, label:weight), criteo (TSV,\nhashed into --dim), vw (Vowpal Wabbit text: label [weight] ['tag]|namespace feature[:value] ...,\nhashed into --dim with murmur3 as VW hashes), idx (MNIST images), or auto (from the file\nname and first line). CSV is not read")
	fs.StringVar(&d.inter, "interactions", "", "VW's -q and --cubic: a comma-separated `list` of 2 or 3 namespaces, each named by its first\ncharacter (ab,abc): every row also gets a feature per combination of one feature from each,\nhashed into --dim (VW's FNV combination), valued the product. VW text's namespaces are its own;\nCriteo's columns are a..m (I1..I13) and A..Z (C1..C26). The model file records them, so eval\nand predict apply them too. libsvm and idx input have no namespaces")
	fs.StringVar(&d.trainLabels, "train-labels", "", "IDX labels `FILE` for --train (default: found beside the images by the standard name)")
	fs.StringVar(&d.testLabels, "test-labels", "", "IDX labels `FILE` for --test (default: found beside the images by the standard name)")
	fs.BoolVar(&d.zeroBased, "zero-based", false, "libsvm feature indices start at 0 (default: 1, as in LIBSVM and liblinear)")
	fs.BoolVar(&d.skipBad, "skip-bad-lines", false, "count and skip malformed lines instead of stopping at the first one\n(the count is logged and reported)")
	fs.Float64Var(&d.maxValue, "max-value", 0, "a libsvm training value whose magnitude is over `V` makes its line a bad line (named with its file, line\nand token; counted and skipped with --skip-bad-lines). 0: no bound but float32's: NaN, infinities and\nvalues such as 1e39 are always bad lines. Finite values as large as 3e38 pass without it, and\ntwo of them in one feature of a batch overflow its gradient (see --nonfinite)")
	fs.StringVar(&d.part, "part", "", "read only part `I/N` of the training data: every N-th row, starting with row I (1-based),\nso N peers can split one file")
	fs.StringVar(&d.cache, "cache", "", "binary cache `FILE` for the training data: the first epoch parses the text and writes it,\nlater epochs and later runs read it with no parsing (rebuilt when the inputs change)")
	fs.StringVar(&d.labelBase, "label-base", "auto", "multiclass: the label `number` of the first class (class = label - base), or auto:\nthe smallest training label (1 for labels 1..K)")
}

// parsePart parses "I/N" (1-based) into data options' Part and Parts.
func parsePart(s string) (int, int, error) {
	if s == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 1 || i > n {
		return 0, 0, usageErr("part", "%q is not I/N with 1 <= I <= N (e.g. 2/4 for the second of four parts)", s)
	}
	return i, n, nil
}

// modelFlags say what model to train and how.
type modelFlags struct {
	kind      string
	classes   int
	dim       uint64
	shards    int
	optimizer string
	lr        float64
	lrDecay   float64
	lrPower   float64
	l1        float64
	l2        string
	beta      float64
	hidden    int
	initSeed  uint64
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.kind, "model", "auto", "model `kind` to train (a kind here; eval's, predict's and inspect's --model is a model file):\nlogreg (binary logistic regression, labels 0/1 or -1/+1), softmax\n(multinomial logistic regression over --classes classes), mlp (one hidden layer of\n--hidden ReLU units, then softmax), or auto: logreg when the training labels are binary,\nelse softmax (needs a quick scan of the data)")
	fs.IntVar(&m.classes, "classes", 0, "softmax, mlp: number of `classes` (default: inferred from the training labels)")
	fs.IntVar(&m.hidden, "hidden", 128, "mlp: hidden `units` (ReLU). Every row of the model is this wide, so the model is\n(dim + classes + 2) x hidden floats")
	fs.Uint64Var(&m.initSeed, "init-seed", 1, "mlp: `seed` of the initial weights; every peer of a cluster must use the same")
	fs.Uint64Var(&m.dim, "dim", 0, "number of input `features`. Required for criteo input (the hashing trick hashes into it);\nfor libsvm and idx input it may be omitted and is then inferred from the data")
	fs.IntVar(&m.shards, "shards", 256, "virtual shards the model is split into (a power of two); peers own shards")
	fs.StringVar(&m.optimizer, "optimizer", "adagrad", "`optimizer`: sgd (decaying step size), adagrad (per-coordinate step sizes), or ftrl\n(FTRL-Proximal: per-coordinate, L1 gives sparse models; the CTR industry's standard)")
	fs.Float64Var(&m.lr, "lr", 0, "learning `rate` (FTRL: alpha). Default per optimizer: sgd 0.5, adagrad 0.1, ftrl 0.1")
	fs.Float64Var(&m.lrDecay, "lr-decay", 0, "sgd: step size at step t is lr / (1 + decay*t)^power (default decay 1e-3)")
	fs.Float64Var(&m.lrPower, "lr-power", 0, "sgd: the schedule's `power` (default 0.5)")
	fs.Float64Var(&m.l1, "l1", 0, "L1 regularisation `strength` (ftrl only; makes weights exactly zero)")
	fs.StringVar(&m.l2, "l2", "auto", "L2 regularisation `strength`: the penalty (l2/2)*||w||^2 is added to the mean log-loss\n(all optimizers; never on the bias). auto is 1/N for N training rows, which is what\nliblinear's default C=1 amounts to; it needs a count of the rows (a quick scan when --dim\nis given); give a number to skip it. A peer of a cluster reading files of its own takes\nN = its rows x the peers at the start")
	fs.Float64Var(&m.beta, "ftrl-beta", 1, "ftrl: the `beta` of the per-coordinate step size alpha/(beta+sqrt(n))")
}

// optConfig builds the optimizer configuration from the flags, keeping the
// optimizer's defaults for flags not given.
func (m *modelFlags) optConfig(c *command) (model.OptConfig, error) {
	kind, err := model.ParseOptKind(m.optimizer)
	if err != nil {
		return model.OptConfig{}, usageErr("optimizer", "%v", err)
	}
	oc := model.DefaultOptConfig(kind)
	if c.set("lr") {
		oc.LR = m.lr
	}
	if c.set("lr-decay") {
		oc.Decay = m.lrDecay
	}
	if c.set("lr-power") {
		oc.Power = m.lrPower
	}
	if c.set("l1") {
		if kind != model.FTRL && m.l1 != 0 {
			return oc, usageErr("l1", "L1 needs --optimizer ftrl (sgd and adagrad support only --l2)")
		}
		oc.L1 = m.l1
	}
	if c.set("ftrl-beta") {
		oc.Beta = m.beta
	}
	if err := oc.Validate(); err != nil {
		return oc, fmt.Errorf("%w: %v", errUsage, err)
	}
	return oc, nil
}

// runFlags control the loop, the outputs and the logs.
type runFlags struct {
	batch         int
	epochs        int  // 0 until resolved when epochsAuto
	epochsAuto    bool // --epochs auto
	scale         string
	distributed   bool // set by train's run before prepareTraining
	evalEvery     int64
	report        string
	save          string
	progressEvery time.Duration
	threads       int
	nonFinite     string
	stallTimeout  time.Duration
	log           logFlags
}

func (r *runFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&r.batch, "batch", 100, "examples per SGD step (minibatch size)")
	r.epochsAuto = true
	fs.Var(epochsValue{r}, "epochs", "passes over the training data: `N`, or auto: train alone until an epoch improves the training\n"+
		"loss by less than 0.1% (at least 3 and at most 200 epochs; an mlp at most 20, since its\n"+
		"training loss falls long after its test loss has nearly settled). On a big data set give a\n"+
		"number (1 is a single streaming pass). Distributed runs (--job) do not stop early: auto is 5")
	fs.StringVar(&r.scale, "scale", "auto", "train alone on numeric features brought to unit size: a feature with values other than 0\n"+
		"and 1 is standardised (mean 0, standard deviation 1) when it is in at least half the rows; a\n"+
		"sparser one with values beyond [-1, 1] is divided by its largest |value|; binary (one-hot)\n"+
		"features are left alone (libsvm input only). --l2 then penalises the weights of\n"+
		"the scaled features (as a scaler before liblinear or scikit-learn does); the saved model is in\n"+
		"the raw features' units, so eval and predict need nothing. `mode`: auto (when the data is\n"+
		"scanned anyway, to infer --dim, --classes or --l2 auto), on (scan for it), or off (the\n"+
		"features as they are). Distributed runs do not scale")
	fs.Int64Var(&r.evalEvery, "eval-every", 0, "evaluate on --test every `N` training examples (0: only at the end)")
	fs.StringVar(&r.report, "report", "", "write a JSON-lines run report to `FILE` (one line per evaluation and a final summary)")
	fs.StringVar(&r.save, "save", "", "save the trained model to `FILE` (read it back with 'gossiptrain eval')")
	fs.DurationVar(&r.progressEvery, "progress-every", 5*time.Second, "log a progress line this often (0 turns it off)")
	fs.StringVar(&r.nonFinite, "nonfinite", "fail", "what a batch whose gradient (or loss) is not finite does: finite values can still overflow\n"+
		"float32 when a batch sums them (3e38 + 3e38). Such a gradient never reaches the model. `policy`:\n"+
		"fail (stop with an error naming the batch's file and lines; a peer of a cluster first leaves\n"+
		"the run, handing its shards over, and the others go on) or skip (leave the batch out, count\n"+
		"it in the log and the report's batches_skipped_nonfinite, and train on)")
	fs.IntVar(&r.threads, "threads", cluster.DefaultThreads(runtime.GOMAXPROCS(0)), "`cores` to train on: each batch's gradient and update are split over this many goroutines while\nthe next batches are read and prepared on others, and the process runs on at most this many CPUs at\na time (GOMAXPROCS). The default is the CPUs this process may use: a cgroup CPU limit rounded\nup (1 under a limit of 0.4 cores, where Go's own default would be 2). Any value trains the same\nmodel, bit for bit, alone or as a peer of a cluster")
}

// registerDist registers the run flags of distributed runs only.
func (r *runFlags) registerDist(fs *flag.FlagSet) {
	fs.DurationVar(&r.stallTimeout, "stall-timeout", 2*time.Minute, "fail (exit status 1) when the run has not moved for this `duration`: no example trained, no\n"+
		"round pushed or applied, no configuration, no shard moved; the error names the peers this one\n"+
		"waits for (a progress line says so every --progress-every meanwhile). Waits on this peer's own\n"+
		"work (a gradient, an evaluation, reading data) do not count. At least 4x --dead-after (a run may wait\n"+
		"that long for crashes to be noticed); 0 waits for ever")
}

// stallTimeout is the trainer's StallTimeout for --stall-timeout st with
// --dead-after dead: at least 4 times dead, since a run waits dead for a
// crash to be noticed, and a crash during a handoff or a leave may cost
// it a few times over (TestStallTimeoutCoversDeadAfter).
func stallTimeout(st, dead time.Duration) time.Duration {
	if st <= 0 {
		return 0
	}
	return max(st, 4*dead)
}

// Epoch defaults: standalone train with --epochs auto runs until the
// training loss stops improving (autoStopTol) for at most autoMaxEpochs
// epochs; a distributed run takes distEpochs (its peers must agree on
// when to stop, which --epochs N gives them for free).
const (
	autoStopTol   = 1e-3
	autoMinEpochs = 3
	autoMaxEpochs = 200
	distEpochs    = 5
	// An MLP's training loss keeps falling by more than 0.1% an epoch long
	// after its test metrics have nearly settled (it starts to memorise:
	// on Fashion-MNIST test accuracy gains 0.05 points an epoch over
	// epochs 14-20), so auto caps it at 20.
	autoMLPEpochs = 20
)

// epochsValue is --epochs: a positive number or auto.
type epochsValue struct{ r *runFlags }

func (v epochsValue) String() string {
	if v.r == nil || v.r.epochsAuto {
		return "auto"
	}
	return strconv.Itoa(v.r.epochs)
}

func (v epochsValue) Set(s string) error {
	if s == "auto" {
		v.r.epochsAuto, v.r.epochs = true, 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return fmt.Errorf("%q is not auto or a number of epochs >= 1", s)
	}
	v.r.epochsAuto, v.r.epochs = false, n
	return nil
}

// trainFlags are all of train's flags.
type trainFlags struct {
	d    dataFlags
	m    modelFlags
	r    runFlags
	p    peerFlags
	dist distFlags
	mf   metricsFlags
}

func trainCmd() *command {
	c, _ := newTrainCommand()
	return c
}

func newTrainCommand() (*command, *trainFlags) {
	c := newCommand("train", "train a model: alone, or with --job as one peer of a cluster", "--train FILES [--test FILE] [flags]")
	tf := &trainFlags{}
	d, m, r := &tf.d, &tf.m, &tf.r
	c.group("Data", d.register)
	c.group("Model", m.register)
	c.group("Run", r.register)
	c.group("Distributed training", func(fs *flag.FlagSet) {
		tf.dist.register(fs)
		r.registerDist(fs)
	})
	tf.p.noShards = true
	tf.p.register(c)
	c.group("Monitoring", tf.mf.register)
	c.group("Logging", func(fs *flag.FlagSet) {
		r.log.register(fs)
		tf.p.registerLog(fs)
	})
	c.help = `
Train a binary logistic regression (--model logreg), a multinomial softmax
model (--model softmax) or a one-hidden-layer MLP (--model mlp, --hidden N)
with minibatch SGD, AdaGrad or FTRL-Proximal, streaming
the training data from disk (files of any size), evaluating on --test, and
writing a JSON-lines report and a model file.

Input formats: libsvm/svmlight text (labels 0/1, -1/+1 or integer classes;
idx:value pairs), Criteo TSV (label, 13 integer and 26 categorical columns,
hashed into --dim features), VW text (Vowpal Wabbit's format, hashed into --dim
as VW hashes; --interactions crosses namespaces as VW's -q and --cubic), and
IDX images (MNIST, Fashion-MNIST). Files ending in .gz or .zst are decompressed
on the fly. - is standard input (cat data | gossiptrain train --train - ...).
Importance weights (VW's, libsvm's label:weight) multiply a row's loss and
gradient. A malformed line stops the run with an error naming the file, line
and token, unless --skip-bad-lines is given.

With --job, train runs as one peer of a cluster (no master): it finds the other
peers of the job (--peer, --mdns, --dht), trains on its own --train data, owns
the model shards the consistent-hash ring gives it, and exchanges gradients and
values with the owners over direct libp2p streams, in --mode sync, ssp or async.
With --gather need (the default) a worker fetches only the rows its next batch
touches, so per-peer traffic stays flat as peers are added. The peers agree on
who is in the run with raft (no master); peers may join mid-run; SIGTERM
(Ctrl-C) hands this peer's shards over and leaves; a crashed peer's shards are
taken over from their replicas (--replicas 2) after --dead-after.`
	c.help += stopHelp // cmd_stop.go
	c.example = `  gossiptrain gen --out data --rows 1000000 --test-rows 100000
  gossiptrain train --train 'data/train*.svm' --test data/test.svm --dim 16777216 \
      --report run.jsonl --save model.gt
  zcat clicks.vw.gz | gossiptrain train --train - --dim 16777216 --interactions ua --save vw.gt
  gossiptrain train --model softmax --classes 10 --dim 784 \
      --train /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz \
      --test /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz --epochs 5
  # one peer of a 4-peer job per VM (the first one logs the address to --peer);
  # job.key from 'gossiptrain keygen --swarm job.key', copied to every VM
  gossiptrain train --job ctr1 --swarm-key job.key --listen /ip4/0.0.0.0/tcp/4001 --min-peers 4 \
      --peer /ip4/10.0.0.5/tcp/4001/p2p/12D3Koo... --identity ~/.gossiptrain/key \
      --train data/part-2.svm --test data/test.svm --dim 16777216 \
      --mode sync --gather need --threads 8 --report run.jsonl`
	c.run = func(c *command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, args[0])
		}
		log, err := r.log.logger()
		if err != nil {
			return err
		}
		r.distributed = tf.distributed(c)
		if _, err := checkDistFlags(tf); err != nil {
			return err
		}
		if err := checkOutputs(tf); err != nil {
			return err
		}
		if r.threads < 1 {
			return usageErr("threads", "want at least 1, got %d", r.threads)
		}
		gcForTraining(0)
		job, err := prepareTraining(c, d, m, r, log)
		if err != nil {
			return err
		}
		defer job.removeSpools()
		gcForTraining(int64(len(job.model.W)) * 4) // its size known now
		if tf.distributed(c) {
			return job.runDistributed(tf) // it handles signals itself: the first one leaves gracefully
		}
		ctx, cancel := signalContext()
		defer cancel()
		_, err = job.runLocal(ctx, &tf.mf)
		return err
	}
	return c, tf
}

// trainJob is a training run whose inputs are checked and whose model exists.
type trainJob struct {
	log        zerolog.Logger
	c          *command
	d          *dataFlags
	r          *runFlags
	trainOpt   data.Options
	testOpt    data.Options
	model      *model.Model
	trainFiles []string
	trainBytes int64 // total size of the training files, for the ETA
	l2Rows     int64 // --l2 auto from this peer's own files: their rows (0: --l2 given, or --part)
	// scale changes the features while training alone (--scale); nil for
	// none. The model's rows are mapped back at the end.
	scale *data.Scaling
	// spools remove the temporary copies of standard input (data.Spool).
	spools []func() error
}

// removeSpools removes the temporary copies of streamed input.
func (j *trainJob) removeSpools() {
	for _, rm := range j.spools {
		if err := rm(); err != nil {
			j.log.Warn().Err(err).Msg("removing the temporary copy of standard input")
		}
	}
	j.spools = nil
}

// spool copies a stream input (standard input, a pipe) that must be read
// more than once to a temporary file, logging it.
func (j *trainJob) spool(name, flagName, why string) error {
	if !data.IsStream(name) {
		return nil
	}
	n, rm, err := data.Spool(name, "")
	if err != nil {
		return fmt.Errorf("--%s: %w", flagName, err)
	}
	j.spools = append(j.spools, rm)
	what := name
	if name == data.Stdin {
		what = "standard input"
	}
	j.log.Info().Str("input", name).Int64("bytes", n).Str("flag", "--"+flagName).
		Msgf("%s is read more than once (%s): copied to a temporary file, removed at the end", what, why)
	return nil
}

// prepareTraining checks the flags, infers what may be inferred from the data
// and builds the model.
func prepareTraining(c *command, d *dataFlags, m *modelFlags, r *runFlags, log zerolog.Logger) (*trainJob, error) {
	if len(d.train) == 0 {
		return nil, usageErr("train", "no training data given (e.g. --train 'data/train*.svm')")
	}
	var kind model.Kind
	if m.kind != "auto" {
		k, err := model.ParseKind(m.kind)
		if err != nil {
			return nil, usageErr("model", "%v (or auto)", err)
		}
		kind = k
	}
	format, err := data.ParseFormat(d.format)
	if err != nil {
		return nil, usageErr("format", "%v", err)
	}
	part, parts, err := parsePart(d.part)
	if err != nil {
		return nil, err
	}
	if r.batch < 1 {
		return nil, usageErr("batch", "must be at least 1, got %d", r.batch)
	}
	if r.epochsAuto {
		r.epochs = autoMaxEpochs
		if r.distributed {
			r.epochs = distEpochs
		}
	}
	if r.epochs < 1 {
		return nil, usageErr("epochs", "must be at least 1, got %d", r.epochs)
	}
	switch r.scale {
	case "auto", "on", "off":
	default:
		return nil, usageErr("scale", "%q: want auto, on or off", r.scale)
	}
	if r.evalEvery < 0 {
		return nil, usageErr("eval-every", "must not be negative")
	}
	if _, err := sgd.ParseNonFinite(r.nonFinite); err != nil {
		return nil, usageErr("nonfinite", "%q: want fail or skip", r.nonFinite)
	}
	if d.maxValue < 0 || math.IsNaN(d.maxValue) || math.IsInf(d.maxValue, 0) {
		return nil, usageErr("max-value", "%v: want 0 (no bound) or a finite bound > 0", d.maxValue)
	}
	oc, err := m.optConfig(c)
	if err != nil {
		return nil, err
	}
	if c.set("classes") && m.classes < 2 {
		return nil, usageErr("classes", "want at least 2 classes, got %d", m.classes)
	}
	if kind != model.MLP && (c.set("hidden") || c.set("init-seed")) {
		return nil, usageErr("hidden", "--hidden and --init-seed are for --model mlp")
	}
	if kind == model.MLP && (m.hidden < 1 || m.hidden > model.MaxHidden) {
		return nil, usageErr("hidden", "want 1..%d hidden units, got %d", model.MaxHidden, m.hidden)
	}
	if kind == model.Logreg && c.set("classes") && m.classes != 2 {
		return nil, usageErr("classes", "logreg is binary (2 classes); use --model softmax for %d classes", m.classes)
	}
	labelBase := 0
	if d.labelBase != "auto" {
		v, err := strconv.Atoi(d.labelBase)
		if err != nil {
			return nil, usageErr("label-base", "%q is not auto or an integer", d.labelBase)
		}
		labelBase = v
	}
	files, size, err := expandDataInputs(d.train, "train")
	if err != nil {
		return nil, err
	}
	if d.test == data.Stdin && slices.Contains(files, data.Stdin) {
		return nil, usageErr("test", "standard input (-) cannot be both --train and --test: give one of them as a file")
	}
	interactions, err := data.ParseInteractions(d.inter)
	if err != nil {
		return nil, usageErr("interactions", "%v", err)
	}
	if len(interactions) > 0 {
		f := format
		if f == data.FormatAuto {
			if f, err = data.DetectFormat(files[0]); err != nil {
				return nil, usageErr("train", "%v", err)
			}
		}
		if f != data.FormatVW && f != data.FormatCriteo {
			return nil, usageErr("interactions", "%s is %v input, which has no namespaces to cross (VW text and Criteo TSV have them)", files[0], f)
		}
	}
	base := data.Options{
		Format:       format,
		ZeroBased:    d.zeroBased,
		Dim:          m.dim,
		SkipBad:      d.skipBad,
		MaxValue:     d.maxValue, // the training data's bound (not the test set's: see below)
		Interactions: interactions,
	}
	job := &trainJob{log: log, c: c, d: d, r: r, trainFiles: files, trainBytes: size}
	ok := false
	defer func() {
		if !ok {
			job.removeSpools()
		}
	}()

	l2Auto := m.l2 == "auto"
	if !l2Auto {
		v, err := strconv.ParseFloat(m.l2, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, usageErr("l2", "%q is not auto or a number >= 0", m.l2)
		}
		oc.L2 = v
	}

	// Infer what the flags leave open from one pass over the data: the
	// model kind, the dimension, the classes and their label base, and the
	// row count behind --l2 auto.
	dim, classes := m.dim, m.classes
	needScan := kind == 0 || dim == 0 || l2Auto ||
		(kind.Multiclass() && (classes == 0 || d.labelBase == "auto")) ||
		(r.scale == "on" && !r.distributed)
	// Standard input can be read once: copy it when it is read more.
	switch {
	case needScan:
		err = job.spool(files[0], "train", "a scan to infer what the flags leave open, then the epochs; "+
			"with --model, --dim and --l2 given, and --epochs 1 or --cache FILE, it is streamed")
	case r.epochs > 1 && d.cache == "":
		err = job.spool(files[0], "train", "one pass per epoch; --cache FILE would read it once")
	}
	if err == nil && d.test != "" {
		err = job.spool(d.test, "test", "once per evaluation")
	}
	if err != nil {
		return nil, err
	}
	var scan *data.ScanResult
	if needScan {
		scanOpt := base
		scanOpt.Labels = d.trainLabels
		start := time.Now()
		log.Info().Strs("files", files).Msg("scanning the training data to infer what the flags leave open")
		sr, err := data.Scan(d.train, scanOpt)
		if err != nil {
			return nil, labelsFlag(err, "train-labels")
		}
		log.Info().Int64("rows", sr.Rows).Int64("nonzeros", sr.NNZ).Str("took", roundDur(time.Since(start)).String()).Msg("scan done")
		if sr.Rows == 0 {
			return nil, usageErr("train", "the training data has no rows")
		}
		if sr.Format == data.FormatLibSVM || sr.Format == data.FormatCache {
			scan = &sr
		}
		if dim == 0 {
			dim = max(sr.Dim, uint64(sr.MaxIndex+1))
			if d.test != "" {
				to := scanOpt
				to.Labels, to.MaxValue = d.testLabels, 0
				tr, err := data.Scan([]string{d.test}, to)
				if err != nil {
					return nil, labelsFlag(err, "test-labels")
				}
				dim = max(dim, tr.Dim, uint64(tr.MaxIndex+1))
			}
			if dim == 0 {
				return nil, usageErr("dim", "cannot infer the dimension: the training data has no features")
			}
			log.Info().Uint64("dim", dim).Msg("--dim inferred from the data (largest feature index + 1)")
		}
		k, lo, ok := sr.Classes()
		if kind == 0 {
			switch {
			case !ok:
				return nil, usageErr("model", "cannot tell the model from the labels (not all integers, or over 1000 distinct); give --model")
			case k == 0 && !c.set("classes"):
				kind = model.Logreg
				log.Info().Msg("--model auto: logreg (the labels are binary)")
			default:
				kind = model.Softmax
				log.Info().Int("labels", len(sr.Labels)).Msg("--model auto: softmax (the labels are classes)")
			}
		}
		warnRareLabels(log, sr, kind)
		if kind.Multiclass() {
			if d.labelBase == "auto" {
				// The smallest training label is class 0, as --help says
				// (so -1/+1 labels are classes 0 and 2 of 3).
				labelBase = min(lo, 0)
				if ok && len(sr.Labels) > 0 {
					labelBase = int(slices.Min(slices.Collect(maps.Keys(sr.Labels))))
				}
			}
			if classes == 0 {
				hi := math.Inf(-1)
				for l := range sr.Labels {
					hi = max(hi, l)
				}
				classes = max(int(hi)-labelBase+1, 2)
				log.Info().Int("classes", classes).Int("label_base", labelBase).Msg("--classes inferred from the training labels (largest label - label base + 1)")
			}
		}
		if l2Auto {
			oc.L2 = 1 / float64(sr.Rows)
			if parts <= 1 {
				// The scan counted this peer's own files; with --part it
				// counted the whole shared input, the job's rows.
				job.l2Rows = sr.Rows
			}
			log.Info().Float64("l2", oc.L2).Int64("rows", sr.Rows).Msg("--l2 auto: 1/rows, the strength of liblinear's C=1")
		}
	}
	if (format == data.FormatCriteo || format == data.FormatVW) && dim == 0 {
		return nil, usageErr("dim", "%v input is hashed into --dim features: give it (e.g. --dim 16777216)", format)
	}
	base.Dim = dim
	if kind.Multiclass() {
		base.Classes = classes
		base.LabelBase = labelBase
	}
	job.trainOpt = base
	job.trainOpt.Part, job.trainOpt.Parts = part, parts
	job.trainOpt.Labels = d.trainLabels
	job.testOpt = base
	// --max-value keeps values that would overflow a gradient out of
	// training; evaluating computes none.
	job.testOpt.Labels, job.testOpt.MaxValue = d.testLabels, 0
	if err := job.trainOpt.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if kind == model.Logreg {
		classes = 2
	}
	shards := m.shards
	if !c.set("shards") {
		// A model smaller than the default shard count (Adult has 127
		// features) gets as many shards as it has rows, rounded down to a
		// power of two.
		for uint64(shards) > dim+1 && shards > 1 {
			shards /= 2
		}
	}
	if kind == model.MLP && r.epochsAuto && !r.distributed {
		r.epochs = autoMLPEpochs
	}
	var mod *model.Model
	if kind == model.MLP {
		if m.hidden < classes {
			return nil, usageErr("hidden", "%d hidden units for %d classes: want at least as many units as classes", m.hidden, classes)
		}
		mod, err = model.NewMLP(dim, classes, m.hidden, shards, oc, m.initSeed)
	} else {
		mod, err = model.New(kind, dim, classes, shards, oc)
	}
	if err != nil {
		return nil, usageErr("shards", "%v", err)
	}
	mod.LabelBase = int64(labelBase)
	// What the model was trained on, for inspect and for eval's and
	// predict's warnings.
	inFormat := format
	if scan != nil {
		inFormat = scan.Format
	} else if inFormat == data.FormatAuto {
		if f, err := data.DetectFormat(files[0]); err == nil {
			inFormat = f
		}
	}
	if inFormat != data.FormatAuto {
		mod.Input = model.Input{Format: inFormat.String(), ZeroBased: d.zeroBased}
	}
	var given []string
	c.flags.Visit(func(f *flag.Flag) { given = append(given, "--"+f.Name+"="+f.Value.String()) })
	mod.Meta = map[string]string{"flags": strings.Join(given, " ")}
	if len(interactions) > 0 {
		mod.Meta[metaInteractions] = strings.Join(interactions, ",")
	}
	job.model = mod
	if r.scale != "off" && !r.distributed && scan != nil {
		if job.scale = data.ScalingFor(*scan, dim); job.scale != nil {
			n, centred := job.scale.Scaled()
			log.Info().Int("features", n).Int("standardised", centred).
				Msg("--scale: training on numeric features brought to unit size (dense ones standardised, sparse ones divided by their largest |value|); the model is saved in the raw features' units")
		}
	}
	log.Info().Str("model", kind.String()).Uint64("dim", dim).Int("classes", classes).
		Str("layout", mod.Layout.String()).Str("optimizer", oc.String()).
		Float64("model_MiB", float64(len(mod.W))*4/(1<<20)).Msg("model ready")
	ok = true
	return job, nil
}

// metaInteractions is the model meta key that records --interactions, so
// eval and predict read rows as train did.
const metaInteractions = "interactions"

// modelInteractions returns the interactions a model was trained with.
func modelInteractions(m *model.Model) ([]string, error) {
	list, err := data.ParseInteractions(m.Meta[metaInteractions])
	if err != nil {
		return nil, fmt.Errorf("the model file's interactions: %w", err)
	}
	return list, nil
}

// expandDataInputs is expandInputs for the data of train, eval and
// predict, where - (data.Stdin) is standard input: the only input, never
// globbed, of unknown size.
func expandDataInputs(patterns []string, flagName string) ([]string, int64, error) {
	if slices.Contains(patterns, data.Stdin) {
		if len(patterns) > 1 {
			return nil, 0, usageErr(flagName, "%q (standard input) must be the only input, but %d were given", data.Stdin, len(patterns))
		}
		return []string{data.Stdin}, 0, nil
	}
	return expandInputs(patterns, flagName)
}

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

// expandInputs resolves patterns to files, naming the flag when one matches
// nothing, and returns the files' total size.
func expandInputs(patterns []string, flagName string) ([]string, int64, error) {
	var files []string
	var size int64
	for _, p := range patterns {
		m, err := filepath.Glob(p)
		if err != nil {
			return nil, 0, usageErr(flagName, "bad pattern %q: %v", p, err)
		}
		if len(m) == 0 {
			if _, err := os.Stat(p); err != nil {
				return nil, 0, usageErr(flagName, "%q: no such file (and no file matches it as a pattern)", p)
			}
			m = []string{p}
		}
		for _, f := range m {
			st, err := os.Stat(f)
			if err != nil {
				return nil, 0, usageErr(flagName, "%v", err)
			}
			if st.IsDir() {
				return nil, 0, usageErr(flagName, "%s is a directory; give files or a pattern such as '%s/*.svm'", f, f)
			}
			size += st.Size()
			files = append(files, f)
		}
	}
	return files, size, nil
}

// openTrain opens the training data for one epoch.
func (j *trainJob) openTrain(epoch int) (data.Source, error) {
	var src data.Source
	var err error
	if j.d.cache != "" {
		src, err = data.OpenCached(j.trainFiles, j.trainOpt, j.d.cache)
	} else {
		src, err = data.Open(j.trainFiles, j.trainOpt)
	}
	if err != nil {
		return nil, err
	}
	return data.Rescaled(src, j.scale), nil
}

// openTest opens the test data, or returns nil when there is none.
func (j *trainJob) openTest() func() (data.Source, error) {
	if j.d.test == "" {
		return nil
	}
	return func() (data.Source, error) {
		src, err := data.Open([]string{j.d.test}, j.testOpt)
		if err != nil {
			return nil, err
		}
		return data.Rescaled(src, j.scale), nil
	}
}

// runLocal trains on this process alone and writes the report and model.
// mf's --metrics-addr serves the same metrics and pprof profiles as a
// peer's (topology "single", mode "local"), so one peer alone can be
// profiled and compared with a cluster's peers.
func (j *trainJob) runLocal(ctx context.Context, mf *metricsFlags) (sgd.Summary, error) {
	log := j.log
	mt, closeMetrics, err := mf.start(log)
	if err != nil {
		return sgd.Summary{}, err
	}
	defer closeMetrics()
	mt.SetInfo(metrics.Info{Topology: "single", Mode: "local", Version: version})
	rep, err := j.openReport("")
	if err != nil {
		return sgd.Summary{}, err
	}
	defer rep.Close()
	sampler := report.NewSampler()
	j.model.OwnAll()

	prog := j.progressHook()
	open := func(epoch int) (data.Source, error) {
		s, err := j.openTrain(epoch)
		if err != nil {
			return nil, err
		}
		s = data.Shared(s) // Train reads on a goroutine of its own; the progress hook asks for Stats
		prog.track(s)
		return s, nil
	}
	var bad int64
	hooks := sgd.Hooks{
		Skipped: skippedLogger(log),
		Progress: func(p sgd.Progress) {
			prog.fn(p)
			mt.Progress(p.Examples, p.Epoch)
		},
		Eval: func(e sgd.EvalPoint) {
			logMetrics(log.Info(), e.Metrics).Str("examples", humanCount(float64(e.Examples))).Msg("evaluation")
			rep.Write(report.Eval{Type: report.TypeEval, Examples: e.Examples, Seconds: e.Seconds, Epoch: e.Epoch, Metrics: reportMetrics(e.Metrics)})
			mt.Eval(metrics.EvalFigures{LogLoss: e.LogLoss, Error: e.Error, AUC: e.AUC, Examples: e.Examples, Seconds: e.Seconds})
		},
	}
	cfg := sgd.DefaultConfig()
	cfg.Batch = j.r.batch
	cfg.Epochs = j.r.epochs
	if j.r.epochsAuto {
		cfg.StopTol, cfg.MinEpochs = autoStopTol, autoMinEpochs
	}
	cfg.EvalEvery = j.r.evalEvery
	cfg.Threads = j.r.threads
	cfg.NonFinite, _ = sgd.ParseNonFinite(j.r.nonFinite)      // checked by prepareTraining
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(j.r.threads)) // at most --threads CPUs at a time while training
	log.Info().Strs("train", j.trainFiles).Int("batch", cfg.Batch).Int("epochs", cfg.Epochs).Int("threads", cfg.Threads).Msg("training")
	sum, err := sgd.Train(ctx, j.model, cfg, open, j.openTest(), hooks)
	if prog.cur != nil {
		bad = prog.cur.Stats().BadLines
	}
	if err != nil {
		return sum, err
	}
	j.model.Examples += sum.Examples
	if j.scale != nil {
		// Back to the raw features' units, so the saved model (and
		// model_hash) needs no scaling to predict.
		j.model.Unscale(j.scale.Scale, j.scale.Shift)
	}
	if j.r.epochsAuto {
		ev := log.Info().Int("epochs", sum.Epochs)
		if len(sum.EpochLoss) > 0 {
			ev = ev.Float64("train_logloss", round4(sum.EpochLoss[len(sum.EpochLoss)-1]))
		}
		if sum.Converged {
			ev.Msg("--epochs auto: the training loss stopped improving")
		} else {
			ev.Msg("--epochs auto: stopped at the most epochs auto runs; the loss was still improving (give --epochs)")
		}
	}
	// The model's figures before the resources: reading every weight
	// faults in the pages training never touched (a 2^29-row model: its
	// whole 2 GiB), and the peak RSS reported is the process's, as a
	// peer's is after it hashed its shards.
	nonzeros, hash := j.model.NonZeros(), j.model.Hash()
	res := sampler.Sample()
	if bad > 0 {
		log.Warn().Int64("bad_lines", bad).Msg("malformed lines were skipped (--skip-bad-lines)")
	}
	warnSkipped(log, sum.SkippedNonFinite)
	s := report.Summary{
		Type: report.TypeSummary, Examples: sum.Examples, Seconds: sum.Seconds,
		ExamplesPerSec: report.Num(sum.ExamplesPerSec), Epochs: sum.Epochs, Steps: sum.Steps,
		Metrics:       reportMetrics(sum.Final),
		ModelNonzeros: nonzeros, ModelHash: fmt.Sprintf("%016x", hash),
		BadLines: bad, BatchesSkippedNonFinite: sum.SkippedNonFinite, Resources: res,
		Peers: 1, Topology: "single", Mode: "local", Batch: j.r.batch, Threads: j.r.threads, Shards: j.model.Layout.Shards, Owned: j.model.Layout.Shards,
	}
	if err := rep.Write(s); err != nil {
		return sum, err
	}
	mt.Summary(metrics.SummaryFigures{Examples: sum.Examples,
		Eval:    metrics.EvalFigures{LogLoss: sum.Final.LogLoss, Error: sum.Final.Error, AUC: sum.Final.AUC},
		HasEval: sum.Evaluated})
	logMetrics(log.Info(), sum.Final).Str("examples", humanCount(float64(sum.Examples))).
		Float64("seconds", round4(sum.Seconds)).Str("examples_per_sec", humanCount(sum.ExamplesPerSec)).
		Int64("model_nonzeros", s.ModelNonzeros).Str("resources", res.String()).Msg("done")
	if j.r.save != "" {
		if err := j.model.SaveFile(j.r.save, model.SaveOptions{}); err != nil {
			return sum, fmt.Errorf("--save: %w", err)
		}
		log.Info().Str("file", j.r.save).Msg("model saved")
	}
	return sum, nil
}

// progress logs progress lines with an ETA from the bytes read so far.
type progress struct {
	j         *trainJob
	cur       data.Source // the epoch being read
	doneBytes int64       // bytes of finished epochs
	last      time.Time
	lastEx    int64 // examples at the previous line
	fn        func(sgd.Progress)
}

// progressHook returns the progress logger of this job. A line after which
// no example was trained says what the peer waits for, and since when,
// instead of an ETA that would only grow (TestProgressLineWaiting).
func (j *trainJob) progressHook() *progress {
	p := &progress{j: j, last: time.Now()}
	p.fn = func(sp sgd.Progress) {
		if j.r.progressEvery <= 0 || time.Since(p.last) < j.r.progressEvery {
			return
		}
		p.last = time.Now()
		idle := sp.Examples == p.lastEx && sp.Waiting != ""
		p.lastEx = sp.Examples
		if idle {
			j.log.Info().Int("epoch", sp.Epoch).Str("examples", humanCount(float64(sp.Examples))).
				Str("waited", roundDur(time.Duration(sp.Idle*float64(time.Second))).String()).Str("for", sp.Waiting).Msg("waiting")
			return
		}
		ev := j.log.Info().Int("epoch", sp.Epoch).Str("examples", humanCount(float64(sp.Examples))).
			Str("examples_per_sec", humanCount(sp.ExamplesPerSec)).Float64("train_logloss", round4(sp.TrainLoss))
		// --epochs auto alone has no known end: no ETA.
		if p.cur != nil && j.trainBytes > 0 && !(j.r.epochsAuto && !j.r.distributed) {
			total := float64(j.trainBytes) * float64(j.r.epochs)
			done := float64(p.doneBytes + p.cur.Stats().Bytes)
			if done > 0 && done < total {
				eta := time.Duration(sp.Seconds * (total - done) / done * float64(time.Second))
				ev = ev.Str("eta", roundDur(eta).String()).Str("done", fmt.Sprintf("%.0f%%", 100*done/total))
			}
		}
		ev.Msg("training")
	}
	return p
}

// skippedLogger logs the first batches skipped as not finite one by one
// (--nonfinite skip), then says the rest are only counted.
func skippedLogger(log zerolog.Logger) func(*sgd.NonFiniteError) {
	n := 0
	return func(e *sgd.NonFiniteError) {
		n++
		switch {
		case n <= 10:
			log.Warn().Str("rows", e.Where()).Str("why", e.What()).Int("skipped", n).
				Msg("skipped a batch whose gradient is not finite (--nonfinite skip): nothing of it reached the model")
		case n == 11:
			log.Warn().Msg("more batches whose gradient is not finite: they are skipped and counted, no longer logged one by one")
		}
	}
}

// warnSkipped logs how many batches were skipped as not finite, if any.
func warnSkipped(log zerolog.Logger, n int64) {
	if n > 0 {
		log.Warn().Int64("batches_skipped_nonfinite", n).
			Msg("batches whose gradient was not finite were skipped (--nonfinite skip): their rows hold values that overflow; --max-value refuses them as bad lines")
	}
}

// track notes the source of a new epoch.
func (p *progress) track(s data.Source) {
	if p.cur != nil {
		p.doneBytes += p.cur.Stats().Bytes
	}
	if s != nil {
		p.cur = s
	}
}

// openReport creates the report file (if asked for) and writes its start line.
func (j *trainJob) openReport(peerID string) (*report.Writer, error) {
	if j.r.report == "" {
		return nil, nil
	}
	w, err := report.Create(j.r.report)
	if err != nil {
		return nil, fmt.Errorf("--report: %w", err)
	}
	w.Write(report.Start{Type: report.TypeStart, Time: time.Now().UTC().Format(time.RFC3339), PeerID: peerID, Version: version, Config: j.c.flagValues(), Effective: effectiveSettings(j.model)})
	return w, nil
}

func reportMetrics(m sgd.Metrics) report.Metrics {
	return report.Metrics{
		TestExamples: m.Examples, TestLogLoss: report.Num(m.LogLoss), TestError: report.Num(m.Error),
		TestAUC: report.Num(m.AUC), TestAccuracy: report.Num(m.Accuracy),
	}
}

func logMetrics(e *zerolog.Event, m sgd.Metrics) *zerolog.Event {
	if m.Examples == 0 {
		return e
	}
	e = e.Float64("test_logloss", round4(m.LogLoss)).Float64("test_accuracy", round4(m.Accuracy))
	if !math.IsNaN(m.AUC) {
		e = e.Float64("test_auc", round4(m.AUC))
	}
	return e
}

func round4(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return f
	}
	return math.Round(f*1e4) / 1e4
}

// trainGCPercent is the garbage collector's GOGC while training a model of
// up to 64 MiB of weights, unless the environment sets GOGC. Go lets
// garbage grow to GOGC% of the live heap before it collects, and the live
// heap of a training process is mostly the model's weights and optimizer
// state (a 2^24-row model: 64 MiB of weights alone), so at Go's default of
// 100 a peer let 60-90 MiB of per-round messages pile up before the
// collector reused any of it. Each of those pages is new memory the first
// time it is written, and new memory is expensive on VMs (13-15 µs per 4
// KiB page on the 2-vCPU VMs this project is measured on, where the host
// backs guest memory on first touch): `gossiptrain bench --cpus 0.4
// --peers 1,4 --topologies ring --modes sync,async` ran 4 capped peers at
// 0.67x and 0.81x of one peer with GOGC=100, 0.95x and 1.02x with 25, 0.98x
// and 1.05x with 10 (one run each, side by side), and a peer's peak RSS
// went from 182 to 106 MiB at 25. The model's arrays hold no pointers, so
// the extra collections cost little. A lone `train` allocates almost
// nothing per step and is not affected either way.
const trainGCPercent = 25

// trainGarbageBytes is the garbage a training process lets pile up before
// it collects, whatever its model's size: 25% of 64 MiB. A percentage of
// the heap alone does not do for large models: the weights are allocated
// whole, and a peer touches only its shards' pages of them (and a lone
// process only the rows its data uses), so with --dim 2^29 (2 GiB of
// weights) GOGC 25 let a peer's garbage reach half a gigabyte, and each of
// 4 peers peaked at 58-82% of the RSS of one process training alone.
const trainGarbageBytes = 16 << 20

// trainGCPercentFor is the GOGC for a model of weightBytes of weights:
// trainGCPercent, lower for models so large that it would allow more than
// trainGarbageBytes of garbage, and at least 1.
func trainGCPercentFor(weightBytes int64) int {
	if weightBytes <= 0 {
		return trainGCPercent
	}
	return int(max(1, min(trainGCPercent, 100*trainGarbageBytes/weightBytes)))
}

// gcForTraining sets the collector for a training process whose model has
// weightBytes of weights (see trainGCPercentFor); an explicit GOGC in the
// environment wins.
func gcForTraining(weightBytes int64) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(trainGCPercentFor(weightBytes))
	}
}
