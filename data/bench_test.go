package data

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchSet generates a data set of rows training rows (the default
// generator: 39 one-hot features per row, 2^24 features) into a temporary
// directory.
func benchSet(b testing.TB, format Format, compress string, rows int64) (string, GenMeta) {
	dir := b.TempDir()
	c := DefaultGenConfig()
	c.Rows, c.TestRows, c.Format, c.Compress = rows, 0, format, compress
	meta, err := Generate(dir, c, nil)
	if err != nil {
		b.Fatal(err)
	}
	return meta.Files[0], meta
}

// cycleReader repeats data forever.
type cycleReader struct {
	data []byte
	off  int
}

func (c *cycleReader) Read(p []byte) (int, error) {
	n := copy(p, c.data[c.off:])
	c.off = (c.off + n) % len(c.data)
	return n, nil
}

// passes reads every row of the files once per iteration and reports rows
// and nonzeros per second.
func passes(b *testing.B, patterns []string, opt Options, textBytes int64) {
	var batch Batch
	var rows, nnz int64
	b.ReportAllocs()
	b.SetBytes(textBytes)
	for b.Loop() {
		src, err := Open(patterns, opt)
		if err != nil {
			b.Fatal(err)
		}
		for {
			_, err := src.Next(&batch, 1000)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		rows += src.Stats().Rows
		nnz += src.Stats().NNZ
		src.Close()
	}
	s := b.Elapsed().Seconds()
	b.ReportMetric(float64(rows)/s, "rows/s")
	b.ReportMetric(float64(nnz)/s, "nnz/s")
}

func fileSize(b testing.TB, path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}

// BenchmarkLibSVM measures parsing generator output (39 one-hot features a
// line, ~390 bytes). "steady" runs the parser over an endless in-memory
// copy of the file, one 1000-row batch per op: the hot loop alone, which
// allocates nothing. "file" reads the file from disk (page cache) once per
// op, including opening it.
func BenchmarkLibSVM(b *testing.B) {
	path, meta := benchSet(b, FormatLibSVM, "", 50_000)
	content, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	bytesPerRow := float64(len(content)) / float64(meta.Rows)
	b.Run("steady", func(b *testing.B) {
		sh := &shared{opt: Options{Dim: meta.Features}, lines: newLineReader(DefaultBufferSize)}
		src := &multiSource{sh: sh, cur: newLibSVMReader(sh, &stream{name: "mem", r: &cycleReader{data: content}})}
		var batch Batch
		for range 100 {
			src.Next(&batch, 1000)
		}
		b.ReportAllocs()
		for b.Loop() {
			if n, err := src.Next(&batch, 1000); n != 1000 || err != nil {
				b.Fatal(n, err)
			}
		}
		s := b.Elapsed().Seconds()
		rows := float64(b.N) * 1000
		b.ReportMetric(rows*bytesPerRow/1e6/s, "MB/s")
		b.ReportMetric(rows/s, "rows/s")
		b.ReportMetric(rows*float64(meta.Fields)/s, "nnz/s")
	})
	b.Run("file", func(b *testing.B) {
		passes(b, []string{path}, Options{Dim: meta.Features}, int64(len(content)))
	})
}

// BenchmarkLibSVMGzip reads the same rows gzipped; MB/s counts text bytes.
func BenchmarkLibSVMGzip(b *testing.B) {
	path, meta := benchSet(b, FormatLibSVM, "gz", 50_000)
	plain, _ := benchSet(b, FormatLibSVM, "", 50_000)
	b.ReportMetric(float64(fileSize(b, path)), "gz-bytes")
	passes(b, []string{path}, Options{Dim: meta.Features}, fileSize(b, plain))
}

// BenchmarkCriteo reads generated Criteo TSV (13 integer and 26
// categorical columns), hashing into 2^24 features.
func BenchmarkCriteo(b *testing.B) {
	path, meta := benchSet(b, FormatCriteo, "", 50_000)
	passes(b, []string{path}, Options{Dim: meta.Features}, fileSize(b, path))
}

// vwSet writes rows VW lines like a click log's: an importance weight on
// every fifth, 19 string features in namespace u (user) and 20 in a (ad),
// one of them numeric, about 450 bytes a line.
func vwSet(b testing.TB, rows int) string {
	var sb strings.Builder
	for i := range rows {
		fmt.Fprintf(&sb, "%d", 2*(i%2)-1)
		if i%5 == 0 {
			sb.WriteString(" 3")
		}
		sb.WriteString(" |u")
		for f := range 19 {
			fmt.Fprintf(&sb, " u%d_%x", f, (i*(f+7)*2654435761)%(1000*(f+1)))
		}
		fmt.Fprintf(&sb, " |a price:%d.%02d", i%100, i%97)
		for f := range 19 {
			fmt.Fprintf(&sb, " a%d_%x", f, (i*(f+3)*40503)%(500*(f+1)))
		}
		sb.WriteByte('\n')
	}
	p := filepath.Join(b.TempDir(), "train.vw")
	if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkVW reads VW lines (39 features in two namespaces, hashed with
// murmur3 into 2^24 features), alone and with the quadratic interaction
// of the two namespaces (-q ua: 380 more features a row).
func BenchmarkVW(b *testing.B) {
	path := vwSet(b, 20_000)
	size := fileSize(b, path)
	b.Run("plain", func(b *testing.B) {
		passes(b, []string{path}, Options{Dim: 1 << 24}, size)
	})
	b.Run("interactions ua", func(b *testing.B) {
		passes(b, []string{path}, Options{Dim: 1 << 24, Interactions: []string{"ua"}}, size)
	})
}

// BenchmarkCriteoInteractions reads generated Criteo TSV with VW-style
// interactions of columns: I1 x C1..C3 and C1 x C2 x C3.
func BenchmarkCriteoInteractions(b *testing.B) {
	path, meta := benchSet(b, FormatCriteo, "", 50_000)
	passes(b, []string{path}, Options{Dim: meta.Features, Interactions: []string{"aA", "aB", "aC", "ABC"}}, fileSize(b, path))
}

// BenchmarkCacheRead reads the rows of BenchmarkLibSVM from a cache. MB/s
// counts the libsvm text the cache replaces, so it compares directly with
// BenchmarkLibSVM/file.
func BenchmarkCacheRead(b *testing.B) {
	path, meta := benchSet(b, FormatLibSVM, "", 50_000)
	cache := filepath.Join(b.TempDir(), "train.gtc")
	src, err := OpenCached([]string{path}, Options{Dim: meta.Features}, cache)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := readAll(src, 1000); err != nil {
		b.Fatal(err)
	}
	src.Close()
	b.ReportMetric(float64(fileSize(b, cache))/float64(meta.Rows), "cache-bytes/row")
	passes(b, []string{cache}, Options{Dim: meta.Features}, fileSize(b, path))
}

// BenchmarkGenerate writes 200k default libsvm rows per op, including the
// set-up of the planted model (about 60 ms).
func BenchmarkGenerate(b *testing.B) {
	c := DefaultGenConfig()
	c.Rows, c.TestRows = 200_000, 0
	dir := b.TempDir()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Generate(dir, c, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(c.Rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// Once a batch has grown, Next allocates nothing, whatever the format.
func TestNextAllocatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("generates data sets; skipped with -short")
	}
	dir := t.TempDir()
	svm, meta := benchSet(t, FormatLibSVM, "", 5000)
	gz, _ := benchSet(t, FormatLibSVM, "gz", 5000)
	zst, _ := benchSet(t, FormatLibSVM, "zst", 5000)
	tsv, _ := benchSet(t, FormatCriteo, "", 5000)
	pix := make([]byte, 5000*4)
	for i := range pix {
		pix[i] = byte(i * 7)
	}
	img := writeBytes(t, filepath.Join(dir, "a-images-idx3-ubyte"), idxImages(5000, 2, 2, pix))
	writeBytes(t, filepath.Join(dir, "a-labels-idx1-ubyte"), idxLabels(make([]byte, 5000)...))
	cache := filepath.Join(dir, "c.gtc")
	readCached(t, []string{svm}, Options{}, cache)
	vw := vwSet(t, 5000)
	content, _ := os.ReadFile(svm)
	weighted := writeBytes(t, filepath.Join(dir, "w.svm"), bytes.ReplaceAll(content, []byte("\n1 "), []byte("\n1:2.5 ")))
	wcache := filepath.Join(dir, "w.gtc")
	readCached(t, []string{weighted}, Options{}, wcache)
	for _, tc := range []struct {
		name string
		path string
		opt  Options
	}{
		{"libsvm", svm, Options{}},
		{"libsvm parts", svm, Options{Part: 2, Parts: 3}},
		{"gzip", gz, Options{}},
		{"zstd", zst, Options{}},
		{"criteo", tsv, Options{Dim: meta.Features}},
		{"idx", img, Options{}},
		{"cache", cache, Options{}},
		{"vw", vw, Options{Dim: 1 << 24}},
		{"vw interactions", vw, Options{Dim: 1 << 24, Interactions: []string{"ua", "aa"}}},
		{"criteo interactions", tsv, Options{Dim: meta.Features, Interactions: []string{"aA", "ABC"}}},
		{"libsvm weights", weighted, Options{}},
		{"cache weights", wcache, Options{}},
	} {
		src, err := Open([]string{tc.path}, tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		var b Batch
		for range 3 {
			src.Next(&b, 100)
		}
		allocs := testing.AllocsPerRun(10, func() {
			if n, err := src.Next(&b, 100); n != 100 || err != nil {
				t.Fatalf("%s: %d rows, %v", tc.name, n, err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per Next, want 0", tc.name, allocs)
		}
		src.Close()
	}
}
