package cluster

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/infer"
	"github.com/gossiptrain/gossiptrain/usage"
)

// How the cluster, bench and launch commands divide the training data
// among peers, and what launch ships to each host.

// dataSplit says how the training data is divided among the peers.
type dataSplit struct {
	common []string           // --train for every peer (with --part), or nothing
	own    func(int) []string // each peer's --train FILE or --part I/N
	how    string             // for the log
	meta   *data.GenMeta      // the generator's meta.json when the data has one
}

// splitData divides --train among n peers: one file each when the
// patterns name exactly n files, every n-th file when they name a multiple
// of n (peer i reads files i, i+n, …: no peer reads rows it skips), else
// --part i/n of all of them.
func splitData(patterns []string, n int) (dataSplit, error) {
	files, _, err := infer.Expand(patterns, "train")
	if err != nil {
		return dataSplit{}, err
	}
	s := dataSplit{}
	if m, err := data.ReadGenMeta(filepath.Join(filepath.Dir(files[0]), "meta.json")); err == nil {
		s.meta = &m
	}
	if len(files) == n && n > 1 {
		s.own = func(i int) []string { return []string{"--train", files[i]} }
		s.how = "one file per peer"
		return s, nil
	}
	if n > 1 && len(files)%n == 0 {
		s.own = func(i int) []string {
			var own []string
			for k := i; k < len(files); k += n {
				own = append(own, files[k])
			}
			return []string{"--train", strings.Join(own, ",")}
		}
		s.how = fmt.Sprintf("%d files per peer", len(files)/n)
		return s, nil
	}
	s.common = []string{"--train", strings.Join(patterns, ",")}
	s.own = func(i int) []string { return []string{"--part", fmt.Sprintf("%d/%d", i+1, n)} }
	s.how = fmt.Sprintf("every peer reads every %d-th row (--part i/%d)", n, n)
	if n == 1 {
		s.own = func(int) []string { return nil }
		s.how = "one peer reads everything"
	}
	return s, nil
}

// remoteSplit divides remote training files among n hosts without seeing
// them: one each when --train lists exactly n plain names, else --part.
func remoteSplit(patterns []string, n int) dataSplit {
	plain := len(patterns) == n && n > 1
	for _, p := range patterns {
		plain = plain && !strings.ContainsAny(p, "*?[")
	}
	if plain {
		return dataSplit{own: func(i int) []string { return []string{"--train", patterns[i]} }, how: "one file per host (the hosts' own)"}
	}
	if n == 1 {
		return dataSplit{common: []string{"--train", strings.Join(patterns, ",")}, own: func(int) []string { return nil }, how: "one host reads everything"}
	}
	return dataSplit{
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
func shipFiles(pass []string, split dataSplit, n int) (shipList, error) {
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
				name := ShipName(g)
				if prev, ok := taken[name]; ok && prev != g {
					return usage.Flag(flagName, "%s and %s would both be shipped as %s: give the files different names", prev, g, name)
				}
				taken[name] = g
				s.rename[g] = name
				if g == f {
					names = append(names, name)
				}
				if !slices.Contains(s.files[i], g) {
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

// seriesParts is the number of files to generate for a scaling series of
// these peer counts: their least common multiple, so every count gets
// whole files; the largest count when that multiple is too large (the
// others then split with --part).
func seriesParts(counts []int, rows int64) int {
	l := 1
	for _, n := range counts {
		l = lcm(l, n)
		if l > 64 {
			l = 0
			break
		}
	}
	if l == 0 || int64(l) > rows {
		l = 1
		for _, n := range counts {
			l = max(l, n)
		}
	}
	return l
}

func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}
