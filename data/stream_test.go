package data

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// resetStreams forgets the streams met so far, as a new process would.
func resetStreams() {
	streamsMu.Lock()
	streams = map[string]*onceStream{}
	streamsMu.Unlock()
}

// feed writes content into w in chunks of chunk bytes (cutting lines
// anywhere), then closes it.
func feed(w *os.File, content []byte, chunk int) {
	for len(content) > 0 {
		n := min(chunk, len(content))
		if _, err := w.Write(content[:n]); err != nil {
			break
		}
		content = content[n:]
	}
	w.Close()
}

// withStdin makes a pipe the process's standard input (file descriptor
// 0, so "-", /dev/stdin and os.Stdin all read it) while fn runs, with
// content written into it by write.
func withStdin(t *testing.T, write func(w *os.File), fn func()) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup3(int(r.Fd()), 0, 0); err != nil {
		t.Fatal(err)
	}
	resetStreams()
	done := make(chan struct{})
	go func() { write(w); close(done) }()
	defer func() {
		syscall.Dup3(saved, 0, 0)
		syscall.Close(saved)
		r.Close()
		<-done
		resetStreams()
	}()
	fn()
}

// streamCases are data sets in every text format, over 64 KiB each so
// that detection's peek and the reads overlap.
func streamCases(t *testing.T, dir string) []struct {
	name    string
	path    string
	content []byte
	opt     Options
} {
	var svm, tsv, vw strings.Builder
	svm.WriteString("# a comment line first\n")
	for i := range 3000 {
		fmt.Fprintf(&svm, "%d %d:1 %d:%g\n", i%2, i%97+1, 100+i%13, float64(i%7)/4)
		ints := make([]string, 13)
		cats := make([]string, 26)
		ints[i%13] = fmt.Sprint(i % 50)
		cats[i%26] = fmt.Sprintf("%08x", i*2654435761%(1<<32))
		fmt.Fprintln(&tsv, criteoLine(fmt.Sprint(i%2), ints, cats))
		w := ""
		if i%4 == 0 {
			w = " 2.5"
		}
		fmt.Fprintf(&vw, "%d%s 'r%d|user u%d age:%d |ad a%d\n", 2*(i%2)-1, w, i, i%31, i%60, i%17)
	}
	var cases []struct {
		name    string
		path    string
		content []byte
		opt     Options
	}
	add := func(name, file string, content []byte, opt Options) {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name    string
			path    string
			content []byte
			opt     Options
		}{name, p, content, opt})
	}
	add("libsvm", "d.svm", []byte(svm.String()), Options{})
	for _, comp := range []string{"gz", "zst"} {
		p := filepath.Join(dir, "d.svm."+comp)
		compressTo(t, p, comp, []byte(svm.String()))
		b, _ := os.ReadFile(p)
		add("libsvm."+comp, "d.svm."+comp, b, Options{})
	}
	add("criteo", "d.tsv", []byte(tsv.String()), Options{Dim: 1 << 20})
	add("criteo with interactions", "d2.tsv", []byte(tsv.String()), Options{Dim: 1 << 20, Interactions: []string{"aA"}})
	add("vw", "d.vw", []byte(vw.String()), Options{Dim: 1 << 18, Interactions: []string{"ua"}})
	return cases
}

// Data piped into "-" (standard input), /dev/stdin or a named pipe reads
// as the same data from its file does: the same rows, in the same order,
// with the same weights, their count included, for libsvm, gzip and zstd
// libsvm, Criteo TSV and VW; format detection peeks without consuming, so
// no row is lost and no fragment of a line becomes a row, however the
// writer cuts the stream (TestStreamsReadLikeFiles).
func TestStreamsReadLikeFiles(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range streamCases(t, dir) {
		want := openAll(t, []string{tc.path}, tc.opt)
		if want.Rows() != 3000 {
			t.Fatalf("%s: %d rows in the file, want 3000", tc.name, want.Rows())
		}
		check := func(how string, got Batch, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s through %s: %v", tc.name, how, err)
			}
			if got.Rows() != want.Rows() || !sameBatch(&got, &want) || !slices.Equal(got.Weights, want.Weights) {
				t.Fatalf("%s through %s: %d rows differ from the file's %d", tc.name, how, got.Rows(), want.Rows())
			}
		}
		for _, name := range []string{Stdin, "/dev/stdin"} {
			for _, chunk := range []int{1, 4093, 1 << 16} {
				if chunk == 1 && tc.name != "vw" && tc.name != "libsvm.gz" {
					continue // byte by byte is slow; two formats show it
				}
				how := fmt.Sprintf("%s written %d bytes at a time", name, chunk)
				withStdin(t, func(w *os.File) { feed(w, tc.content, chunk) }, func() {
					if f, err := DetectFormat(name); err != nil || (f == FormatCriteo) != strings.HasPrefix(tc.name, "criteo") {
						t.Fatalf("%s: DetectFormat(%s) = %v, %v", tc.name, name, f, err)
					}
					src, err := Open([]string{name}, tc.opt)
					if err != nil {
						t.Fatalf("%s: %v", how, err)
					}
					got, err := readAll(src, 100)
					src.Close()
					check(how, got, err)
					if want := displayName(name); got.Span.First.File != want {
						t.Errorf("%s: rows placed in %q, want %q", how, got.Span.First.File, want)
					}
				})
			}
		}
		fifo := filepath.Join(dir, "fifo")
		os.Remove(fifo)
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		go func() {
			w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err == nil {
				feed(w, tc.content, 4093)
			}
		}()
		src, err := Open([]string{fifo}, tc.opt)
		if err != nil {
			t.Fatalf("%s through a named pipe: %v", tc.name, err)
		}
		got, err := readAll(src, 100)
		src.Close()
		check("a named pipe", got, err)
	}
}

