package cli

import (
	"errors"
	"flag"
	"strconv"
	"time"

	"github.com/gossiptrain/gossiptrain/job"
	"github.com/gossiptrain/gossiptrain/node/train"
)

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
	localSteps      string
}

func (f *distFlags) register(fs *flag.FlagSet) {
	def := train.DefaultConfig()
	fs.StringVar(&f.mode, "mode", "sync", "how rounds synchronise: sync (a barrier per round: every peer's gradients are in before\nanyone moves on; bit-identical on every peer), ssp (a worker may run --staleness rounds ahead\nof the slowest), or async (workers never wait for each other; owners apply on arrival)")
	fs.IntVar(&f.staleness, "staleness", def.Staleness, "ssp: `rounds` a worker may run ahead of the slowest worker's applied contributions")
	fs.StringVar(&f.gather, "gather", def.Gather.String(), "where a worker gets the values it computes with: need (it asks the owners for exactly the\nrows its next batch touches, piggybacked on its gradient; traffic and work per example stay\nflat as peers are added, and a peer holds only its shards and a batch's rows) or full (every\npeer keeps a read copy of the whole model and owners send every changed row to everyone:\nfewer bytes with 2-3 peers and small models, more with many)")
	fs.StringVar(&f.values, "values", "f32", "how gradient rows travel: f32 (lossless, entropy-coded: fewest bytes), raw (lossless, byte-aligned:\n~26% more bytes, a fifth of the CPU to encode and half to decode; parameters and shard state go raw\ntoo), f16 or i8 (lossy: every value rounded, and the rounding error is not carried over;\nparameters stay f32)")
	fs.IntVar(&f.reportRounds, "report-rounds", 1, "write a round line to --report every `N` rounds")
	fs.StringVar(&f.checkpointDir, "checkpoint-dir", "", "where this peer writes its part of each checkpoint: `DIR`/<peer ID>/round-<R>.ckpt\n(the shards it holds, with optimizer state, and its data position; the newest 2 are kept)")
	fs.DurationVar(&f.checkpointEvery, "checkpoint-every", 0, "checkpoint the whole job this often (0: never): the raft leader schedules a round R and\nevery peer writes its shards as of the end of round R-1 (sync), or as of every worker's cut\n(ssp, async: the workers pause for a round trip while the cut is taken)")
	fs.Var(resumeFlag{&f.resume, &f.resumeOrStart}, "resume", "restart the job from its newest checkpoint that every peer of it has whole: start\nevery peer again with --resume (same --identity, data and flags); the run continues at\nround R (sync: exactly as if it had not stopped; ssp/async: every example trained once).\nEach file is read through first: a damaged or cut-short one is passed over (logged) for\nthe round before. With no checkpoint on any peer --resume fails; --resume=auto starts a\nnew run from round 0 then. A peer that finds the run under way joins it")
	registerWaitFlag(fs, &f.waitTimeout)
	fs.StringVar(&f.maxRowGrad, "max-row-grad", "auto", "owners drop a pushed gradient row whose L2 norm is over this `bound` times its push's examples\n(a worker's bug or an overflow must not wreck the shared model): auto is 10 for logreg and\nsoftmax (honest rows of unit-scaled features stay under 1) and 1000 for the mlp; off turns\nit off. Raise it for features of large raw values (distributed runs do not --scale): owners\nlog every row they drop. Every peer of the job uses the same value")
	fs.StringVar(&f.localSteps, "local-steps", "auto", "`H` batches a worker trains on its own copy of the rows they touch before it exchanges: a\nround is then a window of H batches, and each row's change travels once a window instead of a\ngradient every batch (fewer, larger messages: less CPU per example on the message path,\nstaler values). 1 exchanges every batch; auto is 4 in sync mode and 8 in ssp and async\n(measured: docs/scaling.md), and 1 with --gather full. Every peer of the job uses the same")
	fs.StringVar(&f.combine, "combine", "auto", "how owners combine a round's contributions: sum (gradients: the mean over every example, as\none worker would; windows: every worker's changes added, each window trained as if the others'\nsquared gradients counted), mean (windows: per row, the mean of the changes of the workers\nthat touched it), or trimmed (gradients, sync: per coordinate, the trimmed mean of the workers\nthat touched a row: one faulty worker in four cannot move it beyond the others' range; costs\nsome quality). auto is mean for windows in ssp and async and for the mlp, sum otherwise")
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
	fs.DurationVar(d, "wait-timeout", job.DefaultWaitTimeout, "give up if the cluster has not formed (--min-peers members, agreed) within this `time`;\n0 waits for ever. Meanwhile the peer logs what it found every --progress-every: dial\nerrors per --peer, peers of other jobs, refused peers, the members it has")
}
