package data

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// IDX magic numbers: 0x08 is "unsigned byte", the last byte the number of
// dimensions.
const (
	idxImagesMagic = 0x00000803
	idxLabelsMagic = 0x00000801
)

// maxIDXPixels bounds rows*cols of one image.
const maxIDXPixels = 1 << 24

// pixelScale maps a pixel byte to [0, 1].
var pixelScale = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(i) / 255
	}
	return t
}()

// IsIDXImages reports whether a file name is an IDX images file's
// (*idx3-ubyte, with or without .gz or .zst), the name Open detects.
func IsIDXImages(path string) bool {
	return strings.HasSuffix(strings.ToLower(stripCompression(filepath.Base(path))), "idx3-ubyte")
}

// IDXLabelsPath returns the labels file beside an IDX images file by the
// standard naming: "images" becomes "labels" and "idx3" becomes "idx1"
// (train-images-idx3-ubyte.gz → train-labels-idx1-ubyte.gz). It tries the
// images file's compression suffix first, then none, .gz and .zst, and
// returns the first that exists.
func IDXLabelsPath(images string) (string, error) {
	dir, base := filepath.Split(images)
	stem := stripCompression(base)
	if !strings.Contains(stem, "idx3") {
		return "", fmt.Errorf("%w: %s: not an IDX images file name (want *-images-idx3-ubyte[.gz]); set the labels file", ErrNoMatch, images)
	}
	i := strings.LastIndex(stem, "idx3")
	stem = stem[:i] + "idx1" + stem[i+4:]
	stem = strings.Replace(stem, "images", "labels", 1)
	suffix := base[len(stripCompression(base)):]
	tried := []string{}
	for _, ext := range []string{suffix, "", ".gz", ".zst"} {
		p := filepath.Join(dir, stem+ext)
		if len(tried) > 0 && tried[0] == p {
			continue
		}
		tried = append(tried, p)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", &LabelsError{Images: images, Tried: tried[0]}
}

// LabelsError says an IDX images file has no labels file beside it by the
// standard name; it wraps ErrNoMatch. Commands name their labels flag with
// it (--train-labels, --test-labels).
type LabelsError struct {
	Images string // the images file
	Tried  string // the labels file looked for
}

func (e *LabelsError) Error() string {
	return fmt.Sprintf("no labels for %s: %s does not exist (give the labels file)", e.Images, e.Tried)
}

func (e *LabelsError) Unwrap() error { return ErrNoMatch }

// idxReader streams an IDX images file and its labels file record by
// record.
type idxReader struct {
	sh       *shared
	img, lab *stream
	imgR     *bufio.Reader
	labR     *bufio.Reader
	count    int64 // images
	pixels   int   // per image
	next     int64 // next record
	rec      []byte
	labm     labelMapper
}

// IDXCount is the number of images of an IDX images file, plain or
// compressed, read from its header alone (cluster spaces its evaluations
// by it).
func IDXCount(path string) (int64, error) {
	var n int64
	s, err := openStream(path, &n)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	d, err := idxHeader(s, s.name, idxImagesMagic, 3)
	if err != nil {
		return 0, err
	}
	return int64(d[0]), nil
}

// idxHeader reads the magic and the dimension sizes of an IDX file.
func idxHeader(r io.Reader, name string, magic uint32, dims int) ([]uint32, error) {
	var h [16]byte
	n := 4 * (1 + dims)
	k, err := io.ReadFull(r, h[:n])
	if k >= 4 {
		if m := binary.BigEndian.Uint32(h[:4]); m != magic {
			return nil, fmt.Errorf("%w: %s: IDX magic 0x%08x, want 0x%08x", ErrFormat, name, m, magic)
		}
	}
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: %s: truncated IDX header", ErrFormat, name)
		}
		return nil, err
	}
	d := make([]uint32, dims)
	for i := range d {
		d[i] = binary.BigEndian.Uint32(h[4+4*i:])
	}
	return d, nil
}

