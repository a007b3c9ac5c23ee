//! The entry of a row kernel written in `tensor_fn!` (a
//! [`RowProgram`]): one block of [`BLOCK`](crate::abi::BLOCK) threads per row, blocks
//! `grid.x` rows apart; per statistic, a pass over the row (thread `t`
//! reading the columns `t, t + BLOCK, ..`) combined across the block as the
//! built-in norm kernels combine their sums ([`reduce_threads`]), then a
//! pass storing the result (or thread 0 storing the row's one value).
//!
//! `NAME(.param .u64 p_out, .param .u64 p_in0, .., .param .u64 p_step0,
//! .., .param .u64 p_rows, .param .u64 p_cols, .param .f64 p_s0, ..)`: an
//! input per row parameter (`p_stepK` elements between its rows: `cols`,
//! or 0 for one row broadcast to every row), a value per scalar parameter
//! (converted to its dtype), `rows` contiguous output rows of `cols`
//! elements (one element per row for a per-row result).

use super::body::{Body, Class};
use super::elementwise::used_inputs;
use super::inst::emit_program;
use super::memory::{load, store};
use super::norm::{cols_of_thread, reduce_threads, Threads, REGION};
use crate::lower::lower;
use crate::prim::Program;
use crate::rowkernel::{RowParam, RowProgram, RowReduce};
use std::fmt::Write;
use tensorfn_core::DTypeKind;

fn params(prog: &RowProgram) -> String {
    let rows = prog.rows().len();
    let mut p = vec![".param .u64 p_out".to_string()];
    p.extend((0..rows).map(|k| format!(".param .u64 p_in{k}")));
    p.extend((0..rows).map(|k| format!(".param .u64 p_step{k}")));
    p.push(".param .u64 p_rows".into());
    p.push(".param .u64 p_cols".into());
    p.extend((0..prog.scalars().len()).map(|k| format!(".param .f64 p_s{k}")));
    let mut s = String::from("(\n");
    for (i, line) in p.iter().enumerate() {
        let sep = if i + 1 < p.len() { "," } else { "" };
        let _ = writeln!(s, "\t{line}{sep}");
    }
    s.push(')');
    s
}

/// `value` (an `f64` register) in the register form of `d`.
fn scalar(body: &mut Body, value: &str, d: DTypeKind) -> String {
    let (class, cvt) = match d {
        DTypeKind::F64 => return value.to_string(),
        DTypeKind::F32 => (Class::F32, "cvt.rn.f32.f64"),
        DTypeKind::I32 => (Class::B32, "cvt.rzi.s32.f64"),
        DTypeKind::I64 => (Class::B64, "cvt.rzi.s64.f64"),
        other => unreachable!("a row kernel's scalar parameter of {other}"),
    };
    let r = body.reg(class);
    body.op(format!("{cvt} {r}, {value}"));
    r
}

/// The constant `v` of the compute dtype (`wide`: f64).
fn constant(v: f64, wide: bool) -> String {
    if wide {
        format!("0d{:016X}", v.to_bits())
    } else {
        format!("0f{:08X}", (v as f32).to_bits())
    }
}

