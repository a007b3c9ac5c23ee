//! From tokens to the typed input of [`ast`](crate::ast).
//!
//! Signatures and `let` statements are parsed by hand (the shape syntax
//! `[B, 784]` is not a Rust type); expressions go through `syn::Expr`
//! after multi-index brackets (`x[i, j]`) are rewritten to `x[(i, j)]`.

use crate::ast::*;
use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{braced, bracketed, parenthesized, Token};
use tensorfn_core::DTypeKind;

/// Parses the whole macro input.
pub fn parse_input(tokens: TokenStream) -> syn::Result<Input> {
    syn::parse2::<Input>(wrap_multi_index(tokens))
}

const KEYWORDS_BEFORE_ARRAYS: &[&str] = &[
    "return", "in", "if", "else", "match", "while", "break", "mut", "let", "move", "for",
];

/// Rewrites `x[i, j]` to `x[(i, j)]` at every depth, leaving array
/// literals (`[a, b]` after `(`, `,`, `=`, an operator or a keyword) alone.
pub fn wrap_multi_index(tokens: TokenStream) -> TokenStream {
    let mut out: Vec<TokenTree> = Vec::new();
    for tt in tokens {
        let tt = match tt {
            TokenTree::Group(g) => {
                let inner = wrap_multi_index(g.stream());
                let indexes = g.delimiter() == Delimiter::Bracket
                    && match out.last() {
                        Some(TokenTree::Ident(i)) => {
                            !KEYWORDS_BEFORE_ARRAYS.contains(&i.to_string().as_str())
                        }
                        Some(TokenTree::Group(p)) => p.delimiter() != Delimiter::Brace,
                        _ => false,
                    };
                let has_comma = inner
                    .clone()
                    .into_iter()
                    .any(|t| matches!(&t, TokenTree::Punct(p) if p.as_char() == ','));
                let inner = if indexes && has_comma {
                    let mut paren = Group::new(Delimiter::Parenthesis, inner);
                    paren.set_span(g.span());
                    TokenStream::from(TokenTree::Group(paren))
                } else {
                    inner
                };
                let mut ng = Group::new(g.delimiter(), inner);
                ng.set_span(g.span());
                TokenTree::Group(ng)
            }
            other => other,
        };
        out.push(tt);
    }
    out.into_iter().collect()
}

impl Parse for Input {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut items = Vec::new();
        let mut errors: Option<syn::Error> = None;
        while !input.is_empty() {
            match parse_item(input) {
                Ok(item) => items.push(item),
                Err(e) => {
                    // A broken item ends parsing: the rest cannot be located reliably.
                    match &mut errors {
                        Some(all) => all.combine(e),
                        None => errors = Some(e),
                    }
                    break;
                }
            }
        }
        match errors {
            Some(e) => Err(e),
            None => Ok(Input { items }),
        }
    }
}

fn is_kernel_attr(a: &syn::Attribute) -> bool {
    a.path().is_ident("kernel")
}

/// One argument of `#[grad(..)]`: a parameter's name, or an option
/// `name = value`.
enum GradArg {
    Name(syn::Ident),
    Option(syn::Ident, syn::Expr),
}

impl Parse for GradArg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: syn::Ident = input.parse()?;
        if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            return Ok(GradArg::Option(name, input.parse()?));
        }
        Ok(GradArg::Name(name))
    }
}

/// What `#[grad(..)]` says: the parameters' names and whether the
/// backward recomputes elementwise values (`recompute = true`).
type GradAttr = (Vec<syn::Ident>, bool);

