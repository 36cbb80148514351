package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"sync"
)

// Num is a float64 that encodes NaN and ±Inf as JSON null (and decodes null
// as NaN), so undefined metrics survive a round trip through a report.
type Num float64

// MarshalJSON implements json.Marshaler.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Num(math.NaN())
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("report: number %q: %w", b, err)
	}
	*n = Num(f)
	return nil
}

// Record types, the value of every line's "type" field.
const (
	TypeEval    = "eval"
	TypeRound   = "round"
	TypeSummary = "summary"
	TypeStart   = "start"
	TypeChange  = "change"
)

// Metrics are the test-set figures shared by eval and summary lines.
type Metrics struct {
	TestExamples int64 `json:"test_examples"`
	TestLogLoss  Num   `json:"test_logloss"`
	TestError    Num   `json:"test_error"`
	TestAUC      Num   `json:"test_auc"` // binary models; null for multiclass
	TestAccuracy Num   `json:"test_accuracy"`
}

// Start is the first line of a report: what ran, so a report file explains
// itself without the command line that produced it.
type Start struct {
	Type    string            `json:"type"` // "start"
	Time    string            `json:"time"` // RFC 3339
	PeerID  string            `json:"peer_id,omitempty"`
	Version string            `json:"version"`
	Config  map[string]string `json:"config"` // every flag and its value
	// Effective holds the values the run used where a flag left the choice
	// to inference or a default (--model auto, --classes 0, --lr 0 for the
	// optimizer's default, --l2 auto), by flag name.
	Effective map[string]string `json:"effective,omitempty"`
}

// Eval is one evaluation on the test set.
type Eval struct {
	Type     string  `json:"type"` // "eval"
	PeerID   string  `json:"peer_id,omitempty"`
	Examples int64   `json:"examples"` // training examples this peer has processed so far
	Seconds  float64 `json:"seconds"`  // since training started
	// Paused is how much of Seconds training waited for evaluations, this
	// one included: a run alone evaluates between its steps, and a sync
	// peer pauses its worker while it evaluates; an ssp or async peer
	// evaluates beside its training (0). Training time is Seconds - Paused.
	Paused float64 `json:"paused_seconds,omitempty"`
	Epoch  int     `json:"epoch"`
	Metrics
}

// Round is one round of a distributed run (written by the distributed loop).
type Round struct {
	Type        string  `json:"type"` // "round"
	PeerID      string  `json:"peer_id,omitempty"`
	Clock       int64   `json:"clock"`
	Examples    int64   `json:"examples"`
	Seconds     float64 `json:"seconds"`
	BytesSent   int64   `json:"bytes_sent"`
	BytesRecv   int64   `json:"bytes_recv"`
	WaitSeconds float64 `json:"wait_seconds"`
	Workers     int     `json:"workers"`      // contributions this peer applied as owner in its latest round
	Live        int     `json:"live_workers"` // live workers of that round's configuration
	Epoch       uint64  `json:"config"`       // training configuration the round was computed in
	Owned       int     `json:"owned_shards"` // shards this peer is primary of
	Staleness   int64   `json:"staleness"`    // rounds missing from the weights the gradient used
	Resources
}

// Change is a training configuration taking effect at this peer: peers
// joined, left or crashed, and shards moved.
type Change struct {
	Type    string   `json:"type"` // "change"
	PeerID  string   `json:"peer_id,omitempty"`
	Config  uint64   `json:"config"`
	Start   uint64   `json:"start_round"`
	Members []string `json:"members"`
	Joined  []string `json:"joined,omitempty"`
	Left    []string `json:"left,omitempty"`
	Crashed []string `json:"crashed,omitempty"`
	Owned   int      `json:"owned_shards"`
}

// Resources are a process's resource figures (see Sample).
type Resources struct {
	CPUPercent    Num   `json:"cpu_percent"`     // mean CPU use since start, 100 = one core
	PeakRSSBytes  int64 `json:"peak_rss_bytes"`  // peak resident set size
	DiskReadBytes int64 `json:"disk_read_bytes"` // bytes the process read from storage
}

