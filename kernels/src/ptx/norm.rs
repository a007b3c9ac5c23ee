//! The pieces of the row strategies of [`crate::norm`] (a row held in
//! registers through [`Accesses`], loaded, widened and stored 16 bytes
//! or one element at a time; the threads' partial results combined by
//! [`reduce_threads`]), which the row kernels' entries
//! ([`super::rowkernel`], the catalogue's `layer_norm` and `rms_norm`
//! among them) are built from, and the normalisations' backward entries.

use super::body::{Body, Class};
use super::inst::round_bf16;
use super::memory::{load, store};
use crate::abi::BLOCK;
use crate::norm::{self, NormEntry, WARPS};
use crate::ops::NormOp;
use tensorfn_core::DTypeKind;

mod backward_rows;
mod backward_warp;

/// Bytes of shared memory per statistic: one value per warp.
pub(super) const REGION: usize = WARPS * 8;

/// What every entry starts from.
struct Gen {
    op: NormOp,
    dtype: DTypeKind,
    /// Statistics in f64 (for f64), else f32.
    wide: bool,
    out: String,
    input: String,
    w: String,
    b: String,
    rows: String,
    cols: String,
    eps: String,
    n: String,
    tid: String,
    lane: String,
    warp: String,
    smem: Option<String>,
}

impl Gen {
    /// The PTX type of the statistics.
    fn a(&self) -> &'static str {
        if self.wide {
            "f64"
        } else {
            "f32"
        }
    }

    fn acc(&self, body: &mut Body) -> String {
        body.reg(if self.wide { Class::F64 } else { Class::F32 })
    }

    fn zero(&self) -> &'static str {
        if self.wide {
            "0d0000000000000000"
        } else {
            "0f00000000"
        }
    }

    fn one(&self) -> &'static str {
        if self.wide {
            "0d3FF0000000000000"
        } else {
            "0f3F800000"
        }
    }

    /// The entry's parameters, with the fourth pointer (`b`) read from
    /// parameter `fourth`: the backward entries take the output's
    /// gradient there.
    fn with_fourth(
        body: &mut Body,
        op: NormOp,
        dtype: DTypeKind,
        shared: bool,
        fourth: &str,
    ) -> Gen {
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
        let w = param(body, "p_w", true);
        let b = param(body, fourth, true);
        let rows = param(body, "p_rows", false);
        let cols = param(body, "p_cols", false);
        let wide = dtype == DTypeKind::F64;
        let a = if wide { "f64" } else { "f32" };
        let class = if wide { Class::F64 } else { Class::F32 };
        let e64 = body.reg(Class::F64);
        body.op(format!("ld.param.f64 {e64}, [p_eps]"));
        let eps = if wide {
            e64
        } else {
            let e = body.reg(Class::F32);
            body.op(format!("cvt.rn.f32.f64 {e}, {e64}"));
            e
        };
        let n = body.reg(class);
        body.op(format!("cvt.rn.{a}.u64 {n}, {cols}"));
        let tid = body.reg(Class::B32);
        body.op(format!("mov.u32 {tid}, %tid.x"));
        let lane = body.reg(Class::B32);
        body.op(format!("and.b32 {lane}, {tid}, 31"));
        let warp = body.reg(Class::B32);
        body.op(format!("shr.u32 {warp}, {tid}, 5"));
        let smem = shared.then(|| {
            let s = body.reg(Class::B64);
            body.op(format!("mov.u64 {s}, nsmem"));
            s
        });
        Gen {
            op,
            dtype,
            wide,
            out,
            input,
            w,
            b,
            rows,
            cols,
            eps,
            n,
            tid,
            lane,
            warp,
            smem,
        }
    }

    /// The sum over the row's threads of each thread's `s`, in every
    /// thread (see [`reduce_threads`]), through shared memory `region`.
    fn reduce(&self, body: &mut Body, s: &str, region: usize) -> String {
        let threads = Threads {
            lane: &self.lane,
            warp: &self.warp,
            smem: self.smem.as_deref(),
        };
        let a = self.a();
        reduce_threads(body, &threads, s, self.wide, region, &mut |body, d, o| {
            body.op(format!("add.rn.{a} {d}, {d}, {o}"))
        })
    }

    /// `1 / sqrt(stat + eps)`.
    fn inverse(&self, body: &mut Body, stat: &str) -> String {
        let a = self.a();
        let t = self.acc(body);
        body.op(format!("add.rn.{a} {t}, {stat}, {}", self.eps));
        body.op(format!("sqrt.rn.{a} {t}, {t}"));
        let inv = self.acc(body);
        body.op(format!("div.rn.{a} {inv}, {}, {t}", self.one()));
        inv
    }

    /// `sum / n`, the mean of a row's sum.
    fn mean(&self, body: &mut Body, sum: &str) -> String {
        let m = self.acc(body);
        body.op(format!("div.rn.{} {m}, {sum}, {}", self.a(), self.n));
        m
    }

    /// `y` rounded to the dtype (in register form): to bf16 for bf16,
    /// else as it is (the stores of the other dtypes round).
    fn round(&self, body: &mut Body, y: String) -> String {
        if self.dtype == DTypeKind::BF16 {
            let d = body.reg(Class::F32);
            let last = round_bf16(body, &y, &d);
            body.op(last);
            return d;
        }
        y
    }
}

