//! `cross_entropy` and its backward: one block of [`XENT_THREADS`] per
//! row (grid-stride over rows), the row's max, then the sum of `exp(x - max)` and of `x`, each a
//! per-thread fold and a block reduction (the log-softmax row kernel's
//! pieces, [`RowSpec`]), so `lse = max + log(sum)` as PyTorch's
//! `log_softmax` computes it, in f32 (f64 for f64).
//!
//! The forward's first thread then reads the row's target and stores the
//! row's loss as `f64` in `out[row]` (0 for an ignored row), counting the
//! rows not ignored in `flag[2]`; the backward writes
//! `(exp(x - lse) - s / C - (1 - s) * [c == t]) * g` over the row, `g`
//! being `grad[row * gstride] * scale`, and zeros on an ignored row. A
//! target outside `0..C` that is not `ignore_index` is never read
//! through: `flag[0]` is set to 1 and `flag[1]` to the target, as the
//! gather kernel does.
//!
//! The backward reads the logits from global memory once when the host
//! sets `cache`: the block copies its row into dynamic shared memory
//! (`NAME_row`, `cols * size` bytes, 16-byte chunks, several loads in
//! flight per thread) while it takes the row's max, and the sum pass and
//! the gradient pass read that copy. Each thread still folds the same
//! columns in the same order as the uncached passes, so both give the
//! same bits. The host sets `cache` only where the row fits the block's
//! shared memory and its bytes are a multiple of 16 at 16-byte aligned
//! addresses in both the logits and the output.
//!
//! The sum and gradient passes give each thread whole 16-byte chunks of
//! the row (chunk `tid`, `tid + XENT_THREADS`, ..., their elements in
//! order): from the shared copy one vector load a chunk and, for the
//! gradient, one vector store; uncached, the same elements one by one.
//! Rows as long as GPT-2's vocabulary (98 KiB in bf16) leave room for two
//! rows an SM, so the block is large (1024 threads) for enough loads in
//! flight, and each thread's share of the row is six or seven chunks.
//!
//! The fused entry (`NAME_fused`, for a loss whose gradient is wanted at
//! once, as in a training step) is the backward with the forward's loss
//! stored by the first thread between the row's statistics and the
//! gradient pass, and `g = scale`: one read of the logits gives the loss
//! and the gradient, which may be written in place of the logits.
//!
//! The exponentials of an `f32` (and 16-bit) row are `ex2.approx.ftz` of
//! `(x - m) * log2(e)` ([`exp_shift`]), as Triton's and PyTorch's fast
//! softmax paths take them, not the runtime's correctly rounded
//! polynomial (about 25 instructions, twice a logit, which bounded the
//! fused pass by issue): they are only summed or written as
//! probabilities, where the relative error (`ex2.approx`'s 2^-22, with
//! the rounding of `(x - m) * log2(e)`, at most 2^-24 times its magnitude,
//! which is below 150 wherever the result is not 0) stays under 1e-5. A
//! result below 2^-126 is flushed to 0 (the gradient's smallest
//! probabilities), -inf gives 0 and NaN stays NaN, as in the exact form.
//! `f64` rows keep the exact exponential. All three entries share it, so
//! the fused entry still gives the forward's and the backward's bits.
//!
//! Parameters: `out, in, rows, cols, target, tstride, flag, ignore,
//! smoothing` (the last an `f64`); for the backward also `grad,
//! gstride, scale` (an `f64`) and `cache`; for the fused entry `loss`
//! (the `f64` losses, one per row), `scale` and `cache`, `out` being the
//! gradient.

use super::body::{Body, Class};
use super::inst::emit_program;
use super::inst::round_bf16;
use super::memory::{load, store, store_vector, widen_half};
use super::rows::{
    block_reduce, broadcast, col_loop, combine, elem_addr, frame_of, mov_ty, row_base, row_loop,
    set_identity, Frame,
};
use crate::prim::Ty;
use crate::reduction::{float_bits, RowSpec};
use tensorfn_core::DTypeKind;

/// Threads of a cross-entropy block (a row each): the runtime launches
/// the entries with this block size.
///
/// ```
/// use tensorfn_kernels::builtin::XENT_THREADS;
/// assert_eq!(XENT_THREADS % 32, 0); // whole warps
/// assert!(XENT_THREADS <= 1024);
/// ```
pub const XENT_THREADS: u32 = 1024;

