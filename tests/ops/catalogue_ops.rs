//! Walks the op catalogue beyond its elementwise tables (which
//! `catalogue.rs`, beside this file, walks): for every other op, at every rank from 0
//! to 4 that its shape rule accepts and at every dim it can take there
//! (negative dims included), a `tensor_fn!` use in each form the
//! catalogue gives it (function, method, keyword arguments) and the
//! typed-API call, both run on the CPU on seeded random inputs (NaN, ±inf
//! and ±0 among them where the op defines what they give) and compared
//! with an `f64` reference computed here by plain loops over the
//! row-major data. Empty dims are walked for reductions, products and
//! `cat`: PyTorch's answer (a sum of nothing is 0, the max of nothing an
//! error) must come back as a value or an `Err`, never a panic.
//!
//! [`WALKED`] lists what is walked; `every_catalogue_op_is_walked` fails,
//! naming the op, when a catalogue entry (or one of its forms) is not in
//! it, so a new op needs its walk here.

use tensorfn::prelude::*;
use tensorfn::{DType, FloatDType, Shape};
use tensorfn_core::ops::{self, NormOp, OpKind, ReduceOp};

/// A catalogue op walked here, with the forms its walk writes.
struct Walked {
    name: &'static str,
    function: bool,
    method: bool,
}

const fn walked(name: &'static str, function: bool, method: bool) -> Walked {
    Walked {
        name,
        function,
        method,
    }
}

/// Every op outside the elementwise tables, as this file walks it (the
/// ranks are those its shape rule accepts): comparisons, `where_`,
/// `masked_fill`, `clamp` and `addcmul` at ranks 0-4 with broadcasting;
/// reductions over everything at ranks 0-4 and along each dim at ranks
/// 1-4; `layer_norm` and `rms_norm` over the last dim at ranks 1-4 (and
/// in f32, f16 and bf16); `rope` at ranks 2-4 (and in f32, f16 and bf16);
/// `batch_norm` at ranks 2-4, inference and training, with and without
/// weight and bias (and in f32);
/// `softmax`, `log_softmax`, `logsumexp`, `cat`, `narrow` and
/// `transpose` along
/// each dim at ranks 1-4; `matmul` for every pair of ranks 1-4; `mm`,
/// `bmm`, `dot` and `addmm` at their one rank (every bias shape);
/// `reshape`, `view`, `permute`, `cast`, `to_device` and `to_cpu` at ranks
/// 0-4; `t` at ranks 0-2; `embedding` of ids of ranks 0-3 (every dtype
/// of table, both index dtypes, no ids, an empty table), `index_select`
/// and `gather` along each dim at ranks 1-4, `index_add` and
/// `scatter_add` along each dim at ranks 1-3 (repeated indices, NaN and
/// ±inf sources, no indices, f32, f16 and bf16), `arange` of dims and
/// literals, `tril` and `triu` at ranks 2-4 (every dtype, causal masks);
/// `cumsum` along each dim at ranks 1-3 (f64 and `i32` into `i64`);
/// `topk` along each dim at ranks 1-3 (every `k` from 0 to past the dim,
/// ties, NaN and ±inf, empty dims, f32 and `i32`, keywords, fused
/// neighbours); `multinomial` at ranks 1 and 2 against the typed API and
/// the weights (zero weights never drawn, draws without replacement
/// distinct, bad weights and counts an `Err`);
/// `cross_entropy` of `[N, C]` logits (every keyword, both index dtypes,
/// fused with its neighbours, f32, no rows, one class, a bad target);
/// `max_pool2d`, `avg_pool2d` and `adaptive_avg_pool2d` at ranks 3 and 4
/// with every option (NaN, ±inf, -0, no batch, f32); `flatten` at ranks 0
/// and 3 (defaults, keywords, negative dims, a permuted view); `dropout`
/// at rank 2 (every keyword, a seed parameter, its statistics).
/// `conv2d` and `conv1d` over random shapes and options (stride, padding,
/// dilation, groups, depthwise, no bias, 1x1, kernel = input, no images,
/// a channels-last input), in every float dtype.
const WALKED: &[Walked] = &[
    walked("eq", true, true),
    walked("ne", true, true),
    walked("lt", true, true),
    walked("le", true, true),
    walked("gt", true, true),
    walked("ge", true, true),
    walked("where_", true, false),
    walked("masked_fill", true, true),
    walked("clamp", true, true),
    walked("sum", false, true),
    walked("mean", false, true),
    walked("max", false, true),
    walked("min", false, true),
    walked("argmax", false, true),
    walked("argmin", false, true),
    walked("var", false, true),
    walked("softmax", true, true),
    walked("log_softmax", true, true),
    walked("logsumexp", true, true),
    walked("layer_norm", true, true),
    walked("rms_norm", true, true),
    walked("rope", true, false),
    walked("batch_norm", true, false),
    walked("matmul", true, true),
    walked("mm", true, true),
    walked("bmm", true, true),
    walked("dot", true, true),
    walked("addmm", true, false),
    walked("addcmul", true, false),
    walked("cat", true, false),
    walked("scaled_dot_product_attention", true, false),
    walked("reshape", false, true),
    walked("view", false, true),
    walked("reshape_unordered", false, true),
    walked("view_unordered", false, true),
    walked("unsqueeze", false, true),
    walked("squeeze", false, true),
    walked("stack", true, false),
    walked("expand", false, true),
    walked("repeat_interleave", true, true),
    walked("t", false, true),
    walked("permute", false, true),
    walked("transpose", false, true),
    walked("narrow", false, true),
    walked("embedding", true, false),
    walked("index_select", true, true),
    walked("gather", true, true),
    walked("index_add", true, true),
    walked("scatter_add", true, true),
    walked("cumsum", true, true),
    walked("cross_entropy", true, false),
    walked("max_pool2d", true, false),
    walked("avg_pool2d", true, false),
    walked("adaptive_avg_pool2d", true, false),
    walked("flatten", true, true),
    walked("dropout", true, true),
    walked("topk", true, true),
    walked("multinomial", true, true),
    walked("conv1d", true, false),
    walked("conv2d", true, false),
    walked("arange", true, false),
    walked("tril", true, true),
    walked("triu", true, true),
    walked("cast", false, true),
    walked("to_device", false, true),
    walked("to_cpu", false, true),
];

#[test]
fn every_catalogue_op_is_walked() {
    let mut missing = Vec::new();
    for def in ops::all() {
        // The elementwise tables are walked op by op in `catalogue.rs`.
        if matches!(def.kind, OpKind::Unary(_) | OpKind::Binary(_)) {
            continue;
        }
        match WALKED.iter().find(|w| w.name == def.name) {
            None => missing.push(format!("{} (no walk)", def.name)),
            Some(w) => {
                if def.function && !w.function {
                    missing.push(format!("{}(..) (function form not walked)", def.name));
                }
                if def.method && !w.method {
                    missing.push(format!("x.{}(..) (method form not walked)", def.name));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "catalogue ops without a walk: {missing:?}"
    );
    // And nothing walked here has left the catalogue or changed its forms.
    for w in WALKED {
        let def = ops::all()
            .find(|d| d.name == w.name)
            .unwrap_or_else(|| panic!("`{}` is walked but not in the catalogue", w.name));
        assert_eq!(
            (def.function, def.method),
            (w.function, w.method),
            "`{}`: forms walked differ from the catalogue's",
            w.name
        );
    }
}

// ---------------------------------------------------------------------
// Inputs, reading back, comparing.
// ---------------------------------------------------------------------

const EPS: f64 = f64::EPSILON;
const EPS32: f64 = f32::EPSILON as f64;
const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;
/// The values whose handling is defined and easy to get wrong.
const SPECIAL: &[f64] = &[NAN, INF, -INF, 0.0, -0.0];

/// A seeded xorshift generator.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `n` values in (-4, 4); about one in ten repeats its neighbour (ties)
    /// and, with `special`, one in eight is one of them.
    fn values(&mut self, n: usize, special: &[f64]) -> Vec<f64> {
        let mut v: Vec<f64> = Vec::with_capacity(n);
        for i in 0..n {
            let x = if !special.is_empty() && self.below(8) == 0 {
                special[self.below(special.len())]
            } else if i > 0 && self.below(10) == 0 {
                v[i - 1]
            } else {
                (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0
            };
            v.push(x);
        }
        v
    }

    /// `rank` dims, each in `lo..=hi`.
    fn dims(&mut self, rank: usize, lo: usize, hi: usize) -> Vec<usize> {
        (0..rank).map(|_| lo + self.below(hi - lo + 1)).collect()
    }
}

fn numel(d: &[usize]) -> usize {
    d.iter().product()
}

/// A CPU tensor of `dims` holding `v` converted to `T`.
fn tensor<T: DType, S: Shape>(v: &[f64], dims: &[usize]) -> Tensor<Cpu, T, S> {
    let data: Vec<T> = v.iter().map(|&x| T::from_f64(x)).collect();
    Tensor::from_vec_dims(data, dims).unwrap()
}

/// Random values for `dims` and the f64 tensor holding them.
fn input<S: Shape>(
    rng: &mut Rng,
    dims: &[usize],
    special: &[f64],
) -> (Vec<f64>, Tensor<Cpu, f64, S>) {
    let v = rng.values(numel(dims), special);
    let t = tensor(&v, dims);
    (v, t)
}

/// The values rounded to f32, as f64.
fn round32(v: &[f64]) -> Vec<f64> {
    v.iter().map(|&x| x as f32 as f64).collect()
}

/// What a result holds: its dims and its elements as f64.
type Got = (Vec<usize>, Vec<f64>);

/// Results read back: a tensor or a tuple of tensors.
trait Outs {
    fn outs(&self) -> Vec<Got>;
}

impl<T: DType, S: Shape> Outs for Tensor<Cpu, T, S> {
    fn outs(&self) -> Vec<Got> {
        let v = self.to_vec().unwrap().iter().map(|x| x.to_f64()).collect();
        vec![(self.shape().to_vec(), v)]
    }
}

impl Outs for Vec<Got> {
    fn outs(&self) -> Vec<Got> {
        self.clone()
    }
}

macro_rules! tuple_outs {
    ($($n:ident $i:tt),*) => {
        impl<$($n: Outs),*> Outs for ($($n,)*) {
            fn outs(&self) -> Vec<Got> {
                let mut v = Vec::new();
                $(v.extend(self.$i.outs());)*
                v
            }
        }
    };
}
tuple_outs!(A 0, B 1);
tuple_outs!(A 0, B 1, C 2);
tuple_outs!(A 0, B 1, C 2, E 3);
tuple_outs!(A 0, B 1, C 2, E 3, F 4);
tuple_outs!(A 0, B 1, C 2, E 3, F 4, G 5);
tuple_outs!(A 0, B 1, C 2, E 3, F 4, G 5, H 6);
tuple_outs!(A 0, B 1, C 2, E 3, F 4, G 5, H 6, I 7);

fn one<O: Outs>(o: &O) -> Got {
    let mut v = o.outs();
    assert_eq!(v.len(), 1);
    v.remove(0)
}

/// An expected result: dims, values, and per element a tolerance
/// (negative: bit for bit, the sign of zero included).
#[derive(Clone, Debug)]
struct Want {
    dims: Vec<usize>,
    vals: Vec<f64>,
    tol: Vec<f64>,
}

impl Want {
    /// The values bit for bit (copies, views, selections).
    fn bits(dims: Vec<usize>, vals: Vec<f64>) -> Self {
        let tol = vec![-1.0; vals.len()];
        Want { dims, vals, tol }
    }

    /// The values exactly, `-0 == 0`.
    fn exact(dims: Vec<usize>, vals: Vec<f64>) -> Self {
        let tol = vec![0.0; vals.len()];
        Want { dims, vals, tol }
    }
}

fn agrees(g: f64, w: f64, tol: f64) -> bool {
    if w.is_nan() {
        g.is_nan()
    } else if tol < 0.0 {
        g.to_bits() == w.to_bits()
    } else if w.is_infinite() {
        g == w
    } else {
        (g - w).abs() <= tol
    }
}

fn check(what: &str, got: &Got, want: &Want) {
    assert_eq!(got.0, want.dims, "{what}: dims");
    assert_eq!(got.1.len(), want.vals.len(), "{what}: element count");
    for (i, (g, (w, t))) in got
        .1
        .iter()
        .zip(want.vals.iter().zip(&want.tol))
        .enumerate()
    {
        assert!(
            agrees(*g, *w, *t),
            "{what}: element {i} of {:?} is {g}, reference {w} (tolerance {t})",
            want.dims
        );
    }
}

/// Checks each result of a tuple against its reference.
fn check_all(what: &str, got: &[Got], want: &[Want]) {
    assert_eq!(got.len(), want.len(), "{what}: result count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        check(&format!("{what} (result {i})"), g, w);
    }
}

// ---------------------------------------------------------------------
// Row-major references.
// ---------------------------------------------------------------------

fn unravel(mut i: usize, d: &[usize]) -> Vec<usize> {
    let mut ix = vec![0; d.len()];
    for k in (0..d.len()).rev() {
        ix[k] = i % d[k];
        i /= d[k];
    }
    ix
}

fn ravel(ix: &[usize], d: &[usize]) -> usize {
    ix.iter().zip(d).fold(0, |acc, (i, n)| acc * n + i)
}

/// A possibly negative dim as a position.
fn pos(dim: isize, rank: usize) -> usize {
    if dim < 0 {
        (dim + rank as isize) as usize
    } else {
        dim as usize
    }
}

/// The lanes along `dim`, in the row-major order of the dims left.
fn lanes(x: &[f64], d: &[usize], dim: usize) -> Vec<Vec<f64>> {
    let outer = numel(&d[..dim]);
    let n = d[dim];
    let inner = numel(&d[dim + 1..]);
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            out.push((0..n).map(|k| x[(o * n + k) * inner + i]).collect());
        }
    }
    out
}

/// The inverse of [`lanes`].
fn unlanes(l: &[Vec<f64>], d: &[usize], dim: usize) -> Vec<f64> {
    let outer = numel(&d[..dim]);
    let n = d[dim];
    let inner = numel(&d[dim + 1..]);
    let mut out = vec![0.0; numel(d)];
    for o in 0..outer {
        for i in 0..inner {
            for k in 0..n {
                out[(o * n + k) * inner + i] = l[o * inner + i][k];
            }
        }
    }
    out
}

fn without(d: &[usize], dim: usize) -> Vec<usize> {
    let mut v = d.to_vec();
    v.remove(dim);
    v
}

/// The element of `x` (dims `d`) that broadcasting sends to output
/// position `ix` (right-aligned; size-1 dims repeat).
fn bget(x: &[f64], d: &[usize], ix: &[usize]) -> f64 {
    let pad = ix.len() - d.len();
    let at: Vec<usize> = d
        .iter()
        .enumerate()
        .map(|(k, &n)| if n == 1 { 0 } else { ix[pad + k] })
        .collect();
    x[ravel(&at, d)]
}

/// Broadcast dims of several operands.
fn bdims(ds: &[&[usize]]) -> Vec<usize> {
    let rank = ds.iter().map(|d| d.len()).max().unwrap_or(0);
    let mut out = vec![1; rank];
    for d in ds {
        for (k, &n) in d.iter().enumerate() {
            let o = &mut out[rank - d.len() + k];
            if n != 1 {
                assert!(*o == 1 || *o == n, "reference: {ds:?} do not broadcast");
                *o = n;
            }
        }
    }
    out
}

/// `f` of the broadcast operands, elementwise.
fn bmap(ops: &[(&[f64], &[usize])], f: impl Fn(&[f64]) -> f64) -> (Vec<usize>, Vec<f64>) {
    let ds: Vec<&[usize]> = ops.iter().map(|o| o.1).collect();
    let out = bdims(&ds);
    let vals = (0..numel(&out))
        .map(|i| {
            let ix = unravel(i, &out);
            let args: Vec<f64> = ops.iter().map(|(x, d)| bget(x, d, &ix)).collect();
            f(&args)
        })
        .collect();
    (out, vals)
}

/// One lane reduced, with its tolerance; `None` where the op is undefined
/// (the max of nothing).
fn reduce_lane(op: ReduceOp, lane: &[f64], eps: f64) -> Option<(f64, f64)> {
    let n = lane.len();
    let nan = lane.iter().position(|v| v.is_nan());
    let pick = |better: fn(f64, f64) -> bool| -> Option<usize> {
        if n == 0 {
            return None;
        }
        if let Some(i) = nan {
            return Some(i);
        }
        let mut best = 0;
        for i in 1..n {
            if better(lane[i], lane[best]) {
                best = i;
            }
        }
        Some(best)
    };
    let mut sum = 0.0;
    let mut mag = 0.0;
    for v in lane {
        sum += v;
        mag += v.abs();
    }
    let bound = (n + 2) as f64 * eps * mag;
    match op {
        ReduceOp::Sum => Some((sum, bound)),
        ReduceOp::Mean => {
            let m = sum / n as f64;
            Some((m, bound / n as f64 + eps * m.abs()))
        }
        ReduceOp::Max => pick(|a, b| a > b).map(|i| (lane[i], 0.0)),
        ReduceOp::Min => pick(|a, b| a < b).map(|i| (lane[i], 0.0)),
        ReduceOp::ArgMax => pick(|a, b| a > b).map(|i| (i as f64, 0.0)),
        ReduceOp::ArgMin => pick(|a, b| a < b).map(|i| (i as f64, 0.0)),
    }
}

/// `op` along `dim` (`None`: over everything); `None` when PyTorch gives
/// an error.
fn reduce_ref(op: ReduceOp, x: &[f64], d: &[usize], dim: Option<usize>, eps: f64) -> Option<Want> {
    let (ls, dims) = match dim {
        None => (vec![x.to_vec()], vec![]),
        Some(k) => {
            let undefined = d[k] == 0 && !matches!(op, ReduceOp::Sum | ReduceOp::Mean);
            if undefined {
                return None;
            }
            (lanes(x, d, k), without(d, k))
        }
    };
    let mut vals = Vec::new();
    let mut tol = Vec::new();
    for l in &ls {
        let (v, t) = reduce_lane(op, l, eps)?;
        vals.push(v);
        tol.push(t);
    }
    Some(Want { dims, vals, tol })
}

/// `softmax` (or `log_softmax`) along `dim`.
fn softmax_ref(x: &[f64], d: &[usize], dim: usize, log: bool, eps: f64) -> Want {
    let mut out = Vec::new();
    let mut tols = Vec::new();
    for lane in lanes(x, d, dim) {
        let n = lane.len();
        let m = if lane.iter().any(|v| v.is_nan()) {
            NAN
        } else {
            lane.iter().cloned().fold(-INF, f64::max)
        };
        let s: f64 = lane.iter().map(|v| (v - m).exp()).sum();
        let tol = 16.0 * (n + 4) as f64 * eps;
        let (vals, t): (Vec<f64>, Vec<f64>) = lane
            .iter()
            .map(|v| {
                if log {
                    let w = (v - m) - s.ln();
                    (w, tol * w.abs().max(1.0))
                } else {
                    let w = (v - m).exp() / s;
                    (w, tol * w)
                }
            })
            .unzip();
        out.push(vals);
        tols.push(t);
    }
    Want {
        dims: d.to_vec(),
        vals: unlanes(&out, d, dim),
        tol: unlanes(&tols, d, dim),
    }
}

/// `torch.matmul` by loops: 1-D operands promoted and their dim removed,
/// batch dims broadcast.
fn matmul_ref(a: &[f64], ad: &[usize], b: &[f64], bd: &[usize], eps: f64) -> Want {
    let a2 = if ad.len() == 1 {
        vec![1, ad[0]]
    } else {
        ad.to_vec()
    };
    let b2 = if bd.len() == 1 {
        vec![bd[0], 1]
    } else {
        bd.to_vec()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let n = b2[b2.len() - 1];
    assert_eq!(k, b2[b2.len() - 2], "reference: inner dims");
    let (ab, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
    let batch = bdims(&[ab, bb]);
    let mut vals = Vec::new();
    let mut tol = Vec::new();
    for bi in 0..numel(&batch) {
        let ix = unravel(bi, &batch);
        let at = |d: &[usize]| {
            let pad = ix.len() - d.len();
            let j: Vec<usize> = d
                .iter()
                .enumerate()
                .map(|(q, &s)| if s == 1 { 0 } else { ix[pad + q] })
                .collect();
            ravel(&j, d)
        };
        let (ia, ib) = (at(ab), at(bb));
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                let mut mag = 0.0;
                for p in 0..k {
                    let t = a[(ia * m + i) * k + p] * b[(ib * k + p) * n + j];
                    s += t;
                    mag += t.abs();
                }
                vals.push(s);
                tol.push((k + 2) as f64 * eps * mag);
            }
        }
    }
    let mut dims = batch;
    if ad.len() >= 2 {
        dims.push(m);
    }
    if bd.len() >= 2 {
        dims.push(n);
    }
    Want { dims, vals, tol }
}

/// `cat` along `dim`.
fn cat_ref(parts: &[(&[f64], &[usize])], dim: usize) -> Want {
    let d0 = parts[0].1;
    let outer = numel(&d0[..dim]);
    let inner = numel(&d0[dim + 1..]);
    let mut vals = Vec::new();
    for o in 0..outer {
        for (x, d) in parts {
            let chunk = d[dim] * inner;
            vals.extend_from_slice(&x[o * chunk..(o + 1) * chunk]);
        }
    }
    let mut dims = d0.to_vec();
    dims[dim] = parts.iter().map(|p| p.1[dim]).sum();
    Want::bits(dims, vals)
}

/// Dim `k` of the result is dim `perm[k]` of `x`.
fn permute_ref(x: &[f64], d: &[usize], perm: &[usize]) -> Want {
    let out: Vec<usize> = perm.iter().map(|&p| d[p]).collect();
    let vals = (0..numel(&out))
        .map(|i| {
            let oi = unravel(i, &out);
            let mut ii = vec![0; d.len()];
            for (k, &p) in perm.iter().enumerate() {
                ii[p] = oi[k];
            }
            x[ravel(&ii, d)]
        })
        .collect();
    Want::bits(out, vals)
}

fn transpose_ref(x: &[f64], d: &[usize], d0: usize, d1: usize) -> Want {
    let mut perm: Vec<usize> = (0..d.len()).collect();
    perm.swap(d0, d1);
    permute_ref(x, d, &perm)
}

fn narrow_ref(x: &[f64], d: &[usize], dim: usize, start: usize, len: usize) -> Want {
    let mut out = d.to_vec();
    out[dim] = len;
    let vals = (0..numel(&out))
        .map(|i| {
            let mut ix = unravel(i, &out);
            ix[dim] += start;
            x[ravel(&ix, d)]
        })
        .collect();
    Want::bits(out, vals)
}

// ---------------------------------------------------------------------
// Reductions: sum, mean, max, min, argmax, argmin.
// ---------------------------------------------------------------------

/// Each reduction along every dim of ranks 1 to 4, negative dims and the
/// keyword form included, as one function per rank.
macro_rules! reduce_fns {
    ($($op:ident => $o:ident),*) => {$(
        mod $op {
            use super::*;
            tensor_fn! {
                pub fn rank1(x: &Tensor<Cpu, f64, [A]>) -> (Tensor<Cpu, $o, []>, Tensor<Cpu, $o, []>) {
                    (x.$op(0), x.$op(-1))
                }
                pub fn rank2(x: &Tensor<Cpu, f64, [A, B]>) -> (
                    Tensor<Cpu, $o, [B]>, Tensor<Cpu, $o, [A]>, Tensor<Cpu, $o, [B]>, Tensor<Cpu, $o, [A]>,
                ) {
                    (x.$op(0), x.$op(dim = 1), x.$op(-2), x.$op(-1))
                }
                pub fn rank3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (
                    Tensor<Cpu, $o, [B, C]>, Tensor<Cpu, $o, [A, C]>, Tensor<Cpu, $o, [A, B]>,
                    Tensor<Cpu, $o, [B, C]>, Tensor<Cpu, $o, [A, C]>, Tensor<Cpu, $o, [A, B]>,
                ) {
                    (x.$op(0), x.$op(1), x.$op(2), x.$op(-3), x.$op(-2), x.$op(-1))
                }
                pub fn rank4(x: &Tensor<Cpu, f64, [A, B, C, E]>) -> (
                    Tensor<Cpu, $o, [B, C, E]>, Tensor<Cpu, $o, [A, C, E]>, Tensor<Cpu, $o, [A, B, E]>,
                    Tensor<Cpu, $o, [A, B, C]>, Tensor<Cpu, $o, [B, C, E]>, Tensor<Cpu, $o, [A, C, E]>,
                    Tensor<Cpu, $o, [A, B, E]>, Tensor<Cpu, $o, [A, B, C]>,
                ) {
                    (x.$op(0), x.$op(1), x.$op(2), x.$op(3), x.$op(-4), x.$op(-3), x.$op(-2), x.$op(-1))
                }
            }
        }
    )*};
}

reduce_fns!(sum => f64, mean => f64, max => f64, min => f64, argmax => i64, argmin => i64);

/// The dims each `rankN` function reduces, in its order.
const REDUCE_DIMS: [&[isize]; 5] = [
    &[],
    &[0, -1],
    &[0, 1, -2, -1],
    &[0, 1, 2, -3, -2, -1],
    &[0, 1, 2, 3, -4, -3, -2, -1],
];

/// The results of a walk function (or its `Err`) against references
/// (`None`: PyTorch raises, so an `Err` is expected).
fn check_or_err<O: Outs>(what: &str, got: Result<O>, want: &[Option<Want>]) {
    match got {
        Ok(o) => {
            let undefined: Vec<usize> = (0..want.len()).filter(|&i| want[i].is_none()).collect();
            assert!(
                undefined.is_empty(),
                "{what}: Ok, but results {undefined:?} should be an Err"
            );
            let want: Vec<Want> = want.iter().map(|w| w.clone().unwrap()).collect();
            check_all(what, &o.outs(), &want);
        }
        Err(e) => assert!(
            want.iter().any(|w| w.is_none()),
            "{what}: unexpected Err: {e}"
        ),
    }
}

/// One reduction walked at ranks 1 to 4 (each dim, the typed API per dim)
/// on `dims_by_rank`.
macro_rules! walk_reduce {
    ($op:ident, $red:expr, $x:ident, $d:ident, $xv:ident) => {{
        let red: ReduceOp = $red;
        let what = |r: usize| format!("{} at rank {r}, dims {:?}", stringify!($op), $d[r]);
        let refs = |r: usize, xv: &[f64]| -> Vec<Option<Want>> {
            REDUCE_DIMS[r]
                .iter()
                .map(|&k| reduce_ref(red, xv, &$d[r], Some(pos(k, r)), EPS))
                .collect()
        };
        check_or_err(&what(1), $op::rank1(&$x.1), &refs(1, &$xv.1));
        check_or_err(&what(2), $op::rank2(&$x.2), &refs(2, &$xv.2));
        check_or_err(&what(3), $op::rank3(&$x.3), &refs(3, &$xv.3));
        check_or_err(&what(4), $op::rank4(&$x.4), &refs(4, &$xv.4));
        // The typed API, dim by dim.
        let typed = |r: usize, k: usize, got: Result<Vec<Got>>, xv: &[f64]| {
            let want = reduce_ref(red, xv, &$d[r], Some(k), EPS);
            check_or_err(&format!("typed {} dim {k}", what(r)), got, &[want]);
        };
        typed(1, 0, $x.1.$op::<0>().map(|t| t.outs()), &$xv.1);
        typed(2, 0, $x.2.$op::<0>().map(|t| t.outs()), &$xv.2);
        typed(2, 1, $x.2.$op::<1>().map(|t| t.outs()), &$xv.2);
        typed(3, 0, $x.3.$op::<0>().map(|t| t.outs()), &$xv.3);
        typed(3, 1, $x.3.$op::<1>().map(|t| t.outs()), &$xv.3);
        typed(3, 2, $x.3.$op::<2>().map(|t| t.outs()), &$xv.3);
        typed(4, 0, $x.4.$op::<0>().map(|t| t.outs()), &$xv.4);
        typed(4, 1, $x.4.$op::<1>().map(|t| t.outs()), &$xv.4);
        typed(4, 2, $x.4.$op::<2>().map(|t| t.outs()), &$xv.4);
        typed(4, 3, $x.4.$op::<3>().map(|t| t.outs()), &$xv.4);
    }};
}

type S0 = shape![];
type S1 = shape![_];
type S2 = shape![_, _];
type S3 = shape![_, _, _];
type S4 = shape![_, _, _, _];
/// A column: `[_, 1]`.
type Col = shape![_, 1];
/// A row `[1, N]`.
type Row = shape![1, _];
/// `[_, 1, _]`.
type Mid1 = shape![_, 1, _];
/// `[_, 1, _, _]`.
type Batch1 = shape![_, 1, _, _];

/// Inputs of ranks 0 to 4 (`dims[r]`), values and tensors.
#[allow(clippy::type_complexity)]
fn inputs_by_rank(
    rng: &mut Rng,
    dims: &[Vec<usize>; 5],
    special: &[f64],
) -> (
    (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>),
    (
        Tensor<Cpu, f64, S0>,
        Tensor<Cpu, f64, S1>,
        Tensor<Cpu, f64, S2>,
        Tensor<Cpu, f64, S3>,
        Tensor<Cpu, f64, S4>,
    ),
) {
    let (v0, t0) = input(rng, &dims[0], special);
    let (v1, t1) = input(rng, &dims[1], special);
    let (v2, t2) = input(rng, &dims[2], special);
    let (v3, t3) = input(rng, &dims[3], special);
    let (v4, t4) = input(rng, &dims[4], special);
    ((v0, v1, v2, v3, v4), (t0, t1, t2, t3, t4))
}

fn random_dims(rng: &mut Rng, lo: usize, hi: usize) -> [Vec<usize>; 5] {
    [
        vec![],
        rng.dims(1, lo, hi),
        rng.dims(2, lo, hi),
        rng.dims(3, lo, hi),
        rng.dims(4, lo, hi),
    ]
}

/// Shapes with an empty dim somewhere (and, at rank 2, everywhere).
fn empty_dims(rng: &mut Rng) -> [Vec<usize>; 5] {
    let mut d = random_dims(rng, 1, 3);
    for (r, dims) in d.iter_mut().enumerate().skip(1) {
        let k = rng.below(r);
        dims[k] = 0;
    }
    d[2] = vec![0, 0];
    d
}

#[test]
fn reductions_along_each_dim() {
    let mut rng = Rng::new(101);
    for round in 0..4 {
        let d = match round {
            0 | 1 => random_dims(&mut rng, 1, 5),
            _ => empty_dims(&mut rng),
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        walk_reduce!(sum, ReduceOp::Sum, x, d, xv);
        walk_reduce!(mean, ReduceOp::Mean, x, d, xv);
        walk_reduce!(max, ReduceOp::Max, x, d, xv);
        walk_reduce!(min, ReduceOp::Min, x, d, xv);
        walk_reduce!(argmax, ReduceOp::ArgMax, x, d, xv);
        walk_reduce!(argmin, ReduceOp::ArgMin, x, d, xv);
    }
}

tensor_fn! {
    /// Every reduction over all elements, at each rank.
    fn whole0(x: &Tensor<Cpu, f64, []>) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>) {
        (x.sum(), x.mean(), x.max(), x.min())
    }
    fn whole1(x: &Tensor<Cpu, f64, [A]>) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>) {
        (x.sum(), x.mean(), x.max(), x.min())
    }
    fn whole2(x: &Tensor<Cpu, f64, [A, B]>) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>) {
        (x.sum(), x.mean(), x.max(), x.min())
    }
    fn whole3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>) {
        (x.sum(), x.mean(), x.max(), x.min())
    }
    fn whole4(x: &Tensor<Cpu, f64, [A, B, C, E]>) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>) {
        (x.sum(), x.mean(), x.max(), x.min())
    }
    /// Sums and means of empty tensors alone (the max of one is an error).
    fn whole_sums(x: &Tensor<Cpu, f64, [A, B, C]>) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>) {
        (x.sum(), x.mean())
    }
    /// f32 reductions: every op along each dim of a matrix.
    fn reduce32(x: &Tensor<Cpu, f32, [A, B]>) -> (
        Tensor<Cpu, f32, [B]>, Tensor<Cpu, f32, [A]>, Tensor<Cpu, f32, [B]>, Tensor<Cpu, f32, [A]>,
        Tensor<Cpu, i64, [B]>, Tensor<Cpu, i64, [A]>, Tensor<Cpu, f32, []>,
    ) {
        (x.sum(0), x.mean(-1), x.max(0), x.min(1), x.argmax(0), x.argmin(-1), x.sum())
    }
    /// Integer reductions (exact).
    fn reduce_int(x: &Tensor<Cpu, i64, [A, B, C]>) -> (
        Tensor<Cpu, i64, [B, C]>, Tensor<Cpu, i64, [A, C]>, Tensor<Cpu, i64, [A, B]>,
        Tensor<Cpu, i64, [B, C]>, Tensor<Cpu, i64, [A, C]>, Tensor<Cpu, i64, []>,
    ) {
        (x.sum(0), x.max(1), x.min(2), x.argmax(0), x.argmin(1), x.sum())
    }
}

