//! Spans of `const` items: the generated code names an item (`SEQ_LEN`,
//! `dims::HEADS`) wherever its dim appears, built from symbols that carry
//! no span. Each mention gets the span of the item's first appearance in
//! the signature, so that an item missing from scope is one rustc error
//! on the user's dim instead of one per use on the whole invocation.

use super::*;
use proc_macro2::{Group, Span, TokenTree};
use std::collections::BTreeMap;

/// The span of each `const` item's first appearance in `f`'s signature, by
/// the name its mentions end with (`HEADS` for `dims::HEADS`).
pub(super) fn item_spans(f: &TensorFn, symbols: &Symbols) -> BTreeMap<String, Span> {
    let mut spans = BTreeMap::new();
    for t in f.shapes() {
        for d in &t.dims {
            for name in d.expr.names() {
                if symbols.is_const_item(&name) {
                    let last = name.rsplit("::").next().unwrap_or(&name).to_string();
                    spans.entry(last).or_insert_with(|| d.sp.span());
                }
            }
        }
    }
    spans
}

/// `ts` with every identifier named in `spans` given that span.
pub(super) fn respan(ts: TokenStream, spans: &BTreeMap<String, Span>) -> TokenStream {
    if spans.is_empty() {
        return ts;
    }
    ts.into_iter()
        .map(|t| match t {
            TokenTree::Ident(mut i) => {
                if let Some(s) = spans.get(&i.to_string()) {
                    i.set_span(*s);
                }
                TokenTree::Ident(i)
            }
            TokenTree::Group(g) => {
                let mut out = Group::new(g.delimiter(), respan(g.stream(), spans));
                out.set_span(g.span());
                TokenTree::Group(out)
            }
            other => other,
        })
        .collect()
}
