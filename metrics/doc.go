// Package metrics serves a running peer's figures to Prometheus and its
// profiles to pprof, over HTTP on an address of its own (--metrics-addr).
//
// A peer creates one Metrics with a private registry (never Prometheus's
// global one, so tests and several peers in one process do not collide),
// starts the server, and feeds the figures it already computes for its
// report as it trains:
//
//	m, addr, closeFn, err := metrics.Start("127.0.0.1:9100", log)
//	defer closeFn()
//	m.SetInfo(metrics.Info{PeerID: id, Job: job, Topology: "ring", Mode: "sync"})
//	for each round {                        // the training loop's Round hook
//		m.Round(metrics.RoundFigures{Clock: c, Examples: n, BytesSent: out, …})
//	}
//	m.Totals(metrics.Totals{Repaired: r, PubsubDropped: d, Rejected: byReason})
//	m.Eval(metrics.EvalFigures{LogLoss: l, Error: e, AUC: a})
//
// The inputs are totals since the start of the run (examples, bytes,
// repairs): Metrics turns them into Prometheus counters by adding the
// increase since the previous call, so the caller keeps no state and a
// scrape between two calls never sees a counter go down. Every method is
// safe for concurrent use, does nothing on a nil *Metrics (so a peer without
// --metrics-addr calls them unconditionally), and allocates nothing in
// steady state (BenchmarkRound).
//
// The server's own mux (not http.DefaultServeMux) serves:
//
//	/metrics        Prometheus text format (gossiptrain_*, go_*, process_*)
//	/debug/pprof/   net/http/pprof: profile, heap, goroutine, trace, …
//
// so `go tool pprof http://ADDR/debug/pprof/profile?seconds=10` profiles a
// peer in the middle of a run. The address is logged ("metrics server
// listening") and returned; port 0 picks a free port.
//
// Requests must name the server by IP address or localhost (AllowHosts:
// a DNS name is answered 421, so a web page cannot read a peer's profiles
// by DNS rebinding; a Prometheus target is given as IP:PORT), and every
// connection is bounded in time and header size (HTTPLimits). node's
// status and dashboard server applies both too.
package metrics
