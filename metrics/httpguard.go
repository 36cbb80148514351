package metrics

// What every HTTP server of a peer (this package's metrics and pprof
// server, and node's status and dashboard server) does before a handler
// runs: it bounds what one client may cost, and it answers only requests
// that name it in a way a web page cannot fake.

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// HTTPLimits bound what one client may cost a peer's HTTP server: a client
// that never finishes its request (slowloris) or never reads the answer
// holds a connection and a goroutine for at most these times.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds how long a client may take to send its
	// request headers, so idle half-open connections cannot pile up.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request (headers and body).
	ReadTimeout time.Duration
	// WriteTimeout bounds writing an answer. Nothing these servers answer
	// streams: the dashboard polls /dashboard.json once a second, and a
	// CPU profile or trace (/debug/pprof/profile?seconds=N) extends its
	// own deadline by its N seconds (net/http/pprof does).
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection with no request for so
	// long (a dashboard polls every second, so it keeps its connection).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (net/http adds 4 KiB).
	MaxHeaderBytes int
}

// DefaultHTTPLimits are generous for a scraper, a browser or a CLI on a
// slow link, and short for a stuck or hostile client.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// Browsers send every cookie of "localhost" (any port) to a
		// peer on localhost: room for a developer's pile of them.
		MaxHeaderBytes: 128 << 10,
	}
}

// Validate checks that every limit is set; errors name the field.
func (l HTTPLimits) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ReadHeaderTimeout", l.ReadHeaderTimeout}, {"ReadTimeout", l.ReadTimeout}, {"WriteTimeout", l.WriteTimeout}, {"IdleTimeout", l.IdleTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("%s %v: want > 0", d.name, d.v)
		}
	}
	if l.MaxHeaderBytes <= 0 {
		return fmt.Errorf("MaxHeaderBytes %d: want > 0", l.MaxHeaderBytes)
	}
	return nil
}

// Server returns an http.Server of h with these limits.
func (l HTTPLimits) Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// AllowHosts answers with h only the requests whose Host header names the
// server as a web page cannot have made it name it: "localhost", an IP
// address (any: the listen address, 127.0.0.1, [::1], a public address
// that NAT or a port forward maps to this machine), or the host name of
// listen (the configured HOST:PORT) when it is one. Any port is accepted
// (an SSH tunnel changes it). Every other name gets 421 Misdirected
// Request and a message that says how to reach the server.
//
// This stops DNS rebinding: a page on evil.example whose name is made to
// resolve to 127.0.0.1 (or to the peer's address) is, to the browser, of
// the origin evil.example, so it may read what its requests answer; but
// those requests say "Host: evil.example", and are refused. A page cannot
// make a browser send an IP address or "localhost" as Host without being
// of that origin itself. Requests without a Host (HTTP/1.0 clients, never
// a browser) are answered. (TestAllowHosts, and node's
// TestStatusServerRefusesOtherHosts.)
func AllowHosts(listen string, h http.Handler) http.Handler {
	own := ""
	if host, _, err := net.SplitHostPort(listen); err == nil {
		if _, err := netip.ParseAddr(host); err != nil && host != "" {
			own = canonicalHost(host)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hostAllowed(r.Host, own) {
			h.ServeHTTP(w, r)
			return
		}
		port := "" // the port the request came in on (listen may say 0)
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if _, p, err := net.SplitHostPort(a.String()); err == nil {
				port = ":" + p
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusMisdirectedRequest)
		fmt.Fprintf(w, "gossiptrain: this server answers requests for localhost or an IP address, not for %q: a name that is not this server's own could be a web page's, reaching it by DNS rebinding.\nOpen it as http://127.0.0.1%s/ on this machine, or http://<this machine's IP address>%s/ from another.\n", r.Host, port, port)
	})
}

// hostAllowed is AllowHosts' rule for one Host header.
func hostAllowed(hostport, own string) bool {
	if hostport == "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	c := canonicalHost(host)
	return c == "localhost" || c != "" && c == own
}

// canonicalHost lower-cases a DNS name and drops one trailing dot.
func canonicalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }
