package data

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// input is one resolved input file.
type input struct {
	path   string
	format Format
	labels string // IDX labels file
}

// Open streams the rows of the files the patterns name.
//
// Each pattern is a path or a filepath.Glob pattern; its matches are read in
// sorted order and several patterns are read one after the other. A pattern
// that matches no file is an error naming it (ErrNoMatch). Stdin ("-") is
// standard input; it is never globbed and must be the only pattern. A
// stream (standard input, /dev/stdin, a named pipe) is read once: see
// IsStream and Spool. Files ending in .gz are gunzipped and files ending in
// .zst are zstd-decompressed while they are read; so is any input whose
// first bytes are gzip's or zstd's magic number (standard input included).
//
// With FormatAuto each input's format comes from its name and first bytes:
// *idx3-ubyte[.gz|.zst] or the IDX images magic is IDX, *.gtc or the cache
// magic is a cache, *.csv is refused; otherwise the first line that is
// not blank decides: a '|' before any '#' is VW, 40 (or 39) tab-separated
// columns without ':' are Criteo, comma-separated values are refused
// (ErrFormat: CSV is not read), anything else is libsvm. Detection peeks:
// the bytes it looks at are still read as rows, so a pipe loses nothing
// (TestStreamsReadLikeFiles). All files must have the same format.
//
// Open opens the first file at once, so most problems with it (missing
// labels file, bad IDX header, corrupt cache header) are reported here; the
// other files are opened one at a time as reading reaches them.
//
// When Next fails with an error other than io.EOF, b holds the rows before
// the failing line and later calls return the same error. Close releases
// the read buffer for the next Open.
func Open(patterns []string, opt Options) (Source, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	inputs, err := resolveInputs(patterns, opt)
	if err != nil {
		return nil, err
	}
	return openInputs(inputs, opt, false)
}

// openInputs makes the Source over resolved inputs; raw keeps raw labels
// (Scan).
func openInputs(inputs []input, opt Options, raw bool) (*multiSource, error) {
	sh := &shared{opt: opt, part: newPartition(opt), raw: raw}
	if len(opt.Interactions) > 0 && inputs[0].format != FormatCache {
		list, err := ParseInteractions(strings.Join(opt.Interactions, ","))
		if err != nil {
			return nil, err
		}
		sh.interactions = list
	}
	for _, in := range inputs {
		if in.format == FormatLibSVM || in.format == FormatCriteo || in.format == FormatVW {
			sh.lines = newLineReader(opt.bufferSize())
			break
		}
	}
	s := &multiSource{sh: sh, inputs: inputs}
	if err := s.openNext(); err != nil {
		return nil, err
	}
	return s, nil
}

// resolveInputs expands the patterns and settles each file's format.
func resolveInputs(patterns []string, opt Options) ([]input, error) {
	if len(patterns) == 0 {
		return nil, fmt.Errorf("%w: no input files given", ErrNoMatch)
	}
	var inputs []input
	for _, p := range patterns {
		if p == Stdin {
			if len(patterns) > 1 {
				return nil, fmt.Errorf("%w: input %q (standard input) must be the only input, but %d were given", ErrOptions, Stdin, len(patterns))
			}
			f := opt.Format
			if f == FormatAuto {
				var err error
				if f, err = detectFormat(p); err != nil {
					return nil, err
				}
			}
			inputs = append(inputs, input{path: p, format: f})
			continue
		}
		matches, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("%w: input pattern %q: %v", ErrOptions, p, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("%w: input pattern %q matches no file", ErrNoMatch, p)
		}
		slices.Sort(matches)
		for _, m := range matches {
			st, err := os.Stat(m)
			if err != nil {
				return nil, err
			}
			if st.IsDir() {
				return nil, fmt.Errorf("%w: input %s is a directory", ErrOptions, m)
			}
			f := opt.Format
			if f == FormatAuto {
				if f, err = detectFormat(m); err != nil {
					return nil, err
				}
			}
			inputs = append(inputs, input{path: m, format: f})
		}
	}
	for _, in := range inputs[1:] {
		if in.format != inputs[0].format {
			return nil, fmt.Errorf("%w: mixed formats: %s is %v but %s is %v", ErrFormat, inputs[0].path, inputs[0].format, in.path, in.format)
		}
	}
	first := displayName(inputs[0].path)
	switch inputs[0].format {
	case FormatCriteo, FormatVW:
		if opt.Dim == 0 {
			return nil, fmt.Errorf("%w: %s is %s, which needs Dim (--dim), the range features are hashed into", ErrOptions, first, inputs[0].format.long())
		}
	case FormatIDX:
		if opt.NoLabels {
			break // images only
		}
		if opt.Labels != "" && len(inputs) > 1 {
			return nil, fmt.Errorf("%w: one labels file %s for %d IDX images files; leave it empty to find each one's labels", ErrOptions, opt.Labels, len(inputs))
		}
		for i := range inputs {
			if opt.Labels != "" {
				inputs[i].labels = opt.Labels
				continue
			}
			l, err := IDXLabelsPath(inputs[i].path)
			if err != nil {
				return nil, err
			}
			inputs[i].labels = l
		}
	}
	if opt.Labels != "" && inputs[0].format != FormatIDX && !opt.NoLabels {
		return nil, fmt.Errorf("%w: labels file %s given for %v input %s", ErrOptions, opt.Labels, inputs[0].format, first)
	}
	if len(opt.Interactions) > 0 {
		if err := checkInteractions(opt.Interactions, inputs[0].format, first); err != nil {
			return nil, err
		}
	}
	return inputs, nil
}

