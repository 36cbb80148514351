package job

// The waiting phase of a distributed run: until the cluster has formed, a
// peer says every few seconds what it has found and why the cluster has
// not formed; it gives up after --wait-timeout, at once when its
// bootstrap peer refused it at the hello (its settings differ), and
// RefusedGrace after it refused a peer of its job itself (the cluster may
// still form without that peer meanwhile). The hello's settings
// (node.Config.Spec) come from the model and flags here too.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node"
	"github.com/gossiptrain/gossiptrain/node/train"
	"github.com/gossiptrain/gossiptrain/peerlog"
)

// DefaultWaitTimeout is how long a peer waits for its cluster by default:
// long enough for the VMs of a job started by hand or by an instance group
// to boot, copy their data and scan it (minutes), so peers started in any
// order meet; short enough that a peer nobody will ever join (a typo in an
// address, a forgotten VM) does not hold its machine for ever. The reasons
// are logged every few seconds meanwhile, so the timeout is the backstop,
// not how a user learns what is wrong. It bounds only the search for the
// cluster: a peer that joins a running job has met it within seconds, and
// the join itself (copying the model, taking over shards) is not counted.
// --wait-timeout 0 waits for ever.
const DefaultWaitTimeout = 30 * time.Minute

// RefusedGrace is how long a waiting peer that refused a peer of its job
// at the hello (different settings: the two command lines differ) still
// waits for the cluster to form without it before it fails, naming the
// refused peer and every setting that differs. The refused peer fails at
// once when this peer was its --peer (it cannot join through it), so
// waiting --wait-timeout (30 minutes by default) for it only held the
// machine; the grace lets compatible peers started with it (by hand, by an
// instance group: seconds apart) still form the cluster
// (TestDifferentDimRefusedAtConnect).
const RefusedGrace = 10 * time.Second

// refusedGrace is RefusedGrace; tests shorten it.
var refusedGrace = RefusedGrace

// clusterNode is what waitForCluster reads of a node (an interface, so a
// test can script it).
type clusterNode interface {
	memberStates
	Diagnose() node.Diagnosis
}

// waitForCluster waits as waitAgreed does for the cluster to form, logging
// every `every` (0: never) what this peer has found and why the cluster has
// not formed yet. It fails when a bootstrap peer refused this peer at the
// hello (this peer can never join through it: the commands differ),
// refusedGrace after this peer refused a peer of its job (naming it), when
// timeout passes (0: never), or when ctx ends.
func waitForCluster(ctx context.Context, n clusterNode, min int, boot []string, timeout, every time.Duration, log zerolog.Logger) (node.State, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		st  node.State
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := waitAgreed(wctx, n, min, boot)
		done <- result{st, err}
	}()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	var report <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		report = t.C
	}
	// A refusal by a bootstrap peer happens within a second of dialling
	// it; checking twice a second finds it without a notification path.
	checkEvery := 500 * time.Millisecond
	if refusedGrace/4 < checkEvery {
		checkEvery = refusedGrace / 4
	}
	check := time.NewTicker(checkEvery)
	defer check.Stop()
	var grace <-chan time.Time
	var refused node.Refusal
	for {
		select {
		case r := <-done:
			return r.st, r.err
		case <-check.C:
			d := n.Diagnose()
			if err := d.BootstrapRefusal(); err != nil {
				return node.State{}, fmt.Errorf("a --peer refused this peer at connect, so it cannot join the job through it: %w", err)
			}
			if i := slices.IndexFunc(d.Refused, func(r node.Refusal) bool { return !r.Bootstrap }); i >= 0 && grace == nil {
				refused = d.Refused[i]
				t := time.NewTimer(refusedGrace)
				defer t.Stop()
				grace = t.C
				log.Warn().Str("peer", node.ShortID(refused.ID)).Err(refused.Err).Str("grace", refusedGrace.String()).
					Msg("refused a peer of this job at connect (its settings differ): waiting only this long for the cluster to form without it")
			}
		case <-grace:
			d := n.Diagnose()
			return node.State{}, fmt.Errorf("refused peer %s at connect, and the cluster did not form without it within %v: %v; the peers of a job need the same settings: %s",
				node.ShortID(refused.ID), refusedGrace, refused.Err, strings.Join(d.Reasons(), "; "))
		case <-report:
			LogDiagnosis(log, n.Diagnose())
		case <-expired:
			d := n.Diagnose()
			return node.State{}, fmt.Errorf("the cluster did not form within --wait-timeout %v: %s (--wait-timeout 0 waits for ever)",
				timeout, strings.Join(d.Reasons(), "; "))
		}
	}
}

// LogDiagnosis logs one "still waiting" line: a warning when something
// looks wrong (failed dials, other jobs, refusals), else information.
func LogDiagnosis(log zerolog.Logger, d node.Diagnosis) {
	ev := log.Info()
	if waitProblem(d) {
		ev = log.Warn()
	}
	ev.Int("members", d.Members).Int("min_peers", d.MinPeers).Int("connected", d.Connected).
		Strs("why", d.Reasons()).Msg(peerlog.StillWaiting)
}

func waitProblem(d node.Diagnosis) bool {
	if len(d.OtherJobs) > 0 || len(d.Refused) > 0 {
		return true
	}
	for _, b := range d.Bootstrap {
		if b.Failures > 0 || b.Refused != "" || (b.Job != "" && b.Job != d.Job) {
			return true
		}
	}
	return false
}

