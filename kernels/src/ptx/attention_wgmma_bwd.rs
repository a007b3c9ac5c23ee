//! The Hopper form of the tensor-core attention backward (compute
//! capability 9.0 only: its PTX targets `sm_90a`; every other device
//! takes `attention_mma_bwd.rs`), with the parameters, outputs and
//! preprocessing entry of that backward.
//!
//! A block is one warpgroup owning [`WGMMA_BWD_KEYS`] keys: their `K` and
//! `V` are copied into shared memory once, then the block walks the
//! query tiles of 64 (under `causal`, those at or after its first key),
//! the next tile's `Q` and `dO` copied with 16-byte `cp.async` into a
//! second buffer while the current one is computed on. Every tile uses
//! the forward's layout (`attention_wgmma.rs`): 64 rows of 128-byte
//! swizzled regions, the columns 64.. of head dim 128 in a second region.
//! Per query tile (M = the block's 64 keys, f32 accumulation):
//!
//! - `S^T = K Q^T` and `dP^T = V dO^T`, both operands from shared memory,
//!   K-major;
//! - `P^T = 2^(S^T scale log2(e) - lse log2(e))` and `dS^T = P^T (dP^T -
//!   D) scale` on the accumulator fragments, the row statistics per
//!   query column;
//! - `dV += P^T dO` and `dK += dS^T Q`, `P^T` and `dS^T` rounded to the
//!   dtype as register `A` operands, `dO` and `Q` the transposed
//!   (MN-major) `B` operands;
//! - `dS^T` stored into a swizzled tile, then `dQ = dS K` with M = the 64
//!   queries (`A` the transposed `dS^T` tile, `B` the transposed `K`),
//!   added into the f32 buffer with `red.global.add.f32`.
//!
//! At the end `dK` and `dV` (already scaled) are rounded and stored.

use super::attention_mma_bwd::{lse_term, prologue, Mask, Prologue};
use super::body::{Body, Class};
use super::mma_tile::half_type;
use crate::target::Target;
use steps::{
    accumulate_kv, add_dq, aligned_shared, dq_products, entry_text, first_keys, first_tile,
    fragment, gradients, lanes, params, probabilities, scores, store_ds, store_kv, tile_head,
    tile_tail, walk, Copier, Lanes, Params, GROUP_KEYS, QUERIES, REGION,
};
use tensorfn_core::DTypeKind;

pub(super) mod steps;

/// The PTX header of the module: `wgmma` needs `sm_90a`, and
/// `red.global.add.v4.f32` PTX ISA 8.1.
pub(crate) const SM90A_RED_HEADER: &str = ".version 8.1\n.target sm_90a\n.address_size 64\n";

/// Keys a block of the Hopper backward owns (one warpgroup's `M`).
///
/// ```
/// assert_eq!(tensorfn_kernels::ptx::WGMMA_BWD_KEYS, 64);
/// ```
pub const WGMMA_BWD_KEYS: usize = GROUP_KEYS;

/// Threads of a block of the Hopper backward (one warpgroup).
///
/// ```
/// assert_eq!(tensorfn_kernels::ptx::WGMMA_BWD_THREADS, 128);
/// ```
pub const WGMMA_BWD_THREADS: usize = 128;

/// Bytes of dynamic shared memory the Hopper backward takes at head dim
/// `d`: `K` and `V` of the block, two buffers each of `Q` and `dO`, the
/// `dS^T` tile, and 1 KiB of slack to align them to the 1 KiB the
/// swizzle repeats over.
///
/// ```
/// use tensorfn_kernels::ptx::attention_wgmma_backward_shared;
/// assert_eq!(attention_wgmma_backward_shared(64), 6 * 8192 + 8192 + 1024);
/// assert_eq!(attention_wgmma_backward_shared(128), 6 * 16384 + 8192 + 1024);
/// ```
pub const fn attention_wgmma_backward_shared(d: usize) -> usize {
    6 * 64 * d * 2 + REGION + 1024
}

