package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	e2eBinOnce sync.Once
	e2eBin     string
	e2eBinDir  string // the directory the binary was built into ("": none)
	e2eBinErr  error
)

// TestMain removes the binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if e2eBinDir != "" {
		os.RemoveAll(e2eBinDir)
	}
	os.Exit(code)
}

// binary returns the gossiptrain binary for a multi-process test, built
// once for all of them (or $GOSSIPTRAIN_BIN); -short skips these tests.
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process test: skipped with -short")
	}
	return build(t)
}

// build returns the gossiptrain binary, built once from the repository
// (or $GOSSIPTRAIN_BIN).
func build(t *testing.T) string {
	t.Helper()
	e2eBinOnce.Do(func() {
		if p := os.Getenv("GOSSIPTRAIN_BIN"); p != "" {
			e2eBin = p
			return
		}
		dir, err := os.MkdirTemp("", "gossiptrain-bin")
		if err != nil {
			e2eBinErr = err
			return
		}
		e2eBinDir, e2eBin = dir, filepath.Join(dir, "gossiptrain")
		out, err := exec.Command("go", "build", "-o", e2eBin, "..").CombinedOutput()
		if err != nil {
			e2eBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if e2eBinErr != nil {
		t.Fatal(e2eBinErr)
	}
	return e2eBin
}

// gt runs one gossiptrain command line (with --log-level warn) and returns
// its exit status, standard output and standard error.
func gt(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(build(t), append(args, "--log-level", "warn")...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	case err != nil:
		t.Fatalf("gossiptrain %v: %v", args, err)
	}
	return 0, out.String(), errb.String()
}

// evalJSON runs eval with args and returns the JSON object it prints.
func evalJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	code, out, stderr := gt(t, append([]string{"eval"}, args...)...)
	if code != 0 {
		t.Fatalf("eval %v: exit %d: %s", args, code, stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("eval output %q: %v", out, err)
	}
	return m
}