#[test]
fn reductions_over_everything() {
    let mut rng = Rng::new(102);
    for round in 0..3 {
        let d = if round < 2 {
            random_dims(&mut rng, 1, 4)
        } else {
            empty_dims(&mut rng)
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        let all = |xv: &[f64], r: usize| -> Vec<Option<Want>> {
            [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min]
                .iter()
                .map(|&op| reduce_ref(op, xv, &d[r], None, EPS))
                .collect()
        };
        let what = |r: usize| format!("sum(), mean(), max(), min() at rank {r}, dims {:?}", d[r]);
        check_or_err(&what(0), whole0(&x.0), &all(&xv.0, 0));
        check_or_err(&what(1), whole1(&x.1), &all(&xv.1, 1));
        check_or_err(&what(2), whole2(&x.2), &all(&xv.2, 2));
        check_or_err(&what(3), whole3(&x.3), &all(&xv.3, 3));
        check_or_err(&what(4), whole4(&x.4), &all(&xv.4, 4));
        macro_rules! typed_all {
            ($t:expr, $v:expr, $r:expr) => {{
                let want = all(&$v, $r);
                let what = format!("typed *_all at rank {}, dims {:?}", $r, d[$r]);
                check_or_err(&what, $t.sum_all().map(|t| t.outs()), &want[0..1]);
                check_or_err(&what, $t.mean_all().map(|t| t.outs()), &want[1..2]);
                check_or_err(&what, $t.max_all().map(|t| t.outs()), &want[2..3]);
                check_or_err(&what, $t.min_all().map(|t| t.outs()), &want[3..4]);
            }};
        }
        typed_all!(x.0, xv.0, 0);
        typed_all!(x.1, xv.1, 1);
        typed_all!(x.2, xv.2, 2);
        typed_all!(x.3, xv.3, 3);
        typed_all!(x.4, xv.4, 4);
    }
    // An empty tensor: sum 0, mean NaN, through the macro alone.
    let e = Tensor::<Cpu, f64, S3>::zeros_dims(&[2, 0, 3]).unwrap();
    let (s, m) = whole_sums(&e).unwrap();
    assert_eq!(s.item().unwrap(), 0.0);
    assert!(m.item().unwrap().is_nan());
}

#[test]
fn reductions_in_f32_and_integers() {
    let mut rng = Rng::new(103);
    for _ in 0..3 {
        let d = rng.dims(2, 1, 6);
        let xv = round32(&rng.values(numel(&d), SPECIAL));
        let x: Tensor<Cpu, f32, S2> = tensor(&xv, &d);
        let r = |op, dim| reduce_ref(op, &xv, &d, dim, EPS32);
        let want = [
            r(ReduceOp::Sum, Some(0)),
            r(ReduceOp::Mean, Some(1)),
            r(ReduceOp::Max, Some(0)),
            r(ReduceOp::Min, Some(1)),
            r(ReduceOp::ArgMax, Some(0)),
            r(ReduceOp::ArgMin, Some(1)),
            r(ReduceOp::Sum, None),
        ];
        check_or_err(&format!("f32 reductions of {d:?}"), reduce32(&x), &want);
        check_or_err("typed f32 sum", x.sum::<0>().map(|t| t.outs()), &want[0..1]);
        check_or_err(
            "typed f32 mean",
            x.mean::<1>().map(|t| t.outs()),
            &want[1..2],
        );
        check_or_err(
            "typed f32 argmax",
            x.argmax::<0>().map(|t| t.outs()),
            &want[4..5],
        );

        let d = rng.dims(3, 1, 4);
        let xv: Vec<f64> = (0..numel(&d))
            .map(|_| rng.below(41) as f64 - 20.0)
            .collect();
        let x: Tensor<Cpu, i64, S3> = tensor(&xv, &d);
        let r = |op, dim| reduce_ref(op, &xv, &d, dim, 0.0);
        let want = [
            r(ReduceOp::Sum, Some(0)),
            r(ReduceOp::Max, Some(1)),
            r(ReduceOp::Min, Some(2)),
            r(ReduceOp::ArgMax, Some(0)),
            r(ReduceOp::ArgMin, Some(1)),
            r(ReduceOp::Sum, None),
        ];
        check_or_err(&format!("i64 reductions of {d:?}"), reduce_int(&x), &want);
        check_or_err("typed i64 max", x.max::<1>().map(|t| t.outs()), &want[1..2]);
        check_or_err(
            "typed i64 argmin",
            x.argmin::<1>().map(|t| t.outs()),
            &want[4..5],
        );
    }
}

// ---------------------------------------------------------------------
// softmax, log_softmax.
// ---------------------------------------------------------------------

tensor_fn! {
    fn softmax1(x: &Tensor<Cpu, f64, [A]>) -> (Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>) {
        (softmax(x, 0), x.softmax(-1), log_softmax(x, dim = 0), x.log_softmax(-1))
    }
    fn softmax2(x: &Tensor<Cpu, f64, [A, B]>) -> (
        Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>,
        Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>,
    ) {
        (softmax(x, 0), x.softmax(1), x.softmax(-2), log_softmax(x, 1), x.log_softmax(0), x.log_softmax(dim = -1))
    }
    fn softmax3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (
        Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>,
        Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>,
    ) {
        (
            x.softmax(0), softmax(x, 1), x.softmax(2), softmax(x, -1),
            log_softmax(x, 0), x.log_softmax(1), log_softmax(x, 2), x.log_softmax(-3),
        )
    }
    fn softmax4(x: &Tensor<Cpu, f64, [A, B, C, E]>) -> (
        Tensor<Cpu, f64, [A, B, C, E]>, Tensor<Cpu, f64, [A, B, C, E]>, Tensor<Cpu, f64, [A, B, C, E]>, Tensor<Cpu, f64, [A, B, C, E]>,
        Tensor<Cpu, f64, [A, B, C, E]>, Tensor<Cpu, f64, [A, B, C, E]>, Tensor<Cpu, f64, [A, B, C, E]>, Tensor<Cpu, f64, [A, B, C, E]>,
    ) {
        (
            softmax(x, 0), x.softmax(1), softmax(x, 2), x.softmax(3),
            x.log_softmax(-4), log_softmax(x, -3), x.log_softmax(-2), log_softmax(x, -1),
        )
    }
    fn softmax32(x: &Tensor<Cpu, f32, [A, B]>) -> (Tensor<Cpu, f32, [A, B]>, Tensor<Cpu, f32, [A, B]>) {
        (x.softmax(-1), log_softmax(x, 0))
    }
}

/// `(dim, log)` of each result of `softmaxN`.
const SOFTMAX_DIMS: [&[(isize, bool)]; 5] = [
    &[],
    &[(0, false), (-1, false), (0, true), (-1, true)],
    &[
        (0, false),
        (1, false),
        (-2, false),
        (1, true),
        (0, true),
        (-1, true),
    ],
    &[
        (0, false),
        (1, false),
        (2, false),
        (-1, false),
        (0, true),
        (1, true),
        (2, true),
        (-3, true),
    ],
    &[
        (0, false),
        (1, false),
        (2, false),
        (3, false),
        (-4, true),
        (-3, true),
        (-2, true),
        (-1, true),
    ],
];

#[test]
fn softmax_along_each_dim() {
    let mut rng = Rng::new(201);
    // NaN spoils its lane; -inf (a masked position) gives 0 (or -inf);
    // +inf gives NaN, as in PyTorch (inf - inf).
    for round in 0..4 {
        let d = match round {
            0 | 1 => random_dims(&mut rng, 1, 5),
            2 => empty_dims(&mut rng),
            _ => random_dims(&mut rng, 1, 3),
        };
        let special: &[f64] = if round == 3 {
            &[-INF, -INF, NAN, INF]
        } else {
            SPECIAL
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, special);
        let refs = |r: usize, v: &[f64]| -> Vec<Want> {
            SOFTMAX_DIMS[r]
                .iter()
                .map(|&(k, log)| softmax_ref(v, &d[r], pos(k, r), log, EPS))
                .collect()
        };
        let what = |r: usize| format!("softmax/log_softmax at rank {r}, dims {:?}", d[r]);
        check_all(&what(1), &softmax1(&x.1).unwrap().outs(), &refs(1, &xv.1));
        check_all(&what(2), &softmax2(&x.2).unwrap().outs(), &refs(2, &xv.2));
        check_all(&what(3), &softmax3(&x.3).unwrap().outs(), &refs(3, &xv.3));
        check_all(&what(4), &softmax4(&x.4).unwrap().outs(), &refs(4, &xv.4));
        // The typed API along each dim.
        macro_rules! typed {
            ($t:expr, $v:expr, $r:expr, $($k:literal)*) => {$(
                let what = format!("typed softmax::<{}> at rank {}, dims {:?}", $k, $r, d[$r]);
                check(&what, &one(&$t.softmax::<$k>().unwrap()), &softmax_ref(&$v, &d[$r], $k, false, EPS));
                check(&what, &one(&$t.log_softmax::<$k>().unwrap()), &softmax_ref(&$v, &d[$r], $k, true, EPS));
            )*};
        }
        typed!(x.1, xv.1, 1, 0);
        typed!(x.2, xv.2, 2, 0 1);
        typed!(x.3, xv.3, 3, 0 1 2);
        typed!(x.4, xv.4, 4, 0 1 2 3);
    }
    let d = [4, 7];
    let xv = round32(&rng.values(28, SPECIAL));
    let x: Tensor<Cpu, f32, S2> = tensor(&xv, &d);
    let want = [
        softmax_ref(&xv, &d, 1, false, EPS32),
        softmax_ref(&xv, &d, 0, true, EPS32),
    ];
    check_all("f32 softmax", &softmax32(&x).unwrap().outs(), &want);
    check(
        "typed f32 softmax",
        &one(&x.softmax::<1>().unwrap()),
        &want[0],
    );
}

// ---------------------------------------------------------------------
// logsumexp.
// ---------------------------------------------------------------------

tensor_fn! {
    fn logsumexp1(x: &Tensor<Cpu, f64, [A]>) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>) {
        (logsumexp(x, 0), x.logsumexp(-1))
    }
    fn logsumexp2(x: &Tensor<Cpu, f64, [A, B]>) -> (Tensor<Cpu, f64, [B]>, Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [B]>) {
        (logsumexp(x, 0), x.logsumexp(1), x.logsumexp(dim = -2))
    }
    fn logsumexp3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (
        Tensor<Cpu, f64, [B, C]>, Tensor<Cpu, f64, [A, C]>, Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>,
    ) {
        (x.logsumexp(0), logsumexp(x, 1), x.logsumexp(2), logsumexp(x, dim = -1))
    }
    fn logsumexp4(x: &Tensor<Cpu, f64, [A, B, C, E]>) -> (
        Tensor<Cpu, f64, [B, C, E]>, Tensor<Cpu, f64, [A, C, E]>, Tensor<Cpu, f64, [A, B, E]>, Tensor<Cpu, f64, [A, B, C]>,
    ) {
        (logsumexp(x, 0), x.logsumexp(-3), logsumexp(x, 2), x.logsumexp(-1))
    }
    fn logsumexp32(x: &Tensor<Cpu, f32, [A, B]>) -> (Tensor<Cpu, f32, [A]>, Tensor<Cpu, f32, [B]>) {
        (x.logsumexp(-1), logsumexp(x, 0))
    }
}

/// The dim of each result of `logsumexpN`.
const LOGSUMEXP_DIMS: [&[isize]; 5] = [&[], &[0, -1], &[0, 1, -2], &[0, 1, 2, -1], &[0, -3, 2, -1]];

/// `torch.logsumexp(x, dim)` by a plain loop: the lane's max `m` (NaN if
/// any is NaN), shifted by 0 where it is infinite, then
/// `log(sum(exp(x - m))) + m`; an empty lane gives -inf.
fn logsumexp_ref(x: &[f64], d: &[usize], dim: usize, eps: f64) -> Want {
    let mut vals = Vec::new();
    let mut tol = Vec::new();
    for lane in lanes(x, d, dim) {
        let mut m = -INF;
        for &v in &lane {
            if v.is_nan() || v > m {
                m = v;
            }
            if v.is_nan() {
                break;
            }
        }
        let shift = if m.is_infinite() { 0.0 } else { m };
        let mut s = 0.0;
        for &v in &lane {
            s += (v - shift).exp();
        }
        let w = s.ln() + shift;
        vals.push(w);
        tol.push(16.0 * (lane.len() + 4) as f64 * eps * (w.abs() + shift.abs() + 1.0));
    }
    Want {
        dims: without(d, dim),
        vals,
        tol,
    }
}

#[test]
fn logsumexp_along_each_dim() {
    let mut rng = Rng::new(202);
    // NaN spoils its lane, +inf gives +inf, an all -inf lane -inf (no
    // NaN from -inf - -inf), an empty lane -inf: PyTorch's results.
    for round in 0..5 {
        let d = match round {
            0 | 1 => random_dims(&mut rng, 1, 5),
            2 => empty_dims(&mut rng),
            _ => random_dims(&mut rng, 1, 3),
        };
        let special: &[f64] = match round {
            3 => &[-INF, -INF, -INF, 0.0],
            4 => &[-INF, INF, NAN, -0.0],
            _ => SPECIAL,
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, special);
        let refs = |r: usize, v: &[f64]| -> Vec<Want> {
            LOGSUMEXP_DIMS[r]
                .iter()
                .map(|&k| logsumexp_ref(v, &d[r], pos(k, r), EPS))
                .collect()
        };
        let what = |r: usize| format!("logsumexp at rank {r}, dims {:?}", d[r]);
        check_all(&what(1), &logsumexp1(&x.1).unwrap().outs(), &refs(1, &xv.1));
        check_all(&what(2), &logsumexp2(&x.2).unwrap().outs(), &refs(2, &xv.2));
        check_all(&what(3), &logsumexp3(&x.3).unwrap().outs(), &refs(3, &xv.3));
        check_all(&what(4), &logsumexp4(&x.4).unwrap().outs(), &refs(4, &xv.4));
        // The typed API along each dim.
        macro_rules! typed {
            ($t:expr, $v:expr, $r:expr, $($k:literal)*) => {$(
                let what = format!("typed logsumexp::<{}> at rank {}, dims {:?}", $k, $r, d[$r]);
                check(&what, &one(&$t.logsumexp::<$k>().unwrap()), &logsumexp_ref(&$v, &d[$r], $k, EPS));
            )*};
        }
        typed!(x.1, xv.1, 1, 0);
        typed!(x.2, xv.2, 2, 0 1);
        typed!(x.3, xv.3, 3, 0 1 2);
        typed!(x.4, xv.4, 4, 0 1 2 3);
    }
    // Large values do not overflow; f32 against the same reference.
    let d = [4, 7];
    let mut xv = round32(&rng.values(28, SPECIAL));
    xv[3] = 80.0;
    xv[4] = 1e30;
    let x: Tensor<Cpu, f32, S2> = tensor(&xv, &d);
    let want = [
        logsumexp_ref(&xv, &d, 1, EPS32),
        logsumexp_ref(&xv, &d, 0, EPS32),
    ];
    check_all("f32 logsumexp", &logsumexp32(&x).unwrap().outs(), &want);
    check(
        "typed f32 logsumexp",
        &one(&x.logsumexp::<1>().unwrap()),
        &want[0],
    );
}

// ---------------------------------------------------------------------
// matmul (every pair of ranks 1 to 4), mm, bmm, dot, addmm.
// ---------------------------------------------------------------------

/// `matmul(a, b)` and `a.matmul(b)` for one pairing of ranks; batch dims
/// written `1` broadcast against the other operand's.
macro_rules! matmul_fns {
    ($($name:ident: [$($a:tt),*] x [$($b:tt),*] -> [$($o:tt),*];)*) => {
        tensor_fn! {$(
            fn $name(a: &Tensor<Cpu, f64, [$($a),*]>, b: &Tensor<Cpu, f64, [$($b),*]>) -> (
                Tensor<Cpu, f64, [$($o),*]>, Tensor<Cpu, f64, [$($o),*]>,
            ) {
                (matmul(a, b), a.matmul(b))
            }
        )*}
    };
}

matmul_fns! {
    mm_1x1: [K] x [K] -> [];
    mm_1x2: [K] x [K, N] -> [N];
    mm_1x3: [K] x [P, K, N] -> [P, N];
    mm_1x4: [K] x [P, Q, K, N] -> [P, Q, N];
    mm_2x1: [M, K] x [K] -> [M];
    mm_2x2: [M, K] x [K, N] -> [M, N];
    mm_2x3: [M, K] x [P, K, N] -> [P, M, N];
    mm_2x4: [M, K] x [P, Q, K, N] -> [P, Q, M, N];
    mm_3x1: [P, M, K] x [K] -> [P, M];
    mm_3x2: [P, M, K] x [K, N] -> [P, M, N];
    mm_3x3: [P, M, K] x [P, K, N] -> [P, M, N];
    mm_3x3b: [P, M, K] x [1, K, N] -> [P, M, N];
    mm_3x4: [P, M, K] x [Q, 1, K, N] -> [Q, P, M, N];
    mm_4x1: [P, Q, M, K] x [K] -> [P, Q, M];
    mm_4x2: [P, Q, M, K] x [K, N] -> [P, Q, M, N];
    mm_4x3: [P, 1, M, K] x [Q, K, N] -> [P, Q, M, N];
    mm_4x4: [P, Q, M, K] x [P, Q, K, N] -> [P, Q, M, N];
    mm_4x4b: [P, 1, M, K] x [1, Q, K, N] -> [P, Q, M, N];
}

tensor_fn! {
    fn matmul32(a: &Tensor<Cpu, f32, [P, 1, M, K]>, b: &Tensor<Cpu, f32, [Q, K, N]>) -> Tensor<Cpu, f32, [P, Q, M, N]> {
        a.matmul(b)
    }
    fn mm2(a: &Tensor<Cpu, f64, [M, K]>, b: &Tensor<Cpu, f64, [K, N]>) -> (Tensor<Cpu, f64, [M, N]>, Tensor<Cpu, f64, [M, N]>) {
        (mm(a, b), a.mm(b))
    }
    fn bmm3(a: &Tensor<Cpu, f64, [P, M, K]>, b: &Tensor<Cpu, f64, [P, K, N]>) -> (Tensor<Cpu, f64, [P, M, N]>, Tensor<Cpu, f64, [P, M, N]>) {
        (bmm(a, b), a.bmm(b))
    }
    fn dot1(a: &Tensor<Cpu, f64, [K]>, b: &Tensor<Cpu, f64, [K]>) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>) {
        (dot(a, b), a.dot(b))
    }
}

/// Dims for a matmul case: `[M, K]`-style letters mapped to sizes, a
/// literal `1` kept.
fn letters(spec: &[&str], size: &dyn Fn(&str) -> usize) -> Vec<usize> {
    spec.iter().map(|s| size(s)).collect()
}

/// Every matmul pairing, `mm`, `bmm` and `dot` with the sizes `sz` of
/// the letters `M K N P Q`, NaN and infinities among the inputs with
/// `special` (IEEE products and sums).
fn walk_matmul(rng: &mut Rng, sz: [usize; 5], special: &[f64]) {
    {
        let size = |s: &str| match s {
            "M" => sz[0],
            "K" => sz[1],
            "N" => sz[2],
            "P" => sz[3],
            "Q" => sz[4],
            _ => 1,
        };
        macro_rules! case {
            ($f:ident, [$($a:tt),*], [$($b:tt),*], $typed:ident $(::<$so:ty>)?) => {{
                let ad = letters(&[$(stringify!($a)),*], &size);
                let bd = letters(&[$(stringify!($b)),*], &size);
                let av = rng.values(numel(&ad), special);
                let bv = rng.values(numel(&bd), special);
                let a = tensor(&av, &ad);
                let b = tensor(&bv, &bd);
                let want = matmul_ref(&av, &ad, &bv, &bd, EPS);
                let what = format!("{} of {ad:?} and {bd:?}", stringify!($f));
                let got = $f(&a, &b).unwrap_or_else(|e| panic!("{what}: {e}"));
                check_all(&what, &got.outs(), &[want.clone(), want.clone()]);
                let typed = a.$typed$(::<$so>)?(&b).unwrap_or_else(|e| panic!("typed {what}: {e}"));
                check(&format!("typed {what}"), &one(&typed), &want);
            }};
        }
        case!(mm_1x1, [K], [K], matmul);
        case!(mm_1x2, [K], [K, N], matmul);
        case!(mm_1x3, [K], [P, K, N], matmul);
        case!(mm_1x4, [K], [P, Q, K, N], matmul);
        case!(mm_2x1, [M, K], [K], matmul);
        case!(mm_2x2, [M, K], [K, N], matmul);
        case!(mm_2x3, [M, K], [P, K, N], matmul);
        case!(mm_2x4, [M, K], [P, Q, K, N], matmul);
        case!(mm_3x1, [P, M, K], [K], matmul);
        case!(mm_3x2, [P, M, K], [K, N], matmul);
        case!(mm_3x3, [P, M, K], [P, K, N], matmul);
        case!(mm_3x3b, [P, M, K], [1, K, N], matmul_broadcast::<S3>);
        case!(mm_3x4, [P, M, K], [Q, 1, K, N], matmul_broadcast::<S4>);
        case!(mm_4x1, [P, Q, M, K], [K], matmul);
        case!(mm_4x2, [P, Q, M, K], [K, N], matmul);
        case!(mm_4x3, [P, 1, M, K], [Q, K, N], matmul_broadcast::<S4>);
        case!(mm_4x4, [P, Q, M, K], [P, Q, K, N], matmul);
        case!(mm_4x4b, [P, 1, M, K], [1, Q, K, N], matmul_broadcast::<S4>);

        // mm, bmm, dot: their one rank, the typed API's own methods.
        let (m, k, n, p) = (sz[0], sz[1], sz[2], sz[3]);
        let (av, bv) = (rng.values(m * k, special), rng.values(k * n, special));
        let (a, b): (Tensor<Cpu, f64, S2>, Tensor<Cpu, f64, S2>) =
            (tensor(&av, &[m, k]), tensor(&bv, &[k, n]));
        let want = matmul_ref(&av, &[m, k], &bv, &[k, n], EPS);
        check_all(
            "mm",
            &mm2(&a, &b).unwrap().outs(),
            &[want.clone(), want.clone()],
        );
        check("typed mm", &one(&a.matmul(&b).unwrap()), &want);
        let (av, bv) = (
            rng.values(p * m * k, special),
            rng.values(p * k * n, special),
        );
        let (a, b): (Tensor<Cpu, f64, S3>, Tensor<Cpu, f64, S3>) =
            (tensor(&av, &[p, m, k]), tensor(&bv, &[p, k, n]));
        let want = matmul_ref(&av, &[p, m, k], &bv, &[p, k, n], EPS);
        check_all(
            "bmm",
            &bmm3(&a, &b).unwrap().outs(),
            &[want.clone(), want.clone()],
        );
        check("typed bmm", &one(&a.bmm(&b).unwrap()), &want);
        let (av, bv) = (rng.values(k, special), rng.values(k, special));
        let (a, b): (Tensor<Cpu, f64, S1>, Tensor<Cpu, f64, S1>) =
            (tensor(&av, &[k]), tensor(&bv, &[k]));
        let want = matmul_ref(&av, &[k], &bv, &[k], EPS);
        check_all(
            "dot",
            &dot1(&a, &b).unwrap().outs(),
            &[want.clone(), want.clone()],
        );
        check("typed dot", &one(&a.dot(&b).unwrap()), &want);

        // f32, batch broadcast.
        let (ad, bd) = ([p, 1, m, k], [sz[4], k, n]);
        let av = round32(&rng.values(numel(&ad), special));
        let bv = round32(&rng.values(numel(&bd), special));
        let (a, b): (Tensor<Cpu, f32, Batch1>, Tensor<Cpu, f32, S3>) =
            (tensor(&av, &ad), tensor(&bv, &bd));
        let want = matmul_ref(&av, &ad, &bv, &bd, EPS32);
        check("f32 matmul", &one(&matmul32(&a, &b).unwrap()), &want);
        check(
            "typed f32 matmul",
            &one(&a.matmul_broadcast::<S4>(&b).unwrap()),
            &want,
        );
    }
}

#[test]
fn matmul_every_pair_of_ranks() {
    let mut rng = Rng::new(301);
    walk_matmul(&mut rng, [3, 4, 5, 2, 3], &[]);
    walk_matmul(&mut rng, [1, 7, 2, 3, 1], &[]);
    walk_matmul(&mut rng, [4, 5, 3, 3, 2], SPECIAL);
}

#[test]
fn matmul_with_empty_dims() {
    let mut rng = Rng::new(302);
    walk_matmul(&mut rng, [2, 0, 3, 2, 2], &[]); // k = 0: sums of nothing, zeros
    walk_matmul(&mut rng, [0, 3, 2, 2, 2], &[]); // m = 0
    walk_matmul(&mut rng, [2, 3, 0, 2, 2], &[]); // n = 0
}

#[test]
fn matmul_with_an_empty_batch() {
    let mut rng = Rng::new(303);
    walk_matmul(&mut rng, [2, 3, 2, 0, 2], &[]);
}

tensor_fn! {
    fn addmm_scalar(bias: &Tensor<Cpu, f64, []>, m1: &Tensor<Cpu, f64, [M, K]>, m2: &Tensor<Cpu, f64, [K, N]>) -> Tensor<Cpu, f64, [M, N]> {
        addmm(bias, m1, m2)
    }
    fn addmm_row(bias: &Tensor<Cpu, f64, [N]>, m1: &Tensor<Cpu, f64, [M, K]>, m2: &Tensor<Cpu, f64, [K, N]>) -> Tensor<Cpu, f64, [M, N]> {
        addmm(bias, m1, m2, beta = 0.5, alpha = 2.0)
    }
    fn addmm_one(bias: &Tensor<Cpu, f64, [1]>, m1: &Tensor<Cpu, f64, [M, K]>, m2: &Tensor<Cpu, f64, [K, N]>) -> Tensor<Cpu, f64, [M, N]> {
        addmm(bias, m1, m2, alpha = -1.0)
    }
    fn addmm_row2(bias: &Tensor<Cpu, f64, [1, N]>, m1: &Tensor<Cpu, f64, [M, K]>, m2: &Tensor<Cpu, f64, [K, N]>) -> Tensor<Cpu, f64, [M, N]> {
        addmm(bias, m1, m2, 2.0, 0.5)
    }
    /// `beta = 0`: the bias is ignored, NaN included (PyTorch).
    fn addmm_col(bias: &Tensor<Cpu, f64, [M, 1]>, m1: &Tensor<Cpu, f64, [M, K]>, m2: &Tensor<Cpu, f64, [K, N]>) -> Tensor<Cpu, f64, [M, N]> {
        addmm(bias, m1, m2, beta = 0.0)
    }
    fn addmm_full(bias: &Tensor<Cpu, f64, [M, N]>, m1: &Tensor<Cpu, f64, [M, K]>, m2: &Tensor<Cpu, f64, [K, N]>) -> Tensor<Cpu, f64, [M, N]> {
        addmm(input = bias, mat1 = m1, mat2 = m2)
    }
}

/// `beta * bias + alpha * (m1 @ m2)`, the bias broadcast (ignored when
/// `beta` is 0).
fn addmm_ref(
    bias: (&[f64], &[usize]),
    m1: &[f64],
    m2: &[f64],
    mkn: [usize; 3],
    beta: f64,
    alpha: f64,
) -> Want {
    let [m, k, n] = mkn;
    let p = matmul_ref(m1, &[m, k], m2, &[k, n], EPS);
    let mut w = p.clone();
    for i in 0..m * n {
        let b = bget(bias.0, bias.1, &[i / n, i % n]);
        let b = if beta == 0.0 { 0.0 } else { beta * b };
        w.vals[i] = b + alpha * p.vals[i];
        w.tol[i] = alpha.abs() * p.tol[i] + 2.0 * EPS * (b.abs() + (alpha * p.vals[i]).abs());
    }
    w
}

#[test]
fn addmm_every_bias_shape() {
    let mut rng = Rng::new(302);
    for (m, k, n) in [(3, 4, 5), (1, 1, 1), (2, 0, 3), (0, 2, 3), (4, 3, 0)] {
        let (v1, v2) = (rng.values(m * k, &[]), rng.values(k * n, &[]));
        let (m1, m2): (Tensor<Cpu, f64, S2>, Tensor<Cpu, f64, S2>) =
            (tensor(&v1, &[m, k]), tensor(&v2, &[k, n]));
        let what = |b: &str| format!("addmm, bias {b}, [{m}, {k}] x [{k}, {n}]");
        let mkn = [m, k, n];

        let bv = rng.values(1, &[]);
        let b0: Tensor<Cpu, f64, S0> = tensor(&bv, &[]);
        let want = addmm_ref((&bv, &[]), &v1, &v2, mkn, 1.0, 1.0);
        check(
            &what("[]"),
            &one(&addmm_scalar(&b0, &m1, &m2).unwrap()),
            &want,
        );
        check(
            &what("[] typed"),
            &one(&Tensor::addmm(&b0, &m1, &m2).unwrap()),
            &want,
        );

        let bv = rng.values(n, &[]);
        let b1: Tensor<Cpu, f64, S1> = tensor(&bv, &[n]);
        let want = addmm_ref((&bv, &[n]), &v1, &v2, mkn, 0.5, 2.0);
        check(
            &what("[N]"),
            &one(&addmm_row(&b1, &m1, &m2).unwrap()),
            &want,
        );
        let typed = Tensor::addmm_scaled(&b1, &m1, &m2, 0.5, 2.0).unwrap();
        check(&what("[N] typed"), &one(&typed), &want);

        let bv = rng.values(1, &[]);
        let b: Tensor<Cpu, f64, shape![1]> = tensor(&bv, &[1]);
        let want = addmm_ref((&bv, &[1]), &v1, &v2, mkn, 1.0, -1.0);
        check(&what("[1]"), &one(&addmm_one(&b, &m1, &m2).unwrap()), &want);
        let b_dyn: Tensor<Cpu, f64, S1> = tensor(&bv, &[1]);
        let typed = Tensor::addmm_scaled(&b_dyn, &m1, &m2, 1.0, -1.0).unwrap();
        check(&what("[1] typed"), &one(&typed), &want);

        let bv = rng.values(n, &[]);
        let b: Tensor<Cpu, f64, shape![1, _]> = tensor(&bv, &[1, n]);
        let want = addmm_ref((&bv, &[1, n]), &v1, &v2, mkn, 2.0, 0.5);
        check(
            &what("[1, N]"),
            &one(&addmm_row2(&b, &m1, &m2).unwrap()),
            &want,
        );
        let b_dyn: Tensor<Cpu, f64, S2> = tensor(&bv, &[1, n]);
        let typed = Tensor::addmm_scaled(&b_dyn, &m1, &m2, 2.0, 0.5).unwrap();
        check(&what("[1, N] typed"), &one(&typed), &want);

        let bv = rng.values(m, SPECIAL);
        let b: Tensor<Cpu, f64, shape![_, 1]> = tensor(&bv, &[m, 1]);
        let want = addmm_ref((&bv, &[m, 1]), &v1, &v2, mkn, 0.0, 1.0);
        check(
            &what("[M, 1], beta 0"),
            &one(&addmm_col(&b, &m1, &m2).unwrap()),
            &want,
        );
        let b_dyn: Tensor<Cpu, f64, S2> = tensor(&bv, &[m, 1]);
        let typed = Tensor::addmm_scaled(&b_dyn, &m1, &m2, 0.0, 1.0).unwrap();
        check(&what("[M, 1], beta 0, typed"), &one(&typed), &want);

        let bv = rng.values(m * n, SPECIAL);
        let b: Tensor<Cpu, f64, S2> = tensor(&bv, &[m, n]);
        let want = addmm_ref((&bv, &[m, n]), &v1, &v2, mkn, 1.0, 1.0);
        check(
            &what("[M, N]"),
            &one(&addmm_full(&b, &m1, &m2).unwrap()),
            &want,
        );
        check(
            &what("[M, N] typed"),
            &one(&Tensor::addmm(&b, &m1, &m2).unwrap()),
            &want,
        );
    }
}

// ---------------------------------------------------------------------
// cat along each dim of ranks 1 to 4.
// ---------------------------------------------------------------------

tensor_fn! {
    fn cat1(a: &Tensor<Cpu, f64, [A]>, b: &Tensor<Cpu, f64, [B]>) -> Tensor<Cpu, f64, [A + B]> {
        cat([a, b], 0)
    }
    fn cat1n(a: &Tensor<Cpu, f64, [A]>, b: &Tensor<Cpu, f64, [B]>, c: &Tensor<Cpu, f64, [C]>) -> Tensor<Cpu, f64, [A + B + C]> {
        cat([a, b, c], -1)
    }
    fn cat2_0(a: &Tensor<Cpu, f64, [A, N]>, b: &Tensor<Cpu, f64, [B, N]>) -> Tensor<Cpu, f64, [A + B, N]> {
        cat([a, b], 0)
    }
    fn cat2_1(a: &Tensor<Cpu, f64, [N, A]>, b: &Tensor<Cpu, f64, [N, B]>, c: &Tensor<Cpu, f64, [N, C]>) -> Tensor<Cpu, f64, [N, A + B + C]> {
        cat([a, b, c], dim = 1)
    }
    fn cat3_0(a: &Tensor<Cpu, f64, [A, N, M]>, b: &Tensor<Cpu, f64, [B, N, M]>) -> Tensor<Cpu, f64, [A + B, N, M]> {
        cat([a, b], -3)
    }
    fn cat3_1(a: &Tensor<Cpu, f64, [N, A, M]>, b: &Tensor<Cpu, f64, [N, B, M]>, c: &Tensor<Cpu, f64, [N, C, M]>) -> Tensor<Cpu, f64, [N, A + B + C, M]> {
        cat([a, b, c], 1)
    }
    fn cat3_2(a: &Tensor<Cpu, f64, [N, M, A]>, b: &Tensor<Cpu, f64, [N, M, B]>) -> Tensor<Cpu, f64, [N, M, A + B]> {
        cat(tensors = [a, b], dim = -1)
    }
    fn cat4_0(a: &Tensor<Cpu, f64, [A, N, M, K]>, b: &Tensor<Cpu, f64, [B, N, M, K]>) -> Tensor<Cpu, f64, [A + B, N, M, K]> {
        cat([a, b], 0)
    }
    fn cat4_1(a: &Tensor<Cpu, f64, [N, A, M, K]>, b: &Tensor<Cpu, f64, [N, B, M, K]>, c: &Tensor<Cpu, f64, [N, C, M, K]>) -> Tensor<Cpu, f64, [N, A + B + C, M, K]> {
        cat([a, b, c], -3)
    }
    fn cat4_2(a: &Tensor<Cpu, f64, [N, M, A, K]>, b: &Tensor<Cpu, f64, [N, M, B, K]>) -> Tensor<Cpu, f64, [N, M, A + B, K]> {
        cat([a, b], 2)
    }
    fn cat4_3(a: &Tensor<Cpu, f64, [N, M, K, A]>, b: &Tensor<Cpu, f64, [N, M, K, B]>, c: &Tensor<Cpu, f64, [N, M, K, C]>) -> Tensor<Cpu, f64, [N, M, K, A + B + C]> {
        cat([a, b, c], 3)
    }
    fn cat_int(a: &Tensor<Cpu, i32, [N, A]>, b: &Tensor<Cpu, i32, [N, B]>) -> Tensor<Cpu, i32, [N, A + B]> {
        cat([a, b], 1)
    }
}

/// Dims of each `cat` operand: `base` with `dim` set to each size.
fn cat_dims(base: &[usize], dim: usize, sizes: &[usize]) -> Vec<Vec<usize>> {
    sizes
        .iter()
        .map(|&s| {
            let mut d = base.to_vec();
            d[dim] = s;
            d
        })
        .collect()
}

#[test]
fn cat_along_each_dim() {
    let mut rng = Rng::new(401);
    // Sizes along the cat dim (one empty operand in round 1), and the
    // other dims (all empty in round 2).
    for round in 0..3 {
        let sizes: Vec<usize> = match round {
            1 => vec![2, 0, 3],
            _ => rng.dims(3, 1, 4),
        };
        let base = match round {
            2 => vec![0, 2, 0, 1],
            _ => rng.dims(4, 1, 3),
        };
        macro_rules! case {
            ($f:ident, $rank:literal, $dim:literal, $n:tt, $S:ty) => {{
                let ds = cat_dims(&base[..$rank], $dim, &sizes[..$n]);
                let vs: Vec<Vec<f64>> = ds.iter().map(|d| rng.values(numel(d), SPECIAL)).collect();
                let ts: Vec<Tensor<Cpu, f64, $S>> = vs.iter().zip(&ds).map(|(v, d)| tensor(v, d)).collect();
                let parts: Vec<(&[f64], &[usize])> = vs.iter().zip(&ds).map(|(v, d)| (&v[..], &d[..])).collect();
                let want = cat_ref(&parts, $dim);
                let what = format!("{} of {ds:?}", stringify!($f));
                let got = case!(@call $f, ts, $n).unwrap_or_else(|e| panic!("{what}: {e}"));
                check(&what, &one(&got), &want);
                let typed = case!(@typed ts, $dim, $n, $S).unwrap_or_else(|e| panic!("typed {what}: {e}"));
                check(&format!("typed {what}"), &one(&typed), &want);
            }};
            (@call $f:ident, $ts:ident, 2) => { $f(&$ts[0], &$ts[1]) };
            (@call $f:ident, $ts:ident, 3) => { $f(&$ts[0], &$ts[1], &$ts[2]) };
            (@typed $ts:ident, $dim:literal, 2, $S:ty) => { $ts[0].cat::<$dim, $S>(&$ts[1]) };
            (@typed $ts:ident, $dim:literal, 3, $S:ty) => { Tensor::cat_slice::<$dim, $S>(&[&$ts[0], &$ts[1], &$ts[2]]) };
        }
        case!(cat1, 1, 0, 2, S1);
        case!(cat1n, 1, 0, 3, S1);
        case!(cat2_0, 2, 0, 2, S2);
        case!(cat2_1, 2, 1, 3, S2);
        case!(cat3_0, 3, 0, 2, S3);
        case!(cat3_1, 3, 1, 3, S3);
        case!(cat3_2, 3, 2, 2, S3);
        case!(cat4_0, 4, 0, 2, S4);
        case!(cat4_1, 4, 1, 3, S4);
        case!(cat4_2, 4, 2, 2, S4);
        case!(cat4_3, 4, 3, 3, S4);
    }
    let a = Tensor::<Cpu, i32, S2>::from_vec_dims(vec![1, 2, 3, 4], &[2, 2]).unwrap();
    let b = Tensor::<Cpu, i32, S2>::from_vec_dims(vec![-5, -6], &[2, 1]).unwrap();
    assert_eq!(
        cat_int(&a, &b).unwrap().to_vec().unwrap(),
        vec![1, 2, -5, 3, 4, -6]
    );
}

