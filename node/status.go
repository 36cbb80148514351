package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gossiptrain/gossiptrain/metrics"
	"github.com/gossiptrain/gossiptrain/node/membership"
	"github.com/gossiptrain/gossiptrain/peerlog"
)

// Status is what GET /status returns: one peer's view of the cluster. The
// JSON names of PeerID, Addrs, Epoch, Members, OwnedShards and Topology are
// a contract (tools read them); fields are only ever added.
type Status struct {
	PeerID      string         `json:"peer_id"`      // this peer
	Addrs       []string       `json:"addrs"`        // full multiaddrs it can be dialled on
	Job         string         `json:"job"`          // training job
	Epoch       uint64         `json:"epoch"`        // member-set epoch
	SetHash     string         `json:"set_hash"`     // hash of (member, incarnation) pairs, 0x-hex
	Members     []string       `json:"members"`      // sorted member peer IDs, self included
	OwnedShards []int          `json:"owned_shards"` // shards this peer is primary of, ascending
	Topology    string         `json:"topology"`     // "ring" or "master"
	Master      string         `json:"master,omitempty"`
	Shards      int            `json:"shards"`       // virtual shards S
	Replicas    int            `json:"replicas"`     // owners per shard
	ShardCounts map[string]int `json:"shard_counts"` // primaries per member
	RingHash    string         `json:"ring_hash"`    // State.RingHash, 0x-hex
	Agreed      bool           `json:"agreed"`       // every member announced this view
	MinPeers    int            `json:"min_peers"`
	Reached     bool           `json:"reached"` // MinPeers reached at least once
	Incarnation uint64         `json:"incarnation"`
	Connected   int            `json:"connected_peers"` // peers with an open connection
	Uptime      float64        `json:"uptime_seconds"`
	MaxMessage  int            `json:"max_message_size"` // gossipsub limit, equal on every peer
	// Rejected is every message refused on the members topic, by the
	// validator or the membership core; RejectedBy splits it by reason
	// (validator reasons as RejectReason names, the core's prefixed
	// "membership_"). "replay" (a late copy that took a slower path) and
	// "unverified" (a beat racing a new connection's hello) also occur in
	// honest clusters; the others mean a broken or hostile peer.
	Rejected   uint64             `json:"rejected"`
	RejectedBy map[string]uint64  `json:"rejected_by_reason"`
	Membership MembershipCounters `json:"membership"`
	PubSub     PubSubCounters     `json:"pubsub"`
	Network    NetworkCounters    `json:"network"`
	// NAT is the peer's NAT traversal: mode, reachability, relays, hole
	// punches (nat.go). Connections says, for every connected peer,
	// whether the traffic goes direct, hole_punched or relayed.
	NAT         *NATStatus   `json:"nat,omitempty"`
	Connections []ConnStatus `json:"connections"`
}

// MembershipCounters are membership.Stats for JSON.
type MembershipCounters struct {
	BeatsSent     uint64 `json:"beats_sent"`
	BeatsReceived uint64 `json:"beats_received"`
	BeatsAccepted uint64 `json:"beats_accepted"`
	Joins         uint64 `json:"joins"`
	Leaves        uint64 `json:"leaves"`
	Deaths        uint64 `json:"deaths"`
	Restarts      uint64 `json:"restarts"`
	EpochChanges  uint64 `json:"epoch_changes"`
}

// NetworkCounters count connection-level events.
type NetworkCounters struct {
	DialAttempts     uint64 `json:"dial_attempts"`
	DialFailures     uint64 `json:"dial_failures"`
	RefusedPeers     uint64 `json:"refused_peers"`     // refused at the hello
	ScoreDisconnects uint64 `json:"score_disconnects"` // disconnected for a low gossipsub score
	BeatsDropped     uint64 `json:"beats_dropped"`     // own beats dropped because publishing was stuck
}

