//! `batch_norm` over the channel dim of `[N, C, S]` read through any
//! strides (NCHW and channels-last alike): blocks of [`BLOCK`] threads,
//! `grid.x` over the channels (looping past the grid) and `grid.y` parts
//! of each channel's `N * S` elements (contiguous ranges in `(n, s)`
//! order), sums in f32 (f64 for f64) reduced through shared memory in a
//! fixed order (no atomics: the same bits every run for a given grid).
//!
//! With one part a block computes its channel's sums itself. With several
//! (few channels, so that they fill the GPU) the sums go through `ws`, a
//! scratch of `4 * C * parts` sums (f32, f64 for f64) indexed `(k * C +
//! channel) * parts + part`: `NAME_stats_sum` (training: `sum(x -
//! pivot)`), then `NAME_stats_dev` (training forward: `sum((x -
//! mean)^2)`) or `NAME_backward_sums` (backward: that, `sum(g)` and
//! `sum(g * (x - mean))`) write each block's partial sums, and the main
//! entry adds a channel's partials in part order. The entries of one pass share the
//! parameters `(x, g, running_mean, ws, meta)`, `meta` as the backward's.
//!
//! * `NAME(out, x, weight, bias, running_mean, running_var, new_mean,
//!   new_var, ws, meta)`: in training the channel's mean and biased variance
//!   by two passes (the variance around the mean, so large offsets do not
//!   cancel), in inference the running ones; then `(x - mean) * scale +
//!   bias` with `scale = weight / sqrt(var + eps)` into `out`, and in
//!   training with running statistics their update (`(1 - momentum) *
//!   running + momentum * batch`, the variance unbiased) in f64. `meta`:
//!   `N, C, S`, `x`'s strides `(n, c, s)`, flags (1 training, 2 weight, 4
//!   bias, 8 running statistics), the f64 bits of `momentum` and `eps`,
//!   `out`'s strides (contiguous or channels-last: the runtime writes a
//!   result in its input's memory format).
//! * `NAME_backward(dx, dweight, dbias, x, g, weight, running_mean,
//!   running_var, ws, meta)`: `dweight = sum(g * xhat)`, `dbias = sum(g)`,
//!   `dx` (PyTorch's formula in training, `g * weight * invstd` in
//!   inference). `meta`: `N, C, S`, `x`'s strides, flags (1 training, 2
//!   weight, 8 running statistics), the bits of `eps`, `g`'s strides,
//!   `dx`'s strides.
//!
//! [`BLOCK`]: crate::abi::BLOCK

use super::body::{Body, Class};
use super::inst::round_bf16;
use super::memory::{load, store};
use super::pool::{from_f64, udivrem};
use crate::abi::BLOCK;
use tensorfn_core::DTypeKind;

/// 64-bit words of the forward's `meta` parameter.
pub const BATCH_NORM_META_WORDS: usize = 12;
/// 64-bit words of the backward's `meta` parameter.
pub const BATCH_NORM_BACKWARD_META_WORDS: usize = 14;

/// The register class and PTX type of the sums for `dtype`.
fn acc(dtype: DTypeKind) -> (Class, &'static str) {
    if dtype == DTypeKind::F64 {
        (Class::F64, "f64")
    } else {
        (Class::F32, "f32")
    }
}

fn constant(ty: &str, v: f64) -> String {
    if ty == "f64" {
        format!("0d{:016X}", v.to_bits())
    } else {
        format!("0f{:08X}", (v as f32).to_bits())
    }
}

fn global_ptr(body: &mut Body, p: &str) -> String {
    let r = body.reg(Class::B64);
    body.op(format!("ld.param.u64 {r}, [{p}]"));
    body.op(format!("cvta.to.global.u64 {r}, {r}"));
    r
}

/// The text of entry `name`: the 64-bit pointer parameters `names`, then
/// `meta` of `meta_words` words, around `body`.
fn entry_text(name: &str, names: &[&str], meta_words: usize, body: Body) -> String {
    let params = names
        .iter()
        .map(|p| format!(".param .u64 {p}"))
        .chain(std::iter::once(format!(
            ".param .align 8 .b8 p_meta[{}]",
            8 * meta_words
        )))
        .collect::<Vec<_>>();
    format!(
        ".visible .entry {name}(\n\t{}\n)\n{{\n{}}}\n",
        params.join(",\n\t"),
        body.finish()
    )
}

