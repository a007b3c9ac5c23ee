//! The steps the two Hopper attention backward forms (one warpgroup,
//! `attention_wgmma_bwd.rs`, and two, `attention_wgmma_bwd2.rs`) emit
//! alike: the parameters, a thread's roles and fragment rows, the `cp.async`
//! copies of the swizzled tiles, the head and tail of the walk over the
//! query tiles, the products of a warpgroup's 64 keys with a query tile,
//! the masking of `P^T`, `dS^T` and its tile, the `dQ` reductions and the
//! final `dK` and `dV` stores.
//!
//! Each step takes what its forms place differently (a warpgroup's first
//! key, its shared-memory tiles, the columns of `dQ` it owns) as
//! parameters, and emits its instructions in the order both forms always
//! have, so that their PTX does not depend on which of them calls it.

use crate::ptx::attention_mma_bwd::{
    copy_slot, lse_term, mask_element, reaches_edge, CopySlot, Mask, MMA_BWD_PARAMS, ZERO,
};
use crate::ptx::attention_wgmma::{desc_bits, list, swizzled_slot, ATOM_ROW};
use crate::ptx::body::{Body, Class};
use crate::ptx::mma_tile::{entry_params, load_params, pack_a, scale_log2};
use std::collections::HashMap;

/// Queries a tile of `Q` and `dO` holds.
pub(in crate::ptx) const QUERIES: usize = 64;

/// Keys of one warpgroup (its `M`).
pub(in crate::ptx) const GROUP_KEYS: usize = 64;

/// Bytes of one 64-row swizzled region (64 rows of 128 bytes).
pub(in crate::ptx) const REGION: usize = 64 * ATOM_ROW;

/// The loaded parameters of a main backward entry (the global addresses
/// converted), `scale log2(e)` and `scale` in f32.
pub(in crate::ptx) struct Params {
    pub(in crate::ptx) p: HashMap<&'static str, String>,
    pub(in crate::ptx) sl2: String,
    pub(in crate::ptx) scale: String,
}

/// Emits the loads of [`Params`].
pub(in crate::ptx) fn params(body: &mut Body) -> Params {
    let p = load_params(
        body,
        &MMA_BWD_PARAMS,
        &[
            "p_dqa", "p_dk", "p_dv", "p_delta", "p_lse", "p_go", "p_q", "p_k", "p_v",
        ],
    );
    let sl2 = scale_log2(body);
    let scale = body.reg(Class::F32);
    let s64 = body.reg(Class::F64);
    body.op(format!("ld.param.f64 {s64}, [p_scale]"));
    body.op(format!("cvt.rn.f32.f64 {scale}, {s64}"));
    Params { p, sl2, scale }
}

/// A thread's place in its block: its index `tid`, its warp `wi` within
/// its warpgroup, the warpgroup `wg` (in blocks of two), and in the
/// fragments its lane group `g32` (lane / 4) and `t32` (lane % 4).
pub(in crate::ptx) struct Lanes {
    pub(in crate::ptx) tid: String,
    pub(in crate::ptx) wi: String,
    pub(in crate::ptx) wg: Option<String>,
    pub(in crate::ptx) g32: String,
    pub(in crate::ptx) t32: String,
}

/// Emits the [`Lanes`] of a thread of a block of one warpgroup or, with
/// `groups` 2, of two.
pub(in crate::ptx) fn lanes(body: &mut Body, groups: usize) -> Lanes {
    assert!(groups == 1 || groups == 2, "a block of 1 or 2 warpgroups");
    let (tid, lane, wi) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    let wg = (groups > 1).then(|| body.reg(Class::B32));
    let (g32, t32) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("mov.u32 {tid}, %tid.x"));
    body.op(format!("and.b32 {lane}, {tid}, 31"));
    if let Some(wg) = &wg {
        body.op(format!("shr.u32 {wg}, {tid}, 7"));
    }
    body.op(format!("shr.u32 {wi}, {tid}, 5"));
    if wg.is_some() {
        body.op(format!("and.b32 {wi}, {wi}, 3"));
    }
    body.op(format!("shr.u32 {g32}, {lane}, 2"));
    body.op(format!("and.b32 {t32}, {lane}, 3"));
    Lanes {
        tid,
        wi,
        wg,
        g32,
        t32,
    }
}

