//! 2-D pooling (`max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d`),
//! forward and backward, and seeded `dropout`.
//!
//! Pooling reads `[N, C, H, W]` through any strides (channels-last views
//! included) and follows `tensorfn_core::ops::pool`'s reference exactly:
//! the same windows, max's NaN rule (the last NaN of a window wins over
//! any number), sums in f64 in the same order, and one correctly rounded
//! conversion to the dtype (through f32 rounded to odd for f16/bf16), so
//! every dtype gives the CPU's bits.
//!
//! * `NAME_KIND(out, x, meta)`: one thread per output element (grid
//!   stride), `out` contiguous `[N, C, OH, OW]`;
//! * `NAME_KIND_backward(dx, x, g, meta)`: one thread per input element,
//!   gathering the outputs whose windows cover it (max: those whose first
//!   largest tap it is, recomputed from `x`): no atomics, the same bits
//!   every run; `dx` contiguous `[N, C, H, W]` (or channels-last, below).
//!
//! Threads walk the elements in `[N, C, H, W]` order, or channel-fastest
//! (`[N, H, W, C]`) when the `channels_last` word is set, so that on
//! channels-last inputs neighbouring threads read neighbouring channels;
//! each thread's arithmetic, hence the result, is the same either way.
//! Word 2 also writes `out` (`dx`) channels-last: thread `i` writes
//! element `i` of `[N, OH, OW, C]` (`[N, H, W, C]`).
//!
//! `KIND` is `max`, `avg` or `adaptive`; `meta` is [`POOL_META_WORDS`]
//! 64-bit words: `total, C, H, W, OH, OW`, `x`'s strides `(n, c, h, w)`,
//! `kernel_size (h, w)`, `stride`, `padding`, `dilation`,
//! `count_include_pad`, `divisor_override` (0: none), `g`'s strides,
//! `channels_last` (0: the `[N, C, H, W]` thread order; 1: channel
//! fastest; 2: channel fastest, a channels-last `out`).
//!
//! `dropout`'s entry `NAME(out, x, n, mixed_seed, cut, scale)` keeps
//! element `i` of the contiguous `x` when `bits(seed, i) >= cut`
//! (`tensorfn_core::ops::dropout`, with `mixed_seed = mix(seed)`) and
//! multiplies in f64, as the CPU does.

use super::body::{Body, Class};
use super::elementwise::grid_stride;
use super::inst::round_bf16;
use super::memory::{load, load_words, store, store_words};
use tensorfn_core::ops::pool::PoolKind;
use tensorfn_core::DTypeKind;

/// 64-bit words of a pooling entry's `meta` parameter.
pub const POOL_META_WORDS: usize = 25;

/// The entry-name suffix of a pooling kind.
pub(crate) fn kind_suffix(kind: PoolKind) -> &'static str {
    match kind {
        PoolKind::Max => "max",
        PoolKind::Avg => "avg",
        PoolKind::AdaptiveAvg => "adaptive",
    }
}

pub(super) fn global_ptr(body: &mut Body, p: &str) -> String {
    let r = body.reg(Class::B64);
    body.op(format!("ld.param.u64 {r}, [{p}]"));
    body.op(format!("cvta.to.global.u64 {r}, {r}"));
    r
}

pub(super) fn meta_word(body: &mut Body, i: usize) -> String {
    let r = body.reg(Class::B64);
    body.op(format!("ld.param.u64 {r}, [p_meta+{}]", 8 * i));
    r
}

/// `a op b` into a fresh 64-bit register.
pub(super) fn op64(body: &mut Body, op: &str, a: &str, b: &str) -> String {
    let r = body.reg(Class::B64);
    body.op(format!("{op} {r}, {a}, {b}"));
    r
}

/// `a / b` and `a % b` of non-negative 64-bit `a` and positive `b`: one
/// 32-bit division when both fit in 32 bits (the GPU divides 64-bit
/// integers in software, several times slower), else the 64-bit one.
pub(super) fn udivrem(body: &mut Body, a: &str, b: &str) -> (String, String) {
    let (q, r) = (body.reg(Class::B64), body.reg(Class::B64));
    let t = op64(body, "or.b64", a, b);
    body.op(format!("shr.u64 {t}, {t}, 32"));
    let fits = body.reg(Class::Pred);
    body.op(format!("setp.eq.u64 {fits}, {t}, 0"));
    let wide = body.label("div_wide");
    let done = body.label("div_done");
    body.op(format!("@!{fits} bra {wide}"));
    let (a32, b32, q32) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("cvt.u32.u64 {a32}, {a}"));
    body.op(format!("cvt.u32.u64 {b32}, {b}"));
    body.op(format!("div.u32 {q32}, {a32}, {b32}"));
    body.op(format!("cvt.u64.u32 {q}, {q32}"));
    body.op(format!("bra.uni {done}"));
    body.place(&wide);
    body.op(format!("div.u64 {q}, {a}, {b}"));
    body.place(&done);
    body.op(format!("mul.lo.u64 {r}, {q}, {b}"));
    body.op(format!("sub.u64 {r}, {a}, {r}"));
    (q, r)
}