/// Loads one access of `width` elements at `[addr]` where `p` holds,
/// zeros elsewhere, as raw registers (converted by [`widen`]), so
/// that a thread issues all its loads before it waits for any.
pub(super) fn load_raw(
    body: &mut Body,
    dtype: DTypeKind,
    width: usize,
    p: &str,
    addr: &str,
) -> Vec<String> {
    if width > 1 {
        let r: Vec<String> = (0..4).map(|_| body.reg(Class::B32)).collect();
        for x in &r {
            body.op(format!("mov.b32 {x}, 0"));
        }
        body.op(format!(
            "@{p} ld.global.nc.v4.u32 {{{}}}, [{addr}]",
            r.join(", ")
        ));
        return r;
    }
    let (class, init, ty) = match dtype {
        DTypeKind::F32 => (Class::F32, "mov.f32", "f32"),
        DTypeKind::F64 => (Class::F64, "mov.f64", "f64"),
        DTypeKind::F16 => (Class::B16, "mov.b16", "b16"),
        _ => (Class::B32, "mov.b32", "u16"),
    };
    let r = body.reg(class);
    let zero = match dtype {
        DTypeKind::F32 => "0f00000000",
        DTypeKind::F64 => "0d0000000000000000",
        _ => "0",
    };
    body.op(format!("{init} {r}, {zero}"));
    body.op(format!("@{p} ld.global.nc.{ty} {r}, [{addr}]"));
    vec![r]
}

/// The values of an access loaded by [`load_raw`], in the
/// precision of the statistics.
pub(super) fn widen(
    body: &mut Body,
    dtype: DTypeKind,
    width: usize,
    raw: &[String],
) -> Vec<String> {
    let mut out = Vec::with_capacity(width);
    match (dtype, width > 1) {
        (DTypeKind::F32 | DTypeKind::F64, false) => out.push(raw[0].clone()),
        (DTypeKind::F32, true) => {
            for r in raw {
                let f = body.reg(Class::F32);
                body.op(format!("mov.b32 {f}, {r}"));
                out.push(f);
            }
        }
        (DTypeKind::F64, true) => {
            for pair in raw.chunks(2) {
                let d = body.reg(Class::F64);
                body.op(format!("mov.b64 {d}, {{{}, {}}}", pair[0], pair[1]));
                out.push(d);
            }
        }
        (DTypeKind::F16, false) => {
            let f = body.reg(Class::F32);
            body.op(format!("cvt.f32.f16 {f}, {}", raw[0]));
            out.push(f);
        }
        (DTypeKind::F16, true) => {
            for r in raw {
                let lo = body.reg(Class::B16);
                let hi = body.reg(Class::B16);
                body.op(format!("mov.b32 {{{lo}, {hi}}}, {r}"));
                for h in [lo, hi] {
                    let f = body.reg(Class::F32);
                    body.op(format!("cvt.f32.f16 {f}, {h}"));
                    out.push(f);
                }
            }
        }
        (_, false) => {
            let s = body.reg(Class::B32);
            body.op(format!("shl.b32 {s}, {}, 16", raw[0]));
            let f = body.reg(Class::F32);
            body.op(format!("mov.b32 {f}, {s}"));
            out.push(f);
        }
        (_, true) => {
            for r in raw {
                let lo = body.reg(Class::B32);
                body.op(format!("shl.b32 {lo}, {r}, 16"));
                let hi = body.reg(Class::B32);
                body.op(format!("and.b32 {hi}, {r}, 0xFFFF0000"));
                for h in [lo, hi] {
                    let f = body.reg(Class::F32);
                    body.op(format!("mov.b32 {f}, {h}"));
                    out.push(f);
                }
            }
        }
    }
    debug_assert_eq!(out.len(), width);
    out
}

