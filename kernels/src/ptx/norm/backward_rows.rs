//! The walk over rows both backward `dx` entries of the normalisations
//! take (the block entry `NAME_dx`, a row a block, and the warp entry
//! `NAME_dx_warp`, a row a warp): the block's place in the grid, its
//! partial sums of `dweight` and `dbias`, and the grid-stride loop over
//! the rows.

use super::Gen;
use crate::ptx::body::{Body, Class};

/// A block's place in the grid of a backward `dx` entry: the partial
/// sums' base address `part` (global), the block `ctaid` (u64) and the
/// rows the loop advances by, `step`.
pub(super) struct Grid {
    pub(super) part: String,
    pub(super) ctaid: String,
    pub(super) step: String,
}

/// Emits the [`Grid`] of a block taking `rows_per_block` rows at once
/// (1, or one a warp): `step` is `%nctaid.x` times that.
pub(super) fn grid(body: &mut Body, rows_per_block: usize) -> Grid {
    let part = body.reg(Class::B64);
    body.op(format!("ld.param.u64 {part}, [p_part]"));
    body.op(format!("cvta.to.global.u64 {part}, {part}"));
    let c32 = body.reg(Class::B32);
    let ctaid = body.reg(Class::B64);
    body.op(format!("mov.u32 {c32}, %ctaid.x"));
    body.op(format!("cvt.u64.u32 {ctaid}, {c32}"));
    let step = body.reg(Class::B64);
    body.op(format!("mov.u32 {c32}, %nctaid.x"));
    if rows_per_block == 1 {
        body.op(format!("cvt.u64.u32 {step}, {c32}"));
    } else {
        body.op(format!("mul.wide.u32 {step}, {c32}, {rows_per_block}"));
    }
    Grid { part, ctaid, step }
}

/// The addresses of this block's partial sums (`abytes` bytes an
/// element, `cols` elements each): `dweight`'s, then `dbias`'s.
pub(super) fn partial_sums(
    body: &mut Body,
    g: &Gen,
    grid: &Grid,
    abytes: usize,
) -> (String, String) {
    let pdw = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {pdw}, {}, {}", grid.ctaid, g.cols));
    body.op(format!("mul.lo.u64 {pdw}, {pdw}, {}", 2 * abytes));
    body.op(format!("add.u64 {pdw}, {pdw}, {}", grid.part));
    let pdb = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {pdb}, {}, {abytes}, {pdw}", g.cols));
    (pdw, pdb)
}

/// The labels of the loop over rows.
pub(super) struct RowLoop {
    lp: String,
    end: String,
}

/// Emits the head of the loop over rows from `row` (u64) on, its labels
/// named `names` (loop, end): the exit past the last row, then the byte
/// offset of the row in the row-major operands, returned with the loop.
pub(super) fn row_loop_head(
    body: &mut Body,
    g: &Gen,
    row: &str,
    names: [&str; 2],
) -> (RowLoop, String) {
    let lp = body.label(names[0]);
    let end = body.label(names[1]);
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {row}, {}", g.rows));
    body.op(format!("@{done} bra.uni {end}"));
    let off = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {off}, {row}, {}", g.cols));
    body.op(format!("mul.lo.u64 {off}, {off}, {}", g.dtype.size_bytes()));
    (RowLoop { lp, end }, off)
}

/// Emits the tail of the loop: `row` advanced by the grid's `step`, the
/// jump back, the end placed.
pub(super) fn row_loop_tail(body: &mut Body, row: &str, grid: &Grid, l: &RowLoop) {
    body.op(format!("add.u64 {row}, {row}, {}", grid.step));
    body.op(format!("bra.uni {}", l.lp));
    body.place(&l.end);
}
