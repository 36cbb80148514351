package data

import (
	"errors"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestLibSVMGoodLines(t *testing.T) {
	tests := []struct {
		name string
		line string
		opt  Options
		want row
	}{
		{"one-hot", "1 1:1 3:1", Options{}, row{1, []uint32{0, 2}, []float32{1, 1}}},
		{"values", "0 2:0.5 4:-3e-2 5:1e3 6:.25 7:1.5E+2", Options{}, row{0, []uint32{1, 3, 4, 5, 6}, []float32{0.5, -0.03, 1000, 0.25, 150}}},
		{"minus one label", "-1 2:1", Options{}, row{0, []uint32{1}, []float32{1}}},
		{"plus one label", "+1 2:1", Options{}, row{1, []uint32{1}, []float32{1}}},
		{"float label", "1.0 2:1", Options{}, row{1, []uint32{1}, []float32{1}}},
		{"unsorted", "0 3:1 1:2 2:3", Options{}, row{0, []uint32{0, 1, 2}, []float32{2, 3, 1}}},
		{"qid and comment", "1 qid:7 1:1 # 9:9", Options{}, row{1, []uint32{0}, []float32{1}}},
		{"comment without blank", "1 1:1 #c", Options{}, row{1, []uint32{0}, []float32{1}}},
		{"no features", "1", Options{}, row{1, nil, nil}},
		{"tabs and blanks", "\t1\t2:1 \t 3:2  ", Options{}, row{1, []uint32{1, 2}, []float32{1, 2}}},
		{"zero-based", "1 0:1 5:1", Options{ZeroBased: true}, row{1, []uint32{0, 5}, []float32{1, 1}}},
		{"explicit zero kept", "1 4:0", Options{}, row{1, []uint32{3}, []float32{0}}},
		{"hex float via strconv", "1 4:0x1p-2", Options{}, row{1, []uint32{3}, []float32{0.25}}},
		{"long mantissa via strconv", "1 4:0.333333333333333333333", Options{}, row{1, []uint32{3}, []float32{0.33333334}}},
		{"largest index", "1 4294967295:1", Options{}, row{1, []uint32{4294967294}, []float32{1}}},
		{"leading zeros", "1 000000000007:1", Options{}, row{1, []uint32{6}, []float32{1}}},
		{"inside dim", "1 10:1", Options{Dim: 10}, row{1, []uint32{9}, []float32{1}}},
		{"multiclass", "7 1:1", Options{Classes: 10}, row{7, []uint32{0}, []float32{1}}},
		{"multiclass base 1", "10 1:1", Options{Classes: 10, LabelBase: 1}, row{9, []uint32{0}, []float32{1}}},
		{"multiclass float spelling", "3.0 1:1", Options{Classes: 4}, row{3, []uint32{0}, []float32{1}}},
		{"multiclass negative base", "-1 1:1", Options{Classes: 3, LabelBase: -1}, row{0, []uint32{0}, []float32{1}}},
		{"crlf", "1 1:1\r", Options{}, row{1, []uint32{0}, []float32{1}}},
		{"largest float32", "1 6:3.4028234e38", Options{}, row{1, []uint32{5}, []float32{math.MaxFloat32}}},
		{"at the bound", "1 6:-1e6 7:1e6", Options{MaxValue: 1e6}, row{1, []uint32{5, 6}, []float32{-1e6, 1e6}}},
		{"tiny underflows to zero", "1 6:1e-50", Options{}, row{1, []uint32{5}, []float32{0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "a.svm", tc.line+"\n")
			b := openAll(t, []string{p}, tc.opt)
			got := rows(&b)
			if len(got) != 1 || got[0].label != tc.want.label ||
				!slices.Equal(got[0].idx, tc.want.idx) || !slices.Equal(got[0].val, tc.want.val) {
				t.Fatalf("%q: got %+v, want %+v", tc.line, got, tc.want)
			}
		})
	}
}

func TestLibSVMBadLines(t *testing.T) {
	tests := []struct {
		line string
		opt  Options
		want string // the error text after "FILE:1: "
		why  error
	}{
		{"2 1:1", Options{}, `bad token "2": binary label must be 0, 1, -1 or +1`, errLabelBinary},
		{"0.5 1:1", Options{}, `bad token "0.5": binary label must be 0, 1, -1 or +1`, errLabelBinary},
		{"x 1:1", Options{}, `bad token "x": label is not a number`, errLabelNotNumber},
		{"nan 1:1", Options{}, `bad token "nan": label is not a number`, errLabelNotNumber},
		{"1 3:x", Options{}, `bad token "3:x": value is not a number`, errValueNotNumber},
		{"1 3:", Options{}, `bad token "3:": value is not a number`, errValueNotNumber},
		{"1 3:1.2.3", Options{}, `bad token "3:1.2.3": value is not a number`, errValueNotNumber},
		{"1 3:nan", Options{}, `bad token "3:nan": value is NaN or infinite`, errValueNaN},
		{"1 3:-Inf", Options{}, `bad token "3:-Inf": value is NaN or infinite`, errValueNaN},
		{"1 3:1e39", Options{}, `bad token "3:1e39": value is out of float32 range`, errValueRange},
		{"1 3:-3.5e38", Options{}, `bad token "3:-3.5e38": value is out of float32 range`, errValueRange},
		{"1 3:+Inf", Options{}, `bad token "3:+Inf": value is NaN or infinite`, errValueNaN},
		{"1 3:infinity", Options{}, `bad token "3:infinity": value is NaN or infinite`, errValueNaN},
		{"1 3:NaN", Options{}, `bad token "3:NaN": value is NaN or infinite`, errValueNaN},
		{"inf 1:1", Options{}, `bad token "inf": label is not a number`, errLabelNotNumber},
		{"-Inf 1:1", Options{Classes: 3}, `bad token "-Inf": label is not a number`, errLabelNotNumber},
		{"1e400 1:1", Options{Classes: 3}, `bad token "1e400": label is not a number`, errLabelNotNumber},
		{"1 6:3e38", Options{MaxValue: 1e6}, `bad token "6:3e38": |value| is over the bound 1e+06 (--max-value)`, errValueBound},
		{"1 6:-1000001", Options{MaxValue: 1e6}, `bad token "6:-1000001": |value| is over the bound 1e+06 (--max-value)`, errValueBound},
		{"1 3", Options{}, `bad token "3": want index:value`, errNoColon},
		{"1 a:1", Options{}, `bad token "a:1": index is not a number`, errIndexNotNumber},
		{"1 -3:1", Options{}, `bad token "-3:1": index is negative: feature indices start at 1 (0 with --zero-based)`, errIndexNegative},
		{"1 -x:1", Options{}, `bad token "-x:1": index is not a number`, errIndexNotNumber},
		{"1 3x:1", Options{}, `bad token "3x:1": index is not a number`, errIndexNotNumber},
		{"1 :1", Options{}, `bad token ":1": index is not a number`, errIndexNotNumber},
		{"1 0:1", Options{}, `bad token "0:1": index 0 in 1-based data (use zero-based indices)`, errIndexZero},
		{"1 4294967296:1", Options{}, `bad token "4294967296:1": index is too large: features are uint32 and below 4294967295`, errIndexRange},
		{"1 4294967295:1", Options{ZeroBased: true}, `bad token "4294967295:1": index is too large: features are uint32 and below 4294967295`, errIndexRange},
		{"1 99999999999999999999999:1", Options{}, `bad token "99999999999999999999999:1": index is too large: features are uint32 and below 4294967295`, errIndexRange},
		{"1 11:1", Options{Dim: 10}, `bad token "11:1": feature 10 is outside dim 10`, errIndexDim},
		{"1 3:1 2:1 3:2", Options{}, `bad token "3:2": index appears twice in the line`, errDuplicate},
		{"1 3:1 3:1", Options{}, `bad token "3:1": index appears twice in the line`, errDuplicate},
		{"10 1:1", Options{Classes: 10}, `bad token "10": class 10 (label 10 - label base 0) is outside 0..9; labels 1..10 need --label-base 1`, errLabelRange},
		{"0 1:1", Options{Classes: 3, LabelBase: 1}, `bad token "0": class -1 (label 0 - label base 1) is outside 0..2`, errLabelRange},
		{"-1 1:1", Options{Classes: 3}, `bad token "-1": class -1 (label -1 - label base 0) is outside 0..2`, errLabelRange},
		{"1.5 1:1", Options{Classes: 3}, `bad token "1.5": label is not an integer`, errLabelNotInt},
	}
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "a.svm", "1 1:1\n"+tc.line+"\n1 2:1\n")
			src, err := Open([]string{p}, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			b, err := readAll(src, 10)
			want := p + ":2: " + tc.want
			if err == nil || err.Error() != want {
				t.Fatalf("error %v, want %s", err, want)
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line != 2 || le.File != p || !errors.Is(err, ErrBadLine) || !errors.Is(err, tc.why) {
				t.Fatalf("error %#v does not unwrap to LineError at line 2, ErrBadLine and %v", err, tc.why)
			}
			if b.Rows() != 1 {
				t.Errorf("%d rows before the error, want 1", b.Rows())
			}
			// The error sticks.
			if _, err2 := src.Next(&b, 10); err2 != err {
				t.Errorf("next call returned %v, want the same error", err2)
			}
			// With SkipBad the line is counted and skipped.
			opt := tc.opt
			opt.SkipBad = true
			src2, err := Open([]string{p}, opt)
			if err != nil {
				t.Fatal(err)
			}
			b2, err := readAll(src2, 10)
			if err != nil || b2.Rows() != 2 || src2.Stats().BadLines != 1 || src2.Stats().Rows != 2 {
				t.Errorf("SkipBad: %d rows, stats %+v, err %v; want 2 rows, 1 bad line", b2.Rows(), src2.Stats(), err)
			}
			src2.Close()
		})
	}
}

