package data

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/twmb/murmur3"
)

// mm is MurmurHash3 x86_32 from the library, for expectations written
// out by hand in the tests below.
func mm(s string, seed uint32) uint32 { return murmur3.SeedSum32(seed, []byte(s)) }

// vwRow reads one VW line with opt (Dim 1<<20 unless set) and returns its
// row and weight.
func vwRow(t *testing.T, line string, opt Options) (row, float32) {
	t.Helper()
	if opt.Dim == 0 {
		opt.Dim = 1 << 20
	}
	opt.Format = FormatVW
	p := writeFile(t, t.TempDir(), "a.vw", line+"\n")
	b := openAll(t, []string{p}, opt)
	got := rows(&b)
	if len(got) != 1 {
		t.Fatalf("%q: %d rows, want 1", line, len(got))
	}
	return got[0], b.Weight(0)
}

// want builds the expected row from (hash, value) pairs the way the
// format notes in vw.go define it: hash mod dim, sorted, equal indices
// summed.
func want(label float32, dim uint32, pairs ...any) row {
	sum := map[uint32]float32{}
	for i := 0; i < len(pairs); i += 2 {
		sum[pairs[i].(uint32)%dim] += float32(pairs[i+1].(float64))
	}
	r := row{label: label}
	for _, k := range slices.Sorted(func(yield func(uint32) bool) {
		for k := range sum {
			if !yield(k) {
				return
			}
		}
	}) {
		if sum[k] != 0 {
			r.idx = append(r.idx, k)
			r.val = append(r.val, sum[k])
		}
	}
	return r
}

