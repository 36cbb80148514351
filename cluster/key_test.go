package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gossiptrain/gossiptrain/node"
	"github.com/gossiptrain/gossiptrain/report"
)

// startArgs returns the command line peer i's report says it ran with.
func startArgs(t *testing.T, res *Result, i int) string {
	t.Helper()
	r, err := report.ReadFile(res.Peers[i].Report)
	if err != nil {
		t.Fatal(err)
	}
	return r.Start.Config["args"]
}

// Every run gets a new swarm key in its directory, mode 0600, and every
// peer is started with it (the fake peer also fails without a key it can
// load); a key the caller gives is used instead; a plain train gets none.
func TestRunSwarmKey(t *testing.T) {
	cfg := fakeConfig(t, 3, func(int) string { return "ok" })
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(res.Dir, "swarm.key")
	if res.SwarmKey != want {
		t.Errorf("Result.SwarmKey %q, want %q", res.SwarmKey, want)
	}
	st, err := os.Stat(want)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the run's key: %v, mode %v; want a file of mode 0600", err, st.Mode())
	}
	first, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if a := startArgs(t, res, i); !strings.Contains(a, "--swarm-key "+want) {
			t.Errorf("peer %d ran with %q: no --swarm-key %s", i, a, want)
		}
	}

	// A second run in the same directory gets a key of its own.
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(want); bytes.Equal(first, again) {
		t.Error("a second run in the same directory kept the first run's key")
	}

	// The caller's key.
	own := filepath.Join(t.TempDir(), "job.key")
	if _, err := node.CreateSwarmKey(own, false); err != nil {
		t.Fatal(err)
	}
	cfg2 := fakeConfig(t, 2, func(int) string { return "ok" })
	cfg2.SwarmKey = own
	res, err = Run(context.Background(), cfg2)
	if err != nil {
		t.Fatal(err)
	}
	if res.SwarmKey != own {
		t.Errorf("Result.SwarmKey %q, want the caller's %q", res.SwarmKey, own)
	}
	if _, err := os.Stat(filepath.Join(res.Dir, "swarm.key")); err == nil {
		t.Error("a key was written to the run directory although the caller gave one")
	}
	for i := range 2 {
		if a := startArgs(t, res, i); !strings.Contains(a, "--swarm-key "+own) {
			t.Errorf("peer %d ran with %q: not the caller's key", i, a)
		}
	}

	// A caller's key the peers could not load fails the run before any
	// peer starts, naming the file.
	loose := filepath.Join(t.TempDir(), "loose.key")
	if err := os.WriteFile(loose, node.EncodeSwarmKey(make([]byte, 32)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg3 := fakeConfig(t, 2, func(int) string { return "ok" })
	cfg3.SwarmKey = loose
	res, err = Run(context.Background(), cfg3)
	if err == nil || !strings.Contains(err.Error(), loose) || len(res.Peers) != 0 {
		t.Errorf("Run with a key of mode 0644: %v, %d peers started; want an error naming %s and no peer", err, len(res.Peers), loose)
	}

	// Standalone: one plain train, which listens nowhere, gets no key.
	cfg4 := fakeConfig(t, 1, func(int) string { return "ok" })
	cfg4.Standalone, cfg4.PeerArgs = true, nil
	res, err = Run(context.Background(), cfg4)
	if err != nil {
		t.Fatal(fmt.Errorf("standalone: %w", err))
	}
	if res.SwarmKey != "" {
		t.Errorf("standalone: SwarmKey %q, want none", res.SwarmKey)
	}
}

// What Run writes is a key gossiptrain loads, mode 0600; every key is new.
func TestWriteSwarmKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "swarm.key")
	if err := writeSwarmKey(path); err != nil {
		t.Fatal(err)
	}
	first, err := node.LoadSwarmKey(path) // checks the mode too
	if err != nil {
		t.Fatal(err)
	}
	if err := writeSwarmKey(path); err != nil {
		t.Fatal(err)
	}
	second, err := node.LoadSwarmKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first, second) || len(first) != 32 {
		t.Errorf("keys %x then %x: want two different 32-byte keys", first, second)
	}
	if err := checkKeyFile(path); err != nil {
		t.Error(err)
	}
	os.Chmod(path, 0o640)
	if err := checkKeyFile(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a key of mode 0640: %v, want a refusal saying chmod 600", err)
	}
}
