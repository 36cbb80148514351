package cli

import (
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/node/train"
)

// TestWindowFlags pins what --local-steps and --combine resolve to, as
// docs/distributed.md's "Windows of local steps" tells a user: auto is 4
// in sync and 8 in ssp and async, with sum in sync (job.Dist.combineFor
// makes it capped for an MLP and for windows of more than 4) and mean
// otherwise;
// 1 where a batch's gradients must be combined (--gather full,
// --combine trimmed); and the combinations that cannot run are refused
// naming the flag.
func TestWindowFlags(t *testing.T) {
	cases := []struct {
		args    []string
		h       int
		combine train.Combine
		err     string
	}{
		{nil, 4, train.Sum, ""},
		{[]string{"--mode", "async", "--combine", "capped"}, 8, train.Capped, ""},
		{[]string{"--local-steps", "1", "--combine", "capped"}, 0, 0, "--combine: capped combines windows' changes"},
		{[]string{"--mode", "async"}, 8, train.Mean, ""},
		{[]string{"--mode", "ssp", "--staleness", "2"}, 8, train.Mean, ""},
		{[]string{"--gather", "full"}, 1, train.Sum, ""},
		{[]string{"--combine", "trimmed"}, 1, train.Trimmed, ""},
		{[]string{"--local-steps", "1"}, 1, train.Sum, ""},
		{[]string{"--mode", "async", "--local-steps", "1"}, 1, train.Sum, ""},
		{[]string{"--local-steps", "16", "--combine", "mean"}, 16, train.Mean, ""},
		{[]string{"--mode", "async", "--combine", "sum"}, 8, train.Sum, ""},
		{[]string{"--local-steps", "1", "--combine", "mean"}, 0, 0, "--combine: mean averages windows' changes"},
		{[]string{"--local-steps", "4", "--combine", "trimmed"}, 0, 0, "--combine: trimmed combines one batch's gradients"},
		{[]string{"--local-steps", "4", "--gather", "full"}, 0, 0, "--local-steps: windows of local steps need --gather need"},
		{[]string{"--local-steps", "0"}, 0, 0, "--local-steps: \"0\""},
		{[]string{"--combine", "median"}, 0, 0, "--combine: \"median\""},
		{[]string{"--optimizer-state", "workers"}, 4, train.Sum, ""},
		{[]string{"--optimizer-state", "owners"}, 4, train.Sum, ""},
		{[]string{"--optimizer-state", "peers"}, 0, 0, "--optimizer-state: \"peers\": want auto, owners or workers"},
		{[]string{"--optimizer", "ftrl", "--optimizer-state", "workers"}, 0, 0, "--optimizer-state: workers: ftrl's weights follow from its state"},
	}
	for _, tc := range cases {
		c, tf := newTrainCommand()
		if err := c.flags.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		d, err := checkDistFlags(tf)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if d.LocalSteps != tc.h || d.Combine != tc.combine {
			t.Errorf("%v: --local-steps %d --combine %v, want %d and %v", tc.args, d.LocalSteps, d.Combine, tc.h, tc.combine)
		}
	}
}
