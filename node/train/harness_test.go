package train

import (
	"fmt"
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
)

// tnet is a small synchronous network of cores for the core's own tests:
// messages wait in one queue until deliver takes them; the test ticks,
// drops, injects and inspects. Cores get no batches: what is tested here is
// agreement and the owner's bounds, not training.
type tnet struct {
	t     testing.TB
	cores map[string]*Core
	names []string
	queue []Envelope
	from  []string
	// fetched holds each core's Ready.Fetched, in order.
	fetched map[string][]FetchResult
}

// modPlace puts shard s on member s mod n, so placements are checkable by
// hand.
type modPlace []string

func (p modPlace) Owners(s int) []string { return []string{p[s%len(p)]} }

func placeMod(members []string) (Placement, error) { return modPlace(members), nil }

// testModel is a small logreg model: 64 features, 4 shards.
func testModel(t testing.TB) *model.Model {
	m, err := model.New(model.Logreg, 64, 2, 4, model.DefaultOptConfig(model.SGD))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newTNet starts n cores that bootstrap one run together, with voters
// voters (the others learners), everyone alive.
func newTNet(t testing.TB, n, voters int, mode Mode) *tnet {
	tn := &tnet{t: t, cores: map[string]*Core{}}
	var initial []Member
	for i := range n {
		name := fmt.Sprintf("p%d", i)
		tn.names = append(tn.names, name)
		initial = append(initial, Member{Peer: name, ID: MemberID(name, 1)})
	}
	sortMembers(initial)
	for i, name := range tn.names {
		cfg := DefaultConfig()
		cfg.Self, cfg.ID, cfg.Mode, cfg.Model, cfg.Place, cfg.Initial = name, MemberID(name, 1), mode, testModel(t), placeMod, initial
		cfg.Voters, cfg.Seed = voters, uint64(i+1)
		cfg.Limits.Features = cfg.Model.Layout.Features
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		tn.cores[name] = c
	}
	var ids []uint64
	for _, m := range initial {
		ids = append(ids, m.ID)
	}
	for _, name := range tn.names {
		tn.cores[name].Alive(ids)
		tn.collect(name)
	}
	return tn
}

// collect queues what core name wants to send and fails the test on its
// errors.
func (tn *tnet) collect(name string) {
	rd := tn.cores[name].Ready()
	if len(rd.Fetched) > 0 {
		if tn.fetched == nil {
			tn.fetched = map[string][]FetchResult{}
		}
		tn.fetched[name] = append(tn.fetched[name], rd.Fetched...)
	}
	for _, e := range rd.Messages {
		tn.queue = append(tn.queue, e)
		tn.from = append(tn.from, name)
	}
	if rd.Err != nil {
		tn.t.Fatalf("%s: %v", name, rd.Err)
	}
}

// deliver hands every queued message to its core, and what they send in
// turn, until the queue is empty (at most limit messages).
func (tn *tnet) deliver(limit int) {
	for n := 0; len(tn.queue) > 0 && n < limit; n++ {
		e, from := tn.queue[0], tn.from[0]
		tn.queue, tn.from = tn.queue[1:], tn.from[1:]
		c := tn.cores[e.To]
		if c == nil {
			continue
		}
		c.Receive(from, e.Msg.Clone())
		tn.collect(e.To)
	}
}

// run ticks every core ticks times, delivering after each tick.
func (tn *tnet) run(ticks int) {
	for range ticks {
		for _, name := range tn.names {
			tn.cores[name].Tick()
			tn.collect(name)
		}
		tn.deliver(1 << 16)
	}
}

// leader runs until one core leads and every core knows it, and returns it.
func (tn *tnet) leader() string {
	for range 100 {
		tn.run(50)
		lead := tn.cores[tn.names[0]].Leader()
		agreed := lead != ""
		for _, name := range tn.names {
			agreed = agreed && tn.cores[name].Leader() == lead
		}
		if agreed {
			return lead
		}
	}
	tn.t.Fatal("no leader after 5000 ticks")
	return ""
}