// ---------------------------------------------------------------------
// reshape, view, t, permute, transpose, narrow.
// ---------------------------------------------------------------------

tensor_fn! {
    fn reshape0(x: &Tensor<Cpu, f64, []>) -> (Tensor<Cpu, f64, [1]>, Tensor<Cpu, f64, [1, 1, 1, 1]>, Tensor<Cpu, f64, [1]>) {
        (x.reshape([1]), x.view([1, 1, 1, 1]), x.view([-1]))
    }
    fn reshape_to0(x: &Tensor<Cpu, f64, [1, 1]>) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>) {
        (x.reshape([]), x.view([]))
    }
    fn reshape1(x: &Tensor<Cpu, f64, [A]>) -> (Tensor<Cpu, f64, [A, 1]>, Tensor<Cpu, f64, [1, A, 1]>, Tensor<Cpu, f64, [A]>) {
        (x.reshape([A, 1]), x.view([1, -1, 1]), x.reshape(-1))
    }
    fn reshape2(x: &Tensor<Cpu, f64, [A, B]>) -> (Tensor<Cpu, f64, [A * B]>, Tensor<Cpu, f64, [B, A]>, Tensor<Cpu, f64, [A, 1, B]>, Tensor<Cpu, f64, [1, A, B, 1]>) {
        (x.view([-1]), x.reshape_unordered([B, A]), x.view(A, 1, B), x.reshape([1, A, -1, 1]))
    }
    fn reshape3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (Tensor<Cpu, f64, [A * B, C]>, Tensor<Cpu, f64, [A, B * C]>, Tensor<Cpu, f64, [C, B, A]>, Tensor<Cpu, f64, [A * B * C]>) {
        (x.reshape([A * B, C]), x.view([A, -1]), x.reshape_unordered([C, B, A]), x.view([-1]))
    }
    fn reshape4(x: &Tensor<Cpu, f64, [A, B, C, E]>) -> (Tensor<Cpu, f64, [A * B, C * E]>, Tensor<Cpu, f64, [A, B * C, E]>, Tensor<Cpu, f64, [E, C, B, A]>, Tensor<Cpu, f64, [A * B * C * E]>) {
        (x.view([A * B, C * E]), x.reshape([A, -1, E]), x.view_unordered([E, C, B, A]), x.reshape([-1]))
    }
    /// A copy of a transposed (non-contiguous) input.
    fn reshape_t(x: &Tensor<Cpu, f64, [A, B]>) -> Tensor<Cpu, f64, [A * B]> {
        x.t().reshape([-1])
    }
    /// `view` of a transposed input: no view exists, so an `Err`.
    fn view_t(x: &Tensor<Cpu, f64, [A, B]>) -> Tensor<Cpu, f64, [A * B]> {
        x.t().view([-1])
    }
    fn reshape_empty(x: &Tensor<Cpu, f64, [A, B, C]>) -> (Tensor<Cpu, f64, [A * B * C]>, Tensor<Cpu, f64, [C, B, A]>, Tensor<Cpu, f64, [A, B * C]>) {
        (x.reshape([-1]), x.reshape_unordered([C, B, A]), x.reshape([A, B * C]))
    }
    fn reshape_static(x: &Tensor<Cpu, f64, [2, 3, 4]>) -> (Tensor<Cpu, f64, [4, 6]>, Tensor<Cpu, f64, [24]>) {
        (x.reshape([4, 6]), x.view([-1]))
    }
}

/// `reshape` and `view` of inputs of dims `d` (ranks 0 to 4), in the
/// macro and the typed API.
fn walk_reshape(rng: &mut Rng, d: [Vec<usize>; 5]) {
    {
        let (xv, x) = inputs_by_rank(rng, &d, SPECIAL);
        let same = |v: &[f64], dims: Vec<usize>| Want::bits(dims, v.to_vec());
        let (a, b, c) = (d[3][0], d[3][1], d[3][2]);
        {
            check_all(
                "reshape of rank 0",
                &reshape0(&x.0).unwrap().outs(),
                &[
                    same(&xv.0, vec![1]),
                    same(&xv.0, vec![1, 1, 1, 1]),
                    same(&xv.0, vec![1]),
                ],
            );
            let x11: Tensor<Cpu, f64, shape![1, 1]> = tensor(&xv.0, &[1, 1]);
            let w0 = same(&xv.0, vec![]);
            check_all(
                "reshape to rank 0",
                &reshape_to0(&x11).unwrap().outs(),
                &[w0.clone(), w0.clone()],
            );
            check(
                "typed reshape to rank 0",
                &one(&x11.reshape_dims::<S0>(&[]).unwrap()),
                &w0,
            );
            check(
                "typed view of rank 0",
                &one(&x.0.view_dims::<S4>(&[1, 1, 1, 1]).unwrap()),
                &same(&xv.0, vec![1, 1, 1, 1]),
            );
        }
        let n = d[1][0];
        check_all(
            &format!("reshape of {:?}", d[1]),
            &reshape1(&x.1).unwrap().outs(),
            &[
                same(&xv.1, vec![n, 1]),
                same(&xv.1, vec![1, n, 1]),
                same(&xv.1, vec![n]),
            ],
        );
        check(
            "typed reshape of rank 1",
            &one(&x.1.reshape_dims::<S3>(&[1, n, 1]).unwrap()),
            &same(&xv.1, vec![1, n, 1]),
        );
        let (p, q) = (d[2][0], d[2][1]);
        check_all(
            &format!("reshape of {:?}", d[2]),
            &reshape2(&x.2).unwrap().outs(),
            &[
                same(&xv.2, vec![p * q]),
                same(&xv.2, vec![q, p]),
                same(&xv.2, vec![p, 1, q]),
                same(&xv.2, vec![1, p, q, 1]),
            ],
        );
        check(
            "typed view of rank 2",
            &one(&x.2.view_dims::<S1>(&[p * q]).unwrap()),
            &same(&xv.2, vec![p * q]),
        );
        check_all(
            &format!("reshape of {:?}", d[3]),
            &reshape3(&x.3).unwrap().outs(),
            &[
                same(&xv.3, vec![a * b, c]),
                same(&xv.3, vec![a, b * c]),
                same(&xv.3, vec![c, b, a]),
                same(&xv.3, vec![a * b * c]),
            ],
        );
        check(
            "typed reshape of rank 3",
            &one(&x.3.reshape_dims::<S2>(&[a * b, c]).unwrap()),
            &same(&xv.3, vec![a * b, c]),
        );
        let e4 = &d[4];
        let (a4, b4, c4, d4) = (e4[0], e4[1], e4[2], e4[3]);
        check_all(
            &format!("reshape of {e4:?}"),
            &reshape4(&x.4).unwrap().outs(),
            &[
                same(&xv.4, vec![a4 * b4, c4 * d4]),
                same(&xv.4, vec![a4, b4 * c4, d4]),
                same(&xv.4, vec![d4, c4, b4, a4]),
                same(&xv.4, vec![a4 * b4 * c4 * d4]),
            ],
        );
        check(
            "typed view of rank 4",
            &one(&x.4.view_dims::<S3>(&[a4, b4 * c4, d4]).unwrap()),
            &same(&xv.4, vec![a4, b4 * c4, d4]),
        );
        // Non-contiguous: reshape copies, view is an Err (unless the
        // transpose moved nothing).
        let t = transpose_ref(&xv.2, &d[2], 0, 1);
        check(
            "reshape of x.t()",
            &one(&reshape_t(&x.2).unwrap()),
            &Want::bits(vec![p * q], t.vals.clone()),
        );
        let trivial = p <= 1 || q <= 1;
        match view_t(&x.2) {
            Ok(_) => assert!(trivial, "view of a transposed {:?} should be an Err", d[2]),
            Err(e) => assert!(!trivial, "view of a transposed {:?}: {e}", d[2]),
        }
        let _ =
            x.2.t()
                .unwrap()
                .view_dims::<S1>(&[p * q])
                .map(|_| assert!(trivial));
    }
}

#[test]
fn view_of_empty_tensors() {
    let mut rng = Rng::new(503);
    let d = empty_dims(&mut rng);
    walk_reshape(&mut rng, d);
}

#[test]
fn reshape_and_view_at_every_rank() {
    let mut rng = Rng::new(501);
    for _ in 0..2 {
        let d = random_dims(&mut rng, 1, 4);
        walk_reshape(&mut rng, d);
    }
    // Reshapes of empty tensors: the element count (0) decides.
    for d in [[0, 2, 3], [2, 0, 3], [2, 3, 0], [0, 0, 0]] {
        let x = Tensor::<Cpu, f64, S3>::zeros_dims(&d).unwrap();
        let (a, b, c) = (d[0], d[1], d[2]);
        let want = [
            Want::bits(vec![0], vec![]),
            Want::bits(vec![c, b, a], vec![]),
            Want::bits(vec![a, b * c], vec![]),
        ];
        check_all(
            &format!("reshape of {d:?}"),
            &reshape_empty(&x).unwrap().outs(),
            &want,
        );
        check(
            &format!("typed reshape of {d:?}"),
            &one(&x.reshape_dims::<S3>(&[c, b, a]).unwrap()),
            &want[1],
        );
    }
    let v: Vec<f64> = (0..24).map(|i| i as f64 - 11.5).collect();
    let x: Tensor<Cpu, f64, shape![2, 3, 4]> = tensor(&v, &[2, 3, 4]);
    check_all(
        "reshape of static dims",
        &reshape_static(&x).unwrap().outs(),
        &[
            Want::bits(vec![4, 6], v.clone()),
            Want::bits(vec![24], v.clone()),
        ],
    );
    check(
        "typed static reshape",
        &one(&x.reshape::<shape![4, 6]>().unwrap()),
        &Want::bits(vec![4, 6], v.clone()),
    );
    check(
        "typed static view",
        &one(&x.view::<shape![24]>().unwrap()),
        &Want::bits(vec![24], v),
    );
}

tensor_fn! {
    /// `t` at each rank it accepts (0, 1, 2).
    fn t012(x0: &Tensor<Cpu, f64, []>, x1: &Tensor<Cpu, f64, [A]>, x2: &Tensor<Cpu, f64, [C, B]>) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [B, C]>) {
        (x0.t(), x1.t(), x2.t())
    }
    fn permute0(x: &Tensor<Cpu, f64, []>) -> Tensor<Cpu, f64, []> {
        x.permute([])
    }
    fn permute1(x: &Tensor<Cpu, f64, [A]>) -> (Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>) {
        (x.permute([0]), x.permute([-1]))
    }
    fn permute2(x: &Tensor<Cpu, f64, [A, B]>) -> (Tensor<Cpu, f64, [B, A]>, Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [B, A]>) {
        (x.permute([1, 0]), x.permute(0, 1), x.permute([-1, -2]))
    }
    fn permute3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (Tensor<Cpu, f64, [C, A, B]>, Tensor<Cpu, f64, [B, C, A]>, Tensor<Cpu, f64, [A, C, B]>, Tensor<Cpu, f64, [C, B, A]>) {
        (x.permute([2, 0, 1]), x.permute([1, 2, 0]), x.permute(0, 2, 1), x.permute([-1, 1, 0]))
    }
    fn permute4(x: &Tensor<Cpu, f64, [A, B, C, E]>) -> (Tensor<Cpu, f64, [E, C, B, A]>, Tensor<Cpu, f64, [B, A, E, C]>, Tensor<Cpu, f64, [A, C, E, B]>, Tensor<Cpu, f64, [C, E, A, B]>) {
        (x.permute([3, 2, 1, 0]), x.permute([1, 0, 3, 2]), x.permute([0, 2, -1, 1]), x.permute([2, 3, 0, 1]))
    }
    fn transpose1(x: &Tensor<Cpu, f64, [A]>) -> (Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>) {
        (x.transpose(0, 0), x.transpose(-1, 0))
    }
    fn transpose2(x: &Tensor<Cpu, f64, [A, B]>) -> (Tensor<Cpu, f64, [B, A]>, Tensor<Cpu, f64, [B, A]>, Tensor<Cpu, f64, [A, B]>) {
        (x.transpose(0, 1), x.transpose(-1, -2), x.transpose(dim0 = 1, dim1 = 1))
    }
    fn transpose3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (Tensor<Cpu, f64, [B, A, C]>, Tensor<Cpu, f64, [C, B, A]>, Tensor<Cpu, f64, [A, C, B]>, Tensor<Cpu, f64, [C, B, A]>) {
        (x.transpose(0, 1), x.transpose(0, 2), x.transpose(1, 2), x.transpose(-1, -3))
    }
    fn transpose4(x: &Tensor<Cpu, f64, [A, B, C, E]>) -> (
        Tensor<Cpu, f64, [B, A, C, E]>, Tensor<Cpu, f64, [C, B, A, E]>, Tensor<Cpu, f64, [E, B, C, A]>,
        Tensor<Cpu, f64, [A, C, B, E]>, Tensor<Cpu, f64, [A, E, C, B]>, Tensor<Cpu, f64, [A, B, E, C]>, Tensor<Cpu, f64, [E, B, C, A]>,
    ) {
        (x.transpose(0, 1), x.transpose(0, 2), x.transpose(0, 3), x.transpose(1, 2), x.transpose(1, 3), x.transpose(2, 3), x.transpose(-1, 0))
    }
}

/// `(d0, d1)` of each result of `transposeN`.
const TRANSPOSE_DIMS: [&[(isize, isize)]; 5] = [
    &[],
    &[(0, 0), (-1, 0)],
    &[(0, 1), (-1, -2), (1, 1)],
    &[(0, 1), (0, 2), (1, 2), (-1, -3)],
    &[(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (-1, 0)],
];

/// The permutations of each `permuteN`.
const PERMS: [&[&[usize]]; 5] = [
    &[&[]],
    &[&[0], &[0]],
    &[&[1, 0], &[0, 1], &[1, 0]],
    &[&[2, 0, 1], &[1, 2, 0], &[0, 2, 1], &[2, 1, 0]],
    &[&[3, 2, 1, 0], &[1, 0, 3, 2], &[0, 2, 3, 1], &[2, 3, 0, 1]],
];

#[test]
fn t_permute_transpose_at_every_rank() {
    let mut rng = Rng::new(601);
    for round in 0..3 {
        let d = if round == 2 {
            empty_dims(&mut rng)
        } else {
            random_dims(&mut rng, 1, 4)
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        let v = [&xv.0, &xv.1, &xv.2, &xv.3, &xv.4];
        let want_t = [
            Want::bits(vec![], xv.0.clone()),
            Want::bits(d[1].clone(), xv.1.clone()),
            transpose_ref(&xv.2, &d[2], 0, 1),
        ];
        check_all(
            "t at ranks 0-2",
            &t012(&x.0, &x.1, &x.2).unwrap().outs(),
            &want_t,
        );
        check("typed t rank 0", &one(&x.0.t().unwrap()), &want_t[0]);
        check("typed t rank 1", &one(&x.1.t().unwrap()), &want_t[1]);
        check("typed t rank 2", &one(&x.2.t().unwrap()), &want_t[2]);

        let perms = |r: usize| -> Vec<Want> {
            PERMS[r]
                .iter()
                .map(|p| permute_ref(v[r], &d[r], p))
                .collect()
        };
        let what = |op: &str, r: usize| format!("{op} at rank {r}, dims {:?}", d[r]);
        check_all(
            &what("permute", 0),
            &permute0(&x.0).unwrap().outs(),
            &perms(0),
        );
        check_all(
            &what("permute", 1),
            &permute1(&x.1).unwrap().outs(),
            &perms(1),
        );
        check_all(
            &what("permute", 2),
            &permute2(&x.2).unwrap().outs(),
            &perms(2),
        );
        check_all(
            &what("permute", 3),
            &permute3(&x.3).unwrap().outs(),
            &perms(3),
        );
        check_all(
            &what("permute", 4),
            &permute4(&x.4).unwrap().outs(),
            &perms(4),
        );
        let typed = |r: usize, got: Vec<Got>| {
            check_all(&format!("typed {}", what("permute", r)), &got, &perms(r))
        };
        typed(0, x.0.permute::<S0>(PERMS[0][0]).unwrap().outs());
        typed(
            1,
            [PERMS[1][0], PERMS[1][1]]
                .iter()
                .flat_map(|p| x.1.permute::<S1>(p).unwrap().outs())
                .collect(),
        );
        typed(
            2,
            PERMS[2]
                .iter()
                .flat_map(|p| x.2.permute::<S2>(p).unwrap().outs())
                .collect(),
        );
        typed(
            3,
            PERMS[3]
                .iter()
                .flat_map(|p| x.3.permute::<S3>(p).unwrap().outs())
                .collect(),
        );
        typed(
            4,
            PERMS[4]
                .iter()
                .flat_map(|p| x.4.permute::<S4>(p).unwrap().outs())
                .collect(),
        );

        let trs = |r: usize| -> Vec<Want> {
            TRANSPOSE_DIMS[r]
                .iter()
                .map(|&(a, b)| transpose_ref(v[r], &d[r], pos(a, r), pos(b, r)))
                .collect()
        };
        check_all(
            &what("transpose", 1),
            &transpose1(&x.1).unwrap().outs(),
            &trs(1),
        );
        check_all(
            &what("transpose", 2),
            &transpose2(&x.2).unwrap().outs(),
            &trs(2),
        );
        check_all(
            &what("transpose", 3),
            &transpose3(&x.3).unwrap().outs(),
            &trs(3),
        );
        check_all(
            &what("transpose", 4),
            &transpose4(&x.4).unwrap().outs(),
            &trs(4),
        );
        let pairs = |r: usize| {
            TRANSPOSE_DIMS[r]
                .iter()
                .map(move |&(a, b)| (pos(a, r), pos(b, r)))
        };
        let typed = |r: usize, got: Vec<Got>| {
            check_all(&format!("typed {}", what("transpose", r)), &got, &trs(r))
        };
        typed(
            1,
            pairs(1)
                .flat_map(|(a, b)| x.1.transpose::<S1>(a, b).unwrap().outs())
                .collect(),
        );
        typed(
            2,
            pairs(2)
                .flat_map(|(a, b)| x.2.transpose::<S2>(a, b).unwrap().outs())
                .collect(),
        );
        typed(
            3,
            pairs(3)
                .flat_map(|(a, b)| x.3.transpose::<S3>(a, b).unwrap().outs())
                .collect(),
        );
        typed(
            4,
            pairs(4)
                .flat_map(|(a, b)| x.4.transpose::<S4>(a, b).unwrap().outs())
                .collect(),
        );
    }
}

tensor_fn! {
    fn narrow1(x: &Tensor<Cpu, f64, [A]>, s: usize, len: usize) -> (Tensor<Cpu, f64, [len]>, Tensor<Cpu, f64, [len]>) {
        (x.narrow(0, s, len), x.narrow(-1, s, len))
    }
    fn narrow2(x: &Tensor<Cpu, f64, [A, B]>, s: usize, len: usize) -> (Tensor<Cpu, f64, [len, B]>, Tensor<Cpu, f64, [A, len]>, Tensor<Cpu, f64, [A, len]>) {
        (x.narrow(0, s, len), x.narrow(1, s, len), x.narrow(dim = -1, start = s, length = len))
    }
    fn narrow3(x: &Tensor<Cpu, f64, [A, B, C]>, s: usize, len: usize) -> (Tensor<Cpu, f64, [len, B, C]>, Tensor<Cpu, f64, [A, len, C]>, Tensor<Cpu, f64, [A, B, len]>, Tensor<Cpu, f64, [A, len, C]>) {
        (x.narrow(0, s, len), x.narrow(1, s, len), x.narrow(2, s, len), x.narrow(-2, s, len))
    }
    fn narrow4(x: &Tensor<Cpu, f64, [A, B, C, E]>, s: usize, len: usize) -> (
        Tensor<Cpu, f64, [len, B, C, E]>, Tensor<Cpu, f64, [A, len, C, E]>, Tensor<Cpu, f64, [A, B, len, E]>,
        Tensor<Cpu, f64, [A, B, C, len]>, Tensor<Cpu, f64, [A, len, C, E]>,
    ) {
        (x.narrow(0, s, len), x.narrow(1, s, len), x.narrow(2, s, len), x.narrow(3, s, len), x.narrow(-3, s, len))
    }
    /// Literal start and length.
    fn narrow_lit(x: &Tensor<Cpu, f64, [A, B, C]>) -> (Tensor<Cpu, f64, [A, 2, C]>, Tensor<Cpu, f64, [A, B, 0]>) {
        (x.narrow(1, 1, 2), x.narrow(-1, 0, 0))
    }
}

/// The dims each `narrowN` narrows, in its order.
const NARROW_DIMS: [&[isize]; 5] = [
    &[],
    &[0, -1],
    &[0, 1, -1],
    &[0, 1, 2, -2],
    &[0, 1, 2, 3, -3],
];

#[test]
fn narrow_along_each_dim() {
    let mut rng = Rng::new(701);
    // (start, len) against dims of at least 3; then past the end: an Err.
    for (s, len) in [(0, 3), (1, 2), (2, 1), (3, 0), (1, 0), (0, 1)] {
        let d = random_dims(&mut rng, 3, 5);
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        let v = [&xv.0, &xv.1, &xv.2, &xv.3, &xv.4];
        let refs = |r: usize| -> Vec<Want> {
            NARROW_DIMS[r]
                .iter()
                .map(|&k| narrow_ref(v[r], &d[r], pos(k, r), s, len))
                .collect()
        };
        let what = |r: usize| format!("narrow({s}, {len}) at rank {r}, dims {:?}", d[r]);
        check_all(&what(1), &narrow1(&x.1, s, len).unwrap().outs(), &refs(1));
        check_all(&what(2), &narrow2(&x.2, s, len).unwrap().outs(), &refs(2));
        check_all(&what(3), &narrow3(&x.3, s, len).unwrap().outs(), &refs(3));
        check_all(&what(4), &narrow4(&x.4, s, len).unwrap().outs(), &refs(4));
        let typed =
            |r: usize, got: Vec<Got>| check_all(&format!("typed {}", what(r)), &got, &refs(r));
        typed(
            1,
            [x.1.narrow::<0, S1>(s, len), x.1.narrow::<0, S1>(s, len)]
                .iter()
                .flat_map(|t| t.as_ref().unwrap().outs())
                .collect(),
        );
        typed(
            2,
            [
                x.2.narrow::<0, S2>(s, len),
                x.2.narrow::<1, S2>(s, len),
                x.2.narrow::<1, S2>(s, len),
            ]
            .iter()
            .flat_map(|t| t.as_ref().unwrap().outs())
            .collect(),
        );
        typed(
            3,
            [
                x.3.narrow::<0, S3>(s, len),
                x.3.narrow::<1, S3>(s, len),
                x.3.narrow::<2, S3>(s, len),
                x.3.narrow::<1, S3>(s, len),
            ]
            .iter()
            .flat_map(|t| t.as_ref().unwrap().outs())
            .collect(),
        );
        typed(
            4,
            [
                x.4.narrow::<0, S4>(s, len),
                x.4.narrow::<1, S4>(s, len),
                x.4.narrow::<2, S4>(s, len),
                x.4.narrow::<3, S4>(s, len),
                x.4.narrow::<1, S4>(s, len),
            ]
            .iter()
            .flat_map(|t| t.as_ref().unwrap().outs())
            .collect(),
        );
        check_all(
            &format!("narrow with literals, dims {:?}", d[3]),
            &narrow_lit(&x.3).unwrap().outs(),
            &[
                narrow_ref(&xv.3, &d[3], 1, 1, 2),
                narrow_ref(&xv.3, &d[3], 2, 0, 0),
            ],
        );
        // Past the end of the smallest dim: an Err, never a read out of bounds.
        let over = d[3].iter().min().unwrap() + 1 - s.min(1);
        assert!(
            narrow3(&x.3, s.min(1), over).is_err(),
            "narrow past the end of {:?}",
            d[3]
        );
        assert!(x.3.narrow::<0, S3>(s.min(1), d[3][0] + 1).is_err());
    }
}

// ---------------------------------------------------------------------
// cast, to_device, to_cpu.
// ---------------------------------------------------------------------

tensor_fn! {
    /// Every dtype from f64.
    fn cast_all(x: &Tensor<Cpu, f64, [A, B]>) -> (
        Tensor<Cpu, f32, [A, B]>, Tensor<Cpu, f16, [A, B]>, Tensor<Cpu, bf16, [A, B]>, Tensor<Cpu, i32, [A, B]>,
        Tensor<Cpu, i64, [A, B]>, Tensor<Cpu, u8, [A, B]>, Tensor<Cpu, bool, [A, B]>, Tensor<Cpu, f64, [A, B]>,
    ) {
        (x.cast::<f32>(), x.cast::<f16>(), x.cast::<bf16>(), x.cast::<i32>(), x.cast::<i64>(), x.cast::<u8>(), x.cast::<bool>(), x.cast::<f64>())
    }
    fn cast0(x: &Tensor<Cpu, f64, []>) -> (Tensor<Cpu, f32, []>, Tensor<Cpu, i64, []>) {
        (x.cast::<f32>(), x.cast::<i64>())
    }
    fn cast1(x: &Tensor<Cpu, f64, [A]>) -> (Tensor<Cpu, f32, [A]>, Tensor<Cpu, i32, [A]>) {
        (x.cast::<f32>(), x.cast::<i32>())
    }
    fn cast3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (Tensor<Cpu, f32, [A, B, C]>, Tensor<Cpu, u8, [A, B, C]>) {
        (x.cast::<f32>(), x.cast::<u8>())
    }
    fn cast4(x: &Tensor<Cpu, f64, [A, B, C, E]>) -> (Tensor<Cpu, f32, [A, B, C, E]>, Tensor<Cpu, bool, [A, B, C, E]>) {
        (x.cast::<f32>(), x.cast::<bool>())
    }
    /// From integers and `bool`.
    fn cast_from_int(x: &Tensor<Cpu, i64, [A]>, m: &Tensor<Cpu, bool, [A]>) -> (
        Tensor<Cpu, f64, [A]>, Tensor<Cpu, f32, [A]>, Tensor<Cpu, i32, [A]>, Tensor<Cpu, bool, [A]>, Tensor<Cpu, f32, [A]>, Tensor<Cpu, i64, [A]>,
    ) {
        (x.cast::<f64>(), x.cast::<f32>(), x.cast::<i32>(), x.cast::<bool>(), m.cast::<f32>(), m.cast::<i64>())
    }
}

/// The conversions `cast` documents: floats round to nearest, floats to
/// integers truncate and saturate (NaN becomes 0), anything to `bool` is
/// `!= 0`.
#[derive(Clone, Copy)]
enum To {
    F32,
    F16,
    Bf16,
    I32,
    I64,
    U8,
    Bool,
    F64,
}

fn cast_ref(v: &[f64], dims: &[usize], to: To) -> Want {
    let vals: Vec<f64> = v
        .iter()
        .map(|&x| match to {
            To::F32 => x as f32 as f64,
            To::F16 => f16::from_f64(x).to_f64(),
            To::Bf16 => bf16::from_f64(x).to_f64(),
            To::I32 => x as i32 as f64,
            To::I64 => x as i64 as f64,
            To::U8 => x as u8 as f64,
            To::Bool => f64::from(u8::from(x != 0.0)),
            To::F64 => x,
        })
        .collect();
    match to {
        To::Bool | To::I32 | To::I64 | To::U8 => Want::exact(dims.to_vec(), vals),
        _ => Want::bits(dims.to_vec(), vals),
    }
}

#[test]
fn cast_at_every_rank() {
    let mut rng = Rng::new(801);
    // Values that round, truncate and saturate differently.
    let special = [
        NAN, INF, -INF, 0.0, -0.0, 255.9, 256.5, -1.5, 1e10, -3e9, 65520.0, 1e-8, 0.1,
    ];
    for round in 0..3 {
        let d = if round == 2 {
            empty_dims(&mut rng)
        } else {
            random_dims(&mut rng, 1, 4)
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, &special);
        let all = [
            To::F32,
            To::F16,
            To::Bf16,
            To::I32,
            To::I64,
            To::U8,
            To::Bool,
            To::F64,
        ];
        let want: Vec<Want> = all.iter().map(|&to| cast_ref(&xv.2, &d[2], to)).collect();
        check_all(
            &format!("cast of {:?}", d[2]),
            &cast_all(&x.2).unwrap().outs(),
            &want,
        );
        let typed: Vec<Got> = [
            x.2.cast::<f32>().unwrap().outs(),
            x.2.cast::<f16>().unwrap().outs(),
            x.2.cast::<bf16>().unwrap().outs(),
            x.2.cast::<i32>().unwrap().outs(),
            x.2.cast::<i64>().unwrap().outs(),
            x.2.cast::<u8>().unwrap().outs(),
            x.2.cast::<bool>().unwrap().outs(),
            x.2.cast::<f64>().unwrap().outs(),
        ]
        .concat();
        check_all(&format!("typed cast of {:?}", d[2]), &typed, &want);
        let pair =
            |v: &[f64], r: usize, a: To, b: To| vec![cast_ref(v, &d[r], a), cast_ref(v, &d[r], b)];
        check_all(
            "cast at rank 0",
            &cast0(&x.0).unwrap().outs(),
            &pair(&xv.0, 0, To::F32, To::I64),
        );
        check_all(
            "cast at rank 1",
            &cast1(&x.1).unwrap().outs(),
            &pair(&xv.1, 1, To::F32, To::I32),
        );
        check_all(
            "cast at rank 3",
            &cast3(&x.3).unwrap().outs(),
            &pair(&xv.3, 3, To::F32, To::U8),
        );
        check_all(
            "cast at rank 4",
            &cast4(&x.4).unwrap().outs(),
            &pair(&xv.4, 4, To::F32, To::Bool),
        );
        check_all(
            "typed cast at rank 0",
            &[
                x.0.cast::<f32>().unwrap().outs(),
                x.0.cast::<i64>().unwrap().outs(),
            ]
            .concat(),
            &pair(&xv.0, 0, To::F32, To::I64),
        );
        check_all(
            "typed cast at rank 4",
            &[
                x.4.cast::<f32>().unwrap().outs(),
                x.4.cast::<bool>().unwrap().outs(),
            ]
            .concat(),
            &pair(&xv.4, 4, To::F32, To::Bool),
        );
    }
    let iv: Vec<f64> = vec![
        0.0,
        -1.0,
        7.0,
        -2147483649.0,
        4294967296.0 + 5.0,
        (1i64 << 53) as f64,
    ];
    let x: Tensor<Cpu, i64, S1> = tensor(&iv, &[iv.len()]);
    let mv: Vec<f64> = vec![1.0, 0.0, 1.0, 1.0, 0.0, 0.0];
    let m: Tensor<Cpu, bool, S1> =
        Tensor::from_vec_dims(mv.iter().map(|&b| b != 0.0).collect(), &[mv.len()]).unwrap();
    let n = iv.len();
    let i32s: Vec<f64> = iv.iter().map(|&v| v as i64 as i32 as f64).collect();
    let want = [
        Want::bits(vec![n], iv.clone()),
        cast_ref(&iv, &[n], To::F32),
        Want::exact(vec![n], i32s),
        cast_ref(&iv, &[n], To::Bool),
        Want::bits(vec![n], mv.clone()),
        Want::exact(vec![n], mv.clone()),
    ];
    check_all(
        "cast from integers and bool",
        &cast_from_int(&x, &m).unwrap().outs(),
        &want,
    );
    check(
        "typed cast i64 to i32 (wraps)",
        &one(&x.cast::<i32>().unwrap()),
        &want[2],
    );
}

tensor_fn! {
    fn cpu0(x: &Tensor<Cpu, f64, []>) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>) {
        (x.to_cpu(), x.to_device::<Cpu>())
    }
    fn cpu1(x: &Tensor<Cpu, f64, [A]>) -> (Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>) {
        (x.to_cpu(), x.to_device::<Cpu>())
    }
    fn cpu2(x: &Tensor<Cpu, f64, [A, B]>) -> (Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [B, A]>) {
        (x.to_cpu(), x.t().to_device::<Cpu>())
    }
    fn cpu3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>) {
        (x.to_cpu(), x.to_device::<Cpu>())
    }
    fn cpu4(x: &Tensor<Cpu, f64, [A, B, C, E]>) -> (Tensor<Cpu, f64, [A, B, C, E]>, Tensor<Cpu, f64, [A, B, C, E]>) {
        (x.to_cpu(), x.to_device::<Cpu>())
    }
}

