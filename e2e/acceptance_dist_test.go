package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/report"
)

// Acceptance (issue 33): a distributed run with default epochs stops on
// held-out rows too. On 100k generated click rows in 4 parts, `cluster
// --peers 4` with no flags but --train and --test: every peer holds out
// every 10th row of its part, stops when their loss stops improving (well
// before the cap of infer.DistMaxEpochs, having trained whole epochs of
// the rest), and the run ends with one model on every peer whose test
// log-loss is within 1% of one plain train's with its defaults on all the
// rows (the cluster's baseline).
func TestAcceptanceClusterStopsOnHeldOutRows(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := t.TempDir()
	if code, _, stderr := gt(t, "gen", "--out", dir, "--rows", "100000", "--test-rows", "20000", "--features", "1048576", "--parts", "4"); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr)
	}
	run := filepath.Join(t.TempDir(), "run")
	code, out, errOut := runBinary(t, ".", 5*time.Minute, "cluster", "--peers", "4", "--dir", run,
		"--train", filepath.Join(dir, "train-*.svm"), "--test", filepath.Join(dir, "test.svm"))
	if code != 0 {
		t.Fatalf("cluster: exit %d\n%s\n%s", code, out, tail(errOut, 3000))
	}
	base, err := report.ReadFile(filepath.Join(run, "baseline", "peer-0.jsonl"))
	if err != nil || base.Summary == nil {
		t.Fatalf("the baseline's report: %v", err)
	}
	var peers []*report.Summary
	for i := range 4 {
		r, err := report.ReadFile(filepath.Join(run, fmt.Sprintf("peer-%d.jsonl", i)))
		if err != nil || r.Summary == nil {
			t.Fatalf("peer %d: %v", i, err)
		}
		s := r.Summary
		peers = append(peers, s)
		t.Logf("peer %d: %d epochs, held-out losses %.4f, test log-loss %.4f", i, s.Epochs, s.HoldoutLogLoss, s.TestLogLoss)
		if len(s.HoldoutLogLoss) < 2 || s.Epochs >= infer.DistMaxEpochs || s.KeptEpoch != 0 {
			t.Errorf("peer %d ran %d epochs with %d held-out losses (kept epoch %d); want a stop on them before the cap of %d, the last model kept",
				i, s.Epochs, len(s.HoldoutLogLoss), s.KeptEpoch, infer.DistMaxEpochs)
		}
		if want := int64(s.Epochs) * 22500; s.Examples != want { // 25000 rows a part, every 10th held out
			t.Errorf("peer %d trained %d examples, want %d: %d whole epochs of the rows not held out", i, s.Examples, want, s.Epochs)
		}
		if s.ModelHash != peers[0].ModelHash || s.TestLogLoss != peers[0].TestLogLoss {
			t.Errorf("peer %d ends with model %s (test log-loss %.6f), peer 0 with %s (%.6f)", i, s.ModelHash, s.TestLogLoss, peers[0].ModelHash, peers[0].TestLogLoss)
		}
	}
	b := base.Summary
	t.Logf("one train alone: %d epochs (kept %d), test log-loss %.4f; the cluster %.4f (%+.2f%%)",
		b.Epochs, b.KeptEpoch, b.TestLogLoss, peers[0].TestLogLoss, 100*(float64(peers[0].TestLogLoss)/float64(b.TestLogLoss)-1))
	if b.KeptEpoch < 1 {
		t.Errorf("the baseline kept epoch %d: it did not run with --epochs auto's held-out rows", b.KeptEpoch)
	}
	if float64(peers[0].TestLogLoss) > float64(b.TestLogLoss)*1.01 {
		t.Errorf("the cluster's test log-loss %.4f is more than 1%% above one train's %.4f", peers[0].TestLogLoss, b.TestLogLoss)
	}
}

// Issue 31: windows of 16 batches keep the lone peer's quality in sync
// mode, because --combine auto caps a row's summed changes at 1.8 times
// their mean (capped, node/train/combine.go): 4 peers end within 0.5% of
// one train's test log-loss, where the plain sum of the same windows
// overshoots the rows every worker moves and ends more than 2% above it.
// Sync runs compute the same model whatever the machine's load.
func TestAcceptanceLargeWindowsKeepQuality(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := t.TempDir()
	if code, _, stderr := gt(t, "gen", "--out", dir, "--rows", "200000", "--test-rows", "20000", "--features", "1048576", "--parts", "4"); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, stderr)
	}
	final := func(combine string, baseline bool) (cluster, alone float64) {
		run := filepath.Join(t.TempDir(), "run")
		code, out, errOut := runBinary(t, ".", 5*time.Minute, "cluster", "--peers", "4", "--dir", run,
			"--epochs", "1", "--batch", "100", "--local-steps", "16", "--combine", combine, fmt.Sprintf("--baseline=%v", baseline),
			"--train", filepath.Join(dir, "train-*.svm"), "--test", filepath.Join(dir, "test.svm"))
		if code != 0 {
			t.Fatalf("cluster --combine %s: exit %d\n%s\n%s", combine, code, out, tail(errOut, 3000))
		}
		r, err := report.ReadFile(filepath.Join(run, "peer-0.jsonl"))
		if err != nil || r.Summary == nil {
			t.Fatalf("--combine %s: peer 0's report: %v", combine, err)
		}
		cluster = float64(r.Summary.TestLogLoss)
		if baseline {
			b, err := report.ReadFile(filepath.Join(run, "baseline", "peer-0.jsonl"))
			if err != nil || b.Summary == nil {
				t.Fatalf("the baseline's report: %v", err)
			}
			alone = float64(b.Summary.TestLogLoss)
		}
		return cluster, alone
	}
	capped, alone := final("auto", true)
	sum, _ := final("sum", false)
	t.Logf("H = 16, 4 peers: auto (capped) %.4f (%+.2f%%), sum %.4f (%+.2f%%), one train %.4f",
		capped, 100*(capped/alone-1), sum, 100*(sum/alone-1), alone)
	if capped > alone*1.005 {
		t.Errorf("4 peers with windows of 16 and --combine auto end at test log-loss %.4f, more than 0.5%% above one train's %.4f", capped, alone)
	}
	if sum < alone*1.02 {
		t.Errorf("the plain sum of windows of 16 ends at %.4f, within 2%% of one train's %.4f: the test no longer shows what capping buys", sum, alone)
	}
}
