package wire

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
)

var (
	allValues   = []Values{F32, F16, I8, Raw}
	allCompress = []Compress{None, Zstd, S2}
)

// testAck is an owner's progress with three workers (peer IDs sort
// bytewise).
var testAck = Ack{Through: 40, Applied: []WorkerClock{
	{Worker: "12D3KooWA", Clock: 41},
	{Worker: "12D3KooWB", Clock: 40},
	{Worker: peerID, Clock: 1 << 35},
}, Force: true, Config: TrainConfig{ID: 7, Start: 41, Checkpoint: 40, Members: []string{"12D3KooWA", "12D3KooWB", peerID}, Crashed: []string{"12D3KooWC"}}}

// A configuration with unsorted members is refused on encode.
func TestAckConfigMustBeSorted(t *testing.T) {
	c := NewCodec(F32, None, DefaultLimits())
	a := testAck
	a.Config.Members = []string{"b", "a"}
	var s model.Sparse
	if _, err := c.AppendParamsAck(nil, testHeader(), &a, 1, &s); !errors.Is(err, ErrMalformed) {
		t.Fatalf("encode with unsorted config members: %v, want ErrMalformed", err)
	}
}

func testHeader() Header {
	return Header{Job: "criteo-ctr", Sender: peerID, Clock: 41, Epoch: 3, Seq: 1 << 40}
}

// randomSparse returns rows rows of the given width over [0, dim) with
// values of mixed magnitude, including zeros, a negative zero, subnormals
// and large values, so the lossless path is exercised at its edges.
func randomSparse(r *rand.Rand, rows, width int, dim uint32) model.Sparse {
	set := map[uint32]bool{}
	for len(set) < rows {
		set[r.Uint32N(dim)] = true
	}
	var s model.Sparse
	for _, k := range slices.Sorted(func(yield func(uint32) bool) {
		for k := range set {
			if !yield(k) {
				return
			}
		}
	}) {
		row := make([]float32, width)
		for j := range row {
			switch r.IntN(10) {
			case 0:
				row[j] = 0
			case 1:
				row[j] = float32(math.Copysign(0, -1))
			case 2:
				row[j] = math.Float32frombits(r.Uint32N(1 << 23)) // subnormal
			case 3:
				row[j] = float32(r.NormFloat64() * 3e4)
			default:
				row[j] = float32(r.NormFloat64() * 0.3)
			}
		}
		s.Append(k, row)
	}
	return s
}

// checkValues compares decoded values with the originals as the format
// promises: bit-exact for F32 and Raw, the nearest half for F16 (saturated at
// ±65504), and within half a quantum for I8.
func checkValues(t *testing.T, v Values, orig, got []float32) {
	t.Helper()
	if len(orig) != len(got) {
		t.Fatalf("%d values decoded, want %d", len(got), len(orig))
	}
	var m float32
	for _, x := range orig {
		m = max(m, float32(math.Abs(float64(x))))
	}
	scale := m / 127
	for i, x := range orig {
		switch v {
		case F32, Raw:
			if math.Float32bits(got[i]) != math.Float32bits(x) {
				t.Fatalf("value %d = %v, want %v bit for bit", i, got[i], x)
			}
		case F16:
			want := fromHalf(toHalf(min(max(x, -halfMax), halfMax)))
			if math.Float32bits(got[i]) != math.Float32bits(want) && !(got[i] == 0 && want == 0) {
				t.Fatalf("value %d = %v, want %v (half of %v)", i, got[i], want, x)
			}
		case I8:
			if d := math.Abs(float64(got[i] - x)); d > float64(scale)*0.5001 {
				t.Fatalf("value %d = %v, want %v within %v", i, got[i], x, scale/2)
			}
		}
	}
}