/// Emits the first key `j0` of block `cta` (of `block_keys` keys) and
/// that of the thread's warpgroup, `jw` (`j0` plus 64 `wg`).
pub(in crate::ptx) fn first_keys(
    body: &mut Body,
    cta: &str,
    l: &Lanes,
    block_keys: usize,
) -> (String, String) {
    let j0 = body.reg(Class::B64);
    let Some(wg) = &l.wg else {
        body.op(format!("mul.wide.u32 {j0}, {cta}, {block_keys}"));
        return (j0.clone(), j0);
    };
    let jw = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {j0}, {cta}, {block_keys}"));
    let x = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {x}, {wg}, {GROUP_KEYS}"));
    body.op(format!("add.u64 {jw}, {j0}, {x}"));
    (j0, jw)
}

/// A thread's place in its warpgroup's m64 fragments: rows `fra` (16 wi
/// plus g) and `frb` (`fra` plus 8), u64, the keys `ka`, `kb` those rows
/// are from the warpgroup's first key on, and the column pair `col` (2t)
/// within an 8-column tile.
pub(in crate::ptx) struct Fragment {
    pub(in crate::ptx) fra: String,
    pub(in crate::ptx) frb: String,
    pub(in crate::ptx) ka: String,
    pub(in crate::ptx) kb: String,
    pub(in crate::ptx) col: String,
}

/// Emits the [`Fragment`] of warp `wi` of its warpgroup, lane group `g32`
/// and lane `t32` of it, the warpgroup's keys from `first` (u64) on.
pub(in crate::ptx) fn fragment(
    body: &mut Body,
    wi: &str,
    g32: &str,
    t32: &str,
    first: &str,
) -> Fragment {
    let (fra, frb) = (body.reg(Class::B64), body.reg(Class::B64));
    let x = body.reg(Class::B32);
    body.op(format!("mad.lo.u32 {x}, {wi}, 16, {g32}"));
    body.op(format!("cvt.u64.u32 {fra}, {x}"));
    body.op(format!("add.u64 {frb}, {fra}, 8"));
    let (ka, kb) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("add.u64 {ka}, {first}, {fra}"));
    body.op(format!("add.u64 {kb}, {first}, {frb}"));
    let col = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {col}, {t32}, 2"));
    Fragment {
        fra,
        frb,
        ka,
        kb,
        col,
    }
}

/// The shared address of the entry `name`'s dynamic shared memory,
/// rounded up to the 1 KiB the 128-byte swizzle repeats over.
pub(in crate::ptx) fn aligned_shared(body: &mut Body, name: &str) -> String {
    let s = body.reg(Class::B32);
    body.op(format!("mov.u32 {s}, {name}_smem"));
    body.op(format!("add.u32 {s}, {s}, 1023"));
    body.op(format!("and.b32 {s}, {s}, -1024"));
    s
}

/// The global address of (row 0, the thread's chunk) of an operand and
/// its row stride in bytes.
pub(in crate::ptx) type Source = (String, String);

/// The four operands the block copies into shared memory.
pub(in crate::ptx) struct Sources {
    pub(in crate::ptx) k: Source,
    pub(in crate::ptx) v: Source,
    pub(in crate::ptx) q: Source,
    pub(in crate::ptx) go: Source,
}

/// A thread's part of the block's copies of 64-row tiles of `d` 16-bit
/// columns into swizzled shared memory: its [`CopySlot`] in rows `crow +
/// k pass_rows` (every pass's rows share `crow % 8`, as `pass_rows` is a
/// multiple of 8, so one swizzled `slot` serves all).
pub(in crate::ptx) struct Copier {
    slot: String,
    crow64: String,
    cbytes: String,
    pass_rows: usize,
}

impl Copier {
    /// Emits the copy slot of thread `tid` of a block of `threads`.
    pub(in crate::ptx) fn new(body: &mut Body, tid: &str, threads: usize, d: usize) -> Copier {
        let chunks = d / 8;
        let CopySlot {
            slot,
            crow64,
            cbytes,
        } = copy_slot(body, tid, chunks, |body, row, chunk| {
            swizzled_slot(body, row, chunk, REGION)
        });
        Copier {
            slot,
            crow64,
            cbytes,
            pass_rows: threads / chunks,
        }
    }

