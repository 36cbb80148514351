package metrics

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The dashboard: a page every peer serves at the root of its status
// server (http://HOST:PORT/), live in a browser. It shows the members and
// their state, the ring (which member owns which shard), each member's
// examples/s, CPU, memory, network in and out and barrier wait, the test
// metrics against examples and time as evaluations arrive, rounds,
// repairs, rejections, and the run's events (joins, leaves, crashes,
// configurations).
//
// The page (web/, embedded: it works offline, no CDN) polls
// /dashboard.json every second. A peer knows its own figures; those of the
// other members it asks them for (Dashboard.SetFetch: the node asks over
// a libp2p stream, so the browser needs to reach one peer only).
//
// The training side feeds a Dashboard from the hooks it already has, and
// the node from its membership:
//
//	d := n.Dashboard()                         // nil without a status server: every method is a no-op
//	d.SetInfo(metrics.Info{Mode: "sync", …})
//	hooks.Round = func(p) { d.Round(metrics.RoundFigures{…}) }
//	hooks.Eval = func(e) { d.Eval(metrics.EvalFigures{…}) }
//	hooks.Change = func(c) { d.Configuration(metrics.ConfigFigures{…}) }
//	d.Totals(…); d.Finished(…)

//go:embed web
var webFS embed.FS

// Peer states on the dashboard.
const (
	PeerWaiting  = "waiting"  // formed the cluster, not yet training
	PeerTraining = "training" // completed a round
	PeerDone     = "done"     // finished the run
	PeerLeft     = "left"     // left the job (seen by another peer)
	PeerCrashed  = "crashed"  // declared dead (seen by another peer)
	PeerNoAnswer = "no answer"
)

// Link kinds between this peer and another (PeerFigures.Link).
const (
	LinkSelf        = "self"
	LinkDirect      = "direct"       // a direct connection
	LinkHolePunched = "hole-punched" // direct, after hole punching (DCUtR)
	LinkRelayed     = "relayed"      // through a circuit relay
	LinkNone        = "none"         // not connected now
)

// PeerFigures are one peer's live figures: what it answers when another
// member's dashboard asks, and a row of the members table.
type PeerFigures struct {
	PeerID         string            `json:"peer_id"`
	State          string            `json:"state"`
	Link           string            `json:"link,omitempty"` // as the serving peer sees it: self, direct, hole-punched, relayed, none
	Rounds         int64             `json:"rounds"`
	Examples       int64             `json:"examples"`
	ExamplesPerSec float64           `json:"examples_per_sec"`
	CPUPercent     float64           `json:"cpu_percent"` // 100 = one core
	RSSBytes       int64             `json:"rss_bytes"`
	SentBytes      int64             `json:"sent_bytes"`
	RecvBytes      int64             `json:"recv_bytes"`
	SentPerSec     float64           `json:"sent_bytes_per_sec"`
	RecvPerSec     float64           `json:"recv_bytes_per_sec"`
	WaitSeconds    float64           `json:"wait_seconds"` // at barriers, in all
	WaitShare      float64           `json:"wait_share"`   // of the last interval's time, 0..1
	Staleness      int64             `json:"staleness"`
	OwnedShards    int               `json:"owned_shards"`
	Config         uint64            `json:"config"` // training configuration
	Repaired       uint64            `json:"repaired"`
	PubsubDropped  uint64            `json:"pubsub_dropped"`
	Rejected       map[string]uint64 `json:"rejected,omitempty"`
	Uptime         float64           `json:"uptime_seconds"`
	Error          string            `json:"error,omitempty"` // why its figures are missing
}

// EvalPoint is one evaluation on the dashboard's curves.
type EvalPoint struct {
	Seq      int64    `json:"seq"`
	Examples int64    `json:"examples"` // this peer's training examples before it
	Seconds  float64  `json:"seconds"`  // since the run started
	LogLoss  float64  `json:"logloss"`
	Error    float64  `json:"error"`
	AUC      *float64 `json:"auc"` // null for a multiclass model
}

// Event is one line of the run's events.
type Event struct {
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	Kind string    `json:"kind"` // join, leave, crash, restart, config, start, done, …
	Text string    `json:"text"`
}

// ConfigFigures describe a training configuration taking effect here.
type ConfigFigures struct {
	Config                uint64
	Start                 uint64 // its first round
	Members               []string
	Joined, Left, Crashed []string
	Owned                 int // shards this peer is primary of in it
}

