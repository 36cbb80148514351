package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/peerlog"
)

// fakeConfig is a configuration that runs n fake peers (this test binary).
func fakeConfig(t *testing.T, n int, behaviour func(i int) string) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Binary = os.Args[0]
	cfg.Peers = n
	cfg.Dir = t.TempDir()
	cfg.Env = fakeEnv
	cfg.TrainArgs = []string{"--train", "data.svm", "--batch", "10"}
	cfg.PeerArgs = func(i int) []string {
		return []string{"--part", fmt.Sprintf("%d/%d", i+1, n), "--fake", behaviour(i)}
	}
	cfg.StartTimeout = 20 * time.Second
	cfg.Grace = 5 * time.Second
	cfg.ProgressEvery = 0
	return cfg
}

// alive reports whether process pid still exists (not yet reaped counts).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	return syscall.Kill(pid, 0) == nil
}

func assertAllGone(t *testing.T, res *Result) {
	t.Helper()
	for _, p := range res.Peers {
		if alive(p.Pid) {
			t.Errorf("peer %d (pid %d) still runs after Run returned", p.Index, p.Pid)
		}
	}
}

// Three peers that finish: peer 0 starts first (the others dial the
// address it logged, and it finishes only when all have dialled it), every
// peer gets the common flags, its own flags and the managed ones, and the
// result lists every report.
func TestRunStartsPeer0FirstAndCollectsReports(t *testing.T) {
	cfg := fakeConfig(t, 3, func(int) string { return "ok" })
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Peers) != 3 {
		t.Fatalf("%d peers in the result, want 3", len(res.Peers))
	}
	runs, err := res.Reports()
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range res.Peers {
		if p.ExitCode != 0 || p.Exit != "exit status 0" {
			t.Errorf("peer %d: exit %q (%d), want exit status 0", i, p.Exit, p.ExitCode)
		}
		if want := fmt.Sprintf("FakePeer%d", i); p.PeerID != want {
			t.Errorf("peer %d: PeerID %q, want %q", i, p.PeerID, want)
		}
		if !strings.HasPrefix(p.Addr, "/ip4/127.0.0.1/tcp/") || !strings.HasSuffix(p.Addr, "/p2p/"+p.PeerID) {
			t.Errorf("peer %d: Addr %q, want a loopback address ending in its ID", i, p.Addr)
		}
		if p.Report != filepath.Join(res.Dir, fmt.Sprintf("peer-%d.jsonl", i)) {
			t.Errorf("peer %d: Report %q", i, p.Report)
		}
		r := runs[i]
		if r.Summary == nil || r.Summary.Examples != 50 || r.Summary.Peers != 3 {
			t.Fatalf("peer %d: summary %+v, want 50 examples of 3 peers", i, r.Summary)
		}
		args := r.Start.Config["args"]
		for _, want := range []string{
			"--min-peers 3", "--train data.svm", "--batch 10", fmt.Sprintf("--part %d/3", i+1),
			"--job cluster", "--log-format json", "--listen /ip4/127.0.0.1/tcp/0",
			"--identity " + filepath.Join(res.Dir, fmt.Sprintf("peer-%d.key", i)),
		} {
			if !strings.Contains(args, want) {
				t.Errorf("peer %d: command line %q lacks %q", i, args, want)
			}
		}
		hasPeer := strings.Contains(args, "--peer "+res.Peers[0].Addr)
		if hasPeer != (i > 0) {
			t.Errorf("peer %d: --peer %s given = %v, want %v (only the others point at peer 0)", i, res.Peers[0].Addr, hasPeer, i > 0)
		}
		log, err := os.ReadFile(p.Log)
		if err != nil || !strings.Contains(string(log), `"message":"done"`) {
			t.Errorf("peer %d: its log %s lacks its last line (err %v)", i, p.Log, err)
		}
	}
	assertAllGone(t, res)
}