    /// The [`Source`] of the operand at `ptr` whose batch starts `boff`
    /// elements in, with row stride `rs` elements.
    fn source(&self, body: &mut Body, ptr: &str, boff: &str, rs: &str) -> Source {
        let (a, rs2) = (body.reg(Class::B64), body.reg(Class::B64));
        body.op(format!("mad.lo.u64 {a}, {boff}, 2, {ptr}"));
        body.op(format!("add.u64 {a}, {a}, {}", self.cbytes));
        body.op(format!("shl.b64 {rs2}, {rs}, 1"));
        (a, rs2)
    }

    /// The [`Sources`] of `k`, `v`, `q` and `go` (parameters `p`, batch
    /// offsets `boff`).
    pub(in crate::ptx) fn sources(
        &self,
        body: &mut Body,
        p: &HashMap<&str, String>,
        boff: &HashMap<&str, String>,
    ) -> Sources {
        Sources {
            k: self.source(body, &p["p_k"], &boff["k"], &p["p_kr"]),
            v: self.source(body, &p["p_v"], &boff["v"], &p["p_vr"]),
            q: self.source(body, &p["p_q"], &boff["q"], &p["p_qr"]),
            go: self.source(body, &p["p_go"], &boff["go"], &p["p_gor"]),
        }
    }

    /// Copies the 64 rows from row `first` on of an operand of `limit`
    /// rows into the tile at `dst`, rows past `limit` zero-filled (read
    /// from a clamped address, so that no copy leaves the operand).
    pub(in crate::ptx) fn tile(
        &self,
        body: &mut Body,
        first: &str,
        limit: &str,
        src: &Source,
        dst: &str,
    ) {
        let (src, rs2) = src;
        let lmax = body.reg(Class::B64);
        body.op(format!("sub.u64 {lmax}, {limit}, 1"));
        let s = body.reg(Class::B32);
        body.op(format!("add.u32 {s}, {dst}, {}", self.slot));
        for ps in 0..64 / self.pass_rows {
            let r = body.reg(Class::B64);
            body.op(format!("add.u64 {r}, {first}, {}", self.crow64));
            if ps > 0 {
                body.op(format!("add.u64 {r}, {r}, {}", ps * self.pass_rows));
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
                ps * self.pass_rows * ATOM_ROW
            ));
        }
    }
}

/// The walk over the query tiles: the first query `i0` (u64, advanced
/// per tile), `l - 1`, the warpgroup's `dV` and `dK` accumulators and the
/// loop's labels.
pub(in crate::ptx) struct Walk {
    pub(in crate::ptx) i0: String,
    pub(in crate::ptx) lmax: String,
    pub(in crate::ptx) dv: Vec<String>,
    pub(in crate::ptx) dk: Vec<String>,
    pub(in crate::ptx) lp: String,
    pub(in crate::ptx) done: String,
}

/// Emits the start of the [`Walk`] of a block whose keys start at `j0`
/// (a multiple of 64): query tiles from 0 or, under `causal`, from the
/// one holding key `j0`; `dK` and `dV` as zeroed m64nD accumulators (`d /
/// 2` registers: of 8-column tile j, [4j, 4j + 1] in row `fra` and [4j +
/// 2, 4j + 3] in row `frb`); a jump to `done` when there are no queries.
pub(in crate::ptx) fn walk(body: &mut Body, causal: &str, j0: &str, l: &str, d: usize) -> Walk {
    let i0 = body.reg(Class::B64);
    body.op(format!("mov.u64 {i0}, 0"));
    body.op(format!("@{causal} mov.u64 {i0}, {j0}"));
    let lmax = body.reg(Class::B64);
    body.op(format!("sub.u64 {lmax}, {l}, 1"));
    let mut acc = || -> Vec<String> {
        let r: Vec<String> = (0..d / 2).map(|_| body.reg(Class::F32)).collect();
        for x in &r {
            body.op(format!("mov.f32 {x}, {ZERO}"));
        }
        r
    };
    let dv = acc();
    let dk = acc();
    let (lp, done) = (body.label("wb_queries"), body.label("wb_done"));
    let none = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {none}, {i0}, {l}"));
    body.op(format!("@{none} bra.uni {done}"));
    Walk {
        i0,
        lmax,
        dv,
        dk,
        lp,
        done,
    }
}

