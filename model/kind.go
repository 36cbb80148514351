package model

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Kind is the family of model: it fixes the row width and the loss.
type Kind uint8

// Model kinds. The numbers are stored in model files: append only.
const (
	// Logreg is binary logistic regression: one weight per feature (Width 1),
	// P(y=1|x) = sigmoid(w·x + b).
	Logreg Kind = 1
	// Softmax is multinomial logistic regression: one weight per feature and
	// class (Width = Classes), P(y=c|x) = softmax(W·x + b)_c.
	Softmax Kind = 2
	// MLP is a multilayer perceptron with one hidden layer of Hidden ReLU
	// units: P(y|x) = softmax(W2·relu(W1·x + b1) + b2). Every row is Hidden
	// wide: rows 0..Dim-1 are W1's (input feature k's weights to the hidden
	// units), row Dim is b1, rows Dim+1..Dim+Classes are W2's (class j's
	// weights from the hidden units), and row Dim+Classes+1 is b2 (its first
	// Classes values). Sparse inputs touch only their W1 rows; the other
	// Classes+2 rows are touched by every example.
	MLP Kind = 3
)

// ErrConfig is wrapped by every configuration error of this package
// (unknown names, out-of-range optimizer settings, bad shapes).
var ErrConfig = errors.New("invalid model configuration")

// ParseKind parses a model kind as written on the command line: "logreg",
// "softmax" or "mlp" (case-insensitive).
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "logreg":
		return Logreg, nil
	case "softmax":
		return Softmax, nil
	case "mlp":
		return MLP, nil
	}
	return 0, fmt.Errorf("%w: unknown model kind %q (want logreg, softmax or mlp)", ErrConfig, s)
}