/// `a / b` of non-negative `a` and positive `b` (see [`udivrem`]).
fn udiv(body: &mut Body, a: &str, b: &str) -> String {
    udivrem(body, a, b).0
}

/// The f64 `v` in the register form [`store`] takes for `dtype`, rounded
/// once: f32 directly; f16/bf16 through an f32 rounded to odd (toward
/// zero, the last bit set when inexact), so the second rounding is exact.
pub(super) fn from_f64(body: &mut Body, dtype: DTypeKind, v: &str) -> String {
    match dtype {
        DTypeKind::F64 => v.to_string(),
        DTypeKind::F32 => {
            let f = body.reg(Class::F32);
            body.op(format!("cvt.rn.f32.f64 {f}, {v}"));
            f
        }
        _ => {
            let z = body.reg(Class::F32);
            body.op(format!("cvt.rz.f32.f64 {z}, {v}"));
            let back = body.reg(Class::F64);
            body.op(format!("cvt.f64.f32 {back}, {z}"));
            let exact = body.reg(Class::Pred);
            body.op(format!("setp.equ.f64 {exact}, {back}, {v}"));
            let bits = body.reg(Class::B32);
            body.op(format!("mov.b32 {bits}, {z}"));
            let odd = body.reg(Class::B32);
            body.op(format!("or.b32 {odd}, {bits}, 1"));
            body.op(format!("selp.b32 {bits}, {bits}, {odd}, {exact}"));
            let f = body.reg(Class::F32);
            body.op(format!("mov.b32 {f}, {bits}"));
            if dtype == DTypeKind::BF16 {
                let r = body.reg(Class::F32);
                let last = round_bf16(body, &f, &r);
                body.op(last);
                r
            } else {
                f
            }
        }
    }
}

/// Loads a `dtype` element at `[addr]` as an f64.
pub(super) fn load_f64(body: &mut Body, dtype: DTypeKind, addr: &str) -> String {
    let v = load(body, dtype, addr, true);
    if dtype == DTypeKind::F64 {
        return v;
    }
    let d = body.reg(Class::F64);
    body.op(format!("cvt.f64.f32 {d}, {v}"));
    d
}

/// Per-axis options of a pooling: input length, kernel size, stride,
/// padding, dilation and output length (signed 64-bit registers).
struct Axis {
    n: String,
    k: String,
    s: String,
    pad: String,
    d: String,
    out: String,
}

/// Output position `o`'s taps along an axis, as `tensorfn_core`'s `taps`:
/// `(first, end, step, span)`, `span` the window's length with its padding
/// (clipped to the padded input; `avg_pool2d`'s divisor).
fn taps(body: &mut Body, kind: PoolKind, a: &Axis, o: &str) -> (String, String, String, String) {
    match kind {
        PoolKind::AdaptiveAvg => {
            let on = op64(body, "mul.lo.s64", o, &a.n);
            let start = udiv(body, &on, &a.out);
            let o1 = op64(body, "add.s64", o, "1");
            let e = op64(body, "mul.lo.s64", &o1, &a.n);
            let e = op64(body, "add.s64", &e, &a.out);
            let e = op64(body, "sub.s64", &e, "1");
            let end = udiv(body, &e, &a.out);
            let span = op64(body, "sub.s64", &end, &start);
            let one = body.reg(Class::B64);
            body.op(format!("mov.u64 {one}, 1"));
            (start, end, one, span)
        }
        PoolKind::Max => {
            let start = op64(body, "mul.lo.s64", o, &a.s);
            let start = op64(body, "sub.s64", &start, &a.pad);
            let k1 = op64(body, "sub.s64", &a.k, "1");
            let reach = body.reg(Class::B64);
            body.op(format!("mad.lo.s64 {reach}, {k1}, {}, {start}", a.d));
            let e = op64(body, "add.s64", &reach, "1");
            let end = op64(body, "min.s64", &e, &a.n);
            // The first tap inside the input: start + ceil(-start / d) * d.
            let neg = body.reg(Class::B64);
            body.op(format!("neg.s64 {neg}, {start}"));
            let neg = op64(body, "max.s64", &neg, "0");
            let up = op64(body, "add.s64", &neg, &a.d);
            let up = op64(body, "sub.s64", &up, "1");
            let steps = udiv(body, &up, &a.d);
            let first = body.reg(Class::B64);
            body.op(format!("mad.lo.s64 {first}, {steps}, {}, {start}", a.d));
            let end = op64(body, "max.s64", &end, &first);
            (first, end, a.d.clone(), a.k.clone())
        }
        PoolKind::Avg => {
            let start = op64(body, "mul.lo.s64", o, &a.s);
            let start = op64(body, "sub.s64", &start, &a.pad);
            let e = op64(body, "add.s64", &start, &a.k);
            let lim = op64(body, "add.s64", &a.n, &a.pad);
            let e = op64(body, "min.s64", &e, &lim);
            let span = op64(body, "sub.s64", &e, &start);
            let first = op64(body, "max.s64", &start, "0");
            let end = op64(body, "min.s64", &e, &a.n);
            let end = op64(body, "max.s64", &end, &first);
            let one = body.reg(Class::B64);
            body.op(format!("mov.u64 {one}, 1"));
            (first, end, one, span)
        }
    }
}

