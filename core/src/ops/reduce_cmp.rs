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
        self.apply(a, b)
    }

    /// `a op b` for any ordered type: the one definition the CPU loops,
    /// the macro's closures and the f64 reference share.
    ///
    /// ```
    /// use tensorfn_core::ops::CmpOp;
    /// assert!(CmpOp::Ge.apply(3_i32, 3));
    /// assert!(CmpOp::Ne.apply(f32::NAN, f32::NAN));
    /// ```
    #[inline(always)]
    pub fn apply<T: PartialOrd>(self, a: T, b: T) -> bool {
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

/// Runs `$body` with `$c` bound to `$op` as a constant, so that a loop over
/// elements is compiled once per comparison with the comparison inlined.
///
/// ```
/// use tensorfn_core::{with_cmp_op, ops::CmpOp};
/// let op = CmpOp::Lt;
/// let count = with_cmp_op!(op, C => [1, 5, 2].iter().filter(|&&x| C.apply(x, 3)).count());
/// assert_eq!(count, 2);
/// ```
#[macro_export]
macro_rules! with_cmp_op {
    ($op:expr, $c:ident => $body:expr) => {{
        use $crate::ops::CmpOp as __Cmp;
        match $op {
            __Cmp::Eq => {
                const $c: __Cmp = __Cmp::Eq;
                $body
            }
            __Cmp::Ne => {
                const $c: __Cmp = __Cmp::Ne;
                $body
            }
            __Cmp::Lt => {
                const $c: __Cmp = __Cmp::Lt;
                $body
            }
            __Cmp::Le => {
                const $c: __Cmp = __Cmp::Le;
                $body
            }
            __Cmp::Gt => {
                const $c: __Cmp = __Cmp::Gt;
                $body
            }
            __Cmp::Ge => {
                const $c: __Cmp = __Cmp::Ge;
                $body
            }
        }
    }};
}
