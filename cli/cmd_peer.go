package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/job"
	"github.com/gossiptrain/gossiptrain/node"
)

// peerFlags are the flags that make a process a peer of a cluster: peer
// takes them all, and train (issue 4) registers the same groups.
type peerFlags struct {
	identity, swarmKey string
	peersAllowed       string

	listen          listFlag
	connLimit       int
	maxMessage      int
	outQueue        int
	valQueue        int
	gossipHeartbeat time.Duration
	statusAddr      string
	nat             string
	relay           bool

	peers     listFlag
	peersFile string
	mdns, dht bool
	redialMax time.Duration

	job                      string
	heartbeat, deadAfter     time.Duration
	minPeers                 int
	vnodes, shards, replicas int
	topology, master         string

	libLog string

	// noShards leaves --shards out of the Cluster group, for a command that
	// registers its own (train's Model group does).
	noShards bool
	// standalone says the flags are checked for a run that joins no job
	// and listens nowhere (train without --job): no swarm key is needed.
	standalone bool
}

// register adds the Identity, Network, Discovery and Cluster groups.
func (p *peerFlags) register(c *command) {
	def := node.DefaultConfig()
	c.group("Identity", func(fs *flag.FlagSet) {
		fs.StringVar(&p.identity, "identity", "", "Ed25519 key `FILE` that fixes the peer ID across restarts; created on first run (mode 0600,\ndirectory 0700). Without it the peer gets a new random ID on every start")
		fs.StringVar(&p.swarmKey, "swarm-key", "", "pre-shared swarm key `FILE` ('gossiptrain keygen --swarm job.key', copied to every peer, mode\n0600). It decides who may connect: a host without the key fails the handshake before any\nprotocol runs, so it can neither join the job, send a message, nor learn the job's name or\nsettings. Required when --listen reaches beyond loopback (the default 0.0.0.0 does).\nlibp2p's private networks run over TCP only: QUIC --listen addresses are skipped (and\nlogged). See docs/security.md")
		fs.StringVar(&p.peersAllowed, "peers-allowed", "", "allow-list `FILE`: one peer ID a line ('#' starts a comment). Only those peers may connect\nto this one; the file is re-read within 2s of a change, and a peer removed from it is\ndisconnected and refused: shut out one compromised host without a new --swarm-key")
	})
	c.group("Network", func(fs *flag.FlagSet) {
		fs.Var(&p.listen, "listen", "`MULTIADDR` to listen on; repeat or separate with commas. TCP (/ip4/0.0.0.0/tcp/4001), and QUIC\n(/ip4/127.0.0.1/udp/4001/quic-v1) on loopback only, since a swarm key needs TCP; port 0 picks\na free port. An address beyond loopback (0.0.0.0 included) needs --swarm-key;\n/ip4/127.0.0.1/tcp/0 does not. Every address the peer can be dialled on is logged with its\n/p2p/ID\n(default \""+strings.Join(def.Listen, ",")+"\": every interface, so --swarm-key is required)")
		fs.IntVar(&p.connLimit, "conn-limit", def.ConnLimit, "`connections` allowed from one IP address (libp2p's resource manager; loopback is exempt).\nThe default 8 is libp2p's; raise it when many peers share one public address (behind one NAT):\nabout the number of peers behind that address. The new-connection rate per address and the\nsystem-wide connection limits scale with it")
		fs.IntVar(&p.maxMessage, "max-message-size", def.MaxMessageSize, "gossipsub's maximum message size in `bytes`. Must be the same on every peer of the job: a\npeer with another value is refused at connect (logged), since gossipsub silently drops\nmessages over a receiver's limit")
		fs.IntVar(&p.outQueue, "outbound-queue", def.OutboundQueueSize, "gossipsub's outgoing queue per peer, in `messages`; overflow is dropped and counted")
		fs.IntVar(&p.valQueue, "validate-queue", def.ValidateQueueSize, "gossipsub's queue of incoming `messages` awaiting validation; overflow is dropped and counted")
		fs.DurationVar(&p.gossipHeartbeat, "gossip-heartbeat", def.GossipSub.HeartbeatInterval, "gossipsub's mesh maintenance `interval` (meshes form and repair at these heartbeats)")
		fs.StringVar(&p.nat, "nat", string(def.NAT), "`MODE` for peers behind NAT: auto finds out with AutoNAT whether other peers can dial this one;\nif not, it reserves a slot on a --relay peer of the job and hole punching (DCUtR) then turns\nrelayed connections into direct ones. private and public skip the detection (private: reserve\na relay slot at once; public: never). off: direct connections only. auto is off when every\n--listen address is loopback. 'gossiptrain status' shows each connection: direct,\nhole_punched or relayed")
		fs.BoolVar(&p.relay, "relay", false, "relay for this job's peers (libp2p circuit relay v2), and for no one else: peers that cannot\ndial each other talk through this peer until hole punching connects them. Give it to peers\nevery other peer can reach (a public address)")
		fs.StringVar(&p.statusAddr, "status-addr", "127.0.0.1:0", "serve this peer's status as JSON on http://`HOST:PORT`/status ('gossiptrain status HOST:PORT')\nand a live dashboard for a browser at http://HOST:PORT/; port 0 picks a free port (logged);\nempty turns both off")
	})
	c.group("Discovery", func(fs *flag.FlagSet) {
		fs.Var(&p.peers, "peer", "bootstrap peer `MULTIADDR` ending in /p2p/ID, as another peer logs it; repeatable. Bootstrap\npeers are redialled with backoff whenever the connection drops; the other members are\nlearnt from their heartbeats and dialled directly. Needs only that address to be reachable")
		fs.StringVar(&p.peersFile, "peers-file", "", "`FILE` with more bootstrap addresses, one per line ('#' starts a comment)")
		fs.BoolVar(&p.mdns, "mdns", false, "find peers of the same --job on the local network with multicast DNS, no addresses needed.\nNeeds a network interface with multicast shared with the other peers (a LAN, a bridge);\nit does not work on loopback (lo has no MULTICAST flag) nor across routers or most clouds")
		fs.BoolVar(&p.dht, "dht", false, "run a Kademlia DHT (private to gossiptrain) and meet the peers of --job at a rendezvous\nthere: for peers that only share a bootstrap peer. Needs at least one --peer")
		fs.DurationVar(&p.redialMax, "redial-max", node.DefaultConfig().RedialMax, "longest wait between attempts to reconnect to a lost bootstrap peer or member\n(backoff doubles from 250ms up to this)")
	})
	c.group("Cluster", func(fs *flag.FlagSet) {
		fs.StringVar(&p.job, "job", "", "`name` of the training job: peers join only peers of the same job. 'peer' needs it; 'train'\nwith it runs as one peer of the job, and without it trains alone")
		fs.DurationVar(&p.heartbeat, "heartbeat", def.Heartbeat, "how often a peer announces itself on the job's members topic")
		fs.DurationVar(&p.deadAfter, "dead-after", def.DeadAfter, "a member silent this long is declared dead and its shards move (at least 2x --heartbeat)")
		fs.IntVar(&p.minPeers, "min-peers", def.MinPeers, "`N` members (this peer included) that training waits for; peer logs when it is reached")
		fs.IntVar(&p.vnodes, "vnodes", def.VNodes, "`points` each member puts on the consistent-hash ring")
		if !p.noShards {
			fs.IntVar(&p.shards, "shards", def.Shards, "virtual shards the model is split into (a power of two); the ring gives each to an owner")
		}
		fs.IntVar(&p.replicas, "replicas", def.Replicas, "`N` owners per shard: a primary and N-1 standbys")
		fs.StringVar(&p.topology, "topology", string(def.Topology), "`ring` (shards spread over all members) or master (every shard on one peer; the others only\ncompute: the parameter-server baseline)")
		fs.StringVar(&p.master, "master", "", "master topology: the `PEERID` holding every shard (default: the first --peer's ID, or this\npeer when it has no --peer: start the master first and point the workers at it)")
	})
}

