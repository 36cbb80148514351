package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gossiptrain/gossiptrain/node"
	"github.com/gossiptrain/gossiptrain/node/membership"
	"github.com/gossiptrain/gossiptrain/node/ring"
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
