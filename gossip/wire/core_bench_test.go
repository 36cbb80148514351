package wire

import "testing"

// BenchmarkCorePushDecode decodes a window's push as gossip.CoreLink
// does, into a fresh Core each time (the core keeps what it is given): 64
// shards of 256, 6,000 rows of width 2 (a logreg weight and its AdaGrad
// accumulator), 6,000 wanted keys, lossless f32.
//
//	go test ./gossip/wire -run '^$' -bench CorePushDecode -benchmem
func BenchmarkCorePushDecode(b *testing.B) {
	lim := DefaultLimits()
	lim.MaxMessage = 64 << 20
	m := &Core{Op: CorePush, Member: 7, Config: 3, Round: 1000, Through: 1000, Req: 1 << 33, Examples: 4000, RowWidth: 2}
	for s := range 64 {
		m.Shards = append(m.Shards, uint32(4*s))
	}
	for i := range 6000 {
		k := uint32(i*256*11 + 4*(i%64)) // ascending, in the shards above (key & 255)
		m.Rows.Append(k, []float32{float32(i) / 1e4, 1 + float32(i)/1e3})
		m.Want = append(m.Want, k)
	}
	enc := NewCodec(F32, None, lim)
	body, flags, err := enc.CoreBody(m)
	if err != nil {
		b.Fatal(err)
	}
	msg, err := enc.AppendCorePart(nil, Header{Job: "bench", Sender: "p", Parts: 1}, flags, body)
	if err != nil {
		b.Fatal(err)
	}
	dec := NewCodec(F32, None, lim)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		h, body, err := dec.CoreChunk(msg)
		if err != nil {
			b.Fatal(err)
		}
		out := new(Core)
		if err := dec.DecodeCoreBody(h, body, lim.MaxMessage, out); err != nil {
			b.Fatal(err)
		}
	}
}
