package job

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node"
	"github.com/gossiptrain/gossiptrain/node/membership"
	"github.com/gossiptrain/gossiptrain/node/ring"
	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/peerlog"
)

// scriptedStates plays a list of states to waitAgreed: its k-th State call
// returns the k-th state (the last one from then on), and one event waits
// in the channel for every state after the first.
type scriptedStates struct {
	mu     sync.Mutex
	script []node.State
	calls  int
	events chan node.Event
}

func newScripted(states ...node.State) *scriptedStates {
	s := &scriptedStates{script: states, events: make(chan node.Event, len(states))}
	for range states[1:] {
		s.events <- node.Event{}
	}
	return s
}

func (s *scriptedStates) Subscribe() (<-chan node.Event, func()) { return s.events, func() {} }

func (s *scriptedStates) State() node.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.script[min(s.calls, len(s.script)-1)]
	s.calls++
	return st
}

func view(agreed bool, members ...string) node.State {
	return node.State{View: membership.View{Epoch: 1, Members: members}, Ring: new(ring.Ring), Agreed: agreed}
}

func TestWaitAgreed(t *testing.T) {
	tests := []struct {
		name    string
		min     int
		boot    []string
		states  []node.State
		members int    // of the state returned; 0 = an error
		err     string // in the error
	}{
		{"alone first, then with the bootstrap peer", 1, []string{"b"},
			[]node.State{view(true, "me"), view(false, "b", "me"), view(true, "b", "me")}, 2, ""},
		{"no bootstrap peers: alone is enough", 1, nil, []node.State{view(true, "me")}, 1, ""},
		{"met the run, then everyone left: the run ended", 1, []string{"b"},
			[]node.State{view(false, "b", "c", "me"), view(false, "b", "me"), view(true, "me")}, 0, "left before it could join"},
		{"met the run, the bootstrap peer died, another is left: join it", 1, []string{"b"},
			[]node.State{view(false, "b", "c", "me"), view(true, "c", "me")}, 2, ""},
		{"never met anyone: wait until the context ends", 1, []string{"b"},
			[]node.State{view(true, "me")}, 0, "waiting for the members to agree"},
		{"too few members: wait", 3, nil,
			[]node.State{view(true, "c", "me")}, 0, "waiting for the members to agree"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			st, err := waitAgreed(ctx, newScripted(tt.states...), tt.min, tt.boot)
			if tt.members == 0 {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one saying %q", err, tt.err)
				}
				return
			}
			if err != nil || len(st.View.Members) != tt.members {
				t.Fatalf("returned %v with %d members (%v), want %d members", err, len(st.View.Members), st.View.Members, tt.members)
			}
		})
	}
}

// diagnosed is a scripted node with a fixed diagnosis.
type diagnosed struct {
	*scriptedStates
	d node.Diagnosis
}

func (d diagnosed) Diagnose() node.Diagnosis { return d.d }

func TestWaitForCluster(t *testing.T) {
	refused := &node.IncompatibleError{Job: "j", Peer: "12D3KooWLongPeerIdentityABCxyz",
		Mismatches: []node.Mismatch{{Setting: "--dim", Ours: "7", Theirs: "9"}}}
	boot := []node.BootstrapPeer{{ID: "b", Failures: 3, LastError: "connection refused", Hint: "nothing listens"}}
	tests := []struct {
		name    string
		n       diagnosed
		timeout time.Duration
		err     []string // nil: the cluster forms
	}{
		{"formed", diagnosed{newScripted(view(true, "b", "me")), node.Diagnosis{}}, 0, nil},
		{"refused by its bootstrap peer: fail at once, naming the flag and both values",
			diagnosed{newScripted(view(true, "me")), node.Diagnosis{Refused: []node.Refusal{{ID: "b", Bootstrap: true, Err: refused}}}},
			0, []string{"a --peer refused this peer", "--dim: this peer 7, peer 12D3…ABCxyz 9"}},
		{"refused a peer that dialled it: keep waiting until the timeout, then say why",
			diagnosed{newScripted(view(true, "me")), node.Diagnosis{Job: "j", Members: 1, MinPeers: 2,
				Refused: []node.Refusal{{ID: "c", Err: refused, At: time.Now()}}}},
			300 * time.Millisecond, []string{"did not form within --wait-timeout 300ms", "1 of --min-peers 2 members", "refused peer", "--dim: this peer 7"}},
		{"refused a peer that dialled it: the grace, not --wait-timeout, then fail naming it and the setting",
			diagnosed{newScripted(view(true, "me")), node.Diagnosis{Job: "j", Members: 1, MinPeers: 2,
				Refused: []node.Refusal{{ID: "12D3KooWLongPeerIdentityABCxyz", Err: refused, At: time.Now()}}}},
			0, []string{"refused peer 12D3…ABCxyz at connect, and the cluster did not form without it within 200ms", "--dim: this peer 7"}},
		{"a dead bootstrap peer: the timeout names the dial error",
			diagnosed{newScripted(view(true, "me")), node.Diagnosis{Job: "j", Members: 1, MinPeers: 1, Agreed: true, Bootstrap: boot}},
			300 * time.Millisecond, []string{"--wait-timeout 300ms", "--peer b: 3 dials failed, the last: connection refused (nothing listens)"}},
	}
	defer func(g time.Duration) { refusedGrace = g }(refusedGrace)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refusedGrace = RefusedGrace
			if strings.Contains(tt.name, "grace") {
				refusedGrace = 200 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var logs bytes.Buffer
			st, err := waitForCluster(ctx, tt.n, 1, []string{"b"}, tt.timeout, 50*time.Millisecond, zerolog.New(&logs))
			if tt.err == nil {
				if err != nil || len(st.View.Members) != 2 {
					t.Fatalf("waitForCluster = %v, %v; want the 2-member view", st.View.Members, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("waitForCluster returned %v, want an error", st.View.Members)
			}
			for _, w := range tt.err {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tt.timeout > 0 && !strings.Contains(logs.String(), peerlog.StillWaiting) {
				t.Errorf("no %q line while waiting:\n%s", peerlog.StillWaiting, logs.String())
			}
		})
	}
}

// The hello's settings are the model's effective ones: inferred and
// default values, not the literal flags; --l2 (per peer with --l2 auto)
// is left out.
func TestJobSpec(t *testing.T) {
	m, err := model.NewMLP(784, 10, 64, 256, model.DefaultOptConfig(model.AdaGrad), 7)
	if err != nil {
		t.Fatal(err)
	}
	m.LabelBase = 1
	got := map[string]string{}
	for _, it := range jobSpec(m, Dist{Mode: train.SSP, Staleness: 3, Gather: train.Need, InitSeed: 7}, 100) {
		got[it.Flag] = it.Value
	}
	want := map[string]string{"mode": "ssp", "staleness": "3", "gather": "need", "model": "mlp", "dim": "784", "classes": "10", "label-base": "1",
		"hidden": "64", "shards": "256", "optimizer": "adagrad", "lr": "0.1", "init-seed": "7"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("--%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["l2"]; ok {
		t.Error("--l2 is in the hello: --l2 auto may differ between honest peers")
	}
	if err := jobSpec(m, Dist{Mode: train.Sync, Gather: train.Full, InitSeed: 1}, 100).Validate(); err != nil {
		t.Error(err)
	}
	eff := effectiveSettings(m)
	if eff["lr"] != "0.1" || eff["classes"] != "10" || eff["l2"] == "" {
		t.Errorf("effective settings %v: want lr 0.1, classes 10 and l2", eff)
	}
}
