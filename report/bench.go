package report

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ErrConfig marks a report whose configuration (topology, mode, batch)
// cannot be told, or a set of reports that cannot be grouped.
var ErrConfig = errors.New("cannot group reports")

// Config is one configuration: a training run of one or more peers with the
// same topology, mode and batch, one report per peer.
type Config struct {
	Name       string // "ring/sync/b100": topology/mode/b<batch>, then /h<local steps> with windows
	Topology   string // "single", "master" or "ring"
	Mode       string // "local", "sync", "ssp" or "async"
	Batch      int    // examples per worker step
	LocalSteps int    // batches in a window of local steps (0 and 1: a gradient every batch)
	// Run names the run the peers belong to (runOf): their job and, when
	// it is not one run, directory; a lone train's report file.
	Run   string
	Peers []*Run // ordered by peer ID, then file path
}

// shortRunNames shortens run names (runOf's) to their last path
// elements, as few as keep them apart: /tmp/x/run1 and /tmp/x/run2 are
// run1 and run2 in a configuration's name.
func shortRunNames(runs []string) []string {
	split := func(r string) (job string, parts []string) {
		if j, path, ok := strings.Cut(r, "@"); ok {
			job = j + "@"
			r = path
		}
		return job, strings.Split(filepath.ToSlash(r), "/")
	}
	out := make([]string, len(runs))
	for k := 1; ; k++ {
		seen, longest := map[string]bool{}, true
		for i, r := range runs {
			job, parts := split(r)
			out[i] = job + strings.Join(parts[max(0, len(parts)-k):], "/")
			longest = longest && k >= len(parts)
			seen[out[i]] = true
		}
		if len(seen) == len(runs) || longest {
			return out
		}
	}
}

// runOf names the run of each report (names: each one's configuration),
// so unrelated runs are not merged into one configuration: a lone train's
// report (single/local, no --job) is a run of its own, named by its file
// (without .jsonl); the peers of a job in one configuration are one run,
// named by the job (reports of older versions, with no job on their start
// line: all one job), unless their reports lie in several directories of
// which one holds two or more of them: a directory is then one run (as
// cluster, bench and launch write them), named job@directory. Reports of
// one run copied one per directory (vm1/peer.jsonl, vm2/peer.jsonl) stay
// one run.
func runOf(runs []*Run, names []string) []string {
	job := func(r *Run) string {
		if r.Start != nil {
			return r.Start.Config["job"]
		}
		return ""
	}
	alone := func(i int) bool { return strings.HasPrefix(names[i], "single/local/") && job(runs[i]) == "" }
	type jobKey struct{ name, job string }
	perDir := map[[3]string]int{}
	dirs := map[jobKey]map[string]bool{}
	for i, r := range runs {
		if k := (jobKey{names[i], job(r)}); !alone(i) {
			d := filepath.Dir(r.Path)
			perDir[[3]string{k.name, k.job, d}]++
			if dirs[k] == nil {
				dirs[k] = map[string]bool{}
			}
			dirs[k][d] = true
		}
	}
	split := map[jobKey]bool{}
	for k, n := range perDir {
		if jk := (jobKey{k[0], k[1]}); n > 1 && len(dirs[jk]) > 1 {
			split[jk] = true
		}
	}
	out := make([]string, len(runs))
	for i, r := range runs {
		switch j := job(r); {
		case alone(i):
			out[i] = strings.TrimSuffix(r.Path, ".jsonl")
		case split[jobKey{names[i], j}]:
			out[i] = j + "@" + filepath.Dir(r.Path)
		default:
			out[i] = j
		}
	}
	return out
}

// ConfigName is the name GroupRuns gives the configuration of a topology,
// mode and batch.
func ConfigName(topology, mode string, batch int) string {
	return fmt.Sprintf("%s/%s/b%d", topology, mode, batch)
}

// windowName is name with the local steps when there are windows.
func windowName(name string, localSteps int) string {
	if localSteps > 1 {
		return fmt.Sprintf("%s/h%d", name, localSteps)
	}
	return name
}

