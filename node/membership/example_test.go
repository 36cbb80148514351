package membership_test

import (
	"fmt"
	"time"

	"github.com/gossiptrain/gossiptrain/node/membership"
)

// Two peers find each other: the driver passes each one's beats to the other
// and calls Tick when Ready.Next says. The network here is a direct hand-off.
func Example() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	newPeer := func(id string) *membership.Membership {
		cfg := membership.DefaultConfig()
		cfg.Self, cfg.Job, cfg.Incarnation = id, "ctr-job", 1
		m, err := membership.New(cfg, start)
		if err != nil {
			panic(err)
		}
		return m
	}
	a, b := newPeer("peerA"), newPeer("peerB")

	now := start
	// Ready.Send is reused by the next call: copy the beats out.
	pending := append([]membership.Beat{}, a.Tick(now).Send...) // a's Join
	pending = append(pending, b.Tick(now).Send...)              // b's Join
	// Deliver beats in order until nobody has anything to say: each Join
	// changes the receiver's set (epoch 2) and makes it beat at once; each
	// of those beats shows the other side that the view is shared.
	for len(pending) > 0 {
		now = now.Add(100 * time.Millisecond)
		beat := pending[0]
		pending = pending[1:]
		to, name := a, "peerA"
		if beat.From == "peerA" {
			to, name = b, "peerB"
		}
		rd := to.Receive(beat, now)
		fmt.Printf("%v %s hears %s's %s: epoch %d members %v agreed %v\n",
			now.Sub(start), name, beat.From, beat.Kind, rd.View.Epoch, rd.View.Members, rd.Agreed)
		pending = append(pending, rd.Send...)
	}
	fmt.Println("a agreed:", a.Agreed(), "b agreed:", b.Agreed())
	// Output:
	// 100ms peerB hears peerA's join: epoch 2 members [peerA peerB] agreed false
	// 200ms peerA hears peerB's join: epoch 2 members [peerA peerB] agreed false
	// 300ms peerA hears peerB's alive: epoch 2 members [peerA peerB] agreed true
	// 400ms peerB hears peerA's alive: epoch 2 members [peerA peerB] agreed true
	// a agreed: true b agreed: true
}
