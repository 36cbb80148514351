package e2e

// Tests of "gossiptrain launch" against real OpenSSH servers: every host
// is a network namespace this test creates, running Debian's sshd with a
// host key the test generates, and the launcher runs in a namespace of its
// own with a client key, known_hosts and an ssh_config the test writes
// (host aliases vm1…vmN). Nothing about SSH is mocked. They need root,
// iproute2 and openssh-server, and skip with a message without them.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/cluster"
	"github.com/gossiptrain/gossiptrain/data"
	"github.com/gossiptrain/gossiptrain/report"
)

const sshdPath = "/usr/sbin/sshd"

// requireSSHLab skips the test unless sshd servers can run in namespaces.
func requireSSHLab(t *testing.T) {
	t.Helper()
	if err := cluster.CheckNetNS(); err != nil {
		t.Skipf("network namespaces unavailable (root and iproute2 needed): %v", err)
	}
	for _, p := range []string{sshdPath, "ssh", "scp", "ssh-keygen"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is missing (Debian: apt-get install openssh-server openssh-client): %v", p, err)
		}
	}
}

// sshLab is a launcher namespace (host 0 of the network) and n hosts
// running sshd (hosts 1..n, aliases vm1..vmN), plus aliases of addresses
// where nothing answers (vmX1, vmX2: no route) and of a host that never
// answers the SSH handshake (vmSilent).
type sshLab struct {
	nw     *cluster.Network
	dir    string
	config string // the ssh_config the launcher uses
	remote string // --remote-dir (absolute: the hosts share this machine's file system)
	n      int
}

func newSSHLab(t *testing.T, n int) *sshLab {
	t.Helper()
	requireSSHLab(t)
	binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nw, err := cluster.NewNetwork(ctx, n+1, cluster.NetNS{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nw.Close(); err != nil {
			t.Errorf("removing the lab's namespaces: %v", err)
		}
	})
	lab := &sshLab{nw: nw, dir: t.TempDir(), n: n}
	lab.remote = filepath.Join(lab.dir, "remote")
	keygen := func(path string) string {
		out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gossiptrain-test", "-f", path).CombinedOutput()
		if err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
		pub, err := os.ReadFile(path + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(pub))
	}
	clientPub := keygen(filepath.Join(lab.dir, "id_ed25519"))
	write := func(name, content string) string {
		p := filepath.Join(lab.dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	auth := write("authorized_keys", clientPub+"\n")
	// sshd's privilege separation directory (Debian's package makes it at
	// boot, through systemd-tmpfiles).
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	var known, config strings.Builder
	for i := 1; i <= n; i++ {
		hostPub := keygen(filepath.Join(lab.dir, fmt.Sprintf("host%d", i)))
		fmt.Fprintf(&known, "%s %s\n", nw.Addr(i), hostPub)
		fmt.Fprintf(&config, "Host vm%d\n  HostName %s\n  User root\n", i, nw.Addr(i))
		cfg := write(fmt.Sprintf("sshd%d_config", i), fmt.Sprintf(`ListenAddress %s
Port 22
HostKey %s
PidFile %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp /usr/lib/openssh/sftp-server
LogLevel ERROR
`, nw.Addr(i), filepath.Join(lab.dir, fmt.Sprintf("host%d", i)), filepath.Join(lab.dir, fmt.Sprintf("sshd%d.pid", i)), auth))
		logf, err := os.Create(filepath.Join(lab.dir, fmt.Sprintf("sshd%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		cmd := nw.Command(i, sshdPath, "-D", "-e", "-f", cfg)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatalf("start sshd: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			logf.Close()
		})
	}
	// Unreachable hosts: addresses of the lab's subnet that no namespace has.
	for j := 1; j <= 2; j++ {
		fmt.Fprintf(&config, "Host vmX%d\n  HostName 10.231.0.%d\n  User root\n", j, n+2+j)
	}
	// A host that accepts the connection and never answers (a hung
	// machine, a filtering firewall): its "connection" is a process that
	// stays silent.
	fmt.Fprintf(&config, "Host vmSilent\n  ProxyCommand sleep 120\n")
	fmt.Fprintf(&config, "Host *\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n",
		filepath.Join(lab.dir, "id_ed25519"), write("known_hosts", known.String()))
	lab.config = write("ssh_config", config.String())
	// Wait until every sshd answers.
	for i := 1; i <= n; i++ {
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, err := nw.Command(0, "ssh", "-F", lab.config, "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", fmt.Sprintf("vm%d", i), "true").CombinedOutput()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(lab.dir, fmt.Sprintf("sshd%d.log", i)))
				t.Fatalf("sshd on vm%d does not answer: %v: %s\nits log:\n%s", i, err, out, log)
			}
			time.Sleep(100 * time.Millisecond) // sshd binds within milliseconds of starting
		}
	}
	return lab
}

