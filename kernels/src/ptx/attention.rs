//! The scaled dot-product attention entry behind
//! [`builtin::attention`](crate::builtin::attention): one warp per query
//! row, eight rows per block; the warp walks the keys with an online
//! softmax (a running max and sum, the accumulated values rescaled when
//! the max grows), so no row of scores is ever stored. Lane `t` holds
//! elements `t, t + 32, ..` of the query and of the accumulated output
//! (head dims up to [`ATTENTION_MAX_HEAD`]); a score is the warp's sum of
//! the lanes' products. Everything is computed in f32 (f64 for f64), with
//! correctly rounded operations only.

use super::body::{Body, Class};
use super::inst::emit_program;
use super::memory::{load, store};
use super::mma_tile::{
    entry_params, half_type, lanes, ldmatrix_x4, load_params, mma, mma_from, pack_a, scale_log2,
    swizzle, Lanes,
};
use crate::lower::round_to;
use crate::mathfn;
use crate::prim::{Builder, Ty};
use crate::reduction::WARPS;
use tensorfn_core::DTypeKind;

/// The largest head dim (`E` and `Ev`) of the attention kernel.
///
/// ```
/// assert_eq!(tensorfn_kernels::ptx::ATTENTION_MAX_HEAD, 256);
/// ```
pub const ATTENTION_MAX_HEAD: usize = 256;

/// Slots of 32 elements per lane.
const SLOTS: usize = ATTENTION_MAX_HEAD / 32;

/// The parameters, in order; each is 64 bits (`p_scale` is an f64).
///
/// Batch `b` (`%ctaid.y + p_b0`) is `(b / p_nh, b % p_nh)` over two batch
/// dims: each operand's batch stride `p_*b` is the outer dim's and `p_*h`
/// the inner's (`p_nh = 1`, `p_*h = 0` for one batch dim), so heads split
/// out of a `[B, T, 3, H, D]` projection are read in place. The output's
/// strides are `p_ob`, `p_oh` and `p_or` (rows; columns are dense), so it
/// can be written back in that order (`[B, L, H, Ev]`). `p_lse`, when
/// not 0, is where the rows' log-sum-exps go (contiguous `[batch, L]`
/// f32, f64 for f64, `-inf` for a row without keys); the plain forward
/// passes 0 and writes none. `p_g` is the query heads a key and value head
/// serves (grouped-query attention; 1 otherwise): inner batch `h` reads the
/// key and value at inner batch `h / p_g`.
pub(crate) const PARAMS: [&str; 32] = [
    "p_out", "p_q", "p_k", "p_v", "p_mask", "p_l", "p_s", "p_e", "p_ev", "p_qb", "p_qr", "p_kb",
    "p_kr", "p_vb", "p_vr", "p_mb", "p_mr", "p_mc", "p_mode", "p_causal", "p_scale", "p_b0",
    "p_nh", "p_qh", "p_kh", "p_vh", "p_mh", "p_ob", "p_oh", "p_or", "p_lse", "p_g",
];

fn params() -> String {
    format!("(\n{}\n)", entry_params(&PARAMS))
}

/// The element offset of batch `b` in each operand named in `ops` (`q`,
/// `k`, `v`, `m` for the mask): `(b / p_nh) * p_Xb + (b % p_nh) * p_Xh`,
/// and for `k` and `v`, where the entry takes `p_g` (grouped-query
/// attention), `(b % p_nh) / p_g` in place of `b % p_nh`.
/// `p_scale` in the accumulator's type (`class`, `acc`).
fn load_scale(body: &mut Body, class: Class, acc: Ty) -> String {
    let scale = body.reg(class);
    if acc == Ty::F64 {
        body.op(format!("ld.param.f64 {scale}, [p_scale]"));
    } else {
        let s64 = body.reg(Class::F64);
        body.op(format!("ld.param.f64 {s64}, [p_scale]"));
        body.op(format!("cvt.rn.f32.f64 {scale}, {s64}"));
    }
    scale
}

/// The thread's lane (32 and 64 bits), its warp's row (`ctaid.x * WARPS + warp`) and its
/// batch (`ctaid.y + p_b0`), in 64 bits: one row per warp.
fn warp_row(
    body: &mut Body,
    p: &std::collections::HashMap<&str, String>,
) -> (String, String, String, String) {
    let (tid, lane32, warp32) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("mov.u32 {tid}, %tid.x"));
    body.op(format!("and.b32 {lane32}, {tid}, 31"));
    body.op(format!("shr.u32 {warp32}, {tid}, 5"));
    let (cta, by) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("mov.u32 {cta}, %ctaid.x"));
    body.op(format!("mov.u32 {by}, %ctaid.y"));
    let lane = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {lane}, {lane32}"));
    let row = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {row}, {cta}, {WARPS}"));
    let w64 = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {w64}, {warp32}"));
    body.op(format!("add.u64 {row}, {row}, {w64}"));
    let b = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {b}, {by}"));
    body.op(format!("add.u64 {b}, {b}, {}", p["p_b0"]));
    (lane32, lane, row, b)
}

pub(super) fn batch_offsets(
    body: &mut Body,
    b: &str,
    p: &std::collections::HashMap<&str, String>,
    ops: &[&'static str],
) -> std::collections::HashMap<&'static str, String> {
    let (outer, inner) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("div.u64 {outer}, {b}, {}", p["p_nh"]));
    body.op(format!("mul.lo.u64 {inner}, {outer}, {}", p["p_nh"]));
    body.op(format!("sub.u64 {inner}, {b}, {inner}"));
    split_batch_offsets(body, &outer, &inner, p, ops)
}

/// `x / d` and `x % d` of two 64-bit registers, by a 32-bit division when
/// both values fit in 32 bits (every real size) and a 64-bit one otherwise:
/// for entries that divide once per row rather than once per block, where
/// the 64-bit division's emulation would cost more than the row's work.
pub(super) fn divmod_u64(body: &mut Body, x: &str, d: &str) -> (String, String) {
    let (q, r) = (body.reg(Class::B64), body.reg(Class::B64));
    let (wide, big) = (body.reg(Class::B64), body.reg(Class::Pred));
    body.op(format!("or.b64 {wide}, {x}, {d}"));
    body.op(format!("shr.u64 {wide}, {wide}, 32"));
    body.op(format!("setp.ne.u64 {big}, {wide}, 0"));
    let (x32, d32, q32) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("cvt.u32.u64 {x32}, {x}"));
    body.op(format!("cvt.u32.u64 {d32}, {d}"));
    body.op(format!("@!{big} div.u32 {q32}, {x32}, {d32}"));
    body.op(format!("@!{big} cvt.u64.u32 {q}, {q32}"));
    body.op(format!("@{big} div.u64 {q}, {x}, {d}"));
    body.op(format!("mul.lo.u64 {r}, {q}, {d}"));
    body.op(format!("sub.u64 {r}, {x}, {r}"));
    (q, r)
}

/// [`batch_offsets`] for a batch already split into its `outer` and
/// `inner` indices.
pub(super) fn split_batch_offsets(
    body: &mut Body,
    outer: &str,
    inner: &str,
    p: &std::collections::HashMap<&str, String>,
    ops: &[&'static str],
) -> std::collections::HashMap<&'static str, String> {
    let inner = inner.to_string();
    let kv_inner = p.get("p_g").map(|g| {
        let r = body.reg(Class::B64);
        body.op(format!("div.u64 {r}, {inner}, {g}"));
        r
    });
    ops.iter()
        .map(|&x| {
            let off = body.reg(Class::B64);
            body.op(format!(
                "mul.lo.u64 {off}, {outer}, {}",
                p[format!("p_{x}b").as_str()]
            ));
            let inner = match (&kv_inner, x) {
                (Some(r), "k" | "v") => r,
                _ => &inner,
            };
            body.op(format!(
                "mad.lo.u64 {off}, {inner}, {}, {off}",
                p[format!("p_{x}h").as_str()]
            ));
            (x, off)
        })
        .collect()
}

/// The keys a block and one of its warps (or warpgroups) visit: the
/// block's keys 0..kend (under `causal`, up to its last row) in `ntiles`
/// tiles of `tile`, and the warp's keys 0..wend (0 for a warp past the
/// rows). Shared by the `mma.sync` and `wgmma` forward entries.
pub(super) struct KeyRange {
    pub(super) causal: String,
    pub(super) ntiles: String,
    pub(super) wend: String,
}

/// Emits [`KeyRange`]'s registers for a block whose rows start at
/// `block.0` (`block.1` of them) and a warp whose rows start at `warp.0`
/// (`warp.1` of them).
pub(super) fn key_range(
    body: &mut Body,
    p: &std::collections::HashMap<&str, String>,
    block: (&str, usize),
    warp: (&str, usize),
    tile: usize,
) -> KeyRange {
    let ((big_r0, rows), (r0, wrows)) = (block, warp);
    let causal = body.reg(Class::Pred);
    body.op(format!("setp.ne.u64 {causal}, {}, 0", p["p_causal"]));
    let kend = body.reg(Class::B64);
    body.op(format!("mov.u64 {kend}, {}", p["p_s"]));
    let rend = body.reg(Class::B64);
    body.op(format!("add.u64 {rend}, {big_r0}, {rows}"));
    body.op(format!("@{causal} min.u64 {kend}, {kend}, {rend}"));
    let ntiles = body.reg(Class::B64);
    body.op(format!("add.u64 {ntiles}, {kend}, {}", tile - 1));
    body.op(format!(
        "shr.u64 {ntiles}, {ntiles}, {}",
        tile.trailing_zeros()
    ));
    let wend = body.reg(Class::B64);
    body.op(format!("mov.u64 {wend}, {}", p["p_s"]));
    body.op(format!("add.u64 {rend}, {r0}, {wrows}"));
    body.op(format!("@{causal} min.u64 {wend}, {wend}, {rend}"));
    let idle = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {idle}, {r0}, {}", p["p_l"]));
    body.op(format!("@{idle} mov.u64 {wend}, 0"));
    KeyRange {
        causal,
        ntiles,
        wend,
    }
}