/// The shared-memory descriptors of the backward's tiles and the
/// predicates that start (`pfalse`) or continue (`ptrue`) an
/// accumulation.
pub(in crate::ptx) struct Descriptors {
    /// K-major, 8-row groups 1 KiB apart.
    pub(in crate::ptx) kmajor: u64,
    /// MN-major, the 64-column regions [`REGION`] apart.
    pub(in crate::ptx) mnmajor: u64,
    high: String,
    pub(in crate::ptx) ptrue: String,
    pub(in crate::ptx) pfalse: String,
}

impl Descriptors {
    /// Emits the high word both descriptors share and the predicates.
    pub(in crate::ptx) fn new(body: &mut Body) -> Descriptors {
        let kmajor = desc_bits(16, 8 * ATOM_ROW);
        let mnmajor = desc_bits(REGION, 8 * ATOM_ROW);
        // The fields above bit 32 (the stride and the swizzle) are the
        // same for both, and only the low word varies: built in 32 bits,
        // so that the descriptors ptxas keeps across the loop take a
        // register each.
        assert_eq!(kmajor >> 32, mnmajor >> 32);
        let high = body.reg(Class::B32);
        body.op(format!("mov.u32 {high}, {}", kmajor >> 32));
        let (ptrue, pfalse) = (body.reg(Class::Pred), body.reg(Class::Pred));
        body.op(format!("setp.eq.u32 {ptrue}, 0, 0"));
        body.op(format!("setp.ne.u32 {pfalse}, 0, 0"));
        Descriptors {
            kmajor,
            mnmajor,
            high,
            ptrue,
            pfalse,
        }
    }

    /// The descriptor of the tile at shared address `addr` plus `off`
    /// bytes (`bits` one of the fixed fields above).
    pub(in crate::ptx) fn at(&self, body: &mut Body, bits: u64, addr: &str, off: usize) -> String {
        let (lo, dd) = (body.reg(Class::B32), body.reg(Class::B64));
        body.op(format!("add.u32 {lo}, {addr}, {off}"));
        body.op(format!("shr.u32 {lo}, {lo}, 4"));
        body.op(format!("or.b32 {lo}, {lo}, {}", bits & 0xffff_ffff));
        body.op(format!("mov.b64 {dd}, {{{lo}, {}}}", self.high));
        dd
    }
}

/// The query tile's `Q` and `dO` buffers at `sq0` (two tiles of `tile`
/// bytes each, `buf` the byte offset of the current one) and the
/// operands they are copied from.
pub(in crate::ptx) struct Buffers<'a> {
    sq0: &'a str,
    buf: String,
    tile: usize,
    q: &'a Source,
    go: &'a Source,
}

/// Emits the copy of the first query tile's `Q` and `dO` into buffer 0
/// (at `sq0`, tiles of `tile` bytes, the operands `g`), the
/// [`Descriptors`] and the offset of the current buffer, 0.
pub(in crate::ptx) fn first_tile<'a>(
    body: &mut Body,
    copier: &Copier,
    walk: &Walk,
    l: &str,
    (sq0, tile): (&'a str, usize),
    g: &'a Sources,
) -> (Buffers<'a>, Descriptors) {
    let sg0 = body.reg(Class::B32);
    body.op(format!("add.u32 {sg0}, {sq0}, {tile}"));
    copier.tile(body, &walk.i0, l, &g.q, sq0);
    copier.tile(body, &walk.i0, l, &g.go, &sg0);
    body.op("cp.async.commit_group");
    let desc = Descriptors::new(body);
    let buf = body.reg(Class::B32);
    body.op(format!("mov.u32 {buf}, 0"));
    let b = Buffers {
        sq0,
        buf,
        tile,
        q: &g.q,
        go: &g.go,
    };
    (b, desc)
}

