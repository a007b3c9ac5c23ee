//! The lowered form every back-end executes: straight-line SSA over machine
//! types (`f32`, `f64`, `i32`, `i64`, predicates), made only of operations
//! whose result is fully specified by IEEE 754 or two's complement, so the
//! PTX (`add.rn`, `fma.rn`, `div.rn`, `sqrt.rn`, `cvt.rni`, ...) and the
//! interpreter compute the same bits. Transcendental functions are
//! sequences of these (see `mathfn`), never approximate instructions.
//!
//! `f16`/`bf16` values live in `f32` registers (already rounded to their
//! dtype), `u8` in `i32` (0..=255) and `bool` in predicates.

use tensorfn_core::DTypeKind;

/// A machine type of the lowered program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Ty {
    F32,
    F64,
    I32,
    I64,
    Pred,
}

impl Ty {
    /// The register type that holds values of `dtype`.
    pub(crate) fn of(dtype: DTypeKind) -> Ty {
        match dtype {
            DTypeKind::F32 | DTypeKind::F16 | DTypeKind::BF16 => Ty::F32,
            DTypeKind::F64 => Ty::F64,
            DTypeKind::I32 | DTypeKind::U8 => Ty::I32,
            DTypeKind::I64 => Ty::I64,
            DTypeKind::Bool => Ty::Pred,
        }
    }

    pub(crate) fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F64)
    }
}

/// A value of the lowered program (index of its instruction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Reg(pub(crate) u32);

impl Reg {
    pub(crate) fn idx(self) -> usize {
        self.0 as usize
    }
}

/// Comparison predicates; on floats every one is ordered (false on NaN)
/// but `Ne`, which is unordered (true on NaN), like IEEE `!=`.
pub(crate) use crate::ops::CmpOp;

/// Rounding of a conversion to a float type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Round {
    /// To nearest, ties to even.
    Nearest,
    /// Toward zero.
    Zero,
}

/// An operation. Arity and operand types are fixed per variant; the result
/// type is the instruction's `ty`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    /// Program argument `n` (an input element, a loop-carried value, ...).
    Param(u16),
    /// A constant, as the bits of `ty` (`f32` bits in the low 32 bits).
    Const(u64),
    // --- floats (f32 or f64), correctly rounded to nearest even
    FAdd,
    FSub,
    FMul,
    FDiv,
    /// `a * b + c`, one rounding.
    FFma,
    FSqrt,
    FNeg,
    FAbs,
    /// IEEE minNum/maxNum: a NaN operand yields the other one.
    FMin,
    FMax,
    /// Round to an integral value: nearest even, toward zero.
    FRint,
    FTrunc,
    /// Predicate: `a` is NaN.
    IsNan,
    // --- integers (i32 or i64), two's complement, wrapping
    IAdd,
    ISub,
    IMul,
    /// Truncating division; the lowering guarantees the divisor is neither
    /// 0 nor -1.
    IDiv,
    INeg,
    IAbs,
    IMin,
    IMax,
    And,
    Or,
    Not,
    /// Shifts by an `i32` amount; amounts at or beyond the width give 0
    /// (or the sign for `ShrA`), as PTX clamps them.
    Shl,
    ShrA,
    ShrL,
    /// High 64 bits of the unsigned 128-bit product (i64 only).
    MulHiU,
    // --- comparisons and selection
    Cmp(CmpOp),
    /// `args[0] ? args[1] : args[2]`.
    Select,
    /// `args[0] ? args[1] : args[2]` where `args[0]` is rarely true: the
    /// PTX computes what only `args[1]` needs under a branch.
    SelectRare,
    // --- conversions (source type from the operand, target from `ty`)
    /// float -> float: f32->f64 exact, f64->f32 rounded.
    FCvt(Round),
    /// int -> float.
    IToF(Round),
    /// float -> int, truncating, saturating. The GPU's result for NaN
    /// depends on the types (0 or the minimum integer): every lowering that
    /// can see a NaN tests for it; the interpreter gives 0.
    FToI,
    /// int -> int: sign-extend or wrap.
    ICvt,
    /// Reinterpret bits (f32 <-> i32, f64 <-> i64).
    Bits,
    /// Round an f32 or f64 to the nearest f16, result as f32.
    RoundF16,
    /// Round an f32 to the nearest bf16 (ties to even), result as f32. A
    /// NaN stays NaN: the interpreter keeps its sign and top payload bits
    /// (quieted); sm_80's `cvt.rn.bf16` may give another NaN, like every
    /// NaN-producing instruction (NaN payloads are not part of the
    /// contract).
    RoundBf16,
}

