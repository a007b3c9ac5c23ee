//! The 16-bit expansions ([`Fit::F16`], [`Fit::Bf16`]) checked
//! exhaustively: every one of the 65536 f16 and 65536 bf16 inputs, the op
//! evaluated by the interpreter and rounded to its dtype as the kernels do,
//! against an `f64` reference rounded once to the dtype. The full `f32`
//! expansions, rounded the same way, are measured alongside.

use super::{unary_fit, Fit};
use crate::interp::eval::run;
use crate::lower::{float_unary, round_to};
use crate::ops::UnaryOp;
use crate::prim::{Builder, Op, Program, Ty};
use crate::round::{f64_to_bf16, f64_to_f16};
use tensorfn_core::DTypeKind;

/// The 16-bit value of an f32 holding one.
fn to_bits16(dtype: DTypeKind, v: f32) -> u16 {
    match dtype {
        DTypeKind::F16 => half::f16::from_f32(v).to_bits(),
        _ => (v.to_bits() >> 16) as u16,
    }
}

fn from_bits16(dtype: DTypeKind, h: u16) -> f32 {
    match dtype {
        DTypeKind::F16 => half::f16::from_bits(h).to_f32(),
        _ => f32::from_bits((h as u32) << 16),
    }
}

fn round16(dtype: DTypeKind, v: f64) -> u16 {
    match dtype {
        DTypeKind::F16 => f64_to_f16(v).to_bits(),
        _ => f64_to_bf16(v).to_bits(),
    }
}

/// Position on the line of 16-bit values: consecutive values differ by 1,
/// both zeros are 0 (their sign is checked on its own).
fn ordinal(h: u16) -> i32 {
    let mag = (h & 0x7fff) as i32;
    if h & 0x8000 != 0 {
        -mag
    } else {
        mag
    }
}

/// Spacing of the 16-bit values in the binade of `|v|` (finite `v`).
fn ulp16(dtype: DTypeKind, v: f64) -> f64 {
    let (p, emin) = match dtype {
        DTypeKind::F16 => (11, -14),
        _ => (8, -126),
    };
    let e = if v == 0.0 {
        emin
    } else {
        (v.abs().log2().floor() as i32).max(emin)
    };
    2f64.powi(e - (p - 1))
}

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

fn reference(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Silu => x * sigmoid(x),
        UnaryOp::Gelu => {
            let c = 2.0 * (2.0 / std::f64::consts::PI).sqrt();
            x * sigmoid(c * (x + 0.044715 * x * x * x))
        }
        _ => unreachable!(),
    }
}

/// The op on every value of `dtype`, rounded to `dtype`: with the 16-bit
/// expansion (`short`) or the full f32 one.
fn evaluate(op: UnaryOp, dtype: DTypeKind, short: bool) -> Vec<u16> {
    let fit = if dtype == DTypeKind::F16 {
        Fit::F16
    } else {
        Fit::Bf16
    };
    let mut b = Builder::new();
    let x = b.param(Ty::F32);
    let y = if short {
        unary_fit(&mut b, op, x, fit).expect("a 16-bit expansion")
    } else {
        float_unary(&mut b, op, x)
    };
    let y = round_to(&mut b, y, dtype);
    let prog = b.finish(vec![y]);
    let xs: Vec<u64> = (0..=u16::MAX)
        .map(|h| from_bits16(dtype, h).to_bits() as u64)
        .collect();
    let out = run(&prog, &[&xs], xs.len());
    out[0]
        .iter()
        .map(|&v| to_bits16(dtype, f32::from_bits(v as u32)))
        .collect()
}

/// What one expansion achieves over all inputs.
#[derive(Debug, Default)]
struct Stats {
    /// Largest distance, in 16-bit values, from the correctly rounded one.
    max_steps: i32,
    /// Inputs whose result is not the correctly rounded value.
    not_nearest: usize,
    /// Largest `|got - exact| / ulp` over finite results.
    max_ulp: f64,
}

