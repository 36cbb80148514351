package model

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// sample returns a softmax model with random weights (padding 0), state on
// shards 0 and 2, and meta.
func sample(t testing.TB) *Model {
	t.Helper()
	m := mustNew(t, Softmax, 37, 3, 4, OptConfig{Kind: FTRL, LR: 0.2, Beta: 1, L1: 0.5, L2: 0.125})
	rng := rand.New(rand.NewPCG(5, 6))
	for k := uint32(0); k <= 37; k++ {
		for c := range m.Row(k) {
			m.Row(k)[c] = float32(rng.NormFloat64())
		}
	}
	for _, s := range []int{0, 2} {
		m.Own(s)
		for i := range m.State[s] {
			m.State[s][i] = float32(rng.Float64())
		}
	}
	m.LabelBase, m.Steps = 1, 17
	m.Meta = map[string]string{"data": "mnist.train", "peer": "12D3Koo", "": "empty key"}
	return m
}

func encode(t testing.TB, m *Model, opt SaveOptions) []byte {
	t.Helper()
	var b bytes.Buffer
	n, err := m.Save(&b, opt)
	if err != nil || n != int64(b.Len()) {
		t.Fatalf("Save = %d, %v; wrote %d bytes", n, err, b.Len())
	}
	return b.Bytes()
}

