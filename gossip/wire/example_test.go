package wire_test

import (
	"fmt"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// A worker sends its summed gradient for one owner as half floats with
// error feedback; the owner decodes it without knowing the format.
func Example() {
	layout, _ := model.NewLayout(1<<24+1, 1, 256)
	fb := wire.NewFeedback(layout)

	tx := wire.NewCodec(wire.F16, wire.None, wire.DefaultLimits())
	tx.SetFeedback(fb)
	grad := model.Sparse{Idx: []uint32{7, 4103, 1 << 24}, Val: []float32{0.1, -0.25, 3}}
	h := wire.Header{Job: "ctr", Sender: "12D3KooWExample", Clock: 5, Epoch: 1, Seq: 42}

	var out [][]byte
	parts, err := tx.SplitGrad(h, 100, 1, &grad, func(msg []byte) error {
		out = append(out, append([]byte(nil), msg...)) // msg is the codec's buffer
		return nil
	})
	if err != nil {
		panic(err)
	}

	rx := wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits())
	var m wire.Message
	if err := rx.Decode(out[0], &m); err != nil {
		panic(err)
	}
	fmt.Println(parts, m.Kind, m.Values, m.Sender, m.Seq, m.Examples)
	fmt.Println(m.Sparse.Idx, m.Sparse.Val)
	fmt.Println("owed to feature 7:", fb.Residual(7)[0])
	// Output:
	// 1 grad f16 12D3KooWExample 42 100
	// [7 4103 16777216] [0.099975586 -0.25 3]
	// owed to feature 7: 2.4415553e-05
}
