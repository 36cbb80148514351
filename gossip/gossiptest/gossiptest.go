package gossiptest

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// Garbage returns n bytes from a seeded generator: not a message (its first
// byte is never the wire version).
func Garbage(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x6761726261676521))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if n > 0 && b[0] == wire.Version {
		b[0] ^= 0x80
	}
	return b
}

// Message encodes a well-formed message of kind KindGrad or KindParamsAck
// (width 1 rows, F32) with a codec that checks no index limit, so rows may
// hold indices past a receiver's model: the out-of-range case. Job and
// sender are whatever the caller says: the wrong-job and forged-sender
// cases. It panics on an encode error (a test bug).
func Message(kind wire.Kind, job, sender string, clock, seq uint64, examples int, rows model.Sparse) []byte {
	c := wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits())
	h := wire.Header{Job: job, Sender: sender, Clock: clock, Seq: seq}
	var msg []byte
	var err error
	switch kind {
	case wire.KindGrad:
		msg, err = c.AppendGrad(nil, h, examples, 1, &rows)
	case wire.KindParamsAck:
		msg, err = c.AppendParamsAck(nil, h, &wire.Ack{Through: clock}, 1, &rows)
	default:
		panic("gossiptest.Message: kind " + kind.String())
	}
	if err != nil {
		panic("gossiptest.Message: " + err.Error())
	}
	return msg
}

// NaN returns a message of kind KindGrad or KindParamsAck from sender for
// job carrying one row, index idx, width 1, whose value is a NaN. Every
// other field is valid, so a receiver rejects it for the value alone
// (wire.ErrNonFinite).
func NaN(kind wire.Kind, job, sender string, clock, seq uint64, idx uint32) []byte {
	b := []byte{wire.Version, byte(kind), byte(wire.F32) | byte(wire.None)<<2}
	b = appendString(b, job)
	b = appendString(b, sender)
	for _, v := range []uint64{clock, 0, 1, seq, 0, 1} { // clock, epoch, incarnation, seq, part, parts
		b = binary.AppendUvarint(b, v)
	}
	switch kind {
	case wire.KindGrad:
		b = binary.AppendUvarint(b, 1) // examples
	case wire.KindParamsAck:
		b = binary.AppendUvarint(b, clock) // ack: through
		b = binary.AppendUvarint(b, 0)     // no per-worker clocks
		b = binary.AppendUvarint(b, 0)     // no training configuration
		b = append(b, 0)                   // ack flags
	default:
		panic("gossiptest.NaN: kind " + kind.String())
	}
	b = binary.AppendUvarint(b, 1) // width
	b = binary.AppendUvarint(b, 1) // rows
	w := bits{buf: b}
	w.write(0, 4)  // no residue map
	w.write(31, 5) // Rice parameter 31: the index is one bit of quotient and 31 low bits
	w.write(1<<(idx>>31), uint(idx>>31)+1)
	w.write(uint64(idx&(1<<31-1)), 31)
	w.write(255, 8) // exponent code table: symbols 255..255,
	w.write(255, 8)
	w.write(1, 4)     // code length 1
	w.write(0, 1)     // the value's exponent: code 0 = 255
	w.write(1<<1, 24) // sign 0, mantissa 1: a NaN
	return w.finish()
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// bits writes LSB-first bit fields, as gossip/wire's sparse section does.
type bits struct {
	buf []byte
	acc uint64
	n   uint
}

func (w *bits) write(v uint64, nb uint) {
	w.acc |= v << w.n
	w.n += nb
	for w.n >= 8 {
		w.buf = append(w.buf, byte(w.acc))
		w.acc >>= 8
		w.n -= 8
	}
}

func (w *bits) finish() []byte {
	if w.n > 0 {
		w.buf = append(w.buf, byte(w.acc))
	}
	return w.buf
}
