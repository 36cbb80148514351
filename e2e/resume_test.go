package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/report"
)

// resumeTrain runs one peer of job "resume" (a cluster of one: --job
// makes train distributed) and returns its exit status, its log and its
// report.
func resumeTrain(t *testing.T, data []string, ckpt string, extra ...string) (int, string, *report.Run) {
	t.Helper()
	rep := filepath.Join(t.TempDir(), "report.jsonl")
	args := append([]string{"train", "--job", "resume", "--identity", filepath.Join(filepath.Dir(ckpt), "id"),
		"--listen", "/ip4/127.0.0.1/tcp/0", "--checkpoint-dir", ckpt, "--report", rep}, data...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary(t), append(args, extra...)...).CombinedOutput()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	run, _ := report.ReadFile(rep)
	return code, string(out), run
}

// --resume with no checkpoint fails, naming --checkpoint-dir and the
// directory, and trains nothing; --resume=auto starts a new run from
// round 0 then.
func TestTrainResumeWithoutCheckpoints(t *testing.T) {
	train, _, dim := e2eDataRows(t, 4000)
	data := []string{"--train", train, "--dim", fmt.Sprint(dim), "--model", "logreg", "--batch", "50", "--epochs", "1"}
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	code, stderr, run := resumeTrain(t, data, ckpt, "--resume")
	if code == 0 || !strings.Contains(stderr, "--checkpoint-dir: --resume: ") || !strings.Contains(stderr, ckpt) ||
		!strings.Contains(stderr, "no peer has a checkpoint") || !strings.Contains(stderr, "--resume=auto") {
		t.Errorf("--resume with an empty --checkpoint-dir: exit %d, stderr:\n%s\nwant a failure naming --checkpoint-dir, %s and --resume=auto", code, stderr, ckpt)
	}
	if run != nil && run.Summary != nil {
		t.Errorf("--resume with no checkpoint trained anyway: %+v", run.Summary)
	}
	code, stderr, run = resumeTrain(t, data, ckpt, "--resume=auto")
	if code != 0 || run == nil || run.Summary == nil {
		t.Fatalf("--resume=auto with an empty --checkpoint-dir: exit %d\n%s", code, stderr)
	}
	if s := run.Summary; s.ResumedAt != 0 || s.Examples != 4000 || run.Start.Config["resume"] != "auto" {
		t.Errorf("--resume=auto: resumed at %d, trained %d examples, report says resume=%q: want a new run of all 4000 rows, resume=auto",
			s.ResumedAt, s.Examples, run.Start.Config["resume"])
	}
}

// A newest checkpoint cut in half is passed over: --resume goes on from
// the one before, and the log says why (the unit tests:
// node/trainer TestScanSkipsDamagedCheckpoints and
// TestStartersResumeFromTheRoundBeforeADamagedFile).
func TestTrainResumePassesOverADamagedCheckpoint(t *testing.T) {
	train, _, dim := e2eDataRows(t, 20000)
	// --local-steps 1: a round a batch, so the run lasts long enough for
	// more than two checkpoints 100ms apart (windows of 4 end it in about
	// a second, with one or none); 40 epochs, since a CI run of 20 ended
	// with none (1.2 s for the whole test, against about 2 s usually).
	data := []string{"--train", train, "--dim", fmt.Sprint(dim), "--model", "logreg", "--batch", "50", "--epochs", "40", "--local-steps", "1"}
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	code, stderr, _ := resumeTrain(t, data, ckpt, "--checkpoint-every", "100ms")
	if code != 0 {
		t.Fatalf("the run that writes checkpoints: exit %d\n%s", code, stderr)
	}
	files, _ := filepath.Glob(filepath.Join(ckpt, "*", "round-*.ckpt"))
	if len(files) != 2 {
		t.Fatalf("the run left checkpoints %v, want its newest 2; its output:\n%s", files, stderr)
	}
	rounds := make([]uint64, len(files))
	for i, f := range files {
		fmt.Sscanf(filepath.Base(f), "round-%d.ckpt", &rounds[i])
	}
	older, newer := slices.Min(rounds), slices.Max(rounds)
	newest := filepath.Join(filepath.Dir(files[0]), fmt.Sprintf("round-%d.ckpt", newer))
	b, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newest, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	code, stderr, run := resumeTrain(t, data, ckpt, "--resume")
	if code != 0 || run == nil || run.Summary == nil {
		t.Fatalf("--resume with the newest checkpoint cut in half: exit %d\n%s", code, stderr)
	}
	if run.Summary.ResumedAt != older {
		t.Errorf("resumed at round %d, want %d (round %d's file is cut in half)", run.Summary.ResumedAt, older, newer)
	}
	if want := fmt.Sprintf("checkpoint round-%d.ckpt is damaged (truncated: ", newer); !strings.Contains(stderr, want) ||
		!strings.Contains(stderr, fmt.Sprintf("resuming from round %d", older)) {
		t.Errorf("the log lacks %q ... resuming from round %d:\n%s", want, older, stderr)
	}
}
