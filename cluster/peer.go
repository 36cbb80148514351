package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gossiptrain/gossiptrain/human"
	"github.com/gossiptrain/gossiptrain/peerlog"
)

// Peer states in PeerProgress.State.
const (
	StateStarting = "starting" // started, not yet waiting for the others
	StateWaiting  = "waiting"  // waiting for the cluster to form
	StateTraining = "training" // the members agreed: it trains
	StateDone     = "done"     // logged its final line
	StateExited   = "exited"   // exited with status 0
	StateFailed   = "failed"   // exited with an error or a signal
)

// PeerProgress is one peer's progress in a progress report.
type PeerProgress struct {
	Index          int
	PeerID         string  // "" until the peer has logged it
	State          string  // StateStarting … StateFailed
	Round          int64   // the last round in its report; -1 before the first
	Examples       int64   // training examples so far (from its report)
	ExamplesPerSec float64 // since the previous progress report (its own clock)
	Done           string  // a standalone train's share done ("41%"), from its log
}

// proc is one running peer process.
type proc struct {
	i          int
	where      string // the host it runs on ("" here)
	cmd        *exec.Cmd
	stop       func(syscall.Signal) // the launcher's way to stop it; nil: signal cmd's process
	logPath    string
	reportPath string
	addrPrefix string // the start of the dialable address Run looks for
	started    time.Time
	exited     chan struct{} // closed once the process is reaped and its log read

	// Set before exited is closed.
	state   *os.ProcessState
	waitErr error
	dur     time.Duration

	addrReady   chan struct{} // closed when addr is known
	statusReady chan struct{} // closed when statusAddr is known

	mu          sync.Mutex
	peerID      string
	addr        string
	statusAddr  string
	metricsAddr string
	phase       string
	tail        []string // the last lines of the log, at most tailMax
	tailMax     int
	// From the report file, for rates.
	round     int64
	examples  int64
	seconds   float64
	rate      float64
	aloneDone string // a standalone train's last "done" (its progress lines)
}

// logLine is the part of a peer's JSON log line that Run reads.
type logLine struct {
	Level   string   `json:"level"`
	Message string   `json:"message"`
	Addr    string   `json:"addr"`
	PeerID  string   `json:"peer_id"`
	Addrs   []string `json:"addrs"`
	// A standalone train's progress line ("training", with done and
	// examples_per_sec as people read them): a baseline writes no round
	// lines to follow.
	Done           string `json:"done"`
	ExamplesPerSec string `json:"examples_per_sec"`
}

// readLog copies the peer's output to its log file, keeps its tail and
// follows its JSON lines.
func (p *proc) readLog(r io.Reader, w io.Writer) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			w.Write(line)
			p.observe(line)
		}
		if err != nil {
			return
		}
	}
}

// observe takes in one line of the peer's output.
func (p *proc) observe(line []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tailMax > 0 {
		if len(p.tail) == p.tailMax {
			copy(p.tail, p.tail[1:])
			p.tail = p.tail[:p.tailMax-1]
		}
		p.tail = append(p.tail, string(bytes.TrimRight(line, "\r\n")))
	}
	if len(line) == 0 || line[0] != '{' {
		return
	}
	var l logLine
	if json.Unmarshal(line, &l) != nil {
		return
	}
	switch l.Message {
	case peerlog.Listening:
		if p.addr == "" && strings.HasPrefix(l.Addr, p.addrPrefix) {
			p.addr = l.Addr
			close(p.addrReady)
		}
	case peerlog.Started:
		p.peerID = l.PeerID
	case peerlog.StatusListening:
		if p.statusAddr == "" {
			p.statusAddr = l.Addr
			close(p.statusReady)
		}
	case peerlog.MetricsListening:
		p.metricsAddr = l.Addr
	case peerlog.Waiting:
		p.phase = StateWaiting
	case peerlog.Training:
		p.phase = StateTraining
	case peerlog.Done:
		p.phase = StateDone
	case aloneProgress:
		if l.Done != "" {
			p.phase, p.aloneDone = StateTraining, l.Done
			if r, ok := human.ParseCount(l.ExamplesPerSec); ok {
				p.rate = r
			}
		}
	}
}

// aloneProgress is the message of a standalone train's progress lines
// (job.RunAlone), which a baseline's progress follows (TestBaselineProgress).
const aloneProgress = "training"

// progress returns the peer's progress, reading the last round line of its
// report.
func (p *proc) progress() PeerProgress {
	rd, ok := lastRound(p.reportPath)
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok && rd.Seconds > p.seconds {
		if p.seconds > 0 || p.examples > 0 {
			p.rate = float64(rd.Examples-p.examples) / (rd.Seconds - p.seconds)
		} else if rd.Seconds > 0 {
			p.rate = float64(rd.Examples) / rd.Seconds
		}
		p.round, p.examples, p.seconds = rd.Clock, rd.Examples, rd.Seconds
	}
	state := p.phase
	select {
	case <-p.exited:
		state = StateExited
		if !p.succeeded() {
			state = StateFailed
		}
	default:
	}
	return PeerProgress{Index: p.i, PeerID: p.peerID, State: state, Round: p.round, Examples: p.examples, ExamplesPerSec: p.rate, Done: p.aloneDone}
}

