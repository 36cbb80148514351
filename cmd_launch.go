package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gossiptrain/gossiptrain/cluster"
	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/model"
)

// hiddenCommands are run by gossiptrain itself and not listed in help.
func hiddenCommands() []*command {
	return []*command{launchAgentCmd()}
}

func launchCmd() *command {
	c := newCommand("launch", "train on several machines at once, started over SSH", "--hosts HOST,… [--ship-data] [flags] [-- train flags]")
	var (
		hosts          listFlag
		hostsFile      string
		remoteDir      string
		shipData       bool
		dir, job, bin  string
		swarmKey       string
		save           string
		sshConfig      string
		sshOptions     repeatFlag
		connectTimeout time.Duration
		port           int
		statusPort     int
		lf             logFlags
	)
	c.group("Hosts", func(fs *flag.FlagSet) {
		fs.Var(&hosts, "hosts", "machines to run one peer each on, as `[USER@]HOST[:PORT]` (an address, a name, or an alias of\n~/.ssh/config); separate with commas or repeat. The first is the bootstrap peer of the others")
		fs.StringVar(&hostsFile, "hosts-file", "", "`FILE` with more hosts, one a line ('#' starts a comment)")
		fs.StringVar(&remoteDir, "remote-dir", "gossiptrain", "`DIR` on every host for the binary, identities, shipped data and each run's report and log;\nrelative to the login directory")
		fs.BoolVar(&shipData, "ship-data", false, "copy each host's training data (its file, or all of them with --part i/N) and the test set\ninto DIR/data/ on the host. Without it, --train and --test name files as the hosts see them")
		fs.StringVar(&bin, "binary", "", "gossiptrain `FILE` to copy to the hosts (default: this one; give a build for the hosts' system\nwhen it differs: GOOS=linux GOARCH=arm64 go build)")
		fs.IntVar(&port, "port", 0, "TCP `PORT` every peer listens on (0: a free one); open it between the hosts")
		fs.IntVar(&statusPort, "status-port", 0, "`PORT` of every peer's status server and dashboard, on the address the host was reached at\n(0: a free one, logged)")
	})
	c.group("SSH", func(fs *flag.FlagSet) {
		fs.StringVar(&sshConfig, "ssh-config", "", "ssh configuration `FILE` instead of ~/.ssh/config (ssh -F)")
		fs.Var(&sshOptions, "ssh-option", "ssh option `NAME=VALUE` for ssh and scp (ssh -o); repeat the flag for more (a value may hold\ncommas): --ssh-option ProxyJump=bastion --ssh-option IdentityFile=~/.ssh/lab")
		fs.DurationVar(&connectTimeout, "connect-timeout", 5*time.Second, "longest wait to connect to a host; one that does not answer fails the start")
	})
	c.group("Run", func(fs *flag.FlagSet) {
		fs.StringVar(&dir, "dir", "", "local run `DIR`: each peer's report and log, report.md and plots\n(default ./gossiptrain-runs/<time>-launch)")
		fs.StringVar(&job, "job", "", "job `name` the peers get (--job); default: launch- and 6 random hex digits, new for every\nlaunch (logged), so two launches never meet")
		fs.StringVar(&swarmKey, "swarm-key", "", "swarm key `FILE` every peer gets, copied to each host as DIR/runs/<run>/swarm.key (mode 0600)\nand passed with --swarm-key: only holders of the key can connect to the peers. Default:\na new key for each launch, written to the run directory (--dir) as swarm.key")
		fs.StringVar(&save, "save", "", "the first host's peer saves the trained model, copied back here to `FILE` (every peer ends\nwith the same model)")
	})
	tp := registerTrainFlags(c, mergeSkip(clusterSkipFlags, "save"))
	c.group("Logging", lf.register)
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
	c.run = func(c *command, args []string) error {
		// Train flags after "--" are parsed like those before it.
		if err := c.flags.Parse(args); err != nil {
			return fmt.Errorf("%w: after --: %v", errUsage, err)
		}
		if len(c.flags.Args()) > 0 {
			return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, c.flags.Arg(0))
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		specs := append([]string(nil), hosts...)
		if hostsFile != "" {
			more, err := readHostsFile(hostsFile)
			if err != nil {
				return usageErr("hosts-file", "%v", err)
			}
			specs = append(specs, more...)
		}
		if len(specs) == 0 {
			return usageErr("hosts", "give at least one host (or --hosts-file)")
		}
		var hs []cluster.Host
		for _, s := range specs {
			h, err := cluster.ParseHost(s)
			if err != nil {
				flagName := "hosts"
				if !contains(hosts, s) {
					flagName = "hosts-file"
				}
				return usageErr(flagName, "%v", err)
			}
			hs = append(hs, h)
		}
		n := len(hs)
		if dir == "" {
			dir = defaultRunDir("launch")
		}
		if err := checkSwarmKeyFlag(swarmKey); err != nil {
			return err
		}
		if job == "" {
			job = launchJobName()
			log.Info().Str("job", job).Msg("a job name of its own for this launch (--job to choose one)")
		}
		ssh := cluster.DefaultSSH()
		ssh.Hosts, ssh.Binary, ssh.RemoteDir, ssh.Dir = hs, bin, strings.TrimPrefix(remoteDir, "~/"), dir
		ssh.Run = filepath.Base(dir)
		ssh.ConnectTimeout, ssh.ListenPort, ssh.StatusPort, ssh.Log = connectTimeout, port, statusPort, log
		if sshConfig != "" {
			ssh.Options = append(ssh.Options, "-F", sshConfig)
		}
		for _, o := range sshOptions {
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
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return usageErr("dir", "%v", err)
		}
		// Mistakes in the flags first (they need no host), then the hosts:
		// one that cannot be used fails the start before any data is
		// generated, scanned or copied.
		patterns := tp.trainPatterns()
		localData := len(patterns) > 0 && (shipData || localFilesExist(patterns))
		switch {
		case localData:
			if _, _, err := infer.Expand(patterns, "train"); err != nil {
				return err
			}
			for _, f := range []string{"test", "train-labels", "test-labels"} {
				if v := tp.value(f); v != "" {
					if _, _, err := infer.Expand([]string{v}, f); err != nil {
						return err
					}
				}
			}
		case len(patterns) > 0:
			if err := remoteModelFlags(c, tp); err != nil {
				return err
			}
		}
		ctx, cancel := signalContext()
		defer cancel()
		log.Info().Int("hosts", n).Msg("checking the hosts")
		if err := ssh.Check(ctx); err != nil {
			return err
		}

		pass := tp.args(perPeerFlags...)
		var split peerSplit
		var meta *data.GenMeta
		var resolved []string
		var ship shipList
		if len(tp.trainPatterns()) == 0 {
			gen := clusterDefaultData()
			gen.Parts = n
			m, err := ensureData(filepath.Join(dir, "data"), gen, log)
			if err != nil {
				return err
			}
			meta = &m
			if !shipData {
				log.Info().Msg("shipping the generated data set to the hosts (as --ship-data)")
				shipData = true
			}
			pass = append(pass, "--train="+strings.Join(m.Files, ","))
			if !c.set("test") {
				pass = append(pass, "--test="+m.TestFile)
			}
			if !c.set("dim") {
				pass = append(pass, "--dim="+strconv.FormatUint(m.Features, 10))
			}
			if !c.set("eval-every") {
				if ep, err := strconv.Atoi(tp.value("epochs")); err == nil && ep > 0 {
					pass = append(pass, "--eval-every="+strconv.FormatInt(max(m.Rows*int64(ep)/int64(n)/4, 1), 10))
				}
			}
			if split, err = splitData(m.Files, n); err != nil {
				return err
			}
		} else if localData {
			if split, err = splitData(patterns, n); err != nil {
				return err
			}
			meta = split.meta
			pass = append(pass, "--train="+tp.value("train"))
		} else {
			// The hosts' own files: nothing to scan here.
			split = remoteSplit(patterns, n)
			pass = append(pass, "--train="+tp.value("train"))
		}
		if localData || len(patterns) == 0 {
			if resolved, _, err = resolveModel(pass, log); err != nil {
				return err
			}
		}
		common := append(append(withoutFlag(pass, "train"), split.common...), resolved...)
		own := split.own
		if shipData {
			if ship, err = shipFiles(pass, split, n); err != nil {
				return err
			}
			common = ship.rewrite(common)
			own = func(i int) []string { return ship.rewrite(split.own(i)) }
			ssh.Files = func(i int) []string { return ship.files[i] }
		}
		cfg := cluster.DefaultConfig()
		cfg.Peers, cfg.Dir, cfg.Job, cfg.Log, cfg.Launcher = n, dir, job, log, ssh
		cfg.SwarmKey = swarmKey
		cfg.TrainArgs = append(common, "--log-level", lf.level)
		remoteModel := "runs/" + ssh.Run + "/model.gt"
		cfg.PeerArgs = func(i int) []string {
			a := own(i)
			if i == 0 && save != "" {
				a = append(a, "--save", remoteModel)
			}
			return append(a, tp.perPeer(i)...)
		}
		cfg.ProgressEvery = progressEvery(tp)
		cfg.StartTimeout = 0

		log.Info().Int("hosts", n).Str("dir", dir).Str("job", job).Str("split", split.how).Bool("ship_data", shipData).Msg("launching")
		res, err := cluster.Run(ctx, cfg)
		if err != nil {
			return err
		}
		if save != "" {
			if err := ssh.Fetch(ctx, 0, remoteModel, save); err != nil {
				return fmt.Errorf("--save: %w", err)
			}
			log.Info().Str("file", save).Str("from", hs[0].String()).Msg("model copied back")
		}
		return finishCluster(c.stdout(), res, meta, strings.Join(os.Args, " "), log)
	}
	return c
}

