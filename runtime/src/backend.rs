//! The primitives a backend implements. The ops layer (`ops/`) checks
//! shapes with the shared rules, prepares layouts (broadcast, permute) and
//! calls one of these; `cpu/` and `cuda/` implement them.
//!
//! Every primitive returns a new contiguous buffer with the dims of the
//! given layout(s) unless it says otherwise.

use crate::dtype::{DType, FloatDType, IndexDType, NumDType};
use crate::error::{Error, Result};
use crate::layout::Layout;
use std::borrow::Cow;
use tensorfn_core::ops::conv::ConvArgs;
use tensorfn_core::ops::pool::Pool2d;
use tensorfn_core::ops::xent::CrossEntropyArgs;
use tensorfn_kernels::{BinaryOp, FusedKernel, NormOp, ReduceOp, RowOp, UnaryOp};

/// One input of a [`RowBlocks`] plan: its buffer, the element where its
/// data starts and how many elements it supplies to each output row.
pub(crate) struct RowBlock<'a, B> {
    pub(crate) buf: &'a B,
    pub(crate) start: usize,
    pub(crate) inner: usize,
}

/// `cat` of contiguous inputs as a copy of row blocks: each of the `outer`
/// output rows of `row` elements is the concatenation of one block of
/// `inner` elements from every input, in order (block `r` of an input is
/// its elements `start + r * inner ..`). `row` is the sum of the blocks.
pub(crate) struct RowBlocks<'a, B> {
    pub(crate) outer: usize,
    pub(crate) row: usize,
    pub(crate) parts: Vec<RowBlock<'a, B>>,
}

impl<B> RowBlocks<'_, B> {
    /// The output's element count, after checking that every input buffer
    /// (of `len(buf)` elements) holds all of its blocks.
    pub(crate) fn checked_len(&self, len: impl Fn(&B) -> usize) -> Result<usize> {
        let n = self.outer.checked_mul(self.row).ok_or_else(|| {
            Error::shape(
                "cat",
                "a result below usize::MAX elements",
                format!("{} rows of {} elements", self.outer, self.row),
            )
        })?;
        for (i, p) in self.parts.iter().enumerate() {
            let end = self
                .outer
                .checked_mul(p.inner)
                .and_then(|v| v.checked_add(p.start));
            if end.is_none_or(|e| e > len(p.buf)) {
                return Err(Error::shape(
                    "cat",
                    format!(
                        "input {i} to hold {} rows of {} elements",
                        self.outer, p.inner
                    ),
                    format!(
                        "a buffer of {} elements starting at {}",
                        len(p.buf),
                        p.start
                    ),
                ));
            }
        }
        Ok(n)
    }
}

/// The dim a [`Backend::gather`] picks along in the source: its stride
/// and size (the valid indices are `0..size`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Selected {
    pub(crate) stride: usize,
    pub(crate) size: usize,
}

/// A gather's buffer, or one of the indices that were out of range.
pub(crate) type Gathered<B> = std::result::Result<B, i64>;

/// Checks the views of [`Backend::cross_entropy`] and its backward
/// (each a `(buffer length, layout)`): `x` is `[N, C]`, `t` is `[N]`, and
/// `grad` (with whether it is per row) is `[N]` or a scalar; each stays
/// inside its buffer.
pub(crate) fn xent_layouts(
    op: &str,
    (xn, lx): (usize, &Layout),
    (tn, lt): (usize, &Layout),
    grad: Option<(usize, &Layout, bool)>,
) -> Result<()> {
    let fits = lx.rank() == 2
        && lt.dims() == &lx.dims()[..1]
        && grad.is_none_or(|(_, lg, per_row)| {
            lg.dims() == if per_row { &lx.dims()[..1] } else { &[][..] }
        });
    if !fits {
        return Err(Error::shape(
            op,
            "logits [N, C], targets [N] and a grad of [N] (reduction none) or a scalar",
            format!(
                "{:?}, {:?}{}",
                lx.dims(),
                lt.dims(),
                grad.map_or(String::new(), |(_, lg, _)| format!(", {:?}", lg.dims()))
            ),
        ));
    }
    let views = [Some((xn, lx)), Some((tn, lt)), grad.map(|(n, l, _)| (n, l))];
    for (n, l) in views.into_iter().flatten() {
        if l.numel() > 0 && l.storage_extent() > n {
            return Err(Error::Index(format!(
                "{op}: internal view {:?} (strides {:?}, offset {}) reaches past a buffer of {n} elements",
                l.dims(),
                l.strides(),
                l.offset()
            )));
        }
    }
    Ok(())
}

