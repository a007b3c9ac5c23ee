//! The two-warpgroup form of the Hopper attention backward (compute
//! capability 9.0 only, head dim 128): the parameters, outputs and
//! preprocessing entry of `attention_wgmma_bwd.rs`, whose layouts and
//! per-tile steps it shares.
//!
//! A block is two warpgroups owning [`WGMMA_BWD2_KEYS`] keys, 64 each:
//! warpgroup `w` computes `S^T`, `dP^T`, `P^T`, `dS^T`, `dV` and `dK` of
//! its 64 keys exactly as the one-warpgroup form does, against query
//! tiles of 64 whose `Q` and `dO` both warpgroups share (copied once per
//! block, by all 256 threads). `dQ = dS K` of a tile then runs over all
//! 128 keys, and warpgroup `w` computes its columns `64 w..64 w + 64`
//! (`m64n64`, `B` the region `w` of both keys' halves of `K`): against
//! the one-warpgroup form, each `dQ` element is added to global memory
//! once per 128 keys instead of once per 64 (half the
//! `red.global.add.v4.f32`, which bound that form), and a thread holds
//! 32 `dQ` accumulators instead of 64.
//!
//! Every fragment row is relative to the warp's place in its warpgroup
//! (`wi & 3`): a warpgroup's `wgmma` writes rows 16 (`wi & 3`) + g of its
//! own M = 64, so the keys of warpgroup `w` are 64 w + 16 (`wi & 3`) + g
//! of the block's.

use super::attention_mma_bwd::{prologue, Mask, Prologue};
use super::attention_wgmma_bwd::steps::{
    accumulate_kv, add_dq, aligned_shared, dq_products, entry_text, first_keys, first_tile,
    fragment, gradients, lanes, load_stats, params, probabilities, scores, stage_dq, store_ds,
    store_kv, tile_head, tile_tail, walk, Copier, Lanes, Params, GROUP_KEYS, QUERIES, REGION,
};
use super::body::{Body, Class};
use super::mma_tile::half_type;
use crate::target::Target;
use tensorfn_core::DTypeKind;

/// Keys a block of the two-warpgroup Hopper backward owns (64 a
/// warpgroup).
///
/// ```
/// assert_eq!(tensorfn_kernels::ptx::WGMMA_BWD2_KEYS, 128);
/// ```
pub const WGMMA_BWD2_KEYS: usize = 128;

/// Threads of a block of the two-warpgroup Hopper backward.
///
/// ```
/// assert_eq!(tensorfn_kernels::ptx::WGMMA_BWD2_THREADS, 256);
/// ```
pub const WGMMA_BWD2_THREADS: usize = 256;

/// Bytes of dynamic shared memory the two-warpgroup Hopper backward
/// takes at head dim `d`: `K` and `V` of the block's 128 keys (two 64-row
/// tiles each), two buffers each of `Q` and `dO`, the two warpgroups'
/// `dS^T` tiles, their `dQ` staging tiles (64 rows of 272 bytes, used by
/// the `bulk` form), and 1 KiB of slack to align them to the 1 KiB the
/// swizzle repeats over.
///
/// ```
/// use tensorfn_kernels::ptx::attention_wgmma_backward2_shared;
/// assert_eq!(
///     attention_wgmma_backward2_shared(128),
///     8 * 16384 + 2 * 8192 + 2 * 64 * 272 + 1024
/// );
/// ```
pub const fn attention_wgmma_backward2_shared(d: usize) -> usize {
    8 * 64 * d * 2 + 2 * REGION + 2 * QUERIES * STAGE_PITCH + 1024
}

/// Bytes between two query rows of a warpgroup's `dQ` staging tile (64
/// f32 columns, padded by 16 bytes so that the fragment rows of a warp
/// fall on different banks; a multiple of 16, as the bulk reductions
/// need).
const STAGE_PITCH: usize = 64 * 4 + 16;

