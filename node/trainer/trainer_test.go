package trainer

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/ring"
	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// memLink delivers in-process, as the real link would: never blocking the
// sender.
type memLink struct {
	mu    sync.Mutex
	peers map[string]*Trainer
	// tamper, when set, may change a message before it is delivered (a
	// faulty sender; it gets a copy).
	tamper func(from string, m *wire.Core)
}

// link is one peer's view of the memLink (it stamps the sender).
type link struct {
	l    *memLink
	self string
}

func (k link) Send(to string, msg *wire.Core) {
	k.l.mu.Lock()
	t := k.l.peers[to]
	tamper := k.l.tamper
	k.l.mu.Unlock()
	if t == nil {
		return
	}
	d := delivery{k.self, msg.Clone()}
	if tamper != nil {
		tamper(k.self, d.msg)
	}
	select {
	case t.inbox <- d:
	default:
		go func() { t.inbox <- d }()
	}
}

// rowsSource reads rows generated in memory.
type rowsSource struct {
	b   data.Batch
	pos int
}

func (s *rowsSource) Next(b *data.Batch, max int) (int, error) {
	src := memSource{b: &s.b, pos: s.pos}
	n, err := src.Next(b, max)
	s.pos = src.pos
	return n, err
}
func (s *rowsSource) Stats() data.Stats { return data.Stats{Rows: int64(s.pos)} }
func (s *rowsSource) Close() error      { return nil }

// planted makes rows of a logistic model with a planted weight vector.
func planted(seed uint64, rows, dim, nnz int) data.Batch {
	rng := rand.New(rand.NewPCG(seed, 7))
	w := make([]float64, dim)
	wr := rand.New(rand.NewPCG(99, 1))
	for i := range w {
		w[i] = wr.NormFloat64()
	}
	var b data.Batch
	b.Reset()
	for range rows {
		seen := map[uint32]bool{}
		z := 0.0
		for len(seen) < nnz {
			k := uint32(rng.IntN(dim))
			if seen[k] {
				continue
			}
			seen[k] = true
		}
		ks := make([]uint32, 0, nnz)
		for k := range seen {
			ks = append(ks, k)
		}
		slicesSort(ks)
		for _, k := range ks {
			b.Add(k, 1)
			z += w[k]
		}
		y := float32(0)
		if rng.Float64() < 1/(1+math.Exp(-z)) {
			y = 1
		}
		b.EndRow(y)
	}
	return b
}

