//! The tensor-core attention backward behind
//! [`builtin::attention_mma_backward`](crate::builtin::attention_mma_backward),
//! in the manner of FlashAttention-2 (sm_80 and newer, f16 and bf16, head
//! dims 64 and 128): a preprocessing entry writes `D_i = dO_i . O_i`, then
//! a block of eight warps owns [`MMA_BWD_KEYS`] keys (16 a warp), their
//! tiles of `K` and `V` resident in (dynamic) shared memory, and walks the
//! query blocks (under `causal`, only those at or after its keys), the
//! next block's `Q` and `dO` copied with `cp.async` into a second buffer
//! while the current one is used. Per block of queries it recomputes `S^T = K Q^T`, `P^T = 2^(S^T scale log2(e) - lse
//! log2(e))`, accumulates `dV += P^T dO` and `dK += dS^T Q` in registers
//! (`dP^T = V dO^T`, `dS = P (dP - D) scale`), and adds `dQ += dS K`
//! into an f32 buffer with `red.global.add.f32`; every product is
//! `mma.sync.m16n8k16` with f32 accumulation, its fragments read from
//! swizzled shared memory with `ldmatrix`.

use super::attention::{batch_offsets, divmod_u64, split_batch_offsets};
use super::body::{Body, Class};
use super::mma_tile::{
    entry_params, half_type, lanes, ldmatrix_x4, load_params, mma, mma_from, pack_a, scale_log2,
    swizzle, Lanes, LOG2_E,
};
use crate::target::Target;
use tensorfn_core::DTypeKind;

/// Keys a block of the tensor-core backward owns (16 a warp, eight
/// warps).
///
/// ```
/// assert_eq!(tensorfn_kernels::ptx::MMA_BWD_KEYS, 128);
/// ```
pub const MMA_BWD_KEYS: usize = 128;

/// Threads of a block of either backward entry.
pub const MMA_BWD_THREADS: usize = 256;

/// Warps of a block.
const WARPS: usize = MMA_BWD_THREADS / 32;

/// Query rows a step of the backward takes at head dim `d`.
const fn query_rows(d: usize) -> usize {
    if d > 64 {
        32
    } else {
        64
    }
}

/// Bytes of dynamic shared memory the main entry takes at head dim `d`:
/// the resident tiles of `K` and `V`, two of `Q` and `dO` (the next
/// block's copied while the current one is used) and one of `dS^T`.
///
/// ```
/// use tensorfn_kernels::ptx::attention_mma_backward_shared;
/// assert_eq!(attention_mma_backward_shared(128), 104 * 1024);
/// assert_eq!(attention_mma_backward_shared(64), 80 * 1024);
/// ```
pub const fn attention_mma_backward_shared(d: usize) -> usize {
    2 * MMA_BWD_KEYS * 2 * d + 2 * 2 * query_rows(d) * 2 * d + MMA_BWD_KEYS * query_rows(d) * 2
}

/// The parameters of the main entry, in order; each is 64 bits (`p_scale`
/// is an f64). `p_dqa` is the f32 `[batch, l, d]` buffer `dQ` is added
/// into (zeroed by the caller), `p_dk` and `p_dv` the contiguous `[batch,
/// s, d]` gradients, `p_delta` and `p_lse` the rows' `D_i` and the
/// forward's log-sum-exps (f32, contiguous `[batch, l]`), `p_go` the
/// output's gradient, walked like the query (`p_gob`, `p_goh` its outer
/// and inner batch strides, `p_gor` its row stride, in elements, its
/// columns contiguous: the heads of a `[B, T, H, D]` gradient are read in
/// place); the rest as in the forward's tensor-core entry.
pub(crate) const MMA_BWD_PARAMS: [&str; 27] = [
    "p_dqa", "p_dk", "p_dv", "p_delta", "p_lse", "p_go", "p_q", "p_k", "p_v", "p_l", "p_s", "p_qb",
    "p_qr", "p_kb", "p_kr", "p_vb", "p_vr", "p_causal", "p_scale", "p_b0", "p_nh", "p_qh", "p_kh",
    "p_vh", "p_gob", "p_gor", "p_goh",
];

/// The parameters of the preprocessing entry: `D` (f32, contiguous
/// `[batch, l]`, from row `p_r0` on), the output and its gradient (`[batch,
/// l, d]` with columns contiguous, walked by their outer and inner batch
/// strides and row strides over `p_nh` inner batches, as in the main
/// entry), the row count and `l`.
pub(crate) const MMA_BWD_DELTA_PARAMS: [&str; 13] = [
    "p_delta", "p_o", "p_go", "p_rows", "p_r0", "p_l", "p_nh", "p_ob", "p_or", "p_oh", "p_gob",
    "p_gor", "p_goh",
];

/// What both main backward entries (`mma.sync` and `wgmma`) start from:
/// the block's key block `cta` (`%ctaid.x`), the element offsets of its
/// batch `b = p_b0 + %ctaid.y` in `q`, `k`, `v` and `go` (`boff`, through
/// their outer and inner batch strides), and the first rows of that batch
/// in the contiguous operands: `bl = b * l` (lse, D, dQ) and `bs = b * s`
/// (dK, dV).
pub(super) struct Prologue {
    pub(super) cta: String,
    pub(super) boff: std::collections::HashMap<&'static str, String>,
    pub(super) bl: String,
    pub(super) bs: String,
}