// VW lines as a VW user writes them: labels -1/1 and 0/1, importance
// weights, tags, several namespaces, string and numeric feature names,
// name:value, namespace scales, the default namespace, empty namespaces,
// each hashed by VW's definitions (murmur3 with the namespace's hash as
// seed; a name of digits is its number plus that hash).
func TestVWGoodLines(t *testing.T) {
	const d = 1 << 20
	ns := func(name string) uint32 { return mm(name, 0) }
	tests := []struct {
		name   string
		line   string
		opt    Options
		want   row
		weight float32
	}{
		{"label 1, one namespace", "1 |a x y", Options{}, want(1, d, mm("x", ns("a")), 1.0, mm("y", ns("a")), 1.0), 1},
		{"label -1", "-1 |a x", Options{}, want(0, d, mm("x", ns("a")), 1.0), 1},
		{"label 0", "0 |a x", Options{}, want(0, d, mm("x", ns("a")), 1.0), 1},
		{"weight", "1 2.5 |a x", Options{}, want(1, d, mm("x", ns("a")), 1.0), 2.5},
		{"weight 0", "1 0 |a x", Options{}, want(1, d, mm("x", ns("a")), 1.0), 0},
		{"quoted tag", "1 0.5 'row7|a x", Options{}, want(1, d, mm("x", ns("a")), 1.0), 0.5},
		{"tag touching the bar", "1 row7|a x", Options{}, want(1, d, mm("x", ns("a")), 1.0), 1},
		{"quoted tag with a blank before the bar", "-1 'r |a x", Options{}, want(0, d, mm("x", ns("a")), 1.0), 1},
		{"two namespaces", "1 |user age:0.5 city |ad id12", Options{},
			want(1, d, mm("age", ns("user")), 0.5, mm("city", ns("user")), 1.0, mm("id12", ns("ad")), 1.0), 1},
		{"namespace named by its whole name", "1 |user x |u x", Options{}, want(1, d, mm("x", ns("user")), 1.0, mm("x", ns("u")), 1.0), 1},
		{"default namespace", "1 | x y:2", Options{}, want(1, d, mm("x", 0), 1.0, mm("y", 0), 2.0), 1},
		{"default namespace right after the label", "1 |", Options{}, row{label: 1}, 1},
		{"numeric names hash as number + namespace hash", "1 |a 123 7:0.5", Options{}, want(1, d, 123+ns("a"), 1.0, 7+ns("a"), 0.5), 1},
		{"numeric names in the default namespace", "1 | 5 9:2", Options{}, want(1, d, uint32(5), 1.0, uint32(9), 2.0), 1},
		{"numeric namespace name", "1 |12 x", Options{}, want(1, d, mm("x", 12), 1.0), 1},
		{"string value", "1 |a color:red", Options{}, want(1, d, mm("red", mm("color", ns("a"))), 1.0), 1},
		{"namespace scale", "1 |a:2 x y:0.25", Options{}, want(1, d, mm("x", ns("a")), 2.0, mm("y", ns("a")), 0.5), 1},
		{"namespace scale leaves string values at 1", "1 |a:3 c:blue", Options{}, want(1, d, mm("blue", mm("c", ns("a"))), 1.0), 1},
		{"nameless features", "1 |a :1.5 :2", Options{}, want(1, d, ns("a"), 1.5, ns("a")+1, 2.0), 1},
		{"zero values dropped", "1 |a x:0 y", Options{}, want(1, d, mm("y", ns("a")), 1.0), 1},
		{"empty namespaces", "1 |a |b x |c", Options{}, want(1, d, mm("x", ns("b")), 1.0), 1},
		{"a feature twice sums", "1 |a x x:2", Options{}, want(1, d, mm("x", ns("a")), 3.0), 1},
		{"features that cancel leave none", "1 |a x x:-1", Options{}, row{label: 1}, 1},
		{"tabs between features", "1\t|a\tx\ty", Options{}, want(1, d, mm("x", ns("a")), 1.0, mm("y", ns("a")), 1.0), 1},
		{"crlf", "1 |a x\r", Options{}, want(1, d, mm("x", ns("a")), 1.0), 1},
		{"small dim", "1 |a x y z", Options{Dim: 7}, want(1, 7, mm("x", ns("a")), 1.0, mm("y", ns("a")), 1.0, mm("z", ns("a")), 1.0), 1},
		{"multiclass", "3 |a x", Options{Classes: 4}, want(3, d, mm("x", ns("a")), 1.0), 1},
		{"multiclass base 1 (VW's --oaa)", "4 |a x", Options{Classes: 4, LabelBase: 1}, want(3, d, mm("x", ns("a")), 1.0), 1},
		{"unlabelled for prediction", "|a x", Options{NoLabels: true}, want(0, d, mm("x", ns("a")), 1.0), 1},
		{"labels ignored for prediction", "1 2 'tag|a x", Options{NoLabels: true}, want(0, d, mm("x", ns("a")), 1.0), 1},
		{"quadratic", "1 |a x y:2 |b z:3", Options{Interactions: []string{"ab"}},
			want(1, d, mm("x", ns("a")), 1.0, mm("y", ns("a")), 2.0, mm("z", ns("b")), 3.0,
				mm("x", ns("a"))*fnvPrime^mm("z", ns("b")), 3.0, mm("y", ns("a"))*fnvPrime^mm("z", ns("b")), 6.0), 1},
		{"quadratic given as ba is ab", "1 |a x |b z", Options{Interactions: []string{"ba"}},
			want(1, d, mm("x", ns("a")), 1.0, mm("z", ns("b")), 1.0, mm("x", ns("a"))*fnvPrime^mm("z", ns("b")), 1.0), 1},
		{"self interaction: pairs i <= j", "1 |a x y", Options{Interactions: []string{"aa"}},
			want(1, d, mm("x", ns("a")), 1.0, mm("y", ns("a")), 1.0,
				mm("x", ns("a"))*fnvPrime^mm("x", ns("a")), 1.0, mm("x", ns("a"))*fnvPrime^mm("y", ns("a")), 1.0,
				mm("y", ns("a"))*fnvPrime^mm("y", ns("a")), 1.0), 1},
		{"cubic", "1 |a x |b y |c z:2", Options{Interactions: []string{"abc"}},
			want(1, d, mm("x", ns("a")), 1.0, mm("y", ns("b")), 1.0, mm("z", ns("c")), 2.0,
				(mm("x", ns("a"))*fnvPrime^mm("y", ns("b")))*fnvPrime^mm("z", ns("c")), 2.0), 1},
		{"interaction with a namespace the row lacks", "1 |a x", Options{Interactions: []string{"ab"}}, want(1, d, mm("x", ns("a")), 1.0), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, w := vwRow(t, tc.line, tc.opt)
			if got.label != tc.want.label || !slices.Equal(got.idx, tc.want.idx) || !slices.Equal(got.val, tc.want.val) {
				t.Fatalf("%q:\n got %+v\nwant %+v", tc.line, got, tc.want)
			}
			if w != tc.weight {
				t.Errorf("%q: weight %v, want %v", tc.line, w, tc.weight)
			}
		})
	}
}

