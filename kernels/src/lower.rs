//! Lowering of an [`ir::Kernel`](crate::ir::Kernel) to the machine-level
//! [`Program`]: dtype semantics (wrapping integers, `u8` masks, `f16` and
//! `bf16` rounding, Rust `as` casts) and the transcendental expansions.

use crate::ir::{Inst, Kernel, Scalar};
use crate::mathfn;
use crate::ops::{BinaryOp, CmpOp, UnaryOp};
use crate::prim::{Builder, Program, Reg, Round, Ty};
use tensorfn_core::ops::ElemMath;
use tensorfn_core::DTypeKind;

/// The program of one element of `kernel`: one parameter per input (in the
/// register type of its dtype), one result (the output element).
pub(crate) fn lower(kernel: &Kernel) -> Program {
    let mut b = Builder::new();
    let params: Vec<Reg> = kernel
        .inputs()
        .iter()
        .map(|&d| b.param(Ty::of(d)))
        .collect();
    let mut vals: Vec<Reg> = Vec::with_capacity(kernel.insts().len());
    let dt = |v: crate::ir::Value| kernel.dtype(v);
    for inst in kernel.insts() {
        let r = match *inst {
            Inst::Input { index, .. } => params[index],
            Inst::Const { value, dtype } => constant(&mut b, value, dtype),
            Inst::Unary { op, x } => unary(&mut b, op, vals[x.index()], dt(x)),
            Inst::Binary { op, a, b: rhs } => {
                binary(&mut b, op, vals[a.index()], vals[rhs.index()], dt(a))
            }
            Inst::Compare { op, a, b: rhs } => {
                compare(&mut b, op, vals[a.index()], vals[rhs.index()], dt(a))
            }
            Inst::Select {
                cond,
                on_true,
                on_false,
            } => b.select(
                vals[cond.index()],
                vals[on_true.index()],
                vals[on_false.index()],
            ),
            Inst::Cast { x, to } => cast(&mut b, vals[x.index()], dt(x), to),
        };
        vals.push(r);
    }
    let out = vals[kernel.output().index()];
    b.finish(vec![out])
}

fn constant(b: &mut Builder, value: Scalar, dtype: DTypeKind) -> Reg {
    let ty = Ty::of(dtype);
    match value {
        Scalar::Float(v) => b.cf(ty, v),
        Scalar::Int(v) => b.ci(ty, v),
        Scalar::Bool(v) => b.cpred(v),
    }
}

/// The registers of one dtype as [`ElemMath`] values: a composite op of
/// the catalogue lowers through its one definition, each primitive it uses
/// through this module's expansion of it.
struct Regs<'b> {
    b: &'b mut Builder,
}

impl ElemMath for Regs<'_> {
    type V = Reg;
    type B = Reg;
    fn lit(&mut self, like: Reg, v: f64) -> Reg {
        let ty = self.b.ty(like);
        if ty == Ty::F32 {
            // The constant as the dtype holds it, as on the CPU.
            self.b.cf(ty, v as f32 as f64)
        } else if ty.is_float() {
            self.b.cf(ty, v)
        } else {
            self.b.ci(ty, v as i64)
        }
    }
    fn unary(&mut self, op: UnaryOp, x: Reg) -> Reg {
        if self.b.ty(x).is_float() {
            float_unary(self.b, op, x)
        } else {
            int_unary(self.b, op, x)
        }
    }
    fn binary(&mut self, op: BinaryOp, a: Reg, b: Reg) -> Reg {
        if self.b.ty(a).is_float() {
            float_binary(self.b, op, a, b)
        } else {
            int_binary(self.b, op, a, b)
        }
    }
    fn compare(&mut self, op: CmpOp, a: Reg, b: Reg) -> Reg {
        self.b.cmp(op, a, b)
    }
    fn select(&mut self, c: Reg, a: Reg, b: Reg) -> Reg {
        self.b.select(c, a, b)
    }
}

