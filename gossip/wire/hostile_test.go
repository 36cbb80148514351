package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// validMessages returns one message of every kind x values x compress.
func validMessages(t testing.TB) map[string][]byte {
	r := rand.New(rand.NewPCG(31, 32))
	s := randomSparse(r, 40, 2, 1<<24)
	out := map[string][]byte{}
	for _, v := range allValues {
		for _, cp := range allCompress {
			c := NewCodec(v, cp, DefaultLimits())
			name := "-" + v.String() + "-" + cp.String()
			add := func(kind string, msg []byte, err error) {
				if err != nil {
					t.Fatalf("%s%s: %v", kind, name, err)
				}
				out[kind+name] = msg
			}
			msg, err := c.AppendGrad(nil, testHeader(), 12, 2, &s)
			add("grad", msg, err)
			msg, err = c.AppendParams(nil, testHeader(), 2, &s)
			add("params", msg, err)
			empty := model.Sparse{}
			msg, err = c.AppendGrad(nil, testHeader(), 0, 1, &empty)
			add("grad-empty", msg, err)
			var regular model.Sparse // regular gaps and repeated values compress
			for k := uint32(0); k < 300; k++ {
				regular.Append(k*1000, []float32{0.5})
			}
			msg, err = c.AppendParams(nil, testHeader(), 1, &regular)
			add("params-regular", msg, err)
			ack := Ack{Through: 40, Applied: []WorkerClock{{peerID[:30], 41}, {peerID, 39}}}
			msg, err = c.AppendParamsAck(nil, testHeader(), &ack, 2, &s)
			add("params-ack", msg, err)
			msg, err = c.AppendParamsAck(nil, testHeader(), &Ack{}, 1, &empty)
			add("params-ack-empty", msg, err)
			push := &Core{Op: CorePush, Member: 9, Config: 3, Round: 41, Through: 42, Req: 5, Examples: 12,
				Shards: []uint32{0, 5, 255}, Rows: s, RowWidth: 2, Want: s.Idx}
			msg, err = c.AppendCore(nil, testHeader(), push)
			add("core-push", msg, err)
			if v != F32 {
				continue // the other kinds carry no values
			}
			msg, err = c.AppendBeat(nil, testHeader(), &Beat{Incarnation: 2, Seq: 9, Epoch: 4, SetHash: 77, State: BeatJoin,
				Members: []string{peerID, peerID[:20]}, Addrs: []string{"/ip4/127.0.0.1/tcp/4001"}})
			add("beat", msg, err)
			msg, err = c.AppendBeat(nil, testHeader(), &Beat{State: BeatAlive,
				Members: []string{peerID, peerID, peerID, peerID, peerID, peerID}, Addrs: []string{}})
			add("beat-repeated", msg, err)
			msg, err = c.AppendFetch(nil, testHeader(), &Fetch{Origin: peerID, Topic: "gossiptrain/criteo-ctr/params", From: 10, To: 19})
			add("fetch", msg, err)
			msg, err = c.AppendFetchReply(nil, testHeader(), &FetchReply{Origin: peerID, Topic: "gossiptrain/criteo-ctr/params", From: 10, To: 19, Count: 7, Gone: []uint64{10, 12, 19}})
			add("fetch-reply", msg, err)
			msg, err = c.AppendControl(nil, testHeader(), &Control{Op: OpHandoff, Round: 41, Config: 7, Shards: []uint32{0, 5, 255}})
			add("control", msg, err)
			msg, err = c.AppendControlReply(nil, testHeader(), &ControlReply{Op: OpStatus, Status: StatusOK, Round: 41, Coordinator: peerID, Config: testAck.Config, Frames: 3})
			add("control-reply", msg, err)
			msg, err = c.AppendCore(nil, testHeader(), &Core{Op: CoreReply, Flags: FlagFinal, Req: 5, Round: 41, Through: 42, Values: s.Val})
			add("core-reply", msg, err)
			msg, err = c.AppendCore(nil, testHeader(), &Core{Op: CoreState, Shards: []uint32{7}, Round: 40, Rows: s, RowWidth: 2,
				Clocks: []MemberClock{{Member: 3, Clock: 40}, {Member: 1 << 62, Clock: 2}}})
			add("core-state", msg, err)
			msg, err = c.AppendCore(nil, testHeader(), &Core{Op: CoreJoinReply, Member: 77, Text: peerID, Blob: []byte{1, 2, 3}})
			add("core-join-reply", msg, err)
		}
	}
	return out
}

