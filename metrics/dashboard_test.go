package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
)

// getView fetches /dashboard.json from the dashboard's handler.
func getView(t *testing.T, d *Dashboard, query string) View {
	t.Helper()
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	code, body := get(t, srv.URL+"/dashboard.json"+query)
	if code != 200 {
		t.Fatalf("GET /dashboard.json%s: %d %s", query, code, body)
	}
	var v View
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, body)
	}
	return v
}

// What the training side and the node feed comes out of /dashboard.json:
// the members with their state, the ring as owner indexes, this peer's
// figures, the other members' as fetched, the evaluations and events after
// the page's cursors, the peers that left or crashed.
func TestDashboardView(t *testing.T) {
	d := NewDashboard(Info{PeerID: "peerA", Job: "ctr", Topology: "ring"})
	d.SetInfo(Info{Mode: "sync", Version: "dev"})
	d.SetLink(func(id string) string {
		if id == "peerC" {
			return LinkRelayed
		}
		return LinkDirect
	})
	d.SetFetch(func(_ context.Context, id string) (PeerFigures, error) {
		if id == "peerC" {
			return PeerFigures{}, errors.New("stream reset")
		}
		return PeerFigures{PeerID: id, State: PeerTraining, Rounds: 7, ExamplesPerSec: 1234}, nil
	})
	d.Membership(MembershipFigures{Epoch: 3, Agreed: true, Members: []string{"peerA", "peerB", "peerC"},
		Ring: []string{"peerB", "peerA", "peerA", "peerC"}, Joined: []string{"peerB", "peerC"}})
	d.Configuration(ConfigFigures{Config: 1, Start: 0, Members: []string{"peerA", "peerB", "peerC"}, Owned: 2})
	d.Round(RoundFigures{Rounds: 1, Examples: 100, WaitSeconds: 0.5, BytesSent: 1000, BytesRecv: 900})
	d.Round(RoundFigures{Rounds: 2, Examples: 200, WaitSeconds: 0.25, BytesSent: 2000, BytesRecv: 1800})
	d.Totals(Totals{Repaired: 3, Rejected: map[string]uint64{"nan": 2}})
	d.Eval(EvalFigures{LogLoss: 0.6, Error: 0.3, AUC: 0.7, Examples: 100, Seconds: 1})
	d.Eval(EvalFigures{LogLoss: 0.5, Error: 0.25, AUC: math.NaN(), Examples: 200, Seconds: 2})

	v := getView(t, d, "")
	if v.PeerID != "peerA" || v.Job != "ctr" || v.Topology != "ring" || v.Mode != "sync" || v.Epoch != 3 || !v.Agreed {
		t.Errorf("run: %+v", v)
	}
	if want := []int{1, 0, 0, 2}; !equalInts(v.Ring, want) {
		t.Errorf("ring %v, want owner indexes %v", v.Ring, want)
	}
	if len(v.Peers) != 3 {
		t.Fatalf("%d peers, want 3", len(v.Peers))
	}
	a, b, c := v.Peers[0], v.Peers[1], v.Peers[2]
	if a.PeerID != "peerA" || a.State != PeerTraining || a.Link != LinkSelf || a.Rounds != 2 || a.Examples != 200 ||
		a.WaitSeconds != 0.75 || a.SentBytes != 2000 || a.OwnedShards != 2 || a.Repaired != 3 || a.Rejected["nan"] != 2 {
		t.Errorf("this peer: %+v", a)
	}
	if b.PeerID != "peerB" || b.State != PeerTraining || b.Rounds != 7 || b.ExamplesPerSec != 1234 || b.Link != LinkDirect {
		t.Errorf("a member that answered: %+v", b)
	}
	if c.PeerID != "peerC" || c.State != PeerNoAnswer || !strings.Contains(c.Error, "stream reset") || c.Link != LinkRelayed {
		t.Errorf("a member that did not answer: %+v", c)
	}
	if len(v.Evals) != 2 || v.Evals[0].LogLoss != 0.6 || v.Evals[1].Examples != 200 || v.Evals[0].AUC == nil || *v.Evals[0].AUC != 0.7 || v.Evals[1].AUC != nil {
		t.Errorf("evals: %+v", v.Evals)
	}
	kinds := []string{}
	for _, e := range v.Events {
		kinds = append(kinds, e.Kind)
	}
	if strings.Join(kinds, ",") != "start,join,join,config" {
		t.Errorf("events %v, want start, two joins, a configuration", kinds)
	}
	if !strings.Contains(v.Events[3].Text, "configuration 1 from round 0: 3 workers") {
		t.Errorf("configuration event: %q", v.Events[3].Text)
	}

	// The page's cursors: only what is new.
	d.Eval(EvalFigures{LogLoss: 0.45, Examples: 300, Seconds: 3})
	d.Membership(MembershipFigures{Epoch: 4, Agreed: true, Members: []string{"peerA", "peerB"},
		Ring: []string{"peerB", "peerA", "peerA", "peerB"}, Died: []string{"peerC"}})
	v2 := getView(t, d, "?evals=2&events=4")
	if len(v2.Evals) != 1 || v2.Evals[0].Seq != 3 || v2.Evals[0].LogLoss != 0.45 {
		t.Errorf("evals after 2: %+v", v2.Evals)
	}
	if len(v2.Events) != 1 || v2.Events[0].Kind != "crash" || !strings.Contains(v2.Events[0].Text, "…") && !strings.Contains(v2.Events[0].Text, "peerC") {
		t.Errorf("events after 4: %+v", v2.Events)
	}
	// The crashed peer stays listed, after the members.
	if len(v2.Peers) != 3 || v2.Peers[2].PeerID != "peerC" || v2.Peers[2].State != PeerCrashed {
		t.Errorf("peers after a crash: %+v", v2.Peers)
	}
	d.Finished(SummaryFigures{Rounds: 10, Examples: 1000})
	if s := d.Self(); s.State != PeerDone || s.Rounds != 10 {
		t.Errorf("after Finished: %+v", s)
	}
}

// The page and its assets are embedded and served.
func TestDashboardPage(t *testing.T) {
	srv := httptest.NewServer(NewDashboard(Info{PeerID: "p"}).Handler())
	defer srv.Close()
	for _, c := range []struct{ path, want string }{
		{"/", `<svg id="chart-loss"`},
		{"/app.js", "dashboard.json?evals="},
		{"/style.css", ".chart"},
	} {
		code, body := get(t, srv.URL+c.path)
		if code != 200 || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d, body without %q", c.path, code, c.want)
		}
	}
	// Nothing from outside: no CDN, no remote font.
	for _, p := range []string{"/", "/app.js", "/style.css"} {
		_, body := get(t, srv.URL+p)
		if strings.Contains(body, "http://") && !strings.Contains(body, "http://www.w3.org/2000/svg") || strings.Contains(body, "https://") {
			t.Errorf("%s refers to another site: the page must work offline", p)
		}
	}
	if code, _ := get(t, srv.URL+"/nothing"); code != 404 {
		t.Errorf("GET /nothing: %d, want 404", code)
	}
}

// A nil dashboard (a peer without a status server) takes every call.
func TestNilDashboard(t *testing.T) {
	var d *Dashboard
	d.SetInfo(Info{})
	d.Round(RoundFigures{})
	d.Eval(EvalFigures{})
	d.Totals(Totals{})
	d.Configuration(ConfigFigures{})
	d.Membership(MembershipFigures{})
	d.Finished(SummaryFigures{})
	d.Event("x", "y")
	if s := d.Self(); s.PeerID != "" {
		t.Errorf("nil Self: %+v", s)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
