package data

import (
	"bytes"
	"io"
	"math"
	"math/bits"
	"slices"

	"github.com/twmb/murmur3"
)

// VW text format (Vowpal Wabbit's input format, as its text parser reads
// it: vowpalwabbit/text_parser/src/parse_example_text.cc):
//
//	[label [weight]] ['tag]|namespace[:scale] feature[:value] ... |namespace ...
//
// The label section is the text before the first '|'. Its last token is
// VW's tag when it starts with ' or touches the '|' ("1 'a|x" and
// "1 a|x" both have tag a); tags are skipped. Before the tag come the
// label (binary: -1/+1 or 0/1; multiclass: an integer class, as libsvm)
// and an optional importance weight (a number >= 0, default 1). VW's third
// number, an initial prediction, is refused, as is a line without '|'.
//
// Each '|' starts a namespace. Its name runs to a blank or ':' (an empty
// name, "| f", is VW's default namespace); an optional ":scale" multiplies
// the values of its numeric features. A feature is "name", "name:value" or
// "name:string"; values of 0 drop the feature, as VW drops them.
//
// Hashing, VW's default ("--hash strings", hash seed 0), with MurmurHash3
// x86_32 (github.com/twmb/murmur3):
//
//	hash(s, seed) = s as a decimal number + seed   if s is all digits
//	              = murmur3_x86_32(s, seed)        otherwise
//	ns            = hash(namespace name, 0)        (0 for the default namespace)
//	h(name)       = hash(name, ns)                 "name" and "name:value"
//	h(name:str)   = hash(str, hash(name, ns))      string value, value 1
//	h(:value)     = ns + k                         the k-th (0-based) nameless feature of the namespace
//	feature       = h mod Dim
//
// all in uint32 arithmetic (TestVWGoodLines; TestVWHashMatchesReference
// checks the indices against an independent implementation). With a
// power-of-two Dim (2^b) the feature is VW's index for -b b. Interactions (Options.Interactions) combine the h
// of their features (InteractionHash) and reduce the result mod Dim too.
// Features that meet at one index within a row are summed into one
// feature; a sum of 0 is left out.

// vwHash is VW's default feature hash (hashstring): a name of decimal
// digits is its number plus the seed, anything else MurmurHash3 x86_32 of
// its bytes with the seed as the murmur seed.
func vwHash(s []byte, seed uint32) uint32 {
	var n uint32
	for _, c := range s {
		if c-'0' > 9 {
			return murmur3.SeedSum32(seed, s)
		}
		n = n*10 + uint32(c-'0') // wraps as VW's 64-bit sum does in its low 32 bits
	}
	return n + seed
}

// VWHash returns the 32-bit hash the VW reader gives feature (a name, or
// "name:string" for a string-valued feature) in namespace (its full name;
// "" for the default namespace), before reduction to Dim: see the format
// notes in vw.go.
func VWHash(namespace, feature string) uint32 {
	ns := vwHash([]byte(namespace), 0)
	name, str, isStr := cutColon(feature)
	h := vwHash([]byte(name), ns)
	if isStr {
		h = vwHash([]byte(str), h)
	}
	return h
}

