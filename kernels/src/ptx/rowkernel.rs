//! The entries of a row kernel written in `tensor_fn!` (a
//! [`RowProgram`]), one per [`NormEntry`]: the row strategies of the
//! built-in norms ([`crate::norm`]), run over any program.
//!
//! - `NAME_warp_v`, `NAME_warp_s`, `NAME_block_v`, `NAME_block_s`: the
//!   row in registers ([`Accesses`]: a warp per row up to
//!   [`warp_cols`](crate::norm::warp_cols), a block up to
//!   [`block_cols`](crate::norm::block_cols); 16-byte accesses for `_v`).
//!   The row parameters a statistic reads are loaded once, all loads
//!   issued before any is used; each statistic is computed from those
//!   registers (slots past the row left out) and combined across the
//!   row's threads ([`reduce_threads`]); the result is computed from the
//!   registers, the row parameters only the result reads loaded a few
//!   accesses at a time beside it, and stored with the same accesses.
//! - `NAME_long`: any length; per statistic, a pass over the row (thread
//!   `t` reading the columns `t, t + BLOCK, ..`), then a pass storing the
//!   result.
//!
//! A per-row result is stored by the row's first thread.
//!
//! `NAME_SUFFIX(.param .u64 p_out, .param .u64 p_in0, .., .param .u64 p_step0,
//! .., .param .u64 p_rows, .param .u64 p_cols, .param .f64 p_s0, ..)`: an
//! input per row parameter (`p_stepK` elements between its rows: `cols`,
//! or 0 for one row broadcast to every row), a value per scalar parameter
//! (converted to its dtype), `rows` contiguous output rows of `cols`
//! elements (one element per row for a per-row result). Launch as the
//! built-in norms' entries are launched ([`crate::norm::entry`] picks
//! one; `block.x = BLOCK`, a block per
//! [`rows_per_block`](NormEntry::rows_per_block) rows).

use super::body::{Body, Class};
use super::elementwise::used_inputs;
use super::inst::emit_program;
use super::memory::{load, store};
use super::norm::{
    cols_of_thread, load_raw, reduce_threads, store_access, widen, Accesses, Threads, REGION,
};
use crate::lower::lower;
use crate::norm::{NormEntry, WARPS};
use crate::prim::{Inst, Op, Program, Reg};
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

/// Every entry of `prog` named `name` (see the module docs).
pub(crate) fn row_kernel_entries(name: &str, prog: &RowProgram) -> Vec<String> {
    NormEntry::ALL
        .iter()
        .map(|&e| row_kernel_entry(name, prog, e))
        .collect()
}

/// What a row's code reads: the program, this thread's place in the
/// row, the scalars and the row's length.
struct Row<'a> {
    prog: &'a RowProgram,
    /// Statistics in f64 (else f32).
    wide: bool,
    scalars: &'a [String],
    /// The row's length in the statistics' type.
    n: &'a str,
    /// This thread's place in the row (u64).
    t: &'a str,
    cols: &'a str,
    threads: Threads<'a>,
}

