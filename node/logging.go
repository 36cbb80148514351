package node

import (
	"github.com/libp2p/go-libp2p/gologshim"
	"github.com/rs/zerolog"
)

// RouteLibp2pLogs sends go-libp2p's own log records (every subsystem that
// logs through go-libp2p/gologshim: swarm, transports, mDNS, resource
// manager, …) to log, keeping those at level or above. Call it once, before
// the first node starts: gologshim binds a logger to its handler on the
// logger's first record. Gossipsub logs through Node's logger at
// Config.LibLogLevel instead; the DHT logs through go-log (set
// GOLOG_LOG_LEVEL to see it).
func RouteLibp2pLogs(log zerolog.Logger, level zerolog.Level) {
	l := log.With().Str("component", "libp2p").Logger().Level(max(log.GetLevel(), level))
	gologshim.SetDefaultHandler(zerolog.NewSlogHandler(l))
}
