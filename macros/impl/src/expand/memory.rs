//! The static memory plan: a module next to the function.

use super::*;

/// One figure the module states: the peak of the function itself, or of
/// a joint function (`value_and_grad`, `vjp`) planned beside it, or the
/// bytes a `Pullback` keeps.
pub(super) struct Peak<'a> {
    /// The planned instances.
    pub instances: &'a [crate::Planned],
    /// Each instance's candidates: the bytes stated are their maximum
    /// (`None` where unknown).
    pub cands: Vec<Option<Vec<Dim>>>,
    /// The name of the constant (`PEAK_BYTES`) ...
    pub konst: &'static str,
    /// ... and of the `const fn` for generics (`peak_bytes`).
    pub func: &'static str,
    /// What it measures, for its doc (`one call of `f``).
    pub what: String,
}

/// `mod name { pub const PEAK_BYTES: usize = ..; }` (or `peak_bytes::<..>()`
/// for const generics) when every dim is static, with
/// `GRAD_PEAK_BYTES` / `VJP_PEAK_BYTES` beside it for a `#[grad]`
/// function.
pub(super) fn memory_module(
    ast: &TensorFn,
    sig: &Signature,
    peaks: &[Peak<'_>],
    extra: TokenStream,
) -> TokenStream {
    let vis = &ast.vis;
    let name = &ast.name;
    let runtime = sig
        .symbols
        .map
        .values()
        .any(|k| matches!(k, SymKind::Runtime(_)));
    let items: Vec<TokenStream> = match runtime {
        true => vec![],
        false => peaks.iter().filter_map(|p| peak_item(sig, p)).collect(),
    };
    if items.is_empty() {
        // `extra` (`value_and_grad`, `vjp`) alone: the module without the plan.
        if extra.is_empty() {
            return quote!();
        }
        let doc = format!(" The gradients of [`{name}`](fn@{name}).");
        return quote! {
            #[doc = #doc]
            #[allow(non_snake_case)]
            #vis mod #name {
                #[allow(unused_imports)]
                use super::*;
                #extra
            }
        };
    }
    let doc = format!(
        " The static memory plan of [`{name}`](fn@{name}): the most bytes its intermediate tensors occupy at once (parameters not counted; results counted until returned)."
    );
    let const_items = sig.symbols.map.values().any(|k| *k == SymKind::ConstItem);
    let import = match const_items || !extra.is_empty() {
        true => quote!(
            #[allow(unused_imports)]
            use super::*;
        ),
        false => quote!(),
    };
    quote! {
        #[doc = #doc]
        #[allow(non_snake_case)]
        #vis mod #name {
            #import
            #(#items)*
            #extra
        }
    }
}

/// The item stating one peak, `None` when a plan's peak is unknown (a
/// call to a function outside the invocation, recursion).
fn peak_item(sig: &Signature, peak: &Peak<'_>) -> Option<TokenStream> {
    let instances = peak.instances;
    let cands = peak
        .cands
        .iter()
        .map(|c| c.as_ref())
        .collect::<Option<Vec<&Vec<Dim>>>>()?;
    // The plan's `const` items, seen from the module inside this one.
    let items = sig.symbols.map.values().any(|k| *k == SymKind::ConstItem);
    let nested = |s: &str| -> Option<Dim> {
        let s = match (sig.symbols.is_const_item(s), s.split_once("::")) {
            (true, Some(("self", rest))) => format!("super::{rest}"),
            (true, Some(("super", _))) => format!("super::{s}"),
            _ => s.to_string(),
        };
        Some(Dim::sym(&s))
    };
    let peak_of = |cands: &[Dim]| -> TokenStream {
        let consts: Vec<TokenStream> = cands
            .iter()
            .map(|d| {
                dim_value(
                    &d.substitute(&nested).unwrap_or_else(|| d.clone()),
                    &sig.symbols,
                )
            })
            .collect();
        // The floor quotients the candidates mention, from the generics.
        let mut used: std::collections::BTreeSet<String> = cands
            .iter()
            .flat_map(|d| d.symbols())
            .map(|s| s.to_string())
            .collect();
        floor_inputs(&mut used);
        let floors = floor_bindings(&used, &sig.symbols);
        quote! {{
            #floors
            let mut peak = 0usize;
            #(
                let candidate: usize = #consts;
                if candidate > peak {
                    peak = candidate;
                }
            )*
            peak
        }}
    };
    let dtype_params: Vec<&crate::ast::TypeParam> = sig
        .type_params
        .iter()
        .filter(|p| matches!(p.kind, crate::ast::TypeParamKind::DType(_)))
        .collect();
    // The item: a literal when every candidate is one, a constant the
    // compiler computes from the `const` items, or a `const fn` of the
    // const generics and dtype parameters.
    Some(if sig.generics.is_empty() && dtype_params.is_empty() {
        let value = match items {
            false => {
                let peak = cands[0].iter().filter_map(|d| d.as_constant()).max();
                let lit = Literal::usize_unsuffixed(peak.unwrap_or(0).max(0) as usize);
                quote!(#lit)
            }
            true => peak_of(cands[0]),
        };
        let item_doc = format!(" Peak bytes of live intermediates in {}.", peak.what);
        let konst = format_ident!("{}", peak.konst);
        quote! {
            #[doc = #item_doc]
            pub const #konst: usize = #value;
        }
    } else {
        let generics = sig.generics.iter().map(|g| format_ident!("{}", g));
        let types: Vec<proc_macro2::Ident> = dtype_params
            .iter()
            .map(|p| format_ident!("{}", p.name.to_string()))
            .collect();
        let body = if dtype_params.is_empty() {
            peak_of(cands[0])
        } else {
            let arms = instances.iter().zip(&cands).map(|(p, c)| {
                let cond = instance_condition(&p.instance);
                let value = peak_of(c);
                quote!(if #cond { return #value; })
            });
            quote!({ #(#arms)* 0 })
        };
        let item_doc = format!(
            " Peak bytes of live intermediates in {} with these generics.",
            peak.what
        );
        let func = format_ident!("{}", peak.func);
        quote! {
            #[doc = #item_doc]
            pub const fn #func<#(#types: ::tensorfn::DType,)* #(const #generics: usize),*>() -> usize
                #body
        }
    })
}