/// The main entry `name` of the Hopper backward over `dtype` (f16 or
/// bf16) with head dim `d` (64 or 128): see the module's documentation.
/// Launch with `block.x =` [`WGMMA_BWD_THREADS`], `grid.x = ceil(s /`
/// [`WGMMA_BWD_KEYS`]`)`, `grid.y` the batch, after the preprocessing
/// entry.
pub(crate) fn attention_wgmma_bwd_entry(name: &str, dtype: DTypeKind, d: usize) -> String {
    let ht = half_type(dtype);
    let threads = WGMMA_BWD_THREADS;
    let keys = WGMMA_BWD_KEYS;
    // Bytes of a tile (64 rows of d columns).
    let tile = 64 * d * 2;
    let mut body = Body::for_target(Target::Sm80);
    let Params { p, sl2, scale } = params(&mut body);
    let lanes = lanes(&mut body, 1);
    // Blocks in key order: under `causal` the first keys have the most
    // queries, and they start first.
    let Prologue { cta, boff, bl, bs } = prologue(&mut body, &p);
    // The block's keys j0..; the thread's fragment rows (keys of S^T, dK,
    // dV; queries of dQ).
    let (j0, _) = first_keys(&mut body, &cta, &lanes, keys);
    let Lanes {
        tid, wi, g32, t32, ..
    } = lanes;
    let f = fragment(&mut body, &wi, &g32, &t32, &j0);
    let causal = body.reg(Class::Pred);
    body.op(format!("setp.ne.u64 {causal}, {}, 0", p["p_causal"]));
    // Shared memory aligned to 1 KiB: K, V, Q and dO of buffer 0, of
    // buffer 1, dS^T.
    let sk = aligned_shared(&mut body, name);
    let (sv, sq0, sds) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("add.u32 {sv}, {sk}, {tile}"));
    body.op(format!("add.u32 {sq0}, {sk}, {}", 2 * tile));
    body.op(format!("add.u32 {sds}, {sk}, {}", 6 * tile));
    let copier = Copier::new(&mut body, &tid, threads, d);
    let g = copier.sources(&mut body, &p, &boff);
    let walk = walk(&mut body, &causal, &j0, &p["p_l"], d);
    copier.tile(&mut body, &j0, &p["p_s"], &g.k, &sk);
    copier.tile(&mut body, &j0, &p["p_s"], &g.v, &sv);
    let (buffers, desc) = first_tile(&mut body, &copier, &walk, &p["p_l"], (&sq0, tile), &g);
    let (sq, sg) = tile_head(&mut body, &copier, &walk, &p["p_l"], &buffers);
    let (s, dp) = scores(&mut body, ht, d, &desc, [&sk, &sv, &sq, &sg]);
    let (i0, lmax) = (&walk.i0, &walk.lmax);
    // The statistics of the thread's query columns i0 + 8j + 2t (+1),
    // clamped below l: -lse log2(e) (0 for a row without keys) and D,
    // loaded once the products are done (32 registers fewer while they
    // run).
    let (mls, dcol): (Vec<String>, Vec<String>) = {
        let c0 = body.reg(Class::B64);
        body.op(format!("add.u64 {c0}, {}, {i0}", f.col));
        (0..QUERIES / 4)
            .map(|i| {
                let qi = body.reg(Class::B64);
                body.op(format!("add.u64 {qi}, {c0}, {}", (i / 2) * 8 + (i % 2)));
                body.op(format!("min.u64 {qi}, {qi}, {lmax}"));
                body.op(format!("add.u64 {qi}, {qi}, {bl}"));
                let (al, ad) = (body.reg(Class::B64), body.reg(Class::B64));
                body.op(format!("mad.lo.u64 {al}, {qi}, 4, {}", p["p_lse"]));
                body.op(format!("mad.lo.u64 {ad}, {qi}, 4, {}", p["p_delta"]));
                let (m, dd) = (body.reg(Class::F32), body.reg(Class::F32));
                body.op(format!("ld.global.nc.f32 {m}, [{al}]"));
                body.op(format!("ld.global.f32 {dd}, [{ad}]"));
                lse_term(&mut body, &m);
                (m, dd)
            })
            .unzip()
    };
    let mask = Mask {
        jw: &j0,
        i0,
        causal: &causal,
        l: &p["p_l"],
        s: &p["p_s"],
    };
    probabilities(&mut body, &s, &mls, &sl2, &f, &mask);
    let (pa, dsa) = gradients(&mut body, ht, &s, &dp, &dcol, &scale);
    store_ds(&mut body, &dsa, [&wi, &g32, &t32], &sds);
    accumulate_kv(&mut body, ht, d, &desc, &walk, (&pa, &dsa), &sg, &sq);
    // Every warp's dS^T stored: dQ = dS K, M = the tile's queries (A the
    // transposed dS^T tile, B the transposed K), k-steps of 16 keys.
    body.op("bar.sync 0");
    let dq = dq_products(&mut body, ht, &desc, d, keys, tile, &sds, &sk);
    let rows = (
        i0.as_str(),
        bl.as_str(),
        p["p_l"].as_str(),
        p["p_dqa"].as_str(),
    );
    add_dq(&mut body, &dq, &f, &t32, rows, d, None);
    tile_tail(&mut body, &walk, &p["p_l"], &buffers);
    store_kv(&mut body, ht, d, &f, &walk, &bs, &p);
    body.op("ret");
    entry_text(name, threads, body)
}