/// Emits the [`Prologue`] of a main backward entry with parameters `p`
/// ([`MMA_BWD_PARAMS`]).
pub(super) fn prologue(body: &mut Body, p: &std::collections::HashMap<&str, String>) -> Prologue {
    let (cta, by) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("mov.u32 {cta}, %ctaid.x"));
    body.op(format!("mov.u32 {by}, %ctaid.y"));
    let b = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {b}, {by}"));
    body.op(format!("add.u64 {b}, {b}, {}", p["p_b0"]));
    let boff = batch_offsets(body, &b, p, &["q", "k", "v", "go"]);
    let (bl, bs) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("mul.lo.u64 {bl}, {b}, {}", p["p_l"]));
    body.op(format!("mul.lo.u64 {bs}, {b}, {}", p["p_s"]));
    Prologue { cta, boff, bl, bs }
}

/// `-inf` and `0` as f32 immediates.
pub(super) const NEG_INF: &str = "0fFF800000";
pub(super) const ZERO: &str = "0f00000000";

/// A thread's slot in the block's 16-byte copies of tiles of `chunks`
/// chunks a row: chunk `tid % chunks` of row `tid / chunks` (and of the
/// rows each further pass of the block's copies covers), at byte offset
/// `slot` of a tile, the row `crow64` and the chunk's byte offset
/// `cbytes` in a row of the source (u64).
pub(super) struct CopySlot {
    pub(super) slot: String,
    pub(super) crow64: String,
    pub(super) cbytes: String,
}

/// Emits the [`CopySlot`] of thread `tid`, `swizzle(row, chunk)` the
/// tile's byte offset of a chunk (the backward forms' tiles swizzle
/// differently).
pub(super) fn copy_slot(
    body: &mut Body,
    tid: &str,
    chunks: usize,
    swizzle: impl FnOnce(&mut Body, &str, &str) -> String,
) -> CopySlot {
    let (crow, cchunk) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!(
        "shr.u32 {crow}, {tid}, {}",
        chunks.trailing_zeros()
    ));
    body.op(format!("and.b32 {cchunk}, {tid}, {}", chunks - 1));
    let slot = swizzle(body, &crow, &cchunk);
    let (crow64, cbytes) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("cvt.u64.u32 {crow64}, {crow}"));
    body.op(format!("cvt.u64.u32 {cbytes}, {cchunk}"));
    body.op(format!("shl.b64 {cbytes}, {cbytes}, 4"));
    CopySlot {
        slot,
        crow64,
        cbytes,
    }
}

/// Emits `m = -lse log2(e)` in place of a loaded `lse` (`P^T`'s
/// exponent adds it), 0 for a row without keys (`lse` -inf), so that no
/// infinity enters the exponent.
pub(super) fn lse_term(body: &mut Body, m: &str) {
    let nl2e = format!("0f{:08X}", (-LOG2_E as f32).to_bits());
    let inf = body.reg(Class::Pred);
    body.op(format!("setp.eq.f32 {inf}, {m}, {NEG_INF}"));
    body.op(format!("mul.rn.f32 {m}, {m}, {nl2e}"));
    body.op(format!("@{inf} mov.f32 {m}, {ZERO}"));
}

/// Where a `P^T` tile is masked: the first key `jw` of its rows and the
/// first query `i0` of its columns, `causal`, the lengths `l` (queries)
/// and `s` (keys).
pub(super) struct Mask<'a> {
    pub(super) jw: &'a str,
    pub(super) i0: &'a str,
    pub(super) causal: &'a str,
    pub(super) l: &'a str,
    pub(super) s: &'a str,
}

/// Emits whether the tile of `keys` keys and `queries` queries of `m`
/// reaches past the queries, past the keys or, under `causal`, a key
/// past a query: only such tiles are masked element by element.
pub(super) fn reaches_edge(body: &mut Body, m: &Mask, queries: usize, keys: usize) -> String {
    let Mask {
        jw,
        i0,
        causal,
        l,
        s,
    } = *m;
    let edge = body.reg(Class::Pred);
    let (t, e2) = (body.reg(Class::B64), body.reg(Class::Pred));
    body.op(format!("add.u64 {t}, {i0}, {queries}"));
    body.op(format!("setp.gt.u64 {edge}, {t}, {l}"));
    body.op(format!("add.u64 {t}, {jw}, {keys}"));
    body.op(format!("setp.gt.u64 {e2}, {t}, {s}"));
    body.op(format!("or.pred {edge}, {edge}, {e2}"));
    body.op(format!("add.u64 {t}, {jw}, {}", keys - 1));
    body.op(format!("setp.gt.u64 {e2}, {t}, {i0}"));
    body.op(format!("and.pred {e2}, {e2}, {causal}"));
    body.op(format!("or.pred {edge}, {edge}, {e2}"));
    edge
}

