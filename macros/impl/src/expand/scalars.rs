//! Scalar values in generated code: literals, scalar parameters and
//! their arithmetic, indices.

use super::*;

use tensorfn_kernels::ir::ElementwiseBuilder;
use tensorfn_kernels::{BinaryOp, CmpOp};

/// `op(x)` on one `f64`.
fn unary_f64(op: UnaryOp) -> Kernel {
    let mut b = ElementwiseBuilder::new();
    let x = b.input(DTypeKind::F64);
    let y = b.unary(op, x);
    b.output(y).expect("every unary op takes f64")
}

/// `op(x, y)` on two `f64`s.
fn binary_f64(op: BinaryOp) -> Kernel {
    let mut b = ElementwiseBuilder::new();
    let x = b.input(DTypeKind::F64);
    let y = b.input(DTypeKind::F64);
    let z = b.binary(op, x, y);
    b.output(z).expect("every binary op takes f64")
}

/// `a op b` on two `f64`s, a `bool`.
fn compare_f64(op: CmpOp) -> Kernel {
    let mut b = ElementwiseBuilder::new();
    let x = b.input(DTypeKind::F64);
    let y = b.input(DTypeKind::F64);
    let z = b.compare(op, x, y);
    b.output(z).expect("every comparison takes f64")
}

impl FnGen<'_> {
    /// A scalar node computed in f64.
    pub(super) fn scalar_f64(&self, n: NodeId) -> TokenStream {
        let node = &self.g().nodes[n];
        let int = matches!(node.ty, Ty::Scalar(s) if !s.is_float());
        match &node.op {
            Op::Lit { value, .. } => rust_code::literal(*value, DTypeKind::F64),
            Op::Param(i) => {
                let p = &self.ast.params[*i].name;
                match &self.f.sig.params[*i] {
                    ParamSig::Scalar(ScalarKind::Usize) => quote!((#p as f64)),
                    _ => quote!(::tensorfn::DType::to_f64(#p)),
                }
            }
            Op::Unary(op, a) => {
                let a = self.scalar_f64(*a);
                let (body, out) = rust_code::emit_rust(&unary_f64(*op), &[a]);
                quote!({ #body #out })
            }
            Op::Binary(op, a, b) => {
                let (a, b) = (self.scalar_f64(*a), self.scalar_f64(*b));
                let (body, out) = rust_code::emit_rust(&binary_f64(*op), &[a, b]);
                if int && *op == BinaryOp::Div {
                    quote!({ #body #out.trunc() })
                } else {
                    quote!({ #body #out })
                }
            }
            // A `#[kernel]`'s compares, selects and casts of scalar
            // arguments, written again by its derivative: a condition is
            // 1 or 0, a cast to an integer truncates and saturates as
            // `as` does.
            Op::Compare(op, a, b) => {
                let (a, b) = (self.scalar_f64(*a), self.scalar_f64(*b));
                let (body, out) = rust_code::emit_rust(&compare_f64(*op), &[a, b]);
                quote!({ #body if #out { 1.0f64 } else { 0.0f64 } })
            }
            Op::Where(c, a, b) => {
                let (c, a, b) = (
                    self.scalar_f64(*c),
                    self.scalar_f64(*a),
                    self.scalar_f64(*b),
                );
                quote!((if #c != 0.0f64 { #a } else { #b }))
            }
            Op::Cast(a, to) => {
                let a = self.scalar_f64(*a);
                match to.kind() {
                    DTypeKind::Bool => quote!((if #a != 0.0f64 { 1.0f64 } else { 0.0f64 })),
                    d if d.is_float() => {
                        let t = dtype_tokens(d);
                        quote!(<#t as ::tensorfn::DType>::to_f64(<#t as ::tensorfn::DType>::from_f64(#a)))
                    }
                    d => {
                        let t = dtype_tokens(d);
                        quote!(((#a as #t) as f64))
                    }
                }
            }
            Op::Kernel { kernel, args } => {
                let k = self.ctx.kernels[*kernel];
                let name = &k.name;
                let args = args.iter().zip(&k.params).map(|(&a, (_, d, _))| {
                    let v = self.scalar_f64(a);
                    let t = dtype_tokens(*d);
                    quote!(<#t as ::tensorfn::DType>::from_f64(#v))
                });
                quote!(::tensorfn::DType::to_f64(#name(#(#args),*)))
            }
            other => unreachable!("not a scalar: {other:?}"),
        }
    }

    /// A scalar node as a value of dtype `d`.
    pub(super) fn scalar_as(&self, n: NodeId, d: DTypeKind) -> TokenStream {
        let v = self.scalar_f64(n);
        let t = dtype_tokens(d);
        quote!(<#t as ::tensorfn::DType>::from_f64(#v))
    }

    /// A `usize` scalar node (an index, a start, a length).
    pub(super) fn scalar_usize(&self, n: NodeId) -> TokenStream {
        match &self.g().nodes[n].op {
            Op::Lit { value, .. } => {
                let l = Literal::usize_suffixed(*value as usize);
                quote!(#l)
            }
            Op::Param(i) => {
                let p = &self.ast.params[*i].name;
                quote!(#p)
            }
            _ => {
                let v = self.scalar_f64(n);
                quote!((#v as usize))
            }
        }
    }

    pub(super) fn index_arg(&self, a: &IndexArg) -> TokenStream {
        match a {
            IndexArg::Const(c) => {
                let l = Literal::usize_suffixed(*c);
                quote!(#l)
            }
            IndexArg::Node(n) => self.scalar_usize(*n),
        }
    }

    /// A scalar as written, for calls outside the invocation.
    pub(super) fn scalar_native(&self, n: NodeId) -> TokenStream {
        match &self.g().nodes[n].op {
            Op::Lit { value, int: true } => {
                let l = Literal::i64_unsuffixed(*value as i64);
                quote!(#l)
            }
            Op::Lit { value, int: false } => {
                let l = Literal::f64_unsuffixed(*value);
                quote!(#l)
            }
            Op::Param(i) => {
                let p = &self.ast.params[*i].name;
                quote!(#p)
            }
            _ => self.scalar_f64(n),
        }
    }
}
