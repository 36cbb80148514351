package data

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Cache file layout (all integers little-endian):
//
//	magic    "GTCACHE\x00"                8 bytes
//	version  uint32                       currently 1
//	hdrLen   uint32
//	header   JSON of cacheHeader          hdrLen bytes
//	hdrSum   uint64 xxhash64(header)
//	blocks   each:
//	           payloadLen uint32
//	           rows       uint32
//	           nnz        uint32
//	           flags      uint8           bit 0: every value is 1, no values stored;
//	                                      bit 1: a weights section follows the values
//	           payload    rows section, then values section, then weights section
//	           sum        uint64 xxhash64(the 13 header bytes and the payload)
//	trailer  "GTCTRAIL" | rows uint64 | nnz uint64 | badLines uint64 |
//	         blocks uint64 | xxhash64 of those 40 bytes          48 bytes
//
// The rows section holds, per row: uvarint label (the class number, 0/1
// for binary data), uvarint nnz, then the indices as uvarint deltas (the
// first index itself, then the difference to the previous one, >= 1). The
// values section holds the block's nnz values as float32, absent when flag
// bit 0 is set, so one-hot data stores no values at all. The weights
// section holds one float32 importance weight per row of the block, and
// only blocks with a weight other than 1 have one (flag bit 1), so caches
// of unweighted data are as before.
const (
	cacheMagic        = "GTCACHE\x00"
	cacheTrailerMagic = "GTCTRAIL"
	cacheVersion      = 1
	cacheBlockHeader  = 13
	cacheTrailerSize  = 48
	cacheFlagOnes     = 1
	cacheFlagWeights  = 2
	// cacheBlockTarget is the payload size at which a block is closed.
	cacheBlockTarget = 1 << 20
	// cacheMaxHeader bounds the JSON header a reader accepts.
	cacheMaxHeader = 64 << 20
)

// cacheHeader records what a cache was built from: the inputs and every
// option that changes the rows.
type cacheHeader struct {
	Format    string `json:"format"`
	ZeroBased bool   `json:"zero_based"`
	Dim       uint64 `json:"dim"`
	Classes   int    `json:"classes"`
	LabelBase int    `json:"label_base"`
	Part      int    `json:"part"`
	Parts     int    `json:"parts"`
	// MaxValue is Options.MaxValue, left out when 0 so caches built
	// before it existed stay valid.
	MaxValue float64 `json:"max_value,omitempty"`
	// Interactions are Options.Interactions (sorted as ParseInteractions
	// sorts them), left out when none.
	Interactions []string    `json:"interactions,omitempty"`
	Inputs       []cacheFile `json:"inputs"`
}

// cacheFile identifies an input file by absolute path, size and mtime.
type cacheFile struct {
	Path    string     `json:"path"`
	Size    int64      `json:"size"`
	ModTime int64      `json:"mtime_ns"`
	Labels  *cacheFile `json:"labels,omitempty"`
}

func statInput(path string) (*cacheFile, error) {
	if key, once, err := streamKey(path); err == nil && once {
		// A stream cannot be checked against an earlier run's cache: its
		// identity is this process's, so a cache built from it is read by
		// later epochs of this run only (as VW's cache of standard input).
		s, err := getStream(key, path)
		if err != nil {
			return nil, err
		}
		return &cacheFile{Path: displayName(path), Size: -1, ModTime: s.created.UnixNano()}, nil
	}
	path = regularPath(path)
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	return &cacheFile{Path: abs, Size: st.Size(), ModTime: st.ModTime().UnixNano()}, nil
}

