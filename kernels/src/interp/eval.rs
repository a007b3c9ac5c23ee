//! Column-wise evaluation of a lowered [`Program`]: each instruction runs
//! over a whole column of lanes before the next, so the interpretive
//! overhead is paid once per instruction, not per element.
//!
//! Values are kept as raw bits in `u64`s (`f32`/`i32` in the low 32 bits,
//! predicates as 0/1), and each operation reproduces the PTX instruction the
//! emitter uses for it, bit for bit (NaN payloads aside).

use crate::prim::{CmpOp, Op, Program, Round, Ty};
use crate::round;

/// One column of lane values.
pub(crate) type Column = Vec<u64>;

fn f32_of(x: u64) -> f32 {
    f32::from_bits(x as u32)
}
fn f64_of(x: u64) -> f64 {
    f64::from_bits(x)
}
fn of_f32(x: f32) -> u64 {
    x.to_bits() as u64
}
fn of_f64(x: f64) -> u64 {
    x.to_bits()
}
fn i32_of(x: u64) -> i32 {
    x as u32 as i32
}
fn of_i32(x: i32) -> u64 {
    x as u32 as u64
}

/// Normalises bits to the width of `ty`.
pub(crate) fn norm(ty: Ty, x: u64) -> u64 {
    match ty {
        Ty::F32 | Ty::I32 => x & 0xffff_ffff,
        Ty::Pred => x & 1,
        _ => x,
    }
}

fn map1(a: &Column, f: impl Fn(u64) -> u64) -> Column {
    a.iter().map(|&x| f(x)).collect()
}
fn map2(a: &Column, b: &Column, f: impl Fn(u64, u64) -> u64) -> Column {
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}
fn map3(a: &Column, b: &Column, c: &Column, f: impl Fn(u64, u64, u64) -> u64) -> Column {
    a.iter()
        .zip(b)
        .zip(c)
        .map(|((&x, &y), &z)| f(x, y, z))
        .collect()
}

/// Applies a float function in the precision of `ty`.
macro_rules! float1 {
    ($ty:expr, $a:expr, |$x:ident| $e:expr) => {
        match $ty {
            Ty::F32 => map1($a, |v| {
                let $x = f32_of(v);
                of_f32($e)
            }),
            _ => map1($a, |v| {
                let $x = f64_of(v);
                of_f64($e)
            }),
        }
    };
}
macro_rules! float2 {
    ($ty:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $e:expr) => {
        match $ty {
            Ty::F32 => map2($a, $b, |u, v| {
                let ($x, $y) = (f32_of(u), f32_of(v));
                of_f32($e)
            }),
            _ => map2($a, $b, |u, v| {
                let ($x, $y) = (f64_of(u), f64_of(v));
                of_f64($e)
            }),
        }
    };
}
/// Applies an integer function in the width of `ty` (i32 or i64).
macro_rules! int2 {
    ($ty:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $e32:expr, $e64:expr) => {
        match $ty {
            Ty::I32 => map2($a, $b, |u, v| {
                let ($x, $y) = (i32_of(u), i32_of(v));
                of_i32($e32)
            }),
            _ => map2($a, $b, |u, v| {
                let ($x, $y) = (u as i64, v as i64);
                ($e64) as u64
            }),
        }
    };
}

/// PTX `min.f32`/`max.f32`: a NaN operand yields the other; -0 < +0.
fn ieee_min<T: PartialOrd + Copy>(x: T, y: T, x_nan: bool, y_nan: bool, x_neg: bool) -> T {
    if x_nan {
        y
    } else if y_nan || x < y || (x == y && x_neg) {
        x
    } else {
        y
    }
}
fn ieee_max<T: PartialOrd + Copy>(x: T, y: T, x_nan: bool, y_nan: bool, x_neg: bool) -> T {
    if x_nan {
        y
    } else if y_nan || x > y || (x == y && !x_neg) {
        x
    } else {
        y
    }
}

fn shift(ty: Ty, op: Op, x: u64, amount: u64) -> u64 {
    let width = if ty == Ty::I32 { 32 } else { 64 };
    // PTX takes the amount as unsigned and clamps it to the width.
    let s = (amount as u32).min(width);
    match (op, ty) {
        (Op::Shl, Ty::I32) => of_i32(if s >= 32 { 0 } else { (x as u32) << s } as i32),
        (Op::Shl, _) => {
            if s >= 64 {
                0
            } else {
                x << s
            }
        }
        (Op::ShrL, Ty::I32) => (if s >= 32 { 0 } else { (x as u32) >> s }) as u64,
        (Op::ShrL, _) => {
            if s >= 64 {
                0
            } else {
                x >> s
            }
        }
        (Op::ShrA, Ty::I32) => of_i32(i32_of(x) >> s.min(31)),
        (Op::ShrA, _) => ((x as i64) >> s.min(63)) as u64,
        _ => unreachable!("not a shift: {op:?}"),
    }
}

