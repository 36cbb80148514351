package sgd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

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

// Done is the clock an owner announces as its through clock once every
// worker has finished: every contribution there will ever be is applied.
const Done = math.MaxUint64

// Net is what the distributed loop needs from the message layer; a
// *gossip.Exchange provides it. Calls come from the loop's goroutine.
type Net interface {
	SendGrad(ctx context.Context, owner string, clock, epoch uint64, examples int, g *model.Sparse) error
	SendParams(ctx context.Context, clock, epoch uint64, ack *wire.Ack, p *model.Sparse) error
	Poke(ctx context.Context, peer string, kind gossip.Stream) (int, error)
	SetParamsPeers(peers []string)
}

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
	// Self is this peer's ID; Workers are every worker of the run (this
	// peer included); Ring gives the owners of every shard. The ring's
	// members must be workers. Epoch is the ring's membership epoch, sent
	// with every message.
	Self    string
	Workers []string
	Ring    *ring.Ring
	Epoch   uint64
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
	case c.Self == "" || !slices.Contains(c.Workers, c.Self):
		return fmt.Errorf("%w: self %q is not among the workers %v", ErrConfig, c.Self, c.Workers)
	case c.Ring == nil:
		return fmt.Errorf("%w: no ring", ErrConfig)
	case c.Config.MaxExamples > 0:
		return fmt.Errorf("%w: a distributed run reads its data to the end (no example limit)", ErrConfig)
	}
	for _, m := range c.Ring.Members() {
		if !slices.Contains(c.Workers, m) {
			return fmt.Errorf("%w: ring member %q is not a worker", ErrConfig, m)
		}
	}
	return nil
}

// RoundPoint is one round of a distributed run, passed to DistHooks.Round.
type RoundPoint struct {
	Clock       int64   // the round
	Examples    int64   // this worker's training examples so far (after the round)
	Seconds     float64 // since the run started
	WaitSeconds float64 // time this worker waited at the barrier before the round
	Staleness   int64   // rounds of other workers' contributions missing from the copy used
	Applied     int     // contributions this peer applied as owner for the round (sync), 0 otherwise
}

// DistHooks receive a distributed run's reports, on the loop's goroutine.
type DistHooks struct {
	Hooks
	Round func(RoundPoint)
}

// DistSummary is what a distributed run did.
type DistSummary struct {
	Summary
	Rounds       int64   // clocks this worker completed
	WaitSeconds  float64 // total time waiting at barriers (and for the end)
	MaxStaleness int64   // the largest staleness a gradient was computed at
	Applied      int64   // gradient messages applied as owner
	Published    int64   // params messages published as owner
	Pokes        int64   // stalls that asked a peer to resend
	StreamErrors int64   // stream failures the Exchange reported
}

// evKind is what an event carries.
type evKind uint8

const (
	evGrad evKind = iota + 1
	evParams
	evError
)

// event is a message handed from the Exchange's delivery goroutine to the
// loop, with its data copied (the Exchange reuses its buffers).
type event struct {
	kind     evKind
	from     string
	clock    uint64
	epoch    uint64
	examples int
	through  uint64
	applied  []wire.WorkerClock
	rows     model.Sparse
	err      error
}

// inbox is an unbounded queue from the delivery goroutine to the loop. It
// must not block the delivery goroutine: the loop may be waiting in Poke,
// which waits for the delivery goroutine.
type inbox struct {
	mu    sync.Mutex
	q     []*event
	free  []*event
	wake  chan struct{}
	width int
}

func newInbox(width int) *inbox { return &inbox{wake: make(chan struct{}, 1), width: width} }

func (b *inbox) get() *event {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := len(b.free); n > 0 {
		e := b.free[n-1]
		b.free = b.free[:n-1]
		return e
	}
	return new(event)
}