/// Stores `ys` (register form, rounded) as one access at `[addr]`
/// where `p` holds.
pub(super) fn store_access(body: &mut Body, dtype: DTypeKind, p: &str, addr: &str, ys: &[String]) {
    if ys.len() == 1 {
        let y = &ys[0];
        match dtype {
            DTypeKind::F32 | DTypeKind::F64 => {
                body.op(format!("@{p} st.global.{} [{addr}], {y}", dtype.name()))
            }
            DTypeKind::F16 => {
                let h = body.reg(Class::B16);
                body.op(format!("cvt.rn.f16.f32 {h}, {y}"));
                body.op(format!("@{p} st.global.b16 [{addr}], {h}"));
            }
            _ => {
                let s = body.reg(Class::B32);
                body.op(format!("mov.b32 {s}, {y}"));
                body.op(format!("shr.u32 {s}, {s}, 16"));
                body.op(format!("@{p} st.global.u16 [{addr}], {s}"));
            }
        }
        return;
    }
    let words: Vec<String> = match dtype {
        DTypeKind::F32 => ys
            .iter()
            .map(|y| {
                let r = body.reg(Class::B32);
                body.op(format!("mov.b32 {r}, {y}"));
                r
            })
            .collect(),
        DTypeKind::F64 => ys
            .iter()
            .flat_map(|y| {
                let lo = body.reg(Class::B32);
                let hi = body.reg(Class::B32);
                body.op(format!("mov.b64 {{{lo}, {hi}}}, {y}"));
                [lo, hi]
            })
            .collect(),
        DTypeKind::F16 => ys
            .chunks(2)
            .map(|pair| {
                let lo = body.reg(Class::B16);
                let hi = body.reg(Class::B16);
                body.op(format!("cvt.rn.f16.f32 {lo}, {}", pair[0]));
                body.op(format!("cvt.rn.f16.f32 {hi}, {}", pair[1]));
                let r = body.reg(Class::B32);
                body.op(format!("mov.b32 {r}, {{{lo}, {hi}}}"));
                r
            })
            .collect(),
        _ => ys
            .chunks(2)
            .map(|pair| {
                // The top halves of both (bytes 2, 3 of `lo`, then of
                // `hi`): the values are rounded to bf16 already.
                let lo = body.reg(Class::B32);
                body.op(format!("mov.b32 {lo}, {}", pair[0]));
                let hi = body.reg(Class::B32);
                body.op(format!("mov.b32 {hi}, {}", pair[1]));
                let r = body.reg(Class::B32);
                body.op(format!("prmt.b32 {r}, {lo}, {hi}, 0x7632"));
                r
            })
            .collect(),
    };
    body.op(format!(
        "@{p} st.global.v4.u32 [{addr}], {{{}}}",
        words.join(", ")
    ));
}

/// The threads of a row that [`reduce_threads`] combines: this thread's
/// lane and warp, and the shared memory of a block (`None` for a warp
/// per row).
pub(super) struct Threads<'a> {
    pub(super) lane: &'a str,
    pub(super) warp: &'a str,
    pub(super) smem: Option<&'a str>,
}