// Malformed VW lines stop the read with FILE:LINE, the token at fault and
// the reason, as libsvm's do, or are counted and skipped with SkipBad.
func TestVWBadLines(t *testing.T) {
	tests := []struct {
		line string
		opt  Options
		want string // after "FILE:2: "
		why  error
	}{
		{"1 1:1 2:1", Options{}, `bad token "1 1:1 2:1": no '|': VW features follow a '|'`, errVWNoBar},
		{"|a x", Options{}, `bad token "|": no label before the first '|'`, errVWNoLabel},
		{"1|a x", Options{}, `bad token "1|": no label before the first '|' (a token that touches the '|' is VW's tag`, errVWNoLabel},
		{"2 |a x", Options{}, `bad token "2": binary label must be 0, 1, -1 or +1`, errLabelBinary},
		{"yes |a x", Options{}, `bad token "yes": label is not a number`, errLabelNotNumber},
		{"1 -2 |a x", Options{}, `bad token "-2": importance weight is not a number >= 0`, errWeight},
		{"1 heavy |a x", Options{}, `bad token "heavy": importance weight is not a number >= 0`, errWeight},
		{"1 nan |a x", Options{}, `bad token "nan": importance weight is not a number >= 0`, errWeight},
		{"1 1 0.5 |a x", Options{}, `bad token "0.5": VW's initial prediction (third number of the label) is not supported`, errVWInitial},
		{"1 1 0.5 7 |a x", Options{}, `bad token "1 1 0.5 7 ": more than label, weight, initial prediction and tag`, errVWLabelTokens},
		{"1 'tag 2 |a x", Options{}, `bad token "'tag": a tag ('tag) must come last before the '|'`, errVWTagNotLast},
		{"1 |a x:", Options{}, `bad token "x:": no value after ':'`, errValueMissing},
		{"1 |a x:nan", Options{}, `bad token "x:nan": value is NaN or infinite`, errValueNaN},
		{"1 |a x:1e39", Options{}, `bad token "x:1e39": value is out of float32 range`, errValueRange},
		{"1 |a:2e38 x:3", Options{}, `bad token "x:3": value is out of float32 range`, errValueRange},
		{"1 |a:big x", Options{}, `bad token "a:big": namespace scale is not a number`, errVWScale},
		{"1 |:2 x", Options{}, `bad token ":2": namespace has no name before its ':'`, errVWNamespace},
		{"1 |a x:7", Options{MaxValue: 5}, `bad token "x:7": |value| is over the bound 5 (--max-value)`, errValueBound},
		{"5 |a x", Options{Classes: 4, LabelBase: 1}, `bad token "5": class 4 (label 5 - label base 1) is outside 0..3`, errLabelRange},
	}
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			opt := tc.opt
			opt.Format, opt.Dim = FormatVW, 1<<20
			p := writeFile(t, t.TempDir(), "a.vw", "1 |a ok\n"+tc.line+"\n1 |a ok\n")
			src, err := Open([]string{p}, opt)
			if err != nil {
				t.Fatal(err)
			}
			b, err := readAll(src, 10)
			src.Close()
			var le *LineError
			if !errors.As(err, &le) || le.File != p || le.Line != 2 || !errors.Is(err, ErrBadLine) || !errors.Is(err, tc.why) {
				t.Fatalf("error %v, want a LineError at %s:2 wrapping %v", err, p, tc.why)
			}
			if got := strings.TrimPrefix(err.Error(), p+":2: "); !strings.HasPrefix(got, tc.want) {
				t.Errorf("error\n %s\nwant it to start\n %s", got, tc.want)
			}
			if b.Rows() != 1 {
				t.Errorf("%d rows before the bad line, want 1", b.Rows())
			}
			opt.SkipBad = true
			src, _ = Open([]string{p}, opt)
			b, err = readAll(src, 10)
			if err != nil || b.Rows() != 2 || src.Stats().BadLines != 1 {
				t.Errorf("SkipBad: %d rows, %d bad, %v; want 2 rows and 1 bad line", b.Rows(), src.Stats().BadLines, err)
			}
			src.Close()
		})
	}
}

