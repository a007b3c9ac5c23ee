//! Walking several strided views of the same dims in lockstep, as runs
//! along the innermost dim, so loops over each run are simple enough for
//! the compiler to vectorise; and the split of large outputs over rayon.

use super::buffer::output_buffer;
use crate::layout::Layout;
use std::mem::MaybeUninit;

/// Outputs with at least this many elements are computed in parallel.
pub(crate) const PAR_THRESHOLD: usize = 32 * 1024;

/// `N` views of the same dims with adjacent dims merged where every view
/// allows it, so a contiguous set of views becomes one run.
#[derive(Clone, Debug)]
pub(crate) struct Plan<const N: usize> {
    dims: Vec<usize>,
    strides: Vec<[usize; N]>,
    offsets: [usize; N],
    numel: usize,
}

impl<const N: usize> Plan<N> {
    /// Plans a walk over `layouts`, which all have the dims `dims`.
    pub(crate) fn new(dims: &[usize], layouts: [&Layout; N]) -> Self {
        for l in layouts {
            debug_assert_eq!(l.dims(), dims);
        }
        let numel = dims.iter().product();
        let mut merged: Vec<(usize, [usize; N])> = Vec::with_capacity(dims.len());
        for (i, &d) in dims.iter().enumerate() {
            if d == 1 {
                continue;
            }
            let s: [usize; N] = std::array::from_fn(|k| layouts[k].strides()[i]);
            if let Some((pd, ps)) = merged.last_mut() {
                if (0..N).all(|k| ps[k] == s[k] * d) {
                    *pd *= d;
                    *ps = s;
                    continue;
                }
            }
            merged.push((d, s));
        }
        if merged.is_empty() {
            merged.push((1, [0; N]));
        }
        Plan {
            dims: merged.iter().map(|m| m.0).collect(),
            strides: merged.iter().map(|m| m.1).collect(),
            offsets: std::array::from_fn(|k| layouts[k].offset()),
            numel,
        }
    }

    /// Number of elements walked.
    pub(crate) fn numel(&self) -> usize {
        self.numel
    }

    /// The step of each view along a run.
    pub(crate) fn steps(&self) -> [usize; N] {
        *self.strides.last().expect("a plan has at least one dim")
    }

    /// True when every view is one contiguous run.
    #[cfg(test)]
    pub(crate) fn is_contiguous(&self) -> bool {
        self.dims.len() == 1 && self.steps().iter().all(|&s| s == 1 || self.dims[0] <= 1)
    }

    /// Calls `f(position, bases, len)` for each run of the innermost dim
    /// within the row-major positions `start..end`; `bases` is where the
    /// run begins in each view's storage.
    pub(crate) fn for_each_run(
        &self,
        start: usize,
        end: usize,
        mut f: impl FnMut(usize, [usize; N], usize),
    ) {
        let end = end.min(self.numel);
        if start >= end {
            return;
        }
        let rank = self.dims.len();
        let inner = self.dims[rank - 1];
        let outer_dims = &self.dims[..rank - 1];
        let mut index = vec![0usize; rank - 1];
        let mut row = start / inner;
        for k in (0..rank - 1).rev() {
            index[k] = row % outer_dims[k];
            row /= outer_dims[k];
        }
        let mut base = self.offsets;
        for (k, &i) in index.iter().enumerate() {
            for (b, s) in base.iter_mut().zip(&self.strides[k]) {
                *b += i * s;
            }
        }
        let steps = self.steps();
        let mut col = start % inner;
        let mut pos = start;
        while pos < end {
            let len = (inner - col).min(end - pos);
            let run: [usize; N] = std::array::from_fn(|k| base[k] + col * steps[k]);
            f(pos, run, len);
            pos += len;
            col = 0;
            if pos >= end {
                break;
            }
            // Next row: advance the outer index like an odometer.
            let mut k = rank - 1;
            while k > 0 {
                k -= 1;
                index[k] += 1;
                for (b, s) in base.iter_mut().zip(&self.strides[k]) {
                    *b += s;
                }
                if index[k] < outer_dims[k] {
                    break;
                }
                for (b, s) in base.iter_mut().zip(&self.strides[k]) {
                    *b -= s * outer_dims[k];
                }
                index[k] = 0;
            }
        }
    }
}

/// Side of the square tiles used when a view is read across its rows.
const TILE: usize = 64;

impl<const N: usize> Plan<N> {
    /// True when some view steps far through memory along a run (a
    /// transposed input): walking tile by tile then keeps the lines it
    /// touches in cache.
    fn wants_tiles(&self) -> bool {
        let rank = self.dims.len();
        rank >= 2
            && self.dims[rank - 1] >= TILE / 4
            && self.dims[rank - 2] >= TILE / 4
            && self.steps().iter().any(|&s| s >= TILE)
    }

