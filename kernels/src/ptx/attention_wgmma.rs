//! The Hopper form of the tensor-core attention forward (compute
//! capability 9.0 only: its PTX targets `sm_90a`, whose `wgmma`
//! instructions no other device runs; every other device takes
//! `attention_mma_entry` in `attention.rs`). The runtime takes the
//! warp-specialised form of `attention_wgmma_ws.rs`, built on this
//! module's pieces (the block's frame, the copies, the products, the
//! online softmax and the stores); this entry remains as the form it is
//! measured against.
//!
//! A block of warpgroups (three at head dim 64, two at 128; see
//! [`attention_wgmma_rows`]) owns 64 query rows a warpgroup. `Q` of the block is copied into shared memory once; the
//! keys are walked in tiles of [`WGMMA_KEYS`], each tile of `K` and `V`
//! copied with 16-byte `cp.async` into one of two buffers while the
//! other is computed on. Shared tiles use the layout `wgmma`'s 128-byte
//! swizzle expects: 64 columns (128 bytes) a row, the 16-byte chunk `c`
//! of row `r` at `c ^ (r % 8)`, the columns 64.. of head dim 128 in a
//! second such region after the first. `S = Q K^T` reads both operands
//! from shared memory (both K-major); `P`, rounded to the dtype, is the
//! register `A` operand of `O += P V` (the accumulator's layout is the `A`
//! fragment's), `V` the transposed (MN-major) `B` operand of the same
//! tiles. The online softmax runs on the f32 accumulator fragments, whose
//! rows a quad of lanes shares.

use super::attention::{batch_offsets, key_range, KeyRange, MMA_PARAMS};
use super::body::{Body, Class};
use super::mma_tile::{entry_params, half_type, load_params, pack_a, pack_a_into, scale_log2};
use crate::target::Target;
use tensorfn_core::DTypeKind;

/// Warpgroups a block of the Hopper entry has at head dim `d`: three at
/// 64 (164 registers a thread, 384 threads fill the SM's 64 Ki), two at
/// 128 (216 registers a thread).
const fn warpgroups(d: usize) -> usize {
    if d > 64 {
        2
    } else {
        3
    }
}

/// Query rows a block of the Hopper attention entry handles at head dim
/// `d` (64 a warpgroup).
///
/// ```
/// use tensorfn_kernels::ptx::attention_wgmma_rows;
/// assert_eq!(attention_wgmma_rows(64), 192);
/// assert_eq!(attention_wgmma_rows(128), 128);
/// ```
pub const fn attention_wgmma_rows(d: usize) -> usize {
    64 * warpgroups(d)
}

/// Threads a block of the Hopper attention entry takes at head dim `d`.
///
/// ```
/// use tensorfn_kernels::ptx::attention_wgmma_threads;
/// assert_eq!(attention_wgmma_threads(64), 384);
/// assert_eq!(attention_wgmma_threads(128), 256);
/// ```
pub const fn attention_wgmma_threads(d: usize) -> usize {
    128 * warpgroups(d)
}

/// Keys a tile of `K` and `V` holds (the `N` of `S = Q K^T`).
pub(super) const WGMMA_KEYS: usize = 128;

/// Buffers of `K` and `V` tiles: the tile computed on, the next one on
/// its way, and the one before, which the second warpgroup may still read
/// while the first starts the next copy.
pub(super) const STAGES: usize = 3;

/// Bytes of one row of a swizzle region (64 16-bit columns).
pub(super) const ATOM_ROW: usize = 128;

/// Bytes of dynamic shared memory the Hopper attention entry takes at
/// head dim `d`: `Q` of the block, three buffers each of `K` and `V`,
/// and 1 KiB of slack to align them to the 1 KiB the swizzle repeats
/// over (at head dim 128, 225 KiB of the 227 a block may take).
///
/// ```
/// use tensorfn_kernels::ptx::attention_wgmma_shared;
/// assert_eq!(attention_wgmma_shared(64), 24576 + 6 * 16384 + 1024);
/// assert_eq!(attention_wgmma_shared(128), 32768 + 6 * 32768 + 1024);
/// ```
pub const fn attention_wgmma_shared(d: usize) -> usize {
    attention_wgmma_rows(d) * d * 2 + 2 * STAGES * WGMMA_KEYS * d * 2 + 1024
}

/// The PTX header of the module: `wgmma` needs PTX ISA 8.0 and `sm_90a`.
pub(crate) const SM90A_HEADER: &str = ".version 8.0\n.target sm_90a\n.address_size 64\n";

/// A 64-bit shared-memory matrix descriptor with the 128-byte swizzle,
/// less its start address: leading and stride byte offsets `lbo`, `sbo`.
pub(super) fn desc_bits(lbo: usize, sbo: usize) -> u64 {
    ((lbo as u64 >> 4) << 16) | ((sbo as u64 >> 4) << 32) | (1u64 << 62)
}

/// A register holding the descriptor of the matrix at shared address
/// `addr` (u32, 1 KiB aligned) with the fixed fields `bits`.
pub(super) fn descriptor(body: &mut Body, addr: &str, bits: u64) -> String {
    let (a64, d) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("cvt.u64.u32 {a64}, {addr}"));
    body.op(format!("shr.u64 {a64}, {a64}, 4"));
    body.op(format!("or.b64 {d}, {a64}, {bits}"));
    d
}

/// The byte offset, in a tile of 128-byte-swizzled regions `region`
/// bytes apart, of 16-byte chunk `chunk` (u32) of row `row` (u32): in
/// region `chunk / 8`, row `row`, at chunk `(chunk % 8) ^ (row % 8)`.
pub(super) fn swizzled_slot(body: &mut Body, row: &str, chunk: &str, region: usize) -> String {
    let (x, o, r) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("and.b32 {x}, {row}, 7"));
    body.op(format!("and.b32 {o}, {chunk}, 7"));
    body.op(format!("xor.b32 {x}, {x}, {o}"));
    body.op(format!("shl.b32 {x}, {x}, 4"));
    body.op(format!("mad.lo.u32 {x}, {row}, {ATOM_ROW}, {x}"));
    body.op(format!("shr.u32 {r}, {chunk}, 3"));
    body.op(format!("mad.lo.u32 {x}, {r}, {region}, {x}"));
    x
}

