package job

// Stopping a distributed run: the first SIGINT/SIGTERM leaves gracefully
// (this peer's shards are handed over, the others train on), a second one
// stops at once, and peerlog.StopSignal stops at once from the start (the
// whole job is stopping: "gossiptrain cluster" sends it to every peer on
// Ctrl-C). A peer that stops before the end of training reports its run as
// partial: its test metrics are null, its report and --save say at which
// round it stopped (TestLeaverReportsAPartialRun).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/signal"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/model"
	"github.com/gossiptrain/gossiptrain/node"
	"github.com/gossiptrain/gossiptrain/node/trainer"
	"github.com/gossiptrain/gossiptrain/peerlog"
	"github.com/gossiptrain/gossiptrain/report"
)

// errStopNow is the cause of a run stopped by peerlog.StopSignal: the whole
// job is stopping. It wraps context.Canceled, so the process exits 130
// like an interrupted one.
var errStopNow = fmt.Errorf("%w: the whole job is stopping (%s)", context.Canceled, peerlog.StopSignalName)

// stopOnSignal cancels the run with errStopNow when peerlog.StopSignal
// arrives; the returned function stops watching.
func stopOnSignal(cancel context.CancelCauseFunc, log zerolog.Logger) func() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, peerlog.StopSignal)
	done := make(chan struct{})
	go func() {
		select {
		case <-c:
			log.Warn().Str("signal", peerlog.StopSignalName).Msg("the whole job is stopping: stopping at once, without a graceful leave")
			cancel(errStopNow)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(c)
		close(done)
	}
}

// stoppedAtOnce reports whether ctx was cancelled to stop at once (a second
// SIGINT/SIGTERM, or peerlog.StopSignal).
func stoppedAtOnce(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), context.Canceled)
}

// closeNode closes the node when the run returns: gracefully (the others
// acknowledge this peer's leave), or at once when the run was stopped at
// once, so a whole job stopping together does not wait for
// acknowledgements nobody will send.
func closeNode(ctx context.Context, n *node.Node) {
	if stoppedAtOnce(ctx) {
		n.CloseNow()
		return
	}
	n.Close()
}

// Why a run stopped before the end of training (report.Summary.Stopped).
const (
	stopLeft        = "left"        // a graceful leave (SIGINT/SIGTERM)
	stopInterrupted = "interrupted" // a second signal
	stopJobStopped  = "job stopped" // peerlog.StopSignal
)

// partialRun says whether a run that returned runErr under ctx stopped
// before the end of training, and why ("" when it did not); err is what
// remains of runErr: nil when the stop was asked for.
func partialRun(ctx context.Context, runErr error) (why string, err error) {
	switch {
	case errors.Is(runErr, trainer.ErrLeft):
		return stopLeft, nil
	case runErr != nil && stoppedAtOnce(ctx):
		if errors.Is(context.Cause(ctx), errStopNow) {
			return stopJobStopped, nil
		}
		return stopInterrupted, nil
	}
	return "", runErr
}

// markPartial makes a summary say that its run stopped early: the test
// metrics are null (there was no final evaluation; an evaluation made
// along the way is in the report's eval lines), and Partial, StoppedAt and
// Stopped say where and why.
func markPartial(s *report.Summary, why string, round int64) {
	nan := report.Num(math.NaN())
	s.Metrics = report.Metrics{TestLogLoss: nan, TestError: nan, TestAUC: nan, TestAccuracy: nan}
	s.Partial, s.StoppedAt, s.Stopped = true, round, why
}

// markModelPartial records in a model's Meta (saved with it, shown by
// gossiptrain inspect) that its run stopped early, why and at which round;
// a run that did not (why "") leaves it alone.
func markModelPartial(m *model.Model, why string, round int64) {
	if why == "" {
		return
	}
	meta := maps.Clone(m.Meta)
	if meta == nil {
		meta = map[string]string{}
	}
	meta["partial"], meta["stopped_at_round"], meta["stopped"] = "true", strconv.FormatInt(round, 10), why
	m.Meta = meta
}

// logSaved logs a saved model, as a warning naming the round when the run
// stopped early.
func logSaved(log zerolog.Logger, file, why string, round int64) {
	if why == "" {
		log.Info().Str("file", file).Bool("partial", false).Msg("model saved")
		return
	}
	log.Warn().Str("file", file).Bool("partial", true).Int64("stopped_at_round", round).Str("stopped", why).
		Msg("model saved: partial, this peer stopped before the end of training")
}
