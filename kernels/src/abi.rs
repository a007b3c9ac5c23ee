//! How the runtime calls a generated elementwise kernel: the contract
//! between the PTX emitter and the CUDA launcher.
//!
//! An elementwise kernel named `NAME` with `k` inputs is a PTX module with
//! three entries:
//!
//! * `NAME_contig(.param .u64 out, .param .u64 in_0, .., .param .u64 in_{k-1}, .param .u64 n)`:
//!   every input has the output's dims and is contiguous; each pointer
//!   already includes the view's offset. `n` is the element count.
//! * `NAME_strided(.param .u64 out, .param .u64 in_0, .., .param .u64 in_{k-1}, .param .u64 n, .param .align 8 .b8 meta[META_BYTES(k)])`:
//!   `meta` is [`StridedMeta`] packed as `u64`s: the output dims padded on the
//!   left with 1 to [`MAX_RANK`], the output strides, then each input's
//!   strides (0 on broadcast dims), all in elements. The output may be a
//!   strided view (used by `cat` and in-place writes).
//! * `NAME_cols(.param .u64 out, .param .u64 in_0, .., .param .u64 in_{k-1}, .param .u64 n, .param .u64 cols, .param .u64 mask)`:
//!   the output is contiguous, input `j` is contiguous with the output's
//!   dims where bit `j` of `mask` is clear, and where it is set holds one
//!   row of `cols` elements (`cols >= 1`) that every row of the output
//!   reads: element `i` reads it at `i mod cols` (a per-channel operand
//!   of a channels-last tensor).
//!
//! Every entry must cover all `n` elements whatever the grid: each thread
//! loops over the grid's stride. The launcher picks the grid for speed
//! (one-dimensional, blocks of [`BLOCK`] threads),
//! often with fewer threads than elements.
//!
//! Booleans travel as one byte (0 or 1); f16/bf16 as their 16-bit patterns.
//!
//! ```
//! use tensorfn_kernels::abi::StridedMeta;
//! let m = StridedMeta::new(&[2, 3], &[3, 1], &[&[0, 1]]);
//! assert_eq!(m.words().len(), 6 * 3);
//! assert_eq!(&m.words()[..6], &[1, 1, 1, 1, 2, 3]);
//! ```

use crate::target::Target;
use tensorfn_core::DTypeKind;

/// Threads per block of the row kernels (reductions, softmax, cat) and
/// of the elementwise launches' grid.
///
/// ```
/// // launch: grid.x = min(rows, 65535), block.x = BLOCK
/// let rows: u64 = 100_000;
/// let grid = rows.min(65_535) as u32;
/// assert_eq!((grid, tensorfn_kernels::abi::BLOCK), (65_535, 256));
/// ```
pub const BLOCK: u32 = 256;

/// Highest rank the strided entry handles (matches the runtime's shapes).
///
/// ```
/// use tensorfn_kernels::abi::{StridedMeta, MAX_RANK};
/// // Every list is padded to MAX_RANK words: dims, then each stride list.
/// assert_eq!(StridedMeta::new(&[5], &[1], &[]).words().len(), 2 * MAX_RANK);
/// ```
pub const MAX_RANK: usize = 6;

/// Bytes of the `meta` parameter of a strided entry with `inputs` inputs.
///
/// ```
/// use tensorfn_kernels::abi::{meta_bytes, StridedMeta};
/// let m = StridedMeta::new(&[2, 3], &[3, 1], &[&[3, 1], &[0, 1]]);
/// assert_eq!(meta_bytes(2), 8 * m.words().len());
/// ```
pub const fn meta_bytes(inputs: usize) -> usize {
    8 * MAX_RANK * (2 + inputs)
}

/// A fused elementwise kernel generated at compile time: its PTX text and
/// signature, embedded by `tensor_fn!` as a `static`.
///
/// ```
/// use tensorfn_kernels::abi::FusedKernel;
/// use tensorfn_kernels::ptx::Target;
/// use tensorfn_core::DTypeKind;
/// static K: FusedKernel = FusedKernel {
///     name: "tf_demo",
///     ptx: ".target sm_70",
///     ptx_sm80: None,
///     inputs: &[DTypeKind::F32],
///     output: DTypeKind::F32,
/// };
/// assert_eq!(K.contig_entry(), "tf_demo_contig");
/// assert_eq!(K.ptx_for(Target::Sm80), ".target sm_70");
/// ```
#[derive(Debug)]
pub struct FusedKernel {
    /// Entry-name prefix, unique per kernel (includes a hash of its body).
    pub name: &'static str,
    /// The PTX module holding both entries, for sm_70 and newer.
    pub ptx: &'static str,
    /// The same module for sm_80 and newer, where it is faster (it rounds
    /// to `bf16`, see [`Target`]); `None` when it would not differ.
    pub ptx_sm80: Option<&'static str>,
    /// Dtype of each input, in parameter order.
    pub inputs: &'static [DTypeKind],
    /// Dtype of the output.
    pub output: DTypeKind,
}

