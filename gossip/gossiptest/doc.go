// Package gossiptest builds hostile and hand-made messages for tests of
// the gossip layer and of the training built on it: a test peer publishes
// them on a real or in-memory transport and checks that honest peers
// reject and count them and that no model changes.
//
// The wire encoder refuses to produce NaN values, so NaN assembles the few
// bytes of such a message by hand, following the format documented in
// gossip/wire (header, sparse section, F32 value block).
//
// Driving it: Garbage, NaN and Message build single wire messages;
// CoreMessage, StateMessage,
// PullMessage, PushMessage and SameCore build and compare training-core
// messages; BenchCoreLink and BenchCoreLinkFanout measure a CoreLink.
package gossiptest
