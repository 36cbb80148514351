package trainer

// How a peer enters a run. A peer whose membership view has formed asks
// the other members of the view how they stand (StartProtocol, one small
// request each) and then either bootstraps the run's first configuration
// with them (train.Config.Initial) or joins the run under way through one
// of its members (train.Config.Contact):
//
//   - a member that is running, or has decided a first member set without
//     this process in it, is the contact: this peer joins;
//   - a member that decided a first set with this process in it (the same
//     peer ID and incarnation, hence the same member ID) gives the set;
//   - otherwise the peer with the smallest peer ID among those that
//     answer decides, once at least --min-peers answer: the first set is
//     them. Everyone else asks again until it has. A member of the view
//     that runs no trainer (it answers nothing) is left out.
//
// A peer records its decision before it answers anyone with it, so two
// peers never bootstrap two different first configurations from one
// coordinator. A restarted process has a new incarnation, so a set that
// named its previous process sends it to join.
//
// Resuming (SetResume): each peer started with --resume lists the
// checkpoints it has in its answers. The newest round any of them has
// decides: the coordinator waits until every worker of that checkpoint
// answers, checks that the placement of those peers gives each one only
// shards its own file of that round holds, and bootstraps them at that
// round (Entry.Resume); the peers load their files. When the check fails,
// it says which peer lacks which shards, and every peer that asks fails
// with that message: a resumed run with a shard missing would be wrong,
// not slower. A peer lists only files it read whole (ScanResume), so a
// newest file that is damaged on one peer makes the run resume from the
// round before it. When no peer has a checkpoint at all, the coordinator
// fails the start (ErrNoCheckpoint: --resume means "go on", and silently
// starting over would lose the run) unless the peers were told to start a
// new run then (--resume=auto: SetResume's orStart).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// StartProtocol is the protocol ID of start probes.
const StartProtocol = "/gossiptrain/start/1"

// Requester is what a Starter needs of the transport (gossip.Transport has
// it).
type Requester interface {
	Serve(proto string, h func(ctx context.Context, from string, req []byte, w io.Writer) error)
	Request(ctx context.Context, peer string, proto string, req []byte) (io.ReadCloser, error)
}

// Entry is how this peer enters the run: Initial (bootstrap with these
// members) or Contact (join through this member). Resume, with Initial, is
// the checkpoint round the first configuration starts at (0: a new run).
type Entry struct {
	Initial []train.Member
	Contact string
	// Contacts are the other members found running, asked in turn should
	// Contact go silent while this peer joins (train.Config.Contacts).
	Contacts []string
	Resume   uint64
}

// ResumePoint is a checkpoint a peer can resume from: the round, its
// workers, and the shards this peer's file of it holds.
type ResumePoint struct {
	Round   uint64   `json:"round"`
	Members []string `json:"members"`
	Shards  []int    `json:"shards"`
}

// ResumeScan is what --resume found in this peer's checkpoint directory:
// the points it can resume from, and the files it passed over.
type ResumeScan struct {
	Dir     string
	Points  []ResumePoint
	Skipped []SkippedCheckpoint // oldest round first
}

// SkippedCheckpoint is a file of the directory that cannot resume this
// run: damaged (Damaged: VerifyCheckpoint failed; Why is its error), or
// whole but of another job or model, or without this worker's data
// position.
type SkippedCheckpoint struct {
	Path    string
	Round   uint64
	Damaged bool
	Why     string
}

// ScanResume lists the checkpoints of dir that resume job with model m:
// files that are whole (VerifyCheckpoint reads each one through), hold
// m's kind and layout, and a worker's data position. The others are in
// Skipped, with why. An error is only one of reading dir itself.
func ScanResume(dir, job string, m *model.Model) (ResumeScan, error) {
	sc := ResumeScan{Dir: dir}
	whole, damaged, err := ScanCheckpoints(dir)
	if err != nil {
		return sc, err
	}
	for _, d := range damaged {
		why := strings.TrimPrefix(unwrapCkpt(d.Err), d.Path+": ")
		sc.Skipped = append(sc.Skipped, SkippedCheckpoint{Path: d.Path, Round: d.Round, Damaged: true, Why: why})
	}
	want := modelDesc(m)
	for _, c := range whole {
		why := ""
		switch {
		case c.Job != job:
			why = fmt.Sprintf("it is of job %q, this is %q", c.Job, job)
		case c.Model != want:
			why = fmt.Sprintf("it holds a model of %s, this run trains %s", c.Model, want)
		case !c.Worker:
			why = "it holds shards only: this peer's data position at that round was not known when it was written"
		default:
			sc.Points = append(sc.Points, ResumePoint{Round: c.Round, Members: c.Members, Shards: c.Shards})
			continue
		}
		sc.Skipped = append(sc.Skipped, SkippedCheckpoint{Path: c.Path, Round: c.Round, Why: why})
	}
	slices.SortFunc(sc.Skipped, func(a, b SkippedCheckpoint) int { return cmpU64(a.Round, b.Round) })
	return sc, nil
}

