//! The typed input of `tensor_fn!`: functions, their signatures and bodies,
//! and `#[kernel]` scalar functions, each piece with the span it came from.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use std::fmt;
use tensorfn_core::DTypeKind;

/// The first and last token of a piece of input, so an error can underline
/// all of it (a joined span is not available to proc macros on stable).
#[derive(Clone)]
pub struct Sp {
    first: TokenTree,
    last: TokenTree,
}

impl Sp {
    /// The span of some tokens (a call site span if there are none).
    pub fn of(tokens: &impl ToTokens) -> Sp {
        let mut it = tokens.to_token_stream().into_iter();
        let first = it
            .next()
            .unwrap_or_else(|| TokenTree::Ident(proc_macro2::Ident::new("x", Span::call_site())));
        let last = it.last().unwrap_or_else(|| first.clone());
        Sp { first, last }
    }

    /// The span of one token.
    pub fn single(span: Span) -> Sp {
        let t = TokenTree::Ident(proc_macro2::Ident::new("x", span));
        Sp {
            first: t.clone(),
            last: t,
        }
    }

    /// From the start of `a` to the end of `b`.
    pub fn join(a: &Sp, b: &Sp) -> Sp {
        Sp {
            first: a.first.clone(),
            last: b.last.clone(),
        }
    }

    /// The span of the first token (for generated code that should point
    /// at the user's input).
    pub fn span(&self) -> Span {
        self.first.span()
    }

    /// An error underlining this input.
    pub fn error(&self, message: impl fmt::Display) -> syn::Error {
        let mut ts = TokenStream::new();
        ts.extend([self.first.clone(), self.last.clone()]);
        syn::Error::new_spanned(ts, message)
    }
}

impl fmt::Debug for Sp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sp")
    }
}

/// Everything inside one `tensor_fn! { .. }`.
#[derive(Debug)]
pub struct Input {
    /// Tensor functions and kernels, in source order.
    pub items: Vec<Item>,
}

impl Input {
    /// The tensor functions, in source order.
    ///
    /// ```
    /// let input = tensorfn_macros_impl::parse::parse_input(quote::quote! {
    ///     fn f(x: &Tensor<Cpu, f32, [2]>) -> Tensor<Cpu, f32, [2]> { x }
    ///     #[kernel]
    ///     fn k(x: f32) -> f32 { x }
    /// })?;
    /// assert_eq!(input.fns()[0].name, "f");
    /// assert_eq!(input.kernels()[0].name, "k");
    /// # Ok::<(), syn::Error>(())
    /// ```
    pub fn fns(&self) -> Vec<&TensorFn> {
        self.items
            .iter()
            .filter_map(|i| match i {
                Item::Fn(f) => Some(f),
                Item::Kernel(_) => None,
            })
            .collect()
    }

    /// The `#[kernel]`s, in source order.
    pub fn kernels(&self) -> Vec<&KernelFn> {
        self.items
            .iter()
            .filter_map(|i| match i {
                Item::Kernel(k) => Some(k),
                Item::Fn(_) => None,
            })
            .collect()
    }
}

/// One item of the macro input.
#[derive(Debug)]
// A handful per invocation, moved once: the size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Item {
    /// A function on tensors.
    Fn(TensorFn),
    /// A `#[kernel]` scalar function.
    Kernel(KernelFn),
}

