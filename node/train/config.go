package train

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// Mode is how rounds are synchronised: one protocol parameterised by
// staleness (docs/protocol.md).
type Mode uint8

// Modes.
const (
	// Sync is staleness 0: an owner applies round r once every worker's
	// contribution to it is in, summing in member order, and answers the
	// round's requests only then, so every peer computes round r+1 from
	// the same values and the model is bit-identical everywhere.
	Sync Mode = iota + 1
	// SSP is stale-synchronous parallel: the values a worker computes
	// round c with include every worker's contributions through c-s-1.
	SSP
	// Async never waits for other workers: owners apply contributions on
	// arrival and answer at once.
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

// Gather is where a worker gets the values it computes with.
type Gather uint8

// Gathers.
const (
	// Need: a worker asks the owners of the rows its next batch touches for
	// exactly those rows (piggybacked on its contribution), and holds only
	// its shards and a batch's working set. Per-peer traffic and work per
	// example stay flat as peers are added.
	Need Gather = iota + 1
	// Full: every peer keeps a read copy of the whole model, and owners send
	// every worker every row that changed. Fewer bytes with two or three
	// peers, more with many; memory of a whole model on every peer.
	Full
)

// ParseGather parses "need" or "full".
func ParseGather(s string) (Gather, error) {
	switch s {
	case "need":
		return Need, nil
	case "full":
		return Full, nil
	}
	return 0, fmt.Errorf("%w: gather %q, want need or full", ErrConfig, s)
}

func (g Gather) String() string {
	switch g {
	case Need:
		return "need"
	case Full:
		return "full"
	}
	return fmt.Sprintf("gather(%d)", uint8(g))
}

// Final is the progress ("through") that means every worker has finished
// and every contribution there will be is applied.
const Final = math.MaxUint64

// Errors.
var (
	// ErrConfig wraps configuration errors.
	ErrConfig = errors.New("train: bad configuration")
	// ErrRemoved: the run removed this peer while it was alive (the
	// majority declared it dead during a partition). Its state is stale;
	// join again with a new Core.
	ErrRemoved = errors.New("removed from the training configuration while alive: join again")
	// ErrRefused: the run would not take this peer (Ready.Err says why).
	ErrRefused = errors.New("the run refused this peer")
	// ErrAlone: every other member of this peer's configuration has been
	// gone for a long time: the run went on without this peer (it was
	// cut off) and has ended, or every other peer crashed.
	ErrAlone = errors.New("every other member of the run is gone")
	// ErrNoQuorum: most of the run's raft voters have been gone for a
	// long time while the run needs a configuration it can only agree
	// with them (a dead member to remove, its end to agree): it can never
	// make progress. Raft commits nothing without a majority of its
	// voters, and a crashed voter never comes back (a restarted process is
	// a new member). Restart the job, from a checkpoint with --resume.
	ErrNoQuorum = errors.New("the run lost its agreement quorum")
	// ErrRaft: etcd raft panicked on a message that passed the authority
	// checks (authority.go, A6): a broken invariant of the raft log, named
	// with the message and its sender, instead of a stack trace.
	ErrRaft = errors.New("the agreement on configurations broke")
)

// Member is a peer of the run as the configurations name it: its peer ID
// and its member ID, which is also its raft node ID. A process gets a new
// member ID every time it starts (MemberID of its peer ID and incarnation),
// so a restarted peer is a new member: nothing the old process did is
// attributed to the new one.
type Member struct {
	Peer string
	ID   uint64
	// Since is the first round this member contributes to (the start of
	// the configuration that added it).
	Since uint64
}

// Placement maps shards to their holders, primary first. node/ring's Ring
// is one; every peer given the same member set must compute the same
// placement.
type Placement interface {
	Owners(shard int) []string
}

// PlaceFunc builds the placement of a member set (peer IDs, sorted).
type PlaceFunc func(members []string) (Placement, error)

// Config configures a Core. Start from DefaultConfig; the fields without a
// default (Self, ID, Model, Place, and Initial or Contact) must be set.
type Config struct {
	// Self is this peer's ID, ID its member ID (MemberID).
	Self string
	ID   uint64
	// Mode and Staleness: Sync is staleness 0, SSP uses Staleness (>= 1),
	// Async never waits for other workers.
	Mode      Mode
	Staleness int
	// Gather: Need or Full.
	Gather Gather
	// Prefetch is how many rounds ahead an ssp or async worker asks for the
	// rows of a batch (sync asks one round ahead: it must). 2 lets a worker
	// compute one round while the values of the next travel.
	Prefetch int
	// Model is the storage this peer's shards (and with Full the read copy)
	// live in: its layout, kind and optimizer are the run's. The core owns
	// it: nothing else may touch it while the core runs.
	Model *model.Model
	// Place builds the placement of a member set.
	Place PlaceFunc
	// Initial is the member set the run starts from (this peer among them)
	// when it bootstraps the run with the others; nil to join a run under
	// way through Contact.
	Initial []Member
	// Start is the first round of a bootstrapped run (a resumed checkpoint's
	// round; 0 otherwise).
	Start uint64
	// Contact is a member of the run to ask for admission when joining.
	Contact string
	// Contacts are more members to ask, in turn, when the one asked has
	// been silent for two retry intervals: a contact that admitted this
	// peer and crashed before it said so would otherwise leave it asking
	// a dead peer while the run waits for it (docs/protocol.md,
	// "Membership changes", rule M3).
	Contacts []string
	// Voters bounds the raft voters; the other members are learners, so
	// agreement costs the same with hundreds of peers.
	Voters int
	// Raft is how often the configuration agreement's raft ticks.
	Raft RaftTiming
	// RetryTicks is how long a request waits for its answer before it is
	// sent again (doubling each time, up to 8x).
	RetryTicks int
	// CheckpointTicks, when > 0, makes the leader schedule a checkpoint
	// every so many ticks.
	CheckpointTicks int
	// Seed makes every random choice of the core (election jitter)
	// reproducible.
	Seed uint64
	// Limits bound what the core accepts (see wire.Core.Check).
	Limits wire.Limits
	// Guard bounds what an owner accepts of a push (guard.go).
	Guard GuardConfig
	// Combine is how an owner combines a round's contributions: Sum (the
	// plain sum, default), Trimmed (sync only; guard.go, G3), or, for
	// windows of local steps, Mean or Capped (combine.go).
	Combine Combine
	// LocalSteps is the batches in a window of local steps: with more than
	// one, a round is a window: a worker gets the rows its window's batches
	// touch with their optimizer state, trains the batches on its own copy
	// (the driver does: ComputeReq's Weights are wide rows, and Computed's
	// answer their changes), and pushes each row's change; owners add the
	// workers' changes (model.AddDeltas). 0 and 1 push a gradient every
	// batch. Needs Gather Need.
	LocalSteps int
	// LocalState, with windows of local steps, keeps the optimizer state
	// with the workers: each worker's driver keeps its own state for the
	// rows it trains (the driver does: ComputeReq's Weights are then
	// plain rows, and Computed's answer their weights' changes), owners
	// answer and add weights only (model.AddWeightDeltas) and their own
	// state stays as it was. Windows then carry half the values with
	// AdaGrad. Needs LocalSteps > 1 and an optimizer other than FTRL,
	// whose weights follow from its state.
	LocalState bool
	// Trace, when set, is told of every apply and shard handoff (the
	// simulator audits them); it must not call the core.
	Trace func(TraceEvent)
	// InitShard, when set, gives a shard restarted from nothing (every
	// holder lost) its initial weights (an MLP's); nil leaves zeros.
	InitShard func(m *model.Model, s int)
}

// RaftTiming is the configuration agreement's clock: Every core ticks
// make one raft tick; the raft leader beats every HeartbeatTicks raft
// ticks, and a follower that has heard nothing from a leader for
// ElectionTicks raft ticks (plus a jitter of up to as many, from
// Config.Seed) campaigns.
type RaftTiming struct {
	Every          int
	HeartbeatTicks int
	ElectionTicks  int
}

// GuardConfig bounds what an owner accepts of a push (guard.go, rules G1
// and G2): a push that claims more examples than a job's batch, or a row
// that moves more than a bound, is refused or dropped.
type GuardConfig struct {
	// MaxExamples bounds the examples one push may claim: the job's batch
	// (every peer of a job uses the same). 0: no bound. (guard.go, G1)
	MaxExamples int
	// MaxRowGrad bounds a gradient row's L2 norm per example of its push:
	// owners drop a row over it (guard.go, G2). 0 is the model kind's
	// default (DefaultMaxRowGrad); a negative value turns the bound off.
	MaxRowGrad float64
}

// DefaultConfig returns the defaults, with the reason for each. Ticks are
// the driver's: it ticks every 10ms.
func DefaultConfig() Config {
	return Config{
		Mode: Sync,
		// SSP's usual bound in the literature (Ho et al., NIPS 2013) is a
		// few clocks.
		Staleness: 4,
		Gather:    Need,
		Prefetch:  2,
		// Five voters survive two failures; more only slow agreement.
		Voters: 5,
		// A raft tick of 100ms (10 core ticks), a heartbeat every tick and
		// an election after 1-2s of silence: etcd's defaults scaled to a
		// LAN, well under membership's dead-after of 5s.
		Raft: RaftTiming{Every: 10, HeartbeatTicks: 1, ElectionTicks: 10},
		// 2s: a round trip plus a round's apply on a loaded peer, many
		// times over; the message layer repairs ordinary losses long before.
		RetryTicks: 200,
		Limits:     wire.DefaultLimits(),
	}
}

// Validate reports the first field out of its domain.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Self == "" || c.ID == 0:
		return bad("self %q, member ID %d: both required", c.Self, c.ID)
	case c.Mode < Sync || c.Mode > Async:
		return bad("mode %d", c.Mode)
	case c.Mode == SSP && c.Staleness < 1:
		return bad("ssp staleness %d, want >= 1 (0 is sync)", c.Staleness)
	case c.Gather != Need && c.Gather != Full:
		return bad("gather %d", c.Gather)
	case c.Mode != Sync && c.Prefetch < 1:
		return bad("prefetch %d, want >= 1", c.Prefetch)
	case c.Model == nil || c.Place == nil:
		return bad("a model and a placement are required")
	case c.Initial == nil && c.Contact == "":
		return bad("neither initial members nor a contact to join through")
	case c.Guard.MaxExamples < 0 || math.IsNaN(c.Guard.MaxRowGrad) || math.IsInf(c.Guard.MaxRowGrad, 0):
		return bad("max examples %d, max row gradient %g: want a number of examples >= 0 and a finite bound", c.Guard.MaxExamples, c.Guard.MaxRowGrad)
	case c.LocalSteps < 0:
		return bad("local steps %d, want >= 0", c.LocalSteps)
	case c.LocalSteps > 1 && c.Gather != Need:
		return bad("windows of local steps need gather need: a full read copy holds no optimizer state")
	case c.LocalSteps > 1 && c.Combine == Trimmed:
		return bad("combine trimmed trims gradients of one batch; windows of local steps push changes")
	case c.LocalState && c.LocalSteps <= 1:
		return bad("optimizer state kept by the workers needs windows of local steps (LocalSteps > 1)")
	case c.LocalState && c.Model.Opt.Kind == model.FTRL:
		return bad("optimizer state kept by the workers: FTRL's weights follow from its state, which the owners must hold")
	case c.LocalSteps <= 1 && (c.Combine == Mean || c.Combine == Capped):
		return bad("combine %v combines windows' changes: it needs LocalSteps > 1", c.Combine)
	case c.Combine != Sum && c.Combine != Trimmed && c.Combine != Mean && c.Combine != Capped:
		return bad("combine %d", c.Combine)
	case c.Combine == Trimmed && c.Mode != Sync:
		return bad("combine trimmed needs sync mode: ssp and async owners apply each push as it comes, with nothing to trim against")
	case c.Voters < 1:
		return bad("voters %d, want >= 1", c.Voters)
	case c.Raft.Every < 1 || c.Raft.HeartbeatTicks < 1 || c.Raft.ElectionTicks <= c.Raft.HeartbeatTicks:
		return bad("raft ticks: every %d, heartbeat %d, election %d", c.Raft.Every, c.Raft.HeartbeatTicks, c.Raft.ElectionTicks)
	case c.RetryTicks < 1:
		return bad("retry ticks %d", c.RetryTicks)
	case c.CheckpointTicks < 0:
		return bad("checkpoint ticks %d", c.CheckpointTicks)
	}
	if c.Initial != nil {
		found := false
		for i, m := range c.Initial {
			if m.Peer == "" || m.ID == 0 {
				return bad("initial member %d: %q/%d", i, m.Peer, m.ID)
			}
			if i > 0 && m.Peer <= c.Initial[i-1].Peer {
				return bad("initial members not sorted by peer ID")
			}
			found = found || (m.Peer == c.Self && m.ID == c.ID)
		}
		if !found {
			return bad("self %s/%d is not among the initial members", c.Self, c.ID)
		}
	}
	return nil
}