impl Row<'_> {
    fn a(&self) -> &'static str {
        if self.wide {
            "f64"
        } else {
            "f32"
        }
    }

    fn class(&self) -> Class {
        if self.wide {
            Class::F64
        } else {
            Class::F32
        }
    }

    /// The inputs of one of the element programs: each row parameter's
    /// value (`row(body, k)` for the `k`-th row parameter), each scalar,
    /// then `stats`.
    fn inputs(
        &self,
        body: &mut Body,
        stats: &[String],
        mut row: impl FnMut(&mut Body, usize) -> String,
    ) -> Vec<String> {
        let (mut r, mut s) = (0, 0);
        let mut out = Vec::with_capacity(self.prog.params.len() + stats.len());
        for p in &self.prog.params {
            match p {
                RowParam::Row => {
                    out.push(row(body, r));
                    r += 1;
                }
                RowParam::Scalar(_) => {
                    out.push(self.scalars[s].clone());
                    s += 1;
                }
            }
        }
        out.extend(stats.iter().cloned());
        out
    }

    /// Statistic `k` from each thread's partial result `part`: combined
    /// across the row's threads, divided by the length for a mean.
    fn finish(&self, body: &mut Body, k: usize, part: &str) -> String {
        let st = &self.prog.stats[k];
        let combine = lower(&st.reduce.combine_kernel(self.prog.compute_dtype()));
        let a = self.a();
        let total = reduce_threads(
            body,
            &self.threads,
            part,
            self.wide,
            k % 2,
            &mut |body, d, o| {
                let r = emit_program(body, &combine, &[d.to_string(), o.to_string()]);
                body.op(format!("mov.{a} {d}, {}", r[0]));
            },
        );
        if st.reduce == RowReduce::Mean {
            let m = body.reg(self.class());
            body.op(format!("div.rn.{a} {m}, {total}, {}", self.n));
            m
        } else {
            total
        }
    }

    /// A register holding statistic `k`'s identity.
    fn identity(&self, body: &mut Body, k: usize) -> String {
        let acc = body.reg(self.class());
        let v = constant(self.prog.stats[k].reduce.identity(), self.wide);
        body.op(format!("mov.{} {acc}, {v}", self.a()));
        acc
    }

    /// The row's one value, stored at `out` by its first thread.
    fn store_per_row(&self, body: &mut Body, out: &str, stats: &[String]) {
        let p = lower(&self.prog.output);
        let first = body.reg(Class::Pred);
        body.op(format!("setp.ne.u64 {first}, {}, 0", self.t));
        let skip = body.label("store_end");
        body.op(format!("@{first} bra {skip}"));
        let xs = self.inputs(body, stats, |_, _| String::new());
        let y = emit_program(body, &p, &xs);
        store(body, self.prog.dtype, out, &y[0]);
        body.place(&skip);
    }
}