// Every proper prefix of every valid message is rejected as malformed.
func TestTruncatedAtEveryByte(t *testing.T) {
	c := NewCodec(F32, None, DefaultLimits())
	var m Message
	for name, msg := range validMessages(t) {
		if err := c.Decode(msg, &m); err != nil {
			t.Fatalf("%s: valid message rejected: %v", name, err)
		}
		for n := 0; n < len(msg); n++ {
			err := c.Decode(msg[:n], &m)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s cut to %d of %d bytes: error %v, want ErrMalformed", name, n, len(msg), err)
			}
		}
		// And one byte too many.
		if err := c.Decode(append(msg[:len(msg):len(msg)], 0), &m); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s plus a trailing byte: %v", name, err)
		}
	}
}

// header builds a message header by hand.
func header(kind Kind, flags byte) []byte {
	b := []byte{Version, byte(kind), flags}
	b = appendString(b, "job")
	b = appendString(b, "peer")
	for _, v := range []uint64{1, 2, 7, 3, 0, 1} { // clock, epoch, incarnation, seq, part, parts
		b = binary.AppendUvarint(b, v)
	}
	return b
}

func uv(b []byte, vs ...uint64) []byte {
	for _, v := range vs {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

// sparseMsg builds a Grad message of width 1 with indices given as gaps
// (b = 0, Rice parameter 0 unless k says otherwise) and a value block
// written by vals.
func sparseMsg(values Values, rows uint64, gaps []uint64, k uint, vals func(w *bitWriter)) []byte {
	b := uv(header(KindGrad, byte(values)), 1, 1, rows) // examples, width, rows
	var w bitWriter
	w.reset(b)
	w.write(0, 4)
	w.write(uint64(k), 5)
	for _, g := range gaps {
		w.rice(g, k)
	}
	vals(&w)
	return w.finish()
}

// oneSymbolTable writes a code table with the single symbol s.
func oneSymbolTable(w *bitWriter, s uint64) {
	w.write(s, 8)
	w.write(s, 8)
	w.write(1, 4)
}

// le32 is v as Raw sends it.
func le32(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }

func TestHostileMessages(t *testing.T) {
	lim := DefaultLimits()
	lim.Features = 1000
	big := func(n int) []byte { return make([]byte, n) }
	f32val := func(exp, mant uint64) func(w *bitWriter) {
		return func(w *bitWriter) {
			oneSymbolTable(w, exp)
			w.write(0, 1) // the code
			w.write(mant<<1, 24)
		}
	}
	cases := []struct {
		name string
		msg  []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"wrong version", append([]byte{Version + 1}, header(KindGrad, 0)[1:]...), ErrVersion},
		{"version 0", append([]byte{0}, header(KindGrad, 0)[1:]...), ErrVersion},
		{"kind 0", header(KindInvalid, 0), ErrKind},
		{"reserved kind", header(KindReservedFirst, 0), ErrKind},
		{"kind 200", header(200, 0), ErrKind},
		{"reserved flag bits", header(KindGrad, 0x10), ErrMalformed},
		{"raw values on a beat", header(KindBeat, byte(Raw)), ErrMalformed},
		{"compress 3", header(KindGrad, 3<<2), ErrMalformed},
		{"values on a beat", header(KindBeat, byte(F16)), ErrMalformed},
		{"message over MaxMessage", big(lim.MaxMessage + 1), ErrTooLarge},
		{"job length 2^40", uv([]byte{Version, byte(KindGrad), 0}, 1<<40), ErrTooLarge},
		{"job longer than the rest", append(uv([]byte{Version, byte(KindGrad), 0}, 200), "abc"...), ErrMalformed},
		{"parts 0", uv(appendString(appendString([]byte{Version, byte(KindGrad), 0}, "j"), "p"), 1, 2, 7, 3, 0, 0), ErrMalformed},
		{"part 5 of 5", uv(appendString(appendString([]byte{Version, byte(KindGrad), 0}, "j"), "p"), 1, 2, 7, 3, 5, 5), ErrMalformed},
		{"parts 70000", uv(appendString(appendString([]byte{Version, byte(KindGrad), 0}, "j"), "p"), 1, 2, 7, 3, 0, 70000), ErrMalformed},
		{"examples 2^60", uv(header(KindGrad, 0), 1<<60, 1, 0), ErrRange},
		{"width 0", uv(header(KindGrad, 0), 1, 0, 0), ErrMalformed},
		{"width 2^20", uv(header(KindGrad, 0), 1, 1<<20, 0), ErrTooLarge},
		{"rows 2^30", uv(header(KindGrad, 0), 1, 1, 1<<30), ErrTooLarge},
		{"rows x width over MaxValues", uv(header(KindParams, 0), 1000, 2000), ErrTooLarge},
		{"rows beyond the input", append(uv(header(KindGrad, 0), 1, 1, 100000), 0, 0, 0, 0), ErrMalformed},
		{"residue bits 13", append(uv(header(KindGrad, 0), 1, 1, 1), 13, 0, 0, 0), ErrMalformed},
		{"empty residue map", append(uv(header(KindGrad, 0), 1, 1, 1), 0x01, 0x00, 0, 0, 0), ErrMalformed},
		{"index past Features", sparseMsg(F32, 1, []uint64{1000}, 10, f32val(127, 0)), ErrRange},
		{"index past 2^32", sparseMsg(F32, 2, []uint64{1<<32 - 1, 5}, 31, f32val(127, 0)), ErrRange},
		{"f32 NaN", sparseMsg(F32, 1, []uint64{3}, 0, f32val(255, 1)), ErrNonFinite},
		{"f32 Inf", sparseMsg(F32, 1, []uint64{3}, 0, f32val(255, 0)), ErrNonFinite},
		{"f16 Inf", sparseMsg(F16, 1, []uint64{3}, 0, func(w *bitWriter) { oneSymbolTable(w, 31); w.write(0, 1); w.write(0, 11) }), ErrNonFinite},
		{"f16 table past 31", sparseMsg(F16, 1, []uint64{3}, 0, func(w *bitWriter) { oneSymbolTable(w, 32); w.write(0, 1); w.write(0, 11) }), ErrMalformed},
		{"i8 NaN scale", sparseMsg(I8, 1, []uint64{3}, 0, func(w *bitWriter) {
			w.write(uint64(math.Float32bits(float32(math.NaN()))), 32)
			oneSymbolTable(w, 0)
			w.write(0, 1)
		}), ErrNonFinite},
		{"i8 scale overflowing at 127", sparseMsg(I8, 1, []uint64{3}, 0, func(w *bitWriter) {
			w.write(uint64(math.Float32bits(math.MaxFloat32)), 32)
			oneSymbolTable(w, 0)
			w.write(0, 1)
		}), ErrNonFinite},
		{"i8 negative scale", sparseMsg(I8, 1, []uint64{3}, 0, func(w *bitWriter) {
			w.write(uint64(math.Float32bits(-1)), 32)
			oneSymbolTable(w, 0)
			w.write(0, 1)
		}), ErrMalformed},
		{"i8 class 8", sparseMsg(I8, 1, []uint64{3}, 0, func(w *bitWriter) {
			w.write(uint64(math.Float32bits(1)), 32)
			oneSymbolTable(w, 8)
			w.write(0, 1)
		}), ErrMalformed},
		{"unused code pattern", sparseMsg(F32, 1, []uint64{3}, 0, func(w *bitWriter) { oneSymbolTable(w, 127); w.write(1, 1); w.write(0, 24) }), ErrMalformed},
		{"nonzero padding", append(sparseMsg(F32, 1, []uint64{3}, 0, f32val(127, 0))[:0:0], sparseMsg(F32, 1, []uint64{3}, 0, func(w *bitWriter) { f32val(127, 0)(w); w.write(1, 1) })...), ErrMalformed},
		{"raw index past Features", append(uv(header(KindGrad, byte(Raw)), 1, 1, 1, 1000), le32(1)...), ErrRange},
		{"raw index past 2^32", append(uv(header(KindGrad, byte(Raw)), 1, 1, 2, 1<<32-1, 5), append(le32(1), le32(1)...)...), ErrRange},
		{"raw gap overflowing", append(uv(header(KindGrad, byte(Raw)), 1, 1, 2, 5, math.MaxUint64), append(le32(1), le32(1)...)...), ErrRange},
		{"raw NaN", append(uv(header(KindGrad, byte(Raw)), 1, 1, 1, 3), le32(float32(math.NaN()))...), ErrNonFinite},
		{"raw Inf", append(uv(header(KindParams, byte(Raw)), 1, 1, 3), le32(float32(math.Inf(-1)))...), ErrNonFinite},
		{"raw rows beyond the input", append(uv(header(KindGrad, byte(Raw)), 1, 1, 2, 3, 0), le32(1)...), ErrMalformed},
		{"raw value truncated", append(uv(header(KindGrad, byte(Raw)), 1, 1, 1, 3), 0, 0, 0x80), ErrMalformed},
		{"raw trailing byte", append(uv(header(KindGrad, byte(Raw)), 1, 1, 1, 3), append(le32(1), 0)...), ErrMalformed},
		{"raw gap truncated", append(uv(header(KindGrad, byte(Raw)), 1, 1, 1), 0x80, 0x80, 0x80, 0x80, 0x80), ErrMalformed},
		{"members 2^30", append(uv(header(KindBeat, 0), 1, 1, 1), append(big(9), uv(nil, 1<<30)...)...), ErrTooLarge},
		{"members beyond the input", append(uv(header(KindBeat, 0), 1, 1, 1), append(big(9), uv(nil, 4000, 1)...)...), ErrMalformed},
		{"beat state 3", append(uv(header(KindBeat, 0), 1, 1, 1), append(big(8), 3, 0, 0)...), ErrMalformed},
		{"fetch span 2^40", uv(appendString(appendString(header(KindFetch, 0), "o"), "t"), 5, 1<<40), ErrTooLarge},
		{"fetch overflow", uv(appendString(appendString(header(KindFetch, 0), "o"), "t"), math.MaxUint64, 3), ErrRange},
		{"reply gone past To", uv(appendString(appendString(header(KindFetchReply, 0), "o"), "t"), 5, 4, 0, 1, 0, 2, 4, 1), ErrRange},
		{"reply count past span", uv(appendString(appendString(header(KindFetchReply, 0), "o"), "t"), 5, 4, 6, 1, 0, 0), ErrRange},
		{"ack count 2^30", uv(header(KindParamsAck, 0), 5, 1<<30), ErrTooLarge},
		{"ack count beyond the input", uv(header(KindParamsAck, 0), 5, 100, 0), ErrMalformed},
		{"ack workers not ascending", uv(appendString(uv(appendString(uv(header(KindParamsAck, 0), 5, 2), "b"), 1), "a"), 1, 1, 0), ErrMalformed},
		{"ack workers repeated", uv(appendString(uv(appendString(uv(header(KindParamsAck, 0), 5, 2), "a"), 1), "a"), 1, 1, 0), ErrMalformed},
		{"ack worker over MaxString", uv(uv(header(KindParamsAck, 0), 5, 1), 300), ErrTooLarge},
		{"ack truncated", uv(header(KindParamsAck, 0), 5), ErrMalformed},
		{"fetch topic over MaxString", uv(appendString(header(KindFetch, 0), "o"), 300), ErrTooLarge},
		{"zstd claims over MaxMessage", uv(header(KindGrad, byte(Zstd)<<2), uint64(lim.MaxMessage)+1, 0), ErrTooLarge},
		{"zstd garbage", append(uv(header(KindGrad, byte(Zstd)<<2), 10), 1, 2, 3, 4, 5), ErrMalformed},
		{"s2 claims over MaxMessage", append(uv(header(KindGrad, byte(S2)<<2), uint64(lim.MaxMessage)+1), 0, 0), ErrTooLarge},
		{"s2 garbage", append(uv(header(KindGrad, byte(S2)<<2), 10), 0xff, 0xff, 0xff), ErrMalformed},
	}
	// A "nonzero padding" message must differ from the valid one only by
	// the padding bit: check the base is valid.
	base := sparseMsg(F32, 1, []uint64{3}, 0, f32val(127, 0))
	var m Message
	if err := NewCodec(F32, None, lim).Decode(base, &m); err != nil || m.Sparse.Idx[0] != 3 || m.Sparse.Val[0] != 1 {
		t.Fatalf("hand-built message: %v %+v", err, m.Sparse)
	}
	rawBase := append(uv(header(KindGrad, byte(Raw)), 1, 1, 2, 3, 995), append(le32(1), le32(-2)...)...)
	if err := NewCodec(F32, None, lim).Decode(rawBase, &m); err != nil || !slices.Equal(m.Sparse.Idx, []uint32{3, 999}) || !slices.Equal(m.Sparse.Val, []float32{1, -2}) {
		t.Fatalf("hand-built raw message: %v %+v", err, m.Sparse)
	}
	for _, tc := range cases {
		var m Message
		var err error
		// The least of three cold decodes: MemStats counts every
		// goroutine's allocations, and background noise only adds.
		alloc := uint64(math.MaxUint64)
		for range 3 {
			c := NewCodec(F32, None, lim)
			m = Message{}
			alloc = min(alloc, allocated(func() { err = c.Decode(tc.msg, &m) }))
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
			continue
		}
		// No hostile message costs more than a small multiple of its size,
		// or the configured limit where a decompressor is involved.
		bound := 64*len(tc.msg) + 4<<10
		if m.Compress != None {
			bound += 4 * lim.MaxMessage
		}
		if alloc > uint64(bound) {
			t.Errorf("%s: decoding %d bytes allocated %d bytes", tc.name, len(tc.msg), alloc)
		}
	}
}

// allocated returns the bytes allocated while f runs.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// A zstd bomb: 8 MiB of zeros in a few hundred bytes. Whatever length it
// declares, the decoder stops at MaxMessage (or the declared length) and
// allocates no more than that.
func TestZstdBomb(t *testing.T) {
	zeros := make([]byte, 8<<20)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	withSize := enc.EncodeAll(zeros, nil) // frame declares its content size
	var stream bytes.Buffer               // streamed frame: size unknown to the decoder
	sw, _ := zstd.NewWriter(&stream, zstd.WithEncoderConcurrency(1))
	sw.Write(zeros)
	sw.Close()
	var small bytes.Buffer // streamed with a window the decoder accepts: it must count blocks
	sw, _ = zstd.NewWriter(&small, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<16))
	sw.Write(zeros)
	sw.Close()
	lim := DefaultLimits()
	c := NewCodec(F32, Zstd, lim)
	var m Message
	// Warm the decoder up with a valid message: its own tables are not the bomb's doing.
	warm, err := c.AppendBeat(nil, testHeader(), &Beat{Members: []string{peerID, peerID, peerID, peerID}})
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := c.AppendParams(nil, testHeader(), 1, &model.Sparse{Idx: []uint32{1, 2, 3}, Val: []float32{1, 1, 1}})
	_ = c.Decode(msg, &m)
	_ = c.Decode(warm, &m)
	for _, tc := range []struct {
		name  string
		frame []byte
		claim uint64
	}{
		{"content size, small claim", withSize, 1000},
		{"content size, claim at limit", withSize, uint64(lim.MaxMessage)},
		{"streamed, small claim", stream.Bytes(), 1000},
		{"streamed, claim at limit", stream.Bytes(), uint64(lim.MaxMessage)},
		{"streamed small window, small claim", small.Bytes(), 1000},
		{"streamed small window, claim at limit", small.Bytes(), uint64(lim.MaxMessage)},
	} {
		bomb := append(uv(header(KindGrad, byte(Zstd)<<2), tc.claim), tc.frame...)
		var err error
		alloc := allocated(func() { err = c.Decode(bomb, &m) })
		if !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s (%d bytes): error %v, want ErrTooLarge", tc.name, len(bomb), err)
		}
		if alloc > 3*uint64(lim.MaxMessage) {
			t.Errorf("%s: allocated %d bytes", tc.name, alloc)
		}
	}
	// s2 cannot be a bomb past its declared length: it declares it first.
	s2bomb := append(header(KindGrad, byte(S2)<<2), s2.Encode(nil, zeros)...)
	if err := c.Decode(s2bomb, &m); !errors.Is(err, ErrTooLarge) {
		t.Errorf("s2 bomb: %v", err)
	}
}

