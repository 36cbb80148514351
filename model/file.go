package model

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/cespare/xxhash/v2"
)

// Model file format, versions 1 to 4. All integers and floats are little
// endian.
//
//	offset  size  field
//	0       8     magic "GTMODEL\n"
//	8       4     format version (uint32)
//	12      4     bitwise complement of the version: a corrupt version
//	              byte reads as corruption, not as "newer version"
//	16      4     H, the length of the header body (uint32, <= maxHeader)
//	20      H     header body:
//	                kind u8, optimizer u8, flags u8 (bit 0: state included;
//	                version 4, bit 1: sparse rows), reserved u8 (0),
//	                dim u64, classes u32, shards u32,
//	                label base i64, steps i64,
//	                lr, decay, power, l1, l2, beta, eps (7 x float64),
//	                versions 2 to 4: hidden u32 (an MLP's hidden units; 0
//	                for the linear kinds from version 3 on),
//	                versions 3 and 4: examples trained u64, then the input
//	                the model was trained on: format name length u8, the
//	                name ("libsvm", "criteo", "idx", "cache"; empty when not
//	                known), input flags u8 (bit 0: --zero-based; version 4,
//	                bit 1: binary labels written -1/+1),
//	                if flags bit 0: a bitmap of ceil(shards/8) bytes, bit s%8
//	                of byte s/8 set when shard s's state follows,
//	                meta: count u32, then per entry (ascending keys)
//	                key length u32, key, value length u32, value
//	20+H    8     xxhash64 of bytes [0, 20+H): the header is checked before
//	              its sizes are trusted to allocate
//	...           the parameters, dense or sparse (flags bit 1):
//	              dense: weights: Layout.Len() float32, shard-major,
//	                padding 0; then the state of each shard in the bitmap,
//	                ascending: ShardSize·StatePerWeight float32
//	              sparse: R u64, the rows stored, then R rows in storage
//	                order (shard ascending, then feature ascending): feature
//	                index u32, Width float32 weights and, when the row's
//	                shard is in the bitmap, Width·StatePerWeight float32
//	                state. Every row with a nonzero bit in its weights or
//	                stored state is there, and only those; the rest are 0.
//	end-8   8     xxhash64 of every byte before it
//
// Save writes the sparse layout when it is the smaller one (Encoding
// auto): a linear model stores 4 bytes per row of Dim dense and 4+4·Width
// per touched row sparse, so sparse wins below half the rows touched for
// logreg. An MLP is initialised with every row nonzero (NewMLP), so its
// files stay dense: indices would only add to them.
//
// Writers and readers stream section by section through a 64 KiB buffer:
// saving a 128 MiB model needs no second copy of it. Readers write only
// the rows a file holds into freshly reserved memory: loading a sparse
// file (or a dense one without state) leaves the pages of zero rows
// untouched, so a model of 12 GB reserved and 128 rows set loads in a few
// pages of memory (TestLoadSparseLeavesPagesUntouched).
const (
	// FormatVersion is the newest model file format this binary reads, and
	// the one it writes. Version 2 added the MLP's hidden size; version 3
	// the examples trained and the input's format and --zero-based, so
	// eval and predict can warn when told to read other input; version 4
	// the sparse layout (the rows that hold something, with their indices)
	// and whether binary labels were written -1/+1. Versions 1 to 3 still
	// load (the input of versions 1 and 2 is unknown: Input is zero).
	FormatVersion = 4

	fileMagic = "GTMODEL\n"
	preamble  = 20 // magic, version, complement, header length
	// maxFormatName bounds Input.Format in a file (one length byte).
	maxFormatName = 255
	maxHeader     = 16 << 20 // bounds the meta section; a larger H is corruption
	maxMeta       = 1 << 16  // entries in Meta
)

// Errors of model files and shard exports. Errors returned by Read,
// LoadFile and LoadShard wrap exactly one of them.
var (
	// ErrCorrupt means the bytes fail a checksum, end early, or hold values
	// no writer produces.
	ErrCorrupt = errors.New("file corrupt or truncated")
	// ErrNotModel means the input does not start with the model file magic.
	ErrNotModel = errors.New("not a gossiptrain model file")
	// ErrVersion means the format version is one this binary cannot read.
	ErrVersion = errors.New("unsupported model format version")
	// ErrMismatch means a model or shard does not fit the model it is
	// loaded into or the run's settings.
	ErrMismatch = errors.New("model shape mismatch")
	// ErrAddressSpace means the model's dense reservation does not fit
	// under the process's address-space limit (see CheckReservation).
	ErrAddressSpace = errors.New("not enough address space for the model")
)

// fileError carries a full message and the sentinel it wraps, so messages
// read "checksum mismatch (file corrupt or truncated)" rather than
// sentinel-prefixed.
type fileError struct {
	msg string
	err error
}