func TestRoundTripSparseKinds(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	shapes := []struct {
		rows, width int
		dim         uint32
	}{
		{0, 1, 100},             // empty: a worker with nothing for this owner still reports its clock
		{1, 1, 1},               // the single feature 0
		{5, 3, 8},               // dense tiny
		{300, 1, 1 << 24},       // sparse logistic regression
		{200, 10, 785},          // softmax over MNIST-sized rows
		{64, 1, math.MaxUint32}, // indices up to 2^32-2
	}
	for _, v := range allValues {
		for _, cp := range allCompress {
			c := NewCodec(v, cp, DefaultLimits())
			var m Message
			for _, sh := range shapes {
				s := randomSparse(r, sh.rows, sh.width, sh.dim)
				if sh.dim == math.MaxUint32 && sh.rows > 0 {
					s.Idx[len(s.Idx)-1] = math.MaxUint32 // the largest index
				}
				for _, kind := range []Kind{KindGrad, KindParams, KindParamsAck} {
					h := testHeader()
					var msg []byte
					var err error
					switch kind {
					case KindGrad:
						msg, err = c.AppendGrad([]byte("prefix"), h, 7*sh.rows, sh.width, &s)
					case KindParams:
						msg, err = c.AppendParams([]byte("prefix"), h, sh.width, &s)
					default:
						msg, err = c.AppendParamsAck([]byte("prefix"), h, &testAck, sh.width, &s)
					}
					if err != nil {
						t.Fatalf("%s/%s %s %+v: %v", v, cp, kind, sh, err)
					}
					if string(msg[:6]) != "prefix" {
						t.Fatalf("dst prefix overwritten")
					}
					if err := c.Decode(msg[6:], &m); err != nil {
						t.Fatalf("%s/%s %s %+v: decode: %v", v, cp, kind, sh, err)
					}
					want := h
					want.Version, want.Kind, want.Values, want.Part, want.Parts = Version, kind, v, 0, 1
					want.Compress = m.Compress // None when compressing did not help
					if m.Header != want {
						t.Fatalf("header %+v, want %+v", m.Header, want)
					}
					if m.Width != sh.width || !slices.Equal(m.Sparse.Idx, s.Idx) {
						t.Fatalf("%s/%s %s %+v: width %d, indices differ", v, cp, kind, sh, m.Width)
					}
					if kind == KindGrad && m.Examples != 7*sh.rows {
						t.Fatalf("examples %d, want %d", m.Examples, 7*sh.rows)
					}
					if kind == KindParamsAck && !reflect.DeepEqual(m.Ack, testAck) {
						t.Fatalf("ack %+v, want %+v", m.Ack, testAck)
					}
					checkValues(t, v, s.Val, m.Sparse.Val)
				}
			}
		}
	}
}

// A compressible body travels compressed, and the flags say so.
func TestCompressionUsedWhenItHelps(t *testing.T) {
	var s model.Sparse
	for k := uint32(0); k < 4000; k++ {
		s.Append(k*1000, []float32{1}) // regular gaps, one value: highly compressible bits
	}
	for _, cp := range []Compress{Zstd, S2} {
		plain := NewCodec(F32, None, DefaultLimits())
		c := NewCodec(F32, cp, DefaultLimits())
		a, err := plain.AppendParams(nil, testHeader(), 1, &s)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.AppendParams(nil, testHeader(), 1, &s)
		if err != nil {
			t.Fatal(err)
		}
		var m Message
		if err := plain.Decode(b, &m); err != nil { // any codec decodes any message
			t.Fatal(err)
		}
		if m.Compress != cp || len(b) >= len(a) {
			t.Errorf("%s: flags say %s, %d bytes against %d uncompressed", cp, m.Compress, len(b), len(a))
		}
		if !slices.Equal(m.Sparse.Idx, s.Idx) || !slices.Equal(m.Sparse.Val, s.Val) {
			t.Errorf("%s: rows differ", cp)
		}
	}
}

