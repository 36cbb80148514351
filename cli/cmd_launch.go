package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gossiptrain/gossiptrain/cluster"
)

// hiddenCommands are run by gossiptrain itself and not listed in help.
func hiddenCommands() []*command {
	return []*command{launchAgentCmd()}
}

func launchCmd() *command {
	c := newCommand("launch", "train on several machines at once, started over SSH", "--hosts HOST,… [--ship-data] [flags] [-- train flags]")
	f := &launchFlags{}
	c.group("Hosts", func(fs *flag.FlagSet) {
		fs.Var(&f.hosts, "hosts", "machines to run one peer each on, as `[USER@]HOST[:PORT]` (an address, a name, or an alias of\n~/.ssh/config); separate with commas or repeat. The first is the bootstrap peer of the others")
		fs.StringVar(&f.hostsFile, "hosts-file", "", "`FILE` with more hosts, one a line ('#' starts a comment)")
		fs.StringVar(&f.remoteDir, "remote-dir", "gossiptrain", "`DIR` on every host for the binary, identities, shipped data and each run's report and log;\nrelative to the login directory")
		fs.BoolVar(&f.shipData, "ship-data", false, "copy each host's training data (its file, or all of them with --part i/N) and the test set\ninto DIR/data/ on the host. Without it, --train and --test name files as the hosts see them")
		fs.StringVar(&f.bin, "binary", "", "gossiptrain `FILE` to copy to the hosts (default: this one; give a build for the hosts' system\nwhen it differs: GOOS=linux GOARCH=arm64 go build)")
		fs.IntVar(&f.port, "port", 0, "TCP `PORT` every peer listens on (0: a free one); open it between the hosts")
		fs.IntVar(&f.statusPort, "status-port", 0, "`PORT` of every peer's status server and dashboard, on the address the host was reached at\n(0: a free one, logged)")
	})
	c.group("SSH", func(fs *flag.FlagSet) {
		fs.StringVar(&f.sshConfig, "ssh-config", "", "ssh configuration `FILE` instead of ~/.ssh/config (ssh -F)")
		fs.Var(&f.sshOptions, "ssh-option", "ssh option `NAME=VALUE` for ssh and scp (ssh -o); repeat the flag for more (a value may hold\ncommas): --ssh-option ProxyJump=bastion --ssh-option IdentityFile=~/.ssh/lab")
		fs.DurationVar(&f.connectTimeout, "connect-timeout", 5*time.Second, "longest wait to connect to a host; one that does not answer fails the start")
	})
	c.group("Run", func(fs *flag.FlagSet) {
		fs.StringVar(&f.dir, "dir", "", "local run `DIR`: each peer's report and log, report.md and plots\n(default ./gossiptrain-runs/<time>-launch)")
		fs.StringVar(&f.job, "job", "", "job `name` the peers get (--job); default: launch- and 6 random hex digits, new for every\nlaunch (logged), so two launches never meet")
		fs.StringVar(&f.swarmKey, "swarm-key", "", "swarm key `FILE` every peer gets, copied to each host as DIR/runs/<run>/swarm.key (mode 0600)\nand passed with --swarm-key: only holders of the key can connect to the peers. Default:\na new key for each launch, written to the run directory (--dir) as swarm.key")
		fs.StringVar(&f.save, "save", "", "the first host's peer saves the trained model, copied back here to `FILE` (every peer ends\nwith the same model)")
	})
	f.tp = registerTrainFlags(c, skipAlso("save"))
	c.group("Logging", f.lf.register)
	c.help = `
Run one peer of 'gossiptrain train' on each of --hosts over SSH, as
'gossiptrain cluster' does on one machine: copy the binary (and with
--ship-data each host's part of the data), start the first host's peer and
bootstrap the others to it, show one combined progress line, stream every
peer's report and log back into the run directory, and when they are done
print the result table and write report.md and plots there.

It uses this machine's ssh and scp, so ~/.ssh/config, ssh-agent, jump hosts
(ProxyJump) and known_hosts work as at your prompt. It never asks for a
password: a host that wants one, or whose key is unknown, fails the start
with ssh's message (add it to known_hosts first: ssh HOST true). A host that
does not answer within --connect-timeout fails the start, naming it.

Train flags go after '--' (or before it, as with cluster). The data is split
as cluster splits it: one file per host when --train names exactly as many
files as hosts, else every host reads --part i/N. With no --train at all, a
Criteo-like data set is generated here and shipped. Without --ship-data the
paths are the hosts' own (relative to --remote-dir), and the model's --dim
and --model must be given, since the files cannot be scanned here.

Every launch makes a new swarm key (or takes --swarm-key FILE), copies it to
each host (mode 0600) and gives it to every peer: the peers listen on every
interface, and only holders of the key can connect to them. The job name is
new for every launch too (launch-<6 hex digits>) unless --job is given.

Ctrl-C stops every peer (each leaves the job gracefully); if this process or
its connection dies, each host's agent stops its peer on its own. Each peer's
dashboard is on its status server; the URL of the first is logged.`
	c.example = `  gossiptrain launch --hosts vm1,vm2,vm3,vm4                  # a generated data set, shipped
  gossiptrain launch --hosts-file hosts.txt --ship-data -- --train 'data/train-*.svm' --test data/test.svm \
      --dim 16777216 --batch 1000
  gossiptrain launch --hosts ubuntu@10.0.0.5,ubuntu@10.0.0.6:2222 --ssh-option ProxyJump=bastion \
      -- --train /data/criteo.svm --test /data/test.svm --model logreg --dim 16777216`
	c.run = f.run
	return c
}

