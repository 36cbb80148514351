// Package gossip is the messaging layer of gossiptrain: the Transport
// interface, which memnet (in-memory, for tests and simulations) and p2p
// (libp2p streams and gossipsub) implement, and CoreLink, which carries the
// training core's messages (node/train) between peers. The wire format is
// gossip/wire's; the protocol is docs/protocol.md's.
//
// Membership beats travel on gossipsub (package node); everything the
// training core says goes point to point over CoreLink's long-lived
// streams. (Until the protocol core replaced it, an Exchange here carried
// sequenced, repaired gradient and parameter streams over gossipsub; the
// core retries and deduplicates by itself, so the link needs neither.)
//
// # The core link
//
// CoreLink carries the messages of the training core (node/train), which
// does its own retries and deduplication: no sequencing or repair, one
// long-lived stream (CoreProtocol) per sender and receiver, strict
// validation, bounded queues, bodies of any size up to MaxBody in parts.
// The driver feeds the core from deliver and sends what it decides:
//
//	cfg := gossip.DefaultCoreLinkConfig()
//	cfg.Job, cfg.Limits = "ctr1", coreCfg.Limits // the core's limits
//	link, err := gossip.NewCoreLink(transport, cfg, func(from string, m *wire.Core) {
//		inbox <- msgIn{from, m} // one goroutine, in each peer's order; m is ours
//	})
//	// the driver's loop: core.Receive(in.from, in.m) for each inbox item,
//	// core.Tick() on its ticker, then for each Envelope e of the Ready:
//	link.Send(e.To, e.Msg) // never blocks; encodes before it returns
//
// docs/protocol.md ("Core link") has the framing, bounds and figures.
//
// # Validation
//
// Every incoming message is decoded under the core's limits (features,
// widths, sizes, finite values, ascending indices: wire.Core.Check) and
// checked for this job; the sender is the peer whose authenticated stream
// delivered it. Rejections are counted by Reason (CoreLinkStats.Rejected)
// and logged at debug with the peer and reason; nothing rejected is
// delivered. What a well-formed message from a peer may change is the
// core's to decide: it checks that the sender holds the role the message
// needs (a member of the configuration, the holder of the shard, the
// raft node it claims to be).
package gossip