/// A window: taps `(first, end, step)` along the height and the width.
struct Window {
    h: (String, String, String),
    w: (String, String, String),
    span: (String, String),
}

fn window(body: &mut Body, kind: PoolKind, ah: &Axis, aw: &Axis, oh: &str, ow: &str) -> Window {
    let (h0, h1, hs, hp) = taps(body, kind, ah, oh);
    let (w0, w1, ws, wp) = taps(body, kind, aw, ow);
    Window {
        h: (h0, h1, hs),
        w: (w0, w1, ws),
        span: (hp, wp),
    }
}

/// A predicate: the window has no taps.
fn empty(body: &mut Body, win: &Window) -> String {
    let a = body.reg(Class::Pred);
    body.op(format!("setp.ge.s64 {a}, {}, {}", win.h.0, win.h.1));
    let b = body.reg(Class::Pred);
    body.op(format!("setp.ge.s64 {b}, {}, {}", win.w.0, win.w.1));
    body.op(format!("or.pred {a}, {a}, {b}"));
    a
}

/// The avg divisor of a window as an f64: `divisor_override`, else the
/// padded window's size (`count_include_pad`), else its taps.
fn divisor(body: &mut Body, kind: PoolKind, win: &Window, cip: &str, over: &str) -> String {
    let hn = op64(body, "sub.s64", &win.h.1, &win.h.0);
    let wn = op64(body, "sub.s64", &win.w.1, &win.w.0);
    let taps = op64(body, "mul.lo.s64", &hn, &wn);
    let count = if kind == PoolKind::Avg {
        let padded = op64(body, "mul.lo.s64", &win.span.0, &win.span.1);
        let p = body.reg(Class::Pred);
        body.op(format!("setp.ne.u64 {p}, {cip}, 0"));
        let c = body.reg(Class::B64);
        body.op(format!("selp.b64 {c}, {padded}, {taps}, {p}"));
        let q = body.reg(Class::Pred);
        body.op(format!("setp.ne.u64 {q}, {over}, 0"));
        body.op(format!("selp.b64 {c}, {over}, {c}, {q}"));
        c
    } else {
        taps
    };
    let d = body.reg(Class::F64);
    body.op(format!("cvt.rn.f64.s64 {d}, {count}"));
    d
}

/// Emits the loops over a window's taps; `tap(body, row, col)` is called
/// once to emit the loop body.
fn scan(body: &mut Body, win: &Window, tap: impl FnOnce(&mut Body, &str, &str)) {
    let r = body.reg(Class::B64);
    body.op(format!("mov.u64 {r}, {}", win.h.0));
    let rows = body.label("pool_rows");
    let rows_end = body.label("pool_rows_end");
    body.place(&rows);
    let p = body.reg(Class::Pred);
    body.op(format!("setp.ge.s64 {p}, {r}, {}", win.h.1));
    body.op(format!("@{p} bra {rows_end}"));
    let c = body.reg(Class::B64);
    body.op(format!("mov.u64 {c}, {}", win.w.0));
    let cols = body.label("pool_cols");
    let cols_end = body.label("pool_cols_end");
    body.place(&cols);
    let q = body.reg(Class::Pred);
    body.op(format!("setp.ge.s64 {q}, {c}, {}", win.w.1));
    body.op(format!("@{q} bra {cols_end}"));
    tap(body, &r, &c);
    body.op(format!("add.s64 {c}, {c}, {}", win.w.2));
    body.op(format!("bra.uni {cols}"));
    body.place(&cols_end);
    body.op(format!("add.s64 {r}, {r}, {}", win.h.2));
    body.op(format!("bra.uni {rows}"));
    body.place(&rows_end);
}

