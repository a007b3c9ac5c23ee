//! Rust code of an element program: the [`Kernel`] the plan built for a
//! fused group or a `#[kernel]`, printed as a closure (the CPU path of a
//! fused group) or as the body of a plain scalar function (a `#[kernel]`).
//! The PTX of the CUDA path comes from the same `Kernel`, so the paths
//! compute one program.
//!
//! f16 and bf16 values are computed in f32 and rounded when stored (or when
//! an explicit cast asks for it), and after every unary and binary op, as
//! the PTX and PyTorch do. The macro inserts no cast of its own: a value
//! keeps its dtype through the program, and only the casts the code wrote
//! (`.cast::<T>()`, `as T`) convert.
//!
//! ```
//! use tensorfn_kernels::ir::ElementwiseBuilder;
//! use tensorfn_kernels::{DTypeKind::F16, UnaryOp};
//! use tensorfn_macros_impl::expand::rust_code;
//!
//! let mut b = ElementwiseBuilder::new();
//! let x = b.input(F16);
//! let y = b.unary(UnaryOp::Sin, x);
//! let kernel = b.output(y)?;
//! let text = rust_code::closure(&kernel).to_string().replace(' ', "");
//! // loaded into f32, the op rounded to f16, stored as f16
//! assert!(text.contains("(a0).to_f32()"));
//! assert!(text.contains("::tensorfn::f16::from_f32(::tensorfn::__private::float_unary::<f32>"));
//! assert!(text.contains("->::tensorfn::f16"));
//! # Ok::<(), tensorfn_kernels::Error>(())
//! ```

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use tensorfn_core::DTypeKind;
use tensorfn_kernels::ir::{Inst, Kernel, Scalar, Value};
use tensorfn_kernels::{BinaryOp, CmpOp, UnaryOp};

fn cmp_symbol(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Lt => "<",
        CmpOp::Le => "<=",
        CmpOp::Gt => ">",
        CmpOp::Ge => ">=",
        CmpOp::Eq => "==",
        CmpOp::Ne => "!=",
    }
}

/// The value a constant of dtype `d` holds (rounded to f16/bf16/f32).
fn round_constant(v: f64, d: DTypeKind) -> f64 {
    match d {
        DTypeKind::F16 => half::f16::from_f64(v).to_f64(),
        DTypeKind::BF16 => half::bf16::from_f64(v).to_f64(),
        DTypeKind::F32 => v as f32 as f64,
        _ => v,
    }
}

/// The Rust type an element of `d` is stored as, under `::tensorfn`.
///
/// ```
/// use tensorfn_kernels::DTypeKind;
/// use tensorfn_macros_impl::expand::rust_code::storage_type;
/// assert_eq!(storage_type(DTypeKind::BF16).to_string(), ":: tensorfn :: bf16");
/// assert_eq!(storage_type(DTypeKind::U8).to_string(), "u8");
/// ```
pub fn storage_type(d: DTypeKind) -> TokenStream {
    match d {
        DTypeKind::F32 => quote!(f32),
        DTypeKind::F64 => quote!(f64),
        DTypeKind::F16 => quote!(::tensorfn::f16),
        DTypeKind::BF16 => quote!(::tensorfn::bf16),
        DTypeKind::I32 => quote!(i32),
        DTypeKind::I64 => quote!(i64),
        DTypeKind::U8 => quote!(u8),
        DTypeKind::Bool => quote!(bool),
    }
}

/// The Rust type an element of `d` is computed in (f16/bf16 in f32).
///
/// ```
/// use tensorfn_kernels::DTypeKind;
/// use tensorfn_macros_impl::expand::rust_code::compute_type;
/// assert_eq!(compute_type(DTypeKind::F16).to_string(), "f32");
/// assert_eq!(compute_type(DTypeKind::I64).to_string(), "i64");
/// ```
pub fn compute_type(d: DTypeKind) -> TokenStream {
    match d {
        DTypeKind::F16 | DTypeKind::BF16 => quote!(f32),
        other => storage_type(other),
    }
}