/// Combines each thread's `s` over the row's threads, the result in every
/// thread: a butterfly within the warp, then (for a block) the warps'
/// results in order through shared memory `region` (of [`REGION`] bytes;
/// two regions used in turn need no barrier between them). `combine(body,
/// d, o)` writes `d ⊕ o` into `d`; `wide` is for 64-bit values.
pub(super) fn reduce_threads(
    body: &mut Body,
    t: &Threads<'_>,
    s: &str,
    wide: bool,
    region: usize,
    combine: &mut dyn FnMut(&mut Body, &str, &str),
) -> String {
    let (a, class) = if wide {
        ("f64", Class::F64)
    } else {
        ("f32", Class::F32)
    };
    for off in [16, 8, 4, 2, 1] {
        let o = body.reg(class);
        if wide {
            let lo = body.reg(Class::B32);
            let hi = body.reg(Class::B32);
            body.op(format!("mov.b64 {{{lo}, {hi}}}, {s}"));
            body.op(format!("shfl.sync.bfly.b32 {lo}, {lo}, {off}, 31, -1"));
            body.op(format!("shfl.sync.bfly.b32 {hi}, {hi}, {off}, 31, -1"));
            body.op(format!("mov.b64 {o}, {{{lo}, {hi}}}"));
        } else {
            body.op(format!("shfl.sync.bfly.b32 {o}, {s}, {off}, 31, -1"));
        }
        combine(body, s, &o);
    }
    let Some(smem) = t.smem else {
        return s.to_string();
    };
    let lane0 = body.reg(Class::Pred);
    body.op(format!("setp.eq.u32 {lane0}, {}, 0", t.lane));
    let slot = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {slot}, {}, 8", t.warp));
    body.op(format!("add.u64 {slot}, {slot}, {smem}"));
    body.op(format!(
        "@{lane0} st.shared.{a} [{slot}+{}], {s}",
        region * REGION
    ));
    body.op("bar.sync 0");
    let total = body.reg(class);
    body.op(format!(
        "ld.shared.{a} {total}, [{smem}+{}]",
        region * REGION
    ));
    for w in 1..WARPS {
        let v = body.reg(class);
        body.op(format!(
            "ld.shared.{a} {v}, [{smem}+{}]",
            region * REGION + 8 * w
        ));
        combine(body, &total, &v);
    }
    total
}

/// This thread's accesses of a row held in registers: access `j` lies
/// `j * step` bytes past the thread's first one (`first` bytes into the
/// row), inside the row while `j * threads < rest`.
pub(super) struct Accesses {
    pub(super) width: usize,
    pub(super) count: usize,
    threads: usize,
    step: usize,
    first: String,
    rest: String,
}

impl Accesses {
    /// Thread `t`'s accesses of a row of `cols` (a register) elements of
    /// `dtype` in `entry` (a register-resident one).
    pub(super) fn new(
        body: &mut Body,
        dtype: DTypeKind,
        cols: &str,
        entry: NormEntry,
        t: &str,
    ) -> Accesses {
        let width = entry.width(dtype);
        let threads = entry.threads();
        let bytes = width * dtype.size_bytes();
        let rest = body.reg(Class::B64);
        body.op(format!(
            "shr.u64 {rest}, {cols}, {}",
            width.trailing_zeros()
        ));
        body.op(format!("sub.s64 {rest}, {rest}, {t}"));
        let first = body.reg(Class::B64);
        body.op(format!("mul.lo.u64 {first}, {t}, {bytes}"));
        Accesses {
            width,
            count: norm::slots(dtype) / width,
            threads,
            step: threads * bytes,
            first,
            rest,
        }
    }

    /// Whether access `j` lies in the row (a fresh predicate: they are
    /// recomputed where used rather than held across the row).
    pub(super) fn inside(&self, body: &mut Body, j: usize) -> String {
        let p = body.reg(Class::Pred);
        body.op(format!(
            "setp.gt.s64 {p}, {}, {}",
            self.rest,
            j * self.threads
        ));
        p
    }

    /// The address of this thread's first access in the row at `base`.
    pub(super) fn base(&self, body: &mut Body, base: &str) -> String {
        addr(body, base, &self.first)
    }

    pub(super) fn at(&self, base: &str, j: usize) -> String {
        format!("{base}+{}", j * self.step)
    }
}

pub(super) fn addr(body: &mut Body, base: &str, off: &str) -> String {
    let a = body.reg(Class::B64);
    body.op(format!("add.u64 {a}, {base}, {off}"));
    a
}

/// A loop over this thread's columns of a long row: `col` from `tid` by
/// `BLOCK`.
fn col_loop(body: &mut Body, g: &Gen, inner: impl FnOnce(&mut Body, &str)) {
    cols_of_thread(body, &g.tid, &g.cols, inner)
}

/// A loop over thread `tid`'s columns of a row of `cols` columns: `col`
/// from `tid` by `BLOCK`.
pub(super) fn cols_of_thread(
    body: &mut Body,
    tid: &str,
    cols: &str,
    inner: impl FnOnce(&mut Body, &str),
) {
    let col = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {col}, {tid}"));
    let lp = body.label("col_loop");
    let end = body.label("col_end");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {col}, {cols}"));
    body.op(format!("@{done} bra {end}"));
    inner(body, &col);
    body.op(format!("add.u64 {col}, {col}, {BLOCK}"));
    body.op(format!("bra {lp}"));
    body.place(&end);
}

