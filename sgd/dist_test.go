package sgd

import (
	"os"

	"github.com/rs/zerolog"

	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/memnet"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/ring"
)

// distSet is a small generated data set on disk.
type distSet struct {
	train, test string
	features    uint64
	planted     float64
}

func genDistSet(t *testing.T) distSet {
	t.Helper()
	dir := t.TempDir()
	cfg := data.DefaultGenConfig()
	cfg.Rows, cfg.TestRows, cfg.Features, cfg.Fields, cfg.Seed = 24000, 4000, 1<<14, 12, 3
	meta, err := data.Generate(dir, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return distSet{train: filepath.Join(dir, "train.svm"), test: meta.TestFile, features: cfg.Features, planted: meta.PlantedTestLogLoss}
}

// peerRun is one peer of a simulated cluster.
type peerRun struct {
	id     string
	m      *model.Model
	sum    DistSummary
	err    error
	x      *gossip.Exchange
	d      *Dist
	node   *memnet.Node
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	rnds    []RoundPoint
	changes []ChangePoint
}

// rounds returns the rounds reported so far.
func (pr *peerRun) rounds() []RoundPoint {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return slices.Clone(pr.rnds)
}

// harness runs simulated peers on one memnet network.
type harness struct {
	t        *testing.T
	net      *memnet.Network
	ds       distSet
	mode     Mode
	batch    int
	topo     string
	replicas int
	opt      model.OptConfig
	parts    int
	shards   int
	tweak    func(*DistConfig)
	gtweak   func(*gossip.Config)
	peers    map[string]*peerRun
}

func newHarness(t *testing.T, net *memnet.Network, ds distSet, mode Mode, batch int) *harness {
	return &harness{t: t, net: net, ds: ds, mode: mode, batch: batch, topo: "ring", replicas: 1, opt: adagrad(), shards: 64, peers: map[string]*peerRun{}}
}

// ringFor is the RingFor of the harness's topology.
func (h *harness) ringFor(first string) func([]string) (*ring.Ring, error) {
	rcfg := ring.DefaultConfig()
	rcfg.Shards, rcfg.Replicas = h.shards, h.replicas
	return func(members []string) (*ring.Ring, error) {
		if h.topo == "master" {
			m := first
			if !slices.Contains(members, m) {
				m = members[0]
			}
			return ring.Master(rcfg, m), nil
		}
		return ring.New(rcfg, members)
	}
}

// start starts peer id, which sees peers as the agreed member set and
// reads part part/h.parts of the training data.
func (h *harness) start(id string, peers []string, part int) *peerRun {
	t := h.t
	m, err := model.New(model.Logreg, h.ds.features, 2, h.shards, h.opt)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultDistConfig()
	cfg.Batch, cfg.Epochs, cfg.Mode = h.batch, 1, h.mode
	cfg.Self, cfg.Peers, cfg.RingFor = id, peers, h.ringFor("peer-a")
	cfg.StallAfter = 200 * time.Millisecond
	cfg.HandoffTimeout = 10 * time.Second
	// memnet delivers in microseconds while owners flush every 5ms, so
	// an async worker runs its whole window ahead between flushes; a
	// small window keeps these tests about convergence, not scheduling
	// (the multi-process tests run the default window). SSP keeps the
	// default, so its staleness bound is what stops it.
	if h.mode == Async {
		cfg.Window = 4
	}
	if os.Getenv("GOSSIPTRAIN_TEST_LOG") != "" {
		cfg.Log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).With().Str("peer", id).Timestamp().Logger()
	}
	if h.tweak != nil {
		h.tweak(&cfg)
	}
	pr := &peerRun{id: id, m: m, done: make(chan struct{})}
	hooks := DistHooks{
		Round: func(p RoundPoint) {
			pr.mu.Lock()
			pr.rnds = append(pr.rnds, p)
			pr.mu.Unlock()
		},
		Change: func(c ChangePoint) {
			pr.mu.Lock()
			pr.changes = append(pr.changes, c)
			pr.mu.Unlock()
		},
	}
	d, err := NewDist(m, cfg, hooks)
	if err != nil {
		t.Fatal(err)
	}
	gcfg := gossip.DefaultConfig()
	gcfg.Job, gcfg.Width = "test", 1
	gcfg.Wire.Limits.Features = m.Layout.Features
	gcfg.RepairDelay = time.Millisecond
	if h.gtweak != nil {
		h.gtweak(&gcfg)
	}
	var node *memnet.Node
	if old := h.peers[id]; old != nil { // a restart: the same node, a new exchange
		old.x.Close()
		node = old.node
	} else {
		node = h.net.NewNode(id)
	}
	x, err := gossip.New(node, gcfg, d.Handlers())
	if err != nil {
		t.Fatal(err)
	}
	pr.x, pr.d, pr.node = x, d, node
	t.Cleanup(func() { x.Close() })
	h.peers[id] = pr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	pr.cancel = cancel
	go func() {
		defer close(pr.done)
		defer cancel()
		opts := data.Options{Dim: h.ds.features, Part: part, Parts: h.parts}
		open := func(int) (data.Source, error) { return data.Open([]string{h.ds.train}, opts) }
		test := func() (data.Source, error) { return data.Open([]string{h.ds.test}, data.Options{Dim: h.ds.features}) }
		pr.sum, pr.err = d.Run(ctx, x, node, open, test)
	}()
	return pr
}