// newCacheHeader describes a cache of the resolved inputs read with opt.
func newCacheHeader(inputs []input, opt Options) ([]byte, error) {
	h := cacheHeader{
		Format: inputs[0].format.String(), ZeroBased: opt.ZeroBased, Dim: opt.Dim,
		Classes: opt.Classes, LabelBase: opt.LabelBase, Part: opt.Part, Parts: opt.Parts,
		MaxValue: opt.MaxValue,
	}
	if len(opt.Interactions) > 0 {
		list, err := ParseInteractions(strings.Join(opt.Interactions, ","))
		if err != nil {
			return nil, err
		}
		h.Interactions = list
	}
	for _, in := range inputs {
		if in.format == FormatCache {
			return nil, fmt.Errorf("%w: input %s is already a cache", ErrOptions, in.path)
		}
		f, err := statInput(in.path)
		if err != nil {
			return nil, err
		}
		if in.labels != "" {
			if f.Labels, err = statInput(in.labels); err != nil {
				return nil, err
			}
		}
		h.Inputs = append(h.Inputs, *f)
	}
	return json.Marshal(h)
}

// cacheMeta is what the header and trailer of a cache file say.
type cacheMeta struct {
	header     []byte // JSON
	hdr        cacheHeader
	dataStart  int64 // first block
	dataEnd    int64 // trailer
	rows, nnz  int64
	badLines   int64
	blockCount int64
}

func corrupt(name, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrCorrupt, name, fmt.Sprintf(format, args...))
}

// readCacheMeta checks the magic, version, header and trailer of a cache.
func readCacheMeta(r io.ReaderAt, size int64, name string) (*cacheMeta, error) {
	var fixed [16]byte
	if size < int64(len(fixed))+8+cacheTrailerSize {
		return nil, corrupt(name, "%d bytes is too short for a cache", size)
	}
	if _, err := r.ReadAt(fixed[:], 0); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if string(fixed[:8]) != cacheMagic {
		return nil, corrupt(name, "not a gossiptrain cache (bad magic)")
	}
	if v := binary.LittleEndian.Uint32(fixed[8:]); v != cacheVersion {
		return nil, corrupt(name, "cache version %d, this build reads version %d", v, cacheVersion)
	}
	hl := int64(binary.LittleEndian.Uint32(fixed[12:]))
	if hl > cacheMaxHeader || 16+hl+8+cacheTrailerSize > size {
		return nil, corrupt(name, "header length %d does not fit the file", hl)
	}
	m := &cacheMeta{header: make([]byte, hl+8)}
	if _, err := r.ReadAt(m.header, 16); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	sum := binary.LittleEndian.Uint64(m.header[hl:])
	m.header = m.header[:hl]
	if xxhash.Sum64(m.header) != sum {
		return nil, corrupt(name, "header checksum mismatch")
	}
	if err := json.Unmarshal(m.header, &m.hdr); err != nil {
		return nil, corrupt(name, "header: %v", err)
	}
	var t [cacheTrailerSize]byte
	if _, err := r.ReadAt(t[:], size-cacheTrailerSize); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if string(t[:8]) != cacheTrailerMagic || xxhash.Sum64(t[:40]) != binary.LittleEndian.Uint64(t[40:]) {
		return nil, corrupt(name, "no valid trailer (cache not finished or truncated)")
	}
	m.rows = int64(binary.LittleEndian.Uint64(t[8:]))
	m.nnz = int64(binary.LittleEndian.Uint64(t[16:]))
	m.badLines = int64(binary.LittleEndian.Uint64(t[24:]))
	m.blockCount = int64(binary.LittleEndian.Uint64(t[32:]))
	if m.rows < 0 || m.nnz < 0 || m.badLines < 0 || m.blockCount < 0 {
		return nil, corrupt(name, "negative counts in trailer")
	}
	m.dataStart = 16 + hl + 8
	m.dataEnd = size - cacheTrailerSize
	return m, nil
}

// CheckCache reports whether cachePath holds a finished cache of the inputs
// the patterns name, read with opt: nil if OpenCached would read it. The
// error otherwise says why (wrapping ErrStaleCache, ErrCorrupt or
// fs.ErrNotExist). It checks the header and trailer; the checksum of every
// block is verified as the rows are read.
func CheckCache(patterns []string, opt Options, cachePath string) error {
	if err := opt.Validate(); err != nil {
		return err
	}
	inputs, err := resolveInputs(patterns, opt)
	if err != nil {
		return err
	}
	want, err := newCacheHeader(inputs, opt)
	if err != nil {
		return err
	}
	return checkCache(cachePath, want, opt.SkipBad)
}

