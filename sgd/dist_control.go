package sgd

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// The control protocol: direct request/response streams between peers for
// what gossip cannot carry: asking a peer whether it trains and who
// coordinates (status), asking the coordinator to join or leave, copying
// the model when joining (snapshot), and handing shards' weights and
// optimizer state to their new owner (handoff). Requests are answered by
// the loop, which alone touches the model: the stream handler hands the
// request over and waits.

// ctlReq is a control request waiting for the loop's answer.
type ctlReq struct {
	from  string
	req   wire.Control
	reply wire.ControlReply
	// payload: frames to write after the reply (snapshot, handoff)
	frames [][]byte
	done   chan struct{}
	ctx    context.Context
}

// transfer is a snapshot or handoff that arrived.
type transfer struct {
	from    string
	round   uint64
	config  wire.TrainConfig
	through []uint64       // snapshot: per shard
	weights []byte         // snapshot: the flat weights, little-endian float32
	shards  map[int][]byte // handoff: shard exports
	err     error
	bytes   int64
}

// frameSize is the size of the frames a snapshot's weights travel in.
const frameSize = 1 << 20

// serveControl is the stream handler of ControlProtocol.
func (d *Dist) serveControl(ctx context.Context, from string, req []byte, w io.Writer) error {
	c := wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits())
	var m wire.Message
	if err := c.Decode(req, &m); err != nil {
		return fmt.Errorf("control request from %s: %w", short(from), err)
	}
	if m.Kind != wire.KindControl || m.Sender != from {
		return fmt.Errorf("control request from %s: a %s message from %q", short(from), m.Kind, m.Sender)
	}
	r := &ctlReq{from: from, req: m.Control, done: make(chan struct{}), ctx: ctx}
	r.req.Shards = slices.Clone(m.Control.Shards)
	if r.req.Op == wire.OpStatus {
		// Answered from the loop's published status: the loop may itself
		// be waiting for the asker (both starting).
		d.statusMu.Lock()
		r.reply = d.status
		r.reply.Config.Members = slices.Clone(d.status.Config.Members)
		r.reply.Config.Crashed = slices.Clone(d.status.Config.Crashed)
		d.statusMu.Unlock()
		r.reply.Op = wire.OpStatus
	} else {
		e := d.in.get()
		e.kind, e.ctl = evControl, r
		d.in.put(e)
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		case <-d.ctx.Done():
			return d.ctx.Err()
		}
	}
	r.reply.Frames = uint64(len(r.frames))
	head, err := c.AppendControlReply(nil, wire.Header{Job: "", Sender: d.cfg.Self}, &r.reply)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.Write(wire.AppendFrame(nil, head))
	for _, f := range r.frames {
		if _, err := bw.Write(wire.AppendFrame(nil, f)); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// onControl answers a control request in the loop, or keeps it until it
// can (snapshots and handoffs wait for their round).
func (d *Dist) onControl(r *ctlReq) {
	r.reply.Op = r.req.Op
	r.reply.Coordinator = d.coordinator()
	if cur := d.cs.cur(); cur != nil {
		r.reply.Config = cur.wire()
		r.reply.Config.Checkpoint = d.ckptRound
	}
	switch r.req.Op {
	case wire.OpJoin, wire.OpLeave:
		d.onMembershipRequest(r)
		close(r.done)
	case wire.OpSnapshot, wire.OpHandoff:
		if !d.tryServe(r) {
			d.ctlWaiting = append(d.ctlWaiting, r)
		}
	}
}

// publishStatus updates the status the control handler answers with.
func (d *Dist) publishStatus() {
	var st wire.ControlReply
	st.Op, st.Status, st.Round = wire.OpStatus, wire.StatusOK, d.clock
	if d.finished {
		st.Round = Done // has every final value: may exit
	}
	st.Coordinator = d.coordinator()
	if cur := d.cs.cur(); cur != nil {
		st.Config = cur.wire()
		st.Config.Members = slices.Clone(cur.members)
		st.Config.Crashed = slices.Clone(cur.crashed)
		st.Config.Checkpoint = d.ckptRound
	} else {
		st.Status, st.Round = wire.StatusNotTraining, d.resumeRound()
	}
	d.statusMu.Lock()
	d.status = st
	d.statusMu.Unlock()
}

// onMembershipRequest takes a join or leave request.
func (d *Dist) onMembershipRequest(r *ctlReq) {
	cur := d.cs.cur()
	switch {
	case cur == nil:
		r.reply.Status, r.reply.Reason = wire.StatusNotTraining, "not training yet"
	case d.coordinator() != d.cfg.Self:
		r.reply.Status, r.reply.Reason = wire.StatusRefused, "not the coordinator: ask "+d.coordinator()
	case r.req.Op == wire.OpJoin && cur.isMember(r.from):
		r.reply.Status = wire.StatusOK
	case r.req.Op == wire.OpLeave && !cur.isMember(r.from):
		r.reply.Status = wire.StatusOK
	case r.req.Op == wire.OpJoin && (d.finalSent || d.lastAck == Done):
		r.reply.Status, r.reply.Reason = wire.StatusRefused, "the job is finishing"
	case r.req.Op == wire.OpJoin:
		d.pendingJoin[r.from] = true
		d.alive[r.from] = true // it just asked; the membership will agree
		r.reply.Status = wire.StatusPending
	default:
		d.pendingLeave[r.from] = true
		r.reply.Status = wire.StatusPending
	}
}

// tryServe answers a snapshot or handoff request if its round has come.
func (d *Dist) tryServe(r *ctlReq) bool {
	if r.ctx.Err() != nil {
		close(r.done)
		return true
	}
	switch r.req.Op {
	case wire.OpSnapshot:
		// The copy must be complete through Round-1 and not beyond (sync),
		// so the joiner computes round Round from the same values as
		// everyone else.
		// (ssp and async copies are never at one round: any will do.)
		lo := slices.Min(d.shardThrough)
		if d.cs.cur() == nil || (d.cfg.Mode == Sync && lo < r.req.Round) {
			return false
		}
		r.reply.Status = wire.StatusOK
		r.reply.Round = lo
		// The configuration before the joiner's, so it knows whom to ask
		// for the shards it gains.
		if p := d.cs.byID(r.req.Config - 1); p != nil {
			r.reply.Config = p.wire()
		} else {
			r.reply.Config = wire.TrainConfig{}
		}
		buf := make([]byte, 0, len(d.m.W)*4)
		for _, v := range d.m.W {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
		for len(buf) > 0 {
			n := min(frameSize, len(buf))
			r.frames = append(r.frames, buf[:n])
			buf = buf[n:]
		}
		var th []byte
		for _, t := range d.shardThrough {
			th = binary.AppendUvarint(th, t)
		}
		r.frames = append(r.frames, th)
	case wire.OpHandoff:
		if d.cfg.Mode == Sync && d.nextApply < r.req.Round && d.lastAck != Done {
			return false
		}
		r.reply.Status, r.reply.Round = wire.StatusOK, d.nextApply
		for _, s := range r.req.Shards {
			if int(s) >= d.m.Layout.Shards || !d.owned(int(s)) || d.pending[int(s)] != nil {
				r.reply.Status, r.reply.Reason = wire.StatusRefused, fmt.Sprintf("shard %d is not owned here", s)
				r.frames = nil
				break
			}
			r.frames = append(r.frames, d.holder(int(s)).ShardBytes(int(s), true))
		}
		if r.reply.Status == wire.StatusOK {
			d.log.Info().Str("to", short(r.from)).Int("shards", len(r.req.Shards)).Uint64("round", r.reply.Round).Msg("handed shards over")
		}
	}
	close(r.done)
	return true
}

// serveWaiting retries the requests waiting for their round.
func (d *Dist) serveWaiting() {
	d.ctlWaiting = slices.DeleteFunc(d.ctlWaiting, d.tryServe)
}

// request sends a control request to peer and returns the reply and the
// payload frames.
func (d *Dist) request(ctx context.Context, peer string, req wire.Control, maxFrame int) (wire.ControlReply, [][]byte, error) {
	c := wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits())
	b, err := c.AppendControl(nil, wire.Header{Sender: d.cfg.Self}, &req)
	if err != nil {
		return wire.ControlReply{}, nil, err
	}
	rc, err := d.ctl.Request(ctx, peer, ControlProtocol, b)
	if err != nil {
		return wire.ControlReply{}, nil, err
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 1<<16)
	head, err := wire.ReadFrame(br, nil, 1<<20)
	if err != nil {
		return wire.ControlReply{}, nil, fmt.Errorf("%s from %s: %w", req.Op, short(peer), err)
	}
	var m wire.Message
	if err := c.Decode(head, &m); err != nil || m.Kind != wire.KindControlReply {
		return wire.ControlReply{}, nil, fmt.Errorf("%s from %s: bad reply: %v", req.Op, short(peer), err)
	}
	rep := m.ControlReply
	rep.Config.Members = slices.Clone(rep.Config.Members)
	rep.Config.Crashed = slices.Clone(rep.Config.Crashed)
	var frames [][]byte
	for i := uint64(0); i < rep.Frames; i++ {
		f, err := wire.ReadFrame(br, nil, maxFrame)
		if err != nil {
			return rep, nil, fmt.Errorf("%s from %s: frame %d: %w", req.Op, short(peer), i, err)
		}
		frames = append(frames, f)
	}
	return rep, frames, nil
}

// begin establishes this peer's place in the run: it forms the first
// configuration (the coordinator of the starting peers), waits for it, or
// joins a run under way.
func (d *Dist) begin() error {
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.StartTimeout)
	defer cancel()
	coord := slices.Min(d.cfg.Peers)
	if coord == d.cfg.Self {
		// Is a run under way (this peer restarted, or started late with a
		// small ID)? Ask the others, waiting for those still starting.
		var newest []uint64
		for _, p := range d.cfg.Peers {
			if p == d.cfg.Self {
				continue
			}
			var rep wire.ControlReply
			var err error
			for {
				qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
				rep, _, err = d.request(qctx, p, wire.Control{Op: wire.OpStatus}, 1<<20)
				qcancel()
				if err == nil {
					break
				}
				if serr := sleepCtx(ctx, 50*time.Millisecond); serr != nil {
					return fmt.Errorf("asking %s whether a run is under way: %w", short(p), err)
				}
			}
			if rep.Status == wire.StatusOK && rep.Config.ID > 0 {
				return d.join(ctx, rep.Coordinator)
			}
			newest = append(newest, rep.Round)
		}
		first := wire.TrainConfig{ID: 1, Members: slices.Sorted(slices.Values(d.cfg.Peers))}
		if d.cfg.Checkpoint.Resume {
			r, err := d.agreeResume(newest)
			if err != nil {
				return err
			}
			first.Start = r
		}
		return d.startIn(first)
	}
	// Wait for the coordinator's first configuration.
	for {
		rep, _, err := d.request(ctx, coord, wire.Control{Op: wire.OpStatus}, 1<<20)
		if err == nil && rep.Status == wire.StatusOK && rep.Config.ID > 0 {
			if slices.Contains(rep.Config.Members, d.cfg.Self) && rep.Config.ID == 1 {
				return d.startIn(rep.Config)
			}
			return d.join(ctx, rep.Coordinator)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for %s to start the run: %w", short(coord), err)
		}
	}
}

