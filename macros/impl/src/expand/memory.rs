//! The static memory plan: a module next to the function.

use super::*;

/// `mod name { pub const PEAK_BYTES: usize = ..; }` (or `peak_bytes::<..>()`
/// for const generics) when every dim is static.
pub(super) fn memory_module(
    ast: &TensorFn,
    sig: &Signature,
    instances: &[crate::Planned],
    extra: TokenStream,
) -> TokenStream {
    let vis = &ast.vis;
    let name = &ast.name;
    // `extra` (`value_and_grad`, `vjp`) alone: the module without the plan.
    let only_extra = || -> TokenStream {
        if extra.is_empty() {
            return quote!();
        }
        let doc = format!(" The gradients of [`{name}`](fn@{name}).");
        quote! {
            #[doc = #doc]
            #[allow(non_snake_case)]
            #vis mod #name {
                #[allow(unused_imports)]
                use super::*;
                #extra
            }
        }
    };
    let Some(cands) = instances
        .iter()
        .map(|p| p.plan.peak.as_ref())
        .collect::<Option<Vec<&Vec<Dim>>>>()
    else {
        return only_extra();
    };
    let runtime = sig
        .symbols
        .map
        .values()
        .any(|k| matches!(k, SymKind::Runtime(_)));
    if runtime {
        return only_extra();
    }
    let doc = format!(
        " The static memory plan of [`{name}`](fn@{name}): the most bytes its intermediate tensors occupy at once (parameters not counted; results counted until returned)."
    );
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
        quote! {{
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
    let import = match items || !extra.is_empty() {
        true => quote!(
            #[allow(unused_imports)]
            use super::*;
        ),
        false => quote!(),
    };
    let dtype_params: Vec<&crate::ast::TypeParam> = sig
        .type_params
        .iter()
        .filter(|p| matches!(p.kind, crate::ast::TypeParamKind::DType(_)))
        .collect();
    // The item: a literal when every candidate is one, a constant the
    // compiler computes from the `const` items, or a `const fn` of the
    // const generics and dtype parameters.
    let item = if sig.generics.is_empty() && dtype_params.is_empty() {
        let value = match items {
            false => {
                let peak = cands[0].iter().filter_map(|d| d.as_constant()).max();
                let lit = Literal::usize_unsuffixed(peak.unwrap_or(0).max(0) as usize);
                quote!(#lit)
            }
            true => peak_of(cands[0]),
        };
        let item_doc = format!(" Peak bytes of live intermediates in one call of `{name}`.");
        quote! {
            #[doc = #item_doc]
            pub const PEAK_BYTES: usize = #value;
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
                let peak = peak_of(c);
                quote!(if #cond { return #peak; })
            });
            quote!({ #(#arms)* 0 })
        };
        let item_doc = format!(
            " Peak bytes of live intermediates in one call of `{name}` with these generics."
        );
        quote! {
            #[doc = #item_doc]
            pub const fn peak_bytes<#(#types: ::tensorfn::DType,)* #(const #generics: usize),*>() -> usize
                #body
        }
    };
    quote! {
        #[doc = #doc]
        #[allow(non_snake_case)]
        #vis mod #name {
            #import
            #item
            #extra
        }
    }
}