// MembershipFigures are the node's membership view and ring.
type MembershipFigures struct {
	Epoch   uint64
	Agreed  bool
	Members []string // sorted peer IDs, self included
	// Ring is the primary owner of every shard, by shard (nil before the
	// first view).
	Ring []string
	// What changed in this step.
	Joined, Left, Died, Restarted []string
}

// Dashboard holds a peer's live figures for its page. A nil *Dashboard
// accepts every call and does nothing. All methods are safe for
// concurrent use.
type Dashboard struct {
	mu      sync.Mutex
	start   time.Time
	info    Info
	state   string
	self    PeerFigures
	prev    sample // the previous rate sample
	evals   []EvalPoint
	events  []Event
	evSeq   int64
	mem     MembershipFigures
	gone    map[string]string // peers that left or crashed: their state
	fetch   func(context.Context, string) (PeerFigures, error)
	link    func(string) string
	cache   map[string]PeerFigures
	fetched time.Time
	fetchMu sync.Mutex // one refresh at a time
}

// maxEvents and maxEvals bound what a dashboard keeps.
const (
	maxEvents = 1000
	maxEvals  = 20000
)

// sample is a point for rates.
type sample struct {
	t                  time.Time
	examples, sent, rx int64
	wait               float64
	cpu                time.Duration
}

// NewDashboard returns an empty dashboard of peer info.PeerID.
func NewDashboard(info Info) *Dashboard {
	d := &Dashboard{start: time.Now(), info: info, state: PeerWaiting, gone: map[string]string{}, cache: map[string]PeerFigures{}}
	d.self.PeerID = info.PeerID
	d.prev = sample{t: d.start, cpu: processCPU()}
	d.event("start", "peer "+short(info.PeerID)+" started")
	return d
}

// SetInfo sets the run's description (the fields left empty keep their
// value).
func (d *Dashboard) SetInfo(i Info) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range []struct {
		dst *string
		v   string
	}{
		{&d.info.PeerID, i.PeerID}, {&d.info.Job, i.Job}, {&d.info.Topology, i.Topology},
		{&d.info.Mode, i.Mode}, {&d.info.Version, i.Version},
	} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
	d.self.PeerID = d.info.PeerID
}

// SetFetch sets how the dashboard asks another member for its figures.
func (d *Dashboard) SetFetch(f func(ctx context.Context, peerID string) (PeerFigures, error)) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.fetch = f
	d.mu.Unlock()
}

// SetLink sets how the dashboard learns the kind of link to a member
// (LinkDirect, LinkRelayed, …).
func (d *Dashboard) SetLink(f func(peerID string) string) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.link = f
	d.mu.Unlock()
}

// Round records a completed round (totals since the start, as Metrics.Round).
func (d *Dashboard) Round(f RoundFigures) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == PeerWaiting {
		d.state = PeerTraining
	}
	s := &d.self
	s.Rounds, s.Examples, s.Staleness = f.Rounds, f.Examples, f.Staleness
	s.SentBytes, s.RecvBytes = f.BytesSent, f.BytesRecv
	if f.WaitSeconds > 0 {
		s.WaitSeconds += f.WaitSeconds
	}
}

// Eval records an evaluation on the test set.
func (d *Dashboard) Eval(e EvalFigures) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p := EvalPoint{Seq: int64(len(d.evals)) + 1, Examples: e.Examples, Seconds: e.Seconds, LogLoss: finite(e.LogLoss), Error: finite(e.Error)}
	if !math.IsNaN(e.AUC) && !math.IsInf(e.AUC, 0) {
		auc := e.AUC
		p.AUC = &auc
	}
	if len(d.evals) >= maxEvals {
		return // a curve of 20000 points says what it has to
	}
	d.evals = append(d.evals, p)
}

// Totals records the message layer's counters.
func (d *Dashboard) Totals(t Totals) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.self.Repaired, d.self.PubsubDropped = t.Repaired, t.PubsubDropped
	if len(t.Rejected) > 0 {
		d.self.Rejected = make(map[string]uint64, len(t.Rejected))
		for k, v := range t.Rejected {
			d.self.Rejected[k] = v
		}
	}
}

// Configuration records a training configuration taking effect here.
func (d *Dashboard) Configuration(c ConfigFigures) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.self.Config, d.self.OwnedShards = c.Config, c.Owned
	text := "configuration " + strconv.FormatUint(c.Config, 10) + " from round " + strconv.FormatUint(c.Start, 10) +
		": " + strconv.Itoa(len(c.Members)) + " workers"
	for _, part := range []struct {
		what string
		ids  []string
	}{{"joined", c.Joined}, {"left", c.Left}, {"crashed", c.Crashed}} {
		if len(part.ids) > 0 {
			text += "; " + part.what + " " + shortList(part.ids)
		}
	}
	d.event("config", text)
}

