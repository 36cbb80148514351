package e2e

// Tests of cluster against the real binary (issue 12): its progress line
// follows what real peers log (package peerlog), and Ctrl-C stops every
// peer at once.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/cluster"
	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/report"
)

// clusterData generates a data set for cluster runs of a few seconds.
func clusterData(t *testing.T, rows int64) (train, test string, dim uint64) {
	t.Helper()
	dir := t.TempDir()
	cfg := data.DefaultGenConfig()
	cfg.Rows, cfg.TestRows, cfg.Features, cfg.Fields, cfg.Seed = rows, 2000, 1<<16, 20, 3
	meta, err := data.Generate(dir, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return meta.Files[0], meta.TestFile, cfg.Features
}

// progressRe matches cluster's progress line: "2 peers 41.3k ex/s | 0 r120
// 20.1k/s | 1 waiting".
var progressRe = regexp.MustCompile(`^(\d+) peers (\S+) ex/s((?: \| .*)*)$`)

// The progress line of a real run shows the peers training, with their
// rounds and a non-zero rate: the states come from the messages the real
// peers log (it used to wait for a message only the fake test peer wrote,
// and showed "0 ex/s | 0 waiting" throughout).
func TestClusterProgressFollowsRealPeers(t *testing.T) {
	binary(t)
	train, test, dim := clusterData(t, 20000)
	run := filepath.Join(t.TempDir(), "run")
	code, out, errOut := runBinary(t, ".", 3*time.Minute, "cluster", "--peers", "2", "--dir", run,
		"--train", train, "--test", test, "--dim", fmt.Sprint(dim), "--epochs", "6", "--batch", "50",
		"--progress-every", "100ms", "--log-format", "json")
	if code != 0 {
		t.Fatalf("cluster: exit %d\n%s\n%s", code, out, tail(errOut, 3000))
	}
	var lines []string
	training := 0
	sc := bufio.NewScanner(strings.NewReader(errOut))
	for sc.Scan() {
		var l struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		m := progressRe.FindStringSubmatch(l.Message)
		if m == nil {
			continue
		}
		lines = append(lines, l.Message)
		rate := strings.TrimRight(m[2], "kM")
		if v, err := strconv.ParseFloat(rate, 64); err == nil && v > 0 && regexp.MustCompile(`\| \d+ r\d+ \S+/s`).MatchString(m[3]) {
			training++
		}
	}
	if len(lines) == 0 {
		t.Fatalf("no progress line in cluster's log:\n%s", tail(errOut, 3000))
	}
	if training == 0 {
		t.Errorf("no progress line shows a training peer with a non-zero rate; the lines were:\n%s", strings.Join(lines, "\n"))
	}
	t.Logf("%d progress lines, %d with peers training; e.g. %q", len(lines), training, lines[len(lines)/2])
	if !bytes.Contains([]byte(out), []byte("model hashes agree: yes")) {
		t.Errorf("no result table:\n%s", out)
	}
}

// Issue 12: Ctrl-C on "cluster --peers 4" stops every peer within about 2s
// (none is left after 3s) and never needs SIGKILL: cluster sends the stop
// signal (peerlog.StopSignal), on which the peers stop at once instead of
// leaving gracefully one by one. Every peer writes its report marked
// partial, and cluster still prints the table of the run.
func TestClusterCtrlCStopsEveryPeerAtOnce(t *testing.T) {
	bin := binary(t)
	train, test, dim := clusterData(t, 40000)
	run := filepath.Join(t.TempDir(), "run")
	cmd := exec.Command(bin, "cluster", "--peers", "4", "--dir", run, "--train", train, "--test", test,
		"--dim", fmt.Sprint(dim), "--epochs", "200", "--progress-every", "200ms")
	var out, errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		for _, pid := range processesMentioning(t, run) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// Wait until every peer trains: a round line in each report.
	deadline := time.Now().Add(2 * time.Minute)
	for trained := 0; trained < 4; {
		trained = 0
		for i := range 4 {
			if lastRound(filepath.Join(run, fmt.Sprintf("peer-%d.jsonl", i))) >= 5 {
				trained++
			}
		}
		select {
		case <-done:
			t.Fatalf("cluster ended before every peer trained:\n%s", tail(errb.String(), 3000))
		case <-time.After(50 * time.Millisecond): // the reports grow in other processes
		}
		if time.Now().After(deadline) {
			t.Fatalf("the peers did not all train within 2 minutes:\n%s", tail(errb.String(), 3000))
		}
	}
	var peers []int
	for _, pid := range processesMentioning(t, run) {
		if pid != cmd.Process.Pid {
			peers = append(peers, pid)
		}
	}
	if len(peers) != 4 {
		t.Fatalf("found %d peer processes mentioning %s, want 4", len(peers), run)
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGINT)
	var left []int
	for time.Since(start) < 3*time.Second {
		left = nil
		for _, pid := range peers {
			if processAlive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond) // other processes exiting; nothing to wait on
	}
	gone := time.Since(start)
	if len(left) > 0 {
		t.Fatalf("peers %v still run 3s after Ctrl-C:\n%s", left, tail(errb.String(), 3000))
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("cluster still runs a minute after Ctrl-C:\n%s", tail(errb.String(), 3000))
	}
	t.Logf("every peer gone %v after Ctrl-C; cluster exit %d", gone.Round(time.Millisecond), cmd.ProcessState.ExitCode())
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("cluster exit %d after Ctrl-C, want 130", code)
	}
	if strings.Contains(errb.String(), "SIGKILL") && strings.Contains(errb.String(), "still running after the grace period") {
		t.Errorf("cluster needed SIGKILL:\n%s", tail(errb.String(), 3000))
	}
	for i := range 4 {
		r, err := report.ReadFile(filepath.Join(run, fmt.Sprintf("peer-%d.jsonl", i)))
		if err != nil || r.Summary == nil {
			t.Errorf("peer %d: no summary after Ctrl-C (%v)", i, err)
			continue
		}
		s := r.Summary
		if !s.Partial || s.Stopped != "job stopped" || s.StoppedAt < 5 || !math.IsNaN(float64(s.TestLogLoss)) {
			t.Errorf("peer %d summary: partial %v, stopped %q at %d, test log-loss %v; want a partial run with null metrics",
				i, s.Partial, s.Stopped, s.StoppedAt, s.TestLogLoss)
		}
	}
	if o := out.String(); !strings.Contains(o, "every peer stopped before the end of training") {
		t.Errorf("cluster's table does not say the run was stopped:\n%s", o)
	}
}

