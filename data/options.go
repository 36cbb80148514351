package data

import (
	"fmt"
	"math"
	"strings"
)

// Format is an input format.
type Format int

// Input formats. The numbers are stored in cache headers as names, never
// as numbers, so the list may grow.
const (
	// FormatAuto picks the format of each file from its name and, for text
	// files, its first line (see Open).
	FormatAuto Format = iota
	// FormatLibSVM is the libsvm/svmlight text format:
	// "label idx:val idx:val ... # comment".
	FormatLibSVM
	// FormatCriteo is the Criteo display-advertising TSV format: label,
	// 13 integer columns and 26 categorical columns, hashed into Dim.
	FormatCriteo
	// FormatIDX is the IDX image format of MNIST and Fashion-MNIST: an
	// idx3-ubyte images file with an idx1-ubyte labels file beside it.
	FormatIDX
	// FormatCache is gossiptrain's binary cache of parsed rows (*.gtc).
	FormatCache
	// FormatVW is Vowpal Wabbit's text format: "label [weight] ['tag]|ns
	// feature[:value] ...", features hashed into Dim (see vw.go).
	FormatVW
)

// String returns the name ParseFormat accepts.
func (f Format) String() string {
	switch f {
	case FormatAuto:
		return "auto"
	case FormatLibSVM:
		return "libsvm"
	case FormatCriteo:
		return "criteo"
	case FormatIDX:
		return "idx"
	case FormatCache:
		return "cache"
	case FormatVW:
		return "vw"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// long names the format for messages.
func (f Format) long() string {
	switch f {
	case FormatCriteo:
		return "Criteo TSV"
	case FormatVW:
		return "VW text"
	}
	return f.String()
}

// MarshalText encodes the format by name, so JSON and flags show
// "libsvm" rather than a number.
func (f Format) MarshalText() ([]byte, error) {
	if f < FormatAuto || f > FormatVW {
		return nil, fmt.Errorf("%w: unknown format %d", ErrOptions, int(f))
	}
	return []byte(f.String()), nil
}

// UnmarshalText decodes a format name as ParseFormat does.
func (f *Format) UnmarshalText(b []byte) error {
	v, err := ParseFormat(string(b))
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// ParseFormat parses a format name: "auto", "libsvm" (or "svmlight"),
// "criteo", "vw", "idx" or "cache", in any letter case.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return FormatAuto, nil
	case "libsvm", "svmlight":
		return FormatLibSVM, nil
	case "criteo":
		return FormatCriteo, nil
	case "idx":
		return FormatIDX, nil
	case "cache":
		return FormatCache, nil
	case "vw", "vowpal", "vowpalwabbit":
		return FormatVW, nil
	case "csv":
		return FormatAuto, fmt.Errorf("%w: format %q is not supported (convert CSV to libsvm or VW text; want auto, libsvm, svmlight, criteo, vw, idx or cache)", ErrOptions, s)
	}
	return FormatAuto, fmt.Errorf("%w: unknown format %q (want auto, libsvm, svmlight, criteo, vw, idx or cache)", ErrOptions, s)
}

// MaxDim is the largest feature dimension: indices are uint32 and index
// Dim is the model's bias row (docs/contracts.md).
const MaxDim = 1<<32 - 1

// DefaultBufferSize is the read buffer used when Options.BufferSize is 0.
const DefaultBufferSize = 1 << 20

// maxLine is the longest line a text reader accepts; the read buffer grows
// up to it.
const maxLine = 256 << 20

// Options says how to read inputs. The zero value reads libsvm or
// auto-detected files with binary labels, 1-based indices, no dimension
// check and no partitioning.
type Options struct {
	// Format of the inputs; FormatAuto detects it per file (see Open).
	Format Format
	// ZeroBased says libsvm indices start at 0. By default they start at
	// 1: index i in the file is feature i-1.
	ZeroBased bool
	// Dim is the number of features. libsvm and IDX: a feature >= Dim is a
	// bad line (0 = unchecked). Criteo and VW: features are hashed into
	// [0, Dim), so Dim is required.
	Dim uint64
	// Interactions are VW's -q and --cubic: each entry names 2 or 3
	// namespaces by their first character ("ab", "abc"), and every row
	// gets, besides its features, one feature per combination of a
	// feature from each, hashed into Dim (see Interaction). VW input's
	// namespaces are its own; Criteo's 39 columns are namespaces a..m
	// (I1..I13) and A..Z (C1..C26). libsvm and IDX input have none.
	Interactions []string
	// Classes is 0 for binary labels (0, 1, -1, +1 → 0 or 1) and the number
	// of classes (>= 2) for multiclass integer labels.
	Classes int
	// LabelBase is subtracted from multiclass labels: class = label -
	// LabelBase. Use 1 for files labelled 1..K.
	LabelBase int
	// NoLabels reads rows without their labels, for prediction: a libsvm
	// line may start with its first index:value (no label) or with a
	// label token, which is skipped unread; a Criteo line may have 39
	// columns (no label) or 40; IDX images need no labels file (Labels is
	// ignored). Every row's Batch label is 0.
	NoLabels bool
	// SkipBad counts bad lines in Stats.BadLines and skips them instead of
	// stopping with a *LineError.
	SkipBad bool
	// MaxValue, when > 0, makes a libsvm feature value whose magnitude is
	// over it a bad line, as a value that is not a number is: a finite
	// float32 such as 3e38 passes the parser but overflows a gradient (0
	// checks nothing beyond float32 range; NaN and infinities are always
	// bad). Criteo and IDX values are counts and pixels the reader makes
	// (at most 39 and 1), and are not checked.
	MaxValue float64
	// Part and Parts split the rows between peers: with both set, the
	// source keeps row r (0-based over all inputs in order, counting data
	// lines only) when r % Parts == Part-1. Part is 1-based. 0/0 keeps
	// every row.
	Part, Parts int
	// Labels is the IDX labels file. "" derives it from the images file
	// name (train-images-idx3-ubyte.gz → train-labels-idx1-ubyte.gz, with or
	// without .gz/.zst).
	Labels string
	// BufferSize is the read buffer in bytes; 0 means DefaultBufferSize.
	// Text readers grow it for lines longer than the buffer.
	BufferSize int
}

// DefaultOptions returns the defaults spelled out: format auto-detected,
// binary labels, 1-based indices, no dimension check, every row, a 1 MiB
// read buffer. It equals the zero Options in effect.
func DefaultOptions() Options {
	return Options{Format: FormatAuto, BufferSize: DefaultBufferSize}
}

// Validate checks the options on their own; Open also checks them against
// the inputs.
func (o Options) Validate() error {
	switch {
	case o.Format < FormatAuto || o.Format > FormatVW:
		return fmt.Errorf("%w: unknown format %d", ErrOptions, int(o.Format))
	case o.Dim > MaxDim:
		return fmt.Errorf("%w: Dim %d is larger than %d (feature indices are uint32)", ErrOptions, o.Dim, uint64(MaxDim))
	case o.Format == FormatCriteo && o.Dim == 0:
		return fmt.Errorf("%w: Criteo input needs Dim (--dim), the range features are hashed into", ErrOptions)
	case o.Format == FormatVW && o.Dim == 0:
		return fmt.Errorf("%w: VW input needs Dim (--dim), the range features are hashed into", ErrOptions)
	case o.Classes == 1 || o.Classes < 0:
		return fmt.Errorf("%w: Classes %d: want 0 (binary labels) or at least 2", ErrOptions, o.Classes)
	case o.Parts < 0 || o.Part < 0:
		return fmt.Errorf("%w: Part %d of Parts %d: negative", ErrOptions, o.Part, o.Parts)
	case (o.Parts == 0) != (o.Part == 0):
		return fmt.Errorf("%w: Part %d of Parts %d: set both or neither", ErrOptions, o.Part, o.Parts)
	case o.Part > o.Parts:
		return fmt.Errorf("%w: Part %d of Parts %d: Part must be in 1..%d", ErrOptions, o.Part, o.Parts, o.Parts)
	case o.MaxValue < 0 || math.IsNaN(o.MaxValue) || math.IsInf(o.MaxValue, 0):
		return fmt.Errorf("%w: MaxValue %g: want 0 (no bound) or a finite bound > 0", ErrOptions, o.MaxValue)
	case o.BufferSize < 0:
		return fmt.Errorf("%w: BufferSize %d is negative", ErrOptions, o.BufferSize)
	case o.BufferSize > maxLine:
		return fmt.Errorf("%w: BufferSize %d is larger than %d", ErrOptions, o.BufferSize, maxLine)
	}
	if len(o.Interactions) > 0 {
		if _, err := ParseInteractions(strings.Join(o.Interactions, ",")); err != nil {
			return err
		}
		switch o.Format {
		case FormatLibSVM, FormatIDX, FormatCache:
			return checkInteractions(o.Interactions, o.Format, "")
		}
	}
	return nil
}

func (o Options) bufferSize() int {
	if o.BufferSize == 0 {
		return DefaultBufferSize
	}
	return o.BufferSize
}

// partition selects rows for one part; the zero value keeps every row.
type partition struct {
	part, parts int64 // part is 0-based here
	next        int64 // number of the next data row
}

func newPartition(o Options) partition {
	if o.Parts == 0 {
		return partition{}
	}
	return partition{part: int64(o.Part - 1), parts: int64(o.Parts)}
}

// take numbers the next data row and reports whether this part keeps it.
func (p *partition) take() bool {
	r := p.next
	p.next++
	return p.parts == 0 || r%p.parts == p.part
}
