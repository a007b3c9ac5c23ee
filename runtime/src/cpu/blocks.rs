//! Elementwise loops run block by block, so that a function with a slow
//! path for rare arguments (sine and cosine beyond 2^28, inf and NaN) pays
//! for it only in the blocks that contain one. Each block runs first with the fast
//! paths alone, which vectorise; a block where some lane needed the slow
//! path runs again with the exact functions. The fast paths are the exact
//! functions' own arithmetic on the arguments they accept, so the results
//! are the same bits either way.

use super::vmath;

/// Elements per block: at 256 the work per block (the check, entering and
/// leaving the loop) no longer shows next to the work per element, even
/// for cheap ops, and a rare huge argument still sends few lanes through
/// the exact path again.
const BLOCK: usize = 256;

/// How the functions of a loop body evaluate the lanes of one block:
/// their fast paths (noting whether every argument fitted them) or the
/// exact functions of [`vmath`].
///
/// Generated loop bodies take one and call its methods where they would
/// call [`vmath`]; the loop decides which paths a block runs.
///
/// ```
/// use tensorfn_runtime::__private::{vmath, Lanes};
/// let mut lanes = Lanes::exact();
/// assert_eq!(lanes.sin(1.0e30), vmath::sin(1.0e30));
/// assert_eq!(lanes.cos(0.5), vmath::cos(0.5));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Lanes {
    /// Call the exact functions rather than the fast paths.
    exact: bool,
    /// Every argument seen so far fitted the fast paths.
    fits: bool,
}

impl Lanes {
    /// Lanes that always take the exact functions.
    ///
    /// ```
    /// use tensorfn_runtime::__private::Lanes;
    /// assert!(Lanes::exact().cos(f32::INFINITY).is_nan());
    /// ```
    #[inline(always)]
    pub fn exact() -> Self {
        Self {
            exact: true,
            fits: true,
        }
    }

    /// Lanes that take the fast paths and note whether they were enough.
    #[inline(always)]
    fn fast() -> Self {
        Self {
            exact: false,
            fits: true,
        }
    }

    /// [`vmath::sin`] of `x`.
    ///
    /// ```
    /// use tensorfn_runtime::__private::Lanes;
    /// assert_eq!(Lanes::exact().sin(0.0), 0.0);
    /// ```
    #[inline(always)]
    pub fn sin(&mut self, x: f32) -> f32 {
        self.trig(x, 0)
    }

    /// [`vmath::cos`] of `x`.
    ///
    /// ```
    /// use tensorfn_runtime::__private::Lanes;
    /// assert_eq!(Lanes::exact().cos(0.0), 1.0);
    /// ```
    #[inline(always)]
    pub fn cos(&mut self, x: f32) -> f32 {
        self.trig(x, 1)
    }

    #[inline(always)]
    fn trig(&mut self, x: f32, shift: i32) -> f32 {
        if self.exact {
            vmath::sin_shifted(x, shift)
        } else {
            self.fits &= vmath::trig_fast_fits(x);
            vmath::sin_shifted_fast(x, shift)
        }
    }
}

/// Fills `out` block by block: `body(lanes, start, block)` fills `block`,
/// the elements of `out` from index `start` on, once with fast lanes and,
/// where an argument did not fit them, again with exact ones.
///
/// `body` should be a loop over `block` indexing slices of exactly its
/// length, so that bounds checks vanish and the loop vectorises. Each
/// block has two calls to it, so it and what it calls should be
/// `#[inline(always)]`: the compiler's own estimate would otherwise leave
/// them out of line. Where nothing in `body` uses its [`Lanes`], the
/// second call is dead code and disappears.
#[inline(always)]
pub(crate) fn fill_blocks<O>(out: &mut [O], body: impl Fn(&mut Lanes, usize, &mut [O])) {
    let tail_start = out.len() / BLOCK * BLOCK;
    let mut blocks = out.chunks_exact_mut(BLOCK);
    for (k, block) in blocks.by_ref().enumerate() {
        fill_block(block, k * BLOCK, &body);
    }
    fill_block(blocks.into_remainder(), tail_start, &body);
}

