//! `cumsum` along one dim on the CPU: each lane added in order, floats in
//! f32 (f64 for f64) rounded to their dtype at each step, integers in
//! `i64` (wrapping, as PyTorch's).

use super::copy::contiguous;
use crate::dtype::{DType, NumDType};
use crate::layout::Layout;
use tensorfn_core::DTypeKind;

/// See `Backend::cumsum` (`U` checked by the caller).
pub(crate) fn cumsum<T: NumDType, U: NumDType>(x: &[T], l: &Layout, dim: usize) -> Vec<U> {
    let dims = l.dims();
    let n = l.numel();
    let dense = contiguous(x, l);
    if dims.is_empty() {
        return dense.iter().map(|v| convert::<T, U>(*v)).collect();
    }
    let len = dims[dim];
    let inner: usize = dims[dim + 1..].iter().product();
    let outer = n.checked_div(len * inner).unwrap_or(0);
    let mut out = vec![U::from_f64(0.0); n];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * len + j) * inner + i;
            match T::KIND {
                DTypeKind::F64 => {
                    let mut acc = 0.0f64;
                    for j in 0..len {
                        acc += dense[at(j)].to_f64();
                        out[at(j)] = U::from_f64(acc);
                    }
                }
                k if k.is_float() => {
                    let mut acc = 0.0f32;
                    for j in 0..len {
                        acc += dense[at(j)].to_f64() as f32;
                        out[at(j)] = U::from_f64(acc as f64);
                    }
                }
                _ => {
                    let mut acc = 0i64;
                    for j in 0..len {
                        acc = acc.wrapping_add(dense[at(j)].to_i64());
                        out[at(j)] = U::from_i64(acc);
                    }
                }
            }
        }
    }
    out
}

fn convert<T: DType, U: DType>(v: T) -> U {
    if T::KIND.is_float() {
        U::from_f64(v.to_f64())
    } else {
        U::from_i64(v.to_i64())
    }
}