/// The main entry `name` of the two-warpgroup Hopper backward over
/// `dtype` (f16 or bf16) with head dim `d` (128 only: each warpgroup's
/// half of `dQ`'s columns is then one 64-column swizzled region of `K`):
/// see the module's documentation. Launch with `block.x =`
/// [`WGMMA_BWD2_THREADS`], `grid.x = ceil(s /` [`WGMMA_BWD2_KEYS`]`)`,
/// `grid.y` the batch, after the preprocessing entry.
///
/// With `bulk`, a warpgroup's `dQ` of a query tile is staged in shared
/// memory and added to global memory with one
/// `cp.reduce.async.bulk .add.f32` of 256 bytes per query row (64 a
/// warpgroup, issued by its first 64 threads) instead of eight
/// `red.global.add.v4.f32` per thread.
pub(crate) fn attention_wgmma_bwd2_entry(
    name: &str,
    dtype: DTypeKind,
    d: usize,
    bulk: bool,
) -> String {
    assert_eq!(d, 128, "the two-warpgroup backward takes head dim 128");
    let ht = half_type(dtype);
    let threads = WGMMA_BWD2_THREADS;
    let keys = GROUP_KEYS;
    // dQ's columns a warpgroup computes.
    let half = d / 2;
    // Bytes of a tile (64 rows of d columns).
    let tile = 64 * d * 2;
    let mut body = Body::for_target(Target::Sm80);
    let Params { p, sl2, scale } = params(&mut body);
    // The warp's place in its warpgroup `wi` and the warpgroup `wg`.
    let lanes = lanes(&mut body, 2);
    // Blocks in key order: under `causal` the first keys have the most
    // queries, and they start first.
    let Prologue { cta, boff, bl, bs } = prologue(&mut body, &p);
    // The block's keys j0.., the warpgroup's jw = j0 + 64 wg..; the
    // thread's fragment rows 16 wi + g and 8 more (keys of S^T, dK, dV
    // from jw on; queries of dQ).
    let (j0, jw) = first_keys(&mut body, &cta, &lanes, WGMMA_BWD2_KEYS);
    let Lanes {
        tid,
        wi,
        wg: Some(wg),
        g32,
        t32,
    } = lanes
    else {
        unreachable!("a block of two warpgroups has a warpgroup index")
    };
    let f = fragment(&mut body, &wi, &g32, &t32, &jw);
    let causal = body.reg(Class::Pred);
    body.op(format!("setp.ne.u64 {causal}, {}, 0", p["p_causal"]));
    // Shared memory aligned to 1 KiB: K of the two halves of the keys, V
    // of both, Q and dO of buffer 0, of buffer 1, the two dS^T tiles.
    // `sk`, `sv` and `sds` are the warpgroup's own.
    let sk0 = aligned_shared(&mut body, name);
    let (sk, sv, sq0, sds0, sds) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("mad.lo.u32 {sk}, {wg}, {tile}, {sk0}"));
    body.op(format!("add.u32 {sv}, {sk}, {}", 2 * tile));
    body.op(format!("add.u32 {sq0}, {sk0}, {}", 4 * tile));
    body.op(format!("add.u32 {sds0}, {sk0}, {}", 8 * tile));
    body.op(format!("mad.lo.u32 {sds}, {wg}, {REGION}, {sds0}"));
    // The `bulk` form's issuing threads (the warpgroup's first 64, one
    // per query row; computed where used, as the registers are scarce).
    let issuer = |body: &mut Body| {
        let (x, is) = (body.reg(Class::B32), body.reg(Class::Pred));
        body.op(format!("and.b32 {x}, {tid}, 127"));
        body.op(format!("setp.lt.u32 {is}, {x}, {QUERIES}"));
        is
    };
    let copier = Copier::new(&mut body, &tid, threads, d);
    let g = copier.sources(&mut body, &p, &boff);
    let walk = walk(&mut body, &causal, &j0, &p["p_l"], d);
    // Both halves of the block's K and V (every thread copies a part of
    // each).
    {
        let (j1, sk1, sv0, sv1) = (
            body.reg(Class::B64),
            body.reg(Class::B32),
            body.reg(Class::B32),
            body.reg(Class::B32),
        );
        body.op(format!("add.u64 {j1}, {j0}, {keys}"));
        body.op(format!("add.u32 {sk1}, {sk0}, {tile}"));
        body.op(format!("add.u32 {sv0}, {sk0}, {}", 2 * tile));
        body.op(format!("add.u32 {sv1}, {sk0}, {}", 3 * tile));
        copier.tile(&mut body, &j0, &p["p_s"], &g.k, &sk0);
        copier.tile(&mut body, &j1, &p["p_s"], &g.k, &sk1);
        copier.tile(&mut body, &j0, &p["p_s"], &g.v, &sv0);
        copier.tile(&mut body, &j1, &p["p_s"], &g.v, &sv1);
    }
    let (buffers, desc) = first_tile(&mut body, &copier, &walk, &p["p_l"], (&sq0, tile), &g);
    let (sq, sg) = tile_head(&mut body, &copier, &walk, &p["p_l"], &buffers);
    let (s, dp) = scores(&mut body, ht, d, &desc, [&sk, &sv, &sq, &sg]);
    let (i0, lmax) = (&walk.i0, &walk.lmax);
    // The statistics of the thread's query columns i0 + 8j + 2t (+1),
    // clamped below l: -lse log2(e)
    // (0 for a row without keys), loaded once the products are done, and
    // D, loaded once P^T is (16 registers fewer while P^T is computed,
    // where two warpgroups a block leave 255 a thread).
    let rows = (i0.as_str(), lmax.as_str(), bl.as_str());
    let mls = load_stats(&mut body, &f, rows, &p["p_lse"], true);
    let mask = Mask {
        jw: &jw,
        i0,
        causal: &causal,
        l: &p["p_l"],
        s: &p["p_s"],
    };
    probabilities(&mut body, &s, &mls, &sl2, &f, &mask);
    // dS^T = P^T (dP^T - D) scale, D loaded first.
    let dcol = load_stats(&mut body, &f, rows, &p["p_delta"], false);
    let (pa, dsa) = gradients(&mut body, ht, &s, &dp, &dcol, &scale);
    store_ds(&mut body, &dsa, [&wi, &g32, &t32], &sds);
    accumulate_kv(&mut body, ht, d, &desc, &walk, (&pa, &dsa), &sg, &sq);
    // The `bulk` form: the last tile's reductions have read the staging
    // tile (the barrier below orders this before its next writes).
    if bulk {
        let is = issuer(&mut body);
        body.op(format!("@{is} cp.async.bulk.wait_group.read 0"));
    }
    // Both warpgroups' dS^T stored: the warpgroup's columns 64 wg.. of
    // dQ = dS K, M = the tile's queries (A the transposed dS^T tiles, B
    // region wg of the transposed K of each half), k-steps of 16 of the
    // block's 128 keys.
    body.op("bar.sync 0");
    let skc = body.reg(Class::B32);
    body.op(format!("mad.lo.u32 {skc}, {wg}, {REGION}, {sk0}"));
    let dq = dq_products(
        &mut body,
        ht,
        &desc,
        half,
        WGMMA_BWD2_KEYS,
        tile,
        &sds0,
        &skc,
    );
    if bulk {
        // The warpgroup's staging tile, its named barrier (1 + wg; 0 is
        // the block's).
        let (sdq, wbar) = (body.reg(Class::B32), body.reg(Class::B32));
        body.op(format!("add.u32 {sdq}, {sds0}, {}", 2 * REGION));
        body.op(format!(
            "mad.lo.u32 {sdq}, {wg}, {}, {sdq}",
            QUERIES * STAGE_PITCH
        ));
        body.op(format!("add.u32 {wbar}, {wg}, 1"));
        stage_dq(&mut body, &dq, &f, &t32, &sdq, STAGE_PITCH);
        // Made visible to the bulk copies' async proxy, then the
        // warpgroup's rows each added by one thread (rows past l left
        // out).
        body.op("fence.proxy.async.shared::cta");
        body.op(format!("bar.sync {wbar}, 128"));
        let skip = body.label("wb_dq_skip");
        let is = issuer(&mut body);
        body.op(format!("@!{is} bra.uni {skip}"));
        let (r, row) = (body.reg(Class::B32), body.reg(Class::B64));
        body.op(format!("and.b32 {r}, {tid}, 127"));
        body.op(format!("cvt.u64.u32 {row}, {r}"));
        body.op(format!("add.u64 {row}, {row}, {i0}"));
        let out = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {out}, {row}, {}", p["p_l"]));
        let (a, cw, src) = (
            body.reg(Class::B64),
            body.reg(Class::B64),
            body.reg(Class::B32),
        );
        body.op(format!("add.u64 {a}, {row}, {bl}"));
        body.op(format!("mul.lo.u64 {a}, {a}, {d}"));
        body.op(format!("mul.wide.u32 {cw}, {wg}, {half}"));
        body.op(format!("add.u64 {a}, {a}, {cw}"));
        body.op(format!("mad.lo.u64 {a}, {a}, 4, {}", p["p_dqa"]));
        body.op(format!("mad.lo.u32 {src}, {r}, {STAGE_PITCH}, {sdq}"));
        body.op(format!(
            "@!{out} cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [{a}], [{src}], {}",
            half * 4
        ));
        body.op("cp.async.bulk.commit_group");
        body.place(&skip);
    } else {
        let rows = (
            i0.as_str(),
            bl.as_str(),
            p["p_l"].as_str(),
            p["p_dqa"].as_str(),
        );
        add_dq(&mut body, &dq, &f, &t32, rows, d, Some((&wg, half)));
    }
    tile_tail(&mut body, &walk, &p["p_l"], &buffers);
    if bulk {
        // The shared memory the reductions read stays until they have.
        let is = issuer(&mut body);
        body.op(format!("@{is} cp.async.bulk.wait_group.read 0"));
    }
    store_kv(&mut body, ht, d, &f, &walk, &bs, &p);
    body.op("ret");
    entry_text(name, threads, body)
}
