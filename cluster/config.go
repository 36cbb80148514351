package cluster

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Errors of this package; returned errors wrap them.
var (
	// ErrConfig marks an invalid Config.
	ErrConfig = errors.New("invalid cluster configuration")
	// ErrPeerFailed marks a run in which a peer exited with an error (see
	// PeerError).
	ErrPeerFailed = errors.New("peer failed")
	// ErrNetNS marks a failure to set up or tear down network namespaces.
	ErrNetNS = errors.New("network namespaces")
)

// Config says which peers to run and how.
type Config struct {
	// Binary is the gossiptrain executable the peers run; "" is the
	// running program (os.Executable()).
	Binary string
	// Peers is the number of peer processes (at least 1).
	Peers int
	// Dir is the run directory, created if missing: peer-N.jsonl (reports)
	// and peer-N.log (each peer's standard error) are written there.
	Dir string
	// Identities is the directory of the peers' identity files
	// peer-N.key, created on first use; "" is Dir. Runs that share it keep
	// their peer IDs, so sync runs of the same data compare bit for bit.
	Identities string
	// Job is the --job name the peers get.
	Job string
	// SwarmKey is the swarm key file every peer gets (--swarm-key): only
	// holders of the key can connect to the peers (see docs/security.md).
	// Empty: Run writes a new key for the run, Dir/swarm.key (mode 0600),
	// and the launcher hands it to every peer (an SSH launcher copies it to
	// every host). Unused with Standalone.
	SwarmKey string
	// TrainArgs are the flags every peer's "train" gets (the data, model
	// and run flags). The flags Run sets itself (ManagedFlags) may not
	// appear; --min-peers defaults to Peers and may be overridden.
	TrainArgs []string
	// PeerArgs, when not nil, returns more flags for peer i (0-based),
	// such as its part of the data: --part i+1/N.
	PeerArgs func(i int) []string
	// NetNS, when not nil, runs every peer in a network namespace of its
	// own with shaped links (root only; see NetNS).
	NetNS *NetNS
	// CPUs, when above 0, caps every peer process at this many CPU cores
	// (0.4: 40 ms of CPU time in every 100 ms) with a cgroup of its own, as
	// if each ran on a VM of that size (Linux, root, a cgroup v1 cpu or v2
	// cpu controller; see CPUGroups). The groups are removed when Run
	// returns. 0 leaves the peers uncapped.
	CPUs float64
	// Unpinned, with CPUs, lets every peer run on any CPU of the machine.
	// By default each is bound to its own ceil(CPUs) CPUs, packed so that
	// no CPU is asked for more than one core (see pinPlan), as a VM's
	// vCPUs are its own; peers whose caps cannot be packed so run free.
	Unpinned bool
	// Standalone runs processes of plain "train" (no --job: the single
	// process path, each training alone on the data its PeerArgs give it)
	// instead of a job's peers: with Peers 1, the one-peer baseline a
	// cluster's throughput is compared with; with more, that many started
	// at once and exchanging nothing (bench's processes apart). It needs no
	// NetNS; Run adds only --report and --log-format to their command
	// lines.
	Standalone bool
	// Launcher, when not nil, starts the peers instead of processes on
	// this machine (SSH runs them on other hosts). Binary, Identities,
	// NetNS and Env are the local launcher's and must be unset then.
	Launcher Launcher
	// Env is added to the peers' environment ("NAME=value").
	Env []string
	// Log receives Run's own lines: peers started, progress (unless
	// OnProgress is set), peers that exited, cleanup.
	Log zerolog.Logger
	// ProgressEvery is how often Run reports progress; 0 turns it off.
	ProgressEvery time.Duration
	// OnProgress, when not nil, receives every progress report instead of
	// the log. It is called from Run's goroutine and must not block.
	OnProgress func([]PeerProgress)
	// StartTimeout bounds how long peer 0 may take to log its address
	// (it first checks its flags and may scan the training data); 0 waits
	// as long as peer 0 runs.
	StartTimeout time.Duration
	// Grace is how long peers have to exit after peerlog.StopSignal (a
	// gossiptrain peer stops at once on it, writing its report) before
	// SIGKILL: a safety net for a peer that hangs, not a wait peers use.
	Grace time.Duration
	// TailLines is how many lines of a failed peer's log its error shows.
	TailLines int
}