/// PTX type suffix, register class and the bits of `-inf` and `0` of the
/// computation type.
fn acc_of(ty: Ty) -> (&'static str, Class, &'static str, &'static str) {
    match ty {
        Ty::F64 => (
            "f64",
            Class::F64,
            "0dFFF0000000000000",
            "0d0000000000000000",
        ),
        _ => ("f32", Class::F32, "0fFF800000", "0f00000000"),
    }
}

/// The entry `name` over tensors of `dtype` (a float).
pub(crate) fn attention_entry(name: &str, dtype: DTypeKind) -> String {
    let acc = Ty::of(dtype);
    let (t, class, neg_inf, zero) = acc_of(acc);
    let size = dtype.size_bytes();
    let exp = {
        let mut b = Builder::new();
        let x = b.param(acc);
        let e = mathfn::exp(&mut b, x);
        b.finish(vec![e])
    };
    let out_round = {
        let mut b = Builder::new();
        let x = b.param(acc);
        let r = match dtype {
            DTypeKind::F16 | DTypeKind::BF16 => round_to(&mut b, x, dtype),
            _ => x,
        };
        b.finish(vec![r])
    };
    let log = {
        let mut b = Builder::new();
        let x = b.param(acc);
        let y = mathfn::log(&mut b, x);
        b.finish(vec![y])
    };
    let mut body = Body::new();
    let globals = ["p_out", "p_q", "p_k", "p_v", "p_mask"];
    let p = load_params(&mut body, &PARAMS, &globals);
    let scale = load_scale(&mut body, class, acc);
    let end = body.label("att_end");
    // lane, query row i, batch b.
    let (lane32, lane, i, b) = warp_row(&mut body, &p);
    let boff = batch_offsets(&mut body, &b, &p, &["q", "k", "v", "m", "o"]);
    let past = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {past}, {i}, {}", p["p_l"]));
    body.op(format!("@{past} bra.uni {end}"));
    // The start of row `r` of an operand whose batch starts `boff`
    // elements in: base + (boff + r * rs) * bytes.
    let row_start = |body: &mut Body, base: &str, boff: &str, row: &str, rs: &str, bytes: usize| {
        let off = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {off}, {row}, {rs}, {boff}"));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {off}, {bytes}, {base}"));
        a
    };
    // Element `lane + 32 c` of a row of `n` elements, 0 past the end (the
    // address is clamped to the row's first element, which exists when
    // the slot runs: `n > 32 c`).
    let slot_load = |body: &mut Body, row: &str, n: &str, c: usize| {
        let col = body.reg(Class::B64);
        body.op(format!("add.u64 {col}, {lane}, {}", 32 * c));
        let inside = body.reg(Class::Pred);
        body.op(format!("setp.lt.u64 {inside}, {col}, {n}"));
        body.op(format!("selp.u64 {col}, {col}, 0, {inside}"));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {col}, {size}, {row}"));
        let x = load(body, dtype, &a, true);
        let r = body.reg(class);
        body.op(format!("selp.{t} {r}, {x}, {zero}, {inside}"));
        r
    };
    // Runs `inner` for the slots a row of `n` elements has (uniform
    // branches: `n` is the same in every lane).
    let slots = |body: &mut Body, n: &str, what: &str, inner: &mut dyn FnMut(&mut Body, usize)| {
        let done = body.label(&format!("{what}_done"));
        for c in 0..SLOTS {
            let none = body.reg(Class::Pred);
            body.op(format!("setp.le.u64 {none}, {n}, {}", 32 * c));
            body.op(format!("@{none} bra.uni {done}"));
            inner(body, c);
        }
        body.place(&done);
    };
    let q_row = row_start(&mut body, &p["p_q"], &boff["q"], &i, &p["p_qr"], size);
    let qv: Vec<String> = (0..SLOTS).map(|_| body.reg(class)).collect();
    let accs: Vec<String> = (0..SLOTS).map(|_| body.reg(class)).collect();
    for c in 0..SLOTS {
        body.op(format!("mov.{t} {}, {zero}", qv[c]));
        body.op(format!("mov.{t} {}, {zero}", accs[c]));
    }
    slots(&mut body, &p["p_e"], "att_q", &mut |body, c| {
        let x = slot_load(body, &q_row, &p["p_e"], c);
        body.op(format!("mov.{t} {}, {x}", qv[c]));
    });
    let (m, l) = (body.reg(class), body.reg(class));
    body.op(format!("mov.{t} {m}, {neg_inf}"));
    body.op(format!("mov.{t} {l}, {zero}"));
    // Keys 0..end: under `causal`, 0..=i.
    let kend = body.reg(Class::B64);
    body.op(format!("mov.u64 {kend}, {}", p["p_s"]));
    let causal = body.reg(Class::Pred);
    body.op(format!("setp.ne.u64 {causal}, {}, 0", p["p_causal"]));
    let i1 = body.reg(Class::B64);
    body.op(format!("add.u64 {i1}, {i}, 1"));
    body.op(format!("@{causal} min.u64 {kend}, {kend}, {i1}"));
    let mask_bytes = if dtype == DTypeKind::F64 { 8 } else { size };
    let (is_bool, is_add) = (body.reg(Class::Pred), body.reg(Class::Pred));
    body.op(format!("setp.eq.u64 {is_bool}, {}, 1", p["p_mode"]));
    body.op(format!("setp.eq.u64 {is_add}, {}, 2", p["p_mode"]));
    let j = body.reg(Class::B64);
    body.op(format!("mov.u64 {j}, 0"));
    let (lp, next, done) = (
        body.label("att_key"),
        body.label("att_next"),
        body.label("att_keys_done"),
    );
    body.place(&lp);
    let fin = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {fin}, {j}, {kend}"));
    body.op(format!("@{fin} bra.uni {done}"));
    // The score: the warp's sum of the lanes' products, times `scale`.
    let k_row = row_start(&mut body, &p["p_k"], &boff["k"], &j, &p["p_kr"], size);
    let d = body.reg(class);
    body.op(format!("mov.{t} {d}, {zero}"));
    slots(&mut body, &p["p_e"], "att_dot", &mut |body, c| {
        let x = slot_load(body, &k_row, &p["p_e"], c);
        body.op(format!("fma.rn.{t} {d}, {}, {x}, {d}", qv[c]));
    });
    for off in [16, 8, 4, 2, 1] {
        let o = if acc == Ty::F64 {
            let (lo, hi) = (body.reg(Class::B32), body.reg(Class::B32));
            body.op(format!("mov.b64 {{{lo}, {hi}}}, {d}"));
            body.op(format!("shfl.sync.bfly.b32 {lo}, {lo}, {off}, 31, -1"));
            body.op(format!("shfl.sync.bfly.b32 {hi}, {hi}, {off}, 31, -1"));
            let o = body.reg(class);
            body.op(format!("mov.b64 {o}, {{{lo}, {hi}}}"));
            o
        } else {
            let o = body.reg(class);
            body.op(format!("shfl.sync.bfly.b32 {o}, {d}, {off}, 31, -1"));
            o
        };
        body.op(format!("add.rn.{t} {d}, {d}, {o}"));
    }
    let s = body.reg(class);
    body.op(format!("mul.rn.{t} {s}, {d}, {scale}"));
    // The mask at (b, i, j): a `bool` that leaves the key out, or a value
    // added to the score.
    let not_bool = body.label("att_not_bool");
    body.op(format!("@!{is_bool} bra.uni {not_bool}"));
    {
        let mrow = row_start(&mut body, &p["p_mask"], &boff["m"], &i, &p["p_mr"], 1);
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {j}, {}, {mrow}", p["p_mc"]));
        let keep = load(&mut body, DTypeKind::Bool, &a, true);
        body.op(format!("@!{keep} mov.{t} {s}, {neg_inf}"));
    }
    body.place(&not_bool);
    let not_add = body.label("att_not_add");
    body.op(format!("@!{is_add} bra.uni {not_add}"));
    {
        let mrow = row_start(
            &mut body,
            &p["p_mask"],
            &boff["m"],
            &i,
            &p["p_mr"],
            mask_bytes,
        );
        let jc = body.reg(Class::B64);
        body.op(format!("mul.lo.u64 {jc}, {j}, {}", p["p_mc"]));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {jc}, {mask_bytes}, {mrow}"));
        let x = load(&mut body, dtype, &a, true);
        body.op(format!("add.rn.{t} {s}, {s}, {x}"));
    }
    body.place(&not_add);
    // A key scored -inf takes no part.
    let out_of = body.reg(Class::Pred);
    body.op(format!("setp.eq.{t} {out_of}, {s}, {neg_inf}"));
    body.op(format!("@{out_of} bra.uni {next}"));
    // The running max; on growth the sum and the outputs are rescaled.
    let mnew = body.reg(class);
    body.op(format!("max.{t} {mnew}, {m}, {s}"));
    let same = body.label("att_same_max");
    let grew = body.reg(Class::Pred);
    body.op(format!("setp.neu.{t} {grew}, {mnew}, {m}"));
    body.op(format!("@!{grew} bra.uni {same}"));
    {
        let diff = body.reg(class);
        body.op(format!("sub.rn.{t} {diff}, {m}, {mnew}"));
        let alpha = emit_program(&mut body, &exp, &[diff])[0].clone();
        body.op(format!("mul.rn.{t} {l}, {l}, {alpha}"));
        for a in &accs {
            body.op(format!("mul.rn.{t} {a}, {a}, {alpha}"));
        }
        body.op(format!("mov.{t} {m}, {mnew}"));
    }
    body.place(&same);
    let sd = body.reg(class);
    body.op(format!("sub.rn.{t} {sd}, {s}, {m}"));
    let pw = emit_program(&mut body, &exp, &[sd])[0].clone();
    body.op(format!("add.rn.{t} {l}, {l}, {pw}"));
    let v_row = row_start(&mut body, &p["p_v"], &boff["v"], &j, &p["p_vr"], size);
    slots(&mut body, &p["p_ev"], "att_acc", &mut |body, c| {
        let x = slot_load(body, &v_row, &p["p_ev"], c);
        body.op(format!("fma.rn.{t} {0}, {pw}, {x}, {0}", accs[c]));
    });
    body.place(&next);
    body.op(format!("add.u64 {j}, {j}, 1"));
    body.op(format!("bra.uni {lp}"));
    body.place(&done);
    // out[b, i, :] = acc / l, or 0 for a row without keys.
    let inv = body.reg(class);
    let one = if acc == Ty::F64 {
        "0d3FF0000000000000"
    } else {
        "0f3F800000"
    };
    body.op(format!("div.rn.{t} {inv}, {one}, {l}"));
    let empty = body.reg(Class::Pred);
    body.op(format!("setp.eq.{t} {empty}, {l}, {zero}"));
    body.op(format!("@{empty} mov.{t} {inv}, {zero}"));
    // The row's log-sum-exp, m + ln(l), when asked for (lane 0 writes).
    {
        let skip = body.label("att_no_lse");
        let none = body.reg(Class::Pred);
        body.op(format!("setp.eq.u64 {none}, {}, 0", p["p_lse"]));
        body.op(format!("@{none} bra.uni {skip}"));
        let not0 = body.reg(Class::Pred);
        body.op(format!("setp.ne.u32 {not0}, {lane32}, 0"));
        body.op(format!("@{not0} bra {skip}"));
        let ln = emit_program(&mut body, &log, std::slice::from_ref(&l))[0].clone();
        let x = body.reg(class);
        body.op(format!("add.rn.{t} {x}, {m}, {ln}"));
        body.op(format!("@{empty} mov.{t} {x}, {neg_inf}"));
        let base = body.reg(Class::B64);
        body.op(format!("cvta.to.global.u64 {base}, {}", p["p_lse"]));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {b}, {}, {i}", p["p_l"]));
        let bytes = if acc == Ty::F64 { 8 } else { 4 };
        body.op(format!("mad.lo.u64 {a}, {a}, {bytes}, {base}"));
        body.op(format!("st.global.{t} [{a}], {x}"));
        body.place(&skip);
    }
    let orow = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {orow}, {i}, {}, {}",
        p["p_or"], boff["o"]
    ));
    body.op(format!("mad.lo.u64 {orow}, {orow}, {size}, {}", p["p_out"]));
    slots(&mut body, &p["p_ev"], "att_store", &mut |body, c| {
        let skip = body.label("att_no_store");
        let col = body.reg(Class::B64);
        body.op(format!("add.u64 {col}, {lane}, {}", 32 * c));
        let outside = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {outside}, {col}, {}", p["p_ev"]));
        body.op(format!("@{outside} bra {skip}"));
        let r = body.reg(class);
        body.op(format!("mul.rn.{t} {r}, {}, {inv}", accs[c]));
        let r = emit_program(body, &out_round, &[r])[0].clone();
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {col}, {size}, {orow}"));
        store(body, dtype, &a, &r);
        body.place(&skip);
    });
    body.place(&end);
    body.op("ret");
    format!(
        ".visible .entry {name}{}\n{{\n{}}}\n",
        params(),
        body.finish()
    )
}