func TestLibSVMLineNumbers(t *testing.T) {
	content := "# header comment\n\n1 1:1\n   \n# another\n0 2:1\r\n1 2:x\n"
	p := writeFile(t, t.TempDir(), "a.svm", content)
	src, err := Open([]string{p}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	_, err = readAll(src, 100)
	var le *LineError
	if !errors.As(err, &le) || le.Line != 7 || le.Token != "2:x" {
		t.Fatalf("got %v, want a bad token \"2:x\" at line 7", err)
	}
}

func TestLibSVMLongTokenClipped(t *testing.T) {
	tok := "1:" + strings.Repeat("x", 200)
	p := writeFile(t, t.TempDir(), "a.svm", "1 "+tok+"\n")
	src, _ := Open([]string{p}, Options{})
	_, err := readAll(src, 1)
	var le *LineError
	if !errors.As(err, &le) || le.Token != tok[:maxToken]+"..." {
		t.Fatalf("got %v, want the token clipped to %d bytes", err, maxToken)
	}
}

// A buffer smaller than the lines must give the same rows as a large one.
func TestLibSVMTinyBuffer(t *testing.T) {
	var sb strings.Builder
	for i := range 200 {
		sb.WriteString("1")
		for k := range i % 30 {
			sb.WriteString(" ")
			sb.WriteString(strings.Repeat("0", k%3))
			sb.WriteString(string(rune('1' + k%9)))
			sb.WriteString(strings.Repeat("0", k/9))
			sb.WriteString(":0.5")
		}
		sb.WriteString("\n")
	}
	sb.WriteString("0 5:1") // no final newline
	p := writeFile(t, t.TempDir(), "a.svm", sb.String())
	want := openAll(t, []string{p}, Options{})
	for _, size := range []int{1, 7, 64} {
		got := openAll(t, []string{p}, Options{BufferSize: size})
		if !sameBatch(&got, &want) {
			t.Fatalf("buffer %d: rows differ", size)
		}
	}
	if want.Rows() != 201 || want.Labels[200] != 0 {
		t.Fatalf("%d rows, want 201 with the unterminated last line", want.Rows())
	}
}

func TestNextBatching(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "a.svm", "1 1:1\n0 2:1\n1 3:1\n0 4:1\n1 5:1\n")
	src, err := Open([]string{p}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	var sizes []int
	for {
		n, err := src.Next(&b, 2)
		if err == io.EOF {
			if n != 0 || b.Rows() != 0 {
				t.Fatalf("EOF with %d rows", n)
			}
			break
		}
		if err != nil || n != b.Rows() {
			t.Fatal(err, n, b.Rows())
		}
		sizes = append(sizes, n)
	}
	if !reflect.DeepEqual(sizes, []int{2, 2, 1}) {
		t.Fatalf("batch sizes %v, want [2 2 1]", sizes)
	}
	if st := src.Stats(); st.Rows != 5 || st.NNZ != 5 || st.Bytes != 30 {
		t.Fatalf("stats %+v, want 5 rows, 5 nnz, 30 bytes", st)
	}
	if _, err := src.Next(&b, 2); err != io.EOF {
		t.Fatalf("after EOF: %v", err)
	}
	src.Close()
	if _, err := src.Next(&b, 2); err == nil || err == io.EOF {
		t.Fatalf("Next after Close: %v, want an error", err)
	}
}

// Files that are not what their names say get errors in the user's words:
// a binary file is "not text" (not its bytes quoted as a label), a .gz that
// is not gzip and a .zst that is not zstd say so.
func TestNotTextNotGzipNotZstd(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		content string
		want    string
	}{
		{"model.gt", "GTMODEL\n\x02\x00\x00\x00\xfd\xff\xff\xff", "not text (binary data on line 1)"},
		{"image.svm", "\x89PNG\r\n\x1a\n\x00\x00", "not text (binary data on line 1)"},
		{"plain.svm.gz", "1 1:1\n0 2:1\n", "not a gzip file, though its name ends in .gz"},
		{"plain.svm.zst", "1 1:1\n0 2:1\n", "not a zstd file, though its name ends in .zst"},
	} {
		p := writeFile(t, dir, tc.name, tc.content)
		src, err := Open([]string{p}, Options{Format: FormatLibSVM})
		if err == nil {
			_, err = readAll(src, 10)
			src.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) || !errors.Is(err, ErrFormat) {
			t.Errorf("%s: error %v, want ErrFormat naming the file and %q", tc.name, err, tc.want)
		}
	}
}

