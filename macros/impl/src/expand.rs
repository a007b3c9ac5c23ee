//! From plans to Rust: typed functions calling the runtime, fused kernels
//! as statics with a CPU closure, entry checks of run-time dims, memory
//! plans, and `#[kernel]`s as plain scalar functions.

use crate::ast::{Device, DimExpr, KernelFn, ParamTy, ScalarKind, TensorFn, TensorTyAst};
use crate::check::CheckedFn;
use crate::graph::*;
use crate::ir::{self, Ir};
use crate::lower::{GroupInput, Plan, Step};
use crate::shape::Dim;
use crate::sig::{ParamSig, Signature, Source, SymKind, Symbols};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use tensorfn_core::DTypeKind;
use tensorfn_kernels::{ReduceOp, UnaryOp};

/// `::tensorfn::Cpu` or `::tensorfn::Cuda<N>`.
pub fn device_tokens(d: Device) -> TokenStream {
    match d {
        Device::Cpu => quote!(::tensorfn::Cpu),
        Device::Cuda(n) => {
            let n = Literal::usize_unsuffixed(n);
            quote!(::tensorfn::Cuda<#n>)
        }
    }
}

/// The dtype's Rust type.
pub fn dtype_tokens(d: DTypeKind) -> TokenStream {
    ir::storage_type(d)
}

fn dtype_kind_tokens(d: DTypeKind) -> TokenStream {
    let v = format_ident!(
        "{}",
        match d {
            DTypeKind::F32 => "F32",
            DTypeKind::F64 => "F64",
            DTypeKind::F16 => "F16",
            DTypeKind::BF16 => "BF16",
            DTypeKind::I32 => "I32",
            DTypeKind::I64 => "I64",
            DTypeKind::U8 => "U8",
            DTypeKind::Bool => "Bool",
        }
    );
    quote!(::tensorfn::DTypeKind::#v)
}

fn dim_ty_tokens(d: &DimTy) -> TokenStream {
    match d {
        DimTy::Dyn => quote!(::tensorfn::Dyn),
        DimTy::Const(d) => match d.as_constant() {
            Some(c) => {
                let c = Literal::usize_unsuffixed(c.max(0) as usize);
                quote!(::tensorfn::Const<#c>)
            }
            None => {
                let s = format_ident!(
                    "{}",
                    d.as_symbol()
                        .expect("a const dim is a literal or a generic")
                );
                quote!(::tensorfn::Const<#s>)
            }
        },
    }
}

/// `(Const<..>, Dyn, ..)`: the shape type of these dim types.
pub fn shape_tokens(dims: &[DimTy]) -> TokenStream {
    let ds = dims.iter().map(dim_ty_tokens);
    quote!((#(#ds,)*))
}

fn tensor_tokens(device: Device, dtype: DTypeKind, dims: &[DimTy]) -> TokenStream {
    let (d, t, s) = (
        device_tokens(device),
        dtype_tokens(dtype),
        shape_tokens(dims),
    );
    quote!(::tensorfn::Tensor<#d, #t, #s>)
}

/// A `usize` expression computing a dim at run time.
pub fn dim_value(d: &Dim, symbols: &Symbols) -> TokenStream {
    let mut out = TokenStream::new();
    for (i, (m, c)) in d.terms().into_iter().enumerate() {
        let mut term = TokenStream::new();
        let mut first = true;
        let mut factor = |t: TokenStream, term: &mut TokenStream| {
            if !first {
                term.extend(quote!(*));
            }
            first = false;
            term.extend(t);
        };
        if c.unsigned_abs() != 1 || m.factors().is_empty() {
            let l = Literal::usize_suffixed(c.unsigned_abs() as usize);
            factor(quote!(#l), &mut term);
        }
        for (s, p) in m.factors() {
            let name = match symbols.map.get(&**s) {
                Some(SymKind::Generic) => s.to_string(),
                _ => Symbols::var_name(s),
            };
            let v = format_ident!("{}", name);
            for _ in 0..*p {
                factor(quote!(#v), &mut term);
            }
        }
        match (i, c < 0) {
            (_, true) => out.extend(quote!(- #term)),
            (0, false) => out.extend(term),
            (_, false) => out.extend(quote!(+ #term)),
        }
    }
    if out.is_empty() {
        return quote!(0usize);
    }
    // A compound value is parenthesised: a bare `a * b` in an array trips
    // clippy's `possible_missing_comma` in the user's crate.
    if d.as_constant().is_some() || d.as_symbol().is_some() {
        return out;
    }
    quote!((#out))
}

fn dims_array(dims: &[Dim], symbols: &Symbols) -> TokenStream {
    let vs = dims.iter().map(|d| dim_value(d, symbols));
    quote!([#(#vs),*])
}

/// Everything the expansion of one invocation needs.
pub struct Ctx<'a> {
    /// Signatures of the invocation's functions (`None` where broken).
    pub sigs: &'a [Option<Signature>],
    /// The functions as written.
    pub fns: &'a [&'a TensorFn],
    /// The kernels as written.
    pub kernels: &'a [&'a KernelFn],
    /// PTX text of a fused element program with the given kernel name.
    pub ptx: &'a dyn Fn(&Ir, &str) -> Result<String, String>,
}

struct FnGen<'a> {
    ctx: &'a Ctx<'a>,
    f: &'a CheckedFn,
    ast: &'a TensorFn,
    /// The static declared for each kernel name so far.
    kernels: std::collections::HashMap<String, proc_macro2::Ident>,
    errors: Vec<syn::Error>,
}

fn var(n: NodeId) -> proc_macro2::Ident {
    format_ident!("__v{}", n)
}

impl FnGen<'_> {
    fn g(&self) -> &Graph {
        &self.f.graph
    }

    fn symbols(&self) -> &Symbols {
        &self.f.sig.symbols
    }

    fn tty(&self, n: NodeId) -> &TensorTy {
        match &self.g().nodes[n].ty {
            Ty::Tensor(t) => t,
            other => unreachable!("node {n} is not a tensor: {other:?}"),
        }
    }

    fn dim_tys(&self, n: NodeId) -> Vec<DimTy> {
        self.symbols().dim_tys(&self.tty(n).dims)
    }

    fn type_of(&self, n: NodeId) -> TokenStream {
        let t = self.tty(n);
        tensor_tokens(t.device, t.dtype, &self.dim_tys(n))
    }

    fn shape_of(&self, n: NodeId) -> TokenStream {
        shape_tokens(&self.dim_tys(n))
    }

    /// A `&Tensor` expression for a materialised node.
    fn reference(&self, n: NodeId) -> TokenStream {
        match self.g().nodes[n].op {
            Op::Param(i) => {
                let p = &self.ast.params[i].name;
                quote!(#p)
            }
            _ => {
                let v = var(n);
                quote!((&#v))
            }
        }
    }

    /// A scalar node computed in f64.
    fn scalar_f64(&self, n: NodeId) -> TokenStream {
        let node = &self.g().nodes[n];
        let int = matches!(node.ty, Ty::Scalar(s) if !s.is_float());
        match &node.op {
            Op::Lit { value, .. } => ir::literal(*value, DTypeKind::F64),
            Op::Param(i) => {
                let p = &self.ast.params[*i].name;
                match &self.f.sig.params[*i] {
                    ParamSig::Scalar(ScalarKind::Usize) => quote!((#p as f64)),
                    _ => quote!(::tensorfn::DType::to_f64(#p)),
                }
            }
            Op::Unary(op, a) => {
                let a = self.scalar_f64(*a);
                let (body, out) = ir::emit_rust(&unary_ir(*op), &[a]);
                quote!({ #body #out })
            }
            Op::Binary(op, a, b) => {
                let (a, b) = (self.scalar_f64(*a), self.scalar_f64(*b));
                let mut ir = Ir::new(vec![DTypeKind::F64, DTypeKind::F64]);
                let x = ir.push(ir::Inst::Input(0), DTypeKind::F64);
                let y = ir.push(ir::Inst::Input(1), DTypeKind::F64);
                ir.output = ir.push(ir::Inst::Binary(*op, x, y), DTypeKind::F64);
                let (body, out) = ir::emit_rust(&ir, &[a, b]);
                if int && *op == tensorfn_kernels::BinaryOp::Div {
                    quote!({ #body #out.trunc() })
                } else {
                    quote!({ #body #out })
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
    fn scalar_as(&self, n: NodeId, d: DTypeKind) -> TokenStream {
        let v = self.scalar_f64(n);
        let t = dtype_tokens(d);
        quote!(<#t as ::tensorfn::DType>::from_f64(#v))
    }

    /// A `usize` scalar node (an index, a start, a length).
    fn scalar_usize(&self, n: NodeId) -> TokenStream {
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

    fn index_arg(&self, a: &IndexArg) -> TokenStream {
        match a {
            IndexArg::Const(c) => {
                let l = Literal::usize_suffixed(*c);
                quote!(#l)
            }
            IndexArg::Node(n) => self.scalar_usize(*n),
        }
    }

    fn entry(&self) -> TokenStream {
        let sig = &self.f.sig;
        let mut out = TokenStream::new();
        for (name, kind) in &sig.symbols.map {
            let SymKind::Runtime(Some(src)) = kind else {
                continue;
            };
            let v = format_ident!("{}", Symbols::var_name(name));
            let value = match src {
                Source::TensorDim { param, dim } => {
                    let p = &self.ast.params[*param].name;
                    quote!(#p.shape()[#dim])
                }
                Source::Scalar { param } => {
                    let p = &self.ast.params[*param].name;
                    quote!(#p)
                }
            };
            out.extend(quote!(let #v: usize = #value;));
        }
        for c in &sig.entry_checks {
            let p = &self.ast.params[c.param].name;
            let dim = c.dim;
            let expected = dim_value(&c.expected, self.symbols());
            let origins: Vec<String> = c
                .expected
                .symbols()
                .iter()
                .filter_map(|s| match sig.symbols.map.get(&**s) {
                    Some(SymKind::Runtime(Some(Source::TensorDim { param, dim }))) => {
                        Some(format!("{s} is dim {dim} of `{}`", sig.param_names[*param]))
                    }
                    Some(SymKind::Runtime(Some(Source::Scalar { param }))) => Some(format!(
                        "{s} is the parameter `{}`",
                        sig.param_names[*param]
                    )),
                    _ => None,
                })
                .collect();
            let origin = if origins.is_empty() {
                String::new()
            } else {
                format!(" ({})", origins.join(", "))
            };
            let what = format!(
                "dim {dim} of `{}` to be {}{{}}{origin}",
                sig.param_names[c.param], c.expected
            );
            let show_value = c.expected.as_constant().is_none();
            let fn_name = &sig.name;
            let fmt_value = if show_value {
                quote!(::std::format!(" = {}", __tf_expected))
            } else {
                quote!(::std::string::String::new())
            };
            out.extend(quote! {
                {
                    let __tf_expected: usize = #expected;
                    if #p.shape()[#dim] != __tf_expected {
                        return ::core::result::Result::Err(::tensorfn::Error::shape(
                            #fn_name,
                            ::std::format!(#what, #fmt_value),
                            ::std::format!("{}", #p.shape()[#dim]),
                        ));
                    }
                }
            });
        }
        out
    }

    fn step(&mut self, s: &Step) -> TokenStream {
        match s {
            Step::Drop(n) => {
                let v = var(*n);
                quote!(::core::mem::drop(#v);)
            }
            Step::Fused(gr) => self.fused(gr),
            Step::Op(n) => {
                let n = *n;
                let v = var(n);
                if let Ty::Tuple(_) = self.g().nodes[n].ty {
                    let value = self.op(n);
                    return quote!(let #v = #value;);
                }
                let ty = self.type_of(n);
                let value = self.op(n);
                quote!(let #v: #ty = #value;)
            }
        }
    }

    fn fused(&mut self, gr: &crate::lower::FusedGroup) -> TokenStream {
        let out = gr.out;
        let t = self.tty(out).clone();
        let name = kernel_name(&self.f.sig.name, &gr.ir);
        // Identical groups (repeated layers) share one static and one PTX.
        let (static_name, declare) = match self.kernels.get(&name) {
            Some(id) => (id.clone(), false),
            None => {
                let id = format_ident!("__TF_KERNEL_{}", self.kernels.len());
                self.kernels.insert(name.clone(), id.clone());
                (id, true)
            }
        };
        let ptx = if declare {
            match (self.ctx.ptx)(&gr.ir, &name) {
                Ok(p) => p,
                Err(e) => {
                    let at = &self.g().nodes[out].sp;
                    self.errors.push(at.error(format!(
                        "internal error of `tensor_fn!`: the PTX emitter rejected the fused kernel of `{}`: {e}",
                        self.g().nodes[out].text
                    )));
                    String::new()
                }
            }
        } else {
            String::new()
        };
        let inputs = gr.ir.inputs.iter().map(|d| dtype_kind_tokens(*d));
        let output = dtype_kind_tokens(gr.ir.output_dtype());
        let args: Vec<TokenStream> = gr
            .inputs
            .iter()
            .map(|i| match i {
                GroupInput::Tensor(n) => self.reference(*n),
                GroupInput::Scalar { node, dtype } => {
                    let dev = device_tokens(t.device);
                    let dt = dtype_tokens(*dtype);
                    let v = self.scalar_as(*node, *dtype);
                    quote!(&::tensorfn::Tensor::<#dev, #dt, ()>::full(#v)?)
                }
            })
            .collect();
        let dims = dims_array(&t.dims, self.symbols());
        let f = format_ident!("fused{}", gr.inputs.len());
        let closure = ir::closure(&gr.ir);
        let v = var(out);
        let ty = self.type_of(out);
        let decl = declare.then(|| {
            quote! {
                static #static_name: ::tensorfn::__kernels::FusedKernel = ::tensorfn::__kernels::FusedKernel {
                    name: #name,
                    ptx: #ptx,
                    inputs: &[#(#inputs),*],
                    output: #output,
                };
            }
        });
        quote! {
            #decl
            let #v: #ty = ::tensorfn::__private::#f(#(#args,)* &#dims, &#static_name, #closure)?;
        }
    }

    /// The expression computing a runtime-call node (without `let`).
    fn op(&self, n: NodeId) -> TokenStream {
        let g = self.g();
        let node = &g.nodes[n];
        let so = || self.shape_of(n);
        match &node.op {
            Op::MatMul(a, b) => {
                let (a, b) = (self.reference(*a), self.reference(*b));
                quote!(#a.matmul(#b)?)
            }
            Op::Bmm(a, b) => {
                let (a, b) = (self.reference(*a), self.reference(*b));
                quote!(#a.bmm(#b)?)
            }
            Op::Dot(a, b) => {
                let (a, b) = (self.reference(*a), self.reference(*b));
                quote!(#a.dot(#b)?)
            }
            Op::AddMm {
                bias,
                m1,
                m2,
                beta,
                alpha,
            } => {
                let out = &self.tty(n).dims;
                let bd = &self.tty(*bias).dims;
                let direct = bd.is_empty() || (bd.len() == 1 && bd[0] == out[1]) || bd == out;
                let b = self.reference(*bias);
                let bias_expr = if direct {
                    b
                } else {
                    let dims = dims_array(out, self.symbols());
                    let s = so();
                    quote!(&#b.broadcast_to_dims::<#s>(&#dims)?)
                };
                let (m1, m2) = (self.reference(*m1), self.reference(*m2));
                match (beta, alpha) {
                    (None, None) => quote!(::tensorfn::Tensor::addmm(#bias_expr, #m1, #m2)?),
                    _ => {
                        let d = self.tty(n).dtype;
                        let one = |x: &Option<NodeId>| match x {
                            Some(s) => self.scalar_as(*s, d),
                            None => {
                                let t = dtype_tokens(d);
                                quote!(<#t as ::tensorfn::DType>::one())
                            }
                        };
                        let (be, al) = (one(beta), one(alpha));
                        quote!(::tensorfn::Tensor::addmm_scaled(#bias_expr, #m1, #m2, #be, #al)?)
                    }
                }
            }
            Op::Reshape { x, view } => {
                let x = self.reference(*x);
                let s = so();
                let dims = &self.tty(n).dims;
                let is_static = self.dim_tys(n).iter().all(|d| *d != DimTy::Dyn);
                match (view, is_static) {
                    (true, true) => quote!(#x.view::<#s>()?),
                    (false, true) => quote!(#x.reshape::<#s>()?),
                    (true, false) => {
                        let d = dims_array(dims, self.symbols());
                        quote!(#x.view_dims::<#s>(&#d)?)
                    }
                    (false, false) => {
                        let d = dims_array(dims, self.symbols());
                        quote!(#x.reshape_dims::<#s>(&#d)?)
                    }
                }
            }
            Op::T(x) => {
                let x = self.reference(*x);
                quote!(#x.t()?)
            }
            Op::Permute(x, perm) => {
                let x = self.reference(*x);
                let s = so();
                quote!(#x.permute::<#s>(&[#(#perm),*])?)
            }
            Op::Transpose(x, d0, d1) => {
                let x = self.reference(*x);
                let s = so();
                quote!(#x.transpose::<#s>(#d0, #d1)?)
            }
            Op::Narrow { x, dim, start, len } => {
                let x = self.reference(*x);
                let s = so();
                let (st, ln) = (self.index_arg(start), self.index_arg(len));
                quote!(#x.narrow::<#dim, #s>(#st, #ln)?)
            }
            Op::Index { x, dim, index } => {
                let x = self.reference(*x);
                match index {
                    IndexArg::Const(i) => quote!(#x.at::<#dim, #i>()?),
                    IndexArg::Node(i) => {
                        let i = self.scalar_usize(*i);
                        quote!(#x.index::<#dim>(#i)?)
                    }
                }
            }
            Op::Reduce { op, x, dim } => {
                let x = self.reference(*x);
                match dim {
                    Some(d) => {
                        let m = format_ident!("{}", op.name());
                        quote!(#x.#m::<#d>()?)
                    }
                    None => {
                        let m = format_ident!("{}_all", op.name());
                        debug_assert!(!matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin));
                        quote!(#x.#m()?)
                    }
                }
            }
            Op::Softmax { x, dim, log } => {
                let x = self.reference(*x);
                if *log {
                    quote!(#x.log_softmax::<#dim>()?)
                } else {
                    quote!(#x.softmax::<#dim>()?)
                }
            }
            Op::Cat { xs, dim } => {
                // Pairwise: each step's shape type has the joined dim so far.
                let first = self.tty(xs[0]).clone();
                let mut acc = self.reference(xs[0]);
                let mut sum = first.dims[*dim].clone();
                for (i, &x) in xs.iter().enumerate().skip(1) {
                    sum = sum.add(&self.tty(x).dims[*dim]);
                    let mut dims = first.dims.clone();
                    dims[*dim] = sum.clone();
                    let s = shape_tokens(&self.symbols().dim_tys(&dims));
                    let b = self.reference(x);
                    acc = if i == 1 {
                        quote!(#acc.cat::<#dim, #s>(#b)?)
                    } else {
                        quote!((&#acc).cat::<#dim, #s>(#b)?)
                    };
                }
                acc
            }
            Op::ToDevice(x, d) => {
                let x = self.reference(*x);
                let d = device_tokens(*d);
                quote!(#x.to_device::<#d>()?)
            }
            Op::Call {
                callee,
                args,
                generics,
                param_tys,
                ret_tys,
                ..
            } => {
                let callee_ast = self.ctx.fns[*callee];
                let sig = self.ctx.sigs[*callee]
                    .as_ref()
                    .expect("called functions have signatures");
                let name = &callee_ast.name;
                let gen: Vec<TokenStream> = generics
                    .iter()
                    .map(|d| dim_value(d, self.symbols()))
                    .collect();
                let turbofish = if gen.is_empty() {
                    quote!()
                } else {
                    let gen = generics.iter().map(|d| match d.as_constant() {
                        Some(c) => {
                            let l = Literal::usize_unsuffixed(c as usize);
                            quote!(#l)
                        }
                        None => {
                            let i = format_ident!("{}", d.as_symbol().expect("a generic"));
                            quote!(#i)
                        }
                    });
                    quote!(::<#(#gen),*>)
                };
                let argv: Vec<TokenStream> = args
                    .iter()
                    .enumerate()
                    .map(|(i, &a)| match (&sig.params[i], &param_tys[i]) {
                        (ParamSig::Tensor(_), Some(want)) => {
                            let r = self.reference(a);
                            if self.dim_tys(a) == *want {
                                r
                            } else {
                                let s = shape_tokens(want);
                                quote!(&::core::clone::Clone::clone(#r).into_shape::<#s>()?)
                            }
                        }
                        (ParamSig::Scalar(ScalarKind::Usize), _) => self.scalar_usize(a),
                        (ParamSig::Scalar(ScalarKind::DType(d)), _) => self.scalar_as(a, *d),
                        (ParamSig::Tensor(_), None) => unreachable!("tensor parameters have types"),
                    })
                    .collect();
                let call = quote!(#name #turbofish(#(#argv),*)?);
                match &node.ty {
                    Ty::Tuple(_) => call,
                    _ => {
                        if self.dim_tys(n) == ret_tys[0] {
                            call
                        } else {
                            let s = so();
                            quote!(#call.into_shape::<#s>()?)
                        }
                    }
                }
            }
            Op::External { path, args } => {
                let argv = args.iter().map(|&a| match &g.nodes[a].ty {
                    Ty::Scalar(_) => self.scalar_native(a),
                    _ => self.reference(a),
                });
                // The annotation fixes the result's shape type, whatever
                // shape type the function returns (checked at run time).
                let s = so();
                quote!(#path(#(#argv),*)?.into_shape::<#s>()?)
            }
            Op::TupleGet(x, i) => {
                let t = var(*x);
                let idx = syn::Index::from(*i);
                let Op::Call { ret_tys, .. } = &g.nodes[*x].op else {
                    unreachable!("tuples come from calls")
                };
                if self.dim_tys(n) == ret_tys[*i] {
                    quote!(#t.#idx)
                } else {
                    let s = so();
                    quote!(#t.#idx.into_shape::<#s>()?)
                }
            }
            other => unreachable!("not a runtime call: {other:?}"),
        }
    }

    /// A scalar as written, for calls outside the invocation.
    fn scalar_native(&self, n: NodeId) -> TokenStream {
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

    fn result(&mut self) -> TokenStream {
        let mut parts = Vec::new();
        let rets = self.f.ret.clone();
        for (k, &r) in rets.iter().enumerate() {
            // A value returned twice is cloned except for its last copy.
            let later = rets[k + 1..].contains(&r);
            let value = match self.g().nodes[r].op {
                Op::Param(i) => {
                    let p = &self.ast.params[i].name;
                    quote!(::core::clone::Clone::clone(#p))
                }
                _ => {
                    let v = var(r);
                    if later {
                        quote!(::core::clone::Clone::clone(&#v))
                    } else {
                        quote!(#v)
                    }
                }
            };
            parts.push(value);
        }
        if self.f.sig.tuple {
            quote!((#(#parts,)*))
        } else {
            let p = &parts[0];
            quote!(#p)
        }
    }
}

/// A stable kernel entry prefix: the function and a hash of the program
/// (equal programs get equal names and share their PTX).
pub fn kernel_name(fn_name: &str, ir: &Ir) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ir.fingerprint().hash(&mut h);
    let clean: String = fn_name
        .trim_start_matches("r#")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("tf_{clean}_{:016x}", h.finish())
}

fn unary_ir(op: UnaryOp) -> Ir {
    let mut ir = Ir::new(vec![DTypeKind::F64]);
    let x = ir.push(ir::Inst::Input(0), DTypeKind::F64);
    ir.output = ir.push(ir::Inst::Unary(op, x), DTypeKind::F64);
    ir
}

fn param_type_tokens(p: &crate::ast::Param, sig: &Signature, i: usize) -> TokenStream {
    match (&p.ty, &sig.params[i]) {
        (ParamTy::Tensor(ast), ParamSig::Tensor(t)) => {
            let ty = tensor_tokens(t.device, t.dtype, &sig.symbols.dim_tys(&t.dims));
            let sp = ast.sp.span();
            quote_spanned!(sp=> &#ty)
        }
        (_, ParamSig::Scalar(k)) => scalar_type_tokens(*k),
        _ => unreachable!("signature matches the parameters"),
    }
}

fn scalar_type_tokens(k: ScalarKind) -> TokenStream {
    match k {
        ScalarKind::Usize => quote!(usize),
        ScalarKind::DType(d) => dtype_tokens(d),
    }
}

fn return_tokens(sig: &Signature) -> TokenStream {
    let ts: Vec<TokenStream> = sig
        .ret
        .iter()
        .map(|t| tensor_tokens(t.device, t.dtype, &sig.symbols.dim_tys(&t.dims)))
        .collect();
    if sig.tuple {
        quote!((#(#ts,)*))
    } else {
        let t = &ts[0];
        quote!(#t)
    }
}

/// The complete expansion of a checked function and its memory plan.
pub fn tensor_fn(ctx: &Ctx<'_>, ast: &TensorFn, f: &CheckedFn, plan: &Plan) -> TokenStream {
    let mut gen = FnGen {
        ctx,
        f,
        ast,
        kernels: std::collections::HashMap::new(),
        errors: Vec::new(),
    };
    let entry = gen.entry();
    let steps: Vec<TokenStream> = plan.steps.iter().map(|s| gen.step(s)).collect();
    let result = gen.result();
    let attrs = &ast.attrs;
    let vis = &ast.vis;
    let name = &ast.name;
    let generics = &ast.generics;
    let params = ast.params.iter().enumerate().map(|(i, p)| {
        let n = &p.name;
        let t = param_type_tokens(p, &f.sig, i);
        quote!(#n: #t)
    });
    let ret = return_tokens(&f.sig);
    let memory = memory_module(ast, &f.sig, plan);
    let errors = crate::combine(gen.errors).map(|e| e.to_compile_error());
    quote! {
        #errors
        #(#attrs)*
        #[allow(clippy::let_and_return, clippy::redundant_clone, clippy::needless_borrow)]
        #vis fn #name<#(const #generics: usize),*>(#(#params),*) -> ::tensorfn::Result<#ret> {
            #entry
            #(#steps)*
            ::core::result::Result::Ok(#result)
        }
        #memory
    }
}

/// `mod name { pub const PEAK_BYTES: usize = ..; }` (or `peak_bytes::<..>()`
/// for const generics) when every dim is static.
fn memory_module(ast: &TensorFn, sig: &Signature, plan: &Plan) -> TokenStream {
    let Some(cands) = &plan.peak else {
        return quote!();
    };
    let runtime = sig
        .symbols
        .map
        .values()
        .any(|k| matches!(k, SymKind::Runtime(_)));
    if runtime {
        return quote!();
    }
    let vis = &ast.vis;
    let name = &ast.name;
    let doc = format!(
        " The static memory plan of [`{name}`](fn@{name}): the most bytes its intermediate tensors occupy at once (parameters not counted; results counted until returned)."
    );
    let values: Vec<TokenStream> = cands.iter().map(|d| dim_value(d, &sig.symbols)).collect();
    let mut consts = Vec::new();
    for (v, c) in values.iter().zip(cands) {
        let _ = c;
        consts.push(v.clone());
    }
    if sig.generics.is_empty() {
        let peak = cands
            .iter()
            .filter_map(|d| d.as_constant())
            .max()
            .unwrap_or(0)
            .max(0) as usize;
        let lit = Literal::usize_unsuffixed(peak);
        let item_doc = format!(" Peak bytes of live intermediates in one call of `{name}`.");
        return quote! {
            #[doc = #doc]
            #[allow(non_snake_case)]
            #vis mod #name {
                #[doc = #item_doc]
                pub const PEAK_BYTES: usize = #lit;
            }
        };
    }
    let generics = sig.generics.iter().map(|g| format_ident!("{}", g));
    let item_doc = format!(
        " Peak bytes of live intermediates in one call of `{name}` with these const generics."
    );
    quote! {
        #[doc = #doc]
        #[allow(non_snake_case)]
        #vis mod #name {
            #[doc = #item_doc]
            pub const fn peak_bytes<#(const #generics: usize),*>() -> usize {
                let mut peak = 0usize;
                #(
                    let candidate: usize = #consts;
                    if candidate > peak {
                        peak = candidate;
                    }
                )*
                peak
            }
        }
    }
}

/// A `#[kernel]` as a plain Rust scalar function.
pub fn kernel_fn(k: &KernelFn, ir: &Ir) -> TokenStream {
    let attrs = &k.attrs;
    let vis = &k.vis;
    let name = &k.name;
    let params = k.params.iter().map(|(n, d, _)| {
        let t = dtype_tokens(*d);
        quote!(#n: #t)
    });
    let loads: Vec<TokenStream> = k
        .params
        .iter()
        .map(|(n, d, _)| ir::load(quote!(#n), *d))
        .collect();
    let (body, out) = ir::emit_rust(ir, &loads);
    let ret = dtype_tokens(k.ret.0);
    let stored = ir::store(out, k.ret.0);
    quote! {
        #(#attrs)*
        #[allow(unused_variables, clippy::all)]
        #vis fn #name(#(#params),*) -> #ret {
            #body
            #stored
        }
    }
}

/// The dims of a shape as written, typed without checking: literals and
/// lone const generics are `Const`, everything else `Dyn`.
fn stub_shape(t: &TensorTyAst, generics: &[syn::Ident]) -> TokenStream {
    let dims: Vec<DimTy> = t
        .dims
        .iter()
        .map(|d| match &d.expr {
            DimExpr::Lit(n) => DimTy::Const(Dim::constant(*n as i64)),
            DimExpr::Sym(s) if generics.iter().any(|g| g == s) => DimTy::Const(Dim::sym(s)),
            _ => DimTy::Dyn,
        })
        .collect();
    tensor_tokens(t.device.0, t.dtype.0, &dims)
}

/// The signature of a function with errors, so that its callers do not
/// report a missing function on top of the real error.
pub fn stub_fn(f: &TensorFn) -> TokenStream {
    let attrs = &f.attrs;
    let vis = &f.vis;
    let name = &f.name;
    let generics = &f.generics;
    let params = f.params.iter().map(|p| {
        let n = &p.name;
        match &p.ty {
            ParamTy::Tensor(t) => {
                let ty = stub_shape(t, generics);
                quote!(#n: &#ty)
            }
            ParamTy::Scalar(s) => {
                let t = scalar_type_tokens(s.kind);
                quote!(#n: #t)
            }
        }
    });
    let rets: Vec<TokenStream> = f
        .ret
        .tensors
        .iter()
        .map(|t| stub_shape(t, generics))
        .collect();
    let ret = if f.ret.tuple {
        quote!((#(#rets,)*))
    } else {
        let r = &rets[0];
        quote!(#r)
    };
    quote! {
        #(#attrs)*
        #[allow(unused_variables)]
        #vis fn #name<#(const #generics: usize),*>(#(#params),*) -> ::tensorfn::Result<#ret> {
            ::core::unreachable!()
        }
    }
}

/// A kernel with errors, as a signature only.
pub fn stub_kernel(k: &KernelFn) -> TokenStream {
    let vis = &k.vis;
    let name = &k.name;
    let params = k.params.iter().map(|(n, d, _)| {
        let t = dtype_tokens(*d);
        quote!(#n: #t)
    });
    let ret = dtype_tokens(k.ret.0);
    quote! {
        #[allow(unused_variables)]
        #vis fn #name(#(#params),*) -> #ret {
            ::core::unreachable!()
        }
    }
}
