package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleStatus() Status {
	return Status{
		PeerID: selfID, Addrs: []string{"/ip4/10.0.0.5/tcp/4001/p2p/" + selfID},
		Job: "ctr1", Epoch: 7, SetHash: "0x0000000000000001",
		Members:     []string{selfID, authorID},
		OwnedShards: []int{0, 3},
		Topology:    "ring", Shards: 4, Replicas: 1,
		ShardCounts: map[string]int{selfID: 2, authorID: 2},
		RingHash:    "0x00000000000000ff", Agreed: true, MinPeers: 2, Reached: true,
		Rejected: 3, RejectedBy: map[string]uint64{"job": 1, "replay": 2},
	}
}

// TestStatusJSONNames pins the field names tools read.
func TestStatusJSONNames(t *testing.T) {
	raw, err := json.Marshal(sampleStatus())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"peer_id":      selfID,
		"addrs":        []any{"/ip4/10.0.0.5/tcp/4001/p2p/" + selfID},
		"epoch":        7.0,
		"members":      []any{selfID, authorID},
		"owned_shards": []any{0.0, 3.0},
		"topology":     "ring",
		"agreed":       true,
		"ring_hash":    "0x00000000000000ff",
		"rejected":     3.0,
	}
	for k, w := range want {
		if !reflect.DeepEqual(m[k], w) {
			t.Errorf("%s = %#v, want %#v", k, m[k], w)
		}
	}
	// An empty ownership is [] (not null) when Status fills it.
	var s Status
	s.OwnedShards = []int{}
	raw, _ = json.Marshal(s)
	if !strings.Contains(string(raw), `"owned_shards":[]`) {
		t.Errorf("empty owned_shards encodes as %s", raw)
	}
}

func TestStatusURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7070":               "http://127.0.0.1:7070/status",
		"http://10.0.0.5:7070":         "http://10.0.0.5:7070/status",
		"http://10.0.0.5:7070/status":  "http://10.0.0.5:7070/status",
		"https://gt.example/x/status":  "https://gt.example/x/status",
		"[::1]:7070":                   "http://[::1]:7070/status",
		"localhost:7070":               "http://localhost:7070/status",
		"http://localhost:7070/other/": "http://localhost:7070/other/",
	} {
		if got := statusURL(in); got != want {
			t.Errorf("statusURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFetchStatus(t *testing.T) {
	want := sampleStatus()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/status":
			json.NewEncoder(w).Encode(want)
		case "/garbage/status":
			fmt.Fprint(w, "<html>nope</html>")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	got, err := FetchStatus(ctx, strings.TrimPrefix(srv.URL, "http://"))
	if err != nil || !reflect.DeepEqual(*got, want) {
		t.Fatalf("FetchStatus = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{srv.URL + "/garbage/status", srv.URL + "/missing", "127.0.0.1:1"} {
		if _, err := FetchStatus(ctx, bad); !errors.Is(err, ErrStatus) {
			t.Errorf("FetchStatus(%s) = %v, want ErrStatus", bad, err)
		}
	}
}

func TestStatusWriteText(t *testing.T) {
	s := sampleStatus()
	var b strings.Builder
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		lines[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, want := range []string{
		"peer " + selfID,
		"epoch 7 (agreed, set 0x0000000000000001)",
		"owned 2 shards",
		"rejected 3 (job 1, replay 2)",
		"MEMBERS (2) SHARDS",
		selfID + " 2 (this peer)",
		authorID + " 2",
		"/ip4/10.0.0.5/tcp/4001/p2p/" + selfID,
	} {
		if !lines[want] {
			t.Errorf("text output lacks the line %q:\n%s", want, out)
		}
	}
}

// getWithHost sends GET url with the Host header host.
func getWithHost(t *testing.T, url, host string) (int, string) {
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

// The status server answers only requests that name it by IP address or
// localhost: a web page on evil.example rebound to the peer's address
// gets 421 for the status, the dashboard and its feed, so it cannot read
// them. FetchStatus given a host name resolves it and asks by address.
func TestStatusServerRefusesOtherHosts(t *testing.T) {
	log, _ := testLog(t)
	cfg := fastConfig("hosts")
	cfg.StatusAddr = "127.0.0.1:0"
	n := startNode(t, cfg, log, "n0")
	addr := n.StatusAddr()
	_, port, _ := net.SplitHostPort(addr)
	for _, path := range []string{"/status", "/", "/dashboard.json"} {
		for host, ok := range map[string]bool{
			"127.0.0.1:" + port: true, "localhost:" + port: true, "[::1]:" + port: true,
			"evil.example": false, "evil.example:" + port: false,
		} {
			code, body := getWithHost(t, "http://"+addr+path, host)
			if ok && code != http.StatusOK || !ok && (code != http.StatusMisdirectedRequest || strings.Contains(body, n.Self().String())) {
				t.Errorf("GET %s with Host %q: %d, want allowed=%v:\n%.200s", path, host, code, ok, body)
			}
		}
	}
	ctx := context.Background()
	if st, err := FetchStatus(ctx, "localhost:"+port); err != nil || st.PeerID != n.Self().String() {
		t.Errorf("FetchStatus(localhost:%s) = %+v, %v", port, st, err)
	}
	// This machine's name, when it resolves to a loopback address (it
	// does on Debian, through /etc/hosts), reaches the server too.
	name, _ := os.Hostname()
	ips, _ := net.LookupHost(name)
	if len(ips) == 0 || !net.ParseIP(ips[0]).IsLoopback() {
		t.Logf("%q does not resolve to a loopback address (%v): FetchStatus by name not checked", name, ips)
		return
	}
	if st, err := FetchStatus(ctx, name+":"+port); err != nil || st.PeerID != n.Self().String() {
		t.Errorf("FetchStatus(%s:%s) = %+v, %v: want the status, asked by address", name, port, st, err)
	}
}

// A client that sends its headers a line at a time and never finishes
// them (slowloris) is cut off after the status server's
// ReadHeaderTimeout, while it still sends.
func TestStatusServerCutsOffSlowHeaders(t *testing.T) {
	saved := statusLimits
	statusLimits.ReadHeaderTimeout = 300 * time.Millisecond
	t.Cleanup(func() { statusLimits = saved })
	log, _ := testLog(t)
	cfg := fastConfig("slowloris")
	cfg.StatusAddr = "127.0.0.1:0"
	n := startNode(t, cfg, log, "n0")
	c, err := net.Dial("tcp", n.StatusAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, c) // the server closes without answering
		close(closed)
	}()
	line := "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	for {
		if _, err := c.Write([]byte(line)); err != nil {
			break
		}
		line = "X-Slow: x\r\n"
		select {
		case <-closed:
		case <-time.After(50 * time.Millisecond):
			if time.Since(start) < 5*time.Second {
				continue
			}
		}
		break
	}
	select {
	case <-closed:
	default:
		t.Fatalf("a client trickling its headers for %v is still connected; want it cut off after about 300ms", time.Since(start))
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("a client trickling its headers was cut off after %v; want about 300ms", took)
	}
}
