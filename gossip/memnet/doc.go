// Package memnet is an in-memory gossip.Transport: many peers in one
// process, with the faults a real network has, for tests of the core link
// and the start probes.
//
// # Driving it
//
//	net, _ := memnet.New(memnet.DefaultConfig()) // Seed, QueueLength, MaxPayload, Manual
//	defer net.Close()
//	a, b := net.NewNode("a"), net.NewNode("b")  // each is a gossip.Transport
//	net.SetDropRate(0.2)                        // faults, changeable at any time
//	net.SetReorder(0.2, 5)
//	remove := net.DropIf(func(e memnet.Envelope) bool { return e.Topic == t && e.To == "b" })
//	net.Partition([]string{"a"}, []string{"b"}); net.Heal()
//	net.Crash("b"); net.Restore("b")
//
// Publish copies the message once and queues it for every node subscribed
// to the topic at that moment except the publisher (a publisher need not
// subscribe, as with gossipsub; it never receives its own messages). Each
// node has one delivery goroutine, so its validators and deliveries run
// sequentially in queue order; with Config.Manual there are none, and Step
// or Flush deliver on the caller's goroutine in a fixed order, for fully
// deterministic tests. Faults apply when a message is queued: drops (the
// next N, a seeded rate, predicates), reordering (a message held back until
// 1..window later ones are queued, or until the receiver has nothing else),
// delay, partitions and crashes (a crashed node loses its queue). Direct
// requests run the handler on a goroutine of its own, streaming through a
// pipe; they fail on a crash, a partition or a DropIf rule, never at random
// (libp2p streams are reliable). Random faults draw from one generator
// seeded by Config.Seed: with a single publishing goroutine, the same seed
// drops and reorders the same messages.
//
// Long-lived streams (OpenStream, HandleStream) are pipes: a write blocks
// until the receiver's handler reads it. Opening one fails like a request;
// a crash or partition resets the streams across it, and ResetStreams(a, b)
// resets those between two nodes, as a dropped connection would.
//
// Every method of Network and Node is safe for concurrent use.
package memnet
