package sgd

import (
	"slices"
	"sync"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// evKind is what an event carries.
type evKind uint8

const (
	evNone     evKind = iota // wakes the loop
	evGrad                   // a gradient for this owner
	evParams                 // an owner's new values and progress
	evError                  // a stream failure the Exchange reported
	evAlive                  // the membership's live set changed
	evLeave                  // leave gracefully (SIGTERM)
	evControl                // a control request from another peer
	evSnapshot               // a model snapshot arrived (joining)
	evHandoff                // shard states arrived from their previous owner
	evGone                   // the status of a sender whose stream has a hole it cannot fill
)

// event is a message handed to the loop, with its data copied (the
// Exchange reuses its buffers).
type event struct {
	kind     evKind
	from     string
	clock    uint64
	epoch    uint64
	examples int
	through  uint64
	force    bool
	applied  []wire.WorkerClock
	config   wire.TrainConfig
	rows     model.Sparse
	err      error
	members  []string // evAlive
	ctl      *ctlReq  // evControl
	xfer     *transfer
}

// inbox is an unbounded queue to the loop. It must not block the
// Exchange's delivery goroutine: the loop may be waiting in Poke, which
// waits for the delivery goroutine.
type inbox struct {
	mu   sync.Mutex
	q    []*event
	free []*event
	wake chan struct{}
}

func newInbox() *inbox { return &inbox{wake: make(chan struct{}, 1)} }

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

// wakeEvent returns an event that does nothing but wake the loop.
func (b *inbox) wakeEvent() *event {
	e := b.get()
	e.kind = evNone
	return e
}

func (b *inbox) recycle(e *event) {
	e.rows.Reset()
	e.applied = e.applied[:0]
	e.config.Members = e.config.Members[:0]
	e.config.Crashed = e.config.Crashed[:0]
	e.err, e.ctl, e.xfer, e.members, e.force = nil, nil, nil, nil, false
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
			e.kind, e.from, e.clock, e.epoch, e.through, e.force = evParams, p.From, p.Clock, p.Epoch, p.Ack.Through, p.Ack.Force
			e.applied = append(e.applied[:0], p.Ack.Applied...)
			c := p.Ack.Config
			e.config = wire.TrainConfig{ID: c.ID, Start: c.Start, Checkpoint: c.Checkpoint,
				Members: append(e.config.Members[:0], c.Members...), Crashed: append(e.config.Crashed[:0], c.Crashed...)}
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

// SetAlive tells the loop the membership's current live set (the node's
// view). Members of the training configuration missing from it are dead:
// the coordinator removes them, if a majority of the configuration is
// alive. Safe to call from any goroutine.
func (d *Dist) SetAlive(members []string) {
	e := d.in.get()
	e.kind, e.members = evAlive, slices.Clone(members)
	d.in.put(e)
}

// Leave asks to leave the job gracefully: the coordinator removes this peer
// from the next configuration, this peer hands its shards to their new
// owners, and Run returns ErrLeft. Safe to call from any goroutine.
func (d *Dist) Leave() {
	e := d.in.get()
	e.kind = evLeave
	d.in.put(e)
}