// GroupRuns groups per-peer runs into configurations by (topology, mode,
// batch), read from each run's summary line and, where the summary lacks
// them (a single-peer run, a crashed peer), from its start line's flags.
// A run with neither topology nor mode anywhere is a single-peer local run.
// Reports of different runs are never one configuration, even with the
// same topology, mode and batch (runOf: a job's peers, a lone train's
// file); when a configuration has several runs each gets a row, its name
// followed by its run (TestGroupRunsKeepsRunsApart).
//
// The order is stable and independent of the input order: topologies
// single, master, ring (then others by name), modes local, sync, ssp, async,
// then batch ascending; peers within a configuration by peer ID, then path.
// It fails (ErrConfig) when a run's batch cannot be told, or when one peer
// ID appears twice in a configuration (the same file given twice, or two
// runs of one configuration mixed).
func GroupRuns(runs []*Run) ([]*Config, error) {
	type key struct{ name, run string }
	byKey := map[key]*Config{}
	runsOf := map[string][]string{} // configuration name -> its runs, in order
	var cfgs []*Config
	names := make([]string, len(runs))
	for i, r := range runs {
		topo, mode, batch, err := runKey(r)
		if err != nil {
			return nil, err
		}
		names[i] = windowName(ConfigName(topo, mode, batch), runLocalSteps(r))
	}
	ofRun := runOf(runs, names)
	for i, r := range runs {
		topo, mode, batch, _ := runKey(r)
		h := runLocalSteps(r)
		name := names[i]
		k := key{name, ofRun[i]}
		c := byKey[k]
		if c == nil {
			c = &Config{Name: name, Topology: topo, Mode: mode, Batch: batch, LocalSteps: h, Run: k.run}
			byKey[k] = c
			runsOf[name] = append(runsOf[name], k.run)
			cfgs = append(cfgs, c)
		}
		c.Peers = append(c.Peers, r)
	}
	short := map[string]string{}
	for _, rs := range runsOf {
		if len(rs) > 1 {
			for i, l := range shortRunNames(rs) {
				short[rs[i]] = l
			}
		}
	}
	for _, c := range cfgs {
		if len(runsOf[c.Name]) > 1 {
			c.Name += " (" + short[c.Run] + ")"
		}
	}
	for _, c := range cfgs {
		sort.SliceStable(c.Peers, func(i, j int) bool {
			a, b := runPeerID(c.Peers[i]), runPeerID(c.Peers[j])
			if a != b {
				return a < b
			}
			return c.Peers[i].Path < c.Peers[j].Path
		})
		for i := 1; i < len(c.Peers); i++ {
			id := runPeerID(c.Peers[i])
			if id != "" && id == runPeerID(c.Peers[i-1]) {
				return nil, fmt.Errorf("report: %w: peer %s appears twice in %s, in %s and %s: "+
					"give each peer's report once, and one run per configuration",
					ErrConfig, id, c.Name, c.Peers[i-1].Path, c.Peers[i].Path)
			}
		}
	}
	sort.SliceStable(cfgs, func(i, j int) bool { return configLess(cfgs[i], cfgs[j]) })
	return cfgs, nil
}

var (
	topologyRank = map[string]int{"single": 0, "master": 1, "ring": 2}
	modeRank     = map[string]int{"local": 0, "sync": 1, "ssp": 2, "async": 3}
)

func rank(m map[string]int, s string) int {
	if r, ok := m[s]; ok {
		return r
	}
	return len(m)
}

func configLess(a, b *Config) bool {
	if ra, rb := rank(topologyRank, a.Topology), rank(topologyRank, b.Topology); ra != rb {
		return ra < rb
	}
	if a.Topology != b.Topology {
		return a.Topology < b.Topology
	}
	if ra, rb := rank(modeRank, a.Mode), rank(modeRank, b.Mode); ra != rb {
		return ra < rb
	}
	if a.Mode != b.Mode {
		return a.Mode < b.Mode
	}
	if a.Batch != b.Batch {
		return a.Batch < b.Batch
	}
	return max(1, a.LocalSteps) < max(1, b.LocalSteps)
}

// runLocalSteps is a run's batches per window of local steps: its
// summary's, else its start line's --local-steps (1 when neither says).
func runLocalSteps(r *Run) int {
	if r.Summary != nil && r.Summary.LocalSteps > 0 {
		return r.Summary.LocalSteps
	}
	if r.Start != nil {
		if v, err := strconv.Atoi(r.Start.Config["local-steps"]); err == nil && v > 0 {
			return v
		}
	}
	return 1
}

