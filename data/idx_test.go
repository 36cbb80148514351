package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func idxImages(n, rows, cols uint32, pix []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, idxImagesMagic)
	b = binary.BigEndian.AppendUint32(b, n)
	b = binary.BigEndian.AppendUint32(b, rows)
	b = binary.BigEndian.AppendUint32(b, cols)
	return append(b, pix...)
}

func idxLabels(labels ...byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, idxLabelsMagic)
	b = binary.BigEndian.AppendUint32(b, uint32(len(labels)))
	return append(b, labels...)
}

func writeBytes(t testing.TB, path string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Three 2x2 images: pixels 0..255 scale to [0, 1], zeros are left out.
var tinyPixels = []byte{
	0, 255, 0, 51, // image 0
	0, 0, 0, 0, // image 1: blank
	102, 0, 0, 1, // image 2
}

func TestIDXTiny(t *testing.T) {
	dir := t.TempDir()
	img := writeBytes(t, filepath.Join(dir, "train-images-idx3-ubyte"), idxImages(3, 2, 2, tinyPixels))
	writeBytes(t, filepath.Join(dir, "train-labels-idx1-ubyte"), idxLabels(7, 0, 9))
	b := openAll(t, []string{img}, Options{Classes: 10})
	want := []row{
		{7, []uint32{1, 3}, []float32{1, 0.2}},
		{0, nil, nil},
		{9, []uint32{0, 3}, []float32{0.4, float32(1) / 255}},
	}
	got := rows(&b)
	if len(got) != len(want) {
		t.Fatalf("%d rows", len(got))
	}
	for i := range want {
		if got[i].label != want[i].label || !slices.Equal(got[i].idx, want[i].idx) || !slices.Equal(got[i].val, want[i].val) {
			t.Errorf("row %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	// Partition by record.
	p := openAll(t, []string{img}, Options{Classes: 10, Part: 2, Parts: 2})
	if !slices.Equal(p.Labels, []float32{0}) {
		t.Errorf("part 2 of 2: labels %v, want [0]", p.Labels)
	}
	// Auto-detection, explicit labels, label base.
	other := writeBytes(t, filepath.Join(dir, "mylabels"), idxLabels(8, 1, 10))
	b = openAll(t, []string{img}, Options{Classes: 10, LabelBase: 1, Labels: other})
	if !slices.Equal(b.Labels, []float32{7, 0, 9}) {
		t.Errorf("labels file with base 1: %v", b.Labels)
	}
}

func TestIDXCompressedAndLabelNames(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "t10k-images-idx3-ubyte.gz")
	compressTo(t, img, "gz", idxImages(3, 2, 2, tinyPixels))
	// Labels plain beside gzipped images: found "with or without .gz".
	writeBytes(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), idxLabels(1, 0, 1))
	b := openAll(t, []string{img}, Options{})
	if !slices.Equal(b.Labels, []float32{1, 0, 1}) || b.NNZ() != 4 {
		t.Fatalf("labels %v nnz %d", b.Labels, b.NNZ())
	}
	tests := []struct{ images, labels string }{
		{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
		{"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"},
		{"train-images.idx3-ubyte", "train-labels.idx1-ubyte"},
	}
	for _, tc := range tests {
		writeBytes(t, filepath.Join(dir, tc.labels), nil)
		got, err := IDXLabelsPath(filepath.Join(dir, tc.images))
		if err != nil || got != filepath.Join(dir, tc.labels) {
			t.Errorf("IDXLabelsPath(%s) = %s, %v; want %s", tc.images, got, err, tc.labels)
		}
	}
	if _, err := IDXLabelsPath(filepath.Join(dir, "x-images-idx3-ubyte")); !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), "x-labels-idx1-ubyte") {
		t.Errorf("missing labels: %v", err)
	}
}

func TestIDXErrors(t *testing.T) {
	good := idxImages(3, 2, 2, tinyPixels)
	badMagic := slices.Clone(good)
	badMagic[3] = 0x01
	tests := []struct {
		name     string
		img, lab []byte
		opt      Options
		want     string
		is       error
	}{
		{"bad images magic", badMagic, idxLabels(1, 2, 3), Options{Classes: 10}, "IDX magic 0x00000801, want 0x00000803", ErrFormat},
		{"labels given as images", idxLabels(1, 2, 3), idxLabels(1, 2, 3), Options{Classes: 10}, "IDX magic 0x00000801, want 0x00000803", ErrFormat},
		{"count mismatch", good, idxLabels(1, 2), Options{Classes: 10}, "has 3 images but", ErrFormat},
		{"truncated header", good[:10], idxLabels(1, 2, 3), Options{Classes: 10}, "truncated IDX header", ErrFormat},
		{"truncated pixels", good[:len(good)-2], idxLabels(1, 2, 3), Options{Classes: 10}, "truncated at record 3 of 3", ErrFormat},
		{"truncated labels", good, idxLabels(1, 2, 3)[:10], Options{Classes: 10}, "truncated at record 3 of 3", ErrFormat},
		{"trailing data", append(slices.Clone(good), 0), idxLabels(1, 2, 3), Options{Classes: 10}, "data after the last of 3 records", ErrFormat},
		{"zero-size images", idxImages(0, 0, 2, nil), idxLabels(), Options{Classes: 10}, "images of 0x2 pixels", ErrFormat},
		{"dim too small", good, idxLabels(1, 2, 3), Options{Classes: 10, Dim: 3}, "images have 4 pixels but Dim is 3", ErrOptions},
		{"binary labels", good, idxLabels(1, 0, 2), Options{}, `:3: bad token "2": binary label must be 0, 1, -1 or +1`, ErrBadLine},
		{"class out of range", good, idxLabels(1, 10, 2), Options{Classes: 10}, `:2: bad token "10": class 10 (label 10 - label base 0) is outside 0..9; labels 1..10 need --label-base 1`, ErrBadLine},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			img := writeBytes(t, filepath.Join(dir, "train-images-idx3-ubyte"), tc.img)
			lab := writeBytes(t, filepath.Join(dir, "train-labels-idx1-ubyte"), tc.lab)
			src, err := Open([]string{img}, tc.opt)
			if err == nil {
				_, err = readAll(src, 10)
				src.Close()
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) ||
				(!strings.Contains(err.Error(), img) && !strings.Contains(err.Error(), lab)) {
				t.Fatalf("error %v, want %v containing %q and naming a file", err, tc.is, tc.want)
			}
		})
	}
}

