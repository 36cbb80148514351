package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/report"
)

func reportCmd() *command {
	c := newCommand("report", "build report.md, bench.json and plots from peers' report files", "[--out DIR] DIR_OR_FILE...")
	var out, title string
	var lf logFlags
	c.group("Output", func(fs *flagSet) {
		fs.StringVar(&out, "out", "", "`DIR` to write report.md, bench.json and the plots into, created if missing\n(default: the first directory given, or the current directory)")
		fs.StringVar(&title, "title", report.DefaultOptions().Title, "report.md's title `TEXT`")
	})
	c.group("Logging", lf.register)
	c.help = `
Read the per-peer run reports (the JSON-lines files peers write with --report)
and write the benchmark report: report.md (setup, a summary table with a row
per configuration, the master-vs-ring headline, warnings, plots and a table
per configuration with every peer's CPU, memory, network, disk and barrier
wait), bench.json (the same figures for scripts) and the plots as PNG and SVG.
The summary table is printed too.

Arguments are report files or directories, searched recursively for *.jsonl.
Reports are grouped into configurations by topology, mode and batch, and
never across runs: a lone train's report is a run of its own, a job's peers
are one run (one per directory when a directory holds several of its
reports, as cluster and bench write them), and a configuration with several
runs gets a row per run, named by its run. This is how runs on several
machines are compared: copy every peer's report into one directory and run
report on it. A report without a summary line (a peer that
crashed or is still running) is included with a warning; a line that is not
JSON stops the command, naming the file and line.`
	c.example = `  gossiptrain report runs/
  gossiptrain report --out results vm1/master.jsonl vm2/master.jsonl vm1/ring.jsonl vm2/ring.jsonl`
	c.run = func(c *command, args []string) error {
		paths, err := interspersed(c, args)
		if err != nil || paths == nil {
			return err
		}
		log, err := lf.logger()
		if err != nil {
			return err
		}
		if len(paths) == 0 {
			return fmt.Errorf("%w: no report files or directories given", errUsage)
		}
		files, err := report.Find(paths)
		if err != nil {
			return err
		}
		if err := checkReportApart(out, paths, files); err != nil {
			return err
		}
		runs := make([]*report.Run, 0, len(files))
		for _, f := range files {
			r, err := report.ReadFile(f)
			if err != nil {
				return err
			}
			runs = append(runs, r)
		}
		cfgs, err := report.GroupRuns(runs)
		if err != nil {
			return err
		}
		if out == "" {
			out = "."
			for _, p := range paths {
				if st, err := os.Stat(p); err == nil && st.IsDir() {
					out = p
					break
				}
			}
		}
		if err := report.WriteBench(out, cfgs, report.WithTitle(title)); err != nil {
			return fmt.Errorf("--out %s: %w", out, err)
		}
		bs := report.Summarize(cfgs)
		for _, b := range bs {
			for _, w := range b.Warnings {
				log.Warn().Str("configuration", b.Name).Msg(w)
			}
		}
		if err := report.WriteSummaryTable(c.stdout(), bs); err != nil {
			return err
		}
		log.Info().Int("reports", len(files)).Int("configurations", len(cfgs)).
			Str("report", filepath.Join(out, report.ReportMDFile)).Msg("report written")
		return nil
	}
	return c
}

// interspersed parses flags that follow positional arguments
// ("report runs/ --out x"), which the flag package leaves in args, and
// returns the positional arguments. After --help it prints the help and
// returns nil, nil.
func interspersed(c *command, args []string) ([]string, error) {
	paths := []string{}
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			return append(paths, args[1:]...), nil
		}
		if len(a) > 1 && a[0] == '-' {
			if err := c.flags.Parse(args); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					c.printHelp(c.stdout())
					return nil, nil
				}
				return nil, fmt.Errorf("%w: %v", errUsage, err)
			}
			args = c.flags.Args()
			continue
		}
		paths = append(paths, a)
		args = args[1:]
	}
	return paths, nil
}

// checkReportApart fails when report.md or bench.json, which report
// writes into --out (default: the first directory given, as run picks
// it), is one of the report files it reads (infer.SamePath: links
// included), so a refused report has changed nothing.
func checkReportApart(out string, paths, files []string) error {
	if out == "" {
		out = "."
		for _, p := range paths {
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				out = p
				break
			}
		}
	}
	for _, name := range []string{report.BenchJSONFile, report.ReportMDFile} {
		o := filepath.Join(out, name)
		for _, f := range files {
			if infer.SamePath(o, f) {
				return usageErr("out", "%s, which report writes, is the report file %s it reads; give another --out", o, f)
			}
		}
	}
	return nil
}
