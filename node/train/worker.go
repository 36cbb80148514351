package train

import (
	"fmt"
	"slices"
	"sort"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// The worker half of the core (docs/protocol.md, "Rounds").
//
// A worker computes round c on the values of its batch's rows as of
// through(c) rounds (sync: c; ssp: c-s; async: any), gathered from the
// rows' owners. It gets them by asking, with its contribution to round
// c-P, for the rows of batch c (P = 1 in sync, Config.Prefetch otherwise):
// one push to every owner the round routes shards to, carrying the
// gradient rows of that owner's shards and the rows of batch c+P it wants
// from that owner. The owner answers when the values are as fresh as asked
// (sync: once round c-P is applied), and that answer is also the
// acknowledgement that the contribution is applied (and replicated), so a
// worker keeps every push until it is answered and sends it again to the
// shard's new owner when its owner crashes or hands it over. Round c may be
// computed once every push of round c-P is answered.

type batch struct {
	round    uint64
	keys     []uint32
	examples int
}

// workset gathers the values of one round's batch.
type workset struct {
	round   uint64
	keys    []uint32
	vals    []float32
	pending int    // requests not answered yet
	through uint64 // the least progress among the answers (staleness)
	final   bool
}

// request is a push or pull sent and not yet answered.
type request struct {
	id       uint64
	to       string
	op       wire.CoreOp
	flags    wire.CoreFlags
	round    uint64 // push: the round contributed; pull: the round the values are for
	through  uint64 // values wanted as of this many rounds
	examples uint64
	shards   []uint32
	rows     model.Sparse // push: the rows (kept to send again)
	want     []uint32
	pos      []int32 // positions of want in the workset's or fetch's keys
	ws       *workset
	fetch    *fetch
	sentAt   uint64
	tries    int
}

// fetch is a Fetch or FetchHashes of the driver.
type fetch struct {
	id      uint64
	keys    []uint32
	vals    []float32
	all     bool
	hashes  bool
	rows    model.Sparse
	hashOut []uint64
	pending int
	final   bool
	sent    bool
}

type worker struct {
	c        *Core
	started  bool
	first    uint64 // the round this worker started at
	clock    uint64 // next round to compute (rounds before it are pushed)
	batches  []*batch
	nextRnd  uint64 // round of the next batch supplied
	ended    bool   // EndOfData
	dataDone bool   // every batch pushed: done pushes from now
	lastData uint64 // the first round without data (valid once ended)

	computing bool
	stash     *computedGrad
	ws        map[uint64]*workset
	reqs      map[uint64]*request
	nextReq   uint64
	fetches   []*fetch

	cut    *cutState // ssp/async checkpoint: paused for its cut
	final  bool      // an owner answered FlagFinal: training is over
	pollAt uint64    // async done worker: when to poll again

	leave   workerLeave
	scratch pushScratch // tryPush's
}

// workerLeave is a worker's state once its peer asked to leave the run
// (docs/protocol.md, "Membership changes").
type workerLeave struct {
	leaving bool
	left    bool
	stopAt  uint64 // the first round this worker does not push (once agreed)
	byeSent bool   // ssp/async: the done push of round stopAt is sent
}

// pushScratch is tryPush's scratch, kept between calls so a push allocates
// nothing in steady state.
type pushScratch struct {
	split     []model.Sparse // per owner: handed to the requests
	wantBuf   [][]uint32
	posBuf    [][]int32
	shardBuf  [][]uint32
	counts    []int
	rowOwner  []uint32 // per key of the pushed batch: its owner's index
	wantOwner []uint32 // per key of the wanted batch: its owner's index
	owners    []string // the owners of the pushed round
	idx       []int    // per shard, its owner's index in owners
	vals      []float32
}

type computedGrad struct {
	round uint64
	grad  []float32
	loss  float64
}

func (w *worker) init(c *Core) {
	w.c = c
	w.ws = map[uint64]*workset{}
	w.reqs = map[uint64]*request{}
	w.nextReq = reqBase(c.cfg.ID)
}

func (w *worker) String() string {
	return fmt.Sprintf("clock %d started %v computing %v stash %v batches %d ended %v dataDone %v final %v reqs %d ws %d",
		w.clock, w.started, w.computing, w.stash != nil, len(w.batches), w.ended, w.dataDone, w.final, len(w.reqs), len(w.ws))
}

// start begins work at round r (the configuration that added this member).
func (w *worker) start(r uint64) {
	w.started, w.first, w.clock, w.nextRnd = true, r, r, r
	// Batches given before the start are renumbered from r.
	for i, b := range w.batches {
		b.round = r + uint64(i)
	}
	w.nextRnd = r + uint64(len(w.batches))
	if w.ended {
		w.lastData = w.nextRnd
	}
}

func (w *worker) wantBatches() int {
	if w.ended || w.final {
		return 0
	}
	n := int(w.c.cfg.prefetch()) + 2 - len(w.batches)
	if w.leave.leaving && w.leave.stopAt > 0 {
		// A leaver trains up to the round its leave takes effect.
		n = min(n, int(w.leave.stopAt)-int(w.nextRnd))
	}
	return max(0, n)
}

// addBatch numbers the next batch. It keeps keys, not a copy: Core.Batch's
// caller hands them over (the trainer's windows are a copy made for the
// core, node/trainer unionKeys).
func (w *worker) addBatch(keys []uint32, examples int) {
	if w.ended || examples <= 0 {
		return
	}
	w.batches = append(w.batches, &batch{round: w.nextRnd, keys: keys, examples: examples})
	w.nextRnd++
}

func (w *worker) endOfData() {
	if !w.ended {
		w.ended = true
		w.lastData = w.nextRnd
	}
}

// batchOf returns the batch of round r, or nil.
func (w *worker) batchOf(r uint64) *batch {
	for _, b := range w.batches {
		if b.round == r {
			return b
		}
	}
	return nil
}

// known reports whether it is known what round r holds: a batch, or none
// (the data ended before it).
func (w *worker) known(r uint64) bool {
	return w.batchOf(r) != nil || (w.ended && r >= w.lastData)
}

// throughFor is the progress the values of round r must reflect.
func (w *worker) throughFor(r uint64) uint64 {
	s := w.c.cfg.staleness()
	if r <= s {
		return 0
	}
	return r - s
}

// routeOf returns shard s's owner for round r: its route in sync mode, the
// newest configuration's primary otherwise.
func (w *worker) routeOf(s int, r uint64) string {
	c := w.c
	if c.cfg.Mode == Sync {
		return c.cs.route(s, r)
	}
	return c.cs.cur().primary(s)
}

// owners returns the distinct owners round r routes shards to, sorted, and
// per shard the index of its owner, appended to os[:0] and idx[:0].
func (w *worker) owners(r uint64, os []string, idx []int) ([]string, []int) {
	c := w.c
	os, idx = os[:0], idx[:0]
	for s := range c.shards {
		o := w.routeOf(s, r)
		i := slices.Index(os, o)
		if i < 0 {
			i = len(os)
			os = append(os, o)
		}
		idx = append(idx, i)
	}
	return os, idx
}

func (w *worker) tick() {
	c := w.c
	for _, id := range sortedKeys(w.reqs) {
		r := w.reqs[id]
		wait := uint64(c.cfg.RetryTicks) << min(r.tries, 3)
		if c.tick-r.sentAt < wait {
			continue
		}
		if to := w.successor(r); to != "" {
			// Its owner left and is gone (its answer was lost): the
			// shards' next owner has them as of after this round.
			w.rerouteTo(r, to)
			continue
		}
		r.tries++
		c.stats.Resent++
		w.sendReq(r)
	}
}

// successor returns, for a sync request to a peer that left the run and
// is gone, the peer that applies the next round of the request's first
// shard ("": not such a request).
func (w *worker) successor(r *request) string {
	c := w.c
	if c.cfg.Mode != Sync || r.op == wire.CoreHash || len(r.shards) == 0 {
		return ""
	}
	_, t := c.cs.routeConf(int(r.shards[0]), r.round)
	m, ok := t.member(r.to)
	if !ok || c.isAlive(m.ID) || c.cs.removedIn[m.ID] == nil || c.cs.crashed[m.ID] {
		return ""
	}
	return c.cs.route(int(r.shards[0]), r.round+1)
}

// rerouteTo sends request r again to peer to, whole.
func (w *worker) rerouteTo(r *request, to string) {
	r.to, r.tries = to, 0
	r.flags |= wire.FlagResend
	w.c.stats.Resent++
	w.sendReq(r)
}

// retryAll sends every outstanding request again now.
func (w *worker) retryAll() {
	for _, id := range sortedKeys(w.reqs) {
		r := w.reqs[id]
		r.tries = 0
		w.c.stats.Resent++
		w.sendReq(r)
	}
}

// work advances the worker as far as it can. It reports progress.
func (w *worker) work() bool {
	c := w.c
	if !w.started || w.leave.left || c.err != nil {
		return false
	}
	progress := false
	// Values for the first rounds come from pulls; later ones ride on pushes.
	for r := w.first; r < w.first+c.cfg.prefetch(); r++ {
		if r < w.clock || w.ws[r] != nil || w.final || !w.known(r) || w.stoppedAt(r) {
			continue
		}
		w.pullRound(r)
		progress = true
	}
	if w.final {
		served := w.serveFetches()
		return w.leaveNow() || served || progress
	}
	if w.cutWork() {
		progress = true
	}
	if w.stash != nil {
		if w.tryPush() {
			progress = true
		}
	} else if !w.computing && w.leave.leaving && c.cfg.Mode != Sync && w.leave.stopAt > 0 && w.clock == w.leave.stopAt && !w.leave.byeSent {
		// An ssp or async leaver ends with a done push of the round it
		// stops at: its owners know then that it sends nothing more, and
		// wait for its pushes before it (owner.checkFinalAsync).
		w.stash = &computedGrad{round: w.clock}
		if w.tryPush() {
			progress = true
		}
	} else if !w.computing && !w.stoppedAt(w.clock) && !w.paused() {
		ws := w.ws[w.clock]
		switch {
		case ws == nil || ws.pending > 0:
		case w.batchOf(w.clock) != nil:
			w.compute(ws)
			progress = true
		case w.ended && w.clock >= w.lastData:
			w.dataDone = true
			if w.c.cfg.Mode == Sync || c.tick >= w.pollAt {
				w.stash = &computedGrad{round: w.clock}
				if w.tryPush() {
					progress = true
				}
			}
		}
	}
	if w.serveFetches() {
		progress = true
	}
	return w.leaveNow() || progress
}

// leaveNow marks a leaver left once its leave is agreed and its last push
// answered, or, once its values are final, whatever it still waits for:
// nothing moves after the end (E8) and the members do not wait for it
// (E14; TestScripts/e14-final-leaver: it stopped at the final answer and
// never went). It reports whether it marked it.
func (w *worker) leaveNow() bool {
	if !w.leave.leaving || w.leave.stopAt == 0 || w.leave.left {
		return false
	}
	if !w.final && (w.clock < w.leave.stopAt || len(w.reqs) > 0 || w.stash != nil || w.computing) {
		return false
	}
	w.leave.left = true
	return true
}

// stoppedAt reports whether this leaving worker does not take part in
// round r.
func (w *worker) stoppedAt(r uint64) bool {
	return w.leave.leaving && w.leave.stopAt > 0 && r >= w.leave.stopAt
}

// compute asks the driver for the gradient of round ws.round.
func (w *worker) compute(ws *workset) {
	c := w.c
	b := w.batchOf(ws.round)
	w.computing = true
	if c.cfg.Gather == Full {
		// The read copy is the values: gather them now (own shards are
		// as of this round: they cannot move before this push).
		ws.vals = ws.vals[:0]
		for _, k := range b.keys {
			ws.vals = append(ws.vals, c.m.Row(k)...)
		}
	}
	if ws.round > ws.through && c.cfg.Mode != Sync {
		if st := ws.round - ws.through; st > c.stats.MaxStaleness {
			c.stats.MaxStaleness = st
		}
	}
	workers := max(1, len(c.cs.at(ws.round).Members))
	if c.cfg.Combine == Mean {
		workers = 1 // (averaged changes: each window takes a lone peer's steps)
	}
	c.rd.Compute = &ComputeReq{Round: ws.round, Keys: b.keys, Weights: ws.vals, Examples: b.examples, Workers: workers}
}

func (w *worker) computed(round uint64, grad []float32, loss float64) {
	if !w.computing || round != w.clock {
		return
	}
	w.computing = false
	w.stash = &computedGrad{round: round, grad: grad, loss: loss}
}

// holding reports whether the next push must wait: a proposed
// configuration (the leader's fence) or, in sync mode, a fetch that reads
// the values of the current round.
func (w *worker) holding() bool {
	if w.c.ag.holdPush() {
		return true
	}
	if w.c.cfg.Mode == Sync {
		for _, f := range w.fetches {
			if f.pending > 0 || !f.sent {
				return true
			}
		}
	}
	return false
}

// tryPush sends the stashed round's pushes, once the batch P rounds on is
// known and nothing holds them.
func (w *worker) tryPush() bool {
	c := w.c
	g := w.stash
	P := c.cfg.prefetch()
	next := g.round + P
	if !w.known(next) && !w.stoppedAt(next) || w.holding() {
		return false
	}
	cur := c.cs.cur()
	if me, ok := cur.member(c.cfg.Self); (!ok || me.ID != c.cfg.ID) && !w.leave.leaving {
		return false // not (yet) a worker of the newest configuration
	}
	w.stash = nil
	b := w.batchOf(g.round)
	if w.stoppedAt(g.round) {
		b = nil // a leaver's done push
	}
	nb := w.batchOf(next)
	if w.stoppedAt(next) {
		nb = nil
	}
	if old := w.ws[g.round]; old != nil && old.pending == 0 {
		// Its values are free for the next workset's: the driver is done
		// with them (it gave the gradient computed from them, or never had
		// them), and no request is left to write them (pending counts
		// them until answered; a leaver's done push may leave some).
		w.scratch.vals = old.vals
	}
	owners, idx := w.owners(g.round, w.scratch.owners, w.scratch.idx)
	w.scratch.owners, w.scratch.idx = owners, idx
	n := len(owners)
	w.sizeParts(b, nb, g, idx, n)
	examples, flags := w.splitGrad(b, g, cur)
	ws := w.nextWorkset(nb, next, n)
	w.sendPushes(owners, g, next, b, ws, examples, flags)
	delete(w.ws, g.round)
	w.dropBatch(g.round)
	w.clock = g.round + 1
	if w.stoppedAt(g.round) {
		w.clock, w.leave.byeSent = g.round, true // a leaver's done push: it computes no round more
	}
	c.stats.Rounds++
	if flags&wire.FlagDone != 0 && c.cfg.Mode != Sync {
		w.pollAt = c.tick + uint64(c.cfg.RetryTicks)/8
	}
	return true
}

// sizeParts makes each owner's part of round g's push, and of the wanted
// keys of batch nb, in pushScratch.
func (w *worker) sizeParts(b, nb *batch, g *computedGrad, idx []int, n int) {
	c := w.c
	width := c.xw // (a window's rows are wide: weights and optimizer state)
	// Each owner's part of the push goes into slices of its own, sized by
	// a count first: the requests keep them (for resends), so nothing is
	// copied twice (BenchmarkWindowRound). The parts are cut from one
	// slice per kind, each part's capacity its own count (three-index
	// slices: an append past it cannot reach the next part), so a push
	// allocates five slices whatever its owners (TestWindowRoundAllocations).
	// They are not reused: the requests and the messages sent keep them
	// until the owners answer (and this peer's own owner keeps its part's
	// rows and shards in its contribution until the round is applied).
	w.scratch.split = grow(w.scratch.split, n)
	w.scratch.wantBuf = grow(w.scratch.wantBuf, n)
	w.scratch.posBuf = grow(w.scratch.posBuf, n)
	w.scratch.shardBuf = grow(w.scratch.shardBuf, n)
	w.scratch.counts = grow(w.scratch.counts, 3*n)
	clear(w.scratch.counts)
	rows, wants, shards := w.scratch.counts[:n], w.scratch.counts[n:2*n], w.scratch.counts[2*n:]
	// Each key's owner is looked up once, here, for splitGrad and
	// nextWorkset.
	if b != nil && g.grad != nil {
		w.scratch.rowOwner = ownersOf(w.scratch.rowOwner, b.keys, idx, c.mask, rows)
	}
	if nb != nil && c.cfg.Gather == Need {
		w.scratch.wantOwner = ownersOf(w.scratch.wantOwner, nb.keys, idx, c.mask, wants)
	}
	for s := range c.shards {
		shards[idx[s]]++
	}
	nr, nw := sum(rows), sum(wants)
	keys, vals := make([]uint32, nr), make([]float32, nr*width)
	want, pos := make([]uint32, nw), make([]int32, nw)
	shardList := make([]uint32, c.shards)
	for i := range n {
		w.scratch.split[i] = model.Sparse{Idx: keys[:0:rows[i]], Val: vals[: 0 : rows[i]*width]}
		keys, vals = keys[rows[i]:], vals[rows[i]*width:]
		w.scratch.wantBuf[i], w.scratch.posBuf[i] = want[:0:wants[i]], pos[:0:wants[i]]
		want, pos = want[wants[i]:], pos[wants[i]:]
		w.scratch.shardBuf[i] = shardList[:0:shards[i]]
		shardList = shardList[shards[i]:]
	}
	for s := range c.shards {
		w.scratch.shardBuf[idx[s]] = append(w.scratch.shardBuf[idx[s]], uint32(s))
	}
}

// sum is the sum of counts.
func sum(counts []int) int {
	n := 0
	for _, k := range counts {
		n += k
	}
	return n
}

// splitGrad splits round g's gradient (or window's changes) of batch b
// into the owners' parts: the examples it counts, and FlagDone for a
// worker with no batch left.
func (w *worker) splitGrad(b *batch, g *computedGrad, cur *tconf) (examples uint64, flags wire.CoreFlags) {
	c := w.c
	width := c.xw
	if b != nil && g.grad == nil {
		// A batch the driver dropped: a push of nothing, so the round
		// goes on without its examples (Computed).
	} else if b != nil {
		examples = uint64(b.examples)
		if (c.cfg.Combine == Mean || c.cfg.Combine == Capped) && c.cfg.Mode != Sync {
			// Ssp and async owners apply each window's changes as they
			// come: the mean over N workers is each one's weight changes
			// over N, scaled here once (combine.go, Mean); Capped scales
			// them by min(N, CappedFactor)/N.
			n := float32(max(1, len(cur.Members)))
			if c.cfg.Combine == Capped {
				n /= min(n, CappedFactor)
			}
			for i := range b.keys {
				for j := range c.width {
					g.grad[i*width+j] /= n
				}
			}
		}
		splitRows(w.scratch.split, b.keys, w.scratch.rowOwner, g.grad, width)
		c.stats.Examples += examples
	} else {
		flags |= wire.FlagDone
	}
	return examples, flags
}

// ownersOf sets own[i] to the index idx gives the shard of keys[i] (its
// owner's), counting each owner's keys in count, and returns own.
func ownersOf(own, keys []uint32, idx []int, mask uint32, count []int) []uint32 {
	own = grow(own, len(keys))
	for i, k := range keys {
		o := idx[k&mask]
		own[i] = uint32(o)
		count[o]++
	}
	return own
}

// splitRows appends row i of vals (width values) to the part of owner
// own[i] as row keys[i]. The parts have room for their rows (sizeParts):
// rows of 2 values (logreg's weight and AdaGrad's accumulator) are
// assigned rather than copied.
func splitRows(parts []model.Sparse, keys, own []uint32, vals []float32, width int) {
	own = own[:len(keys)]
	if width == 2 {
		vals = vals[:2*len(keys)]
		for i, k := range keys {
			p := &parts[own[i]]
			p.Idx = append(p.Idx, k)
			p.Val = append(p.Val, vals[2*i], vals[2*i+1])
		}
		return
	}
	for i, k := range keys {
		parts[own[i]].Append(k, vals[i*width:(i+1)*width])
	}
}

// nextWorkset is the workset that waits for the values of round next's
// batch nb (a barrier only without one), with each owner's wanted keys
// in pushScratch; nil for a leaver that stops before next.
func (w *worker) nextWorkset(nb *batch, next uint64, n int) *workset {
	c := w.c
	width := c.xw
	var ws *workset
	if nb != nil && !w.stoppedAt(next) {
		ws = &workset{round: next, keys: nb.keys, pending: n, through: Final}
		if c.cfg.Gather == Need {
			ws.vals = reuse(w.scratch.vals, len(nb.keys)*width)
			w.scratch.vals = nil
			want, pos := w.scratch.wantBuf, w.scratch.posBuf
			for i, k := range nb.keys {
				o := w.scratch.wantOwner[i]
				want[o] = append(want[o], k)
				pos[o] = append(pos[o], int32(i))
			}
		}
	} else if !w.stoppedAt(next) {
		ws = &workset{round: next, pending: n, through: Final} // a barrier only
	}
	if ws != nil {
		w.ws[next] = ws
	}
	return ws
}

// sendPushes sends each owner its part of round g's push, which asks for
// its values of round next.
func (w *worker) sendPushes(owners []string, g *computedGrad, next uint64, b *batch, ws *workset, examples uint64, flags wire.CoreFlags) {
	c := w.c
	for i, o := range owners {
		r := &request{
			id: w.newReq(), to: o, op: wire.CorePush, flags: flags, round: g.round, through: w.throughFor(next),
			examples: examples, shards: w.scratch.shardBuf[i], ws: ws,
		}
		if b != nil && g.grad != nil {
			r.rows = w.scratch.split[i]
		}
		if ws != nil && c.cfg.Gather == Need {
			r.want, r.pos = w.scratch.wantBuf[i], w.scratch.posBuf[i]
		}
		w.scratch.split[i], w.scratch.wantBuf[i], w.scratch.posBuf[i], w.scratch.shardBuf[i] = model.Sparse{}, nil, nil, nil // (the request's now)
		if flags&wire.FlagDone != 0 && c.cfg.Mode != Sync {
			r.through = 0
		}
		w.reqs[r.id] = r
		w.sendReq(r)
	}
}

// pullRound asks for the values of round r's batch without a contribution
// (the first rounds of a worker).
func (w *worker) pullRound(r uint64) {
	c := w.c
	b := w.batchOf(r)
	ws := &workset{round: r, through: Final}
	w.ws[r] = ws
	if b == nil {
		return // no data: nothing to wait for
	}
	ws.keys = b.keys
	// The values as of round r's start are where round r is applied: its
	// owner cannot apply it before this worker contributes, and a shard
	// handed over at round r arrives there as of exactly that point.
	vr := r
	owners, idx := w.owners(vr, nil, nil)
	if c.cfg.Gather == Full {
		// The first round reads the read copy: it must hold every shard
		// as of the start (a joiner copies it).
		if r == 0 || c.cfg.Initial != nil && r == c.cfg.Start {
			return
		}
		for i, o := range owners {
			var shards []uint32
			for s := range c.shards {
				if idx[s] == i {
					shards = append(shards, uint32(s))
				}
			}
			req := &request{id: w.newReq(), to: o, op: wire.CorePull, flags: wire.FlagAll, round: vr, through: w.throughFor(r), shards: shards, ws: ws}
			ws.pending++
			w.reqs[req.id] = req
			w.sendReq(req)
		}
		return
	}
	ws.vals = make([]float32, len(b.keys)*c.xw)
	wants, pos, shards := w.splitByOwner(b.keys, idx, len(owners))
	for i, o := range owners {
		if len(wants[i]) == 0 {
			continue
		}
		req := &request{id: w.newReq(), to: o, op: wire.CorePull, round: vr, through: w.throughFor(r), shards: shards[i], want: wants[i], pos: pos[i], ws: ws}
		ws.pending++
		w.reqs[req.id] = req
		w.sendReq(req)
	}
}

// splitByOwner splits keys by the owner index idx gives each shard (of n
// owners): per owner its keys, their positions in keys, and its shards.
func (w *worker) splitByOwner(keys []uint32, idx []int, n int) (wants [][]uint32, pos [][]int32, shards [][]uint32) {
	c := w.c
	wants, pos, shards = make([][]uint32, n), make([][]int32, n), make([][]uint32, n)
	for s := range c.shards {
		shards[idx[s]] = append(shards[idx[s]], uint32(s))
	}
	for i, k := range keys {
		o := idx[c.shardOf(k)]
		wants[o] = append(wants[o], k)
		pos[o] = append(pos[o], int32(i))
	}
	return wants, pos, shards
}

func (w *worker) newReq() uint64 {
	w.nextReq++
	return w.nextReq
}

func (w *worker) dropBatch(r uint64) {
	w.batches = slices.DeleteFunc(w.batches, func(b *batch) bool { return b.round <= r })
}

// sendReq sends (or sends again) request r.
func (w *worker) sendReq(r *request) {
	c := w.c
	r.sentAt = c.tick
	msg := &wire.Core{Op: r.op, Flags: r.flags, Round: r.round, Through: r.through, Req: r.id,
		Examples: r.examples, Shards: r.shards, Want: r.want}
	if r.op == wire.CorePush {
		msg.Rows, msg.RowWidth = r.rows, c.xw
	}
	if r.op == wire.CoreHash {
		msg.Flags &^= wire.FlagReply
	}
	c.send(r.to, msg)
}

// reply takes an owner's answer.
func (w *worker) reply(from string, msg *wire.Core) {
	c := w.c
	r := w.reqs[msg.Req]
	if r == nil || r.to != from {
		if r == nil && msg.Req <= w.nextReq && msg.Req > reqBase(c.cfg.ID) {
			c.stats.Stale++ // answered twice (a request sent again)
			return
		}
		c.stats.Rejected++
		return
	}
	if msg.Flags&wire.FlagRefused != 0 {
		// The owner's newer configuration removed this peer as dead (it
		// was cut off). Believe a member of this peer's own newest
		// configuration only.
		if cur := c.cs.cur(); msg.Config > cur.ID && cur.isMember(from, msg.Member) && !c.ag.isVoter() {
			c.fail(ErrRemoved) // (a voter learns it from raft, and lingers)
		}
		return
	}
	if msg.Flags&wire.FlagMoved != 0 {
		c.stats.Moved++
		w.reroute(r, msg.Shards)
		return
	}
	// An answer names the shards it answers when they are fewer than the
	// request's (the owner said "moved" for the others, in a message that
	// may come after this one, or before this worker knew why): those
	// stay asked, under this request's number, for the "moved" to move
	// or the retry to ask again. Taking the answer for the whole request
	// lost the others' contribution (an async leave across processes: a
	// shard's new primary waited forever for a worker's round).
	shards, want, pos := r.shards, r.want, r.pos
	partial := len(msg.Shards) > 0 && !slices.Equal(msg.Shards, r.shards)
	if partial {
		if !subset(msg.Shards, r.shards) {
			c.stats.Stale++ // (answered already, or not asked of this owner)
			return
		}
		shards = msg.Shards
		want, pos = w.wantsIn(r, shards)
	}
	width := c.width
	switch {
	case r.fetch != nil && r.fetch.all:
		// (No rows, no width: the wire codec keeps one form of "no rows".)
		if msg.Flags&wire.FlagRows == 0 || msg.Rows.Len() > 0 && msg.RowWidth != width || !w.rowsIn(&msg.Rows, shards) {
			c.stats.Rejected++
			return
		}
		r.fetch.rows.Idx = append(r.fetch.rows.Idx, msg.Rows.Idx...)
		r.fetch.rows.Val = append(r.fetch.rows.Val, msg.Rows.Val...)
		if c.cfg.Gather == Full {
			// The read copy has them too (a joiner admitted as the run
			// ended never gathered it).
			c.o.setRows(&msg.Rows)
		}
	case msg.Flags&wire.FlagRows != 0:
		// Full gather: rows of the answering owner's shards, into the read
		// copy (never over rows this peer holds: its own are newer).
		if msg.Rows.Len() > 0 && msg.RowWidth != width || !w.rowsIn(&msg.Rows, shards) {
			c.stats.Rejected++
			return
		}
		c.o.setRows(&msg.Rows)
		if c.cfg.Trace != nil {
			c.trace(TraceEvent{Kind: TraceRows, Shards: shards, Round: r.round, Peer: from, Keys: msg.Rows.Idx})
		}
	default:
		// Values are wide in windows (weights, then optimizer state): a
		// workset keeps them so, a fetch the weights.
		xw := c.xw
		if len(msg.Values) != len(want)*xw {
			c.stats.Rejected++
			return
		}
		if r.ws != nil {
			for i, p := range pos {
				copy(r.ws.vals[int(p)*xw:int(p+1)*xw], msg.Values[i*xw:(i+1)*xw])
			}
		} else if r.fetch != nil {
			for i, p := range pos {
				copy(r.fetch.vals[int(p)*width:int(p+1)*width], msg.Values[i*xw:i*xw+width])
			}
		}
	}
	final := msg.Flags&wire.FlagFinal != 0
	if ws := r.ws; ws != nil {
		ws.through = min(ws.through, msg.Through)
		ws.final = ws.final || final
	}
	if f := r.fetch; f != nil {
		f.final = f.final || final
	}
	if final && (r.op == wire.CorePush || r.ws != nil) && !w.final {
		w.final = true
		c.event(Event{Kind: EvFinal})
	}
	if partial {
		w.narrow(r, msg.Shards)
		return
	}
	delete(w.reqs, r.id)
	if r.ws != nil {
		r.ws.pending--
	}
	if r.fetch != nil {
		r.fetch.pending--
	}
}

// narrow takes the answered shards out of request r: the rest stay asked.
func (w *worker) narrow(r *request, answered []uint32) {
	c := w.c
	var rest []uint32
	for _, s := range r.shards {
		if _, ok := slices.BinarySearch(answered, s); !ok {
			rest = append(rest, s)
		}
	}
	r.shards = rest
	if r.rows.Len() > 0 {
		r.rows = filterRows(&r.rows, rest, c.xw, c.mask)
	}
	r.want, r.pos = w.wantsIn(r, rest)
}

// wantsIn returns the keys request r wants from shards (ascending), with
// their positions in its batch.
func (w *worker) wantsIn(r *request, shards []uint32) (want []uint32, pos []int32) {
	for i, k := range r.want {
		if _, ok := slices.BinarySearch(shards, uint32(w.c.shardOf(k))); ok {
			want = append(want, k)
			pos = append(pos, r.pos[i])
		}
	}
	return want, pos
}

// subset reports whether every element of a (ascending) is in b
// (ascending).
func subset(a, b []uint32) bool {
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			return false
		}
	}
	return true
}

