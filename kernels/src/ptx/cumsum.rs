//! `cumsum` along contiguous rows: one thread per row (grid-stride over
//! rows) adding the row's elements in order, floats in f32 (f64 for f64)
//! with each running sum rounded (to nearest even) to the output, integers in `i64` (the output is
//! `i64`, as PyTorch's). Parameters: `out, in, rows, cols`.

use super::body::{Body, Class};
use super::elementwise::grid_stride;
use super::inst::round_bf16;
use super::memory::{load, store};
use tensorfn_core::DTypeKind;

const PARAMS: &str =
    "(\n\t.param .u64 p_out,\n\t.param .u64 p_in,\n\t.param .u64 p_rows,\n\t.param .u64 p_cols\n)";

/// The entry `name` over rows of `dtype`.
pub(crate) fn cumsum_entry(name: &str, dtype: DTypeKind) -> String {
    let mut body = Body::new();
    let param = |body: &mut Body, p: &str, global: bool| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{p}]"));
        if global {
            body.op(format!("cvta.to.global.u64 {r}, {r}"));
        }
        r
    };
    let out = param(&mut body, "p_out", true);
    let input = param(&mut body, "p_in", true);
    let rows = param(&mut body, "p_rows", false);
    let cols = param(&mut body, "p_cols", false);
    let float = dtype.is_float();
    let out_dtype = if float { dtype } else { DTypeKind::I64 };
    let (first, stride) = grid_stride(&mut body);
    let row = body.reg(Class::B64);
    body.op(format!("mov.u64 {row}, {first}"));
    let lp = body.label("cumsum_rows");
    let end = body.label("cumsum_end");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {row}, {rows}"));
    body.op(format!("@{done} bra {end}"));
    let base = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {base}, {row}, {cols}"));
    let (acc, fty) = match dtype {
        DTypeKind::F64 => (body.reg(Class::F64), "f64"),
        _ if float => (body.reg(Class::F32), "f32"),
        _ => (body.reg(Class::B64), "s64"),
    };
    match fty {
        "f64" => body.op(format!("mov.f64 {acc}, 0d0000000000000000")),
        "f32" => body.op(format!("mov.f32 {acc}, 0f00000000")),
        _ => body.op(format!("mov.u64 {acc}, 0")),
    }
    let col = body.reg(Class::B64);
    body.op(format!("mov.u64 {col}, 0"));
    let cl = body.label("cumsum_cols");
    let cend = body.label("cumsum_cols_end");
    body.place(&cl);
    let cdone = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {cdone}, {col}, {cols}"));
    body.op(format!("@{cdone} bra {cend}"));
    let at = body.reg(Class::B64);
    body.op(format!("add.u64 {at}, {base}, {col}"));
    let ia = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {ia}, {at}, {}, {input}",
        dtype.size_bytes()
    ));
    let x = load(&mut body, dtype, &ia, true);
    if float {
        body.op(format!("add.rn.{fty} {acc}, {acc}, {x}"));
    } else {
        let wide = match dtype {
            DTypeKind::I64 => x,
            _ => {
                let w = body.reg(Class::B64);
                let cvt = if dtype == DTypeKind::I32 {
                    "cvt.s64.s32"
                } else {
                    "cvt.u64.u32"
                };
                body.op(format!("{cvt} {w}, {x}"));
                w
            }
        };
        body.op(format!("add.s64 {acc}, {acc}, {wide}"));
    }
    let oa = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {oa}, {at}, {}, {out}",
        out_dtype.size_bytes()
    ));
    // The store narrows a bf16 by keeping its top half: round to nearest
    // even first (f16's conversion rounds by itself), as the CPU does.
    if out_dtype == DTypeKind::BF16 {
        let r = body.reg(Class::F32);
        let last = round_bf16(&mut body, &acc, &r);
        body.op(last);
        store(&mut body, out_dtype, &oa, &r);
    } else {
        store(&mut body, out_dtype, &oa, &acc);
    }
    body.op(format!("add.u64 {col}, {col}, 1"));
    body.op(format!("bra.uni {cl}"));
    body.place(&cend);
    body.op(format!("add.u64 {row}, {row}, {stride}"));
    body.op(format!("bra.uni {lp}"));
    body.place(&end);
    body.op("ret");
    format!(".visible .entry {name}{PARAMS}\n{{\n{}}}\n", body.finish())
}
