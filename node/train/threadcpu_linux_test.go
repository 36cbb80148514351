package train

import (
	"syscall"
	"time"
)

// threadCPU is the calling OS thread's CPU time (RUSAGE_THREAD); the
// caller locks itself to its thread.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
