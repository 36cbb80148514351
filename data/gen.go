package data

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// GenConfig configures Generate. Every field has a default in
// DefaultGenConfig, which gives the data set the package documentation
// describes under "Synthetic data".
type GenConfig struct {
	// Rows is the number of training rows.
	Rows int64 `json:"rows"`
	// TestRows is the number of held-out rows, written to test.*; 0 writes
	// no test file and leaves the planted test metrics 0.
	TestRows int64 `json:"test_rows"`
	// Features is the index range: libsvm features are distinct indices in
	// [0, Features); Criteo readers should hash into Dim = Features.
	Features uint64 `json:"features"`
	// Fields is the number of fields; every row has exactly one value per
	// field. Criteo output needs 39 (13 integer and 26 categorical columns).
	Fields int `json:"fields"`
	// Seed makes the data: the same seed and config give byte-identical
	// files.
	Seed uint64 `json:"seed"`
	// Parts splits the training rows into this many files of consecutive
	// rows (train-00001-of-00004.svm, ...).
	Parts int `json:"parts"`
	// Format is FormatLibSVM or FormatCriteo.
	Format Format `json:"format"`
	// Compress is "", "gz" or "zst".
	Compress string `json:"compress"`
	// Positives is the target share of positive labels; the planted bias is
	// chosen to hit it.
	Positives float64 `json:"positives"`
	// Zipf is the exponent s of value popularity within a field: the value
	// of rank j is drawn with probability proportional to (j+1)^-s.
	Zipf float64 `json:"zipf"`
	// MaxVocab bounds the values of a categorical field; vocabulary sizes
	// are log-uniform between 10 and MaxVocab (integer-like fields: 4 to
	// 400). 0 means the largest that fits Features/Fields.
	MaxVocab int `json:"max_vocab"`
	// Signal is the standard deviation of the nonzero planted weights.
	Signal float64 `json:"signal"`
	// MinShare is the popularity above which a value carries a planted
	// weight with probability HeadDensity; rarer values carry one with
	// probability TailDensity (and a weight a quarter as large).
	MinShare    float64 `json:"min_share"`
	HeadDensity float64
	TailDensity float64
}

// DefaultGenConfig returns the configuration of the default synthetic set:
// a Criteo-sized problem that one pass of AdaGrad over its 1M rows can
// learn to within a few percent of the planted log-loss.
func DefaultGenConfig() GenConfig {
	return GenConfig{
		Rows:        1_000_000, // a few seconds to generate, ~430 MB of libsvm
		TestRows:    100_000,   // AUC and log-loss to ~±0.003
		Features:    1 << 24,   // Criteo-like hashed space
		Fields:      39,        // Criteo's 13 integer + 26 categorical columns
		Seed:        1,
		Parts:       1,
		Format:      FormatLibSVM,
		Compress:    "",
		Positives:   0.25, // Criteo's click rate is about 0.26
		Zipf:        1.2,  // heavy head, long tail, as in click logs
		MaxVocab:    0,    // up to half a field's index block
		Signal:      0.5,
		MinShare:    2e-4, // >= 200 occurrences in 1M rows: learnable
		HeadDensity: 0.5,
		TailDensity: 0.01, // rare values: a little unlearnable noise
	}
}

// genIntFields is the number of leading integer-like fields (Criteo's
// I1..I13); their vocabularies stay small enough for the Criteo integer
// buckets to keep every value apart.
const genIntFields = 13