/// The entry `NAME_SUFFIX` of `entry` running `prog` (see the module
/// docs).
fn row_kernel_entry(name: &str, prog: &RowProgram, entry: NormEntry) -> String {
    let dtype = prog.dtype;
    let wide = prog.compute_dtype() == DTypeKind::F64;
    let a = if wide { "f64" } else { "f32" };
    let mut body = Body::new();
    let shared = !matches!(entry, NormEntry::Warp { .. });
    if shared {
        body.raw(format!(".shared .align 8 .b8 rsmem[{}];", 2 * REGION));
    }
    let global = |body: &mut Body, param: &str| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{param}]"));
        body.op(format!("cvta.to.global.u64 {r}, {r}"));
        r
    };
    let out = global(&mut body, "p_out");
    let nrows = prog.rows().len();
    let ins: Vec<String> = (0..nrows)
        .map(|k| global(&mut body, &format!("p_in{k}")))
        .collect();
    let plain = |body: &mut Body, param: &str| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{param}]"));
        r
    };
    let steps: Vec<String> = (0..nrows)
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
    let n = body.reg(if wide { Class::F64 } else { Class::F32 });
    body.op(format!("cvt.rn.{a}.u64 {n}, {cols}"));
    let tid = body.reg(Class::B32);
    body.op(format!("mov.u32 {tid}, %tid.x"));
    let lane = body.reg(Class::B32);
    body.op(format!("and.b32 {lane}, {tid}, 31"));
    let warp = body.reg(Class::B32);
    body.op(format!("shr.u32 {warp}, {tid}, 5"));
    let smem = shared.then(|| {
        let s = body.reg(Class::B64);
        body.op(format!("mov.u64 {s}, rsmem"));
        s
    });
    let c32 = body.reg(Class::B32);
    let ctaid = body.reg(Class::B64);
    body.op(format!("mov.u32 {c32}, %ctaid.x"));
    body.op(format!("cvt.u64.u32 {ctaid}, {c32}"));
    let nctaid = body.reg(Class::B64);
    body.op(format!("mov.u32 {c32}, %nctaid.x"));
    body.op(format!("cvt.u64.u32 {nctaid}, {c32}"));
    // Rows `row, row + step, ..`; this thread is `t` of its row's threads.
    let row = body.reg(Class::B64);
    let step = body.reg(Class::B64);
    let t = body.reg(Class::B64);
    match entry {
        NormEntry::Warp { .. } => {
            let w = body.reg(Class::B64);
            body.op(format!("cvt.u64.u32 {w}, {warp}"));
            body.op(format!("mad.lo.u64 {row}, {ctaid}, {WARPS}, {w}"));
            body.op(format!("mul.lo.u64 {step}, {nctaid}, {WARPS}"));
            body.op(format!("cvt.u64.u32 {t}, {lane}"));
        }
        _ => {
            body.op(format!("mov.u64 {row}, {ctaid}"));
            body.op(format!("mov.u64 {step}, {nctaid}"));
            body.op(format!("cvt.u64.u32 {t}, {tid}"));
        }
    }
    let acc = (entry != NormEntry::Long).then(|| Accesses::new(&mut body, dtype, &cols, entry, &t));
    let r = Row {
        prog,
        wide,
        scalars: &scalars,
        n: &n,
        t: &t,
        cols: &cols,
        threads: Threads {
            lane: &lane,
            warp: &warp,
            smem: smem.as_deref(),
        },
    };

    let lp = body.label("row_loop");
    let end = body.label("row_end");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {row}, {rows}"));
    // Uniform: a warp (or a block) works on one row at a time.
    body.op(format!("@{done} bra.uni {end}"));
    let size = dtype.size_bytes();
    // The first element of this row in each input and in the output.
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
    let ob = body.reg(Class::B64);
    if prog.per_row {
        body.op(format!("mad.lo.u64 {ob}, {row}, {size}, {out}"));
    } else {
        body.op(format!("mul.lo.u64 {ob}, {row}, {cols}"));
        body.op(format!("mad.lo.u64 {ob}, {ob}, {size}, {out}"));
    }
    match &acc {
        Some(acc) => row_in_registers(&mut body, &r, acc, &bases, &ob),
        None => long_row(&mut body, &r, &bases, &ob),
    }
    if shared {
        // The next row's statistics overwrite shared memory this row read.
        body.op("bar.sync 0");
    }
    body.op(format!("add.u64 {row}, {row}, {step}"));
    body.op(format!("bra.uni {lp}"));
    body.place(&end);
    body.op("ret");
    format!(
        ".visible .entry {name}{}{}\n{{\n{}}}\n",
        entry.suffix(),
        params(prog),
        body.finish()
    )
}

/// Which row parameters (by their place among the row parameters) the
/// program `p` reads.
fn rows_read(prog: &RowProgram, p: &Program) -> Vec<bool> {
    let used = used_inputs(p);
    prog.rows().iter().map(|&i| used[i]).collect()
}

/// An element program split at its work that reads no row parameter
/// (a norm's `1 / sqrt(var + eps)`, say): `head` computes those values
/// once per row, `tail` the rest per element, reading them as parameters
/// after the program's own. The same operations in the same order, so the
/// same bits; only where they run changes.
struct Hoisted {
    head: Program,
    tail: Program,
}