// staleness is the mode's s: 0, the user's, or unbounded.
func (c *Config) staleness() uint64 {
	switch c.Mode {
	case Sync:
		return 0
	case SSP:
		return uint64(c.Staleness)
	}
	return math.MaxUint64 / 4
}

// prefetch is how many rounds ahead wants are sent.
func (c *Config) prefetch() uint64 {
	if c.Mode == Sync {
		return 1
	}
	return uint64(c.Prefetch)
}

// sortMembers sorts members by peer ID.
func sortMembers(ms []Member) {
	slices.SortFunc(ms, func(a, b Member) int {
		switch {
		case a.Peer < b.Peer:
			return -1
		case a.Peer > b.Peer:
			return 1
		}
		return 0
	})
}

// TraceEvent is what Config.Trace is told.
type TraceEvent struct {
	Kind    TraceKind
	Shards  []uint32 // the shards concerned
	Round   uint64   // sync: the round applied; async: the worker's round
	Members []uint64 // apply: the workers whose contributions were applied
	Peer    string   // handoff: the other side
	Req     uint64   // handoff: the transfer's request number
	Replica bool     // apply: as a replica
	Keys    []uint32 // rows: the rows written into the read copy
}

// TraceKind says what a TraceEvent reports.
type TraceKind uint8

