package metrics

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace prefixes every gossiptrain metric name.
const Namespace = "gossiptrain"

// Metrics is one peer's figures as Prometheus metrics, in a registry of its
// own that also holds the Go runtime and process collectors. The zero value
// is not usable: call New. A nil *Metrics accepts every call and does
// nothing. All methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	examples, rounds, sent, recv, wait prometheus.Counter
	repaired, dropped                  prometheus.Counter
	rejected                           *prometheus.CounterVec
	round, dataEpoch, ringEpoch, owned prometheus.Gauge
	staleness, finished                prometheus.Gauge
	testLogLoss, testError, testAUC    prometheus.Gauge
	info                               *prometheus.GaugeVec
	mu                                 sync.Mutex
	last                               totals                        // the inputs' previous totals, guarded by mu
	lastRejected                       map[string]uint64             // guarded by mu
	rejectedBy                         map[string]prometheus.Counter // children of rejected, guarded by mu
}

// totals are the previous values of the inputs Metrics turns into counters.
type totals struct {
	examples, rounds, sent, recv int64
	repaired, dropped            uint64
}

// Info describes the run; it becomes the labels of gossiptrain_info.
type Info struct {
	PeerID   string // libp2p peer ID
	Job      string // --job
	Topology string // "ring" or "master" ("single" for one peer)
	Mode     string // "sync", "ssp", "async" ("local" for one peer)
	Version  string // the binary's version
}

// RoundFigures are a worker's figures after one round. Examples and the
// byte counts are totals since the run started; WaitSeconds is this
// round's wait alone (it is added to gossiptrain_wait_seconds_total).
type RoundFigures struct {
	Rounds      int64   // rounds completed so far: the round's clock + 1
	Examples    int64   // this peer's training examples so far
	DataEpoch   int     // 1-based pass over the training data in progress; 0 leaves the gauge as it is
	WaitSeconds float64 // time this worker waited at the barrier before the round
	Staleness   int64   // rounds of other workers' contributions missing from the weights the gradient used
	BytesSent   int64   // bytes sent on all libp2p streams so far
	BytesRecv   int64   // bytes received on all libp2p streams so far
}

// Totals are the message-layer counters, as totals since the run started.
type Totals struct {
	Repaired      uint64            // messages recovered over the repair stream
	PubsubDropped uint64            // messages gossipsub dropped (full queues)
	Rejected      map[string]uint64 // incoming messages rejected, by reason
}

// EvalFigures are the figures of one evaluation on the test set. NaN (an
// AUC that is undefined for a multiclass model) is exported as NaN.
type EvalFigures struct {
	LogLoss float64
	Error   float64
	AUC     float64
	// Where the evaluation happened, for the dashboard's curves (Metrics
	// exports only the latest values).
	Examples int64   // this peer's training examples before it
	Seconds  float64 // since the run started
}

// SummaryFigures are the figures of the finished run.
type SummaryFigures struct {
	Rounds    int64 // rounds completed
	Examples  int64 // training examples this peer processed
	BytesSent int64
	BytesRecv int64
	Totals    Totals
	Eval      EvalFigures // the final evaluation; all zero when there is no test set
	HasEval   bool        // Eval holds an evaluation
}

// New returns Metrics with every gossiptrain metric at zero and the Go
// runtime and process collectors registered in a private registry.
func New() *Metrics {
	m := &Metrics{
		reg:          prometheus.NewRegistry(),
		lastRejected: map[string]uint64{},
		rejectedBy:   map[string]prometheus.Counter{},
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help})
		m.reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help})
		m.reg.MustRegister(g)
		return g
	}
	m.examples = counter("examples_total", "Training examples this peer has processed.")
	m.rounds = counter("rounds_total", "Rounds (clocks) this worker has completed.")
	m.sent = counter("bytes_sent_total", "Bytes sent on all libp2p streams (gossipsub relays and repairs included).")
	m.recv = counter("bytes_received_total", "Bytes received on all libp2p streams.")
	m.wait = counter("wait_seconds_total", "Time this worker waited at round barriers.")
	m.repaired = counter("repaired_messages_total", "Messages recovered over the repair stream after a gap or a stall.")
	m.dropped = counter("pubsub_dropped_total", "Messages gossipsub dropped because a queue was full.")
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "rejected_messages_total",
		Help: "Incoming messages rejected by validation, by reason."}, []string{"reason"})
	m.reg.MustRegister(m.rejected)
	m.round = gauge("round", "The last round (clock) this worker completed.")
	m.dataEpoch = gauge("data_epoch", "The pass over the training data in progress (1-based).")
	m.ringEpoch = gauge("ring_epoch", "The membership epoch of the ring this peer trains with.")
	m.owned = gauge("owned_shards", "Shards this peer is the primary owner of.")
	m.staleness = gauge("staleness_rounds", "Rounds of other workers' contributions missing from the weights of the last gradient.")
	m.finished = gauge("finished", "1 once the run has finished, else 0.")
	m.testLogLoss = gauge("test_logloss", "Mean log-loss on the test set at the last evaluation.")
	m.testError = gauge("test_error", "Error rate on the test set at the last evaluation.")
	m.testAUC = gauge("test_auc", "AUC on the test set at the last evaluation (binary models; NaN otherwise).")
	for _, g := range []prometheus.Gauge{m.testLogLoss, m.testError, m.testAUC} {
		g.Set(math.NaN()) // no evaluation yet
	}
	m.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "info",
		Help: "Always 1; the labels describe the run."}, []string{"peer_id", "job", "topology", "mode", "version"})
	m.reg.MustRegister(m.info)
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the private registry, to register more collectors or to
// gather the metrics directly.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// SetInfo sets gossiptrain_info's labels (replacing earlier ones).
func (m *Metrics) SetInfo(i Info) {
	if m == nil {
		return
	}
	m.info.Reset()
	m.info.WithLabelValues(i.PeerID, i.Job, i.Topology, i.Mode, i.Version).Set(1)
}

