package data

import (
	"errors"
	"fmt"
)

// Package sentinels. Every error this package returns wraps one of them
// (with %w), so callers can branch with errors.Is.
var (
	// ErrBadLine is wrapped by every *LineError: a line (or IDX record)
	// whose label, index, value or shape is invalid.
	ErrBadLine = errors.New("bad line")
	// ErrFormat is wrapped when a file is not in the format it claims or was
	// detected as: bad IDX magic, truncated IDX data, mixed formats, an
	// unreadable compressed stream.
	ErrFormat = errors.New("bad input format")
	// ErrOptions is wrapped by Options.Validate and GenConfig.Validate
	// errors and by Open when the options do not fit the inputs.
	ErrOptions = errors.New("invalid data options")
	// ErrNoMatch is wrapped when an input pattern matches no file.
	ErrNoMatch = errors.New("no input")
	// ErrCorrupt is wrapped when a cache file fails a checksum or a
	// structural check; the cache must be rebuilt.
	ErrCorrupt = errors.New("corrupt cache")
	// ErrStaleCache is wrapped by CheckCache when a cache exists but was
	// built from other inputs or options.
	ErrStaleCache = errors.New("stale cache")
)

// LineError reports a bad line: the file, the 1-based line number (the
// 1-based record number for IDX files), the offending token and the reason.
// Error() reads
//
//	train.svm.gz:17: bad token "3:x": value is not a number
//
// and errors.Is(err, ErrBadLine) holds, as does errors.Is(err, e.Err).
type LineError struct {
	File  string // file as matched by the input pattern
	Line  int64  // 1-based line (or record) number
	Token string // the offending token, quoted in Error
	Err   error  // the reason
}

// Error formats the error as "FILE:LINE: bad token "TOKEN": REASON".
func (e *LineError) Error() string {
	return fmt.Sprintf("%s:%d: bad token %q: %v", e.File, e.Line, e.Token, e.Err)
}

// Unwrap returns ErrBadLine and the reason.
func (e *LineError) Unwrap() []error { return []error{ErrBadLine, e.Err} }
