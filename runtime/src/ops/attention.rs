//! `scaled_dot_product_attention`, PyTorch's
//! `torch.nn.functional.scaled_dot_product_attention`: the shapes pair up
//! in the types ([`AttentionShape`]), the optional arguments are an
//! [`AttentionArgs`] (`attn_mask`, `is_causal`, `scale`, `enable_gqa` for
//! keys and values of fewer heads than the query), and both
//! backends run it blocked with an online softmax, never holding the
//! `L x S` scores.
//!
//! Rows whose every key is masked out give 0, as PyTorch 2.5 and later
//! give on its math path (`_safe_softmax`; earlier versions gave NaN
//! there) and with its memory-efficient CUDA kernel (PyTorch 2.11 on an
//! H100, f32; the same version's bf16 CUDA path with a `bool` mask gives
//! an average of the values instead, which is not followed). A key whose
//! score is `-inf` (masked by `attn_mask`, by `is_causal`, or `-inf` in a
//! float mask) takes no part in its row, whatever its value holds; on the
//! GPU's tensor-core path (f16 and bf16, head dims 64 and 128, no mask,
//! sm_80 and newer) a NaN in the value of a causally masked key within
//! the diagonal's block of 64 keys reaches the row, as in PyTorch's fused
//! kernels. NaN in a score makes its row NaN.
//!
//! On the GPU, f16 and bf16 attention without a mask, with a head dim of
//! 64 or 128, runs on tensor cores on sm_80 and newer; everything else
//! (sm_75, masks, other head dims up to 256) runs the f32-accumulating
//! kernel, and head dims above 256 go through the host.

use super::dispatch::dispatch;
use super::matmul::{batch_strides, merged_stride};
use super::output::output_in;
use crate::backend::AttnMask;
use crate::device::Device;
use crate::dtype::{DType, DTypeKind, FloatDType};
use crate::error::{Error, Result};
use crate::layout::contiguous_strides;
use crate::layout::Layout;
use crate::shape::{Dim, Shape};
use crate::storage::Storage;
use crate::tensor::Tensor;
use std::any::Any;
use std::marker::PhantomData;
use tensorfn_core::rules;
use tensorfn_kernels::ReduceOp;

const OP: &str = "scaled_dot_product_attention";

/// Shapes that `scaled_dot_product_attention` pairs: a query `(..B, L,
/// E)`, a key `(..B, S, E)` and a value `(..B, S, Ev)` give `(..B, L,
/// Ev)`, with zero to four batch dims `..B`, the same on all three. The
/// shared `E`, `S` and batch dims are one type parameter each, so a
/// mismatch between `Const` dims does not compile. Batch dims that
/// broadcast (a `1` against a `B`, GQA-style shared keys) go through
/// [`scaled_dot_product_attention_dims`](crate::Tensor::scaled_dot_product_attention_dims).
///
/// ```
/// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
/// let q = Tensor::<Cpu, f32, shape![2, 4, 8, 16]>::ones().unwrap();
/// let k = Tensor::<Cpu, f32, shape![2, 4, 6, 16]>::ones().unwrap();
/// let v = Tensor::<Cpu, f32, shape![2, 4, 6, 32]>::ones().unwrap();
/// let y: Tensor<Cpu, f32, shape![2, 4, 8, 32]> =
///     q.scaled_dot_product_attention(&k, &v, AttentionArgs::new()).unwrap();
/// assert_eq!(y.to_vec().unwrap(), vec![1.0; 2 * 4 * 8 * 32]);
/// ```
///
/// Head dims that differ do not compile:
///
/// ```compile_fail,E0277
/// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
/// let q = Tensor::<Cpu, f32, shape![8, 16]>::ones().unwrap();
/// let k = Tensor::<Cpu, f32, shape![6, 32]>::ones().unwrap();
/// let v = Tensor::<Cpu, f32, shape![6, 32]>::ones().unwrap();
/// let _ = q.scaled_dot_product_attention(&k, &v, AttentionArgs::new());
/// ```
#[diagnostic::on_unimplemented(
    message = "`scaled_dot_product_attention` cannot pair a `{Self}` query with a `{K}` key and a `{V}` value",
    label = "the head dims, key counts or batch dims do not match",
    note = "the query is (..B, L, E), the key (..B, S, E) and the value (..B, S, Ev): the query's and key's last dims are one dim E, the key's and value's second-to-last dims one dim S, and the batch dims ..B the same on all three",
    note = "a `Dyn` dim pairs only with `Dyn` (convert with `.into_shape()`); batch dims that broadcast go through `scaled_dot_product_attention_dims::<Out>`"
)]
pub trait AttentionShape<K: Shape, V: Shape>: Shape {
    /// The shape of the result.
    type Output: Shape;
    /// The shape of the rows' log-sum-exps, `(..B, L)`.
    type Lse: Shape;
}

macro_rules! attention_shapes {
    ($($b:ident),*) => {
        impl<$($b: Dim,)* L: Dim, S: Dim, E: Dim, Ev: Dim>
            AttentionShape<($($b,)* S, E), ($($b,)* S, Ev)> for ($($b,)* L, E)
        {
            type Output = ($($b,)* L, Ev);
            type Lse = ($($b,)* L,);
        }
    };
}
attention_shapes!();
attention_shapes!(B1);
attention_shapes!(B1, B2);
attention_shapes!(B1, B2, B3);
attention_shapes!(B1, B2, B3, B4);

/// The dtypes a mask of `scaled_dot_product_attention` on `T` tensors may
/// have: `bool` (true where the key takes part) or `T` itself (added to
/// the scores), as in PyTorch.
///
/// ```
/// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
/// let m = Tensor::<Cpu, bool, shape![4, 4]>::from_vec(vec![true; 16]).unwrap();
/// let args = AttentionArgs::<Cpu, f32>::new().attn_mask(&m);
/// # let _ = args;
/// ```
#[diagnostic::on_unimplemented(
    message = "a `{Self}` mask does not fit attention over `{T}` tensors",
    label = "the mask is `bool` or the tensors' own dtype",
    note = "cast it with `.cast::<bool>()` (true = takes part) or `.cast::<{T}>()` (added to the scores)"
)]
pub trait AttnMaskDType<T: FloatDType>: DType {}

impl<T: FloatDType> AttnMaskDType<T> for T {}
impl<T: FloatDType> AttnMaskDType<T> for bool {}

/// A mask as given: its storage, `bool` or the tensors' dtype, and layout.
enum MaskRef<'a, T: DType> {
    Bool(&'a Storage<bool>),
    Add(&'a Storage<T>),
}

/// The optional arguments of `scaled_dot_product_attention`, with
/// PyTorch's names and defaults: no `attn_mask`, `is_causal = false`,
/// `scale = 1 / sqrt(E)`.
///
/// ```
/// use tensorfn_runtime::{AttentionArgs, Cpu};
/// let args = AttentionArgs::<Cpu, f32>::new().is_causal(true).scale(0.125);
/// # let _ = args;
/// ```
pub struct AttentionArgs<'a, D: Device, T: FloatDType> {
    mask: Option<(MaskRef<'a, T>, &'a Layout)>,
    is_causal: bool,
    scale: Option<f64>,
    enable_gqa: bool,
    _device: PhantomData<D>,
}

impl<D: Device, T: FloatDType> Default for AttentionArgs<'_, D, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a, D: Device, T: FloatDType> AttentionArgs<'a, D, T> {
    /// PyTorch's defaults: no mask, not causal, `scale = 1 / sqrt(E)`.
    ///
    /// ```
    /// use tensorfn_runtime::{AttentionArgs, Cpu};
    /// let args: AttentionArgs<'_, Cpu, f32> = AttentionArgs::new();
    /// # let _ = args;
    /// ```
    pub fn new() -> Self {
        AttentionArgs {
            mask: None,
            is_causal: false,
            scale: None,
            enable_gqa: false,
            _device: PhantomData,
        }
    }

    /// `attn_mask`: `bool` (true where the key takes part) or of the
    /// tensors' dtype (added to the scores), broadcast to `[.., L, S]`.
    /// Not together with `is_causal(true)` (an `Err`, as in PyTorch).
    ///
    /// ```
    /// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
    /// let q = Tensor::<Cpu, f32, shape![2, 4]>::from_vec(vec![1.0; 8]).unwrap();
    /// let v = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![10.0, 20.0]).unwrap();
    /// // The second query may not see the first key.
    /// let m = Tensor::<Cpu, bool, shape![2, 2]>::from_vec(vec![true, true, false, true]).unwrap();
    /// let y = q.scaled_dot_product_attention(&q, &v, AttentionArgs::new().attn_mask(&m)).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![15.0, 20.0]);
    /// ```
    pub fn attn_mask<M: AttnMaskDType<T>, SM: Shape>(mut self, mask: &'a Tensor<D, M, SM>) -> Self {
        let s: &dyn Any = &*mask.storage;
        let m = if M::KIND == DTypeKind::Bool {
            s.downcast_ref::<Storage<bool>>().map(MaskRef::Bool)
        } else {
            s.downcast_ref::<Storage<T>>().map(MaskRef::Add)
        };
        self.mask = Some((m.expect("AttnMaskDType admits bool and T"), &mask.layout));
        self
    }

    /// `is_causal`: query `i` sees keys `0..=i` only (PyTorch's top-left
    /// aligned `ones(L, S).tril()`).
    ///
    /// ```
    /// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
    /// let q = Tensor::<Cpu, f32, shape![2, 4]>::from_vec(vec![1.0; 8]).unwrap();
    /// let v = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![10.0, 20.0]).unwrap();
    /// let y = q.scaled_dot_product_attention(&q, &v, AttentionArgs::new().is_causal(true)).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![10.0, 15.0]);
    /// ```
    pub fn is_causal(mut self, is_causal: bool) -> Self {
        self.is_causal = is_causal;
        self
    }

    /// `scale`: the factor of `query @ key^T` (default `1 / sqrt(E)`).
    ///
    /// ```
    /// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
    /// let q = Tensor::<Cpu, f32, shape![1, 1]>::from_vec(vec![1.0]).unwrap();
    /// let k = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![0.0, 1.0]).unwrap();
    /// let v = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![0.0, 1.0]).unwrap();
    /// // scale 0: every key weighs the same
    /// let y = q.scaled_dot_product_attention(&k, &v, AttentionArgs::new().scale(0.0)).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![0.5]);
    /// ```
    pub fn scale(mut self, scale: f64) -> Self {
        self.scale = Some(scale);
        self
    }

