package human

import (
	"math"
	"testing"
	"time"
)

// Figures read as the logs, progress lines and tables have always shown
// them.
func TestFormats(t *testing.T) {
	for n, want := range map[float64]string{0: "0", 950: "950", 1500: "1.5k", 2.4e6: "2.40M", 1e9: "1.00G"} {
		if got := Count(n); got != want {
			t.Errorf("Count(%v) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{1234 * time.Millisecond: "1.2s", 90500 * time.Millisecond: "1m31s", 3*time.Hour + 29*time.Second: "3h0m0s"} {
		if got := Duration(d).String(); got != want {
			t.Errorf("Duration(%v) = %s, want %s", d, got, want)
		}
	}
	if Round4(0.123456) != 0.1235 || !math.IsNaN(Round4(math.NaN())) || !math.IsInf(Round4(math.Inf(1)), 1) {
		t.Errorf("Round4: %v %v %v", Round4(0.123456), Round4(math.NaN()), Round4(math.Inf(1)))
	}
	for n, want := range map[int64]string{512: "512 bytes", 1536: "1.5 KiB", 2 << 20: "2.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestParseCount reads back what Count writes.
func TestParseCount(t *testing.T) {
	for _, n := range []float64{950, 1500, 48800, 2.4e6, 1e9} {
		got, ok := ParseCount(Count(n))
		if !ok || math.Abs(got-n) > n*0.01 {
			t.Errorf("ParseCount(Count(%v) = %q) = %v, %v", n, Count(n), got, ok)
		}
	}
	for _, s := range []string{"", "k", "fast", "-3k"} {
		if _, ok := ParseCount(s); ok {
			t.Errorf("ParseCount(%q) ok, want not", s)
		}
	}
}