// registerLog adds the libp2p log level to a Logging group.
func (p *peerFlags) registerLog(fs *flag.FlagSet) {
	fs.StringVar(&p.libLog, "libp2p-log-level", "warn", "least severe `level` of go-libp2p's and gossipsub's own logs: debug, info, warn, error")
}

// peerConfigFlag maps node.Config fields to the flags that set them.
var peerConfigFlag = map[string]string{
	"Job": "job", "Listen": "listen", "Identity": "identity", "Peers": "peer", "PeersFile": "peers-file",
	"SwarmKey": "swarm-key", "Heartbeat": "heartbeat", "DeadAfter": "dead-after", "MinPeers": "min-peers",
	"VNodes": "vnodes", "Shards": "shards", "Replicas": "replicas", "Topology": "topology", "Master": "master",
	"StatusAddr": "status-addr", "ConnLimit": "conn-limit", "MaxMessageSize": "max-message-size",
	"OutboundQueueSize": "outbound-queue", "ValidateQueueSize": "validate-queue", "GossipSub": "gossip-heartbeat",
	"RedialMax": "redial-max", "NAT": "nat", "Relay": "relay", "PSK": "swarm-key", "PeersAllowed": "peers-allowed",
}

// flagError turns a node.FieldError into a usage error naming the flag.
func flagError(err error) error {
	var fe *node.FieldError
	if errors.As(err, &fe) {
		if f, ok := peerConfigFlag[fe.Field]; ok {
			return usageErr(f, "%s", fe.Msg)
		}
	}
	return err
}

