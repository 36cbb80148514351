package job

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/p2p"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/metrics"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node"
	"github.com/gossiptrain/gossiptrain/node/membership"
	"github.com/gossiptrain/gossiptrain/node/ring"
	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/node/trainer"
	"github.com/gossiptrain/gossiptrain/peerlog"
	"github.com/gossiptrain/gossiptrain/usage"
)

// Dist says how a distributed run synchronises, what travels and how it
// survives restarts: train's distributed flags, parsed (see Check).
type Dist struct {
	Mode train.Mode
	// Staleness is ssp's rounds a worker may run ahead.
	Staleness int
	Gather    train.Gather
	Values    wire.Values
	// MaxRowGrad is --max-row-grad: 0 the model kind's default, < 0 off.
	MaxRowGrad float64
	Combine    train.Combine
	// LocalSteps is --local-steps: batches in a window (1: none).
	LocalSteps int
	// AutoCombine is --combine auto: the model's kind decides too
	// (combineFor).
	AutoCombine bool
	// OptimizerState is --optimizer-state: where windows keep the
	// optimizer state, "workers", "owners" or "auto" (localStateFor).
	OptimizerState string
	// InitSeed is the mlp's --init-seed, which every peer shares.
	InitSeed uint64
	// ReportRounds writes a round line every that many rounds.
	ReportRounds int
	// CheckpointDir holds this peer's checkpoints (DIR/<peer ID>; "":
	// none), written every CheckpointEvery (0: never).
	CheckpointDir   string
	CheckpointEvery time.Duration
	// Resume restarts from the newest checkpoint every peer has whole;
	// ResumeOrStart (--resume=auto) starts from round 0 when there is none.
	Resume, ResumeOrStart bool
	// WaitTimeout bounds the wait for the cluster to form (0: for ever).
	WaitTimeout time.Duration
	// StallTimeout fails a run that has not moved for this long (0:
	// never); it is raised to 4x --dead-after (stallTimeout).
	StallTimeout time.Duration
}

// combineFor is the combine of a model of kind k. --combine auto is, for
// windows of local steps: in sync mode Capped for an MLP's windows
// (measured: summed changes of its dense rows overshoot, and their mean
// loses 3 points of accuracy) and for windows of more than 4 batches
// (their sum overshoots: 0.9% worse at H = 8 and 4% at 16), Sum for 4 or
// fewer (it reaches a lone peer's log-loss with fewer examples than
// Capped: 560k against 704k); Mean in ssp and async (set by the command
// line); Sum without windows (docs/scaling.md, "How windows combine").
func (d Dist) combineFor(k model.Kind) train.Combine {
	if !d.AutoCombine || d.LocalSteps <= 1 || d.Mode != train.Sync {
		return d.Combine
	}
	if k == model.MLP || d.LocalSteps > 4 {
		return train.Capped
	}
	return train.Sum
}

// localStateFor reports whether the workers keep the optimizer state of
// windows of local steps for model m (train.Config.LocalState): the
// windows then carry weights only. Only AdaGrad has state to keep
// (FTRL's weights follow from its state, which the command line refuses
// with --optimizer-state workers). --optimizer-state auto keeps it with
// the workers for an MLP: every example touches every hidden row, so each
// of N workers' own AdaGrad sums is an N-th of the whole, which is what a
// window trains from either way, and its dense windows carry half the
// values (measured: docs/scaling.md, "Where the optimizer state lives").
// Not when the job writes checkpoints: they hold the owners' state, not
// the workers', and a resumed sync run must go on exactly. A sparse
// model's rows are touched unevenly, and a worker's own state of a model
// larger than its share would cost it the memory sharding saves, so it
// stays with the owners.
func (d Dist) localStateFor(m *model.Model) bool {
	if d.LocalSteps <= 1 || m.Opt.Kind != model.AdaGrad {
		return false
	}
	switch d.OptimizerState {
	case "workers":
		return true
	case "owners":
		return false
	}
	return m.Kind == model.MLP && d.CheckpointDir == ""
}

// optimizerStateName is where the windows of a job of model m keep the
// optimizer state, as the report and the hello name it.
func (d Dist) optimizerStateName(m *model.Model) string {
	if d.localStateFor(m) {
		return "workers"
	}
	return "owners"
}