func TestRoundTripOtherKinds(t *testing.T) {
	beat := Beat{Incarnation: 3, Seq: 1 << 33, Epoch: 12, SetHash: 0xdeadbeefcafef00d, State: BeatLeave,
		Members: []string{peerID, "12D3KooWB", ""}, Addrs: []string{"/ip4/127.0.0.1/tcp/4001", "/ip6/::1/udp/4001/quic-v1"}}
	emptyBeat := Beat{State: BeatJoin, Members: []string{}, Addrs: []string{}}
	fetch := Fetch{Origin: peerID, Topic: "gossiptrain/criteo-ctr/grad/" + peerID, From: 100, To: 163}
	reply := FetchReply{Origin: peerID, Topic: fetch.Topic, From: 100, To: 163, Count: 60, Gone: []uint64{100, 101, 150, 163}}
	for _, cp := range allCompress {
		c := NewCodec(I8, cp, DefaultLimits()) // the value format does not touch these kinds
		var m Message
		for _, b := range []Beat{beat, emptyBeat} {
			msg, err := c.AppendBeat(nil, testHeader(), &b)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Decode(msg, &m); err != nil {
				t.Fatalf("%s: %v", cp, err)
			}
			if m.Kind != KindBeat || m.Values != F32 || !reflect.DeepEqual(m.Beat, b) {
				t.Fatalf("%s: beat %+v, want %+v", cp, m.Beat, b)
			}
		}
		msg, err := c.AppendFetch(nil, testHeader(), &fetch)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Decode(msg, &m); err != nil || m.Kind != KindFetch || m.Fetch != fetch {
			t.Fatalf("%s: fetch %+v, %v", cp, m.Fetch, err)
		}
		msg, err = c.AppendFetchReply(nil, testHeader(), &reply)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Decode(msg, &m); err != nil || m.Kind != KindFetchReply || !reflect.DeepEqual(m.Reply, reply) {
			t.Fatalf("%s: reply %+v, %v", cp, m.Reply, err)
		}
	}
}

func TestEncodeRejects(t *testing.T) {
	lim := DefaultLimits()
	lim.Features = 1000
	c := NewCodec(F32, None, lim)
	h := testHeader()
	sp := func(idx []uint32, val []float32) *model.Sparse { return &model.Sparse{Idx: idx, Val: val} }
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	for _, tc := range []struct {
		name string
		do   func() error
		want error
	}{
		{"descending", func() error { _, err := c.AppendGrad(nil, h, 1, 1, sp([]uint32{5, 3}, []float32{1, 2})); return err }, ErrMalformed},
		{"duplicate", func() error { _, err := c.AppendGrad(nil, h, 1, 1, sp([]uint32{5, 5}, []float32{1, 2})); return err }, ErrMalformed},
		{"value count", func() error { _, err := c.AppendGrad(nil, h, 1, 2, sp([]uint32{5}, []float32{1})); return err }, ErrMalformed},
		{"NaN", func() error { _, err := c.AppendGrad(nil, h, 1, 1, sp([]uint32{5}, []float32{nan})); return err }, ErrNonFinite},
		{"Inf f16", func() error {
			_, err := NewCodec(F16, None, lim).AppendParams(nil, h, 1, sp([]uint32{5}, []float32{inf}))
			return err
		}, ErrNonFinite},
		{"-Inf i8", func() error {
			_, err := NewCodec(I8, None, lim).AppendParams(nil, h, 1, sp([]uint32{5}, []float32{-inf}))
			return err
		}, ErrNonFinite},
		{"index past features", func() error { _, err := c.AppendGrad(nil, h, 1, 1, sp([]uint32{1000}, []float32{1})); return err }, ErrRange},
		{"width 0", func() error { _, err := c.AppendGrad(nil, h, 1, 0, sp(nil, nil)); return err }, ErrRange},
		{"width over limit", func() error { _, err := c.AppendGrad(nil, h, 1, 1025, sp(nil, nil)); return err }, ErrTooLarge},
		{"negative examples", func() error { _, err := c.AppendGrad(nil, h, -1, 1, sp(nil, nil)); return err }, ErrRange},
		{"long job", func() error {
			h := h
			h.Job = string(make([]byte, 257))
			_, err := c.AppendGrad(nil, h, 1, 1, sp(nil, nil))
			return err
		}, ErrTooLarge},
		{"part past parts", func() error {
			h := h
			h.Part, h.Parts = 2, 2
			_, err := c.AppendGrad(nil, h, 1, 1, sp(nil, nil))
			return err
		}, ErrRange},
		{"fetch backwards", func() error { _, err := c.AppendFetch(nil, h, &Fetch{From: 5, To: 4}); return err }, ErrRange},
		{"fetch too long", func() error { _, err := c.AppendFetch(nil, h, &Fetch{From: 0, To: 4096}); return err }, ErrTooLarge},
		{"gone out of range", func() error {
			_, err := c.AppendFetchReply(nil, h, &FetchReply{From: 5, To: 9, Gone: []uint64{10}})
			return err
		}, ErrRange},
		{"ack not ascending", func() error {
			a := Ack{Applied: []WorkerClock{{"b", 1}, {"a", 1}}}
			_, err := c.AppendParamsAck(nil, h, &a, 1, sp(nil, nil))
			return err
		}, ErrMalformed},
		{"ack repeated worker", func() error {
			a := Ack{Applied: []WorkerClock{{"a", 1}, {"a", 2}}}
			_, err := c.AppendParamsAck(nil, h, &a, 1, sp(nil, nil))
			return err
		}, ErrMalformed},
		{"ack too long", func() error {
			a := Ack{Applied: make([]WorkerClock, 4097)}
			_, err := c.AppendParamsAck(nil, h, &a, 1, sp(nil, nil))
			return err
		}, ErrTooLarge},
		{"ack worker too long", func() error {
			a := Ack{Applied: []WorkerClock{{string(make([]byte, 257)), 1}}}
			_, err := c.AppendParamsAck(nil, h, &a, 1, sp(nil, nil))
			return err
		}, ErrTooLarge},
		{"fetch topic too long", func() error {
			_, err := c.AppendFetch(nil, h, &Fetch{Topic: string(make([]byte, 257))})
			return err
		}, ErrTooLarge},
		{"beat state", func() error { _, err := c.AppendBeat(nil, h, &Beat{State: 3}); return err }, ErrRange},
		{"too many members", func() error { _, err := c.AppendBeat(nil, h, &Beat{Members: make([]string, 4097)}); return err }, ErrTooLarge},
	} {
		err := tc.do()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
	}
}

