//! The typed SSA IR of an elementwise kernel, and the builder that writes it.
//!
//! A kernel maps `k` input elements (one per input tensor, each of its own
//! dtype) to one output element. Where the elements come from (strides,
//! broadcasting, offsets) is not part of the IR: the launch supplies it (see
//! [`abi`](crate::abi)). The same [`Kernel`] runs on the GPU through
//! [`ptx::elementwise`](crate::ptx::elementwise) and on the host through
//! [`interp::run_elementwise`](crate::interp::run_elementwise).
//!
//! Values are typed by [`DTypeKind`]. Every operation keeps its dtype
//! (`f16 + f16` is `f16`, rounded once per operation as on PyTorch);
//! comparisons give `bool`; nothing converts silently: mixing dtypes is an
//! [`Error::Type`] naming the instruction and the cast that fixes it.
//!
//! # Building a fused group
//!
//! `sin(x) * 2 + 5` over an `f32` tensor:
//!
//! ```
//! use tensorfn_kernels::ir::ElementwiseBuilder;
//! use tensorfn_kernels::{BinaryOp, DTypeKind, UnaryOp};
//!
//! let mut k = ElementwiseBuilder::new();
//! let x = k.input(DTypeKind::F32);
//! let y = k.unary(UnaryOp::Sin, x);
//! let two = k.constant(2.0, DTypeKind::F32);
//! let z = k.binary(BinaryOp::Mul, y, two);
//! let five = k.constant(5.0, DTypeKind::F32);
//! let w = k.binary(BinaryOp::Add, z, five);
//! let kernel = k.output(w)?;
//!
//! assert_eq!(kernel.inputs(), &[DTypeKind::F32]);
//! assert_eq!(kernel.output_dtype(), DTypeKind::F32);
//! // The name the macro gives the entries: stable across builds and machines.
//! assert!(kernel.default_name().starts_with("tf_fused_"));
//! let ptx = tensorfn_kernels::ptx::elementwise(&kernel, &kernel.default_name())?;
//! assert!(ptx.contains("_contig(") && ptx.contains("_strided("));
//! # Ok::<(), tensorfn_kernels::Error>(())
//! ```
//!
//! Dtype errors surface when the kernel is finished, as `Err`, never as a
//! panic:
//!
//! ```
//! use tensorfn_kernels::ir::ElementwiseBuilder;
//! use tensorfn_kernels::{BinaryOp, DTypeKind};
//!
//! let mut k = ElementwiseBuilder::new();
//! let a = k.input(DTypeKind::F16);
//! let b = k.input(DTypeKind::F32);
//! let c = k.binary(BinaryOp::Add, a, b);
//! assert_eq!(k.dtype(c), None); // ill-typed
//! let err = k.output(c).unwrap_err();
//! assert!(err.to_string().contains("f16 and f32"));
//! assert!(err.to_string().contains("cast"));
//! ```
//!
//! # From `tensor_fn!`
//!
//! The macro builds one [`Kernel`] per fusion group at expansion time, then
//! embeds a [`FusedKernel`](crate::FusedKernel) whose fields come straight
//! from it:
//!
//! ```
//! use tensorfn_kernels::ir::ElementwiseBuilder;
//! use tensorfn_kernels::{ptx, BinaryOp, DTypeKind, UnaryOp};
//!
//! let mut k = ElementwiseBuilder::new();
//! let x = k.input(DTypeKind::F16);
//! let b = k.input(DTypeKind::F16); // broadcast at launch: stride 0
//! let s = k.binary(BinaryOp::Add, x, b);
//! let y = k.unary(UnaryOp::Gelu, s);
//! let kernel = k.output(y)?;
//!
//! let name = kernel.default_name(); // stable: hash of the kernel's text
//! let text = ptx::elementwise(&kernel, &name)?;
//! // emitted as: static K: FusedKernel = FusedKernel {
//! //     name: <name>, ptx: <text>, ptx_sm80: None, inputs: &[F16, F16], output: F16 };
//! // (`ptx_sm80` holds a second text when the kernel rounds to bf16)
//! assert_eq!(kernel.inputs(), &[DTypeKind::F16, DTypeKind::F16]);
//! assert!(text.contains(&format!("{name}_contig")));
//! # Ok::<(), tensorfn_kernels::Error>(())
//! ```
//!
//! The same `Kernel` runs on the host with
//! [`interp::run_elementwise`](crate::interp::run_elementwise), which is how
//! the macro's generated CPU closure can be tested against the GPU text.
//!
//! Comparisons, `select` and casts:
//!
//! ```
//! use tensorfn_kernels::ir::ElementwiseBuilder;
//! use tensorfn_kernels::{CmpOp, DTypeKind};
//! use tensorfn_kernels::interp::{run_elementwise, HostData, HostView};
//!
//! // where(x > 0, x, 0.1 * x) computed in f32 from an f16 input, stored as f16
//! let mut k = ElementwiseBuilder::new();
//! let h = k.input(DTypeKind::F16);
//! let x = k.cast(h, DTypeKind::F32);
//! let zero = k.constant(0.0, DTypeKind::F32);
//! let pos = k.compare(CmpOp::Gt, x, zero);
//! let slope = k.constant(0.1, DTypeKind::F32);
//! let leak = k.binary(tensorfn_kernels::BinaryOp::Mul, x, slope);
//! let y = k.select(pos, x, leak);
//! let out = k.cast(y, DTypeKind::F16);
//! let kernel = k.output(out)?;
//!
//! let data = HostData::from_f64(DTypeKind::F16, &[-2.0, 3.0]);
//! let got = run_elementwise(&kernel, &[HostView::contiguous(&data)], &[2])?.to_f64_vec();
//! assert_eq!(got[0], -0.199951171875); // the f16 nearest to -0.2
//! assert_eq!(got[1], 3.0);
//! # Ok::<(), tensorfn_kernels::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::ops::{BinaryOp, CmpOp, UnaryOp};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use tensorfn_core::DTypeKind;

