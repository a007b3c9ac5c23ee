//! The column kernels of the built-in 2-D convolution (the GPU's path
//! where cuDNN is missing or declines a problem): the matrix products run
//! in cuBLAS, these move the data between images and columns.
//!
//! * `NAME_im2col(cols, x, meta)`: one thread per column element (grid
//!   stride). `cols` is contiguous `[N, C * kH * kW, OH * OW]`, row
//!   `c * kH * kW + r * kW + s` holding tap `(r, s)` of channel `c` for
//!   every output position, 0 where the tap falls in the padding; `x` is
//!   `[N, C, H, W]` read through its strides (NCHW and channels-last views
//!   alike). A pure copy of the element's bits, so every dtype is exact.
//! * `NAME_col2im(dx, cols, meta)`: one thread per element of the
//!   contiguous `[N, C, H, W]` `dx`, gathering the column entries of the
//!   taps that read it (the adjoint of `im2col`): no atomics, the same bits
//!   every run. Sums in f64 in tap order, rounded once to the dtype.
//!
//! `meta` is [`CONV_META_WORDS`] 64-bit words: `total, C, H, W, kH, kW,
//! OH, OW`, `x`'s strides `(n, c, h, w)` (unused by `col2im`), `stride
//! (h, w)`, `padding (h, w)`, `dilation (h, w)`.

use super::body::{Body, Class};
use super::pool::{from_f64, global_ptr, grid_loop, load_f64, meta_word, op64, udivrem};
use tensorfn_core::DTypeKind;

/// 64-bit words of a column kernel's `meta` parameter.
pub const CONV_META_WORDS: usize = 18;

/// A column kernel's `meta` words by name: the one statement of their
/// order, for the runtime that writes them (`ConvMeta<usize>`) and the
/// entries that read them into registers (`ConvMeta<String>`).
///
/// ```
/// use tensorfn_kernels::ptx::{ConvMeta, CONV_META_WORDS};
/// let words: [usize; CONV_META_WORDS] = std::array::from_fn(|i| i);
/// let m = ConvMeta::from_words(words);
/// assert_eq!((m.total, m.oh, m.x_strides[3], m.dilation[1]), (0, 6, 11, 17));
/// assert_eq!(m.words(), words);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvMeta<T> {
    /// Elements the launch covers (column elements for `im2col`, input
    /// elements for `col2im`).
    pub total: T,
    /// Input channels.
    pub c: T,
    /// Input height.
    pub h: T,
    /// Input width.
    pub w: T,
    /// Filter height.
    pub kh: T,
    /// Filter width.
    pub kw: T,
    /// Output height.
    pub oh: T,
    /// Output width.
    pub ow: T,
    /// The input's strides `(n, c, h, w)` in elements (unused by `col2im`).
    pub x_strides: [T; 4],
    /// The step between windows along `(h, w)`.
    pub stride: [T; 2],
    /// Zeros on both sides along `(h, w)`.
    pub padding: [T; 2],
    /// The step between taps along `(h, w)`.
    pub dilation: [T; 2],
}

impl<T> ConvMeta<T> {
    /// The fields from the words in the entries' order.
    pub fn from_words(words: [T; CONV_META_WORDS]) -> Self {
        let [total, c, h, w, kh, kw, oh, ow, xn, xc, xh, xw, sh, sw, ph, pw, dh, dw] = words;
        ConvMeta {
            total,
            c,
            h,
            w,
            kh,
            kw,
            oh,
            ow,
            x_strides: [xn, xc, xh, xw],
            stride: [sh, sw],
            padding: [ph, pw],
            dilation: [dh, dw],
        }
    }

    /// The words in the entries' order (the inverse of
    /// [`from_words`](Self::from_words)).
    pub fn words(self) -> [T; CONV_META_WORDS] {
        let ConvMeta {
            total,
            c,
            h,
            w,
            kh,
            kw,
            oh,
            ow,
            x_strides: [xn, xc, xh, xw],
            stride: [sh, sw],
            padding: [ph, pw],
            dilation: [dh, dw],
        } = self;
        [
            total, c, h, w, kh, kw, oh, ow, xn, xc, xh, xw, sh, sw, ph, pw, dh, dw,
        ]
    }
}

/// The meta words in registers, loaded in word order.
fn read_meta(body: &mut Body) -> ConvMeta<String> {
    ConvMeta::from_words(std::array::from_fn(|i| meta_word(body, i)))
}

