package cli

// Tests of the cluster and bench commands (issue 6). The end-to-end ones
// run the built binary (binary(t)): the commands start processes of their
// own executable, which in-process tests would make this test binary.

import (
	"bytes"
	"strings"
	"testing"
)

func TestClusterAndBenchHelp(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		want []string
	}{
		{"cluster", []string{"--peers processes", "(default 4)", "--netns", "--rate rate", "(default \"1gbit\")",
			"train: Data:", "--train FILE", "--batch int", "(default 100)", "--topology ring", "--mode", "Examples:",
			"--swarm-key FILE", "DIR/swarm.key"}},
		{"bench", []string{"--topologies list", "(default \"master,ring\")", "--modes list", "(default \"sync\")",
			"--batches list", "(default \"1000\")", "--examples int", "(default 1000000)", "--netns", "--optimizer"}},
	} {
		var out, errb bytes.Buffer
		if code := Main([]string{c.cmd, "--help"}, &out, &errb); code != 0 {
			t.Fatalf("%s --help: exit %d: %s", c.cmd, code, errb.String())
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s --help lacks %q", c.cmd, w)
			}
		}
		// Flags cluster and bench set on every peer themselves are not offered.
		for _, f := range []string{"--report FILE", "--listen", "--identity", "--part"} {
			if strings.Contains(out.String(), "\n  "+f) {
				t.Errorf("%s --help offers %s, which it sets on every peer itself", c.cmd, f)
			}
		}
	}
	var out, errb bytes.Buffer
	Main([]string{"help"}, &out, &errb)
	if !strings.Contains(out.String(), "cluster") || !strings.Contains(out.String(), "bench") {
		t.Errorf("help does not list cluster and bench:\n%s", out.String())
	}
}

func TestClusterAndBenchUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "--peers", "0"}, "--peers: want at least 1"},
		{[]string{"cluster", "--delay", "1ms"}, "--delay: needs --netns"},
		{[]string{"cluster", "--netns", "--rate", "fast"}, "--rate:"},
		{[]string{"cluster", "--part", "1/2"}, "-part"},
		{[]string{"cluster", "extra"}, "unexpected argument"},
		{[]string{"cluster", "--swarm-key", "/nonexistent/job.key"}, "--swarm-key: swarm key file /nonexistent/job.key"},
		{[]string{"bench", "--topologies", "star"}, "--topologies: \"star\": want master or ring"},
		{[]string{"bench", "--modes", "bsp"}, "--modes: \"bsp\""},
		{[]string{"bench", "--batches", "0"}, "--batches: \"0\""},
		{[]string{"bench", "--repeat", "0"}, "--repeat: want at least 1, got 0"},
		{[]string{"bench", "--examples", "2", "--peers", "4"}, "--examples: want at least one example per peer"},
		{[]string{"cluster", "--target-logloss", "-1"}, "--target-logloss: -1: want a log-loss > 0"},
		{[]string{"cluster", "--eval-points", "-2"}, "--eval-points: want 0 or more, got -2"},
		{[]string{"bench", "--target-logloss", "NaN"}, "--target-logloss: NaN"},
		{[]string{"bench", "--local-steps", "1,4", "--combine", "mean"}, "--combine: mean averages windows' changes: --local-steps 1"},
		{[]string{"bench", "--local-steps", "4", "--combine", "trimmed"}, "--combine: trimmed combines one batch's gradients: --local-steps 4"},
		{[]string{"bench", "--batch", "10"}, "-batch"},
	} {
		code, _, stderr := gt(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %q", c.args, code, stderr, c.want)
		}
	}
}

// The topologies list replaces its default rather than adding to it.
func TestDefaultList(t *testing.T) {
	l := defaultList{vals: []string{"master", "ring"}}
	for _, s := range []string{"ring", "ring,master", "ring"} {
		if err := l.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.String(); got != "ring,master" {
		t.Errorf("after Set(ring), Set(ring,master), Set(ring): %q, want \"ring,master\"", got)
	}
}

func TestClusterAndBenchScalingUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--peers", "0,2"}, "--peers: \"0\""},
		{[]string{"bench", "--peers", "two"}, "--peers: \"two\""},
		{[]string{"bench", "--cpus", "0.001"}, "--cpus: 0.001: want at least 0.01"},
		{[]string{"cluster", "--cpus", "-1"}, "--cpus: -1"},
		{[]string{"bench", "--peers", "1,8", "--examples", "4"}, "--examples: want at least one example per peer (8)"},
	} {
		code, _, stderr := gt(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %q", c.args, code, stderr, c.want)
		}
	}
	for _, c := range []struct {
		cmd  string
		want []string
	}{
		{"cluster", []string{"--cpus cores", "--baseline", "speedup"}},
		{"bench", []string{"--cpus cores", "Measuring scaling", "--peers 1,2,4,8", "bench --cpus 0.4 --peers 1,2,4"}},
	} {
		var out, errb bytes.Buffer
		if code := Main([]string{c.cmd, "--help"}, &out, &errb); code != 0 {
			t.Fatalf("%s --help: exit %d", c.cmd, code)
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s --help lacks %q", c.cmd, w)
			}
		}
	}
}
