//! Seeded `multinomial` along contiguous rows: one thread per row
//! (grid-stride over rows) following the runtime's CPU procedure step for
//! step, so both pick the same categories. The row's weights go to an f64
//! scratch row while being checked and summed in order; draw `j` of row
//! `r` scales `dropout`'s uniform of `r * n + j` by the total and picks the
//! first category whose running sum (in order, positive weights only)
//! passes it. Without replacement the picked weight is zeroed in the
//! scratch row and the total summed again. A row with a negative, NaN or
//! infinite weight (code 3), all zeros (2) or fewer positive weights than
//! draws without replacement (1) draws nothing and raises `status` to its
//! code (`atom.max`). Parameters: `out` (`i64`), `x`, `scratch` (`f64`,
//! `rows * cols`), `status` (`u32`, zeroed by the caller), `rows`, `cols`,
//! `n`, `replacement` (0 or 1), `mixed_seed`
//! (`tensorfn_core::ops::dropout::mix(seed)`).

use super::body::{Body, Class};
use super::pool::{global_ptr, grid_loop, load_f64, mix};
use tensorfn_core::DTypeKind;

const PARAMS: [&str; 9] = [
    "p_out",
    "p_x",
    "p_scratch",
    "p_status",
    "p_rows",
    "p_cols",
    "p_n",
    "p_rep",
    "p_seed",
];

/// f64 `+inf` and `2^-32` as PTX literals.
const INF: &str = "0d7FF0000000000000";
const TWO_POW_M32: &str = "0d3DF0000000000000";

/// Emits `for c in 0..cols { inner(body, c, break_label) }`.
fn cols_loop(body: &mut Body, cols: &str, inner: impl FnOnce(&mut Body, &str, &str)) {
    let c = body.reg(Class::B64);
    body.op(format!("mov.u64 {c}, 0"));
    let top = body.label("cols");
    let end = body.label("cols_end");
    body.place(&top);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {c}, {cols}"));
    body.op(format!("@{done} bra {end}"));
    inner(body, &c, &end);
    body.op(format!("add.u64 {c}, {c}, 1"));
    body.op(format!("bra.uni {top}"));
    body.place(&end);
}

/// The address of f64 element `c` of the scratch row at `row_base`.
fn scratch_at(body: &mut Body, row_base: &str, c: &str) -> String {
    let a = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {a}, {c}, 8, {row_base}"));
    a
}

/// The in-order sum of the scratch row at `row_base` into `sum`.
fn sum_row(body: &mut Body, row_base: &str, cols: &str, sum: &str) {
    body.op(format!("mov.f64 {sum}, 0d0000000000000000"));
    cols_loop(body, cols, |body, c, _| {
        let a = scratch_at(body, row_base, c);
        let v = body.reg(Class::F64);
        body.op(format!("ld.global.f64 {v}, [{a}]"));
        body.op(format!("add.rn.f64 {sum}, {sum}, {v}"));
    });
}