func checkCache(path string, want []byte, skipBad bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	m, err := readCacheMeta(f, st.Size(), path)
	if err != nil {
		return err
	}
	if !bytes.Equal(m.header, want) {
		return fmt.Errorf("%w: %s was built from other inputs or options", ErrStaleCache, path)
	}
	if m.badLines > 0 && !skipBad {
		return fmt.Errorf("%w: %s skipped %d bad lines but bad lines are not to be skipped now", ErrStaleCache, path, m.badLines)
	}
	return nil
}

// OpenCached is Open with a cache of the parsed rows at cachePath, in the
// manner of Vowpal Wabbit's --cache_file. If cachePath holds a finished
// cache whose header matches the inputs (paths, sizes and modification
// times) and the options that shape the rows (format, ZeroBased, Dim,
// Classes, LabelBase, Part, Parts, MaxValue, Interactions) it is read
// instead of the inputs. A stream (standard input: see IsStream) matches
// the caches this process built from it only, so later epochs read the
// cache and never the stream again, as VW's --cache_file does.
// Otherwise the inputs are parsed and the cache is written while they
// stream: to a temporary file beside cachePath that is synced and renamed
// over cachePath only when every row was read without error. An error, or
// Close before the end, removes the temporary file and leaves any old
// cache alone.
//
// Peers that share a directory need one cache path per part. Use CheckCache
// first to learn whether the cache will be used.
func OpenCached(patterns []string, opt Options, cachePath string) (Source, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	inputs, err := resolveInputs(patterns, opt)
	if err != nil {
		return nil, err
	}
	absCache, err := filepath.Abs(cachePath)
	if err != nil {
		return nil, err
	}
	for _, in := range inputs {
		if abs, err := filepath.Abs(in.path); err == nil && abs == absCache {
			return nil, fmt.Errorf("%w: cache %s is also an input", ErrOptions, cachePath)
		}
	}
	hdr, err := newCacheHeader(inputs, opt)
	if err != nil {
		return nil, err
	}
	if checkCache(cachePath, hdr, opt.SkipBad) == nil {
		copt := opt
		copt.Format, copt.Part, copt.Parts = FormatCache, 0, 0 // the cache holds this part only
		copt.Interactions = nil                                // and its rows have them
		return openInputs([]input{{path: cachePath, format: FormatCache}}, copt, false)
	}
	src, err := openInputs(inputs, opt, false)
	if err != nil {
		return nil, err
	}
	w, err := newCacheWriter(cachePath, hdr)
	if err != nil {
		src.Close()
		return nil, err
	}
	return &cachingSource{src: src, w: w}, nil
}

// cacheWriter encodes rows into blocks and writes them to a temporary file.
type cacheWriter struct {
	path      string
	tmp       *os.File
	w         *bufio.Writer
	rowsBuf   []byte
	valsBuf   []byte
	wBuf      []byte // every row's weight; written when weighted
	ones      bool
	weighted  bool // a row of the block weighs other than 1
	blockRows uint32
	blockNNZ  uint32
	blocks    int64
	rows, nnz int64
	d         xxhash.Digest
}

func newCacheWriter(path string, header []byte) (*cacheWriter, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("cache %s: %w", path, err)
	}
	c := &cacheWriter{path: path, tmp: tmp, w: bufio.NewWriterSize(tmp, 1<<20), ones: true}
	var fixed [16]byte
	copy(fixed[:], cacheMagic)
	binary.LittleEndian.PutUint32(fixed[8:], cacheVersion)
	binary.LittleEndian.PutUint32(fixed[12:], uint32(len(header)))
	c.w.Write(fixed[:])
	c.w.Write(header)
	c.w.Write(binary.LittleEndian.AppendUint64(nil, xxhash.Sum64(header)))
	return c, nil
}

