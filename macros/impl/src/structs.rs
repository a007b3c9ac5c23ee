//! Parameter structs as parameters of tensor functions: `p: &Mlp<Cpu, f32>`
//! and its fields in the body (`p.w1`, `p.attn.c_attn.weight`, `p.h[3].w`).
//!
//! A proc macro sees only its own input, so the fields of a struct come
//! from the struct's derive: `#[derive(Params)]` also defines a hidden
//! `macro_rules! __tensorfn_fields_Mlp` ([`fields_macro`]) that passes its
//! generic parameters and fields, as written, to a callback. When
//! `tensor_fn!` meets a struct whose fields it does not know yet, it
//! expands to a chain of those macros ending in the hidden second stage
//! `__tensor_fn_with_fields!`, carrying its own input ([`fetch`]); the
//! second stage reads the input and the tables gathered ([`Carry`]) and
//! fetches again for nested structs the body reaches, until every path
//! of the body is known.
//!
//! [`resolve`] then adds one parameter per tensor field the body uses
//! ([`ParamTy::Field`]): the checker sees it as a `&Tensor` parameter of
//! the field's type (the struct's generic parameters replaced by the
//! written arguments, `shape![..]` read as `[..]`), and the function binds
//! it from the struct when it is entered.

use crate::ast::*;
use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, ToTokens};

/// A type as text, as `ast::type_text` prints it, without the space before commas.
fn type_text(t: &syn::Type) -> String {
    crate::ast::type_text(t)
        .replace(" ,", ",")
        .replace(" ;", ";")
}
use std::collections::{BTreeMap, BTreeSet};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::Token;

/// The hidden macro holding a struct's fields: `__tensorfn_fields_Mlp`.
///
/// ```
/// let i = tensorfn_macros_impl::structs::fields_macro_name(&syn::parse_quote!(Mlp));
/// assert_eq!(i.to_string(), "__tensorfn_fields_Mlp");
/// ```
pub fn fields_macro_name(name: &syn::Ident) -> syn::Ident {
    format_ident!("__tensorfn_fields_{}", name)
}

/// The hidden `macro_rules!` a `#[derive(Params)]` adds beside the struct
/// (and a `pub(crate) use` of it, so that it is reached by the struct's
/// path within the crate): called with `[callback] ["key"] carry..`, it
/// calls `callback! { carry.. @struct ["key"] Name [generics] { fields } }`.
///
/// ```
/// let d: syn::DeriveInput = syn::parse_quote! {
///     struct Mlp<D: Device> { w: Tensor<D, f32, shape![2, 3]>, h: [Block<D>; 2] }
/// };
/// let text = tensorfn_macros_impl::structs::fields_macro(&d).to_string();
/// assert!(text.contains("macro_rules ! __tensorfn_fields_Mlp"));
/// assert!(text.contains("Mlp [D] { w : Tensor < D , f32 , shape ! [2 , 3] > , h : [Block < D > ; 2] , }"));
/// ```
pub fn fields_macro(d: &syn::DeriveInput) -> TokenStream {
    let syn::Data::Struct(s) = &d.data else {
        return TokenStream::new();
    };
    let syn::Fields::Named(named) = &s.fields else {
        return TokenStream::new();
    };
    let name = &d.ident;
    let mac = fields_macro_name(name);
    let generics = d.generics.params.iter().filter_map(|p| match p {
        syn::GenericParam::Type(t) => Some(t.ident.clone()),
        syn::GenericParam::Const(c) => Some(c.ident.clone()),
        syn::GenericParam::Lifetime(_) => None,
    });
    let fields = named.named.iter().map(|f| {
        let i = f.ident.as_ref().expect("named fields have names");
        let t = &f.ty;
        quote!(#i: #t,)
    });
    quote! {
        #[doc(hidden)]
        #[allow(unused_macros)]
        macro_rules! #mac {
            ([$($cb:tt)*] [$($key:tt)*] $($carry:tt)*) => {
                $($cb)*! { $($carry)* @struct [$($key)*] #name [#(#generics)*] { #(#fields)* } }
            };
        }
        #[doc(hidden)]
        #[allow(unused_imports)]
        pub(crate) use #mac;
    }
}

/// True if a parameter type after `&` is a tensor (`Tensor<..>`, also
/// written with a path), false for a parameter struct.
///
/// ```
/// use syn::parse::Parser;
/// use tensorfn_macros_impl::structs::peek_tensor;
/// let peek = |ts| (|i: syn::parse::ParseStream| {
///     let t = peek_tensor(i);
///     i.parse::<proc_macro2::TokenStream>()?;
///     Ok(t)
/// })
/// .parse2(ts)
/// .unwrap();
/// assert!(peek(quote::quote!(Tensor<Cpu, f32, [2]>)));
/// assert!(peek(quote::quote!(tensorfn::Tensor<Cpu, f32, [2]>)));
/// assert!(!peek(quote::quote!(nn::Mlp<Cpu, f32>)));
/// ```
pub fn peek_tensor(input: ParseStream) -> bool {
    let fork = input.fork();
    let _ = fork.parse::<Option<Token![::]>>();
    loop {
        let Ok(i) = fork.call(syn::Ident::parse_any) else {
            return false;
        };
        if fork.peek(Token![::]) {
            let _ = fork.parse::<Token![::]>();
            continue;
        }
        return i == "Tensor";
    }
}

/// True for `a.b` and for indices into one (`p.h[3]`): an expression that
/// may be a path into a parameter struct.
///
/// ```
/// use tensorfn_macros_impl::{parse::expr, structs::is_field_path};
/// assert!(is_field_path(&expr(&syn::parse_quote!(p.h[3])).unwrap()));
/// assert!(!is_field_path(&expr(&syn::parse_quote!(x[3])).unwrap()));
/// ```
pub fn is_field_path(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Field { .. } => true,
        ExprKind::Index { base, .. } => is_field_path(base),
        _ => false,
    }
}