/// The parameters of the backward entries, in order; each is 64 bits
/// (`p_scale` is an f64). `p_dq`, `p_dk`, `p_dv` are the contiguous
/// gradients, `p_delta` the rows' `D_i = dO_i . O_i` (f32, f64 for f64;
/// the query entry writes it, the key entry reads it), `p_lse` the
/// forward's log-sum-exps (f32, f64 for f64) and `p_o`, `p_go` the output and its
/// gradient, contiguous `[batch, l, ev]`; the rest as in [`PARAMS`].
pub(crate) const BWD_PARAMS: [&str; 33] = [
    "p_dq", "p_dk", "p_dv", "p_delta", "p_lse", "p_o", "p_go", "p_q", "p_k", "p_v", "p_mask",
    "p_l", "p_s", "p_e", "p_ev", "p_qb", "p_qr", "p_kb", "p_kr", "p_vb", "p_vr", "p_mb", "p_mr",
    "p_mc", "p_mode", "p_causal", "p_scale", "p_b0", "p_nh", "p_qh", "p_kh", "p_vh", "p_mh",
];

/// The backward entry `name` over tensors of `dtype` (a float), the
/// structure of [`attention_entry`]: one warp per row, lane `t` holding
/// elements `t, t + 32, ..` of the row's vectors, dot products summed
/// across the warp. With `keys` false a warp owns query row `i`: it
/// writes `D_i = dO_i . O_i` and `dQ_i = scale * sum_j dS_ij K_j`; with
/// `keys` true a warp owns key row `j` and writes `dV_j = sum_i P_ij dO_i`
/// and `dK_j = scale * sum_i dS_ij Q_i`, reading the `D_i` the query
/// entry wrote (launched first). `P_ij = exp(S_ij - lse_i)` and `dS_ij =
/// P_ij (dO_i . V_j - D_i)`, recomputed from the scores; a key scored
/// `-inf` takes no part. Each gradient row is summed by one warp in a
/// fixed order: no atomics, the same bits every run.
pub(crate) fn attention_backward_entry(name: &str, dtype: DTypeKind, keys: bool) -> String {
    let acc = Ty::of(dtype);
    let (t, class, neg_inf, zero) = acc_of(acc);
    let acc_kind = if acc == Ty::F64 {
        DTypeKind::F64
    } else {
        DTypeKind::F32
    };
    let acc_bytes = acc_kind.size_bytes();
    let size = dtype.size_bytes();
    let exp = {
        let mut b = Builder::new();
        let x = b.param(acc);
        let e = mathfn::exp(&mut b, x);
        b.finish(vec![e])
    };
    let out_round = {
        let mut b = Builder::new();
        let x = b.param(acc);
        let r = match dtype {
            DTypeKind::F16 | DTypeKind::BF16 => round_to(&mut b, x, dtype),
            _ => x,
        };
        b.finish(vec![r])
    };
    let mut body = Body::new();
    let globals = [
        "p_dq", "p_dk", "p_dv", "p_delta", "p_lse", "p_o", "p_go", "p_q", "p_k", "p_v", "p_mask",
    ];
    let p = load_params(&mut body, &BWD_PARAMS, &globals);
    let scale = load_scale(&mut body, class, acc);
    let end = body.label("attb_end");
    // The warp's row: a query (`keys` false) or a key.
    let (lane32, lane, row, b) = warp_row(&mut body, &p);
    let boff = batch_offsets(&mut body, &b, &p, &["q", "k", "v", "m"]);
    let past = body.reg(Class::Pred);
    let rows = if keys { &p["p_s"] } else { &p["p_l"] };
    body.op(format!("setp.ge.u64 {past}, {row}, {rows}"));
    body.op(format!("@{past} bra.uni {end}"));
    let row_start = |body: &mut Body, base: &str, boff: &str, row: &str, rs: &str, bytes: usize| {
        let off = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {off}, {row}, {rs}, {boff}"));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {off}, {bytes}, {base}"));
        a
    };
    // Row `r` of a contiguous `[batch, rows, n]` operand at `base`:
    // base + ((b * rows + r) * n) * bytes.
    let dense_row = |body: &mut Body, base: &str, rows: &str, r: &str, n: &str, bytes: usize| {
        let off = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {off}, {b}, {rows}, {r}"));
        body.op(format!("mul.lo.u64 {off}, {off}, {n}"));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {off}, {bytes}, {base}"));
        a
    };
    let slot_load = |body: &mut Body, row: &str, n: &str, c: usize| {
        let col = body.reg(Class::B64);
        body.op(format!("add.u64 {col}, {lane}, {}", 32 * c));
        let inside = body.reg(Class::Pred);
        body.op(format!("setp.lt.u64 {inside}, {col}, {n}"));
        body.op(format!("selp.u64 {col}, {col}, 0, {inside}"));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {col}, {size}, {row}"));
        let x = load(body, dtype, &a, true);
        let r = body.reg(class);
        body.op(format!("selp.{t} {r}, {x}, {zero}, {inside}"));
        r
    };
    let slots = |body: &mut Body, n: &str, what: &str, inner: &mut dyn FnMut(&mut Body, usize)| {
        let done = body.label(&format!("{what}_done"));
        for c in 0..SLOTS {
            let none = body.reg(Class::Pred);
            body.op(format!("setp.le.u64 {none}, {n}, {}", 32 * c));
            body.op(format!("@{none} bra.uni {done}"));
            inner(body, c);
        }
        body.place(&done);
    };
    // The warp's sum of `d` in every lane.
    let warp_sum = |body: &mut Body, d: &str| {
        for off in [16, 8, 4, 2, 1] {
            let o = if acc == Ty::F64 {
                let (lo, hi) = (body.reg(Class::B32), body.reg(Class::B32));
                body.op(format!("mov.b64 {{{lo}, {hi}}}, {d}"));
                body.op(format!("shfl.sync.bfly.b32 {lo}, {lo}, {off}, 31, -1"));
                body.op(format!("shfl.sync.bfly.b32 {hi}, {hi}, {off}, 31, -1"));
                let o = body.reg(class);
                body.op(format!("mov.b64 {o}, {{{lo}, {hi}}}"));
                o
            } else {
                let o = body.reg(class);
                body.op(format!("shfl.sync.bfly.b32 {o}, {d}, {off}, 31, -1"));
                o
            };
            body.op(format!("add.rn.{t} {d}, {d}, {o}"));
        }
    };
    // `n` registers of the computation type, zeroed.
    let zeros = |body: &mut Body| -> Vec<String> {
        (0..SLOTS)
            .map(|_| {
                let r = body.reg(class);
                body.op(format!("mov.{t} {r}, {zero}"));
                r
            })
            .collect()
    };
    let mask_bytes = if dtype == DTypeKind::F64 { 8 } else { size };
    let (is_bool, is_add) = (body.reg(Class::Pred), body.reg(Class::Pred));
    body.op(format!("setp.eq.u64 {is_bool}, {}, 1", p["p_mode"]));
    body.op(format!("setp.eq.u64 {is_add}, {}, 2", p["p_mode"]));
    let causal = body.reg(Class::Pred);
    body.op(format!("setp.ne.u64 {causal}, {}, 0", p["p_causal"]));
    // The score of query `i` (its elements `qv`) against key `j` (`kv`):
    // scale * q.k plus the mask, `-inf` where the key is left out.
    let score = |body: &mut Body, i: &str, j: &str, qv: &[String], kv: &[String]| -> String {
        let d = body.reg(class);
        body.op(format!("mov.{t} {d}, {zero}"));
        slots(body, &p["p_e"], "attb_dot", &mut |body, c| {
            body.op(format!("fma.rn.{t} {d}, {}, {}, {d}", qv[c], kv[c]));
        });
        warp_sum(body, &d);
        let s = body.reg(class);
        body.op(format!("mul.rn.{t} {s}, {d}, {scale}"));
        let not_bool = body.label("attb_not_bool");
        body.op(format!("@!{is_bool} bra.uni {not_bool}"));
        {
            let mrow = row_start(body, &p["p_mask"], &boff["m"], i, &p["p_mr"], 1);
            let a = body.reg(Class::B64);
            body.op(format!("mad.lo.u64 {a}, {j}, {}, {mrow}", p["p_mc"]));
            let keep = load(body, DTypeKind::Bool, &a, true);
            body.op(format!("@!{keep} mov.{t} {s}, {neg_inf}"));
        }
        body.place(&not_bool);
        let not_add = body.label("attb_not_add");
        body.op(format!("@!{is_add} bra.uni {not_add}"));
        {
            let mrow = row_start(body, &p["p_mask"], &boff["m"], i, &p["p_mr"], mask_bytes);
            let jc = body.reg(Class::B64);
            body.op(format!("mul.lo.u64 {jc}, {j}, {}", p["p_mc"]));
            let a = body.reg(Class::B64);
            body.op(format!("mad.lo.u64 {a}, {jc}, {mask_bytes}, {mrow}"));
            let x = load(body, dtype, &a, true);
            body.op(format!("add.rn.{t} {s}, {s}, {x}"));
        }
        body.place(&not_add);
        s
    };
    // Element `i` of batch `b` of a contiguous `[batch, l]` statistic.
    let stat_addr = |body: &mut Body, base: &str, i: &str, bytes: usize| {
        let off = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {off}, {b}, {}, {i}", p["p_l"]));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {off}, {bytes}, {base}"));
        a
    };
    let load_lse = |body: &mut Body, i: &str| {
        if acc == Ty::F64 {
            let a = stat_addr(body, &p["p_lse"], i, 8);
            load(body, DTypeKind::F64, &a, true)
        } else {
            let a = stat_addr(body, &p["p_lse"], i, 4);
            load(body, DTypeKind::F32, &a, true)
        }
    };
    // Stores `scale_by * acc[c]` (or `acc[c]`), rounded to the dtype, to
    // a row of `n` elements at `row`.
    let store_row =
        |body: &mut Body, row: &str, n: &str, accs: &[String], by: Option<&str>, what: &str| {
            slots(body, n, what, &mut |body, c| {
                let skip = body.label("attb_no_store");
                let col = body.reg(Class::B64);
                body.op(format!("add.u64 {col}, {lane}, {}", 32 * c));
                let outside = body.reg(Class::Pred);
                body.op(format!("setp.ge.u64 {outside}, {col}, {n}"));
                body.op(format!("@{outside} bra {skip}"));
                let r = match by {
                    Some(f) => {
                        let r = body.reg(class);
                        body.op(format!("mul.rn.{t} {r}, {}, {f}", accs[c]));
                        r
                    }
                    None => accs[c].clone(),
                };
                let r = emit_program(body, &out_round, &[r])[0].clone();
                let a = body.reg(Class::B64);
                body.op(format!("mad.lo.u64 {a}, {col}, {size}, {row}"));
                store(body, dtype, &a, &r);
                body.place(&skip);
            });
        };
    let vec_load = |body: &mut Body, regs: &[String], row: &str, n: &str, what: &str| {
        slots(body, n, what, &mut |body, c| {
            let x = slot_load(body, row, n, c);
            body.op(format!("mov.{t} {}, {x}", regs[c]));
        });
    };
    if !keys {
        let i = &row;
        let q_row = row_start(&mut body, &p["p_q"], &boff["q"], i, &p["p_qr"], size);
        let qv = zeros(&mut body);
        vec_load(&mut body, &qv, &q_row, &p["p_e"], "attb_q");
        let g_row = dense_row(&mut body, &p["p_go"], &p["p_l"], i, &p["p_ev"], size);
        let o_row = dense_row(&mut body, &p["p_o"], &p["p_l"], i, &p["p_ev"], size);
        let gv = zeros(&mut body);
        vec_load(&mut body, &gv, &g_row, &p["p_ev"], "attb_g");
        // D_i = dO_i . O_i, written once for the key entry.
        let dd = body.reg(class);
        body.op(format!("mov.{t} {dd}, {zero}"));
        slots(&mut body, &p["p_ev"], "attb_delta", &mut |body, c| {
            let x = slot_load(body, &o_row, &p["p_ev"], c);
            body.op(format!("fma.rn.{t} {dd}, {}, {x}, {dd}", gv[c]));
        });
        warp_sum(&mut body, &dd);
        {
            let skip = body.label("attb_no_delta");
            let not0 = body.reg(Class::Pred);
            body.op(format!("setp.ne.u32 {not0}, {lane32}, 0"));
            body.op(format!("@{not0} bra {skip}"));
            let a = stat_addr(&mut body, &p["p_delta"], i, acc_bytes);
            store(&mut body, acc_kind, &a, &dd);
            body.place(&skip);
        }
        let lse = load_lse(&mut body, i);
        let dq = zeros(&mut body);
        let kend = body.reg(Class::B64);
        body.op(format!("mov.u64 {kend}, {}", p["p_s"]));
        let i1 = body.reg(Class::B64);
        body.op(format!("add.u64 {i1}, {i}, 1"));
        body.op(format!("@{causal} min.u64 {kend}, {kend}, {i1}"));
        let j = body.reg(Class::B64);
        body.op(format!("mov.u64 {j}, 0"));
        let (lp, next, done) = (
            body.label("attb_key"),
            body.label("attb_next"),
            body.label("attb_keys_done"),
        );
        body.place(&lp);
        let fin = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {fin}, {j}, {kend}"));
        body.op(format!("@{fin} bra.uni {done}"));
        let k_row = row_start(&mut body, &p["p_k"], &boff["k"], &j, &p["p_kr"], size);
        let kx = zeros(&mut body);
        vec_load(&mut body, &kx, &k_row, &p["p_e"], "attb_k");
        let s = score(&mut body, i, &j, &qv, &kx);
        let out_of = body.reg(Class::Pred);
        body.op(format!("setp.eq.{t} {out_of}, {s}, {neg_inf}"));
        body.op(format!("@{out_of} bra.uni {next}"));
        let sd = body.reg(class);
        body.op(format!("sub.rn.{t} {sd}, {s}, {lse}"));
        let pw = emit_program(&mut body, &exp, &[sd])[0].clone();
        let v_row = row_start(&mut body, &p["p_v"], &boff["v"], &j, &p["p_vr"], size);
        let dp = body.reg(class);
        body.op(format!("mov.{t} {dp}, {zero}"));
        slots(&mut body, &p["p_ev"], "attb_dp", &mut |body, c| {
            let x = slot_load(body, &v_row, &p["p_ev"], c);
            body.op(format!("fma.rn.{t} {dp}, {}, {x}, {dp}", gv[c]));
        });
        warp_sum(&mut body, &dp);
        let ds = body.reg(class);
        body.op(format!("sub.rn.{t} {ds}, {dp}, {dd}"));
        body.op(format!("mul.rn.{t} {ds}, {ds}, {pw}"));
        slots(&mut body, &p["p_e"], "attb_dq", &mut |body, c| {
            body.op(format!("fma.rn.{t} {0}, {ds}, {1}, {0}", dq[c], kx[c]));
        });
        body.place(&next);
        body.op(format!("add.u64 {j}, {j}, 1"));
        body.op(format!("bra.uni {lp}"));
        body.place(&done);
        let dq_row = dense_row(&mut body, &p["p_dq"], &p["p_l"], i, &p["p_e"], size);
        store_row(
            &mut body,
            &dq_row,
            &p["p_e"],
            &dq,
            Some(&scale),
            "attb_store_dq",
        );
    } else {
        let j = &row;
        let k_row = row_start(&mut body, &p["p_k"], &boff["k"], j, &p["p_kr"], size);
        let kx = zeros(&mut body);
        vec_load(&mut body, &kx, &k_row, &p["p_e"], "attb_k");
        let v_row = row_start(&mut body, &p["p_v"], &boff["v"], j, &p["p_vr"], size);
        let vx = zeros(&mut body);
        vec_load(&mut body, &vx, &v_row, &p["p_ev"], "attb_v");
        let (dk, dv) = (zeros(&mut body), zeros(&mut body));
        // Queries j.. under `causal` (those before see no key past them).
        let i = body.reg(Class::B64);
        body.op(format!("mov.u64 {i}, 0"));
        body.op(format!("@{causal} mov.u64 {i}, {j}"));
        let (lp, next, done) = (
            body.label("attb_query"),
            body.label("attb_qnext"),
            body.label("attb_queries_done"),
        );
        body.place(&lp);
        let fin = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {fin}, {i}, {}", p["p_l"]));
        body.op(format!("@{fin} bra.uni {done}"));
        let q_row = row_start(&mut body, &p["p_q"], &boff["q"], &i, &p["p_qr"], size);
        let qx = zeros(&mut body);
        vec_load(&mut body, &qx, &q_row, &p["p_e"], "attb_qi");
        let s = score(&mut body, &i, j, &qx, &kx);
        let out_of = body.reg(Class::Pred);
        body.op(format!("setp.eq.{t} {out_of}, {s}, {neg_inf}"));
        body.op(format!("@{out_of} bra.uni {next}"));
        let lse = load_lse(&mut body, &i);
        let da = stat_addr(&mut body, &p["p_delta"], &i, acc_bytes);
        let dd = load(&mut body, acc_kind, &da, true);
        let sd = body.reg(class);
        body.op(format!("sub.rn.{t} {sd}, {s}, {lse}"));
        let pw = emit_program(&mut body, &exp, &[sd])[0].clone();
        let g_row = dense_row(&mut body, &p["p_go"], &p["p_l"], &i, &p["p_ev"], size);
        let gx = zeros(&mut body);
        vec_load(&mut body, &gx, &g_row, &p["p_ev"], "attb_gi");
        let dp = body.reg(class);
        body.op(format!("mov.{t} {dp}, {zero}"));
        slots(&mut body, &p["p_ev"], "attb_dpk", &mut |body, c| {
            body.op(format!("fma.rn.{t} {dp}, {}, {}, {dp}", gx[c], vx[c]));
            body.op(format!("fma.rn.{t} {0}, {pw}, {1}, {0}", dv[c], gx[c]));
        });
        warp_sum(&mut body, &dp);
        let ds = body.reg(class);
        body.op(format!("sub.rn.{t} {ds}, {dp}, {dd}"));
        body.op(format!("mul.rn.{t} {ds}, {ds}, {pw}"));
        slots(&mut body, &p["p_e"], "attb_dk", &mut |body, c| {
            body.op(format!("fma.rn.{t} {0}, {ds}, {1}, {0}", dk[c], qx[c]));
        });
        body.place(&next);
        body.op(format!("add.u64 {i}, {i}, 1"));
        body.op(format!("bra.uni {lp}"));
        body.place(&done);
        let dk_row = dense_row(&mut body, &p["p_dk"], &p["p_s"], j, &p["p_e"], size);
        store_row(
            &mut body,
            &dk_row,
            &p["p_e"],
            &dk,
            Some(&scale),
            "attb_store_dk",
        );
        let dv_row = dense_row(&mut body, &p["p_dv"], &p["p_s"], j, &p["p_ev"], size);
        store_row(&mut body, &dv_row, &p["p_ev"], &dv, None, "attb_store_dv");
    }
    body.place(&end);
    body.op("ret");
    format!(
        ".visible .entry {name}(\n{}\n)\n{{\n{}}}\n",
        entry_params(&BWD_PARAMS),
        body.finish()
    )
}

