package model

import (
	"archive/zip"
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Exports: a model's nonzero weights with their feature indices, in files
// other tools read (docs/usage.md, "Exporting a model", has the Python to
// read them and score rows). Three formats:
//
// json: one object. Metadata first: "format" ("gossiptrain-export"),
// "version" (1), "kind", "dim", "classes", "hidden" (0 for the linear
// kinds), "label_base", "labels" (the label of each class: [0, 1] or
// [-1, 1] for logreg, label_base..label_base+classes-1 otherwise),
// "zero_based" and "input_format" (the training input: a libsvm file's
// index i is the model's feature i-1 unless zero_based); then the
// parameters: "bias" (logreg: a number; softmax: one per class; mlp: b1,
// one per hidden unit), "index" (the features with a nonzero weight,
// ascending, 0-based) and "weight" (logreg: one number per index; softmax
// and mlp: one array per index, of classes or hidden values), and for the
// mlp "w2" (classes arrays of hidden values) and "b2" (classes values).
// Numbers are float32 values in the shortest form that reads back as the
// same float32.
//
// npz: numpy's zip of .npy arrays (numpy.load reads it, no pickle): the
// same names as json, with index as uint32, the parameters as float32
// (bias 0-d for logreg; weight 1-D for logreg, 2-D for softmax and mlp;
// w2 classes x hidden), kind and input_format as 0-d unicode strings,
// dim, classes, hidden and label_base as 0-d int64, labels as int64,
// zero_based as a 0-d bool.
//
// text: comment lines starting with "#" (the metadata), then one line per
// row, "index<TAB>value[<TAB>value...]": the features with a nonzero
// weight ascending, then the bias as the row with index dim (every row has
// a feature dim of value 1, the model's own convention); for an mlp every
// row of the model in its numbering (see MLP: b1 is row dim, W2's rows
// dim+1..dim+classes, b2 row dim+classes+1, its first classes values).
// numpy.loadtxt and pandas.read_csv(sep="\t", comment="#", header=None)
// read it.

// ExportFormat is a format of Export.
type ExportFormat uint8

// Export formats.
const (
	ExportJSON ExportFormat = iota + 1
	ExportNPZ
	ExportText
)

// ParseExportFormat parses "json", "npz" or "text".
func ParseExportFormat(s string) (ExportFormat, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "json":
		return ExportJSON, nil
	case "npz":
		return ExportNPZ, nil
	case "text", "txt", "tsv":
		return ExportText, nil
	}
	return 0, fmt.Errorf("%w: unknown export format %q (want json, npz or text)", ErrConfig, s)
}

