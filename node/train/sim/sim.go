package sim

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"slices"
	"strings"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/ring"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// Options configure one simulated run.
type Options struct {
	Seed      uint64
	Mode      train.Mode
	Staleness int
	Gather    train.Gather
	Peers     int
	Replicas  int
	Shards    int
	VNodes    int
	// MaxLoadPercent is the ring's load bound (ring.Config); 0 means
	// ring.DefaultConfig's.
	MaxLoadPercent int
	// Master places every shard on one peer (ring.Master: the master
	// topology): peer00 while it is a member, else the first member.
	Master bool
	// Dim features; Rows per peer; Batch rows per round; Fields nonzeros
	// per row; Epochs over each peer's rows.
	Dim, Rows, Batch, Fields, Epochs int
	// LocalSteps, when above 1, makes a round a window of that many
	// batches (train.Config.LocalSteps): workers train them on their own
	// copy (window) and push the changes.
	LocalSteps int
	// LocalState, with windows, has each worker keep its own optimizer
	// state (train.Config.LocalState): a process trains its windows with
	// its own AdaGrad accumulators (zeros when it starts: a restarted or
	// joining peer has none), fetches and pushes weights only, and the
	// owners add the weights' changes alone.
	LocalState bool
	// Combine is how owners combine a sync round (train.Config.Combine):
	// with windows, Sum, Mean or Capped.
	Combine train.Combine
	Faults  Faults
	// MaxTicks bounds a run (a liveness failure past it).
	MaxTicks int
	// Steps is how many network steps a tick has (0 or 1: one). A message
	// takes at least a step, a gradient 0-2 steps: with Steps > 1 many
	// rounds go by between two ticks of the cores, as they do between
	// processes whose network answers in far less than a tick (10 ms;
	// loopback in a fraction of a millisecond), while retries, elections
	// and the membership still count ticks. A leave in async across real
	// processes lost a worker's round in that regime, which one step per
	// tick never reached.
	Steps int
	// Record keeps a readable trace of the run's events (Result.Trace).
	Record bool
	// Encode sends every message through the wire codec (slower).
	Encode bool
	// Parts, with Bytes, splits the training traffic into its parts
	// (Result.Parts); it encodes every message three more times.
	Parts bool
	// Bytes counts the bytes each peer receives, as encoded on the wire
	// (the wire codec's encoding, without the link's framing). Unless
	// Encode is set too, the message delivered is the original's clone.
	Bytes bool
	// DumpAt, when > 0, logs every core's state at that tick (Record).
	DumpAt int
	// WatchShard, when > 0, logs every trace event that concerns shard
	// WatchShard-1 (Record).
	WatchShard int
	// Fingerprint folds every message sent (tick, sender, receiver, its
	// wire encoding) and every core trace event into Result.Fingerprint:
	// two commits whose cores decide alike give equal fingerprints
	// (TestTraceDigest).
	Fingerprint bool
}

// Faults is what goes wrong during the chaos window (the first Chaos
// ticks); after it the network heals and nothing else fails.
type Faults struct {
	Drop, Dup float64 // per message
	Delay     int     // extra delay per message, 0..Delay ticks (reordering)
	// Counts of events scheduled at random ticks of the chaos window.
	Partitions, Crashes, Restarts, Joins, Leaves int
	Chaos                                        int
	// DeadAfter is how long a peer's membership takes to call a silent
	// peer dead (ticks).
	DeadAfter int
}

// Result is what a run did and found.
type Result struct {
	Ticks      int
	Rounds     uint64
	Violations []string
	// NoQuorum: a peer stopped with train.ErrNoQuorum, rightly (most of
	// the raft voters were gone: a violation otherwise). The run could
	// not go on; it said so instead of waiting forever.
	NoQuorum bool
	Trace    []string
	// Stats per peer process that ran (peer/member).
	Stats map[string]train.Stats
	// Model is the final model's hash (0 if no peer finished).
	Model uint64
	// Received bytes per peer (Options.Bytes), examples trained per peer.
	Received map[string]int64
	Examples map[string]int64
	// TrainBytes and TrainMsgs are the bytes (Options.Bytes) and messages
	// each peer received from others before its core reported the final
	// round (EvFinal): the training traffic, without the final gather and
	// the goodbyes that follow it.
	TrainBytes map[string]int64
	TrainMsgs  map[string]int64
	// OpBytes and OpMsgs split the training traffic of all peers by
	// message op ("push", "reply", "raft", …).
	OpBytes map[string]int64
	OpMsgs  map[string]int64
	// Parts of the training traffic (Options.Parts).
	Parts Parts
	// Shards per member of the final configuration (primaries).
	Owned map[string]int
	// Fingerprint is the hash Options.Fingerprint asks for.
	Fingerprint uint64
}

