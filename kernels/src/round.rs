//! Host-side conversions with the exact rounding the GPU kernels perform:
//! one correct rounding to nearest (ties to even) from any source, which
//! `half`'s `from_f64` does not guarantee (it rounds twice through `f32`
//! or ignores low bits).
//!
//! The trick used on both sides: round toward zero to `f32` and set the
//! last bit when that was inexact ("round to odd"); an `f32` carries 13 or
//! more bits beyond `f16`/`bf16` precision, so rounding that result to
//! nearest once more gives the correctly rounded value.

use half::{bf16, f16};

/// `x` rounded toward zero to `f32` (`cvt.rz.f32.f64`).
pub(crate) fn f64_to_f32_rz(x: f64) -> f32 {
    let r = x as f32;
    if x.is_nan() || (r as f64).abs() <= x.abs() {
        return r;
    }
    // One step toward zero from a nonzero magnitude (inf steps to MAX).
    f32::from_bits(r.to_bits() - 1)
}

/// `v` rounded toward zero to `f32` (`cvt.rz.f32.s64`).
pub(crate) fn i64_to_f32_rz(v: i64) -> f32 {
    let r = v as f32;
    if (r as i128).abs() <= (v as i128).abs() {
        return r;
    }
    f32::from_bits(r.to_bits() - 1)
}

/// `x` rounded to `f32` by round-to-odd.
pub(crate) fn f64_to_f32_odd(x: f64) -> f32 {
    let r = f64_to_f32_rz(x);
    if x.is_nan() || r as f64 == x {
        r
    } else {
        f32::from_bits(r.to_bits() | 1)
    }
}

/// `v` rounded to `f32` by round-to-odd.
pub(crate) fn i64_to_f32_odd(v: i64) -> f32 {
    let r = i64_to_f32_rz(v);
    if r as i128 == v as i128 {
        r
    } else {
        f32::from_bits(r.to_bits() | 1)
    }
}