// Trace kinds.
const (
	TraceApply   TraceKind = iota + 1 // contributions applied to shards
	TraceSend                         // a shard's state sent to Peer
	TraceInstall                      // a shard's state installed from Peer
	TracePromote                      // a shard restarted from nothing (or going on without rounds lost with its holders)
	TraceFree                         // a shard's state dropped here
	TraceRows                         // full gather: rows an owner sent written into the read copy
	// The fate of a worker's push or pull at an owner (Members: the
	// worker, Peer: its peer, Round: its round): answered "moved" for
	// Shards, kept for later (a gap, a shard awaited, a configuration not
	// applied yet), or answered. For logs of real runs (--log-level
	// trace); the simulator's checks do not need them.
	TraceMoved
	TraceDefer
	TraceAnswer
	// TraceLost: round Round applied to Shards without the contributions
	// of Members, answered by holders that crashed (the simulator checks
	// that no live peer's copy has them).
	TraceLost
)

// String names the kind for logs.
func (k TraceKind) String() string {
	switch k {
	case TraceApply:
		return "apply"
	case TraceSend:
		return "send"
	case TraceInstall:
		return "install"
	case TracePromote:
		return "promote"
	case TraceFree:
		return "free"
	case TraceRows:
		return "rows"
	case TraceMoved:
		return "moved"
	case TraceDefer:
		return "defer"
	case TraceAnswer:
		return "answer"
	case TraceLost:
		return "lost"
	}
	return fmt.Sprintf("trace(%d)", uint8(k))
}

