package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/job"
	"github.com/gossiptrain/gossiptrain/node"
	"github.com/gossiptrain/gossiptrain/peerlog"
)

// peerProc is a gossiptrain peer process whose log lines (JSON) are read
// as they come.
type peerProc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []map[string]any
	raw   bytes.Buffer
	done  chan struct{}
	err   error
}

func startPeerProc(t *testing.T, args ...string) *peerProc {
	t.Helper()
	p := &peerProc{cmd: exec.Command(binary(t), args...), done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var m map[string]any
			json.Unmarshal(sc.Bytes(), &m)
			p.mu.Lock()
			p.raw.Write(append(sc.Bytes(), '\n'))
			if m != nil {
				p.lines = append(p.lines, m)
			}
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-read
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// line waits up to timeout for a log line with the message and returns it.
func (p *peerProc) line(t *testing.T, msg string, timeout time.Duration) map[string]any {
	t.Helper()
	return p.lineWhere(t, msg, func(map[string]any) bool { return true }, timeout)
}

// lineWhere waits up to timeout for a log line with the message for which
// ok holds, and returns it.
func (p *peerProc) lineWhere(t *testing.T, msg string, ok func(map[string]any) bool, timeout time.Duration) map[string]any {
	t.Helper()
	find := func() map[string]any {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, l := range p.lines {
			if l["message"] == msg && ok(l) {
				return l
			}
		}
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		if l := find(); l != nil {
			return l
		}
		select {
		case <-p.done:
			if l := find(); l != nil {
				return l
			}
			t.Fatalf("the peer exited (%v) without logging %q:\n%s", p.err, msg, tail(p.raw.String(), 3000))
		case <-time.After(20 * time.Millisecond): // lines arrive from another process
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q line within %v:\n%s", msg, timeout, tail(p.raw.String(), 3000))
		}
	}
}

// wait waits for the process to exit and returns its status and log.
func (p *peerProc) wait(t *testing.T, timeout time.Duration) (int, string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("still running after %v:\n%s", timeout, tail(p.rawString(), 3000))
	}
	return p.cmd.ProcessState.ExitCode(), p.rawString()
}

func (p *peerProc) rawString() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raw.String()
}

func logTime(t *testing.T, l map[string]any) time.Time {
	t.Helper()
	s, _ := l["time"].(string)
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("line %v: time: %v", l, err)
	}
	return ts
}

// Issue 12: a peer pointed at a dead --peer logs the dial error within 5s
// of starting (by its own clock), and --wait-timeout ends the wait with an
// error that says why.
func TestDeadPeerLogsTheDialError(t *testing.T) {
	train, _, dim := clusterData(t, 2000)
	dead := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", freePort(t), "12D3KooWEuQpbAyLHLUeuVP76S437TmCa34vq4G4tKrK5eZ11oJy")
	p := startPeerProc(t, "train", "--job", "lonely", "--listen", "/ip4/127.0.0.1/tcp/0", "--peer", dead,
		"--train", train, "--dim", fmt.Sprint(dim), "--model", "logreg", "--l2", "1e-6", "--log-format", "json",
		"--progress-every", "1s", "--wait-timeout", "4s")
	started := logTime(t, p.line(t, peerlog.Started, time.Minute))
	l := p.line(t, "cannot reach a bootstrap peer (--peer); retrying with backoff", time.Minute)
	if took := logTime(t, l).Sub(started); took > 5*time.Second {
		t.Errorf("the dial error came %v after the peer started, want within 5s", took)
	}
	if e, _ := l["error"].(string); !strings.Contains(e, "connection refused") || l["hint"] == nil {
		t.Errorf("dial error line %v: want the error (connection refused) and a hint", l)
	}
	w := p.line(t, peerlog.StillWaiting, time.Minute)
	if why := fmt.Sprint(w["why"]); !strings.Contains(why, "dials failed") {
		t.Errorf("still-waiting line %v: want the failed dials", w)
	}
	code, log := p.wait(t, time.Minute)
	if code != 1 || !strings.Contains(log, "the cluster did not form within --wait-timeout 4s") || !strings.Contains(log, "connection refused") {
		t.Errorf("exit %d; want 1 and an error naming --wait-timeout and the dial error:\n%s", code, tail(log, 2000))
	}
}

// Issue 10 item 13 with the real binary: two peers of one job with
// different --dim are refused on both sides at connect. The peer whose
// --peer refused it exits at once (it cannot join through it); the first
// peer, which stays behind, waits job.RefusedGrace (not --wait-timeout,
// 30 minutes) for compatible peers to form the cluster without it, saying
// why, then fails naming the refused peer and its --dim (issue 33).
func TestDifferentDimRefusedAtConnect(t *testing.T) {
	train, _, _ := clusterData(t, 2000)
	ids := newIdentities(t, 1)
	common := []string{"train", "--job", "dims", "--train", train, "--model", "logreg", "--l2", "1e-6",
		"--log-format", "json", "--progress-every", "500ms"}
	a := startPeerProc(t, append(common, "--dim", "65536", "--min-peers", "2",
		"--identity", filepath.Join(ids.dir, "id0"), "--listen", "/ip4/127.0.0.1/tcp/0")...)
	addrs, _ := a.line(t, peerlog.Started, time.Minute)["addrs"].([]any)
	port := loopbackPort(addrs)
	if port == 0 {
		t.Fatalf("the first peer's %q line has no loopback TCP address", peerlog.Started)
	}
	a.line(t, peerlog.Waiting, time.Minute)
	b := startPeerProc(t, append(common, "--dim", "131072", "--min-peers", "2", "--listen", "/ip4/127.0.0.1/tcp/0",
		"--peer", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", port, ids.ids[0]))...)
	code, blog := b.wait(t, time.Minute)
	wantB := "--dim: this peer 131072, peer " + node.ShortID(ids.ids[0]) + " 65536"
	if code != 1 || !strings.Contains(blog, "a --peer refused this peer") || !strings.Contains(blog, wantB) {
		t.Errorf("the second peer: exit %d; want 1 and %q:\n%s", code, wantB, tail(blog, 2000))
	}
	// Its next still-waiting line names the refused peer's --dim.
	a.lineWhere(t, peerlog.StillWaiting, func(l map[string]any) bool {
		why := fmt.Sprint(l["why"])
		return strings.Contains(why, "--dim: this peer 65536") && strings.Contains(why, " 131072")
	}, time.Minute)
	refusedAt := time.Now()
	code, alog := a.wait(t, time.Minute)
	want := "refused peer " + node.ShortID(fmt.Sprint(b.line(t, peerlog.Started, time.Second)["peer_id"])) + " at connect, and the cluster did not form without it within " + job.RefusedGrace.String()
	if code != 1 || !strings.Contains(alog, want) || !strings.Contains(alog, "--dim: this peer 65536") {
		t.Errorf("the first peer: exit %d; want 1 and %q, naming the refused --dim:\n%s", code, want, tail(alog, 2000))
	}
	if took := time.Since(refusedAt); took > job.RefusedGrace+10*time.Second {
		t.Errorf("the first peer failed %v after the refusal; want within %v of it", took, job.RefusedGrace)
	}
	if n := strings.Count(alog, "refusing peer"); n != 1 {
		t.Errorf("the first peer logged %d refusals, want 1", n)
	}
	if len(alog) > 64<<10 {
		t.Errorf("the first peer logged %d bytes in %v of waiting", len(alog), job.RefusedGrace)
	}
}