// add encodes every row of b.
func (c *cacheWriter) add(b *Batch) error {
	for r := range b.Rows() {
		idx, val := b.Row(r)
		c.rowsBuf = binary.AppendUvarint(c.rowsBuf, uint64(b.Labels[r]))
		c.rowsBuf = binary.AppendUvarint(c.rowsBuf, uint64(len(idx)))
		prev := uint32(0)
		for i, k := range idx {
			if i > 0 && k <= prev {
				panic(fmt.Sprintf("data: row with unsorted indices reached the cache writer: %v", idx))
			}
			c.rowsBuf = binary.AppendUvarint(c.rowsBuf, uint64(k-prev))
			prev = k
		}
		for _, v := range val {
			if v != 1 {
				c.ones = false
			}
			c.valsBuf = binary.LittleEndian.AppendUint32(c.valsBuf, math.Float32bits(v))
		}
		w := b.Weight(r)
		if w != 1 {
			c.weighted = true
		}
		c.wBuf = binary.LittleEndian.AppendUint32(c.wBuf, math.Float32bits(w))
		c.blockRows++
		c.blockNNZ += uint32(len(idx))
		c.rows++
		c.nnz += int64(len(idx))
		if len(c.rowsBuf)+len(c.valsBuf) >= cacheBlockTarget || c.blockNNZ >= 1<<28 {
			if err := c.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush writes the current block.
func (c *cacheWriter) flush() error {
	if c.blockRows == 0 {
		return nil
	}
	vals, weights := c.valsBuf, []byte(nil)
	var flags byte
	if c.ones {
		vals, flags = nil, cacheFlagOnes
	}
	if c.weighted {
		weights = c.wBuf
		flags |= cacheFlagWeights
	}
	var h [cacheBlockHeader]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(len(c.rowsBuf)+len(vals)+len(weights)))
	binary.LittleEndian.PutUint32(h[4:], c.blockRows)
	binary.LittleEndian.PutUint32(h[8:], c.blockNNZ)
	h[12] = flags
	c.d.Reset()
	c.d.Write(h[:])
	c.d.Write(c.rowsBuf)
	c.d.Write(vals)
	c.d.Write(weights)
	c.w.Write(h[:])
	c.w.Write(c.rowsBuf)
	c.w.Write(vals)
	c.w.Write(weights)
	_, err := c.w.Write(binary.LittleEndian.AppendUint64(h[:0], c.d.Sum64()))
	c.rowsBuf, c.valsBuf, c.wBuf = c.rowsBuf[:0], c.valsBuf[:0], c.wBuf[:0]
	c.ones, c.weighted, c.blockRows, c.blockNNZ = true, false, 0, 0
	c.blocks++
	if err != nil {
		return fmt.Errorf("cache %s: %w", c.path, err)
	}
	return nil
}

// finish writes the last block and the trailer, syncs the file and renames
// it over the cache path.
func (c *cacheWriter) finish(badLines int64) error {
	if err := c.flush(); err != nil {
		return err
	}
	t := make([]byte, 0, cacheTrailerSize)
	t = append(t, cacheTrailerMagic...)
	t = binary.LittleEndian.AppendUint64(t, uint64(c.rows))
	t = binary.LittleEndian.AppendUint64(t, uint64(c.nnz))
	t = binary.LittleEndian.AppendUint64(t, uint64(badLines))
	t = binary.LittleEndian.AppendUint64(t, uint64(c.blocks))
	t = binary.LittleEndian.AppendUint64(t, xxhash.Sum64(t))
	c.w.Write(t)
	err := c.w.Flush()
	if err == nil {
		err = c.tmp.Sync()
	}
	if cerr := c.tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(c.tmp.Name(), c.path)
	}
	if err != nil {
		os.Remove(c.tmp.Name())
		return fmt.Errorf("cache %s: %w", c.path, err)
	}
	if d, err := os.Open(filepath.Dir(c.path)); err == nil {
		d.Sync() // make the rename durable; not all systems support it
		d.Close()
	}
	return nil
}

// abort removes the temporary file.
func (c *cacheWriter) abort() {
	c.tmp.Close()
	os.Remove(c.tmp.Name())
}

// cachingSource passes rows through and writes them to a cache.
type cachingSource struct {
	src  *multiSource
	w    *cacheWriter
	done bool  // cache finished or aborted
	err  error // sticky
}

func (c *cachingSource) Next(b *Batch, max int) (int, error) {
	if c.err != nil {
		b.Reset()
		return 0, c.err
	}
	n, err := c.src.Next(b, max)
	if err == nil {
		if err = c.w.add(b); err != nil {
			c.fail(err)
			return 0, err
		}
		return n, nil
	}
	if err == io.EOF {
		if !c.done {
			c.done = true
			if ferr := c.w.finish(c.src.Stats().BadLines); ferr != nil {
				c.err = ferr
				return 0, ferr
			}
		}
		return 0, io.EOF
	}
	c.fail(err)
	return n, err
}

func (c *cachingSource) fail(err error) {
	c.err = err
	if !c.done {
		c.done = true
		c.w.abort()
	}
}

func (c *cachingSource) Stats() Stats { return c.src.Stats() }

// Close closes the inputs; before the end of the rows it also drops the
// unfinished cache.
func (c *cachingSource) Close() error {
	if !c.done {
		c.done = true
		c.w.abort()
	}
	if c.err == nil {
		c.err = errClosed
	}
	return c.src.Close()
}

// ones is copied into the values of one-hot rows.
var ones = func() (o [1024]float32) {
	for i := range o {
		o[i] = 1
	}
	return o
}()

// cacheReader reads the rows of one cache file.
type cacheReader struct {
	sh      *shared
	f       *os.File
	name    string
	br      *bufio.Reader
	m       *cacheMeta
	limit   uint64 // features must be < limit
	classes int
	block   []byte // payload and checksum of the current block
	rows    []byte // unread part of the rows section
	vals    []byte // unread part of the values section
	weights []byte // unread part of the weights section (none: every row weighs 1)
	ones    bool
	left    uint32 // rows left in the block
	blocks  int64  // blocks read
	nrows   int64  // rows decoded
	nnz     int64  // nonzeros decoded
	d       xxhash.Digest
}

func newCacheReader(sh *shared, path string) (_ *cacheReader, err error) {
	name := displayName(path)
	if key, once, err := streamKey(path); err != nil {
		return nil, err
	} else if once {
		s, err := getStream(key, path)
		if err != nil {
			return nil, err
		}
		if s.spool == "" {
			return nil, fmt.Errorf("%w: %s: a cache is read from a file, not a stream: give the cache file", ErrFormat, name)
		}
		path = s.spool
	}
	f, err := os.Open(regularPath(path))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	m, err := readCacheMeta(f, st.Size(), path)
	if err != nil {
		return nil, err
	}
	o := &sh.opt
	switch {
	case sh.raw:
		// Scan reads the stored classes whatever the options say.
	case o.Classes != m.hdr.Classes:
		return nil, fmt.Errorf("%w: cache %s holds labels for Classes %d, not %d", ErrOptions, path, m.hdr.Classes, o.Classes)
	case o.Dim != 0 && m.hdr.Dim != 0 && o.Dim != m.hdr.Dim:
		return nil, fmt.Errorf("%w: cache %s holds features for Dim %d, not %d", ErrOptions, path, m.hdr.Dim, o.Dim)
	}
	r := &cacheReader{sh: sh, f: f, name: name, m: m, classes: m.hdr.Classes, limit: MaxDim}
	sh.formatDim = max(sh.formatDim, m.hdr.Dim)
	if o.Dim != 0 {
		r.limit = o.Dim
	} else if m.hdr.Dim != 0 {
		r.limit = m.hdr.Dim
	}
	sh.stats.Bytes += m.dataStart + cacheTrailerSize
	sec := io.NewSectionReader(f, m.dataStart, m.dataEnd-m.dataStart)
	// A small buffer: block payloads (about 1 MiB) are read past it straight
	// into the block buffer.
	r.br = bufio.NewReaderSize(countingReader{sec, &sh.stats.Bytes}, 64<<10)
	return r, nil
}

func (r *cacheReader) close() error {
	putBuf(r.block)
	r.block, r.rows, r.vals = nil, nil, nil
	return r.f.Close()
}

func (r *cacheReader) corrupt(format string, args ...any) error {
	return corrupt(r.name, "block %d: %s", r.blocks, fmt.Sprintf(format, args...))
}

// nextBlock reads and checks the next block; io.EOF after the last one.
func (r *cacheReader) nextBlock() error {
	if len(r.rows) != 0 || len(r.vals) != 0 || len(r.weights) != 0 {
		return r.corrupt("%d bytes left after the last row", len(r.rows)+len(r.vals)+len(r.weights))
	}
	var h [cacheBlockHeader]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		if err == io.EOF {
			if r.blocks != r.m.blockCount || r.nrows != r.m.rows || r.nnz != r.m.nnz {
				return corrupt(r.name, "%d blocks, %d rows, %d nonzeros but the trailer says %d, %d, %d",
					r.blocks, r.nrows, r.nnz, r.m.blockCount, r.m.rows, r.m.nnz)
			}
			return io.EOF
		}
		if err == io.ErrUnexpectedEOF {
			return r.corrupt("truncated block header")
		}
		return fmt.Errorf("%s: %w", r.name, err)
	}
	size := int64(binary.LittleEndian.Uint32(h[0:]))
	rows := binary.LittleEndian.Uint32(h[4:])
	nnz := binary.LittleEndian.Uint32(h[8:])
	flags := h[12]
	valBytes := int64(nnz) * 4
	if flags&cacheFlagOnes != 0 {
		valBytes = 0
	}
	wBytes := int64(0)
	if flags&cacheFlagWeights != 0 {
		wBytes = int64(rows) * 4
	}
	switch {
	case size+8 > r.m.dataEnd-r.m.dataStart:
		return r.corrupt("payload of %d bytes is larger than the file", size)
	case flags&^(cacheFlagOnes|cacheFlagWeights) != 0:
		return r.corrupt("unknown flags 0x%02x", flags)
	case rows == 0 || int64(rows)*2+int64(nnz)+valBytes+wBytes > size:
		return r.corrupt("%d rows and %d nonzeros do not fit %d bytes", rows, nnz, size)
	}
	if int64(cap(r.block)) < size+8 {
		putBuf(r.block)
		r.block = getBuf(int(max(size+8, cacheBlockTarget+64<<10)))
	}
	r.block = r.block[:size+8]
	if _, err := io.ReadFull(r.br, r.block); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return r.corrupt("truncated payload")
		}
		return fmt.Errorf("%s: %w", r.name, err)
	}
	r.d.Reset()
	r.d.Write(h[:])
	r.d.Write(r.block[:size])
	if r.d.Sum64() != binary.LittleEndian.Uint64(r.block[size:]) {
		return r.corrupt("checksum mismatch")
	}
	r.blocks++
	r.rows = r.block[:size-valBytes-wBytes]
	r.vals = r.block[size-valBytes-wBytes : size-wBytes]
	r.weights = r.block[size-wBytes : size]
	r.ones = valBytes == 0
	r.left = rows
	return nil
}

