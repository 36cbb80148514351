// Package cli is gossiptrain's command line: its commands, their flags and
// help, and the exit statuses. Each command parses its flags, builds the
// configuration of the package that does the work, and calls it: train
// infer.Prepare and job.RunAlone or job.RunPeer; cluster, bench and launch
// cluster.RunLocal, RunBench and RunLaunch; report the report package; eval
// and predict the model and sgd packages. Main runs one command line.
//
// The files stand in layers, each using only those below it: run.go (the
// command list and dispatch) over the commands; cluster, bench and launch
// (cmd_cluster.go, cmd_bench.go, cmd_launch.go) over cli_pass.go, which
// passes train's flags through to their peers, over train (cmd_train.go
// over cmd_train_check.go over cmd_train_flags.go) over the peer's flags
// (cmd_peer.go); eval over predict's writer (cmd_predict.go); and all of
// them over cli.go (the command type, help, flag types, logging).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// cpuProfile writes a CPU profile of the whole command to
// $GOSSIPTRAIN_CPUPROFILE_DIR/<command>-<pid>.prof when that variable is
// set: every process of a cluster or bench run (they inherit it) profiles
// itself, for 'go tool pprof'. A developer's tool, off by default; the
// returned function stops and writes the profile.
func cpuProfile(command string) func() {
	dir := os.Getenv("GOSSIPTRAIN_CPUPROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.prof", command, os.Getpid())))
	if err != nil {
		fmt.Fprintf(os.Stderr, "gossiptrain: GOSSIPTRAIN_CPUPROFILE_DIR: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "gossiptrain: GOSSIPTRAIN_CPUPROFILE_DIR: %v\n", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// commands lists the subcommands in the order "gossiptrain help" shows them.
func commands() []*command {
	return []*command{
		clusterCmd(),
		launchCmd(),
		benchCmd(),
		trainCmd(),
		evalCmd(),
		predictCmd(),
		inspectCmd(),
		exportCmd(),
		genCmd(),
		peerCmd(),
		keygenCmd(),
		statusCmd(),
		reportCmd(),
	}
}

// Main runs one command line (the arguments after the program's name) and
// returns the process exit status: 0 success, 1 failure, 2 usage error,
// 130 interrupted.
func Main(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			for _, c := range cmds {
				if c.name == args[1] {
					c.printHelp(stdout)
					return 0
				}
			}
		}
		printTopHelp(stdout, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "version" || args[0] == "--version" {
		fmt.Fprintf(stdout, "gossiptrain %s %s\n", Version, runtime.Version())
		return 0
	}
	var cmd *command
	for _, c := range append(cmds, hiddenCommands()...) {
		if c.name == args[0] {
			cmd = c
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "gossiptrain: unknown command %q\nRun 'gossiptrain help' for the list of commands.\n", args[0])
		return 2
	}
	if err := cmd.parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cmd.printHelp(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "gossiptrain %s: %v\nRun 'gossiptrain %s --help' for its flags.\n", cmd.name, err, cmd.name)
		return 2
	}
	cmd.out = stdout
	defer cpuProfile(cmd.name)()
	err := cmd.run(cmd, cmd.flags.Args())
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "gossiptrain %s: %v\nRun 'gossiptrain %s --help' for its flags.\n", cmd.name, err, cmd.name)
		return 2
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(stderr, "gossiptrain %s: interrupted\n", cmd.name)
		return 130
	default:
		fmt.Fprintf(stderr, "gossiptrain %s: %v\n", cmd.name, err)
		return 1
	}
}

func printTopHelp(w io.Writer, cmds []*command) {
	fmt.Fprint(w, `gossiptrain trains large sparse models (logistic regression, softmax, and a
one-hidden-layer MLP) with SGD, alone or on a group of peers that shard the
model among themselves: no master.

Usage: gossiptrain COMMAND [flags]

Commands:
`)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'gossiptrain COMMAND --help' for a command's flags, with defaults and examples.
`)
}
