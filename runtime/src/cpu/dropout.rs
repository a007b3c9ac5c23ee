//! Seeded `dropout` on the CPU: element `i` of the row-major order times
//! its mask value, `1 / (1 - p)` or 0.

use crate::dtype::DType;
use crate::layout::Layout;
use tensorfn_core::ops::dropout::{bits, scale, threshold};

/// See `Backend::dropout`.
pub(crate) fn dropout<T: DType>(x: &[T], l: &Layout, p: f64, seed: u64) -> Vec<T> {
    let (cut, s) = (threshold(p), scale(p));
    l.offsets()
        .enumerate()
        .map(|(i, o)| {
            let m = if bits(seed, i as u64) as u64 >= cut {
                s
            } else {
                0.0
            };
            T::from_f64(x[o].to_f64() * m)
        })
        .collect()
}