/// Which partial sums a `NAME_stats_*`/`NAME_backward_sums` entry writes.
#[derive(Clone, Copy, PartialEq)]
enum Stage {
    /// `sum(x - pivot)` into sums 0.
    Sum,
    /// `sum((x - mean)^2)` into sums 1.
    Dev,
    /// `sum(g)` and `sum(g * (x - mean))` into sums 2 and 3, and
    /// `sum((x - mean)^2)` into sums 1 (the variance in training).
    Grad,
}

/// Shared state of a channel's loops.
struct Ctx {
    dtype: DTypeKind,
    ty: &'static str,
    class: Class,
    tid: String,
    ntid: String,
    /// The shared scratch of `BLOCK` sums.
    scratch: String,
    m: String,
    s: String,
    /// The f32/f64 `m`.
    mf: String,
    /// `C`.
    c: String,
    /// This block's part and the number of parts (`ctaid.y`, `nctaid.y`).
    part: String,
    parts: String,
    /// This block's range `[lo, hi)` of the channel's elements.
    lo: String,
    hi: String,
    /// The global scratch of partial sums (unused with one part).
    ws: String,
}

impl Ctx {
    /// `eps` in the sums' type from the meta word of its f64 bits.
    fn eps(&self, body: &mut Body, word: &str) -> String {
        let eps64 = body.reg(Class::F64);
        body.op(format!("mov.b64 {eps64}, {word}"));
        if self.ty == "f64" {
            return eps64;
        }
        let e = body.reg(Class::F32);
        body.op(format!("cvt.rn.f32.f64 {e}, {eps64}"));
        e
    }

    /// Emits a loop over the channel's elements `j` (this thread's share
    /// of the block's range): `inner(body, n, s)` with `j = n * S + s`.
    fn elements(&self, body: &mut Body, inner: impl FnOnce(&mut Body, &str, &str)) {
        let j = body.reg(Class::B64);
        body.op(format!("add.u64 {j}, {}, {}", self.lo, self.tid));
        let top = body.label("bn_elems");
        let end = body.label("bn_elems_end");
        body.place(&top);
        let p = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {p}, {j}, {}", self.hi));
        body.op(format!("@{p} bra {end}"));
        let (n, s) = udivrem(body, &j, &self.s);
        inner(body, &n, &s);
        body.op(format!("add.u64 {j}, {j}, {}", self.ntid));
        body.op(format!("bra.uni {top}"));
        body.place(&end);
    }

    /// The block's sum of every thread's `v`, in every thread: a fixed
    /// tree through shared memory.
    fn block_sum(&self, body: &mut Body, v: &str) -> String {
        let size = if self.ty == "f64" { 8 } else { 4 };
        let mine = body.reg(Class::B64);
        body.op(format!(
            "mad.lo.u64 {mine}, {}, {size}, {}",
            self.tid, self.scratch
        ));
        body.op(format!("st.shared.{} [{mine}], {v}", self.ty));
        body.op("bar.sync 0");
        let mut half = BLOCK / 2;
        while half > 0 {
            let p = body.reg(Class::Pred);
            body.op(format!("setp.lt.u64 {p}, {}, {half}", self.tid));
            let (a, b) = (body.reg(self.class), body.reg(self.class));
            body.op(format!("@{p} ld.shared.{} {a}, [{mine}]", self.ty));
            body.op(format!(
                "@{p} ld.shared.{} {b}, [{mine}+{}]",
                self.ty,
                half as usize * size
            ));
            body.op(format!("@{p} add.rn.{} {a}, {a}, {b}", self.ty));
            body.op(format!("@{p} st.shared.{} [{mine}], {a}", self.ty));
            body.op("bar.sync 0");
            half /= 2;
        }
        let r = body.reg(self.class);
        body.op(format!("ld.shared.{} {r}, [{}]", self.ty, self.scratch));
        body.op("bar.sync 0");
        r
    }

    /// A predicate: the channels are split into several parts.
    fn split(&self, body: &mut Body) -> String {
        let p = body.reg(Class::Pred);
        body.op(format!("setp.gt.u64 {p}, {}, 1", self.parts));
        p
    }

    /// The address of partial sum `k` of channel `ch`, part `part`.
    fn ws_addr(&self, body: &mut Body, k: usize, ch: &str, part: &str) -> String {
        let size = if self.ty == "f64" { 8 } else { 4 };
        let i = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {i}, {}, {k}, {ch}", self.c));
        body.op(format!("mad.lo.u64 {i}, {i}, {}, {part}", self.parts));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {i}, {size}, {}", self.ws));
        a
    }

