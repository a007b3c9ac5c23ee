#!/usr/bin/env python3
"""Fits the rational `tanh` of the 16-bit expansions and checks it.

`tanh(x) ~ x P(x^2) / Q(x^2)` with `P(0) = Q(0) = 1`, of least relative
error on `[0, clamp]`: Lawson's iteration (weighted least squares of the
linearised error `P - f Q`, the weights multiplied by the error each
round) to near the equioscillation. Prints the coefficients rounded to
f32 (highest power first, as `kernels/src/mathfn/coeffs.rs` holds them)
and, evaluated in f32 the way the kernels do (Horner by fma, the
reciprocal of `Q` from its bits and Newton steps), how many of the
positive 16-bit inputs miss the correctly rounded result.

    python3 scripts/fit_tanh.py      (needs numpy)
"""

import numpy as np

F32 = np.float32


def fit(m, n, clamp, rounds=300):
    """Relative error and the coefficients (lowest power first) of P (degree m) and Q (degree n) in z = x^2."""
    z = np.concatenate([np.linspace(0, clamp * clamp, 20000), clamp * clamp * np.linspace(0, 1, 2000) ** 3])
    x = np.sqrt(z)
    f = np.where(x > 0, np.tanh(x) / np.where(x > 0, x, 1), 1.0)
    w = np.ones_like(z)
    best = None
    for _ in range(rounds):
        a = np.hstack(
            [
                np.stack([z**i for i in range(1, m + 1)], 1) / f[:, None],
                -np.stack([z**i for i in range(1, n + 1)], 1),
            ]
        )
        rhs = (f - 1.0) / f
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(a * sw[:, None], rhs * sw, rcond=None)
        p = np.concatenate([[1.0], c[:m]])
        q = np.concatenate([[1.0], c[m:]])
        err = np.abs(np.polyval(p[::-1], z) / np.polyval(q[::-1], z) / f - 1)
        if best is None or err.max() < best[0]:
            best = (err.max(), p, q)
        w = w * err**0.5
        w /= w.sum()
    return best


def fma(a, b, c):
    # Exact in f64 for these magnitudes but for the last bits of c: close
    # enough to count the misses (the Rust tests check the real thing).
    return F32(np.float64(a) * np.float64(b) + np.float64(c))


def recip(d, steps):
    r = (np.int32(0x7EF311C3) - d.view(np.int32)).view(F32)
    for _ in range(steps):
        r = fma(r, fma(-d, r, F32(1)), r)
    return r


def horner(z, coeffs_high_first):
    p = np.full_like(z, F32(coeffs_high_first[0]))
    for c in coeffs_high_first[1:]:
        p = fma(p, z, F32(c))
    return p


def tanh_f32(x, p, q, clamp, steps):
    t = np.minimum(np.abs(x), F32(clamp))
    z = F32(t * t)
    num = F32(t * horner(z, p[::-1]))
    return np.copysign(F32(num * recip(horner(z, q[::-1]), steps)), x)


def round_bf16(v):
    m, e = np.frexp(np.asarray(v, np.float64))
    s = 2.0 ** (e - 8)
    return np.round(v / s) * s


def main():
    for dtype, m, n, clamp, steps in [("f16", 3, 3, 4.75, 3), ("bf16", 2, 2, 3.5, 2)]:
        err, p, q = fit(m, n, clamp)
        p32 = [F32(v) for v in p]
        q32 = [F32(v) for v in q]
        if dtype == "f16":
            xs = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(F32)
            got = tanh_f32(xs, p32, q32, clamp, steps).astype(np.float16)
            want = np.tanh(xs.astype(np.float64)).astype(np.float16)
        else:
            xs = (np.arange(0, 0x7F80, dtype=np.uint32) << 16).view(F32)
            got = round_bf16(tanh_f32(xs, p32, q32, clamp, steps).astype(np.float64))
            want = round_bf16(np.tanh(xs.astype(np.float64)))
        print(f"{dtype}: x P/Q, degrees {m}/{n} in x^2, |x| <= {clamp}: relative error 2^{np.log2(err):.1f}")
        print("  P:", ", ".join(str(v) for v in p32[::-1]))
        print("  Q:", ", ".join(str(v) for v in q32[::-1]))
        print(f"  positive inputs off the correctly rounded result: {(got != want).sum()} of {len(xs)}")


if __name__ == "__main__":
    main()
