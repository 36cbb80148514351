package data

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// compression is picked by file extension.
type compression uint8

const (
	compNone compression = iota
	compGzip
	compZstd
)

func compressionOf(path string) compression {
	p := strings.ToLower(path)
	switch {
	case strings.HasSuffix(p, ".gz"):
		return compGzip
	case strings.HasSuffix(p, ".zst"):
		return compZstd
	}
	return compNone
}

// stripCompression removes a .gz or .zst suffix.
func stripCompression(path string) string {
	switch compressionOf(path) {
	case compGzip:
		return path[:len(path)-3]
	case compZstd:
		return path[:len(path)-4]
	}
	return path
}

// countingReader counts the bytes read from the disk.
type countingReader struct {
	r io.Reader
	n *int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// stream is one opened input: the decompressed bytes in r.
type stream struct {
	name string // for errors: the path, or "stdin"
	src  *source
	r    io.Reader
	zr   *zstd.Decoder
}

// Compression magic numbers (RFC 1952; RFC 8878).
var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// compressionOfInput is the compression of an input: by its name's suffix
// (.gz, .zst), else by the magic number its bytes start with, so that a
// compressed stream on standard input is decompressed too.
func compressionOfInput(path string, head []byte) compression {
	if c := compressionOf(path); c != compNone {
		return c
	}
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		return compGzip
	case bytes.HasPrefix(head, zstdMagic):
		return compZstd
	}
	return compNone
}

// IsCompressed reports whether an input whose first bytes are head is
// read through a decompressor (by its name or its magic number), as Open
// reads it.
func IsCompressed(path string, head []byte) bool {
	return compressionOfInput(path, head) != compNone
}

// openStream opens path ("-" is standard input) and the decompressor its
// name or its first bytes ask for, adding the bytes read to *nread.
func openStream(path string, nread *int64) (*stream, error) {
	src, err := openSource(path)
	if err != nil {
		return nil, err
	}
	name := displayName(path)
	s := &stream{name: name, src: src}
	raw := countingReader{src.r, nread}
	switch compressionOfInput(path, src.peek(4)) {
	case compNone:
		s.r = raw
	case compGzip:
		// gzip wants an io.ByteReader; a large buffer keeps the syscalls few.
		zr, err := gzip.NewReader(bufio.NewReaderSize(raw, 256<<10))
		if err != nil {
			src.Close()
			if errors.Is(err, gzip.ErrHeader) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%w: %s: not a gzip file, though its name ends in .gz (%v)", ErrFormat, name, err)
			}
			return nil, fmt.Errorf("%w: %s: %v", ErrFormat, name, err)
		}
		s.r = zr
	case compZstd:
		zr, err := zstd.NewReader(bufio.NewReaderSize(raw, 256<<10), zstd.WithDecoderConcurrency(1))
		if err != nil {
			src.Close()
			return nil, fmt.Errorf("%w: %s: %v", ErrFormat, name, err)
		}
		s.r, s.zr = zr, zr
	}
	return s, nil
}

// Read reads decompressed bytes; a decompression failure names the file.
func (s *stream) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return n, fmt.Errorf("%w: %s: truncated: %v", ErrFormat, s.name, err)
		}
		if s.zr != nil && errors.Is(err, zstd.ErrMagicMismatch) {
			return n, fmt.Errorf("%w: %s: not a zstd file, though its name ends in .zst (%v)", ErrFormat, s.name, err)
		}
		var pe *os.PathError
		if !errors.As(err, &pe) {
			return n, fmt.Errorf("%w: %s: %v", ErrFormat, s.name, err)
		}
	}
	return n, err
}

func (s *stream) Close() error {
	if s.zr != nil {
		s.zr.Close()
	}
	return s.src.Close()
}

// lineReader splits a stream into lines over one large reusable buffer.
// The lines it returns alias the buffer and stay valid until the next call.
type lineReader struct {
	r        io.Reader
	name     string // file name for errors
	buf      []byte
	pos, end int
	eof      bool
	err      error
	line     int64 // number of the last line returned (1-based)
}

func newLineReader(size int) *lineReader {
	return &lineReader{buf: getBuf(size)}
}

// release returns the buffer to the pool; the reader is unusable after.
func (lr *lineReader) release() {
	putBuf(lr.buf)
	lr.buf = nil
	lr.pos, lr.end = 0, 0
	lr.err = errClosed
}

// bufPool recycles the large read buffers (line buffers, cache blocks), so
// a trainer that opens its inputs again every epoch does not make the
// garbage collector sweep megabytes each time.
var bufPool sync.Pool

// getBuf returns a buffer of n bytes, from the pool when one is big enough.
func getBuf(n int) []byte {
	if p, ok := bufPool.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]byte, n)
}

// putBuf gives a buffer back; its contents are garbage from now on.
func putBuf(b []byte) {
	if cap(b) > 0 {
		bufPool.Put(&b)
	}
}

// reset starts reading r (the file name) from line 1, keeping the buffer.
func (lr *lineReader) reset(r io.Reader, name string) {
	lr.r = r
	lr.name = name
	lr.pos, lr.end = 0, 0
	lr.eof = false
	lr.err = nil
	lr.line = 0
}

// next returns the next line without its '\n' and any '\r' before it. It
// returns false at the end of the stream or on an error (in lr.err).
func (lr *lineReader) next() ([]byte, bool) {
	for {
		if i := bytes.IndexByte(lr.buf[lr.pos:lr.end], '\n'); i >= 0 {
			line := lr.buf[lr.pos : lr.pos+i]
			lr.pos += i + 1
			lr.line++
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			return line, true
		}
		if lr.eof || lr.err != nil {
			if lr.err == nil && lr.pos < lr.end {
				line := lr.buf[lr.pos:lr.end]
				lr.pos = lr.end
				lr.line++
				if n := len(line); n > 0 && line[n-1] == '\r' {
					line = line[:n-1]
				}
				return line, true
			}
			return nil, false
		}
		lr.fill()
	}
}

// ahead returns up to n bytes of the buffer after the last line returned,
// without reading more (for error messages).
func (lr *lineReader) ahead(n int) []byte {
	return lr.buf[lr.pos:min(lr.pos+n, lr.end)]
}

// fill moves the partial line to the front of the buffer, grows the buffer
// when the line fills it, and reads more.
func (lr *lineReader) fill() {
	if lr.pos > 0 {
		lr.end = copy(lr.buf, lr.buf[lr.pos:lr.end])
		lr.pos = 0
	}
	if lr.end == len(lr.buf) {
		if len(lr.buf) >= maxLine {
			lr.err = fmt.Errorf("%w: %s:%d: line is longer than %d bytes", ErrFormat, lr.name, lr.line+1, maxLine)
			return
		}
		nb := make([]byte, min(2*len(lr.buf), maxLine))
		copy(nb, lr.buf[:lr.end])
		lr.buf = nb
	}
	for range 100 {
		n, err := lr.r.Read(lr.buf[lr.end:])
		lr.end += n
		if err == io.EOF {
			lr.eof = true
			return
		}
		if err != nil {
			lr.err = err
			return
		}
		if n > 0 {
			return
		}
	}
	lr.err = io.ErrNoProgress
}