fn elem(body: &mut Body, g: &Gen, base: &str, col: &str) -> String {
    let a = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {a}, {col}, {}, {base}",
        g.dtype.size_bytes()
    ));
    a
}

const BACKWARD_PARAMS: &str = "(\n\t.param .u64 p_out,\n\t.param .u64 p_in,\n\t.param .u64 p_w,\n\t.param .u64 p_g,\n\t.param .u64 p_rows,\n\t.param .u64 p_cols,\n\t.param .f64 p_eps,\n\t.param .u64 p_part\n)";

const SUM_PARAMS: &str = "(\n\t.param .u64 p_dw,\n\t.param .u64 p_db,\n\t.param .u64 p_part,\n\t.param .u64 p_blocks,\n\t.param .u64 p_cols\n)";

/// The entries of the backward of `op` over rows of `dtype`:
///
/// - `NAME_dx(.param .u64 out, .param .u64 in, .param .u64 weight,
///   .param .u64 grad, .param .u64 rows, .param .u64 cols, .param .f64
///   eps, .param .u64 part)`: `BLOCK` threads per block, `grid.x` blocks,
///   block `k` taking rows `k, k + grid.x, ..`; each row's statistics are
///   recomputed from `in` (as the forward takes them, in f32 or f64),
///   its `dx` written to `out`, and its `grad * xhat` (and `grad` for
///   `layer_norm`) added to the block's partial sums `part[k][0][col]`
///   (and `part[k][1][col]`), `2 * cols` values of the statistics' type
///   per block, each column owned by one thread: no atomics.
/// - `NAME_sum(.param .u64 dweight, .param .u64 dbias, .param .u64 part,
///   .param .u64 blocks, .param .u64 cols)`: blocks of `32 * SUM_WARPS`
///   threads, block `(x, y)` summing columns `32 x ..` of `dweight` (`y =
///   0`) or `dbias` (`y = 1`): each warp adds every `SUM_WARPS`-th of the
///   `blocks` partial sums, then the warps' sums are added in warp order
///   and written rounded to the dtype; the same bits from run to run for a
///   given `blocks`.
/// - `NAME_dx_warp`, the parameters of `NAME_dx`: the same results and
///   partial sums for rows of at most [`norm::warp_cols`] elements in
///   16-byte accesses, one warp per row (block `k` taking rows `8k + w,
///   8k + w + 8 grid.x, ..`), each row read once (see `backward_warp`).
pub(crate) fn norm_backward_entries(name: &str, op: NormOp, dtype: DTypeKind) -> Vec<String> {
    vec![
        backward_dx(name, op, dtype),
        partial_sums_entry(name, dtype, 2, op.has_bias()),
        backward_warp::backward_dx_warp(name, op, dtype),
    ]
}

fn backward_dx(name: &str, op: NormOp, dtype: DTypeKind) -> String {
    let mut body = Body::new();
    // Four statistics per row: the mean (or the mean square), the
    // variance, the means of `g * w * xhat` and of `g * w`.
    body.raw(format!(".shared .align 8 .b8 nsmem[{}];", 4 * REGION));
    let g = Gen::with_fourth(&mut body, op, dtype, true, "p_g");
    let a = g.a();
    let abytes = if g.wide { 8 } else { 4 };
    let bias = op.has_bias();
    let grid = backward_rows::grid(&mut body, 1);
    // This block's partial sums, zeroed: dweight's, then dbias's.
    let (pdw, pdb) = backward_rows::partial_sums(&mut body, &g, &grid, abytes);
    let zero = g.zero();
    col_loop(&mut body, &g, |body, col| {
        let at = part_elem(body, &pdw, col, abytes);
        body.op(format!("st.global.{a} [{at}], {zero}"));
        if bias {
            let at = part_elem(body, &pdb, col, abytes);
            body.op(format!("st.global.{a} [{at}], {zero}"));
        }
    });
    let row = body.reg(Class::B64);
    body.op(format!("mov.u64 {row}, {}", grid.ctaid));
    let (rows, off) = backward_rows::row_loop_head(&mut body, &g, &row, ["row_loop", "row_end"]);
    let xin = addr(&mut body, &g.input, &off);
    let gin = addr(&mut body, &g.b, &off);
    let xout = addr(&mut body, &g.out, &off);
    backward_row(&mut body, &g, (&xin, &gin, &xout), (&pdw, &pdb), abytes);
    // The next row's sums overwrite shared memory this row read.
    body.op("bar.sync 0");
    backward_rows::row_loop_tail(&mut body, &row, &grid, &rows);
    body.op("ret");
    format!(
        ".visible .entry {name}_dx{BACKWARD_PARAMS}\n{{\n{}}}\n",
        body.finish()
    )
}

