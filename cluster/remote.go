package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// ErrHost marks a host an SSH launch cannot use: unreachable, refused,
// another architecture, a failed copy. The error names the host and shows
// what ssh or scp said.
var ErrHost = errors.New("host unusable")

// Host is one machine of an SSH launch, as "[user@]name[:port]": name is a
// host name, an address (IPv6 in brackets) or an alias of ~/.ssh/config.
type Host struct {
	Spec string // as given
	User string // "" leaves it to ssh (the config's, or the local user)
	Name string
	Port int // 0 leaves it to ssh (the config's, or 22)
}

var hostNameRe = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// ParseHost parses "[user@]name[:port]" ("[::1]:2222" for IPv6). A host,
// or a user, that starts with '-' is refused: ssh would take it for an
// option. Every ssh and scp command line also ends its options with "--"
// (TestParseHostRefusesOptions and TestSSHArgvEndsOptions pin both).
func ParseHost(s string) (Host, error) {
	h := Host{Spec: s}
	rest := strings.TrimSpace(s)
	if rest == "" {
		return h, fmt.Errorf("host %q: empty", s)
	}
	if strings.HasPrefix(rest, "-") {
		// ssh and scp would read it as an option (-oProxyCommand=… runs
		// a command here).
		return h, fmt.Errorf("host %q: starts with '-': a host name never does, and ssh would read it as an option", s)
	}
	if u, r, ok := strings.Cut(rest, "@"); ok {
		if u == "" || !hostNameRe.MatchString(u) {
			return h, fmt.Errorf("host %q: bad user name %q", s, u)
		}
		h.User, rest = u, r
	}
	if strings.HasPrefix(rest, "-") {
		return h, fmt.Errorf("host %q: the host name starts with '-': a host name never does, and ssh would read it as an option", s)
	}
	port := ""
	switch {
	case strings.HasPrefix(rest, "["):
		i := strings.IndexByte(rest, ']')
		if i < 0 {
			return h, fmt.Errorf("host %q: missing ] after an IPv6 address", s)
		}
		h.Name = rest[1:i]
		if net.ParseIP(h.Name) == nil {
			return h, fmt.Errorf("host %q: %q is not an IP address", s, h.Name)
		}
		if r := rest[i+1:]; r != "" {
			if !strings.HasPrefix(r, ":") {
				return h, fmt.Errorf("host %q: want [ADDRESS]:PORT", s)
			}
			port = r[1:]
		}
	case strings.Count(rest, ":") > 1:
		return h, fmt.Errorf("host %q: put an IPv6 address in brackets: [%s]", s, rest)
	default:
		h.Name, port, _ = strings.Cut(rest, ":")
		if !hostNameRe.MatchString(h.Name) {
			return h, fmt.Errorf("host %q: bad host name %q", s, h.Name)
		}
	}
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return h, fmt.Errorf("host %q: port %q is not a number from 1 to 65535", s, port)
		}
		h.Port = p
	}
	return h, nil
}

// dest is the destination ssh takes: [user@]name.
func (h Host) dest() string {
	if h.User != "" {
		return h.User + "@" + h.Name
	}
	return h.Name
}

// scpDest is the destination scp takes before ":path" ([user@]name, an
// IPv6 address in brackets).
func (h Host) scpDest() string {
	n := h.Name
	if strings.Contains(n, ":") {
		n = "[" + n + "]"
	}
	if h.User != "" {
		return h.User + "@" + n
	}
	return n
}

// String is the host as given.
func (h Host) String() string { return h.Spec }

