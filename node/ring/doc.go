// Package ring decides which peers own which model shards: consistent
// hashing with virtual nodes and, by default, bounded loads.
//
// It is a pure function from (Config, member set) to an assignment: no I/O,
// no clocks, no goroutines. Every peer that holds the same member set (from
// package node/membership) builds the same Ring and so agrees on owners
// without talking. A Ring is immutable and safe for concurrent use.
//
// # Driving it
//
// The node driver builds a ring whenever the membership epoch changes and
// compares it with the previous one:
//
//	next, err := ring.New(cfg, view.Members)
//	for _, s := range ring.Moved(prev, next) {
//		// hand shard s from prev.Primary(s) to next.Primary(s)
//	}
//
// Senders split a gradient by Primary(shard); Owners(shard) adds the
// standbys that keep optimizer state for fail-over. Master(cfg, id) is the
// master topology: every shard on one peer.
//
// # Positions (exact byte strings)
//
// With h = Config.Hash (xxhash64, seed 0, by default):
//
//   - member m puts Config.VNodes points at h(m + "#" + decimal(i)) for
//     i = 0..VNodes-1, e.g. h("12D3KooW...#0");
//   - shard s sits at h("shard#" + decimal(s)), e.g. h("shard#17");
//   - points are ordered by position, then member ID, then i; a shard's
//     walk starts at the first point at or after its position and wraps
//     past the largest position to the smallest.
//
// # Placement
//
// Plain consistent hashing (MaxLoadPercent = 0) gives shard s to the first
// Replicas distinct members on its walk. That moves the minimum on churn (a
// join moves shards only to the newcomer, a leave only the leaver's), but
// shard counts are discrete and random: measured over 1000 random sets of 16
// peer IDs with 64 vnodes and 256 shards (TestBalance), the busiest peer
// holds max/mean = 1.50 at the median set, 1.75 at p90, 1.94 at p99 and 2.25
// at worst; 975 of the 1000 sets exceed 1.25. The busiest peer paces a
// synchronous round, so that is up to twice the work it should be.
//
// The default is consistent hashing with bounded loads (Mirrokni, Thorup and
// Zadimoghaddam, "Consistent Hashing with Bounded Loads", SODA 2018). The N
// members share T = max(S, ceil(S*MaxLoadPercent/100)) capacity units: each
// gets floor(T/N), and the T mod N members whose point 0 comes first on the
// ring get one more. Shards are placed in index order 0..S-1, each on the
// first member of its walk that still has room. With the defaults no member
// holds more than 1.25x the mean when 1.25*S/N is whole (all 1000 sets of
// TestBalance sit at exactly 1.25: 20 shards for a mean of 16), and at most
// ceil(T/N) shards otherwise (TestLoadBound).
//
// Giving the spare units by a fixed rank instead of raising every capacity
// to ceil(T/N) matters for churn: when N changes by one, only a few
// capacities change. With ceil(T/N) for all (an earlier version, measured
// the same way), a leave at N = 64 moved 20
// shards between the remaining members on average on top of the leaver's 4;
// with ranked units it moves 3.9.
//
// The price is some movement between remaining members. Measured by
// TestBoundedChurn (300 random sets each, 256 shards, 64 vnodes), in shards
// per event:
//
//	members  join: to newcomer  between old (mean, p99)  leave: off leaver  between others (mean, p99)
//	    4          50.7              0.9,  7                   63.8              0.7, 10
//	   16          14.8              3.3,  9                   16.3              3.0,  9
//	   64           3.9              4.8, 11                    4.1              3.9, 10
//
// Plain consistent hashing moves 0 between others by construction
// (TestPlainJoinLeave) and 15.0 to a 17th peer on average (S/N = 15.06).
//
// # Replicas
//
// Owner j of a shard (j >= 1) is the primary the shard would get if owners
// 0..j-1 all left: in plain mode that is the next distinct member on its
// walk; in bounded mode it is computed by running the placement again
// without them (shared between shards with the same excluded set). Either
// way, when a primary leaves, each of its shards goes to that shard's
// current standby (TestStandbyTakesOver), so the standby's optimizer state
// is the one that carries on.
//
// # Cost
//
// New hashes N*VNodes points and sorts them: about 0.1 ms for 16 members
// and 2.5 ms for 256 (BenchmarkNew, one core of an AMD EPYC); a second
// replica adds one placement per distinct primary. Owners is a slice
// expression (0 allocations).
package ring
