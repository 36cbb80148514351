package e2e

// Process-level tests of admission by swarm key (issue 30): real
// gossiptrain processes on loopback, the binary built once (binary(t));
// -short skips them.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/peerlog"
	"github.com/gossiptrain/gossiptrain/report"
)

// gtProc is one running gossiptrain process with its combined output.
type gtProc struct {
	name  string
	cmd   *exec.Cmd
	mu    sync.Mutex
	log   bytes.Buffer
	watch *portWatch
	done  chan struct{}
	err   error // of Wait, once done is closed
}

// startGT starts the binary with args; it is killed at the end of the test.
func startGT(t *testing.T, name string, args ...string) *gtProc {
	t.Helper()
	p := &gtProc{name: name, done: make(chan struct{})}
	p.watch = newPortWatch(&p.log, &p.mu)
	p.cmd = exec.Command(binary(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.watch, p.watch
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, tail(p.output(), 3000))
		}
	})
	return p
}

func (p *gtProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitLog waits until the output contains s, failing the test if the
// process exits or timeout passes first.
func (p *gtProc) waitLog(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for !strings.Contains(p.output(), s) {
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) before it logged %q:\n%s", p.name, p.err, s, tail(p.output(), 3000))
		case <-deadline:
			t.Fatalf("%s did not log %q within %v:\n%s", p.name, s, timeout, tail(p.output(), 3000))
		case <-time.After(20 * time.Millisecond): // polling another process's output
		}
	}
}

// wait waits for the process to exit, failing the test after timeout.
func (p *gtProc) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		t.Fatalf("%s did not finish within %v:\n%s", p.name, timeout, tail(p.output(), 3000))
	}
	return nil
}

