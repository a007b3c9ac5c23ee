//! `#[derive(Params)]`: a struct of tensors, nested parameter structs,
//! arrays and `Vec`s of them, named field by field (`h.0.attn.c_attn.weight`),
//! with `to_device` and `cast` when the struct is generic over its device
//! (a parameter bounded by `Device`) or its dtype (bounded by `Float`,
//! `FloatDType`, `NumDType` or `DType`).

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::{spanned::Spanned, Data, DeriveInput, Fields, GenericParam, Ident, Type};

/// The `impl Params` and the conversions of a struct.
///
/// ```
/// let ts = tensorfn_macros_impl::derive_params::derive(quote::quote! {
///     struct Mlp<D: Device> { w: Tensor<D, f32, shape![2, 3]>, layers: Vec<Block<D>> }
/// });
/// let text = ts.to_string();
/// assert!(text.contains("impl < D : Device > :: tensorfn :: Params for Mlp < D >"));
/// assert!(text.contains("fn to_device"));
/// ```
pub fn derive(input: TokenStream) -> TokenStream {
    match syn::parse2::<DeriveInput>(input).and_then(|d| expand(&d)) {
        Ok(ts) => ts,
        Err(e) => e.to_compile_error(),
    }
}

/// A field: its Rust name, its name in files, its type.
struct Field<'a> {
    ident: &'a Ident,
    key: String,
    ty: &'a Type,
}

fn fields(d: &DeriveInput) -> syn::Result<Vec<Field<'_>>> {
    let Data::Struct(s) = &d.data else {
        return Err(syn::Error::new(
            d.ident.span(),
            "`Params` is derived for structs whose fields are tensors or parameters",
        ));
    };
    let Fields::Named(named) = &s.fields else {
        return Err(syn::Error::new(
            s.fields.span(),
            "`Params` needs named fields: their names are the keys in files",
        ));
    };
    named
        .named
        .iter()
        .map(|f| {
            let ident = f.ident.as_ref().expect("named fields have names");
            let mut key = ident.to_string();
            for a in f.attrs.iter().filter(|a| a.path().is_ident("params")) {
                a.parse_nested_meta(|m| {
                    if m.path.is_ident("rename") {
                        key = m.value()?.parse::<syn::LitStr>()?.value();
                        Ok(())
                    } else {
                        Err(m.error("the one `params` option is `rename = \"key\"`"))
                    }
                })?;
            }
            Ok(Field {
                ident,
                key,
                ty: &f.ty,
            })
        })
        .collect()
}

/// The type parameter bounded by one of `traits`, if any.
fn param_bounded_by<'a>(d: &'a DeriveInput, traits: &[&str]) -> Option<&'a Ident> {
    d.generics.params.iter().find_map(|p| match p {
        GenericParam::Type(t) => t
            .bounds
            .iter()
            .any(|b| match b {
                syn::TypeParamBound::Trait(tb) => tb
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| traits.iter().any(|t| s.ident == t)),
                _ => false,
            })
            .then_some(&t.ident),
        _ => None,
    })
}

