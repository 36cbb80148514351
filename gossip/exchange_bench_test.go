package gossip_test

import (
	"fmt"
	"testing"

	"github.com/gossiptrain/gossiptrain/gossip/gossiptest"
	"github.com/gossiptrain/gossiptrain/gossip/memnet"
)

// BenchmarkExchangeMemnet: one worker's gradients to one owner over the
// in-memory transport: the Exchange's own cost (encode, buffer, validate,
// decode twice, sequence, deliver) plus memnet's copy per message.
func BenchmarkExchangeMemnet(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 512 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			net, err := memnet.New(memnet.DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			defer net.Close()
			gossiptest.BenchExchange(b, net.NewNode("worker"), net.NewNode("owner"), size, 64)
		})
	}
}