/// The bf16 bits nearest to `x` (ties to even; NaN stays NaN, quieted):
/// the integer sequence the PTX emits on targets without `cvt.rn.bf16`.
pub(crate) fn f32_to_bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if b & 0x7fff_ffff > 0x7f80_0000 {
        return ((b >> 16) | 0x40) as u16;
    }
    (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// `x` correctly rounded to `f16`.
pub(crate) fn f64_to_f16(x: f64) -> f16 {
    f16::from_f32(f64_to_f32_odd(x))
}

/// `x` correctly rounded to `bf16`.
pub(crate) fn f64_to_bf16(x: f64) -> bf16 {
    bf16::from_bits(f32_to_bf16_bits(f64_to_f32_odd(x)))
}

/// `x` correctly rounded to `bf16`.
#[cfg(test)]
pub(crate) fn f32_to_bf16(x: f32) -> bf16 {
    bf16::from_bits(f32_to_bf16_bits(x))
}

/// `v` correctly rounded to `f16` (integers beyond 2^24 overflow to inf
/// either way, so one `f32` rounding first is harmless).
pub(crate) fn i64_to_f16(v: i64) -> f16 {
    f16::from_f32(v as f32)
}

/// `v` correctly rounded to `bf16`.
pub(crate) fn i64_to_bf16(v: i64) -> bf16 {
    bf16::from_bits(f32_to_bf16_bits(i64_to_f32_odd(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact nearest-even rounding of a finite f64 to `bits` of precision
    /// with minimum normal exponent `emin`, by integer arithmetic.
    fn exact_round(x: f64, bits: u32, emin: i32, emax: i32) -> f64 {
        if x == 0.0 || !x.is_finite() {
            return x;
        }
        let (m, e) = {
            let b = x.abs().to_bits();
            let exp = ((b >> 52) & 0x7ff) as i32;
            let frac = b & ((1 << 52) - 1);
            if exp == 0 {
                (frac, -1074)
            } else {
                (frac | (1 << 52), exp - 1075)
            }
        };
        // value = m * 2^e; quantum of the target at this magnitude
        let top = 63 - m.leading_zeros() as i32 + e; // floor(log2 |x|)
        let q = (top.max(emin) - (bits as i32 - 1)).max(emin - (bits as i32 - 1));
        let shift = q - e;
        let r = if shift <= 0 {
            (m as u128) << (-shift)
        } else if shift >= 100 {
            0
        } else {
            let m = m as u128;
            let down = m >> shift;
            let rem = m - (down << shift);
            let half = 1u128 << (shift - 1);
            if rem > half || (rem == half && down & 1 == 1) {
                down + 1
            } else {
                down
            }
        };
        let v = r as f64 * 2f64.powi(q);
        let max = (2.0 - 2f64.powi(1 - bits as i32)) * 2f64.powi(emax);
        let v = if v > max { f64::INFINITY } else { v };
        v.copysign(x)
    }

    fn samples() -> Vec<f64> {
        let mut s = vec![
            0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 6e-8, 3e-8, 1e-40,
        ];
        let mut state = 0x1234_5678_9abc_def0u64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // random bits in a sensible exponent window
            let exp = 1023 - 140 + (state >> 56) as i64 % 280;
            let bits = ((exp as u64) << 52) | (state & ((1 << 52) - 1));
            let x = f64::from_bits(bits);
            s.push(if state & 1 == 0 { x } else { -x });
            // ties: a value exactly halfway plus a tiny bit
            let t = f64::from_bits(bits & !((1 << 29) - 1) | (1 << 28));
            s.push(t);
            s.push(f64::from_bits(t.to_bits() + 1));
        }
        s
    }

    #[test]
    fn f64_to_f16_is_correctly_rounded() {
        for x in samples() {
            let want = exact_round(x, 11, -14, 15);
            assert_eq!(f64_to_f16(x).to_f64(), want, "x = {x:e}");
        }
    }

    #[test]
    fn f64_to_bf16_is_correctly_rounded() {
        for x in samples() {
            let want = exact_round(x, 8, -126, 127);
            assert_eq!(f64_to_bf16(x).to_f64(), want, "x = {x:e}");
        }
    }

    #[test]
    fn f32_to_bf16_matches_half() {
        let mut state = 99u32;
        for _ in 0..1_000_000 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let x = f32::from_bits(state);
            assert_eq!(
                f32_to_bf16(x).to_bits(),
                bf16::from_f32(x).to_bits(),
                "x bits {state:#x}"
            );
        }
    }

    /// What sm_80's `cvt.rn.bf16.f32` (and each half of
    /// `cvt.rn.bf16x2.f32`) computes, per the PTX ISA: `x` rounded to
    /// nearest even in bf16's precision, subnormals kept (no `.ftz`),
    /// beyond the largest bf16 to infinity; NaN gives a NaN. Computed here
    /// independently of [`f32_to_bf16_bits`], through exact `f64` rounding.
    fn cvt_rn_bf16(x: f32) -> Option<u16> {
        if x.is_nan() {
            return None; // any NaN
        }
        let v = exact_round(x as f64, 8, -126, 127);
        let b = (v as f32).to_bits();
        assert_eq!(b & 0xffff, 0, "{v:e} is not a bf16");
        Some((b >> 16) as u16)
    }

    /// The rounding the interpreter (and the sm_70 integer sequence)
    /// performs is the one the sm_80 conversion performs, on every upper
    /// half of an f32 with low halves at and around the tie (and random
    /// ones), so the two targets compute the same bits; a NaN stays NaN
    /// (the interpreter keeps sign and top payload, quieted; the hardware
    /// conversion may not, which only a NaN's payload can show).
    #[test]
    fn f32_to_bf16_is_the_native_conversion() {
        let mut state = 0x9e37_79b9u32;
        let mut ties = 0;
        for hi in 0..=0xffffu32 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let los = [0x8000, 0, 1, 0x7fff, 0x8001, 0xfffe, 0xffff, state & 0xffff];
            for (i, lo) in los.into_iter().enumerate() {
                let bits = hi << 16 | lo;
                let x = f32::from_bits(bits);
                let got = f32_to_bf16_bits(x);
                match cvt_rn_bf16(x) {
                    Some(want) => assert_eq!(got, want, "x bits {bits:#010x}"),
                    None => {
                        assert!(bf16::from_bits(got).is_nan(), "x bits {bits:#010x}");
                        assert_eq!(got, (hi | 0x40) as u16, "quieted, sign kept");
                    }
                }
                ties += (i == 0 && !x.is_nan()) as u32;
            }
        }
        assert_eq!(ties, 0x10000 - 2 * 0x80, "every top half but the NaNs'");
        // the interpreter's instruction for it
        use crate::interp::{run_elementwise, HostData, HostView};
        use crate::ir::ElementwiseBuilder;
        use tensorfn_core::DTypeKind;
        let mut k = ElementwiseBuilder::new();
        let x = k.input(DTypeKind::F32);
        let y = k.cast(x, DTypeKind::BF16);
        let kernel = k.output(y).unwrap();
        let xs: Vec<f32> = (0..=0xffffu32)
            .flat_map(|hi| [0, 0x7fff, 0x8000, 0x8001].map(|lo| f32::from_bits(hi << 16 | lo)))
            .collect();
        let data = HostData::F32(xs.clone());
        let out = run_elementwise(&kernel, &[HostView::contiguous(&data)], &[xs.len()]).unwrap();
        let HostData::BF16(out) = out else {
            panic!("bf16 output")
        };
        for (x, y) in xs.iter().zip(&out) {
            match cvt_rn_bf16(*x) {
                Some(want) => assert_eq!(y.to_bits(), want, "x bits {:#010x}", x.to_bits()),
                None => assert!(y.is_nan()),
            }
        }
    }

    #[test]
    fn integers_round_once() {
        let cases = [
            i64::MAX,
            i64::MIN,
            (1 << 40) + (1 << 32) + 1,
            (1 << 40) + (1 << 32),
            -((1 << 40) + (1 << 32) + 1),
            16_777_217,
            257,
            -257,
        ];
        for v in cases {
            let want = exact_round(v as f64, 8, -126, 127);
            // (v as f64) is exact for these or the rounding below is too coarse to matter
            if (v as f64) as i128 == v as i128 {
                assert_eq!(i64_to_bf16(v).to_f64(), want, "v = {v}");
            }
        }
        // 2^40 + 2^32 + 1: halfway between two bf16 values plus one, so up.
        let v = (1i64 << 40) + (1 << 32) + 1;
        assert_eq!(i64_to_bf16(v).to_f64(), ((1i64 << 40) + (1 << 33)) as f64);
        assert_eq!(i64_to_f32_rz(16_777_217), 16_777_216.0);
        assert_eq!(i64_to_f32_rz(-16_777_219), -16_777_218.0);
        assert_eq!(f64_to_f32_rz(1e300), f32::MAX);
        assert_eq!(i64_to_f16(70_000).to_f64(), f64::INFINITY);
    }
}