func (f ExportFormat) String() string {
	switch f {
	case ExportJSON:
		return "json"
	case ExportNPZ:
		return "npz"
	case ExportText:
		return "text"
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// Label returns the label of class c as the training data wrote it: for a
// logreg model 1 for class 1 and 0 for class 0 (-1 when trained on -1/+1
// labels, Input.SignedLabels), for softmax and mlp c + LabelBase.
func (m *Model) Label(c int) int64 {
	if m.Kind == Logreg {
		if c == 0 && m.Input.SignedLabels {
			return -1
		}
		return int64(c)
	}
	return int64(c) + m.LabelBase
}

// exportRows are a model's feature rows with a nonzero weight, ascending.
type exportRows struct {
	idx   []uint32
	val   []float32 // width per row, in the order of idx
	width int
}

// featureRows gathers the rows 0..Dim-1 that hold a nonzero weight, in
// ascending order, reading only the pages training wrote.
func (m *Model) featureRows() exportRows {
	w := m.Layout.Width
	var idx []uint32
	var val []float32
	for s := range m.Layout.Shards {
		m.visitRows(s, false, anyValue, func(k uint32, row, _ []float32) {
			if uint64(k) < m.Dim {
				idx = append(idx, k)
				val = append(val, row...)
			}
		})
	}
	// Shard-major to ascending: sort a permutation.
	perm := make([]int32, len(idx))
	for i := range perm {
		perm[i] = int32(i)
	}
	slices.SortFunc(perm, func(a, b int32) int { return int(int64(idx[a]) - int64(idx[b])) })
	out := exportRows{idx: make([]uint32, len(idx)), val: make([]float32, len(val)), width: w}
	for i, p := range perm {
		out.idx[i] = idx[p]
		copy(out.val[i*w:(i+1)*w], val[int(p)*w:int(p+1)*w])
	}
	return out
}

// Export writes m's nonzero weights with their indices in format f (see
// ExportFormat). Its memory is the nonzero rows', not the model's.
func (m *Model) Export(w io.Writer, f ExportFormat) error {
	rows := m.featureRows()
	for _, v := range rows.val {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: the model holds a weight of %v, which no export format can carry", ErrConfig, v)
		}
	}
	switch f {
	case ExportJSON:
		return m.exportJSON(w, rows)
	case ExportNPZ:
		return m.exportNPZ(w, rows)
	case ExportText:
		return m.exportText(w, rows)
	}
	return fmt.Errorf("%w: unknown export format %d", ErrConfig, f)
}

// exportMeta is an export's metadata, in the order json writes it.
func (m *Model) exportMeta() (labels []int64) {
	for c := range m.Classes {
		labels = append(labels, m.Label(c))
	}
	return labels
}

// mlpParts returns an MLP's b1, W2 (classes x hidden, row-major) and b2.
func (m *Model) mlpParts() (b1, w2, b2 []float32) {
	b1 = m.Row(m.Bias())
	for j := range m.Classes {
		w2 = append(w2, m.Row(m.Bias()+1+uint32(j))...)
	}
	b2 = m.Row(m.Bias2())[:m.Classes]
	return b1, w2, b2
}

func appendF32(b []byte, v float32) []byte {
	return strconv.AppendFloat(b, float64(v), 'g', -1, 32)
}

// exportJSON writes the json format, streaming.
func (m *Model) exportJSON(w io.Writer, rows exportRows) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	b := make([]byte, 0, 256)
	b = append(b, `{"format":"gossiptrain-export","version":1,"kind":`...)
	b = strconv.AppendQuote(b, m.Kind.String())
	b = fmt.Appendf(b, `,"dim":%d,"classes":%d,"hidden":%d,"label_base":%d,"labels":[`, m.Dim, m.Classes, m.Hidden, m.LabelBase)
	for i, l := range m.exportMeta() {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, l, 10)
	}
	b = fmt.Appendf(b, `],"zero_based":%t,"input_format":`, m.Input.ZeroBased)
	b = strconv.AppendQuote(b, m.Input.Format)
	b = append(b, ",\n"...)
	array := func(b []byte, v []float32) []byte {
		b = append(b, '[')
		for i, x := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendF32(b, x)
		}
		return append(b, ']')
	}
	b = append(b, `"bias":`...)
	bias := m.Row(m.Bias())
	if m.Kind == Logreg {
		b = appendF32(b, bias[0])
	} else {
		b = array(b, bias)
	}
	b = append(b, ",\n\"index\":["...)
	for i, k := range rows.idx {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(k), 10)
		if len(b) > 1<<15 {
			bw.Write(b)
			b = b[:0]
		}
	}
	b = append(b, "],\n\"weight\":["...)
	for i := range rows.idx {
		if i > 0 {
			b = append(b, ',')
		}
		row := rows.val[i*rows.width : (i+1)*rows.width]
		if m.Kind == Logreg {
			b = appendF32(b, row[0])
		} else {
			b = array(b, row)
		}
		if len(b) > 1<<15 {
			bw.Write(b)
			b = b[:0]
		}
	}
	b = append(b, ']')
	if m.Kind == MLP {
		_, w2, b2 := m.mlpParts()
		b = append(b, ",\n\"w2\":["...)
		for j := range m.Classes {
			if j > 0 {
				b = append(b, ',')
			}
			b = array(b, w2[j*m.Hidden:(j+1)*m.Hidden])
		}
		b = append(b, "],\n\"b2\":"...)
		b = array(b, b2)
	}
	b = append(b, "}\n"...)
	bw.Write(b)
	return bw.Flush()
}

// exportText writes the text format.
func (m *Model) exportText(w io.Writer, rows exportRows) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	labels := make([]string, 0, m.Classes)
	for _, l := range m.exportMeta() {
		labels = append(labels, strconv.FormatInt(l, 10))
	}
	fmt.Fprintf(bw, "# gossiptrain export 1: kind %s, dim %d, classes %d, hidden %d, label_base %d, labels %s, zero_based %t, input_format %q\n",
		m.Kind, m.Dim, m.Classes, m.Hidden, m.LabelBase, strings.Join(labels, " "), m.Input.ZeroBased, m.Input.Format)
	switch m.Kind {
	case Logreg:
		fmt.Fprintf(bw, "# index<TAB>weight for every nonzero weight; the row with index %d is the bias\n", m.Dim)
	case Softmax:
		fmt.Fprintf(bw, "# index<TAB>one weight per class for every row with a nonzero weight; the row with index %d is the bias\n", m.Dim)
	case MLP:
		fmt.Fprintf(bw, "# index<TAB>%d values per row: W1's rows 0..%d with a nonzero weight, b1 (row %d), W2 (rows %d..%d, one per class), b2 (row %d, its first %d values)\n",
			m.Hidden, m.Dim-1, m.Dim, m.Dim+1, m.Dim+uint64(m.Classes), m.Bias2(), m.Classes)
	}
	b := make([]byte, 0, 256)
	line := func(k uint64, row []float32) {
		b = strconv.AppendUint(b[:0], k, 10)
		for _, v := range row {
			b = append(b, '\t')
			b = appendF32(b, v)
		}
		b = append(b, '\n')
		bw.Write(b)
	}
	for i, k := range rows.idx {
		line(uint64(k), rows.val[i*rows.width:(i+1)*rows.width])
	}
	line(m.Dim, m.Row(m.Bias()))
	if m.Kind == MLP {
		for k := m.Bias() + 1; k <= m.Bias2(); k++ {
			line(uint64(k), m.Row(k))
		}
	}
	return bw.Flush()
}