// jobSpec is what every peer of a job must agree on beyond the ring (which
// the node adds itself): the model and how it is trained. A peer that
// differs is refused at the hello, the flag and both values named, instead
// of connecting and stalling. --l2 is left out on purpose: --l2 auto is
// computed from each peer's own rows, so it may differ between honest
// peers (it changes how an owner regularises its shards, not whether the
// peers can work together).
func jobSpec(m *model.Model, d Dist, batch int) node.Spec {
	spec := node.Spec{{Flag: "mode", Value: d.Mode.String()}, {Flag: "gather", Value: d.Gather.String()},
		// Owners bound a push's examples by the batch, and its rows by
		// --max-row-grad: every peer must agree on both.
		{Flag: "batch", Value: strconv.Itoa(batch)},
		{Flag: "max-row-grad", Value: strconv.FormatFloat(d.maxRowGrad(m.Kind), 'g', -1, 64)},
		{Flag: "combine", Value: d.combineFor(m.Kind).String()},
		{Flag: "local-steps", Value: strconv.Itoa(max(1, d.LocalSteps))},
		{Flag: "optimizer-state", Value: d.optimizerStateName(m)}}
	if d.Mode == train.SSP {
		spec = append(spec, node.SpecItem{Flag: "staleness", Value: strconv.Itoa(d.Staleness)})
	}
	for _, s := range modelSettings(m) {
		if s.Flag != "l2" {
			spec = append(spec, s)
		}
	}
	if m.Kind == model.MLP {
		spec = append(spec, node.SpecItem{Flag: "init-seed", Value: strconv.FormatUint(d.InitSeed, 10)})
	}
	return spec
}

// modelSettings are the settings a model was built with, by the flag that
// sets each, with the values in effect: inferred ones (--model auto,
// --classes, --dim), computed ones (--l2 auto) and the optimizer's
// defaults (--lr 0). Shared by the hello and the report's start line.
func modelSettings(m *model.Model) []node.SpecItem {
	g := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	s := []node.SpecItem{
		{Flag: "model", Value: m.Kind.String()},
		{Flag: "dim", Value: strconv.FormatUint(m.Dim, 10)},
		{Flag: "classes", Value: strconv.Itoa(m.Classes)},
	}
	if m.Kind.Multiclass() {
		s = append(s, node.SpecItem{Flag: "label-base", Value: strconv.FormatInt(m.LabelBase, 10)})
	}
	if m.Kind == model.MLP {
		s = append(s, node.SpecItem{Flag: "hidden", Value: strconv.Itoa(m.Hidden)})
	}
	s = append(s,
		node.SpecItem{Flag: "shards", Value: strconv.Itoa(m.Layout.Shards)},
		node.SpecItem{Flag: "optimizer", Value: m.Opt.Kind.String()},
		node.SpecItem{Flag: "lr", Value: g(m.Opt.LR)},
		node.SpecItem{Flag: "l2", Value: g(m.Opt.L2)})
	switch m.Opt.Kind {
	case model.SGD:
		s = append(s, node.SpecItem{Flag: "lr-decay", Value: g(m.Opt.Decay)}, node.SpecItem{Flag: "lr-power", Value: g(m.Opt.Power)})
	case model.FTRL:
		s = append(s, node.SpecItem{Flag: "l1", Value: g(m.Opt.L1)}, node.SpecItem{Flag: "ftrl-beta", Value: g(m.Opt.Beta)})
	}
	return s
}

// effectiveSettings are modelSettings as the report's start line keeps
// them (report.Start.Effective), so report.md shows what the run used
// rather than the flags' literal values (--lr 0, --classes 0).
func effectiveSettings(m *model.Model) map[string]string {
	if m == nil {
		return nil
	}
	out := map[string]string{}
	for _, s := range modelSettings(m) {
		out[s.Flag] = s.Value
	}
	return out
}

// jobEffective are the job's settings that --combine auto,
// --local-steps auto and --optimizer-state auto resolve, as the report's
// start line keeps them, so report.md shows the combine a job used
// (capped, mean or sum) and where its optimizer state lived beside the
// flag's "auto".
func jobEffective(d Dist, m *model.Model) map[string]string {
	if m == nil {
		return nil
	}
	return map[string]string{"combine": d.combineFor(m.Kind).String(), "local-steps": strconv.Itoa(max(1, d.LocalSteps)),
		"optimizer-state": d.optimizerStateName(m)}
}

// memberStates is what waitAgreed reads of a node (an interface, so a test
// can script the states).
type memberStates interface {
	Subscribe() (<-chan node.Event, func())
	State() node.State
}

// waitAgreed waits until the membership view is agreed by every member,
// has at least min members, and includes one of the bootstrap peers (when
// any is given). A peer that met them and was then left alone (they all
// left or died first: the run ended) fails rather than train a model of
// its own.
func waitAgreed(ctx context.Context, n memberStates, min int, boot []string) (node.State, error) {
	evs, cancel := n.Subscribe()
	defer cancel()
	met := len(boot) == 0
	for {
		st := n.State()
		for _, b := range boot {
			met = met || slices.Contains(st.View.Members, b)
		}
		if st.Agreed && len(st.View.Members) >= min && st.Ring != nil && met {
			if len(boot) > 0 && len(st.View.Members) == 1 {
				// Met the run, then everyone left or died before this
				// peer joined: training alone would make a model of its
				// own under the job's name.
				return st, errors.New("every peer of the job this peer met (through --peer) left before it could join: the run has ended or stopped; start the job again, or train alone without --peer")
			}
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for the members to agree: %w", ctx.Err())
		case <-evs:
		}
	}
}
