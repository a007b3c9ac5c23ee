//! `topk` along the last dim: one block per row (grid-stride over rows)
//! and `k` passes over the row, pass `j` a block-wide arg-max (the
//! combine step of `reduction::topk_spec`, [`ReduceSpec`]) over the
//! elements that come after pass `j - 1`'s pick in `topk`'s order (for
//! the largest: NaN first, then larger values; for the smallest: smaller
//! values, then NaN; ties by lower index). The picks come out sorted. A pass
//! reads the row once, so a row of `V` elements costs `k * V` loads: for
//! sampling's `k` (tens) over a vocabulary of 50257 that is a few
//! megabytes of cached reads per row. (Not measured on a GPU yet.)
//!
//! Parameters: `out, in, rows, cols, idx, k`: `out` and `idx` (`i64`) are
//! `[rows, k]`.

use super::body::{Body, Class};
use super::inst::emit_program;
use super::memory::{load, store};
use super::rows::{
    block_reduce, broadcast, col_loop, combine, elem_addr, frame, mov_ty, row_base, row_loop,
    set_identity,
};
use crate::prim::Ty;
use crate::reduction::{ReduceSpec, NO_INDEX};

const PARAMS: &str = "(\n\t.param .u64 p_out,\n\t.param .u64 p_in,\n\t.param .u64 p_rows,\n\t.param .u64 p_cols,\n\t.param .u64 p_idx,\n\t.param .u64 p_k\n)";

/// The entry `name` over rows of `spec.dtype` (`spec` is `topk_spec`'s).
pub(crate) fn topk_entry(name: &str, spec: &ReduceSpec) -> String {
    let mut body = Body::new();
    let f = frame(&mut body);
    let acc = spec.acc;
    let dtype = spec.dtype;
    let idx = body.reg(Class::B64);
    body.op(format!("ld.param.u64 {idx}, [p_idx]"));
    body.op(format!("cvta.to.global.u64 {idx}, {idx}"));
    let k = body.reg(Class::B64);
    body.op(format!("ld.param.u64 {k}, [p_k]"));
    let identity = [spec.identity, NO_INDEX as u64];
    row_loop(&mut body, &f, |body, row| {
        let base = row_base(body, &f.input, row, &f.cols, dtype);
        let prev_v = body.reg_ty(acc);
        let prev_i = body.reg(Class::B64);
        let prev = vec![(prev_v.clone(), acc), (prev_i.clone(), Ty::I64)];
        set_identity(body, &prev, &identity);
        let obase = body.reg(Class::B64);
        body.op(format!("mul.lo.u64 {obase}, {row}, {k}"));
        let j = body.reg(Class::B64);
        body.op(format!("mov.u64 {j}, 0"));
        let lp = body.label("topk_pass");
        let end = body.label("topk_done");
        body.place(&lp);
        let done = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {done}, {j}, {k}"));
        body.op(format!("@{done} bra.uni {end}"));
        let first = body.reg(Class::Pred);
        body.op(format!("setp.eq.u64 {first}, {j}, 0"));
        let state = vec![(body.reg_ty(acc), acc), (body.reg(Class::B64), Ty::I64)];
        set_identity(body, &state, &identity);
        col_loop(body, &f, |body, col| {
            let a = elem_addr(body, &base, col, dtype);
            let x = load(body, dtype, &a, true);
            // After the previous pick: it beats this element.
            let res = emit_program(
                body,
                &spec.combine,
                &[prev_v.clone(), prev_i.clone(), x.clone(), col.to_string()],
            );
            let after = body.reg(Class::Pred);
            body.op(format!("setp.eq.u64 {after}, {}, {prev_i}", res[1]));
            let other = body.reg(Class::Pred);
            body.op(format!("setp.ne.u64 {other}, {col}, {prev_i}"));
            body.op(format!("and.pred {after}, {after}, {other}"));
            body.op(format!("or.pred {after}, {after}, {first}"));
            let skip = body.label("topk_skip");
            body.op(format!("@!{after} bra {skip}"));
            combine(body, &spec.combine, &state, &[x, col.to_string()]);
            body.place(&skip);
        });
        block_reduce(body, &f, &spec.combine, &state, &identity);
        // The first thread stores the pick.
        let both = body.reg(Class::Pred);
        body.op(format!("and.pred {both}, {}, {}", f.is_lane0, f.is_warp0));
        let not_first = body.label("topk_not_first");
        body.op(format!("@!{both} bra {not_first}"));
        let at = body.reg(Class::B64);
        body.op(format!("add.u64 {at}, {obase}, {j}"));
        let va = body.reg(Class::B64);
        body.op(format!(
            "mad.lo.u64 {va}, {at}, {}, {}",
            dtype.size_bytes(),
            f.out
        ));
        store(body, dtype, &va, &state[0].0);
        let ia = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {ia}, {at}, 8, {idx}"));
        body.op(format!("st.global.u64 [{ia}], {}", state[1].0));
        body.place(&not_first);
        // Every thread takes the pick as the next pass's bound.
        broadcast(body, &f, &state[0].0, acc);
        body.op("bar.sync 0");
        broadcast(body, &f, &state[1].0, Ty::I64);
        body.op(format!("mov.{} {prev_v}, {}", mov_ty(acc), state[0].0));
        body.op(format!("mov.b64 {prev_i}, {}", state[1].0));
        body.op("bar.sync 0");
        body.op(format!("add.u64 {j}, {j}, 1"));
        body.op(format!("bra.uni {lp}"));
        body.place(&end);
    });
    format!(".visible .entry {name}{PARAMS}\n{{\n{}}}\n", body.finish())
}