// LogSkipped logs each skipped file once: a warning for a damaged one or
// another model's, an info line for another job's or one without a data
// position.
func (sc ResumeScan) LogSkipped(log zerolog.Logger) {
	for _, s := range sc.Skipped {
		ev := log.Info()
		what := "cannot resume this run"
		if s.Damaged {
			ev, what = log.Warn(), "is damaged: not resumable"
		} else if strings.Contains(s.Why, "model") {
			ev = log.Warn()
		}
		ev.Str("file", s.Path).Str("why", s.Why).Msgf("--resume: checkpoint %s %s", filepath.Base(s.Path), what)
	}
}

// LogResuming says, once the run resumes at round at, why this peer's
// newer files were passed over: "checkpoint round-R.ckpt is damaged
// (...): resuming from round Q".
func (sc ResumeScan) LogResuming(log zerolog.Logger, at uint64) {
	for _, s := range sc.Skipped {
		if s.Round <= at {
			continue
		}
		what := "cannot resume this run"
		if s.Damaged {
			what = "is damaged"
		}
		log.Warn().Str("file", s.Path).Uint64("round", at).
			Msgf("checkpoint %s %s (%s): resuming from round %d", filepath.Base(s.Path), what, s.Why, at)
	}
}

// Describe says what the directory holds, for the error of a --resume
// that found no checkpoint anywhere.
func (sc ResumeScan) Describe() string {
	if len(sc.Points) > 0 {
		return fmt.Sprintf("%s holds %d checkpoints this run can resume from", sc.Dir, len(sc.Points))
	}
	if len(sc.Skipped) == 0 {
		return fmt.Sprintf("%s holds no checkpoint", sc.Dir)
	}
	why := make([]string, len(sc.Skipped))
	for i, s := range sc.Skipped {
		why[i] = filepath.Base(s.Path) + ": " + s.Why
	}
	return fmt.Sprintf("%s holds %d checkpoint files and none this run can resume from (%s)", sc.Dir, len(sc.Skipped), strings.Join(why, "; "))
}

// Start states, as probes answer them.
const (
	stateWaiting  = "waiting"  // this process has not decided yet
	stateStarting = "starting" // decided a first member set (Members)
	stateRunning  = "running"  // its core runs
	stateEnded    = "ended"    // its run finished
	stateFailed   = "failed"   // it decided the run cannot resume (Failed says why)
)

// startAnswer is a probe's answer (JSON: a few hundred bytes).
type startAnswer struct {
	Job      string        `json:"job"`
	State    string        `json:"state"`
	Members  []startMember `json:"members,omitempty"`
	ResumeAt uint64        `json:"resume_at,omitempty"` // with Members: the round they start at
	Points   []ResumePoint `json:"checkpoints,omitempty"`
	Failed   string        `json:"failed,omitempty"`
	// NoCheckpoint, with state failed: it failed because no peer has a
	// checkpoint (ErrNoCheckpoint).
	NoCheckpoint bool   `json:"no_checkpoint,omitempty"`
	from         string // who answered (not on the wire)
	err          error  // the probe failed
}

type startMember struct {
	Peer string `json:"peer"`
	ID   uint64 `json:"id"`
}

// maxStartAnswer bounds an answer's size: a thousand members' IDs fit.
const maxStartAnswer = 256 << 10

