package data

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
)

func TestScan(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.svm", "-1 3:1 10:2\n+1 1:1\n# comment\n")
	b := writeFile(t, dir, "b.svm", "1 7:1\n-1\n")
	res, err := Scan([]string{a, b}, Options{Part: 1, Parts: 2}) // Part is ignored
	if err != nil {
		t.Fatal(err)
	}
	want := map[float64]int64{-1: 2, 1: 2}
	if res.Rows != 4 || res.NNZ != 4 || res.MaxIndex != 9 || res.Dim != 0 || !maps.Equal(res.Labels, want) || len(res.Files) != 2 || res.Files[1] != b {
		t.Fatalf("got %+v", res)
	}
	if c, base, ok := res.Classes(); !ok || c != 0 || base != 0 {
		t.Errorf("Classes() = %d, %d, %v; want binary", c, base, ok)
	}
	// Multiclass labels 1..5 suggest 5 classes with base 1, whatever the
	// options say about classes.
	m := writeFile(t, dir, "m.svm", "1 1:1\n5 2:1\n3\n")
	res, err = Scan([]string{m}, Options{Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if c, base, ok := res.Classes(); !ok || c != 5 || base != 1 {
		t.Errorf("Classes() = %d, %d, %v; want 5 classes from 1", c, base, ok)
	}
	// Non-integer labels fit no class scheme; an empty set has no rows.
	f := writeFile(t, dir, "f.svm", "0.5 1:1\n")
	if res, _ := Scan([]string{f}, Options{}); res.Rows != 1 || res.Labels[0.5] != 1 {
		t.Errorf("raw label 0.5 not counted: %+v", res)
	} else if _, _, ok := res.Classes(); ok {
		t.Errorf("Classes() accepted label 0.5")
	}
	e := writeFile(t, dir, "e.svm", "# nothing\n")
	if res, err := Scan([]string{e}, Options{}); err != nil || res.Rows != 0 || res.MaxIndex != -1 {
		t.Errorf("empty: %+v %v", res, err)
	}
	// Bad lines still fail, or are counted with SkipBad.
	bad := writeFile(t, dir, "bad.svm", "1 1:1\n1 2:x\n")
	if _, err := Scan([]string{bad}, Options{}); !errors.Is(err, ErrBadLine) {
		t.Errorf("bad line: %v", err)
	}
	if res, err := Scan([]string{bad}, Options{SkipBad: true}); err != nil || res.BadLines != 1 || res.Rows != 1 {
		t.Errorf("SkipBad: %+v %v", res, err)
	}
}

func TestScanCapsLabels(t *testing.T) {
	var sb strings.Builder
	for i := range maxScanLabels + 5 {
		fmt.Fprintf(&sb, "%d 1:1\n", i)
	}
	p := writeFile(t, t.TempDir(), "many.svm", sb.String())
	res, err := Scan([]string{p}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Labels) != maxScanLabels || !res.LabelsCapped || res.Rows != maxScanLabels+5 {
		t.Fatalf("%d labels, capped %v, %d rows", len(res.Labels), res.LabelsCapped, res.Rows)
	}
	if _, _, ok := res.Classes(); ok {
		t.Errorf("Classes() trusted a capped label count")
	}
}

func TestScanCriteoAndCache(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "a.tsv", criteoLine("1", []string{"5"}, nil)+"\n"+criteoLine("0", nil, []string{"ab"})+"\n")
	res, err := Scan([]string{p}, Options{Dim: 1000})
	if err != nil {
		t.Fatal(err)
	}
	k1, _ := CriteoFeature(1, []byte("5"), 1000)
	k2, _ := CriteoFeature(14, []byte("ab"), 1000)
	if res.Rows != 2 || res.NNZ != 2 || res.MaxIndex != int64(max(k1, k2)) || res.Dim != 1000 {
		t.Errorf("criteo scan %+v, want max index %d", res, max(k1, k2))
	}
	cache := filepath.Join(dir, "a.gtc")
	readCached(t, []string{p}, Options{Dim: 1000}, cache)
	res, err = Scan([]string{cache}, Options{})
	if err != nil || res.Rows != 2 || res.Labels[1] != 1 || res.Labels[0] != 1 || res.Dim != 1000 {
		t.Errorf("cache scan %+v %v", res, err)
	}
}

// IDX fixes the dimension (rows*cols) even when the last pixels are never
// set.
func TestScanIDXDim(t *testing.T) {
	dir := t.TempDir()
	img := writeBytes(t, filepath.Join(dir, "a-images-idx3-ubyte"), idxImages(2, 2, 3, []byte{9, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0}))
	writeBytes(t, filepath.Join(dir, "a-labels-idx1-ubyte"), idxLabels(3, 4))
	res, err := Scan([]string{img}, Options{})
	if err != nil || res.Dim != 6 || res.MaxIndex != 1 || res.Labels[3] != 1 || res.Labels[4] != 1 {
		t.Fatalf("%+v %v; want Dim 6, MaxIndex 1", res, err)
	}
}
