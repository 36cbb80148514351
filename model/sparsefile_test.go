package model

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// sparseSample returns a model of 2^20 rows with a few rows set: softmax
// FTRL with L1, so some rows hold state but zero weights, a row holding
// only -0, state on shards 0 and 5 of 8.
func sparseSample(t testing.TB) *Model {
	t.Helper()
	m := mustNew(t, Softmax, 1<<20, 3, 8, OptConfig{Kind: FTRL, LR: 0.2, Beta: 1, L1: 0.05})
	m.OwnAll()
	var g Sparse
	for _, k := range []uint32{0, 5, 8, 13, 77, 4096, 1 << 19, 1<<20 - 3, m.Bias()} {
		g.Idx = append(g.Idx, k)
		g.Val = append(g.Val, float32(k%5)-2, 0.01, -float32(k%7)/3)
	}
	m.Apply(&g, 2, 0)
	for s := range m.State {
		if s != 0 && s != 5 {
			m.Disown(s)
		}
	}
	m.Row(1 << 18)[1] = float32(math.Copysign(0, -1))
	m.LabelBase, m.Steps, m.Examples = 1, 1, 2
	m.Input = Input{Format: "libsvm", ZeroBased: true, SignedLabels: true}
	m.Meta = map[string]string{"data": "sparse"}
	return m
}

// A model with few rows set writes the sparse layout (auto), which reads
// back bit for bit, from a stream and from a file, with and without state
// (rows with state and zero weights, a -0 weight); dense and sparse
// encodings of one model read back the same; and re-encoding gives the
// same bytes.
func TestSparseRoundTrip(t *testing.T) {
	m := sparseSample(t)
	dir := t.TempDir()
	for _, withState := range []bool{false, true} {
		opt := SaveOptions{State: withState}
		b := encode(t, m, opt)
		if b[preamble+2]&2 == 0 {
			t.Fatalf("state=%v: auto wrote the dense layout for %d touched rows of %d", withState, m.NonZeros(), m.Layout.Features)
		}
		got, err := Read(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("state=%v: %v", withState, err)
		}
		sameModel(t, got, m, withState)
		if got.Input != m.Input || got.Examples != 2 {
			t.Errorf("state=%v: input %+v examples %d, want %+v 2", withState, got.Input, got.Examples, m.Input)
		}
		if math.Float32bits(got.Row(1 << 18)[1]) != 1<<31 {
			t.Errorf("state=%v: the -0 weight read back as %v", withState, got.Row(1 << 18)[1])
		}
		if !bytes.Equal(encode(t, got, opt), b) {
			t.Errorf("state=%v: re-encoding a read model gives other bytes", withState)
		}
		path := filepath.Join(dir, "m.gt")
		if err := m.SaveFile(path, opt); err != nil {
			t.Fatal(err)
		}
		got, err = LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sameModel(t, got, m, withState)
		for _, enc := range []Encoding{EncodingDense, EncodingSparse} {
			opt.Encoding = enc
			got, err := Read(bytes.NewReader(encode(t, m, opt)))
			if err != nil {
				t.Fatalf("state=%v encoding %d: %v", withState, enc, err)
			}
			sameModel(t, got, m, withState)
		}
	}
}

// Auto picks the smaller layout: a few rows of 2^24 take bytes per row,
// not 64 MiB; a model with every row set (sample) stays dense.
func TestSparseFileSize(t *testing.T) {
	m := mustNew(t, Logreg, 1<<24, 0, 256, DefaultOptConfig(AdaGrad))
	m.OwnAll()
	var g Sparse
	for k := range uint32(128) {
		g.Idx = append(g.Idx, k*131071)
		g.Val = append(g.Val, 1)
	}
	m.Apply(&g, 1, 0)
	b := encode(t, m, SaveOptions{})
	dense := encode(t, m, SaveOptions{Encoding: EncodingDense})
	// Header and checksums, the row count, and 8 bytes per row.
	hdr := len(dense) - 4*m.Layout.Len()
	if want := hdr + 8 + 128*8; len(b) != want {
		t.Errorf("sparse file of 128 rows is %d bytes, want %d", len(b), want)
	}
	if len(dense) < 64<<20 {
		t.Errorf("dense file %d bytes, want the 64 MiB of weights", len(dense))
	}
	withState := encode(t, m, SaveOptions{State: true})
	if want := hdr + 256/8 + 8 + 128*12; len(withState) != want {
		t.Errorf("sparse file with adagrad state is %d bytes, want %d", len(withState), want)
	}
	s := sample(t)
	if got, want := len(encode(t, s, SaveOptions{})), len(encode(t, s, SaveOptions{Encoding: EncodingDense})); got != want {
		t.Errorf("a model with every row set: %d bytes, the dense layout %d", got, want)
	}
}