/// A value of a kernel: the result of one instruction.
///
/// ```
/// use tensorfn_kernels::ir::ElementwiseBuilder;
/// use tensorfn_kernels::DTypeKind;
/// let mut k = ElementwiseBuilder::new();
/// let x = k.input(DTypeKind::F32);
/// assert_eq!(x.index(), 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Value {
    builder: u32,
    index: u32,
}

impl Value {
    /// Position of the instruction that defines the value.
    ///
    /// ```
    /// use tensorfn_kernels::ir::ElementwiseBuilder;
    /// use tensorfn_kernels::{DTypeKind, UnaryOp};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::F32);
    /// let y = k.unary(UnaryOp::Exp, x);
    /// assert_eq!((x.index(), y.index()), (0, 1));
    /// ```
    pub fn index(self) -> usize {
        self.index as usize
    }
}

/// The value of a constant, already valid for its dtype.
///
/// ```
/// use tensorfn_kernels::ir::Scalar;
/// assert_eq!(Scalar::Int(3).to_f64(), 3.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// A floating-point constant (rounded to its dtype).
    Float(f64),
    /// An integer constant (in range of its dtype).
    Int(i64),
    /// A boolean constant.
    Bool(bool),
}

impl Scalar {
    /// The value as `f64` (exact but for integers beyond 2^53).
    ///
    /// ```
    /// use tensorfn_kernels::ir::Scalar;
    /// assert_eq!(Scalar::Float(0.5).to_f64(), 0.5);
    /// assert_eq!(Scalar::Bool(true).to_f64(), 1.0);
    /// assert_eq!(Scalar::Int(-7).to_f64(), -7.0);
    /// ```
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Float(v) => v,
            Scalar::Int(v) => v as f64,
            Scalar::Bool(b) => b as u8 as f64,
        }
    }
}

/// One instruction of a kernel.
///
/// ```
/// use tensorfn_kernels::ir::{ElementwiseBuilder, Inst};
/// use tensorfn_kernels::{DTypeKind, UnaryOp};
/// let mut k = ElementwiseBuilder::new();
/// let x = k.input(DTypeKind::F64);
/// let y = k.unary(UnaryOp::Exp, x);
/// let kernel = k.output(y)?;
/// assert!(matches!(kernel.insts()[1], Inst::Unary { op: UnaryOp::Exp, .. }));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Inst {
    /// The element of input `index`.
    Input {
        /// Position of the input in the launch's parameter list.
        index: usize,
        /// Its dtype.
        dtype: DTypeKind,
    },
    /// A constant.
    Const {
        /// The value, valid for `dtype`.
        value: Scalar,
        /// Its dtype.
        dtype: DTypeKind,
    },
    /// `op(x)`, same dtype as `x`.
    Unary {
        /// The function.
        op: UnaryOp,
        /// The operand.
        x: Value,
    },
    /// `op(a, b)`, operands and result of one dtype.
    Binary {
        /// The function.
        op: BinaryOp,
        /// Left operand.
        a: Value,
        /// Right operand.
        b: Value,
    },
    /// `a op b` as a `bool`; operands of one dtype.
    Compare {
        /// The comparison.
        op: CmpOp,
        /// Left operand.
        a: Value,
        /// Right operand.
        b: Value,
    },
    /// `if cond { on_true } else { on_false }`.
    Select {
        /// A `bool`.
        cond: Value,
        /// Taken where `cond` holds.
        on_true: Value,
        /// Taken elsewhere; same dtype as `on_true`.
        on_false: Value,
    },
    /// Conversion to `to`, with Rust `as` semantics (see [`ElementwiseBuilder::cast`]).
    Cast {
        /// The operand.
        x: Value,
        /// The target dtype.
        to: DTypeKind,
    },
}

impl Inst {
    /// The values the instruction reads.
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, BinaryOp, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::F32);
    /// let y = k.binary(BinaryOp::Add, x, x);
    /// let kernel = k.output(y)?;
    /// let operands: Vec<usize> = kernel.insts()[1].operands().iter().map(|v| v.index()).collect();
    /// assert_eq!(operands, vec![x.index(), x.index()]);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn operands(&self) -> Vec<Value> {
        match *self {
            Inst::Input { .. } | Inst::Const { .. } => vec![],
            Inst::Unary { x, .. } | Inst::Cast { x, .. } => vec![x],
            Inst::Binary { a, b, .. } | Inst::Compare { a, b, .. } => vec![a, b],
            Inst::Select {
                cond,
                on_true,
                on_false,
            } => vec![cond, on_true, on_false],
        }
    }

    fn map_operands(self, f: impl Fn(Value) -> Value) -> Inst {
        match self {
            Inst::Input { .. } | Inst::Const { .. } => self,
            Inst::Unary { op, x } => Inst::Unary { op, x: f(x) },
            Inst::Cast { x, to } => Inst::Cast { x: f(x), to },
            Inst::Binary { op, a, b } => Inst::Binary {
                op,
                a: f(a),
                b: f(b),
            },
            Inst::Compare { op, a, b } => Inst::Compare {
                op,
                a: f(a),
                b: f(b),
            },
            Inst::Select {
                cond,
                on_true,
                on_false,
            } => Inst::Select {
                cond: f(cond),
                on_true: f(on_true),
                on_false: f(on_false),
            },
        }
    }
}

