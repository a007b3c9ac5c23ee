//! The warp-specialised Hopper attention backward (compute capability 9.0
//! only, head dim 128), FlashAttention-3's structure on the steps of
//! `attention_wgmma_bwd/steps.rs`: a block of three warpgroups owns
//! [`WGMMA_BWD_WS_KEYS`] keys. Warpgroup 0 only moves data and gives its
//! registers up (`setmaxnreg.dec`) to warpgroups 1 and 2
//! (`setmaxnreg.inc`), which own 64 keys each and keep their `dK`
//! and `dV` in registers across the walk over the query tiles, computing
//! per tile what the two-warpgroup form (`attention_wgmma_bwd2.rs`) does.
//!
//! The copying warpgroup copies the block's `K` and `V` once, then each
//! query tile's `Q` and `dO` into one of [`STAGES`] buffers once the
//! computing warpgroups released it, each of its threads' copies arriving
//! on the buffer's `full` barrier when they land
//! (`cp.async.mbarrier.arrive.noinc`), so the copies of the next tile run
//! while the current one is computed and no block barrier waits on them.
//! The computing warpgroups stage their columns of the tile's `dQ = dS K`
//! in one shared tile and arrive on a barrier; the copying warpgroup then
//! adds each of its 64 rows to global memory with one
//! `cp.reduce.async.bulk .add.f32` of 512 bytes and, once they have read
//! the tile, frees it for the next one: the reductions are off the
//! computing warpgroups' path.
//!
//! The two computing warpgroups meet once a tile (named barrier 1), once
//! both `dS^T` tiles are stored, before `dQ = dS K` reads them; the
//! `dS^T` tiles alternate between two buffers, so that a warpgroup writes
//! the next tile's while the other may still read this one's.

use super::attention_mma_bwd::{lse_term, prologue, Mask, Prologue};
use super::attention_wgmma_bwd::steps::{
    accumulate_kv, aligned_shared, dq_products, entry_text, fragment, gradients, params,
    probabilities, scores, stage_dq, store_ds, store_kv, walk, Copier, Descriptors, Params,
    GROUP_KEYS, QUERIES, REGION,
};
use super::body::{Body, Class};
use super::mbarrier::{arrive, wait_barrier, wait_landed, Ring};
use super::mma_tile::half_type;
use crate::target::Target;
use tensorfn_core::DTypeKind;

/// Keys a block of the warp-specialised Hopper backward owns (64 for each
/// of its two computing warpgroups).
///
/// ```
/// assert_eq!(tensorfn_kernels::ptx::WGMMA_BWD_WS_KEYS, 128);
/// ```
pub const WGMMA_BWD_WS_KEYS: usize = 128;

/// Threads of a block of the warp-specialised Hopper backward: the
/// copying warpgroup and the two computing ones.
///
/// ```
/// assert_eq!(tensorfn_kernels::ptx::WGMMA_BWD_WS_THREADS, 384);
/// ```
pub const WGMMA_BWD_WS_THREADS: usize = 384;

/// Buffers of the query tiles' `Q` and `dO`.
const STAGES: usize = 2;

/// Registers a thread of the copying warpgroup keeps and those a thread
/// of a computing one takes: 128 x 56 + 256 x 224 is the 384 x 168 a
/// block of this size starts with. (FlashAttention-3's 24 and 240 spill
/// here: `ptxas -v` at sm_90a shows 308 bytes, most of them the copier's,
/// whose 16-byte `cp.async` copies take 64-bit addresses, and 80 bytes
/// of the computing threads' at 240, against 16 at 224.)
const COPY_REGS: usize = 56;
const COMPUTE_REGS: usize = 224;

/// Bytes between two rows of the `dQ` staging tile: 128 f32 columns,
/// padded by 16 bytes so that the fragment rows of a warp fall on
/// different banks (a multiple of 16, as the bulk reductions need).
const STAGE_PITCH: usize = 128 * 4 + 16;

/// Bytes of a buffer's statistics: the tile's 64 log-sum-exps, then its
/// 64 `D`s (f32).
const STAT_BYTES: usize = 2 * QUERIES * 4;

/// The `mbarrier`s: `K` and `V` landed; per buffer, its `Q` and `dO`
/// landed (`full`) and released (`empty`); the `dQ` staging tile written
/// (`dq_full`) and read (`dq_empty`).
const BARRIERS: usize = 1 + 2 * STAGES + 2;

