package data

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// listDir returns the names in dir.
func listDir(t *testing.T, dir string) []string {
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// readCached opens with a cache and reads every row.
func readCached(t *testing.T, patterns []string, opt Options, cache string) Batch {
	t.Helper()
	src, err := OpenCached(patterns, opt, cache)
	if err != nil {
		t.Fatal(err)
	}
	b, err := readAll(src, 5)
	if err != nil {
		t.Fatal(err)
	}
	var again Batch
	if n, err := src.Next(&again, 5); n != 0 || err != io.EOF {
		t.Fatalf("Next after the end: %d, %v; want 0, io.EOF", n, err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCacheRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		opt     Options
	}{
		{"values", "", Options{}},
		{"one-hot", "1 3:1 70000:1\n0 1:1\n1\n0 5:1 6:1 4294967295:1\n", Options{}},
		{"multiclass", "3 1:0.25\n0 2:-1\n2\n", Options{Classes: 4}},
		{"part", "", Options{Part: 2, Parts: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var inputs []string
			if tc.content == "" {
				inputs = numbered(t, dir, []string{"a.svm", "b.svm"}, 3000)
			} else {
				inputs = []string{writeFile(t, dir, "a.svm", tc.content)}
			}
			cache := filepath.Join(dir, "train.gtc")
			want := openAll(t, inputs, tc.opt)
			if err := CheckCache(inputs, tc.opt, cache); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("CheckCache before building: %v", err)
			}
			built := readCached(t, inputs, tc.opt, cache)
			if names := listDir(t, dir); !slices.Contains(names, "train.gtc") {
				t.Fatalf("no cache after the first read: %v", names)
			}
			if !sameBatch(&built, &want) {
				t.Fatal("rows read while building the cache differ from a direct read")
			}
			if err := CheckCache(inputs, tc.opt, cache); err != nil {
				t.Fatalf("CheckCache after building: %v", err)
			}
			src, err := OpenCached(inputs, tc.opt, cache)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := src.(*multiSource); !ok || src.(*multiSource).inputs[0].format != FormatCache {
				t.Fatalf("second open did not read the cache")
			}
			cached, err := readAll(src, 5)
			if err != nil || !sameBatch(&cached, &want) {
				t.Fatalf("rows from the cache differ (%v)", err)
			}
			st, _ := os.Stat(cache)
			if got := src.Stats(); got.Rows != int64(want.Rows()) || got.NNZ != int64(want.NNZ()) || got.Bytes != st.Size() {
				t.Errorf("stats %+v, want %d rows, %d nnz, %d bytes", got, want.Rows(), want.NNZ(), st.Size())
			}
			src.Close()
			// Open reads a cache file directly too.
			direct := openAll(t, []string{cache}, Options{Classes: tc.opt.Classes})
			if !sameBatch(&direct, &want) {
				t.Errorf("Open(cache) rows differ")
			}
			if names := listDir(t, dir); slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, ".tmp") }) {
				t.Errorf("temporary file left: %v", names)
			}
		})
	}
}

// One-hot rows store no values: the cache of one-hot data is smaller than
// the cache of the same indices with value 2.
func TestCacheOmitsOnes(t *testing.T) {
	dir := t.TempDir()
	ones := writeFile(t, dir, "ones.svm", strings.Repeat("1 1:1 2:1 3:1 4:1\n", 1000))
	twos := writeFile(t, dir, "twos.svm", strings.Repeat("1 1:2 2:2 3:2 4:2\n", 1000))
	readCached(t, []string{ones}, Options{}, filepath.Join(dir, "ones.gtc"))
	readCached(t, []string{twos}, Options{}, filepath.Join(dir, "twos.gtc"))
	a, _ := os.Stat(filepath.Join(dir, "ones.gtc"))
	b, _ := os.Stat(filepath.Join(dir, "twos.gtc"))
	if b.Size()-a.Size() != 4*4000 {
		t.Fatalf("cache sizes %d and %d: want the values (16000 bytes) only in the second", a.Size(), b.Size())
	}
}