    /// `enable_gqa`: grouped-query attention, as PyTorch's
    /// `enable_gqa=True`. The key and value may hold fewer heads (dim -3,
    /// `Hkv`) than the query (`H`), `H` a multiple of `Hkv`: query head
    /// `h` reads key and value head `h / (H / Hkv)`, without copying them
    /// (`repeat_interleave(H / Hkv, dim = -3)` of the key and value gives
    /// the same result). The shapes are checked at run time: use the
    /// `_dims` forms ([`scaled_dot_product_attention_dims`](Tensor::scaled_dot_product_attention_dims)
    /// and the like), or `tensor_fn!`, which checks them when it builds.
    ///
    /// ```
    /// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
    /// // 4 query heads, 2 key and value heads: heads 0, 1 read kv head 0
    /// let q = Tensor::<Cpu, f32, shape![1, 4, 3, 8]>::randn(1).unwrap();
    /// let k = Tensor::<Cpu, f32, shape![1, 2, 5, 8]>::randn(2).unwrap();
    /// let v = Tensor::<Cpu, f32, shape![1, 2, 5, 8]>::randn(3).unwrap();
    /// let args = || AttentionArgs::new().is_causal(true).enable_gqa(true);
    /// let y = q.scaled_dot_product_attention_dims::<shape![1, 4, 3, 8]>(&k, &v, args()).unwrap();
    /// let k4 = k.repeat_interleave::<shape![1, 4, 5, 8]>(2, 1).unwrap();
    /// let v4 = v.repeat_interleave::<shape![1, 4, 5, 8]>(2, 1).unwrap();
    /// let want = q.scaled_dot_product_attention_dims::<shape![1, 4, 3, 8]>(&k4, &v4, AttentionArgs::new().is_causal(true)).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), want.to_vec().unwrap());
    /// // without it, heads that differ are an `Err` that names the key
    /// let e = q.scaled_dot_product_attention_dims::<shape![1, 4, 3, 8]>(&k, &v, AttentionArgs::new());
    /// assert!(e.unwrap_err().to_string().contains("enable_gqa"));
    /// ```
    pub fn enable_gqa(mut self, enable_gqa: bool) -> Self {
        self.enable_gqa = enable_gqa;
        self
    }
}

/// An operand as the backend takes it: a `[batch, rows, cols]` view over
/// its own buffer when one stride walks its batch dims, an `[outer, inner,
/// rows, cols]` view when the batch dims split at `split` into two that
/// each take one stride (the heads of a `[B, T, 3, H, D]` projection seen
/// as `[B, H, T, D]`), or a view over a contiguous copy of `copy` (its
/// rows not dense, or its batch dims walked by neither).
fn flat(
    l: &Layout,
    batch: &[usize],
    split: Option<usize>,
    dense_rows: bool,
) -> (Layout, Option<Layout>) {
    let r = l.rank();
    let (d, st) = (l.dims(), l.strides());
    let m = [d[r - 2], d[r - 1]];
    let mut s = [st[r - 2], st[r - 1]];
    if m[1] <= 1 {
        s[1] = 1;
    }
    let n: usize = batch.iter().product();
    let bs = batch_strides(l, batch);
    let rows_ok = s[1] == 1 || !dense_rows;
    if let (Some(b), true) = (merged_stride(batch, &bs), rows_ok) {
        return (
            Layout::new(vec![n, m[0], m[1]], vec![b, s[0], s[1]], l.offset()),
            None,
        );
    }
    if let Some(k) = split {
        let (no, ni) = (batch[..k].iter().product(), batch[k..].iter().product());
        let outer = merged_stride(&batch[..k], &bs[..k]);
        let inner = merged_stride(&batch[k..], &bs[k..]);
        if let (Some(so), Some(si), true) = (outer, inner, rows_ok) {
            return (
                Layout::new(
                    vec![no, ni, m[0], m[1]],
                    vec![so, si, s[0], s[1]],
                    l.offset(),
                ),
                None,
            );
        }
    }
    let dims: Vec<usize> = batch.iter().copied().chain(m).collect();
    let strides: Vec<usize> = bs.iter().copied().chain(s).collect();
    (
        Layout::contiguous(&[n, m[0], m[1]]),
        Some(Layout::new(dims, strides, l.offset())),
    )
}

/// [`flat`] as an `[outer, inner, rows, cols]` view split at `at` (a
/// `[batch, ..]` one, whose batch stride walks both, written as such).
fn flat_at(l: &Layout, batch: &[usize], at: usize) -> (Layout, Option<Layout>) {
    let (f, copy) = flat(l, batch, Some(at), true);
    if f.rank() == 4 {
        return (f, copy);
    }
    let ni: usize = batch[at..].iter().product();
    let (d, st) = (f.dims(), f.strides());
    (
        Layout::new(
            vec![d[0] / ni.max(1), ni, d[1], d[2]],
            vec![st[0] * ni, st[0], st[1], st[2]],
            f.offset(),
        ),
        copy,
    )
}

/// The heads (dim -3) of a key of dims `kd` when they differ from those of
/// the attention's output `dims` and are not 1 (which broadcasts): the
/// grouped-query case the rule admitted under `enable_gqa`.
fn kv_heads(dims: &[usize], kd: &[usize]) -> Option<usize> {
    let (r, kr) = (dims.len(), kd.len());
    (r >= 3 && kr >= 3 && kd[kr - 3] != dims[r - 3] && kd[kr - 3] != 1).then(|| kd[kr - 3])
}

/// Where the backend splits the batch dims of all operands in two (see
/// [`flat`]): the first split at which every one of `ops` whose batch dims
/// one stride cannot walk is walked by two; `None` when no operand needs
/// it or no split serves them all (those are copied).
fn batch_split(ops: &[&Layout], batch: &[usize]) -> Option<usize> {
    let fits = |l: &Layout, k: usize| {
        let bs = batch_strides(l, batch);
        merged_stride(&batch[..k], &bs[..k]).is_some()
            && merged_stride(&batch[k..], &bs[k..]).is_some()
    };
    let split: Vec<&&Layout> = ops
        .iter()
        .filter(|l| merged_stride(batch, &batch_strides(l, batch)).is_none())
        .collect();
    if split.is_empty() {
        return None;
    }
    (1..batch.len()).find(|&k| split.iter().all(|l| fits(l, k)))
}

/// The factor of the scores: `args`' `scale`, else `1 / sqrt(E)` of the
/// query dims `qd`; an `Err` unless finite.
fn scale_of<D: Device, T: FloatDType>(qd: &[usize], args: &AttentionArgs<'_, D, T>) -> Result<f64> {
    let e = qd[qd.len() - 1];
    let scale = match args.scale {
        Some(s) => s,
        // No products to scale (PyTorch's `q @ k^T` of an empty head dim
        // is 0, not 0 * inf).
        None if e == 0 => 0.0,
        None => 1.0 / (e as f64).sqrt(),
    };
    if !scale.is_finite() {
        return Err(Error::shape(
            OP,
            "a finite `scale`",
            format!("scale = {scale}"),
        ));
    }
    Ok(scale)
}

/// The attention of `q`, `k`, `v` with `args`, as a buffer of the dims
/// the rule gives and its layout, and with `want_lse` the rows'
/// contiguous `[..batch, L]` f32 log-sum-exps.
#[allow(clippy::type_complexity)]
fn attention<D: Device, T: FloatDType>(
    q: &Tensor<D, T, impl Shape>,
    k: &Tensor<D, T, impl Shape>,
    v: &Tensor<D, T, impl Shape>,
    args: &AttentionArgs<'_, D, T>,
    want_lse: bool,
) -> Result<(Storage<T>, Layout, Option<(Storage<f32>, Layout)>)> {
    let mask_dims = args.mask.as_ref().map(|(_, l)| ("attn_mask", l.dims()));
    let dims = rules::attention(
        OP,
        ("query", q.dims()),
        ("key", k.dims()),
        ("value", v.dims()),
        mask_dims,
        args.is_causal,
        args.enable_gqa,
    )?;
    let scale = scale_of(q.dims(), args)?;
    let r = dims.len();
    let batch = &dims[..r - 2];
    let (l, s) = (dims[r - 2], k.dims()[k.dims().len() - 2]);
    let mut scores: Vec<usize> = batch.to_vec();
    scores.extend([l, s]);
    let numel: usize = dims.iter().product();
    let (split, placed, result, (lq, cq), (lk, ck), (lv, cv)) =
        if let Some(hkv) = kv_heads(&dims, k.dims()) {
            // Grouped-query attention: every operand split before the heads,
            // the key's and value's `Hkv` heads each read by `H / Hkv`
            // query heads.
            let at = batch.len() - 1;
            let kv = |x: &Layout| {
                let mut to = batch.to_vec();
                to[at] = hkv;
                let kvb = to.clone();
                let r = x.rank();
                to.extend_from_slice(&x.dims()[r - 2..]);
                flat_at(&x.broadcast_to(&to), &kvb, at)
            };
            let (placed, result) = if batch_split(&[&q.layout], batch) == Some(at) {
                output_order(&dims, Some(at))
            } else {
                let (no, ni) = (batch[..at].iter().product(), batch[at]);
                (
                    Layout::contiguous(&[no, ni, dims[r - 2], dims[r - 1]]),
                    Layout::contiguous(&dims),
                )
            };
            (
                Some(at),
                placed,
                result,
                flat_at(&q.layout, batch, at),
                kv(&k.layout),
                kv(&v.layout),
            )
        } else {
            let split = batch_split(&[&q.layout, &k.layout, &v.layout], batch);
            let (placed, result) = output_order(&dims, split);
            (
                split,
                placed,
                result,
                flat(&q.layout, batch, split, true),
                flat(&k.layout, batch, split, true),
                flat(&v.layout, batch, split, true),
            )
        };
    let lm = args
        .mask
        .as_ref()
        .map(|(_, ml)| flat(&ml.broadcast_to(&scores), batch, split, false));
    let lse_dims = &dims[..r - 1];
    let lse_numel: usize = lse_dims.iter().product();
    let (storage, lse) = dispatch!(D, |be| {
        if numel == 0 && !(want_lse && lse_numel > 0) {
            let lse = if want_lse {
                Some(be.wrap(be.alloc::<f32>(0)?))
            } else {
                None
            };
            (be.wrap(be.alloc::<T>(0)?), lse)
        } else {
            let side = |x: &Storage<T>, c: &Option<Layout>| -> Result<_> {
                c.as_ref().map(|c| be.contiguous(be.buf(x), c)).transpose()
            };
            let (q_copy, k_copy, v_copy) = (
                side(&q.storage, &cq)?,
                side(&k.storage, &ck)?,
                side(&v.storage, &cv)?,
            );
            let qb = q_copy.as_ref().unwrap_or(be.buf(&q.storage));
            let kb = k_copy.as_ref().unwrap_or(be.buf(&k.storage));
            let vb = v_copy.as_ref().unwrap_or(be.buf(&v.storage));
            let (mb, mf) = match (&args.mask, &lm) {
                (Some((MaskRef::Bool(m), _)), Some((_, Some(c)))) => {
                    (Some(be.contiguous(be.buf(m), c)?), None)
                }
                (Some((MaskRef::Add(m), _)), Some((_, Some(c)))) => {
                    (None, Some(be.contiguous(be.buf(m), c)?))
                }
                _ => (None, None),
            };
            let mask = match (&args.mask, &lm) {
                (Some((MaskRef::Bool(m), _)), Some((l, _))) => {
                    Some((AttnMask::Bool(mb.as_ref().unwrap_or(be.buf(m))), l))
                }
                (Some((MaskRef::Add(m), _)), Some((l, _))) => {
                    Some((AttnMask::Add(mf.as_ref().unwrap_or(be.buf(m))), l))
                }
                _ => None,
            };
            if want_lse {
                let (o, lse) = be.attention_lse(
                    (qb, &lq),
                    (kb, &lk),
                    (vb, &lv),
                    mask,
                    args.is_causal,
                    scale,
                    &placed,
                )?;
                (be.wrap(o), Some(be.wrap(lse)))
            } else {
                let o = be.attention(
                    (qb, &lq),
                    (kb, &lk),
                    (vb, &lv),
                    mask,
                    args.is_causal,
                    scale,
                    &placed,
                )?;
                (be.wrap(o), None)
            }
        }
    });
    Ok((
        storage,
        result,
        lse.map(|x| (x, Layout::contiguous(lse_dims))),
    ))
}