    /// Where row `row` (of the innermost dim) starts in each view.
    fn row_base(&self, mut row: usize) -> [usize; N] {
        let mut base = self.offsets;
        for k in (0..self.dims.len() - 1).rev() {
            let i = row % self.dims[k];
            row /= self.dims[k];
            for (b, s) in base.iter_mut().zip(&self.strides[k]) {
                *b += i * s;
            }
        }
        base
    }
}

/// [`write_runs`] for plans that read across rows: the output is split
/// into groups of `TILE` rows, each filled `TILE` columns at a time.
fn write_tiled<O: Send, const N: usize>(
    plan: &Plan<N>,
    out: &mut [O],
    body: &(impl Fn(&mut [O], [usize; N], [usize; N]) + Sync),
) {
    let cols = *plan.dims.last().expect("a plan has at least one dim");
    let steps = plan.steps();
    let group = |(g, part): (usize, &mut [O])| {
        let first = g * TILE;
        let bases: Vec<[usize; N]> = (0..part.len() / cols)
            .map(|r| plan.row_base(first + r))
            .collect();
        for c0 in (0..cols).step_by(TILE) {
            let len = TILE.min(cols - c0);
            for (r, base) in bases.iter().enumerate() {
                let run: [usize; N] = std::array::from_fn(|k| base[k] + c0 * steps[k]);
                body(&mut part[r * cols + c0..r * cols + c0 + len], run, steps);
            }
        }
    };
    if out.len() >= PAR_THRESHOLD && rayon::current_num_threads() > 1 {
        super::par::chunks_mut(out, TILE * cols, &|g, part| group((g, part)));
    } else {
        out.chunks_mut(TILE * cols).enumerate().for_each(group);
    }
}

/// Fills the contiguous output `out` (the row-major elements of `dims`)
/// run by run: `body(out_run, bases, steps)` writes one run, reading view
/// `k` at `bases[k] + j * steps[k]`. Large outputs are split over rayon.
pub(crate) fn write_runs<O: Send, const N: usize>(
    out: &mut [O],
    dims: &[usize],
    layouts: [&Layout; N],
    body: impl Fn(&mut [O], [usize; N], [usize; N]) + Sync,
) {
    let plan = Plan::new(dims, layouts);
    debug_assert_eq!(plan.numel(), out.len());
    if plan.wants_tiles() {
        return write_tiled(&plan, out, &body);
    }
    let steps = plan.steps();
    let threads = rayon::current_num_threads();
    if out.len() >= PAR_THRESHOLD && threads > 1 {
        let chunk = out.len().div_ceil(threads * 4).max(8 * 1024);
        super::par::chunks_mut(out, chunk, &|i, part| {
            write_chunk(&plan, i * chunk, part, steps, &body)
        });
    } else {
        write_chunk(&plan, 0, out, steps, &body);
    }
}

fn write_chunk<O, const N: usize>(
    plan: &Plan<N>,
    start: usize,
    part: &mut [O],
    steps: [usize; N],
    body: &impl Fn(&mut [O], [usize; N], [usize; N]),
) {
    let end = start + part.len();
    plan.for_each_run(start, end, |pos, bases, len| {
        body(&mut part[pos - start..pos - start + len], bases, steps)
    });
}

/// A new contiguous buffer of `dims`, filled by [`write_runs`].
///
/// The buffer is not zeroed first (see [`output_buffer`]).
///
/// # Safety
///
/// `body` must write every element of the run it is handed (with
/// [`MaybeUninit::write`] or `MaybeUninit::new`); the buffer is returned
/// as initialised.
pub(crate) unsafe fn fill_runs<O: Copy + Send, const N: usize>(
    dims: &[usize],
    layouts: [&Layout; N],
    body: impl Fn(&mut [MaybeUninit<O>], [usize; N], [usize; N]) + Sync,
) -> Vec<O> {
    let n = dims.iter().product();
    let mut out = output_buffer(n);
    write_runs(&mut out.spare_capacity_mut()[..n], dims, layouts, body);
    // SAFETY: the runs of `write_runs` cover all `n` elements, and the
    // caller's `body` wrote each one. A panic in `body` leaves the length
    // at 0, so nothing uninitialised is ever read.
    unsafe { out.set_len(n) };
    out
}

/// `out`, every element initialised, as slots that a writer overwrites,
/// so one loop serves both new buffers and existing ones.
///
/// # Safety
///
/// Only initialised values may be written through the result.
pub(crate) unsafe fn as_slots<O>(out: &mut [O]) -> &mut [MaybeUninit<O>] {
    // SAFETY: `MaybeUninit<O>` has the layout of `O`; the caller writes
    // only initialised values, so `out` stays initialised.
    unsafe { &mut *(out as *mut [O] as *mut [MaybeUninit<O>]) }
}

