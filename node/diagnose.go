package node

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Diagnosis is what a peer knows about why its cluster has not formed (yet):
// how many members it has against --min-peers, what happened to each
// bootstrap peer (its last dial error, its job, a refusal), the peers of
// other jobs it met, and the peers it refused at the hello. Node.Diagnose
// returns one; Reasons says it in sentences.
type Diagnosis struct {
	Job       string
	Members   int  // members of the current view, this peer included
	MinPeers  int  // Config.MinPeers
	Reached   bool // the member count reached MinPeers once
	Agreed    bool // every member announced the same view
	Connected int  // peers connected now, of any job
	SwarmKey  string
	// Bootstrap is one entry per bootstrap peer (Config.Peers, then the
	// PeersFile), in that order.
	Bootstrap []BootstrapPeer
	// OtherJobs are connected peers whose hello named another job: they
	// share the swarm but are never members of this one.
	OtherJobs []PeerJob
	// Refused are the peers refused at the hello (incompatible settings),
	// oldest first, at most maxRefusals.
	Refused []Refusal
}

// BootstrapPeer is what a peer knows of one of its bootstrap peers.
type BootstrapPeer struct {
	ID        string
	Addrs     []string
	Connected bool
	Dials     int    // dial attempts so far
	Failures  int    // failed dials since the last success
	LastError string // the last dial error, on one line ("" after a success)
	Hint      string // what the last error usually means
	Job       string // its job, once it said hello ("" before)
	Refused   string // why it was refused at the hello ("" if it was not)
}

// PeerJob is a peer and the job it said it belongs to.
type PeerJob struct {
	ID, Job string
}

// Refusal is a peer refused at the hello.
type Refusal struct {
	ID        string
	Bootstrap bool  // one of this peer's bootstrap peers
	Err       error // an *IncompatibleError
	At        time.Time
}

// maxRefusals bounds the refusals a Diagnosis keeps.
const maxRefusals = 16

// Formed reports whether the cluster has formed: the member count is at
// least MinPeers, every member agrees on the view, and a bootstrap peer
// (when there are any) is connected.
func (d Diagnosis) Formed() bool { return d.Agreed && d.Members >= d.MinPeers && d.metBootstrap() }

func (d Diagnosis) metBootstrap() bool {
	return len(d.Bootstrap) == 0 || slices.ContainsFunc(d.Bootstrap, func(b BootstrapPeer) bool { return b.Connected })
}

// Reasons says in sentences what the peer has found and why the cluster
// has not formed, the most useful first: the member count, then each
// bootstrap peer, peers of other jobs and refused peers, then hints.
func (d Diagnosis) Reasons() []string {
	var out []string
	metBoot := d.metBootstrap()
	switch {
	case d.Members < d.MinPeers:
		out = append(out, fmt.Sprintf("%d of --min-peers %d members (this peer included), %d peers connected", d.Members, d.MinPeers, d.Connected))
	case !d.Agreed:
		out = append(out, fmt.Sprintf("%s (--min-peers %d), not yet agreed on who is in", plural(d.Members, "member"), d.MinPeers))
	case !metBoot:
		out = append(out, fmt.Sprintf("%s (--min-peers %d), but no --peer reached yet: this peer waits to meet the job through one rather than train alone",
			plural(d.Members, "member"), d.MinPeers))
	default:
		out = append(out, fmt.Sprintf("%s agree (--min-peers %d)", plural(d.Members, "member"), d.MinPeers))
	}
	handshake := false
	for _, b := range d.Bootstrap {
		name := "--peer " + ShortID(b.ID)
		switch {
		case b.Refused != "":
			out = append(out, fmt.Sprintf("%s was refused: %s", name, b.Refused))
		case b.Job != "" && b.Job != d.Job:
			out = append(out, fmt.Sprintf("%s is in job %q, this peer in job %q: it will never be a member of this job (check --job on both)", name, b.Job, d.Job))
		case b.Connected:
			out = append(out, name+" is connected")
		case b.Failures > 0:
			s := fmt.Sprintf("%s: %d dials failed, the last: %s", name, b.Failures, b.LastError)
			if b.Hint != "" {
				s += " (" + b.Hint + ")"
			}
			out = append(out, s)
			handshake = handshake || b.Hint == hintHandshake || strings.Contains(b.Hint, "swarm-key")
		default:
			out = append(out, name+": dialling "+strings.Join(b.Addrs, ", "))
		}
	}
	for _, o := range d.OtherJobs {
		if !d.isBootstrap(o.ID) {
			out = append(out, fmt.Sprintf("peer %s is in job %q, this peer in job %q: not a member of this job", ShortID(o.ID), o.Job, d.Job))
		}
	}
	for _, r := range d.Refused {
		if !r.Bootstrap {
			out = append(out, fmt.Sprintf("refused peer %s %s ago: %v", ShortID(r.ID), roundAgo(r.At), r.Err))
		}
	}
	if handshake || (d.SwarmKey != "" && d.Connected == 0) {
		if d.SwarmKey != "" {
			out = append(out, fmt.Sprintf("this peer uses --swarm-key %s: only peers holding the same key file can connect; check that every peer of the job has it", d.SwarmKey))
		} else {
			out = append(out, "this peer has no --swarm-key: if the others use one, give this peer the same key file")
		}
	}
	if len(d.Bootstrap) == 0 && d.Connected == 0 && len(d.Refused) == 0 {
		out = append(out, "no --peer given and nobody has connected yet: this peer waits for the others to dial it (give them --peer with an address it logged at start), or use --mdns or --dht")
	}
	return out
}