/// Checks `cumsum`'s dtypes (`U` is `T` for a float, `i64` for an
/// integer) and `dim` against `l`.
pub(crate) fn cumsum_fits<T: NumDType, U: NumDType>(l: &Layout, dim: usize) -> Result<()> {
    let want = if T::KIND.is_float() {
        T::KIND
    } else {
        tensorfn_core::DTypeKind::I64
    };
    if U::KIND != want || dim >= l.rank().max(1) {
        return Err(Error::shape(
            "cumsum",
            format!("a dim below the rank and a {want} result"),
            format!("dim {dim} of {:?} into {}", l.dims(), U::KIND),
        ));
    }
    Ok(())
}

/// The mask of [`Backend::attention`]: `bool` (true = the key takes part,
/// as in PyTorch) or in the tensors' dtype (added to the scores).
pub(crate) enum AttnMask<'a, B, F> {
    /// A `bool` mask.
    Bool(&'a B),
    /// An additive mask.
    Add(&'a F),
}

/// The optional mask argument of [`Backend::attention`], with its
/// `[batch, L, S]` layout.
pub(crate) type AttnMaskArg<'a, B, F> = Option<(AttnMask<'a, B, F>, &'a Layout)>;

/// A backend: the CPU or one CUDA ordinal. It is the only code that
/// knows which device it runs on; tensors, conversions and streams go
/// through these methods.
pub(crate) trait Backend {
    /// The buffer type holding `T` elements.
    type Buf<T: DType>;

    /// A contiguous buffer of `n` copies of `value`.
    fn full<T: DType>(&self, n: usize, value: T) -> Result<Self::Buf<T>>;

    /// A new tensor's buffer of `n` copies of `value`: like [`full`](Self::full),
    /// but a size the host cannot allocate is an `Err`, not an abort.
    fn filled<T: DType>(&self, n: usize, value: T) -> Result<Self::Buf<T>>;

    /// Row-major host values on this device: moved when the device is the
    /// host (an owned `data` is not copied), else copied there.
    fn upload<T: DType>(&self, data: Cow<'_, [T]>) -> Result<Self::Buf<T>>;

    /// The elements `l` selects, row-major, in a new host vector.
    fn download<T: DType>(&self, x: &Self::Buf<T>, l: &Layout) -> Result<Vec<T>>;

    /// Writes the elements `l` selects, row-major, into the host slice
    /// `dst` (exactly as many). `pinned` says `dst` is page-locked, which
    /// a device's DMA engine writes directly. Returns once `dst` holds them.
    fn download_into<T: DType>(
        &self,
        x: &Self::Buf<T>,
        l: &Layout,
        dst: &mut [T],
        pinned: bool,
    ) -> Result<()>;

    /// Waits until the device has finished all work queued so far.
    fn synchronize(&self) -> Result<()>;

    /// Bytes the device can give to new buffers, or `None` where memory is
    /// not what bounds them (the host, whose chunks are sized for caches).
    fn free_memory(&self) -> Result<Option<usize>>;

    /// A fused elementwise kernel `tensor_fn!` generated: `args` holds the
    /// inputs (buffers of this backend, with layouts broadcast to
    /// `out_dims`) and the group's Rust closure; the CPU runs the closure,
    /// a GPU the kernel's PTX. Generic over the closure so that the CPU
    /// loop inlines it.
    fn fused_launch<O: DType, A: FusedArgs<Self, O>>(
        &self,
        kernel: &'static FusedKernel,
        args: A,
        out_dims: &[usize],
    ) -> Result<Self::Buf<O>>
    where
        Self: Sized,
    {
        args.launch(self, kernel, out_dims)
    }

    /// A buffer of `n` elements whose contents are unspecified (zeros on
    /// the CPU), for outputs every element of which is written next.
    fn alloc<T: DType>(&self, n: usize) -> Result<Self::Buf<T>>;

    /// The concatenation of contiguous row blocks `plan` describes (the
    /// fast path of `cat`): a new buffer of `plan.outer` rows of
    /// `plan.row` elements.
    fn cat_rows<T: DType>(&self, plan: &RowBlocks<'_, Self::Buf<T>>) -> Result<Self::Buf<T>>;

    /// A contiguous copy of the elements `l` selects.
    fn contiguous<T: DType>(&self, x: &Self::Buf<T>, l: &Layout) -> Result<Self::Buf<T>>;

    /// Writes the elements `ls` selects from `src` into the positions `ld`
    /// selects in `dst` (same dims; `ld` may be a strided view of `dst`).
    fn copy_into<T: DType>(
        &self,
        src: &Self::Buf<T>,
        ls: &Layout,
        dst: &mut Self::Buf<T>,
        ld: &Layout,
    ) -> Result<()>;

    /// `op(x)` elementwise. `op.needs_float()` ops are only called with floats.
    fn unary<T: NumDType>(&self, op: UnaryOp, x: &Self::Buf<T>, l: &Layout)
        -> Result<Self::Buf<T>>;

    /// `op(a, b)` elementwise; `la` and `lb` have equal dims (broadcast
    /// already applied as stride-0 dims).
    fn binary<T: NumDType>(
        &self,
        op: BinaryOp,
        a: &Self::Buf<T>,
        la: &Layout,
        b: &Self::Buf<T>,
        lb: &Layout,
    ) -> Result<Self::Buf<T>>;

    /// `op(x, s)`, or `op(s, x)` when `scalar_first`.
    fn binary_scalar<T: NumDType>(
        &self,
        op: BinaryOp,
        x: &Self::Buf<T>,
        l: &Layout,
        s: T,
        scalar_first: bool,
    ) -> Result<Self::Buf<T>>;

    /// Converts every element to `U` (float to int truncates toward zero
    /// and saturates; to `bool` is `!= 0`).
    fn cast<T: DType, U: DType>(&self, x: &Self::Buf<T>, l: &Layout) -> Result<Self::Buf<U>>;

    /// Reduces `dim` away (`Sum`, `Mean`, `Max`, `Min`; `Mean` only for floats).
    fn reduce<T: NumDType>(
        &self,
        op: ReduceOp,
        x: &Self::Buf<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<Self::Buf<T>>;

    /// Position of the first max/min along `dim` (`ArgMax`, `ArgMin`).
    fn arg_reduce<T: NumDType>(
        &self,
        op: ReduceOp,
        x: &Self::Buf<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<Self::Buf<i64>>;

    /// The gather behind `index_select`, `gather` and `embedding`: a
    /// contiguous buffer of `lx`'s dims (`li` has the same dims) whose
    /// element at position `p` is `x[lx(p) + k * sel.stride]`, where
    /// `k = idx[li(p)]` (`lx(p)` is the storage index `lx` gives `p`). An
    /// index outside `0..sel.size` is never read through: the result is
    /// `Ok(Err(k))` with one such `k`.
    fn gather<T: DType, I: IndexDType>(
        &self,
        x: &Self::Buf<T>,
        lx: &Layout,
        sel: Selected,
        idx: &Self::Buf<I>,
        li: &Layout,
    ) -> Result<Gathered<Self::Buf<T>>>;

    /// The scatter-add behind `index_add`, `scatter_add` and the
    /// gradients of `embedding`, `index_select` and `gather`: for every
    /// position `p` of `lo`'s dims (`ls` and `li` have the same dims),
    /// `out[lo(p) + k * sel.stride] += alpha * src[ls(p)]` with
    /// `k = idx[li(p)]`. Every index is checked before `out` is written;
    /// one outside `0..sel.size` gives `Ok(Err(k))` and leaves `out` as
    /// it was. f16 and bf16 accumulate in f32 and round once; repeated
    /// indices are summed in an unspecified order on the GPU (atomic adds).
    /// `fresh` says `out` is a new buffer to be taken as zeros: its
    /// contents are never read (they may be uninitialised), so the GPU
    /// zero-fills its f32 accumulator instead of widening `out`, and `out`
    /// is only written (the gradients of `embedding`, `index_select` and
    /// `gather` start from zeros). After an index out of range a fresh
    /// `out` holds nothing defined.
    #[allow(clippy::too_many_arguments)]
    fn scatter_add<T: FloatDType, I: IndexDType>(
        &self,
        out: &mut Self::Buf<T>,
        lo: &Layout,
        sel: Selected,
        src: (&Self::Buf<T>, &Layout),
        idx: (&Self::Buf<I>, &Layout),
        alpha: f64,
        fresh: bool,
    ) -> Result<Gathered<()>>;

    /// `cross_entropy` of the logits `x` (`[N, C]`) against the class
    /// indices `t` (`[N]`), fused: per row the max, the log-sum-exp and
    /// the target's logit (and the row's sum for label smoothing),
    /// accumulated in at least f32, then the reduction. A contiguous `[N]`
    /// buffer (`Reduction::None`) or one value. A target outside `0..C`
    /// that is not `ignore_index` is never read through: `Ok(Err(t))`.
    fn cross_entropy<T: FloatDType, I: IndexDType>(
        &self,
        x: (&Self::Buf<T>, &Layout),
        t: (&Self::Buf<I>, &Layout),
        args: CrossEntropyArgs,
    ) -> Result<Gathered<Self::Buf<T>>>;

    /// The gradient of [`Backend::cross_entropy`] with respect to `x`, in
    /// one pass over the rows: `(softmax(x) - (1 - s) * onehot(t) - s / C)
    /// * g` per row, `g` the row's `grad` (`[N]` for `Reduction::None`,
    /// else one value, divided by the number of rows not ignored for
    /// `Mean`); 0 on ignored rows. A contiguous `[N, C]` buffer, or
    /// `Ok(Err(t))` as the forward.
    fn cross_entropy_backward<T: FloatDType, I: IndexDType>(
        &self,
        x: (&Self::Buf<T>, &Layout),
        t: (&Self::Buf<I>, &Layout),
        grad: (&Self::Buf<T>, &Layout),
        args: CrossEntropyArgs,
    ) -> Result<Gathered<Self::Buf<T>>>;

    /// [`Backend::cross_entropy`] and [`Backend::cross_entropy_backward`]
    /// for a gradient of 1 on the result, from one pass over the rows:
    /// returns the loss (as the forward) and writes the gradient over
    /// `x`, whose rows are contiguous (the caller owns the buffer).
    /// `Ok(Err(t))` as the forward.
    fn cross_entropy_fused<T: FloatDType, I: IndexDType>(
        &self,
        x: (&mut Self::Buf<T>, &Layout),
        t: (&Self::Buf<I>, &Layout),
        args: CrossEntropyArgs,
    ) -> Result<Gathered<Self::Buf<T>>>;

    /// The `k` largest (`largest`) or smallest elements of each row along
    /// the last dim of `l` (NaN larger than every number, ties by lower
    /// index), sorted (largest or smallest first), and their positions:
    /// contiguous buffers of `l`'s dims with the last one `k` (`k` at most
    /// that dim).
    fn topk<T: NumDType>(
        &self,
        x: &Self::Buf<T>,
        l: &Layout,
        k: usize,
        largest: bool,
    ) -> Result<(Self::Buf<T>, Self::Buf<i64>)>;

    /// The cumulative sum along `dim`: a contiguous buffer of `l`'s dims
    /// of `U`, which is `T` for a float (accumulated in f32, f64 for f64)
    /// and `i64` for an integer dtype (as PyTorch's).
    fn cumsum<T: NumDType, U: NumDType>(
        &self,
        x: &Self::Buf<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<Self::Buf<U>>;

    /// Seeded `dropout`: element `i` of `l`'s row-major order times
    /// `1 / (1 - p)` when `tensorfn_core::ops::dropout::keep(seed, i, p)`,
    /// else times 0 (products in f64, rounded once): a contiguous buffer
    /// of `l`'s dims, the same bits on every backend.
    fn dropout<T: FloatDType>(
        &self,
        x: &Self::Buf<T>,
        l: &Layout,
        p: f64,
        seed: u64,
    ) -> Result<Self::Buf<T>>;

    /// Seeded `multinomial`: `num_samples` categories drawn from each row
    /// of weights along the last dim of `l` (`num_samples` at most that
    /// dim without `replacement`), by `cpu::multinomial`'s procedure so
    /// every backend draws the same indices: a contiguous `i64` buffer of
    /// `l`'s dims with the last one `num_samples`, or the worst row's
    /// fault as `multinomial_fault`'s `Err`.
    fn multinomial<T: FloatDType>(
        &self,
        x: &Self::Buf<T>,
        l: &Layout,
        num_samples: usize,
        replacement: bool,
        seed: u64,
    ) -> Result<Self::Buf<i64>>;

    /// Pooling `pool` over the last two dims of `l` (rank 3 or 4, any
    /// strides) into `out` (`[OH, OW]`, from the shape rule), windows
    /// summed in f64: a buffer of `l`'s leading dims and `out`, laid out
    /// as [`Layout::result_like`] says (channels-last for a channels-last
    /// input, else contiguous).
    fn pool2d<T: FloatDType>(
        &self,
        x: &Self::Buf<T>,
        l: &Layout,
        pool: &Pool2d,
        out: [usize; 2],
    ) -> Result<Self::Buf<T>>;

    /// The gradient of [`Backend::pool2d`] with respect to `x`, for `grad`
    /// of the result's dims: a buffer of `x`'s dims laid out as `x`'s
    /// [`Layout::result_like`] says (channels-last for a channels-last
    /// `x`, else contiguous), the windows (and max's argmax) recomputed
    /// from `x`.
    fn pool2d_backward<T: FloatDType>(
        &self,
        x: (&Self::Buf<T>, &Layout),
        grad: (&Self::Buf<T>, &Layout),
        pool: &Pool2d,
    ) -> Result<Self::Buf<T>>;

    /// Row op `op` (`softmax`, ...) along `dim`, computed in at least f32:
    /// a contiguous buffer of `l`'s dims, or of `l`'s dims without `dim`
    /// for an op that removes it ([`RowOp::shape`]).
    fn row_op<T: FloatDType>(
        &self,
        op: RowOp,
        x: &Self::Buf<T>,
        l: &Layout,
        dim: usize,
    ) -> Result<Self::Buf<T>>;

    /// Normalisation `op` (`layer_norm`, `rms_norm`) over the last dim of
    /// `x`, with `weight` (and `bias` for `layer_norm`) of that dim's
    /// length, statistics accumulated in at least f32: a contiguous buffer
    /// of `x`'s dims.
    fn norm<T: FloatDType>(
        &self,
        op: NormOp,
        x: (&Self::Buf<T>, &Layout),
        weight: (&Self::Buf<T>, &Layout),
        bias: Option<(&Self::Buf<T>, &Layout)>,
        eps: f64,
    ) -> Result<Self::Buf<T>>;

    /// A row kernel `tensor_fn!` generated, over `rows` rows of `cols`
    /// elements: each input a contiguous buffer whose row `r` starts at
    /// element `r * step` (`step` is `cols`, or 0 for one row every row
    /// reads), `scalars` its scalar arguments; a contiguous buffer of
    /// `rows * cols` elements (`rows` for a per-row result). The CPU runs
    /// `cpu` per row, CUDA the kernel's PTX.
    fn row_kernel<T: FloatDType>(
        &self,
        kernel: &'static tensorfn_kernels::rowkernel::RowKernelDef,
        inputs: &[(&Self::Buf<T>, usize)],
        scalars: &[f64],
        shape: (usize, usize),
        cpu: &crate::ops::rowkernel::RowCpu<'_, T>,
    ) -> Result<Self::Buf<T>>;

    /// The gradients of normalisation `op` over the last dim of `x` with
    /// `weight` of that dim's length, for `grad_output` of `x`'s dims:
    /// `(dx, dweight, dbias)`, `dx` a contiguous buffer of `x`'s dims,
    /// `dweight` and `dbias` (`layer_norm` only, else `None`) of the last
    /// dim's length. The row statistics are recomputed from `x` in at
    /// least f32, as the forward takes them; the column sums behind
    /// `dweight`/`dbias` are deterministic (no atomics).
    #[allow(clippy::type_complexity)]
    fn norm_backward<T: FloatDType>(
        &self,
        op: NormOp,
        x: (&Self::Buf<T>, &Layout),
        weight: (&Self::Buf<T>, &Layout),
        grad_output: (&Self::Buf<T>, &Layout),
        eps: f64,
    ) -> Result<(Self::Buf<T>, Self::Buf<T>, Option<Self::Buf<T>>)>;

    /// `batch_norm` of `x` (`[N, C, *]`, any strides, so NCHW and
    /// channels-last memory alike) per channel, dim 1, with optional
    /// `weight`/`bias` of `[C]` and the running `(mean, var)` of `[C]`.
    /// In training the channel's batch mean and biased variance normalise
    /// and, with running statistics, their updated values come back
    /// (`(1 - momentum) * running + momentum * batch`, the variance
    /// unbiased); in inference the running statistics normalise (the ops
    /// layer checks that they are given). Statistics in at least f32, no
    /// atomics: the same bits every run. Returns the output (`x`'s dims,
    /// laid out as `x`'s [`Layout::result_like`] says) and the updated
    /// `(mean, var)`, `None` outside training,
    /// without running statistics, or for an empty batch.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn batch_norm<T: FloatDType>(
        &self,
        x: (&Self::Buf<T>, &Layout),
        weight: Option<(&Self::Buf<T>, &Layout)>,
        bias: Option<(&Self::Buf<T>, &Layout)>,
        running: Option<((&Self::Buf<T>, &Layout), (&Self::Buf<T>, &Layout))>,
        training: bool,
        momentum: f64,
        eps: f64,
    ) -> Result<(Self::Buf<T>, Option<(Self::Buf<T>, Self::Buf<T>)>)>;

    /// The gradients of [`Backend::batch_norm`] for `grad_output` of `x`'s
    /// dims: `(dx, dweight, dbias)`, `dx` of `x`'s dims laid out as `x`'s
    /// [`Layout::result_like`] says,
    /// `dweight`/`dbias` of `[C]` (a missing weight counts as 1). In
    /// training the batch statistics are recomputed from `x`; in inference
    /// the running ones (given) are constants.
    #[allow(clippy::type_complexity)]
    fn batch_norm_backward<T: FloatDType>(
        &self,
        x: (&Self::Buf<T>, &Layout),
        weight: Option<(&Self::Buf<T>, &Layout)>,
        running: Option<((&Self::Buf<T>, &Layout), (&Self::Buf<T>, &Layout))>,
        grad_output: (&Self::Buf<T>, &Layout),
        training: bool,
        eps: f64,
    ) -> Result<(Self::Buf<T>, Self::Buf<T>, Self::Buf<T>)>;

    /// `conv2d` of `x` (`[N, C_in, H, W]`, any strides) with `w` (`[C_out,
    /// C_in / groups, kH, kW]`) plus the optional `bias` (`[C_out]`), the
    /// shapes already checked by `rules::conv`: an `[N, C_out, OH, OW]`
    /// buffer laid out as `x`'s [`Layout::result_like`] says
    /// (channels-last for a channels-last `x`, else contiguous), sums
    /// accumulated in at least f32. By default
    /// through the host (the CPU's im2col and `gemm`), for a backend
    /// without a kernel of its own.
    fn conv2d<T: FloatDType>(
        &self,
        x: (&Self::Buf<T>, &Layout),
        w: (&Self::Buf<T>, &Layout),
        bias: Option<(&Self::Buf<T>, &Layout)>,
        args: &ConvArgs,
    ) -> Result<Self::Buf<T>> {
        conv2d_on_host(self, x, w, bias, args)
    }

    /// The gradient of [`Backend::conv2d`] with respect to `x` (`input:
    /// true`, a buffer of `x`'s dims) or `w` (of `w`'s dims), laid out as
    /// that operand's [`Layout::result_like`] says (channels-last for a
    /// channels-last operand, else contiguous), given `grad` of the
    /// output's dims (any strides). By default through the host, as the
    /// forward.
    fn conv2d_backward<T: FloatDType>(
        &self,
        x: (&Self::Buf<T>, &Layout),
        w: (&Self::Buf<T>, &Layout),
        grad: (&Self::Buf<T>, &Layout),
        args: &ConvArgs,
        input: bool,
    ) -> Result<Self::Buf<T>> {
        conv2d_backward_on_host(self, x, w, grad, args, input)
    }

    /// Scaled dot-product attention: `q` is `[batch, L, E]`, `k` is
    /// `[batch, S, E]`, `v` is `[batch, S, Ev]` and the mask `[batch, L, S]`
    /// (any strides, 0 for broadcast dims; the last dim of `q`, `k`, `v`
    /// has stride 1), each also as `[outer, inner, ..]` where its batch
    /// takes two strides (the same split in all: `batch = outer * inner`).
    /// Grouped-query attention: `k` and `v` as `[outer, inner / g, S, ..]`
    /// beside a `[outer, inner, L, E]` query, query batch `(o, h)` reading
    /// key and value batch `(o, h / g)`.
    /// Each output row is the softmax-weighted sum of the
    /// values of the keys whose score `scale * q.k + mask` is not `-inf`
    /// (`causal`: keys `j <= i` only), 0 where there is none; computed in
    /// at least f32. Returns a buffer of the output's elements placed as
    /// `out` says: `[batch, L, Ev]` or `[outer, inner, L, Ev]` with dense
    /// columns, a permutation of a contiguous layout of those dims.
    #[allow(clippy::too_many_arguments)]
    fn attention<T: FloatDType>(
        &self,
        q: (&Self::Buf<T>, &Layout),
        k: (&Self::Buf<T>, &Layout),
        v: (&Self::Buf<T>, &Layout),
        mask: AttnMaskArg<'_, Self::Buf<bool>, Self::Buf<T>>,
        causal: bool,
        scale: f64,
        out: &Layout,
    ) -> Result<Self::Buf<T>>;

    /// [`Backend::attention`] that also returns the log-sum-exp of each
    /// row's scores (`scale * q.k + mask`, natural log), a contiguous
    /// `[batch, L]` f32 buffer (`-inf` for a row without keys): what
    /// [`Backend::attention_backward`] needs to recompute the weights.
    #[allow(clippy::too_many_arguments)]
    fn attention_lse<T: FloatDType>(
        &self,
        q: (&Self::Buf<T>, &Layout),
        k: (&Self::Buf<T>, &Layout),
        v: (&Self::Buf<T>, &Layout),
        mask: AttnMaskArg<'_, Self::Buf<bool>, Self::Buf<T>>,
        causal: bool,
        scale: f64,
        out: &Layout,
    ) -> Result<(Self::Buf<T>, Self::Buf<f32>)>;

    /// The gradients of [`Backend::attention`] with respect to `q`, `k`
    /// and `v`, given its output `out` and the output's gradient
    /// `grad_out` (both `[batch, L, Ev]` or `[outer, inner, L, Ev]`, any
    /// strides with dense columns) and the `[batch, L]` log-sum-exps of
    /// [`Backend::attention_lse`] (recomputed when `None`), the other
    /// arguments as the forward took them: contiguous `[batch, L, E]`,
    /// `[batch, S, E]` and `[batch, S, Ev]` buffers, one batch per batch
    /// of the output (an operand broadcast over batches is summed back by
    /// the caller). Computed in at least f32; rows without keys have zero
    /// gradients.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn attention_backward<T: FloatDType>(
        &self,
        q: (&Self::Buf<T>, &Layout),
        k: (&Self::Buf<T>, &Layout),
        v: (&Self::Buf<T>, &Layout),
        out: (&Self::Buf<T>, &Layout),
        grad_out: (&Self::Buf<T>, &Layout),
        lse: Option<&Self::Buf<f32>>,
        mask: AttnMaskArg<'_, Self::Buf<bool>, Self::Buf<T>>,
        causal: bool,
        scale: f64,
    ) -> Result<(Self::Buf<T>, Self::Buf<T>, Self::Buf<T>)>;

    /// `rope` of `x` (`[.., T, D]`, `D` even) with `cos` and `sin`
    /// (`[T, D]`), computed in at least f32: a contiguous buffer of `x`'s
    /// dims.
    fn rope<T: FloatDType>(
        &self,
        x: (&Self::Buf<T>, &Layout),
        cos: (&Self::Buf<T>, &Layout),
        sin: (&Self::Buf<T>, &Layout),
    ) -> Result<Self::Buf<T>>;

    /// Batched `alpha * a @ b + beta * bias`: `la` is `[batch, m, k]`, `lb`
    /// is `[batch, k, n]` (batch strides may be 0), `bias` is broadcast to
    /// `[batch, m, n]`. Returns a contiguous `[batch, m, n]` buffer.
    #[allow(clippy::too_many_arguments)]
    fn matmul<T: FloatDType>(
        &self,
        a: &Self::Buf<T>,
        la: &Layout,
        b: &Self::Buf<T>,
        lb: &Layout,
        bias: Option<(&Self::Buf<T>, &Layout)>,
        alpha: T,
        beta: T,
    ) -> Result<Self::Buf<T>>;

    /// `act(`[`matmul`](Self::matmul)`)` for an activation `act` (`Relu`,
    /// `Gelu`). By default two passes; a backend with a fused epilogue
    /// applies it in the product.
    #[allow(clippy::too_many_arguments)]
    fn matmul_act<T: FloatDType>(
        &self,
        a: &Self::Buf<T>,
        la: &Layout,
        b: &Self::Buf<T>,
        lb: &Layout,
        bias: Option<(&Self::Buf<T>, &Layout)>,
        (alpha, beta): (T, T),
        act: UnaryOp,
    ) -> Result<Self::Buf<T>> {
        let out = self.matmul(a, la, b, lb, bias, alpha, beta)?;
        let dims = [la.dims()[0], la.dims()[1], lb.dims()[2]];
        self.unary(act, &out, &Layout::contiguous(&dims))
    }
}

/// Copies from the device of one backend to that of `B`. Each pair of
/// backends has its own implementation, in the backend that drives the
/// copy (a GPU's for every copy that touches it).
pub(crate) trait CopyTo<B: Backend>: Backend {
    /// A contiguous copy on `dst`'s device of the elements `l` selects in
    /// `x`; `pinned` says `x` is page-locked host memory, which a device
    /// reads directly.
    fn copy_to<T: DType>(
        &self,
        x: &Self::Buf<T>,
        l: &Layout,
        pinned: bool,
        dst: &B,
    ) -> Result<B::Buf<T>>;
}

/// The arguments of [`Backend::fused_launch`] on backend `B`: a tuple of
/// the inputs' buffers with their broadcast layouts, and the group's
/// closure. Each backend implements it for every input count (the inputs
/// may differ in dtype), so the closure is called with its own types.
pub(crate) trait FusedArgs<B: Backend + ?Sized, O: DType> {
    /// Runs the group into a new contiguous buffer of `out_dims`.
    fn launch(self, be: &B, kernel: &'static FusedKernel, out_dims: &[usize]) -> Result<B::Buf<O>>;
}

/// [`Backend::conv2d`] through the host: the operands downloaded, the
/// CPU's im2col and `gemm`, the result uploaded. The default for a backend
/// without a kernel of its own.
pub(crate) fn conv2d_on_host<B: Backend + ?Sized, T: FloatDType>(
    be: &B,
    x: (&B::Buf<T>, &Layout),
    w: (&B::Buf<T>, &Layout),
    bias: Option<(&B::Buf<T>, &Layout)>,
    args: &ConvArgs,
) -> Result<B::Buf<T>> {
    let (hx, hw) = (be.download(x.0, x.1)?, be.download(w.0, w.1)?);
    let hb = bias.map(|(b, lb)| be.download(b, lb)).transpose()?;
    let (lx, lw) = (
        Layout::contiguous(x.1.dims()),
        Layout::contiguous(w.1.dims()),
    );
    let lb = bias.map(|(_, lb)| Layout::contiguous(lb.dims()));
    let out =
        crate::cpu::conv::conv2d((&hx, &lx), (&hw, &lw), hb.as_deref().zip(lb.as_ref()), args)?;
    let y = x.1.result_like(&conv2d_dims(x.1, w.1, args));
    in_layout(be, be.upload(Cow::Owned(out))?, &y)
}

/// The `[N, C_out, OH, OW]` dims of [`Backend::conv2d`]'s result (the
/// shapes already checked).
pub(crate) fn conv2d_dims(x: &Layout, w: &Layout, args: &ConvArgs) -> [usize; 4] {
    let (xd, wd) = (x.dims(), w.dims());
    let out = |i: usize| {
        (xd[2 + i] + 2 * args.padding[i] - args.dilation[i] * (wd[2 + i] - 1) - 1) / args.stride[i]
            + 1
    };
    [xd[0], wd[0], out(0), out(1)]
}

/// `buf`, a contiguous result of `y`'s dims, in `y`'s order (`y` a
/// permutation of a contiguous layout, e.g. channels-last): itself where
/// `y` is contiguous, else a reordered copy. For results a kernel writes
/// row-major only.
pub(crate) fn in_layout<B: Backend + ?Sized, T: DType>(
    be: &B,
    buf: B::Buf<T>,
    y: &Layout,
) -> Result<B::Buf<T>> {
    if y.is_contiguous() {
        return Ok(buf);
    }
    let mut out = be.alloc::<T>(y.numel())?;
    be.copy_into(&buf, &Layout::contiguous(y.dims()), &mut out, y)?;
    Ok(out)
}

/// [`Backend::conv2d_backward`] through the host, as [`conv2d_on_host`].
pub(crate) fn conv2d_backward_on_host<B: Backend + ?Sized, T: FloatDType>(
    be: &B,
    x: (&B::Buf<T>, &Layout),
    w: (&B::Buf<T>, &Layout),
    grad: (&B::Buf<T>, &Layout),
    args: &ConvArgs,
    input: bool,
) -> Result<B::Buf<T>> {
    let hx = be.download(x.0, x.1)?;
    let hw = be.download(w.0, w.1)?;
    let hg = be.download(grad.0, grad.1)?;
    let c = |l: &Layout| Layout::contiguous(l.dims());
    let out = crate::cpu::conv::conv2d_backward(
        (&hx, &c(x.1)),
        (&hw, &c(w.1)),
        (&hg, &c(grad.1)),
        args,
        input,
    )?;
    let of = if input { x.1 } else { w.1 };
    in_layout(be, be.upload(Cow::Owned(out))?, &of.result_like(of.dims()))
}

/// What makes a row of `multinomial`'s weights unusable, worst last (the
/// backends report the worst over all rows; the GPU kernel writes these
/// codes, 0 meaning none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum MultinomialFault {
    /// Fewer positive weights than draws without replacement.
    TooFew = 1,
    /// Every weight zero.
    ZeroSum = 2,
    /// A negative, NaN or infinite weight, or a total past f64's range.
    Weight = 3,
}

impl MultinomialFault {
    /// The fault of a kernel's code, `None` for 0.
    pub(crate) fn from_code(code: u32) -> Option<Self> {
        match code {
            0 => None,
            1 => Some(Self::TooFew),
            2 => Some(Self::ZeroSum),
            _ => Some(Self::Weight),
        }
    }
}

/// The `Err` of a `multinomial` fault, naming the operand.
pub(crate) fn multinomial_fault(f: MultinomialFault) -> Error {
    let found = match f {
        MultinomialFault::TooFew => {
            "a row of `probs` with fewer positive weights than `num_samples` (drawn without replacement)"
        }
        MultinomialFault::ZeroSum => "a row of `probs` whose weights are all zero",
        MultinomialFault::Weight => {
            "a negative, NaN or infinite weight in `probs` (or a row summing past f64's range)"
        }
    };
    Error::shape(
        "multinomial",
        "rows of `probs` of finite non-negative weights with a positive sum",
        found,
    )
}