/// The module's three entries.
#[derive(Clone, Copy, PartialEq)]
enum Entry {
    /// The per-row losses.
    Forward,
    /// The gradient, given the gradient of the result.
    Backward,
    /// The per-row losses and the gradient for a gradient of 1 on the
    /// result, in one pass, possibly in place of the logits.
    Fused,
}

fn params(kind: Entry) -> String {
    let mut p = vec![
        ".param .u64 p_out",
        ".param .u64 p_in",
        ".param .u64 p_rows",
        ".param .u64 p_cols",
        ".param .u64 p_tgt",
        ".param .u64 p_tstride",
        ".param .u64 p_flag",
        ".param .u64 p_ignore",
        ".param .f64 p_smooth",
    ];
    match kind {
        Entry::Forward => {}
        Entry::Backward => p.extend([
            ".param .u64 p_grad",
            ".param .u64 p_gstride",
            ".param .f64 p_scale",
            ".param .u64 p_cache",
        ]),
        Entry::Fused => p.extend([
            ".param .u64 p_loss",
            ".param .f64 p_scale",
            ".param .u64 p_cache",
        ]),
    }
    format!("(\n\t{}\n)", p.join(",\n\t"))
}

/// The `.f32`/`.f64` suffix of `acc`.
fn fty(acc: Ty) -> &'static str {
    if acc == Ty::F64 {
        "f64"
    } else {
        "f32"
    }
}

/// An `f64` parameter in `acc`.
fn f64_param(body: &mut Body, name: &str, acc: Ty) -> String {
    let d = body.reg(Class::F64);
    body.op(format!("ld.param.f64 {d}, [{name}]"));
    if acc == Ty::F64 {
        return d;
    }
    let r = body.reg_ty(acc);
    body.op(format!("cvt.rn.f32.f64 {r}, {d}"));
    r
}

fn u64_param(body: &mut Body, name: &str, global: bool) -> String {
    let r = body.reg(Class::B64);
    body.op(format!("ld.param.u64 {r}, [{name}]"));
    if global {
        body.op(format!("cvta.to.global.u64 {r}, {r}"));
    }
    r
}

/// The target of `row` as a signed 64-bit value.
fn target(body: &mut Body, tgt: &str, tstride: &str, row: &str, index: DTypeKind) -> String {
    let off = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {off}, {row}, {tstride}"));
    let addr = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {addr}, {off}, {}, {tgt}",
        index.size_bytes()
    ));
    let k = body.reg(Class::B64);
    if index == DTypeKind::I32 {
        let k32 = body.reg(Class::B32);
        body.op(format!("ld.global.nc.u32 {k32}, [{addr}]"));
        body.op(format!("cvt.s64.s32 {k}, {k32}"));
    } else {
        body.op(format!("ld.global.nc.u64 {k}, [{addr}]"));
    }
    k
}

/// The backward's copy of its row in shared memory: `cached` is true
/// when the host asked for it, `srow` is the copy's shared address.
struct RowCache {
    cached: String,
    srow: String,
}

/// Loaded elements per thread in flight in the copy into shared memory.
const COPY_UNROLL: u32 = 4;

/// Element `col` of the row at `base` (global) or of its shared copy.
fn load_x(
    body: &mut Body,
    dtype: DTypeKind,
    base: &str,
    col: &str,
    cache: Option<&RowCache>,
) -> String {
    let ga = elem_addr(body, base, col, dtype);
    let Some(c) = cache else {
        return load(body, dtype, &ga, true);
    };
    let sa = elem_addr(body, &c.srow, col, dtype);
    let (class, ty) = match dtype {
        DTypeKind::F16 => (Class::B16, "b16"),
        DTypeKind::BF16 => (Class::B32, "u16"),
        DTypeKind::F32 => (Class::F32, "f32"),
        _ => (Class::F64, "f64"),
    };
    let r = body.reg(class);
    body.op(format!("@{} ld.shared.{ty} {r}, [{sa}]", c.cached));
    body.op(format!("@!{} ld.global.nc.{ty} {r}, [{ga}]", c.cached));
    match dtype {
        DTypeKind::F16 | DTypeKind::BF16 => widen_half(body, dtype, &r),
        _ => r,
    }
}

