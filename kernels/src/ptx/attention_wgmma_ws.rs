//! The warp-specialised Hopper attention forward (compute capability 9.0
//! only, `.target sm_90a`), FlashAttention-3's structure on the pieces of
//! `attention_wgmma.rs`: a block of three warpgroups owns 128 query rows.
//! Warpgroup 0 only copies (`Q` once, then tiles of [`WGMMA_KEYS`] keys of
//! `K` and `V` into [`STAGES`] buffers) and gives its registers up
//! (`setmaxnreg.dec`) to warpgroups 1 and 2 (`setmaxnreg.inc`), which
//! compute 64 rows each. Buffers pass between them through `mbarrier`s
//! instead of block barriers: a buffer's `K` barrier completes when the
//! `cp.async`s of its `K` tile by the copier's 128 threads have landed
//! (`cp.async.mbarrier.arrive.noinc`: the copier never waits for its own
//! copies, so a tile is signalled as soon as it lands, not once the
//! copier could start the next one), its `V` barrier likewise, so that
//! `S = Q K^T` starts before `V` has landed; its `empty` barrier when the
//! eight computing warps have finished their products on it. The
//! computing threads fence to the async proxy `wgmma` reads through
//! after each wait.
//!
//! Within a computing warpgroup the products of one tile overlap the
//! softmax of the next: for tile `t` it issues `S_t = Q K_t^T` and then
//! `O += P_{t-1} V_{t-1}`, waits for `S_t` only, runs the softmax on it
//! while `P_{t-1} V_{t-1}` is in flight, then waits for that, releases
//! buffer `t - 1`, rescales `O` and packs `P_t` for the next pass. The
//! two computing warpgroups also take turns issuing their products (named
//! barriers), so that one's softmax runs beside the other's products.

use super::attention::{key_range, KeyRange, MMA_PARAMS};
use super::attention_wgmma::{
    accumulators, descriptor, frame, issue_pv, issue_qk, operand_bits, pack_p, rescale, softmax,
    store, warpgroup_rows, BlockOrder, Copier, ATOM_ROW, STAGES, WGMMA_KEYS,
};
use super::body::{Body, Class};
use super::mbarrier::{arrive, wait_barrier, wait_landed, Ring};
use super::mma_tile::{entry_params, half_type};
use crate::target::Target;
use tensorfn_core::DTypeKind;

/// Query rows a block of the warp-specialised entry owns (64 for each of
/// its two computing warpgroups).
///
/// ```
/// use tensorfn_kernels::ptx::ATTENTION_WS_ROWS;
/// assert_eq!(ATTENTION_WS_ROWS, 128);
/// ```
pub const ATTENTION_WS_ROWS: usize = 128;

/// Threads a block of the warp-specialised entry takes: the copying
/// warpgroup and the two computing ones.
///
/// ```
/// use tensorfn_kernels::ptx::ATTENTION_WS_THREADS;
/// assert_eq!(ATTENTION_WS_THREADS, 384);
/// ```
pub const ATTENTION_WS_THREADS: usize = 384;

/// Registers a thread of the copying warpgroup keeps, and those a thread
/// of a computing one takes (128 x 72 + 256 x 216: the 384 x 168 a
/// block of this size starts with; at 72 the copies do not spill).
const COPY_REGS: usize = 72;
const COMPUTE_REGS: usize = 216;

/// Bytes of the `mbarrier`s: a `K`, a `V` and an `empty` one a buffer.
const BARRIER_BYTES: usize = 3 * STAGES * 8;

/// Bytes of dynamic shared memory the warp-specialised entry takes at
/// head dim `d`: `Q` of the block, the buffers of `K` and `V`, their
/// barriers, and 1 KiB of slack to align the tiles to the 1 KiB the
/// swizzle repeats over (at head dim 128, 225 KiB and 72 bytes of the 227
/// KiB a block may take).
///
/// ```
/// use tensorfn_kernels::ptx::attention_ws_shared;
/// assert_eq!(attention_ws_shared(128), 32768 + 6 * 32768 + 72 + 1024);
/// ```
pub const fn attention_ws_shared(d: usize) -> usize {
    ATTENTION_WS_ROWS * d * 2 + 2 * STAGES * WGMMA_KEYS * d * 2 + BARRIER_BYTES + 1024
}