// A failing peer stops the others, and the error names it and shows the
// end of its log in readable form.
func TestFailingPeerStopsTheOthers(t *testing.T) {
	cfg := fakeConfig(t, 3, func(i int) string {
		if i == 2 {
			return "fail"
		}
		return "hang"
	})
	start := time.Now()
	res, err := Run(context.Background(), cfg)
	var pe *PeerError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPeerFailed) {
		t.Fatalf("Run: %v, want a *PeerError wrapping ErrPeerFailed", err)
	}
	if pe.Index != 2 || pe.PeerID != "FakePeer2" || pe.Exit != "exit status 3" {
		t.Errorf("PeerError %+v: want peer 2 (FakePeer2), exit status 3", pe)
	}
	msg := err.Error()
	for _, want := range []string{"peer 2 (FakePeer2) failed: exit status 3", "ERROR boom: the disk is on fire error=\"write model: no space left on device\"", pe.Log} {
		if !strings.Contains(msg, want) {
			t.Errorf("error message lacks %q:\n%s", want, msg)
		}
	}
	if took := time.Since(start); took > cfg.Grace {
		t.Errorf("Run took %v: the others should stop on the stop signal, not after the %v grace period", took, cfg.Grace)
	}
	for _, i := range []int{0, 1} {
		// 130: its handler took the signal. A signal that lands before
		// the Go runtime has installed its handlers (the first
		// milliseconds after exec; longer under -race) ends the process
		// with the kernel's default action: stopped just the same.
		p := res.Peers[i]
		if p.ExitCode != 130 && !(p.ExitCode == -1 && strings.Contains(p.Exit, peerlog.StopSignal.String())) {
			t.Errorf("peer %d: exit %q (code %d), want 130 or killed by %v (stopped on the stop signal)", i, p.Exit, p.ExitCode, peerlog.StopSignal)
		}
	}
	assertAllGone(t, res)
}

// A peer that was still starting when the stop signal came (Go drops a
// SIGUSR1 nobody watches yet) is stopped too, before the grace period.
func TestStopReachesAPeerStillStarting(t *testing.T) {
	cfg := fakeConfig(t, 3, func(i int) string {
		switch i {
		case 1:
			return "slow-hang"
		case 2:
			return "fail"
		}
		return "hang"
	})
	start := time.Now()
	res, err := Run(context.Background(), cfg)
	if !errors.Is(err, ErrPeerFailed) {
		t.Fatalf("Run: %v, want ErrPeerFailed", err)
	}
	if took := time.Since(start); took > cfg.Grace {
		t.Errorf("Run took %v: the starting peer should stop on the stop signal, not after the %v grace period", took, cfg.Grace)
	}
	for _, i := range []int{0, 1} {
		// 130: its handler took the signal. A signal that lands before
		// the Go runtime has installed its handlers (the first
		// milliseconds after exec; longer under -race) ends the process
		// with the kernel's default action: stopped just the same.
		p := res.Peers[i]
		if p.ExitCode != 130 && !(p.ExitCode == -1 && strings.Contains(p.Exit, peerlog.StopSignal.String())) {
			t.Errorf("peer %d: exit %q (code %d), want 130 or killed by %v (stopped on the stop signal)", i, p.Exit, p.ExitCode, peerlog.StopSignal)
		}
	}
	assertAllGone(t, res)
}

// waitTraining returns an OnProgress that cancels once every peer trains.
func cancelWhenTraining(n int, cancel context.CancelFunc) func([]PeerProgress) {
	return func(ps []PeerProgress) {
		training := 0
		for _, p := range ps {
			if p.State == StateTraining && p.Round >= 0 {
				training++
			}
		}
		if training == n {
			cancel()
		}
	}
}