/// The names and options of `#[grad(a, b, recompute = true)]`, taken out
/// of `attrs` (an error for a second one, one without names, or an
/// unknown option or value).
fn take_grad_attr(attrs: &mut Vec<syn::Attribute>) -> syn::Result<Option<GradAttr>> {
    let mut out: Option<GradAttr> = None;
    let mut err = None;
    attrs.retain(|a| {
        if !a.path().is_ident("grad") {
            return true;
        }
        let args =
            a.parse_args_with(Punctuated::<GradArg, Token![,]>::parse_separated_nonempty);
        match args {
            Ok(_) if out.is_some() => {
                err = Some(syn::Error::new_spanned(
                    a,
                    "a second `#[grad(..)]`: name every parameter in one, `#[grad(a, b)]`",
                ))
            }
            Ok(args) => {
                let (mut names, mut recompute) = (Vec::new(), false);
                for arg in args {
                    match arg {
                        GradArg::Name(n) => names.push(n),
                        GradArg::Option(k, v) if k == "recompute" => match &v {
                            syn::Expr::Lit(syn::ExprLit {
                                lit: syn::Lit::Bool(b),
                                ..
                            }) => recompute = b.value,
                            _ => {
                                err = Some(syn::Error::new_spanned(
                                    &v,
                                    format!(
                                        "`recompute` takes `true` or `false`, but found `{}`; write `recompute = true` to recompute the elementwise values the backward reads instead of keeping them",
                                        quote::quote!(#v)
                                    ),
                                ));
                            }
                        },
                        GradArg::Option(k, _) => {
                            err = Some(syn::Error::new_spanned(
                                &k,
                                format!(
                                    "`#[grad(..)]` has no option `{k}`: its only option is `recompute = true`; the other arguments name parameters"
                                ),
                            ));
                        }
                    }
                }
                if names.is_empty() && err.is_none() {
                    err = Some(syn::Error::new_spanned(
                        a,
                        "`#[grad(..)]` names the parameters to differentiate: `#[grad(p)]` or `#[grad(w, b)]`",
                    ));
                }
                out = Some((names, recompute));
            }
            Err(_) => {
                err = Some(syn::Error::new_spanned(
                    a,
                    "`#[grad(..)]` names the parameters to differentiate: `#[grad(p)]` or `#[grad(w, b)]`",
                ))
            }
        }
        false
    });
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

fn parse_item(input: ParseStream) -> syn::Result<Item> {
    let mut attrs = input.call(syn::Attribute::parse_outer)?;
    let kernel = attrs.iter().any(is_kernel_attr);
    attrs.retain(|a| !is_kernel_attr(a));
    let grad = take_grad_attr(&mut attrs)?;
    let vis: syn::Visibility = input.parse()?;
    if !input.peek(Token![fn]) {
        return Err(input.error(
            "`tensor_fn!` holds functions: expected `fn name(..) -> Tensor<..> { .. }` or a `#[kernel] fn`",
        ));
    }
    input.parse::<Token![fn]>()?;
    let name: syn::Ident = input.parse()?;
    if kernel {
        parse_kernel(input, attrs, vis, name).map(Item::Kernel)
    } else {
        let mut f = parse_tensor_fn(input, attrs, vis, name)?;
        if let Some((names, recompute)) = grad {
            f.grad = Some(names);
            f.recompute = recompute;
        }
        Ok(Item::Fn(f))
    }
}

/// The generics of a tensor function: type parameters (`D: Device`,
/// `T: Float`) and const dims (`const B: usize`).
fn parse_generics(input: ParseStream) -> syn::Result<(Vec<TypeParam>, Vec<syn::Ident>)> {
    let generics: syn::Generics = input.parse()?;
    if let Some(w) = &generics.where_clause {
        return Err(syn::Error::new_spanned(
            w,
            "`tensor_fn!` bounds its type parameters inline: write `<D: Device, T: Float>`",
        ));
    }
    let mut types = Vec::new();
    let mut consts = Vec::new();
    for p in &generics.params {
        match p {
            syn::GenericParam::Const(c) if is_usize(&c.ty) => consts.push(c.ident.clone()),
            syn::GenericParam::Type(t) => types.push(type_param(t)?),
            other => {
                return Err(syn::Error::new_spanned(
                    other,
                    "`tensor_fn!` generics are a device `D: Device`, a dtype `T: Float` (or `T: DType`, `T: NumDType`) and const dims `const N: usize`",
                ))
            }
        }
    }
    Ok((types, consts))
}

/// `D: Device` or `T: Float` (`FloatDType`, `NumDType`, `DType`).
fn type_param(t: &syn::TypeParam) -> syn::Result<TypeParam> {
    let err = || {
        syn::Error::new_spanned(
            t,
            format!(
                "bound `{0}` by what it stands for: `{0}: Device` for a device, `{0}: Float` for a float dtype (`{0}: DType` for any dtype)",
                t.ident
            ),
        )
    };
    let mut bounds = t.bounds.iter();
    let (Some(syn::TypeParamBound::Trait(b)), None) = (bounds.next(), bounds.next()) else {
        return Err(err());
    };
    if t.default.is_some() {
        return Err(err());
    }
    let last = b.path.segments.last().map(|s| s.ident.to_string());
    let kind = match last.as_deref() {
        Some("Device") => TypeParamKind::Device,
        Some("Float" | "FloatDType") => TypeParamKind::DType(Bound::Float),
        Some("NumDType") => TypeParamKind::DType(Bound::Num),
        Some("DType") => TypeParamKind::DType(Bound::Any),
        _ => return Err(err()),
    };
    Ok(TypeParam {
        name: Name::new(&t.ident.to_string()),
        kind,
        sp: Sp::of(t),
    })
}

/// Gives the type parameters named in a tensor type their meaning (the
/// parser reads an unknown device or dtype name as a parameter), or the
/// error for a name that is neither.
pub fn resolve_tensor_ty(t: &mut TensorTyAst, scope: &[TypeParam]) -> syn::Result<()> {
    let find = |n: Name| scope.iter().find(|p| p.name == n).map(|p| p.kind);
    if let Device::Param(n) = t.device.0 {
        match find(n) {
            Some(TypeParamKind::Device) => {}
            Some(TypeParamKind::DType(b)) => {
                return Err(t.device.1.error(format!(
                    "`{n}` is a dtype parameter (`{n}: {}`), not a device: devices are `Cpu`, `Cuda`, `Cuda<N>` and parameters `D: Device`",
                    b.trait_name()
                )))
            }
            None => {
                return Err(t.device.1.error(format!(
                    "`{n}` is not a device: devices are `Cpu`, `Cuda` (cuda:0) and `Cuda<N>`, or a parameter declared `<{n}: Device>`"
                )))
            }
        }
    }
    if let Dt::Param(n, _) = t.dtype.0 {
        match find(n) {
            Some(TypeParamKind::DType(b)) => t.dtype.0 = Dt::Param(n, b),
            Some(TypeParamKind::Device) => {
                return Err(t.dtype.1.error(format!(
                    "`{n}` is a device parameter (`{n}: Device`), not a dtype: dtypes are f32, f64, f16, bf16, i32, i64, u8, bool and parameters `T: Float`"
                )))
            }
            None => {
                return Err(t.dtype.1.error(format!(
                    "`{n}` is not a dtype: dtypes are f32, f64, f16, bf16, i32, i64, u8 and bool, or a parameter declared `<{n}: Float>`"
                )))
            }
        }
    }
    Ok(())
}

fn is_usize(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Path(p) if p.path.is_ident("usize"))
}

fn parse_tensor_fn(
    input: ParseStream,
    attrs: Vec<syn::Attribute>,
    vis: syn::Visibility,
    name: syn::Ident,
) -> syn::Result<TensorFn> {
    let (type_params, generics) = parse_generics(input)?;
    let content;
    parenthesized!(content in input);
    let mut params = Vec::new();
    while !content.is_empty() {
        params.push(parse_param(&content)?);
        if content.is_empty() {
            break;
        }
        content.parse::<Token![,]>()?;
    }
    if !input.peek(Token![->]) {
        return Err(input.error(
            "a tensor function declares its result: add `-> Tensor<Device, DType, [dims]>`",
        ));
    }
    input.parse::<Token![->]>()?;
    let mut ret = parse_return(input)?;
    if input.peek(Token![where]) {
        let w: syn::WhereClause = input.parse()?;
        return Err(syn::Error::new_spanned(
            w,
            "`tensor_fn!` bounds its type parameters inline: write `<D: Device, T: Float>`",
        ));
    }
    let body_content;
    braced!(body_content in input);
    let mut body = parse_body(&body_content)?;
    for p in &mut params {
        if let ParamTy::Tensor(t) = &mut p.ty {
            resolve_tensor_ty(t, &type_params)?;
        }
    }
    for t in &mut ret.tensors {
        resolve_tensor_ty(t, &type_params)?;
    }
    for s in &mut body.stmts {
        if let Some(t) = &mut s.ty {
            resolve_tensor_ty(t, &type_params)?;
        }
    }
    Ok(TensorFn {
        attrs,
        vis,
        name,
        type_params,
        generics,
        params,
        ret,
        body,
        struct_args: Vec::new(),
        grad: None,
        recompute: false,
        grad_output: None,
    })
}

fn parse_param(input: ParseStream) -> syn::Result<Param> {
    let name: syn::Ident = input.parse()?;
    input.parse::<Token![:]>()?;
    if input.peek(Token![&]) {
        input.parse::<Token![&]>()?;
        if !crate::structs::peek_tensor(input) {
            let ty: syn::Type = input.parse()?;
            let sp = Sp::of(&ty);
            return Ok(Param {
                name,
                ty: ParamTy::Struct(StructParamAst { ty, sp }),
            });
        }
        let ty = parse_tensor_ty(input)?;
        return Ok(Param {
            name,
            ty: ParamTy::Tensor(ty),
        });
    }
    let fork = input.fork();
    if fork.peek(syn::Ident) && fork.parse::<syn::Ident>()? == "Tensor" {
        return Err(input.error(format!(
            "tensor parameters are borrowed: write `{name}: &Tensor<..>`"
        )));
    }
    let ty: syn::Type = input.parse()?;
    let kind = scalar_kind(&ty).ok_or_else(|| {
        syn::Error::new_spanned(
            &ty,
            "a parameter is `&Tensor<Device, DType, [dims]>` or a scalar (f32, f64, f16, bf16, i32, i64, u8, bool, usize)",
        )
    })?;
    Ok(Param {
        name,
        ty: ParamTy::Scalar(ScalarTyAst {
            kind,
            sp: Sp::of(&ty),
        }),
    })
}

fn scalar_kind(ty: &syn::Type) -> Option<ScalarKind> {
    let syn::Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?.ident.to_string();
    if last == "usize" {
        return Some(ScalarKind::Usize);
    }
    DTypeKind::parse(&last).map(ScalarKind::DType)
}

fn parse_return(input: ParseStream) -> syn::Result<ReturnTy> {
    if input.peek(syn::token::Paren) {
        let content;
        let paren = parenthesized!(content in input);
        let mut tensors = Vec::new();
        while !content.is_empty() {
            tensors.push(parse_tensor_ty(&content)?);
            if content.is_empty() {
                break;
            }
            content.parse::<Token![,]>()?;
        }
        if tensors.is_empty() {
            return Err(syn::Error::new(
                paren.span.join(),
                "a tensor function returns a tensor or a tuple of tensors",
            ));
        }
        let sp = Sp::join(&tensors[0].sp, &tensors[tensors.len() - 1].sp);
        return Ok(ReturnTy {
            tensors,
            tuple: true,
            sp,
        });
    }
    let t = parse_tensor_ty(input)?;
    let sp = t.sp.clone();
    Ok(ReturnTy {
        tensors: vec![t],
        tuple: false,
        sp,
    })
}

/// `Tensor<Device, DType, [dims]>` (without the `&`).
pub fn parse_tensor_ty(input: ParseStream) -> syn::Result<TensorTyAst> {
    let head: syn::Ident = input.parse()?;
    if head != "Tensor" {
        return Err(syn::Error::new(
            head.span(),
            format!("expected `Tensor<Device, DType, [dims]>`, found `{head}`"),
        ));
    }
    input.parse::<Token![<]>()?;
    let dev_ident: syn::Ident = input.parse()?;
    let mut dev_sp = Sp::of(&dev_ident);
    let device = match dev_ident.to_string().as_str() {
        "Cpu" => Device::Cpu,
        "Cuda" => {
            if input.peek(Token![<]) {
                input.parse::<Token![<]>()?;
                let ord: syn::LitInt = input.parse()?;
                let close: Token![>] = input.parse()?;
                dev_sp = Sp::join(&dev_sp, &Sp::of(&close));
                Device::Cuda(ord.base10_parse()?)
            } else {
                Device::Cuda(0)
            }
        }
        // A type parameter, or an error that `resolve_tensor_ty` reports
        // once it knows the function's parameters.
        other => Device::Param(Name::new(other)),
    };
    input.parse::<Token![,]>()?;
    let dtype_path: syn::Path = input.parse()?;
    let dtype_sp = Sp::of(&dtype_path);
    let dtype_name = dtype_path
        .segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default();
    let dtype = match DTypeKind::parse(&dtype_name) {
        Some(k) => Dt::Kind(k),
        None if dtype_path.get_ident().is_some() => Dt::Param(Name::new(&dtype_name), Bound::Any),
        None => {
            return Err(syn::Error::new_spanned(
                &dtype_path,
                format!("`{dtype_name}` is not a dtype: dtypes are f32, f64, f16, bf16, i32, i64, u8 and bool"),
            ))
        }
    };
    input.parse::<Token![,]>()?;
    if !input.peek(syn::token::Bracket) {
        return Err(
            input.error("a shape is written `[dims]`, e.g. `[B, 784]` or `[]` for a scalar")
        );
    }
    let dims_content;
    let bracket = bracketed!(dims_content in input);
    let exprs = Punctuated::<syn::Expr, Token![,]>::parse_terminated(&dims_content)?;
    let dims = exprs
        .iter()
        .map(|e| dim_ast(e, false))
        .collect::<syn::Result<Vec<_>>>()?;
    if dims.len() > 6 {
        return Err(syn::Error::new(
            bracket.span.join(),
            format!("tensors have at most 6 dims, this shape has {}", dims.len()),
        ));
    }
    let close: Token![>] = input.parse()?;
    Ok(TensorTyAst {
        device: (device, dev_sp),
        dtype: (dtype, dtype_sp),
        dims,
        sp: Sp::join(&Sp::of(&head), &Sp::of(&close)),
    })
}

/// A dim of a shape; `allow_infer` admits `-1` (reshape targets).
pub fn dim_ast(e: &syn::Expr, allow_infer: bool) -> syn::Result<DimAst> {
    Ok(DimAst {
        expr: dim_expr(e, allow_infer)?,
        sp: Sp::of(e),
    })
}

/// A path without generic arguments as a `const` item: `M`, `dims::M`,
/// `crate::dims::M`.
fn const_item(path: &syn::Path) -> Option<DimExpr> {
    let mut name = String::new();
    if path.leading_colon.is_some() {
        name.push_str("::");
    }
    for (i, seg) in path.segments.iter().enumerate() {
        if !seg.arguments.is_none() {
            return None;
        }
        if i > 0 {
            name.push_str("::");
        }
        name.push_str(&seg.ident.unraw().to_string());
    }
    Some(DimExpr::Item(name))
}

fn dim_expr(e: &syn::Expr, allow_infer: bool) -> syn::Result<DimExpr> {
    use syn::{BinOp as B, Expr as E};
    let bad = || {
        syn::Error::new_spanned(
            e,
            "a dim is a literal (`784`), a name (`B`), a `const` item (`SEQ_LEN`, `{M}`, `dims::M`), or `+`/`*` of those (`N + M`, `2 * N`)",
        )
    };
    match e {
        E::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i),
            ..
        }) => Ok(DimExpr::Lit(i.base10_parse()?)),
        E::Path(p) if p.qself.is_none() => match p.path.get_ident() {
            Some(i) => Ok(DimExpr::Sym(i.unraw().to_string())),
            None => const_item(&p.path).ok_or_else(bad),
        },
        // `{M}`: a `const` item, as in Rust's const generic arguments.
        E::Block(b) if b.label.is_none() && b.block.stmts.len() == 1 => match &b.block.stmts[0] {
            syn::Stmt::Expr(E::Path(p), None) if p.qself.is_none() => {
                const_item(&p.path).ok_or_else(bad)
            }
            _ => Err(bad()),
        },
        E::Infer(_) => Ok(DimExpr::Anon),
        E::Paren(p) => dim_expr(&p.expr, false),
        E::Group(g) => dim_expr(&g.expr, allow_infer),
        E::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) && allow_infer => match &*u.expr {
            E::Lit(syn::ExprLit {
                lit: syn::Lit::Int(i),
                ..
            }) if i.base10_parse::<u64>()? == 1 => Ok(DimExpr::Infer),
            _ => Err(syn::Error::new_spanned(
                e,
                "the only negative dim is `-1` (inferred from the element count)",
            )),
        },
        E::Binary(b) => {
            let l = Box::new(dim_expr(&b.left, false)?);
            let r = Box::new(dim_expr(&b.right, false)?);
            match b.op {
                B::Add(_) => Ok(DimExpr::Add(l, r)),
                B::Mul(_) => Ok(DimExpr::Mul(l, r)),
                _ => Err(bad()),
            }
        }
        _ => Err(bad()),
    }
}

