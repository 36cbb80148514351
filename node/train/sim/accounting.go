package sim

import (
	"slices"
	"sort"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// encoder encodes messages with the wire codec (its default float32
// values, no compression, limits wide enough for any run) into one buffer
// it reuses: what it returns holds until the next encode.
type encoder struct {
	codec *wire.Codec
	buf   []byte
}

func newEncoder() *encoder {
	lim := wire.DefaultLimits()
	lim.MaxMessage = 64 << 20
	lim.MaxRows = 1 << 24
	lim.MaxValues = 1 << 26
	return &encoder{codec: wire.NewCodec(wire.F32, wire.None, lim)}
}

// encode encodes m as peer from sends it.
func (e *encoder) encode(from string, m *wire.Core) ([]byte, error) {
	b, err := e.codec.AppendCore(e.buf[:0], wire.Header{Job: "sim", Sender: from}, m)
	if err != nil {
		return nil, err
	}
	e.buf = b
	return b, nil
}

// decode decodes b into m.
func (e *encoder) decode(b []byte, m *wire.Message) error { return e.codec.Decode(b, m) }

// accounting counts the traffic the peers receive from each other: bytes
// (as encoded, with Options.Bytes) and messages per receiving peer, the
// training traffic per peer and per op, and the training bytes split into
// their parts (Options.Parts). It is told each message sent, its size and
// whether it counts as training traffic; it knows nothing of the faults:
// what it counts is what was sent, whether or not the network delivered it.
type accounting struct {
	bytes, withParts bool
	enc              *encoder     // for the parts
	layout           model.Layout // the model's, for the parts' projection
	// fail reports a message the parts cannot encode (a violation).
	fail func(format string, args ...any)

	received, trainBytes, trainMsgs map[string]int64 // per receiving peer
	opBytes, opMsgs                 map[string]int64 // per op
	parts                           Parts
}

// newAccounting counts bytes if bytes, and with them parts if parts (enc
// and layout are what it measures them with).
func newAccounting(bytes, parts bool, enc *encoder, layout func() model.Layout, fail func(string, ...any)) *accounting {
	a := &accounting{bytes: bytes, withParts: parts && bytes, enc: enc, fail: fail,
		received: map[string]int64{}, trainBytes: map[string]int64{}, trainMsgs: map[string]int64{},
		opBytes: map[string]int64{}, opMsgs: map[string]int64{}}
	if a.withParts {
		a.layout = layout()
	}
	return a
}

// count counts msg, size bytes encoded, from peer from to peer to; a
// message a peer sends itself does not count. training says it is
// training traffic: its receiver runs and has not reported the final
// round (Result.TrainBytes).
func (a *accounting) count(from, to string, msg *wire.Core, size int, training bool) {
	if to == from {
		return
	}
	if a.bytes {
		a.received[to] += int64(size)
	}
	if !training {
		return
	}
	a.trainBytes[to] += int64(size)
	a.trainMsgs[to]++
	a.opBytes[msg.Op.String()] += int64(size)
	a.opMsgs[msg.Op.String()]++
	if a.withParts {
		a.addParts(from, msg, size)
	}
}

// report puts the counts into r.
func (a *accounting) report(r *Result) {
	r.Received, r.TrainBytes, r.TrainMsgs, r.OpBytes, r.OpMsgs = a.received, a.trainBytes, a.trainMsgs, a.opBytes, a.opMsgs
	r.Parts = a.parts
}

// addParts adds msg's parts to Result.Parts (see Parts). It measures by
// encoding variants of msg: without its shard list; also without rows,
// wants and values (the header); with rows and wants numbered 0, 1, 2, …
// (the values, and indices that cost almost nothing); and with rows
// numbered inside the message's shards (the projection).
func (a *accounting) addParts(from string, msg *wire.Core, size int) {
	enc := func(m *wire.Core) int {
		b, err := a.enc.encode(from, m)
		if err != nil {
			a.fail("parts: %s encodes %s: %v", from, m.Op, err)
			return size
		}
		return len(b)
	}
	m := *msg
	m.Shards = nil
	noShards := enc(&m)
	dense := func(n int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = uint32(i)
		}
		return out
	}
	m.Rows = model.Sparse{Idx: dense(len(msg.Rows.Idx)), Val: msg.Rows.Val}
	m.Want = dense(len(msg.Want))
	flat := enc(&m)
	m.Rows, m.Want, m.Values = model.Sparse{}, nil, nil
	bare := enc(&m)
	p := &a.parts
	p.Header += int64(bare)
	p.Shards += int64(size - noShards)
	p.Values += int64(flat - bare)
	p.Index += int64(noShards - flat)
	// Number rows inside the message's shards: rank of the shard in the
	// list, then the slot.
	l := a.layout
	rank := map[int]int{}
	for i, sh := range msg.Shards {
		rank[int(sh)] = i
	}
	local := func(keys []uint32) ([]uint32, bool) {
		out := make([]uint32, len(keys))
		for i, k := range keys {
			r, ok := rank[l.Shard(k)]
			if !ok {
				return nil, false
			}
			out[i] = uint32(r*l.PerShard + l.Slot(k))
		}
		return out, true
	}
	idx, ok1 := local(msg.Rows.Idx)
	want, ok2 := local(msg.Want)
	if !ok1 || !ok2 {
		p.LocalIndex += int64(noShards - flat)
		return
	}
	w := max(1, msg.RowWidth)
	order := make([]int, len(idx))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return idx[order[a]] < idx[order[b]] })
	m = *msg
	m.Shards = nil
	m.Rows = model.Sparse{Idx: make([]uint32, len(idx)), Val: make([]float32, 0, len(msg.Rows.Val))}
	for i, j := range order {
		m.Rows.Idx[i] = idx[j]
		m.Rows.Val = append(m.Rows.Val, msg.Rows.Val[j*w:(j+1)*w]...)
	}
	slices.Sort(want)
	m.Want = want
	p.LocalIndex += int64(enc(&m) - flat)
}
