package trainer

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/node/ring"
	"github.com/gossiptrain/gossiptrain/node/train"
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

// A peer whose run cannot move (the other initial member never starts, so
// no sync round completes) says so, with what its core waits for, every
// StallAfter; a user sees why a run hangs instead of progress lines that
// repeat "0 ex/s".
func TestStalledRunLogsWhatItWaitsFor(t *testing.T) {
	const dim = 500
	initial := []train.Member{{Peer: "peer00", ID: train.MemberID("peer00", 1)}, {Peer: "peer01", ID: train.MemberID("peer01", 1)}}
	rcfg := ring.DefaultConfig()
	rcfg.Shards = 16
	var logs lockedBuffer
	cfg := DefaultConfig()
	cfg.Core.Self, cfg.Core.ID = "peer00", initial[0].ID
	cfg.Core.Model, cfg.Core.Initial = newModel(t, dim), initial
	cfg.Core.Place = func(members []string) (train.Placement, error) { return ring.New(rcfg, members) }
	cfg.Batch, cfg.Tick, cfg.StallAfter = 50, time.Millisecond, 300*time.Millisecond
	cfg.Log = zerolog.New(&logs)
	ml := &memLink{peers: map[string]*Trainer{}}
	tr, err := New(cfg, Hooks{}, link{ml, "peer00"})
	if err != nil {
		t.Fatal(err)
	}
	ml.peers["peer00"] = tr
	tr.SetAlive([]uint64{initial[0].ID, initial[1].ID}) // (peer01 never answers)
	rows := planted(1, 600, dim, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err = tr.Run(ctx, func(int) (data.Source, error) { return &rowsSource{b: rows}, nil }, nil)
	if err != context.DeadlineExceeded {
		t.Fatalf("run ended with %v; want it stuck until the context ended", err)
	}
	out := logs.String()
	n := strings.Count(out, "no progress")
	if n < 2 || n > 5 {
		t.Errorf("%d stall lines in 1.5 s with StallAfter 300ms; want one every 300ms after the first 300ms:\n%s", n, out)
	}
	if !strings.Contains(out, "config 1 members [peer00 peer01]") {
		t.Errorf("the stall line does not say the configuration the core waits in:\n%s", out)
	}
}
