//! Signatures: the symbols of a function's shapes (const generics and
//! run-time dims), where each run-time dim is bound at entry, what is
//! checked there, and the types callers see.

use crate::ast::{DimAst, DimExpr, ParamTy, ScalarKind, Sp, TensorFn, TensorTyAst, TypeParam};
use crate::graph::{DimTy, TensorTy};
use crate::shape::Dim;
use std::collections::BTreeMap;

/// Where a run-time dim gets its value when the function is entered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `params[param].shape()[dim]`.
    TensorDim {
        /// Parameter index.
        param: usize,
        /// Dim index.
        dim: usize,
    },
    /// A `usize` parameter.
    Scalar {
        /// Parameter index.
        param: usize,
    },
}

/// What a symbol in a shape stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SymKind {
    /// A `const N: usize` generic: known at compile time, `Const<N>`.
    Generic,
    /// A size known at run time, bound from `Source` (`None` while unbound).
    Runtime(Option<Source>),
    /// A `const` item in scope (`SEQ_LEN`, `{M}`, `dims::M`): known at
    /// compile time, `Const<{ M }>`, opaque to the checker.
    ConstItem,
}

/// True for a name taken as a `const` item when nothing else declares it:
/// a path (`dims::M`), or SCREAMING_CASE with two letters or more
/// (`SEQ_LEN`, `HIDDEN`, `D_MODEL`). Single letters (`B`, `T`, `N`, `D1`)
/// stay run-time dims, as papers write them; `{M}` marks one as an item.
///
/// ```
/// use tensorfn_macros_impl::sig::is_const_item_name;
/// assert!(is_const_item_name("SEQ_LEN"));
/// assert!(is_const_item_name("dims::M"));
/// assert!(!is_const_item_name("B"));
/// assert!(!is_const_item_name("D1"));
/// assert!(!is_const_item_name("Dh"));
/// ```
pub fn is_const_item_name(name: &str) -> bool {
    name.contains("::")
        || (name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            && name.chars().filter(|c| c.is_ascii_uppercase()).count() >= 2)
}

/// The symbols of one function.
#[derive(Clone, Debug, Default)]
pub struct Symbols {
    /// Symbol name to kind, in name order.
    pub map: BTreeMap<String, SymKind>,
}

impl Symbols {
    /// True for a const generic.
    pub fn is_generic(&self, name: &str) -> bool {
        self.map.get(name) == Some(&SymKind::Generic)
    }

    /// What a name stands for: its declared kind, else a `const` item if
    /// its name says so ([`is_const_item_name`]), else nothing.
    pub fn kind(&self, name: &str) -> Option<SymKind> {
        match self.map.get(name) {
            Some(k) => Some(k.clone()),
            None if is_const_item_name(name) => Some(SymKind::ConstItem),
            None => None,
        }
    }

    /// True for a name known at compile time: a const generic or a
    /// `const` item.
    pub fn is_static(&self, name: &str) -> bool {
        matches!(self.kind(name), Some(SymKind::Generic | SymKind::ConstItem))
    }

    /// True for a `const` item.
    pub fn is_const_item(&self, name: &str) -> bool {
        self.kind(name) == Some(SymKind::ConstItem)
    }

    /// The Rust shape type of a dim: `Const<..>` for a literal, a lone
    /// const generic or a lone `const` item, `Dyn` otherwise.
    pub fn dim_ty(&self, d: &Dim) -> DimTy {
        if d.as_constant().is_some() {
            return DimTy::Const(d.clone());
        }
        match d.as_symbol() {
            Some(s) if self.is_static(s) => DimTy::Const(d.clone()),
            _ => DimTy::Dyn,
        }
    }

    /// The Rust shape type of every dim.
    pub fn dim_tys(&self, dims: &[Dim]) -> Vec<DimTy> {
        dims.iter().map(|d| self.dim_ty(d)).collect()
    }