func (b *inbox) put(e *event) {
	b.mu.Lock()
	b.q = append(b.q, e)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take moves the queued events to dst.
func (b *inbox) take(dst []*event) []*event {
	b.mu.Lock()
	defer b.mu.Unlock()
	dst = append(dst, b.q...)
	clear(b.q)
	b.q = b.q[:0]
	return dst
}

func (b *inbox) recycle(e *event) {
	e.rows.Reset()
	e.applied = e.applied[:0]
	e.err = nil
	b.mu.Lock()
	b.free = append(b.free, e)
	b.mu.Unlock()
}

// Handlers returns the gossip handlers that feed this run's loop. Create
// the Exchange with them, then call Run.
func (d *Dist) Handlers() gossip.Handlers {
	return gossip.Handlers{
		Grad: func(g *gossip.Grad) {
			e := d.in.get()
			e.kind, e.from, e.clock, e.epoch, e.examples = evGrad, g.From, g.Clock, g.Epoch, g.Examples
			e.rows.Idx = append(e.rows.Idx[:0], g.Rows.Idx...)
			e.rows.Val = append(e.rows.Val[:0], g.Rows.Val...)
			d.in.put(e)
		},
		Params: func(p *gossip.Params) {
			e := d.in.get()
			e.kind, e.from, e.clock, e.epoch, e.through = evParams, p.From, p.Clock, p.Epoch, p.Ack.Through
			e.applied = append(e.applied[:0], p.Ack.Applied...)
			e.rows.Idx = append(e.rows.Idx[:0], p.Rows.Idx...)
			e.rows.Val = append(e.rows.Val[:0], p.Rows.Val...)
			d.in.put(e)
		},
		Error: func(err error) {
			e := d.in.get()
			e.kind, e.err = evError, err
			d.in.put(e)
		},
	}
}

// Dist is one peer's distributed training run: worker and owner in one
// loop on one goroutine, which alone touches the model. The Exchange's
// delivery goroutine only copies messages into the loop's inbox.
type Dist struct {
	cfg DistConfig
	m   *model.Model
	net Net
	h   DistHooks
	in  *inbox
	t   trainer // the local loop's machinery: batches, evaluation, progress

	width      int
	shardOwner [][]int  // per shard: indices into owners
	owners     []string // every member owning a shard (primary or replica), sorted
	primaries  []string // members that are primary of some shard: they publish params
	primary    []bool   // per shard: this peer is its primary
	workers    []string // sorted

	// Worker state.
	clock   uint64            // next round to compute
	through map[string]uint64 // per primary: clocks it has completed (a count; Done at the end)
	acked   map[string]uint64 // per owner: clocks of ours it has applied (a count)
	split   []model.Sparse    // per owner, reused
	grad    model.Sparse

	// Owner state.
	rounds     map[uint64]*round // sync: contributions by clock
	nextApply  uint64            // sync: next round to apply
	doneAt     map[string]uint64 // worker -> clock of its done message
	appliedW   map[string]uint64 // async/ssp: per worker, clocks applied (a count)
	dirty      []uint32          // async/ssp: rows changed since the last flush
	dirtyMark  []uint64          // bitset over features
	lastFlush  time.Time
	lastAck    uint64 // through announced in the last flush
	ownerStep  int64
	sum, tmp   model.Sparse
	out        model.Sparse
	ack        wire.Ack
	waitingFor time.Time // when the current owner round started waiting (sync)

	events []*event
	ctx    context.Context
	err    error // a fatal error from an event (a lost stream in sync mode)

	dsum       DistSummary
	roundWait  float64
	roundStale int64
	applied    int // contributions applied in the last sync round
	pokeMu     sync.Mutex
	poking     map[string]bool
	avgWait    time.Duration // smoothed wait at barriers
}

// round collects one sync round's contributions at an owner.
type round struct {
	grads map[string]*event
}

// NewDist prepares a distributed run of m. Call Handlers to build the
// Exchange, then Run with it.
func NewDist(m *model.Model, cfg DistConfig, h DistHooks) (*Dist, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Ring.Shards() != m.Layout.Shards {
		return nil, fmt.Errorf("%w: ring of %d shards for a model of %d", ErrConfig, cfg.Ring.Shards(), m.Layout.Shards)
	}
	d := &Dist{cfg: cfg, m: m, h: h, in: newInbox(m.Layout.Width), width: m.Layout.Width}
	d.workers = slices.Sorted(slices.Values(cfg.Workers))
	d.workers = slices.Compact(d.workers)
	r := cfg.Ring
	idx := map[string]int{}
	for _, mem := range r.Members() {
		if len(r.Replicated(mem)) > 0 {
			idx[mem] = len(d.owners)
			d.owners = append(d.owners, mem)
		}
		if len(r.Owned(mem)) > 0 {
			d.primaries = append(d.primaries, mem)
		}
	}
	d.shardOwner = make([][]int, m.Layout.Shards)
	d.primary = make([]bool, m.Layout.Shards)
	for s := range d.shardOwner {
		for _, o := range r.Owners(s) {
			d.shardOwner[s] = append(d.shardOwner[s], idx[o])
		}
		if r.Primary(s) == cfg.Self {
			d.primary[s] = true
		}
	}
	for _, s := range r.Replicated(cfg.Self) {
		m.Own(s)
	}
	d.split = make([]model.Sparse, len(d.owners))
	d.through = map[string]uint64{}
	d.acked = map[string]uint64{}
	d.rounds = map[uint64]*round{}
	d.doneAt = map[string]uint64{}
	d.appliedW = map[string]uint64{}
	d.poking = map[string]bool{}
	if cfg.Mode != Sync {
		d.dirtyMark = make([]uint64, (m.Layout.Features+63)/64)
	}
	return d, nil
}

// Owners returns the members that own shards (primary or replica), sorted.
func (d *Dist) Owners() []string { return d.owners }

// Run trains until every worker has read its data cfg.Epochs times and
// every owner has published the final values, so every peer ends with the
// same model. open and test are as for Train.
func (d *Dist) Run(ctx context.Context, net Net, open func(epoch int) (data.Source, error), test func() (data.Source, error)) (DistSummary, error) {
	d.net = net
	d.ctx = ctx
	net.SetParamsPeers(d.workers)
	t := &d.t
	*t = trainer{m: d.m, cfg: d.cfg.Config, openFn: open, test: test, h: d.h.Hooks, g: NewGrad(d.m), now: d.cfg.Now}
	if t.now == nil {
		t.now = time.Now
	}
	t.stepFn = d.step
	t.beforeFinalEval = d.finish
	t.start = t.now()
	t.lastProgress = t.start
	t.nextEval = d.cfg.EvalEvery
	d.lastFlush = t.start
	err := t.run(ctx)
	t.finish()
	d.dsum.Summary = t.sum
	d.dsum.Rounds = int64(d.clock)
	return d.dsum, err
}

// step is one round of this worker on the n rows in the trainer's batch.
func (d *Dist) step(n int) error {
	t := &d.t
	c := d.clock
	waited, err := d.waitUntil(d.mayCompute)
	if err != nil {
		return err
	}
	d.roundWait = waited
	d.dsum.WaitSeconds += waited
	if st := d.staleness(); st > d.dsum.MaxStaleness {
		d.dsum.MaxStaleness = st
	}
	loss := t.g.Add(d.m, &t.batch)
	t.g.Collect(&d.grad)
	if err := d.sendGrad(c, n, &d.grad); err != nil {
		return err
	}
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
			WaitSeconds: waited, Staleness: d.staleness(), Applied: d.applied})
	}
	return t.afterStep()
}

