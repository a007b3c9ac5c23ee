//! Row kernels: one block of [`BLOCK`](crate::abi::BLOCK) threads per
//! row (grid-stride over rows; [`frame_of`] takes another block size, up
//! to 1024 threads, for kernels whose rows want more), per-thread folds,
//! warp butterflies with `shfl.sync.bfly.b32`, shared memory across warps. The combine steps are
//! the lowered programs of `reduction`, which the interpreter runs in the
//! same order.

use super::body::{Body, Class};
use super::inst::{emit_program, immediate};
use super::memory::{half_bits_ty, load, load_half_bits_from, narrow_half, store, widen_half};
use crate::ops::RowShape;
use crate::prim::{Program, Ty};
use crate::reduction::{float_bits, ReduceSpec, RowSpec, BUTTERFLY, NO_INDEX, WARPS};
use tensorfn_core::DTypeKind;

/// Bytes of shared memory per warp slot (a value and an index).
const SLOT: usize = 16;

const PARAMS: &str =
    "(\n\t.param .u64 p_out,\n\t.param .u64 p_in,\n\t.param .u64 p_rows,\n\t.param .u64 p_cols\n)";

/// Registers and values every row kernel starts from.
pub(super) struct Frame {
    pub(super) out: String,
    pub(super) input: String,
    pub(super) rows: String,
    pub(super) cols: String,
    pub(super) tid: String,
    lane: String,
    warp: String,
    smem: String,
    pub(super) is_lane0: String,
    pub(super) is_warp0: String,
    /// Threads of the block (a multiple of 32, at most 1024).
    pub(super) threads: u32,
}

impl Frame {
    /// Warps of the block, each with its slot in `smem`.
    fn warps(&self) -> u32 {
        self.threads / 32
    }
}

/// The frame of a kernel of [`BLOCK`](crate::abi::BLOCK) threads a block.
pub(super) fn frame(body: &mut Body) -> Frame {
    const _: () = assert!(crate::abi::BLOCK as usize == 32 * WARPS);
    frame_of(body, crate::abi::BLOCK)
}

