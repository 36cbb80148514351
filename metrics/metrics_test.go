package metrics

import (
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"
)

// scrape fetches /metrics from addr and parses the text format.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value returns the value of the metric name whose labels include want.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("metric %s missing from /metrics", name)
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	t.Fatalf("metric %s has no series with labels %v", name, want)
	return 0
}

func start(t *testing.T) (*Metrics, string) {
	t.Helper()
	m, addr, closeFn, err := Start("127.0.0.1:0", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := closeFn(); err != nil {
			t.Error(err)
		}
	})
	return m, addr
}

// Two rounds, two sets of totals and an evaluation, scraped over HTTP: the
// counters hold the latest totals (the caller passes totals, Metrics adds
// the increases), the gauges the latest values.
func TestScrapeAfterRounds(t *testing.T) {
	m, addr := start(t)
	m.SetInfo(Info{PeerID: "12D3KooWtest", Job: "ctr1", Topology: "ring", Mode: "sync", Version: "dev"})
	m.Ring(3, 64)
	m.Round(RoundFigures{Rounds: 1, Examples: 1000, DataEpoch: 1, WaitSeconds: 0.25, BytesSent: 5000, BytesRecv: 4000})
	m.Round(RoundFigures{Rounds: 2, Examples: 3000, DataEpoch: 1, WaitSeconds: 0.5, Staleness: 2, BytesSent: 12000, BytesRecv: 4000})
	m.Totals(Totals{Repaired: 2, PubsubDropped: 1, Rejected: map[string]uint64{"bad_index": 3, "nan": 1}})
	m.Totals(Totals{Repaired: 2, PubsubDropped: 1, Rejected: map[string]uint64{"bad_index": 5, "nan": 1}})
	m.Eval(EvalFigures{LogLoss: 0.5, Error: 0.25, AUC: 0.75})

	fams := scrape(t, addr)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gossiptrain_examples_total", nil, 3000},
		{"gossiptrain_rounds_total", nil, 2},
		{"gossiptrain_round", nil, 1},
		{"gossiptrain_data_epoch", nil, 1},
		{"gossiptrain_bytes_sent_total", nil, 12000},
		{"gossiptrain_bytes_received_total", nil, 4000},
		{"gossiptrain_wait_seconds_total", nil, 0.75},
		{"gossiptrain_staleness_rounds", nil, 2},
		{"gossiptrain_ring_epoch", nil, 3},
		{"gossiptrain_owned_shards", nil, 64},
		{"gossiptrain_repaired_messages_total", nil, 2},
		{"gossiptrain_pubsub_dropped_total", nil, 1},
		{"gossiptrain_rejected_messages_total", map[string]string{"reason": "bad_index"}, 5},
		{"gossiptrain_rejected_messages_total", map[string]string{"reason": "nan"}, 1},
		{"gossiptrain_test_logloss", nil, 0.5},
		{"gossiptrain_test_error", nil, 0.25},
		{"gossiptrain_test_auc", nil, 0.75},
		{"gossiptrain_finished", nil, 0},
		{"gossiptrain_info", map[string]string{"peer_id": "12D3KooWtest", "job": "ctr1", "topology": "ring", "mode": "sync"}, 1},
	} {
		if got := value(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// The Go runtime and process collectors are registered too.
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("%s missing: the Go and process collectors should be registered", name)
		}
	}
}

