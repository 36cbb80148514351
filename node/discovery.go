package node

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	drouting "github.com/libp2p/go-libp2p/p2p/discovery/routing"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/rs/zerolog"
)

// readPeersFile reads bootstrap addresses, one per line; blank lines and
// '#' comments are skipped. Errors name the file and line.
func readPeersFile(path string) ([]peer.AddrInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: peers file: %v", ErrPeerAddr, err)
	}
	defer f.Close()
	var out []peer.AddrInfo
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		ai, err := ParsePeerAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, ai)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrPeerAddr, path, err)
	}
	return out, nil
}

// bootstrapPeers parses Config.Peers then the PeersFile, merging the
// addresses of repeated peer IDs, in first-seen order.
func bootstrapPeers(cfg *Config) ([]peer.AddrInfo, error) {
	var all []peer.AddrInfo
	for _, s := range cfg.Peers {
		ai, err := ParsePeerAddr(s)
		if err != nil {
			return nil, fieldErr("Peers", "%v", err)
		}
		all = append(all, ai)
	}
	if cfg.PeersFile != "" {
		more, err := readPeersFile(cfg.PeersFile)
		if err != nil {
			return nil, err
		}
		all = append(all, more...)
	}
	var out []peer.AddrInfo
	index := map[peer.ID]int{}
	for _, ai := range all {
		if i, ok := index[ai.ID]; ok {
			out[i].Addrs = append(out[i].Addrs, ai.Addrs...)
			continue
		}
		index[ai.ID] = len(out)
		out = append(out, ai)
	}
	return out, nil
}

// Why a peer is on the dialer's list; a peer may be there for several
// reasons at once.
const (
	wantBootstrap = 1 << iota // a --peer: redialled for as long as the node runs
	wantMember                // a member of the current view: redialled while it is one
	wantFound                 // found by mDNS, the DHT or a beat: tried a few times
)

// foundTries is how many times a peer that is only "found" is dialled
// before it is forgotten.
const foundTries = 4

// target is one peer the dialer keeps connected. info.Addrs are found
// (bootstrap, mDNS, DHT: add) and announced (the peer's own latest beat:
// announce), without repeats.
type target struct {
	info      peer.AddrInfo
	found     []ma.Multiaddr
	announced []ma.Multiaddr
	want      int
	backoff   time.Duration
	next      time.Time
	dialing   bool
	failures  int
}

// dialer keeps wanted peers connected: it dials new ones at once and, when
// a dial fails or a connection drops, retries after an exponential backoff
// from RedialMin to RedialMax with ±25% jitter. One goroutine (run) decides;
// dials run on their own goroutines. Methods are safe for concurrent use.
type dialer struct {
	h             host.Host
	log           zerolog.Logger
	min, max, tmo time.Duration

	mu      sync.Mutex
	targets map[peer.ID]*target
	kick    chan struct{}

	// onDial, when set, is told of every finished dial (err nil on
	// success); it is called from the dial's goroutine and must not block.
	onDial func(id peer.ID, err error)

	attempts, failures atomic.Uint64

	// connect makes one connection attempt: connectDirect, or
	// connectOrRelay (nat.go) when NAT traversal is on. Set before run.
	connect func(context.Context, peer.AddrInfo) error
}

func newDialer(h host.Host, cfg *Config, log zerolog.Logger) *dialer {
	d := &dialer{
		h: h, log: log,
		min: cfg.RedialMin, max: cfg.RedialMax, tmo: cfg.DialTimeout,
		targets: map[peer.ID]*target{},
		kick:    make(chan struct{}, 1),
	}
	d.connect = d.connectDirect
	h.Network().Notify(&network.NotifyBundle{
		DisconnectedF: func(_ network.Network, c network.Conn) { d.disconnected(c.RemotePeer()) },
	})
	return d
}

func (d *dialer) wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// add puts a peer on the list for a reason (wantBootstrap, wantMember or
// wantFound), merging addresses. A new peer is dialled at once.
func (d *dialer) add(ai peer.AddrInfo, why int) {
	if ai.ID == d.h.ID() || ai.ID == "" {
		return
	}
	d.mu.Lock()
	t := d.targets[ai.ID]
	if t == nil {
		t = &target{info: peer.AddrInfo{ID: ai.ID}, backoff: d.min}
		d.targets[ai.ID] = t
	}
	if why == wantFound && t.want&wantFound == 0 {
		t.failures = 0
	}
	t.want |= why
	for _, a := range ai.Addrs {
		if !containsAddr(t.found, a.String()) {
			t.found = append(t.found, a)
		}
	}
	t.mergeAddrs()
	d.mu.Unlock()
	d.wake()
}

// announce makes addrs the addresses member id announced for itself,
// replacing those it announced before (so a member that changes its
// addresses again and again keeps as many as one announcement holds:
// driver.go's dialableAddrs caps them), and marks it a member.
func (d *dialer) announce(id peer.ID, addrs []ma.Multiaddr) {
	if id == d.h.ID() || id == "" {
		return
	}
	d.mu.Lock()
	t := d.targets[id]
	if t == nil {
		t = &target{info: peer.AddrInfo{ID: id}, backoff: d.min}
		d.targets[id] = t
	}
	t.want |= wantMember
	t.announced = slices.Clone(addrs)
	t.mergeAddrs()
	d.mu.Unlock()
	d.wake()
}