/// `{r0, r1, ..}` of `regs`.
pub(super) fn list(regs: &[String]) -> String {
    format!("{{{}}}", regs.join(", "))
}

/// What every thread of a Hopper forward block computes before its role:
/// the parameters, the scale (`sl2`, its sign in `neg`), the lane's
/// fragment roles, the batch and its operands' offsets, the block's first
/// row and its shared memory's 1 KiB-aligned base.
pub(super) struct Frame {
    pub(super) p: std::collections::HashMap<&'static str, String>,
    pub(super) sl2: String,
    pub(super) neg: String,
    pub(super) tid: String,
    pub(super) g32: String,
    pub(super) t32: String,
    pub(super) b: String,
    pub(super) boff: std::collections::HashMap<&'static str, String>,
    pub(super) big_r0: String,
    pub(super) base: String,
    pub(super) ptrue: String,
    pub(super) pfalse: String,
}

/// Bytes of keys and values a section of [`BlockOrder::Sections`] reads
/// (32 MiB, the part of an H100's 50 MiB L2 FlashAttention-3's scheduler
/// budgets for them), so that the blocks running at once reread tiles
/// from L2 rather than from memory.
const L2_SECTION_BYTES: u64 = 1 << 25;

/// The order in which a Hopper forward's blocks take their pairs of (row
/// block, batch): under `causal` the last row blocks have the most keys,
/// and in both orders they start first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockOrder {
    /// One batch after another, each batch's row blocks last first. The
    /// longest blocks of the grid's last batches then start late and
    /// leave SMs idle at the end (about 6% of a causal T4096 launch).
    ByBatch,
    /// Sections of as many batches (heads) as keys and values at head
    /// dim `d` fit in [`L2_SECTION_BYTES`] (times the grouped-query
    /// group, whose heads share them), one section after another; within
    /// a section the last row block of each of its batches, then the one
    /// before, and so on. Longest first across a section's batches, as
    /// FlashAttention-3's scheduler orders them, with the section's
    /// keys and values staying in L2.
    Sections(usize),
}

/// The block's place under `order`: its row block's index in its batch's
/// launch order (u32; 0 takes the last rows) and its batch within the
/// launch (u32).
fn block_place(
    body: &mut Body,
    p: &std::collections::HashMap<&'static str, String>,
    order: BlockOrder,
) -> (String, String) {
    let (mr, by) = (body.reg(Class::B32), body.reg(Class::B32));
    let d = match order {
        BlockOrder::ByBatch => {
            body.op(format!("mov.u32 {mr}, %ctaid.x"));
            body.op(format!("mov.u32 {by}, %ctaid.y"));
            return (mr, by);
        }
        BlockOrder::Sections(d) => d,
    };
    let (nx, ny, x) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("mov.u32 {nx}, %nctaid.x"));
    body.op(format!("mov.u32 {ny}, %nctaid.y"));
    body.op(format!("mov.u32 {x}, %ctaid.x"));
    body.op(format!("mov.u32 {by}, %ctaid.y"));
    // The block's place in launch order.
    let (lin, nx64, ny64) = (
        body.reg(Class::B64),
        body.reg(Class::B64),
        body.reg(Class::B64),
    );
    body.op(format!("mul.wide.u32 {lin}, {by}, {nx}"));
    body.op(format!("cvt.u64.u32 {nx64}, {nx}"));
    body.op(format!("cvt.u64.u32 {ny64}, {ny}"));
    {
        let x64 = body.reg(Class::B64);
        body.op(format!("cvt.u64.u32 {x64}, {x}"));
        body.op(format!("add.u64 {lin}, {lin}, {x64}"));
    }
    // Batches a section: L2_SECTION_BYTES over one batch's keys and
    // values, times the group, at least 1 and at most the launch's.
    let (kv, heads, g) = (
        body.reg(Class::B64),
        body.reg(Class::B64),
        body.reg(Class::B64),
    );
    body.op(format!("max.u64 {kv}, {}, 1", p["p_s"]));
    body.op(format!("mul.lo.u64 {kv}, {kv}, {}", 4 * d));
    body.op(format!("mov.u64 {heads}, {L2_SECTION_BYTES}"));
    let (heads, _) = super::attention::divmod_u64(body, &heads, &kv);
    body.op(format!("max.u64 {g}, {}, 1", p["p_g"]));
    body.op(format!("mul.lo.u64 {heads}, {heads}, {g}"));
    body.op(format!("max.u64 {heads}, {heads}, 1"));
    body.op(format!("min.u64 {heads}, {heads}, {ny64}"));
    // Section `sec` of `heads * nx` blocks; the last one may hold fewer
    // batches (`here`).
    let span = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {span}, {heads}, {nx64}"));
    let (sec, i) = super::attention::divmod_u64(body, &lin, &span);
    let (h0, here) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("mul.lo.u64 {h0}, {sec}, {heads}"));
    body.op(format!("sub.u64 {here}, {ny64}, {h0}"));
    body.op(format!("min.u64 {here}, {here}, {heads}"));
    let (m, h) = super::attention::divmod_u64(body, &i, &here);
    body.op(format!("add.u64 {h}, {h}, {h0}"));
    body.op(format!("cvt.u32.u64 {mr}, {m}"));
    body.op(format!("cvt.u32.u64 {by}, {h}"));
    (mr, by)
}

