package data

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"sort"
)

// noteRaw records, for Scan, a row's label as written and where the row
// is (the text and IDX readers; TestScan* pin what Scan reports of them).
func (sh *shared) noteRaw(label float64, p Place) {
	if sh.raw {
		sh.rawLabels = append(sh.rawLabels, label)
		sh.rawPlaces = append(sh.rawPlaces, p)
	}
}

// shared is the state every file reader of one Source updates.
type shared struct {
	opt   Options
	part  partition
	stats Stats
	// raw is set by Scan: labels are recorded in rawLabels, not mapped.
	raw       bool
	rawLabels []float64
	rawPlaces []Place     // where each raw label's row is
	lines     *lineReader // text readers share one buffer
	// formatDim is the largest dimension a file's format fixes: IDX pixels
	// per image, a cache's Dim (for ScanResult.Dim).
	formatDim uint64
	// interactions are Options.Interactions with each one's namespaces
	// sorted (ParseInteractions).
	interactions []string
}

// rowReader reads the rows of one input file.
type rowReader interface {
	// read appends up to max rows to b and returns how many; io.EOF when
	// the file has no more rows (possibly with some rows appended).
	read(b *Batch, max int) (int, error)
	close() error
}

// featureLimit is the exclusive bound on features: Dim, or MaxDim when Dim
// is unchecked (index MaxDim would be the bias row of the largest model).
func featureLimit(o *Options) uint64 {
	if o.Dim != 0 {
		return o.Dim
	}
	return MaxDim
}

// libsvmReader parses "label idx:val idx:val ... # comment" lines.
type libsvmReader struct {
	sh       *shared
	st       *stream
	lr       *lineReader
	lab      labelMapper
	limit    uint64
	oneBased bool
	maxValue float64 // Options.MaxValue: 0 checks nothing
	sorter   pairSorter
}

func newLibSVMReader(sh *shared, st *stream) *libsvmReader {
	sh.lines.reset(st, st.name)
	return &libsvmReader{
		sh:       sh,
		st:       st,
		lr:       sh.lines,
		lab:      newLabelMapper(&sh.opt, sh.raw),
		limit:    featureLimit(&sh.opt),
		oneBased: !sh.opt.ZeroBased,
		maxValue: sh.opt.MaxValue,
	}
}

func (r *libsvmReader) close() error { return r.st.Close() }

func (r *libsvmReader) read(b *Batch, max int) (int, error) {
	n := 0
	for n < max {
		line, ok := r.lr.next()
		if !ok {
			if r.lr.err != nil {
				return n, r.lr.err
			}
			return n, io.EOF
		}
		i := 0
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i == len(line) || line[i] == '#' {
			continue // blank or comment line: not a row
		}
		if !r.sh.part.take() {
			continue // another part's row: not parsed
		}
		label, weight, f := r.parse(line, i, b)
		if f.code != fOK {
			b.DropRow()
			if r.sh.opt.SkipBad {
				r.sh.stats.BadLines++
				continue
			}
			if f.code == fLabelNotNumber && r.lr.line == 1 && bytes.IndexByte(line, ',') >= 0 {
				return n, csvError(r.st.name)
			}
			return n, badLine(r.st.name, r.lr.line, line, r.lr.ahead(256), f, &r.sh.opt)
		}
		b.EndRowWeighted(label, weight)
		b.mark(Place{r.st.name, r.lr.line})
		r.sh.noteRaw(r.lab.last, Place{r.st.name, r.lr.line})
		n++
	}
	return n, nil
}

// qidPrefix starts a query id token, which is not a feature.
var qidPrefix = []byte("qid:")

func isSpace(c byte) bool { return c == ' ' || c == '\t' }

// tokenEnd returns the index of the first blank at or after i.
func tokenEnd(line []byte, i int) int {
	for i < len(line) && !isSpace(line[i]) {
		i++
	}
	return i
}