// Membership records the node's view: members, agreement, the ring, and
// the members that joined, left, died or restarted in this step.
func (d *Dashboard) Membership(m MembershipFigures) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mem = m
	d.mem.Members = slices.Clone(m.Members)
	d.mem.Ring = slices.Clone(m.Ring)
	for _, ev := range []struct {
		kind, text, state string
		ids               []string
	}{
		{"join", "joined", "", m.Joined},
		{"leave", "left", PeerLeft, m.Left},
		{"crash", "crashed (no heartbeat)", PeerCrashed, m.Died},
		{"restart", "restarted", "", m.Restarted},
	} {
		for _, id := range ev.ids {
			if id == d.info.PeerID && ev.kind == "join" {
				continue
			}
			d.event(ev.kind, "peer "+short(id)+" "+ev.text+" (membership epoch "+strconv.FormatUint(m.Epoch, 10)+")")
			if ev.state != "" {
				d.gone[id] = ev.state
			} else {
				delete(d.gone, id)
			}
		}
	}
}

// Finished records the end of the run.
func (d *Dashboard) Finished(s SummaryFigures) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.self.Rounds, d.self.Examples = s.Rounds, s.Examples
	d.self.SentBytes, d.self.RecvBytes = s.BytesSent, s.BytesRecv
	d.state = PeerDone
	d.event("done", "peer "+short(d.info.PeerID)+" finished: "+strconv.FormatInt(s.Examples, 10)+" examples in "+
		strconv.FormatInt(s.Rounds, 10)+" rounds")
}

// Event adds a line to the run's events.
func (d *Dashboard) Event(kind, text string) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.event(kind, text)
	d.mu.Unlock()
}

func (d *Dashboard) event(kind, text string) {
	d.evSeq++
	if len(d.events) >= maxEvents {
		d.events = append(d.events[:0], d.events[len(d.events)-maxEvents/2:]...)
	}
	d.events = append(d.events, Event{Seq: d.evSeq, Time: time.Now(), Kind: kind, Text: text})
}