    /// The variable holding a run-time symbol's value in generated code.
    /// A character an identifier cannot hold is written as its code, so
    /// that floor quotients differing in a sign (`⌊(H - 1)/2⌋`,
    /// `⌊(H + 1)/2⌋`) get different variables.
    ///
    /// ```
    /// use tensorfn_macros_impl::sig::Symbols;
    /// assert_eq!(Symbols::var_name("B"), "__tf_dim_B");
    /// assert_ne!(Symbols::var_name("⌊(H - 1)/2⌋"), Symbols::var_name("⌊(H + 1)/2⌋"));
    /// ```
    pub fn var_name(name: &str) -> String {
        let clean: String = name
            .chars()
            .map(|c| match c.is_ascii_alphanumeric() || c == '_' {
                true => c.to_string(),
                false => format!("_{:x}_", c as u32),
            })
            .collect();
        format!("__tf_dim_{clean}")
    }
}

/// A parameter as callers see it.
#[derive(Clone, Debug)]
pub enum ParamSig {
    /// A tensor.
    Tensor(TensorTy),
    /// A scalar.
    Scalar(ScalarKind),
    /// A parameter struct: its fields the body uses are parameters of
    /// their own ([`ParamTy::Field`](crate::ast::ParamTy::Field)).
    Struct(StructSig),
}

/// A parameter struct's type as the function writes it.
#[derive(Clone, Debug)]
pub struct StructSig {
    /// The struct's name (`LayerNorm` of `nn::LayerNorm<D, T>`).
    pub name: String,
    /// Its generic arguments as written (`D`, `T`).
    pub args: Vec<proc_macro2::TokenStream>,
    /// The type as written, as text.
    pub ty_text: String,
}

/// Where a used field of a parameter struct comes from: the struct
/// parameter and the path after it (`.ln_1.weight`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPath {
    /// The index of the struct parameter.
    pub root: usize,
    /// The path after the parameter's name.
    pub suffix: String,
}

/// A dim of a parameter checked when the function is entered, because its
/// type (`Dyn`) does not fix it.
#[derive(Clone, Debug)]
pub struct EntryCheck {
    /// Parameter index.
    pub param: usize,
    /// Dim index.
    pub dim: usize,
    /// The value it must have.
    pub expected: Dim,
}

/// Everything about a function but its body.
#[derive(Clone, Debug)]
pub struct Signature {
    /// The name.
    pub name: String,
    /// Type parameters (devices and dtypes) in order.
    pub type_params: Vec<TypeParam>,
    /// Const generics in order.
    pub generics: Vec<String>,
    /// Parameter names.
    pub param_names: Vec<String>,
    /// Parameter types.
    pub params: Vec<ParamSig>,
    /// Result tensors.
    pub ret: Vec<TensorTy>,
    /// True if the result is a tuple.
    pub tuple: bool,
    /// The symbols of the shapes.
    pub symbols: Symbols,
    /// Dims checked at entry.
    pub entry_checks: Vec<EntryCheck>,
    /// For each parameter, the struct and path of a used field (`None`
    /// for the written parameters, which come first).
    pub field_paths: Vec<Option<FieldPath>>,
}

impl Signature {
    /// The number of written parameters (the used fields of parameter
    /// structs follow them).
    pub fn written(&self) -> usize {
        self.field_paths.iter().filter(|f| f.is_none()).count()
    }
}