/// The bits of four 32-bit words of `dtype` elements that are all `-inf`
/// (the max's identity, for chunks past the row's end).
fn neg_inf_words(dtype: DTypeKind) -> [u32; 4] {
    match dtype {
        DTypeKind::F16 => [0xFC00_FC00; 4],
        DTypeKind::BF16 => [0xFF80_FF80; 4],
        DTypeKind::F32 => [0xFF80_0000; 4],
        _ => [0, 0xFFF0_0000, 0, 0xFFF0_0000],
    }
}

/// The `acc` values of the elements packed in `words` (16 bytes).
fn unpack(body: &mut Body, dtype: DTypeKind, words: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    match dtype {
        DTypeKind::F16 => {
            for w in words {
                let (lo, hi) = (body.reg(Class::B16), body.reg(Class::B16));
                body.op(format!("mov.b32 {{{lo}, {hi}}}, {w}"));
                for h in [lo, hi] {
                    let f = body.reg(Class::F32);
                    body.op(format!("cvt.f32.f16 {f}, {h}"));
                    out.push(f);
                }
            }
        }
        DTypeKind::BF16 => {
            for w in words {
                let (lo, hi) = (body.reg(Class::B32), body.reg(Class::B32));
                body.op(format!("shl.b32 {lo}, {w}, 16"));
                body.op(format!("and.b32 {hi}, {w}, -65536"));
                for b in [lo, hi] {
                    let f = body.reg(Class::F32);
                    body.op(format!("mov.b32 {f}, {b}"));
                    out.push(f);
                }
            }
        }
        DTypeKind::F32 => {
            for w in words {
                let f = body.reg(Class::F32);
                body.op(format!("mov.b32 {f}, {w}"));
                out.push(f);
            }
        }
        _ => {
            for pair in words.chunks(2) {
                let d = body.reg(Class::F64);
                body.op(format!("mov.b64 {d}, {{{}, {}}}", pair[0], pair[1]));
                out.push(d);
            }
        }
    }
    out
}

/// Copies the row at `base` into shared memory at `srow` in 16-byte
/// chunks (`COPY_UNROLL` loads in flight per thread), folding every
/// element into the max `state`.
fn copy_row_max(
    body: &mut Body,
    f: &Frame,
    spec: &RowSpec,
    base: &str,
    srow: &str,
    state: &[(String, Ty)],
) {
    let dtype = spec.dtype;
    let chunks = body.reg(Class::B64);
    body.op(format!(
        "mul.lo.u64 {chunks}, {}, {}",
        f.cols,
        dtype.size_bytes()
    ));
    body.op(format!("shr.u64 {chunks}, {chunks}, 4"));
    let c = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {c}, %tid.x"));
    let lp = body.label("xent_copy");
    let end = body.label("xent_copy_end");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {c}, {chunks}"));
    body.op(format!("@{done} bra {end}"));
    let identity = neg_inf_words(dtype);
    let mut loaded = Vec::new();
    for u in 0..COPY_UNROLL {
        let cu = body.reg(Class::B64);
        body.op(format!("add.u64 {cu}, {c}, {}", u * f.threads));
        let ok = body.reg(Class::Pred);
        body.op(format!("setp.lt.u64 {ok}, {cu}, {chunks}"));
        let off = body.reg(Class::B64);
        body.op(format!("shl.b64 {off}, {cu}, 4"));
        let (ga, sa) = (body.reg(Class::B64), body.reg(Class::B64));
        body.op(format!("add.u64 {ga}, {base}, {off}"));
        body.op(format!("add.u64 {sa}, {srow}, {off}"));
        let words: Vec<String> = identity
            .iter()
            .map(|&bits| {
                let w = body.reg(Class::B32);
                body.op(format!("mov.b32 {w}, {bits}"));
                w
            })
            .collect();
        body.op(format!(
            "@{ok} ld.global.nc.v4.u32 {{{}}}, [{ga}]",
            words.join(", ")
        ));
        loaded.push((ok, sa, words));
    }
    for (ok, sa, words) in &loaded {
        body.op(format!(
            "@{ok} st.shared.v4.u32 [{sa}], {{{}}}",
            words.join(", ")
        ));
    }
    for (_, _, words) in &loaded {
        for x in unpack(body, dtype, words) {
            combine(body, &spec.max, state, &[x]);
        }
    }
    body.op(format!("add.u64 {c}, {c}, {}", COPY_UNROLL * f.threads));
    body.op(format!("bra.uni {lp}"));
    body.place(&end);
}

