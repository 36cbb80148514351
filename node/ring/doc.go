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
// at worst. The busiest peer paces a synchronous round, so that is up to
// twice the work it should be.
//
// The default is consistent hashing with bounded loads (Mirrokni, Thorup and
// Zadimoghaddam, "Consistent Hashing with Bounded Loads", SODA 2018). The N
// members share T = max(S, ceil(S*MaxLoadPercent/100)) capacity units: each
// gets floor(T/N), and the T mod N members whose point 0 comes first on the
// ring get one more. Shards are placed in index order 0..S-1, each on the
// first member of its walk that still has room. No member holds more than
// ceil(T/N) shards (TestLoadBound).
//
// With MaxLoadPercent 100 (not the default: see Config), T = S: every member holds exactly
// floor(S/N) or ceil(S/N) shards, the best any assignment of whole shards
// can do, so the busiest holds less than 1 + N/S times the mean S/N. With
// 4096 shards that is within 1.1x for every N up to 450, and
// at worst 1.058x for 4..256 members (N = 255: 17 shards for a mean of
// 16.06); TestBalanceEverySize checks floor/ceil and 1.1x for every N from 4
// to 256 over random ID sets. The bound needs shards to spare: with 256
// shards 1.1x holds only up to N = 35 (at N = 36 the busiest holds 8 for a
// mean of 7.11), with 1024 up to 112, with 2048 up to 225. The default,
// MaxLoadPercent 125 with 256 shards, holds 1.25x the mean at every size
// where 1.25*S/N is whole (all 1000 sets of TestBalance sit at exactly 1.25
// with 16 members: 20 shards for a mean of 16).
//
// Giving the spare units by a fixed rank instead of raising every capacity
// to ceil(T/N) matters for churn: when N changes by one, only a few
// capacities change. With ceil(T/N) for all (an earlier version, measured
// with 256 shards and MaxLoadPercent 125), a leave at N = 64 moved 20
// shards between the remaining members on average on top of the leaver's 4;
// with ranked units it moves 3.9.
//
// The price of the bound is some movement between remaining members, and
// the tighter the bound the more. Measured by TestBoundedChurn (100 random
// sets each, 4096 shards, 64 vnodes; go test ./node/ring -run
// TestBoundedChurn -v), in shards per event, "busiest" being the most any
// remaining member sends or receives:
//
//	MaxLoadPercent 100
//	members  join: to newcomer  between old (mean, p99)  busiest  leave: off leaver  between others (mean, p99)  busiest
//	    4         819.3             102.7, 237            333.0        1024.0            106.1, 293              499.1
//	   16         241.0             102.8, 141             61.0         256.0            106.1, 156               66.0
//	   64          63.0              78.9,  98             14.6          64.0             79.0,  95               14.4
//	  256          15.9              67.0,  87              5.8          16.0             67.4,  83                5.7
//
//	MaxLoadPercent 125 (default)
//	    4         826.9               2.9,  80            286.3        1038.1              2.4,  50              462.7
//	   16         237.2               4.8,  30             41.0         251.8              4.7,  19               44.7
//	   64          62.5               8.0,  16              8.7          64.7              7.5,  19                8.7
//	  256          15.7               9.3,  18              3.6          16.3              8.5,  15                3.6
//
// So exact balance moves 1.6 to 2.6% of the shards between remaining
// members per join or leave (at most 4%, which the test checks), against
// under 0.25% with MaxLoadPercent 125; in bytes that is 1.6 to 2.6% of the
// model. No remaining member moves more shards than the newcomer receives
// or the leaver hands off (checked), so the handoff still takes about as
// long as the least movement would. Plain consistent hashing moves 0
// between others by construction (TestPlainJoinLeave) and 240.3 to a 17th
// peer on average (S/(N+1) = 240.9).
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
// New hashes N*VNodes points, sorts them and walks from every shard's
// position: with the defaults about 2.4 ms for 16 members and 3.6 ms for
// 256, 4.4 and 19 ms with a second replica, which adds one placement per
// distinct primary (BenchmarkNew on a shared 2-core VM; go test ./node/ring
// -run X -bench New). A ring is built once per membership change. Owners is
// a slice expression (0 allocations).
package ring
