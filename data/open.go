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
// that matches no file is an error naming it (ErrNoMatch). Files ending in
// .gz are gunzipped and files ending in .zst are zstd-decompressed while they
// are read.
//
// With FormatAuto each file's format comes from its name and first line:
// *idx3-ubyte[.gz|.zst] is IDX, *.gtc is a cache, a first line of 40
// tab-separated columns without ':' is Criteo, anything else is libsvm. All
// files must have the same format.
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
	for _, in := range inputs {
		if in.format == FormatLibSVM || in.format == FormatCriteo {
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
	switch inputs[0].format {
	case FormatCriteo:
		if opt.Dim == 0 {
			return nil, fmt.Errorf("%w: %s is Criteo TSV, which needs Dim (--dim), the range features are hashed into", ErrOptions, inputs[0].path)
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
		return nil, fmt.Errorf("%w: labels file %s given for %v input %s", ErrOptions, opt.Labels, inputs[0].format, inputs[0].path)
	}
	return inputs, nil
}

// sniffSize is how much of a text file detectFormat reads.
const sniffSize = 64 << 10

// detectFormat picks a file's format from its name and first line.
func detectFormat(path string) (Format, error) { return DetectFormat(path) }

// DetectFormat picks a file's format from its name and first line, as Open
// does with FormatAuto (see Open).
func DetectFormat(path string) (Format, error) {
	base := strings.ToLower(stripCompression(filepath.Base(path)))
	switch {
	case strings.HasSuffix(base, "idx3-ubyte"):
		return FormatIDX, nil
	case strings.HasSuffix(base, "idx1-ubyte"):
		return FormatAuto, fmt.Errorf("%w: %s is an IDX labels file; give the images file (*-images-idx3-ubyte)", ErrOptions, path)
	case strings.HasSuffix(base, ".gtc"):
		return FormatCache, nil
	}
	var n int64
	s, err := openStream(path, &n)
	if err != nil {
		return FormatAuto, err
	}
	defer s.Close()
	buf := make([]byte, sniffSize)
	k, err := io.ReadFull(s, buf)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return FormatAuto, err
	}
	line := buf[:k]
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	if bytes.Count(line, []byte{'\t'}) == criteoColumns-1 && bytes.IndexByte(line, ':') < 0 {
		return FormatCriteo, nil
	}
	return FormatLibSVM, nil
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
	case FormatLibSVM, FormatCriteo:
		st, err := openStream(in.path, &s.sh.stats.Bytes)
		if err != nil {
			return err
		}
		if in.format == FormatLibSVM {
			s.cur = newLibSVMReader(s.sh, st)
		} else {
			s.cur = newCriteoReader(s.sh, st)
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
