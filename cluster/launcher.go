package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// A Launcher starts the processes of a run's peers. Run supervises them
// the same way whatever started them: peer 0 first and the others
// bootstrapped to the address it logs, one combined progress line from
// their reports, a failed peer's log tail, SIGTERM-then-SIGKILL stops, and
// a Result that lists every peer's report and log in the run directory.
//
// The local launcher (Config.Launcher nil) runs processes on this machine,
// in network namespaces with Config.NetNS; SSH (remote.go) runs one peer on
// each of a list of hosts over the system's ssh.
type Launcher interface {
	// Prepare readies n peers before the first one starts (network
	// namespaces; copies of the binary, the data and the swarm key on
	// remote hosts). swarmKey is the local path of the run's swarm key
	// file ("" for a Standalone run, which listens nowhere). It fails
	// without starting anything.
	Prepare(ctx context.Context, n int, swarmKey string) error
	// Launch says how to start peer i. args is its train command line
	// ("train" and the flags Run sets: --min-peers, --job, --log-format,
	// --peer and the caller's TrainArgs and PeerArgs); the launcher adds
	// --identity, --report, --listen and --swarm-key, which depend on
	// where the peer runs.
	Launch(i int, args []string) (*Launch, error)
	// Collect runs once peer i has exited: it brings back what the peer
	// left where it ran (its report, when the copy Run followed is
	// incomplete). An error is logged, not fatal: the run's result
	// stands.
	Collect(ctx context.Context, i int) error
	// Close undoes Prepare (namespaces removed, connections closed). Run
	// calls it once, also after a failed Prepare.
	Close() error
}

// Launch is how one peer process starts, and where its outputs go.
type Launch struct {
	// Cmd is the process to start (not started). Run sets its standard
	// output and error, its process group and its parent-death signal.
	Cmd *exec.Cmd
	// Where names the host the peer runs on, for messages ("" is this
	// machine).
	Where string
	// AddrPrefix is how the address the other peers dial begins
	// ("/ip4/10.0.0.5/tcp/"): of the addresses the peer logs, Run takes
	// the first with this prefix.
	AddrPrefix string
	// Report is the local path of the peer's report, which Run follows for
	// progress and lists in the Result.
	Report string
	// ReportOnStdout says the process writes its report to its standard
	// output (a remote peer's report, streamed back); Run copies it to
	// Report. Otherwise standard output goes to the log with standard
	// error.
	ReportOnStdout bool
	// Stop, when not nil, asks the process to stop (syscall.SIGTERM: leave
	// gracefully; syscall.SIGKILL: at once) instead of signalling Cmd's
	// process. It must not block.
	Stop func(sig syscall.Signal)
	// CPUs, when not empty, are the CPUs of this machine the process is
	// bound to from its start (see pinPlan).
	CPUs []int
}

// local is the Launcher of processes on this machine: the one Run uses
// when Config.Launcher is nil.
type local struct {
	cfg    Config
	bin    string // absolute path of the binary
	dir    string // absolute run directory
	ids    string // absolute identity directory
	nw     *network
	prefix string     // the namespaces' name prefix, with NetNS
	cpu    *CPUGroups // with CPUs
	pin    [][]int    // with CPUs and not Unpinned: peer i's CPUs (see pinPlan)
	key    string     // the swarm key file ("" with Standalone)
}

