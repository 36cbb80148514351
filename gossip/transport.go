package gossip

import (
	"context"
	"io"
)

// Transport is what the training layer needs from the network.
// Implementations: memnet (tests, simulations of many peers in one process)
// and p2p (libp2p gossipsub and streams).
//
// Every method is safe for concurrent use.
type Transport interface {
	// Self is this node's peer ID string.
	Self() string
	// Publish sends msg to the topic's subscribers. It returns when the
	// message is handed to the network; a nil error does not mean delivery
	// (gossipsub drops under load). msg is only read
	// during the call: implementations copy what they keep. A msg larger
	// than the transport's payload limit is refused with an error, never
	// sent to be dropped silently.
	Publish(ctx context.Context, topic string, msg []byte) error
	// Subscribe registers validate and deliver for topic. validate runs on
	// every incoming message before delivery, possibly concurrently; a
	// non-nil error rejects the message (p2p maps it to
	// pubsub.ValidationReject, so the sender's peer score drops). deliver is
	// called sequentially, in arrival order, for accepted messages; it must
	// not block long. from is the authenticated peer that delivered the
	// message: its author when it came straight from it; on p2p, whose
	// gossipsub signatures are off, a peer that relayed it otherwise (the
	// training core's messages go over direct streams, OpenStream, for
	// that reason). deliver owns msg: the transport never reuses it.
	// Messages this node publishes on the topic are never delivered to it.
	// validate may return a value (the decoded message, so that delivery
	// does not decode it again) that deliver receives with the message; a
	// message validated but dropped before delivery drops it. One
	// subscription per topic; cancel ends it.
	Subscribe(topic string, validate func(from string, msg []byte) (any, error), deliver func(from string, msg []byte, v any)) (cancel func(), err error)
	// Serve registers h for direct request/response streams of protocol
	// proto. h reads the whole request in req, writes the response to w and
	// returns; a non-nil error aborts the stream (the requester's reads
	// fail). h may run concurrently for different requests.
	Serve(proto string, h func(ctx context.Context, from string, req []byte, w io.Writer) error)
	// Request opens a direct stream to peer, sends req, and returns the
	// response stream. The caller must Close it.
	Request(ctx context.Context, peer string, proto string, req []byte) (io.ReadCloser, error)
	// Ready blocks until at least n subscribers other than self are known on
	// topic, or ctx ends (then it returns an error wrapping ctx.Err()).
	Ready(ctx context.Context, topic string, n int) error
	// Stats returns the transport's counters since it started.
	Stats() TransportStats
	// OpenStream opens a long-lived direct stream of protocol proto to peer
	// and returns its write side (the receiver never writes back). Writes
	// block while the receiver does not read (flow control); a write error
	// means the stream is broken for good: open another. Close ends the
	// stream: the receiver reads what was written, then io.EOF; Close may
	// be called while a Write blocks, to abort it.
	OpenStream(ctx context.Context, peer, proto string) (io.WriteCloser, error)
	// HandleStream registers h for incoming streams of protocol proto,
	// replacing any earlier handler. h runs on its own goroutine for each
	// stream, with from the authenticated remote peer and r the stream's
	// read side; Close on r aborts the stream (the sender's writes fail).
	// The transport closes the stream when h returns. cancel removes the
	// handler; streams already open run until their h returns.
	HandleStream(proto string, h func(from string, r io.ReadCloser)) (cancel func())
}

// TransportStats are a transport's counters. Message counts are pubsub
// payloads; stream bytes are direct request/response traffic.
type TransportStats struct {
	Published      uint64 // messages handed to the network by Publish
	PublishedBytes uint64 // their payload bytes
	Received       uint64 // messages passed to deliver (accepted by validate)
	ReceivedBytes  uint64 // their payload bytes
	Rejected       uint64 // incoming messages validate refused
	Dropped        uint64 // messages the router dropped (memnet: injected faults and full queues; p2p: the gossipsub tracer's count)
	Requests       uint64 // direct requests this node opened
	Served         uint64 // direct requests this node answered
	StreamSent     uint64 // bytes written on direct streams (requests, responses and long-lived streams)
	StreamRecv     uint64 // bytes read from direct streams
	StreamsOpened  uint64 // long-lived streams this node opened (OpenStream)
	StreamsServed  uint64 // long-lived streams this node accepted (HandleStream)
	Refused        uint64 // incoming streams refused before anything was read: the peer is not admitted (p2p Config.Admit)
}
