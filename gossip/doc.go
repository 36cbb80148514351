// Package gossip is the messaging layer of gossiptrain: the reliable,
// validated, sequenced exchange of gradients and parameters between
// training peers, over a Transport that is either memnet (in-memory, for
// tests and simulations) or p2p (libp2p gossipsub and direct streams).
// The wire format is gossip/wire's; the protocol is docs/protocol.md's.
//
// # Driving it
//
// One Exchange per training peer:
//
//	cfg := gossip.DefaultConfig()
//	cfg.Job, cfg.Width = "ctr1", layout.Width
//	cfg.Wire.Values, cfg.Wire.Compress = wire.F16, wire.None // gradients only; params are f32
//	cfg.Wire.Limits.Features = layout.Features
//	cfg.CheckEpoch = ring.plausible                         // optional, concurrent, fast
//	x, err := gossip.New(transport, cfg, gossip.Handlers{
//		Grad:   owner.add,    // a worker's gradient for this node's shards
//		Params: model.apply,  // an owner's new values and its progress (Ack)
//		Error:  loop.streamFailed, // ErrGone, ErrProtocol
//	})
//	defer x.Close()
//
//	x.WaitOwner(ctx, o)                                 // before the first gradient to o
//	x.SendGrad(ctx, o, clock, epoch, examples, &g)     // every owner, every clock (empty g too)
//	x.SendParams(ctx, clock, epoch, &wire.Ack{Through: c, Applied: perWorker}, &rows)
//
//	// at a barrier that waited too long (tail loss: nothing later reveals it):
//	n, err := x.Poke(ctx, o, gossip.StreamParams)     // errors.Is(err, gossip.ErrGone): stream lost
//	x.Skip(o, gossip.StreamParams)                      // async mode may go on past the hole
//
// # Streams, sequence numbers, repair
//
// A sender numbers each of its streams from 0: a worker its gradients to
// each owner (topic GradTopic(job, owner), KindGrad), an owner its params
// (ParamsTopic(job), KindParamsAck). A body over Wire.Limits.MaxMessage is
// split into parts, each with its own sequence number; every part is kept
// in the stream's retransmit buffer (Config.RetransmitMessages and
// RetransmitBytes), then published. A receiver delivers each (sender,
// stream) in sequence order and reassembles parts into one Grad or Params
// (delivered when its last part is in; a part that does not continue its
// message drops the message, counted as ReasonProtocol). A later sequence
// number arriving first is held (Config.EarlyMessages/EarlyBytes); after
// Config.RepairDelay the receiver asks the sender over the direct stream
// RepairProtocol (wire.Fetch naming the sender and the topic) for the gap;
// the reply (wire.FetchReply, then the messages framed) goes through the
// same checks and sequencing, and each part it fills is counted as
// Repaired. Failed repairs back off and retry; messages the sender already
// evicted come back as Gone: the stream stalls with ErrGone (Handlers.Error,
// StreamErr, Poke's error), since delivering past a hole would train around
// a lost gradient. A Publish the transport refuses leaves the message
// sequenced and buffered (ErrUnpublished): it is repaired like a drop, so
// it must not be sent again.
//
// Gradients a worker sends to itself (it owns shards) skip the network and
// come back through the same sequencing; with Config.LoopParams an owner's
// own params do too, so the training loop handles every owner alike.
//
// # Validation
//
// Every incoming message is decoded with the wire limits (Features, sizes,
// finite values, ascending indices) and checked: this job, the kind the
// topic carries (Grad on this node's grad topic, lossless ParamsAck on the
// params topic), header sender equal to the transport's authenticated
// sender, the model's width, and Config.CheckEpoch. This runs as the
// transport's validator (on p2p a rejection is gossipsub's ValidationReject,
// which lowers the sender's peer score) and again on the delivery
// goroutine, which also checks repaired messages. Rejections are counted by
// Reason (Rejected, Stats().Rejected); nothing rejected is delivered.
//
// # Concurrency
//
//   - SendGrad and SendParams may be called from any goroutine; each
//     serialises its kind. Encoding and publishing happen on the caller's
//     goroutine.
//   - All handlers run on the Exchange's single delivery goroutine, never
//     concurrently, in sequence order per stream. The Grad and Params they
//     get are reused for the stream's next message: copy or consume before
//     returning. Handlers may call Send*, Skip, Stats; not Sync or Poke.
//   - Validators run on transport goroutines, concurrently; repairs on
//     goroutines of their own (Config.RepairConcurrency at once).
//   - Stats and Rejected are atomic snapshots, callable from anywhere.
//
// The steady-state send and receive paths allocate nothing: codecs,
// retransmit slots, decoders and reassembly buffers are reused (memnet
// copies each published message once; libp2p allocates in gossipsub).
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
// # Figures
//
// One worker sending gradients of the given wire size to one owner, at most
// 64 in flight, every message delivered (repairs included) before the clock
// stops; shared 2-core AMD EPYC VM, ranges over runs at different loads:
//
//	transport  4 KiB                       64 KiB                  512 KiB                allocs/msg
//	memnet     31-43k msg/s, 128-175 MB/s  2.9-3.2k, 188-211 MB/s  290-355, 150-186 MB/s  1
//	p2p        27-29k msg/s, 112-117 MB/s  3.3k, 217-219 MB/s      270-400, 140-210 MB/s  44-68
//
// memnet measures the Exchange itself (encode, buffer, validate and decode
// twice, reassemble); its one allocation is memnet's copy of the message.
// p2p is two libp2p hosts in one process on 127.0.0.1 (TCP, Noise, yamux,
// gossipsub with queues of 1024 and p2p.PubSubOptions: no signatures):
// gossipsub's routing and protobuf dominate, and fewer than 1 message in
// 1000 is lost to its queues and repaired. With gossipsub's signatures on,
// the same benchmark ran 3.5-6.6k msg/s at 4 KiB and 31-89 MB/s at 64-512
// KiB, losing up to 8% (the issue measured 15-34 MB/s across processes):
// batch gradients into messages of tens to hundreds of KiB. Reproduce with
//
//	go test ./gossip -run XXX -bench ExchangeMemnet -benchtime 200ms
//	go test ./gossip/p2p -run XXX -bench ExchangeP2P -benchtime 200ms
package gossip
