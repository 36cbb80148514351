package data

import (
	"fmt"
	"io"
	"math"
	"slices"
)

// Place is where a row is: its file and 1-based line (record for IDX).
type Place struct {
	File string
	Line int64
}

// String formats the place as "file:line".
func (p Place) String() string { return fmt.Sprintf("%s:%d", p.File, p.Line) }

// maxLabelPlaces is how many rows of each label ScanResult.LabelPlaces
// locates.
const maxLabelPlaces = 3

// maxScanLabels caps the distinct labels ScanResult.Labels counts.
const maxScanLabels = 1000

// ScanResult summarises a pass over the inputs, for choosing Dim and
// Classes before training.
type ScanResult struct {
	Rows     int64 // data rows read (bad lines excluded)
	NNZ      int64 // nonzeros in those rows
	BadLines int64 // bad lines skipped (Options.SkipBad)
	// MaxIndex is the largest 0-based feature index seen, -1 if none. Dim
	// must be at least MaxIndex+1.
	MaxIndex int64
	// Dim is the dimension the format itself fixes, 0 if none: IDX
	// rows*cols (784 for MNIST, even if the corner pixels are never set),
	// Criteo the Options.Dim it was hashed into, a cache the Dim it was
	// built with (0 if unchecked). For libsvm it is 0: use MaxIndex+1.
	Dim uint64
	// Labels counts the rows of each raw label (as written in the file; for
	// a cache, the stored class). At most 1000 distinct labels are counted.
	Labels map[float64]int64
	// LabelPlaces holds where the first rows of each label are (at most
	// 3 per label; none for a cache), so a rare label can be named.
	LabelPlaces map[float64][]Place
	// LabelsCapped says rows with labels beyond the first 1000 distinct ones
	// were not counted in Labels.
	LabelsCapped bool
	// Numeric describes the features that take values other than 0 and 1
	// and either lie beyond [-1, 1] or appear in at least half the rows
	// (binary and one-hot features are absent): see FeatureStats and
	// ScalingFor. The figures are exact when the data has at most 4096
	// distinct features; past that only features with a value beyond
	// [-1, 1] are followed, from that value on. At most 2^20 features are
	// recorded; NumericCapped says more qualified.
	Numeric       map[uint32]*FeatureStats
	NumericCapped bool
	allStats      bool     // every feature gets stats (see note)
	Files         []string // the files read, in order
	Format        Format   // the inputs' format (detected for FormatAuto)
	// Tail follows each row's largest index, so a few rows of outlying
	// indices can be named (IndexTail.IndexOutliers).
	Tail IndexTail
}

// FeatureStats summarise the values of one feature over the rows scanned
// (a row without the feature counts as a 0).
type FeatureStats struct {
	NonZero    int64   // rows where it appears
	Sum, SumSq float64 // of its values
	MaxAbs     float64 // largest |value|
	NonBinary  bool    // a value other than 0 and 1 was seen
}

// allStatsUpTo is how many distinct features Scan follows exactly.
const allStatsUpTo = 4096

// maxScanLarge caps the features ScanResult.Numeric records: one map entry
// each, so a data set with large values on millions of features still
// scans in bounded memory.
const maxScanLarge = 1 << 20

// Classes returns the number of classes the raw labels suggest: 0 when
// every label is 0, 1, -1 or +1 (binary), else the largest label minus the
// smallest, plus one, when all labels are integers (with LabelBase the
// smallest label); ok is false when the labels fit neither.
func (s ScanResult) Classes() (classes, labelBase int, ok bool) {
	if len(s.Labels) == 0 || s.LabelsCapped {
		return 0, 0, false
	}
	lo, hi := 0.0, 0.0
	first, binary := true, true
	for l := range s.Labels {
		if l != 0 && l != 1 && l != -1 {
			binary = false
		}
		if l != float64(int64(l)) {
			return 0, 0, false
		}
		if first || l < lo {
			lo = l
		}
		if first || l > hi {
			hi = l
		}
		first = false
	}
	if binary {
		return 0, 0, true
	}
	return int(hi-lo) + 1, int(lo), true
}

