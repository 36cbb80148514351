package wire

import (
	"fmt"
	"strings"
)

// Values is how the values of a sparse body travel. The choice is written
// into every message's flags, so a receiver needs no configuration.
type Values uint8

// Value formats. The numbers are protocol (two bits of the flags byte).
const (
	// F32 sends float32 values losslessly: sign and 23-bit mantissa raw, the
	// 8-bit exponent with a per-message Huffman code (about 26-27 bits a value
	// on gradients).
	F32 Values = 0
	// F16 rounds values to IEEE half precision (round to nearest even,
	// saturating at ±65504) and sends sign and 10-bit mantissa raw, the 5-bit
	// exponent Huffman-coded (about 13-14 bits a value).
	F16 Values = 1
	// I8 sends q = round(v/scale) in [-127, 127] with one float32 scale per
	// message, scale = max|v|/127; |q| travels as a Huffman-coded bit length
	// plus its low bits, then a sign bit (about 5-7 bits a value).
	I8 Values = 2
	// Raw sends float32 values losslessly as 4 little-endian bytes and the
	// indices as byte-aligned uvarint gaps, with no entropy coding: about
	// 7 bytes a row where F32 takes 5.4, for a fraction of the CPU
	// (BenchmarkCriteoGrad). For links that are not the bottleneck, and
	// peers whose CPU is. With Raw, parameters and shard state travel raw
	// too (they are lossless either way).
	Raw Values = 3
)

var valuesNames = [...]string{F32: "f32", F16: "f16", I8: "i8", Raw: "raw"}

// String returns the flag spelling: "f32", "f16", "i8" or "raw".
func (v Values) String() string {
	if int(v) < len(valuesNames) {
		return valuesNames[v]
	}
	return fmt.Sprintf("values-%d", uint8(v))
}

// Lossy reports whether decoded values may differ from the encoded ones.
func (v Values) Lossy() bool { return v == F16 || v == I8 }

// ParseValues parses "f32", "f16", "i8" or "raw" (case-insensitive).
func ParseValues(s string) (Values, error) {
	for i, n := range valuesNames {
		if strings.EqualFold(s, n) {
			return Values(i), nil
		}
	}
	return 0, fmt.Errorf("%w: values %q: want f32, f16, i8 or raw", ErrRange, s)
}

// Compress is the general-purpose compressor applied to a message body
// after the sparse encoding. The header is never compressed, so a validator
// can read kind, job and sender without decompressing.
type Compress uint8

// Compressors. The numbers are protocol (two bits of the flags byte).
const (
	None Compress = 0 // body as encoded
	Zstd Compress = 1 // klauspost/compress zstd frame, no checksum
	S2   Compress = 2 // klauspost/compress s2 block
)

var compressNames = [...]string{None: "none", Zstd: "zstd", S2: "s2"}

// String returns the flag spelling: "none", "zstd" or "s2".
func (c Compress) String() string {
	if int(c) < len(compressNames) {
		return compressNames[c]
	}
	return fmt.Sprintf("compress-%d", uint8(c))
}

// ParseCompress parses "none", "zstd" or "s2" (case-insensitive).
func ParseCompress(s string) (Compress, error) {
	for i, n := range compressNames {
		if strings.EqualFold(s, n) {
			return Compress(i), nil
		}
	}
	return 0, fmt.Errorf("%w: compress %q: want none, zstd or s2", ErrRange, s)
}

// MaxExamples bounds the examples count of a Grad message, so that sums of
// counts cannot overflow an int64 anywhere downstream.
const MaxExamples = 1 << 48

// Limits bounds what a Codec encodes and accepts. Every length read from a
// message is checked against these and against the remaining input before
// anything is allocated.
type Limits struct {
	// MaxMessage bounds a whole message on the wire in bytes, and also a
	// body after decompression. SplitGrad/SplitParams cut bodies to fit.
	MaxMessage int
	// MaxRows bounds the rows of one sparse body.
	MaxRows int
	// MaxValues bounds rows x width of one sparse body: with MaxRows it caps
	// what a decoder allocates for one message at 4*(MaxRows+MaxValues) bytes.
	MaxValues int
	// MaxWidth bounds the values per row (1 for logistic regression, the
	// number of classes for softmax).
	MaxWidth int
	// MaxString bounds a job name, peer ID or address in bytes.
	MaxString int
	// MaxList bounds a list: members or addresses of a heartbeat, sequence
	// numbers of a fetch range or reply.
	MaxList int
	// Features, when > 0, is the number of parameter rows of the model
	// (model.Layout.Features): a decoded index >= Features is ErrRange.
	// 0 accepts any uint32 index.
	Features uint64
}