// Summary brings the counters to the final totals and marks the run
// finished; totals that go down (a caller's counter reset) never make a
// counter go down.
func TestSummaryAndCountersNeverDecrease(t *testing.T) {
	m, addr := start(t)
	m.Round(RoundFigures{Rounds: 5, Examples: 500, BytesSent: 100})
	m.Round(RoundFigures{Rounds: 6, Examples: 400, BytesSent: 50}) // lower totals: ignored
	fams := scrape(t, addr)
	if got := value(t, fams, "gossiptrain_examples_total", nil); got != 500 {
		t.Errorf("examples after a lower total = %v, want 500", got)
	}
	if got := value(t, fams, "gossiptrain_finished", nil); got != 0 {
		t.Errorf("finished before Summary = %v, want 0", got)
	}
	if got := value(t, fams, "gossiptrain_test_logloss", nil); !math.IsNaN(got) {
		t.Errorf("test_logloss before any evaluation = %v, want NaN", got)
	}
	m.Summary(SummaryFigures{Rounds: 10, Examples: 900, BytesSent: 150, BytesRecv: 70,
		Totals: Totals{Repaired: 4}, Eval: EvalFigures{LogLoss: 0.4, Error: 0.2, AUC: math.NaN()}, HasEval: true})
	fams = scrape(t, addr)
	for name, want := range map[string]float64{
		// 500 before the lower total 400 reset the baseline; 900 adds 500 more.
		"gossiptrain_examples_total":          1000,
		"gossiptrain_rounds_total":            10,
		"gossiptrain_bytes_sent_total":        200,
		"gossiptrain_bytes_received_total":    70,
		"gossiptrain_repaired_messages_total": 4,
		"gossiptrain_finished":                1,
		"gossiptrain_test_logloss":            0.4,
	} {
		if got := value(t, fams, name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := value(t, fams, "gossiptrain_test_auc", nil); !math.IsNaN(got) {
		t.Errorf("test_auc of a model without an AUC = %v, want NaN", got)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// pprof is served on the server's own mux.
func TestPprof(t *testing.T) {
	_, addr := start(t)
	for _, c := range []struct{ path, want string }{
		{"/debug/pprof/", "goroutine"},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile:"},
		{"/debug/pprof/heap?debug=1", "heap profile:"},
		{"/debug/pprof/cmdline", "metrics.test"},
		{"/", "/debug/pprof/"},
	} {
		code, body := get(t, "http://"+addr+c.path)
		if code != http.StatusOK || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d, body without %q:\n%.300s", c.path, code, c.want, body)
		}
	}
	if code, _ := get(t, "http://"+addr+"/nothing"); code != http.StatusNotFound {
		t.Errorf("GET /nothing: %d, want 404", code)
	}
}

// Close stops serving and frees the port.
func TestCloseFreesThePort(t *testing.T) {
	_, addr, closeFn, err := Start("127.0.0.1:0", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	c := http.Client{Timeout: 2 * time.Second}
	if _, err := c.Get("http://" + addr + "/metrics"); err == nil {
		t.Errorf("GET after Close succeeded")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port still taken after Close: %v", err)
	}
	ln.Close()
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:0", true},
		{"127.0.0.1:9100", true},
		{":9100", true},
		{"localhost:9100", true},
		{"[::1]:0", true},
		{"", false},
		{"127.0.0.1", false},
		{"127.0.0.1:99999", false},
		{"127.0.0.1:http", false},
		{"metrics.example.com:9100", false},
	} {
		cfg := DefaultConfig()
		cfg.Addr = c.addr
		err := cfg.Validate()
		if (err == nil) != c.ok {
			t.Errorf("Addr %q: Validate() = %v, want ok=%v", c.addr, err, c.ok)
		}
		if err != nil && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Addr")) {
			t.Errorf("Addr %q: error %q should wrap ErrConfig and name Addr", c.addr, err)
		}
	}
	if _, _, _, err := Start("127.0.0.1", zerolog.Nop()); !errors.Is(err, ErrConfig) {
		t.Errorf("Start with a bad address: %v, want ErrConfig", err)
	}
}

// A peer without --metrics-addr has a nil *Metrics and calls it anyway.
func TestNilMetricsIsANoOp(t *testing.T) {
	var m *Metrics
	m.SetInfo(Info{})
	m.Round(RoundFigures{Rounds: 1})
	m.Progress(1, 1)
	m.Ring(1, 1)
	m.Totals(Totals{Repaired: 1})
	m.Eval(EvalFigures{})
	m.Summary(SummaryFigures{})
	if m.Registry() != nil {
		t.Error("nil Metrics has a registry")
	}
}

// Round is called once per training round: it must not allocate.
func BenchmarkRound(b *testing.B) {
	m := New()
	m.Totals(Totals{Rejected: map[string]uint64{"nan": 1}})
	rej := map[string]uint64{"nan": 1}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := int64(i + 1)
		m.Round(RoundFigures{Rounds: n, Examples: 1000 * n, WaitSeconds: 0.001, BytesSent: 5000 * n, BytesRecv: 4000 * n})
		rej["nan"] = uint64(i + 1)
		m.Totals(Totals{Repaired: uint64(i), Rejected: rej})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rounds/s")
}
