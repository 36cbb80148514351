package e2e

// Multi-process tests of distributed training (issue 4): real gossiptrain
// processes on loopback, talking libp2p. The binary is built once per test
// run; -short skips these tests.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/peerlog"
	"github.com/gossiptrain/gossiptrain/report"
)

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another process may take it before a peer binds it (CI saw a bootstrap
// peer fail with "address already in use"), so a bootstrap peer listens
// on port 0 instead and the test reads its port from its log (portWatch).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// portWatch keeps a peer's log, like the buffer it writes to, and sends
// the loopback TCP port of the peer's "peer started" line on port once.
type portWatch struct {
	mu   *sync.Mutex
	w    *bytes.Buffer
	part []byte
	port chan int
}

func newPortWatch(w *bytes.Buffer, mu *sync.Mutex) *portWatch {
	return &portWatch{mu: mu, w: w, port: make(chan int, 1)}
}

var loopbackTCP = regexp.MustCompile(`^/ip4/127\.0\.0\.1/tcp/([0-9]+)`)

// loopbackPort returns the TCP port of the first loopback address of a
// "peer started" line's addrs (0: none).
func loopbackPort[A any](addrs []A) int {
	for _, a := range addrs {
		if m := loopbackTCP.FindStringSubmatch(fmt.Sprint(a)); m != nil {
			port, _ := strconv.Atoi(m[1])
			return port
		}
	}
	return 0
}

func (p *portWatch) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.w.Write(b)
	if p.port == nil {
		return len(b), nil
	}
	p.part = append(p.part, b...)
	for {
		i := bytes.IndexByte(p.part, '\n')
		if i < 0 {
			return len(b), nil
		}
		var l struct {
			Message string   `json:"message"`
			Addrs   []string `json:"addrs"`
		}
		if json.Unmarshal(p.part[:i], &l) == nil && l.Message == peerlog.Started {
			if port := loopbackPort(l.Addrs); port != 0 {
				p.port <- port
				p.port, p.part = nil, nil
				return len(b), nil
			}
		}
		p.part = p.part[i+1:]
	}
}

// await returns the port, failing the test if the peer exits (done is
// closed) or a minute passes first; logTail gives the log to show then.
func (p *portWatch) await(t *testing.T, done <-chan struct{}, logTail func() string) int {
	t.Helper()
	p.mu.Lock()
	ch := p.port
	p.mu.Unlock()
	if ch == nil {
		t.Fatal("portWatch: the port was taken already")
	}
	select {
	case port := <-ch:
		return port
	case <-done:
		t.Fatalf("the bootstrap peer exited before it logged %q:\n%s", peerlog.Started, logTail())
	case <-time.After(time.Minute):
		t.Fatalf("the bootstrap peer logged no %q within a minute:\n%s", peerlog.Started, logTail())
	}
	return 0
}

var peerIDRe = regexp.MustCompile(`12D3Koo[1-9A-HJ-NP-Za-km-z]+`)

// identities are the peer identities of a local cluster, kept across runs
// so that runs compare bit for bit (sync rounds sum workers in ID order).
type identities struct {
	dir string
	ids []string
}

func newIdentities(t *testing.T, n int) *identities {
	t.Helper()
	bin := binary(t)
	id := &identities{dir: t.TempDir(), ids: make([]string, n)}
	for i := range id.ids {
		out, err := exec.Command(bin, "keygen", "--identity", filepath.Join(id.dir, fmt.Sprintf("id%d", i))).CombinedOutput()
		if err != nil {
			t.Fatalf("keygen: %v: %s", err, out)
		}
		id.ids[i] = peerIDRe.FindString(string(out))
	}
	return id
}

// localCluster runs one distributed training job of n processes on
// loopback: peer i gets args(i) plus the common flags, peer 0 is the
// bootstrap peer of the others. It returns every peer's report.
func localCluster(t *testing.T, idents *identities, args func(i int) []string, common ...string) []*report.Run {
	t.Helper()
	bin := binary(t)
	dir := t.TempDir()
	n := len(idents.ids)
	ids := idents.ids
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	type result struct {
		err  error
		mu   sync.Mutex
		log  bytes.Buffer
		done chan struct{}
	}
	res := make([]*result, n)
	var wg sync.WaitGroup
	port := 0
	for i := 0; i < n; i++ {
		a := []string{"train", "--job", "e2e", "--min-peers", fmt.Sprint(n), "--log-format", "json",
			"--identity", filepath.Join(idents.dir, fmt.Sprintf("id%d", i)), "--report", filepath.Join(dir, fmt.Sprintf("peer%d.jsonl", i))}
		if i == 0 {
			a = append(a, "--listen", "/ip4/127.0.0.1/tcp/0")
		} else {
			a = append(a, "--listen", "/ip4/127.0.0.1/tcp/0", "--peer", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", port, ids[0]))
		}
		a = append(append(a, common...), args(i)...)
		cmd := exec.CommandContext(ctx, bin, a...)
		r := &result{done: make(chan struct{})}
		res[i] = r
		watch := newPortWatch(&r.log, &r.mu)
		cmd.Stdout, cmd.Stderr = watch, watch
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); r.err = cmd.Wait(); close(r.done) }()
		if i == 0 {
			port = watch.await(t, r.done, func() string {
				r.mu.Lock()
				defer r.mu.Unlock()
				return tail(r.log.String(), 3000)
			})
		}
	}
	began := time.Now()
	wg.Wait()
	if took := time.Since(began); took > 30*time.Second {
		for i, r := range res {
			t.Logf("slow run (%v): log of peer %d:\n%s", took, i, tail(r.log.String(), 4000))
		}
	}
	runs := make([]*report.Run, n)
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("peer %d: %v\n%s", i, r.err, tail(r.log.String(), 3000))
		}
		run, err := report.ReadFile(filepath.Join(dir, fmt.Sprintf("peer%d.jsonl", i)))
		if err != nil || run.Summary == nil {
			t.Fatalf("peer %d report: %v\n%s", i, err, tail(r.log.String(), 3000))
		}
		runs[i] = run
	}
	return runs
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// e2eData generates a data set for the distributed tests.
func e2eData(t *testing.T) (train, test string, dim uint64) {
	t.Helper()
	return e2eDataRows(t, 60000)
}