// sniffSize is how much of a text input detectFormat looks at.
const sniffSize = 64 << 10

// detectFormat picks a file's format from its name and first line.
func detectFormat(path string) (Format, error) { return DetectFormat(path) }

// Magic numbers of binary inputs, big-endian as IDX writes them.
var (
	idxImagesHead = []byte{0, 0, 8, 3}
	idxLabelsHead = []byte{0, 0, 8, 1}
	modelHead     = []byte("GTMODEL\n")
)

// DetectFormat picks an input's format from its name and first bytes, as
// Open does with FormatAuto (see Open). Standard input ("-") and other
// streams are peeked at, never consumed: the rows read afterwards start
// at the stream's first byte (TestStreamsReadLikeFiles).
func DetectFormat(path string) (Format, error) {
	name := displayName(path)
	base := strings.ToLower(stripCompression(filepath.Base(path)))
	switch {
	case path == Stdin:
	case strings.HasSuffix(base, "idx3-ubyte"):
		return FormatIDX, nil
	case strings.HasSuffix(base, "idx1-ubyte"):
		return FormatAuto, fmt.Errorf("%w: %s is an IDX labels file; give the images file (*-images-idx3-ubyte)", ErrOptions, name)
	case strings.HasSuffix(base, ".gtc"):
		return FormatCache, nil
	case strings.HasSuffix(base, ".csv"):
		return FormatAuto, csvError(name)
	}
	if key, once, err := streamKey(path); err == nil && once {
		s, err := getStream(key, path)
		if err != nil {
			return FormatAuto, err
		}
		if s.format == FormatAuto {
			if s.format, err = sniffFormat(path, name); err != nil {
				return FormatAuto, err
			}
		}
		return s.format, nil
	}
	return sniffFormat(path, name)
}

// sniffFormat picks a format from an input's first bytes.
func sniffFormat(path, name string) (Format, error) {
	// Enough raw bytes to see a first line through the decompressor.
	comp := compNone
	text := func(raw []byte) []byte {
		comp = compressionOfInput(path, raw)
		return decompressHead(raw, comp, sniffSize)
	}
	raw, err := peekHead(path, 4*sniffSize, func(raw []byte) bool { return hasLine(text(raw)) })
	if err != nil {
		return FormatAuto, err
	}
	head := text(raw)
	switch {
	case bytes.HasPrefix(head, idxImagesHead):
		return FormatIDX, nil
	case bytes.HasPrefix(head, idxLabelsHead):
		return FormatAuto, fmt.Errorf("%w: %s is an IDX labels file; give the images file", ErrOptions, name)
	case bytes.HasPrefix(head, []byte(cacheMagic)):
		return FormatCache, nil
	case bytes.HasPrefix(head, modelHead):
		return FormatAuto, fmt.Errorf("%w: %s is a gossiptrain model file, not data (eval and predict take it with --model)", ErrFormat, name)
	}
	complete := len(head) < sniffSize && len(raw) < 4*sniffSize
	return sniffText(head, complete, name)
}

// decompressHead returns up to max bytes of what the start of a
// compressed input decompresses to (as much as raw holds).
func decompressHead(raw []byte, comp compression, max int) []byte {
	var r io.Reader
	switch comp {
	case compNone:
		return raw[:min(len(raw), max)]
	case compGzip:
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil
		}
		r = zr
	case compZstd:
		zr, err := zstd.NewReader(bytes.NewReader(raw), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil
		}
		defer zr.Close()
		r = zr
	}
	out := make([]byte, max)
	n, _ := io.ReadFull(r, out)
	return out[:n]
}