// parseHosts parses --hosts and the hosts of --hosts-file, naming the flag
// of a host that is not [USER@]HOST[:PORT].
func parseHosts(hosts []string, hostsFile string) ([]cluster.Host, error) {
	specs := append([]string(nil), hosts...)
	if hostsFile != "" {
		more, err := cluster.ReadHostsFile(hostsFile)
		if err != nil {
			return nil, usageErr("hosts-file", "%v", err)
		}
		specs = append(specs, more...)
	}
	if len(specs) == 0 {
		return nil, usageErr("hosts", "give at least one host (or --hosts-file)")
	}
	var hs []cluster.Host
	for _, s := range specs {
		h, err := cluster.ParseHost(s)
		if err != nil {
			flagName := "hosts"
			if !slices.Contains(hosts, s) {
				flagName = "hosts-file"
			}
			return nil, usageErr(flagName, "%v", err)
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// launchAgentCmd is what launch runs on each host: one peer, its report
// and log streamed back over the SSH session (cluster.RunAgent).
func launchAgentCmd() *command {
	c := newCommand(cluster.AgentCommand, "run one peer for launch on this host (started over SSH by launch)", "--report FILE [--log FILE] -- train …")
	var report, logPath string
	var grace time.Duration
	c.group("Agent", func(fs *flag.FlagSet) {
		fs.StringVar(&report, "report", "", "the peer's report `FILE` (its --report), streamed to standard output")
		fs.StringVar(&logPath, "log", "", "keep a copy of the peer's log in `FILE`")
		fs.DurationVar(&grace, "grace", 10*time.Second, "time the peer has to leave once the session is gone, before SIGKILL")
	})
	c.help = `
Started by 'gossiptrain launch' over SSH, not by hand: it runs the train
command after '--' as its child, copies the peer's output to standard error
(and --log), streams its report to standard output, and stops it when
standard input says "term" (leave gracefully) or "kill", or reaches its end
(the launcher or its connection is gone).`
	c.run = func(c *command, args []string) error {
		if report == "" {
			return usageErr("report", "required")
		}
		if len(args) == 0 || args[0] != "train" {
			return fmt.Errorf("%w: want the train command after --", errUsage)
		}
		bin, err := os.Executable()
		if err != nil {
			return err
		}
		// A broken session makes writes fail (EPIPE) instead of killing
		// the agent: its standard input's EOF stops the peer in order.
		pipes := make(chan os.Signal, 1)
		signal.Notify(pipes, syscall.SIGPIPE)
		defer signal.Stop(pipes)
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		defer cancel()
		code, err := cluster.RunAgent(ctx, cluster.AgentConfig{
			Binary: bin, Args: args, Report: report, Log: logPath, Grace: grace,
			In: os.Stdin, Out: os.Stdout, Err: os.Stderr,
		})
		if err != nil {
			return err
		}
		if code != 0 {
			return exitCode(code)
		}
		return nil
	}
	return c
}

// repeatFlag is a repeatable string flag whose values may hold commas.
type repeatFlag []string

func (r *repeatFlag) String() string     { return strings.Join(*r, " ") }
func (r *repeatFlag) Set(s string) error { *r = append(*r, s); return nil }

// launchFlags are the flags of launch; run runs it.
type launchFlags struct {
	tp             *trainPass // train's flags, passed to every peer
	hosts          listFlag
	hostsFile      string
	remoteDir      string
	shipData       bool
	dir            string
	job            string
	bin            string
	swarmKey       string
	save           string
	sshConfig      string
	sshOptions     repeatFlag
	connectTimeout time.Duration
	port           int
	statusPort     int
	lf             logFlags
}

func (f *launchFlags) run(c *command, args []string) error {
	// Train flags after "--" are parsed like those before it.
	if err := c.flags.Parse(args); err != nil {
		return fmt.Errorf("%w: after --: %v", errUsage, err)
	}
	if len(c.flags.Args()) > 0 {
		return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, c.flags.Arg(0))
	}
	log, err := f.lf.logger()
	if err != nil {
		return err
	}
	hs, err := parseHosts(f.hosts, f.hostsFile)
	if err != nil {
		return err
	}
	if f.dir == "" {
		f.dir = defaultRunDir("launch")
	}
	if err := checkSwarmKeyFlag(f.swarmKey); err != nil {
		return err
	}
	if f.job == "" {
		f.job = cluster.LaunchJobName()
		log.Info().Str("job", f.job).Msg("a job name of its own for this launch (--job to choose one)")
	}
	ssh := cluster.DefaultSSH()
	ssh.Hosts, ssh.Binary, ssh.RemoteDir, ssh.Dir = hs, f.bin, strings.TrimPrefix(f.remoteDir, "~/"), f.dir
	ssh.Run = filepath.Base(f.dir)
	ssh.ConnectTimeout, ssh.ListenPort, ssh.StatusPort, ssh.Log = f.connectTimeout, f.port, f.statusPort, log
	if f.sshConfig != "" {
		ssh.Options = append(ssh.Options, "-F", f.sshConfig)
	}
	for _, o := range f.sshOptions {
		ssh.Options = append(ssh.Options, "-o", o)
	}
	if err := ssh.Validate(); err != nil {
		switch {
		case strings.Contains(err.Error(), "RemoteDir"):
			return usageErr("remote-dir", "%v", err)
		case strings.Contains(err.Error(), "ConnectTimeout"):
			return usageErr("connect-timeout", "%v", err)
		case strings.Contains(err.Error(), "Port"):
			return usageErr("port", "%v", err)
		}
		return usageErr("dir", "%v", err)
	}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return usageErr("dir", "%v", err)
	}
	ctx, cancel := signalContext()
	defer cancel()
	return cluster.RunLaunch(ctx, cluster.LaunchConfig{SSH: ssh, Dir: f.dir, Job: f.job, SwarmKey: f.swarmKey, Save: f.save,
		ShipData: f.shipData, LogLevel: f.lf.level, Train: f.tp, Log: log, Out: c.stdout(), Cmdline: strings.Join(os.Args, " ")})
}