// startIn starts training in the first configuration c.
func (d *Dist) startIn(c wire.TrainConfig) error {
	if c.Start > 0 {
		if err := d.loadCheckpoint(c.Start); err != nil {
			return err
		}
	}
	d.learnConfig(c)
	d.clock, d.nextApply, d.firstClock = c.Start, c.Start, c.Start
	for s := range d.shardThrough {
		d.shardThrough[s] = max(d.shardThrough[s], c.Start)
	}
	d.joined = true
	d.publishStatus()
	d.log.Info().Uint64("config", c.ID).Int("members", len(c.Members)).Uint64("start", c.Start).
		Int("owned_shards", len(d.cs.cur().ring.Owned(d.cfg.Self))).Msg("training")
	return nil
}

// join joins a run under way through its coordinator: ask, wait for the
// configuration that adds this peer, copy the model, and start at its
// first round.
func (d *Dist) join(ctx context.Context, coord string) error {
	t0 := time.Now()
	var cfg wire.TrainConfig
	source := coord // a member to copy the model from: whoever answered
	for {
		if coord == "" || coord == d.cfg.Self {
			return fmt.Errorf("joining: no coordinator known")
		}
		rep, _, err := d.request(ctx, coord, wire.Control{Op: wire.OpJoin}, 1<<20)
		if err == nil {
			source = coord
			// Admitted: whatever the status, a configuration with this peer
			// in it (this peer may even coordinate it: never ask itself).
			if slices.Contains(rep.Config.Members, d.cfg.Self) {
				cfg = rep.Config
				break
			}
			switch rep.Status {
			case wire.StatusRefused:
				if rep.Coordinator != "" && rep.Coordinator != coord && rep.Coordinator != d.cfg.Self {
					coord = rep.Coordinator
					continue
				}
				if rep.Reason == "the job is finishing" {
					return fmt.Errorf("joining: %s says the job is finishing", short(coord))
				}
			}
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("joining through %s: %w", short(coord), err)
		}
	}
	d.log.Info().Uint64("config", cfg.ID).Uint64("start", cfg.Start).Msg("admitted: copying the model")
	var tr *transfer
	for {
		rep, frames, err := d.request(ctx, source, wire.Control{Op: wire.OpSnapshot, Round: cfg.Start, Config: cfg.ID}, frameSize)
		if err == nil && rep.Status == wire.StatusOK {
			tr, err = d.parseSnapshot(rep, frames)
			if err != nil {
				return err
			}
			tr.config = rep.Config
			break
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("copying the model from %s: %w", short(source), err)
		}
	}
	// Install the copy, then the configuration (so handoffs see the copy).
	for i := range d.m.W {
		d.m.W[i] = math.Float32frombits(binary.LittleEndian.Uint32(tr.weights[4*i:]))
	}
	copy(d.shardThrough, tr.through)
	d.clock, d.nextApply, d.firstClock = cfg.Start, cfg.Start, cfg.Start
	if d.cs.cur() == nil || d.cs.cur().id < cfg.ID {
		// The configuration before ours says whom to ask for the shards
		// this peer gains; this peer took part in none before.
		if tr.config.ID > 0 && tr.config.ID == cfg.ID-1 && (d.cs.cur() == nil || d.cs.cur().id < tr.config.ID) {
			if r, err := d.cfg.RingFor(tr.config.Members); err == nil {
				if t, err := newTConfig(tr.config, r, d.m.Layout.Shards); err == nil {
					d.cs.add(t)
				}
			}
		}
		d.learnConfig(cfg)
	}
	d.joined = true
	d.dsum.JoinSeconds = time.Since(t0).Seconds()
	d.dsum.JoinBytes = tr.bytes
	d.log.Info().Uint64("config", cfg.ID).Uint64("start", cfg.Start).Float64("seconds", d.dsum.JoinSeconds).
		Int64("model_bytes", tr.bytes).Int("owned_shards", len(d.cs.cur().ring.Owned(d.cfg.Self))).Msg("joined the run")
	return nil
}

