package trainer

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/node/ring"
	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// lockedBuffer is a log sink the trainer's goroutines may write to while
// the test reads it.
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

// stalledPeer runs peer00 of a two-peer sync run whose other initial
// member never starts, so no round completes, with change applied to its
// configuration; it returns Run's error, how long Run took, and the log.
func stalledPeer(t *testing.T, timeout time.Duration, change func(*Config, *Hooks)) (error, time.Duration, string) {
	t.Helper()
	const dim = 500
	initial := []train.Member{{Peer: "peer00", ID: train.MemberID("peer00", 1)}, {Peer: "peer01", ID: train.MemberID("peer01", 1)}}
	rcfg := ring.DefaultConfig()
	rcfg.Shards = 16
	var logs lockedBuffer
	cfg := DefaultConfig()
	cfg.Core.Self, cfg.Core.ID = "peer00", initial[0].ID
	cfg.Core.Model, cfg.Core.Initial = newModel(t, dim), initial
	cfg.Core.Place = func(members []string) (train.Placement, error) { return ring.New(rcfg, members) }
	cfg.Batch, cfg.Tick = 50, time.Millisecond
	cfg.Log = zerolog.New(&logs)
	var hooks Hooks
	change(&cfg, &hooks)
	ml := &memLink{peers: map[string]*Trainer{}}
	tr, err := New(cfg, hooks, link{ml, "peer00"})
	if err != nil {
		t.Fatal(err)
	}
	ml.peers["peer00"] = tr
	tr.SetAlive([]uint64{initial[0].ID, initial[1].ID}) // (peer01 never answers)
	rows := planted(1, 600, dim, 5)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	_, err = tr.Run(ctx, func(int) (data.Source, error) { return &rowsSource{b: rows}, nil }, nil)
	return err, time.Since(start), logs.String()
}

// A peer whose run cannot move (the other initial member never starts, so
// no sync round completes) says so, with what its core waits for, every
// StallAfter; a user sees why a run hangs instead of progress lines that
// repeat "0 ex/s". With StallTimeout 0 it never gives up.
func TestStalledRunLogsWhatItWaitsFor(t *testing.T) {
	err, _, out := stalledPeer(t, 1500*time.Millisecond, func(cfg *Config, _ *Hooks) {
		cfg.StallAfter, cfg.StallTimeout = 300*time.Millisecond, 0
	})
	if err != context.DeadlineExceeded {
		t.Fatalf("run ended with %v; want it stuck until the context ended", err)
	}
	n := strings.Count(out, "no progress")
	if n < 2 || n > 5 {
		t.Errorf("%d stall lines in 1.5 s with StallAfter 300ms; want one every 300ms after the first 300ms:\n%s", n, out)
	}
	if !strings.Contains(out, "config 1 members [peer00 peer01]") || !strings.Contains(out, `"waiting_for":"a reply from peer01 to its pull of round 0`) {
		t.Errorf("the stall line does not say the configuration the core waits in and for whom:\n%s", out)
	}
}

// Issue 30: a run that cannot move must not hang silently for ever (a
// sync job stayed at round 1 while its progress lines printed a growing
// ETA). After StallTimeout without progress Run fails with ErrStalled,
// naming the peer it waits for; the progress reports in the meantime say
// it waits, and for what.
func TestStalledRunFailsNamingThePeer(t *testing.T) {
	var mu sync.Mutex
	var waiting []sgd.Progress
	err, took, out := stalledPeer(t, 20*time.Second, func(cfg *Config, h *Hooks) {
		cfg.StallAfter, cfg.StallTimeout = 200*time.Millisecond, 600*time.Millisecond
		cfg.ProgressEvery = 100 * time.Millisecond
		h.Progress = func(p sgd.Progress) {
			mu.Lock()
			defer mu.Unlock()
			if p.Waiting != "" {
				waiting = append(waiting, p)
			}
		}
	})
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("run ended with %v after %v; want ErrStalled", err, took)
	}
	t.Logf("after %v: %v", took, err)
	if took < 600*time.Millisecond || took > 5*time.Second {
		t.Errorf("Run failed after %v with StallTimeout 600ms", took)
	}
	for _, want := range []string{"the run made no progress for 600ms (--stall-timeout)", "a reply from peer01 to its pull of round 0", "config 1 members [peer00 peer01]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if !strings.Contains(out, "no progress") {
		t.Errorf("no stall line before the run failed:\n%s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waiting) < 3 {
		t.Fatalf("%d progress reports said the peer waits; want one every 100ms", len(waiting))
	}
	last := waiting[len(waiting)-1]
	if !strings.HasPrefix(last.Waiting, "round 0: a reply from peer01 to its pull of round 0") || last.Idle < 0.3 || last.Examples != 0 {
		t.Errorf("the last progress report: %+v; want it waiting for peer01's reply, idle since the start", last)
	}
}

// waitingFor reads what a core waits for from its Debug text: its
// unanswered requests per peer and op, and as an owner the members whose
// contributions a round lacks.
func TestWaitingFor(t *testing.T) {
	debug := `peer00 tick 5 config 3 members [peer00 peer01 peer02] leader peer00 | worker clock 7
  agreement whatever
  shard 3 held true through 7
  round 7 (configuration 3) requires [peer00/1a2b peer01/3c4d peer02/5e6f]
  round 7 contribution from peer00/1a2b shards [3]
  request 9 push to peer01 round 6 through 6 shards [1 2] tries 4
  request 10 push to peer01 round 7 through 7 shards [1 2] tries 0
  request 11 pull to peer02 round 7 through 7 shards [5] tries 1
  request garbled
`
	got := waitingFor(debug, 8)
	want := "a reply from peer01 to its push of round 6, 7 (sent again 4 times); a reply from peer02 to its pull of round 7 (sent again once); " +
		"the contributions of peer01, peer02 to round 7 (as an owner)"
	if got != want {
		t.Errorf("waitingFor:\n%s\nwant\n%s", got, want)
	}
	if got := waitingFor(debug, 1); got != "a reply from peer01 to its push of round 6, 7 (sent again 4 times); 2 more" {
		t.Errorf("waitingFor at most 1: %s", got)
	}
	if got := waitingFor("peer00 tick 5", 4); got != "" {
		t.Errorf("waitingFor a core that waits for nothing: %q", got)
	}
}