static NEXT_BUILDER: AtomicU32 = AtomicU32::new(1);

/// Writes a [`Kernel`] one instruction at a time.
///
/// Every method returns the new [`Value`] at once; dtype errors are recorded
/// and reported by [`output`](Self::output), so a chain of calls needs no
/// `?` at each step. [`dtype`](Self::dtype) tells the dtype of a value so
/// far (`None` when it is ill-typed).
///
/// ```
/// use tensorfn_kernels::ir::ElementwiseBuilder;
/// use tensorfn_kernels::{BinaryOp, DTypeKind, UnaryOp};
/// // gelu(x) + bias, over f32
/// let mut k = ElementwiseBuilder::new();
/// let x = k.input(DTypeKind::F32);
/// let bias = k.input(DTypeKind::F32);
/// let g = k.unary(UnaryOp::Gelu, x);
/// let y = k.binary(BinaryOp::Add, g, bias);
/// assert_eq!(k.dtype(y), Some(DTypeKind::F32));
/// let kernel = k.output(y)?;
/// assert_eq!(kernel.inputs().len(), 2);
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ElementwiseBuilder {
    id: u32,
    inputs: Vec<DTypeKind>,
    insts: Vec<Inst>,
    types: Vec<Option<DTypeKind>>,
    first_error: Option<Error>,
    /// Where an instruction is already defined, when the builder reuses
    /// identical instructions ([`with_cse`](Self::with_cse)).
    defined: Option<HashMap<CseKey, u32>>,
}

/// What makes two instructions interchangeable: their fields, with float
/// constants compared by their bits (so `0.0` and `-0.0` stay apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum CseKey {
    Const(u8, u64, DTypeKind),
    Unary(UnaryOp, Value),
    Binary(BinaryOp, Value, Value),
    Compare(CmpOp, Value, Value),
    Select(Value, Value, Value),
    Cast(Value, DTypeKind),
}

impl CseKey {
    /// `None` for inputs: each is a parameter of its own.
    fn of(inst: &Inst) -> Option<CseKey> {
        Some(match *inst {
            Inst::Input { .. } => return None,
            Inst::Const { value, dtype } => match value {
                Scalar::Float(v) => CseKey::Const(0, v.to_bits(), dtype),
                Scalar::Int(v) => CseKey::Const(1, v as u64, dtype),
                Scalar::Bool(v) => CseKey::Const(2, v as u64, dtype),
            },
            Inst::Unary { op, x } => CseKey::Unary(op, x),
            Inst::Binary { op, a, b } => CseKey::Binary(op, a, b),
            Inst::Compare { op, a, b } => CseKey::Compare(op, a, b),
            Inst::Select {
                cond,
                on_true,
                on_false,
            } => CseKey::Select(cond, on_true, on_false),
            Inst::Cast { x, to } => CseKey::Cast(x, to),
        })
    }
}

impl Default for ElementwiseBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ElementwiseBuilder {
    /// An empty kernel.
    ///
    /// ```
    /// let k = tensorfn_kernels::ir::ElementwiseBuilder::new();
    /// assert_eq!(k.len(), 0);
    /// ```
    pub fn new() -> Self {
        ElementwiseBuilder {
            id: NEXT_BUILDER.fetch_add(1, Ordering::Relaxed),
            inputs: Vec::new(),
            insts: Vec::new(),
            types: Vec::new(),
            first_error: None,
            defined: None,
        }
    }

