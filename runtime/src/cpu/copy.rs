//! Moving elements between layouts and dtypes.

use super::elementwise::map1;
use super::strided::Plan;
use crate::dtype::DType;
use crate::layout::Layout;

/// A contiguous copy of the elements `l` selects.
pub(crate) fn contiguous<T: DType>(x: &[T], l: &Layout) -> Vec<T> {
    if l.numel() == 0 {
        return Vec::new();
    }
    if l.is_contiguous() {
        let start = l.offset();
        return x[start..start + l.numel()].to_vec();
    }
    map1(x, l, |v| v)
}

/// Writes the elements `ls` selects from `src` to the positions `ld`
/// selects in `dst` (equal dims).
pub(crate) fn copy_into<T: DType>(src: &[T], ls: &Layout, dst: &mut [T], ld: &Layout) {
    let plan = Plan::new(ld.dims(), [ld, ls]);
    let [sd, ss] = plan.steps();
    plan.for_each_run(0, plan.numel(), |_, [bd, bs], len| {
        if sd == 1 && ss == 1 {
            dst[bd..bd + len].copy_from_slice(&src[bs..bs + len]);
        } else {
            for j in 0..len {
                dst[bd + j * sd] = src[bs + j * ss];
            }
        }
    });
}

/// Every element converted to `U` (see [`DType::cast`]).
pub(crate) fn cast<T: DType, U: DType>(x: &[T], l: &Layout) -> Vec<U> {
    map1(x, l, |v: T| v.cast::<U>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_into_a_strided_destination() {
        let src: Vec<i32> = (0..6).collect();
        let ls = Layout::contiguous(&[2, 3]);
        let mut dst = vec![0; 12];
        // Columns 1..4 of a [2, 6] buffer, transposed source.
        let ld = Layout::contiguous(&[2, 6]).slice(1, 1, 4);
        copy_into(&src, &ls, &mut dst, &ld);
        assert_eq!(dst, vec![0, 0, 1, 2, 0, 0, 0, 3, 4, 5, 0, 0]);
        let t = Layout::contiguous(&[3, 2]).permute(&[1, 0]);
        assert_eq!(contiguous(&src, &t), vec![0, 2, 4, 1, 3, 5]);
    }
}
