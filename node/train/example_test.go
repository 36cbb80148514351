package train_test

import (
	"fmt"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node/train"
)

// halves puts shard s on the s%2-th member: with two members and four
// shards, each owns two.
type halves []string

func (h halves) Owners(s int) []string { return []string{h[s%len(h)]} }

// Example drives two cores by hand through round 0 of a sync run, as
// node/trainer and the simulator do: every call is an event, and Ready
// says what to send and what to compute. The package doc walks the same
// steps. Each peer is a worker and the owner of two of the four shards
// (halves). No Tick is needed: the first configuration is in every initial
// member's log, so round 0 needs no raft leader.
//
// Round 0's values are pulled (R1); each worker computes its batch and
// pushes each owner the gradient rows of its shards, with the rows of its
// round-1 batch it wants. An owner applies round 0 once both workers
// pushed to it (O1: one SGD step, learning rate 0.1, with the gradients
// summed over the 20 examples), and its reply is both the acknowledgement
// and round 1's values (R2, R3): row 2, which both batches touched, moved
// twice as far as rows 1 and 3.
func Example() {
	names := []string{"a", "b"}
	var initial []train.Member
	for _, n := range names {
		initial = append(initial, train.Member{Peer: n, ID: train.MemberID(n, 1)})
	}
	cores := map[string]*train.Core{}
	for i, n := range names {
		m, err := model.New(model.Logreg, 8, 2, 4, model.DefaultOptConfig(model.SGD))
		if err != nil {
			panic(err)
		}
		cfg := train.DefaultConfig()
		cfg.Self, cfg.ID, cfg.Model, cfg.Initial, cfg.Seed = n, train.MemberID(n, 1), m, initial, uint64(i+1)
		cfg.Place = func(members []string) (train.Placement, error) { return halves(members), nil }
		cfg.Limits.Features = 8
		c, err := train.New(cfg)
		if err != nil {
			panic(err)
		}
		cores[n] = c
	}
	type envelope struct {
		from string
		e    train.Envelope
	}
	var queue []envelope
	var collect func(n string)
	collect = func(n string) {
		rd := cores[n].Ready()
		for _, e := range rd.Messages {
			queue = append(queue, envelope{n, e})
		}
		if c := rd.Compute; c != nil {
			fmt.Printf("%s computes round %d: rows %v, weights %v\n", n, c.Round, c.Keys, c.Weights)
			if c.Round == 0 {
				// The driver's work: the batch's gradient, summed over
				// its examples (here 1 for every row), then Computed.
				grad := make([]float32, len(c.Weights))
				for i := range grad {
					grad[i] = 1
				}
				cores[n].Computed(c.Round, grad, 0)
				collect(n)
			}
		}
		if rd.Err != nil {
			panic(rd.Err)
		}
	}
	var ids []uint64
	for _, m := range initial {
		ids = append(ids, m.ID)
	}
	for _, n := range names {
		cores[n].Alive(ids)
		collect(n)
	}
	cores["a"].Batch([]uint32{0, 1, 2}, 10)
	cores["a"].Batch([]uint32{1, 3}, 10)
	cores["b"].Batch([]uint32{2, 3}, 10)
	cores["b"].Batch([]uint32{0, 2}, 10)
	for _, n := range names {
		collect(n)
	}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		switch msg := q.e.Msg; msg.Op {
		case wire.CorePull:
			fmt.Printf("%s -> %s %v round %d: shards %v, want %v\n", q.from, q.e.To, msg.Op, msg.Round, msg.Shards, msg.Want)
		case wire.CorePush:
			fmt.Printf("%s -> %s %v round %d: shards %v, gradient rows %v, %d examples, want %v\n", q.from, q.e.To, msg.Op, msg.Round, msg.Shards, msg.Rows.Idx, msg.Examples, msg.Want)
		case wire.CoreReply:
			fmt.Printf("%s -> %s %v round %d: %d values\n", q.from, q.e.To, msg.Op, msg.Round, len(msg.Values))
		}
		cores[q.e.To].Receive(q.from, q.e.Msg)
		collect(q.e.To)
	}
	for _, n := range names {
		fmt.Println(n, "round", cores[n].Round()) // the next round its worker computes
	}
	// Output:
	// a -> a pull round 0: shards [0 2], want [0 2]
	// a -> b pull round 0: shards [1 3], want [1]
	// b -> a pull round 0: shards [0 2], want [2]
	// b -> b pull round 0: shards [1 3], want [3]
	// a -> a reply round 0: 2 values
	// b -> a reply round 0: 1 values
	// a computes round 0: rows [0 1 2], weights [0 0 0]
	// a -> b reply round 0: 1 values
	// b -> b reply round 0: 1 values
	// b computes round 0: rows [2 3], weights [0 0]
	// a -> a push round 0: shards [0 2], gradient rows [0 2], 10 examples, want []
	// a -> b push round 0: shards [1 3], gradient rows [1], 10 examples, want [1 3]
	// b -> a push round 0: shards [0 2], gradient rows [2], 10 examples, want [0 2]
	// b -> b push round 0: shards [1 3], gradient rows [3], 10 examples, want []
	// a -> a reply round 0: 0 values
	// a -> b reply round 0: 2 values
	// b -> a reply round 0: 2 values
	// a computes round 1: rows [1 3], weights [-0.005 -0.005]
	// b -> b reply round 0: 0 values
	// b computes round 1: rows [0 2], weights [-0.005 -0.01]
	// a round 1
	// b round 1
}
