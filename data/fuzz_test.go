package data

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// Fuzz targets: a reader never panics, every row it accepts keeps the CSR
// invariants, and a failure is one of the package's errors. Seed corpora
// live in testdata/fuzz/<Name>/; run e.g.
//
//	go test ./data -run '^$' -fuzz FuzzLibSVM -fuzztime 30s

// fuzzOptions derives reading options from a mode byte.
func fuzzOptions(mode uint8, format Format) Options {
	opt := Options{
		Format:    format,
		ZeroBased: mode&1 != 0,
		SkipBad:   mode&2 != 0,
	}
	if mode&4 != 0 {
		opt.Classes, opt.LabelBase = 3, int(mode>>6)-1
	}
	if mode&8 != 0 || format == FormatCriteo || format == FormatVW {
		opt.Dim = 50
	}
	if format == FormatVW && mode&128 != 0 {
		opt.Interactions = []string{"ab", "aa", "abc"}
	}
	if mode&16 != 0 {
		opt.BufferSize = 16 // lines longer than the buffer
	}
	if mode&32 != 0 {
		opt.Part, opt.Parts = 2, 3
	}
	return opt
}

// fuzzRead reads every row of the files and checks what it gets.
func fuzzRead(t *testing.T, patterns []string, opt Options) (Batch, error) {
	src, err := Open(patterns, opt)
	if err != nil {
		checkErr(t, err)
		return Batch{}, err
	}
	defer src.Close()
	b, err := readAll(src, 3)
	if err != nil {
		checkErr(t, err)
	}
	if cerr := checkCSR(&b, opt.Dim, opt.Classes); cerr != nil {
		t.Fatalf("accepted rows break CSR invariants: %v", cerr)
	}
	if st := src.Stats(); err == nil && (st.Rows != int64(b.Rows()) || st.NNZ != int64(b.NNZ())) {
		t.Fatalf("stats %+v for %d rows, %d nonzeros", st, b.Rows(), b.NNZ())
	}
	return b, err
}

func checkErr(t *testing.T, err error) {
	for _, e := range []error{ErrBadLine, ErrFormat, ErrOptions, ErrCorrupt, ErrNoMatch} {
		if errors.Is(err, e) {
			return
		}
	}
	t.Fatalf("error %v wraps no package sentinel", err)
}

func FuzzLibSVM(f *testing.F) {
	f.Add([]byte("1 1:1 3:0.5\n-1 2:1 # c\n"), uint8(0))
	f.Add([]byte("2 1:1\n0 1:1 1:2\n"), uint8(6))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		p := filepath.Join(dir, "f.svm")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		opt := fuzzOptions(mode, FormatLibSVM)
		b, err := fuzzRead(t, []string{p}, opt)
		// The buffer size never changes the rows.
		opt.BufferSize = 0
		if mode&16 != 0 {
			b2, err2 := fuzzRead(t, []string{p}, opt)
			if (err == nil) != (err2 == nil) || !sameBatch(&b, &b2) {
				t.Fatalf("a 16-byte buffer reads differently: %v vs %v", err, err2)
			}
		}
	})
}

func FuzzCriteo(f *testing.F) {
	f.Add([]byte(criteoLine("1", []string{"5", "-1", ""}, []string{"68fd1e64"})+"\n"), uint8(0))
	f.Add([]byte("1\t2\n"), uint8(2))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		p := filepath.Join(dir, "f.tsv")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		fuzzRead(t, []string{p}, fuzzOptions(mode, FormatCriteo))
	})
}

func FuzzVW(f *testing.F) {
	f.Add([]byte("1 2 'tag|a x y:2 |b z:-1 w |c\n-1 |a:3 12 :4 c:str\n"), uint8(0))
	f.Add([]byte("1|a x\n1 1 1 1 |a\n|:2\n"), uint8(2))
	f.Add([]byte("-1 0.5 |a x x x:-3 |b y |c z\n"), uint8(128))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		p := filepath.Join(dir, "f.vw")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := fuzzRead(t, []string{p}, fuzzOptions(mode, FormatVW))
		if err == nil && len(b.Weights) != 0 && len(b.Weights) != b.Rows() {
			t.Fatalf("%d weights for %d rows", len(b.Weights), b.Rows())
		}
		for _, w := range b.Weights {
			if !(w >= 0) || w > math.MaxFloat32 {
				t.Fatalf("weight %v", w)
			}
		}
	})
}

func FuzzIDX(f *testing.F) {
	f.Add(idxImages(3, 2, 2, tinyPixels), idxLabels(1, 0, 2), uint8(4))
	f.Add(idxImages(3, 2, 2, tinyPixels[:5]), idxLabels(1, 0), uint8(0))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, img, lab []byte, mode uint8) {
		ip := filepath.Join(dir, "f-images-idx3-ubyte")
		if err := os.WriteFile(ip, img, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "f-labels-idx1-ubyte"), lab, 0o644); err != nil {
			t.Fatal(err)
		}
		fuzzRead(t, []string{ip}, fuzzOptions(mode, FormatAuto))
	})
}

func FuzzCache(f *testing.F) {
	dir := f.TempDir()
	for i, text := range []string{"1 1:1 3:0.5\n0 2:1\n", "1 1:1 9:1\n0\n", "2 1:2\n0 4:1\n"} {
		in := filepath.Join(dir, "in.svm")
		os.WriteFile(in, []byte(text), 0o644)
		cache := filepath.Join(dir, "seed.gtc")
		opt := Options{}
		if i == 2 {
			opt.Classes = 3
		}
		src, err := OpenCached([]string{in}, opt, cache)
		if err != nil {
			f.Fatal(err)
		}
		readAll(src, 10)
		src.Close()
		b, err := os.ReadFile(cache)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(4*(i/2)))
	}
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		p := filepath.Join(dir, "f.gtc")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		opt := fuzzOptions(mode, FormatCache)
		opt.ZeroBased = false
		fuzzRead(t, []string{p}, opt)
	})
}
