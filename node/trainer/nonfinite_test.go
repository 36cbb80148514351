package trainer

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/sgd"
)

// without drops features 5 and 6 from planted rows, so that only the
// overflowing rows have them and their weights stay 0 (the overflow then
// does not depend on what the run learnt before).
func without56(b data.Batch) data.Batch {
	var out data.Batch
	out.Reset()
	for r := range b.Rows() {
		idx, val := b.Row(r)
		for i, k := range idx {
			if k != 5 && k != 6 {
				out.Add(k, val[i])
			}
		}
		out.EndRow(b.Labels[r])
	}
	return out
}

// overflowingPeer writes peer 1's data as a libsvm file: its 600 planted
// rows with lines 201-300 replaced by the row "1 6:3e38 7:3e38"
// (finite values the parser accepts; two of them in a batch overflow its
// gradient to -Inf). It returns the file.
func overflowingPeer(t *testing.T) string {
	t.Helper()
	rows := without56(planted(2, 600, 500, 5))
	var sb strings.Builder
	for r := range rows.Rows() {
		if r >= 200 && r < 300 {
			sb.WriteString("1 6:3e38 7:3e38\n")
			continue
		}
		fmt.Fprintf(&sb, "%g", rows.Labels[r])
		idx, val := rows.Row(r)
		for i, k := range idx {
			fmt.Fprintf(&sb, " %d:%g", k+1, val[i])
		}
		sb.WriteString("\n")
	}
	p := filepath.Join(t.TempDir(), "train.svm")
	if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runOverflow runs two peers, peer 1 on overflowingPeer's file, with
// NonFinite policy nf.
func runOverflow(t *testing.T, mode train.Mode, nf sgd.NonFinite) (string, []Summary, []error) {
	t.Helper()
	file := overflowingPeer(t)
	good := without56(planted(1, 600, 500, 5))
	open := func(i int) func(int) (data.Source, error) {
		if i == 1 {
			return func(int) (data.Source, error) { return data.Open([]string{file}, data.Options{}) }
		}
		return func(int) (data.Source, error) { return &rowsSource{b: good}, nil }
	}
	sums, errs := startPeersOn(t, 2, mode, train.Need, 1, nil, func(i int, cfg *Config, h *Hooks) { cfg.NonFinite = nf }, open)
	return file, sums, errs
}

// checkFinite fails the test when a peer's run evaluated to a loss that
// is not finite or not near what the data allows.
func checkGoodModel(t *testing.T, i int, s Summary) {
	t.Helper()
	if !s.Evaluated || math.IsNaN(s.Final.LogLoss) || s.Final.LogLoss > 0.69 {
		t.Errorf("peer %d: final evaluation %+v (evaluated %v): want a finite log-loss better than chance", i, s.Final, s.Evaluated)
	}
}

// Issue 30: 100 rows "1 6:3e38 7:3e38" on one peer overflowed its batch
// gradient to -Inf; the core link refused the push, the worker sent it
// again for ever and the job never ended. Now the gradient never leaves
// the peer: by default that peer fails within seconds, with an error
// naming the batch's lines and the feature, after leaving the run
// gracefully, and the other peer finishes alone with a sound model.
func TestNonFiniteBatchFailsOnlyItsPeer(t *testing.T) {
	for _, mode := range []train.Mode{train.Sync, train.Async} {
		t.Run(mode.String(), func(t *testing.T) {
			file, sums, errs := runOverflow(t, mode, sgd.FailNonFinite)
			var ne *sgd.NonFiniteError
			if !errors.As(errs[1], &ne) {
				t.Fatalf("peer 1 (the overflowing rows): %v, want a *sgd.NonFiniteError", errs[1])
			}
			want := file + ":201-250 (epoch 1, rows 201-250): the batch's gradient is not finite (-Inf at feature 5 (0-based), whose values in these rows reach 3e+38)"
			if !strings.HasPrefix(errs[1].Error(), want) || !strings.HasSuffix(errs[1].Error(), "or pass --nonfinite skip") {
				t.Errorf("peer 1's error\n%v\nwant it to start\n%s", errs[1], want)
			}
			if sums[1].Seconds > 15 {
				t.Errorf("peer 1 took %.1f s to fail", sums[1].Seconds)
			}
			if errs[0] != nil {
				t.Fatalf("peer 0 (good rows): %v; want it to finish", errs[0])
			}
			if sums[0].Examples != 1200 {
				t.Errorf("peer 0 trained %d examples, want 1200", sums[0].Examples)
			}
			checkGoodModel(t, 0, sums[0])
		})
	}
}

// With --nonfinite skip both peers finish: the overflowing batches (100
// rows in batches of 50, two epochs: 4) are counted and their rows left
// out, and the model is the same on both.
func TestNonFiniteBatchSkipped(t *testing.T) {
	for _, mode := range []train.Mode{train.Sync, train.Async} {
		t.Run(mode.String(), func(t *testing.T) {
			_, sums, errs := runOverflow(t, mode, sgd.SkipNonFinite)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("peer %d: %v", i, err)
				}
				checkGoodModel(t, i, sums[i])
			}
			if sums[1].SkippedNonFinite != 4 || sums[0].SkippedNonFinite != 0 {
				t.Errorf("skipped %d and %d batches; want 0 on peer 0, 4 on peer 1", sums[0].SkippedNonFinite, sums[1].SkippedNonFinite)
			}
			if sums[1].Examples != 1000 || sums[0].Examples != 1200 {
				t.Errorf("trained %d and %d examples; want 1200 and 1000 (the 100 bad rows left out twice)", sums[0].Examples, sums[1].Examples)
			}
			if sums[0].ModelHash != sums[1].ModelHash {
				t.Errorf("the peers end with models %x and %x", sums[0].ModelHash, sums[1].ModelHash)
			}
		})
	}
}
