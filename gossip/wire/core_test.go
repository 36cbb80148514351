package wire

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
)

// randomCore builds a core message of op with every field set.
func randomCore(r *rand.Rand, op CoreOp, width int) *Core {
	m := &Core{Op: op, Flags: CoreFlags(r.IntN(int(coreFlags) + 1)), Member: r.Uint64() >> 1, Config: r.Uint64N(100),
		Round: r.Uint64N(1 << 40), Through: r.Uint64(), Req: r.Uint64N(1 << 20), Examples: r.Uint64N(10000)}
	for s := range 256 {
		if r.IntN(4) == 0 {
			m.Shards = append(m.Shards, uint32(s))
		}
	}
	id := uint64(0)
	for range r.IntN(5) {
		id += 1 + r.Uint64N(1<<50)
		m.Clocks = append(m.Clocks, MemberClock{Member: id, Clock: r.Uint64()})
	}
	m.Text = "peer-" + string(rune('a'+r.IntN(26)))
	m.Blob = make([]byte, r.IntN(40))
	for i := range m.Blob {
		m.Blob[i] = byte(r.IntN(256))
	}
	k := uint32(0)
	for range r.IntN(300) {
		k += 1 + uint32(r.IntN(5000))
		m.Rows.Idx = append(m.Rows.Idx, k)
		for range width {
			m.Rows.Val = append(m.Rows.Val, float32(r.NormFloat64()))
		}
	}
	m.RowWidth = width
	if m.Rows.Len() == 0 {
		m.RowWidth = 0
	}
	k = 0
	for range r.IntN(300) {
		k += 1 + uint32(r.IntN(5000))
		m.Want = append(m.Want, k)
	}
	for range r.IntN(300) {
		m.Values = append(m.Values, float32(r.NormFloat64()))
	}
	return m
}

// TestCoreRoundTrip encodes every op with every field set and decodes it
// back unchanged (f32: lossless), with each compressor.
func TestCoreRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, comp := range []Compress{None, Zstd, S2} {
		c := NewCodec(F32, comp, DefaultLimits())
		var got Message
		for op := CorePush; op <= coreOpLast; op++ {
			for _, width := range []int{1, 3, 10} {
				m := randomCore(r, op, width)
				b, err := c.AppendCore(nil, Header{Job: "j", Sender: "s", Seq: 7}, m)
				if err != nil {
					t.Fatalf("%s: %v", op, err)
				}
				if err := c.Decode(b, &got); err != nil {
					t.Fatalf("%s decode: %v", op, err)
				}
				if got.Kind != KindCore || got.Sender != "s" || got.Seq != 7 {
					t.Fatalf("header %+v", got.Header)
				}
				want := m.Clone()
				if !coreEqual(&got.Core, want) {
					t.Fatalf("%s width %d (%s): decoded\n%+v\nwant\n%+v", op, width, comp, got.Core, *want)
				}
				if err := got.Core.Check(DefaultLimits()); err != nil {
					t.Fatalf("decoded message fails Check: %v", err)
				}
			}
		}
	}
}