// Every row of a batch is placed: Span names the file and line of its
// first and last rows, exactly, across comment lines, other parts' rows,
// skipped bad lines and files; a trainer quotes it for a batch whose
// gradient overflows.
func TestBatchSpan(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.svm", "# comment\n1 1:1\n0 2:1\n\n1 3:x\n1 3:1\n0 4:1\n")
	b := writeFile(t, dir, "b.svm", "1 5:1\n0 6:1\n")
	spans := func(opt Options, max int) []string {
		t.Helper()
		src, err := Open([]string{a, b}, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		var out []string
		var batch Batch
		for {
			n, err := src.Next(&batch, max)
			if n > 0 {
				out = append(out, batch.Span.String())
			}
			if err == io.EOF {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		opt  Options
		max  int
		want []string
	}{
		{Options{SkipBad: true}, 2, []string{a + ":2-3", a + ":6-7", b + ":1-2"}},
		{Options{SkipBad: true}, 3, []string{a + ":2-6", a + ":7-" + b + ":2"}},
		{Options{SkipBad: true}, 1, []string{a + ":2", a + ":3", a + ":6", a + ":7", b + ":1", b + ":2"}},
		// Part 2 of 2 keeps data rows 2, 4 and 6, the bad line counted
		// (lines 3 and 6 of a, 1 of b).
		{Options{SkipBad: true, Part: 2, Parts: 2}, 2, []string{a + ":3-6", b + ":1"}},
	} {
		if got := spans(tc.opt, tc.max); !slices.Equal(got, tc.want) {
			t.Errorf("%+v in batches of %d: spans %q, want %q", tc.opt, tc.max, got, tc.want)
		}
	}
	// readAll's AppendRows keeps the first row's place and the last's.
	src, err := Open([]string{a, b}, Options{SkipBad: true})
	if err != nil {
		t.Fatal(err)
	}
	all, err := readAll(src, 2)
	src.Close()
	if err != nil || all.Span.String() != a+":2-"+b+":2" {
		t.Errorf("all rows: span %q (%v), want %s:2-%s:2", all.Span.String(), err, a, b)
	}
	var empty Batch
	empty.Reset()
	if !empty.Span.IsZero() || empty.Span.String() != "" {
		t.Errorf("a batch of no rows has span %q", empty.Span.String())
	}
}

// With SkipBad the values no float32 holds and the values over MaxValue
// are counted with the other bad lines, and the rows around them kept.
func TestSkipBadCountsNonFiniteValues(t *testing.T) {
	p := writeFile(t, t.TempDir(), "a.svm", "1 1:1\n1 6:inf\n0 6:3e38\n1 6:1e39\nnan 1:1\n0 2:1\n")
	src, err := Open([]string{p}, Options{SkipBad: true, MaxValue: 1e30})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	b, err := readAll(src, 10)
	if err != nil || b.Rows() != 2 || src.Stats().BadLines != 4 {
		t.Fatalf("%d rows, %d bad lines, err %v; want 2 rows and 4 bad lines", b.Rows(), src.Stats().BadLines, err)
	}
	// The bound applies to the fast path of "1" too.
	q := writeFile(t, t.TempDir(), "b.svm", "1 6:0.5\n1 6:1\n")
	src2, err := Open([]string{q}, Options{MaxValue: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close()
	if _, err := readAll(src2, 10); err == nil || err.Error() != q+`:2: bad token "6:1": |value| is over the bound 0.5 (--max-value)` {
		t.Errorf("MaxValue 0.5: %v, want the value 1 on line 2 refused", err)
	}
	if _, err := Open([]string{p}, Options{MaxValue: -1}); !errors.Is(err, ErrOptions) {
		t.Errorf("MaxValue -1: %v, want ErrOptions", err)
	}
	if _, err := Open([]string{p}, Options{MaxValue: math.Inf(1)}); !errors.Is(err, ErrOptions) {
		t.Errorf("MaxValue +Inf: %v, want ErrOptions", err)
	}
}

// A libsvm label may carry an importance weight as "label:weight" (the
// convention of dmlc-core's libsvm parser, XGBoost's text input); rows
// without one weigh 1, a bad weight names its token, and unlabelled
// reading (prediction) skips a "-1:w", "+1:w" or 1-based "0:w" first token
// as a weighted label but reads "1:0.5" as feature 1.
func TestLibSVMWeights(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "w.svm", "1:2.5 1:1\n0 2:1\n-1:0 3:1\n+1:1e-3 4:1\n")
	b := openAll(t, []string{p}, Options{})
	if !slices.Equal(b.Weights, []float32{2.5, 1, 0, 1e-3}) || !slices.Equal(b.Labels, []float32{1, 0, 0, 1}) {
		t.Fatalf("weights %v labels %v", b.Weights, b.Labels)
	}
	unweighted := openAll(t, []string{writeFile(t, dir, "u.svm", "1 1:1\n0 2:1\n")}, Options{})
	if len(unweighted.Weights) != 0 {
		t.Errorf("unweighted rows have weights %v", unweighted.Weights)
	}
	for _, tc := range []struct{ line, want string }{
		{"1:-1 1:1", `bad token "1:-1": importance weight is not a number >= 0`},
		{"1:x 1:1", `bad token "1:x": importance weight is not a number >= 0`},
		{"1:inf 1:1", `bad token "1:inf": importance weight is not a number >= 0`},
		{"2:1 1:1", `bad token "2:1": binary label must be 0, 1, -1 or +1`},
	} {
		q := writeFile(t, dir, "bad.svm", tc.line+"\n")
		src, _ := Open([]string{q}, Options{})
		_, err := readAll(src, 10)
		src.Close()
		if err == nil || err.Error() != q+":1: "+tc.want {
			t.Errorf("%q: %v, want %s", tc.line, err, tc.want)
		}
	}
	nl := openAll(t, []string{writeFile(t, dir, "nl.svm", "-1:2 5:1\n+1:0.5 5:1\n0:3 5:1\n1:0.5 5:1\n")}, Options{NoLabels: true})
	got := rows(&nl)
	for i, want := range [][]uint32{{4}, {4}, {4}, {0, 4}} {
		if !slices.Equal(got[i].idx, want) {
			t.Errorf("unlabelled line %d: features %v, want %v", i+1, got[i].idx, want)
		}
	}
}