// runKey tells a run's configuration: summary first, start-line flags next.
func runKey(r *Run) (topology, mode string, batch int, err error) {
	var flags map[string]string
	if r.Start != nil {
		flags = r.Start.Config
	}
	if r.Summary == nil && r.Start == nil {
		return "", "", 0, fmt.Errorf("report: %w: %s has neither a start nor a summary line, "+
			"so its topology, mode and batch are unknown", ErrConfig, r.Path)
	}
	if s := r.Summary; s != nil {
		topology, mode, batch = s.Topology, s.Mode, s.Batch
	}
	if topology == "" {
		topology = flags["topology"]
	}
	if mode == "" {
		mode = flags["mode"]
	}
	if topology == "" && mode == "" {
		topology, mode = "single", "local"
	}
	if topology == "" || mode == "" {
		return "", "", 0, fmt.Errorf("report: %w: %s: topology %q, mode %q: the summary line and the "+
			"start line's flags do not say both", ErrConfig, r.Path, topology, mode)
	}
	if batch == 0 {
		v, ok := flags["batch"]
		if !ok {
			return "", "", 0, fmt.Errorf("report: %w: %s: no batch in the summary line nor a batch flag "+
				"in the start line", ErrConfig, r.Path)
		}
		batch, err = strconv.Atoi(v)
		if err != nil || batch < 1 {
			return "", "", 0, fmt.Errorf("report: %w: %s: start line flag batch=%q is not a positive integer",
				ErrConfig, r.Path, v)
		}
	}
	return topology, mode, batch, nil
}

// runPeerID is the peer ID a run names anywhere, or "".
func runPeerID(r *Run) string {
	switch {
	case r.Summary != nil && r.Summary.PeerID != "":
		return r.Summary.PeerID
	case r.Start != nil && r.Start.PeerID != "":
		return r.Start.PeerID
	}
	for _, e := range r.Evals {
		if e.PeerID != "" {
			return e.PeerID
		}
	}
	for _, e := range r.Rounds {
		if e.PeerID != "" {
			return e.PeerID
		}
	}
	return ""
}

// BenchPeer is one peer's figures in a configuration. Rates are over the
// peer's own training time; MB is 10^6 bytes.
type BenchPeer struct {
	PeerID   string `json:"peer_id"`  // libp2p peer ID ("" for a single-peer run)
	File     string `json:"file"`     // the report file
	Finished bool   `json:"finished"` // the report has a summary line
	// Partial is set when the peer stopped before the end of training (it
	// left, was interrupted, or the whole job was stopped): its model is
	// partial, its test metrics null, its hash not compared.
	Partial   bool    `json:"partial"`
	StoppedAt int64   `json:"stopped_at_round,omitempty"` // partial: the rounds it completed
	Stopped   string  `json:"stopped,omitempty"`          // partial: why
	Examples  int64   `json:"examples"`                   // training examples this peer processed
	Seconds   float64 `json:"seconds"`                    // this peer's training time (trainingSeconds)
	// PausedSeconds is the evaluation pauses left out of Seconds: its own,
	// or in sync, for a peer that ran to the end, the run's largest
	// (trainingSeconds).
	PausedSeconds  float64 `json:"paused_seconds,omitempty"`
	ExamplesPerSec Num     `json:"examples_per_sec"`
	Rounds         int64   `json:"rounds"`      // rounds (steps on a single peer)
	BytesSent      int64   `json:"bytes_sent"`  // payload bytes published
	BytesRecv      int64   `json:"bytes_recv"`  // payload bytes received
	CPUPercent     Num     `json:"cpu_percent"` // mean CPU use, 100 = one core
	PeakRSSBytes   int64   `json:"peak_rss_bytes"`
	DiskReadBytes  int64   `json:"disk_read_bytes"`
	NetOutMBps     Num     `json:"net_out_mbps"`   // BytesSent / Seconds, MB/s
	NetInMBps      Num     `json:"net_in_mbps"`    // BytesRecv / Seconds, MB/s
	DiskReadMBps   Num     `json:"disk_read_mbps"` // DiskReadBytes / Seconds, MB/s
	WaitSeconds    float64 `json:"wait_seconds"`   // time waiting at round barriers
	OwnedShards    int     `json:"owned_shards"`   // shards this peer was primary of at the end
	PubsubDropped  int64   `json:"pubsub_dropped"`
	Repaired       int64   `json:"repaired"`
	Rejected       int64   `json:"rejected"`
	ModelHash      string  `json:"model_hash,omitempty"`
	Metrics                // the peer's last test figures
}

