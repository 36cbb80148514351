package report

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// 4 processes apart, worked out by hand against scalingFixture:
// four plain train processes of 1000 examples each, the slowest in 4 s,
// train 1000 examples/s together: 2.5x the lone peer's 400/s. The fastest
// 4-peer configuration (ring/sync/b100/4p, 800/s) runs 0.80x them.
func TestApart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "apart")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var specs []peerSpec
	for _, sec := range []float64{3, 4, 3.5, 2} {
		specs = append(specs, peerSpec{id: "", topology: "single", mode: "local", batch: 100, examples: 1000, seconds: sec, rounds: 10})
	}
	runs := writeFixture(t, dir, specs)
	l, err := ReadApart(runs, 4, 100)
	if err != nil {
		t.Fatal(err)
	}
	if l.Examples != 4000 || l.Seconds != 4 || l.ExamplesPerSec != 1000 {
		t.Fatalf("processes apart %+v, want 4000 examples in 4 s, 1000/s", l)
	}
	cfgs, err := GroupSeries(scalingFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	bs := Summarize(cfgs)
	ls := []Apart{l}
	AddApartSpeedups(ls, bs)
	if math.Abs(float64(ls[0].Speedup)-2.5) > 1e-9 {
		t.Errorf("speedup %v, want 2.5 (1000/s over the lone peer's 400/s)", ls[0].Speedup)
	}
	var out bytes.Buffer
	if err := WriteApart(&out, ls, bs); err != nil {
		t.Fatal(err)
	}
	row := strings.Fields(strings.Split(strings.TrimSpace(out.String()), "\n")[2])
	if want := []string{"4", "100", "1.0k", "2.50", "ring/sync/b100/4p", "800", "0.80"}; strings.Join(row, " ") != strings.Join(want, " ") {
		t.Errorf("row %q, want %q\n%s", row, want, out.String())
	}
	var md bytes.Buffer
	writeApartMarkdown(&md, ls, bs)
	if !strings.Contains(md.String(), "## Processes apart") || !strings.Contains(md.String(), "| 4 | 100 | 1.0k | 2.50 | ring/sync/b100/4p | 800 | 0.80 |") {
		t.Errorf("report.md's section:\n%s", md.String())
	}

	// A process that did not finish makes no figures.
	if _, err := ReadApart(runs[:3], 4, 100); !errors.Is(err, ErrConfig) {
		t.Errorf("3 of 4 processes: %v, want ErrConfig", err)
	}
}
