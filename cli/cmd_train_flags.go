package cli

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/gossiptrain/gossiptrain/cluster"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/job"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// The flags of train, by the groups of its --help: what data, what model,
// how to run, and how a distributed run synchronises and survives restarts.

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
	init      string // --init
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
	fs.StringVar(&m.init, "init", "", "warm start: go on training the model saved in `FILE` (train --save). The file fixes the\nmodel: --model, --dim, --classes, --hidden, --label-base and --interactions default to its\nvalues and must agree with them when given. The run's optimizer flags apply; the file's\noptimizer state (--save-state) is kept when --optimizer is the one that wrote it, else\ndropped (every weight goes on from its value with fresh per-coordinate rates). --scale is\noff. Training alone only")
}

// runFlags control the loop, the outputs and the logs.
type runFlags struct {
	batch         int
	epochs        int  // 0 until resolved when epochsAuto
	epochsAuto    bool // --epochs auto
	holdout       holdoutValue
	scale         string
	distributed   bool // set by train's run before it builds the infer.Spec
	evalEvery     int64
	report        string
	save          string
	saveState     bool
	progressEvery time.Duration
	threads       int
	nonFinite     string
	stallTimeout  time.Duration
	log           logFlags
}

func (r *runFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&r.batch, "batch", 100, "examples per SGD step (minibatch size)")
	r.epochsAuto = true
	fs.Var(epochsValue{r}, "epochs", "passes over the training data: `N`, or auto: train alone until the loss on the rows --holdout\n"+
		"holds out stops improving (2 epochs in a row not better than the best by 0.1%), and keep the\n"+
		"best epoch's model; at most 200 epochs (an mlp at most 20). With --holdout off, until an epoch\n"+
		"improves the training loss by less than 0.1% (at least 3 epochs). On a big data set give a\n"+
		"number (1 is a single streaming pass). Distributed runs (--job): each peer stops on the rows it\n"+
		"holds out of its own part, the run ends when every peer has stopped, and the model kept is the\n"+
		"last one; at most 20 epochs (5 with --holdout off)")
	r.holdout = holdoutValue{n: infer.AutoHoldout}
	fs.Var(&r.holdout, "holdout", "`N` or off: with --epochs auto, every N-th training row (rows N, 2N, ..., by position, as\n"+
		"Vowpal Wabbit's default of 10) is held out, never trained on, and its loss after each epoch\n"+
		"decides when to stop; the held-out rows are kept in memory (about 1/N of the parsed data).\n"+
		"Given with --epochs N, the same early stop within N epochs. off: nothing is held out")
	fs.StringVar(&r.scale, "scale", "auto", "train alone on numeric features brought to unit size: a feature with values other than 0\n"+
		"and 1 is standardised (mean 0, standard deviation 1) when it is in at least half the rows; a\n"+
		"sparser one with values beyond [-1, 1] is divided by its largest |value|; binary (one-hot)\n"+
		"features are left alone (libsvm input only). --l2 then penalises the weights of\n"+
		"the scaled features (as a scaler before liblinear or scikit-learn does); the saved model is in\n"+
		"the raw features' units, so eval and predict need nothing. `mode`: auto (when the data is\n"+
		"scanned anyway, to infer --dim, --classes or --l2 auto), on (scan for it), or off (the\n"+
		"features as they are). Distributed runs do not scale")
	fs.Int64Var(&r.evalEvery, "eval-every", 0, "evaluate on --test every `N` training examples. 0: alone, at the end of every epoch (a\npoint per epoch in the report's curves); a peer of a job, only at the end")
	fs.StringVar(&r.report, "report", "", "write a JSON-lines run report to `FILE` (one line per evaluation and a final summary)")
	fs.StringVar(&r.save, "save", "", "save the trained model to `FILE` (read it back with 'gossiptrain eval'). The file holds\nevery weight or only the rows with a nonzero one (and their indices), whichever is smaller:\nits size follows the features the data used, not --dim")
	fs.BoolVar(&r.saveState, "save-state", false, "--save also writes the optimizer state (adagrad's sums, ftrl's z and n: 1-2x the weights),\nso train --init goes on at the rates the run reached. Training alone only")
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

