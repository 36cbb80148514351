package cli

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"text/tabwriter"

	"github.com/gossiptrain/gossiptrain/human"
	"github.com/gossiptrain/gossiptrain/model"
)

func inspectCmd() *command {
	c := newCommand("inspect", "describe a saved model: kind, shape, training, input, hash, largest weights", "MODEL.gt [--json] [--top N]")
	var asJSON bool
	var top int
	var lf logFlags
	c.group("Output", func(fs *flagSet) {
		fs.BoolVar(&asJSON, "json", false, "print one JSON object (for scripts) instead of text")
		fs.IntVar(&top, "top", 10, "show the `N` largest weights by magnitude (0: none)")
	})
	c.group("Logging", lf.register)
	c.help = `
Print what a model file written by 'gossiptrain train --save' holds: its kind,
input dimension, classes and label base, hidden units (mlp), the optimizer
and its settings, the rounds (optimizer steps) and examples it was trained
on, the input format and --zero-based it was trained with (model files from
older binaries do not record these: "unknown"), the flags train was given,
model_hash (the hash of the weights that train's report and 'eval' print),
its nonzero weights and the largest weights with their features.

Features are numbered as the input file numbers them: from 1 in libsvm files
unless the model was trained with --zero-based, from 0 otherwise.`
	c.example = `  gossiptrain inspect model.gt
  gossiptrain inspect model.gt --json | jq .model_hash`
	c.run = func(c *command, args []string) error {
		if len(args) > 1 {
			// Flags may follow the file: inspect m.gt --json.
			if err := c.parse(args[1:]); err != nil {
				return err
			}
			args = append(args[:1], c.flags.Args()...)
		}
		if len(args) != 1 {
			return fmt.Errorf("%w: want one model file, got %d arguments", errUsage, len(args))
		}
		if _, err := lf.logger(); err != nil {
			return err
		}
		if top < 0 {
			return usageErr("top", "must not be negative, got %d", top)
		}
		m, err := model.LoadFile(args[0])
		if err != nil {
			return err
		}
		info := describeModel(args[0], m, top)
		if asJSON {
			b, err := json.Marshal(info)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.stdout(), string(b))
			return nil
		}
		info.print(c)
		return nil
	}
	return c
}

// modelInfo is what inspect prints; the JSON field names are a public
// format (only ever added to).
type modelInfo struct {
	File          string            `json:"file"`
	FileBytes     int64             `json:"file_bytes"`
	Kind          string            `json:"kind"`
	Dim           uint64            `json:"dim"`
	Classes       int               `json:"classes"`
	LabelBase     int64             `json:"label_base"`
	Hidden        int               `json:"hidden,omitempty"`
	Shards        int               `json:"shards"`
	Optimizer     string            `json:"optimizer"`
	LR            float64           `json:"lr"`
	L2            float64           `json:"l2"`
	Rounds        int64             `json:"rounds"`
	Examples      int64             `json:"examples"`
	InputFormat   string            `json:"input_format"`
	ZeroBased     *bool             `json:"zero_based"`
	Flags         string            `json:"flags,omitempty"`
	Meta          map[string]string `json:"meta,omitempty"`
	ModelHash     string            `json:"model_hash"`
	Weights       int64             `json:"weights"`
	ModelNonzeros int64             `json:"model_nonzeros"`
	Bias          []float32         `json:"bias"`
	Largest       []weightInfo      `json:"largest_weights"`
}

// weightInfo is one weight: the feature as the input file numbers it, the
// class (logreg: 0; mlp: the hidden unit) and the value.
type weightInfo struct {
	Feature uint64  `json:"feature"`
	Column  int     `json:"class"`
	Weight  float32 `json:"weight"`
}