func TestCacheStale(t *testing.T) {
	dir := t.TempDir()
	in := writeFile(t, dir, "a.svm", "1 1:1\n0 2:1\n")
	cache := filepath.Join(dir, "a.gtc")
	readCached(t, []string{in}, Options{}, cache)
	if err := CheckCache([]string{in}, Options{}, cache); err != nil {
		t.Fatal(err)
	}
	// Another option that shapes rows makes it stale.
	for _, opt := range []Options{{Dim: 5}, {ZeroBased: true}, {Part: 1, Parts: 2}, {Classes: 3}, {Classes: 3, LabelBase: 1}, {MaxValue: 10}} {
		if err := CheckCache([]string{in}, opt, cache); !errors.Is(err, ErrStaleCache) {
			t.Errorf("%+v: %v, want stale", opt, err)
		}
	}
	// Options that do not shape rows keep it.
	if err := CheckCache([]string{in}, Options{BufferSize: 10}, cache); err != nil {
		t.Errorf("BufferSize made the cache stale: %v", err)
	}
	// Touching the input makes it stale; OpenCached rebuilds from the new
	// content.
	writeFile(t, dir, "a.svm", "0 3:1\n")
	future := time.Now().Add(time.Hour)
	os.Chtimes(in, future, future)
	if err := CheckCache([]string{in}, Options{}, cache); !errors.Is(err, ErrStaleCache) {
		t.Fatalf("after touching the input: %v", err)
	}
	b := readCached(t, []string{in}, Options{}, cache)
	if got := rows(&b); len(got) != 1 || !slices.Equal(got[0].idx, []uint32{2}) {
		t.Fatalf("rebuilt rows %+v", got)
	}
	if err := CheckCache([]string{in}, Options{}, cache); err != nil {
		t.Fatalf("after the rebuild: %v", err)
	}
	// Other input files make it stale.
	in2 := writeFile(t, dir, "b.svm", "0 3:1\n")
	if err := CheckCache([]string{in, in2}, Options{}, cache); !errors.Is(err, ErrStaleCache) {
		t.Fatalf("more inputs: %v", err)
	}
}

func TestCacheCorrupt(t *testing.T) {
	dir := t.TempDir()
	in := numbered(t, dir, []string{"a.svm"}, 50)[0]
	cache := filepath.Join(dir, "a.gtc")
	readCached(t, []string{in}, Options{}, cache)
	good, _ := os.ReadFile(cache)
	m, err := readCacheMeta(fileReaderAt(good), int64(len(good)), cache)
	if err != nil {
		t.Fatal(err)
	}
	// Flip one byte inside the first block: reading fails with ErrCorrupt
	// naming the file, even though header and trailer are fine.
	bad := slices.Clone(good)
	bad[m.dataStart+cacheBlockHeader+3] ^= 0x40
	os.WriteFile(cache, bad, 0o644)
	if err := CheckCache([]string{in}, Options{}, cache); err != nil {
		t.Fatalf("CheckCache does not read blocks, yet: %v", err)
	}
	src, err := OpenCached([]string{in}, Options{}, cache)
	if err != nil {
		t.Fatal(err)
	}
	_, err = readAll(src, 10)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), cache) || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("corrupt block: %v", err)
	}
	src.Close()
	// A corrupt header or a missing trailer: CheckCache says why and
	// OpenCached rebuilds.
	for name, mutate := range map[string]func([]byte) []byte{
		"header":    func(b []byte) []byte { b[20] ^= 1; return b },
		"truncated": func(b []byte) []byte { return b[:len(b)-5] },
		"magic":     func(b []byte) []byte { b[0] = 'X'; return b },
	} {
		os.WriteFile(cache, mutate(slices.Clone(good)), 0o644)
		if err := CheckCache([]string{in}, Options{}, cache); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), cache) {
			t.Errorf("%s: CheckCache %v", name, err)
		}
		if _, err := readAll(mustOpen(t, []string{cache}, Options{}), 10); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: reading directly: %v", name, err)
		}
		readCached(t, []string{in}, Options{}, cache)
		if now, _ := os.ReadFile(cache); !slices.Equal(now, good) {
			t.Errorf("%s: the rebuilt cache differs from the original", name)
		}
	}
}