// Parts splits encoded bytes by what they carry: per-message fields and
// the wire header (Header), shard lists (Shards), float32 values and row
// counts (Values: the message with its rows and wants numbered 0, 1, 2, …,
// less the header) and what the real row numbers cost beyond that
// (Index). LocalIndex is what Index would be with every row numbered
// inside the message's shards (its rank in the shard list, then its slot
// in the shard) instead of across the whole model: a projection, not what
// is sent.
type Parts struct {
	Header, Shards, Index, Values, LocalIndex int64
}

// Failed reports whether the run found a violation.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// proc is one process of a peer (a restart is a new proc of the same
// peer): its core, its copy of the model, where it is in its peer's rows,
// and its state as the run drives it.
type proc struct {
	peer   string
	inc    uint64 // incarnation: 1, and one more per restart
	member uint64 // train.MemberID(peer, inc)
	core   *train.Core
	m      *model.Model // the core's model: its shards and read copy
	feed                // its peer's rows
	// acc is the optimizer state its driver keeps with LocalState: AdaGrad's
	// accumulator of every row of the model, from zeros when it starts.
	acc []float32
	// running: a live process; crashed; done: its core finished (left:
	// by a leave); removed while alive (it restarts); refused: stopped by
	// a refusal, alone, or without a quorum.
	running, crashed, done, left, removed, refused bool
	compute                                        *train.ComputeReq // the gradient its core asked for, answered at step computeAt
	computeAt                                      int
	fetchID                                        uint64 // the fetch of the final values (EvFinal)
	fetched                                        *train.FetchResult
	final                                          bool // its core reported EvFinal
}

// sim is one run: the processes and their cores, driven tick by tick on
// the network and the fault schedule, fed by the workload, counted by the
// accounting and checked by the checker.
type sim struct {
	o        Options
	r        rng // the one stream every part draws from
	tick     int
	now      int // network steps: tick*steps at the end of a tick (Options.Steps)
	procs    []*proc
	byPeer   map[string]*proc  // the running process of each peer
	nextPeer int               // the number of the next peer to join
	aliveSet map[string]string // last alive set fed, per proc key
	net      *network
	sched    schedule
	w        *workload
	acct     *accounting
	chk      *checker
	rec      recorder
	enc      *encoder    // with Encode, Bytes or Fingerprint
	fp       hash.Hash64 // Options.Fingerprint
	res      Result
}

// Run runs one simulation.
func Run(o Options) Result {
	s := &sim{o: o, r: rng{s: o.Seed*0x2545f4914f6cdd1d + 1}, byPeer: map[string]*proc{},
		aliveSet: map[string]string{}}
	s.rec = recorder{record: o.Record, tick: &s.tick}
	s.res.Stats = map[string]train.Stats{}
	s.res.Examples = map[string]int64{}
	if o.Fingerprint {
		s.fp = fnv.New64a()
	}
	if o.Encode || o.Bytes || o.Fingerprint {
		s.enc = newEncoder()
	}
	s.net = newNetwork(&s.r, o.Faults, s.watchMsg)
	s.sched = schedule{r: &s.r}
	s.w = newWorkload(o, &s.r)
	s.chk = newChecker(o, &s.rec, s.w, s.serial)
	s.acct = newAccounting(o.Bytes, o.Parts, s.enc, func() model.Layout { return s.w.newModel().Layout },
		func(format string, args ...any) { s.chk.fail(chkEncode, format, args...) })
	s.run()
	s.res.Trace, s.res.Violations = s.rec.trace, s.rec.violations
	s.res.Model, s.res.Owned = s.chk.model, s.chk.owned
	s.acct.report(&s.res)
	if s.fp != nil {
		s.res.Fingerprint = s.fp.Sum64()
	}
	return s.res
}

