// Package wire is the wire format of gossiptrain: every message peers
// exchange, over gossipsub or direct libp2p streams, is encoded and decoded
// here and nowhere else. It is pure Go: no libp2p, no I/O, no goroutines.
//
// # Driving it
//
// Each goroutine that sends or receives keeps its own Codec (a Codec is not
// safe for concurrent use) and reuses its buffers:
//
//	cfg := wire.DefaultConfig()            // the CLI sets Values/Compress/Limits from flags
//	cfg.Limits.Features = layout.Features  // reject indices the model does not have
//	codec, err := cfg.NewCodec()
//
//	// a worker, once per owner per step:
//	codec.SetFeedback(fb)                  // lossy formats: error feedback on the sender
//	n, err := codec.SplitGrad(hdr, examples, width, &grad, publish) // publish copies or sends msg
//	hdr.Seq += uint64(n)
//
//	// a receiver, for every message:
//	var m wire.Message                     // reused: decoding allocates nothing in steady state
//	if err := codec.Decode(data, &m); err != nil { count(err) } // errors.Is(err, wire.ErrRange), ...
//	switch m.Kind { case wire.KindGrad: owner.Add(m.Sender, m.Clock, m.Examples, &m.Sparse) ... }
//
// Decode validates everything it reads, so the gossip validator can rely on
// an accepted Message: version, kind, flags, every length checked against
// Limits and against the remaining input before anything is allocated,
// strictly ascending indices below Limits.Features, finite values, no
// trailing bytes. Errors wrap exactly one sentinel (ErrMalformed,
// ErrTooLarge, ErrVersion, ErrKind, ErrNonFinite, ErrRange) so rejections
// can be counted by reason. A hostile message costs at most a small
// multiple of its own size to decode, or, when compressed, the configured
// MaxMessage (the decompressed body is bounded before decompressing; a
// zstd bomb stops at the bound).
//
// # Messages
//
// Every message starts with a header (Header): version byte, kind byte,
// flags byte (value format and compressor, so a receiver needs no
// configuration), job, sender peer ID, clock, ring epoch, per-sender
// sequence number, part i of n. The header is never compressed. Kinds are
// an append-only list whose numbers are protocol (see Kind): Grad (a
// worker's summed gradient for one owner), Params (an owner's new values for
// the rows it changed), Beat (membership heartbeat), Fetch and FetchReply
// (repair of one sender's stream, named by origin and topic, over a direct
// stream; messages there are framed by AppendFrame and ReadFrame),
// ParamsAck (Params plus the owner's progress, Ack: the through clock and
// the newest clock applied per worker, which training waits on and flow
// control reads), and a reserved range for handoff, checkpoint and model
// copy. A body larger than MaxMessage (gossipsub's 1 MiB by default) is
// split into parts by SplitGrad/SplitParams, sized exactly by encoding,
// never by dropping rows.
//
// # The sparse body
//
// Gradients and parameters travel as model.Sparse rows. The encoding does
// the compressing, because a generic compressor finds almost nothing in
// hashed sparse indices and float mantissas:
//
//   - Indices: each owner's rows come from its own shards (k mod 256 in a
//     fixed subset), so the encoder maps indices onto the residues actually
//     present (an order-preserving map, one bit per residue on the wire),
//     which removes log2(2^b/L) bits per index (2 bits for 4 owners), then
//     Rice-codes the gaps with the parameter that minimises the message's
//     exact size: about 15.4 bits per index, residue map included, for ~430
//     indices out of 2^24, against 24 for byte-aligned varint gaps. The
//     format cannot express a non-ascending list.
//   - Values: F32 is lossless: sign and mantissa raw, the exponent with a
//     per-message canonical Huffman code (gradient exponents take ~2.5
//     bits, not 8). F16 rounds to IEEE half (own converter, round to nearest
//     even, subnormals, saturating at ±65504) and codes it the same way. I8
//     sends q = round(v/scale), scale = max|v|/127 per message, as a
//     Huffman-coded bit length of |q| plus its low bits and a sign.
//   - Compression: none, zstd (no checksum, encoder and decoder per Codec,
//     concurrency 1) or s2, applied to the body only when it makes the body
//     smaller; the flags say which was used.
//   - Error feedback (Feedback): the sender keeps original - decoded per
//     parameter value and adds it to the row's next gradient, so receivers'
//     sums track the truth within one quantum instead of drifting.
//
// Key-list caching (Li et al., "Scaling Distributed Machine Learning with
// the Parameter Server", OSDI 2014) is not done: it pays when the same key
// list is sent again (a worker pulling the keys it pushed), but here every
// step's gradient has a new key list and parameters are broadcast, not
// pulled; a flags bit is free for it should a pull mode come.
//
// # Figures
//
// Bytes on the wire per gradient nonzero, headers included (52-byte peer
// ID, job "criteo"), for the summed gradients of 8 batches of 100 rows of a
// Criteo-like set (39 Zipf(1.1) one-hot fields with the Kaggle set's
// cardinalities hashed into 2^24 features, plus the bias: 32000 nonzeros
// before merging duplicates, 13865 after), each split into 4 owners by
// shard k & 255. Naive uint32 + float32 is 8 bytes.
//
//	values  bytes/nnz (none, zstd, s2)  encode ns/nnz  decode ns/nnz
//	f32     5.41  5.41  5.41            38             17-22
//	f16     3.79  3.79  3.79            59             14-21
//	i8      2.91  2.91  2.91            82             16-24
//
// zstd and s2 would make these bodies larger (by 0.2-0.8%), so the codec
// sends them uncompressed; they only cost encode time. Encode includes error
// feedback on a dense 2^24-row residual store (a cache miss per row); every
// path allocates nothing in steady state. Measured on a shared 2-core AMD
// EPYC VM with
//
//	go test ./gossip/wire -run XXX -bench CriteoGrad -benchtime 1s
//
// and held as a test by TestCriteoTargets (targets 6, 4 and 3 bytes/nnz).
package wire