// CurvePoint is one evaluation of a configuration's model on the test set.
type CurvePoint struct {
	Examples int64   `json:"examples"` // training examples of all peers so far (see BenchConfig.Curve)
	Seconds  float64 `json:"seconds"`  // since training started
	Metrics
}

// BenchConfig is the figures of one configuration, the unit of the report's
// tables, plots and bench.json.
type BenchConfig struct {
	Name     string `json:"name"` // "ring/sync/b100"
	Topology string `json:"topology"`
	Mode     string `json:"mode"`
	Batch    int    `json:"batch"`
	// LocalSteps is the batches of a window of local steps (1: a gradient
	// exchanged every batch).
	LocalSteps int `json:"local_steps"`
	PeerCount  int `json:"peer_count"` // reports in the configuration
	// Workers is the run's peers: the most any summary line names (1 for
	// a single peer), else PeerCount.
	Workers         int     `json:"workers"`
	Examples        int64   `json:"examples"` // all peers' training examples
	Seconds         float64 `json:"seconds"`  // the slowest peer's training time
	ExamplesPerSec  Num     `json:"examples_per_sec"`
	Rounds          int64   `json:"rounds"` // the most rounds any peer reached
	RoundsPerSec    Num     `json:"rounds_per_sec"`
	BytesSent       int64   `json:"bytes_sent"` // all peers
	BytesRecv       int64   `json:"bytes_recv"` // all peers
	BytesPerExample Num     `json:"bytes_per_example"`
	// RecvBytesPerExample is the bytes a peer received over the network
	// per example it trained, the mean over the peers that trained: what
	// each peer pays per example, flat when a cluster scales.
	RecvBytesPerExample Num          `json:"recv_bytes_per_example_per_peer"`
	Scaling                          // against the single-peer run of the same batch, when there is one
	Accuracy                         // time to a target test log-loss, and its speedup against that run
	RoundTimes                       // steady-state rounds/s and round-time percentiles, from the round lines
	BusiestPeer         string       `json:"busiest_peer"`         // the peer that sent the most bytes
	BusiestBytesSent    int64        `json:"busiest_bytes_sent"`   // what it sent
	BusiestNetOut       Num          `json:"busiest_net_out_mbps"` // its send rate, MB/s
	ModelHashesAgree    bool         `json:"model_hashes_agree"`   // every peer that ran to the end and reports a hash reports the same one
	PartialPeers        int          `json:"partial_peers"`        // peers that stopped before the end of training (not compared)
	Metrics                          // final test figures of the reference peer's model
	Peers               []BenchPeer  `json:"peers"`
	Curve               []CurvePoint `json:"curve"`
	Warnings            []string     `json:"warnings"`
}

// Summarize computes the figures of every configuration:
//
//   - Examples is the sum over peers, Seconds the slowest peer's, and
//     ExamplesPerSec = Examples / Seconds: the cluster's throughput.
//   - RoundsPerSec = Rounds / Seconds with Rounds the most rounds any peer
//     reached (single peers count steps).
//   - BytesPerExample = the sum of bytes_sent / Examples: bytes on the wire
//     per training example. RecvBytesPerExample = bytes_recv / examples of
//     each peer, the mean over peers: what a peer receives per example it
//     trains.
//   - RoundTimes: steady-state rounds/s and the p50/p90/p99 of one round,
//     from the peers' round lines without each peer's first and last tenth
//     (roundTimes); NaN for a plain train or a run of few rounds.
//   - Speedup, Efficiency: against a single-peer run (topology single, one
//     plain train process) of the same batch among cfgs, when there is one
//     (see Scaling).
//   - The final test metrics are the reference peer's: the first peer (in
//     GroupRuns order) that ran to the end, else the first that finished,
//     else the first. All peers of a correct run that ran to the end finish
//     with the same model (ModelHashesAgree); a peer that stopped early
//     (Partial: it left, was interrupted) has a model of its own, which is
//     not compared, and a warning says where it stopped.
//   - Curve is the reference peer's evaluations (and its final one). Eval
//     lines count the peer's own examples; the curve's Examples are all
//     peers' examples, estimated as the peer's count times Examples over the
//     peer's final count (exact when peers advance in step, as in sync mode).
//
// A peer without a summary line (crashed, or still running) is included:
// its figures come from its last round and eval lines, and the
// configuration carries a warning. Undefined figures (a rate over zero
// seconds) are NaN.
func Summarize(cfgs []*Config) []BenchConfig {
	out := make([]BenchConfig, 0, len(cfgs))
	for _, c := range cfgs {
		out = append(out, summarize(c))
	}
	addScaling(out)
	AddTimeToTarget(out, 0, DefaultTargetTolerance)
	return out
}

