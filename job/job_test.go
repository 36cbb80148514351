package job

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/peerlog"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// A progress line after which no example was trained says the peer waits,
// for how long and for what, instead of an ETA that only grows.
func TestProgressLineWaiting(t *testing.T) {
	var logs bytes.Buffer
	cfg := Config{Log: zerolog.New(&logs), ProgressEvery: time.Nanosecond, Plan: &infer.Plan{Epochs: 5, TrainBytes: 1000}}
	p := cfg.progressHook(false)
	p.fn(sgd.Progress{Epoch: 1, Examples: 100, Seconds: 10, ExamplesPerSec: 10})
	time.Sleep(time.Millisecond)
	p.fn(sgd.Progress{Epoch: 1, Examples: 100, Seconds: 55, Idle: 45, Waiting: "round 12: a reply from peer01 to its push of round 11"})
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), logs.String())
	}
	if !strings.Contains(lines[0], `"message":"training"`) {
		t.Errorf("a line with examples trained: %s", lines[0])
	}
	for _, want := range []string{`"message":"waiting"`, `"waited":"45s"`, `"for":"round 12: a reply from peer01 to its push of round 11"`} {
		if !strings.Contains(lines[1], want) || strings.Contains(lines[1], "eta") {
			t.Errorf("a line with no example trained since the previous: %s; want %s and no ETA", lines[1], want)
		}
	}
}

// Skipped batches are logged one by one, with their rows, up to ten; the
// rest are counted, so bad data cannot flood the log.
func TestSkippedBatchesLogged(t *testing.T) {
	var logs bytes.Buffer
	log := skippedLogger(zerolog.New(&logs))
	for i := range 12 {
		log(&sgd.NonFiniteError{Epoch: 1, FirstRow: int64(50*i + 1), Examples: 50, InGradient: true, Value: float32(math.Inf(-1))})
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 11 || !strings.Contains(lines[0], `"rows":"epoch 1, rows 1-50"`) || !strings.Contains(lines[0], `-Inf at model row 0`) ||
		!strings.Contains(lines[10], "no longer logged one by one") {
		t.Errorf("12 skipped batches logged as:\n%s", logs.String())
	}
	logs.Reset()
	warnSkipped(zerolog.New(&logs), 0)
	if logs.Len() != 0 {
		t.Errorf("no batch skipped, yet: %s", logs.String())
	}
	warnSkipped(zerolog.New(&logs), 4)
	if !strings.Contains(logs.String(), `"batches_skipped_nonfinite":4`) {
		t.Errorf("4 batches skipped: %s", logs.String())
	}
}

func TestStallTimeoutCoversDeadAfter(t *testing.T) {
	for _, c := range []struct{ st, dead, want time.Duration }{
		{2 * time.Minute, 5 * time.Second, 2 * time.Minute},
		{2 * time.Minute, time.Minute, 4 * time.Minute},
		{0, time.Minute, 0},
	} {
		if got := stallTimeout(c.st, c.dead); got != c.want {
			t.Errorf("--stall-timeout %v with --dead-after %v: %v, want %v", c.st, c.dead, got, c.want)
		}
	}
}

// A training process collects garbage at GOGC 25 (trainGCPercent), lower
// for a model so large that 25% of it is more than 16 MiB, unless the user
// set GOGC.
func TestTrainingGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	for _, tc := range []struct {
		weights int64
		want    int
	}{{0, 25}, {4 << 20, 25}, {64 << 20, 25}, {128 << 20, 12}, {1 << 30, 1}, {2 << 30, 1}} {
		debug.SetGCPercent(100)
		GCForTraining(tc.weights)
		if got := debug.SetGCPercent(100); got != tc.want {
			t.Errorf("without GOGC, %d MiB of weights: GC percent %d, want %d", tc.weights>>20, got, tc.want)
		}
	}
	t.Setenv("GOGC", "100")
	GCForTraining(2 << 30)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC=100 in the environment: GC percent %d, want 100 (the user's)", got)
	}
}

// --metrics-addr serves Prometheus metrics and pprof; a bad address is a
// usage error naming the flag.
func TestMetricsFlag(t *testing.T) {
	mt, closeFn, err := StartMetrics("127.0.0.1:0", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if mt == nil || mt.Registry() == nil {
		t.Fatal("no metrics")
	}
	if mt, closeFn, err := StartMetrics("", zerolog.Nop()); mt != nil || err != nil || closeFn() != nil {
		t.Errorf("without --metrics-addr: %v, %v; want nil metrics and no error", mt, err)
	}
	if _, _, err := StartMetrics("nowhere", zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Errorf("bad address: %v, want a usage error naming --metrics-addr", err)
	}
}

// The metrics server logs the line cluster reads its address from.
func TestMetricsServerLogsWhatClusterReads(t *testing.T) {
	var buf lockedBuffer
	_, closeFn, err := StartMetrics("127.0.0.1:0", zerolog.New(&buf))
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	var l struct{ Message, Addr string }
	for _, line := range strings.Split(buf.String(), "\n") {
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == peerlog.MetricsListening && l.Addr != "" {
			return
		}
	}
	t.Errorf("no %q line with an addr field in:\n%s", peerlog.MetricsListening, buf.String())
}

// lockedBuffer is a bytes.Buffer safe for a logger's goroutines and a test.
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