/// `fn name<D: Device, T: Float, const B: usize>(params) -> Ret { body }`.
#[derive(Debug, Clone)]
pub struct TensorFn {
    /// Doc comments and other attributes, passed through.
    pub attrs: Vec<syn::Attribute>,
    /// `pub`, `pub(crate)`, or nothing.
    pub vis: syn::Visibility,
    /// The function's name.
    pub name: syn::Ident,
    /// Type parameters (`D: Device`, `T: Float`), in order.
    pub type_params: Vec<TypeParam>,
    /// Const generic parameters (all `usize`).
    pub generics: Vec<syn::Ident>,
    /// Parameters in order.
    pub params: Vec<Param>,
    /// The declared result.
    pub ret: ReturnTy,
    /// The body.
    pub body: Body,
    /// The parameter structs the body passes to functions of the
    /// invocation (`layer_norm(x, p.ln_1)`), found by [`crate::structs`].
    pub struct_args: Vec<StructArgAst>,
    /// `#[grad(p, ..)]`: the parameters whose gradient
    /// `name::value_and_grad` returns, in order (see [`crate::grad`]).
    pub grad: Option<Vec<syn::Ident>>,
    /// `#[grad(.., recompute = true)]`: the joint function keeps only the
    /// function's inputs and the values of non-elementwise ops for the
    /// backward, and computes the elementwise values it reads again.
    pub recompute: bool,
    /// For the function `name::vjp` computes (`grad::vjp_ast`): where
    /// the gradient of each result lies among the parameters. `None` for a
    /// function as written.
    pub grad_output: Option<GradOutput>,
}

/// The gradients `name::vjp` takes, one per result: the parameters it
/// appends to the function's own, and how `grad_output` spells them.
#[derive(Debug, Clone)]
pub struct GradOutput {
    /// A tuple result: `grad_output` is a tuple with one entry per
    /// element (`()` for one that has no gradient). Otherwise it is the
    /// one tensor of `slots[0]`.
    pub tuple: bool,
    /// Per result: the index of the parameter holding its gradient, or
    /// `None` for a non-float result (indices), which takes none.
    pub slots: Vec<Option<usize>>,
}

impl GradOutput {
    /// The indices of the parameters holding the gradients, in order.
    pub fn params(&self) -> Vec<usize> {
        self.slots.iter().flatten().copied().collect()
    }
}

impl TensorFn {
    /// The tensor types of the signature: the parameters', then the
    /// results'.
    pub fn shapes(&self) -> impl Iterator<Item = &TensorTyAst> {
        let params = self.params.iter().filter_map(|p| p.ty.tensor());
        params.chain(&self.ret.tensors)
    }
}

/// A parameter: a tensor reference or a scalar.
#[derive(Debug, Clone)]
pub struct Param {
    /// Its name.
    pub name: syn::Ident,
    /// Its type.
    pub ty: ParamTy,
}

/// The type of a parameter.
#[derive(Debug, Clone)]
pub enum ParamTy {
    /// `&Tensor<Device, DType, [dims]>`.
    Tensor(TensorTyAst),
    /// `f32`, `usize`, ...
    Scalar(ScalarTyAst),
    /// `&Mlp<..>`: a parameter struct (`#[derive(Params)]`), whose fields
    /// the body uses (see [`crate::structs`]).
    Struct(StructParamAst),
    /// A tensor field of a parameter struct the body uses (`p.h[3].w`),
    /// added by [`crate::structs`]: checked as a tensor parameter, bound
    /// from the struct when the function is entered, not in the signature.
    Field(FieldParamAst),
}

impl ParamTy {
    /// The tensor type of a tensor parameter or a used field.
    ///
    /// ```
    /// use tensorfn_macros_impl::{ast::Item, parse::parse_input};
    /// let input = parse_input(quote::quote! {
    ///     fn f(x: &Tensor<Cpu, f32, [2]>, p: &Mlp, n: usize) -> Tensor<Cpu, f32, [2]> { x }
    /// })
    /// .unwrap();
    /// let Item::Fn(f) = &input.items[0] else { panic!() };
    /// let tensors: Vec<bool> = f.params.iter().map(|p| p.ty.tensor().is_some()).collect();
    /// assert_eq!(tensors, [true, false, false]);
    /// ```
    pub fn tensor(&self) -> Option<&TensorTyAst> {
        match self {
            ParamTy::Tensor(t) | ParamTy::Field(FieldParamAst { tensor: t, .. }) => Some(t),
            ParamTy::Scalar(_) | ParamTy::Struct(_) => None,
        }
    }
}

/// `&Path<args>` of a parameter struct as written.
#[derive(Debug, Clone)]
pub struct StructParamAst {
    /// The type without the `&`.
    pub ty: syn::Type,
    /// Where it was written.
    pub sp: Sp,
}

