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

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

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
// members) or Contact (join through this member).
type Entry struct {
	Initial []train.Member
	Contact string
}

// Start states, as probes answer them.
const (
	stateWaiting  = "waiting"  // this process has not decided yet
	stateStarting = "starting" // decided a first member set (Members)
	stateRunning  = "running"  // its core runs
	stateEnded    = "ended"    // its run finished
)

// startAnswer is a probe's answer (JSON: a few hundred bytes).
type startAnswer struct {
	Job     string        `json:"job"`
	State   string        `json:"state"`
	Members []startMember `json:"members,omitempty"`
	from    string        // who answered (not on the wire)
	err     error         // the probe failed
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

	mu      sync.Mutex
	state   string
	members []startMember // the first set this peer bootstrapped with
}

// NewStarter registers the probe handler on tr. self and id are this
// process's peer ID and member ID.
func NewStarter(tr Requester, job, self string, id uint64, log zerolog.Logger) *Starter {
	s := &Starter{tr: tr, job: job, self: self, id: id, log: log, state: stateWaiting}
	tr.Serve(StartProtocol, s.serve)
	return s
}

func (s *Starter) serve(_ context.Context, _ string, _ []byte, w io.Writer) error {
	s.mu.Lock()
	a := startAnswer{Job: s.job, State: s.state, Members: s.members}
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
// run; it asks again every retry while the coordinator has not decided.
// view returns the membership's current view (it may change meanwhile). A
// coordinator starts a run only once at least minPeers peers (itself
// included) answer.
func (s *Starter) Enter(ctx context.Context, view func() View, minPeers int, retry time.Duration) (Entry, error) {
	for {
		v := view()
		answers := s.probe(ctx, v)
		var contact, ended string
		running := false // contact is running (not only starting)
		var given []startMember
		for _, a := range answers {
			switch {
			case a.err != nil || a.Job != s.job:
			case a.State == stateEnded:
				ended = a.from
			case a.State == stateRunning || a.State == stateStarting:
				if !slices.Contains(a.Members, startMember{s.self, s.id}) {
					if contact == "" || a.State == stateRunning && !running {
						contact, running = a.from, a.State == stateRunning
					}
				} else if given == nil || a.from < ownerOf(given) {
					given = a.Members
				}
			}
		}
		switch {
		case given != nil:
			return s.decide(given), nil
		case contact != "":
			s.log.Info().Str("contact", contact).Msg("a run is under way: joining it")
			return Entry{Contact: contact}, nil
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
		if len(ms) >= minPeers && ms[0].Peer == s.self {
			s.log.Info().Int("members", len(ms)).Msg("no run under way: starting one with the peers that answered")
			return s.decide(ms), nil
		}
		select {
		case <-ctx.Done():
			return Entry{}, ctx.Err()
		case <-time.After(retry):
		}
	}
}

// ownerOf is the coordinator of a first set: its smallest peer ID (the
// set is sorted).
func ownerOf(ms []startMember) string { return ms[0].Peer }

func (s *Starter) decide(ms []startMember) Entry {
	s.mu.Lock()
	s.state, s.members = stateStarting, ms
	s.mu.Unlock()
	out := make([]train.Member, len(ms))
	for i, m := range ms {
		out[i] = train.Member{Peer: m.Peer, ID: m.ID}
	}
	return Entry{Initial: out}
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
