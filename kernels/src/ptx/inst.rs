//! One lowered program, written out inline as PTX instructions. Every
//! float instruction carries an explicit rounding mode (`.rn`), which also
//! stops `ptxas` from contracting `mul` + `add` into `fma`: the GPU then
//! rounds exactly where the interpreter does.

use super::body::{Body, Class};
use super::memory::{f32_to_half, half_to_f32};
use super::Target;
use crate::prim::{CmpOp, Op, Program, Round, Ty};
use tensorfn_core::DTypeKind;

/// PTX type suffix of a float type.
fn fsuf(ty: Ty) -> &'static str {
    match ty {
        Ty::F32 => "f32",
        Ty::F64 => "f64",
        _ => unreachable!("not a float: {ty:?}"),
    }
}

/// Signed integer suffix.
fn ssuf(ty: Ty) -> &'static str {
    match ty {
        Ty::I32 => "s32",
        Ty::I64 => "s64",
        _ => unreachable!("not an integer: {ty:?}"),
    }
}

/// Bit-size suffix.
fn bsuf(ty: Ty) -> &'static str {
    match ty {
        Ty::I32 | Ty::F32 => "b32",
        Ty::I64 | Ty::F64 => "b64",
        Ty::Pred => "pred",
    }
}

fn usuf(ty: Ty) -> &'static str {
    match ty {
        Ty::I32 => "u32",
        Ty::I64 => "u64",
        _ => unreachable!("not an integer: {ty:?}"),
    }
}

/// A PTX immediate for constant `bits` of type `ty`.
pub(crate) fn immediate(ty: Ty, bits: u64) -> String {
    match ty {
        Ty::F32 => format!("0f{:08X}", bits as u32),
        Ty::F64 => format!("0d{bits:016X}"),
        Ty::I32 => format!("0x{:08X}", bits as u32),
        Ty::I64 => format!("0x{bits:016X}"),
        Ty::Pred => unreachable!("predicate immediates are built with setp"),
    }
}

fn cmp_name(op: CmpOp, float: bool) -> &'static str {
    match (op, float) {
        (CmpOp::Eq, _) => "eq",
        (CmpOp::Ne, true) => "neu",
        (CmpOp::Ne, false) => "ne",
        (CmpOp::Lt, _) => "lt",
        (CmpOp::Le, _) => "le",
        (CmpOp::Gt, _) => "gt",
        (CmpOp::Ge, _) => "ge",
    }
}

/// `SelectRare`s sharing one condition, whose rare-only work can go
/// under a branch at the first of them.
struct RareGroup {
    /// The selects, in program order.
    members: Vec<usize>,
    /// Instructions needed only by the members' rare operands.
    deferred: Vec<usize>,
}

/// Groups the live `SelectRare`s by condition; a group whose deferred
/// work would need a value computed after its first select is left out
/// (its selects then compute both sides, like `Select`).
fn rare_groups(prog: &Program, live: &[bool]) -> Vec<RareGroup> {
    let mut by_cond: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, inst) in prog.insts.iter().enumerate() {
        if live[i] && inst.op == Op::SelectRare {
            let c = inst.args[0].idx();
            match by_cond.iter_mut().find(|(k, _)| *k == c) {
                Some((_, v)) => v.push(i),
                None => by_cond.push((c, vec![i])),
            }
        }
    }
    let mut groups = Vec::new();
    for (_, members) in by_cond {
        let first = members[0];
        let without = prog.live_except(&members);
        let deferred: Vec<usize> = (0..prog.insts.len())
            .filter(|&i| live[i] && !without[i])
            .collect();
        let ready = |r: usize| r < first || deferred.contains(&r);
        let commons_ready = members.iter().all(|&m| prog.insts[m].args[2].idx() < first);
        let deps_ready = deferred
            .iter()
            .all(|&d| prog.insts[d].args.iter().all(|a| ready(a.idx())));
        if commons_ready && deps_ready {
            groups.push(RareGroup { members, deferred });
        }
    }
    groups
}