/// A tensor field of a parameter struct, as a parameter of the checker.
#[derive(Debug, Clone)]
pub struct FieldParamAst {
    /// The field's tensor type (the struct's generics substituted).
    pub tensor: TensorTyAst,
    /// The path as the body writes it (`p.h[3].w`).
    pub text: String,
    /// The statement binding the parameter's name to `&p.h[3].w` at entry
    /// (with the `Vec` indices checked).
    pub binding: TokenStream,
}

/// A parameter struct the body passes to a function of the invocation
/// (`p.ln_1` in `layer_norm(x, p.ln_1)`), as [`crate::structs`] found it.
#[derive(Debug, Clone)]
pub struct StructArgAst {
    /// The path as the body writes it (`p.h[3]`).
    pub text: String,
    /// The struct's name (`LayerNorm`).
    pub name: String,
    /// The struct's path as the function's module sees it (`nn::LayerNorm`).
    pub path: String,
    /// Its generic arguments in the caller's terms (`D`, `T`, `768`).
    pub args: Vec<TokenStream>,
    /// The code of a reference to it (`p`, `&p.ln_1`, the `Vec` element
    /// checked).
    pub access: TokenStream,
}

impl StructArgAst {
    /// The struct's type as text: `LayerNorm<D, T>`.
    ///
    /// ```
    /// use tensorfn_macros_impl::ast::StructArgAst;
    /// let a = StructArgAst {
    ///     text: "p.ln_1".into(),
    ///     name: "LayerNorm".into(),
    ///     path: "LayerNorm".into(),
    ///     args: vec![quote::quote!(D), quote::quote!(f32)],
    ///     access: quote::quote!(&p.ln_1),
    /// };
    /// assert_eq!(a.ty_text(), "LayerNorm<D, f32>");
    /// ```
    pub fn ty_text(&self) -> String {
        if self.args.is_empty() {
            return self.name.clone();
        }
        let args: Vec<String> = self.args.iter().map(generic_text).collect();
        format!("{}<{}>", self.name, args.join(", "))
    }
}

/// A generic argument's tokens as text (`Cuda<1>`, `768`, `T`).
pub fn generic_text(t: &TokenStream) -> String {
    match syn::parse2::<syn::Type>(t.clone()) {
        Ok(ty) => type_text(&ty).replace(" ,", ","),
        Err(_) => t.to_string(),
    }
}

/// A scalar parameter type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarKind {
    /// One of the tensor dtypes.
    DType(DTypeKind),
    /// `usize`: an index, a length or a run-time dim.
    Usize,
}

impl fmt::Display for ScalarKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScalarKind::DType(d) => write!(f, "{d}"),
            ScalarKind::Usize => f.write_str("usize"),
        }
    }
}

/// A scalar type as written.
#[derive(Debug, Clone)]
pub struct ScalarTyAst {
    /// Which scalar.
    pub kind: ScalarKind,
    /// Where it was written.
    pub sp: Sp,
}

/// A device as written: `Cpu`, `Cuda`, `Cuda<1>`, or a type parameter
/// `D: Device`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// Host memory.
    Cpu,
    /// A GPU by ordinal.
    Cuda(usize),
    /// A type parameter bounded by `Device`: any device, the same one
    /// wherever it is named.
    Param(Name),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("Cpu"),
            Device::Cuda(0) => f.write_str("Cuda"),
            Device::Cuda(n) => write!(f, "Cuda<{n}>"),
            Device::Param(n) => write!(f, "{n}"),
        }
    }
}

/// The name of a type parameter, interned so that the types holding it
/// stay `Copy` (a macro expansion meets a handful of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(u32);