/// The warp-specialised entry `name` over `dtype` (f16 or bf16) with head
/// dim `d` (64 or 128), taking the parameters of the `mma.sync` entry
/// ([`MMA_PARAMS`]) and computing the same output and log-sum-exps, its
/// blocks taking their rows in the order of [`BlockOrder::Sections`], or
/// in that of [`BlockOrder::ByBatch`] when `by_batch` (kept for
/// measuring the two against each other).
pub(crate) fn attention_ws_entry(name: &str, dtype: DTypeKind, d: usize, by_batch: bool) -> String {
    let ht = half_type(dtype);
    let (rows, n) = (ATTENTION_WS_ROWS, WGMMA_KEYS);
    let kv_bytes = n * d * 2;
    let mut body = Body::for_target(Target::Sm80);
    let order = if by_batch {
        BlockOrder::ByBatch
    } else {
        BlockOrder::Sections(d)
    };
    let f = frame(&mut body, name, rows, order);
    let wg = body.reg(Class::B32);
    body.op(format!("shr.u32 {wg}, {}, 7", f.tid));
    // Shared memory: Q, K's buffers, V's, then the barriers of K's
    // arrival, of V's and the `empty` ones.
    let (sk, sv, fullk, fullv, empty) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("add.u32 {sk}, {}, {}", f.base, rows * d * 2));
    body.op(format!("add.u32 {sv}, {sk}, {}", STAGES * kv_bytes));
    body.op(format!("add.u32 {fullk}, {sv}, {}", STAGES * kv_bytes));
    body.op(format!("add.u32 {fullv}, {fullk}, {}", STAGES * 8));
    body.op(format!("add.u32 {empty}, {fullv}, {}", STAGES * 8));
    // The computing warpgroup's index among the two (the copier's is
    // taken as 0: its rows are unused).
    let cw = body.reg(Class::B32);
    body.op(format!("max.u32 {cw}, {wg}, 1"));
    body.op(format!("sub.u32 {cw}, {cw}, 1"));
    let rw = warpgroup_rows(&mut body, &f, &cw);
    let KeyRange {
        causal,
        ntiles,
        wend,
    } = key_range(&mut body, &f.p, (&f.big_r0, rows), (&rw.r0, 64), n);
    // Thread 0 sets the barriers up before anyone uses them: a `K` or
    // `V` barrier waits for the copies of the copier's 128 threads, an
    // `empty` one for the computing warpgroups' eight warps.
    {
        let first = body.reg(Class::Pred);
        let skip = body.label("ws_no_init");
        body.op(format!("setp.ne.u32 {first}, {}, 0", f.tid));
        body.op(format!("@{first} bra {skip}"));
        for i in 0..STAGES {
            for full in [&fullk, &fullv] {
                body.op(format!(
                    "mbarrier.init.shared::cta.b64 [{full}+{}], 128",
                    8 * i
                ));
            }
            body.op(format!(
                "mbarrier.init.shared::cta.b64 [{empty}+{}], 8",
                8 * i
            ));
        }
        body.place(&skip);
        body.op("bar.sync 0");
    }
    let compute = body.label("ws_compute");
    let copier_role = body.reg(Class::Pred);
    body.op(format!("setp.ne.u32 {copier_role}, {wg}, 0"));
    body.op(format!("@{copier_role} bra.uni {compute}"));
    copy_role(
        &mut body,
        &f,
        d,
        (&sk, &sv),
        (&fullk, &fullv, &empty),
        &ntiles,
    );
    body.place(&compute);
    body.op(format!("setmaxnreg.inc.sync.aligned.u32 {COMPUTE_REGS}"));
    let (kmajor, mnmajor) = operand_bits();
    let qdesc = {
        let a = body.reg(Class::B32);
        body.op(format!(
            "mad.lo.u32 {a}, {cw}, {}, {}",
            64 * ATOM_ROW,
            f.base
        ));
        descriptor(&mut body, &a, kmajor)
    };
    let (kdesc, vdesc) = (
        descriptor(&mut body, &sk, kmajor),
        descriptor(&mut body, &sv, mnmajor),
    );
    // The descriptor `desc` moved to the buffer `stage` (u32).
    let at_stage = |body: &mut Body, desc: &str, stage: &str| {
        let (st64, r) = (body.reg(Class::B64), body.reg(Class::B64));
        body.op(format!("mul.wide.u32 {st64}, {stage}, {}", kv_bytes >> 4));
        body.op(format!("add.s64 {r}, {desc}, {st64}"));
        r
    };
    let (o, ml) = accumulators(&mut body, d);
    let s: Vec<String> = (0..n / 2).map(|_| body.reg(Class::F32)).collect();
    let pa: Vec<[String; 4]> = (0..n / 16)
        .map(|_| [0, 1, 2, 3].map(|_| body.reg(Class::B32)))
        .collect();
    // Lane 0 of each warp releases a buffer.
    let lane0 = body.reg(Class::Pred);
    {
        let lane = body.reg(Class::B32);
        body.op(format!("and.b32 {lane}, {}, 31", f.tid));
        body.op(format!("setp.eq.u32 {lane0}, {lane}, 0"));
    }
    let release = |body: &mut Body, stage: &str| {
        let bar = Ring::barrier(body, &empty, stage);
        arrive(body, &bar, Some(&lane0));
    };
    // The tiles the warpgroup computes on (keys below `wend`); the block's
    // others it only releases.
    let mine = body.reg(Class::B64);
    body.op(format!("add.u64 {mine}, {wend}, {}", n - 1));
    body.op(format!("shr.u64 {mine}, {mine}, {}", n.trailing_zeros()));
    let ring = Ring::new(&mut body, STAGES);
    // `prev` and `pphase`: the previous tile's buffer and its round's
    // parity, whose `V` the tile's `P V` reads.
    let (t, j0, prev, pphase) = (
        body.reg(Class::B64),
        body.reg(Class::B64),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("mov.u64 {t}, 0"));
    body.op(format!("mov.u64 {j0}, 0"));
    let (lp, tail, rest, rest_lp, stored) = (
        body.label("ws_keys"),
        body.label("ws_tail"),
        body.label("ws_rest"),
        body.label("ws_rest_keys"),
        body.label("ws_store"),
    );
    // The two warpgroups take turns issuing their products (named
    // barriers 1 and 2: warpgroup w waits on w + 1 with the other one
    // arriving there), so that one's softmax runs beside the other's
    // products. Each takes and passes its turn ntiles + 1 times (the
    // first tile's S, each next tile's S and P V, the last tile's P V,
    // once for each tile it only releases, and once when it computes
    // none); the second lets the first start and does not pass its last
    // turn on, so that every wait meets one arrival.
    let (turn, other, second, passes) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::Pred),
        body.reg(Class::B64),
    );
    body.op(format!("add.u32 {turn}, {cw}, 1"));
    body.op(format!("xor.b32 {other}, {cw}, 1"));
    body.op(format!("add.u32 {other}, {other}, 1"));
    body.op(format!("setp.eq.u32 {second}, {cw}, 1"));
    body.op(format!("mov.u64 {passes}, 0"));
    body.op(format!("@{second} bar.arrive 1, 256"));
    let take_turn = |body: &mut Body| body.op(format!("bar.sync {turn}, 256"));
    let pass_turn = |body: &mut Body| {
        let keep = body.reg(Class::Pred);
        body.op(format!("setp.eq.u64 {keep}, {passes}, {ntiles}"));
        body.op(format!("and.pred {keep}, {keep}, {second}"));
        body.op(format!("@!{keep} bar.arrive {other}, 256"));
        body.op(format!("add.u64 {passes}, {passes}, 1"));
    };
    let (nothing, idle) = (body.reg(Class::Pred), body.label("ws_idle"));
    body.op(format!("setp.eq.u64 {nothing}, {mine}, 0"));
    body.op(format!("@{nothing} bra.uni {idle}"));
    // The first tile: S_0, its softmax (O is still 0: nothing to
    // rescale) and P_0.
    {
        let bar = Ring::barrier(&mut body, &fullk, &ring.stage);
        wait_landed(&mut body, &bar, &ring.phase);
        let kd = at_stage(&mut body, &kdesc, &ring.stage);
        take_turn(&mut body);
        body.op("wgmma.fence.sync.aligned");
        issue_qk(&mut body, &f, ht, d, rows, &s, &qdesc, &kd);
        body.op("wgmma.commit_group.sync.aligned");
        pass_turn(&mut body);
        body.op("wgmma.wait_group.sync.aligned 0");
        softmax(&mut body, &f, &rw, &causal, &s, &ml, &j0);
        pack_p(&mut body, ht, &s, Some(&pa));
    }
    let advance = |body: &mut Body| {
        body.op(format!("mov.u32 {prev}, {}", ring.stage));
        body.op(format!("mov.u32 {pphase}, {}", ring.phase));
        ring.step(body);
        body.op(format!("add.u64 {t}, {t}, 1"));
        body.op(format!("add.u64 {j0}, {j0}, {n}"));
    };
    advance(&mut body);
    body.place(&lp);
    {
        let more = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {more}, {t}, {mine}"));
        body.op(format!("@{more} bra.uni {tail}"));
        let bar = Ring::barrier(&mut body, &fullk, &ring.stage);
        wait_landed(&mut body, &bar, &ring.phase);
        let bar = Ring::barrier(&mut body, &fullv, &prev);
        wait_landed(&mut body, &bar, &pphase);
        let kd = at_stage(&mut body, &kdesc, &ring.stage);
        let vd = at_stage(&mut body, &vdesc, &prev);
        take_turn(&mut body);
        body.op("wgmma.fence.sync.aligned");
        issue_qk(&mut body, &f, ht, d, rows, &s, &qdesc, &kd);
        body.op("wgmma.commit_group.sync.aligned");
        issue_pv(&mut body, &f, ht, &o, &pa, &vd);
        body.op("wgmma.commit_group.sync.aligned");
        pass_turn(&mut body);
        // S_t done; P_{t-1} V_{t-1} may still run beside the softmax.
        body.op("wgmma.wait_group.sync.aligned 1");
        let alpha = softmax(&mut body, &f, &rw, &causal, &s, &ml, &j0);
        body.op("wgmma.wait_group.sync.aligned 0");
        release(&mut body, &prev);
        rescale(&mut body, &o, &alpha);
        pack_p(&mut body, ht, &s, Some(&pa));
        advance(&mut body);
        body.op(format!("bra.uni {lp}"));
    }
    // The last tile's O += P V.
    body.place(&tail);
    {
        let bar = Ring::barrier(&mut body, &fullv, &prev);
        wait_landed(&mut body, &bar, &pphase);
        let vd = at_stage(&mut body, &vdesc, &prev);
        take_turn(&mut body);
        body.op("wgmma.fence.sync.aligned");
        issue_pv(&mut body, &f, ht, &o, &pa, &vd);
        body.op("wgmma.commit_group.sync.aligned");
        pass_turn(&mut body);
        body.op("wgmma.wait_group.sync.aligned 0");
        release(&mut body, &prev);
        body.op(format!("bra.uni {rest}"));
    }
    body.place(&idle);
    take_turn(&mut body);
    pass_turn(&mut body);
    // The block's tiles past the warpgroup's keys: waited for (so that
    // the barriers' rounds stay in step, and the copier refills a buffer
    // only once its copies have landed) and released.
    body.place(&rest);
    body.place(&rest_lp);
    {
        let over = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {over}, {t}, {ntiles}"));
        body.op(format!("@{over} bra.uni {stored}"));
        for full in [&fullk, &fullv] {
            let bar = Ring::barrier(&mut body, full, &ring.stage);
            wait_barrier(&mut body, &bar, &ring.phase);
        }
        take_turn(&mut body);
        pass_turn(&mut body);
        release(&mut body, &ring.stage);
        ring.step(&mut body);
        body.op(format!("add.u64 {t}, {t}, 1"));
        body.op(format!("bra.uni {rest_lp}"));
    }
    body.place(&stored);
    store(&mut body, &f, &rw, ht, &o, &ml);
    body.op("ret");
    format!(
        ".extern .shared .align 128 .b8 {name}_smem[];\n\n.visible .entry {name}(\n{}\n)\n.maxntid {ATTENTION_WS_THREADS}, 1, 1\n{{\n{}}}\n",
        entry_params(&MMA_PARAMS),
        body.finish()
    )
}

