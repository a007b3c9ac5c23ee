//! How `vjp`, `forward` and `Pullback::backward` take `grad_output`: the
//! one gradient of a tensor result as it is, or, for a tuple result, one
//! tuple with an entry per element, `()` where an element has no gradient
//! (an index tensor). Inside, each gradient is a parameter of its own
//! (`grad::vjp_ast`'s `grad_output_0`, `grad_output_1`, ..), so the
//! checks, the dtype instances and the plan see ordinary tensors; these
//! are the tokens that pack them into the tuple and out of it.

use super::*;
use crate::ast::GradOutput;

/// The name `grad_output` as the generated items spell it.
fn name() -> proc_macro2::Ident {
    format_ident!("{}", crate::grad::GRAD_OUTPUT)
}

/// The parameters holding the gradients of `ast`'s results (none for a
/// function that is not a `vjp`).
pub(super) fn params(ast: &TensorFn) -> Vec<usize> {
    ast.grad_output
        .as_ref()
        .map(GradOutput::params)
        .unwrap_or_default()
}

/// The tuple form of `ast`'s `grad_output`, if its result is a tuple.
fn tuple(ast: &TensorFn) -> Option<&GradOutput> {
    ast.grad_output.as_ref().filter(|g| g.tuple)
}

/// `(a, (), b,)` of one token stream per slot, `()` for a slot without a
/// gradient.
fn per_slot(g: &GradOutput, each: &dyn Fn(usize) -> TokenStream) -> TokenStream {
    let parts = g.slots.iter().map(|s| match s {
        Some(i) => each(*i),
        None => quote!(()),
    });
    quote!((#(#parts,)*))
}

/// The parameter `grad_output: (&impl TensorArg<..>, (), ..)` of a tuple
/// result, which stands for the gradient parameters in the signature.
pub(super) fn tuple_param(ast: &TensorFn, sig: &Signature) -> Option<TokenStream> {
    tuple(ast)?;
    let (n, ty) = (name(), sig_ty(ast, sig));
    Some(quote!(#n: #ty))
}

/// `let (grad_output_0, (),) = grad_output;`: the tuple's entries bound
/// to the gradient parameters' names (nothing for a tensor result).
pub(super) fn unpack(ast: &TensorFn) -> TokenStream {
    let Some(g) = tuple(ast) else {
        return quote!();
    };
    let (n, pat) = (name(), names(ast, g));
    quote!(let #pat = #n;)
}

/// `(grad_output_0, (),)`: the gradient parameters' names in their slots.
fn names(ast: &TensorFn, g: &GradOutput) -> TokenStream {
    per_slot(g, &|i| {
        let p = &ast.params[i].name;
        quote!(#p)
    })
}

/// The gradient parameters packed again as `grad_output` (the inverse of
/// [`unpack`]).
pub(super) fn pack(ast: &TensorFn) -> TokenStream {
    match tuple(ast) {
        Some(g) => names(ast, g),
        None => {
            let n = name();
            quote!(#n)
        }
    }
}

/// The type of `grad_output` with the parameters' own types
/// (`&Tensor<D, T, S>`), as the pullback's closure takes it.
pub(super) fn concrete_ty(ast: &TensorFn, sig: &Signature) -> TokenStream {
    typed(ast, sig, param_type_tokens)
}

/// The type of `grad_output` in a public signature (`&impl TensorArg<..>`
/// per gradient, so a wrong one gets the call-site messages of any tensor
/// argument).
pub(super) fn sig_ty(ast: &TensorFn, sig: &Signature) -> TokenStream {
    typed(ast, sig, param_sig_tokens)
}

/// The type of `grad_output`, each gradient parameter's type written by
/// `each`: the tuple of them for a tuple result, else the one.
fn typed(
    ast: &TensorFn,
    sig: &Signature,
    each: fn(&crate::ast::Param, &Signature, usize) -> TokenStream,
) -> TokenStream {
    match tuple(ast) {
        Some(g) => per_slot(g, &|i| each(&ast.params[i], sig, i)),
        None => {
            let i = *params(ast).first().expect("a vjp has a gradient parameter");
            each(&ast.params[i], sig, i)
        }
    }
}
