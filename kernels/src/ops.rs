//! The scalar operations every back-end implements: the CPU loops, the PTX
//! emitter and the interpreter all match on these enums.
//!
//! Each op carries its `f64` reference (`eval_f64`), the value every
//! back-end is tested against:
//!
//! ```
//! use tensorfn_kernels::ops::{BinaryOp, UnaryOp};
//! let x = 0.75f64;
//! let silu = BinaryOp::Mul.eval_f64(x, UnaryOp::Sigmoid.eval_f64(x));
//! assert!((UnaryOp::Silu.eval_f64(x) - silu).abs() < 1e-15);
//! ```

/// A function of one element.
///
/// ```
/// use tensorfn_kernels::ops::UnaryOp;
/// assert_eq!(UnaryOp::Sigmoid.name(), "sigmoid");
/// assert!(UnaryOp::Exp.needs_float());
/// assert!(!UnaryOp::Neg.needs_float());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `|x|`
    Abs,
    /// `max(x, 0)` (NaN stays NaN, like `torch.relu`)
    Relu,
    /// `1 / (1 + e^-x)`
    Sigmoid,
    /// hyperbolic tangent
    Tanh,
    /// `e^x`
    Exp,
    /// natural logarithm
    Log,
    /// sine
    Sin,
    /// cosine
    Cos,
    /// square root
    Sqrt,
    /// `1 / sqrt(x)`
    Rsqrt,
    /// `x * x`
    Square,
    /// `1 / x`
    Recip,
    /// GELU, tanh approximation (PyTorch's `approximate='tanh'`)
    Gelu,
    /// `x * sigmoid(x)`
    Silu,
}

impl UnaryOp {
    /// Every unary op.
    ///
    /// ```
    /// use tensorfn_kernels::UnaryOp;
    /// assert_eq!(UnaryOp::ALL.len(), 15);
    /// assert!(UnaryOp::ALL.iter().all(|op| UnaryOp::from_name(op.name()) == Some(*op)));
    /// ```
    pub const ALL: [UnaryOp; 15] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Relu,
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Square,
        UnaryOp::Recip,
        UnaryOp::Gelu,
        UnaryOp::Silu,
    ];

    /// The name used in `tensor_fn!` and in kernel names.
    ///
    /// ```
    /// use tensorfn_kernels::UnaryOp;
    /// assert_eq!(UnaryOp::Rsqrt.name(), "rsqrt");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Relu => "relu",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Square => "square",
            UnaryOp::Recip => "recip",
            UnaryOp::Gelu => "gelu",
            UnaryOp::Silu => "silu",
        }
    }

    /// Looks an op up by [`name`](Self::name).
    ///
    /// ```
    /// use tensorfn_kernels::UnaryOp;
    /// assert_eq!(UnaryOp::from_name("gelu"), Some(UnaryOp::Gelu));
    /// assert_eq!(UnaryOp::from_name("softplus"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<UnaryOp> {
        UnaryOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// True for ops defined only on floating-point dtypes.
    ///
    /// ```
    /// use tensorfn_kernels::UnaryOp;
    /// assert!(UnaryOp::Sqrt.needs_float());
    /// assert!(!UnaryOp::Square.needs_float()); // integers square too
    /// ```
    pub const fn needs_float(self) -> bool {
        !matches!(
            self,
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Square
        )
    }

    /// The op in `f64`, the reference every back-end is tested against.
    ///
    /// ```
    /// use tensorfn_kernels::UnaryOp;
    /// assert_eq!(UnaryOp::Relu.eval_f64(-2.0), 0.0);
    /// assert!(UnaryOp::Relu.eval_f64(f64::NAN).is_nan());
    /// assert!((UnaryOp::Sigmoid.eval_f64(0.0) - 0.5).abs() < 1e-15);
    /// // tanh-approximated GELU: close to x for large x, close to 0 for very negative x
    /// assert!((UnaryOp::Gelu.eval_f64(10.0) - 10.0).abs() < 1e-12);
    /// assert!(UnaryOp::Gelu.eval_f64(-10.0).abs() < 1e-12);
    /// ```
    pub fn eval_f64(self, x: f64) -> f64 {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
            UnaryOp::Relu if x.is_nan() => x,
            UnaryOp::Relu => x.max(0.0),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Square => x * x,
            UnaryOp::Recip => 1.0 / x,
            UnaryOp::Gelu => {
                // 0.5 x (1 + tanh(u)) = x sigmoid(2u), written without the
                // cancellation of 1 + tanh(u) for negative x.
                let c = (2.0 / std::f64::consts::PI).sqrt();
                let u2 = 2.0 * c * (x + 0.044715 * x * x * x);
                if u2 >= 0.0 {
                    x / (1.0 + (-u2).exp())
                } else {
                    let e = u2.exp();
                    x * e / (1.0 + e)
                }
            }
            UnaryOp::Silu => x / (1.0 + (-x).exp()),
        }
    }
}

/// A function of two elements.
///
/// ```
/// use tensorfn_kernels::ops::BinaryOp;
/// assert_eq!(BinaryOp::Sub.eval_f64(5.0, 2.0), 3.0);
/// assert_eq!(BinaryOp::Max.symbol(), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b` (integer division truncates toward zero, like Rust)
    Div,
    /// `max(a, b)` (NaN if either is NaN, like `torch.maximum`)
    Max,
    /// `min(a, b)` (NaN if either is NaN, like `torch.minimum`)
    Min,
    /// `a ^ b` (floats only)
    Pow,
}

