//! Reductions along a dim and comparisons of two elements.

/// A reduction along one dim.
///
/// ```
/// use tensorfn_core::ops::ReduceOp;
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
    /// Every reduction.
    ///
    /// ```
    /// use tensorfn_core::ops::ReduceOp;
    /// assert!(ReduceOp::ALL.iter().all(|op| ReduceOp::from_name(op.name()) == Some(*op)));
    /// ```
    pub const ALL: [ReduceOp; 6] = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::ArgMax,
        ReduceOp::ArgMin,
    ];

    /// Looks a reduction up by [`name`](Self::name).
    ///
    /// ```
    /// use tensorfn_core::ops::ReduceOp;
    /// assert_eq!(ReduceOp::from_name("argmax"), Some(ReduceOp::ArgMax));
    /// ```
    pub fn from_name(name: &str) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// The name used in `tensor_fn!` and in kernel names.
    ///
    /// ```
    /// use tensorfn_core::ops::ReduceOp;
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
    /// use tensorfn_core::ops::ReduceOp;
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
/// use tensorfn_core::ops::CmpOp;
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
    /// use tensorfn_core::ops::CmpOp;
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
    /// use tensorfn_core::ops::CmpOp;
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

    /// The Rust operator (`<`, `==`, ...), as written inside `tensor_fn!`.
    ///
    /// ```
    /// use tensorfn_core::ops::CmpOp;
    /// assert_eq!(CmpOp::Le.symbol(), "<=");
    /// ```
    pub const fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    /// Looks a comparison up by [`name`](Self::name) (`lt`, ...).
    ///
    /// ```
    /// use tensorfn_core::ops::CmpOp;
    /// assert_eq!(CmpOp::from_name("ge"), Some(CmpOp::Ge));
    /// ```
    pub fn from_name(name: &str) -> Option<CmpOp> {
        CmpOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// The comparison in `f64`, the reference of the back-ends.
    ///
    /// ```
    /// use tensorfn_core::ops::CmpOp;
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
