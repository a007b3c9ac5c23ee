//! Row kernels: one block of [`BLOCK`](crate::builtin::BLOCK) threads per
//! row (grid-stride over rows), per-thread folds, warp butterflies with
//! `shfl.sync.bfly.b32`, shared memory across warps. The combine steps are
//! the lowered programs of `reduction`, which the interpreter runs in the
//! same order.

use super::body::{Body, Class};
use super::inst::{emit_program, immediate};
use super::memory::{load, load_half_bits, store, widen_half};
use crate::prim::{Program, Ty};
use crate::reduction::{float_bits, ReduceSpec, SoftmaxSpec, BUTTERFLY, NO_INDEX, WARPS};
use tensorfn_core::DTypeKind;

/// Bytes of shared memory per warp slot (a value and an index).
const SLOT: usize = 16;

const PARAMS: &str =
    "(\n\t.param .u64 p_out,\n\t.param .u64 p_in,\n\t.param .u64 p_rows,\n\t.param .u64 p_cols\n)";

/// Registers and values every row kernel starts from.
struct Frame {
    out: String,
    input: String,
    rows: String,
    cols: String,
    tid: String,
    lane: String,
    warp: String,
    smem: String,
    is_lane0: String,
    is_warp0: String,
}

fn frame(body: &mut Body) -> Frame {
    body.raw(format!(
        ".shared .align 16 .b8 smem[{}];",
        SLOT * (WARPS + 1)
    ));
    let param = |body: &mut Body, name: &str, global: bool| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{name}]"));
        if global {
            body.op(format!("cvta.to.global.u64 {r}, {r}"));
        }
        r
    };
    let out = param(body, "p_out", true);
    let input = param(body, "p_in", true);
    let rows = param(body, "p_rows", false);
    let cols = param(body, "p_cols", false);
    let tid = body.reg(Class::B32);
    body.op(format!("mov.u32 {tid}, %tid.x"));
    let lane = body.reg(Class::B32);
    body.op(format!("and.b32 {lane}, {tid}, 31"));
    let warp = body.reg(Class::B32);
    body.op(format!("shr.u32 {warp}, {tid}, 5"));
    let smem = body.reg(Class::B64);
    body.op(format!("mov.u64 {smem}, smem"));
    let is_lane0 = body.reg(Class::Pred);
    body.op(format!("setp.eq.u32 {is_lane0}, {lane}, 0"));
    let is_warp0 = body.reg(Class::Pred);
    body.op(format!("setp.eq.u32 {is_warp0}, {warp}, 0"));
    Frame {
        out,
        input,
        rows,
        cols,
        tid,
        lane,
        warp,
        smem,
        is_lane0,
        is_warp0,
    }
}

/// PTX type of a state word in shared memory.
fn mem_ty(ty: Ty) -> &'static str {
    match ty {
        Ty::F32 => "f32",
        Ty::F64 => "f64",
        Ty::I32 => "u32",
        Ty::I64 => "u64",
        Ty::Pred => unreachable!("predicate state"),
    }
}

fn mov_ty(ty: Ty) -> &'static str {
    match ty {
        Ty::F32 => "f32",
        Ty::F64 => "f64",
        Ty::I32 => "b32",
        Ty::I64 => "b64",
        Ty::Pred => unreachable!("predicate state"),
    }
}

/// Sets `state` to `identity`.
fn set_identity(body: &mut Body, state: &[(String, Ty)], identity: &[u64]) {
    for ((r, ty), &bits) in state.iter().zip(identity) {
        body.op(format!("mov.{} {r}, {}", mov_ty(*ty), immediate(*ty, bits)));
    }
}

/// `state = prog(state, other)`.
fn combine(body: &mut Body, prog: &Program, state: &[(String, Ty)], other: &[String]) {
    let mut args: Vec<String> = state.iter().map(|(r, _)| r.clone()).collect();
    args.extend(other.iter().cloned());
    let res = emit_program(body, prog, &args);
    for ((r, ty), v) in state.iter().zip(res) {
        body.op(format!("mov.{} {r}, {v}", mov_ty(*ty)));
    }
}