// waitRound waits until peer pr has completed round r.
func (h *harness) waitRound(pr *peerRun, r int64) {
	h.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rs := pr.rounds()
		if len(rs) > 0 && rs[len(rs)-1].Clock >= r {
			return
		}
		select {
		case <-pr.done:
			h.t.Fatalf("%s ended (%v) before round %d", pr.id, pr.err, r)
		default:
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s did not reach round %d", pr.id, r)
		}
		time.Sleep(time.Millisecond) // polling a counter the loop updates; no event to wait on
	}
}

// wait waits for the given peers to finish and fails on errors other than
// the allowed ones.
func (h *harness) wait(ids ...string) {
	h.t.Helper()
	for _, id := range ids {
		pr := h.peers[id]
		<-pr.done
		if pr.err != nil {
			for _, p := range h.peers {
				<-p.done
				h.t.Logf("%s", p.d.DebugState())
			}
			h.t.Fatalf("%s: %v", id, pr.err)
		}
	}
}

// cluster trains on ds with n peers over net, each reading part i/n of the
// training file, and returns every peer's outcome.
func cluster(t *testing.T, net *memnet.Network, ds distSet, n int, mode Mode, batch int, topo string, opt model.OptConfig) []*peerRun {
	t.Helper()
	h := newHarness(t, net, ds, mode, batch)
	h.topo, h.opt, h.parts = topo, opt, n
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("peer-%c", 'a'+i)
	}
	runs := make([]*peerRun, n)
	for i, id := range ids {
		runs[i] = h.start(id, ids, i+1)
	}
	h.wait(ids...)
	return runs
}

func adagrad() model.OptConfig {
	o := model.DefaultOptConfig(model.AdaGrad)
	o.L2 = 1e-6
	return o
}