/// Emits [`Frame`] for the entry `name` whose blocks own `rows` query
/// rows, taking them in `order`.
pub(super) fn frame(body: &mut Body, name: &str, rows: usize, order: BlockOrder) -> Frame {
    let p = load_params(body, &MMA_PARAMS, &["p_out", "p_q", "p_k", "p_v"]);
    let sl2 = scale_log2(body);
    // A negative scale negates the scores (so that the max of the raw
    // scores is the max of the scaled ones) and is used as its magnitude;
    // a zero scale becomes 2^-126, which leaves every finite score's
    // exponential at 1 and a masked one at 0.
    let neg = body.reg(Class::Pred);
    body.op(format!("setp.lt.f32 {neg}, {sl2}, 0f00000000"));
    body.op(format!("abs.f32 {sl2}, {sl2}"));
    {
        let z = body.reg(Class::Pred);
        body.op(format!("setp.eq.f32 {z}, {sl2}, 0f00000000"));
        body.op(format!("@{z} mov.f32 {sl2}, 0f00800000"));
    }
    let (tid, lane, g32, t32) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("mov.u32 {tid}, %tid.x"));
    body.op(format!("and.b32 {lane}, {tid}, 31"));
    body.op(format!("shr.u32 {g32}, {lane}, 2"));
    body.op(format!("and.b32 {t32}, {lane}, 3"));
    let (cta, by) = block_place(body, &p, order);
    let ncta = body.reg(Class::B32);
    body.op(format!("mov.u32 {ncta}, %nctaid.x"));
    body.op(format!("sub.u32 {cta}, {ncta}, {cta}"));
    body.op(format!("sub.u32 {cta}, {cta}, 1"));
    let b = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {b}, {by}"));
    body.op(format!("add.u64 {b}, {b}, {}", p["p_b0"]));
    let boff = batch_offsets(body, &b, &p, &["q", "k", "v", "o"]);
    let big_r0 = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {big_r0}, {cta}, {rows}"));
    let base = body.reg(Class::B32);
    body.op(format!("mov.u32 {base}, {name}_smem"));
    body.op(format!("add.u32 {base}, {base}, 1023"));
    body.op(format!("and.b32 {base}, {base}, -1024"));
    let (ptrue, pfalse) = (body.reg(Class::Pred), body.reg(Class::Pred));
    body.op(format!("setp.eq.u32 {ptrue}, 0, 0"));
    body.op(format!("setp.ne.u32 {pfalse}, 0, 0"));
    Frame {
        p,
        sl2,
        neg,
        tid,
        g32,
        t32,
        b,
        boff,
        big_r0,
        base,
        ptrue,
        pfalse,
    }
}

/// The rows of a warpgroup: its first `r0` (u64) and the thread's two
/// rows of the accumulator fragments, `ra = r0 + 16 wi + g` and
/// `rb = ra + 8`.
pub(super) struct Rows {
    pub(super) r0: String,
    pub(super) ra: String,
    pub(super) rb: String,
}

/// Emits [`Rows`] for the computing warpgroup `wg` (u32, counted from 0
/// among the block's computing warpgroups).
pub(super) fn warpgroup_rows(body: &mut Body, f: &Frame, wg: &str) -> Rows {
    let r0 = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {r0}, {wg}, 64"));
    body.op(format!("add.u64 {r0}, {r0}, {}", f.big_r0));
    let (ra, rb) = (body.reg(Class::B64), body.reg(Class::B64));
    let (wi, x) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("shr.u32 {wi}, {}, 5", f.tid));
    body.op(format!("and.b32 {wi}, {wi}, 3"));
    body.op(format!("mad.lo.u32 {x}, {wi}, 16, {}", f.g32));
    body.op(format!("cvt.u64.u32 {ra}, {x}"));
    body.op(format!("add.u64 {ra}, {ra}, {r0}"));
    body.op(format!("add.u64 {rb}, {ra}, 8"));
    Rows { r0, ra, rb }
}

/// The copies of a block's `Q` and of its tiles of `K` and `V` into the
/// swizzled shared layout, by `threads` threads (the thread's index among
/// them in `tid`), 16 bytes a `cp.async`.
pub(super) struct Copier {
    crow: String,
    crow64: String,
    pass_rows: usize,
    rows: usize,
    qslot: String,
    kvslot: String,
    sk: String,
    sv: String,
    q: [String; 2],
    k: [String; 3],
    v: [String; 3],
    big_r0: String,
    p_s: String,
    p_l: String,
}

impl Copier {
    /// Emits the copying thread's slots and sources: `rows` rows of `Q`
    /// at the shared base `f.base`, tiles of [`WGMMA_KEYS`] keys of `K`
    /// and `V` at `sk` and `sv`, head dim `d`.
    pub(super) fn new(
        body: &mut Body,
        f: &Frame,
        (tid, threads): (&str, usize),
        (d, rows): (usize, usize),
        (sk, sv): (&str, &str),
    ) -> Copier {
        // 16-byte chunks of a row, rows one pass of the copies covers.
        let chunks = d / 8;
        let pass_rows = threads / chunks;
        // The thread's copy slot: chunk `cchunk` of rows `crow + k
        // pass_rows`, in the region cchunk / 8 at chunk (cchunk % 8) ^
        // (crow % 8) (every pass's rows share crow % 8, as pass_rows is a
        // multiple of 8).
        let (crow, cchunk) = (body.reg(Class::B32), body.reg(Class::B32));
        body.op(format!(
            "shr.u32 {crow}, {tid}, {}",
            chunks.trailing_zeros()
        ));
        body.op(format!("and.b32 {cchunk}, {tid}, {}", chunks - 1));
        let qslot = swizzled_slot(body, &crow, &cchunk, rows * ATOM_ROW);
        body.op(format!("add.u32 {qslot}, {qslot}, {}", f.base));
        let kvslot = swizzled_slot(body, &crow, &cchunk, WGMMA_KEYS * ATOM_ROW);
        // The global sources: row 0 of batch b, plus the thread's chunk.
        let (crow64, cbytes) = (body.reg(Class::B64), body.reg(Class::B64));
        body.op(format!("cvt.u64.u32 {crow64}, {crow}"));
        body.op(format!("cvt.u64.u32 {cbytes}, {cchunk}"));
        body.op(format!("shl.b64 {cbytes}, {cbytes}, 4"));
        let source = |body: &mut Body, x: &str| {
            let a = body.reg(Class::B64);
            body.op(format!(
                "mad.lo.u64 {a}, {}, 2, {}",
                f.boff[x],
                f.p[format!("p_{x}").as_str()]
            ));
            body.op(format!("add.u64 {a}, {a}, {cbytes}"));
            let rs2 = body.reg(Class::B64);
            body.op(format!(
                "shl.b64 {rs2}, {}, 1",
                f.p[format!("p_{x}r").as_str()]
            ));
            // The bytes between a thread's rows of two passes.
            let pass = body.reg(Class::B64);
            body.op(format!("mul.lo.u64 {pass}, {rs2}, {pass_rows}"));
            [a, rs2, pass]
        };
        let [gq, qr2, _] = source(body, "q");
        let (k, v) = (source(body, "k"), source(body, "v"));
        Copier {
            crow,
            crow64,
            pass_rows,
            rows,
            qslot,
            kvslot,
            sk: sk.to_string(),
            sv: sv.to_string(),
            q: [gq, qr2],
            k,
            v,
            big_r0: f.big_r0.clone(),
            p_s: f.p["p_s"].clone(),
            p_l: f.p["p_l"].clone(),
        }
    }