// succeeded reports whether the exited process returned status 0.
func (p *proc) succeeded() bool {
	return p.waitErr == nil && p.state != nil && p.state.Success()
}

// signal sends sig to the process if it still runs.
func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	if p.stop != nil {
		p.stop(sig)
		return
	}
	p.cmd.Process.Signal(sig)
}

// roundLine is the part of a report's round line progress needs.
type roundLine struct {
	Type     string  `json:"type"`
	Clock    int64   `json:"clock"`
	Examples int64   `json:"examples"`
	Seconds  float64 `json:"seconds"`
}

// lastRound returns the last round line of a report file that is being
// written, reading only its end.
func lastRound(path string) (roundLine, bool) {
	f, err := os.Open(path)
	if err != nil {
		return roundLine{}, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return roundLine{}, false
	}
	const window = 16 << 10
	off := max(st.Size()-window, 0)
	buf := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(buf, off)
	buf = buf[:n]
	// Whole lines only: drop a partial last line, and a first line cut by
	// the window.
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		buf = buf[:i]
	} else {
		return roundLine{}, false
	}
	lines := bytes.Split(buf, []byte("\n"))
	if off > 0 && len(lines) > 0 {
		lines = lines[1:]
	}
	for j := len(lines) - 1; j >= 0; j-- {
		if !bytes.Contains(lines[j], []byte(`"type":"round"`)) {
			continue
		}
		var r roundLine
		if json.Unmarshal(lines[j], &r) == nil && r.Type == "round" {
			return r, true
		}
	}
	return roundLine{}, false
}

// PeerError is the error of a run in which a peer failed: it names the
// peer and shows the end of its log.
type PeerError struct {
	Index  int      // the peer, 0-based
	Host   string   // the host it ran on ("" for this machine)
	PeerID string   // its libp2p ID, when it got as far as logging it
	Exit   string   // how it ended: "exit status 1", "signal: killed"
	Log    string   // its log file
	Tail   []string // the last lines of its log, made readable
}

// Error implements error.
func (e *PeerError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cluster: peer %d", e.Index)
	if e.Host != "" {
		fmt.Fprintf(&b, " on %s", e.Host)
	}
	if e.PeerID != "" {
		fmt.Fprintf(&b, " (%s)", e.PeerID)
	}
	fmt.Fprintf(&b, " failed: %s", e.Exit)
	if len(e.Tail) > 0 {
		fmt.Fprintf(&b, "; the end of its log %s:", e.Log)
		for _, l := range e.Tail {
			b.WriteString("\n    ")
			b.WriteString(l)
		}
	} else {
		fmt.Fprintf(&b, " (its log %s is empty)", e.Log)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrPeerFailed) true.
func (e *PeerError) Unwrap() error { return ErrPeerFailed }

// readable renders a zerolog JSON line as "15:04:05 ERR message k=v …";
// other lines are returned as they are.
func readable(line string) string {
	if !strings.HasPrefix(line, "{") {
		return line
	}
	var m map[string]any
	if json.Unmarshal([]byte(line), &m) != nil {
		return line
	}
	var b strings.Builder
	if t, ok := m["time"].(string); ok {
		if ts, err := time.Parse(time.RFC3339Nano, t); err == nil {
			b.WriteString(ts.Format("15:04:05 "))
		}
	}
	if l, ok := m["level"].(string); ok {
		b.WriteString(strings.ToUpper(l))
		b.WriteByte(' ')
	}
	if msg, ok := m["message"].(string); ok {
		b.WriteString(msg)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != "time" && k != "level" && k != "message" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if _, ok := m["error"]; ok { // the error first: it is what a reader looks for
		keys = append([]string{"error"}, deleteString(keys, "error")...)
	}
	for _, k := range keys {
		v, _ := json.Marshal(m[k])
		s := string(v)
		if str, ok := m[k].(string); ok && !strings.ContainsAny(str, " \t\"") {
			s = str
		}
		b.WriteString(" " + k + "=" + s)
	}
	return b.String()
}

func deleteString(s []string, x string) []string {
	out := s[:0]
	for _, v := range s {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}

// formatRate formats examples/s compactly for the progress line.
func formatRate(r float64) string {
	switch {
	case r >= 1e6:
		return strconv.FormatFloat(r/1e6, 'f', 2, 64) + "M"
	case r >= 1e3:
		return strconv.FormatFloat(r/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(r, 'f', 0, 64)
}
