package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// AgentCommand is the gossiptrain subcommand an SSH launch runs on each
// host: "gossiptrain launch-agent [flags] -- train …" (see RunAgent).
const AgentCommand = "launch-agent"

// Agent stop requests, one a line on the agent's standard input.
const (
	agentTerm = "term" // leave gracefully (SIGTERM to the peer)
	agentKill = "kill" // stop at once (SIGKILL)
)

// AgentConfig is what the agent of one remote peer runs and where its
// outputs go. The agent is the peer's parent on its host: the launcher's
// ssh session talks to it, never to the peer directly.
type AgentConfig struct {
	// Binary and Args are the peer's command ("gossiptrain", "train", …).
	Binary string
	Args   []string
	// Env is added to the peer's environment.
	Env []string
	// Report is the report file the peer writes (its --report); the agent
	// streams it to Out as it grows, so the launcher follows the run.
	Report string
	// Log, when not empty, keeps a copy of the peer's output on its host.
	Log string
	// Grace is how long the peer has to leave after the launcher went away
	// (In reached EOF) or asked it to leave, before SIGKILL.
	Grace time.Duration
	// Poll is how often the report is read for new lines.
	Poll time.Duration
	// In carries stop requests ("term", "kill"); its EOF means the
	// launcher is gone (its ssh session closed), which stops the peer too.
	In io.Reader
	// Out receives the report; Err the peer's output (its log).
	Out, Err io.Writer
}

// RunAgent runs one remote peer until it exits and returns the exit code
// the agent should exit with: the peer's, or 128+N when signal N ended it.
// When ctx ends (the agent itself was signalled), the peer is asked to
// leave as on "term". A write to Out or Err that fails (the session is
// gone) stops that stream only: In's EOF is what stops the peer.
func RunAgent(ctx context.Context, cfg AgentConfig) (int, error) {
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	logFile, err := agentFiles(cfg)
	if err != nil {
		return 1, fmt.Errorf("agent: %w", err)
	}
	if logFile != nil {
		defer logFile.Close()
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return 1, fmt.Errorf("agent: %w", err)
	}
	cmd := exec.Command(cfg.Binary, cfg.Args...)
	cmd.Env = append(os.Environ(), cfg.Env...)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // signals meant for the session reach the agent, which stops the peer in order
		Pdeathsig: syscall.SIGKILL, // and the peer never outlives the agent
	}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return 1, fmt.Errorf("agent: start %s: %w", cfg.Binary, err)
	}
	pw.Close()

	// The peer's output: to Err and the log file, line by line.
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		copyLines(pr, logFile, cfg.Err)
	}()

	exited := make(chan struct{})
	var once sync.Once
	signal := func(sig syscall.Signal) {
		select {
		case <-exited:
		default:
			cmd.Process.Signal(sig)
		}
	}
	// leave asks the peer to leave, and kills it after the grace period.
	leave := func() {
		signal(syscall.SIGTERM)
		once.Do(func() {
			go func() {
				select {
				case <-exited:
				case <-time.After(cfg.Grace):
					signal(syscall.SIGKILL)
				}
			}()
		})
	}
	go func() {
		sc := bufio.NewScanner(cfg.In)
		for sc.Scan() {
			switch strings.TrimSpace(sc.Text()) {
			case agentTerm:
				leave()
			case agentKill:
				signal(syscall.SIGKILL)
			}
		}
		leave() // EOF or a broken session: the launcher is gone
	}()
	go func() {
		select {
		case <-ctx.Done():
			leave()
		case <-exited:
		}
	}()

	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	st := &reportStream{path: cfg.Report, out: cfg.Out}
	defer st.close()
	tick := time.NewTicker(cfg.Poll)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			st.copy()
			continue
		case <-waitErr:
		}
		break
	}
	close(exited)
	select {
	case <-logDone:
	case <-time.After(2 * time.Second): // a grandchild holding the pipe must not hang the agent
		pr.Close()
		<-logDone
	}
	pr.Close()
	st.copy() // the rest of the report: its summary
	ps := cmd.ProcessState
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}

// agentFiles makes the directories of the report and the log, removes a
// report left by an earlier run under the same name (it would be streamed
// before the peer truncates it), and creates the log file (nil without
// one).
func agentFiles(cfg AgentConfig) (*os.File, error) {
	for _, f := range []string{cfg.Report, cfg.Log} {
		if f != "" {
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				return nil, err
			}
		}
	}
	if err := os.Remove(cfg.Report); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if cfg.Log == "" {
		return nil, nil
	}
	return os.Create(cfg.Log)
}

// copyLines copies r to log (when not nil) and to w, line by line, until
// r ends; a write to w that fails stops the copy to w only (the session is
// gone), never the log's.
func copyLines(r io.Reader, log *os.File, w io.Writer) {
	wOK := true
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if log != nil {
				log.Write(line)
			}
			if wOK {
				_, werr := w.Write(line)
				wOK = werr == nil
			}
		}
		if err != nil {
			return
		}
	}
}

// reportStream copies what a growing file gains to out.
type reportStream struct {
	path string
	out  io.Writer
	off  int64
	bad  bool // out failed: stop writing
	f    *os.File
}

func (s *reportStream) close() {
	if s.f != nil {
		s.f.Close()
	}
}

func (s *reportStream) copy() {
	if s.bad {
		return
	}
	if s.f == nil {
		f, err := os.Open(s.path)
		if err != nil {
			return // not written yet
		}
		s.f = f
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := s.f.ReadAt(buf, s.off)
		if n > 0 {
			if _, werr := s.out.Write(buf[:n]); werr != nil {
				s.bad = true
				return
			}
			s.off += int64(n)
		}
		if err != nil || n == 0 {
			return
		}
	}
}
