package cluster

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the agent's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// agentRun runs RunAgent on a fake peer with the given behaviour; stop,
// when not nil, runs once the peer's report streams round lines, with the
// writer of the agent's standard input.
func agentRun(t *testing.T, behaviour string, grace time.Duration, stop func(in io.WriteCloser)) (code int, out, errOut string, report, log string) {
	t.Helper()
	dir := t.TempDir()
	report = filepath.Join(dir, "runs", "r1", "peer-0.jsonl")
	log = filepath.Join(dir, "runs", "r1", "peer-0.log")
	// A report left by an earlier run under the same name is not streamed.
	os.MkdirAll(filepath.Dir(report), 0o755)
	os.WriteFile(report, []byte(`{"type":"stale"}`+"\n"), 0o644)
	key := filepath.Join(dir, "runs", "r1", "swarm.key") // as SSH.Prepare ships it
	if err := writeSwarmKey(key); err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	var o, e syncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		var err error
		code, err = RunAgent(context.Background(), AgentConfig{
			Binary: os.Args[0], Env: fakeEnv, Report: report, Log: log, Grace: grace, Poll: 10 * time.Millisecond,
			Args: []string{"train", "--fake", behaviour, "--report", report, "--listen", "/ip4/127.0.0.1/tcp/0", "--min-peers", "1", "--swarm-key", key},
			In:   inR, Out: &o, Err: &e,
		})
		if err != nil {
			t.Error(err)
		}
	}()
	if stop != nil {
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(o.String(), `"type":"round"`) {
			if time.Now().After(deadline) {
				t.Fatalf("no round line streamed within 20 s; log:\n%s", e.String())
			}
			time.Sleep(5 * time.Millisecond) // polling another process's output
		}
		stop(inW)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		inW.Close()
		<-done
		t.Fatalf("the agent did not end within 30 s")
	}
	inW.Close()
	return code, o.String(), e.String(), report, log
}

// The agent streams the whole report (summary included) to its standard
// output and the peer's log to its standard error and to --log, and exits
// as the peer did.
func TestAgentStreamsReportAndLog(t *testing.T) {
	code, out, errOut, report, log := agentRun(t, "ok", time.Second, nil)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	rep, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(rep) || !strings.Contains(out, `"type":"summary"`) || strings.Contains(out, "stale") {
		t.Errorf("streamed report differs from the file (or lacks the summary, or has the stale report):\n%s\nfile:\n%s", out, rep)
	}
	logged, _ := os.ReadFile(log)
	if !strings.Contains(errOut, `"message":"done"`) || string(logged) != errOut {
		t.Errorf("the log on standard error and in --log differ or lack the last line:\n%s\n---\n%s", errOut, logged)
	}
}

// "term" on standard input makes the peer leave (SIGTERM: the fake exits
// 130, as a gossiptrain peer that leaves); so does the end of standard
// input (the launcher or its connection is gone); a peer that ignores
// SIGTERM is killed after the grace period.
func TestAgentStops(t *testing.T) {
	for _, c := range []struct {
		name, behaviour string
		stop            func(io.WriteCloser)
		want            int
	}{
		{"term", "hang", func(w io.WriteCloser) { io.WriteString(w, "term\n") }, 130},
		{"kill", "hang", func(w io.WriteCloser) { io.WriteString(w, "kill\n") }, 137},
		{"session gone", "hang", func(w io.WriteCloser) { w.Close() }, 130},
		{"session gone, SIGTERM ignored", "ignore-term", func(w io.WriteCloser) { w.Close() }, 137},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			code, out, errOut, _, _ := agentRun(t, c.behaviour, 300*time.Millisecond, c.stop)
			if code != c.want {
				t.Errorf("exit %d, want %d\n%s", code, c.want, errOut)
			}
			if !strings.Contains(out, `"type":"round"`) {
				t.Errorf("no round line streamed")
			}
			if took := time.Since(start); took > 15*time.Second {
				t.Errorf("took %v to stop", took)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain":              "plain",
		"--train=data/a.svm": "--train=data/a.svm",
		"":                   "''",
		"a b":                "'a b'",
		"it's":               `'it'\''s'`,
		"$(reboot)":          "'$(reboot)'",
		"*.svm":              "'*.svm'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
