//! Stand-in for `tensorfn_kernels::builtin` until that module lands: the
//! same signatures, returning modules with no PTX (loading them fails with
//! a driver error).
#![allow(dead_code)]

use tensorfn_core::DTypeKind;
use tensorfn_kernels::{BinaryOp, ReduceOp, UnaryOp};

pub(crate) const BLOCK: u32 = 256;

pub(crate) struct Kernel {
    pub(crate) name: String,
    pub(crate) ptx: String,
}

fn missing(name: String) -> Kernel {
    Kernel {
        name,
        ptx: String::new(),
    }
}

pub(crate) fn unary(op: UnaryOp, t: DTypeKind) -> Kernel {
    missing(format!("tf_{}_{t}", op.name()))
}
pub(crate) fn binary(op: BinaryOp, t: DTypeKind) -> Kernel {
    missing(format!("tf_{}_{t}", op.name()))
}
pub(crate) fn cast(from: DTypeKind, to: DTypeKind) -> Kernel {
    missing(format!("tf_cast_{from}_{to}"))
}
pub(crate) fn reduce(op: ReduceOp, t: DTypeKind) -> Kernel {
    missing(format!("tf_{}_{t}", op.name()))
}
pub(crate) fn softmax(t: DTypeKind, log: bool) -> Kernel {
    missing(format!("tf_softmax_{t}_{log}"))
}