/// Head dims of the tensor-core attention entry.
///
/// ```
/// assert_eq!(tensorfn_kernels::ptx::ATTENTION_MMA_HEADS, [64, 128]);
/// ```
pub const ATTENTION_MMA_HEADS: [usize; 2] = [64, 128];

/// How the tensor-core entry splits its work at one head dim: warps a
/// block, 16-row tiles of queries a warp (the last `qshared` of them
/// read their `Q` fragments from shared memory, the others keep them in
/// registers), keys a tile of `K` and `V` in shared memory and keys a
/// step of `S = Q K^T` (a part of the tile).
struct MmaShape {
    warps: usize,
    mtiles: usize,
    qshared: usize,
    tile: usize,
    chunk: usize,
}

/// At head dim 64, eight warps of 16 rows and whole 64-key tiles; at 128,
/// four warps of 32 rows (as FlashAttention-2 takes at that head dim):
/// each fragment of `K` and `V` read from shared memory feeds both of the
/// warp's row tiles, halving that traffic per product. Registers do not
/// hold both tiles' `Q` next to their `O` (`ptxas -v` at sm_90: about
/// 900 bytes spilled with `Q` in registers, 250 with one tile's `Q` in
/// shared memory, none with both), so `Q` is read from shared memory, and
/// the tiles of `K` and `V` are 32 keys so that `Q`, `K` and `V` fit the
/// 48 KiB of static shared memory.
const fn mma_shape(d: usize) -> MmaShape {
    if d > 64 {
        MmaShape {
            warps: 4,
            mtiles: 2,
            qshared: 2,
            tile: 32,
            chunk: 32,
        }
    } else {
        MmaShape {
            warps: WARPS,
            mtiles: 1,
            qshared: 0,
            tile: 64,
            chunk: 64,
        }
    }
}