/// One block of [`fill_blocks`].
#[inline(always)]
fn fill_block<O>(block: &mut [O], start: usize, body: &impl Fn(&mut Lanes, usize, &mut [O])) {
    let mut lanes = Lanes::fast();
    body(&mut lanes, start, block);
    if !lanes.fits {
        body(&mut Lanes::exact(), start, block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    /// Random arguments in `[-10, 10]`, with a few NaN and infinities
    /// (which the exact path handles).
    fn ordinary(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64::new(seed);
        (0..n)
            .map(|i| {
                let u = rng.uniform();
                match (i % 1999, i % 1733) {
                    (1500, _) => f32::NAN,
                    (_, 900) if u < 0.5 => f32::INFINITY,
                    (_, 900) => f32::NEG_INFINITY,
                    _ => ((u - 0.5) * 20.0) as f32,
                }
            })
            .collect()
    }

    /// Finite arguments beyond the fast paths, up to the largest.
    const HUGE: [f32; 5] = [
        268_435_488.0,
        -1.0e30,
        f32::MAX,
        f32::MIN,
        16_367_173.0 * 4_722_366_482_869_645_213_696.0, // 2^72
    ];

    fn blocked(x: &[f32], f: fn(&mut Lanes, f32) -> f32) -> Vec<f32> {
        let mut out = vec![0.0; x.len()];
        fill_blocks(&mut out, |lanes, start, block| {
            let x = &x[start..start + block.len()];
            for (o, &v) in block.iter_mut().zip(x) {
                *o = f(lanes, v);
            }
        });
        out
    }

    fn assert_same_bits(x: &[f32]) {
        let sin = blocked(x, Lanes::sin);
        let cos = blocked(x, Lanes::cos);
        for (i, &v) in x.iter().enumerate() {
            let n = x.len();
            assert_eq!(
                sin[i].to_bits(),
                vmath::sin(v).to_bits(),
                "sin({v:e}), {i} of {n}"
            );
            assert_eq!(
                cos[i].to_bits(),
                vmath::cos(v).to_bits(),
                "cos({v:e}), {i} of {n}"
            );
        }
    }

    #[test]
    fn blocks_give_the_per_element_bits() {
        for n in [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17] {
            // No huge argument, then one at the start, the middle and the
            // end (in the partial last block where there is one).
            for (k, at) in [None, Some(0), Some(n / 2), Some(n.saturating_sub(1))]
                .into_iter()
                .enumerate()
            {
                let mut x = ordinary(n, (n * 4 + k) as u64);
                if let (Some(at), false) = (at, x.is_empty()) {
                    x[at] = HUGE[k % HUGE.len()];
                }
                assert_same_bits(&x);
            }
        }
        // Long runs that fit, between blocks with several huge arguments.
        let mut x = ordinary(20_011, 7);
        for (j, i) in (0..x.len()).step_by(997).enumerate() {
            for d in 0..j % 4 {
                x[(i + d * 13) % 20_011] = HUGE[(i + d) % HUGE.len()];
            }
        }
        assert_same_bits(&x);
    }

    #[test]
    fn fast_lanes_take_only_finite_arguments_up_to_the_limit() {
        for x in [0.0, -0.0, 1.0e-40, 1.0, 268_435_456.0, -268_435_456.0] {
            let mut lanes = Lanes::fast();
            let (s, c) = (lanes.sin(x), lanes.cos(x));
            assert!(lanes.fits, "{x:e}");
            assert_eq!(s.to_bits(), vmath::sin(x).to_bits(), "sin({x:e})");
            assert_eq!(c.to_bits(), vmath::cos(x).to_bits(), "cos({x:e})");
        }
        let specials = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
        for x in HUGE.into_iter().chain(HUGE.map(|v| -v)).chain(specials) {
            let mut lanes = Lanes::fast();
            lanes.cos(x);
            assert!(!lanes.fits, "{x:e}");
        }
    }
}