/// The address of column `col` of the partial sums at `base`.
fn part_elem(body: &mut Body, base: &str, col: &str, abytes: usize) -> String {
    let a = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {a}, {col}, {abytes}, {base}"));
    a
}

/// One row of the backward, from global memory: the statistics (one pass
/// each), the means of `g * w * xhat` and `g * w` with the partial sums,
/// then `dx = (g * w - mean(g * w) - xhat * mean(g * w * xhat)) * inv`
/// (without the `mean(g * w)` term for `rms_norm`), rounded as the CPU
/// rounds it.
fn backward_row(
    body: &mut Body,
    g: &Gen,
    (xin, gin, xout): (&str, &str, &str),
    (pdw, pdb): (&str, &str),
    abytes: usize,
) {
    let a = g.a();
    let dtype = g.dtype;
    let layer = g.op == NormOp::LayerNorm;
    let s = g.acc(body);
    body.op(format!("mov.{a} {s}, {}", g.zero()));
    let (mean, stat) = if layer {
        col_loop(body, g, |body, col| {
            let at = elem(body, g, xin, col);
            let x = load(body, dtype, &at, true);
            body.op(format!("add.rn.{a} {s}, {s}, {x}"));
        });
        let total = g.reduce(body, &s, 0);
        let mean = g.mean(body, &total);
        let q = g.acc(body);
        body.op(format!("mov.{a} {q}, {}", g.zero()));
        col_loop(body, g, |body, col| {
            let at = elem(body, g, xin, col);
            let x = load(body, dtype, &at, true);
            let d = g.acc(body);
            body.op(format!("sub.rn.{a} {d}, {x}, {mean}"));
            body.op(format!("fma.rn.{a} {q}, {d}, {d}, {q}"));
        });
        let total = g.reduce(body, &q, 1);
        (Some(mean), g.mean(body, &total))
    } else {
        col_loop(body, g, |body, col| {
            let at = elem(body, g, xin, col);
            let x = load(body, dtype, &at, true);
            body.op(format!("fma.rn.{a} {s}, {x}, {x}, {s}"));
        });
        let total = g.reduce(body, &s, 0);
        (None, g.mean(body, &total))
    };
    let inv = g.inverse(body, &stat);
    // (xhat, g, g * w) of a column.
    let column = |body: &mut Body, col: &str| -> (String, String, String) {
        let at = elem(body, g, xin, col);
        let x = load(body, dtype, &at, true);
        let h = g.acc(body);
        match &mean {
            Some(m) => {
                body.op(format!("sub.rn.{a} {h}, {x}, {m}"));
                body.op(format!("mul.rn.{a} {h}, {h}, {inv}"));
            }
            None => body.op(format!("mul.rn.{a} {h}, {x}, {inv}")),
        }
        let ga = elem(body, g, gin, col);
        let gr = load(body, dtype, &ga, true);
        let wa = elem(body, g, &g.w, col);
        let w = load(body, dtype, &wa, true);
        let gw = g.acc(body);
        body.op(format!("mul.rn.{a} {gw}, {gr}, {w}"));
        (h, gr, gw)
    };
    let sgx = g.acc(body);
    body.op(format!("mov.{a} {sgx}, {}", g.zero()));
    let sg = g.acc(body);
    body.op(format!("mov.{a} {sg}, {}", g.zero()));
    col_loop(body, g, |body, col| {
        let (h, gr, gw) = column(body, col);
        body.op(format!("fma.rn.{a} {sgx}, {gw}, {h}, {sgx}"));
        let pa = part_elem(body, pdw, col, abytes);
        let v = g.acc(body);
        body.op(format!("ld.global.{a} {v}, [{pa}]"));
        body.op(format!("fma.rn.{a} {v}, {gr}, {h}, {v}"));
        body.op(format!("st.global.{a} [{pa}], {v}"));
        if layer {
            body.op(format!("add.rn.{a} {sg}, {sg}, {gw}"));
            let pa = part_elem(body, pdb, col, abytes);
            let v = g.acc(body);
            body.op(format!("ld.global.{a} {v}, [{pa}]"));
            body.op(format!("add.rn.{a} {v}, {v}, {gr}"));
            body.op(format!("st.global.{a} [{pa}], {v}"));
        }
    });
    let total = g.reduce(body, &sgx, 2);
    let mean_gx = g.mean(body, &total);
    let mean_g = layer.then(|| {
        let total = g.reduce(body, &sg, 3);
        g.mean(body, &total)
    });
    col_loop(body, g, |body, col| {
        let (h, _, gw) = column(body, col);
        let t = g.acc(body);
        match &mean_g {
            Some(m) => body.op(format!("sub.rn.{a} {t}, {gw}, {m}")),
            None => body.op(format!("mov.{a} {t}, {gw}")),
        }
        let u = g.acc(body);
        body.op(format!("mul.rn.{a} {u}, {h}, {mean_gx}"));
        body.op(format!("sub.rn.{a} {t}, {t}, {u}"));
        body.op(format!("mul.rn.{a} {t}, {t}, {inv}"));
        let y = g.round(body, t);
        let oa = elem(body, g, xout, col);
        store(body, dtype, &oa, &y);
    });
}

