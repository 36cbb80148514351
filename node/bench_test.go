package node

import (
	"context"
	"fmt"
	"testing"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gossiptrain/gossiptrain/gossip/wire"
	"github.com/gossiptrain/gossiptrain/node/membership"
)

// BenchmarkBeatPath measures what this package adds per received beat:
// encoding it (sender side), the members-topic validator (decode, checks,
// replay table) and handing the pooled buffer back after the driver is
// done. A beat lists 16 members with 2 addresses, as in a 16-peer cluster.
// Steady state allocates nothing.
func BenchmarkBeatPath(b *testing.B) {
	for _, members := range []int{16, 256} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			author, err := peer.Decode(authorID)
			if err != nil {
				b.Fatal(err)
			}
			v := newBeatValidator(peer.ID("self"), "ctr1", 1<<20)
			codec := wire.NewCodec(wire.F32, wire.None, v.codec.Limits())
			beat := membership.Beat{
				Job: "ctr1", From: authorID, Incarnation: 1, Epoch: 9, SetHash: 42, Kind: membership.Alive,
				Addrs: []string{"/ip4/10.0.0.6/tcp/4001/p2p/" + authorID, "/ip4/10.0.0.6/udp/4001/quic-v1/p2p/" + authorID},
			}
			for i := range members {
				beat.Members = append(beat.Members, fmt.Sprintf("12D3KooW%044d", i))
			}
			msg := &pubsub.Message{Message: &pb.Message{From: []byte(author)}, ReceivedFrom: author}
			var buf []byte
			ctx := context.Background()
			step := func() {
				beat.Seq++
				buf, err = appendBeat(codec, buf[:0], &beat)
				if err != nil {
					b.Fatal(err)
				}
				msg.Data, msg.ValidatorData = buf, nil
				if r := v.validate(ctx, author, msg); r != pubsub.ValidationAccept {
					b.Fatalf("validator said %v", r)
				}
				v.release(msg.ValidatorData.(*beatBuf))
			}
			for range 10 { // warm the pool, the codec buffers and the intern table
				step()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				step()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "beats/s")
			b.ReportMetric(float64(len(buf)), "bytes/beat")
		})
	}
}