#[test]
fn to_cpu_and_to_device_at_every_rank() {
    let mut rng = Rng::new(901);
    for round in 0..2 {
        let d = if round == 1 {
            empty_dims(&mut rng)
        } else {
            random_dims(&mut rng, 1, 4)
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        let twice = |v: &[f64], r: usize| vec![Want::bits(d[r].clone(), v.to_vec()); 2];
        check_all(
            "to_cpu at rank 0",
            &cpu0(&x.0).unwrap().outs(),
            &twice(&xv.0, 0),
        );
        check_all(
            "to_cpu at rank 1",
            &cpu1(&x.1).unwrap().outs(),
            &twice(&xv.1, 1),
        );
        let w2 = vec![
            Want::bits(d[2].clone(), xv.2.clone()),
            transpose_ref(&xv.2, &d[2], 0, 1),
        ];
        check_all("to_cpu at rank 2", &cpu2(&x.2).unwrap().outs(), &w2);
        check_all(
            "to_cpu at rank 3",
            &cpu3(&x.3).unwrap().outs(),
            &twice(&xv.3, 3),
        );
        check_all(
            "to_cpu at rank 4",
            &cpu4(&x.4).unwrap().outs(),
            &twice(&xv.4, 4),
        );
        let typed = |r: usize, a: Vec<Got>, b: Vec<Got>, v: &[f64]| {
            check_all(
                &format!("typed to_cpu/to_device at rank {r}"),
                &[a, b].concat(),
                &twice(v, r),
            )
        };
        typed(
            0,
            x.0.to_cpu().unwrap().outs(),
            x.0.to_device::<Cpu>().unwrap().outs(),
            &xv.0,
        );
        typed(
            1,
            x.1.to_cpu().unwrap().outs(),
            x.1.to_device::<Cpu>().unwrap().outs(),
            &xv.1,
        );
        typed(
            2,
            x.2.to_cpu().unwrap().outs(),
            x.2.to_device::<Cpu>().unwrap().outs(),
            &xv.2,
        );
        typed(
            3,
            x.3.to_cpu().unwrap().outs(),
            x.3.to_device::<Cpu>().unwrap().outs(),
            &xv.3,
        );
        typed(
            4,
            x.4.to_cpu().unwrap().outs(),
            x.4.to_device::<Cpu>().unwrap().outs(),
            &xv.4,
        );
    }
}

// ---------------------------------------------------------------------
// Comparisons, where_, masked_fill, clamp, addcmul: ranks 0 to 4 with
// broadcasting.
// ---------------------------------------------------------------------

tensor_fn! {
    fn cmp0(x: &Tensor<Cpu, f64, []>, y: &Tensor<Cpu, f64, []>) -> (
        Tensor<Cpu, bool, []>, Tensor<Cpu, bool, []>, Tensor<Cpu, bool, []>, Tensor<Cpu, bool, []>, Tensor<Cpu, bool, []>, Tensor<Cpu, bool, []>,
    ) {
        (eq(x, y), x.ne(y), lt(x, y), x.le(y), gt(x, y), x.ge(y))
    }
    fn cmp1(x: &Tensor<Cpu, f64, [A]>, y: &Tensor<Cpu, f64, [A]>) -> (
        Tensor<Cpu, bool, [A]>, Tensor<Cpu, bool, [A]>, Tensor<Cpu, bool, [A]>, Tensor<Cpu, bool, [A]>, Tensor<Cpu, bool, [A]>, Tensor<Cpu, bool, [A]>,
    ) {
        (x.eq(y), ne(x, y), x.lt(y), le(x, y), x.gt(y), ge(x, y))
    }
    fn cmp2(x: &Tensor<Cpu, f64, [A, B]>, y: &Tensor<Cpu, f64, [B]>) -> (
        Tensor<Cpu, bool, [A, B]>, Tensor<Cpu, bool, [A, B]>, Tensor<Cpu, bool, [A, B]>, Tensor<Cpu, bool, [A, B]>, Tensor<Cpu, bool, [A, B]>, Tensor<Cpu, bool, [A, B]>,
    ) {
        (eq(x, y), x.ne(y), lt(x, y), x.le(y), gt(input = x, other = y), x.ge(other = y))
    }
    fn cmp3(x: &Tensor<Cpu, f64, [A, B, C]>, y: &Tensor<Cpu, f64, [A, 1, C]>) -> (
        Tensor<Cpu, bool, [A, B, C]>, Tensor<Cpu, bool, [A, B, C]>, Tensor<Cpu, bool, [A, B, C]>, Tensor<Cpu, bool, [A, B, C]>, Tensor<Cpu, bool, [A, B, C]>, Tensor<Cpu, bool, [A, B, C]>,
    ) {
        (x.eq(y), ne(x, y), x.lt(y), le(x, y), x.gt(y), ge(x, y))
    }
    /// A scalar `other`, as a parameter.
    fn cmp4(x: &Tensor<Cpu, f64, [A, B, C, E]>, y: f64) -> (
        Tensor<Cpu, bool, [A, B, C, E]>, Tensor<Cpu, bool, [A, B, C, E]>, Tensor<Cpu, bool, [A, B, C, E]>,
        Tensor<Cpu, bool, [A, B, C, E]>, Tensor<Cpu, bool, [A, B, C, E]>, Tensor<Cpu, bool, [A, B, C, E]>,
    ) {
        (eq(x, y), x.ne(y), lt(x, y), x.le(y), gt(x, y), x.ge(y))
    }
    /// The tensor broadcast on the left, and integers.
    fn cmp_int(x: &Tensor<Cpu, i64, [B]>, y: &Tensor<Cpu, i64, [A, B]>) -> (Tensor<Cpu, bool, [A, B]>, Tensor<Cpu, bool, [A, B]>) {
        (x.lt(y), ge(x, y))
    }
}

/// The six comparisons of broadcast operands, as 0/1.
fn cmp_refs(x: (&[f64], &[usize]), y: (&[f64], &[usize])) -> Vec<Want> {
    let fs: [fn(f64, f64) -> bool; 6] = [
        |a, b| a == b,
        |a, b| a != b,
        |a, b| a < b,
        |a, b| a <= b,
        |a, b| a > b,
        |a, b| a >= b,
    ];
    fs.iter()
        .map(|f| {
            let (dims, vals) = bmap(&[x, y], |v| f64::from(u8::from(f(v[0], v[1]))));
            Want::exact(dims, vals)
        })
        .collect()
}

/// Values with many equal pairs between `x` and `y`, and the specials.
fn pairs(rng: &mut Rng, x: &[f64], n: usize) -> Vec<f64> {
    let mut y = rng.values(n, SPECIAL);
    for (i, v) in y.iter_mut().enumerate() {
        if rng.below(3) == 0 && !x.is_empty() {
            *v = x[i % x.len()];
        }
    }
    y
}

#[test]
fn comparisons_at_every_rank() {
    let mut rng = Rng::new(1001);
    for round in 0..3 {
        let d = if round == 2 {
            empty_dims(&mut rng)
        } else {
            random_dims(&mut rng, 1, 4)
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        let what = |r: usize| format!("comparisons at rank {r}, dims {:?}", d[r]);
        macro_rules! typed6 {
            ($x:expr, $y:expr, $S:ty) => {
                [
                    $x.eq::<$S>($y).unwrap().outs(),
                    $x.ne::<$S>($y).unwrap().outs(),
                    $x.lt::<$S>($y).unwrap().outs(),
                    $x.le::<$S>($y).unwrap().outs(),
                    $x.gt::<$S>($y).unwrap().outs(),
                    $x.ge::<$S>($y).unwrap().outs(),
                ]
                .concat()
            };
        }
        let yv = pairs(&mut rng, &xv.0, 1);
        let y: Tensor<Cpu, f64, S0> = tensor(&yv, &[]);
        let want = cmp_refs((&xv.0, &d[0]), (&yv, &[]));
        check_all(&what(0), &cmp0(&x.0, &y).unwrap().outs(), &want);
        check_all(&format!("typed {}", what(0)), &typed6!(x.0, &y, S0), &want);

        let yv = pairs(&mut rng, &xv.1, xv.1.len());
        let y: Tensor<Cpu, f64, S1> = tensor(&yv, &d[1]);
        let want = cmp_refs((&xv.1, &d[1]), (&yv, &d[1]));
        check_all(&what(1), &cmp1(&x.1, &y).unwrap().outs(), &want);
        check_all(&format!("typed {}", what(1)), &typed6!(x.1, &y, S1), &want);

        let yd = vec![d[2][1]];
        let yv = pairs(&mut rng, &xv.2, numel(&yd));
        let y: Tensor<Cpu, f64, S1> = tensor(&yv, &yd);
        let want = cmp_refs((&xv.2, &d[2]), (&yv, &yd));
        check_all(&what(2), &cmp2(&x.2, &y).unwrap().outs(), &want);
        check_all(&format!("typed {}", what(2)), &typed6!(x.2, &y, S2), &want);

        let yd = vec![d[3][0], 1, d[3][2]];
        let yv = pairs(&mut rng, &xv.3, numel(&yd));
        let y: Tensor<Cpu, f64, shape![_, 1, _]> = tensor(&yv, &yd);
        let want = cmp_refs((&xv.3, &d[3]), (&yv, &yd));
        check_all(&what(3), &cmp3(&x.3, &y).unwrap().outs(), &want);
        check_all(&format!("typed {}", what(3)), &typed6!(x.3, &y, S3), &want);

        for s in [0.5, -0.0, INF, NAN] {
            let want = cmp_refs((&xv.4, &d[4]), (&[s], &[]));
            check_all(
                &format!("{} against {s}", what(4)),
                &cmp4(&x.4, s).unwrap().outs(),
                &want,
            );
            let typed = [
                x.4.eq_scalar(s).unwrap().outs(),
                x.4.ne_scalar(s).unwrap().outs(),
                x.4.lt_scalar(s).unwrap().outs(),
                x.4.le_scalar(s).unwrap().outs(),
                x.4.gt_scalar(s).unwrap().outs(),
                x.4.ge_scalar(s).unwrap().outs(),
            ]
            .concat();
            check_all(&format!("typed {} against {s}", what(4)), &typed, &want);
        }
    }
    let xv = vec![-1.0, 0.0, 5.0];
    let yv = vec![0.0, 0.0, 0.0, -1.0, 7.0, 5.0];
    let x: Tensor<Cpu, i64, S1> = tensor(&xv, &[3]);
    let y: Tensor<Cpu, i64, S2> = tensor(&yv, &[2, 3]);
    let want = cmp_refs((&xv, &[3]), (&yv, &[2, 3]));
    check_all(
        "i64 comparisons",
        &cmp_int(&x, &y).unwrap().outs(),
        &[want[2].clone(), want[5].clone()],
    );
}

tensor_fn! {
    fn where0(c: &Tensor<Cpu, bool, []>, x: &Tensor<Cpu, f64, []>, y: &Tensor<Cpu, f64, []>) -> Tensor<Cpu, f64, []> {
        where_(c, x, y)
    }
    fn where1(c: &Tensor<Cpu, bool, [A]>, x: &Tensor<Cpu, f64, [A]>, y: &Tensor<Cpu, f64, []>) -> Tensor<Cpu, f64, [A]> {
        where_(condition = c, input = x, other = y)
    }
    fn where2(c: &Tensor<Cpu, bool, [A, B]>, x: &Tensor<Cpu, f64, [1, B]>, y: &Tensor<Cpu, f64, [A, 1]>) -> Tensor<Cpu, f64, [A, B]> {
        where_(c, x, y)
    }
    /// A scalar `other`, then a scalar `input`.
    fn where3(c: &Tensor<Cpu, bool, [B, C]>, x: &Tensor<Cpu, f64, [A, B, C]>, y: f64) -> (Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>) {
        (where_(c, x, y), where_(c, 1.5, x))
    }
    /// Two scalars: the condition's shape, the dtype PyTorch gives them.
    fn where_scalars(c: &Tensor<Cpu, bool, [A, B]>, lo: f64, hi: f64) -> (Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f32, [A, B]>, Tensor<Cpu, i64, [A, B]>) {
        (where_(c, lo, hi), where_(c, 1.5, -0.0), where_(c, 1, -1))
    }
    fn where4(c: &Tensor<Cpu, bool, [A, 1, C, E]>, x: &Tensor<Cpu, f64, [A, B, C, E]>, y: &Tensor<Cpu, f64, [E]>) -> Tensor<Cpu, f64, [A, B, C, E]> {
        where_(c, x, y)
    }
    fn masked0(x: &Tensor<Cpu, f64, []>, m: &Tensor<Cpu, bool, []>, v: f64) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>) {
        (x.masked_fill(m, v), masked_fill(x, m, -2.5))
    }
    fn masked1(x: &Tensor<Cpu, f64, [A]>, m: &Tensor<Cpu, bool, [A]>, v: f64) -> (Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>) {
        (masked_fill(x, m, v), x.masked_fill(mask = m, value = -2.5))
    }
    fn masked2(x: &Tensor<Cpu, f64, [A, B]>, m: &Tensor<Cpu, bool, [B]>, v: f64) -> (Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>) {
        (x.masked_fill(m, v), masked_fill(x, m, -2.5))
    }
    fn masked3(x: &Tensor<Cpu, f64, [A, B, C]>, m: &Tensor<Cpu, bool, [A, 1, C]>, v: f64) -> (Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>) {
        (masked_fill(x, m, v), x.masked_fill(m, -2.5))
    }
    fn masked4(x: &Tensor<Cpu, f64, [A, B, C, E]>, m: &Tensor<Cpu, bool, []>, v: f64) -> (Tensor<Cpu, f64, [A, B, C, E]>, Tensor<Cpu, f64, [A, B, C, E]>) {
        (x.masked_fill(m, v), masked_fill(x, m, -2.5))
    }
}

fn bools(rng: &mut Rng, d: &[usize]) -> (Vec<f64>, Vec<bool>) {
    let b: Vec<bool> = (0..numel(d)).map(|_| rng.below(2) == 0).collect();
    (b.iter().map(|&v| f64::from(u8::from(v))).collect(), b)
}

#[test]
fn where_and_masked_fill_at_every_rank() {
    let mut rng = Rng::new(1101);
    for round in 0..3 {
        let d = if round == 2 {
            empty_dims(&mut rng)
        } else {
            random_dims(&mut rng, 1, 4)
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        let pick = |c: (&[f64], &[usize]), x: (&[f64], &[usize]), y: (&[f64], &[usize])| {
            let (dims, vals) = bmap(&[c, x, y], |v| if v[0] != 0.0 { v[1] } else { v[2] });
            Want::bits(dims, vals)
        };

        // where_
        let (cv, c) = bools(&mut rng, &[]);
        let c0 = Tensor::<Cpu, bool, S0>::from_vec_dims(c, &[]).unwrap();
        let yv = rng.values(1, SPECIAL);
        let y0: Tensor<Cpu, f64, S0> = tensor(&yv, &[]);
        let want = pick((&cv, &[]), (&xv.0, &[]), (&yv, &[]));
        check(
            "where_ at rank 0",
            &one(&where0(&c0, &x.0, &y0).unwrap()),
            &want,
        );
        let typed: Tensor<Cpu, f64, S0> = tensorfn::ops::where_(&c0, &x.0, &y0).unwrap();
        check("typed where_ at rank 0", &one(&typed), &want);

        let (cv, c) = bools(&mut rng, &d[1]);
        let c1 = Tensor::<Cpu, bool, S1>::from_vec_dims(c, &d[1]).unwrap();
        let want = pick((&cv, &d[1]), (&xv.1, &d[1]), (&yv, &[]));
        check(
            "where_ at rank 1",
            &one(&where1(&c1, &x.1, &y0).unwrap()),
            &want,
        );
        let typed: Tensor<Cpu, f64, S1> = tensorfn::ops::where_(&c1, &x.1, &y0).unwrap();
        check("typed where_ at rank 1", &one(&typed), &want);

        let (a, b) = (d[2][0], d[2][1]);
        let (cv, c) = bools(&mut rng, &d[2]);
        let c2 = Tensor::<Cpu, bool, S2>::from_vec_dims(c, &d[2]).unwrap();
        let (x2v, y2v) = (rng.values(b, SPECIAL), rng.values(a, SPECIAL));
        // Both sides grow, each along a 1 written in its shape (a `[B]`
        // row would be promoted implicitly, which strict broadcasting
        // rejects).
        let (x2, y2): (Tensor<Cpu, f64, Row>, Tensor<Cpu, f64, Col>) =
            (tensor(&x2v, &[1, b]), tensor(&y2v, &[a, 1]));
        let want = pick((&cv, &d[2]), (&x2v, &[1, b]), (&y2v, &[a, 1]));
        check(
            "where_ at rank 2",
            &one(&where2(&c2, &x2, &y2).unwrap()),
            &want,
        );
        let typed: Tensor<Cpu, f64, S2> = tensorfn::ops::where_(&c2, &x2, &y2).unwrap();
        check("typed where_ at rank 2", &one(&typed), &want);
        let (lo, hi) = (-INF, NAN);
        let (w64, w32, wi) = where_scalars(&c2, lo, hi).unwrap();
        let on = |a: f64, b: f64| pick((&cv, &d[2]), (&[a], &[]), (&[b], &[]));
        check("where_ of two f64 scalars", &one(&w64), &on(lo, hi));
        check("where_ of two float literals", &one(&w32), &on(1.5, -0.0));
        check("where_ of two int literals", &one(&wi), &on(1.0, -1.0));

        let cd = d[3][1..].to_vec();
        let (cv, c) = bools(&mut rng, &cd);
        let c3 = Tensor::<Cpu, bool, S2>::from_vec_dims(c, &cd).unwrap();
        let want = pick((&cv, &cd), (&xv.3, &d[3]), (&[-7.0], &[]));
        let want_s = pick((&cv, &cd), (&[1.5], &[]), (&xv.3, &d[3]));
        check_all(
            "where_ at rank 3",
            &where3(&c3, &x.3, -7.0).unwrap().outs(),
            &[want.clone(), want_s],
        );
        let s = Tensor::<Cpu, f64, S0>::full(-7.0).unwrap();
        let typed: Tensor<Cpu, f64, S3> = tensorfn::ops::where_(&c3, &x.3, &s).unwrap();
        check("typed where_ at rank 3", &one(&typed), &want);

        let cd = vec![d[4][0], 1, d[4][2], d[4][3]];
        let (cv, c) = bools(&mut rng, &cd);
        let c4 = Tensor::<Cpu, bool, shape![_, 1, _, _]>::from_vec_dims(c, &cd).unwrap();
        let yv = rng.values(d[4][3], SPECIAL);
        let y4: Tensor<Cpu, f64, S1> = tensor(&yv, &d[4][3..]);
        let want = pick((&cv, &cd), (&xv.4, &d[4]), (&yv, &d[4][3..]));
        check(
            "where_ at rank 4",
            &one(&where4(&c4, &x.4, &y4).unwrap()),
            &want,
        );
        let typed: Tensor<Cpu, f64, S4> = tensorfn::ops::where_(&c4, &x.4, &y4).unwrap();
        check("typed where_ at rank 4", &one(&typed), &want);

        // masked_fill, with a NaN, an infinity and a plain value.
        for v in [NAN, -INF, 3.25] {
            let fill = |x: (&[f64], &[usize]), m: (&[f64], &[usize]), v: f64| {
                let out = x.1.to_vec();
                let vals: Vec<f64> = (0..numel(&out))
                    .map(|i| {
                        let ix = unravel(i, &out);
                        if bget(m.0, m.1, &ix) != 0.0 {
                            v
                        } else {
                            x.0[i]
                        }
                    })
                    .collect();
                Want::bits(out, vals)
            };
            macro_rules! case {
                ($f:ident, $x:expr, $xv:expr, $d:expr, $md:expr, $MS:ty) => {{
                    let md: Vec<usize> = $md;
                    let (mv, m) = bools(&mut rng, &md);
                    let m = Tensor::<Cpu, bool, $MS>::from_vec_dims(m, &md).unwrap();
                    let want = [
                        fill((&$xv, &$d), (&mv, &md), v),
                        fill((&$xv, &$d), (&mv, &md), -2.5),
                    ];
                    let what = format!("masked_fill of {:?} by {md:?} with {v}", $d);
                    check_all(&what, &$f(&$x, &m, v).unwrap().outs(), &want);
                    check(
                        &format!("typed {what}"),
                        &one(&$x.masked_fill(&m, v).unwrap()),
                        &want[0],
                    );
                }};
            }
            case!(masked0, x.0, xv.0, d[0], vec![], S0);
            case!(masked1, x.1, xv.1, d[1], d[1].clone(), S1);
            case!(masked2, x.2, xv.2, d[2], vec![d[2][1]], S1);
            case!(
                masked3,
                x.3,
                xv.3,
                d[3],
                vec![d[3][0], 1, d[3][2]],
                shape![_, 1, _]
            );
            case!(masked4, x.4, xv.4, d[4], vec![], S0);
        }
    }
}

tensor_fn! {
    fn clamp0(x: &Tensor<Cpu, f64, []>) -> (Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>) {
        (x.clamp(-1.0, 1.0), clamp(x, min = 0.5), x.clamp(max = -0.5), clamp(x, 2.0, -2.0))
    }
    fn clamp1(x: &Tensor<Cpu, f64, [A]>) -> (Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>) {
        (clamp(x, -1.0, 1.0), x.clamp(min = 0.5), clamp(x, max = -0.5), x.clamp(2.0, -2.0))
    }
    fn clamp2(x: &Tensor<Cpu, f64, [A, B]>) -> (Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>) {
        (x.clamp(-1.0, 1.0), clamp(x, min = 0.5), x.clamp(max = -0.5), clamp(x, 2.0, -2.0))
    }
    fn clamp3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>) {
        (clamp(x, -1.0, 1.0), x.clamp(min = 0.5), clamp(x, max = -0.5), x.clamp(2.0, -2.0))
    }
    fn clamp4(x: &Tensor<Cpu, f64, [A, B, C, E]>) -> (Tensor<Cpu, f64, [A, B, C, E]>, Tensor<Cpu, f64, [A, B, C, E]>, Tensor<Cpu, f64, [A, B, C, E]>, Tensor<Cpu, f64, [A, B, C, E]>) {
        (x.clamp(-1.0, 1.0), clamp(x, min = 0.5), x.clamp(max = -0.5), clamp(x, 2.0, -2.0))
    }
    /// Tensor bounds, broadcast.
    fn clamp_by(x: &Tensor<Cpu, f64, [A, B]>, lo: &Tensor<Cpu, f64, [B]>, hi: &Tensor<Cpu, f64, [A, 1]>) -> Tensor<Cpu, f64, [A, B]> {
        x.clamp(lo, hi)
    }
}

/// `min(max(x, lo), hi)` with NaN propagating (PyTorch's `clamp`).
fn clamp_one(x: f64, lo: f64, hi: f64) -> f64 {
    let t = if x.is_nan() || lo.is_nan() {
        NAN
    } else if x < lo {
        lo
    } else {
        x
    };
    if t.is_nan() || hi.is_nan() {
        NAN
    } else if t > hi {
        hi
    } else {
        t
    }
}

#[test]
fn clamp_at_every_rank() {
    let mut rng = Rng::new(1201);
    for round in 0..3 {
        let d = if round == 2 {
            empty_dims(&mut rng)
        } else {
            random_dims(&mut rng, 1, 4)
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        let bounds = [(-1.0, 1.0), (0.5, INF), (-INF, -0.5), (2.0, -2.0)];
        let refs = |v: &[f64], r: usize| -> Vec<Want> {
            bounds
                .iter()
                .map(|&(lo, hi)| {
                    Want::exact(
                        d[r].clone(),
                        v.iter().map(|&x| clamp_one(x, lo, hi)).collect(),
                    )
                })
                .collect()
        };
        let what = |r: usize| format!("clamp at rank {r}, dims {:?}", d[r]);
        check_all(&what(0), &clamp0(&x.0).unwrap().outs(), &refs(&xv.0, 0));
        check_all(&what(1), &clamp1(&x.1).unwrap().outs(), &refs(&xv.1, 1));
        check_all(&what(2), &clamp2(&x.2).unwrap().outs(), &refs(&xv.2, 2));
        check_all(&what(3), &clamp3(&x.3).unwrap().outs(), &refs(&xv.3, 3));
        check_all(&what(4), &clamp4(&x.4).unwrap().outs(), &refs(&xv.4, 4));
        let typed = |r: usize, f: &dyn Fn(f64, f64) -> Vec<Got>, v: &[f64]| {
            let got: Vec<Got> = bounds.iter().flat_map(|&(lo, hi)| f(lo, hi)).collect();
            check_all(&format!("typed {}", what(r)), &got, &refs(v, r));
        };
        typed(0, &|lo, hi| x.0.clamp(lo, hi).unwrap().outs(), &xv.0);
        typed(1, &|lo, hi| x.1.clamp(lo, hi).unwrap().outs(), &xv.1);
        typed(2, &|lo, hi| x.2.clamp(lo, hi).unwrap().outs(), &xv.2);
        typed(3, &|lo, hi| x.3.clamp(lo, hi).unwrap().outs(), &xv.3);
        typed(4, &|lo, hi| x.4.clamp(lo, hi).unwrap().outs(), &xv.4);

        let (a, b) = (d[2][0], d[2][1]);
        let (lv, hv) = (rng.values(b, &[]), rng.values(a, &[]));
        let (lo, hi): (Tensor<Cpu, f64, S1>, Tensor<Cpu, f64, Col>) =
            (tensor(&lv, &[b]), tensor(&hv, &[a, 1]));
        let (dims, vals) = bmap(&[(&xv.2, &d[2]), (&lv, &[b]), (&hv, &[a, 1])], |v| {
            clamp_one(v[0], v[1], v[2])
        });
        check(
            "clamp by tensors",
            &one(&clamp_by(&x.2, &lo, &hi).unwrap()),
            &Want::exact(dims, vals),
        );
    }
}

tensor_fn! {
    fn addcmul0(x: &Tensor<Cpu, f64, []>, t1: &Tensor<Cpu, f64, []>, t2: &Tensor<Cpu, f64, []>) -> Tensor<Cpu, f64, []> {
        addcmul(x, t1, t2)
    }
    fn addcmul1(x: &Tensor<Cpu, f64, [A]>, t1: &Tensor<Cpu, f64, [A]>, t2: &Tensor<Cpu, f64, [A]>, v: f64) -> Tensor<Cpu, f64, [A]> {
        addcmul(x, t1, t2, v)
    }
    /// The input broadcast too.
    fn addcmul2(x: &Tensor<Cpu, f64, [1, B]>, t1: &Tensor<Cpu, f64, [A, B]>, t2: &Tensor<Cpu, f64, [A, 1]>) -> Tensor<Cpu, f64, [A, B]> {
        addcmul(x, t1, t2, value = 0.5)
    }
    fn addcmul3(x: &Tensor<Cpu, f64, [A, B, C]>, t1: &Tensor<Cpu, f64, [A, B, C]>, t2: &Tensor<Cpu, f64, [C]>) -> Tensor<Cpu, f64, [A, B, C]> {
        addcmul(x, t1, t2, -2.0)
    }
    fn addcmul4(x: &Tensor<Cpu, f64, [A, B, C, E]>, t1: &Tensor<Cpu, f64, [B, 1, E]>, t2: &Tensor<Cpu, f64, [A, B, C, E]>, v: f64) -> Tensor<Cpu, f64, [A, B, C, E]> {
        addcmul(input = x, tensor1 = t1, tensor2 = t2, value = v)
    }
    fn addcmul_int(x: &Tensor<Cpu, i64, [A, B]>, t1: &Tensor<Cpu, i64, [A, B]>, t2: &Tensor<Cpu, i64, [B]>) -> Tensor<Cpu, i64, [A, B]> {
        addcmul(x, t1, t2, 3)
    }
}

/// `x + value * t1 * t2`, broadcast.
fn addcmul_ref(
    x: (&[f64], &[usize]),
    t1: (&[f64], &[usize]),
    t2: (&[f64], &[usize]),
    value: f64,
    eps: f64,
) -> Want {
    let (dims, vals) = bmap(&[x, t1, t2], |v| v[0] + value * v[1] * v[2]);
    let (_, tol) = bmap(&[x, t1, t2], |v| {
        4.0 * eps * (v[0].abs() + (value * v[1] * v[2]).abs())
    });
    Want { dims, vals, tol }
}

#[test]
fn addcmul_at_every_rank() {
    let mut rng = Rng::new(1301);
    for round in 0..3 {
        let d = if round == 2 {
            empty_dims(&mut rng)
        } else {
            random_dims(&mut rng, 1, 4)
        };
        let special: &[f64] = if round == 1 { SPECIAL } else { &[] };
        let (xv, x) = inputs_by_rank(&mut rng, &d, special);
        let mut operand = |dims: &[usize]| rng.values(numel(dims), special);

        let (av, bv) = (operand(&[]), operand(&[]));
        let (a, b): (Tensor<Cpu, f64, S0>, Tensor<Cpu, f64, S0>) =
            (tensor(&av, &[]), tensor(&bv, &[]));
        let want = addcmul_ref((&xv.0, &[]), (&av, &[]), (&bv, &[]), 1.0, EPS);
        check(
            "addcmul at rank 0",
            &one(&addcmul0(&x.0, &a, &b).unwrap()),
            &want,
        );
        check(
            "typed addcmul at rank 0",
            &one(&x.0.addcmul(&a, &b, 1.0).unwrap()),
            &want,
        );

        let (av, bv) = (operand(&d[1]), operand(&d[1]));
        let (a, b): (Tensor<Cpu, f64, S1>, Tensor<Cpu, f64, S1>) =
            (tensor(&av, &d[1]), tensor(&bv, &d[1]));
        let want = addcmul_ref((&xv.1, &d[1]), (&av, &d[1]), (&bv, &d[1]), -0.75, EPS);
        check(
            "addcmul at rank 1",
            &one(&addcmul1(&x.1, &a, &b, -0.75).unwrap()),
            &want,
        );
        check(
            "typed addcmul at rank 1",
            &one(&x.1.addcmul(&a, &b, -0.75).unwrap()),
            &want,
        );

        let (p, q) = (d[2][0], d[2][1]);
        let (xv2, av, bv) = (operand(&[1, q]), operand(&d[2]), operand(&[p, 1]));
        let x2: Tensor<Cpu, f64, Row> = tensor(&xv2, &[1, q]);
        let (a, b): (Tensor<Cpu, f64, S2>, Tensor<Cpu, f64, Col>) =
            (tensor(&av, &d[2]), tensor(&bv, &[p, 1]));
        let want = addcmul_ref((&xv2, &[1, q]), (&av, &d[2]), (&bv, &[p, 1]), 0.5, EPS);
        check(
            "addcmul at rank 2",
            &one(&addcmul2(&x2, &a, &b).unwrap()),
            &want,
        );
        check(
            "typed addcmul at rank 2",
            &one(&x2.addcmul_broadcast::<S2>(&a, &b, 0.5).unwrap()),
            &want,
        );

        let cd = vec![d[3][2]];
        let (av, bv) = (operand(&d[3]), operand(&cd));
        let (a, b): (Tensor<Cpu, f64, S3>, Tensor<Cpu, f64, S1>) =
            (tensor(&av, &d[3]), tensor(&bv, &cd));
        let want = addcmul_ref((&xv.3, &d[3]), (&av, &d[3]), (&bv, &cd), -2.0, EPS);
        check(
            "addcmul at rank 3",
            &one(&addcmul3(&x.3, &a, &b).unwrap()),
            &want,
        );
        check(
            "typed addcmul at rank 3",
            &one(&x.3.addcmul_broadcast::<S3>(&a, &b, -2.0).unwrap()),
            &want,
        );

        let ad = vec![d[4][1], 1, d[4][3]];
        let (av, bv) = (operand(&ad), operand(&d[4]));
        let (a, b): (Tensor<Cpu, f64, Mid1>, Tensor<Cpu, f64, S4>) =
            (tensor(&av, &ad), tensor(&bv, &d[4]));
        let want = addcmul_ref((&xv.4, &d[4]), (&av, &ad), (&bv, &d[4]), 1.25, EPS);
        check(
            "addcmul at rank 4",
            &one(&addcmul4(&x.4, &a, &b, 1.25).unwrap()),
            &want,
        );
        check(
            "typed addcmul at rank 4",
            &one(&x.4.addcmul_broadcast::<S4>(&a, &b, 1.25).unwrap()),
            &want,
        );
    }
    let (xv, av, bv) = (
        vec![1.0, -2.0, 3.0, 4.0, 0.0, -6.0],
        vec![2.0, 2.0, -1.0, 5.0, 7.0, 1.0],
        vec![3.0, -4.0, 10.0],
    );
    let x: Tensor<Cpu, i64, S2> = tensor(&xv, &[2, 3]);
    let a: Tensor<Cpu, i64, S2> = tensor(&av, &[2, 3]);
    let b: Tensor<Cpu, i64, S1> = tensor(&bv, &[3]);
    let want = addcmul_ref((&xv, &[2, 3]), (&av, &[2, 3]), (&bv, &[3]), 3.0, 0.0);
    check(
        "i64 addcmul",
        &one(&addcmul_int(&x, &a, &b).unwrap()),
        &want,
    );
}

tensor_fn! {
    fn unsqueeze0(x: &Tensor<Cpu, f64, []>) -> Tensor<Cpu, f64, [1]> {
        x.unsqueeze(0)
    }
    fn unsqueeze2(x: &Tensor<Cpu, f64, [A, B]>) -> (Tensor<Cpu, f64, [1, A, B]>, Tensor<Cpu, f64, [A, 1, B]>, Tensor<Cpu, f64, [A, B, 1]>) {
        (x.unsqueeze(0), x.unsqueeze(1), x.unsqueeze(2))
    }
    fn unsqueeze3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (Tensor<Cpu, f64, [1, A, B, C]>, Tensor<Cpu, f64, [A, B, C, 1]>) {
        (x.unsqueeze(0), x.unsqueeze(3))
    }
    fn squeeze_each(x: &Tensor<Cpu, f64, [1, A, 1, B]>) -> (Tensor<Cpu, f64, [A, 1, B]>, Tensor<Cpu, f64, [1, A, B]>) {
        (x.squeeze(0), x.squeeze(2))
    }
    fn squeeze_to0(x: &Tensor<Cpu, f64, [1]>) -> Tensor<Cpu, f64, []> {
        x.squeeze(0)
    }
}

/// `unsqueeze` at ranks 0, 2 and 3 at every position, `squeeze` of each
/// size-1 dim down to rank 0, in the macro and the typed API: the data is
/// the input's, bit for bit, under the new dims.
#[test]
fn unsqueeze_and_squeeze_at_every_rank() {
    let mut rng = Rng::new(509);
    let same = |v: &[f64], dims: Vec<usize>| Want::bits(dims, v.to_vec());
    for (a, b, c) in [(2, 3, 4), (1, 5, 2), (0, 3, 2)] {
        let v0 = rng.values(1, SPECIAL);
        let x0: Tensor<Cpu, f64, S0> = tensor(&v0, &[]);
        check(
            "unsqueeze of rank 0",
            &one(&unsqueeze0(&x0).unwrap()),
            &same(&v0, vec![1]),
        );
        check(
            "typed unsqueeze of rank 0",
            &one(&x0.unsqueeze::<S1>(0).unwrap()),
            &same(&v0, vec![1]),
        );
        let v2 = rng.values(a * b, SPECIAL);
        let x2: Tensor<Cpu, f64, S2> = tensor(&v2, &[a, b]);
        check_all(
            &format!("unsqueeze of [{a}, {b}]"),
            &unsqueeze2(&x2).unwrap().outs(),
            &[
                same(&v2, vec![1, a, b]),
                same(&v2, vec![a, 1, b]),
                same(&v2, vec![a, b, 1]),
            ],
        );
        for (d, dims) in [(0, vec![1, a, b]), (1, vec![a, 1, b]), (2, vec![a, b, 1])] {
            check(
                &format!("typed unsqueeze({d}) of [{a}, {b}]"),
                &one(&x2.unsqueeze::<S3>(d).unwrap()),
                &same(&v2, dims),
            );
        }
        let v3 = rng.values(a * b * c, SPECIAL);
        let x3: Tensor<Cpu, f64, S3> = tensor(&v3, &[a, b, c]);
        check_all(
            &format!("unsqueeze of [{a}, {b}, {c}]"),
            &unsqueeze3(&x3).unwrap().outs(),
            &[same(&v3, vec![1, a, b, c]), same(&v3, vec![a, b, c, 1])],
        );
        let x4: Tensor<Cpu, f64, shape![1, _, 1, _]> = tensor(&v2, &[1, a, 1, b]);
        check_all(
            &format!("squeeze of [1, {a}, 1, {b}]"),
            &squeeze_each(&x4).unwrap().outs(),
            &[same(&v2, vec![a, 1, b]), same(&v2, vec![1, a, b])],
        );
        check(
            "typed squeeze(2)",
            &one(&x4.squeeze::<S3>(2).unwrap()),
            &same(&v2, vec![1, a, b]),
        );
        // Only a dim of size 1 can go (the rank is in the type).
        if a != 1 {
            assert!(x4.squeeze::<S3>(1).is_err(), "squeeze of a dim of size {a}");
        }
        let x1: Tensor<Cpu, f64, shape![1]> = tensor(&v0, &[1]);
        check(
            "squeeze to rank 0",
            &one(&squeeze_to0(&x1).unwrap()),
            &same(&v0, vec![]),
        );
    }
}

// ---------------------------------------------------------------------
// stack, expand, repeat_interleave.
// ---------------------------------------------------------------------

/// Each element along `dim` repeated `r` times in place.
fn repeat_ref(x: &[f64], d: &[usize], r: usize, dim: usize) -> Want {
    let mut out = d.to_vec();
    out[dim] *= r;
    let vals = (0..numel(&out))
        .map(|i| {
            let mut ix = unravel(i, &out);
            ix[dim] /= r;
            x[ravel(&ix, d)]
        })
        .collect();
    Want::bits(out, vals)
}

/// `x` broadcast to `out` (new dims lead).
fn expand_ref(x: &[f64], d: &[usize], out: &[usize]) -> Want {
    let lead = out.len() - d.len();
    let vals = (0..numel(out))
        .map(|i| {
            let oi = unravel(i, out);
            let ix: Vec<usize> = (0..d.len())
                .map(|k| if d[k] == 1 { 0 } else { oi[k + lead] })
                .collect();
            x[ravel(&ix, d)]
        })
        .collect();
    Want::bits(out.to_vec(), vals)
}

tensor_fn! {
    fn stack_each(a: &Tensor<Cpu, f64, [A, B]>, b: &Tensor<Cpu, f64, [A, B]>, c: &Tensor<Cpu, f64, [A, B]>) -> (
        Tensor<Cpu, f64, [3, A, B]>, Tensor<Cpu, f64, [A, 2, B]>, Tensor<Cpu, f64, [A, B, 3]>, Tensor<Cpu, f64, [A, B, 2]>,
    ) {
        (stack([a, b, c]), stack([a, b], 1), stack([a, b, c], dim = 2), stack([c, a], -1))
    }
    fn expand_each(x: &Tensor<Cpu, f64, [A, 1]>) -> (Tensor<Cpu, f64, [A, 4]>, Tensor<Cpu, f64, [2, A, 3]>) {
        (x.expand([A, 4]), x.expand([2, -1, 3]))
    }
    fn repeat_each(x: &Tensor<Cpu, f64, [A, B, C]>) -> (
        Tensor<Cpu, f64, [A * 2, B, C]>, Tensor<Cpu, f64, [A, B * 3, C]>, Tensor<Cpu, f64, [A, B, C * 2]>,
        Tensor<Cpu, f64, [B, A * 2, C]>,
    ) {
        (
            x.repeat_interleave(2, 0),
            repeat_interleave(x, 3, 1),
            x.repeat_interleave(repeats = 2, dim = -1),
            x.permute([1, 0, 2]).repeat_interleave(2, 1),
        )
    }
}

/// `stack` along every new dim (negative and keyword forms too), with an
/// empty dim, in the macro and the typed API; values bit for bit.
#[test]
fn stack_along_each_new_dim() {
    let mut rng = Rng::new(601);
    for (a, b) in [(2, 3), (1, 4), (0, 2)] {
        let vs: Vec<Vec<f64>> = (0..3).map(|_| rng.values(a * b, SPECIAL)).collect();
        let ts: Vec<Tensor<Cpu, f64, S2>> = vs.iter().map(|v| tensor(v, &[a, b])).collect();
        // stack of k tensors along `dim`: the cat of each given a size-1 dim.
        let want = |idx: &[usize], dim: usize| {
            let mut one = vec![a, b];
            one.insert(dim, 1);
            let parts: Vec<(&[f64], &[usize])> =
                idx.iter().map(|&i| (&vs[i][..], &one[..])).collect();
            cat_ref(&parts, dim)
        };
        check_all(
            &format!("stack of [{a}, {b}]"),
            &stack_each(&ts[0], &ts[1], &ts[2]).unwrap().outs(),
            &[
                want(&[0, 1, 2], 0),
                want(&[0, 1], 1),
                want(&[0, 1, 2], 2),
                want(&[2, 0], 2),
            ],
        );
        for dim in 0..3 {
            check(
                &format!("typed stack({dim}) of [{a}, {b}]"),
                &one(&Tensor::stack::<S3>(&[&ts[0], &ts[1], &ts[2]], dim).unwrap()),
                &want(&[0, 1, 2], dim),
            );
        }
        // A shape that differs is an `Err` naming the operand.
        let other: Tensor<Cpu, f64, S2> = tensor(&vec![0.0; (a + 1) * b], &[a + 1, b]);
        let e = Tensor::stack::<S3>(&[&ts[0], &other], 0).unwrap_err();
        assert!(e.to_string().contains("tensors[1]"), "{e}");
    }
}

/// `expand` of size-1 dims and new leading dims (`-1` keeping a dim), in
/// the macro and the typed API.
#[test]
fn expand_to_new_and_size_one_dims() {
    let mut rng = Rng::new(607);
    for a in [3, 1, 0] {
        let v = rng.values(a, SPECIAL);
        let x: Tensor<Cpu, f64, shape![_, 1]> = tensor(&v, &[a, 1]);
        check_all(
            &format!("expand of [{a}, 1]"),
            &expand_each(&x).unwrap().outs(),
            &[
                expand_ref(&v, &[a, 1], &[a, 4]),
                expand_ref(&v, &[a, 1], &[2, a, 3]),
            ],
        );
        check(
            "typed expand",
            &one(&x.expand::<S3>(&[2, a, 5]).unwrap()),
            &expand_ref(&v, &[a, 1], &[2, a, 5]),
        );
        if a > 1 {
            assert!(
                x.expand::<S2>(&[a + 1, 2]).is_err(),
                "expanding a dim of size {a}"
            );
        }
    }
}

/// `repeat_interleave` along every dim of rank 3, function, method and
/// keyword forms, of a permuted (strided) input, and with empty dims, in
/// the macro and the typed API.
#[test]
fn repeat_interleave_along_each_dim() {
    let mut rng = Rng::new(613);
    for (a, b, c) in [(2, 3, 4), (1, 2, 1), (0, 3, 2), (2, 0, 3)] {
        let d = [a, b, c];
        let v = rng.values(a * b * c, SPECIAL);
        let x: Tensor<Cpu, f64, S3> = tensor(&v, &d);
        let permuted = permute_ref(&v, &d, &[1, 0, 2]);
        check_all(
            &format!("repeat_interleave of {d:?}"),
            &repeat_each(&x).unwrap().outs(),
            &[
                repeat_ref(&v, &d, 2, 0),
                repeat_ref(&v, &d, 3, 1),
                repeat_ref(&v, &d, 2, 2),
                repeat_ref(&permuted.vals, &permuted.dims, 2, 1),
            ],
        );
        for (dim, r) in [(0, 3), (1, 2), (2, 1), (1, 0)] {
            check(
                &format!("typed repeat_interleave({r}, {dim}) of {d:?}"),
                &one(&x.repeat_interleave::<S3>(r, dim).unwrap()),
                &repeat_ref(&v, &d, r, dim),
            );
        }
        assert!(x.repeat_interleave::<S3>(2, 3).is_err());
    }
}

// ---------------------------------------------------------------------
// keepdim and var.
// ---------------------------------------------------------------------

/// `var` of each lane along `dim` with PyTorch's divisor
/// `max(0, n - correction)`, and a tolerance from the lane's scale.
fn var_ref(x: &[f64], d: &[usize], dim: usize, correction: usize, keepdim: bool) -> Want {
    let mut vals = Vec::new();
    let mut tol = Vec::new();
    for l in lanes(x, d, dim) {
        let n = l.len() as f64;
        let mean = l.iter().sum::<f64>() / n;
        let ss: f64 = l.iter().map(|v| (v - mean) * (v - mean)).sum();
        let v = ss / (l.len().saturating_sub(correction) as f64);
        vals.push(v);
        tol.push(1e-12 * (1.0 + v.abs() + l.iter().map(|v| v * v).sum::<f64>()));
    }
    let mut dims = d.to_vec();
    if keepdim {
        dims[dim] = 1;
    } else {
        dims.remove(dim);
    }
    Want { dims, vals, tol }
}

tensor_fn! {
    fn keepdims(x: &Tensor<Cpu, f64, [A, B]>) -> (
        Tensor<Cpu, f64, [A, 1]>, Tensor<Cpu, f64, [1, B]>, Tensor<Cpu, f64, [A, 1]>, Tensor<Cpu, i64, [A, 1]>,
        Tensor<Cpu, f64, [1, 1]>,
    ) {
        (x.sum(1, keepdim = true), x.mean(dim = 0, keepdim = true), x.max(-1, true), x.argmax(1, keepdim = true), x.sum(keepdim = true))
    }
    fn vars(x: &Tensor<Cpu, f64, [4, 3]>) -> (
        Tensor<Cpu, f64, [4]>, Tensor<Cpu, f64, [3]>, Tensor<Cpu, f64, [4, 1]>, Tensor<Cpu, f64, [1, 3]>,
    ) {
        (x.var(1), x.var(0, correction = 0), x.var(-1, keepdim = true), x.var(dim = 0, correction = 2, keepdim = true))
    }
    fn var_runtime(x: &Tensor<Cpu, f64, [A, B]>) -> Tensor<Cpu, f64, [A]> {
        x.var(1, correction = 0)
    }
}

/// `keepdim = true` on the reductions (positional and keyword, one dim
/// and all), and `var` with each correction, static and run-time dims,
/// against plain-loop references; the typed `var` too.
#[test]
fn keepdim_and_var() {
    let mut rng = Rng::new(619);
    for (a, b) in [(3, 4), (1, 5), (2, 0)] {
        let v = rng.values(a * b, if b == 0 { &[] } else { &[0.0, -0.0] });
        let x: Tensor<Cpu, f64, S2> = tensor(&v, &[a, b]);
        let keep = |w: Option<Want>, dims: Vec<usize>| w.map(|w| Want { dims, ..w });
        let mut wants = vec![
            keep(
                reduce_ref(ReduceOp::Sum, &v, &[a, b], Some(1), 1e-12),
                vec![a, 1],
            ),
            keep(
                reduce_ref(ReduceOp::Mean, &v, &[a, b], Some(0), 1e-12),
                vec![1, b],
            ),
        ];
        if b > 0 {
            wants.push(keep(
                reduce_ref(ReduceOp::Max, &v, &[a, b], Some(1), 1e-12),
                vec![a, 1],
            ));
            wants.push(keep(
                reduce_ref(ReduceOp::ArgMax, &v, &[a, b], Some(1), 1e-12),
                vec![a, 1],
            ));
            wants.push(keep(
                reduce_ref(ReduceOp::Sum, &v, &[a, b], None, 1e-12),
                vec![1, 1],
            ));
            let wants: Vec<Want> = wants.into_iter().map(|w| w.expect("defined")).collect();
            check_all(
                &format!("keepdim of [{a}, {b}]"),
                &keepdims(&x).unwrap().outs(),
                &wants,
            );
        } else {
            // max of an empty dim is an `Err`, as without keepdim.
            assert!(keepdims(&x).is_err());
        }
        check(
            &format!("var over a run-time dim of [{a}, {b}]"),
            &one(&var_runtime(&x).unwrap()),
            &var_ref(&v, &[a, b], 1, 0, false),
        );
        for c in [0, 1, 2] {
            check(
                &format!("typed var::<1>({c}) of [{a}, {b}]"),
                &one(&x.var::<1>(c).unwrap()),
                &var_ref(&v, &[a, b], 1, c, false),
            );
        }
    }
    let v = rng.values(12, SPECIAL);
    let x: Tensor<Cpu, f64, shape![4, 3]> = tensor(&v, &[4, 3]);
    check_all(
        "var of [4, 3]",
        &vars(&x).unwrap().outs(),
        &[
            var_ref(&v, &[4, 3], 1, 1, false),
            var_ref(&v, &[4, 3], 0, 0, false),
            var_ref(&v, &[4, 3], 1, 1, true),
            var_ref(&v, &[4, 3], 0, 2, true),
        ],
    );
}

// ---------------------------------------------------------------------
// embedding, index_select, gather, arange, tril, triu.
// ---------------------------------------------------------------------

/// `embedding` by plain loops: row `ids[i]` of `w` (`[V, E]`) for every id,
/// `None` when an id is outside `0..V`.
fn embedding_ref(ids: &[i64], id_dims: &[usize], w: &[f64], v: usize, e: usize) -> Option<Want> {
    let mut out = Vec::with_capacity(ids.len() * e);
    for &k in ids {
        if k < 0 || k as usize >= v {
            return None;
        }
        out.extend_from_slice(&w[k as usize * e..(k as usize + 1) * e]);
    }
    let mut dims = id_dims.to_vec();
    dims.push(e);
    Some(Want::bits(dims, out))
}

/// `index_select` by plain loops.
fn index_select_ref(x: &[f64], d: &[usize], dim: usize, idx: &[i64]) -> Option<Want> {
    if idx.iter().any(|&k| k < 0 || k as usize >= d[dim]) {
        return None;
    }
    let mut od = d.to_vec();
    od[dim] = idx.len();
    let vals = (0..numel(&od))
        .map(|i| {
            let mut ix = unravel(i, &od);
            ix[dim] = idx[ix[dim]] as usize;
            x[ravel(&ix, d)]
        })
        .collect();
    Some(Want::bits(od, vals))
}

/// `gather` by plain loops.
fn gather_ref(x: &[f64], d: &[usize], dim: usize, idx: &[i64], id: &[usize]) -> Option<Want> {
    let mut vals = Vec::with_capacity(idx.len());
    for (i, &k) in idx.iter().enumerate() {
        if k < 0 || k as usize >= d[dim] {
            return None;
        }
        let mut ix = unravel(i, id);
        ix[dim] = k as usize;
        vals.push(x[ravel(&ix, d)]);
    }
    Some(Want::bits(id.to_vec(), vals))
}

/// `tril` (`upper: false`) or `triu` by plain loops.
fn triangle_ref(x: &[f64], d: &[usize], upper: bool, diagonal: i64) -> Want {
    let (r, c) = (d[d.len() - 2], d[d.len() - 1]);
    let vals = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let (row, col) = ((i / c) % r, i % c);
            let off = col as i64 - row as i64;
            let keep = if upper {
                off >= diagonal
            } else {
                off <= diagonal
            };
            if keep {
                v
            } else {
                0.0
            }
        })
        .collect();
    Want::bits(d.to_vec(), vals)
}