// Self returns this peer's figures now, its rates over the last second or
// more.
func (d *Dashboard) Self() PeerFigures {
	if d == nil {
		return PeerFigures{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.selfLocked()
}

func (d *Dashboard) selfLocked() PeerFigures {
	now := time.Now()
	s := &d.self
	if dt := now.Sub(d.prev.t).Seconds(); dt >= 0.9 {
		cpu := processCPU()
		s.ExamplesPerSec = float64(s.Examples-d.prev.examples) / dt
		s.SentPerSec = float64(s.SentBytes-d.prev.sent) / dt
		s.RecvPerSec = float64(s.RecvBytes-d.prev.rx) / dt
		s.WaitShare = min(max((s.WaitSeconds-d.prev.wait)/dt, 0), 1)
		s.CPUPercent = 100 * (cpu - d.prev.cpu).Seconds() / dt
		s.RSSBytes = processRSS()
		d.prev = sample{t: now, examples: s.Examples, sent: s.SentBytes, rx: s.RecvBytes, wait: s.WaitSeconds, cpu: cpu}
	}
	out := *s
	out.State = d.state
	out.Uptime = now.Sub(d.start).Seconds()
	out.Link = LinkSelf
	if s.Rejected != nil {
		out.Rejected = make(map[string]uint64, len(s.Rejected))
		for k, v := range s.Rejected {
			out.Rejected[k] = v
		}
	}
	return out
}

// View is what /dashboard.json returns.
type View struct {
	PeerID   string        `json:"peer_id"`
	Job      string        `json:"job"`
	Topology string        `json:"topology"`
	Mode     string        `json:"mode"`
	Version  string        `json:"version"`
	Uptime   float64       `json:"uptime_seconds"`
	Time     time.Time     `json:"time"`
	Epoch    uint64        `json:"epoch"`
	Agreed   bool          `json:"agreed"`
	Members  []string      `json:"members"` // the current view, sorted
	Ring     []int         `json:"ring"`    // by shard: the owner's index in Members (-1: none)
	Peers    []PeerFigures `json:"peers"`   // members first (sorted), then peers that left or crashed
	Evals    []EvalPoint   `json:"evals"`   // after ?evals=SEQ
	Events   []Event       `json:"events"`  // after ?events=SEQ
}

// view builds the JSON view; others are the members' fetched figures.
func (d *Dashboard) view(evalsAfter, eventsAfter int64, others map[string]PeerFigures) View {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	v := View{
		PeerID: d.info.PeerID, Job: d.info.Job, Topology: d.info.Topology, Mode: d.info.Mode, Version: d.info.Version,
		Uptime: now.Sub(d.start).Seconds(), Time: now, Epoch: d.mem.Epoch, Agreed: d.mem.Agreed,
		Members: slices.Clone(d.mem.Members), Ring: make([]int, len(d.mem.Ring)),
		Peers: []PeerFigures{}, Evals: []EvalPoint{}, Events: []Event{},
	}
	if len(v.Members) == 0 {
		v.Members = []string{d.info.PeerID}
	}
	for s, owner := range d.mem.Ring {
		v.Ring[s] = slices.Index(v.Members, owner)
	}
	for _, id := range v.Members {
		var p PeerFigures
		if id == d.info.PeerID {
			p = d.selfLocked()
		} else if f, ok := others[id]; ok {
			p = f
		} else {
			p = PeerFigures{PeerID: id, State: PeerNoAnswer}
		}
		if id != d.info.PeerID && d.link != nil {
			p.Link = d.link(id)
		}
		v.Peers = append(v.Peers, p)
	}
	gone := make([]string, 0, len(d.gone))
	for id := range d.gone {
		if !slices.Contains(v.Members, id) {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		v.Peers = append(v.Peers, PeerFigures{PeerID: id, State: d.gone[id]})
	}
	if i := int(min(max(evalsAfter, 0), int64(len(d.evals)))); i < len(d.evals) {
		v.Evals = append(v.Evals, d.evals[i:]...)
	}
	for _, e := range d.events {
		if e.Seq > eventsAfter {
			v.Events = append(v.Events, e)
		}
	}
	return v
}

// others returns the other members' figures, fetched again when the last
// fetch is older than a second (one fetch at a time; every member at
// once, each within 2 s).
func (d *Dashboard) others(ctx context.Context) map[string]PeerFigures {
	d.fetchMu.Lock()
	defer d.fetchMu.Unlock()
	d.mu.Lock()
	fetch, members, self := d.fetch, slices.Clone(d.mem.Members), d.info.PeerID
	fresh := time.Since(d.fetched) < 900*time.Millisecond
	cache := d.cache
	d.mu.Unlock()
	if fetch == nil || fresh {
		return cache
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	got := make(map[string]PeerFigures, len(members))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range members {
		if id == self {
			continue
		}
		wg.Go(func() {
			f, err := fetch(ctx, id)
			if err != nil {
				f = cache[id] // the last figures, marked
				f.PeerID, f.State, f.Error = id, PeerNoAnswer, err.Error()
			}
			mu.Lock()
			got[id] = f
			mu.Unlock()
		})
	}
	wg.Wait()
	d.mu.Lock()
	d.cache, d.fetched = got, time.Now()
	d.mu.Unlock()
	return got
}

// Handler serves the page (/), its assets and its feed
// (/dashboard.json?evals=SEQ&events=SEQ: only the evaluations and events
// after those sequence numbers). A nil Dashboard serves a page that says
// the peer has none.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	web, _ := fs.Sub(webFS, "web")
	files := http.FileServerFS(web)
	mux.Handle("GET /{$}", files)
	mux.Handle("GET /app.js", files)
	mux.Handle("GET /style.css", files)
	mux.HandleFunc("GET /dashboard.json", func(w http.ResponseWriter, r *http.Request) {
		if d == nil {
			http.Error(w, "this peer has no dashboard", http.StatusNotFound)
			return
		}
		q := r.URL.Query()
		ev, _ := strconv.ParseInt(q.Get("evals"), 10, 64)
		en, _ := strconv.ParseInt(q.Get("events"), 10, 64)
		v := d.view(ev, en, d.others(r.Context()))
		var b bytes.Buffer
		if err := json.NewEncoder(&b).Encode(v); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(b.Bytes())
	})
	return mux
}

// finite turns NaN and ±Inf into 0 (JSON has no NaN).
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

func short(id string) string {
	if len(id) > 12 {
		return "…" + id[len(id)-8:]
	}
	return id
}

func shortList(ids []string) string {
	var b bytes.Buffer
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(short(id))
	}
	return b.String()
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// processCPU is the user and system CPU time of this process
// (/proc/self/stat; 0 where there is no /proc).
func processCPU() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')') // the command name may hold spaces
	if i < 0 {
		return 0
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(string(f[11]), 10, 64)
	st, _ := strconv.ParseInt(string(f[12]), 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// processRSS is the resident set size (/proc/self/statm; 0 without).
func processRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(string(f[1]), 10, 64)
	return pages * int64(os.Getpagesize())
}