/// The frame of a kernel of `threads` threads a block: its reductions
/// keep a slot per warp, which warp 0 combines (so at most 32 warps).
pub(super) fn frame_of(body: &mut Body, threads: u32) -> Frame {
    assert!(
        threads % 32 == 0 && (32..=1024).contains(&threads),
        "a row block is 1 to 32 whole warps"
    );
    body.raw(format!(
        ".shared .align 16 .b8 smem[{}];",
        SLOT * (threads as usize / 32 + 1)
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
        threads,
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

pub(super) fn mov_ty(ty: Ty) -> &'static str {
    match ty {
        Ty::F32 => "f32",
        Ty::F64 => "f64",
        Ty::I32 => "b32",
        Ty::I64 => "b64",
        Ty::Pred => unreachable!("predicate state"),
    }
}

/// Sets `state` to `identity`.
pub(super) fn set_identity(body: &mut Body, state: &[(String, Ty)], identity: &[u64]) {
    for ((r, ty), &bits) in state.iter().zip(identity) {
        body.op(format!("mov.{} {r}, {}", mov_ty(*ty), immediate(*ty, bits)));
    }
}

/// `state = prog(state, other)`.
pub(super) fn combine(body: &mut Body, prog: &Program, state: &[(String, Ty)], other: &[String]) {
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
pub(super) fn block_reduce(
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
    // Warp 0 combines the warp results; lanes past the warps keep the
    // identity.
    let skip = body.label("not_warp0");
    body.op(format!("@!{} bra {skip}", f.is_warp0));
    set_identity(body, state, identity);
    let has = body.reg(Class::Pred);
    body.op(format!("setp.lt.u32 {has}, {}, {}", f.lane, f.warps()));
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
pub(super) fn broadcast(body: &mut Body, f: &Frame, value: &str, ty: Ty) {
    let both = body.reg(Class::Pred);
    body.op(format!("and.pred {both}, {}, {}", f.is_lane0, f.is_warp0));
    let at = SLOT * f.warps() as usize;
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
pub(super) fn row_loop(body: &mut Body, f: &Frame, inner: impl FnOnce(&mut Body, &str)) {
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

/// Loop over this thread's columns of a row: `col` from `tid` by the
/// block's threads.
pub(super) fn col_loop(body: &mut Body, f: &Frame, inner: impl FnOnce(&mut Body, &str)) {
    let col = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {col}, {}", f.tid));
    let lp = body.label("col_loop");
    let end = body.label("col_end");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {col}, {}", f.cols));
    body.op(format!("@{done} bra {end}"));
    inner(body, &col);
    body.op(format!("add.u64 {col}, {col}, {}", f.threads));
    body.op(format!("bra.uni {lp}"));
    body.place(&end);
}

/// Address of element `col` of the row starting at `row_base`.
pub(super) fn elem_addr(body: &mut Body, row_base: &str, col: &str, dtype: DTypeKind) -> String {
    let a = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {a}, {col}, {}, {row_base}",
        dtype.size_bytes()
    ));
    a
}

pub(super) fn row_base(
    body: &mut Body,
    base: &str,
    row: &str,
    cols: &str,
    dtype: DTypeKind,
) -> String {
    let r = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {r}, {row}, {cols}"));
    body.op(format!(
        "mad.lo.u64 {r}, {r}, {}, {base}",
        dtype.size_bytes()
    ));
    r
}

/// Output `row` of a kernel with one value per row: the first thread of
/// the block (which holds the block's reductions) computes it with
/// `value` and stores it.
fn store_row_value(
    body: &mut Body,
    f: &Frame,
    row: &str,
    dtype: DTypeKind,
    value: impl FnOnce(&mut Body) -> String,
) {
    let skip = body.label("not_first");
    let both = body.reg(Class::Pred);
    body.op(format!("and.pred {both}, {}, {}", f.is_lane0, f.is_warp0));
    body.op(format!("@!{both} bra {skip}"));
    let r = value(body);
    let oaddr = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {oaddr}, {row}, {}, {}",
        dtype.size_bytes(),
        f.out
    ));
    store(body, dtype, &oaddr, &r);
    body.place(&skip);
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
        store_row_value(body, &f, row, spec.out, |body| {
            let mut args: Vec<String> = state.iter().map(|(r, _)| r.clone()).collect();
            args.push(f.cols.clone());
            emit_program(body, &spec.finish, &args).remove(0)
        });
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
const SLOTS: usize = SOFTMAX_REGISTER_COLS / crate::abi::BLOCK as usize;

/// Bytes of the shared buffer a 16-bit row of the register path passes
/// through: [`SOFTMAX_REGISTER_COLS`] elements placed at their global
/// address's offset within 16 bytes (at most 14).
const STAGE_BYTES: usize = 2 * SOFTMAX_REGISTER_COLS + 16;

/// 16-byte chunks each thread moves of a full 16-bit row.
const STAGE_CHUNKS: usize = 2 * SOFTMAX_REGISTER_COLS / (16 * crate::abi::BLOCK as usize);

const _: () = assert!(
    2 * SOFTMAX_REGISTER_COLS == STAGE_CHUNKS * 16 * crate::abi::BLOCK as usize,
    "a full 16-bit row is a whole number of chunks per thread"
);

/// The row-op entry `name` (the softmax kernel, which every row op of
/// the table is so far; `logsumexp` stops after the sum and stores one
/// value per row): rows up to [`SOFTMAX_REGISTER_COLS`] go through
/// registers, longer ones through three passes. Both visit the elements
/// of a thread (`tid`, `tid + BLOCK`, ...) and combine them in the same
/// order, so their results are the same bits.
pub(crate) fn row_entry(name: &str, spec: &RowSpec) -> String {
    let mut body = Body::new();
    if is_half(spec.dtype) {
        body.raw(format!(".shared .align 16 .b8 stage[{STAGE_BYTES}];"));
    }
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
    // Left to itself ptxas gives the 16-bit entries 64 to 72 registers,
    // and above 64 an SM holds one block of BLOCK threads fewer; they
    // need 56 without spilling.
    let bounds = if is_half(spec.dtype) {
        format!(
            "\n.maxntid {}, 1, 1\n.minnctapersm {HALF_SOFTMAX_BLOCKS_PER_SM}",
            crate::abi::BLOCK
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

/// Softmax of one row of at most [`SOFTMAX_REGISTER_COLS`] elements:
/// each thread loads its [`SLOTS`] elements once (a prefix of them lies
/// in the row), then max, sum of exponentials and outputs come from
/// registers; softmax keeps each slot's exponential from the sum for its
/// output instead of computing it again. 16-bit rows move between global
/// and shared memory in 16-byte accesses (see [`Staged`]), where 2-byte
/// accesses would take eight times as many global memory instructions,
/// each moving 64 bytes per warp. Neither changes which elements a thread
/// holds or any value computed, so the results do not change.
fn softmax_in_registers(body: &mut Body, f: &Frame, spec: &RowSpec, row: &str) {
    let acc = spec.acc;
    let size = spec.dtype.size_bytes();
    let step = crate::abi::BLOCK as usize;
    let state = vec![(body.reg_ty(acc), acc)];
    let ninf = [float_bits(acc, f64::NEG_INFINITY)];
    let nzero = [float_bits(acc, -0.0)];
    let base = row_base(body, &f.input, row, &f.cols, spec.dtype);
    let staged = is_half(spec.dtype);
    let obase = (!staged).then(|| row_base(body, &f.out, row, &f.cols, spec.dtype));
    let col0 = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {col0}, {}", f.tid));
    // This thread's first element of the input and output rows, where
    // it accesses them directly.
    let direct = obase.map(|obase| {
        (
            elem_addr(body, &base, &col0, spec.dtype),
            elem_addr(body, &obase, &col0, spec.dtype),
        )
    });
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
    let output = if let Some((addr, oaddr)) = direct {
        each(body, "loaded", &mut |body, j| {
            let x = load(
                body,
                spec.dtype,
                &format!("{addr}+{}", j * step * size),
                true,
            );
            body.op(format!("mov.{} {}, {x}", mov_ty(acc), xs[j]));
        });
        Output::Direct(oaddr)
    } else {
        // A 16-bit row comes in through shared memory: each thread then
        // reads its slots there, consecutive threads consecutive elements
        // (no bank conflicts). All slots are read, those past the row from
        // the buffer's stale bytes, which no pass uses.
        let input = Staged::plan(body, f, &base);
        input.copy(body, f, &base, true);
        body.op("bar.sync 0");
        let mine = input.thread_first(body, f);
        let raws: Vec<String> = (0..SLOTS)
            .map(|j| {
                load_half_bits_from(
                    body,
                    spec.dtype,
                    "ld.shared",
                    &format!("{mine}+{}", j * step * size),
                )
            })
            .collect();
        for (raw, x) in raws.iter().zip(&xs) {
            let w = widen_half(body, spec.dtype, raw);
            body.op(format!("mov.{} {x}, {w}", mov_ty(acc)));
        }
        Output::Staged
    };
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
        if spec.scale.is_some() {
            // The slot keeps exp(x - m), which the output needs, not x.
            body.op(format!("mov.{} {}, {}", mov_ty(acc), xs[j], e[0]));
        }
    });
    block_reduce(body, f, &spec.sum, &state, &nzero);
    let s = emit_program(body, &spec.row_log, &[state[0].0.clone()]);
    if per_row(spec) {
        store_row_value(body, f, row, spec.dtype, |body| {
            emit_program(body, &spec.finish, &[m.clone(), s[0].clone()]).remove(0)
        });
        return;
    }
    let sv = body.reg_ty(acc);
    body.op(format!("mov.{} {sv}, {}", mov_ty(acc), s[0]));
    broadcast(body, f, &sv, acc);
    // Softmax divides the kept exponential; log-softmax finishes from x.
    let output_of = |body: &mut Body, j: usize| match &spec.scale {
        Some(scale) => emit_program(body, scale, &[xs[j].clone(), sv.clone()]),
        None => emit_program(body, &spec.finish, &[xs[j].clone(), m.clone(), sv.clone()]),
    };
    match output {
        // The outputs go out through shared memory too: every thread read
        // its inputs there before the barriers of the reductions, so the
        // buffer is free.
        Output::Staged => {
            // Computed here, not kept from the start: registers are
            // scarcest while the slots are live.
            let obase = row_base(body, &f.out, row, &f.cols, spec.dtype);
            let output = Staged::plan(body, f, &obase);
            let mine = output.thread_first(body, f);
            each(body, "stored", &mut |body, j| {
                let y = output_of(body, j);
                let bits = narrow_half(body, spec.dtype, &y[0]);
                body.op(format!(
                    "st.shared.{} [{mine}+{}], {bits}",
                    half_bits_ty(spec.dtype),
                    j * step * size
                ));
            });
            body.op("bar.sync 0");
            output.copy(body, f, &obase, false);
        }
        Output::Direct(oaddr) => each(body, "stored", &mut |body, j| {
            let y = output_of(body, j);
            store(
                body,
                spec.dtype,
                &format!("{oaddr}+{}", j * step * size),
                &y[0],
            );
        }),
    }
}

/// Where the register path writes a row's outputs.
enum Output {
    /// Each thread stores its slots from this thread's address in the
    /// output row.
    Direct(String),
    /// Through the shared `stage`, see [`Staged`].
    Staged,
}

/// True for an op with one value per row (its dim removed), which the
/// first thread stores after the sum; the others write every element.
fn per_row(spec: &RowSpec) -> bool {
    spec.op.shape() == RowShape::Reduce
}

fn is_half(dtype: DTypeKind) -> bool {
    matches!(dtype, DTypeKind::F16 | DTypeKind::BF16)
}

/// A 16-bit row of at most [`SOFTMAX_REGISTER_COLS`] elements in the
/// `stage` buffer, moved to or from global memory with 16-byte accesses
/// whatever the row's alignment: element `c` of the row at global address
/// `g` lies at `stage + (g % 16) + 2 c`, so the row's 16-byte-aligned
/// global chunks are 16-byte-aligned in shared memory too. The `lead`
/// elements before the row's first 16-byte boundary and the `rest` after
/// its last whole chunk (fewer than 8 each) move one by one. All values
/// are 32-bit: the row fits in the buffer. The barrier at the end of each
/// row of `row_loop` keeps the next row's copy in from overwriting the
/// buffer before this row's copy out has read it.
struct Staged {
    /// Shared address of element 0.
    first: String,
    /// Elements before the first chunk.
    lead: String,
    /// Whole 16-byte chunks after them.
    chunks: String,
    /// The element after the last chunk.
    rest_at: String,
    /// Elements from there to the end of the row.
    rest: String,
}

impl Staged {
    /// The placement of the row at global `row_base`.
    fn plan(body: &mut Body, f: &Frame, row_base: &str) -> Staged {
        let stage = body.reg(Class::B32);
        body.op(format!("mov.u32 {stage}, stage"));
        let cols = body.reg(Class::B32);
        body.op(format!("cvt.u32.u64 {cols}, {}", f.cols));
        let low = body.reg(Class::B64);
        body.op(format!("and.b64 {low}, {row_base}, 15"));
        let shift = body.reg(Class::B32);
        body.op(format!("cvt.u32.u64 {shift}, {low}"));
        let first = body.reg(Class::B32);
        body.op(format!("add.u32 {first}, {stage}, {shift}"));
        let lead = body.reg(Class::B32);
        body.op(format!("sub.u32 {lead}, 16, {shift}"));
        body.op(format!("and.b32 {lead}, {lead}, 15"));
        body.op(format!("shr.u32 {lead}, {lead}, 1"));
        body.op(format!("min.u32 {lead}, {lead}, {cols}"));
        let chunks = body.reg(Class::B32);
        body.op(format!("sub.u32 {chunks}, {cols}, {lead}"));
        body.op(format!("shr.u32 {chunks}, {chunks}, 3"));
        let rest_at = body.reg(Class::B32);
        body.op(format!("shl.b32 {rest_at}, {chunks}, 3"));
        body.op(format!("add.u32 {rest_at}, {rest_at}, {lead}"));
        let rest = body.reg(Class::B32);
        body.op(format!("sub.u32 {rest}, {cols}, {rest_at}"));
        Staged {
            first,
            lead,
            chunks,
            rest_at,
            rest,
        }
    }

    /// Shared address of this thread's first slot, element `tid`.
    fn thread_first(&self, body: &mut Body, f: &Frame) -> String {
        let a = body.reg(Class::B32);
        body.op(format!("mad.lo.u32 {a}, {}, 2, {}", f.tid, self.first));
        a
    }

    /// Copies the row between global `row_base` and the buffer (into the
    /// buffer when `inward`). Thread `tid` moves chunks `tid + k BLOCK`,
    /// element `tid` of the lead and element `tid` of the rest; all loads
    /// are issued before the first store. The caller places the barriers.
    fn copy(&self, body: &mut Body, f: &Frame, row_base: &str, inward: bool) {
        let (ld, st) = if inward {
            ("ld.global.nc", "st.shared")
        } else {
            ("ld.shared", "st.global")
        };
        let at = |shared: String, global: String| {
            if inward {
                (global, shared)
            } else {
                (shared, global)
            }
        };
        let mut moves: Vec<Move> = Vec::new();
        // One element of the lead.
        let p = body.reg(Class::Pred);
        body.op(format!("setp.lt.u32 {p}, {}, {}", f.tid, self.lead));
        let g = body.reg(Class::B64);
        body.op(format!("mad.wide.u32 {g}, {}, 2, {row_base}", f.tid));
        let s = self.thread_first(body, f);
        let (from, to) = at(s, g);
        moves.push(Move {
            guard: p,
            from,
            to,
            vector: false,
        });
        // The chunks, from the first 16-byte boundary on.
        let g = body.reg(Class::B64);
        body.op(format!("mad.wide.u32 {g}, {}, 2, {row_base}", self.lead));
        body.op(format!("mad.wide.u32 {g}, {}, 16, {g}", f.tid));
        let s = body.reg(Class::B32);
        body.op(format!("mad.lo.u32 {s}, {}, 2, {}", self.lead, self.first));
        body.op(format!("mad.lo.u32 {s}, {}, 16, {s}", f.tid));
        let step = 16 * crate::abi::BLOCK as usize;
        for k in 0..STAGE_CHUNKS {
            let chunk = body.reg(Class::B32);
            body.op(format!(
                "add.u32 {chunk}, {}, {}",
                f.tid,
                k * crate::abi::BLOCK as usize
            ));
            let p = body.reg(Class::Pred);
            body.op(format!("setp.lt.u32 {p}, {chunk}, {}", self.chunks));
            let (from, to) = at(format!("{s}+{}", k * step), format!("{g}+{}", k * step));
            moves.push(Move {
                guard: p,
                from,
                to,
                vector: true,
            });
        }
        // One element of the rest.
        let p = body.reg(Class::Pred);
        body.op(format!("setp.lt.u32 {p}, {}, {}", f.tid, self.rest));
        let c = body.reg(Class::B32);
        body.op(format!("add.u32 {c}, {}, {}", self.rest_at, f.tid));
        let g = body.reg(Class::B64);
        body.op(format!("mad.wide.u32 {g}, {c}, 2, {row_base}"));
        let s = body.reg(Class::B32);
        body.op(format!("mad.lo.u32 {s}, {c}, 2, {}", self.first));
        let (from, to) = at(s, g);
        moves.push(Move {
            guard: p,
            from,
            to,
            vector: false,
        });
        let held: Vec<Vec<String>> = moves
            .iter()
            .map(
                |Move {
                     guard: p,
                     from,
                     vector,
                     ..
                 }| {
                    if *vector {
                        let w: Vec<String> = (0..4).map(|_| body.reg(Class::B32)).collect();
                        body.op(format!("@{p} {ld}.v4.u32 {{{}}}, [{from}]", w.join(", ")));
                        w
                    } else {
                        let w = body.reg(Class::B32);
                        body.op(format!("@{p} {ld}.u16 {w}, [{from}]"));
                        vec![w]
                    }
                },
            )
            .collect();
        for (
            Move {
                guard: p,
                to,
                vector,
                ..
            },
            w,
        ) in moves.iter().zip(&held)
        {
            if *vector {
                body.op(format!("@{p} {st}.v4.u32 [{to}], {{{}}}", w.join(", ")));
            } else {
                body.op(format!("@{p} {st}.u16 [{to}], {}", w[0]));
            }
        }
    }
}

/// One guarded copy of 16 bytes (`vector`) or 2 between addresses.
struct Move {
    guard: String,
    from: String,
    to: String,
    vector: bool,
}

/// Softmax of one row of any length: max, sum of exponentials and
/// outputs each read the row from global memory.
fn softmax_three_passes(body: &mut Body, f: &Frame, spec: &RowSpec, row: &str) {
    let acc = spec.acc;
    let state = vec![(body.reg_ty(acc), acc)];
    let ninf = [float_bits(acc, f64::NEG_INFINITY)];
    let nzero = [float_bits(acc, -0.0)];
    let base = row_base(body, &f.input, row, &f.cols, spec.dtype);
    let obase = (!per_row(spec)).then(|| row_base(body, &f.out, row, &f.cols, spec.dtype));
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
    let Some(obase) = obase else {
        store_row_value(body, f, row, spec.dtype, |body| {
            emit_program(body, &spec.finish, &[m.clone(), s[0].clone()]).remove(0)
        });
        return;
    };
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
