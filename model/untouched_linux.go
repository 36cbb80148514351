package model

import (
	"os"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// residency reports, for each page that v's memory spans, whether it is
// resident (mincore(2)); first is how many floats of the first page come
// before v[0], per the floats per page. Without swap a page that is not
// resident was never written (the Go runtime hands out memory zeroed,
// either untouched or cleared by writing), so ok is false when the system
// has swap.
func residency(v []float32) (res []bool, first, per int, ok bool) {
	if !noSwap() {
		return nil, 0, 0, false
	}
	page := os.Getpagesize()
	if page%4 != 0 {
		return nil, 0, 0, false
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	start := addr &^ uintptr(page-1)
	end := addr + uintptr(len(v))*4
	n := int((end - start + uintptr(page) - 1) / uintptr(page))
	vec := make([]byte, n)
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, start, uintptr(n*page), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return nil, 0, 0, false
	}
	res = make([]bool, n)
	for i, b := range vec {
		res[i] = b&1 != 0
	}
	return res, int(addr-start) / 4, page / 4, true
}

var noSwap = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/proc/swaps")
	if err != nil {
		return false
	}
	// A header line and no device.
	return len(strings.Split(strings.TrimSpace(string(b)), "\n")) == 1
})
