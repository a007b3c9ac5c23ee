//! How the normalisation kernels (`layer_norm`, `rms_norm`) split a row
//! among threads: the plan the PTX entries follow and the interpreter
//! repeats, operation for operation.
//!
//! A row of `cols` elements goes to one of three entries of the module
//! [`builtin::norm`](crate::builtin::norm) writes:
//!
//! - `NAME_warp_v` / `NAME_warp_s`: one warp per row (eight rows per
//!   block) for rows of at most [`warp_cols`] elements;
//! - `NAME_block_v` / `NAME_block_s`: one block of
//!   [`BLOCK`](crate::abi::BLOCK) threads per row for rows of at most
//!   [`block_cols`] elements;
//! - `NAME_long`: one block per row, reading the row from global memory
//!   once per pass (two for `rms_norm`, three for `layer_norm`), for
//!   longer rows.
//!
//! The first two keep the row in registers: each thread holds
//! [`slots`] elements, read once. The `_v` entries move 16 bytes per
//! access ([`vector`] elements), which needs every row, `weight` and
//! `bias` to start on a 16-byte boundary (`cols` a multiple of
//! [`vector`], buffers 16-byte aligned); `_s` entries move one element
//! per access. Thread `t` of a row's `T` threads holds the accesses
//! `t, t + T, t + 2T, ..`, and sums its elements in that order (each
//! access's elements in order), then the threads' sums are combined by a
//! butterfly across the warp and, in a block, the eight warps' sums in
//! order. Statistics are in f32 for f32, f16 and bf16 and in f64 for f64;
//! every operation is rounded once (`add.rn`, `mul.rn`, `div.rn`,
//! `sqrt.rn`), so [`interp::norm`](crate::interp::norm) computes the same
//! bits. The norms are row programs
//! ([`norm_program`](crate::rowkernel::norm_program)), and every row
//! kernel written in `tensor_fn!` splits its rows the same way
//! ([`interp::row_kernel`](crate::interp::row_kernel) on the host).
//!
//! ```
//! use tensorfn_kernels::norm::{self, NormEntry};
//! use tensorfn_kernels::DTypeKind;
//! assert_eq!(norm::entry(DTypeKind::BF16, 768, true), NormEntry::Warp { vector: true });
//! assert_eq!(norm::entry(DTypeKind::F32, 4096, true), NormEntry::Block { vector: true });
//! assert_eq!(norm::entry(DTypeKind::F32, 4095, true), NormEntry::Block { vector: false });
//! assert_eq!(norm::entry(DTypeKind::F32, 100_000, true), NormEntry::Long);
//! ```

use crate::abi::BLOCK;
use tensorfn_core::DTypeKind;

/// Warps of a block.
pub(crate) const WARPS: usize = BLOCK as usize / 32;

/// Elements a thread holds in registers: 32 (16 for f64, whose
/// registers are twice as wide).
///
/// ```
/// use tensorfn_kernels::{norm, DTypeKind};
/// assert_eq!(norm::slots(DTypeKind::F16), 32);
/// assert_eq!(norm::slots(DTypeKind::F64), 16);
/// ```
pub const fn slots(dtype: DTypeKind) -> usize {
    match dtype {
        DTypeKind::F64 => 16,
        _ => 32,
    }
}

/// Elements of one 16-byte access.
///
/// ```
/// use tensorfn_kernels::{norm, DTypeKind};
/// assert_eq!(norm::vector(DTypeKind::BF16), 8);
/// assert_eq!(norm::vector(DTypeKind::F32), 4);
/// ```
pub const fn vector(dtype: DTypeKind) -> usize {
    16 / dtype.size_bytes()
}

/// The longest row one warp normalises from registers.
///
/// ```
/// use tensorfn_kernels::{norm, DTypeKind};
/// assert_eq!(norm::warp_cols(DTypeKind::F32), 1024);
/// ```
pub const fn warp_cols(dtype: DTypeKind) -> usize {
    32 * slots(dtype)
}

/// The longest row one block normalises from registers.
///
/// ```
/// use tensorfn_kernels::{norm, DTypeKind};
/// assert_eq!(norm::block_cols(DTypeKind::BF16), 8192);
/// assert_eq!(norm::block_cols(DTypeKind::F64), 4096);
/// ```
pub const fn block_cols(dtype: DTypeKind) -> usize {
    BLOCK as usize * slots(dtype)
}

/// Which entry of a normalisation module runs a row (see the
/// [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormEntry {
    /// One warp per row, from registers.
    Warp {
        /// 16-byte accesses.
        vector: bool,
    },
    /// One block per row, from registers.
    Block {
        /// 16-byte accesses.
        vector: bool,
    },
    /// One block per row, a pass over global memory per statistic.
    Long,
}

impl NormEntry {
    /// The suffix of the entry's name after the module's name.
    ///
    /// ```
    /// use tensorfn_kernels::norm::NormEntry;
    /// assert_eq!(NormEntry::Warp { vector: true }.suffix(), "_warp_v");
    /// assert_eq!(NormEntry::Long.suffix(), "_long");
    /// ```
    pub const fn suffix(self) -> &'static str {
        match self {
            NormEntry::Warp { vector: true } => "_warp_v",
            NormEntry::Warp { vector: false } => "_warp_s",
            NormEntry::Block { vector: true } => "_block_v",
            NormEntry::Block { vector: false } => "_block_s",
            NormEntry::Long => "_long",
        }
    }

    /// Every entry, in the module's order.
    pub const ALL: [NormEntry; 5] = [
        NormEntry::Warp { vector: true },
        NormEntry::Warp { vector: false },
        NormEntry::Block { vector: true },
        NormEntry::Block { vector: false },
        NormEntry::Long,
    ];

    /// Rows one block of this entry normalises at a time.
    ///
    /// ```
    /// use tensorfn_kernels::norm::NormEntry;
    /// assert_eq!(NormEntry::Warp { vector: false }.rows_per_block(), 8);
    /// assert_eq!(NormEntry::Long.rows_per_block(), 1);
    /// ```
    pub const fn rows_per_block(self) -> usize {
        match self {
            NormEntry::Warp { .. } => WARPS,
            _ => 1,
        }
    }

    /// Threads working on one row.
    pub(crate) const fn threads(self) -> usize {
        match self {
            NormEntry::Warp { .. } => 32,
            _ => BLOCK as usize,
        }
    }

    /// Elements of one access.
    pub(crate) const fn width(self, dtype: DTypeKind) -> usize {
        match self {
            NormEntry::Warp { vector: true } | NormEntry::Block { vector: true } => vector(dtype),
            _ => 1,
        }
    }
}

/// The entry for rows of `cols` elements of `dtype`; `aligned` says the
/// input, output, `weight` and `bias` buffers start on 16-byte boundaries
/// (the vector entries also need `cols` to be a multiple of [`vector`]).
pub fn entry(dtype: DTypeKind, cols: usize, aligned: bool) -> NormEntry {
    let vector = aligned && cols % vector(dtype) == 0;
    if cols <= warp_cols(dtype) {
        NormEntry::Warp { vector }
    } else if cols <= block_cols(dtype) {
        NormEntry::Block { vector }
    } else {
        NormEntry::Long
    }
}
