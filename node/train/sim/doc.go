// Package sim runs the training protocol core (node/train) of many peers in
// one process, on a simulated network and clock, and checks its invariants
// while faults happen: messages dropped, duplicated, delayed and reordered,
// partitions, crashes, restarts with the same peer ID, joins and graceful
// leaves. Every choice comes from one seed, so a failing schedule replays
// exactly.
//
// # A run
//
// Run(Options) starts Peers processes, each a train.Core with its own copy
// of the model and its own generated rows, and drives them tick by tick
// until every process has finished (and no restart or heal is still to
// come) or MaxTicks pass. A tick fires the fault events due, feeds every
// core the members its membership would see alive, then goes through
// Steps network steps: each delivers the messages due and answers the
// gradients asked for (a gradient takes 0-2 steps); the last also ticks
// every core. Whatever a core decides (messages, compute requests, wants
// for batches, events, its end) is acted on at once. A process whose core
// reports the final round fetches the final values and finishes. The
// Result says what the run found (Violations), what it did (Ticks, Rounds,
// Stats, the final Model's hash) and what it sent (bytes and messages per
// peer and op, Parts), and with Record its readable Trace.
//
// # Its parts
//
// Each part is a type of its own, and the run (sim.go) connects them:
//
//   - the network (network.go): messages in flight and when they arrive,
//     partitions, and in the chaos window drops, duplicates and delays;
//     what each peer last heard of each process (its membership's view);
//   - the fault schedule (faults.go): crashes, restarts, joins, leaves and
//     partitions at random ticks of the chaos window, and the events the run
//     adds as it goes (a restarted peer's start, a partition's heal); which
//     peer an event strikes is drawn when it fires;
//   - the workload (workload.go): logistic regression on generated sparse
//     rows (frequent low features, as in click data) labelled by a planted
//     model, cut into batches (or windows of LocalSteps batches), the
//     gradients and window changes computed the way sgd computes them
//     (float64 sums in example order; with LocalState each process trains
//     its windows with its own AdaGrad accumulators and returns the
//     weights' changes alone), and the model of a serial run of the same
//     rounds;
//   - the accounting (accounting.go): the bytes (as the wire codec encodes
//     them) and messages each peer receives, the training traffic per peer
//     and per op, and the parts of its bytes (Parts); it is told every
//     message sent and knows nothing of the faults;
//   - the checker (checker.go): the checks below, on what the cores report
//     as the run goes and on the end state; it reads cores through queries
//     only (coreView) and keeps its own books (a ledger of every copy of
//     every shard); the recorder (record.go) keeps the trace and the
//     violations;
//   - the scaling series (scale.go): Measure reduces a run without faults to
//     bytes per example and the balance of shards (docs/scaling.md).
//
// All draw from one random stream (rng.go) in the order the run asks.
//
// # The checks
//
// A violation (Result.Violations) names its check; each belongs to an
// invariant of docs/protocol.md (I1-I10) or to the run itself:
//
//   - start (run): every process's core accepts the configuration the run
//     starts it with (train.New).
//   - encode (run): every message a core sends encodes with the wire codec, as
//     do the variants Options.Parts measures.
//   - decode (run): with Options.Encode, every encoded message decodes.
//   - core-error (run): a core stops only with an error a peer may stop with:
//     removed (the peer restarts), no quorum (I9), refused or alone at its
//     start.
//   - agreement (I1): every configuration ID means the same configuration
//     (start, members, crashed, left) at every peer that applies it.
//   - apply-once (I2): no holder of a shard applies a worker's contribution to
//     a round twice.
//   - handoff (I2): a peer installs a shard only from a process that sent it,
//     and takes over the sender's ledger as of the send.
//   - restart (I2): a shard restarts from nothing (every holder gone) only
//     where that can happen: without replicas, with more than one crash or
//     restart scheduled, or after a configuration that declares as many
//     members crashed as a shard has copies.
//   - complete (I2): at the end the copy checked for each shard has applied
//     every round of every worker still in the run (not crashed, removed or
//     refused) up to the end of its data, unless a shard was lost where losses
//     are allowed (restart).
//   - staleness (I3): in ssp no round was computed with values more than
//     Staleness rounds stale (every core's Stats.MaxStaleness).
//   - primary-runs (I4): at the end each shard's primary in the final
//     configuration runs or finished (once the values are final a live holder
//     of the shard may stand in for it).
//   - primary-holds (I4): the copy checked for each shard at the end holds the
//     shard.
//   - buffers (I5): every 50 ticks, no queue of a running core (Core.Sizes)
//     holds more than 200 plus 50 per process started.
//   - fetched (I6): every peer that finished, and did not leave, fetched the
//     final values.
//   - one-model (I6): every peer that finished fetched the same model, but for
//     shards restarted from nothing after the values were final.
//   - replicas (I6): every replica that holds a shard at the end is
//     bit-identical to the copy checked for it.
//   - read-copy (I6): with the full gather every finished peer's read copy
//     equals the model it fetched.
//   - serial (I7): a sync run with no crash, restart, join, leave or partition
//     (drops, duplicates and delays only) ends bit-identical to a serial run
//     of the same rounds.
//   - loss (I8): a round applied without a worker's contribution is a
//     violation when a live process's copy of the shard holds that
//     contribution.
//   - quorum (I9): a peer stops with ErrNoQuorum only when most of its raft
//     voters are not running.
//   - liveness (I10): every process finishes before MaxTicks (the faults stop
//     after Chaos ticks): none still runs at the end.
//
// # Replay, soak, same behaviour
//
// As CI runs them, a replayed schedule with its trace, and a soak:
//
//	go test ./node/train/sim -run 'TestSeeds$|TestFixedSeeds|TestQuorumLoss'
//	go test ./node/train/sim -run 'TestSeeds$' -mix sync/chaos -seed 635 -v
//	go test -c -o /tmp/sim.test ./node/train/sim && cd node/train/sim && \
//	  /tmp/sim.test -test.run 'TestSeeds$' -mix sync -seeds 1000 -test.v
//
// -first N starts a soak past the seeds run before, -load 100 runs every
// mix with the exact load bound, -shard S traces one shard of a replayed
// seed, -dump T logs every core's state at tick T. A change that claims to
// change no decision leaves TestTraceDigest's file (a hash per seed of 10
// seeds of every mix: every message, trace event, model and counter) byte
// for byte equal:
//
//	go test ./node/train/sim -run TestTraceDigest -count=1 -digest /tmp/before.txt
//
// TestScale runs the scaling series (go test ./node/train/sim -run
// 'TestScale$' -v; -scale for 4 to 256 peers).
package sim