/// The path `text` (`p.h[3].ln_1.weight`) as an expression written at
/// `span`.
///
/// ```
/// let e = tensorfn_macros_impl::structs::path_expr("p.h[3].w", proc_macro2::Span::call_site())?;
/// assert_eq!(e.to_string(), "p.h[3].w");
/// # Ok::<(), syn::Error>(())
/// ```
pub fn path_expr(text: &str, span: Span) -> syn::Result<Expr> {
    let ts = syn::parse_str::<TokenStream>(text)?;
    crate::parse::expr(&syn::parse2::<syn::Expr>(respan(ts, span))?)
}

/// The variable holding a reference to the parameter struct at `text`
/// (`p.h[3]`) in generated code, bound when the function is entered.
///
/// ```
/// let v = tensorfn_macros_impl::structs::struct_var("p.h[3]");
/// assert_eq!(v.to_string(), "__tf_struct_p_h_3_");
/// ```
pub fn struct_var(text: &str) -> syn::Ident {
    let clean: String = text
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format_ident!("__tf_struct_{}", clean)
}

/// A struct's fields as its derive wrote them.
#[derive(Clone, Debug)]
pub struct Table {
    /// The struct's name.
    pub name: String,
    /// Its type and const parameters, in order.
    pub generics: Vec<String>,
    /// Its fields: name and type as written.
    pub fields: Vec<(String, TokenStream)>,
}

/// The second stage's input: `@input { tensor_fn input } (@struct ["key"]
/// Name [generics] { fields })*`.
pub struct Carry {
    /// The original input of `tensor_fn!`.
    pub input: TokenStream,
    /// The tables gathered so far, by the path they were asked for.
    pub tables: BTreeMap<String, Table>,
    /// The tables as tokens, carried on to the next round.
    pub raw: TokenStream,
}

impl Carry {
    /// Reads the second stage's input.
    ///
    /// ```
    /// use tensorfn_macros_impl::structs::Carry;
    /// let c = Carry::parse(quote::quote! {
    ///     @input { fn f() {} }
    ///     @struct ["nn::Mlp"] Mlp [D T] { w: Tensor<D, T, shape![2]>, }
    /// })
    /// .unwrap();
    /// assert_eq!(c.tables["nn::Mlp"].generics, ["D", "T"]);
    /// assert_eq!(c.tables["nn::Mlp"].fields[0].0, "w");
    /// ```
    pub fn parse(tokens: TokenStream) -> syn::Result<Carry> {
        (|input: ParseStream| {
            input.parse::<Token![@]>()?;
            let kw: syn::Ident = input.parse()?;
            if kw != "input" {
                return Err(syn::Error::new(kw.span(), "expected `@input`"));
            }
            let body: Group = input.parse()?;
            let raw: TokenStream = input.fork().parse()?;
            let mut tables = BTreeMap::new();
            while !input.is_empty() {
                input.parse::<Token![@]>()?;
                input.parse::<Token![struct]>()?;
                let key;
                syn::bracketed!(key in input);
                let key: syn::LitStr = key.parse()?;
                let name: syn::Ident = input.parse()?;
                let gens;
                syn::bracketed!(gens in input);
                let mut generics = Vec::new();
                while !gens.is_empty() {
                    generics.push(gens.parse::<syn::Ident>()?.to_string());
                }
                let body;
                syn::braced!(body in input);
                let mut fields = Vec::new();
                while !body.is_empty() {
                    let f: syn::Ident = body.parse()?;
                    body.parse::<Token![:]>()?;
                    let ty: syn::Type = body.parse()?;
                    body.parse::<Token![,]>()?;
                    fields.push((f.to_string(), ty.to_token_stream()));
                }
                tables.insert(
                    key.value(),
                    Table {
                        name: name.to_string(),
                        generics,
                        fields,
                    },
                );
            }
            Ok(Carry {
                input: body.stream(),
                tables,
                raw,
            })
        })
        .parse2(tokens)
    }
}

/// A struct the body reaches whose fields are not known yet: the path its
/// fields macro is asked by, and that macro's path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Missing {
    key: String,
    span: SpanKey,
}

/// A span, ordered by nothing (it rides along for error positions).
#[derive(Clone, Debug)]
struct SpanKey(Span);