/// Bytes of dynamic shared memory the warp-specialised Hopper backward
/// takes at head dim `d`: `K` and `V` of the block's 128 keys, the
/// [`STAGES`] buffers of `Q` and `dO`, two buffers of both warpgroups'
/// `dS^T` tiles, the `dQ` staging tile, the statistics of each buffer's
/// queries, the barriers, and 1 KiB of slack
/// to align the tiles to the 1 KiB the swizzle repeats over.
///
/// ```
/// use tensorfn_kernels::ptx::attention_wgmma_backward_ws_shared;
/// assert_eq!(
///     attention_wgmma_backward_ws_shared(128),
///     4 * 16384 + 4 * 16384 + 4 * 8192 + 64 * 528 + 2 * 512 + 7 * 8 + 1024
/// );
/// ```
pub const fn attention_wgmma_backward_ws_shared(d: usize) -> usize {
    4 * 64 * d * 2
        + STAGES * 2 * 64 * d * 2
        + 4 * REGION
        + QUERIES * STAGE_PITCH
        + STAGES * STAT_BYTES
        + BARRIERS * 8
        + 1024
}

/// The shared addresses of the entry's regions.
struct Layout {
    /// `K` of the block's keys (two 64-row tiles), then `V`'s.
    k: String,
    /// The first buffer of `Q` and `dO` (a `Q` tile, then a `dO` tile).
    q: String,
    /// The first pair of `dS^T` tiles (one region a warpgroup).
    ds: String,
    /// The `dQ` staging tile.
    dq: String,
    /// The first buffer's statistics.
    stats: String,
    kv_bar: String,
    full: String,
    empty: String,
    dq_full: String,
    dq_empty: String,
}