// hosts is "vm1,…,vmN".
func (l *sshLab) hosts() string {
	var hs []string
	for i := 1; i <= l.n; i++ {
		hs = append(hs, fmt.Sprintf("vm%d", i))
	}
	return strings.Join(hs, ",")
}

// launch starts "gossiptrain launch" in the launcher's namespace with the
// lab's ssh configuration and remote directory.
func (l *sshLab) launch(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	// A generous connect timeout: sshd's handshake takes seconds on a
	// loaded 2-core machine (the unreachable host fails with "No route to
	// host" long before it).
	a := append([]string{"launch", "--ssh-config", l.config, "--remote-dir", l.remote, "--connect-timeout", "60s"}, args...)
	cmd := l.nw.Command(0, binary(t), a...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out, &errb
}

// wait waits for the launcher, failing the test after timeout.
func wait(t *testing.T, cmd *exec.Cmd, timeout time.Duration, errb *bytes.Buffer) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(timeout):
		cmd.Process.Signal(syscall.SIGINT)
		<-done
		t.Fatalf("launch did not finish within %v\n%s", timeout, tail(errb.String(), 4000))
	}
	return cmd.ProcessState.ExitCode()
}

// labData generates a small data set in 4 parts.
func labData(t *testing.T, parts int) data.GenMeta {
	t.Helper()
	gen := data.DefaultGenConfig()
	gen.Rows, gen.TestRows, gen.Features, gen.Fields, gen.Parts, gen.Seed = 40000, 4000, 1<<16, 20, parts, 3
	meta, err := data.Generate(t.TempDir(), gen, nil)
	if err != nil {
		t.Fatal(err)
	}
	return meta
}

// hostProcesses lists the processes of host i's namespace other than its
// sshd listener, as "pid cmdline".
func (l *sshLab) hostProcesses(t *testing.T, i int) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "pids", l.nw.Namespace(i)).CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns pids: %v: %s", err, out)
	}
	var ps []string
	for _, p := range strings.Fields(string(out)) {
		b, err := os.ReadFile("/proc/" + p + "/cmdline")
		if err != nil {
			continue // gone meanwhile
		}
		cl := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		if strings.Contains(cl, sshdPath+" -D") && (strings.HasPrefix(cl, sshdPath) || strings.Contains(cl, "[listener]")) {
			continue // the listener (which retitles itself "sshd: … [listener] …")
		}
		ps = append(ps, p+" "+cl)
	}
	return ps
}

