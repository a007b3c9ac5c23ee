//! The scatter-add entry behind `index_add`, `scatter_add` and the
//! gradients of `embedding`, `index_select` and `gather`.
//!
//! For every position `i < n` (row-major over `dims`), with `c` its
//! coordinates: `k = idx[sum(c * idx_strides)]`; when `0 <= k < sel_size`,
//! `acc[sum(c * out_strides) + k * sel_stride] += alpha * src[sum(c *
//! src_strides)]` with an atomic add (`red.global.add`) in the
//! accumulator's dtype (f32 for f16, bf16 and f32 sources, f64 for f64);
//! otherwise nothing is read or written, `flag[0]` is set to 1 and
//! `flag[1]` to one such `k`, which the runtime turns into an error.

use super::body::{Body, Class};
use super::elementwise::{grid_stride, Coords};
use crate::abi::{meta_bytes, MAX_RANK};
use tensorfn_core::DTypeKind;

fn params() -> String {
    let p = [
        ".param .u64 p_acc".to_string(),
        ".param .u64 p_src".to_string(),
        ".param .u64 p_idx".to_string(),
        ".param .u64 p_flag".to_string(),
        ".param .u64 p_n".to_string(),
        ".param .u64 p_sel_stride".to_string(),
        ".param .u64 p_sel_size".to_string(),
        ".param .f64 p_alpha".to_string(),
        format!(".param .align 8 .b8 p_meta[{}]", meta_bytes(2)),
    ];
    format!("(\n\t{}\n)", p.join(",\n\t"))
}

/// The entry `name` adding `dtype` sources (a float dtype) at indices of
/// `index` (`I32` or `I64`) into an f32 accumulator (f64 for `F64`).
pub(crate) fn scatter_add_entry(name: &str, dtype: DTypeKind, index: DTypeKind) -> String {
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
    let acc = global(&mut body, "p_acc");
    let src = global(&mut body, "p_src");
    let idx = global(&mut body, "p_idx");
    let flag = global(&mut body, "p_flag");
    let n = param(&mut body, "p_n");
    let sel_stride = param(&mut body, "p_sel_stride");
    let sel_size = param(&mut body, "p_sel_size");
    let wide = dtype == DTypeKind::F64;
    let (fclass, fty) = if wide {
        (Class::F64, "f64")
    } else {
        (Class::F32, "f32")
    };
    let alpha = body.reg(fclass);
    if wide {
        body.op(format!("ld.param.f64 {alpha}, [p_alpha]"));
    } else {
        let a64 = body.reg(Class::F64);
        body.op(format!("ld.param.f64 {a64}, [p_alpha]"));
        body.op(format!("cvt.rn.f32.f64 {alpha}, {a64}"));
    }
    // meta: dims[MAX_RANK], accumulator strides, src strides, idx strides.
    let word = |body: &mut Body, index: usize| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [p_meta+{}]", 8 * index));
        r
    };
    let dims: Vec<String> = (0..MAX_RANK).map(|d| word(&mut body, d)).collect();
    let strides = |body: &mut Body, slot: usize| -> Vec<String> {
        (0..MAX_RANK)
            .map(|d| word(body, slot * MAX_RANK + d))
            .collect()
    };
    let acc_strides = strides(&mut body, 1);
    let src_strides = strides(&mut body, 2);
    let idx_strides = strides(&mut body, 3);
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
    let lp = body.label("scatter_loop");
    let end = body.label("scatter_end");
    let next = body.label("scatter_next");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {i}, {n}"));
    body.op(format!("@{done} bra {end}"));

    // Coordinates, innermost first, into the three offsets.
    let rem = body.reg(Class::B64);
    body.op(format!("mov.u64 {rem}, {i}"));
    let (ao, so, io) = (
        body.reg(Class::B64),
        body.reg(Class::B64),
        body.reg(Class::B64),
    );
    for r in [&ao, &so, &io] {
        body.op(format!("mov.u64 {r}, 0"));
    }
    let walk = Coords {
        dims: &dims,
        unit: &unit_dim,
        small: &small,
    };
    walk.emit(
        &mut body,
        "scatter_",
        &rem,
        &[
            (&ao, &acc_strides),
            (&so, &src_strides),
            (&io, &idx_strides),
        ],
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
    let ok = body.label("scatter_in_range");
    body.op(format!("@!{big} bra {ok}"));
    // Out of range: nothing is read or written; the flag records it.
    let one = body.reg(Class::B64);
    body.op(format!("mov.u64 {one}, 1"));
    body.op(format!("st.global.u64 [{flag}], {one}"));
    let old = body.reg(Class::B64);
    body.op(format!("atom.global.exch.b64 {old}, [{flag}+8], {k}"));
    body.op(format!("bra.uni {next}"));
    body.place(&ok);

    // The source value, widened to the accumulator's dtype.
    let saddr = body.reg(Class::B64);
    let v = body.reg(fclass);
    match dtype {
        DTypeKind::F64 => {
            body.op(format!("mad.lo.u64 {saddr}, {so}, 8, {src}"));
            body.op(format!("ld.global.nc.f64 {v}, [{saddr}]"));
        }
        DTypeKind::F32 => {
            body.op(format!("mad.lo.u64 {saddr}, {so}, 4, {src}"));
            body.op(format!("ld.global.nc.f32 {v}, [{saddr}]"));
        }
        DTypeKind::F16 => {
            body.op(format!("mad.lo.u64 {saddr}, {so}, 2, {src}"));
            let h = body.reg(Class::B16);
            body.op(format!("ld.global.nc.b16 {h}, [{saddr}]"));
            body.op(format!("cvt.f32.f16 {v}, {h}"));
        }
        _ => {
            // bf16: the top half of an f32 (exact; no sm_80 conversion).
            body.op(format!("mad.lo.u64 {saddr}, {so}, 2, {src}"));
            let h = body.reg(Class::B16);
            let w = body.reg(Class::B32);
            body.op(format!("ld.global.nc.b16 {h}, [{saddr}]"));
            body.op(format!("cvt.u32.u16 {w}, {h}"));
            body.op(format!("shl.b32 {w}, {w}, 16"));
            body.op(format!("mov.b32 {v}, {w}"));
        }
    }
    body.op(format!("mul.rn.{fty} {v}, {v}, {alpha}"));
    let aaddr = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {ao}, {k}, {sel_stride}, {ao}"));
    let bytes = if wide { 8 } else { 4 };
    body.op(format!("mad.lo.u64 {aaddr}, {ao}, {bytes}, {acc}"));
    body.op(format!("red.global.add.{fty} [{aaddr}], {v}"));
    body.place(&next);
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
