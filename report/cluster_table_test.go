package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// The repetitions table gives each configuration's figures in every
// repetition, in order, and their median; a configuration that failed in
// a repetition shows "-" there and counts in no median.
func TestRepeatsTable(t *testing.T) {
	nan := Num(math.NaN())
	cfg := func(name string, eps, speedup float64) BenchConfig {
		b := BenchConfig{Name: name, ExamplesPerSec: Num(eps)}
		b.Speedup = nan
		if speedup > 0 {
			b.Speedup, b.Baseline = Num(speedup), "single/local/b1000"
		}
		return b
	}
	reps := [][]BenchConfig{
		{cfg("single/local/b1000", 200e3, 1), cfg("ring/sync/b1000/4p", 220e3, 1.1)},
		{cfg("single/local/b1000", 180e3, 1), cfg("ring/sync/b1000/4p", 234e3, 1.3)},
		{cfg("single/local/b1000", 240e3, 1)},
	}
	var b bytes.Buffer
	WriteRepeats(&b, reps)
	out := b.String()
	for _, want := range []string{
		"each of 3 interleaved repetitions",
		"| single/local/b1000 | 200.0k, 180.0k, 240.0k | 200.0k | 1.00, 1.00, 1.00 | 1.00 |",
		"| ring/sync/b1000/4p | 220.0k, 234.0k, - | 227.0k | 1.10, 1.30, - | 1.20 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// No baseline: no speedup columns.
	b.Reset()
	WriteRepeats(&b, [][]BenchConfig{{cfg("ring/sync/b100", 1e3, 0)}, {cfg("ring/sync/b100", 3e3, 0)}})
	if strings.Contains(b.String(), "speedup") || !strings.Contains(b.String(), "| ring/sync/b100 | 1.0k, 3.0k | 2.0k |") {
		t.Errorf("without a baseline:\n%s", b.String())
	}
	// Runs with round lines: their steady rounds/s in every repetition.
	b.Reset()
	withSteady := func(eps, steady float64) BenchConfig {
		c := cfg("ring/sync/b100", eps, 0)
		c.Steady = Num(steady)
		return c
	}
	WriteRepeats(&b, [][]BenchConfig{{withSteady(1e3, 120)}, {withSteady(3e3, 90.5)}, {withSteady(2e3, math.NaN())}})
	if want := "| ring/sync/b100 | 1.0k, 3.0k, 2.0k | 2.0k | 120.0, 90.5, - | 105.2 |"; !strings.Contains(b.String(), want) {
		t.Errorf("with round lines, the table lacks %q:\n%s", want, b.String())
	}
}

// The table's last line says whether the peers that ran to the end agree,
// and which stopped early (their models are partial, not compared).
func TestWriteHashLine(t *testing.T) {
	done := BenchPeer{Finished: true, ModelHash: "aaaa"}
	left := BenchPeer{Finished: true, ModelHash: "bbbb", Partial: true, Stopped: "left", StoppedAt: 40}
	stop := func(at int64) BenchPeer {
		return BenchPeer{Finished: true, Partial: true, Stopped: "job stopped", StoppedAt: at}
	}
	cases := []struct {
		b    BenchConfig
		want string
	}{
		{BenchConfig{ModelHashesAgree: true, Peers: []BenchPeer{done, done}}, "model hashes agree: yes, every peer ends with model aaaa\n"},
		{BenchConfig{ModelHashesAgree: true, Peers: []BenchPeer{done, left}},
			"model hashes agree: yes, every peer that ran to the end has model aaaa (stopped early, partial models not compared: peer 1 left at round 40)\n"},
		{BenchConfig{ModelHashesAgree: true, Peers: []BenchPeer{stop(9), stop(9)}},
			"every peer stopped before the end of training (job stopped at round 9): the models are partial, not compared\n"},
		{BenchConfig{ModelHashesAgree: false, Peers: []BenchPeer{done, done}}, "model hashes agree: NO (see the warnings)\n"},
	}
	for _, c := range cases {
		var b bytes.Buffer
		writeHashLine(&b, c.b)
		if b.String() != c.want {
			t.Errorf("got  %q\nwant %q", b.String(), c.want)
		}
	}
}