    /// An empty kernel whose builder reuses an identical earlier
    /// instruction instead of appending a copy (common-subexpression
    /// elimination), so that a program built value by value, as
    /// `tensor_fn!` builds its fused groups, computes each value once.
    /// Float constants are identical when their bits are; inputs are never
    /// merged.
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, BinaryOp, DTypeKind, UnaryOp};
    /// let mut k = ElementwiseBuilder::with_cse();
    /// let x = k.input(DTypeKind::F32);
    /// let a = k.unary(UnaryOp::Exp, x);
    /// let b = k.unary(UnaryOp::Exp, x);
    /// assert_eq!(a, b);
    /// let zero = k.constant(0.0, DTypeKind::F32);
    /// let minus_zero = k.constant(-0.0, DTypeKind::F32);
    /// assert_ne!(zero, minus_zero);
    /// let s = k.binary(BinaryOp::Add, a, b);
    /// assert_eq!(k.output(s)?.insts().len(), 3); // x, exp x, exp x + exp x
    ///
    /// // `new()` appends every instruction, as it always has.
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::F32);
    /// assert_ne!(k.unary(UnaryOp::Exp, x), k.unary(UnaryOp::Exp, x));
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn with_cse() -> Self {
        ElementwiseBuilder {
            defined: Some(HashMap::new()),
            ..Self::new()
        }
    }

    /// Number of instructions so far.
    ///
    /// ```
    /// let mut k = tensorfn_kernels::ir::ElementwiseBuilder::new();
    /// k.input(tensorfn_kernels::DTypeKind::U8);
    /// assert_eq!(k.len(), 1);
    /// assert!(!k.is_empty());
    /// ```
    pub fn len(&self) -> usize {
        self.insts.len()
    }

    /// True when no instruction was added.
    ///
    /// ```
    /// assert!(tensorfn_kernels::ir::ElementwiseBuilder::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.insts.is_empty()
    }

    /// The next input, of `dtype`; inputs are numbered in call order and
    /// become the kernel's `in_0`, `in_1`, ... parameters.
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let a = k.input(DTypeKind::Bool);
    /// assert_eq!(k.dtype(a), Some(DTypeKind::Bool));
    /// ```
    pub fn input(&mut self, dtype: DTypeKind) -> Value {
        let index = self.inputs.len();
        self.inputs.push(dtype);
        self.push(Inst::Input { index, dtype }, Ok(dtype))
    }

    /// A constant of `dtype`. Floats round to the dtype (`0.1` as `f16` is
    /// the nearest `f16`); integers and `bool` must be exact (`2.0` is an
    /// `i32`, `2.5` is an error, `bool` takes `0.0` or `1.0`).
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let c = k.constant(2.5, DTypeKind::I32);
    /// assert!(k.output(c).unwrap_err().to_string().contains("not an integer"));
    /// ```
    pub fn constant(&mut self, value: f64, dtype: DTypeKind) -> Value {
        let index = self.insts.len();
        let scalar = float_constant(value, dtype).map_err(|message| Error::Constant {
            inst: index,
            message,
        });
        match scalar {
            Ok(value) => self.push(Inst::Const { value, dtype }, Ok(dtype)),
            Err(e) => self.push(
                Inst::Const {
                    value: Scalar::Float(value),
                    dtype,
                },
                Err(e),
            ),
        }
    }

    /// An integer constant of `dtype`, exact for every `i64` (use it for
    /// integers beyond 2^53). Floats round; integers must be in range.
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let c = k.constant_int(i64::MAX, DTypeKind::I64);
    /// assert!(k.output(c).is_ok());
    /// ```
    pub fn constant_int(&mut self, value: i64, dtype: DTypeKind) -> Value {
        let index = self.insts.len();
        let scalar = int_constant(value, dtype).map_err(|message| Error::Constant {
            inst: index,
            message,
        });
        match scalar {
            Ok(value) => self.push(Inst::Const { value, dtype }, Ok(dtype)),
            Err(e) => self.push(
                Inst::Const {
                    value: Scalar::Int(value),
                    dtype,
                },
                Err(e),
            ),
        }
    }

    /// `op(x)`. Ops with [`UnaryOp::needs_float`] take floats only; the
    /// others take every dtype but `bool`. Integers wrap (`-i32::MIN` is
    /// `i32::MIN`, `neg` of a `u8` is `256 - x`).
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind, UnaryOp};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::BF16);
    /// let y = k.unary(UnaryOp::Tanh, x);
    /// assert_eq!(k.dtype(y), Some(DTypeKind::BF16));
    /// ```
    pub fn unary(&mut self, op: UnaryOp, x: Value) -> Value {
        let inst = Inst::Unary { op, x };
        let ty = self.check(op.name(), &[x], |t| {
            let dt = t[0];
            if dt == DTypeKind::Bool {
                Err(format!(
                    "{} is not defined on bool; cast the operand first with `.cast::<u8>()` or `.cast::<f32>()`",
                    op.name()
                ))
            } else if op.needs_float() && !dt.is_float() {
                Err(format!(
                    "{} needs a floating-point operand, found {dt}; cast it first with `.cast::<f32>()`",
                    op.name()
                ))
            } else {
                Ok(dt)
            }
        });
        self.push_checked(inst, ty)
    }

    /// `op(a, b)` on two values of one dtype (not `bool`). Ops with
    /// [`BinaryOp::needs_float`] (`pow`, `leaky_relu`, `elu`) take floats
    /// only. Integer `+ - *` wrap; integer `/` truncates toward zero,
    /// `x / 0` is `0` and `i32::MIN / -1` is `i32::MIN`. Float `Max`/`Min`
    /// propagate NaN (like `torch.maximum`).
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, BinaryOp, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let a = k.input(DTypeKind::I64);
    /// let b = k.constant(3.0, DTypeKind::I64);
    /// let q = k.binary(BinaryOp::Div, a, b);
    /// assert_eq!(k.dtype(q), Some(DTypeKind::I64));
    /// ```
    pub fn binary(&mut self, op: BinaryOp, a: Value, b: Value) -> Value {
        let inst = Inst::Binary { op, a, b };
        let ty = self.check(op.name(), &[a, b], |t| {
            same_dtype(op.name(), t[0], t[1])?;
            let dt = t[0];
            if dt == DTypeKind::Bool {
                Err(format!(
                    "{} is not defined on bool; cast the operands first with `.cast::<u8>()` or `.cast::<f32>()`",
                    op.name()
                ))
            } else if op.needs_float() && !dt.is_float() {
                Err(format!(
                    "{} needs floating-point operands, found {dt}; cast them first with `.cast::<f32>()`",
                    op.name()
                ))
            } else {
                Ok(dt)
            }
        });
        self.push_checked(inst, ty)
    }

    /// `a op b` as a `bool`, on two values of one dtype (any dtype; `false <
    /// true`). Float comparisons with NaN are false, but `Ne` is true.
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, CmpOp, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let a = k.input(DTypeKind::F16);
    /// let b = k.input(DTypeKind::F16);
    /// let m = k.compare(CmpOp::Lt, a, b);
    /// assert_eq!(k.dtype(m), Some(DTypeKind::Bool));
    /// ```
    pub fn compare(&mut self, op: CmpOp, a: Value, b: Value) -> Value {
        let inst = Inst::Compare { op, a, b };
        let ty = self.check(op.name(), &[a, b], |t| {
            same_dtype(op.name(), t[0], t[1]).map(|_| DTypeKind::Bool)
        });
        self.push_checked(inst, ty)
    }

    /// `if cond { on_true } else { on_false }`: `cond` is a `bool`, the two
    /// branches share a dtype (both are computed; there are no traps to
    /// avoid).
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, CmpOp, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::I32);
    /// let zero = k.constant(0.0, DTypeKind::I32);
    /// let neg = k.compare(CmpOp::Lt, x, zero);
    /// let y = k.select(neg, zero, x);
    /// assert_eq!(k.dtype(y), Some(DTypeKind::I32));
    /// ```
    pub fn select(&mut self, cond: Value, on_true: Value, on_false: Value) -> Value {
        let inst = Inst::Select {
            cond,
            on_true,
            on_false,
        };
        let ty = self.check("select", &[cond, on_true, on_false], |t| {
                if t[0] != DTypeKind::Bool {
                    return Err(format!(
                        "select: the condition is {}, expected bool; build it with a comparison such as `gt`",
                        t[0]
                    ));
                }
                same_dtype("select", t[1], t[2])?;
                Ok(t[1])
            });
        self.push_checked(inst, ty)
    }

    /// Converts `x` to `to`, as Rust's `as` does: floats round to nearest
    /// (ties to even, once, even from `f64` or `i64` to `bf16`), float to
    /// integer truncates toward zero and saturates (NaN gives 0), integers
    /// wrap, to `bool` is `x != 0` (NaN is `true`), `bool` is 0 or 1.
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::F32);
    /// let y = k.cast(x, DTypeKind::U8);
    /// assert_eq!(k.dtype(y), Some(DTypeKind::U8));
    /// ```
    pub fn cast(&mut self, x: Value, to: DTypeKind) -> Value {
        let inst = Inst::Cast { x, to };
        let ty = self.check("cast", &[x], |_| Ok(to));
        self.push_checked(inst, ty)
    }

    /// `a && b` on two `bool`s (both are computed), as a `select` of `b`
    /// and `false`.
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, CmpOp, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::F32);
    /// let lo = k.constant(0.0, DTypeKind::F32);
    /// let hi = k.constant(1.0, DTypeKind::F32);
    /// let above = k.compare(CmpOp::Gt, x, lo);
    /// let below = k.compare(CmpOp::Lt, x, hi);
    /// let inside = k.and(above, below);
    /// let kernel = k.output(inside)?;
    /// assert_eq!(kernel.eval_f64(&[0.5]), 1.0);
    /// assert_eq!(kernel.eval_f64(&[1.5]), 0.0);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn and(&mut self, a: Value, b: Value) -> Value {
        let f = self.constant(0.0, DTypeKind::Bool);
        self.select(a, b, f)
    }

    /// `a || b` on two `bool`s (both are computed), as a `select` of
    /// `true` and `b`.
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let a = k.input(DTypeKind::Bool);
    /// let b = k.input(DTypeKind::Bool);
    /// let either = k.or(a, b);
    /// let kernel = k.output(either)?;
    /// assert_eq!(kernel.eval_f64(&[0.0, 1.0]), 1.0);
    /// assert_eq!(kernel.eval_f64(&[0.0, 0.0]), 0.0);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn or(&mut self, a: Value, b: Value) -> Value {
        let t = self.constant(1.0, DTypeKind::Bool);
        self.select(a, t, b)
    }

    /// `!a` on a `bool`, as the comparison `a == false`.
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let a = k.input(DTypeKind::Bool);
    /// let n = k.not(a);
    /// assert_eq!(k.dtype(n), Some(DTypeKind::Bool));
    /// assert_eq!(k.output(n)?.eval_f64(&[1.0]), 0.0);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn not(&mut self, a: Value) -> Value {
        let f = self.constant(0.0, DTypeKind::Bool);
        self.compare(CmpOp::Eq, a, f)
    }

    /// Copies `kernel`'s instructions into this builder with its inputs
    /// replaced by `args` (one per input, of the input's dtype), and
    /// returns the copy of its output: a call of one kernel from another.
    /// A wrong number or dtype of arguments is reported by
    /// [`output`](Self::output).
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, BinaryOp, DTypeKind, UnaryOp};
    /// // square(x) = x * x, then square(exp(y))
    /// let mut s = ElementwiseBuilder::new();
    /// let x = s.input(DTypeKind::F64);
    /// let xx = s.binary(BinaryOp::Mul, x, x);
    /// let square = s.output(xx)?;
    ///
    /// let mut k = ElementwiseBuilder::new();
    /// let y = k.input(DTypeKind::F64);
    /// let e = k.unary(UnaryOp::Exp, y);
    /// let r = k.inline(&square, &[e]);
    /// let kernel = k.output(r)?;
    /// assert_eq!(kernel.eval_f64(&[0.5]), 0.5f64.exp() * 0.5f64.exp());
    ///
    /// let mut k = ElementwiseBuilder::new();
    /// let i = k.input(DTypeKind::I32);
    /// let r = k.inline(&square, &[i]);
    /// assert!(k.output(r).unwrap_err().to_string().contains("i32"));
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn inline(&mut self, kernel: &Kernel, args: &[Value]) -> Value {
        let wanted = &kernel.inputs;
        let ty = self.check("inline", args, |t| {
            if t.len() != wanted.len() {
                return Err(format!(
                    "inline: the kernel takes {} input(s), found {} argument(s)",
                    wanted.len(),
                    t.len()
                ));
            }
            for (k, (have, want)) in t.iter().zip(wanted).enumerate() {
                if have != want {
                    return Err(format!(
                        "inline: argument {k} is {have} but the kernel's input {k} is {want}; \
                         cast it with `.cast::<{want}>()`"
                    ));
                }
            }
            Ok(kernel.output_dtype())
        });
        if ty.is_err() {
            // A placeholder of the output's dtype carries the error.
            let inst = Inst::Const {
                value: Scalar::Float(0.0),
                dtype: kernel.output_dtype(),
            };
            return self.push_checked(inst, ty);
        }
        let mut map: Vec<Value> = Vec::with_capacity(kernel.insts.len());
        for inst in &kernel.insts {
            let m = |v: Value| map[v.index()];
            let v = match *inst {
                Inst::Input { index, .. } => args[index],
                Inst::Const { value, dtype } => self.push(Inst::Const { value, dtype }, Ok(dtype)),
                Inst::Unary { op, x } => self.unary(op, m(x)),
                Inst::Binary { op, a, b } => self.binary(op, m(a), m(b)),
                Inst::Compare { op, a, b } => self.compare(op, m(a), m(b)),
                Inst::Select {
                    cond,
                    on_true,
                    on_false,
                } => self.select(m(cond), m(on_true), m(on_false)),
                Inst::Cast { x, to } => self.cast(m(x), to),
            };
            map.push(v);
        }
        map[kernel.output.index()]
    }

    /// The first dtype error so far (the one [`output`](Self::output)
    /// will return), so that a front end can report it where the value
    /// was written.
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind, UnaryOp};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::I32);
    /// assert!(k.first_error().is_none());
    /// let _ = k.unary(UnaryOp::Exp, x);
    /// assert!(k.first_error().unwrap().to_string().contains("floating-point"));
    /// ```
    pub fn first_error(&self) -> Option<&Error> {
        self.first_error.as_ref()
    }

    /// The dtype of `v`, or `None` if `v` is ill-typed or not from this
    /// builder.
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::I64);
    /// assert_eq!(k.dtype(x), Some(DTypeKind::I64));
    /// ```
    pub fn dtype(&self, v: Value) -> Option<DTypeKind> {
        if v.builder != self.id {
            return None;
        }
        self.types.get(v.index()).copied().flatten()
    }

    /// Finishes the kernel with `result` as its output element: checks
    /// every instruction (the first dtype error is returned), then drops the
    /// instructions `result` does not use (inputs are all kept: they are the
    /// launch's parameters).
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind, UnaryOp};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::F32);
    /// let _unused = k.unary(UnaryOp::Exp, x);
    /// let kernel = k.output(x)?;
    /// assert_eq!(kernel.insts().len(), 1);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn output(self, result: Value) -> Result<Kernel> {
        if let Some(e) = self.first_error {
            return Err(e);
        }
        if result.builder != self.id || result.index() >= self.insts.len() {
            return Err(Error::ForeignValue {
                op: "output".into(),
            });
        }
        // Keep inputs and whatever `result` depends on, in order.
        let mut live = vec![false; self.insts.len()];
        live[result.index()] = true;
        for i in (0..self.insts.len()).rev() {
            if matches!(self.insts[i], Inst::Input { .. }) {
                live[i] = true;
            }
            if live[i] {
                for o in self.insts[i].operands() {
                    live[o.index()] = true;
                }
            }
        }
        let mut remap = vec![u32::MAX; self.insts.len()];
        let mut insts = Vec::new();
        let mut types = Vec::new();
        for (i, inst) in self.insts.iter().enumerate() {
            if live[i] {
                remap[i] = insts.len() as u32;
                insts.push(inst.map_operands(|v| Value {
                    builder: 0,
                    index: remap[v.index()],
                }));
                types.push(self.types[i].expect("checked above"));
            }
        }
        let output = Value {
            builder: 0,
            index: remap[result.index()],
        };
        Ok(Kernel {
            inputs: self.inputs,
            insts,
            types,
            output,
        })
    }

    fn operand_types(
        &mut self,
        op: &str,
        operands: &[Value],
    ) -> std::result::Result<Vec<DTypeKind>, Option<String>> {
        let mut out = Vec::with_capacity(operands.len());
        for &v in operands {
            if v.builder != self.id || v.index() >= self.insts.len() {
                if self.first_error.is_none() {
                    self.first_error = Some(Error::ForeignValue { op: op.into() });
                }
                return Err(None);
            }
            match self.types[v.index()] {
                Some(t) => out.push(t),
                // An operand already in error: report only the first cause.
                None => return Err(None),
            }
        }
        Ok(out)
    }

    /// Types `operands`, then `rule`; `Err(None)` marks an operand that is
    /// already in error (only the first cause is reported).
    fn check(
        &mut self,
        op: &str,
        operands: &[Value],
        rule: impl FnOnce(&[DTypeKind]) -> std::result::Result<DTypeKind, String>,
    ) -> std::result::Result<DTypeKind, Option<String>> {
        let types = self.operand_types(op, operands)?;
        rule(&types).map_err(Some)
    }

    fn push_checked(
        &mut self,
        inst: Inst,
        ty: std::result::Result<DTypeKind, Option<String>>,
    ) -> Value {
        let index = self.insts.len();
        let ty = ty.map_err(|m| {
            m.map(|message| Error::Type {
                inst: index,
                message,
            })
        });
        match ty {
            Ok(t) => self.push(inst, Ok(t)),
            Err(Some(e)) => self.push(inst, Err(e)),
            Err(None) => {
                self.insts.push(inst);
                self.types.push(None);
                Value {
                    builder: self.id,
                    index: index as u32,
                }
            }
        }
    }

    fn push(&mut self, inst: Inst, ty: Result<DTypeKind>) -> Value {
        let index = self.insts.len() as u32;
        // Only well-typed instructions are reused: an ill-typed one must
        // record its error.
        if let (Some(defined), Ok(_), Some(key)) = (&mut self.defined, &ty, CseKey::of(&inst)) {
            let at = *defined.entry(key).or_insert(index);
            if at != index {
                return Value {
                    builder: self.id,
                    index: at,
                };
            }
        }
        self.insts.push(inst);
        match ty {
            Ok(t) => self.types.push(Some(t)),
            Err(e) => {
                self.types.push(None);
                if self.first_error.is_none() {
                    self.first_error = Some(e);
                }
            }
        }
        Value {
            builder: self.id,
            index,
        }
    }
}

