//! The gather entry behind `index_select`, `gather` and `embedding`.
//!
//! For every output element `i` (row-major over `dims`), with `c` its
//! coordinates: `k = idx[sum(c * idx_strides)]`; when `0 <= k < sel_size`,
//! `out[i] = src[sum(c * src_strides) + k * sel_stride]`; otherwise nothing
//! is read, `out[i]` is zero, `flag[0]` is set to 1 and `flag[1]` to one
//! such `k`, which the runtime turns into an error naming it. Elements
//! move as units of their size (1, 2, 4 or 8 bytes), whatever their dtype.

use super::body::{Body, Class};
use super::elementwise::{grid_stride, Coords};
use crate::abi::{meta_bytes, MAX_RANK};
use tensorfn_core::DTypeKind;

fn params() -> String {
    let p = [
        ".param .u64 p_out".to_string(),
        ".param .u64 p_src".to_string(),
        ".param .u64 p_idx".to_string(),
        ".param .u64 p_flag".to_string(),
        ".param .u64 p_n".to_string(),
        ".param .u64 p_sel_stride".to_string(),
        ".param .u64 p_sel_size".to_string(),
        format!(".param .align 8 .b8 p_meta[{}]", meta_bytes(2)),
    ];
    format!("(\n\t{}\n)", p.join(",\n\t"))
}

/// The entry `name` moving elements of `unit` bytes (1, 2, 4 or 8) picked
/// by indices of `index` (`I32` or `I64`).
pub(crate) fn gather_entry(name: &str, unit: u32, index: DTypeKind) -> String {
    let mut body = Body::new();
    let global = |body: &mut Body, p: &str| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{p}]"));
        body.op(format!("cvta.to.global.u64 {r}, {r}"));
        r
    };
    let param = |body: &mut Body, p: &str| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{p}]"));
        r
    };
    let out = global(&mut body, "p_out");
    let src = global(&mut body, "p_src");
    let idx = global(&mut body, "p_idx");
    let flag = global(&mut body, "p_flag");
    let n = param(&mut body, "p_n");
    let sel_stride = param(&mut body, "p_sel_stride");
    let sel_size = param(&mut body, "p_sel_size");
    // meta: dims[MAX_RANK], out strides (unused: the output is
    // contiguous), src strides, idx strides.
    let word = |body: &mut Body, index: usize| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [p_meta+{}]", 8 * index));
        r
    };
    let dims: Vec<String> = (0..MAX_RANK).map(|d| word(&mut body, d)).collect();
    let src_strides: Vec<String> = (0..MAX_RANK)
        .map(|d| word(&mut body, 2 * MAX_RANK + d))
        .collect();
    let idx_strides: Vec<String> = (0..MAX_RANK)
        .map(|d| word(&mut body, 3 * MAX_RANK + d))
        .collect();
    // Dims of size 1 need no division (uniform branch); positions below
    // 2^32 divide in 32 bits.
    let unit_dim: Vec<String> = (1..MAX_RANK)
        .map(|d| {
            let p = body.reg(Class::Pred);
            body.op(format!("setp.eq.u64 {p}, {}, 1", dims[d]));
            p
        })
        .collect();
    let small = body.reg(Class::Pred);
    body.op(format!("setp.le.u64 {small}, {n}, 4294967295"));
    let (first, stride) = grid_stride(&mut body);

    let i = body.reg(Class::B64);
    body.op(format!("mov.u64 {i}, {first}"));
    let lp = body.label("gather_loop");
    let end = body.label("gather_end");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {i}, {n}"));
    body.op(format!("@{done} bra {end}"));

    // Coordinates, innermost first, into the two offsets.
    let rem = body.reg(Class::B64);
    body.op(format!("mov.u64 {rem}, {i}"));
    let (so, io) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("mov.u64 {so}, 0"));
    body.op(format!("mov.u64 {io}, 0"));
    let walk = Coords {
        dims: &dims,
        unit: &unit_dim,
        small: &small,
    };
    walk.emit(
        &mut body,
        "gather_",
        &rem,
        &[(&so, &src_strides), (&io, &idx_strides)],
    );

    // The index, as a signed 64-bit value.
    let k = body.reg(Class::B64);
    let iaddr = body.reg(Class::B64);
    if index == DTypeKind::I32 {
        body.op(format!("mad.lo.u64 {iaddr}, {io}, 4, {idx}"));
        let k32 = body.reg(Class::B32);
        body.op(format!("ld.global.nc.u32 {k32}, [{iaddr}]"));
        body.op(format!("cvt.s64.s32 {k}, {k32}"));
    } else {
        body.op(format!("mad.lo.u64 {iaddr}, {io}, 8, {idx}"));
        body.op(format!("ld.global.nc.u64 {k}, [{iaddr}]"));
    }
    let (neg, big) = (body.reg(Class::Pred), body.reg(Class::Pred));
    body.op(format!("setp.lt.s64 {neg}, {k}, 0"));
    body.op(format!("setp.ge.u64 {big}, {k}, {sel_size}"));
    body.op(format!("or.pred {big}, {big}, {neg}"));

    let (ty, class) = match unit {
        1 => ("u8", Class::B16),
        2 => ("u16", Class::B16),
        4 => ("u32", Class::B32),
        _ => ("u64", Class::B64),
    };
    let v = body.reg(class);
    let ok = body.label("gather_in_range");
    let store = body.label("gather_store");
    body.op(format!("@!{big} bra {ok}"));
    // Out of range: nothing is read; the flag records the index.
    let one = body.reg(Class::B64);
    body.op(format!("mov.u64 {one}, 1"));
    body.op(format!("st.global.u64 [{flag}], {one}"));
    let old = body.reg(Class::B64);
    body.op(format!("atom.global.exch.b64 {old}, [{flag}+8], {k}"));
    body.op(format!("mov.{} {v}, 0", class_mov(class)));
    body.op(format!("bra.uni {store}"));
    body.place(&ok);
    let saddr = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {so}, {k}, {sel_stride}, {so}"));
    body.op(format!("mad.lo.u64 {saddr}, {so}, {unit}, {src}"));
    body.op(format!("ld.global.nc.{ty} {v}, [{saddr}]"));
    body.place(&store);
    let oaddr = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {oaddr}, {i}, {unit}, {out}"));
    body.op(format!("st.global.{ty} [{oaddr}], {v}"));
    body.op(format!("add.u64 {i}, {i}, {stride}"));
    body.op(format!("bra.uni {lp}"));
    body.place(&end);
    body.op("ret");
    format!(
        ".visible .entry {name}{}\n{{\n{}}}\n",
        params(),
        body.finish()
    )
}

fn class_mov(class: Class) -> &'static str {
    match class {
        Class::B16 => "b16",
        Class::B32 => "b32",
        _ => "b64",
    }
}
