// Package human formats figures for people: the counts, durations, sizes
// and rounded numbers of log lines, progress lines and result tables.
package human

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Count formats n with a k/M/G suffix: 950, 1.5k, 2.40M, 1.00G.
func Count(n float64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fG", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", n/1e3)
	}
	return fmt.Sprintf("%.0f", n)
}

// ParseCount reads what Count wrote ("1.5k" is 1500); ok is false for
// anything else.
func ParseCount(s string) (n float64, ok bool) {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "G"):
		mult, s = 1e9, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1e6, s[:len(s)-1]
	case strings.HasSuffix(s, "k"):
		mult, s = 1e3, s[:len(s)-1]
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return f * mult, true
}

// Duration rounds d for display: to 100 ms under a minute, to the second
// under an hour, to the minute beyond.
func Duration(d time.Duration) time.Duration {
	switch {
	case d > time.Hour:
		return d.Round(time.Minute)
	case d > time.Minute:
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}

// Round4 rounds f to 4 decimals (a log-loss in a log line); NaN and the
// infinities stay as they are.
func Round4(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return f
	}
	return math.Round(f*1e4) / 1e4
}

// Bytes formats n bytes with a binary unit: 512 bytes, 1.5 KiB, 2.0 MiB.
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
