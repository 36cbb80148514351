package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/peerlog"
	"github.com/gossiptrain/gossiptrain/report"
)

// Result is what a run did.
type Result struct {
	Dir      string        // the run directory
	SwarmKey string        // the swarm key file every peer got ("" with Standalone)
	NetNS    string        // the name prefix of the run's namespaces and links ("" without NetNS)
	Duration time.Duration // from the first start to the last exit
	Peers    []PeerResult  // by index
}

// PeerResult is one peer process of a run.
type PeerResult struct {
	Index       int
	Host        string        // the host it ran on ("" for this machine)
	PeerID      string        // its libp2p peer ID, as it logged it ("" if it never did)
	Pid         int           // its local process ID (0 if it never started; an ssh client's for remote peers)
	Report      string        // its report file (--report; a local copy for remote peers)
	Log         string        // its standard error
	Addr        string        // the address it listened on, with /p2p/ID
	StatusAddr  string        // its status server and dashboard (gossiptrain status ADDR), inside its namespace with NetNS
	MetricsAddr string        // its metrics server, when --metrics-addr was given
	Exit        string        // "exit status 0", "signal: terminated", …
	ExitCode    int           // the exit status; -1 when a signal ended it
	Duration    time.Duration // from its start to its exit
	// PeakRSS is the process's peak resident memory over its whole life,
	// its end included (the kernel's count at exit; 0 for remote peers
	// and when unknown). A report's peak_rss_bytes is taken when the peer
	// writes its summary, before it leaves.
	PeakRSS int64
}