/// Query rows a block of the tensor-core entry handles at head dim `d`:
/// eight warps of 16 rows at head dim 64, four warps of 32 rows at 128.
/// Its block has [`attention_mma_threads`]`(d)` threads.
///
/// ```
/// use tensorfn_kernels::ptx::attention_mma_rows;
/// assert_eq!(attention_mma_rows(64), 128);
/// assert_eq!(attention_mma_rows(128), 128);
/// ```
pub const fn attention_mma_rows(d: usize) -> usize {
    let s = mma_shape(d);
    16 * s.mtiles * s.warps
}

/// Threads a block of the tensor-core entry takes at head dim `d`.
///
/// ```
/// use tensorfn_kernels::ptx::attention_mma_threads;
/// assert_eq!(attention_mma_threads(64), 256);
/// assert_eq!(attention_mma_threads(128), 128);
/// ```
pub const fn attention_mma_threads(d: usize) -> usize {
    32 * mma_shape(d).warps
}

/// The parameters of the tensor-core entry, in order; each is 64 bits
/// (`p_scale` is an f64).
/// (`p_b0`, `p_nh`, the inner batch strides `p_*h`, the output's
/// strides and the group `p_g` as in [`PARAMS`].)
/// `p_lse`, when not 0, is the address of the rows' log-sum-exps (`[B,
/// L]` f32, as the f32 entry's `p_lse`), which a backward reads.
pub(crate) const MMA_PARAMS: [&str; 24] = [
    "p_out", "p_q", "p_k", "p_v", "p_l", "p_s", "p_qb", "p_qr", "p_kb", "p_kr", "p_vb", "p_vr",
    "p_causal", "p_scale", "p_b0", "p_nh", "p_qh", "p_kh", "p_vh", "p_ob", "p_oh", "p_or", "p_g",
    "p_lse",
];