// parse appends the features of the data line (starting at its first
// non-blank byte i) to b and returns its label and importance weight. The
// label token may carry the weight as "label:weight", as dmlc-core's
// libsvm parser (XGBoost's text input) reads it.
func (r *libsvmReader) parse(line []byte, i int, b *Batch) (float32, float32, fault) {
	j := tokenEnd(line, i)
	var label float32
	weight := float32(1)
	switch {
	case !r.sh.opt.NoLabels:
		tok := line[i:j]
		if c := bytes.IndexByte(tok, ':'); c >= 0 {
			var code faultCode
			if weight, code = parseWeight(tok[c+1:]); code != fOK {
				return 0, 0, fault{code: code, start: i, end: j}
			}
			tok = tok[:c]
		}
		var code faultCode
		if label, code = r.lab.text(tok); code != fOK {
			return 0, 0, fault{code: code, start: i, end: j, num: int64(r.lab.last)}
		}
	case bytes.IndexByte(line[i:j], ':') >= 0 && !bytes.HasPrefix(line[i:j], qidPrefix) && !r.weightedLabel(line[i:j]):
		j = i // no label: the line starts with its first feature
	}
	first := len(b.Indices)
	sorted := true
	prev := int64(-1)
	i = j
	n := len(line)
	for {
		for i < n && isSpace(line[i]) {
			i++
		}
		if i == n || line[i] == '#' {
			break
		}
		start := i
		var idx uint64
		for i < n {
			c := line[i] - '0'
			if c > 9 {
				break
			}
			idx = idx*10 + uint64(c)
			i++
		}
		nd := i - start
		if nd == 0 || i == n || line[i] != ':' {
			end := tokenEnd(line, i)
			if nd == 0 && end-start > 4 && string(line[start:start+4]) == "qid:" {
				i = end // query id: ignored
				continue
			}
			code := fIndexNotNumber
			switch {
			case nd > 0 && (i == n || isSpace(line[i])):
				code = fNoColon
			case nd == 0 && line[start] == '-' && start+1 < n && line[start+1]-'0' <= 9:
				code = fIndexNegative
			}
			return 0, 0, fault{code: code, start: start, end: end}
		}
		if nd > 10 {
			z := start
			for line[z] == '0' {
				z++
			}
			if i-z > 10 {
				return 0, 0, fault{code: fIndexRange, start: start, end: tokenEnd(line, i)}
			}
		}
		i++ // ':'
		vs := i
		var v float32
		if i < n && line[i] == '1' && (i+1 == n || isSpace(line[i+1])) {
			v = 1
			i++
		} else {
			i = tokenEnd(line, i)
			var code faultCode
			if v, code = parseFloat32(line[vs:i]); code != fOK {
				return 0, 0, fault{code: code, start: start, end: i}
			}
		}
		if r.maxValue > 0 && math.Abs(float64(v)) > r.maxValue {
			return 0, 0, fault{code: fValueBound, start: start, end: i}
		}
		if idx > 1<<32-1 {
			return 0, 0, fault{code: fIndexRange, start: start, end: i}
		}
		if r.oneBased {
			if idx == 0 {
				return 0, 0, fault{code: fIndexZero, start: start, end: i}
			}
			idx--
		}
		if idx >= r.limit {
			if r.sh.opt.Dim == 0 {
				return 0, 0, fault{code: fIndexRange, start: start, end: i}
			}
			return 0, 0, fault{code: fIndexDim, start: start, end: i, num: int64(idx)}
		}
		if int64(idx) <= prev {
			sorted = false
		}
		prev = int64(idx)
		b.Add(uint32(idx), v)
	}
	if !sorted {
		if k, dup := sortRow(&r.sorter, b.Indices[first:], b.Values[first:]); dup {
			s, e := r.duplicateToken(line, j, k)
			return 0, 0, fault{code: fDuplicate, start: s, end: e, num: int64(k)}
		}
	}
	return label, weight, fault{}
}

// weightedLabel reports whether the first token of an unlabelled-or-not
// line (Options.NoLabels) is "label:weight" rather than a feature: its
// label part starts with a sign, or is 0 in 1-based data, which no
// feature index can be. "1:0.5" is read as feature 1.
func (r *libsvmReader) weightedLabel(tok []byte) bool {
	return tok[0] == '-' || tok[0] == '+' || (r.oneBased && tok[0] == '0' && len(tok) > 1 && tok[1] == ':')
}

// duplicateToken finds the second token of the line (features start at
// from) whose feature is k. Only called on the error path.
func (r *libsvmReader) duplicateToken(line []byte, from int, k uint32) (int, int) {
	seen := false
	i := from
	for i < len(line) {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		start := i
		i = tokenEnd(line, i)
		if i-start > 4 && string(line[start:start+4]) == "qid:" {
			continue
		}
		var idx uint64
		for _, c := range line[start:i] {
			if c == ':' {
				break
			}
			idx = idx*10 + uint64(c-'0')
		}
		if r.oneBased {
			idx--
		}
		if idx == uint64(k) {
			if seen {
				return start, i
			}
			seen = true
		}
	}
	panic(fmt.Sprintf("data: duplicate feature %d not found in line %q", k, line))
}

// pairSorter sorts indices and their values together.
type pairSorter struct {
	idx    []uint32
	val    []float32
	packed []uint64 // sumRow's scratch: index<<32 | value bits
	tmp    []uint64 // and its radix sort's second buffer
}

func (p *pairSorter) Len() int           { return len(p.idx) }
func (p *pairSorter) Less(i, j int) bool { return p.idx[i] < p.idx[j] }
func (p *pairSorter) Swap(i, j int) {
	p.idx[i], p.idx[j] = p.idx[j], p.idx[i]
	p.val[i], p.val[j] = p.val[j], p.val[i]
}

// sortRow sorts a row by index. It reports the first index that appears
// twice, if any.
func sortRow(p *pairSorter, idx []uint32, val []float32) (uint32, bool) {
	if len(idx) <= 32 {
		for i := 1; i < len(idx); i++ {
			k, v := idx[i], val[i]
			j := i
			for j > 0 && idx[j-1] > k {
				idx[j], val[j] = idx[j-1], val[j-1]
				j--
			}
			idx[j], val[j] = k, v
		}
	} else {
		p.idx, p.val = idx, val
		sort.Sort(p)
		p.idx, p.val = nil, nil
	}
	for i := 1; i < len(idx); i++ {
		if idx[i] == idx[i-1] {
			return idx[i], true
		}
	}
	return 0, false
}