/// Checks that a view stays inside a buffer of `len` elements (layouts are
/// built internally; this keeps every index in bounds even if one is not).
pub(crate) fn check_extent(op: &str, l: &Layout, len: usize) -> crate::error::Result<()> {
    if l.storage_extent() > len {
        return Err(crate::error::Error::Index(format!(
            "{op}: internal view {:?} (strides {:?}, offset {}) reaches past a buffer of {len} elements",
            l.dims(),
            l.strides(),
            l.offset()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs<const N: usize>(plan: &Plan<N>, s: usize, e: usize) -> Vec<(usize, [usize; N], usize)> {
        let mut v = vec![];
        plan.for_each_run(s, e, |p, b, l| v.push((p, b, l)));
        v
    }

    #[test]
    fn contiguous_views_merge_into_one_run() {
        let l = Layout::contiguous(&[2, 3, 4]);
        let p = Plan::new(&[2, 3, 4], [&l, &l]);
        assert!(p.is_contiguous());
        assert_eq!(runs(&p, 0, 24), vec![(0, [0, 0], 24)]);
        assert_eq!(runs(&p, 5, 9), vec![(5, [5, 5], 4)]);
    }

    #[test]
    fn runs_follow_strides() {
        let t = Layout::contiguous(&[3, 2]).permute(&[1, 0]); // dims [2, 3], strides [1, 2]
        let c = Layout::contiguous(&[2, 3]);
        let p = Plan::new(&[2, 3], [&c, &t]);
        assert!(!p.is_contiguous());
        assert_eq!(runs(&p, 1, 6), vec![(1, [1, 2], 2), (3, [3, 1], 3)]);
        let offsets: Vec<usize> = t.offsets().collect();
        let mut walked = vec![];
        p.for_each_run(0, 6, |_, b, len| {
            for j in 0..len {
                walked.push(b[1] + j * p.steps()[1]);
            }
        });
        assert_eq!(walked, offsets);
    }

    #[test]
    fn broadcast_and_scalar_views() {
        let b = Layout::contiguous(&[3]).broadcast_to(&[4, 3]);
        let p = Plan::new(&[4, 3], [&b]);
        let mut walked = vec![];
        p.for_each_run(0, 12, |_, base, len| {
            for j in 0..len {
                walked.push(base[0] + j * p.steps()[0]);
            }
        });
        assert_eq!(walked, b.offsets().collect::<Vec<_>>());
        let s = Layout::contiguous(&[]);
        let p = Plan::new(&[], [&s]);
        assert_eq!(runs(&p, 0, 1), vec![(0, [0], 1)]);
        let e = Layout::contiguous(&[2, 0]);
        assert!(runs(&Plan::new(&[2, 0], [&e]), 0, 0).is_empty());
    }

    #[test]
    fn tiles_cover_every_element_once() {
        for (r, c) in [(70usize, 130usize), (64, 64), (200, 17), (3000, 40)] {
            let src = Layout::contiguous(&[c, r]).permute(&[1, 0]);
            let plan = Plan::new(&[r, c], [&src]);
            assert!(plan.wants_tiles());
            let data: Vec<u32> = (0..(r * c) as u32).collect();
            // SAFETY: the body writes every element of its run.
            let out = unsafe {
                fill_runs(&[r, c], [&src], |o: &mut [MaybeUninit<u32>], b, s| {
                    for (j, o) in o.iter_mut().enumerate() {
                        o.write(data[b[0] + j * s[0]]);
                    }
                })
            };
            let expected: Vec<u32> = src.offsets().map(|i| data[i]).collect();
            assert_eq!(out, expected, "{r}x{c}");
        }
        // A batch of transposed matrices: groups of rows cross matrices.
        let src = Layout::contiguous(&[3, 50, 70]).permute(&[0, 2, 1]);
        let data: Vec<u32> = (0..3 * 50 * 70).collect();
        // SAFETY: the body writes every element of its run.
        let out = unsafe {
            fill_runs(&[3, 70, 50], [&src], |o: &mut [MaybeUninit<u32>], b, s| {
                for (j, o) in o.iter_mut().enumerate() {
                    o.write(data[b[0] + j * s[0]]);
                }
            })
        };
        assert_eq!(out, src.offsets().map(|i| data[i]).collect::<Vec<_>>());
    }

    #[test]
    fn parallel_split_matches_sequential() {
        let dims = [70_000usize, 3];
        let src = Layout::contiguous(&[3, 70_000]).permute(&[1, 0]);
        let data: Vec<u32> = (0..210_000).collect();
        // SAFETY: the body writes every element of its run.
        let out = unsafe {
            fill_runs(&dims, [&src], |o: &mut [MaybeUninit<u32>], b, s| {
                for (j, o) in o.iter_mut().enumerate() {
                    o.write(data[b[0] + j * s[0]]);
                }
            })
        };
        let expected: Vec<u32> = src.offsets().map(|i| data[i]).collect();
        assert_eq!(out, expected);
    }
}