/// Converts a dim as written, with the symbols known so far. `define`
/// admits new names as run-time dims (parameter shapes); elsewhere an
/// unknown name is an error.
pub fn dim_of(
    ast: &DimAst,
    symbols: &mut Symbols,
    define: Option<(&str, usize)>,
) -> syn::Result<Dim> {
    fn go(
        e: &DimExpr,
        sp: &Sp,
        symbols: &mut Symbols,
        define: Option<(&str, usize)>,
    ) -> syn::Result<Dim> {
        match e {
            DimExpr::Lit(n) => Ok(Dim::constant(*n as i64)),
            DimExpr::Item(s) => match symbols.map.get(s) {
                Some(SymKind::ConstItem) => Ok(Dim::sym(s)),
                Some(SymKind::Generic) => Err(sp.error(format!(
                    "`{s}` is a const generic of this function, not a `const` item: write `{s}` (braces mark an item from outside the function)"
                ))),
                Some(SymKind::Runtime(_)) => Err(sp.error(format!(
                    "`{s}` is a `usize` parameter of this function, not a `const` item: write `{s}` (braces mark an item from outside the function)"
                ))),
                None => {
                    symbols.map.insert(s.clone(), SymKind::ConstItem);
                    Ok(Dim::sym(s))
                }
            },
            DimExpr::Sym(s) => {
                if !symbols.map.contains_key(s) {
                    if is_const_item_name(s) {
                        symbols.map.insert(s.clone(), SymKind::ConstItem);
                    } else if define.is_none() {
                        return Err(sp.error(format!(
                            "unknown dim `{s}`: declare it as a const generic (`<const {s}: usize>`), name it in a parameter's shape, or write `{{{s}}}` for a `const` item in scope"
                        )));
                    } else {
                        symbols.map.insert(s.clone(), SymKind::Runtime(None));
                    }
                }
                Ok(Dim::sym(s))
            }
            DimExpr::Anon => match define {
                Some((param, dim)) => {
                    let name = format!("{param}.shape()[{dim}]");
                    symbols.map.insert(
                        name.clone(),
                        SymKind::Runtime(None),
                    );
                    Ok(Dim::sym(&name))
                }
                None => Err(sp.error(
                    "`_` is only allowed in parameter shapes: name the dim or use `-1` in a reshape",
                )),
            },
            DimExpr::Infer => Err(sp.error("`-1` is only allowed in `reshape`/`view` targets")),
            DimExpr::Add(a, b) => Ok(go(a, sp, symbols, define)?.add(&go(b, sp, symbols, define)?)),
            DimExpr::Mul(a, b) => Ok(go(a, sp, symbols, define)?.mul(&go(b, sp, symbols, define)?)),
        }
    }
    go(&ast.expr, &ast.sp, symbols, define)
}

fn tensor_ty(
    t: &TensorTyAst,
    symbols: &mut Symbols,
    param: Option<&str>,
    errors: &mut Vec<syn::Error>,
) -> Option<TensorTy> {
    let mut dims = Vec::new();
    let mut ok = true;
    for (i, d) in t.dims.iter().enumerate() {
        match dim_of(d, symbols, param.map(|p| (p, i))) {
            Ok(d) => dims.push(d),
            Err(e) => {
                errors.push(e);
                ok = false;
            }
        }
    }
    ok.then_some(TensorTy {
        device: t.device.0,
        dtype: t.dtype.0,
        dims,
    })
}

/// A declared tensor type outside parameters (a `let` annotation): every
/// name must be known.
pub fn declared_ty(t: &TensorTyAst, symbols: &Symbols) -> syn::Result<TensorTy> {
    let mut symbols = symbols.clone();
    let mut errors = Vec::new();
    match tensor_ty(t, &mut symbols, None, &mut errors) {
        Some(ty) => Ok(ty),
        None => Err(crate::combine(errors).expect("an error was recorded")),
    }
}