/// The catalogue entries with math of their own (`math: f`): `f` from
/// [`mathfn`], one arm per entry.
macro_rules! math_unary {
    ($($(#[doc = $doc:literal])* $V:ident => $m:ident {
        ints: $ints:literal, exact: $exact:literal, domain: ($lo:expr, $hi:expr),
        reference: |$rx:ident| $reference:expr,
        $(composite: |$cm:ident, $cx:ident| $composite:block,)?
        $(math: $mf:ident,)?
    })*) => {
        /// `op(x)` through the op's own PTX expansion, for the ops with one.
        fn math_unary(b: &mut Builder, op: UnaryOp, x: Reg) -> Option<Reg> {
            match op {
                $($(UnaryOp::$V => Some(mathfn::$mf(b, x)),)?)*
                _ => None,
            }
        }
    };
}
tensorfn_core::for_each_unary_op!(math_unary);

pub(crate) fn float_unary(b: &mut Builder, op: UnaryOp, x: Reg) -> Reg {
    if let Some(r) = op.composite(&mut Regs { b }, x) {
        return r;
    }
    if let Some(r) = math_unary(b, op, x) {
        return r;
    }
    let ty = b.ty(x);
    match op {
        UnaryOp::Neg => b.fneg(x),
        UnaryOp::Abs => b.fabs(x),
        UnaryOp::Relu => {
            let zero = b.cf(ty, 0.0);
            nan_max_min(b, true, x, zero)
        }
        UnaryOp::Sigmoid => mathfn::sigmoid(b, x),
        UnaryOp::Tanh => mathfn::tanh(b, x),
        UnaryOp::Exp => mathfn::exp(b, x),
        UnaryOp::Log => mathfn::log(b, x),
        UnaryOp::Sin => mathfn::sin(b, x),
        UnaryOp::Cos => mathfn::cos(b, x),
        UnaryOp::Sqrt => b.sqrt(x),
        UnaryOp::Rsqrt => {
            let one = b.cf(ty, 1.0);
            let s = b.sqrt(x);
            b.div(one, s)
        }
        UnaryOp::Square => b.mul(x, x),
        UnaryOp::Recip => {
            let one = b.cf(ty, 1.0);
            b.div(one, x)
        }
        UnaryOp::Gelu => mathfn::gelu(b, x),
        UnaryOp::Silu => mathfn::silu(b, x),
        UnaryOp::Trunc => b.trunc(x),
        UnaryOp::Round => b.rint(x),
        // Composites and the ops with math of their own, lowered above
        // (every op of the catalogue is one of the three kinds).
        _ => unreachable!("{} is lowered from its catalogue entry", op.name()),
    }
}

/// `op(x)` on an `i32`/`i64` register, for the ops integers have (the
/// type check lets no other through; `u8` is masked by the caller).
fn int_unary(b: &mut Builder, op: UnaryOp, x: Reg) -> Reg {
    if let Some(r) = op.composite(&mut Regs { b }, x) {
        return r;
    }
    match op {
        UnaryOp::Neg => b.ineg(x),
        UnaryOp::Abs => b.iabs(x),
        UnaryOp::Relu => {
            let zero = b.ci(b.ty(x), 0);
            b.imax(x, zero)
        }
        UnaryOp::Square => b.imul(x, x),
        // Integers are integral already.
        UnaryOp::Trunc | UnaryOp::Round => x,
        _ => unreachable!("{} on an integer passed the type check", op.name()),
    }
}

fn unary(b: &mut Builder, op: UnaryOp, x: Reg, dtype: DTypeKind) -> Reg {
    use DTypeKind::*;
    match dtype {
        F32 | F64 => float_unary(b, op, x),
        F16 | BF16 => {
            // The result is rounded to 16 bits right below: the shorter
            // expansions suffice (see `mathfn::Fit`).
            let fit = if dtype == F16 {
                mathfn::Fit::F16
            } else {
                mathfn::Fit::Bf16
            };
            let r = match mathfn::unary_fit(b, op, x, fit) {
                Some(r) => r,
                None => float_unary(b, op, x),
            };
            if op.is_exact() {
                r
            } else {
                round_to(b, r, dtype)
            }
        }
        I32 | I64 | U8 => {
            let r = int_unary(b, op, x);
            if dtype == U8 {
                mask_u8(b, r)
            } else {
                r
            }
        }
        Bool => unreachable!("{} on bool passed the type check", op.name()),
    }
}

fn mask_u8(b: &mut Builder, x: Reg) -> Reg {
    let m = b.ci(Ty::I32, 0xff);
    b.and(x, m)
}

