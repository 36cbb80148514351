package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// ErrOptions marks invalid Options.
var ErrOptions = errors.New("invalid report options")

// Options control what WriteBench writes. (The package's Config is a run
// configuration, so the writer's settings are called Options.)
type Options struct {
	// Title is report.md's first heading.
	Title string
	// Command is the command line that produced the runs or the report,
	// shown in report.md's setup section; empty leaves it out.
	Command string
	// Warnings are more warnings for report.md's warnings section, for
	// problems found before the runs were grouped (files skipped, say).
	Warnings []string
	// PlotWidth and PlotHeight are every plot's size in centimetres.
	// 20 x 12 cm is 756 x 454 pixels in the PNGs (96 dpi), large enough for
	// a legend of eight configurations without hiding the curves.
	PlotWidth, PlotHeight float64
	// Plots turns the plots off when false (bench.json and report.md are
	// still written): for tools that only want the figures.
	Plots bool
	// Target, when > 0, is the test log-loss every configuration is timed
	// to (Accuracy); 0 times each to its baseline's final log-loss plus
	// DefaultTargetTolerance.
	Target float64
	// Apart are the processes apart bench ran (Apart): report.md gets a
	// section on them and the speedup plot a line, their speedups taken
	// against the lone peer of their batch.
	Apart []Apart
}

// DefaultOptions returns the options WriteBench uses when given none.
func DefaultOptions() Options {
	return Options{
		Title:      "gossiptrain benchmark report",
		PlotWidth:  20,
		PlotHeight: 12,
		Plots:      true,
	}
}

// Validate reports options WriteBench cannot use.
func (o Options) Validate() error {
	if o.Plots && (o.PlotWidth < 5 || o.PlotHeight < 5 || o.PlotWidth > 200 || o.PlotHeight > 200) {
		return fmt.Errorf("report: %w: plot size %gx%g cm: want 5 to 200 cm a side", ErrOptions, o.PlotWidth, o.PlotHeight)
	}
	return nil
}

// Option changes one of WriteBench's Options.
type Option func(*Options)

// WithTitle sets report.md's title.
func WithTitle(title string) Option { return func(o *Options) { o.Title = title } }

// WithTarget times every configuration to test log-loss target (see
// Options.Target).
func WithTarget(target float64) Option { return func(o *Options) { o.Target = target } }

// WithApart adds processes apart to report.md (see Options.Apart).
func WithApart(ls []Apart) Option { return func(o *Options) { o.Apart = ls } }

// WithCommand records the command line in report.md's setup section.
func WithCommand(cmd string) Option { return func(o *Options) { o.Command = cmd } }

// WithWarnings adds warnings to report.md.
func WithWarnings(w ...string) Option {
	return func(o *Options) { o.Warnings = append(o.Warnings, w...) }
}

// WithOptions replaces all options at once.
func WithOptions(opts Options) Option { return func(o *Options) { *o = opts } }

// Files WriteBench writes into its directory, besides the plots.
const (
	BenchJSONFile = "bench.json"
	ReportMDFile  = "report.md"
)

// WriteBench summarizes cfgs and writes into dir (created if missing):
// bench.json (the JSON list of BenchConfig), the plots (PNG and SVG, see
// Plot) and report.md, which embeds them. It returns the first error; files
// written before it stay.
func WriteBench(dir string, cfgs []*Config, opts ...Option) error {
	o := DefaultOptions()
	for _, f := range opts {
		f(&o)
	}
	if err := o.Validate(); err != nil {
		return err
	}
	if len(cfgs) == 0 {
		return fmt.Errorf("report: %w: no configurations to report", ErrConfig)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	bs := Summarize(cfgs)
	if o.Target > 0 {
		AddTimeToTarget(bs, o.Target, 0)
	}
	o.Apart = slices.Clone(o.Apart)
	AddApartSpeedups(o.Apart, bs)
	js, err := json.MarshalIndent(bs, "", "  ")
	if err != nil {
		return fmt.Errorf("report: encode %s: %w", BenchJSONFile, err)
	}
	if err := os.WriteFile(filepath.Join(dir, BenchJSONFile), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	var plots []PlotFile
	if o.Plots {
		if plots, err = Plot(dir, bs, o); err != nil {
			return err
		}
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, cfgs, bs, plots, o); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ReportMDFile), md.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