fn same_dtype(op: &str, a: DTypeKind, b: DTypeKind) -> std::result::Result<(), String> {
    if a == b {
        Ok(())
    } else {
        Err(format!(
            "{op}: the operands are {a} and {b}; tensorfn never converts silently: \
             cast one with `.cast::<{a}>()` or `.cast::<{b}>()`"
        ))
    }
}

fn float_constant(value: f64, dtype: DTypeKind) -> std::result::Result<Scalar, String> {
    use DTypeKind::*;
    match dtype {
        F64 => Ok(Scalar::Float(value)),
        F32 => Ok(Scalar::Float(value as f32 as f64)),
        F16 => Ok(Scalar::Float(crate::round::f64_to_f16(value).to_f64())),
        BF16 => Ok(Scalar::Float(crate::round::f64_to_bf16(value).to_f64())),
        Bool => {
            if value == 0.0 {
                Ok(Scalar::Bool(false))
            } else if value == 1.0 {
                Ok(Scalar::Bool(true))
            } else {
                Err(format!(
                    "{value} is not a bool; use 0.0 (false) or 1.0 (true)"
                ))
            }
        }
        I32 | I64 | U8 => {
            if value.fract() != 0.0 || !value.is_finite() {
                return Err(format!(
                    "{value} is not an integer, so not a valid {dtype}; round it or use a float dtype"
                ));
            }
            if value.abs() > 9.0e18 {
                return Err(format!("{value} is out of range for {dtype}"));
            }
            int_constant(value as i64, dtype)
        }
    }
}

