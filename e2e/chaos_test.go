package e2e

// Chaos across real processes (issue 10): peers of one job are killed and
// restarted with the same identity, leave gracefully, and new ones join,
// every few seconds, while the job trains (one kill at a time: the next
// event waits until the run has removed the member killed); the survivors
// must end with one model, as good as one peer's on all the data, and
// nothing may be left running. -short skips it; GOSSIPTRAIN_CHAOS_SECONDS sets how long the
// chaos lasts (CI: 20 s per mode; the soak, 90 s, needs a longer
// test timeout: GOSSIPTRAIN_CHAOS_SECONDS=90 go test -timeout 40m -run
// TestE2EChaos -v .).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/report"
)

func chaosSeconds(t *testing.T) time.Duration {
	if s := os.Getenv("GOSSIPTRAIN_CHAOS_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("GOSSIPTRAIN_CHAOS_SECONDS=%q: want whole seconds", s)
		}
		return time.Duration(n) * time.Second
	}
	return 20 * time.Second
}

func TestE2EChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the chaos test runs real peers for minutes")
	}
	for _, mode := range []string{"sync", "async"} {
		t.Run(mode, func(t *testing.T) { chaos(t, mode, chaosSeconds(t)) })
	}
}

// chaosPeer is one process of the chaos run.
type chaosPeer struct {
	p       *churnProc
	id      int    // identity index
	fate    string // "running", "killed", "left"
	joined  bool   // started during the chaos (a joiner or a restart)
	started time.Time
}

