package train

import (
	"slices"
	"testing"
)

// A driver's final hash fetch (FetchHashes, the model hash a run reports)
// whose owner crashes before it answers is asked again of the shards' new
// owner once a configuration without the crashed peer takes effect
// (rerouteAll), in every mode: the run ends instead of waiting for a peer
// that is gone (TestE2EAsyncCrashWithReplicas met it).
func TestFinalHashFetchOutlivesACrashedOwner(t *testing.T) {
	for _, mode := range []Mode{Sync, Async} {
		t.Run(mode.String(), func(t *testing.T) {
			tn := newTNet(t, 3, 3, mode)
			tn.leader()
			for _, name := range tn.names {
				tn.cores[name].EndOfData()
				tn.collect(name)
			}
			tn.run(200)
			for _, name := range tn.names {
				if !tn.cores[name].w.final {
					t.Fatalf("%s is not final after the end of data: %s", name, tn.cores[name].Debug())
				}
			}
			// p2 crashes: what is sent to it is lost from now on.
			gone := tn.names[2]
			delete(tn.cores, gone)
			tn.names = slices.DeleteFunc(tn.names, func(n string) bool { return n == gone })
			asker := tn.names[0]
			tn.cores[asker].FetchHashes(7)
			tn.collect(asker)
			tn.deliver(1 << 16)
			var alive []uint64
			for _, name := range tn.names {
				alive = append(alive, tn.cores[name].cfg.ID)
			}
			for _, name := range tn.names {
				tn.cores[name].Alive(alive)
				tn.collect(name)
			}
			for range 100 {
				tn.run(20)
				if fs := tn.fetched[asker]; len(fs) > 0 {
					if fs[0].ID != 7 || len(fs[0].Hashes) != tn.cores[asker].shards {
						t.Fatalf("fetched %+v, want id 7 with every shard's hash", fs[0])
					}
					return
				}
			}
			t.Fatalf("no answer to the hash fetch 2000 ticks after its owner crashed: %s", tn.cores[asker].Debug())
		})
	}
}
