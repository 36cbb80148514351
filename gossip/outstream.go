package gossip

import (
	"sync"
	"sync/atomic"
	"time"
)

// outStream is one outgoing sequenced stream (a worker's gradients to one
// owner, or this owner's params) and its retransmit buffer: the newest
// messages, bounded by count and bytes, in a ring whose slots keep their
// buffers so that steady-state sending allocates nothing.
//
// Appends come from the sending goroutine (serialised by the Exchange's
// send mutex); collect comes from repair handlers. mu guards the ring.
type outStream struct {
	topic    string
	inc      uint64 // incarnation: names this sequence space (nextIncarnation)
	maxMsgs  int
	maxBytes int

	mu    sync.Mutex
	next  uint64 // sequence number of the next message
	ring  []outEntry
	head  int // index of the oldest entry
	n     int // entries held
	bytes int // bytes held
}

type outEntry struct {
	seq uint64
	buf []byte
}

func (x *Exchange) newOutStream(topic string) *outStream {
	return &outStream{topic: topic, inc: nextIncarnation(), maxMsgs: x.cfg.RetransmitMessages, maxBytes: x.cfg.RetransmitBytes}
}

// incarnations hands out stream incarnations: increasing within a process
// and, seeded with the clock, larger than any the same peer used before a
// restart (unless its clock went back by more than the restart took).
var incarnations atomic.Uint64

func nextIncarnation() uint64 {
	incarnations.CompareAndSwap(0, uint64(time.Now().UnixNano()))
	return incarnations.Add(1)
}

// nextSeq is the sequence number the next message will get.
func (s *outStream) nextSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next
}

// add copies msg into the buffer as message s.next, evicting the oldest
// entries to stay within bounds, and returns the copy (valid until it is
// evicted, which only a later add can do).
func (s *outStream) add(msg []byte, c *counters) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ring == nil {
		s.ring = make([]outEntry, s.maxMsgs)
	}
	for s.n > 0 && (s.n == s.maxMsgs || s.bytes+len(msg) > s.maxBytes) {
		s.bytes -= len(s.ring[s.head].buf)
		s.head = (s.head + 1) % s.maxMsgs
		s.n--
		c.evicted.Add(1)
	}
	e := &s.ring[(s.head+s.n)%s.maxMsgs]
	e.seq = s.next
	e.buf = append(e.buf[:0], msg...)
	s.n++
	s.bytes += len(msg)
	s.next++
	return e.buf
}

// collect appends to dst, framed, the held messages with sequence numbers
// from..to, stopping before one that would take the total past budget
// bytes (the first one is always taken) or at the first number not sent
// yet. It returns dst, the number of messages, and appends to gone the
// numbers in from..to that were evicted.
func (s *outStream) collect(dst []byte, from, to uint64, budget int, gone []uint64, frame func(dst, msg []byte) []byte) ([]byte, uint64, []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := s.next - uint64(s.n) // oldest held
	seq := from
	for ; seq <= to && seq < first; seq++ {
		gone = append(gone, seq)
		if seq == to { // to may be MaxUint64-ish; avoid wrapping
			return dst, 0, gone
		}
	}
	var count uint64
	start := len(dst)
	for ; seq <= to && seq < s.next; seq++ {
		e := &s.ring[(s.head+int(seq-first))%s.maxMsgs]
		if count > 0 && len(dst)-start+len(e.buf) > budget {
			break
		}
		dst = frame(dst, e.buf)
		count++
		if seq == to {
			break
		}
	}
	return dst, count, gone
}
