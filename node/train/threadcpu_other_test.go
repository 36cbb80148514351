//go:build !linux

package train

import "time"

// threadCPU is not known here: the caller measures wall time.
func threadCPU() (time.Duration, bool) { return 0, false }