// Detection waits for the first line, not for a buffer's worth: a
// producer that writes one line and waits for the reader gets its row.
func TestStreamDetectionWaitsForOneLine(t *testing.T) {
	release := make(chan struct{})
	withStdin(t, func(w *os.File) {
		w.Write([]byte("1 |a x\n"))
		<-release
		w.Write([]byte("-1 |a y\n"))
		w.Close()
	}, func() {
		opened := make(chan error, 1)
		var src Source
		go func() {
			var err error
			src, err = Open([]string{Stdin}, Options{Dim: 1 << 10})
			opened <- err
		}()
		select {
		case err := <-opened:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			close(release)
			t.Fatal("Open waited for more than the first line")
		}
		var b Batch
		n, err := src.Next(&b, 1)
		if n != 1 || err != nil || b.Labels[0] != 1 {
			t.Fatalf("first row: %d, %v, %v", n, err, b.Labels)
		}
		close(release)
		got, err := readAll(src, 10)
		if err != nil || got.Rows() != 1 || got.Labels[0] != 0 {
			t.Fatalf("rest: %d rows, %v", got.Rows(), err)
		}
		src.Close()
	})
}

// Standard input is read once: a second read is an error that says so;
// after Spool it reads any number of times and errors still name "stdin".
func TestStdinOnceAndSpool(t *testing.T) {
	content := []byte("1 1:1\n0 2:1\n1 3:x\n")
	withStdin(t, func(w *os.File) { feed(w, content, 5) }, func() {
		src, err := Open([]string{Stdin}, Options{SkipBad: true})
		if err != nil {
			t.Fatal(err)
		}
		if b, err := readAll(src, 10); err != nil || b.Rows() != 2 {
			t.Fatalf("%d rows, %v", b.Rows(), err)
		}
		src.Close()
		if !IsStream(Stdin) {
			t.Error("IsStream(-) is false for a pipe")
		}
		_, err = Open([]string{Stdin}, Options{})
		if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "stdin can be read only once") {
			t.Errorf("second read: %v", err)
		}
		if _, err := Open([]string{Stdin, "x.svm"}, Options{}); err == nil || !strings.Contains(err.Error(), `"-"`) {
			t.Errorf("- with another input: %v, want an error naming \"-\"", err)
		}
	})
	withStdin(t, func(w *os.File) { feed(w, content, 5) }, func() {
		if _, err := DetectFormat(Stdin); err != nil { // a peek before the copy
			t.Fatal(err)
		}
		n, remove, err := Spool(Stdin, t.TempDir())
		if err != nil || n != int64(len(content)) {
			t.Fatalf("Spool: %d bytes, %v", n, err)
		}
		defer remove()
		if IsStream(Stdin) {
			t.Error("IsStream(-) after Spool")
		}
		for range 2 {
			src, err := Open([]string{Stdin}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = readAll(src, 10)
			src.Close()
			var le *LineError
			if !errors.As(err, &le) || le.File != "stdin" || le.Line != 3 {
				t.Fatalf("error %v, want one at stdin:3", err)
			}
		}
		sr, err := Scan([]string{Stdin}, Options{SkipBad: true})
		if err != nil || sr.Rows != 2 {
			t.Fatalf("Scan after Spool: %d rows, %v", sr.Rows, err)
		}
	})
}