/// The row's `lse` (all threads) and, in the block's first thread, the
/// sum of its logits; with `cache`, the row is copied into shared memory
/// first when asked and the sums read that copy.
fn row_stats(
    body: &mut Body,
    f: &Frame,
    spec: &RowSpec,
    base: &str,
    cache: Option<&RowCache>,
) -> (String, String) {
    let acc = spec.acc;
    let dtype = spec.dtype;
    let ninf = [float_bits(acc, f64::NEG_INFINITY)];
    let nzero = [float_bits(acc, -0.0)];
    // max
    let state = vec![(body.reg_ty(acc), acc)];
    set_identity(body, &state, &ninf);
    let max_done = body.label("xent_max_done");
    if let Some(c) = cache {
        let global = body.label("xent_max_global");
        body.op(format!("@!{} bra.uni {global}", c.cached));
        copy_row_max(body, f, spec, base, &c.srow, &state);
        body.op(format!("bra.uni {max_done}"));
        body.place(&global);
    }
    col_loop(body, f, |body, col| {
        let a = elem_addr(body, base, col, dtype);
        let x = load(body, dtype, &a, true);
        combine(body, &spec.max, &state, &[x]);
    });
    body.place(&max_done);
    block_reduce(body, f, &spec.max, &state, &ninf);
    let m = body.reg_ty(acc);
    body.op(format!("mov.{} {m}, {}", mov_ty(acc), state[0].0));
    broadcast(body, f, &m, acc);
    body.op("bar.sync 0");
    // sums of exp(x - max) and of x
    let s = vec![(body.reg_ty(acc), acc)];
    let sx = vec![(body.reg_ty(acc), acc)];
    set_identity(body, &s, &nzero);
    set_identity(body, &sx, &nzero);
    chunk_pass(body, f, dtype, base, cache, None, &mut |body, x, _| {
        let e = exp_shift(body, spec, x, &m);
        combine(body, &spec.sum, &s, &[e]);
        combine(body, &spec.sum, &sx, &[x.to_string()]);
        None
    });
    block_reduce(body, f, &spec.sum, &s, &nzero);
    body.op("bar.sync 0");
    block_reduce(body, f, &spec.sum, &sx, &nzero);
    let ls = emit_program(body, &spec.row_log, &[s[0].0.clone()]);
    let lse = body.reg_ty(acc);
    body.op(format!("add.rn.{} {lse}, {m}, {}", fty(acc), ls[0]));
    broadcast(body, f, &lse, acc);
    (lse, sx[0].0.clone())
}

/// A visit of one element of a [`chunk_pass`]: `(x, col)` to the value
/// to store at `col` of the output row, if the pass writes one.
type Visit<'a> = dyn FnMut(&mut Body, &str, &str) -> Option<String> + 'a;