/// One instruction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Inst {
    pub(crate) op: Op,
    pub(crate) ty: Ty,
    pub(crate) args: Vec<Reg>,
}

/// A straight-line program: parameters in, results out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Program {
    pub(crate) params: Vec<Ty>,
    pub(crate) insts: Vec<Inst>,
    pub(crate) results: Vec<Reg>,
}

impl Program {
    pub(crate) fn ty(&self, r: Reg) -> Ty {
        self.insts[r.idx()].ty
    }

    /// Which instructions the results depend on.
    pub(crate) fn live(&self) -> Vec<bool> {
        self.live_except(&[])
    }

    /// Like [`live`](Self::live), ignoring the rare operands of the
    /// `SelectRare`s at `skip`: what is live only through those operands is
    /// the work to put under their branch.
    pub(crate) fn live_except(&self, skip: &[usize]) -> Vec<bool> {
        let mut live = vec![false; self.insts.len()];
        for r in &self.results {
            live[r.idx()] = true;
        }
        for i in (0..self.insts.len()).rev() {
            if live[i] {
                for (k, a) in self.insts[i].args.iter().enumerate() {
                    if k == 1 && skip.contains(&i) {
                        continue;
                    }
                    live[a.idx()] = true;
                }
            }
        }
        live
    }
}

/// Appends instructions to a [`Program`], deduplicating constants and
/// checking operand types (a mismatch is a bug in a lowering, hence the
/// debug assertions).
#[derive(Debug, Default)]
pub(crate) struct Builder {
    prog: Program,
    consts: std::collections::HashMap<(Ty, u64), Reg>,
}

