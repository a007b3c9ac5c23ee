//! The scalar program of one element: what a fused group or a `#[kernel]`
//! computes per element, in SSA form. The same program is printed as a Rust
//! closure (the CPU path), as a plain Rust scalar function (`#[kernel]`s) and
//! handed to the PTX emitter (the CUDA path), so the three agree.
//!
//! f16 and bf16 values are computed in f32 and rounded when stored (or when
//! an explicit cast asks for it).
//!
//! ```
//! use tensorfn_macros_impl::ir::{Ir, Inst};
//! use tensorfn_core::DTypeKind::F32;
//! use tensorfn_kernels::UnaryOp;
//! let mut ir = Ir::new(vec![F32]);
//! let x = ir.push(Inst::Input(0), F32);
//! let y = ir.push(Inst::Unary(UnaryOp::Sin, x), F32);
//! ir.output = y;
//! assert!((ir.eval_f64(&[1.0]) - 1f64.sin()).abs() < 1e-12);
//! ```

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use tensorfn_core::DTypeKind;
use tensorfn_kernels::{BinaryOp, CmpOp, UnaryOp};

/// Index of an instruction's result in [`Ir::insts`].
pub type Val = usize;

/// Boolean connectives (kernels only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BoolOp {
    /// `a && b` (both sides are evaluated: there are no branches per element)
    And,
    /// `a || b`
    Or,
}

/// One instruction; its dtype is stored next to it in [`Ir::insts`].
#[derive(Clone, Debug, PartialEq)]
pub enum Inst {
    /// The `k`-th input element.
    Input(usize),
    /// A constant.
    Const(f64),
    /// `op(a)`.
    Unary(UnaryOp, Val),
    /// `op(a, b)`; both operands have the instruction's dtype.
    Binary(BinaryOp, Val, Val),
    /// Conversion of `a` to the instruction's dtype.
    Cast(Val),
    /// `a op b`, a `bool`.
    Cmp(CmpOp, Val, Val),
    /// `a && b`, `a || b`.
    Bool(BoolOp, Val, Val),
    /// `!a`.
    Not(Val),
    /// `if c { a } else { b }` (both evaluated).
    Select(Val, Val, Val),
}

/// A scalar program: typed inputs, instructions, one output.
#[derive(Clone, Debug, PartialEq)]
pub struct Ir {
    /// Dtype of each input.
    pub inputs: Vec<DTypeKind>,
    /// Instructions with their dtypes, operands before users.
    pub insts: Vec<(Inst, DTypeKind)>,
    /// The result.
    pub output: Val,
}

impl Ir {
    /// An empty program over inputs of these dtypes.
    pub fn new(inputs: Vec<DTypeKind>) -> Ir {
        Ir {
            inputs,
            insts: Vec::new(),
            output: 0,
        }
    }

    /// Appends an instruction, reusing an identical earlier one.
    pub fn push(&mut self, inst: Inst, dtype: DTypeKind) -> Val {
        if let Some(i) = self
            .insts
            .iter()
            .position(|(j, d)| *j == inst && *d == dtype)
        {
            return i;
        }
        self.insts.push((inst, dtype));
        self.insts.len() - 1
    }

    /// Copies `other` into this program with its inputs replaced by `args`;
    /// returns the copy of its output.
    pub fn inline(&mut self, other: &Ir, args: &[Val]) -> Val {
        let mut map = Vec::with_capacity(other.insts.len());
        for (inst, d) in &other.insts {
            let m = |v: &Val| map[*v];
            let new = match inst {
                Inst::Input(k) => {
                    map.push(args[*k]);
                    continue;
                }
                Inst::Const(c) => Inst::Const(*c),
                Inst::Unary(op, a) => Inst::Unary(*op, m(a)),
                Inst::Binary(op, a, b) => Inst::Binary(*op, m(a), m(b)),
                Inst::Cast(a) => Inst::Cast(m(a)),
                Inst::Cmp(op, a, b) => Inst::Cmp(*op, m(a), m(b)),
                Inst::Bool(op, a, b) => Inst::Bool(*op, m(a), m(b)),
                Inst::Not(a) => Inst::Not(m(a)),
                Inst::Select(c, a, b) => Inst::Select(m(c), m(a), m(b)),
            };
            let v = self.push(new, *d);
            map.push(v);
        }
        map[other.output]
    }

    /// The output dtype.
    pub fn output_dtype(&self) -> DTypeKind {
        self.insts[self.output].1
    }

    /// A stable text of the program (a kernel's name hashes it).
    pub fn fingerprint(&self) -> String {
        format!("{:?}|{:?}|{}", self.inputs, self.insts, self.output)
    }

    /// Evaluates the program in f64 with each instruction's rounding to its
    /// dtype (integers truncate, f16/bf16 are not rounded): a reference for
    /// tests.
    pub fn eval_f64(&self, inputs: &[f64]) -> f64 {
        let mut v: Vec<f64> = Vec::with_capacity(self.insts.len());
        for (inst, d) in &self.insts {
            let x = match inst {
                Inst::Input(k) => inputs[*k],
                Inst::Const(c) => *c,
                Inst::Unary(op, a) => op.eval_f64(v[*a]),
                Inst::Binary(BinaryOp::Div, a, b) if !d.is_float() => {
                    if v[*b] == 0.0 {
                        0.0
                    } else {
                        (v[*a] / v[*b]).trunc()
                    }
                }
                Inst::Binary(op, a, b) => op.eval_f64(v[*a], v[*b]),
                Inst::Cast(a) if *d == DTypeKind::Bool => (v[*a] != 0.0) as u8 as f64,
                Inst::Cast(a) if !d.is_float() => v[*a].trunc(),
                Inst::Cast(a) => v[*a],
                Inst::Cmp(op, a, b) => cmp(*op, v[*a], v[*b]) as u8 as f64,
                Inst::Bool(BoolOp::And, a, b) => (v[*a] != 0.0 && v[*b] != 0.0) as u8 as f64,
                Inst::Bool(BoolOp::Or, a, b) => (v[*a] != 0.0 || v[*b] != 0.0) as u8 as f64,
                Inst::Not(a) => (v[*a] == 0.0) as u8 as f64,
                Inst::Select(c, a, b) => {
                    if v[*c] != 0.0 {
                        v[*a]
                    } else {
                        v[*b]
                    }
                }
            };
            v.push(x);
        }
        v[self.output]
    }
}