func summarize(c *Config) BenchConfig {
	b := BenchConfig{Name: c.Name, Topology: c.Topology, Mode: c.Mode, Batch: c.Batch, LocalSteps: max(1, c.LocalSteps), PeerCount: len(c.Peers),
		Peers: []BenchPeer{}, Curve: []CurvePoint{}, Warnings: []string{}} // JSON lists, never null
	ref := -1
	hashes := map[string][]string{} // hash -> peers
	var hashOrder []string
	runPeers := 0
	ps := make([]BenchPeer, len(c.Peers))
	for i, r := range c.Peers {
		ps[i] = benchPeer(r)
	}
	if c.Mode == "sync" {
		syncPauses(ps)
	}
	for i, r := range c.Peers {
		p := ps[i]
		b.Peers = append(b.Peers, p)
		b.Examples += p.Examples
		b.Seconds = math.Max(b.Seconds, p.Seconds)
		b.Rounds = max(b.Rounds, p.Rounds)
		b.BytesSent += p.BytesSent
		b.BytesRecv += p.BytesRecv
		if p.BytesSent > b.BusiestBytesSent || b.BusiestPeer == "" {
			b.BusiestBytesSent, b.BusiestPeer, b.BusiestNetOut = p.BytesSent, peerName(p), p.NetOutMBps
		}
		if p.Finished && !p.Partial && ref < 0 {
			ref = i
		}
		if r.Summary != nil {
			runPeers = max(runPeers, r.Summary.Peers)
		}
		name := peerName(p)
		if !p.Finished {
			b.Warnings = append(b.Warnings, fmt.Sprintf("peer %s (%s) has no summary line: it crashed or is still running; "+
				"its figures are from its last round and eval lines (%d examples, %.1f s)", name, p.File, p.Examples, p.Seconds))
		}
		if p.Partial {
			b.PartialPeers++
		}
		if p.Finished && !p.Partial && p.ModelHash != "" {
			if hashes[p.ModelHash] == nil {
				hashOrder = append(hashOrder, p.ModelHash)
			}
			hashes[p.ModelHash] = append(hashes[p.ModelHash], name)
		}
		if p.PubsubDropped > 0 {
			b.Warnings = append(b.Warnings, fmt.Sprintf("peer %s: gossipsub dropped %d messages (a full queue); "+
				"lost updates were repaired or the run is wrong", name, p.PubsubDropped))
		}
		if p.Rejected > 0 {
			b.Warnings = append(b.Warnings, fmt.Sprintf("peer %s rejected %d messages that failed validation", name, p.Rejected))
		}
	}
	b.Warnings = append(b.Warnings, partialWarnings(b.Peers)...)
	b.ModelHashesAgree = len(hashOrder) <= 1
	if !b.ModelHashesAgree {
		parts := make([]string, len(hashOrder))
		for i, h := range hashOrder {
			parts[i] = fmt.Sprintf("%s on %s", h, strings.Join(hashes[h], ", "))
		}
		b.Warnings = append(b.Warnings, "model hashes disagree: the peers ended with different models: "+strings.Join(parts, "; "))
	}
	if runPeers > len(c.Peers) {
		b.Warnings = append(b.Warnings, fmt.Sprintf("%d reports, but the run had %d peers: the figures miss %d peers",
			len(c.Peers), runPeers, runPeers-len(c.Peers)))
	} else if runPeers > 0 && runPeers < len(c.Peers) {
		b.Warnings = append(b.Warnings, fmt.Sprintf("%d reports, but the run had %d peers: were two runs of this configuration mixed?",
			len(c.Peers), runPeers))
	}
	b.ExamplesPerSec = ratio(float64(b.Examples), b.Seconds)
	b.RoundsPerSec = ratio(float64(b.Rounds), b.Seconds)
	b.BytesPerExample = ratio(float64(b.BytesSent), float64(b.Examples))
	b.Workers = max(runPeers, len(c.Peers))
	b.RecvBytesPerExample = recvPerExample(b.Peers)
	b.Scaling = noScaling()
	b.Accuracy = noAccuracy()
	b.RoundTimes = roundTimes(c.Peers)
	for i, p := range b.Peers {
		if ref < 0 && p.Finished {
			ref = i
		}
	}
	if ref < 0 && len(c.Peers) > 0 {
		ref = 0
	}
	b.Metrics = undefinedMetrics()
	if ref >= 0 {
		b.Metrics = b.Peers[ref].Metrics
		// The curve: the peer that evaluated most along the way (bench
		// lets one peer of a cluster evaluate, so the others do not pay
		// for it), its final figures the reference peer's model's.
		cur := ref
		for i, r := range c.Peers {
			if p := b.Peers[i]; p.Finished && !p.Partial && len(r.Evals) > len(c.Peers[cur].Evals) {
				cur = i
			}
		}
		b.Curve = curve(c.Peers[cur], b.Peers[cur], b.Examples)
	}
	return b
}