/// Measures `got` (indexed by input bits) against the reference; finite
/// inputs only for the reference, non-finite ones must match `full` bit
/// for bit (the conventions at ±inf and NaN are the full expansion's).
fn measure(op: UnaryOp, dtype: DTypeKind, got: &[u16], full: &[u16]) -> Stats {
    let mut s = Stats::default();
    for h in 0..=u16::MAX {
        let x = from_bits16(dtype, h) as f64;
        let g = got[h as usize];
        let gv = from_bits16(dtype, g) as f64;
        if !x.is_finite() {
            let f = full[h as usize];
            let same = g == f || (gv.is_nan() && from_bits16(dtype, f).is_nan());
            assert!(same, "{op:?} {dtype} at {x}: {g:#06x}, full gives {f:#06x}");
            continue;
        }
        let exact = reference(op, x);
        let want = round16(dtype, exact);
        if exact.is_nan() {
            assert!(gv.is_nan(), "{op:?} {dtype} at {x}: {gv}, want NaN");
            continue;
        }
        assert!(!gv.is_nan(), "{op:?} {dtype} at {x}: NaN, want {exact}");
        if gv == 0.0 {
            let neg = exact.is_sign_negative();
            assert_eq!(
                gv.is_sign_negative(),
                neg,
                "{op:?} {dtype} at {x}: zero of the wrong sign, exact {exact}"
            );
        }
        let steps = (ordinal(g) - ordinal(want)).abs();
        s.max_steps = s.max_steps.max(steps);
        s.not_nearest += (steps != 0) as usize;
        if gv.is_finite() && exact.abs() < f64::from(from_bits16(dtype, 0x7bff).max(3e38)) {
            let w = from_bits16(dtype, want) as f64;
            if w.is_finite() {
                s.max_ulp = s.max_ulp.max((gv - exact).abs() / ulp16(dtype, exact));
            }
        }
    }
    s
}

const OPS: [UnaryOp; 8] = [
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sin,
    UnaryOp::Cos,
    UnaryOp::Tanh,
    UnaryOp::Sigmoid,
    UnaryOp::Silu,
    UnaryOp::Gelu,
];

fn check(dtype: DTypeKind) {
    for op in OPS {
        let full = evaluate(op, dtype, false);
        let short = evaluate(op, dtype, true);
        let f = measure(op, dtype, &full, &full);
        let s = measure(op, dtype, &short, &full);
        println!(
            "{dtype} {:8} short: max {:.3} ulp, {} not nearest | full f32: max {:.3} ulp, {} not nearest",
            op.name(),
            s.max_ulp,
            s.not_nearest,
            f.max_ulp,
            f.not_nearest
        );
        // The bounds stated in the crate docs (section "Accuracy").
        assert!(s.max_steps <= 1, "{op:?} {dtype}: {s:?}");
        assert!(s.max_ulp <= 0.51, "{op:?} {dtype}: {s:?}");
        assert!(s.not_nearest <= 30, "{op:?} {dtype}: {s:?}");
        assert!(
            f.max_steps <= 1 && f.max_ulp <= 0.501,
            "full {op:?} {dtype}: {f:?}"
        );
    }
}

#[test]
fn f16_expansions_are_within_one_ulp_on_every_input() {
    check(DTypeKind::F16);
}

#[test]
fn bf16_expansions_are_within_one_ulp_on_every_input() {
    check(DTypeKind::BF16);
}

/// GPU instructions a correctly rounded f32 division issues on its fast
/// path (reciprocal estimate, five `fma`, the range check and its branch),
/// as `ptxas` compiles `div.rn.f32` for sm_70 to sm_90.
const F32_DIV_COST: usize = 8;

/// Instructions a lane executes: live ones but constants, parameters and
/// the work under a rare branch, a division counted as what it issues.
fn executed(prog: &Program) -> usize {
    let rare: Vec<usize> = (0..prog.insts.len())
        .filter(|&i| prog.insts[i].op == Op::SelectRare)
        .collect();
    let live = prog.live_except(&rare);
    (0..prog.insts.len())
        .filter(|&i| live[i])
        .map(|i| match prog.insts[i].op {
            Op::Const(_) | Op::Param(_) => 0,
            Op::FDiv => F32_DIV_COST,
            _ => 1,
        })
        .sum()
}