/// What both entries read before their loop: the two pointers, the meta
/// words, and the loop-invariant sizes.
struct Frame {
    out: String,
    input: String,
    m: ConvMeta<String>,
    /// Output positions per image.
    p: String,
    /// Taps per channel.
    kk: String,
    /// Column rows per image.
    rows: String,
}

fn frame(body: &mut Body) -> Frame {
    let out = global_ptr(body, "p_out");
    let input = global_ptr(body, "p_in");
    let m = read_meta(body);
    let p = op64(body, "mul.lo.u64", &m.oh, &m.ow);
    let kk = op64(body, "mul.lo.u64", &m.kh, &m.kw);
    let rows = op64(body, "mul.lo.u64", &m.c, &kk);
    Frame {
        out,
        input,
        m,
        p,
        kk,
        rows,
    }
}

/// The PTX type moving one element's bits.
fn bits_ty(dtype: DTypeKind) -> &'static str {
    match dtype.size_bytes() {
        2 => "b16",
        4 => "b32",
        _ => "b64",
    }
}

fn bits_class(dtype: DTypeKind) -> Class {
    match dtype.size_bytes() {
        2 => Class::B16,
        4 => Class::B32,
        _ => Class::B64,
    }
}

/// A predicate: `0 <= v < n` (signed `v`).
fn inside(body: &mut Body, v: &str, n: &str) -> String {
    let p = body.reg(Class::Pred);
    body.op(format!("setp.ge.s64 {p}, {v}, 0"));
    let q = body.reg(Class::Pred);
    body.op(format!("setp.lt.s64 {q}, {v}, {n}"));
    body.op(format!("and.pred {p}, {p}, {q}"));
    p
}

fn entry(name: &str, suffix: &str, body: Body) -> String {
    let params = [
        ".param .u64 p_out",
        ".param .u64 p_in",
        &format!(".param .align 8 .b8 p_meta[{}]", 8 * CONV_META_WORDS),
    ]
    .join(",\n\t");
    format!(
        ".visible .entry {name}_{suffix}(\n\t{params}\n)\n{{\n{}}}\n",
        body.finish()
    )
}

/// The `NAME_im2col` entry over `dtype`.
pub(crate) fn im2col_entry(name: &str, dtype: DTypeKind) -> String {
    let mut body = Body::new();
    let Frame {
        out: cols,
        input: x,
        m,
        p,
        kk,
        rows,
    } = frame(&mut body);
    let size = dtype.size_bytes();
    grid_loop(&mut body, &m.total, |body, i| {
        let (t, pos) = udivrem(body, i, &p);
        let (n, row) = udivrem(body, &t, &rows);
        let (c, tap) = udivrem(body, &row, &kk);
        let (r, s) = udivrem(body, &tap, &m.kw);
        let (oh, ow) = udivrem(body, &pos, &m.ow);
        // ih = oh * stride - pad + r * dilation, and the same along w.
        let ih = op64(body, "mul.lo.s64", &oh, &m.stride[0]);
        body.op(format!("sub.s64 {ih}, {ih}, {}", m.padding[0]));
        body.op(format!("mad.lo.s64 {ih}, {r}, {}, {ih}", m.dilation[0]));
        let iw = op64(body, "mul.lo.s64", &ow, &m.stride[1]);
        body.op(format!("sub.s64 {iw}, {iw}, {}", m.padding[1]));
        body.op(format!("mad.lo.s64 {iw}, {s}, {}, {iw}", m.dilation[1]));
        let ok = inside(body, &ih, &m.h);
        let okw = inside(body, &iw, &m.w);
        body.op(format!("and.pred {ok}, {ok}, {okw}"));
        let v = body.reg(bits_class(dtype));
        body.op(format!("mov.{} {v}, 0", bits_ty(dtype)));
        let off = op64(body, "mul.lo.s64", &n, &m.x_strides[0]);
        body.op(format!("mad.lo.s64 {off}, {c}, {}, {off}", m.x_strides[1]));
        body.op(format!("mad.lo.s64 {off}, {ih}, {}, {off}", m.x_strides[2]));
        body.op(format!("mad.lo.s64 {off}, {iw}, {}, {off}", m.x_strides[3]));
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.s64 {a}, {off}, {size}, {x}"));
        body.op(format!("@{ok} ld.global.nc.{} {v}, [{a}]", bits_ty(dtype)));
        let o = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {o}, {i}, {size}, {cols}"));
        body.op(format!("st.global.{} [{o}], {v}", bits_ty(dtype)));
    });
    body.op("ret");
    entry(name, "im2col", body)
}