fn parse_body(input: ParseStream) -> syn::Result<Body> {
    let mut stmts = Vec::new();
    loop {
        if input.peek(Token![let]) {
            stmts.push(parse_let(input)?);
            continue;
        }
        if input.is_empty() {
            return Err(input.error("the body must end with its result expression"));
        }
        let e: syn::Expr = input.parse()?;
        let ret = expr(&e)?;
        if input.peek(Token![;]) {
            let semi: Token![;] = input.parse()?;
            if input.is_empty() {
                return Err(syn::Error::new(
                    semi.span,
                    "remove this `;`: the last expression is the function's result",
                ));
            }
            return Err(syn::Error::new_spanned(
                &e,
                "a statement other than `let` has no effect in a tensor function",
            ));
        }
        if !input.is_empty() {
            return Err(input.error("expected the end of the body after the result expression"));
        }
        return Ok(Body { stmts, ret });
    }
}

fn parse_let(input: ParseStream) -> syn::Result<Let> {
    input.parse::<Token![let]>()?;
    let pat = if input.peek(syn::token::Paren) {
        let content;
        let paren = parenthesized!(content in input);
        let names = Punctuated::<syn::Ident, Token![,]>::parse_terminated_with(
            &content,
            syn::Ident::parse_any,
        )?;
        Pat::Tuple(names.into_iter().collect(), Sp::single(paren.span.join()))
    } else {
        Pat::Ident(input.call(syn::Ident::parse_any)?)
    };
    let ty = if input.peek(Token![:]) {
        input.parse::<Token![:]>()?;
        Some(parse_tensor_ty(input)?)
    } else {
        None
    };
    input.parse::<Token![=]>()?;
    let e: syn::Expr = input.parse()?;
    input.parse::<Token![;]>()?;
    Ok(Let {
        pat,
        ty,
        init: expr(&e)?,
    })
}