// mergeAddrs sets info.Addrs to found then announced, without repeats.
func (t *target) mergeAddrs() {
	t.info.Addrs = t.info.Addrs[:0:0]
	for _, l := range [][]ma.Multiaddr{t.found, t.announced} {
		for _, a := range l {
			if !containsAddr(t.info.Addrs, a.String()) {
				t.info.Addrs = append(t.info.Addrs, a)
			}
		}
	}
}

func containsAddr[T fmt.Stringer](list []T, s string) bool {
	for _, a := range list {
		if a.String() == s {
			return true
		}
	}
	return false
}

// setMembers marks exactly ids as members: others lose wantMember and are
// forgotten if nothing else keeps them.
func (d *dialer) setMembers(ids map[peer.ID]bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, t := range d.targets {
		if ids[id] {
			t.want |= wantMember
		} else {
			t.want &^= wantMember
		}
		if t.want == 0 && !t.dialing {
			delete(d.targets, id)
		}
	}
}

// forget drops a peer (refused or blocked).
func (d *dialer) forget(id peer.ID) {
	d.mu.Lock()
	delete(d.targets, id)
	d.mu.Unlock()
}

// disconnected schedules a redial of a wanted peer that lost its last
// connection.
func (d *dialer) disconnected(id peer.ID) {
	d.mu.Lock()
	t := d.targets[id]
	if t != nil && !t.dialing {
		t.next = time.Now().Add(d.jitter(d.min))
		t.backoff = d.min
	}
	d.mu.Unlock()
	if t != nil {
		d.wake()
	}
}

func (d *dialer) jitter(x time.Duration) time.Duration {
	return time.Duration(float64(x) * (0.75 + 0.5*rand.Float64()))
}

// run dials due peers until ctx ends.
func (d *dialer) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wait := d.dialDue(ctx)
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-d.kick:
		}
	}
}

// dialDue starts a dial to every due peer that is not connected and
// returns how long to sleep until the next one is due.
func (d *dialer) dialDue(ctx context.Context) time.Duration {
	now := time.Now()
	wait := d.max
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, t := range d.targets {
		if t.dialing {
			continue
		}
		if d.h.Network().Connectedness(id) == network.Connected {
			t.backoff, t.failures = d.min, 0
			continue
		}
		if len(t.info.Addrs) == 0 && len(d.h.Peerstore().Addrs(id)) == 0 {
			continue // nothing to dial yet; a beat or mDNS may tell us
		}
		if t.next.After(now) {
			wait = min(wait, t.next.Sub(now))
			continue
		}
		t.dialing = true
		go d.dial(ctx, t.info)
	}
	return wait
}

// connectDirect dials ai's direct addresses (the peer announced no relay
// address: connectOrRelay). The swarm's own dial backoff (5s and up,
// quadratic) would hide a peer that came back; this dialer paces its
// attempts itself, so it clears the swarm's backoff for the peer first.
// (network.WithForceDirectDial also skips that backoff, but in go-libp2p
// v0.51.0 a forced dial that races the host's Close panics on a nil
// transport in swarm.nonProxyAddr: seen in CI at a test's end.)
func (d *dialer) connectDirect(ctx context.Context, ai peer.AddrInfo) error {
	if s, ok := d.h.Network().(*swarm.Swarm); ok {
		s.Backoff().Clear(ai.ID)
	}
	return d.h.Connect(ctx, ai)
}

func (d *dialer) dial(ctx context.Context, ai peer.AddrInfo) {
	d.attempts.Add(1)
	cctx, cancel := context.WithTimeout(ctx, d.tmo)
	err := d.connect(cctx, ai)
	cancel()
	d.mu.Lock()
	t := d.targets[ai.ID]
	if t != nil {
		t.dialing = false
		if err == nil {
			t.backoff, t.failures = d.min, 0
		} else {
			t.failures++
			t.next = time.Now().Add(d.jitter(t.backoff))
			t.backoff = min(2*t.backoff, d.max)
			if t.want == wantFound && t.failures >= foundTries {
				delete(d.targets, ai.ID)
			}
		}
		if t.want == 0 {
			delete(d.targets, ai.ID)
		}
	}
	d.mu.Unlock()
	if ctx.Err() == nil && d.onDial != nil {
		d.onDial(ai.ID, err)
	}
	if err != nil && ctx.Err() == nil {
		d.failures.Add(1)
		d.log.Debug().Str("peer", ai.ID.String()).Err(err).Msg("dial failed; retrying with backoff")
	}
	d.wake()
}