/// Emits the head of a query tile (the loop's label placed): once every
/// thread is past the last tile (its `Q` and `dO` in the other buffer,
/// its `dS^T` read), the next tile's copy into that buffer, then the wait
/// for this tile's, its copies made visible to the async proxy `wgmma`
/// reads through. Returns this tile's `Q` and `dO` tiles.
pub(in crate::ptx) fn tile_head(
    body: &mut Body,
    copier: &Copier,
    walk: &Walk,
    l: &str,
    b: &Buffers,
) -> (String, String) {
    let (i0, tile) = (&walk.i0, b.tile);
    body.place(&walk.lp);
    body.op("bar.sync 0");
    let (sq, sg) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("add.u32 {sq}, {}, {}", b.sq0, b.buf));
    body.op(format!("add.u32 {sg}, {sq}, {tile}"));
    let next = body.reg(Class::B64);
    body.op(format!("add.u64 {next}, {i0}, {QUERIES}"));
    let last = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {last}, {next}, {l}"));
    let no_copy = body.label("wb_no_copy");
    body.op(format!("@{last} bra.uni {no_copy}"));
    let (nq, ng) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("xor.b32 {nq}, {}, {}", b.buf, 2 * tile));
    body.op(format!("add.u32 {nq}, {nq}, {}", b.sq0));
    body.op(format!("add.u32 {ng}, {nq}, {tile}"));
    copier.tile(body, &next, l, b.q, &nq);
    copier.tile(body, &next, l, b.go, &ng);
    body.place(&no_copy);
    body.op("cp.async.commit_group");
    // Each thread's copies made visible, then everyone's.
    body.op("cp.async.wait_group 1");
    body.op("fence.proxy.async.shared::cta");
    body.op("bar.sync 0");
    (sq, sg)
}

/// Emits the tail of a query tile (the buffers swapped, `i0` advanced,
/// the jump back while queries are left) and the end of the walk, every
/// copy landed.
pub(in crate::ptx) fn tile_tail(body: &mut Body, walk: &Walk, l: &str, b: &Buffers) {
    let (i0, buf, tile) = (&walk.i0, &b.buf, b.tile);
    body.op(format!("xor.b32 {buf}, {buf}, {}", 2 * tile));
    body.op(format!("add.u64 {i0}, {i0}, {QUERIES}"));
    let more = body.reg(Class::Pred);
    body.op(format!("setp.lt.u64 {more}, {i0}, {l}"));
    body.op(format!("@{more} bra.uni {}", walk.lp));
    body.place(&walk.done);
    body.op("cp.async.wait_group 0");
}

/// Emits `S^T = K Q^T` and `dP^T = V dO^T` of the warpgroup's keys (`K`
/// at `sk`, `V` at `sv`) and the tile's queries (`Q` at `sq`, `dO` at
/// `sg`), both operands K-major from shared memory, k-steps of 16
/// columns 32 bytes into a region's rows; returns their accumulators,
/// complete.
pub(in crate::ptx) fn scores(
    body: &mut Body,
    ht: &str,
    d: usize,
    desc: &Descriptors,
    [sk, sv, sq, sg]: [&str; 4],
) -> (Vec<String>, Vec<String>) {
    let s: Vec<String> = (0..QUERIES / 2).map(|_| body.reg(Class::F32)).collect();
    let dp: Vec<String> = (0..QUERIES / 2).map(|_| body.reg(Class::F32)).collect();
    body.op("wgmma.fence.sync.aligned");
    for (out, a, bt) in [(&s, sk, sq), (&dp, sv, sg)] {
        for ks in 0..d / 16 {
            let off = (ks / 4) * REGION + (ks % 4) * 32;
            let ad = desc.at(body, desc.kmajor, a, off);
            let bd = desc.at(body, desc.kmajor, bt, off);
            let accum = if ks == 0 { &desc.pfalse } else { &desc.ptrue };
            body.op(format!(
                "wgmma.mma_async.sync.aligned.m64n{QUERIES}k16.f32.{ht}.{ht} {}, {ad}, {bd}, {accum}, 1, 1, 0, 0",
                list(out)
            ));
        }
    }
    body.op("wgmma.commit_group.sync.aligned");
    body.op("wgmma.wait_group.sync.aligned 0");
    (s, dp)
}

/// The statistic (of the `QUERIES / 4` a thread loads) of register `i` of
/// an accumulator with 64 query columns: tile `i / 4`, column 2t + (i &
/// 1), row `fra` (i % 4 < 2) or `frb`.
pub(in crate::ptx) fn stat(i: usize) -> usize {
    (i / 4) * 2 + (i & 1)
}