func (s *sim) logf(format string, args ...any) { s.rec.logf(format, args...) }

func peerName(i int) string { return fmt.Sprintf("peer%02d", i) }

func (s *sim) place() train.PlaceFunc {
	rc := ring.DefaultConfig()
	rc.Shards, rc.Replicas, rc.VNodes = s.o.Shards, s.o.Replicas, s.o.VNodes
	if s.o.MaxLoadPercent != 0 {
		rc.MaxLoadPercent = s.o.MaxLoadPercent
	}
	if s.o.Master {
		return func(members []string) (train.Placement, error) {
			m := "peer00"
			if !slices.Contains(members, m) {
				m = slices.Min(members)
			}
			return ring.Master(rc, m), nil
		}
	}
	return func(members []string) (train.Placement, error) { return ring.New(rc, members) }
}

func (s *sim) coreConfig(p *proc) train.Config {
	cfg := train.DefaultConfig()
	cfg.Self, cfg.ID = p.peer, p.member
	cfg.Mode, cfg.Staleness, cfg.Gather = s.o.Mode, s.o.Staleness, s.o.Gather
	cfg.Model = p.m
	cfg.Place = s.place()
	cfg.RetryTicks = 100
	cfg.Raft.Every = 5
	cfg.Seed = s.o.Seed
	cfg.Limits.MaxMessage = 64 << 20
	cfg.Limits.MaxRows = 1 << 24
	cfg.Limits.MaxValues = 1 << 26
	cfg.Limits.Features = p.m.Layout.Features
	// The contribution guards as a peer has them (G1, G2): honest
	// gradients never reach them; the serial reference applies G2 too.
	cfg.Guard.MaxExamples = s.w.perRound() // (MaxRowGrad: the kind's default)
	cfg.LocalSteps = s.o.LocalSteps
	cfg.LocalState = s.o.LocalState
	cfg.Combine = s.o.Combine
	pp := p
	cfg.Trace = func(e train.TraceEvent) { s.onTrace(pp, e) }
	return cfg
}

// run starts the initial peers and drives the run tick by tick until
// every process is done or MaxTicks pass, then checks the end.
func (s *sim) run() {
	o := s.o
	if !s.startInitial() {
		return
	}
	s.sched.draw(o.Faults)
	for _, p := range s.procs {
		s.handle(p)
	}
	steps := max(1, o.Steps)
	for s.tick = 1; s.tick <= o.MaxTicks; s.tick++ {
		s.now = (s.tick-1)*steps + 1
		s.faults()
		s.membership()
		for sub := 1; sub < steps; sub++ {
			// The steps between two ticks: messages and gradients only.
			s.now = (s.tick-1)*steps + sub
			s.deliver()
			for _, p := range slices.Clone(s.procs) {
				if p.running {
					s.computeDue(p)
				}
			}
		}
		s.now = s.tick * steps
		s.deliver()
		for _, p := range slices.Clone(s.procs) {
			if !p.running {
				continue
			}
			s.computeDue(p)
			p.core.Tick()
			s.handle(p)
		}
		s.chk.buffers(s.tick, s.procs)
		if s.tick == s.o.DumpAt {
			s.dump()
		}
		if s.allDone() {
			break
		}
	}
	s.res.Ticks = s.tick
	s.finish()
}

// startInitial starts the processes of the initial peers, members from
// the start; false if a core does not start.
func (s *sim) startInitial() bool {
	var initial []train.Member
	for i := range s.o.Peers {
		p := &proc{peer: peerName(i), inc: 1}
		p.member = train.MemberID(p.peer, p.inc)
		initial = append(initial, train.Member{Peer: p.peer, ID: p.member})
		s.procs = append(s.procs, p)
	}
	s.nextPeer = s.o.Peers
	slices.SortFunc(initial, func(a, b train.Member) int { return strings.Compare(a.Peer, b.Peer) })
	for _, p := range s.procs {
		p.m = s.w.newModel()
		p.feed.rows = s.w.data(p.peer)
		cfg := s.coreConfig(p)
		cfg.Initial = initial
		c, err := train.New(cfg)
		if err != nil {
			s.chk.fail(chkStart, "new core: %v", err)
			return false
		}
		p.core, p.running = c, true
		s.byPeer[p.peer] = p
	}
	return true
}