/// The main entry `name` of the warp-specialised Hopper backward over
/// `dtype` (f16 or bf16) with head dim `d` (128 only): see the module's
/// documentation. Launch with `block.x =` [`WGMMA_BWD_WS_THREADS`],
/// `grid.x = ceil(s /` [`WGMMA_BWD_WS_KEYS`]`)`, `grid.y` the batch,
/// after the preprocessing entry.
pub(crate) fn attention_wgmma_bwd_ws_entry(name: &str, dtype: DTypeKind, d: usize) -> String {
    assert_eq!(d, 128, "the warp-specialised backward takes head dim 128");
    let ht = half_type(dtype);
    let tile = 64 * d * 2;
    let mut body = Body::for_target(Target::Sm80);
    let Params { p, sl2, scale } = params(&mut body);
    let tid = body.reg(Class::B32);
    body.op(format!("mov.u32 {tid}, %tid.x"));
    let wg = body.reg(Class::B32);
    body.op(format!("shr.u32 {wg}, {tid}, 7"));
    let pro = prologue(&mut body, &p);
    let j0 = body.reg(Class::B64);
    body.op(format!(
        "mul.wide.u32 {j0}, {}, {WGMMA_BWD_WS_KEYS}",
        pro.cta
    ));
    let causal = body.reg(Class::Pred);
    body.op(format!("setp.ne.u64 {causal}, {}, 0", p["p_causal"]));
    let base = aligned_shared(&mut body, name);
    let at = |body: &mut Body, off: usize| {
        let r = body.reg(Class::B32);
        body.op(format!("add.u32 {r}, {base}, {off}"));
        r
    };
    let q_off = 4 * tile;
    let ds_off = q_off + STAGES * 2 * tile;
    let dq_off = ds_off + 4 * REGION;
    let stats_off = dq_off + QUERIES * STAGE_PITCH;
    let bar_off = stats_off + STAGES * STAT_BYTES;
    let lay = Layout {
        k: base.clone(),
        q: at(&mut body, q_off),
        ds: at(&mut body, ds_off),
        dq: at(&mut body, dq_off),
        stats: at(&mut body, stats_off),
        kv_bar: at(&mut body, bar_off),
        full: at(&mut body, bar_off + 8),
        empty: at(&mut body, bar_off + 8 + 8 * STAGES),
        dq_full: at(&mut body, bar_off + 8 + 16 * STAGES),
        dq_empty: at(&mut body, bar_off + 16 + 16 * STAGES),
    };
    // Thread 0 sets the barriers up before anyone uses them: the copies'
    // barriers wait for the copier's 128 threads, `empty` for the eight
    // computing warps, `dq_full` for the 256 computing threads, `dq_empty`
    // for the copier's 128.
    {
        let (first, skip) = (body.reg(Class::Pred), body.label("wbs_no_init"));
        body.op(format!("setp.ne.u32 {first}, {tid}, 0"));
        body.op(format!("@{first} bra {skip}"));
        let init = |body: &mut Body, bar: &str, off: usize, count: usize| {
            body.op(format!(
                "mbarrier.init.shared::cta.b64 [{bar}+{off}], {count}"
            ));
        };
        init(&mut body, &lay.kv_bar, 0, 128);
        for i in 0..STAGES {
            init(&mut body, &lay.full, 8 * i, 128);
            init(&mut body, &lay.empty, 8 * i, 8);
        }
        init(&mut body, &lay.dq_full, 0, 256);
        init(&mut body, &lay.dq_empty, 0, 128);
        body.place(&skip);
        body.op("bar.sync 0");
    }
    let compute = body.label("wbs_compute");
    let computing = body.reg(Class::Pred);
    body.op(format!("setp.ne.u32 {computing}, {wg}, 0"));
    body.op(format!("@{computing} bra.uni {compute}"));
    copy_role(&mut body, d, &p, &pro, (&tid, &j0, &causal), &lay);
    body.place(&compute);
    body.op(format!("setmaxnreg.inc.sync.aligned.u32 {COMPUTE_REGS}"));
    // The computing warpgroup's index among the two `cw`, the warp's place
    // in it `wi`, the lanes of the fragments `g32` (lane / 4) and `t32`
    // (lane % 4), and whether the thread is its warp's lane 0.
    let (cw, wi, lane, g32, t32, lane0) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::Pred),
    );
    body.op(format!("sub.u32 {cw}, {wg}, 1"));
    body.op(format!("shr.u32 {wi}, {tid}, 5"));
    body.op(format!("and.b32 {wi}, {wi}, 3"));
    body.op(format!("and.b32 {lane}, {tid}, 31"));
    body.op(format!("shr.u32 {g32}, {lane}, 2"));
    body.op(format!("and.b32 {t32}, {lane}, 3"));
    body.op(format!("setp.eq.u32 {lane0}, {lane}, 0"));
    let jw = body.reg(Class::B64);
    {
        let x = body.reg(Class::B64);
        body.op(format!("mul.wide.u32 {x}, {cw}, {GROUP_KEYS}"));
        body.op(format!("add.u64 {jw}, {j0}, {x}"));
    }
    let f = fragment(&mut body, &wi, &g32, &t32, &jw);
    // The warpgroup's K and V tiles, its columns of K for dQ, its dS^T
    // tile in the first pair.
    let (sk, sv, skc, sds) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("mad.lo.u32 {sk}, {cw}, {tile}, {}", lay.k));
    body.op(format!("add.u32 {sv}, {sk}, {}", 2 * tile));
    body.op(format!("mad.lo.u32 {skc}, {cw}, {REGION}, {}", lay.k));
    body.op(format!("mad.lo.u32 {sds}, {cw}, {REGION}, {}", lay.ds));
    let walk = walk(&mut body, &causal, &j0, &p["p_l"], d);
    let desc = Descriptors::new(&mut body);
    // The pair of dS^T tiles in use (its byte offset from the first),
    // the parity of the dQ staging tile's round.
    let (dsb, dqph) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("mov.u32 {dsb}, 0"));
    body.op(format!("mov.u32 {dqph}, 0"));
    {
        let zero = body.reg(Class::B32);
        body.op(format!("mov.u32 {zero}, 0"));
        wait_landed(&mut body, &lay.kv_bar, &zero);
    }
    let ring = Ring::new(&mut body, STAGES);
    body.place(&walk.lp);
    let (sq, sg) = (body.reg(Class::B32), body.reg(Class::B32));
    {
        let bar = Ring::barrier(&mut body, &lay.full, &ring.stage);
        wait_landed(&mut body, &bar, &ring.phase);
        body.op(format!(
            "mad.lo.u32 {sq}, {}, {}, {}",
            ring.stage,
            2 * tile,
            lay.q
        ));
        body.op(format!("add.u32 {sg}, {sq}, {tile}"));
    }
    let (s, dp) = scores(&mut body, ht, d, &desc, [&sk, &sv, &sq, &sg]);
    let i0 = &walk.i0;
    // The statistics of the thread's query columns 8j + 2t (+1), from the
    // buffer's.
    let stats = body.reg(Class::B32);
    {
        let x = body.reg(Class::B32);
        body.op(format!(
            "mad.lo.u32 {stats}, {}, {STAT_BYTES}, {}",
            ring.stage, lay.stats
        ));
        body.op(format!("shl.b32 {x}, {t32}, 3"));
        body.op(format!("add.u32 {stats}, {stats}, {x}"));
    }
    let mls = shared_stats(&mut body, &stats, true);
    let mask = Mask {
        jw: &jw,
        i0,
        causal: &causal,
        l: &p["p_l"],
        s: &p["p_s"],
    };
    probabilities(&mut body, &s, &mls, &sl2, &f, &mask);
    let dcol = shared_stats(&mut body, &stats, false);
    let (pa, dsa) = gradients(&mut body, ht, &s, &dp, &dcol, &scale);
    let (my_ds, pair) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("add.u32 {my_ds}, {sds}, {dsb}"));
    body.op(format!("add.u32 {pair}, {}, {dsb}", lay.ds));
    store_ds(&mut body, &dsa, [&wi, &g32, &t32], &my_ds);
    accumulate_kv(&mut body, ht, d, &desc, &walk, (&pa, &dsa), &sg, &sq);
    // dK and dV's products done before dQ's are issued (a warpgroup's
    // products run in order anyway): their register operands then die
    // before dQ's accumulators are taken, which keeps the warpgroup within
    // its registers, and the buffer of Q and dO is free.
    body.op("wgmma.wait_group.sync.aligned 0");
    {
        let bar = Ring::barrier(&mut body, &lay.empty, &ring.stage);
        arrive(&mut body, &bar, Some(&lane0));
    }
    // Both warpgroups' dS^T stored: the warpgroup's 64 columns of dQ = dS
    // K over the block's 128 keys.
    body.op("bar.sync 1, 256");
    let dq = dq_products(
        &mut body,
        ht,
        &desc,
        d / 2,
        WGMMA_BWD_WS_KEYS,
        tile,
        &pair,
        &skc,
    );
    // The staging tile's last round read by the reductions (a fresh
    // barrier's preceding phase counts as complete), then the
    // warpgroup's columns of this tile's dQ, visible to the async proxy.
    {
        let parity = body.reg(Class::B32);
        body.op(format!("xor.b32 {parity}, {dqph}, 1"));
        wait_barrier(&mut body, &lay.dq_empty, &parity);
        let sdq = body.reg(Class::B32);
        body.op(format!("mad.lo.u32 {sdq}, {cw}, {}, {}", d / 2 * 4, lay.dq));
        stage_dq(&mut body, &dq, &f, &t32, &sdq, STAGE_PITCH);
        body.op("fence.proxy.async.shared::cta");
        arrive(&mut body, &lay.dq_full, None);
        body.op(format!("xor.b32 {dqph}, {dqph}, 1"));
    }
    body.op(format!("xor.b32 {dsb}, {dsb}, {}", 2 * REGION));
    ring.step(&mut body);
    body.op(format!("add.u64 {i0}, {i0}, {QUERIES}"));
    {
        let more = body.reg(Class::Pred);
        body.op(format!("setp.lt.u64 {more}, {i0}, {}", p["p_l"]));
        body.op(format!("@{more} bra.uni {}", walk.lp));
    }
    body.place(&walk.done);
    store_kv(&mut body, ht, d, &f, &walk, &pro.bs, &p);
    body.op("ret");
    entry_text(name, WGMMA_BWD_WS_THREADS, body)
}

