package gossip

import (
	"slices"
	"testing"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// The retransmit buffer keeps the newest messages within both bounds and
// answers a range with what it holds, what is gone and what is not sent yet.
func TestOutStreamBoundsAndCollect(t *testing.T) {
	var c counters
	s := &outStream{maxMsgs: 3, maxBytes: 10}
	for _, m := range []string{"aa", "bbb", "cccc", "dd", "eeeee"} {
		s.add([]byte(m), &c)
	}
	// "dd" evicts "aa" (3 messages held); "eeeee" evicts "bbb" (count)
	// and "cccc" (2 + 4 + 5 = 11 bytes > 10).
	if s.n != 2 || s.bytes != 7 || s.next != 5 || c.evicted.Load() != 3 {
		t.Fatalf("held %d messages, %d bytes, next %d, evicted %d; want 2, 7, 5, 3", s.n, s.bytes, s.next, c.evicted.Load())
	}
	frames := func(msgs ...string) []byte {
		var b []byte
		for _, m := range msgs {
			b = wire.AppendFrame(b, []byte(m))
		}
		return b
	}
	for _, tc := range []struct {
		from, to uint64
		budget   int
		body     []byte
		count    uint64
		gone     []uint64
	}{
		{0, 9, 100, frames("dd", "eeeee"), 2, []uint64{0, 1, 2}}, // 5..9 not sent yet: neither held nor gone
		{3, 4, 3, frames("dd"), 1, nil},                          // "eeeee" would pass the budget
		{3, 4, 1, frames("dd"), 1, nil},                          // the first message always goes
		{4, 4, 100, frames("eeeee"), 1, nil},
		{1, 1, 100, nil, 0, []uint64{1}},
		{5, 5, 100, nil, 0, nil},
	} {
		body, count, gone := s.collect(nil, tc.from, tc.to, tc.budget, nil, wire.AppendFrame)
		if !slices.Equal(body, tc.body) || count != tc.count || !slices.Equal(gone, tc.gone) {
			t.Errorf("collect(%d..%d, %d) = %q, %d, %v; want %q, %d, %v", tc.from, tc.to, tc.budget, body, count, gone, tc.body, tc.count, tc.gone)
		}
	}
}

// Steady-state appends reuse the ring's buffers.
func TestOutStreamAddAllocatesNothing(t *testing.T) {
	var c counters
	s := &outStream{maxMsgs: 4, maxBytes: 1 << 20}
	msg := make([]byte, 4096)
	for range 8 {
		s.add(msg, &c)
	}
	if a := testing.AllocsPerRun(100, func() { s.add(msg, &c) }); a != 0 {
		t.Errorf("add allocates %v per message", a)
	}
}