// launchJobName is a job name of its own for a launch: "launch-" and 6
// random hex digits, so that two launches (or a launch and a stranger's
// job on the same network) never take each other for peers of one job.
func launchJobName() string {
	b := make([]byte, 3)
	rand.Read(b) // never fails (crypto/rand)
	return "launch-" + hex.EncodeToString(b)
}

// readHostsFile reads one host a line; '#' starts a comment.
func readHostsFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		s, _, _ := strings.Cut(sc.Text(), "#")
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if strings.ContainsAny(s, " \t") {
			return nil, fmt.Errorf("%s:%d: %q: one host a line", path, line, s)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// localFilesExist reports whether every pattern names files here.
func localFilesExist(patterns []string) bool {
	if len(patterns) == 0 {
		return false
	}
	_, _, err := infer.Expand(patterns, "train")
	return err == nil
}

// remoteModelFlags checks that the model is fully given when the data
// lives on the hosts only: each peer would otherwise infer its own model
// from its own part.
func remoteModelFlags(c *command, tp *trainPass) error {
	if !c.set("dim") {
		return usageErr("dim", "required when --train names the hosts' files (they cannot be scanned here to infer it; or use --ship-data)")
	}
	kind := tp.value("model")
	if kind == "" || kind == "auto" {
		return usageErr("model", "give logreg, softmax or mlp when --train names the hosts' files (or use --ship-data)")
	}
	if k, err := model.ParseKind(kind); err == nil && k.Multiclass() && !c.set("classes") {
		return usageErr("classes", "required for --model %s when --train names the hosts' files", kind)
	}
	return nil
}

// remoteSplit divides remote training files among n hosts without seeing
// them: one each when --train lists exactly n plain names, else --part.
func remoteSplit(patterns []string, n int) peerSplit {
	plain := len(patterns) == n && n > 1
	for _, p := range patterns {
		plain = plain && !strings.ContainsAny(p, "*?[")
	}
	if plain {
		return peerSplit{own: func(i int) []string { return []string{"--train", patterns[i]} }, how: "one file per host (the hosts' own)"}
	}
	if n == 1 {
		return peerSplit{common: []string{"--train", strings.Join(patterns, ",")}, own: func(int) []string { return nil }, how: "one host reads everything"}
	}
	return peerSplit{
		common: []string{"--train", strings.Join(patterns, ",")},
		own:    func(i int) []string { return []string{"--part", fmt.Sprintf("%d/%d", i+1, n)} },
		how:    fmt.Sprintf("every host reads every %d-th row of its own copy (--part i/%d)", n, n),
	}
}

// shipList is what --ship-data copies: the files of each host, and the
// names the train flags give them there.
type shipList struct {
	files  [][]string        // by host
	rename map[string]string // local path -> data/<name>
}

// rewrite replaces local paths in flag values by their shipped names.
func (s shipList) rewrite(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		name, val, hasEq := strings.Cut(a, "=")
		if !hasEq || !strings.HasPrefix(name, "--") {
			name, val = "", a
		}
		parts := strings.Split(val, ",")
		for j, p := range parts {
			if r, ok := s.rename[p]; ok {
				parts[j] = r
			}
		}
		val = strings.Join(parts, ",")
		if name != "" {
			val = name + "=" + val
		}
		out[i] = val
	}
	return out
}

