package e2e

// Tests of the scaling series (issue 11): bench --peers 1,2,…, --cpus and
// cluster --baseline. The end-to-end ones run the built binary.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/cluster"
	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/report"
)

// cpusArgs caps the peers when this machine can (root, a writable CPU
// controller), so the end-to-end tests cover --cpus where it works.
func cpusArgs(t *testing.T) []string {
	t.Helper()
	if err := cluster.CheckCPUGroups(); err != nil {
		t.Logf("without --cpus: %v", err)
		return nil
	}
	return []string{"--cpus", "0.5"}
}

// groupsOf lists the cgroups of --cpus that process pid created and that
// still exist.
func groupsOf(pid int) []string {
	var left []string
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"} {
		m, _ := filepath.Glob(filepath.Join(root, fmt.Sprintf("gossiptrain-%d-*", pid)))
		left = append(left, m...)
	}
	return left
}

// bench --peers 1,2 runs one plain train on all the data, then the ring on
// 2 peers splitting the same data (exchanging every batch, and every window
// of 4), and reports the speedup of one against
// the other, with the plot, and processes apart (two plain train
// processes at once, exchanging nothing); the cgroups are gone afterwards.
func TestBenchScalingSeries(t *testing.T) {
	bin := binary(t)
	out := filepath.Join(t.TempDir(), "bench")
	args := append([]string{"bench", "--peers", "1,2", "--topologies", "ring", "--modes", "sync", "--batches", "500",
		"--examples", "20000", "--dim", "65536", "--local-steps", "1,4", "--repeat", "2", "--out", out}, cpusArgs(t)...)
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("bench: %v\n%s\n%s", err, stdout.String(), tail(stderr.String(), 3000))
		}
	case <-time.After(3 * time.Minute):
		cmd.Process.Signal(syscall.SIGINT)
		<-done
		t.Fatalf("bench did not finish within 3 minutes\n%s", tail(stderr.String(), 3000))
	}
	if left := groupsOf(cmd.Process.Pid); len(left) > 0 {
		t.Errorf("cgroups left behind: %v", left)
	}
	// --repeat 2: the plan ran twice, and every configuration has two
	// figures and their median.
	for _, name := range []string{"single-b500", "ring-sync-b500-2p", "ring-sync-b500-h4-2p"} {
		if _, err := os.Stat(filepath.Join(out, "repeats", "2", name)); err != nil {
			t.Errorf("second repetition of %s: %v", name, err)
		}
	}
	rep, err := os.ReadFile(filepath.Join(out, "repeats.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"single/local/b500", "ring/sync/b500/2p", "ring/sync/b500/h4/2p"} {
		i := strings.Index(string(rep), "| "+name+" |")
		if i < 0 {
			t.Fatalf("repeats.md has no line for %s:\n%s", name, rep)
		}
		line, _, _ := strings.Cut(string(rep)[i:], "\n")
		cells := strings.Split(line, "|")
		if len(cells) < 6 || strings.Count(cells[2], ",") != 1 || strings.Count(cells[4], ",") != 1 {
			t.Errorf("repeats.md line %q: want two examples/s and two speedups", line)
		}
	}
	if !strings.Contains(stdout.String(), "in each of 2 interleaved repetitions") {
		t.Errorf("bench output lacks the repetitions table:\n%s", stdout.String())
	}
	for _, want := range []string{"scaling against one peer alone", "single/local/b500", "ring/sync/b500/2p", "speedup", "efficiency", "report.md"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("bench output lacks %q:\n%s", want, stdout.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(out, report.BenchJSONFile))
	if err != nil {
		t.Fatal(err)
	}
	var bs []report.BenchConfig
	if err := json.Unmarshal(b, &bs); err != nil {
		t.Fatal(err)
	}
	if len(bs) != 3 || bs[0].Name != "single/local/b500" || bs[1].Name != "ring/sync/b500/2p" || bs[2].Name != "ring/sync/b500/h4/2p" {
		t.Fatalf("bench.json: %d configurations, want the baseline and the ring on 2 peers with and without windows", len(bs))
	}
	if bs[2].LocalSteps != 4 || bs[2].Examples != 20000 {
		t.Errorf("the windowed ring: local steps %d, examples %d; want 4 and 20000", bs[2].LocalSteps, bs[2].Examples)
	}
	alone, ring := bs[0], bs[1]
	if alone.Examples != 20000 || ring.Examples != 20000 {
		t.Errorf("examples: alone %d, ring %d; want the same 20000 rows in both", alone.Examples, ring.Examples)
	}
	if alone.Workers != 1 || ring.Workers != 2 || ring.Baseline != alone.Name {
		t.Errorf("workers %d and %d, ring's baseline %q", alone.Workers, ring.Workers, ring.Baseline)
	}
	want := float64(ring.ExamplesPerSec) / float64(alone.ExamplesPerSec)
	if s := float64(ring.Speedup); s <= 0 || s-want > 1e-9 || want-s > 1e-9 || float64(ring.Efficiency) != s/2 {
		t.Errorf("speedup %v, efficiency %v; want %v and half of it", ring.Speedup, ring.Efficiency, want)
	}
	if float64(ring.RecvBytesPerExample) <= 0 {
		t.Errorf("ring peers received %v bytes per example: they exchange updates", ring.RecvBytesPerExample)
	}
	// The baseline is a plain train on all the files: no job.
	runs, err := report.ReadDir(filepath.Join(out, "runs", "single-b500"))
	if err != nil || len(runs) != 1 {
		t.Fatalf("the baseline's reports: %d, %v", len(runs), err)
	}
	st := runs[0].Start.Config
	if st["job"] != "" || strings.Count(st["train"], ".svm") != 2 || st["batch"] != "500" {
		t.Errorf("the baseline ran with job %q, train %q, batch %q; want plain train on both files at batch 500", st["job"], st["train"], st["batch"])
	}
	md, err := os.ReadFile(filepath.Join(out, report.ReportMDFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## Scaling") || !strings.Contains(string(md), report.PlotSpeedup+".png") {
		t.Errorf("report.md lacks the scaling section or its plot")
	}
	if st, err := os.Stat(filepath.Join(out, report.PlotSpeedup+".png")); err != nil || st.Size() == 0 {
		t.Errorf("speedup plot: %v", err)
	}
	// Processes apart: two plain train processes at once, each on the
	// file its peer of the ring trained on, in report.md, the output and
	// both repetitions.
	apart, err := report.ReadDir(filepath.Join(out, "runs", "apart-b500-2p"))
	if err != nil || len(apart) != 2 {
		t.Fatalf("processes apart: %d reports, %v; want 2 plain train processes", len(apart), err)
	}
	for i, r := range apart {
		st := r.Start.Config
		if st["job"] != "" || strings.Count(st["train"], ".svm") != 1 || r.Summary == nil || r.Summary.Examples != 10000 {
			t.Errorf("apart process %d: job %q, train %q, summary %+v; want plain train on one file, 10000 examples", i, st["job"], st["train"], r.Summary)
		}
	}
	if apart[0].Start.Config["train"] == apart[1].Start.Config["train"] {
		t.Errorf("both apart processes trained on %s; want one file each", apart[0].Start.Config["train"])
	}
	if !strings.Contains(string(md), "## Processes apart") || !strings.Contains(stdout.String(), "processes apart") ||
		!strings.Contains(string(rep), "Processes apart") {
		t.Errorf("report.md, the output or repeats.md lacks processes apart")
	}
	if _, err := os.Stat(filepath.Join(out, "repeats", "2", "apart-b500-2p")); err != nil {
		t.Errorf("second repetition of processes apart: %v", err)
	}
}

// cluster --baseline runs one plain train on all the data first and
// prints the cluster's speedup against it.
func TestClusterBaseline(t *testing.T) {
	binary(t)
	dataDir := t.TempDir()
	gen := data.DefaultGenConfig()
	gen.Rows, gen.TestRows, gen.Features, gen.Fields, gen.Parts = 20000, 2000, 1<<16, 20, 2
	meta, err := data.Generate(dataDir, gen, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(t.TempDir(), "run")
	capped := cpusArgs(t)
	args := append([]string{"cluster", "--peers", "2", "--dir", run, "--baseline",
		"--train", filepath.Join(dataDir, "train-*.svm"), "--test", meta.TestFile, "--dim", "65536",
		"--batch", "500", "--epochs", "2"}, capped...)
	code, out, errOut := runBinary(t, ".", 3*time.Minute, args...)
	if code != 0 {
		t.Fatalf("cluster: exit %d\n%s\n%s", code, out, tail(errOut, 3000))
	}
	if !strings.Contains(out, "one peer alone (plain train on all the data, same cap)") || !strings.Contains(out, "the cluster's speedup") {
		t.Errorf("the result table lacks the baseline:\n%s", out)
	}
	if strings.Contains(out, "single: 1 peers") {
		t.Errorf("the baseline got a cluster table of its own:\n%s", out)
	}
	r, err := report.ReadFile(filepath.Join(run, "baseline", "peer-0.jsonl"))
	if err != nil || r.Summary == nil {
		t.Fatalf("the baseline's report: %v", err)
	}
	if r.Summary.Topology != "single" || r.Summary.Examples != 2*gen.Rows || r.Summary.Epochs != 2 {
		t.Errorf("baseline: topology %s, %d examples, %d epochs; want plain train on 2 epochs x %d rows",
			r.Summary.Topology, r.Summary.Examples, r.Summary.Epochs, gen.Rows)
	}
	if capped != nil {
		// Capped at half a core, every process trains on one thread (Go
		// alone would run two, which cost a lone peer about a quarter of
		// its speed at 0.4 core).
		for _, f := range []string{filepath.Join(run, "baseline", "peer-0.jsonl"), filepath.Join(run, "peer-0.jsonl"), filepath.Join(run, "peer-1.jsonl")} {
			if r, err := report.ReadFile(f); err != nil || r.Summary == nil || r.Summary.Threads != 1 {
				t.Errorf("%s: threads %v (%v), want 1 under --cpus 0.5", f, func() any {
					if r == nil || r.Summary == nil {
						return nil
					}
					return r.Summary.Threads
				}(), err)
			}
		}
	}
	md, err := os.ReadFile(filepath.Join(run, report.ReportMDFile))
	if err != nil || !strings.Contains(string(md), "## Scaling") {
		t.Errorf("report.md lacks the scaling section: %v", err)
	}
}