/// The 16-bit type a `RoundF16` / `RoundBf16` rounds to.
fn rounds_to(op: Op) -> Option<DTypeKind> {
    match op {
        Op::RoundF16 => Some(DTypeKind::F16),
        Op::RoundBf16 => Some(DTypeKind::BF16),
        _ => None,
    }
}

/// The roundings to f16 or bf16 that compute in 16-bit registers: those
/// of an `f32` `+`, `-` or `*` of two values of that type become one f16
/// (or bf16) instruction with the same bits. The f32 result of such an
/// op, rounded to the 16-bit type, is the correctly rounded 16-bit result:
/// 24 bits hold at least 2 x 11 + 2, so rounding twice gives what
/// rounding once does, and bf16 shares f32's exponent range, so even its
/// subnormals round the same. The conversions to f32 and back disappear.
/// bf16 needs `fma.rn.bf16` (sm_80). Returns, per instruction, whether it
/// is such a rounding, and whether it is an op only such a rounding uses
/// (then not emitted).
fn native_halves(
    body: &Body,
    prog: &Program,
    args: &[String],
    live: &[bool],
) -> (Vec<bool>, Vec<bool>) {
    let n = prog.insts.len();
    let bf16 = body.target() >= Target::Sm80;
    // The 16-bit type each f32 value is known to hold (constants are
    // checked against the type of the op that uses them).
    let mut holds: Vec<Option<DTypeKind>> = vec![None; n];
    let mut uses = vec![0usize; n];
    for r in &prog.results {
        uses[r.idx()] += 1;
    }
    for (i, inst) in prog.insts.iter().enumerate() {
        if !live[i] {
            continue;
        }
        for a in &inst.args {
            uses[a.idx()] += 1;
        }
        if inst.ty != Ty::F32 {
            continue;
        }
        holds[i] = match inst.op {
            Op::Param(k) => [DTypeKind::F16, DTypeKind::BF16]
                .into_iter()
                .find(|&d| body.half_of(&args[k as usize], d).is_some()),
            op => rounds_to(op),
        };
    }
    let exactly = |r: usize, d: DTypeKind| match prog.insts[r].op {
        Op::Const(bits) => {
            let v = f32::from_bits(bits as u32);
            match d {
                DTypeKind::F16 => half::f16::from_f32(v).to_f32().to_bits() == v.to_bits(),
                _ => half::bf16::from_f32(v).to_f32().to_bits() == v.to_bits(),
            }
        }
        _ => holds[r] == Some(d),
    };
    let mut native = vec![false; n];
    let mut folded = vec![false; n];
    for (j, inst) in prog.insts.iter().enumerate() {
        let Some(d) = rounds_to(inst.op) else {
            continue;
        };
        if !live[j] || (d == DTypeKind::BF16 && !bf16) {
            continue;
        }
        let i = inst.args[0].idx();
        let op = &prog.insts[i];
        if op.ty == Ty::F32
            && matches!(op.op, Op::FAdd | Op::FSub | Op::FMul)
            && op.args.iter().all(|a| exactly(a.idx(), d))
        {
            native[j] = true;
            folded[i] = uses[i] == 1;
        }
    }
    (native, folded)
}

/// Emits `prog` with its parameters bound to `args` (register names);
/// returns the registers holding its results.
pub(crate) fn emit_program(body: &mut Body, prog: &Program, args: &[String]) -> Vec<String> {
    let live = prog.live();
    let groups = rare_groups(prog, &live);
    let (native, folded) = native_halves(body, prog, args, &live);
    let mut regs: Vec<String> = vec![String::new(); prog.insts.len()];
    let mut skip = folded;
    for g in &groups {
        for &d in &g.deferred {
            skip[d] = true;
        }
        for &m in &g.members[1..] {
            skip[m] = true;
        }
    }
    for i in 0..prog.insts.len() {
        if !live[i] || skip[i] {
            continue;
        }
        if let Some(g) = groups.iter().find(|g| g.members[0] == i) {
            emit_rare_group(body, prog, args, g, &native, &mut regs);
            continue;
        }
        emit_inst(body, prog, args, i, &native, &mut regs);
    }
    prog.results.iter().map(|r| regs[r.idx()].clone()).collect()
}