/// The address of `base + r * sr + c * sc` elements of `dtype` past `ptr`.
fn addr(body: &mut Body, dtype: DTypeKind, ptr: &str, base: &str, rc: [(&str, &str); 2]) -> String {
    let off = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.s64 {off}, {}, {}, {base}",
        rc[0].0, rc[0].1
    ));
    body.op(format!("mad.lo.s64 {off}, {}, {}, {off}", rc[1].0, rc[1].1));
    let a = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.s64 {a}, {off}, {}, {ptr}",
        dtype.size_bytes()
    ));
    a
}

/// The first largest tap of a non-empty window of `x` (a NaN wins, the
/// last one): its value (f64) and `(row, col)`.
#[allow(clippy::too_many_arguments)]
fn arg_max(
    body: &mut Body,
    dtype: DTypeKind,
    x: &str,
    base: &str,
    (sh, sw): (&str, &str),
    win: &Window,
) -> (String, String, String) {
    let top = body.reg(Class::F64);
    body.op(format!("mov.f64 {top}, 0dFFF0000000000000"));
    let (br, bc) = (body.reg(Class::B64), body.reg(Class::B64));
    body.op(format!("mov.u64 {br}, {}", win.h.0));
    body.op(format!("mov.u64 {bc}, {}", win.w.0));
    scan(body, win, |body, r, c| {
        let a = addr(body, dtype, x, base, [(r, sh), (c, sw)]);
        let v = load_f64(body, dtype, &a);
        let gt = body.reg(Class::Pred);
        body.op(format!("setp.gt.f64 {gt}, {v}, {top}"));
        let nan = body.reg(Class::Pred);
        body.op(format!("setp.nan.f64 {nan}, {v}, {v}"));
        body.op(format!("or.pred {gt}, {gt}, {nan}"));
        body.op(format!("selp.f64 {top}, {v}, {top}, {gt}"));
        body.op(format!("selp.b64 {br}, {r}, {br}, {gt}"));
        body.op(format!("selp.b64 {bc}, {c}, {bc}, {gt}"));
    });
    (top, br, bc)
}

fn pool_params(backward: bool) -> String {
    let mut p = vec![".param .u64 p_out", ".param .u64 p_x"];
    if backward {
        p.push(".param .u64 p_g");
    }
    let meta = format!(".param .align 8 .b8 p_meta[{}]", 8 * POOL_META_WORDS);
    let mut p: Vec<String> = p.into_iter().map(String::from).collect();
    p.push(meta);
    format!("(\n\t{}\n)", p.join(",\n\t"))
}

/// The grid-stride loop over `total` elements; `inner(body, index)` emits
/// one element's work.
pub(super) fn grid_loop(body: &mut Body, total: &str, inner: impl FnOnce(&mut Body, &str)) {
    let (first, stride) = grid_stride(body);
    let i = body.reg(Class::B64);
    body.op(format!("mov.u64 {i}, {first}"));
    let top = body.label("grid");
    let end = body.label("grid_end");
    body.place(&top);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {i}, {total}"));
    body.op(format!("@{done} bra {end}"));
    inner(body, &i);
    body.op(format!("add.u64 {i}, {i}, {stride}"));
    body.op(format!("bra.uni {top}"));
    body.place(&end);
}

/// `i`'s coordinates in `[N, C, A, B]` (row-major): `(n, c, a, b)`.
fn split4(body: &mut Body, i: &str, c: &str, a: &str, b: &str) -> [String; 4] {
    let (t, ib) = udivrem(body, i, b);
    let (t, ia) = udivrem(body, &t, a);
    let (n, ic) = udivrem(body, &t, c);
    [n, ic, ia, ib]
}

/// Thread `i`'s element of `[N, C, A, B]`, `(n, c, a, b)`, in the thread
/// order `cl` selects (non-zero: channel-fastest, `[N, A, B, C]`), and its
/// offset in the output: the contiguous `[N, C, A, B]` one, or `i` when
/// `cl` is 2 (a channels-last output, whose order the threads follow).
fn coords(body: &mut Body, i: &str, c: &str, a: &str, b: &str, cl: &str) -> ([String; 4], String) {
    let regs: [String; 4] = std::array::from_fn(|_| body.reg(Class::B64));
    let p = body.reg(Class::Pred);
    body.op(format!("setp.eq.u64 {p}, {cl}, 0"));
    let nchw = body.label("order_nchw");
    let done = body.label("order_done");
    body.op(format!("@{p} bra {nchw}"));
    let (t, ic) = udivrem(body, i, c);
    let (t, ib) = udivrem(body, &t, b);
    let (n, ia) = udivrem(body, &t, a);
    for (r, v) in regs.iter().zip([n, ic, ia, ib]) {
        body.op(format!("mov.u64 {r}, {v}"));
    }
    body.op(format!("bra.uni {done}"));
    body.place(&nchw);
    let split = split4(body, i, c, a, b);
    for (r, v) in regs.iter().zip(split) {
        body.op(format!("mov.u64 {r}, {v}"));
    }
    body.place(&done);
    let [n, ic, ia, ib] = &regs;
    let o = op64(body, "mul.lo.u64", n, c);
    body.op(format!("add.u64 {o}, {o}, {ic}"));
    body.op(format!("mad.lo.u64 {o}, {o}, {a}, {ia}"));
    body.op(format!("mad.lo.u64 {o}, {o}, {b}, {ib}"));
    let nhwc = body.reg(Class::Pred);
    body.op(format!("setp.eq.u64 {nhwc}, {cl}, 2"));
    body.op(format!("@{nhwc} mov.u64 {o}, {i}"));
    (regs, o)
}