/// Visits this thread's elements of the row at `base` in order: the
/// 16-byte chunks `tid`, `tid + threads`, ..., each chunk's elements in
/// order, and stores what `visit` returns at the same column of the row
/// at `out`. With the shared copy (`cache`, set), a chunk is one vector
/// load there and one vector store to `out`; without it, the same
/// elements are read from `base` one by one up to the row's end.
fn chunk_pass(
    body: &mut Body,
    f: &Frame,
    dtype: DTypeKind,
    base: &str,
    cache: Option<&RowCache>,
    out: Option<&str>,
    visit: &mut Visit<'_>,
) {
    let per = 16 / dtype.size_bytes();
    let chunk = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {chunk}, {}", f.tid));
    let lp = body.label("xent_chunk");
    let end = body.label("xent_chunk_end");
    let next = body.label("xent_chunk_next");
    body.place(&lp);
    let col0 = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {col0}, {chunk}, {per}"));
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {col0}, {}", f.cols));
    body.op(format!("@{done} bra {end}"));
    let cols: Vec<String> = (0..per)
        .map(|j| {
            let c = body.reg(Class::B64);
            body.op(format!("add.u64 {c}, {col0}, {j}"));
            c
        })
        .collect();
    if let Some(c) = cache {
        let global = body.label("xent_chunk_global");
        body.op(format!("@!{} bra.uni {global}", c.cached));
        // The whole chunk lies in the row: its bytes are a multiple of 16.
        let sa = elem_addr(body, &c.srow, &col0, dtype);
        let words: Vec<String> = (0..4).map(|_| body.reg(Class::B32)).collect();
        body.op(format!("ld.shared.v4.u32 {{{}}}, [{sa}]", words.join(", ")));
        let xs = unpack(body, dtype, &words);
        let ys: Vec<String> = xs
            .iter()
            .zip(&cols)
            .filter_map(|(x, col)| visit(body, x, col))
            .collect();
        if let Some(out) = out {
            let oa = elem_addr(body, out, &col0, dtype);
            store_vector(body, dtype, &oa, &ys);
        }
        body.op(format!("bra.uni {next}"));
        body.place(&global);
    }
    for col in &cols {
        let inside = body.reg(Class::Pred);
        body.op(format!("setp.lt.u64 {inside}, {col}, {}", f.cols));
        body.op(format!("@!{inside} bra {next}"));
        let a = elem_addr(body, base, col, dtype);
        let x = load(body, dtype, &a, true);
        if let (Some(y), Some(out)) = (visit(body, &x, col), out) {
            let oa = elem_addr(body, out, col, dtype);
            store(body, dtype, &oa, &y);
        }
    }
    body.place(&next);
    body.op(format!("add.u64 {chunk}, {chunk}, {}", f.threads));
    body.op(format!("bra.uni {lp}"));
    body.place(&end);
}

/// `p` (an `acc` value) in the register form of `dtype`: a bf16 is
/// rounded to nearest (the stores keep the top half of its f32); other
/// types' stores round themselves.
fn rounded(body: &mut Body, dtype: DTypeKind, p: &str) -> String {
    if dtype != DTypeKind::BF16 {
        return p.to_string();
    }
    let r = body.reg(Class::F32);
    let last = round_bf16(body, p, &r);
    body.op(last);
    r
}

/// `exp(x - m)` in `spec.acc`: for `f32`, `ex2.approx.ftz` of `(x - m) *
/// log2(e)` (three instructions, see the module's notes on its error);
/// for `f64`, the exact program.
fn exp_shift(body: &mut Body, spec: &RowSpec, x: &str, m: &str) -> String {
    if spec.acc == Ty::F64 {
        return emit_program(body, &spec.exp_shift, &[x.to_string(), m.to_string()]).remove(0);
    }
    let e = body.reg(Class::F32);
    body.op(format!("sub.rn.f32 {e}, {x}, {m}"));
    // log2(e) rounded to f32.
    body.op(format!("mul.rn.f32 {e}, {e}, 0f3FB8AA3B"));
    body.op(format!("ex2.approx.ftz.f32 {e}, {e}"));
    e
}

/// Sets the flag to the bad target `k`.
fn flag_bad(body: &mut Body, flag: &str, k: &str) {
    let one = body.reg(Class::B64);
    body.op(format!("mov.u64 {one}, 1"));
    body.op(format!("st.global.u64 [{flag}], {one}"));
    let old = body.reg(Class::B64);
    body.op(format!("atom.global.exch.b64 {old}, [{flag}+8], {k}"));
}

/// `(ignored, bad)` predicates of the target `k`.
fn classify(body: &mut Body, k: &str, ignore: &str, cols: &str) -> (String, String) {
    let ign = body.reg(Class::Pred);
    body.op(format!("setp.eq.s64 {ign}, {k}, {ignore}"));
    let (neg, big) = (body.reg(Class::Pred), body.reg(Class::Pred));
    body.op(format!("setp.lt.s64 {neg}, {k}, 0"));
    body.op(format!("setp.ge.u64 {big}, {k}, {cols}"));
    body.op(format!("or.pred {big}, {big}, {neg}"));
    let bad = body.reg(Class::Pred);
    body.op(format!("not.pred {ign}, {ign}"));
    body.op(format!("and.pred {bad}, {big}, {ign}"));
    body.op(format!("not.pred {ign}, {ign}"));
    (ign, bad)
}