// Starter answers other peers' probes and finds this peer's Entry.
type Starter struct {
	tr   Requester
	job  string
	self string
	id   uint64
	log  zerolog.Logger

	mu       sync.Mutex
	state    string
	members  []startMember // the first set this peer bootstrapped with
	resumeAt uint64        // and the round it starts at
	failed   string
	noCkpt   bool // failed for want of any checkpoint

	resume  bool // SetResume was called
	orStart bool // with no checkpoint anywhere, start from round 0
	serving bool // the probe handler is registered (Enter)
	points  []ResumePoint
	place   train.PlaceFunc
	nshards int
}

// SetResume makes this peer resume from a checkpoint when it starts a run:
// points are the checkpoints it has (its whole files: ScanResume), place
// the run's placement of the model's shards. When no peer has any
// checkpoint, a coordinator with orStart starts a new run from round 0;
// without, it fails, and Enter returns ErrNoCheckpoint on every peer.
func (s *Starter) SetResume(points []ResumePoint, place train.PlaceFunc, shards int, orStart bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resume, s.points, s.place, s.nshards, s.orStart = true, points, place, shards, orStart
}

// NewStarter makes the starter of this process; self and id are its peer
// ID and member ID. It answers other peers' probes from its first Enter
// on: before that it may not know its checkpoints yet (SetResume), and
// an answer without them would tell the coordinator it has none (a
// coordinator once refused to resume a run for that, while the peer was
// still reading its files).
func NewStarter(tr Requester, job, self string, id uint64, log zerolog.Logger) *Starter {
	return &Starter{tr: tr, job: job, self: self, id: id, log: log, state: stateWaiting}
}

func (s *Starter) serve(_ context.Context, _ string, _ []byte, w io.Writer) error {
	s.mu.Lock()
	a := startAnswer{Job: s.job, State: s.state, Members: s.members, ResumeAt: s.resumeAt, Points: s.points, Failed: s.failed, NoCheckpoint: s.noCkpt}
	s.mu.Unlock()
	return json.NewEncoder(w).Encode(a)
}

// Running says this peer's core runs: probes send joiners to it.
func (s *Starter) Running() { s.set(stateRunning) }

// Ended says this peer's run finished: a peer that finds only ended
// members fails instead of starting a run of its own.
func (s *Starter) Ended() { s.set(stateEnded) }

func (s *Starter) set(state string) {
	s.mu.Lock()
	s.state = state
	s.mu.Unlock()
}

// ErrRunEnded: the members this peer found have finished the run.
var ErrRunEnded = errors.New("the run this peer found has ended: start the job again, or train alone")

// View is a membership view: peer IDs and their incarnations, in the
// same order.
type View struct {
	Peers        []string
	Incarnations []uint64
}

// Enter probes the view's members until it knows how this peer enters the
// run; it asks again while the coordinator has not decided, first after an
// eighth of retry, then after twice as long each time up to retry: the
// coordinator decides within a probe or two of the others, and every peer's
// training clock runs from its own entry, so a peer that waited a whole
// retry (250 ms for a job peer) to see the decision started that much
// later than the coordinator, and the cluster's time to accuracy carried
// it (TestEnterAsksAgainSoon).
// view returns the membership's current view (it may change meanwhile). A
// coordinator starts a run only once at least minPeers peers (itself
// included) answer.
func (s *Starter) Enter(ctx context.Context, view func() View, minPeers int, retry time.Duration) (Entry, error) {
	s.mu.Lock()
	if !s.serving {
		s.serving = true
		s.tr.Serve(StartProtocol, s.serve)
	}
	s.mu.Unlock()
	wait := max(retry/8, time.Millisecond)
	for {
		v := view()
		answers := s.probe(ctx, v)
		var contact, ended string
		var others []string
		running := false // contact is running (not only starting)
		var given []startMember
		var givenAt uint64
		for _, a := range answers {
			switch {
			case a.err != nil || a.Job != s.job:
			case a.State == stateFailed && a.NoCheckpoint:
				return Entry{}, fmt.Errorf("%w: %w (%s; says %s)", ErrCannotResume, ErrNoCheckpoint, a.Failed, short(a.from))
			case a.State == stateFailed:
				return Entry{}, fmt.Errorf("%w: %s (says %s)", ErrCannotResume, a.Failed, a.from)
			case a.State == stateEnded:
				ended = a.from
			case a.State == stateRunning || a.State == stateStarting:
				if !slices.Contains(a.Members, startMember{s.self, s.id}) {
					others = append(others, a.from)
					if contact == "" || a.State == stateRunning && !running {
						contact, running = a.from, a.State == stateRunning
					}
				} else if given == nil || a.from < ownerOf(given) {
					given, givenAt = a.Members, a.ResumeAt
				}
			}
		}
		switch {
		case given != nil:
			return s.decide(given, givenAt), nil
		case contact != "":
			s.log.Info().Str("contact", contact).Msg("a run is under way: joining it")
			others = slices.DeleteFunc(others, func(p string) bool { return p == contact })
			slices.Sort(others)
			return Entry{Contact: contact, Contacts: others}, nil
		case ended != "":
			return Entry{}, fmt.Errorf("%w (%s says so)", ErrRunEnded, ended)
		}
		// The coordinator is the smallest peer ID among the peers that
		// answered (a member of the view that runs no trainer, or has not
		// started its own yet, is not one).
		var ms []startMember
		for i, p := range v.Peers {
			if p == s.self || slices.ContainsFunc(answers, func(a startAnswer) bool { return a.from == p && a.err == nil && a.Job == s.job }) {
				ms = append(ms, startMember{p, train.MemberID(p, v.Incarnations[i])})
			}
		}
		slices.SortFunc(ms, func(a, b startMember) int { return strings.Compare(a.Peer, b.Peer) })
		if s.resume {
			if e, ok, err := s.resumeDecision(ms, answers, minPeers); err != nil || ok {
				return e, err
			}
		} else if len(ms) >= minPeers && ms[0].Peer == s.self {
			s.log.Info().Int("members", len(ms)).Msg("no run under way: starting one with the peers that answered")
			return s.decide(ms, 0), nil
		}
		select {
		case <-ctx.Done():
			return Entry{}, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, retry)
	}
}