// maxRowGrad is the bound on a pushed gradient row's norm per example for
// a model of kind k (--max-row-grad, G2 in node/train/guard.go), 0 when
// off.
func (d Dist) maxRowGrad(k model.Kind) float64 {
	switch {
	case d.MaxRowGrad == 0:
		return train.DefaultMaxRowGrad(k)
	case d.MaxRowGrad < 0:
		return 0
	}
	return d.MaxRowGrad
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

// peer is one peer's run while RunPeer assembles it.
type peer struct {
	cfg    Config
	d      Dist
	ncfg   node.Config
	log    zerolog.Logger
	ctx    context.Context
	cancel context.CancelCauseFunc
	sigs   chan os.Signal // SIGINT, SIGTERM: the first leaves, the second stops
	mt     *metrics.Metrics
	n      *node.Node
	self   string
	// Set by start: the agreed state this peer trains from, its member ID,
	// its transport and start prober, its checkpoints and how it entered.
	st       node.State
	memberID uint64
	tr       *p2p.Transport
	starter  *trainer.Starter
	ckptDir  string
	scan     trainer.ResumeScan
	entry    trainer.Entry
	place    train.PlaceFunc
	lim      wire.Limits
}

// RunPeer trains as one peer of a distributed job, whose node ncfg (built
// and checked from the flags) names: it joins, waits for --min-peers and an
// agreed member set, finds out whether a run is under way (node/trainer's
// start probes), and runs the protocol core (node/train) through its driver
// (node/trainer) over the core link (gossip.CoreLink). It handles signals
// itself: the first SIGINT/SIGTERM leaves gracefully (shards handed over);
// a second one stops at once, as peerlog.StopSignal does from the start
// (stop.go). Errors of the node's configuration are *node.FieldError.
func RunPeer(cfg Config, ncfg node.Config, d Dist) error {
	log, m := cfg.Log, cfg.Plan.Model
	// At most --threads CPUs at a time, as a lone train: under a cap of
	// 0.4 core Go's own default is 2, and a peer's goroutines then hop
	// between two threads that share 0.4 core.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cfg.Threads))
	ncfg.Shards = m.Layout.Shards
	var testSet *trainer.TestSet
	if open := cfg.Plan.OpenTest(); open != nil {
		// Read while the cluster forms, not while the first rounds run.
		testSet = trainer.ReadTestSet(m, open)
	}
	ncfg.Spec = jobSpec(m, d, cfg.Batch) // a peer of the job that differs is refused at connect
	mt, closeMetrics, err := StartMetrics(cfg.MetricsAddr, log)
	if err != nil {
		return err
	}
	defer closeMetrics()

	// Signals: the first leaves gracefully, the second cancels.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	defer stopOnSignal(cancel, log)()

	n, err := node.New(ncfg, log)
	if err != nil {
		return err
	}
	defer closeNode(ctx, n)
	p := &peer{cfg: cfg, d: d, ncfg: ncfg, log: log, ctx: ctx, cancel: cancel, sigs: sigs, mt: mt, n: n, self: n.Self().String()}
	log.Info().Str("peer_id", p.self).Strs("addrs", n.Addrs()).Msg(peerlog.Started)
	if err := p.start(); err != nil {
		return err
	}
	defer p.tr.Close()
	tcfg, err := p.trainerConfig()
	if err != nil {
		return err
	}
	return p.run(tcfg, testSet)
}

// start waits for the cluster to form, opens the transport and finds out
// with the start probes how this peer enters the run: at its start, by
// joining it under way, or by resuming it from a checkpoint.
func (p *peer) start() error {
	log, ncfg, m := p.log, p.ncfg, p.cfg.Plan.Model
	log.Info().Int("min_peers", ncfg.MinPeers).Msg(peerlog.Waiting)
	startCtx, stopStart := context.WithCancel(p.ctx)
	defer stopStart()
	go func() {
		select {
		case <-p.sigs:
			p.cancel(context.Canceled)
		case <-startCtx.Done():
		}
	}()
	// A peer told where the others are waits until it has met one of them,
	// so a late starter joins the run under way instead of starting alone.
	var boot []string
	for _, a := range ncfg.Peers {
		if ai, err := node.ParsePeerAddr(a); err == nil && ai.ID != p.n.Self() {
			boot = append(boot, ai.ID.String())
		}
	}
	var err error
	p.st, err = waitForCluster(startCtx, p.n, ncfg.MinPeers, boot, p.d.WaitTimeout, p.cfg.ProgressEvery, log)
	if err != nil {
		return err
	}
	p.memberID = train.MemberID(p.self, incarnationOf(p.st.View, p.self))
	if p.tr, err = p2p.New(p.n.Host(), p.n.PubSub(), p2pConfig(p.n, m)); err != nil {
		return err
	}
	p.starter = trainer.NewStarter(p.tr, ncfg.Job, p.self, p.memberID, log)
	p.place = ringFor(ncfg, p.n.Master(), m.Layout.Shards)
	if p.d.CheckpointDir != "" {
		p.ckptDir = filepath.Join(p.d.CheckpointDir, p.self)
	}
	if p.d.Resume {
		if p.scan, err = trainer.ScanResume(p.ckptDir, ncfg.Job, m); err != nil {
			p.tr.Close()
			return usage.Flag("checkpoint-dir", "%v", err)
		}
		p.scan.LogSkipped(log)
		log.Info().Str("dir", p.ckptDir).Int("checkpoints", len(p.scan.Points)).Int("passed_over", len(p.scan.Skipped)).Msg("--resume: this peer's checkpoints")
		p.starter.SetResume(p.scan.Points, p.place, m.Layout.Shards, p.d.ResumeOrStart)
	}
	p.entry, err = p.starter.Enter(startCtx, func() trainer.View {
		v := p.n.View()
		return trainer.View{Peers: v.Members, Incarnations: v.Incarnations}
	}, ncfg.MinPeers, 250*time.Millisecond)
	stopStart()
	if err != nil {
		p.tr.Close()
		if cause := context.Cause(p.ctx); cause != nil {
			return cause
		}
		if errors.Is(err, trainer.ErrNoCheckpoint) {
			return usage.Flag("checkpoint-dir", "--resume: %v; this peer's %s. Give --resume=auto to start a new run from round 0 when there is none", err, p.scan.Describe())
		}
		return err
	}
	log.Info().Uint64("epoch", p.st.View.Epoch).Int("members", len(p.st.View.Members)).Str("topology", string(ncfg.Topology)).
		Bool("joining", p.entry.Contact != "").Msg(peerlog.Training)
	warnWideWindows(log, p.d, m.Kind, len(p.st.View.Members))
	return nil
}

// warnWideWindows warns when a job starts with more workers than its
// window suits (train.AutoLocalSteps): peers started by hand with
// --local-steps auto (which cannot know how many will come: cluster,
// bench and launch pass the window their count suits), or a window set by
// hand. In sync only where the owners sum the windows (capped and mean do
// not overshoot); never for the mlp, whose windows were measured apart
// (capped, the sums at the workers). It names the flag that fixes it.
// TestWarnWideWindows.
func warnWideWindows(log zerolog.Logger, d Dist, kind model.Kind, members int) {
	h, suits := d.LocalSteps, train.AutoLocalSteps(d.Mode, members)
	if h <= suits || kind == model.MLP {
		return
	}
	var msg string
	switch {
	case d.Mode != train.Sync:
		msg = fmt.Sprintf("%d workers' windows of %d batches in %v mode: the owners take each window's change over the workers, which moves the rows they share too little, and the model ends worse (docs/scaling.md); give every peer --local-steps %d",
			members, h, d.Mode, suits)
	case d.combineFor(kind) == train.Sum:
		msg = fmt.Sprintf("%d workers' windows of %d batches each: the owners add them up and overshoot the rows every worker moves, and the model ends worse (docs/scaling.md); give every peer --local-steps %d, or --combine capped",
			members, h, suits)
	default:
		return
	}
	log.Warn().Int("members", members).Int("local_steps", h).Int("suits", suits).Msg(msg)
}

// trainerConfig is the configuration of this peer's trainer and core, from
// the flags and how it entered the run (a resume loads its checkpoint).
func (p *peer) trainerConfig() (trainer.Config, error) {
	log, d, cfg, m := p.log, p.d, p.cfg, p.cfg.Plan.Model
	members := len(p.st.View.Members)
	if rows := cfg.Plan.L2Rows; rows > 0 && members > 1 {
		// --l2 auto is 1/N for the job's N rows; this peer counted its own
		// files only. Assume the others hold as many; a user with uneven
		// files gives --l2. (With --part the scan saw the whole input.)
		m.Opt.L2 = 1 / float64(rows*int64(members))
		log.Info().Float64("l2", m.Opt.L2).Int64("rows_here", rows).Int("peers", members).
			Msg("--l2 auto: 1/(rows here x peers), assuming every peer has as many rows (give --l2 if not)")
	}
	p.lim = wire.DefaultLimits()
	p.lim.Features = m.Layout.Features
	p.lim.MaxWidth = max(p.lim.MaxWidth, m.Layout.Width) // wide softmax or mlp rows
	tcfg := trainer.DefaultConfig()
	core := &tcfg.Core
	core.Self, core.ID, core.Mode, core.Gather, core.Model = p.self, p.memberID, d.Mode, d.Gather, m
	if d.Mode == train.SSP {
		core.Staleness = d.Staleness
	}
	core.Place = p.place
	core.Initial, core.Contact, core.Contacts = p.entry.Initial, p.entry.Contact, p.entry.Contacts
	tcfg.Job, tcfg.CheckpointDir = p.ncfg.Job, p.ckptDir
	if d.CheckpointEvery > 0 {
		core.CheckpointTicks = max(1, int(d.CheckpointEvery/tcfg.Tick))
	}
	switch {
	case p.entry.Resume > 0:
		p.scan.LogResuming(log, p.entry.Resume)
		info, err := trainer.LoadCheckpoint(filepath.Join(p.ckptDir, fmt.Sprintf("round-%d.ckpt", p.entry.Resume)), m)
		if err != nil {
			return tcfg, fmt.Errorf("--resume: %w", err)
		}
		core.Start, tcfg.Resume = p.entry.Resume, &info
		log.Info().Uint64("round", info.Round).Str("file", info.Path).Int("shards", len(info.Shards)).
			Int("epoch", info.Position.Epoch+1).Int64("rows", info.Position.Rows).Msg("resuming from the checkpoint")
	case d.Resume && p.entry.Contact != "":
		log.Warn().Msg("--resume: a run is under way: joining it (this peer's checkpoints are not used)")
	}
	core.Seed = p.memberID
	core.Limits = p.lim
	core.Guard.MaxExamples, core.Guard.MaxRowGrad, core.Combine = cfg.Batch*max(1, d.LocalSteps), d.MaxRowGrad, d.combineFor(m.Kind)
	core.LocalSteps = d.LocalSteps
	core.LocalState = d.localStateFor(m)
	if core.LocalState && p.entry.Resume > 0 {
		log.Warn().Msg("--optimizer-state workers: checkpoints hold the owners' shards, not the workers' own AdaGrad sums, so this worker's start from zero: the run goes on from the checkpoint's weights with larger steps at first, not exactly as it would have (--optimizer-state owners resumes exactly)")
	}
	if m.Kind == model.MLP {
		// A shard lost with every holder restarts from the MLP's initial
		// weights (a linear model's are zeros).
		pristine := m.Clone()
		var rows model.Sparse
		core.InitShard = func(m *model.Model, s int) {
			pristine.ExportRows(s, false, &rows)
			_ = m.ImportRows(s, false, &rows)
		}
	}
	tcfg.Batch, tcfg.Epochs, tcfg.EvalEvery, tcfg.Threads = cfg.Batch, cfg.Plan.Epochs, cfg.EvalEvery, cfg.Threads
	tcfg.Holdout, tcfg.Patience, tcfg.HoldoutTol = cfg.Plan.Holdout, infer.AutoPatience, infer.AutoHoldoutTol
	tcfg.FetchModel = cfg.Save != ""
	tcfg.Log = log
	tcfg.NonFinite = cfg.NonFinite
	tcfg.StallTimeout = stallTimeout(d.StallTimeout, p.ncfg.DeadAfter)
	return tcfg, nil
}

// lateLink is the trainer's link, set once the core link exists (the core
// link delivers to the trainer, so one of them is made first).
type lateLink struct {
	mu sync.Mutex
	l  *gossip.CoreLink
}

func (k *lateLink) set(l *gossip.CoreLink) {
	k.mu.Lock()
	k.l = l
	k.mu.Unlock()
}

func (k *lateLink) Send(to string, msg *wire.Core) {
	k.mu.Lock()
	l := k.l
	k.mu.Unlock()
	if l != nil {
		l.Send(to, msg)
	}
}

// incarnationOf is peer's incarnation in view (0 if it is not there).
func incarnationOf(v membership.View, peer string) uint64 {
	for i, m := range v.Members {
		if m == peer && i < len(v.Incarnations) {
			return v.Incarnations[i]
		}
	}
	return 0
}

// memberIDs are the member IDs of a view's members (train.MemberID).
func memberIDs(v membership.View) []uint64 {
	ids := make([]uint64, 0, len(v.Members))
	for i, m := range v.Members {
		if i < len(v.Incarnations) {
			ids = append(ids, train.MemberID(m, v.Incarnations[i]))
		}
	}
	return ids
}

// followMembers feeds the membership's live set to the run until done.
func followMembers(n *node.Node, t *trainer.Trainer, done <-chan struct{}) {
	evs, cancel := n.Subscribe()
	defer cancel()
	t.SetAlive(memberIDs(n.View()))
	for {
		select {
		case <-done:
			return
		case ev, ok := <-evs:
			if !ok {
				return
			}
			t.SetAlive(memberIDs(ev.View))
		}
	}
}

// ringFor returns the ring builder of the topology: consistent hashing
// over the workers, or every shard on the master (the smallest worker if
// the master is gone).
func ringFor(ncfg node.Config, master string, shards int) train.PlaceFunc {
	rcfg := ring.DefaultConfig()
	rcfg.VNodes, rcfg.Shards, rcfg.Replicas = ncfg.VNodes, shards, ncfg.Replicas
	rcfg.MaxLoadPercent = ncfg.MaxLoadPercent
	return func(members []string) (train.Placement, error) {
		if ncfg.Topology == node.TopologyMaster {
			m := master
			if !slices.Contains(members, m) {
				m = slices.Min(members)
			}
			return ring.Master(rcfg, m), nil
		}
		return ring.New(rcfg, members)
	}
}

// p2pConfig is the libp2p transport's configuration for node n: direct
// streams large enough to carry a copy of m to a joining peer.
func p2pConfig(n *node.Node, m *model.Model) p2p.Config {
	cfg := p2p.DefaultConfig()
	cfg.MaxPayload = n.MaxPayload()
	cfg.Join = n.Join
	cfg.Drops = func() uint64 { return n.PubSubCounters().Dropped() }
	// Only peers that passed this job's hello (and so hold its key) reach
	// the core link, the start probes or any other training protocol.
	cfg.Admit = n.Admitted
	// A snapshot is the weights; a handoff adds optimizer state (up to two
	// floats a weight with FTRL); frames and headers add little.
	cfg.MaxResponse = max(cfg.MaxResponse, int64(len(m.W))*4*3+(16<<20))
	cfg.StreamTimeout = max(cfg.StreamTimeout, 5*time.Minute)
	// A pushed gradient (--grad-transport stream) is one message a request.
	cfg.MaxRequest = max(cfg.MaxRequest, n.MaxPayload()+4<<10)
	return cfg
}

func shortIDs(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		if len(id) > 12 {
			id = "…" + id[len(id)-8:]
		}
		out[i] = id
	}
	return out
}

// openTrain opens the training data for an epoch of a peer's run.
func (p *peer) openTrain(prog *progress) func(epoch int) (data.Source, error) {
	return func(epoch int) (data.Source, error) {
		s, err := p.cfg.Plan.OpenTrain(epoch)
		prog.track(s)
		return s, err
	}
}
