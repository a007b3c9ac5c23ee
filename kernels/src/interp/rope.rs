//! The `rope` kernel on the host, operation for operation as its PTX
//! entry computes it (products and sums rounded once in f32, or f64 for
//! f64, then the result rounded to the dtype once).

use super::HostData;
use crate::error::{Error, Result};
use tensorfn_core::DTypeKind;

/// `rope` of `rows` contiguous rows of `d` (even) elements of `input`,
/// row `r` at position `r % positions`, with `cos` and `sin` of
/// `positions` rows of `d` elements, as the GPU computes it.
///
/// ```
/// use tensorfn_kernels::interp::{self, HostData};
/// let x = HostData::F32(vec![1.0, 2.0]);
/// let c = HostData::F32(vec![0.0, 0.0]);
/// let s = HostData::F32(vec![1.0, 1.0]);
/// // A quarter turn: (1, 2) to (-2, 1).
/// assert_eq!(interp::rope(&x, &c, &s, 1, 1, 2)?, HostData::F32(vec![-2.0, 1.0]));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn rope(
    input: &HostData,
    cos: &HostData,
    sin: &HostData,
    rows: usize,
    positions: usize,
    d: usize,
) -> Result<HostData> {
    let dtype = input.dtype();
    let check = |operand: &str, x: &HostData, n: Option<usize>| -> Result<()> {
        if !x.dtype().is_float() || x.dtype() != dtype || n != Some(x.len()) || d % 2 != 0 {
            return Err(Error::Buffer {
                operand: operand.into(),
                message: format!(
                    "holds {} {} elements; {n:?} elements of {} in rows of an even length ({d}) needed",
                    x.len(),
                    x.dtype().name(),
                    dtype.name()
                ),
            });
        }
        Ok(())
    };
    check("in", input, rows.checked_mul(d))?;
    check("cos", cos, positions.checked_mul(d))?;
    check("sin", sin, positions.checked_mul(d))?;
    if rows > 0 && positions == 0 {
        return Err(Error::Buffer {
            operand: "cos".into(),
            message: "no positions for the rows".into(),
        });
    }
    let wide = dtype == DTypeKind::F64;
    let r = |v: f64| if wide { v } else { v as f32 as f64 };
    let (x, c, s) = (input.to_f64_vec(), cos.to_f64_vec(), sin.to_f64_vec());
    let half = d / 2;
    let mut out = vec![0.0; rows * d];
    for row in 0..rows {
        let p = (row % positions) * d;
        let o = row * d;
        for j in 0..half {
            let (x1, x2) = (x[o + j], x[o + j + half]);
            let (c1, c2, s1, s2) = (c[p + j], c[p + j + half], s[p + j], s[p + j + half]);
            out[o + j] = r(r(x1 * c1) - r(x2 * s1));
            out[o + j + half] = r(r(x2 * c2) + r(x1 * s2));
        }
    }
    Ok(HostData::from_f64(dtype, &out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorfn_core::ops::rope::rope_f64;

    #[test]
    fn follows_the_reference() {
        let d = 8;
        let (rows, positions) = (6, 3);
        let v = |n: usize, k: f64| -> Vec<f64> {
            (0..n).map(|i| ((i as f64) * k).sin() * 2.0).collect()
        };
        let (x, c, s) = (
            v(rows * d, 0.7),
            v(positions * d, 1.3),
            v(positions * d, 2.1),
        );
        for dtype in [
            DTypeKind::F32,
            DTypeKind::F64,
            DTypeKind::F16,
            DTypeKind::BF16,
        ] {
            let hx = HostData::from_f64(dtype, &x);
            let (hc, hs) = (HostData::from_f64(dtype, &c), HostData::from_f64(dtype, &s));
            let y = rope(&hx, &hc, &hs, rows, positions, d)
                .unwrap()
                .to_f64_vec();
            let (xr, cr, sr) = (hx.to_f64_vec(), hc.to_f64_vec(), hs.to_f64_vec());
            for row in 0..rows {
                let p = (row % positions) * d;
                let want = rope_f64(&xr[row * d..(row + 1) * d], &cr[p..p + d], &sr[p..p + d]);
                for (g, w) in y[row * d..(row + 1) * d].iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-2 * (1.0 + w.abs()),
                        "{dtype}: {g} vs {w}"
                    );
                }
            }
        }
        assert!(rope(
            &HostData::F32(vec![0.0; 3]),
            &HostData::F32(vec![0.0; 3]),
            &HostData::F32(vec![0.0; 3]),
            1,
            1,
            3
        )
        .is_err());
    }
}