// rowsIn reports whether every row of rows lies in one of shards.
func (w *worker) rowsIn(rows *model.Sparse, shards []uint32) bool {
	for _, k := range rows.Idx {
		if _, ok := slices.BinarySearch(shards, uint32(w.c.shardOf(k))); !ok {
			return false
		}
	}
	return true
}

// reroute sends the part of request r for shards (all of its shards when
// nil) to their current owner, as a new request, and narrows r to the rest.
func (w *worker) reroute(r *request, moved []uint32) {
	c := w.c
	if moved == nil {
		moved = r.shards
	}
	width := c.xw // (push rows: wide in windows)
	byOwner := map[string][]uint32{}
	var keep []uint32
	for _, s := range r.shards {
		if _, ok := slices.BinarySearch(moved, s); !ok {
			keep = append(keep, s)
			continue
		}
		o := w.routeOf(int(s), r.round)
		if o == r.to {
			// Its owner says moved, and this worker's newest configuration
			// says not: the owner applied one this peer has not yet. Kept;
			// the owner's answer for the other shards narrows the request
			// to these (reply), which the configuration reroutes
			// (rerouteAll) or the retry asks again.
			keep = append(keep, s)
			continue
		}
		byOwner[o] = append(byOwner[o], s)
	}
	if len(byOwner) == 0 {
		if len(moved) > 0 && len(keep) == len(r.shards) {
			r.tries++ // its owner says moved, we say not: ask again later
		}
		return
	}
	owners := make([]string, 0, len(byOwner))
	for o := range byOwner {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	for _, o := range owners {
		ss := byOwner[o]
		nr := &request{id: w.newReq(), to: o, op: r.op, flags: r.flags | wire.FlagResend, round: r.round,
			through: r.through, examples: r.examples, shards: ss, ws: r.ws, fetch: r.fetch}
		nr.rows = filterRows(&r.rows, ss, width, c.mask)
		nr.want, nr.pos = w.wantsIn(r, ss)
		if nr.ws != nil {
			nr.ws.pending++
		}
		if nr.fetch != nil {
			nr.fetch.pending++
		}
		w.reqs[nr.id] = nr
		c.stats.Resent++
		w.sendReq(nr)
	}
	if len(keep) == 0 {
		delete(w.reqs, r.id)
		if r.ws != nil {
			r.ws.pending--
		}
		if r.fetch != nil {
			r.fetch.pending--
		}
		return
	}
	r.shards = keep
	r.rows = filterRows(&r.rows, keep, width, c.mask)
	r.want, r.pos = w.wantsIn(r, keep)
}

// filterRows returns the rows of rs in shards (sorted).
func filterRows(rs *model.Sparse, shards []uint32, width int, mask uint32) model.Sparse {
	var out model.Sparse
	for i, k := range rs.Idx {
		if _, ok := slices.BinarySearch(shards, k&mask); ok {
			out.Append(k, rs.Val[i*width:(i+1)*width])
		}
	}
	return out
}

// rerouteAll moves every outstanding request whose shards now route
// elsewhere (a configuration took effect), hash requests included: a final
// hash fetch whose owner crashed asks the shards' new owner
// (TestFinalHashFetchOutlivesACrashedOwner).
func (w *worker) rerouteAll() {
	for _, id := range sortedKeys(w.reqs) {
		if r := w.reqs[id]; r != nil {
			w.reroute(r, nil)
		}
	}
}

// fetch starts a driver fetch.
func (w *worker) fetch(id uint64, keys []uint32, all, hashes bool) {
	f := &fetch{id: id, keys: slices.Clone(keys), all: all, hashes: hashes}
	if hashes {
		f.hashOut = make([]uint64, w.c.shards)
	}
	w.fetches = append(w.fetches, f)
}

// serveFetches sends fetches not sent yet (once values of the current
// round exist) and delivers those answered.
func (w *worker) serveFetches() bool {
	c := w.c
	progress := false
	if !w.started {
		return false
	}
	for _, f := range w.fetches {
		if f.sent {
			continue
		}
		f.sent = true
		progress = true
		through := uint64(0)
		if c.cfg.Mode == Sync {
			through = w.clock
		}
		if w.final {
			through = Final
		}
		vr := w.clock
		owners, idx := w.owners(vr, nil, nil)
		if !w.final && c.cfg.Mode != Sync {
			owners, idx = w.owners(0, nil, nil)
		}
		if f.hashes || f.all {
			for i, o := range owners {
				var shards []uint32
				for s := range c.shards {
					if idx[s] == i {
						shards = append(shards, uint32(s))
					}
				}
				r := &request{id: w.newReq(), to: o, op: wire.CorePull, flags: wire.FlagAll, round: vr, through: through, shards: shards, fetch: f}
				if f.hashes {
					r.op, r.flags = wire.CoreHash, 0
				}
				f.pending++
				w.reqs[r.id] = r
				w.sendReq(r)
			}
			continue
		}
		f.vals = make([]float32, len(f.keys)*c.width)
		wants, pos, shards := w.splitByOwner(f.keys, idx, len(owners))
		for i, o := range owners {
			if len(wants[i]) == 0 {
				continue
			}
			r := &request{id: w.newReq(), to: o, op: wire.CorePull, round: vr, through: through, shards: shards[i], want: wants[i], pos: pos[i], fetch: f}
			f.pending++
			w.reqs[r.id] = r
			w.sendReq(r)
		}
	}
	keep := w.fetches[:0]
	for _, f := range w.fetches {
		if f.sent && f.pending == 0 {
			res := FetchResult{ID: f.id, Keys: f.keys, Values: f.vals, Rows: f.rows, Final: f.final || w.final}
			if f.hashes {
				res.Hashes = f.hashOut
			}
			if f.all {
				sortRows(&res.Rows, c.width)
			}
			c.rd.Fetched = append(c.rd.Fetched, res)
			progress = true
			continue
		}
		keep = append(keep, f)
	}
	w.fetches = keep
	return progress
}

// hashReply takes an owner's shard hashes.
func (w *worker) hashReply(from string, msg *wire.Core) {
	c := w.c
	r := w.reqs[msg.Req]
	if r == nil || r.to != from || r.op != wire.CoreHash || r.fetch == nil {
		c.stats.Rejected++
		return
	}
	for _, h := range msg.Clocks {
		if _, ok := slices.BinarySearch(r.shards, uint32(h.Member)); !ok {
			c.stats.Rejected++
			return
		}
	}
	for _, h := range msg.Clocks {
		r.fetch.hashOut[h.Member] = h.Clock
	}
	answered := make([]uint32, len(msg.Clocks))
	for i, h := range msg.Clocks {
		answered[i] = uint32(h.Member)
	}
	slices.Sort(answered)
	if answered = slices.Compact(answered); len(answered) < len(r.shards) {
		// The owner said "moved" for the others (see reply): they stay
		// asked.
		w.narrow(r, answered)
		return
	}
	delete(w.reqs, r.id)
	r.fetch.pending--
}

// sortRows sorts rows (gathered from several owners) by index.
func sortRows(rows *model.Sparse, width int) {
	n := rows.Len()
	if n < 2 {
		return
	}
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	sort.Slice(perm, func(a, b int) bool { return rows.Idx[perm[a]] < rows.Idx[perm[b]] })
	var out model.Sparse
	for _, i := range perm {
		out.Append(rows.Idx[i], rows.Val[i*width:(i+1)*width])
	}
	*rows = out
}

// reuse returns buf cleared and resliced to n elements when it has room
// for them, else a new slice of n zeros.
func reuse[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	buf = buf[:n]
	clear(buf)
	return buf
}

func grow[T any](s []T, n int) []T {
	if len(s) < n {
		s = append(s, make([]T, n-len(s))...)
	}
	return s
}