func cutColon(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// VWFeature returns the feature index the VW reader gives feature in
// namespace with dim features: VWHash(namespace, feature) mod dim.
func VWFeature(namespace, feature string, dim uint64) uint32 {
	return uint32(uint64(VWHash(namespace, feature)) % dim)
}

// vwReader parses VW text lines.
type vwReader struct {
	sh       *shared
	st       *stream
	lr       *lineReader
	lab      labelMapper
	dim      uint64
	maxValue float64
	x        *interactor // nil without interactions
	sorter   pairSorter
}

func newVWReader(sh *shared, st *stream) *vwReader {
	sh.lines.reset(st, st.name)
	return &vwReader{
		sh:       sh,
		st:       st,
		lr:       sh.lines,
		lab:      newLabelMapper(&sh.opt, sh.raw),
		dim:      sh.opt.Dim,
		maxValue: sh.opt.MaxValue,
		x:        newInteractor(sh.interactions),
	}
}

func (r *vwReader) close() error { return r.st.Close() }

// utf8BOM starts some files written on Windows; VW skips it.
var utf8BOM = []byte{0xef, 0xbb, 0xbf}

func (r *vwReader) read(b *Batch, max int) (int, error) {
	n := 0
	for n < max {
		line, ok := r.lr.next()
		if !ok {
			if r.lr.err != nil {
				return n, r.lr.err
			}
			return n, io.EOF
		}
		if r.lr.line == 1 {
			line = bytes.TrimPrefix(line, utf8BOM)
		}
		if isBlank(line) {
			continue // VW's empty line (the end of a multi-line example): not a row
		}
		if !r.sh.part.take() {
			continue
		}
		label, weight, f := r.parse(line, b)
		if f.code != fOK {
			b.DropRow()
			if r.sh.opt.SkipBad {
				r.sh.stats.BadLines++
				continue
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

func isBlank(line []byte) bool {
	for _, c := range line {
		if !isSpace(c) {
			return false
		}
	}
	return true
}

// span is a token's place in a line.
type span struct{ start, end int }

// parse appends the features of one line to b and returns its label and
// importance weight.
func (r *vwReader) parse(line []byte, b *Batch) (float32, float32, fault) {
	n := len(line)
	bar := bytes.IndexByte(line, '|')
	if bar < 0 {
		return 0, 0, fault{code: fVWNoBar, start: 0, end: n}
	}
	label, weight, f := r.parseLabel(line, bar)
	if f.code != fOK {
		return 0, 0, f
	}
	first := len(b.Indices)
	if f := r.parseFeatures(line, bar, b); f.code != fOK {
		return 0, 0, f
	}
	sumRow(&r.sorter, b, first)
	return label, weight, fault{}
}

// parseLabel reads the label section, line[:bar]: a label, an optional
// importance weight and an optional tag (skipped); the initial
// prediction VW allows third is refused.
func (r *vwReader) parseLabel(line []byte, bar int) (float32, float32, fault) {
	n := len(line)
	// Up to 3 tokens and a tag.
	var toks [3]span
	nt := 0
	for i := 0; i < bar; {
		for i < bar && isSpace(line[i]) {
			i++
		}
		if i == bar {
			break
		}
		s := i
		for i < bar && !isSpace(line[i]) {
			i++
		}
		if line[s] == '\'' || i == bar {
			if i != bar { // a quoted tag must come last
				for j := i; j < bar; j++ {
					if !isSpace(line[j]) {
						return 0, 0, fault{code: fVWTagNotLast, start: s, end: i}
					}
				}
			}
			break // the tag: skipped
		}
		if nt == len(toks) {
			return 0, 0, fault{code: fVWLabelTokens, start: 0, end: bar}
		}
		toks[nt] = span{s, i}
		nt++
	}
	label, weight := float32(0), float32(1)
	if !r.sh.opt.NoLabels {
		switch {
		case nt == 0:
			return 0, 0, fault{code: fVWNoLabel, start: 0, end: min(bar+1, n)}
		case nt == 3:
			return 0, 0, fault{code: fVWInitial, start: toks[2].start, end: toks[2].end}
		}
		var code faultCode
		t := toks[0]
		if label, code = r.lab.text(line[t.start:t.end]); code != fOK {
			return 0, 0, fault{code: code, start: t.start, end: t.end, num: int64(r.lab.last)}
		}
		if nt == 2 {
			t = toks[1]
			if weight, code = parseWeight(line[t.start:t.end]); code != fOK {
				return 0, 0, fault{code: code, start: t.start, end: t.end}
			}
		}
	}
	return label, weight, fault{}
}

// parseFeatures adds the features of the namespaces after line[bar] (a
// '|') to b's open row, and their interactions (-q, --cubic).
func (r *vwReader) parseFeatures(line []byte, bar int, b *Batch) fault {
	n := len(line)
	if r.x != nil {
		r.x.reset()
	}
	i := bar
	for i < n { // at a '|'
		i++
		ns, nsHash, scale := byte(' '), uint32(0), float32(1)
		if i < n && !isSpace(line[i]) && line[i] != '|' {
			s := i
			for i < n && !isSpace(line[i]) && line[i] != ':' && line[i] != '|' {
				i++
			}
			if i == s {
				return fault{code: fVWNamespace, start: s, end: tokenEnd(line, s)}
			}
			ns, nsHash = line[s], vwHash(line[s:i], 0)
			if i < n && line[i] == ':' {
				vs := i + 1
				i = vs
				for i < n && !isSpace(line[i]) && line[i] != '|' {
					i++
				}
				v, code := parseFloat32(line[vs:i])
				if code != fOK {
					return fault{code: fVWScale, start: s, end: i}
				}
				scale = v
			}
		}
		anon := uint32(0)
		for i < n && line[i] != '|' {
			for i < n && isSpace(line[i]) {
				i++
			}
			if i == n || line[i] == '|' {
				break
			}
			s := i
			for i < n && !isSpace(line[i]) && line[i] != ':' && line[i] != '|' {
				i++
			}
			name := line[s:i]
			var h uint32
			v := scale
			if i < n && line[i] == ':' {
				vs := i + 1
				i = vs
				for i < n && !isSpace(line[i]) && line[i] != '|' {
					i++
				}
				if i == vs {
					return fault{code: fValueMissing, start: s, end: i}
				}
				x, code := parseFloat32(line[vs:i])
				switch code {
				case fOK:
					v = scale * x
					if len(name) == 0 {
						h = nsHash + anon
						anon++
					} else {
						h = vwHash(name, nsHash)
					}
				case fValueNotNumber: // a string value: hashed, value 1
					h = vwHash(line[vs:i], vwHash(name, nsHash))
					v = 1
				default:
					return fault{code: code, start: s, end: i}
				}
			} else {
				h = vwHash(name, nsHash)
			}
			if v == 0 {
				continue // VW drops zero-valued features
			}
			if math.IsInf(float64(v), 0) {
				return fault{code: fValueRange, start: s, end: i}
			}
			if r.maxValue > 0 && math.Abs(float64(v)) > r.maxValue {
				return fault{code: fValueBound, start: s, end: i}
			}
			b.Add(uint32(uint64(h)%r.dim), v)
			if r.x != nil {
				r.x.add(ns, h, v)
			}
		}
	}
	if r.x != nil {
		r.x.emit(b, r.dim)
	}
	return fault{}
}

// radixSort sorts a by its high 32 bits, of which the top ones above
// keyBits are 0, with tmp (len(a)) as the second buffer: LSD, one pass per
// byte of the key. It returns the sorted slice (a or tmp).
func radixSort(a, tmp []uint64, keyBits int) []uint64 {
	var count [256]int
	for shift := 32; shift < 32+keyBits; shift += 8 {
		count = [256]int{}
		for _, x := range a {
			count[byte(x>>shift)]++
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for _, x := range a {
			d := byte(x >> shift)
			tmp[count[d]] = x
			count[d]++
		}
		a, tmp = tmp, a
	}
	return a
}

// parseWeight parses an importance weight: a finite number >= 0.
func parseWeight(tok []byte) (float32, faultCode) {
	w, code := parseFloat32(tok)
	if code != fOK || w < 0 {
		return 0, fWeight
	}
	return w, fOK
}

// sumRow sorts the row being built (from first on) by index and sums the
// values of equal indices (hash collisions, a feature given twice) into
// one feature, leaving out sums of 0.
func sumRow(p *pairSorter, b *Batch, first int) {
	idx, val := b.Indices[first:], b.Values[first:]
	if len(idx) < 2 {
		return
	}
	sorted := true
	for i := 1; i < len(idx); i++ {
		if idx[i] <= idx[i-1] {
			sorted = false
			break
		}
	}
	if sorted {
		return
	}
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
		// Rows with interactions have hundreds of features: pack index
		// and value into one word and radix-sort the words on the index,
		// a byte at a time (several times faster than sort.Sort over the
		// two slices: BenchmarkVW).
		p.packed = p.packed[:0]
		top := uint32(0)
		for i, k := range idx {
			p.packed = append(p.packed, uint64(k)<<32|uint64(math.Float32bits(val[i])))
			top |= k
		}
		p.tmp = slices.Grow(p.tmp[:0], len(idx))[:len(idx)]
		sorted := radixSort(p.packed, p.tmp, bits.Len32(top))
		for i, x := range sorted {
			idx[i], val[i] = uint32(x>>32), math.Float32frombits(uint32(x))
		}
	}
	w := 0
	for i := range idx {
		if w > 0 && idx[w-1] == idx[i] {
			val[w-1] += val[i]
			continue
		}
		if w > 0 && val[w-1] == 0 {
			w-- // the previous index summed to 0
		}
		idx[w], val[w] = idx[i], val[i]
		w++
	}
	if w > 0 && val[w-1] == 0 {
		w--
	}
	b.Indices = b.Indices[:first+w]
	b.Values = b.Values[:first+w]
}