// ownerOf is the coordinator of a first set: its smallest peer ID (the
// set is sorted).
func ownerOf(ms []startMember) string { return ms[0].Peer }

func (s *Starter) decide(ms []startMember, resumeAt uint64) Entry {
	s.mu.Lock()
	s.state, s.members, s.resumeAt = stateStarting, ms, resumeAt
	s.mu.Unlock()
	out := make([]train.Member, len(ms))
	for i, m := range ms {
		out[i] = train.Member{Peer: m.Peer, ID: m.ID}
	}
	return Entry{Initial: out, Resume: resumeAt}
}

// ErrCannotResume: the peers' checkpoints cannot resume the run.
var ErrCannotResume = errors.New("cannot resume from the checkpoints")

// ErrNoCheckpoint: started with --resume, no peer has a checkpoint of the
// run it can resume from (it also matches ErrCannotResume).
var ErrNoCheckpoint = errors.New("no peer has a checkpoint to resume from")

// resumeDecision is the coordinator's decision when resuming: ok when this
// peer decided (or failed). ms are the peers that answered and this one.
func (s *Starter) resumeDecision(ms []startMember, answers []startAnswer, minPeers int) (Entry, bool, error) {
	s.mu.Lock()
	own, place, nshards := s.points, s.place, s.nshards
	s.mu.Unlock()
	points := map[string][]ResumePoint{s.self: own}
	for _, a := range answers {
		if a.err == nil && a.Job == s.job && a.State == stateWaiting {
			points[a.from] = a.Points
		}
	}
	// The newest round whose workers all answered and whose files cover
	// the placement; while a worker of a newer one has not answered yet,
	// wait for it.
	var rounds []uint64
	for _, ps := range points {
		for _, pt := range ps {
			if !slices.Contains(rounds, pt.Round) {
				rounds = append(rounds, pt.Round)
			}
		}
	}
	slices.Sort(rounds)
	slices.Reverse(rounds)
	if len(rounds) == 0 {
		if len(ms) < minPeers || ms[0].Peer != s.self {
			return Entry{}, false, nil
		}
		if s.orStart {
			s.log.Warn().Int("members", len(ms)).Msg("--resume=auto: no peer has a checkpoint: starting a new run from round 0")
			return s.decide(ms, 0), true, nil
		}
		msg := fmt.Sprintf("peers: %s", strings.Join(shortPeers(peersOf(ms)), ", "))
		s.mu.Lock()
		s.state, s.failed, s.noCkpt = stateFailed, msg, true
		s.mu.Unlock()
		return Entry{}, true, fmt.Errorf("%w: %w (%s)", ErrCannotResume, ErrNoCheckpoint, msg)
	}
	var problems []string // why each newer round cannot resume the run
	for _, r := range rounds {
		var workers []string
		for _, ps := range points {
			for _, pt := range ps {
				if pt.Round == r && len(pt.Members) > len(workers) {
					workers = pt.Members
				}
			}
		}
		var first []startMember
		var missing []string
		for _, p := range workers {
			if i := slices.IndexFunc(ms, func(m startMember) bool { return m.Peer == p }); i >= 0 {
				first = append(first, ms[i])
			} else {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 || len(first) < minPeers {
			if ms[0].Peer == s.self {
				s.log.Info().Uint64("round", r).Strs("waiting_for", shortPeers(missing)).
					Msg("--resume: waiting for every worker of the checkpoint")
			}
			return Entry{}, false, nil
		}
		if first[0].Peer != s.self {
			return Entry{}, false, nil // its coordinator decides
		}
		p := s.coverage(points, first, r, place, nshards)
		if len(p) == 0 {
			ev := s.log.Info()
			if len(problems) > 0 {
				ev = s.log.Warn().Strs("newer_rounds_passed_over", problems)
			}
			ev.Uint64("round", r).Int("members", len(first)).Msg("--resume: resuming the run from its newest complete checkpoint")
			return s.decide(first, r), true, nil
		}
		problems = append(problems, p...)
	}
	msg := strings.Join(problems, "; ")
	s.mu.Lock()
	s.state, s.failed = stateFailed, msg
	s.mu.Unlock()
	return Entry{}, true, fmt.Errorf("%w: %s", ErrCannotResume, msg)
}

// coverage lists what keeps the peers of first from resuming at round r:
// a peer without a file of r, or whose file lacks a shard the placement of
// first gives it.
func (s *Starter) coverage(points map[string][]ResumePoint, first []startMember, r uint64, place train.PlaceFunc, nshards int) []string {
	peers := make([]string, len(first))
	for i, m := range first {
		peers[i] = m.Peer
	}
	pl, err := place(peers)
	if err != nil {
		return []string{fmt.Sprintf("round %d: placement: %v", r, err)}
	}
	var problems []string
	for _, p := range peers {
		i := slices.IndexFunc(points[p], func(pt ResumePoint) bool { return pt.Round == r })
		if i < 0 {
			problems = append(problems, fmt.Sprintf("%s has no whole checkpoint of round %d (started without --resume, or its --checkpoint-dir lost it, or holds it damaged: see that peer's log)", short(p), r))
			continue
		}
		have := points[p][i].Shards
		var lack []int
		for sh := range nshards {
			if slices.Contains(pl.Owners(sh), p) && !slices.Contains(have, sh) {
				lack = append(lack, sh)
			}
		}
		if len(lack) > 0 {
			problems = append(problems, fmt.Sprintf("%s lacks shards %v of round %d that the placement gives it", short(p), lack, r))
		}
	}
	return problems
}

func short(p string) string {
	if len(p) > 12 {
		return "…" + p[len(p)-6:]
	}
	return p
}

func peersOf(ms []startMember) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Peer
	}
	return out
}

func shortPeers(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = short(p)
	}
	return out
}

// probe asks every other member of v at once, each for at most 3s.
func (s *Starter) probe(ctx context.Context, v View) []startAnswer {
	out := make([]startAnswer, 0, len(v.Peers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range v.Peers {
		if p == s.self {
			continue
		}
		wg.Go(func() {
			a := s.ask(ctx, p)
			mu.Lock()
			out = append(out, a)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b startAnswer) int { return strings.Compare(a.from, b.from) })
	return out
}

func (s *Starter) ask(ctx context.Context, p string) startAnswer {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	r, err := s.tr.Request(ctx, p, StartProtocol, []byte(s.job))
	if err != nil {
		return startAnswer{from: p, err: err}
	}
	defer r.Close()
	var a startAnswer
	if err := json.NewDecoder(io.LimitReader(r, maxStartAnswer)).Decode(&a); err != nil {
		return startAnswer{from: p, err: err}
	}
	a.from = p
	if len(a.Members) > 0 && !slices.IsSortedFunc(a.Members, func(x, y startMember) int { return strings.Compare(x.Peer, y.Peer) }) {
		return startAnswer{from: p, err: errors.New("members not sorted")}
	}
	return a
}