// Validate checks the configuration.
func (c GenConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: generator: %s", ErrOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Rows < 1:
		return bad("Rows %d, want at least 1", c.Rows)
	case c.TestRows < 0:
		return bad("TestRows %d is negative", c.TestRows)
	case c.Fields < 1 || c.Fields > 255:
		return bad("Fields %d, want 1..255", c.Fields)
	case c.Features > MaxDim:
		return bad("Features %d is larger than %d", c.Features, uint64(MaxDim))
	case c.Features/uint64(c.Fields) < 16:
		return bad("Features %d leaves fewer than 16 indices for each of %d fields", c.Features, c.Fields)
	case c.Parts < 1 || int64(c.Parts) > c.Rows:
		return bad("Parts %d, want 1..Rows", c.Parts)
	case c.Format != FormatLibSVM && c.Format != FormatCriteo:
		return bad("Format %v, want libsvm or criteo", c.Format)
	case c.Format == FormatCriteo && c.Fields != criteoColumns-1:
		return bad("Criteo output has %d fields, not %d", criteoColumns-1, c.Fields)
	case c.Compress != "" && c.Compress != "gz" && c.Compress != "zst":
		return bad("Compress %q, want \"\", \"gz\" or \"zst\"", c.Compress)
	case !(c.Positives > 0 && c.Positives < 1):
		return bad("Positives %v, want a share in (0, 1)", c.Positives)
	case !(c.Zipf > 0 && c.Zipf < 10):
		return bad("Zipf %v, want (0, 10)", c.Zipf)
	case c.MaxVocab < 0 || (c.MaxVocab > 0 && uint64(c.MaxVocab) > genBlock(c)):
		return bad("MaxVocab %d, want 0..%d (Features/Fields rounded down to a power of two)", c.MaxVocab, genBlock(c))
	case !(c.Signal >= 0 && c.Signal < 100):
		return bad("Signal %v, want [0, 100)", c.Signal)
	case !(c.MinShare >= 0 && c.MinShare <= 1):
		return bad("MinShare %v, want [0, 1]", c.MinShare)
	case !(c.HeadDensity >= 0 && c.HeadDensity <= 1 && c.TailDensity >= 0 && c.TailDensity <= 1):
		return bad("HeadDensity %v and TailDensity %v, want [0, 1]", c.HeadDensity, c.TailDensity)
	}
	return nil
}

// genBlock is the index block of one field: the largest power of two that
// fits Features/Fields times.
func genBlock(c GenConfig) uint64 {
	per := c.Features / uint64(max(c.Fields, 1))
	if per == 0 {
		return 0
	}
	return 1 << (bits.Len64(per) - 1)
}

// GenMeta describes a generated data set; Generate writes it as
// DIR/meta.json.
type GenMeta struct {
	Rows     int64  `json:"rows"`
	TestRows int64  `json:"test_rows"`
	Features uint64 `json:"features"`
	Fields   int    `json:"fields"`
	Seed     uint64 `json:"seed"`
	Format   string `json:"format"`
	Compress string `json:"compress"`
	// Files are the training files. meta.json holds their names relative
	// to its directory; Generate and ReadGenMeta return them joined with
	// the directory, ready to open.
	Files []string `json:"files"`
	// TestFile is the test file, like Files ("" when TestRows is 0).
	TestFile string `json:"test_file"`
	// PlantedTestLogLoss is the planted model's mean log-loss on the test
	// rows: the best a learner can expect.
	PlantedTestLogLoss float64 `json:"planted_test_logloss"`
	// PlantedTestAUC is the planted model's AUC on the test rows.
	PlantedTestAUC float64 `json:"planted_test_auc"`
	// BaseTestLogLoss is the log-loss of always predicting the test
	// positive share: what a model without features reaches.
	BaseTestLogLoss float64 `json:"base_test_logloss"`
	// Positives is the measured share of positive labels in the test rows.
	Positives float64 `json:"positives"`
	// TrainPositives is the measured share in the training rows.
	TrainPositives float64 `json:"train_positives"`
	// Bias is the planted bias weight.
	Bias float64 `json:"planted_bias"`
	// Vocabulary is the number of distinct (field, value) features.
	Vocabulary int64 `json:"vocabulary"`
	// PlantedWeights is the number of nonzero planted weights.
	PlantedWeights int64 `json:"planted_weights"`
	// Config is the full generator configuration.
	Config GenConfig `json:"config"`
}

// genField is one field of the planted model.
type genField struct {
	prob   []uint32  // alias method: keep value i when the coin < prob[i]
	alias  []int32   // else take alias[i]
	weight []float32 // planted weight of each value
	mult   uint64    // odd multiplier of the index scramble
	salt   uint64
}

// planted is the generating model.
type planted struct {
	cfg     GenConfig
	block   uint64
	fields  []genField
	bias    float64
	vocab   int64
	nonzero int64
}

// Streams of the generator's PCG: one per purpose, so the planted model
// and the test rows do not depend on Rows.
const (
	streamModel = 0x6d6f64656c // "model"
	streamCalib = 0x63616c6962 // "calib"
	streamTrain = 0x747261696e // "train"
	streamTest  = 0x74657374   // "test"
)