// computeDue answers p's compute request if its time has come.
func (s *sim) computeDue(p *proc) {
	if p.compute == nil || s.now < p.computeAt {
		return
	}
	req := p.compute
	p.compute = nil
	if s.o.LocalState && p.acc == nil {
		p.acc = s.w.newState()
	}
	g, loss := s.w.gradient(p.rows, req.Round-p.core.FirstRound(), req, p.acc)
	p.core.Computed(req.Round, g, loss)
	s.handle(p)
}

// dump traces every running core's state (Options.DumpAt).
func (s *sim) dump() {
	for _, p := range s.procs {
		if p.running {
			s.logf("DUMP %s/%x: %s", p.peer, p.member&0xffff, p.core.Debug())
		}
	}
}

func (s *sim) running() []*proc {
	var out []*proc
	for _, p := range s.procs {
		if p.running {
			out = append(out, p)
		}
	}
	return out
}

func (s *sim) crash(p *proc) {
	s.logf("%s/%x crashes", p.peer, p.member&0xffff)
	p.running, p.crashed = false, true
	s.res.Stats[fmt.Sprintf("%s/%x", p.peer, p.member&0xffff)] = p.core.Stats()
	delete(s.byPeer, p.peer)
}

// start starts a new process of peer name that joins through contact.
func (s *sim) start(name, contact string) {
	inc := uint64(1)
	for _, q := range s.procs {
		if q.peer == name {
			inc = max(inc, q.inc+1)
		}
	}
	p := &proc{peer: name, inc: inc, m: s.w.newModel(), feed: feed{rows: s.w.data(name)}}
	p.member = train.MemberID(name, inc)
	cfg := s.coreConfig(p)
	cfg.Contact = contact
	// The others running, as the driver's start probes find them
	// (node/trainer/start.go), to ask should the contact go silent.
	for _, q := range s.procs {
		if q.running && q.peer != contact && q.peer != name {
			cfg.Contacts = append(cfg.Contacts, q.peer)
		}
	}
	c, err := train.New(cfg)
	if err != nil {
		s.chk.fail(chkStart, "new core %s: %v", name, err)
		return
	}
	p.core, p.running = c, true
	s.procs = append(s.procs, p)
	s.byPeer[name] = p
	s.logf("%s/%x starts, joining through %s", name, p.member&0xffff, contact)
	s.handle(p)
}

// membership feeds each process the member IDs its membership would see:
// running processes reachable within DeadAfter.
func (s *sim) membership() {
	run := s.running()
	dead := s.o.Faults.DeadAfter
	if dead <= 0 {
		dead = 50
	}
	s.net.hear(s.tick, run)
	for _, a := range run {
		ids := s.net.alive(s.tick, dead, a.peer, s.procs)
		key := fmt.Sprint(ids)
		if s.aliveSet[a.peer+fmt.Sprint(a.member)] != key {
			s.aliveSet[a.peer+fmt.Sprint(a.member)] = key
			a.core.Alive(ids)
			s.handle(a)
		}
	}
}

// send puts a message on the simulated network.
func (s *sim) send(from *proc, e train.Envelope) {
	chaos := s.tick < s.o.Faults.Chaos
	to := s.byPeer[e.To]
	msg := e.Msg
	size := 0
	if s.enc != nil {
		b, err := s.enc.encode(from.peer, msg)
		if err != nil {
			s.chk.fail(chkEncode, "%s encodes %s: %v", from.peer, msg.Op, err)
			return
		}
		size = len(b)
		if s.fp != nil {
			fmt.Fprintf(s.fp, "%d %s>%s %d:", s.tick, from.peer, e.To, len(b))
			s.fp.Write(b)
		}
		if s.o.Encode {
			var m wire.Message
			if err := s.enc.decode(b, &m); err != nil {
				s.chk.fail(chkDecode, "%s's %s does not decode: %v", from.peer, msg.Op, err)
				return
			}
			msg = m.Core.Clone()
		} else {
			msg = msg.Clone()
		}
	} else {
		msg = msg.Clone()
	}
	s.acct.count(from.peer, e.To, msg, size, to != nil && !to.final)
	s.net.post(from.peer, e.To, to, msg, s.now, chaos)
}