thread_local! {
    static NAMES: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Name {
    /// The name for `s` (the same `Name` for the same text).
    ///
    /// ```
    /// use tensorfn_macros_impl::ast::Name;
    /// assert_eq!(Name::new("T"), Name::new("T"));
    /// assert_eq!(Name::new("D").to_string(), "D");
    /// ```
    pub fn new(s: &str) -> Name {
        NAMES.with(|names| {
            let mut names = names.borrow_mut();
            match names.iter().position(|n| n == s) {
                Some(i) => Name(i as u32),
                None => {
                    names.push(s.to_string());
                    Name(names.len() as u32 - 1)
                }
            }
        })
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        NAMES.with(|names| f.write_str(&names.borrow()[self.0 as usize]))
    }
}

/// Which dtypes a dtype parameter admits, from its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bound {
    /// `T: Float` (or `FloatDType`): f32, f64, f16, bf16.
    Float,
    /// `T: NumDType`: the floats and the integers (not bool).
    Num,
    /// `T: DType`: every dtype.
    Any,
}

impl Bound {
    /// The trait as users write it.
    pub fn trait_name(self) -> &'static str {
        match self {
            Bound::Float => "Float",
            Bound::Num => "NumDType",
            Bound::Any => "DType",
        }
    }

    /// The dtypes the bound admits, in the order the generated function
    /// dispatches on them.
    ///
    /// ```
    /// use tensorfn_macros_impl::ast::Bound;
    /// use tensorfn_core::DTypeKind;
    /// assert_eq!(Bound::Float.dtypes(), &[DTypeKind::F32, DTypeKind::F64, DTypeKind::F16, DTypeKind::BF16]);
    /// assert_eq!(Bound::Any.dtypes().len(), 8);
    /// ```
    pub fn dtypes(self) -> &'static [DTypeKind] {
        use DTypeKind::*;
        match self {
            Bound::Float => &[F32, F64, F16, BF16],
            Bound::Num => &[F32, F64, F16, BF16, I32, I64, U8],
            Bound::Any => &[F32, F64, F16, BF16, I32, I64, U8, Bool],
        }
    }
}

/// A dtype as the checker sees it: a concrete one, or a type parameter
/// that stands for any dtype of its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dt {
    /// `f32`, `i64`, ...
    Kind(DTypeKind),
    /// `T` with its bound.
    Param(Name, Bound),
}

impl Dt {
    /// True if every dtype it may be is a float.
    pub fn is_float(self) -> bool {
        match self {
            Dt::Kind(k) => k.is_float(),
            Dt::Param(_, b) => b == Bound::Float,
        }
    }

    /// True for `bool` itself.
    pub fn is_bool(self) -> bool {
        self == Dt::Kind(DTypeKind::Bool)
    }

    /// True if it may be `bool` (a `DType`-bounded parameter may).
    pub fn may_be_bool(self) -> bool {
        matches!(self, Dt::Kind(DTypeKind::Bool) | Dt::Param(_, Bound::Any))
    }

    /// The concrete dtype. Plans and kernels are built for instances of a
    /// function, where every parameter has been replaced.
    pub fn kind(self) -> DTypeKind {
        match self {
            Dt::Kind(k) => k,
            Dt::Param(n, _) => unreachable!("dtype parameter `{n}` in an instantiated function"),
        }
    }
}

impl From<DTypeKind> for Dt {
    fn from(k: DTypeKind) -> Dt {
        Dt::Kind(k)
    }
}

impl fmt::Display for Dt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dt::Kind(k) => write!(f, "{k}"),
            Dt::Param(n, _) => write!(f, "{n}"),
        }
    }
}

/// A type parameter of a tensor function.
#[derive(Debug, Clone)]
pub struct TypeParam {
    /// Its name.
    pub name: Name,
    /// What it stands for.
    pub kind: TypeParamKind,
    /// Where it was declared.
    pub sp: Sp,
}

/// What a type parameter stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeParamKind {
    /// `D: Device`.
    Device,
    /// `T: Float`, `T: NumDType`, `T: DType`.
    DType(Bound),
}

/// `Tensor<Device, DType, [dims]>` as written.
#[derive(Debug, Clone)]
pub struct TensorTyAst {
    /// The device and where it was written.
    pub device: (Device, Sp),
    /// The dtype and where it was written.
    pub dtype: (Dt, Sp),
    /// The dims.
    pub dims: Vec<DimAst>,
    /// The whole type.
    pub sp: Sp,
}

