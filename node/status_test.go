package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
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