// partialWarnings says which peers stopped early: one warning when every
// peer stopped at the same round for the same reason (the job was
// stopped), else one per peer.
func partialWarnings(ps []BenchPeer) []string {
	var out []string
	same := len(ps) > 1
	for _, p := range ps {
		if !p.Partial {
			same = false
			continue
		}
		same = same && p.Stopped == ps[0].Stopped && p.StoppedAt == ps[0].StoppedAt
		out = append(out, fmt.Sprintf("peer %s stopped early (%s) at round %d: its model is partial, so its test "+
			"metrics are null and its model hash is not compared", peerName(p), p.Stopped, p.StoppedAt))
	}
	if same {
		return []string{fmt.Sprintf("every peer stopped early (%s) at round %d: the models are partial, so the test "+
			"metrics are null and the model hashes are not compared", ps[0].Stopped, ps[0].StoppedAt)}
	}
	return out
}

// benchPeer is a run's figures: its summary's, or for a run without one,
// the last round and eval lines'.
func benchPeer(r *Run) BenchPeer {
	p := BenchPeer{PeerID: runPeerID(r), File: r.Path, Metrics: undefinedMetrics()}
	if s := r.Summary; s != nil {
		p.Finished = true
		p.Examples, p.Seconds, p.PausedSeconds = s.Examples, s.Seconds, s.PausedSeconds // (training time: trainingSeconds)
		if s.TrainingSeconds > 0 {
			p.Seconds = s.TrainingSeconds
		}
		p.Rounds = s.Rounds
		if p.Rounds == 0 {
			p.Rounds = s.Steps
		}
		p.BytesSent, p.BytesRecv = s.BytesSent, s.BytesRecv
		p.CPUPercent, p.PeakRSSBytes, p.DiskReadBytes = s.CPUPercent, s.PeakRSSBytes, s.DiskReadBytes
		p.WaitSeconds, p.OwnedShards = s.WaitSeconds, s.Owned
		p.PubsubDropped, p.Repaired, p.Rejected = s.PubsubDropped, s.Repaired, s.Rejected
		p.ModelHash = s.ModelHash
		if s.TestExamples > 0 {
			p.Metrics = s.Metrics // else no test set: the metrics stay undefined, not 0
		}
		p.Partial, p.StoppedAt, p.Stopped = s.Partial, s.StoppedAt, s.Stopped
	} else {
		p.CPUPercent = Num(math.NaN())
		for _, rd := range r.Rounds {
			p.WaitSeconds += rd.WaitSeconds
			if rd.Examples >= p.Examples {
				p.Examples, p.Seconds, p.Rounds = rd.Examples, rd.Seconds, rd.Clock
				p.BytesSent, p.BytesRecv = rd.BytesSent, rd.BytesRecv
			}
			if rd.PeakRSSBytes > 0 || rd.CPUPercent != 0 {
				p.CPUPercent, p.PeakRSSBytes, p.DiskReadBytes = rd.CPUPercent, rd.PeakRSSBytes, rd.DiskReadBytes
			}
		}
		if n := len(r.Evals); n > 0 {
			e := r.Evals[n-1]
			p.Metrics = e.Metrics
			if e.Examples > p.Examples {
				p.Examples = e.Examples
			}
			p.Seconds = math.Max(p.Seconds, e.Seconds)
			p.PausedSeconds = e.Paused // (the pauses up to its last evaluation)
		}
	}
	p.Seconds = math.Max(0, p.Seconds-p.PausedSeconds)
	p.rates()
	return p
}