func (d Diagnosis) isBootstrap(id string) bool {
	return slices.ContainsFunc(d.Bootstrap, func(b BootstrapPeer) bool { return b.ID == id })
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func roundAgo(t time.Time) time.Duration {
	return time.Since(t).Round(time.Second)
}

// hintHandshake is the hint of a dial that reached the other side but
// failed in the libp2p handshake.
const hintHandshake = "the connection opened but the libp2p handshake failed: the peers' --swarm-key files differ, or another program listens there"

// dialHint says what a dial error usually means, from go-libp2p's
// messages (measured on go-libp2p v0.51: a peer with a swarm key dialling
// one without fails reading the nonce, the reverse times out in the
// security negotiation, two different keys give "message was too large").
func dialHint(err string) string {
	switch {
	case strings.Contains(err, "connection refused"):
		return "nothing listens at that address: is the peer running, and is the port right?"
	case strings.Contains(err, "peer id mismatch"):
		return "another peer answers at that address: the /p2p/ID part of --peer is out of date (give every peer --identity so its ID survives restarts)"
	case strings.Contains(err, "privnet"),
		strings.Contains(err, "incoming message was too large"),
		strings.Contains(err, "failed to negotiate security protocol"):
		return hintHandshake
	case strings.Contains(err, "no route to host"), strings.Contains(err, "network is unreachable"),
		strings.Contains(err, "i/o timeout"):
		return "no answer from that address: a wrong IP, a firewall, or the peer's machine is down"
	case strings.Contains(err, "deadline exceeded"):
		// The whole dial timed out, in the TCP connect or in a handshake
		// that hung (as with different swarm keys): go-libp2p does not say.
		return "no answer in time: a wrong IP, a firewall, a machine that is down, or a handshake that hung (different --swarm-key files)"
	case strings.Contains(err, "no addresses"), strings.Contains(err, "no good addresses"):
		return "no usable address for it: give --peer a full multiaddr such as /ip4/10.0.0.5/tcp/4001/p2p/ID"
	}
	return ""
}

// oneLine condenses go-libp2p's multi-line dial error ("failed to dial
// ID: all dials failed\n  * [addr] error") to "[addr] error; [addr] error".
func oneLine(err error) string {
	s := err.Error()
	lines := strings.Split(s, "\n")
	var parts []string
	for _, l := range lines[1:] {
		if l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "*")); l != "" {
			parts = append(parts, l)
		}
	}
	if len(parts) == 0 {
		return strings.TrimSpace(s)
	}
	return strings.Join(parts, "; ")
}

// diag collects the diagnosis while the node runs. Methods are safe for
// concurrent use.
type diag struct {
	mu        sync.Mutex
	boot      []*bootDiag
	byID      map[peer.ID]*bootDiag
	otherJobs map[peer.ID]string
	refused   []Refusal
}

