package gossip_test

import (
	"context"
	"fmt"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/memnet"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// A worker sends its gradient to an owner; the owner publishes the new
// values with its progress; the worker receives them. Over memnet here;
// p2p.New gives the same Transport over libp2p.
func Example() {
	net, _ := memnet.New(memnet.DefaultConfig())
	defer net.Close()
	cfg := gossip.DefaultConfig()
	cfg.Job = "ctr"
	cfg.Wire.Limits.Features = 1 << 20
	cfg.LoopParams = false

	done := make(chan struct{})
	var owner *gossip.Exchange
	owner, _ = gossip.New(net.NewNode("owner"), cfg, gossip.Handlers{
		Grad: func(g *gossip.Grad) { // the delivery goroutine; g is reused after return
			fmt.Println("owner got clock", g.Clock, "from", g.From, "examples", g.Examples, "rows", g.Rows.Idx)
			// ... apply, then publish the new values (handlers may send):
			newRows := model.Sparse{Idx: g.Rows.Idx, Val: []float32{0.5, -0.25}}
			ack := wire.Ack{Through: g.Clock, Applied: []wire.WorkerClock{{Worker: g.From, Clock: g.Clock}}}
			if err := owner.SendParams(context.Background(), g.Clock, g.Epoch, &ack, &newRows); err != nil {
				fmt.Println(err)
			}
		},
	})
	defer owner.Close()
	worker, _ := gossip.New(net.NewNode("worker"), cfg, gossip.Handlers{
		Params: func(p *gossip.Params) {
			fmt.Println("worker got params through", p.Ack.Through, "from", p.From, "values", p.Rows.Val)
			close(done)
		},
	})
	defer worker.Close()

	ctx := context.Background()
	_ = worker.WaitOwner(ctx, "owner")                // the owner is subscribed to its grad topic
	owner.SetParamsPeers([]string{"owner", "worker"}) // the owner publishes params to the worker
	_ = owner.WaitPeers(ctx, []string{"worker"})      // once it is subscribed to its params topic
	g := model.Sparse{Idx: []uint32{3, 1 << 19}, Val: []float32{0.1, 0.2}}
	if err := worker.SendGrad(ctx, "owner", 0, 1, 100, &g); err != nil {
		fmt.Println(err)
	}
	<-done
	// Output:
	// owner got clock 0 from worker examples 100 rows [3 524288]
	// worker got params through 0 from owner values [0.5 -0.25]
}