// sniffText picks a text format from the first line that is not blank:
// a '|' before any '#' is VW; 40 (or, unlabelled, 39) tab-separated
// columns without ':' are Criteo; a first token with ',' (or commas and
// no ':') is CSV, which is refused; anything else is libsvm. complete says
// head is the whole input. A first line longer than head is judged on
// its start; one with neither ':' nor '|' in it is undecidable.
func sniffText(head []byte, complete bool, name string) (Format, error) {
	line, whole := head, false
	for len(head) > 0 {
		i := bytes.IndexByte(head, '\n')
		if i < 0 {
			line, whole = head, complete
			break
		}
		if l := bytes.TrimSpace(head[:i]); len(l) > 0 {
			line, whole = head[:i], true
			break
		}
		head = head[i+1:]
		line = head
	}
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 {
		return FormatLibSVM, nil // empty input: no rows in any format
	}
	bar, hash := bytes.IndexByte(line, '|'), bytes.IndexByte(line, '#')
	colon := bytes.IndexByte(line, ':') >= 0
	tabs := bytes.Count(line, []byte{'\t'})
	first := bytes.TrimSpace(line)
	if i := bytes.IndexAny(first, " \t"); i >= 0 {
		first = first[:i]
	}
	switch {
	case whole && !colon && bar < 0 && (tabs == criteoColumns-1 || tabs == criteoColumns-2):
		return FormatCriteo, nil
	case bar >= 0 && (hash < 0 || bar < hash):
		return FormatVW, nil
	case hash == 0:
		return FormatLibSVM, nil // a libsvm comment line
	case bytes.IndexByte(first, ',') >= 0 || (!colon && bytes.IndexByte(line, ',') >= 0):
		return FormatAuto, csvError(name)
	case !whole && !colon:
		return FormatAuto, fmt.Errorf("%w: %s: cannot tell its format from its first %d bytes (no line ends in them); give --format", ErrFormat, name, len(line))
	}
	return FormatLibSVM, nil
}

// csvError refuses comma-separated input.
func csvError(name string) error {
	return fmt.Errorf("%w: %s looks like CSV (comma-separated values), a format gossiptrain does not read: "+
		"convert it to libsvm (label index:value ...) or VW (label |namespace feature:value ...)", ErrFormat, name)
}

// multiSource reads its inputs one after the other.
type multiSource struct {
	sh     *shared
	inputs []input
	i      int // index of the next input to open
	cur    rowReader
	err    error // sticky
}

var errClosed = errors.New("data: source is closed")

// openNext opens inputs[i], if any.
func (s *multiSource) openNext() error {
	if s.i == len(s.inputs) {
		return nil
	}
	in := s.inputs[s.i]
	s.i++
	switch in.format {
	case FormatLibSVM, FormatCriteo, FormatVW:
		st, err := openStream(in.path, &s.sh.stats.Bytes)
		if err != nil {
			return err
		}
		switch in.format {
		case FormatLibSVM:
			s.cur = newLibSVMReader(s.sh, st)
		case FormatCriteo:
			s.cur = newCriteoReader(s.sh, st)
		default:
			s.cur = newVWReader(s.sh, st)
		}
	case FormatIDX:
		r, err := newIDXReader(s.sh, in.path, in.labels)
		if err != nil {
			return err
		}
		s.cur = r
	case FormatCache:
		r, err := newCacheReader(s.sh, in.path)
		if err != nil {
			return err
		}
		s.cur = r
	default:
		panic(fmt.Sprintf("data: input %s has unresolved format %v", in.path, in.format))
	}
	return nil
}

// Next resets b and appends up to max rows. It returns the number of rows
// and io.EOF (with 0 rows) once every input is read. On another error the
// rows before the failing line are in b and the error stays: later calls
// return it again.
func (s *multiSource) Next(b *Batch, max int) (int, error) {
	b.Reset()
	s.sh.rawLabels = s.sh.rawLabels[:0]
	s.sh.rawPlaces = s.sh.rawPlaces[:0]
	if s.err != nil {
		return 0, s.err
	}
	n := 0
	for n < max {
		if s.cur == nil {
			if s.i == len(s.inputs) {
				break
			}
			if err := s.openNext(); err != nil {
				s.err = err
				return s.count(b, n), err
			}
		}
		k, err := s.cur.read(b, max-n)
		n += k
		if err == io.EOF {
			err = s.cur.close()
			s.cur = nil
		}
		if err != nil {
			s.err = err
			return s.count(b, n), err
		}
	}
	if n == 0 && s.cur == nil && s.i == len(s.inputs) {
		return 0, io.EOF
	}
	return s.count(b, n), nil
}

func (s *multiSource) count(b *Batch, n int) int {
	s.sh.stats.Rows += int64(n)
	s.sh.stats.NNZ += int64(b.NNZ())
	return n
}

// Stats reports what has been read so far.
func (s *multiSource) Stats() Stats { return s.sh.stats }

// Close closes the open file; later calls to Next fail.
func (s *multiSource) Close() error {
	var err error
	if s.cur != nil {
		err = s.cur.close()
		s.cur = nil
	}
	if s.err == nil || s.err == io.EOF {
		s.err = errClosed
	}
	s.i = len(s.inputs)
	if s.sh.lines != nil && s.sh.lines.buf != nil {
		s.sh.lines.release()
	}
	return err
}
