//! `dropout(input, p, training, seed)`, seeded: whether element `i` (its
//! row-major position in the tensor) is kept is a hash of `(seed, i)`, so
//! every back-end draws the same mask, bit for bit, and the backward
//! draws it again instead of saving it. The masks differ from PyTorch's
//! (its generator is a stateful Philox stream); the statistics are the
//! same: each element kept with probability `1 - p`, kept ones scaled by
//! `1 / (1 - p)`.
//!
//! ```
//! use tensorfn_core::ops::dropout::{keep, scale};
//! let kept = (0..10_000u64).filter(|&i| keep(7, i, 0.25)).count();
//! assert!((7_300..7_700).contains(&kept));
//! assert!((0..100u64).all(|i| keep(7, i, 0.0) && !keep(7, i, 1.0)));
//! assert_eq!(scale(0.5), 2.0);
//! ```

/// SplitMix64's finaliser: a bijection of `u64` that mixes every bit.
///
/// ```
/// assert_ne!(tensorfn_core::ops::dropout::mix(1), tensorfn_core::ops::dropout::mix(2));
/// ```
pub const fn mix(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 32 random bits of element `index` under `seed`.
///
/// ```
/// use tensorfn_core::ops::dropout::bits;
/// assert_eq!(bits(1, 5), bits(1, 5));
/// assert_ne!(bits(1, 5), bits(2, 5));
/// ```
pub const fn bits(seed: u64, index: u64) -> u32 {
    (mix(mix(seed).wrapping_add(index.wrapping_mul(0x9e37_79b9_7f4a_7c15))) >> 32) as u32
}

/// The threshold of `p`: an element is dropped when its [`bits`] are
/// below it (`p` of the 2^32 values; 2^32 for `p = 1`, nothing kept).
///
/// ```
/// use tensorfn_core::ops::dropout::threshold;
/// assert_eq!(threshold(0.0), 0);
/// assert_eq!(threshold(0.5), 1 << 31);
/// assert_eq!(threshold(1.0), 1 << 32);
/// ```
pub fn threshold(p: f64) -> u64 {
    (p.clamp(0.0, 1.0) * 4_294_967_296.0).round() as u64
}

/// Whether element `index` is kept by `dropout` with probability `p` of
/// dropping under `seed`.
///
/// ```
/// assert!(tensorfn_core::ops::dropout::keep(3, 0, 0.0));
/// ```
pub fn keep(seed: u64, index: u64, p: f64) -> bool {
    bits(seed, index) as u64 >= threshold(p)
}

/// The factor of kept elements, `1 / (1 - p)` (0 for `p = 1`, where
/// nothing is kept).
///
/// ```
/// assert_eq!(tensorfn_core::ops::dropout::scale(0.75), 4.0);
/// assert_eq!(tensorfn_core::ops::dropout::scale(1.0), 0.0);
/// ```
pub fn scale(p: f64) -> f64 {
    if p >= 1.0 {
        0.0
    } else {
        1.0 / (1.0 - p)
    }
}