// sendGrad splits g by owner and sends every owner its rows, an empty
// message when it has none: owners count every worker's examples.
func (d *Dist) sendGrad(clock uint64, examples int, g *model.Sparse) error {
	for i := range d.split {
		d.split[i].Reset()
	}
	mask := uint32(d.m.Layout.Shards - 1)
	w := d.width
	for i, k := range g.Idx {
		for _, o := range d.shardOwner[k&mask] {
			d.split[o].Append(k, g.Val[i*w:(i+1)*w])
		}
	}
	for i, o := range d.owners {
		if err := d.net.SendGrad(d.ctx, o, clock, d.cfg.Epoch, examples, &d.split[i]); err != nil {
			return fmt.Errorf("round %d: sending gradient to %s: %w", clock, short(o), err)
		}
	}
	return nil
}

// mayCompute reports whether the copy is fresh enough for round d.clock:
// every primary's through clock is at least clock-s-1, and (SSP, Async)
// every owner has acknowledged our clocks up to clock-Window.
func (d *Dist) mayCompute() bool {
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
	// through[o] counts complete clocks, so "through clock >= c-s-1" is
	// "through[o] >= c-s" (and holds trivially when c <= s).
	if c > s {
		for _, o := range d.primaries {
			if d.through[o] < c-s {
				return false
			}
		}
	}
	// Clocks 0..c-1 are sent; c-acked[o] of them are unacknowledged.
	if d.cfg.Mode != Sync && c >= uint64(d.cfg.Window) {
		for _, o := range d.owners {
			if d.acked[o] < c-uint64(d.cfg.Window)+1 {
				return false
			}
		}
	}
	return true
}

