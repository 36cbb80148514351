package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/p2p"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node"
	"github.com/gossiptrain/gossiptrain/report"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// distFlags say how a distributed run synchronises and what travels.
type distFlags struct {
	mode         string
	staleness    int
	window       int
	flush        time.Duration
	stallAfter   time.Duration
	compress     string
	values       string
	reportRounds int
}

func (f *distFlags) register(fs *flag.FlagSet) {
	def := sgd.DefaultDistConfig()
	fs.StringVar(&f.mode, "mode", "sync", "how rounds synchronise: sync (a barrier per round: every peer's gradients are in before\nanyone moves on; bit-identical on every peer), ssp (a worker may run --staleness rounds ahead\nof the slowest), or async (workers never wait for each other; owners apply on arrival)")
	fs.IntVar(&f.staleness, "staleness", def.Staleness, "ssp: `rounds` a worker may run ahead of the slowest worker's applied contributions")
	fs.IntVar(&f.window, "window", def.Window, "ssp and async flow control: at most this many `rounds` in flight that an owner has not yet\nacknowledged (gossipsub drops silently when its queues overflow)")
	fs.DurationVar(&f.flush, "flush", def.Flush, "ssp and async: how often an owner publishes the values it changed")
	fs.DurationVar(&f.stallAfter, "stall-after", def.StallAfter, "longest wait at a barrier before asking late peers to resend (sooner once typical waits are known)")
	fs.StringVar(&f.compress, "compress", "none", "compressor for gradient and parameter messages: none, zstd or s2 (the encoding already packs\nindices and values; a compressor is used only when it makes a message smaller)")
	fs.StringVar(&f.values, "values", "f32", "gradient value format: f32, f16 or i8 (lossy formats keep the rounding error on the sender\nand add it to the next gradient; parameters always travel as f32)")
	fs.IntVar(&f.reportRounds, "report-rounds", 1, "write a round line to --report every `N` rounds")
}

// distributed reports whether train runs as a peer of a cluster.
func (tf *trainFlags) distributed(c *command) bool {
	return c.set("job") || len(tf.p.peers) > 0 || tf.p.peersFile != "" || tf.p.mdns || tf.p.dht || tf.p.minPeers > 1
}

