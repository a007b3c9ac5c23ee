//! `name::forward` and `name::Pullback`: `name::vjp` split where its
//! backward starts, so that a chain of layers runs each forward once.
//!
//! The split form is the plan of `vjp`'s joint function itself, cut in
//! two: the steps before the first one that reads `grad_output` (directly
//! or through values computed from it) run in `forward`, the rest in a
//! closure that `forward` builds and `Pullback::backward` calls. The
//! closure moves in exactly the values the later steps read (the joint
//! function's values alive across the cut, `recompute = true` included:
//! its recomputed elementwise values are backward steps), keeps handles
//! to the tensor arguments they read, and borrows the parameter structs. Both halves run the same steps, kernels and drops as `vjp`,
//! in the same order, so the gradients are the same bits and each half's
//! memory is `vjp`'s over the same steps.

use super::*;
use crate::plan::{step_reads, Plan};
use std::collections::{BTreeSet, HashSet};

/// What [`FnGen::split_body`] needs beside the plan.
pub(super) struct Split {
    /// The type of `grad_output` in the closure's signature
    /// (`&Tensor<D, T, S>`, or a tuple of them).
    pub grad_output_ty: TokenStream,
    /// The joint function's results as `vjp` gives them back.
    pub results: GradResults,
}

/// The lifetime of the arguments a `Pullback` borrows.
pub(super) fn lifetime() -> syn::Lifetime {
    syn::Lifetime::new("'a", proc_macro2::Span::call_site())
}

