// Package sim runs the training protocol core (node/train) of many peers in
// one process, on a simulated network and clock, and checks its invariants
// while faults happen: messages dropped, duplicated, delayed and reordered,
// partitions, crashes, restarts with the same peer ID, joins and graceful
// leaves. Every choice comes from one seed, so a failing schedule replays
// exactly (go test ./node/train/sim -run TestSeeds -seed N -v prints its
// event trace).
//
// What a run checks (Result.Violations), after every step and at the end:
//
//   - agreement: every configuration ID means the same configuration at
//     every peer;
//   - exactly once: no holder of a shard applies a worker's contribution to
//     a round twice, and handing a shard over hands its ledger over; at the
//     end the primary of every shard has applied every contribution of
//     every worker that did not crash, unless the shard was lost (every
//     holder crashed: counted, allowed only without replicas);
//   - the ssp bound: no round computed with values missing a worker's
//     contributions older than the staleness allows;
//   - coverage: every shard held by its primary at the end;
//   - bounded buffers: no queue of a core grows past a bound;
//   - one model: every finished peer fetched the same model, but for shards
//     restarted from nothing after the values were final; replicas end
//     bit-identical to their primary (ssp and async through the final
//     copies); every peer's read copy equals the primaries' values (full
//     gather);
//   - the serial reference: a sync run whose schedule loses nothing for good
//     (drops and delays only) ends bit-identical to a serial run of the
//     same rounds;
//   - liveness: once the faults stop, every peer finishes.
//
// The workers' gradients are logistic regression on generated sparse data,
// computed here the way sgd computes them (float64 sums in example order).
package sim

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"math/bits"
	"slices"
	"sort"
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
	// Combine is how owners combine a sync round (train.Config.Combine):
	// with windows, Sum or Mean.
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

// rng is splitmix64: one stream for the schedule.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
func (r *rng) intn(n int) int {
	if n <= 0 {
		return 0
	}
	return int(r.next() % uint64(n))
}
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

// row is one example.
type row struct {
	keys  []uint32
	label float32
}

// proc is one process of a peer (a restart is a new proc of the same peer).
type proc struct {
	peer       string
	inc        uint64
	member     uint64
	core       *train.Core
	restarted  []int // shards restarted from nothing, judged in handle
	m          *model.Model
	rows       []row
	pos        int // rows handed out
	epochs     int
	ended      bool
	running    bool
	crashed    bool
	done       bool
	left       bool
	computeAt  int
	compute    *train.ComputeReq
	fetchID    uint64
	fetched    *train.FetchResult
	finished   bool
	final      bool   // its core reported EvFinal
	first      uint64 // first round
	batches    map[uint64]bool
	ledger     map[int]map[[2]uint64]bool
	removed    bool
	refused    bool
	startTick  int
	finalPrims []string
}

// restartAt is a shard restarted from nothing, at s.order.
type restartAt struct{ shard, at int }

type msgInFlight struct {
	from, to string
	to2      *proc // the process it was sent to (a restart does not get it)
	msg      *wire.Core
	at       int
	seq      int
}

type sim struct {
	o           Options
	r           rng
	tick        int
	now         int // network steps: tick*steps at the end of a tick (Options.Steps)
	procs       []*proc
	byPeer      map[string]*proc // the running process of each peer
	net         []msgInFlight
	seq         int
	cut         map[[2]string]bool // partitioned pairs
	lastSeen    map[[2]string]int
	aliveSet    map[string]string // last alive set fed, per proc key
	res         Result
	confs       map[uint64]string
	events      []scheduled
	nextPeer    int
	sentLedger  map[string]map[[2]uint64]bool // peer/req -> ledger snapshot
	lossAllowed bool
	anyLoss     bool
	order       int         // counts restarts and the first final values, in the order they happen
	finalAt     int         // s.order when a peer first had the values final (0: none yet)
	restarts    []restartAt // shards restarted from nothing (need gather)
	finalModel  *model.Model
	codec       *wire.Codec
	fp          hash.Hash64 // Options.Fingerprint
	encBuf      []byte
	layout      *model.Layout // Parts
	maxStale    uint64
	planted     []float64
	at          []int32  // logregGrad's scratch
	bits        []uint64 // batchKeys's scratch: one bit per row of the model
}

type scheduled struct {
	at   int
	kind string
	dur  int
}

// Run runs one simulation.
func Run(o Options) Result {
	s := &sim{o: o, r: rng{s: o.Seed*0x2545f4914f6cdd1d + 1}, byPeer: map[string]*proc{}, cut: map[[2]string]bool{},
		lastSeen: map[[2]string]int{}, aliveSet: map[string]string{}, confs: map[uint64]string{},
		sentLedger: map[string]map[[2]uint64]bool{}}
	s.res.Stats = map[string]train.Stats{}
	s.res.Received = map[string]int64{}
	s.res.Examples = map[string]int64{}
	s.res.TrainBytes = map[string]int64{}
	s.res.TrainMsgs = map[string]int64{}
	s.res.OpBytes = map[string]int64{}
	s.res.OpMsgs = map[string]int64{}
	if o.Fingerprint {
		s.fp = fnv.New64a()
	}
	if o.Encode || o.Bytes || o.Fingerprint {
		lim := wire.DefaultLimits()
		lim.MaxMessage = 64 << 20
		lim.MaxRows = 1 << 24
		lim.MaxValues = 1 << 26
		s.codec = wire.NewCodec(wire.F32, wire.None, lim)
	}
	s.planted = make([]float64, o.Dim+1)
	s.at = make([]int32, o.Dim+1)
	for i := range s.planted {
		s.planted[i] = (s.r.float()*2 - 1) * 2
	}
	s.run()
	if s.fp != nil {
		s.res.Fingerprint = s.fp.Sum64()
	}
	return s.res
}

