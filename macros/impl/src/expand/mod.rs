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

mod entry;
mod memory;
mod ops;
mod scalars;
mod stubs;
mod types;

pub use ops::kernel_name;
pub use stubs::{stub_fn, stub_kernel};
use types::*;
pub use types::{device_tokens, dim_value, dtype_tokens, shape_tokens};

/// Everything the expansion of one invocation needs.
pub struct Ctx<'a> {
    /// Signatures of the invocation's functions (`None` where broken).
    pub sigs: &'a [Option<Signature>],
    /// The functions as written.
    pub fns: &'a [&'a TensorFn],
    /// The kernels as written.
    pub kernels: &'a [&'a KernelFn],
    /// PTX text of a fused element program with the given kernel name:
    /// the sm_70 module, and the sm_80 one where it differs.
    pub ptx: &'a dyn Fn(&Ir, &str) -> Result<FusedPtx, String>,
}

/// The PTX of a fused kernel: the sm_70 module, and the sm_80 one where it
/// differs (see `tensorfn_kernels::ptx::Target`).
pub type FusedPtx = (String, Option<String>);

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
    let memory = memory::memory_module(ast, &f.sig, plan);
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
        // Used by the fused kernels it is inlined into, which rustc does not see.
        #[allow(dead_code, unused_variables, clippy::all)]
        #vis fn #name(#(#params),*) -> #ret {
            #body
            #stored
        }
    }
}