// config builds and validates the node configuration from the flags.
func (p *peerFlags) config() (node.Config, error) {
	cfg := node.DefaultConfig()
	cfg.Job = p.job
	if len(p.listen) > 0 {
		cfg.Listen = append([]string(nil), p.listen...)
	}
	cfg.Identity, cfg.SwarmKey, cfg.PeersAllowed = p.identity, p.swarmKey, p.peersAllowed
	cfg.Peers, cfg.PeersFile = append([]string(nil), p.peers...), p.peersFile
	cfg.MDNS, cfg.DHT = p.mdns, p.dht
	cfg.Heartbeat, cfg.DeadAfter, cfg.MinPeers = p.heartbeat, p.deadAfter, p.minPeers
	cfg.VNodes, cfg.Replicas = p.vnodes, p.replicas
	if !p.noShards {
		cfg.Shards = p.shards
	}
	cfg.Topology, cfg.Master = node.Topology(p.topology), p.master
	cfg.StatusAddr = p.statusAddr
	cfg.NAT, cfg.Relay = node.NATMode(p.nat), p.relay
	cfg.ConnLimit, cfg.MaxMessageSize = p.connLimit, p.maxMessage
	cfg.OutboundQueueSize, cfg.ValidateQueueSize = p.outQueue, p.valQueue
	cfg.GossipSub.HeartbeatInterval = p.gossipHeartbeat
	cfg.RedialMax = p.redialMax
	if cfg.RedialMin > cfg.RedialMax {
		cfg.RedialMin = cfg.RedialMax
	}
	lvl, err := zerolog.ParseLevel(p.libLog)
	if err != nil || p.libLog == "" {
		return cfg, usageErr("libp2p-log-level", "%q is not a level (debug, info, warn, error)", p.libLog)
	}
	cfg.LibLogLevel = lvl
	if cfg.DHT && len(cfg.Peers) == 0 && cfg.PeersFile == "" && !cfg.MDNS {
		return cfg, usageErr("dht", "the DHT needs a peer to join through: give --peer, --peers-file or --mdns")
	}
	err = cfg.Validate()
	var fe *node.FieldError
	if p.standalone && errors.As(err, &fe) && fe.Field == "SwarmKey" {
		err = nil // Validate checks the key last: every other field is valid
	}
	if err != nil {
		return cfg, flagError(err)
	}
	if cfg.PeersAllowed != "" { // now, not after the data is read
		if _, err := node.ReadPeersAllowed(cfg.PeersAllowed); err != nil {
			return cfg, usageErr("peers-allowed", "%v", strings.TrimPrefix(err.Error(), node.ErrPeersAllowed.Error()+": "))
		}
	}
	return cfg, nil
}