// exportNPZ writes the npz format: a zip (stored, as numpy.savez writes
// it) of .npy files.
func (m *Model) exportNPZ(w io.Writer, rows exportRows) error {
	z := zip.NewWriter(w)
	n := len(rows.idx)
	add := func(name, descr string, shape []int, data func(io.Writer) error) error {
		f, err := z.CreateHeader(&zip.FileHeader{Name: name + ".npy", Method: zip.Store})
		if err != nil {
			return err
		}
		if _, err := f.Write(npyHeader(descr, shape)); err != nil {
			return err
		}
		return data(f)
	}
	floats := func(v []float32) func(io.Writer) error {
		return func(w io.Writer) error {
			buf := make([]byte, 0, 1<<16)
			for len(v) > 0 {
				k := min(len(v), 1<<14)
				buf = appendFloats(buf[:0], v[:k])
				if _, err := w.Write(buf); err != nil {
					return err
				}
				v = v[k:]
			}
			return nil
		}
	}
	ints := func(v ...int64) func(io.Writer) error {
		return func(w io.Writer) error {
			b := make([]byte, 0, 8*len(v))
			for _, x := range v {
				b = binary.LittleEndian.AppendUint64(b, uint64(x))
			}
			_, err := w.Write(b)
			return err
		}
	}
	str := func(s string) (string, func(io.Writer) error) {
		r := []rune(s)
		return fmt.Sprintf("<U%d", max(1, len(r))), func(w io.Writer) error {
			b := make([]byte, 4*max(1, len(r)))
			for i, c := range r {
				binary.LittleEndian.PutUint32(b[4*i:], uint32(c))
			}
			_, err := w.Write(b)
			return err
		}
	}
	bias := m.Row(m.Bias())
	biasShape := []int{len(bias)}
	if m.Kind == Logreg {
		biasShape = nil
	}
	weightShape := []int{n}
	if m.Kind != Logreg {
		weightShape = []int{n, rows.width}
	}
	kindDescr, kindData := str(m.Kind.String())
	inDescr, inData := str(m.Input.Format)
	zb := byte(0)
	if m.Input.ZeroBased {
		zb = 1
	}
	type entry struct {
		name, descr string
		shape       []int
		data        func(io.Writer) error
	}
	entries := []entry{
		{"kind", kindDescr, nil, kindData},
		{"dim", "<i8", nil, ints(int64(m.Dim))},
		{"classes", "<i8", nil, ints(int64(m.Classes))},
		{"hidden", "<i8", nil, ints(int64(m.Hidden))},
		{"label_base", "<i8", nil, ints(m.LabelBase)},
		{"labels", "<i8", []int{m.Classes}, ints(m.exportMeta()...)},
		{"zero_based", "|b1", nil, func(w io.Writer) error { _, err := w.Write([]byte{zb}); return err }},
		{"input_format", inDescr, nil, inData},
		{"bias", "<f4", biasShape, floats(bias)},
		{"index", "<u4", []int{n}, func(w io.Writer) error {
			buf := make([]byte, 0, 1<<16)
			for v := rows.idx; len(v) > 0; {
				k := min(len(v), 1<<14)
				buf = buf[:0]
				for _, x := range v[:k] {
					buf = binary.LittleEndian.AppendUint32(buf, x)
				}
				if _, err := w.Write(buf); err != nil {
					return err
				}
				v = v[k:]
			}
			return nil
		}},
		{"weight", "<f4", weightShape, floats(rows.val)},
	}
	if m.Kind == MLP {
		_, w2, b2 := m.mlpParts()
		entries = append(entries,
			entry{"w2", "<f4", []int{m.Classes, m.Hidden}, floats(w2)},
			entry{"b2", "<f4", []int{m.Classes}, floats(b2)})
	}
	for _, e := range entries {
		if err := add(e.name, e.descr, e.shape, e.data); err != nil {
			return err
		}
	}
	return z.Close()
}

// npyHeader returns the header of a .npy file (format version 1.0) of a
// C-order array: the magic, the version, the header's length and its
// dict, padded with spaces to a multiple of 64 bytes and ended by a
// newline.
func npyHeader(descr string, shape []int) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	sh := strings.Join(dims, ", ")
	if len(shape) == 1 {
		sh += ","
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, sh)
	total := 10 + len(dict) + 1
	pad := (64 - total%64) % 64
	hdr := make([]byte, 0, total+pad)
	hdr = append(hdr, "\x93NUMPY\x01\x00"...)
	hdr = binary.LittleEndian.AppendUint16(hdr, uint16(len(dict)+pad+1))
	hdr = append(hdr, dict...)
	for range pad {
		hdr = append(hdr, ' ')
	}
	return append(hdr, '\n')
}