// runDistributed trains as one peer of a cluster: it joins, waits for
// --min-peers and an agreed member set, and runs the distributed loop.
func (j *trainJob) runDistributed(ctx context.Context, tf *trainFlags) error {
	log := j.log
	if tf.p.job == "" {
		return usageErr("job", "required for a distributed run: peers join only peers of the same job")
	}
	mode, err := sgd.ParseMode(tf.dist.mode)
	if err != nil {
		return usageErr("mode", "%q: want sync, ssp or async", tf.dist.mode)
	}
	values, err := wire.ParseValues(tf.dist.values)
	if err != nil {
		return usageErr("values", "%v", err)
	}
	compress, err := wire.ParseCompress(tf.dist.compress)
	if err != nil {
		return usageErr("compress", "%v", err)
	}
	if tf.dist.reportRounds < 1 {
		return usageErr("report-rounds", "want at least 1")
	}
	ncfg, err := tf.p.config()
	if err != nil {
		return err
	}
	ncfg.Shards = j.model.Layout.Shards
	n, err := node.New(ncfg, log)
	if err != nil {
		return flagError(err)
	}
	defer n.Close()
	self := n.Self().String()
	log.Info().Str("peer_id", self).Strs("addrs", n.Addrs()).Msg("peer started")

	// Wait for the cluster: --min-peers members and an agreed view.
	log.Info().Int("min_peers", ncfg.MinPeers).Msg("waiting for the cluster to form")
	if err := n.WaitMinPeers(ctx); err != nil {
		return fmt.Errorf("waiting for %d peers: %w", ncfg.MinPeers, err)
	}
	st, err := waitAgreed(ctx, n, ncfg.MinPeers)
	if err != nil {
		return err
	}
	workers := st.View.Members
	log.Info().Uint64("epoch", st.View.Epoch).Int("members", len(workers)).Int("owned_shards", len(st.Ring.Owned(self))).
		Str("topology", string(ncfg.Topology)).Msg("cluster agreed: training")

	// Membership changes mid-run (joins, leaves, crashes) are issue 5's
	// handoff protocol; until then a change ends the run with a clear error
	// rather than a barrier that waits forever.
	evs, cancelEvs := n.Subscribe()
	defer cancelEvs()
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	go func() {
		for ev := range evs {
			for _, id := range append(append(ev.Died, ev.Left...), ev.Restarted...) {
				if slices.Contains(workers, id) {
					cancelRun(fmt.Errorf("peer %s left or died mid-run: training through membership changes is not implemented yet", id))
					return
				}
			}
		}
	}()

	tr, err := p2p.New(n.Host(), n.PubSub(), p2pConfig(n))
	if err != nil {
		return err
	}
	defer tr.Close()

	dcfg := sgd.DefaultDistConfig()
	dcfg.Batch, dcfg.Epochs, dcfg.EvalEvery = j.r.batch, j.r.epochs, j.r.evalEvery
	dcfg.Mode, dcfg.Staleness, dcfg.Window, dcfg.Flush, dcfg.StallAfter = mode, tf.dist.staleness, tf.dist.window, tf.dist.flush, tf.dist.stallAfter
	dcfg.Self, dcfg.Workers, dcfg.Ring, dcfg.Epoch = self, workers, st.Ring, st.View.Epoch
	if err := dcfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}

	rep, err := j.openReport(self)
	if err != nil {
		return err
	}
	defer rep.Close()
	sampler := report.NewSampler()
	var x *gossip.Exchange
	var hooks sgd.DistHooks
	prog := j.progressHook()
	hooks.Progress = prog.fn
	hooks.Eval = func(e sgd.EvalPoint) {
		logMetrics(log.Info(), e.Metrics).Str("examples", humanCount(float64(e.Examples))).Msg("evaluation")
		rep.Write(report.Eval{Type: report.TypeEval, PeerID: self, Examples: e.Examples, Seconds: e.Seconds, Epoch: e.Epoch, Metrics: reportMetrics(e.Metrics)})
	}
	hooks.Round = func(p sgd.RoundPoint) {
		if p.Clock%int64(tf.dist.reportRounds) != 0 || rep == nil {
			return
		}
		in, out := n.Bandwidth()
		rep.Write(report.Round{Type: report.TypeRound, PeerID: self, Clock: p.Clock, Examples: p.Examples, Seconds: p.Seconds,
			BytesSent: out, BytesRecv: in, WaitSeconds: p.WaitSeconds, Workers: p.Applied,
			Epoch: st.View.Epoch, Resources: sampler.Sample()})
	}
	d, err := sgd.NewDist(j.model, dcfg, hooks)
	if err != nil {
		return err
	}
	gcfg := gossip.DefaultConfig()
	gcfg.Job, gcfg.Width = ncfg.Job, j.model.Layout.Width
	gcfg.Wire.Values, gcfg.Wire.Compress = values, compress
	gcfg.Wire.Limits.Features = j.model.Layout.Features
	gcfg.Wire.Limits.MaxMessage = min(gcfg.Wire.Limits.MaxMessage, n.MaxPayload())
	gcfg.Log = log
	epoch := st.View.Epoch
	gcfg.CheckEpoch = func(_ wire.Kind, _ string, e uint64) error {
		if e != epoch {
			return fmt.Errorf("ring epoch %d, this run trains at epoch %d", e, epoch)
		}
		return nil
	}
	x, err = gossip.New(tr, gcfg, d.Handlers())
	if err != nil {
		return err
	}
	defer x.Close()
	// Every owner must be subscribed to its gradient topic before the first
	// round, or the first gradients reach nobody.
	for _, o := range d.Owners() {
		if err := x.WaitOwner(runCtx, o); err != nil {
			return fmt.Errorf("waiting for owner %s to subscribe: %w", o, context.Cause(runCtx))
		}
	}
	if err := x.WaitPeers(runCtx, workers); err != nil {
		return fmt.Errorf("waiting for the peers to subscribe to parameters: %w", context.Cause(runCtx))
	}

	var bad int64
	open := func(epoch int) (data.Source, error) {
		s, err := j.openTrain(epoch)
		prog.track(s)
		return s, err
	}
	sum, err := d.Run(runCtx, x, open, j.openTest())
	if cur := prog.cur; cur != nil {
		bad = cur.Stats().BadLines
	}
	if err != nil {
		if cause := context.Cause(runCtx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return err
	}
	xs := x.Stats()
	pc := n.PubSubCounters()
	bwIn, bwOut := n.Bandwidth()
	res := sampler.Sample()
	s := report.Summary{
		Type: report.TypeSummary, PeerID: self, Examples: sum.Examples, Seconds: sum.Seconds,
		ExamplesPerSec: report.Num(sum.ExamplesPerSec), Epochs: j.r.epochs, Steps: sum.Steps,
		Metrics:       reportMetrics(sum.Final),
		ModelNonzeros: j.model.NonZeros(), ModelHash: fmt.Sprintf("%016x", j.model.Hash()),
		BadLines: bad, Resources: res,
		Peers: len(workers), Topology: string(ncfg.Topology), Mode: mode.String(), Batch: j.r.batch,
		Rounds: sum.Rounds, WaitSeconds: sum.WaitSeconds, MaxStaleness: sum.MaxStaleness,
		BytesSent: bwOut, BytesRecv: bwIn, PubsubDropped: int64(pc.Dropped()),
		Repaired: int64(xs.Repaired), Rejected: int64(x.Rejected().Total()),
		Owned: len(st.Ring.Owned(self)), Shards: j.model.Layout.Shards,
	}
	if err := rep.Write(s); err != nil {
		return err
	}
	logMetrics(log.Info(), sum.Final).Str("examples", humanCount(float64(sum.Examples))).Int64("rounds", sum.Rounds).
		Float64("seconds", round4(sum.Seconds)).Str("examples_per_sec", humanCount(sum.ExamplesPerSec)).
		Float64("wait_seconds", round4(sum.WaitSeconds)).Str("model_hash", s.ModelHash).
		Str("sent", humanCount(float64(bwOut))+"B").Str("received", humanCount(float64(bwIn))+"B").
		Uint64("repaired", xs.Repaired).Int64("rejected", s.Rejected).Str("resources", res.String()).Msg("done")
	if rej := x.Rejected(); rej.Total() > 0 {
		log.Warn().Interface("rejected", rej.Map()).Msg("messages were rejected")
	}
	if j.r.save != "" {
		if err := j.model.SaveFile(j.r.save, model.SaveOptions{}); err != nil {
			return fmt.Errorf("--save: %w", err)
		}
		log.Info().Str("file", j.r.save).Msg("model saved")
	}
	return nil
}

// waitAgreed waits until the membership view is agreed by every member and
// has at least min members.
func waitAgreed(ctx context.Context, n *node.Node, min int) (node.State, error) {
	evs, cancel := n.Subscribe()
	defer cancel()
	for {
		st := n.State()
		if st.Agreed && len(st.View.Members) >= min && st.Ring != nil {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for the members to agree: %w", ctx.Err())
		case <-evs:
		}
	}
}

// p2pConfig is the libp2p transport's configuration for node n.
func p2pConfig(n *node.Node) p2p.Config {
	cfg := p2p.DefaultConfig()
	cfg.MaxPayload = n.MaxPayload()
	cfg.Join = n.Join
	cfg.Drops = func() uint64 { return n.PubSubCounters().Dropped() }
	return cfg
}