func coreEqual(a, b *Core) bool {
	norm := func(m *Core) Core {
		x := *m.Clone()
		if len(x.Shards) == 0 {
			x.Shards = nil
		}
		if len(x.Clocks) == 0 {
			x.Clocks = nil
		}
		if len(x.Blob) == 0 {
			x.Blob = nil
		}
		if len(x.Want) == 0 {
			x.Want = nil
		}
		if len(x.Values) == 0 {
			x.Values = nil
		}
		if x.Rows.Len() == 0 {
			x.Rows = model.Sparse{}
			x.RowWidth = 0
		}
		return x
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// TestCoreLossyPush: a push's rows may travel as f16; anything else stays
// f32 whatever the codec's format, and a lossy non-push is refused.
func TestCoreLossyPush(t *testing.T) {
	c := NewCodec(F16, None, DefaultLimits())
	m := &Core{Op: CorePush, Rows: model.Sparse{Idx: []uint32{1, 5}, Val: []float32{0.1, -3}}, RowWidth: 1,
		Values: []float32{0.1}}
	b, err := c.AppendCore(nil, Header{Job: "j", Sender: "s"}, m)
	if err != nil {
		t.Fatal(err)
	}
	var got Message
	if err := c.Decode(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Values != F16 || got.Core.Rows.Val[0] == 0.1 || math.Abs(float64(got.Core.Rows.Val[0]-0.1)) > 1e-3 {
		t.Fatalf("push rows %v in %s, want f16-rounded 0.1", got.Core.Rows.Val, got.Values)
	}
	if got.Core.Values[0] != 0.1 {
		t.Fatalf("values %v, want exact 0.1", got.Core.Values)
	}
	m.Op = CoreReply
	b, err = c.AppendCore(nil, Header{Job: "j", Sender: "s"}, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Decode(b, &got); err != nil || got.Values != F32 || got.Core.Rows.Val[0] != 0.1 {
		t.Fatalf("reply decoded %v in %s (%v), want exact f32", got.Core.Rows.Val, got.Values, err)
	}
	// A reply marked lossy is refused.
	b[2] = b[2]&^3 | byte(F16)
	if err := c.Decode(b, &got); !errors.Is(err, ErrMalformed) {
		t.Fatalf("lossy reply decoded: %v", err)
	}
}

// TestCoreHostile: truncations and byte flips of valid messages decode to
// an error or to a message that passes Check, never panic.
func TestCoreHostile(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	c := NewCodec(F32, None, DefaultLimits())
	var got Message
	for i := range 400 {
		m := randomCore(r, CoreOp(1+i%int(coreOpLast)), 1+i%3)
		b, err := c.AppendCore(nil, Header{Job: "j", Sender: "s"}, m)
		if err != nil {
			t.Fatal(err)
		}
		bad := slices.Clone(b)
		switch i % 3 {
		case 0:
			bad = bad[:r.IntN(len(bad))]
		default:
			for range 1 + r.IntN(4) {
				bad[r.IntN(len(bad))] ^= byte(1 + r.IntN(255))
			}
		}
		if err := c.Decode(bad, &got); err == nil && got.Kind == KindCore && got.Parts == 1 {
			if err := got.Core.Check(DefaultLimits()); err != nil {
				t.Fatalf("case %d: decoded a message that fails Check: %v", i, err)
			}
		}
	}
}

// TestCoreParts: a body larger than MaxMessage is cut into parts whose
// chunks reassemble to it.
func TestCoreParts(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxMessage = 4096
	c := NewCodec(F32, None, lim)
	m := &Core{Op: CoreState, Shards: []uint32{3}, RowWidth: 2}
	for k := uint32(3); k < 3+256*3000; k += 256 {
		m.Rows.Append(k, []float32{float32(k), -float32(k)})
	}
	body, flags, err := c.CoreBody(m)
	if err != nil {
		t.Fatal(err)
	}
	body = slices.Clone(body)
	if len(body) < 3*4096 {
		t.Fatalf("body of %d bytes: want several parts", len(body))
	}
	chunk := 4000
	parts := (len(body) + chunk - 1) / chunk
	var re []byte
	for p := range parts {
		part := body[p*chunk : min(len(body), (p+1)*chunk)]
		b, err := c.AppendCorePart(nil, Header{Job: "j", Sender: "s", Part: uint16(p), Parts: uint16(parts)}, flags, part)
		if err != nil {
			t.Fatal(err)
		}
		var got Message
		if err := c.Decode(b, &got); err != nil || got.Parts != uint16(parts) {
			t.Fatalf("part %d: %v", p, err)
		}
		h, ch, err := c.CoreChunk(b)
		if err != nil || h.Part != uint16(p) {
			t.Fatalf("chunk %d: %v", p, err)
		}
		re = append(re, ch...)
	}
	var out Core
	h := Header{Kind: KindCore, Values: F32}
	if err := c.DecodeCoreBody(h, re, len(re)*4, &out); err != nil {
		t.Fatal(err)
	}
	if !coreEqual(&out, m) {
		t.Fatal("reassembled body differs")
	}
}