    /// Thread 0 stores the block's partial sum `k` of channel `ch`.
    fn ws_store(&self, body: &mut Body, k: usize, ch: &str, v: &str) {
        let a = self.ws_addr(body, k, ch, &self.part);
        let p = body.reg(Class::Pred);
        body.op(format!("setp.eq.u64 {p}, {}, 0", self.tid));
        body.op(format!("@{p} st.global.{} [{a}], {v}", self.ty));
    }

    /// Channel `ch`'s partial sums `k` added in part order.
    fn ws_total(&self, body: &mut Body, k: usize, ch: &str) -> String {
        let ty = self.ty;
        let t = body.reg(self.class);
        body.op(format!("mov.{ty} {t}, {}", constant(ty, 0.0)));
        let p = body.reg(Class::B64);
        body.op(format!("mov.u64 {p}, 0"));
        let top = body.label("bn_parts");
        let end = body.label("bn_parts_end");
        body.place(&top);
        let q = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {q}, {p}, {}", self.parts));
        body.op(format!("@{q} bra {end}"));
        let a = self.ws_addr(body, k, ch, &p);
        let v = body.reg(self.class);
        body.op(format!("ld.global.{ty} {v}, [{a}]"));
        body.op(format!("add.rn.{ty} {t}, {t}, {v}"));
        body.op(format!("add.u64 {p}, {p}, 1"));
        body.op(format!("bra.uni {top}"));
        body.place(&end);
        t
    }

    /// The pivot of channel `ch`'s shifted sums: its first element, 0 when
    /// not finite.
    fn pivot(&self, body: &mut Body, x: &str, st: [&str; 3], ch: &str) -> String {
        let ty = self.ty;
        let first = body.reg(Class::B64);
        body.op(format!("mov.u64 {first}, 0"));
        let x0 = self.load_at(body, x, (&first, &first), ch, st);
        let pivot = body.reg(self.class);
        let a = body.reg(self.class);
        body.op(format!("abs.{ty} {a}, {x0}"));
        let finite = body.reg(Class::Pred);
        body.op(format!(
            "setp.lt.{ty} {finite}, {a}, {}",
            constant(ty, f64::INFINITY)
        ));
        body.op(format!(
            "selp.{ty} {pivot}, {x0}, {}, {finite}",
            constant(ty, 0.0)
        ));
        pivot
    }

    /// This thread's part of `sum(x - pivot)` over the block's range.
    fn shifted_sum(
        &self,
        body: &mut Body,
        x: &str,
        st: [&str; 3],
        ch: &str,
        pivot: &str,
    ) -> String {
        let ty = self.ty;
        let sum = body.reg(self.class);
        body.op(format!("mov.{ty} {sum}, {}", constant(ty, 0.0)));
        self.elements(body, |body, n, s| {
            let v = self.load_at(body, x, (n, s), ch, st);
            let d = body.reg(self.class);
            body.op(format!("sub.rn.{ty} {d}, {v}, {pivot}"));
            body.op(format!("add.rn.{ty} {sum}, {sum}, {d}"));
        });
        sum
    }

    /// This thread's part of `sum((x - mean)^2)` over the block's range.
    fn dev_sum(&self, body: &mut Body, x: &str, st: [&str; 3], ch: &str, mean: &str) -> String {
        let ty = self.ty;
        let sq = body.reg(self.class);
        body.op(format!("mov.{ty} {sq}, {}", constant(ty, 0.0)));
        self.elements(body, |body, n, s| {
            let v = self.load_at(body, x, (n, s), ch, st);
            let d = body.reg(self.class);
            body.op(format!("sub.rn.{ty} {d}, {v}, {mean}"));
            body.op(format!("fma.rn.{ty} {sq}, {d}, {d}, {sq}"));
        });
        sq
    }

    /// This thread's parts of `sum(g)`, `sum(g * (x - mean))` and
    /// `sum((x - mean)^2)` over the block's range.
    fn grad_sums(
        &self,
        body: &mut Body,
        (x, st): (&str, [&str; 3]),
        (g, gst): (&str, [&str; 3]),
        ch: &str,
        mean: &str,
    ) -> (String, String, String) {
        let ty = self.ty;
        let zero = constant(ty, 0.0);
        let (sg, sgx, sq) = (
            body.reg(self.class),
            body.reg(self.class),
            body.reg(self.class),
        );
        body.op(format!("mov.{ty} {sg}, {zero}"));
        body.op(format!("mov.{ty} {sgx}, {zero}"));
        body.op(format!("mov.{ty} {sq}, {zero}"));
        self.elements(body, |body, n, s| {
            let xv = self.load_at(body, x, (n, s), ch, st);
            let gv = self.load_at(body, g, (n, s), ch, gst);
            body.op(format!("add.rn.{ty} {sg}, {sg}, {gv}"));
            let d = body.reg(self.class);
            body.op(format!("sub.rn.{ty} {d}, {xv}, {mean}"));
            body.op(format!("fma.rn.{ty} {sgx}, {gv}, {d}, {sgx}"));
            body.op(format!("fma.rn.{ty} {sq}, {d}, {d}, {sq}"));
        });
        (sg, sgx, sq)
    }