/// The copying warpgroup (threads `tid` 0..128 of the block whose keys
/// start at `j0`): `K` and `V` of the block's keys, then per query tile
/// its `Q` and `dO` into the next buffer once it is released, and the
/// previous tile's `dQ` reductions once the computing warpgroups staged
/// it (so the next tile's copies are in flight while they wait). Returns
/// from the entry once its copies landed and its reductions completed.
fn copy_role(
    body: &mut Body,
    d: usize,
    p: &std::collections::HashMap<&str, String>,
    pro: &Prologue,
    (tid, j0, causal): (&str, &str, &str),
    lay: &Layout,
) {
    let tile = 64 * d * 2;
    body.op(format!("setmaxnreg.dec.sync.aligned.u32 {COPY_REGS}"));
    let l = &p["p_l"];
    let copier = Copier::new(body, tid, 128, d);
    let g = copier.sources(body, p, &pro.boff);
    {
        let (j1, x) = (body.reg(Class::B64), body.reg(Class::B32));
        body.op(format!("add.u64 {j1}, {j0}, {GROUP_KEYS}"));
        for (i, (first, src)) in [(j0, &g.k), (&j1, &g.k), (j0, &g.v), (&j1, &g.v)]
            .into_iter()
            .enumerate()
        {
            body.op(format!("add.u32 {x}, {}, {}", lay.k, i * tile));
            copier.tile(body, first, &p["p_s"], src, &x);
        }
        body.op(format!(
            "cp.async.mbarrier.arrive.noinc.shared.b64 [{}]",
            lay.kv_bar
        ));
    }
    // The query tiles from 0 or, under `causal`, from the block's first
    // key's; none past l.
    let (i0, done) = (body.reg(Class::B64), body.label("wbs_copied"));
    body.op(format!("mov.u64 {i0}, 0"));
    body.op(format!("@{causal} mov.u64 {i0}, {j0}"));
    {
        let none = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {none}, {i0}, {l}"));
        body.op(format!("@{none} bra.uni {done}"));
    }
    let ring = Ring::new(body, STAGES);
    let dqph = body.reg(Class::B32);
    body.op(format!("mov.u32 {dqph}, 0"));
    let (lp, first) = (body.label("wbs_copy_queries"), body.reg(Class::B64));
    body.op(format!("mov.u64 {first}, {i0}"));
    body.place(&lp);
    {
        let (bar, parity) = (
            Ring::barrier(body, &lay.empty, &ring.stage),
            body.reg(Class::B32),
        );
        body.op(format!("xor.b32 {parity}, {}, 1", ring.phase));
        wait_barrier(body, &bar, &parity);
        let (sq, sg) = (body.reg(Class::B32), body.reg(Class::B32));
        body.op(format!(
            "mad.lo.u32 {sq}, {}, {}, {}",
            ring.stage,
            2 * tile,
            lay.q
        ));
        body.op(format!("add.u32 {sg}, {sq}, {tile}"));
        copier.tile(body, &i0, l, &g.q, &sq);
        copier.tile(body, &i0, l, &g.go, &sg);
        copy_stats(body, p, pro, (tid, &i0), &ring.stage, lay);
        let bar = Ring::barrier(body, &lay.full, &ring.stage);
        body.op(format!("cp.async.mbarrier.arrive.noinc.shared.b64 [{bar}]"));
        ring.step(body);
        let (skip, later) = (body.label("wbs_no_dq"), body.reg(Class::Pred));
        body.op(format!("setp.eq.u64 {later}, {i0}, {first}"));
        body.op(format!("@{later} bra.uni {skip}"));
        let prev = body.reg(Class::B64);
        body.op(format!("sub.u64 {prev}, {i0}, {QUERIES}"));
        reduce_dq(body, d, p, pro, (tid, &prev, &dqph), lay);
        body.place(&skip);
        body.op(format!("add.u64 {i0}, {i0}, {QUERIES}"));
        let more = body.reg(Class::Pred);
        body.op(format!("setp.lt.u64 {more}, {i0}, {l}"));
        body.op(format!("@{more} bra.uni {lp}"));
    }
    let last = body.reg(Class::B64);
    body.op(format!("sub.u64 {last}, {i0}, {QUERIES}"));
    reduce_dq(body, d, p, pro, (tid, &last, &dqph), lay);
    body.place(&done);
    body.op("cp.async.wait_all");
    body.op("cp.async.bulk.wait_group 0");
    body.op("ret");
}

