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

use super::attention_mma_bwd::{prologue, Prologue, MMA_BWD_PARAMS};
use super::attention_wgmma::{desc_bits, list, swizzled_slot, ATOM_ROW};
use super::body::{Body, Class};
use super::mma_tile::{entry_params, half_type, load_params, pack_a, scale_log2, LOG2_E};
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

/// Keys of one warpgroup (its `M`).
const GROUP_KEYS: usize = 64;

/// Queries a tile of `Q` and `dO` holds.
const QUERIES: usize = 64;

/// Bytes of one 64-row swizzled region (64 rows of 128 bytes).
const REGION: usize = 64 * ATOM_ROW;

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
    let (neg_inf, zero) = ("0fFF800000", "0f00000000");
    let nl2e = format!("0f{:08X}", (-LOG2_E as f32).to_bits());
    let threads = WGMMA_BWD2_THREADS;
    let keys = GROUP_KEYS;
    // dQ's columns a warpgroup computes.
    let half = d / 2;
    // Bytes of a tile (64 rows of d columns), 16-byte chunks of a row and
    // the rows one pass of the block's copies covers.
    let tile = 64 * d * 2;
    let chunks = d / 8;
    let pass_rows = threads / chunks;
    let mut body = Body::for_target(Target::Sm80);
    let p = load_params(
        &mut body,
        &MMA_BWD_PARAMS,
        &[
            "p_dqa", "p_dk", "p_dv", "p_delta", "p_lse", "p_go", "p_q", "p_k", "p_v",
        ],
    );
    let sl2 = scale_log2(&mut body);
    let scale = body.reg(Class::F32);
    {
        let s64 = body.reg(Class::F64);
        body.op(format!("ld.param.f64 {s64}, [p_scale]"));
        body.op(format!("cvt.rn.f32.f64 {scale}, {s64}"));
    }
    // The warp's place in its warpgroup `wi` and the warpgroup `wg`.
    let (tid, lane, wi, wg, g32, t32) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("mov.u32 {tid}, %tid.x"));
    body.op(format!("and.b32 {lane}, {tid}, 31"));
    body.op(format!("shr.u32 {wg}, {tid}, 7"));
    body.op(format!("shr.u32 {wi}, {tid}, 5"));
    body.op(format!("and.b32 {wi}, {wi}, 3"));
    body.op(format!("shr.u32 {g32}, {lane}, 2"));
    body.op(format!("and.b32 {t32}, {lane}, 3"));
    // Blocks in key order: under `causal` the first keys have the most
    // queries, and they start first.
    let Prologue { cta, boff, bl, bs } = prologue(&mut body, &p);
    // The block's keys j0.., the warpgroup's jw = j0 + 64 wg..; the
    // thread's fragment rows 16 wi + g and 8 more (keys of S^T, dK, dV
    // from jw on; queries of dQ).
    let (j0, jw) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("mul.wide.u32 {j0}, {cta}, {WGMMA_BWD2_KEYS}"));
    {
        let x = body.reg(Class::B64);
        body.op(format!("mul.wide.u32 {x}, {wg}, {keys}"));
        body.op(format!("add.u64 {jw}, {j0}, {x}"));
    }
    let (fra, frb) = (body.reg(Class::B64), body.reg(Class::B64));
    {
        let x = body.reg(Class::B32);
        body.op(format!("mad.lo.u32 {x}, {wi}, 16, {g32}"));
        body.op(format!("cvt.u64.u32 {fra}, {x}"));
        body.op(format!("add.u64 {frb}, {fra}, 8"));
    }
    let (ka, kb) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("add.u64 {ka}, {jw}, {fra}"));
    body.op(format!("add.u64 {kb}, {jw}, {frb}"));
    // The thread's column pair 2t within an 8-column tile.
    let col = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {col}, {t32}, 2"));
    let causal = body.reg(Class::Pred);
    body.op(format!("setp.ne.u64 {causal}, {}, 0", p["p_causal"]));
    // Shared memory aligned to 1 KiB: K of the two halves of the keys, V
    // of both, Q and dO of buffer 0, of buffer 1, the two dS^T tiles.
    // `sk`, `sv` and `sds` are the warpgroup's own.
    let sk0 = body.reg(Class::B32);
    body.op(format!("mov.u32 {sk0}, {name}_smem"));
    body.op(format!("add.u32 {sk0}, {sk0}, 1023"));
    body.op(format!("and.b32 {sk0}, {sk0}, -1024"));
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
    // The thread's copy slot: chunk `cchunk` of rows `crow + k pass_rows`
    // (every pass's rows share crow % 8, as pass_rows is a multiple of 8).
    let (crow, cchunk) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!(
        "shr.u32 {crow}, {tid}, {}",
        chunks.trailing_zeros()
    ));
    body.op(format!("and.b32 {cchunk}, {tid}, {}", chunks - 1));
    let slot = swizzled_slot(&mut body, &crow, &cchunk, REGION);
    let (crow64, cbytes) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("cvt.u64.u32 {crow64}, {crow}"));
    body.op(format!("cvt.u64.u32 {cbytes}, {cchunk}"));
    body.op(format!("shl.b64 {cbytes}, {cbytes}, 4"));
    // Byte address of (row 0, the thread's chunk) of an operand whose
    // batch starts `boff` elements in, and its row stride in bytes.
    let source = |body: &mut Body, ptr: &str, boff: &str, rs: &str| {
        let (a, rs2) = (body.reg(Class::B64), body.reg(Class::B64));
        body.op(format!("mad.lo.u64 {a}, {boff}, 2, {ptr}"));
        body.op(format!("add.u64 {a}, {a}, {cbytes}"));
        body.op(format!("shl.b64 {rs2}, {rs}, 1"));
        (a, rs2)
    };
    let gk = source(&mut body, &p["p_k"], &boff["k"], &p["p_kr"]);
    let gv = source(&mut body, &p["p_v"], &boff["v"], &p["p_vr"]);
    let gq = source(&mut body, &p["p_q"], &boff["q"], &p["p_qr"]);
    let gg = source(&mut body, &p["p_go"], &boff["go"], &p["p_gor"]);
    // Copies the 64 rows from row `first` on of an operand of `limit`
    // rows into the tile at `dst`, rows past `limit` zero-filled (read
    // from a clamped address).
    let copy = |body: &mut Body, first: &str, limit: &str, (src, rs2): (&str, &str), dst: &str| {
        let lmax = body.reg(Class::B64);
        body.op(format!("sub.u64 {lmax}, {limit}, 1"));
        let s = body.reg(Class::B32);
        body.op(format!("add.u32 {s}, {dst}, {slot}"));
        for ps in 0..64 / pass_rows {
            let r = body.reg(Class::B64);
            body.op(format!("add.u64 {r}, {first}, {crow64}"));
            if ps > 0 {
                body.op(format!("add.u64 {r}, {r}, {}", ps * pass_rows));
            }
            let inside = body.reg(Class::Pred);
            body.op(format!("setp.lt.u64 {inside}, {r}, {limit}"));
            body.op(format!("min.u64 {r}, {r}, {lmax}"));
            let a = body.reg(Class::B64);
            body.op(format!("mad.lo.u64 {a}, {r}, {rs2}, {src}"));
            let n = body.reg(Class::B32);
            body.op(format!("selp.u32 {n}, 16, 0, {inside}"));
            body.op(format!(
                "cp.async.cg.shared.global [{s}+{}], [{a}], 16, {n}",
                ps * pass_rows * ATOM_ROW
            ));
        }
    };
    // Query tiles i0 = first.. (under `causal`, from the one holding key
    // j0: j0 is a multiple of 64).
    let i0 = body.reg(Class::B64);
    body.op(format!("mov.u64 {i0}, 0"));
    body.op(format!("@{causal} mov.u64 {i0}, {j0}"));
    let lmax = body.reg(Class::B64);
    body.op(format!("sub.u64 {lmax}, {}, 1", p["p_l"]));
    // dK and dV as m64nD accumulators (d / 2 registers: of 8-column tile
    // j, [4j, 4j + 1] in row fra and [4j + 2, 4j + 3] in row frb).
    let acc = |body: &mut Body, n: usize| -> Vec<String> {
        let r: Vec<String> = (0..n / 2).map(|_| body.reg(Class::F32)).collect();
        for x in &r {
            body.op(format!("mov.f32 {x}, {zero}"));
        }
        r
    };
    let dv = acc(&mut body, d);
    let dk = acc(&mut body, d);
    let (lp, done) = (body.label("wb_queries"), body.label("wb_done"));
    {
        let none = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {none}, {i0}, {}", p["p_l"]));
        body.op(format!("@{none} bra.uni {done}"));
    }
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
        copy(&mut body, &j0, &p["p_s"], (&gk.0, &gk.1), &sk0);
        copy(&mut body, &j1, &p["p_s"], (&gk.0, &gk.1), &sk1);
        copy(&mut body, &j0, &p["p_s"], (&gv.0, &gv.1), &sv0);
        copy(&mut body, &j1, &p["p_s"], (&gv.0, &gv.1), &sv1);
    }
    {
        let sg0 = body.reg(Class::B32);
        body.op(format!("add.u32 {sg0}, {sq0}, {tile}"));
        copy(&mut body, &i0, &p["p_l"], (&gq.0, &gq.1), &sq0);
        copy(&mut body, &i0, &p["p_l"], (&gg.0, &gg.1), &sg0);
    }
    body.op("cp.async.commit_group");
    // Descriptors (the tile's address added per use): K-major with 8-row
    // groups 1 KiB apart, MN-major with the 64-column regions REGION
    // apart.
    let kmajor = desc_bits(16, 8 * ATOM_ROW);
    let mnmajor = desc_bits(REGION, 8 * ATOM_ROW);
    // The fields above bit 32 (the stride and the swizzle) are the same
    // for both, and only the low word varies: built in 32 bits, so that
    // the descriptors ptxas keeps across the loop take a register each.
    assert_eq!(kmajor >> 32, mnmajor >> 32);
    let high = body.reg(Class::B32);
    body.op(format!("mov.u32 {high}, {}", kmajor >> 32));
    // The descriptor of the tile at shared address `addr` plus `off`
    // bytes (`bits` the fixed fields).
    let desc_at = |body: &mut Body, bits: u64, addr: &str, off: usize| {
        let (lo, dd) = (body.reg(Class::B32), body.reg(Class::B64));
        body.op(format!("add.u32 {lo}, {addr}, {off}"));
        body.op(format!("shr.u32 {lo}, {lo}, 4"));
        body.op(format!("or.b32 {lo}, {lo}, {}", bits & 0xffff_ffff));
        body.op(format!("mov.b64 {dd}, {{{lo}, {high}}}"));
        dd
    };
    let (ptrue, pfalse) = (body.reg(Class::Pred), body.reg(Class::Pred));
    body.op(format!("setp.eq.u32 {ptrue}, 0, 0"));
    body.op(format!("setp.ne.u32 {pfalse}, 0, 0"));
    // The byte offset of the current buffer (0 or 2 tiles).
    let buf = body.reg(Class::B32);
    body.op(format!("mov.u32 {buf}, 0"));
    body.place(&lp);
    // Every thread is past the last tile (its Q and dO in the other
    // buffer, its dS^T read): the next tile's copy may start.
    body.op("bar.sync 0");
    let (sq, sg) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("add.u32 {sq}, {sq0}, {buf}"));
    body.op(format!("add.u32 {sg}, {sq}, {tile}"));
    {
        let next = body.reg(Class::B64);
        body.op(format!("add.u64 {next}, {i0}, {QUERIES}"));
        let last = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {last}, {next}, {}", p["p_l"]));
        let no_copy = body.label("wb_no_copy");
        body.op(format!("@{last} bra.uni {no_copy}"));
        let (nq, ng) = (body.reg(Class::B32), body.reg(Class::B32));
        body.op(format!("xor.b32 {nq}, {buf}, {}", 2 * tile));
        body.op(format!("add.u32 {nq}, {nq}, {sq0}"));
        body.op(format!("add.u32 {ng}, {nq}, {tile}"));
        copy(&mut body, &next, &p["p_l"], (&gq.0, &gq.1), &nq);
        copy(&mut body, &next, &p["p_l"], (&gg.0, &gg.1), &ng);
        body.place(&no_copy);
        body.op("cp.async.commit_group");
    }
    // This tile arrived: each thread's copies made visible to the async
    // proxy `wgmma` reads through, then everyone's.
    body.op("cp.async.wait_group 1");
    body.op("fence.proxy.async.shared::cta");
    body.op("bar.sync 0");
    // S^T = K Q^T and dP^T = V dO^T: k-steps of 16 columns, 32 bytes into
    // a region's rows.
    let s: Vec<String> = (0..QUERIES / 2).map(|_| body.reg(Class::F32)).collect();
    let dp: Vec<String> = (0..QUERIES / 2).map(|_| body.reg(Class::F32)).collect();
    body.op("wgmma.fence.sync.aligned");
    for (out, a, bt) in [(&s, &sk, &sq), (&dp, &sv, &sg)] {
        for ks in 0..d / 16 {
            let off = (ks / 4) * REGION + (ks % 4) * 32;
            let ad = desc_at(&mut body, kmajor, a, off);
            let bd = desc_at(&mut body, kmajor, bt, off);
            let accum = if ks == 0 { &pfalse } else { &ptrue };
            body.op(format!(
                "wgmma.mma_async.sync.aligned.m64n{QUERIES}k16.f32.{ht}.{ht} {}, {ad}, {bd}, {accum}, 1, 1, 0, 0",
                list(out)
            ));
        }
    }
    body.op("wgmma.commit_group.sync.aligned");
    body.op("wgmma.wait_group.sync.aligned 0");
    // The statistics of the thread's query columns i0 + 8j + 2t (+1),
    // clamped below l: -lse log2(e)
    // (0 for a row without keys), loaded once the products are done, and
    // D, loaded once P^T is (16 registers fewer while P^T is computed,
    // where two warpgroups a block leave 255 a thread).
    // (Addresses computed at each load: kept, they would take 32
    // registers.)
    let stat_at = |body: &mut Body, i: usize, ptr: &str| {
        let qi = body.reg(Class::B64);
        body.op(format!("add.u64 {qi}, {col}, {i0}"));
        body.op(format!("add.u64 {qi}, {qi}, {}", (i / 2) * 8 + (i % 2)));
        body.op(format!("min.u64 {qi}, {qi}, {lmax}"));
        body.op(format!("add.u64 {qi}, {qi}, {bl}"));
        body.op(format!("mad.lo.u64 {qi}, {qi}, 4, {ptr}"));
        qi
    };
    let mls: Vec<String> = (0..QUERIES / 4)
        .map(|i| {
            let (a, m) = (stat_at(&mut body, i, &p["p_lse"]), body.reg(Class::F32));
            body.op(format!("ld.global.nc.f32 {m}, [{a}]"));
            let inf = body.reg(Class::Pred);
            body.op(format!("setp.eq.f32 {inf}, {m}, {neg_inf}"));
            body.op(format!("mul.rn.f32 {m}, {m}, {nl2e}"));
            body.op(format!("@{inf} mov.f32 {m}, {zero}"));
            m
        })
        .collect();
    // Register i of an accumulator with 64 query columns: tile i / 4,
    // column 2t + (i & 1), row fra (i % 4 < 2) or frb; its statistic.
    let stat = |i: usize| (i / 4) * 2 + (i & 1);
    // P^T, 0 past the queries, past the keys and, under `causal`, for a
    // key past its query (only on the tiles that reach any of those).
    {
        for (i, r) in s.iter().enumerate() {
            body.op(format!("fma.rn.f32 {r}, {r}, {sl2}, {}", mls[stat(i)]));
        }
        let edge = body.reg(Class::Pred);
        let (t, e2) = (body.reg(Class::B64), body.reg(Class::Pred));
        body.op(format!("add.u64 {t}, {i0}, {QUERIES}"));
        body.op(format!("setp.gt.u64 {edge}, {t}, {}", p["p_l"]));
        body.op(format!("add.u64 {t}, {jw}, {keys}"));
        body.op(format!("setp.gt.u64 {e2}, {t}, {}", p["p_s"]));
        body.op(format!("or.pred {edge}, {edge}, {e2}"));
        body.op(format!("add.u64 {t}, {jw}, {}", keys - 1));
        body.op(format!("setp.gt.u64 {e2}, {t}, {i0}"));
        body.op(format!("and.pred {e2}, {e2}, {causal}"));
        body.op(format!("or.pred {edge}, {edge}, {e2}"));
        let inner = body.label("wb_inner");
        body.op(format!("@!{edge} bra.uni {inner}"));
        let c0 = body.reg(Class::B64);
        body.op(format!("add.u64 {c0}, {col}, {i0}"));
        for (i, r) in s.iter().enumerate() {
            let qi = body.reg(Class::B64);
            body.op(format!("add.u64 {qi}, {c0}, {}", (i / 4) * 8 + (i & 1)));
            let key = if i % 4 < 2 { &ka } else { &kb };
            let (out, late) = (body.reg(Class::Pred), body.reg(Class::Pred));
            body.op(format!("setp.ge.u64 {out}, {qi}, {}", p["p_l"]));
            body.op(format!("setp.ge.u64 {late}, {key}, {}", p["p_s"]));
            body.op(format!("or.pred {out}, {out}, {late}"));
            body.op(format!("setp.gt.u64 {late}, {key}, {qi}"));
            body.op(format!("and.pred {late}, {late}, {causal}"));
            body.op(format!("or.pred {out}, {out}, {late}"));
            body.op(format!("@{out} mov.f32 {r}, {neg_inf}"));
        }
        body.place(&inner);
        for r in &s {
            body.op(format!("ex2.approx.ftz.f32 {r}, {r}"));
        }
    }
    // dS^T = P^T (dP^T - D) scale.
    let dcol: Vec<String> = (0..QUERIES / 4)
        .map(|i| {
            let (a, dd) = (stat_at(&mut body, i, &p["p_delta"]), body.reg(Class::F32));
            body.op(format!("ld.global.f32 {dd}, [{a}]"));
            dd
        })
        .collect();
    for (i, (r, pr)) in dp.iter().zip(&s).enumerate() {
        body.op(format!("sub.rn.f32 {r}, {r}, {}", dcol[stat(i)]));
        body.op(format!("mul.rn.f32 {r}, {r}, {pr}"));
        body.op(format!("mul.rn.f32 {r}, {r}, {scale}"));
    }
    let quads = |x: &[String]| -> Vec<[String; 4]> {
        x.chunks(4)
            .map(|c| [c[0].clone(), c[1].clone(), c[2].clone(), c[3].clone()])
            .collect()
    };
    let pa = pack_a(&mut body, ht, &quads(&s));
    let dsa = pack_a(&mut body, ht, &quads(&dp));
    // dS^T into its tile: register i of chunk kc holds key row fra (i
    // even) or frb, query columns 16 kc + 8 (i / 2) + 2t (+1), i.e. chunk
    // 2 kc + i / 2, swizzled by the row's low bits (g for both rows).
    {
        let (rowa, t4) = (body.reg(Class::B32), body.reg(Class::B32));
        body.op(format!("mad.lo.u32 {rowa}, {wi}, {}, {sds}", 16 * ATOM_ROW));
        body.op(format!("mad.lo.u32 {rowa}, {g32}, {ATOM_ROW}, {rowa}"));
        body.op(format!("shl.b32 {t4}, {t32}, 2"));
        body.op(format!("add.u32 {rowa}, {rowa}, {t4}"));
        for chunk in 0..QUERIES / 8 {
            let c = body.reg(Class::B32);
            body.op(format!("xor.b32 {c}, {g32}, {chunk}"));
            body.op(format!("shl.b32 {c}, {c}, 4"));
            body.op(format!("add.u32 {c}, {c}, {rowa}"));
            let (kc, hi) = (chunk / 2, chunk % 2);
            body.op(format!("st.shared.b32 [{c}], {}", dsa[kc][2 * hi]));
            body.op(format!(
                "st.shared.b32 [{c}+{}], {}",
                8 * ATOM_ROW,
                dsa[kc][2 * hi + 1]
            ));
        }
    }
    body.op("fence.proxy.async.shared::cta");
    // dV += P^T dO and dK += dS^T Q: k-steps of 16 queries, 16 rows of
    // the MN-major tiles.
    body.op("wgmma.fence.sync.aligned");
    for (out, a, bt) in [(&dv, &pa, &sg), (&dk, &dsa, &sq)] {
        for (kc, frag) in a.iter().enumerate() {
            let bd = desc_at(&mut body, mnmajor, bt, kc * 16 * ATOM_ROW);
            body.op(format!(
                "wgmma.mma_async.sync.aligned.m64n{d}k16.f32.{ht}.{ht} {}, {}, {bd}, {ptrue}, 1, 1, 1",
                list(out),
                list(frag)
            ));
        }
    }
    body.op("wgmma.commit_group.sync.aligned");
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
    let dq: Vec<String> = (0..half / 2).map(|_| body.reg(Class::F32)).collect();
    let skc = body.reg(Class::B32);
    body.op(format!("mad.lo.u32 {skc}, {wg}, {REGION}, {sk0}"));
    body.op("wgmma.fence.sync.aligned");
    for kc in 0..WGMMA_BWD2_KEYS / 16 {
        let (h, r) = (kc / 4, (kc % 4) * 16 * ATOM_ROW);
        let ad = desc_at(&mut body, mnmajor, &sds0, h * REGION + r);
        let bd = desc_at(&mut body, mnmajor, &skc, h * tile + r);
        let accum = if kc == 0 { &pfalse } else { &ptrue };
        body.op(format!(
            "wgmma.mma_async.sync.aligned.m64n{half}k16.f32.{ht}.{ht} {}, {ad}, {bd}, {accum}, 1, 1, 1, 1",
            list(&dq)
        ));
    }
    body.op("wgmma.commit_group.sync.aligned");
    body.op("wgmma.wait_group.sync.aligned 0");
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
        // Register i of 8-column tile j: row fra (i < 2) or frb, columns
        // 8j + 2t (+1).
        let (ra, rb) = (body.reg(Class::B32), body.reg(Class::B32));
        {
            let (x, c) = (body.reg(Class::B32), body.reg(Class::B32));
            body.op(format!("cvt.u32.u64 {x}, {fra}"));
            body.op(format!("mad.lo.u32 {ra}, {x}, {STAGE_PITCH}, {sdq}"));
            body.op(format!("shl.b32 {c}, {t32}, 3"));
            body.op(format!("add.u32 {ra}, {ra}, {c}"));
            body.op(format!("add.u32 {rb}, {ra}, {}", 8 * STAGE_PITCH));
        }
        for j in 0..half / 8 {
            body.op(format!(
                "st.shared.v2.f32 [{ra}+{}], {{{}, {}}}",
                j * 32,
                dq[4 * j],
                dq[4 * j + 1]
            ));
            body.op(format!(
                "st.shared.v2.f32 [{rb}+{}], {{{}, {}}}",
                j * 32,
                dq[4 * j + 2],
                dq[4 * j + 3]
            ));
        }
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
        // dQ added into the buffer four columns at a time: the lanes of a
        // pair (t, t ^ 1) swap halves, so that the even one holds row fra and
        // the odd one row frb, columns 4 (t / 2).. of each 8-column tile.
        let odd = body.reg(Class::Pred);
        {
            let x = body.reg(Class::B32);
            body.op(format!("and.b32 {x}, {t32}, 1"));
            body.op(format!("setp.ne.u32 {odd}, {x}, 0"));
        }
        let a = body.reg(Class::B64);
        body.op(format!("selp.b64 {a}, {frb}, {fra}, {odd}"));
        body.op(format!("add.u64 {a}, {a}, {i0}"));
        let out = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {out}, {a}, {}", p["p_l"]));
        {
            let c4 = body.reg(Class::B64);
            body.op(format!("and.b64 {c4}, {col}, -4"));
            body.op(format!("add.u64 {a}, {a}, {bl}"));
            body.op(format!("mul.lo.u64 {a}, {a}, {d}"));
            body.op(format!("add.u64 {a}, {a}, {c4}"));
            let cw = body.reg(Class::B64);
            body.op(format!("mul.wide.u32 {cw}, {wg}, {half}"));
            body.op(format!("add.u64 {a}, {a}, {cw}"));
            body.op(format!("mad.lo.u64 {a}, {a}, 4, {}", p["p_dqa"]));
        }
        for j in 0..half / 8 {
            let x = &dq[4 * j..4 * j + 4];
            let v = [0, 1, 2, 3].map(|_| body.reg(Class::F32));
            for h in 0..2 {
                let send = body.reg(Class::F32);
                body.op(format!("selp.f32 {send}, {}, {}, {odd}", x[h], x[2 + h]));
                let got = body.reg(Class::F32);
                body.op(format!("shfl.sync.bfly.b32 {got}, {send}, 1, 31, -1"));
                body.op(format!("selp.f32 {}, {got}, {}, {odd}", v[h], x[h]));
                body.op(format!("selp.f32 {}, {}, {got}, {odd}", v[2 + h], x[2 + h]));
            }
            body.op(format!(
                "@!{out} red.global.add.v4.f32 [{a}+{}], {}",
                j * 32,
                list(&v)
            ));
        }
    }
    body.op(format!("xor.b32 {buf}, {buf}, {}", 2 * tile));
    body.op(format!("add.u64 {i0}, {i0}, {QUERIES}"));
    {
        let more = body.reg(Class::Pred);
        body.op(format!("setp.lt.u64 {more}, {i0}, {}", p["p_l"]));
        body.op(format!("@{more} bra.uni {lp}"));
    }
    body.place(&done);
    body.op("cp.async.wait_group 0");
    if bulk {
        // The shared memory the reductions read stays until they have.
        let is = issuer(&mut body);
        body.op(format!("@{is} cp.async.bulk.wait_group.read 0"));
    }
    // dK and dV, rounded, stored a pair at a time (rows past s left out).
    for (half, key) in [&ka, &kb].into_iter().enumerate() {
        let skip = body.label("wb_kv_skip");
        let out = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {out}, {key}, {}", p["p_s"]));
        body.op(format!("@{out} bra {skip}"));
        let off = body.reg(Class::B64);
        body.op(format!("add.u64 {off}, {key}, {bs}"));
        body.op(format!("mul.lo.u64 {off}, {off}, {d}"));
        body.op(format!("add.u64 {off}, {off}, {col}"));
        for (acc, ptr) in [(&dk, &p["p_dk"]), (&dv, &p["p_dv"])] {
            let a = body.reg(Class::B64);
            body.op(format!("mad.lo.u64 {a}, {off}, 2, {ptr}"));
            for j in 0..d / 8 {
                let packed = body.reg(Class::B32);
                body.op(format!(
                    "cvt.rn.{ht}x2.f32 {packed}, {}, {}",
                    acc[4 * j + 2 * half + 1],
                    acc[4 * j + 2 * half]
                ));
                body.op(format!("st.global.b32 [{a}+{}], {packed}", j * 16));
            }
        }
        body.place(&skip);
    }
    body.op("ret");
    // Dynamic shared memory (`attention_wgmma_backward2_shared(d)` bytes),
    // declared at module scope.
    format!(
        ".extern .shared .align 128 .b8 {name}_smem[];\n\n.visible .entry {name}(\n{}\n)\n.maxntid {threads}, 1, 1\n{{\n{}}}\n",
        entry_params(&MMA_BWD_PARAMS),
        body.finish()
    )
}