// localRun trains one peer on the whole file with the given batch.
func localRun(t *testing.T, ds distSet, batch int, opt model.OptConfig) (*model.Model, Summary) {
	t.Helper()
	m, err := model.New(model.Logreg, ds.features, 2, 64, opt)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Batch = batch
	open := func(int) (data.Source, error) { return data.Open([]string{ds.train}, data.Options{Dim: ds.features}) }
	test := func() (data.Source, error) { return data.Open([]string{ds.test}, data.Options{Dim: ds.features}) }
	s, err := Train(context.Background(), m, cfg, open, test, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

func newNet(t *testing.T) *memnet.Network {
	t.Helper()
	net, err := memnet.New(memnet.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(net.Close)
	return net
}

// Issue 4's correctness check on the in-memory transport: 3 peers in sync
// mode, each with a third of the data and batch B, end with identical
// models, within 0.5% of the test log-loss of one peer with batch 3B.
func TestSyncThreePeersMatchOnePeerWithTripleBatch(t *testing.T) {
	ds := genDistSet(t)
	for _, topo := range []string{"ring", "master"} {
		t.Run(topo, func(t *testing.T) {
			runs := cluster(t, newNet(t), ds, 3, Sync, 50, topo, adagrad())
			_, local := localRun(t, ds, 150, adagrad())
			h := runs[0].m.Hash()
			for _, pr := range runs {
				if pr.m.Hash() != h {
					t.Errorf("%s ends with model hash %x, %s with %x", pr.id, pr.m.Hash(), runs[0].id, h)
				}
				if pr.sum.MaxStaleness != 0 {
					t.Errorf("%s: staleness %d in sync mode", pr.id, pr.sum.MaxStaleness)
				}
			}
			got, want := runs[0].sum.Final.LogLoss, local.Final.LogLoss
			t.Logf("%s: 3 peers x batch 50: log-loss %.5f; 1 peer x batch 150: %.5f; planted %.5f; rounds %d", topo, got, want, ds.planted, runs[0].sum.Rounds)
			if math.Abs(got/want-1) > 0.005 {
				t.Errorf("log-loss %.5f vs one peer's %.5f: more than 0.5%% apart", got, want)
			}
			if runs[0].sum.Rounds != local.Steps {
				t.Errorf("%d rounds, want the single peer's %d steps", runs[0].sum.Rounds, local.Steps)
			}
		})
	}
}

// Async and SSP reach within 3% of the synchronous log-loss, with SSP's
// staleness bound respected.
func TestAsyncAndSSPConverge(t *testing.T) {
	ds := genDistSet(t)
	_, local := localRun(t, ds, 150, adagrad())
	for _, mode := range []Mode{SSP, Async} {
		t.Run(mode.String(), func(t *testing.T) {
			runs := cluster(t, newNet(t), ds, 3, mode, 50, "ring", adagrad())
			h := runs[0].m.Hash()
			for _, pr := range runs {
				if pr.m.Hash() != h {
					t.Errorf("%s ends with model hash %x, %s with %x", pr.id, pr.m.Hash(), runs[0].id, h)
				}
				if mode == SSP && pr.sum.MaxStaleness > 4 {
					t.Errorf("%s: staleness %d exceeds the bound 4", pr.id, pr.sum.MaxStaleness)
				}
			}
			got := runs[0].sum.Final.LogLoss
			t.Logf("%s: log-loss %.5f (sync-equivalent %.5f), max staleness %d", mode, got, local.Final.LogLoss, runs[0].sum.MaxStaleness)
			if got > local.Final.LogLoss*1.03 {
				t.Errorf("log-loss %.5f, more than 3%% above %.5f", got, local.Final.LogLoss)
			}
		})
	}
}

var _ Net = (*gossip.Exchange)(nil)

// Issue 4: nothing is lost. With messages dropped and reordered, a sync run
// repairs the gaps (repaired > 0) and ends with the same model as a
// loss-free run, bit for bit.
func TestSyncRepairsLossAndReordering(t *testing.T) {
	ds := genDistSet(t)
	clean := cluster(t, newNet(t), ds, 3, Sync, 50, "ring", adagrad())
	net := newNet(t)
	net.SetDropRate(0.05)
	net.SetReorder(0.2, 4)
	lossy := cluster(t, net, ds, 3, Sync, 50, "ring", adagrad())
	var repaired uint64
	for i, pr := range lossy {
		repaired += pr.x.Stats().Repaired
		if pr.m.Hash() != clean[i].m.Hash() {
			t.Errorf("%s: model hash %x after loss, %x without", pr.id, pr.m.Hash(), clean[i].m.Hash())
		}
	}
	t.Logf("repaired %d messages; pokes %d", repaired, lossy[0].sum.Pokes+lossy[1].sum.Pokes+lossy[2].sum.Pokes)
	if repaired == 0 {
		t.Errorf("no message was repaired: the drops did not happen or were not noticed")
	}
}

// Issue 4: a hostile peer publishing garbage, NaN values and out-of-range
// indices on every topic changes no honest peer's model, and its messages
// are counted as rejected.
func TestHostilePeerChangesNothing(t *testing.T) {
	ds := genDistSet(t)
	clean := cluster(t, newNet(t), ds, 3, Sync, 50, "ring", adagrad())

	net := newNet(t)
	evil := net.NewNode("peer-z")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		codec := wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits())
		topics := []string{gossip.ParamsTopic("test", "peer-a"), gossip.ParamsTopic("test", "peer-b"), gossip.GradTopic("test", "peer-a"), gossip.GradTopic("test", "peer-b"), gossip.GradTopic("test", "peer-c")}
		nan := model.Sparse{Idx: []uint32{1, 2}, Val: []float32{float32(math.NaN()), 1}}
		far := model.Sparse{Idx: []uint32{uint32(ds.features) + 7}, Val: []float32{1}}
		ok := model.Sparse{Idx: []uint32{3}, Val: []float32{100}}
		for seq := uint64(0); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			var msgs [][]byte
			h := wire.Header{Job: "test", Sender: "peer-z", Clock: seq, Epoch: 1, Seq: seq}
			for _, s := range []*model.Sparse{&nan, &far} {
				b, err := codec.AppendGrad(nil, h, 50, 1, s)
				if err == nil {
					msgs = append(msgs, b)
				}
			}
			// A well-formed gradient that claims to come from an honest peer.
			h.Sender = "peer-b"
			if b, err := codec.AppendGrad(nil, h, 50, 1, &ok); err == nil {
				msgs = append(msgs, b)
			}
			msgs = append(msgs, []byte("garbage"), nil, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
			for _, topic := range topics {
				for _, b := range msgs {
					evil.Publish(context.Background(), topic, b)
				}
			}
			time.Sleep(time.Millisecond) // pace the attack; the honest run does not depend on it
		}
	}()
	attacked := cluster(t, net, ds, 3, Sync, 50, "ring", adagrad())
	close(stop)
	<-done
	var rejected uint64
	for i, pr := range attacked {
		rejected += pr.x.Rejected().Total()
		if pr.m.Hash() != clean[i].m.Hash() {
			t.Errorf("%s: model hash %x under attack, %x without", pr.id, pr.m.Hash(), clean[i].m.Hash())
		}
	}
	t.Logf("rejected %d hostile messages: %v", rejected, attacked[0].x.Rejected().Map())
	if rejected == 0 {
		t.Errorf("no hostile message was rejected")
	}
}

// A peer that is still sending to a waiting worker (LastHeard: just now)
// is not asked to resend while the stall timeout backs off: its link is
// busy. Once the timeout reaches StallAfter it is asked anyway, so a
// message that really was lost is still repaired and the run ends with
// the loss-free model.
func TestBusyLinkDefersResendsButRepairs(t *testing.T) {
	ds := genDistSet(t)
	clean := cluster(t, newNet(t), ds, 3, Sync, 50, "ring", adagrad())
	net := newNet(t)
	h := newHarness(t, net, ds, Sync, 50)
	h.parts = 3
	h.tweak = func(c *DistConfig) { c.LastHeard = func(string) time.Time { return time.Now() } }
	ids := []string{"peer-a", "peer-b", "peer-c"}
	for i, id := range ids {
		h.start(id, ids, i+1)
	}
	h.waitRound(h.peers["peer-a"], 20)
	net.DropNext(2)
	h.wait(ids...)
	var pokes, deferred int64
	for i, id := range ids {
		pr := h.peers[id]
		pokes += pr.sum.Pokes
		deferred += pr.sum.PokesDeferred
		if pr.m.Hash() != clean[i].m.Hash() {
			t.Errorf("%s: model hash %x after loss, %x without", id, pr.m.Hash(), clean[i].m.Hash())
		}
	}
	t.Logf("resend requests %d, deferred %d", pokes, deferred)
	if deferred == 0 || pokes == 0 {
		t.Errorf("resend requests %d, deferred %d: want requests deferred while the peer was sending, then made", pokes, deferred)
	}
}

// Gradients and params over direct streams (GradStreams, ParamsStreams)
// train the same model as over gossipsub, bit for bit, and nothing of the
// training data path is published on gossipsub.
func TestDirectStreamsSameModel(t *testing.T) {
	ds := genDistSet(t)
	clean := cluster(t, newNet(t), ds, 3, Sync, 50, "ring", adagrad())
	h := newHarness(t, newNet(t), ds, Sync, 50)
	h.parts = 3
	h.gtweak = func(c *gossip.Config) { c.GradStreams, c.ParamsStreams = true, true }
	ids := []string{"peer-a", "peer-b", "peer-c"}
	for i, id := range ids {
		h.start(id, ids, i+1)
	}
	h.wait(ids...)
	for i, id := range ids {
		pr := h.peers[id]
		if pr.m.Hash() != clean[i].m.Hash() {
			t.Errorf("%s: model hash %x over direct streams, %x over gossipsub", id, pr.m.Hash(), clean[i].m.Hash())
		}
		if n := pr.node.Stats().Published; n != 0 {
			t.Errorf("%s published %d messages on pubsub; want none", id, n)
		}
		if pr.x.Stats().Sent == 0 {
			t.Errorf("%s sent nothing", id)
		}
	}
}
