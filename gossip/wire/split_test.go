package wire

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/gossiptrain/gossiptrain/model"
)

func smallLimits(maxMessage int) Limits {
	lim := DefaultLimits()
	lim.MaxString = 64
	lim.MaxMessage = maxMessage
	return lim
}

// collect runs a split and keeps copies of the messages.
func collect(t *testing.T, c *Codec, kind Kind, h Header, examples, width int, s *model.Sparse) ([][]byte, error) {
	t.Helper()
	var msgs [][]byte
	emit := func(m []byte) error { msgs = append(msgs, slices.Clone(m)); return nil }
	var n int
	var err error
	switch kind {
	case KindGrad:
		n, err = c.SplitGrad(h, examples, width, s, emit)
	case KindParams:
		n, err = c.SplitParams(h, width, s, emit)
	default:
		n, err = c.SplitParamsAck(h, &testAck, width, s, emit)
	}
	if err == nil && n != len(msgs) {
		t.Fatalf("split returned %d parts, emitted %d", n, len(msgs))
	}
	return msgs, err
}

func TestSplitNeverDropsAndRespectsLimit(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, v := range allValues {
		for _, cp := range allCompress {
			for _, tc := range []struct {
				rows, width, maxMessage int
			}{
				{5000, 1, 1024},
				{3000, 1, 4096},
				{400, 10, 2048},
				{1, 1, 1024},
				{0, 1, 1024},
			} {
				s := randomSparse(r, tc.rows, tc.width, 1<<24)
				c := NewCodec(v, cp, smallLimits(tc.maxMessage))
				h := testHeader()
				h.Seq = 1000
				for _, kind := range []Kind{KindGrad, KindParams, KindParamsAck} {
					msgs, err := collect(t, c, kind, h, 17, tc.width, &s)
					if err != nil {
						t.Fatalf("%s/%s %+v: %v", v, cp, tc, err)
					}
					var got model.Sparse
					var m Message
					for i, msg := range msgs {
						if len(msg) > tc.maxMessage {
							t.Fatalf("%s/%s %+v: part %d is %d bytes, limit %d", v, cp, tc, i, len(msg), tc.maxMessage)
						}
						if err := c.Decode(msg, &m); err != nil {
							t.Fatal(err)
						}
						if int(m.Part) != i || int(m.Parts) != len(msgs) || m.Seq != 1000+uint64(i) || m.Kind != kind {
							t.Fatalf("part %d: header %+v", i, m.Header)
						}
						if kind == KindGrad && m.Examples != 17 {
							t.Fatalf("part %d: examples %d, want the total 17", i, m.Examples)
						}
						if kind == KindParamsAck && !reflect.DeepEqual(m.Ack, testAck) {
							t.Fatalf("part %d: ack %+v, want the whole %+v", i, m.Ack, testAck)
						}
						got.Idx = append(got.Idx, m.Sparse.Idx...)
						got.Val = append(got.Val, m.Sparse.Val...)
					}
					if !slices.Equal(got.Idx, s.Idx) {
						t.Fatalf("%s/%s %+v: %d rows after split, want %d", v, cp, tc, got.Len(), s.Len())
					}
					// An i8 part's scale is at most the whole body's, so the
					// whole body's half quantum bounds every part's error.
					checkValues(t, v, s.Val, got.Val)
					if tc.rows > 1000 && len(msgs) < 2 {
						t.Fatalf("%+v: expected a split, got %d part", tc, len(msgs))
					}
				}
			}
		}
	}
}

// The limit is exact for a body that fits whole: at the encoded size it is
// one message, byte for byte what AppendGrad produces; one byte less and it
// splits.
func TestSplitLimitIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	s := randomSparse(r, 800, 1, 1<<24)
	whole, err := NewCodec(F16, None, DefaultLimits()).AppendGrad(nil, testHeader(), 5, 1, &s)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := collect(t, NewCodec(F16, None, smallLimits(len(whole))), KindGrad, testHeader(), 5, 1, &s)
	if err != nil || len(msgs) != 1 || !slices.Equal(msgs[0], whole) {
		t.Fatalf("limit = size: %d parts, err %v", len(msgs), err)
	}
	msgs, err = collect(t, NewCodec(F16, None, smallLimits(len(whole)-1)), KindGrad, testHeader(), 5, 1, &s)
	if err != nil || len(msgs) < 2 {
		t.Fatalf("limit = size-1: %d parts, err %v", len(msgs), err)
	}
	// AppendGrad itself refuses, and says to split.
	if _, err := NewCodec(F16, None, smallLimits(len(whole)-1)).AppendGrad(nil, testHeader(), 5, 1, &s); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("AppendGrad over the limit: %v", err)
	}
}

func TestSplitRowTooLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	s := randomSparse(r, 3, 1000, 100) // a row of 1000 float32 is ~3.3 KB
	_, err := collect(t, NewCodec(F32, None, smallLimits(1024)), KindParams, testHeader(), 0, 1000, &s)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("error %v, want ErrTooLarge", err)
	}
}

func TestSplitHonoursMaxRowsAndEmitErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	s := randomSparse(r, 100, 1, 1<<20)
	lim := DefaultLimits()
	lim.MaxRows = 30
	msgs, err := collect(t, NewCodec(F32, None, lim), KindGrad, testHeader(), 1, 1, &s)
	if err != nil || len(msgs) != 4 { // 30 + 30 + 30 + 10
		t.Fatalf("%d parts, %v; want 4", len(msgs), err)
	}
	stop := errors.New("stop")
	calls := 0
	n, err := NewCodec(F32, None, lim).SplitGrad(testHeader(), 1, 1, &s, func([]byte) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 1 || calls != 2 {
		t.Fatalf("emit error: n %d calls %d err %v", n, calls, err)
	}
	_, err = collect(t, NewCodec(F32, None, lim), KindGrad, testHeader(), 1, 1, &model.Sparse{Idx: []uint32{3, 2}, Val: []float32{1, 1}})
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("descending rows: %v", err)
	}
}
