//! PTX text of fused element programs, for the CUDA path: the program is
//! rebuilt with the kernels crate's typed builder and emitted by its PTX
//! back-end, at expansion time.

use crate::ir::{BoolOp, Inst, Ir};
use tensorfn_core::DTypeKind;
use tensorfn_kernels::ir::{ElementwiseBuilder, Kernel, Value};
use tensorfn_kernels::ptx::Target;
use tensorfn_kernels::CmpOp;

/// The kernels crate's form of an element program.
pub fn kernel(ir: &Ir) -> Result<Kernel, tensorfn_kernels::Error> {
    let mut b = ElementwiseBuilder::new();
    // Inputs are the launch's parameters, in order.
    let inputs: Vec<Value> = ir.inputs.iter().map(|d| b.input(*d)).collect();
    let mut vals: Vec<Value> = Vec::with_capacity(ir.insts.len());
    for (inst, d) in &ir.insts {
        let d = *d;
        let v = match *inst {
            Inst::Input(k) => inputs[k],
            Inst::Const(c) if d.is_float() || d == DTypeKind::Bool => b.constant(c, d),
            Inst::Const(c) => b.constant_int(c as i64, d),
            Inst::Unary(op, a) => b.unary(op, vals[a]),
            Inst::Binary(op, a, c) => b.binary(op, vals[a], vals[c]),
            Inst::Cast(a) => b.cast(vals[a], d),
            Inst::Cmp(op, a, c) => b.compare(op, vals[a], vals[c]),
            Inst::Select(c, x, y) => b.select(vals[c], vals[x], vals[y]),
            Inst::Bool(op, x, y) => {
                let (t, f) = (
                    b.constant(1.0, DTypeKind::Bool),
                    b.constant(0.0, DTypeKind::Bool),
                );
                match op {
                    BoolOp::And => b.select(vals[x], vals[y], f),
                    BoolOp::Or => b.select(vals[x], t, vals[y]),
                }
            }
            Inst::Not(x) => {
                let f = b.constant(0.0, DTypeKind::Bool);
                b.compare(CmpOp::Eq, vals[x], f)
            }
        };
        vals.push(v);
    }
    b.output(vals[ir.output])
}

/// The PTX module of a fused kernel named `name`.
///
/// ```
/// use tensorfn_macros_impl::ir::{Inst, Ir};
/// use tensorfn_core::DTypeKind::F32;
/// use tensorfn_kernels::UnaryOp;
/// let mut ir = Ir::new(vec![F32]);
/// let x = ir.push(Inst::Input(0), F32);
/// ir.output = ir.push(Inst::Unary(UnaryOp::Exp, x), F32);
/// let ptx = tensorfn_macros_impl::ptx::fused(&ir, "tf_demo").unwrap();
/// assert!(ptx.contains(".entry tf_demo_contig"));
/// ```
pub fn fused(ir: &Ir, name: &str) -> Result<String, tensorfn_kernels::Error> {
    tensorfn_kernels::ptx::elementwise(&kernel(ir)?, name)
}

/// The sm_80 module of a fused kernel named `name`, when it differs from
/// the sm_70 one of [`fused`] (the kernel rounds to `bf16`, which sm_80
/// does in one instruction); `None` otherwise, so that kernels without
/// `bf16` embed one text only.
///
/// ```
/// use tensorfn_macros_impl::ir::{Inst, Ir};
/// use tensorfn_core::DTypeKind::{BF16, F32};
/// use tensorfn_kernels::UnaryOp;
/// let mut ir = Ir::new(vec![BF16]);
/// let x = ir.push(Inst::Input(0), BF16);
/// ir.output = ir.push(Inst::Unary(UnaryOp::Exp, x), BF16);
/// let sm80 = tensorfn_macros_impl::ptx::fused_sm80(&ir, "tf_demo").unwrap();
/// assert!(sm80.is_some_and(|t| t.contains(".target sm_80")));
///
/// let mut ir = Ir::new(vec![F32]);
/// let x = ir.push(Inst::Input(0), F32);
/// ir.output = ir.push(Inst::Unary(UnaryOp::Exp, x), F32);
/// assert_eq!(tensorfn_macros_impl::ptx::fused_sm80(&ir, "tf_demo").unwrap(), None);
/// ```
pub fn fused_sm80(ir: &Ir, name: &str) -> Result<Option<String>, tensorfn_kernels::Error> {
    let kernel = kernel(ir)?;
    if !tensorfn_kernels::ptx::differs_on(&kernel, Target::Sm80) {
        return Ok(None);
    }
    tensorfn_kernels::ptx::elementwise_for(&kernel, name, Target::Sm80).map(Some)
}