/// The entry `name` running `prog` (see the module docs).
pub(crate) fn row_kernel_entry(name: &str, prog: &RowProgram) -> String {
    let dtype = prog.dtype;
    let wide = prog.compute_dtype() == DTypeKind::F64;
    let (a, class) = if wide {
        ("f64", Class::F64)
    } else {
        ("f32", Class::F32)
    };
    let mut body = Body::new();
    body.raw(format!(".shared .align 8 .b8 rsmem[{}];", 2 * REGION));
    let global = |body: &mut Body, param: &str| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{param}]"));
        body.op(format!("cvta.to.global.u64 {r}, {r}"));
        r
    };
    let out = global(&mut body, "p_out");
    let rows_idx = prog.rows();
    let ins: Vec<String> = (0..rows_idx.len())
        .map(|k| global(&mut body, &format!("p_in{k}")))
        .collect();
    let plain = |body: &mut Body, param: &str| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{param}]"));
        r
    };
    let steps: Vec<String> = (0..rows_idx.len())
        .map(|k| plain(&mut body, &format!("p_step{k}")))
        .collect();
    let rows = plain(&mut body, "p_rows");
    let cols = plain(&mut body, "p_cols");
    let scalars: Vec<String> = prog
        .scalars()
        .iter()
        .enumerate()
        .map(|(k, &(_, d))| {
            let v = body.reg(Class::F64);
            body.op(format!("ld.param.f64 {v}, [p_s{k}]"));
            scalar(&mut body, &v, d)
        })
        .collect();
    let n = body.reg(class);
    body.op(format!("cvt.rn.{a}.u64 {n}, {cols}"));
    let tid = body.reg(Class::B32);
    body.op(format!("mov.u32 {tid}, %tid.x"));
    let lane = body.reg(Class::B32);
    body.op(format!("and.b32 {lane}, {tid}, 31"));
    let warp = body.reg(Class::B32);
    body.op(format!("shr.u32 {warp}, {tid}, 5"));
    let smem = body.reg(Class::B64);
    body.op(format!("mov.u64 {smem}, rsmem"));
    let c32 = body.reg(Class::B32);
    let row = body.reg(Class::B64);
    body.op(format!("mov.u32 {c32}, %ctaid.x"));
    body.op(format!("cvt.u64.u32 {row}, {c32}"));
    let step = body.reg(Class::B64);
    body.op(format!("mov.u32 {c32}, %nctaid.x"));
    body.op(format!("cvt.u64.u32 {step}, {c32}"));

    let lp = body.label("row_loop");
    let end = body.label("row_end");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {row}, {rows}"));
    body.op(format!("@{done} bra.uni {end}"));
    let size = dtype.size_bytes();
    // The first element of this row in each input.
    let bases: Vec<String> = ins
        .iter()
        .zip(&steps)
        .map(|(base, st)| {
            let off = body.reg(Class::B64);
            body.op(format!("mul.lo.u64 {off}, {row}, {st}"));
            let r = body.reg(Class::B64);
            body.op(format!("mad.lo.u64 {r}, {off}, {size}, {base}"));
            r
        })
        .collect();
    // The program's parameters at column `col`, those it reads loaded.
    let args = |body: &mut Body, prog_k: &Program, col: Option<&str>, stats: &[String]| {
        let used = used_inputs(prog_k);
        let (mut r, mut s) = (0, 0);
        let mut out = Vec::new();
        for (i, p) in prog.params.iter().enumerate() {
            match p {
                RowParam::Row => {
                    let v = match col {
                        Some(col) if used[i] => {
                            let at = body.reg(Class::B64);
                            body.op(format!("mad.lo.u64 {at}, {col}, {size}, {}", bases[r]));
                            load(body, dtype, &at, true)
                        }
                        _ => String::new(),
                    };
                    r += 1;
                    out.push(v);
                }
                RowParam::Scalar(_) => {
                    out.push(scalars[s].clone());
                    s += 1;
                }
            }
        }
        out.extend(stats.iter().cloned());
        out
    };
    let threads = Threads {
        lane: &lane,
        warp: &warp,
        smem: Some(&smem),
    };
    let mut stats: Vec<String> = Vec::new();
    for (k, st) in prog.stats.iter().enumerate() {
        let p = lower(&st.program);
        let combine = lower(&st.reduce.combine_kernel(prog.compute_dtype()));
        let mut combine_into = |body: &mut Body, d: &str, o: &str| {
            let r = emit_program(body, &combine, &[d.to_string(), o.to_string()]);
            body.op(format!("mov.{a} {d}, {}", r[0]));
        };
        let acc = body.reg(class);
        body.op(format!(
            "mov.{a} {acc}, {}",
            constant(st.reduce.identity(), wide)
        ));
        cols_of_thread(&mut body, &tid, &cols, |body, col| {
            let xs = args(body, &p, Some(col), &stats);
            let v = emit_program(body, &p, &xs);
            combine_into(body, &acc, &v[0]);
        });
        let total = reduce_threads(&mut body, &threads, &acc, wide, k % 2, &mut combine_into);
        let stat = if st.reduce == RowReduce::Mean {
            let m = body.reg(class);
            body.op(format!("div.rn.{a} {m}, {total}, {n}"));
            m
        } else {
            total
        };
        stats.push(stat);
    }
    let p = lower(&prog.output);
    if prog.per_row {
        let first = body.reg(Class::Pred);
        body.op(format!("setp.ne.u32 {first}, {tid}, 0"));
        let skip = body.label("store_end");
        body.op(format!("@{first} bra {skip}"));
        let xs = args(&mut body, &p, None, &stats);
        let y = emit_program(&mut body, &p, &xs);
        let at = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {at}, {row}, {size}, {out}"));
        store(&mut body, dtype, &at, &y[0]);
        body.place(&skip);
    } else {
        let ob = body.reg(Class::B64);
        body.op(format!("mul.lo.u64 {ob}, {row}, {cols}"));
        body.op(format!("mad.lo.u64 {ob}, {ob}, {size}, {out}"));
        cols_of_thread(&mut body, &tid, &cols, |body, col| {
            let xs = args(body, &p, Some(col), &stats);
            let y = emit_program(body, &p, &xs);
            let at = body.reg(Class::B64);
            body.op(format!("mad.lo.u64 {at}, {col}, {size}, {ob}"));
            store(body, dtype, &at, &y[0]);
        });
    }
    // The next row's statistics overwrite shared memory this row read.
    body.op("bar.sync 0");
    body.op(format!("add.u64 {row}, {row}, {step}"));
    body.op(format!("bra.uni {lp}"));
    body.place(&end);
    body.op("ret");
    format!(
        ".visible .entry {name}{}\n{{\n{}}}\n",
        params(prog),
        body.finish()
    )
}