    /// Copies `count` rows from row j0 of `src` (rows `rs2` bytes apart,
    /// a pass's `pass` bytes) to the slot `dst`; with `limit`, rows at or
    /// past it are zero-filled (read from a clamped address), else all
    /// are copied, from one address stepped by a pass's bytes.
    fn rows(
        &self,
        body: &mut Body,
        j0: &str,
        count: usize,
        (src, rs2, pass): (&str, &str, &str),
        dst: &str,
        limit: Option<&str>,
    ) {
        let (crow, crow64, pass_rows) = (&self.crow, &self.crow64, self.pass_rows);
        let step = body.reg(Class::B64);
        if limit.is_none() {
            body.op(format!("add.u64 {step}, {j0}, {crow64}"));
            body.op(format!("mad.lo.u64 {step}, {step}, {rs2}, {src}"));
        }
        for ps in 0..count.div_ceil(pass_rows) {
            // A last pass over fewer rows than the threads cover.
            let skip = body.label("wg_no_pass");
            if (ps + 1) * pass_rows > count {
                let out = body.reg(Class::Pred);
                body.op(format!(
                    "setp.ge.u32 {out}, {crow}, {}",
                    count - ps * pass_rows
                ));
                body.op(format!("@{out} bra {skip}"));
            }
            let off = ps * pass_rows * ATOM_ROW;
            match limit {
                None => {
                    if ps > 0 {
                        body.op(format!("add.u64 {step}, {step}, {pass}"));
                    }
                    body.op(format!(
                        "cp.async.cg.shared.global [{dst}+{off}], [{step}], 16"
                    ));
                }
                Some(lim) => {
                    let row = body.reg(Class::B64);
                    body.op(format!("add.u64 {row}, {j0}, {crow64}"));
                    if ps > 0 {
                        body.op(format!("add.u64 {row}, {row}, {}", ps * pass_rows));
                    }
                    let inside = body.reg(Class::Pred);
                    body.op(format!("setp.lt.u64 {inside}, {row}, {lim}"));
                    body.op(format!("@!{inside} mov.u64 {row}, 0"));
                    let a = body.reg(Class::B64);
                    body.op(format!("mad.lo.u64 {a}, {row}, {rs2}, {src}"));
                    let nb = body.reg(Class::B32);
                    body.op(format!("selp.u32 {nb}, 16, 0, {inside}"));
                    body.op(format!(
                        "cp.async.cg.shared.global [{dst}+{off}], [{a}], 16, {nb}"
                    ));
                }
            }
            body.place(&skip);
        }
    }

    /// Copies the block's rows of `Q` (rows past L zero-filled).
    pub(super) fn q(&self, body: &mut Body) {
        let [gq, qr2] = &self.q;
        self.rows(
            body,
            &self.big_r0,
            self.rows,
            (gq, qr2, qr2),
            &self.qslot,
            Some(&self.p_l),
        );
    }

    /// Copies the tile of keys j0.. of K and V into the buffer `stage`
    /// bytes into theirs: whole tiles straight, the last one zero-filled
    /// past the keys.
    pub(super) fn kv(&self, body: &mut Body, j0: &str, stage: &str) {
        let n = WGMMA_KEYS;
        let (buf, kdst, vdst) = (
            body.reg(Class::B32),
            body.reg(Class::B32),
            body.reg(Class::B32),
        );
        body.op(format!("add.u32 {buf}, {stage}, {}", self.kvslot));
        body.op(format!("add.u32 {kdst}, {buf}, {}", self.sk));
        body.op(format!("add.u32 {vdst}, {buf}, {}", self.sv));
        let (partial, copied) = (body.label("wg_partial"), body.label("wg_copied"));
        let end = body.reg(Class::B64);
        body.op(format!("add.u64 {end}, {j0}, {n}"));
        let short = body.reg(Class::Pred);
        body.op(format!("setp.gt.u64 {short}, {end}, {}", self.p_s));
        body.op(format!("@{short} bra.uni {partial}"));
        let ([gk, kr2, kp], [gv, vr2, vp]) = (&self.k, &self.v);
        self.rows(body, j0, n, (gk, kr2, kp), &kdst, None);
        self.rows(body, j0, n, (gv, vr2, vp), &vdst, None);
        body.op(format!("bra.uni {copied}"));
        body.place(&partial);
        self.rows(body, j0, n, (gk, kr2, kp), &kdst, Some(&self.p_s));
        self.rows(body, j0, n, (gv, vr2, vp), &vdst, Some(&self.p_s));
        body.place(&copied);
    }