/// `round_f16(a op b)` or `round_bf16(a op b)` computed in 16-bit
/// registers (see [`native_halves`]).
fn emit_native_half(body: &mut Body, prog: &Program, j: usize, regs: &mut [String]) {
    let dtype = rounds_to(prog.insts[j].op).expect("a rounding to a 16-bit type");
    let op = &prog.insts[prog.insts[j].args[0].idx()];
    let x = f32_to_half(body, dtype, &regs[op.args[0].idx()]);
    let y = f32_to_half(body, dtype, &regs[op.args[1].idx()]);
    let h = body.reg(Class::B16);
    if dtype == DTypeKind::F16 {
        let name = match op.op {
            Op::FAdd => "add",
            Op::FSub => "sub",
            Op::FMul => "mul",
            other => unreachable!("no f16 instruction for {other:?}"),
        };
        body.op(format!("{name}.rn.f16 {h}, {x}, {y}"));
    } else {
        // sm_80 has only the fused form for bf16; one rounding of
        // `x * 1 + y`, `y * -1 + x` or `x * y + (-0)` is the rounded sum,
        // difference or product, signed zeros included.
        let bits = |body: &mut Body, v: u16| {
            let c = body.reg(Class::B16);
            body.op(format!("mov.b16 {c}, {v:#06x}"));
            c
        };
        let (a, b, c) = match op.op {
            Op::FAdd => (x, bits(body, 0x3F80), y),
            Op::FSub => (y, bits(body, 0xBF80), x),
            Op::FMul => (x, y, bits(body, 0x8000)),
            other => unreachable!("no bf16 instruction for {other:?}"),
        };
        body.op(format!("fma.rn.bf16 {h}, {a}, {b}, {c}"));
    }
    regs[j] = half_to_f32(body, dtype, &h);
}

/// `d = common; if cond { deferred work; d = rare }` for each member.
fn emit_rare_group(
    body: &mut Body,
    prog: &Program,
    args: &[String],
    g: &RareGroup,
    native: &[bool],
    regs: &mut [String],
) {
    let first = &prog.insts[g.members[0]];
    let cond = regs[first.args[0].idx()].clone();
    for &m in &g.members {
        let inst = &prog.insts[m];
        let d = body.reg_ty(inst.ty);
        body.op(format!(
            "mov.{} {d}, {}",
            bsuf(inst.ty),
            regs[inst.args[2].idx()]
        ));
        regs[m] = d;
    }
    let skip = body.label("common");
    body.op(format!("@!{cond} bra {skip}"));
    for &d in &g.deferred {
        emit_inst(body, prog, args, d, native, regs);
    }
    for &m in &g.members {
        let inst = &prog.insts[m];
        body.op(format!(
            "mov.{} {}, {}",
            bsuf(inst.ty),
            regs[m],
            regs[inst.args[1].idx()]
        ));
    }
    body.place(&skip);
}