func newPlanted(c GenConfig) *planted {
	rng := rand.New(rand.NewPCG(c.Seed, streamModel))
	p := &planted{cfg: c, block: genBlock(c), fields: make([]genField, c.Fields)}
	maxVocab := float64(p.block / 2)
	if c.MaxVocab > 0 {
		maxVocab = float64(c.MaxVocab)
	}
	for f := range p.fields {
		lo, hi := 10.0, maxVocab
		if f < genIntFields {
			lo, hi = 4, 400
		}
		hi = max(min(hi, float64(p.block)), lo)
		lo = min(lo, hi)
		v := int(math.Exp(math.Log(lo) + rng.Float64()*(math.Log(hi)-math.Log(lo))))
		v = max(2, min(v, int(p.block)))
		gf := &p.fields[f]
		gf.mult = rng.Uint64() | 1
		gf.salt = rng.Uint64()
		pr := make([]float64, v)
		sum := 0.0
		for j := range pr {
			pr[j] = math.Pow(float64(j+1), -c.Zipf)
			sum += pr[j]
		}
		scale := c.Signal * (0.25 + 0.75*rng.Float64()) // fields differ in strength
		gf.weight = make([]float32, v)
		for j := range pr {
			pr[j] /= sum
			dens, sd := c.TailDensity, scale/4
			if pr[j] >= c.MinShare {
				dens, sd = c.HeadDensity, scale
			}
			if rng.Float64() < dens {
				gf.weight[j] = float32(rng.NormFloat64() * sd)
				p.nonzero++
			}
		}
		gf.prob, gf.alias = aliasTable(pr)
		p.vocab += int64(v)
	}
	return p
}

// aliasTable builds Vose's alias tables for the distribution pr.
func aliasTable(pr []float64) ([]uint32, []int32) {
	n := len(pr)
	prob := make([]uint32, n)
	alias := make([]int32, n)
	scaled := make([]float64, n)
	var small, large []int32
	for i, p := range pr {
		scaled[i] = p * float64(n)
		if scaled[i] < 1 {
			small = append(small, int32(i))
		} else {
			large = append(large, int32(i))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		prob[s] = uint32(scaled[s] * (1 << 32))
		alias[s] = l
		scaled[l] = (scaled[l] + scaled[s]) - 1
		if scaled[l] < 1 {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	for _, i := range append(small, large...) {
		prob[i] = math.MaxUint32
		alias[i] = i
	}
	return prob, alias
}

// draw picks a value of field f.
func (g *genField) draw(r *rand.PCG) int32 {
	u := r.Uint64()
	i := int32((u >> 32) * uint64(len(g.prob)) >> 32)
	if uint32(u) < g.prob[i] {
		return i
	}
	return g.alias[i]
}

// row draws one row's values into vals and returns its score without bias.
func (p *planted) row(r *rand.PCG, vals []int32) float64 {
	s := 0.0
	for f := range p.fields {
		g := &p.fields[f]
		j := g.draw(r)
		vals[f] = j
		s += float64(g.weight[j])
	}
	return s
}

// feature is the libsvm feature of value j of field f.
func (p *planted) feature(f int, j int32) uint64 {
	g := &p.fields[f]
	return uint64(f)*p.block + ((uint64(j)*g.mult + g.salt) & (p.block - 1))
}

// calibrate sets the bias so the expected positive share is cfg.Positives.
func (p *planted) calibrate() {
	r := rand.NewPCG(p.cfg.Seed, streamCalib)
	vals := make([]int32, len(p.fields))
	scores := make([]float64, 20000)
	for i := range scores {
		scores[i] = p.row(r, vals)
	}
	lo, hi := -30.0, 30.0
	for range 50 { // 60/2^50: far below the sampling error of 20000 rows
		mid := (lo + hi) / 2
		m := 0.0
		for _, s := range scores {
			m += sigmoid(mid + s)
		}
		if m/float64(len(scores)) < p.cfg.Positives {
			lo = mid
		} else {
			hi = mid
		}
	}
	p.bias = (lo + hi) / 2
}

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

// label draws a label for score z (bias included) and returns it with the
// planted probability.
func label(r *rand.PCG, z float64) (bool, float64) {
	pr := sigmoid(z)
	return float64(r.Uint64()>>11)/(1<<53) < pr, pr
}

// next draws one row: its values into vals, its label and the planted
// probability of a positive label. Generate and the tests share it.
func (p *planted) next(r *rand.PCG, vals []int32) (bool, float64) {
	return label(r, p.bias+p.row(r, vals))
}

// Criteo encoding of generated values.

// criteoIntToken is the integer written for value j of an integer field:
// the smallest integer of the j-th Criteo bucket (0, 1, 2, then the log
// buckets), so that the reader gives every value its own bucket.
func criteoIntToken(dst []byte, j int32) []byte {
	if j <= 2 {
		return strconv.AppendInt(dst, int64(j), 10)
	}
	return strconv.AppendInt(dst, logBucketStart[j-3], 10)
}

// criteoCatToken writes value j of a categorical field as 8 hex digits, a
// bijective scramble of j.
func criteoCatToken(dst []byte, g *genField, j int32) []byte {
	x := uint32(j)*0x9e3779b1 ^ uint32(g.salt)
	const hex = "0123456789abcdef"
	for s := 28; s >= 0; s -= 4 {
		dst = append(dst, hex[x>>uint(s)&15])
	}
	return dst
}

// appendRow writes one row in the configured format.
func (p *planted) appendRow(dst []byte, y bool, vals []int32) []byte {
	lab := byte('0')
	if y {
		lab = '1'
	}
	dst = append(dst, lab)
	if p.cfg.Format == FormatCriteo {
		for f, j := range vals {
			dst = append(dst, '\t')
			if f < genIntFields {
				dst = criteoIntToken(dst, j)
			} else {
				dst = criteoCatToken(dst, &p.fields[f], j)
			}
		}
		return append(dst, '\n')
	}
	for f, j := range vals {
		dst = append(dst, ' ')
		dst = strconv.AppendUint(dst, p.feature(f, j)+1, 10)
		dst = append(dst, ':', '1')
	}
	return append(dst, '\n')
}

// genWriter writes one output file through an optional compressor to a
// temporary name, renamed when the file is complete.
type genWriter struct {
	path string
	f    *os.File
	comp io.WriteCloser
	w    *bufio.Writer
}

func newGenWriter(path, compress string) (*genWriter, error) {
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return nil, err
	}
	g := &genWriter{path: path, f: f}
	var dst io.Writer = f
	switch compress {
	case "gz":
		zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
		g.comp, dst = zw, zw
	case "zst":
		zw, err := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			f.Close()
			return nil, err
		}
		g.comp, dst = zw, zw
	}
	g.w = bufio.NewWriterSize(dst, 1<<20)
	return g, nil
}

func (g *genWriter) finish() error {
	err := g.w.Flush()
	if g.comp != nil {
		if cerr := g.comp.Close(); err == nil {
			err = cerr
		}
	}
	if cerr := g.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(g.path+".tmp", g.path)
	}
	if err != nil {
		os.Remove(g.path + ".tmp")
		return fmt.Errorf("generate %s: %w", g.path, err)
	}
	return nil
}