/// A butterfly exchange of one state word with the lane `off` away.
fn shuffle(body: &mut Body, reg: &str, ty: Ty, off: u32) -> String {
    match ty {
        Ty::F32 | Ty::I32 => {
            let d = body.reg_ty(ty);
            body.op(format!("shfl.sync.bfly.b32 {d}, {reg}, {off}, 31, -1"));
            d
        }
        _ => {
            let lo = body.reg(Class::B32);
            let hi = body.reg(Class::B32);
            body.op(format!("mov.b64 {{{lo}, {hi}}}, {reg}"));
            body.op(format!("shfl.sync.bfly.b32 {lo}, {lo}, {off}, 31, -1"));
            body.op(format!("shfl.sync.bfly.b32 {hi}, {hi}, {off}, 31, -1"));
            let d = body.reg_ty(ty);
            body.op(format!("mov.b64 {d}, {{{lo}, {hi}}}"));
            d
        }
    }
}

fn butterfly(body: &mut Body, prog: &Program, state: &[(String, Ty)]) {
    for off in BUTTERFLY {
        let other: Vec<String> = state
            .iter()
            .map(|(r, ty)| shuffle(body, r, *ty, off))
            .collect();
        combine(body, prog, state, &other);
    }
}

/// Reduces the per-thread `state` across the block; afterwards lane 0 of
/// warp 0 holds the result (other threads hold partial values). Ends with
/// every thread past a barrier, so shared memory may be reused after the
/// caller's next barrier.
fn block_reduce(
    body: &mut Body,
    f: &Frame,
    prog: &Program,
    state: &[(String, Ty)],
    identity: &[u64],
) {
    butterfly(body, prog, state);
    let slot = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {slot}, {}, {SLOT}", f.warp));
    body.op(format!("add.u64 {slot}, {slot}, {}", f.smem));
    for (k, (r, ty)) in state.iter().enumerate() {
        body.op(format!(
            "@{} st.shared.{} [{slot}+{}], {r}",
            f.is_lane0,
            mem_ty(*ty),
            8 * k
        ));
    }
    body.op("bar.sync 0");
    // Warp 0 combines the warp results; lanes past WARPS keep the identity.
    let skip = body.label("not_warp0");
    body.op(format!("@!{} bra {skip}", f.is_warp0));
    set_identity(body, state, identity);
    let has = body.reg(Class::Pred);
    body.op(format!("setp.lt.u32 {has}, {}, {WARPS}", f.lane));
    let lslot = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {lslot}, {}, {SLOT}", f.lane));
    body.op(format!("add.u64 {lslot}, {lslot}, {}", f.smem));
    for (k, (r, ty)) in state.iter().enumerate() {
        body.op(format!(
            "@{has} ld.shared.{} {r}, [{lslot}+{}]",
            mem_ty(*ty),
            8 * k
        ));
    }
    butterfly(body, prog, state);
    body.place(&skip);
}

/// Lane 0 of warp 0 publishes `value`; after the barrier every thread
/// reads it back into `value`.
fn broadcast(body: &mut Body, f: &Frame, value: &str, ty: Ty) {
    let both = body.reg(Class::Pred);
    body.op(format!("and.pred {both}, {}, {}", f.is_lane0, f.is_warp0));
    let at = SLOT * WARPS;
    body.op(format!(
        "@{both} st.shared.{} [{}+{at}], {value}",
        mem_ty(ty),
        f.smem
    ));
    body.op("bar.sync 0");
    body.op(format!(
        "ld.shared.{} {value}, [{}+{at}]",
        mem_ty(ty),
        f.smem
    ));
}

/// Loop over the block's rows: `row` runs from `ctaid.x` by `nctaid.x`.
fn row_loop(body: &mut Body, f: &Frame, inner: impl FnOnce(&mut Body, &str)) {
    let row = body.reg(Class::B64);
    let ctaid = body.reg(Class::B32);
    body.op(format!("mov.u32 {ctaid}, %ctaid.x"));
    body.op(format!("cvt.u64.u32 {row}, {ctaid}"));
    let nctaid = body.reg(Class::B32);
    body.op(format!("mov.u32 {nctaid}, %nctaid.x"));
    let rstride = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {rstride}, {nctaid}"));
    let lp = body.label("row_loop");
    let end = body.label("row_end");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {row}, {}", f.rows));
    // Uniform: every thread of a block works on the same row.
    body.op(format!("@{done} bra.uni {end}"));
    inner(body, &row);
    body.op("bar.sync 0");
    body.op(format!("add.u64 {row}, {row}, {rstride}"));
    body.op(format!("bra.uni {lp}"));
    body.place(&end);
    body.op("ret");
}