/// The entry `name` over rows of `dtype`.
pub(crate) fn multinomial_entry(name: &str, dtype: DTypeKind) -> String {
    let mut body = Body::new();
    let b = &mut body;
    let out = global_ptr(b, "p_out");
    let x = global_ptr(b, "p_x");
    let scratch = global_ptr(b, "p_scratch");
    let status = global_ptr(b, "p_status");
    let word = |b: &mut Body, p: &str| {
        let r = b.reg(Class::B64);
        b.op(format!("ld.param.u64 {r}, [{p}]"));
        r
    };
    let rows = word(b, "p_rows");
    let cols = word(b, "p_cols");
    let n = word(b, "p_n");
    let rep = word(b, "p_rep");
    let seed = word(b, "p_seed");
    let with_rep = b.reg(Class::Pred);
    b.op(format!("setp.ne.u64 {with_rep}, {rep}, 0"));
    let no_rep = b.reg(Class::Pred);
    b.op(format!("setp.eq.u64 {no_rep}, {rep}, 0"));
    grid_loop(b, &rows, |b, row| {
        let next = b.label("next_row");
        let first = b.reg(Class::B64);
        b.op(format!("mul.lo.u64 {first}, {row}, {cols}"));
        let xrow = b.reg(Class::B64);
        b.op(format!(
            "mad.lo.u64 {xrow}, {first}, {}, {x}",
            dtype.size_bytes()
        ));
        let wrow = b.reg(Class::B64);
        b.op(format!("mad.lo.u64 {wrow}, {first}, 8, {scratch}"));
        // Copy, check and sum the row; count its positive weights.
        let fault = b.reg(Class::B32);
        b.op(format!("mov.u32 {fault}, 0"));
        let sum = b.reg(Class::F64);
        b.op(format!("mov.f64 {sum}, 0d0000000000000000"));
        let positive = b.reg(Class::B64);
        b.op(format!("mov.u64 {positive}, 0"));
        cols_loop(b, &cols, |b, c, _| {
            let a = b.reg(Class::B64);
            b.op(format!(
                "mad.lo.u64 {a}, {c}, {}, {xrow}",
                dtype.size_bytes()
            ));
            let v = load_f64(b, dtype, &a);
            let (ge, lt, pos) = (b.reg(Class::Pred), b.reg(Class::Pred), b.reg(Class::Pred));
            b.op(format!("setp.ge.f64 {ge}, {v}, 0d0000000000000000"));
            b.op(format!("setp.lt.and.f64 {lt}, {v}, {INF}, {ge}"));
            b.op(format!("@!{lt} mov.u32 {fault}, 3"));
            b.op(format!("setp.gt.f64 {pos}, {v}, 0d0000000000000000"));
            b.op(format!("@{pos} add.u64 {positive}, {positive}, 1"));
            b.op(format!("add.rn.f64 {sum}, {sum}, {v}"));
            let w = scratch_at(b, &wrow, c);
            b.op(format!("st.global.f64 [{w}], {v}"));
        });
        let p = b.reg(Class::Pred);
        b.op(format!("setp.lt.f64 {p}, {sum}, {INF}"));
        b.op(format!("@!{p} mov.u32 {fault}, 3"));
        let report = b.label("report");
        b.op(format!("setp.ne.u32 {p}, {fault}, 0"));
        b.op(format!("@{p} bra {report}"));
        b.op(format!("setp.eq.f64 {p}, {sum}, 0d0000000000000000"));
        b.op(format!("@{p} mov.u32 {fault}, 2"));
        b.op(format!("@{p} bra {report}"));
        b.op(format!("setp.lt.and.u64 {p}, {positive}, {n}, {no_rep}"));
        b.op(format!("@{p} mov.u32 {fault}, 1"));
        b.op(format!("@{p} bra {report}"));
        // The draws.
        let j = b.reg(Class::B64);
        b.op(format!("mov.u64 {j}, 0"));
        let draw = b.label("draw");
        let drawn = b.label("drawn");
        b.place(&draw);
        b.op(format!("setp.ge.u64 {p}, {j}, {n}"));
        b.op(format!("@{p} bra {next}"));
        let resum = b.label("resum");
        let again = b.reg(Class::Pred);
        b.op(format!("setp.ne.u64 {again}, {j}, 0"));
        b.op(format!("@{with_rep} bra {resum}"));
        b.op(format!("@!{again} bra {resum}"));
        sum_row(b, &wrow, &cols, &sum);
        b.place(&resum);
        // `uniform(seed, row * n + j) * sum`, as the CPU's.
        let idx = b.reg(Class::B64);
        b.op(format!("mad.lo.u64 {idx}, {row}, {n}, {j}"));
        let z = b.reg(Class::B64);
        b.op(format!(
            "mad.lo.u64 {z}, {idx}, {}, {seed}",
            0x9e37_79b9_7f4a_7c15u64 as i64
        ));
        mix(b, &z);
        b.op(format!("shr.u64 {z}, {z}, 32"));
        let target = b.reg(Class::F64);
        b.op(format!("cvt.rn.f64.u64 {target}, {z}"));
        b.op(format!("mul.rn.f64 {target}, {target}, {TWO_POW_M32}"));
        b.op(format!("mul.rn.f64 {target}, {target}, {sum}"));
        let acc = b.reg(Class::F64);
        b.op(format!("mov.f64 {acc}, 0d0000000000000000"));
        let last = b.reg(Class::B64);
        b.op(format!("mov.u64 {last}, 0"));
        cols_loop(b, &cols, |b, c, end| {
            let a = scratch_at(b, &wrow, c);
            let v = b.reg(Class::F64);
            b.op(format!("ld.global.f64 {v}, [{a}]"));
            let pos = b.reg(Class::Pred);
            b.op(format!("setp.gt.f64 {pos}, {v}, 0d0000000000000000"));
            let skip = b.label("zero_weight");
            b.op(format!("@!{pos} bra {skip}"));
            b.op(format!("add.rn.f64 {acc}, {acc}, {v}"));
            b.op(format!("mov.u64 {last}, {c}"));
            let past = b.reg(Class::Pred);
            b.op(format!("setp.gt.f64 {past}, {acc}, {target}"));
            b.op(format!("@{past} bra {end}"));
            b.place(&skip);
        });
        let o = b.reg(Class::B64);
        b.op(format!("mad.lo.u64 {o}, {idx}, 8, {out}"));
        b.op(format!("st.global.u64 [{o}], {last}"));
        b.op(format!("@{with_rep} bra {drawn}"));
        let w = scratch_at(b, &wrow, &last);
        b.op(format!("st.global.f64 [{w}], 0d0000000000000000"));
        b.place(&drawn);
        b.op(format!("add.u64 {j}, {j}, 1"));
        b.op(format!("bra.uni {draw}"));
        b.place(&report);
        let old = b.reg(Class::B32);
        b.op(format!("atom.global.max.u32 {old}, [{status}], {fault}"));
        b.place(&next);
    });
    body.op("ret");
    let params: Vec<String> = PARAMS.iter().map(|p| format!(".param .u64 {p}")).collect();
    format!(
        ".visible .entry {name}(\n\t{}\n)\n{{\n{}}}\n",
        params.join(",\n\t"),
        body.finish()
    )
}