impl Builder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn finish(mut self, results: Vec<Reg>) -> Program {
        self.prog.results = results;
        self.prog
    }

    pub(crate) fn ty(&self, r: Reg) -> Ty {
        self.prog.ty(r)
    }

    pub(crate) fn param(&mut self, ty: Ty) -> Reg {
        let n = self.prog.params.len() as u16;
        self.prog.params.push(ty);
        self.push(Op::Param(n), ty, vec![])
    }

    pub(crate) fn push(&mut self, op: Op, ty: Ty, args: Vec<Reg>) -> Reg {
        let r = Reg(self.prog.insts.len() as u32);
        self.prog.insts.push(Inst { op, ty, args });
        r
    }

    // ---- constants
    pub(crate) fn konst(&mut self, ty: Ty, bits: u64) -> Reg {
        if let Some(&r) = self.consts.get(&(ty, bits)) {
            return r;
        }
        let r = self.push(Op::Const(bits), ty, vec![]);
        self.consts.insert((ty, bits), r);
        r
    }

    /// A float constant of type `ty`; `v` must be exact in `ty`.
    pub(crate) fn cf(&mut self, ty: Ty, v: f64) -> Reg {
        match ty {
            Ty::F32 => {
                debug_assert!(v.is_nan() || (v as f32) as f64 == v, "{v} not an f32");
                self.konst(ty, (v as f32).to_bits() as u64)
            }
            Ty::F64 => self.konst(ty, v.to_bits()),
            _ => unreachable!("float constant of type {ty:?}"),
        }
    }

    pub(crate) fn ci(&mut self, ty: Ty, v: i64) -> Reg {
        match ty {
            Ty::I32 => self.konst(ty, v as i32 as u32 as u64),
            Ty::I64 => self.konst(ty, v as u64),
            Ty::Pred => self.konst(ty, (v != 0) as u64),
            _ => unreachable!("integer constant of type {ty:?}"),
        }
    }

    pub(crate) fn cpred(&mut self, v: bool) -> Reg {
        self.konst(Ty::Pred, v as u64)
    }

    // ---- helpers
    fn same(&mut self, op: Op, a: Reg, b: Reg) -> Reg {
        let t = self.ty(a);
        debug_assert_eq!(t, self.ty(b), "{op:?} operands");
        self.push(op, t, vec![a, b])
    }

    fn one(&mut self, op: Op, a: Reg) -> Reg {
        let t = self.ty(a);
        self.push(op, t, vec![a])
    }

    // ---- floats
    pub(crate) fn add(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::FAdd, a, b)
    }
    pub(crate) fn sub(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::FSub, a, b)
    }
    pub(crate) fn mul(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::FMul, a, b)
    }
    pub(crate) fn div(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::FDiv, a, b)
    }
    pub(crate) fn fma(&mut self, a: Reg, b: Reg, c: Reg) -> Reg {
        let t = self.ty(a);
        debug_assert!(t == self.ty(b) && t == self.ty(c));
        self.push(Op::FFma, t, vec![a, b, c])
    }
    pub(crate) fn sqrt(&mut self, a: Reg) -> Reg {
        self.one(Op::FSqrt, a)
    }
    pub(crate) fn fneg(&mut self, a: Reg) -> Reg {
        self.one(Op::FNeg, a)
    }
    pub(crate) fn fabs(&mut self, a: Reg) -> Reg {
        self.one(Op::FAbs, a)
    }
    pub(crate) fn fmin(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::FMin, a, b)
    }
    pub(crate) fn fmax(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::FMax, a, b)
    }
    pub(crate) fn rint(&mut self, a: Reg) -> Reg {
        self.one(Op::FRint, a)
    }
    pub(crate) fn trunc(&mut self, a: Reg) -> Reg {
        self.one(Op::FTrunc, a)
    }
    pub(crate) fn is_nan(&mut self, a: Reg) -> Reg {
        self.push(Op::IsNan, Ty::Pred, vec![a])
    }

    // ---- integers and bits
    pub(crate) fn iadd(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::IAdd, a, b)
    }
    pub(crate) fn isub(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::ISub, a, b)
    }
    pub(crate) fn imul(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::IMul, a, b)
    }
    pub(crate) fn idiv(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::IDiv, a, b)
    }
    pub(crate) fn ineg(&mut self, a: Reg) -> Reg {
        self.one(Op::INeg, a)
    }
    pub(crate) fn iabs(&mut self, a: Reg) -> Reg {
        self.one(Op::IAbs, a)
    }
    pub(crate) fn imin(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::IMin, a, b)
    }
    pub(crate) fn imax(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::IMax, a, b)
    }
    pub(crate) fn and(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::And, a, b)
    }
    pub(crate) fn or(&mut self, a: Reg, b: Reg) -> Reg {
        self.same(Op::Or, a, b)
    }
    pub(crate) fn not(&mut self, a: Reg) -> Reg {
        self.one(Op::Not, a)
    }
    fn shift(&mut self, op: Op, a: Reg, amount: Reg) -> Reg {
        debug_assert_eq!(self.ty(amount), Ty::I32, "shift amount");
        let t = self.ty(a);
        self.push(op, t, vec![a, amount])
    }
    pub(crate) fn shl(&mut self, a: Reg, amount: Reg) -> Reg {
        self.shift(Op::Shl, a, amount)
    }
    pub(crate) fn shra(&mut self, a: Reg, amount: Reg) -> Reg {
        self.shift(Op::ShrA, a, amount)
    }
    pub(crate) fn shrl(&mut self, a: Reg, amount: Reg) -> Reg {
        self.shift(Op::ShrL, a, amount)
    }
    pub(crate) fn mulhi_u(&mut self, a: Reg, b: Reg) -> Reg {
        debug_assert_eq!(self.ty(a), Ty::I64);
        self.same(Op::MulHiU, a, b)
    }
    pub(crate) fn shl_c(&mut self, a: Reg, amount: i64) -> Reg {
        let k = self.ci(Ty::I32, amount);
        self.shl(a, k)
    }
    pub(crate) fn shra_c(&mut self, a: Reg, amount: i64) -> Reg {
        let k = self.ci(Ty::I32, amount);
        self.shra(a, k)
    }
    pub(crate) fn shrl_c(&mut self, a: Reg, amount: i64) -> Reg {
        let k = self.ci(Ty::I32, amount);
        self.shrl(a, k)
    }

    // ---- comparisons and selection
    pub(crate) fn cmp(&mut self, op: CmpOp, a: Reg, b: Reg) -> Reg {
        debug_assert_eq!(self.ty(a), self.ty(b), "{op:?} operands");
        self.push(Op::Cmp(op), Ty::Pred, vec![a, b])
    }
    pub(crate) fn select(&mut self, c: Reg, a: Reg, b: Reg) -> Reg {
        debug_assert_eq!(self.ty(c), Ty::Pred);
        let t = self.ty(a);
        debug_assert_eq!(t, self.ty(b), "select branches");
        if t == Ty::Pred {
            // (c & a) | (!c & b): PTX has no select of predicates.
            let x = self.same(Op::And, c, a);
            let nc = self.one(Op::Not, c);
            let y = self.same(Op::And, nc, b);
            return self.same(Op::Or, x, y);
        }
        self.push(Op::Select, t, vec![c, a, b])
    }

    /// `c ? rare : common`, computing `rare`'s own work only where `c`.
    pub(crate) fn select_rare(&mut self, c: Reg, rare: Reg, common: Reg) -> Reg {
        debug_assert_eq!(self.ty(c), Ty::Pred);
        let t = self.ty(rare);
        debug_assert!(
            t == self.ty(common) && t != Ty::Pred,
            "select_rare branches"
        );
        self.push(Op::SelectRare, t, vec![c, rare, common])
    }

    // ---- conversions
    pub(crate) fn fcvt(&mut self, a: Reg, to: Ty, round: Round) -> Reg {
        self.push(Op::FCvt(round), to, vec![a])
    }
    pub(crate) fn itof(&mut self, a: Reg, to: Ty, round: Round) -> Reg {
        self.push(Op::IToF(round), to, vec![a])
    }
    pub(crate) fn ftoi(&mut self, a: Reg, to: Ty) -> Reg {
        self.push(Op::FToI, to, vec![a])
    }
    pub(crate) fn icvt(&mut self, a: Reg, to: Ty) -> Reg {
        if self.ty(a) == to {
            return a;
        }
        self.push(Op::ICvt, to, vec![a])
    }
    pub(crate) fn bits(&mut self, a: Reg) -> Reg {
        let to = match self.ty(a) {
            Ty::F32 => Ty::I32,
            Ty::I32 => Ty::F32,
            Ty::F64 => Ty::I64,
            Ty::I64 => Ty::F64,
            Ty::Pred => unreachable!("bits of a predicate"),
        };
        self.push(Op::Bits, to, vec![a])
    }
    pub(crate) fn round_f16(&mut self, a: Reg) -> Reg {
        self.push(Op::RoundF16, Ty::F32, vec![a])
    }
    pub(crate) fn round_bf16(&mut self, a: Reg) -> Reg {
        debug_assert_eq!(self.ty(a), Ty::F32, "bf16 rounding from f32 only");
        self.push(Op::RoundBf16, Ty::F32, vec![a])
    }
}