func (g *genWriter) abort() {
	if g.comp != nil {
		g.comp.Close()
	}
	g.f.Close()
	os.Remove(g.path + ".tmp")
}

// Generate writes a synthetic click data set with a planted logistic model
// to dir (created if needed): the training files, the test file and
// meta.json, which is written last. progress, if not nil, is called from
// Generate's goroutine with the rows written so far and the total.
func Generate(dir string, cfg GenConfig, progress func(done, total int64)) (GenMeta, error) {
	if err := cfg.Validate(); err != nil {
		return GenMeta{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return GenMeta{}, err
	}
	p := newPlanted(cfg)
	p.calibrate()
	meta := GenMeta{
		Rows: cfg.Rows, TestRows: cfg.TestRows, Features: cfg.Features, Fields: cfg.Fields,
		Seed: cfg.Seed, Format: cfg.Format.String(), Compress: cfg.Compress,
		Bias: p.bias, Vocabulary: p.vocab, PlantedWeights: p.nonzero, Config: cfg,
	}
	ext := ".svm"
	if cfg.Format == FormatCriteo {
		ext = ".tsv"
	}
	if cfg.Compress != "" {
		ext += "." + cfg.Compress
	}
	total := cfg.Rows + cfg.TestRows
	var done int64
	tick := func() {
		done++
		if progress != nil && (done&0xffff == 0 || done == total) {
			progress(done, total)
		}
	}
	vals := make([]int32, cfg.Fields)
	var line []byte
	// Training rows, in Parts files of consecutive rows.
	r := rand.NewPCG(cfg.Seed, streamTrain)
	var trainPos int64
	for part := range int64(cfg.Parts) {
		name := "train" + ext
		if cfg.Parts > 1 {
			name = fmt.Sprintf("train-%05d-of-%05d%s", part+1, cfg.Parts, ext)
		}
		w, err := newGenWriter(filepath.Join(dir, name), cfg.Compress)
		if err != nil {
			return meta, err
		}
		lo, hi := part*cfg.Rows/int64(cfg.Parts), (part+1)*cfg.Rows/int64(cfg.Parts)
		for range hi - lo {
			y, _ := p.next(r, vals)
			if y {
				trainPos++
			}
			line = p.appendRow(line[:0], y, vals)
			if _, err := w.w.Write(line); err != nil {
				w.abort()
				return meta, fmt.Errorf("generate %s: %w", w.path, err)
			}
			tick()
		}
		if err := w.finish(); err != nil {
			return meta, err
		}
		meta.Files = append(meta.Files, name) // relative in meta.json
	}
	meta.TrainPositives = float64(trainPos) / float64(cfg.Rows)
	// Test rows, scored by the planted model.
	if cfg.TestRows > 0 {
		name := "test" + ext
		w, err := newGenWriter(filepath.Join(dir, name), cfg.Compress)
		if err != nil {
			return meta, err
		}
		r := rand.NewPCG(cfg.Seed, streamTest)
		scores := make([]scored, cfg.TestRows)
		var loss float64
		var pos int64
		for i := range scores {
			y, pr := p.next(r, vals)
			scores[i] = scored{float32(pr), y}
			if y {
				pos++
				loss -= math.Log(pr)
			} else {
				loss -= math.Log1p(-pr)
			}
			line = p.appendRow(line[:0], y, vals)
			if _, err := w.w.Write(line); err != nil {
				w.abort()
				return meta, fmt.Errorf("generate %s: %w", w.path, err)
			}
			tick()
		}
		if err := w.finish(); err != nil {
			return meta, err
		}
		meta.TestFile = name
		n := float64(cfg.TestRows)
		meta.PlantedTestLogLoss = loss / n
		meta.PlantedTestAUC = auc(scores)
		meta.Positives = float64(pos) / n
		if q := meta.Positives; q > 0 && q < 1 {
			meta.BaseTestLogLoss = -(q*math.Log(q) + (1-q)*math.Log1p(-q))
		}
	}
	js, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return meta, err
	}
	mp := filepath.Join(dir, "meta.json")
	if err := os.WriteFile(mp+".tmp", append(js, '\n'), 0o644); err != nil {
		return meta, err
	}
	if err := os.Rename(mp+".tmp", mp); err != nil {
		return meta, err
	}
	meta.resolve(dir)
	return meta, nil
}