/// Emits the address of the statistic (`lse` or `D`, f32 rows from `bl`
/// on at `ptr`) of the thread's query column of register `i` (see
/// [`stat`]) of a tile whose queries start at `i0`, clamped to `lmax`
/// (computed at each load: kept, the addresses would take 32 registers).
pub(in crate::ptx) fn stat_address(
    body: &mut Body,
    f: &Fragment,
    (i0, lmax, bl): (&str, &str, &str),
    i: usize,
    ptr: &str,
) -> String {
    let qi = body.reg(Class::B64);
    body.op(format!("add.u64 {qi}, {}, {i0}", f.col));
    body.op(format!("add.u64 {qi}, {qi}, {}", (i / 2) * 8 + (i % 2)));
    body.op(format!("min.u64 {qi}, {qi}, {lmax}"));
    body.op(format!("add.u64 {qi}, {qi}, {bl}"));
    body.op(format!("mad.lo.u64 {qi}, {qi}, 4, {ptr}"));
    qi
}

/// Emits the loads of the thread's statistics at `ptr` (see
/// [`stat_address`]): with `lse`, the log-sum-exps as `-lse log2(e)` (0
/// for a row without keys), read through the non-coherent cache; else `D`.
pub(in crate::ptx) fn load_stats(
    body: &mut Body,
    f: &Fragment,
    rows: (&str, &str, &str),
    ptr: &str,
    lse: bool,
) -> Vec<String> {
    (0..QUERIES / 4)
        .map(|i| {
            let (a, m) = (stat_address(body, f, rows, i, ptr), body.reg(Class::F32));
            if lse {
                body.op(format!("ld.global.nc.f32 {m}, [{a}]"));
                lse_term(body, &m);
            } else {
                body.op(format!("ld.global.f32 {m}, [{a}]"));
            }
            m
        })
        .collect()
}