func describeModel(path string, m *model.Model, top int) modelInfo {
	info := modelInfo{
		File: path, Kind: m.Kind.String(), Dim: m.Dim, Classes: m.Classes, LabelBase: m.LabelBase,
		Hidden: m.Hidden, Shards: m.Layout.Shards, Optimizer: m.Opt.String(), LR: m.Opt.LR, L2: m.Opt.L2,
		Rounds: m.Steps, Examples: m.Examples, InputFormat: m.Input.Format,
		ModelHash: fmt.Sprintf("%016x", m.Hash()), ModelNonzeros: m.NonZeros(),
		Weights: int64(m.Layout.Features) * int64(m.Layout.Width),
	}
	if st, err := os.Stat(path); err == nil {
		info.FileBytes = st.Size()
	}
	if info.InputFormat == "" {
		info.InputFormat = "unknown"
	} else {
		zb := m.Input.ZeroBased
		info.ZeroBased = &zb
	}
	info.Flags = m.Meta["flags"]
	for k, v := range m.Meta {
		if k != "flags" {
			if info.Meta == nil {
				info.Meta = map[string]string{}
			}
			info.Meta[k] = v
		}
	}
	bias := m.Row(m.Bias())
	if m.Kind == model.Logreg {
		bias = bias[:1]
	}
	info.Bias = append([]float32(nil), bias...)
	// The largest input weights (W1 for an MLP): a bounded min-heap.
	base := uint64(1)
	if m.Input.ZeroBased || (m.Input.Format != "" && m.Input.Format != "libsvm") {
		base = 0
	}
	h := &weightHeap{}
	if top > 0 {
		for k := range uint32(m.Dim) {
			for c, w := range m.Row(k) {
				if w == 0 || (h.Len() == top && math.Abs(float64(w)) <= math.Abs(float64((*h)[0].Weight))) {
					continue
				}
				heap.Push(h, weightInfo{Feature: uint64(k) + base, Column: c, Weight: w})
				if h.Len() > top {
					heap.Pop(h)
				}
			}
		}
	}
	info.Largest = make([]weightInfo, h.Len())
	for i := len(info.Largest) - 1; i >= 0; i-- {
		info.Largest[i] = heap.Pop(h).(weightInfo)
	}
	return info
}

// weightHeap is a min-heap by |weight| (ties: the larger feature first
// out, so the kept set does not depend on the scan order).
type weightHeap []weightInfo

func (h weightHeap) Len() int { return len(h) }
func (h weightHeap) Less(i, j int) bool {
	a, b := math.Abs(float64(h[i].Weight)), math.Abs(float64(h[j].Weight))
	if a != b {
		return a < b
	}
	if h[i].Feature != h[j].Feature {
		return h[i].Feature > h[j].Feature
	}
	return h[i].Column > h[j].Column
}
func (h weightHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *weightHeap) Push(x any)   { *h = append(*h, x.(weightInfo)) }
func (h *weightHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (info modelInfo) print(c *command) {
	w := tabwriter.NewWriter(c.stdout(), 0, 0, 2, ' ', 0)
	zb := "unknown"
	if info.ZeroBased != nil {
		zb = fmt.Sprint(*info.ZeroBased)
	}
	rows := [][2]string{
		{"file", fmt.Sprintf("%s (%s)", info.File, human.Bytes(info.FileBytes))},
		{"kind", info.Kind},
		{"dim", fmt.Sprint(info.Dim)},
		{"classes", fmt.Sprintf("%d (label base %d: class c is label c%+d)", info.Classes, info.LabelBase, info.LabelBase)},
	}
	if info.Hidden > 0 {
		rows = append(rows, [2]string{"hidden units", fmt.Sprint(info.Hidden)})
	}
	rows = append(rows,
		[2]string{"optimizer", info.Optimizer},
		[2]string{"trained", fmt.Sprintf("%d rounds, %d examples", info.Rounds, info.Examples)},
		[2]string{"input", fmt.Sprintf("format %s, zero-based %s", info.InputFormat, zb)},
	)
	if info.Flags != "" {
		rows = append(rows, [2]string{"train flags", info.Flags})
	}
	for _, k := range sortedKeys(info.Meta) {
		rows = append(rows, [2]string{"meta " + k, info.Meta[k]})
	}
	rows = append(rows,
		[2]string{"model_hash", info.ModelHash},
		[2]string{"weights", fmt.Sprintf("%d in %d shards, %d nonzero", info.Weights, info.Shards, info.ModelNonzeros)},
		[2]string{"bias", fmt.Sprint(info.Bias)},
	)
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\n", r[0], r[1])
	}
	w.Flush()
	if len(info.Largest) == 0 {
		return
	}
	col := "class"
	if info.Kind == "mlp" {
		col = "hidden unit"
	}
	fmt.Fprintf(c.stdout(), "\nlargest weights:\n")
	w = tabwriter.NewWriter(c.stdout(), 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "feature\t%s\tweight\t\n", col)
	for _, x := range info.Largest {
		fmt.Fprintf(w, "%d\t%d\t%.6g\t\n", x.Feature, x.Column, x.Weight)
	}
	w.Flush()
}