// The acceptance. Two honest peers of a sync job run with a swarm
// key and the default --listen (every interface). A third process, started
// right after the first honest peer and pointed at it, runs the same job
// with no key (on loopback, so that it may start) and a poisoned row in its
// data: it cannot join, and the honest peers end with exactly the model of
// the run without it. 'gossiptrain peer --job probe --peer ADDR' without
// the key learns nothing of the job. Control: the same intruder given the
// key is admitted, so its refusal above is the key's doing.
func TestE2EAdmissionByKey(t *testing.T) {
	bin := binary(t)
	train, test, dim := e2eDataRows(t, 20000)
	dir := t.TempDir()
	key := filepath.Join(dir, "job.key")
	if out, err := exec.Command(bin, "keygen", "--swarm", key).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v: %s", err, out)
	}
	// The intruder's data: honest rows and one poisoned row.
	bad := filepath.Join(dir, "bad.svm")
	{
		f, err := os.Open(train)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		sc := bufio.NewScanner(f)
		for i := 0; i < 2000 && sc.Scan(); i++ {
			b.WriteString(sc.Text() + "\n")
		}
		f.Close()
		b.WriteString("1 3:1e+30 5:-1e+30\n")
		if err := os.WriteFile(bad, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idb := make([]byte, 3)
	rand.Read(idb)
	job := "admission-" + hex.EncodeToString(idb) // a name a probe must not learn
	ids := newIdentities(t, 3)                    // honest 0, honest 1, intruder
	flags := []string{"train", "--job", job, "--test", test, "--dim", fmt.Sprint(dim), "--model", "logreg", "--epochs", "1",
		"--batch", "100", "--mode", "sync", "--l2", "1e-6", "--optimizer", "adagrad", "--min-peers", "2",
		"--log-format", "json", "--log-level", "debug", "--status-addr", ""}
	honest := func(i int, run string, extra ...string) *gtProc {
		a := append(append([]string(nil), flags...), "--train", train, "--part", fmt.Sprintf("%d/2", i+1),
			"--swarm-key", key, "--identity", filepath.Join(ids.dir, fmt.Sprintf("id%d", i)),
			"--report", filepath.Join(dir, fmt.Sprintf("%s-peer%d.jsonl", run, i)))
		return startGT(t, fmt.Sprintf("%s peer %d", run, i), append(a, extra...)...)
	}
	intruder := func(run string, addr0 string, extra ...string) *gtProc {
		a := append(append([]string(nil), flags...), "--train", bad, "--listen", "/ip4/127.0.0.1/tcp/0", "--peer", addr0,
			"--identity", filepath.Join(ids.dir, "id2"), "--report", filepath.Join(dir, run+"-intruder.jsonl"))
		return startGT(t, run+" intruder", append(a, extra...)...)
	}
	// run trains the honest pair; during(addr0) runs after peer 0 is up
	// and before peer 1 starts. It returns the pair's model hash.
	run := func(name string, during func(addr0 string)) (string, []*gtProc) {
		p0 := honest(0, name)
		port := p0.watch.await(t, p0.done, p0.output)
		addr0 := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", port, ids.ids[0])
		if during != nil {
			during(addr0)
		}
		p1 := honest(1, name, "--peer", addr0)
		var runs []*report.Run
		for i, p := range []*gtProc{p0, p1} {
			if err := p.wait(t, 2*time.Minute); err != nil {
				t.Fatalf("%s: %v\n%s", p.name, err, tail(p.output(), 3000))
			}
			r, err := report.ReadFile(filepath.Join(dir, fmt.Sprintf("%s-peer%d.jsonl", name, i)))
			if err != nil || r.Summary == nil {
				t.Fatalf("%s report: %v", p.name, err)
			}
			runs = append(runs, r)
		}
		return sameHash(t, name, runs), []*gtProc{p0, p1}
	}

	start := time.Now()
	want, _ := run("alone", nil)

	var intr, probe *gtProc
	got, pair := run("intruded", func(addr0 string) {
		intr = intruder("intruded", addr0)
		probe = startGT(t, "probe", "peer", "--job", "probe", "--listen", "/ip4/127.0.0.1/tcp/0", "--peer", addr0,
			"--log-format", "json", "--log-level", "debug", "--status-addr", "")
		// Both run (on loopback no key is needed) and try before the
		// second honest peer even starts.
		intr.waitLog(t, peerlog.Waiting, time.Minute)
		probe.waitLog(t, peerlog.Listening, time.Minute)
		time.Sleep(2 * time.Second) // several dials with backoff
	})
	if got != want {
		t.Errorf("with the keyless intruder the honest peers end with model_hash %s, without it %s", got, want)
	}
	for _, p := range pair {
		if out := p.output(); strings.Contains(out, ids.ids[2]) {
			t.Errorf("%s logged the intruder's peer ID: it reached the peer", p.name)
		}
	}
	if out := intr.output(); strings.Contains(out, peerlog.Training) || strings.Contains(out, `"message":"member joined"`) {
		t.Errorf("the keyless intruder joined the job:\n%s", tail(out, 2000))
	}
	select {
	case <-intr.done:
		t.Errorf("the intruder exited (%v): it should be waiting for peers it can never reach\n%s", intr.err, tail(intr.output(), 2000))
	default:
	}
	if os.Getenv("GOSSIPTRAIN_TEST_LOGS") != "" {
		t.Logf("the intruder's log:\n%s", tail(intr.output(), 6000))
	}
	select {
	case <-probe.done:
		t.Fatalf("'peer' on loopback without a key exited: %v", probe.err)
	default:
	}
	probe.cmd.Process.Signal(syscall.SIGTERM)
	if err := probe.wait(t, 30*time.Second); err != nil {
		t.Errorf("the probe peer after SIGTERM: %v, want exit status 0", err)
	}
	if out := probe.output(); strings.Contains(out, "its_job") || strings.Contains(out, job) {
		t.Errorf("a peer without the key learnt the job's name:\n%s", tail(out, 2000))
	}
	t.Logf("baseline and intruded runs: %v (model_hash %s)", time.Since(start).Round(time.Millisecond), want)

	// Control: the same intruder with the key is admitted.
	p0 := honest(0, "control")
	port := p0.watch.await(t, p0.done, p0.output)
	intruder("control", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", port, ids.ids[0]), "--swarm-key", key)
	deadline := time.Now().Add(time.Minute)
	for !logHasLine(p0.output(), `"message":"member joined"`, ids.ids[2]) {
		if time.Now().After(deadline) {
			t.Fatalf("control: the intruder with the key did not join within a minute: the test's intruder cannot join anyway\n%s", tail(p0.output(), 3000))
		}
		time.Sleep(20 * time.Millisecond) // polling another process's output
	}
}

// logHasLine reports whether a line of log contains every one of subs.
func logHasLine(log string, subs ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			return true
		}
	}
	return false
}