/// The declared result: one tensor or a tuple of them.
#[derive(Debug, Clone)]
pub struct ReturnTy {
    /// The tensors, in order.
    pub tensors: Vec<TensorTyAst>,
    /// True for `(A, B)` (also `(A,)`).
    pub tuple: bool,
    /// The whole return type.
    pub sp: Sp,
}

/// A dim expression as written in a shape.
#[derive(Debug, Clone)]
pub struct DimAst {
    /// The expression.
    pub expr: DimExpr,
    /// Where it was written.
    pub sp: Sp,
}

/// The grammar of dims.
#[derive(Debug, Clone)]
pub enum DimExpr {
    /// `784`.
    Lit(u64),
    /// `B`: a const generic, a run-time dim, a `usize` parameter, or (for
    /// SCREAMING_CASE names such as `SEQ_LEN`) a `const` item in scope.
    Sym(String),
    /// `{M}` or `dims::M`: a `const` item in scope, marked as one.
    Item(String),
    /// `-1` in a reshape: inferred from the element count.
    Infer,
    /// `_` in a parameter shape: a run-time dim nothing else names.
    Anon,
    /// `a + b`.
    Add(Box<DimExpr>, Box<DimExpr>),
    /// `a * b`.
    Mul(Box<DimExpr>, Box<DimExpr>),
}

impl DimExpr {
    /// The leaves of the expression (literals, names, `_`, `-1`), in order.
    fn leaves(&self) -> Vec<&DimExpr> {
        match self {
            DimExpr::Add(a, b) | DimExpr::Mul(a, b) => {
                let mut v = a.leaves();
                v.extend(b.leaves());
                v
            }
            leaf => vec![leaf],
        }
    }

    /// The names in the expression, in order (`B`, `SEQ_LEN`, `dims::M`).
    pub fn names(&self) -> Vec<String> {
        self.leaves()
            .into_iter()
            .filter_map(|l| match l {
                DimExpr::Sym(s) | DimExpr::Item(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    }

    /// The names marked as `const` items (`{M}`, `dims::M`), in order.
    pub fn marked_items(&self) -> Vec<String> {
        self.leaves()
            .into_iter()
            .filter_map(|l| match l {
                DimExpr::Item(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    }
}

impl fmt::Display for DimExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DimExpr::Lit(n) => write!(f, "{n}"),
            DimExpr::Sym(s) | DimExpr::Item(s) => f.write_str(s),
            DimExpr::Infer => f.write_str("-1"),
            DimExpr::Anon => f.write_str("_"),
            DimExpr::Add(a, b) => write!(f, "{a} + {b}"),
            DimExpr::Mul(a, b) => {
                let wrap = |d: &DimExpr| match d {
                    DimExpr::Add(..) => format!("({d})"),
                    _ => d.to_string(),
                };
                write!(f, "{} * {}", wrap(a), wrap(b))
            }
        }
    }
}

/// A function body: `let` statements and a result expression.
#[derive(Debug, Clone)]
pub struct Body {
    /// The `let`s in order.
    pub stmts: Vec<Let>,
    /// The result.
    pub ret: Expr,
}

/// `let pat (: Tensor<..>)? = init;`
#[derive(Debug, Clone)]
pub struct Let {
    /// The names bound.
    pub pat: Pat,
    /// An optional type annotation (needed for calls outside the macro).
    pub ty: Option<TensorTyAst>,
    /// The value.
    pub init: Expr,
}

/// A `let` pattern.
#[derive(Debug, Clone)]
pub enum Pat {
    /// `name` (or `_`).
    Ident(syn::Ident),
    /// `(a, b, ..)`.
    Tuple(Vec<syn::Ident>, Sp),
}

/// An expression of a tensor function body.
#[derive(Debug, Clone)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Where it was written.
    pub sp: Sp,
}

/// Binary arithmetic operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
}

impl BinOp {
    /// The Rust operator.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
        }
    }

    fn precedence(self) -> u8 {
        match self {
            BinOp::Add | BinOp::Sub => 1,
            BinOp::Mul | BinOp::Div => 2,
        }
    }
}