// uvarint decodes from r.rows, with a one-byte fast path.
func (r *cacheReader) uvarint() (uint64, bool) {
	if len(r.rows) > 0 && r.rows[0] < 0x80 {
		v := uint64(r.rows[0])
		r.rows = r.rows[1:]
		return v, true
	}
	v, n := binary.Uvarint(r.rows)
	if n <= 0 {
		return 0, false
	}
	r.rows = r.rows[n:]
	return v, true
}

func (r *cacheReader) read(b *Batch, max int) (int, error) {
	n := 0
	for n < max {
		if r.left == 0 {
			if err := r.nextBlock(); err != nil {
				if err == io.EOF {
					r.sh.stats.BadLines += r.m.badLines
				}
				return n, err
			}
		}
		take := r.sh.part.take()
		if err := r.row(b, take); err != nil {
			b.DropRow()
			return n, err
		}
		if take {
			n++
		}
	}
	return n, nil
}

// decodeDeltas decodes len(idx) delta-uvarint indices from buf into idx.
// It returns the bytes used and the last index, or why the bytes are bad:
// a delta of 2^32 or more (more than 5 bytes), a zero delta after the first
// (a repeated index), or too few bytes.
func decodeDeltas(buf []byte, idx []uint32) (int, uint64, string) {
	pos, k := 0, uint64(0)
	i := 0
	// Fast path: while 5 bytes remain for every index left, no delta can
	// run past the end, so the loop needs no length checks of its own.
	for ; i < len(idx) && len(buf)-pos >= 5*(len(idx)-i); i++ {
		c := buf[pos]
		d := uint64(c & 0x7f)
		pos++
		if c >= 0x80 {
			c = buf[pos]
			d |= uint64(c&0x7f) << 7
			pos++
			if c >= 0x80 {
				c = buf[pos]
				d |= uint64(c&0x7f) << 14
				pos++
				if c >= 0x80 {
					c = buf[pos]
					d |= uint64(c&0x7f) << 21
					pos++
					if c >= 0x80 {
						c = buf[pos]
						d |= uint64(c) << 28
						pos++
						if c >= 0x10 {
							return pos, k, "index delta of 2^32 or more"
						}
					}
				}
			}
		}
		if d == 0 && i > 0 {
			return pos, k, "index repeats"
		}
		k += d // fewer than 2^32 deltas below 2^32: no overflow
		idx[i] = uint32(k)
	}
	for ; i < len(idx); i++ {
		d, m := binary.Uvarint(buf[pos:])
		if m <= 0 || d >= 1<<32 {
			return pos, k, "bad index delta"
		}
		if d == 0 && i > 0 {
			return pos, k, "index repeats"
		}
		pos += m
		k += d
		idx[i] = uint32(k)
	}
	return pos, k, ""
}