// holdoutValue is --holdout: a number >= 2 or off (0).
type holdoutValue struct{ n int }

func (v *holdoutValue) String() string {
	if v == nil || v.n == 0 {
		return "off"
	}
	return strconv.Itoa(v.n)
}

func (v *holdoutValue) Set(s string) error {
	if s == "off" {
		v.n = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 2 {
		return fmt.Errorf("%q is not off or a number >= 2 (every N-th row held out)", s)
	}
	v.n = n
	return nil
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

// distFlags say how a distributed run synchronises, what travels, and how
// it survives restarts.
type distFlags struct {
	mode            string
	staleness       int
	gather          string
	values          string
	reportRounds    int
	checkpointDir   string
	checkpointEvery time.Duration
	resume          bool
	resumeOrStart   bool // --resume=auto
	waitTimeout     time.Duration
	maxRowGrad      string
	combine         string
	optimizerState  string
	localSteps      string
}

func (f *distFlags) register(fs *flag.FlagSet) {
	def := train.DefaultConfig()
	fs.StringVar(&f.mode, "mode", "sync", "how rounds synchronise: sync (a barrier per round: every peer's gradients are in before\nanyone moves on; bit-identical on every peer), ssp (a worker may run --staleness rounds ahead\nof the slowest), or async (workers never wait for each other; owners apply on arrival)")
	fs.IntVar(&f.staleness, "staleness", def.Staleness, "ssp: `rounds` a worker may run ahead of the slowest worker's applied contributions")
	fs.StringVar(&f.gather, "gather", def.Gather.String(), "where a worker gets the values it computes with: need (it asks the owners for exactly the\nrows its next batch touches, piggybacked on its gradient; traffic and work per example stay\nflat as peers are added, and a peer holds only its shards and a batch's rows) or full (every\npeer keeps a read copy of the whole model and owners send every changed row to everyone:\nfewer bytes with 2-3 peers and small models, more with many)")
	fs.StringVar(&f.values, "values", "f32", "how gradient rows travel: f32 (lossless, entropy-coded: fewest bytes), raw (lossless, byte-aligned:\n~26% more bytes, a fifth of the CPU to encode and half to decode; parameters and shard state go raw\ntoo), f16 or i8 (lossy: every value rounded, and the rounding error is not carried over;\nparameters stay f32)")
	fs.IntVar(&f.reportRounds, "report-rounds", 1, "write a round line to --report every `N` rounds")
	fs.StringVar(&f.checkpointDir, "checkpoint-dir", "", "where this peer writes its part of each checkpoint: `DIR`/<peer ID>/round-<R>.ckpt\n(the shards it holds, with optimizer state, and its data position; the newest 2 are kept).\nAlone (no --job): DIR/alone.ckpt, the whole model with its optimizer state and data position,\nwritten every --checkpoint-every and when interrupted")
	fs.DurationVar(&f.checkpointEvery, "checkpoint-every", 0, "checkpoint the whole job this often (0: never): the raft leader schedules a round R and\nevery peer writes its shards as of the end of round R-1 (sync), or as of every worker's cut\n(ssp, async: the workers pause for a round trip while the cut is taken). Alone: write\nDIR/alone.ckpt this often (0: only when interrupted), atomically")
	fs.Var(resumeFlag{&f.resume, &f.resumeOrStart}, "resume", "restart the job from its newest checkpoint that every peer of it has whole: start\nevery peer again with --resume (same --identity, data and flags); the run continues at\nround R (sync: exactly as if it had not stopped; ssp/async: every example trained once).\nEach file is read through first: a damaged or cut-short one is passed over (logged) for\nthe round before. With no checkpoint on any peer --resume fails; --resume=auto starts a\nnew run from round 0 then. A peer that finds the run under way joins it. Alone (no --job):\ncontinue from DIR/alone.ckpt at its epoch and row, with the same data and flags")
	registerWaitFlag(fs, &f.waitTimeout)
	fs.StringVar(&f.maxRowGrad, "max-row-grad", "auto", "owners drop a pushed gradient row whose L2 norm is over this `bound` times its push's examples\n(a worker's bug or an overflow must not wreck the shared model): auto is 10 for logreg and\nsoftmax (honest rows of unit-scaled features stay under 1) and 1000 for the mlp; off turns\nit off. Raise it for features of large raw values (distributed runs do not --scale): owners\nlog every row they drop. Every peer of the job uses the same value")
	fs.StringVar(&f.localSteps, "local-steps", "auto", "`H` batches a worker trains on its own copy of the rows they touch before it exchanges: a\nround is then a window of H batches, and each row's change travels once a window instead of a\ngradient every batch (fewer, larger messages: less CPU per example on the message path,\nstaler values). 1 exchanges every batch; auto is 4 in sync mode and 8 in ssp and async\n(measured: docs/scaling.md), and 1 with --gather full; cluster, bench and launch pass a linear\nmodel's peers 2 beyond 5 in sync and 1 beyond 4 in ssp and async, which windows serve worse. Every peer of the job uses the same")
	fs.StringVar(&f.combine, "combine", "auto", "how owners combine a round's contributions: sum (gradients: the mean over every example, as\none worker would; windows: every worker's changes added, each window trained as if the others'\nsquared gradients counted), capped (windows: as sum, but a row moves at most 1.8 times the\nmean change of the workers that touched it, so rows they all move do not overshoot), mean\n(windows: per row, the mean of the changes of the workers that touched it), or trimmed\n(gradients, sync: per coordinate, the trimmed mean of the workers that touched a row: one\nfaulty worker in four cannot move it beyond the others' range; costs some quality). auto is,\nin sync mode, sum for windows of up to 4 batches and capped for larger ones and the mlp's;\nmean for windows in ssp and async; sum without windows (measured: docs/scaling.md)")
	fs.StringVar(&f.optimizerState, "optimizer-state", "auto", "where windows of local steps keep adagrad's per-weight sums: owners (a window fetches each\nrow with its sums and pushes their change: the whole job's sums, kept in checkpoints, taken\nover by a peer that joins) or workers (each worker keeps the sums of the rows it trains;\nwindows carry weights only, half the values, and a peer that joins or restarts starts its\nsums from zero, as does a run resumed from checkpoints). auto is workers for the mlp, whose\nevery example touches every hidden row, unless --checkpoint-dir is given, and owners otherwise\n(measured: docs/scaling.md). Every peer of the job uses the same")
}

// distributed reports whether train runs as a peer of a cluster.
func (tf *trainFlags) distributed(c *command) bool {
	return c.set("job") || len(tf.p.peers) > 0 || tf.p.peersFile != "" || tf.p.mdns || tf.p.dht || tf.p.minPeers > 1
}

// resumeFlag is --resume: a bool flag (--resume, --resume=false) that
// also takes auto (--resume=auto: start from round 0 when no peer has a
// checkpoint, TestTrainResumeWithoutCheckpoints).
type resumeFlag struct{ on, orStart *bool }

func (r resumeFlag) IsBoolFlag() bool { return true }

func (r resumeFlag) String() string {
	switch {
	case r.on == nil || !*r.on:
		return "false"
	case *r.orStart:
		return "auto"
	}
	return "true"
}

func (r resumeFlag) Set(s string) error {
	if s == "auto" {
		*r.on, *r.orStart = true, true
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want --resume, --resume=auto or --resume=false")
	}
	*r.on, *r.orStart = b, false
	return nil
}

// registerWaitFlag adds --wait-timeout.
func registerWaitFlag(fs *flag.FlagSet, d *time.Duration) {
	fs.DurationVar(d, "wait-timeout", job.DefaultWaitTimeout, "give up if the cluster has not formed (--min-peers members, agreed) within this `time`;\n0 waits for ever. Meanwhile the peer logs what it found every --progress-every: dial\nerrors per --peer, peers of other jobs, refused peers, the members it has. A peer of the\njob it refused at connect (different settings) leaves it 10s more to form without that peer")
}