/// `max`/`min` that return NaN when either operand is NaN.
pub(crate) fn nan_max_min(b: &mut Builder, max: bool, x: Reg, y: Reg) -> Reg {
    let m = if max { b.fmax(x, y) } else { b.fmin(x, y) };
    let nx = b.is_nan(x);
    let ny = b.is_nan(y);
    let either = b.or(nx, ny);
    let nan = b.add(x, y);
    b.select(either, nan, m)
}

pub(crate) fn float_binary(b: &mut Builder, op: BinaryOp, x: Reg, y: Reg) -> Reg {
    if let Some(r) = op.composite(&mut Regs { b }, x, y) {
        return r;
    }
    match op {
        BinaryOp::Add => b.add(x, y),
        BinaryOp::Sub => b.sub(x, y),
        BinaryOp::Mul => b.mul(x, y),
        BinaryOp::Div => b.div(x, y),
        BinaryOp::Max => nan_max_min(b, true, x, y),
        BinaryOp::Min => nan_max_min(b, false, x, y),
        BinaryOp::Pow => mathfn::pow(b, x, y),
        BinaryOp::LeakyRelu | BinaryOp::Elu => unreachable!("{} is a composite", op.name()),
    }
}

/// Truncating division with `x / 0 = 0` and `MIN / -1 = MIN` (wrapping).
fn int_div(b: &mut Builder, x: Reg, y: Reg) -> Reg {
    let ty = b.ty(x);
    let zero = b.ci(ty, 0);
    let one = b.ci(ty, 1);
    let mone = b.ci(ty, -1);
    let is_zero = b.cmp(CmpOp::Eq, y, zero);
    let is_mone = b.cmp(CmpOp::Eq, y, mone);
    let special = b.or(is_zero, is_mone);
    let safe = b.select(special, one, y);
    let q = b.idiv(x, safe);
    let nx = b.ineg(x);
    let q = b.select(is_mone, nx, q);
    b.select(is_zero, zero, q)
}

fn binary(b: &mut Builder, op: BinaryOp, x: Reg, y: Reg, dtype: DTypeKind) -> Reg {
    use DTypeKind::*;
    match dtype {
        F32 | F64 => float_binary(b, op, x, y),
        F16 | BF16 => {
            let r = float_binary(b, op, x, y);
            if op.is_exact() {
                r
            } else {
                round_to(b, r, dtype)
            }
        }
        I32 | I64 | U8 => {
            let r = int_binary(b, op, x, y);
            if dtype == U8 && matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul) {
                mask_u8(b, r)
            } else {
                r
            }
        }
        Bool => unreachable!("{} on bool passed the type check", op.name()),
    }
}

/// `op(x, y)` on `i32`/`i64` registers (`u8` is masked by the caller).
fn int_binary(b: &mut Builder, op: BinaryOp, x: Reg, y: Reg) -> Reg {
    match op {
        BinaryOp::Add => b.iadd(x, y),
        BinaryOp::Sub => b.isub(x, y),
        BinaryOp::Mul => b.imul(x, y),
        BinaryOp::Div => int_div(b, x, y),
        BinaryOp::Max => b.imax(x, y),
        BinaryOp::Min => b.imin(x, y),
        _ => unreachable!("{} on an integer passed the type check", op.name()),
    }
}

fn compare(b: &mut Builder, op: CmpOp, x: Reg, y: Reg, dtype: DTypeKind) -> Reg {
    if dtype == DTypeKind::Bool {
        let x = bool_to_int(b, x, Ty::I32);
        let y = bool_to_int(b, y, Ty::I32);
        return b.cmp(op, x, y);
    }
    b.cmp(op, x, y)
}

fn bool_to_int(b: &mut Builder, p: Reg, ty: Ty) -> Reg {
    let one = b.ci(ty, 1);
    let zero = b.ci(ty, 0);
    b.select(p, one, zero)
}

/// Rounds an f32 or f64 register to `dtype` (f16 or bf16), giving the f32
/// register holding it.
pub(crate) fn round_to(b: &mut Builder, x: Reg, dtype: DTypeKind) -> Reg {
    match dtype {
        DTypeKind::F16 => b.round_f16(x),
        DTypeKind::BF16 => {
            let x = if b.ty(x) == Ty::F64 {
                f64_to_f32_odd(b, x)
            } else {
                x
            };
            bf16_round(b, x)
        }
        _ => unreachable!("round_to {dtype}"),
    }
}