type bootDiag struct {
	info      peer.AddrInfo
	dials     int
	failures  int
	lastErr   string
	connected bool // connected at least once
	job       string
	refused   string
}

func newDiag(boot []peer.AddrInfo) *diag {
	d := &diag{byID: map[peer.ID]*bootDiag{}, otherJobs: map[peer.ID]string{}}
	for _, ai := range boot {
		b := &bootDiag{info: ai}
		d.boot = append(d.boot, b)
		d.byID[ai.ID] = b
	}
	return d
}

// dialed records a dial to id; it returns the error condensed to one line
// and whether it is the first failure of a bootstrap peer never reached,
// which the caller logs at once.
func (d *diag) dialed(id peer.ID, err error) (line string, first bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.byID[id]
	if b == nil {
		if err != nil {
			line = oneLine(err)
		}
		return line, false
	}
	b.dials++
	if err == nil {
		b.failures, b.lastErr, b.connected = 0, "", true
		return "", false
	}
	b.failures++
	b.lastErr = oneLine(err)
	return b.lastErr, b.failures == 1 && !b.connected
}

// isBootstrap reports whether id is a bootstrap peer.
func (d *diag) isBootstrap(id peer.ID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byID[id] != nil
}

// helloFrom records the job a connected peer said hello with; it returns
// true the first time a bootstrap peer names another job than ours.
func (d *diag) helloFrom(id peer.ID, job, ours string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.byID[id]
	first := false
	if b != nil {
		first = job != ours && b.job != job
		b.job = job
		b.connected = true
	}
	if job != ours {
		d.otherJobs[id] = job
	} else {
		delete(d.otherJobs, id)
	}
	return first
}

// refuse records a peer refused at the hello.
func (d *diag) refuse(id peer.ID, err error, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.byID[id]
	if b != nil {
		b.refused = err.Error()
	}
	if len(d.refused) == maxRefusals {
		d.refused = slices.Delete(d.refused, 0, 1)
	}
	d.refused = append(d.refused, Refusal{ID: id.String(), Bootstrap: b != nil, Err: err, At: now})
}

// Diagnose returns what this peer knows about why its cluster has formed or
// not (see Diagnosis). It is cheap enough to call every second.
func (n *Node) Diagnose() Diagnosis {
	st := n.State()
	net := n.host.Network()
	d := Diagnosis{
		Job: n.cfg.Job, Members: len(st.View.Members), MinPeers: n.cfg.MinPeers,
		Reached: st.Reached, Agreed: st.Agreed, Connected: len(net.Peers()), SwarmKey: n.cfg.SwarmKey,
	}
	n.diag.mu.Lock()
	defer n.diag.mu.Unlock()
	for _, b := range n.diag.boot {
		bp := BootstrapPeer{ID: b.info.ID.String(), Dials: b.dials, Failures: b.failures, LastError: b.lastErr,
			Job: b.job, Refused: b.refused, Connected: net.Connectedness(b.info.ID) == network.Connected}
		for _, a := range b.info.Addrs {
			bp.Addrs = append(bp.Addrs, a.String())
		}
		if b.lastErr != "" {
			bp.Hint = dialHint(b.lastErr)
		}
		d.Bootstrap = append(d.Bootstrap, bp)
	}
	for id, job := range n.diag.otherJobs {
		if net.Connectedness(id) == network.Connected {
			d.OtherJobs = append(d.OtherJobs, PeerJob{ID: id.String(), Job: job})
		}
	}
	slices.SortFunc(d.OtherJobs, func(a, b PeerJob) int { return strings.Compare(a.ID, b.ID) })
	d.Refused = slices.Clone(n.diag.refused)
	return d
}

// BootstrapRefusal returns the refusal of a bootstrap peer of this job at
// the hello (its settings differ), or nil. Such a peer can never join the
// job through that address: its commands differ from the job's.
func (d Diagnosis) BootstrapRefusal() error {
	for _, r := range d.Refused {
		if r.Bootstrap && errors.Is(r.Err, ErrIncompatible) {
			return r.Err
		}
	}
	return nil
}
