// Package peerlog names what a gossiptrain peer says to the processes that
// watch it: the messages of its log that "gossiptrain cluster" follows in
// every peer's JSON log, and the signal that stops a whole job at once.
//
// The peer's code logs these constants and cluster matches them, so the
// two cannot drift apart; tests of cluster's fake peer use them too. Add
// messages here; never change one without checking every reader (cluster,
// scripts that grep logs, the README).
package peerlog

import "syscall"

// Log messages ("message" in a JSON log line) and the fields that come with
// them.
const (
	// Listening is logged once per address the peer can be dialled on,
	// with field "addr" (a full multiaddr ending in /p2p/<peer ID>).
	Listening = "listening; dial this peer at"
	// Started is logged when the peer's node is up, with fields "peer_id"
	// and "addrs".
	Started = "peer started"
	// Waiting is logged when the peer starts waiting for the cluster to
	// form (--min-peers members, agreed), with field "min_peers".
	Waiting = "waiting for the cluster to form"
	// StillWaiting is logged every few seconds while the peer waits, with
	// what it has found so far and why the cluster has not formed (see
	// node.Diagnosis).
	StillWaiting = "still waiting for the cluster"
	// Training is logged when the members agreed and the peer starts (or
	// joins) training, with fields "epoch", "members" and "topology".
	Training = "members agreed: training"
	// Done is the peer's last line after training, with its figures.
	Done = "done"
	// Stopped is logged when the peer stopped before the end of training
	// (a leave, an interrupt, StopSignal), with field "round".
	Stopped = "stopped early"
	// StatusListening is logged by the status server at start, with field
	// "addr" (host:port).
	StatusListening = "status server listening"
	// MetricsListening is logged by the metrics server at start, with
	// field "addr" (host:port).
	MetricsListening = "metrics server listening"
)

// StopSignal tells a peer that the whole job is stopping: it stops
// training at once, without the graceful leave that SIGINT and SIGTERM
// start (handing its shards to peers that are stopping too would only
// wait for them), writes its report with the run marked partial, saves a
// --save model marked partial, and exits with status 130. "gossiptrain
// cluster" sends it to every peer on Ctrl-C or when a peer fails. By hand:
// kill -USR1 PID on every peer of the job.
const StopSignal = syscall.SIGUSR1

// StopSignalName is StopSignal's name, for messages and help texts.
const StopSignalName = "SIGUSR1"