// staleness is how many rounds before d.clock are not yet complete in the
// copy: clock minus the smallest count of complete clocks of any primary.
func (d *Dist) staleness() int64 {
	lo := uint64(math.MaxUint64)
	for _, o := range d.primaries {
		lo = min(lo, d.through[o])
	}
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
	stall := time.NewTimer(d.stallTimeout())
	defer stall.Stop()
	var flush <-chan time.Time
	var ft *time.Timer
	if d.cfg.Mode != Sync {
		ft = time.NewTimer(d.cfg.Flush)
		defer ft.Stop()
		flush = ft.C
	}
	for !cond() {
		select {
		case <-d.ctx.Done():
			return time.Since(start).Seconds(), d.ctx.Err()
		case <-d.in.wake:
		case <-stall.C:
			stalled = true
			d.pokeLate()
			stall.Reset(d.stallTimeout())
		case <-flush:
			ft.Reset(d.cfg.Flush)
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

// poll handles every queued event, and flushes an async owner when due.
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
				d.err = fmt.Errorf("a lost message cannot be repaired, the run cannot stay consistent: %w", e.err)
			}
		}
		d.in.recycle(e)
	}
	if d.err != nil {
		return d.err
	}
	if d.cfg.Mode == Sync {
		return d.applyReady()
	}
	if time.Since(d.lastFlush) >= d.cfg.Flush {
		return d.flush()
	}
	return nil
}

// onParams applies an owner's new values to the read copy and records its
// progress. Clocks in an Ack are counts: Through = n says clocks 0..n-1
// are complete, Applied = n that the worker's clocks 0..n-1 are applied;
// Done says everything is.
func (d *Dist) onParams(e *event) {
	if e.from != d.cfg.Self {
		d.m.SetRows(&e.rows)
	}
	if e.through > d.through[e.from] {
		d.through[e.from] = e.through
	}
	for _, a := range e.applied {
		if a.Worker == d.cfg.Self && a.Clock > d.acked[e.from] {
			d.acked[e.from] = a.Clock
		}
	}
}

// onGrad takes a worker's gradient for this owner's shards.
func (d *Dist) onGrad(e *event) {
	if d.cfg.Mode == Sync {
		r := d.rounds[e.clock]
		if r == nil {
			r = &round{grads: map[string]*event{}}
			d.rounds[e.clock] = r
		}
		if old := r.grads[e.from]; old != nil {
			d.in.recycle(old) // cannot happen with a sequenced stream; keep the newest
		}
		r.grads[e.from] = e
		if e.examples == 0 {
			d.markDone(e.from, e.clock)
		}
		return
	}
	if e.examples > 0 && e.rows.Len() > 0 {
		d.m.Apply(&e.rows, e.examples, d.ownerStep)
		d.ownerStep++
		d.dsum.Applied++
		for _, k := range e.rows.Idx {
			if d.primary[int(k)&(d.m.Layout.Shards-1)] {
				if w, b := k/64, uint64(1)<<(k%64); d.dirtyMark[w]&b == 0 {
					d.dirtyMark[w] |= b
					d.dirty = append(d.dirty, k)
				}
			}
		}
	}
	if e.examples == 0 {
		d.markDone(e.from, e.clock)
	}
	if e.clock+1 > d.appliedW[e.from] {
		d.appliedW[e.from] = e.clock + 1 // a count of clocks
	}
	d.in.recycle(e)
}