fn int_constant(value: i64, dtype: DTypeKind) -> std::result::Result<Scalar, String> {
    use DTypeKind::*;
    let range = match dtype {
        I64 => (i64::MIN, i64::MAX),
        I32 => (i32::MIN as i64, i32::MAX as i64),
        U8 => (0, 255),
        Bool => (0, 1),
        F32 => return Ok(Scalar::Float(value as f32 as f64)),
        F64 => return Ok(Scalar::Float(value as f64)),
        F16 => return Ok(Scalar::Float(crate::round::i64_to_f16(value).to_f64())),
        BF16 => return Ok(Scalar::Float(crate::round::i64_to_bf16(value).to_f64())),
    };
    if value < range.0 || value > range.1 {
        return Err(format!(
            "{value} is out of range for {dtype} ({}..={})",
            range.0, range.1
        ));
    }
    Ok(if dtype == Bool {
        Scalar::Bool(value == 1)
    } else {
        Scalar::Int(value)
    })
}

/// A finished, well-typed elementwise kernel (built by [`ElementwiseBuilder`]).
///
/// ```
/// use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
/// let mut k = ElementwiseBuilder::new();
/// let x = k.input(DTypeKind::I32);
/// let y = k.cast(x, DTypeKind::F64);
/// let kernel = k.output(y)?;
/// assert_eq!(kernel.output_dtype(), DTypeKind::F64);
/// assert_eq!(kernel.to_string().lines().count(), 4);
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    inputs: Vec<DTypeKind>,
    insts: Vec<Inst>,
    types: Vec<DTypeKind>,
    output: Value,
}