/// `cols` as a value of `acc`.
fn cols_value(body: &mut Body, cols: &str, acc: Ty) -> String {
    let c = body.reg_ty(acc);
    body.op(format!("cvt.rn.{}.u64 {c}, {cols}", fty(acc)));
    c
}

/// What the row's loss needs: its smoothing and where it goes.
struct LossOut<'a> {
    flag: &'a str,
    /// `smooth != 0`.
    smoothing: &'a str,
    smooth: &'a str,
    /// The `f64` losses, one per row.
    out: &'a str,
}

/// In the block's first thread (the caller branches): the loss of `row`
/// from its `lse`, the sum of its logits `sx` and its target `k`, stored
/// as `f64`; 0 for an ignored row or a bad target (flagged). Counts the
/// rows not ignored in `flag[2]`. `x[k]` is read from `base` (or the
/// row's shared copy).
#[allow(clippy::too_many_arguments)]
fn store_loss(
    body: &mut Body,
    f: &Frame,
    spec: &RowSpec,
    base: &str,
    cache: Option<&RowCache>,
    row: &str,
    (lse, sx): (&str, &str),
    (k, ign, bad): (&str, &str, &str),
    o: &LossOut,
) {
    let acc = spec.acc;
    let ft = fty(acc);
    let loss = body.reg_ty(acc);
    body.op(format!(
        "mov.{ft} {loss}, {}",
        super::inst::immediate(acc, float_bits(acc, 0.0))
    ));
    let store_l = body.label("xent_store");
    body.op(format!("@{ign} bra {store_l}"));
    let ok = body.label("xent_in_range");
    body.op(format!("@!{bad} bra {ok}"));
    flag_bad(body, o.flag, k);
    body.op(format!("bra.uni {store_l}"));
    body.place(&ok);
    let old = body.reg(Class::B64);
    body.op(format!("atom.global.add.u64 {old}, [{}+16], 1", o.flag));
    let xt = load_x(body, spec.dtype, base, k, cache);
    body.op(format!("sub.rn.{ft} {loss}, {lse}, {xt}"));
    body.op(format!("@!{} bra {store_l}", o.smoothing));
    // (1 - s) * nll + s / C * (C * lse - sum(x))
    let c = cols_value(body, &f.cols, acc);
    let smooth_loss = body.reg_ty(acc);
    body.op(format!("mul.rn.{ft} {smooth_loss}, {c}, {lse}"));
    body.op(format!("sub.rn.{ft} {smooth_loss}, {smooth_loss}, {sx}"));
    let spread = body.reg_ty(acc);
    body.op(format!("div.rn.{ft} {spread}, {}, {c}", o.smooth));
    let keep = body.reg_ty(acc);
    body.op(format!(
        "sub.rn.{ft} {keep}, {}, {}",
        super::inst::immediate(acc, float_bits(acc, 1.0)),
        o.smooth
    ));
    body.op(format!("mul.rn.{ft} {loss}, {keep}, {loss}"));
    body.op(format!(
        "mul.rn.{ft} {smooth_loss}, {spread}, {smooth_loss}"
    ));
    body.op(format!("add.rn.{ft} {loss}, {loss}, {smooth_loss}"));
    body.place(&store_l);
    let wide = if acc == Ty::F64 {
        loss
    } else {
        let w = body.reg(Class::F64);
        body.op(format!("cvt.f64.f32 {w}, {loss}"));
        w
    };
    let oaddr = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {oaddr}, {row}, 8, {}", o.out));
    body.op(format!("st.global.f64 [{oaddr}], {wide}"));
}

/// `p_smooth` as `acc`, and whether it is not 0.
fn smoothing(body: &mut Body, acc: Ty) -> (String, String) {
    let smooth = f64_param(body, "p_smooth", acc);
    let on = body.reg(Class::Pred);
    body.op(format!(
        "setp.ne.{} {on}, {smooth}, {}",
        fty(acc),
        super::inst::immediate(acc, float_bits(acc, 0.0))
    ));
    (smooth, on)
}