/// Emits the copier's `dQ` reductions of the query tile from `i0`: once
/// the staging tile's round `dqph` is written, thread `tid` < 64 adds its
/// row (if below l) with one bulk reduction of the row's `d` f32 columns;
/// once they have read the tile, every thread arrives on `dq_empty`.
fn reduce_dq(
    body: &mut Body,
    d: usize,
    p: &std::collections::HashMap<&str, String>,
    pro: &Prologue,
    (tid, i0, dqph): (&str, &str, &str),
    lay: &Layout,
) {
    wait_barrier(body, &lay.dq_full, dqph);
    body.op(format!("xor.b32 {dqph}, {dqph}, 1"));
    let (row, src, out) = (
        body.reg(Class::B64),
        body.reg(Class::B32),
        body.reg(Class::Pred),
    );
    body.op(format!("cvt.u64.u32 {row}, {tid}"));
    body.op(format!("add.u64 {row}, {row}, {i0}"));
    body.op(format!("setp.ge.u64 {out}, {row}, {}", p["p_l"]));
    {
        let issuer = body.reg(Class::Pred);
        body.op(format!("setp.ge.u32 {issuer}, {tid}, {QUERIES}"));
        body.op(format!("or.pred {out}, {out}, {issuer}"));
    }
    body.op(format!("add.u64 {row}, {row}, {}", pro.bl));
    body.op(format!("mul.lo.u64 {row}, {row}, {}", d * 4));
    body.op(format!("add.u64 {row}, {row}, {}", p["p_dqa"]));
    body.op(format!(
        "mad.lo.u32 {src}, {tid}, {STAGE_PITCH}, {}",
        lay.dq
    ));
    body.op(format!(
        "@!{out} cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [{row}], [{src}], {}",
        d * 4
    ));
    body.op("cp.async.bulk.commit_group");
    body.op("cp.async.bulk.wait_group.read 0");
    arrive(body, &lay.dq_empty, None);
}