// processAlive reports whether pid runs and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// lockedBuffer is a bytes.Buffer safe for a process's output and a test
// reading it at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runBinary runs the gossiptrain binary in dir and returns its exit
// status, stdout and stderr.
func runBinary(t *testing.T, dir string, timeout time.Duration, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(timeout):
		cmd.Process.Signal(syscall.SIGINT)
		<-done
		t.Fatalf("%v did not finish within %v\nstdout:\n%s\nstderr:\n%s", args, timeout, out.String(), tail(errb.String(), 3000))
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// The first acceptance check: "gossiptrain cluster" with no
// arguments at all generates its data, trains on 4 peers, and prints the
// result table in under 2 minutes on 2 cores.
func TestClusterWithNoArguments(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	code, out, errOut := runBinary(t, dir, 2*time.Minute, "cluster")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("cluster: exit %d\n%s\n%s", code, out, tail(errOut, 3000))
	}
	t.Logf("gossiptrain cluster took %v:\n%s", took.Round(time.Second), out)
	for _, want := range []string{"ring: 4 peers, sync mode, batch 100", "examples/s", "sent MB", "CPU %", "peak RSS MiB",
		"total", "test log-loss", "the planted model that made the labels", "model hashes agree: yes", "report.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("the result table lacks %q", want)
		}
	}
	// "test log-loss 0.4608 (the planted model that made the labels: 0.4429)"
	var got, planted float64
	if i := strings.Index(out, "test log-loss "); i < 0 {
		t.Fatalf("no test log-loss in:\n%s", out)
	} else if _, err := fmt.Sscanf(out[i:], "test log-loss %f (the planted model that made the labels: %f)", &got, &planted); err != nil {
		t.Fatalf("cannot read the log-losses: %v\n%s", err, out[i:])
	}
	if got > 1.1*planted {
		t.Errorf("test log-loss %.4f is more than 10%% above the planted model's %.4f", got, planted)
	}
	runs, _ := filepath.Glob(filepath.Join(dir, "gossiptrain-runs", "*-cluster"))
	if len(runs) != 1 {
		t.Fatalf("want one run directory under gossiptrain-runs/, have %v", runs)
	}
	for _, f := range []string{"report.md", "bench.json", "throughput.png", "peer-0.jsonl", "peer-3.log", "data/meta.json"} {
		if st, err := os.Stat(filepath.Join(runs[0], f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty in the run directory: %v", f, err)
		}
	}
}