// shipFiles lists each host's files: its training files (every file with
// --part), the test set, and the labels of IDX images.
func shipFiles(pass []string, split peerSplit, n int) (shipList, error) {
	s := shipList{files: make([][]string, n), rename: map[string]string{}}
	value := func(args []string, name string) string {
		for j := 0; j < len(args); j++ {
			if v, ok := strings.CutPrefix(args[j], "--"+name+"="); ok {
				return v
			}
			if args[j] == "--"+name && j+1 < len(args) {
				return args[j+1]
			}
		}
		return ""
	}
	taken := map[string]string{}
	add := func(i int, path, flagName string) error {
		if path == "" {
			return nil
		}
		files, _, err := infer.Expand([]string{path}, flagName)
		if err != nil {
			return err
		}
		var names []string
		defer func() { s.rename[path] = strings.Join(names, ",") }() // a pattern becomes its files
		for _, f := range files {
			with := []string{f}
			if strings.Contains(filepath.Base(f), "idx3") && value(pass, flagName+"-labels") == "" {
				if l, err := data.IDXLabelsPath(f); err == nil {
					with = append(with, l)
				}
			}
			for _, g := range with {
				name := cluster.ShipName(g)
				if prev, ok := taken[name]; ok && prev != g {
					return usageErr(flagName, "%s and %s would both be shipped as %s: give the files different names", prev, g, name)
				}
				taken[name] = g
				s.rename[g] = name
				if g == f {
					names = append(names, name)
				}
				if !contains(s.files[i], g) {
					s.files[i] = append(s.files[i], g)
				}
			}
		}
		return nil
	}
	for i := range n {
		trainArgs := append(append([]string(nil), split.common...), split.own(i)...)
		for _, p := range strings.Split(value(trainArgs, "train"), ",") {
			if err := add(i, p, "train"); err != nil {
				return s, err
			}
		}
		for _, f := range []string{"test", "train-labels", "test-labels"} {
			if err := add(i, value(pass, f), f); err != nil {
				return s, err
			}
		}
	}
	return s, nil
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

// exitCode is an error that makes the process exit with that status and
// print nothing (the peer's own log said why).
type exitCode int

func (e exitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }
