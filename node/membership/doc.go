// Package membership decides who is alive in a gossiptrain job and numbers
// the member set with an epoch that all peers converge on.
//
// It is a protocol core in the style of etcd-io/raft: events in, decisions
// out. It does no I/O, reads no clock, starts no goroutine and imports no
// libp2p; the caller passes the time. Package node drives it.
//
// # Driving it
//
// One goroutine owns a Membership and feeds it three kinds of events:
//
//	m, err := membership.New(cfg, time.Now())
//	timer := time.NewTimer(0)
//	for {
//		var rd membership.Ready
//		select {
//		case now := <-timer.C:
//			rd = m.Tick(now)
//		case b := <-beats: // decoded from the members topic; From = signer
//			rd = m.Receive(b, time.Now())
//		case <-sigterm:
//			rd = m.Leave(time.Now())
//		}
//		publish(rd.Send)         // encode with gossip/wire, publish
//		dial(rd.Dial)            // optional direct connections
//		log(rd.Rejected)         // and count them
//		if rd.Changed { ... }    // new View: prepare the ring of View.Members
//		if rd.Agreed { ... }     // settled: move ownership to that ring
//		timer.Reset(time.Until(rd.Next))
//	}
//
// Ready's slices are reused by the next call; View and the Beats' own
// slices are never modified and may be kept. Gossipsub delivers a peer's
// own messages to its local subscription: the driver drops those before
// Receive. A beat with our ID that does reach Receive is rejected and counted
// under ReasonSelf; if its incarnation is not ours, a second process is
// running with this peer's key.
//
// # Liveness
//
// Each peer publishes a Beat every Heartbeat (500ms): a Join first, then
// Alive. A peer's member set is itself plus every peer whose own beat it
// accepted within DeadAfter (5s); hearsay (other peers' Members lists) never
// adds anyone. A member silent for DeadAfter is declared dead; a Leave beat
// removes its sender at once. A dead peer that beats again (a partition
// healed) is a member again; a peer that left comes back only with a newer
// incarnation.
//
// Every beat carries (Incarnation, Seq): the process's start identity and a
// counter. A beat is accepted only if that pair is newer than the last one
// accepted from the sender, so replays, duplicates and beats overtaken by
// newer ones are rejected and counted (ReasonReplay). A restarted process
// has a larger incarnation, so its beats are accepted and the old process's
// stragglers are rejected from then on. A member seen with a newer
// incarnation before it was declared dead is reported in Ready.Restarted: its
// ID still holds the same shards, but its state is new.
//
// # Views and epochs
//
// A View is the sorted member set with each member's incarnation, an epoch,
// and SetHash, a hash over (ID, incarnation) pairs. Including incarnations
// means a restart is a view change, and peers that have and have not yet
// seen the restart hold different views. (Epoch, SetHash) names a view;
// the epoch alone does not (two sides of a partition may count to the same
// epoch for different sets).
//
// Each beat announces the sender's (Epoch, SetHash). The rule:
//
//  1. When a peer's own set changes, its new epoch is the highest epoch a
//     live member's latest beat announces for exactly the new set, if that
//     is above the peer's current epoch; otherwise max(current epoch,
//     highest epoch in any accepted beat) + 1.
//  2. When a live member announces the peer's current set with a higher
//     epoch, the peer adopts that epoch.
//  3. After any change of view the peer beats at once (but at most once per
//     MinGap), so others learn it within one delivery.
//
// A peer's epoch never goes back, and grows with every change of its set.
// Once every peer has heard every other (so all sets are equal) and no
// further change happens, rule 2 only raises epochs to the largest one any
// of them holds, which every peer announces in its next beat: all converge
// to the same (Epoch, SetHash), and Ready.Agreed turns true at each peer
// when it has heard every member announce it. Epochs are not dense: a
// newcomer hears the others one beat at a time and climbs an epoch per beat
// (testdata/join.txt walks through 4 joins ending at epoch 9).
//
// The cases, as the scenario scripts in testdata exercise them:
//
//   - Joins during a change: the newcomer's beats change everyone's set; each
//     change follows rule 1, and rule 2 settles on the highest result
//     (join.txt, churn.txt).
//   - Simultaneous changes on both sides: two peers bump to different epochs
//     for the same set; rule 2 makes the lower one adopt the higher
//     (crash.txt, where four peers start together).
//   - A crash: every other peer declares it dead within DeadAfter of its last
//     beat and usually computes the same epoch; otherwise rule 2 settles it
//     within a beat. crash.txt: agreement 4.9s after the crash, under the
//     required DeadAfter + 2 heartbeats (6s).
//   - A restart with the same ID: a newer incarnation is accepted at once
//     (Restarted, or Joined if it was already declared dead); the ring is a
//     function of the IDs, so it gets the same shards (restart.txt).
//   - A partition: each side declares the other dead and settles on its own
//     view; after healing, beats are accepted again (same incarnation, newer
//     seq), sets grow back and rule 1/2 converge (partition.txt).
//   - A leave racing a heartbeat: the Leave has a higher seq, so the Alive
//     beat sent before it is rejected if it arrives late (leave.txt).
//   - A replayed Leave from an old incarnation: not newer than the restarted
//     peer's beats, rejected (leave.txt).
//
// TestRandomSchedules checks eventual agreement over 300 seeded random
// schedules (3-6 peers, delays up to 300ms that reorder beats, up to 40%
// loss with at most 3 losses in a row, crashes, restarts, leaves and healed
// partitions): after the last event all running peers agree within p50
// 1.2s, p99 5.8s, max 6.4s of simulated time (3000 schedules), against a
// bound of DeadAfter + 2 hops (a hop: 4 heartbeats + jitter, the longest a
// beat takes to get through). No running peer was ever declared dead
// except across a partition.
//
// # Limits and trust
//
// Senders are authenticated by the transport (the node package signs every
// beat with the sender's identity key and checks the signature before a
// beat reaches Receive), so epochs and sets announced by members are trusted; the
// core still rejects malformed beats (empty or long IDs, too many members or
// addresses, unsorted member lists, zero incarnation/seq/epoch, epochs above
// 2^62). A dead or departed peer's last (incarnation, seq) is kept for
// Forget (10 minutes) to reject its replays; gossipsub's own seen-cache stops
// replays after 2 minutes anyway. At most 2*MaxMembers peers are remembered
// in all; a Leave from a peer never seen alive is not remembered past that.
//
// # Cost
//
// Receive handles a beat in about 1-1.5µs with 16 members, 3-4µs with 64 and
// 10µs with 256 (BenchmarkReceive, one core of an AMD EPYC), allocating
// nothing in the steady state; with every member beating every 500ms that
// is 0.5% of a core at 256 members. A view change allocates the new View.
package membership