// markDone records that worker w has no more data from clock c on.
func (d *Dist) markDone(w string, c uint64) {
	if _, ok := d.doneAt[w]; !ok {
		d.doneAt[w] = c
	}
}

// applyReady applies, in clock order, every sync round whose contributions
// are all in, and publishes each round's new values.
func (d *Dist) applyReady() error {
	if len(d.owners) == 0 || !slices.Contains(d.owners, d.cfg.Self) {
		return nil
	}
	for {
		c := d.nextApply
		r := d.rounds[c]
		complete := true
		allDone := true
		for _, w := range d.workers {
			if dc, ok := d.doneAt[w]; ok && dc < c {
				continue // finished before this round
			}
			allDone = false
			if r == nil || r.grads[w] == nil {
				complete = false
				break
			}
		}
		if allDone {
			return d.publishFinal()
		}
		if !complete {
			return nil
		}
		if err := d.applyRound(c, r); err != nil {
			return err
		}
		delete(d.rounds, c)
		d.nextApply++
	}
}

// applyRound sums round c's contributions in worker order, applies them
// and publishes the changed rows this peer is primary of.
func (d *Dist) applyRound(c uint64, r *round) error {
	d.sum.Reset()
	n := 0
	d.applied = 0
	allDone := true
	for _, w := range d.workers {
		e := r.grads[w]
		if e == nil {
			continue
		}
		if e.examples > 0 {
			allDone = false
			n += e.examples
			d.applied++
			addSparse(&d.tmp, &d.sum, &e.rows, d.width)
			d.sum, d.tmp = d.tmp, d.sum
		}
		d.in.recycle(e)
	}
	if n > 0 && d.sum.Len() > 0 {
		d.m.Apply(&d.sum, n, int64(c))
		d.dsum.Applied += int64(d.applied)
	}
	if allDone {
		// Every worker that reached this round was done: the run is over.
		return d.publishFinal()
	}
	d.out.Reset()
	mask := uint32(d.m.Layout.Shards - 1)
	for _, k := range d.sum.Idx {
		if d.primary[k&mask] {
			d.out.Append(k, d.m.Row(k))
		}
	}
	if !d.isPrimary() {
		return nil
	}
	d.ack.Through = c + 1 // a count: clocks 0..c are complete
	d.ack.Applied = d.ack.Applied[:0]
	return d.publish(c)
}

func (d *Dist) isPrimary() bool { return slices.Contains(d.primaries, d.cfg.Self) }

// publish sends d.out with d.ack.
func (d *Dist) publish(c uint64) error {
	if err := d.net.SendParams(d.ctx, c, d.cfg.Epoch, &d.ack, &d.out); err != nil {
		return fmt.Errorf("round %d: publishing parameters: %w", c, err)
	}
	d.dsum.Published++
	return nil
}

// publishFinal announces that every contribution is applied (through =
// Done), with any rows not yet published.
func (d *Dist) publishFinal() error {
	if d.lastAck == Done || !d.isPrimary() {
		d.lastAck = Done
		return nil
	}
	if d.cfg.Mode != Sync {
		d.gatherDirty()
	} else {
		d.out.Reset()
	}
	d.ack.Through = Done
	d.ack.Applied = d.ack.Applied[:0]
	for _, w := range d.workers {
		d.ack.Applied = append(d.ack.Applied, wire.WorkerClock{Worker: w, Clock: Done})
	}
	d.lastAck = Done
	return d.publish(d.nextApply)
}