/// Emits instruction `i` (its operands already in `regs`).
fn emit_inst(
    body: &mut Body,
    prog: &Program,
    args: &[String],
    i: usize,
    native: &[bool],
    regs: &mut [String],
) {
    if native[i] {
        emit_native_half(body, prog, i, regs);
        return;
    }
    {
        let inst = &prog.insts[i];
        let ty = inst.ty;
        if let Op::Param(n) = inst.op {
            regs[i] = args[n as usize].clone();
            return;
        }
        let a: Vec<&str> = inst.args.iter().map(|r| regs[r.idx()].as_str()).collect();
        let aty = |k: usize| prog.ty(inst.args[k]);
        let d = body.reg_ty(ty);
        let text = match inst.op {
            Op::Param(_) => unreachable!(),
            Op::Const(bits) if ty == Ty::Pred => {
                let t = body.reg(Class::B32);
                body.op(format!("mov.u32 {t}, {}", bits & 1));
                format!("setp.ne.u32 {d}, {t}, 0")
            }
            Op::Const(bits) => format!("mov.{} {d}, {}", bsuf(ty), immediate(ty, bits)),
            Op::FAdd => format!("add.rn.{} {d}, {}, {}", fsuf(ty), a[0], a[1]),
            Op::FSub => format!("sub.rn.{} {d}, {}, {}", fsuf(ty), a[0], a[1]),
            Op::FMul => format!("mul.rn.{} {d}, {}, {}", fsuf(ty), a[0], a[1]),
            Op::FDiv => format!("div.rn.{} {d}, {}, {}", fsuf(ty), a[0], a[1]),
            Op::FFma => format!("fma.rn.{} {d}, {}, {}, {}", fsuf(ty), a[0], a[1], a[2]),
            Op::FSqrt => format!("sqrt.rn.{} {d}, {}", fsuf(ty), a[0]),
            Op::FNeg => format!("neg.{} {d}, {}", fsuf(ty), a[0]),
            Op::FAbs => format!("abs.{} {d}, {}", fsuf(ty), a[0]),
            Op::FMin => format!("min.{} {d}, {}, {}", fsuf(ty), a[0], a[1]),
            Op::FMax => format!("max.{} {d}, {}, {}", fsuf(ty), a[0], a[1]),
            Op::FRint => format!("cvt.rni.{0}.{0} {d}, {1}", fsuf(ty), a[0]),
            Op::FTrunc => format!("cvt.rzi.{0}.{0} {d}, {1}", fsuf(ty), a[0]),
            Op::IsNan => format!("setp.nan.{} {d}, {}, {}", fsuf(aty(0)), a[0], a[0]),
            Op::IAdd => format!("add.{} {d}, {}, {}", ssuf(ty), a[0], a[1]),
            Op::ISub => format!("sub.{} {d}, {}, {}", ssuf(ty), a[0], a[1]),
            Op::IMul => format!("mul.lo.{} {d}, {}, {}", ssuf(ty), a[0], a[1]),
            Op::IDiv => format!("div.{} {d}, {}, {}", ssuf(ty), a[0], a[1]),
            Op::INeg => format!("neg.{} {d}, {}", ssuf(ty), a[0]),
            Op::IAbs => format!("abs.{} {d}, {}", ssuf(ty), a[0]),
            Op::IMin => format!("min.{} {d}, {}, {}", ssuf(ty), a[0], a[1]),
            Op::IMax => format!("max.{} {d}, {}, {}", ssuf(ty), a[0], a[1]),
            Op::And => format!("and.{} {d}, {}, {}", bsuf(ty), a[0], a[1]),
            Op::Or => format!("or.{} {d}, {}, {}", bsuf(ty), a[0], a[1]),
            Op::Not => format!("not.{} {d}, {}", bsuf(ty), a[0]),
            Op::MulHiU => format!("mul.hi.{} {d}, {}, {}", usuf(ty), a[0], a[1]),
            Op::Shl => format!("shl.{} {d}, {}, {}", bsuf(ty), a[0], a[1]),
            Op::ShrA => format!("shr.{} {d}, {}, {}", ssuf(ty), a[0], a[1]),
            Op::ShrL => format!("shr.{} {d}, {}, {}", usuf(ty), a[0], a[1]),
            Op::Cmp(op) => match aty(0) {
                Ty::F32 | Ty::F64 => format!(
                    "setp.{}.{} {d}, {}, {}",
                    cmp_name(op, true),
                    fsuf(aty(0)),
                    a[0],
                    a[1]
                ),
                Ty::I32 | Ty::I64 => format!(
                    "setp.{}.{} {d}, {}, {}",
                    cmp_name(op, false),
                    ssuf(aty(0)),
                    a[0],
                    a[1]
                ),
                Ty::Pred => {
                    let x = body.reg(Class::B32);
                    let y = body.reg(Class::B32);
                    body.op(format!("selp.u32 {x}, 1, 0, {}", a[0]));
                    body.op(format!("selp.u32 {y}, 1, 0, {}", a[1]));
                    format!("setp.{}.u32 {d}, {x}, {y}", cmp_name(op, false))
                }
            },
            Op::Select | Op::SelectRare => {
                format!("selp.{} {d}, {}, {}, {}", bsuf(ty), a[1], a[2], a[0])
            }
            Op::FCvt(round) => match (aty(0), ty) {
                (Ty::F32, Ty::F64) => format!("cvt.f64.f32 {d}, {}", a[0]),
                (Ty::F64, Ty::F32) => {
                    let r = if round == Round::Zero { "rz" } else { "rn" };
                    format!("cvt.{r}.f32.f64 {d}, {}", a[0])
                }
                (s, t) if s == t => format!("mov.{} {d}, {}", fsuf(t), a[0]),
                (s, t) => unreachable!("float conversion {s:?} -> {t:?}"),
            },
            Op::IToF(round) => {
                let r = if round == Round::Zero { "rz" } else { "rn" };
                format!("cvt.{r}.{}.{} {d}, {}", fsuf(ty), ssuf(aty(0)), a[0])
            }
            Op::FToI => format!("cvt.rzi.{}.{} {d}, {}", ssuf(ty), fsuf(aty(0)), a[0]),
            Op::ICvt => match (aty(0), ty) {
                (Ty::I32, Ty::I64) => format!("cvt.s64.s32 {d}, {}", a[0]),
                (Ty::I64, Ty::I32) => format!("cvt.u32.u64 {d}, {}", a[0]),
                (_, t) => format!("mov.{} {d}, {}", bsuf(t), a[0]),
            },
            Op::Bits => format!("mov.{} {d}, {}", bsuf(ty), a[0]),
            Op::RoundF16 => {
                let h = body.reg(Class::B16);
                body.op(format!("cvt.rn.f16.{} {h}, {}", fsuf(aty(0)), a[0]));
                body.set_half(&d, DTypeKind::F16, &h);
                format!("cvt.f32.f16 {d}, {h}")
            }
            Op::RoundBf16 => round_bf16(body, a[0], &d),
        };
        body.op(text);
        regs[i] = d;
    }
}