func chaos(t *testing.T, mode string, dur time.Duration) {
	train, test, dim := chaosData(t)
	const initial, idents = 5, 9
	common := []string{"--train", train, "--test", test, "--dim", fmt.Sprint(dim), "--model", "logreg", "--l2", "1e-6",
		"--batch", "50", "--shards", "64", "--replicas", "2", "--mode", mode}
	r := newChurnRun(t, idents, common...)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("GOSSIPTRAIN_CHAOS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("%s: chaos for %v, seed %d (GOSSIPTRAIN_CHAOS_SEED replays the choices, not the timing)", mode, dur, seed)
	// The first peers train long enough to outlast the chaos, mostly (an
	// epoch of 48k rows takes them 2-25 s on 2 cores, with the load and
	// the mode); the chaos stops when the first of them ends.
	// Few long epochs rather than many short ones: a part that a restarted
	// peer trains again is not overfitted much.
	perEpoch := 4 * time.Second
	epochs := strconv.Itoa(int(dur/perEpoch) + 3)
	var all []*chaosPeer
	live := map[int]*chaosPeer{} // identity -> its running process
	// Every peer trains the whole epochs of its part of the data: a
	// restarted identity its own part again, a joiner the part with the
	// fewest live peers (a leaver's), so no part of the data is left out
	// of the comparison with one peer on all of it.
	partOf := map[int]int{}
	start := func(id int, during bool, part int) {
		minPeers := initial
		if during {
			minPeers = 2 // a run is under way: it joins it
		}
		partOf[id] = part
		cp := &chaosPeer{id: id, fate: "running", joined: during, started: time.Now(),
			p: r.start(id, "--min-peers", fmt.Sprint(minPeers), "--part", fmt.Sprintf("%d/%d", part+1, initial), "--epochs", epochs)}
		all = append(all, cp)
		live[id] = cp
	}
	emptiest := func() int {
		n := make([]int, initial)
		for id := range live {
			n[partOf[id]]++
		}
		best := 0
		for p := range n {
			if n[p] < n[best] {
				best = p
			}
		}
		return best
	}
	for i := range initial {
		start(i, false, i)
	}
	r.waitRound(live[0].p, 20)

	deadline := time.Now().Add(dur)
	var events []string
	var firstEnd time.Time // when the first of the first peers ended: the run is ending
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(2000+rng.IntN(2000)) * time.Millisecond)
		// Reap peers that ended on their own.
		for id, cp := range live {
			select {
			case <-cp.p.done:
				delete(live, id)
				events = append(events, fmt.Sprintf("%d ended (%v)", id, cp.p.err))
				if !cp.joined && firstEnd.IsZero() {
					firstEnd = time.Now()
				}
			default:
			}
		}
		if !firstEnd.IsZero() {
			break // the run is ending: joiners now would find it over
		}
		// Identity 0 is the others' bootstrap address: it stays.
		ids := make([]int, 0, len(live))
		for id := 1; id < idents; id++ {
			if live[id] != nil {
				ids = append(ids, id)
			}
		}
		switch a := rng.IntN(3); {
		case a == 0 && len(ids) > 2: // SIGKILL, and the same identity back a second later
			v := live[ids[rng.IntN(len(ids))]]
			// One failure at a time, as any majority protocol needs.
			// The configurations are agreed by a majority of the raft
			// voters (three of three or four members, one of two), and
			// a restart is a new member: the killed process's vote does
			// not come back with it. So a kill waits until the run (as
			// identity 0 sees it) has at least three members, unless the
			// victim is none of them, and the chaos goes on only once
			// the run has removed the killed member (an election first
			// if it led). Without the waits the leader was killed, and
			// another voter 3.3 s later, on a machine loaded by the
			// whole test suite: one voter of three was left and every
			// peer stopped (rules C7 and M7 of docs/protocol.md; seed
			// 1795967707092380081 at commit 036d4fc).
			peer := r.ids.ids[v.id]
			cur, ok := waitMembers(t, live[0].p, peer, all)
			if !ok {
				events = append(events, fmt.Sprintf("no kill of %d (the run has %d members)", v.id, len(cur.Members)))
				break
			}
			member := slices.Contains(cur.Members, peer)
			removed := changes(live[0].p.report, crashedPeer(peer))
			killed := time.Now()
			v.p.cmd.Process.Kill()
			<-v.p.done
			v.fate = "killed"
			delete(live, v.id)
			time.Sleep(time.Second)
			start(v.id, true, partOf[v.id])
			if !member {
				events = append(events, fmt.Sprintf("kill+restart %d (not admitted yet)", v.id))
				break
			}
			waitRemoved(t, live[0].p, peer, removed, all)
			events = append(events, fmt.Sprintf("kill+restart %d (removed after %.1fs)", v.id, time.Since(killed).Seconds()))
		case a == 1 && len(ids) > 2: // graceful leave
			v := live[ids[rng.IntN(len(ids))]]
			v.p.cmd.Process.Signal(syscall.SIGTERM)
			v.fate = "left"
			delete(live, v.id)
			events = append(events, fmt.Sprintf("leave %d", v.id))
		default: // a new peer joins (an identity not running)
			for id := 1; id < idents; id++ {
				if live[id] == nil && !running(all, id) {
					start(id, true, emptiest())
					events = append(events, fmt.Sprintf("join %d", id))
					break
				}
			}
		}
	}
	t.Logf("%s: %v", mode, events)

	// The peers started last train their whole epochs after the chaos: 2
	// cores shared by up to 8 peers train about 2k examples/s each in the
	// 90 s soak, so the wait grows with the chaos.
	endWait := 4*time.Minute + 4*dur
	// Every process ends by itself: leavers once handed over, the others
	// when the run's data is done. The first peers first: when the first
	// of them ends, the run is ending (peers started later may still
	// train their epochs).
	for _, cp := range all {
		if cp.joined || cp.fate != "running" {
			continue
		}
		select {
		case <-cp.p.done:
		case <-time.After(endWait):
			t.Fatalf("identity %d (%s) still running %v after the chaos:\n%s", cp.id, cp.fate, endWait, cp.p.logTail())
		}
		if firstEnd.IsZero() {
			firstEnd = time.Now()
		}
	}
	var survivors []*report.Run
	for _, cp := range all {
		late := cp.joined && firstEnd.Sub(cp.started) < 45*time.Second
		select {
		case <-cp.p.done:
		case <-time.After(time.Until(firstEnd.Add(45 * time.Second))):
			if late && cp.fate == "running" && lastRound(cp.p.report) < 0 {
				// Never admitted (no round): it asked while the run was
				// finishing and waits for a cluster that is gone.
				cp.p.cmd.Process.Kill()
				<-cp.p.done
				t.Logf("identity %d started %v before the run's end, was not admitted, and still waited 45 s after it: stopped", cp.id, firstEnd.Sub(cp.started).Round(time.Second))
				continue
			}
			select {
			case <-cp.p.done:
			case <-time.After(endWait):
				t.Fatalf("identity %d (%s) still running %v after the chaos:\n%s", cp.id, cp.fate, endWait, cp.p.logTail())
			}
		}
		if cp.fate == "killed" {
			continue
		}
		if tail := cp.p.logTail(); cp.p.err != nil && late && (strings.Contains(tail, "may have ended") || strings.Contains(tail, "the job is finishing")) {
			// It asked to join while the run was finishing: the run
			// turned it away, saying so (rule E6: once the values are
			// final no join is admitted), or it waited 16 retry
			// intervals, about 32 s, and concluded so.
			t.Logf("identity %d joined %v before the run's end and was turned away", cp.id, firstEnd.Sub(cp.started).Round(time.Second))
			continue
		}
		if cp.p.err != nil {
			t.Errorf("identity %d (%s, joined during the chaos %v): %v\n%s", cp.id, cp.fate, cp.joined, cp.p.err, cp.p.logTail())
			continue
		}
		if cp.fate == "running" {
			run, err := report.ReadFile(cp.p.report)
			if err != nil || run.Summary == nil {
				t.Errorf("identity %d: report %s: %v", cp.id, cp.p.report, err)
				continue
			}
			survivors = append(survivors, run)
		}
	}
	if len(survivors) == 0 {
		t.Fatalf("no survivor")
	}
	h := sameHash(t, mode+" survivors", survivors)

	// One peer on all the data, as many epochs as the first peers.
	rep := filepath.Join(t.TempDir(), "one.jsonl")
	code, _, stderr := gt(t, "train", "--train", train, "--test", test, "--dim", fmt.Sprint(dim), "--model", "logreg",
		"--l2", "1e-6", "--batch", "250", "--epochs", epochs, "--report", rep)
	if code != 0 {
		t.Fatalf("one peer: %s", stderr)
	}
	one, err := report.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	got, want := float64(survivors[0].Summary.TestLogLoss), float64(one.Summary.TestLogLoss)
	t.Logf("%s: %d survivors end with model %s, test log-loss %.5f; one peer on all the data %.5f", mode, len(survivors), h, got, want)
	if got > want*1.03 || math.IsNaN(got) {
		t.Errorf("%s: test log-loss %.5f after the chaos, more than 3%% above one peer's %.5f", mode, got, want)
	}
}