// String returns the name ParseKind accepts.
func (k Kind) String() string {
	switch k {
	case Logreg:
		return "logreg"
	case Softmax:
		return "softmax"
	case MLP:
		return "mlp"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// valid reports whether k is a known kind.
func (k Kind) valid() bool { return k == Logreg || k == Softmax || k == MLP }

// Multiclass reports whether k predicts one of Classes labels (Softmax,
// MLP) rather than a binary label (Logreg).
func (k Kind) Multiclass() bool { return k == Softmax || k == MLP }

// OptKind selects the optimizer that owners apply to their shards.
type OptKind uint8

// Optimizers. The numbers are stored in model files: append only.
const (
	// SGD is plain stochastic gradient descent with the step size schedule
	// lr_t = LR / (1 + Decay·t)^Power. It keeps no per-weight state.
	SGD OptKind = 1
	// AdaGrad (Duchi, Hazan, Singer, JMLR 2011) scales each coordinate's step
	// by the root of its summed squared gradients. One state float per
	// weight.
	AdaGrad OptKind = 2
	// FTRL is FTRL-Proximal (McMahan et al., "Ad Click Prediction: a View
	// from the Trenches", KDD 2013, Algorithm 1) with per-coordinate learning
	// rates and L1/L2 regularisation; large L1 gives exactly-zero weights. Two
	// state floats (z and n) per weight.
	FTRL OptKind = 3
)

// ParseOptKind parses an optimizer name: "sgd", "adagrad" or "ftrl"
// (case-insensitive).
func ParseOptKind(s string) (OptKind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "sgd":
		return SGD, nil
	case "adagrad":
		return AdaGrad, nil
	case "ftrl":
		return FTRL, nil
	}
	return 0, fmt.Errorf("%w: unknown optimizer %q (want sgd, adagrad or ftrl)", ErrConfig, s)
}

// String returns the name ParseOptKind accepts.
func (k OptKind) String() string {
	switch k {
	case SGD:
		return "sgd"
	case AdaGrad:
		return "adagrad"
	case FTRL:
		return "ftrl"
	}
	return fmt.Sprintf("optimizer(%d)", uint8(k))
}

// StatePerWeight is the number of optimizer state floats kept per weight:
// 0 for SGD, 1 for AdaGrad (the squared-gradient sum), 2 for FTRL (z and n,
// interleaved). It is 0 for unknown kinds.
func (k OptKind) StatePerWeight() int {
	switch k {
	case AdaGrad:
		return 1
	case FTRL:
		return 2
	}
	return 0
}

// OptConfig configures the optimizer. The zero value is not valid; start from
// DefaultOptConfig.
//
// Every optimizer uses the mean gradient g/n of a step (contracts.md,
// "Gradients and steps"). L2 is never applied to the bias row; neither is L1.
type OptConfig struct {
	// Kind selects the optimizer.
	Kind OptKind
	// LR is the step size of SGD and AdaGrad and the alpha of FTRL-Proximal
	// (its per-coordinate rate is alpha / (beta + sqrt(n))). Must be > 0.
	LR float64
	// Decay sets the SGD schedule lr_t = LR / (1 + Decay·t)^Power, t the
	// 0-based step number. 0 keeps the rate constant. Only SGD uses it; it
	// must be 0 for the others, so a setting never silently does nothing.
	Decay float64
	// Power is the exponent of the SGD schedule; the default 0.5 is the
	// 1/sqrt(t) rate of the classic convergence analyses of SGD on convex
	// losses. Ignored when Decay is 0 and by AdaGrad and FTRL.
	Power float64
	// L1 is FTRL's lambda1: a coordinate whose |z| <= L1 has weight exactly 0,
	// z being the running sum of the coordinate's mean gradients (so its
	// effect relative to the loss fades as steps accumulate, as in the
	// paper). Only FTRL supports it; it must be 0 for SGD and AdaGrad.
	L1 float64
	// L2 is the penalty (L2/2)·||w||² on non-bias weights, added to the mean
	// log-loss: every optimizer adds L2·w to the gradient of a row it updates.
	L2 float64
	// Beta is FTRL's beta (McMahan et al. 2013 report beta = 1 works well).
	// Must be > 0 for FTRL; ignored by the others.
	Beta float64
	// Eps is AdaGrad's initial squared-gradient accumulator: the step is
	// LR·g/sqrt(Eps + Σg²), so the first step is finite even for a tiny g.
	// Must be > 0 for AdaGrad; ignored by the others.
	Eps float64
}

// DefaultOptConfig returns the defaults for optimizer k; an unknown k gets
// SGD's defaults with its Kind set to k (and fails Validate).
func DefaultOptConfig(k OptKind) OptConfig {
	switch k {
	case AdaGrad:
		return OptConfig{
			Kind: AdaGrad,
			LR:   0.1,  // a common AdaGrad rate for sparse linear models; the rate adapts per coordinate
			Eps:  1e-6, // far below any squared gradient that moves a weight; keeps step 0 finite
		}
	case FTRL:
		return OptConfig{
			Kind: FTRL,
			LR:   0.1, // alpha: the paper tunes it per data set; 0.1 is a safe start for click data
			Beta: 1,   // McMahan et al. 2013: "beta = 1 is usually good enough"
			// L1 = 0: the penalty's scale depends on the batch size (gradients
			// are batch means), so sparsity is opt-in.
		}
	}
	return OptConfig{
		Kind:  k,
		LR:    0.1, // with mean gradients of batches of ~100, steps of 0.1 are stable for logistic loss
		Decay: 0,   // constant rate unless asked
		Power: 0.5, // 1/sqrt(t) once Decay > 0
	}
}

// Validate reports the first setting that is out of range or meaningless for
// the chosen optimizer, naming it as the command line does (lr, decay, l1…).
func (c OptConfig) Validate() error {
	bad := func(name string, v float64, want string) error {
		return fmt.Errorf("%w: %s %v: %s", ErrConfig, name, v, want)
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch c.Kind {
	case SGD, AdaGrad, FTRL:
	default:
		return fmt.Errorf("%w: unknown optimizer %d", ErrConfig, c.Kind)
	}
	switch {
	case !finite(c.LR) || c.LR <= 0:
		return bad("lr", c.LR, "want a finite value > 0")
	case !finite(c.Decay) || c.Decay < 0:
		return bad("decay", c.Decay, "want a finite value >= 0")
	case c.Decay != 0 && c.Kind != SGD:
		return bad("decay", c.Decay, "only sgd has a decay schedule (adagrad and ftrl adapt per coordinate)")
	case !finite(c.Power) || c.Power < 0:
		return bad("power", c.Power, "want a finite value >= 0")
	case !finite(c.L1) || c.L1 < 0:
		return bad("l1", c.L1, "want a finite value >= 0")
	case c.L1 != 0 && c.Kind != FTRL:
		return bad("l1", c.L1, "only ftrl supports l1")
	case !finite(c.L2) || c.L2 < 0:
		return bad("l2", c.L2, "want a finite value >= 0")
	case c.Kind == FTRL && (!finite(c.Beta) || c.Beta <= 0):
		return bad("beta", c.Beta, "ftrl needs a finite beta > 0")
	case c.Kind == AdaGrad && (!finite(c.Eps) || c.Eps <= 0):
		return bad("eps", c.Eps, "adagrad needs a finite eps > 0")
	}
	return nil
}

// String describes the optimizer with the settings it uses, for logs.
func (c OptConfig) String() string {
	switch c.Kind {
	case SGD:
		return fmt.Sprintf("sgd lr=%g decay=%g power=%g l2=%g", c.LR, c.Decay, c.Power, c.L2)
	case AdaGrad:
		return fmt.Sprintf("adagrad lr=%g eps=%g l2=%g", c.LR, c.Eps, c.L2)
	case FTRL:
		return fmt.Sprintf("ftrl alpha=%g beta=%g l1=%g l2=%g", c.LR, c.Beta, c.L1, c.L2)
	}
	return c.Kind.String()
}