    /// `mean = total / m + pivot` into `mean`.
    fn mean_of(&self, body: &mut Body, mean: &str, total: &str, pivot: &str) {
        let ty = self.ty;
        body.op(format!("div.rn.{ty} {mean}, {total}, {}", self.mf));
        body.op(format!("add.rn.{ty} {mean}, {mean}, {pivot}"));
    }

    /// Loads the `dtype` element at `ptr + (n * sn + ch * sc + s * ss)`
    /// elements into the sums' type.
    fn load_at(
        &self,
        body: &mut Body,
        ptr: &str,
        (n, s): (&str, &str),
        ch: &str,
        st: [&str; 3],
    ) -> String {
        let a = self.addr_at(body, ptr, (n, s), ch, st);
        load(body, self.dtype, &a, true)
    }

    /// The address of the `[N, C, S]` element `(n, ch, s)` of `ptr`
    /// with strides `st`.
    fn addr_at(
        &self,
        body: &mut Body,
        ptr: &str,
        (n, s): (&str, &str),
        ch: &str,
        st: [&str; 3],
    ) -> String {
        let off = body.reg(Class::B64);
        body.op(format!("mul.lo.u64 {off}, {n}, {}", st[0]));
        body.op(format!("mad.lo.u64 {off}, {ch}, {}, {off}", st[1]));
        body.op(format!("mad.lo.u64 {off}, {s}, {}, {off}", st[2]));
        let a = body.reg(Class::B64);
        body.op(format!(
            "mad.lo.u64 {a}, {off}, {}, {ptr}",
            self.dtype.size_bytes()
        ));
        a
    }

    /// Stores `v` (the sums' type) as a `dtype` at `[a]`, rounded once.
    fn store_acc(&self, body: &mut Body, a: &str, v: &str) {
        if self.dtype == DTypeKind::BF16 {
            let r = body.reg(Class::F32);
            let last = round_bf16(body, v, &r);
            body.op(last);
            store(body, self.dtype, a, &r);
        } else {
            store(body, self.dtype, a, v);
        }
    }

    /// `ptr[ch]` in the sums' type when flag bit `bit` of `flags` is set,
    /// else `default`.
    fn optional(
        &self,
        body: &mut Body,
        flags: &str,
        bit: u32,
        ptr: &str,
        ch: &str,
        default: f64,
    ) -> String {
        let r = body.reg(self.class);
        body.op(format!(
            "mov.{} {r}, {}",
            self.ty,
            constant(self.ty, default)
        ));
        let skip = body.label("bn_absent");
        let absent = flag_clear(body, flags, bit);
        body.op(format!("@{absent} bra {skip}"));
        let a = body.reg(Class::B64);
        body.op(format!(
            "mad.lo.u64 {a}, {ch}, {}, {ptr}",
            self.dtype.size_bytes()
        ));
        let v = load(body, self.dtype, &a, true);
        body.op(format!("mov.{} {r}, {v}", self.ty));
        body.place(&skip);
        r
    }

    /// The channel's `(mean, var)`: the batch's in training, else the
    /// running ones (0 and 1 without them).
    #[allow(clippy::too_many_arguments)]
    fn stats(
        &self,
        body: &mut Body,
        flags: &str,
        x: &str,
        st: [&str; 3],
        ch: &str,
        rm: &str,
        rv: &str,
    ) -> (String, String) {
        let (mean, var) = (body.reg(self.class), body.reg(self.class));
        let eval = body.label("bn_eval");
        let done = body.label("bn_stats_done");
        let not_training = flag_clear(body, flags, 1);
        body.op(format!("@{not_training} bra {eval}"));
        let ty = self.ty;
        // Sums of `x - pivot`, the pivot the channel's first element (0
        // when not finite): values far from zero keep their digits.
        let pivot = self.pivot(body, x, st, ch);
        let split = self.split(body);
        let parted = body.label("bn_stats_parted");
        body.op(format!("@{split} bra {parted}"));
        let sum = self.shifted_sum(body, x, st, ch, &pivot);
        let total = self.block_sum(body, &sum);
        self.mean_of(body, &mean, &total, &pivot);
        let sq = self.dev_sum(body, x, st, ch, &mean);
        let total = self.block_sum(body, &sq);
        body.op(format!("div.rn.{ty} {var}, {total}, {}", self.mf));
        body.op(format!("bra.uni {done}"));
        body.place(&parted);
        let total = self.ws_total(body, 0, ch);
        self.mean_of(body, &mean, &total, &pivot);
        let total = self.ws_total(body, 1, ch);
        body.op(format!("div.rn.{ty} {var}, {total}, {}", self.mf));
        body.op(format!("bra.uni {done}"));
        body.place(&eval);
        let m = self.optional(body, flags, 8, rm, ch, 0.0);
        let v = self.optional(body, flags, 8, rv, ch, 1.0);
        body.op(format!("mov.{ty} {mean}, {m}"));
        body.op(format!("mov.{ty} {var}, {v}"));
        body.place(&done);
        (mean, var)
    }
}

