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
pub(crate) const PARAMS: [&str; 21] = [
    "p_out", "p_q", "p_k", "p_v", "p_mask", "p_l", "p_s", "p_e", "p_ev", "p_qb", "p_qr", "p_kb",
    "p_kr", "p_vb", "p_vr", "p_mb", "p_mr", "p_mc", "p_mode", "p_causal", "p_scale",
];

fn params() -> String {
    let p: Vec<String> = PARAMS
        .iter()
        .map(|n| {
            let ty = if *n == "p_scale" { "f64" } else { "u64" };
            format!("\t.param .{ty} {n}")
        })
        .collect();
    format!("(\n{}\n)", p.join(",\n"))
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
    let mut body = Body::new();
    let mut p = std::collections::HashMap::new();
    for n in PARAMS {
        if n == "p_scale" {
            continue;
        }
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{n}]"));
        p.insert(n, r);
    }
    for n in ["p_out", "p_q", "p_k", "p_v", "p_mask"] {
        body.op(format!("cvta.to.global.u64 {0}, {0}", p[n]));
    }
    let scale = body.reg(class);
    if acc == Ty::F64 {
        body.op(format!("ld.param.f64 {scale}, [p_scale]"));
    } else {
        let s64 = body.reg(Class::F64);
        body.op(format!("ld.param.f64 {s64}, [p_scale]"));
        body.op(format!("cvt.rn.f32.f64 {scale}, {s64}"));
    }
    let end = body.label("att_end");
    // lane, warp, query row i, batch b.
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
    let i = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {i}, {cta}, {WARPS}"));
    let w64 = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {w64}, {warp32}"));
    body.op(format!("add.u64 {i}, {i}, {w64}"));
    let b = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {b}, {by}"));
    let past = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {past}, {i}, {}", p["p_l"]));
    body.op(format!("@{past} bra.uni {end}"));
    // The start of row `r` of batch `b` of an operand: base + (b * bs + r * rs) * bytes.
    let row_start = |body: &mut Body, base: &str, bs: &str, row: &str, rs: &str, bytes: usize| {
        let off = body.reg(Class::B64);
        body.op(format!("mul.lo.u64 {off}, {b}, {bs}"));
        body.op(format!("mad.lo.u64 {off}, {row}, {rs}, {off}"));
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
    let q_row = row_start(&mut body, &p["p_q"], &p["p_qb"], &i, &p["p_qr"], size);
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
    let k_row = row_start(&mut body, &p["p_k"], &p["p_kb"], &j, &p["p_kr"], size);
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
        let mrow = row_start(&mut body, &p["p_mask"], &p["p_mb"], &i, &p["p_mr"], 1);
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
            &p["p_mb"],
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
    let v_row = row_start(&mut body, &p["p_v"], &p["p_vb"], &j, &p["p_vr"], size);
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
    let orow = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {orow}, {b}, {}, {i}", p["p_l"]));
    body.op(format!("mul.lo.u64 {orow}, {orow}, {}", p["p_ev"]));
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

/// Head dims of the tensor-core attention entry.
///
/// ```
/// assert_eq!(tensorfn_kernels::ptx::ATTENTION_MMA_HEADS, [64, 128]);
/// ```
pub const ATTENTION_MMA_HEADS: [usize; 2] = [64, 128];

/// Query rows a block of the tensor-core entry handles: 16 per warp.
pub const ATTENTION_MMA_ROWS: usize = 16 * WARPS;

/// The parameters of the tensor-core entry, in order; each is 64 bits
/// (`p_scale` is an f64).
pub(crate) const MMA_PARAMS: [&str; 14] = [
    "p_out", "p_q", "p_k", "p_v", "p_l", "p_s", "p_qb", "p_qr", "p_kb", "p_kr", "p_vb", "p_vr",
    "p_causal", "p_scale",
];

/// Keys a step of the tensor-core entry takes.
const MMA_KEYS: usize = 64;

/// The tensor-core entry `name` (sm_80 and newer) over `dtype` (f16 or
/// bf16) with head dim `d` (64 or 128, for both the queries and the
/// values), no mask: each warp takes 16 query rows and walks the keys 64
/// at a time, `S = Q K^T` and `O += P V` with `mma.sync.m16n8k16` (f32
/// accumulation), the online softmax on the fragments of `S` in f32.
pub(crate) fn attention_mma_entry(name: &str, dtype: DTypeKind, d: usize) -> String {
    let ht = if dtype == DTypeKind::F16 {
        "f16"
    } else {
        "bf16"
    };
    let exp = {
        let mut b = Builder::new();
        let x = b.param(Ty::F32);
        let e = mathfn::exp(&mut b, x);
        b.finish(vec![e])
    };
    let (neg_inf, zero, one) = ("0fFF800000", "0f00000000", "0f3F800000");
    let mut body = Body::for_target(crate::target::Target::Sm80);
    let mut p = std::collections::HashMap::new();
    for n in MMA_PARAMS {
        if n == "p_scale" {
            continue;
        }
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{n}]"));
        p.insert(n, r);
    }
    for n in ["p_out", "p_q", "p_k", "p_v"] {
        body.op(format!("cvta.to.global.u64 {0}, {0}", p[n]));
    }
    let scale = body.reg(Class::F32);
    {
        let s64 = body.reg(Class::F64);
        body.op(format!("ld.param.f64 {s64}, [p_scale]"));
        body.op(format!("cvt.rn.f32.f64 {scale}, {s64}"));
    }
    let end = body.label("mma_end");
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
    let (cta, by) = (body.reg(Class::B32), body.reg(Class::B32));
    body.op(format!("mov.u32 {cta}, %ctaid.x"));
    body.op(format!("mov.u32 {by}, %ctaid.y"));
    let b = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {b}, {by}"));
    // The warp's first row r0, the thread's rows ra = r0 + g, rb = ra + 8.
    let r0 = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {r0}, {cta}, {ATTENTION_MMA_ROWS}"));
    let w16 = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {w16}, {warp}, 16"));
    body.op(format!("add.u64 {r0}, {r0}, {w16}"));
    let past = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {past}, {r0}, {}", p["p_l"]));
    body.op(format!("@{past} bra.uni {end}"));
    let (ra, rb) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("add.u64 {ra}, {r0}, {g}"));
    body.op(format!("add.u64 {rb}, {ra}, 8"));
    let lmax = body.reg(Class::B64);
    body.op(format!("sub.u64 {lmax}, {}, 1", p["p_l"]));
    // Byte address of element (row, 0) of batch b: base + (b*bs + row*rs) * 2.
    let row_addr = |body: &mut Body, base: &str, bs: &str, row: &str, rs: &str| {
        let off = body.reg(Class::B64);
        body.op(format!("mul.lo.u64 {off}, {b}, {bs}"));
        body.op(format!("mad.lo.u64 {off}, {row}, {rs}, {off}"));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {off}, 2, {base}"));
        a
    };
    let tg4 = body.reg(Class::B64);
    body.op(format!("shl.b64 {tg4}, {tg}, 2"));
    // Q as A fragments: rows ra, rb (clamped below L), columns kc*16 + tig*2 (+8).
    let mut qa: Vec<[String; 4]> = Vec::new();
    {
        let mut addr = Vec::new();
        for r in [&ra, &rb] {
            let rc = body.reg(Class::B64);
            body.op(format!("min.u64 {rc}, {r}, {lmax}"));
            let a = row_addr(&mut body, &p["p_q"], &p["p_qb"], &rc, &p["p_qr"]);
            body.op(format!("add.u64 {a}, {a}, {tg4}"));
            addr.push(a);
        }
        for kc in 0..d / 16 {
            let regs = [0, 1, 2, 3].map(|_| body.reg(Class::B32));
            for (x, (row, col)) in [(0, 0), (1, 0), (0, 8), (1, 8)].into_iter().enumerate() {
                let off = (kc * 16 + col) * 2;
                body.op(format!(
                    "ld.global.nc.b32 {}, [{}+{off}]",
                    regs[x], addr[row]
                ));
            }
            qa.push(regs);
        }
    }
    let nv = d / 8;
    let o: Vec<[String; 4]> = (0..nv)
        .map(|_| [0, 1, 2, 3].map(|_| body.reg(Class::F32)))
        .collect();
    for t in &o {
        for r in t {
            body.op(format!("mov.f32 {r}, {zero}"));
        }
    }
    let (ma, mb, la, lb) = (
        body.reg(Class::F32),
        body.reg(Class::F32),
        body.reg(Class::F32),
        body.reg(Class::F32),
    );
    body.op(format!("mov.f32 {ma}, {neg_inf}"));
    body.op(format!("mov.f32 {mb}, {neg_inf}"));
    body.op(format!("mov.f32 {la}, {zero}"));
    body.op(format!("mov.f32 {lb}, {zero}"));
    // Keys 0..kend: under `causal`, up to the warp's last row.
    let kend = body.reg(Class::B64);
    body.op(format!("mov.u64 {kend}, {}", p["p_s"]));
    let causal = body.reg(Class::Pred);
    body.op(format!("setp.ne.u64 {causal}, {}, 0", p["p_causal"]));
    let r16 = body.reg(Class::B64);
    body.op(format!("add.u64 {r16}, {r0}, 16"));
    body.op(format!("@{causal} min.u64 {kend}, {kend}, {r16}"));
    let smax = body.reg(Class::B64);
    body.op(format!("sub.u64 {smax}, {}, 1", p["p_s"]));
    let j0 = body.reg(Class::B64);
    body.op(format!("mov.u64 {j0}, 0"));
    let (lp, done) = (body.label("mma_keys"), body.label("mma_keys_done"));
    body.place(&lp);
    let fin = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {fin}, {j0}, {kend}"));
    body.op(format!("@{fin} bra.uni {done}"));
    // S = Q K^T for 8 tiles of 8 keys.
    let tiles = MMA_KEYS / 8;
    let s: Vec<[String; 4]> = (0..tiles)
        .map(|_| [0, 1, 2, 3].map(|_| body.reg(Class::F32)))
        .collect();
    for (nt, st) in s.iter().enumerate() {
        let key = body.reg(Class::B64);
        body.op(format!("add.u64 {key}, {j0}, {}", nt * 8));
        body.op(format!("add.u64 {key}, {key}, {g}"));
        body.op(format!("min.u64 {key}, {key}, {smax}"));
        let a = row_addr(&mut body, &p["p_k"], &p["p_kb"], &key, &p["p_kr"]);
        body.op(format!("add.u64 {a}, {a}, {tg4}"));
        for r in st {
            body.op(format!("mov.f32 {r}, {zero}"));
        }
        for (kc, q) in qa.iter().enumerate() {
            let (b0, b1) = (body.reg(Class::B32), body.reg(Class::B32));
            body.op(format!("ld.global.nc.b32 {b0}, [{a}+{}]", kc * 32));
            body.op(format!("ld.global.nc.b32 {b1}, [{a}+{}]", kc * 32 + 16));
            body.op(format!(
                "mma.sync.aligned.m16n8k16.row.col.f32.{ht}.{ht}.f32 {{{0}, {1}, {2}, {3}}}, {{{4}, {5}, {6}, {7}}}, {{{b0}, {b1}}}, {{{0}, {1}, {2}, {3}}}",
                st[0], st[1], st[2], st[3], q[0], q[1], q[2], q[3]
            ));
        }
    }
    // Scale; -inf past the keys and, under `causal`, past the row.
    let col0 = body.reg(Class::B64);
    body.op(format!("shl.b64 {col0}, {tg}, 1"));
    body.op(format!("add.u64 {col0}, {col0}, {j0}"));
    for (nt, st) in s.iter().enumerate() {
        for (x, r) in st.iter().enumerate() {
            body.op(format!("mul.rn.f32 {r}, {r}, {scale}"));
            let key = body.reg(Class::B64);
            body.op(format!("add.u64 {key}, {col0}, {}", nt * 8 + (x & 1)));
            let (out, late) = (body.reg(Class::Pred), body.reg(Class::Pred));
            body.op(format!("setp.ge.u64 {out}, {key}, {}", p["p_s"]));
            let row = if x < 2 { &ra } else { &rb };
            body.op(format!("setp.gt.u64 {late}, {key}, {row}"));
            body.op(format!("and.pred {late}, {late}, {causal}"));
            body.op(format!("or.pred {out}, {out}, {late}"));
            body.op(format!("@{out} mov.f32 {r}, {neg_inf}"));
        }
    }
    // The rows' new max (over the quad that shares a row) and the rescale.
    for (half, (m, l)) in [(&ma, &la), (&mb, &lb)].into_iter().enumerate() {
        let mx = body.reg(Class::F32);
        body.op(format!("mov.f32 {mx}, {m}"));
        for st in &s {
            for x in [2 * half, 2 * half + 1] {
                body.op(format!("max.f32 {mx}, {mx}, {}", st[x]));
            }
        }
        for off in [1, 2] {
            let o2 = body.reg(Class::F32);
            body.op(format!("shfl.sync.bfly.b32 {o2}, {mx}, {off}, 31, -1"));
            body.op(format!("max.f32 {mx}, {mx}, {o2}"));
        }
        let same = body.label("mma_same_max");
        let grew = body.reg(Class::Pred);
        body.op(format!("setp.neu.f32 {grew}, {mx}, {m}"));
        body.op(format!("@!{grew} bra.uni {same}"));
        let diff = body.reg(Class::F32);
        body.op(format!("sub.rn.f32 {diff}, {m}, {mx}"));
        let alpha = emit_program(&mut body, &exp, &[diff])[0].clone();
        body.op(format!("mul.rn.f32 {l}, {l}, {alpha}"));
        for t in &o {
            for x in [2 * half, 2 * half + 1] {
                body.op(format!("mul.rn.f32 {0}, {0}, {alpha}", t[x]));
            }
        }
        body.op(format!("mov.f32 {m}, {mx}"));
        body.place(&same);
        // p = exp(s - m), 0 where s is -inf; the thread's part of the sum.
        for st in &s {
            for x in [2 * half, 2 * half + 1] {
                let r = &st[x];
                let masked = body.reg(Class::Pred);
                body.op(format!("setp.eq.f32 {masked}, {r}, {neg_inf}"));
                let dlt = body.reg(Class::F32);
                body.op(format!("sub.rn.f32 {dlt}, {r}, {m}"));
                let e = emit_program(&mut body, &exp, &[dlt])[0].clone();
                body.op(format!("selp.f32 {r}, {zero}, {e}, {masked}"));
                body.op(format!("add.rn.f32 {l}, {l}, {r}"));
            }
        }
    }
    // P as A fragments (two tiles of S make one 16-key chunk).
    let pa: Vec<[String; 4]> = (0..MMA_KEYS / 16)
        .map(|kc| {
            let regs = [0, 1, 2, 3].map(|_| body.reg(Class::B32));
            let (t0, t1) = (&s[2 * kc], &s[2 * kc + 1]);
            for (x, (lo, hi)) in [
                (&t0[0], &t0[1]),
                (&t0[2], &t0[3]),
                (&t1[0], &t1[1]),
                (&t1[2], &t1[3]),
            ]
            .into_iter()
            .enumerate()
            {
                body.op(format!("cvt.rn.{ht}x2.f32 {}, {hi}, {lo}", regs[x]));
            }
            regs
        })
        .collect();
    // O += P V: B fragments of V (keys tig*2, +1, +8, +9 of each chunk,
    // column g of each tile), 0 past the keys.
    let mut vrow = Vec::new();
    for kc in 0..MMA_KEYS / 16 {
        for dk in [0, 1, 8, 9] {
            let key = body.reg(Class::B64);
            body.op(format!("add.u64 {key}, {col0}, {}", kc * 16 + dk));
            let inside = body.reg(Class::Pred);
            body.op(format!("setp.lt.u64 {inside}, {key}, {}", p["p_s"]));
            body.op(format!("min.u64 {key}, {key}, {smax}"));
            let a = row_addr(&mut body, &p["p_v"], &p["p_vb"], &key, &p["p_vr"]);
            let g2 = body.reg(Class::B64);
            body.op(format!("shl.b64 {g2}, {g}, 1"));
            body.op(format!("add.u64 {a}, {a}, {g2}"));
            vrow.push((a, inside));
        }
    }
    for (nt, t) in o.iter().enumerate() {
        for (kc, pk) in pa.iter().enumerate() {
            let h: Vec<String> = (0..4)
                .map(|x| {
                    let (a, inside) = &vrow[kc * 4 + x];
                    let r = body.reg(Class::B16);
                    body.op(format!("ld.global.nc.b16 {r}, [{a}+{}]", nt * 16));
                    body.op(format!("@!{inside} mov.b16 {r}, 0"));
                    r
                })
                .collect();
            let (b0, b1) = (body.reg(Class::B32), body.reg(Class::B32));
            body.op(format!("mov.b32 {b0}, {{{}, {}}}", h[0], h[1]));
            body.op(format!("mov.b32 {b1}, {{{}, {}}}", h[2], h[3]));
            body.op(format!(
                "mma.sync.aligned.m16n8k16.row.col.f32.{ht}.{ht}.f32 {{{0}, {1}, {2}, {3}}}, {{{4}, {5}, {6}, {7}}}, {{{b0}, {b1}}}, {{{0}, {1}, {2}, {3}}}",
                t[0], t[1], t[2], t[3], pk[0], pk[1], pk[2], pk[3]
            ));
        }
    }
    body.op(format!("add.u64 {j0}, {j0}, {MMA_KEYS}"));
    body.op(format!("bra.uni {lp}"));
    body.place(&done);
    // out = O / l (the quad's sum), 0 for a row without keys.
    for (half, (row, l)) in [(&ra, &la), (&rb, &lb)].into_iter().enumerate() {
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
        let skip = body.label("mma_no_row");
        let outside = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {outside}, {row}, {}", p["p_l"]));
        body.op(format!("@{outside} bra {skip}"));
        let orow = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {orow}, {b}, {}, {row}", p["p_l"]));
        body.op(format!("mul.lo.u64 {orow}, {orow}, {}", d * 2));
        body.op(format!("add.u64 {orow}, {orow}, {}", p["p_out"]));
        body.op(format!("add.u64 {orow}, {orow}, {tg4}"));
        for (nt, t) in o.iter().enumerate() {
            let (x0, x1) = (body.reg(Class::F32), body.reg(Class::F32));
            body.op(format!("mul.rn.f32 {x0}, {}, {inv}", t[2 * half]));
            body.op(format!("mul.rn.f32 {x1}, {}, {inv}", t[2 * half + 1]));
            let packed = body.reg(Class::B32);
            body.op(format!("cvt.rn.{ht}x2.f32 {packed}, {x1}, {x0}"));
            body.op(format!("st.global.b32 [{orow}+{}], {packed}", nt * 16));
        }
        body.place(&skip);
    }
    body.place(&end);
    body.op("ret");
    let params: Vec<String> = MMA_PARAMS
        .iter()
        .map(|n| {
            let ty = if *n == "p_scale" { "f64" } else { "u64" };
            format!("\t.param .{ty} {n}")
        })
        .collect();
    format!(
        ".visible .entry {name}(\n{}\n)\n{{\n{}}}\n",
        params.join(",\n"),
        body.finish()
    )
}