func TestIDXSkipBad(t *testing.T) {
	dir := t.TempDir()
	img := writeBytes(t, filepath.Join(dir, "a-images-idx3-ubyte"), idxImages(3, 2, 2, tinyPixels))
	writeBytes(t, filepath.Join(dir, "a-labels-idx1-ubyte"), idxLabels(1, 5, 0))
	src, err := Open([]string{img}, Options{SkipBad: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := readAll(src, 10)
	if err != nil || !slices.Equal(b.Labels, []float32{1, 0}) || src.Stats().BadLines != 1 {
		t.Fatalf("labels %v bad %d err %v", b.Labels, src.Stats().BadLines, err)
	}
}

const fashionDir = "/usr/share/datasets/fashion-mnist"

// The real Fashion-MNIST files (Debian package dataset-fashion-mnist).
func TestFashionMNIST(t *testing.T) {
	if _, err := os.Stat(filepath.Join(fashionDir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST not installed (%v); install the Debian package dataset-fashion-mnist", err)
	}
	if testing.Short() {
		t.Skip("reads 70000 images; skipped with -short")
	}
	for _, tc := range []struct {
		file string
		rows int64
	}{{"train-images-idx3-ubyte.gz", 60000}, {"t10k-images-idx3-ubyte.gz", 10000}} {
		res, err := Scan([]string{filepath.Join(fashionDir, tc.file)}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Rows != tc.rows || res.MaxIndex < 700 || res.MaxIndex > 783 {
			t.Errorf("%s: %d rows, max index %d; want %d rows within 784 pixels", tc.file, res.Rows, res.MaxIndex, tc.rows)
		}
		// Fashion-MNIST is balanced: every class has a tenth of the rows.
		if classes, base, ok := res.Classes(); !ok || classes != 10 || base != 0 || len(res.Labels) != 10 {
			t.Errorf("%s: classes %d base %d ok %v", tc.file, classes, base, ok)
		}
		for l, n := range res.Labels {
			if n != tc.rows/10 {
				t.Errorf("%s: label %v has %d rows, want %d", tc.file, l, n, tc.rows/10)
			}
		}
		src, err := Open([]string{filepath.Join(fashionDir, tc.file)}, Options{Classes: 10, Dim: 784})
		if err != nil {
			t.Fatal(err)
		}
		b, err := readAll(src, 1000)
		if err != nil || int64(b.Rows()) != tc.rows {
			t.Fatalf("%s: %d rows, %v", tc.file, b.Rows(), err)
		}
		if err := checkCSR(&b, 784, 10); err != nil {
			t.Fatal(err)
		}
		src.Close()
	}
}

// IDXCount reads the number of images from an IDX file's header, plain or
// gzip'd, and refuses a file that is not IDX images.
func TestIDXCount(t *testing.T) {
	dir := t.TempDir()
	plain := writeBytes(t, filepath.Join(dir, "train-images-idx3-ubyte"), idxImages(3, 2, 2, tinyPixels))
	if n, err := IDXCount(plain); err != nil || n != 3 {
		t.Errorf("plain: %d, %v; want 3", n, err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(idxImages(3, 2, 2, tinyPixels))
	zw.Close()
	gz := writeBytes(t, filepath.Join(dir, "train-images-idx3-ubyte.gz"), buf.Bytes())
	if n, err := IDXCount(gz); err != nil || n != 3 {
		t.Errorf("gzip: %d, %v; want 3", n, err)
	}
	labels := writeBytes(t, filepath.Join(dir, "train-labels-idx1-ubyte"), idxLabels(1, 2, 3))
	if _, err := IDXCount(labels); err == nil {
		t.Errorf("a labels file counted as images")
	}
}