impl Hoisted {
    /// `p` split for the row program whose row parameters are `rows`.
    fn new(p: &Program, rows: &[usize]) -> Hoisted {
        let n = p.insts.len();
        let live = p.live();
        let mut invariant = vec![false; n];
        for (i, inst) in p.insts.iter().enumerate() {
            invariant[i] = match inst.op {
                Op::Param(k) => !rows.contains(&(k as usize)),
                _ => inst.args.iter().all(|a| invariant[a.idx()]),
            };
        }
        let computed = |i: usize| !matches!(p.insts[i].op, Op::Param(_) | Op::Const(_));
        // The computed invariant values an element's work (or the result) reads.
        let mut hoist = vec![false; n];
        for (i, inst) in p.insts.iter().enumerate() {
            if live[i] && !invariant[i] {
                for a in &inst.args {
                    hoist[a.idx()] |= invariant[a.idx()] && computed(a.idx());
                }
            }
        }
        for r in &p.results {
            hoist[r.idx()] |= invariant[r.idx()] && computed(r.idx());
        }
        let hoisted: Vec<usize> = (0..n).filter(|&i| hoist[i]).collect();
        let head = Program {
            params: p.params.clone(),
            insts: p.insts.clone(),
            results: hoisted.iter().map(|&i| Reg(i as u32)).collect(),
        };
        let mut tail = p.clone();
        for (k, &i) in hoisted.iter().enumerate() {
            let ty = p.insts[i].ty;
            tail.params.push(ty);
            tail.insts[i] = Inst {
                op: Op::Param((p.params.len() + k) as u16),
                ty,
                args: Vec::new(),
            };
        }
        Hoisted { head, tail }
    }

    /// Emits the head once (before a row's element loops) with the
    /// scalars and `stats`; returns the registers the tail reads after
    /// its own parameters.
    fn emit_head(&self, body: &mut Body, r: &Row<'_>, stats: &[String]) -> Vec<String> {
        if self.head.results.is_empty() {
            return Vec::new();
        }
        let xs = r.inputs(body, stats, |_, _| String::new());
        emit_program(body, &self.head, &xs)
    }
}

/// One row of any length, its inputs read once per pass from global
/// memory at `bases`, the result stored at `out`.
fn long_row(body: &mut Body, r: &Row<'_>, bases: &[String], out: &str) {
    let prog = r.prog;
    let dtype = prog.dtype;
    let size = dtype.size_bytes();
    let tid32 = body.reg(Class::B32);
    body.op(format!("cvt.u32.u64 {tid32}, {}", r.t));
    let load_at = |body: &mut Body, read: &[bool], k: usize, col: &str| {
        if !read[k] {
            return String::new();
        }
        let at = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {at}, {col}, {size}, {}", bases[k]));
        load(body, dtype, &at, true)
    };
    let mut stats: Vec<String> = Vec::new();
    for (k, st) in prog.stats.iter().enumerate() {
        let p = lower(&st.program);
        let read = rows_read(prog, &p);
        let combine = lower(&st.reduce.combine_kernel(prog.compute_dtype()));
        let acc = r.identity(body, k);
        let split = Hoisted::new(&p, &prog.rows());
        let pre = split.emit_head(body, r, &stats);
        cols_of_thread(body, &tid32, r.cols, |body, col| {
            let mut xs = r.inputs(body, &stats, |body, j| load_at(body, &read, j, col));
            xs.extend(pre.iter().cloned());
            let v = emit_program(body, &split.tail, &xs);
            let c = emit_program(body, &combine, &[acc.clone(), v[0].clone()]);
            body.op(format!("mov.{} {acc}, {}", r.a(), c[0]));
        });
        stats.push(r.finish(body, k, &acc));
    }
    if prog.per_row {
        return r.store_per_row(body, out, &stats);
    }
    let p = lower(&prog.output);
    let read = rows_read(prog, &p);
    let split = Hoisted::new(&p, &prog.rows());
    let pre = split.emit_head(body, r, &stats);
    cols_of_thread(body, &tid32, r.cols, |body, col| {
        let mut xs = r.inputs(body, &stats, |body, j| load_at(body, &read, j, col));
        xs.extend(pre.iter().cloned());
        let y = emit_program(body, &split.tail, &xs);
        let at = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {at}, {col}, {size}, {out}"));
        store(body, dtype, &at, &y[0]);
    });
}

