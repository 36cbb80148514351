package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// smallGen is a quick configuration for tests.
func smallGen() GenConfig {
	c := DefaultGenConfig()
	c.Rows, c.TestRows, c.Features = 3000, 1000, 1<<18
	return c
}

func TestGenConfigValidate(t *testing.T) {
	mod := func(f func(*GenConfig)) GenConfig {
		c := DefaultGenConfig()
		f(&c)
		return c
	}
	tests := []struct {
		cfg  GenConfig
		want string
	}{
		{DefaultGenConfig(), ""},
		{mod(func(c *GenConfig) { c.Format = FormatCriteo; c.Compress = "zst"; c.Parts = 4 }), ""},
		{mod(func(c *GenConfig) { c.Rows = 0 }), "Rows 0"},
		{mod(func(c *GenConfig) { c.TestRows = -1 }), "TestRows -1"},
		{mod(func(c *GenConfig) { c.Fields = 0 }), "Fields 0"},
		{mod(func(c *GenConfig) { c.Features = 100 }), "fewer than 16 indices"},
		{mod(func(c *GenConfig) { c.Features = 1 << 33 }), "larger than 4294967295"},
		{mod(func(c *GenConfig) { c.Parts = 0 }), "Parts 0"},
		{mod(func(c *GenConfig) { c.Format = FormatIDX }), "Format idx"},
		{mod(func(c *GenConfig) { c.Format = FormatCriteo; c.Fields = 20 }), "Criteo output has 39 fields, not 20"},
		{mod(func(c *GenConfig) { c.Compress = "bz2" }), `Compress "bz2"`},
		{mod(func(c *GenConfig) { c.Positives = 1 }), "Positives 1"},
		{mod(func(c *GenConfig) { c.Zipf = 0 }), "Zipf 0"},
		{mod(func(c *GenConfig) { c.MaxVocab = 1 << 30 }), "MaxVocab 1073741824"},
		{mod(func(c *GenConfig) { c.Signal = math.NaN() }), "Signal NaN"},
		{mod(func(c *GenConfig) { c.HeadDensity = 2 }), "HeadDensity 2"},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("valid config: %v", err)
			}
		} else if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
}