// Interactions are checked against the input: libsvm has no namespaces,
// Criteo's are a..m and A..Z, and the list itself must make sense.
func TestInteractionsOptions(t *testing.T) {
	dir := t.TempDir()
	svm := writeFile(t, dir, "a.svm", "1 1:1\n")
	if _, err := Open([]string{svm}, Options{Interactions: []string{"ab"}}); !errors.Is(err, ErrOptions) ||
		!strings.Contains(err.Error(), "--interactions") || !strings.Contains(err.Error(), svm) {
		t.Errorf("libsvm with interactions: %v, want an error naming --interactions and the file", err)
	}
	if err := (Options{Format: FormatLibSVM, Interactions: []string{"ab"}}).Validate(); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "--interactions") {
		t.Errorf("Validate libsvm with interactions: %v", err)
	}
	tsv := writeFile(t, dir, "a.tsv", "1"+strings.Repeat("\t5", 13)+strings.Repeat("\tab", 26)+"\n")
	if _, err := Open([]string{tsv}, Options{Dim: 100, Interactions: []string{"aZ"}}); err != nil {
		t.Errorf("criteo aZ: %v", err)
	}
	if _, err := Open([]string{tsv}, Options{Dim: 100, Interactions: []string{"an"}}); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "a..m") {
		t.Errorf("criteo an: %v, want an error naming a..m", err)
	}
	for _, tc := range []struct {
		in, want string
	}{
		{"ab,abc", "[ab abc]"}, {" ba , cab ", "[ab abc]"}, {"", "[]"},
		{"a", "error: want 2 namespaces"}, {"abcd", "error: want 2 namespaces"},
		{"ab,ba", `error: interactions "ab" and "ba" are the same`}, {"a|", "error: namespace character '|'"},
	} {
		got, err := ParseInteractions(tc.in)
		s := fmt.Sprint(got)
		if got == nil {
			s = "[]"
		}
		if err != nil {
			s = "error: " + strings.TrimPrefix(err.Error(), ErrOptions.Error()+": ")
			s = strings.Replace(s, fmt.Sprintf("interaction %q: ", strings.TrimSpace(tc.in)), "", 1)
		}
		if !strings.HasPrefix(s, tc.want) {
			t.Errorf("ParseInteractions(%q) = %s, want %s", tc.in, s, tc.want)
		}
	}
}

// Criteo columns cross as namespaces a..m (I1..I13) and A..Z (C1..C26):
// the interaction of I1 and C1 ("aA", sorted to "Aa" as VW sorts the
// namespaces of an interaction) is the FNV combination of the low 32 bits
// of the two columns' xxhash64, C1's first, mod Dim.
func TestCriteoInteractions(t *testing.T) {
	const dim = 1 << 20
	ints := make([]string, 13)
	cats := make([]string, 26)
	ints[0], cats[0] = "1", "68fd1e64"
	p := writeFile(t, t.TempDir(), "a.tsv", criteoLine("1", ints, cats))
	b := openAll(t, []string{p}, Options{Dim: dim, Interactions: []string{"aA"}})
	k1, _ := criteoFieldKey(nil, 1, []byte("1"))
	k2, _ := criteoFieldKey(nil, 14, []byte("68fd1e64"))
	h1, h2 := xxhash.Sum64(k1), xxhash.Sum64(k2)
	wantIdx := []uint32{uint32(h1 % dim), uint32(h2 % dim), (uint32(h2)*fnvPrime ^ uint32(h1)) % dim}
	slices.Sort(wantIdx)
	idx, val := b.Row(0)
	if !slices.Equal(idx, wantIdx) || !slices.Equal(val, []float32{1, 1, 1}) {
		t.Fatalf("row %v %v, want %v all 1", idx, val, wantIdx)
	}
}