/// `n` indices in `0..below` (all of them `bad` when given).
fn indices(rng: &mut Rng, n: usize, below: usize) -> Vec<i64> {
    (0..n).map(|_| rng.below(below.max(1)) as i64).collect()
}

fn ids_tensor<I: DType, S: Shape>(v: &[i64], dims: &[usize]) -> Tensor<Cpu, I, S> {
    Tensor::from_vec_dims(v.iter().map(|&k| I::from_i64(k)).collect(), dims).unwrap()
}

tensor_fn! {
    fn emb0(ids: &Tensor<Cpu, i64, []>, w: &Tensor<Cpu, f64, [V, E]>) -> Tensor<Cpu, f64, [E]> {
        embedding(ids, w)
    }
    fn emb1(ids: &Tensor<Cpu, i64, [N]>, w: &Tensor<Cpu, f64, [V, E]>) -> Tensor<Cpu, f64, [N, E]> {
        embedding(ids, w)
    }
    fn emb2(ids: &Tensor<Cpu, i32, [B, N]>, w: &Tensor<Cpu, f64, [V, E]>) -> Tensor<Cpu, f64, [B, N, E]> {
        embedding(input = ids, weight = w)
    }
    fn emb3(ids: &Tensor<Cpu, i64, [A, B, N]>, w: &Tensor<Cpu, f64, [V, E]>) -> Tensor<Cpu, f64, [A, B, N, E]> {
        embedding(ids, w)
    }
    fn isel1(x: &Tensor<Cpu, f64, [A]>, i: &Tensor<Cpu, i64, [K]>) -> (Tensor<Cpu, f64, [K]>, Tensor<Cpu, f64, [K]>) {
        (index_select(x, 0, i), x.index_select(-1, i))
    }
    fn isel2(x: &Tensor<Cpu, f64, [A, B]>, i: &Tensor<Cpu, i32, [K]>) -> (Tensor<Cpu, f64, [K, B]>, Tensor<Cpu, f64, [A, K]>, Tensor<Cpu, f64, [A, K]>) {
        (x.index_select(0, i), index_select(x, 1, i), x.index_select(dim = -1, index = i))
    }
    fn isel3(x: &Tensor<Cpu, f64, [A, B, C]>, i: &Tensor<Cpu, i64, [K]>) -> (Tensor<Cpu, f64, [K, B, C]>, Tensor<Cpu, f64, [A, K, C]>, Tensor<Cpu, f64, [A, B, K]>) {
        (x.index_select(0, i), x.index_select(1, i), index_select(x, 2, i))
    }
    fn isel4(x: &Tensor<Cpu, f64, [A, B, C, E]>, i: &Tensor<Cpu, i64, [K]>) -> (
        Tensor<Cpu, f64, [K, B, C, E]>, Tensor<Cpu, f64, [A, K, C, E]>, Tensor<Cpu, f64, [A, B, K, E]>, Tensor<Cpu, f64, [A, B, C, K]>,
    ) {
        (x.index_select(0, i), x.index_select(1, i), x.index_select(2, i), x.index_select(-1, i))
    }
    fn gather1(x: &Tensor<Cpu, f64, [A]>, i: &Tensor<Cpu, i64, [K]>) -> (Tensor<Cpu, f64, [K]>, Tensor<Cpu, f64, [K]>) {
        (gather(x, 0, i), x.gather(-1, i))
    }
    fn gather2(x: &Tensor<Cpu, f64, [A, B]>, i: &Tensor<Cpu, i32, [P, Q]>) -> (Tensor<Cpu, f64, [P, Q]>, Tensor<Cpu, f64, [P, Q]>, Tensor<Cpu, f64, [P, Q]>) {
        (x.gather(0, i), gather(x, 1, i), x.gather(dim = -1, index = i))
    }
    fn gather3(x: &Tensor<Cpu, f64, [A, B, C]>, i: &Tensor<Cpu, i64, [P, Q, R]>) -> (Tensor<Cpu, f64, [P, Q, R]>, Tensor<Cpu, f64, [P, Q, R]>, Tensor<Cpu, f64, [P, Q, R]>) {
        (x.gather(0, i), x.gather(1, i), gather(x, 2, i))
    }
    fn gather4(x: &Tensor<Cpu, f64, [A, B, C, E]>, i: &Tensor<Cpu, i64, [P, Q, R, S]>) -> (
        Tensor<Cpu, f64, [P, Q, R, S]>, Tensor<Cpu, f64, [P, Q, R, S]>, Tensor<Cpu, f64, [P, Q, R, S]>, Tensor<Cpu, f64, [P, Q, R, S]>,
    ) {
        (x.gather(0, i), x.gather(1, i), x.gather(2, i), x.gather(3, i))
    }
    fn ranges(x: &Tensor<Cpu, f64, [N, M]>) -> (Tensor<Cpu, i64, [N]>, Tensor<Cpu, i64, [5]>, Tensor<Cpu, i64, [N * M]>, Tensor<Cpu, i64, [0]>) {
        (arange(N), arange(5), arange(end = N * M), arange(0))
    }
    /// `arange(start, end)`.
    fn spans(x: &Tensor<Cpu, f64, [N, M]>) -> (Tensor<Cpu, i64, [3]>, Tensor<Cpu, i64, [M]>, Tensor<Cpu, i64, [N]>, Tensor<Cpu, i64, [0]>) {
        (arange(2, 5), arange(N, N + M), arange(start = 3, end = N + 3), arange(M, M))
    }
    fn tri2(x: &Tensor<Cpu, f64, [A, B]>) -> (
        Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>,
    ) {
        (tril(x), x.triu(), x.tril(diagonal = -1), triu(x, 2))
    }
    fn tri3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>) {
        (x.tril(1), triu(x, -2))
    }
    fn tri4(x: &Tensor<Cpu, f64, [A, B, C, E]>) -> (Tensor<Cpu, f64, [A, B, C, E]>, Tensor<Cpu, f64, [A, B, C, E]>) {
        (tril(x, 0), x.triu(diagonal = 0))
    }
    /// A causal mask from `arange` and a comparison, and from `tril`.
    fn causal(m: &Tensor<Cpu, bool, [T, T]>) -> (Tensor<Cpu, bool, [T, T]>, Tensor<Cpu, bool, [T, T]>) {
        (m.tril(), arange(T).unsqueeze(0).le(arange(T).unsqueeze(1)))
    }
}

/// The dims each `iselN`/`gatherN` picks along, in its order.
const SELECT_DIMS: [&[isize]; 5] = [&[], &[0, -1], &[0, 1, -1], &[0, 1, 2], &[0, 1, 2, -1]];
const GATHER_DIMS: [&[isize]; 5] = [&[], &[0, -1], &[0, 1, -1], &[0, 1, 2], &[0, 1, 2, 3]];

#[test]
fn embedding_of_every_rank_of_ids() {
    let mut rng = Rng::new(811);
    for round in 0..6 {
        let (v, e) = (1 + rng.below(6), 1 + rng.below(5));
        let w_v = rng.values(v * e, SPECIAL);
        let w: Tensor<Cpu, f64, shape![_, _]> = tensor(&w_v, &[v, e]);
        // The last rounds put one id out of range (negative or past V).
        let bad = round >= 4;
        let d = random_dims(&mut rng, 1, 4);
        let ids: Vec<Vec<i64>> = d
            .iter()
            .map(|dims| {
                let mut ids = indices(&mut rng, numel(dims), v);
                if bad {
                    let k = rng.below(ids.len());
                    ids[k] = if round == 4 { -1 } else { v as i64 };
                }
                ids
            })
            .collect();
        let want = |r: usize| embedding_ref(&ids[r], &d[r], &w_v, v, e);
        let what = |r: usize| format!("embedding of ids {:?} in [{v}, {e}]", d[r]);
        check_or_err(&what(0), emb0(&ids_tensor(&ids[0], &d[0]), &w), &[want(0)]);
        check_or_err(&what(1), emb1(&ids_tensor(&ids[1], &d[1]), &w), &[want(1)]);
        check_or_err(&what(2), emb2(&ids_tensor(&ids[2], &d[2]), &w), &[want(2)]);
        check_or_err(&what(3), emb3(&ids_tensor(&ids[3], &d[3]), &w), &[want(3)]);
        // The typed API, i64 and i32 ids.
        let t64: Result<Tensor<Cpu, f64, S4>> =
            Tensor::embedding(&ids_tensor::<i64, S3>(&ids[3], &d[3]), &w);
        check_or_err(&format!("typed {}", what(3)), t64, &[want(3)]);
        let t32: Result<Tensor<Cpu, f64, S2>> =
            Tensor::embedding(&ids_tensor::<i32, S1>(&ids[1], &d[1]), &w);
        check_or_err(&format!("typed i32 {}", what(1)), t32, &[want(1)]);
    }
}

#[test]
fn embedding_of_no_ids_and_of_an_empty_table() {
    let w: Tensor<Cpu, f64, shape![_, _]> = tensor(&[], &[0, 3]);
    let none: Tensor<Cpu, i64, shape![_]> = ids_tensor(&[], &[0]);
    check_all(
        "no ids, V = 0",
        &emb1(&none, &w).unwrap().outs(),
        &[Want::bits(vec![0, 3], vec![])],
    );
    let one: Tensor<Cpu, i64, shape![_]> = ids_tensor(&[0], &[1]);
    let e = emb1(&one, &w).unwrap_err().to_string();
    assert!(
        e.contains("embedding: index 0 in `input`") && e.contains("no index is valid"),
        "{e}"
    );
    let w: Tensor<Cpu, f64, shape![_, _]> = tensor(&[1.0, 2.0], &[2, 1]);
    let zero_e: Tensor<Cpu, f64, shape![_, _]> = tensor(&[], &[2, 0]);
    let ids: Tensor<Cpu, i32, shape![_, _]> = ids_tensor(&[1, 0, 1], &[1, 3]);
    check_all(
        "[1, 3] ids",
        &emb2(&ids, &w).unwrap().outs(),
        &[Want::bits(vec![1, 3, 1], vec![2.0, 1.0, 2.0])],
    );
    check_all(
        "E = 0",
        &emb2(&ids, &zero_e).unwrap().outs(),
        &[Want::bits(vec![1, 3, 0], vec![])],
    );
}

/// `embedding` copies whatever the table holds: every dtype, bit for bit.
#[test]
fn embedding_of_every_dtype() {
    fn walk<T: DType>() {
        let mut rng = Rng::new(823);
        let w_v = rng.values(12, &[0.0, -0.0, 1.0]);
        let w: Tensor<Cpu, T, shape![4, 3]> = tensor(&w_v, &[4, 3]);
        let stored: Vec<f64> = w.to_vec().unwrap().iter().map(|x| x.to_f64()).collect();
        let ids = [3i64, 0, 3, 2, 1];
        let want = embedding_ref(&ids, &[5], &stored, 4, 3).unwrap();
        let got: Tensor<Cpu, T, shape![5, 3]> =
            Tensor::embedding(&ids_tensor::<i64, shape![5]>(&ids, &[5]), &w).unwrap();
        check(
            &format!("embedding of {}", T::KIND.name()),
            &one(&got),
            &want,
        );
        let got: Tensor<Cpu, T, shape![5, 3]> =
            Tensor::embedding(&ids_tensor::<i32, shape![5]>(&ids, &[5]), &w).unwrap();
        check(
            &format!("embedding of {} by i32", T::KIND.name()),
            &one(&got),
            &want,
        );
        // And through a transposed (strided) table.
        let wt: Tensor<Cpu, T, shape![3, 4]> = tensor(&w_v, &[3, 4]);
        let t = wt.t().unwrap();
        let stored_t: Vec<f64> = t.to_vec().unwrap().iter().map(|x| x.to_f64()).collect();
        let got: Tensor<Cpu, T, shape![5, 3]> =
            Tensor::embedding(&ids_tensor::<i64, shape![5]>(&ids, &[5]), &t).unwrap();
        check(
            "strided table",
            &one(&got),
            &embedding_ref(&ids, &[5], &stored_t, 4, 3).unwrap(),
        );
    }
    walk::<f32>();
    walk::<f64>();
    walk::<f16>();
    walk::<bf16>();
    walk::<i32>();
    walk::<i64>();
    walk::<u8>();
    walk::<bool>();
}

