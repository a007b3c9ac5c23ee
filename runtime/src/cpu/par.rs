//! The parallel loops of the CPU kernels, behind `dyn` closures: rayon's
//! machinery (producers, consumers, jobs) is instantiated once per element
//! type here instead of once per kernel. A kernel's own loop stays generic
//! and inlined inside the closure; only the call per chunk is dynamic.

use rayon::prelude::*;

/// `f(i, chunk)` for the chunks of `chunk` elements of `out`, on rayon's
/// pool.
pub(crate) fn chunks_mut<O: Send>(
    out: &mut [O],
    chunk: usize,
    f: &(dyn Fn(usize, &mut [O]) + Sync),
) {
    out.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(i, part)| f(i, part));
}

/// `f(out_chunk, in_chunk)` for the chunks of `out` (of `out_chunk`
/// elements) and of `input` (of `in_chunk`) side by side, on rayon's pool.
pub(crate) fn zip_chunks_mut<O: Send, I: Sync>(
    out: &mut [O],
    out_chunk: usize,
    input: &[I],
    in_chunk: usize,
    f: &(dyn Fn(&mut [O], &[I]) + Sync),
) {
    out.par_chunks_mut(out_chunk)
        .zip(input.par_chunks(in_chunk))
        .for_each(|(o, i)| f(o, i));
}

/// `f(out_i, row_i)` for each element of `out` and row of `rows` (of
/// `len` elements), at least `min` per task, on rayon's pool.
pub(crate) fn per_row_mut<O: Send, I: Sync>(
    out: &mut [O],
    rows: &[I],
    len: usize,
    min: usize,
    f: &(dyn Fn(&mut O, &[I]) + Sync),
) {
    out.par_iter_mut()
        .zip(rows.par_chunks_exact(len))
        .with_min_len(min)
        .for_each(|(o, row)| f(o, row));
}

/// `f(item)` for each element of `items`, on rayon's pool.
pub(crate) fn for_each_mut<W: Send>(items: &mut [W], f: &(dyn Fn(&mut W) + Sync)) {
    items.par_iter_mut().for_each(f);
}
