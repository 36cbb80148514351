package model

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// Under an address-space limit (ulimit -v), a model whose dense
// reservation does not fit is refused with an error that names the
// bytes and the limit, before anything is allocated: by CheckReservation
// (train's check) and by LoadFile. A model that fits passes.
func TestCheckReservationUnderLimit(t *testing.T) {
	// A model file that needs 16 GiB of address space: dim 2^32-1, one
	// row (a small model's file with its header's dim changed, rather than
	// 16 GiB reserved in this test).
	small := mustNew(t, Logreg, 1000, 0, 256, DefaultOptConfig(AdaGrad))
	small.Row(123)[0] = 1
	b := encode(t, small, SaveOptions{})
	end := preamble + int(binary.LittleEndian.Uint32(b[16:]))
	binary.LittleEndian.PutUint64(b[preamble+4:], 1<<32-1)
	binary.LittleEndian.PutUint64(b[end:], xxhash.Sum64(b[:end]))
	rehash(b)
	path := filepath.Join(t.TempDir(), "big.gt")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}

	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &old); err != nil {
		t.Skip(err)
	}
	status, err := os.ReadFile("/proc/self/status")
	inUse, ok := statusKiB(status, "VmSize:")
	if err != nil || !ok {
		t.Skip("/proc/self/status has no VmSize here")
	}
	limit := uint64(inUse + ReserveMargin + 1<<30) // 1 GiB to spare
	if limit > old.Max {
		t.Skipf("cannot set RLIMIT_AS to %d (hard limit %d)", limit, old.Max)
	}
	lim := old
	lim.Cur = limit
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &lim); err != nil {
		t.Skip(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_AS, &old)

	if err := CheckReservation(Logreg, 1<<20, 0, 0, 256, AdaGrad, true); err != nil {
		t.Errorf("8 MiB under a limit with 1 GiB to spare: %v", err)
	}
	err = CheckReservation(Logreg, 3000000000, 0, 0, 256, AdaGrad, true)
	var ae *AddressSpaceError
	if !errors.As(err, &ae) || !errors.Is(err, ErrAddressSpace) {
		t.Fatalf("24 GB under a limit of %d: %v, want an *AddressSpaceError", limit, err)
	}
	want, _ := Reservation(Logreg, 3000000000, 0, 0, 256, AdaGrad, true)
	if ae.Bytes != want || ae.Bytes < 24e9 || ae.Limit != int64(limit) || ae.Resource != "RLIMIT_AS" || ae.InUse <= 0 {
		t.Errorf("error fields %+v, want %d bytes under RLIMIT_AS %d", ae, want, limit)
	}
	t.Log(err)
	for _, s := range []string{"22.4 GiB", "24000002048 bytes", "adagrad state", "RLIMIT_AS (ulimit -v)", FormatBytes(int64(limit))} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
	// CheckOwnAll: the state a model read without any (train --init)
	// gets when a lone run owns every shard.
	if err := mustNew(t, Logreg, 1<<20, 0, 256, DefaultOptConfig(AdaGrad)).CheckOwnAll(); err != nil {
		t.Errorf("CheckOwnAll of 4 MiB of state: %v", err)
	}
	shape, err := newShape(Logreg, 3000000000, 0, 0, 256, DefaultOptConfig(AdaGrad)) // no weights allocated
	if err != nil {
		t.Fatal(err)
	}
	if err := shape.CheckOwnAll(); !errors.As(err, &ae) || ae.Bytes != want/2 || !strings.Contains(err.Error(), "adagrad state need 11.2 GiB") {
		t.Errorf("CheckOwnAll of 12 GB of adagrad state: %v, want an *AddressSpaceError of %d bytes", err, want/2)
	}
	_, err = LoadFile(path)
	if !errors.Is(err, ErrAddressSpace) || !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), "16.0 GiB") {
		t.Errorf("LoadFile of a 16 GiB model: %v, want ErrAddressSpace naming the file and 16.0 GiB", err)
	}
}