/// A predicate: flag bit `bit` of `flags` is clear.
fn flag_clear(body: &mut Body, flags: &str, bit: u32) -> String {
    let t = body.reg(Class::B64);
    body.op(format!("and.b64 {t}, {flags}, {bit}"));
    let p = body.reg(Class::Pred);
    body.op(format!("setp.eq.u64 {p}, {t}, 0"));
    p
}

/// The common prologue: meta words, thread indices, the scratch, and the
/// loop over channels; `inner(body, ctx, ch, meta)` emits one channel.
fn channels(
    body: &mut Body,
    dtype: DTypeKind,
    words: usize,
    ws: &str,
    inner: impl FnOnce(&mut Body, &Ctx, &str, &[String]),
) {
    let (class, ty) = acc(dtype);
    let size = if ty == "f64" { 8 } else { 4 };
    body.raw(format!(
        ".shared .align 8 .b8 bn_scratch[{}];",
        BLOCK as usize * size
    ));
    let meta: Vec<String> = (0..words)
        .map(|i| {
            let r = body.reg(Class::B64);
            body.op(format!("ld.param.u64 {r}, [p_meta+{}]", 8 * i));
            r
        })
        .collect();
    let scratch = body.reg(Class::B64);
    body.op(format!("mov.u64 {scratch}, bn_scratch"));
    let r32 = |body: &mut Body, sreg: &str| {
        let a = body.reg(Class::B32);
        body.op(format!("mov.u32 {a}, {sreg}"));
        let w = body.reg(Class::B64);
        body.op(format!("cvt.u64.u32 {w}, {a}"));
        w
    };
    let tid = r32(body, "%tid.x");
    let ntid = r32(body, "%ntid.x");
    let ctaid = r32(body, "%ctaid.x");
    let nctaid = r32(body, "%nctaid.x");
    let part = r32(body, "%ctaid.y");
    let parts = r32(body, "%nctaid.y");
    let m = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {m}, {}, {}", meta[0], meta[2]));
    let mf = body.reg(class);
    body.op(format!("cvt.rn.{ty}.u64 {mf}, {m}"));
    // Part p's range: [p * chunk, (p + 1) * chunk) within [0, m), chunk
    // = ceil(m / parts).
    let chunk = body.reg(Class::B64);
    body.op(format!("add.u64 {chunk}, {m}, {parts}"));
    body.op(format!("sub.u64 {chunk}, {chunk}, 1"));
    let (chunk, _) = udivrem(body, &chunk, &parts);
    let (lo, hi) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("mul.lo.u64 {lo}, {part}, {chunk}"));
    body.op(format!("min.u64 {lo}, {lo}, {m}"));
    body.op(format!("add.u64 {hi}, {lo}, {chunk}"));
    body.op(format!("min.u64 {hi}, {hi}, {m}"));
    let ctx = Ctx {
        dtype,
        ty,
        class,
        tid,
        ntid,
        scratch,
        m,
        s: meta[2].clone(),
        mf,
        c: meta[1].clone(),
        part,
        parts,
        lo,
        hi,
        ws: ws.to_string(),
    };
    let ch = body.reg(Class::B64);
    body.op(format!("mov.u64 {ch}, {ctaid}"));
    let top = body.label("bn_channels");
    let end = body.label("bn_channels_end");
    body.place(&top);
    let p = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {p}, {ch}, {}", meta[1]));
    body.op(format!("@{p} bra {end}"));
    inner(body, &ctx, &ch, &meta);
    body.op(format!("add.u64 {ch}, {ch}, {nctaid}"));
    body.op(format!("bra.uni {top}"));
    body.place(&end);
}

