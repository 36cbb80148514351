// Package cluster runs a training job of several gossiptrain peers: the
// processes behind "gossiptrain cluster", "bench" and "launch", and those
// commands' runs.
//
// It only orchestrates processes of the gossiptrain binary (os.Executable()
// unless Config.Binary says otherwise); the peers do all the training and
// find each other over libp2p exactly as peers on separate VMs do:
//
//	cfg := cluster.DefaultConfig()
//	cfg.Peers, cfg.Dir = 4, "runs/ring"
//	cfg.TrainArgs = []string{"--train", "data/train.svm", "--dim", "16777216", "--topology", "ring"}
//	cfg.PeerArgs = func(i int) []string { return []string{"--part", fmt.Sprintf("%d/4", i+1)} }
//	res, err := cluster.Run(ctx, cfg) // blocks until every peer has exited
//	runs, err := res.Reports()        // every peer's report (report.Run)
//
// # What Run does
//
//  1. Run writes a new swarm key for the run, Dir/swarm.key (mode 0600),
//     unless Config.SwarmKey names one; every peer gets it with --swarm-key,
//     so only the run's peers can connect to each other (an SSH launch
//     copies it to every host first). Peer 0 starts first, listening on
//     port 0 of its address (127.0.0.1, or its namespace's address with
//     Config.NetNS), with --identity Identities/peer-0.key (created on
//     first use, so the peer IDs, and with them the order in which sync
//     rounds sum contributions, stay the same across runs), --report
//     Dir/peer-0.jsonl and --log-format json. Its standard error goes to
//     Dir/peer-0.log.
//  2. Run reads peer 0's dialable address from its JSON log ("listening;
//     dial this peer at") and starts peers 1..N-1 with --peer pointing at
//     it; the peers learn each other from there. No port is guessed.
//  3. While they train, every Config.ProgressEvery it reports one combined
//     line: each peer's state, round and examples/s (from the round lines
//     of its report file and its log), to Config.OnProgress or the log.
//  4. When every peer has exited, Run returns their report paths, exit
//     statuses and durations. A peer that fails (exits non-zero) stops the
//     others, and the error (a *PeerError, ErrPeerFailed) names the peer and
//     shows the tail of its log. When ctx ends (Ctrl-C), or a peer fails,
//     every peer gets peerlog.StopSignal (SIGUSR1): the whole job stops, so
//     a gossiptrain peer stops at once, without the graceful leave that
//     SIGTERM starts (handing shards to peers that are stopping too would
//     only wait for them), writes its report marked partial and exits; a
//     peer still running after Config.Grace gets SIGKILL.
//
// Peers are started in their own process group (a Ctrl-C at the terminal
// reaches Run's process only, which then stops them in order) and with
// PR_SET_PDEATHSIG, so they die with the process that runs them even when
// that process is killed with SIGKILL.
//
// # Emulated links
//
// With Config.NetNS (Linux, root) every peer runs in a network namespace
// of its own, joined to a bridge by a veth pair, its link shaped with tc: a
// token bucket (tbf) at NetNS.Rate in each direction, and netem delay and
// loss on the packets it receives. One machine then behaves like N VMs with
// real link limits: a master whose link saturates shows it. Every namespace,
// link and queueing discipline is removed when Run returns, also on error,
// cancellation or panic; CleanupStale removes what a run killed with
// SIGKILL left behind.
//
// Names are unique per process and run ("gt<pid>-<run>-n0" in base 36), so
// parallel runs never collide.
//
// # Emulated VMs
//
// With Config.CPUs (Linux, root) every peer runs in a cgroup of its own
// capped at that many cores (cgroup v1 cpu.cfs_quota_us or v2 cpu.max,
// whichever the machine has; see CPUGroups): N peers on one machine then
// compare with one peer alone as N VMs of that size would, where uncapped
// they would only share the machine's cores. A peer is started through a
// shell that writes its own PID into the group's cgroup.procs and then
// executes the peer in its place, so no work runs uncapped; with NetNS the
// shell runs outside the namespace (ip netns exec remounts /sys). The
// groups ("gossiptrain-<pid>-<run>-peer<i>") are removed when Run returns,
// also on error or cancellation; CleanupStaleCgroups removes those of a
// run killed with SIGKILL. Config.Standalone runs one plain train process
// (no job): the one-peer baseline of a scaling comparison.
//
// # The commands
//
// RunLocal, RunBench and RunLaunch are what "gossiptrain cluster", "bench"
// and "launch" do once their flags are parsed: the data (a generated set,
// DefaultData, or the user's files split among the peers: one file each,
// every N-th file, or --part i/N; launch ships each host its part), the
// model resolved once from all of it (TrainFlags.Resolve, which runs
// train's own inference, infer.Prepare) so that peers reading different
// files build the same one, one peer alone first (the baseline), the peers
// (Run, on this machine or over SSH), and the result: a table
// (report.WriteClusterTable, report.WriteSummaryTable) and report.md with
// plots in the run directory. The command line hands them train's flags as
// the user gave them (TrainFlags), and they pass those on to every peer.
package cluster