// watchMsg logs a message about the watched shard (WatchShard).
func (s *sim) watchMsg(what, from, to string, m *wire.Core) {
	if s.o.WatchShard == 0 || !slices.Contains(m.Shards, uint32(s.o.WatchShard-1)) {
		return
	}
	s.logf("%s %s %s->%s req %d round %d flags %#x config %d shards %v", what, m.Op, from, to, m.Req, m.Round, m.Flags, m.Config, m.Shards)
}

// deliver hands the messages due to their receivers.
func (s *sim) deliver() {
	for _, m := range s.net.due(s.now) {
		p := m.to2
		if p == nil || !p.running || s.byPeer[m.to] != p {
			continue
		}
		if s.net.isCut(m.from, m.to) {
			s.watchMsg("cut", m.from, m.to, m.msg)
			continue
		}
		s.watchMsg("recv", m.from, m.to, m.msg)
		p.core.Receive(m.from, m.msg)
		s.handle(p)
	}
}

// handle acts on everything a process's core decided.
func (s *sim) handle(p *proc) {
	for range 100 {
		rd := p.core.Ready()
		empty := len(rd.Messages) == 0 && rd.Compute == nil && rd.WantBatches == 0 && len(rd.Fetched) == 0 &&
			len(rd.Events) == 0 && !rd.Done && rd.Err == nil
		for _, e := range rd.Messages {
			s.send(p, e)
		}
		if rd.Compute != nil {
			p.compute = rd.Compute
			p.computeAt = s.now + s.r.intn(3)
		}
		for range rd.WantBatches {
			if !s.giveBatch(p) {
				break
			}
		}
		for _, e := range rd.Events {
			s.onEvent(p, e)
		}
		s.chk.judgeRestarts(p)
		for i := range rd.Fetched {
			f := rd.Fetched[i]
			if f.ID == p.fetchID {
				p.fetched = &f
				p.core.Finish()
			}
		}
		if rd.Err != nil {
			if rd.Err == train.ErrRemoved {
				s.logf("%s/%x removed while alive: restarts", p.peer, p.member&0xffff)
				p.removed = true
				s.crash(p)
				p.crashed = false
				s.sched.add(scheduled{at: s.tick + 1, kind: "start:" + p.peer})
				return
			}
			if errors.Is(rd.Err, train.ErrNoQuorum) {
				// Correct only if most voters are really gone: no running
				// process has their member IDs.
				s.chk.onNoQuorum(p, rd.Err, s.procs)
				s.logf("%s/%x stops: %v", p.peer, p.member&0xffff, rd.Err)
				s.res.NoQuorum = true
				p.running, p.refused = false, true
				delete(s.byPeer, p.peer)
				return
			}
			if errors.Is(rd.Err, train.ErrRefused) || errors.Is(rd.Err, train.ErrAlone) {
				s.logf("%s/%x refused: %v", p.peer, p.member&0xffff, rd.Err)
				p.running, p.refused = false, true
				delete(s.byPeer, p.peer)
				return
			}
			s.chk.fail(chkCoreError, "%s: %v", p.peer, rd.Err)
			p.running = false
			return
		}
		if rd.Done && !p.done {
			p.done = true
			p.left = rd.Left
			p.running = false // the process exits
			delete(s.byPeer, p.peer)
			s.logf("%s/%x done (left %v)", p.peer, p.member&0xffff, rd.Left)
			s.res.Stats[fmt.Sprintf("%s/%x", p.peer, p.member&0xffff)] = p.core.Stats()
		}
		if empty {
			return
		}
	}
}