// Cancelling the context (Ctrl-C) stops every peer with the stop signal.
func TestCancelStopsEveryPeer(t *testing.T) {
	cfg := fakeConfig(t, 3, func(int) string { return "hang" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.ProgressEvery = 20 * time.Millisecond
	var saw []PeerProgress
	cfg.OnProgress = func(ps []PeerProgress) {
		saw = ps
		cancelWhenTraining(3, cancel)(ps)
	}
	res, err := Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	for i, p := range saw {
		if p.Index != i || p.PeerID != fmt.Sprintf("FakePeer%d", i) || p.Round < 0 || p.Examples != (p.Round+1)*10 {
			t.Errorf("progress of peer %d: %+v", i, p)
		}
	}
	for _, p := range res.Peers {
		if p.ExitCode != 130 {
			t.Errorf("peer %d: %s, want exit status 130 (stop signal handled)", p.Index, p.Exit)
		}
	}
	assertAllGone(t, res)
}

// A peer that ignores the stop signal is killed after the grace period.
func TestSIGKILLAfterGrace(t *testing.T) {
	cfg := fakeConfig(t, 2, func(int) string { return "ignore-term" })
	cfg.Grace = 200 * time.Millisecond
	cfg.ProgressEvery = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.OnProgress = cancelWhenTraining(2, cancel)
	res, err := Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	for _, p := range res.Peers {
		if p.ExitCode != -1 || p.Exit != "signal: killed" {
			t.Errorf("peer %d: %s (%d), want signal: killed", p.Index, p.Exit, p.ExitCode)
		}
	}
	assertAllGone(t, res)
}

// Peer 0 exiting before it logs an address is an error naming it; no
// other peer is started.
func TestPeer0WithoutAddress(t *testing.T) {
	cfg := fakeConfig(t, 3, func(i int) string { return "noaddr" })
	res, err := Run(context.Background(), cfg)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Index != 0 || !strings.Contains(pe.Exit, "exited before it logged an address") ||
		!strings.Contains(err.Error(), "cannot listen error=\"address already in use\"") {
		t.Fatalf("Run: %v, want peer 0's error with its log", err)
	}
	if len(res.Peers) != 1 {
		t.Errorf("%d peers started, want only peer 0", len(res.Peers))
	}
}

func TestConfigValidate(t *testing.T) {
	ok := func() Config {
		c := DefaultConfig()
		c.Dir = "x"
		return c
	}
	for _, c := range []struct {
		name string
		mod  func(*Config)
		want string // in the error; "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"no peers", func(c *Config) { c.Peers = 0 }, "Peers 0"},
		{"no dir", func(c *Config) { c.Dir = "" }, "Dir is empty"},
		{"no job", func(c *Config) { c.Job = "" }, "Job is empty"},
		{"report in TrainArgs", func(c *Config) { c.TrainArgs = []string{"--batch", "1", "--report", "x"} }, "TrainArgs set --report"},
		{"listen= in PeerArgs", func(c *Config) { c.PeerArgs = func(int) []string { return []string{"--listen=/ip4/0.0.0.0/tcp/1"} } }, "PeerArgs(0) set --listen"},
		{"min-peers allowed", func(c *Config) { c.TrainArgs = []string{"--min-peers", "2"} }, ""},
		{"swarm-key in TrainArgs", func(c *Config) { c.TrainArgs = []string{"--swarm-key", "k"} }, "TrainArgs set --swarm-key"},
		{"bad env", func(c *Config) { c.Env = []string{"NOEQUALS"} }, "Env entry"},
		{"negative grace", func(c *Config) { c.Grace = -time.Second }, "Grace"},
		{"bad rate", func(c *Config) { c.NetNS = &NetNS{Rate: "100 mbit"} }, "NetNS.Rate"},
		{"rate; rm -rf", func(c *Config) { c.NetNS = &NetNS{Rate: "1mbit;reboot"} }, "NetNS.Rate"},
		{"bad delay", func(c *Config) { c.NetNS = &NetNS{Delay: "1 hour"} }, "NetNS.Delay"},
		{"bad loss", func(c *Config) { c.NetNS = &NetNS{Loss: "0.1"} }, "NetNS.Loss"},
		{"loss over 100", func(c *Config) { c.NetNS = &NetNS{Loss: "150%"} }, "at most 100%"},
		{"good shaping", func(c *Config) { c.NetNS = &NetNS{Rate: "100mbit", Delay: "1ms", Loss: "0.1%"} }, ""},
		{"too many netns peers", func(c *Config) { c.NetNS = &NetNS{}; c.Peers = 251 }, "at most 250"},
	} {
		cfg := ok()
		c.mod(&cfg)
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrConfig)):
			t.Errorf("%s: %v, want an ErrConfig naming %q", c.name, err, c.want)
		}
	}
}

