package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/usage"
)

// command is one subcommand: its flags, its help and what it runs.
type command struct {
	name    string
	summary string // one line for the command list
	usage   string // the synopsis after "gossiptrain NAME"
	help    string // paragraphs shown by --help, before the flags
	example string // shown after the flags
	flags   *flag.FlagSet
	groups  []flagGroup // flags listed by group in --help
	run     func(c *command, args []string) error
	out     io.Writer // standard output, set by run
}

// flagSet is short for flag.FlagSet in the commands' flag groups.
type flagSet = flag.FlagSet

// stdout is where the command prints its results.
func (c *command) stdout() io.Writer {
	if c.out == nil {
		return os.Stdout
	}
	return c.out
}

type flagGroup struct {
	title string
	names []string
}

// errUsage marks an error in how the command was called: main prints it with
// a hint to --help and exits with status 2.
var errUsage = usage.ErrUsage

// usageErr returns an error naming the flag at fault.
var usageErr = usage.Flag

func newCommand(name, summary, usage string) *command {
	c := &command{name: name, summary: summary, usage: usage}
	c.flags = flag.NewFlagSet(name, flag.ContinueOnError)
	c.flags.SetOutput(io.Discard)
	return c
}

// group records that the flags registered by fn belong under title in --help.
func (c *command) group(title string, fn func(fs *flag.FlagSet)) {
	before := map[string]bool{}
	c.flags.VisitAll(func(f *flag.Flag) { before[f.Name] = true })
	fn(c.flags)
	var names []string
	c.flags.VisitAll(func(f *flag.Flag) {
		if !before[f.Name] {
			names = append(names, f.Name)
		}
	})
	c.groups = append(c.groups, flagGroup{title: title, names: names})
}

// printHelp writes the command's help: synopsis, description, flags by group
// with their defaults, examples.
func (c *command) printHelp(w io.Writer) {
	fmt.Fprintf(w, "Usage: gossiptrain %s %s\n\n", c.name, c.usage)
	if c.help != "" {
		fmt.Fprintf(w, "%s\n\n", strings.TrimSpace(c.help))
	}
	listed := map[string]bool{}
	for _, g := range c.groups {
		fmt.Fprintf(w, "%s:\n", g.title)
		for _, n := range g.names {
			printFlag(w, c.flags.Lookup(n))
			listed[n] = true
		}
		fmt.Fprintln(w)
	}
	var rest []*flag.Flag
	c.flags.VisitAll(func(f *flag.Flag) {
		if !listed[f.Name] {
			rest = append(rest, f)
		}
	})
	if len(rest) > 0 {
		fmt.Fprintln(w, "Flags:")
		for _, f := range rest {
			printFlag(w, f)
		}
		fmt.Fprintln(w)
	}
	if c.example != "" {
		fmt.Fprintf(w, "Examples:\n%s\n", strings.TrimRight(c.example, "\n"))
	}
}

func printFlag(w io.Writer, f *flag.Flag) {
	name, usage := flag.UnquoteUsage(f)
	head := "  --" + f.Name
	if name != "" {
		head += " " + name
	}
	fmt.Fprintf(w, "%s\n", head)
	for _, line := range strings.Split(usage, "\n") {
		fmt.Fprintf(w, "        %s\n", line)
	}
	if def := f.DefValue; def != "" && def != "false" && def != "[]" && def != "0s" && def != "0" {
		if isStringFlag(f) {
			def = strconv.Quote(def)
		}
		fmt.Fprintf(w, "        (default %s)\n", def)
	}
}

func isStringFlag(f *flag.Flag) bool {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	_, s := g.Get().(string)
	return s
}

// parse parses args; it returns flag.ErrHelp for -h/--help.
func (c *command) parse(args []string) error {
	if err := c.flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// set reports whether the flag was given on the command line.
func (c *command) set(name string) bool {
	found := false
	c.flags.Visit(func(f *flag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}

// flagValues returns every flag and its value, for the report's start line.
func (c *command) flagValues() map[string]string {
	m := map[string]string{}
	c.flags.VisitAll(func(f *flag.Flag) { m[f.Name] = f.Value.String() })
	return m
}

// listFlag is a repeatable string flag; a comma also separates values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// logFlags are the logging flags every command has.
type logFlags struct {
	format string
	level  string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "auto", "log output: `console` (human, coloured on a terminal), json (one JSON object per line), or auto (console)")
	fs.StringVar(&l.level, "log-level", "info", "least severe log `level` shown: trace (debug, and every shard's applies and handoffs: for bug reports), debug, info, warn, error")
}

// logger builds the zerolog logger the flags ask for, writing to stderr.
func (l *logFlags) logger() (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(l.level)
	if err != nil || l.level == "" {
		return zerolog.Nop(), usageErr("log-level", "%q is not a level (trace, debug, info, warn, error)", l.level)
	}
	var w io.Writer
	switch l.format {
	case "json":
		w = os.Stderr
	case "console", "auto":
		w = zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000", NoColor: !isTerminal(os.Stderr)}
	default:
		return zerolog.Nop(), usageErr("log-format", "%q is not a format (console, json, auto)", l.format)
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	zerolog.DurationFieldUnit = time.Second
	zerolog.DurationFieldInteger = false
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

// exitCode is an error that makes the process exit with that status and
// print nothing (the peer's own log said why).
type exitCode int

func (e exitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// Version is the binary's version, which "gossiptrain version", reports and
// metrics show; package main sets it from the build.
var Version = "dev"

// signalContext is cancelled by the first SIGINT or SIGTERM; a second one
// kills the process the default way.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		cancel() // restores default handling: a second signal exits at once
	}()
	return ctx, cancel
}