// The acceptance, over real sshd: launch trains a job on 4 hosts,
// streams progress, and leaves the run directory with every peer's report
// and log, report.md and plots; a second launch copies nothing again;
// Ctrl-C mid-run leaves no process on any host; an unreachable host fails
// the start in under 10 s naming it; a peer that fails shows its log.
func TestLaunchOverSSH(t *testing.T) {
	lab := newSSHLab(t, 4)
	meta := labData(t, 4)
	trainGlob := filepath.Join(filepath.Dir(meta.Files[0]), "train-*.svm")

	t.Run("trains", func(t *testing.T) {
		run := filepath.Join(t.TempDir(), "run-trains")
		model := filepath.Join(t.TempDir(), "model.gt")
		cmd, out, errb := lab.launch(t, "--hosts", lab.hosts(), "--ship-data", "--dir", run, "--progress-every", "300ms", "--save", model,
			"--", "--train", trainGlob, "--test", meta.TestFile, "--dim", "65536", "--batch", "200", "--epochs", "12", "--eval-every", "40000")
		if code := wait(t, cmd, 4*time.Minute, errb); code != 0 {
			t.Fatalf("launch: exit %d\n%s\n%s", code, out, tail(errb.String(), 4000))
		}
		t.Logf("launch output:\n%s", out)
		for _, want := range []string{"ring: 4 peers, sync mode, batch 200", "model hashes agree: yes", "report.md"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("the result table lacks %q", want)
			}
		}
		// Progress streamed while the peers trained: round numbers of all 4.
		// (12 epochs: with windows, 3 trained in 0.4 s, and one CI run's
		// progress lines at 300 ms never showed every peer's round.)
		if !regexp.MustCompile(`4 peers .*\| 0 (?:[a-z]+ )?r[0-9]+ .*\| 3 (?:[a-z]+ )?r[0-9]+`).MatchString(errb.String()) {
			t.Errorf("no combined progress line with the rounds of every peer:\n%s", tail(errb.String(), 3000))
		}
		if !regexp.MustCompile(`dashboard.*url=http://10\.231\.0\.3:[0-9]+/`).MatchString(errb.String()) {
			t.Errorf("the dashboard URL of peer 0 (on vm1, 10.231.0.3) was not logged:\n%s", tail(errb.String(), 3000))
		}
		var total int64
		for i := range 4 {
			r, err := report.ReadFile(filepath.Join(run, fmt.Sprintf("peer-%d.jsonl", i)))
			if err != nil || r.Summary == nil {
				t.Fatalf("peer %d: report in the run directory: %v", i, err)
			}
			// Every host trained on its own shipped part.
			if got, want := r.Start.Config["train"], "data/"+filepath.Base(meta.Files[i]); got != want {
				t.Errorf("peer %d trained on %q, want its shipped file %q", i, got, want)
			}
			total += r.Summary.Examples
			if log, err := os.ReadFile(filepath.Join(run, fmt.Sprintf("peer-%d.log", i))); err != nil || !bytes.Contains(log, []byte(`"message":"done"`)) {
				t.Errorf("peer %d: its log in the run directory lacks its last line (%v)", i, err)
			}
			// The host keeps its own copies.
			if _, err := os.Stat(filepath.Join(lab.remote, "runs", "run-trains", fmt.Sprintf("peer-%d.log", i))); err != nil {
				t.Errorf("peer %d: no log on its host: %v", i, err)
			}
		}
		if total != 12*40000 {
			t.Errorf("the peers trained on %d examples, want 12 epochs x 40000 rows", total)
		}
		// --save: peer 0's model, copied back; it is the model the peers agree on.
		if code, evalOut, evalErr := gt(t, "eval", "--model", model, "--test", meta.TestFile); code != 0 || !strings.Contains(evalOut, `"test_logloss"`) {
			t.Errorf("eval of the saved model: exit %d\n%s\n%s", code, evalOut, evalErr)
		}
		for _, f := range []string{"report.md", "bench.json", "throughput.png"} {
			if st, err := os.Stat(filepath.Join(run, f)); err != nil || st.Size() == 0 {
				t.Errorf("%s missing or empty in the run directory: %v", f, err)
			}
		}
		if left := lab.leftOnHosts(t); len(left) > 0 {
			t.Errorf("processes left on the hosts after the run:\n%s", strings.Join(left, "\n"))
		}
		// A key and a job name of the launch's own: the key shipped with
		// mode 0600, every peer in a private swarm.
		if st, err := os.Stat(filepath.Join(lab.remote, "runs", "run-trains", "swarm.key")); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("the run's swarm key on the hosts: %v, want a file of mode 0600", err)
		}
		if !regexp.MustCompile(`job=launch-[0-9a-f]{6}\b`).MatchString(errb.String()) {
			t.Errorf("no job name launch-<6 hex> logged:\n%s", tail(errb.String(), 3000))
		}
		for i := range 4 {
			if log, _ := os.ReadFile(filepath.Join(run, fmt.Sprintf("peer-%d.log", i))); !bytes.Contains(log, []byte("private swarm")) {
				t.Errorf("peer %d did not run with the swarm key", i)
			}
		}
	})

	t.Run("ctrl-c", func(t *testing.T) {
		run := filepath.Join(t.TempDir(), "run-ctrlc")
		cmd, out, errb := lab.launch(t, "--hosts", lab.hosts(), "--ship-data", "--dir", run, "--progress-every", "300ms",
			"--", "--train", trainGlob, "--test", meta.TestFile, "--dim", "65536", "--batch", "100", "--epochs", "1000")
		// Wait until every peer's streamed report has round lines.
		deadline := time.Now().Add(3 * time.Minute)
		for {
			training := 0
			for i := range 4 {
				if b, _ := os.ReadFile(filepath.Join(run, fmt.Sprintf("peer-%d.jsonl", i))); bytes.Contains(b, []byte(`"type":"round"`)) {
					training++
				}
			}
			if training == 4 {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the 4 peers did not train within 3 minutes\n%s", tail(errb.String(), 4000))
			}
			time.Sleep(50 * time.Millisecond) // polling files another process writes
		}
		// Nothing was copied again: the binary and data on the hosts are current.
		if n := strings.Count(errb.String(), "host ready"); n != 4 || !strings.Contains(errb.String(), "copied=0") || regexp.MustCompile(`copied=[1-9]`).MatchString(errb.String()) {
			t.Errorf("want 4 hosts ready with nothing copied (the first run shipped everything):\n%s", tail(errb.String(), 3000))
		}
		running := 0
		for i := 1; i <= 4; i++ {
			for _, p := range lab.hostProcesses(t, i) {
				if strings.Contains(p, "gossiptrain") {
					running++
				}
			}
		}
		if running < 8 {
			t.Errorf("%d gossiptrain processes on the hosts while training, want an agent and a peer on each of 4", running)
		}
		start := time.Now()
		cmd.Process.Signal(syscall.SIGINT)
		code := wait(t, cmd, time.Minute, errb)
		t.Logf("stopped %v after Ctrl-C", time.Since(start).Round(time.Millisecond))
		if code != 130 {
			t.Errorf("launch after Ctrl-C: exit %d, want 130\n%s\n%s", code, out, tail(errb.String(), 3000))
		}
		if left := lab.leftOnHosts(t); len(left) > 0 {
			t.Errorf("processes left on the hosts after Ctrl-C:\n%s", strings.Join(left, "\n"))
		}
		// Every peer left gracefully and its report says so.
		for i := range 4 {
			log, _ := os.ReadFile(filepath.Join(run, fmt.Sprintf("peer-%d.log", i)))
			if !bytes.Contains(log, []byte("leaving gracefully")) {
				t.Errorf("peer %d did not leave gracefully; the end of its log:\n%s", i, tail(string(log), 1500))
			}
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		run := filepath.Join(t.TempDir(), "run-unreachable")
		start := time.Now()
		cmd, out, errb := lab.launch(t, "--hosts", "vm1,vmX1,vm2", "--ship-data", "--dir", run,
			"--", "--train", trainGlob, "--test", meta.TestFile, "--dim", "65536")
		code := wait(t, cmd, time.Minute, errb)
		took := time.Since(start)
		t.Logf("failed after %v:\n%s", took.Round(time.Millisecond), tail(errb.String(), 1500))
		if code != 1 {
			t.Errorf("exit %d, want 1\n%s", code, out)
		}
		if took > 10*time.Second {
			t.Errorf("an unreachable host took %v to fail the start, want under 10 s", took)
		}
		msg := errb.String()
		if !strings.Contains(msg, "host vmX1: ssh: connect to host 10.231.0.7 port 22") {
			t.Errorf("the error does not name the host and show ssh's error:\n%s", msg)
		}
		if strings.Contains(msg, "host vm1:") || strings.Contains(msg, "host vm2:") {
			t.Errorf("the error blames reachable hosts:\n%s", msg)
		}
		// (The other hosts' checks, cut short, may still be finishing.)
		for _, p := range lab.allHostProcesses(t) {
			if strings.Contains(p, "launch-agent") || strings.Contains(p, "gossiptrain train") {
				t.Errorf("a peer started although a host was unreachable: %s", p)
			}
		}
	})

	t.Run("silent", func(t *testing.T) {
		// A host that never answers fails after --connect-timeout (5 s by
		// default), not after TCP's minutes.
		start := time.Now()
		cmd, out, errb := lab.launch(t, "--hosts", "vmSilent", "--connect-timeout", "5s", "--dir", filepath.Join(t.TempDir(), "run-silent"),
			"--ship-data", "--", "--train", meta.Files[0], "--test", meta.TestFile, "--dim", "65536")
		code := wait(t, cmd, time.Minute, errb)
		took := time.Since(start)
		t.Logf("failed after %v:\n%s", took.Round(time.Millisecond), tail(errb.String(), 600))
		if code != 1 || took > 10*time.Second {
			t.Errorf("exit %d after %v, want 1 in under 10 s\n%s", code, took, out)
		}
		if msg := errb.String(); !strings.Contains(msg, "host vmSilent: ssh: ") || !strings.Contains(msg, "timed out") {
			t.Errorf("the error does not name the host and say ssh timed out:\n%s", msg)
		}
	})

	t.Run("peer-fails", func(t *testing.T) {
		// The hosts' own files (no --ship-data): vm4's is missing.
		own := filepath.Join(lab.remote, "own")
		if err := os.MkdirAll(own, 0o755); err != nil {
			t.Fatal(err)
		}
		var files []string
		for i := range 4 {
			f := fmt.Sprintf("own/part-%d.svm", i)
			files = append(files, f)
			if i < 3 {
				b, err := os.ReadFile(meta.Files[i])
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(lab.remote, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		run := filepath.Join(t.TempDir(), "run-fails")
		cmd, out, errb := lab.launch(t, "--hosts", lab.hosts(), "--dir", run,
			"--", "--train", strings.Join(files, ","), "--model", "logreg", "--dim", "65536", "--epochs", "100")
		code := wait(t, cmd, 2*time.Minute, errb)
		msg := errb.String()
		t.Logf("exit %d:\n%s", code, tail(msg, 2000))
		if code != 1 {
			t.Errorf("exit %d, want 1\n%s", code, out)
		}
		for _, want := range []string{"peer 3 on vm4", "failed: exit status 2", "the end of its log", "own/part-3.svm"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the error lacks %q", want)
			}
		}
		if left := lab.leftOnHosts(t); len(left) > 0 {
			t.Errorf("processes left on the hosts after a peer failed:\n%s", strings.Join(left, "\n"))
		}
	})
}

// leftOnHosts is what still runs on the hosts (allHostProcesses) once
// their sshd sessions have had a few seconds to end: launch has exited,
// and a session's sshd exits after its client, later on a busy machine.
func (l *sshLab) leftOnHosts(t *testing.T) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := l.allHostProcesses(t)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond) // polling processes that are exiting
	}
}

// allHostProcesses lists what runs on any host besides its sshd listener.
func (l *sshLab) allHostProcesses(t *testing.T) []string {
	t.Helper()
	var all []string
	for i := 1; i <= l.n; i++ {
		for _, p := range l.hostProcesses(t, i) {
			all = append(all, fmt.Sprintf("vm%d: %s", i, p))
		}
	}
	return all
}