// mdnsServiceName derives the mDNS service name from the job, so peers of
// other jobs on the LAN are not even dialled: "_gt-" and 12 hex digits, a
// valid DNS-SD service label. Without a swarm key they are the job's
// xxhash; with one, an HMAC-SHA256 of the job keyed by the swarm key, so a
// listener on the LAN without the key cannot tell which job it is (nor
// test guessed job names against it). The name is stable for a given job
// and key. TestMDNSServiceName pins it.
func mdnsServiceName(job string, psk pnet.PSK) string {
	if psk == nil {
		return fmt.Sprintf("_gt-%012x._udp", xxhash.Sum64String(job)>>16)
	}
	return "_gt-" + keyedName(psk, "mdns", job)[:12] + "._udp"
}

// keyedName is the hex HMAC-SHA256, keyed by psk, of a purpose ("mdns",
// "rendezvous") and the job: names that reveal the job only to key holders.
func keyedName(psk pnet.PSK, purpose, job string) string {
	mac := hmac.New(sha256.New, psk)
	mac.Write([]byte("gossiptrain/" + purpose + "\x00" + job))
	return hex.EncodeToString(mac.Sum(nil))
}

// mdnsNotifee hands peers found by mDNS to the dialer.
type mdnsNotifee struct {
	d   *dialer
	log zerolog.Logger
}

// HandlePeerFound implements mdns.Notifee.
func (m mdnsNotifee) HandlePeerFound(ai peer.AddrInfo) {
	m.log.Debug().Str("peer", ai.ID.String()).Msg("mDNS found a peer")
	m.d.add(ai, wantFound)
}

// startMDNS announces and looks for the job's service (mdnsServiceName).
func startMDNS(h host.Host, job string, psk pnet.PSK, d *dialer, log zerolog.Logger) (mdns.Service, error) {
	svc := mdns.NewMdnsService(h, mdnsServiceName(job, psk), mdnsNotifee{d: d, log: log})
	if err := svc.Start(); err != nil {
		return nil, fmt.Errorf("node: start mDNS: %w (mDNS needs a multicast-capable network interface)", err)
	}
	return svc, nil
}

// dhtPrefix keeps gossiptrain's DHT apart from the public IPFS DHT.
const dhtPrefix = "/gossiptrain"

// rendezvous is the DHT key peers of a job advertise under:
// "gossiptrain/<job>" without a swarm key, "gossiptrain/" and 32 hex digits
// of an HMAC of the job keyed by the swarm key with one (as
// mdnsServiceName). TestRendezvousName pins it.
func rendezvous(job string, psk pnet.PSK) string {
	if psk == nil {
		return "gossiptrain/" + job
	}
	return "gossiptrain/" + keyedName(psk, "rendezvous", job)[:32]
}

// startDHT runs a Kademlia DHT in server mode (every peer answers queries:
// in a private cluster nobody is "public"), bootstrapped from boot only
// (never the public IPFS bootstrap peers). The caller runs dhtLoop.
func startDHT(ctx context.Context, h host.Host, boot []peer.AddrInfo) (*dht.IpfsDHT, error) {
	kad, err := dht.New(h,
		dht.Mode(dht.ModeServer),
		dht.ProtocolPrefix(dhtPrefix),
		dht.BootstrapPeers(boot...),
		dht.DisableValues())
	if err != nil {
		return nil, fmt.Errorf("node: start DHT: %w", err)
	}
	if err := kad.Bootstrap(ctx); err != nil {
		kad.Close()
		return nil, fmt.Errorf("node: bootstrap DHT: %w", err)
	}
	return kad, nil
}

// dhtLoop advertises the job's rendezvous ns and looks it up until ctx ends,
// handing what it finds to the dialer: first after 1s, then at doubling
// intervals up to 30s, and again 1s after any new connection.
func dhtLoop(ctx context.Context, h host.Host, kad *dht.IpfsDHT, ns string, d *dialer, log zerolog.Logger) {
	rd := drouting.NewRoutingDiscovery(kad)
	newConn := make(chan struct{}, 1)
	h.Network().Notify(&network.NotifyBundle{ConnectedF: func(network.Network, network.Conn) {
		select {
		case newConn <- struct{}{}:
		default:
		}
	}})
	const first, most = time.Second, 30 * time.Second
	every := first
	var readvertise time.Time
	due := time.Now().Add(first)
	timer := time.NewTimer(first)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-newConn:
			every = first
			if soon := time.Now().Add(first); due.After(soon) {
				due = soon
				timer.Reset(first)
			}
			continue
		case <-timer.C:
		}
		if kad.RoutingTable().Size() > 0 {
			if time.Now().After(readvertise) {
				ttl, err := rd.Advertise(ctx, ns)
				if err != nil {
					log.Debug().Err(err).Msg("DHT advertise failed; will retry")
				} else {
					readvertise = time.Now().Add(ttl * 7 / 10)
					log.Debug().Str("rendezvous", ns).Msg("advertised on the DHT")
				}
			}
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			found, err := rd.FindPeers(fctx, ns)
			if err == nil {
				for ai := range found {
					if ai.ID != h.ID() && len(ai.Addrs) > 0 {
						h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
						d.add(ai, wantFound)
					}
				}
			}
			cancel()
		}
		due = time.Now().Add(every)
		timer.Reset(every)
		every = min(2*every, most)
	}
}
