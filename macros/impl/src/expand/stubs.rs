//! Signatures of items with errors, so that their callers do not report
//! a missing item on top of the real error.

use super::*;
use crate::sig::is_const_item_name;

/// The dims of a shape as written, typed without checking: literals and
/// lone const generics are `Const`, everything else `Dyn`.
pub(super) fn stub_shape(t: &TensorTyAst, generics: &[syn::Ident]) -> TokenStream {
    let dims: Vec<DimTy> = t
        .dims
        .iter()
        .map(|d| match &d.expr {
            DimExpr::Lit(n) => DimTy::Const(Dim::constant(*n as i64)),
            DimExpr::Sym(s) if generics.iter().any(|g| g == s) || is_const_item_name(s) => {
                DimTy::Const(Dim::sym(s))
            }
            DimExpr::Item(s) => DimTy::Const(Dim::sym(s)),
            _ => DimTy::Dyn,
        })
        .collect();
    tensor_tokens(t.device.0, t.dtype.0, &dims)
}

/// The signature of a function with errors, so that its callers do not
/// report a missing function on top of the real error.
pub fn stub_fn(f: &TensorFn) -> TokenStream {
    let attrs = &f.attrs;
    let vis = &f.vis;
    let name = &f.name;
    let generics = &f.generics;
    let generic_params = generics_tokens(&f.type_params, generics);
    let params = f
        .params
        .iter()
        .filter(|p| !matches!(p.ty, ParamTy::Field(_)))
        .map(|p| {
            let n = &p.name;
            match &p.ty {
                ParamTy::Struct(s) => {
                    let t = &s.ty;
                    quote!(#n: &#t)
                }
                ParamTy::Field(_) => unreachable!("filtered"),
                ParamTy::Tensor(t) => {
                    let ty = stub_shape(t, generics);
                    quote!(#n: &#ty)
                }
                ParamTy::Scalar(s) => {
                    let t = scalar_type_tokens(s.kind);
                    quote!(#n: #t)
                }
            }
        });
    let rets: Vec<TokenStream> = f
        .ret
        .tensors
        .iter()
        .map(|t| stub_shape(t, generics))
        .collect();
    let ret = if f.ret.tuple {
        quote!((#(#rets,)*))
    } else {
        let r = &rets[0];
        quote!(#r)
    };
    quote! {
        #(#attrs)*
        #[allow(unused_variables)]
        #vis fn #name #generic_params (#(#params),*) -> ::tensorfn::Result<#ret> {
            ::core::unreachable!()
        }
    }
}

/// A kernel with errors, as a signature only.
pub fn stub_kernel(k: &KernelFn) -> TokenStream {
    let vis = &k.vis;
    let name = &k.name;
    let params = k.params.iter().map(|(n, d, _)| {
        let t = dtype_tokens(*d);
        quote!(#n: #t)
    });
    let ret = dtype_tokens(k.ret.0);
    quote! {
        #[allow(unused_variables)]
        #vis fn #name(#(#params),*) -> #ret {
            ::core::unreachable!()
        }
    }
}