/// Emits the mask of the `P^T` exponent `r` of key `key` and query `c0 +
/// off` (u64): -inf (so `P^T` 0) past the queries, past the keys or,
/// under `causal`, for a key past its query.
pub(super) fn mask_element(
    body: &mut Body,
    m: &Mask,
    r: &str,
    (c0, off): (&str, usize),
    key: &str,
) {
    let qi = body.reg(Class::B64);
    body.op(format!("add.u64 {qi}, {c0}, {off}"));
    let (out, late) = (body.reg(Class::Pred), body.reg(Class::Pred));
    body.op(format!("setp.ge.u64 {out}, {qi}, {}", m.l));
    body.op(format!("setp.ge.u64 {late}, {key}, {}", m.s));
    body.op(format!("or.pred {out}, {out}, {late}"));
    body.op(format!("setp.gt.u64 {late}, {key}, {qi}"));
    body.op(format!("and.pred {late}, {late}, {}", m.causal));
    body.op(format!("or.pred {out}, {out}, {late}"));
    body.op(format!("@{out} mov.f32 {r}, {NEG_INF}"));
}

/// The two 16-bit halves of `x` as f32 (`lo`, `hi`).
fn unpack(body: &mut Body, dtype: DTypeKind, x: &str) -> [String; 2] {
    let (lo, hi) = (body.reg(Class::F32), body.reg(Class::F32));
    if dtype == DTypeKind::F16 {
        let (a, b) = (body.reg(Class::B16), body.reg(Class::B16));
        body.op(format!("mov.b32 {{{a}, {b}}}, {x}"));
        body.op(format!("cvt.f32.f16 {lo}, {a}"));
        body.op(format!("cvt.f32.f16 {hi}, {b}"));
    } else {
        let (a, b) = (body.reg(Class::B32), body.reg(Class::B32));
        body.op(format!("shl.b32 {a}, {x}, 16"));
        body.op(format!("and.b32 {b}, {x}, -65536"));
        body.op(format!("mov.b32 {lo}, {a}"));
        body.op(format!("mov.b32 {hi}, {b}"));
    }
    [lo, hi]
}

/// The preprocessing entry `name`: one warp per row of `O` and `dO`
/// (`d` 16-bit elements), `D_i = sum_c dO_ic O_ic` in f32.
pub(crate) fn attention_mma_bwd_delta_entry(name: &str, dtype: DTypeKind, d: usize) -> String {
    let mut body = Body::for_target(Target::Sm80);
    let p = load_params(
        &mut body,
        &MMA_BWD_DELTA_PARAMS,
        &["p_delta", "p_o", "p_go"],
    );
    let end = body.label("delta_end");
    let (tid, lane, warp, cta) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("mov.u32 {tid}, %tid.x"));
    body.op(format!("and.b32 {lane}, {tid}, 31"));
    body.op(format!("shr.u32 {warp}, {tid}, 5"));
    body.op(format!("mov.u32 {cta}, %ctaid.x"));
    let row = body.reg(Class::B64);
    body.op(format!(
        "mul.wide.u32 {row}, {cta}, {}",
        MMA_BWD_THREADS / 32
    ));
    let w64 = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {w64}, {warp}"));
    body.op(format!("add.u64 {row}, {row}, {w64}"));
    let past = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {past}, {row}, {}", p["p_rows"]));
    body.op(format!("@{past} bra.uni {end}"));
    body.op(format!("add.u64 {row}, {row}, {}", p["p_r0"]));
    // Row `row` is row i of batch b = row / l; each operand's row starts at
    // its batch's offset plus i row strides.
    // One warp a row: both divisions in 32 bits where the sizes allow.
    let (b, i) = divmod_u64(&mut body, &row, &p["p_l"]);
    let (outer, inner) = divmod_u64(&mut body, &b, &p["p_nh"]);
    let boff = split_batch_offsets(&mut body, &outer, &inner, &p, &["o", "go"]);
    // Lane t takes the pairs t, t + 32, .. of the row.
    let l64 = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {l64}, {lane}, 4"));
    let [ao, ag] = ["o", "go"].map(|x| {
        let a = body.reg(Class::B64);
        body.op(format!(
            "mad.lo.u64 {a}, {i}, {}, {}",
            p[format!("p_{x}r").as_str()],
            boff[x]
        ));
        body.op(format!(
            "mad.lo.u64 {a}, {a}, 2, {}",
            p[format!("p_{x}").as_str()]
        ));
        body.op(format!("add.u64 {a}, {a}, {l64}"));
        a
    });
    let acc = body.reg(Class::F32);
    body.op(format!("mov.f32 {acc}, 0f00000000"));
    for k in 0..d / 64 {
        let (xo, xg) = (body.reg(Class::B32), body.reg(Class::B32));
        body.op(format!("ld.global.nc.b32 {xo}, [{ao}+{}]", k * 128));
        body.op(format!("ld.global.nc.b32 {xg}, [{ag}+{}]", k * 128));
        let o = unpack(&mut body, dtype, &xo);
        let g = unpack(&mut body, dtype, &xg);
        for x in 0..2 {
            body.op(format!("fma.rn.f32 {acc}, {}, {}, {acc}", o[x], g[x]));
        }
    }
    for o in [16, 8, 4, 2, 1] {
        let y = body.reg(Class::F32);
        body.op(format!("shfl.sync.bfly.b32 {y}, {acc}, {o}, 31, -1"));
        body.op(format!("add.rn.f32 {acc}, {acc}, {y}"));
    }
    let not0 = body.reg(Class::Pred);
    body.op(format!("setp.ne.u32 {not0}, {lane}, 0"));
    body.op(format!("@{not0} bra {end}"));
    let a = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {a}, {row}, 4, {}", p["p_delta"]));
    body.op(format!("st.global.f32 [{a}], {acc}"));
    body.place(&end);
    body.op("ret");
    format!(
        ".visible .entry {name}(\n{}\n)\n.maxntid {MMA_BWD_THREADS}, 1, 1\n{{\n{}}}\n",
        entry_params(&MMA_BWD_DELTA_PARAMS),
        body.finish()
    )
}