func mustOpen(t *testing.T, patterns []string, opt Options) Source {
	src, err := Open(patterns, opt)
	if err != nil {
		return errSource{err}
	}
	return src
}

type errSource struct{ err error }

func (e errSource) Next(b *Batch, max int) (int, error) { b.Reset(); return 0, e.err }
func (e errSource) Stats() Stats                        { return Stats{} }
func (e errSource) Close() error                        { return nil }

type fileReaderAt []byte

func (f fileReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(f)) {
		return 0, io.EOF
	}
	n := copy(p, f[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Close before the end, or a bad line, leaves no cache and no temporary
// file behind.
func TestCacheNotWrittenWhenUnfinished(t *testing.T) {
	dir := t.TempDir()
	in := numbered(t, dir, []string{"a.svm"}, 100)[0]
	bad := writeFile(t, dir, "bad.svm", "1 1:1\n1 x\n")
	cache := filepath.Join(dir, "c.gtc")
	src, err := OpenCached([]string{in}, Options{}, cache)
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	src.Next(&b, 10)
	src.Close()
	src, err = OpenCached([]string{bad}, Options{}, cache)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readAll(src, 10); !errors.Is(err, ErrBadLine) {
		t.Fatalf("bad line: %v", err)
	}
	src.Close()
	if names := listDir(t, dir); !slices.Equal(names, []string{"a.svm", "bad.svm"}) {
		t.Fatalf("directory holds %v, want only the inputs", names)
	}
}

// A cache built while skipping bad lines is not used when bad lines must
// fail.
func TestCacheSkipBad(t *testing.T) {
	dir := t.TempDir()
	in := writeFile(t, dir, "a.svm", "1 1:1\n1 x\n0 2:1\n")
	cache := filepath.Join(dir, "c.gtc")
	b := readCached(t, []string{in}, Options{SkipBad: true}, cache)
	if b.Rows() != 2 {
		t.Fatalf("%d rows", b.Rows())
	}
	src, _ := OpenCached([]string{in}, Options{SkipBad: true}, cache)
	readAll(src, 10)
	if st := src.Stats(); st.BadLines != 1 || st.Rows != 2 {
		t.Errorf("stats from the cache %+v, want the bad line counted", st)
	}
	src.Close()
	if err := CheckCache([]string{in}, Options{}, cache); !errors.Is(err, ErrStaleCache) {
		t.Errorf("without SkipBad: %v", err)
	}
}

func TestCacheOptionChecks(t *testing.T) {
	dir := t.TempDir()
	in := writeFile(t, dir, "a.svm", "1 1:1\n")
	cache := filepath.Join(dir, "c.gtc")
	readCached(t, []string{in}, Options{Dim: 10}, cache)
	if _, err := Open([]string{cache}, Options{Classes: 3}); !errors.Is(err, ErrOptions) {
		t.Errorf("classes mismatch: %v", err)
	}
	if _, err := Open([]string{cache}, Options{Dim: 20}); !errors.Is(err, ErrOptions) {
		t.Errorf("dim mismatch: %v", err)
	}
	if _, err := OpenCached([]string{filepath.Join(dir, "*")}, Options{Format: FormatLibSVM}, cache); !errors.Is(err, ErrOptions) {
		t.Errorf("cache among the inputs: %v", err)
	}
}

// Reading a whole-set cache with Part/Parts splits its rows like the text.
func TestCachePartitionOnRead(t *testing.T) {
	dir := t.TempDir()
	in := numbered(t, dir, []string{"a.svm"}, 20)
	cache := filepath.Join(dir, "all.gtc")
	readCached(t, in, Options{}, cache)
	for part := 1; part <= 3; part++ {
		opt := Options{Part: part, Parts: 3}
		fromCache := openAll(t, []string{cache}, opt)
		fromText := openAll(t, in, opt)
		if !sameBatch(&fromCache, &fromText) || fromText.Rows() == 0 {
			t.Errorf("part %d of 3: cache and text differ", part)
		}
	}
}
