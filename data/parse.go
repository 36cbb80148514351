package data

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// Reasons for bad lines, carried in LineError.Err. Reasons with numbers are
// formatted on the error path only and wrap one of these.
var (
	errLabelNotNumber = errors.New("label is not a number")
	errLabelBinary    = errors.New("binary label must be 0, 1, -1 or +1")
	errLabelNotInt    = errors.New("label is not an integer")
	errLabelRange     = errors.New("class is out of range")
	errNoColon        = errors.New("want index:value")
	errIndexNotNumber = errors.New("index is not a number")
	errIndexNegative  = errors.New("index is negative: feature indices start at 1 (0 with --zero-based)")
	errIndexRange     = errors.New("index is too large: features are uint32 and below 4294967295")
	errIndexZero      = errors.New("index 0 in 1-based data (use zero-based indices)")
	errIndexDim       = errors.New("feature is outside dim")
	errValueNotNumber = errors.New("value is not a number")
	errValueNaN       = errors.New("value is NaN or infinite")
	errValueRange     = errors.New("value is out of float32 range")
	errValueBound     = errors.New("value is over the bound on values")
	errDuplicate      = errors.New("index appears twice in the line")
	errColumns        = errors.New("wrong number of columns")
	errInteger        = errors.New("column is not an integer")
	errWeight         = errors.New("importance weight is not a number >= 0")
	errValueMissing   = errors.New("no value after ':'")
	errVWNoBar        = errors.New("no '|': VW features follow a '|' (|namespace feature ...)")
	errVWNoLabel      = errors.New("no label before the first '|' (a token that touches the '|' is VW's tag, not a label: put a blank before the '|')")
	errVWLabelTokens  = errors.New("more than label, weight, initial prediction and tag before the first '|'")
	errVWInitial      = errors.New("VW's initial prediction (third number of the label) is not supported")
	errVWTagNotLast   = errors.New("a tag ('tag) must come last before the '|'")
	errVWNamespace    = errors.New("namespace has no name before its ':'")
	errVWScale        = errors.New("namespace scale is not a number")
)

// faultCode names what is wrong with a line; 0 is "nothing".
type faultCode uint8

const (
	fOK faultCode = iota
	fLabelNotNumber
	fLabelBinary
	fLabelNotInt
	fLabelRange
	fNoColon
	fIndexNotNumber
	fIndexRange
	fIndexZero
	fIndexDim
	fValueNotNumber
	fValueNaN
	fValueRange
	fDuplicate
	fColumns
	fInteger
	fIndexNegative
	fValueBound
	fWeight
	fValueMissing
	fVWNoBar
	fVWNoLabel
	fVWLabelTokens
	fVWInitial
	fVWTagNotLast
	fVWNamespace
	fVWScale
)

// fault locates a bad token in a line without allocating: the error is
// built only when the caller does not skip the line.
type fault struct {
	code       faultCode
	start, end int   // token span in the line
	num        int64 // detail: label, feature, duplicate index, column
}

// maxToken is the longest token quoted in a LineError.
const maxToken = 64

func clip(tok []byte) string {
	if len(tok) > maxToken {
		return string(tok[:maxToken]) + "..."
	}
	return string(tok)
}

