package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Standard input is one input, read by one flag: the usage errors name the
// flag and "-".
func TestStdinUsageErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.svm")
	os.WriteFile(p, []byte("1 1:1\n0 2:1\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--train", "-", "--test", "-"}, "--test: standard input (-) cannot be both --train and --test"},
		{[]string{"train", "--train", "-," + p}, `--train: "-" (standard input) must be the only input`},
		{[]string{"predict", "--model", p, "--data", "-", "--data", p}, `--data: "-" (standard input) must be the only input`},
		{[]string{"train", "--train", p, "--interactions", "ab"}, "--interactions: " + p + " is libsvm input, which has no namespaces"},
		{[]string{"train", "--train", p, "--interactions", "abcd"}, "--interactions: "},
	} {
		code, _, stderr := gt(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	csv := filepath.Join(dir, "a.csv")
	os.WriteFile(csv, []byte("y,x\n1,2\n"), 0o644)
	code, _, stderr := gt(t, "train", "--train", csv)
	if code == 0 || !strings.Contains(stderr, csv+" looks like CSV") || strings.Contains(stderr, "label is not a number") {
		t.Errorf("train on CSV: exit %d, %q", code, stderr)
	}
}