// Status returns this peer's status.
func (n *Node) Status() Status {
	n.mu.RLock()
	st, stats := n.st, n.stats
	n.mu.RUnlock()
	self := n.self.String()
	s := Status{
		PeerID:      self,
		Addrs:       n.Addrs(),
		Job:         n.cfg.Job,
		Epoch:       st.View.Epoch,
		SetHash:     hex64(st.View.SetHash),
		Members:     slices.Clone(st.View.Members),
		OwnedShards: st.Ring.Owned(self),
		Topology:    string(n.cfg.Topology),
		Shards:      st.Ring.Shards(),
		Replicas:    n.cfg.Replicas,
		ShardCounts: map[string]int{},
		RingHash:    hex64(st.RingHash),
		Agreed:      st.Agreed,
		MinPeers:    n.cfg.MinPeers,
		Reached:     st.Reached,
		Connected:   len(n.host.Network().Peers()),
		Uptime:      time.Since(n.start).Seconds(),
		MaxMessage:  n.cfg.MaxMessageSize,
		RejectedBy:  map[string]uint64{},
		Membership: MembershipCounters{
			BeatsSent: stats.Sent, BeatsReceived: stats.Received, BeatsAccepted: stats.Accepted,
			Joins: stats.Joins, Leaves: stats.Leaves, Deaths: stats.Deaths,
			Restarts: stats.Restarts, EpochChanges: stats.EpochChanges,
		},
		PubSub: n.tr.counters(),
		Network: NetworkCounters{
			DialAttempts: n.dialer.attempts.Load(), DialFailures: n.dialer.failures.Load(),
			RefusedPeers: n.refused.Load(), ScoreDisconnects: n.scoreKicks.Load(),
			BeatsDropped: n.localDrops.Load(),
		},
	}
	if s.OwnedShards == nil {
		s.OwnedShards = []int{}
	}
	nat, conns := n.nat.status()
	s.NAT, s.Connections = &nat, conns
	if n.cfg.Topology == TopologyMaster {
		s.Master = n.master
	}
	for _, p := range st.Ring.Assignment() {
		s.ShardCounts[p]++
	}
	if len(st.View.Incarnations) > 0 {
		if i := slices.Index(st.View.Members, self); i >= 0 {
			s.Incarnation = st.View.Incarnations[i]
		}
	}
	for r, c := range n.val.rejected() {
		if r > 0 && c > 0 {
			s.RejectedBy[RejectReason(r).String()] = c
			s.Rejected += c
		}
	}
	for r, c := range stats.Rejected {
		if r > 0 && c > 0 {
			s.RejectedBy["membership_"+membership.Reason(r).String()] = c
			s.Rejected += c
		}
	}
	return s
}

// StatusAddr returns the address the status server listens on ("" when
// Config.StatusAddr is empty).
func (n *Node) StatusAddr() string { return n.statusAddr }

// statusLimits bound what one client may cost the status server (tests
// shorten them).
var statusLimits = metrics.DefaultHTTPLimits()

// startStatus serves GET /status and the dashboard (GET /, see
// metrics.Dashboard) on Config.StatusAddr, and answers the other members'
// dashboards over FiguresProtocol. Like the metrics server it answers only
// requests that name it by IP address or localhost (metrics.AllowHosts: a
// web page must not read a peer's status by DNS rebinding), within
// statusLimits (TestStatusServerRefusesOtherHosts,
// TestStatusServerCutsOffSlowHeaders).
func (n *Node) startStatus() error {
	ln, err := net.Listen("tcp", n.cfg.StatusAddr)
	if err != nil {
		return fieldErr("StatusAddr", "%v", err)
	}
	n.dash = metrics.NewDashboard(metrics.Info{PeerID: n.self.String(), Job: n.cfg.Job, Topology: string(n.cfg.Topology)})
	// Fetches for the page end when the server shuts down.
	fetchCtx, stopFetches := context.WithCancel(n.ctx)
	n.dash.SetFetch(func(ctx context.Context, id string) (metrics.PeerFigures, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(fetchCtx, cancel)()
		return n.fetchFigures(ctx, id)
	})
	n.dash.SetLink(n.linkKind)
	n.host.SetStreamHandler(FiguresProtocol, n.handleFigures)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(n.Status())
	})
	mux.Handle("/", n.dash.Handler())
	n.statusSrv = statusLimits.Server(metrics.AllowHosts(n.cfg.StatusAddr, mux))
	n.statusSrv.RegisterOnShutdown(stopFetches)
	n.statusAddr = ln.Addr().String()
	n.wg.Go(func() {
		if err := n.statusSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error().Err(err).Msg("status server stopped")
		}
	})
	n.wg.Go(n.feedDashboard)
	n.log.Info().Str("addr", n.statusAddr).Str("url", "http://"+n.statusAddr+"/status").
		Str("dashboard", "http://"+n.statusAddr+"/").Msg(peerlog.StatusListening)
	return nil
}

// Dashboard returns the dashboard the status server shows, for the
// training side to feed (nil without a status server: its methods do
// nothing then).
func (n *Node) Dashboard() *metrics.Dashboard { return n.dash }

// FiguresProtocol answers another member's dashboard with this peer's
// live figures (metrics.PeerFigures as JSON), so a browser needs to reach
// one peer only.
const FiguresProtocol = protocol.ID("/gossiptrain/figures/1.0.0")

// maxFigures bounds a figures answer.
const maxFigures = 64 << 10

func (n *Node) handleFigures(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(5 * time.Second))
	if !n.helloDone(s.Conn().RemotePeer()) {
		s.Reset() // only peers that passed the hello (same job) see the figures
		return
	}
	_ = json.NewEncoder(s).Encode(n.dash.Self())
}

// fetchFigures asks member id for its figures over FiguresProtocol.
func (n *Node) fetchFigures(ctx context.Context, id string) (metrics.PeerFigures, error) {
	var f metrics.PeerFigures
	pid, err := peer.Decode(id)
	if err != nil {
		return f, err
	}
	s, err := n.host.NewStream(network.WithNoDial(ctx, "dashboard figures"), pid, FiguresProtocol)
	if err != nil {
		return f, err
	}
	defer s.Close()
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	if err := json.NewDecoder(io.LimitReader(s, maxFigures)).Decode(&f); err != nil {
		s.Reset()
		return f, fmt.Errorf("figures from %s: %w", id, err)
	}
	f.PeerID = id
	return f, nil
}