/// Loop over this thread's columns of a row: `col` from `tid` by BLOCK.
fn col_loop(body: &mut Body, f: &Frame, inner: impl FnOnce(&mut Body, &str)) {
    let col = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {col}, {}", f.tid));
    let lp = body.label("col_loop");
    let end = body.label("col_end");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {col}, {}", f.cols));
    body.op(format!("@{done} bra {end}"));
    inner(body, &col);
    body.op(format!("add.u64 {col}, {col}, {}", crate::builtin::BLOCK));
    body.op(format!("bra.uni {lp}"));
    body.place(&end);
}

/// Address of element `col` of the row starting at `row_base`.
fn elem_addr(body: &mut Body, row_base: &str, col: &str, dtype: DTypeKind) -> String {
    let a = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {a}, {col}, {}, {row_base}",
        dtype.size_bytes()
    ));
    a
}

fn row_base(body: &mut Body, base: &str, row: &str, cols: &str, dtype: DTypeKind) -> String {
    let r = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {r}, {row}, {cols}"));
    body.op(format!(
        "mad.lo.u64 {r}, {r}, {}, {base}",
        dtype.size_bytes()
    ));
    r
}

/// The reduction entry `name`.
pub(crate) fn reduce_entry(name: &str, spec: &ReduceSpec) -> String {
    let mut body = Body::new();
    let f = frame(&mut body);
    let mut state = vec![(body.reg_ty(spec.acc), spec.acc)];
    let mut identity = vec![spec.identity];
    if spec.with_index {
        state.push((body.reg(Class::B64), Ty::I64));
        identity.push(NO_INDEX as u64);
    }
    row_loop(&mut body, &f, |body, row| {
        let base = row_base(body, &f.input, row, &f.cols, spec.dtype);
        set_identity(body, &state, &identity);
        col_loop(body, &f, |body, col| {
            let a = elem_addr(body, &base, col, spec.dtype);
            let mut other = vec![load(body, spec.dtype, &a, true)];
            if spec.with_index {
                other.push(col.to_string());
            }
            combine(body, &spec.combine, &state, &other);
        });
        block_reduce(body, &f, &spec.combine, &state, &identity);
        let skip = body.label("not_first");
        let both = body.reg(Class::Pred);
        body.op(format!("and.pred {both}, {}, {}", f.is_lane0, f.is_warp0));
        body.op(format!("@!{both} bra {skip}"));
        let mut args: Vec<String> = state.iter().map(|(r, _)| r.clone()).collect();
        args.push(f.cols.clone());
        let r = emit_program(body, &spec.finish, &args);
        let oaddr = body.reg(Class::B64);
        body.op(format!(
            "mad.lo.u64 {oaddr}, {row}, {}, {}",
            spec.out.size_bytes(),
            f.out
        ));
        store(body, spec.out, &oaddr, &r[0]);
        body.place(&skip);
    });
    format!(".visible .entry {name}{PARAMS}\n{{\n{}}}\n", body.finish())
}

/// Longest row the softmax entry keeps in registers, read from global
/// memory once; longer rows take three passes over memory. 4096 (16
/// registers of elements per thread) keeps the kernel at 48 registers for
/// f32 and 64 for 16-bit types: twice this limit needed 80 to 118 and
/// halved the blocks an SM could hold, which cost more than the extra
/// passes save on longer rows.
pub const SOFTMAX_REGISTER_COLS: usize = 4096;

/// Register slots per thread for a row of [`SOFTMAX_REGISTER_COLS`].
const SLOTS: usize = SOFTMAX_REGISTER_COLS / crate::builtin::BLOCK as usize;