// Round records a completed round.
func (m *Metrics) Round(f RoundFigures) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.examples.Add(increase(&m.last.examples, f.Examples))
	m.rounds.Add(increase(&m.last.rounds, f.Rounds))
	m.sent.Add(increase(&m.last.sent, f.BytesSent))
	m.recv.Add(increase(&m.last.recv, f.BytesRecv))
	if f.WaitSeconds > 0 {
		m.wait.Add(f.WaitSeconds)
	}
	if f.Rounds > 0 {
		m.round.Set(float64(f.Rounds - 1))
	}
	if f.DataEpoch > 0 {
		m.dataEpoch.Set(float64(f.DataEpoch))
	}
	m.staleness.Set(float64(f.Staleness))
}

// Progress records training progress outside rounds (a single peer has no
// rounds): examples so far and the data epoch in progress.
func (m *Metrics) Progress(examples int64, dataEpoch int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.examples.Add(increase(&m.last.examples, examples))
	if dataEpoch > 0 {
		m.dataEpoch.Set(float64(dataEpoch))
	}
}

// Ring records the ring this peer trains with: its membership epoch and how
// many shards this peer is the primary of.
func (m *Metrics) Ring(epoch uint64, owned int) {
	if m == nil {
		return
	}
	m.ringEpoch.Set(float64(epoch))
	m.owned.Set(float64(owned))
}

// Totals records the message layer's counters.
func (m *Metrics) Totals(t Totals) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.totals(t)
}

func (m *Metrics) totals(t Totals) {
	m.repaired.Add(increaseU(&m.last.repaired, t.Repaired))
	m.dropped.Add(increaseU(&m.last.dropped, t.PubsubDropped))
	for reason, n := range t.Rejected {
		c := m.rejectedBy[reason]
		if c == nil {
			c = m.rejected.WithLabelValues(reason)
			m.rejectedBy[reason] = c
		}
		prev := m.lastRejected[reason]
		if n > prev {
			c.Add(float64(n - prev))
			m.lastRejected[reason] = n
		}
	}
}

// Eval records an evaluation on the test set.
func (m *Metrics) Eval(e EvalFigures) {
	if m == nil {
		return
	}
	m.testLogLoss.Set(e.LogLoss)
	m.testError.Set(e.Error)
	m.testAUC.Set(e.AUC)
}

// Summary records the finished run's totals and sets gossiptrain_finished
// to 1.
func (m *Metrics) Summary(s SummaryFigures) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.examples.Add(increase(&m.last.examples, s.Examples))
	m.rounds.Add(increase(&m.last.rounds, s.Rounds))
	m.sent.Add(increase(&m.last.sent, s.BytesSent))
	m.recv.Add(increase(&m.last.recv, s.BytesRecv))
	m.totals(s.Totals)
	m.mu.Unlock()
	if s.HasEval {
		m.Eval(s.Eval)
	}
	m.finished.Set(1)
}

// increase returns how much total grew since *last and stores it; a total
// that went down (a caller's counter was reset) adds nothing.
func increase(last *int64, total int64) float64 {
	d := total - *last
	if d <= 0 {
		if d < 0 {
			*last = total
		}
		return 0
	}
	*last = total
	return float64(d)
}

func increaseU(last *uint64, total uint64) float64 {
	if total <= *last {
		*last = total
		return 0
	}
	d := total - *last
	*last = total
	return float64(d)
}
