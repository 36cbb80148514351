package data

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

func TestParseFormat(t *testing.T) {
	tests := []struct {
		in   string
		want Format
		ok   bool
	}{
		{"auto", FormatAuto, true}, {"libsvm", FormatLibSVM, true}, {"svmlight", FormatLibSVM, true},
		{"SVMLight", FormatLibSVM, true}, {"criteo", FormatCriteo, true}, {"idx", FormatIDX, true},
		{"cache", FormatCache, true}, {"csv", FormatAuto, false},
	}
	for _, tc := range tests {
		got, err := ParseFormat(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseFormat(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && tc.in == strings.ToLower(tc.in) && tc.in != "svmlight" && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
	if _, err := ParseFormat("csv"); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), `"csv"`) {
		t.Errorf("error %v does not name the format", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		opt  Options
		want string // "" = valid
	}{
		{Options{}, ""},
		{Options{Part: 2, Parts: 3, Dim: 10, Classes: 10}, ""},
		{Options{Format: FormatCriteo, Dim: 1 << 20}, ""},
		{Options{Format: FormatCriteo}, "Criteo input needs Dim (--dim)"},
		{Options{Dim: 1 << 32}, "Dim 4294967296 is larger than 4294967295"},
		{Options{Classes: 1}, "Classes 1: want 0 (binary labels) or at least 2"},
		{Options{Classes: -2}, "Classes -2"},
		{Options{Part: 1}, "Part 1 of Parts 0: set both or neither"},
		{Options{Part: 4, Parts: 3}, "Part 4 of Parts 3: Part must be in 1..3"},
		{Options{Part: -1, Parts: 3}, "negative"},
		{Options{BufferSize: -1}, "BufferSize -1 is negative"},
		{Options{Format: Format(9)}, "unknown format 9"},
	}
	for _, tc := range tests {
		err := tc.opt.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.opt, err)
			}
			continue
		}
		if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.opt, err, tc.want)
		}
	}
}

// numbered writes files of libsvm rows whose first feature is the global
// row number, so order and partition can be checked.
func numbered(t *testing.T, dir string, names []string, perFile int) []string {
	var paths []string
	r := 0
	for _, n := range names {
		var sb strings.Builder
		for range perFile {
			fmt.Fprintf(&sb, "%d %d:1 1000000:0.5\n", r%2, r+1)
			if r%5 == 0 {
				sb.WriteString("# a comment is not a row\n\n")
			}
			r++
		}
		paths = append(paths, writeFile(t, dir, n, sb.String()))
	}
	return paths
}

func firstFeatures(b *Batch) []uint32 {
	var out []uint32
	for r := range b.Rows() {
		idx, _ := b.Row(r)
		out = append(out, idx[0])
	}
	return out
}

func TestGlobOrderAndConcatenation(t *testing.T) {
	dir := t.TempDir()
	// Written out of order; glob must read a, b, c.
	numbered(t, dir, []string{"c.svm"}, 2)
	numbered(t, dir, []string{"a.svm"}, 2)
	numbered(t, dir, []string{"b.svm"}, 2)
	writeFile(t, dir, "z.txt", "1 9:1\n")
	b := openAll(t, []string{filepath.Join(dir, "*.svm")}, Options{})
	// Each file holds rows numbered 0,1 (features 0, 1).
	if got := firstFeatures(&b); !slices.Equal(got, []uint32{0, 1, 0, 1, 0, 1}) {
		t.Fatalf("rows %v", got)
	}
	// Patterns concatenate in the order given.
	writeFile(t, dir, "x.svm", "1 7:1\n")
	b = openAll(t, []string{filepath.Join(dir, "z.txt"), filepath.Join(dir, "x.svm")}, Options{})
	if got := firstFeatures(&b); !slices.Equal(got, []uint32{8, 6}) {
		t.Fatalf("rows %v, want [8 6]", got)
	}
	src, err := Open([]string{filepath.Join(dir, "x.svm"), filepath.Join(dir, "nothing-*.svm")}, Options{})
	if !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), "nothing-*.svm") || src != nil {
		t.Fatalf("got %v, want ErrNoMatch naming the pattern", err)
	}
	if _, err := Open([]string{dir}, Options{}); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("directory input: %v", err)
	}
	if _, err := Open(nil, Options{}); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("no patterns: %v", err)
	}
}

func TestPartitions(t *testing.T) {
	dir := t.TempDir()
	paths := numbered(t, dir, []string{"p1.svm", "p2.svm", "p3.svm"}, 7) // 21 rows over 3 files
	whole := openAll(t, paths, Options{})
	if whole.Rows() != 21 {
		t.Fatalf("%d rows", whole.Rows())
	}
	for _, parts := range []int{1, 2, 3, 4, 21, 25} {
		seen := map[uint32]int{}
		for part := 1; part <= parts; part++ {
			b := openAll(t, paths, Options{Part: part, Parts: parts})
			for i, k := range firstFeatures(&b) {
				if int(k)%parts != part-1 {
					t.Errorf("%d/%d: row %d is in the wrong part", part, parts, k)
				}
				if i > 0 && k <= firstFeatures(&b)[i-1] {
					t.Errorf("%d/%d: rows out of order", part, parts)
				}
				seen[k]++
			}
		}
		for r := range uint32(21) {
			if seen[r] != 1 {
				t.Errorf("parts %d: row %d read %d times, want once", parts, r, seen[r])
			}
		}
	}
}

