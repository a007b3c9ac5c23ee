//! Moving elements between layouts and dtypes.

use super::elementwise::map1;
use super::strided::Plan;
use crate::backend::RowBlocks;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;

/// A new buffer of `n` elements filled by `fill(index)`; a size the host
/// cannot allocate is an `Err`, not an abort.
pub(crate) fn try_filled<T>(n: usize, fill: impl FnMut(usize) -> T) -> Result<Vec<T>> {
    let requested = n.saturating_mul(std::mem::size_of::<T>());
    let mut data = Vec::new();
    data.try_reserve_exact(n)
        .map_err(|_| Error::HostOutOfMemory { requested })?;
    data.extend((0..n).map(fill));
    Ok(data)
}

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

/// The elements a layout selects from a host buffer, in row-major order
/// (what a download from the host is).
pub(crate) fn gather<T: Copy>(data: &[T], layout: &Layout) -> Vec<T> {
    if layout.is_contiguous() {
        let start = layout.offset();
        return data[start..start + layout.numel()].to_vec();
    }
    layout.offsets().map(|i| data[i]).collect()
}

/// Below this many bytes a host copy runs on the calling thread: waking
/// other threads costs more than it saves.
const PARALLEL_COPY_BYTES: usize = 1 << 20;

/// `dst.copy_from_slice(src)` spread over the rayon pool for large
/// buffers: one core cannot keep up with a PCIe 5 DMA engine, and a fresh
/// destination's page faults are served on every core at once.
pub(crate) fn parallel_copy<T: Copy + Send + Sync>(src: &[T], dst: &mut [T]) {
    debug_assert_eq!(src.len(), dst.len());
    let bytes = std::mem::size_of_val(src);
    let threads = rayon::current_num_threads();
    if bytes < 2 * PARALLEL_COPY_BYTES || threads < 2 {
        dst.copy_from_slice(src);
        return;
    }
    let pieces = (bytes / PARALLEL_COPY_BYTES).min(threads);
    let per = src.len().div_ceil(pieces);
    super::par::zip_chunks_mut(dst, per, src, per, &|d, s| d.copy_from_slice(s));
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

/// The rows of `plan`, built block by block into a buffer that is never
/// filled first.
pub(crate) fn cat_rows<T: DType>(plan: &RowBlocks<'_, Vec<T>>) -> Result<Vec<T>> {
    let n = plan.checked_len(|b| b.len())?;
    let mut out = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| Error::HostOutOfMemory {
            requested: n.saturating_mul(std::mem::size_of::<T>()),
        })?;
    for r in 0..plan.outer {
        for p in &plan.parts {
            let at = p.start + r * p.inner;
            out.extend_from_slice(&p.buf[at..at + p.inner]);
        }
    }
    Ok(out)
}

/// Every element converted to `U` (see [`DType::cast`]).
pub(crate) fn cast<T: DType, U: DType>(x: &[T], l: &Layout) -> Vec<U> {
    map1(x, l, |v: T| v.cast::<U>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::RowBlock;

    #[test]
    fn cat_rows_interleaves_blocks_and_checks_extents() {
        let a: Vec<i32> = (0..6).collect();
        let b: Vec<i32> = (10..20).collect();
        let block = |buf, start, inner| RowBlock { buf, start, inner };
        // a as [2, 3], b as [2, 2] starting at element 4.
        let plan = RowBlocks {
            outer: 2,
            row: 5,
            parts: vec![block(&a, 0, 3), block(&b, 4, 2)],
        };
        assert_eq!(
            cat_rows(&plan).unwrap(),
            vec![0, 1, 2, 14, 15, 3, 4, 5, 16, 17]
        );
        let short = RowBlocks {
            outer: 2,
            row: 5,
            parts: vec![block(&a, 1, 3), block(&b, 4, 2)],
        };
        assert!(cat_rows(&short).is_err());
    }

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