#[test]
fn index_select_along_each_dim() {
    let mut rng = Rng::new(829);
    for round in 0..8 {
        let d = if round == 6 {
            empty_dims(&mut rng)
        } else {
            random_dims(&mut rng, 1, 4)
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        let v = [&xv.0, &xv.1, &xv.2, &xv.3, &xv.4];
        // Valid for every dim picked: below the smallest; the last round
        // has one index past it (an Err where that dim is that small).
        let k = if round == 5 { 0 } else { 1 + rng.below(5) };
        for r in 1..5 {
            let least = *d[r].iter().min().unwrap();
            let mut idx = if least == 0 {
                vec![]
            } else {
                indices(&mut rng, k, least)
            };
            if round == 7 {
                idx = vec![0, -3];
            }
            let refs: Vec<Option<Want>> = SELECT_DIMS[r]
                .iter()
                .map(|&dim| index_select_ref(v[r], &d[r], pos(dim, r), &idx))
                .collect();
            let what = format!("index_select by {idx:?} at rank {r}, dims {:?}", d[r]);
            let (i64s, i32s): (Tensor<Cpu, i64, S1>, Tensor<Cpu, i32, S1>) = (
                ids_tensor(&idx, &[idx.len()]),
                ids_tensor(&idx, &[idx.len()]),
            );
            match r {
                1 => check_or_err(&what, isel1(&x.1, &i64s), &refs),
                2 => check_or_err(&what, isel2(&x.2, &i32s), &refs),
                3 => check_or_err(&what, isel3(&x.3, &i64s), &refs),
                _ => check_or_err(&what, isel4(&x.4, &i64s), &refs),
            }
            // The typed API along dim 0 and the last dim, both index dtypes.
            let last = r - 1;
            let typed0 = index_select_ref(v[r], &d[r], 0, &idx);
            let typed_last = index_select_ref(v[r], &d[r], last, &idx);
            let w = format!("typed {what}");
            match r {
                1 => {
                    check_or_err(&w, x.1.index_select::<0, S1>(&i32s), &[typed0]);
                }
                2 => {
                    check_or_err(&w, x.2.index_select::<0, S2>(&i64s), &[typed0]);
                    check_or_err(&w, x.2.index_select::<1, S2>(&i32s), &[typed_last]);
                }
                3 => {
                    check_or_err(&w, x.3.index_select::<0, S3>(&i32s), &[typed0]);
                    check_or_err(&w, x.3.index_select::<2, S3>(&i64s), &[typed_last]);
                }
                _ => {
                    check_or_err(&w, x.4.index_select::<0, S4>(&i64s), &[typed0]);
                    check_or_err(&w, x.4.index_select::<3, S4>(&i32s), &[typed_last]);
                }
            }
        }
    }
}

#[test]
fn gather_along_each_dim() {
    let mut rng = Rng::new(839);
    for round in 0..8 {
        let d = if round == 6 {
            empty_dims(&mut rng)
        } else {
            random_dims(&mut rng, 1, 4)
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        let v = [&xv.0, &xv.1, &xv.2, &xv.3, &xv.4];
        for r in 1..5 {
            // Index dims no larger than the input's, values below its
            // smallest dim (valid along every dim); round 7 puts one past.
            let id: Vec<usize> = d[r]
                .iter()
                .map(|&n| if n == 0 { 0 } else { 1 + rng.below(n) })
                .collect();
            let least = *d[r].iter().min().unwrap();
            let mut idx = indices(&mut rng, numel(&id), least);
            if round == 7 && !idx.is_empty() {
                let k = rng.below(idx.len());
                idx[k] = if r % 2 == 0 { -1 } else { 99 };
            }
            let refs: Vec<Option<Want>> = GATHER_DIMS[r]
                .iter()
                .map(|&dim| gather_ref(v[r], &d[r], pos(dim, r), &idx, &id))
                .collect();
            let what = format!("gather by {id:?} at rank {r}, dims {:?}", d[r]);
            match r {
                1 => check_or_err(&what, gather1(&x.1, &ids_tensor(&idx, &id)), &refs),
                2 => check_or_err(&what, gather2(&x.2, &ids_tensor(&idx, &id)), &refs),
                3 => check_or_err(&what, gather3(&x.3, &ids_tensor(&idx, &id)), &refs),
                _ => check_or_err(&what, gather4(&x.4, &ids_tensor(&idx, &id)), &refs),
            }
            let w = format!("typed {what}");
            let last = r - 1;
            let typed0 = gather_ref(v[r], &d[r], 0, &idx, &id);
            let typed_last = gather_ref(v[r], &d[r], last, &idx, &id);
            match r {
                1 => check_or_err(
                    &w,
                    x.1.gather::<0, S1>(&ids_tensor::<i32, S1>(&idx, &id)),
                    &[typed0],
                ),
                2 => {
                    check_or_err(
                        &w,
                        x.2.gather::<0, S2>(&ids_tensor::<i64, S2>(&idx, &id)),
                        &[typed0],
                    );
                    check_or_err(
                        &w,
                        x.2.gather::<1, S2>(&ids_tensor::<i32, S2>(&idx, &id)),
                        &[typed_last],
                    );
                }
                3 => check_or_err(
                    &w,
                    x.3.gather::<2, S3>(&ids_tensor::<i64, S3>(&idx, &id)),
                    &[typed_last],
                ),
                _ => check_or_err(
                    &w,
                    x.4.gather::<0, S4>(&ids_tensor::<i32, S4>(&idx, &id)),
                    &[typed0],
                ),
            }
        }
    }
    // An index larger than the input off the gathered dim is an Err.
    let x: Tensor<Cpu, f64, S2> = tensor(&[1.0, 2.0], &[1, 2]);
    let i: Tensor<Cpu, i32, S2> = ids_tensor(&[0, 0, 0, 0], &[2, 2]);
    let e = gather2(&x, &i).unwrap_err().to_string();
    assert!(
        e.contains("dim 0 of `index` is 2 but dim 0 of `self` is 1"),
        "{e}"
    );
}

#[test]
fn arange_of_dims_and_literals() {
    for (n, m) in [(3, 4), (0, 2), (1, 1)] {
        let x: Tensor<Cpu, f64, S2> = tensor(&vec![0.0; n * m], &[n, m]);
        let r = |k: usize| Want::exact(vec![k], (0..k).map(|i| i as f64).collect());
        check_all(
            "arange",
            &ranges(&x).unwrap().outs(),
            &[r(n), r(5), r(n * m), r(0)],
        );
        let span =
            |a: usize, b: usize| Want::exact(vec![b - a], (a..b).map(|i| i as f64).collect());
        check_all(
            "arange(start, end)",
            &spans(&x).unwrap().outs(),
            &[span(2, 5), span(n, n + m), span(3, n + 3), span(m, m)],
        );
    }
}

#[test]
fn tril_and_triu_of_every_rank() {
    let mut rng = Rng::new(853);
    for round in 0..5 {
        let d = if round == 4 {
            empty_dims(&mut rng)
        } else {
            random_dims(&mut rng, 1, 5)
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        let what = |r: usize| format!("tril/triu at rank {r}, dims {:?}", d[r]);
        let t = |v: &[f64], r: usize, upper, k| triangle_ref(v, &d[r], upper, k);
        check_all(
            &what(2),
            &tri2(&x.2).unwrap().outs(),
            &[
                t(&xv.2, 2, false, 0),
                t(&xv.2, 2, true, 0),
                t(&xv.2, 2, false, -1),
                t(&xv.2, 2, true, 2),
            ],
        );
        check_all(
            &what(3),
            &tri3(&x.3).unwrap().outs(),
            &[t(&xv.3, 3, false, 1), t(&xv.3, 3, true, -2)],
        );
        check_all(
            &what(4),
            &tri4(&x.4).unwrap().outs(),
            &[t(&xv.4, 4, false, 0), t(&xv.4, 4, true, 0)],
        );
        // The typed API, far diagonals included.
        for k in [-7, -1, 0, 1, 7] {
            check(
                &format!("typed {}", what(3)),
                &one(&x.3.tril(k).unwrap()),
                &t(&xv.3, 3, false, k),
            );
            check(
                &format!("typed {}", what(2)),
                &one(&x.2.triu(k).unwrap()),
                &t(&xv.2, 2, true, k),
            );
        }
    }
}

#[test]
fn tril_of_every_dtype_and_causal_masks() {
    fn walk<T: DType>() {
        let v: Vec<f64> = (1..=12).map(|i| i as f64).collect();
        let x: Tensor<Cpu, T, shape![3, 4]> = tensor(&v, &[3, 4]);
        let stored: Vec<f64> = x.to_vec().unwrap().iter().map(|x| x.to_f64()).collect();
        let want = triangle_ref(&stored, &[3, 4], false, 0);
        check(
            &format!("tril of {}", T::KIND.name()),
            &one(&x.tril(0).unwrap()),
            &Want::exact(want.dims, want.vals),
        );
        let want = triangle_ref(&stored, &[3, 4], true, 1);
        check(
            &format!("triu of {}", T::KIND.name()),
            &one(&x.triu(1).unwrap()),
            &Want::exact(want.dims, want.vals),
        );
    }
    walk::<f32>();
    walk::<f64>();
    walk::<f16>();
    walk::<bf16>();
    walk::<i32>();
    walk::<i64>();
    walk::<u8>();
    walk::<bool>();
    for t in [0, 1, 4] {
        let m: Tensor<Cpu, bool, S2> = Tensor::ones_dims(&[t, t]).unwrap();
        let (a, b) = causal(&m).unwrap();
        let want: Vec<bool> = (0..t * t).map(|i| i % t <= i / t).collect();
        assert_eq!(a.to_vec().unwrap(), want);
        assert_eq!(b.to_vec().unwrap(), want);
    }
}

tensor_fn! {
    /// GPT-2's input: token and position embeddings, generic over the
    /// device and the float dtype, and a causal mask of the same length.
    fn gpt2_input<D: Device, T: Float>(
        ids: &Tensor<D, i64, [B, N]>,
        wte: &Tensor<D, T, [V, E]>,
        wpe: &Tensor<D, T, [P, E]>,
    ) -> (Tensor<D, T, [B, N, E]>, Tensor<D, bool, [N, N]>) {
        let pos = embedding(arange(N), wpe);
        let mask = arange(N).unsqueeze(1).ge(arange(N).unsqueeze(0));
        (embedding(ids, wte) + pos, mask)
    }
}

#[test]
fn generic_embeddings_and_masks() {
    fn walk<T: Float>() {
        let (b, n, v, e, p) = (2, 3, 7, 4, 5);
        let mut rng = Rng::new(877);
        let wte_v = rng.values(v * e, &[]);
        let wpe_v = rng.values(p * e, &[]);
        let wte: Tensor<Cpu, T, S2> = tensor(&wte_v, &[v, e]);
        let wpe: Tensor<Cpu, T, S2> = tensor(&wpe_v, &[p, e]);
        let to = |x: &[f64]| -> Vec<f64> { x.iter().map(|&v| T::from_f64(v).to_f64()).collect() };
        let (wte_s, wpe_s) = (to(&wte_v), to(&wpe_v));
        let ids_v = indices(&mut rng, b * n, v);
        let ids: Tensor<Cpu, i64, S2> = ids_tensor(&ids_v, &[b, n]);
        let (x, mask) = gpt2_input(&ids, &wte, &wpe).unwrap();
        let got: Vec<f64> = x.to_vec().unwrap().iter().map(|v| v.to_f64()).collect();
        for (i, g) in got.iter().enumerate() {
            let (row, col) = (i / e, i % e);
            let want =
                T::from_f64(wte_s[ids_v[row] as usize * e + col] + wpe_s[(row % n) * e + col]);
            assert_eq!(*g, want.to_f64(), "{} element {i}", T::KIND.name());
        }
        let want: Vec<bool> = (0..n * n).map(|i| i % n <= i / n).collect();
        assert_eq!(mask.to_vec().unwrap(), want);
        // More positions than the table has: an Err naming `wpe`'s rows.
        let long: Tensor<Cpu, i64, S2> = ids_tensor(&[0; 6], &[1, 6]);
        let err = gpt2_input(&long, &wte, &wpe).unwrap_err().to_string();
        assert!(
            err.contains("index 5 in `input`") && err.contains("the rows of `weight`"),
            "{err}"
        );
        // The same function on the GPU, where there is one: the same bits,
        // the same error, and the device works after it.
        let Ok(g_wte) = wte.to_device::<Cuda>() else {
            eprintln!("skipping the GPU part: no CUDA device");
            return;
        };
        let g_wpe = wpe.to_device::<Cuda>().unwrap();
        let g_ids = ids.to_device::<Cuda>().unwrap();
        let g_long = long.to_device::<Cuda>().unwrap();
        let g_err = gpt2_input(&g_long, &g_wte, &g_wpe).unwrap_err().to_string();
        assert_eq!(g_err, err);
        let (gx, gmask) = gpt2_input(&g_ids, &g_wte, &g_wpe).unwrap();
        assert_eq!(gx.to_vec().unwrap(), x.to_vec().unwrap());
        assert_eq!(gmask.to_vec().unwrap(), mask.to_vec().unwrap());
    }
    walk::<f32>();
    walk::<f64>();
    walk::<f16>();
    walk::<bf16>();
}

// ---------------------------------------------------------------------
// layer_norm, rms_norm.
// ---------------------------------------------------------------------

tensor_fn! {
    fn norm1(x: &Tensor<Cpu, f64, [N]>, w: &Tensor<Cpu, f64, [N]>, b: &Tensor<Cpu, f64, [N]>) -> (
        Tensor<Cpu, f64, [N]>, Tensor<Cpu, f64, [N]>, Tensor<Cpu, f64, [N]>, Tensor<Cpu, f64, [N]>,
    ) {
        (layer_norm(x, w, b), x.layer_norm(w, b, eps = 1e-3), rms_norm(x, w, eps = None), x.rms_norm(w, eps = 1e-6))
    }
    fn norm2(x: &Tensor<Cpu, f64, [A, N]>, w: &Tensor<Cpu, f64, [N]>, b: &Tensor<Cpu, f64, [N]>) -> (
        Tensor<Cpu, f64, [A, N]>, Tensor<Cpu, f64, [A, N]>, Tensor<Cpu, f64, [A, N]>, Tensor<Cpu, f64, [A, N]>,
    ) {
        (layer_norm(x, w, b, 1e-3), x.layer_norm(weight = w, bias = b), rms_norm(x, w, eps = 1e-6), x.rms_norm(w))
    }
    fn norm3(x: &Tensor<Cpu, f64, [A, B, N]>, w: &Tensor<Cpu, f64, [N]>, b: &Tensor<Cpu, f64, [N]>) -> (
        Tensor<Cpu, f64, [A, B, N]>, Tensor<Cpu, f64, [A, B, N]>, Tensor<Cpu, f64, [A, B, N]>, Tensor<Cpu, f64, [A, B, N]>,
    ) {
        (x.layer_norm(w, b), layer_norm(input = x, weight = w, bias = b, eps = 1e-3), x.rms_norm(w, 1e-6), rms_norm(x, weight = w))
    }
    fn norm4(x: &Tensor<Cpu, f64, [A, B, C, N]>, w: &Tensor<Cpu, f64, [N]>, b: &Tensor<Cpu, f64, [N]>) -> (
        Tensor<Cpu, f64, [A, B, C, N]>, Tensor<Cpu, f64, [A, B, C, N]>, Tensor<Cpu, f64, [A, B, C, N]>, Tensor<Cpu, f64, [A, B, C, N]>,
    ) {
        (layer_norm(x, w, b), x.layer_norm(w, b, 1e-3), rms_norm(x, w, 1e-6), x.rms_norm(w))
    }
    fn norm_f32(x: &Tensor<Cpu, f32, [A, N]>, w: &Tensor<Cpu, f32, [N]>, b: &Tensor<Cpu, f32, [N]>) -> (Tensor<Cpu, f32, [A, N]>, Tensor<Cpu, f32, [A, N]>) {
        (x.layer_norm(w, b), rms_norm(x, w, eps = 1e-6))
    }
    fn norm_f16(x: &Tensor<Cpu, f16, [A, N]>, w: &Tensor<Cpu, f16, [N]>, b: &Tensor<Cpu, f16, [N]>) -> (Tensor<Cpu, f16, [A, N]>, Tensor<Cpu, f16, [A, N]>) {
        (x.layer_norm(w, b), rms_norm(x, w))
    }
    fn norm_bf16(x: &Tensor<Cpu, bf16, [A, N]>, w: &Tensor<Cpu, bf16, [N]>, b: &Tensor<Cpu, bf16, [N]>) -> (Tensor<Cpu, bf16, [A, N]>, Tensor<Cpu, bf16, [A, N]>) {
        (layer_norm(x, w, b, eps = 1e-5), x.rms_norm(w, eps = 1e-6))
    }
    /// Static dims, a weight read as a `Const` against the input's own.
    fn norm_static(x: &Tensor<Cpu, f32, [2, 3]>, w: &Tensor<Cpu, f32, [3]>, b: &Tensor<Cpu, f32, [3]>) -> Tensor<Cpu, f32, [2, 3]> {
        layer_norm(x, w, b) + rms_norm(x, w)
    }
}

/// `(op, eps)` of each result of `normN` (`None`: the op's default).
const NORMS: [&[(NormOp, Option<f64>)]; 5] = {
    use NormOp::{LayerNorm as L, RmsNorm as R};
    [
        &[],
        &[(L, None), (L, Some(1e-3)), (R, None), (R, Some(1e-6))],
        &[(L, Some(1e-3)), (L, None), (R, Some(1e-6)), (R, None)],
        &[(L, None), (L, Some(1e-3)), (R, Some(1e-6)), (R, None)],
        &[(L, None), (L, Some(1e-3)), (R, Some(1e-6)), (R, None)],
    ]
};

/// `op` over the last dim of `x` (dims `d`), each row against the f64
/// reference, within `rel` of the result's scale (`|w| + |b|` bounds a
/// normalised element over `sqrt(len)`).
fn norm_ref(op: NormOp, x: &[f64], d: &[usize], w: &[f64], b: &[f64], eps: f64, rel: f64) -> Want {
    let len = *d.last().expect("rank 1 or more");
    let mut vals = Vec::with_capacity(x.len());
    let mut tol = Vec::with_capacity(x.len());
    if len > 0 {
        for row in x.chunks(len) {
            vals.extend(op.eval_f64(row, w, b, eps));
            let scale = (len as f64).sqrt();
            tol.extend((0..len).map(|c| rel * (w[c].abs() * scale + b[c].abs() + 1.0)));
        }
    }
    Want {
        dims: d.to_vec(),
        vals,
        tol,
    }
}

#[test]
fn norms_over_the_last_dim_at_every_rank() {
    let mut rng = Rng::new(707);
    for round in 0..5 {
        let d = match round {
            0 | 1 => random_dims(&mut rng, 1, 6),
            2 => empty_dims(&mut rng),
            3 => random_dims(&mut rng, 1, 3),
            // Long rows (the block path of the CUDA kernels; here the same
            // loop) with a large mean.
            _ => [
                vec![],
                vec![4100],
                vec![2, 1500],
                vec![1, 2, 700],
                vec![1, 1, 2, 300],
            ],
        };
        let special: &[f64] = if round == 4 { &[] } else { SPECIAL };
        let (mut xv, x) = inputs_by_rank(&mut rng, &d, special);
        if round == 4 {
            for v in [&mut xv.1, &mut xv.2, &mut xv.3, &mut xv.4] {
                v.iter_mut().for_each(|x| *x += 1000.0);
            }
        }
        let x = if round == 4 {
            (
                x.0,
                tensor(&xv.1, &d[1]),
                tensor(&xv.2, &d[2]),
                tensor(&xv.3, &d[3]),
                tensor(&xv.4, &d[4]),
            )
        } else {
            x
        };
        for r in 1..5 {
            let n = d[r][r - 1];
            let wv = rng.values(n, &[]);
            let bv = rng.values(n, &[]);
            let (w, b): (Tensor<Cpu, f64, S1>, Tensor<Cpu, f64, S1>) =
                (tensor(&wv, &[n]), tensor(&bv, &[n]));
            let v = [&xv.0, &xv.1, &xv.2, &xv.3, &xv.4][r];
            let want: Vec<Want> = NORMS[r]
                .iter()
                .map(|&(op, eps)| {
                    let eps = eps.unwrap_or(op.default_eps(tensorfn::DTypeKind::F64));
                    norm_ref(op, v, &d[r], &wv, &bv, eps, 1e-12)
                })
                .collect();
            let what = format!("norms at rank {r}, dims {:?}", d[r]);
            let got = match r {
                1 => norm1(&x.1, &w, &b).unwrap().outs(),
                2 => norm2(&x.2, &w, &b).unwrap().outs(),
                3 => norm3(&x.3, &w, &b).unwrap().outs(),
                _ => norm4(&x.4, &w, &b).unwrap().outs(),
            };
            check_all(&what, &got, &want);
            // The typed API.
            let typed = match r {
                1 => (
                    x.1.layer_norm(&w, &b, 1e-3).unwrap().outs(),
                    x.1.rms_norm(&w, None).unwrap().outs(),
                ),
                2 => (
                    x.2.layer_norm(&w, &b, 1e-3).unwrap().outs(),
                    x.2.rms_norm(&w, None).unwrap().outs(),
                ),
                3 => (
                    x.3.layer_norm(&w, &b, 1e-3).unwrap().outs(),
                    x.3.rms_norm(&w, None).unwrap().outs(),
                ),
                _ => (
                    x.4.layer_norm(&w, &b, 1e-3).unwrap().outs(),
                    x.4.rms_norm(&w, None).unwrap().outs(),
                ),
            };
            let eps64 = NormOp::RmsNorm.default_eps(tensorfn::DTypeKind::F64);
            check(
                &format!("typed layer_norm, {what}"),
                &typed.0[0],
                &norm_ref(NormOp::LayerNorm, v, &d[r], &wv, &bv, 1e-3, 1e-12),
            );
            check(
                &format!("typed rms_norm, {what}"),
                &typed.1[0],
                &norm_ref(NormOp::RmsNorm, v, &d[r], &wv, &bv, eps64, 1e-12),
            );
        }
    }
}

#[test]
fn norms_in_f32_f16_and_bf16() {
    let mut rng = Rng::new(708);
    for (a, n, shift) in [
        (3, 1, 0.0),
        (5, 7, 0.0),
        (4, 64, 100.0),
        (2, 1000, 0.0),
        (2, 4096, 1000.0),
    ] {
        let d = [a, n];
        let xv = rng.values(a * n, SPECIAL);
        let xv: Vec<f64> = xv.iter().map(|v| v + shift).collect();
        let wv = rng.values(n, &[]);
        let bv = rng.values(n, &[]);
        macro_rules! case {
            ($t:ty, $f:ident, $rel:expr, $eps_l:expr, $eps_r:expr) => {{
                let x: Tensor<Cpu, $t, S2> = tensor(&xv, &d);
                let w: Tensor<Cpu, $t, S1> = tensor(&wv, &[n]);
                let b: Tensor<Cpu, $t, S1> = tensor(&bv, &[n]);
                // The references see the values as rounded to the dtype.
                let r = |v: &[f64]| -> Vec<f64> {
                    v.iter().map(|&x| <$t>::from_f64(x).to_f64()).collect()
                };
                let (xr, wr, br) = (r(&xv), r(&wv), r(&bv));
                let want = [
                    norm_ref(NormOp::LayerNorm, &xr, &d, &wr, &br, $eps_l, $rel),
                    norm_ref(NormOp::RmsNorm, &xr, &d, &wr, &br, $eps_r, $rel),
                ];
                let what = format!("{} norms of [{a}, {n}] shifted by {shift}", stringify!($t));
                check_all(&what, &$f(&x, &w, &b).unwrap().outs(), &want);
                check(
                    &format!("typed {what}"),
                    &one(&x.layer_norm(&w, &b, $eps_l).unwrap()),
                    &want[0],
                );
            }};
        }
        let f32_eps = NormOp::RmsNorm.default_eps(tensorfn::DTypeKind::F32);
        case!(f32, norm_f32, 2e-6 * (1.0 + shift / 10.0), 1e-5, 1e-6);
        case!(f16, norm_f16, 1e-3, 1e-5, f32_eps);
        case!(bf16, norm_bf16, 8e-3, 1e-5, 1e-6);
    }
}

#[test]
fn norms_check_their_weights() {
    // Static dims: the typed API fixes the weight's length in its type.
    let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
    let w = Tensor::<Cpu, f32, shape![3]>::ones().unwrap();
    let b = Tensor::<Cpu, f32, shape![3]>::zeros().unwrap();
    let y = norm_static(&x, &w, &b).unwrap().to_vec().unwrap();
    let l = 1.5f64.sqrt();
    let r0 = (14.0f64 / 3.0).sqrt();
    assert!((y[0] as f64 - (-l + 1.0 / r0)).abs() < 1e-5, "{y:?}");
    // Run-time dims: a weight of another length is an `Err` naming it.
    let x: Tensor<Cpu, f32, S2> = tensor(&[1.0; 6], &[2, 3]);
    let w4: Tensor<Cpu, f32, S1> = tensor(&[1.0; 4], &[4]);
    let w3: Tensor<Cpu, f32, S1> = tensor(&[1.0; 3], &[3]);
    let e = x.layer_norm(&w3, &w4, 1e-5).unwrap_err().to_string();
    assert!(
        e.contains("`bias` must have shape [3]") && e.contains("[4]"),
        "{e}"
    );
    let e = x.rms_norm(&w4, None).unwrap_err().to_string();
    assert!(e.contains("`weight` must have shape [3]"), "{e}");
    assert!(x.rms_norm(&w3, Some(-1.0)).is_err());
    assert!(x.rms_norm(&w3, Some(f64::NAN)).is_err());
    // Inside `tensor_fn!`, the dims are bound at entry: `N` of `w` is `x`'s.
    let b4: Tensor<Cpu, f32, S1> = tensor(&[1.0; 4], &[4]);
    let x32: Tensor<Cpu, f32, S2> = tensor(&[1.0; 6], &[2, 3]);
    assert!(norm_f32(&x32, &w3, &b4).is_err());
}

// ---------------------------------------------------------------------
// scaled_dot_product_attention at ranks 2 to 4, causal, with a bool and a
// float mask, keyword arguments.
// ---------------------------------------------------------------------

tensor_fn! {
    fn sdpa2(q: &Tensor<Cpu, f64, [L, E]>, k: &Tensor<Cpu, f64, [S, E]>, v: &Tensor<Cpu, f64, [S, V]>) -> Tensor<Cpu, f64, [L, V]> {
        scaled_dot_product_attention(q, k, v)
    }
    fn sdpa3(q: &Tensor<Cpu, f64, [B, L, E]>, k: &Tensor<Cpu, f64, [B, S, E]>, v: &Tensor<Cpu, f64, [B, S, V]>) -> Tensor<Cpu, f64, [B, L, V]> {
        scaled_dot_product_attention(query = q, key = k, value = v, is_causal = true)
    }
    fn sdpa4(
        q: &Tensor<Cpu, f64, [B, H, L, E]>,
        k: &Tensor<Cpu, f64, [B, H, S, E]>,
        v: &Tensor<Cpu, f64, [B, H, S, V]>,
        keep: &Tensor<Cpu, bool, [L, S]>,
        add: &Tensor<Cpu, f64, [B, 1, L, S]>,
    ) -> (Tensor<Cpu, f64, [B, H, L, V]>, Tensor<Cpu, f64, [B, H, L, V]>) {
        (
            scaled_dot_product_attention(q, k, v, keep, scale = 0.5),
            scaled_dot_product_attention(q, k, v, attn_mask = add),
        )
    }
}

/// Attention of `[.., L, E]`, `[.., S, E]`, `[.., S, V]` (equal batch
/// dims) in plain loops; `add(batch, i, j)` is the mask, `None` for a key
/// left out. A key scored `-inf` takes no part; a row without keys is 0.
fn sdpa_ref(
    (q, k, v): (&[f64], &[f64], &[f64]),
    (qd, sd, vd): (&[usize], &[usize], &[usize]),
    causal: bool,
    scale: Option<f64>,
    add: &dyn Fn(usize, usize, usize) -> Option<f64>,
) -> Want {
    let r = qd.len();
    let (l, e, s, ev) = (qd[r - 2], qd[r - 1], sd[r - 2], vd[r - 1]);
    let batch = numel(&qd[..r - 2]);
    let scale = scale.unwrap_or(if e == 0 { 0.0 } else { 1.0 / (e as f64).sqrt() });
    let mut out = vec![0.0; batch * l * ev];
    for b in 0..batch {
        for i in 0..l {
            let sc: Vec<(usize, f64)> = (0..s)
                .filter(|&j| !causal || j <= i)
                .filter_map(|j| {
                    let a = add(b, i, j)?;
                    let d: f64 = (0..e)
                        .map(|t| q[(b * l + i) * e + t] * k[(b * s + j) * e + t])
                        .sum();
                    Some((j, d * scale + a)).filter(|x| x.1 != f64::NEG_INFINITY)
                })
                .collect();
            if sc.is_empty() {
                continue;
            }
            let m = sc.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = sc.iter().map(|x| (x.1 - m).exp()).sum();
            for c in 0..ev {
                let o: f64 = sc
                    .iter()
                    .map(|&(j, x)| (x - m).exp() * v[(b * s + j) * ev + c])
                    .sum();
                out[(b * l + i) * ev + c] = o / z;
            }
        }
    }
    let mut dims = qd[..r - 1].to_vec();
    dims.push(ev);
    let tol = out.iter().map(|w| 1e-9 * (1.0 + w.abs())).collect();
    Want {
        dims,
        vals: out,
        tol,
    }
}

#[test]
fn attention_at_each_rank() {
    let mut rng = Rng::new(907);
    // Special values in round 0, empty dims in rounds 1 and 2.
    for round in 0..6 {
        let special: &[f64] = if round == 0 { SPECIAL } else { &[] };
        let [b, h, l, s, e, ev] = match round {
            1 => [2, 2, 0, 3, 4, 2],
            2 => [1, 2, 3, 0, 2, 2],
            _ => {
                let d = rng.dims(6, 1, 5);
                [d[0], d[1], d[2], d[3], d[4], d[5]]
            }
        };
        let none = |_: usize, _: usize, _: usize| Some(0.0);
        for (rank, batch) in [(2, vec![]), (3, vec![b]), (4, vec![b, h])] {
            let with = |x: usize, y: usize| batch.iter().copied().chain([x, y]).collect::<Vec<_>>();
            let (qd, kd, vd) = (with(l, e), with(s, e), with(s, ev));
            let (qv, kv, vv) = (
                rng.values(numel(&qd), special),
                rng.values(numel(&kd), special),
                rng.values(numel(&vd), special),
            );
            let ops = (&qv[..], &kv[..], &vv[..]);
            let dims = (&qd[..], &kd[..], &vd[..]);
            let what = format!("scaled_dot_product_attention of {qd:?}, {kd:?}, {vd:?}");
            match rank {
                2 => {
                    let (q, k, v) = (
                        tensor::<f64, S2>(&qv, &qd),
                        tensor::<f64, S2>(&kv, &kd),
                        tensor::<f64, S2>(&vv, &vd),
                    );
                    let want = sdpa_ref(ops, dims, false, None, &none);
                    check(&what, &one(&sdpa2(&q, &k, &v).unwrap()), &want);
                    let typed = q
                        .scaled_dot_product_attention(&k, &v, tensorfn::AttentionArgs::new())
                        .unwrap();
                    check(&format!("typed {what}"), &one(&typed), &want);
                }
                3 => {
                    let (q, k, v) = (
                        tensor::<f64, S3>(&qv, &qd),
                        tensor::<f64, S3>(&kv, &kd),
                        tensor::<f64, S3>(&vv, &vd),
                    );
                    let want = sdpa_ref(ops, dims, true, None, &none);
                    check(&what, &one(&sdpa3(&q, &k, &v).unwrap()), &want);
                    let typed = q
                        .scaled_dot_product_attention(
                            &k,
                            &v,
                            tensorfn::AttentionArgs::new().is_causal(true),
                        )
                        .unwrap();
                    check(&format!("typed {what}"), &one(&typed), &want);
                }
                _ => {
                    let (q, k, v) = (
                        tensor::<f64, S4>(&qv, &qd),
                        tensor::<f64, S4>(&kv, &kd),
                        tensor::<f64, S4>(&vv, &vd),
                    );
                    let keep: Vec<bool> = (0..l * s).map(|_| rng.below(3) != 0).collect();
                    let addv = rng.values(b * l * s, special);
                    let keep_t =
                        Tensor::<Cpu, bool, S2>::from_vec_dims(keep.clone(), &[l, s]).unwrap();
                    let add_t = tensor::<f64, shape![_, 1, _, _]>(&addv, &[b, 1, l, s]);
                    let bool_mask = |_: usize, i: usize, j: usize| keep[i * s + j].then_some(0.0);
                    let float_mask =
                        |bh: usize, i: usize, j: usize| Some(addv[((bh / h) * l + i) * s + j]);
                    let want = [
                        sdpa_ref(ops, dims, false, Some(0.5), &bool_mask),
                        sdpa_ref(ops, dims, false, None, &float_mask),
                    ];
                    check_all(
                        &what,
                        &sdpa4(&q, &k, &v, &keep_t, &add_t).unwrap().outs(),
                        &want,
                    );
                    let typed = q
                        .scaled_dot_product_attention(
                            &k,
                            &v,
                            tensorfn::AttentionArgs::new().attn_mask(&add_t),
                        )
                        .unwrap();
                    check(&format!("typed {what}"), &one(&typed), &want[1]);
                }
            }
        }
    }
}

#[derive(Params)]
struct Norms<D: Device, T: Float> {
    weight: Tensor<D, T, shape![8]>,
    bias: Tensor<D, T, shape![8]>,
}

tensor_fn! {
    /// A function of the op's own name: its body reaches the op through
    /// the method form (a call `layer_norm(..)` would be this function).
    fn layer_norm<D: Device, T: Float, const S: usize>(x: &Tensor<D, T, [S, 8]>, p: &Norms<D, T>) -> Tensor<D, T, [S, 8]> {
        x.layer_norm(p.weight, p.bias)
    }
    /// Generic over device and dtype, fused with elementwise work around it.
    fn pre_norm<D: Device, T: Float, const S: usize>(x: &Tensor<D, T, [S, 8]>, p: &Norms<D, T>) -> Tensor<D, T, [S, 8]> {
        x + rms_norm(layer_norm(x * 2.0, p), p.weight, eps = 1e-6) * 0.5
    }
}

#[test]
fn norms_in_generic_functions_with_parameter_structs() {
    fn run<T: Float>(rel: f64) {
        let mut rng = Rng::new(709);
        let xv = rng.values(24, &[]);
        let wv = rng.values(8, &[]);
        let bv = rng.values(8, &[]);
        let x: Tensor<Cpu, T, shape![3, 8]> = tensor(&xv, &[3, 8]);
        let p = Norms::<Cpu, T> {
            weight: tensor(&wv, &[8]),
            bias: tensor(&bv, &[8]),
        };
        let r = |v: &[f64]| -> Vec<f64> { v.iter().map(|&x| T::from_f64(x).to_f64()).collect() };
        let (xr, wr, br) = (r(&xv), r(&wv), r(&bv));
        let y = pre_norm(&x, &p).unwrap().to_vec().unwrap();
        for row in 0..3 {
            let xs = &xr[row * 8..(row + 1) * 8];
            let doubled: Vec<f64> = xs.iter().map(|v| v * 2.0).collect();
            let l = NormOp::LayerNorm.eval_f64(&doubled, &wr, &br, 1e-5);
            let n = NormOp::RmsNorm.eval_f64(&l, &wr, &[], 1e-6);
            for c in 0..8 {
                let want = xs[c] + n[c] * 0.5;
                let got = y[row * 8 + c].to_f64();
                assert!(
                    (got - want).abs() <= rel * (1.0 + want.abs() * 4.0),
                    "{got} vs {want}"
                );
            }
        }
    }
    run::<f64>(1e-12);
    run::<f32>(1e-5);
    run::<f16>(1e-2);
    run::<bf16>(6e-2);
}

// ---------------------------------------------------------------------
// rope.
// ---------------------------------------------------------------------

tensor_fn! {
    fn rope2(x: &Tensor<Cpu, f64, [T, D]>, c: &Tensor<Cpu, f64, [T, D]>, s: &Tensor<Cpu, f64, [T, D]>) -> (Tensor<Cpu, f64, [T, D]>, Tensor<Cpu, f64, [T, D]>) {
        (rope(x, c, s), rope(input = x, cos = c, sin = s))
    }
    fn rope3(x: &Tensor<Cpu, f64, [H, T, D]>, c: &Tensor<Cpu, f64, [T, D]>, s: &Tensor<Cpu, f64, [T, D]>) -> Tensor<Cpu, f64, [H, T, D]> {
        rope(x, c, s)
    }
    fn rope4(x: &Tensor<Cpu, f64, [B, H, T, D]>, c: &Tensor<Cpu, f64, [T, D]>, s: &Tensor<Cpu, f64, [T, D]>) -> Tensor<Cpu, f64, [B, H, T, D]> {
        rope(x, c, s)
    }
    /// Llama's use: queries `[B, T, H, D]` moved to `[B, H, T, D]` (a
    /// strided view), rotated, in a 16-bit dtype.
    fn rope_heads<T: Float>(q: &Tensor<Cpu, T, [B, S, H, 8]>, c: &Tensor<Cpu, T, [S, 8]>, s: &Tensor<Cpu, T, [S, 8]>) -> Tensor<Cpu, T, [B, H, S, 8]> {
        rope(q.transpose(1, 2), c, s)
    }
}

fn rope_ref(x: &[f64], d: &[usize], c: &[f64], s: &[f64], tol: f64) -> Want {
    let (t, dd) = (d[d.len() - 2], d[d.len() - 1]);
    let mut vals = Vec::with_capacity(x.len());
    if dd > 0 {
        for (r, row) in x.chunks(dd).enumerate() {
            let p = (r % t) * dd;
            vals.extend(tensorfn_core::ops::rope::rope_f64(
                row,
                &c[p..p + dd],
                &s[p..p + dd],
            ));
        }
    }
    let tol = vals.iter().map(|v: &f64| tol * (1.0 + v.abs())).collect();
    Want {
        dims: d.to_vec(),
        vals,
        tol,
    }
}

#[test]
fn rope_at_every_rank() {
    let mut rng = Rng::new(710);
    for round in 0..4 {
        let (t, half) = (1 + rng.below(5), rng.below(4) + usize::from(round != 2));
        let d = 2 * half;
        let lead = if round == 3 { 0 } else { 1 + rng.below(3) };
        let dims = [vec![t, d], vec![lead, t, d], vec![2, lead, t, d]];
        let cv = rng.values(t * d, &[]);
        let sv = rng.values(t * d, &[]);
        let (c, s): (Tensor<Cpu, f64, S2>, Tensor<Cpu, f64, S2>) =
            (tensor(&cv, &[t, d]), tensor(&sv, &[t, d]));
        let special = if round == 1 { SPECIAL } else { &[] };
        let x2v = rng.values(numel(&dims[0]), special);
        let x3v = rng.values(numel(&dims[1]), special);
        let x4v = rng.values(numel(&dims[2]), special);
        let x2: Tensor<Cpu, f64, S2> = tensor(&x2v, &dims[0]);
        let x3: Tensor<Cpu, f64, S3> = tensor(&x3v, &dims[1]);
        let x4: Tensor<Cpu, f64, S4> = tensor(&x4v, &dims[2]);
        let w2 = rope_ref(&x2v, &dims[0], &cv, &sv, 1e-15);
        check_all(
            &format!("rope of {:?}", dims[0]),
            &rope2(&x2, &c, &s).unwrap().outs(),
            &[w2.clone(), w2.clone()],
        );
        let w3 = rope_ref(&x3v, &dims[1], &cv, &sv, 1e-15);
        check(
            &format!("rope of {:?}", dims[1]),
            &one(&rope3(&x3, &c, &s).unwrap()),
            &w3,
        );
        let w4 = rope_ref(&x4v, &dims[2], &cv, &sv, 1e-15);
        check(
            &format!("rope of {:?}", dims[2]),
            &one(&rope4(&x4, &c, &s).unwrap()),
            &w4,
        );
        check(
            &format!("typed rope of {:?}", dims[0]),
            &one(&x2.rope(&c, &s).unwrap()),
            &w2,
        );
        check(
            &format!("typed rope of {:?}", dims[1]),
            &one(&x3.rope(&c, &s).unwrap()),
            &w3,
        );
        check(
            &format!("typed rope of {:?}", dims[2]),
            &one(&x4.rope(&c, &s).unwrap()),
            &w4,
        );
    }
    // An odd last dim is an `Err` at run time (a `Dyn` dim).
    let x: Tensor<Cpu, f64, S2> = tensor(&[1.0; 6], &[2, 3]);
    let e = x.rope(&x, &x).unwrap_err().to_string();
    assert!(e.contains("odd"), "{e}");
    let c: Tensor<Cpu, f64, S2> = tensor(&[1.0; 4], &[1, 4]);
    let x: Tensor<Cpu, f64, S2> = tensor(&[1.0; 8], &[2, 4]);
    let e = x.rope(&c, &c).unwrap_err().to_string();
    assert!(e.contains("`cos` must have shape [2, 4]"), "{e}");
}

#[test]
fn rope_of_strided_queries_in_16_bit_dtypes() {
    fn run<T: Float>(tol: f64) {
        let mut rng = Rng::new(711);
        let (b, s, h) = (2, 3, 4);
        let qv = rng.values(b * s * h * 8, &[]);
        let cv = rng.values(s * 8, &[]);
        let sv = rng.values(s * 8, &[]);
        let q: Tensor<Cpu, T, shape![_, _, _, 8]> = tensor(&qv, &[b, s, h, 8]);
        let c: Tensor<Cpu, T, shape![_, 8]> = tensor(&cv, &[s, 8]);
        let sn: Tensor<Cpu, T, shape![_, 8]> = tensor(&sv, &[s, 8]);
        let r = |v: &[f64]| -> Vec<f64> { v.iter().map(|&x| T::from_f64(x).to_f64()).collect() };
        let (qr, cr, sr) = (r(&qv), r(&cv), r(&sv));
        // q.transpose(1, 2), row-major.
        let mut moved = Vec::with_capacity(qr.len());
        for bi in 0..b {
            for hi in 0..h {
                for si in 0..s {
                    let at = ((bi * s + si) * h + hi) * 8;
                    moved.extend_from_slice(&qr[at..at + 8]);
                }
            }
        }
        let want = rope_ref(&moved, &[b, h, s, 8], &cr, &sr, tol);
        check(
            &format!("rope of strided queries in {}", std::any::type_name::<T>()),
            &one(&rope_heads(&q, &c, &sn).unwrap()),
            &want,
        );
    }
    run::<f64>(1e-15);
    run::<f32>(1e-6);
    run::<f16>(1e-3);
    run::<bf16>(8e-3);
}

// ---------------------------------------------------------------------
// cross_entropy.
// ---------------------------------------------------------------------

tensor_fn! {
    fn xent_reduced(x: &Tensor<Cpu, f64, [N, C]>, y: &Tensor<Cpu, i64, [N]>) -> (
        Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>, Tensor<Cpu, f64, []>,
    ) {
        (
            cross_entropy(x, y),
            cross_entropy(x, y, reduction = "sum"),
            cross_entropy(x, y, ignore_index = 1, label_smoothing = 0.25),
            cross_entropy(input = x, target = y, reduction = "mean", label_smoothing = 1),
        )
    }
    fn xent_rows(x: &Tensor<Cpu, f64, [N, C]>, y: &Tensor<Cpu, i32, [N]>) -> Tensor<Cpu, f64, [N]> {
        cross_entropy(x, y, -100, "none", 0.1)
    }
    fn xent_fused(x: &Tensor<Cpu, f32, [N, C]>, y: &Tensor<Cpu, i64, [N]>) -> Tensor<Cpu, f32, []> {
        cross_entropy(x * 2.0 + 1.0, y, ignore_index = 0) * 0.5
    }
}

/// `cross_entropy` of `x` (`[n, c]`) against `t` by the catalogue's f64
/// reference, as a `Want` (`None`: a bad target, an `Err`).
fn xent_ref(
    x: &[f64],
    c: usize,
    t: &[i64],
    reduction: &str,
    ignore: i64,
    s: f64,
    tol: f64,
) -> Option<Want> {
    use tensorfn_core::ops::xent::{cross_entropy_f64, Reduction};
    let r = Reduction::from_name(reduction).unwrap();
    let v = cross_entropy_f64(x, c, t, r, ignore, s).ok()?;
    let dims = if r == Reduction::None {
        vec![t.len()]
    } else {
        vec![]
    };
    let tol = v.iter().map(|w| tol * w.abs().max(1.0)).collect();
    Some(Want { dims, vals: v, tol })
}

#[test]
fn cross_entropy_in_every_form() {
    use tensorfn::{CrossEntropyArgs, Reduction};
    let mut rng = Rng::new(4242);
    for (round, &(n, c)) in [(5, 7), (1, 1), (0, 4), (9, 30), (3, 2), (6, 5)]
        .iter()
        .enumerate()
    {
        // Special values in the fourth round; a target past the classes
        // in the last.
        let special: &[f64] = if round == 3 { SPECIAL } else { &[] };
        let xv = rng.values(n * c, special);
        let mut t: Vec<i64> = (0..n).map(|_| rng.below(c) as i64).collect();
        if round == 5 {
            t[2] = c as i64;
        }
        let x: Tensor<Cpu, f64, S2> = tensor(&xv, &[n, c]);
        let y: Tensor<Cpu, i64, S1> =
            tensor(&t.iter().map(|&k| k as f64).collect::<Vec<_>>(), &[n]);
        let y32: Tensor<Cpu, i32, S1> = y.cast().unwrap();
        let what = format!("cross_entropy [{n}, {c}] round {round}");
        let tol = 1e-13;
        let refs = [
            xent_ref(&xv, c, &t, "mean", -100, 0.0, tol),
            xent_ref(&xv, c, &t, "sum", -100, 0.0, tol),
            xent_ref(&xv, c, &t, "mean", 1, 0.25, tol),
            xent_ref(&xv, c, &t, "mean", -100, 1.0, tol),
        ];
        check_or_err(&what, xent_reduced(&x, &y), &refs);
        let rows = xent_ref(&xv, c, &t, "none", -100, 0.1, tol);
        check_or_err(
            &format!("{what}, none"),
            xent_rows(&x, &y32),
            std::slice::from_ref(&rows),
        );
        // The typed API.
        let args = CrossEntropyArgs {
            reduction: Reduction::None,
            label_smoothing: 0.1,
            ..Default::default()
        };
        check_or_err(
            &format!("typed {what}"),
            x.cross_entropy::<S1, _>(&y32, args),
            &[rows],
        );
        // Fused with its neighbours, in f32.
        let x2: Vec<f64> = round32(&xv)
            .iter()
            .map(|&v| (v as f32 * 2.0 + 1.0) as f64)
            .collect();
        let fused =
            xent_ref(&x2, c, &t, "mean", 0, 0.0, 4.0 * EPS32 * c.max(1) as f64).map(|mut w| {
                w.vals = w.vals.iter().map(|v| (*v as f32 * 0.5) as f64).collect();
                w
            });
        let x32: Tensor<Cpu, f32, S2> = tensor(&xv, &[n, c]);
        check_or_err(&format!("fused {what}"), xent_fused(&x32, &y), &[fused]);
    }
}

// ---------------------------------------------------------------------
// cumsum.
// ---------------------------------------------------------------------

tensor_fn! {
    fn cumsum1(x: &Tensor<Cpu, f64, [A]>) -> (Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>) {
        (cumsum(x, 0), x.cumsum(-1))
    }
    fn cumsum2(x: &Tensor<Cpu, f64, [A, B]>) -> (Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>) {
        (cumsum(x, 0), x.cumsum(-1), cumsum(input = x, dim = 1) * 1.0)
    }
    fn cumsum3(x: &Tensor<Cpu, i32, [A, B, C]>) -> (Tensor<Cpu, i64, [A, B, C]>, Tensor<Cpu, i64, [A, B, C]>, Tensor<Cpu, i64, [A, B, C]>) {
        (x.cumsum(0), x.cumsum(1), cumsum(x, 2))
    }
}

/// `cumsum` along `dim` by plain loops.
fn cumsum_ref(x: &[f64], d: &[usize], dim: usize) -> Want {
    let mut out = x.to_vec();
    let stride: usize = d[dim + 1..].iter().product();
    for i in 0..out.len() {
        if (i / stride) % d[dim] > 0 {
            out[i] = out[i - stride] + x[i];
        }
    }
    Want::exact(d.to_vec(), out)
}

#[test]
fn cumsum_along_each_dim() {
    let mut rng = Rng::new(5150);
    for round in 0..4 {
        let d = if round == 3 {
            empty_dims(&mut rng)
        } else {
            random_dims(&mut rng, 1, 5)
        };
        // Small integers, so sums are exact in f64 and i32.
        let ints = |rng: &mut Rng, n: usize| -> Vec<f64> {
            (0..n).map(|_| rng.below(9) as f64 - 4.0).collect()
        };
        let x1 = ints(&mut rng, numel(&d[1]));
        let x2 = ints(&mut rng, numel(&d[2]));
        let x3 = ints(&mut rng, numel(&d[3]));
        let t1: Tensor<Cpu, f64, S1> = tensor(&x1, &d[1]);
        let t2: Tensor<Cpu, f64, S2> = tensor(&x2, &d[2]);
        let t3: Tensor<Cpu, i32, S3> = tensor(&x3, &d[3]);
        let what = |r: usize| format!("cumsum at rank {r}, dims {:?}", d[r]);
        let w1 = cumsum_ref(&x1, &d[1], 0);
        check_or_err(&what(1), cumsum1(&t1), &[Some(w1.clone()), Some(w1)]);
        let (a, b) = (cumsum_ref(&x2, &d[2], 0), cumsum_ref(&x2, &d[2], 1));
        check_or_err(
            &what(2),
            cumsum2(&t2),
            &[Some(a.clone()), Some(b.clone()), Some(b)],
        );
        let w3: Vec<Option<Want>> = (0..3).map(|k| Some(cumsum_ref(&x3, &d[3], k))).collect();
        check_or_err(&what(3), cumsum3(&t3), &w3);
        // The typed API.
        check_or_err(&format!("typed {}", what(2)), t2.cumsum::<0>(), &[Some(a)]);
        check_or_err(
            &format!("typed {}", what(3)),
            t3.cumsum::<1>(),
            &[w3[1].clone()],
        );
    }
}

// ---------------------------------------------------------------------
// batch_norm.
// ---------------------------------------------------------------------

tensor_fn! {
    fn bn2(x: &Tensor<Cpu, f64, [N, C]>, m: &Tensor<Cpu, f64, [C]>, v: &Tensor<Cpu, f64, [C]>, w: &Tensor<Cpu, f64, [C]>, b: &Tensor<Cpu, f64, [C]>) -> (Tensor<Cpu, f64, [N, C]>, Tensor<Cpu, f64, [N, C]>, Tensor<Cpu, f64, [N, C]>) {
        (
            batch_norm(x, m, v, w, b),
            batch_norm(x, m, v, w, b, training = true),
            batch_norm(x, m, v, None, None, true, 0.1, 1e-3),
        )
    }
    fn bn3(x: &Tensor<Cpu, f64, [N, C, L]>, m: &Tensor<Cpu, f64, [C]>, v: &Tensor<Cpu, f64, [C]>, w: &Tensor<Cpu, f64, [C]>, b: &Tensor<Cpu, f64, [C]>) -> (Tensor<Cpu, f64, [N, C, L]>, Tensor<Cpu, f64, [N, C, L]>, Tensor<Cpu, f64, [N, C, L]>) {
        (
            batch_norm(x, m, v, bias = b),
            batch_norm(input = x, running_mean = m, running_var = v, weight = w, bias = b, training = true, momentum = 0.1, eps = 1e-3),
            batch_norm(x, m, v, w, training = false, eps = 1e-3),
        )
    }
    /// Fused with its neighbours: a ReLU after, a scale before.
    fn bn4(x: &Tensor<Cpu, f64, [N, C, H, W]>, m: &Tensor<Cpu, f64, [C]>, v: &Tensor<Cpu, f64, [C]>, w: &Tensor<Cpu, f64, [C]>, b: &Tensor<Cpu, f64, [C]>) -> (Tensor<Cpu, f64, [N, C, H, W]>, Tensor<Cpu, f64, [N, C, H, W]>, Tensor<Cpu, f64, [N, C, H, W]>) {
        (
            batch_norm(x, m, v, w, b),
            batch_norm(x, m, v, w, b, true),
            relu(batch_norm(x * 2.0, m, v, w, b, true)),
        )
    }
    fn bn_f32(x: &Tensor<Cpu, f32, [N, C, H, W]>, m: &Tensor<Cpu, f32, [C]>, v: &Tensor<Cpu, f32, [C]>, w: &Tensor<Cpu, f32, [C]>, b: &Tensor<Cpu, f32, [C]>) -> (Tensor<Cpu, f32, [N, C, H, W]>, Tensor<Cpu, f32, [N, C, H, W]>) {
        (batch_norm(x, m, v, w, b), batch_norm(x, m, v, w, b, training = true))
    }
}

/// `F.batch_norm` in f64: per channel (dim 1) the running statistics, or
/// with `training` the batch's mean and biased variance; then
/// `relu` if asked.
#[allow(clippy::too_many_arguments)]
fn batch_norm_ref(
    x: &[f64],
    d: &[usize],
    stats: (&[f64], &[f64]),
    w: Option<&[f64]>,
    b: Option<&[f64]>,
    training: bool,
    eps: f64,
    tol: f64,
) -> Want {
    let c = d[1];
    let inner: usize = d[2..].iter().product();
    let mut vals = vec![0.0; x.len()];
    for ch in 0..c {
        let idx: Vec<usize> = (0..d[0])
            .flat_map(|n| (0..inner).map(move |i| (n * c + ch) * inner + i))
            .collect();
        let (mean, var) = if training {
            let k = idx.len() as f64;
            let mean = idx.iter().map(|&i| x[i]).sum::<f64>() / k;
            let var = idx.iter().map(|&i| (x[i] - mean).powi(2)).sum::<f64>() / k;
            (mean, var)
        } else {
            (stats.0[ch], stats.1[ch])
        };
        for &i in &idx {
            let y = (x[i] - mean) / (var + eps).sqrt();
            vals[i] = y * w.map_or(1.0, |w| w[ch]) + b.map_or(0.0, |b| b[ch]);
        }
    }
    let tol = vals.iter().map(|v| tol * (1.0 + v.abs())).collect();
    Want {
        dims: d.to_vec(),
        vals,
        tol,
    }
}

// ---------------------------------------------------------------------
// max_pool2d, avg_pool2d, adaptive_avg_pool2d.
// ---------------------------------------------------------------------

tensor_fn! {
    fn pools4(x: &Tensor<Cpu, f64, [N, C, 7, 6]>) -> (
        Tensor<Cpu, f64, [N, C, 3, 3]>,
        Tensor<Cpu, f64, [N, C, 4, 4]>,
        Tensor<Cpu, f64, [N, C, 5, 4]>,
        Tensor<Cpu, f64, [N, C, 4, 3]>,
        Tensor<Cpu, f64, [N, C, 4, 4]>,
        Tensor<Cpu, f64, [N, C, 3, 3]>,
        Tensor<Cpu, f64, [N, C, 3, 4]>,
        Tensor<Cpu, f64, [N, C, 1, 1]>,
    ) {
        (
            max_pool2d(x, 2),
            max_pool2d(x, kernel_size = 3, stride = 2, padding = 1, ceil_mode = true),
            max_pool2d(x, [2, 3], stride = 1, dilation = (2, 1)),
            avg_pool2d(x, 3, stride = 2, padding = 1),
            avg_pool2d(input = x, kernel_size = 3, stride = 2, padding = 1, ceil_mode = true, count_include_pad = false),
            avg_pool2d(x, 2, divisor_override = 3),
            adaptive_avg_pool2d(x, [3, 4]),
            adaptive_avg_pool2d(x, output_size = 1),
        )
    }
    fn pools3(x: &Tensor<Cpu, f64, [C, 7, 6]>) -> (Tensor<Cpu, f64, [C, 3, 3]>, Tensor<Cpu, f64, [C, 5, 5]>) {
        (max_pool2d(x, 2), adaptive_avg_pool2d(x, 5))
    }
}

/// The options of `pools4`'s results, in order.
fn pools4_options() -> Vec<tensorfn::Pool2d> {
    use tensorfn::Pool2d;
    vec![
        Pool2d::max(2),
        Pool2d::max(3).stride(2).padding(1).ceil_mode(true),
        Pool2d::max([2, 3]).stride(1).dilation([2, 1]),
        Pool2d::avg(3).stride(2).padding(1),
        Pool2d::avg(3)
            .stride(2)
            .padding(1)
            .ceil_mode(true)
            .count_include_pad(false),
        Pool2d::avg(2).divisor_override(3),
        Pool2d::adaptive_avg([3, 4]),
        Pool2d::adaptive_avg(1),
    ]
}

/// A pooling of row-major `x` (leading dims, then `[H, W]`) by plain
/// loops over each window's taps, as PyTorch's CPU loops define it.
fn pool_ref(p: &tensorfn::Pool2d, x: &[f64], d: &[usize], out: [usize; 2]) -> Want {
    use tensorfn::PoolKind;
    let r = d.len();
    let (h, w) = (d[r - 2] as i64, d[r - 1] as i64);
    let planes: usize = d[..r - 2].iter().product();
    let mut vals = Vec::new();
    let mut tol = Vec::new();
    for pl in 0..planes {
        let at = |i: i64, j: i64| x[pl * (h * w) as usize + (i * w + j) as usize];
        for oh in 0..out[0] as i64 {
            for ow in 0..out[1] as i64 {
                let (v, n) = match p.kind {
                    PoolKind::Max => {
                        let mut best = f64::NEG_INFINITY;
                        for a in 0..p.kernel_size[0] as i64 {
                            for b in 0..p.kernel_size[1] as i64 {
                                let i = oh * p.stride[0] as i64 - p.padding[0] as i64
                                    + a * p.dilation[0] as i64;
                                let j = ow * p.stride[1] as i64 - p.padding[1] as i64
                                    + b * p.dilation[1] as i64;
                                if (0..h).contains(&i) && (0..w).contains(&j) {
                                    let v = at(i, j);
                                    if v > best || v.is_nan() {
                                        best = v;
                                    }
                                }
                            }
                        }
                        (best, 0)
                    }
                    PoolKind::Avg => {
                        let (s, pd, k) = (p.stride, p.padding, p.kernel_size);
                        let i0 = oh * s[0] as i64 - pd[0] as i64;
                        let j0 = ow * s[1] as i64 - pd[1] as i64;
                        let i1 = (i0 + k[0] as i64).min(h + pd[0] as i64);
                        let j1 = (j0 + k[1] as i64).min(w + pd[1] as i64);
                        let full = (i1 - i0) * (j1 - j0);
                        let (i0, j0, i1, j1) = (i0.max(0), j0.max(0), i1.min(h), j1.min(w));
                        let mut sum = 0.0;
                        for i in i0..i1 {
                            for j in j0..j1 {
                                sum += at(i, j);
                            }
                        }
                        let div = match p.divisor_override {
                            Some(dv) => dv as i64,
                            None if p.count_include_pad => full,
                            None => (i1 - i0) * (j1 - j0),
                        };
                        (sum / div as f64, ((i1 - i0) * (j1 - j0)) as usize)
                    }
                    PoolKind::AdaptiveAvg => {
                        let (i0, i1) = (
                            oh * h / out[0] as i64,
                            ((oh + 1) * h + out[0] as i64 - 1) / out[0] as i64,
                        );
                        let (j0, j1) = (
                            ow * w / out[1] as i64,
                            ((ow + 1) * w + out[1] as i64 - 1) / out[1] as i64,
                        );
                        let mut sum = 0.0;
                        for i in i0..i1 {
                            for j in j0..j1 {
                                sum += at(i, j);
                            }
                        }
                        (
                            sum / ((i1 - i0) * (j1 - j0)) as f64,
                            ((i1 - i0) * (j1 - j0)) as usize,
                        )
                    }
                };
                tol.push(if n == 0 { -1.0 } else { 1e-14 * n as f64 * 4.0 });
                vals.push(v);
            }
        }
    }
    let mut dims = d[..r - 2].to_vec();
    dims.extend(out);
    Want { dims, vals, tol }
}

#[test]
fn pools_of_every_option() {
    let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0];
    let mut rng = Rng::new(2424);
    let outs4 = [
        [3, 3],
        [4, 4],
        [5, 4],
        [4, 3],
        [4, 4],
        [3, 3],
        [3, 4],
        [1, 1],
    ];
    for round in 0..5 {
        let (n, c) = if round == 4 {
            (0, 2)
        } else {
            (1 + rng.below(3), 1 + rng.below(3))
        };
        // Rounds 0 and 1 without special values (sums of finite numbers).
        let sp: &[f64] = if round < 2 { &[] } else { &special };
        let d4 = vec![n, c, 7, 6];
        let x4 = rng.values(numel(&d4), sp);
        let t4: Tensor<Cpu, f64, S4> = tensor(&x4, &d4);
        let t4s: Tensor<Cpu, f64, shape![_, _, 7, 6]> = tensor(&x4, &d4);
        let what = format!("pools of {d4:?}");
        let want: Vec<Option<Want>> = pools4_options()
            .iter()
            .zip(outs4)
            .map(|(p, o)| Some(pool_ref(p, &x4, &d4, o)))
            .collect();
        check_or_err(&what, pools4(&t4s), &want);
        // The typed API, each option set.
        for (i, (p, o)) in pools4_options().into_iter().zip(outs4).enumerate() {
            check_or_err(
                &format!("typed {what} ({i}: {p:?})"),
                t4.pool2d::<S4>(p),
                &[want[i].clone()],
            );
            let _ = o;
        }
        let d3 = vec![c, 7, 6];
        let x3 = rng.values(numel(&d3), sp);
        let t3: Tensor<Cpu, f64, shape![_, 7, 6]> = tensor(&x3, &d3);
        let w3 = [
            Some(pool_ref(&tensorfn::Pool2d::max(2), &x3, &d3, [3, 3])),
            Some(pool_ref(
                &tensorfn::Pool2d::adaptive_avg(5),
                &x3,
                &d3,
                [5, 5],
            )),
        ];
        check_or_err(&format!("pools of {d3:?}"), pools3(&t3), &w3);
        // f32 through the typed API: the f64 reference rounded once.
        let t32: Tensor<Cpu, f32, S4> = tensor(&x4, &d4);
        let p = tensorfn::Pool2d::avg(3).stride(2).padding(1);
        let x32: Vec<f64> = x4.iter().map(|&v| v as f32 as f64).collect();
        let mut w = pool_ref(&p, &x32, &d4, [4, 3]);
        w.tol = w.vals.iter().map(|v| v.abs() * 2f64.powi(-23)).collect();
        check_or_err(
            &format!("typed f32 {what}"),
            t32.pool2d::<S4>(p),
            &[Some(w)],
        );
    }
    // Options that do not fit are an `Err` in the typed API.
    let t: Tensor<Cpu, f64, S4> = tensor(&[0.0; 16], &[1, 1, 4, 4]);
    assert!(t.pool2d::<S4>(tensorfn::Pool2d::max(5)).is_err());
    assert!(t.pool2d::<S4>(tensorfn::Pool2d::max(2).padding(2)).is_err());
    assert!(t.pool2d::<S4>(tensorfn::Pool2d::avg(0)).is_err());
    assert!(t.pool2d::<S4>(tensorfn::Pool2d::adaptive_avg(0)).is_err());
}

// ---------------------------------------------------------------------
// flatten.
// ---------------------------------------------------------------------

tensor_fn! {
    fn flatten3(x: &Tensor<Cpu, f64, [A, B, C]>) -> (
        Tensor<Cpu, f64, [A * B * C]>,
        Tensor<Cpu, f64, [A, B * C]>,
        Tensor<Cpu, f64, [A * B, C]>,
        Tensor<Cpu, f64, [C, A * B]>,
        Tensor<Cpu, f64, [A, B, C]>,
    ) {
        (
            flatten(x),
            x.flatten(1),
            flatten(x, start_dim = 0, end_dim = -2),
            x.permute([2, 0, 1]).flatten(1),
            x.flatten(1, 1),
        )
    }
    fn flatten0(x: &Tensor<Cpu, f64, []>) -> Tensor<Cpu, f64, [1]> {
        x.flatten()
    }
}

// ---------------------------------------------------------------------
// conv2d and conv1d.
// ---------------------------------------------------------------------

tensor_fn! {
    fn conv_forms(
        x: &Tensor<Cpu, f64, [2, 4, 6, 5]>,
        w: &Tensor<Cpu, f64, [6, 2, 3, 2]>,
        b: &Tensor<Cpu, f64, [6]>,
    ) -> (Tensor<Cpu, f64, [2, 6, 3, 7]>, Tensor<Cpu, f64, [2, 6, 4, 4]>) {
        (
            conv2d(x, w, b, stride = (2, 1), padding = (1, 2), dilation = (1, 2), groups = 2),
            conv2d(input = x, weight = w, groups = 2, padding = "valid"),
        )
    }
    fn conv1d_forms(
        x: &Tensor<Cpu, f64, [3, 2, 9]>,
        w: &Tensor<Cpu, f64, [4, 2, 3]>,
        b: &Tensor<Cpu, f64, [4]>,
    ) -> (Tensor<Cpu, f64, [3, 4, 4]>, Tensor<Cpu, f64, [3, 4, 9]>) {
        (
            conv1d(x, w, stride = 2, padding = 1, dilation = 2),
            conv1d(x, w, b, padding = "same") * 1.0,
        )
    }
    fn conv_channels_last(
        x: &Tensor<Cpu, f32, [2, 5, 5, 3]>,
        w: &Tensor<Cpu, f32, [4, 3, 3, 3]>,
    ) -> Tensor<Cpu, f32, [2, 4, 3, 3]> {
        conv2d(x.permute([0, 3, 1, 2]), w, stride = 2, padding = 1)
    }
}

/// `conv2d` by the catalogue's f64 direct convolution, with a tolerance
/// per element of `eps` times the sum of the magnitudes of its terms.
fn conv_ref(
    x: &[f64],
    xd: &[usize],
    w: &[f64],
    wd: &[usize],
    b: Option<&[f64]>,
    a: &tensorfn::ConvArgs,
    eps: f64,
) -> Want {
    use tensorfn_core::ops::conv::conv2d_f64;
    let d4 = |d: &[usize]| -> [usize; 4] {
        if d.len() == 3 {
            [d[0], d[1], 1, d[2]]
        } else {
            [d[0], d[1], d[2], d[3]]
        }
    };
    let (y, yd) = conv2d_f64(x, d4(xd), w, d4(wd), b, a);
    let abs = |v: &[f64]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
    let bm = b.map(abs);
    let (mag, _) = conv2d_f64(&abs(x), d4(xd), &abs(w), d4(wd), bm.as_deref(), a);
    let dims = if xd.len() == 3 {
        vec![yd[0], yd[1], yd[3]]
    } else {
        yd.to_vec()
    };
    Want {
        dims,
        vals: y,
        tol: mag.iter().map(|m| eps * m).collect(),
    }
}

// ---------------------------------------------------------------------
// index_add, scatter_add.
// ---------------------------------------------------------------------

/// `index_add` by plain loops (in `source`'s row-major order, as the CPU
/// adds): `None` when an index is outside `0..d[dim]`.
fn index_add_ref(
    x: &[f64],
    d: &[usize],
    dim: usize,
    idx: &[i64],
    s: &[f64],
    alpha: f64,
) -> Option<Want> {
    if idx.iter().any(|&k| k < 0 || k as usize >= d[dim]) {
        return None;
    }
    let mut sd = d.to_vec();
    sd[dim] = idx.len();
    let mut out = x.to_vec();
    for (i, &v) in s.iter().enumerate() {
        let mut ix = unravel(i, &sd);
        ix[dim] = idx[ix[dim]] as usize;
        out[ravel(&ix, d)] += alpha * v;
    }
    Some(Want::bits(d.to_vec(), out))
}

/// `scatter_add` by plain loops over `index` (`id`) reading `src` (`sd`).
fn scatter_add_ref(
    x: &[f64],
    d: &[usize],
    dim: usize,
    idx: &[i64],
    id: &[usize],
    s: &[f64],
    sd: &[usize],
) -> Option<Want> {
    if idx.iter().any(|&k| k < 0 || k as usize >= d[dim]) {
        return None;
    }
    let mut out = x.to_vec();
    for (i, &k) in idx.iter().enumerate() {
        let mut ix = unravel(i, id);
        let v = s[ravel(&ix, sd)];
        ix[dim] = k as usize;
        out[ravel(&ix, d)] += v;
    }
    Some(Want::bits(d.to_vec(), out))
}

tensor_fn! {
    fn iadd1(x: &Tensor<Cpu, f64, [A]>, i: &Tensor<Cpu, i64, [K]>, s: &Tensor<Cpu, f64, [K]>) -> (Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>) {
        (index_add(x, 0, i, s), x.index_add(-1, i, s, alpha = -2.0))
    }
    fn iadd2(x: &Tensor<Cpu, f64, [A, B]>, i: &Tensor<Cpu, i32, [K]>, s0: &Tensor<Cpu, f64, [K, B]>, s1: &Tensor<Cpu, f64, [A, K]>) -> (Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>) {
        (x.index_add(0, i, s0), index_add(x, 1, i, s1, alpha = 0.5), x.index_add(dim = -1, index = i, source = s1, alpha = 3))
    }
    fn iadd3(x: &Tensor<Cpu, f64, [A, B, C]>, i: &Tensor<Cpu, i64, [K]>, s: &Tensor<Cpu, f64, [A, K, C]>) -> Tensor<Cpu, f64, [A, B, C]> {
        x.index_add(1, i, s, alpha = 0.25)
    }
    fn sadd1(x: &Tensor<Cpu, f64, [A]>, i: &Tensor<Cpu, i64, [K]>, s: &Tensor<Cpu, f64, [M]>) -> (Tensor<Cpu, f64, [A]>, Tensor<Cpu, f64, [A]>) {
        (scatter_add(x, 0, i, s), x.scatter_add(-1, i, s))
    }
    fn sadd2(x: &Tensor<Cpu, f64, [A, B]>, i: &Tensor<Cpu, i32, [P, Q]>, s: &Tensor<Cpu, f64, [M, N]>) -> (Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>, Tensor<Cpu, f64, [A, B]>) {
        (x.scatter_add(0, i, s), scatter_add(x, 1, i, s), x.scatter_add(dim = -1, index = i, src = s))
    }
    fn sadd3(x: &Tensor<Cpu, f64, [A, B, C]>, i: &Tensor<Cpu, i64, [P, Q, R]>, s: &Tensor<Cpu, f64, [P, Q, R]>) -> (Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>, Tensor<Cpu, f64, [A, B, C]>) {
        (x.scatter_add(0, i, s), x.scatter_add(1, i, s), scatter_add(x, 2, i, s))
    }
}

#[test]
fn batch_norm_at_every_rank() {
    let mut rng = Rng::new(720);
    for round in 0..4 {
        let c = 1 + rng.below(4);
        // N = 1 with several elements per channel in one round.
        let n = if round == 1 { 1 } else { 2 + rng.below(3) };
        let mv = rng.values(c, &[]);
        let vv: Vec<f64> = rng.values(c, &[]).iter().map(|v| v.abs() + 0.5).collect();
        let wv = rng.values(c, &[]);
        let bv = rng.values(c, &[]);
        let st = (&mv[..], &vv[..]);
        let col = |v: &[f64]| tensor::<f64, S1>(v, &[c]);
        let (m, v, w, b) = (col(&mv), col(&vv), col(&wv), col(&bv));
        let (w_, b_) = (Some(&wv[..]), Some(&bv[..]));
        let tol = 1e-12;

        let d2 = [n + usize::from(round == 1), c];
        let (x2v, x2) = input::<S2>(&mut rng, &d2, &[]);
        check_all(
            &format!("batch_norm of {d2:?}"),
            &bn2(&x2, &m, &v, &w, &b).unwrap().outs(),
            &[
                batch_norm_ref(&x2v, &d2, st, w_, b_, false, 1e-5, tol),
                batch_norm_ref(&x2v, &d2, st, w_, b_, true, 1e-5, tol),
                batch_norm_ref(&x2v, &d2, st, None, None, true, 1e-3, tol),
            ],
        );

        let d3 = [n, c, 1 + rng.below(4)];
        let (x3v, x3) = input::<S3>(&mut rng, &d3, &[]);
        check_all(
            &format!("batch_norm of {d3:?}"),
            &bn3(&x3, &m, &v, &w, &b).unwrap().outs(),
            &[
                batch_norm_ref(&x3v, &d3, st, None, b_, false, 1e-5, tol),
                batch_norm_ref(&x3v, &d3, st, w_, b_, true, 1e-3, tol),
                batch_norm_ref(&x3v, &d3, st, w_, None, false, 1e-3, tol),
            ],
        );

        let d4 = [n, c, 1 + rng.below(3), 1 + rng.below(3)];
        let (x4v, x4) = input::<S4>(&mut rng, &d4, &[]);
        let x4v2: Vec<f64> = x4v.iter().map(|v| v * 2.0).collect();
        let mut relu_want = batch_norm_ref(&x4v2, &d4, st, w_, b_, true, 1e-5, tol);
        relu_want.vals.iter_mut().for_each(|v| *v = v.max(0.0));
        check_all(
            &format!("batch_norm of {d4:?}"),
            &bn4(&x4, &m, &v, &w, &b).unwrap().outs(),
            &[
                batch_norm_ref(&x4v, &d4, st, w_, b_, false, 1e-5, tol),
                batch_norm_ref(&x4v, &d4, st, w_, b_, true, 1e-5, tol),
                relu_want,
            ],
        );

        // f32 against the f64 reference of the f32-rounded inputs.
        let (x4r, mr, vr, wr, br) = (
            round32(&x4v),
            round32(&mv),
            round32(&vv),
            round32(&wv),
            round32(&bv),
        );
        let f = |v: &[f64], d: &[usize]| tensor::<f32, S1>(v, d);
        let x32: Tensor<Cpu, f32, S4> = tensor(&x4r, &d4);
        check_all(
            &format!("f32 batch_norm of {d4:?}"),
            &bn_f32(
                &x32,
                &f(&mr, &[c]),
                &f(&vr, &[c]),
                &f(&wr, &[c]),
                &f(&br, &[c]),
            )
            .unwrap()
            .outs(),
            &[
                batch_norm_ref(
                    &x4r,
                    &d4,
                    (&mr, &vr),
                    Some(&wr),
                    Some(&br),
                    false,
                    1e-5,
                    1e-5,
                ),
                batch_norm_ref(
                    &x4r,
                    &d4,
                    (&mr, &vr),
                    Some(&wr),
                    Some(&br),
                    true,
                    1e-5,
                    1e-5,
                ),
            ],
        );
    }
}

#[test]
fn flatten_merges_dims_in_order() {
    let mut rng = Rng::new(77);
    for round in 0..3 {
        let d = if round == 2 {
            vec![2, 0, 3]
        } else {
            rng.dims(3, 1, 4)
        };
        let x = rng.values(numel(&d), &[f64::NAN, -0.0]);
        let t: Tensor<Cpu, f64, S3> = tensor(&x, &d);
        let (a, b, c) = (d[0], d[1], d[2]);
        let mut moved = Vec::new();
        for k in 0..c {
            for i in 0..a {
                for j in 0..b {
                    moved.push(x[(i * b + j) * c + k]);
                }
            }
        }
        let want = [
            Some(Want::bits(vec![a * b * c], x.clone())),
            Some(Want::bits(vec![a, b * c], x.clone())),
            Some(Want::bits(vec![a * b, c], x.clone())),
            Some(Want::bits(vec![c, a * b], moved)),
            Some(Want::bits(d.clone(), x.clone())),
        ];
        check_or_err(&format!("flatten of {d:?}"), flatten3(&t), &want);
    }
    let s: Tensor<Cpu, f64, S0> = tensor(&[2.5], &[]);
    check_or_err(
        "flatten of a scalar",
        flatten0(&s),
        &[Some(Want::bits(vec![1], vec![2.5]))],
    );
}

// ---------------------------------------------------------------------
// dropout.
// ---------------------------------------------------------------------

tensor_fn! {
    fn dropouts(x: &Tensor<Cpu, f64, [A, B]>, seed: usize) -> (
        Tensor<Cpu, f64, [A, B]>,
        Tensor<Cpu, f64, [A, B]>,
        Tensor<Cpu, f64, [A, B]>,
        Tensor<Cpu, f64, [A, B]>,
        Tensor<Cpu, f64, [A, B]>,
    ) {
        (
            dropout(x, seed = seed),
            x.dropout(p = 0.25, seed = seed),
            dropout(x, 0.25, training = false),
            dropout(input = x, p = 1.0, training = true, seed = 7),
            x.t().dropout(0.0).t(),
        )
    }
}

/// `dropout` of row-major `x` with the catalogue's mask.
fn dropout_ref(x: &[f64], d: &[usize], p: f64, seed: u64) -> Want {
    use tensorfn_core::ops::dropout::{keep, scale};
    let vals = x
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v * if keep(seed, i as u64, p) {
                scale(p)
            } else {
                0.0
            }
        })
        .collect();
    Want::bits(d.to_vec(), vals)
}