func dirFiles(t *testing.T, dir string) map[string][]byte {
	out := map[string][]byte{}
	for _, n := range listDir(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

func TestGenerateDeterministic(t *testing.T) {
	for _, tc := range []struct {
		format   Format
		compress string
	}{{FormatLibSVM, ""}, {FormatLibSVM, "gz"}, {FormatLibSVM, "zst"}, {FormatCriteo, ""}} {
		c := smallGen()
		c.Format, c.Compress = tc.format, tc.compress
		a, b, other := t.TempDir(), t.TempDir(), t.TempDir()
		if _, err := Generate(a, c, nil); err != nil {
			t.Fatal(err)
		}
		Generate(b, c, nil)
		fa, fb := dirFiles(t, a), dirFiles(t, b)
		if len(fa) != 3 {
			t.Fatalf("%v %s: files %v", tc.format, tc.compress, listDir(t, a))
		}
		for n := range fa {
			if !bytes.Equal(fa[n], fb[n]) {
				t.Errorf("%v %s: %s differs between two runs with the same seed", tc.format, tc.compress, n)
			}
		}
		c.Seed++
		Generate(other, c, nil)
		fo := dirFiles(t, other)
		for n := range fa {
			if n != "meta.json" && bytes.Equal(fa[n], fo[n]) {
				t.Errorf("%v %s: %s is the same for seeds 1 and 2", tc.format, tc.compress, n)
			}
		}
	}
}

func TestGenerateMetaAndRows(t *testing.T) {
	dir := t.TempDir()
	c := smallGen()
	c.TestRows = 20000
	var calls []int64
	meta, err := Generate(dir, c, func(done, total int64) {
		if total != c.Rows+c.TestRows {
			t.Errorf("progress total %d", total)
		}
		calls = append(calls, done)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) == 0 || calls[len(calls)-1] != c.Rows+c.TestRows || !slices.IsSorted(calls) {
		t.Errorf("progress calls %v", calls)
	}
	// meta.json has the documented snake_case keys and the values.
	raw, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{"rows": 3000.0, "test_rows": 20000.0, "features": float64(1 << 18), "fields": 39.0,
		"seed": 1.0, "format": "libsvm", "test_file": "test.svm"} {
		if m[key] != want {
			t.Errorf("meta.json %s = %v, want %v", key, m[key], want)
		}
	}
	back, err := ReadGenMeta(dir)
	if err != nil || !reflect.DeepEqual(back, meta) || back.Config.Format != FormatLibSVM {
		t.Errorf("ReadGenMeta = %+v, %v; want what Generate returned, %+v", back, err, meta)
	}
	if meta.TestFile != filepath.Join(dir, "test.svm") || !slices.Equal(meta.Files, []string{filepath.Join(dir, "train.svm")}) {
		t.Errorf("files %v, test file %s: want paths in %s", meta.Files, meta.TestFile, dir)
	}
	if _, err := ReadGenMeta(filepath.Join(dir, "train.svm")); !errors.Is(err, ErrFormat) {
		t.Errorf("ReadGenMeta of a non-JSON file: %v", err)
	}
	if !(meta.PlantedTestLogLoss > 0.3 && meta.PlantedTestLogLoss < meta.BaseTestLogLoss) || !(meta.PlantedTestAUC > 0.7 && meta.PlantedTestAUC < 0.9) {
		t.Errorf("planted log-loss %v (base %v), AUC %v", meta.PlantedTestLogLoss, meta.BaseTestLogLoss, meta.PlantedTestAUC)
	}
	// The positive share is 0.25 up to sampling error (5 standard errors).
	if se := math.Sqrt(0.25 * 0.75 / float64(c.TestRows)); math.Abs(meta.Positives-0.25) > 5*se+0.01 {
		t.Errorf("test positives %v, want about 0.25", meta.Positives)
	}
	// Every row has exactly one feature per field, inside that field's
	// block, value 1, sorted.
	block := genBlock(c)
	for _, name := range []string{meta.Files[0], meta.TestFile} {
		b := openAll(t, []string{name}, Options{Dim: c.Features})
		if err := checkCSR(&b, c.Features, 0); err != nil {
			t.Fatal(err)
		}
		var pos float64
		for r := range b.Rows() {
			idx, val := b.Row(r)
			if len(idx) != c.Fields {
				t.Fatalf("%s row %d has %d features", name, r, len(idx))
			}
			for f, k := range idx {
				if uint64(k)/block != uint64(f) || val[f] != 1 {
					t.Fatalf("%s row %d: feature %d (value %v) is not in field %d's block", name, r, k, val[f], f)
				}
			}
			pos += float64(b.Labels[r])
		}
		if name == meta.TestFile && pos/float64(b.Rows()) != meta.Positives {
			t.Errorf("measured positives %v, meta says %v", pos/float64(b.Rows()), meta.Positives)
		}
	}
}

// The rows in the files are the rows of the generator's training stream,
// so tests may draw them in memory.
func TestGeneratorStreamMatchesFiles(t *testing.T) {
	dir := t.TempDir()
	c := smallGen()
	if _, err := Generate(dir, c, nil); err != nil {
		t.Fatal(err)
	}
	b := openAll(t, []string{filepath.Join(dir, "train.svm")}, Options{})
	p := newPlanted(c)
	p.calibrate()
	r := rand.NewPCG(c.Seed, streamTrain)
	vals := make([]int32, c.Fields)
	for i := range b.Rows() {
		y, _ := p.next(r, vals)
		idx, _ := b.Row(i)
		for f, j := range vals {
			if uint64(idx[f]) != p.feature(f, j) {
				t.Fatalf("row %d field %d: file has %d, stream %d", i, f, idx[f], p.feature(f, j))
			}
		}
		if (b.Labels[i] == 1) != y {
			t.Fatalf("row %d: label differs", i)
		}
	}
}

func TestGenerateParts(t *testing.T) {
	one, four := t.TempDir(), t.TempDir()
	c := smallGen()
	c.Compress = "gz"
	Generate(one, c, nil)
	c.Parts = 4
	meta, err := Generate(four, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range []string{"train-00001-of-00004.svm.gz", "train-00002-of-00004.svm.gz", "train-00003-of-00004.svm.gz", "train-00004-of-00004.svm.gz"} {
		want = append(want, filepath.Join(four, n))
	}
	if !slices.Equal(meta.Files, want) || meta.TestFile != filepath.Join(four, "test.svm.gz") {
		t.Fatalf("files %v, test %s", meta.Files, meta.TestFile)
	}
	whole := openAll(t, []string{filepath.Join(one, "train.svm.gz")}, Options{})
	parts := openAll(t, []string{filepath.Join(four, "train-*-of-00004.svm.gz")}, Options{})
	if !sameBatch(&whole, &parts) {
		t.Fatal("the four parts together differ from the single file")
	}
}

// Criteo output encodes the same rows: the Criteo reader hashes each
// (field, value) back to one feature.
func TestGenerateCriteoMatchesLibSVM(t *testing.T) {
	ld, cd := t.TempDir(), t.TempDir()
	c := smallGen()
	Generate(ld, c, nil)
	c.Format = FormatCriteo
	if _, err := Generate(cd, c, nil); err != nil {
		t.Fatal(err)
	}
	lib := openAll(t, []string{filepath.Join(ld, "train.svm")}, Options{})
	cri := openAll(t, []string{filepath.Join(cd, "train.tsv")}, Options{Dim: c.Features})
	if !slices.Equal(lib.Labels, cri.Labels) {
		t.Fatal("labels differ")
	}
	// Hash the written token of each of the first values of every field:
	// the map from libsvm feature to Criteo feature is one to one up to rare
	// hash collisions.
	back := map[uint32]uint32{} // Criteo feature -> libsvm feature
	collisions := 0
	p := newPlanted(smallGen())
	for f := range p.fields {
		for j := range min(len(p.fields[f].prob), 50) {
			var tok []byte
			if f < genIntFields {
				tok = criteoIntToken(nil, int32(j))
			} else {
				tok = criteoCatToken(nil, &p.fields[f], int32(j))
			}
			k, ok := CriteoFeature(f+1, tok, c.Features)
			if !ok {
				t.Fatalf("field %d value %d: token %q is not an integer", f, j, tok)
			}
			lf := uint32(p.feature(f, int32(j)))
			if prev, seen := back[k]; seen && prev != lf {
				collisions++
			}
			back[k] = lf
		}
	}
	if collisions > 5 {
		t.Errorf("%d hash collisions, expected a handful at most in 2^18", collisions)
	}
	// Every Criteo row holds exactly the hashes of its libsvm row's values.
	inv := map[uint32]uint32{}
	for k, lf := range back {
		inv[lf] = k
	}
	checked := 0
	for r := range cri.Rows() {
		li, _ := lib.Row(r)
		ci, _ := cri.Row(r)
		for _, k := range li {
			if h, ok := inv[k]; ok {
				checked++
				if !slices.Contains(ci, h) {
					t.Fatalf("row %d: feature %d's hash %d missing from the Criteo row", r, k, h)
				}
			}
		}
	}
	if checked < cri.Rows() {
		t.Errorf("only %d features checked", checked)
	}
}

func TestAliasTable(t *testing.T) {
	pr := []float64{0.5, 0.25, 0.125, 0.0625, 0.0625}
	prob, alias := aliasTable(pr)
	n := float64(len(pr))
	got := make([]float64, len(pr))
	for i := range pr {
		keep := float64(prob[i]) / (1 << 32)
		got[i] += keep / n
		got[alias[i]] += (1 - keep) / n
	}
	for i := range pr {
		if math.Abs(got[i]-pr[i]) > 1e-9 {
			t.Errorf("value %d drawn with probability %v, want %v", i, got[i], pr[i])
		}
	}
}

func TestAUC(t *testing.T) {
	tests := []struct {
		s    []scored
		want float64
	}{
		{[]scored{{0.1, false}, {0.4, true}, {0.35, false}, {0.8, true}}, 1},
		{[]scored{{0.1, true}, {0.4, false}, {0.35, true}, {0.8, false}}, 0},
		{[]scored{{0.5, true}, {0.5, false}, {0.9, true}, {0.2, false}}, 0.875},
		{[]scored{{0.5, true}, {0.5, true}}, 0}, // no negatives
	}
	for _, tc := range tests {
		if got := auc(tc.s); got != tc.want {
			t.Errorf("auc = %v, want %v", got, tc.want)
		}
	}
}

// adagradGap trains AdaGrad logistic regression for one pass over the
// generator's training rows (drawn in memory: the same stream Generate
// writes) and returns the learner's and the planted model's test log-loss.
func adagradGap(c GenConfig, lr float64, batch int) (learned, planted float64) {
	p := newPlanted(c)
	p.calibrate()
	d := c.Features // bias at index d
	w := make([]float32, d+1)
	acc := make([]float32, d+1)
	grad := make([]float32, d+1)
	inBatch := make([]bool, d+1)
	var touched []uint32
	vals := make([]int32, c.Fields)
	feats := make([]uint32, c.Fields+1) // the row's features and the bias
	feats[c.Fields] = uint32(d)
	const l2 = 1e-7
	r := rand.NewPCG(c.Seed, streamTrain)
	for done := int64(0); done < c.Rows; done += int64(batch) {
		n := min(int64(batch), c.Rows-done)
		for range n {
			y, _ := p.next(r, vals)
			s := float64(w[d])
			for f, j := range vals {
				feats[f] = uint32(p.feature(f, j))
				s += float64(w[feats[f]])
			}
			res := float32(sigmoid(s))
			if y {
				res--
			}
			for _, k := range feats {
				if !inBatch[k] {
					inBatch[k] = true
					touched = append(touched, k)
				}
				grad[k] += res
			}
		}
		for _, k := range touched {
			g := grad[k] / float32(n)
			if uint64(k) != d {
				g += l2 * w[k]
			}
			acc[k] += g * g
			w[k] -= float32(lr) * g / (float32(math.Sqrt(float64(acc[k]))) + 1e-7)
			grad[k], inBatch[k] = 0, false
		}
		touched = touched[:0]
	}
	rt := rand.NewPCG(c.Seed, streamTest)
	for range c.TestRows {
		y, pr := p.next(rt, vals)
		s := float64(w[d])
		for f, j := range vals {
			s += float64(w[p.feature(f, j)])
		}
		q := math.Min(math.Max(sigmoid(s), 1e-15), 1-1e-15)
		if y {
			learned -= math.Log(q)
			planted -= math.Log(pr)
		} else {
			learned -= math.Log1p(-q)
			planted -= math.Log1p(-pr)
		}
	}
	return learned / float64(c.TestRows), planted / float64(c.TestRows)
}

// The design requirement: one pass of AdaGrad (batch 100, lr 0.1, tiny L2)
// over the default 1M rows with 2^24 features and 39 fields gets within 3%
// of the planted log-loss.
func TestGeneratedSetIsLearnable(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on 1M rows; skipped with -short")
	}
	c := DefaultGenConfig()
	learned, planted := adagradGap(c, 0.1, 100)
	gap := learned/planted - 1
	t.Logf("planted test log-loss %.4f, AdaGrad after one pass %.4f: %.2f%% above", planted, learned, 100*gap)
	if gap > 0.03 || gap < 0 {
		t.Fatalf("AdaGrad is %.2f%% above the planted log-loss, want within 3%%", 100*gap)
	}
}