// A bad line in another part is not parsed, so it is not reported.
func TestPartitionSkipsWithoutParsing(t *testing.T) {
	p := writeFile(t, t.TempDir(), "a.svm", "1 1:1\nbad line\n1 3:1\n")
	b := openAll(t, []string{p}, Options{Part: 1, Parts: 2})
	if got := firstFeatures(&b); !slices.Equal(got, []uint32{0, 2}) {
		t.Fatalf("part 1 of 2: %v", got)
	}
	src, _ := Open([]string{p}, Options{Part: 2, Parts: 2})
	if _, err := readAll(src, 10); !errors.Is(err, ErrBadLine) {
		t.Fatalf("part 2 of 2 holds the bad line: %v", err)
	}
}

func compressTo(t *testing.T, path, comp string, content []byte) {
	var buf bytes.Buffer
	switch comp {
	case "gz":
		w := gzip.NewWriter(&buf)
		w.Write(content)
		w.Close()
	case "zst":
		w, _ := zstd.NewWriter(&buf)
		w.Write(content)
		w.Close()
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCompressedRoundTrip(t *testing.T) {
	dir := t.TempDir()
	plain := numbered(t, dir, []string{"plain.svm"}, 3000)[0]
	content, _ := os.ReadFile(plain)
	want := openAll(t, []string{plain}, Options{})
	for _, comp := range []string{"gz", "zst"} {
		p := filepath.Join(dir, "data.svm."+comp)
		compressTo(t, p, comp, content)
		src, err := Open([]string{p}, Options{BufferSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAll(src, 100)
		if err != nil || !sameBatch(&got, &want) {
			t.Fatalf("%s: rows differ (%v)", comp, err)
		}
		st, _ := os.Stat(p)
		if src.Stats().Bytes != st.Size() {
			t.Errorf("%s: Stats.Bytes %d, want the compressed size %d", comp, src.Stats().Bytes, st.Size())
		}
		src.Close()
		// A truncated stream is an error naming the file, not a short read.
		cut := filepath.Join(dir, "cut.svm."+comp)
		whole, _ := os.ReadFile(p)
		os.WriteFile(cut, whole[:len(whole)/2], 0o644)
		src, err = Open([]string{cut}, Options{})
		if err == nil {
			_, err = readAll(src, 100)
		}
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), cut) {
			t.Errorf("%s truncated: %v, want ErrFormat naming %s", comp, err, cut)
		}
	}
	if _, err := Open([]string{writeFile(t, dir, "fake.svm.gz", "1 1:1\n")}, Options{}); !errors.Is(err, ErrFormat) {
		t.Errorf("plain text named .gz: %v", err)
	}
}

func TestDetectFormat(t *testing.T) {
	dir := t.TempDir()
	criteoLine := "1" + strings.Repeat("\t5", 13) + strings.Repeat("\tab", 26) + "\n"
	libsvmTabs := "1" + strings.Repeat("\t5:1", 39) + "\n"
	tests := []struct {
		name, content string
		want          Format
	}{
		{"a.svm", "1 1:1\n", FormatLibSVM},
		{"a.txt", criteoLine, FormatCriteo},
		{"a.tsv", libsvmTabs, FormatLibSVM},
		{"day_0", criteoLine, FormatCriteo},
		{"empty.svm", "", FormatLibSVM},
		{"train-images-idx3-ubyte.gz", "", FormatIDX},
		{"t10k-images.idx3-ubyte", "", FormatIDX},
		{"train.gtc", "", FormatCache},
	}
	for _, tc := range tests {
		got, err := detectFormat(writeFile(t, dir, tc.name, tc.content))
		if err != nil || got != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := detectFormat(writeFile(t, dir, "train-labels-idx1-ubyte", "")); err == nil || !strings.Contains(err.Error(), "labels file") {
		t.Errorf("labels file as input: %v", err)
	}
	// Mixed formats are refused.
	a := writeFile(t, dir, "m.svm", "1 1:1\n")
	c := writeFile(t, dir, "m.tsv", criteoLine)
	if _, err := Open([]string{a, c}, Options{Dim: 100}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "mixed formats") {
		t.Errorf("mixed: %v", err)
	}
	// Criteo detected without Dim names the file and the flag.
	if _, err := Open([]string{c}, Options{}); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), c) || !strings.Contains(err.Error(), "--dim") {
		t.Errorf("criteo without dim: %v", err)
	}
}