/// The softmax entry `name`: rows up to [`SOFTMAX_REGISTER_COLS`] go
/// through registers, longer ones through three passes. Both visit the
/// elements of a thread (`tid`, `tid + BLOCK`, ...) and combine them in the
/// same order, so their results are the same bits.
pub(crate) fn softmax_entry(name: &str, spec: &SoftmaxSpec) -> String {
    let mut body = Body::new();
    let f = frame(&mut body);
    row_loop(&mut body, &f, |body, row| {
        let done = body.label("row_done");
        let long = body.label("long_row");
        let is_long = body.reg(Class::Pred);
        body.op(format!(
            "setp.gt.u64 {is_long}, {}, {SOFTMAX_REGISTER_COLS}",
            f.cols
        ));
        // Uniform: the row length is a parameter.
        body.op(format!("@{is_long} bra.uni {long}"));
        softmax_in_registers(body, &f, spec, row);
        body.op(format!("bra.uni {done}"));
        body.place(&long);
        softmax_three_passes(body, &f, spec, row);
        body.place(&done);
    });
    // Left to itself ptxas gives the 16-bit entries 64 to 66 registers,
    // and above 64 an SM holds one block of BLOCK threads fewer; they
    // need 56 without spilling.
    let bounds = if is_half(spec.dtype) {
        format!(
            "\n.maxntid {}, 1, 1\n.minnctapersm {HALF_SOFTMAX_BLOCKS_PER_SM}",
            crate::builtin::BLOCK
        )
    } else {
        String::new()
    };
    format!(
        ".visible .entry {name}{PARAMS}{bounds}\n{{\n{}}}\n",
        body.finish()
    )
}

/// Blocks of a 16-bit softmax entry every SM must be able to hold at
/// once: a register file of 65536 registers then gives each thread up to
/// 64.
const HALF_SOFTMAX_BLOCKS_PER_SM: u32 = 4;

fn is_half(dtype: DTypeKind) -> bool {
    matches!(dtype, DTypeKind::F16 | DTypeKind::BF16)
}

/// Softmax of one row of at most [`SOFTMAX_REGISTER_COLS`] elements:
/// each thread loads its [`SLOTS`] elements once (a prefix of them lies
/// in the row), then max, sum of exponentials and outputs come from
/// registers.
fn softmax_in_registers(body: &mut Body, f: &Frame, spec: &SoftmaxSpec, row: &str) {
    let acc = spec.acc;
    let size = spec.dtype.size_bytes();
    let step = crate::builtin::BLOCK as usize;
    let state = vec![(body.reg_ty(acc), acc)];
    let ninf = [float_bits(acc, f64::NEG_INFINITY)];
    let nzero = [float_bits(acc, -0.0)];
    let base = row_base(body, &f.input, row, &f.cols, spec.dtype);
    let obase = row_base(body, &f.out, row, &f.cols, spec.dtype);
    let col0 = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {col0}, {}", f.tid));
    let addr = elem_addr(body, &base, &col0, spec.dtype);
    let oaddr = elem_addr(body, &obase, &col0, spec.dtype);
    // Slot j holds column tid + j * BLOCK when that is inside the row.
    let mut inside = Vec::with_capacity(SLOTS);
    for j in 0..SLOTS {
        let c = body.reg(Class::B64);
        body.op(format!("add.u64 {c}, {col0}, {}", j * step));
        let p = body.reg(Class::Pred);
        body.op(format!("setp.lt.u64 {p}, {c}, {}", f.cols));
        inside.push(p);
    }
    let xs: Vec<String> = (0..SLOTS).map(|_| body.reg_ty(acc)).collect();
    // Every pass stops at the first slot outside the row.
    let each = |body: &mut Body, what: &str, visit: &mut dyn FnMut(&mut Body, usize)| {
        let end = body.label(what);
        for (j, p) in inside.iter().enumerate() {
            body.op(format!("@!{p} bra {end}"));
            visit(body, j);
        }
        body.place(&end);
    };
    if is_half(spec.dtype) {
        // All loads are issued before the first widening waits for one.
        let class = if spec.dtype == DTypeKind::F16 {
            Class::B16
        } else {
            Class::B32
        };
        let raws: Vec<String> = (0..SLOTS).map(|_| body.reg(class)).collect();
        let bits = if spec.dtype == DTypeKind::F16 {
            "b16"
        } else {
            "b32"
        };
        each(body, "loaded", &mut |body, j| {
            let r = load_half_bits(
                body,
                spec.dtype,
                &format!("{addr}+{}", j * step * size),
                true,
            );
            body.op(format!("mov.{bits} {}, {r}", raws[j]));
        });
        each(body, "widened", &mut |body, j| {
            let x = widen_half(body, spec.dtype, &raws[j]);
            body.op(format!("mov.{} {}, {x}", mov_ty(acc), xs[j]));
        });
    } else {
        each(body, "loaded", &mut |body, j| {
            let x = load(
                body,
                spec.dtype,
                &format!("{addr}+{}", j * step * size),
                true,
            );
            body.op(format!("mov.{} {}, {x}", mov_ty(acc), xs[j]));
        });
    }
    set_identity(body, &state, &ninf);
    each(body, "maxed", &mut |body, j| {
        combine(body, &spec.max, &state, std::slice::from_ref(&xs[j]));
    });
    block_reduce(body, f, &spec.max, &state, &ninf);
    let m = body.reg_ty(acc);
    body.op(format!("mov.{} {m}, {}", mov_ty(acc), state[0].0));
    broadcast(body, f, &m, acc);
    body.op("bar.sync 0");
    set_identity(body, &state, &nzero);
    each(body, "summed", &mut |body, j| {
        let e = emit_program(body, &spec.exp_shift, &[xs[j].clone(), m.clone()]);
        combine(body, &spec.sum, &state, &e);
    });
    block_reduce(body, f, &spec.sum, &state, &nzero);
    let s = emit_program(body, &spec.row_log, &[state[0].0.clone()]);
    let sv = body.reg_ty(acc);
    body.op(format!("mov.{} {sv}, {}", mov_ty(acc), s[0]));
    broadcast(body, f, &sv, acc);
    each(body, "stored", &mut |body, j| {
        let y = emit_program(body, &spec.finish, &[xs[j].clone(), m.clone(), sv.clone()]);
        store(
            body,
            spec.dtype,
            &format!("{oaddr}+{}", j * step * size),
            &y[0],
        );
    });
}

