//! Emitters shared by the tensor-core attention entries (the forward in
//! `attention.rs`, the backward in `attention_mma_bwd.rs`): their 64-bit
//! parameters, the lanes' roles in `mma.sync.m16n8k16` fragments, reads
//! of swizzled shared tiles with `ldmatrix`, the products, and the
//! packing of f32 accumulators into 16-bit `A` fragments.

use super::body::{Body, Class};
use std::collections::HashMap;
use tensorfn_core::DTypeKind;

/// `log2(e)`, which folds into the scale so that `exp(x) = 2^(x log2 e)`.
pub(super) const LOG2_E: f64 = std::f64::consts::LOG2_E;

/// The PTX name of the 16-bit `dtype` (f16 or bf16) of the products.
pub(super) fn half_type(dtype: DTypeKind) -> &'static str {
    if dtype == DTypeKind::F16 {
        "f16"
    } else {
        "bf16"
    }
}

/// The `.param` list of an entry whose parameters `names` are all 64
/// bits: `p_scale` an f64, the others u64.
pub(super) fn entry_params(names: &[&str]) -> String {
    let p: Vec<String> = names
        .iter()
        .map(|n| {
            let ty = if *n == "p_scale" { "f64" } else { "u64" };
            format!("\t.param .{ty} {n}")
        })
        .collect();
    p.join(",\n")
}

/// Loads the u64 parameters `names` (all but `p_scale`, read on its own)
/// into registers, the addresses named in `global` converted to the
/// global space.
pub(super) fn load_params<'a>(
    body: &mut Body,
    names: &[&'a str],
    global: &[&str],
) -> HashMap<&'a str, String> {
    let mut p = HashMap::new();
    for &n in names {
        if n == "p_scale" {
            continue;
        }
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{n}]"));
        p.insert(n, r);
    }
    for n in global {
        body.op(format!("cvta.to.global.u64 {0}, {0}", p[n]));
    }
    p
}

/// `p_scale * log2(e)` in f32 (rounded once, from the f64 product).
pub(super) fn scale_log2(body: &mut Body) -> String {
    let sl2 = body.reg(Class::F32);
    let s64 = body.reg(Class::F64);
    body.op(format!("ld.param.f64 {s64}, [p_scale]"));
    let l2e = body.reg(Class::F64);
    body.op(format!("mov.f64 {l2e}, 0d{:016X}", LOG2_E.to_bits()));
    body.op(format!("mul.rn.f64 {s64}, {s64}, {l2e}"));
    body.op(format!("cvt.rn.f32.f64 {sl2}, {s64}"));
    sl2
}

/// A thread's roles: its index in the block, lane and warp, and in an
/// `m16n8k16` fragment its group `g = lane / 4` (the row, and row + 8)
/// and `tg = lane % 4` (the column pair), as u32 and u64.
pub(super) struct Lanes {
    pub tid: String,
    pub lane: String,
    pub warp: String,
    pub g32: String,
    pub t32: String,
    pub g: String,
    pub tg: String,
}

/// Emits the registers of [`Lanes`].
pub(super) fn lanes(body: &mut Body) -> Lanes {
    let (tid, lane, warp) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("mov.u32 {tid}, %tid.x"));
    body.op(format!("and.b32 {lane}, {tid}, 31"));
    body.op(format!("shr.u32 {warp}, {tid}, 5"));
    let (g32, t32) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("shr.u32 {g32}, {lane}, 2"));
    body.op(format!("and.b32 {t32}, {lane}, 3"));
    let (g, tg) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("cvt.u64.u32 {g}, {g32}"));
    body.op(format!("cvt.u64.u32 {tg}, {t32}"));
    Lanes {
        tid,
        lane,
        warp,
        g32,
        t32,
        g,
        tg,
    }
}

/// The byte offset of 16-byte chunk `chunk` of row `row` in a tile of
/// `row_bytes`-byte rows, swizzled (at `chunk ^ (row & 7)`) so that the
/// eight rows an `ldmatrix` matrix reads fall in distinct banks.
pub(super) fn swizzle(body: &mut Body, row: &str, chunk: &str, row_bytes: usize) -> String {
    let (x, o) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("and.b32 {x}, {row}, 7"));
    body.op(format!("xor.b32 {x}, {x}, {chunk}"));
    body.op(format!("shl.b32 {x}, {x}, 4"));
    body.op(format!("mad.lo.u32 {o}, {row}, {row_bytes}, {x}"));
    o
}

/// `ldmatrix.x4` (`.trans` when `trans`) of four 8x8 16-bit matrices,
/// the lane's row at shared address `addr + off`.
pub(super) fn ldmatrix_x4(body: &mut Body, trans: bool, addr: &str, off: usize) -> [String; 4] {
    let r = [0, 1, 2, 3].map(|_| body.reg(Class::B32));
    let t = if trans { ".trans" } else { "" };
    body.op(format!(
        "ldmatrix.sync.aligned.m8n8.x4{t}.shared.b16 {{{}, {}, {}, {}}}, [{addr}+{off}]",
        r[0], r[1], r[2], r[3]
    ));
    r
}

/// Emits `mma.sync.m16n8k16` (f32 accumulation) on `acc` += `a` `b`.
pub(super) fn mma(body: &mut Body, ht: &str, acc: &[String; 4], a: &[String; 4], b: [&str; 2]) {
    mma_from(body, ht, acc, a, b, acc);
}

/// Emits `mma.sync.m16n8k16` (f32 accumulation): `acc` = `a` `b` + `c`.
pub(super) fn mma_from(
    body: &mut Body,
    ht: &str,
    acc: &[String; 4],
    a: &[String; 4],
    b: [&str; 2],
    c: &[String; 4],
) {
    body.op(format!(
        "mma.sync.aligned.m16n8k16.row.col.f32.{ht}.{ht}.f32 {{{}, {}, {}, {}}}, {{{}, {}, {}, {}}}, {{{}, {}}}, {{{}, {}, {}, {}}}",
        acc[0], acc[1], acc[2], acc[3], a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], c[2], c[3]
    ));
}

/// The f32 `C` fragments `x` of n-tiles 0, 1, .. (8 columns each) packed
/// as `A` fragments of 16 columns (two n-tiles each), rounded to `ht`: a
/// product's result reused as the next product's left operand without
/// leaving registers.
pub(super) fn pack_a(body: &mut Body, ht: &str, x: &[[String; 4]]) -> Vec<[String; 4]> {
    let regs: Vec<[String; 4]> = x
        .chunks(2)
        .map(|_| [0, 1, 2, 3].map(|_| body.reg(Class::B32)))
        .collect();
    pack_a_into(body, ht, x, &regs);
    regs
}

/// [`pack_a`] into the given registers `regs` (four a pair of tiles of
/// `x`), for a loop that carries them from one pass to the next.
pub(super) fn pack_a_into(body: &mut Body, ht: &str, x: &[[String; 4]], regs: &[[String; 4]]) {
    for (pair, regs) in x.chunks(2).zip(regs) {
        let (t0, t1) = (&pair[0], &pair[1]);
        for (i, (lo, hi)) in [
            (&t0[0], &t0[1]),
            (&t0[2], &t0[3]),
            (&t1[0], &t1[1]),
            (&t1[2], &t1[3]),
        ]
        .into_iter()
        .enumerate()
        {
            body.op(format!("cvt.rn.{ht}x2.f32 {}, {hi}, {lo}", regs[i]));
        }
    }
}
