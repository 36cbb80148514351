package data

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gunzipLines returns the lines of a gzipped file.
func gunzipLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("real data: %v", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
}

// One stray "50000000:1" on a line of Adult's training data (indices up
// to 127) is named with its file and line and the --dim it implies;
// Adult as it is, and IMDB's features hashed over 2^20, have no outliers.
func TestIndexOutliersRealData(t *testing.T) {
	dir := t.TempDir()
	lines := gunzipLines(t, "../testdata/realdata/adult.train.gz")
	lines[999] += " 50000000:1"
	stray := filepath.Join(dir, "adult-stray.svm")
	os.WriteFile(stray, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	sr, err := Scan([]string{stray}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	o, ok := sr.Tail.IndexOutliers()
	if !ok || o.Rows != 1 || o.Of != 26049 || o.Dim != 50000000 || o.Typical != 128 || len(o.Named) != 1 ||
		o.Named[0].Place != (Place{stray, 1000}) || o.Named[0].MaxIndex != 49999999 {
		t.Errorf("Adult with a stray index on line 1000: %+v, %v", o, ok)
	}
	for _, f := range []string{"../testdata/realdata/adult.train.gz", "../testdata/realdata/imdb5k.train.gz"} {
		sr, err := Scan([]string{f}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if o, ok := sr.Tail.IndexOutliers(); ok {
			t.Errorf("%s: outliers %+v, want none", f, o)
		}
	}
}

// The rule: rows whose largest index is at least 16 times that of all but
// the top 0.1% (rounded up to a power of two) are outlying when they are
// at most 0.01% of the rows (at least one); the ten most outlying are
// named, largest first.
func TestIndexOutliersRule(t *testing.T) {
	add := func(tl *IndexTail, n int, max uint32, file string) {
		for i := range n {
			tl.Add(max-uint32(i%7), Place{file, int64(i + 1)})
		}
	}
	for _, tc := range []struct {
		name   string
		rows   int    // typical rows, largest index up to 99 (typical 128)
		stray  int    // stray rows
		index  uint32 // their largest index
		want   bool
		wantOf int64
	}{
		{"one stray far above", 1000, 1, 5000, true, 1001},
		{"16x the typical power of two is outlying", 1000, 1, 16*128 - 1, true, 1001},
		{"just under 16x is not", 1000, 1, 16*128 - 2, false, 0},
		{"three strays in 30000 rows", 30000, 3, 1 << 30, true, 30003},
		{"four strays in 30000 rows are not a few", 30000, 4, 1 << 30, false, 0},
		{"two strays in 1000 rows hide each other", 1000, 2, 1 << 30, false, 0},
		{"a single row", 0, 1, 5000, false, 0},
	} {
		var tl IndexTail
		add(&tl, tc.rows, 99, "typical")
		for i := range tc.stray {
			tl.Add(tc.index-uint32(i), Place{"stray", int64(i + 1)})
		}
		o, ok := tl.IndexOutliers()
		if ok != tc.want || (ok && (o.Of != tc.wantOf || o.Rows != int64(tc.stray) || len(o.Named) != tc.stray || o.Named[0].MaxIndex != tc.index || o.Typical != 128)) {
			t.Errorf("%s: %+v, %v", tc.name, o, ok)
		}
	}
	// At most ten named, largest first.
	var tl IndexTail
	add(&tl, 300000, 99, "typical")
	for i := range 20 {
		tl.Add(1<<20+uint32(i), Place{"stray", int64(i + 1)})
	}
	o, ok := tl.IndexOutliers()
	if !ok || o.Rows != 20 || len(o.Named) != 10 || o.Named[0].MaxIndex != 1<<20+19 || o.Named[9].MaxIndex != 1<<20+10 {
		t.Errorf("20 strays in 300000 rows: %v, named %v", ok, fmt.Sprint(o.Named))
	}
}
