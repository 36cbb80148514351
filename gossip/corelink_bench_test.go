package gossip_test

import (
	"testing"

	"github.com/gossiptrain/gossiptrain/gossip"
	"github.com/gossiptrain/gossiptrain/gossip/gossiptest"
	"github.com/gossiptrain/gossiptrain/gossip/memnet"
	"github.com/gossiptrain/gossiptrain/gossip/wire"
)

// BenchmarkCoreLinkMemnet: core messages from one link to another over the
// in-memory transport (pipes): the link's own cost (encode, frame, copy,
// read, decode, check, deliver). pull: small pulls (64 wanted rows), 128
// in flight; pull1: the same one at a time; push1MiB: a push of 240k rows
// (two parts).
func BenchmarkCoreLinkMemnet(b *testing.B) {
	for _, bc := range []struct {
		name   string
		msg    *wire.Core
		window int
	}{
		{"pull", gossiptest.PullMessage(), 128},
		{"pull1", gossiptest.PullMessage(), 1},
		{"push1MiB", gossiptest.PushMessage(240_000), 16},
	} {
		b.Run(bc.name, func(b *testing.B) {
			net, err := memnet.New(memnet.DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			defer net.Close()
			cfg := coreCfg()
			gossiptest.BenchCoreLink(b, net.NewNode("a"), net.NewNode("b"), cfg, bc.msg, bc.window)
		})
	}
}

// BenchmarkCoreLinkFanout: one link sending small pulls to three peers
// over memnet, from one goroutine (serial, as the core's driver does) or
// from three at once (parallel), which contend for the link's encoder.
func BenchmarkCoreLinkFanout(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		name := "serial"
		if parallel {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			net, err := memnet.New(memnet.DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			defer net.Close()
			var rs []gossip.Transport
			for _, id := range []string{"b", "c", "d"} {
				rs = append(rs, net.NewNode(id))
			}
			gossiptest.BenchCoreLinkFanout(b, net.NewNode("a"), rs, coreCfg(), gossiptest.PullMessage(), 64, parallel)
		})
	}
}
