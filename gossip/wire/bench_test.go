package wire

import (
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/model"
)

// criteoWorkload is 8 summed gradients of 100-row Criteo-like batches
// (gen_test.go), each split into 4 owners' parts by shard k & 255.
type criteoWorkload struct {
	parts [][]model.Sparse // [batch][owner]
	nnz   int              // nonzeros (rows, width 1) over all batches after merging duplicates
	raw   int              // nonzeros before merging
}

func newCriteoWorkload() *criteoWorkload {
	w := &criteoWorkload{}
	for seed := uint64(1); seed <= 8; seed++ {
		s, raw := newCriteoGen(seed).batch(100)
		w.parts = append(w.parts, splitByOwner(&s, 4, seed))
		w.nnz += s.Len()
		w.raw += raw
	}
	return w
}

var benchFeedback *Feedback

func criteoHeader(seq int) Header {
	return Header{Job: "criteo", Sender: peerID, Clock: 1200 + uint64(seq)/4, Epoch: 3, Seq: 98000 + uint64(seq)}
}

// BenchmarkCriteoGrad measures the wire cost of a worker's gradient
// messages, headers included, and encode/decode speed, for every value
// format and compressor. Metrics: bytes/nnz (naive uint32+float32 is 8),
// ns/nnz, and MB/s of naive-equivalent input (8 bytes per nonzero).
// Lossy formats encode with error feedback on, as a worker runs.
func BenchmarkCriteoGrad(b *testing.B) {
	w := newCriteoWorkload()
	lim := DefaultLimits()
	lim.Features = criteoDim + 1
	if benchFeedback == nil {
		layout, err := model.NewLayout(criteoDim+1, 1, criteoShards)
		if err != nil {
			b.Fatal(err)
		}
		benchFeedback = NewFeedback(layout)
	}
	for _, v := range allValues {
		for _, cp := range allCompress {
			c := NewCodec(v, cp, lim)
			if v.Lossy() {
				c.SetFeedback(benchFeedback)
			}
			var msgs [][]byte
			wire := 0
			for bi, batch := range w.parts {
				for oi := range batch {
					msg, err := c.AppendGrad(nil, criteoHeader(4*bi+oi), 100, 1, &batch[oi])
					if err != nil {
						b.Fatal(err)
					}
					msgs = append(msgs, msg)
					wire += len(msg)
				}
			}
			perNNZ := float64(wire) / float64(w.nnz)
			report := func(b *testing.B, start time.Time) {
				b.ReportMetric(perNNZ, "bytes/nnz")
				b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N)/float64(w.nnz), "ns/nnz")
			}
			name := v.String() + "/" + cp.String()
			b.Run(name+"/encode", func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(8 * w.nnz))
				buf := make([]byte, 0, 64<<10)
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					for bi, batch := range w.parts {
						for oi := range batch {
							var err error
							if buf, err = c.AppendGrad(buf[:0], criteoHeader(4*bi+oi), 100, 1, &batch[oi]); err != nil {
								b.Fatal(err)
							}
						}
					}
				}
				report(b, start)
			})
			b.Run(name+"/decode", func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(8 * w.nnz))
				rx := NewCodec(F32, None, lim)
				var m Message
				for _, msg := range msgs {
					if err := rx.Decode(msg, &m); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					for _, msg := range msgs {
						if err := rx.Decode(msg, &m); err != nil {
							b.Fatal(err)
						}
					}
				}
				report(b, start)
			})
		}
	}
}

// TestCriteoTargets holds the acceptance figures: bytes on the wire per
// gradient nonzero, headers included, at most 6 (f32), 4 (f16) and 3 (i8)
// for every compressor, on the benchmark's workload.
func TestCriteoTargets(t *testing.T) {
	w := newCriteoWorkload()
	lim := DefaultLimits()
	lim.Features = criteoDim + 1
	target := map[Values]float64{F32: 6, F16: 4, I8: 3, Raw: 8}
	t.Logf("workload: %d nonzeros before merging duplicates, %d after, in %d messages", w.raw, w.nnz, 4*len(w.parts))
	for _, v := range allValues {
		for _, cp := range allCompress {
			c := NewCodec(v, cp, lim)
			wire := 0
			var buf []byte
			for bi, batch := range w.parts {
				for oi := range batch {
					var err error
					if buf, err = c.AppendGrad(buf[:0], criteoHeader(4*bi+oi), 100, 1, &batch[oi]); err != nil {
						t.Fatal(err)
					}
					wire += len(buf)
				}
			}
			per := float64(wire) / float64(w.nnz)
			t.Logf("%s/%s: %.3f bytes/nnz (%.2fx smaller than 8)", v, cp, per, 8/per)
			if per > target[v] {
				t.Errorf("%s/%s: %.3f bytes/nnz, target %v", v, cp, per, target[v])
			}
		}
	}
}
