package job

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/node"
)

// Watch runs a node that does not train, the peer command's diagnostic
// mode, until ctx ends: it logs the member set and the shard ring each
// time they change and, until the cluster has formed, why it has not
// (LogDiagnosis); then it leaves gracefully. Errors of the node's
// configuration are *node.FieldError.
func Watch(ctx context.Context, cfg node.Config, log zerolog.Logger) error {
	n, err := node.New(cfg, log)
	if err != nil {
		return err
	}
	events, stop := n.Subscribe()
	defer stop()
	var lastRing uint64
	// Until the cluster has formed, say every few seconds what this peer
	// found and why it has not.
	why := time.NewTicker(5 * time.Second)
	defer why.Stop()
	for {
		select {
		case <-why.C:
			if d := n.Diagnose(); d.Formed() {
				why.Stop()
			} else {
				LogDiagnosis(log, d)
			}
		case <-ctx.Done():
			log.Info().Msg("signal received: leaving the cluster")
			return n.Close()
		case ev, ok := <-events:
			if !ok {
				return n.Close()
			}
			if !ev.Agreed || ev.RingHash == lastRing {
				continue
			}
			lastRing = ev.RingHash
			counts := map[string]int{}
			for _, p := range ev.Ring.Assignment() {
				counts[p]++
			}
			d := zerolog.Dict()
			for _, m := range ev.View.Members {
				d = d.Int(m, counts[m])
			}
			log.Info().Uint64("epoch", ev.View.Epoch).Dict("shards_per_member", d).Msg("ring")
		}
	}
}
