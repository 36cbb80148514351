package model

import (
	"errors"
	"fmt"
	"math/bits"
)

// Layout maps feature indices to positions in shard-major dense storage.
//
// A model has Features parameter rows of Width float32 each (Width is 1 for
// binary logistic regression and the number of classes for softmax). Rows are
// grouped into Shards virtual shards: feature k belongs to shard k mod Shards
// and sits in slot k / Shards of that shard (docs/contracts.md, "Features, bias, shards").
// Every shard is one contiguous range of the flat parameter slice, so a shard
// can be copied, checkpointed or handed to another peer as one slice with no
// gather step.
//
// Shards must be a power of two so that the shard and slot of a feature are a
// mask and a shift in the hot loops instead of two integer divisions.
//
// A Layout is a small value; copy it freely. It is safe for concurrent use.
type Layout struct {
	Features uint64 // parameter rows, including the bias row
	Width    int    // float32 values per row
	Shards   int    // virtual shards, a power of two
	PerShard int    // slots per shard: ceil(Features / Shards)

	shift uint   // log2(Shards)
	mask  uint32 // Shards - 1
}

// ErrLayout is wrapped by every error NewLayout returns.
var ErrLayout = errors.New("invalid model layout")

// MaxFeatures is the largest number of parameter rows a layout can address:
// feature indices travel as uint32.
const MaxFeatures = 1 << 32

// NewLayout returns the layout for features rows of width floats split into
// shards shards.
func NewLayout(features uint64, width, shards int) (Layout, error) {
	switch {
	case features == 0:
		return Layout{}, fmt.Errorf("%w: zero features", ErrLayout)
	case features > MaxFeatures:
		return Layout{}, fmt.Errorf("%w: %d features is more than the %d a uint32 index can address", ErrLayout, features, uint64(MaxFeatures))
	case width < 1:
		return Layout{}, fmt.Errorf("%w: width %d, want at least 1", ErrLayout, width)
	case shards < 1 || shards&(shards-1) != 0:
		return Layout{}, fmt.Errorf("%w: %d shards, want a power of two (1, 2, 4, … 256, …)", ErrLayout, shards)
	case uint64(shards) > features:
		return Layout{}, fmt.Errorf("%w: %d shards for only %d features, want shards <= features", ErrLayout, shards, features)
	}
	per := (features + uint64(shards) - 1) / uint64(shards)
	total := per * uint64(shards) * uint64(width)
	if total > 1<<40 {
		return Layout{}, fmt.Errorf("%w: %d features x %d values is too large", ErrLayout, features, width)
	}
	return Layout{
		Features: features,
		Width:    width,
		Shards:   shards,
		PerShard: int(per),
		shift:    uint(bits.TrailingZeros(uint(shards))),
		mask:     uint32(shards - 1),
	}, nil
}

// Shard returns the shard of feature k.
func (l *Layout) Shard(k uint32) int { return int(k & l.mask) }

// Slot returns the slot of feature k within its shard.
func (l *Layout) Slot(k uint32) int { return int(k >> l.shift) }

// Offset returns the index in the flat parameter slice of the first of
// feature k's Width values.
func (l *Layout) Offset(k uint32) int {
	return (int(k&l.mask)*l.PerShard + int(k>>l.shift)) * l.Width
}

// Feature returns the feature stored in slot slot of shard shard: the inverse
// of Shard and Slot. The result may be >= Features for the padding slots at
// the end of a shard.
func (l *Layout) Feature(shard, slot int) uint32 {
	return uint32(slot)<<l.shift | uint32(shard)
}

// ShardSize is the number of float32 values in one shard's range.
func (l *Layout) ShardSize() int { return l.PerShard * l.Width }

// ShardRange returns the half-open range [lo, hi) of shard s in the flat slice.
func (l *Layout) ShardRange(s int) (lo, hi int) {
	lo = s * l.PerShard * l.Width
	return lo, lo + l.PerShard*l.Width
}

// Len is the length of the flat parameter slice.
func (l *Layout) Len() int { return l.Shards * l.PerShard * l.Width }

// Valid reports whether k is an addressable feature.
func (l *Layout) Valid(k uint32) bool { return uint64(k) < l.Features }

// Equal reports whether two layouts describe the same storage.
func (l Layout) Equal(o Layout) bool {
	return l.Features == o.Features && l.Width == o.Width && l.Shards == o.Shards
}

func (l Layout) String() string {
	return fmt.Sprintf("%d features x %d in %d shards of %d slots", l.Features, l.Width, l.Shards, l.PerShard)
}