/// The forward entry `NAME` over `dtype`.
pub(crate) fn batch_norm_entry(name: &str, dtype: DTypeKind) -> String {
    let mut body = Body::new();
    let names = [
        "p_out", "p_x", "p_w", "p_b", "p_rm", "p_rv", "p_nm", "p_nv", "p_ws",
    ];
    let [out, x, w, b, rm, rv, nm, nv, ws] = names.map(|p| global_ptr(&mut body, p));
    channels(
        &mut body,
        dtype,
        BATCH_NORM_META_WORDS,
        &ws,
        |body, cx, ch, meta| {
            let ty = cx.ty;
            let flags = &meta[6];
            let st = [meta[3].as_str(), meta[4].as_str(), meta[5].as_str()];
            let (mean, var) = cx.stats(body, flags, &x, st, ch, &rm, &rv);
            let eps = cx.eps(body, &meta[8]);
            let wv = cx.optional(body, flags, 2, &w, ch, 1.0);
            let shift = cx.optional(body, flags, 4, &b, ch, 0.0);
            let scale = body.reg(cx.class);
            body.op(format!("add.rn.{ty} {scale}, {var}, {eps}"));
            body.op(format!("sqrt.rn.{ty} {scale}, {scale}"));
            body.op(format!("div.rn.{ty} {scale}, {wv}, {scale}"));
            cx.elements(body, |body, n, s| {
                let v = cx.load_at(body, &x, (n, s), ch, st);
                let y = body.reg(cx.class);
                body.op(format!("sub.rn.{ty} {y}, {v}, {mean}"));
                body.op(format!("mul.rn.{ty} {y}, {y}, {scale}"));
                body.op(format!("add.rn.{ty} {y}, {y}, {shift}"));
                let ost = [meta[9].as_str(), meta[10].as_str(), meta[11].as_str()];
                let a = cx.addr_at(body, &out, (n, s), ch, ost);
                cx.store_acc(body, &a, &y);
            });
            // The running statistics' update, by thread 0 of part 0, in
            // f64.
            let skip = body.label("bn_no_update");
            let p = flag_clear(body, flags, 1);
            body.op(format!("@{p} bra {skip}"));
            let p = flag_clear(body, flags, 8);
            body.op(format!("@{p} bra {skip}"));
            let p = body.reg(Class::Pred);
            body.op(format!("setp.ne.u64 {p}, {}, 0", cx.tid));
            body.op(format!("@{p} bra {skip}"));
            body.op(format!("setp.ne.u64 {p}, {}, 0", cx.part));
            body.op(format!("@{p} bra {skip}"));
            body.op(format!("setp.eq.u64 {p}, {}, 0", cx.m));
            body.op(format!("@{p} bra {skip}"));
            let wide = |body: &mut Body, v: &str| {
                if ty == "f64" {
                    v.to_string()
                } else {
                    let d = body.reg(Class::F64);
                    body.op(format!("cvt.f64.f32 {d}, {v}"));
                    d
                }
            };
            let mom = body.reg(Class::F64);
            body.op(format!("mov.b64 {mom}, {}", meta[7]));
            let keep = body.reg(Class::F64);
            body.op(format!("sub.rn.f64 {keep}, 0d3FF0000000000000, {mom}"));
            let mf = body.reg(Class::F64);
            body.op(format!("cvt.rn.f64.u64 {mf}, {}", cx.m));
            let mf1 = body.reg(Class::F64);
            body.op(format!("sub.rn.f64 {mf1}, {mf}, 0d3FF0000000000000"));
            let unbias = body.reg(Class::F64);
            body.op(format!("div.rn.f64 {unbias}, {mf}, {mf1}"));
            for (run, batch, dst, unb) in [(&rm, &mean, &nm, false), (&rv, &var, &nv, true)] {
                let a = body.reg(Class::B64);
                body.op(format!(
                    "mad.lo.u64 {a}, {ch}, {}, {run}",
                    dtype.size_bytes()
                ));
                let r = load(body, dtype, &a, true);
                let r = wide(body, &r);
                let bt = wide(body, batch);
                let t = body.reg(Class::F64);
                body.op(format!("mul.rn.f64 {t}, {keep}, {r}"));
                let u = body.reg(Class::F64);
                body.op(format!("mul.rn.f64 {u}, {mom}, {bt}"));
                if unb {
                    body.op(format!("mul.rn.f64 {u}, {u}, {unbias}"));
                }
                body.op(format!("add.rn.f64 {t}, {t}, {u}"));
                let v = from_f64(body, dtype, &t);
                let a = body.reg(Class::B64);
                body.op(format!(
                    "mad.lo.u64 {a}, {ch}, {}, {dst}",
                    dtype.size_bytes()
                ));
                store(body, dtype, &a, &v);
            }
            body.place(&skip);
        },
    );
    body.op("ret");
    entry_text(name, &names, BATCH_NORM_META_WORDS, body)
}

