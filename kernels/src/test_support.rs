//! What the accuracy and property tests share: a seeded generator and
//! errors in units of the last place. Compiled into the library's own
//! tests and included by path (`#[path = "../src/test_support.rs"]`) by
//! the integration tests and the GPU check, so there is one copy.
#![allow(dead_code)]

/// How densely the property sweeps sample, from `TENSORFN_SLOW_TESTS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sweep {
    /// Unset: a sample of every case, quick in a debug build (CI's
    /// clean-clone `cargo test --workspace`).
    Quick,
    /// Set (`scripts/gpu-check` sets it): every case of each sweep.
    Slow,
    /// `dense`: the accuracy sweeps 16 times denser still.
    Dense,
}

/// The sweep density this run asks for.
pub fn sweep() -> Sweep {
    match std::env::var("TENSORFN_SLOW_TESTS").as_deref() {
        Ok("dense") => Sweep::Dense,
        Ok(_) => Sweep::Slow,
        Err(_) => Sweep::Quick,
    }
}

/// A seeded xorshift generator (no dependency needed).
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// One of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// Uniform in `[0, 1)`, 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

/// Error of `got` in units of the last place of `want` rounded to f32
/// (the spacing of the binade holding `|want|`, subnormal spacing below
/// the normal range). A result whose nearest f32 is infinite must be that
/// infinity; NaN must match NaN.
pub fn ulp_err_f32(got: f32, want: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if got.is_nan() && want.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let w = want as f32;
    if w.is_infinite() || got.is_infinite() {
        return if got == w { 0.0 } else { f64::INFINITY };
    }
    // Round |want| toward zero first: the spacing above it is its binade's.
    let mut a = w.abs();
    if a as f64 > want.abs() {
        a = f32::from_bits(a.to_bits() - 1);
    }
    let ulp = f32::from_bits(a.to_bits() + 1) as f64 - a as f64;
    (got as f64 - want).abs() / ulp
}

/// Error of `got` in units of the last place of `want` (f64).
pub fn ulp_err_f64(got: f64, want: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if got.is_nan() && want.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    if want.is_infinite() || got.is_infinite() {
        return if got == want { 0.0 } else { f64::INFINITY };
    }
    let a = want.abs();
    let ulp = f64::from_bits(a.to_bits() + 1) - a;
    (got - want).abs() / ulp
}