impl BinaryOp {
    /// Every binary op.
    ///
    /// ```
    /// use tensorfn_kernels::BinaryOp;
    /// let arithmetic = BinaryOp::ALL.iter().filter(|op| op.symbol().is_some()).count();
    /// assert_eq!(arithmetic, 4);
    /// ```
    pub const ALL: [BinaryOp; 7] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
    ];

    /// The name used in kernel names and messages.
    ///
    /// ```
    /// use tensorfn_kernels::BinaryOp;
    /// assert_eq!(BinaryOp::Max.name(), "maximum"); // as `torch.maximum`
    /// assert_eq!(BinaryOp::Pow.name(), "pow");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "maximum",
            BinaryOp::Min => "minimum",
            BinaryOp::Pow => "pow",
        }
    }

    /// The Rust operator, for the four arithmetic ops.
    ///
    /// ```
    /// use tensorfn_kernels::BinaryOp;
    /// assert_eq!(BinaryOp::Div.symbol(), Some("/"));
    /// assert_eq!(BinaryOp::Pow.symbol(), None);
    /// ```
    pub const fn symbol(self) -> Option<&'static str> {
        match self {
            BinaryOp::Add => Some("+"),
            BinaryOp::Sub => Some("-"),
            BinaryOp::Mul => Some("*"),
            BinaryOp::Div => Some("/"),
            _ => None,
        }
    }

    /// The op in `f64`, the reference every back-end is tested against.
    ///
    /// ```
    /// use tensorfn_kernels::BinaryOp;
    /// assert_eq!(BinaryOp::Pow.eval_f64(2.0, 10.0), 1024.0);
    /// assert!(BinaryOp::Max.eval_f64(1.0, f64::NAN).is_nan()); // unlike f64::max
    /// assert_eq!(BinaryOp::Min.eval_f64(-0.5, 3.0), -0.5);
    /// ```
    pub fn eval_f64(self, a: f64, b: f64) -> f64 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Max if a.is_nan() || b.is_nan() => f64::NAN,
            BinaryOp::Min if a.is_nan() || b.is_nan() => f64::NAN,
            BinaryOp::Max => a.max(b),
            BinaryOp::Min => a.min(b),
            BinaryOp::Pow => a.powf(b),
        }
    }
}

/// A reduction along one dim.
///
/// ```
/// use tensorfn_kernels::ops::ReduceOp;
/// assert_eq!(ReduceOp::Mean.name(), "mean");
/// assert!(ReduceOp::ArgMax.returns_index());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// sum
    Sum,
    /// arithmetic mean (floats only)
    Mean,
    /// maximum (NaN propagates)
    Max,
    /// minimum (NaN propagates)
    Min,
    /// index of the first maximum, as `i64`
    ArgMax,
    /// index of the first minimum, as `i64`
    ArgMin,
}

impl ReduceOp {
    /// The name used in `tensor_fn!` and in kernel names.
    ///
    /// ```
    /// use tensorfn_kernels::ReduceOp;
    /// assert_eq!(ReduceOp::ArgMin.name(), "argmin");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
        }
    }

    /// True for the ops that return positions (`i64`) instead of values.
    ///
    /// ```
    /// use tensorfn_kernels::ReduceOp;
    /// assert!(ReduceOp::ArgMax.returns_index());
    /// assert!(!ReduceOp::Max.returns_index());
    /// ```
    pub const fn returns_index(self) -> bool {
        matches!(self, ReduceOp::ArgMax | ReduceOp::ArgMin)
    }
}

/// A comparison of two elements of one dtype, giving a `bool`.
///
/// Floats compare as IEEE does: every comparison with NaN is false except
/// `Ne`, which is true.
///
/// ```
/// use tensorfn_kernels::ops::CmpOp;
/// assert!(CmpOp::Le.eval_f64(2.0, 2.0));
/// assert!(CmpOp::Ne.eval_f64(f64::NAN, f64::NAN));
/// assert_eq!(CmpOp::Gt.name(), "gt");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `a == b`
    Eq,
    /// `a != b`
    Ne,
    /// `a < b`
    Lt,
    /// `a <= b`
    Le,
    /// `a > b`
    Gt,
    /// `a >= b`
    Ge,
}

impl CmpOp {
    /// Every comparison.
    ///
    /// ```
    /// use tensorfn_kernels::CmpOp;
    /// // Every comparison but `Ne` is false with a NaN operand.
    /// let true_on_nan: Vec<_> = CmpOp::ALL.into_iter().filter(|op| op.eval_f64(f64::NAN, 1.0)).collect();
    /// assert_eq!(true_on_nan, [CmpOp::Ne]);
    /// ```
    pub const ALL: [CmpOp; 6] = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];

    /// The name used in kernel names and messages (PyTorch's `torch.eq`, ...).
    ///
    /// ```
    /// use tensorfn_kernels::CmpOp;
    /// assert_eq!(CmpOp::Ge.name(), "ge");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }

    /// The comparison in `f64`, the reference of the back-ends.
    ///
    /// ```
    /// use tensorfn_kernels::CmpOp;
    /// assert!(CmpOp::Lt.eval_f64(-1.0, 0.0));
    /// assert!(!CmpOp::Lt.eval_f64(f64::NAN, 0.0));
    /// assert!(CmpOp::Eq.eval_f64(0.0, -0.0)); // IEEE: signed zeros are equal
    /// ```
    pub fn eval_f64(self, a: f64, b: f64) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}