/// A call argument: positional or `name = value`.
#[derive(Debug, Clone)]
pub struct Arg {
    /// `Some(name)` for `name = value`.
    pub name: Option<syn::Ident>,
    /// The value.
    pub value: Expr,
}

/// The kinds of expression.
#[derive(Debug, Clone)]
pub enum ExprKind {
    /// A name: a parameter or a `let` binding.
    Var(syn::Ident),
    /// A path, `dims::M`: a `const` item, only in a dim (a reshape target).
    Item(String),
    /// An integer literal (a negative one through [`ExprKind::Neg`]).
    Int(u64),
    /// A float literal.
    Float(f64),
    /// `true` or `false` (a flag argument: `is_causal = true`).
    Bool(bool),
    /// A string literal (a named choice: `reduction = "sum"`).
    Str(String),
    /// `-e`.
    Neg(Box<Expr>),
    /// `a op b`.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `a < b`, `a == b`, ...: a `bool` tensor.
    Compare(tensorfn_kernels::CmpOp, Box<Expr>, Box<Expr>),
    /// `f(args)` or `path::f(args)`.
    Call {
        /// The callee as written.
        func: syn::Path,
        /// The arguments.
        args: Vec<Arg>,
    },
    /// `recv.method::<T>(args)`.
    Method {
        /// The receiver.
        recv: Box<Expr>,
        /// The method.
        method: syn::Ident,
        /// Turbofish types.
        turbofish: Vec<syn::Type>,
        /// The arguments.
        args: Vec<Arg>,
    },
    /// `p.w`: a field of a parameter struct.
    Field {
        /// The struct (a parameter, a field, an element of an array field).
        base: Box<Expr>,
        /// The field.
        member: syn::Ident,
    },
    /// `x[i]`, `x[i, j]`.
    Index {
        /// The indexed tensor.
        base: Box<Expr>,
        /// One index per leading dim.
        indices: Vec<Expr>,
    },
    /// `[a, b, ..]` (the tensors of `cat`, the dims of `reshape`).
    Array(Vec<Expr>),
    /// `(a, b)`: several results.
    Tuple(Vec<Expr>),
}

impl Expr {
    fn precedence(&self) -> u8 {
        match &self.kind {
            ExprKind::Binary(op, ..) => op.precedence(),
            ExprKind::Compare(..) => 0,
            ExprKind::Neg(_) => 3,
            _ => 4,
        }
    }

    /// The expression as an identifier, if it is one.
    pub fn as_var(&self) -> Option<&syn::Ident> {
        match &self.kind {
            ExprKind::Var(v) => Some(v),
            _ => None,
        }
    }

    /// The source text with parentheses if it must be wrapped before a
    /// method call (`(a + b).cast::<f32>()`).
    pub fn receiver_text(&self) -> String {
        if self.precedence() < 4 {
            format!("({self})")
        } else {
            self.to_string()
        }
    }
}

fn fmt_args(f: &mut fmt::Formatter<'_>, args: &[Arg]) -> fmt::Result {
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        if let Some(n) = &a.name {
            write!(f, "{n} = ")?;
        }
        write!(f, "{}", a.value)?;
    }
    Ok(())
}

fn fmt_list(f: &mut fmt::Formatter<'_>, xs: &[Expr]) -> fmt::Result {
    for (i, x) in xs.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{x}")?;
    }
    Ok(())
}

/// Prints a path without the spaces `to_token_stream` would add.
pub fn path_text(p: &syn::Path) -> String {
    let mut s = String::new();
    if p.leading_colon.is_some() {
        s.push_str("::");
    }
    for (i, seg) in p.segments.iter().enumerate() {
        if i > 0 {
            s.push_str("::");
        }
        s.push_str(&seg.ident.to_string());
    }
    s
}

