//! Rust tokens of devices, dtypes, shapes and dims.

use super::*;
use crate::sig::is_const_item_name;

/// `::tensorfn::Cpu`, `::tensorfn::Cuda<N>`, or the device parameter.
pub fn device_tokens(d: Device) -> TokenStream {
    match d {
        Device::Cpu => quote!(::tensorfn::Cpu),
        Device::Cuda(n) => {
            let n = Literal::usize_unsuffixed(n);
            quote!(::tensorfn::Cuda<#n>)
        }
        Device::Param(n) => {
            let n = format_ident!("{}", n.to_string());
            quote!(#n)
        }
    }
}

/// The dtype's Rust type.
pub fn dtype_tokens(d: DTypeKind) -> TokenStream {
    rust_code::storage_type(d)
}

/// The Rust type of a dtype or a dtype parameter.
pub(super) fn dt_tokens(d: Dt) -> TokenStream {
    match d {
        Dt::Kind(k) => dtype_tokens(k),
        Dt::Param(n, _) => {
            let n = format_ident!("{}", n.to_string());
            quote!(#n)
        }
    }
}

/// `<T as ::tensorfn::__private::Is<f32>>::IS && ..`: true in the
/// instance's dtypes (a constant, so rustc compiles only the branch of an
/// instantiation's own dtypes).
pub(super) fn instance_condition(inst: &crate::instance::Instance) -> TokenStream {
    let conds = inst.dtypes.iter().map(|(n, k)| {
        let t = format_ident!("{}", n.to_string());
        let k = dtype_tokens(*k);
        quote!(<#t as ::tensorfn::__private::Is<#k>>::IS)
    });
    quote!(#(#conds)&&*)
}

/// `<D: ::tensorfn::Device, T: ::tensorfn::FloatDType, const B: usize>`
/// (nothing for a function without generics).
pub(super) fn generics_tokens(
    types: &[crate::ast::TypeParam],
    consts: &[syn::Ident],
) -> TokenStream {
    generics_with_lifetime(types, consts, None)
}

/// [`generics_tokens`] led by `lifetime` where one is given
/// (`<'a, D: ::tensorfn::Device>`).
pub(super) fn generics_with_lifetime(
    types: &[crate::ast::TypeParam],
    consts: &[syn::Ident],
    lifetime: Option<&syn::Lifetime>,
) -> TokenStream {
    use crate::ast::{Bound, TypeParamKind};
    if types.is_empty() && consts.is_empty() && lifetime.is_none() {
        return quote!();
    }
    let lifetime = lifetime.map(|l| quote!(#l,));
    let types = types.iter().map(|p| {
        let sp = p.sp.span();
        let n = proc_macro2::Ident::new(&p.name.to_string(), sp);
        // Spanned on the declaration, so that rustc's "required by this
        // bound" at a call points at it.
        let bound = match p.kind {
            TypeParamKind::Device => quote_spanned!(sp=> ::tensorfn::Device),
            TypeParamKind::DType(Bound::Float) => quote_spanned!(sp=> ::tensorfn::FloatDType),
            TypeParamKind::DType(Bound::Num) => quote_spanned!(sp=> ::tensorfn::NumDType),
            TypeParamKind::DType(Bound::Any) => quote_spanned!(sp=> ::tensorfn::DType),
        };
        quote_spanned!(sp=> #n: #bound)
    });
    quote!(<#lifetime #(#types,)* #(const #consts: usize),*>)
}

pub(super) fn dtype_kind_tokens(d: DTypeKind) -> TokenStream {
    let v = format_ident!(
        "{}",
        match d {
            DTypeKind::F32 => "F32",
            DTypeKind::F64 => "F64",
            DTypeKind::F16 => "F16",
            DTypeKind::BF16 => "BF16",
            DTypeKind::I32 => "I32",
            DTypeKind::I64 => "I64",
            DTypeKind::U8 => "U8",
            DTypeKind::Bool => "Bool",
        }
    );
    quote!(::tensorfn::DTypeKind::#v)
}

pub(super) fn dim_ty_tokens(d: &DimTy) -> TokenStream {
    match d {
        DimTy::Dyn => quote!(::tensorfn::Dyn),
        DimTy::Const(d) => match d.as_constant() {
            Some(c) => {
                let c = Literal::usize_unsuffixed(c.max(0) as usize);
                quote!(::tensorfn::Const<#c>)
            }
            None => {
                let s = d
                    .as_symbol()
                    .expect("a const dim is a literal, a generic or a `const` item");
                let t = sym_tokens(s);
                // A `const` item in braces: unresolved, it is one "cannot
                // find value" rather than a type error as well.
                match is_const_item_name(s) {
                    true => quote!(::tensorfn::Const<{ #t }>),
                    false => quote!(::tensorfn::Const<#t>),
                }
            }
        },
    }
}

/// `(Const<..>, Dyn, ..)`: the shape type of these dim types.
pub fn shape_tokens(dims: &[DimTy]) -> TokenStream {
    let ds = dims.iter().map(dim_ty_tokens);
    quote!((#(#ds,)*))
}

pub(super) fn tensor_tokens(device: Device, dtype: Dt, dims: &[DimTy]) -> TokenStream {
    let (d, t, s) = (device_tokens(device), dt_tokens(dtype), shape_tokens(dims));
    quote!(::tensorfn::Tensor<#d, #t, #s>)
}

/// The tokens of a const generic (`N`) or a `const` item (`SEQ_LEN`,
/// `dims::M`).
pub(super) fn sym_tokens(name: &str) -> TokenStream {
    match syn::parse_str::<syn::Path>(name) {
        Ok(p) => quote!(#p),
        Err(_) => {
            let i = format_ident!("{}", name);
            quote!(#i)
        }
    }
}

/// A `usize` expression computing a dim at run time.
pub fn dim_value(d: &Dim, symbols: &Symbols) -> TokenStream {
    dim_expr(d, symbols, false)
}

/// An `i64` expression computing a dim that may come out negative (a
/// floor quotient's numerator), where `usize` arithmetic would wrap.
pub(super) fn dim_value_i64(d: &Dim, symbols: &Symbols) -> TokenStream {
    dim_expr(d, symbols, true)
}

/// The value of `d` from its symbols, in `usize` or (`signed`) in `i64`.
fn dim_expr(d: &Dim, symbols: &Symbols, signed: bool) -> TokenStream {
    let mut out = TokenStream::new();
    for (i, (m, c)) in d.terms().into_iter().enumerate() {
        let mut term = TokenStream::new();
        let mut first = true;
        let mut factor = |t: TokenStream, term: &mut TokenStream| {
            if !first {
                term.extend(quote!(*));
            }
            first = false;
            term.extend(t);
        };
        if c.unsigned_abs() != 1 || m.factors().is_empty() {
            let l = match signed {
                true => Literal::i64_suffixed(c.unsigned_abs() as i64),
                false => Literal::usize_suffixed(c.unsigned_abs() as usize),
            };
            factor(quote!(#l), &mut term);
        }
        for (s, p) in m.factors() {
            let v = match symbols.kind(s) {
                Some(SymKind::Generic | SymKind::ConstItem) => sym_tokens(s),
                _ => {
                    let v = format_ident!("{}", Symbols::var_name(s));
                    quote!(#v)
                }
            };
            let v = match signed {
                true => quote!((#v as i64)),
                false => v,
            };
            for _ in 0..*p {
                factor(v.clone(), &mut term);
            }
        }
        match (i, c < 0) {
            (_, true) => out.extend(quote!(- #term)),
            (0, false) => out.extend(term),
            (_, false) => out.extend(quote!(+ #term)),
        }
    }
    if out.is_empty() {
        return match signed {
            true => quote!(0i64),
            false => quote!(0usize),
        };
    }
    // A compound value is parenthesised: a bare `a * b` in an array trips
    // clippy's `possible_missing_comma` in the user's crate.
    if d.as_constant().is_some() || d.as_symbol().is_some() {
        return out;
    }
    quote!((#out))
}

/// Adds to `used` the symbols the floor quotients among it are computed
/// from ([`Dim::floor_div`]), so that those are bound too.
pub(super) fn floor_inputs(used: &mut std::collections::BTreeSet<String>) {
    let mut pending: Vec<String> = used.iter().cloned().collect();
    while let Some(s) = pending.pop() {
        if let Some((num, _)) = Dim::floor_parts(&s) {
            for t in num.symbols() {
                if used.insert(t.to_string()) {
                    pending.push(t.to_string());
                }
            }
        }
    }
}

/// `let __tf_dim_..: usize = ..;` for each floor quotient among `used`
/// ([`Dim::floor_div`]: a stride above 1 over a symbolic size), inner ones
/// first; the code is `const`-evaluable, for the memory plan's `const fn`.
/// The numerator is evaluated in `i64`: where it is negative the output
/// size is below 1 and the op that computes it returns the `Err` naming
/// its operand, the dim and the formula before any later op reads the
/// value, so the binding is then 0 rather than a wrapped number.
pub(super) fn floor_bindings(
    used: &std::collections::BTreeSet<String>,
    symbols: &Symbols,
) -> TokenStream {
    let mut floors: Vec<(&String, Dim, usize)> = used
        .iter()
        .filter_map(|s| Dim::floor_parts(s).map(|(num, d)| (s, num, d)))
        .collect();
    // A quotient's name contains those of the quotients it is made of.
    floors.sort_by_key(|(s, _, _)| s.matches('⌊').count());
    let mut out = TokenStream::new();
    for (name, num, d) in floors {
        let v = format_ident!("{}", Symbols::var_name(name));
        let num = dim_value_i64(&num, symbols);
        let d = Literal::i64_suffixed(d as i64);
        out.extend(quote! {
            let #v: usize = {
                let n: i64 = #num;
                if n < 0 { 0 } else { (n / #d) as usize }
            };
        });
    }
    out
}

pub(super) fn dims_array(dims: &[Dim], symbols: &Symbols) -> TokenStream {
    let vs = dims.iter().map(|d| dim_value(d, symbols));
    quote!([#(#vs),*])
}

pub(super) fn param_type_tokens(p: &crate::ast::Param, sig: &Signature, i: usize) -> TokenStream {
    match (&p.ty, &sig.params[i]) {
        (ParamTy::Tensor(ast), ParamSig::Tensor(t))
        | (ParamTy::Field(crate::ast::FieldParamAst { tensor: ast, .. }), ParamSig::Tensor(t)) => {
            let ty = tensor_tokens(t.device, t.dtype, &sig.symbols.dim_tys(&t.dims));
            let sp = ast.sp.span();
            quote_spanned!(sp=> &#ty)
        }
        (_, ParamSig::Scalar(k)) => scalar_type_tokens(*k),
        (ParamTy::Struct(s), _) => {
            let ty = &s.ty;
            quote_spanned!(s.sp.span()=> &#ty)
        }
        _ => unreachable!("signature matches the parameters"),
    }
}

/// The type of a parameter in the generated signature: a tensor is taken
/// as `&impl TensorArg<D, T, S>` (see `tensorfn_runtime::arg`), so that a
/// call with another tensor is an error naming the part that differs; the
/// body sees it under [`param_type_tokens`].
pub(super) fn param_sig_tokens(p: &crate::ast::Param, sig: &Signature, i: usize) -> TokenStream {
    match (&p.ty, &sig.params[i]) {
        (ParamTy::Tensor(ast), ParamSig::Tensor(t)) => {
            let d = device_tokens(t.device);
            let dt = dt_tokens(t.dtype);
            let s = shape_tokens(&sig.symbols.dim_tys(&t.dims));
            let sp = ast.sp.span();
            quote_spanned!(sp=> &impl ::tensorfn::TensorArg<#d, #dt, #s>)
        }
        _ => param_type_tokens(p, sig, i),
    }
}

/// `let x: &Tensor<D, T, S> = TensorArg::tensor(x)?;` for each tensor in
/// the signature that `which` accepts (by index): the argument under the
/// parameter's own type.
pub(super) fn param_bindings(
    ast: &TensorFn,
    sig: &Signature,
    which: &dyn Fn(usize) -> bool,
) -> TokenStream {
    let mut out = TokenStream::new();
    for (i, p) in ast.params.iter().enumerate().filter(|(i, _)| which(*i)) {
        let (ParamTy::Tensor(_), ParamSig::Tensor(t)) = (&p.ty, &sig.params[i]) else {
            continue;
        };
        let n = &p.name;
        let (d, dt) = (device_tokens(t.device), dt_tokens(t.dtype));
        let s = shape_tokens(&sig.symbols.dim_tys(&t.dims));
        out.extend(quote! {
            let #n: &::tensorfn::Tensor<#d, #dt, #s> =
                ::tensorfn::TensorArg::<#d, #dt, #s>::tensor(#n)?;
        });
    }
    out
}

pub(super) fn scalar_type_tokens(k: ScalarKind) -> TokenStream {
    match k {
        ScalarKind::Usize => quote!(usize),
        ScalarKind::DType(d) => dtype_tokens(d),
    }
}

pub(super) fn return_tokens(sig: &Signature) -> TokenStream {
    let ts: Vec<TokenStream> = sig
        .ret
        .iter()
        .map(|t| tensor_tokens(t.device, t.dtype, &sig.symbols.dim_tys(&t.dims)))
        .collect();
    if sig.tuple {
        quote!((#(#ts,)*))
    } else {
        let t = &ts[0];
        quote!(#t)
    }
}
