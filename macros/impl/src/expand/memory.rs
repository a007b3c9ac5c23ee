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
/// for const generics, `peak_bytes(B, ..)` over run-time dims) with
/// `GRAD_PEAK_BYTES` / `VJP_PEAK_BYTES` / `PULLBACK_BYTES` beside it for a
/// `#[grad]` function.
pub(super) fn memory_module(
    ast: &TensorFn,
    sig: &Signature,
    peaks: &[Peak<'_>],
    extra: TokenStream,
) -> TokenStream {
    let vis = &ast.vis;
    let name = &ast.name;
    let items: Vec<TokenStream> = peaks.iter().filter_map(|p| peak_item(sig, p)).collect();
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

/// The function's run-time dims in the order the signature names them
/// (a tensor parameter's dims, a `usize` parameter), the order of the
/// memory plan's `peak_bytes(..)` arguments.
fn runtime_dims(sig: &Signature) -> Vec<&str> {
    let mut dims: Vec<((usize, usize), &str)> = sig
        .symbols
        .map
        .iter()
        .filter_map(|(s, k)| match k {
            SymKind::Runtime(Some(Source::TensorDim { param, dim })) => {
                Some(((*param, *dim), s.as_str()))
            }
            SymKind::Runtime(Some(Source::Scalar { param })) => Some(((*param, 0), s.as_str())),
            _ => None,
        })
        .collect();
    dims.sort();
    dims.into_iter().map(|(_, s)| s).collect()
}

/// The item stating one peak, `None` when a plan's peak is unknown (a
/// call to a function outside the invocation, recursion, a size the
/// signature does not give).
///
/// The plan's order of steps is chosen from the graph alone, never from
/// the dims' values (`plan::schedule`), so its peak is the maximum, over
/// the steps, of the bytes live there: the candidates, polynomials over
/// the dims. Over run-time dims the item is a `const fn` of them that
/// evaluates every candidate at the call's values, in `i64` (a candidate
/// may have negative terms), and takes the largest.
fn peak_item(sig: &Signature, peak: &Peak<'_>) -> Option<TokenStream> {
    let instances = peak.instances;
    let cands = peak
        .cands
        .iter()
        .map(|c| c.as_ref())
        .collect::<Option<Vec<&Vec<Dim>>>>()?;
    let runtime = runtime_dims(sig);
    // Every size a candidate names must be one the caller can give: a
    // generic, a `const` item, a run-time dim, or a floor quotient of those.
    let mut used: std::collections::BTreeSet<String> = cands
        .iter()
        .flat_map(|c| c.iter())
        .flat_map(|d| d.symbols())
        .map(|s| s.to_string())
        .collect();
    floor_inputs(&mut used);
    let known = |s: &String| {
        Dim::floor_parts(s).is_some()
            || match sig.symbols.kind(s) {
                Some(SymKind::Runtime(_)) => runtime.contains(&s.as_str()),
                Some(_) => true,
                None => false,
            }
    };
    if !used.iter().all(known) {
        return None;
    }
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
                dim_value_i64(
                    &d.substitute(&nested).unwrap_or_else(|| d.clone()),
                    &sig.symbols,
                )
            })
            .collect();
        // The floor quotients the candidates mention, from the generics
        // and the run-time dims.
        let mut used: std::collections::BTreeSet<String> = cands
            .iter()
            .flat_map(|d| d.symbols())
            .map(|s| s.to_string())
            .collect();
        floor_inputs(&mut used);
        let floors = floor_bindings(&used, &sig.symbols);
        quote! {{
            #floors
            let mut peak = 0i64;
            #(
                let candidate: i64 = #consts;
                if candidate > peak {
                    peak = candidate;
                }
            )*
            peak as usize
        }}
    };
    let dtype_params: Vec<&crate::ast::TypeParam> = sig
        .type_params
        .iter()
        .filter(|p| matches!(p.kind, crate::ast::TypeParamKind::DType(_)))
        .collect();
    // The item: a literal when every candidate is one, a constant the
    // compiler computes from the `const` items, or a `const fn` of the
    // const generics, dtype parameters and run-time dims.
    Some(
        if sig.generics.is_empty() && dtype_params.is_empty() && runtime.is_empty() {
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
            // Each run-time dim is an argument of its own name, bound
            // where the candidates' code reads it.
            let args: Vec<proc_macro2::Ident> =
                runtime.iter().map(|s| format_ident!("{}", s)).collect();
            let vars = runtime
                .iter()
                .map(|s| format_ident!("{}", Symbols::var_name(s)));
            let item_doc = match runtime.is_empty() {
                true => format!(
                    " Peak bytes of live intermediates in {} with these generics.",
                    peak.what
                ),
                false => format!(
                    " Peak bytes of live intermediates in {} at the run-time dims of that call: {}, as its arguments give them.",
                    peak.what,
                    runtime
                        .iter()
                        .map(|s| format!("`{s}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let func = format_ident!("{}", peak.func);
            quote! {
                #[doc = #item_doc]
                #[allow(non_snake_case, clippy::too_many_arguments)]
                pub const fn #func<#(#types: ::tensorfn::DType,)* #(const #generics: usize),*>(#(#args: usize),*) -> usize {
                    #(let #vars: usize = #args;)*
                    #body
                }
            }
        },
    )
}