/// Emits `for v in 0..n` around `inner(body, v)`.
fn count_loop(body: &mut Body, n: &str, what: &str, inner: impl FnOnce(&mut Body, &str)) {
    let v = body.reg(Class::B64);
    body.op(format!("mov.u64 {v}, 0"));
    let top = body.label(what);
    let end = body.label(&format!("{what}_end"));
    body.place(&top);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.s64 {done}, {v}, {n}"));
    body.op(format!("@{done} bra {end}"));
    inner(body, &v);
    body.op(format!("add.s64 {v}, {v}, 1"));
    body.op(format!("bra.uni {top}"));
    body.place(&end);
}

/// The output position along one axis whose tap `k` reads input position
/// `i`, and a predicate that it exists: `o = (i + pad - k * dilation) /
/// stride` when that divides evenly and `0 <= o < out`.
fn reader(
    body: &mut Body,
    i: &str,
    k: &str,
    (stride, pad, dil, out): (&str, &str, &str, &str),
) -> (String, String) {
    let t = op64(body, "add.s64", i, pad);
    let kd = op64(body, "mul.lo.s64", k, dil);
    body.op(format!("sub.s64 {t}, {t}, {kd}"));
    let ok = body.reg(Class::Pred);
    body.op(format!("setp.ge.s64 {ok}, {t}, 0"));
    // Divide a non-negative value only (0 stands in for a negative one,
    // whose predicate is already false).
    let tz = op64(body, "max.s64", &t, "0");
    let (o, rem) = udivrem(body, &tz, stride);
    let q = body.reg(Class::Pred);
    body.op(format!("setp.eq.u64 {q}, {rem}, 0"));
    body.op(format!("and.pred {ok}, {ok}, {q}"));
    body.op(format!("setp.lt.s64 {q}, {o}, {out}"));
    body.op(format!("and.pred {ok}, {ok}, {q}"));
    (o, ok)
}

/// The `NAME_col2im` entry over `dtype`.
pub(crate) fn col2im_entry(name: &str, dtype: DTypeKind) -> String {
    let mut body = Body::new();
    let Frame {
        out: dx,
        input: cols,
        m,
        p,
        kk,
        rows,
    } = frame(&mut body);
    let size = dtype.size_bytes();
    grid_loop(&mut body, &m.total, |body, i| {
        let (t, iw) = udivrem(body, i, &m.w);
        let (t, ih) = udivrem(body, &t, &m.h);
        let (n, c) = udivrem(body, &t, &m.c);
        // Column row of channel c's first tap, in image n.
        let base = op64(body, "mul.lo.u64", &n, &rows);
        body.op(format!("mad.lo.u64 {base}, {c}, {kk}, {base}"));
        let acc = body.reg(Class::F64);
        body.op(format!("mov.f64 {acc}, 0d0000000000000000"));
        let axis_h = (&*m.stride[0], &*m.padding[0], &*m.dilation[0], &*m.oh);
        let axis_w = (&*m.stride[1], &*m.padding[1], &*m.dilation[1], &*m.ow);
        count_loop(body, &m.kh, "col2im_r", |body, r| {
            let (oh, okh) = reader(body, &ih, r, axis_h);
            let skip_row = body.label("col2im_r_skip");
            body.op(format!("@!{okh} bra {skip_row}"));
            count_loop(body, &m.kw, "col2im_s", |body, s| {
                let (ow, okw) = reader(body, &iw, s, axis_w);
                let skip = body.label("col2im_s_skip");
                body.op(format!("@!{okw} bra {skip}"));
                // cols[(base + r * kW + s) * P + oh * OW + ow]
                let rr = body.reg(Class::B64);
                body.op(format!("mad.lo.u64 {rr}, {r}, {}, {base}", m.kw));
                body.op(format!("add.u64 {rr}, {rr}, {s}"));
                let at = op64(body, "mul.lo.u64", &rr, &p);
                body.op(format!("mad.lo.u64 {at}, {oh}, {}, {at}", m.ow));
                body.op(format!("add.u64 {at}, {at}, {ow}"));
                let a = body.reg(Class::B64);
                body.op(format!("mad.lo.u64 {a}, {at}, {size}, {cols}"));
                let v = load_f64(body, dtype, &a);
                body.op(format!("add.rn.f64 {acc}, {acc}, {v}"));
                body.place(&skip);
            });
            body.place(&skip_row);
        });
        let v = from_f64(body, dtype, &acc);
        let a = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {a}, {i}, {size}, {dx}"));
        super::memory::store(body, dtype, &a, &v);
    });
    body.op("ret");
    entry(name, "col2im", body)
}
