package wire

import (
	"errors"
	"reflect"
	"testing"
)

// Control requests and replies survive a round trip exactly, and bad ones
// are refused with the right sentinel.
func TestControlRoundTrip(t *testing.T) {
	c := NewCodec(F32, None, DefaultLimits())
	var m Message
	req := Control{Op: OpHandoff, Round: 41, Config: 7, Shards: []uint32{0, 5, 255}}
	b, err := c.AppendControl(nil, testHeader(), &req)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Decode(b, &m); err != nil || m.Kind != KindControl || !reflect.DeepEqual(m.Control, req) {
		t.Fatalf("control round trip: %v, %+v", err, m.Control)
	}
	rep := ControlReply{Op: OpJoin, Status: StatusPending, Reason: "next round", Round: 9, Coordinator: peerID, Config: testAck.Config, Frames: 2}
	if b, err = c.AppendControlReply(nil, testHeader(), &rep); err != nil {
		t.Fatal(err)
	}
	if err := c.Decode(b, &m); err != nil || m.Kind != KindControlReply || !reflect.DeepEqual(m.ControlReply, rep) {
		t.Fatalf("control reply round trip: %v, %+v", err, m.ControlReply)
	}
	for _, bad := range []Control{{Op: 0}, {Op: 99}} {
		if _, err := c.AppendControl(nil, testHeader(), &bad); !errors.Is(err, ErrRange) {
			t.Errorf("op %d: %v, want ErrRange", bad.Op, err)
		}
	}
	if _, err := c.AppendControl(nil, testHeader(), &Control{Op: OpHandoff, Shards: []uint32{3, 3}}); !errors.Is(err, ErrMalformed) {
		t.Errorf("repeated shard: %v, want ErrMalformed", err)
	}
	// Truncations of a valid request never decode.
	b, _ = c.AppendControl(nil, testHeader(), &req)
	for i := range b {
		if err := c.Decode(b[:i], &m); err == nil {
			t.Fatalf("truncated control of %d bytes decoded", i)
		}
	}
}