/// Emits the stores of an m64 `dQ` accumulator `dq` (`dq.len() * 2`
/// columns) into the f32 staging tile at `sdq` whose rows are `pitch`
/// bytes apart: register i of 8-column tile j to row `fra` (i < 2) or
/// `frb`, columns 8j + 2t (+1).
pub(in crate::ptx) fn stage_dq(
    body: &mut Body,
    dq: &[String],
    f: &Fragment,
    t32: &str,
    sdq: &str,
    pitch: usize,
) {
    let (ra, rb) = (body.reg(Class::B32), body.reg(Class::B32));
    {
        let (x, c) = (body.reg(Class::B32), body.reg(Class::B32));
        body.op(format!("cvt.u32.u64 {x}, {}", f.fra));
        body.op(format!("mad.lo.u32 {ra}, {x}, {pitch}, {sdq}"));
        body.op(format!("shl.b32 {c}, {t32}, 3"));
        body.op(format!("add.u32 {ra}, {ra}, {c}"));
        body.op(format!("add.u32 {rb}, {ra}, {}", 8 * pitch));
    }
    for j in 0..dq.len() / 4 {
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
}

/// Emits `P^T = 2^(S^T scale log2(e) - lse log2(e))` in place of `s`
/// (`mls` the thread's `-lse log2(e)`, `sl2` `scale log2(e)`): 0 past the
/// queries, past the keys and, under `causal`, for a key past its query,
/// the masking only on the tiles that reach any of those.
pub(in crate::ptx) fn probabilities(
    body: &mut Body,
    s: &[String],
    mls: &[String],
    sl2: &str,
    f: &Fragment,
    m: &Mask,
) {
    let i0 = m.i0;
    for (i, r) in s.iter().enumerate() {
        body.op(format!("fma.rn.f32 {r}, {r}, {sl2}, {}", mls[stat(i)]));
    }
    let edge = reaches_edge(body, m, QUERIES, GROUP_KEYS);
    let inner = body.label("wb_inner");
    body.op(format!("@!{edge} bra.uni {inner}"));
    let c0 = body.reg(Class::B64);
    body.op(format!("add.u64 {c0}, {}, {i0}", f.col));
    for (i, r) in s.iter().enumerate() {
        let key = if i % 4 < 2 { &f.ka } else { &f.kb };
        mask_element(body, m, r, (&c0, (i / 4) * 8 + (i & 1)), key);
    }
    body.place(&inner);
    for r in s {
        body.op(format!("ex2.approx.ftz.f32 {r}, {r}"));
    }
}

/// Emits `dS^T = P^T (dP^T - D) scale` in place of `dp` (`dcol` the
/// thread's `D`), then `P^T` and `dS^T` rounded to the dtype `ht` as
/// register `A` fragments of k-steps of 16 queries.
pub(in crate::ptx) fn gradients(
    body: &mut Body,
    ht: &str,
    s: &[String],
    dp: &[String],
    dcol: &[String],
    scale: &str,
) -> (Vec<[String; 4]>, Vec<[String; 4]>) {
    for (i, (r, pr)) in dp.iter().zip(s).enumerate() {
        body.op(format!("sub.rn.f32 {r}, {r}, {}", dcol[stat(i)]));
        body.op(format!("mul.rn.f32 {r}, {r}, {pr}"));
        body.op(format!("mul.rn.f32 {r}, {r}, {scale}"));
    }
    let quads = |x: &[String]| -> Vec<[String; 4]> {
        x.chunks(4)
            .map(|c| [c[0].clone(), c[1].clone(), c[2].clone(), c[3].clone()])
            .collect()
    };
    let pa = pack_a(body, ht, &quads(s));
    let dsa = pack_a(body, ht, &quads(dp));
    (pa, dsa)
}

/// Emits the store of the fragments `dsa` of `dS^T` into the
/// warpgroup's swizzled tile at `sds` (warp `wi` of it, lanes `g32`,
/// `t32`), then the fence that lets `wgmma` read it: register i of chunk
/// kc holds key row `fra` (i even) or `frb`, query columns 16 kc + 8 (i /
/// 2) + 2t (+1), i.e. chunk 2 kc + i / 2, swizzled by the row's low bits
/// (g for both rows).
pub(in crate::ptx) fn store_ds(
    body: &mut Body,
    dsa: &[[String; 4]],
    [wi, g32, t32]: [&str; 3],
    sds: &str,
) {
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
    body.op("fence.proxy.async.shared::cta");
}

/// Emits `dV += P^T dO` and `dK += dS^T Q` (issued and committed, not
/// waited on): `A` the register fragments `pa` and `dsa`, `B` the
/// MN-major tiles `dO` at `sg` and `Q` at `sq`, k-steps of 16 queries,
/// 16 rows of those tiles.
#[allow(clippy::too_many_arguments)]
pub(in crate::ptx) fn accumulate_kv(
    body: &mut Body,
    ht: &str,
    d: usize,
    desc: &Descriptors,
    walk: &Walk,
    (pa, dsa): (&[[String; 4]], &[[String; 4]]),
    sg: &str,
    sq: &str,
) {
    body.op("wgmma.fence.sync.aligned");
    for (out, a, bt) in [(&walk.dv, pa, sg), (&walk.dk, dsa, sq)] {
        for (kc, frag) in a.iter().enumerate() {
            let bd = desc.at(body, desc.mnmajor, bt, kc * 16 * ATOM_ROW);
            body.op(format!(
                "wgmma.mma_async.sync.aligned.m64n{d}k16.f32.{ht}.{ht} {}, {}, {bd}, {}, 1, 1, 1",
                list(out),
                list(frag),
                desc.ptrue
            ));
        }
    }
    body.op("wgmma.commit_group.sync.aligned");
}

/// Emits `dQ = dS K` of the query tile, `n` columns of it (issued and
/// waited on), M = the tile's queries: `A` the transposed `dS^T` tiles
/// from `ds` on (one region a warpgroup), `B` the transposed `K` at `k`
/// (the warpgroup's 64 keys a `tile` apart), k-steps of 16 of the
/// block's `block_keys` keys. Returns the accumulator.
#[allow(clippy::too_many_arguments)]
pub(in crate::ptx) fn dq_products(
    body: &mut Body,
    ht: &str,
    desc: &Descriptors,
    n: usize,
    block_keys: usize,
    tile: usize,
    ds: &str,
    k: &str,
) -> Vec<String> {
    let dq: Vec<String> = (0..n / 2).map(|_| body.reg(Class::F32)).collect();
    body.op("wgmma.fence.sync.aligned");
    for kc in 0..block_keys / 16 {
        let (h, r) = (kc / 4, (kc % 4) * 16 * ATOM_ROW);
        let ad = desc.at(body, desc.mnmajor, ds, h * REGION + r);
        let bd = desc.at(body, desc.mnmajor, k, h * tile + r);
        let accum = if kc == 0 { &desc.pfalse } else { &desc.ptrue };
        body.op(format!(
            "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ht}.{ht} {}, {ad}, {bd}, {accum}, 1, 1, 1, 1",
            list(&dq)
        ));
    }
    body.op("wgmma.commit_group.sync.aligned");
    body.op("wgmma.wait_group.sync.aligned 0");
    dq
}

/// Emits the addition of the accumulator `dq` (m64, the tile's queries
/// from `i0` on, `dq.len() * 2` columns) into the f32 `dQ` buffer of
/// head dim `d` (rows from `bl` on), four columns at a time, rows past
/// `l` left out. With `columns = Some((wg, n))` the accumulator holds the
/// columns `n wg..` of the rows, else the first. The lanes of a pair (t, t
/// ^ 1) swap halves, so that the even one holds row `fra` and the odd one
/// row `frb`, columns 4 (t / 2).. of each 8-column tile.
#[allow(clippy::too_many_arguments)]
pub(in crate::ptx) fn add_dq(
    body: &mut Body,
    dq: &[String],
    f: &Fragment,
    t32: &str,
    (i0, bl, l, dqa): (&str, &str, &str, &str),
    d: usize,
    columns: Option<(&str, usize)>,
) {
    let odd = body.reg(Class::Pred);
    {
        let x = body.reg(Class::B32);
        body.op(format!("and.b32 {x}, {t32}, 1"));
        body.op(format!("setp.ne.u32 {odd}, {x}, 0"));
    }
    let a = body.reg(Class::B64);
    body.op(format!("selp.b64 {a}, {}, {}, {odd}", f.frb, f.fra));
    body.op(format!("add.u64 {a}, {a}, {i0}"));
    let out = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {out}, {a}, {l}"));
    let c4 = body.reg(Class::B64);
    body.op(format!("and.b64 {c4}, {}, -4", f.col));
    body.op(format!("add.u64 {a}, {a}, {bl}"));
    body.op(format!("mul.lo.u64 {a}, {a}, {d}"));
    body.op(format!("add.u64 {a}, {a}, {c4}"));
    if let Some((wg, n)) = columns {
        let cw = body.reg(Class::B64);
        body.op(format!("mul.wide.u32 {cw}, {wg}, {n}"));
        body.op(format!("add.u64 {a}, {a}, {cw}"));
    }
    body.op(format!("mad.lo.u64 {a}, {a}, 4, {dqa}"));
    for j in 0..dq.len() / 4 {
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

/// Emits the stores of the warpgroup's `dK` and `dV` (already scaled),
/// rounded to the dtype `ht`, a pair at a time, into the rows from `bs`
/// on of head dim `d`, rows past `s` left out.
pub(in crate::ptx) fn store_kv(
    body: &mut Body,
    ht: &str,
    d: usize,
    f: &Fragment,
    walk: &Walk,
    bs: &str,
    p: &HashMap<&str, String>,
) {
    for (half, key) in [&f.ka, &f.kb].into_iter().enumerate() {
        let skip = body.label("wb_kv_skip");
        let out = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {out}, {key}, {}", p["p_s"]));
        body.op(format!("@{out} bra {skip}"));
        let off = body.reg(Class::B64);
        body.op(format!("add.u64 {off}, {key}, {bs}"));
        body.op(format!("mul.lo.u64 {off}, {off}, {d}"));
        body.op(format!("add.u64 {off}, {off}, {}", f.col));
        for (acc, ptr) in [(&walk.dk, &p["p_dk"]), (&walk.dv, &p["p_dv"])] {
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
}

/// The text of the main entry `name` of a Hopper backward form with
/// `body` (ended): its dynamic shared memory (the form's `_shared(d)`
/// bytes, more than a static array may take) declared at module scope,
/// the backward's parameters, at most `threads` a block.
pub(in crate::ptx) fn entry_text(name: &str, threads: usize, body: Body) -> String {
    format!(
        ".extern .shared .align 128 .b8 {name}_smem[];\n\n.visible .entry {name}(\n{}\n)\n.maxntid {threads}, 1, 1\n{{\n{}}}\n",
        entry_params(&MMA_BWD_PARAMS),
        body.finish()
    )
}
