package wire

import (
	"encoding/binary"
	"fmt"
)

// ControlOp is what a control request asks. Control messages travel on a
// direct stream (/gossiptrain/control/1): a KindControl request, then a
// KindControlReply, then for snapshots and handoffs the bulk payload as
// frames (AppendFrame). The numbers are protocol: append only.
type ControlOp uint8

// Control operations.
const (
	// OpStatus asks whether the peer trains, with which configuration,
	// at which round, and who coordinates.
	OpStatus ControlOp = 1
	// OpJoin asks the coordinator to add the sender as a worker.
	OpJoin ControlOp = 2
	// OpLeave asks the coordinator to remove the sender gracefully.
	OpLeave ControlOp = 3
	// OpSnapshot asks for the sender's full read copy of the model (and the
	// rounds it includes) once it has completed Control.Round-1.
	OpSnapshot ControlOp = 4
	// OpHandoff asks the owner of Control.Shards for their weights and
	// optimizer state as of the end of round Control.Round-1.
	OpHandoff ControlOp = 5
	opLast              = OpHandoff
)

func (o ControlOp) String() string {
	switch o {
	case OpStatus:
		return "status"
	case OpJoin:
		return "join"
	case OpLeave:
		return "leave"
	case OpSnapshot:
		return "snapshot"
	case OpHandoff:
		return "handoff"
	}
	return fmt.Sprintf("op-%d", uint8(o))
}

// Control is a control request (KindControl).
type Control struct {
	Op     ControlOp
	Round  uint64   // snapshot, handoff: the first round the requester needs the state for
	Config uint64   // the requester's configuration ID (0: none)
	Shards []uint32 // handoff: the shards wanted, strictly ascending
}

// ControlStatus is the outcome of a control request.
type ControlStatus uint8

// Control statuses.
const (
	StatusOK          ControlStatus = 1 // done; a payload may follow
	StatusPending     ControlStatus = 2 // accepted, not done yet: ask again
	StatusRefused     ControlStatus = 3 // Reason says why
	StatusNotTraining ControlStatus = 4 // the peer runs no training (yet)
	statusLast                      = StatusNotTraining
)

// ControlReply is the answer to a Control request (KindControlReply).
type ControlReply struct {
	Op          ControlOp
	Status      ControlStatus
	Reason      string
	Round       uint64      // status: the peer's worker clock; snapshot, handoff: the round the state ends before
	Coordinator string      // status: the peer the sender believes coordinates
	Config      TrainConfig // status, join: the newest configuration the peer knows
	Frames      uint64      // bulk payload frames that follow
}

// AppendControl appends a control request.
func (c *Codec) AppendControl(dst []byte, h Header, m *Control) ([]byte, error) {
	if m.Op < OpStatus || m.Op > opLast {
		return dst, fmt.Errorf("%w: control op %d", ErrRange, m.Op)
	}
	if len(m.Shards) > c.lim.MaxList {
		return dst, fmt.Errorf("%w: control of %d shards, limit %d", ErrTooLarge, len(m.Shards), c.lim.MaxList)
	}
	raw := append(c.raw[:0], byte(m.Op))
	raw = binary.AppendUvarint(raw, m.Round)
	raw = binary.AppendUvarint(raw, m.Config)
	raw = binary.AppendUvarint(raw, uint64(len(m.Shards)))
	for i, s := range m.Shards {
		if i > 0 && s <= m.Shards[i-1] {
			return dst, fmt.Errorf("%w: control shard %d not after %d", ErrMalformed, s, m.Shards[i-1])
		}
		raw = binary.AppendUvarint(raw, uint64(s))
	}
	c.raw = raw
	body, flags, err := c.finishBody(KindControl)
	if err != nil {
		return dst, err
	}
	return c.assemble(dst, &h, KindControl, flags, body)
}

// AppendControlReply appends a control reply.
func (c *Codec) AppendControlReply(dst []byte, h Header, m *ControlReply) ([]byte, error) {
	if m.Op < OpStatus || m.Op > opLast || m.Status < StatusOK || m.Status > statusLast {
		return dst, fmt.Errorf("%w: control reply op %d status %d", ErrRange, m.Op, m.Status)
	}
	for _, s := range []string{m.Reason, m.Coordinator} {
		if len(s) > c.lim.MaxString {
			return dst, fmt.Errorf("%w: control reply string of %d bytes, limit %d", ErrTooLarge, len(s), c.lim.MaxString)
		}
	}
	raw := append(c.raw[:0], byte(m.Op), byte(m.Status))
	raw = appendString(raw, m.Reason)
	raw = binary.AppendUvarint(raw, m.Round)
	raw = appendString(raw, m.Coordinator)
	raw = binary.AppendUvarint(raw, m.Frames)
	raw, err := c.appendConfig(raw, &m.Config)
	if err != nil {
		return dst, err
	}
	c.raw = raw
	body, flags, err := c.finishBody(KindControlReply)
	if err != nil {
		return dst, err
	}
	return c.assemble(dst, &h, KindControlReply, flags, body)
}

func (c *Codec) readControl(body []byte, m *Control) error {
	if len(body) < 1 {
		return fmt.Errorf("%w: empty control body", ErrMalformed)
	}
	m.Op = ControlOp(body[0])
	if m.Op < OpStatus || m.Op > opLast {
		return fmt.Errorf("%w: control op %d", ErrRange, m.Op)
	}
	r := cursor{c: c, b: body, pos: 1}
	m.Round = r.uvarint("round")
	m.Config = r.uvarint("config")
	n := r.uvarint("shard count")
	m.Shards = m.Shards[:0]
	if r.err != nil {
		return r.err
	}
	if n > uint64(c.lim.MaxList) {
		return fmt.Errorf("%w: control of %d shards, limit %d", ErrTooLarge, n, c.lim.MaxList)
	}
	if n > uint64(len(body)-r.pos) { // every shard takes at least one byte
		return fmt.Errorf("%w: control of %d shards in %d bytes", ErrMalformed, n, len(body)-r.pos)
	}
	for i := uint64(0); i < n; i++ {
		s := r.uvarint("shard")
		if r.err != nil {
			return r.err
		}
		if s > 1<<32-1 || (i > 0 && uint32(s) <= m.Shards[i-1]) {
			return fmt.Errorf("%w: control shard %d out of order or range", ErrMalformed, s)
		}
		m.Shards = append(m.Shards, uint32(s))
	}
	return r.end()
}

func (c *Codec) readControlReply(body []byte, m *ControlReply) error {
	if len(body) < 2 {
		return fmt.Errorf("%w: control reply of %d bytes", ErrMalformed, len(body))
	}
	m.Op, m.Status = ControlOp(body[0]), ControlStatus(body[1])
	if m.Op < OpStatus || m.Op > opLast || m.Status < StatusOK || m.Status > statusLast {
		return fmt.Errorf("%w: control reply op %d status %d", ErrRange, m.Op, m.Status)
	}
	r := cursor{c: c, b: body, pos: 2}
	m.Reason = r.str("reason")
	m.Round = r.uvarint("round")
	m.Coordinator = r.str("coordinator")
	m.Frames = r.uvarint("frames")
	r.config(&m.Config)
	return r.end()
}
