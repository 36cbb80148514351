package cluster

// The test binary stands in for gossiptrain: with GOSSIPTRAIN_FAKE_PEER=1
// in its environment it behaves as a peer of "gossiptrain train" as far as
// Run can tell: it logs the messages a real peer logs (package peerlog;
// e2e/cluster_test.go checks the real binary against the same reader), it
// listens where --listen says and logs the address in JSON, dials --peer (so a peer started before peer 0 listens fails),
// fails without a --swarm-key it can load,
// writes a report with round lines and a summary, and ends the way its
// --fake flag says.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/node"
	"github.com/gossiptrain/gossiptrain/peerlog"
)

func TestMain(m *testing.M) {
	switch os.Getenv("GOSSIPTRAIN_FAKE_PEER") {
	case "1":
		os.Exit(fakePeer(os.Args[1:]))
	}
	if d := os.Getenv("GOSSIPTRAIN_SPIN"); d != "" {
		os.Exit(spin(d))
	}
	if os.Getenv("GOSSIPTRAIN_CPU_LIMIT") != "" {
		limit, ok := CPULimit()
		fmt.Printf("limit %g %v threads %d\n", limit, ok, DefaultThreads(runtime.GOMAXPROCS(0)))
		os.Exit(0)
	}
	if h := os.Getenv("GOSSIPTRAIN_NET_HELPER"); h != "" {
		os.Exit(netHelper(h, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeEnv makes the test binary a fake peer.
var fakeEnv = []string{"GOSSIPTRAIN_FAKE_PEER=1"}

// fakeFlags parses "--name value" and "--name=value" pairs; repeated
// flags keep every value.
func fakeFlags(args []string) map[string][]string {
	m := map[string][]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, val, ok := strings.Cut(a[2:], "=")
		if !ok && i+1 < len(args) {
			val = args[i+1]
			i++
		}
		m[name] = append(m[name], val)
	}
	return m
}

// hostPort turns /ip4/H/tcp/P[/p2p/ID] into H:P.
func hostPort(ma string) string {
	f := strings.Split(ma, "/")
	if len(f) < 5 {
		return ""
	}
	return net.JoinHostPort(f[2], f[4])
}

func fakePeer(args []string) int {
	if len(args) == 0 || args[0] != "train" {
		fmt.Fprintln(os.Stderr, "fake peer: want the train command")
		return 2
	}
	fl := fakeFlags(args[1:])
	get := func(name string) string {
		if v := fl[name]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	enc := json.NewEncoder(os.Stderr)
	var logMu sync.Mutex
	logf := func(level, msg string, kv ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		m := map[string]any{"level": level, "message": msg, "time": time.Now().UTC().Format(time.RFC3339Nano)}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		enc.Encode(m)
	}
	behaviour := get("fake")
	if behaviour == "" {
		behaviour = "ok"
	}
	// Where it runs, for the tests of Config.CPUs: from its first code.
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		logf("debug", "fake peer cgroups", "cgroups", strings.Fields(string(b)))
	}
	if cpus, err := allowedCPUs(); err == nil {
		logf("debug", "fake peer CPUs", "allowed_cpus", fmt.Sprint(cpus))
	}
	if get("listen") == "" {
		// Config.Standalone: plain train, alone, no --job.
		return fakeAlone(get, fl, logf)
	}
	// A peer of a job gets the run's swarm key, a file it can load (as
	// gossiptrain does: mode 0600, the standard format).
	if _, err := node.LoadSwarmKey(get("swarm-key")); err != nil {
		logf("error", "no usable --swarm-key", "error", err.Error())
		return 2
	}
	if behaviour == "slow-hang" {
		// A peer still starting (a loaded machine): Go drops the stop
		// signal until its handler is installed.
		time.Sleep(time.Second)
		behaviour = "hang"
	}
	// Like gossiptrain, stop at once on peerlog.StopSignal and leave on
	// SIGTERM, from the start (status 130).
	term := make(chan os.Signal, 1)
	if behaviour == "ignore-term" {
		signal.Ignore(syscall.SIGTERM, peerlog.StopSignal)
	} else {
		signal.Notify(term, syscall.SIGTERM, peerlog.StopSignal)
		go func() {
			sig := <-term
			if sig == peerlog.StopSignal {
				logf("warn", "the whole job is stopping: stopping at once, without a graceful leave")
			} else {
				logf("info", "signal received: leaving the cluster")
			}
			os.Exit(130)
		}()
	}
	var idx int
	fmt.Sscanf(filepath.Base(get("report")), "peer-%d.jsonl", &idx)
	id := fmt.Sprintf("FakePeer%d", idx)
	if behaviour == "noaddr" {
		logf("error", "cannot listen", "error", "address already in use")
		return 1
	}
	ln, err := net.Listen("tcp", hostPort(get("listen")))
	if err != nil {
		logf("error", "cannot listen", "error", err.Error())
		return 1
	}
	port := ln.Addr().(*net.TCPAddr).Port
	host := strings.Split(get("listen"), "/")[2]
	logf("info", peerlog.Listening, "addr", fmt.Sprintf("/ip4/%s/tcp/%d/p2p/%s", host, port, id))
	logf("info", peerlog.Started, "peer_id", id)
	conns := make(chan struct{}, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- struct{}{}
			c.Close()
		}
	}()
	if p := get("peer"); p != "" {
		// Like the real peer, retry an unreachable bootstrap peer (it may
		// be starting, or gone because the job is stopping: then the stop
		// signal ends this one).
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", hostPort(p), 5*time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				logf("error", "cannot reach the bootstrap peer", "error", err.Error())
				return 4
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	logf("info", peerlog.Waiting, "min_peers", get("min-peers"))
	var n int
	fmt.Sscan(get("min-peers"), &n)
	if idx == 0 {
		// Peer 0 counts the others dialling it, as a real peer waits for
		// --min-peers members.
		timeout := time.After(20 * time.Second)
		for got := 1; got < n; got++ {
			select {
			case <-conns:
			case <-timeout:
				logf("error", "the others never dialled", "got", got)
				return 5
			}
		}
	}
	logf("info", peerlog.Training)
	rep, err := os.Create(get("report"))
	if err != nil {
		logf("error", "report", "error", err.Error())
		return 1
	}
	defer rep.Close()
	w := bufio.NewWriter(rep)
	write := func(v any) {
		b, _ := json.Marshal(v)
		w.Write(append(b, '\n'))
		w.Flush()
	}
	write(map[string]any{"type": "start", "peer_id": id, "config": map[string]string{
		"topology": "ring", "mode": "sync", "batch": "10", "args": strings.Join(args, " ")}})
	start := time.Now()
	round := func(c int64) {
		write(map[string]any{"type": "round", "peer_id": id, "clock": c, "examples": (c + 1) * 10, "seconds": time.Since(start).Seconds() + 0.001})
	}
	switch behaviour {
	case "fail":
		round(0)
		logf("error", "boom: the disk is on fire", "error", "write model: no space left on device")
		return 3
	case "hang", "ignore-term":
		for c := int64(0); ; c++ {
			round(c)
			time.Sleep(20 * time.Millisecond) // a round's work; the signal ends it
		}
	}
	for c := int64(0); c < 5; c++ {
		round(c)
	}
	write(map[string]any{"type": "summary", "peer_id": id, "examples": 50, "seconds": time.Since(start).Seconds(),
		"peers": n, "topology": "ring", "mode": "sync", "batch": 10, "rounds": 5, "model_hash": "00000000000000aa"})
	logf("info", peerlog.Done, "examples", "50")
	return 0
}

// fakeAlone is a fake plain "train" (Config.Standalone): it must get no
// job flags, and writes a single peer's report.
func fakeAlone(get func(string) string, fl map[string][]string, logf func(level, msg string, kv ...any)) int {
	for _, f := range []string{"job", "min-peers", "peer", "identity", "swarm-key"} {
		if len(fl[f]) > 0 {
			logf("error", "plain train got a job flag", "flag", f)
			return 2
		}
	}
	logf("info", "training")
	b, _ := json.Marshal(map[string]any{"type": "summary", "examples": 500, "seconds": 0.5, "examples_per_sec": 1000,
		"peers": 1, "topology": "single", "mode": "local", "batch": 10, "steps": 50, "model_hash": "00000000000000bb"})
	if err := os.WriteFile(get("report"), append(b, '\n'), 0o644); err != nil {
		logf("error", "report", "error", err.Error())
		return 1
	}
	logf("info", peerlog.Done)
	return 0
}