/// f32 -> nearest bf16 (ties to even; NaN quieted), kept in an f32: one
/// instruction, which the PTX back-end expands for targets without
/// `cvt.rn.bf16`.
fn bf16_round(b: &mut Builder, x: Reg) -> Reg {
    b.round_bf16(x)
}

/// f64 -> f32 rounding to odd: toward zero, last bit set when inexact.
fn f64_to_f32_odd(b: &mut Builder, x: Reg) -> Reg {
    let r = b.fcvt(x, Ty::F32, Round::Zero);
    let back = b.fcvt(r, Ty::F64, Round::Nearest);
    let inexact = b.cmp(CmpOp::Ne, back, x);
    set_sticky(b, r, inexact)
}

/// Integer -> f32 rounding to odd.
fn int_to_f32_odd(b: &mut Builder, x: Reg) -> Reg {
    let ity = b.ty(x);
    let r = b.itof(x, Ty::F32, Round::Zero);
    let back = b.ftoi(r, ity);
    let inexact = b.cmp(CmpOp::Ne, back, x);
    set_sticky(b, r, inexact)
}

fn set_sticky(b: &mut Builder, r: Reg, inexact: Reg) -> Reg {
    let bits = b.bits(r);
    let one = b.ci(Ty::I32, 1);
    let odd = b.or(bits, one);
    let bits = b.select(inexact, odd, bits);
    b.bits(bits)
}

/// Conversion with Rust `as` semantics (and one rounding to nearest).
pub(crate) fn cast(b: &mut Builder, x: Reg, from: DTypeKind, to: DTypeKind) -> Reg {
    use DTypeKind::*;
    if from == to {
        return x;
    }
    let src = Ty::of(from);
    let dst = Ty::of(to);
    if to == Bool {
        let zero = match src {
            Ty::F32 | Ty::F64 => b.cf(src, 0.0),
            _ => b.ci(src, 0),
        };
        return b.cmp(CmpOp::Ne, x, zero);
    }
    if from == Bool {
        return match dst {
            Ty::F32 | Ty::F64 => {
                let one = b.cf(dst, 1.0);
                let zero = b.cf(dst, 0.0);
                b.select(x, one, zero)
            }
            _ => bool_to_int(b, x, dst),
        };
    }
    match (from.is_float(), to.is_float()) {
        (true, true) => match to {
            F32 if src == Ty::F32 => x,
            F32 => b.fcvt(x, Ty::F32, Round::Nearest),
            F64 => b.fcvt(x, Ty::F64, Round::Nearest),
            F16 | BF16 => round_to(b, x, to),
            _ => unreachable!(),
        },
        (true, false) => match to {
            I32 | I64 => {
                // NaN -> 0 explicitly: `cvt.rzi` gives the minimum integer
                // for NaN on some conversions.
                let i = b.ftoi(x, dst);
                let nan = b.is_nan(x);
                let zero = b.ci(dst, 0);
                b.select(nan, zero, i)
            }
            U8 => {
                let i = b.ftoi(x, Ty::I32);
                let zero = b.ci(Ty::I32, 0);
                let max = b.ci(Ty::I32, 255);
                let i = b.imax(i, zero);
                b.imin(i, max)
            }
            _ => unreachable!(),
        },
        (false, true) => match to {
            F32 | F64 => b.itof(x, dst, Round::Nearest),
            F16 => {
                let f = b.itof(x, Ty::F32, Round::Nearest);
                b.round_f16(f)
            }
            BF16 => {
                let f = if from == U8 {
                    b.itof(x, Ty::F32, Round::Nearest)
                } else {
                    int_to_f32_odd(b, x)
                };
                bf16_round(b, f)
            }
            _ => unreachable!(),
        },
        (false, false) => match to {
            I32 | I64 => b.icvt(x, dst),
            U8 => {
                let i = b.icvt(x, Ty::I32);
                mask_u8(b, i)
            }
            _ => unreachable!(),
        },
    }
}
