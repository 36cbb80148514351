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
	// CreateTemp makes files 0600; an output is as readable as any file
	// the user writes (TestPredictionsFileMode).
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, nil, nil, PlainPathError(err)
	}
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

// FlagPath is a path a command reads or writes and the flag that names it.
type FlagPath struct{ Flag, Path string }

// InputFiles returns the files patterns name as inputs of flagName (globs
// expanded; nothing for standard input or a pattern that matches nothing,
// which the command's own checks report) and, for IDX images among them,
// the labels files they are read with: labels (labelsFlag) when given,
// else the file beside them by the standard name (none when labelsFlag is
// "": the command reads no labels).
func InputFiles(patterns []string, flagName, labels, labelsFlag string) []FlagPath {
	var in []FlagPath
	files, _, err := ExpandData(patterns, flagName)
	if err != nil {
		return nil
	}
	for _, f := range files {
		if f == data.Stdin {
			continue
		}
		in = append(in, FlagPath{flagName, f})
		if labelsFlag == "" || !data.IsIDXImages(f) {
			continue
		}
		if labels != "" {
			in = append(in, FlagPath{labelsFlag, labels})
		} else if l, err := data.IDXLabelsPath(f); err == nil {
			in = append(in, FlagPath{labelsFlag, l})
		}
	}
	return in
}

// CheckApart fails with a usage error naming both flags when a path a
// command writes (outputs) is a path it reads (inputs), or a path another
// of its outputs writes: writing it would destroy the input, or one output
// the other (issue 33: "--save m.svm is the file --train reads"). Paths
// that exist are compared with os.SameFile, so a hard link, a symbolic
// link or /proc/self/fd alias of an input is the input; a path that does
// not exist yet is compared by its absolute path, its directory's links
// resolved. "" and "-" (standard input or output) collide with nothing.
// Run it before any work, so a refused command has changed nothing
// (TestOutputsNeverOverwriteInputs).
func CheckApart(outputs, inputs []FlagPath) error {
	for i, o := range outputs {
		if o.Path == "" || o.Path == data.Stdin {
			continue
		}
		for _, in := range inputs {
			if in.Path == "" || in.Path == data.Stdin || !SamePath(o.Path, in.Path) {
				continue
			}
			if resolvedPath(in.Path) == resolvedPath(o.Path) {
				return usage.Flag(o.Flag, "%s is the file --%s reads: writing it would destroy that input; give another file", o.Path, in.Flag)
			}
			return usage.Flag(o.Flag, "%s is the file --%s reads (%s, through a link): writing it would destroy that input; give another file", o.Path, in.Flag, in.Path)
		}
		for _, o2 := range outputs[:i] {
			if o2.Path != "" && o2.Path != data.Stdin && SamePath(o.Path, o2.Path) {
				return usage.Flag(o.Flag, "%s is the file --%s writes too; give each output a file of its own", o.Path, o2.Flag)
			}
		}
	}
	return nil
}

// SamePath reports whether a and b name the same file: os.SameFile when
// both exist, else the same absolute path (see CheckApart).
func SamePath(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(sa, sb)
	}
	return resolvedPath(a) == resolvedPath(b)
}

// resolvedPath is p made absolute, with the links of its directory
// resolved when the directory exists (the file itself may not).
func resolvedPath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		return filepath.Join(dir, filepath.Base(abs))
	}
	return abs
}