// waitRemoved waits until p's report has more than n configurations that
// removed peer as crashed, or until a first peer of the chaos ends (the
// run is ending; once every member has its final values nothing is
// removed any more, rule E8). A run that has not removed a killed member
// within a minute has stalled: the test fails.
func waitRemoved(t *testing.T, p *churnProc, peer string, n int, all []*chaosPeer) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if changes(p.report, crashedPeer(peer)) > n || ending(all) {
			return
		}
		time.Sleep(20 * time.Millisecond) // the report file grows; there is no event to wait on
	}
	t.Fatalf("%s killed and not removed as crashed within a minute:\n%s", short(peer), p.logTail())
}

// waitMembers waits until the newest configuration in p's report has at
// least three members or does not list peer, and returns it; ok is false
// when a first peer of the chaos ends meanwhile (the run is ending: after
// its final configuration it admits nobody) or a minute passes.
func waitMembers(t *testing.T, p *churnProc, peer string, all []*chaosPeer) (cur report.Change, ok bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && !ending(all) {
		cur = newest(p.report)
		if len(cur.Members) >= 3 || !slices.Contains(cur.Members, peer) {
			return cur, true
		}
		time.Sleep(20 * time.Millisecond) // the report file grows; there is no event to wait on
	}
	return cur, false
}

// ending reports whether a process of the first peers has ended.
func ending(all []*chaosPeer) bool {
	for _, cp := range all {
		if cp.joined || cp.fate != "running" {
			continue
		}
		select {
		case <-cp.p.done:
			return true
		default:
		}
	}
	return false
}

// newest is the last configuration change in the report at path.
func newest(path string) report.Change {
	var last report.Change
	changes(path, func(c report.Change) bool { last = c; return true })
	return last
}

// changes counts the configuration changes of the report at path for
// which f holds.
func changes(path string, f func(report.Change) bool) int {
	file, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer file.Close()
	n := 0
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		var c report.Change
		if json.Unmarshal(sc.Bytes(), &c) == nil && c.Type == report.TypeChange && f(c) {
			n++
		}
	}
	return n
}

// crashedPeer holds for a change that removed peer as crashed.
func crashedPeer(peer string) func(report.Change) bool {
	return func(c report.Change) bool { return slices.Contains(c.Crashed, peer) }
}

// running reports whether a process of identity id is still running.
func running(all []*chaosPeer, id int) bool {
	for _, cp := range all {
		if cp.id != id {
			continue
		}
		select {
		case <-cp.p.done:
		default:
			return true
		}
	}
	return false
}

// chaosData is e2eData with 4 times the rows (240k, 48k per part).
func chaosData(t *testing.T) (train, test string, dim uint64) {
	t.Helper()
	return e2eDataRows(t, 240000)
}
