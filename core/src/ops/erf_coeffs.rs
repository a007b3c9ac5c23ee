//! The coefficients of `erf` and `erfc`: the rationals of fdlibm's
//! `s_erf.c` (FreeBSD `msun`) on four intervals of `|x|`, and where the
//! intervals end. One table for the PTX expansion and the vectorised CPU
//! functions, which evaluate the same rationals.
//!
//! ```
//! use tensorfn_core::ops::erf_coeffs::{ERF_SMALL, ERF_SMALL_END};
//! // erf(x) = x + x N(x²)/D(x²) below 0.84375
//! let x: f64 = 0.5;
//! let h = |c: &[f64]| c.iter().fold(0.0, |p, &k| p * x * x + k);
//! let erf = x + x * h(&ERF_SMALL.0) / h(&ERF_SMALL.1);
//! assert!(x < ERF_SMALL_END && (erf - 0.520_499_877_813_046_5).abs() < 1e-15);
//! ```

/// The rationals of fdlibm's `s_erf.c` (FreeBSD `msun`), `N(t)/D(t)` on
/// four intervals of `|x|`: numerator and denominator coefficients,
/// highest power first.
///
/// `|x| < 0.84375`, `t = x²`: `erf(x) = x + x N/D`.
pub const ERF_SMALL: ([f64; 5], [f64; 6]) = (
    [
        -2.3763016656650163e-05,
        -0.005770270296489442,
        -0.02848174957559851,
        -0.3250421072470015,
        0.12837916709551256,
    ],
    [
        -3.960228278775368e-06,
        0.00013249473800432164,
        0.005081306281875766,
        0.0650222499887673,
        0.39791722395915535,
        1.0,
    ],
);
/// `0.84375 <= |x| < 1.25`, `t = |x| - 1`: `erf(|x|) = ERX + N/D`.
pub const ERF_MID: ([f64; 7], [f64; 7]) = (
    [
        -0.002166375594868791,
        0.035478304325618236,
        -0.11089469428239668,
        0.31834661990116175,
        -0.3722078760357013,
        0.41485611868374833,
        -0.0023621185607526594,
    ],
    [
        0.011984499846799107,
        0.01363708391202905,
        0.12617121980876164,
        0.07182865441419627,
        0.540397917702171,
        0.10642088040084423,
        1.0,
    ],
);
/// `1.25 <= |x| < 1/0.35`, `t = 1/x²`: `erfc(|x|) = e^(-x² - 0.5625 + N/D)/|x|`.
pub const ERFC_NEAR: ([f64; 8], [f64; 9]) = (
    [
        -9.814329344169145,
        -81.2874355063066,
        -184.60509290671104,
        -162.39666946257347,
        -62.375332450326006,
        -10.558626225323291,
        -0.6938585727071818,
        -0.009864944034847148,
    ],
    [
        -0.0604244152148581,
        6.570249770319282,
        108.63500554177944,
        429.00814002756783,
        645.3872717332679,
        434.56587747522923,
        137.65775414351904,
        19.651271667439257,
        1.0,
    ],
);
/// `|x| >= 1/0.35`, the same form.
pub const ERFC_FAR: ([f64; 7], [f64; 8]) = (
    [
        -483.5191916086514,
        -1025.0951316110772,
        -637.5664433683896,
        -160.63638485582192,
        -17.757954917754752,
        -0.799283237680523,
        -0.0098649429247001,
    ],
    [
        -22.44095244658582,
        474.52854120695537,
        2553.0504064331644,
        3199.8582195085955,
        1536.729586084437,
        325.7925129965739,
        30.33806074348246,
        1.0,
    ],
);

/// `erf(1)` rounded to 24 significant bits: `1 - ERX` is exact; the
/// rational on `[0.84375, 1.25)` approximates `erf(|x|) - ERX`.
pub const ERX: f64 = f64::from_bits(0x3feb_0ac1_6000_0000);

/// Where the intervals of `|x|` end: `erf` uses the first rational below
/// `ERF_SMALL_END`, the second below `ERF_MID_END`, then `erfc`'s.
pub const ERF_SMALL_END: f64 = 0.843_75;
/// See [`ERF_SMALL_END`].
pub const ERF_MID_END: f64 = 1.25;
/// fdlibm's bound between the two `erfc` rationals, `1/0.35` cut to its
/// high 32 bits.
pub const ERFC_NEAR_END: f64 = f64::from_bits(0x4006_db6d_0000_0000);
