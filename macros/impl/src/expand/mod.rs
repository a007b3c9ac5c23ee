//! From plans to Rust: typed functions calling the runtime, fused kernels
//! as statics with a CPU closure, entry checks of run-time dims, memory
//! plans, and `#[kernel]`s as plain scalar functions.

use crate::ast::{Device, DimExpr, Dt, KernelFn, ParamTy, ScalarKind, TensorFn, TensorTyAst};
use crate::check::CheckedFn;
use crate::graph::*;
use crate::plan::{GroupInput, Step};
use crate::shape::Dim;
use crate::sig::{ParamSig, Signature, Source, SymKind, Symbols};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use tensorfn_core::DTypeKind;
use tensorfn_kernels::ir::Kernel;
use tensorfn_kernels::ptx::Target;
use tensorfn_kernels::{NormOp, ReduceOp, UnaryOp};

mod entry;
mod grad_output;
mod items;
mod memory;
mod ops;
mod pullback;
mod rows;
pub mod rust_code;
mod scalars;
mod stubs;
mod types;

pub use ops::kernel_name;
pub use rows::row_kernel_name;
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
    /// the sm_70 module, and the sm_80 one where it differs
    /// ([`fused_ptx`] in the macro).
    pub ptx: &'a dyn Fn(&Kernel, &str) -> Result<FusedPtx, String>,
}

/// The PTX of a fused kernel: the sm_70 module, and the sm_80 one where it
/// differs (see `tensorfn_kernels::ptx::Target`).
pub type FusedPtx = (String, Option<String>);

/// The PTX modules of a fused kernel whose entries are named after `name`:
/// the sm_70 one, and the sm_80 one only where it differs (the kernel
/// rounds to `bf16`, which sm_80 does in one instruction), so that kernels
/// without `bf16` embed one text.
///
/// ```
/// use tensorfn_kernels::ir::ElementwiseBuilder;
/// use tensorfn_kernels::{DTypeKind, UnaryOp};
/// use tensorfn_macros_impl::expand::fused_ptx;
///
/// let exp_of = |d| {
///     let mut b = ElementwiseBuilder::new();
///     let x = b.input(d);
///     let y = b.unary(UnaryOp::Exp, x);
///     b.output(y).unwrap()
/// };
/// let (sm70, sm80) = fused_ptx(&exp_of(DTypeKind::F32), "tf_demo")?;
/// assert!(sm70.contains(".entry tf_demo_contig"));
/// assert_eq!(sm80, None);
///
/// let (_, sm80) = fused_ptx(&exp_of(DTypeKind::BF16), "tf_demo")?;
/// assert!(sm80.is_some_and(|t| t.contains(".target sm_80")));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn fused_ptx(kernel: &Kernel, name: &str) -> Result<FusedPtx, tensorfn_kernels::Error> {
    let sm70 = tensorfn_kernels::ptx::elementwise(kernel, name)?;
    let sm80 = if tensorfn_kernels::ptx::differs_on(kernel, Target::Sm80) {
        Some(tensorfn_kernels::ptx::elementwise_for(
            kernel,
            name,
            Target::Sm80,
        )?)
    } else {
        None
    };
    Ok((sm70, sm80))
}