/// Softmax of one row of any length: max, sum of exponentials and
/// outputs each read the row from global memory.
fn softmax_three_passes(body: &mut Body, f: &Frame, spec: &SoftmaxSpec, row: &str) {
    let acc = spec.acc;
    let state = vec![(body.reg_ty(acc), acc)];
    let ninf = [float_bits(acc, f64::NEG_INFINITY)];
    let nzero = [float_bits(acc, -0.0)];
    let base = row_base(body, &f.input, row, &f.cols, spec.dtype);
    let obase = row_base(body, &f.out, row, &f.cols, spec.dtype);
    // max
    set_identity(body, &state, &ninf);
    col_loop(body, f, |body, col| {
        let a = elem_addr(body, &base, col, spec.dtype);
        let x = load(body, spec.dtype, &a, true);
        combine(body, &spec.max, &state, &[x]);
    });
    block_reduce(body, f, &spec.max, &state, &ninf);
    let m = body.reg_ty(acc);
    body.op(format!("mov.{} {m}, {}", mov_ty(acc), state[0].0));
    broadcast(body, f, &m, acc);
    body.op("bar.sync 0");
    // sum of exp(x - max)
    set_identity(body, &state, &nzero);
    col_loop(body, f, |body, col| {
        let a = elem_addr(body, &base, col, spec.dtype);
        let x = load(body, spec.dtype, &a, true);
        let e = emit_program(body, &spec.exp_shift, &[x, m.clone()]);
        combine(body, &spec.sum, &state, &e);
    });
    block_reduce(body, f, &spec.sum, &state, &nzero);
    let s = emit_program(body, &spec.row_log, &[state[0].0.clone()]);
    let sv = body.reg_ty(acc);
    body.op(format!("mov.{} {sv}, {}", mov_ty(acc), s[0]));
    broadcast(body, f, &sv, acc);
    // outputs
    col_loop(body, f, |body, col| {
        let a = elem_addr(body, &base, col, spec.dtype);
        let x = load(body, spec.dtype, &a, true);
        let y = emit_program(body, &spec.finish, &[x, m.clone(), sv.clone()]);
        let oa = elem_addr(body, &obase, col, spec.dtype);
        store(body, spec.dtype, &oa, &y[0]);
    });
}