/// Where the backend places the output `[..batch, L, Ev]` (`placed`, its
/// backend form) and the result's layout over it: contiguous, or, when
/// the batch dims split at `split` (the operands came as heads split out
/// of a `[B, L, H, E]`-ordered projection), in the order `[..outer, L,
/// ..inner, Ev]`, as PyTorch's fused attention returns it, so that
/// merging the heads back (`transpose(1, 2).reshape([B, L, H * Ev])`) is a
/// view instead of a copy.
fn output_order(dims: &[usize], split: Option<usize>) -> (Layout, Layout) {
    let r = dims.len();
    let (batch, l, ev) = (&dims[..r - 2], dims[r - 2], dims[r - 1]);
    let n: usize = batch.iter().product();
    match split {
        Some(k) => {
            let (outer, inner) = (&batch[..k], &batch[k..]);
            let (no, ni): (usize, usize) = (outer.iter().product(), inner.iter().product());
            let placed = Layout::new(vec![no, ni, l, ev], vec![l * ni * ev, ev, ni * ev, 1], 0);
            let mut strides: Vec<usize> = contiguous_strides(outer)
                .into_iter()
                .map(|s| s * l * ni * ev)
                .collect();
            strides.extend(contiguous_strides(inner).into_iter().map(|s| s * ev));
            strides.extend([ni * ev, 1]);
            (placed, Layout::new(dims.to_vec(), strides, 0))
        }
        None => (Layout::contiguous(&[n, l, ev]), Layout::contiguous(dims)),
    }
}

/// The gradients of the attention of `q`, `k`, `v` with `args` with
/// respect to each, given its output `out`, the output's gradient `grad`
/// and the forward's log-sum-exps `lse` (`[..batch, L]` f32): buffers and
/// layouts of `q`'s, `k`'s and `v`'s dims (a gradient of an operand
/// broadcast over batch dims summed back over them).
#[allow(clippy::type_complexity)]
fn attention_backward<D: Device, T: FloatDType>(
    q: &Tensor<D, T, impl Shape>,
    k: &Tensor<D, T, impl Shape>,
    v: &Tensor<D, T, impl Shape>,
    out: &Tensor<D, T, impl Shape>,
    grad: &Tensor<D, T, impl Shape>,
    lse: Option<&Tensor<D, f32, impl Shape>>,
    args: &AttentionArgs<'_, D, T>,
) -> Result<[(Storage<T>, Layout); 3]> {
    let mask = args.mask.as_ref().map(|(m, l)| (m, (*l).clone()));
    let lse = lse.map(Part::of);
    let mask_dims = args.mask.as_ref().map(|(_, l)| ("attn_mask", l.dims()));
    let dims = rules::attention(
        OP,
        ("query", q.dims()),
        ("key", k.dims()),
        ("value", v.dims()),
        mask_dims,
        args.is_causal,
        args.enable_gqa,
    )?;
    let (q, k, v, out, grad) = (
        Part::of(q),
        Part::of(k),
        Part::of(v),
        Part::of(out),
        Part::of(grad),
    );
    let Some(hkv) = kv_heads(&dims, k.layout.dims()) else {
        return backward_parts(q, k, v, out, grad, lse, mask, args);
    };
    let r = dims.len();
    let given = [
        ("out", out.layout.dims(), &dims[..]),
        ("grad_out", grad.layout.dims(), &dims[..]),
        (
            "lse",
            lse.as_ref().map_or(&dims[..r - 1], |x| x.layout.dims()),
            &dims[..r - 1],
        ),
    ];
    if let Some((name, t, want)) = given.into_iter().find(|(_, t, want)| t != want) {
        return Err(Error::shape(
            OP,
            format!("`{name}` of dims {want:?} (the attention's output dims)"),
            format!("`{name}` of dims {t:?}"),
        ));
    }
    // Grouped-query attention as broadcasting: the query's `H` heads (and
    // the output's, the gradient's, the log-sum-exps') split into `[Hkv,
    // g]`, the key's and value's `Hkv` heads given a dim of 1 that
    // broadcasts over the `g` query heads of their group, so that their
    // gradients are summed over the group.
    let g = dims[r - 3] / hkv;
    let (qd, kd, vd) = (
        q.layout.dims().to_vec(),
        k.layout.dims().to_vec(),
        v.layout.dims().to_vec(),
    );
    let lse = lse.map(|x| {
        let at = x.layout.rank() - 2;
        x.split_heads(at, hkv, g)
    });
    let mask = mask.map(|(m, l)| {
        let mut scores = dims[..r - 1].to_vec();
        scores.push(kd[kd.len() - 2]);
        let b = l.broadcast_to(&scores);
        let (mut d, mut st) = (b.dims().to_vec(), b.strides().to_vec());
        d[r - 3] = hkv;
        d.insert(r - 2, g);
        st.insert(r - 2, st[r - 3]);
        st[r - 3] *= g;
        (m, Layout::new(d, st, b.offset()))
    });
    let [dq, dk, dv] = backward_parts(
        q.split_heads(qd.len() - 3, hkv, g),
        k.unit_group(),
        v.unit_group(),
        out.split_heads(r - 3, hkv, g),
        grad.split_heads(r - 3, hkv, g),
        lse,
        mask,
        args,
    )?;
    Ok([
        (dq.0, Layout::contiguous(&qd)),
        (dk.0, Layout::contiguous(&kd)),
        (dv.0, Layout::contiguous(&vd)),
    ])
}

/// A tensor's storage and layout.
struct Part<'a, T: DType> {
    storage: &'a Storage<T>,
    layout: Layout,
}

impl<'a, T: DType> Part<'a, T> {
    fn of<D: Device>(x: &'a Tensor<D, T, impl Shape>) -> Self {
        Part {
            storage: &x.storage,
            layout: x.layout.clone(),
        }
    }

    /// Dim `at` (the heads, `hkv * g`) split into `[hkv, g]`.
    fn split_heads(self, at: usize, hkv: usize, g: usize) -> Self {
        let l = &self.layout;
        let (mut d, mut st) = (l.dims().to_vec(), l.strides().to_vec());
        d[at] = hkv;
        d.insert(at + 1, g);
        st.insert(at + 1, st[at]);
        st[at] *= g;
        Part {
            storage: self.storage,
            layout: Layout::new(d, st, l.offset()),
        }
    }

    /// A dim of 1 inserted after the heads (dim -3): the group that
    /// broadcasts over the query heads sharing them.
    fn unit_group(self) -> Self {
        let l = &self.layout;
        let at = l.rank() - 2;
        let (mut d, mut st) = (l.dims().to_vec(), l.strides().to_vec());
        d.insert(at, 1);
        st.insert(at, 0);
        Part {
            storage: self.storage,
            layout: Layout::new(d, st, l.offset()),
        }
    }
}