/// One row held in registers (see the module docs): inputs at `bases`,
/// the result stored at `out`.
fn row_in_registers(body: &mut Body, r: &Row<'_>, acc: &Accesses, bases: &[String], out: &str) {
    let prog = r.prog;
    let dtype = prog.dtype;
    let stat_progs: Vec<Program> = prog.stats.iter().map(|s| lower(&s.program)).collect();
    let out_prog = lower(&prog.output);
    let nrows = bases.len();
    let mut held = vec![false; nrows];
    for p in &stat_progs {
        for (h, u) in held.iter_mut().zip(rows_read(prog, p)) {
            *h |= u;
        }
    }
    // This thread's first access of each row parameter.
    let firsts: Vec<String> = bases.iter().map(|b| acc.base(body, b)).collect();
    // The held rows: every load first, then the conversions.
    let raws: Vec<Vec<Vec<String>>> = (0..nrows)
        .map(|k| {
            if !held[k] {
                return Vec::new();
            }
            (0..acc.count)
                .map(|j| {
                    let p = acc.inside(body, j);
                    load_raw(body, dtype, acc.width, &p, &acc.at(&firsts[k], j))
                })
                .collect()
        })
        .collect();
    let values: Vec<Vec<Vec<String>>> = raws
        .iter()
        .map(|rs| {
            rs.iter()
                .map(|raw| widen(body, dtype, acc.width, raw))
                .collect()
        })
        .collect();
    let mut stats: Vec<String> = Vec::new();
    for (k, st) in prog.stats.iter().enumerate() {
        let combine = lower(&st.reduce.combine_kernel(prog.compute_dtype()));
        let part = r.identity(body, k);
        let split = Hoisted::new(&stat_progs[k], &prog.rows());
        let pre = split.emit_head(body, r, &stats);
        for j in 0..acc.count {
            let inside = acc.inside(body, j);
            for e in 0..acc.width {
                let mut xs = r.inputs(body, &stats, |_, row| {
                    values[row].get(j).map_or(String::new(), |v| v[e].clone())
                });
                xs.extend(pre.iter().cloned());
                let v = emit_program(body, &split.tail, &xs);
                let c = emit_program(body, &combine, &[part.clone(), v[0].clone()]);
                // Slots past the row take no part.
                body.op(format!("@{inside} mov.{} {part}, {}", r.a(), c[0]));
            }
        }
        stats.push(r.finish(body, k, &part));
    }
    if prog.per_row {
        return r.store_per_row(body, out, &stats);
    }
    let read = rows_read(prog, &out_prog);
    let streamed: Vec<usize> = (0..nrows).filter(|&k| read[k] && !held[k]).collect();
    let split = Hoisted::new(&out_prog, &prog.rows());
    let pre = split.emit_head(body, r, &stats);
    let oa = acc.base(body, out);
    // The rows only the result reads, a few accesses at a time: their
    // loads in flight together, without holding a second row's worth of
    // registers.
    let group = (16 / (acc.width * streamed.len().max(1))).max(1);
    let mut j0 = 0;
    while j0 < acc.count {
        let js: Vec<usize> = (j0..(j0 + group).min(acc.count)).collect();
        let loaded: Vec<Vec<Vec<String>>> = js
            .iter()
            .map(|&j| {
                let p = acc.inside(body, j);
                streamed
                    .iter()
                    .map(|&k| load_raw(body, dtype, acc.width, &p, &acc.at(&firsts[k], j)))
                    .collect()
            })
            .collect();
        for (&j, raw) in js.iter().zip(&loaded) {
            let mut now: Vec<Vec<String>> = vec![Vec::new(); nrows];
            for (&k, raw) in streamed.iter().zip(raw) {
                now[k] = widen(body, dtype, acc.width, raw);
            }
            let ys: Vec<String> = (0..acc.width)
                .map(|e| {
                    let mut xs = r.inputs(body, &stats, |_, row| {
                        if held[row] {
                            values[row][j][e].clone()
                        } else {
                            now[row].get(e).cloned().unwrap_or_default()
                        }
                    });
                    xs.extend(pre.iter().cloned());
                    emit_program(body, &split.tail, &xs)[0].clone()
                })
                .collect();
            let p = acc.inside(body, j);
            store_access(body, dtype, &p, &acc.at(&oa, j), &ys);
        }
        j0 += group;
    }
}
