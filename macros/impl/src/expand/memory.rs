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
    let consts: Vec<TokenStream> = cands.iter().map(|d| dim_value(d, &sig.symbols)).collect();
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