    /// Copies the tile of keys j0.. of `K` (`v` false) or of `V` (`v`
    /// true) alone into the buffer `stage` bytes into its buffers, as
    /// [`Copier::kv`] does for both: so that a copier can signal each
    /// operand's arrival on its own barrier.
    pub(super) fn one(&self, body: &mut Body, j0: &str, stage: &str, v: bool) {
        let n = WGMMA_KEYS;
        let ([g, r2, p], base) = if v {
            (&self.v, &self.sv)
        } else {
            (&self.k, &self.sk)
        };
        let dst = body.reg(Class::B32);
        body.op(format!("add.u32 {dst}, {stage}, {}", self.kvslot));
        body.op(format!("add.u32 {dst}, {dst}, {base}"));
        let (partial, copied) = (body.label("wg_partial"), body.label("wg_copied"));
        let (end, short) = (body.reg(Class::B64), body.reg(Class::Pred));
        body.op(format!("add.u64 {end}, {j0}, {n}"));
        body.op(format!("setp.gt.u64 {short}, {end}, {}", self.p_s));
        body.op(format!("@{short} bra.uni {partial}"));
        self.rows(body, j0, n, (g, r2, p), &dst, None);
        body.op(format!("bra.uni {copied}"));
        body.place(&partial);
        self.rows(body, j0, n, (g, r2, p), &dst, Some(&self.p_s));
        body.place(&copied);
    }
}

/// The descriptor fields of a K-major tile (`Q`, `K`: 8-row groups 1 KiB
/// apart) and of `V`'s MN-major one (its 64-column regions a tile's
/// region apart, its groups of 8 keys 1 KiB apart).
pub(super) fn operand_bits() -> (u64, u64) {
    (
        desc_bits(16, 8 * ATOM_ROW),
        desc_bits(WGMMA_KEYS * ATOM_ROW, 8 * ATOM_ROW),
    )
}

/// Issues `S = Q K^T` into the accumulators `s` (k-steps of 16 columns,
/// 32 bytes into a region's rows), `Q` of `q_rows` rows a region.
#[allow(clippy::too_many_arguments)]
pub(super) fn issue_qk(
    body: &mut Body,
    f: &Frame,
    ht: &str,
    d: usize,
    q_rows: usize,
    s: &[String],
    qdesc: &str,
    kd: &str,
) {
    let (q_region, kv_region) = (q_rows * ATOM_ROW, WGMMA_KEYS * ATOM_ROW);
    for ks in 0..d / 16 {
        let (qa, kb) = (body.reg(Class::B64), body.reg(Class::B64));
        let within = (ks % 4) * 32;
        body.op(format!(
            "add.s64 {qa}, {qdesc}, {}",
            ((ks / 4) * q_region + within) >> 4
        ));
        body.op(format!(
            "add.s64 {kb}, {kd}, {}",
            ((ks / 4) * kv_region + within) >> 4
        ));
        let acc = if ks == 0 { &f.pfalse } else { &f.ptrue };
        body.op(format!(
            "wgmma.mma_async.sync.aligned.m64n{WGMMA_KEYS}k16.f32.{ht}.{ht} {}, {qa}, {kb}, {acc}, 1, 1, 0, 0",
            list(s)
        ));
    }
}

/// Issues `O += P V`: `pa` the A fragments of `P` (16 keys each), `vd`
/// the descriptor of the tile of `V`.
pub(super) fn issue_pv(
    body: &mut Body,
    f: &Frame,
    ht: &str,
    o: &[String],
    pa: &[[String; 4]],
    vd: &str,
) {
    let d = o.len() * 2;
    for (kc, a) in pa.iter().enumerate() {
        let vb = body.reg(Class::B64);
        body.op(format!("add.s64 {vb}, {vd}, {}", (kc * 16 * ATOM_ROW) >> 4));
        body.op(format!(
            "wgmma.mma_async.sync.aligned.m64n{d}k16.f32.{ht}.{ht} {}, {}, {vb}, {}, 1, 1, 1",
            list(o),
            list(a),
            f.ptrue
        ));
    }
}

