package sim

import (
	"fmt"
	"slices"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// check names one assertion of a run; checks says what each asserts.
type check int

const (
	chkStart check = iota
	chkEncode
	chkDecode
	chkCoreError
	chkAgreement
	chkApplyOnce
	chkHandoff
	chkRestart
	chkComplete
	chkStaleness
	chkPrimaryRuns
	chkPrimaryHolds
	chkBuffers
	chkFetched
	chkOneModel
	chkReplicas
	chkReadCopy
	chkSerial
	chkLoss
	chkQuorum
	chkLiveness
	numChecks
)

// checkDoc is a check's invariant (I1-I10 as docs/protocol.md numbers
// them under Invariants; "run" for the simulator's own), name and what it
// asserts.
type checkDoc struct{ inv, name, doc string }

// checks is every check a run makes, in the order the package doc lists
// them (TestChecksListed keeps the two alike).
var checks = [numChecks]checkDoc{
	chkStart:        {"run", "start", "every process's core accepts the configuration the run starts it with (train.New)."},
	chkEncode:       {"run", "encode", "every message a core sends encodes with the wire codec, as do the variants Options.Parts measures."},
	chkDecode:       {"run", "decode", "with Options.Encode, every encoded message decodes."},
	chkCoreError:    {"run", "core-error", "a core stops only with an error a peer may stop with: removed (the peer restarts), no quorum (I9), refused or alone at its start."},
	chkAgreement:    {"I1", "agreement", "every configuration ID means the same configuration (start, members, crashed, left) at every peer that applies it."},
	chkApplyOnce:    {"I2", "apply-once", "no holder of a shard applies a worker's contribution to a round twice."},
	chkHandoff:      {"I2", "handoff", "a peer installs a shard only from a process that sent it, and takes over the sender's ledger as of the send."},
	chkRestart:      {"I2", "restart", "a shard restarts from nothing (every holder gone) only where that can happen: without replicas, with more than one crash or restart scheduled, or after a configuration that declares as many members crashed as a shard has copies."},
	chkComplete:     {"I2", "complete", "at the end the copy checked for each shard has applied every round of every worker still in the run (not crashed, removed or refused) up to the end of its data, unless a shard was lost where losses are allowed (restart)."},
	chkStaleness:    {"I3", "staleness", "in ssp no round was computed with values more than Staleness rounds stale (every core's Stats.MaxStaleness)."},
	chkPrimaryRuns:  {"I4", "primary-runs", "at the end each shard's primary in the final configuration runs or finished (once the values are final a live holder of the shard may stand in for it)."},
	chkPrimaryHolds: {"I4", "primary-holds", "the copy checked for each shard at the end holds the shard."},
	chkBuffers:      {"I5", "buffers", "every 50 ticks, no queue of a running core (Core.Sizes) holds more than 200 plus 50 per process started."},
	chkFetched:      {"I6", "fetched", "every peer that finished, and did not leave, fetched the final values."},
	chkOneModel:     {"I6", "one-model", "every peer that finished fetched the same model, but for shards restarted from nothing after the values were final."},
	chkReplicas:     {"I6", "replicas", "every replica that holds a shard at the end is bit-identical to the copy checked for it."},
	chkReadCopy:     {"I6", "read-copy", "with the full gather every finished peer's read copy equals the model it fetched."},
	chkSerial:       {"I7", "serial", "a sync run with no crash, restart, join, leave or partition (drops, duplicates and delays only) ends bit-identical to a serial run of the same rounds."},
	chkLoss:         {"I8", "loss", "a round applied without a worker's contribution is a violation when a live process's copy of the shard holds that contribution."},
	chkQuorum:       {"I9", "quorum", "a peer stops with ErrNoQuorum only when most of its raft voters are not running."},
	chkLiveness:     {"I10", "liveness", "every process finishes before MaxTicks (the faults stop after Chaos ticks): none still runs at the end."},
}

func (k check) String() string { return checks[k].name }

// coreView is what the checker reads of a core: queries only, so that
// checking a run changes nothing its cores decide.
type coreView interface {
	ConfigID() uint64
	Members() []string
	Primaries() []string
	Holders() [][]string
	Holds(shard int) bool
	FirstRound() uint64
	Round() uint64
	Voters() []uint64
	Sizes() map[string]int
	String() string
	Debug() string
}

var _ coreView = (*train.Core)(nil)

// view is p's core as the checker reads it.
func (p *proc) view() coreView { return p.core }

// ledger is what a copy of a shard has applied: (worker member ID, round).
type ledger map[[2]uint64]bool

// restartAt is a shard restarted from nothing, at checker.order.
type restartAt struct{ shard, at int }

// checker asserts the run's invariants (checks). The run tells it what the
// cores report (events, trace events, errors) and hands it the processes
// at the end; it reads them through their identity, state flags, models,
// fetched values and cores (coreView), keeps its own books (the ledger of
// every copy of every shard, the configurations seen, the shards lost)
// and reports through the recorder. It knows nothing of the network, the
// fault schedule or the accounting.
type checker struct {
	rec       *recorder
	mode      train.Mode
	staleness int
	gather    train.Gather
	replicas  int
	shards    int
	perRound  int // rows of a round
	total     int // rows of all epochs
	// serialRef asks for the serial reference (chkSerial), serial for the
	// model of the serial run; newModel makes an empty model.
	serialRef bool
	serial    func() *model.Model
	newModel  func() *model.Model

	confs       map[uint64]string // configuration ID -> what it means
	ledgers     map[*proc]map[int]ledger
	sent        map[string]ledger // "peer/member/req" -> the ledger sent
	restarted   map[*proc][]int   // shards restarted from nothing, judged in handle
	finalPrims  map[*proc][]string
	lossAllowed bool // every holder of a shard may have gone
	anyLoss     bool // a shard or a contribution was lost
	order       int  // counts restarts and the first final values, in the order they happen
	finalAt     int  // order when a peer first had the values final (0: none yet)
	restarts    []restartAt

	// Found at the end, for the Result: the final model's hash and the
	// primaries per member.
	model uint64
	owned map[string]int
}

func newChecker(o Options, rec *recorder, w *workload, serial func() *model.Model) *checker {
	f := o.Faults
	return &checker{rec: rec, mode: o.Mode, staleness: o.Staleness, gather: o.Gather, replicas: o.Replicas, shards: o.Shards,
		perRound: w.perRound(), total: w.total(),
		serialRef: o.Mode == train.Sync && f.Crashes+f.Restarts+f.Joins+f.Leaves+f.Partitions == 0,
		serial:    serial, newModel: w.newModel,
		confs: map[uint64]string{}, ledgers: map[*proc]map[int]ledger{}, sent: map[string]ledger{},
		restarted: map[*proc][]int{}, finalPrims: map[*proc][]string{},
		lossAllowed: o.Replicas < 2 || f.Crashes+f.Restarts > 1,
	}
}

// fail reports a violation of check k, named as the package doc lists it
// (TestViolationNamesItsCheck).
func (c *checker) fail(k check, format string, args ...any) {
	c.rec.violate(fmt.Sprintf("%s (%s)", checks[k].name, checks[k].inv), format, args...)
}

func (c *checker) logf(format string, args ...any) { c.rec.logf(format, args...) }

// --- while the run goes ---

// onConfig checks a configuration p applied against the others of its ID.
func (c *checker) onConfig(p *proc, e train.Event) {
	fp := fmt.Sprint(e.Start, e.Members, e.Crashed, e.Left, e.Text)
	if old, ok := c.confs[e.Config]; ok && old != fp {
		c.fail(chkAgreement, "configuration %d differs: %s at %s, %s before", e.Config, fp, p.peer, old)
	}
	c.confs[e.Config] = fp
	if len(e.Crashed) >= max(1, c.replicas) {
		c.lossAllowed = true // every holder of some shard may be among them
	}
}

// onFinal notes that p's core has the final round: its primaries then.
func (c *checker) onFinal(p *proc) {
	if c.finalAt == 0 {
		c.order++
		c.finalAt = c.order
	}
	c.finalPrims[p] = p.view().Primaries()
}

// judgeRestarts checks the shards p restarted from nothing since the last
// call, now that the configuration that lost them is seen (chkRestart).
func (c *checker) judgeRestarts(p *proc) {
	if !c.lossAllowed {
		for _, sh := range c.restarted[p] {
			c.fail(chkRestart, "%s/%x restarted shard %d from nothing with replicas", p.peer, p.member&0xffff, sh)
		}
	}
	c.restarted[p] = c.restarted[p][:0]
}

// onNoQuorum checks that p stopped with ErrNoQuorum rightly: most of its
// voters have no running process.
func (c *checker) onNoQuorum(p *proc, err error, procs []*proc) {
	voters, live := p.view().Voters(), 0
	for _, id := range voters {
		for _, q := range procs {
			if q.member == id && q.running && !q.crashed {
				live++
			}
		}
	}
	if 2*live > len(voters) {
		c.fail(chkQuorum, "%s/%x: %v, with %d of its %d voters running", p.peer, p.member&0xffff, err, live, len(voters))
	}
}

// onTrace audits applies and handoffs: a per-holder ledger of (worker,
// round) per shard.
func (c *checker) onTrace(p *proc, e train.TraceEvent, procs []*proc) {
	switch e.Kind {
	case train.TraceApply:
		c.applied(p, e)
	case train.TraceSend:
		for _, sh := range e.Shards {
			snap := ledger{}
			for k := range c.ledgers[p][int(sh)] {
				snap[k] = true
			}
			c.sent[fmt.Sprintf("%s/%d/%d", p.peer, p.member, e.Req)] = snap
		}
	case train.TraceInstall:
		c.installed(p, e, procs)
	case train.TracePromote:
		for _, sh := range e.Shards {
			c.ledgerOf(p)[int(sh)] = ledger{}
			c.anyLoss = true
			c.logf("%s/%x: shard %d lost, restarted", p.peer, p.member&0xffff, sh)
			// (With the full gather a restarted shard keeps its weights from
			// the read copy: only its optimizer state is lost.)
			if c.gather == train.Need {
				// Judged once the configuration that lost it is seen (its
				// event follows this trace): every holder may have gone.
				c.restarted[p] = append(c.restarted[p], int(sh))
				c.order++
				c.restarts = append(c.restarts, restartAt{int(sh), c.order})
			}
		}
	case train.TraceFree:
		for _, sh := range e.Shards {
			delete(c.ledgers[p], int(sh))
		}
	case train.TraceLost:
		c.lost(p, e, procs)
	}
}

func (c *checker) ledgerOf(p *proc) map[int]ledger {
	l := c.ledgers[p]
	if l == nil {
		l = map[int]ledger{}
		c.ledgers[p] = l
	}
	return l
}

// applied books an apply (chkApplyOnce).
func (c *checker) applied(p *proc, e train.TraceEvent) {
	for _, sh := range e.Shards {
		l := c.ledgerOf(p)[int(sh)]
		if l == nil {
			l = ledger{}
			c.ledgerOf(p)[int(sh)] = l
		}
		for _, m := range e.Members {
			k := [2]uint64{m, e.Round}
			if l[k] {
				c.fail(chkApplyOnce, "%s/%x applied worker %x's round %d to shard %d twice (replica %v)", p.peer, p.member&0xffff, m&0xffff, e.Round, sh, e.Replica)
			}
			l[k] = true
		}
	}
}

// installed takes over the ledger the sender of an installed shard sent
// (chkHandoff).
func (c *checker) installed(p *proc, e train.TraceEvent, procs []*proc) {
	for _, sh := range e.Shards {
		var snap ledger
		for _, q := range procs {
			if q.peer == e.Peer {
				if l, ok := c.sent[fmt.Sprintf("%s/%d/%d", q.peer, q.member, e.Req)]; ok {
					snap = l
				}
			}
		}
		if snap == nil {
			c.fail(chkHandoff, "%s installs shard %d from %s (req %d), which never sent it", p.peer, sh, e.Peer, e.Req)
			continue
		}
		l := ledger{}
		for k := range snap {
			l[k] = true
		}
		c.ledgerOf(p)[int(sh)] = l
	}
}

// lost checks a round applied without some answered contributions: allowed
// only if no live process's copy has them; one that does holds the round
// with them, and the copies fork (chkLoss).
func (c *checker) lost(p *proc, e train.TraceEvent, procs []*proc) {
	c.anyLoss = true
	for _, sh := range e.Shards {
		for _, q := range procs {
			if !q.running || q.crashed {
				continue
			}
			for _, m := range e.Members {
				if c.ledgers[q][int(sh)][[2]uint64{m, e.Round}] {
					c.fail(chkLoss, "%s/%x applied round %d to shard %d without worker %x's contribution, which %s/%x holds", p.peer, p.member&0xffff, e.Round, sh, m&0xffff, q.peer, q.member&0xffff)
				}
			}
		}
		c.logf("%s/%x: round %d of shard %d applied without %d answered contributions", p.peer, p.member&0xffff, e.Round, sh, len(e.Members))
	}
}

// buffers bounds the queues of every running core (chkBuffers); the run
// calls it every tick, it checks every 50th.
func (c *checker) buffers(tick int, procs []*proc) {
	if tick%50 != 0 {
		return
	}
	bound := 200 + 50*len(procs)
	for _, p := range procs {
		if !p.running {
			continue
		}
		for name, n := range p.view().Sizes() {
			if n > bound {
				c.fail(chkBuffers, "%s: %s holds %d (bound %d)", p.peer, name, n, bound)
			}
		}
	}
}

// --- at the end ---

// atEnd checks the end state of procs (every process the run started),
// each check a step: liveness, staleness, then, if every process that ran
// finished, one model, the read copies, every shard, the serial reference.
func (c *checker) atEnd(procs []*proc, maxStale uint64) {
	finished := c.liveness(procs)
	if c.mode == train.SSP && maxStale > uint64(c.staleness) {
		c.fail(chkStaleness, "a round was computed %d rounds stale, ssp bound %d", maxStale, c.staleness)
	}
	if len(finished) == 0 || c.rec.failed {
		return
	}
	models, ok := c.oneModel(finished)
	if !ok {
		return
	}
	if c.gather == train.Full {
		c.readCopies(finished, models[0])
	}
	if !c.everyShard(procs, finished) {
		return
	}
	if c.serialRef {
		c.reference()
	}
}

// liveness checks that every process still running finished
// (chkLiveness) and returns those that finished without leaving.
func (c *checker) liveness(procs []*proc) []*proc {
	var finished []*proc
	for _, p := range procs {
		if !p.running && !p.done {
			continue
		}
		if !p.done {
			c.fail(chkLiveness, "%s/%x did not finish: %s", p.peer, p.member&0xffff, p.view().String())
			c.logf("%s", p.view().Debug())
			continue
		}
		if !p.left {
			finished = append(finished, p)
		}
	}
	return finished
}

// oneModel checks that every finished peer fetched the same model, but
// for the shards lost and restarted from nothing after the values were
// final (chkFetched, chkOneModel), and returns the models fetched; ok is
// false if a peer has none.
//
// A peer that fetches such a shard after every holder of it is gone gets
// the restarted values (H10): the values the peers before it fetched went
// with those holders (h4/async/chaos seed 12 in TestFixedSeeds: the two
// holders of five shards finished and exited while cut off from the one
// member still waiting for an answer; they were removed as crashed and
// its fetch had the five shards from nothing). A fetch gathers its shards
// from several owners over time, so what counts is when the values went
// final, not when a fetch ended (h4/ssp/chaos seed 776: two peers had a
// shard's final values before it was lost, a third its restart, and all
// three fetches ended after the restart).
func (c *checker) oneModel(finished []*proc) (models []*model.Model, ok bool) {
	models = make([]*model.Model, len(finished))
	for i, p := range finished {
		if p.fetched == nil {
			c.fail(chkFetched, "%s finished without its final values", p.peer)
			return nil, false
		}
		m := c.newModel()
		for j, k := range p.fetched.Rows.Idx {
			copy(m.Row(k), p.fetched.Rows.Val[j:j+1])
		}
		models[i] = m
	}
	c.model = models[0].Hash()
	for j := 1; j < len(finished); j++ {
		h := models[j].Hash()
		for i := range j {
			if h == models[i].Hash() {
				continue
			}
			a, b := finished[i], finished[j]
			var lost, differ []int
			for sh := range c.shards {
				if models[i].ShardHash(sh) == models[j].ShardHash(sh) {
					continue
				}
				if c.restartedAfterFinal(sh) {
					lost = append(lost, sh)
				} else {
					differ = append(differ, sh)
				}
			}
			if len(differ) > 0 {
				c.fail(chkOneModel, "%s ends with model %x, %s with %x (shards %v differ)", b.peer, h, a.peer, models[i].Hash(), differ)
				break
			}
			c.logf("%s ends with model %x, %s with %x: shards %v were restarted from nothing after the values were final", b.peer, h, a.peer, models[i].Hash(), lost)
		}
	}
	return models, true
}

// restartedAfterFinal reports whether shard sh was restarted from nothing
// after a peer first had the values final.
func (c *checker) restartedAfterFinal(sh int) bool {
	return c.finalAt > 0 && slices.ContainsFunc(c.restarts, func(r restartAt) bool { return r.shard == sh && r.at > c.finalAt })
}

// readCopies checks, with the full gather, every finished peer's read copy
// against the final model (chkReadCopy).
func (c *checker) readCopies(finished []*proc, final *model.Model) {
	for _, p := range finished {
		h := p.m.Hash()
		if h == c.model {
			continue
		}
		var bad []int
		for sh := range c.shards {
			if p.m.ShardHash(sh) != final.ShardHash(sh) {
				bad = append(bad, sh)
			}
		}
		var rows []string
		for k := range uint32(final.Layout.Features) {
			if len(rows) < 4 && final.Row(k)[0] != p.m.Row(k)[0] {
				rows = append(rows, fmt.Sprintf("%d: %v vs %v", k, p.m.Row(k)[0], final.Row(k)[0]))
			}
		}
		c.fail(chkReadCopy, "%s's read copy %x differs from the primaries' model %x in shards %v (rows %v)", p.peer, h, c.model, bad, rows)
	}
}

// endState is the configuration the shards are checked against.
type endState struct {
	prims    []string   // the primaries of the final round (then moved: see holderAt)
	final    bool       // prims are those of the final round (EvFinal)
	owners   [][]string // holders per shard in the newest configuration a finished peer applied
	curPrims []string   // its primaries
	members  []string   // its members
}

// endStateOf reads the end state from the finished peers: the final
// primaries of the first, the holders of the newest configuration.
func (c *checker) endStateOf(finished []*proc) endState {
	ref := finished[0]
	st := endState{prims: ref.view().Primaries()}
	if fp := c.finalPrims[ref]; fp != nil {
		st.prims, st.final = fp, true // configurations after the final round only move shards the peers no longer need
	}
	last := ref
	for _, p := range finished {
		if p.view().ConfigID() > last.view().ConfigID() {
			last = p
		}
	}
	st.owners, st.curPrims, st.members = last.view().Holders(), last.view().Primaries(), last.view().Members()
	return st
}

// everyShard checks coverage (chkPrimaryRuns, chkPrimaryHolds), the
// replicas (chkReplicas) and completeness (chkComplete) of every shard,
// against the final configuration. It stops at the first shard that
// misses a contribution (false).
func (c *checker) everyShard(procs, finished []*proc) bool {
	st := c.endStateOf(finished)
	c.owned = map[string]int{}
	for _, pr := range st.prims {
		c.owned[pr]++
	}
	for sh := range c.shards {
		pp := c.holderAt(&st, sh, procs)
		if pp == nil {
			if !st.final {
				c.fail(chkPrimaryRuns, "shard %d's primary %s is not running", sh, st.prims[sh])
			}
			continue
		}
		if !pp.view().Holds(sh) {
			c.fail(chkPrimaryHolds, "shard %d's primary %s does not hold it", sh, st.prims[sh])
			continue
		}
		c.replicasOf(sh, pp, st.owners[sh][1:], st.prims[sh], procs)
		if !c.complete(sh, pp, st.prims[sh], procs) {
			return false
		}
	}
	return true
}

// live is the last process of peer among procs that runs or finished and
// did not crash (nil if none).
func live(procs []*proc, peer string) *proc {
	var pp *proc
	for _, q := range procs {
		if q.peer == peer && (q.running || q.done) && !q.crashed {
			pp = q
		}
	}
	return pp
}

// holderAt is the process whose copy of shard sh is checked: its final
// primary's, or once the values are final the holder a later
// configuration moved it to, or a live holder of it (setting st.prims[sh]
// to the peer chosen); nil if none.
func (c *checker) holderAt(st *endState, sh int, procs []*proc) *proc {
	pp := live(procs, st.prims[sh])
	if st.final && st.curPrims != nil && (pp == nil || !pp.view().Holds(sh) || !slices.Contains(st.members, st.prims[sh])) {
		// Moved after the final round (a crash): its holder now. (Its
		// final primary may have finished and exited before it was
		// declared crashed: h4/sync/chaos seed 134 in TestFixedSeeds
		// compared that peer's copy with the replica of the shard
		// restarted since. A shard a leave moves after the end need
		// not reach its new holder before the peers exit.)
		st.prims[sh] = st.curPrims[sh]
		pp = live(procs, st.prims[sh])
	}
	if st.final && (pp == nil || !pp.view().Holds(sh)) {
		// After the end a configuration that starts past the last
		// round moves shards nobody reads again: its handoffs need
		// not arrive before the peers exit, and a new holder may
		// wait for one as of a round that never runs (h4/sync/encoded
		// seed 768 in TestFixedSeeds: the joiner that held a shard's
		// final values awaited it as of the round after the last).
		// The shard is checked where a live peer holds it, one of its
		// holders first.
		owners := st.owners[sh]
		rank := func(q *proc) int {
			if i := slices.Index(owners, q.peer); i >= 0 {
				return i
			}
			return len(owners)
		}
		for _, q := range procs {
			if (q.running || q.done) && !q.crashed && q.view().Holds(sh) &&
				(pp == nil || !pp.view().Holds(sh) || rank(q) < rank(pp)) {
				pp, st.prims[sh] = q, q.peer
			}
		}
	}
	return pp
}

// replicasOf checks that every replica (among holders) that holds shard sh
// has pp's values (chkReplicas). Ssp and async replicas apply forwards in
// each worker's order, not the primary's: they end bit-identical only
// with the final values' copy (E9).
func (c *checker) replicasOf(sh int, pp *proc, replicas []string, prim string, procs []*proc) {
	lo, hi := pp.m.Layout.ShardRange(sh)
	for _, h := range replicas {
		q := live(procs, h)
		if q == nil || !q.view().Holds(sh) {
			continue
		}
		if !slices.Equal(q.m.W[lo:hi], pp.m.W[lo:hi]) {
			c.fail(chkReplicas, "shard %d: replica %s differs from primary %s", sh, h, prim)
		}
	}
}

// complete checks that pp's copy of shard sh applied every round of every
// worker still in the run, up to the end of its data (chkComplete); false
// at the first it misses.
func (c *checker) complete(sh int, pp *proc, prim string, procs []*proc) bool {
	led := c.ledgers[pp][sh]
	for _, q := range procs {
		if q.crashed || q.removed || q.refused || q.core == nil {
			continue
		}
		first := q.view().FirstRound()
		end := q.view().Round()
		data := first + uint64((min(q.pos, c.total)+c.perRound-1)/c.perRound)
		for r := first; r < min(end, data); r++ {
			if !led[[2]uint64{q.member, r}] && !(c.lossAllowed && c.anyLoss) {
				c.fail(chkComplete, "shard %d (at %s) misses worker %s/%x's round %d", sh, prim, q.peer, q.member&0xffff, r)
				return false
			}
		}
	}
	return true
}

// reference compares the run's model with a serial run of the same rounds
// (chkSerial).
func (c *checker) reference() {
	if h := c.serial().Hash(); h != c.model {
		c.fail(chkSerial, "the run's model %x differs from the serial reference %x", c.model, h)
	}
}