// SSH is the Launcher of one peer on each of a list of hosts, over the
// system's ssh and scp: ~/.ssh/config, agents, jump hosts and known_hosts
// work as they do at the user's prompt, and nothing ever asks for a
// password (BatchMode: a host that wants one fails the start).
//
// Prepare checks every host at once (one ssh each: reachable, which system,
// what is already there), then copies the binary and the data files that
// are missing or differ (by size and modification time, as rsync's quick
// check; scp -p keeps the times). Each peer runs under "gossiptrain
// launch-agent" (RunAgent), which streams the peer's report and log back
// over the session, stops the peer when asked on its standard input, and
// stops it too when the session closes (the launcher died or lost the
// host), so no peer is left behind.
//
// On each host, RemoteDir holds the binary (gossiptrain), the peers'
// identities (peer-N.key, kept across runs: same host, same peer ID),
// the shipped data (data/), and each run's swarm key (runs/<Run>/swarm.key,
// mode 0600, passed to the peer with --swarm-key), report and log
// (runs/<Run>/peer-N.jsonl and .log). Copies are written to temporary
// names and renamed, so hosts that share a file system (NFS homes) do not
// corrupt each other's copies.
type SSH struct {
	Hosts []Host
	// Binary is the gossiptrain executable to copy; "" is the running one
	// (os.Executable), whose system and architecture every host must have.
	Binary string
	// RemoteDir is the directory on every host; relative paths are in the
	// login directory. Letters, digits and . _ - / only.
	RemoteDir string
	// Run names the run: its files go to RemoteDir/runs/<Run>/.
	Run string
	// Dir is the local run directory: peer-N.jsonl and peer-N.log are
	// the reports and logs streamed back.
	Dir string
	// Files, when not nil, lists the local files to copy into
	// RemoteDir/data/ on host i (the train flags name them data/<base>).
	Files func(i int) []string
	// Options are more ssh options, given to ssh and scp before the
	// destination: "-F", "FILE", "-o", "NAME=VALUE", "-J", "jump".
	Options []string
	// ConnectTimeout bounds connecting to a host (ssh's ConnectTimeout:
	// the TCP connect and the SSH handshake).
	ConnectTimeout time.Duration
	// ListenPort is the TCP port every peer listens on (0: a free port).
	ListenPort int
	// StatusPort is the port of every peer's status server and dashboard,
	// on the address the host was reached at (0: a free port, logged).
	StatusPort int
	// Grace is how long a peer has to leave once its session is gone,
	// before its agent kills it.
	Grace time.Duration
	// Log receives the launcher's lines (hosts checked, copies).
	Log zerolog.Logger

	hosts []*remoteHost // by index, after Prepare
	key   string        // the local swarm key file Prepare copies ("": none)
}

// remoteHost is what Prepare learnt about one host.
type remoteHost struct {
	h      Host
	ip     string    // the host's address as the ssh session arrived at it
	dir    string    // RemoteDir, absolute on the host
	cmd    *exec.Cmd // the peer's ssh session
	stdin  io.WriteCloser
	killMu sync.Mutex
	killed bool
}

// DefaultSSH returns an SSH launcher's defaults; Hosts, Run and Dir are
// the caller's.
func DefaultSSH() *SSH {
	return &SSH{
		RemoteDir:      "gossiptrain",
		ConnectTimeout: 5 * time.Second,  // an unreachable host fails the start within seconds
		Grace:          10 * time.Second, // as Config.Grace: a graceful leave takes seconds
		Log:            zerolog.Nop(),
	}
}

var remoteDirRe = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)

// Validate checks the launcher's fields.
func (s *SSH) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("cluster: %w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case len(s.Hosts) == 0:
		return bad("SSH.Hosts is empty")
	case !remoteDirRe.MatchString(s.RemoteDir) || strings.Contains("/"+s.RemoteDir+"/", "/../"):
		return bad("SSH.RemoteDir %q: use letters, digits and . _ - / only, and no ..", s.RemoteDir)
	case !remoteDirRe.MatchString(s.Run) || strings.Contains(s.Run, "/") || s.Run == "." || s.Run == "..":
		return bad("SSH.Run %q: one path element of letters, digits and . _ -", s.Run)
	case s.Dir == "":
		return bad("SSH.Dir is empty")
	case s.ConnectTimeout < time.Second:
		return bad("SSH.ConnectTimeout %v: want at least 1s (ssh counts whole seconds)", s.ConnectTimeout)
	case s.ListenPort < 0 || s.ListenPort > 65535 || s.StatusPort < 0 || s.StatusPort > 65535:
		return bad("SSH.ListenPort %d, StatusPort %d: want 0 to 65535", s.ListenPort, s.StatusPort)
	case s.Grace < 0:
		return bad("SSH.Grace %v: want >= 0", s.Grace)
	}
	return nil
}

// sshArgs are the options every ssh and scp call gets: never a prompt, a
// bounded connect, a dead connection noticed in 20 s.
func (s *SSH) sshArgs() []string {
	return append([]string{
		"-o", "BatchMode=yes",
		"-o", "ConnectTimeout=" + strconv.Itoa(int(s.ConnectTimeout.Round(time.Second)/time.Second)),
		"-o", "ServerAliveInterval=5",
		"-o", "ServerAliveCountMax=4",
	}, s.Options...)
}