/// The online softmax of one tile of scores `s` (keys j0.., u64) of the
/// warpgroup's rows: the sign folded in, -inf past the keys and, under
/// `causal`, past the row (on the tiles that reach either), the rows'
/// new max `ml[h].0` (over the quad sharing a row), `s` replaced by
/// `P = 2^(S - m)` (0 where S is -inf) and the sums `ml[h].1` rescaled
/// and added to. Returns the factors `2^(m_old - m_new)` of rows ra and
/// rb, by which `O` is to be rescaled (see [`rescale`]).
pub(super) fn softmax(
    body: &mut Body,
    f: &Frame,
    rw: &Rows,
    causal: &str,
    s: &[String],
    ml: &[(String, String); 2],
    j0: &str,
) -> [String; 2] {
    let (neg_inf, zero) = ("0fFF800000", "0f00000000");
    let (p, sl2, n) = (&f.p, &f.sl2, WGMMA_KEYS);
    {
        let positive = body.label("wg_positive");
        body.op(format!("@!{} bra.uni {positive}", f.neg));
        for r in s {
            body.op(format!("neg.f32 {r}, {r}"));
        }
        body.place(&positive);
    }
    {
        let unmasked = body.label("wg_unmasked");
        let (jlast, masked, diag) = (
            body.reg(Class::B64),
            body.reg(Class::Pred),
            body.reg(Class::Pred),
        );
        body.op(format!("add.u64 {jlast}, {j0}, {n}"));
        body.op(format!("setp.gt.u64 {masked}, {jlast}, {}", p["p_s"]));
        body.op(format!("add.u64 {jlast}, {j0}, {}", n - 1));
        body.op(format!("setp.gt.u64 {diag}, {jlast}, {}", rw.r0));
        body.op(format!("and.pred {diag}, {diag}, {causal}"));
        body.op(format!("or.pred {masked}, {masked}, {diag}"));
        body.op(format!("@!{masked} bra.uni {unmasked}"));
        let col0 = body.reg(Class::B64);
        body.op(format!("cvt.u64.u32 {col0}, {}", f.t32));
        body.op(format!("shl.b64 {col0}, {col0}, 1"));
        body.op(format!("add.u64 {col0}, {col0}, {j0}"));
        for (i, r) in s.iter().enumerate() {
            let (j, x) = (i / 4, i % 4);
            let key = body.reg(Class::B64);
            body.op(format!("add.u64 {key}, {col0}, {}", j * 8 + (x & 1)));
            let (out, late) = (body.reg(Class::Pred), body.reg(Class::Pred));
            body.op(format!("setp.ge.u64 {out}, {key}, {}", p["p_s"]));
            let row = if x < 2 { &rw.ra } else { &rw.rb };
            body.op(format!("setp.gt.u64 {late}, {key}, {row}"));
            body.op(format!("and.pred {late}, {late}, {causal}"));
            body.op(format!("or.pred {out}, {out}, {late}"));
            body.op(format!("@{out} mov.f32 {r}, {neg_inf}"));
        }
        body.place(&unmasked);
    }
    [0, 1].map(|half| {
        let (mx_old, l) = &ml[half];
        let mine: Vec<&String> = s
            .iter()
            .enumerate()
            .filter(|(i, _)| (i % 4) / 2 == half)
            .map(|(_, r)| r)
            .collect();
        let mx = body.reg(Class::F32);
        body.op(format!("mov.f32 {mx}, {mx_old}"));
        for r in &mine {
            body.op(format!("max.f32 {mx}, {mx}, {r}"));
        }
        for off in [1, 2] {
            let o2 = body.reg(Class::F32);
            body.op(format!("shfl.sync.bfly.b32 {o2}, {mx}, {off}, 31, -1"));
            body.op(format!("max.f32 {mx}, {mx}, {o2}"));
        }
        // In log2 units (times scale * log2(e)); a row without keys so
        // far keeps m = -inf and subtracts 0.
        let mu = body.reg(Class::F32);
        body.op(format!("mul.rn.f32 {mu}, {mx}, {sl2}"));
        let empty = body.reg(Class::Pred);
        body.op(format!("setp.eq.f32 {empty}, {mx}, {neg_inf}"));
        body.op(format!("@{empty} mov.f32 {mu}, {zero}"));
        let alpha = body.reg(Class::F32);
        body.op(format!("mul.rn.f32 {alpha}, {mx_old}, {sl2}"));
        body.op(format!("sub.rn.f32 {alpha}, {alpha}, {mu}"));
        body.op(format!("ex2.approx.ftz.f32 {alpha}, {alpha}"));
        body.op(format!("mov.f32 {mx_old}, {mx}"));
        body.op(format!("mul.rn.f32 {l}, {l}, {alpha}"));
        body.op(format!("neg.f32 {mu}, {mu}"));
        for r in mine {
            body.op(format!("fma.rn.f32 {r}, {r}, {sl2}, {mu}"));
            body.op(format!("ex2.approx.ftz.f32 {r}, {r}"));
            body.op(format!("add.rn.f32 {l}, {l}, {r}"));
        }
        alpha
    })
}

/// `O *= alpha` of its row (the factors [`softmax`] returns).
pub(super) fn rescale(body: &mut Body, o: &[String], alpha: &[String; 2]) {
    for (i, r) in o.iter().enumerate() {
        body.op(format!("mul.rn.f32 {r}, {r}, {}", alpha[(i % 4) / 2]));
    }
}

/// The 16-byte-key A fragments of `P` (the scores `s` after [`softmax`])
/// rounded to the dtype, into `into` (4 registers a fragment) when given,
/// else fresh registers.
pub(super) fn pack_p(
    body: &mut Body,
    ht: &str,
    s: &[String],
    into: Option<&[[String; 4]]>,
) -> Vec<[String; 4]> {
    let tiles: Vec<[String; 4]> = s
        .chunks(4)
        .map(|c| [c[0].clone(), c[1].clone(), c[2].clone(), c[3].clone()])
        .collect();
    match into {
        Some(regs) => {
            pack_a_into(body, ht, &tiles, regs);
            regs.to_vec()
        }
        None => pack_a(body, ht, &tiles),
    }
}

