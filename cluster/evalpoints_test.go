package cluster

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/infer"
)

// flagSet is TrainFlags from a map of the flags a user set.
type flagSet map[string]string

func (f flagSet) Args(leave ...string) []string {
	var a []string
	for k, v := range f {
		if !slices.Contains(leave, k) {
			a = append(a, "--"+k+"="+v)
		}
	}
	slices.Sort(a)
	return a
}
func (f flagSet) LocalArgs(leave ...string) []string { return f.Args(leave...) }
func (f flagSet) Value(name string) string           { return f[name] }
func (f flagSet) Set(name string) bool               { _, ok := f[name]; return ok }
func (f flagSet) Resolve([]string, zerolog.Logger) (*infer.Plan, error) {
	panic("not used")
}

// --eval-points spaces the evaluations over the user's own training files
// too, not only over a generated set: without them a cluster run on the
// user's data had one evaluation, at the end, and its time to accuracy was
// its whole time.
func TestClusterEvalPointsOnUserData(t *testing.T) {
	gen := t.TempDir()
	cfg := data.DefaultGenConfig()
	cfg.Rows, cfg.TestRows, cfg.Features, cfg.Parts = 4000, 100, 1<<12, 2
	m, err := data.Generate(gen, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	genFiles := []string{filepath.Join(gen, filepath.Base(m.Files[0])), filepath.Join(gen, filepath.Base(m.Files[1]))}
	if got := rowsOf(genFiles, &m); got != 4000 {
		t.Errorf("rows of the generated set: %d, want its meta.json's 4000", got)
	}
	if got := rowsOf(genFiles[:1], &m); got <= 0 || got >= 4000 {
		t.Errorf("rows of one of its two files: %d, want that file's lines, not the set's 4000", got)
	}

	// The same rows as the user's files: no meta.json beside them.
	own := t.TempDir()
	var ownFiles []string
	for i, f := range genFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(own, []string{"a.svm", "b.svm"}[i])
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		ownFiles = append(ownFiles, p)
	}
	if got := rowsOf(ownFiles, nil); got != 4000 {
		t.Errorf("rows of plain files: %d, want 4000", got)
	}
	gz := filepath.Join(own, "c.svm.gz")
	f, err := os.Create(gz)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	zw.Write([]byte("1 1:1\n0 2:1\n"))
	zw.Close()
	f.Close()
	if got := rowsOf([]string{ownFiles[0], gz}, nil); got != 0 {
		t.Errorf("rows with a gzip file: %d, want 0 (unknown without decompressing)", got)
	}

	// An IDX images file, gzip'd as Fashion-MNIST ships: its header counts
	// the images.
	img := filepath.Join(own, "train-images-idx3-ubyte.gz")
	f, err = os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	zw = gzip.NewWriter(f)
	zw.Write([]byte{0, 0, 8, 3, 0, 0, 0x02, 0x58, 0, 0, 0, 2, 0, 0, 0, 2}) // 600 images of 2x2
	zw.Write(make([]byte, 600*4))
	zw.Close()
	f.Close()
	if got := rowsOf([]string{img}, nil); got != 600 {
		t.Errorf("rows of an IDX images file: %d, want its header's 600", got)
	}

	lc := LocalConfig{Peers: 2, EvalPoints: 10, Train: flagSet{"train": strings.Join(ownFiles, ","), "epochs": "1"}, Log: zerolog.Nop()}
	d, err := lc.data()
	if err != nil {
		t.Fatal(err)
	}
	// 4000 rows, one epoch, two peers, ten points: every 200 of a peer's examples.
	if !slices.Contains(d.pass, "--eval-every=200") || d.baselineEval != 400 {
		t.Errorf("the peers' flags %q and the baseline's --eval-every %d: want --eval-every=200 and 400", d.pass, d.baselineEval)
	}
	lc.Train = flagSet{"train": strings.Join(ownFiles, ","), "epochs": "1", "eval-every": "50"}
	if d, err = lc.data(); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(d.pass, func(a string) bool { return strings.HasPrefix(a, "--eval-every=") && a != "--eval-every=50" }) || d.baselineEval != 0 {
		t.Errorf("with --eval-every 50 given: %q, baseline %d; want the user's flag alone", d.pass, d.baselineEval)
	}
}

// A training file larger than countSample is not read through: its lines
// are estimated from its first countSample bytes, within a few percent
// for rows of even length.
func TestCountLinesEstimatesLargeFiles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.svm")
	line := []byte("1 3:1 17:1 254:0.5 9000:1\n")
	rows := int64(3*countSample/len(line)) + 1234
	if err := os.WriteFile(p, bytes.Repeat(line, int(rows)), 0o644); err != nil {
		t.Fatal(err)
	}
	n, ok := countLines(p, make([]byte, 1<<20))
	if !ok || n < rows*97/100 || n > rows*103/100 {
		t.Errorf("countLines of %d rows: %d, %v; want within 3%%", rows, n, ok)
	}
}
