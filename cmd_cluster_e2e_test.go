package main

// Tests of cluster against the real binary (issue 12): its progress line
// follows what real peers log (package peerlog), and Ctrl-C stops every
// peer at once.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/data"
)

// clusterData generates a data set for cluster runs of a few seconds.
func clusterData(t *testing.T, rows int64) (train, test string, dim uint64) {
	t.Helper()
	dir := t.TempDir()
	cfg := data.DefaultGenConfig()
	cfg.Rows, cfg.TestRows, cfg.Features, cfg.Fields, cfg.Seed = rows, 2000, 1<<16, 20, 3
	meta, err := data.Generate(dir, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return meta.Files[0], meta.TestFile, cfg.Features
}

// progressRe matches cluster's progress line: "2 peers 41.3k ex/s | 0 r120
// 20.1k/s | 1 waiting".
var progressRe = regexp.MustCompile(`^(\d+) peers (\S+) ex/s((?: \| .*)*)$`)

// The progress line of a real run shows the peers training, with their
// rounds and a non-zero rate: the states come from the messages the real
// peers log (it used to wait for a message only the fake test peer wrote,
// and showed "0 ex/s | 0 waiting" throughout).
func TestClusterProgressFollowsRealPeers(t *testing.T) {
	binary(t)
	train, test, dim := clusterData(t, 20000)
	run := filepath.Join(t.TempDir(), "run")
	code, out, errOut := runBinary(t, ".", 3*time.Minute, "cluster", "--peers", "2", "--dir", run,
		"--train", train, "--test", test, "--dim", fmt.Sprint(dim), "--epochs", "6", "--batch", "50",
		"--progress-every", "100ms", "--log-format", "json")
	if code != 0 {
		t.Fatalf("cluster: exit %d\n%s\n%s", code, out, tail(errOut, 3000))
	}
	var lines []string
	training := 0
	sc := bufio.NewScanner(strings.NewReader(errOut))
	for sc.Scan() {
		var l struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		m := progressRe.FindStringSubmatch(l.Message)
		if m == nil {
			continue
		}
		lines = append(lines, l.Message)
		rate := strings.TrimRight(m[2], "kM")
		if v, err := strconv.ParseFloat(rate, 64); err == nil && v > 0 && regexp.MustCompile(`\| \d+ r\d+ \S+/s`).MatchString(m[3]) {
			training++
		}
	}
	if len(lines) == 0 {
		t.Fatalf("no progress line in cluster's log:\n%s", tail(errOut, 3000))
	}
	if training == 0 {
		t.Errorf("no progress line shows a training peer with a non-zero rate; the lines were:\n%s", strings.Join(lines, "\n"))
	}
	t.Logf("%d progress lines, %d with peers training; e.g. %q", len(lines), training, lines[len(lines)/2])
	if !bytes.Contains([]byte(out), []byte("model hashes agree: yes")) {
		t.Errorf("no result table:\n%s", out)
	}
}