/// The pooling entry `NAME_KIND` (forward) or `NAME_KIND_backward` over
/// `dtype`.
pub(crate) fn pool_entry(name: &str, dtype: DTypeKind, kind: PoolKind, backward: bool) -> String {
    let mut body = Body::new();
    let out = global_ptr(&mut body, "p_out");
    let x = global_ptr(&mut body, "p_x");
    let g = backward.then(|| global_ptr(&mut body, "p_g"));
    let m: Vec<String> = (0..POOL_META_WORDS)
        .map(|i| meta_word(&mut body, i))
        .collect();
    let (total, c, h, w, oh, ow) = (&m[0], &m[1], &m[2], &m[3], &m[4], &m[5]);
    let (sn, sc, sh, sw) = (&m[6], &m[7], &m[8], &m[9]);
    let ah = Axis {
        n: h.clone(),
        k: m[10].clone(),
        s: m[12].clone(),
        pad: m[14].clone(),
        d: m[16].clone(),
        out: oh.clone(),
    };
    let aw = Axis {
        n: w.clone(),
        k: m[11].clone(),
        s: m[13].clone(),
        pad: m[15].clone(),
        d: m[17].clone(),
        out: ow.clone(),
    };
    let (cip, over) = (&m[18], &m[19]);
    let (gn, gc, gh, gw) = (&m[20], &m[21], &m[22], &m[23]);
    let cl = &m[24];
    grid_loop(&mut body, total, |body, i| {
        if !backward {
            let ([n_, c_, oh_, ow_], o) = coords(body, i, c, oh, ow, cl);
            let base = op64(body, "mul.lo.s64", &n_, sn);
            body.op(format!("mad.lo.s64 {base}, {c_}, {sc}, {base}"));
            let win = window(body, kind, &ah, &aw, &oh_, &ow_);
            let result = if kind == PoolKind::Max {
                let e = empty(body, &win);
                let skip = body.label("pool_empty");
                let top = body.reg(Class::F64);
                body.op(format!("mov.f64 {top}, 0dFFF0000000000000"));
                body.op(format!("@{e} bra {skip}"));
                let (v, _, _) = arg_max(body, dtype, &x, &base, (sh, sw), &win);
                body.op(format!("mov.f64 {top}, {v}"));
                body.place(&skip);
                top
            } else {
                let acc = body.reg(Class::F64);
                body.op(format!("mov.f64 {acc}, 0d0000000000000000"));
                let e = empty(body, &win);
                let skip = body.label("pool_empty");
                body.op(format!("@{e} bra {skip}"));
                scan(body, &win, |body, r, cc| {
                    let a = addr(body, dtype, &x, &base, [(r, sh), (cc, sw)]);
                    let v = load_f64(body, dtype, &a);
                    body.op(format!("add.rn.f64 {acc}, {acc}, {v}"));
                });
                let d = divisor(body, kind, &win, cip, over);
                body.op(format!("div.rn.f64 {acc}, {acc}, {d}"));
                body.place(&skip);
                acc
            };
            let v = from_f64(body, dtype, &result);
            let a = body.reg(Class::B64);
            body.op(format!(
                "mad.lo.u64 {a}, {o}, {}, {out}",
                dtype.size_bytes()
            ));
            store(body, dtype, &a, &v);
        } else {
            let g = g.as_deref().expect("backward reads g");
            let ([n_, c_, ih, iw], o) = coords(body, i, c, h, w, cl);
            let base = op64(body, "mul.lo.s64", &n_, sn);
            body.op(format!("mad.lo.s64 {base}, {c_}, {sc}, {base}"));
            let gbase = op64(body, "mul.lo.s64", &n_, gn);
            body.op(format!("mad.lo.s64 {gbase}, {c_}, {gc}, {gbase}"));
            let (h_lo, h_hi) = candidates(body, kind, &ah, &ih);
            let (w_lo, w_hi) = candidates(body, kind, &aw, &iw);
            let acc = body.reg(Class::F64);
            body.op(format!("mov.f64 {acc}, 0d0000000000000000"));
            let outs = Window {
                h: (h_lo, h_hi, "1".to_string()),
                w: (w_lo, w_hi, "1".to_string()),
                span: (String::new(), String::new()),
            };
            scan(body, &outs, |body, o_h, o_w| {
                let win = window(body, kind, &ah, &aw, o_h, o_w);
                let skip = body.label("pool_skip");
                let e = empty(body, &win);
                body.op(format!("@{e} bra {skip}"));
                let hit = if kind == PoolKind::Max {
                    let (_, br, bc) = arg_max(body, dtype, &x, &base, (sh, sw), &win);
                    let p = body.reg(Class::Pred);
                    body.op(format!("setp.eq.s64 {p}, {br}, {ih}"));
                    let q = body.reg(Class::Pred);
                    body.op(format!("setp.eq.s64 {q}, {bc}, {iw}"));
                    body.op(format!("and.pred {p}, {p}, {q}"));
                    p
                } else {
                    let p = body.reg(Class::Pred);
                    let q = body.reg(Class::Pred);
                    body.op(format!("setp.ge.s64 {p}, {ih}, {}", win.h.0));
                    body.op(format!("setp.lt.s64 {q}, {ih}, {}", win.h.1));
                    body.op(format!("and.pred {p}, {p}, {q}"));
                    body.op(format!("setp.ge.s64 {q}, {iw}, {}", win.w.0));
                    body.op(format!("and.pred {p}, {p}, {q}"));
                    body.op(format!("setp.lt.s64 {q}, {iw}, {}", win.w.1));
                    body.op(format!("and.pred {p}, {p}, {q}"));
                    p
                };
                let miss = body.reg(Class::Pred);
                body.op(format!("not.pred {miss}, {hit}"));
                body.op(format!("@{miss} bra {skip}"));
                let a = addr(body, dtype, g, &gbase, [(o_h, gh), (o_w, gw)]);
                let gv = load_f64(body, dtype, &a);
                if kind == PoolKind::Max {
                    body.op(format!("add.rn.f64 {acc}, {acc}, {gv}"));
                } else {
                    let d = divisor(body, kind, &win, cip, over);
                    let share = body.reg(Class::F64);
                    body.op(format!("div.rn.f64 {share}, {gv}, {d}"));
                    body.op(format!("add.rn.f64 {acc}, {acc}, {share}"));
                }
                body.place(&skip);
            });
            let v = from_f64(body, dtype, &acc);
            let a = body.reg(Class::B64);
            body.op(format!(
                "mad.lo.u64 {a}, {o}, {}, {out}",
                dtype.size_bytes()
            ));
            store(body, dtype, &a, &v);
        }
    });
    body.op("ret");
    let suffix = kind_suffix(kind);
    let bwd = if backward { "_backward" } else { "" };
    format!(
        ".visible .entry {name}_{suffix}{bwd}{}\n{{\n{}}}\n",
        pool_params(backward),
        body.finish()
    )
}