/// Blocks of an entry with `f32` arithmetic every SM must be able to
/// hold at once: two rows of GPT-2's vocabulary fit its shared memory,
/// and two blocks of [`XENT_THREADS`] leave 32 registers a thread, which
/// these entries need without spilling. `f64` rows need more registers
/// and take one block an SM.
const XENT_BLOCKS_PER_SM: u32 = 2;

/// The launch bounds of an entry over `spec`'s rows.
fn bounds(spec: &RowSpec) -> String {
    let blocks = if spec.acc == Ty::F64 {
        1
    } else {
        XENT_BLOCKS_PER_SM
    };
    format!("\n.maxntid {XENT_THREADS}, 1, 1\n.minnctapersm {blocks}")
}

/// The forward entry `name` over rows of `spec.dtype` with targets of
/// `index` (`I32` or `I64`).
pub(crate) fn forward_entry(name: &str, spec: &RowSpec, index: DTypeKind) -> String {
    let mut body = Body::new();
    let f = frame_of(&mut body, XENT_THREADS);
    let tgt = u64_param(&mut body, "p_tgt", true);
    let tstride = u64_param(&mut body, "p_tstride", false);
    let flag = u64_param(&mut body, "p_flag", true);
    let ignore = u64_param(&mut body, "p_ignore", false);
    let (smooth, on) = smoothing(&mut body, spec.acc);
    let o = LossOut {
        flag: &flag,
        smoothing: &on,
        smooth: &smooth,
        out: &f.out,
    };
    row_loop(&mut body, &f, |body, row| {
        let base = row_base(body, &f.input, row, &f.cols, spec.dtype);
        let (lse, sx) = row_stats(body, &f, spec, &base, None);
        let first = body.reg(Class::Pred);
        body.op(format!("and.pred {first}, {}, {}", f.is_lane0, f.is_warp0));
        let skip = body.label("xent_not_first");
        body.op(format!("@!{first} bra {skip}"));
        let k = target(body, &tgt, &tstride, row, index);
        let (ign, bad) = classify(body, &k, &ignore, &f.cols);
        store_loss(
            body,
            &f,
            spec,
            &base,
            None,
            row,
            (&lse, &sx),
            (&k, &ign, &bad),
            &o,
        );
        body.place(&skip);
    });
    format!(
        ".visible .entry {name}{}{}\n{{\n{}}}\n",
        params(Entry::Forward),
        bounds(spec),
        body.finish()
    )
}

/// The backward entry `name` over rows of `spec.dtype` with targets of
/// `index`.
pub(crate) fn backward_entry(name: &str, spec: &RowSpec, index: DTypeKind) -> String {
    grad_entry(name, spec, index, Entry::Backward)
}

/// The fused entry `name` over rows of `spec.dtype` with targets of
/// `index`: the forward's per-row losses and count, and the backward's
/// gradient for a gradient of 1 on the result (times `scale`), from one
/// read of the logits. `out` may be `in`: every element is read before
/// it is written, by the thread that writes it (the target's logit by
/// the first thread, before a barrier), and no thread reads an element
/// after it is written, so the read-only loads stay valid.
pub(crate) fn fused_entry(name: &str, spec: &RowSpec, index: DTypeKind) -> String {
    grad_entry(name, spec, index, Entry::Fused)
}