// flush publishes an async/SSP owner's changed rows and progress.
func (d *Dist) flush() error {
	d.lastFlush = time.Now()
	if !slices.Contains(d.owners, d.cfg.Self) || d.lastAck == Done {
		return nil
	}
	// through counts the clocks every live worker's contributions are in for.
	through := uint64(math.MaxUint64)
	allDone := true
	for _, w := range d.workers {
		if _, ok := d.doneAt[w]; ok {
			continue
		}
		allDone = false
		through = min(through, d.appliedW[w])
	}
	if allDone {
		return d.publishFinal()
	}
	if !d.isPrimary() || (len(d.dirty) == 0 && through == d.lastAck) {
		return nil
	}
	d.gatherDirty()
	d.ack.Through = through
	d.ack.Applied = d.ack.Applied[:0]
	for _, w := range d.workers {
		if _, ok := d.doneAt[w]; ok {
			d.ack.Applied = append(d.ack.Applied, wire.WorkerClock{Worker: w, Clock: Done})
		} else {
			d.ack.Applied = append(d.ack.Applied, wire.WorkerClock{Worker: w, Clock: d.appliedW[w]})
		}
	}
	d.lastAck = through
	return d.publish(d.clock)
}

// gatherDirty fills d.out with the current values of the dirty rows and
// clears the dirty set.
func (d *Dist) gatherDirty() {
	slices.Sort(d.dirty)
	d.out.Reset()
	for _, k := range d.dirty {
		d.out.Append(k, d.m.Row(k))
		d.dirtyMark[k/64] &^= 1 << (k % 64)
	}
	d.dirty = d.dirty[:0]
}

// finish runs after the worker's last epoch: it tells every owner it is
// done and waits until every primary has published its final values.
func (d *Dist) finish() error {
	var none model.Sparse
	for _, o := range d.owners {
		if err := d.net.SendGrad(d.ctx, o, d.clock, d.cfg.Epoch, 0, &none); err != nil {
			return fmt.Errorf("telling %s this worker is done: %w", short(o), err)
		}
	}
	waited, err := d.waitUntil(func() bool {
		for _, o := range d.primaries {
			if d.through[o] != Done {
				return false
			}
		}
		return true
	})
	d.dsum.WaitSeconds += waited
	return err
}

// pokeLate asks the peers the loop is waiting for to resend what may have
// been lost, in the background (Poke waits for a round trip).
func (d *Dist) pokeLate() {
	var late []struct {
		peer string
		kind gossip.Stream
	}
	for _, o := range d.primaries {
		if d.through[o] < d.clock && d.through[o] != Done {
			late = append(late, struct {
				peer string
				kind gossip.Stream
			}{o, gossip.StreamParams})
		}
	}
	if d.cfg.Mode == Sync {
		if r := d.rounds[d.nextApply]; slices.Contains(d.owners, d.cfg.Self) {
			for _, w := range d.workers {
				if _, done := d.doneAt[w]; !done && (r == nil || r.grads[w] == nil) {
					late = append(late, struct {
						peer string
						kind gossip.Stream
					}{w, gossip.StreamGrad})
				}
			}
		}
	}
	for _, l := range late {
		if l.peer == d.cfg.Self {
			continue // loopback never loses
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

// addSparse sets dst = a + b (rows merged by index; values of common rows
// added as a[i] + b[i], in that order, so the result depends only on the
// order of the calls).
func addSparse(dst, a, b *model.Sparse, w int) {
	dst.Reset()
	i, j := 0, 0
	for i < len(a.Idx) || j < len(b.Idx) {
		switch {
		case j >= len(b.Idx) || (i < len(a.Idx) && a.Idx[i] < b.Idx[j]):
			dst.Append(a.Idx[i], a.Val[i*w:(i+1)*w])
			i++
		case i >= len(a.Idx) || b.Idx[j] < a.Idx[i]:
			dst.Append(b.Idx[j], b.Val[j*w:(j+1)*w])
			j++
		default:
			dst.Idx = append(dst.Idx, a.Idx[i])
			for c := 0; c < w; c++ {
				dst.Val = append(dst.Val, a.Val[i*w+c]+b.Val[j*w+c])
			}
			i++
			j++
		}
	}
}

// short abbreviates a peer ID for messages.
func short(id string) string {
	if len(id) > 12 {
		return "…" + id[len(id)-8:]
	}
	return id
}
