package node

import (
	"fmt"
	"github.com/libp2p/go-libp2p/core/metrics"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/pnet"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"github.com/libp2p/go-libp2p/x/rate"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/rs/zerolog"
)

// listenAddrs parses the listen addresses and keeps those the host can use:
// TCP always, QUIC (quic-v1) only without a swarm key. It names the first
// unusable address, or warns about QUIC addresses dropped for the swarm key.
func listenAddrs(cfg *Config, private bool, log zerolog.Logger) ([]ma.Multiaddr, error) {
	var out []ma.Multiaddr
	for _, s := range cfg.Listen {
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fieldErr("Listen", "%q is not a multiaddr: %v", s, err)
		}
		_, tcpErr := m.ValueForProtocol(ma.P_TCP)
		_, quicErr := m.ValueForProtocol(ma.P_QUIC_V1)
		switch {
		case tcpErr == nil:
			out = append(out, m)
		case quicErr == nil && private:
			log.Warn().Str("addr", s).Msg("not listening on this QUIC address: libp2p private networks (--swarm-key) support TCP only")
		case quicErr == nil:
			out = append(out, m)
		default:
			return nil, fieldErr("Listen", "%q: gossiptrain listens on TCP (/ip4/0.0.0.0/tcp/4001) or QUIC (/ip4/0.0.0.0/udp/4001/quic-v1) addresses", s)
		}
	}
	if len(out) == 0 {
		return nil, fieldErr("Listen", "no TCP address to listen on: with --swarm-key only TCP works; add e.g. /ip4/0.0.0.0/tcp/4001")
	}
	return out, nil
}

// resourceManager builds go-libp2p's default resource manager with the
// per-address connection limits raised to cfg.ConnLimit. go-libp2p allows 8
// concurrent connections and a burst of 16 new ones (then one per 5s) per
// IPv4 address; loopback is exempt. Above 8, the rate and the system-wide
// connection and descriptor limits grow by ConnLimit/8 too, so a cluster of
// hundreds of peers behind one NAT address can connect.
func resourceManager(connLimit int) (network.ResourceManager, error) {
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	scale := float64(connLimit) / 8
	if scale > 1 {
		grow := func(b *rcmgr.BaseLimit, inc *rcmgr.BaseLimitIncrease) {
			b.Conns = int(math.Ceil(float64(b.Conns) * scale))
			b.ConnsInbound = int(math.Ceil(float64(b.ConnsInbound) * scale))
			b.ConnsOutbound = int(math.Ceil(float64(b.ConnsOutbound) * scale))
			b.FD = int(math.Ceil(float64(b.FD) * scale))
			inc.Conns = int(math.Ceil(float64(inc.Conns) * scale))
			inc.ConnsInbound = int(math.Ceil(float64(inc.ConnsInbound) * scale))
			inc.ConnsOutbound = int(math.Ceil(float64(inc.ConnsOutbound) * scale))
		}
		grow(&limits.SystemBaseLimit, &limits.SystemLimitIncrease)
		grow(&limits.TransientBaseLimit, &limits.TransientLimitIncrease)
	}
	ip4 := []rcmgr.ConnLimitPerSubnet{{PrefixLength: 32, ConnCount: connLimit}}
	ip6 := []rcmgr.ConnLimitPerSubnet{{PrefixLength: 56, ConnCount: connLimit}, {PrefixLength: 48, ConnCount: 8 * connLimit}}
	rps := 0.2 * max(scale, 1) // go-libp2p: 0.2 new connections/s per address
	connRate := &rate.Limiter{
		NetworkPrefixLimits: []rate.PrefixLimit{
			{Prefix: netip.MustParsePrefix("127.0.0.0/8"), Limit: rate.Limit{}}, // unlimited
			{Prefix: netip.MustParsePrefix("::1/128"), Limit: rate.Limit{}},
		},
		SubnetRateLimiter: rate.SubnetLimiter{
			IPv4SubnetLimits: []rate.SubnetLimit{{PrefixLength: 32, Limit: rate.Limit{RPS: rps, Burst: 2 * connLimit}}},
			IPv6SubnetLimits: []rate.SubnetLimit{
				{PrefixLength: 56, Limit: rate.Limit{RPS: rps, Burst: 2 * connLimit}},
				{PrefixLength: 48, Limit: rate.Limit{RPS: 2.5 * rps, Burst: 10 * connLimit}},
			},
			GracePeriod: time.Minute,
		},
	}
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.AutoScale()),
		rcmgr.WithLimitPerSubnet(ip4, ip6),
		rcmgr.WithConnRateLimiters(connRate),
		rcmgr.WithMetricsDisabled())
}

// buildHost starts the libp2p host: TCP, and QUIC unless psk is set; the
// private network when psk is set; the gater; resource and connection
// managers scaled by cfg.ConnLimit; then extra (the NAT options,
// natState.hostOptions: without them relaying is off).
func buildHost(cfg *Config, key crypto.PrivKey, psk pnet.PSK, g *gater, bw metrics.Reporter, log zerolog.Logger, extra ...libp2p.Option) (host.Host, error) {
	addrs, err := listenAddrs(cfg, psk != nil, log)
	if err != nil {
		return nil, err
	}
	rm, err := resourceManager(cfg.ConnLimit)
	if err != nil {
		return nil, fmt.Errorf("node: resource manager: %w", err)
	}
	scale := max(1, cfg.ConnLimit/8)
	cm, err := connmgr.NewConnManager(160*scale, 192*scale, connmgr.WithGracePeriod(time.Minute))
	if err != nil {
		rm.Close()
		return nil, fmt.Errorf("node: connection manager: %w", err)
	}
	opts := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.ListenAddrs(addrs...),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.ConnectionGater(g),
		libp2p.DisableMetrics(),
		libp2p.UserAgent("gossiptrain"),
		libp2p.WithDialTimeout(cfg.DialTimeout),
		libp2p.BandwidthReporter(bw),
	}
	if len(extra) == 0 {
		extra = []libp2p.Option{libp2p.DisableRelay()}
	}
	opts = append(opts, extra...)
	if psk != nil {
		opts = append(opts, libp2p.PrivateNetwork(psk))
	} else {
		opts = append(opts, libp2p.Transport(quic.NewTransport))
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		rm.Close()
		cm.Close()
		return nil, fmt.Errorf("node: start libp2p host on %v: %w", cfg.Listen, err)
	}
	return h, nil
}

// fullAddrs returns the addresses h can be dialled on as full multiaddrs
// ending in /p2p/<ID>: non-loopback first (they are what other machines
// need), then loopback, each group in the host's order.
func fullAddrs(h host.Host) []string {
	suffix := "/p2p/" + h.ID().String()
	var outer, loop []string
	for _, a := range h.Addrs() {
		s := a.String() + suffix
		if manet.IsIPLoopback(a) {
			loop = append(loop, s)
		} else {
			outer = append(outer, s)
		}
	}
	return slices.Concat(outer, loop)
}