// cluster splits --train by files when there is one per peer, every peer
// reads only its own, and together they read every row once per epoch.
func TestClusterSplitsFilesAmongPeers(t *testing.T) {
	binary(t)
	dataDir := t.TempDir()
	gen := data.DefaultGenConfig()
	gen.Rows, gen.TestRows, gen.Features, gen.Fields, gen.Parts = 30000, 3000, 1<<16, 20, 3
	meta, err := data.Generate(dataDir, gen, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(t.TempDir(), "run")
	code, out, errOut := runBinary(t, ".", 2*time.Minute, "cluster", "--peers", "3", "--dir", run,
		"--train", filepath.Join(dataDir, "train-*.svm"), "--test", meta.TestFile, "--dim", "65536",
		"--batch", "200", "--epochs", "2", "--topology", "master", "--save", filepath.Join(run, "model.gt"),
		"--cache", filepath.Join(run, "rows.cache"))
	if code != 0 {
		t.Fatalf("cluster: exit %d\n%s\n%s", code, out, tail(errOut, 3000))
	}
	var total int64
	for i := range 3 {
		r, err := report.ReadFile(filepath.Join(run, fmt.Sprintf("peer-%d.jsonl", i)))
		if err != nil || r.Summary == nil {
			t.Fatalf("peer %d: %v", i, err)
		}
		if got, want := r.Start.Config["train"], meta.Files[i]; got != want {
			t.Errorf("peer %d trained on %q, want its own file %q", i, got, want)
		}
		if got, want := r.Start.Config["cache"], filepath.Join(run, fmt.Sprintf("rows.cache.peer%d", i)); got != want {
			t.Errorf("peer %d cached its rows in %q, want its own file %q", i, got, want)
		}
		if r.Summary.Topology != "master" || r.Summary.Epochs != 2 || r.Summary.Batch != 200 {
			t.Errorf("peer %d: topology %s, %d epochs, batch %d: the train flags were not passed through",
				i, r.Summary.Topology, r.Summary.Epochs, r.Summary.Batch)
		}
		total += r.Summary.Examples
	}
	if total != 2*gen.Rows {
		t.Errorf("the peers trained on %d examples, want 2 epochs x %d rows", total, gen.Rows)
	}
	if !strings.Contains(out, "model hashes agree: yes") || !strings.Contains(out, "master: 3 peers") {
		t.Errorf("result table:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(run, "model.gt")); err != nil {
		t.Errorf("--save: %v", err)
	}
	// A swarm key of the run's own, and every peer in its private swarm.
	key := filepath.Join(run, "swarm.key")
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the run's swarm key %s: %v, want a file of mode 0600", key, err)
	}
	for i := range 3 {
		log, _ := os.ReadFile(filepath.Join(run, fmt.Sprintf("peer-%d.log", i)))
		if !bytes.Contains(log, []byte(`"swarm_key":"`+key+`"`)) {
			t.Errorf("peer %d did not run with the run's swarm key %s", i, key)
		}
	}
}

// bench runs every configuration on the same data and writes report.md,
// bench.json and the plots; sync runs of the master and the ring compute
// the same model.
func TestBenchWritesTheReport(t *testing.T) {
	binary(t)
	out := filepath.Join(t.TempDir(), "bench")
	code, stdout, errOut := runBinary(t, ".", 3*time.Minute, "bench", "--peers", "2", "--topologies", "master,ring",
		"--modes", "sync", "--batches", "100,400", "--examples", "20000", "--dim", "65536", "--out", out)
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s\n%s", code, stdout, tail(errOut, 3000))
	}
	for _, want := range []string{"master/sync/b100", "ring/sync/b400", "sync mode, batch 100: ring throughput is", "report.md"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("bench output lacks %q:\n%s", want, stdout)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, report.BenchJSONFile))
	if err != nil {
		t.Fatal(err)
	}
	var cfgs []map[string]any
	if err := json.Unmarshal(b, &cfgs); err != nil {
		t.Fatal(err)
	}
	if len(cfgs) != 4 {
		t.Fatalf("bench.json has %d configurations, want 4", len(cfgs))
	}
	hash := map[float64]string{}
	for _, c := range cfgs {
		for _, k := range []string{"topology", "mode", "batch", "examples_per_sec", "test_logloss", "peers"} {
			if _, ok := c[k]; !ok {
				t.Errorf("configuration %v lacks %q", c["name"], k)
			}
		}
		if ex := c["examples"].(float64); ex != 20000 {
			t.Errorf("%v trained on %v examples, want the same 20000 in every configuration", c["name"], ex)
		}
		peers := c["peers"].([]any)
		if len(peers) != 2 {
			t.Fatalf("%v: %d peers, want 2", c["name"], len(peers))
		}
		for _, p := range peers {
			for _, k := range []string{"peer_id", "bytes_sent", "bytes_recv", "cpu_percent", "peak_rss_bytes"} {
				if _, ok := p.(map[string]any)[k]; !ok {
					t.Errorf("%v: a peer lacks %q", c["name"], k)
				}
			}
			// Sync: one peer paused its training to evaluate along the way,
			// and every peer waited for it: every peer's time leaves that out.
			if ps, _ := p.(map[string]any)["paused_seconds"].(float64); ps <= 0 {
				t.Errorf("%v: peer %v has paused_seconds %v, want the evaluating peer's pauses (> 0)", c["name"], p.(map[string]any)["peer_id"], ps)
			}
		}
		batch := c["batch"].(float64)
		h := peers[0].(map[string]any)["model_hash"].(string)
		if prev, ok := hash[batch]; ok && prev != h {
			t.Errorf("batch %v: master and ring end with models %s and %s; sync rounds must give the same model", batch, prev, h)
		}
		hash[batch] = h
	}
	for _, f := range []string{"report.md", "error_vs_examples.png", "error_vs_seconds.svg", "throughput.png", "peer_net_out.png", "throughput_vs_batch.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
}