func (s *sim) logf(format string, args ...any) {
	if s.o.Record {
		s.res.Trace = append(s.res.Trace, fmt.Sprintf("%5d ", s.tick)+fmt.Sprintf(format, args...))
	}
}

func (s *sim) violate(format string, args ...any) {
	msg := fmt.Sprintf("tick %d: ", s.tick) + fmt.Sprintf(format, args...)
	if len(s.res.Violations) < 20 {
		s.res.Violations = append(s.res.Violations, msg)
	}
	s.logf("VIOLATION %s", msg)
}

func peerName(i int) string { return fmt.Sprintf("peer%02d", i) }

// dataFor generates a peer's rows (the same for every process of a peer).
func (s *sim) dataFor(peer string) []row {
	var h uint64 = s.o.Seed
	for _, c := range peer {
		h = h*31 + uint64(c)
	}
	r := rng{s: h}
	rows := make([]row, s.o.Rows)
	for i := range rows {
		keys := make([]uint32, 0, s.o.Fields)
		for len(keys) < s.o.Fields {
			// Skewed: low features are frequent, as in click data.
			u := r.float()
			k := uint32(float64(s.o.Dim) * u * u)
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		z := s.planted[s.o.Dim]
		for _, k := range keys {
			z += s.planted[k]
		}
		label := float32(0)
		if r.float() < 1/(1+math.Exp(-z)) {
			label = 1
		}
		rows[i] = row{keys: keys, label: label}
	}
	return rows
}

func (s *sim) newModel() *model.Model {
	m, err := model.New(model.Logreg, uint64(s.o.Dim), 2, s.o.Shards, model.DefaultOptConfig(model.AdaGrad))
	if err != nil {
		panic(err)
	}
	m.W = make([]float32, m.Layout.Len())
	return m
}

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
	cfg.RaftEvery = 5
	cfg.Seed = s.o.Seed
	cfg.Limits.MaxMessage = 64 << 20
	cfg.Limits.MaxRows = 1 << 24
	cfg.Limits.MaxValues = 1 << 26
	cfg.Limits.Features = p.m.Layout.Features
	// The contribution guards as a peer has them (G1, G2): honest
	// gradients never reach them; the serial reference applies G2 too.
	cfg.Guard.MaxExamples = s.o.Batch * s.steps() // (MaxRowGrad: the kind's default)
	cfg.LocalSteps = s.o.LocalSteps
	cfg.Combine = s.o.Combine
	pp := p
	cfg.Trace = func(e train.TraceEvent) { s.onTrace(pp, e) }
	return cfg
}

func (s *sim) run() {
	o := s.o
	// The initial peers.
	var initial []train.Member
	for i := range o.Peers {
		p := &proc{peer: peerName(i), inc: 1}
		p.member = train.MemberID(p.peer, p.inc)
		initial = append(initial, train.Member{Peer: p.peer, ID: p.member})
		s.procs = append(s.procs, p)
	}
	s.nextPeer = o.Peers
	slices.SortFunc(initial, func(a, b train.Member) int { return strings.Compare(a.Peer, b.Peer) })
	for _, p := range s.procs {
		p.m = s.newModel()
		p.rows = s.dataFor(p.peer)
		cfg := s.coreConfig(p)
		cfg.Initial = initial
		c, err := train.New(cfg)
		if err != nil {
			s.violate("new core: %v", err)
			return
		}
		p.core, p.running = c, true
		p.batches = map[uint64]bool{}
		p.ledger = map[int]map[[2]uint64]bool{}
		s.byPeer[p.peer] = p
	}
	s.schedule()
	s.lossAllowed = o.Replicas < 2 || o.Faults.Crashes+o.Faults.Restarts > 1
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
				if p.running && p.compute != nil && s.now >= p.computeAt {
					req := p.compute
					p.compute = nil
					g, loss := s.gradient(p, req)
					p.core.Computed(req.Round, g, loss)
					s.handle(p)
				}
			}
		}
		s.now = s.tick * steps
		s.deliver()
		for _, p := range slices.Clone(s.procs) {
			if !p.running {
				continue
			}
			if p.compute != nil && s.now >= p.computeAt {
				req := p.compute
				p.compute = nil
				g, loss := s.gradient(p, req)
				p.core.Computed(req.Round, g, loss)
				s.handle(p)
			}
			p.core.Tick()
			s.handle(p)
		}
		s.checkBuffers()
		if s.tick == s.o.DumpAt {
			for _, p := range s.procs {
				if p.running {
					s.logf("DUMP %s/%x: %s", p.peer, p.member&0xffff, p.core.Debug())
				}
			}
		}
		if s.allDone() {
			break
		}
	}
	s.res.Ticks = s.tick
	s.finish()
}

