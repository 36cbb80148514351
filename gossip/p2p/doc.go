// Package p2p is the libp2p gossip.Transport: gossipsub topics for
// published messages, direct streams for requests (start probes) and
// long-lived streams for the core link.
//
// # Driving it
//
// The node package owns the host and the one gossipsub router per host; it
// hands both to New:
//
//	cfg := p2p.DefaultConfig()
//	cfg.MaxPayload = n.MaxPayload() // gossipsub's limit minus the envelope
//	cfg.Join = n.Join               // one place joins topics, with peer-score parameters
//	cfg.Drops = func() uint64 { return n.PubSubCounters().Dropped() }
//	tr, err := p2p.New(n.Host(), n.PubSub(), cfg)
//	link, err := gossip.NewCoreLink(tr, linkCfg, deliver)
//
// A PubSub built elsewhere (tests, tools) can count drops with Tracer,
// installed with pubsub.WithRawTracer.
//
// # Facts it is built around (go-libp2p v0.51.0, go-libp2p-pubsub v0.17.0)
//
//   - Publish never blocks or errors when gossipsub is overloaded: it drops
//     (counted by the tracer). A payload at or over
//     gossipsub's maximum message size reaches nobody, silently: Publish
//     here refuses anything over MaxPayload with ErrTooLarge.
//   - pubsub.WithReadiness(MinTopicSize(1)) counts mesh peers, and a topic
//     a node only publishes to (a grad topic) has no mesh: it would wait
//     forever. Publish on such a topic instead waits, bounded by ctx and
//     ReadyTimeout, until a subscriber is known (from the topic's event
//     handler), so gossipsub's fanout has someone to send to.
//   - Flood publishing is off by default in v0.17: a node publishes only to
//     its mesh of a subscribed topic, which forms at the first heartbeat
//     after peers subscribe. The first publish on a subscribed topic with
//     known subscribers therefore waits for a mesh peer.
//   - Gossipsub validates a node's own publishes too (with StrictSign it
//     verifies its own signatures: a third of what signing costs); the
//     validator accepts them unexamined, and the subscription loop skips
//     them, so a node never receives its own messages.
//   - PubSubOptions turns gossipsub's signatures off. The sender given to
//     validators and deliveries is then the neighbour a message came from,
//     proven by the connection's handshake: on the training topics only the
//     receiver subscribes, so gossipsub sends straight from author to
//     receiver; a subscriber that relays a copy is then its sender. (The
//     training core's messages go over the core link's direct streams for
//     that reason.) With signing on, the sender is the signer.
//
// Direct streams carry one framed request (at most MaxRequest bytes) and a
// response of at most MaxResponse bytes, under a deadline of StreamTimeout
// or the request's ctx, whichever is sooner; cancelling ctx resets the
// stream. Long-lived streams (OpenStream, HandleStream: the core link's)
// are plain libp2p streams, one-way; a write that makes no progress for
// StreamTimeout fails and resets the stream, and the handler's from is
// the connection's remote peer. Every method is safe for concurrent use.
package p2p