/// Emits the copier's copies of the statistics of the query tile from
/// `i0` into the buffer `stage`'s: thread `tid` copies the log-sum-exp
/// (`tid` < 64) or the `D` of row `i0 + tid % 64`, clamped below l (the
/// rows past it are masked).
fn copy_stats(
    body: &mut Body,
    p: &std::collections::HashMap<&str, String>,
    pro: &Prologue,
    (tid, i0): (&str, &str),
    stage: &str,
    lay: &Layout,
) {
    let (r, row, lmax, src, dst, delta) = (
        body.reg(Class::B32),
        body.reg(Class::B64),
        body.reg(Class::B64),
        body.reg(Class::B64),
        body.reg(Class::B32),
        body.reg(Class::Pred),
    );
    body.op(format!("and.b32 {r}, {tid}, {}", QUERIES - 1));
    body.op(format!("cvt.u64.u32 {row}, {r}"));
    body.op(format!("add.u64 {row}, {row}, {i0}"));
    body.op(format!("sub.u64 {lmax}, {}, 1", p["p_l"]));
    body.op(format!("min.u64 {row}, {row}, {lmax}"));
    body.op(format!("add.u64 {row}, {row}, {}", pro.bl));
    body.op(format!("setp.ge.u32 {delta}, {tid}, {QUERIES}"));
    body.op(format!(
        "selp.b64 {src}, {}, {}, {delta}",
        p["p_delta"], p["p_lse"]
    ));
    body.op(format!("mad.lo.u64 {src}, {row}, 4, {src}"));
    body.op(format!(
        "mad.lo.u32 {dst}, {stage}, {STAT_BYTES}, {}",
        lay.stats
    ));
    body.op(format!("mad.lo.u32 {dst}, {tid}, 4, {dst}"));
    body.op(format!("cp.async.ca.shared.global [{dst}], [{src}], 4"));
}

/// Emits the loads of the thread's 16 statistics (see
/// [`stat`](super::attention_wgmma_bwd::steps::stat)) from its place
/// `stats` in a buffer's: with `lse`, the log-sum-exps as `-lse log2(e)`
/// (0 for a row without keys); else `D`.
fn shared_stats(body: &mut Body, stats: &str, lse: bool) -> Vec<String> {
    let half = if lse { 0 } else { QUERIES * 4 };
    (0..QUERIES / 4)
        .map(|i| {
            let m = body.reg(Class::F32);
            let col = (i / 2) * 8 + (i % 2);
            body.op(format!("ld.shared.f32 {m}, [{stats}+{}]", half + col * 4));
            if lse {
                lse_term(body, &m);
            }
            m
        })
        .collect()
}