// The Go reader's indices equal those an independent implementation of
// VW's definitions computes (testdata/vwhash.py: its own MurmurHash3,
// checked there against the published test vectors, its own parsing and
// FNV combination), line for line, for lines of several namespaces,
// numeric and string names, values, weights and tags, with and without
// quadratic and cubic interactions and at a dim that is not a power of two.
func TestVWHashMatchesReference(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	lines := []string{
		"1 |a x y:2 |b z:0.5 w",
		"-1 0.25 'r1|user age:31 city_Paris |ad id9 brand_x:3",
		"0 |a 12 345:0.5 |b 7 |c q r s",
		"1 2 |a αβγ |b z",
		"1 | 3 f:2 |a x",
		"-1 |aa x |ab y |b z z2 z3",
		"1 |c k:4 |a x:-1.5 |b y:2",
	}
	for _, tc := range []struct {
		dim   uint64
		inter string
	}{{1 << 18, ""}, {1 << 18, "ab"}, {1000003, "ab,aa,abc"}, {1 << 24, "bc,abb"}} {
		t.Run(fmt.Sprintf("dim %d interactions %q", tc.dim, tc.inter), func(t *testing.T) {
			cmd := exec.Command(py, "testdata/vwhash.py", fmt.Sprint(tc.dim), tc.inter)
			cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("vwhash.py: %v", err)
			}
			var inter []string
			if tc.inter != "" {
				inter = strings.Split(tc.inter, ",")
			}
			p := writeFile(t, t.TempDir(), "a.vw", strings.Join(lines, "\n")+"\n")
			b := openAll(t, []string{p}, Options{Format: FormatVW, Dim: tc.dim, Interactions: inter})
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			r := 0
			for sc.Scan() {
				var ref struct {
					Label  float64
					Weight float64
					Row    [][2]float64
				}
				if err := json.Unmarshal(sc.Bytes(), &ref); err != nil {
					t.Fatal(err)
				}
				if r >= b.Rows() {
					t.Fatalf("reference has more rows than the reader's %d", b.Rows())
				}
				idx, val := b.Row(r)
				if len(idx) != len(ref.Row) {
					t.Fatalf("line %d %q: %d features, reference %d\n got %v\nwant %v", r+1, lines[r], len(idx), len(ref.Row), idx, ref.Row)
				}
				for i, kv := range ref.Row {
					if float64(idx[i]) != kv[0] || math.Abs(float64(val[i])-kv[1]) > 1e-6*math.Abs(kv[1]) {
						t.Fatalf("line %d %q: feature %d is %d:%g, reference %v", r+1, lines[r], i, idx[i], val[i], kv)
					}
				}
				if float64(b.Weight(r)) != ref.Weight || (ref.Label > 0) != (b.Labels[r] == 1) {
					t.Errorf("line %d: label %v weight %v, reference %v %v", r+1, b.Labels[r], b.Weight(r), ref.Label, ref.Weight)
				}
				r++
			}
			if r != b.Rows() || r != len(lines) {
				t.Fatalf("%d reference rows, %d read, %d lines", r, b.Rows(), len(lines))
			}
		})
	}
}

// VWFeature and VWHash compute what the reader computes.
func TestVWFeatureAgreesWithReader(t *testing.T) {
	got, _ := vwRow(t, "1 |user city:Paris", Options{Dim: 1000})
	if w := VWFeature("user", "city:Paris", 1000); len(got.idx) != 1 || got.idx[0] != w {
		t.Errorf("reader %v, VWFeature %d", got.idx, w)
	}
	if VWHash("", "17") != 17 || VWHash("a", "x") != mm("x", mm("a", 0)) {
		t.Errorf("VWHash: %d, %d", VWHash("", "17"), VWHash("a", "x"))
	}
}

// A .gtc cache of VW rows keeps their importance weights and interaction
// features: the second read (from the cache) equals the first.
func TestCacheKeepsWeightsAndInteractions(t *testing.T) {
	dir := t.TempDir()
	var sb strings.Builder
	for i := range 3000 {
		w := ""
		if i%3 == 0 {
			w = fmt.Sprintf(" %g", 0.5+float64(i%7))
		}
		fmt.Fprintf(&sb, "%d%s |a x%d y:%d |b z%d\n", i%2, w, i%11, i%5+1, i%13)
	}
	p := writeFile(t, dir, "d.vw", sb.String())
	opt := Options{Dim: 1 << 16, Interactions: []string{"ab"}}
	want := openAll(t, []string{p}, opt)
	cache := filepath.Join(dir, "d.gtc")
	first := readCached(t, []string{p}, opt, cache)
	second := readCached(t, []string{p}, opt, cache)
	for _, got := range []*Batch{&first, &second} {
		if !sameBatch(got, &want) || !slices.Equal(got.Weights, want.Weights) {
			t.Fatalf("cached rows differ from the text's")
		}
	}
	if len(want.Weights) != want.Rows() {
		t.Fatalf("weights %d for %d rows", len(want.Weights), want.Rows())
	}
	// Other interactions make the cache stale.
	if err := CheckCache([]string{p}, Options{Dim: 1 << 16, Interactions: []string{"aa"}}, cache); !errors.Is(err, ErrStaleCache) {
		t.Errorf("cache with other interactions: %v, want ErrStaleCache", err)
	}
}