func (e *fileError) Error() string { return e.msg }
func (e *fileError) Unwrap() error { return e.err }

func corrupt(format string, args ...any) error {
	return &fileError{fmt.Sprintf(format, args...) + " (file corrupt or truncated)", ErrCorrupt}
}

// SaveOptions selects what a model file contains besides the weights.
type SaveOptions struct {
	// State includes the optimizer state of the shards owned here, so a
	// checkpoint resumes with the same per-coordinate rates; a file meant
	// for prediction leaves it out (it is 1-2x the size of the weights).
	State bool
	// Encoding chooses the parameters' layout; the zero value, EncodingAuto,
	// writes whichever of dense and sparse is smaller.
	Encoding Encoding
}

// Encoding is the layout of a model file's parameters.
type Encoding uint8

// Encodings of SaveOptions.
const (
	// EncodingAuto writes the smaller of the two layouts.
	EncodingAuto Encoding = iota
	// EncodingDense writes every weight, zero or not.
	EncodingDense
	// EncodingSparse writes the rows that hold a nonzero value, with their
	// indices.
	EncodingSparse
)

// encodedSizes returns the bytes of the parameter section of m in either
// layout, and the rows the sparse layout stores.
func (m *Model) encodedSizes(opt SaveOptions) (dense, sparse, rows int64) {
	l := &m.Layout
	spw := int64(m.Opt.Kind.StatePerWeight())
	w := int64(l.Width)
	dense = 4 * int64(l.Len())
	if opt.State {
		for _, st := range m.State {
			if st != nil {
				dense += 4 * int64(l.ShardSize()) * spw
			}
		}
	}
	rows, stateRows := m.TouchedRows(opt.State)
	sparse = 8 + rows*(4+4*w) + stateRows*4*w*spw
	return dense, sparse, rows
}

// sparseFile decides the layout Save writes.
func (m *Model) sparseFile(opt SaveOptions) (sparse bool, rows int64) {
	switch opt.Encoding {
	case EncodingDense:
		return false, 0
	case EncodingSparse:
		rows, _ := m.TouchedRows(opt.State)
		return true, rows
	}
	d, sp, rows := m.encodedSizes(opt)
	return sp < d, rows
}

// WriteTo writes m without optimizer state, so a Model is an io.WriterTo;
// Save chooses.
func (m *Model) WriteTo(w io.Writer) (int64, error) { return m.Save(w, SaveOptions{}) }

// Save writes m to w in the model file format and returns the bytes
// written. It streams: memory use is a 64 KiB buffer, whatever the model's
// size.
func (m *Model) Save(w io.Writer, opt SaveOptions) (int64, error) {
	sparse, rows := m.sparseFile(opt)
	hdr := m.header(opt, sparse)
	if len(hdr) > maxHeader || len(m.Meta) > maxMeta {
		return 0, fmt.Errorf("%w: meta of %d entries and %d bytes is over the limit of %d entries and %d bytes", ErrConfig, len(m.Meta), len(hdr), maxMeta, maxHeader)
	}
	hw := &hashWriter{w: w, d: xxhash.New()}
	var pre [preamble]byte
	copy(pre[:], fileMagic)
	version := uint32(FormatVersion)
	binary.LittleEndian.PutUint32(pre[8:], version)
	binary.LittleEndian.PutUint32(pre[12:], ^version)
	binary.LittleEndian.PutUint32(pre[16:], uint32(len(hdr)))
	hw.write(pre[:])
	hw.write(hdr)
	hw.sum()
	buf := make([]byte, chunkBytes)
	if sparse {
		if err := m.writeRows(hw, buf, opt, rows); err != nil {
			return hw.n, err
		}
	} else {
		hw.floats(buf, m.W)
		if opt.State {
			for _, st := range m.State {
				if st != nil {
					hw.floats(buf, st)
				}
			}
		}
	}
	hw.sum()
	return hw.n, hw.err
}

// writeRows writes the sparse parameter section: rows, the count of rows
// TouchedRows gave, then the rows.
func (m *Model) writeRows(hw *hashWriter, buf []byte, opt SaveOptions, rows int64) error {
	p := binary.LittleEndian.AppendUint64(buf[:0], uint64(rows))
	var n int64
	for s := range m.Layout.Shards {
		ws := opt.State && m.State[s] != nil
		m.visitRows(s, ws, anyBits, func(k uint32, row, srow []float32) {
			n++
			p = binary.LittleEndian.AppendUint32(p, k)
			p = appendFloats(p, row)
			p = appendFloats(p, srow)
			if len(p) >= chunkBytes {
				hw.write(p)
				p = p[:0]
			}
		})
	}
	hw.write(p)
	if n != rows && hw.err == nil {
		// The model changed between the count and the write: a caller
		// broke the rule that a Model is not used concurrently.
		return fmt.Errorf("model: %d rows written, %d counted: the model changed while it was saved", n, rows)
	}
	return hw.err
}