func sameModel(t *testing.T, got, want *Model, withState bool) {
	t.Helper()
	if got.Kind != want.Kind || got.Dim != want.Dim || got.Classes != want.Classes ||
		got.LabelBase != want.LabelBase || got.Steps != want.Steps || got.Opt != want.Opt ||
		!got.Layout.Equal(want.Layout) {
		t.Fatalf("header: got %v %d %d %d %d %+v %v, want %v %d %d %d %d %+v %v",
			got.Kind, got.Dim, got.Classes, got.LabelBase, got.Steps, got.Opt, got.Layout,
			want.Kind, want.Dim, want.Classes, want.LabelBase, want.Steps, want.Opt, want.Layout)
	}
	if got.Hash() != want.Hash() || !slices.Equal(got.W, want.W) {
		t.Fatal("weights differ")
	}
	if len(got.Meta) != len(want.Meta) {
		t.Fatalf("meta %v, want %v", got.Meta, want.Meta)
	}
	for k, v := range want.Meta {
		if got.Meta[k] != v {
			t.Fatalf("meta %v, want %v", got.Meta, want.Meta)
		}
	}
	for s := range want.State {
		wantSt := want.State[s]
		if !withState {
			wantSt = nil
		}
		if (got.State[s] == nil) != (wantSt == nil) || !slices.Equal(got.State[s], wantSt) {
			t.Fatalf("state of shard %d: got %v, want %v", s, got.State[s], wantSt)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	m := sample(t)
	for _, withState := range []bool{false, true} {
		b := encode(t, m, SaveOptions{State: withState})
		got, err := Read(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("state=%v: %v", withState, err)
		}
		sameModel(t, got, m, withState)
		// Deterministic: the same model encodes to the same bytes.
		if !bytes.Equal(encode(t, got, SaveOptions{State: withState}), b) {
			t.Errorf("state=%v: re-encoding a read model gives other bytes", withState)
		}
	}
	// SGD state is empty but ownership survives.
	s := mustNew(t, Logreg, 5, 0, 2, DefaultOptConfig(SGD))
	s.Own(1)
	got, err := Read(bytes.NewReader(encode(t, s, SaveOptions{State: true})))
	if err != nil || got.Owns(0) || !got.Owns(1) {
		t.Fatalf("sgd round trip: %v, owns %v", err, got.Owned(nil))
	}
	// WriteTo is Save without state.
	var w bytes.Buffer
	if _, err := m.WriteTo(&w); err != nil || !bytes.Equal(w.Bytes(), encode(t, m, SaveOptions{})) {
		t.Errorf("WriteTo differs from Save without state (%v)", err)
	}
}

// Read consumes exactly one model, so models can follow one another on a
// stream.
func TestReadStopsAtEnd(t *testing.T) {
	m := sample(t)
	b := append(encode(t, m, SaveOptions{}), "after"...)
	r := bytes.NewReader(b)
	if _, err := Read(r); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != "after" {
		t.Errorf("left %q unread, want \"after\"", rest)
	}
}

func TestCorruptByteAnywhere(t *testing.T) {
	b := encode(t, sample(t), SaveOptions{State: true})
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x5a
		_, err := Read(bytes.NewReader(c))
		want := ErrCorrupt
		if i < len(fileMagic) {
			want = ErrNotModel
		}
		if !errors.Is(err, want) {
			t.Fatalf("byte %d of %d flipped: Read = %v, want %v", i, len(b), err, want)
		}
	}
}

func TestTruncated(t *testing.T) {
	b := encode(t, sample(t), SaveOptions{State: true})
	dir := t.TempDir()
	path := filepath.Join(dir, "model.gt")
	for n := 0; n < len(b); n++ {
		want := ErrCorrupt
		if n < len(fileMagic) {
			want = ErrNotModel
		}
		if _, err := Read(bytes.NewReader(b[:n])); !errors.Is(err, want) {
			t.Fatalf("first %d of %d bytes: Read = %v, want %v", n, len(b), err, want)
		}
		if n%97 == 0 || n > len(b)-10 {
			if err := os.WriteFile(path, b[:n], 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadFile(path)
			if !errors.Is(err, want) || !strings.HasPrefix(err.Error(), path+": ") {
				t.Fatalf("first %d of %d bytes: LoadFile = %v, want %v naming the file", n, len(b), err, want)
			}
		}
	}
	// A file with bytes after the checksum is damaged too.
	if err := os.WriteFile(path, append(bytes.Clone(b), 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(path); !errors.Is(err, ErrCorrupt) {
		t.Errorf("trailing byte: LoadFile = %v, want ErrCorrupt", err)
	}
}

func TestLoadFileMessages(t *testing.T) {
	dir := t.TempDir()
	good := encode(t, sample(t), SaveOptions{})
	newer := bytes.Clone(good)
	binary.LittleEndian.PutUint32(newer[8:], 9)
	binary.LittleEndian.PutUint32(newer[12:], ^uint32(9))
	flipped := bytes.Clone(good)
	flipped[len(flipped)-20] ^= 1
	for _, tc := range []struct {
		name string
		data []byte
		err  error
		msg  string
	}{
		{"zip.gt", []byte("PK\x03\x04 this is a zip file, really"), ErrNotModel, "zip.gt: not a gossiptrain model file"},
		{"empty.gt", nil, ErrNotModel, "empty.gt: not a gossiptrain model file"},
		{"newer.gt", newer, ErrVersion, "newer.gt: format version 9 is newer than this binary (4)"},
		{"model.gt", flipped, ErrCorrupt, "model.gt: checksum mismatch (file corrupt or truncated)"},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadFile(path)
		if !errors.Is(err, tc.err) || err.Error() != filepath.Join(dir, tc.msg) {
			t.Errorf("%s: LoadFile = %q, want %q wrapping %v", tc.name, err, filepath.Join(dir, tc.msg), tc.err)
		}
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.gt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestSaveFileLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.gt")
	m := sample(t)
	for _, withState := range []bool{true, false} { // the second save replaces the first
		if err := m.SaveFile(path, SaveOptions{State: withState}); err != nil {
			t.Fatal(err)
		}
		got, err := LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sameModel(t, got, m, withState)
	}
	onlyFile(t, dir, "model.gt")
}

// onlyFile fails unless dir holds exactly the named file: no temp files.
func onlyFile(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != name {
		t.Errorf("directory holds %q, want only %q", names, name)
	}
}

// failAfter passes k bytes through, then fails like a full disk.
type failAfter struct {
	w io.Writer
	k int
}

var errDiskFull = errors.New("no space left on device (simulated)")

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) <= f.k {
		f.k -= len(p)
		return f.w.Write(p)
	}
	n, _ := f.w.Write(p[:f.k])
	f.k = 0
	return n, errDiskFull
}

func TestSaveFileFailureKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.gt")
	old := sample(t)
	if err := old.SaveFile(path, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	m := sample(t)
	m.W[0] = 42
	full := len(encode(t, m, SaveOptions{State: true}))
	for _, k := range []int{0, 1, 19, 100, full / 2, full - 1} {
		err := m.saveFile(path, SaveOptions{State: true}, func(w io.Writer) io.Writer { return &failAfter{w, k} })
		if !errors.Is(err, errDiskFull) || !strings.Contains(err.Error(), path) {
			t.Fatalf("disk full after %d bytes: err = %v, want the write error naming %s", k, err, path)
		}
		if strings.Contains(err.Error(), ".tmp-") {
			t.Errorf("disk full after %d bytes: %q names the temporary file, gone by then", k, err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
			t.Fatalf("disk full after %d bytes: the old file changed", k)
		}
		onlyFile(t, dir, "model.gt")
	}
	// Unwritable destinations: a missing directory, a "directory" that is a
	// file, a path that is a directory (the rename fails after the write).
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		filepath.Join(dir, "missing", "model.gt"),
		filepath.Join(path, "model.gt"),
		filepath.Join(dir, "sub"),
	} {
		if err := m.SaveFile(p, SaveOptions{}); err == nil || !strings.Contains(err.Error(), p) || strings.Contains(err.Error(), ".tmp-") {
			t.Errorf("SaveFile(%s) = %v, want an error naming it and no temporary file", p, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "sub")); len(ents) != 0 {
		t.Errorf("failed save left %d files in sub/", len(ents))
	}
	if os.Geteuid() != 0 { // root ignores permissions
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		if err := m.SaveFile(filepath.Join(ro, "m.gt"), SaveOptions{}); !errors.Is(err, os.ErrPermission) {
			t.Errorf("read-only dir: %v, want a permission error", err)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatal("the old file changed")
	}
}

func TestShardExport(t *testing.T) {
	src := sample(t)
	for _, s := range []int{0, 1, 2, 3} {
		withState := src.Owns(s)
		b := src.ShardBytes(s, withState)
		dst := mustNew(t, Softmax, 37, 3, 4, src.Opt)
		if err := dst.LoadShard(s, b); err != nil {
			t.Fatalf("shard %d: %v", s, err)
		}
		lo, hi := src.Layout.ShardRange(s)
		if !slices.Equal(dst.W[lo:hi], src.W[lo:hi]) || dst.Owns(s) != withState || !slices.Equal(dst.State[s], src.State[s]) {
			t.Errorf("shard %d did not round-trip (state %v)", s, withState)
		}
		for o := range 4 {
			if o != s && dst.Owns(o) {
				t.Errorf("loading shard %d made shard %d owned", s, o)
			}
		}
	}
	b := src.ShardBytes(2, true)
	other := mustNew(t, Softmax, 37, 3, 4, DefaultOptConfig(AdaGrad))
	small := mustNew(t, Softmax, 36, 3, 4, src.Opt)
	for _, tc := range []struct {
		name string
		m    *Model
		s    int
		b    []byte
		want error
	}{
		{"wrong shard", src.Clone(), 1, b, ErrMismatch},
		{"other optimizer's state", other, 2, b, ErrMismatch},
		{"other layout", small, 2, b, ErrMismatch},
		{"flipped byte", src.Clone(), 2, func() []byte { c := bytes.Clone(b); c[40] ^= 1; return c }(), ErrCorrupt},
		{"truncated", src.Clone(), 2, b[:len(b)-3], ErrCorrupt},
		{"not an export", src.Clone(), 2, []byte("hello"), ErrCorrupt},
	} {
		before := tc.m.Hash()
		if err := tc.m.LoadShard(tc.s, tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: LoadShard = %v, want %v", tc.name, err, tc.want)
		}
		if tc.m.Hash() != before {
			t.Errorf("%s: failed LoadShard changed the model", tc.name)
		}
	}
	// Weights only: another optimizer's model can take them.
	if err := other.LoadShard(2, src.ShardBytes(2, false)); err != nil || other.Owns(2) {
		t.Errorf("weights-only export into an adagrad model: %v, owns %v", err, other.Owns(2))
	}
	mustPanic(t, "not owned", func() { src.ShardBytes(1, true) })
}

// A stream whose (checksummed) header promises a huge model fails when the
// data runs out, without first allocating the promised size.
func TestReadHugeHeaderTruncated(t *testing.T) {
	small := mustNew(t, Logreg, 8, 0, 1, DefaultOptConfig(SGD))
	b := encode(t, small, SaveOptions{})
	hlen := int(binary.LittleEndian.Uint32(b[16:]))
	end := preamble + hlen
	binary.LittleEndian.PutUint64(b[preamble+4:], 1<<32-1) // dim: 16 GiB of weights
	binary.LittleEndian.PutUint64(b[end:], xxhash.Sum64(b[:end]))
	stream := append(b[:end+8:end+8], make([]byte, 1<<20)...) // the header and 1 MiB of zeros
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Read(bytes.NewReader(stream))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read = %v, want ErrCorrupt", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 256<<20 {
		t.Errorf("Read allocated %d MiB for a 1 MiB stream", got>>20)
	}
}

// Version 3 files carry the examples trained and the input format and
// --zero-based; files of versions 1 and 2, written by earlier binaries
// (testdata, kept as they were written), still load, with the input
// unknown.
func TestFileVersionsAndInput(t *testing.T) {
	m := sample(t)
	m.Examples = 12345
	m.Input = Input{Format: "libsvm", ZeroBased: true}
	got, err := Read(bytes.NewReader(encode(t, m, SaveOptions{})))
	if err != nil {
		t.Fatal(err)
	}
	if got.Examples != 12345 || got.Input != m.Input || got.Hash() != m.Hash() {
		t.Errorf("read back examples %d input %+v hash %x; want 12345 %+v %x", got.Examples, got.Input, got.Hash(), m.Input, m.Hash())
	}
	v1, err := LoadFile("testdata/v1-logreg.gt")
	if err != nil {
		t.Fatalf("version 1 file: %v", err)
	}
	if v1.Kind != Logreg || v1.Dim != 5 || v1.Steps != 7 || v1.Row(5)[0] != 2.5 || v1.Meta["note"] != "written by format version 1" || v1.Input != (Input{}) || v1.Examples != 0 {
		t.Errorf("version 1 file read as %v dim %d steps %d bias %v meta %v input %+v", v1.Kind, v1.Dim, v1.Steps, v1.Row(5)[0], v1.Meta, v1.Input)
	}
	v2, err := LoadFile("testdata/v2-mlp.gt")
	if err != nil {
		t.Fatalf("version 2 file: %v", err)
	}
	want, _ := NewMLP(3, 2, 4, 2, DefaultOptConfig(SGD), 1)
	if v2.Kind != MLP || v2.Hidden != 4 || v2.LabelBase != 1 || v2.Steps != 3 || v2.Hash() != want.Hash() {
		t.Errorf("version 2 file read as %v hidden %d label base %d steps %d hash %x (want %x)", v2.Kind, v2.Hidden, v2.LabelBase, v2.Steps, v2.Hash(), want.Hash())
	}
}