/// The copying warpgroup: `Q` with the first tile, then each tile of `K`
/// and `V` into its buffer once the computing warpgroups released it
/// (the tile three before). Each thread's copies of a tile's `K`, and then
/// of its `V`, arrive on their barrier when they land
/// (`cp.async.mbarrier.arrive.noinc`, one of the barrier's 128
/// arrivals), so the copier goes on to the next buffer without waiting
/// for them. Returns from the entry once its last copies landed.
fn copy_role(
    body: &mut Body,
    f: &super::attention_wgmma::Frame,
    d: usize,
    (sk, sv): (&str, &str),
    (fullk, fullv, empty): (&str, &str, &str),
    ntiles: &str,
) {
    let kv_bytes = WGMMA_KEYS * d * 2;
    body.op(format!("setmaxnreg.dec.sync.aligned.u32 {COPY_REGS}"));
    let none = body.reg(Class::Pred);
    let done = body.label("ws_copied");
    body.op(format!("setp.eq.u64 {none}, {ntiles}, 0"));
    body.op(format!("@{none} bra.uni {done}"));
    let copier = Copier::new(body, f, (&f.tid, 128), (d, ATTENTION_WS_ROWS), (sk, sv));
    let ring = Ring::new(body, STAGES);
    let (t, j0, offset) = (
        body.reg(Class::B64),
        body.reg(Class::B64),
        body.reg(Class::B32),
    );
    body.op(format!("mov.u64 {t}, 0"));
    body.op(format!("mov.u64 {j0}, 0"));
    // Q's copies land with the first tile's K, whose barrier they join.
    copier.q(body);
    let lp = body.label("ws_copy_keys");
    body.place(&lp);
    {
        // The buffer's previous round released (a fresh barrier's
        // preceding phase counts as complete).
        let (bar, parity) = (
            Ring::barrier(body, empty, &ring.stage),
            body.reg(Class::B32),
        );
        body.op(format!("xor.b32 {parity}, {}, 1", ring.phase));
        wait_barrier(body, &bar, &parity);
        body.op(format!("mul.lo.u32 {offset}, {}, {kv_bytes}", ring.stage));
        for (v, full) in [(false, fullk), (true, fullv)] {
            copier.one(body, &j0, &offset, v);
            let bar = Ring::barrier(body, full, &ring.stage);
            body.op(format!("cp.async.mbarrier.arrive.noinc.shared.b64 [{bar}]"));
        }
        ring.step(body);
        body.op(format!("add.u64 {t}, {t}, 1"));
        body.op(format!("add.u64 {j0}, {j0}, {}", WGMMA_KEYS));
        let more = body.reg(Class::Pred);
        body.op(format!("setp.lt.u64 {more}, {t}, {ntiles}"));
        body.op(format!("@{more} bra.uni {lp}"));
    }
    body.op("cp.async.wait_all");
    body.place(&done);
    body.op("ret");
}