/// A literal of dtype `d` in its compute type (floats rounded to `d`,
/// integers truncated toward zero).
///
/// ```
/// use tensorfn_kernels::DTypeKind;
/// use tensorfn_macros_impl::expand::rust_code::literal;
/// assert_eq!(literal(0.1, DTypeKind::F16).to_string(), "0.099975586f32");
/// assert_eq!(literal(-3.0, DTypeKind::I32).to_string(), "(- 3i32)");
/// assert_eq!(literal(f64::NEG_INFINITY, DTypeKind::F64).to_string(), "f64 :: NEG_INFINITY");
/// ```
pub fn literal(v: f64, d: DTypeKind) -> TokenStream {
    match d {
        DTypeKind::F64 => float_lit(v, quote!(f64), Literal::f64_suffixed),
        DTypeKind::F32 | DTypeKind::F16 | DTypeKind::BF16 => {
            float_lit(round_constant(v, d), quote!(f32), |x| {
                Literal::f32_suffixed(x as f32)
            })
        }
        DTypeKind::I32 => int_lit(Literal::i32_suffixed(v.abs() as i32), v < 0.0),
        DTypeKind::I64 => int_lit(Literal::i64_suffixed(v.abs() as i64), v < 0.0),
        DTypeKind::U8 => int_lit(Literal::u8_suffixed(v as u8), false),
        DTypeKind::Bool => {
            if v != 0.0 {
                quote!(true)
            } else {
                quote!(false)
            }
        }
    }
}

/// A constant of the kernel: integers exact (every `i64`), the others as
/// [`literal`].
fn scalar_literal(value: Scalar, d: DTypeKind) -> TokenStream {
    match (value, d) {
        (Scalar::Int(i), DTypeKind::I64) if i == i64::MIN => quote!(i64::MIN),
        (Scalar::Int(i), DTypeKind::I64) => int_lit(Literal::i64_suffixed(i.abs()), i < 0),
        (Scalar::Int(i), DTypeKind::I32) => {
            int_lit(Literal::i32_suffixed(i.unsigned_abs() as i32), i < 0)
        }
        (Scalar::Int(i), DTypeKind::U8) => int_lit(Literal::u8_suffixed(i as u8), false),
        (v, d) => literal(v.to_f64(), d),
    }
}

