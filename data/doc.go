// Package data reads training data into CSR batches and generates
// synthetic click data with a planted model.
//
// # Reading loop
//
// Open resolves the input patterns, picks the format of each file and
// returns a Source; the trainer keeps one Batch and calls Next until io.EOF:
//
//	src, err := data.Open([]string{"train-*.svm.gz"}, data.Options{Dim: 1 << 24, Part: 2, Parts: 4})
//	if err != nil { ... }
//	defer src.Close()
//	var b data.Batch
//	for {
//		n, err := src.Next(&b, 100)
//		if err == io.EOF {
//			break
//		}
//		if err != nil { ... } // a *LineError names file, line and token
//		train(b.Labels[:n], b.Offsets, b.Indices, b.Values)
//	}
//
// Next reuses the batch's slices, so once they have grown to the largest
// batch the loop allocates nothing. Files are streamed through one read
// buffer (Options.BufferSize, 1 MiB by default) and never loaded whole.
// OpenCached adds a binary cache of the parsed rows so later epochs and
// runs skip text parsing; Scan makes one pass to infer Dim and Classes.
//
// Every row a Source returns keeps the CSR invariants: indices strictly
// ascending and below Dim (MaxDim when Dim is 0), values finite, labels 0
// or 1 (binary) or 0..Classes-1, importance weights (Batch.Weights, empty
// when every row weighs 1) finite and >= 0.
//
// # Standard input and streams
//
// The input "-" (Stdin) is standard input, as in `cat data | vw`;
// /dev/stdin, named pipes and a shell's <(...) are streams too. Format
// detection peeks at a stream's first line through a buffer and leaves
// every byte to the reader, so rows read through a pipe are the rows read
// from the file (TestStreamsReadLikeFiles); gzip and zstd streams are
// recognised by their magic number. A stream is read once: a second Open
// of it fails naming it, unless Spool copied it to a temporary file
// first; OpenCached of a stream builds the cache on the first pass and
// later passes of the same process read the cache. Errors and Places name
// standard input "stdin".
//
// # Formats
//
// libsvm/svmlight: "label idx:val idx:val ... # comment". Indices are
// 1-based (Options.ZeroBased for 0-based files) and may come in any order;
// rows are sorted on reading and an index that appears twice makes the line
// bad. "qid:N" is ignored; blank lines and "#" lines are not rows. Values
// are any finite float ("1", "0.5", "-3e-2"); explicit zeros are kept. The
// parser works on the bytes of the read buffer with fast paths for integer
// indices, the value "1" and short decimals (Clinger's exact float32 path),
// falling back to strconv.ParseFloat without copying.
//
// Criteo TSV (display-advertising challenge): 40 tab-separated columns,
// label, I1..I13 (integers, possibly negative) and C1..C26 (categorical,
// usually 8 hex digits); any of I and C may be empty (missing). Each
// present column becomes one feature of value 1 by the hashing trick:
//
//	feature = xxhash64(key) % Dim
//	key     = [field] [kind] [payload]
//
// where field is the column number (1..13 for I1..I13, 14..39 for
// C1..C26), and for integer v either kind 'S' with payload v (v <= 2,
// 8 bytes little-endian) or kind 'L' with payload floor(ln(v)^2) (v > 2), the
// bucketing of the winning Kaggle solution (Juan et al., RecSys 2016); for
// a categorical token kind 'C' and the token's bytes. The buckets come from
// an exact threshold table, so every machine hashes alike. Features that
// collide within a row merge into one with value 2 (or more). CriteoFeature
// computes one feature by the same rule.
//
// VW text (Vowpal Wabbit): "label [weight] ['tag]|namespace[:scale]
// feature[:value] ...", features hashed into Dim with MurmurHash3 x86_32
// exactly as VW's default hashing does (see vw.go for the definition,
// VWHash and VWFeature); with a power-of-two Dim = 2^b the indices are
// VW's for -b b. A '|' with no name right after it is VW's default
// namespace. Zero values are dropped, and features that meet at one index
// in a row are summed into one (as VW's linear model sums them).
//
// Interactions (Options.Interactions; VW's -q and --cubic): each entry
// names 2 or 3 namespaces by their first character; every row also gets
// one feature per combination of one feature from each named namespace,
// at InteractionHash of their 32-bit hashes (VW's FNV combination, h1 *
// 16777619 ^ h2) mod Dim, with the product of their values. A namespace
// crossed with itself gives the pairs i <= j, and each interaction's
// characters are sorted, as VW does by default. For Criteo the columns are
// the namespaces: a..m for I1..I13 and A..Z for C1..C26, each column's
// 32-bit hash being the low half of its xxhash64. libsvm and IDX input
// have no namespaces: interactions with them are an error.
//
// Importance weights: VW's label section carries one; a libsvm label token
// may carry one as "label:weight" (the convention of dmlc-core's libsvm
// parser, XGBoost's text input; liblinear's own instance weights are a
// separate file, which is not read). Criteo and IDX rows weigh 1. A weight
// must be a finite number >= 0. Read unlabelled (NoLabels), a libsvm first
// token "L:W" is a feature unless L cannot be one (a sign, or 0 in 1-based
// data): predicting on weighted libsvm rows needs their labels, or the
// weights taken out.
//
// IDX (MNIST, Fashion-MNIST): an images file "*-images-idx3-ubyte[.gz]"
// (magic 0x00000803, count, rows, cols, one byte per pixel) and a labels
// file (magic 0x00000801, count, one byte per label) found beside it by the
// standard name or given in Options.Labels. Pixels are scaled to [0, 1]
// and only nonzero pixels are emitted; feature = pixel number, so 28x28
// images have Dim 784.
//
// Cache (*.gtc): see OpenCached and the layout in cache.go: a JSON header
// naming the inputs and options, blocks of rows (uvarint labels and
// lengths, delta-uvarint indices, float32 values left out when all are 1)
// each with an xxhash64 checksum, and a trailer with the totals. A
// corrupt or truncated cache is an error naming the file, never wrong rows.
//
// Files ending in .gz (klauspost gzip) or .zst (klauspost zstd), and
// inputs that start with those formats' magic numbers, are decompressed
// while read; Stats.Bytes counts the compressed bytes.
//
// # Labels
//
// Binary (Classes 0): 1 and +1 map to 1, 0 and -1 to 0; anything else is a
// bad line. Multiclass (Classes >= 2): an integer L with 0 <= L-LabelBase <
// Classes is class L-LabelBase. See docs/contracts.md.
//
// # Bad lines and partitions
//
// A bad line stops the source with a *LineError ("FILE:LINE: bad token
// "TOKEN": REASON", wrapping ErrBadLine); with Options.SkipBad it is counted
// in Stats.BadLines and skipped. Part/Parts keep every Parts-th data row
// over all inputs in order (IDX and cache: every Parts-th record); rows of
// other parts are skipped without being parsed, so a bad line in another
// part is not reported.
//
// Values must be finite float32s: NaN, infinities and numbers beyond
// float32 range (1e39) are bad tokens, as is a libsvm value over
// Options.MaxValue when it is set (TestLibSVMBadLines). A label is a
// number too: "inf" or "1e400" is not one. Every batch says where its rows
// were read (Batch.Span), so a trainer can name the lines of a batch whose
// finite values still overflow its gradient (3e38 + 3e38).
//
// # Speed
//
// Measured on one pinned core (GOMAXPROCS=1) of a shared 2-core VM with
// the benchmarks in bench_test.go, on generator output (39 one-hot
// features, about 390 bytes a line): libsvm text 1.0 GB/s, 2.5-2.8M rows/s;
// the same gzipped 150-170 MB/s of text, about 0.4M rows/s; Criteo TSV
// 0.3-0.38M rows/s; the cache of those rows 7.5M rows/s (about 3x plain
// text, 18x gzip, 20x Criteo). VW text of 39 string features in two
// namespaces (about 450 bytes a line) reads at 0.3-0.5M rows/s, and at
// 86-95k rows/s (36-40M nonzeros/s) with their quadratic interaction, 380
// more features a row (BenchmarkVW); Criteo with four interactions of
// columns at 0.3M rows/s (BenchmarkCriteoInteractions), on the same VM
// under load from other processes. Next allocates nothing in
// steady state in every format, with interactions and weights too
// (TestNextAllocatesNothing).
//
// # Synthetic data
//
// Generate writes a Criteo-like data set from a planted logistic model so
// that learners can be checked against the best possible log-loss
// (GenMeta.PlantedTestLogLoss). Each row has one value in each of Fields
// fields. Field vocabularies are log-uniform in size: 4..400 values for the
// first 13 (integer-like) fields and 10..MaxVocab for the others (MaxVocab
// defaults to half of a field's index block, 131072 for the default 2^24
// features and 39 fields). Values are drawn by popularity rank j with
// probability proportional to (j+1)^-1.2 (alias method, PCG seeded from
// Seed; one PCG stream each for the model, the bias calibration, the
// training rows and the test rows, so the model and test set do not depend
// on Rows). A value whose probability is at least MinShare (2e-4: 200 or
// more occurrences in 1M rows) carries a weight drawn from N(0, s^2) with
// probability 0.5, where s is 0.5 times a per-field factor in [0.25, 1];
// rarer values carry one with probability 0.01 and a quarter of the scale.
// So most weights are zero, most of the signal sits on values a learner
// sees often, and the rare-value weights add a little unlearnable noise, as
// in real click logs. The bias is set by bisection so that 25% of labels
// are positive, and labels are drawn from the logistic model.
//
// With the defaults (1M rows, 2^24 features, 39 fields, seed 1) the planted
// test log-loss is 0.446 (base rate alone: 0.562) and the planted AUC 0.80;
// one pass of AdaGrad (batch 100, learning rate 0.1, L2 1e-7) reaches
// within 1.6% of the planted log-loss, and within 2.1% for each of seeds
// 1-8 (TestGeneratedSetIsLearnable checks seed 1 against the 3% target).
// Generation runs at about 400k rows/s on one core.
//
// libsvm output maps value j of field f to the distinct feature
// f*B + ((j*m_f + c_f) mod B), B the field's block (a power of two), m_f
// odd, written 1-based and sorted. Criteo output (39 fields) writes value j
// of an integer field as the smallest integer of the j-th Criteo bucket and
// of a categorical field as 8 hex digits of a bijective scramble of j, so
// the Criteo reader hashes every value to its own feature (up to hash
// collisions in Dim).
package data
