//! The primitives a backend implements. The ops layer (`ops/`) checks
//! shapes with the shared rules, prepares layouts (broadcast, permute) and
//! calls one of these; `cpu/` and `cuda/` implement them.
//!
//! Every primitive returns a new contiguous buffer with the dims of the
//! given layout(s) unless it says otherwise.

use crate::dtype::{DType, FloatDType, NumDType};
use crate::error::{Error, Result};
use crate::layout::Layout;
use tensorfn_kernels::{BinaryOp, ReduceOp, UnaryOp};

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

/// A backend: the CPU or one CUDA ordinal.
pub(crate) trait Backend {
    /// The buffer type holding `T` elements.
    type Buf<T: DType>;

    /// A contiguous buffer of `n` copies of `value`.
    fn full<T: DType>(&self, n: usize, value: T) -> Result<Self::Buf<T>>;

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

    /// Softmax (or log-softmax) along `dim`, computed in at least f32.
    fn softmax<T: FloatDType>(
        &self,
        x: &Self::Buf<T>,
        l: &Layout,
        dim: usize,
        log: bool,
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
}