/// The backward entry `NAME_backward` over `dtype`.
pub(crate) fn batch_norm_backward_entry(name: &str, dtype: DTypeKind) -> String {
    let mut body = Body::new();
    let names = [
        "p_dx", "p_dw", "p_db", "p_x", "p_g", "p_w", "p_rm", "p_rv", "p_ws",
    ];
    let [dx, dw, db, x, g, w, rm, rv, ws] = names.map(|p| global_ptr(&mut body, p));
    channels(
        &mut body,
        dtype,
        BATCH_NORM_BACKWARD_META_WORDS,
        &ws,
        |body, cx, ch, meta| {
            let ty = cx.ty;
            let flags = &meta[6];
            let st = [meta[3].as_str(), meta[4].as_str(), meta[5].as_str()];
            let gst = [meta[8].as_str(), meta[9].as_str(), meta[10].as_str()];
            let (mean, var) = cx.stats(body, flags, &x, st, ch, &rm, &rv);
            let eps = cx.eps(body, &meta[7]);
            let invstd = body.reg(cx.class);
            body.op(format!("add.rn.{ty} {invstd}, {var}, {eps}"));
            body.op(format!("sqrt.rn.{ty} {invstd}, {invstd}"));
            body.op(format!(
                "div.rn.{ty} {invstd}, {}, {invstd}",
                constant(ty, 1.0)
            ));
            let wv = cx.optional(body, flags, 2, &w, ch, 1.0);
            let k = body.reg(cx.class);
            body.op(format!("mul.rn.{ty} {k}, {wv}, {invstd}"));
            let (sum_g, sum_gx) = (body.reg(cx.class), body.reg(cx.class));
            let split = cx.split(body);
            let parted = body.label("bn_sums_parted");
            let summed = body.label("bn_sums_done");
            body.op(format!("@{split} bra {parted}"));
            let (sg, sgx, _) = cx.grad_sums(body, (&x, st), (&g, gst), ch, &mean);
            let t = cx.block_sum(body, &sg);
            body.op(format!("mov.{ty} {sum_g}, {t}"));
            let t = cx.block_sum(body, &sgx);
            body.op(format!("mov.{ty} {sum_gx}, {t}"));
            body.op(format!("bra.uni {summed}"));
            body.place(&parted);
            let t = cx.ws_total(body, 2, ch);
            body.op(format!("mov.{ty} {sum_g}, {t}"));
            let t = cx.ws_total(body, 3, ch);
            body.op(format!("mov.{ty} {sum_gx}, {t}"));
            body.place(&summed);
            body.op(format!("mul.rn.{ty} {sum_gx}, {sum_gx}, {invstd}"));
            let (mg, mgx) = (body.reg(cx.class), body.reg(cx.class));
            body.op(format!("div.rn.{ty} {mg}, {sum_g}, {}", cx.mf));
            body.op(format!("div.rn.{ty} {mgx}, {sum_gx}, {}", cx.mf));
            let not_training = flag_clear(body, flags, 1);
            cx.elements(body, |body, n, s| {
                let xv = cx.load_at(body, &x, (n, s), ch, st);
                let gv = cx.load_at(body, &g, (n, s), ch, gst);
                let y = body.reg(cx.class);
                let xhat = body.reg(cx.class);
                body.op(format!("sub.rn.{ty} {xhat}, {xv}, {mean}"));
                body.op(format!("mul.rn.{ty} {xhat}, {xhat}, {invstd}"));
                body.op(format!("sub.rn.{ty} {y}, {gv}, {mg}"));
                body.op(format!("mul.rn.{ty} {xhat}, {xhat}, {mgx}"));
                body.op(format!("sub.rn.{ty} {y}, {y}, {xhat}"));
                body.op(format!("mul.rn.{ty} {y}, {k}, {y}"));
                let e = body.reg(cx.class);
                body.op(format!("mul.rn.{ty} {e}, {gv}, {k}"));
                body.op(format!("selp.{ty} {y}, {e}, {y}, {not_training}"));
                let dst = [meta[11].as_str(), meta[12].as_str(), meta[13].as_str()];
                let a = cx.addr_at(body, &dx, (n, s), ch, dst);
                cx.store_acc(body, &a, &y);
            });
            let skip = body.label("bn_no_sums");
            let p = body.reg(Class::Pred);
            body.op(format!("setp.ne.u64 {p}, {}, 0", cx.tid));
            body.op(format!("@{p} bra {skip}"));
            body.op(format!("setp.ne.u64 {p}, {}, 0", cx.part));
            body.op(format!("@{p} bra {skip}"));
            for (dst, v) in [(&dw, &sum_gx), (&db, &sum_g)] {
                let a = body.reg(Class::B64);
                body.op(format!(
                    "mad.lo.u64 {a}, {ch}, {}, {dst}",
                    dtype.size_bytes()
                ));
                cx.store_acc(body, &a, v);
            }
            body.place(&skip);
        },
    );
    body.op("ret");
    entry_text(
        &format!("{name}_backward"),
        &names,
        BATCH_NORM_BACKWARD_META_WORDS,
        body,
    )
}