// Every byte of a sparse file is checked: a flipped byte reads as damage
// (never as another model), and so does every truncation.
func TestSparseCorruptAndTruncated(t *testing.T) {
	m := mustNew(t, Softmax, 1000, 3, 4, OptConfig{Kind: FTRL, LR: 0.2, Beta: 1, L1: 0.05})
	m.OwnAll()
	g := Sparse{Idx: []uint32{3, 4, 500, 999}, Val: []float32{1, 2, 3, -1, -2, -3, 0.5, 0, 0, 0.25, 0.5, 1}}
	m.Apply(&g, 1, 0)
	m.Disown(1)
	b := encode(t, m, SaveOptions{State: true})
	if b[preamble+2]&2 == 0 {
		t.Fatal("wrote the dense layout")
	}
	for i := len(fileMagic); i < len(b); i++ {
		c := bytes.Clone(b)
		c[i] ^= 0x5a
		if _, err := Read(bytes.NewReader(c)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d of %d flipped: Read = %v, want ErrCorrupt", i, len(b), err)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gt")
	for n := len(fileMagic); n < len(b); n++ {
		if _, err := Read(bytes.NewReader(b[:n])); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("first %d of %d bytes: Read = %v, want ErrCorrupt", n, len(b), err)
		}
		os.WriteFile(path, b[:n], 0o644)
		if _, err := LoadFile(path); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("first %d of %d bytes: LoadFile = %v, want ErrCorrupt", n, len(b), err)
		}
	}
	os.WriteFile(path, append(bytes.Clone(b), 0), 0o644)
	if _, err := LoadFile(path); !errors.Is(err, ErrCorrupt) {
		t.Errorf("trailing byte: LoadFile = %v, want ErrCorrupt", err)
	}
	// Rows a writer never produces, with a valid checksum: out of order, a
	// repeated row, an index past the model.
	// Rows in storage order: 4 and 500 (shard 0), 3 and 999 (shard 3),
	// each an index, 3 weights and 6 state floats (40 bytes).
	rowsAt := len(b) - 8 - 4*40 - 8 // the row count
	if got := binary.LittleEndian.Uint64(b[rowsAt:]); got != 4 {
		t.Fatalf("row count at %d reads %d, want 4", rowsAt, got)
	}
	first := rowsAt + 8
	for _, tc := range []struct {
		name string
		k    uint32
	}{{"out of order", 0}, {"repeated", 4}, {"past the model", 5000}} {
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint32(c[first+40:], tc.k) // row 500
		rehash(c)
		if _, err := Read(bytes.NewReader(c)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s row: Read = %v, want ErrCorrupt", tc.name, err)
		}
	}
	// The same edit to a row that stays in order is a valid file: the
	// checks above are what caught the others.
	{
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint32(c[first+40:], 600)
		rehash(c)
		if _, err := Read(bytes.NewReader(c)); err != nil {
			t.Errorf("row 500 moved to 600: %v", err)
		}
	}
}

// rehash rewrites a model file's final checksum after an edit.
func rehash(b []byte) {
	binary.LittleEndian.PutUint64(b[len(b)-8:], xxhash.Sum64(b[:len(b)-8]))
}

// Loading a sparse file writes only the rows it holds: a model of 2^24
// rows with a few set loads in a few resident pages of its 64 MiB. So does
// a dense file without state (its zero pages are not written). Each file
// is loaded by a process of its own: memory the Go heap freed earlier in
// a process is cleared (written) when it is handed out again, as a real
// eval's or predict's first model is not.
func TestLoadSparseLeavesPagesUntouched(t *testing.T) {
	if path := os.Getenv("GOSSIPTRAIN_TEST_LOAD"); path != "" {
		got, err := LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("hash %x nonzeros %d resident %d\n", got.Hash(), got.NonZeros(), residentPages(got.W))
		return
	}
	m := mustNew(t, Logreg, 1<<24, 0, 256, DefaultOptConfig(AdaGrad))
	m.OwnAll()
	g := Sparse{Idx: []uint32{3, 64, 1 << 20, 1<<24 - 1, m.Bias()}, Val: []float32{0.5, -1, 2, 0.25, 1}}
	m.Apply(&g, 1, 0)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opt  SaveOptions
	}{{"sparse", SaveOptions{}}, {"sparse with state", SaveOptions{State: true}}, {"dense", SaveOptions{Encoding: EncodingDense}}} {
		path := filepath.Join(dir, tc.name+".gt")
		if err := m.SaveFile(path, tc.opt); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestLoadSparseLeavesPagesUntouched$")
		cmd.Env = append(os.Environ(), "GOSSIPTRAIN_TEST_LOAD="+path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.name, err, out)
		}
		var hash uint64
		var nz, res int
		if _, err := fmt.Sscanf(string(out), "hash %x nonzeros %d resident %d", &hash, &nz, &res); err != nil {
			t.Fatalf("%s: %v in %q", tc.name, err, out)
		}
		if hash != m.Hash() || nz != 5 {
			t.Errorf("%s: read back hash %x nonzeros %d, want %x and 5", tc.name, hash, nz, m.Hash())
		}
		if res > 16 {
			t.Errorf("%s: %d pages of the weights resident after loading 5 rows", tc.name, res)
		} else if res < 0 {
			t.Logf("%s: residency is not known here", tc.name)
		}
	}
}