// sshCommand runs command (a shell command line) on host h.
func (s *SSH) sshCommand(ctx context.Context, h Host, command string) *exec.Cmd {
	a := s.sshArgs()
	if h.Port != 0 {
		a = append(a, "-p", strconv.Itoa(h.Port))
	}
	a = append(a, "-T", "--", h.dest(), command)
	if ctx == nil {
		return exec.Command("ssh", a...)
	}
	cmd := exec.CommandContext(ctx, "ssh", a...)
	// Once ctx ends and ssh is killed, stop waiting for its output: a
	// ProxyCommand it started may hold the pipes open for minutes (a
	// check of a silent host hung a CI run's launch past its minute).
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// run runs command on h and returns its standard output; the error shows
// what ssh or the command said.
func (s *SSH) run(ctx context.Context, h Host, command string) ([]byte, error) {
	cmd := s.sshCommand(ctx, h, command)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), toolError(ctx, "ssh", err, errb.Bytes())
	}
	return out.Bytes(), nil
}

// scpArgs is scp's command line (without "scp") copying from to to, one
// of which is remote (host:path): the options, "--", then the files.
func (s *SSH) scpArgs(h Host, from []string, to string) []string {
	a := append([]string{"-q", "-p"}, s.sshArgs()...)
	if h.Port != 0 {
		a = append(a, "-P", strconv.Itoa(h.Port))
	}
	a = append(a, "--")
	a = append(a, from...)
	return append(a, to)
}

// scp copies local files to dir on h, keeping their times and modes.
func (s *SSH) scp(ctx context.Context, h Host, files []string, remote string) error {
	cmd := exec.CommandContext(ctx, "scp", s.scpArgs(h, files, h.scpDest()+":"+remote)...)
	cmd.WaitDelay = 2 * time.Second // (as sshCommand)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &errb, &errb
	if err := cmd.Run(); err != nil {
		return toolError(ctx, "scp", err, errb.Bytes())
	}
	return nil
}

// toolError describes a failed ssh or scp: what it printed (its last
// lines), else how it ended.
func toolError(ctx context.Context, tool string, err error, out []byte) error {
	msg := strings.TrimSpace(string(out))
	if lines := strings.Split(msg, "\n"); len(lines) > 3 {
		msg = strings.Join(lines[len(lines)-3:], "\n")
	}
	if ctx != nil && ctx.Err() != nil {
		return fmt.Errorf("%s: no answer in time (%v)", tool, ctx.Err())
	}
	if msg == "" {
		return fmt.Errorf("%s: %v", tool, err)
	}
	if !strings.HasPrefix(msg, tool+":") {
		msg = tool + ": " + msg
	}
	return errors.New(msg)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@+%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shipName is the name a shipped file gets in data/: its base name, with
// characters a shell or scp could misread replaced.
func shipName(path string) string {
	return regexp.MustCompile(`[^A-Za-z0-9._-]`).ReplaceAllString(filepath.Base(path), "_")
}

// ShipName is the path, relative to RemoteDir, that a file of
// SSH.Files has on its host: data/<base name>.
func ShipName(path string) string { return "data/" + shipName(path) }

// goarch maps uname -m to Go's GOARCH.
var goarch = map[string]string{
	"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
	"i686": "386", "i386": "386", "armv7l": "arm", "armv6l": "arm",
	"ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64",
}

// fileStamp is a file's size and modification time in seconds, the quick
// check of whether a copy is current.
func fileStamp(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	return fmt.Sprintf("%d %d", st.Size(), st.ModTime().Unix()), nil
}

// eachHost runs fn for every host at once. The first failure ends it:
// the other hosts get a second to report theirs too, then their work is
// cancelled. The error names every host at fault.
func (s *SSH) eachHost(ctx context.Context, fn func(ctx context.Context, i int) error) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := len(s.Hosts)
	errs := make([]error, n)
	failed := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := fn(pctx, i); err != nil && pctx.Err() == nil {
				errs[i] = fmt.Errorf("host %s: %w", s.Hosts[i], err)
				failed <- struct{}{}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-failed:
		select {
		case <-done:
		case <-time.After(time.Second):
		}
		cancel()
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster: %w: %w", ErrHost, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cluster: interrupted while preparing the hosts: %w", err)
	}
	return nil
}