fn unsupported(e: &impl quote::ToTokens, what: &str) -> syn::Error {
    syn::Error::new_spanned(e, format!("{what} is not supported inside `tensor_fn!`: tensor functions are built from `let`s, tensor operations, arithmetic and calls"))
}

/// Converts a `syn` expression to the body grammar.
pub fn expr(e: &syn::Expr) -> syn::Result<Expr> {
    use syn::Expr as E;
    let sp = Sp::of(e);
    let kind = match e {
        E::Path(p) if p.qself.is_none() => match p.path.get_ident() {
            Some(i) => ExprKind::Var(i.clone()),
            None => match const_item(&p.path) {
                Some(DimExpr::Item(path)) => ExprKind::Item(path),
                _ => return Err(unsupported(e, "a path with generic arguments")),
            },
        },
        E::Lit(l) => match &l.lit {
            syn::Lit::Int(i) => ExprKind::Int(i.base10_parse()?),
            syn::Lit::Float(f) => ExprKind::Float(f.base10_parse()?),
            syn::Lit::Bool(b) => ExprKind::Bool(b.value),
            syn::Lit::Str(s) => ExprKind::Str(s.value()),
            _ => return Err(unsupported(e, "this literal")),
        },
        E::Paren(p) => return expr(&p.expr),
        E::Group(g) => return expr(&g.expr),
        E::Unary(u) => match u.op {
            syn::UnOp::Neg(_) => ExprKind::Neg(Box::new(expr(&u.expr)?)),
            _ => return Err(unsupported(e, "this operator")),
        },
        E::Binary(b) => {
            use tensorfn_kernels::CmpOp;
            let cmp = match b.op {
                syn::BinOp::Lt(_) => Some(CmpOp::Lt),
                syn::BinOp::Le(_) => Some(CmpOp::Le),
                syn::BinOp::Gt(_) => Some(CmpOp::Gt),
                syn::BinOp::Ge(_) => Some(CmpOp::Ge),
                syn::BinOp::Eq(_) => Some(CmpOp::Eq),
                syn::BinOp::Ne(_) => Some(CmpOp::Ne),
                _ => None,
            };
            if let Some(op) = cmp {
                let (a, b) = (expr(&b.left)?, expr(&b.right)?);
                return Ok(Expr {
                    kind: ExprKind::Compare(op, Box::new(a), Box::new(b)),
                    sp: Sp::of(e),
                });
            }
            let op = match b.op {
                syn::BinOp::Add(_) => BinOp::Add,
                syn::BinOp::Sub(_) => BinOp::Sub,
                syn::BinOp::Mul(_) => BinOp::Mul,
                syn::BinOp::Div(_) => BinOp::Div,
                _ => return Err(unsupported(&b.op, "this operator")),
            };
            ExprKind::Binary(op, Box::new(expr(&b.left)?), Box::new(expr(&b.right)?))
        }
        E::Call(c) => {
            let E::Path(p) = &*c.func else {
                return Err(unsupported(&c.func, "calling this expression"));
            };
            ExprKind::Call {
                func: p.path.clone(),
                args: args(&c.args)?,
            }
        }
        E::MethodCall(m) => {
            let mut turbofish = Vec::new();
            if let Some(t) = &m.turbofish {
                for a in &t.args {
                    match a {
                        syn::GenericArgument::Type(t) => turbofish.push(t.clone()),
                        other => return Err(syn::Error::new_spanned(
                            other,
                            "expected a type here, e.g. `cast::<f16>()` or `to_device::<Cuda>()`",
                        )),
                    }
                }
            }
            ExprKind::Method {
                recv: Box::new(expr(&m.receiver)?),
                method: m.method.clone(),
                turbofish,
                args: args(&m.args)?,
            }
        }
        E::Index(i) => {
            let indices = match &*i.index {
                E::Tuple(t) => t.elems.iter().map(expr).collect::<syn::Result<_>>()?,
                other => vec![expr(other)?],
            };
            ExprKind::Index {
                base: Box::new(expr(&i.expr)?),
                indices,
            }
        }
        E::Field(f) => match &f.member {
            syn::Member::Named(member) => ExprKind::Field {
                base: Box::new(expr(&f.base)?),
                member: member.clone(),
            },
            syn::Member::Unnamed(_) => return Err(unsupported(e, "a tuple field")),
        },
        E::Array(a) => ExprKind::Array(a.elems.iter().map(expr).collect::<syn::Result<_>>()?),
        E::Tuple(t) => ExprKind::Tuple(t.elems.iter().map(expr).collect::<syn::Result<_>>()?),
        E::Try(t) => {
            return Err(syn::Error::new_spanned(
                t.question_token,
                "remove this `?`: inside `tensor_fn!` errors propagate by themselves",
            ))
        }
        E::Reference(r) => {
            return Err(syn::Error::new_spanned(
                r.and_token,
                "remove this `&`: inside `tensor_fn!` tensors are passed by name",
            ))
        }
        E::Macro(_) => return Err(unsupported(e, "a macro call")),
        E::If(_) | E::Match(_) => {
            return Err(unsupported(
                e,
                "control flow on tensors (write it in a `#[kernel]` fn to run it per element)",
            ))
        }
        E::ForLoop(_) | E::While(_) | E::Loop(_) => return Err(unsupported(e, "a loop")),
        E::Assign(_) => return Err(unsupported(e, "assignment")),
        _ => return Err(unsupported(e, "this expression")),
    };
    Ok(Expr { kind, sp })
}

