package wire

import (
	"math"
	"testing"
)

// Every half that is not a NaN survives half -> float32 -> half unchanged,
// and fromHalf agrees with the closed form (-1)^s * 2^(e-15) * (1 + m/1024)
// (subnormals: 2^-14 * m/1024).
func TestHalfExhaustiveRoundTrip(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := fromHalf(h)
		exp, mant := int(h>>10&0x1f), float64(h&0x3ff)
		sign := 1.0
		if h&0x8000 != 0 {
			sign = -1
		}
		var want float64
		switch {
		case exp == 31 && mant != 0:
			if !math.IsNaN(float64(f)) {
				t.Fatalf("fromHalf(%#04x) = %v, want NaN", h, f)
			}
			if back := toHalf(f); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("toHalf(NaN from %#04x) = %#04x, want a NaN", h, back)
			}
			continue
		case exp == 31:
			want = math.Inf(int(sign))
		case exp == 0:
			want = sign * math.Ldexp(mant/1024, -14)
		default:
			want = sign * math.Ldexp(1+mant/1024, exp-15)
		}
		if float64(f) != want || math.Signbit(float64(f)) != (sign < 0) {
			t.Fatalf("fromHalf(%#04x) = %v, want %v", h, f, want)
		}
		if back := toHalf(f); back != h {
			t.Fatalf("toHalf(fromHalf(%#04x)) = %#04x", h, back)
		}
	}
}

// Between every two adjacent finite halves, the midpoint rounds to the one
// with an even mantissa and the floats just either side of it round to the
// nearer half: round-to-nearest-even, checked exhaustively across normals,
// subnormals and the overflow boundary.
func TestHalfRoundsToNearestEven(t *testing.T) {
	for i := 0; i < 0x7c00; i++ { // positive finite halves; the next one up may be Inf
		lo, hi := uint16(i), uint16(i+1)
		flo, fhi := fromHalf(lo), fromHalf(hi)
		if hi == 0x7c00 {
			fhi = 65536 // where the next exponent would start: overflow rounds like it
		}
		mid := (flo + fhi) / 2 // exact: halves have 11 significant bits
		if float64(mid) != (float64(flo)+float64(fhi))/2 {
			t.Fatalf("midpoint of %#04x and %#04x not exact", lo, hi)
		}
		even := lo
		if lo&1 != 0 {
			even = hi
		}
		for _, c := range []struct {
			f    float32
			want uint16
		}{
			{flo, lo},
			{mid, even},
			{math.Nextafter32(mid, 0), lo},
			{math.Nextafter32(mid, float32(math.Inf(1))), hi},
		} {
			if got := toHalf(c.f); got != c.want {
				t.Fatalf("toHalf(%v) = %#04x, want %#04x (between %#04x and %#04x)", c.f, got, c.want, lo, hi)
			}
			if got := toHalf(-c.f); got != c.want|0x8000 {
				t.Fatalf("toHalf(%v) = %#04x, want %#04x", -c.f, got, c.want|0x8000)
			}
		}
	}
}

func TestHalfSpecialValues(t *testing.T) {
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},                  // largest finite half
		{65519.996, 0x7bff},              // just below the overflow midpoint
		{65520, 0x7c00},                  // midpoint to 2^16 rounds to even: Inf
		{1e9, 0x7c00},                    // overflow
		{float32(math.Inf(-1)), 0xfc00},  // -Inf
		{6.103515625e-05, 0x0400},        // smallest normal 2^-14
		{5.960464477539063e-08, 0x0001},  // smallest subnormal 2^-24
		{2.9802322387695312e-08, 0x0000}, // 2^-25: tie between 0 and 2^-24, rounds to even 0
		{2.9802326e-08, 0x0001},          // just above 2^-25
		{1e-10, 0x0000},                  // underflow
		{0.1, 0x2e66},                    // 0.0999755859375
	} {
		if got := toHalf(c.f); got != c.want {
			t.Errorf("toHalf(%v) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
}
