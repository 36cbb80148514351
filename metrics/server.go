package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// ErrConfig marks an invalid Config (a bad address, say).
var ErrConfig = errors.New("invalid metrics configuration")

// Config configures the HTTP server.
type Config struct {
	// Addr is the HOST:PORT to listen on; port 0 picks a free port. An
	// address on all interfaces (":9100") exposes pprof, which reveals the
	// command line and memory contents, to the network: prefer 127.0.0.1 or
	// a private interface.
	Addr string
	// HTTPLimits bound what one client may cost (ReadHeaderTimeout,
	// ReadTimeout, WriteTimeout, IdleTimeout, MaxHeaderBytes).
	HTTPLimits
	// ShutdownTimeout is how long Close waits for requests in flight (a
	// 30-second CPU profile, say) before it closes their connections.
	ShutdownTimeout time.Duration
	// Log receives the "metrics server listening" line and server errors.
	Log zerolog.Logger
}

// DefaultConfig returns the server's defaults, listening on a free port of
// the loopback interface.
func DefaultConfig() Config {
	return Config{
		Addr:            "127.0.0.1:0",
		HTTPLimits:      DefaultHTTPLimits(),
		ShutdownTimeout: time.Second, // a peer that is leaving should not wait for a profile
		Log:             zerolog.Nop(),
	}
}

// Validate checks the configuration; errors name the field.
func (c Config) Validate() error {
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("metrics: %w: Addr %q: want HOST:PORT (e.g. 127.0.0.1:9100): %v", ErrConfig, c.Addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("metrics: %w: Addr %q: port %q is not a number from 0 to 65535", ErrConfig, c.Addr, port)
	}
	if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		return fmt.Errorf("metrics: %w: Addr %q: host %q is not an IP address or localhost", ErrConfig, c.Addr, host)
	}
	if err := c.HTTPLimits.Validate(); err != nil {
		return fmt.Errorf("metrics: %w: %v", ErrConfig, err)
	}
	if c.ShutdownTimeout < 0 {
		return fmt.Errorf("metrics: %w: ShutdownTimeout %v: want >= 0", ErrConfig, c.ShutdownTimeout)
	}
	return nil
}

// Handler returns the server's routes on a mux of their own: /metrics
// (m's registry) and /debug/pprof/ (net/http/pprof). "/" lists them.
func Handler(m *Metrics) http.Handler {
	mux := http.NewServeMux()
	reg := m.Registry()
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/debug/pprof/", pprof.Index) // named profiles: heap, goroutine, allocs, block, mutex, …
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "gossiptrain peer\n\n/metrics       Prometheus metrics\n/debug/pprof/  Go profiles (go tool pprof http://HOST:PORT/debug/pprof/profile)\n")
	})
	return mux
}

// Server is a running metrics and pprof server.
type Server struct {
	srv     *http.Server
	addr    string
	timeout time.Duration
	done    chan error
}

// Serve listens on cfg.Addr and serves Handler(m) until Close, to
// requests that name it by IP address or localhost (AllowHosts: pprof
// shows memory and the command line, so a web page must not read it by
// DNS rebinding), within cfg.HTTPLimits.
func Serve(cfg Config, m *Metrics) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", cfg.Addr, err)
	}
	s := &Server{
		srv:     cfg.HTTPLimits.Server(AllowHosts(cfg.Addr, Handler(m))),
		addr:    ln.Addr().String(),
		timeout: cfg.ShutdownTimeout,
		done:    make(chan error, 1),
	}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if err != nil {
			cfg.Log.Error().Err(err).Msg("metrics server stopped")
		}
		s.done <- err
	}()
	cfg.Log.Info().Str("addr", s.addr).Str("metrics", "http://"+s.addr+"/metrics").
		Str("pprof", "http://"+s.addr+"/debug/pprof/").Msg("metrics server listening")
	return s, nil
}

// Addr returns the address the server listens on (with the port chosen
// when Config.Addr had port 0).
func (s *Server) Addr() string { return s.addr }

// Close stops the server: it waits up to Config.ShutdownTimeout for
// requests in flight, then closes their connections.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	if serr := <-s.done; serr != nil {
		err = errors.Join(err, serr)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("metrics: close: %w", err)
	}
	return nil
}

// Start creates Metrics and serves them on addr with the default
// configuration: the one call a peer makes. It returns the metrics, the
// address bound (the port chosen when addr has port 0) and the function
// that stops the server.
func Start(addr string, log zerolog.Logger) (*Metrics, string, func() error, error) {
	cfg := DefaultConfig()
	cfg.Addr, cfg.Log = addr, log
	m := New()
	s, err := Serve(cfg, m)
	if err != nil {
		return nil, "", nil, err
	}
	return m, s.Addr(), s.Close, nil
}
