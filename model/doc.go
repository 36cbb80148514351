// Package model is gossiptrain's parameter storage: the weights of a linear
// model (binary logistic or multinomial softmax) or of a one-hidden-layer
// MLP (see MLP for its rows) in shard-major dense
// float32 slots, the optimizer state of the shards a peer owns, the
// optimizers (SGD with a decay schedule, AdaGrad, FTRL-Proximal), and the
// model file and shard export formats.
//
// # How it is driven
//
// Every peer holds one *Model: the full read copy of the weights W, plus
// optimizer State for the shards it owns (Own, Disown; the node package
// decides ownership from the ring).
//
//	m, err := model.New(model.Logreg, dim, 0, 256, model.DefaultOptConfig(model.FTRL))
//	m.OwnAll()                       // single peer / master: own every shard
//	for step := int64(0); ; step++ {
//		// a worker computes the SUM of per-example gradients of a batch
//		// (package sgd) as a Sparse sorted by row; an owner sums the
//		// contributions of a round for its shards and applies them:
//		m.Apply(g, examples, step)   // g/examples is the mean gradient
//		m.Gather(g.Idx, &changed)    // new values to publish
//	}
//	// every other peer: m.SetRows(&changed)
//
// Rows are features 0..Dim-1 plus the bias row Dim (Bias), which every
// example touches with value 1 and which is never regularised
// (docs/contracts.md). Apply allocates nothing.
//
// Models are saved with Save/SaveFile (atomic: temp file, fsync, rename) and
// read with Read/LoadFile; the format is versioned and checksummed (see
// FormatVersion). A file holds every weight or only the rows that are not
// zero, whichever is smaller, so its size and load time follow the rows
// training touched, not Dim; loading leaves the other rows' pages
// untouched. AppendShard/LoadShard move one shard, with or without its
// optimizer state, the same way (checkpoints). Export writes the nonzero
// weights with their indices as json, npz or text for other tools;
// WarmStart readies a loaded model to train on (train --init).
//
// The weights are one dense reservation of Layout.Len() floats:
// CheckReservation says, before it is made, when it would not fit under
// the process's address-space limit (ulimit -v), and the file readers
// check the same.
//
// A Model is not safe for concurrent use.
package model
