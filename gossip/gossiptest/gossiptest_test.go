package gossiptest

import (
	"errors"
	"testing"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// Each builder produces what it says: the receiver's decoder rejects it for
// that reason alone, and a same-shaped finite message decodes.
func TestBuilders(t *testing.T) {
	lim := wire.DefaultLimits()
	lim.Features = 100
	c := wire.NewCodec(wire.F32, wire.None, lim)
	var m wire.Message
	for _, tc := range []struct {
		name string
		msg  []byte
		want error
	}{
		{"garbage", Garbage(1, 64), wire.ErrVersion},
		{"nan grad", NaN(wire.KindGrad, "j", "p", 3, 9, 7), wire.ErrNonFinite},
		{"nan grad, index past 2^31", NaN(wire.KindGrad, "j", "p", 3, 9, 1<<31+5), wire.ErrRange},
		{"nan params", NaN(wire.KindParamsAck, "j", "p", 3, 9, 7), wire.ErrNonFinite},
		{"out of range", Message(wire.KindGrad, "j", "p", 1, 2, 5, model.Sparse{Idx: []uint32{100}, Val: []float32{1}}), wire.ErrRange},
	} {
		if err := c.Decode(tc.msg, &m); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// The NaN builder's layout is right: the same message through a
	// decoder that allows index 2^31+5 fails only on the value.
	open := wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits())
	if err := open.Decode(NaN(wire.KindGrad, "j", "p", 3, 9, 1<<31+5), &m); !errors.Is(err, wire.ErrNonFinite) {
		t.Errorf("nan grad, large index, no feature limit: %v", err)
	}
	msg := Message(wire.KindParamsAck, "j", "p", 4, 2, 0, model.Sparse{Idx: []uint32{3, 99}, Val: []float32{1, -2}})
	if err := c.Decode(msg, &m); err != nil || m.Kind != wire.KindParamsAck || m.Ack.Through != 4 || m.Seq != 2 || m.Sparse.Idx[1] != 99 {
		t.Errorf("params-ack: %v %+v", err, m.Header)
	}
}