func TestRateBytes(t *testing.T) {
	for _, c := range []struct {
		rate string
		want float64
	}{
		{"100mbit", 12.5e6},
		{"1gbit", 125e6},
		{"800kbit", 100e3},
		{"1.5Mbit", 187.5e3},
		{"2mbps", 2e6},
		{"1000bps", 1000},
	} {
		n := NetNS{Rate: c.rate}
		got, err := n.rateBytes()
		if err != nil || got != c.want {
			t.Errorf("%s: %v bytes/s (%v), want %v", c.rate, got, err, c.want)
		}
	}
}

func TestProgressLine(t *testing.T) {
	got := ProgressLine([]PeerProgress{
		{Index: 0, State: StateTraining, Round: 125, ExamplesPerSec: 71200},
		{Index: 1, State: StateTraining, Round: 124, ExamplesPerSec: 1.5e6},
		{Index: 2, State: StateWaiting, Round: -1},
		{Index: 3, State: StateExited, Round: 200},
	})
	want := "4 peers 1.57M ex/s | 0 r125 71.2k/s | 1 r124 1.50M/s | 2 waiting | 3 exited r200"
	if got != want {
		t.Errorf("ProgressLine:\n got %q\nwant %q", got, want)
	}
}

func TestReadable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"level":"error","time":"2026-01-02T15:04:05.5Z","message":"boom","peer":"abc","error":"no space","n":3}`,
			`15:04:05 ERROR boom error="no space" n=3 peer=abc`},
		{`panic: runtime error`, `panic: runtime error`},
		{`{not json`, `{not json`},
	} {
		if got := readable(c.in); got != c.want {
			t.Errorf("readable(%s) = %q, want %q", c.in, got, c.want)
		}
	}
}

// lastRound reads whole round lines only, from the end of a file that is
// being written.
func TestLastRound(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, content string
		ok            bool
		clock         int64
	}{
		{"empty", "", false, 0},
		{"start only", `{"type":"start"}` + "\n", false, 0},
		{"two rounds", `{"type":"round","clock":0,"examples":10,"seconds":0.1}` + "\n" + `{"type":"round","clock":1,"examples":20,"seconds":0.2}` + "\n", true, 1},
		{"partial last line", `{"type":"round","clock":4,"examples":10,"seconds":0.1}` + "\n" + `{"type":"round","clo`, true, 4},
		{"summary after rounds", `{"type":"round","clock":7,"examples":10,"seconds":0.1}` + "\n" + `{"type":"summary","examples":10}` + "\n", true, 7},
		{"long file", strings.Repeat(`{"type":"round","clock":3,"examples":10,"seconds":0.1,"pad":"`+strings.Repeat("x", 200)+`"}`+"\n", 200), true, 3},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
		if err := os.WriteFile(p, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		r, ok := lastRound(p)
		if ok != c.ok || r.Clock != c.clock {
			t.Errorf("%s: lastRound = %+v, %v; want clock %d, %v", c.name, r, ok, c.clock, c.ok)
		}
	}
}

// TestBaselineProgress: a baseline (a standalone train, which writes no
// round lines) shows in the progress line as training, with its share
// done and its rate from its own progress log lines, not as "starting"
// for its whole run.
func TestBaselineProgress(t *testing.T) {
	p := &proc{round: -1, phase: StateStarting, exited: make(chan struct{})}
	p.observe([]byte(`{"level":"info","train":["a.svm"],"batch":100,"message":"training"}`))
	if got := p.progress(); got.State != StateStarting {
		t.Errorf("before its first progress line: state %q, want %q", got.State, StateStarting)
	}
	p.observe([]byte(`{"level":"info","epoch":1,"examples":"48.8k","examples_per_sec":"3.9k","done":"41%","message":"training"}`))
	got := ProgressLine([]PeerProgress{p.progress()})
	if want := "1 peers 3.9k ex/s | 0 alone 41% 3.9k/s"; got != want {
		t.Errorf("ProgressLine:\n got %q\nwant %q", got, want)
	}
}
