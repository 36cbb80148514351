package sgd

import (
	"testing"
)

// TestPrepareAllocatesNothingOnceGrown pins Preparer's promise: once its
// and the Prepared's buffers have grown to a batch's size, Prepare of a
// batch of the same rows and nonzeros allocates nothing, whichever
// features it holds (the trainer's read-ahead prepares every batch into a
// pooled Prepared).
func TestPrepareAllocatesNothingOnceGrown(t *testing.T) {
	for _, bc := range benchCases() {
		t.Run(bc.name, func(t *testing.T) {
			pr := NewPreparer(bc.model(t))
			var p Prepared
			first := bc.batches[0]
			var same []int // the batches of first's size
			for i, bt := range bc.batches {
				if bt.Rows() == first.Rows() && bt.NNZ() == first.NNZ() {
					same = append(same, i)
				}
			}
			if len(same) < 2 {
				t.Fatalf("%d batches of the first's size, want two at least", len(same))
			}
			pr.Prepare(first, &p)
			i := 0
			allocs := testing.AllocsPerRun(20, func() {
				pr.Prepare(bc.batches[same[i%len(same)]], &p)
				i++
			})
			if allocs != 0 {
				t.Errorf("Prepare of a batch of %d rows, %d nonzeros: %v allocations, want none", first.Rows(), first.NNZ(), allocs)
			}
			if p.Examples() != first.Rows() || p.NNZ() != first.NNZ() {
				t.Errorf("prepared %d examples, %d nonzeros; want %d, %d", p.Examples(), p.NNZ(), first.Rows(), first.NNZ())
			}
		})
	}
}
