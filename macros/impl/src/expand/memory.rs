//! The static memory plan: a module next to the function.

use super::*;

/// `mod name { pub const PEAK_BYTES: usize = ..; }` (or `peak_bytes::<..>()`
/// for const generics) when every dim is static.
pub(super) fn memory_module(ast: &TensorFn, sig: &Signature, plan: &Plan) -> TokenStream {
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
    let consts: Vec<TokenStream> = cands
        .iter()
        .map(|d| {
            dim_value(
                &d.substitute(&nested).unwrap_or_else(|| d.clone()),
                &sig.symbols,
            )
        })
        .collect();
    let import = match items {
        true => quote!(
            #[allow(unused_imports)]
            use super::*;
        ),
        false => quote!(),
    };
    let peak = quote! {
        let mut peak = 0usize;
        #(
            let candidate: usize = #consts;
            if candidate > peak {
                peak = candidate;
            }
        )*
        peak
    };
    // The item: a literal when every candidate is one, a constant the
    // compiler computes from the `const` items, or a `const fn` of the
    // const generics.
    let item = if sig.generics.is_empty() {
        let value = match items {
            false => {
                let peak = cands.iter().filter_map(|d| d.as_constant()).max();
                let lit = Literal::usize_unsuffixed(peak.unwrap_or(0).max(0) as usize);
                quote!(#lit)
            }
            true => quote!({ #peak }),
        };
        let item_doc = format!(" Peak bytes of live intermediates in one call of `{name}`.");
        quote! {
            #[doc = #item_doc]
            pub const PEAK_BYTES: usize = #value;
        }
    } else {
        let generics = sig.generics.iter().map(|g| format_ident!("{}", g));
        let item_doc = format!(
            " Peak bytes of live intermediates in one call of `{name}` with these const generics."
        );
        quote! {
            #[doc = #item_doc]
            pub const fn peak_bytes<#(const #generics: usize),*>() -> usize {
                #peak
            }
        }
    };
    quote! {
        #[doc = #doc]
        #[allow(non_snake_case)]
        #vis mod #name {
            #import
            #item
        }
    }
}