// header encodes the header body.
func (m *Model) header(opt SaveOptions, sparse bool) []byte {
	le := binary.LittleEndian
	b := make([]byte, 0, 128)
	flags := byte(0)
	if opt.State {
		flags |= 1
	}
	if sparse {
		flags |= 2
	}
	b = append(b, byte(m.Kind), byte(m.Opt.Kind), flags, 0)
	b = le.AppendUint64(b, m.Dim)
	b = le.AppendUint32(b, uint32(m.Classes))
	b = le.AppendUint32(b, uint32(m.Layout.Shards))
	b = le.AppendUint64(b, uint64(m.LabelBase))
	b = le.AppendUint64(b, uint64(m.Steps))
	for _, f := range [...]float64{m.Opt.LR, m.Opt.Decay, m.Opt.Power, m.Opt.L1, m.Opt.L2, m.Opt.Beta, m.Opt.Eps} {
		b = le.AppendUint64(b, math.Float64bits(f))
	}
	b = le.AppendUint32(b, uint32(m.Hidden))
	b = le.AppendUint64(b, uint64(m.Examples))
	format := m.Input.Format
	if len(format) > maxFormatName {
		format = format[:maxFormatName]
	}
	b = append(b, byte(len(format)))
	b = append(b, format...)
	inFlags := byte(0)
	if m.Input.ZeroBased {
		inFlags |= 1
	}
	if m.Input.SignedLabels {
		inFlags |= 2
	}
	b = append(b, inFlags)
	if opt.State {
		bm := make([]byte, (m.Layout.Shards+7)/8)
		for s, st := range m.State {
			if st != nil {
				bm[s/8] |= 1 << (s % 8)
			}
		}
		b = append(b, bm...)
	}
	keys := slices.Sorted(maps.Keys(m.Meta))
	b = le.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		b = le.AppendUint32(b, uint32(len(k)))
		b = append(b, k...)
		b = le.AppendUint32(b, uint32(len(m.Meta[k])))
		b = append(b, m.Meta[k]...)
	}
	return b
}

// hashWriter writes to w while hashing, remembering the first error.
type hashWriter struct {
	w   io.Writer
	d   *xxhash.Digest
	n   int64
	err error
}

func (h *hashWriter) write(p []byte) {
	if h.err != nil {
		return
	}
	n, err := h.w.Write(p)
	h.n += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	h.err = err
	h.d.Write(p)
}

// sum writes the hash of everything written so far (without resetting it).
func (h *hashWriter) sum() {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], h.d.Sum64())
	h.write(b[:])
}

// floats writes v little endian through buf; runs of v in pages never
// written are written as zeros without reading them (untouchedRuns).
func (h *hashWriter) floats(buf []byte, v []float32) {
	untouchedRuns(v, func(a, b int, zero bool) {
		for x := v[a:b]; len(x) > 0 && h.err == nil; {
			n := min(len(x), len(buf)/4, chunkBytes/4)
			if zero {
				h.write(zeroChunk[:4*n])
			} else {
				h.write(putFloats(buf, x[:n]))
			}
			x = x[n:]
		}
	})
}

// Read reads a model written by Save, consuming exactly its bytes. The model
// owns the shards whose state the file includes. Errors wrap ErrNotModel,
// ErrVersion or ErrCorrupt (for an I/O failure of r, that error).
func Read(r io.Reader) (*Model, error) { return readModel(r, -1) }

