// Package train is the core of the training protocol (docs/protocol.md):
// what one peer of a run decides, as a pure, deterministic state machine.
// Events go in through the methods of [Core] (a tick, a message, the live
// members, a batch, a gradient computed, leave, fetch, finish), and the
// decisions come out of [Core.Ready]: messages to send, a gradient to
// compute, fetched values, checkpoints to write, events. The core reads no
// clock, does no I/O, draws no randomness but from Config.Seed and starts no
// goroutine (TestPure), so node/trainer drives it for a real peer and
// node/train/sim drives hundreds of them in one process, replaying any
// schedule from its seed.
//
// # Roles
//
// A Core holds three roles, each a struct with the Core as its field c:
//
//   - the agreement (agree.go, authority.go): this peer's etcd raft member,
//     and as leader the proposer of configurations (who trains from which
//     round, who crashed, who left, checkpoints, the end);
//   - the worker (worker.go): numbers the driver's batches as rounds, gets
//     the values of the rows each batch touches, has the driver compute its
//     gradient, and pushes each part to the shard's primary;
//   - the owner (owner.go, transfer.go, checkpoint.go): holds this peer's
//     shards, applies the workers' contributions, forwards them to the
//     replicas, answers, and hands shards over when configurations move
//     them.
//
// The configurations applied (configs.go), combining contributions
// (combine.go), the guards on them (guard.go) and shard sets (bits.go)
// serve the three. No role reads or writes another's fields: what one needs
// of another's state is a small method on the Core (core.go, "What one role
// knows of another"; TestRolesKeepToThemselves). State that only sync mode
// uses is the owner's sync (syncOwner), state that only ssp and async use
// its async (asyncOwner); the agreement's state while joining and while
// leading are its join and leader (TestSmallParts keeps every struct to 25
// fields and every function to 120 lines).
//
// Every event ends with flush: the roles work in turn (agreement, owner,
// worker) until a pass changes nothing (at most 64 passes), so the
// decisions an event unblocks are in the next Ready.
//
// # One batch, from Core.Batch to the values of the next
//
// In sync mode with the default gather (need), for the batch of round r of
// one worker (Example, in example_test.go, runs these steps with two peers):
//
//  1. [Core.Batch] gives the worker the batch's rows (sorted keys) and
//     examples; worker.addBatch numbers it as the next round. Ready's
//     WantBatches says how many more it wants: a worker pushes round r only
//     once it knows the batch of round r+P (P is 1 in sync, Config.Prefetch
//     in ssp and async), whose rows its push asks for.
//  2. The values of round r's rows. For its first P rounds the worker pulls
//     them (worker.pullRound): one CorePull to each primary of rows the
//     batch touches, with the rows of that primary it wants (the want list,
//     R1). A primary (owner.receiveNarrowed: admits, msgShards, refuseMoved,
//     contribOf) keeps the pull (owner.addPending) and answers it with a
//     CoreReply of those rows' values once its shards have the rounds asked
//     for (owner.answerable). Every later round's values come with the
//     answers to the push of round r-P (step 6): the push is the next pull.
//  3. worker.reply puts each answer's values into round r's workset. When
//     every request is answered, worker.compute asks the driver:
//     Ready.Compute (a [ComputeReq]) holds the rows' values.
//  4. The driver computes the batch's gradient (summed over its examples)
//     and gives it to [Core.Computed]; worker.computed keeps it.
//  5. worker.tryPush: splitGrad cuts the gradient into each primary's rows,
//     nextWorkset makes round r+P's workset from that batch's want lists,
//     and sendPushes sends one CorePush per primary of round r, an empty
//     one to a primary the batch does not touch, since a sync primary waits
//     for every worker (R1). The worker keeps each push until it is
//     answered, and sends it again, or to the shard's new owner, if it is
//     not (R2, R7, R10). Its clock moves to r+1.
//  6. Each primary takes the push as a contribution (owner.receiveNarrowed
//     as in step 2, then the guards G1 and G2: owner.guard), and
//     owner.pushSync keeps it with round r's others. owner.applySync then
//     applies round r (owner.applyRound) to each shard once every live
//     member of r's configuration has contributed to it (O1): applyGroup
//     sums the contributions in member order, takes one optimizer step with
//     the round's examples, and forwards the rows to the shard's replicas
//     if it has any (CoreForward, O3), which apply them (owner.forward) and
//     acknowledge (CoreAck). With every acknowledgement in, the primary
//     answers each push with a CoreReply holding the values of its want
//     list, round r applied: the answer is the acknowledgement (R2) and
//     round r+P's values.
//  7. Back to step 3 for round r+1: in sync a worker computes round r+1
//     only once every push of round r is answered (R3), so every worker
//     computes it from the same values.
//
// In ssp and async a primary applies each push as it comes, in its
// worker's round order (owner.pushAsync, O4), and answers once the values
// are fresh enough for the want list's Through (O5, R4) or at once (R5).
// Configurations change the route of a shard between rounds; how holders
// hand shards over and take over from crashed ones is docs/protocol.md's
// "Handoff".
package train