/// Writes the warpgroup's rows: out = O / l (the quad's sum), 0 for a row
/// without keys, rounded and stored a pair of columns at a time; with
/// `p_lse`, lane 0 of each quad writes its rows' log-sum-exps, ln 2 (m +
/// log2(l)).
pub(super) fn store(
    body: &mut Body,
    f: &Frame,
    rw: &Rows,
    ht: &str,
    o: &[String],
    ml: &[(String, String); 2],
) {
    let (neg_inf, zero, one) = ("0fFF800000", "0f00000000", "0f3F800000");
    let (p, d) = (&f.p, o.len() * 2);
    let (no_lse, lse_base) = (body.reg(Class::Pred), body.reg(Class::B64));
    {
        let not_first = body.reg(Class::Pred);
        body.op(format!("setp.eq.u64 {no_lse}, {}, 0", p["p_lse"]));
        body.op(format!("setp.ne.u32 {not_first}, {}, 0", f.t32));
        body.op(format!("or.pred {no_lse}, {no_lse}, {not_first}"));
        let bl = body.reg(Class::B64);
        body.op(format!("mul.lo.u64 {bl}, {}, {}", f.b, p["p_l"]));
        body.op(format!("cvta.to.global.u64 {lse_base}, {}", p["p_lse"]));
        body.op(format!("mad.lo.u64 {lse_base}, {bl}, 4, {lse_base}"));
    }
    let col = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {col}, {}", f.t32));
    body.op(format!("shl.b64 {col}, {col}, 1"));
    for (half, (mx, l)) in ml.iter().enumerate() {
        let row = if half == 0 { &rw.ra } else { &rw.rb };
        for off in [1, 2] {
            let o2 = body.reg(Class::F32);
            body.op(format!("shfl.sync.bfly.b32 {o2}, {l}, {off}, 31, -1"));
            body.op(format!("add.rn.f32 {l}, {l}, {o2}"));
        }
        let skip = body.label("wg_no_row");
        let past = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {past}, {row}, {}", p["p_l"]));
        body.op(format!("@{past} bra {skip}"));
        let inv = body.reg(Class::F32);
        body.op(format!("div.rn.f32 {inv}, {one}, {l}"));
        let empty = body.reg(Class::Pred);
        body.op(format!("setp.eq.f32 {empty}, {l}, {zero}"));
        body.op(format!("@{empty} mov.f32 {inv}, {zero}"));
        {
            let (x, lg) = (body.reg(Class::F32), body.reg(Class::F32));
            body.op(format!("lg2.approx.f32 {lg}, {l}"));
            body.op(format!("mul.rn.f32 {x}, {mx}, {}", f.sl2));
            body.op(format!("add.rn.f32 {x}, {x}, {lg}"));
            body.op(format!(
                "mul.rn.f32 {x}, {x}, 0f{:08X}",
                std::f32::consts::LN_2.to_bits()
            ));
            body.op(format!("@{empty} mov.f32 {x}, {neg_inf}"));
            let a = body.reg(Class::B64);
            body.op(format!("mad.lo.u64 {a}, {row}, 4, {lse_base}"));
            body.op(format!("@!{no_lse} st.global.f32 [{a}], {x}"));
        }
        let ga = body.reg(Class::B64);
        body.op(format!(
            "mad.lo.u64 {ga}, {row}, {}, {}",
            p["p_or"], f.boff["o"]
        ));
        body.op(format!("add.u64 {ga}, {ga}, {col}"));
        body.op(format!("mad.lo.u64 {ga}, {ga}, 2, {}", p["p_out"]));
        for j in 0..d / 8 {
            let (x0, x1) = (body.reg(Class::F32), body.reg(Class::F32));
            body.op(format!("mul.rn.f32 {x0}, {}, {inv}", o[4 * j + 2 * half]));
            body.op(format!(
                "mul.rn.f32 {x1}, {}, {inv}",
                o[4 * j + 2 * half + 1]
            ));
            let packed = body.reg(Class::B32);
            body.op(format!("cvt.rn.{ht}x2.f32 {packed}, {x1}, {x0}"));
            body.op(format!("st.global.b32 [{ga}+{}], {packed}", j * 16));
        }
        body.place(&skip);
    }
}

/// `O` as the m64nD accumulator (d / 2 registers: of 8-column tile j,
/// [4j, 4j + 1] in row ra and [4j + 2, 4j + 3] in row rb), zeroed, and
/// the running max (of the scores, sign-folded) and sum of rows ra and
/// rb.
pub(super) fn accumulators(body: &mut Body, d: usize) -> (Vec<String>, [(String, String); 2]) {
    let o: Vec<String> = (0..d / 2).map(|_| body.reg(Class::F32)).collect();
    for r in &o {
        body.op(format!("mov.f32 {r}, 0f00000000"));
    }
    let ml = [0, 1].map(|_| {
        let (m, l) = (body.reg(Class::F32), body.reg(Class::F32));
        body.op(format!("mov.f32 {m}, 0fFF800000"));
        body.op(format!("mov.f32 {l}, 0f00000000"));
        (m, l)
    });
    (o, ml)
}