func newIDXReader(sh *shared, images, labels string) (_ *idxReader, err error) {
	r := &idxReader{sh: sh, labm: newLabelMapper(&sh.opt, sh.raw)}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.img, err = openStream(images, &sh.stats.Bytes); err != nil {
		return nil, err
	}
	r.imgR = bufio.NewReaderSize(r.img, sh.opt.bufferSize())
	d, err := idxHeader(r.imgR, images, idxImagesMagic, 3)
	if err != nil {
		return nil, err
	}
	l := d[:1] // without a labels file (NoLabels), as many labels as images
	if labels != "" {
		if r.lab, err = openStream(labels, &sh.stats.Bytes); err != nil {
			return nil, err
		}
		r.labR = bufio.NewReaderSize(r.lab, 64<<10)
		if l, err = idxHeader(r.labR, labels, idxLabelsMagic, 1); err != nil {
			return nil, err
		}
	}
	pixels := uint64(d[1]) * uint64(d[2])
	switch {
	case pixels == 0 || pixels > maxIDXPixels:
		return nil, fmt.Errorf("%w: %s: images of %dx%d pixels", ErrFormat, images, d[1], d[2])
	case d[0] != l[0]:
		return nil, fmt.Errorf("%w: %s has %d images but %s has %d labels", ErrFormat, images, d[0], labels, l[0])
	case sh.opt.Dim != 0 && pixels > sh.opt.Dim:
		return nil, fmt.Errorf("%w: %s: images have %d pixels but Dim is %d", ErrOptions, images, pixels, sh.opt.Dim)
	}
	r.count, r.pixels = int64(d[0]), int(pixels)
	sh.formatDim = max(sh.formatDim, pixels)
	r.rec = make([]byte, pixels)
	return r, nil
}

func (r *idxReader) close() error {
	var err error
	if r.img != nil {
		err = r.img.Close()
	}
	if r.lab != nil {
		err = errors.Join(err, r.lab.Close())
	}
	return err
}

func (r *idxReader) truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated at record %d of %d", ErrFormat, r.next+1, r.count)
	}
	return err
}

func (r *idxReader) read(b *Batch, max int) (int, error) {
	n := 0
	for n < max {
		if r.next == r.count {
			return n, r.end()
		}
		if !r.sh.part.take() {
			if _, err := r.imgR.Discard(r.pixels); err != nil {
				return n, fmt.Errorf("%s: %w", r.img.name, r.truncated(err))
			}
			if r.labR != nil {
				if _, err := r.labR.Discard(1); err != nil {
					return n, fmt.Errorf("%s: %w", r.lab.name, r.truncated(err))
				}
			}
			r.next++
			continue
		}
		if _, err := io.ReadFull(r.imgR, r.rec); err != nil {
			return n, fmt.Errorf("%s: %w", r.img.name, r.truncated(err))
		}
		var raw byte
		if r.labR != nil {
			var err error
			if raw, err = r.labR.ReadByte(); err != nil {
				return n, fmt.Errorf("%s: %w", r.lab.name, r.truncated(err))
			}
		}
		r.next++
		label, code := r.labm.value(float64(raw))
		if r.labR == nil {
			label, code = 0, fOK
		}
		if code != fOK {
			if r.sh.opt.SkipBad {
				r.sh.stats.BadLines++
				continue
			}
			f := fault{code: code, num: int64(raw)}
			return n, &LineError{File: r.lab.name, Line: r.next, Token: strconv.Itoa(int(raw)), Err: f.reason(&r.sh.opt)}
		}
		for j, p := range r.rec {
			if p != 0 {
				b.Add(uint32(j), pixelScale[p])
			}
		}
		b.EndRow(label)
		b.mark(Place{r.img.name, r.next})
		if r.sh.raw { // labm and lab are nil without a label file
			r.sh.noteRaw(r.labm.last, Place{r.lab.name, r.next})
		}
		n++
	}
	return n, nil
}

// end checks that both files end after the last record.
func (r *idxReader) end() error {
	for _, s := range []struct {
		r    *bufio.Reader
		name string
	}{{r.imgR, r.img.name}, {r.labR, ""}} {
		if s.r == nil {
			continue
		}
		if s.r == r.labR {
			s.name = r.lab.name
		}
		if _, err := s.r.ReadByte(); err == nil {
			return fmt.Errorf("%w: %s: data after the last of %d records", ErrFormat, s.name, r.count)
		} else if err != io.EOF {
			return err
		}
	}
	return io.EOF
}