// reason turns a fault into the error carried by LineError.Err.
func (f fault) reason(o *Options) error {
	switch f.code {
	case fLabelNotNumber:
		return errLabelNotNumber
	case fLabelBinary:
		return errLabelBinary
	case fLabelNotInt:
		return errLabelNotInt
	case fLabelRange:
		c := f.num - int64(o.LabelBase)
		hint := ""
		if c == int64(o.Classes) && o.LabelBase == 0 {
			hint = fmt.Sprintf("; labels 1..%d need --label-base 1", o.Classes)
		}
		return reasonError{errLabelRange, fmt.Sprintf("class %d (label %d - label base %d) is outside 0..%d%s",
			c, f.num, o.LabelBase, o.Classes-1, hint)}
	case fNoColon:
		return errNoColon
	case fIndexNotNumber:
		return errIndexNotNumber
	case fIndexNegative:
		return errIndexNegative
	case fIndexRange:
		return errIndexRange
	case fIndexZero:
		return errIndexZero
	case fIndexDim:
		return reasonError{errIndexDim, fmt.Sprintf("feature %d is outside dim %d", f.num, o.Dim)}
	case fValueNotNumber:
		return errValueNotNumber
	case fValueNaN:
		return errValueNaN
	case fValueRange:
		return errValueRange
	case fValueBound:
		return reasonError{errValueBound, fmt.Sprintf("|value| is over the bound %g (--max-value)", o.MaxValue)}
	case fDuplicate:
		return errDuplicate
	case fColumns:
		return reasonError{errColumns, fmt.Sprintf("%d columns, want %d", f.num, criteoColumns)}
	case fInteger:
		return reasonError{errInteger, fmt.Sprintf("column I%d is not an integer", f.num)}
	case fWeight:
		return errWeight
	case fValueMissing:
		return errValueMissing
	case fVWNoBar:
		return errVWNoBar
	case fVWNoLabel:
		return errVWNoLabel
	case fVWLabelTokens:
		return errVWLabelTokens
	case fVWInitial:
		return errVWInitial
	case fVWTagNotLast:
		return errVWTagNotLast
	case fVWNamespace:
		return errVWNamespace
	case fVWScale:
		return errVWScale
	}
	panic(fmt.Sprintf("data: fault code %d has no reason", f.code))
}

// badLine is the error of a bad text line: a *LineError naming the file,
// line and token, or, when the line or the bytes after it (after) are not
// text (a binary file read as libsvm or Criteo), an ErrFormat error that
// says so instead of quoting binary bytes as a label.
func badLine(file string, line int64, text, after []byte, f fault, o *Options) error {
	if !isText(text) || !isText(after) {
		return fmt.Errorf("%w: %s: not text (binary data on line %d): libsvm and Criteo input are text files; "+
			"compressed files must end in .gz or .zst, IDX images in -images-idx3-ubyte[.gz]", ErrFormat, file, line)
	}
	return &LineError{File: file, Line: line, Token: clip(text[f.start:f.end]), Err: f.reason(o)}
}

// isText reports whether b is UTF-8 (its last rune may be cut) without
// control characters other than tab, carriage return and newline.
func isText(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f {
			return false
		}
	}
	// A window cut mid-character is still text: allow a partial last rune.
	for range utf8.UTFMax {
		if utf8.Valid(b) {
			return true
		}
		if len(b) == 0 {
			break
		}
		b = b[:len(b)-1]
	}
	return false
}

// reasonError is a reason with numbers in its message; it unwraps to its
// kind.
type reasonError struct {
	kind error
	msg  string
}

func (e reasonError) Error() string { return e.msg }
func (e reasonError) Unwrap() error { return e.kind }

// labelMapper turns raw labels into model labels (docs/contracts.md,
// "Labels"). In raw mode (Scan) it only records the raw value.
type labelMapper struct {
	classes int
	base    int64
	raw     bool
	last    float64 // numeric value of the last label not taking a fast path
}

func newLabelMapper(o *Options, raw bool) labelMapper {
	return labelMapper{classes: o.Classes, base: int64(o.LabelBase), raw: raw}
}

// text parses and maps a label token.
func (m *labelMapper) text(tok []byte) (float32, faultCode) {
	if !m.raw && m.classes == 0 {
		// Fast paths for the common binary spellings.
		switch len(tok) {
		case 1:
			switch tok[0] {
			case '1':
				return 1, fOK
			case '0':
				return 0, fOK
			}
		case 2:
			if tok[1] == '1' {
				switch tok[0] {
				case '-':
					return 0, fOK
				case '+':
					return 1, fOK
				}
			}
		}
	}
	if u, ok := parseSmallUint(tok); ok {
		return m.value(float64(u))
	}
	v, ok := parseFloat64(tok)
	if !ok || math.IsNaN(v) {
		return 0, fLabelNotNumber
	}
	return m.value(v)
}

// value maps a numeric label.
func (m *labelMapper) value(v float64) (float32, faultCode) {
	m.last = v
	if m.raw {
		return 0, fOK
	}
	if m.classes == 0 {
		switch v {
		case 1:
			return 1, fOK
		case 0, -1:
			return 0, fOK
		}
		return 0, fLabelBinary
	}
	if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
		return 0, fLabelNotInt
	}
	c := int64(v) - m.base
	if c < 0 || c >= int64(m.classes) {
		return 0, fLabelRange
	}
	return float32(c), fOK
}