// row decodes one row, appending it to b when keep is set.
func (r *cacheReader) row(b *Batch, keep bool) error {
	r.left--
	label, ok := r.uvarint()
	if !ok {
		return r.corrupt("bad label")
	}
	if (r.classes == 0 && label > 1) || (r.classes > 0 && label >= uint64(r.classes)) {
		return r.corrupt("label %d with Classes %d", label, r.classes)
	}
	nnz, ok := r.uvarint()
	if !ok || nnz > uint64(len(r.rows)) || (!r.ones && nnz*4 > uint64(len(r.vals))) {
		return r.corrupt("bad row length")
	}
	n := int(nnz)
	base := len(b.Indices)
	b.Indices = slices.Grow(b.Indices, n)[:base+n] // every element is written below
	b.Values = slices.Grow(b.Values, n)[:base+n]
	idx, val := b.Indices[base:], b.Values[base:]
	pos, k, err := decodeDeltas(r.rows, idx)
	if err != "" {
		return r.corrupt("%s", err)
	}
	if k >= r.limit { // indices ascend, so the last is the largest
		return r.corrupt("feature %d is outside dim %d", k, r.limit)
	}
	r.rows = r.rows[pos:]
	if r.ones {
		for len(val) > 0 {
			val = val[copy(val, ones[:]):]
		}
	} else {
		vs := r.vals[:4*n]
		for i := range val {
			bits := binary.LittleEndian.Uint32(vs[4*i:])
			if bits&0x7f800000 == 0x7f800000 {
				return r.corrupt("value is NaN or infinite")
			}
			val[i] = math.Float32frombits(bits)
		}
		r.vals = r.vals[4*n:]
	}
	w := float32(1)
	if len(r.weights) > 0 {
		w = math.Float32frombits(binary.LittleEndian.Uint32(r.weights))
		r.weights = r.weights[4:]
		if !(w >= 0) || math.IsInf(float64(w), 0) {
			return r.corrupt("weight %g is not a number >= 0", w)
		}
	}
	r.nrows++
	r.nnz += int64(n)
	if !keep {
		b.DropRow()
		return nil
	}
	b.EndRowWeighted(float32(label), w)
	b.mark(Place{r.name, r.nrows})
	if r.sh.raw {
		r.sh.rawLabels = append(r.sh.rawLabels, float64(label))
	}
	return nil
}