fn args(list: &Punctuated<syn::Expr, Token![,]>) -> syn::Result<Vec<Arg>> {
    list.iter()
        .map(|a| match a {
            syn::Expr::Assign(asg) => match &*asg.left {
                syn::Expr::Path(p) if p.path.get_ident().is_some() => Ok(Arg {
                    name: p.path.get_ident().cloned(),
                    value: expr(&asg.right)?,
                }),
                other => Err(syn::Error::new_spanned(
                    other,
                    "a named argument is written `name = value`",
                )),
            },
            other => Ok(Arg {
                name: None,
                value: expr(other)?,
            }),
        })
        .collect()
}

fn parse_kernel(
    input: ParseStream,
    attrs: Vec<syn::Attribute>,
    vis: syn::Visibility,
    name: syn::Ident,
) -> syn::Result<KernelFn> {
    if input.peek(Token![<]) {
        return Err(input.error("a `#[kernel]` fn has no generics: it works on single elements"));
    }
    let content;
    parenthesized!(content in input);
    let mut params = Vec::new();
    let mut rows = Vec::new();
    while !content.is_empty() {
        let pname: syn::Ident = content.parse()?;
        content.parse::<Token![:]>()?;
        let ty: syn::Type = content.parse()?;
        let sp = Sp::of(&ty);
        if let Some(row) = row_type(&ty) {
            match row {
                Some(d) if d.is_float() => params.push((pname, d, sp)),
                _ => {
                    return Err(syn::Error::new_spanned(
                        &ty,
                        "a row is of floats: `Row<f32>`, `Row<f64>`, `Row<f16>` or `Row<bf16>`",
                    ))
                }
            }
            rows.push(true);
        } else {
            match scalar_kind(&ty) {
                Some(ScalarKind::DType(d)) if d != DTypeKind::Bool => params.push((pname, d, sp)),
                _ => {
                    return Err(syn::Error::new_spanned(
                        &ty,
                        "a `#[kernel]` parameter is one element (f32, f64, f16, bf16, i32, i64 or u8) or a row (`Row<f32>`)",
                    ))
                }
            }
            rows.push(false);
        }
        if content.is_empty() {
            break;
        }
        content.parse::<Token![,]>()?;
    }
    if params.is_empty() {
        return Err(syn::Error::new(
            name.span(),
            "a `#[kernel]` fn takes at least one element parameter",
        ));
    }
    if !input.peek(Token![->]) {
        return Err(input.error("a `#[kernel]` fn declares its element type: add `-> f32`"));
    }
    input.parse::<Token![->]>()?;
    let ty: syn::Type = input.parse()?;
    let (ret, ret_row) = match (row_type(&ty), scalar_kind(&ty)) {
        (Some(Some(d)), _) if d.is_float() => ((d, Sp::of(&ty)), true),
        (Some(_), _) => {
            return Err(syn::Error::new_spanned(
                &ty,
                "a row is of floats: `Row<f32>`, `Row<f64>`, `Row<f16>` or `Row<bf16>`",
            ))
        }
        (None, Some(ScalarKind::DType(d))) => ((d, Sp::of(&ty)), false),
        _ => {
            return Err(syn::Error::new_spanned(
                &ty,
                "a `#[kernel]` fn returns one element (f32, f64, f16, bf16, i32, i64, u8 or bool) or a row (`Row<f32>`)",
            ))
        }
    };
    let body: syn::Block = input.parse()?;
    Ok(KernelFn {
        attrs,
        vis,
        name,
        params,
        rows,
        ret,
        ret_row,
        body,
    })
}

