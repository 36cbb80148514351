package ring_test

import (
	"fmt"

	"github.com/gossiptrain/gossiptrain/node/ring"
)

// A peer joins a three-peer job: the driver builds the new ring, finds the
// shards whose primary changed, and hands each over.
func Example() {
	cfg := ring.DefaultConfig()
	before, err := ring.New(cfg, []string{"peerA", "peerB", "peerC"})
	if err != nil {
		panic(err)
	}
	after, err := ring.New(cfg, []string{"peerD", "peerC", "peerB", "peerA"})
	if err != nil {
		panic(err)
	}
	fmt.Println("moved:", len(ring.Moved(before, after)))
	for _, m := range after.Members() {
		fmt.Printf("%s owns %d shards, was %d\n", m, len(after.Owned(m)), len(before.Owned(m)))
	}
	// What xxhash gives for these IDs: every moved shard went to peerD,
	// and nobody reaches the capacity ceil(320/4) = 80, so the load bound
	// moved nothing between the others.

	// Output:
	// moved: 58
	// peerA owns 53 shards, was 75
	// peerB owns 75 shards, was 100
	// peerC owns 70 shards, was 81
	// peerD owns 58 shards, was 0
}