/// The main entry `name` over `dtype` (f16 or bf16) with head dim `d` (64
/// or 128): see the module's documentation. Launch with `block.x =`
/// [`MMA_BWD_THREADS`], `grid.x = ceil(s /`[`MMA_BWD_KEYS`]`)`, `grid.y`
/// the batch, after the preprocessing entry.
pub(crate) fn attention_mma_bwd_entry(name: &str, dtype: DTypeKind, d: usize) -> String {
    let ht = half_type(dtype);
    let br = query_rows(d);
    let threads = MMA_BWD_THREADS;
    let row_bytes = d * 2;
    let chunks = d / 8;
    let pass_rows = threads / chunks;
    let kv_bytes = MMA_BWD_KEYS * row_bytes;
    let qt_bytes = br * row_bytes;
    // dS^T: [keys][br queries] 16-bit, in its own tile after the buffers.
    let ds_row = br * 2;
    let mut body = Body::for_target(Target::Sm80);
    let p = load_params(
        &mut body,
        &MMA_BWD_PARAMS,
        &[
            "p_dqa", "p_dk", "p_dv", "p_delta", "p_lse", "p_go", "p_q", "p_k", "p_v",
        ],
    );
    // scale and scale * log2(e), in f32; -log2(e).
    let sl2 = scale_log2(&mut body);
    let scale = body.reg(Class::F32);
    {
        let s64 = body.reg(Class::F64);
        body.op(format!("ld.param.f64 {s64}, [p_scale]"));
        body.op(format!("cvt.rn.f32.f64 {scale}, {s64}"));
    }
    let Lanes {
        tid,
        lane,
        warp,
        g32,
        t32,
        g,
        tg,
    } = lanes(&mut body);
    let Prologue { cta, boff, bl, bs } = prologue(&mut body, &p);
    // The block's keys j0.., the warp's kw = j0 + 16 warp, the thread's
    // ka = kw + g and kb = ka + 8.
    let j0 = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {j0}, {cta}, {MMA_BWD_KEYS}"));
    let kw = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {kw}, {warp}, 16"));
    body.op(format!("add.u64 {kw}, {kw}, {j0}"));
    let (ka, kb) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("add.u64 {ka}, {kw}, {g}"));
    body.op(format!("add.u64 {kb}, {ka}, 8"));
    let causal = body.reg(Class::Pred);
    body.op(format!("setp.ne.u64 {causal}, {}, 0", p["p_causal"]));
    // Shared memory: K, V, then two buffers of Q and dO (dS^T).
    let (sk, sv) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("mov.u32 {sk}, {name}_smem"));
    body.op(format!("add.u32 {sv}, {sk}, {kv_bytes}"));
    let tile_q = |buf: usize| 2 * kv_bytes + buf * 2 * qt_bytes;
    let tile_g = |buf: usize| tile_q(buf) + qt_bytes;
    let tile_ds = tile_q(2);
    let (sq, sg): (Vec<String>, Vec<String>) = (0..2)
        .map(|buf| {
            let (q, g) = (body.reg(Class::B32), body.reg(Class::B32));
            body.op(format!("add.u32 {q}, {sk}, {}", tile_q(buf)));
            body.op(format!("add.u32 {g}, {sk}, {}", tile_g(buf)));
            (q, g)
        })
        .unzip();
    // Swizzled byte offset of (row, chunk) in a tile: chunk c of row r at
    // c ^ (r & 7).
    let swz = |body: &mut Body, row: &str, chunk: &str| swizzle(body, row, chunk, row_bytes);
    // The thread's copy slot: row tid / chunks (+ pass * pass_rows), chunk
    // tid % chunks.
    let CopySlot {
        slot,
        crow64,
        cbytes,
    } = copy_slot(&mut body, &tid, chunks, swz);
    // Byte address of (row 0, the thread's chunk) of an operand whose
    // batch starts `boff` elements in.
    let base = |body: &mut Body, ptr: &str, boff: &str| {
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {boff}, 2, {ptr}"));
        body.op(format!("add.u64 {a}, {a}, {cbytes}"));
        a
    };
    let gkb = base(&mut body, &p["p_k"], &boff["k"]);
    let gvb = base(&mut body, &p["p_v"], &boff["v"]);
    let gqb = base(&mut body, &p["p_q"], &boff["q"]);
    let gob = base(&mut body, &p["p_go"], &boff["go"]);
    let stride2 = |body: &mut Body, rs: &str| {
        let r = body.reg(Class::B64);
        body.op(format!("shl.b64 {r}, {rs}, 1"));
        r
    };
    let (kr2, vr2, qr2) = (
        stride2(&mut body, &p["p_kr"]),
        stride2(&mut body, &p["p_vr"]),
        stride2(&mut body, &p["p_qr"]),
    );
    let gr2 = stride2(&mut body, &p["p_gor"]);
    // Copies `rows` rows from row `first` on of an operand of `limit` rows
    // into the tile at `dst`, rows past `limit` zero-filled (from a
    // clamped address).
    let copy = |body: &mut Body,
                rows: usize,
                first: &str,
                limit: &str,
                (src, rs2): (&str, &str),
                dst: &str| {
        let lmax = body.reg(Class::B64);
        body.op(format!("sub.u64 {lmax}, {limit}, 1"));
        for ps in 0..rows / pass_rows {
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
            let s = body.reg(Class::B32);
            body.op(format!("add.u32 {s}, {dst}, {slot}"));
            body.op(format!(
                "cp.async.cg.shared.global [{s}+{}], [{a}], 16, {n}",
                ps * pass_rows * row_bytes
            ));
        }
    };
    copy(&mut body, MMA_BWD_KEYS, &j0, &p["p_s"], (&gkb, &kr2), &sk);
    copy(&mut body, MMA_BWD_KEYS, &j0, &p["p_s"], (&gvb, &vr2), &sv);
    body.op("cp.async.commit_group");
    // ldmatrix addresses (lanes 0-7, 8-15, 16-23, 24-31 give the rows of
    // the four matrices).
    let (l7, l3) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("and.b32 {l7}, {lane}, 7"));
    body.op(format!("shr.u32 {l3}, {lane}, 3"));
    // A fragments of rows 16 warp.. of a key tile (x4: rows +0..7 and
    // +8..15 of chunk 2kc, then of chunk 2kc + 1), and B fragments of a
    // row-major [k, n] tile (x4.trans: the same pattern): lane gives row
    // (lane >> 3 & 1) * 8 + (lane & 7) and chunk 2kc + (lane >> 4).
    let (arow, ac) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("and.b32 {arow}, {l3}, 1"));
    body.op(format!("mad.lo.u32 {arow}, {arow}, 8, {l7}"));
    body.op(format!("shr.u32 {ac}, {lane}, 4"));
    let pair_addr = |body: &mut Body, row: &str, kc: usize| {
        let c = body.reg(Class::B32);
        body.op(format!("add.u32 {c}, {ac}, {}", 2 * kc));
        swz(body, row, &c)
    };
    // Addresses in K's tile (the others at fixed offsets from it) of the
    // fragments of chunk pair kc, rows (lane-given) + 16 kk: add kk * 16 *
    // row_bytes. The warp's A fragments of K and V are those of kk = warp
    // (the swizzle depends on the row's low bits only).
    let bt_addr: Vec<String> = (0..d / 16)
        .map(|kc| {
            let o = pair_addr(&mut body, &arow, kc);
            body.op(format!("add.u32 {o}, {o}, {sk}"));
            o
        })
        .collect();
    let wofs = body.reg(Class::B32);
    body.op(format!("mul.lo.u32 {wofs}, {warp}, {}", 16 * row_bytes));
    // B fragments of a [n, k] tile (x4, non-trans: rows n0 + (lane & 7),
    // chunks 4q + (lane >> 3)), as the forward reads K.
    let bn_addr: Vec<String> = (0..d / 32)
        .map(|q| {
            let c = body.reg(Class::B32);
            body.op(format!("add.u32 {c}, {l3}, {}", 4 * q));
            let o = swz(&mut body, &l7, &c);
            body.op(format!("add.u32 {o}, {o}, {sk}"));
            o
        })
        .collect();
    let tv = kv_bytes;
    // dS^T's swizzle: chunk c of key row r at c ^ (r & 7) with 8 chunks a
    // row, c ^ (r >> 1 & 3) with 4.
    let ds_chunks = br / 8;
    let ds_swz = |body: &mut Body, row: &str, chunk: &str| {
        let x = body.reg(Class::B32);
        if ds_chunks == 8 {
            body.op(format!("and.b32 {x}, {row}, 7"));
        } else {
            body.op(format!("shr.u32 {x}, {row}, 1"));
            body.op(format!("and.b32 {x}, {x}, 3"));
        }
        body.op(format!("xor.b32 {x}, {x}, {chunk}"));
        body.op(format!("shl.b32 {x}, {x}, 4"));
        // Relative to K's tile: add dS^T's offset.
        let o = body.reg(Class::B32);
        body.op(format!("mad.lo.u32 {o}, {row}, {ds_row}, {x}"));
        body.op(format!("add.u32 {o}, {o}, {sk}"));
        o
    };
    // The warp's share of dQ: query rows 16 rg.., n-tiles part * nq..
    let rgroups = br / 16;
    let splits = WARPS / rgroups;
    let nq = d / 8 / splits;
    let (rg, part) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("rem.u32 {rg}, {warp}, {rgroups}"));
    body.op(format!("div.u32 {part}, {warp}, {rgroups}"));
    // A fragments of dS (x4.trans of dS^T): key (lane >> 4) * 8 + (lane &
    // 7) (+ 16 kc), query chunk 2 rg + (lane >> 3 & 1).
    let dsa_addr = {
        let (key, qc) = (body.reg(Class::B32), body.reg(Class::B32));
        body.op(format!("shr.u32 {key}, {lane}, 4"));
        body.op(format!("mad.lo.u32 {key}, {key}, 8, {l7}"));
        body.op(format!("and.b32 {qc}, {l3}, 1"));
        body.op(format!("mad.lo.u32 {qc}, {rg}, 2, {qc}"));
        ds_swz(&mut body, &key, &qc)
    };
    // The n-tile column base of the warp's dQ share and of its dQ rows.
    let qcol = body.reg(Class::B64);
    {
        let p64 = body.reg(Class::B64);
        body.op(format!("cvt.u64.u32 {p64}, {part}"));
        body.op(format!("mul.lo.u64 {qcol}, {p64}, {}", nq * 8));
        let t2 = body.reg(Class::B64);
        body.op(format!("shl.b64 {t2}, {tg}, 1"));
        body.op(format!("add.u64 {qcol}, {qcol}, {t2}"));
    }
    let qrow0 = body.reg(Class::B64);
    {
        let r64 = body.reg(Class::B64);
        body.op(format!("cvt.u64.u32 {r64}, {rg}"));
        body.op(format!("mul.lo.u64 {qrow0}, {r64}, 16"));
        body.op(format!("add.u64 {qrow0}, {qrow0}, {g}"));
    }
    let new_acc = |body: &mut Body, n: usize| -> Vec<[String; 4]> {
        (0..n)
            .map(|_| {
                let t = [0, 1, 2, 3].map(|_| body.reg(Class::F32));
                for r in &t {
                    body.op(format!("mov.f32 {r}, {ZERO}"));
                }
                t
            })
            .collect()
    };
    let dv = new_acc(&mut body, d / 8);
    let dk = new_acc(&mut body, d / 8);
    let zf = body.reg(Class::F32);
    body.op(format!("mov.f32 {zf}, {ZERO}"));
    let zq = [zf.clone(), zf.clone(), zf.clone(), zf];
    // Query blocks i0 = first.. (under `causal`, from the one holding
    // query j0), br rows each.
    let i0 = body.reg(Class::B64);
    body.op(format!("mov.u64 {i0}, 0"));
    {
        let f = body.reg(Class::B64);
        body.op(format!("div.u64 {f}, {j0}, {br}"));
        body.op(format!("mul.lo.u64 {f}, {f}, {br}"));
        body.op(format!("@{causal} mov.u64 {i0}, {f}"));
    }
    let (lp, done) = (body.label("bwd_queries"), body.label("bwd_done"));
    {
        let none = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {none}, {i0}, {}", p["p_l"]));
        body.op(format!("@{none} bra.uni {done}"));
    }
    let lmax = body.reg(Class::B64);
    body.op(format!("sub.u64 {lmax}, {}, 1", p["p_l"]));
    // The first block's Q and dO into buffer 0.
    copy(&mut body, br, &i0, &p["p_l"], (&gqb, &qr2), &sq[0]);
    copy(&mut body, br, &i0, &p["p_l"], (&gob, &gr2), &sg[0]);
    body.op("cp.async.commit_group");
    let nts = br / 8;
    body.place(&lp);
    // The loop body twice, once per buffer.
    for buf in 0..2 {
        let (tq, tg_) = (tile_q(buf), tile_g(buf));
        // Every warp is past the last block (its tiles in the other buffer):
        // the next block's copy may start there.
        body.op("bar.sync 0");
        {
            let next = body.reg(Class::B64);
            body.op(format!("add.u64 {next}, {i0}, {br}"));
            let last = body.reg(Class::Pred);
            body.op(format!("setp.ge.u64 {last}, {next}, {}", p["p_l"]));
            let no_copy = body.label("bwd_no_copy");
            body.op(format!("@{last} bra.uni {no_copy}"));
            copy(&mut body, br, &next, &p["p_l"], (&gqb, &qr2), &sq[1 - buf]);
            copy(&mut body, br, &next, &p["p_l"], (&gob, &gr2), &sg[1 - buf]);
            body.place(&no_copy);
            body.op("cp.async.commit_group");
        }
        // This block's tiles arrived everywhere.
        body.op("cp.async.wait_group 1");
        body.op("bar.sync 0");
        // X^T = A_w B^T for the warp's 16 keys (A: K or V) against the
        // block's queries (B: Q or dO), n-tiles of 8 queries.
        let product_t = |body: &mut Body, ta: usize, tb: usize| -> Vec<[String; 4]> {
            let s: Vec<[String; 4]> = (0..nts)
                .map(|_| [0, 1, 2, 3].map(|_| body.reg(Class::F32)))
                .collect();
            for q in 0..d / 32 {
                let aa = [0, 1].map(|x| {
                    let a = body.reg(Class::B32);
                    body.op(format!("add.u32 {a}, {}, {wofs}", bt_addr[2 * q + x]));
                    a
                });
                let a0 = ldmatrix_x4(body, false, &aa[0], ta);
                let a1 = ldmatrix_x4(body, false, &aa[1], ta);
                for (nt, st) in s.iter().enumerate() {
                    let bf = ldmatrix_x4(body, false, &bn_addr[q], tb + nt * 8 * row_bytes);
                    let c = if q == 0 { &zq } else { st };
                    mma_from(body, ht, st, &a0, [&bf[0], &bf[1]], c);
                    mma(body, ht, st, &a1, [&bf[2], &bf[3]]);
                }
            }
            s
        };
        let s = product_t(&mut body, 0, tq);
        // The queries of the thread's columns (clamped below l), their
        // -lse log2(e) and D.
        let (mls, dcol): (Vec<String>, Vec<String>) = {
            let mut mls = Vec::new();
            let mut ds = Vec::new();
            let c0 = body.reg(Class::B64);
            body.op(format!("shl.b64 {c0}, {tg}, 1"));
            body.op(format!("add.u64 {c0}, {c0}, {i0}"));
            for nt in 0..nts {
                for x in 0..2 {
                    let qi = body.reg(Class::B64);
                    body.op(format!("add.u64 {qi}, {c0}, {}", nt * 8 + x));
                    body.op(format!("min.u64 {qi}, {qi}, {lmax}"));
                    body.op(format!("add.u64 {qi}, {qi}, {bl}"));
                    let (al, ad) = (body.reg(Class::B64), body.reg(Class::B64));
                    body.op(format!("mad.lo.u64 {al}, {qi}, 4, {}", p["p_lse"]));
                    body.op(format!("mad.lo.u64 {ad}, {qi}, 4, {}", p["p_delta"]));
                    let (m, dd) = (body.reg(Class::F32), body.reg(Class::F32));
                    body.op(format!("ld.global.nc.f32 {m}, [{al}]"));
                    body.op(format!("ld.global.f32 {dd}, [{ad}]"));
                    lse_term(&mut body, &m);
                    mls.push(m);
                    ds.push(dd);
                }
            }
            (mls, ds)
        };
        // P^T = 2^(S^T scale log2(e) - lse log2(e)), 0 past the queries, past
        // the keys and, under `causal`, for a key past its query (only on the
        // blocks that reach any of those).
        {
            let mask = Mask {
                jw: &j0,
                i0: &i0,
                causal: &causal,
                l: &p["p_l"],
                s: &p["p_s"],
            };
            let edge = reaches_edge(&mut body, &mask, br, MMA_BWD_KEYS);
            for (nt, st) in s.iter().enumerate() {
                for (x, r) in st.iter().enumerate() {
                    body.op(format!(
                        "fma.rn.f32 {r}, {r}, {sl2}, {}",
                        mls[2 * nt + (x & 1)]
                    ));
                }
            }
            let inner = body.label("bwd_inner");
            body.op(format!("@!{edge} bra.uni {inner}"));
            let c0 = body.reg(Class::B64);
            body.op(format!("shl.b64 {c0}, {tg}, 1"));
            body.op(format!("add.u64 {c0}, {c0}, {i0}"));
            for (nt, st) in s.iter().enumerate() {
                for (x, r) in st.iter().enumerate() {
                    let key = if x < 2 { &ka } else { &kb };
                    mask_element(&mut body, &mask, r, (&c0, nt * 8 + (x & 1)), key);
                }
            }
            body.place(&inner);
            for st in &s {
                for r in st {
                    body.op(format!("ex2.approx.ftz.f32 {r}, {r}"));
                }
            }
        }
        // Packs the f32 fragments of X^T (keys x queries) as A fragments
        // (two n-tiles make a 16-query chunk), rounded to the dtype.
        // acc += X (keys x queries, A fragments) Y (queries x d, a row-major
        // tile read with x4.trans).
        let accumulate = |body: &mut Body, acc: &[[String; 4]], xa: &[[String; 4]], ty: usize| {
            for (kc, xk) in xa.iter().enumerate() {
                for (q, ya) in bt_addr.iter().enumerate() {
                    let bf = ldmatrix_x4(body, true, ya, ty + kc * 16 * row_bytes);
                    mma(body, ht, &acc[2 * q], xk, [&bf[0], &bf[1]]);
                    mma(body, ht, &acc[2 * q + 1], xk, [&bf[2], &bf[3]]);
                }
            }
        };
        let pa = pack_a(&mut body, ht, &s);
        // dV += P^T dO.
        accumulate(&mut body, &dv, &pa, tg_);
        // dP^T = V dO^T, then dS^T = P^T (dP^T - D) scale.
        let dp = product_t(&mut body, tv, tg_);
        for (nt, (pt, st)) in dp.iter().zip(&s).enumerate() {
            for (x, r) in pt.iter().enumerate() {
                body.op(format!("sub.rn.f32 {r}, {r}, {}", dcol[2 * nt + (x & 1)]));
                body.op(format!("mul.rn.f32 {r}, {r}, {}", st[x]));
                body.op(format!("mul.rn.f32 {r}, {r}, {scale}"));
            }
        }
        let dsa = pack_a(&mut body, ht, &dp);
        // dK += dS^T Q.
        accumulate(&mut body, &dk, &dsa, tq);
        // dS^T into its tile (every warp is past the last block's dQ).
        {
            // Key rows 16 warp + g (+8), chunk nt, byte 4 tg within it.
            let tq4 = body.reg(Class::B32);
            body.op(format!("shl.b32 {tq4}, {t32}, 2"));
            let mut st = Vec::new();
            for half in 0..2 {
                let r = body.reg(Class::B32);
                body.op(format!("mad.lo.u32 {r}, {warp}, 16, {g32}"));
                body.op(format!("add.u32 {r}, {r}, {}", 8 * half));
                for nt in 0..nts {
                    let c = body.reg(Class::B32);
                    body.op(format!("mov.u32 {c}, {nt}"));
                    let o = ds_swz(&mut body, &r, &c);
                    body.op(format!("add.u32 {o}, {o}, {tq4}"));
                    st.push(o);
                }
            }
            for (kc, regs) in dsa.iter().enumerate() {
                for (i, r) in regs.iter().enumerate() {
                    // regs: (row g, n-tile 2kc), (row g+8, 2kc), (g, 2kc+1),
                    // (g+8, 2kc+1).
                    let (half, nt) = (i & 1, 2 * kc + i / 2);
                    body.op(format!(
                        "st.shared.b32 [{}+{tile_ds}], {r}",
                        st[half * nts + nt]
                    ));
                }
            }
        }
        body.op("bar.sync 0");
        // dQ (the warp's share) = dS K, added into the f32 buffer.
        {
            let dq = new_acc(&mut body, nq);
            for kc in 0..MMA_BWD_KEYS / 16 {
                let af = ldmatrix_x4(&mut body, true, &dsa_addr, tile_ds + kc * 16 * ds_row);
                for q in 0..nq / 2 {
                    // n-tiles part * nq + 2q (+1): chunk pair part * nq / 2 + q
                    // of K's tile, chosen per warp.
                    let addr = body.reg(Class::B32);
                    body.op(format!("mov.u32 {addr}, {}", bt_addr[q]));
                    for x in 1..splits {
                        let this = body.reg(Class::Pred);
                        body.op(format!("setp.eq.u32 {this}, {part}, {x}"));
                        body.op(format!(
                            "@{this} mov.u32 {addr}, {}",
                            bt_addr[x * nq / 2 + q]
                        ));
                    }
                    let bf = ldmatrix_x4(&mut body, true, &addr, kc * 16 * row_bytes);
                    mma(&mut body, ht, &dq[2 * q], &af, [&bf[0], &bf[1]]);
                    mma(&mut body, ht, &dq[2 * q + 1], &af, [&bf[2], &bf[3]]);
                }
            }
            for half in 0..2 {
                let qi = body.reg(Class::B64);
                body.op(format!("add.u64 {qi}, {qrow0}, {i0}"));
                if half == 1 {
                    body.op(format!("add.u64 {qi}, {qi}, 8"));
                }
                let skip = body.label("bwd_dq_skip");
                let out = body.reg(Class::Pred);
                body.op(format!("setp.ge.u64 {out}, {qi}, {}", p["p_l"]));
                body.op(format!("@{out} bra {skip}"));
                let a = body.reg(Class::B64);
                body.op(format!("add.u64 {a}, {qi}, {bl}"));
                body.op(format!("mul.lo.u64 {a}, {a}, {d}"));
                body.op(format!("add.u64 {a}, {a}, {qcol}"));
                body.op(format!("mad.lo.u64 {a}, {a}, 4, {}", p["p_dqa"]));
                for (nt, t) in dq.iter().enumerate() {
                    for x in 0..2 {
                        body.op(format!(
                            "red.global.add.f32 [{a}+{}], {}",
                            (nt * 8 + x) * 4,
                            t[2 * half + x]
                        ));
                    }
                }
                body.place(&skip);
            }
        }
        body.op(format!("add.u64 {i0}, {i0}, {br}"));
        {
            let fin = body.reg(Class::Pred);
            body.op(format!("setp.ge.u64 {fin}, {i0}, {}", p["p_l"]));
            body.op(format!("@{fin} bra.uni {done}"));
        }
    }
    body.op(format!("bra.uni {lp}"));
    body.place(&done);
    body.op("cp.async.wait_group 0");
    // dK and dV, rounded, stored a pair at a time (rows past s left out).
    for half in 0..2 {
        let key = if half == 0 { &ka } else { &kb };
        let skip = body.label("bwd_kv_skip");
        let out = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {out}, {key}, {}", p["p_s"]));
        body.op(format!("@{out} bra {skip}"));
        let off = body.reg(Class::B64);
        body.op(format!("add.u64 {off}, {key}, {bs}"));
        body.op(format!("mul.lo.u64 {off}, {off}, {d}"));
        let t2 = body.reg(Class::B64);
        body.op(format!("shl.b64 {t2}, {tg}, 1"));
        body.op(format!("add.u64 {off}, {off}, {t2}"));
        for (acc, ptr) in [(&dk, &p["p_dk"]), (&dv, &p["p_dv"])] {
            let a = body.reg(Class::B64);
            body.op(format!("mad.lo.u64 {a}, {off}, 2, {ptr}"));
            for (nt, t) in acc.iter().enumerate() {
                let packed = body.reg(Class::B32);
                body.op(format!(
                    "cvt.rn.{ht}x2.f32 {packed}, {}, {}",
                    t[2 * half + 1],
                    t[2 * half]
                ));
                body.op(format!("st.global.b32 [{a}+{}], {packed}", nt * 16));
            }
        }
        body.place(&skip);
    }
    body.op("ret");
    // Dynamic shared memory (more than the 48 KiB a static array may
    // take: `attention_mma_backward_shared(d)` bytes), declared at module
    // scope.
    format!(
        ".extern .shared .align 128 .b8 {name}_smem[];\n\n.visible .entry {name}(\n{}\n)\n.maxntid {threads}, 1, 1\n{{\n{}}}\n",
        entry_params(&MMA_BWD_PARAMS),
        body.finish()
    )
}