// Decoding is bounded by the input: a message of all one-bits (the longest
// codes) or all zero-bits (the longest unary runs) is rejected quickly.
func TestDecodeBoundedWork(t *testing.T) {
	c := NewCodec(F32, None, DefaultLimits())
	var m Message
	for _, fill := range []byte{0x00, 0xff} {
		body := bytes.Repeat([]byte{fill}, 1<<19)
		for _, v := range allValues {
			msg := append(uv(header(KindGrad, byte(v)), 1, 1, 1000), body...)
			if err := c.Decode(msg, &m); err == nil {
				t.Errorf("fill %#x %s: accepted", fill, v)
			}
		}
	}
}

// Any error Decode returns wraps exactly one sentinel.
func sentinelOf(err error) (error, int) {
	var found error
	n := 0
	for _, s := range []error{ErrMalformed, ErrTooLarge, ErrVersion, ErrKind, ErrNonFinite, ErrRange} {
		if errors.Is(err, s) {
			found = s
			n++
		}
	}
	return found, n
}

func TestDecodeAllocatesNothingInSteadyState(t *testing.T) {
	msgs := validMessages(t)
	c := NewCodec(F32, None, DefaultLimits())
	var m Message
	for name, msg := range msgs {
		if err := c.Decode(msg, &m); err != nil { // grow buffers, intern strings
			t.Fatal(err)
		}
		if raceEnabled && m.Compress == Zstd {
			continue // the race detector makes sync.Pool (inside zstd) drop items at random
		}
		if a := testing.AllocsPerRun(20, func() { _ = c.Decode(msg, &m) }); a != 0 {
			t.Errorf("%s: %v allocations per decode", name, a)
		}
	}
}

func TestEncodeAllocatesNothingInSteadyState(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	s := randomSparse(r, 500, 1, 1<<24)
	layout, _ := model.NewLayout(1<<24, 1, 256)
	fb := NewFeedback(layout)
	for _, v := range allValues {
		for _, cp := range allCompress {
			c := NewCodec(v, cp, DefaultLimits())
			c.SetFeedback(fb)
			buf, err := c.AppendGrad(nil, testHeader(), 1, 1, &s)
			if err != nil {
				t.Fatal(err)
			}
			if a := testing.AllocsPerRun(20, func() { buf, _ = c.AppendGrad(buf[:0], testHeader(), 1, 1, &s) }); a != 0 {
				t.Errorf("%s/%s: %v allocations per encode", v, cp, a)
			}
			emit := func([]byte) error { return nil }
			if a := testing.AllocsPerRun(20, func() { _, _ = c.SplitGrad(testHeader(), 1, 1, &s, emit) }); a != 0 {
				t.Errorf("%s/%s: %v allocations per split", v, cp, a)
			}
		}
	}
}
