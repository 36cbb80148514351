package sgd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/ring"
)

// Mode is how rounds of a distributed run are synchronised.
type Mode uint8

// Modes: one loop parameterised by staleness (docs/protocol.md).
const (
	// Sync is barrier-synchronous: staleness 0. Owners apply a round once
	// every worker's gradient for it is in, summed in worker order, so all
	// replicas are bit-identical and N peers with batch B take the step one
	// peer with batch N·B takes.
	Sync Mode = iota + 1
	// SSP is stale-synchronous parallel: a worker at clock c waits until its
	// copy includes every worker's contributions up to c-s-1.
	SSP
	// Async never waits for other workers: owners apply gradients on
	// arrival and flush changed values every Flush.
	Async
)

// ParseMode parses "sync", "ssp" or "async".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "sync":
		return Sync, nil
	case "ssp":
		return SSP, nil
	case "async":
		return Async, nil
	}
	return 0, fmt.Errorf("%w: mode %q, want sync, ssp or async", ErrConfig, s)
}

func (m Mode) String() string {
	switch m {
	case Sync:
		return "sync"
	case SSP:
		return "ssp"
	case Async:
		return "async"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Done is the count of complete rounds an owner announces once every worker
// has finished: every contribution there will ever be is applied.
const Done = math.MaxUint64

// ErrLeft is returned by Run when this peer left the job gracefully
// (Dist.Leave) before the end of training.
var ErrLeft = errors.New("left the training job")

// ErrRemoved is returned by Run when the configuration dropped this peer
// while it was alive: the majority declared it dead during a partition.
// Its copy is stale; join again with a new Dist.
var ErrRemoved = errors.New("removed from the training configuration while alive: join again")

// Net is what the distributed loop needs from the message layer; a
// *gossip.Exchange provides it. Calls come from the loop's goroutine.
type Net interface {
	SendGrad(ctx context.Context, owner string, clock, epoch uint64, examples int, g *model.Sparse) error
	SendParams(ctx context.Context, clock, epoch uint64, ack *wire.Ack, p *model.Sparse) error
	Poke(ctx context.Context, peer string, kind gossip.Stream) (int, error)
	SetParamsPeers(peers []string)
	// ResetPeer starts the streams to a peer that (re)joined the run
	// afresh: it needs the params stream only from now on.
	ResetPeer(peer string)
}

// Control is what the loop needs for direct request/response streams
// (status, join, leave, model snapshots, shard handoff): a gossip.Transport
// provides it.
type Control interface {
	Serve(proto string, h func(ctx context.Context, from string, req []byte, w io.Writer) error)
	Request(ctx context.Context, peer string, proto string, req []byte) (io.ReadCloser, error)
}

// ControlProtocol is the direct-stream protocol of control requests.
const ControlProtocol = "/gossiptrain/control/1"

// DistConfig configures a distributed run. Start from DefaultDistConfig.
type DistConfig struct {
	Config
	// Mode and Staleness: Sync is staleness 0; SSP uses Staleness (>= 1);
	// Async never waits for other workers.
	Mode      Mode
	Staleness int
	// Window is flow control for SSP and Async: a worker keeps at most this
	// many clocks in flight that an owner has not yet acknowledged having
	// applied, because gossipsub drops silently when its queues fill.
	Window int
	// Flush is how often an SSP or Async owner publishes the values it has
	// changed.
	Flush time.Duration
	// StallAfter bounds how long a worker waits at a barrier, or an owner
	// for a round, before asking the late peer to resend what it may have
	// lost. The loop asks sooner, after four typical waits (at least 10ms),
	// once it has seen some.
	StallAfter time.Duration
	// LastHeard, when set, says when bytes last arrived from a peer (any
	// stream). A stalled barrier does not ask a peer that sent something
	// within the stall timeout to resend: its link is busy (a congested
	// master's params are queued, not lost), and a resend would only
	// congest it further. Nil: every late peer is asked.
	LastHeard func(peer string) time.Time
	// Self is this peer's ID; Peers is the agreed member set the run starts
	// from (the membership view once --min-peers agree): its smallest ID
	// coordinates the first configuration, or tells a newcomer how to join
	// a run already under way.
	Self  string
	Peers []string
	// RingFor builds the ring of owners for a set of workers: consistent
	// hashing over them, or every shard on the master.
	RingFor func(members []string) (*ring.Ring, error)
	// Checkpoint writes and resumes checkpoints (zero: none).
	Checkpoint CheckpointConfig
	// StartTimeout bounds waiting for the coordinator at start and for a
	// model snapshot when joining.
	StartTimeout time.Duration
	// HandoffTimeout bounds waiting for a shard's previous owner; after it
	// the shard is promoted from the read copy with fresh optimizer state.
	HandoffTimeout time.Duration
	// Log receives membership changes, handoffs and checkpoints.
	Log zerolog.Logger
}

// DefaultDistConfig returns the defaults, with the reason for each.
func DefaultDistConfig() DistConfig {
	return DistConfig{
		Config: DefaultConfig(),
		Mode:   Sync,
		// SSP's usual bound in the literature (Ho et al., NIPS 2013) is a
		// few clocks; 4 is the example.
		Staleness: 4,
		// 16 clocks of batch 100 is ~1600 examples a worker may be ahead of
		// what owners applied: enough to hide a few ms of network latency
		// without letting gossipsub's queues overflow.
		Window: 16,
		// "Every few milliseconds" (design.md): small enough that async
		// workers see fresh values, large enough to batch many gradients
		// into one params message.
		Flush: 5 * time.Millisecond,
		// A barrier that waits a second for one message is almost surely
		// waiting for a lost one.
		StallAfter: time.Second,
		// Peers of one job start within seconds of each other; a model
		// snapshot of a few hundred MiB crosses a LAN in seconds.
		StartTimeout: 2 * time.Minute,
		// A handoff is one round trip and the shard's bytes.
		HandoffTimeout: 30 * time.Second,
		Log:            zerolog.Nop(),
	}
}

// Validate reports the first field out of its domain.
func (c DistConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	switch {
	case c.Mode < Sync || c.Mode > Async:
		return fmt.Errorf("%w: mode %d", ErrConfig, c.Mode)
	case c.Mode == SSP && c.Staleness < 1:
		return fmt.Errorf("%w: ssp staleness %d, want >= 1 (0 is sync)", ErrConfig, c.Staleness)
	case c.Mode != Sync && c.Window < 1:
		return fmt.Errorf("%w: window %d, want >= 1", ErrConfig, c.Window)
	case c.Mode != Sync && c.Flush <= 0:
		return fmt.Errorf("%w: flush interval %v, want > 0", ErrConfig, c.Flush)
	case c.StallAfter <= 0:
		return fmt.Errorf("%w: stall timeout %v, want > 0", ErrConfig, c.StallAfter)
	case c.Self == "" || !slices.Contains(c.Peers, c.Self):
		return fmt.Errorf("%w: self %q is not among the peers %v", ErrConfig, c.Self, c.Peers)
	case c.RingFor == nil:
		return fmt.Errorf("%w: no RingFor", ErrConfig)
	case c.Config.MaxExamples > 0:
		return fmt.Errorf("%w: a distributed run reads its data to the end (no example limit)", ErrConfig)
	case c.StartTimeout <= 0 || c.HandoffTimeout <= 0:
		return fmt.Errorf("%w: start timeout %v and handoff timeout %v, want > 0", ErrConfig, c.StartTimeout, c.HandoffTimeout)
	}
	return c.Checkpoint.Validate()
}

// RoundPoint is one round of a distributed run, passed to DistHooks.Round.
type RoundPoint struct {
	Clock       int64   // the round
	Examples    int64   // this worker's training examples so far (after the round)
	Seconds     float64 // since the run started
	WaitSeconds float64 // time this worker waited at the barrier before the round
	Staleness   int64   // rounds of other workers' contributions missing from the copy used
	Applied     int     // contributions this peer applied as owner in its latest sync round
	Live        int     // workers of that owner round's configuration, minus the crashed and finished
	Config      uint64  // the configuration this worker computed the round in
	Owned       int     // shards this peer is primary of
}

// DistHooks receive a distributed run's reports, on the loop's goroutine.
type DistHooks struct {
	Hooks
	Round func(RoundPoint)
	// Change is called when a configuration takes effect here (joins,
	// leaves, crashes), with a line for the log.
	Change func(ChangePoint)
}

// ChangePoint describes a configuration change.
type ChangePoint struct {
	Config  uint64
	Start   uint64
	Members []string
	Crashed []string
	Joined  []string
	Left    []string
	Owned   int // shards this peer is primary of in it
}

// DistSummary is what a distributed run did.
type DistSummary struct {
	Summary
	Rounds         int64   // clocks this worker completed
	WaitSeconds    float64 // total time waiting at barriers (and for the end)
	MaxStaleness   int64   // the largest staleness a gradient was computed at
	Applied        int64   // gradient messages applied as owner
	Published      int64   // params messages published as owner
	Pokes          int64   // stalls that asked a peer to resend
	PokesDeferred  int64   // stalls that did not, because the peer was still sending
	StreamErrors   int64   // stream failures the Exchange reported
	Unpublished    int64   // messages the transport could not publish (left to repair)
	Superseded     int64   // ssp/async: params rows skipped because a later owner of their shard had sent newer ones
	RoundsDegraded int64   // owner rounds applied with fewer contributions than workers (a crashed or finished worker)
	Configs        uint64  // the final configuration's ID
	Members        int     // workers of the final configuration
	Owned          int     // shards this peer is primary of at the end
	Covered        int     // shards whose final values came from a live primary
	JoinSeconds    float64 // joined mid-run: seconds from start to owning shards (0 otherwise)
	JoinBytes      int64   // joined mid-run: bytes of model copied
	HandoffBytes   int64   // shard state received in handoffs
	Promoted       int     // shards promoted from the read copy after a crash
	Checkpoints    int     // checkpoints written
	ResumedAt      uint64  // the round a --resume continued from (0: not resumed)
}

// Dist is one peer's distributed training run: worker and owner in one
// loop on one goroutine, which alone touches the model. The Exchange's
// delivery goroutine and the control stream handlers only hand events to
// the loop through its inbox.
type Dist struct {
	goneAsked map[string]bool // senders asked about a stream hole (onGone)
	cfg       DistConfig
	m         *model.Model
	net       Net
	ctl       Control
	h         DistHooks
	in        *inbox
	t         trainer // the local loop's machinery: batches, evaluation, progress
	log       zerolog.Logger
	width     int
	mask      uint32
	start     time.Time

	cs    configs
	alive map[string]bool // the membership's live set

	// Coordinator state (whoever is coordinator now).
	pendingJoin  map[string]bool
	pendingLeave map[string]bool
	nextCkptAt   time.Time
	finalSent    bool // some owner announced Done: refuse joins

	// Worker state.
	clock        uint64
	firstClock   uint64            // the clock this worker started at (joined, resumed)
	firstTo      map[string]uint64 // per owner: the first clock sent to it
	joined       bool              // a worker of the current configuration (false after leaving)
	leaving      bool              // Leave was called
	leaveStart   uint64            // the round this peer stops at, once its leave is agreed
	leftAt       time.Time
	done         bool // read all its data and told the owners
	finished     bool // has every shard's final values
	doneClock    uint64
	shardThrough []uint64          // per shard: rounds complete in the read copy (a count; Done at the end)
	shardConfig  []uint64          // ssp/async, per shard: the configuration of the newest params applied to it
	keep         model.Sparse      // ssp/async: the rows of a params message not superseded
	acked        map[string]uint64 // per owner: clocks of ours it has applied (a count)
	split        []model.Sparse    // per owner of the round's configuration, reused
	grad         model.Sparse
	lastGradCfg  uint64

	// Owner state.
	ownCfg      uint64            // the configuration whose ownership is installed
	rounds      map[uint64]*round // sync: contributions by clock
	nextApply   uint64            // sync: next round to apply
	doneAt      map[string]uint64 // worker -> clock from which it contributes nothing
	pending     map[int]*handoff  // gained shards waiting for their state
	forward     map[int][]string  // async: lost shards -> their new owners (forward late rows)
	buffered    map[int][]*event  // async: rows for pending shards
	shadow      *model.Model      // replica shards' weights and state (see dist_state.go)
	primRows    model.Sparse      // a round's rows of primary shards
	replRows    model.Sparse      // a round's rows of replica shards
	appliedW    map[string]uint64 // async/ssp: per worker, clocks applied (a count)
	dirty       []uint32          // rows to publish at the next flush
	dirtyMark   []uint64          // bitset over features
	lastFlush   time.Time         //
	lastAck     uint64            //
	ackDue      bool              // async: a gradient arrived since the last flush
	ownerStep   int64             //
	lastParams  map[string][]int  //
	sum, tmp    model.Sparse      //
	out         model.Sparse      //
	ack         wire.Ack          //
	servedLeave map[int]bool      // leaving: shards handed off
	ctlWaiting  []*ctlReq         // snapshot and handoff requests waiting for their round
	ckptRound   uint64            // newest checkpoint round announced
	ckptDone    uint64            // newest checkpoint round written here
	resumeMeta  *checkpointMeta   // the checkpoint a --resume loads
	statusMu    sync.Mutex        // guards status
	status      wire.ControlReply // what a status request is answered with
	pokeMu      sync.Mutex        //
	poking      map[string]bool   //
	avgWait     time.Duration     // smoothed wait at barriers
	events      []*event          //
	leavers     []string          // peers that left gracefully in the last change
	toRepublish []int             // promoted shards to republish densely
	ctx         context.Context   //
	err         error             // a fatal error from an event
	dsum        DistSummary       //
	roundWait   float64           //
	applied     int               // contributions applied in the last sync round
	live        int               // workers expected in the last sync round
}

// round collects one sync round's contributions at an owner.
type round struct {
	grads map[string]*event
}

// grad returns worker w's contribution (nil: none yet, or no round).
func (r *round) grad(w string) *event {
	if r == nil {
		return nil
	}
	return r.grads[w]
}

// handoff is a gained shard waiting for its state.
type handoff struct {
	from    string // previous owner asked; "" = promote from the read copy
	round   uint64 // state as of the end of round-1
	asked   bool
	started time.Time
}

// NewDist prepares a distributed run of m. Call Handlers to build the
// Exchange, then Run with it.
func NewDist(m *model.Model, cfg DistConfig, h DistHooks) (*Dist, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Dist{cfg: cfg, m: m, h: h, in: newInbox(), width: m.Layout.Width, mask: uint32(m.Layout.Shards - 1), log: cfg.Log}
	d.alive = map[string]bool{}
	for _, p := range cfg.Peers {
		d.alive[p] = true
	}
	d.shardThrough = make([]uint64, m.Layout.Shards)
	d.shardConfig = make([]uint64, m.Layout.Shards)
	d.acked = map[string]uint64{}
	d.firstTo = map[string]uint64{}
	d.rounds = map[uint64]*round{}
	d.doneAt = map[string]uint64{}
	d.pending = map[int]*handoff{}
	d.forward = map[int][]string{}
	d.buffered = map[int][]*event{}
	d.appliedW = map[string]uint64{}
	d.pendingJoin = map[string]bool{}
	d.pendingLeave = map[string]bool{}
	d.servedLeave = map[int]bool{}
	d.poking = map[string]bool{}
	d.dirtyMark = make([]uint64, (m.Layout.Features+63)/64)
	for s := range m.State {
		m.Disown(s)
	}
	return d, nil
}

// Run trains until every worker has read its data cfg.Epochs times and
// every owner has published the final values, so every peer ends with the
// same model; or, after Leave, until this peer has handed off its shards
// (it then returns ErrLeft). open and test are as for Train.
func (d *Dist) Run(ctx context.Context, net Net, ctl Control, open func(epoch int) (data.Source, error), test func() (data.Source, error)) (DistSummary, error) {
	d.net, d.ctl, d.ctx = net, ctl, ctx
	t := &d.t
	*t = trainer{m: d.m, cfg: d.cfg.Config, openFn: open, test: test, h: d.h.Hooks, g: NewGrad(d.m), now: d.cfg.Now}
	if t.now == nil {
		t.now = time.Now
	}
	t.stepFn = d.step
	t.beforeFinalEval = d.finish
	d.start = t.now()
	t.start = d.start
	t.lastProgress = t.start
	t.nextEval = d.cfg.EvalEvery
	d.lastFlush = t.start
	d.publishStatus()
	ctl.Serve(ControlProtocol, d.serveControl)
	if err := d.begin(); err != nil {
		return d.summary(), err
	}
	err := t.run(ctx)
	t.finish()
	if errors.Is(err, errLeft) {
		err = d.completeLeave()
	}
	return d.summary(), err
}

// summary fills the run's summary.
func (d *Dist) summary() DistSummary {
	d.dsum.Summary = d.t.sum
	d.dsum.Rounds = int64(d.clock)
	if cur := d.cs.cur(); cur != nil {
		d.dsum.Configs = cur.id
		d.dsum.Members = len(cur.members)
		d.dsum.Owned = len(cur.ring.Owned(d.cfg.Self))
		d.dsum.Covered = 0
		for s := range d.shardThrough {
			if d.shardThrough[s] == Done && !d.cs.crashed[cur.primaryOf[s]] {
				d.dsum.Covered++
			}
		}
	}
	return d.dsum
}

// errLeft stops the trainer's epochs when this peer has left.
var errLeft = errors.New("left")

// step is one round of this worker on the n rows in the trainer's batch.
func (d *Dist) step(n int) error {
	t := &d.t
	waited, err := d.waitUntil(func() bool { return d.leftWorkers() || d.mayCompute() })
	if err != nil {
		return err
	}
	if d.leftWorkers() {
		return errLeft
	}
	c := d.clock
	d.roundWait = waited
	d.dsum.WaitSeconds += waited
	if st := d.staleness(); st > d.dsum.MaxStaleness {
		d.dsum.MaxStaleness = st
	}
	if err := d.maybeCheckpoint(n); err != nil {
		return err
	}
	loss := t.g.Add(d.m, &t.batch)
	t.g.Collect(&d.grad)
	cfg := d.cs.at(c)
	if err := d.sendGrad(cfg, c, n, &d.grad); err != nil {
		return err
	}
	d.lastGradCfg = cfg.id
	d.clock++
	t.sum.Steps++
	t.sum.Examples += int64(n)
	t.lossSum += loss
	t.winLoss += loss
	t.winExamples += int64(n)
	if err := d.poll(); err != nil {
		return err
	}
	if d.h.Round != nil {
		d.h.Round(RoundPoint{Clock: int64(c), Examples: t.sum.Examples, Seconds: t.now().Sub(t.start).Seconds(),
			WaitSeconds: waited, Staleness: d.staleness(), Applied: d.applied, Live: d.live, Config: cfg.id,
			Owned: len(d.cs.cur().ring.Owned(d.cfg.Self))})
	}
	return t.afterStep()
}

// leftWorkers reports whether this peer is no longer a worker: its leave
// took effect at the current clock.
func (d *Dist) leftWorkers() bool {
	return d.leaving && d.leaveStart > 0 && d.clock >= d.leaveStart
}

// sendGrad splits g by the owners of configuration cfg and sends every
// owner its rows, an empty message when it has none: owners count every
// worker's examples.
func (d *Dist) sendGrad(cfg *tconfig, clock uint64, examples int, g *model.Sparse) error {
	if len(d.split) < len(cfg.owners) {
		d.split = append(d.split, make([]model.Sparse, len(cfg.owners)-len(d.split))...)
	}
	for i := range cfg.owners {
		d.split[i].Reset()
	}
	w := d.width
	for i, k := range g.Idx {
		for _, o := range cfg.shardOwner[k&d.mask] {
			d.split[o].Append(k, g.Val[i*w:(i+1)*w])
		}
	}
	for i, o := range cfg.owners {
		if _, ok := d.firstTo[o]; !ok {
			d.firstTo[o] = clock
		}
		if err := d.sendTo(o, clock, cfg.id, examples, &d.split[i]); err != nil {
			return fmt.Errorf("round %d: sending gradient to %s: %w", clock, short(o), err)
		}
	}
	return nil
}

// sendTo sends a gradient to owner o. A publish waits for the owner's
// subscription at most StallAfter (20ms when the membership considers it
// dead), not the transport's full timeout, which would stall the loop: the
// message is sequenced and buffered either way (ErrUnpublished), and the
// owner repairs it when it asks for what it missed. An unpublished
// message is not an error of the run.
func (d *Dist) sendTo(o string, clock, cfgID uint64, examples int, g *model.Sparse) error {
	wait := d.cfg.StallAfter
	if !d.alive[o] {
		wait = 20 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(d.ctx, wait)
	defer cancel()
	err := d.net.SendGrad(ctx, o, clock, cfgID, examples, g)
	if errors.Is(err, gossip.ErrUnpublished) {
		d.dsum.Unpublished++
		return nil
	}
	return err
}

// mayCompute reports whether the copy is fresh enough for round d.clock:
// every shard is complete through clock-s-1, and (SSP, Async) every owner
// has acknowledged our clocks up to clock-Window.
func (d *Dist) mayCompute() bool {
	if !d.joined {
		return false
	}
	c := d.clock
	var s uint64
	switch d.cfg.Mode {
	case Sync:
		s = 0
	case SSP:
		s = uint64(d.cfg.Staleness)
	case Async:
		s = math.MaxUint64 / 2
	}
	// shardThrough counts complete clocks, so "complete through c-s-1" is
	// "shardThrough >= c-s" (and holds trivially when c <= s).
	if c > s {
		for _, t := range d.shardThrough {
			if t < c-s {
				return false
			}
		}
	}
	// Clocks firstTo[o]..c-1 were sent to owner o; those above its
	// acknowledged count are in flight.
	if d.cfg.Mode != Sync {
		for _, o := range d.cs.at(c).owners {
			first, ok := d.firstTo[o]
			if !ok || d.cs.crashed[o] {
				continue // nothing sent to it yet, or it is gone
			}
			if max(d.acked[o], first)+uint64(d.cfg.Window) <= c {
				return false
			}
		}
	}
	return true
}

// staleness is how many rounds before d.clock are not yet complete in the
// copy: clock minus the smallest count of complete clocks of any shard.
func (d *Dist) staleness() int64 {
	lo := slices.Min(d.shardThrough)
	if lo >= d.clock {
		return 0
	}
	return int64(d.clock - lo)
}

// waitUntil processes events until cond holds, poking late peers when it
// stalls; it returns the seconds waited.
func (d *Dist) waitUntil(cond func() bool) (float64, error) {
	if err := d.poll(); err != nil {
		return 0, err
	}
	if cond() {
		return 0, nil
	}
	start := time.Now()
	stalled := false
	var lastReport time.Time
	// The stall timer backs off like TCP's retransmission timer: each poke
	// that did not end the wait doubles the next timeout, up to StallAfter,
	// so a congested link is not loaded further with resends of messages
	// that are merely queued. A message arriving also re-arms it: the wire
	// is busy, not lossy.
	timeout := d.stallTimeout()
	stall := time.NewTimer(timeout)
	defer stall.Stop()
	tick := time.NewTicker(min(d.cfg.Flush, 50*time.Millisecond))
	defer tick.Stop()
	lastEvent := start
	for !cond() {
		select {
		case <-d.ctx.Done():
			return time.Since(start).Seconds(), d.ctx.Err()
		case <-d.in.wake:
			lastEvent = time.Now()
		case <-stall.C:
			if quiet := time.Since(lastEvent); quiet < timeout {
				stall.Reset(timeout - quiet)
				break
			}
			stalled = true
			// Once the timeout has backed off to StallAfter, ask even a
			// peer that is still sending (heartbeats keep arriving from a
			// peer whose message was lost).
			d.pokeLate(timeout, timeout >= d.cfg.StallAfter)
			timeout = min(2*timeout, d.cfg.StallAfter)
			stall.Reset(timeout)
			if w := time.Since(start); w > 10*d.cfg.StallAfter && time.Since(lastReport) > 10*d.cfg.StallAfter {
				lastReport = time.Now()
				d.log.Warn().Dur("waiting", w.Round(time.Millisecond)).Str("state", d.DebugState()).Msg("stalled")
			}
		case <-tick.C: // flushes, handoff and join timeouts, checkpoints
		}
		if err := d.poll(); err != nil {
			return time.Since(start).Seconds(), err
		}
	}
	waited := time.Since(start)
	// Track typical waits (an EWMA, like TCP's smoothed RTT) so a stall is
	// noticed after a few typical waits, not after StallAfter. Waits that
	// needed a repair are not typical and are left out.
	if !stalled {
		if d.avgWait == 0 {
			d.avgWait = waited
		} else {
			d.avgWait = (7*d.avgWait + waited) / 8
		}
	}
	return waited.Seconds(), nil
}

// stallTimeout is how long to wait before asking late peers to resend:
// four typical waits, at least minStall, at most StallAfter.
func (d *Dist) stallTimeout() time.Duration {
	return min(d.cfg.StallAfter, max(minStall, 4*d.avgWait))
}

// minStall bounds the adaptive stall timeout from below: a repair request
// is a round trip on a direct stream, cheap but not free.
const minStall = 10 * time.Millisecond

// poll handles every queued event, then the owner's and coordinator's
// periodic work.
func (d *Dist) poll() error {
	d.events = d.in.take(d.events[:0])
	for _, e := range d.events {
		switch e.kind {
		case evGrad:
			d.onGrad(e)
			continue // onGrad keeps or recycles e
		case evParams:
			d.onParams(e)
		case evError:
			d.dsum.StreamErrors++
			if d.cfg.Mode == Sync && errors.Is(e.err, gossip.ErrGone) {
				d.onGone(e.err)
			}
		case evGone:
			d.onGoneStatus(e)
		case evAlive:
			d.onAlive(e.members)
		case evLeave:
			d.onLeaveRequest()
		case evControl:
			d.onControl(e.ctl)
		case evSnapshot, evHandoff:
			d.onTransfer(e)
		}
		d.in.recycle(e)
	}
	if d.err != nil {
		return d.err
	}
	d.coordinate()
	if err := d.ownerWork(); err != nil {
		return err
	}
	d.serveWaiting()
	d.publishStatus()
	return d.err
}

// finish runs after the worker's last epoch: it tells every owner it is
// done and waits until every shard's final values are in.
func (d *Dist) finish() error {
	d.done, d.doneClock = true, d.clock
	if err := d.sendDone(); err != nil {
		return err
	}
	waited, err := d.waitUntil(func() bool {
		for _, t := range d.shardThrough {
			if t != Done {
				return false
			}
		}
		return true
	})
	d.dsum.WaitSeconds += waited
	if err != nil {
		return err
	}
	return d.linger()
}

// linger keeps this peer up after it finished until every other worker has
// finished too (or is gone), bounded by StallAfter*30: an exiting peer
// takes its retransmit buffers with it, and a peer that lost one of its
// last messages could then never repair it.
func (d *Dist) linger() error {
	d.finished = true
	d.publishStatus()
	var others []string
	for _, p := range d.cs.cur().members {
		if p != d.cfg.Self {
			others = append(others, p)
		}
	}
	var all atomic.Bool
	ctx, cancel := context.WithTimeout(d.ctx, 30*d.cfg.StallAfter)
	defer cancel()
	go func() {
		defer all.Store(true)
		for _, p := range others {
			for ctx.Err() == nil {
				qctx, qcancel := context.WithTimeout(ctx, time.Second)
				rep, _, err := d.request(qctx, p, wire.Control{Op: wire.OpStatus}, 1<<20)
				qcancel()
				if err != nil || rep.Round == Done {
					break // finished, or gone
				}
				sleepCtx(ctx, 20*time.Millisecond)
			}
		}
		d.in.put(d.in.wakeEvent())
	}()
	_, err := d.waitUntil(func() bool { return all.Load() || ctx.Err() != nil })
	if d.ctx.Err() != nil {
		return err
	}
	return nil
}

// sendDone tells every owner of the current configuration that this worker
// has no more data (an empty gradient with 0 examples).
func (d *Dist) sendDone() error {
	var none model.Sparse
	cfg := d.cs.cur()
	for _, o := range cfg.owners {
		if err := d.sendTo(o, d.doneClock, cfg.id, 0, &none); err != nil {
			return fmt.Errorf("telling %s this worker is done: %w", short(o), err)
		}
	}
	return nil
}

// pokeLate asks the peers the loop is waiting for to resend what may have
// been lost, in the background (Poke waits for a round trip).
func (d *Dist) pokeLate(quiet time.Duration, force bool) {
	type late struct {
		peer string
		kind gossip.Stream
	}
	var ls []late
	seen := map[string]bool{}
	need := d.clock // a worker waits for rounds before its clock
	if d.done {
		need = Done // a finished worker waits for the final values
	}
	for s, t := range d.shardThrough {
		if t >= need || t == Done {
			continue
		}
		p := d.cs.primaryFor(t, s) // the publisher of round t
		if d.done {
			p = d.cs.cur().primaryOf[s] // the publisher of the final values
		}
		if !seen[p] {
			seen[p] = true
			ls = append(ls, late{p, gossip.StreamParams})
		}
	}
	if d.cfg.Mode == Sync && d.ownsAny() {
		r := d.rounds[d.nextApply]
		for _, w := range d.cs.at(d.nextApply).members {
			if _, done := d.doneAt[w]; !done && (r == nil || r.grads[w] == nil) {
				ls = append(ls, late{w, gossip.StreamGrad})
			}
		}
	}
	for _, l := range ls {
		if l.peer == d.cfg.Self || !d.alive[l.peer] {
			continue // loopback never loses; the dead answer nothing
		}
		if !force && d.cfg.LastHeard != nil && time.Since(d.cfg.LastHeard(l.peer)) < quiet {
			d.dsum.PokesDeferred++ // still sending to us: busy, not lossy
			continue
		}
		key := l.peer + "/" + l.kind.String()
		d.pokeMu.Lock()
		busy := d.poking[key]
		d.poking[key] = true
		d.pokeMu.Unlock()
		if busy {
			continue
		}
		d.dsum.Pokes++
		go func() {
			d.net.Poke(d.ctx, l.peer, l.kind) // errors surface as stream errors or the next stall
			d.pokeMu.Lock()
			delete(d.poking, key)
			d.pokeMu.Unlock()
		}()
	}
}

// short abbreviates a peer ID for messages.
func short(id string) string {
	if len(id) > 12 {
		return "…" + id[len(id)-8:]
	}
	return id
}

// DebugState describes the loop's state for diagnosing a stuck run. Call
// it only after Run has returned.
func (d *Dist) DebugState() string {
	var b []byte
	cur := d.cs.cur()
	b = fmt.Appendf(b, "self %s clock %d nextApply %d joined %v done %v leaving %v leaveStart %d lastAck %d\n",
		short(d.cfg.Self), d.clock, d.nextApply, d.joined, d.done, d.leaving, d.leaveStart, d.lastAck)
	if cur != nil {
		b = fmt.Appendf(b, "config %d start %d members %v coordinator %s\n", cur.id, cur.start, shorts(cur.members), short(d.coordinator()))
	}
	notDone := map[string][]int{}
	for s, t := range d.shardThrough {
		if t != Done && cur != nil {
			p := cur.primaryOf[s]
			notDone[p] = append(notDone[p], s)
		}
	}
	for p, ss := range notDone {
		b = fmt.Appendf(b, "shards not done of %s: %v (through %d)\n", short(p), ss, d.shardThrough[ss[0]])
	}
	b = fmt.Appendf(b, "doneAt %v pending %d buffered %d appliedW %v acked %v\n", d.doneAt, len(d.pending), len(d.buffered), d.appliedW, d.acked)
	return string(b)
}