/// Builds a function's signature: symbols, bindings of run-time dims,
/// entry checks, parameter and result types.
pub fn signature(f: &TensorFn) -> Result<Signature, Vec<syn::Error>> {
    let mut errors = Vec::new();
    let mut symbols = Symbols::default();
    for g in &f.generics {
        symbols.map.insert(g.to_string(), SymKind::Generic);
    }
    // A name marked as a `const` item anywhere (`{M}`) is one everywhere.
    for t in f.shapes() {
        for d in &t.dims {
            for s in d.expr.marked_items() {
                symbols.map.entry(s).or_insert(SymKind::ConstItem);
            }
        }
    }
    // A `usize` parameter can size dims; it binds its own name.
    for (i, p) in f.params.iter().enumerate() {
        if let ParamTy::Scalar(s) = &p.ty {
            if s.kind == ScalarKind::Usize {
                let name = p.name.to_string();
                if symbols.is_generic(&name) {
                    errors.push(syn::Error::new(
                        p.name.span(),
                        format!("`{name}` is both a const generic and a parameter"),
                    ));
                }
                symbols
                    .map
                    .insert(name, SymKind::Runtime(Some(Source::Scalar { param: i })));
            }
        }
    }
    let mut params = Vec::new();
    let mut param_names = Vec::new();
    for (pi, p) in f.params.iter().enumerate() {
        let pname = match &p.ty {
            ParamTy::Field(field) => field.text.clone(),
            _ => p.name.to_string(),
        };
        param_names.push(pname.clone());
        match &p.ty {
            ParamTy::Scalar(s) => params.push(ParamSig::Scalar(s.kind)),
            ParamTy::Struct(st) => params.push(ParamSig::Struct(struct_sig(&st.ty))),
            ParamTy::Tensor(t) | ParamTy::Field(crate::ast::FieldParamAst { tensor: t, .. }) => {
                let Some(ty) = tensor_ty(t, &mut symbols, Some(&pname), &mut errors) else {
                    continue;
                };
                for (di, d) in ty.dims.iter().enumerate() {
                    if let Some(s) = d.as_symbol() {
                        if let Some(SymKind::Runtime(src @ None)) = symbols.map.get_mut(s) {
                            *src = Some(Source::TensorDim { param: pi, dim: di });
                        }
                    }
                }
                params.push(ParamSig::Tensor(ty));
            }
        }
    }
    // A run-time dim only inside sums and products cannot be solved for.
    let mut reported = std::collections::BTreeSet::new();
    for p in &f.params {
        if let Some(t) = p.ty.tensor() {
            for d in &t.dims {
                for s in d.expr.names() {
                    if symbols.map.get(&s) == Some(&SymKind::Runtime(None))
                        && reported.insert(s.clone())
                    {
                        errors.push(d.sp.error(format!(
                            "run-time dim `{s}` appears only inside `{}`: name it alone in some parameter's shape (e.g. `[{s}, ..]`) or make it a const generic `<const {s}: usize>`",
                            d.expr
                        )));
                    }
                }
            }
        }
    }
    let mut ret = Vec::new();
    for t in &f.ret.tensors {
        if let Some(ty) = tensor_ty(t, &mut symbols.clone(), None, &mut errors) {
            ret.push(ty);
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut entry_checks = Vec::new();
    for (pi, p) in params.iter().enumerate() {
        let ParamSig::Tensor(t) = p else { continue };
        for (di, d) in t.dims.iter().enumerate() {
            if symbols.dim_ty(d) != DimTy::Dyn {
                continue;
            }
            let binds_here = d.as_symbol().is_some_and(|s| {
                symbols.map.get(s)
                    == Some(&SymKind::Runtime(Some(Source::TensorDim {
                        param: pi,
                        dim: di,
                    })))
            });
            if !binds_here {
                entry_checks.push(EntryCheck {
                    param: pi,
                    dim: di,
                    expected: d.clone(),
                });
            }
        }
    }
    let field_paths = f
        .params
        .iter()
        .map(|p| match &p.ty {
            ParamTy::Field(field) => {
                let end = field.text.find(['.', '[']).unwrap_or(field.text.len());
                let (root, suffix) = field.text.split_at(end);
                let root = f.params.iter().position(|q| q.name == root)?;
                Some(FieldPath {
                    root,
                    suffix: suffix.to_string(),
                })
            }
            _ => None,
        })
        .collect();
    Ok(Signature {
        field_paths,
        name: f.name.to_string(),
        type_params: f.type_params.clone(),
        generics: f.generics.iter().map(|g| g.to_string()).collect(),
        param_names,
        params,
        ret,
        tuple: f.ret.tuple,
        symbols,
        entry_checks,
    })
}

/// A struct parameter's type as callers see it: its name and arguments.
///
/// ```
/// let s = tensorfn_macros_impl::sig::struct_sig(&syn::parse_quote!(nn::LayerNorm<D, f32>));
/// assert_eq!(s.name, "LayerNorm");
/// assert_eq!(s.args.len(), 2);
/// assert_eq!(s.ty_text, "nn::LayerNorm<D, f32>");
/// ```
pub fn struct_sig(ty: &syn::Type) -> StructSig {
    let ty_text = crate::ast::type_text(ty).replace(" ,", ",");
    let (name, args) = match ty {
        syn::Type::Path(p) => match p.path.segments.last() {
            Some(seg) => (
                seg.ident.to_string(),
                match &seg.arguments {
                    syn::PathArguments::AngleBracketed(a) => a
                        .args
                        .iter()
                        .map(quote::ToTokens::to_token_stream)
                        .collect(),
                    _ => Vec::new(),
                },
            ),
            None => (ty_text.clone(), Vec::new()),
        },
        _ => (ty_text.clone(), Vec::new()),
    };
    StructSig {
        name,
        args,
        ty_text,
    }
}