// rates sets a peer's rates over its Seconds.
func (p *BenchPeer) rates() {
	p.ExamplesPerSec = ratio(float64(p.Examples), p.Seconds)
	p.NetOutMBps = ratio(float64(p.BytesSent)/1e6, p.Seconds)
	p.NetInMBps = ratio(float64(p.BytesRecv)/1e6, p.Seconds)
	p.DiskReadMBps = ratio(float64(p.DiskReadBytes)/1e6, p.Seconds)
}

// syncPauses leaves the run's largest evaluation pauses out of the
// seconds of every peer of a sync run that ran to the end: each round
// waits for every worker, so each waited for the peer that paused to
// evaluate (trainingSeconds). A peer that stopped early, or has no
// summary, keeps its own pauses out only.
func syncPauses(ps []BenchPeer) {
	most := 0.0
	for _, p := range ps {
		most = math.Max(most, p.PausedSeconds)
	}
	for i := range ps {
		p := &ps[i]
		if !p.Finished || p.Partial || p.PausedSeconds == most {
			continue
		}
		p.Seconds = math.Max(0, p.Seconds-(most-p.PausedSeconds))
		p.PausedSeconds = most
		p.rates()
	}
}

// trainingSeconds: a bench compares training time, so a run's seconds
// leave out the evaluations its training paused for (report.Eval's
// Paused, Summary's PausedSeconds). A run alone evaluates between its
// steps (on the whole model, whose rows are cache misses): its seconds are
// Seconds less its pauses. A peer's seconds end at the run's last round
// (Summary.TrainingSeconds, when the report has it): the end of the run
// (the final fetch and evaluation, the model hash, the agreement to
// finish) is not training, and a run alone has none of it. In sync mode
// the peer that evaluates (bench lets one peer of a cluster evaluate)
// pauses its worker meanwhile, and every peer waits for it at the next
// round: the run's largest pauses are left out of every peer's seconds
// (syncPauses), once. In ssp and async a peer evaluates beside its
// training, pausing nothing, so its seconds are its time to the last
// round, the evaluation's cost on that peer's CPU included.
// TestBenchLeavesOutPausedEvaluations and TestBenchSyncLeavesOutTheRunsPauses
// pin this.

// curve is the reference peer's test curve with all peers' examples, at
// its training seconds (trainingSeconds): an evaluation after the last
// round (a peer's final one, after the end of the run's fetches) is of the
// model as the last round left it, at the peer's training time.
func curve(r *Run, p BenchPeer, total int64) []CurvePoint {
	scale := 1.0
	if p.Examples > 0 && total > 0 {
		scale = float64(total) / float64(p.Examples)
	}
	pts := make([]CurvePoint, 0, len(r.Evals)+1)
	add := func(ex int64, sec float64, m Metrics) {
		pts = append(pts, CurvePoint{Examples: int64(math.Round(float64(ex) * scale)), Seconds: sec, Metrics: m})
	}
	var last int64 = -1
	for _, e := range r.Evals {
		add(e.Examples, math.Min(e.Seconds-e.Paused, p.Seconds), e.Metrics)
		last = e.Examples
	}
	if s := r.Summary; s != nil && s.TestExamples > 0 && s.Examples > last {
		add(s.Examples, p.Seconds, s.Metrics)
	}
	return pts
}

func undefinedMetrics() Metrics {
	nan := Num(math.NaN())
	return Metrics{TestLogLoss: nan, TestError: nan, TestAUC: nan, TestAccuracy: nan}
}

// ratio is a/b, NaN when b is not positive.
func ratio(a, b float64) Num {
	if b <= 0 {
		return Num(math.NaN())
	}
	return Num(a / b)
}

// peerName is a short name for a peer in tables: its peer ID shortened the
// way libp2p's logs shorten it (first 2 and last 6 characters: every
// Ed25519 ID starts "12D3KooW"), or its report file's name when the report
// names no peer.
func peerName(p BenchPeer) string {
	id := p.PeerID
	if id == "" {
		return strings.TrimSuffix(filepath.Base(p.File), ".jsonl")
	}
	if len(id) > 16 {
		return id[:2] + "*" + id[len(id)-6:]
	}
	return id
}
