package model

import (
	"fmt"
)

// A model's weights (and an owner's optimizer state) are one dense
// reservation of Layout.Len() floats, of which training touches only the
// pages its rows use: --dim 3000000000 trains Adult in tens of MiB of
// resident memory but reserves 12 GB of address space for the weights
// alone. Where the address space is limited (ulimit -v, as some hosts set
// it), Go's runtime cannot map such a block and the process dies with
// "runtime: out of memory" and a stack dump. CheckReservation tells
// before: the train path calls it before it builds the model, and the
// file readers before they allocate one.

// AddressSpaceError says a reservation does not fit under the process's
// address-space limit. It wraps ErrAddressSpace.
type AddressSpaceError struct {
	// Bytes is the reservation asked for.
	Bytes int64
	// What names it ("weights", "weights and adagrad state").
	What string
	// Resource is the limit's name: "RLIMIT_AS" (ulimit -v) or
	// "RLIMIT_DATA" (ulimit -d).
	Resource string
	// Limit is the limit in bytes; InUse what the process had mapped under
	// it when checked; Margin the address space kept for the rest of the
	// run (threads, buffers, the collector).
	Limit, InUse, Margin int64
}

func (e *AddressSpaceError) Error() string {
	ulimit := "ulimit -v"
	if e.Resource == "RLIMIT_DATA" {
		ulimit = "ulimit -d"
	}
	left := max(0, e.Limit-e.InUse-e.Margin)
	return fmt.Sprintf("the model's %s need %s (%d bytes) of address space, and the process may map only %s more: its limit %s (%s) is %s (%d bytes), %s of it in use and %s kept for the rest of the run",
		e.What, FormatBytes(e.Bytes), e.Bytes, FormatBytes(left), e.Resource, ulimit, FormatBytes(e.Limit), e.Limit, FormatBytes(e.InUse), FormatBytes(e.Margin))
}

func (e *AddressSpaceError) Unwrap() error { return ErrAddressSpace }

// ReserveMargin is the address space a check keeps free beyond the
// reservation for the rest of the process: the threads' stacks, the
// data readers' buffers, the batches, the collector's growth. Adult
// trained with --dim 1048576 (8 MiB of weights and state) peaked at
// 1.73 GiB of address space (VmPeak) after the check saw 1.58 GiB in use
// at 2 threads; each further --threads adds a thread and its stack.
const ReserveMargin = 512 << 20

// Reservation returns the bytes of the dense reservation a model of this
// shape needs: its weights and, with withState, the optimizer state of
// every shard (a model trained alone owns them all).
func Reservation(kind Kind, dim uint64, classes, hidden, shards int, opt OptKind, withState bool) (int64, error) {
	m, err := newShape(kind, dim, classes, hidden, shards, DefaultOptConfig(opt))
	if err != nil {
		return 0, err
	}
	n := int64(m.Layout.Len())
	if withState {
		n *= 1 + int64(opt.StatePerWeight())
	}
	return 4 * n, nil
}

// CheckReservation reports, as an *AddressSpaceError, when the dense
// reservation of a model of this shape (see Reservation) does not fit
// under the process's address-space limits (RLIMIT_AS and RLIMIT_DATA)
// beside what the process has mapped already and ReserveMargin. Without a
// limit, or where the limits cannot be read, it returns nil. Errors of the
// shape itself wrap ErrConfig.
func CheckReservation(kind Kind, dim uint64, classes, hidden, shards int, opt OptKind, withState bool) error {
	n, err := Reservation(kind, dim, classes, hidden, shards, opt, withState)
	if err != nil {
		return err
	}
	what := "weights"
	if withState && opt.StatePerWeight() > 0 {
		what = "weights and " + opt.String() + " state"
	}
	return checkAddressSpaceFor(n, what)
}

// checkAddressSpace checks a reservation of n bytes for a model being
// read.
func checkAddressSpace(n int64) error { return checkAddressSpaceFor(n, "weights and state") }

func checkAddressSpaceFor(n int64, what string) error {
	for _, l := range addressLimits() {
		if n+l.inUse+ReserveMargin > l.limit {
			return &AddressSpaceError{Bytes: n, What: what, Resource: l.name, Limit: l.limit, InUse: l.inUse, Margin: ReserveMargin}
		}
	}
	return nil
}

// addressLimit is one limit on the process's mappings and what it has
// mapped under it.
type addressLimit struct {
	name         string
	limit, inUse int64
}

// FormatBytes writes n bytes in binary units: "512 B", "4.0 KiB",
// "11.2 GiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/unit, 0
	for f >= unit && i < 5 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTPE"[i])
}

// CheckOwnAll reports, as CheckReservation does, when the optimizer state
// OwnAll would allocate for the shards m does not own yet does not fit
// under the process's address-space limits: a model read from a file
// without state (train --init) has its weights mapped already.
func (m *Model) CheckOwnAll() error {
	var n int64
	for _, st := range m.State {
		if st == nil {
			n += 4 * int64(m.Layout.ShardSize()) * int64(m.Opt.Kind.StatePerWeight())
		}
	}
	if n == 0 {
		return nil
	}
	return checkAddressSpaceFor(n, m.Opt.Kind.String()+" state")
}