/// The tensor-core entry `name` (sm_80 and newer) over `dtype` (f16 or
/// bf16) with head dim `d` (64 or 128, for both the queries and the
/// values), no mask, in the manner of FlashAttention-2: a block of
/// warps owns [`attention_mma_rows`]`(d)` query rows, in tiles of 16 rows
/// (one or two a warp, see [`mma_shape`]) whose `Q` fragments stay in
/// registers. The block walks the keys in tiles (64 keys): each
/// tile of `K` and `V` is copied into shared memory with 16-byte
/// `cp.async` (rows swizzled: chunk `c` of row `r` at `c ^ (r & 7)`, so
/// `ldmatrix` reads without bank conflicts), `V`'s copy overlapping `S =
/// Q K^T` and the next `K`'s overlapping the softmax and `O += P V`. Both
/// products are `mma.sync.m16n8k16` with f32 accumulation, their `B`
/// fragments read with `ldmatrix` (`.trans` for `V`) and used by every
/// row tile of the warp. The online softmax runs on the fragments of `S`
/// in f32 with `ex2.approx.ftz` on `S * scale * log2(e)`; `P` is rounded
/// to `dtype` in registers and is the `A` operand of `P V`. Masks (the
/// keys' end, the causal diagonal) are applied only on the steps that
/// need them, and under `causal` a warp skips the keys past its rows and
/// blocks take the longest rows first. The output is normalised once and
/// stored through shared memory with 16-byte stores. With `p_lse`, lane
/// 0 of each quad also writes its two rows' log-sum-exps, `ln 2 (m scale
/// log2(e) + log2(l))` from the running max and sum (`-inf` for a row
/// without keys), so that a backward needs no second forward.
pub(crate) fn attention_mma_entry(name: &str, dtype: DTypeKind, d: usize) -> String {
    let ht = half_type(dtype);
    let (neg_inf, zero, one) = ("0fFF800000", "0f00000000", "0f3F800000");
    let MmaShape {
        mtiles,
        qshared,
        tile,
        chunk,
        ..
    } = mma_shape(d);
    // Row tiles a warp keeps `Q` of in registers.
    let qreg = mtiles - qshared;
    let rows = attention_mma_rows(d);
    let threads = attention_mma_threads(d);
    // Rows a warp owns.
    let wrows = 16 * mtiles;
    // Bytes of a row of 16-bit elements, its 16-byte chunks, the rows one
    // pass of the block's copies covers, the bytes of a tile.
    let row_bytes = d * 2;
    let chunks = d / 8;
    let pass_rows = threads / chunks;
    let passes = tile / pass_rows;
    let tile_bytes = tile * row_bytes;
    // The row tiles whose `Q` is read from shared memory, after the tiles
    // of `K` and `V`: `qshared` tiles of 16 rows a warp.
    let wq_bytes = qshared * 16 * row_bytes;
    let q_bytes = threads / 32 * wq_bytes;
    let mut body = Body::for_target(crate::target::Target::Sm80);
    // K's tile, V's, then the warps' shared `Q` rows, contiguous: at the
    // end the space holds the block's output rows.
    body.raw(format!(
        ".shared .align 128 .b8 att_kv[{}];",
        (2 * tile_bytes + q_bytes).max(rows * row_bytes)
    ));
    let p = load_params(&mut body, &MMA_PARAMS, &["p_out", "p_q", "p_k", "p_v"]);
    let sl2 = scale_log2(&mut body);
    let Lanes {
        tid,
        lane,
        warp,
        g32,
        t32,
        g,
        tg,
    } = lanes(&mut body);
    // Blocks in reverse order: under `causal` the last rows have the most
    // keys, and they start first.
    let (cta, ncta, by) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("mov.u32 {cta}, %ctaid.x"));
    body.op(format!("mov.u32 {ncta}, %nctaid.x"));
    body.op(format!("sub.u32 {cta}, {ncta}, {cta}"));
    body.op(format!("sub.u32 {cta}, {cta}, 1"));
    body.op(format!("mov.u32 {by}, %ctaid.y"));
    let b = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {b}, {by}"));
    body.op(format!("add.u64 {b}, {b}, {}", p["p_b0"]));
    let boff = batch_offsets(&mut body, &b, &p, &["q", "k", "v", "o"]);
    // The block's first row R0, the warp's r0; the thread's rows of row
    // tile m are r0 + 16 m + g (`ra[m]`) and 8 more (`rb[m]`).
    let big_r0 = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {big_r0}, {cta}, {rows}"));
    let r0 = body.reg(Class::B64);
    let wr = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {wr}, {warp}, {wrows}"));
    body.op(format!("add.u64 {r0}, {big_r0}, {wr}"));
    let (ra, rb): (Vec<String>, Vec<String>) = (0..mtiles)
        .map(|m| {
            let (a, b) = (body.reg(Class::B64), body.reg(Class::B64));
            body.op(format!("add.u64 {a}, {r0}, {g}"));
            if m > 0 {
                body.op(format!("add.u64 {a}, {a}, {}", 16 * m));
            }
            body.op(format!("add.u64 {b}, {a}, 8"));
            (a, b)
        })
        .unzip();
    let lmax = body.reg(Class::B64);
    body.op(format!("sub.u64 {lmax}, {}, 1", p["p_l"]));
    let KeyRange {
        causal,
        ntiles,
        wend,
    } = key_range(&mut body, &p, (&big_r0, rows), (&r0, wrows), tile);
    // Byte address of element (row, 0) of an operand whose batch starts
    // `boff` elements in: base + (boff + row*rs) * 2.
    let row_addr = |body: &mut Body, base: &str, boff: &str, row: &str, rs: &str| {
        let off = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {off}, {row}, {rs}, {boff}"));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {off}, 2, {base}"));
        a
    };
    let tg4 = body.reg(Class::B64);
    body.op(format!("shl.b64 {tg4}, {tg}, 2"));
    // Q as A fragments of the tiles held in registers, `qa[m][kc]`: rows
    // ra[m], rb[m] (clamped below L), columns kc*16 + tg*2 (+8).
    let mut qa: Vec<Vec<[String; 4]>> = Vec::new();
    for m in 0..qreg {
        let mut addr = Vec::new();
        for r in [&ra[m], &rb[m]] {
            let rc = body.reg(Class::B64);
            body.op(format!("min.u64 {rc}, {r}, {lmax}"));
            let a = row_addr(&mut body, &p["p_q"], &boff["q"], &rc, &p["p_qr"]);
            body.op(format!("add.u64 {a}, {a}, {tg4}"));
            addr.push(a);
        }
        let mut frags = Vec::new();
        for kc in 0..d / 16 {
            let regs = [0, 1, 2, 3].map(|_| body.reg(Class::B32));
            for (x, (row, col)) in [(0, 0), (1, 0), (0, 8), (1, 8)].into_iter().enumerate() {
                let off = (kc * 16 + col) * 2;
                body.op(format!(
                    "ld.global.nc.b32 {}, [{}+{off}]",
                    regs[x], addr[row]
                ));
            }
            frags.push(regs);
        }
        qa.push(frags);
    }
    // A negative scale is folded into Q (its sign bits flipped, exactly)
    // so that the scale is positive and the max of the raw scores is the
    // max of the scaled ones; a zero scale becomes 2^-126, which leaves
    // every finite score's exponential at 1. (Fragments read from shared
    // memory flip theirs as they are read.)
    let neg = body.reg(Class::Pred);
    body.op(format!("setp.lt.f32 {neg}, {sl2}, {zero}"));
    {
        for r in qa.iter().flatten().flatten() {
            body.op(format!("@{neg} xor.b32 {r}, {r}, 0x80008000"));
        }
        body.op(format!("abs.f32 {sl2}, {sl2}"));
        let z = body.reg(Class::Pred);
        body.op(format!("setp.eq.f32 {z}, {sl2}, {zero}"));
        body.op(format!("@{z} mov.f32 {sl2}, 0f00800000"));
    }
    let zf = body.reg(Class::F32);
    body.op(format!("mov.f32 {zf}, {zero}"));
    let zq = [zf.clone(), zf.clone(), zf.clone(), zf];
    // Shared addresses: the tiles, the thread's copy slot (row tid /
    // chunks + pass * pass_rows, chunk tid % chunks, swizzled).
    let (sk, sv) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("mov.u32 {sk}, att_kv"));
    body.op(format!("add.u32 {sv}, {sk}, {tile_bytes}"));
    let (crow, cchunk) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!(
        "shr.u32 {crow}, {tid}, {}",
        chunks.trailing_zeros()
    ));
    body.op(format!("and.b32 {cchunk}, {tid}, {}", chunks - 1));
    let swz = |body: &mut Body, row: &str, chunk: &str| swizzle(body, row, chunk, row_bytes);
    let slot = swz(&mut body, &crow, &cchunk);
    let (kslot, vslot) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("add.u32 {kslot}, {sk}, {slot}"));
    body.op(format!("add.u32 {vslot}, {sv}, {slot}"));
    // The global sources: batch b's rows, plus the thread's chunk.
    let (crow64, cbytes) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("cvt.u64.u32 {crow64}, {crow}"));
    body.op(format!("cvt.u64.u32 {cbytes}, {cchunk}"));
    body.op(format!("shl.b64 {cbytes}, {cbytes}, 4"));
    let zero64 = body.reg(Class::B64);
    body.op(format!("mov.u64 {zero64}, 0"));
    let gk = row_addr(&mut body, &p["p_k"], &boff["k"], &zero64, &p["p_kr"]);
    body.op(format!("add.u64 {gk}, {gk}, {cbytes}"));
    let gv = row_addr(&mut body, &p["p_v"], &boff["v"], &zero64, &p["p_vr"]);
    body.op(format!("add.u64 {gv}, {gv}, {cbytes}"));
    let (kr2, vr2) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("shl.b64 {kr2}, {}, 1", p["p_kr"]));
    body.op(format!("shl.b64 {vr2}, {}, 1", p["p_vr"]));
    let smax = body.reg(Class::B64);
    body.op(format!("sub.u64 {smax}, {}, 1", p["p_s"]));
    // The thread's first source rows and the bytes between its passes.
    let (gk_row, gv_row) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("mad.lo.u64 {gk_row}, {crow64}, {kr2}, {gk}"));
    body.op(format!("mad.lo.u64 {gv_row}, {crow64}, {vr2}, {gv}"));
    let (kpass, vpass) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("mul.lo.u64 {kpass}, {kr2}, {pass_rows}"));
    body.op(format!("mul.lo.u64 {vpass}, {vr2}, {pass_rows}"));
    // Copies the tile of keys j0.. of one operand into shared memory: a
    // whole tile straight, the last one with rows past the keys
    // zero-filled (from a clamped address).
    let copy = |body: &mut Body,
                j0: &str,
                (src, src_row, rs2, pass): (&str, &str, &str, &str),
                dst: &str| {
        let (partial, copied) = (body.label("mma_partial"), body.label("mma_copied"));
        let end = body.reg(Class::B64);
        body.op(format!("add.u64 {end}, {j0}, {tile}"));
        let short = body.reg(Class::Pred);
        body.op(format!("setp.gt.u64 {short}, {end}, {}", p["p_s"]));
        body.op(format!("@{short} bra.uni {partial}"));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {j0}, {rs2}, {src_row}"));
        for ps in 0..passes {
            if ps > 0 {
                body.op(format!("add.u64 {a}, {a}, {pass}"));
            }
            body.op(format!(
                "cp.async.cg.shared.global [{dst}+{}], [{a}], 16",
                ps * pass_rows * row_bytes
            ));
        }
        body.op(format!("bra.uni {copied}"));
        body.place(&partial);
        for ps in 0..passes {
            let key = body.reg(Class::B64);
            body.op(format!("add.u64 {key}, {j0}, {crow64}"));
            if ps > 0 {
                body.op(format!("add.u64 {key}, {key}, {}", ps * pass_rows));
            }
            let inside = body.reg(Class::Pred);
            body.op(format!("setp.lt.u64 {inside}, {key}, {}", p["p_s"]));
            body.op(format!("min.u64 {key}, {key}, {smax}"));
            let a = body.reg(Class::B64);
            body.op(format!("mad.lo.u64 {a}, {key}, {rs2}, {src}"));
            let n = body.reg(Class::B32);
            body.op(format!("selp.u32 {n}, 16, 0, {inside}"));
            body.op(format!(
                "cp.async.cg.shared.global [{dst}+{}], [{a}], 16, {n}",
                ps * pass_rows * row_bytes
            ));
        }
        body.place(&copied);
    };
    let kops = (gk.as_str(), gk_row.as_str(), kr2.as_str(), kpass.as_str());
    let vops = (gv.as_str(), gv_row.as_str(), vr2.as_str(), vpass.as_str());
    // ldmatrix addresses. K (B of Q K^T, x4 = chunks 4q..4q+3 of keys
    // nt*8 + (lane & 7)): lane gives row lane & 7 of matrix lane >> 3.
    let (l7, l3) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("and.b32 {l7}, {lane}, 7"));
    body.op(format!("shr.u32 {l3}, {lane}, 3"));
    let kaddr: Vec<String> = (0..d / 32)
        .map(|q| {
            let c = body.reg(Class::B32);
            body.op(format!("add.u32 {c}, {l3}, {}", 4 * q));
            let o = swz(&mut body, &l7, &c);
            body.op(format!("add.u32 {o}, {o}, {sk}"));
            o
        })
        .collect();
    // V (B of P V, x4.trans = keys +0..7 and +8..15 of chunk 2q, then of
    // chunk 2q+1): lane gives key (lane >> 3 & 1) * 8 + (lane & 7), chunk
    // 2q + (lane >> 4).
    let vaddr: Vec<String> = {
        let (vrow, vc) = (body.reg(Class::B32), body.reg(Class::B32));
        body.op(format!("and.b32 {vrow}, {l3}, 1"));
        body.op(format!("mad.lo.u32 {vrow}, {vrow}, 8, {l7}"));
        body.op(format!("shr.u32 {vc}, {lane}, 4"));
        (0..d / 16)
            .map(|q| {
                let c = body.reg(Class::B32);
                body.op(format!("add.u32 {c}, {vc}, {}", 2 * q));
                let o = swz(&mut body, &vrow, &c);
                body.op(format!("add.u32 {o}, {o}, {sv}"));
                o
            })
            .collect()
    };
    // Q of the tiles read from shared memory (A of Q K^T, x4 = rows +0..7
    // and +8..15 of chunk 2kc, then of chunk 2kc+1): lane gives row (lane
    // >> 3 & 1) * 8 + (lane & 7) at `qrow`, the swizzled chunk at `qx ^
    // 32 kc` bytes (the row's low bits are lane & 7 in every tile).
    let qw = body.reg(Class::B32);
    body.op(format!(
        "mad.lo.u32 {qw}, {warp}, {wq_bytes}, {}",
        2 * tile_bytes
    ));
    body.op(format!("add.u32 {qw}, {qw}, {sk}"));
    let (qrow, qx) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("and.b32 {qrow}, {l3}, 1"));
    body.op(format!("mad.lo.u32 {qrow}, {qrow}, 8, {l7}"));
    body.op(format!("mad.lo.u32 {qrow}, {qrow}, {row_bytes}, {qw}"));
    body.op(format!("shr.u32 {qx}, {lane}, 4"));
    body.op(format!("xor.b32 {qx}, {qx}, {l7}"));
    body.op(format!("shl.b32 {qx}, {qx}, 4"));
    // O as C fragments, `o[m][nt]` (8 columns a tile); the running max
    // and sum of each of the thread's rows, `ml[m][half]` (row ra[m] for
    // half 0, rb[m] for 1).
    let nv = d / 8;
    let o: Vec<Vec<[String; 4]>> = (0..mtiles)
        .map(|_| {
            (0..nv)
                .map(|_| [0, 1, 2, 3].map(|_| body.reg(Class::F32)))
                .collect()
        })
        .collect();
    for r in o.iter().flatten().flatten() {
        body.op(format!("mov.f32 {r}, {zero}"));
    }
    let ml: Vec<[(String, String); 2]> = (0..mtiles)
        .map(|_| {
            [0, 1].map(|_| {
                let (m, l) = (body.reg(Class::F32), body.reg(Class::F32));
                body.op(format!("mov.f32 {m}, {neg_inf}"));
                body.op(format!("mov.f32 {l}, {zero}"));
                (m, l)
            })
        })
        .collect();
    let (j0, jt) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("mov.u64 {j0}, 0"));
    body.op(format!("mov.u64 {jt}, 0"));
    let (lp, done) = (body.label("mma_keys"), body.label("mma_keys_done"));
    let none = body.reg(Class::Pred);
    body.op(format!("setp.eq.u64 {none}, {ntiles}, 0"));
    body.op(format!("@{none} bra.uni {done}"));
    // The warp copies the rows of its shared `Q` tiles (rows r0 + 16 qreg
    // on, clamped below L; lane: chunk lane % chunks of rows lane /
    // chunks + k * 32 / chunks), waited for with K(0).
    if qshared > 0 {
        let (lrow, lc) = (body.reg(Class::B32), body.reg(Class::B32));
        body.op(format!(
            "shr.u32 {lrow}, {lane}, {}",
            chunks.trailing_zeros()
        ));
        body.op(format!("and.b32 {lc}, {lane}, {}", chunks - 1));
        let lc16 = body.reg(Class::B64);
        body.op(format!("cvt.u64.u32 {lc16}, {lc}"));
        body.op(format!("shl.b64 {lc16}, {lc16}, 4"));
        let step = 32 / chunks;
        for it in 0..16 * qshared / step {
            let row = body.reg(Class::B32);
            body.op(format!("add.u32 {row}, {lrow}, {}", it * step));
            let sa = swz(&mut body, &row, &lc);
            body.op(format!("add.u32 {sa}, {sa}, {qw}"));
            let grow = body.reg(Class::B64);
            body.op(format!("cvt.u64.u32 {grow}, {row}"));
            body.op(format!("add.u64 {grow}, {grow}, {r0}"));
            body.op(format!("add.u64 {grow}, {grow}, {}", 16 * qreg));
            body.op(format!("min.u64 {grow}, {grow}, {lmax}"));
            let ga = row_addr(&mut body, &p["p_q"], &boff["q"], &grow, &p["p_qr"]);
            body.op(format!("add.u64 {ga}, {ga}, {lc16}"));
            body.op(format!("cp.async.cg.shared.global [{sa}], [{ga}], 16"));
        }
    }
    copy(&mut body, &j0, kops, &kslot);
    body.op("cp.async.commit_group");
    body.place(&lp);
    // K(t) arrived everywhere; every warp is past P V(t - 1).
    body.op("cp.async.wait_group 0");
    body.op("bar.sync 0");
    copy(&mut body, &j0, vops, &vslot);
    body.op("cp.async.commit_group");
    let steps = tile / chunk;
    for c in 0..steps {
        let last = c + 1 == steps;
        // The step's keys jc..jc + chunk: this warp's part of the tile?
        // Any keys past the end or the diagonal?
        let jc = body.reg(Class::B64);
        body.op(format!("add.u64 {jc}, {j0}, {}", c * chunk));
        let skip = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {skip}, {jc}, {wend}"));
        let jlast = body.reg(Class::B64);
        body.op(format!("add.u64 {jlast}, {jc}, {chunk}"));
        let masked = body.reg(Class::Pred);
        body.op(format!("setp.gt.u64 {masked}, {jlast}, {}", p["p_s"]));
        let diag = body.reg(Class::Pred);
        body.op(format!("add.u64 {jlast}, {jc}, {}", chunk - 1));
        body.op(format!("setp.gt.u64 {diag}, {jlast}, {r0}"));
        body.op(format!("and.pred {diag}, {diag}, {causal}"));
        body.op(format!("or.pred {masked}, {masked}, {diag}"));
        // S = Q K^T for the step's tiles of 8 keys, `s[m][nt]`.
        let tiles8 = chunk / 8;
        let s: Vec<Vec<[String; 4]>> = (0..mtiles)
            .map(|_| {
                (0..tiles8)
                    .map(|_| [0, 1, 2, 3].map(|_| body.reg(Class::F32)))
                    .collect()
            })
            .collect();
        let after_qk = body.label("mma_after_qk");
        body.op(format!("@{skip} bra.uni {after_qk}"));
        for (q, ka) in kaddr.iter().enumerate() {
            // The row tiles' Q fragments of columns 32q..32q+31, `qf[m]`.
            let qf: Vec<[[String; 4]; 2]> = (0..mtiles)
                .map(|m| {
                    if m < qreg {
                        return [qa[m][2 * q].clone(), qa[m][2 * q + 1].clone()];
                    }
                    [2 * q, 2 * q + 1].map(|kc| {
                        let a = body.reg(Class::B32);
                        body.op(format!("xor.b32 {a}, {qx}, {}", 32 * kc));
                        body.op(format!("add.u32 {a}, {a}, {qrow}"));
                        let f = ldmatrix_x4(&mut body, false, &a, (m - qreg) * 16 * row_bytes);
                        for r in &f {
                            body.op(format!("@{neg} xor.b32 {r}, {r}, 0x80008000"));
                        }
                        f
                    })
                })
                .collect();
            for nt in 0..tiles8 {
                let bf = ldmatrix_x4(&mut body, false, ka, (c * chunk + nt * 8) * row_bytes);
                for (sm, [qa0, qa1]) in s.iter().zip(&qf) {
                    let st = &sm[nt];
                    let from = if q == 0 { &zq } else { st };
                    mma_from(&mut body, ht, st, qa0, [&bf[0], &bf[1]], from);
                    mma(&mut body, ht, st, qa1, [&bf[2], &bf[3]]);
                }
            }
        }
        body.place(&after_qk);
        if last {
            // Every warp is past K(t): the next tile's copy may start.
            body.op("bar.sync 0");
            body.op(format!("add.u64 {jt}, {jt}, 1"));
            body.op(format!("add.u64 {j0}, {j0}, {tile}"));
            let end = body.reg(Class::Pred);
            body.op(format!("setp.ge.u64 {end}, {jt}, {ntiles}"));
            let no_copy = body.label("mma_no_copy");
            body.op(format!("@{end} bra.uni {no_copy}"));
            copy(&mut body, &j0, kops, &kslot);
            body.place(&no_copy);
            body.op("cp.async.commit_group");
        }
        let after_sm = body.label("mma_after_softmax");
        body.op(format!("@{skip} bra.uni {after_sm}"));
        // -inf past the keys and, under `causal`, past the row (only on the
        // steps that reach either).
        {
            let unmasked = body.label("mma_unmasked");
            body.op(format!("@!{masked} bra.uni {unmasked}"));
            let col0 = body.reg(Class::B64);
            body.op(format!("shl.b64 {col0}, {tg}, 1"));
            body.op(format!("add.u64 {col0}, {col0}, {jc}"));
            for m in 0..mtiles {
                for (nt, st) in s[m].iter().enumerate() {
                    for (x, r) in st.iter().enumerate() {
                        let key = body.reg(Class::B64);
                        body.op(format!("add.u64 {key}, {col0}, {}", nt * 8 + (x & 1)));
                        let (out, late) = (body.reg(Class::Pred), body.reg(Class::Pred));
                        body.op(format!("setp.ge.u64 {out}, {key}, {}", p["p_s"]));
                        let row = if x < 2 { &ra[m] } else { &rb[m] };
                        body.op(format!("setp.gt.u64 {late}, {key}, {row}"));
                        body.op(format!("and.pred {late}, {late}, {causal}"));
                        body.op(format!("or.pred {out}, {out}, {late}"));
                        body.op(format!("@{out} mov.f32 {r}, {neg_inf}"));
                    }
                }
            }
            body.place(&unmasked);
        }
        // The rows' new max (over the quad that shares a row), the rescale
        // by 2^(m_old - m_new), and P = 2^(S - m) (0 where S is -inf).
        let mut alphas = Vec::new();
        for m in 0..mtiles {
            let mut pair = Vec::new();
            for (half, (mx_old, l)) in ml[m].iter().enumerate() {
                let mx = body.reg(Class::F32);
                body.op(format!("mov.f32 {mx}, {mx_old}"));
                for st in &s[m] {
                    for x in [2 * half, 2 * half + 1] {
                        body.op(format!("max.f32 {mx}, {mx}, {}", st[x]));
                    }
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
                for st in &s[m] {
                    for x in [2 * half, 2 * half + 1] {
                        let r = &st[x];
                        body.op(format!("fma.rn.f32 {r}, {r}, {sl2}, {mu}"));
                        body.op(format!("ex2.approx.ftz.f32 {r}, {r}"));
                        body.op(format!("add.rn.f32 {l}, {l}, {r}"));
                    }
                }
                pair.push(alpha);
            }
            alphas.push(pair);
        }
        // O is rescaled unless no row's max grew anywhere in the warp.
        {
            let kept = body.reg(Class::Pred);
            body.op(format!("setp.eq.f32 {kept}, {}, {one}", alphas[0][0]));
            for a in alphas.iter().flatten().skip(1) {
                let k = body.reg(Class::Pred);
                body.op(format!("setp.eq.f32 {k}, {a}, {one}"));
                body.op(format!("and.pred {kept}, {kept}, {k}"));
            }
            body.op(format!("vote.sync.all.pred {kept}, {kept}, -1"));
            let no_rescale = body.label("mma_no_rescale");
            body.op(format!("@{kept} bra.uni {no_rescale}"));
            for (m, om) in o.iter().enumerate() {
                for t in om {
                    for (x, r) in t.iter().enumerate() {
                        body.op(format!("mul.rn.f32 {r}, {r}, {}", alphas[m][x / 2]));
                    }
                }
            }
            body.place(&no_rescale);
        }
        body.place(&after_sm);
        if c == 0 {
            // V(t) arrived everywhere (K(t + 1) may still be on its way).
            body.op(format!("cp.async.wait_group {}", u32::from(last)));
            body.op("bar.sync 0");
        }
        let after_pv = body.label("mma_after_pv");
        body.op(format!("@{skip} bra.uni {after_pv}"));
        // P as A fragments (two tiles of S make one 16-key chunk), rounded
        // to the dtype in registers, `pa[m][kc]`.
        let pa: Vec<Vec<[String; 4]>> = s.iter().map(|sm| pack_a(&mut body, ht, sm)).collect();
        // O += P V.
        for kc in 0..chunk / 16 {
            for (q, va) in vaddr.iter().enumerate() {
                let bf = ldmatrix_x4(&mut body, true, va, (c * chunk + kc * 16) * row_bytes);
                for (om, pm) in o.iter().zip(&pa) {
                    mma(&mut body, ht, &om[2 * q], &pm[kc], [&bf[0], &bf[1]]);
                    mma(&mut body, ht, &om[2 * q + 1], &pm[kc], [&bf[2], &bf[3]]);
                }
            }
        }
        body.place(&after_pv);
    }
    body.op(format!("setp.lt.u64 {none}, {jt}, {ntiles}"));
    body.op(format!("@{none} bra.uni {lp}"));
    body.place(&done);
    // out = O / l (the quad's sum), 0 for a row without keys, rounded
    // into the warp's rows of shared memory (swizzled like the tiles),
    // then stored 16 bytes at a time.
    body.op("bar.sync 0");
    let wbase = body.reg(Class::B32);
    let tq4 = body.reg(Class::B32);
    body.op(format!("shl.b32 {tq4}, {t32}, 2"));
    body.op(format!(
        "mad.lo.u32 {wbase}, {warp}, {}, {sk}",
        wrows * row_bytes
    ));
    // The log-sum-exps: skipped without `p_lse` and on lanes 1-3 of a
    // quad (all four hold the row's sums); batch b's rows start at b L.
    let (no_lse, lse_base) = (body.reg(Class::Pred), body.reg(Class::B64));
    {
        let not_first = body.reg(Class::Pred);
        body.op(format!("setp.eq.u64 {no_lse}, {}, 0", p["p_lse"]));
        body.op(format!("setp.ne.u32 {not_first}, {t32}, 0"));
        body.op(format!("or.pred {no_lse}, {no_lse}, {not_first}"));
        let bl = body.reg(Class::B64);
        body.op(format!("mul.lo.u64 {bl}, {b}, {}", p["p_l"]));
        body.op(format!("cvta.to.global.u64 {lse_base}, {}", p["p_lse"]));
        body.op(format!("mad.lo.u64 {lse_base}, {bl}, 4, {lse_base}"));
    }
    for (m, om) in o.iter().enumerate() {
        for (half, (mx, l)) in ml[m].iter().enumerate() {
            for off in [1, 2] {
                let o2 = body.reg(Class::F32);
                body.op(format!("shfl.sync.bfly.b32 {o2}, {l}, {off}, 31, -1"));
                body.op(format!("add.rn.f32 {l}, {l}, {o2}"));
            }
            let inv = body.reg(Class::F32);
            body.op(format!("div.rn.f32 {inv}, {one}, {l}"));
            let empty = body.reg(Class::Pred);
            body.op(format!("setp.eq.f32 {empty}, {l}, {zero}"));
            body.op(format!("@{empty} mov.f32 {inv}, {zero}"));
            {
                // The loop's P are 2^(S sl2 - m sl2), with m sl2 rounded as
                // here, so log2 of their sum plus m sl2 is the log-sum-exp
                // in log2 units.
                let row = if half == 0 { &ra[m] } else { &rb[m] };
                let skip = body.reg(Class::Pred);
                body.op(format!("setp.ge.u64 {skip}, {row}, {}", p["p_l"]));
                body.op(format!("or.pred {skip}, {skip}, {no_lse}"));
                let (x, lg) = (body.reg(Class::F32), body.reg(Class::F32));
                body.op(format!("mul.rn.f32 {x}, {mx}, {sl2}"));
                body.op(format!("lg2.approx.f32 {lg}, {l}"));
                body.op(format!("add.rn.f32 {x}, {x}, {lg}"));
                body.op(format!(
                    "mul.rn.f32 {x}, {x}, 0f{:08X}",
                    std::f32::consts::LN_2.to_bits()
                ));
                body.op(format!("@{empty} mov.f32 {x}, {neg_inf}"));
                let a = body.reg(Class::B64);
                body.op(format!("mad.lo.u64 {a}, {row}, 4, {lse_base}"));
                body.op(format!("@!{skip} st.global.f32 [{a}], {x}"));
            }
            // Row 16 m + 8 half + g of the warp's rows: row & 7 = g.
            let srow = body.reg(Class::B32);
            body.op(format!("add.u32 {srow}, {g32}, {}", 16 * m + 8 * half));
            body.op(format!("mad.lo.u32 {srow}, {srow}, {row_bytes}, {wbase}"));
            body.op(format!("add.u32 {srow}, {srow}, {tq4}"));
            for (nt, t) in om.iter().enumerate() {
                let (x0, x1) = (body.reg(Class::F32), body.reg(Class::F32));
                body.op(format!("mul.rn.f32 {x0}, {}, {inv}", t[2 * half]));
                body.op(format!("mul.rn.f32 {x1}, {}, {inv}", t[2 * half + 1]));
                let packed = body.reg(Class::B32);
                body.op(format!("cvt.rn.{ht}x2.f32 {packed}, {x1}, {x0}"));
                // Chunk nt of the row at nt ^ g.
                let c = body.reg(Class::B32);
                body.op(format!("xor.b32 {c}, {g32}, {nt}"));
                body.op(format!("shl.b32 {c}, {c}, 4"));
                body.op(format!("add.u32 {c}, {c}, {srow}"));
                body.op(format!("st.shared.b32 [{c}], {packed}"));
            }
        }
    }
    body.op("bar.warp.sync -1");
    // Lane takes chunk lane % chunks of rows lane / chunks + k * 32 / chunks.
    let (orow, oc) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!(
        "shr.u32 {orow}, {lane}, {}",
        chunks.trailing_zeros()
    ));
    body.op(format!("and.b32 {oc}, {lane}, {}", chunks - 1));
    let step = 32 / chunks;
    for it in 0..wrows / step {
        let row = body.reg(Class::B32);
        body.op(format!("add.u32 {row}, {orow}, {}", it * step));
        let sa = swz(&mut body, &row, &oc);
        body.op(format!("add.u32 {sa}, {sa}, {wbase}"));
        let v = [0, 1, 2, 3].map(|_| body.reg(Class::B32));
        body.op(format!(
            "ld.shared.v4.b32 {{{}, {}, {}, {}}}, [{sa}]",
            v[0], v[1], v[2], v[3]
        ));
        let grow = body.reg(Class::B64);
        body.op(format!("cvt.u64.u32 {grow}, {row}"));
        body.op(format!("add.u64 {grow}, {grow}, {r0}"));
        let outside = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {outside}, {grow}, {}", p["p_l"]));
        let ga = body.reg(Class::B64);
        body.op(format!(
            "mad.lo.u64 {ga}, {grow}, {}, {}",
            p["p_or"], boff["o"]
        ));
        body.op(format!("mad.lo.u64 {ga}, {ga}, 2, {}", p["p_out"]));
        let oc64 = body.reg(Class::B64);
        body.op(format!("cvt.u64.u32 {oc64}, {oc}"));
        body.op(format!("mad.lo.u64 {ga}, {oc64}, 16, {ga}"));
        body.op(format!(
            "@!{outside} st.global.v4.b32 [{ga}], {{{}, {}, {}, {}}}",
            v[0], v[1], v[2], v[3]
        ));
    }
    body.op("ret");
    // Two blocks an SM at head dim 64 (at most 128 registers a thread).
    let bounds = if d == 64 { ".minnctapersm 2\n" } else { "" };
    format!(
        ".visible .entry {name}(\n{}\n)\n.maxntid {threads}, 1, 1\n{bounds}{{\n{}}}\n",
        entry_params(&MMA_PARAMS),
        body.finish()
    )
}