// readModel reads a model; size is the input's length when known (a file),
// else -1, and lets a truncated file fail before any large allocation.
func readModel(r io.Reader, size int64) (*Model, error) {
	hr := &hashReader{r: r, d: xxhash.New()}
	var pre [preamble]byte
	err := hr.read(pre[:])
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return nil, err
	}
	if string(pre[:8]) != fileMagic {
		return nil, &fileError{"not a gossiptrain model file", ErrNotModel}
	}
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	version := le.Uint32(pre[8:])
	switch {
	case le.Uint32(pre[12:]) != ^version:
		return nil, corrupt("format version field damaged")
	case version > FormatVersion:
		return nil, &fileError{fmt.Sprintf("format version %d is newer than this binary (%d)", version, FormatVersion), ErrVersion}
	case version < 1:
		return nil, &fileError{fmt.Sprintf("format version %d was never written by gossiptrain", version), ErrVersion}
	}
	hlen := le.Uint32(pre[16:])
	if hlen > maxHeader {
		return nil, corrupt("header length %d is over the limit of %d", hlen, maxHeader)
	}
	hdr := make([]byte, hlen)
	if err := hr.read(hdr); err != nil {
		return nil, err
	}
	if err := hr.check(); err != nil {
		return nil, err
	}
	m, state, sparse, err := parseHeader(hdr, version)
	if err != nil {
		return nil, err
	}
	l := &m.Layout
	spw := m.Opt.Kind.StatePerWeight()
	withState := false
	reserve := 4 * int64(l.Len())
	for _, owned := range state {
		if owned {
			withState = true
			reserve += 4 * int64(l.ShardSize()*spw)
		}
	}
	consumed := int64(preamble) + int64(hlen) + 8
	if !sparse {
		if total := consumed + reserve + 8; size >= 0 && size != total {
			return nil, corrupt("file is %d bytes, its header describes %d", size, total)
		}
	} else if size >= 0 && size < consumed+8+8 {
		return nil, corrupt("file is %d bytes, too short for the rows its header announces", size)
	}
	if err := checkAddressSpace(reserve); err != nil {
		return nil, err
	}
	buf := make([]byte, chunkBytes)
	// From a stream the rows of a sparse file are held until the checksum
	// has passed: finish puts them into the model.
	var finish func()
	if sparse {
		if finish, err = m.readRows(hr, state, size); err != nil {
			return nil, err
		}
	} else {
		// With the size unknown (a stream), sections grow as their bytes
		// arrive, so a header that promises terabytes fails at the end of
		// the input rather than in one huge allocation. Zero pages of the
		// weights are left unwritten (untouched) unless state follows:
		// a row with state must have its weights' page written, which is
		// how visitRows knows to look at it.
		grow := size < 0
		if m.W, err = hr.floatsN(buf, l.Len(), grow, withState); err != nil {
			return nil, err
		}
		for s, owned := range state {
			if owned {
				if m.State[s], err = hr.floatsN(buf, l.ShardSize()*spw, grow, false); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := hr.check(); err != nil {
		return nil, err
	}
	if size >= 0 && hr.n != size {
		return nil, corrupt("file is %d bytes, its model ends at byte %d", size, hr.n)
	}
	if finish != nil {
		finish()
	}
	if !sparse {
		if err := m.checkPadding(-1); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// readRows reads the sparse parameter section into m, allocating its W
// and the State of the shards in state. From a file (size known) rows go
// straight into the model; from a stream (size < 0) they are gathered
// first, and the finish it returns allocates the model and puts them in
// once the caller has checked the checksum, so a header that promises
// terabytes allocates nothing. It reads no byte past the section, so a
// model on a stream can be followed by anything.
func (m *Model) readRows(hr *hashReader, state []bool, size int64) (finish func(), err error) {
	l := &m.Layout
	le := binary.LittleEndian
	var cnt [8]byte
	if err := hr.read(cnt[:]); err != nil {
		return nil, err
	}
	rows := le.Uint64(cnt[:])
	w := l.Width
	spw := m.Opt.Kind.StatePerWeight()
	base := uint64(4 + 4*w)
	if rows > l.Features {
		return nil, corrupt("%d rows stored in a model of %d rows", rows, l.Features)
	}
	if size >= 0 && rows*base > uint64(size-hr.n-8) {
		return nil, corrupt("%d rows of at least %d bytes do not fit in the %d bytes left", rows, base, size-hr.n-8)
	}
	alloc := func() {
		m.W = make([]float32, l.Len())
		for s, owned := range state {
			if owned {
				m.State[s] = make([]float32, l.ShardSize()*spw)
			}
		}
	}
	// put writes row k's weights and state (nil without) into the model.
	// The weights are written even when zero: a row with state has its
	// weights' page written (see visitRows).
	put := func(k uint32, wb, sb []byte) {
		off := l.Offset(k)
		getFloats(m.W[off:off+w], wb)
		if sb != nil {
			j := l.Slot(k) * w * spw
			getFloats(m.State[l.Shard(k)][j:j+w*spw], sb)
		}
	}
	var held struct {
		idx   []uint32
		w, st []byte
		hasSt []bool
	}
	direct := size >= 0
	if direct {
		alloc()
	}
	rr := rowReader{h: hr, need: int64(rows * base)}
	prev := -1
	for range rows {
		b, err := rr.next(4)
		if err != nil {
			return nil, err
		}
		k := le.Uint32(b)
		if !l.Valid(k) {
			return nil, corrupt("row %d stored in a model of %d rows", k, l.Features)
		}
		if off := l.Offset(k); off > prev {
			prev = off
		} else {
			return nil, corrupt("row %d stored out of order", k)
		}
		withState := state[l.Shard(k)]
		if withState {
			rr.need += int64(4 * w * spw)
		}
		wb, err := rr.next(4 * w * (1 + spw*b2i(withState)))
		if err != nil {
			return nil, err
		}
		var sb []byte
		if withState {
			wb, sb = wb[:4*w], wb[4*w:]
		}
		if direct {
			put(k, wb, sb)
			continue
		}
		held.idx = append(held.idx, k)
		held.w = append(held.w, wb...)
		held.st = append(held.st, sb...)
		held.hasSt = append(held.hasSt, withState)
	}
	if direct {
		return nil, nil
	}
	return func() {
		alloc()
		for i, k := range held.idx {
			var sb []byte
			if held.hasSt[i] {
				sb, held.st = held.st[:4*w*spw], held.st[4*w*spw:]
			}
			put(k, held.w[4*w*i:4*w*(i+1)], sb)
		}
	}, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rowReader hands out the bytes of a section of unknown length in pieces,
// reading ahead in chunks but never past need, the bytes the section is
// known to hold so far.
type rowReader struct {
	h    *hashReader
	buf  []byte
	b    []byte // read, not yet handed out
	need int64  // bytes of the section known to be there
	got  int64  // bytes of the section read from h
}

// next returns the next n bytes, valid until the next call.
func (r *rowReader) next(n int) ([]byte, error) {
	if len(r.b) < n {
		if cap(r.buf) < max(n, chunkBytes) {
			nb := make([]byte, max(n, chunkBytes))
			copy(nb, r.b)
			r.buf = nb
		} else {
			r.buf = r.buf[:cap(r.buf)]
			copy(r.buf, r.b)
		}
		have := len(r.b)
		k := int(min(int64(len(r.buf)-have), r.need-r.got))
		if k < n-have {
			return nil, corrupt("rows end early")
		}
		if err := r.h.read(r.buf[have : have+k]); err != nil {
			return nil, err
		}
		r.got += int64(k)
		r.b = r.buf[:have+k]
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p, nil
}

// parseHeader decodes a checksum-verified header body into a zero model,
// the set of shards whose state follows, and whether the rows are sparse.
func parseHeader(b []byte, version uint32) (*Model, []bool, bool, error) {
	le := binary.LittleEndian
	const fixed = 4 + 8 + 4 + 4 + 8 + 8 + 7*8
	if len(b) < fixed {
		return nil, nil, false, corrupt("header of %d bytes, want at least %d", len(b), fixed)
	}
	kind, optKind, flags := Kind(b[0]), OptKind(b[1]), b[2]
	dim := le.Uint64(b[4:])
	classes := le.Uint32(b[12:])
	shards := le.Uint32(b[16:])
	var o OptConfig
	o.Kind = optKind
	fs := []*float64{&o.LR, &o.Decay, &o.Power, &o.L1, &o.L2, &o.Beta, &o.Eps}
	for i, p := range fs {
		*p = math.Float64frombits(le.Uint64(b[36+8*i:]))
	}
	known := byte(1)
	if version >= 4 {
		known = 3
	}
	if flags&^known != 0 || b[3] != 0 {
		return nil, nil, false, corrupt("unknown header flags %#x %#x", flags, b[3])
	}
	hidden := 0
	if version >= 2 {
		if len(b) < fixed+4 {
			return nil, nil, false, corrupt("header of %d bytes, want at least %d", len(b), fixed+4)
		}
		hidden = int(le.Uint32(b[fixed:]))
	}
	m, err := newShape(kind, dim, int(classes), hidden, int(shards), o)
	if err != nil {
		return nil, nil, false, &fileError{fmt.Sprintf("header describes no valid model: %v (file corrupt or truncated)", err), ErrCorrupt}
	}
	m.LabelBase = int64(le.Uint64(b[20:]))
	m.Steps = int64(le.Uint64(b[28:]))
	b = b[fixed:]
	if version >= 2 {
		b = b[4:]
	}
	if version >= 3 {
		if len(b) < 8+1 {
			return nil, nil, false, corrupt("header ends inside the input section")
		}
		m.Examples = int64(le.Uint64(b))
		n := int(b[8])
		b = b[9:]
		if len(b) < n+1 {
			return nil, nil, false, corrupt("header ends inside the input section")
		}
		m.Input.Format = string(b[:n])
		if b[n]&^known != 0 {
			return nil, nil, false, corrupt("unknown input flags %#x", b[n])
		}
		m.Input.ZeroBased = b[n]&1 != 0
		m.Input.SignedLabels = b[n]&2 != 0
		b = b[n+1:]
	}
	state := make([]bool, shards)
	if flags&1 != 0 {
		n := (int(shards) + 7) / 8
		if len(b) < n {
			return nil, nil, false, corrupt("header ends inside the state bitmap")
		}
		for s := range state {
			state[s] = b[s/8]&(1<<(s%8)) != 0
		}
		b = b[n:]
	}
	next := func() (string, bool) {
		if len(b) < 4 {
			return "", false
		}
		n := le.Uint32(b)
		if uint64(len(b)-4) < uint64(n) {
			return "", false
		}
		s := string(b[4 : 4+n])
		b = b[4+n:]
		return s, true
	}
	if len(b) < 4 {
		return nil, nil, false, corrupt("header ends before the meta section")
	}
	count := le.Uint32(b)
	b = b[4:]
	if count > maxMeta {
		return nil, nil, false, corrupt("%d meta entries, over the limit of %d", count, maxMeta)
	}
	if count > 0 {
		m.Meta = make(map[string]string, count)
	}
	for range count {
		k, ok1 := next()
		v, ok2 := next()
		if !ok1 || !ok2 {
			return nil, nil, false, corrupt("header ends inside the meta section")
		}
		m.Meta[k] = v
	}
	if len(b) != 0 {
		return nil, nil, false, corrupt("%d unexpected bytes after the header", len(b))
	}
	return m, state, flags&2 != 0, nil
}

// checkPadding verifies that the padding slots of shard s (every shard if
// s < 0) are 0, as every writer leaves them. Padding in pages never
// written is 0 without being read (reading would make them resident).
func (m *Model) checkPadding(s int) error {
	l := &m.Layout
	lo, hi := 0, l.Shards
	if s >= 0 {
		lo, hi = s, s+1
	}
	var untouched [][2]int
	untouchedRuns(m.W, func(a, b int, zero bool) {
		if zero {
			untouched = append(untouched, [2]int{a, b})
		}
	})
	for s := lo; s < hi; s++ {
		a, b := l.ShardRange(s)
		a += l.shardRows(s) * l.Width
		for len(untouched) > 0 && untouched[0][1] <= a {
			untouched = untouched[1:]
		}
		if a == b || (len(untouched) > 0 && untouched[0][0] <= a && b <= untouched[0][1]) {
			continue
		}
		for _, v := range m.W[a:b] {
			if v != 0 {
				return corrupt("padding of shard %d is not zero", s)
			}
		}
	}
	return nil
}

// hashReader reads exactly the bytes asked for while hashing them.
type hashReader struct {
	r io.Reader
	d *xxhash.Digest
	n int64
}

func (h *hashReader) read(p []byte) error {
	n, err := io.ReadFull(h.r, p)
	h.n += int64(n)
	h.d.Write(p[:n])
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corrupt("ends early at byte %d", h.n)
	}
	return err
}

// check reads a stored hash and compares it with the hash so far.
func (h *hashReader) check() error {
	want := h.d.Sum64()
	var b [8]byte
	if err := h.read(b[:]); err != nil {
		return err
	}
	if binary.LittleEndian.Uint64(b[:]) != want {
		return corrupt("checksum mismatch")
	}
	return nil
}

// floatsN reads n floats into a new slice of exactly n. If grow, the slice
// starts at most growFrom floats long and doubles as data arrives. Unless
// touchZero, pages of zeros in the input are not written to a slice that
// does not grow, so they stay untouched.
func (h *hashReader) floatsN(buf []byte, n int, grow, touchZero bool) ([]float32, error) {
	if !grow || n <= growFrom {
		v := make([]float32, n)
		return v, h.floats(buf, v, !touchZero)
	}
	v := make([]float32, 0, growFrom)
	for len(v) < n {
		if len(v) == cap(v) {
			nv := make([]float32, len(v), min(n, 2*cap(v)))
			copy(nv, v)
			v = nv
		}
		k := min(n, cap(v)) - len(v)
		if err := h.floats(buf, v[len(v):len(v)+k], false); err != nil {
			return nil, err
		}
		v = v[:len(v)+k]
	}
	return v, nil
}

// growFrom is where floatsN starts when it grows: 64 MiB of float32.
const growFrom = 16 << 20

// floats reads len(v) floats into v. With skipZero v must be zero: runs of
// a page of zero bytes are skipped instead of written.
func (h *hashReader) floats(buf []byte, v []float32, skipZero bool) error {
	for len(v) > 0 {
		n := min(len(v), len(buf)/4)
		if err := h.read(buf[:4*n]); err != nil {
			return err
		}
		if !skipZero {
			getFloats(v[:n], buf)
		} else {
			for i := 0; i < n; i += pageFloats {
				j := min(n, i+pageFloats)
				if b := buf[4*i : 4*j]; !bytes.Equal(b, zeroChunk[:len(b)]) {
					getFloats(v[i:j], b)
				}
			}
		}
		v = v[n:]
	}
	return nil
}

// pageFloats is the floats of a 4 KiB page.
const pageFloats = 1024

// SaveFile writes m to path atomically: into a temporary file in the same
// directory, synced, then renamed over path, then the directory synced. On
// any error (a full disk, an unwritable directory) the temporary file is
// removed and an existing file at path is left untouched.
func (m *Model) SaveFile(path string, opt SaveOptions) error {
	return m.saveFile(path, opt, nil)
}

// saveFile is SaveFile with a hook that wraps the file's writer (tests use
// it to simulate a full disk).
func (m *Model) saveFile(path string, opt SaveOptions, wrap func(io.Writer) io.Writer) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = fmt.Errorf("cannot create a file in %s: %w", dir, pe.Err)
		}
		return fmt.Errorf("save %s: %w", path, err)
	}
	tmp, closed, renamed := f.Name(), false, false
	defer func() {
		if err == nil {
			return
		}
		if !closed {
			f.Close()
		}
		if !renamed {
			os.Remove(tmp)
		}
		// The temporary file is gone: say what failed about path, not it.
		var pe *os.PathError
		if errors.As(err, &pe) && pe.Path == tmp {
			err = pe.Err
		}
		var le *os.LinkError
		if errors.As(err, &le) {
			err = le.Err
		}
		err = fmt.Errorf("save %s: %w", path, err)
	}()
	var w io.Writer = f
	if wrap != nil {
		w = wrap(f)
	}
	if _, err = m.Save(w, opt); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	closed = true
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	renamed = true
	// Sync the directory so the rename itself survives a crash. Some file
	// systems cannot sync directories (EINVAL); the rename stands there.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err = d.Sync(); err != nil && (errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.EINVAL)) {
		err = nil
	}
	return err
}

// LoadFile reads the model in path. Errors name the file:
// "model.gt: checksum mismatch (file corrupt or truncated)".
func LoadFile(path string) (*Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	m, err := readModel(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Shard exports: one shard's weights (and optionally optimizer state), for
// handing a shard to a new owner or checkpointing shards separately.
//
//	"GTSHARD\n", version u8 (1 or 2), kind u8, optimizer u8, flags u8
//	(bit 0: state), features u64, width u32, shards u32, shard u32, then
//	version 1 (dense): ShardSize float32 weights, [ShardSize·StatePerWeight
//	  float32 state];
//	version 2 (sparse): R u32, then R rows ascending: feature index u32,
//	  Width float32 weights, [Width·StatePerWeight float32 state], every
//	  row with a nonzero bit in its weights or state and only those;
//	xxhash64 of every byte before it.
//
// AppendShard writes whichever version is smaller, so a shard of a sparse
// model checkpoints in the size of its touched rows and a dense one as
// before (and readable by binaries that know only version 1).
const (
	shardMagic   = "GTSHARD\n"
	shardDense   = 1
	shardSparse  = 2
	shardHeader  = 8 + 4 + 8 + 4 + 4 + 4
	maxShardVers = shardSparse
)

// ShardBytes returns shard s exported as bytes; see AppendShard.
func (m *Model) ShardBytes(s int, withState bool) []byte { return m.AppendShard(nil, s, withState) }

// AppendShard appends shard s's export to dst: its weights and, if
// withState, its optimizer state (s must then be owned here, else it
// panics). LoadShard on a model of the same layout reverses it.
func (m *Model) AppendShard(dst []byte, s int, withState bool) []byte {
	l := &m.Layout
	if withState && m.State[s] == nil {
		panic(fmt.Sprintf("model: exporting the state of shard %d, which is not owned here", s))
	}
	sw := m.StateWidth(withState)
	var rows int
	m.visitRows(s, withState, anyBits, func(uint32, []float32, []float32) { rows++ })
	version := byte(shardDense)
	if 4+rows*(4+4*sw) < 4*l.PerShard*sw {
		version = shardSparse
	}
	start := len(dst)
	le := binary.LittleEndian
	flags := byte(0)
	if withState {
		flags = 1
	}
	dst = append(dst, shardMagic...)
	dst = append(dst, version, byte(m.Kind), byte(m.Opt.Kind), flags)
	dst = le.AppendUint64(dst, l.Features)
	dst = le.AppendUint32(dst, uint32(l.Width))
	dst = le.AppendUint32(dst, uint32(l.Shards))
	dst = le.AppendUint32(dst, uint32(s))
	if version == shardSparse {
		dst = slices.Grow(dst, 4+rows*(4+4*sw)+8)
		dst = le.AppendUint32(dst, uint32(rows))
		m.visitRows(s, withState, anyBits, func(k uint32, row, srow []float32) {
			dst = le.AppendUint32(dst, k)
			dst = appendFloats(dst, row)
			dst = appendFloats(dst, srow)
		})
	} else {
		lo, hi := l.ShardRange(s)
		dst = appendFloats(dst, m.W[lo:hi])
		if withState {
			dst = appendFloats(dst, m.State[s])
		}
	}
	return le.AppendUint64(dst, xxhash.Sum64(dst[start:]))
}

func appendFloats(dst []byte, v []float32) []byte {
	dst = slices.Grow(dst, 4*len(v))
	n := len(dst)
	dst = dst[:n+4*len(v)]
	putFloats(dst[n:], v)
	return dst
}

// LoadShard overwrites shard s with an export of AppendShard. If the export
// carries optimizer state, s becomes owned with that state; otherwise only
// the weights change and ownership and state stay as they were. Errors
// wrap ErrCorrupt (checksum, length, padding, rows), ErrVersion, or
// ErrMismatch (another layout, model kind, optimizer or shard); on error m
// is unchanged.
func (m *Model) LoadShard(s int, b []byte) error {
	l := &m.Layout
	le := binary.LittleEndian
	if len(b) < shardHeader+8 || string(b[:8]) != shardMagic {
		return &fileError{"not a gossiptrain shard export", ErrCorrupt}
	}
	body := b[:len(b)-8]
	if xxhash.Sum64(body) != le.Uint64(b[len(body):]) {
		return corrupt("shard export checksum mismatch")
	}
	version := b[8]
	if version < shardDense || version > maxShardVers {
		return &fileError{fmt.Sprintf("shard export version %d, this binary reads 1 to %d", version, maxShardVers), ErrVersion}
	}
	kind, opt, flags := Kind(b[9]), OptKind(b[10]), b[11]
	features, width := le.Uint64(b[12:]), le.Uint32(b[20:])
	shards, shard := le.Uint32(b[24:]), le.Uint32(b[28:])
	mismatch := func(what string, got, want any) error {
		return &fileError{fmt.Sprintf("shard export has %s %v, this model %v", what, got, want), ErrMismatch}
	}
	switch {
	case kind != m.Kind:
		return mismatch("model kind", kind, m.Kind)
	case features != l.Features || int(width) != l.Width || int(shards) != l.Shards:
		return mismatch("layout", fmt.Sprintf("%d features x %d in %d shards", features, width, shards), l)
	case int(shard) != s:
		return mismatch("shard", shard, s)
	case flags&^1 != 0:
		return corrupt("unknown shard export flags %#x", flags)
	case flags&1 != 0 && opt != m.Opt.Kind:
		return mismatch("optimizer state of", opt, m.Opt.Kind)
	}
	withState := flags&1 != 0
	data := body[shardHeader:]
	if version == shardSparse {
		return m.loadShardRows(s, withState, data)
	}
	n := l.ShardSize()
	if withState {
		n += l.ShardSize() * m.Opt.Kind.StatePerWeight()
	}
	if len(data) != 4*n {
		return corrupt("shard export of %d bytes, want %d", len(b), shardHeader+4*n+8)
	}
	lo, hi := l.ShardRange(s)
	for i := l.shardRows(s) * l.Width; i < l.ShardSize(); i++ {
		if le.Uint32(data[4*i:]) != 0 {
			return corrupt("padding of shard %d is not zero", s)
		}
	}
	getFloats(m.W[lo:hi], data)
	if withState {
		st := make([]float32, n-l.ShardSize())
		getFloats(st, data[4*l.ShardSize():])
		m.State[s] = st
	}
	return nil
}

// loadShardRows is LoadShard of a sparse (version 2) export's rows: every
// row is checked before the shard changes, and the shard's pages never
// written stay so.
func (m *Model) loadShardRows(s int, withState bool, data []byte) error {
	l := &m.Layout
	le := binary.LittleEndian
	w, sw := l.Width, m.StateWidth(withState)
	if len(data) < 4 {
		return corrupt("shard export ends before its rows")
	}
	rows := int64(le.Uint32(data))
	data = data[4:]
	if int64(len(data)) != rows*int64(4+4*sw) {
		return corrupt("shard export of %d rows of width %d in %d bytes", rows, sw, len(data))
	}
	rowBytes := 4 + 4*sw
	for i := range int(rows) {
		k := le.Uint32(data[i*rowBytes:])
		if !l.Valid(k) || l.Shard(k) != s || (i > 0 && k <= le.Uint32(data[(i-1)*rowBytes:])) {
			return corrupt("row %d is not a row of shard %d, or out of order", k, s)
		}
	}
	lo, hi := l.ShardRange(s)
	clearTouched(m.W[lo:hi])
	spw := m.Opt.Kind.StatePerWeight()
	if withState {
		m.State[s] = make([]float32, l.ShardSize()*spw)
	}
	for i := range int(rows) {
		r := data[i*rowBytes : (i+1)*rowBytes]
		slot := l.Slot(le.Uint32(r))
		// The weights are written even when zero: a row with state has its
		// weights' page written (see visitRows).
		getFloats(m.W[lo+slot*w:lo+(slot+1)*w], r[4:4+4*w])
		if withState {
			getFloats(m.State[s][slot*w*spw:(slot+1)*w*spw], r[4+4*w:])
		}
	}
	return nil
}
