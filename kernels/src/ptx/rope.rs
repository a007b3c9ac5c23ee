//! The `rope` entry: rotary position embedding of contiguous rows, one
//! thread per pair of elements `(j, j + D/2)` of a row, grid-stride.
//!
//! `NAME(.param .u64 out, .param .u64 in, .param .u64 cos, .param .u64
//! sin, .param .u64 pairs, .param .u64 positions, .param .u64 half)`:
//! `in` and `out` hold `pairs / half` rows of `2 * half` elements, row `r`
//! at position `r % positions`; `cos` and `sin` hold one row per
//! position. For `x1 = in[r][j]`, `x2 = in[r][j + half]` and the
//! position's `c1, c2, s1, s2` at the same columns, `out[r][j] = x1 c1 -
//! x2 s1` and `out[r][j + half] = x2 c2 + x1 s2`, each product and the
//! sum rounded once in f32 (f64 for f64), then to the dtype. Launch with
//! `block.x = BLOCK` and any `grid.x`.

use super::body::{Body, Class};
use super::inst::round_bf16;
use super::memory::{load, store};
use crate::abi::BLOCK;
use tensorfn_core::DTypeKind;

const PARAMS: &str = "(\n\t.param .u64 p_out,\n\t.param .u64 p_in,\n\t.param .u64 p_cos,\n\t.param .u64 p_sin,\n\t.param .u64 p_pairs,\n\t.param .u64 p_positions,\n\t.param .u64 p_half\n)";

/// The entry `name` over rows of `dtype`.
pub(crate) fn rope_entry(name: &str, dtype: DTypeKind) -> String {
    let mut body = Body::new();
    let param = |body: &mut Body, name: &str, global: bool| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{name}]"));
        if global {
            body.op(format!("cvta.to.global.u64 {r}, {r}"));
        }
        r
    };
    let out = param(&mut body, "p_out", true);
    let input = param(&mut body, "p_in", true);
    let cos = param(&mut body, "p_cos", true);
    let sin = param(&mut body, "p_sin", true);
    let pairs = param(&mut body, "p_pairs", false);
    let positions = param(&mut body, "p_positions", false);
    let half = param(&mut body, "p_half", false);
    let size = dtype.size_bytes();
    let wide = dtype == DTypeKind::F64;
    let a = if wide { "f64" } else { "f32" };
    let class = if wide { Class::F64 } else { Class::F32 };
    // The first pair i = ctaid * BLOCK + tid, the step nctaid * BLOCK;
    // the row, column and position of i are divided out once and then
    // carried along with the step.
    let u32 = |body: &mut Body, special: &str| {
        let r = body.reg(Class::B32);
        body.op(format!("mov.u32 {r}, {special}"));
        let w = body.reg(Class::B64);
        body.op(format!("cvt.u64.u32 {w}, {r}"));
        w
    };
    let ctaid = u32(&mut body, "%ctaid.x");
    let nctaid = u32(&mut body, "%nctaid.x");
    let tid = u32(&mut body, "%tid.x");
    let i = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {i}, {ctaid}, {BLOCK}, {tid}"));
    let step = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {step}, {nctaid}, {BLOCK}"));
    let divmod = |body: &mut Body, a: &str, b: &str| {
        let q = body.reg(Class::B64);
        body.op(format!("div.u64 {q}, {a}, {b}"));
        let r = body.reg(Class::B64);
        body.op(format!("rem.u64 {r}, {a}, {b}"));
        (q, r)
    };
    let (row, col) = divmod(&mut body, &i, &half);
    let (_, pos) = divmod(&mut body, &row, &positions);
    let (step_rows, step_cols) = divmod(&mut body, &step, &half);
    let (_, step_pos) = divmod(&mut body, &step_rows, &positions);
    let lp = body.label("pair_loop");
    let end = body.label("pair_end");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {i}, {pairs}"));
    body.op(format!("@{done} bra {end}"));
    // Element offsets of x1 and of the position's c1/s1.
    let xo = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {xo}, {row}, {half}"));
    body.op(format!("shl.b64 {xo}, {xo}, 1"));
    body.op(format!("add.u64 {xo}, {xo}, {col}"));
    let co = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {co}, {pos}, {half}"));
    body.op(format!("shl.b64 {co}, {co}, 1"));
    body.op(format!("add.u64 {co}, {co}, {col}"));
    let hb = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {hb}, {half}, {size}"));
    let at = |body: &mut Body, base: &str, off: &str| {
        let first = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {first}, {off}, {size}, {base}"));
        let second = body.reg(Class::B64);
        body.op(format!("add.u64 {second}, {first}, {hb}"));
        (first, second)
    };
    let (xa1, xa2) = at(&mut body, &input, &xo);
    let (ca1, ca2) = at(&mut body, &cos, &co);
    let (sa1, sa2) = at(&mut body, &sin, &co);
    let (oa1, oa2) = at(&mut body, &out, &xo);
    let loads: Vec<String> = [&xa1, &xa2, &ca1, &ca2, &sa1, &sa2]
        .iter()
        .map(|addr| load(&mut body, dtype, addr, true))
        .collect();
    let [x1, x2, c1, c2, s1, s2] = <[String; 6]>::try_from(loads).expect("six loads");
    let mul = |body: &mut Body, p: &str, q: &str| {
        let r = body.reg(class);
        body.op(format!("mul.rn.{a} {r}, {p}, {q}"));
        r
    };
    let (p1, q1) = (mul(&mut body, &x1, &c1), mul(&mut body, &x2, &s1));
    let y1 = body.reg(class);
    body.op(format!("sub.rn.{a} {y1}, {p1}, {q1}"));
    let (p2, q2) = (mul(&mut body, &x2, &c2), mul(&mut body, &x1, &s2));
    let y2 = body.reg(class);
    body.op(format!("add.rn.{a} {y2}, {p2}, {q2}"));
    for (y, oa) in [(y1, oa1), (y2, oa2)] {
        let y = if dtype == DTypeKind::BF16 {
            let d = body.reg(Class::F32);
            let last = round_bf16(&mut body, &y, &d);
            body.op(last);
            d
        } else {
            y
        };
        store(&mut body, dtype, &oa, &y);
    }
    // Carry the step into column, row and position.
    body.op(format!("add.u64 {i}, {i}, {step}"));
    body.op(format!("add.u64 {col}, {col}, {step_cols}"));
    body.op(format!("add.u64 {row}, {row}, {step_rows}"));
    body.op(format!("add.u64 {pos}, {pos}, {step_pos}"));
    let carry = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {carry}, {col}, {half}"));
    body.op(format!("@{carry} sub.u64 {col}, {col}, {half}"));
    body.op(format!("@{carry} add.u64 {row}, {row}, 1"));
    body.op(format!("@{carry} add.u64 {pos}, {pos}, 1"));
    let wrap = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {wrap}, {pos}, {positions}"));
    body.op(format!("@{wrap} sub.u64 {pos}, {pos}, {positions}"));
    body.op(format!("bra.uni {lp}"));
    body.place(&end);
    body.op("ret");
    format!(".visible .entry {name}{PARAMS}\n{{\n{}}}\n", body.finish())
}
