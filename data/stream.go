package data

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Stdin is the input name that stands for standard input ("-", as in
// `cat data | vw` and most Unix tools). It must be the only input of an
// Open, Scan or OpenCached; it is never globbed. Errors and Places name
// it "stdin".
const Stdin = "-"

// stdinName is how errors and places name standard input.
const stdinName = "stdin"

// streamBufSize is the buffer of a stream that can be read only once:
// format detection peeks into it (up to all of it) without consuming.
const streamBufSize = 1 << 20

// onceStream is an input that can be read only once: standard input, a
// named pipe, a /dev/fd/N of a shell's process substitution. Detection
// peeks into br, so the bytes it looked at are still the stream's start
// when the rows are read (TestStreamsReadLikeFiles).
type onceStream struct {
	f       *os.File
	br      *bufio.Reader
	stdin   bool      // f is the process's standard input: never closed here
	taken   bool      // a reader has started on it: it cannot be read again
	spool   string    // a copy made by Spool, read instead, any number of times
	created time.Time // identifies this process's stream in a cache header
	format  Format    // as detected, so a later Open of a taken stream knows it
}

var (
	streamsMu sync.Mutex
	// streams holds the once-only inputs met so far, by key: Stdin for
	// standard input whatever name reached it ("-", /dev/stdin,
	// /dev/fd/0), else the absolute path.
	streams = map[string]*onceStream{}
)

// streamKey tells whether path names an input that can be read only once
// and, if so, its key in streams. Standard input is a stream unless it is
// a regular file (`< file`), which is reopened like any file.
func streamKey(path string) (string, bool, error) {
	if path == Stdin {
		if st, err := os.Stdin.Stat(); err == nil && st.Mode().IsRegular() {
			return "", false, nil
		}
		return Stdin, true, nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", false, err
	}
	if st.Mode().IsRegular() || st.IsDir() {
		return "", false, nil
	}
	if in, err := os.Stdin.Stat(); err == nil && os.SameFile(st, in) {
		return Stdin, true, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false, err
	}
	return abs, true, nil
}

// regularPath is the file to open for path: path itself, or, for Stdin
// when standard input is a regular file, that file (reopened at its
// start).
func regularPath(path string) string {
	if path == Stdin {
		return "/dev/stdin"
	}
	return path
}

// displayName is how errors and places name an input.
func displayName(path string) string {
	if path == Stdin {
		return stdinName
	}
	return path
}

// getStream returns the registry entry of a once-only input, opening it
// on first use. A test that replaces os.Stdin gets a fresh entry.
func getStream(key, path string) (*onceStream, error) {
	streamsMu.Lock()
	defer streamsMu.Unlock()
	s := streams[key]
	if key == Stdin && s != nil && s.f != os.Stdin {
		s = nil
	}
	if s != nil {
		return s, nil
	}
	s = &onceStream{created: time.Now()}
	if key == Stdin {
		s.f, s.stdin = os.Stdin, true
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		s.f = f
	}
	s.br = bufio.NewReaderSize(s.f, streamBufSize)
	streams[key] = s
	return s, nil
}

// IsStream reports whether the input name stands for data that can be read
// only once: standard input ("-", /dev/stdin) when it is a pipe or a
// terminal, a named pipe, a shell's <(...). A command that reads its data
// more than once (a scan, then epochs) must Spool such an input first.
// Once spooled, it is no longer a stream.
func IsStream(name string) bool {
	key, once, err := streamKey(name)
	if err != nil || !once {
		return false
	}
	streamsMu.Lock()
	defer streamsMu.Unlock()
	s := streams[key]
	return s == nil || s.spool == "" || (key == Stdin && s.f != os.Stdin)
}

// Spool copies the stream an input name stands for (see IsStream) into a
// temporary file in dir (the system's temporary directory when empty), so
// that Open, Scan and OpenCached can read it any number of times, still
// naming it as before in errors. Bytes already peeked by format detection
// are part of the copy. It returns the bytes copied and a function that
// removes the copy; call it when done. A name that is not a stream is left
// alone (0 bytes, a remove that does nothing).
func Spool(name, dir string) (int64, func() error, error) {
	nothing := func() error { return nil }
	key, once, err := streamKey(name)
	if err != nil {
		return 0, nothing, err
	}
	if !once {
		return 0, nothing, nil
	}
	s, err := getStream(key, name)
	if err != nil {
		return 0, nothing, err
	}
	if s.spool != "" {
		return 0, nothing, nil
	}
	if s.taken {
		return 0, nothing, readTwice(name)
	}
	tmp, err := os.CreateTemp(dir, "gossiptrain-stdin-*")
	if err != nil {
		return 0, nothing, fmt.Errorf("copying %s to a temporary file: %w", displayName(name), err)
	}
	s.taken = true
	n, err := io.Copy(tmp, s.br)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return n, nothing, fmt.Errorf("copying %s to %s: %w", displayName(name), tmp.Name(), err)
	}
	streamsMu.Lock()
	s.spool = tmp.Name()
	streamsMu.Unlock()
	if !s.stdin {
		s.f.Close()
	}
	path := tmp.Name()
	return n, func() error {
		streamsMu.Lock()
		if streams[key] == s {
			delete(streams, key)
		}
		streamsMu.Unlock()
		return os.Remove(path)
	}, nil
}

