package cli

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