/// Channels a thread of [`max_vec_entry`] takes: 16 bytes of `dtype`, for
/// the dtypes it is emitted for (`None`: f64, whose two lanes gain
/// nothing over the one-channel entry).
///
/// ```
/// use tensorfn_kernels::ptx::max_vec_width;
/// use tensorfn_kernels::DTypeKind;
/// assert_eq!(max_vec_width(DTypeKind::BF16), Some(8));
/// assert_eq!(max_vec_width(DTypeKind::F32), Some(4));
/// assert_eq!(max_vec_width(DTypeKind::F64), None);
/// ```
pub fn max_vec_width(dtype: DTypeKind) -> Option<usize> {
    match dtype {
        DTypeKind::F16 | DTypeKind::BF16 => Some(8),
        DTypeKind::F32 => Some(4),
        _ => None,
    }
}

/// The `max_pool2d` entry `NAME_max_vec(out, x, meta)` for channels-last
/// inputs whose channel stride is 1, as PyTorch's NHWC kernel runs it:
/// thread `i` takes the `w` channels (16 bytes, [`max_vec_width`]) of
/// vector `i` of the channels-last output, reading each tap of its window
/// with one 16-byte load. `meta` is the forward's, with word 0 the number
/// of vectors (`N * OH * OW * C / w`); the caller ensures that `C`, the
/// batch, row and column strides are multiples of `w` and both pointers
/// 16-byte aligned. Each lane compares in f32 (exact for these dtypes)
/// with the one-channel entry's rule (the first largest, the last NaN of a
/// window wins) and stores the chosen element's own bits, so the result
/// is the same.
pub(crate) fn max_vec_entry(name: &str, dtype: DTypeKind) -> Option<String> {
    let w = max_vec_width(dtype)?;
    let mut body = Body::new();
    let out = global_ptr(&mut body, "p_out");
    let x = global_ptr(&mut body, "p_x");
    let m: Vec<String> = (0..18).map(|i| meta_word(&mut body, i)).collect();
    let (total, c, oh, ow) = (&m[0], &m[1], &m[4], &m[5]);
    let (sn, sh, sw) = (&m[6], &m[8], &m[9]);
    let axis = |n: &String, k: usize| Axis {
        n: n.clone(),
        k: m[10 + k].clone(),
        s: m[12 + k].clone(),
        pad: m[14 + k].clone(),
        d: m[16 + k].clone(),
        out: [oh, ow][k].clone(),
    };
    let (ah, aw) = (axis(&m[2], 0), axis(&m[3], 1));
    let groups = op64(&mut body, "shr.u64", c, &w.trailing_zeros().to_string());
    let (lo_mask, neg_inf_bits) = match dtype {
        DTypeKind::F32 => (None, "0xFF800000"),
        DTypeKind::F16 => (Some("0xFFFF"), "0xFC00"),
        _ => (Some("0xFFFF"), "0xFF80"),
    };
    grid_loop(&mut body, total, |body, i| {
        let (pix, group) = udivrem(body, i, &groups);
        let (t, o_w) = udivrem(body, &pix, ow);
        let (n_, o_h) = udivrem(body, &t, oh);
        let base = op64(body, "mul.lo.s64", &n_, sn);
        let first = op64(body, "mul.lo.u64", &group, &w.to_string());
        body.op(format!("add.s64 {base}, {base}, {first}"));
        let win = window(body, PoolKind::Max, &ah, &aw, &o_h, &o_w);
        let best: Vec<(String, String)> = (0..w)
            .map(|_| {
                let (v, b) = (body.reg(Class::F32), body.reg(Class::B32));
                body.op(format!("mov.f32 {v}, 0fFF800000"));
                body.op(format!("mov.b32 {b}, {neg_inf_bits}"));
                (v, b)
            })
            .collect();
        scan(body, &win, |body, r, cc| {
            let a = addr(body, dtype, &x, &base, [(r, sh), (cc, sw)]);
            let words = load_words(body, 16, &a, true);
            // Each lane's bits (16 or 32) and its value in f32.
            let mut lanes = Vec::with_capacity(w);
            for wd in &words {
                let Some(lo_mask) = lo_mask else {
                    let v = body.reg(Class::F32);
                    body.op(format!("mov.b32 {v}, {wd}"));
                    lanes.push((v, wd.clone()));
                    continue;
                };
                let (lo, hi) = (body.reg(Class::B32), body.reg(Class::B32));
                body.op(format!("and.b32 {lo}, {wd}, {lo_mask}"));
                body.op(format!("shr.u32 {hi}, {wd}, 16"));
                for bits in [lo, hi] {
                    let v = body.reg(Class::F32);
                    if dtype == DTypeKind::F16 {
                        let h = body.reg(Class::B16);
                        body.op(format!("cvt.u16.u32 {h}, {bits}"));
                        body.op(format!("cvt.f32.f16 {v}, {h}"));
                    } else {
                        let t = body.reg(Class::B32);
                        body.op(format!("shl.b32 {t}, {bits}, 16"));
                        body.op(format!("mov.b32 {v}, {t}"));
                    }
                    lanes.push((v, bits));
                }
            }
            let (gt, nan) = (body.reg(Class::Pred), body.reg(Class::Pred));
            for ((v, bits), (bv, bb)) in lanes.iter().zip(&best) {
                body.op(format!("setp.gt.f32 {gt}, {v}, {bv}"));
                body.op(format!("setp.nan.f32 {nan}, {v}, {v}"));
                body.op(format!("or.pred {gt}, {gt}, {nan}"));
                body.op(format!("selp.f32 {bv}, {v}, {bv}, {gt}"));
                body.op(format!("selp.b32 {bb}, {bits}, {bb}, {gt}"));
            }
        });
        let words: Vec<String> = match lo_mask {
            None => best.iter().map(|(_, b)| b.clone()).collect(),
            Some(_) => best
                .chunks(2)
                .map(|pair| {
                    let wd = body.reg(Class::B32);
                    body.op(format!("shl.b32 {wd}, {}, 16", pair[1].1));
                    body.op(format!("or.b32 {wd}, {wd}, {}", pair[0].1));
                    wd
                })
                .collect(),
        };
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {i}, 16, {out}"));
        store_words(body, 16, &a, &words);
    });
    body.op("ret");
    Some(format!(
        ".visible .entry {name}_max_vec{}\n{{\n{}}}\n",
        pool_params(false),
        body.finish()
    ))
}