impl Kernel {
    /// Dtype of each input, in parameter order.
    ///
    /// ```
    /// # use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::U8);
    /// assert_eq!(k.output(x)?.inputs(), &[DTypeKind::U8]);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn inputs(&self) -> &[DTypeKind] {
        &self.inputs
    }

    /// The instructions, in an order where operands come first.
    ///
    /// ```
    /// # use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::U8);
    /// assert_eq!(k.output(x)?.insts().len(), 1);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn insts(&self) -> &[Inst] {
        &self.insts
    }

    /// The value stored to the output.
    ///
    /// ```
    /// # use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::U8);
    /// assert_eq!(k.output(x)?.output().index(), 0);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn output(&self) -> Value {
        self.output
    }

    /// Dtype of the output.
    ///
    /// ```
    /// # use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::U8);
    /// assert_eq!(k.output(x)?.output_dtype(), DTypeKind::U8);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn output_dtype(&self) -> DTypeKind {
        self.types[self.output.index()]
    }

    /// Dtype of any value of the kernel.
    ///
    /// ```
    /// # use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind, CmpOp};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::F32);
    /// let p = k.compare(CmpOp::Eq, x, x);
    /// let kernel = k.output(p)?;
    /// assert_eq!(kernel.dtype(kernel.output()), DTypeKind::Bool);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn dtype(&self, v: Value) -> DTypeKind {
        self.types[v.index()]
    }

    /// Dtype of each instruction's value, by position in
    /// [`insts`](Self::insts).
    ///
    /// ```
    /// # use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind, CmpOp};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::I64);
    /// let p = k.compare(CmpOp::Ne, x, x);
    /// assert_eq!(k.output(p)?.types(), &[DTypeKind::I64, DTypeKind::Bool]);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn types(&self) -> &[DTypeKind] {
        &self.types
    }

    /// Evaluates the kernel in `f64`, with inputs given as `f64`: integer
    /// results truncate (integer `/` truncates, `x / 0` is 0), comparisons
    /// and `bool`s are 0 or 1, and floats of every width stay `f64` (no
    /// rounding to `f32`, `f16` or `bf16`). A reference for tests of what a
    /// program computes; [`interp`](crate::interp) gives the exact values
    /// of each dtype.
    ///
    /// ```
    /// use tensorfn_kernels::{ir::ElementwiseBuilder, BinaryOp, DTypeKind, UnaryOp};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::F32);
    /// let s = k.unary(UnaryOp::Sin, x);
    /// let kernel = k.output(s)?;
    /// assert_eq!(kernel.eval_f64(&[1.0]), 1f64.sin());
    ///
    /// let mut k = ElementwiseBuilder::new();
    /// let a = k.input(DTypeKind::I32);
    /// let b = k.input(DTypeKind::I32);
    /// let q = k.binary(BinaryOp::Div, a, b);
    /// let kernel = k.output(q)?;
    /// assert_eq!(kernel.eval_f64(&[-7.0, 2.0]), -3.0);
    /// assert_eq!(kernel.eval_f64(&[7.0, 0.0]), 0.0);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn eval_f64(&self, inputs: &[f64]) -> f64 {
        let mut v: Vec<f64> = Vec::with_capacity(self.insts.len());
        let truth = |b: bool| b as u8 as f64;
        for (inst, d) in self.insts.iter().zip(&self.types) {
            let at = |x: Value| v[x.index()];
            let x = match *inst {
                Inst::Input { index, .. } => inputs[index],
                Inst::Const { value, .. } => value.to_f64(),
                Inst::Unary { op, x } => op.eval_f64(at(x)),
                Inst::Binary {
                    op: BinaryOp::Div,
                    a,
                    b,
                } if !d.is_float() => {
                    if at(b) == 0.0 {
                        0.0
                    } else {
                        (at(a) / at(b)).trunc()
                    }
                }
                Inst::Binary { op, a, b } => op.eval_f64(at(a), at(b)),
                Inst::Cast { x, .. } if *d == DTypeKind::Bool => truth(at(x) != 0.0),
                Inst::Cast { x, .. } if !d.is_float() => at(x).trunc(),
                Inst::Cast { x, .. } => at(x),
                Inst::Compare { op, a, b } => truth(op.eval_f64(at(a), at(b))),
                Inst::Select {
                    cond,
                    on_true,
                    on_false,
                } => {
                    if at(cond) != 0.0 {
                        at(on_true)
                    } else {
                        at(on_false)
                    }
                }
            };
            v.push(x);
        }
        v[self.output.index()]
    }

    /// A 64-bit hash of the kernel's text, the same on every machine and
    /// compiler version (FNV-1a), so generated names are reproducible.
    ///
    /// ```
    /// # use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind, UnaryOp};
    /// let build = || {
    ///     let mut k = ElementwiseBuilder::new();
    ///     let x = k.input(DTypeKind::F32);
    ///     let y = k.unary(UnaryOp::Sin, x);
    ///     k.output(y).unwrap()
    /// };
    /// assert_eq!(build().fingerprint(), build().fingerprint());
    /// ```
    pub fn fingerprint(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.to_string().bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    }

    /// `tf_fused_` followed by the [`fingerprint`](Self::fingerprint) in hex:
    /// the entry-name prefix `tensor_fn!` uses.
    ///
    /// ```
    /// # use tensorfn_kernels::{ir::ElementwiseBuilder, DTypeKind};
    /// let mut k = ElementwiseBuilder::new();
    /// let x = k.input(DTypeKind::F32);
    /// let name = k.output(x)?.default_name();
    /// assert_eq!(name.len(), "tf_fused_".len() + 16);
    /// # Ok::<(), tensorfn_kernels::Error>(())
    /// ```
    pub fn default_name(&self) -> String {
        format!("tf_fused_{:016x}", self.fingerprint())
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ins: Vec<_> = self.inputs.iter().map(|d| d.name()).collect();
        writeln!(
            f,
            "kernel({}) -> {} {{",
            ins.join(", "),
            self.output_dtype()
        )?;
        for (i, inst) in self.insts.iter().enumerate() {
            let t = self.types[i];
            let v = |v: Value| format!("%{}", v.index());
            let body = match *inst {
                Inst::Input { index, .. } => format!("input {index}"),
                Inst::Const { value, .. } => match value {
                    Scalar::Float(x) => format!("const {x:e}"),
                    Scalar::Int(x) => format!("const {x}"),
                    Scalar::Bool(b) => format!("const {b}"),
                },
                Inst::Unary { op, x } => format!("{} {}", op.name(), v(x)),
                Inst::Binary { op, a, b } => format!("{} {}, {}", op.name(), v(a), v(b)),
                Inst::Compare { op, a, b } => format!("{} {}, {}", op.name(), v(a), v(b)),
                Inst::Select {
                    cond,
                    on_true,
                    on_false,
                } => format!("select {}, {}, {}", v(cond), v(on_true), v(on_false)),
                Inst::Cast { x, .. } => format!("cast {}", v(x)),
            };
            writeln!(f, "  %{i} = {body} : {t}")?;
        }
        write!(f, "}} -> %{}", self.output.index())
    }
}