// newLocal resolves the binary and the directories of cfg.
func newLocal(cfg Config, dir string) (*local, error) {
	bin := cfg.Binary
	var err error
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("cluster: cannot find the gossiptrain binary: %w", err)
		}
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	ids := dir
	if cfg.Identities != "" {
		if ids, err = filepath.Abs(cfg.Identities); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	if err := os.MkdirAll(ids, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return &local{cfg: cfg, bin: bin, dir: dir, ids: ids}, nil
}

func (l *local) Prepare(ctx context.Context, n int, swarmKey string) error {
	l.key = swarmKey
	if l.cfg.CPUs > 0 {
		if removed, err := CleanupStaleCgroups(); err != nil {
			l.cfg.Log.Warn().Err(err).Msg("removing the cgroups of an earlier run")
		} else if len(removed) > 0 {
			l.cfg.Log.Info().Strs("cgroups", removed).Msg("removed the cgroups an earlier run left behind")
		}
		g, err := NewCPUGroups(n, l.cfg.CPUs)
		if err != nil {
			return err
		}
		l.cpu = g
		ev := l.cfg.Log.Info().Float64("cpus", l.cfg.CPUs).Str("groups", g.String())
		if !l.cfg.Unpinned {
			allowed, err := allowedCPUs()
			if err != nil {
				return err
			}
			plan, why := pinPlan(allowed, n, l.cfg.CPUs)
			if plan != nil {
				ev = ev.Str("pinned", describePlan(plan))
			} else {
				ev = ev.Str("not_pinned", why)
			}
			l.pin = plan
		}
		ev.Msg("every peer capped by a cgroup")
	}
	if l.cfg.NetNS == nil {
		return nil
	}
	prefix := newPrefix()
	nw, err := setupNetwork(ctx, prefix, n, *l.cfg.NetNS)
	if err != nil {
		return err // Run calls Close, which removes the groups
	}
	l.nw, l.prefix = nw, prefix
	l.cfg.Log.Info().Str("prefix", prefix).Int("peers", n).Str("links", l.cfg.NetNS.String()).
		Msg("network namespaces ready")
	return nil
}

func (l *local) Launch(i int, args []string) (*Launch, error) {
	ip := "127.0.0.1"
	if l.nw != nil {
		ip = l.nw.addr[i]
	}
	report := filepath.Join(l.dir, fmt.Sprintf("peer-%d.jsonl", i))
	if l.cfg.Standalone {
		args = append(args, "--report", report)
	} else {
		args = append(args,
			"--identity", filepath.Join(l.ids, fmt.Sprintf("peer-%d.key", i)),
			"--report", report,
			"--listen", "/ip4/"+ip+"/tcp/0")
		if l.key != "" {
			args = append(args, "--swarm-key", l.key)
		}
	}
	name := l.bin
	if l.nw != nil {
		name, args = l.nw.command(i, l.bin, args)
	}
	if l.cpu != nil {
		// Outside the namespace: ip netns exec remounts /sys, where the
		// groups are.
		name, args = l.cpu.Command(i, name, args)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), l.cfg.Env...)
	var cpus []int
	if i < len(l.pin) {
		cpus = l.pin[i]
	}
	return &Launch{Cmd: cmd, AddrPrefix: "/ip4/" + ip + "/tcp/", Report: report, CPUs: cpus}, nil
}

func (l *local) Collect(context.Context, int) error { return nil }

func (l *local) Close() error {
	var errs []error
	if l.nw != nil {
		if err := l.nw.close(); err != nil {
			l.cfg.Log.Error().Err(err).Str("prefix", l.prefix).Msg("removing the network namespaces")
			errs = append(errs, err)
		} else {
			l.cfg.Log.Debug().Str("prefix", l.prefix).Msg("network namespaces removed")
		}
	}
	if l.cpu != nil {
		// Run has waited for every peer: the groups are empty, or hold
		// what a peer left running, which Close moves out.
		if err := l.cpu.Close(); err != nil {
			l.cfg.Log.Error().Err(err).Msg("removing the cgroups of --cpus")
			errs = append(errs, err)
		} else {
			l.cfg.Log.Debug().Msg("cgroups removed")
		}
	}
	return errors.Join(errs...)
}

var _ Launcher = (*local)(nil)

// joinClose runs closeFn and joins its error into *err.
func joinClose(err *error, closeFn func() error) {
	if cerr := closeFn(); cerr != nil {
		*err = errors.Join(*err, cerr)
	}
}
