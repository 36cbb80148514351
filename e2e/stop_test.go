package e2e

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/report"
)

// Issue 12: a peer that leaves mid-run reports its run as partial: test
// metrics null (not 0), the round it stopped at, a --save model marked
// partial; and "gossiptrain report" on every peer's report does not say
// the hashes disagree (the leaver's model is its own), but that it left.
func TestLeaverReportsAPartialRun(t *testing.T) {
	// Eight epochs: a shorter run can end before the signal lands (the
	// report's round lines reach the disk in buffered batches).
	r := newChurnRun(t, 3, append(churnData(t), "--epochs", "8")...)
	save := filepath.Join(r.dir, "leaver.gt")
	ps := []*churnProc{
		r.start(0, "--min-peers", "3", "--part", "1/3"),
		r.start(1, "--min-peers", "3", "--part", "2/3"),
		r.start(2, "--min-peers", "3", "--part", "3/3", "--save", save),
	}
	r.waitRound(ps[2], 30)
	ps[2].cmd.Process.Signal(syscall.SIGTERM)
	left := r.finish(ps[2]).Summary
	if !left.Partial || left.Stopped != "left" || left.StoppedAt < 30 || left.StoppedAt != left.Rounds {
		t.Errorf("leaver's summary: partial %v, stopped %q at round %d (rounds %d); want partial, left, at its last round",
			left.Partial, left.Stopped, left.StoppedAt, left.Rounds)
	}
	for name, v := range map[string]report.Num{"test_logloss": left.TestLogLoss, "test_error": left.TestError, "test_accuracy": left.TestAccuracy} {
		if !math.IsNaN(float64(v)) {
			t.Errorf("leaver's %s = %v, want null", name, v)
		}
	}
	m, err := model.LoadFile(save)
	if err != nil {
		t.Fatal(err)
	}
	if m.Meta["partial"] != "true" || m.Meta["stopped_at_round"] != fmt.Sprint(left.StoppedAt) || m.Meta["stopped"] != "left" {
		t.Errorf("saved model's meta %v: want partial, stopped_at_round %d, stopped left", m.Meta, left.StoppedAt)
	}
	if !strings.Contains(ps[2].logTail(), `"partial":true`) {
		t.Errorf("the leaver's log does not say the saved model is partial:\n%s", ps[2].logTail())
	}
	runs := r.finishAll(ps, 2)
	for _, run := range runs {
		if run.Summary.Partial || math.IsNaN(float64(run.Summary.TestLogLoss)) {
			t.Errorf("%s ran to the end but reports partial %v, log-loss %v", short(run.Summary.PeerID), run.Summary.Partial, run.Summary.TestLogLoss)
		}
	}
	out := filepath.Join(r.dir, "out")
	code, stdout, stderr := runBinary(t, ".", time.Minute, "report", "--out", out, r.dir)
	if code != 0 {
		t.Fatalf("report: exit %d\n%s\n%s", code, stdout, stderr)
	}
	md, err := os.ReadFile(filepath.Join(out, report.ReportMDFile))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(md), "hashes disagree") {
		t.Errorf("report.md says the hashes disagree because a peer left:\n%s", md)
	}
	if !strings.Contains(string(md), "stopped early (left) at round") || !strings.Contains(string(md), "(partial: left at round") {
		t.Errorf("report.md does not say the leaver is partial:\n%s", md)
	}
}
