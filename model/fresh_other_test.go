//go:build !linux

package model

import "testing"

// freshFloats returns n zero float32s (residency is not known here, so
// whether their pages were written does not matter).
func freshFloats(_ *testing.T, n int) []float32 { return make([]float32, n) }