// parseSmallUint parses 1 to 9 decimal digits.
func parseSmallUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		c -= '0'
		if c > 9 {
			return 0, false
		}
		u = u*10 + uint64(c)
	}
	return u, true
}

// float32pow10 holds the powers of ten a float32 represents exactly.
var float32pow10 = [...]float32{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10}

// float64pow10 holds the powers of ten a float64 represents exactly.
var float64pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// decimal splits a plain decimal "[+-]digits[.digits][(e|E)[+-]digits]"
// into mantissa and power of ten. ok is false when the token has another
// shape or more than 19 significant digits; the caller then falls back to
// strconv.
func decimal(b []byte) (mant uint64, exp int, neg, ok bool) {
	i := 0
	if i < len(b) && (b[i] == '-' || b[i] == '+') {
		neg = b[i] == '-'
		i++
	}
	digits := 0
	sawDigit := false
	for ; i < len(b); i++ {
		c := b[i] - '0'
		if c > 9 {
			break
		}
		sawDigit = true
		if mant == 0 && c == 0 {
			continue
		}
		if digits == 19 {
			return 0, 0, false, false
		}
		mant = mant*10 + uint64(c)
		digits++
	}
	if i < len(b) && b[i] == '.' {
		i++
		for ; i < len(b); i++ {
			c := b[i] - '0'
			if c > 9 {
				break
			}
			sawDigit = true
			exp--
			if mant == 0 && c == 0 {
				continue
			}
			if digits == 19 {
				return 0, 0, false, false
			}
			mant = mant*10 + uint64(c)
			digits++
		}
	}
	if !sawDigit {
		return 0, 0, false, false
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '-' || b[i] == '+') {
			eneg = b[i] == '-'
			i++
		}
		if i == len(b) {
			return 0, 0, false, false
		}
		e := 0
		for ; i < len(b); i++ {
			c := b[i] - '0'
			if c > 9 || e > 10000 {
				return 0, 0, false, false
			}
			e = e*10 + int(c)
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	return mant, exp, neg, i == len(b)
}

// parseFloat32 parses a feature value. Short decimals take Clinger's exact
// fast path (mantissa < 2^24 and |exponent| <= 10: one correctly rounded
// float32 operation); everything else goes to strconv.ParseFloat without
// copying the bytes. NaN and infinities are rejected.
func parseFloat32(b []byte) (float32, faultCode) {
	if mant, exp, neg, ok := decimal(b); ok && mant < 1<<24 && exp >= -10 && exp <= 10 {
		f := float32(mant)
		if exp >= 0 {
			f *= float32pow10[exp]
		} else {
			f /= float32pow10[-exp]
		}
		if neg {
			f = -f
		}
		return f, fOK
	}
	if len(b) == 0 {
		return 0, fValueNotNumber
	}
	v, err := strconv.ParseFloat(unsafe.String(&b[0], len(b)), 32)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			return 0, fValueRange
		}
		return 0, fValueNotNumber
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fValueNaN
	}
	return float32(v), fOK
}

// parseFloat64 parses a number like parseFloat32, for labels.
func parseFloat64(b []byte) (float64, bool) {
	if mant, exp, neg, ok := decimal(b); ok && mant < 1<<53 && exp >= -22 && exp <= 22 {
		f := float64(mant)
		if exp >= 0 {
			f *= float64pow10[exp]
		} else {
			f /= float64pow10[-exp]
		}
		if neg {
			f = -f
		}
		return f, true
	}
	if len(b) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(unsafe.String(&b[0], len(b)), 64)
	return v, err == nil && !math.IsInf(v, 0)
}

// parseInt64 parses an optionally signed decimal integer.
func parseInt64(b []byte) (int64, bool) {
	i := 0
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		i++
	}
	if i == len(b) || len(b)-i > 19 {
		return 0, false
	}
	var u uint64
	for ; i < len(b); i++ {
		c := b[i] - '0'
		if c > 9 {
			return 0, false
		}
		u = u*10 + uint64(c)
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return int64(-u), true
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}