/// A parameter struct's type `&X` as `&'a X`.
pub(super) fn borrowed_for(ty: TokenStream, lifetime: &syn::Lifetime) -> TokenStream {
    let mut tokens = ty.into_iter();
    match tokens.next() {
        Some(proc_macro2::TokenTree::Punct(p)) if p.as_char() == '&' => {
            let rest: TokenStream = tokens.collect();
            quote!(& #lifetime #rest)
        }
        first => first.into_iter().chain(tokens).collect(),
    }
}

/// The nodes step `s` computes.
fn members(s: &Step) -> Vec<NodeId> {
    match s {
        Step::Fused(gr) => gr.members.clone(),
        Step::Rows(r) => std::iter::once(r.node)
            .chain(
                r.producers
                    .iter()
                    .flat_map(|(_, p)| p.members.iter().copied()),
            )
            .chain(r.consumer.iter().flat_map(|c| c.members.iter().copied()))
            .collect(),
        Step::Op(n) => vec![*n],
        Step::Drop(_) => vec![],
    }
}

/// The value step `s` binds, if any.
fn defines(s: &Step) -> Option<NodeId> {
    match s {
        Step::Fused(gr) => Some(gr.out),
        Step::Rows(r) => Some(r.out()),
        Step::Op(n) => Some(*n),
        Step::Drop(_) => None,
    }
}

/// Where the backward starts: the index of the first step computing a
/// node that depends on one of `seeds` (the gradients in `grad_output`).
fn split_at(g: &Graph, steps: &[Step], seeds: &[NodeId]) -> usize {
    // Operands precede their users in the graph.
    let mut depends = vec![false; g.nodes.len()];
    for n in 0..g.nodes.len() {
        depends[n] = seeds.contains(&n) || g.inputs(n).into_iter().any(|i| depends[i]);
    }
    steps
        .iter()
        .position(|s| members(s).into_iter().any(|n| depends[n]))
        .unwrap_or(steps.len())
}

/// The bytes a `Pullback` keeps: the buffers the steps before the cut
/// allocate that the steps after it read, or that hold a gradient (the
/// results after the `values` of the value).
fn kept_bytes(f: &CheckedFn, plan: &Plan, cut: usize, values: usize) -> crate::shape::Dim {
    let before: HashSet<NodeId> = plan.steps[..cut].iter().filter_map(defines).collect();
    let read = plan.steps[cut..]
        .iter()
        .flat_map(|s| step_reads(&f.graph, s));
    let roots: BTreeSet<NodeId> = read
        .chain(f.ret[values..].iter().copied())
        .filter(|n| before.contains(n))
        .filter_map(|n| plan.root_of.get(&n).copied())
        .collect();
    plan.buffers
        .iter()
        .filter(|(r, _)| roots.contains(r))
        .fold(crate::shape::Dim::constant(0), |a, (_, b)| a.add(b))
        .add(&saved_lse_bytes(f, plan, cut, &before))
}

/// The bytes of the attention forwards' log-sum-exps that the backward
/// after the cut reads: bound beside the attention's value (`__lseN`, f32,
/// one per row of queries), not buffers of the plan, and moved into the
/// closure like the values.
fn saved_lse_bytes(
    f: &CheckedFn,
    plan: &Plan,
    cut: usize,
    before: &HashSet<NodeId>,
) -> crate::shape::Dim {
    let outs: BTreeSet<NodeId> = plan.steps[cut..]
        .iter()
        .flat_map(members)
        .filter_map(|n| match f.graph.nodes[n].op {
            Op::AttentionBackward { out, .. } if before.contains(&out) => Some(out),
            _ => None,
        })
        .collect();
    outs.into_iter()
        .filter_map(|out| f.graph.nodes[out].ty.tensor().map(|t| t.dims.clone()))
        .map(|d| crate::shape::numel(&d[..d.len().saturating_sub(1)]).scale(4))
        .fold(crate::shape::Dim::constant(0), |a, b| a.add(&b))
}

/// The nodes of `vast`'s gradient parameters in `f`.
fn seeds(f: &CheckedFn, vast: &TensorFn) -> Vec<NodeId> {
    grad_output::params(vast)
        .into_iter()
        .map(|i| f.params[i])
        .collect()
}

/// The candidates of `PULLBACK_BYTES` for one planned instance of `vjp`
/// (`vast`: the function it computes).
pub(super) fn pullback_bytes(p: &crate::Planned, vast: &TensorFn) -> Vec<crate::shape::Dim> {
    let cut = split_at(&p.f.graph, &p.plan.steps, &seeds(&p.f, vast));
    let values = vast.ret.tensors.len();
    vec![kept_bytes(&p.f, &p.plan, cut, values)]
}

impl FnGen<'_> {
    /// The body of `forward` for one instance: the steps before the cut,
    /// the closure running the rest, and the result `(value, Pullback)`.
    /// `retype_out` rebinds `grad_output` under this instance's dtypes.
    pub(super) fn split_body(
        &mut self,
        plan: &Plan,
        split: &Split,
        generic_ret: &[bool],
        retype_out: TokenStream,
    ) -> (TokenStream, TokenStream) {
        let go = grad_output::params(self.ast);
        let cut = split_at(self.g(), &plan.steps, &seeds(self.f, self.ast));
        let forward: Vec<TokenStream> = plan.steps[..cut].iter().map(|s| self.step(s)).collect();
        let backward: Vec<TokenStream> = plan.steps[cut..].iter().map(|s| self.step(s)).collect();
        // The value (each element of a tuple): computed before the cut
        // (the backward starts from its gradient), and a clone of the
        // handle, so that the closure can still own the value where the
        // backward reads it.
        let GradResults {
            grad_ty,
            rs,
            grads,
            values,
            ..
        } = &split.results;
        let mut value = Vec::new();
        for k in 0..*values {
            let r = self.f.ret[k];
            let v = match self.g().nodes[r].op {
                Op::Param(i) => {
                    let p = &self.ast.params[i].name;
                    quote!(::core::clone::Clone::clone(#p))
                }
                _ => {
                    if !plan.steps[..cut].iter().any(|s| defines(s) == Some(r)) {
                        let at = &self.g().nodes[r].sp;
                        self.errors.push(at.error(format!(
                            "internal error of `tensor_fn!`: the value of `{}` is computed after its backward starts, so `{}::forward` cannot return it; use `{}::vjp`",
                            self.ast.name, self.ast.name, self.ast.name
                        )));
                    }
                    let v = var(r);
                    quote!(::core::clone::Clone::clone(&#v))
                }
            };
            value.push(match generic_ret.get(k) {
                Some(true) => quote!(::tensorfn::__private::retype(#v)?),
                _ => v,
            });
        }
        let value = match self.ast.ret.tuple {
            true => quote!((#(#value,)*)),
            false => value.remove(0),
        };
        let parts = self.result_parts(generic_ret);
        let parts = &parts[*values..];
        let rs = &rs[*values..];
        let go_name = format_ident!("{}", crate::grad::GRAD_OUTPUT);
        let unpack = grad_output::unpack(self.ast);
        let go_ty = &split.grad_output_ty;
        let checks = self.checks_of(&go);
        // The tensor arguments the backward reads, kept as handles (a
        // tensor is a counted reference to its buffer: nothing is
        // copied), so that the caller may drop or replace its own, as a
        // chain of layers does with each layer's input.
        let read: HashSet<NodeId> = plan.steps[cut..]
            .iter()
            .flat_map(|s| step_reads(self.g(), s))
            .chain(self.f.ret[*values..].iter().copied())
            .collect();
        let mut keep = TokenStream::new();
        let mut rebind = TokenStream::new();
        for (i, par) in self.ast.params.iter().enumerate() {
            let tensor = matches!(par.ty, crate::ast::ParamTy::Tensor(_));
            if !tensor || go.contains(&i) || !read.contains(&self.f.params[i]) {
                continue;
            }
            let n = &par.name;
            let own = format_ident!("__tf_own_{}", n);
            keep.extend(quote!(let #own = ::core::clone::Clone::clone(#n);));
            rebind.extend(quote!(let #n = &#own;));
        }
        let steps = quote! {
            #(#forward)*
            let __tf_value = #value;
            #keep
            let __tf_backward = move |#go_name: #go_ty| -> ::tensorfn::Result<#grad_ty> {
                #unpack
                #rebind
                #retype_out
                #checks
                #(#backward)*
                let (#(#rs,)*) = (#(#parts,)*);
                ::core::result::Result::Ok(#grads)
            };
        };
        let result = quote!((
            __tf_value,
            Pullback {
                backward: ::std::boxed::Box::new(__tf_backward),
                _types: ::core::marker::PhantomData,
            },
        ));
        (steps, result)
    }
}

/// `name::forward` and `name::Pullback` of a `#[grad]` function with a
/// `vjp`: `vast` and `joint` as `vjp` is built from them, `name` the
/// function's own name.
pub(super) fn split_items(
    ctx: &Ctx<'_>,
    vast: &TensorFn,
    joint: &crate::grad::Joint,
    planned: &[crate::Planned],
    name: &syn::Ident,
) -> TokenStream {
    let results = GradResults::new(vast, joint);
    let go = grad_output::params(vast);
    let sig = &joint.f.sig;
    let go_name = format_ident!("{}", crate::grad::GRAD_OUTPUT);
    let go_sig = grad_output::sig_ty(vast, sig);
    let go_unpack = grad_output::unpack(vast);
    let go_bind = param_bindings(vast, sig, &|i| go.contains(&i));
    let go_pack = grad_output::pack(vast);
    let lt = lifetime();
    let types: Vec<proc_macro2::Ident> = vast
        .type_params
        .iter()
        .map(|p| format_ident!("{}", p.name.to_string()))
        .collect();
    let consts = &vast.generics;
    let decl = generics_with_lifetime(&vast.type_params, consts, Some(&lt));
    let pullback = quote!(Pullback<#lt, #(#types,)* #(#consts),*>);
    let GradResults {
        value_ty,
        grad_ty,
        vis,
        ..
    } = &results;
    let (value_ty, grad_ty, vis) = (value_ty.clone(), grad_ty.clone(), vis.clone());
    let split = Split {
        grad_output_ty: grad_output::concrete_ty(vast, sig),
        results,
    };
    let go_ty = &split.grad_output_ty;
    let forward_doc = format!(
        " The forward of [`{name}`](fn@super::{name}) for a backward later: its value, and the [`Pullback`] that gives the gradients `{name}::vjp` gives for a `grad_output`, without running the forward again. It keeps the values the backward reads ([`Pullback`] says how many bytes) and borrows the parameter structs until then. `forward(args..)` then `backward(grad_output)` runs the steps of `vjp(args.., grad_output)` in its order, so the value and the gradients are the same bits."
    );
    let forward = fn_item(
        ctx,
        vast,
        &joint.f,
        planned,
        quote!(#[doc = #forward_doc] #vis fn forward),
        quote!((#value_ty, #pullback)),
        Form::Split(&split),
    );
    let struct_doc = format!(
        " What the backward of [`{name}`](fn@super::{name}) reads, kept by [`forward`] (the intermediate values, moved in, the tensor arguments it reads, as handles, and the parameter structs, borrowed for `'a`): [`Pullback::backward`] runs the rest of `{name}::vjp`. `PULLBACK_BYTES` (or `pullback_bytes`, of the generics and run-time dims) states the bytes kept."
    );
    let backward_doc = format!(
        " The gradients `{name}::vjp` gives for `grad_output` (the gradient of a loss with respect to the value [`forward`] returned, typed like it), typed like the `#[grad]` parameters."
    );
    quote! {
        #forward

        #[doc = #struct_doc]
        #[must_use = "the gradients are computed by `backward`"]
        #[allow(clippy::type_complexity)]
        #vis struct Pullback #decl {
            // `Send`, as the tensors and borrowed parameter structs it
            // holds are: a backward may run on another thread.
            backward: ::std::boxed::Box<dyn ::core::ops::FnOnce(#go_ty) -> ::tensorfn::Result<#grad_ty> + ::core::marker::Send + #lt>,
            _types: ::core::marker::PhantomData<fn() -> (#(#types,)*)>,
        }

        impl #decl #pullback {
            #[doc = #backward_doc]
            #[allow(clippy::type_complexity)]
            pub fn backward(self, #go_name: #go_sig) -> ::tensorfn::Result<#grad_ty> {
                #go_unpack
                #go_bind
                (self.backward)(#go_pack)
            }
        }
    }
}