// parseSnapshot decodes a snapshot reply's frames.
func (d *Dist) parseSnapshot(rep wire.ControlReply, frames [][]byte) (*transfer, error) {
	if len(frames) < 1 {
		return nil, fmt.Errorf("snapshot without frames")
	}
	tr := &transfer{round: rep.Round}
	for _, f := range frames[:len(frames)-1] {
		tr.weights = append(tr.weights, f...)
		tr.bytes += int64(len(f))
	}
	if len(tr.weights) != 4*len(d.m.W) {
		return nil, fmt.Errorf("snapshot of %d bytes for a model of %d weights: another model?", len(tr.weights), len(d.m.W))
	}
	th := frames[len(frames)-1]
	for len(th) > 0 {
		v, n := binary.Uvarint(th)
		if n <= 0 {
			return nil, fmt.Errorf("snapshot: bad shard progress")
		}
		tr.through = append(tr.through, v)
		th = th[n:]
	}
	if len(tr.through) != len(d.shardThrough) {
		return nil, fmt.Errorf("snapshot of %d shards for a model of %d", len(tr.through), len(d.shardThrough))
	}
	return tr, nil
}

// askLeave asks the coordinator to remove this peer until it has.
func (d *Dist) askLeave() {
	coord := d.coordinator()
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.HandoffTimeout)
	defer cancel()
	for ctx.Err() == nil {
		rep, _, err := d.request(ctx, coord, wire.Control{Op: wire.OpLeave}, 1<<20)
		if err == nil && rep.Status == wire.StatusRefused && rep.Coordinator != "" {
			coord = rep.Coordinator
		}
		if err == nil && rep.Status == wire.StatusOK {
			return
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// requestHandoffs asks previous owners for the pending shards not asked yet,
// one request per owner, in the background.
func (d *Dist) requestHandoffs() {
	byFrom := map[string][]uint32{}
	rounds := map[string]uint64{}
	for s, h := range d.pending {
		if h.asked {
			continue
		}
		h.asked, h.started = true, time.Now()
		byFrom[h.from] = append(byFrom[h.from], uint32(s))
		rounds[h.from] = max(rounds[h.from], h.round)
	}
	for from, shards := range byFrom {
		slices.Sort(shards)
		round := rounds[from]
		go func() {
			ctx, cancel := context.WithTimeout(d.ctx, d.cfg.HandoffTimeout)
			defer cancel()
			tr := &transfer{from: from, round: round}
			for {
				rep, frames, err := d.request(ctx, from, wire.Control{Op: wire.OpHandoff, Round: round, Shards: shards}, 1<<30)
				if err == nil && rep.Status == wire.StatusOK && len(frames) == len(shards) {
					tr.shards = map[int][]byte{}
					for i, s := range shards {
						tr.shards[int(s)] = frames[i]
						tr.bytes += int64(len(frames[i]))
					}
					break
				}
				if err == nil && rep.Status == wire.StatusRefused {
					tr.err = errors.New(rep.Reason)
					break
				}
				if ctx.Err() != nil {
					tr.err = fmt.Errorf("handoff from %s: %w (last: %v)", short(from), ctx.Err(), err)
					break
				}
				sleepCtx(ctx, 50*time.Millisecond)
			}
			e := d.in.get()
			e.kind, e.xfer = evHandoff, tr
			d.in.put(e)
		}()
	}
}

// onTransfer installs handed-over shards.
func (d *Dist) onTransfer(e *event) {
	tr := e.xfer
	if e.kind != evHandoff {
		return
	}
	if tr.err != nil {
		d.log.Warn().Err(tr.err).Str("from", short(tr.from)).Msg("handoff failed: promoting from the read copy")
	}
	for s, h := range d.pending {
		if h.from != tr.from {
			continue
		}
		b, ok := tr.shards[s]
		if !ok {
			d.promote(s, false)
			continue
		}
		target := d.m
		if d.cs.cur().primaryOf[s] != d.cfg.Self {
			target = d.shadowModel()
		}
		if err := target.LoadShard(s, b); err != nil {
			d.log.Warn().Err(err).Int("shard", s).Msg("bad handoff: promoting from the read copy")
			d.promote(s, false)
			continue
		}
		target.Own(s)
		if target == d.m && d.cfg.Mode != Sync {
			// The previous owner may have applied gradients it never
			// published (they were waiting for its next flush), or
			// published values some peers lost and can no longer repair
			// from it once it has gone: send the whole shard once.
			d.markShardDirty(s)
		}
		delete(d.pending, s)
		for _, b := range d.buffered[s] {
			d.applyAsync(b)
			d.in.recycle(b)
		}
		delete(d.buffered, s)
	}
	d.dsum.HandoffBytes += tr.bytes
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

var _ = model.Sparse{}