// giveBatch gives p's core its next batch, or the end of its data.
func (s *sim) giveBatch(p *proc) bool {
	if p.ended {
		return false
	}
	keys, n := s.w.next(&p.feed)
	if n == 0 {
		p.ended = true
		p.core.EndOfData()
		return false
	}
	p.core.Batch(keys, n)
	return true
}

// onEvent checks and records a core's event.
func (s *sim) onEvent(p *proc, e train.Event) {
	switch e.Kind {
	case train.EvConfig:
		s.chk.onConfig(p, e)
		s.logf("%s/%x applies configuration %d: start %d members %v crashed %v left %v %s", p.peer, p.member&0xffff, e.Config, e.Start, e.Members, e.Crashed, e.Left, e.Text)
	case train.EvFinal:
		s.logf("%s/%x final", p.peer, p.member&0xffff)
		p.final = true
		s.chk.onFinal(p)
		p.fetchID = 1
		p.core.Fetch(1, nil, true)
	case train.EvLeader:
		s.logf("%s/%x leads", p.peer, p.member&0xffff)
	case train.EvPromoted:
		s.logf("%s/%x promotes %s", p.peer, p.member&0xffff, e.Text)
	case train.EvHandedOff:
		s.logf("%s/%x hands %s to %s", p.peer, p.member&0xffff, e.Text, e.Peer)
	case train.EvLost:
		s.logf("%s/%x: %s", p.peer, p.member&0xffff, e.Text)
	case train.EvReceived:
		s.logf("%s/%x receives %s from %s", p.peer, p.member&0xffff, e.Text, e.Peer)
	}
}

// onTrace folds a core's trace event into the fingerprint, traces it if
// it concerns the watched shard, and has the checker audit it.
func (s *sim) onTrace(p *proc, e train.TraceEvent) {
	if s.fp != nil {
		fmt.Fprintf(s.fp, "%d %s trace %d %v %d %v %s %d %v %v\n", s.tick, p.peer, e.Kind, e.Shards, e.Round, e.Members, e.Peer, e.Req, e.Replica, e.Keys)
	}
	if s.o.WatchShard > 0 && slices.Contains(e.Shards, uint32(s.o.WatchShard-1)) {
		// With the watched shard's weights as they are after the event (a
		// fingerprint): where two holders' copies part shows as the first
		// round whose fingerprints differ.
		lo, hi := p.m.Layout.ShardRange(s.o.WatchShard - 1)
		fp := uint64(14695981039346656037)
		for _, v := range p.m.W[lo:hi] {
			fp = (fp ^ uint64(math.Float32bits(v))) * 1099511628211
		}
		s.logf("%s/%x trace %s round %d members %x peer %s req %d replica %v w %04x", p.peer, p.member&0xffff,
			e.Kind, e.Round, e.Members, e.Peer, e.Req, e.Replica, fp&0xffff)
	}
	s.chk.onTrace(p, e, s.procs)
}

func (s *sim) allDone() bool {
	if s.sched.pending() {
		return false
	}
	for _, p := range s.procs {
		if p.running && !p.done {
			return false
		}
	}
	return true
}

// finish records every process's counters and checks the end state.
func (s *sim) finish() {
	var maxStale uint64
	for _, p := range s.procs {
		if p.running || p.done {
			st := p.core.Stats()
			s.res.Stats[fmt.Sprintf("%s/%x", p.peer, p.member&0xffff)] = st
			maxStale = max(maxStale, st.MaxStaleness)
			s.res.Rounds = max(s.res.Rounds, st.Rounds)
			s.res.Examples[p.peer] += int64(st.Examples)
		}
	}
	s.chk.atEnd(s.procs, maxStale)
}

// serial is the model a serial run of the initial peers' rounds ends with.
func (s *sim) serial() *model.Model {
	var peers []*proc
	for _, p := range s.procs[:s.o.Peers] {
		peers = append(peers, p)
	}
	slices.SortFunc(peers, func(a, b *proc) int { return strings.Compare(a.peer, b.peer) })
	rows := make([][]row, len(peers))
	for i, p := range peers {
		rows[i] = p.rows
	}
	return s.w.serial(rows)
}