// MemberID is the member (and raft node) ID of a process of peer that
// started with incarnation: a hash of both, never 0, top bit clear. Every
// peer computes the same ID from a membership view's (peer, incarnation).
func MemberID(peer string, incarnation uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], incarnation)
	id := xxhash.Sum64(append([]byte(peer), b[:]...)) &^ doneBit
	if id == 0 {
		id = 1
	}
	return id
}

// AutoLocalSteps is the window --local-steps auto gives a job of mode
// with the given number of workers (0: not known, as for a peer started
// by hand, which cannot know how many will come; cluster, bench and launch
// know their peers): in sync 4, and 2 for more than 5 workers; in ssp and
// async 8, and 1 (every batch) for more than 4 workers.
//
// In sync the owners add every worker's window (Sum), so a row that each
// worker's window moves to its optimum moves as many times as far as
// there are workers. Measured on the bench data (docs/scaling.md, "How
// many workers a window suits"): 4 and 5 workers × 4 batches end at a
// lone peer's log-loss (5 × 4 reached its final + 0.5% as soon as 5 × 2
// under caps, sending half the messages); 6 × 4 need 2.3 times 6 × 2's
// examples to get there, 8 × 4 end 1% above it, while 8 × 2 and 16 × 2
// end within 0.3% of it; 16 workers exchanging every batch end 0.9% above
// it (their batches make one step, too few steps in a pass).
//
// In ssp and async the owners take each window's change over the workers
// (Mean), which moves the rows they all share an N-th of a worker's way:
// 8 async workers at 0.2 core ended 8% above a lone peer with windows of
// 8 and 5% with windows of 2, and 0.2% exchanging every batch; 5 at 0.35
// core 2.8% above it with windows of 8. TestAutoLocalSteps (cluster) pins what the
// peers of a cluster get.
func AutoLocalSteps(mode Mode, workers int) int {
	switch {
	case mode == Sync && workers > 5:
		return 2
	case mode == Sync:
		return 4
	case workers > 4:
		return 1
	}
	return 8
}