// DefaultLimits returns the limits gossiptrain runs with.
func DefaultLimits() Limits {
	return Limits{
		// go-libp2p-pubsub's default maximum message size is 1 MiB; a
		// larger message would be dropped by gossipsub itself.
		MaxMessage: 1 << 20,
		// The fewest bits a row can take is about 2 (a gap of 0 and a
		// 1-bit value code): 1 MiB cannot hold more than ~4M rows, and no
		// real gradient body gets near 256Ki rows under 1 MiB of f32.
		MaxRows: 1 << 18,
		// 1Mi float32 = 4 MiB: a decoder's worst case per message.
		MaxValues: 1 << 20,
		// Softmax over up to 1024 classes.
		MaxWidth: 1024,
		// A libp2p peer ID string is 52 bytes; multiaddrs with DNS names
		// stay well under 256.
		MaxString: 256,
		// Up to 4096 members in a heartbeat or sequence numbers in a repair.
		MaxList: 4096,
	}
}

// Validate reports the first field that is out of its domain.
func (l Limits) Validate() error {
	switch {
	case l.MaxString < 1 || l.MaxString > 1<<16:
		return fmt.Errorf("%w: Limits.MaxString %d, want 1..65536", ErrRange, l.MaxString)
	case l.MaxMessage < 2*l.MaxString+256 || l.MaxMessage > 1<<28:
		return fmt.Errorf("%w: Limits.MaxMessage %d, want %d..%d (room for a header with two MaxString strings)", ErrRange, l.MaxMessage, 2*l.MaxString+256, 1<<28)
	case l.MaxRows < 1 || l.MaxRows > 1<<28:
		return fmt.Errorf("%w: Limits.MaxRows %d, want 1..%d", ErrRange, l.MaxRows, 1<<28)
	case l.MaxValues < l.MaxRows || l.MaxValues > 1<<28:
		return fmt.Errorf("%w: Limits.MaxValues %d, want MaxRows (%d)..%d", ErrRange, l.MaxValues, l.MaxRows, 1<<28)
	case l.MaxWidth < 1 || l.MaxWidth > 1<<16:
		return fmt.Errorf("%w: Limits.MaxWidth %d, want 1..65536", ErrRange, l.MaxWidth)
	case l.MaxList < 1 || l.MaxList > 1<<20:
		return fmt.Errorf("%w: Limits.MaxList %d, want 1..%d", ErrRange, l.MaxList, 1<<20)
	case l.Features > 1<<32:
		return fmt.Errorf("%w: Limits.Features %d, want at most 2^32 (indices are uint32)", ErrRange, l.Features)
	}
	return nil
}

// Config is the package's configuration as the CLI sets it from flags.
type Config struct {
	// Values is the value format of Grad and Params(Ack) bodies (--wire-values).
	Values Values
	// Compress is the compressor applied to bodies (--wire-compress). It is
	// a ceiling: a body that does not shrink goes uncompressed.
	Compress Compress
	// Limits bound every message encoded and accepted.
	Limits Limits
}

// DefaultConfig returns lossless float32 values, no general-purpose
// compression (it gains little on this encoding, see the package doc) and
// DefaultLimits.
func DefaultConfig() Config {
	return Config{Values: F32, Compress: None, Limits: DefaultLimits()}
}

// Validate reports the first field that is out of its domain.
func (c Config) Validate() error {
	if c.Values > Raw {
		return fmt.Errorf("%w: Config.Values %d, want f32, f16, i8 or raw", ErrRange, uint8(c.Values))
	}
	if c.Compress > S2 {
		return fmt.Errorf("%w: Config.Compress %d, want none, zstd or s2", ErrRange, uint8(c.Compress))
	}
	return c.Limits.Validate()
}

// NewCodec returns a codec for cfg, or cfg's validation error.
func (c Config) NewCodec() (*Codec, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return NewCodec(c.Values, c.Compress, c.Limits), nil
}