// With a cache, standard input is parsed once: later epochs of the same
// run read the cache (as VW's cache of standard input), a later run
// never takes an earlier run's cache for its standard input.
func TestStdinWithCache(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "in.gtc")
	content := []byte("1 2 |a x\n-1 |a y |b z\n")
	withStdin(t, func(w *os.File) { feed(w, content, 3) }, func() {
		opt := Options{Dim: 1 << 10}
		first := readCached(t, []string{Stdin}, opt, cache)
		second := readCached(t, []string{Stdin}, opt, cache) // from the cache: stdin is spent
		if first.Rows() != 2 || !sameBatch(&first, &second) || !slices.Equal(second.Weights, []float32{2, 1}) {
			t.Fatalf("epochs differ: %v / %v", rows(&first), rows(&second))
		}
	})
	withStdin(t, func(w *os.File) { feed(w, []byte("1 |a q\n"), 3) }, func() {
		b := readCached(t, []string{Stdin}, Options{Dim: 1 << 10}, cache)
		if b.Rows() != 1 {
			t.Fatalf("a new run read %d rows: the old cache was taken for its standard input", b.Rows())
		}
	})
}

// CSV is refused as a format gossiptrain does not read, naming the file,
// whether its name or its first line says so, on standard input too, and
// when --format libsvm was forced on it.
func TestCSVRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, content string }{
		{"a.csv", "1 1:1\n"},
		{"b.csv.gz", ""},
		{"header.txt", "label,age,income\n1,30,2000\n"},
		{"numbers.data", "1,0.5,3\n0,1.5,2\n"},
		{"semicolons-and-commas.data", "0.5, 1.5, 2\n"},
	} {
		p := writeFile(t, dir, tc.name, tc.content)
		_, err := Open([]string{p}, Options{})
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "CSV") || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want ErrFormat naming CSV and the file", tc.name, err)
		}
	}
	p := writeFile(t, dir, "forced.svm", "1,0.5,3\n")
	src, err := Open([]string{p}, Options{Format: FormatLibSVM})
	if err == nil {
		_, err = readAll(src, 10)
	}
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "CSV") || !strings.Contains(err.Error(), p) {
		t.Errorf("CSV read as libsvm: %v, want ErrFormat naming CSV and the file", err)
	}
	withStdin(t, func(w *os.File) { feed(w, []byte("y,x1,x2\n1,2,3\n"), 4) }, func() {
		if _, err := Open([]string{Stdin}, Options{}); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "stdin looks like CSV") {
			t.Errorf("CSV on stdin: %v", err)
		}
	})
	if _, err := ParseFormat("csv"); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("--format csv: %v", err)
	}
}

// Detection by content: VW lines, Criteo lines without labels, gzip and
// zstd without a suffix, IDX images without their name, a model file
// given as data, and a first line no format can be told from.
func TestDetectFormatByContent(t *testing.T) {
	dir := t.TempDir()
	criteo39 := strings.Repeat("\t5", 12) + "5" + strings.Repeat("\tab", 26) + "\n"
	for _, tc := range []struct {
		name, content string
		want          Format
		err           string
	}{
		{"a.vw", "1 |a x\n", FormatVW, ""},
		{"b.txt", "\n\n|a x y\n", FormatVW, ""},
		{"c.txt", "-1 0.5 'tag|user age:3 |ad x\n", FormatVW, ""},
		{"d.svm", "1 1:1 # a|b\n", FormatLibSVM, ""},
		{"e.txt", criteo39, FormatCriteo, ""},
		{"f.bin", "GTMODEL\n\x03\x00", FormatAuto, "gossiptrain model file"},
		{"g.txt", strings.Repeat("word ", 20000), FormatAuto, "give --format"},
		{"h.txt", strings.Repeat("1:1 ", 20000), FormatLibSVM, ""},
	} {
		got, err := DetectFormat(writeFile(t, dir, tc.name, tc.content))
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, %v; want %v, %q", tc.name, got, err, tc.want, tc.err)
		}
	}
	gz := filepath.Join(dir, "nosuffix")
	compressTo(t, gz, "gz", []byte("1 |a x\n"))
	zs := filepath.Join(dir, "nosuffix2")
	compressTo(t, zs, "zst", []byte("1 2:1\n"))
	for p, want := range map[string]Format{gz: FormatVW, zs: FormatLibSVM} {
		if f, err := DetectFormat(p); f != want || err != nil {
			t.Errorf("%s: %v, %v; want %v", p, f, err, want)
		}
		b := openAll(t, []string{p}, Options{Dim: 1 << 10})
		if b.Rows() != 1 {
			t.Errorf("%s: %d rows, want 1", p, b.Rows())
		}
	}
	img := writeBytes(t, filepath.Join(dir, "pixels"), idxImages(1, 2, 2, []byte{0, 1, 2, 3}))
	if f, err := DetectFormat(img); f != FormatIDX || err != nil {
		t.Errorf("IDX images by content: %v, %v", f, err)
	}
}
