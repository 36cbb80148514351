package memnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"
)

// recorder subscribes a node to a topic and records what it delivers.
type recorder struct {
	got    []string
	reject func(msg []byte) bool
}

func (r *recorder) sub(t *testing.T, nd *Node, topic string) func() {
	t.Helper()
	cancel, err := nd.Subscribe(topic, func(from string, msg []byte) (any, error) {
		if r.reject != nil && r.reject(msg) {
			return nil, errors.New("refused")
		}
		return len(msg), nil
	}, func(from string, msg []byte, v any) {
		if v != len(msg) {
			t.Errorf("delivered %q with the validator's value %v, want %d", msg, v, len(msg))
		}
		r.got = append(r.got, from+":"+string(msg))
	})
	if err != nil {
		t.Fatal(err)
	}
	return cancel
}

func manual(t *testing.T, seed uint64) *Network {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Manual, cfg.Seed = true, seed
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

func publish(t *testing.T, nd *Node, topic string, msgs ...string) {
	t.Helper()
	for _, m := range msgs {
		if err := nd.Publish(context.Background(), topic, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
}

// Subscribers get every message in order; the publisher, subscribed or
// not, never gets its own; other topics are not delivered.
func TestPublishDelivers(t *testing.T) {
	n := manual(t, 1)
	a, b, c := n.NewNode("a"), n.NewNode("b"), n.NewNode("c")
	var ra, rb, rc recorder
	ra.sub(t, a, "t")
	rb.sub(t, b, "t")
	rc.sub(t, c, "other")
	publish(t, a, "t", "1", "2")
	publish(t, c, "t", "3") // c is not subscribed to t: still delivered to its subscribers
	if got := n.Flush(); got != 4 {
		t.Fatalf("Flush delivered %d, want 4 (a's two to b, c's one to a and b)", got)
	}
	if want := []string{"c:3"}; !slices.Equal(ra.got, want) {
		t.Errorf("a got %v, want %v", ra.got, want)
	}
	if want := []string{"a:1", "a:2", "c:3"}; !slices.Equal(rb.got, want) {
		t.Errorf("b got %v, want %v", rb.got, want)
	}
	if len(rc.got) != 0 {
		t.Errorf("c got %v on another topic", rc.got)
	}
	if s := a.Stats(); s.Published != 2 || s.PublishedBytes != 2 || s.Received != 1 {
		t.Errorf("a stats %+v", s)
	}
	if _, err := b.Subscribe("t", nil, nil); !errors.Is(err, ErrSubscribed) {
		t.Errorf("second subscription: %v", err)
	}
}

func TestValidatorRejects(t *testing.T) {
	n := manual(t, 1)
	a, b := n.NewNode("a"), n.NewNode("b")
	rb := recorder{reject: func(m []byte) bool { return string(m) == "bad" }}
	rb.sub(t, b, "t")
	publish(t, a, "t", "ok", "bad", "ok2")
	n.Flush()
	if want := []string{"a:ok", "a:ok2"}; !slices.Equal(rb.got, want) {
		t.Errorf("got %v, want %v", rb.got, want)
	}
	if s := b.Stats(); s.Rejected != 1 || s.Received != 2 {
		t.Errorf("stats %+v, want 1 rejected 2 received", s)
	}
}

func TestDrops(t *testing.T) {
	n := manual(t, 1)
	a, b, c := n.NewNode("a"), n.NewNode("b"), n.NewNode("c")
	var rb, rc recorder
	rb.sub(t, b, "t")
	rc.sub(t, c, "t")
	n.DropNext(3) // per receiver copy: 1 to b, 1 to c, 2 to b
	remove := n.DropIf(func(e Envelope) bool { return e.To == "c" && string(e.Data) == "4" })
	publish(t, a, "t", "1", "2", "3", "4")
	remove()
	publish(t, a, "t", "4")
	n.Flush()
	if want := []string{"a:3", "a:4", "a:4"}; !slices.Equal(rb.got, want) {
		t.Errorf("b got %v, want %v", rb.got, want)
	}
	if want := []string{"a:2", "a:3", "a:4"}; !slices.Equal(rc.got, want) {
		t.Errorf("c got %v, want %v", rc.got, want)
	}
	if d := b.Stats().Dropped + c.Stats().Dropped; d != 4 {
		t.Errorf("dropped %d, want 4", d)
	}
}

// The drop rate drops about its share, and the same messages under the
// same seed.
func TestDropRateSeeded(t *testing.T) {
	run := func(seed uint64) []string {
		n := manual(t, seed)
		a, b := n.NewNode("a"), n.NewNode("b")
		var rb recorder
		rb.sub(t, b, "t")
		n.SetDropRate(0.25)
		for i := range 2000 {
			publish(t, a, "t", fmt.Sprint(i))
		}
		n.Flush()
		return rb.got
	}
	x, y, z := run(7), run(7), run(8)
	if !slices.Equal(x, y) {
		t.Error("same seed, different drops")
	}
	if slices.Equal(x, z) {
		t.Error("different seeds, same drops")
	}
	// 2000 draws at p = 0.25: 500 +- 19.4 (sd); 5 sd either side.
	if d := 2000 - len(x); d < 403 || d > 597 {
		t.Errorf("dropped %d of 2000 at rate 0.25", d)
	}
}

// Reordering delivers every message exactly once, some out of order.
func TestReorder(t *testing.T) {
	n := manual(t, 3)
	a, b := n.NewNode("a"), n.NewNode("b")
	var rb recorder
	rb.sub(t, b, "t")
	n.SetReorder(0.3, 4)
	var want []string
	for i := range 200 {
		publish(t, a, "t", fmt.Sprint(i))
		want = append(want, fmt.Sprint("a:", i))
	}
	n.Flush()
	if slices.Equal(rb.got, want) {
		t.Fatal("nothing reordered")
	}
	got := slices.Clone(rb.got)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %d messages, not a permutation of the %d sent", len(got), len(want))
	}
}

// Window 1: a held message is released right after the next one, so pairs
// swap; the last one, with nothing after it, comes when the queue drains.
func TestReorderWindowOne(t *testing.T) {
	n := manual(t, 5)
	a, b := n.NewNode("a"), n.NewNode("b")
	var rb recorder
	rb.sub(t, b, "t")
	n.SetReorder(1, 1) // hold every message... which releases nothing until the queue drains
	publish(t, a, "t", "1", "2", "3")
	n.Flush()
	if want := []string{"a:1", "a:2", "a:3"}; !slices.Equal(rb.got, want) {
		t.Errorf("all held: got %v, want them released in order %v", rb.got, want)
	}
}

func TestPartitionCrashAndReady(t *testing.T) {
	n := manual(t, 1)
	a, b, c := n.NewNode("a"), n.NewNode("b"), n.NewNode("c")
	var rb, rc recorder
	rb.sub(t, b, "t")
	rc.sub(t, c, "t")
	ctx := context.Background()
	if err := a.Ready(ctx, "t", 2); err != nil {
		t.Fatal(err)
	}
	n.Partition([]string{"a", "b"}) // c alone
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := a.Ready(short, "t", 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Ready across a partition: %v", err)
	}
	publish(t, a, "t", "p")
	n.Heal()
	publish(t, a, "t", "h")
	n.Flush()
	publish(t, a, "t", "lost")
	n.Crash("b") // loses what is queued for b
	publish(t, a, "t", "x")
	if err := b.Publish(ctx, "t", []byte("y")); !errors.Is(err, ErrUnreachable) {
		t.Errorf("crashed node published: %v", err)
	}
	n.Flush()
	n.Restore("b")
	publish(t, a, "t", "r")
	n.Flush()
	if want := []string{"a:p", "a:h", "a:r"}; !slices.Equal(rb.got, want) {
		t.Errorf("b got %v, want %v", rb.got, want)
	}
	if want := []string{"a:h", "a:lost", "a:x", "a:r"}; !slices.Equal(rc.got, want) {
		t.Errorf("c got %v, want %v", rc.got, want)
	}
}

// Ready waits for a subscription that comes later.
func TestReadyWaits(t *testing.T) {
	n := manual(t, 1)
	a, b := n.NewNode("a"), n.NewNode("b")
	done := make(chan error)
	go func() { done <- a.Ready(context.Background(), "t", 1) }()
	var rb recorder
	rb.sub(t, b, "t")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRequest(t *testing.T) {
	n := manual(t, 1)
	a, b := n.NewNode("a"), n.NewNode("b")
	b.Serve("/echo", func(_ context.Context, from string, req []byte, w io.Writer) error {
		if string(req) == "fail" {
			fmt.Fprint(w, "partial")
			return errors.New("handler failed")
		}
		_, err := fmt.Fprintf(w, "%s said %s", from, req)
		return err
	})
	ctx := context.Background()
	read := func(req string) (string, error) {
		rc, err := a.Request(ctx, "b", "/echo", []byte(req))
		if err != nil {
			return "", err
		}
		defer rc.Close()
		var buf bytes.Buffer
		_, err = io.Copy(&buf, rc)
		return buf.String(), err
	}
	if got, err := read("hi"); err != nil || got != "a said hi" {
		t.Errorf("echo: %q, %v", got, err)
	}
	if got, err := read("fail"); err == nil || got != "partial" {
		t.Errorf("failing handler: %q, %v", got, err)
	}
	if _, err := a.Request(ctx, "b", "/none", nil); !errors.Is(err, ErrNoProtocol) {
		t.Errorf("unknown protocol: %v", err)
	}
	remove := n.DropIf(func(e Envelope) bool { return e.Proto == "/echo" })
	if _, err := read("hi"); !errors.Is(err, ErrUnreachable) {
		t.Errorf("dropped request: %v", err)
	}
	remove()
	n.Crash("b")
	if _, err := read("hi"); !errors.Is(err, ErrUnreachable) {
		t.Errorf("request to a crashed node: %v", err)
	}
	if s := a.Stats(); s.Requests != 2 || s.StreamSent != 6 || s.StreamRecv != uint64(len("a said hi")+len("partial")) {
		t.Errorf("requester stats %+v", s)
	}
}

func TestPayloadLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Manual, cfg.MaxPayload = true, 100
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	a := n.NewNode("a")
	if err := a.Publish(context.Background(), "t", make([]byte, 100)); err != nil {
		t.Errorf("payload at the limit: %v", err)
	}
	if err := a.Publish(context.Background(), "t", make([]byte, 101)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("payload over the limit: %v", err)
	}
	if _, err := New(Config{QueueLength: 0, MaxPayload: 1}); !errors.Is(err, ErrConfig) {
		t.Errorf("QueueLength 0: %v", err)
	}
}

// A full queue drops, like gossipsub's.
func TestQueueOverflow(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Manual, cfg.QueueLength = true, 3
	n, _ := New(cfg)
	defer n.Close()
	a, b := n.NewNode("a"), n.NewNode("b")
	var rb recorder
	rb.sub(t, b, "t")
	publish(t, a, "t", "1", "2", "3", "4", "5")
	n.Flush()
	if want := []string{"a:1", "a:2", "a:3"}; !slices.Equal(rb.got, want) || b.Stats().Dropped != 2 {
		t.Errorf("got %v, dropped %d", rb.got, b.Stats().Dropped)
	}
}

// With delivery goroutines, a delay holds every message at least that long.
func TestDelayAutomatic(t *testing.T) {
	n, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	a, b := n.NewNode("a"), n.NewNode("b")
	got := make(chan time.Time, 1)
	if _, err := b.Subscribe("t", func(string, []byte) (any, error) { return nil, nil }, func(string, []byte, any) { got <- time.Now() }); err != nil {
		t.Fatal(err)
	}
	n.SetDelay(30 * time.Millisecond)
	start := time.Now()
	publish(t, a, "t", "x")
	if d := (<-got).Sub(start); d < 30*time.Millisecond {
		t.Errorf("delivered after %v, delay 30ms", d)
	}
}

// streamSink is a HandleStream handler that records what it reads and how
// the stream ended.
type streamSink struct {
	from chan string
	data chan string
	end  chan error
}

func newSink() *streamSink {
	return &streamSink{from: make(chan string, 8), data: make(chan string, 8), end: make(chan error, 8)}
}

func (s *streamSink) handle(from string, r io.ReadCloser) {
	s.from <- from
	b, err := io.ReadAll(r)
	s.data <- string(b)
	s.end <- err
}

func wait[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatal("timed out")
	}
	panic("unreachable")
}

// Long-lived streams: the handler reads what the opener writes, then EOF
// on Close; a handler that closes its side makes the opener's writes fail;
// crashes, partitions and ResetStreams reset streams across them; opening
// fails where a request would.
func TestStreams(t *testing.T) {
	n, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	a, b, c := n.NewNode("a"), n.NewNode("b"), n.NewNode("c")
	sink := newSink()
	cancel := b.HandleStream("/s/1", sink.handle)
	ctx := context.Background()

	w, err := a.OpenStream(ctx, "b", "/s/1")
	if err != nil {
		t.Fatal(err)
	}
	if from := wait(t, sink.from); from != "a" {
		t.Fatalf("from %q, want a", from)
	}
	for _, p := range []string{"hello ", "world"} {
		if _, err := w.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if got, err := wait(t, sink.data), wait(t, sink.end); got != "hello world" || err != nil {
		t.Fatalf("read %q, %v", got, err)
	}
	if s := a.Stats(); s.StreamsOpened != 1 || s.StreamSent != 11 {
		t.Fatalf("opener stats %+v", s)
	}
	if s := b.Stats(); s.StreamsServed != 1 || s.StreamRecv != 11 {
		t.Fatalf("receiver stats %+v", s)
	}

	// The receiver aborts: the opener's writes fail with ErrReset.
	b.HandleStream("/abort/1", func(from string, r io.ReadCloser) { r.Close() })
	w, err = a.OpenStream(ctx, "b", "/abort/1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrReset) {
		t.Fatalf("write to an aborted stream: %v", err)
	}

	// Crash, partition and ResetStreams reset open streams.
	for _, tc := range []struct {
		name  string
		fault func()
		heal  func()
	}{
		{"crash", func() { n.Crash("b") }, func() { n.Restore("b") }},
		{"partition", func() { n.Partition([]string{"a"}, []string{"b"}) }, n.Heal},
		{"reset", func() {
			if k := n.ResetStreams("b", "a"); k != 1 {
				t.Errorf("reset %d streams, want 1", k)
			}
		}, func() {}},
	} {
		w, err := a.OpenStream(ctx, "b", "/s/1")
		if err != nil {
			t.Fatal(err)
		}
		wait(t, sink.from)
		tc.fault()
		if _, err := w.Write([]byte("x")); !errors.Is(err, ErrReset) {
			t.Errorf("%s: write: %v, want ErrReset", tc.name, err)
		}
		wait(t, sink.data)
		if err := wait(t, sink.end); err == nil {
			t.Errorf("%s: the handler read a clean end", tc.name)
		}
		if tc.name != "reset" {
			if _, err := a.OpenStream(ctx, "b", "/s/1"); !errors.Is(err, ErrUnreachable) {
				t.Errorf("%s: open: %v, want ErrUnreachable", tc.name, err)
			}
		}
		tc.heal()
	}

	remove := n.DropIf(func(e Envelope) bool { return e.Proto == "/s/1" && e.To == "b" })
	if _, err := a.OpenStream(ctx, "b", "/s/1"); !errors.Is(err, ErrUnreachable) {
		t.Errorf("open dropped by a rule: %v", err)
	}
	remove()
	if _, err := c.OpenStream(ctx, "b", "/none/1"); !errors.Is(err, ErrNoProtocol) {
		t.Errorf("open of an unhandled protocol: %v", err)
	}
	cancel()
	if _, err := c.OpenStream(ctx, "b", "/s/1"); !errors.Is(err, ErrNoProtocol) {
		t.Errorf("open after the handler was cancelled: %v", err)
	}
	if _, err := c.OpenStream(ctx, "nobody", "/s/1"); !errors.Is(err, ErrUnreachable) {
		t.Errorf("open to an unknown node: %v", err)
	}
}
