//! The constants and the two argument reductions, checked on the host.
//! (The accuracy of whole functions is measured by `tests/accuracy.rs`.)

use super::coeffs::{COS_F64, EXP_F64, SIN_F64};
use super::trig::{cody_waite, payne_hanek_f32, PIO2_F32, PIO2_F64, TWO_OVER_PI_BITS};
use crate::interp::eval::run;
use crate::prim::{Builder, Ty};

#[test]
fn split_constants_sum_to_their_value() {
    let f32_sum: f64 = PIO2_F32.iter().map(|&p| p as f64).sum();
    assert!((f32_sum - std::f64::consts::FRAC_PI_2).abs() < 1e-16);
    assert_eq!(PIO2_F64[0], std::f64::consts::FRAC_PI_2);
    assert!(PIO2_F64[1].abs() < 2f64.powi(-52) && PIO2_F64[2].abs() < 2f64.powi(-104));
    // 2/pi: the first 64 bits of the table against f64's 53
    let top = ((TWO_OVER_PI_BITS[0] as u64) << 32) | TWO_OVER_PI_BITS[1] as u64;
    let f = std::f64::consts::FRAC_2_PI;
    let m = (f * 2f64.powi(64)) as u64;
    assert!(top.abs_diff(m) < 1 << 12, "{top:#x} vs {m:#x}");
}

#[test]
fn taylor_coefficients_are_reciprocal_factorials() {
    let fact = |n: u32| (1..=n).map(|k| k as f64).product::<f64>();
    for (i, &c) in EXP_F64.iter().enumerate() {
        let n = 13 - i as u32;
        assert!((c * fact(n) - 1.0).abs() < 1e-15, "1/{n}!");
    }
    for (i, &c) in SIN_F64.iter().enumerate() {
        let k = 8 - i as i32;
        let want = (-1f64).powi(k) / fact(2 * k as u32 + 1);
        assert!((c / want - 1.0).abs() < 1e-15);
    }
    for (i, &c) in COS_F64.iter().enumerate() {
        let k = 9 - i as i32;
        let want = (-1f64).powi(k) / fact(2 * k as u32);
        assert!((c / want - 1.0).abs() < 1e-15);
    }
}

/// Where both reductions are exact enough, they agree: same quadrant and
/// remainders within an ulp of the remainder.
#[test]
fn payne_hanek_agrees_with_cody_waite() {
    let mut b = Builder::new();
    let x = b.param(Ty::F32);
    let (r1, q1) = cody_waite(&mut b, x);
    let (r2, q2) = payne_hanek_f32(&mut b, x);
    let prog = b.finish(vec![r1, q1, r2, q2]);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let xs: Vec<u64> = (0..20_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mag = 1.0 + (state >> 11) as f64 / (1u64 << 53) as f64 * 60_000.0;
            let x = if state & 1 == 0 { mag } else { -mag } as f32;
            x.to_bits() as u64
        })
        .collect();
    let out = run(&prog, &[&xs], xs.len());
    for i in 0..xs.len() {
        let x = f32::from_bits(xs[i] as u32);
        let (r1, r2) = (
            f32::from_bits(out[0][i] as u32),
            f32::from_bits(out[2][i] as u32),
        );
        let (q1, q2) = (out[1][i] as u32 & 3, out[3][i] as u32 & 3);
        if r1.abs() > 0.78 {
            continue; // near a quadrant boundary either choice is right
        }
        assert_eq!(q1, q2, "quadrant of {x}");
        let ulp = f32::from_bits(r1.abs().to_bits() + 1) - r1.abs();
        assert!((r1 - r2).abs() <= 2.0 * ulp, "{x}: {r1} vs {r2}");
    }
}