fn grad_entry(name: &str, spec: &RowSpec, index: DTypeKind, kind: Entry) -> String {
    let fused = kind == Entry::Fused;
    let mut body = Body::new();
    let f = frame_of(&mut body, XENT_THREADS);
    let acc = spec.acc;
    let ft = fty(acc);
    let dtype = spec.dtype;
    let tgt = u64_param(&mut body, "p_tgt", true);
    let tstride = u64_param(&mut body, "p_tstride", false);
    let flag = u64_param(&mut body, "p_flag", true);
    let ignore = u64_param(&mut body, "p_ignore", false);
    let (smooth, on) = smoothing(&mut body, acc);
    // The backward's gradient of each row's loss, or the fused entry's
    // losses.
    let (grad, loss) = if fused {
        (None, Some(u64_param(&mut body, "p_loss", true)))
    } else {
        let g = u64_param(&mut body, "p_grad", true);
        (Some((g, u64_param(&mut body, "p_gstride", false))), None)
    };
    let scale = f64_param(&mut body, "p_scale", acc);
    let cache_flag = u64_param(&mut body, "p_cache", false);
    let cached = body.reg(Class::Pred);
    body.op(format!("setp.ne.u64 {cached}, {cache_flag}, 0"));
    let srow = body.reg(Class::B64);
    body.op(format!("mov.u64 {srow}, {name}_row"));
    let cache = RowCache { cached, srow };
    let c = cols_value(&mut body, &f.cols, acc);
    let spread = body.reg_ty(acc);
    body.op(format!("div.rn.{ft} {spread}, {smooth}, {c}"));
    let keep = body.reg_ty(acc);
    body.op(format!(
        "sub.rn.{ft} {keep}, {}, {smooth}",
        super::inst::immediate(acc, float_bits(acc, 1.0))
    ));
    let zero = super::inst::immediate(acc, float_bits(acc, 0.0));
    row_loop(&mut body, &f, |body, row| {
        let base = row_base(body, &f.input, row, &f.cols, dtype);
        let obase = row_base(body, &f.out, row, &f.cols, dtype);
        let (lse, sx) = row_stats(body, &f, spec, &base, Some(&cache));
        // Every thread reads the target (one address, cached).
        let k = target(body, &tgt, &tstride, row, index);
        let (ign, bad) = classify(body, &k, &ignore, &f.cols);
        let first = body.reg(Class::Pred);
        body.op(format!("and.pred {first}, {}, {}", f.is_lane0, f.is_warp0));
        let gs = body.reg_ty(acc);
        if let Some(out) = &loss {
            // The loss (which flags a bad target), read before any
            // thread overwrites the row.
            let skip = body.label("xent_not_first");
            body.op(format!("@!{first} bra {skip}"));
            let o = LossOut {
                flag: &flag,
                smoothing: &on,
                smooth: &smooth,
                out,
            };
            store_loss(
                body,
                &f,
                spec,
                &base,
                Some(&cache),
                row,
                (&lse, &sx),
                (&k, &ign, &bad),
                &o,
            );
            body.place(&skip);
            body.op("bar.sync 0");
            body.op(format!("mov.{ft} {gs}, {scale}"));
        }
        if let Some((grad, gstride)) = &grad {
            body.op(format!("and.pred {first}, {first}, {bad}"));
            let flagged = body.label("xent_flagged");
            body.op(format!("@!{first} bra {flagged}"));
            flag_bad(body, &flag, &k);
            body.place(&flagged);
            // g = grad[row * gstride] * scale.
            let gaddr = body.reg(Class::B64);
            body.op(format!("mul.lo.u64 {gaddr}, {row}, {gstride}"));
            body.op(format!(
                "mad.lo.u64 {gaddr}, {gaddr}, {}, {grad}",
                dtype.size_bytes()
            ));
            let g = load(body, dtype, &gaddr, true);
            body.op(format!("mul.rn.{ft} {gs}, {g}, {scale}"));
        }
        // 0 on a row left out.
        let off = body.reg(Class::Pred);
        body.op(format!("or.pred {off}, {ign}, {bad}"));
        let gradient = &mut |body: &mut Body, x: &str, col: &str| {
            let e = exp_shift(body, spec, x, &lse);
            let p = body.reg_ty(acc);
            body.op(format!("sub.rn.{ft} {p}, {e}, {spread}"));
            let hit = body.reg(Class::Pred);
            body.op(format!("setp.eq.u64 {hit}, {col}, {k}"));
            body.op(format!("@{hit} sub.rn.{ft} {p}, {p}, {keep}"));
            body.op(format!("mul.rn.{ft} {p}, {p}, {gs}"));
            body.op(format!("@{off} mov.{ft} {p}, {zero}"));
            Some(rounded(body, dtype, &p))
        };
        chunk_pass(body, &f, dtype, &base, Some(&cache), Some(&obase), gradient);
    });
    format!(
        ".extern .shared .align 16 .b8 {name}_row[];\n\n.visible .entry {name}{}{}\n{{\n{}}}\n",
        params(kind),
        bounds(spec),
        body.finish()
    )
}