func peerCmd() *command {
	c, _ := newPeerCommand()
	return c
}

// newPeerCommand returns the peer command and its flags (tests parse into
// them).
func newPeerCommand() (*command, *peerFlags) {
	c := newCommand("peer", "join a cluster and show its membership and shard ring (diagnostic mode)", "--job NAME [--peer ADDR | --mdns] [flags]")
	p := &peerFlags{}
	var lf logFlags
	p.register(c)
	c.group("Logging", func(fs *flag.FlagSet) {
		lf.register(fs)
		p.registerLog(fs)
	})
	c.help = `
Run a peer without training: it gets its identity, listens, finds the other
peers of --job, agrees with them on who is alive, and logs the member set and
the shard ring each time they change ("member set epoch=7 members=4 owned=64").
Its view is served as JSON on --status-addr ('gossiptrain status ADDR').
'train' takes the same flags.

Finding peers (combine as needed):
  --peer ADDR   the address another peer logged at start (…/p2p/12D3Koo…);
                only that peer must be reachable: the others are learnt from
                the membership heartbeats and dialled directly.
  --mdns        no addresses: peers on one LAN or bridge find each other by
                multicast DNS. Needs a multicast-capable interface shared by
                the peers; loopback has none, and clouds rarely forward it.
  --dht         a Kademlia DHT private to gossiptrain with a rendezvous derived
                from the job name and the swarm key, for peers that share only
                a bootstrap peer.

A member silent for --dead-after is declared dead; every change of the member
set bumps its epoch, and ownership follows the ring of the agreed set.
SIGINT or SIGTERM announces a graceful leave (the others drop this peer at
once) before the process exits; a killed process is noticed after
--dead-after.

Large clusters: libp2p's resource manager allows 8 connections from one IP
address. When many peers reach each other through one public address (one NAT),
raise --conn-limit to about the number of peers behind it. Loopback is exempt.

Peers behind NAT (--nat auto, the default off loopback): a peer that AutoNAT
finds unreachable reserves a slot on a --relay peer of the job, the others
reach it through that relay, and hole punching then connects them directly
where the NATs allow it. Give --relay to a peer with a public address.
'gossiptrain status' lists each connection as direct, hole_punched or relayed.

The swarm key: a peer reachable beyond this machine (the default --listen
is every interface) needs --swarm-key, and refuses to start without one.
Make the key once with 'gossiptrain keygen --swarm job.key', copy it to every
peer (mode 0600) and pass --swarm-key job.key: hosts without it fail the
handshake, so they can neither join nor learn anything of the job. A peer
that listens on loopback only (--listen /ip4/127.0.0.1/tcp/0) needs no key.
--peers-allowed FILE narrows it further to the peer IDs listed. libp2p
private networks run over TCP only. See docs/security.md.`
	c.example = `  # once: a key for the job, copied to every VM (scp -p job.key vm2:)
  gossiptrain keygen --swarm job.key
  # VM 1 (logs its address: /ip4/10.0.0.5/tcp/4001/p2p/12D3Koo…)
  gossiptrain peer --job ctr1 --swarm-key job.key --listen /ip4/0.0.0.0/tcp/4001 --identity ~/.gossiptrain/key
  # VMs 2..N
  gossiptrain peer --job ctr1 --swarm-key job.key --listen /ip4/0.0.0.0/tcp/4001 --identity ~/.gossiptrain/key \
      --peer /ip4/10.0.0.5/tcp/4001/p2p/12D3Koo…
  # a cloud VM that relays for peers behind NAT (home, lab)
  gossiptrain peer --job ctr1 --swarm-key job.key --listen /ip4/0.0.0.0/tcp/4001 --relay
  # on a LAN, no addresses at all
  gossiptrain peer --job ctr1 --swarm-key job.key --mdns
  # two peers on this machine: loopback needs no key
  gossiptrain peer --job try --listen /ip4/127.0.0.1/tcp/4001
  # ask a running peer
  gossiptrain status 127.0.0.1:7070`
	c.run = func(c *command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, args[0])
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		cfg, err := p.config()
		if err != nil {
			return err
		}
		node.RouteLibp2pLogs(log, cfg.LibLogLevel)
		ctx, cancel := signalContext()
		defer cancel()
		return flagError(job.Watch(ctx, cfg, log))
	}
	return c, p
}