// schedule draws the fault events of the chaos window.
func (s *sim) schedule() {
	f := s.o.Faults
	add := func(n int, kind string) {
		for range n {
			at := 20 + s.r.intn(max(1, f.Chaos-20))
			s.events = append(s.events, scheduled{at: at, kind: kind, dur: 20 + s.r.intn(max(1, f.DeadAfter*3))})
		}
	}
	add(f.Partitions, "partition")
	add(f.Crashes, "crash")
	add(f.Restarts, "restart")
	add(f.Joins, "join")
	add(f.Leaves, "leave")
	sort.SliceStable(s.events, func(i, j int) bool { return s.events[i].at < s.events[j].at })
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

// faults fires the events due now.
func (s *sim) faults() {
	for len(s.events) > 0 && s.events[0].at <= s.tick {
		e := s.events[0]
		s.events = s.events[1:]
		run := s.running()
		var live []*proc
		for _, p := range run {
			if !p.done && !p.core.Finishing() {
				live = append(live, p)
			}
		}
		switch e.kind {
		case "crash", "restart":
			if len(live) < 2 {
				continue
			}
			p := live[s.r.intn(len(live))]
			s.crash(p)
			if e.kind == "restart" {
				s.events = append(s.events, scheduled{at: s.tick + e.dur/2 + 1, kind: "start:" + p.peer})
				sort.SliceStable(s.events, func(i, j int) bool { return s.events[i].at < s.events[j].at })
			}
		case "join":
			if len(live) == 0 {
				continue
			}
			name := peerName(s.nextPeer)
			s.nextPeer++
			s.start(name, live[s.r.intn(len(live))].peer)
		case "leave":
			if len(live) < 2 {
				continue
			}
			p := live[s.r.intn(len(live))]
			s.logf("%s leaves", p.peer)
			p.core.Leave()
			s.handle(p)
		case "partition":
			if len(run) < 2 {
				continue
			}
			// Cut a random minority off for dur ticks.
			k := 1 + s.r.intn(max(1, len(run)/2))
			perm := make([]int, len(run))
			for i := range perm {
				perm[i] = i
			}
			for i := len(perm) - 1; i > 0; i-- {
				j := s.r.intn(i + 1)
				perm[i], perm[j] = perm[j], perm[i]
			}
			side := map[string]bool{}
			for _, i := range perm[:k] {
				side[run[i].peer] = true
			}
			var names []string
			for _, a := range run {
				for _, b := range run {
					if side[a.peer] != side[b.peer] {
						s.cut[[2]string{a.peer, b.peer}] = true
					}
				}
				if side[a.peer] {
					names = append(names, a.peer)
				}
			}
			s.logf("partition: %v cut off for %d ticks", names, e.dur)
			s.events = append(s.events, scheduled{at: s.tick + e.dur, kind: "heal"})
			sort.SliceStable(s.events, func(i, j int) bool { return s.events[i].at < s.events[j].at })
		case "heal":
			s.logf("partition healed")
			clear(s.cut)
		default:
			if strings.HasPrefix(e.kind, "start:") {
				name := strings.TrimPrefix(e.kind, "start:")
				if s.byPeer[name] != nil || len(live) == 0 {
					continue
				}
				s.start(name, live[s.r.intn(len(live))].peer)
			}
		}
	}
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
	p := &proc{peer: name, inc: inc, m: s.newModel(), rows: s.dataFor(name), batches: map[uint64]bool{},
		ledger: map[int]map[[2]uint64]bool{}, startTick: s.tick}
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
		s.violate("new core %s: %v", name, err)
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
	for _, a := range run {
		for _, b := range run {
			if !s.cut[[2]string{a.peer, b.peer}] {
				s.lastSeen[[2]string{a.peer, fmt.Sprint(b.member)}] = s.tick
			}
		}
	}
	for _, a := range run {
		var ids []uint64
		for _, b := range s.procs {
			if t, ok := s.lastSeen[[2]string{a.peer, fmt.Sprint(b.member)}]; ok && s.tick-t < dead {
				ids = append(ids, b.member)
			}
		}
		slices.Sort(ids)
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
	f := s.o.Faults
	chaos := s.tick < f.Chaos
	to := s.byPeer[e.To]
	msg := e.Msg
	size := 0
	if s.codec != nil {
		b, err := s.codec.AppendCore(s.encBuf[:0], wire.Header{Job: "sim", Sender: from.peer}, msg)
		if err != nil {
			s.violate("%s encodes %s: %v", from.peer, msg.Op, err)
			return
		}
		s.encBuf, size = b, len(b)
		if s.fp != nil {
			fmt.Fprintf(s.fp, "%d %s>%s %d:", s.tick, from.peer, e.To, len(b))
			s.fp.Write(b)
		}
		if s.o.Encode {
			var m wire.Message
			if err := s.codec.Decode(b, &m); err != nil {
				s.violate("%s's %s does not decode: %v", from.peer, msg.Op, err)
				return
			}
			msg = m.Core.Clone()
		} else {
			msg = msg.Clone()
		}
	} else {
		msg = msg.Clone()
	}
	if e.To != from.peer {
		if s.o.Bytes {
			s.res.Received[e.To] += int64(size)
		}
		if to != nil && !to.final {
			s.res.TrainBytes[e.To] += int64(size)
			s.res.TrainMsgs[e.To]++
			s.res.OpBytes[msg.Op.String()] += int64(size)
			s.res.OpMsgs[msg.Op.String()]++
			if s.o.Parts && s.o.Bytes {
				s.parts(from.peer, msg, size)
			}
		}
	}
	if e.To == from.peer {
		s.seq++
		s.net = append(s.net, msgInFlight{from: from.peer, to: e.To, to2: to, msg: msg, at: s.now, seq: s.seq})
		return
	}
	if chaos && f.Drop > 0 && s.r.float() < f.Drop {
		s.watchMsg("drop", from.peer, e.To, msg)
		return
	}
	s.watchMsg("send", from.peer, e.To, msg)
	copies := 1
	if chaos && f.Dup > 0 && s.r.float() < f.Dup {
		copies = 2
	}
	for range copies {
		delay := 1
		if chaos && f.Delay > 0 {
			delay += s.r.intn(f.Delay + 1)
		}
		s.seq++
		s.net = append(s.net, msgInFlight{from: from.peer, to: e.To, to2: to, msg: msg, at: s.now + delay, seq: s.seq})
	}
}

// parts adds msg's parts to Result.Parts (see Parts). It measures by
// encoding variants of msg: without its shard list; also without rows,
// wants and values (the header); with rows and wants numbered 0, 1, 2, …
// (the values, and indices that cost almost nothing); and with rows
// numbered inside the message's shards (the projection).
func (s *sim) parts(from string, msg *wire.Core, size int) {
	enc := func(m *wire.Core) int {
		b, err := s.codec.AppendCore(s.encBuf[:0], wire.Header{Job: "sim", Sender: from}, m)
		if err != nil {
			s.violate("parts: %s encodes %s: %v", from, m.Op, err)
			return size
		}
		s.encBuf = b
		return len(b)
	}
	m := *msg
	m.Shards = nil
	noShards := enc(&m)
	dense := func(n int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = uint32(i)
		}
		return out
	}
	m.Rows = model.Sparse{Idx: dense(len(msg.Rows.Idx)), Val: msg.Rows.Val}
	m.Want = dense(len(msg.Want))
	flat := enc(&m)
	m.Rows, m.Want, m.Values = model.Sparse{}, nil, nil
	bare := enc(&m)
	p := &s.res.Parts
	p.Header += int64(bare)
	p.Shards += int64(size - noShards)
	p.Values += int64(flat - bare)
	p.Index += int64(noShards - flat)
	// Number rows inside the message's shards: rank of the shard in the
	// list, then the slot.
	if s.layout == nil {
		l := s.newModel().Layout
		s.layout = &l
	}
	l := s.layout
	rank := map[int]int{}
	for i, sh := range msg.Shards {
		rank[int(sh)] = i
	}
	local := func(keys []uint32) ([]uint32, bool) {
		out := make([]uint32, len(keys))
		for i, k := range keys {
			r, ok := rank[l.Shard(k)]
			if !ok {
				return nil, false
			}
			out[i] = uint32(r*l.PerShard + l.Slot(k))
		}
		return out, true
	}
	idx, ok1 := local(msg.Rows.Idx)
	want, ok2 := local(msg.Want)
	if !ok1 || !ok2 {
		p.LocalIndex += int64(noShards - flat)
		return
	}
	w := max(1, msg.RowWidth)
	order := make([]int, len(idx))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return idx[order[a]] < idx[order[b]] })
	m = *msg
	m.Shards = nil
	m.Rows = model.Sparse{Idx: make([]uint32, len(idx)), Val: make([]float32, 0, len(msg.Rows.Val))}
	for i, j := range order {
		m.Rows.Idx[i] = idx[j]
		m.Rows.Val = append(m.Rows.Val, msg.Rows.Val[j*w:(j+1)*w]...)
	}
	slices.Sort(want)
	m.Want = want
	p.LocalIndex += int64(enc(&m) - flat)
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
	var due []msgInFlight
	keep := s.net[:0]
	for _, m := range s.net {
		if m.at <= s.now {
			due = append(due, m)
		} else {
			keep = append(keep, m)
		}
	}
	s.net = keep
	sort.Slice(due, func(i, j int) bool {
		if due[i].at != due[j].at {
			return due[i].at < due[j].at
		}
		return due[i].seq < due[j].seq
	})
	for _, m := range due {
		p := m.to2
		if p == nil || !p.running || s.byPeer[m.to] != p {
			continue
		}
		if s.cut[[2]string{m.from, m.to}] {
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
		if !s.lossAllowed {
			for _, sh := range p.restarted {
				s.violate("%s/%x restarted shard %d from nothing with replicas", p.peer, p.member&0xffff, sh)
			}
		}
		p.restarted = p.restarted[:0]
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
				s.events = append(s.events, scheduled{at: s.tick + 1, kind: "start:" + p.peer})
				sort.SliceStable(s.events, func(i, j int) bool { return s.events[i].at < s.events[j].at })
				return
			}
			if errors.Is(rd.Err, train.ErrNoQuorum) {
				// Correct only if most voters are really gone: no running
				// process has their member IDs.
				voters, live := p.core.Voters(), 0
				for _, id := range voters {
					for _, q := range s.procs {
						if q.member == id && q.running && !q.crashed {
							live++
						}
					}
				}
				if 2*live > len(voters) {
					s.violate("%s/%x: %v, with %d of its %d voters running", p.peer, p.member&0xffff, rd.Err, live, len(voters))
				}
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
			s.violate("%s: %v", p.peer, rd.Err)
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
	if p.pos >= s.o.Rows*s.o.Epochs {
		p.ended = true
		p.core.EndOfData()
		return false
	}
	lo := p.pos
	for p.pos-lo < s.o.Batch*s.steps() && p.pos < s.o.Rows*s.o.Epochs {
		p.pos++
	}
	n := p.pos - lo
	var rows []row
	for j := lo; j < p.pos; j++ {
		rows = append(rows, p.rows[j%s.o.Rows])
	}
	p.core.Batch(s.batchKeys(rows), n)
	return true
}

// batchKeys returns the distinct keys of rows and the bias row, ascending.
func (s *sim) batchKeys(rows []row) []uint32 {
	if s.bits == nil {
		s.bits = make([]uint64, s.o.Dim/64+1)
	}
	n := 1
	for _, r := range rows {
		for _, k := range r.keys {
			s.bits[k/64] |= 1 << (k % 64)
		}
		n += len(r.keys)
	}
	bias := uint32(s.o.Dim)
	s.bits[bias/64] |= 1 << (bias % 64)
	keys := make([]uint32, 0, n)
	for i, w := range s.bits {
		for w != 0 {
			keys = append(keys, uint32(i*64+bits.TrailingZeros64(w)))
			w &= w - 1
		}
		s.bits[i] = 0
	}
	return keys
}

// steps is the batches of a round: LocalSteps, or 1.
func (s *sim) steps() int { return max(1, s.o.LocalSteps) }

// batchRows returns the rows of p's batch (or window) of round r
// (relative to its first round): batches are consecutive Batch rows.
func (s *sim) batchRows(p *proc, i uint64) []row {
	lo := int(i) * s.o.Batch * s.steps()
	hi := min(lo+s.o.Batch*s.steps(), s.o.Rows*s.o.Epochs)
	var out []row
	for j := lo; j < hi; j++ {
		out = append(out, p.rows[j%s.o.Rows])
	}
	return out
}

// gradient computes the logistic regression gradient of p's batch on the
// working set, as sgd does: per row, float64 sums in example order.
func (s *sim) gradient(p *proc, req *train.ComputeReq) ([]float32, float64) {
	rows := s.batchRows(p, req.Round-p.core.FirstRound())
	if s.o.LocalSteps > 1 {
		return s.window(rows, req.Keys, req.Weights, int64(req.Round)*int64(s.o.LocalSteps), req.Workers)
	}
	return logregGrad(rows, req.Keys, req.Weights, uint32(s.o.Dim), s.at)
}

// window trains a window's rows, Batch at a time, on a local copy of the
// wide rows of keys (weights and AdaGrad's accumulator), as a worker with
// windows of local steps does, and returns each row's change and the
// summed loss. The local copy is a whole model of the simulator's small
// dimension; its steps are model.Apply's, the owners' own, with AdaGrad's
// accumulator seen by workers workers as sgd.Window sees it.
func (s *sim) window(rows []row, keys []uint32, wide []float32, step0 int64, workers int) ([]float32, float64) {
	m := s.newModel()
	m.OwnAll()
	sw := m.StateWidth(true)
	scale := float32(1)
	if workers > 1 {
		scale = 1 / float32(workers)
		m.Opt.LR /= math.Sqrt(float64(workers))
	}
	in := model.Sparse{Idx: keys, Val: slices.Clone(wide)}
	for i := range keys {
		in.Val[i*sw+1] *= scale // (logreg, AdaGrad: weight, accumulator)
	}
	m.AddDeltas(&in) // onto zeros: the rows as fetched
	var loss float64
	for h := 0; h*s.o.Batch < len(rows); h++ {
		b := rows[h*s.o.Batch : min((h+1)*s.o.Batch, len(rows))]
		bk := s.batchKeys(b)
		w := make([]float32, len(bk))
		for i, k := range bk {
			w[i] = m.Row(k)[0]
		}
		g, l := logregGrad(b, bk, w, uint32(s.o.Dim), s.at)
		loss += l
		m.Apply(&model.Sparse{Idx: bk, Val: g}, len(b), step0+int64(h))
	}
	delta := make([]float32, 0, len(wide))
	for i, k := range keys {
		delta = m.AppendWide(delta, k)
		for c := range sw {
			delta[i*sw+c] -= in.Val[i*sw+c]
		}
	}
	return delta, loss
}

// logregGrad is the summed gradient of rows at weights (one per key).
// at is scratch of Dim+1 entries, all 0, left so: the position+1 of each key.
func logregGrad(rows []row, keys []uint32, w []float32, bias uint32, at []int32) ([]float32, float64) {
	for i, k := range keys {
		at[k] = int32(i + 1)
	}
	defer func() {
		for _, k := range keys {
			at[k] = 0
		}
	}()
	pos := func(k uint32) int {
		i := at[k]
		if i == 0 {
			panic(fmt.Sprintf("sim: row %d not in the batch's keys", k))
		}
		return int(i - 1)
	}
	bi := pos(bias)
	sum := make([]float64, len(keys))
	var loss float64
	for _, r := range rows {
		z := float64(w[bi])
		for _, k := range r.keys {
			z += float64(w[pos(k)])
		}
		p := 1 / (1 + math.Exp(-z))
		d := p - float64(r.label)
		if r.label == 1 {
			loss += -math.Log(max(p, 1e-12))
		} else {
			loss += -math.Log(max(1-p, 1e-12))
		}
		for _, k := range r.keys {
			sum[pos(k)] += d
		}
		sum[bi] += d
	}
	g := make([]float32, len(keys))
	for i, v := range sum {
		g[i] = float32(v)
	}
	return g, loss
}

// onEvent checks and records a core's event.
func (s *sim) onEvent(p *proc, e train.Event) {
	switch e.Kind {
	case train.EvConfig:
		fp := fmt.Sprint(e.Start, e.Members, e.Crashed, e.Left, e.Text)
		if old, ok := s.confs[e.Config]; ok && old != fp {
			s.violate("configuration %d differs: %s at %s, %s before", e.Config, fp, p.peer, old)
		}
		s.confs[e.Config] = fp
		if len(e.Crashed) >= max(1, s.o.Replicas) {
			s.lossAllowed = true // every holder of some shard may be among them
		}
		s.logf("%s/%x applies configuration %d: start %d members %v crashed %v left %v %s", p.peer, p.member&0xffff, e.Config, e.Start, e.Members, e.Crashed, e.Left, e.Text)
	case train.EvFinal:
		s.logf("%s/%x final", p.peer, p.member&0xffff)
		p.final = true
		if s.finalAt == 0 {
			s.order++
			s.finalAt = s.order
		}
		p.finalPrims = p.core.Primaries()
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

// onTrace audits applies and handoffs: a per-holder ledger of (worker,
// round) per shard.
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
	switch e.Kind {
	case train.TraceApply:
		for _, sh := range e.Shards {
			l := p.ledger[int(sh)]
			if l == nil {
				l = map[[2]uint64]bool{}
				p.ledger[int(sh)] = l
			}
			for _, m := range e.Members {
				k := [2]uint64{m, e.Round}
				if l[k] {
					s.violate("%s/%x applied worker %x's round %d to shard %d twice (replica %v)", p.peer, p.member&0xffff, m&0xffff, e.Round, sh, e.Replica)
				}
				l[k] = true
			}
		}
	case train.TraceSend:
		for _, sh := range e.Shards {
			snap := map[[2]uint64]bool{}
			for k := range p.ledger[int(sh)] {
				snap[k] = true
			}
			s.sentLedger[fmt.Sprintf("%s/%d/%d", p.peer, p.member, e.Req)] = snap
		}
	case train.TraceInstall:
		for _, sh := range e.Shards {
			var snap map[[2]uint64]bool
			for _, q := range s.procs {
				if q.peer == e.Peer {
					if l, ok := s.sentLedger[fmt.Sprintf("%s/%d/%d", q.peer, q.member, e.Req)]; ok {
						snap = l
					}
				}
			}
			if snap == nil {
				s.violate("%s installs shard %d from %s (req %d), which never sent it", p.peer, sh, e.Peer, e.Req)
				continue
			}
			l := map[[2]uint64]bool{}
			for k := range snap {
				l[k] = true
			}
			p.ledger[int(sh)] = l
		}
	case train.TracePromote:
		for _, sh := range e.Shards {
			p.ledger[int(sh)] = map[[2]uint64]bool{}
			s.anyLoss = true
			s.logf("%s/%x: shard %d lost, restarted", p.peer, p.member&0xffff, sh)
			// (With the full gather a restarted shard keeps its weights from
			// the read copy: only its optimizer state is lost.)
			if s.o.Gather == train.Need {
				// Judged once the configuration that lost it is seen (its
				// event follows this trace): every holder may have gone.
				p.restarted = append(p.restarted, int(sh))
				s.order++
				s.restarts = append(s.restarts, restartAt{int(sh), s.order})
			}
		}
	case train.TraceFree:
		for _, sh := range e.Shards {
			delete(p.ledger, int(sh))
		}
	case train.TraceLost:
		// Allowed only if no live peer's copy has them: one that does
		// holds the round with them, and the copies fork.
		s.anyLoss = true
		for _, sh := range e.Shards {
			for _, q := range s.procs {
				if !q.running || q.crashed {
					continue
				}
				for _, m := range e.Members {
					if q.ledger[int(sh)][[2]uint64{m, e.Round}] {
						s.violate("%s/%x applied round %d to shard %d without worker %x's contribution, which %s/%x holds", p.peer, p.member&0xffff, e.Round, sh, m&0xffff, q.peer, q.member&0xffff)
					}
				}
			}
			s.logf("%s/%x: round %d of shard %d applied without %d answered contributions", p.peer, p.member&0xffff, e.Round, sh, len(e.Members))
		}
	}
}

func (s *sim) checkBuffers() {
	if s.tick%50 != 0 {
		return
	}
	bound := 200 + 50*len(s.procs)
	for _, p := range s.procs {
		if !p.running {
			continue
		}
		for name, n := range p.core.Sizes() {
			if n > bound {
				s.violate("%s: %s holds %d (bound %d)", p.peer, name, n, bound)
			}
		}
	}
}

func (s *sim) allDone() bool {
	for _, e := range s.events {
		if strings.HasPrefix(e.kind, "start:") || e.kind == "heal" {
			return false
		}
	}
	for _, p := range s.procs {
		if p.running && !p.done {
			return false
		}
	}
	return true
}

// finish checks the end state.
func (s *sim) finish() {
	o := s.o
	var finished []*proc
	for _, p := range s.procs {
		if p.running || p.done {
			s.res.Stats[fmt.Sprintf("%s/%x", p.peer, p.member&0xffff)] = p.core.Stats()
			st := p.core.Stats()
			if st.MaxStaleness > s.maxStale {
				s.maxStale = st.MaxStaleness
			}
			s.res.Rounds = max(s.res.Rounds, st.Rounds)
			s.res.Examples[p.peer] += int64(st.Examples)
			if !p.done {
				s.violate("%s/%x did not finish: %s", p.peer, p.member&0xffff, p.core.String())
				s.logf("%s", p.core.Debug())
				continue
			}
			if !p.left {
				finished = append(finished, p)
			}
		}
	}
	if o.Mode == train.SSP && s.maxStale > uint64(o.Staleness) {
		s.violate("a round was computed %d rounds stale, ssp bound %d", s.maxStale, o.Staleness)
	}
	if len(finished) == 0 || len(s.res.Violations) > 0 {
		return
	}
	// One model: every finished peer fetched the same one, but for the
	// shards lost and restarted from nothing after the values were final.
	// A peer that fetches such a shard after every holder of it is gone
	// gets the restarted values (H10): the values the peers before it
	// fetched went with those holders (h4/async/chaos seed 12 in
	// TestFixedSeeds: the two holders of five shards finished and exited
	// while cut off from the one member still waiting for an answer; they
	// were removed as crashed and its fetch had the five shards from
	// nothing). A fetch gathers its shards from several owners over time,
	// so what counts is when the values went final, not when a fetch
	// ended (h4/ssp/chaos seed 776: two peers had a shard's final values
	// before it was lost, a third its restart, and all three fetches
	// ended after the restart).
	ref := finished[0]
	models := make([]*model.Model, len(finished))
	for i, p := range finished {
		if p.fetched == nil {
			s.violate("%s finished without its final values", p.peer)
			return
		}
		m := s.newModel()
		for j, k := range p.fetched.Rows.Idx {
			copy(m.Row(k), p.fetched.Rows.Val[j:j+1])
		}
		models[i] = m
	}
	s.finalModel = models[0]
	s.res.Model = models[0].Hash()
	for j := 1; j < len(finished); j++ {
		h := models[j].Hash()
		for i := range j {
			if h == models[i].Hash() {
				continue
			}
			a, b := finished[i], finished[j]
			var lost, differ []int
			for sh := range o.Shards {
				if models[i].ShardHash(sh) == models[j].ShardHash(sh) {
					continue
				}
				if s.finalAt > 0 && slices.ContainsFunc(s.restarts, func(r restartAt) bool { return r.shard == sh && r.at > s.finalAt }) {
					lost = append(lost, sh)
				} else {
					differ = append(differ, sh)
				}
			}
			if len(differ) > 0 {
				s.violate("%s ends with model %x, %s with %x (shards %v differ)", b.peer, h, a.peer, models[i].Hash(), differ)
				break
			}
			s.logf("%s ends with model %x, %s with %x: shards %v were restarted from nothing after the values were final", b.peer, h, a.peer, models[i].Hash(), lost)
		}
	}
	if o.Gather == train.Full {
		final := models[0]
		for _, p := range finished {
			if h := p.m.Hash(); h != s.res.Model {
				var bad []int
				for sh := range o.Shards {
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
				s.violate("%s's read copy %x differs from the primaries' model %x in shards %v (rows %v)", p.peer, h, s.res.Model, bad, rows)
			}
		}
	}
	// Coverage, replicas, completeness, against the final configuration.
	prims := ref.core.Primaries()
	if ref.finalPrims != nil {
		prims = ref.finalPrims // configurations after the final round only move shards the peers no longer need
	}
	s.res.Owned = map[string]int{}
	for _, pr := range prims {
		s.res.Owned[pr]++
	}
	// Holders as of the newest configuration a finished peer applied.
	last := ref
	for _, p := range finished {
		if p.core.ConfigID() > last.core.ConfigID() {
			last = p
		}
	}
	owners := last.core.Holders()
	curPrims := last.core.Primaries()
	members := last.core.Members()
	for sh := range o.Shards {
		var pp *proc
		for _, q := range s.procs {
			if q.peer == prims[sh] && (q.running || q.done) && !q.crashed {
				pp = q
			}
		}
		if ref.finalPrims != nil && curPrims != nil && (pp == nil || !pp.core.Holds(sh) || !slices.Contains(members, prims[sh])) {
			// Moved after the final round (a crash): its holder now. (Its
			// final primary may have finished and exited before it was
			// declared crashed: h4/sync/chaos seed 134 in TestFixedSeeds
			// compared that peer's copy with the replica of the shard
			// restarted since. A shard a leave moves after the end need
			// not reach its new holder before the peers exit.)
			prims[sh] = curPrims[sh]
			pp = nil
			for _, q := range s.procs {
				if q.peer == prims[sh] && (q.running || q.done) && !q.crashed {
					pp = q
				}
			}
		}
		if ref.finalPrims != nil && (pp == nil || !pp.core.Holds(sh)) {
			// After the end a configuration that starts past the last
			// round moves shards nobody reads again: its handoffs need
			// not arrive before the peers exit, and a new holder may
			// wait for one as of a round that never runs (h4/sync/encoded
			// seed 768 in TestFixedSeeds: the joiner that held a shard's
			// final values awaited it as of the round after the last).
			// The shard is checked where a live peer holds it, one of its
			// holders first.
			rank := func(q *proc) int {
				if i := slices.Index(owners[sh], q.peer); i >= 0 {
					return i
				}
				return len(owners[sh])
			}
			for _, q := range s.procs {
				if (q.running || q.done) && !q.crashed && q.core.Holds(sh) &&
					(pp == nil || !pp.core.Holds(sh) || rank(q) < rank(pp)) {
					pp, prims[sh] = q, q.peer
				}
			}
		}
		if pp == nil {
			if ref.finalPrims == nil {
				s.violate("shard %d's primary %s is not running", sh, prims[sh])
			}
			continue
		}
		if !pp.core.Holds(sh) {
			s.violate("shard %d's primary %s does not hold it", sh, prims[sh])
			continue
		}
		lo, hi := pp.m.Layout.ShardRange(sh)
		{
			// (Ssp and async replicas apply forwards in each worker's
			// order, not the primary's: they end bit-identical only with
			// the final values' copy, E9.)
			for _, h := range owners[sh][1:] {
				var q *proc
				for _, x := range s.procs {
					if x.peer == h && (x.running || x.done) && !x.crashed {
						q = x
					}
				}
				if q == nil || !q.core.Holds(sh) {
					continue
				}
				if !slices.Equal(q.m.W[lo:hi], pp.m.W[lo:hi]) {
					s.violate("shard %d: replica %s differs from primary %s", sh, h, prims[sh])
				}
			}
		}
		led := pp.ledger[sh]
		for _, q := range s.procs {
			if q.crashed || q.removed || q.refused || q.core == nil {
				continue
			}
			first := q.core.FirstRound()
			end := q.core.Round()
			per := o.Batch * s.steps()
			data := first + uint64((min(q.pos, o.Rows*o.Epochs)+per-1)/per)
			for r := first; r < min(end, data); r++ {
				if !led[[2]uint64{q.member, r}] && !(s.lossAllowed && s.anyLoss) {
					s.violate("shard %d (at %s) misses worker %s/%x's round %d", sh, prims[sh], q.peer, q.member&0xffff, r)
					return
				}
			}
		}
	}
	if o.Mode == train.Sync && o.Faults.Crashes+o.Faults.Restarts+o.Faults.Joins+o.Faults.Leaves+o.Faults.Partitions == 0 {
		s.reference()
	}
}

// reference runs the same rounds serially and compares.
func (s *sim) reference() {
	o := s.o
	m := s.newModel()
	for sh := range o.Shards {
		m.Own(sh)
	}
	var peers []*proc
	for _, p := range s.procs[:o.Peers] {
		peers = append(peers, p)
	}
	slices.SortFunc(peers, func(a, b *proc) int { return strings.Compare(a.peer, b.peer) })
	per := o.Batch * s.steps()
	rounds := (o.Rows*o.Epochs + per - 1) / per
	bound := train.DefaultMaxRowGrad(m.Kind)
	var sum, tmp, guard model.Sparse
	var parts []*model.Sparse
	for r := range rounds {
		sum.Reset()
		parts = parts[:0]
		n := 0
		for _, p := range peers {
			rows := s.batchRows(p, uint64(r))
			if len(rows) == 0 {
				continue
			}
			keys := s.batchKeys(rows)
			if o.LocalSteps > 1 {
				// A window: each worker's changes from the same start,
				// summed in member order, then added (model.AddDeltas).
				var wide []float32
				for _, k := range keys {
					wide = m.AppendWide(wide, k)
				}
				workers := len(peers) // (summed changes: each counts the others' steps)
				if o.Combine == train.Mean {
					workers = 1 // (averaged changes: a lone peer's steps)
				}
				d, _ := s.window(rows, keys, wide, int64(r)*int64(o.LocalSteps), workers)
				part := model.Sparse{Idx: keys, Val: d}
				sw := m.StateWidth(true)
				kept, _ := train.GuardRows(&part, sw, 1, bound*bound*float64(o.LocalSteps), &guard)
				if o.Combine == train.Mean {
					parts = append(parts, &model.Sparse{Idx: slices.Clone(kept.Idx), Val: slices.Clone(kept.Val)})
				}
				addSparse(&tmp, &sum, kept, sw)
				sum, tmp = tmp, sum
				n += len(rows)
				continue
			}
			w := make([]float32, len(keys))
			for i, k := range keys {
				w[i] = m.Row(k)[0]
			}
			g, _ := logregGrad(rows, keys, w, uint32(o.Dim), s.at)
			part := model.Sparse{Idx: keys, Val: g}
			kept, _ := train.GuardRows(&part, 1, uint64(len(rows)), bound, &guard)
			addSparse(&tmp, &sum, kept, 1)
			sum, tmp = tmp, sum
			n += len(rows)
		}
		if n > 0 && o.LocalSteps > 1 {
			if o.Combine == train.Mean {
				meanRows(&sum, parts, m.Layout.Width, m.StateWidth(true))
			}
			m.AddDeltas(&sum)
		} else if n > 0 {
			m.Apply(&sum, n, int64(r))
		}
	}
	if h := m.Hash(); h != s.res.Model {
		s.violate("the run's model %x differs from the serial reference %x", s.res.Model, h)
	}
}

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
			for c := range w {
				dst.Val = append(dst.Val, a.Val[i*w+c]+b.Val[j*w+c])
			}
			i++
			j++
		}
	}
}

// meanRows sets dst to parts combined as train.Mean combines a window: per
// row, the mean of the weight changes of the parts that have it and the
// sum of their state changes, summed in float32 in the parts' (member)
// order and divided in float32 (written here on its own, as the check of
// the owners' MeanSum).
func meanRows(dst *model.Sparse, parts []*model.Sparse, width, sw int) {
	count := map[uint32]int{}
	sums := map[uint32][]float32{}
	for _, p := range parts {
		for i, k := range p.Idx {
			count[k]++
			if sums[k] == nil {
				sums[k] = make([]float32, sw)
			}
			for c := range sw {
				sums[k][c] += p.Val[i*sw+c]
			}
		}
	}
	keys := make([]uint32, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst.Reset()
	row := make([]float32, sw)
	for _, k := range keys {
		copy(row, sums[k])
		for c := range width {
			row[c] /= float32(count[k])
		}
		dst.Append(k, row)
	}
}