/// The conversion of a value of type `ty` (reached as `v`) by `method`:
/// element by element through arrays and `Vec`s, `v.method::<To>()?`
/// otherwise (a tensor or a derived struct).
fn convert(ty: &Type, v: TokenStream, method: &Ident, to: &Ident) -> TokenStream {
    match ty {
        Type::Array(a) => {
            let inner = convert(&a.elem, quote!(x), method, to);
            quote!(::tensorfn::params::try_map_array(#v, |x| ::core::result::Result::Ok(#inner))?)
        }
        Type::Path(p)
            if p.qself.is_none()
                && p.path.segments.len() == 1
                && p.path.segments[0].ident == "Vec" =>
        {
            let syn::PathArguments::AngleBracketed(args) = &p.path.segments[0].arguments else {
                return quote!(#v.#method::<#to>()?);
            };
            let Some(syn::GenericArgument::Type(elem)) = args.args.first() else {
                return quote!(#v.#method::<#to>()?);
            };
            let inner = convert(elem, quote!(x), method, to);
            quote!(#v.iter().map(|x| ::core::result::Result::Ok(#inner)).collect::<::tensorfn::Result<::std::vec::Vec<_>>>()?)
        }
        _ => {
            let m = Ident::new(&method.to_string(), ty.span());
            quote_spanned!(ty.span()=> #v.#m::<#to>()?)
        }
    }
}

/// True if the type names `param` anywhere.
fn mentions(ty: &Type, param: &Ident) -> bool {
    fn walk(ts: TokenStream, param: &Ident) -> bool {
        ts.into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(i) => i == *param,
            proc_macro2::TokenTree::Group(g) => walk(g.stream(), param),
            _ => false,
        })
    }
    walk(quote!(#ty), param)
}

/// `impl` block of a conversion method that changes the struct's type
/// parameter `param` to `to` (bounded like `param`).
fn conversion(
    d: &DeriveInput,
    fs: &[Field<'_>],
    param: &Ident,
    method: &str,
    doc: &str,
) -> TokenStream {
    let name = &d.ident;
    let (impl_g, ty_g, where_c) = d.generics.split_for_impl();
    let to = format_ident!("__To");
    let bounds = d
        .generics
        .type_params()
        .find(|t| t.ident == *param)
        .map(|t| t.bounds.clone())
        .unwrap_or_default();
    // The struct's type with `param` replaced by `to`.
    let out_args = d.generics.params.iter().map(|p| match p {
        GenericParam::Type(t) if t.ident == *param => quote!(#to),
        GenericParam::Type(t) => {
            let i = &t.ident;
            quote!(#i)
        }
        GenericParam::Lifetime(l) => {
            let l = &l.lifetime;
            quote!(#l)
        }
        GenericParam::Const(c) => {
            let i = &c.ident;
            quote!(#i)
        }
    });
    let m = format_ident!("{}", method);
    let inits = fs.iter().map(|f| {
        let i = f.ident;
        // A field that does not name the parameter (a layer kept in f32
        // in a struct generic over its dtype) is the same type after the
        // conversion: it is cloned.
        if !mentions(f.ty, param) {
            return quote_spanned!(f.ty.span()=> #i: ::core::clone::Clone::clone(&self.#i));
        }
        let c = convert(f.ty, quote!((&self.#i)), &m, &to);
        quote!(#i: #c)
    });
    quote! {
        impl #impl_g #name #ty_g #where_c {
            #[doc = #doc]
            #[allow(clippy::needless_question_mark)]
            pub fn #m<#to: #bounds>(&self) -> ::tensorfn::Result<#name<#(#out_args),*>> {
                ::core::result::Result::Ok(#name { #(#inits),* })
            }
        }
    }
}

fn expand(d: &DeriveInput) -> syn::Result<TokenStream> {
    let fs = fields(d)?;
    let name = &d.ident;
    let (impl_g, ty_g, where_c) = d.generics.split_for_impl();
    // Each call is spanned on its field's type: a field that is not
    // parameters is an error there, not on the derive.
    let visits = fs.iter().map(|f| {
        let (i, k) = (f.ident, &f.key);
        quote_spanned!(f.ty.span()=> ::tensorfn::Params::visit_named(&self.#i, &::tensorfn::params::join(prefix, #k), f)?;)
    });
    let loads = fs.iter().map(|f| {
        let (i, k) = (f.ident, &f.key);
        quote_spanned!(f.ty.span()=> #i: ::tensorfn::Params::load_named(&::tensorfn::params::join(prefix, #k), loader)?)
    });
    let zeros = fs.iter().map(|f| {
        let i = f.ident;
        quote_spanned!(f.ty.span()=> #i: ::tensorfn::Params::zeros_like(&self.#i)?)
    });
    let collects = fs.iter().map(|f| {
        let (i, k) = (f.ident, &f.key);
        quote_spanned!(f.ty.span()=> ::tensorfn::Params::collect_named(&self.#i, &::tensorfn::params::join(prefix, #k), out);)
    });
    let collects_mut = fs.iter().map(|f| {
        let (i, k) = (f.ident, &f.key);
        quote_spanned!(f.ty.span()=> ::tensorfn::Params::collect_named_mut(&mut self.#i, &::tensorfn::params::join(prefix, #k), out);)
    });
    let mut out = quote! {
        #[automatically_derived]
        impl #impl_g ::tensorfn::Params for #name #ty_g #where_c {
            fn visit_named(
                &self,
                prefix: &str,
                f: &mut dyn ::core::ops::FnMut(&str, &dyn ::tensorfn::AnyTensor) -> ::tensorfn::Result<()>,
            ) -> ::tensorfn::Result<()> {
                #(#visits)*
                ::core::result::Result::Ok(())
            }

            fn load_named(
                prefix: &str,
                loader: &mut ::tensorfn::params::Loader<'_>,
            ) -> ::tensorfn::Result<Self> {
                ::core::result::Result::Ok(#name { #(#loads),* })
            }

            fn zeros_like(&self) -> ::tensorfn::Result<Self> {
                ::core::result::Result::Ok(#name { #(#zeros),* })
            }

            fn collect_named<'__a>(
                &'__a self,
                prefix: &str,
                out: &mut ::std::vec::Vec<(::std::string::String, &'__a dyn ::tensorfn::AnyTensor)>,
            ) {
                #(#collects)*
            }

            fn collect_named_mut<'__a>(
                &'__a mut self,
                prefix: &str,
                out: &mut ::std::vec::Vec<(::std::string::String, &'__a mut dyn ::tensorfn::AnyTensor)>,
            ) {
                #(#collects_mut)*
            }
        }
    };
    // The fields as tokens, for `tensor_fn!` parameters of this type.
    out.extend(crate::structs::fields_macro(d));
    if let Some(dev) = param_bounded_by(d, &["Device"]) {
        out.extend(conversion(
            d,
            &fs,
            dev,
            "to_device",
            " The parameters copied to device `__To` (a clone on the same device).",
        ));
    }
    if let Some(dt) = param_bounded_by(d, &["Float", "FloatDType", "NumDType", "DType"]) {
        out.extend(conversion(
            d,
            &fs,
            dt,
            "cast",
            " The parameters converted to dtype `__To`.",
        ));
    }
    Ok(out)
}
