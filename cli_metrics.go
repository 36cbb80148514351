package main

import (
	"flag"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/metrics"
)

// metricsFlags is a peer's --metrics-addr flag: Prometheus metrics and
// pprof over HTTP. Register it in a command's flag group and call start
// once the logger exists.
type metricsFlags struct {
	addr string
}

func (m *metricsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.addr, "metrics-addr", "", "serve Prometheus metrics on http://`HOST:PORT`/metrics and Go's pprof profiles on\n/debug/pprof/ (go tool pprof http://HOST:PORT/debug/pprof/profile); port 0 picks a free\nport (logged). Empty: off. pprof shows memory and the command line: keep it on 127.0.0.1\nor a private address")
}

// start serves the metrics when --metrics-addr is set. Without it, it
// returns nil Metrics (whose methods do nothing) and a close function that
// does nothing, so callers need no checks.
func (m *metricsFlags) start(log zerolog.Logger) (*metrics.Metrics, func() error, error) {
	if m.addr == "" {
		return nil, func() error { return nil }, nil
	}
	cfg := metrics.DefaultConfig()
	cfg.Addr = m.addr
	if err := cfg.Validate(); err != nil {
		return nil, nil, usageErr("metrics-addr", "%v", err)
	}
	mt, _, closeFn, err := metrics.Start(m.addr, log)
	if err != nil {
		return nil, nil, usageErr("metrics-addr", "%v", err)
	}
	return mt, closeFn, nil
}
