package report

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gossiptrain/gossiptrain/usage"
)

// ReadDir reads every report file (*.jsonl) under dir.
func ReadDir(dir string) ([]*Run, error) {
	files, err := Find([]string{dir})
	if err != nil {
		return nil, err
	}
	var runs []*Run
	for _, f := range files {
		r, err := ReadFile(f)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// Find expands paths into report files: files as given, directories
// searched recursively for *.jsonl. Every file appears once, in path order
// within a directory. A path that does not exist, and a directory without
// a report, are usage errors (the user named them).
func Find(paths []string) ([]string, error) {
	var files []string
	seen := map[string]bool{}
	add := func(f string) {
		key := filepath.Clean(f)
		if abs, err := filepath.Abs(f); err == nil {
			key = abs
		}
		if !seen[key] {
			seen[key] = true
			files = append(files, f)
		}
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, usage.Wrap(err)
		}
		if !st.IsDir() {
			add(p)
			continue
		}
		var found []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(d.Name(), ".jsonl") {
				found = append(found, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		if len(found) == 0 {
			return nil, usage.Errorf("%s: no *.jsonl report files in this directory or below", p)
		}
		sort.Strings(found)
		for _, f := range found {
			add(f)
		}
	}
	return files, nil
}