// DefaultConfig returns a configuration of four peers; Dir and TrainArgs
// are left for the caller.
func DefaultConfig() Config {
	return Config{
		Peers:         4,                // the smallest cluster where master and ring differ clearly
		Job:           "cluster",        // any name: local peers only meet each other
		Log:           zerolog.Nop(),    //
		ProgressEvery: 5 * time.Second,  // a line a person can follow
		StartTimeout:  0,                // a large data set's scan may take minutes
		Grace:         10 * time.Second, // peers stop in about a second; a peer still running after 10s hangs
		TailLines:     15,               // enough for an error and its context
	}
}

// ManagedFlags are the train flags Run sets on every peer itself, so
// TrainArgs and PeerArgs may not contain them.
var ManagedFlags = []string{"job", "identity", "report", "listen", "peer", "peers-file", "log-format", "swarm-key"}

// maxNetNSPeers bounds the peers of a NetNS run: one /24 of addresses.
const maxNetNSPeers = 250

// Validate checks the configuration; errors name the field at fault.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("cluster: %w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Peers < 1:
		return bad("Peers %d: want at least 1", c.Peers)
	case c.Dir == "":
		return bad("Dir is empty: the run needs a directory for reports and logs")
	case c.Job == "":
		return bad("Job is empty")
	case c.ProgressEvery < 0:
		return bad("ProgressEvery %v: want >= 0", c.ProgressEvery)
	case c.StartTimeout < 0:
		return bad("StartTimeout %v: want >= 0", c.StartTimeout)
	case c.Grace < 0:
		return bad("Grace %v: want >= 0", c.Grace)
	case c.TailLines < 0:
		return bad("TailLines %d: want >= 0", c.TailLines)
	}
	if f := managedFlag(c.TrainArgs); f != "" {
		return bad("TrainArgs set --%s, which Run sets on every peer itself", f)
	}
	if c.PeerArgs != nil {
		for i := range c.Peers {
			if f := managedFlag(c.PeerArgs(i)); f != "" {
				return bad("PeerArgs(%d) set --%s, which Run sets on every peer itself", i, f)
			}
		}
	}
	if c.Launcher != nil && (c.NetNS != nil || c.Binary != "" || c.Identities != "" || len(c.Env) > 0 || c.CPUs != 0) {
		return bad("Launcher is set: Binary, Identities, NetNS, CPUs and Env belong to the local launcher and must be empty")
	}
	if math.IsNaN(c.CPUs) || c.CPUs < 0 || (c.CPUs > 0 && c.CPUs < MinCPUs) {
		return bad("CPUs %g: want 0 (uncapped) or at least %g cores", c.CPUs, MinCPUs)
	}
	if c.Standalone && c.NetNS != nil {
		return bad("Standalone runs processes that listen nowhere: want no NetNS")
	}
	if c.NetNS != nil {
		if c.Peers > maxNetNSPeers {
			return bad("Peers %d: at most %d peers with NetNS (one /24 of addresses)", c.Peers, maxNetNSPeers)
		}
		if err := c.NetNS.Validate(); err != nil {
			return err
		}
	}
	for _, e := range c.Env {
		if !strings.Contains(e, "=") {
			return bad("Env entry %q: want NAME=value", e)
		}
	}
	return nil
}

// managedFlag returns the first flag of ManagedFlags that args set, or "".
func managedFlag(args []string) string {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name := strings.TrimLeft(a, "-")
		name, _, _ = strings.Cut(name, "=")
		for _, m := range ManagedFlags {
			if name == m {
				return m
			}
		}
	}
	return ""
}

// hasFlag reports whether args set the flag name.
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			n, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if n == name {
				return true
			}
		}
	}
	return false
}