// Check connects to every host at once (one ssh each): it learns the
// address the session arrived at, checks the system against the binary's
// and creates the directories. Call it before slow local work (scanning or
// generating data) so that a host that cannot be used fails the start at
// once; Prepare calls it when it has not run.
func (s *SSH) Check(ctx context.Context) error {
	if err := s.Validate(); err != nil {
		return err
	}
	for _, tool := range []string{"ssh", "scp"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("cluster: the %s command is missing (Debian: apt-get install openssh-client): %w", tool, err)
		}
	}
	_, checkArch, err := s.binary()
	if err != nil {
		return err
	}
	s.hosts = make([]*remoteHost, len(s.Hosts))
	return s.eachHost(ctx, func(ctx context.Context, i int) error {
		rh, err := s.checkHost(ctx, s.Hosts[i], checkArch)
		s.hosts[i] = rh
		return err
	})
}

// binary is the binary to copy, and whether it is this process's own (so
// the hosts' system and architecture must match this one's).
func (s *SSH) binary() (string, bool, error) {
	if s.Binary != "" {
		return s.Binary, false, nil
	}
	bin, err := os.Executable()
	if err != nil {
		return "", false, fmt.Errorf("cluster: cannot find the gossiptrain binary: %w", err)
	}
	return bin, true, nil
}

// checkHost is Check of one host.
func (s *SSH) checkHost(ctx context.Context, h Host, checkArch bool) (*remoteHost, error) {
	script := fmt.Sprintf("set -e; echo \"conn $SSH_CONNECTION\"; echo \"sys $(uname -s) $(uname -m)\"; "+
		"mkdir -p %s/runs/%s %s/data; cd %s; echo \"dir $(pwd)\"",
		shellQuote(s.RemoteDir), shellQuote(s.Run), shellQuote(s.RemoteDir), shellQuote(s.RemoteDir))
	probeCtx, cancel := context.WithTimeout(ctx, s.ConnectTimeout+30*time.Second)
	out, err := s.run(probeCtx, h, script)
	cancel()
	if err != nil {
		return nil, err
	}
	rh := &remoteHost{h: h}
	var sys []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "conn": // client-ip client-port server-ip server-port
			if f := strings.Fields(rest); len(f) == 4 {
				rh.ip = f[2]
			}
		case "sys":
			sys = strings.Fields(rest)
		case "dir":
			rh.dir = rest
		}
	}
	if rh.ip == "" || rh.dir == "" || len(sys) != 2 {
		return nil, fmt.Errorf("unexpected answer to the check (is the login shell a POSIX shell?): %q", out)
	}
	if net.ParseIP(rh.ip) == nil {
		return nil, fmt.Errorf("SSH_CONNECTION gave %q, not an address", rh.ip)
	}
	if checkArch {
		if !strings.EqualFold(sys[0], runtime.GOOS) || goarch[sys[1]] != runtime.GOARCH {
			return nil, fmt.Errorf("it runs %s %s, this gossiptrain binary is built for %s/%s: build one for it (GOOS=%s GOARCH=%s go build) and give its path with --binary",
				sys[0], sys[1], runtime.GOOS, runtime.GOARCH, strings.ToLower(sys[0]), goarch[sys[1]])
		}
	}
	return rh, nil
}

// Prepare checks every host (Check, unless it ran), copies the binary and
// each host's files where they are missing or differ, and the swarm key
// (always: it is the run's); it fails, naming every host at fault, before
// any peer starts.
func (s *SSH) Prepare(ctx context.Context, n int, swarmKey string) error {
	if err := s.Validate(); err != nil {
		return err
	}
	s.key = swarmKey
	if n != len(s.Hosts) {
		return fmt.Errorf("cluster: %w: %d peers for %d hosts: one peer per host", ErrConfig, n, len(s.Hosts))
	}
	if len(s.hosts) != n || slices.Contains(s.hosts, nil) {
		if err := s.Check(ctx); err != nil {
			return err
		}
	}
	bin, _, err := s.binary()
	if err != nil {
		return err
	}
	binStamp, err := fileStamp(bin)
	if err != nil {
		return fmt.Errorf("cluster: the binary to copy: %w", err)
	}
	return s.eachHost(ctx, func(ctx context.Context, i int) error {
		return s.copyHost(ctx, i, bin, binStamp)
	})
}

