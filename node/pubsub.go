package node

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gossiptrain/gossiptrain/gossip/p2p"
)

// Peer scoring (gossipsub v1.1). Only two components are on: P4, invalid
// messages (a validator returning ValidationReject, a bad signature), and
// P7, protocol misbehaviour (broken IWANT promises, GRAFT during backoff).
// Delivery-rate components (P1-P3) are off: training topics have bursty,
// uneven traffic by design and would punish quiet honest peers. P6, IP
// colocation, is off too: many peers behind one NAT address, or on one
// machine, is a normal gossiptrain deployment.
//
// Worked example with these numbers: P4 adds weight * count^2 per topic,
// so k rejected messages score -10*k^2: 4 score -160 (below GossipThreshold,
// no more gossip to it), 5 score -250 (below PublishThreshold), 7 score -490:
// below GraylistThreshold, so its RPCs are ignored. The score inspector,
// every second, disconnects a peer below disconnectThreshold (-300) and
// blocks it for Config.BlockFor: it sits between the publish and graylist
// thresholds so that a graylisted peer is still below it after one decay
// step (-8.1*7^2 = -397), whatever the phase of the inspector. The counter
// decays by 0.9 a second, so an honest peer with a rare bad message is
// forgiven within a minute (0.9^60 = 0.002).
const (
	invalidMessageWeight = -10.0
	invalidMessageDecay  = 0.9 // per DecayInterval (1s)
	gossipThreshold      = -100.0
	publishThreshold     = -200.0
	graylistThreshold    = -400.0
	disconnectThreshold  = -300.0
	scoreInspectPeriod   = time.Second
)

// TopicScoreParams returns (a fresh copy of) the peer-score parameters
// Node.Join gives every topic: only P4, invalid messages, weighted so that a
// peer is disconnected after about seven rejected messages in a row.
func TopicScoreParams() *pubsub.TopicScoreParams {
	return &pubsub.TopicScoreParams{
		SkipAtomicValidation:           true, // P1-P3 stay off (zero weights)
		TopicWeight:                    1,
		TimeInMeshQuantum:              time.Second, // unused with weight 0, but pubsub divides by it
		InvalidMessageDeliveriesWeight: invalidMessageWeight,
		InvalidMessageDeliveriesDecay:  invalidMessageDecay,
	}
}

func peerScoreParams() *pubsub.PeerScoreParams {
	return &pubsub.PeerScoreParams{
		Topics:                    map[string]*pubsub.TopicScoreParams{},
		TopicScoreCap:             0, // no cap on positive topic scores (there are none)
		AppSpecificScore:          func(peer.ID) float64 { return 0 },
		AppSpecificWeight:         0,
		IPColocationFactorWeight:  0, // off: peers behind one NAT are normal
		BehaviourPenaltyWeight:    -1,
		BehaviourPenaltyThreshold: 6,
		BehaviourPenaltyDecay:     0.9,
		DecayInterval:             time.Second,
		DecayToZero:               0.01,
		RetainScore:               10 * time.Minute, // a reconnecting offender keeps its score
	}
}

func peerScoreThresholds() *pubsub.PeerScoreThresholds {
	return &pubsub.PeerScoreThresholds{
		GossipThreshold:             gossipThreshold,
		PublishThreshold:            publishThreshold,
		GraylistThreshold:           graylistThreshold,
		AcceptPXThreshold:           0,
		OpportunisticGraftThreshold: 0,
	}
}

// newPubSub starts the host's one gossipsub router with the options
// training needs. inspect is called every scoreInspectPeriod with the
// scores of connected peers (from pubsub's goroutine: it must not block).
func newPubSub(ctx context.Context, h host.Host, cfg *Config, tr *tracer, log *slog.Logger, inspect pubsub.PeerScoreInspectFn) (*pubsub.PubSub, error) {
	bl, err := pubsub.NewTimeCachedBlacklist(cfg.BlockFor)
	if err != nil {
		return nil, err
	}
	opts := []pubsub.Option{
		pubsub.WithMaxMessageSize(cfg.MaxMessageSize),
		pubsub.WithPeerOutboundQueueSize(cfg.OutboundQueueSize),
		pubsub.WithValidateQueueSize(cfg.ValidateQueueSize),
		pubsub.WithRawTracer(tr),
		pubsub.WithGossipSubParams(cfg.GossipSub),
		pubsub.WithBlacklist(bl),
		pubsub.WithPeerScore(peerScoreParams(), peerScoreThresholds()),
		pubsub.WithPeerScoreInspect(inspect, scoreInspectPeriod),
		pubsub.WithLogger(log),
		pubsub.WithRPCLogger(log),
	}
	// No gossipsub signatures: see p2p.PubSubOptions, and beatsig.go for
	// the members topic.
	opts = append(opts, p2p.PubSubOptions()...)
	ps, err := pubsub.NewGossipSub(ctx, h, opts...)
	if err != nil {
		return nil, fmt.Errorf("node: start gossipsub: %w", err)
	}
	return ps, nil
}

// lowScore reports whether a gossipsub score calls for disconnecting.
func lowScore(s float64) bool { return s < disconnectThreshold || math.IsNaN(s) }