/// The 16-bit expansions are the shorter ones.
#[test]
fn sixteen_bit_expansions_execute_fewer_instructions() {
    for op in OPS {
        for (dtype, fit) in [(DTypeKind::F16, Fit::F16), (DTypeKind::BF16, Fit::Bf16)] {
            let count = |short: bool| {
                let mut b = Builder::new();
                let x = b.param(Ty::F32);
                let y = if short {
                    unary_fit(&mut b, op, x, fit).unwrap()
                } else {
                    float_unary(&mut b, op, x)
                };
                let y = round_to(&mut b, y, dtype);
                executed(&b.finish(vec![y]))
            };
            let (short, full) = (count(true), count(false));
            println!(
                "{dtype} {:8} {short} instructions, {full} with the f32 expansion",
                op.name()
            );
            assert!(short < full, "{op:?} {dtype}: {short} vs {full}");
        }
    }
}

/// Special values through the whole kernel path (lowering, interpreter),
/// the same in f16, bf16 and f32.
#[test]
fn special_values_are_kept() {
    use crate::interp::{run_elementwise, HostData, HostView};
    use crate::ir::ElementwiseBuilder;
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    // (op, input, expected); NaN expected means any NaN.
    let cases = [
        (UnaryOp::Exp, -inf, 0.0),
        (UnaryOp::Exp, inf, inf),
        (UnaryOp::Exp, nan, nan),
        (UnaryOp::Exp, -0.0, 1.0),
        (UnaryOp::Exp, 200.0, inf),
        (UnaryOp::Exp, -200.0, 0.0),
        (UnaryOp::Log, 0.0, -inf),
        (UnaryOp::Log, -0.0, -inf),
        (UnaryOp::Log, -1.0, nan),
        (UnaryOp::Log, inf, inf),
        (UnaryOp::Log, 1.0, 0.0),
        (UnaryOp::Sin, -0.0, -0.0),
        (UnaryOp::Sin, inf, nan),
        (UnaryOp::Cos, -inf, nan),
        (UnaryOp::Cos, 0.0, 1.0),
        (UnaryOp::Tanh, -0.0, -0.0),
        (UnaryOp::Tanh, -inf, -1.0),
        (UnaryOp::Tanh, inf, 1.0),
        (UnaryOp::Tanh, nan, nan),
        (UnaryOp::Sigmoid, -inf, 0.0),
        (UnaryOp::Sigmoid, inf, 1.0),
        (UnaryOp::Sigmoid, nan, nan),
        (UnaryOp::Silu, -0.0, -0.0),
        (UnaryOp::Silu, inf, inf),
        (UnaryOp::Silu, -inf, nan), // -inf · 0, as PyTorch
        (UnaryOp::Silu, -30000.0, -0.0),
        (UnaryOp::Gelu, -0.0, -0.0),
        (UnaryOp::Gelu, inf, inf),
        (UnaryOp::Gelu, -inf, nan),
        (UnaryOp::Gelu, -30000.0, -0.0),
    ];
    for dtype in [DTypeKind::F16, DTypeKind::BF16, DTypeKind::F32] {
        for &(op, x, want) in &cases {
            let mut k = ElementwiseBuilder::new();
            let v = k.input(dtype);
            let y = k.unary(op, v);
            let kernel = k.output(y).unwrap();
            let data = HostData::from_f64(dtype, &[x]);
            let got = run_elementwise(&kernel, &[HostView::contiguous(&data)], &[1])
                .unwrap()
                .to_f64_vec()[0];
            let ok = if want.is_nan() {
                got.is_nan()
            } else {
                got == want && got.is_sign_negative() == want.is_sign_negative()
            };
            assert!(ok, "{op:?}({x}) in {dtype}: {got}, want {want}");
        }
    }
}
