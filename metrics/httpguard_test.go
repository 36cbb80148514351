package metrics

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// getHost sends GET url with the Host header host and returns the status
// and body.
func getHost(t *testing.T, url, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The metrics server answers requests that name it by IP address or
// localhost, on any port, and refuses other names with 421 and a message
// that says how to reach it: a page of evil.example that rebinds its name
// to 127.0.0.1 cannot read the metrics or pprof.
func TestAllowHosts(t *testing.T) {
	_, addr := start(t)
	_, port, _ := net.SplitHostPort(addr)
	for _, c := range []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1:" + port, true},
		{"localhost:" + port, true},
		{"LocalHost.:" + port, true},
		{"[::1]:" + port, true},
		{"10.1.2.3:8080", true}, // a port forward from another address
		{"127.0.0.1", true},
		{"evil.example", false},
		{"evil.example:" + port, false},
		{"localhost.evil.example:" + port, false},
		{"127.0.0.1.nip.io:" + port, false},
	} {
		for _, path := range []string{"/metrics", "/debug/pprof/cmdline"} {
			code, body := getHost(t, "http://"+addr+path, c.host)
			switch {
			case c.ok && code != http.StatusOK:
				t.Errorf("GET %s with Host %q: %d, want 200:\n%.300s", path, c.host, code, body)
			case !c.ok && (code != http.StatusMisdirectedRequest || !strings.Contains(body, "http://127.0.0.1:"+port+"/") || strings.Contains(body, "metrics.test")):
				t.Errorf("GET %s with Host %q: %d, want 421 saying to open http://127.0.0.1:%s/:\n%.300s", path, c.host, code, port, body)
			}
		}
	}
	// A server configured with a host name answers that name too.
	h := AllowHosts("peer3.cluster.internal:9100", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for host, ok := range map[string]bool{"peer3.cluster.internal:9100": true, "PEER3.cluster.internal": true, "peer4.cluster.internal:9100": false} {
		req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
		req.Host = host
		rec := &recorder{header: http.Header{}}
		h.ServeHTTP(rec, req)
		if (rec.code == 0 || rec.code == http.StatusOK) != ok {
			t.Errorf("listening on peer3.cluster.internal: Host %q answered %d, want allowed=%v", host, rec.code, ok)
		}
	}
}

type recorder struct {
	header http.Header
	code   int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(c int)           { r.code = c }

// A client that sends its headers a line at a time and never finishes
// them (slowloris) is cut off after ReadHeaderTimeout, while it still
// sends.
func TestSlowHeadersAreCutOff(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReadHeaderTimeout = 300 * time.Millisecond
	s, err := Serve(cfg, New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cut, took := slowloris(t, s.Addr())
	if !cut || took > 3*time.Second {
		t.Errorf("a client trickling its headers was cut off: %v, after %v; want cut off after about 300ms", cut, took)
	}
}

// slowloris connects to addr and sends a request's headers a line every
// 50ms, never the blank line that ends them, until the server closes the
// connection (cut) or 5 seconds pass.
func slowloris(t *testing.T, addr string) (cut bool, took time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		// The server sends nothing (or a 408) and closes.
		io.Copy(io.Discard, bufio.NewReader(c))
		close(closed)
	}()
	line := "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	for time.Since(start) < 5*time.Second {
		if _, err := c.Write([]byte(line)); err != nil {
			return true, time.Since(start)
		}
		line = "X-Slow: x\r\n"
		select {
		case <-closed:
			return true, time.Since(start)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false, time.Since(start)
}

func TestHTTPLimitsValidate(t *testing.T) {
	if err := DefaultHTTPLimits().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, edit := range []func(*HTTPLimits){
		func(l *HTTPLimits) { l.ReadHeaderTimeout = 0 },
		func(l *HTTPLimits) { l.ReadTimeout = -time.Second },
		func(l *HTTPLimits) { l.WriteTimeout = 0 },
		func(l *HTTPLimits) { l.IdleTimeout = 0 },
		func(l *HTTPLimits) { l.MaxHeaderBytes = 0 },
	} {
		cfg := DefaultConfig()
		edit(&cfg.HTTPLimits)
		if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: Validate() = %v, want ErrConfig", cfg.HTTPLimits, err)
		}
	}
}