struct FnGen<'a> {
    ctx: &'a Ctx<'a>,
    f: &'a CheckedFn,
    /// The dtypes of the instance generated.
    instance: &'a crate::instance::Instance,
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

    /// The result expression; `retype[k]`: result `k` is given back
    /// under the function's dtype parameter.
    fn result(&mut self, retype: &[bool]) -> TokenStream {
        let parts = self.result_parts(retype);
        if self.f.sig.tuple {
            quote!((#(#parts,)*))
        } else {
            let p = &parts[0];
            quote!(#p)
        }
    }

    /// One expression per result, as [`FnGen::result`] gathers them.
    fn result_parts(&mut self, retype: &[bool]) -> Vec<TokenStream> {
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
            parts.push(match retype.get(k) {
                Some(true) => quote!(::tensorfn::__private::retype(#value)?),
                _ => value,
            });
        }
        parts
    }
}

/// The complete expansion of a checked function and its memory plan: one
/// body for a function without dtype parameters, else one body per
/// instance (see [`crate::instance`]), each taken when `T` is its dtype
/// (a constant, so an instance compiles only its own body).
pub fn tensor_fn(
    ctx: &Ctx<'_>,
    ast: &TensorFn,
    f: &CheckedFn,
    instances: &[crate::Planned],
) -> TokenStream {
    tensor_fn_with_grad(ctx, ast, f, instances, None, None)
}

/// [`tensor_fn`] and, for a `#[grad]` function, its joint functions
/// ([`crate::grad`]) beside it: `name::value_and_grad` (`grad`, for a 0-d
/// result) and `name::vjp` (`vjp`: the function with its `grad_output`
/// parameter, [`crate::grad::vjp_ast`], and its joint function).
pub fn tensor_fn_with_grad(
    ctx: &Ctx<'_>,
    ast: &TensorFn,
    f: &CheckedFn,
    instances: &[crate::Planned],
    grad: Option<(&crate::grad::Joint, &[crate::Planned])>,
    vjp: Option<(&TensorFn, &crate::grad::Joint, &[crate::Planned])>,
) -> TokenStream {
    let name = &ast.name;
    let attrs = &ast.attrs;
    let vis = &ast.vis;
    let ret = return_tokens(&f.sig);
    let item = fn_item(
        ctx,
        ast,
        f,
        instances,
        quote!(#(#attrs)* #vis fn #name),
        ret,
        Form::Whole(None),
    );
    let mut extra = match grad {
        Some((joint, planned)) => {
            let doc = format!(
                " The value of [`{}`](fn@super::{}) and its gradients with respect to its `#[grad]` parameters, typed like them (a parameter struct's fields the result does not depend on are zero).",
                ast.name, ast.name
            );
            grad_item(ctx, ast, joint, planned, quote!(value_and_grad), &doc)
        }
        None => quote!(),
    };
    if let Some((vast, joint, planned)) = vjp {
        let doc = format!(
            " The value of [`{}`](fn@super::{}) and the vector-Jacobian products of `grad_output` (the gradient of a loss with respect to the result, typed like it) with respect to its `#[grad]` parameters: the gradients of the loss, typed like the parameters (a parameter struct's fields the result does not depend on are zero), as PyTorch's `torch.autograd.grad(y, params, grad_output)` gives them.",
            ast.name, ast.name
        );
        extra.extend(grad_item(ctx, vast, joint, planned, quote!(vjp), &doc));
        extra.extend(pullback::split_items(ctx, vast, joint, planned, name));
    }
    let peak_of = |planned: &[crate::Planned]| -> Vec<Option<Vec<crate::shape::Dim>>> {
        planned.iter().map(|p| p.plan.peak.clone()).collect()
    };
    let mut peaks = vec![memory::Peak {
        instances,
        cands: peak_of(instances),
        konst: "PEAK_BYTES",
        func: "peak_bytes",
        what: format!("one call of `{name}`"),
    }];
    if let Some((_, planned)) = grad {
        peaks.push(memory::Peak {
            instances: planned,
            cands: peak_of(planned),
            konst: "GRAD_PEAK_BYTES",
            func: "grad_peak_bytes",
            what: format!(
                "one call of `{name}::value_and_grad` (the forward and the backward, as they run)"
            ),
        });
    }
    if let Some((vast, _, planned)) = vjp {
        peaks.push(memory::Peak {
            instances: planned,
            cands: peak_of(planned),
            konst: "VJP_PEAK_BYTES",
            func: "vjp_peak_bytes",
            what: format!(
                "one call of `{name}::vjp`, or of `{name}::forward` and its `Pullback::backward` (the forward and the backward, as they run; `grad_output` not counted)"
            ),
        });
        peaks.push(memory::Peak {
            instances: planned,
            cands: planned
                .iter()
                .map(|p| Some(pullback::pullback_bytes(p, vast)))
                .collect(),
            konst: "PULLBACK_BYTES",
            func: "pullback_bytes",
            what: format!(
                "a `{name}::Pullback` between `{name}::forward` and its `backward` (the intermediates it keeps; the value `forward` returns not counted unless the backward reads it)"
            ),
        });
    }
    let memory = memory::memory_module(ast, &f.sig, &peaks, extra);
    items::respan(
        quote!(#item #memory),
        &items::item_spans(ast, &f.sig.symbols),
    )
}

/// The results of a joint function as `value_and_grad` and `vjp` give
/// them back.
struct GradResults {
    /// The value's type (a tuple for a tuple result).
    value_ty: TokenStream,
    /// The value, from the bound results.
    value: TokenStream,
    /// How many results the value is; the gradients follow.
    values: usize,
    /// The gradients' type: one parameter's, or a tuple of them.
    grad_ty: TokenStream,
    /// The names the joint function's results are bound to, in order.
    rs: Vec<proc_macro2::Ident>,
    /// The gradients, from the bound results, each typed like its
    /// parameter.
    grads: TokenStream,
    /// The visibility of the items, seen from the module's parent as the
    /// function is.
    vis: TokenStream,
}

impl GradResults {
    fn new(ast: &TensorFn, joint: &crate::grad::Joint) -> GradResults {
        use crate::grad::GradOut;
        let f = &joint.f;
        let tys: Vec<TokenStream> = f
            .sig
            .ret
            .iter()
            .map(|t| tensor_tokens(t.device, t.dtype, &f.sig.symbols.dim_tys(&t.dims)))
            .collect();
        let rs: Vec<proc_macro2::Ident> = (0..f.ret.len())
            .map(|k| format_ident!("__r{}", k))
            .collect();
        let mut grad_tys = Vec::new();
        let mut grads = Vec::new();
        for out in &joint.outs {
            match out {
                GradOut::Tensor { ret } => {
                    grad_tys.push(tys[*ret].clone());
                    let r = &rs[*ret];
                    grads.push(quote!(#r));
                }
                GradOut::Struct { param, fields } => {
                    let p = &ast.params[*param];
                    let ParamTy::Struct(s) = &p.ty else {
                        unreachable!("a struct gradient is of a struct parameter")
                    };
                    let ty = &s.ty;
                    grad_tys.push(quote!(#ty));
                    let n = &p.name;
                    let sets = fields.iter().map(|(suffix, r)| {
                        let path: TokenStream = suffix.parse().unwrap_or_default();
                        let r = &rs[*r];
                        quote!(__g #path = #r;)
                    });
                    grads.push(quote!({
                        let mut __g: #ty = ::tensorfn::Params::zeros_like(#n)?;
                        #(#sets)*
                        __g
                    }));
                }
            }
        }
        let (grad_ty, grads) = if grads.len() == 1 {
            (grad_tys[0].clone(), grads[0].clone())
        } else {
            (quote!((#(#grad_tys,)*)), quote!((#(#grads,)*)))
        };
        let vis = match &ast.vis {
            syn::Visibility::Public(_) => quote!(pub),
            syn::Visibility::Inherited => quote!(pub(super)),
            syn::Visibility::Restricted(_) => quote!(pub(crate)),
        };
        let values = joint.values;
        let (value_ty, value) = match ast.ret.tuple {
            true => {
                let (t, r) = (&tys[..values], &rs[..values]);
                (quote!((#(#t,)*)), quote!((#(#r,)*)))
            }
            false => {
                let r = &rs[0];
                (tys[0].clone(), quote!(#r))
            }
        };
        GradResults {
            value_ty,
            value,
            values,
            grad_ty,
            rs,
            grads,
            vis,
        }
    }
}

/// `pub fn value_and_grad(..)` or `pub fn vjp(..)` (`name`): the joint
/// function's body, its results gathered as `(value, grads)` with each
/// gradient typed like its parameter.
fn grad_item(
    ctx: &Ctx<'_>,
    ast: &TensorFn,
    joint: &crate::grad::Joint,
    planned: &[crate::Planned],
    name: TokenStream,
    doc: &str,
) -> TokenStream {
    let GradResults {
        value_ty,
        value,
        grad_ty,
        rs,
        grads,
        vis,
        ..
    } = GradResults::new(ast, joint);
    let wrap = move |result: TokenStream| -> TokenStream {
        quote!({
            let (#(#rs,)*) = #result;
            (#value, #grads)
        })
    };
    fn_item(
        ctx,
        ast,
        &joint.f,
        planned,
        // `vjp`'s `grad_output` goes unread where every gradient is zero.
        quote!(#[doc = #doc] #[allow(unused_variables)] #vis fn #name),
        quote!((#value_ty, #grad_ty)),
        Form::Whole(Some(&wrap)),
    )
}

/// What [`fn_item`] makes of a plan.
enum Form<'w> {
    /// One function running every step; `wrap` turns the results'
    /// expression into the returned value.
    Whole(Option<&'w dyn Fn(TokenStream) -> TokenStream>),
    /// `name::forward`: the steps before the backward starts, then a
    /// `Pullback` running the rest ([`pullback`]).
    Split(&'w pullback::Split),
}

/// The function item: `head` (attributes, visibility, `fn name`), the
/// parameters as written (less `grad_output` for [`Form::Split`], one
/// tuple `grad_output` for the gradients of a tuple result), `ret`, and
/// one body per instance.
fn fn_item(
    ctx: &Ctx<'_>,
    ast: &TensorFn,
    f: &CheckedFn,
    instances: &[crate::Planned],
    head: TokenStream,
    ret: TokenStream,
    form: Form<'_>,
) -> TokenStream {
    let omitted: Vec<usize> = match &form {
        Form::Whole(_) => vec![],
        Form::Split(_) => grad_output::params(ast),
    };
    let mut errors = Vec::new();
    let mut bodies = Vec::new();
    for p in instances {
        let mut fn_gen = FnGen {
            ctx,
            f: &p.f,
            instance: &p.instance,
            ast,
            kernels: std::collections::HashMap::new(),
            errors: Vec::new(),
        };
        let entry = fn_gen.entry(&omitted);
        // Tensors of a dtype parameter are seen under this instance's
        // dtype (after the entry binds the fields of parameter structs),
        // and the results given back under the parameter.
        let generic_ret: Vec<bool> = match p.instance.is_plain() {
            true => vec![],
            false => f
                .sig
                .ret
                .iter()
                .map(|t| matches!(t.dtype, Dt::Param(..)))
                .collect(),
        };
        let mut retyped: Vec<(usize, TokenStream)> = Vec::new();
        for (i, par) in ast.params.iter().enumerate() {
            let ParamSig::Tensor(t) = &f.sig.params[i] else {
                continue;
            };
            if p.instance.is_plain() || !matches!(t.dtype, Dt::Param(..)) {
                continue;
            }
            let n = &par.name;
            let ty = param_type_tokens(par, &p.f.sig, i);
            retyped.push((
                i,
                quote!(let #n: #ty = ::tensorfn::__private::retype_ref(#n)?;),
            ));
        }
        let (steps, result) = match &form {
            Form::Whole(wrap) => {
                let steps: Vec<TokenStream> = p.plan.steps.iter().map(|s| fn_gen.step(s)).collect();
                let result = fn_gen.result(&generic_ret);
                let result = match wrap {
                    Some(w) => w(result),
                    None => result,
                };
                (quote!(#(#steps)*), result)
            }
            Form::Split(split) => {
                let (retyped_out, rest): (Vec<_>, Vec<_>) =
                    retyped.drain(..).partition(|(i, _)| omitted.contains(i));
                retyped = rest;
                let retype_out: TokenStream = retyped_out.into_iter().map(|(_, t)| t).collect();
                fn_gen.split_body(&p.plan, split, &generic_ret, retype_out)
            }
        };
        let retyped = retyped.iter().map(|(_, t)| t);
        if p.instance.is_plain() {
            bodies.push(quote! {
                #entry
                #steps
                ::core::result::Result::Ok(#result)
            });
        } else {
            let cond = instance_condition(&p.instance);
            bodies.push(quote! {
                if #cond {
                    #entry
                    #(#retyped)*
                    #steps
                    return ::core::result::Result::Ok(#result);
                }
            });
        }
        errors.extend(fn_gen.errors);
    }
    let fallback = instances.iter().any(|p| !p.instance.is_plain()).then(|| {
        let t = f.sig.type_params.iter().find_map(|p| match p.kind {
            crate::ast::TypeParamKind::DType(_) => Some(format_ident!("{}", p.name.to_string())),
            crate::ast::TypeParamKind::Device => None,
        });
        let name = f.sig.name.clone();
        quote!(::core::result::Result::Err(::tensorfn::__private::no_body::<#t>(#name)))
    });
    // The split form's borrows of its arguments live in its `Pullback`.
    let lifetime = matches!(form, Form::Split(_)).then(pullback::lifetime);
    let generics = generics_with_lifetime(&ast.type_params, &ast.generics, lifetime.as_ref());
    // Fields of parameter structs are bound at entry, not passed; the
    // gradients of a tuple result are passed as one tuple.
    let tuple_param = match &form {
        Form::Whole(_) => grad_output::tuple_param(ast, &f.sig),
        Form::Split(_) => None,
    };
    let in_tuple = match tuple_param {
        Some(_) => grad_output::params(ast),
        None => vec![],
    };
    let params = ast
        .params
        .iter()
        .enumerate()
        .filter(|(i, p)| {
            !matches!(p.ty, ParamTy::Field(_)) && !omitted.contains(i) && !in_tuple.contains(i)
        })
        .map(|(i, p)| {
            let n = &p.name;
            let t = param_sig_tokens(p, &f.sig, i);
            // A struct parameter stays borrowed by the pullback; a tensor
            // one is kept as a handle where the backward reads it.
            let t = match &lifetime {
                Some(l) if matches!(p.ty, ParamTy::Struct(_)) => pullback::borrowed_for(t, l),
                _ => t,
            };
            quote!(#n: #t)
        })
        .chain(tuple_param);
    let unpack = match in_tuple.is_empty() {
        true => quote!(),
        false => grad_output::unpack(ast),
    };
    let bindings = param_bindings(ast, &f.sig, &|i| !omitted.contains(&i));
    let errors = crate::combine(errors).map(|e| e.to_compile_error());
    quote! {
        #errors
        // A parameter can go unread by design: `batch_norm`'s running
        // statistics in training, which PyTorch's signature still takes.
        #[allow(unused_variables, clippy::let_and_return, clippy::redundant_clone, clippy::needless_borrow, clippy::needless_return, clippy::needless_question_mark, clippy::approx_constant)]
        #head #generics (#(#params),*) -> ::tensorfn::Result<#ret> {
            #unpack
            #bindings
            #(#bodies)*
            #fallback
        }
    }
}

/// A `#[kernel]` as a plain Rust scalar function.
pub fn kernel_fn(k: &KernelFn, kernel: &Kernel) -> TokenStream {
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
        .map(|(n, d, _)| rust_code::load(quote!(#n), *d))
        .collect();
    let (body, out) = rust_code::emit_rust(kernel, &loads);
    let ret = dtype_tokens(k.ret.0);
    let stored = rust_code::store(out, k.ret.0);
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