// Scan reads every row of the inputs once, for inferring Dim and Classes.
// It ignores Part and Parts (every peer must infer the same values) and
// does not map labels, so Classes and LabelBase do not matter; Dim, if
// set, is still checked (and is required for Criteo input).
func Scan(patterns []string, opt Options) (ScanResult, error) {
	opt.Part, opt.Parts = 0, 0
	res := ScanResult{MaxIndex: -1, Labels: map[float64]int64{}, Numeric: map[uint32]*FeatureStats{}, allStats: true}
	if err := opt.Validate(); err != nil {
		return res, err
	}
	inputs, err := resolveInputs(patterns, opt)
	if err != nil {
		return res, err
	}
	for _, in := range inputs {
		res.Files = append(res.Files, in.path)
	}
	res.Format = inputs[0].format
	src, err := openInputs(inputs, opt, true)
	if err != nil {
		return res, err
	}
	defer src.Close()
	var b Batch
	for {
		_, err := src.Next(&b, 4096)
		if err == io.EOF {
			break
		}
		if err != nil {
			return res, err
		}
		if len(b.Indices) > 0 {
			if m := int64(slices.Max(b.Indices)); m > res.MaxIndex {
				res.MaxIndex = m
			}
		}
		for r := range b.Rows() {
			if idx, _ := b.Row(r); len(idx) > 0 {
				var p Place
				if r < len(src.sh.rawPlaces) {
					p = src.sh.rawPlaces[r]
				}
				res.Tail.Add(slices.Max(idx), p)
			}
		}
		for i, v := range b.Values {
			k := b.Indices[i]
			if v > 1 || v < -1 || res.allStats {
				res.note(k)
			}
			if st := res.Numeric[k]; st != nil {
				x := float64(v)
				st.NonZero++
				st.Sum += x
				st.SumSq += x * x
				st.MaxAbs = max(st.MaxAbs, math.Abs(x))
				st.NonBinary = st.NonBinary || (x != 0 && x != 1)
			}
		}
		for i, l := range src.sh.rawLabels {
			if i < len(src.sh.rawPlaces) && res.Labels[l] < maxLabelPlaces {
				if res.LabelPlaces == nil {
					res.LabelPlaces = map[float64][]Place{}
				}
				res.LabelPlaces[l] = append(res.LabelPlaces[l], src.sh.rawPlaces[i])
			}
			if _, ok := res.Labels[l]; ok || len(res.Labels) < maxScanLabels {
				res.Labels[l]++
			} else {
				res.LabelsCapped = true
			}
		}
	}
	st := src.Stats()
	res.Rows, res.NNZ, res.BadLines = st.Rows, st.NNZ, st.BadLines
	res.dropSmall()
	res.Dim = src.sh.formatDim
	if inputs[0].format == FormatCriteo {
		res.Dim = opt.Dim
	}
	return res, nil
}

// note makes sure feature k has stats. Until allStatsUpTo features have
// been seen every feature gets them, so a data set of a few numeric
// features has exact figures; past that, only features with a value above
// 1 are followed, from that value on.
func (s *ScanResult) note(k uint32) {
	if _, ok := s.Numeric[k]; ok {
		return
	}
	if s.allStats && len(s.Numeric) >= allStatsUpTo {
		s.allStats = false
		for j, st := range s.Numeric {
			if st.MaxAbs <= 1 {
				delete(s.Numeric, j)
			}
		}
	}
	if len(s.Numeric) >= maxScanLarge {
		s.NumericCapped = true
		return
	}
	s.Numeric[k] = &FeatureStats{}
}

// dropSmall removes the stats of the features that are not numeric (see
// ScanResult.Numeric).
func (s *ScanResult) dropSmall() {
	for j, st := range s.Numeric {
		if !st.NonBinary || (st.MaxAbs <= 1 && 2*st.NonZero < s.Rows) {
			delete(s.Numeric, j)
		}
	}
}
