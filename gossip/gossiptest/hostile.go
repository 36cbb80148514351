package gossiptest

import (
	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/model"
)

// Hostile is a message a hostile peer publishes, and the reason an honest
// Exchange must give for rejecting it.
type Hostile struct {
	Name   string
	Params bool // publish on the params topic (else on the victim's grad topic)
	Msg    []byte
	Want   gossip.Reason
}

// HostileCases returns one message per rejection reason a peer can cause
// on the wire, for an Exchange configured with job, Width 1,
// Wire.Limits.Features = features and Wire.Limits.MaxMessage = maxMessage
// (at most 2000, so the oversize case fits any transport). evil is the
// publishing peer's ID; honest is another peer's, for the forged-sender
// case.
func HostileCases(job, evil, honest string, features uint32, maxMessage int) []Hostile {
	return HostileVariants(job, evil, honest, features, maxMessage, 0)
}

// HostileVariants is HostileCases with every message made different by
// variant (a sequence number, garbage seed or junk byte) and rejected for
// the same reason: gossipsub names messages by their bytes, so a test that
// publishes a case again after gossipsub lost it needs other bytes.
func HostileVariants(job, evil, honest string, features uint32, maxMessage int, variant uint64) []Hostile {
	one := model.Sparse{Idx: []uint32{7}, Val: []float32{1}}
	grad := func(job, sender string, rows model.Sparse) []byte {
		return Message(wire.KindGrad, job, sender, 0, variant, 1, rows)
	}
	wide, err := wire.NewCodec(wire.F32, wire.None, wire.DefaultLimits()).AppendGrad(nil,
		wire.Header{Job: job, Sender: evil, Seq: variant}, 1, 2, &model.Sparse{Idx: []uint32{7}, Val: []float32{1, 2}})
	if err != nil {
		panic(err)
	}
	lossy, err := wire.NewCodec(wire.F16, wire.None, wire.DefaultLimits()).AppendParamsAck(nil,
		wire.Header{Job: job, Sender: evil, Seq: variant}, &wire.Ack{}, 1, &one)
	if err != nil {
		panic(err)
	}
	return []Hostile{
		{"garbage", false, Garbage(1+10*variant, 300), gossip.ReasonVersion},
		{"truncated header", false, []byte{wire.Version, byte(wire.KindGrad), 0, 5, 'j' + byte(variant%16)}, gossip.ReasonMalformed},
		{"oversize", false, Garbage(3+10*variant, maxMessage+1), gossip.ReasonTooLarge},
		{"NaN gradient", false, NaN(wire.KindGrad, job, evil, 0, variant, 7), gossip.ReasonNonFinite},
		{"NaN params", true, NaN(wire.KindParamsAck, job, evil, 0, variant, 7), gossip.ReasonNonFinite},
		{"index out of range", false, grad(job, evil, model.Sparse{Idx: []uint32{features}, Val: []float32{1}}), gossip.ReasonRange},
		{"wrong job", false, grad("not-"+job, evil, one), gossip.ReasonJob},
		{"forged sender", false, grad(job, honest, one), gossip.ReasonSender},
		{"params on a grad topic", false, Message(wire.KindParamsAck, job, evil, 0, variant, 0, one), gossip.ReasonKind},
		{"grad on the params topic", true, grad(job, evil, one), gossip.ReasonKind},
		{"lossy params", true, lossy, gossip.ReasonKind},
		{"wrong width", false, wide, gossip.ReasonWidth},
	}
}