#[test]
fn dropout_by_seed() {
    let mut rng = Rng::new(99);
    for round in 0..4 {
        let d = if round == 3 {
            vec![0, 3]
        } else {
            rng.dims(2, 1, 40)
        };
        let x = rng.values(numel(&d), &[f64::NAN, f64::INFINITY, -0.0]);
        let t: Tensor<Cpu, f64, S2> = tensor(&x, &d);
        let seed = 1000 + round;
        let want = [
            Some(dropout_ref(&x, &d, 0.5, seed as u64)),
            Some(dropout_ref(&x, &d, 0.25, seed as u64)),
            Some(Want::bits(d.clone(), x.clone())),
            Some(dropout_ref(&x, &d, 1.0, 7)),
            Some(Want::bits(d.clone(), x.clone())),
        ];
        check_or_err(&format!("dropout of {d:?}"), dropouts(&t, seed), &want);
        check_or_err(
            &format!("typed dropout of {d:?}"),
            t.dropout(0.25, true, seed),
            &[want[1].clone()],
        );
    }
    // The fraction kept, over many elements and seeds.
    let ones = Tensor::<Cpu, f32, shape![100_000]>::ones().unwrap();
    for (p, seed) in [(0.1, 1), (0.5, 2), (0.9, 3)] {
        let y = ones.dropout(p, true, seed).unwrap().to_vec().unwrap();
        let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / 1e5;
        assert!((kept - (1.0 - p)).abs() < 0.01, "p = {p}: kept {kept}");
        let s = (1.0 / (1.0 - p)) as f32;
        assert!(y.iter().all(|&v| v == 0.0 || v == s));
        // Another seed, another mask.
        let z = ones.dropout(p, true, seed + 100).unwrap().to_vec().unwrap();
        assert_ne!(y, z);
    }
}