/// The outputs along an axis whose windows may cover input position `i`:
/// `[lo, hi)`, a superset the caller checks window by window.
fn candidates(body: &mut Body, kind: PoolKind, a: &Axis, i: &str) -> (String, String) {
    match kind {
        PoolKind::AdaptiveAvg => {
            // floor(i * out / n) ..= ceil((i + 1) * out / n) - 1.
            let lo = op64(body, "mul.lo.s64", i, &a.out);
            let lo = udiv(body, &lo, &a.n);
            let i1 = op64(body, "add.s64", i, "1");
            let hi = op64(body, "mul.lo.s64", &i1, &a.out);
            let hi = op64(body, "add.s64", &hi, &a.n);
            let hi = op64(body, "sub.s64", &hi, "1");
            let hi = udiv(body, &hi, &a.n);
            let hi = op64(body, "min.s64", &hi, &a.out);
            (lo, hi)
        }
        _ => {
            // o * s - pad <= i <= o * s - pad + (k - 1) * d.
            let k1 = op64(body, "sub.s64", &a.k, "1");
            let reach = op64(body, "mul.lo.s64", &k1, &a.d);
            let ip = op64(body, "add.s64", i, &a.pad);
            let num = op64(body, "sub.s64", &ip, &reach);
            let num = op64(body, "max.s64", &num, "0");
            let num = op64(body, "add.s64", &num, &a.s);
            let num = op64(body, "sub.s64", &num, "1");
            let lo = udiv(body, &num, &a.s);
            let hi = udiv(body, &ip, &a.s);
            let hi = op64(body, "add.s64", &hi, "1");
            let hi = op64(body, "min.s64", &hi, &a.out);
            (lo, hi)
        }
    }
}

