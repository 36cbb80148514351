package model

import (
	"syscall"
	"testing"
	"unsafe"
)

// freshFloats returns n float32s in memory mapped from the OS for the
// test alone, so no page of it was ever written: memory from make may
// reuse a span the Go heap freed earlier in the test binary, whose pages
// are resident (a CI run found all 16 MiB resident that way).
func freshFloats(t *testing.T, n int) []float32 {
	b, err := syscall.Mmap(-1, 0, n*4, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatalf("mmap %d bytes: %v", n*4, err)
	}
	t.Cleanup(func() { syscall.Munmap(b) })
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}
