package cluster

import (
	"slices"
	"strings"
	"testing"
)

// TestAutoLocalSteps: the peers of a cluster get --local-steps 2 in sync
// beyond 5 peers and 1 in ssp and async beyond 4 where the user left the
// window to auto (train.AutoLocalSteps: a peer alone cannot know how many
// come; the sync owners add every worker's window up, the others take
// each over the workers); fewer, a
// window the user set, the flags that exchange every batch, combines
// of the user's and the mlp get nothing, so
// train's own auto or the user's value holds.
func TestAutoLocalSteps(t *testing.T) {
	for _, tc := range []struct {
		peers int
		args  []string
		want  string // the window the peer's command line ends with ("": train's auto)
	}{
		{8, nil, "2"},
		{6, []string{"--mode=sync"}, "2"},
		{5, []string{"--mode=sync"}, ""},
		{5, []string{"--mode=async"}, "1"},
		{8, []string{"--mode", "sync", "--batch", "100"}, "2"},
		{8, []string{"--local-steps=auto"}, "2"},
		{4, nil, ""},
		{2, []string{"--mode=sync"}, ""},
		{8, []string{"--mode=async"}, "1"},
		{8, []string{"--mode", "ssp"}, "1"},
		{4, []string{"--mode=async"}, ""},
		{8, []string{"--local-steps=4"}, "4"},
		{8, []string{"--local-steps", "1"}, "1"},
		{8, []string{"--gather=full"}, ""},
		{8, []string{"--combine=trimmed"}, ""},
		{8, []string{"--combine=sum"}, "2"},
		{8, []string{"--combine=capped"}, ""},
		{8, []string{"--combine=mean"}, ""},
		{8, []string{"--model", "mlp"}, ""},
		{8, []string{"--model", "mlp", "--mode=async"}, ""},
		{8, []string{"--mode=async", "--combine=sum"}, ""},
	} {
		cfg := DefaultConfig()
		cfg.Peers, cfg.TrainArgs = tc.peers, tc.args
		r := &runner{cfg: cfg}
		for i := range tc.peers {
			a := r.args(i, "/ip4/127.0.0.1/tcp/1/p2p/x")
			got, _ := argValue(a, "local-steps")
			if got == "auto" {
				got = ""
			}
			if got != tc.want {
				t.Errorf("%d peers, %v: peer %d's --local-steps is %q, want %q (%s)", tc.peers, tc.args, i, got, tc.want, strings.Join(a, " "))
			}
			if n := slices.Index(a, "--local-steps"); n >= 0 && slices.Index(a[n+1:], "--local-steps") >= 0 {
				t.Errorf("%d peers, %v: --local-steps twice: %s", tc.peers, tc.args, strings.Join(a, " "))
			}
		}
	}
}
