package infer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/usage"
)

// Expand resolves patterns to files, naming flagName when one matches
// nothing, and returns the files' total size.
func Expand(patterns []string, flagName string) ([]string, int64, error) {
	var files []string
	var size int64
	for _, p := range patterns {
		m, err := filepath.Glob(p)
		if err != nil {
			return nil, 0, usage.Flag(flagName, "bad pattern %q: %v", p, err)
		}
		if len(m) == 0 {
			if _, err := os.Stat(p); err != nil {
				return nil, 0, usage.Flag(flagName, "%q: no such file (and no file matches it as a pattern)", p)
			}
			m = []string{p}
		}
		for _, f := range m {
			st, err := os.Stat(f)
			if err != nil {
				return nil, 0, usage.Flag(flagName, "%v", err)
			}
			if st.IsDir() {
				return nil, 0, usage.Flag(flagName, "%s is a directory; give files or a pattern such as '%s/*.svm'", f, f)
			}
			size += st.Size()
			files = append(files, f)
		}
	}
	return files, size, nil
}

// ExpandData is Expand for the data of train, eval and predict, where -
// (data.Stdin) is standard input: the only input, never globbed, of
// unknown size.
func ExpandData(patterns []string, flagName string) ([]string, int64, error) {
	if slices.Contains(patterns, data.Stdin) {
		if len(patterns) > 1 {
			return nil, 0, usage.Flag(flagName, "%q (standard input) must be the only input, but %d were given", data.Stdin, len(patterns))
		}
		return []string{data.Stdin}, 0, nil
	}
	return Expand(patterns, flagName)
}

// CheckIDXLabels checks that IDX images files among files (names, not
// patterns) have labels: the file the labels flag names, or one beside
// them by the standard name.
func CheckIDXLabels(files []string, labels, flagName string) error {
	for _, f := range files {
		if !data.IsIDXImages(f) {
			continue
		}
		if labels != "" {
			if _, err := os.Stat(labels); err != nil {
				return usage.Flag(flagName, "%v", PlainPathError(err))
			}
			continue
		}
		if _, err := data.IDXLabelsPath(f); err != nil {
			return LabelsFlag(err, flagName)
		}
	}
	return nil
}

// LabelsFlag names the labels flag in an error about a missing IDX labels
// file; other errors pass unchanged.
func LabelsFlag(err error, flagName string) error {
	var le *data.LabelsError
	if errors.As(err, &le) {
		return usage.Flag(flagName, "%s has no labels file beside it (%s does not exist): give --%s FILE", le.Images, le.Tried, flagName)
	}
	return err
}

// CheckWritableFile reports why path cannot be written as a file: a
// directory, a missing directory, no permission.
func CheckWritableFile(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory; give a file name", path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: directory %s does not exist", path, dir)
	case err != nil:
		return PlainPathError(err)
	case !st.IsDir():
		return fmt.Errorf("%s: %s is not a directory", path, dir)
	}
	if err := CheckWritableDir(dir); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// CheckWritableDir creates and removes a file in dir.
func CheckWritableDir(dir string) error {
	f, err := os.CreateTemp(dir, ".gossiptrain-check-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("cannot create files in %s: %v", dir, pe.Err)
		}
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// PlainPathError drops the operation from an *os.PathError ("stat x: no
// such file" reads "x: no such file").
func PlainPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %v", pe.Path, pe.Err)
	}
	return err
}

// OutputFile returns the writer of an output file: stdout when path is
// empty or "-", else a temporary file beside path that commit renames over
// it (so a failed run leaves no half-written file and an older file
// intact) and abort removes.
func OutputFile(path string, stdout io.Writer) (w io.Writer, commit func() error, abort func(), err error) {
	if path == "" || path == "-" {
		return stdout, func() error { return nil }, func() {}, nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, nil, nil, PlainPathError(err)
	}
	tmp := f.Name()
	commit = func() error {
		if err := f.Close(); err != nil {
			os.Remove(tmp)
			return PlainPathError(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
			var le *os.LinkError
			if errors.As(err, &le) {
				return fmt.Errorf("%s: %v", path, le.Err)
			}
			return err
		}
		return nil
	}
	abort = func() {
		f.Close()
		os.Remove(tmp)
	}
	return f, commit, abort, nil
}