func keygenCmd() *command {
	c := newCommand("keygen", "write a swarm key (private cluster) or a peer identity", "--swarm FILE | --identity FILE")
	var swarm, identity string
	var force bool
	c.group("Keys", func(fs *flag.FlagSet) {
		fs.StringVar(&swarm, "swarm", "", "write a new 32-byte pre-shared swarm key to `FILE` in the standard /key/swarm/psk/1.0.0/\nformat; give the same file to every peer with --swarm-key")
		fs.StringVar(&identity, "identity", "", "write a new Ed25519 peer identity to `FILE` and print its peer ID (the peer command\ncreates one by itself on first run; this is for knowing the ID in advance, e.g. for --master)")
		fs.BoolVar(&force, "force", false, "replace an existing file (the old key is lost)")
	})
	c.help = `
Write secrets with mode 0600 (a missing directory is created with mode 0700).
An existing file is never replaced without --force.`
	c.example = `  gossiptrain keygen --swarm job.key     # copy to every peer (scp -p), then: peer --swarm-key job.key
  gossiptrain keygen --identity ~/.gossiptrain/key`
	c.run = func(c *command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, args[0])
		}
		if swarm == "" && identity == "" {
			return usageErr("swarm", "give --swarm FILE, --identity FILE, or both")
		}
		if swarm != "" {
			if _, err := node.CreateSwarmKey(swarm, force); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout(), "wrote swarm key %s (mode 0600): copy it to every peer of the cluster, keeping the mode (scp -p), and pass --swarm-key %s\n", swarm, swarm)
		}
		if identity != "" {
			key, err := node.CreateIdentity(identity, force)
			if err != nil {
				return err
			}
			id, err := peer.IDFromPrivateKey(key)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout(), "wrote identity %s: peer ID %s\n", identity, id)
		}
		return nil
	}
	return c
}

func statusCmd() *command {
	c := newCommand("status", "print a running peer's view of the cluster", "[--json] HOST:PORT")
	var asJSON bool
	var timeout time.Duration
	c.group("Output", func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the raw JSON of GET /status")
		fs.DurationVar(&timeout, "timeout", 5*time.Second, "give up after this long")
	})
	c.help = `
Ask the peer whose --status-addr is HOST:PORT (logged at its start) for its
view: peer ID, addresses, epoch, members, owned shards, topology, whether the
members agree, counters of rejected messages and gossipsub drops, its NAT
state (reachability, relays, hole punches) and how each connection travels:
direct, hole_punched (direct through NATs) or relayed.`
	c.example = `  gossiptrain status 127.0.0.1:7070
  gossiptrain status --json 127.0.0.1:7070 | jq .members`
	c.run = func(c *command, args []string) error {
		if len(args) == 0 {
			return fmt.Errorf("%w: missing HOST:PORT of the peer's --status-addr", errUsage)
		}
		addr := args[0]
		if err := c.flags.Parse(args[1:]); err != nil { // flags after the address
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if rest := c.flags.Args(); len(rest) > 0 {
			return fmt.Errorf("%w: unexpected argument %q", errUsage, rest[0])
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		s, err := node.FetchStatus(ctx, addr)
		if err != nil {
			return err
		}
		if asJSON {
			enc := json.NewEncoder(c.stdout())
			enc.SetIndent("", "  ")
			return enc.Encode(s)
		}
		return s.WriteText(c.stdout())
	}
	return c
}