// e2eDataRows is e2eData with this many training rows.
func e2eDataRows(t *testing.T, rows int64) (train, test string, dim uint64) {
	t.Helper()
	dir := t.TempDir()
	cfg := data.DefaultGenConfig()
	cfg.Rows, cfg.TestRows, cfg.Features, cfg.Fields, cfg.Seed = rows, 10000, 1<<18, 20, 5
	meta, err := data.Generate(dir, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return meta.Files[0], meta.TestFile, cfg.Features
}

func sameHash(t *testing.T, what string, runs []*report.Run) string {
	t.Helper()
	h := runs[0].Summary.ModelHash
	for i, r := range runs {
		if r.Summary.ModelHash != h || h == "" {
			t.Errorf("%s: peer %d ends with model_hash %q, peer 0 with %q", what, i, r.Summary.ModelHash, h)
		}
	}
	return h
}

// Issue 4's correctness check: 3 processes in sync mode, each with a third
// of the data (--part i/3) and batch B, end with identical models, within
// 0.5% of one peer training on all the data with batch 3B; the master
// topology computes the very same model, and its busiest peer carries more
// traffic than the ring's.
func TestE2ESyncRingAndMasterMatchOnePeer(t *testing.T) {
	train, test, dim := e2eData(t)
	flags := []string{"--train", train, "--test", test, "--dim", fmt.Sprint(dim), "--model", "logreg", "--epochs", "1", "--l2", "1e-6", "--optimizer", "adagrad"}
	part := func(i int) []string { return []string{"--part", fmt.Sprintf("%d/3", i+1)} }

	ids := newIdentities(t, 3)
	ring := localCluster(t, ids, part, append(flags, "--batch", "50", "--topology", "ring", "--mode", "sync")...)
	ringHash := sameHash(t, "ring", ring)
	master := localCluster(t, ids, part, append(flags, "--batch", "50", "--topology", "master", "--mode", "sync")...)
	masterHash := sameHash(t, "master", master)
	if ringHash != masterHash {
		t.Errorf("ring ends with model_hash %s, master with %s: the same sync rounds must give the same model", ringHash, masterHash)
	}
	// Full read copies apply the same sums in the same order; and raw
	// values are lossless, whichever peers send them (here peers 1 and 3
	// send everything raw, peer 2 entropy-coded f32).
	rawPart := func(i int) []string {
		if i%2 == 0 {
			return append(part(i), "--values", "raw")
		}
		return part(i)
	}
	// (Full read copies exchange every batch: they compare with the ring
	// exchanging every batch, not with its default windows.)
	ring1 := localCluster(t, ids, part, append(flags, "--batch", "50", "--topology", "ring", "--mode", "sync", "--local-steps", "1")...)
	ring1Hash := sameHash(t, "ring, --local-steps 1", ring1)
	full := localCluster(t, ids, rawPart, append(flags, "--batch", "50", "--topology", "ring", "--mode", "sync", "--gather", "full")...)
	if h := sameHash(t, "ring with --gather full, two peers --values raw", full); h != ring1Hash {
		t.Errorf("ring with full read copies and two peers sending raw values ends with model_hash %s, gathering what it needs in f32 %s", h, ring1Hash)
	}

	rep := filepath.Join(t.TempDir(), "one.jsonl")
	code, _, stderr := gt(t, append(append([]string{"train"}, flags...), "--batch", "150", "--report", rep)...)
	if code != 0 {
		t.Fatalf("single peer: %s", stderr)
	}
	one, err := report.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	got, want := float64(ring[0].Summary.TestLogLoss), float64(one.Summary.TestLogLoss)
	t.Logf("3 peers x batch 50: log-loss %.5f in %d rounds; 1 peer x batch 150: %.5f in %d steps", got, ring[0].Summary.Rounds, want, one.Summary.Steps)
	if math.Abs(got/want-1) > 0.005 {
		t.Errorf("3-peer log-loss %.5f is more than 0.5%% from the single peer's %.5f", got, want)
	}
	busiest := func(runs []*report.Run) (b int64) {
		for _, r := range runs {
			b = max(b, r.Summary.BytesSent+r.Summary.BytesRecv)
		}
		return b
	}
	t.Logf("busiest peer traffic: master %d bytes, ring %d bytes", busiest(master), busiest(ring))
	if busiest(master) <= busiest(ring) {
		t.Errorf("the master's busiest peer moved %d bytes, the ring's %d: want the master to carry more", busiest(master), busiest(ring))
	}
}

// Issue 4: async and ssp --staleness 4 come within 3% of the sync log-loss,
// and ssp never computes a gradient more than 4 rounds stale.
func TestE2EAsyncAndSSP(t *testing.T) {
	train, test, dim := e2eData(t)
	flags := []string{"--train", train, "--test", test, "--dim", fmt.Sprint(dim), "--model", "logreg", "--epochs", "1", "--l2", "1e-6", "--batch", "50"}
	part := func(i int) []string { return []string{"--part", fmt.Sprintf("%d/3", i+1)} }
	ids := newIdentities(t, 3)
	sync := localCluster(t, ids, part, append(flags, "--mode", "sync")...)
	base := float64(sync[0].Summary.TestLogLoss)
	// The master topology too: its other peers are primary of no shard,
	// and an async run of it never ended until they said they were ready.
	for _, run := range []struct{ mode, topology string }{{"ssp", "ring"}, {"async", "ring"}, {"async", "master"}} {
		mode := run.mode
		runs := localCluster(t, ids, part, append(flags, "--mode", mode, "--staleness", "4", "--topology", run.topology)...)
		if run.topology != "ring" {
			mode += " " + run.topology
		}
		sameHash(t, mode, runs)
		got := float64(runs[0].Summary.TestLogLoss)
		var stale int64
		for _, r := range runs {
			stale = max(stale, r.Summary.MaxStaleness)
		}
		t.Logf("%s: log-loss %.5f (sync %.5f), max staleness %d", mode, got, base, stale)
		if got > base*1.03 {
			t.Errorf("%s: log-loss %.5f, more than 3%% above sync's %.5f", mode, got, base)
		}
		if mode == "ssp" && stale > 4 {
			t.Errorf("ssp: a gradient was computed %d rounds stale, over the bound 4", stale)
		}
	}
}

// An MLP trains across peers like the linear models: two peers in sync
// mode end with one model, which a saved file reproduces under eval (model
// file version 2 carries the hidden size), and a second run with the same
// --init-seed starts and ends the same.
func TestE2EMLPTwoPeers(t *testing.T) {
	dir := fashionMNIST(t)
	out := t.TempDir()
	test := filepath.Join(dir, "t10k-images-idx3-ubyte.gz")
	common := []string{"--train", filepath.Join(dir, "train-images-idx3-ubyte.gz"), "--test", test,
		"--model", "mlp", "--hidden", "32", "--lr", "0.05", "--l2", "0", "--epochs", "1", "--batch", "100"}
	runs := localCluster(t, newIdentities(t, 2), func(i int) []string {
		return []string{"--part", fmt.Sprintf("%d/2", i+1), "--save", filepath.Join(out, fmt.Sprintf("peer%d.gt", i))}
	}, common...)
	h := sameHash(t, "mlp, 2 peers", runs)
	s := runs[0].Summary
	t.Logf("mlp, 2 peers, 1 epoch: accuracy %.4f, log-loss %.4f, model %s", s.TestAccuracy, s.TestLogLoss, h)
	if s.TestAccuracy < 0.78 {
		t.Errorf("accuracy %.4f after one epoch; want >= 0.78", s.TestAccuracy)
	}
	code, stdout, stderr := gt(t, "eval", "--model", filepath.Join(out, "peer1.gt"), "--test", test)
	if code != 0 {
		t.Fatalf("eval: exit %d: %s", code, stderr)
	}
	var ev struct {
		Model    string  `json:"model"`
		Accuracy float64 `json:"test_accuracy"`
	}
	if err := json.Unmarshal([]byte(stdout), &ev); err != nil {
		t.Fatalf("eval printed %q: %v", stdout, err)
	}
	if ev.Accuracy != float64(s.TestAccuracy) {
		t.Errorf("eval of the saved model: accuracy %v (%s), the run's %v", ev.Accuracy, ev.Model, s.TestAccuracy)
	}
	again := localCluster(t, newIdentities(t, 2), func(i int) []string {
		return []string{"--part", fmt.Sprintf("%d/2", i+1)}
	}, common...)
	if h2 := sameHash(t, "mlp, again", again); h2 != h {
		t.Errorf("the same run again ends with model %s, the first with %s: the initial weights differ", h2, h)
	}
}