// Summary is the last line of a report.
type Summary struct {
	Type     string  `json:"type"` // "summary"
	PeerID   string  `json:"peer_id,omitempty"`
	Examples int64   `json:"examples"`
	Seconds  float64 `json:"seconds"`
	// PausedSeconds is how much of Seconds training waited for
	// evaluations (a run alone, a sync peer; an ssp or async peer
	// evaluates beside its training: 0).
	PausedSeconds float64 `json:"paused_seconds,omitempty"`
	// TrainingSeconds (a peer) is Seconds up to the end of the run's last
	// round, before the end of the run (the final fetch and evaluation,
	// the model hash, the agreement to finish); none when the peer did
	// not get there (it left, failed, or was stopped). Nothing is
	// subtracted: its training time is TrainingSeconds - PausedSeconds
	// (in sync every peer also waits for the others' pauses: a bench
	// subtracts the run's largest, Summarize).
	TrainingSeconds float64 `json:"training_seconds,omitempty"`
	ExamplesPerSec  Num     `json:"examples_per_sec"`
	Epochs          int     `json:"epochs"`
	// KeptEpoch is the epoch whose model was kept, the lowest held-out
	// loss (--holdout; 0: the last), and HoldoutLogLoss the held-out
	// loss after each epoch.
	KeptEpoch      int       `json:"kept_epoch,omitempty"`
	HoldoutLogLoss []float64 `json:"holdout_logloss,omitempty"`
	Steps          int64     `json:"steps"`
	Metrics
	ModelNonzeros int64  `json:"model_nonzeros"`
	ModelHash     string `json:"model_hash,omitempty"`
	BadLines      int64  `json:"bad_lines"`
	// BatchesSkippedNonFinite counts the batches left out because their
	// gradient or loss was not finite (--nonfinite skip).
	BatchesSkippedNonFinite int64 `json:"batches_skipped_nonfinite"`
	Resources
	// Distributed figures; zero on a single peer.
	Peers         int     `json:"peers"`             // workers in the run (1 for a single peer)
	Topology      string  `json:"topology"`          // "single", "ring" or "master"
	Mode          string  `json:"mode"`              // "local", "sync", "ssp" or "async"
	Gather        string  `json:"gather,omitempty"`  // "need" or "full" (--gather)
	Threads       int     `json:"threads,omitempty"` // --threads
	Batch         int     `json:"batch"`
	Rounds        int64   `json:"rounds"`
	WaitSeconds   float64 `json:"wait_seconds"`  // time waiting at barriers
	MaxStaleness  int64   `json:"max_staleness"` // largest staleness a gradient was computed at
	BytesSent     int64   `json:"bytes_sent"`    // bytes sent on all libp2p streams (gossipsub relays included)
	BytesRecv     int64   `json:"bytes_recv"`    // bytes received on all libp2p streams
	PubsubDropped int64   `json:"pubsub_dropped"`
	Repaired      int64   `json:"repaired"`
	Rejected      int64   `json:"rejected"`
	// ContributionsLost counts contributions lost with a crashed peer
	// (ssp/async: buffered behind a gap that never filled).
	ContributionsLost int64 `json:"contributions_lost"`
	// LocalSteps is the batches of a window of local steps the run used
	// (--local-steps; absent: 1, a gradient every batch).
	LocalSteps int `json:"local_steps,omitempty"`
	// RowsDropped counts gradient rows this peer's owner dropped as over
	// --max-row-grad (a worker's bug or overflow, or features of large raw
	// values).
	RowsDropped int64 `json:"rows_dropped"`
	Owned       int   `json:"owned_shards"` // shards this peer was primary of at the end
	Shards      int   `json:"shards"`
	// Churn: membership changes, handoffs, checkpoints.
	Configs           uint64  `json:"configs"`                      // the final training configuration's number
	RoundsDegraded    int64   `json:"rounds_degraded"`              // owner rounds applied without some worker (crashed or finished)
	Covered           int     `json:"shards_covered"`               // shards whose final values came from a live holder
	Promoted          int     `json:"shards_promoted"`              // shards restarted from their initial values (every holder lost)
	JoinSeconds       float64 `json:"join_seconds"`                 // joined mid-run: from start to owning shards
	JoinBytes         int64   `json:"join_bytes"`                   // (written by versions before the protocol core: model bytes a joiner copied)
	HandoffBytes      int64   `json:"handoff_bytes"`                // (written by versions before the protocol core)
	ShardsReceived    int64   `json:"shards_received"`              // shard states received from their previous holders (joins, leaves, crashes)
	ShardsSent        int64   `json:"shards_sent"`                  // shard states handed to their new holders
	Checkpoints       int     `json:"checkpoints"`                  // checkpoints this peer wrote its part of
	CheckpointsFailed int     `json:"checkpoints_failed,omitempty"` // that failed (a full disk) or were skipped: the older ones stay
	ResumedAt         uint64  `json:"resumed_at"`                   // the checkpoint round a --resume continued from
	// A run that stopped before the end of training (a graceful leave, an
	// interrupt, the whole job stopping) is partial: its model is not the
	// job's final one, so its test metrics are null, and Summarize leaves
	// it out of the model-hash comparison.
	Partial   bool   `json:"partial"`
	StoppedAt int64  `json:"stopped_at_round,omitempty"` // partial: the rounds it completed
	Stopped   string `json:"stopped,omitempty"`          // partial: "left", "interrupted", "job stopped" or "evaluation failed"
	// A standalone run that stopped early says where in its data: the
	// epoch in progress (1-based) and the rows of it trained on.
	StoppedAtEpoch int   `json:"stopped_at_epoch,omitempty"`
	StoppedAtRow   int64 `json:"stopped_at_epoch_rows,omitempty"`
	// ResumedAtExamples is the examples a standalone --resume's
	// checkpoint had trained on (its Examples count this run's only).
	ResumedAtExamples int64 `json:"resumed_at_examples,omitempty"`
	// EvalFailed is the error of a final evaluation that failed after
	// training: the model was saved, its test metrics are null.
	EvalFailed string `json:"eval_failed,omitempty"`
	// Connections says, for every peer of the job this peer was connected
	// to, how their traffic travelled: "direct", "hole_punched" (direct
	// after a hole punch through NATs) or "relayed" (through a --relay peer).
	Connections map[string]string `json:"connections,omitempty"`
}

// Writer appends records to a report file, one JSON object per line, and
// flushes after every record so a crashed run still leaves a readable report.
type Writer struct {
	mu  sync.Mutex
	f   io.WriteCloser
	w   *bufio.Writer
	err error
}

// Create creates (or truncates) the report file at path.
func Create(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return NewWriter(f), nil
}

// NewWriter writes records to w; Close closes it.
func NewWriter(w io.WriteCloser) *Writer {
	return &Writer{f: w, w: bufio.NewWriter(w)}
}

// Write appends one record. Records are structs of this package (or any
// JSON-encodable value with a "type" field). After the first error every
// later Write returns it.
func (w *Writer) Write(rec any) error {
	if w == nil {
		return nil
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("report: encode %T: %w", rec, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.w.Write(b)
	w.w.WriteByte('\n')
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("report: %w", err)
	}
	return w.err
}

// Close flushes and closes the file.
func (w *Writer) Close() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ferr := w.w.Flush()
	cerr := w.f.Close()
	if w.err != nil {
		return w.err
	}
	return errors.Join(ferr, cerr)
}