/// `tensorfn_core::ops::dropout::mix` of `z` in place.
pub(super) fn mix(body: &mut Body, z: &str) {
    let t = body.reg(Class::B64);
    for (shift, mul) in [
        (30, Some(0xbf58_476d_1ce4_e5b9u64)),
        (27, Some(0x94d0_49bb_1331_11eb)),
        (31, None),
    ] {
        body.op(format!("shr.u64 {t}, {z}, {shift}"));
        body.op(format!("xor.b64 {z}, {z}, {t}"));
        if let Some(k) = mul {
            body.op(format!("mul.lo.u64 {z}, {z}, {}", k as i64));
        }
    }
}

/// The `dropout` entry `NAME(out, x, n, mixed_seed, cut, scale)` over
/// contiguous `dtype` elements.
pub(crate) fn dropout_entry(name: &str, dtype: DTypeKind) -> String {
    let mut body = Body::new();
    let out = global_ptr(&mut body, "p_out");
    let x = global_ptr(&mut body, "p_x");
    let param = |body: &mut Body, p: &str| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{p}]"));
        r
    };
    let n = param(&mut body, "p_n");
    let seed = param(&mut body, "p_seed");
    let cut = param(&mut body, "p_cut");
    let scale = body.reg(Class::F64);
    body.op(format!("ld.param.f64 {scale}, [p_scale]"));
    grid_loop(&mut body, &n, |body, i| {
        let z = body.reg(Class::B64);
        body.op(format!(
            "mul.lo.u64 {z}, {i}, {}",
            0x9e37_79b9_7f4a_7c15u64 as i64
        ));
        body.op(format!("add.u64 {z}, {z}, {seed}"));
        mix(body, &z);
        body.op(format!("shr.u64 {z}, {z}, 32"));
        let keep = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {keep}, {z}, {cut}"));
        let k = body.reg(Class::F64);
        body.op(format!("selp.f64 {k}, {scale}, 0d0000000000000000, {keep}"));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {i}, {}, {x}", dtype.size_bytes()));
        let v = load_f64(body, dtype, &a);
        body.op(format!("mul.rn.f64 {v}, {v}, {k}"));
        let v = from_f64(body, dtype, &v);
        let a = body.reg(Class::B64);
        body.op(format!(
            "mad.lo.u64 {a}, {i}, {}, {out}",
            dtype.size_bytes()
        ));
        store(body, dtype, &a, &v);
    });
    body.op("ret");
    let params = [
        ".param .u64 p_out",
        ".param .u64 p_x",
        ".param .u64 p_n",
        ".param .u64 p_seed",
        ".param .u64 p_cut",
        ".param .f64 p_scale",
    ];
    format!(
        ".visible .entry {name}(\n\t{}\n)\n{{\n{}}}\n",
        params.join(",\n\t"),
        body.finish()
    )
}
