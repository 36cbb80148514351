package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/metrics"
)

// The status server shows the dashboard at "/" (and /status as before);
// its feed lists every member with the figures each member's own
// dashboard holds, fetched over FiguresProtocol, and the ring.
func TestDashboardOnStatusServer(t *testing.T) {
	log, _ := testLog(t)
	cfg := fastConfig("dash")
	cfg.StatusAddr = "127.0.0.1:0"
	nodes := startCluster(t, 2, cfg, log)
	waitFor(t, 10*time.Second, agreed(nodes))
	nodes[1].Dashboard().Round(metrics.RoundFigures{Rounds: 42, Examples: 4200, BytesSent: 1e6})
	get := func(path string) string {
		resp, err := http.Get("http://" + nodes[0].StatusAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return string(b)
	}
	if page := get("/"); !strings.Contains(page, `id="chart-loss"`) {
		t.Errorf("GET / is not the dashboard:\n%.300s", page)
	}
	var st Status
	if err := json.Unmarshal([]byte(get("/status")), &st); err != nil || st.PeerID != nodes[0].Self().String() {
		t.Errorf("GET /status: %v %+v", err, st)
	}
	var v metrics.View
	waitFor(t, 10*time.Second, func() (bool, string) {
		if err := json.Unmarshal([]byte(get("/dashboard.json")), &v); err != nil {
			return false, err.Error()
		}
		if len(v.Peers) != 2 {
			return false, fmt.Sprintf("%d peers on the dashboard", len(v.Peers))
		}
		other := v.Peers[0]
		if other.PeerID == nodes[0].Self().String() {
			other = v.Peers[1]
		}
		if other.PeerID != nodes[1].Self().String() || other.Rounds != 42 || other.Examples != 4200 || other.Link != metrics.LinkDirect {
			return false, fmt.Sprintf("the other member's row: %+v", other)
		}
		return true, ""
	})
	if len(v.Ring) != 64 || len(v.Members) != 2 || !v.Agreed {
		t.Errorf("ring of %d shards, %d members, agreed %v", len(v.Ring), len(v.Members), v.Agreed)
	}
	owners := map[int]int{}
	for _, o := range v.Ring {
		owners[o]++
	}
	if owners[0] == 0 || owners[1] == 0 || owners[-1] != 0 {
		t.Errorf("ring owners by index: %v, want both members and no unowned shard", owners)
	}
	kinds := map[string]bool{}
	for _, e := range v.Events {
		kinds[e.Kind] = true
	}
	if !kinds["start"] || !kinds["join"] {
		t.Errorf("events %+v lack the start and the other member's join", v.Events)
	}
}
