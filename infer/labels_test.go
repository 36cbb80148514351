package infer

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/model"
)

// A rare stray class is named in a warning, with its first rows; balanced
// classes draw none.
func TestRareLabelWarning(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 400 {
		if i == 16 {
			b.WriteString("2 1:1\n") // line 17: the typo
			continue
		}
		b.WriteString([]string{"+1 1:1 3:1\n", "-1 2:1 3:1\n"}[i%2])
	}
	stray := filepath.Join(dir, "stray.svm")
	os.WriteFile(stray, []byte(b.String()), 0o644)
	sr, err := data.Scan([]string{stray}, data.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	warnRareLabels(zerolog.New(&logs), sr, model.Softmax)
	if !strings.Contains(logs.String(), "label 2 is on only 1 rows: a typo?") || !strings.Contains(logs.String(), stray+":17") {
		t.Errorf("stray label: log %s; want a warning naming %s:17", logs.String(), stray)
	}
	// Balanced classes draw no warning.
	logs.Reset()
	warnRareLabels(zerolog.New(&logs), data.ScanResult{Rows: 30, Labels: map[float64]int64{1: 10, 2: 10, 3: 10}}, model.Softmax)
	if logs.Len() != 0 {
		t.Errorf("balanced labels: %s", logs.String())
	}
}