// The wire carries the value format and compressor: a receiver configured
// with anything decodes every combination.
func TestDecodeNeedsNoConfiguration(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	s := randomSparse(r, 50, 2, 1<<20)
	rx := NewCodec(F32, None, DefaultLimits())
	var m Message
	for _, v := range allValues {
		for _, cp := range allCompress {
			msg, err := NewCodec(v, cp, DefaultLimits()).AppendGrad(nil, testHeader(), 1, 2, &s)
			if err != nil {
				t.Fatal(err)
			}
			if err := rx.Decode(msg, &m); err != nil {
				t.Fatalf("%s/%s: %v", v, cp, err)
			}
			if m.Values != v {
				t.Fatalf("values %s, want %s", m.Values, v)
			}
			checkValues(t, v, s.Val, m.Sparse.Val)
		}
	}
}

func TestParseAndConfig(t *testing.T) {
	for _, s := range []string{"f32", "F16", "i8"} {
		v, err := ParseValues(s)
		if err != nil || !strings.EqualFold(v.String(), s) {
			t.Errorf("ParseValues(%q) = %v, %v", s, v, err)
		}
	}
	for _, s := range []string{"none", "ZSTD", "s2"} {
		c, err := ParseCompress(s)
		if err != nil || !strings.EqualFold(c.String(), s) {
			t.Errorf("ParseCompress(%q) = %v, %v", s, c, err)
		}
	}
	if _, err := ParseValues("f64"); !errors.Is(err, ErrRange) {
		t.Errorf("ParseValues(f64): %v", err)
	}
	if _, err := ParseCompress("gzip"); !errors.Is(err, ErrRange) {
		t.Errorf("ParseCompress(gzip): %v", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"values":     func(c *Config) { c.Values = 4 },
		"compress":   func(c *Config) { c.Compress = 3 },
		"message":    func(c *Config) { c.Limits.MaxMessage = 100 },
		"rows":       func(c *Config) { c.Limits.MaxRows = 0 },
		"values-max": func(c *Config) { c.Limits.MaxValues = c.Limits.MaxRows - 1 },
		"width":      func(c *Config) { c.Limits.MaxWidth = 0 },
		"string":     func(c *Config) { c.Limits.MaxString = 0 },
		"list":       func(c *Config) { c.Limits.MaxList = 0 },
		"features":   func(c *Config) { c.Limits.Features = 1<<32 + 1 },
	} {
		cfg := DefaultConfig()
		mut(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrRange) {
			t.Errorf("%s: Validate() = %v, want ErrRange", name, err)
		}
		if _, err := cfg.NewCodec(); err == nil {
			t.Errorf("%s: NewCodec accepted", name)
		}
	}
}