// Files of every older version load: version 3 files written by the
// binary of commit b4cbea0 (a logreg trained on Adult by its train
// command, and a softmax FTRL model with the state of two shards saved
// by its model package), as they were written.
func TestFileVersion3(t *testing.T) {
	m, err := LoadFile("testdata/v3-adult-logreg.gt")
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != Logreg || m.Dim != 127 || m.NonZeros() != 128 || m.Examples != 52098 || m.Input != (Input{Format: "libsvm"}) ||
		m.Row(m.Bias())[0] != -0.16103324 || m.Hash() != 0x6ec0afe005af0bf0 {
		t.Errorf("adult v3: %v dim %d nonzeros %d examples %d input %+v bias %v hash %x", m.Kind, m.Dim, m.NonZeros(), m.Examples, m.Input, m.Row(m.Bias()), m.Hash())
	}
	s, err := LoadFile("testdata/v3-softmax-ftrl-state.gt")
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind != Softmax || s.Dim != 40 || s.Hash() != 0x781230d3064c7087 || s.NonZeros() != 23 ||
		!slices.Equal(s.Owned(nil), []int{1, 3}) || s.State[1][6] != -1.7613454 || s.State[3][0] != 0.8629111 ||
		s.Row(3)[0] != -0.10157627 || s.Input != (Input{Format: "libsvm", ZeroBased: true}) || s.Meta["note"] != "written by format version 3" {
		t.Errorf("softmax v3: %v dim %d hash %x nonzeros %d owned %v input %+v", s.Kind, s.Dim, s.Hash(), s.NonZeros(), s.Owned(nil), s.Input)
	}
	// Written again, it is a version 4 file of the same model.
	b := encode(t, s, SaveOptions{State: true})
	if v := binary.LittleEndian.Uint32(b[8:]); v != FormatVersion {
		t.Errorf("rewritten as version %d", v)
	}
	got, err := Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	sameModel(t, got, s, true)
}

// A shard of a sparse model exports as its rows (version 2), a few bytes
// per row instead of its every slot, and loads back bit for bit, clearing
// what the shard held before; a shard with every row set still exports
// dense (version 1, what older binaries read). Rows a writer never
// produces are refused with the model unchanged.
func TestShardExportSparse(t *testing.T) {
	src := sparseSample(t)
	for s := range src.Layout.Shards {
		withState := src.Owns(s)
		b := src.ShardBytes(s, withState)
		if b[8] != shardSparse {
			t.Fatalf("shard %d: export version %d, want the sparse %d", s, b[8], shardSparse)
		}
		var rows int
		src.visitRows(s, withState, anyBits, func(uint32, []float32, []float32) { rows++ })
		if want := shardHeader + 4 + rows*(4+4*src.StateWidth(withState)) + 8; len(b) != want {
			t.Errorf("shard %d: %d bytes for %d rows, want %d", s, len(b), rows, want)
		}
		dst := mustNew(t, Softmax, 1<<20, 3, 8, src.Opt)
		dst.OwnAll()
		lo, hi := dst.Layout.ShardRange(s)
		for i := lo; i < hi; i += 997 {
			dst.W[i] = 9 // to be cleared
		}
		if err := dst.LoadShard(s, b); err != nil {
			t.Fatalf("shard %d: %v", s, err)
		}
		if dst.ShardHash(s) != src.ShardHash(s) || !slices.Equal(dst.W[lo:hi], src.W[lo:hi]) {
			t.Errorf("shard %d: weights differ after loading its export", s)
		}
		if withState && !slices.Equal(dst.State[s], src.State[s]) {
			t.Errorf("shard %d: state differs after loading its export", s)
		}
	}
	dense := sample(t)
	if b := dense.ShardBytes(0, true); b[8] != shardDense || len(b) != shardHeader+4*dense.Layout.ShardSize()*3+8 {
		t.Errorf("a shard with every row set: version %d, %d bytes; want the dense version 1", b[8], len(b))
	}
	b := src.ShardBytes(0, true)
	first := shardHeader + 4
	for _, tc := range []struct {
		name string
		k    uint32
	}{{"of another shard", 1}, {"repeated", 0}, {"past the model", 1<<20 + 8}} {
		c := bytes.Clone(b)
		row := 4 + 4*src.StateWidth(true)
		binary.LittleEndian.PutUint32(c[first+row:], tc.k) // the second row
		binary.LittleEndian.PutUint64(c[len(c)-8:], xxhash.Sum64(c[:len(c)-8]))
		dst := src.Clone()
		before := dst.Hash()
		if err := dst.LoadShard(0, c); !errors.Is(err, ErrCorrupt) {
			t.Errorf("a row %s: LoadShard = %v, want ErrCorrupt", tc.name, err)
		}
		if dst.Hash() != before {
			t.Errorf("a row %s: the failed load changed the model", tc.name)
		}
	}
}
