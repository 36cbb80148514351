package gossip

import (
	"context"
	"io"
)

// Gradients and params over direct streams (Config.GradStreams,
// ParamsStreams). A pusher goroutine per peer sends each message as one
// request on PushProtocol or ParamsPushProtocol; the receiver checks it as
// its gossipsub validator would (the stream's authenticated
// remote peer is the sender) and queues it for delivery like a gossipsub
// message. Sequencing, repair and flow control are unchanged: a message
// that cannot be pushed is a gap the owner repairs from the retransmit
// buffer.

// pushQueue bounds the messages waiting for one owner's pusher; past it a
// message is dropped (and repaired), as gossipsub drops past its queue.
const pushQueue = 256

// pushed is one message for a pusher and the protocol it goes on.
type pushed struct {
	proto string
	msg   []byte
}

// push queues a copy of msg for peer's pusher, starting it the first time.
func (x *Exchange) push(peer, proto string, msg []byte) {
	x.pushMu.Lock()
	if x.pushers == nil {
		x.pushers = make(map[string]chan pushed)
	}
	ch := x.pushers[peer]
	if ch == nil {
		ch = make(chan pushed, pushQueue)
		x.pushers[peer] = ch
		x.wg.Add(1)
		go x.pusher(peer, ch)
	}
	x.pushMu.Unlock()
	select {
	case ch <- pushed{proto, append([]byte(nil), msg...)}: // buf is only valid until evicted
	default:
		x.stats.publishErrors.Add(1) // a loss: the receiver repairs it
	}
}

// pusher sends peer's queued messages in order until the Exchange closes.
func (x *Exchange) pusher(owner string, ch chan pushed) {
	defer x.wg.Done()
	for {
		select {
		case p := <-ch:
			msg := p.msg
			ctx, cancel := context.WithTimeout(x.ctx, x.cfg.RepairTimeout)
			rc, err := x.tr.Request(ctx, owner, p.proto, msg)
			if err == nil {
				_, err = io.Copy(io.Discard, rc)
				rc.Close()
			}
			cancel()
			if err != nil {
				x.stats.publishErrors.Add(1)
				x.cfg.Log.Debug().Err(err).Str("owner", owner).Msg("gradient push failed; the owner will repair it")
				continue
			}
			x.stats.sent.Add(1)
			x.stats.sentBytes.Add(uint64(len(msg)))
		case <-x.ctx.Done():
			return
		}
	}
}

// servePush takes a pushed message of kind: checked like a gossipsub
// message (a rejection resets the stream and is counted), then queued for
// delivery.
func (x *Exchange) servePush(kind Stream, from string, req []byte) error {
	d, err := x.validate(kind, from, req)
	if err != nil {
		if x.cfg.Penalize != nil {
			x.cfg.Penalize(from)
		}
		return err
	}
	if !x.enqueue(item{kind: kind, from: from, data: req, src: srcPubsub, dec: d}) {
		x.putDecoder(d)
		return ErrClosed
	}
	return nil
}