/// `d = x` rounded to the nearest bf16 (ties to even), as an f32; returns
/// the last instruction.
pub(super) fn round_bf16(body: &mut Body, x: &str, d: &str) -> String {
    match body.target() {
        // The high half is bf16(x), the low half bf16(0) = 0: the f32
        // holding the rounded value, in one instruction.
        Target::Sm80 => {
            let r = body.reg(Class::B32);
            body.op(format!("cvt.rn.bf16x2.f32 {r}, {x}, 0f00000000"));
            format!("mov.b32 {d}, {r}")
        }
        // Add half an ulp of bf16 (less one, plus the kept lsb: ties to
        // even) and drop the low half; a NaN keeps its top half, quieted.
        Target::Sm70 => {
            let bits = body.reg(Class::B32);
            body.op(format!("mov.b32 {bits}, {x}"));
            let nan = body.reg(Class::B32);
            body.op(format!("or.b32 {nan}, {bits}, 0x00400000"));
            let lsb = body.reg(Class::B32);
            body.op(format!("bfe.u32 {lsb}, {bits}, 16, 1"));
            let r = body.reg(Class::B32);
            body.op(format!("add.s32 {r}, {bits}, 0x00007FFF"));
            body.op(format!("add.s32 {r}, {r}, {lsb}"));
            let p = body.reg(Class::Pred);
            body.op(format!("setp.nan.f32 {p}, {x}, {x}"));
            body.op(format!("selp.b32 {r}, {nan}, {r}, {p}"));
            body.op(format!("and.b32 {r}, {r}, 0xFFFF0000"));
            format!("mov.b32 {d}, {r}")
        }
    }
}