/// A partial-sums entry of a channel split into parts: `NAME_stats_sum`,
/// `NAME_stats_dev` or `NAME_backward_sums`, parameters `(x, g,
/// running_mean, ws, meta)` with the backward's `meta`.
fn batch_norm_partial_entry(name: &str, dtype: DTypeKind, stage: Stage) -> String {
    let mut body = Body::new();
    let names = ["p_x", "p_g", "p_rm", "p_ws"];
    let [x, g, rm, ws] = names.map(|p| global_ptr(&mut body, p));
    channels(
        &mut body,
        dtype,
        BATCH_NORM_BACKWARD_META_WORDS,
        &ws,
        |body, cx, ch, meta| {
            let flags = &meta[6];
            let st = [meta[3].as_str(), meta[4].as_str(), meta[5].as_str()];
            let gst = [meta[8].as_str(), meta[9].as_str(), meta[10].as_str()];
            // The mean as the main entry computes it.
            let mean = |body: &mut Body| {
                let pivot = cx.pivot(body, &x, st, ch);
                let total = cx.ws_total(body, 0, ch);
                let mean = body.reg(cx.class);
                cx.mean_of(body, &mean, &total, &pivot);
                mean
            };
            match stage {
                Stage::Sum => {
                    let pivot = cx.pivot(body, &x, st, ch);
                    let sum = cx.shifted_sum(body, &x, st, ch, &pivot);
                    let t = cx.block_sum(body, &sum);
                    cx.ws_store(body, 0, ch, &t);
                }
                Stage::Dev => {
                    let mean = mean(body);
                    let sq = cx.dev_sum(body, &x, st, ch, &mean);
                    let t = cx.block_sum(body, &sq);
                    cx.ws_store(body, 1, ch, &t);
                }
                Stage::Grad => {
                    // The batch's mean in training, else the running one.
                    let m = body.reg(cx.class);
                    let eval = body.label("bn_grad_eval");
                    let done = body.label("bn_grad_mean");
                    let not_training = flag_clear(body, flags, 1);
                    body.op(format!("@{not_training} bra {eval}"));
                    let bm = mean(body);
                    body.op(format!("mov.{} {m}, {bm}", cx.ty));
                    body.op(format!("bra.uni {done}"));
                    body.place(&eval);
                    let rmv = cx.optional(body, flags, 8, &rm, ch, 0.0);
                    body.op(format!("mov.{} {m}, {rmv}", cx.ty));
                    body.place(&done);
                    let (sg, sgx, sq) = cx.grad_sums(body, (&x, st), (&g, gst), ch, &m);
                    let t = cx.block_sum(body, &sq);
                    cx.ws_store(body, 1, ch, &t);
                    let t = cx.block_sum(body, &sg);
                    cx.ws_store(body, 2, ch, &t);
                    let t = cx.block_sum(body, &sgx);
                    cx.ws_store(body, 3, ch, &t);
                }
            }
        },
    );
    body.op("ret");
    let suffix = match stage {
        Stage::Sum => "_stats_sum",
        Stage::Dev => "_stats_dev",
        Stage::Grad => "_backward_sums",
    };
    entry_text(
        &format!("{name}{suffix}"),
        &names,
        BATCH_NORM_BACKWARD_META_WORDS,
        body,
    )
}

/// The partial-sums entries, in module order.
pub(crate) fn batch_norm_partial_entries(name: &str, dtype: DTypeKind) -> Vec<String> {
    [Stage::Sum, Stage::Dev, Stage::Grad]
        .into_iter()
        .map(|st| batch_norm_partial_entry(name, dtype, st))
        .collect()
}