/// The Hopper entry `name` over `dtype` (f16 or bf16) with head dim `d`
/// (64 or 128), taking the parameters of the `mma.sync` entry
/// ([`MMA_PARAMS`]) and computing the same output and log-sum-exps.
pub(crate) fn attention_wgmma_entry(name: &str, dtype: DTypeKind, d: usize) -> String {
    let ht = half_type(dtype);
    let rows = attention_wgmma_rows(d);
    let threads = attention_wgmma_threads(d);
    let wgs = warpgroups(d);
    let n = WGMMA_KEYS;
    let kv_bytes = n * d * 2;
    let mut body = Body::for_target(Target::Sm80);
    let f = frame(&mut body, name, rows, BlockOrder::ByBatch);
    let wg = body.reg(Class::B32);
    body.op(format!("shr.u32 {wg}, {}, 7", f.tid));
    let rw = warpgroup_rows(&mut body, &f, &wg);
    // The warpgroup's 64 rows take the warp's place of the `mma.sync` entry.
    let KeyRange {
        causal,
        ntiles,
        wend,
    } = key_range(&mut body, &f.p, (&f.big_r0, rows), (&rw.r0, 64), n);
    // Shared memory: Q, K's three buffers, V's three.
    let sk = body.reg(Class::B32);
    body.op(format!("add.u32 {sk}, {}, {}", f.base, rows * d * 2));
    let sv = body.reg(Class::B32);
    body.op(format!("add.u32 {sv}, {sk}, {}", STAGES * kv_bytes));
    let copier = Copier::new(&mut body, &f, (&f.tid, threads), (d, rows), (&sk, &sv));
    let (kmajor, mnmajor) = operand_bits();
    let qdesc = {
        let a = body.reg(Class::B32);
        body.op(format!(
            "mad.lo.u32 {a}, {wg}, {}, {}",
            64 * ATOM_ROW,
            f.base
        ));
        descriptor(&mut body, &a, kmajor)
    };
    let kdesc = descriptor(&mut body, &sk, kmajor);
    let vdesc = descriptor(&mut body, &sv, mnmajor);
    let (o, ml) = accumulators(&mut body, d);
    let (j0, jt) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("mov.u64 {j0}, 0"));
    body.op(format!("mov.u64 {jt}, 0"));
    // The buffer of tile jt and of the next, as byte offsets (jt % 3 and
    // (jt + 1) % 3 times a tile's bytes).
    let (stage, next) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("mov.u32 {stage}, 0"));
    // The warpgroups take turns issuing S = Q K^T (named barriers 1..:
    // warpgroup w waits on barrier w + 1 with the one before it, then
    // lets the next go), so that one's softmax overlaps the others'
    // products; the last lets the first start.
    let (turn, other) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("add.u32 {turn}, {wg}, 1"));
    body.op(format!("rem.u32 {other}, {turn}, {wgs}"));
    body.op(format!("add.u32 {other}, {other}, 1"));
    let second = body.reg(Class::Pred);
    body.op(format!("setp.eq.u32 {second}, {wg}, {}", wgs - 1));
    let (lp, done) = (body.label("wg_keys"), body.label("wg_keys_done"));
    let none = body.reg(Class::Pred);
    body.op(format!("setp.eq.u64 {none}, {ntiles}, 0"));
    body.op(format!("@{none} bra.uni {done}"));
    // Q with the first tile.
    copier.q(&mut body);
    copier.kv(&mut body, &j0, &stage);
    body.op("cp.async.commit_group");
    body.op(format!("@{second} bar.arrive 1, 256"));
    // (every named barrier is one warpgroup waiting and one arriving.)
    body.place(&lp);
    // The next tile's copy, into buffer (jt + 1) % 3: last read for tile
    // jt - 2, which every thread finished before the barrier of tile
    // jt - 1.
    {
        body.op(format!("add.u32 {next}, {stage}, {kv_bytes}"));
        let wrap = body.reg(Class::Pred);
        body.op(format!("setp.ge.u32 {wrap}, {next}, {}", STAGES * kv_bytes));
        body.op(format!("@{wrap} mov.u32 {next}, 0"));
        let (jn, jtn) = (body.reg(Class::B64), body.reg(Class::B64));
        body.op(format!("add.u64 {jtn}, {jt}, 1"));
        body.op(format!("add.u64 {jn}, {j0}, {n}"));
        let last = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {last}, {jtn}, {ntiles}"));
        let no_copy = body.label("wg_no_copy");
        body.op(format!("@{last} bra.uni {no_copy}"));
        copier.kv(&mut body, &jn, &next);
        body.place(&no_copy);
        body.op("cp.async.commit_group");
    }
    // Tile jt arrived: each thread's copies made visible to the async
    // proxy `wgmma` reads through, then everyone's.
    body.op("cp.async.wait_group 1");
    body.op("fence.proxy.async.shared::cta");
    body.op("bar.sync 0");
    let skip = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {skip}, {j0}, {wend}"));
    let (kd, vd) = (body.reg(Class::B64), body.reg(Class::B64));
    {
        let st64 = body.reg(Class::B64);
        body.op(format!("cvt.u64.u32 {st64}, {stage}"));
        body.op(format!("shr.u64 {st64}, {st64}, 4"));
        body.op(format!("add.s64 {kd}, {kdesc}, {st64}"));
        body.op(format!("add.s64 {vd}, {vdesc}, {st64}"));
    }
    // S = Q K^T in the warpgroup's turn (taken and passed on even on a
    // tile it skips, so that the two wait and let go as often; the second
    // does not pass it on after the last tile, which the first does not
    // wait for).
    let s: Vec<String> = (0..n / 2).map(|_| body.reg(Class::F32)).collect();
    body.op(format!("bar.sync {turn}, 256"));
    let skip_qk = body.label("wg_skip_qk");
    body.op(format!("@{skip} bra.uni {skip_qk}"));
    body.op("wgmma.fence.sync.aligned");
    issue_qk(&mut body, &f, ht, d, rows, &s, &qdesc, &kd);
    body.op("wgmma.commit_group.sync.aligned");
    body.op("wgmma.wait_group.sync.aligned 0");
    body.place(&skip_qk);
    {
        let (last, keep) = (body.reg(Class::Pred), body.reg(Class::Pred));
        let jtn = body.reg(Class::B64);
        body.op(format!("add.u64 {jtn}, {jt}, 1"));
        body.op(format!("setp.ge.u64 {last}, {jtn}, {ntiles}"));
        body.op(format!("and.pred {keep}, {last}, {second}"));
        body.op(format!("@!{keep} bar.arrive {other}, 256"));
    }
    let skip_tile = body.label("wg_skip_tile");
    body.op(format!("@{skip} bra.uni {skip_tile}"));
    let alpha = softmax(&mut body, &f, &rw, &causal, &s, &ml, &j0);
    rescale(&mut body, &o, &alpha);
    // O += P V: P rounded to the dtype as A fragments of 16 keys.
    let pa = pack_p(&mut body, ht, &s, None);
    body.op("wgmma.fence.sync.aligned");
    issue_pv(&mut body, &f, ht, &o, &pa, &vd);
    body.op("wgmma.commit_group.sync.aligned");
    body.op("wgmma.wait_group.sync.aligned 0");
    body.place(&skip_tile);
    body.op(format!("mov.u32 {stage}, {next}"));
    body.op(format!("add.u64 {jt}, {jt}, 1"));
    body.op(format!("add.u64 {j0}, {j0}, {n}"));
    body.op(format!("setp.lt.u64 {none}, {jt}, {ntiles}"));
    body.op(format!("@{none} bra.uni {lp}"));
    body.place(&done);
    body.op("cp.async.wait_group 0");
    store(&mut body, &f, &rw, ht, &o, &ml);
    body.op("ret");
    // Dynamic shared memory (`attention_wgmma_shared(d)` bytes), declared
    // at module scope.
    format!(
        ".extern .shared .align 128 .b8 {name}_smem[];\n\n.visible .entry {name}(\n{}\n)\n.maxntid {threads}, 1, 1\n{{\n{}}}\n",
        entry_params(&MMA_PARAMS),
        body.finish()
    )
}
