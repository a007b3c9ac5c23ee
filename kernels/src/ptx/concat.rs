//! The row-block concatenation entry behind `cat` of contiguous inputs.
//!
//! The output is `outer` rows of `row` units; input `k` supplies `inner_k`
//! contiguous units of every row, starting at unit `offset_k` of the row.
//! A unit is 1, 2, 4, 8 or 16 bytes (the widest that divides every size,
//! offset and address), so a copy moves 16 bytes per thread whenever it
//! can. Up to [`CAT_PARTS`] inputs share one launch: `ctaid.y` picks the
//! input, and the threads of the x dimension stride over its
//! `outer * inner_k` units.

use super::body::{Body, Class};

/// Inputs one launch of the concatenation kernel copies; `cat` of more
/// inputs launches once per group of this many.
///
/// ```
/// use tensorfn_kernels::ptx::CAT_PARTS;
/// assert_eq!(20usize.div_ceil(CAT_PARTS), 3); // launches for 20 inputs
/// ```
pub const CAT_PARTS: usize = 8;

/// PTX type and register class of one unit of `unit` bytes (16 bytes
/// are moved as a vector of four `u32`).
fn unit_ty(unit: u32) -> (&'static str, Class) {
    match unit {
        1 => ("u8", Class::B16),
        2 => ("u16", Class::B16),
        4 => ("u32", Class::B32),
        8 => ("u64", Class::B64),
        _ => ("v4.u32", Class::B32),
    }
}

fn params() -> String {
    let mut p = vec![
        "\t.param .u64 p_out".to_string(),
        "\t.param .u64 p_outer".to_string(),
        "\t.param .u64 p_row".to_string(),
    ];
    for k in 0..CAT_PARTS {
        p.push(format!("\t.param .u64 p_src{k}"));
        p.push(format!("\t.param .u64 p_inner{k}"));
        p.push(format!("\t.param .u64 p_offset{k}"));
    }
    format!("(\n{}\n)", p.join(",\n"))
}

/// The entry `name` copying units of `unit` bytes (1, 2, 4, 8 or 16).
pub(crate) fn cat_rows_entry(name: &str, unit: u32) -> String {
    let mut body = Body::new();
    let ld = |body: &mut Body, p: &str| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{p}]"));
        r
    };
    let out = ld(&mut body, "p_out");
    body.op(format!("cvta.to.global.u64 {out}, {out}"));
    let outer = ld(&mut body, "p_outer");
    let row = ld(&mut body, "p_row");
    // This block's input: a select chain over the parameters, as a kernel
    // parameter cannot be indexed by a register.
    let part = body.reg(Class::B32);
    body.op(format!("mov.u32 {part}, %ctaid.y"));
    let src = body.reg(Class::B64);
    let inner = body.reg(Class::B64);
    let offset = body.reg(Class::B64);
    for k in 0..CAT_PARTS {
        let (s, i, o) = (
            ld(&mut body, &format!("p_src{k}")),
            ld(&mut body, &format!("p_inner{k}")),
            ld(&mut body, &format!("p_offset{k}")),
        );
        if k == 0 {
            body.op(format!("mov.u64 {src}, {s}"));
            body.op(format!("mov.u64 {inner}, {i}"));
            body.op(format!("mov.u64 {offset}, {o}"));
        } else {
            let is = body.reg(Class::Pred);
            body.op(format!("setp.eq.u32 {is}, {part}, {k}"));
            body.op(format!("selp.u64 {src}, {s}, {src}, {is}"));
            body.op(format!("selp.u64 {inner}, {i}, {inner}, {is}"));
            body.op(format!("selp.u64 {offset}, {o}, {offset}, {is}"));
        }
    }
    let end = body.label("cat_end");
    let empty = body.reg(Class::Pred);
    body.op(format!("setp.eq.u64 {empty}, {inner}, 0"));
    body.op(format!("@{empty} bra.uni {end}"));
    body.op(format!("cvta.to.global.u64 {src}, {src}"));
    let total = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {total}, {outer}, {inner}"));
    // idx = ctaid.x * ntid.x + tid.x, stepping by nctaid.x * ntid.x.
    let (t, c, nt, nc) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("mov.u32 {t}, %tid.x"));
    body.op(format!("mov.u32 {c}, %ctaid.x"));
    body.op(format!("mov.u32 {nt}, %ntid.x"));
    body.op(format!("mov.u32 {nc}, %nctaid.x"));
    let idx = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {idx}, {c}, {nt}"));
    let t64 = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {t64}, {t}"));
    body.op(format!("add.u64 {idx}, {idx}, {t64}"));
    let step = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {step}, {nc}, {nt}"));
    // 32-bit division is several times cheaper: use it when every index
    // of this input fits.
    let small = body.reg(Class::Pred);
    body.op(format!("setp.le.u64 {small}, {total}, 4294967295"));
    let inner32 = body.reg(Class::B32);
    body.op(format!("cvt.u32.u64 {inner32}, {inner}"));
    let lp = body.label("cat_loop");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {idx}, {total}"));
    body.op(format!("@{done} bra {end}"));
    let r = body.reg(Class::B64);
    let wide = body.label("cat_wide");
    let split = body.label("cat_split");
    body.op(format!("@!{small} bra {wide}"));
    let (i32r, q32) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("cvt.u32.u64 {i32r}, {idx}"));
    body.op(format!("div.u32 {q32}, {i32r}, {inner32}"));
    body.op(format!("cvt.u64.u32 {r}, {q32}"));
    body.op(format!("bra {split}"));
    body.place(&wide);
    body.op(format!("div.u64 {r}, {idx}, {inner}"));
    body.place(&split);
    // Destination unit: r * row + offset + (idx - r * inner).
    let col = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {col}, {r}, {inner}"));
    body.op(format!("sub.u64 {col}, {idx}, {col}"));
    let d = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {d}, {r}, {row}, {offset}"));
    body.op(format!("add.u64 {d}, {d}, {col}"));
    let da = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {da}, {d}, {unit}, {out}"));
    let sa = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {sa}, {idx}, {unit}, {src}"));
    let (ty, class) = unit_ty(unit);
    if unit == 16 {
        let v: Vec<String> = (0..4).map(|_| body.reg(class)).collect();
        let v = v.join(", ");
        body.op(format!("ld.global.nc.{ty} {{{v}}}, [{sa}]"));
        body.op(format!("st.global.{ty} [{da}], {{{v}}}"));
    } else {
        let v = body.reg(class);
        body.op(format!("ld.global.nc.{ty} {v}, [{sa}]"));
        body.op(format!("st.global.{ty} [{da}], {v}"));
    }
    body.op(format!("add.u64 {idx}, {idx}, {step}"));
    body.op(format!("bra.uni {lp}"));
    body.place(&end);
    body.op("ret");
    format!(
        ".visible .entry {name}{}\n{{\n{}}}\n",
        params(),
        body.finish()
    )
}
