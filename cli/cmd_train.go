package cli

import (
	"flag"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gossiptrain/gossiptrain/cluster"
	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/job"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/peerlog"
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
}

func (d *dataFlags) register(fs *flag.FlagSet) {
	fs.Var(&d.train, "train", "training data: a `FILE` or a quoted glob ('data/train*.svm'); repeat the flag or separate\nwith commas for several; .gz and .zst are decompressed on the fly")
	fs.StringVar(&d.test, "test", "", "test data `FILE` for evaluation (same format as --train)")
	fs.StringVar(&d.format, "format", "auto", "input `format`: libsvm (svmlight), criteo (TSV, hashed into --dim), idx (MNIST images),\nor auto (from the file name)")
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
	metricsAddr string // --metrics-addr
	d           dataFlags
	m           modelFlags
	r           runFlags
	p           peerFlags
	dist        distFlags
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
	c.group("Monitoring", func(fs *flag.FlagSet) {
		fs.StringVar(&tf.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on http://`HOST:PORT`/metrics and Go's pprof profiles on\n/debug/pprof/ (go tool pprof http://HOST:PORT/debug/pprof/profile); port 0 picks a free\nport (logged). Empty: off. pprof shows memory and the command line: keep it on 127.0.0.1\nor a private address")
	})
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
hashed into --dim features), and IDX images (MNIST, Fashion-MNIST). Files ending
in .gz or .zst are decompressed on the fly. A malformed line stops the run with
an error naming the file, line and token, unless --skip-bad-lines is given.

With --job, train runs as one peer of a cluster (no master): it finds the other
peers of the job (--peer, --mdns, --dht), trains on its own --train data, owns
the model shards the consistent-hash ring gives it, and exchanges gradients and
values with the owners over direct libp2p streams, in --mode sync, ssp or async.
With --gather need (the default) a worker fetches only the rows its next batch
touches, so per-peer traffic stays flat as peers are added. The peers agree on
who is in the run with raft (no master); peers may join mid-run; SIGTERM
(Ctrl-C) hands this peer's shards over and leaves; a crashed peer's shards are
taken over from their replicas (--replicas 2) after --dead-after.`
	c.help += stopHelp
	c.example = `  gossiptrain gen --out data --rows 1000000 --test-rows 100000
  gossiptrain train --train 'data/train*.svm' --test data/test.svm --dim 16777216 \
      --report run.jsonl --save model.gt
  gossiptrain train --model softmax --classes 10 --dim 784 \
      --train /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz \
      --test /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz --epochs 5
  # one peer of a 4-peer job per VM (the first one logs the address to --peer);
  # job.key from 'gossiptrain keygen --swarm job.key', copied to every VM
  gossiptrain train --job ctr1 --swarm-key job.key --listen /ip4/0.0.0.0/tcp/4001 --min-peers 4 \
      --peer /ip4/10.0.0.5/tcp/4001/p2p/12D3Koo... --identity ~/.gossiptrain/key \
      --train data/part-2.svm --test data/test.svm --dim 16777216 \
      --mode sync --gather need --threads 8 --report run.jsonl`
	c.run = tf.run
	return c, tf
}

// stopHelp is the paragraph of train's help on stopping a peer of a job
// (package job, stop.go).
const stopHelp = `

Stopping a peer of a job: SIGINT or SIGTERM (Ctrl-C) leaves gracefully (its
shards are handed over; the others train on) and exits 0; a second signal
stops at once. ` + peerlog.StopSignalName + ` stops at once from the start: the whole job is
stopping ('gossiptrain cluster' sends it to every peer on Ctrl-C), and
handing shards to peers that stop too would only wait for them. A peer that
stops before the end writes its report with "partial": true, null test
metrics and the round it stopped at (stopped_at_round), saves a --save model
marked partial, and exits with status 130 when it was stopped at once.`

// run checks train's flags, prepares the run (infer.Prepare) and trains,
// alone or as a peer of a job (package job).
func (tf *trainFlags) run(c *command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, args[0])
	}
	r := &tf.r
	log, err := r.log.logger()
	if err != nil {
		return err
	}
	r.distributed = tf.distributed(c)
	dist, err := checkDistFlags(tf)
	if err != nil {
		return err
	}
	if err := checkOutputs(tf); err != nil {
		return err
	}
	if r.threads < 1 {
		return usageErr("threads", "want at least 1, got %d", r.threads)
	}
	job.GCForTraining(0)
	spec, err := tf.spec(c)
	if err != nil {
		return err
	}
	plan, err := infer.Prepare(spec, log)
	if err != nil {
		return err
	}
	job.GCForTraining(int64(len(plan.Model.W)) * 4) // its size known now
	nonFinite, _ := sgd.ParseNonFinite(r.nonFinite) // checked by spec
	cfg := job.Config{Plan: plan, Batch: r.batch, EvalEvery: r.evalEvery, Threads: r.threads, NonFinite: nonFinite,
		ProgressEvery: r.progressEvery, Report: r.report, Save: r.save, Flags: c.flagValues(), Version: Version,
		MetricsAddr: tf.metricsAddr, Log: log}
	if r.distributed {
		if tf.p.job == "" {
			return usageErr("job", "required for a distributed run: peers join only peers of the same job")
		}
		ncfg, err := tf.p.config()
		if err != nil {
			return err
		}
		return flagError(job.RunPeer(cfg, ncfg, dist)) // it handles signals itself: the first one leaves gracefully
	}
	ctx, cancel := signalContext()
	defer cancel()
	_, err = job.RunAlone(ctx, cfg)
	return err
}

// spec checks the data, model and run flags one by one, in the order a
// user reads them, and returns what they say for infer.Prepare.
func (tf *trainFlags) spec(c *command) (infer.Spec, error) {
	d, m, r := &tf.d, &tf.m, &tf.r
	s := infer.Spec{Train: d.train, Test: d.test, TrainLabels: d.trainLabels, TestLabels: d.testLabels,
		ZeroBased: d.zeroBased, SkipBad: d.skipBad, MaxValue: d.maxValue, Cache: d.cache, LabelBaseAuto: d.labelBase == "auto",
		Classes: m.classes, Dim: m.dim, Hidden: m.hidden, InitSeed: m.initSeed, Shards: m.shards, ShardsGiven: c.set("shards"),
		Scale: infer.Scale(r.scale), Distributed: r.distributed, Given: givenFlags(c)}
	if len(d.train) == 0 {
		return s, usageErr("train", "no training data given (e.g. --train 'data/train*.svm')")
	}
	var err error
	if m.kind != "auto" {
		if s.Kind, err = model.ParseKind(m.kind); err != nil {
			return s, usageErr("model", "%v (or auto)", err)
		}
	}
	if s.Format, err = data.ParseFormat(d.format); err != nil {
		return s, usageErr("format", "%v", err)
	}
	if s.Part, s.Parts, err = parsePart(d.part); err != nil {
		return s, err
	}
	if r.batch < 1 {
		return s, usageErr("batch", "must be at least 1, got %d", r.batch)
	}
	if !r.epochsAuto {
		s.Epochs = r.epochs
		if r.epochs < 1 {
			return s, usageErr("epochs", "must be at least 1, got %d", r.epochs)
		}
	}
	switch s.Scale {
	case infer.ScaleAuto, infer.ScaleOn, infer.ScaleOff:
	default:
		return s, usageErr("scale", "%q: want auto, on or off", r.scale)
	}
	if r.evalEvery < 0 {
		return s, usageErr("eval-every", "must not be negative")
	}
	if _, err := sgd.ParseNonFinite(r.nonFinite); err != nil {
		return s, usageErr("nonfinite", "%q: want fail or skip", r.nonFinite)
	}
	if d.maxValue < 0 || math.IsNaN(d.maxValue) || math.IsInf(d.maxValue, 0) {
		return s, usageErr("max-value", "%v: want 0 (no bound) or a finite bound > 0", d.maxValue)
	}
	if s.Opt, err = m.optConfig(c); err != nil {
		return s, err
	}
	if err := m.check(c, s.Kind); err != nil {
		return s, err
	}
	if !s.LabelBaseAuto {
		if s.LabelBase, err = strconv.Atoi(d.labelBase); err != nil {
			return s, usageErr("label-base", "%q is not auto or an integer", d.labelBase)
		}
	}
	if s.L2Auto = m.l2 == "auto"; !s.L2Auto {
		v, err := strconv.ParseFloat(m.l2, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return s, usageErr("l2", "%q is not auto or a number >= 0", m.l2)
		}
		s.Opt.L2 = v
	}
	return s, nil
}

// check checks the model flags that depend on the kind of model.
func (m *modelFlags) check(c *command, kind model.Kind) error {
	if c.set("classes") && m.classes < 2 {
		return usageErr("classes", "want at least 2 classes, got %d", m.classes)
	}
	if kind != model.MLP && (c.set("hidden") || c.set("init-seed")) {
		return usageErr("hidden", "--hidden and --init-seed are for --model mlp")
	}
	if kind == model.MLP && (m.hidden < 1 || m.hidden > model.MaxHidden) {
		return usageErr("hidden", "want 1..%d hidden units, got %d", model.MaxHidden, m.hidden)
	}
	if kind == model.Logreg && c.set("classes") && m.classes != 2 {
		return usageErr("classes", "logreg is binary (2 classes); use --model softmax for %d classes", m.classes)
	}
	return nil
}

// givenFlags is the flags given on c's command line, as --name=value
// separated by spaces (saved with the model: inspect shows them).
func givenFlags(c *command) string {
	var given []string
	c.flags.Visit(func(f *flag.Flag) { given = append(given, "--"+f.Name+"="+f.Value.String()) })
	return strings.Join(given, " ")
}