fn cmp(op: CmpOp, a: f64, b: f64) -> bool {
    match op {
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
    }
}

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
pub fn round_constant(v: f64, d: DTypeKind) -> f64 {
    match d {
        DTypeKind::F16 => half::f16::from_f64(v).to_f64(),
        DTypeKind::BF16 => half::bf16::from_f64(v).to_f64(),
        DTypeKind::F32 => v as f32 as f64,
        _ => v,
    }
}

/// The Rust type an element of `d` is stored as, under `::tensorfn`.
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
pub fn compute_type(d: DTypeKind) -> TokenStream {
    match d {
        DTypeKind::F16 | DTypeKind::BF16 => quote!(f32),
        other => storage_type(other),
    }
}

/// A literal of dtype `d` in its compute type.
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
pub fn load(v: TokenStream, d: DTypeKind) -> TokenStream {
    match d {
        DTypeKind::F16 | DTypeKind::BF16 => quote!((#v).to_f32()),
        _ => v,
    }
}

/// Converts a computed value back to its storage type.
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

/// Prints the program as statements binding `v0, v1, ..`, each element
/// of input `k` being the compute-type expression `inputs[k]`; returns the
/// statements and the output variable.
pub fn emit_rust(ir: &Ir, inputs: &[TokenStream]) -> (TokenStream, TokenStream) {
    emit(ir, inputs, None)
}

/// [`emit_rust`], passing the closure's `lanes` to the runtime's functions where
/// given.
fn emit(
    ir: &Ir,
    inputs: &[TokenStream],
    lanes: Option<&TokenStream>,
) -> (TokenStream, TokenStream) {
    let var = |v: Val| {
        let id = format_ident!("v{}", v);
        quote!(#id)
    };
    let mut body = TokenStream::new();
    for (i, (inst, d)) in ir.insts.iter().enumerate() {
        let name = var(i);
        let ty = compute_type(*d);
        let value = match inst {
            Inst::Input(k) => inputs[*k].clone(),
            Inst::Const(c) => literal(*c, *d),
            Inst::Unary(op, a) => unary(*op, var(*a), *d, lanes),
            Inst::Binary(op, a, b) => binary(*op, var(*a), var(*b), *d, lanes),
            Inst::Cast(a) => cast(var(*a), ir.insts[*a].1, *d),
            Inst::Cmp(op, a, b) => {
                let (a, b) = (var(*a), var(*b));
                let op: TokenStream = cmp_symbol(*op).parse().expect("operator");
                quote!(#a #op #b)
            }
            Inst::Bool(op, a, b) => {
                let (a, b) = (var(*a), var(*b));
                match op {
                    BoolOp::And => quote!(#a & #b),
                    BoolOp::Or => quote!(#a | #b),
                }
            }
            Inst::Not(a) => {
                let a = var(*a);
                quote!(!#a)
            }
            Inst::Select(c, a, b) => {
                let (c, a, b) = (var(*c), var(*a), var(*b));
                quote!(if #c { #a } else { #b })
            }
        };
        // f16 and bf16 are computed in f32 and rounded after each operation,
        // as the PTX and PyTorch do.
        let value = match (inst, d) {
            (Inst::Unary(..) | Inst::Binary(..), DTypeKind::F16) => {
                quote!(::tensorfn::f16::from_f32(#value).to_f32())
            }
            (Inst::Unary(..) | Inst::Binary(..), DTypeKind::BF16) => {
                quote!(::tensorfn::bf16::from_f32(#value).to_f32())
            }
            _ => value,
        };
        body.extend(quote!(let #name: #ty = #value;));
    }
    (body, var(ir.output))
}

/// A closure `|lanes: &mut Lanes, a0: T0, a1: T1, ..| -> O { .. }`
/// computing the program per element on stored types, always inlined.
pub fn closure(ir: &Ir) -> TokenStream {
    let args: Vec<_> = (0..ir.inputs.len())
        .map(|k| format_ident!("a{}", k))
        .collect();
    let tys: Vec<_> = ir.inputs.iter().map(|d| storage_type(*d)).collect();
    let loads: Vec<_> = args
        .iter()
        .zip(&ir.inputs)
        .map(|(a, d)| load(quote!(#a), *d))
        .collect();
    // Named only where used: an unused closure parameter would warn in
    // the caller's crate.
    let needs_lanes = ir
        .insts
        .iter()
        .any(|(inst, d)| matches!(inst, Inst::Unary(..) | Inst::Binary(..)) && d.is_float());
    let lanes = if needs_lanes {
        quote!(lanes)
    } else {
        quote!(_)
    };
    let (body, out) = emit(ir, &loads, Some(&lanes));
    let out_d = ir.output_dtype();
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