func readTwice(name string) error {
	return fmt.Errorf("%w: %s can be read only once and was read already: give the data as a file, "+
		"or read it once (standard input cannot be both --train and --test)", ErrOptions, displayName(name))
}

// source is an input opened for reading raw bytes, before decompression.
type source struct {
	r      io.Reader
	closer io.Closer // nil for standard input
	// peek returns up to n of the first bytes without consuming them.
	peek func(n int) []byte
}

// openSource opens the raw bytes of an input: a regular file, a spooled
// copy, or a stream taken for reading (it cannot be opened again).
func openSource(path string) (*source, error) {
	key, once, err := streamKey(path)
	if err != nil {
		return nil, err
	}
	if !once {
		return openFileSource(regularPath(path))
	}
	s, err := getStream(key, path)
	if err != nil {
		return nil, err
	}
	if s.spool != "" {
		return openFileSource(s.spool)
	}
	streamsMu.Lock()
	defer streamsMu.Unlock()
	if s.taken {
		return nil, readTwice(path)
	}
	s.taken = true
	src := &source{r: s.br, peek: func(n int) []byte { b, _ := s.br.Peek(n); return b }}
	if !s.stdin {
		src.closer = s.f
	}
	return src, nil
}

func openFileSource(path string) (*source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &source{r: f, closer: f, peek: func(n int) []byte {
		b := make([]byte, n)
		k, _ := f.ReadAt(b, 0)
		return b[:k]
	}}, nil
}

func (s *source) Close() error {
	if s.closer == nil {
		return nil
	}
	return s.closer.Close()
}

// peekHead returns the start of an input without consuming any of it: up
// to streamBufSize bytes of a stream, read until done says enough (or the
// stream ends), or up to max bytes of a file. The stream is opened (and
// stays open for the reader) but not taken.
func peekHead(path string, max int, done func([]byte) bool) ([]byte, error) {
	key, once, err := streamKey(path)
	if err != nil {
		return nil, err
	}
	if once {
		s, err := getStream(key, path)
		if err != nil {
			return nil, err
		}
		if s.spool != "" {
			return peekFile(s.spool, max)
		}
		if s.taken {
			return nil, readTwice(path)
		}
		return peekStream(s.br, done)
	}
	return peekFile(regularPath(path), max)
}

func peekFile(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, max)
	k, err := io.ReadFull(f, b)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, err
	}
	return b[:k], nil
}

// peekStream peeks at br's first bytes, reading more only while done says
// they are not enough: a slow producer is not waited for beyond what the
// answer needs.
func peekStream(br *bufio.Reader, done func([]byte) bool) ([]byte, error) {
	n := 1
	for {
		b, err := br.Peek(n)
		if err == nil {
			b, _ = br.Peek(br.Buffered()) // all that came: no wait
		}
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, bufio.ErrBufferFull):
			return b, nil
		case err != nil:
			return b, err
		case len(b) == br.Size() || done(b):
			return b, nil
		}
		n = min(br.Buffered()+1, br.Size())
	}
}

// hasLine reports whether b holds a complete line that is not blank.
func hasLine(b []byte) bool {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return false
		}
		if len(bytes.TrimSpace(b[:i])) > 0 {
			return true
		}
		b = b[i+1:]
	}
	return false
}