// linkKind says how this peer reaches id: directly, through a relay, or
// not at the moment.
func (n *Node) linkKind(id string) string {
	pid, err := peer.Decode(id)
	if err != nil {
		return metrics.LinkNone
	}
	conns := n.host.Network().ConnsToPeer(pid)
	if len(conns) == 0 {
		return metrics.LinkNone
	}
	for _, c := range conns {
		if _, err := c.RemoteMultiaddr().ValueForProtocol(ma.P_CIRCUIT); err != nil {
			return metrics.LinkDirect // any direct connection is the one used
		}
	}
	return metrics.LinkRelayed
}

// feedDashboard passes the membership's views and changes to the
// dashboard until the node closes.
func (n *Node) feedDashboard() {
	evs, cancel := n.Subscribe()
	defer cancel()
	for {
		select {
		case <-n.ctx.Done():
			return
		case ev, ok := <-evs:
			if !ok {
				return
			}
			m := metrics.MembershipFigures{
				Epoch: ev.View.Epoch, Agreed: ev.Agreed, Members: ev.View.Members,
				Joined: ev.Joined, Left: ev.Left, Died: ev.Died, Restarted: ev.Restarted,
			}
			if ev.Ring != nil {
				m.Ring = ev.Ring.Assignment()
			}
			n.dash.Membership(m)
		}
	}
}

// statusURL turns "host:port", "http://host:port" or a full URL into the
// URL of the status endpoint.
func statusURL(addr string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	if i := strings.Index(addr, "://"); !strings.Contains(addr[i+3:], "/") {
		addr += "/status"
	}
	return addr
}

// maxStatus bounds a status response (4096 members of 52-byte IDs twice
// over is under 1 MB).
const maxStatus = 8 << 20

// statusClient keeps no idle connections: status requests are rare, and a
// pooled connection to a peer that restarted on the same port fails with EOF.
var statusClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// FetchStatus asks the status server at addr (host:port or URL) for its
// status. A status server answers requests that name it by IP address
// only (metrics.AllowHosts), so a host name other than localhost is
// resolved here and the request goes to its first address. Errors wrap
// ErrStatus and name the URL.
func FetchStatus(ctx context.Context, addr string) (*Status, error) {
	u := statusURL(addr)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrStatus, u, err)
	}
	if host := req.URL.Hostname(); req.URL.Scheme == "http" && net.ParseIP(host) == nil && !strings.EqualFold(host, "localhost") {
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil || len(ips) == 0 {
			return nil, fmt.Errorf("%w: %s: cannot resolve %s: %v", ErrStatus, u, host, err)
		}
		port := req.URL.Port()
		if port == "" {
			port = "80"
		}
		req.URL.Host = net.JoinHostPort(ips[0], port)
		req.Host = req.URL.Host
	}
	resp, err := statusClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStatus, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s: HTTP %s", ErrStatus, u, resp.Status)
	}
	var s Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxStatus)).Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %s: not a gossiptrain status: %v", ErrStatus, u, err)
	}
	return &s, nil
}

// WriteText writes the status as an aligned human-readable table: the peer,
// the view, then one line per member with its shard count.
func (s *Status) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	agreed := "not agreed yet"
	if s.Agreed {
		agreed = "agreed"
	}
	fmt.Fprintf(tw, "peer\t%s\n", s.PeerID)
	fmt.Fprintf(tw, "job\t%s\n", s.Job)
	fmt.Fprintf(tw, "epoch\t%d (%s, set %s)\n", s.Epoch, agreed, s.SetHash)
	topo := s.Topology
	if s.Master != "" {
		topo += ", master " + s.Master
	}
	fmt.Fprintf(tw, "topology\t%s, %d shards, %d replica(s), ring %s\n", topo, s.Shards, s.Replicas, s.RingHash)
	fmt.Fprintf(tw, "owned\t%d shards\n", len(s.OwnedShards))
	fmt.Fprintf(tw, "min peers\t%d (reached: %v)\n", s.MinPeers, s.Reached)
	fmt.Fprintf(tw, "connected\t%d peers\n", s.Connected)
	fmt.Fprintf(tw, "rejected\t%d%s\n", s.Rejected, reasons(s.RejectedBy))
	fmt.Fprintf(tw, "pubsub drops\t%d\n", s.PubSub.Dropped())
	fmt.Fprintf(tw, "uptime\t%s\n", time.Duration(s.Uptime*float64(time.Second)).Round(time.Second))
	if err := tw.Flush(); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\nMEMBERS (%d)\tSHARDS\t\n", len(s.Members))
	for _, m := range s.Members {
		mark := ""
		if m == s.PeerID {
			mark = "(this peer)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", m, s.ShardCounts[m], mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeNAT(w, s); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nADDRESSES\n%s\n", strings.Join(s.Addrs, "\n"))
	return err
}

func reasons(m map[string]uint64) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(" (")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	b.WriteString(")")
	return b.String()
}