// Reports reads every peer's report file.
func (r *Result) Reports() ([]*report.Run, error) {
	runs := make([]*report.Run, 0, len(r.Peers))
	for _, p := range r.Peers {
		run, err := report.ReadFile(p.Report)
		if err != nil {
			return nil, fmt.Errorf("cluster: peer %d: %w", p.Index, err)
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// Run starts cfg.Peers peers of "gossiptrain train", peer 0 first and the
// others bootstrapped to it, and waits until every one has exited (see the
// package documentation). It returns the result, which lists every peer
// started, also with an error. The error is a *PeerError when a peer
// failed, and wraps ctx's error when ctx ended first.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	l := cfg.Launcher
	if l == nil {
		loc, err := newLocal(cfg, dir)
		if err != nil {
			return nil, err
		}
		defer func() {
			if loc.prefix != "" {
				res.NetNS = loc.prefix
			}
		}()
		l = loc
	}
	r := &runner{cfg: cfg, l: l, dir: dir, exits: make(chan int, cfg.Peers)}
	res = &Result{Dir: dir}
	defer joinClose(&err, l.Close)
	key, err := runKey(cfg, dir)
	if err != nil {
		return res, err
	}
	res.SwarmKey = key
	if err := l.Prepare(ctx, cfg.Peers, key); err != nil {
		return res, err
	}
	// Whatever happens below (a panic included), no peer outlives Run.
	defer r.killAll()
	start := time.Now()
	err = r.run(ctx)
	res.Duration = time.Since(start)
	res.Peers = r.results()
	r.collect()
	return res, err
}

// runKey returns the swarm key file of the run: Config.SwarmKey, checked,
// or a new key written to dir/swarm.key (mode 0600, replacing a key an
// earlier run in dir left). A Standalone run gets none. TestRunSwarmKey
// pins it.
func runKey(cfg Config, dir string) (string, error) {
	if cfg.Standalone {
		return "", nil
	}
	if cfg.SwarmKey != "" {
		path, err := filepath.Abs(cfg.SwarmKey)
		if err != nil {
			return "", fmt.Errorf("cluster: %w", err)
		}
		if err := checkKeyFile(path); err != nil {
			return "", fmt.Errorf("cluster: the swarm key: %w", err)
		}
		return path, nil
	}
	path := filepath.Join(dir, "swarm.key")
	if err := writeSwarmKey(path); err != nil {
		return "", fmt.Errorf("cluster: a swarm key for the run: %w", err)
	}
	cfg.Log.Info().Str("file", path).Msg("a new swarm key for this run: only its peers can connect to each other")
	return path, nil
}

// runner runs the peers of one Run.
type runner struct {
	cfg   Config
	l     Launcher
	dir   string
	procs []*proc
	exits chan int // indexes of peers that exited
}

// run starts the peers and supervises them until all have exited.
func (r *runner) run(ctx context.Context) error {
	log := r.cfg.Log
	p0, err := r.start(0, "")
	if err != nil {
		return err
	}
	running := 1
	if r.cfg.Standalone {
		// Processes that exchange nothing start at once.
		for i := 1; i < r.cfg.Peers; i++ {
			if _, err := r.start(i, ""); err != nil {
				r.stop(ctx, running)
				return err
			}
			running++
		}
		return r.supervise(ctx, running)
	}
	var startTimeout <-chan time.Time
	if r.cfg.StartTimeout > 0 {
		t := time.NewTimer(r.cfg.StartTimeout)
		defer t.Stop()
		startTimeout = t.C
	}
	select {
	case <-p0.addrReady:
	case <-r.exits:
		return r.peerError(p0, "exited before it logged an address to dial")
	case <-startTimeout:
		r.stop(ctx, 1)
		return fmt.Errorf("cluster: peer 0 logged no address to dial within %v (StartTimeout); its log is %s", r.cfg.StartTimeout, p0.logPath)
	case <-ctx.Done():
		r.stop(ctx, 1)
		return fmt.Errorf("cluster: interrupted while peer 0 started: %w", ctx.Err())
	}
	p0.mu.Lock()
	addr0 := p0.addr
	p0.mu.Unlock()
	log.Info().Str("addr", addr0).Msg("peer 0 is up; starting the others")
	go logDashboard(log, p0)
	for i := 1; i < r.cfg.Peers; i++ {
		if _, err := r.start(i, addr0); err != nil {
			r.stop(ctx, running)
			return err
		}
		running++
	}
	return r.supervise(ctx, running)
}

// supervise follows the running peers until all have exited, stopping
// them all when one fails or ctx ends.
func (r *runner) supervise(ctx context.Context, running int) error {
	log := r.cfg.Log
	var tick <-chan time.Time
	if r.cfg.ProgressEvery > 0 {
		t := time.NewTicker(r.cfg.ProgressEvery)
		defer t.Stop()
		tick = t.C
	}
	var firstErr error
	var kill, resend <-chan time.Time
	var resendT *time.Ticker
	stopping := false
	stopAll := func() {
		if stopping {
			return
		}
		stopping = true
		for _, p := range r.procs {
			p.signal(peerlog.StopSignal)
		}
		t := time.NewTimer(r.cfg.Grace)
		kill = t.C
		resendT = time.NewTicker(stopResend)
		resend = resendT.C
	}
	defer func() {
		if resendT != nil {
			resendT.Stop()
		}
	}()
	done := ctx.Done()
	for running > 0 {
		select {
		case i := <-r.exits:
			running--
			p := r.procs[i]
			if p.succeeded() {
				log.Debug().Int("peer", i).Dur("took", p.dur).Msg("peer exited")
				continue
			}
			if stopping {
				log.Debug().Int("peer", i).Str("exit", exitString(p)).Msg("peer stopped")
				continue
			}
			firstErr = r.peerError(p, "")
			log.Error().Int("peer", i).Str("exit", exitString(p)).Msg("peer failed; stopping the others")
			stopAll()
		case <-tick:
			r.reportProgress()
		case <-done:
			done = nil
			if firstErr == nil {
				firstErr = fmt.Errorf("cluster: interrupted: %w", ctx.Err())
			}
			log.Warn().Str("grace", r.cfg.Grace.String()).Msg("stopping the peers (" + peerlog.StopSignalName + ": the whole job stops at once; SIGKILL after the grace period)")
			stopAll()
		case <-resend:
			// A peer that had not yet installed its handler (it was still
			// starting) did not see the first one: Go drops an unwatched
			// SIGUSR1. The peers that did see it ignore a second.
			for _, p := range r.procs {
				p.signal(peerlog.StopSignal)
			}
		case <-kill:
			kill = nil
			for _, p := range r.procs {
				select {
				case <-p.exited:
				default:
					log.Warn().Int("peer", p.i).Msg("peer still running after the grace period: SIGKILL")
					p.signal(syscall.SIGKILL)
				}
			}
		}
	}
	return firstErr
}

// stop stops the first n peers (peerlog.StopSignal, SIGKILL after Grace)
// and waits for them.
func (r *runner) stop(ctx context.Context, n int) {
	for _, p := range r.procs[:n] {
		p.signal(peerlog.StopSignal)
	}
	t := time.NewTimer(r.cfg.Grace)
	defer t.Stop()
	rt := time.NewTicker(stopResend)
	defer rt.Stop()
	for _, p := range r.procs[:n] {
	wait:
		for {
			select {
			case <-p.exited:
				break wait
			case <-rt.C: // as in supervise: one that was starting missed it
				p.signal(peerlog.StopSignal)
			case <-t.C:
				r.killAll()
				return
			}
		}
	}
}

// stopResend is how often the stop signal is sent again to peers that
// have not exited yet, until the grace period ends.
const stopResend = 250 * time.Millisecond

// killAll sends SIGKILL to every peer still running and waits for them.
func (r *runner) killAll() {
	for _, p := range r.procs {
		p.signal(syscall.SIGKILL)
	}
	for _, p := range r.procs {
		<-p.exited
	}
}

// args is peer i's command line, without the flags the launcher adds
// (--identity, --report, --listen).
func (r *runner) args(i int, addr0 string) []string {
	a := []string{"train"}
	extra := r.cfg.TrainArgs
	var own []string
	if r.cfg.PeerArgs != nil {
		own = r.cfg.PeerArgs(i)
	}
	if r.cfg.Standalone {
		a = append(append(append(a, extra...), own...), "--log-format", "json")
		return a
	}
	if !hasFlag(extra, "min-peers") && !hasFlag(own, "min-peers") {
		a = append(a, "--min-peers", strconv.Itoa(r.cfg.Peers))
	}
	a = append(a, extra...)
	a = append(a, own...)
	a = append(a, windowArgs(a[1:], r.cfg.Peers)...)
	a = append(a, "--job", r.cfg.Job, "--log-format", "json")
	if addr0 != "" {
		a = append(a, "--peer", addr0)
	}
	return a
}

// start starts peer i; addr0 is peer 0's address ("" for peer 0).
func (r *runner) start(i int, addr0 string) (*proc, error) {
	l, err := r.l.Launch(i, r.args(i, addr0))
	if err != nil {
		return nil, fmt.Errorf("cluster: peer %d: %w", i, err)
	}
	p := &proc{
		i:           i,
		where:       l.Where,
		logPath:     filepath.Join(r.dir, fmt.Sprintf("peer-%d.log", i)),
		reportPath:  l.Report,
		addrPrefix:  l.AddrPrefix,
		stop:        l.Stop,
		exited:      make(chan struct{}),
		addrReady:   make(chan struct{}),
		statusReady: make(chan struct{}),
		phase:       StateStarting,
		round:       -1,
		tailMax:     r.cfg.TailLines,
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return nil, fmt.Errorf("cluster: peer %d: %w", i, err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("cluster: peer %d: %w", i, err)
	}
	cmd := l.Cmd
	cmd.Stdout, cmd.Stderr = pw, pw
	var reportFile *os.File
	if l.ReportOnStdout {
		if reportFile, err = os.Create(l.Report); err != nil {
			pr.Close()
			pw.Close()
			logFile.Close()
			return nil, fmt.Errorf("cluster: peer %d: %w", i, err)
		}
		cmd.Stdout = reportFile
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // a Ctrl-C at the terminal reaches Run, which stops the peers in order
		Pdeathsig: syscall.SIGKILL, // and they die with Run's process even when it is killed
	}
	p.cmd = cmd
	p.started = time.Now()
	if err := startOn(cmd, l.CPUs); err != nil {
		pr.Close()
		pw.Close()
		logFile.Close()
		if reportFile != nil {
			reportFile.Close()
		}
		return nil, fmt.Errorf("cluster: start peer %d (%s): %w", i, cmd.Path, err)
	}
	pw.Close() // the child holds the write end now
	r.procs = append(r.procs, p)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		p.readLog(pr, logFile)
	}()
	go func() {
		err := cmd.Wait()
		// The pipe reaches EOF when the peer (and anything it started)
		// has closed it; a grandchild keeping it open must not hang Run.
		select {
		case <-logDone:
		case <-time.After(2 * time.Second):
			pr.Close()
			<-logDone
		}
		pr.Close()
		logFile.Close()
		if reportFile != nil {
			reportFile.Close()
		}
		p.waitErr, p.state, p.dur = err, cmd.ProcessState, time.Since(p.started)
		close(p.exited)
		r.exits <- i
	}()
	ev := r.cfg.Log.Debug().Int("peer", i).Int("pid", cmd.Process.Pid).Str("cmd", strings.Join(cmd.Args, " "))
	if l.Where != "" {
		ev = ev.Str("host", l.Where)
	}
	ev.Msg("peer started")
	return p, nil
}

// logDashboard logs the URL of peer 0's dashboard once it is known.
func logDashboard(log zerolog.Logger, p0 *proc) {
	select {
	case <-p0.statusReady:
	case <-p0.exited:
		return
	}
	p0.mu.Lock()
	addr := p0.statusAddr
	p0.mu.Unlock()
	log.Info().Str("url", "http://"+addr+"/").Msg("dashboard: watch the run live in a browser")
}

// collect lets the launcher bring back what each peer left where it ran,
// from every host at once.
func (r *runner) collect() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range r.procs {
		wg.Go(func() {
			if err := r.l.Collect(ctx, p.i); err != nil {
				r.cfg.Log.Warn().Int("peer", p.i).Str("host", p.where).Err(err).Msg("collecting the peer's files")
			}
		})
	}
	wg.Wait()
}

// peerError builds the error of a failed peer.
func (r *runner) peerError(p *proc, why string) error {
	<-p.exited
	p.mu.Lock()
	defer p.mu.Unlock()
	exit := exitString(p)
	if why != "" {
		exit = why + " (" + exit + ")"
	}
	e := &PeerError{Index: p.i, PeerID: p.peerID, Exit: exit, Log: p.logPath, Host: p.where}
	for _, l := range p.tail {
		e.Tail = append(e.Tail, readable(l))
	}
	return e
}

func exitString(p *proc) string {
	if p.state != nil {
		return p.state.String()
	}
	if p.waitErr != nil {
		return p.waitErr.Error()
	}
	return "unknown"
}

// reportProgress sends one progress report to OnProgress or the log.
func (r *runner) reportProgress() {
	ps := make([]PeerProgress, len(r.procs))
	for i, p := range r.procs {
		ps[i] = p.progress()
	}
	if r.cfg.OnProgress != nil {
		r.cfg.OnProgress(ps)
		return
	}
	r.cfg.Log.Info().Msg(ProgressLine(ps))
}

// ProgressLine formats a progress report as one line:
// "4 peers 283.1k ex/s | 0 r125 71.2k/s | 1 r125 70.9k/s | 2 waiting | …".
func ProgressLine(ps []PeerProgress) string {
	var total float64
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(" | ")
		b.WriteString(strconv.Itoa(p.Index))
		switch {
		case p.State == StateTraining && p.Round >= 0:
			fmt.Fprintf(&b, " r%d %s/s", p.Round, formatRate(p.ExamplesPerSec))
			total += p.ExamplesPerSec
		case p.State == StateTraining && p.Done != "":
			fmt.Fprintf(&b, " alone %s %s/s", p.Done, formatRate(p.ExamplesPerSec))
			total += p.ExamplesPerSec
		default:
			b.WriteString(" " + p.State)
			if p.Round >= 0 {
				fmt.Fprintf(&b, " r%d", p.Round)
			}
		}
	}
	return fmt.Sprintf("%d peers %s ex/s%s", len(ps), formatRate(total), b.String())
}