fn int_lit(l: Literal, negative: bool) -> TokenStream {
    if negative {
        quote!((-#l))
    } else {
        quote!(#l)
    }
}

fn float_lit(v: f64, ty: TokenStream, lit: impl Fn(f64) -> Literal) -> TokenStream {
    if v.is_nan() {
        quote!(#ty::NAN)
    } else if v == f64::INFINITY {
        quote!(#ty::INFINITY)
    } else if v == f64::NEG_INFINITY {
        quote!(#ty::NEG_INFINITY)
    } else if v < 0.0 {
        let l = lit(-v);
        quote!((-#l))
    } else {
        let l = lit(v);
        quote!(#l)
    }
}

/// Converts a stored element to its compute type.
///
/// ```
/// use quote::quote;
/// use tensorfn_kernels::DTypeKind;
/// use tensorfn_macros_impl::expand::rust_code::load;
/// assert_eq!(load(quote!(x), DTypeKind::BF16).to_string(), "(x) . to_f32 ()");
/// assert_eq!(load(quote!(x), DTypeKind::F32).to_string(), "x");
/// ```
pub fn load(v: TokenStream, d: DTypeKind) -> TokenStream {
    match d {
        DTypeKind::F16 | DTypeKind::BF16 => quote!((#v).to_f32()),
        _ => v,
    }
}

/// Converts a computed value back to its storage type.
///
/// ```
/// use quote::quote;
/// use tensorfn_kernels::DTypeKind;
/// use tensorfn_macros_impl::expand::rust_code::store;
/// assert_eq!(store(quote!(y), DTypeKind::F16).to_string(), ":: tensorfn :: f16 :: from_f32 (y)");
/// assert_eq!(store(quote!(y), DTypeKind::I32).to_string(), "y");
/// ```
pub fn store(v: TokenStream, d: DTypeKind) -> TokenStream {
    match d {
        DTypeKind::F16 => quote!(::tensorfn::f16::from_f32(#v)),
        DTypeKind::BF16 => quote!(::tensorfn::bf16::from_f32(#v)),
        _ => v,
    }
}

/// The runtime's `Lanes` argument of a closure, or exact lanes where the
/// program is printed outside one.
fn lanes_arg(lanes: Option<&TokenStream>) -> TokenStream {
    match lanes {
        Some(l) => quote!(&mut *#l),
        None => quote!(&mut ::tensorfn::__private::Lanes::exact()),
    }
}

/// `op(a)` in dtype `d`: the runtime's own definition of the op (the one
/// its CPU loops run), called with the op fixed so that it inlines.
fn unary(op: UnaryOp, a: TokenStream, d: DTypeKind, lanes: Option<&TokenStream>) -> TokenStream {
    let variant = format_ident!("{}", format!("{op:?}"));
    let op = quote!(::tensorfn::__private::UnaryOp::#variant);
    if d.is_float() {
        let ct = compute_type(d);
        let lanes = lanes_arg(lanes);
        quote!(::tensorfn::__private::float_unary::<#ct>(#op, #a, #lanes))
    } else {
        quote!(::tensorfn::__private::CpuNum::num_unary(#a, #op))
    }
}

/// `op(a, b)` in dtype `d`, as [`unary`].
fn binary(
    op: BinaryOp,
    a: TokenStream,
    b: TokenStream,
    d: DTypeKind,
    lanes: Option<&TokenStream>,
) -> TokenStream {
    let variant = format_ident!("{}", format!("{op:?}"));
    let op = quote!(::tensorfn::__private::BinaryOp::#variant);
    if d.is_float() {
        let ct = compute_type(d);
        let lanes = lanes_arg(lanes);
        quote!(::tensorfn::__private::float_binary::<#ct>(#op, #a, #b, #lanes))
    } else {
        quote!(::tensorfn::__private::CpuNum::num_binary(#a, #op, #b))
    }
}

fn cast(a: TokenStream, from: DTypeKind, to: DTypeKind) -> TokenStream {
    use DTypeKind::*;
    let ct = compute_type(to);
    match (from, to) {
        (f, t) if f == t => a,
        (Bool, t) if t.is_float() => {
            let (one, zero) = (literal(1.0, t), literal(0.0, t));
            quote!(if #a { #one } else { #zero })
        }
        (Bool, _) => quote!(#a as #ct),
        (f, Bool) => {
            let zero = literal(0.0, f);
            quote!(#a != #zero)
        }
        (F32 | F16 | BF16, F16) => quote!(::tensorfn::f16::from_f32(#a).to_f32()),
        (F32 | F16 | BF16, BF16) => quote!(::tensorfn::bf16::from_f32(#a).to_f32()),
        (_, F16) => quote!(::tensorfn::f16::from_f64(#a as f64).to_f32()),
        (_, BF16) => quote!(::tensorfn::bf16::from_f64(#a as f64).to_f32()),
        _ => quote!(#a as #ct),
    }
}

/// Whether `v` is the `bool` constant `b`: `and`, `or` and `not` are
/// selects and a comparison against one, printed back as `&`, `|`, `!`.
fn is_bool_const(kernel: &Kernel, v: Value, b: bool) -> bool {
    matches!(
        kernel.insts()[v.index()],
        Inst::Const { value: Scalar::Bool(x), .. } if x == b
    )
}

/// Prints the kernel as statements binding `v0, v1, ..`, each element of
/// input `k` being the compute-type expression `inputs[k]`; returns the
/// statements and the output variable.
///
/// ```
/// use quote::quote;
/// use tensorfn_kernels::ir::ElementwiseBuilder;
/// use tensorfn_kernels::{BinaryOp, DTypeKind::F64};
/// use tensorfn_macros_impl::expand::rust_code::emit_rust;
///
/// let mut b = ElementwiseBuilder::new();
/// let x = b.input(F64);
/// let y = b.input(F64);
/// let s = b.binary(BinaryOp::Add, x, y);
/// let kernel = b.output(s)?;
/// let (body, out) = emit_rust(&kernel, &[quote!(p), quote!(q)]);
/// assert_eq!(out.to_string(), "v2");
/// assert!(body.to_string().starts_with("let v0 : f64 = p ; let v1 : f64 = q ;"));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn emit_rust(kernel: &Kernel, inputs: &[TokenStream]) -> (TokenStream, TokenStream) {
    emit(kernel, inputs, None)
}

/// [`emit_rust`], passing the closure's `lanes` to the runtime's functions where
/// given.
fn emit(
    kernel: &Kernel,
    inputs: &[TokenStream],
    lanes: Option<&TokenStream>,
) -> (TokenStream, TokenStream) {
    let var = |v: Value| {
        let id = format_ident!("v{}", v.index());
        quote!(#id)
    };
    let mut body = TokenStream::new();
    for (i, inst) in kernel.insts().iter().enumerate() {
        let name = format_ident!("v{}", i);
        let d = kernel.types()[i];
        let ty = compute_type(d);
        let value = match *inst {
            Inst::Input { index, .. } => inputs[index].clone(),
            Inst::Const { value, dtype } => scalar_literal(value, dtype),
            Inst::Unary { op, x } => unary(op, var(x), d, lanes),
            Inst::Binary { op, a, b } => binary(op, var(a), var(b), d, lanes),
            Inst::Cast { x, to } => cast(var(x), kernel.dtype(x), to),
            Inst::Compare {
                op: CmpOp::Eq,
                a,
                b,
            } if kernel.dtype(a) == DTypeKind::Bool && is_bool_const(kernel, b, false) => {
                let a = var(a);
                quote!(!#a)
            }
            Inst::Compare { op, a, b } => {
                let (a, b) = (var(a), var(b));
                let op: TokenStream = cmp_symbol(op).parse().expect("operator");
                quote!(#a #op #b)
            }
            Inst::Select {
                cond,
                on_true,
                on_false,
            } if d == DTypeKind::Bool && is_bool_const(kernel, on_false, false) => {
                let (c, t) = (var(cond), var(on_true));
                quote!(#c & #t)
            }
            Inst::Select {
                cond,
                on_true,
                on_false,
            } if d == DTypeKind::Bool && is_bool_const(kernel, on_true, true) => {
                let (c, f) = (var(cond), var(on_false));
                quote!(#c | #f)
            }
            Inst::Select {
                cond,
                on_true,
                on_false,
            } => {
                let (c, a, b) = (var(cond), var(on_true), var(on_false));
                quote!(if #c { #a } else { #b })
            }
        };
        // f16 and bf16 are computed in f32 and rounded after each operation,
        // as the PTX and PyTorch do.
        let value = match (inst, d) {
            (Inst::Unary { .. } | Inst::Binary { .. }, DTypeKind::F16) => {
                quote!(::tensorfn::f16::from_f32(#value).to_f32())
            }
            (Inst::Unary { .. } | Inst::Binary { .. }, DTypeKind::BF16) => {
                quote!(::tensorfn::bf16::from_f32(#value).to_f32())
            }
            _ => value,
        };
        body.extend(quote!(let #name: #ty = #value;));
    }
    (body, var(kernel.output()))
}

/// A closure `|lanes: &mut Lanes, a0: T0, a1: T1, ..| -> O { .. }`
/// computing the kernel per element on stored types, always inlined.
///
/// ```
/// use tensorfn_kernels::ir::ElementwiseBuilder;
/// use tensorfn_kernels::{CmpOp, DTypeKind::I32};
/// use tensorfn_macros_impl::expand::rust_code::closure;
///
/// let mut b = ElementwiseBuilder::new();
/// let x = b.input(I32);
/// let zero = b.constant(0.0, I32);
/// let pos = b.compare(CmpOp::Gt, x, zero);
/// let kernel = b.output(pos)?;
/// let text = closure(&kernel).to_string();
/// // no float op: the lanes go unnamed (an unused parameter would warn)
/// assert!(text.contains("move | _ : & mut :: tensorfn :: __private :: Lanes , a0 : i32 | -> bool"));
/// assert!(text.contains("let v2 : bool = v0 > v1 ;"));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn closure(kernel: &Kernel) -> TokenStream {
    let args: Vec<_> = (0..kernel.inputs().len())
        .map(|k| format_ident!("a{}", k))
        .collect();
    let tys: Vec<_> = kernel.inputs().iter().map(|d| storage_type(*d)).collect();
    let loads: Vec<_> = args
        .iter()
        .zip(kernel.inputs())
        .map(|(a, d)| load(quote!(#a), *d))
        .collect();
    // Named only where used: an unused closure parameter would warn in
    // the caller's crate.
    let needs_lanes = kernel.insts().iter().enumerate().any(|(i, inst)| {
        matches!(inst, Inst::Unary { .. } | Inst::Binary { .. }) && kernel.types()[i].is_float()
    });
    let lanes = if needs_lanes {
        quote!(lanes)
    } else {
        quote!(_)
    };
    let (body, out) = emit(kernel, &loads, Some(&lanes));
    let out_d = kernel.output_dtype();
    let ret = storage_type(out_d);
    let stored = store(out, out_d);
    // `#[inline(always)]` puts the body into the runtime's loop however
    // large it is, so the loop vectorises.
    quote! {
        #[inline(always)]
        move |#lanes: &mut ::tensorfn::__private::Lanes, #(#args: #tys),*| -> #ret {
            #body
            #stored
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorfn_kernels::ir::ElementwiseBuilder;

    fn text(kernel: &Kernel) -> String {
        let inputs: Vec<TokenStream> = (0..kernel.inputs().len())
            .map(|k| {
                let a = format_ident!("a{}", k);
                quote!(#a)
            })
            .collect();
        let (body, out) = emit_rust(kernel, &inputs);
        format!("{body} => {out}")
    }

    #[test]
    fn and_or_not_print_as_rust_operators() {
        let mut b = ElementwiseBuilder::with_cse();
        let (p, q) = (b.input(DTypeKind::Bool), b.input(DTypeKind::Bool));
        let n = b.not(p);
        let a = b.and(n, q);
        let o = b.or(a, p);
        let kernel = b.output(o).unwrap();
        // p, q, false, !p, (!p) & q, true, .. | p
        assert_eq!(
            text(&kernel),
            "let v0 : bool = a0 ; let v1 : bool = a1 ; let v2 : bool = false ; \
             let v3 : bool = ! v0 ; let v4 : bool = v3 & v1 ; let v5 : bool = true ; \
             let v6 : bool = v4 | v0 ; => v6"
        );
    }

    #[test]
    fn selects_of_numbers_and_bool_comparisons_stay_as_written() {
        let mut b = ElementwiseBuilder::new();
        let (p, x) = (b.input(DTypeKind::Bool), b.input(DTypeKind::I64));
        let t = b.constant(1.0, DTypeKind::Bool);
        let eq = b.compare(CmpOp::Eq, p, t);
        let m = b.constant_int(i64::MIN, DTypeKind::I64);
        let y = b.select(eq, x, m);
        let kernel = b.output(y).unwrap();
        assert_eq!(
            text(&kernel),
            "let v0 : bool = a0 ; let v1 : i64 = a1 ; let v2 : bool = true ; \
             let v3 : bool = v0 == v2 ; let v4 : i64 = i64 :: MIN ; \
             let v5 : i64 = if v3 { v1 } else { v4 } ; => v5"
        );
    }

    #[test]
    fn f16_rounds_after_each_op_and_casts_round_once() {
        let mut b = ElementwiseBuilder::new();
        let h = b.input(DTypeKind::F16);
        let tenth = b.constant(0.1, DTypeKind::F16);
        let p = b.binary(BinaryOp::Mul, h, tenth);
        let f = b.cast(p, DTypeKind::F32);
        let e = b.unary(UnaryOp::Exp, f);
        let back = b.cast(e, DTypeKind::BF16);
        let kernel = b.output(back).unwrap();
        let t = text(&kernel);
        // the f16 product rounds, the f32 exp does not, the cast rounds once
        assert!(t.contains(
            "let v2 : f32 = :: tensorfn :: f16 :: from_f32 (:: tensorfn :: __private :: float_binary :: < f32 >"
        ), "{t}");
        assert!(t.contains("let v1 : f32 = 0.099975586f32 ;"), "{t}");
        assert!(t.contains("let v3 : f32 = v2 as f32 ;"), "{t}");
        assert!(
            t.contains("let v4 : f32 = :: tensorfn :: __private :: float_unary :: < f32 >"),
            "{t}"
        );
        assert!(
            t.contains("let v5 : f32 = :: tensorfn :: bf16 :: from_f32 (v4) . to_f32 () ;"),
            "{t}"
        );
    }
}