// fakeSSHBin writes an ssh and an scp that do on this machine what the
// real ones would do on a host (ssh: the command in home, the host's login
// directory; scp: cp -p), after parsing their options as OpenSSH does:
// both need "--" before the destination and the files. Every invocation
// is recorded in the returned file, one a line, arguments separated by
// \x1f, each line appended in one write. Launch then runs without sshd.
func fakeSSHBin(t *testing.T, home string) (dir, calls string) {
	t.Helper()
	dir, calls = t.TempDir(), filepath.Join(t.TempDir(), "calls")
	head := func(tool, withValue string) string {
		// One write per call (calls run at once, from several goroutines).
		return "#!/bin/sh\nline=$(printf '%s\\037' " + tool + ` "$@"); printf '%s\n' "$line" >> ` + calls + `
while [ $# -gt 0 ]; do
  case "$1" in --) shift; break ;; ` + withValue + `) shift 2 ;; -*) shift ;; *) echo "fake ` + tool + `: $1 before --" >&2; exit 255 ;; esac
done
`
	}
	ssh := head("ssh", "-o|-p|-F|-J|-i") + `shift
export SSH_CONNECTION="127.0.0.1 50000 127.0.0.1 22"
cd ` + home + ` && exec sh -c "$*"
`
	scp := head("scp", "-o|-P|-F|-J|-i") + `n=$#; i=0
for a in "$@"; do i=$((i+1)); case "$a" in /*) p=$a ;; *:*) p=${a#*:} ;; *) p=$a ;; esac
  if [ $i -lt $n ]; then set -- "$@" "$p"; else dest=$p; fi; done
shift $n
exec cp -p "$@" "$dest"
`
	for name, text := range map[string]string{"ssh": ssh, "scp": scp} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, calls
}

// launch over ssh and scp that run here: every launch gets a job name of
// its own (launch-<6 hex>) and a new swarm key, shipped to the host with
// mode 0600 and given to every peer; every ssh and scp ends its options
// with "--" before the host and the files.
func TestLaunchShipsAKeyAndNamesTheJob(t *testing.T) {
	bin := binary(t)
	home := t.TempDir()
	fake, calls := fakeSSHBin(t, home)
	train, test, dim := e2eDataRows(t, 10000)
	runDir := filepath.Join(t.TempDir(), "launch-run")
	cmd := exec.Command(bin, "launch", "--hosts", "vm1,ubuntu@vm2:2222", "--ship-data", "--dir", runDir,
		"--", "--train", train, "--test", test, "--dim", fmt.Sprint(dim), "--epochs", "1")
	cmd.Env = append(os.Environ(), "PATH="+fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("launch: %v\n%s\n%s", err, out.String(), tail(errb.String(), 4000))
	}
	m := regexp.MustCompile(`launching .*job=(launch-[0-9a-f]{6})\b`).FindStringSubmatch(errb.String())
	if m == nil {
		t.Fatalf("no job name launch-<6 hex> in the launch log:\n%s", tail(errb.String(), 3000))
	}
	if !strings.Contains(out.String(), "model hashes agree: yes") {
		t.Errorf("the result table:\n%s", out.String())
	}
	local := filepath.Join(runDir, "swarm.key")
	remote := filepath.Join(home, "gossiptrain", "runs", "launch-run", "swarm.key")
	for _, k := range []string{local, remote} {
		if st, err := os.Stat(k); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("swarm key %s: %v, want a file of mode 0600", k, err)
		}
	}
	if a, b := mustRead(t, local), mustRead(t, remote); !bytes.Equal(a, b) {
		t.Error("the key on the host differs from the run's")
	}
	for i := range 2 {
		log := mustRead(t, filepath.Join(runDir, fmt.Sprintf("peer-%d.log", i)))
		if !bytes.Contains(log, []byte(`"swarm_key":"runs/launch-run/swarm.key"`)) {
			t.Errorf("peer %d did not run with the shipped key", i)
		}
		r, err := report.ReadFile(filepath.Join(runDir, fmt.Sprintf("peer-%d.jsonl", i)))
		if err != nil || r.Start.Config["job"] != m[1] {
			t.Errorf("peer %d ran job %q (%v), want %s", i, r.Start.Config["job"], err, m[1])
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(mustRead(t, calls))), "\n") {
		args := strings.Split(strings.TrimSuffix(line, "\x1f"), "\x1f")
		i := slices.Index(args, "--")
		if i < 0 {
			t.Errorf("%q: no --", args)
			continue
		}
		for _, a := range args[1:i] {
			if strings.Contains(a, "vm1") || strings.Contains(a, "vm2") {
				t.Errorf("%q: the host comes before --", args)
			}
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