#[test]
fn conv_in_every_form() {
    use tensorfn::{Conv1dArgs, ConvArgs};
    let mut rng = Rng::new(777);
    for round in 0..3 {
        let special: &[f64] = if round == 2 { SPECIAL } else { &[] };
        let (xv, x) = input::<shape![2, 4, 6, 5]>(&mut rng, &[2, 4, 6, 5], special);
        let (wv, w) = input::<shape![6, 2, 3, 2]>(&mut rng, &[6, 2, 3, 2], special);
        let (bv, b) = input::<shape![6]>(&mut rng, &[6], &[]);
        let a = ConvArgs {
            stride: [2, 1],
            padding: [1, 2],
            dilation: [1, 2],
            groups: 2,
        };
        let want = [
            conv_ref(&xv, &[2, 4, 6, 5], &wv, &[6, 2, 3, 2], Some(&bv), &a, 1e-14),
            conv_ref(
                &xv,
                &[2, 4, 6, 5],
                &wv,
                &[6, 2, 3, 2],
                None,
                &ConvArgs {
                    groups: 2,
                    ..Default::default()
                },
                1e-14,
            ),
        ];
        check_all(
            &format!("conv2d forms round {round}"),
            &conv_forms(&x, &w, &b).unwrap().outs(),
            &want,
        );
        let (xv, x) = input::<shape![3, 2, 9]>(&mut rng, &[3, 2, 9], special);
        let (wv, w) = input::<shape![4, 2, 3]>(&mut rng, &[4, 2, 3], special);
        let (bv, b) = input::<shape![4]>(&mut rng, &[4], &[]);
        let want = [
            conv_ref(
                &xv,
                &[3, 2, 9],
                &wv,
                &[4, 2, 3],
                None,
                &ConvArgs::conv1d(2, 1, 2, 1),
                1e-14,
            ),
            conv_ref(
                &xv,
                &[3, 2, 9],
                &wv,
                &[4, 2, 3],
                Some(&bv),
                &ConvArgs::conv1d(1, 1, 1, 1),
                1e-14,
            ),
        ];
        check_all(
            &format!("conv1d forms round {round}"),
            &conv1d_forms(&x, &w, &b).unwrap().outs(),
            &want,
        );
        let y: Tensor<Cpu, f64, S3> = x
            .conv1d(
                &w,
                Some(&b),
                Conv1dArgs {
                    padding: 1,
                    ..Default::default()
                },
            )
            .unwrap();
        check(&format!("typed conv1d round {round}"), &one(&y), &want[1]);
    }
    // A channels-last input: NHWC memory seen as NCHW.
    let xv = round32(&rng.values(2 * 5 * 5 * 3, &[]));
    let wv = round32(&rng.values(4 * 27, &[]));
    let x: Tensor<Cpu, f32, shape![2, 5, 5, 3]> = tensor(&xv, &[2, 5, 5, 3]);
    let w: Tensor<Cpu, f32, shape![4, 3, 3, 3]> = tensor(&wv, &[4, 3, 3, 3]);
    let mut nchw = vec![0.0; xv.len()];
    for (i, v) in xv.iter().enumerate() {
        let [n, h, ww, c] = [i / 75, i / 15 % 5, i / 3 % 5, i % 3];
        nchw[((n * 3 + c) * 5 + h) * 5 + ww] = *v;
    }
    let a = ConvArgs {
        stride: [2, 2],
        padding: [1, 1],
        ..Default::default()
    };
    let want = conv_ref(
        &nchw,
        &[2, 3, 5, 5],
        &wv,
        &[4, 3, 3, 3],
        None,
        &a,
        4.0 * 27.0 * EPS32,
    );
    check(
        "conv2d of a channels-last view",
        &one(&conv_channels_last(&x, &w).unwrap()),
        &want,
    );
}

/// Random shapes and options through the typed API, in every float dtype.
fn conv_random<T: tensorfn::FloatDType>(seed: u64, eps_acc: f64, eps_out: f64) {
    use tensorfn::ConvArgs;
    let mut rng = Rng::new(seed);
    for round in 0..40 {
        let g = 1 + rng.below(3);
        let (cg, og) = (1 + rng.below(3), 1 + rng.below(3));
        // Depthwise every fifth round.
        let (cg, og) = if round % 5 == 0 { (1, 1) } else { (cg, og) };
        let n = [0, 1, 2, 3][rng.below(4)];
        let k = [1 + rng.below(3), 1 + rng.below(3)];
        let stride = [1 + rng.below(3), 1 + rng.below(3)];
        let padding = [rng.below(3), rng.below(3)];
        let dilation = [1 + rng.below(2), 1 + rng.below(2)];
        // Sizes from the kernel's span minus the padding upwards (the
        // kernel as large as the padded input in some rounds).
        let hw: Vec<usize> = (0..2)
            .map(|i| {
                let span = dilation[i] * (k[i] - 1) + 1;
                (span.saturating_sub(2 * padding[i])).max(1) + rng.below(4)
            })
            .collect();
        let xd = [n, g * cg, hw[0], hw[1]];
        let wd = [g * og, cg, k[0], k[1]];
        let special: &[f64] = if round % 7 == 3 { SPECIAL } else { &[] };
        let round_t =
            |v: Vec<f64>| -> Vec<f64> { v.iter().map(|&x| T::from_f64(x).to_f64()).collect() };
        let xv = round_t(rng.values(numel(&xd), special));
        let wv = round_t(rng.values(numel(&wd), &[]));
        let bias = rng.below(2) == 0;
        let bv = round_t(rng.values(wd[0], &[]));
        let a = ConvArgs {
            stride,
            padding,
            dilation,
            groups: g,
        };
        let x: Tensor<Cpu, T, S4> = tensor(&xv, &xd);
        let w: Tensor<Cpu, T, S4> = tensor(&wv, &wd);
        let b: Tensor<Cpu, T, S1> = tensor(&bv, &[wd[0]]);
        let terms = (cg * k[0] * k[1] + 2) as f64;
        let mut want = conv_ref(
            &xv,
            &xd,
            &wv,
            &wd,
            bias.then_some(&bv[..]),
            &a,
            terms * eps_acc + 2.0 * eps_out,
        );
        let what = format!(
            "conv2d {} round {round}: x {xd:?} w {wd:?} {a:?} bias {bias}",
            T::KIND.name()
        );
        let y = x.conv2d::<S4, _, _, _, _>(&w, bias.then_some(&b), a);
        // A result past the 16-bit range is infinite, as the dtype rounds it.
        want.vals = want.vals.iter().map(|&v| T::from_f64(v).to_f64()).collect();
        check_or_err(&what, y, &[Some(want)]);
    }
}

#[test]
fn conv_random_shapes_in_every_dtype() {
    conv_random::<f64>(1, EPS, EPS);
    conv_random::<f32>(2, EPS32, EPS32);
    conv_random::<tensorfn::f16>(3, EPS32, 1.0 / 1024.0);
    conv_random::<tensorfn::bf16>(4, EPS32, 1.0 / 128.0);
}

#[test]
fn conv_shape_errors_are_errs() {
    use tensorfn::ConvArgs;
    let x = Tensor::<Cpu, f32, S4>::zeros_dims(&[1, 4, 5, 5]).unwrap();
    let w = Tensor::<Cpu, f32, S4>::zeros_dims(&[2, 3, 3, 3]).unwrap();
    let e = x
        .conv2d::<S4, _, _, _, _>(&w, None, ConvArgs::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("input channels per group"), "{e}");
    let w = Tensor::<Cpu, f32, S4>::zeros_dims(&[2, 4, 6, 3]).unwrap();
    let e = x
        .conv2d::<S4, _, _, _, _>(&w, None, ConvArgs::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("output height of `input` is (5 + 2·0 - 1·(6-1) - 1)/1 + 1 = 0"),
        "{e}"
    );
    let w = Tensor::<Cpu, f32, S4>::zeros_dims(&[2, 4, 3, 3]).unwrap();
    let e = x
        .conv2d::<S4, _, _, _, _>(
            &w,
            None,
            ConvArgs {
                stride: [0, 1],
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("`stride` must be at least 1"), "{e}");
    let b = Tensor::<Cpu, f32, S1>::zeros_dims(&[3]).unwrap();
    let e = x
        .conv2d::<S4, _, _, _, _>(&w, Some(&b), ConvArgs::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("one bias per output channel"), "{e}");
}

#[test]
fn index_add_along_each_dim() {
    let mut rng = Rng::new(853);
    for round in 0..8 {
        let d = random_dims(&mut rng, 1, 4);
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        // Round 5 has no indices, round 7 one out of range.
        let k = if round == 5 { 0 } else { 1 + rng.below(6) };
        let src = |rng: &mut Rng, dims: &[usize], dim: usize| {
            let mut sd = dims.to_vec();
            sd[dim] = k;
            let v = rng.values(numel(&sd), SPECIAL);
            (v, sd)
        };
        let idx_for = |rng: &mut Rng, n: usize| {
            let mut idx = indices(rng, k, n);
            if round == 7 {
                idx[k - 1] = if k % 2 == 0 { -1 } else { n as i64 };
            }
            idx
        };
        // Rank 1.
        let idx = idx_for(&mut rng, d[1][0]);
        let (s, sd) = src(&mut rng, &d[1], 0);
        let st: Tensor<Cpu, f64, S1> = tensor(&s, &sd);
        let refs = [
            index_add_ref(&xv.1, &d[1], 0, &idx, &s, 1.0),
            index_add_ref(&xv.1, &d[1], 0, &idx, &s, -2.0),
        ];
        let what = format!("index_add by {idx:?} at rank 1, dims {:?}", d[1]);
        check_or_err(&what, iadd1(&x.1, &ids_tensor(&idx, &[k]), &st), &refs);
        check_or_err(
            &format!("typed {what}"),
            x.1.index_add::<0>(&ids_tensor::<i32, S1>(&idx, &[k]), &st, 1.0),
            &refs[..1],
        );
        // Rank 2: dims 0 and 1 (the index valid for both).
        let idx = idx_for(&mut rng, d[2][0].min(d[2][1]));
        let (s0, sd0) = src(&mut rng, &d[2], 0);
        let (s1, sd1) = src(&mut rng, &d[2], 1);
        let (t0, t1): (Tensor<Cpu, f64, S2>, Tensor<Cpu, f64, S2>) =
            (tensor(&s0, &sd0), tensor(&s1, &sd1));
        let refs = [
            index_add_ref(&xv.2, &d[2], 0, &idx, &s0, 1.0),
            index_add_ref(&xv.2, &d[2], 1, &idx, &s1, 0.5),
            index_add_ref(&xv.2, &d[2], 1, &idx, &s1, 3.0),
        ];
        let what = format!("index_add by {idx:?} at rank 2, dims {:?}", d[2]);
        check_or_err(&what, iadd2(&x.2, &ids_tensor(&idx, &[k]), &t0, &t1), &refs);
        check_or_err(
            &format!("typed {what}"),
            x.2.index_add::<1>(&ids_tensor::<i64, S1>(&idx, &[k]), &t1, 0.5),
            &refs[1..2],
        );
        // Rank 3: dim 1, in place too.
        let idx = idx_for(&mut rng, d[3][1]);
        let (s, sd) = src(&mut rng, &d[3], 1);
        let st: Tensor<Cpu, f64, S3> = tensor(&s, &sd);
        let want = [index_add_ref(&xv.3, &d[3], 1, &idx, &s, 0.25)];
        let what = format!("index_add by {idx:?} at rank 3, dims {:?}", d[3]);
        check_or_err(&what, iadd3(&x.3, &ids_tensor(&idx, &[k]), &st), &want);
        let mut y = x.3.clone();
        let r = y.index_add_::<1>(&ids_tensor::<i64, S1>(&idx, &[k]), &st, 0.25);
        check_or_err(&format!("in place {what}"), r.map(|()| y), &want);
    }
}

#[test]
fn scatter_add_along_each_dim() {
    let mut rng = Rng::new(857);
    for round in 0..8 {
        let d = random_dims(&mut rng, 1, 4);
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        let v = [&xv.0, &xv.1, &xv.2, &xv.3, &xv.4];
        for r in 1..4 {
            // Index dims at most the input's (round 5: an empty one);
            // `src` one larger along every dim in odd rounds.
            let mut id: Vec<usize> = d[r].iter().map(|&n| 1 + rng.below(n)).collect();
            if round == 5 {
                id[0] = 0;
            }
            let sd: Vec<usize> = id.iter().map(|&n| n + round % 2).collect();
            let s = rng.values(numel(&sd), SPECIAL);
            let least = *d[r].iter().min().unwrap();
            let mut idx = indices(&mut rng, numel(&id), least);
            if round == 7 {
                let k = rng.below(idx.len());
                idx[k] = if r % 2 == 0 { -1 } else { 99 };
            }
            let refs: Vec<Option<Want>> = GATHER_DIMS[r]
                .iter()
                .map(|&dim| scatter_add_ref(v[r], &d[r], pos(dim, r), &idx, &id, &s, &sd))
                .collect();
            let what = format!("scatter_add by {id:?} into {:?} from {sd:?}", d[r]);
            match r {
                1 => {
                    let st: Tensor<Cpu, f64, S1> = tensor(&s, &sd);
                    check_or_err(&what, sadd1(&x.1, &ids_tensor(&idx, &id), &st), &refs);
                    let t = x.1.scatter_add::<0>(&ids_tensor::<i32, S1>(&idx, &id), &st);
                    check_or_err(&format!("typed {what}"), t, &refs[..1]);
                }
                2 => {
                    let st: Tensor<Cpu, f64, S2> = tensor(&s, &sd);
                    check_or_err(&what, sadd2(&x.2, &ids_tensor(&idx, &id), &st), &refs);
                    let t = x.2.scatter_add::<1>(&ids_tensor::<i64, S2>(&idx, &id), &st);
                    check_or_err(&format!("typed {what}"), t, &refs[1..2]);
                }
                _ => {
                    if round % 2 == 1 {
                        continue; // sadd3 takes `src` of the index's dims
                    }
                    let st: Tensor<Cpu, f64, S3> = tensor(&s, &sd);
                    check_or_err(&what, sadd3(&x.3, &ids_tensor(&idx, &id), &st), &refs);
                    let mut y = x.3.clone();
                    let t = y.scatter_add_::<2>(&ids_tensor::<i32, S3>(&idx, &id), &st);
                    check_or_err(&format!("in place {what}"), t.map(|()| y), &refs[2..3]);
                }
            }
        }
    }
}

/// `index_add` with many repeats (an embedding's gradient) in every float
/// dtype against an `f64` reference: f16 and bf16 accumulate in f32 and
/// round once, so they are within one rounding of the exact sum.
#[test]
fn index_add_of_every_float_dtype() {
    fn walk<T: FloatDType>(ulp: f64) {
        let mut rng = Rng::new(859);
        let (v, c, n) = (5, 3, 40);
        let xv = rng.values(v * c, &[]);
        let x: Tensor<Cpu, T, shape![5, 3]> = tensor(&xv, &[v, c]);
        let sv = rng.values(n * c, &[]);
        let s: Tensor<Cpu, T, shape![40, 3]> = tensor(&sv, &[n, c]);
        let stored = |t: Vec<T>| -> Vec<f64> { t.iter().map(|x| x.to_f64()).collect() };
        let (xs, ss) = (stored(x.to_vec().unwrap()), stored(s.to_vec().unwrap()));
        let idx = indices(&mut rng, n, v);
        let got = x
            .index_add::<0>(&ids_tensor::<i64, shape![40]>(&idx, &[n]), &s, 1.0)
            .unwrap();
        let mut want = xs.clone();
        let mut mag: Vec<f64> = xs.iter().map(|a| a.abs()).collect();
        for (j, &k) in idx.iter().enumerate() {
            for e in 0..c {
                want[k as usize * c + e] += ss[j * c + e];
                mag[k as usize * c + e] += ss[j * c + e].abs();
            }
        }
        let tol = mag.iter().map(|m| m * ulp).collect();
        check(
            &format!("index_add of {}", T::KIND.name()),
            &one(&got),
            &Want {
                dims: vec![v, c],
                vals: want,
                tol,
            },
        );
    }
    walk::<f64>(1e-15);
    walk::<f32>(4e-7 * 8.0);
    walk::<f16>(1.0 / 1024.0);
    walk::<bf16>(1.0 / 128.0);
}

// ---------------------------------------------------------------------
// topk and multinomial.
// ---------------------------------------------------------------------

tensor_fn! {
    fn topk1(x: &Tensor<Cpu, f64, [A]>, k: usize) -> (Tensor<Cpu, f64, [k]>, Tensor<Cpu, i64, [k]>) {
        topk(x, k)
    }
    fn topk2(x: &Tensor<Cpu, f64, [A, B]>, k: usize) -> (
        Tensor<Cpu, f64, [k, B]>, Tensor<Cpu, i64, [k, B]>,
        Tensor<Cpu, f64, [A, k]>, Tensor<Cpu, i64, [A, k]>,
        Tensor<Cpu, f64, [A, k]>, Tensor<Cpu, i64, [A, k]>,
    ) {
        let (v0, i0) = x.topk(k, 0);
        let (v1, i1) = topk(input = x, k = k, dim = -1, largest = true, sorted = false);
        let (v2, i2) = x.topk(k, sorted = true);
        (v0, i0, v1, i1, v2, i2)
    }
    fn topk3(x: &Tensor<Cpu, f64, [A, B, C]>, k: usize) -> (
        Tensor<Cpu, f64, [k, B, C]>, Tensor<Cpu, i64, [k, B, C]>,
        Tensor<Cpu, f64, [A, k, C]>, Tensor<Cpu, i64, [A, k, C]>,
        Tensor<Cpu, f64, [A, B, k]>, Tensor<Cpu, i64, [A, B, k]>,
    ) {
        let (v0, i0) = topk(x, k, 0);
        let (v1, i1) = x.topk(k, -2);
        let (v2, i2) = x.topk(k, dim = 2);
        (v0, i0, v1, i1, v2, i2)
    }
    /// A literal `k` in f32, between elementwise neighbours.
    fn topk_f32(x: &Tensor<Cpu, f32, [A, 6]>) -> (Tensor<Cpu, f32, [A, 2]>, Tensor<Cpu, i64, [A, 2]>) {
        let (v, i) = (x * 2.0).topk(2);
        (v + 1.0, i)
    }
    /// Integers keep their dtype; `k` equal to the dim.
    fn topk_i32(x: &Tensor<Cpu, i32, [A, 4]>) -> (Tensor<Cpu, i32, [A, 4]>, Tensor<Cpu, i64, [A, 4]>) {
        topk(x, 4)
    }
    /// The smallest, positionally and by keyword, with `sorted`.
    fn topk_small2(x: &Tensor<Cpu, f64, [A, B]>, k: usize) -> (
        Tensor<Cpu, f64, [k, B]>, Tensor<Cpu, i64, [k, B]>,
        Tensor<Cpu, f64, [A, k]>, Tensor<Cpu, i64, [A, k]>,
    ) {
        let (v0, i0) = x.topk(k, 0, false);
        let (v1, i1) = topk(input = x, k = k, largest = false, sorted = false);
        (v0, i0, v1, i1)
    }
    fn topk_small3(x: &Tensor<Cpu, f64, [A, B, C]>, k: usize) -> (
        Tensor<Cpu, f64, [k, B, C]>, Tensor<Cpu, i64, [k, B, C]>,
        Tensor<Cpu, f64, [A, k, C]>, Tensor<Cpu, i64, [A, k, C]>,
        Tensor<Cpu, f64, [A, B, k]>, Tensor<Cpu, i64, [A, B, k]>,
    ) {
        let (v0, i0) = topk(x, k, 0, largest = false);
        let (v1, i1) = x.topk(k, -2, false, true);
        let (v2, i2) = x.topk(k, largest = false, sorted = true);
        (v0, i0, v1, i1, v2, i2)
    }
    /// The smallest of integers.
    fn topk_small_i32(x: &Tensor<Cpu, i32, [A, 4]>) -> (Tensor<Cpu, i32, [A, 3]>, Tensor<Cpu, i64, [A, 3]>) {
        x.topk(3, largest = false)
    }
}

/// `topk` along `dim` by a sort of each lane's `(value, position)` pairs:
/// NaN larger than every number, the largest first (`largest`) or the
/// smallest first, equal values in order of position.
fn topk_ref(x: &[f64], d: &[usize], dim: usize, k: usize, largest: bool) -> Option<(Want, Want)> {
    if k > d[dim] {
        return None;
    }
    let mut out = d.to_vec();
    out[dim] = k;
    let (mut vals, mut idx) = (Vec::new(), Vec::new());
    for lane in lanes(x, d, dim) {
        let mut p: Vec<usize> = (0..lane.len()).collect();
        // Ascending by (is NaN, value): NaN above +inf.
        let key = |i: usize| {
            (
                lane[i].is_nan(),
                if lane[i].is_nan() { 0.0 } else { lane[i] },
            )
        };
        p.sort_by(|&a, &b| {
            let (ka, kb) = (key(a), key(b));
            let o = ka.0.cmp(&kb.0).then(ka.1.partial_cmp(&kb.1).unwrap());
            if largest { o.reverse() } else { o }.then(a.cmp(&b))
        });
        vals.push(p[..k].iter().map(|&i| lane[i]).collect::<Vec<_>>());
        idx.push(p[..k].iter().map(|&i| i as f64).collect::<Vec<_>>());
    }
    Some((
        Want::bits(out.clone(), unlanes(&vals, &out, dim)),
        Want::exact(out.clone(), unlanes(&idx, &out, dim)),
    ))
}

/// The references of `topk` along each of `dims`, flattened as the
/// functions return them (every one `None` when one is: the call errs).
fn topk_wants(
    x: &[f64],
    d: &[usize],
    dims: &[usize],
    k: usize,
    largest: bool,
) -> Vec<Option<Want>> {
    let r: Option<Vec<(Want, Want)>> = dims
        .iter()
        .map(|&m| topk_ref(x, d, m, k, largest))
        .collect();
    match r {
        Some(r) => r
            .into_iter()
            .flat_map(|(v, i)| [Some(v), Some(i)])
            .collect(),
        None => vec![None; 2 * dims.len()],
    }
}

#[test]
fn topk_along_each_dim() {
    let mut rng = Rng::new(4242);
    for round in 0..6 {
        let d = if round == 5 {
            empty_dims(&mut rng)
        } else {
            random_dims(&mut rng, 1, 6)
        };
        let (xv, x) = inputs_by_rank(&mut rng, &d, SPECIAL);
        // Every `k` from 0 to one past the largest dim.
        for k in 0..=6 {
            let what = |r: usize| format!("topk k = {k} at rank {r}, dims {:?}", d[r]);
            check_or_err(
                &what(1),
                topk1(&x.1, k),
                &topk_wants(&xv.1, &d[1], &[0], k, true),
            );
            check_or_err(
                &what(2),
                topk2(&x.2, k),
                &topk_wants(&xv.2, &d[2], &[0, 1, 1], k, true),
            );
            check_or_err(
                &what(3),
                topk3(&x.3, k),
                &topk_wants(&xv.3, &d[3], &[0, 1, 2], k, true),
            );
            check_or_err(
                &format!("smallest {}", what(2)),
                topk_small2(&x.2, k),
                &topk_wants(&xv.2, &d[2], &[0, 1], k, false),
            );
            check_or_err(
                &format!("smallest {}", what(3)),
                topk_small3(&x.3, k),
                &topk_wants(&xv.3, &d[3], &[0, 1, 2], k, false),
            );
            // The typed API, along the last dim.
            check_or_err(
                &format!("typed {}", what(3)),
                x.3.topk::<S3>(k),
                &topk_wants(&xv.3, &d[3], &[2], k, true),
            );
            check_or_err(
                &format!("typed smallest {}", what(3)),
                x.3.topk_smallest::<S3>(k),
                &topk_wants(&xv.3, &d[3], &[2], k, false),
            );
        }
    }
    // f32 between elementwise ops, and integers, on fresh values.
    for rows in [0, 1, 5] {
        // Values of f32, so doubling them is exact; the `+ 1` rounds in f32.
        let v: Vec<f64> = rng
            .values(rows * 6, SPECIAL)
            .iter()
            .map(|&a| a as f32 as f64)
            .collect();
        let t: Tensor<Cpu, f32, shape![_, 6]> = tensor(&v, &[rows, 6]);
        let doubled: Vec<f64> = v.iter().map(|&a| a * 2.0).collect();
        let (mut wv, wi) = topk_ref(&doubled, &[rows, 6], 1, 2, true).unwrap();
        wv.vals
            .iter_mut()
            .for_each(|a| *a = (*a as f32 + 1.0) as f64);
        check_or_err("topk f32", topk_f32(&t), &[Some(wv), Some(wi)]);
        let ints: Vec<f64> = (0..rows * 4).map(|_| rng.below(5) as f64 - 2.0).collect();
        let t: Tensor<Cpu, i32, shape![_, 4]> = tensor(&ints, &[rows, 4]);
        let (wv, wi) = topk_ref(&ints, &[rows, 4], 1, 4, true).unwrap();
        check_or_err("topk i32", topk_i32(&t), &[Some(wv), Some(wi)]);
        let (wv, wi) = topk_ref(&ints, &[rows, 4], 1, 3, false).unwrap();
        check_or_err("smallest i32", topk_small_i32(&t), &[Some(wv), Some(wi)]);
    }
}

tensor_fn! {
    fn draws1(p: &Tensor<Cpu, f64, [K]>, n: usize, seed: usize) -> (Tensor<Cpu, i64, [n]>, Tensor<Cpu, i64, [n]>) {
        (multinomial(p, n, true, seed), p.multinomial(n, seed = seed))
    }
    fn draws2(p: &Tensor<Cpu, f64, [A, K]>, n: usize, seed: usize) -> (Tensor<Cpu, i64, [A, n]>, Tensor<Cpu, i64, [A, n]>) {
        (
            multinomial(input = p, num_samples = n, replacement = true, seed = seed),
            p.multinomial(n, replacement = false, seed = seed),
        )
    }
    /// Sampling's pipeline: weights from logits, one draw per row.
    fn draw_softmax(logits: &Tensor<Cpu, f32, [A, 5]>, seed: usize) -> Tensor<Cpu, i64, [A, 1]> {
        multinomial(softmax(logits * 0.5, -1), 1, seed = seed)
    }
}

#[test]
fn multinomial_matches_the_typed_api_and_the_weights() {
    let mut rng = Rng::new(77);
    for round in 0..8 {
        let (a, k) = (rng.below(4) + usize::from(round > 0), rng.below(6) + 1);
        // Weights with zeros among them, at least one positive per row.
        let mut w: Vec<f64> = (0..a * k)
            .map(|_| {
                if rng.below(3) == 0 {
                    0.0
                } else {
                    rng.below(100) as f64 / 7.0
                }
            })
            .collect();
        for r in 0..a {
            w[r * k + rng.below(k)] = 1.5;
        }
        let p1: Tensor<Cpu, f64, S1> = tensor(&w[..k.min(w.len())], &[k.min(w.len())]);
        let p2: Tensor<Cpu, f64, S2> = tensor(&w, &[a, k]);
        let positive = |row: &[f64]| row.iter().filter(|&&v| v > 0.0).count();
        for n in [1, 2, k, k + 3] {
            let seed = rng.below(1000);
            let what = format!("multinomial of [{a}, {k}], {n} draws, seed {seed}");
            let with = p2
                .multinomial::<S2>(n, true, seed)
                .unwrap()
                .to_vec()
                .unwrap();
            let without = p2.multinomial::<S2>(n, false, seed);
            match draws2(&p2, n, seed) {
                Ok((x, y)) => {
                    assert_eq!(x.to_vec().unwrap(), with, "{what}");
                    assert_eq!(
                        y.to_vec().unwrap(),
                        without.unwrap().to_vec().unwrap(),
                        "{what}"
                    );
                    let y = y.to_vec().unwrap();
                    for (r, (dx, dy)) in with.chunks(n).zip(y.chunks(n)).enumerate() {
                        let row = &w[r * k..(r + 1) * k];
                        for &c in dx.iter().chain(dy) {
                            assert!(row[c as usize] > 0.0, "{what}: drew weight 0 at {c}");
                        }
                        let mut u = dy.to_vec();
                        u.sort();
                        u.dedup();
                        assert_eq!(u.len(), n, "{what}: {dy:?} repeats without replacement");
                    }
                }
                Err(e) => {
                    // Without replacement, more draws than positive weights.
                    assert!(
                        a > 0 && (0..a).any(|r| positive(&w[r * k..(r + 1) * k]) < n),
                        "{what}: {e}"
                    );
                    assert!(without.is_err(), "{what}");
                }
            }
            if a > 0 {
                let typed = p1
                    .multinomial::<S1>(n, true, seed)
                    .unwrap()
                    .to_vec()
                    .unwrap();
                match draws1(&p1, n, seed) {
                    Ok((x, y)) => {
                        assert_eq!(x.to_vec().unwrap(), typed, "{what} (rank 1)");
                        let typed = p1.multinomial::<S1>(n, false, seed).unwrap();
                        assert_eq!(
                            y.to_vec().unwrap(),
                            typed.to_vec().unwrap(),
                            "{what} (rank 1)"
                        );
                    }
                    Err(e) => assert!(n > positive(&w[..k]), "{what} (rank 1): {e}"),
                }
            }
        }
    }
    // Bad weights and counts are an `Err`, never a panic.
    let bad = |v: Vec<f64>, n: usize| {
        let t: Tensor<Cpu, f64, S2> = tensor(&v, &[2, 3]);
        draws2(&t, n, 1).is_err()
    };
    for b in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0] {
        assert!(bad(vec![1.0, 2.0, 3.0, 1.0, b, 1.0], 1), "weight {b}");
    }
    assert!(
        bad(vec![1.0, 2.0, 3.0, 0.0, 0.0, -0.0], 1),
        "a row of zeros"
    );
    assert!(bad(vec![1.0; 6], 0), "no draws");
    assert!(bad(vec![1.0; 6], 4), "4 draws of 3 without replacement");
    let t: Tensor<Cpu, f64, S2> = tensor(&[], &[2, 0]);
    assert!(draws2(&t, 1, 1).is_err(), "no categories");
}

#[test]
fn multinomial_of_softmax_follows_the_probabilities() {
    // One row of logits repeated: the draws' counts against the f64
    // softmax (chi-square at p = 0.001 with 4 degrees of freedom).
    let logits = [1.0, -0.5, 2.0, f64::NEG_INFINITY, 0.25];
    let rows = 20_000;
    let v: Vec<f64> = (0..rows).flat_map(|_| logits).collect();
    let t: Tensor<Cpu, f32, shape![_, 5]> = tensor(&v, &[rows, 5]);
    let draws = draw_softmax(&t, 12345).unwrap().to_vec().unwrap();
    let e: Vec<f64> = logits.iter().map(|&l| (0.5 * l).exp()).collect();
    let total: f64 = e.iter().sum();
    let mut counts = [0usize; 5];
    for &c in &draws {
        counts[c as usize] += 1;
    }
    assert_eq!(counts[3], 0, "a -inf logit drawn");
    let chi2: f64 = (0..5)
        .filter(|&c| e[c] > 0.0)
        .map(|c| {
            let want = e[c] / total * rows as f64;
            (counts[c] as f64 - want).powi(2) / want
        })
        .sum();
    assert!(
        chi2 < 16.27,
        "chi-square {chi2} with 3 degrees of freedom, counts {counts:?}"
    );
    assert_eq!(draw_softmax(&t, 12345).unwrap().to_vec().unwrap(), draws);
    assert_ne!(draw_softmax(&t, 12346).unwrap().to_vec().unwrap(), draws);
}

tensor_fn! {
    /// Sampling's ops on any device: `topk` along the rows and the
    /// columns, and draws with and without replacement.
    fn sampling_on<D: Device>(logits: &Tensor<D, f32, [B, V]>, p: &Tensor<D, f32, [B, V]>, k: usize, seed: usize) -> (
        Tensor<D, f32, [B, k]>, Tensor<D, i64, [B, k]>,
        Tensor<D, f32, [2, V]>, Tensor<D, i64, [2, V]>,
        Tensor<D, i64, [B, 5]>, Tensor<D, i64, [B, 3]>,
        Tensor<D, f32, [B, k]>, Tensor<D, i64, [B, k]>,
    ) {
        let (v, i) = topk(logits, k);
        let (cv, ci) = logits.topk(2, 0);
        let (sv, si) = logits.topk(k, largest = false);
        (v, i, cv, ci, multinomial(p, 5, true, seed), p.multinomial(3, seed = seed), sv, si)
    }
}

#[test]
fn sampling_on_the_gpu_matches_the_cpu() {
    let mut rng = Rng::new(31337);
    let (b, v) = (3, 1000);
    // Few distinct logits (ties), NaN and ±inf among them.
    let logits: Vec<f64> = rng
        .values(b * v, SPECIAL)
        .iter()
        .map(|&x| (x * 4.0).round())
        .collect();
    let p: Vec<f64> = (0..b * v)
        .map(|i| {
            if i % v == 7 || rng.below(4) > 0 {
                rng.below(100) as f64 / 8.0 + 0.5
            } else {
                0.0
            }
        })
        .collect();
    let lc: Tensor<Cpu, f32, S2> = tensor(&logits, &[b, v]);
    let pc: Tensor<Cpu, f32, S2> = tensor(&p, &[b, v]);
    let cpu = sampling_on(&lc, &pc, 50, 9).unwrap();
    let (vw, iw) = topk_ref(&logits, &[b, v], 1, 50, true).unwrap();
    check_all("topk on the CPU", &cpu.0.outs(), &[vw]);
    check_all("topk on the CPU", &cpu.1.outs(), &[iw]);
    let (vw, iw) = topk_ref(&logits, &[b, v], 1, 50, false).unwrap();
    check_all("smallest on the CPU", &cpu.6.outs(), &[vw]);
    check_all("smallest on the CPU", &cpu.7.outs(), &[iw]);
    let Ok(lg) = lc.to_device::<Cuda>() else {
        eprintln!("skipping the GPU part: no CUDA device");
        return;
    };
    let pg = pc.to_device::<Cuda>().unwrap();
    let gpu = sampling_on(&lg, &pg, 50, 9).unwrap();
    let bits = |x: Vec<f32>| x.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    assert_eq!(
        bits(gpu.0.to_vec().unwrap()),
        bits(cpu.0.to_vec().unwrap()),
        "topk values"
    );
    assert_eq!(
        gpu.1.to_vec().unwrap(),
        cpu.1.to_vec().unwrap(),
        "topk indices"
    );
    assert_eq!(
        bits(gpu.2.to_vec().unwrap()),
        bits(cpu.2.to_vec().unwrap()),
        "topk along dim 0"
    );
    assert_eq!(
        gpu.3.to_vec().unwrap(),
        cpu.3.to_vec().unwrap(),
        "topk along dim 0"
    );
    assert_eq!(
        gpu.4.to_vec().unwrap(),
        cpu.4.to_vec().unwrap(),
        "draws with replacement"
    );
    assert_eq!(
        gpu.5.to_vec().unwrap(),
        cpu.5.to_vec().unwrap(),
        "draws without"
    );
    assert_eq!(
        bits(gpu.6.to_vec().unwrap()),
        bits(cpu.6.to_vec().unwrap()),
        "smallest values"
    );
    assert_eq!(
        gpu.7.to_vec().unwrap(),
        cpu.7.to_vec().unwrap(),
        "smallest indices"
    );
    // A `k` past the dim is the same `Err` on both devices.
    let e = sampling_on(&lg, &pg, v + 1, 9).unwrap_err().to_string();
    assert_eq!(e, sampling_on(&lc, &pc, v + 1, 9).unwrap_err().to_string());
}