fn cmp_f<T: PartialOrd>(op: CmpOp, x: T, y: T) -> bool {
    match op {
        CmpOp::Eq => x == y,
        CmpOp::Ne => x != y,
        CmpOp::Lt => x < y,
        CmpOp::Le => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::Ge => x >= y,
    }
}

fn rz_i64_to_f64(v: i64) -> f64 {
    let r = v as f64;
    if (r as i128).abs() <= (v as i128).abs() {
        r
    } else {
        f64::from_bits(r.to_bits() - 1)
    }
}

/// Runs `prog` on `lanes` lanes; `args[i]` is the column of parameter `i`.
/// Returns one column per result.
pub(crate) fn run(prog: &Program, args: &[&Column], lanes: usize) -> Vec<Column> {
    let live = prog.live();
    let mut cols: Vec<Column> = Vec::with_capacity(prog.insts.len());
    for (i, inst) in prog.insts.iter().enumerate() {
        if !live[i] {
            cols.push(Vec::new());
            continue;
        }
        let a = |k: usize| &cols[inst.args[k].idx()];
        let arg_ty = |k: usize| prog.ty(inst.args[k]);
        let ty = inst.ty;
        let col: Column = match inst.op {
            Op::Param(n) => args[n as usize].iter().map(|&x| norm(ty, x)).collect(),
            Op::Const(bits) => vec![norm(ty, bits); lanes],
            Op::FAdd => float2!(ty, a(0), a(1), |x, y| x + y),
            Op::FSub => float2!(ty, a(0), a(1), |x, y| x - y),
            Op::FMul => float2!(ty, a(0), a(1), |x, y| x * y),
            Op::FDiv => float2!(ty, a(0), a(1), |x, y| x / y),
            Op::FFma => match ty {
                Ty::F32 => map3(a(0), a(1), a(2), |x, y, z| {
                    of_f32(f32_of(x).mul_add(f32_of(y), f32_of(z)))
                }),
                _ => map3(a(0), a(1), a(2), |x, y, z| {
                    of_f64(f64_of(x).mul_add(f64_of(y), f64_of(z)))
                }),
            },
            Op::FSqrt => float1!(ty, a(0), |x| x.sqrt()),
            Op::FNeg => float1!(ty, a(0), |x| -x),
            Op::FAbs => float1!(ty, a(0), |x| x.abs()),
            Op::FMin => float2!(ty, a(0), a(1), |x, y| ieee_min(
                x,
                y,
                x.is_nan(),
                y.is_nan(),
                x.is_sign_negative()
            )),
            Op::FMax => float2!(ty, a(0), a(1), |x, y| ieee_max(
                x,
                y,
                x.is_nan(),
                y.is_nan(),
                x.is_sign_negative()
            )),
            Op::FRint => float1!(ty, a(0), |x| x.round_ties_even()),
            Op::FTrunc => float1!(ty, a(0), |x| x.trunc()),
            Op::IsNan => match arg_ty(0) {
                Ty::F32 => map1(a(0), |x| f32_of(x).is_nan() as u64),
                _ => map1(a(0), |x| f64_of(x).is_nan() as u64),
            },
            Op::IAdd => int2!(ty, a(0), a(1), |x, y| x.wrapping_add(y), x.wrapping_add(y)),
            Op::ISub => int2!(ty, a(0), a(1), |x, y| x.wrapping_sub(y), x.wrapping_sub(y)),
            Op::IMul => int2!(ty, a(0), a(1), |x, y| x.wrapping_mul(y), x.wrapping_mul(y)),
            // The lowering never divides by 0 or -1; stay total anyway.
            Op::IDiv => int2!(
                ty,
                a(0),
                a(1),
                |x, y| x.checked_div(y).unwrap_or(0),
                x.checked_div(y).unwrap_or(0)
            ),
            Op::INeg => match ty {
                Ty::I32 => map1(a(0), |x| of_i32(i32_of(x).wrapping_neg())),
                _ => map1(a(0), |x| (x as i64).wrapping_neg() as u64),
            },
            Op::IAbs => match ty {
                Ty::I32 => map1(a(0), |x| of_i32(i32_of(x).wrapping_abs())),
                _ => map1(a(0), |x| (x as i64).wrapping_abs() as u64),
            },
            Op::IMin => int2!(ty, a(0), a(1), |x, y| x.min(y), x.min(y)),
            Op::IMax => int2!(ty, a(0), a(1), |x, y| x.max(y), x.max(y)),
            Op::And => map2(a(0), a(1), |x, y| x & y),
            Op::Or => map2(a(0), a(1), |x, y| x | y),
            Op::Not => map1(a(0), |x| norm(ty, !x)),
            Op::MulHiU => map2(a(0), a(1), |x, y| ((x as u128 * y as u128) >> 64) as u64),
            Op::Shl | Op::ShrA | Op::ShrL => map2(a(0), a(1), |x, s| shift(ty, inst.op, x, s)),
            Op::Cmp(op) => match arg_ty(0) {
                Ty::F32 => map2(a(0), a(1), |x, y| cmp_f(op, f32_of(x), f32_of(y)) as u64),
                Ty::F64 => map2(a(0), a(1), |x, y| cmp_f(op, f64_of(x), f64_of(y)) as u64),
                Ty::I32 => map2(a(0), a(1), |x, y| cmp_f(op, i32_of(x), i32_of(y)) as u64),
                Ty::I64 => map2(a(0), a(1), |x, y| cmp_f(op, x as i64, y as i64) as u64),
                Ty::Pred => map2(a(0), a(1), |x, y| cmp_f(op, x, y) as u64),
            },
            Op::Select | Op::SelectRare => {
                map3(a(0), a(1), a(2), |c, x, y| if c != 0 { x } else { y })
            }
            Op::FCvt(round) => match (arg_ty(0), ty) {
                (Ty::F32, Ty::F64) => map1(a(0), |x| of_f64(f32_of(x) as f64)),
                (Ty::F64, Ty::F32) => match round {
                    Round::Nearest => map1(a(0), |x| of_f32(f64_of(x) as f32)),
                    Round::Zero => map1(a(0), |x| of_f32(round::f64_to_f32_rz(f64_of(x)))),
                },
                (s, d) if s == d => a(0).clone(),
                (s, d) => unreachable!("float conversion {s:?} -> {d:?}"),
            },
            Op::IToF(round) => {
                let src = arg_ty(0);
                let int = |x: u64| -> i64 {
                    if src == Ty::I32 {
                        i32_of(x) as i64
                    } else {
                        x as i64
                    }
                };
                match (ty, round) {
                    (Ty::F32, Round::Nearest) => map1(a(0), |x| of_f32(int(x) as f32)),
                    (Ty::F32, Round::Zero) => map1(a(0), |x| of_f32(round::i64_to_f32_rz(int(x)))),
                    (_, Round::Nearest) => map1(a(0), |x| of_f64(int(x) as f64)),
                    (_, Round::Zero) => map1(a(0), |x| of_f64(rz_i64_to_f64(int(x)))),
                }
            }
            Op::FToI => match (arg_ty(0), ty) {
                (Ty::F32, Ty::I32) => map1(a(0), |x| of_i32(f32_of(x) as i32)),
                (Ty::F32, _) => map1(a(0), |x| (f32_of(x) as i64) as u64),
                (_, Ty::I32) => map1(a(0), |x| of_i32(f64_of(x) as i32)),
                (_, _) => map1(a(0), |x| (f64_of(x) as i64) as u64),
            },
            Op::ICvt => match (arg_ty(0), ty) {
                (Ty::I32, Ty::I64) => map1(a(0), |x| i32_of(x) as i64 as u64),
                (_, Ty::I32) => map1(a(0), |x| x & 0xffff_ffff),
                _ => a(0).clone(),
            },
            Op::Bits => map1(a(0), |x| norm(ty, x)),
            Op::RoundF16 => match arg_ty(0) {
                Ty::F32 => map1(a(0), |x| of_f32(half::f16::from_f32(f32_of(x)).to_f32())),
                _ => map1(a(0), |x| of_f32(round::f64_to_f16(f64_of(x)).to_f32())),
            },
            Op::RoundBf16 => map1(a(0), |x| (round::f32_to_bf16_bits(f32_of(x)) as u64) << 16),
        };
        debug_assert_eq!(col.len(), lanes, "{:?}", inst.op);
        cols.push(col);
    }
    prog.results.iter().map(|r| cols[r.idx()].clone()).collect()
}