// Interrupting bench (Ctrl-C) stops every peer and, with --netns, removes
// every namespace, link and qdisc: nothing is left behind.
func TestBenchInterruptedLeavesNothing(t *testing.T) {
	for _, netns := range []bool{false, true} {
		t.Run(fmt.Sprintf("netns=%v", netns), func(t *testing.T) {
			bin := binary(t)
			if netns {
				if err := cluster.CheckNetNS(); err != nil {
					t.Skipf("network namespaces unavailable: %v", err)
				}
			}
			out := filepath.Join(t.TempDir(), "bench")
			args := []string{"bench", "--peers", "3", "--examples", "600000", "--dim", "65536", "--batches", "10",
				"--out", out, "--progress-every", "200ms"}
			if netns {
				args = append(args, "--netns", "--rate", "100mbit")
			}
			cmd := exec.Command(bin, args...)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Wait for the first configuration's peers to train: a
			// round line in peer 0's report.
			deadline := time.Now().Add(2 * time.Minute)
			var rep string
			for {
				if m, _ := filepath.Glob(filepath.Join(out, "runs", "*", "peer-0.jsonl")); len(m) > 0 {
					if b, _ := os.ReadFile(m[0]); bytes.Contains(b, []byte(`"type":"round"`)) {
						rep = m[0]
						break
					}
				}
				if time.Now().After(deadline) || cmd.ProcessState != nil {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("no peer trained within 2 minutes\n%s", tail(errb.String(), 3000))
				}
				time.Sleep(50 * time.Millisecond) // polling a file another process writes
			}
			peers := processesMentioning(t, out)
			if len(peers) < 3 {
				t.Errorf("found %d peer processes mentioning %s while training, want 3", len(peers), out)
			}
			cmd.Process.Signal(syscall.SIGINT)
			err := cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 130 {
				t.Errorf("bench after SIGINT: %v (exit %d), want exit 130\n%s", err, code, tail(errb.String(), 2000))
			}
			if left := processesMentioning(t, out); len(left) > 0 {
				t.Errorf("processes left running after bench exited: %v", left)
			}
			if netns {
				prefix := "gt" + strconv.FormatInt(int64(cmd.Process.Pid), 36) + "-"
				for _, c := range [][]string{{"ip", "netns", "list"}, {"ip", "-o", "link", "show"}, {"tc", "qdisc", "show"}} {
					o, _ := exec.Command(c[0], c[1:]...).CombinedOutput()
					if strings.Contains(string(o), prefix) {
						t.Errorf("%v still lists %s…:\n%s", c, prefix, o)
					}
				}
			}
			t.Logf("interrupted while %s was training; exit %d", rep, cmd.ProcessState.ExitCode())
		})
	}
}

// processesMentioning returns the PIDs of processes whose command line
// contains s.
func processesMentioning(t *testing.T, s string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Plain train (one peer alone) serves --metrics-addr too, so the baseline
// of a scaling comparison can be profiled like a cluster's peers; a bad
// address is refused before training, naming the flag.
func TestTrainAloneServesMetrics(t *testing.T) {
	train, test, dim := e2eData(t)
	dir := t.TempDir()
	code, out, errOut := runBinary(t, dir, time.Minute, "train", "--train", train, "--test", test, "--dim", fmt.Sprint(dim), "--epochs", "1", "--metrics-addr", "127.0.0.1:0")
	if code != 0 {
		t.Fatalf("train: exit %d\n%s\n%s", code, out, tail(errOut, 3000))
	}
	if !strings.Contains(errOut, "metrics server listening") {
		t.Errorf("train --metrics-addr logged no metrics server:\n%s", tail(errOut, 3000))
	}
	code, _, errOut = runBinary(t, dir, time.Minute, "train", "--train", train, "--dim", fmt.Sprint(dim), "--metrics-addr", "no-port-here")
	if code != 2 || !strings.Contains(errOut, "--metrics-addr") {
		t.Errorf("train --metrics-addr no-port-here: exit %d, %s; want 2 and an error naming --metrics-addr", code, tail(errOut, 500))
	}
}