/// [`attention_backward`] of operands whose batch dims broadcast to the
/// output's (no grouped heads).
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn backward_parts<D: Device, T: FloatDType>(
    q: Part<'_, T>,
    k: Part<'_, T>,
    v: Part<'_, T>,
    out: Part<'_, T>,
    grad: Part<'_, T>,
    lse: Option<Part<'_, f32>>,
    mask: Option<(&MaskRef<'_, T>, Layout)>,
    args: &AttentionArgs<'_, D, T>,
) -> Result<[(Storage<T>, Layout); 3]> {
    let mask_dims = mask.as_ref().map(|(_, l)| ("attn_mask", l.dims()));
    let dims = rules::attention(
        OP,
        ("query", q.layout.dims()),
        ("key", k.layout.dims()),
        ("value", v.layout.dims()),
        mask_dims,
        args.is_causal,
        args.enable_gqa,
    )?;
    let scale = scale_of(q.layout.dims(), args)?;
    for (name, t) in [("out", out.layout.dims()), ("grad_out", grad.layout.dims())] {
        if t != &dims[..] {
            return Err(Error::shape(
                OP,
                format!("`{name}` of the attention's output dims {dims:?}"),
                format!("`{name}` of dims {t:?}"),
            ));
        }
    }
    let r = dims.len();
    let batch = &dims[..r - 2];
    if let Some(x) = &lse {
        if x.layout.dims() != &dims[..r - 1] {
            return Err(Error::shape(
                OP,
                format!("`lse` of dims {:?} ([..batch, L])", &dims[..r - 1]),
                format!("`lse` of dims {:?}", x.layout.dims()),
            ));
        }
    }
    let (l, s) = (dims[r - 2], k.layout.dims()[k.layout.dims().len() - 2]);
    let (e, ev) = (q.layout.dims()[q.layout.dims().len() - 1], dims[r - 1]);
    let mut scores: Vec<usize> = batch.to_vec();
    scores.extend([l, s]);
    let split = batch_split(
        &[&q.layout, &k.layout, &v.layout, &out.layout, &grad.layout],
        batch,
    );
    let (lq, cq) = flat(&q.layout, batch, split, true);
    let (lk, ck) = flat(&k.layout, batch, split, true);
    let (lv, cv) = flat(&v.layout, batch, split, true);
    let (lo, co) = flat(&out.layout, batch, split, true);
    let (lg, cg) = flat(&grad.layout, batch, split, true);
    let lm = mask
        .as_ref()
        .map(|(_, ml)| flat(&ml.broadcast_to(&scores), batch, split, false));
    // Each gradient over the output's batch dims, then summed back to its
    // operand's dims.
    let full = |rows: usize, cols: usize| -> Vec<usize> {
        batch.iter().copied().chain([rows, cols]).collect()
    };
    let targets = [
        (full(l, e), q.layout.dims().to_vec()),
        (full(s, e), k.layout.dims().to_vec()),
        (full(s, ev), v.layout.dims().to_vec()),
    ];
    let grads = dispatch!(D, |be| {
        let side = |x: &Storage<T>, c: &Option<Layout>| -> Result<_> {
            c.as_ref().map(|c| be.contiguous(be.buf(x), c)).transpose()
        };
        let copies = [
            side(q.storage, &cq)?,
            side(k.storage, &ck)?,
            side(v.storage, &cv)?,
            side(out.storage, &co)?,
            side(grad.storage, &cg)?,
        ];
        let stores: [&Storage<T>; 5] = [q.storage, k.storage, v.storage, out.storage, grad.storage];
        let bufs: Vec<_> = copies
            .iter()
            .zip(stores)
            .map(|(c, x)| c.as_ref().unwrap_or(be.buf(x)))
            .collect();
        let lse_copy = match &lse {
            Some(x) if !(x.layout.is_contiguous() && x.layout.offset() == 0) => {
                Some(be.contiguous(be.buf(x.storage), &x.layout)?)
            }
            _ => None,
        };
        let lse_buf = lse
            .as_ref()
            .map(|x| lse_copy.as_ref().unwrap_or(be.buf(x.storage)));
        let (mb, mf) = match (&mask, &lm) {
            (Some((MaskRef::Bool(m), _)), Some((_, Some(c)))) => {
                (Some(be.contiguous(be.buf(m), c)?), None)
            }
            (Some((MaskRef::Add(m), _)), Some((_, Some(c)))) => {
                (None, Some(be.contiguous(be.buf(m), c)?))
            }
            _ => (None, None),
        };
        let mask = match (&mask, &lm) {
            (Some((MaskRef::Bool(m), _)), Some((l, _))) => {
                Some((AttnMask::Bool(mb.as_ref().unwrap_or(be.buf(m))), l))
            }
            (Some((MaskRef::Add(m), _)), Some((l, _))) => {
                Some((AttnMask::Add(mf.as_ref().unwrap_or(be.buf(m))), l))
            }
            _ => None,
        };
        let (dq, dk, dv) = be.attention_backward(
            (bufs[0], &lq),
            (bufs[1], &lk),
            (bufs[2], &lv),
            (bufs[3], &lo),
            (bufs[4], &lg),
            lse_buf,
            mask,
            args.is_causal,
            scale,
        )?;
        let mut done = Vec::with_capacity(3);
        for (buf, (from, to)) in [dq, dk, dv].into_iter().zip(&targets) {
            // Sum away the batch dims the operand broadcasts over, the
            // last first so that the earlier ones keep their places.
            let (mut buf, mut cur) = (buf, from.clone());
            let lead = from.len() - to.len();
            for d in (0..batch.len()).rev() {
                let own = d.checked_sub(lead).map(|i| to[i]);
                if own != Some(cur[d]) {
                    buf = be.reduce(ReduceOp::Sum, &buf, &Layout::contiguous(&cur), d)?;
                    cur.remove(d);
                }
            }
            done.push((be.wrap(buf), Layout::contiguous(to)));
        }
        let mut it = done.into_iter();
        let (Some(a), Some(b), Some(c)) = (it.next(), it.next(), it.next()) else {
            unreachable!("three gradients")
        };
        [a, b, c]
    });
    Ok(grads)
}

impl<D: Device, T: FloatDType, S: Shape> Tensor<D, T, S> {
    /// Scaled dot-product attention, PyTorch's
    /// `F.scaled_dot_product_attention(query, key, value, attn_mask=None,
    /// is_causal=False, scale=None)` with `self` the query: `softmax(query
    /// @ key^T * scale + mask) @ value` over the last two dims (see
    /// [`AttentionShape`] for the shapes the types pair, and
    /// [`AttentionArgs`] for the optional arguments). A row whose every
    /// key is masked out is 0, as in PyTorch 2.5 and later.
    ///
    /// ```
    /// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
    /// // [batch, heads, T, head dim]
    /// let q = Tensor::<Cpu, f32, shape![1, 2, 3, 4]>::randn(1).unwrap();
    /// let k = Tensor::<Cpu, f32, shape![1, 2, 3, 4]>::randn(2).unwrap();
    /// let v = Tensor::<Cpu, f32, shape![1, 2, 3, 4]>::randn(3).unwrap();
    /// let y = q.scaled_dot_product_attention(&k, &v, AttentionArgs::new().is_causal(true)).unwrap();
    /// assert_eq!(y.shape(), &[1, 2, 3, 4]);
    /// // the first query sees only the first key: its row is that value's
    /// let (y, v) = (y.to_vec().unwrap(), v.to_vec().unwrap());
    /// assert!((0..4).all(|i| (y[i] - v[i]).abs() < 1e-6));
    /// ```
    pub fn scaled_dot_product_attention<SK: Shape, SV: Shape>(
        &self,
        key: &Tensor<D, T, SK>,
        value: &Tensor<D, T, SV>,
        args: AttentionArgs<'_, D, T>,
    ) -> Result<Tensor<D, T, S::Output>>
    where
        S: AttentionShape<SK, SV>,
    {
        self.scaled_dot_product_attention_dims(key, value, args)
    }

    /// [`scaled_dot_product_attention`](Self::scaled_dot_product_attention)
    /// for any shapes the shared rule accepts: batch dims broadcast as in
    /// `torch.matmul` (a key and value shared by every head), and the
    /// result type `SO` checked at run time. `tensor_fn!` uses it.
    ///
    /// ```
    /// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
    /// let q = Tensor::<Cpu, f32, shape![2, 3, 4, 8]>::ones().unwrap();
    /// let kv = Tensor::<Cpu, f32, shape![2, 1, 5, 8]>::ones().unwrap();
    /// let y = q
    ///     .scaled_dot_product_attention_dims::<shape![2, 3, 4, 8]>(&kv, &kv, AttentionArgs::new())
    ///     .unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![1.0; 2 * 3 * 4 * 8]);
    /// // a key of another head dim is an `Err` naming it
    /// let k = Tensor::<Cpu, f32, shape![2, 1, 5, 4]>::ones().unwrap();
    /// let e = q.scaled_dot_product_attention_dims::<shape![2, 3, 4, 8]>(&k, &kv, AttentionArgs::new());
    /// assert!(e.unwrap_err().to_string().contains("`key`"));
    /// ```
    pub fn scaled_dot_product_attention_dims<SO: Shape>(
        &self,
        key: &Tensor<D, T, impl Shape>,
        value: &Tensor<D, T, impl Shape>,
        args: AttentionArgs<'_, D, T>,
    ) -> Result<Tensor<D, T, SO>> {
        let (storage, layout, _) = attention(self, key, value, &args, false)?;
        output_in(storage, layout)
    }

    /// [`scaled_dot_product_attention`](Self::scaled_dot_product_attention)
    /// that also returns the log-sum-exp of each row's scores (`scale *
    /// query @ key^T + mask`, natural log), `(..B, L)` in f32 whatever
    /// the tensors' dtype (`-inf` for a row whose every key is masked):
    /// what a training step saves for
    /// [`scaled_dot_product_attention_backward`](Self::scaled_dot_product_attention_backward),
    /// as PyTorch's fused kernels save `logsumexp`. The plain forward
    /// does not compute it.
    ///
    /// ```
    /// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
    /// let q = Tensor::<Cpu, f32, shape![1, 1]>::from_vec(vec![1.0]).unwrap();
    /// let k = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![0.0, 0.0]).unwrap();
    /// let v = Tensor::<Cpu, f32, shape![2, 1]>::from_vec(vec![1.0, 3.0]).unwrap();
    /// let (y, lse) = q.scaled_dot_product_attention_with_lse(&k, &v, AttentionArgs::new()).unwrap();
    /// assert_eq!(y.to_vec().unwrap(), vec![2.0]);
    /// // two scores of 0: log(e^0 + e^0)
    /// assert!((lse.to_vec().unwrap()[0] - 2f32.ln()).abs() < 1e-6);
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn scaled_dot_product_attention_with_lse<SK: Shape, SV: Shape>(
        &self,
        key: &Tensor<D, T, SK>,
        value: &Tensor<D, T, SV>,
        args: AttentionArgs<'_, D, T>,
    ) -> Result<(Tensor<D, T, S::Output>, Tensor<D, f32, S::Lse>)>
    where
        S: AttentionShape<SK, SV>,
    {
        self.scaled_dot_product_attention_with_lse_dims(key, value, args)
    }

    /// [`scaled_dot_product_attention_with_lse`](Self::scaled_dot_product_attention_with_lse)
    /// for any shapes the shared rule accepts, the result types `SO` and
    /// `SL` checked at run time. `tensor_fn!`'s `#[grad]` uses it.
    ///
    /// ```
    /// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
    /// let q = Tensor::<Cpu, f32, shape![2, 3, 4, 8]>::ones().unwrap();
    /// let kv = Tensor::<Cpu, f32, shape![2, 1, 5, 8]>::ones().unwrap();
    /// let (y, lse) = q
    ///     .scaled_dot_product_attention_with_lse_dims::<shape![2, 3, 4, 8], shape![2, 3, 4]>(
    ///         &kv,
    ///         &kv,
    ///         AttentionArgs::new(),
    ///     )
    ///     .unwrap();
    /// assert_eq!(y.dims(), &[2, 3, 4, 8]);
    /// assert_eq!(lse.dims(), &[2, 3, 4]);
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn scaled_dot_product_attention_with_lse_dims<SO: Shape, SL: Shape>(
        &self,
        key: &Tensor<D, T, impl Shape>,
        value: &Tensor<D, T, impl Shape>,
        args: AttentionArgs<'_, D, T>,
    ) -> Result<(Tensor<D, T, SO>, Tensor<D, f32, SL>)> {
        let (storage, layout, lse) = attention(self, key, value, &args, true)?;
        let (ls, ll) = lse.expect("asked for the log-sum-exps");
        Ok((output_in(storage, layout)?, output_in(ls, ll)?))
    }

    /// The gradients of
    /// [`scaled_dot_product_attention`](Self::scaled_dot_product_attention)
    /// (with `self` the query) with respect to the query, key and value,
    /// given its output `out`, the gradient of a loss with respect to it
    /// `grad_out`, and the log-sum-exps `lse` that
    /// [`scaled_dot_product_attention_with_lse`](Self::scaled_dot_product_attention_with_lse)
    /// returned with `out`; `args` as the forward took them. PyTorch's
    /// `torch.autograd.grad` of `F.scaled_dot_product_attention`, in
    /// FlashAttention-2's order: the weights are recomputed block by block
    /// from `lse`, never held as an `L x S` matrix, and accumulated in at
    /// least f32 (for f64 tensors everything is f64: their log-sum-exps
    /// are recomputed in f64, as the saved `lse` is f32).
    /// A row whose every key is masked has zero gradients; a key or value
    /// shared by several batches gets the sum of their gradients. The mask
    /// gets none.
    ///
    /// ```
    /// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
    /// let q = Tensor::<Cpu, f64, shape![1, 2, 3, 4]>::randn(1).unwrap();
    /// let k = Tensor::<Cpu, f64, shape![1, 2, 5, 4]>::randn(2).unwrap();
    /// let v = Tensor::<Cpu, f64, shape![1, 2, 5, 6]>::randn(3).unwrap();
    /// let args = || AttentionArgs::new().is_causal(true);
    /// let (y, lse) = q.scaled_dot_product_attention_with_lse(&k, &v, args()).unwrap();
    /// // the loss y.sum(): its gradient with respect to y is all ones
    /// let g = Tensor::<Cpu, f64, shape![1, 2, 3, 6]>::ones().unwrap();
    /// let (dq, dk, dv) = q
    ///     .scaled_dot_product_attention_backward(&k, &v, &y, &g, &lse, args())
    ///     .unwrap();
    /// assert_eq!((dq.dims(), dk.dims(), dv.dims()), (&[1, 2, 3, 4][..], &[1, 2, 5, 4][..], &[1, 2, 5, 6][..]));
    /// // each query's weights sum to one, so each row of dv sums to what
    /// // the queries gave that key, and all of dv sums to the 2 x 3 rows
    /// // times 6 columns
    /// let total: f64 = dv.to_vec().unwrap().iter().sum();
    /// assert!((total - 36.0).abs() < 1e-12);
    /// // keys past the last query (3, 4) take no part under `is_causal`
    /// let dk = dk.to_vec().unwrap();
    /// assert!(dk[3 * 4..5 * 4].iter().all(|&x| x == 0.0));
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn scaled_dot_product_attention_backward<SK: Shape, SV: Shape>(
        &self,
        key: &Tensor<D, T, SK>,
        value: &Tensor<D, T, SV>,
        out: &Tensor<D, T, S::Output>,
        grad_out: &Tensor<D, T, S::Output>,
        lse: &Tensor<D, f32, S::Lse>,
        args: AttentionArgs<'_, D, T>,
    ) -> Result<(Tensor<D, T, S>, Tensor<D, T, SK>, Tensor<D, T, SV>)>
    where
        S: AttentionShape<SK, SV>,
    {
        self.scaled_dot_product_attention_backward_dims(key, value, out, grad_out, lse, args)
    }

    /// [`scaled_dot_product_attention_backward`](Self::scaled_dot_product_attention_backward)
    /// for any shapes the shared rule accepts (batch dims that broadcast:
    /// the gradient of a shared key is summed over the batches sharing
    /// it); `out`, `grad_out` and `lse` are checked against the rule's
    /// dims at run time, an `Err` naming the one that does not fit.
    /// `tensor_fn!`'s `#[grad]` uses it.
    ///
    /// ```
    /// use tensorfn_runtime::{AttentionArgs, Tensor, Cpu, shape};
    /// let q = Tensor::<Cpu, f32, shape![2, 3, 4, 8]>::randn(1).unwrap();
    /// let kv = Tensor::<Cpu, f32, shape![2, 1, 5, 8]>::randn(2).unwrap();
    /// let (y, lse) = q
    ///     .scaled_dot_product_attention_with_lse_dims::<shape![2, 3, 4, 8], shape![2, 3, 4]>(
    ///         &kv,
    ///         &kv,
    ///         AttentionArgs::new(),
    ///     )
    ///     .unwrap();
    /// let (dq, dk, dv) = q
    ///     .scaled_dot_product_attention_backward_dims(&kv, &kv, &y, &y, &lse, AttentionArgs::new())
    ///     .unwrap();
    /// // the shared key's gradient is summed over the 3 heads
    /// assert_eq!((dq.dims(), dk.dims(), dv.dims()), (&[2, 3, 4, 8][..], &[2, 1, 5, 8][..], &[2, 1, 5, 8][..]));
    /// // an `out` of other dims is an `Err` naming it
    /// let e = q.scaled_dot_product_attention_backward_dims(&kv, &kv, &q.narrow::<2, shape![2, 3, 2, 8]>(0, 2).unwrap(), &y, &lse, AttentionArgs::new());
    /// assert!(e.unwrap_err().to_string().contains("`out`"));
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn scaled_dot_product_attention_backward_dims<SK: Shape, SV: Shape>(
        &self,
        key: &Tensor<D, T, SK>,
        value: &Tensor<D, T, SV>,
        out: &Tensor<D, T, impl Shape>,
        grad_out: &Tensor<D, T, impl Shape>,
        lse: &Tensor<D, f32, impl Shape>,
        args: AttentionArgs<'_, D, T>,
    ) -> Result<(Tensor<D, T, S>, Tensor<D, T, SK>, Tensor<D, T, SV>)> {
        let [(a, la), (b, lb), (c, lc)] =
            attention_backward(self, key, value, out, grad_out, Some(lse), &args)?;
        Ok((output_in(a, la)?, output_in(b, lb)?, output_in(c, lc)?))
    }
}

/// The f64 reference and the random cases shared by the CPU and GPU tests.
#[cfg(test)]
pub(crate) mod reference {
    use crate::random::SplitMix64;

    /// A mask of a test case, `[L, S]` or `[B, H, L, S]` (row-major).
    #[derive(Clone, Debug)]
    pub(crate) enum TestMask {
        None,
        Bool(Vec<bool>, Vec<usize>),
        Add(Vec<f64>, Vec<usize>),
    }

    /// One attention problem: `[B, H, L, E]`, `[B, Hkv, S, E]`, `[B, Hkv,
    /// S, Ev]` (`Hkv = H` but under grouped-query attention).
    #[derive(Clone, Debug)]
    pub(crate) struct Case {
        pub(crate) dims: [usize; 6],
        pub(crate) hkv: usize,
        pub(crate) q: Vec<f64>,
        pub(crate) k: Vec<f64>,
        pub(crate) v: Vec<f64>,
        pub(crate) mask: TestMask,
        pub(crate) causal: bool,
        pub(crate) scale: Option<f64>,
    }

    impl Case {
        /// Normal inputs of `[b, h, l, s, e, ev]`, scaled by `amp`.
        pub(crate) fn random(rng: &mut SplitMix64, dims: [usize; 6], amp: f64) -> Case {
            let [b, h, l, s, e, ev] = dims;
            let mut draw = |n: usize| (0..n).map(|_| amp * rng.normal()).collect::<Vec<_>>();
            Case {
                dims,
                hkv: h,
                q: draw(b * h * l * e),
                k: draw(b * h * s * e),
                v: draw(b * h * s * ev),
                mask: TestMask::None,
                causal: false,
                scale: None,
            }
        }

        /// [`Case::random`] with `hkv` key and value heads (grouped-query
        /// attention: `H` a multiple of `hkv`).
        pub(crate) fn random_gqa(
            rng: &mut SplitMix64,
            dims: [usize; 6],
            hkv: usize,
            amp: f64,
        ) -> Case {
            let [b, _, _, s, e, ev] = dims;
            let mut c = Case::random(rng, dims, amp);
            c.hkv = hkv;
            c.k.truncate(b * hkv * s * e);
            c.v.truncate(b * hkv * s * ev);
            c
        }

        pub(crate) fn q_dims(&self) -> Vec<usize> {
            let [b, h, l, _, e, _] = self.dims;
            vec![b, h, l, e]
        }
        pub(crate) fn k_dims(&self) -> Vec<usize> {
            let [b, _, _, s, e, _] = self.dims;
            vec![b, self.hkv, s, e]
        }
        pub(crate) fn v_dims(&self) -> Vec<usize> {
            let [b, _, _, s, _, ev] = self.dims;
            vec![b, self.hkv, s, ev]
        }
        pub(crate) fn out_dims(&self) -> Vec<usize> {
            let [b, h, l, _, _, ev] = self.dims;
            vec![b, h, l, ev]
        }

        /// Rounds the inputs through `round` (the dtype under test).
        pub(crate) fn rounded(mut self, round: impl Fn(f64) -> f64) -> Case {
            for x in self.q.iter_mut().chain(&mut self.k).chain(&mut self.v) {
                *x = round(*x);
            }
            if let TestMask::Add(m, _) = &mut self.mask {
                for x in m.iter_mut() {
                    *x = round(*x);
                }
            }
            self
        }

        /// The mask's value at (batch, head, i, j): `None` when it leaves
        /// the key out.
        fn mask_at(&self, bi: usize, hi: usize, i: usize, j: usize) -> Option<f64> {
            let [_, h, l, s, _, _] = self.dims;
            let idx = |d: &[usize]| {
                if d.len() == 2 {
                    i * s + j
                } else {
                    let pick = |x: usize, n: usize| if n == 1 { 0 } else { x };
                    ((pick(bi, d[0]) * d[1] + pick(hi, d[1])) * l + i) * s + j
                }
            };
            let _ = h;
            match &self.mask {
                TestMask::None => Some(0.0),
                TestMask::Bool(m, d) => m[idx(d)].then_some(0.0),
                TestMask::Add(m, d) => Some(m[idx(d)]),
            }
        }

        /// Plain loops in f64: a key whose score is `-inf` takes no part;
        /// a row without keys is 0.
        pub(crate) fn expected(&self) -> Vec<f64> {
            let [b, h, l, s, e, ev] = self.dims;
            let scale = self
                .scale
                .unwrap_or(if e == 0 { 0.0 } else { 1.0 / (e as f64).sqrt() });
            let mut out = vec![0.0; b * h * l * ev];
            for bi in 0..b {
                for hi in 0..h {
                    let bh = bi * h + hi;
                    // The key and value head of query head `hi`.
                    let kh = bi * self.hkv + hi / (h / self.hkv.max(1)).max(1);
                    for i in 0..l {
                        let mut scores = Vec::new();
                        for j in 0..s {
                            if self.causal && j > i {
                                continue;
                            }
                            let Some(add) = self.mask_at(bi, hi, i, j) else {
                                continue;
                            };
                            let d: f64 = (0..e)
                                .map(|t| {
                                    self.q[(bh * l + i) * e + t] * self.k[(kh * s + j) * e + t]
                                })
                                .sum();
                            let x = d * scale + add;
                            if x != f64::NEG_INFINITY {
                                scores.push((j, x));
                            }
                        }
                        let m = scores.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
                        let o = &mut out[(bh * l + i) * ev..(bh * l + i + 1) * ev];
                        if scores.is_empty() {
                            continue;
                        }
                        let mut sum = 0.0;
                        for &(j, x) in &scores {
                            let p = (x - m).exp();
                            sum += p;
                            for (c, oc) in o.iter_mut().enumerate() {
                                *oc += p * self.v[(kh * s + j) * ev + c];
                            }
                        }
                        for oc in o.iter_mut() {
                            *oc /= sum;
                        }
                    }
                }
            }
            out
        }
    }

    impl Case {
        /// `sum(out * w)` of the f64 forward.
        pub(crate) fn loss(&self, w: &[f64]) -> f64 {
            self.expected().iter().zip(w).map(|(a, b)| a * b).sum()
        }

        /// The gradients of [`Case::loss`] with respect to `q`, `k` and
        /// `v` by f64 central differences.
        pub(crate) fn finite_differences(&self, w: &[f64]) -> [Vec<f64>; 3] {
            let mut out: [Vec<f64>; 3] = Default::default();
            for (which, o) in out.iter_mut().enumerate() {
                let n = [&self.q, &self.k, &self.v][which].len();
                for i in 0..n {
                    let mut c = self.clone();
                    let x = [&c.q, &c.k, &c.v][which][i];
                    let h = 1e-5 * (1.0 + x.abs());
                    let mut at = |d: f64| {
                        let t = [&mut c.q, &mut c.k, &mut c.v];
                        let [a, b, e] = t;
                        [a, b, e][which][i] = x + d;
                        c.loss(w)
                    };
                    let (up, down) = (at(h), at(-h));
                    o.push((up - down) / (2.0 * h));
                }
            }
            out
        }
    }

    /// Checks `got` against `want` within `tol` (absolute, NaN where NaN).
    pub(crate) fn check(what: &str, got: &[f64], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let ok = if w.is_nan() {
                g.is_nan()
            } else {
                (g - w).abs() <= tol * (1.0 + w.abs())
            };
            assert!(
                ok,
                "{what}: element {i} is {g}, expected {w} (tolerance {tol})"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reference::{check, Case, TestMask};
    use super::*;
    use crate::device::Cpu;
    use crate::random::SplitMix64;
    use crate::shape::Dyn;
    use half::{bf16, f16};

    type D4 = (Dyn, Dyn, Dyn, Dyn);

    fn seed() -> SplitMix64 {
        // A different stream each run: the inputs must not be tuned to pass.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7);
        SplitMix64::new(t)
    }

    /// The tolerance of `T`: its roundoff of the result, and of the scores
    /// and weights computed in f32 for the 16-bit dtypes.
    fn tol<T: FloatDType>() -> f64 {
        match T::KIND {
            DTypeKind::F64 => 1e-12,
            DTypeKind::F32 => 2e-5,
            DTypeKind::F16 => 4e-3,
            _ => 3e-2,
        }
    }

    fn tensor<T: FloatDType>(x: &[f64], dims: &[usize]) -> Tensor<Cpu, T, D4> {
        Tensor::from_vec_dims(x.iter().map(|&v| T::from_f64(v)).collect(), dims).unwrap()
    }

    /// Runs `c` through the typed API in `T` and checks it.
    fn run<T: FloatDType>(c: &Case) {
        run_tol::<T>(c, tol::<T>())
    }

    /// [`run`] within `tol`.
    fn run_tol<T: FloatDType>(c: &Case, tol: f64) {
        let c = c.clone().rounded(|x| T::from_f64(x).to_f64());
        let (q, k, v) = (
            tensor::<T>(&c.q, &c.q_dims()),
            tensor::<T>(&c.k, &c.k_dims()),
            tensor::<T>(&c.v, &c.v_dims()),
        );
        let (mb2, mb4, mf2, mf4);
        let mut args = AttentionArgs::new()
            .is_causal(c.causal)
            .enable_gqa(c.hkv != c.dims[1]);
        if let Some(s) = c.scale {
            args = args.scale(s);
        }
        match &c.mask {
            TestMask::None => {}
            TestMask::Bool(m, d) if d.len() == 2 => {
                mb2 = Tensor::<Cpu, bool, (Dyn, Dyn)>::from_vec_dims(m.clone(), d).unwrap();
                args = args.attn_mask(&mb2);
            }
            TestMask::Bool(m, d) => {
                mb4 = Tensor::<Cpu, bool, D4>::from_vec_dims(m.clone(), d).unwrap();
                args = args.attn_mask(&mb4);
            }
            TestMask::Add(m, d) => {
                let m: Vec<T> = m.iter().map(|&x| T::from_f64(x)).collect();
                if d.len() == 2 {
                    mf2 = Tensor::<Cpu, T, (Dyn, Dyn)>::from_vec_dims(m, d).unwrap();
                    args = args.attn_mask(&mf2);
                } else {
                    mf4 = Tensor::<Cpu, T, D4>::from_vec_dims(m, d).unwrap();
                    args = args.attn_mask(&mf4);
                }
            }
        }
        let y: Tensor<Cpu, T, D4> = q.scaled_dot_product_attention(&k, &v, args).unwrap();
        assert_eq!(y.dims(), &c.out_dims()[..]);
        let got: Vec<f64> = y
            .to_vec()
            .unwrap()
            .into_iter()
            .map(|x| x.to_f64())
            .collect();
        let what = format!(
            "{:?} dims {:?} causal {} mask {}",
            T::KIND,
            c.dims,
            c.causal,
            match &c.mask {
                TestMask::None => "none",
                TestMask::Bool(..) => "bool",
                TestMask::Add(..) => "float",
            }
        );
        check(&what, &got, &c.expected(), tol);
    }

    fn all_dtypes(c: &Case) {
        run::<f32>(c);
        run::<f64>(c);
        run::<f16>(c);
        run::<bf16>(c);
    }

    #[test]
    fn random_shapes_every_dtype() {
        let mut rng = seed();
        for dims in [
            [2, 3, 17, 17, 64, 64],
            [1, 2, 40, 70, 80, 80],
            [1, 1, 33, 130, 128, 16],
            [2, 1, 70, 5, 1, 3],
            [1, 2, 5, 9, 3, 1],
        ] {
            for causal in [false, true] {
                let mut c = Case::random(&mut rng, dims, 1.0);
                c.causal = causal;
                all_dtypes(&c);
            }
        }
    }

    #[test]
    fn masks_bool_and_float() {
        let mut rng = seed();
        let [b, h, l, s] = [2, 2, 37, 71];
        for (i, dims) in [vec![l, s], vec![b, 1, l, s], vec![1, h, l, s]]
            .into_iter()
            .enumerate()
        {
            let n: usize = dims.iter().product();
            let mut c = Case::random(&mut rng, [b, h, l, s, 24, 40], 1.0);
            let mut bits: Vec<bool> = (0..n).map(|_| rng.uniform() < 0.7).collect();
            // Row 3 sees no key at all: its output is 0.
            for x in &mut bits[3 * s..4 * s] {
                *x = false;
            }
            c.mask = TestMask::Bool(bits, dims.clone());
            all_dtypes(&c);
            let add: Vec<f64> = (0..n)
                .map(|j| match (j % 11, i) {
                    (0, _) => f64::NEG_INFINITY,
                    _ => 2.0 * rng.normal(),
                })
                .collect();
            c.mask = TestMask::Add(add, dims);
            c.scale = Some(0.3);
            all_dtypes(&c);
        }
    }

    #[test]
    fn fully_masked_rows_are_zero() {
        let mut rng = seed();
        let mut c = Case::random(&mut rng, [1, 1, 4, 6, 8, 8], 1.0);
        c.mask = TestMask::Add(vec![f64::NEG_INFINITY; 24], vec![4, 6]);
        let want = c.expected();
        assert!(want.iter().all(|&x| x == 0.0));
        all_dtypes(&c);
        c.mask = TestMask::Bool(vec![false; 24], vec![4, 6]);
        all_dtypes(&c);
    }

    #[test]
    fn nan_and_large_scores() {
        let mut rng = seed();
        // Scores of thousands: the online softmax keeps them finite (an
        // f32 score of 1000 is off by 1e-4, and so are its weights).
        let c = Case::random(&mut rng, [1, 2, 50, 150, 16, 8], 12.0);
        run_tol::<f32>(&c, 2e-3);
        run::<f64>(&c);
        let mut c = Case::random(&mut rng, [1, 1, 6, 70, 8, 4], 1.0);
        c.q[2 * 8 + 1] = f64::NAN; // row 2 is NaN
        c.v[65 * 4 + 2] = f64::NAN; // column 2 of every row that sees key 65
        c.causal = true;
        let want = c.expected();
        assert!(want[2 * 4..3 * 4].iter().all(|x| x.is_nan()));
        assert!(!want[0].is_nan());
        all_dtypes(&c);
        c.causal = false;
        all_dtypes(&c);
    }

    #[test]
    fn empty_dims() {
        let mut rng = seed();
        for dims in [
            [1, 2, 0, 5, 8, 8],
            [1, 2, 5, 0, 8, 8],
            [0, 2, 5, 5, 8, 8],
            [1, 1, 5, 5, 0, 4],
            [1, 1, 5, 5, 4, 0],
        ] {
            for causal in [false, true] {
                let mut c = Case::random(&mut rng, dims, 1.0);
                c.causal = causal;
                all_dtypes(&c);
            }
        }
    }

    #[test]
    fn strided_and_broadcast_operands() {
        let mut rng = seed();
        // q transposed in place ([B, L, H, E] seen as [B, H, L, E]) and a
        // key and value shared by every head.
        let [b, h, l, s, e] = [2, 3, 9, 13, 16];
        let qd: Vec<f64> = (0..b * l * h * e).map(|_| rng.normal()).collect();
        let kd: Vec<f64> = (0..b * s * e).map(|_| rng.normal()).collect();
        let vd: Vec<f64> = (0..b * s * e).map(|_| rng.normal()).collect();
        let q = Tensor::<Cpu, f64, D4>::from_vec_dims(qd.clone(), &[b, l, h, e]).unwrap();
        let q = q.transpose::<D4>(1, 2).unwrap();
        let k = Tensor::<Cpu, f64, D4>::from_vec_dims(kd.clone(), &[b, 1, s, e]).unwrap();
        let v = Tensor::<Cpu, f64, D4>::from_vec_dims(vd.clone(), &[b, 1, s, e]).unwrap();
        let y = q
            .scaled_dot_product_attention_dims::<D4>(&k, &v, AttentionArgs::new().is_causal(true))
            .unwrap();
        // The same problem written out densely.
        let mut c = Case::random(&mut rng, [b, h, l, s, e, e], 1.0);
        for bi in 0..b {
            for hi in 0..h {
                for i in 0..l {
                    for t in 0..e {
                        c.q[((bi * h + hi) * l + i) * e + t] = qd[((bi * l + i) * h + hi) * e + t];
                    }
                }
                for j in 0..s * e {
                    c.k[(bi * h + hi) * s * e + j] = kd[bi * s * e + j];
                    c.v[(bi * h + hi) * s * e + j] = vd[bi * s * e + j];
                }
            }
        }
        c.causal = true;
        check("strided", &y.to_vec().unwrap(), &c.expected(), 1e-12);
    }

    /// The tolerance of `T`'s gradients.
    fn grad_tol<T: FloatDType>() -> f64 {
        match T::KIND {
            DTypeKind::F64 => 1e-6,
            DTypeKind::F32 => 1e-4,
            DTypeKind::F16 => 1e-2,
            _ => 6e-2,
        }
    }

    /// The forward with its log-sum-exps and the backward of `c` in `T`
    /// for `grad_out = w`, checked against f64 finite differences
    /// (computed on the inputs rounded to `T`) within `tol`.
    fn run_backward<T: FloatDType>(c: &Case, w: &[f64], tol: f64) {
        let round = |x: f64| T::from_f64(x).to_f64();
        let c = c.clone().rounded(round);
        let w: Vec<f64> = w.iter().map(|&x| round(x)).collect();
        let want = c.finite_differences(&w);
        let (q, k, v) = (
            tensor::<T>(&c.q, &c.q_dims()),
            tensor::<T>(&c.k, &c.k_dims()),
            tensor::<T>(&c.v, &c.v_dims()),
        );
        let (mb, mf);
        let args = || {
            let mut a = AttentionArgs::new()
                .is_causal(c.causal)
                .enable_gqa(c.hkv != c.dims[1]);
            if let Some(s) = c.scale {
                a = a.scale(s);
            }
            a
        };
        let mut a1 = args();
        let mut a2 = args();
        match &c.mask {
            TestMask::None => {}
            TestMask::Bool(m, d) => {
                mb = Tensor::<Cpu, bool, D4>::from_vec_dims(m.clone(), &pad4(d)).unwrap();
                a1 = a1.attn_mask(&mb);
                a2 = a2.attn_mask(&mb);
            }
            TestMask::Add(m, d) => {
                let m: Vec<T> = m.iter().map(|&x| T::from_f64(x)).collect();
                mf = Tensor::<Cpu, T, D4>::from_vec_dims(m, &pad4(d)).unwrap();
                a1 = a1.attn_mask(&mf);
                a2 = a2.attn_mask(&mf);
            }
        }
        let (y, lse) = q
            .scaled_dot_product_attention_with_lse_dims::<D4, (Dyn, Dyn, Dyn)>(&k, &v, a1)
            .unwrap();
        let g = tensor::<T>(&w, &c.out_dims());
        let (dq, dk, dv) = q
            .scaled_dot_product_attention_backward_dims(&k, &v, &y, &g, &lse, a2)
            .unwrap();
        for (name, got, want) in [
            ("dq", dq, &want[0]),
            ("dk", dk, &want[1]),
            ("dv", dv, &want[2]),
        ] {
            let got: Vec<f64> = got
                .to_vec()
                .unwrap()
                .into_iter()
                .map(|x| x.to_f64())
                .collect();
            let what = format!("{name} {:?} dims {:?} causal {}", T::KIND, c.dims, c.causal);
            check(&what, &got, want, tol);
        }
    }

    /// `[L, S]` mask dims as `[1, 1, L, S]`.
    fn pad4(d: &[usize]) -> Vec<usize> {
        let mut v = vec![1; 4 - d.len()];
        v.extend(d);
        v
    }

    fn backward_all_dtypes(c: &Case, w: &[f64]) {
        run_backward::<f64>(c, w, grad_tol::<f64>());
        run_backward::<f32>(c, w, grad_tol::<f32>());
        run_backward::<f16>(c, w, grad_tol::<f16>());
        run_backward::<bf16>(c, w, grad_tol::<bf16>());
    }

    fn weights(rng: &mut SplitMix64, c: &Case) -> Vec<f64> {
        (0..c.out_dims().iter().product::<usize>())
            .map(|_| rng.normal())
            .collect()
    }

    #[test]
    fn backward_matches_finite_differences() {
        let mut rng = seed();
        for dims in [
            [1, 2, 5, 7, 16, 16],
            [2, 1, 9, 4, 16, 8],
            [1, 1, 3, 4, 64, 64],
            [1, 1, 2, 3, 128, 128],
            [1, 1, 70, 3, 2, 3],
        ] {
            for causal in [false, true] {
                let mut c = Case::random(&mut rng, dims, 1.0);
                c.causal = causal;
                let w = weights(&mut rng, &c);
                backward_all_dtypes(&c, &w);
            }
        }
    }

    #[test]
    fn grouped_query_attention_every_dtype() {
        let mut rng = seed();
        for (dims, hkv) in [
            ([2, 8, 17, 23, 16, 16], 2),
            ([1, 6, 40, 70, 64, 64], 3),
            ([2, 4, 9, 9, 8, 5], 1),
            ([1, 4, 33, 130, 128, 128], 2),
        ] {
            for causal in [false, true] {
                let mut c = Case::random_gqa(&mut rng, dims, hkv, 1.0);
                c.causal = causal;
                all_dtypes(&c);
            }
        }
        // with a float mask over every head, and empty key sets
        let mut c = Case::random_gqa(&mut rng, [1, 4, 5, 7, 8, 8], 2, 1.0);
        let n = 4 * 5 * 7;
        let mut m: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
        for x in &mut m[7..14] {
            *x = f64::NEG_INFINITY;
        }
        c.mask = TestMask::Add(m, vec![1, 4, 5, 7]);
        all_dtypes(&c);
        let c = Case::random_gqa(&mut rng, [1, 4, 5, 0, 8, 8], 2, 1.0);
        all_dtypes(&c);
    }

    #[test]
    fn grouped_query_attention_shapes_are_checked() {
        let q = Tensor::<Cpu, f32, D4>::zeros_dims(&[1, 6, 3, 8]).unwrap();
        let k = Tensor::<Cpu, f32, D4>::zeros_dims(&[1, 4, 5, 8]).unwrap();
        let v = Tensor::<Cpu, f32, D4>::zeros_dims(&[1, 2, 5, 8]).unwrap();
        let args = || AttentionArgs::new().enable_gqa(true);
        let e = q.scaled_dot_product_attention_dims::<D4>(&k, &k, args());
        let e = e.unwrap_err().to_string();
        assert!(e.contains("multiple") && e.contains("`key`"), "{e}");
        let e = q.scaled_dot_product_attention_dims::<D4>(&v, &k, args());
        let e = e.unwrap_err().to_string();
        assert!(e.contains("`value`"), "{e}");
        let e = q.scaled_dot_product_attention_dims::<D4>(&v, &v, AttentionArgs::new());
        let e = e.unwrap_err().to_string();
        assert!(e.contains("enable_gqa = true"), "{e}");
        let y = q
            .scaled_dot_product_attention_dims::<D4>(&v, &v, args())
            .unwrap();
        assert_eq!(y.dims(), &[1, 6, 3, 8]);
    }

    #[test]
    fn grouped_query_attention_backward_sums_over_the_group() {
        let mut rng = seed();
        for (dims, hkv) in [
            ([1, 4, 5, 7, 16, 16], 2),
            ([2, 6, 9, 4, 8, 8], 3),
            ([1, 4, 3, 3, 4, 4], 1),
        ] {
            for causal in [false, true] {
                let mut c = Case::random_gqa(&mut rng, dims, hkv, 1.0);
                c.causal = causal;
                let w = weights(&mut rng, &c);
                backward_all_dtypes(&c, &w);
            }
        }
        let mut c = Case::random_gqa(&mut rng, [1, 4, 6, 9, 8, 8], 2, 1.0);
        let mut bits: Vec<bool> = (0..6 * 9).map(|_| rng.uniform() < 0.7).collect();
        for x in &mut bits[2 * 9..3 * 9] {
            *x = false;
        }
        c.mask = TestMask::Bool(bits, vec![6, 9]);
        let w = weights(&mut rng, &c);
        backward_all_dtypes(&c, &w);
    }

    #[test]
    fn backward_tiny_and_large_scores() {
        let mut rng = seed();
        let c = Case::random(&mut rng, [1, 1, 6, 9, 16, 8], 1e-3);
        let w = weights(&mut rng, &c);
        backward_all_dtypes(&c, &w);
        // Scores in the hundreds: the weights are near one-hot. The
        // f32 log-sum-exp carries a relative error of 1e-7 of its size
        // (f64 recomputes its own).
        let mut c = Case::random(&mut rng, [1, 1, 6, 9, 16, 8], 6.0);
        c.causal = true;
        let w = weights(&mut rng, &c);
        run_backward::<f64>(&c, &w, grad_tol::<f64>());
        run_backward::<f32>(&c, &w, 2e-3);
    }

    /// The f64 backward to f64's roundoff, with scores in the hundreds
    /// (where an f32 log-sum-exp is off by about 1e-5): each query's
    /// weights sum to one, so the rows of `dV` sum to those of `dO`.
    #[test]
    fn backward_f64_weights_sum_to_one() {
        let mut rng = seed();
        for causal in [false, true] {
            let (b, h, l, s, e, ev) = (2, 3, 37, 41, 16, 8);
            let mut t = |d: &[usize], by: f64| {
                let n: usize = d.iter().product();
                Tensor::<Cpu, f64, D4>::from_vec_dims(
                    (0..n).map(|_| by * rng.normal()).collect(),
                    d,
                )
                .unwrap()
            };
            let (q, k) = (t(&[b, h, l, e], 6.0), t(&[b, h, s, e], 6.0));
            let (v, g) = (t(&[b, h, s, ev], 1.0), t(&[b, h, l, ev], 1.0));
            let args = || AttentionArgs::new().is_causal(causal);
            let (y, lse) = q
                .scaled_dot_product_attention_with_lse_dims::<D4, (Dyn, Dyn, Dyn)>(&k, &v, args())
                .unwrap();
            let (_, _, dv) = q
                .scaled_dot_product_attention_backward_dims(&k, &v, &y, &g, &lse, args())
                .unwrap();
            let (dv, g) = (dv.to_vec().unwrap(), g.to_vec().unwrap());
            for bh in 0..b * h {
                for c in 0..ev {
                    let got: f64 = (0..s).map(|j| dv[(bh * s + j) * ev + c]).sum();
                    let want: f64 = (0..l).map(|i| g[(bh * l + i) * ev + c]).sum();
                    assert!(
                        (got - want).abs() <= 1e-12 * (1.0 + want.abs()),
                        "causal {causal}: column {c} of dV sums to {got}, dO's to {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn backward_masks_and_fully_masked_rows() {
        let mut rng = seed();
        let [b, h, l, s] = [1, 2, 6, 9];
        for dims in [vec![l, s], vec![1, h, l, s]] {
            let n: usize = dims.iter().product();
            let mut c = Case::random(&mut rng, [b, h, l, s, 8, 8], 1.0);
            let mut bits: Vec<bool> = (0..n).map(|_| rng.uniform() < 0.7).collect();
            // Row 2 sees no key: zero gradients, no NaN.
            for x in &mut bits[2 * s..3 * s] {
                *x = false;
            }
            c.mask = TestMask::Bool(bits, dims.clone());
            let w = weights(&mut rng, &c);
            backward_all_dtypes(&c, &w);
            let add: Vec<f64> = (0..n)
                .map(|j| match j % 7 {
                    0 => f64::NEG_INFINITY,
                    _ => rng.normal(),
                })
                .collect();
            let mut add = add;
            for x in &mut add[4 * s..5 * s] {
                *x = f64::NEG_INFINITY;
            }
            c.mask = TestMask::Add(add, dims);
            c.scale = Some(0.4);
            backward_all_dtypes(&c, &w);
        }
    }

    #[test]
    fn backward_empty_dims() {
        let mut rng = seed();
        for dims in [
            [1, 2, 0, 5, 8, 8],
            [1, 2, 5, 0, 8, 8],
            [0, 2, 5, 5, 8, 8],
            [1, 1, 5, 5, 0, 4],
            [1, 1, 5, 5, 4, 0],
        ] {
            for causal in [false, true] {
                let mut c = Case::random(&mut rng, dims, 1.0);
                c.causal = causal;
                let w = weights(&mut rng, &c);
                backward_all_dtypes(&c, &w);
            }
        }
    }

    #[test]
    fn backward_of_a_shared_key_sums_over_heads() {
        let mut rng = seed();
        let [b, h, l, s, e] = [2, 3, 5, 6, 8];
        let mut c = Case::random(&mut rng, [b, h, l, s, e, e], 1.0);
        // One key and value per batch, seen by every head.
        for bi in 0..b {
            for hi in 1..h {
                for j in 0..s * e {
                    c.k[(bi * h + hi) * s * e + j] = c.k[bi * h * s * e + j];
                    c.v[(bi * h + hi) * s * e + j] = c.v[bi * h * s * e + j];
                }
            }
        }
        c.causal = true;
        let w = weights(&mut rng, &c);
        let want = c.finite_differences(&w);
        let head0 = |x: &[f64]| -> Vec<f64> {
            (0..b)
                .flat_map(|bi| x[bi * h * s * e..(bi * h + 1) * s * e].to_vec())
                .collect()
        };
        let sum_heads = |x: &[f64]| -> Vec<f64> {
            (0..b * s * e)
                .map(|i| {
                    let (bi, r) = (i / (s * e), i % (s * e));
                    (0..h).map(|hi| x[(bi * h + hi) * s * e + r]).sum()
                })
                .collect()
        };
        let q = tensor::<f64>(&c.q, &c.q_dims());
        let k = tensor::<f64>(&head0(&c.k), &[b, 1, s, e]);
        let v = tensor::<f64>(&head0(&c.v), &[b, 1, s, e]);
        let args = || AttentionArgs::new().is_causal(true);
        let (y, lse) = q
            .scaled_dot_product_attention_with_lse_dims::<D4, (Dyn, Dyn, Dyn)>(&k, &v, args())
            .unwrap();
        let g = tensor::<f64>(&w, &c.out_dims());
        let (dq, dk, dv) = q
            .scaled_dot_product_attention_backward_dims(&k, &v, &y, &g, &lse, args())
            .unwrap();
        assert_eq!(dk.dims(), &[b, 1, s, e]);
        check("dq", &dq.to_vec().unwrap(), &want[0], 1e-6);
        check("dk", &dk.to_vec().unwrap(), &sum_heads(&want[1]), 1e-6);
        check("dv", &dv.to_vec().unwrap(), &sum_heads(&want[2]), 1e-6);
    }

    #[test]
    fn lse_is_the_rows_log_sum_exp() {
        let mut rng = seed();
        let mut c = Case::random(&mut rng, [1, 2, 40, 70, 16, 8], 1.0);
        c.causal = true;
        let q = tensor::<f64>(&c.q, &c.q_dims());
        let k = tensor::<f64>(&c.k, &c.k_dims());
        let v = tensor::<f64>(&c.v, &c.v_dims());
        let (y, lse) = q
            .scaled_dot_product_attention_with_lse_dims::<D4, (Dyn, Dyn, Dyn)>(
                &k,
                &v,
                AttentionArgs::new().is_causal(true),
            )
            .unwrap();
        check("out", &y.to_vec().unwrap(), &c.expected(), 1e-12);
        let lse = lse.to_vec().unwrap();
        let scale = 1.0 / 4.0;
        for bh in 0..2 {
            for i in 0..40 {
                let sc: Vec<f64> = (0..=i)
                    .map(|j| {
                        (0..16)
                            .map(|t| c.q[(bh * 40 + i) * 16 + t] * c.k[(bh * 70 + j) * 16 + t])
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let want = m + sc.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
                let got = f64::from(lse[bh * 40 + i]);
                assert!(
                    (got - want).abs() <= 1e-6 * (1.0 + want.abs()),
                    "{got} vs {want}"
                );
            }
        }
        // A row without keys: -inf.
        let m = Tensor::<Cpu, bool, (Dyn, Dyn)>::from_vec_dims(vec![false; 40 * 70], &[40, 70])
            .unwrap();
        let (_, lse) = q
            .scaled_dot_product_attention_with_lse_dims::<D4, (Dyn, Dyn, Dyn)>(
                &k,
                &v,
                AttentionArgs::new().attn_mask(&m),
            )
            .unwrap();
        assert!(lse
            .to_vec()
            .unwrap()
            .iter()
            .all(|&x| x == f32::NEG_INFINITY));
    }

    #[test]
    fn backward_bad_arguments_are_errors() {
        let q = Tensor::<Cpu, f32, D4>::zeros_dims(&[1, 2, 3, 8]).unwrap();
        let k = Tensor::<Cpu, f32, D4>::zeros_dims(&[1, 2, 5, 8]).unwrap();
        let (y, lse) = q
            .scaled_dot_product_attention_with_lse_dims::<D4, (Dyn, Dyn, Dyn)>(
                &k,
                &k,
                AttentionArgs::new(),
            )
            .unwrap();
        let bad = Tensor::<Cpu, f32, D4>::zeros_dims(&[1, 2, 4, 8]).unwrap();
        let e = q
            .scaled_dot_product_attention_backward_dims(
                &k,
                &k,
                &y,
                &bad,
                &lse,
                AttentionArgs::new(),
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("`grad_out`"), "{e}");
        let bad_lse = Tensor::<Cpu, f32, (Dyn, Dyn)>::zeros_dims(&[2, 3]).unwrap();
        let e = q
            .scaled_dot_product_attention_backward_dims(
                &k,
                &k,
                &y,
                &y,
                &bad_lse,
                AttentionArgs::new(),
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("`lse`"), "{e}");
        let e = q
            .scaled_dot_product_attention_backward_dims(&k, &q, &y, &y, &lse, AttentionArgs::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("`value`"), "{e}");
    }

    #[test]
    fn bad_arguments_are_errors() {
        let q = Tensor::<Cpu, f32, D4>::zeros_dims(&[1, 2, 3, 8]).unwrap();
        let k = Tensor::<Cpu, f32, D4>::zeros_dims(&[1, 2, 5, 4]).unwrap();
        let v = Tensor::<Cpu, f32, D4>::zeros_dims(&[1, 2, 5, 4]).unwrap();
        let e = q
            .scaled_dot_product_attention_dims::<D4>(&k, &v, AttentionArgs::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`key`") && e.contains("E = 8") && e.contains("E = 4"),
            "{e}"
        );
        let m = Tensor::<Cpu, bool, D4>::zeros_dims(&[1, 1, 3, 3]).unwrap();
        let k = Tensor::<Cpu, f32, D4>::zeros_dims(&[1, 2, 5, 8]).unwrap();
        let e = q
            .scaled_dot_product_attention_dims::<D4>(&k, &v, AttentionArgs::new().attn_mask(&m))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`attn_mask`") && e.contains("[1, 2, 3, 5]"),
            "{e}"
        );
        let m = Tensor::<Cpu, bool, D4>::zeros_dims(&[1, 1, 3, 5]).unwrap();
        let e = q
            .scaled_dot_product_attention_dims::<D4>(
                &k,
                &v,
                AttentionArgs::new().attn_mask(&m).is_causal(true),
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("not both"), "{e}");
        // A result type that does not fit is an `Err`, not a panic.
        let bad =
            q.scaled_dot_product_attention_dims::<(Dyn, Dyn, Dyn)>(&k, &v, AttentionArgs::new());
        assert!(bad.is_err());
    }
}
