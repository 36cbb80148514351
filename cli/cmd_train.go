package cli

import (
	"flag"
	"fmt"

	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/job"
	"github.com/gossiptrain/gossiptrain/peerlog"
	"github.com/gossiptrain/gossiptrain/sgd"
)

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
taken over from their replicas (--replicas 2) after --dead-after.

Stopping a run alone: the first SIGINT or SIGTERM (Ctrl-C) trains on the
batches already read, then saves --save marked partial ('gossiptrain inspect'
shows where it stopped: epoch and rows), writes the report's summary
("partial": true) and exits with status 130; a second signal exits at once,
saving nothing. With --checkpoint-dir DIR a run alone writes DIR/alone.ckpt
(weights, optimizer state and its place in the data) every
--checkpoint-every, and at the interrupt; --resume continues from it,
skipping the rows done, and trains the model an uninterrupted run would,
bit for bit. --test is read before training: an empty or broken test set
fails at once, and a test set that fails after training still leaves the
trained model saved.`
	c.help += stopHelp
	c.example = `  gossiptrain gen --out data --rows 1000000 --test-rows 100000
  gossiptrain train --train 'data/train*.svm' --test data/test.svm --dim 16777216 \
      --report run.jsonl --save model.gt
  zcat clicks.vw.gz | gossiptrain train --train - --dim 16777216 --interactions ua --save vw.gt
  # go on training a saved model on new data (--save-state kept its optimizer's rates)
  gossiptrain train --train data/week2.svm --init model.gt --save model2.gt
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
	defer plan.RemoveSpools()
	if err := checkTestData(plan); err != nil {
		return err
	}
	job.GCForTraining(int64(len(plan.Model.W)) * 4) // its size known now
	nonFinite, _ := sgd.ParseNonFinite(r.nonFinite) // checked by spec
	cfg := job.Config{Plan: plan, Batch: r.batch, EvalEvery: r.evalEvery, Threads: r.threads, NonFinite: nonFinite,
		ProgressEvery: r.progressEvery, Report: r.report, Save: r.save, SaveState: r.saveState, Flags: c.flagValues(), Version: Version,
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
	cfg.CheckpointDir, cfg.CheckpointEvery = dist.CheckpointDir, dist.CheckpointEvery
	cfg.Resume, cfg.ResumeOrStart = dist.Resume, dist.ResumeOrStart
	// The first signal saves what was trained, the second exits at once,
	// leaving no temporary file behind.
	ctx, stop := job.AloneSignals(log, func() {
		plan.RemoveSpools()
		ck := ""
		if cfg.CheckpointDir != "" {
			ck = job.AloneCheckpointPath(cfg.CheckpointDir)
		}
		job.RemoveSaveTemps(cfg.Save, ck)
	})
	defer stop()
	_, err = job.RunAlone(ctx, cfg)
	return err
}
