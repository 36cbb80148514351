package data

import (
	"bytes"
	"encoding/binary"
	"io"

	"github.com/cespare/xxhash/v2"
)

// criteoColumns is the number of tab-separated columns of a Criteo line:
// the label, 13 integer columns I1..I13 and 26 categorical columns C1..C26.
const criteoColumns = 40

// criteoIntColumns is the number of integer columns.
const criteoIntColumns = 13

// Kinds of hashed Criteo values; the byte is part of the hashed key.
const (
	kindSmall = 'S' // integer v <= 2, kept as is
	kindLog   = 'L' // integer v > 2, bucket floor(ln(v)^2)
	kindCat   = 'C' // categorical token
)

// criteoBucket maps an integer column value to its kind and bucket: values
// up to 2 (zero and negatives included) keep their own value; larger values
// fall into bucket floor(ln(v)^2). This is the transformation of the
// winning Kaggle Criteo solution (Juan, Zhuang, Chin and Lin, "Field-aware
// Factorization Machines for CTR Prediction", RecSys 2016, and their
// released code), which keeps small counts apart and groups large counts
// on a log scale. The bucket comes from an exact threshold table, not from
// math.Log, so every machine computes the same buckets.
func criteoBucket(v int64) (kind byte, bucket int64) {
	if v <= 2 {
		return kindSmall, v
	}
	// The bucket is the number of thresholds <= v, since
	// logBucketStart[b-1] <= v exactly when floor(ln(v)^2) >= b.
	lo, hi := 0, len(logBucketStart)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if logBucketStart[m] <= v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return kindLog, int64(lo)
}

// criteoKey builds the bytes that are hashed for one field value:
// the field number (1..13 for I1..I13, 14..39 for C1..C26), the kind and
// either the bucket as 8 little-endian bytes or the categorical token.
func criteoKey(dst []byte, field int, kind byte, bucket int64, token []byte) []byte {
	dst = append(dst[:0], byte(field), kind)
	if kind == kindCat {
		return append(dst, token...)
	}
	return binary.LittleEndian.AppendUint64(dst, uint64(bucket))
}

// CriteoFeature returns the feature index the Criteo reader gives to the
// raw value token of column field (1..13 for I1..I13, 14..39 for C1..C26)
// with dim features: xxhash64 of the key (see criteoKey) modulo dim. ok is
// false when an integer column's token is not an integer.
func CriteoFeature(field int, token []byte, dim uint64) (k uint32, ok bool) {
	key, ok := criteoFieldKey(nil, field, token)
	if !ok {
		return 0, false
	}
	return uint32(xxhash.Sum64(key) % dim), true
}

func criteoFieldKey(dst []byte, field int, token []byte) ([]byte, bool) {
	if field <= criteoIntColumns {
		v, ok := parseInt64(token)
		if !ok {
			return dst, false
		}
		kind, bucket := criteoBucket(v)
		return criteoKey(dst, field, kind, bucket, nil), true
	}
	return criteoKey(dst, field, kindCat, 0, token), true
}

// criteoReader parses Criteo TSV lines with the hashing trick.
type criteoReader struct {
	sh  *shared
	st  *stream
	lr  *lineReader
	lab labelMapper
	dim uint64
	key []byte
	x   *interactor // nil without interactions
}

func newCriteoReader(sh *shared, st *stream) *criteoReader {
	sh.lines.reset(st, st.name)
	return &criteoReader{sh: sh, st: st, lr: sh.lines, lab: newLabelMapper(&sh.opt, sh.raw), dim: sh.opt.Dim,
		key: make([]byte, 0, 64), x: newInteractor(sh.interactions)}
}

func (r *criteoReader) close() error { return r.st.Close() }

func (r *criteoReader) read(b *Batch, max int) (int, error) {
	n := 0
	for n < max {
		line, ok := r.lr.next()
		if !ok {
			if r.lr.err != nil {
				return n, r.lr.err
			}
			return n, io.EOF
		}
		if len(line) == 0 {
			continue // blank line: not a row
		}
		if !r.sh.part.take() {
			continue
		}
		label, f := r.parse(line, b)
		if f.code != fOK {
			b.DropRow()
			if r.sh.opt.SkipBad {
				r.sh.stats.BadLines++
				continue
			}
			return n, badLine(r.st.name, r.lr.line, line, r.lr.ahead(256), f, &r.sh.opt)
		}
		b.EndRow(label)
		b.mark(Place{r.st.name, r.lr.line})
		r.sh.noteRaw(r.lab.last, Place{r.st.name, r.lr.line})
		n++
	}
	return n, nil
}

// parse appends the hashed features of one line to b, sorted, with
// colliding features merged into one whose value is their count.
func (r *criteoReader) parse(line []byte, b *Batch) (float32, fault) {
	tabs := bytes.Count(line, []byte{'\t'})
	var label float32
	t := -1 // the tab before I1
	switch {
	case r.sh.opt.NoLabels && tabs == criteoColumns-2:
		// no label column (the Criteo challenge's test file)
	case tabs != criteoColumns-1:
		return 0, fault{code: fColumns, start: 0, end: len(line), num: int64(tabs + 1)}
	case r.sh.opt.NoLabels:
		t = bytes.IndexByte(line, '\t')
	default:
		t = bytes.IndexByte(line, '\t')
		var code faultCode
		if label, code = r.lab.text(line[:t]); code != fOK {
			return 0, fault{code: code, start: 0, end: t, num: int64(r.lab.last)}
		}
	}
	first := len(b.Indices)
	sorted := true
	prev := int64(-1)
	i := t + 1
	if r.x != nil {
		r.x.reset()
	}
	for field := 1; field < criteoColumns; field++ {
		e := len(line)
		if field < criteoColumns-1 {
			e = i + bytes.IndexByte(line[i:], '\t')
		}
		tok := line[i:e]
		if len(tok) > 0 {
			var ok bool
			if r.key, ok = criteoFieldKey(r.key, field, tok); !ok {
				return 0, fault{code: fInteger, start: i, end: e, num: int64(field)}
			}
			h := xxhash.Sum64(r.key)
			k := int64(h % r.dim)
			if k <= prev {
				sorted = false
			}
			prev = k
			b.Add(uint32(k), 1)
			if r.x != nil {
				r.x.add(criteoNamespace(field), uint32(h), 1)
			}
		}
		i = e + 1
	}
	if r.x != nil {
		r.x.emit(b, r.dim)
		sorted = false
	}
	if !sorted {
		mergeRow(b, first)
	}
	return label, fault{}
}

// mergeRow sorts the row being built (from first on), whose values are all
// 1, and merges equal indices (hash collisions) into one feature whose
// value is their count.
func mergeRow(b *Batch, first int) {
	idx, val := b.Indices[first:], b.Values[first:]
	// Insertion sort: for ~39 hashed indices it beats pdqsort (426 vs 828
	// ns per row measured), and the values need not move: they are all 1.
	for i := 1; i < len(idx); i++ {
		k := idx[i]
		j := i
		for j > 0 && idx[j-1] > k {
			idx[j] = idx[j-1]
			j--
		}
		idx[j] = k
	}
	w := 0
	for i := range idx {
		if w > 0 && idx[w-1] == idx[i] {
			val[w-1]++
			continue
		}
		idx[w], val[w] = idx[i], 1
		w++
	}
	b.Indices = b.Indices[:first+w]
	b.Values = b.Values[:first+w]
}