impl FusedKernel {
    /// The text to load on a device of `target`.
    pub fn ptx_for(&self, target: Target) -> &'static str {
        match target {
            Target::Sm80 => self.ptx_sm80.unwrap_or(self.ptx),
            Target::Sm70 => self.ptx,
        }
    }

    /// Name of the entry for contiguous, same-shape inputs.
    pub fn contig_entry(&self) -> String {
        format!("{}_contig", self.name)
    }

    /// Name of the entry for strided or broadcast inputs.
    ///
    /// ```
    /// # use tensorfn_kernels::abi::FusedKernel;
    /// # use tensorfn_core::DTypeKind;
    /// # static K: FusedKernel = FusedKernel {
    /// #     name: "tf_demo", ptx: "", ptx_sm80: None,
    /// #     inputs: &[DTypeKind::F32], output: DTypeKind::F32,
    /// # };
    /// assert_eq!(K.strided_entry(), "tf_demo_strided");
    /// ```
    pub fn strided_entry(&self) -> String {
        format!("{}_strided", self.name)
    }

    /// Name of the entry for contiguous inputs mixed with inputs that
    /// repeat every row of the output.
    ///
    /// ```
    /// # use tensorfn_kernels::abi::FusedKernel;
    /// # use tensorfn_core::DTypeKind;
    /// # static K: FusedKernel = FusedKernel {
    /// #     name: "tf_demo", ptx: "", ptx_sm80: None,
    /// #     inputs: &[DTypeKind::F32], output: DTypeKind::F32,
    /// # };
    /// assert_eq!(K.cols_entry(), "tf_demo_cols");
    /// ```
    pub fn cols_entry(&self) -> String {
        format!("{}_cols", self.name)
    }
}

/// The `meta` parameter of a strided entry, as `u64` words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StridedMeta(Vec<u64>);

impl StridedMeta {
    /// Packs output dims and strides and each input's strides, padding
    /// every list on the left to [`MAX_RANK`] (dims with 1, strides with 0).
    ///
    /// Panics if a rank exceeds [`MAX_RANK`] (shape types cap it there).
    ///
    /// ```
    /// use tensorfn_kernels::abi::StridedMeta;
    /// // A [3] input broadcast along the rows of a [2, 3] output.
    /// let m = StridedMeta::new(&[2, 3], &[3, 1], &[&[0, 1]]);
    /// assert_eq!(&m.words()[4..6], &[2, 3]); // dims, padded on the left
    /// assert_eq!(&m.words()[16..18], &[0, 1]); // the input's strides
    /// ```
    pub fn new(dims: &[usize], out_strides: &[usize], inputs: &[&[usize]]) -> Self {
        assert!(dims.len() <= MAX_RANK, "rank above MAX_RANK");
        let pad = MAX_RANK - dims.len();
        let mut words = Vec::with_capacity(MAX_RANK * (2 + inputs.len()));
        words.extend(std::iter::repeat_n(1, pad).chain(dims.iter().map(|&d| d as u64)));
        for strides in std::iter::once(out_strides).chain(inputs.iter().copied()) {
            debug_assert_eq!(strides.len(), dims.len());
            words.extend(std::iter::repeat_n(0, pad).chain(strides.iter().map(|&s| s as u64)));
        }
        StridedMeta(words)
    }

    /// The packed words: dims, output strides, then each input's strides.
    ///
    /// ```
    /// use tensorfn_kernels::abi::StridedMeta;
    /// assert_eq!(StridedMeta::new(&[], &[], &[]).words(), &[1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0]);
    /// ```
    pub fn words(&self) -> &[u64] {
        &self.0
    }
}

/// Bytes per element of `dtype` on the device.
///
/// ```
/// use tensorfn_kernels::abi::device_size;
/// use tensorfn_core::DTypeKind;
/// assert_eq!(device_size(DTypeKind::BF16), 2);
/// assert_eq!(device_size(DTypeKind::Bool), 1); // one byte per element
/// ```
pub const fn device_size(dtype: DTypeKind) -> usize {
    dtype.size_bytes()
}