// resolve joins the file names with the data set's directory.
func (m *GenMeta) resolve(dir string) {
	files := make([]string, len(m.Files))
	for i, f := range m.Files {
		files[i] = filepath.Join(dir, f)
	}
	m.Files = files
	if m.TestFile != "" {
		m.TestFile = filepath.Join(dir, m.TestFile)
	}
}

// ReadGenMeta reads the meta.json of a generated data set (path is the
// file or its directory) and returns it with Files and TestFile joined with
// the directory.
func ReadGenMeta(path string) (GenMeta, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "meta.json")
	}
	js, err := os.ReadFile(path)
	if err != nil {
		return GenMeta{}, err
	}
	var m GenMeta
	if err := json.Unmarshal(js, &m); err != nil {
		return GenMeta{}, fmt.Errorf("%w: %s: %v", ErrFormat, path, err)
	}
	m.resolve(filepath.Dir(path))
	return m, nil
}

// scored is a prediction and its label.
type scored struct {
	p float32
	y bool
}

// auc is the area under the ROC curve: the probability that a random
// positive scores above a random negative, ties counting one half.
func auc(s []scored) float64 {
	slices.SortFunc(s, func(a, b scored) int {
		switch {
		case a.p < b.p:
			return -1
		case a.p > b.p:
			return 1
		}
		return 0
	})
	var pos, neg, sum float64 // sum: pairs ranked correctly
	for i := 0; i < len(s); {
		j := i
		var tp, tn float64
		for j < len(s) && s[j].p == s[i].p {
			if s[j].y {
				tp++
			} else {
				tn++
			}
			j++
		}
		sum += tp*neg + tp*tn/2
		pos += tp
		neg += tn
		i = j
	}
	if pos == 0 || neg == 0 {
		return 0
	}
	return sum / (pos * neg)
}