impl PartialEq for SpanKey {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for SpanKey {}
impl PartialOrd for SpanKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for SpanKey {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

/// What [`resolve`] found.
pub enum Resolution {
    /// Tables still to fetch: the tokens of the next round.
    Fetch(TokenStream),
    /// Every path known; the errors of each function (in the order of the
    /// input's functions).
    Done(Vec<Vec<syn::Error>>),
}

/// The chain of fields macros that fetches `missing` and calls the second
/// stage with `carry` and the new tables.
fn fetch(missing: &BTreeSet<Missing>, input: &TokenStream, raw: &TokenStream) -> TokenStream {
    let paths: Vec<TokenStream> = missing
        .iter()
        .map(|m| macro_path(&m.key, m.span.0))
        .collect();
    let keys: Vec<String> = missing.iter().map(|m| m.key.clone()).collect();
    let mut args = TokenStream::new();
    for (i, key) in keys.iter().enumerate() {
        let next = match paths.get(i + 1) {
            Some(p) => p.clone(),
            None => quote!(::tensorfn::__tensor_fn_with_fields),
        };
        args.extend(quote!([#next] [#key]));
    }
    let first = &paths[0];
    quote! {
        #first! { #args @input { #input } #raw }
    }
}

/// `nn::__tensorfn_fields_Mlp` for the key `nn::Mlp`, spanned on the
/// user's type so that a struct without the derive is an error there.
fn macro_path(key: &str, span: Span) -> TokenStream {
    let mut segs: Vec<&str> = key.split("::").collect();
    let last = segs.pop().unwrap_or_default();
    let mut out = TokenStream::new();
    if key.starts_with("::") {
        segs.remove(0);
        out.extend(quote_spanned_colons(span));
    }
    for s in segs {
        let i = syn::Ident::new(s, span);
        out.extend(quote!(#i));
        out.extend(quote_spanned_colons(span));
    }
    let m = syn::Ident::new(&format!("__tensorfn_fields_{last}"), span);
    out.extend(quote!(#m));
    out
}

fn quote_spanned_colons(span: Span) -> TokenStream {
    quote::quote_spanned!(span=> ::)
}

/// A type as reached along a path: a struct by its key and arguments, an
/// array, a `Vec`, a tensor, or something else.
enum Place {
    Struct {
        key: String,
        /// The struct's module, for the paths its field types name.
        prefix: Vec<String>,
        args: Vec<TokenStream>,
    },
    Array(syn::Type, u64, Vec<String>),
    Vec(syn::Type, Vec<String>),
    Tensor(TokenStream),
    Other(String),
}

/// `a::b::C` of a path type without its arguments, and the arguments.
fn path_key(p: &syn::TypePath) -> Option<(Vec<String>, bool, Vec<TokenStream>)> {
    if p.qself.is_some() {
        return None;
    }
    let mut segs = Vec::new();
    let mut args = Vec::new();
    let n = p.path.segments.len();
    for (i, s) in p.path.segments.iter().enumerate() {
        segs.push(s.ident.to_string());
        match &s.arguments {
            syn::PathArguments::None => {}
            syn::PathArguments::AngleBracketed(a) if i + 1 == n => {
                args = a.args.iter().map(|a| a.to_token_stream()).collect();
            }
            _ => return None,
        }
    }
    Some((segs, p.path.leading_colon.is_some(), args))
}

/// The place of a type written in a struct of module `prefix`.
fn place_of(ty: &syn::Type, prefix: &[String]) -> Place {
    match ty {
        syn::Type::Group(g) => place_of(&g.elem, prefix),
        syn::Type::Paren(p) => place_of(&p.elem, prefix),
        syn::Type::Array(a) => match &a.len {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(i),
                ..
            }) => match i.base10_parse() {
                Ok(n) => Place::Array((*a.elem).clone(), n, prefix.to_vec()),
                Err(_) => Place::Other(type_text(ty)),
            },
            _ => Place::Other(type_text(ty)),
        },
        syn::Type::Path(p) => {
            let Some((segs, leading, args)) = path_key(p) else {
                return Place::Other(type_text(ty));
            };
            let last = segs.last().cloned().unwrap_or_default();
            if last == "Tensor" {
                return Place::Tensor(p.to_token_stream());
            }
            if last == "Vec" && args.len() == 1 {
                if let Ok(elem) = syn::parse2::<syn::Type>(args[0].clone()) {
                    return Place::Vec(elem, prefix.to_vec());
                }
            }
            if is_scalar_name(&last) || (segs.len() > 1 && segs[0] == "std") {
                return Place::Other(type_text(ty));
            }
            // A struct: its path from the function's module.
            let full: Vec<String> = if leading || segs[0] == "crate" {
                segs.clone()
            } else if segs[0] == "self" {
                prefix.iter().chain(&segs[1..]).cloned().collect()
            } else {
                prefix.iter().chain(&segs).cloned().collect()
            };
            let mut key = full.join("::");
            if leading {
                key = format!("::{key}");
            }
            Place::Struct {
                key,
                prefix: full[..full.len() - 1].to_vec(),
                args,
            }
        }
        _ => Place::Other(type_text(ty)),
    }
}

fn is_scalar_name(s: &str) -> bool {
    matches!(
        s,
        "f32"
            | "f64"
            | "f16"
            | "bf16"
            | "i8"
            | "i16"
            | "i32"
            | "i64"
            | "u8"
            | "u16"
            | "u32"
            | "u64"
            | "usize"
            | "isize"
            | "bool"
            | "String"
            | "Option"
            | "Box"
    )
}

/// `ts` with every identifier in `subst` replaced by its tokens.
pub(crate) fn substitute(ts: TokenStream, subst: &BTreeMap<String, TokenStream>) -> TokenStream {
    ts.into_iter()
        .flat_map(|t| match t {
            TokenTree::Ident(i) => match subst.get(&i.to_string()) {
                Some(r) => r.clone(),
                None => TokenStream::from(TokenTree::Ident(i)),
            },
            TokenTree::Group(g) => {
                let mut n = Group::new(g.delimiter(), substitute(g.stream(), subst));
                n.set_span(g.span());
                TokenStream::from(TokenTree::Group(n))
            }
            other => TokenStream::from(other),
        })
        .collect()
}

/// `ts` with `shape![..]` written `[..]`, `a::Tensor` written `Tensor`,
/// and every token spanned at `span`.
fn normalize_tensor(ts: TokenStream, span: Span) -> TokenStream {
    let toks: Vec<TokenTree> = ts.into_iter().collect();
    let mut out: Vec<TokenTree> = Vec::new();
    let mut i = 0;
    // Drop a path before `Tensor`.
    if let Some(k) = toks
        .iter()
        .position(|t| matches!(t, TokenTree::Ident(i) if i == "Tensor"))
    {
        i = k;
    }
    while i < toks.len() {
        let t = &toks[i];
        let is_shape = matches!(t, TokenTree::Ident(id) if id == "shape")
            && matches!(toks.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '!')
            && matches!(toks.get(i + 2), Some(TokenTree::Group(g)) if g.delimiter() != Delimiter::None);
        if is_shape {
            // A path before `shape!` (`tensorfn::shape!`) goes too.
            while matches!(out.last(), Some(TokenTree::Punct(p)) if p.as_char() == ':') {
                out.pop();
                if matches!(out.last(), Some(TokenTree::Ident(_))) {
                    out.pop();
                }
            }
            let TokenTree::Group(g) = &toks[i + 2] else {
                unreachable!("checked above")
            };
            let mut n = Group::new(Delimiter::Bracket, respan(g.stream(), span));
            n.set_span(span);
            out.push(TokenTree::Group(n));
            i += 3;
            continue;
        }
        out.push(respan_tree(t.clone(), span));
        i += 1;
    }
    out.into_iter().collect()
}

fn respan(ts: TokenStream, span: Span) -> TokenStream {
    ts.into_iter().map(|t| respan_tree(t, span)).collect()
}

fn respan_tree(t: TokenTree, span: Span) -> TokenTree {
    match t {
        TokenTree::Group(g) => {
            let mut n = Group::new(g.delimiter(), respan(g.stream(), span));
            n.set_span(span);
            TokenTree::Group(n)
        }
        mut other => {
            other.set_span(span);
            other
        }
    }
}

/// One step of a path into a struct.
enum Seg<'e> {
    Field(&'e syn::Ident),
    Index(&'e Expr, &'e [Expr]),
}

/// The parameter a path starts from and its steps, outermost last.
fn chain(e: &Expr) -> Option<(&syn::Ident, Vec<Seg<'_>>)> {
    match &e.kind {
        ExprKind::Var(v) => Some((v, Vec::new())),
        ExprKind::Field { base, member } => {
            let (root, mut segs) = chain(base)?;
            segs.push(Seg::Field(member));
            Some((root, segs))
        }
        ExprKind::Index { base, indices } => {
            let (root, mut segs) = chain(base)?;
            segs.push(Seg::Index(e, indices));
            Some((root, segs))
        }
        _ => None,
    }
}

/// A struct parameter: its index, name, type as written, where.
struct Root {
    name: syn::Ident,
    place: Place,
    ty_text: String,
    span: Span,
}

struct Walk<'t> {
    fn_name: String,
    /// The function's device and dtype parameters, which field types name.
    type_params: &'t [crate::ast::TypeParam],
    /// The functions of the invocation taking structs, with what their
    /// walk found (`None` while not walked yet: a call back into a
    /// function being walked).
    callees: &'t BTreeMap<String, Option<Callee>>,
    /// The parameter structs passed to those functions.
    struct_args: Vec<StructArgAst>,
    tables: &'t BTreeMap<String, Table>,
    roots: BTreeMap<String, Root>,
    missing: BTreeSet<Missing>,
    errors: Vec<syn::Error>,
    /// Used tensor fields by path text, in order of first use.
    fields: Vec<(String, FieldParamAst, syn::Ident)>,
}

/// What a caller needs of a function taking parameter structs.
#[derive(Clone, Debug)]
struct Callee {
    /// Its written parameters: name, and the struct's name for a struct.
    params: Vec<(String, Option<String>)>,
    /// The paths of the tensor fields it uses (`p.ln_1.weight`).
    fields: Vec<String>,
}

/// The end of a path.
enum Reached {
    /// A tensor field, with the code reaching it.
    Tensor(TokenStream, TokenStream),
    /// A tensor before the path's end (an index into it follows).
    TensorAt,
    /// Reported, or a table is missing.
    Stop,
}

fn field_list(t: &Table) -> String {
    t.fields
        .iter()
        .map(|(f, _)| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Walk<'_> {
    fn error(&mut self, sp: &Sp, msg: String) {
        self.errors.push(sp.error(msg));
    }

    /// The table of a struct, or `None` after recording it as missing.
    fn table(&mut self, key: &str, span: Span) -> Option<&Table> {
        if !self.tables.contains_key(key) {
            self.missing.insert(Missing {
                key: key.to_string(),
                span: SpanKey(span),
            });
            return None;
        }
        self.tables.get(key)
    }

    /// Follows `segs` from the struct parameter `root`: the place reached,
    /// the code reaching it, its path and its type as text.
    fn follow_to(
        &mut self,
        root: &str,
        segs: &[Seg<'_>],
        whole: &Expr,
    ) -> Result<(Place, TokenStream, String, String), Reached> {
        let r = &self.roots[root];
        let (span, pname, ty_text) = (r.span, r.name.clone(), r.ty_text.clone());
        let mut place = match &r.place {
            Place::Struct { key, prefix, args } => Place::Struct {
                key: key.clone(),
                prefix: prefix.clone(),
                args: args.clone(),
            },
            _ => unreachable!("roots are structs"),
        };
        let mut access = quote!(#pname);
        let mut text = pname.to_string();
        let mut struct_name = ty_text;
        let fn_name = self.fn_name.clone();
        for seg in segs {
            match (place, seg) {
                (Place::Struct { key, prefix, args }, Seg::Field(m)) => {
                    let Some(t) = self.table(&key, span).cloned() else {
                        return Err(Reached::Stop);
                    };
                    let Some((_, fty)) = t.fields.iter().find(|(f, _)| *m == f) else {
                        self.error(
                            &whole.sp,
                            format!(
                                "`{text}` is a `{}` and has no field `{m}`: its fields are {}",
                                struct_name,
                                field_list(&t)
                            ),
                        );
                        return Err(Reached::Stop);
                    };
                    let subst: BTreeMap<String, TokenStream> =
                        t.generics.iter().cloned().zip(args).collect();
                    let fty = substitute(fty.clone(), &subst);
                    let Ok(fty) = syn::parse2::<syn::Type>(fty) else {
                        self.error(&whole.sp, format!("the type of `{text}.{m}` is not a type"));
                        return Err(Reached::Stop);
                    };
                    struct_name = type_text(&fty);
                    place = place_of(&fty, &prefix);
                    access = quote!(#access.#m);
                    text = format!("{text}.{m}");
                }
                (Place::Array(elem, len, prefix), Seg::Index(ix, indices)) => {
                    let Some(i) = self.literal_index(&text, indices, ix) else {
                        return Err(Reached::Stop);
                    };
                    if i >= len {
                        self.error(
                            &ix.sp,
                            format!("index {i} is out of range for `{text}`, an array of {len} `{}`: the last index is {}", type_text(&elem), len.saturating_sub(1)),
                        );
                        return Err(Reached::Stop);
                    }
                    let il = proc_macro2::Literal::usize_unsuffixed(i as usize);
                    access = quote!(#access[#il]);
                    text = format!("{text}[{i}]");
                    struct_name = type_text(&elem);
                    place = place_of(&elem, &prefix);
                }
                (Place::Vec(elem, prefix), Seg::Index(ix, indices)) => {
                    let Some(i) = self.literal_index(&text, indices, ix) else {
                        return Err(Reached::Stop);
                    };
                    let il = proc_macro2::Literal::usize_unsuffixed(i as usize);
                    let msg = format!("`{fn_name}`: index {i} is out of range for `{text}`, a `Vec` of {{}} elements");
                    access = quote! {
                        (*match #access.get(#il) {
                            ::core::option::Option::Some(v) => v,
                            ::core::option::Option::None => {
                                return ::core::result::Result::Err(::tensorfn::Error::Index(
                                    ::std::format!(#msg, #access.len()),
                                ))
                            }
                        })
                    };
                    text = format!("{text}[{i}]");
                    struct_name = type_text(&elem);
                    place = place_of(&elem, &prefix);
                }
                (Place::Tensor(_), Seg::Index(..)) => return Err(Reached::TensorAt),
                (Place::Tensor(_), Seg::Field(m)) => {
                    self.error(
                        &whole.sp,
                        format!("`{text}` is a tensor and has no field `{m}`"),
                    );
                    return Err(Reached::Stop);
                }
                (Place::Struct { .. }, Seg::Index(ix, _)) => {
                    self.error(
                        &ix.sp,
                        format!("`{text}` is a parameter struct `{struct_name}`, not an array: it cannot be indexed"),
                    );
                    return Err(Reached::Stop);
                }
                (Place::Array(..) | Place::Vec(..), Seg::Field(m)) => {
                    self.error(
                        &whole.sp,
                        format!("`{text}` is a `{struct_name}`: index it before its field `{m}` (`{text}[0].{m}`)"),
                    );
                    return Err(Reached::Stop);
                }
                (Place::Other(t), _) => {
                    self.error(
                        &whole.sp,
                        format!("`{text}` is a `{t}`, neither a tensor nor a parameter struct"),
                    );
                    return Err(Reached::Stop);
                }
            }
        }
        Ok((place, access, text, struct_name))
    }

    /// Follows `segs` from the struct parameter `root` to a tensor.
    fn follow(&mut self, root: &str, segs: &[Seg<'_>], whole: &Expr) -> Reached {
        let span = self.roots[root].span;
        let (place, access, text, struct_name) = match self.follow_to(root, segs, whole) {
            Ok(x) => x,
            Err(r) => return r,
        };
        match place {
            Place::Tensor(t) => Reached::Tensor(t, access),
            Place::Struct { key, .. } => {
                let Some(t) = self.table(&key, span).cloned() else {
                    return Reached::Stop;
                };
                self.error(
                    &whole.sp,
                    format!(
                        "`{text}` is a parameter struct `{struct_name}`, not a tensor: use its fields ({})",
                        field_list(&t)
                    ),
                );
                Reached::Stop
            }
            Place::Array(elem, len, _) => {
                let elem = type_text(&elem);
                self.error(
                    &whole.sp,
                    format!("`{text}` is an array of {len} `{elem}`, not a tensor: index it with a literal (`{text}[0]`)"),
                );
                Reached::Stop
            }
            Place::Vec(..) => {
                self.error(
                    &whole.sp,
                    format!("`{text}` is a `{struct_name}`, not a tensor: index it with a literal (`{text}[0]`)"),
                );
                Reached::Stop
            }
            Place::Other(t) => {
                self.error(
                    &whole.sp,
                    format!("`{text}` is a `{t}`, neither a tensor nor a parameter struct"),
                );
                Reached::Stop
            }
        }
    }

    fn literal_index(&mut self, text: &str, indices: &[Expr], ix: &Expr) -> Option<u64> {
        match indices {
            [Expr {
                kind: ExprKind::Int(i),
                ..
            }] => Some(*i),
            _ => {
                self.error(
                    &ix.sp,
                    format!("`{text}` is indexed with one integer literal (`{text}[0]`): the element is chosen at compile time"),
                );
                None
            }
        }
    }

    /// Registers the tensor field `text` reached by `access`.
    fn use_field(&mut self, text: String, ty: TokenStream, access: TokenStream, root: &str) {
        if self.fields.iter().any(|(t, ..)| *t == text) {
            return;
        }
        let r = &self.roots[root];
        let span = r.span;
        let ty_text = r.ty_text.clone();
        let tokens = normalize_tensor(ty, span);
        let parsed = Parser::parse2(crate::parse::parse_tensor_ty, tokens).and_then(|mut t| {
            crate::parse::resolve_tensor_ty(&mut t, self.type_params)?;
            Ok(t)
        });
        let tensor = match parsed {
            Ok(t) => t,
            Err(e) => {
                self.errors.push(syn::Error::new(
                    span,
                    format!("the field `{text}` of `{ty_text}`: {e}"),
                ));
                return;
            }
        };
        let clean: String = text
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let name = format_ident!("__tf_field_{}", clean);
        let binding = quote!(let #name = &#access;);
        self.fields.push((
            text.clone(),
            FieldParamAst {
                tensor,
                text,
                binding,
            },
            name,
        ));
    }

    /// An argument `e` of a function taking the struct `want` for its
    /// parameter `pname`: a path to a struct is recorded with the fields
    /// the callee uses, as fields of this function; anything else is
    /// walked as a value (the checker reports it).
    fn struct_arg(&mut self, e: &Expr, callee: &Callee, pname: &str, want: &str) {
        let Some((root, segs)) = chain(e) else {
            return self.walk(e);
        };
        let root = root.to_string();
        if !self.roots.contains_key(&root) {
            return self.walk(e);
        }
        let span = self.roots[&root].span;
        let (place, access) = if segs.is_empty() {
            let r = &self.roots[&root];
            let name = &r.name;
            let place = match &r.place {
                Place::Struct { key, prefix, args } => Place::Struct {
                    key: key.clone(),
                    prefix: prefix.clone(),
                    args: args.clone(),
                },
                _ => unreachable!("roots are structs"),
            };
            (place, quote!(#name))
        } else {
            match self.follow_to(&root, &segs, e) {
                Ok((place @ Place::Struct { .. }, access, ..)) => (place, quote!(&#access)),
                Ok(_) | Err(Reached::TensorAt) => return self.walk(e),
                Err(_) => return,
            }
        };
        let Place::Struct { key, args, .. } = place else {
            unreachable!("matched above")
        };
        let Some(table) = self.table(&key, span).cloned() else {
            return;
        };
        let text = e.to_string();
        if !self.struct_args.iter().any(|a| a.text == text) {
            self.struct_args.push(StructArgAst {
                text: text.clone(),
                name: table.name.clone(),
                path: key.clone(),
                args,
                access,
            });
        }
        // Another struct: the checker reports it.
        if table.name != want {
            return;
        }
        let sp = e.sp.span();
        for f in &callee.fields {
            let Some(suffix) = f.strip_prefix(pname) else {
                continue;
            };
            if !suffix.starts_with(['.', '[']) {
                continue;
            }
            let path = format!("{text}{suffix}");
            match path_expr(&path, sp) {
                Ok(x) => self.walk(&x),
                Err(err) => self.errors.push(syn::Error::new(
                    sp,
                    format!("internal error of `tensor_fn!`: the path `{path}`: {err}"),
                )),
            }
        }
    }

    fn walk(&mut self, e: &Expr) {
        if let Some((root, segs)) = chain(e) {
            let root = root.to_string();
            if self.roots.contains_key(&root) {
                if segs.is_empty() {
                    let r = &self.roots[&root];
                    let (ty_text, span) = (r.ty_text.clone(), r.span);
                    let Place::Struct { key, .. } = &r.place else {
                        unreachable!("roots are structs")
                    };
                    let key = key.clone();
                    if let Some(t) = self.table(&key, span).cloned() {
                        self.error(
                            &e.sp,
                            format!(
                                "`{root}` is a parameter struct `{ty_text}`, not a tensor: use its fields ({})",
                                field_list(&t)
                            ),
                        );
                    }
                    return;
                }
                match self.follow(&root, &segs, e) {
                    Reached::Tensor(ty, access) => self.use_field(e.to_string(), ty, access, &root),
                    Reached::TensorAt => {
                        if let ExprKind::Index { base, indices } = &e.kind {
                            self.walk(base);
                            indices.iter().for_each(|i| self.walk(i));
                        }
                    }
                    Reached::Stop => {}
                }
                return;
            }
            if let ExprKind::Field { member, .. } = &e.kind {
                self.error(
                    &e.sp,
                    format!(
                        "`{e}`: only parameter structs have fields (`p: &Mlp`, then `p.{member}`)"
                    ),
                );
                return;
            }
        }
        match &e.kind {
            ExprKind::Var(_)
            | ExprKind::Item(_)
            | ExprKind::Int(_)
            | ExprKind::Float(_)
            | ExprKind::Bool(_)
            | ExprKind::Str(_) => {}
            ExprKind::Neg(x) => self.walk(x),
            ExprKind::Binary(_, a, b) | ExprKind::Compare(_, a, b) => {
                self.walk(a);
                self.walk(b);
            }
            ExprKind::Call { func, args } => {
                let name = func.get_ident().map(|f| f.to_string());
                let callee = name.as_ref().and_then(|n| self.callees.get(n));
                match callee {
                    None => args.iter().for_each(|a| self.walk(&a.value)),
                    Some(None) => self.error(
                        &e.sp,
                        format!(
                            "`{}` takes a parameter struct and calls `{}` back: recursion between functions taking parameter structs is not supported",
                            name.unwrap_or_default(),
                            self.fn_name
                        ),
                    ),
                    Some(Some(c)) => {
                        let c = c.clone();
                        let mut pos = 0;
                        for a in args {
                            let i = match &a.name {
                                Some(n) => c.params.iter().position(|(p, _)| n == p),
                                None => {
                                    pos += 1;
                                    Some(pos - 1)
                                }
                            };
                            match i.and_then(|i| c.params.get(i)) {
                                Some((pname, Some(want))) => {
                                    self.struct_arg(&a.value, &c, pname, want)
                                }
                                _ => self.walk(&a.value),
                            }
                        }
                    }
                }
            }
            ExprKind::Method { recv, args, .. } => {
                self.walk(recv);
                args.iter().for_each(|a| self.walk(&a.value));
            }
            ExprKind::Field { base, member } => {
                self.error(
                    &e.sp,
                    format!(
                        "`{e}`: only parameter structs have fields (`p: &Mlp`, then `p.{member}`)"
                    ),
                );
                self.walk(base);
            }
            ExprKind::Index { base, indices } => {
                self.walk(base);
                indices.iter().for_each(|i| self.walk(i));
            }
            ExprKind::Array(xs) | ExprKind::Tuple(xs) => xs.iter().for_each(|x| self.walk(x)),
        }
    }
}

/// Finds the fields the bodies use: with every table known, adds one
/// [`ParamTy::Field`] parameter per used tensor field to its function and
/// returns each function's errors; else the next round's tokens, which
/// fetch the missing tables (`input` is the macro's input, `raw` the
/// tables gathered so far).
///
/// ```
/// use quote::quote;
/// use tensorfn_macros_impl::{ast::{Item, ParamTy}, parse::parse_input, structs::*};
/// let input = quote! {
///     fn f(p: &Lin) -> Tensor<Cpu, f32, [4]> { p.b * 2.0 }
/// };
/// let mut parsed = parse_input(input.clone()).unwrap();
/// // Without the table of `Lin`: the tokens that fetch it.
/// let Resolution::Fetch(next) = resolve(&mut parsed, &Default::default(), &input, &quote!()) else {
///     panic!()
/// };
/// assert!(next.to_string().starts_with("__tensorfn_fields_Lin !"));
/// // With it: `p.b` is a parameter of its own.
/// let c = Carry::parse(quote!(@input {} @struct ["Lin"] Lin [] { b: Tensor<Cpu, f32, shape![4]>, })).unwrap();
/// let Resolution::Done(errors) = resolve(&mut parsed, &c.tables, &input, &c.raw) else {
///     panic!()
/// };
/// assert!(errors[0].is_empty());
/// let Item::Fn(f) = &parsed.items[0] else { panic!() };
/// assert!(matches!(&f.params[1].ty, ParamTy::Field(field) if field.text == "p.b"));
/// ```
pub fn resolve(
    parsed: &mut Input,
    tables: &BTreeMap<String, Table>,
    input: &TokenStream,
    raw: &TokenStream,
) -> Resolution {
    let fns = parsed.fns();
    let struct_fns: BTreeSet<String> = fns
        .iter()
        .filter(|f| f.params.iter().any(|p| matches!(p.ty, ParamTy::Struct(_))))
        .map(|f| f.name.to_string())
        .collect();
    // Callees before callers: a caller uses the fields its callees use.
    let mut order = Vec::new();
    let mut seen = vec![false; fns.len()];
    for i in 0..fns.len() {
        call_order(i, &fns, &struct_fns, &mut seen, &mut order);
    }
    let mut missing = BTreeSet::new();
    let mut all_errors: Vec<Vec<syn::Error>> = vec![Vec::new(); fns.len()];
    let mut added: Vec<Vec<(String, FieldParamAst, syn::Ident)>> = vec![Vec::new(); fns.len()];
    let mut args: Vec<Vec<StructArgAst>> = vec![Vec::new(); fns.len()];
    let mut callees: BTreeMap<String, Option<Callee>> =
        struct_fns.iter().map(|n| (n.clone(), None)).collect();
    for i in order {
        let f = fns[i];
        let mut w = Walk {
            fn_name: f.name.to_string(),
            type_params: &f.type_params,
            callees: &callees,
            struct_args: Vec::new(),
            tables,
            roots: BTreeMap::new(),
            missing: BTreeSet::new(),
            errors: Vec::new(),
            fields: Vec::new(),
        };
        for p in &f.params {
            let ParamTy::Struct(s) = &p.ty else { continue };
            let span = s.sp.span();
            let place = match &s.ty {
                syn::Type::Path(tp) => place_of(&s.ty, &[]).into_struct(tp),
                _ => None,
            };
            let Some(place) = place else {
                w.errors.push(s.sp.error(format!(
                    "`{}` is not a parameter type: a parameter is `&Tensor<Device, DType, [dims]>`, `&Struct` of a `#[derive(Params)]` struct, or a scalar",
                    type_text(&s.ty)
                )));
                continue;
            };
            if let Place::Struct { key, .. } = &place {
                let _ = w.table(key, span);
            }
            w.roots.insert(
                p.name.to_string(),
                Root {
                    name: p.name.clone(),
                    place,
                    ty_text: type_text(&s.ty),
                    span,
                },
            );
        }
        if w.missing.is_empty() {
            for s in &f.body.stmts {
                w.walk(&s.init);
            }
            w.walk(&f.body.ret);
        }
        let done = Callee {
            params: f
                .params
                .iter()
                .map(|p| {
                    let s = match &p.ty {
                        ParamTy::Struct(s) => Some(crate::sig::struct_sig(&s.ty).name),
                        _ => None,
                    };
                    (p.name.to_string(), s)
                })
                .collect(),
            fields: w.fields.iter().map(|(t, ..)| t.clone()).collect(),
        };
        missing.extend(std::mem::take(&mut w.missing));
        all_errors[i] = w.errors;
        added[i] = w.fields;
        args[i] = w.struct_args;
        if let Some(c) = callees.get_mut(&f.name.to_string()) {
            *c = Some(done);
        }
    }
    if !missing.is_empty() {
        return Resolution::Fetch(fetch(&missing, input, raw));
    }
    let mut fields = added.into_iter().zip(args);
    for item in &mut parsed.items {
        let Item::Fn(f) = item else { continue };
        let (used, args) = fields.next().expect("one list per function");
        for (_, field, name) in used {
            f.params.push(Param {
                name,
                ty: ParamTy::Field(field),
            });
        }
        f.struct_args = args;
    }
    Resolution::Done(all_errors)
}

/// Appends `i` to `order` after the functions taking structs it calls
/// (each once; a call back into a function in progress is left out).
fn call_order(
    i: usize,
    fns: &[&TensorFn],
    struct_fns: &BTreeSet<String>,
    seen: &mut [bool],
    order: &mut Vec<usize>,
) {
    if seen[i] {
        return;
    }
    seen[i] = true;
    let mut called = Vec::new();
    let f = fns[i];
    for e in f.body.stmts.iter().map(|s| &s.init).chain([&f.body.ret]) {
        calls_in(e, &mut called);
    }
    for name in called {
        if !struct_fns.contains(&name) {
            continue;
        }
        if let Some(j) = fns.iter().position(|g| g.name == name) {
            call_order(j, fns, struct_fns, seen, order);
        }
    }
    order.push(i);
}

/// The names of the functions `e` calls.
fn calls_in(e: &Expr, out: &mut Vec<String>) {
    match &e.kind {
        ExprKind::Var(_)
        | ExprKind::Item(_)
        | ExprKind::Int(_)
        | ExprKind::Float(_)
        | ExprKind::Bool(_)
        | ExprKind::Str(_) => {}
        ExprKind::Neg(x) => calls_in(x, out),
        ExprKind::Binary(_, a, b) | ExprKind::Compare(_, a, b) => {
            calls_in(a, out);
            calls_in(b, out);
        }
        ExprKind::Call { func, args } => {
            if let Some(i) = func.get_ident() {
                out.push(i.to_string());
            }
            args.iter().for_each(|a| calls_in(&a.value, out));
        }
        ExprKind::Method { recv, args, .. } => {
            calls_in(recv, out);
            args.iter().for_each(|a| calls_in(&a.value, out));
        }
        ExprKind::Field { base, .. } => calls_in(base, out),
        ExprKind::Index { base, indices } => {
            calls_in(base, out);
            indices.iter().for_each(|i| calls_in(i, out));
        }
        ExprKind::Array(xs) | ExprKind::Tuple(xs) => xs.iter().for_each(|x| calls_in(x, out)),
    }
}

/// A value of a function taking structs whose type is unknown though no
/// error was reported (a use of a struct the walk missed): an error on it
/// rather than a panic when expanding.
///
/// ```
/// use quote::quote;
/// // Every use of a struct is reported by the walk; a checked function
/// // has no value left without a type.
/// let a = tensorfn_macros_impl::analyse_tokens_with(
///     quote!(fn f(p: &Lin) -> Tensor<Cpu, f32, [4]> { relu(p) }),
///     quote!(@struct ["Lin"] Lin [] { b: Tensor<Cpu, f32, shape![4]>, }),
/// )
/// .unwrap();
/// assert_eq!(a.errors.len(), 1);
/// assert!(a.errors[0].to_string().contains("`p` is a parameter struct `Lin`"));
/// ```
pub fn unreported(f: &TensorFn, c: &crate::check::CheckedFn) -> Option<syn::Error> {
    use crate::graph::{Op, Ty};
    if !f.params.iter().any(|p| matches!(p.ty, ParamTy::Struct(_))) {
        return None;
    }
    let n =
        c.graph.nodes.iter().find(|n| {
            matches!(n.ty, Ty::Error) && !matches!(n.op, Op::Param(i) if i != usize::MAX)
        })?;
    Some(n.sp.error(format!(
        "`{}` cannot be used here: a parameter struct is read through its tensor fields",
        n.text
    )))
}

impl Place {
    /// The place of a parameter's own type: a struct (a tensor or other
    /// type is no parameter struct).
    fn into_struct(self, _: &syn::TypePath) -> Option<Place> {
        match self {
            Place::Struct { .. } => Some(self),
            _ => None,
        }
    }
}