// copyHost copies the binary and host i's files where they are missing
// or differ, to temporary names, then renames them.
func (s *SSH) copyHost(ctx context.Context, i int, bin, binStamp string) error {
	rh := s.hosts[i]
	h := rh.h
	start := time.Now()
	var files []string
	if s.Files != nil {
		files = s.Files(i)
	}
	names := []string{"gossiptrain"}
	for _, f := range files {
		names = append(names, ShipName(f))
	}
	var script strings.Builder
	fmt.Fprintf(&script, "cd %s; ", shellQuote(rh.dir))
	for _, nm := range names {
		fmt.Fprintf(&script, "if [ -f %s ]; then echo \"stamp %s $(stat -c '%%s %%Y' %s)\"; fi; ", shellQuote(nm), nm, shellQuote(nm))
	}
	out, err := s.run(ctx, h, script.String())
	if err != nil {
		return err
	}
	stamps := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "stamp "); ok {
			nm, st, _ := strings.Cut(rest, " ")
			stamps[nm] = st
		}
	}
	type copyJob struct{ local, remote string }
	var jobs []copyJob
	if stamps["gossiptrain"] != binStamp {
		jobs = append(jobs, copyJob{bin, "gossiptrain"})
	}
	for _, f := range files {
		st, err := fileStamp(f)
		if err != nil {
			return fmt.Errorf("a data file to ship: %w", err)
		}
		if stamps[ShipName(f)] != st {
			jobs = append(jobs, copyJob{f, ShipName(f)})
		}
	}
	copied := len(jobs)
	if s.key != "" {
		jobs = append(jobs, copyJob{s.key, s.remoteKey()})
	}
	if len(jobs) > 0 {
		var mv strings.Builder
		fmt.Fprintf(&mv, "set -e; cd %s; ", shellQuote(rh.dir))
		for _, j := range jobs {
			tmp := filepath.Join(filepath.Dir(j.remote), fmt.Sprintf(".%s.%d.tmp", filepath.Base(j.remote), i))
			if err := s.scp(ctx, h, []string{j.local}, rh.dir+"/"+tmp); err != nil {
				return fmt.Errorf("copying %s: %w", j.local, err)
			}
			fmt.Fprintf(&mv, "mv -f %s %s; ", shellQuote(tmp), shellQuote(j.remote))
		}
		fmt.Fprintf(&mv, "chmod 755 gossiptrain")
		if s.key != "" {
			// scp -p kept the local file's 0600; make sure of it, since
			// the peer refuses a key others may read.
			fmt.Fprintf(&mv, "; chmod 600 %s", shellQuote(s.remoteKey()))
		}
		if _, err := s.run(ctx, h, mv.String()); err != nil {
			return fmt.Errorf("installing the copies: %w", err)
		}
	}
	s.Log.Info().Str("host", h.String()).Str("addr", rh.ip).Str("dir", rh.dir).Int("copied", copied).
		Int("current", len(names)-copied).Bool("swarm_key", s.key != "").Dur("took", time.Since(start).Round(time.Millisecond)).Msg("host ready")
	return nil
}

// remoteKey is the path of the run's swarm key on every host, relative to
// RemoteDir.
func (s *SSH) remoteKey() string { return "runs/" + s.Run + "/swarm.key" }

// remoteRun are the paths of peer i's run files, relative to RemoteDir.
func (s *SSH) remoteRun(i int) (report, log string) {
	base := fmt.Sprintf("runs/%s/peer-%d", s.Run, i)
	return base + ".jsonl", base + ".log"
}