// results lists every peer started.
func (r *runner) results() []PeerResult {
	out := make([]PeerResult, 0, len(r.procs))
	for _, p := range r.procs {
		<-p.exited
		p.mu.Lock()
		pr := PeerResult{
			Index: p.i, Host: p.where, PeerID: p.peerID, Report: p.reportPath, Log: p.logPath,
			Addr: p.addr, StatusAddr: p.statusAddr, MetricsAddr: p.metricsAddr,
			Exit: exitString(p), ExitCode: -1, Duration: p.dur,
		}
		if p.cmd.Process != nil {
			pr.Pid = p.cmd.Process.Pid
		}
		if p.state != nil {
			pr.ExitCode = p.state.ExitCode()
			if ru, ok := p.state.SysUsage().(*syscall.Rusage); ok && p.where == "" {
				pr.PeakRSS = ru.Maxrss << 10 // (KiB on Linux)
			}
		}
		p.mu.Unlock()
		out = append(out, pr)
	}
	return out
}

// windowArgs resolves --local-steps auto for a job of peers workers, which
// a peer alone cannot know (train.AutoLocalSteps): the flag that gives
// args' peers the window their count suits where it differs from what
// train's auto picks; none where args set a window, a --gather that
// exchanges every batch, a --combine of the user's (other than sum in
// sync), the mlp (whose windows were measured apart: capped, the sums at
// the workers) or a mode train does not know (train names the flag).
// TestAutoLocalSteps.
func windowArgs(args []string, peers int) []string {
	if v, ok := argValue(args, "local-steps"); ok && v != "auto" {
		return nil
	}
	if v, ok := argValue(args, "gather"); ok && v != "need" {
		return nil
	}
	mode := train.Sync
	if v, ok := argValue(args, "mode"); ok {
		var err error
		if mode, err = train.ParseMode(v); err != nil {
			return nil
		}
	}
	if v, ok := argValue(args, "combine"); ok && v != "auto" && (mode != train.Sync || v != "sum") {
		return nil // (a combine the user chose for windows; trimmed exchanges every batch)
	}
	if v, _ := argValue(args, "model"); v == "mlp" {
		return nil // (measured with its own settings: docs/distributed.md)
	}
	if h := train.AutoLocalSteps(mode, peers); h != train.AutoLocalSteps(mode, 0) {
		return []string{"--local-steps", strconv.Itoa(h)}
	}
	return nil
}

// argValue is the value of flag name in args (--name=value, or --name
// value; the last one given), and whether args give it.
func argValue(args []string, name string) (string, bool) {
	v, ok := "", false
	for i, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		n, val, eq := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if n != name {
			continue
		}
		switch {
		case eq:
			v, ok = val, true
		case i+1 < len(args):
			v, ok = args[i+1], true
		}
	}
	return v, ok
}
