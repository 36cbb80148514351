package wire

import "math"

// Float16 conversion, written for this package: IEEE 754 binary16 with
// round-to-nearest-even, gradual underflow (subnormals) and overflow to
// infinity, so that for every half h that is not a NaN,
// toHalf(fromHalf(h)) == h (checked exhaustively in half_test.go).

const (
	halfMax     = 65504 // largest finite half
	halfExpMask = 0x7c00
)

// toHalf rounds f to the nearest half, ties to even. Values beyond the half
// range become ±Inf; NaNs stay NaNs (quiet, keeping the top payload bits).
func toHalf(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23) & 0xff
	mant := u & 0x7fffff
	if exp == 0xff {
		if mant == 0 {
			return sign | halfExpMask
		}
		return sign | halfExpMask | 0x200 | uint16(mant>>13)
	}
	e := exp - 127 + 15
	if e >= 31 {
		return sign | halfExpMask
	}
	if e <= 0 {
		// Half subnormal: the value is m * 2^-24 with m = mant24 >> (14-e).
		if e < -10 {
			return sign // below half the smallest subnormal: rounds to zero
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		r := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && r&1 == 1 {
			r++ // may carry into the smallest normal: still the right bits
		}
		return sign | uint16(r)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++ // may carry into the exponent, up to Inf: the right answer
	}
	return sign | uint16(h)
}

// fromHalf returns the float32 equal to half h (exact: every half is a float32).
func fromHalf(h uint16) float32 {
	return math.Float32frombits(halfBits(uint32(h>>15), uint32(h>>10)&0x1f, uint32(h&0x3ff)))
}

// halfBits assembles the float32 bits of the half with the given sign,
// 5-bit exponent field and 10-bit mantissa.
func halfBits(sign, exp, mant uint32) uint32 {
	switch exp {
	case 0x1f:
		return sign<<31 | 0x7f800000 | mant<<13
	case 0:
		if mant == 0 {
			return sign << 31
		}
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return sign<<31 | e<<23 | (mant&0x3ff)<<13
	}
	return sign<<31 | (exp+127-15)<<23 | mant<<13
}
