package sim

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/node/train"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "replay this seed only (with -v: its event trace)")
	seedsFlag = flag.Int("seeds", 0, "seeds per mix (0: the CI default; thousands for a soak)")
	mixFlag   = flag.String("mix", "", "run only the mixes whose name contains this")
)

// mix is a family of schedules: one configuration of the run and of its
// faults; seeds vary everything else.
type mix struct {
	name  string
	seeds int
	opts  func(seed uint64) Options
}

func base(seed uint64, mode train.Mode, replicas int) Options {
	return Options{
		Seed: seed, Mode: mode, Staleness: 2, Gather: train.Need, Peers: 3, Replicas: replicas, Shards: 16, VNodes: 8,
		Dim: 200, Rows: 60, Batch: 6, Fields: 4, Epochs: 1, MaxTicks: 40000,
		Faults: Faults{DeadAfter: 40},
	}
}

func mixes() []mix {
	var out []mix
	for _, mode := range []train.Mode{train.Sync, train.SSP, train.Async} {
		m := mode
		out = append(out,
			mix{fmt.Sprintf("%s/clean", m), 10, func(seed uint64) Options {
				return base(seed, m, 1)
			}},
			mix{fmt.Sprintf("%s/lossy", m), 20, func(seed uint64) Options {
				o := base(seed, m, 1)
				o.Faults.Drop, o.Faults.Dup, o.Faults.Delay, o.Faults.Chaos = 0.05, 0.05, 6, 3000
				return o
			}},
		)
	}
	return out
}

// TestSeeds runs every mix over its seeds (or -seeds N each), or replays
// -seed N.
func TestSeeds(t *testing.T) {
	start := time.Now()
	runs, fails := 0, 0
	for _, mx := range mixes() {
		if *mixFlag != "" && !strings.Contains(mx.name, *mixFlag) {
			continue
		}
		n := mx.seeds
		if *seedsFlag > 0 {
			n = *seedsFlag
		}
		for i := range n {
			seed := uint64(i + 1)
			if *seedFlag != 0 {
				if i > 0 {
					break
				}
				seed = *seedFlag
			}
			o := mx.opts(seed)
			o.Record = *seedFlag != 0 && testing.Verbose()
			res := Run(o)
			runs++
			if res.Failed() {
				fails++
				t.Errorf("%s seed %d: %d violations (replay: go test ./node/train/sim -run TestSeeds -mix %s -seed %d -v):\n  %s",
					mx.name, seed, len(res.Violations), mx.name, seed, strings.Join(res.Violations, "\n  "))
				if fails > 10 {
					t.Fatal("too many failures")
				}
			}
			if o.Record {
				for _, l := range res.Trace {
					t.Log(l)
				}
				t.Logf("ticks %d rounds %d model %x stats %+v", res.Ticks, res.Rounds, res.Model, res.Stats)
			}
		}
	}
	t.Logf("%d runs, %d failed, %v", runs, fails, time.Since(start).Round(time.Millisecond))
}