func slicesSort(a []uint32) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func newModel(t testing.TB, dim uint64) *model.Model {
	opt := model.DefaultOptConfig(model.AdaGrad)
	m, err := model.New(model.Logreg, dim, 2, 16, opt)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// startPeers runs n trainers over one memLink and returns their results.
func startPeers(t *testing.T, n int, mode train.Mode, gather train.Gather, replicas int) ([]Summary, []error) {
	t.Helper()
	return startPeersWith(t, n, mode, gather, replicas, nil)
}

// setup, when not nil, changes peer i's configuration and hooks before it
// is made (startPeersSetup).
type setup func(i int, cfg *Config, h *Hooks)

func startPeersWith(t *testing.T, n int, mode train.Mode, gather train.Gather, replicas int, also func(context.Context, *memLink, []train.Member)) ([]Summary, []error) {
	t.Helper()
	return startPeersSetup(t, n, mode, gather, replicas, also, nil)
}

// startPeersWith is startPeers with also, while the peers run, also(ctx,
// link, initial members) on a goroutine of its own (ctx ends when they
// are done).
func startPeersSetup(t *testing.T, n int, mode train.Mode, gather train.Gather, replicas int, also func(context.Context, *memLink, []train.Member), change setup) ([]Summary, []error) {
	t.Helper()
	return startPeersOn(t, n, mode, gather, replicas, also, change, nil)
}

// startPeersOn is startPeersSetup where peer i reads open(i) (nil: the
// planted rows of seed i+1, 600 of them).
func startPeersOn(t *testing.T, n int, mode train.Mode, gather train.Gather, replicas int, also func(context.Context, *memLink, []train.Member), change setup,
	open func(i int) func(int) (data.Source, error)) ([]Summary, []error) {
	t.Helper()
	const dim = 500
	ml := &memLink{peers: map[string]*Trainer{}}
	names := make([]string, n)
	var initial []train.Member
	for i := range names {
		names[i] = fmt.Sprintf("peer%02d", i)
		initial = append(initial, train.Member{Peer: names[i], ID: train.MemberID(names[i], 1)})
	}
	rcfg := ring.DefaultConfig()
	rcfg.Shards, rcfg.Replicas = 16, replicas
	place := func(members []string) (train.Placement, error) { return ring.New(rcfg, members) }
	test := planted(1000, 500, dim, 5)
	trainers := make([]*Trainer, n)
	for i, name := range names {
		cfg := DefaultConfig()
		cfg.Core.Self, cfg.Core.ID = name, train.MemberID(name, 1)
		cfg.Core.Model, cfg.Core.Place, cfg.Core.Initial = newModel(t, dim), place, initial
		cfg.Core.Mode, cfg.Core.Gather = mode, gather
		cfg.Core.Staleness = 2
		cfg.Core.Seed = uint64(i + 1)
		cfg.Batch, cfg.Epochs, cfg.Tick = 50, 2, time.Millisecond
		cfg.Threads = 2
		var hooks Hooks
		if change != nil {
			change(i, &cfg, &hooks)
		}
		tr, err := New(cfg, hooks, link{ml, name})
		if err != nil {
			t.Fatal(err)
		}
		trainers[i] = tr
		ml.peers[name] = tr
	}
	sums := make([]Summary, n)
	errs := make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, tr := range trainers {
		rows := planted(uint64(i+1), 600, dim, 5)
		ids := make([]uint64, n)
		for j := range ids {
			ids[j] = initial[j].ID
		}
		tr.SetAlive(ids)
		src := func(int) (data.Source, error) { return &rowsSource{b: rows}, nil }
		if open != nil {
			src = open(i)
		}
		wg.Go(func() {
			testSrc := func() (data.Source, error) { return &rowsSource{b: test}, nil }
			sums[i], errs[i] = tr.Run(ctx, src, ReadTestSet(tr.m, testSrc))
		})
	}
	var side sync.WaitGroup
	if also != nil {
		sctx, stop := context.WithCancel(ctx)
		side.Go(func() { also(sctx, ml, initial) })
		wg.Wait()
		stop()
		side.Wait()
		return sums, errs
	}
	wg.Wait()
	return sums, errs
}

// reference trains one peer alone on every peer's rows (the same epochs
// and batch), for comparison.
func reference(t *testing.T, n int) sgd.Metrics {
	var all data.Batch
	all.Reset()
	for i := range n {
		rows := planted(uint64(i+1), 600, 500, 5)
		all.AppendRows(&rows)
	}
	test := planted(1000, 500, 500, 5)
	m := newModel(t, 500)
	cfg := sgd.DefaultConfig()
	cfg.Batch, cfg.Epochs = 50, 2
	sum, err := sgd.Train(context.Background(), m, cfg, func(int) (data.Source, error) { return &rowsSource{b: all}, nil },
		func() (data.Source, error) { return &rowsSource{b: test}, nil }, sgd.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	return sum.Final
}

func TestPeersTrainTogether(t *testing.T) {
	ref := reference(t, 3)
	hashes := map[string]uint64{}
	for _, tc := range []struct {
		mode   train.Mode
		gather train.Gather
	}{{train.Sync, train.Need}, {train.Sync, train.Full}, {train.SSP, train.Need}, {train.Async, train.Need}} {
		t.Run(fmt.Sprintf("%s-%s", tc.mode, tc.gather), func(t *testing.T) {
			sums, errs := startPeers(t, 3, tc.mode, tc.gather, 1)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("peer %d: %v", i, err)
				}
			}
			for i, s := range sums {
				if !s.Evaluated || s.Final.LogLoss > ref.LogLoss*1.05 {
					t.Errorf("peer %d: final evaluation %+v (evaluated %v): one peer on all the data reaches %.4f", i, s.Final, s.Evaluated, ref.LogLoss)
				}
				if s.ModelHash != sums[0].ModelHash || s.Final != sums[0].Final {
					t.Errorf("peer %d ends with model %x %+v, peer 0 with %x %+v", i, s.ModelHash, s.Final, sums[0].ModelHash, sums[0].Final)
				}
				if s.Examples != 1200 {
					t.Errorf("peer %d trained %d examples, want 1200 (600 rows, 2 epochs)", i, s.Examples)
				}
			}
			hashes[fmt.Sprint(tc.mode, tc.gather)] = sums[0].ModelHash
		})
	}
	// Sync applies the same sums in the same order whichever way workers
	// get their values: one model.
	if a, b := hashes[fmt.Sprint(train.Sync, train.Need)], hashes[fmt.Sprint(train.Sync, train.Full)]; a != b {
		t.Errorf("sync ends with model %x gathering what it needs, %x with full read copies", a, b)
	}
}

// runTimeout bounds a test run of peers.
var runTimeout = 2 * time.Minute

// A peer evaluates every EvalEvery of its examples and at the end, but not
// twice at the end: the evaluation due at its last gradient is the final
// one (each costs a fetch of the test set's rows).
func TestEvaluationsAlongTheWayAndOnceAtTheEnd(t *testing.T) {
	var mu sync.Mutex
	evals := map[int][]int64{}
	sums, errs := startPeersSetup(t, 2, train.Sync, train.Need, 1, nil, func(i int, cfg *Config, h *Hooks) {
		cfg.EvalEvery = 600 // of 1200 examples: half-way and at the end
		h.Eval = func(p sgd.EvalPoint) {
			mu.Lock()
			evals[i] = append(evals[i], p.Examples)
			mu.Unlock()
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("peer %d: %v", i, err)
		}
		if !sums[i].Evaluated {
			t.Errorf("peer %d has no final evaluation", i)
		}
		// A point is labelled with the examples trained when its values
		// arrived: the worker goes on computing while the test set's rows
		// are fetched, so the half-way point may come a batch or two late.
		if got := evals[i]; len(got) != 2 || got[0] < 600 || got[0] >= 1200 || got[1] != 1200 {
			t.Errorf("peer %d evaluated at examples %v, want one in [600, 1200) and one at 1200", i, got)
		}
	}
}