/// Warps of a `_sum` block: warp `w` adds the partial sums of blocks `w`,
/// `w + SUM_WARPS`, .. of the block's 32 columns (one a lane, so a warp's
/// loads are coalesced), then warp 0 adds the warps' sums in warp order.
pub const SUM_WARPS: usize = 32;

/// Partial sums a thread of the `_sum` entry loads before adding them, in
/// flight together rather than one dependent load at a time.
const SUM_UNROLL: usize = 16;

/// The `NAME_sum` entry (parameters as above): the column sums of `dtype`
/// from per-block partial sums in f32 (f64 for f64), `parts` rows of
/// `cols` values per block of which `ctaid.y` picks the first (`dweight`)
/// or the second (`dbias`, read only when `has_bias`). The norms' backward
/// takes two parts; `builtin::column_sum` one (`dbias` unused).
pub(crate) fn partial_sums_entry(
    name: &str,
    dtype: DTypeKind,
    parts: usize,
    has_bias: bool,
) -> String {
    let mut body = Body::new();
    let wide = dtype == DTypeKind::F64;
    let (a, class, abytes, zero) = if wide {
        ("f64", Class::F64, 8, "0d0000000000000000")
    } else {
        ("f32", Class::F32, 4, "0f00000000")
    };
    body.raw(format!(
        ".shared .align 8 .b8 nsum[{}];",
        SUM_WARPS * 32 * abytes
    ));
    let param = |body: &mut Body, name: &str, global: bool| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{name}]"));
        if global {
            body.op(format!("cvta.to.global.u64 {r}, {r}"));
        }
        r
    };
    let dw = param(&mut body, "p_dw", true);
    let db = param(&mut body, "p_db", has_bias);
    let part = param(&mut body, "p_part", true);
    let blocks = param(&mut body, "p_blocks", false);
    let cols = param(&mut body, "p_cols", false);
    let tid = body.reg(Class::B32);
    body.op(format!("mov.u32 {tid}, %tid.x"));
    let lane = body.reg(Class::B32);
    body.op(format!("and.b32 {lane}, {tid}, 31"));
    let warp = body.reg(Class::B32);
    body.op(format!("shr.u32 {warp}, {tid}, 5"));
    // Column `32 * ctaid.x + lane`; `ctaid.y` picks dweight (0) or dbias (1).
    let c32 = body.reg(Class::B32);
    body.op(format!("mov.u32 {c32}, %ctaid.x"));
    body.op(format!("mad.lo.u32 {c32}, {c32}, 32, {lane}"));
    let col = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {col}, {c32}"));
    let which = body.reg(Class::B32);
    body.op(format!("mov.u32 {which}, %ctaid.y"));
    let bias = body.reg(Class::Pred);
    body.op(format!("setp.ne.u32 {bias}, {which}, 0"));
    let dst = body.reg(Class::B64);
    body.op(format!("selp.b64 {dst}, {db}, {dw}, {bias}"));
    // Columns past the row add no blocks but still meet the barrier.
    let inside = body.reg(Class::Pred);
    body.op(format!("setp.lt.u64 {inside}, {col}, {cols}"));
    let n = body.reg(Class::B64);
    body.op(format!("selp.b64 {n}, {blocks}, 0, {inside}"));
    // part[warp][which][col], `parts * cols` values per block.
    let stride = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {stride}, {cols}, {}", parts * abytes));
    let p = body.reg(Class::B64);
    let w64 = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {w64}, {warp}"));
    body.op(format!("mad.lo.u64 {p}, {w64}, {stride}, {part}"));
    body.op(format!("mad.lo.u64 {p}, {col}, {abytes}, {p}"));
    let half = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {half}, {cols}, {abytes}"));
    body.op(format!("@{bias} add.u64 {p}, {p}, {half}"));
    let step = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {step}, {stride}, {SUM_WARPS}"));
    let s = body.reg(class);
    body.op(format!("mov.{a} {s}, {zero}"));
    let k = body.reg(Class::B64);
    body.op(format!("mov.u64 {k}, {w64}"));
    // `SUM_UNROLL` of this warp's blocks loaded, then added in block order.
    let group = body.label("block_group");
    let group_end = body.label("block_group_end");
    body.place(&group);
    let last = body.reg(Class::B64);
    body.op(format!(
        "add.u64 {last}, {k}, {}",
        (SUM_UNROLL - 1) * SUM_WARPS
    ));
    let past = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {past}, {last}, {n}"));
    body.op(format!("@{past} bra {group_end}"));
    let vs: Vec<String> = (0..SUM_UNROLL)
        .map(|_| {
            let v = body.reg(class);
            body.op(format!("ld.global.{a} {v}, [{p}]"));
            body.op(format!("add.u64 {p}, {p}, {step}"));
            v
        })
        .collect();
    for v in vs {
        body.op(format!("add.rn.{a} {s}, {s}, {v}"));
    }
    body.op(format!("add.u64 {k}, {k}, {}", SUM_UNROLL * SUM_WARPS));
    body.op(format!("bra {group}"));
    body.place(&group_end);
    let lp = body.label("block_loop");
    let done_l = body.label("block_end");
    body.place(&lp);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {k}, {n}"));
    body.op(format!("@{done} bra {done_l}"));
    let v = body.reg(class);
    body.op(format!("ld.global.{a} {v}, [{p}]"));
    body.op(format!("add.rn.{a} {s}, {s}, {v}"));
    body.op(format!("add.u64 {p}, {p}, {step}"));
    body.op(format!("add.u64 {k}, {k}, {SUM_WARPS}"));
    body.op(format!("bra {lp}"));
    body.place(&done_l);
    // The warps' sums of each column through shared memory, added by
    // warp 0 in warp order: the same bits for a given block count.
    let slot = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {slot}, {tid}, {abytes}"));
    let sbase = body.reg(Class::B64);
    body.op(format!("mov.u64 {sbase}, nsum"));
    body.op(format!("add.u64 {slot}, {slot}, {sbase}"));
    body.op(format!("st.shared.{a} [{slot}], {s}"));
    body.op("bar.sync 0");
    let end = body.label("sum_end");
    let other = body.reg(Class::Pred);
    body.op(format!("setp.ne.u32 {other}, {warp}, 0"));
    body.op(format!("@{other} bra {end}"));
    for w in 1..SUM_WARPS {
        let v = body.reg(class);
        body.op(format!("ld.shared.{a} {v}, [{slot}+{}]", w * 32 * abytes));
        body.op(format!("add.rn.{a} {s}, {s}, {v}"));
    }
    let outside = body.reg(Class::Pred);
    body.op(format!("not.pred {outside}, {inside}"));
    body.op(format!("@{outside} bra {end}"));
    let y = if dtype == DTypeKind::BF16 {
        let d = body.reg(Class::F32);
        let last = round_bf16(&mut body, &s, &d);
        body.op(last);
        d
    } else {
        s
    };
    let oa = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {oa}, {col}, {}, {dst}",
        dtype.size_bytes()
    ));
    store(&mut body, dtype, &oa, &y);
    body.place(&end);
    body.op("ret");
    format!(
        ".visible .entry {name}_sum{SUM_PARAMS}\n.maxntid {}, 1, 1\n{{\n{}}}\n",
        SUM_WARPS * 32,
        body.finish()
    )
}