/// `Some(dtype)` for `Row<dtype>` (`Some(None)` for a `Row` of something
/// else), `None` for any other type.
fn row_type(ty: &syn::Type) -> Option<Option<DTypeKind>> {
    let syn::Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    if seg.ident != "Row" || p.path.segments.len() != 1 {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &seg.arguments else {
        return Some(None);
    };
    match args.args.iter().collect::<Vec<_>>()[..] {
        [syn::GenericArgument::Type(t)] => Some(match scalar_kind(t) {
            Some(ScalarKind::DType(d)) => Some(d),
            _ => None,
        }),
        _ => Some(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn first_fn(ts: TokenStream) -> TensorFn {
        match parse_input(ts).unwrap().items.remove(0) {
            Item::Fn(f) => f,
            Item::Kernel(_) => panic!("expected a tensor fn"),
        }
    }

    #[test]
    fn multi_index_is_wrapped_but_arrays_are_not() {
        let out = wrap_multi_index(quote!(x[i, j] + cat([a, b], 1) + y[0] + (z)[1, 2]));
        let s = out.to_string();
        assert!(s.contains("x [(i , j)]"), "{s}");
        assert!(s.contains("cat ([a , b] , 1)"), "{s}");
        assert!(s.contains("y [0]"), "{s}");
        assert!(s.contains("(z) [(1 , 2)]"), "{s}");
    }

    #[test]
    fn signature_and_body() {
        let f = first_fn(quote! {
            /// Doc.
            pub fn dense<const B: usize>(
                x: &Tensor<Cuda, f16, [B, 784]>,
                w: &Tensor<Cuda<1>, half::f16, [784, N * 2 + 1]>,
                alpha: f32,
            ) -> (Tensor<Cpu, f32, [B]>, Tensor<Cpu, f32, []>) {
                let h = x.reshape([B, -1]);
                let (a, b) = other(h);
                (a, x[0, 1] * alpha)
            }
        });
        assert_eq!(f.name, "dense");
        assert_eq!(f.generics.len(), 1);
        assert_eq!(f.params.len(), 3);
        let ParamTy::Tensor(w) = &f.params[1].ty else {
            panic!()
        };
        assert_eq!(w.device.0, Device::Cuda(1));
        assert_eq!(w.dtype.0, Dt::Kind(DTypeKind::F16));
        assert_eq!(w.dims[1].expr.to_string(), "N * 2 + 1");
        assert!(matches!(
            f.params[2].ty,
            ParamTy::Scalar(ScalarTyAst {
                kind: ScalarKind::DType(DTypeKind::F32),
                ..
            })
        ));
        assert!(f.ret.tuple);
        assert_eq!(f.ret.tensors[1].dims.len(), 0);
        assert_eq!(f.body.stmts.len(), 2);
        assert_eq!(f.body.stmts[0].init.to_string(), "x.reshape([B, -1])");
        assert_eq!(f.body.ret.to_string(), "(a, x[0, 1] * alpha)");
        assert_eq!(f.attrs.len(), 1);
    }

    #[test]
    fn printing_keeps_needed_parentheses() {
        let e = expr(&syn::parse_quote!((a + b) * c - (d - e) / -(f + 1.5))).unwrap();
        assert_eq!(e.to_string(), "(a + b) * c - (d - e) / -(f + 1.5)");
        let e = expr(&syn::parse_quote!((a + b).cast::<f16>())).unwrap();
        assert_eq!(e.to_string(), "(a + b).cast::<f16>()");
        let e = expr(&syn::parse_quote!(addmm(b, x, w, beta = 0.5))).unwrap();
        assert_eq!(e.to_string(), "addmm(b, x, w, beta = 0.5)");
    }

    #[test]
    fn helpful_parse_errors() {
        let e = parse_input(quote!(fn f(x: Tensor<Cpu, f32, [2]>) -> Tensor<Cpu, f32, [2]> { x }))
            .unwrap_err();
        assert!(e.to_string().contains("`x: &Tensor<..>`"), "{e}");
        let e = parse_input(quote!(fn f(x: &Tensor<Gpu, f32, [2]>) -> Tensor<Cpu, f32, [2]> { x }))
            .unwrap_err();
        assert!(e.to_string().contains("`Gpu` is not a device"), "{e}");
        let e = parse_input(quote!(fn f(x: &Tensor<Cpu, f31, [2]>) -> Tensor<Cpu, f32, [2]> { x }))
            .unwrap_err();
        assert!(e.to_string().contains("`f31` is not a dtype"), "{e}");
        let e =
            parse_input(quote!(fn f(x: &Tensor<Cpu, f32, [N - 1]>) -> Tensor<Cpu, f32, [2]> { x }))
                .unwrap_err();
        assert!(e.to_string().contains("a dim is a literal"), "{e}");
        let e =
            parse_input(quote!(fn f(x: &Tensor<Cpu, f32, [2]>) -> Tensor<Cpu, f32, [2]> { x; }))
                .unwrap_err();
        assert!(e.to_string().contains("remove this `;`"), "{e}");
        let e =
            parse_input(quote!(fn f<T>(x: &Tensor<Cpu, f32, [2]>) -> Tensor<Cpu, f32, [2]> { x }))
                .unwrap_err();
        assert!(
            e.to_string().contains("`T: Float` for a float dtype"),
            "{e}"
        );
        let e =
            parse_input(quote!(fn f<'a>(x: &Tensor<Cpu, f32, [2]>) -> Tensor<Cpu, f32, [2]> { x }))
                .unwrap_err();
        assert!(e.to_string().contains("const dims `const N: usize`"), "{e}");
        let e = parse_input(
            quote!(fn f<T: Float>(x: &Tensor<T, f32, [2]>) -> Tensor<Cpu, f32, [2]> { x }),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("`T` is a dtype parameter (`T: Float`), not a device"),
            "{e}"
        );
        let e = parse_input(
            quote!(fn f<D: Device>(x: &Tensor<D, U, [2]>) -> Tensor<D, f32, [2]> { x }),
        )
        .unwrap_err();
        assert!(e.to_string().contains("`U` is not a dtype"), "{e}");
        assert!(e.to_string().contains("`<U: Float>`"), "{e}");
        let e = parse_input(
            quote!(fn f<D: Device>(x: &Tensor<D, f32, [2]>) -> Tensor<D, f32, [2]> { let y: Tensor<E, f32, [2]> = x; y }),
        )
        .unwrap_err();
        assert!(e.to_string().contains("`E` is not a device"), "{e}");
        let e = parse_input(
            quote!(fn f<T: Float>(x: &Tensor<Cpu, T, [2]>) -> Tensor<Cpu, T, [2]> where T: Copy { x }),
        )
        .unwrap_err();
        assert!(e.to_string().contains("inline"), "{e}");
        let e = parse_input(
            quote!(fn f(x: &Tensor<Cpu, f32, [2]>) -> Tensor<Cpu, f32, [2]> { relu(x)? }),
        )
        .unwrap_err();
        assert!(e.to_string().contains("remove this `?`"), "{e}");
    }

    #[test]
    fn type_params() {
        let input = parse_input(quote! {
            fn f<D: Device, T: tensorfn::Float, U: DType, V: NumDType, const B: usize>(
                x: &Tensor<D, T, [B]>,
                i: &Tensor<Cuda<1>, U, [B]>,
            ) -> Tensor<D, V, [B]> {
                let y: Tensor<D, T, [B]> = x;
                y
            }
        })
        .unwrap();
        let Item::Fn(f) = &input.items[0] else {
            panic!()
        };
        let kinds: Vec<_> = f.type_params.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            [
                TypeParamKind::Device,
                TypeParamKind::DType(Bound::Float),
                TypeParamKind::DType(Bound::Any),
                TypeParamKind::DType(Bound::Num)
            ]
        );
        assert_eq!(f.generics.len(), 1);
        let ParamTy::Tensor(x) = &f.params[0].ty else {
            panic!()
        };
        assert_eq!(x.device.0, Device::Param(Name::new("D")));
        assert_eq!(x.dtype.0, Dt::Param(Name::new("T"), Bound::Float));
        let ParamTy::Tensor(i) = &f.params[1].ty else {
            panic!()
        };
        assert_eq!(i.device.0, Device::Cuda(1));
        assert_eq!(i.dtype.0, Dt::Param(Name::new("U"), Bound::Any));
        assert_eq!(
            f.ret.tensors[0].dtype.0,
            Dt::Param(Name::new("V"), Bound::Num)
        );
        let y = f.body.stmts[0].ty.as_ref().unwrap();
        assert_eq!(y.dtype.0, Dt::Param(Name::new("T"), Bound::Float));
    }

    #[test]
    fn kernels() {
        let input = parse_input(quote! {
            #[kernel]
            pub fn gelu(x: f32) -> f32 { 0.5 * x * (1.0 + tanh(x)) }
        })
        .unwrap();
        let Item::Kernel(k) = &input.items[0] else {
            panic!()
        };
        assert_eq!(k.name, "gelu");
        assert_eq!(k.params[0].1, DTypeKind::F32);
        assert!(k.attrs.is_empty());
        let e = parse_input(quote!(
            #[kernel]
            fn k(x: bool) -> f32 {
                1.0
            }
        ))
        .unwrap_err();
        assert!(e.to_string().contains("one element"), "{e}");
    }
}