// Launch starts peer i on its host under the agent.
func (s *SSH) Launch(i int, args []string) (*Launch, error) {
	rh := s.hosts[i]
	report, log := s.remoteRun(i)
	ipProto, statusHost := "ip4", rh.ip
	if strings.Contains(rh.ip, ":") {
		ipProto, statusHost = "ip6", "["+rh.ip+"]"
	}
	listenAll := "0.0.0.0"
	if ipProto == "ip6" {
		listenAll = "::"
	}
	args = append(args,
		"--identity", fmt.Sprintf("peer-%d.key", i),
		"--report", report,
		"--listen", fmt.Sprintf("/%s/%s/tcp/%d", ipProto, listenAll, s.ListenPort),
		"--status-addr", statusHost+":"+strconv.Itoa(s.StatusPort))
	if s.key != "" {
		args = append(args, "--swarm-key", s.remoteKey())
	}
	var c strings.Builder
	fmt.Fprintf(&c, "cd %s && exec ./gossiptrain %s --report %s --log %s --grace %s --",
		shellQuote(rh.dir), AgentCommand, shellQuote(report), shellQuote(log), s.Grace)
	for _, a := range args {
		c.WriteString(" ")
		c.WriteString(shellQuote(a))
	}
	cmd := s.sshCommand(nil, rh.h, c.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	rh.stdin, rh.cmd = stdin, cmd
	return &Launch{
		Cmd:            cmd,
		Where:          rh.h.String(),
		AddrPrefix:     "/" + ipProto + "/" + rh.ip + "/tcp/",
		Report:         filepath.Join(s.Dir, fmt.Sprintf("peer-%d.jsonl", i)),
		ReportOnStdout: true,
		Stop: func(sig syscall.Signal) {
			req := agentTerm
			if sig == syscall.SIGKILL {
				req = agentKill
			}
			go stdin.Write([]byte(req + "\n")) // a full pipe to a stuck session must not block Run
			if sig == syscall.SIGKILL {
				// The agent kills the peer at once; if the session is
				// stuck, closing it makes the agent do so too.
				rh.killMu.Lock()
				defer rh.killMu.Unlock()
				if !rh.killed {
					rh.killed = true
					time.AfterFunc(5*time.Second, func() {
						if cmd.ProcessState == nil && cmd.Process != nil {
							cmd.Process.Kill()
						}
					})
				}
			}
		},
	}, nil
}

// Collect fetches peer i's report from its host when its session broke
// (ssh exited with 255) before the streamed copy got the summary, and its
// log beside it as peer-N.remote.log. A peer that was stopped, or failed,
// has no more on its host than what was streamed.
func (s *SSH) Collect(ctx context.Context, i int) error {
	rh := s.hosts[i]
	if rh == nil || rh.cmd == nil || rh.cmd.ProcessState == nil || rh.cmd.ProcessState.ExitCode() != 255 {
		return nil
	}
	local := filepath.Join(s.Dir, fmt.Sprintf("peer-%d.jsonl", i))
	if hasSummary(local) {
		return nil
	}
	report, log := s.remoteRun(i)
	// scp copies the files to a directory (or renames a single file);
	// fetch each to its own name.
	for _, f := range []struct{ remote, local string }{
		{report, local},
		{log, filepath.Join(s.Dir, fmt.Sprintf("peer-%d.remote.log", i))},
	} {
		if err := s.fetch(ctx, rh.h, rh.dir+"/"+f.remote, f.local); err != nil {
			return fmt.Errorf("fetching %s from %s: %w", f.remote, rh.h, err)
		}
	}
	s.Log.Info().Int("peer", i).Str("host", rh.h.String()).Msg("the streamed report was incomplete: fetched the host's copy")
	return nil
}

// Fetch copies the file remote (relative to RemoteDir) from peer i's host
// to the local path local.
func (s *SSH) Fetch(ctx context.Context, i int, remote, local string) error {
	if i < 0 || i >= len(s.hosts) || s.hosts[i] == nil {
		return fmt.Errorf("cluster: no prepared host %d", i)
	}
	rh := s.hosts[i]
	if err := s.fetch(ctx, rh.h, rh.dir+"/"+remote, local); err != nil {
		return fmt.Errorf("copying %s from %s: %w", remote, rh.h, err)
	}
	return nil
}

// fetch copies one remote file to a local path.
func (s *SSH) fetch(ctx context.Context, h Host, remote, local string) error {
	cmd := exec.CommandContext(ctx, "scp", s.scpArgs(h, []string{h.scpDest() + ":" + remote}, local)...)
	cmd.WaitDelay = 2 * time.Second // (as sshCommand)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &errb, &errb
	if err := cmd.Run(); err != nil {
		return toolError(ctx, "scp", err, errb.Bytes())
	}
	return nil
}

// hasSummary reports whether a report file ends with its summary line.
func hasSummary(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false
	}
	off := max(st.Size()-64<<10, 0)
	buf := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(buf, off)
	return bytes.Contains(buf[:n], []byte(`"type":"summary"`))
}

// Close closes the sessions' standard inputs (their agents stop any peer
// still running).
func (s *SSH) Close() error {
	for _, rh := range s.hosts {
		if rh != nil && rh.stdin != nil {
			rh.stdin.Close()
		}
	}
	return nil
}

var _ Launcher = (*SSH)(nil)
