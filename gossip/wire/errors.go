package wire

import "errors"

// Decode and encode errors wrap exactly one of these sentinels (test with
// errors.Is), so a validator can count rejected messages by reason.
var (
	// ErrMalformed: the bytes do not follow the format (truncated input,
	// bad varint, unknown flag bits, trailing bytes, an invalid prefix code,
	// a corrupt compressed body), or an encoder was given a Sparse that
	// breaks its invariant (indices not strictly ascending, wrong value count).
	ErrMalformed = errors.New("wire: malformed message")
	// ErrTooLarge: a size is over a Limits bound (message, decompressed body,
	// rows, values, width, string, list) or over what the remaining input can hold.
	ErrTooLarge = errors.New("wire: over size limit")
	// ErrVersion: the first byte is not this package's Version.
	ErrVersion = errors.New("wire: unsupported version")
	// ErrKind: the kind byte names no kind this version knows (including the
	// reserved range).
	ErrKind = errors.New("wire: unknown message kind")
	// ErrNonFinite: a value or scale is NaN or ±Inf.
	ErrNonFinite = errors.New("wire: non-finite value")
	// ErrRange: a number is outside its domain: a feature index at or past
	// Limits.Features, an example count past MaxExamples, a fetch range whose
	// end is before its start.
	ErrRange = errors.New("wire: value out of range")
)
