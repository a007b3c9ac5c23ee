//! Runs a hot loop compiled for the widest vector unit the CPU has: the
//! same source, compiled again with AVX-512 or AVX2 + FMA enabled and
//! chosen once per call after asking the CPU, so a portable build still
//! vectorises 8 or 16 floats at a time where the hardware allows.

/// Calls `f`, compiled for AVX-512 or AVX2 + FMA when the CPU has them.
///
/// `f` (usually a loop over slices) and everything it inlines are
/// compiled again inside each variant. Mark the closure
/// `#[inline(always)]`, and what it calls too: with three callers a large
/// body is otherwise left out of line, compiled for the baseline CPU.
#[inline(always)]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has just reported AVX-512F (and with it AVX2
            // and FMA, which every AVX-512 CPU has).
            return unsafe { x86::avx512(f) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has just reported AVX2 and FMA.
            return unsafe { x86::avx2(f) };
        }
    }
    f()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    /// `f()` with AVX-512F code generation.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    /// `f()` with AVX2 and FMA code generation.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_the_closure_once() {
        let mut calls = 0;
        let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.01 - 3.0).collect();
        let y = vectorized(|| {
            calls += 1;
            x.iter().map(|&v| v * 2.0 + 1.0).collect::<Vec<_>>()
        });
        assert_eq!(calls, 1);
        for (a, b) in x.iter().zip(&y) {
            assert_eq!(*b, *a * 2.0 + 1.0);
        }
    }
}