/// Prints a type without the spaces `to_token_stream` would add.
pub fn type_text(t: &syn::Type) -> String {
    t.to_token_stream()
        .to_string()
        .replace(" < ", "<")
        .replace(" <", "<")
        .replace("< ", "<")
        .replace(" >", ">")
        .replace(" :: ", "::")
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ExprKind::Var(v) => write!(f, "{v}"),
            ExprKind::Item(p) => f.write_str(p),
            ExprKind::Int(n) => write!(f, "{n}"),
            ExprKind::Bool(b) => write!(f, "{b}"),
            ExprKind::Str(s) => write!(f, "{s:?}"),
            ExprKind::Float(x) => {
                if x.fract() == 0.0 && x.abs() < 1e15 {
                    write!(f, "{x:.1}")
                } else {
                    write!(f, "{x}")
                }
            }
            ExprKind::Neg(e) => {
                if e.precedence() < 3 {
                    write!(f, "-({e})")
                } else {
                    write!(f, "-{e}")
                }
            }
            ExprKind::Binary(op, a, b) => {
                let p = op.precedence();
                if a.precedence() < p {
                    write!(f, "({a})")?;
                } else {
                    write!(f, "{a}")?;
                }
                write!(f, " {} ", op.symbol())?;
                // Left-associative: a right operand of equal precedence needs parens.
                if b.precedence() <= p {
                    write!(f, "({b})")
                } else {
                    write!(f, "{b}")
                }
            }
            ExprKind::Compare(op, a, b) => write!(f, "{a} {} {b}", op.symbol()),
            ExprKind::Call { func, args } => {
                write!(f, "{}(", path_text(func))?;
                fmt_args(f, args)?;
                f.write_str(")")
            }
            ExprKind::Method {
                recv,
                method,
                turbofish,
                args,
            } => {
                write!(f, "{}.{method}", recv.receiver_text())?;
                if !turbofish.is_empty() {
                    let ts: Vec<String> = turbofish.iter().map(type_text).collect();
                    write!(f, "::<{}>", ts.join(", "))?;
                }
                f.write_str("(")?;
                fmt_args(f, args)?;
                f.write_str(")")
            }
            ExprKind::Field { base, member } => write!(f, "{}.{member}", base.receiver_text()),
            ExprKind::Index { base, indices } => {
                write!(f, "{}[", base.receiver_text())?;
                fmt_list(f, indices)?;
                f.write_str("]")
            }
            ExprKind::Array(xs) => {
                f.write_str("[")?;
                fmt_list(f, xs)?;
                f.write_str("]")
            }
            ExprKind::Tuple(xs) => {
                f.write_str("(")?;
                fmt_list(f, xs)?;
                if xs.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(")")
            }
        }
    }
}

/// `#[kernel] fn name(x: f32, ..) -> f32 { scalar body }`, or a row
/// kernel `#[kernel] fn name(x: Row<f32>, eps: f32) -> Row<f32> { .. }`.
#[derive(Debug)]
pub struct KernelFn {
    /// Attributes other than `#[kernel]`, passed through.
    pub attrs: Vec<syn::Attribute>,
    /// Visibility of the emitted scalar function.
    pub vis: syn::Visibility,
    /// The name.
    pub name: syn::Ident,
    /// Parameters: elements (`x: f32`), or rows (`x: Row<f32>`) where
    /// [`rows`](Self::rows) says so.
    pub params: Vec<(syn::Ident, DTypeKind, Sp)>,
    /// Per parameter, whether it is a `Row<T>` (a row kernel's row).
    pub rows: Vec<bool>,
    /// The result dtype.
    pub ret: (DTypeKind, Sp),
    /// Whether the result is a `Row<T>`.
    pub ret_row: bool,
    /// The scalar body (checked and lowered by `kernel`).
    pub body: syn::Block,
}

impl KernelFn {
    /// Whether this is a row kernel: a parameter or the result is a
    /// `Row<T>`.
    pub fn is_row(&self) -> bool {
        self.ret_row || self.rows.iter().any(|&r| r)
    }
}
