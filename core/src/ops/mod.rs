//! The op catalogue: every operation of `tensor_fn!` and the typed API,
//! described once.
//!
//! An entry ([`OpDef`]) gives an op's name, whether it is written as a
//! function (`relu(x)`), a method (`x.relu()`) or both, its parameters
//! with PyTorch's names and defaults, its dtype rule, its shape rule (a
//! function of [`rules`](crate::rules)) and the slot for its derivative.
//! The macro's checker dispatches on [`OpDef::kind`], binds arguments by
//! [`OpDef::params`] and writes its suggestions from the catalogue, so no
//! other list of op names exists.
//!
//! Elementwise ops are described in more detail by their own tables
//! ([`UnaryOp`], [`BinaryOp`], [`CmpOp`]): the `f64` reference, and for
//! composites, the definition over [`ElemMath`] that every back-end runs.
//! Row ops (`softmax`) have a table of their own too ([`RowOp`]).
//!
//! ```
//! use tensorfn_core::ops::{self, OpKind, UnaryOp};
//! let gelu = ops::function("gelu").unwrap();
//! assert_eq!(gelu.kind, OpKind::Unary(UnaryOp::Gelu));
//! assert!(gelu.method); // x.gelu() too
//! let cat = ops::function("cat").unwrap();
//! assert_eq!(cat.params[1].name, "dim");
//! assert!(ops::method("cat").is_none()); // a function only
//! assert_eq!(ops::closest("sofmax", ops::Form::Method), Some("softmax"));
//! ```

/// The part every op table's enum shares: the enum with its variants'
/// docs, `ALL` in catalogue order, `name`, `summary` (the first doc line)
/// and `from_name`. Each table's own `define_*` macro calls it, then adds
/// the methods of its entries' other fields.
macro_rules! op_enum {
    ($(#[doc = $edoc:literal])* $Enum:ident {
        $($(#[doc = $doc:literal])* $V:ident => $m:ident),* $(,)?
    }) => {
        $(#[doc = $edoc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $Enum {
            $($(#[doc = $doc])* $V,)*
        }

        impl $Enum {
            /// Every op of the table, in catalogue order.
            ///
            #[doc = concat!("```\nuse tensorfn_core::ops::", stringify!($Enum), ";\nlet all = ", stringify!($Enum), "::ALL;\nassert!(all.iter().all(|op| ", stringify!($Enum), "::from_name(op.name()) == Some(*op)));\n```")]
            pub const ALL: [$Enum; [$(stringify!($V)),*].len()] = [$($Enum::$V),*];

            /// The name used in `tensor_fn!`, the typed API and kernel names.
            ///
            #[doc = concat!("```\nuse tensorfn_core::ops::", stringify!($Enum), ";\nassert!(", stringify!($Enum), "::ALL.iter().all(|op| !op.name().is_empty()));\n```")]
            pub const fn name(self) -> &'static str {
                match self {
                    $($Enum::$V => stringify!($m),)*
                }
            }

            /// What the op computes, in one sentence (the first line of its
            /// doc, for messages).
            ///
            #[doc = concat!("```\nuse tensorfn_core::ops::", stringify!($Enum), ";\nassert!(", stringify!($Enum), "::ALL.iter().all(|op| !op.summary().is_empty()));\n```")]
            pub fn summary(self) -> &'static str {
                match self {
                    $($Enum::$V => [$($doc),*][0].trim(),)*
                }
            }

            /// Looks an op up by [`name`](Self::name).
            ///
            #[doc = concat!("```\nuse tensorfn_core::ops::", stringify!($Enum), ";\nassert_eq!(", stringify!($Enum), "::from_name(\"no_such_op\"), None);\n```")]
            pub fn from_name(name: &str) -> Option<$Enum> {
                $Enum::ALL.into_iter().find(|op| op.name() == name)
            }
        }
    };
}

pub mod binary;
pub mod conv;
pub mod dropout;
pub mod erf_coeffs;
pub mod math;
pub mod norm;
pub mod pool;
mod reduce_cmp;
pub mod rope;
pub mod rows;
pub mod unary;
pub mod xent;

pub use binary::BinaryOp;
pub use math::ElemMath;
pub use norm::NormOp;
pub use pool::PoolKind;
pub use reduce_cmp::{CmpOp, ReduceOp};
pub use rows::{RowOp, RowShape};
pub use unary::UnaryOp;

/// The `libm` functions the tables' references use (reached through
/// `$crate` from the exported table macros).
#[doc(hidden)]
pub use libm;

/// What an op is, for the code that dispatches on it.
///
/// ```
/// use tensorfn_core::ops::{self, CmpOp, OpKind};
/// assert_eq!(ops::method("lt").unwrap().kind, OpKind::Compare(CmpOp::Lt));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// An elementwise function of one tensor.
    Unary(UnaryOp),
    /// An elementwise function of two operands, broadcast together.
    Binary(BinaryOp),
    /// An elementwise comparison giving `bool`.
    Compare(CmpOp),
    /// `where_(cond, a, b)`: `a` where `cond`, else `b`.
    Where,
    /// `x.masked_fill(mask, value)`: `value` where `mask`, else `x`.
    MaskedFill,
    /// `x.clamp(min, max)`.
    Clamp,
    /// A reduction along one dim (or all of them).
    Reduce(ReduceOp),
    /// `x.var(dim, correction, keepdim)`: a composite of reductions.
    Var,
    /// A function of whole rows along a dim (`softmax`, ...).
    Row(RowOp),
    /// A normalisation over the last dim (`layer_norm`, `rms_norm`).
    Norm(NormOp),
    /// `batch_norm(input, running_mean, running_var, weight, bias,
    /// training, momentum, eps)`: per channel (dim 1), a composite of
    /// reductions and elementwise ops.
    BatchNorm,
    /// `rope(input, cos, sin)`: rotary position embedding.
    Rope,
    /// `matmul`, batched, broadcasting leading dims.
    MatMul,
    /// `mm`: two matrices.
    Mm,
    /// `bmm`: two batches of matrices.
    Bmm,
    /// `dot`: two vectors.
    Dot,
    /// `addmm(bias, m1, m2)`.
    AddMm,
    /// `addcmul(input, t1, t2, value)`.
    AddCmul,
    /// `cat([..], dim)`.
    Cat,
    /// `scaled_dot_product_attention(query, key, value, attn_mask, is_causal, scale, enable_gqa)`.
    Attention,
    /// `reshape` (`view: false`) or `view`.
    Reshape {
        /// True for `view`.
        view: bool,
        /// True for `reshape_unordered`/`view_unordered`: the target need
        /// not keep the order of the source's dims (no reorder check).
        unordered: bool,
    },
    /// `unsqueeze(dim)`: a dim of size 1 inserted.
    Unsqueeze,
    /// `squeeze(dim)`: a dim of size 1 removed.
    Squeeze,
    /// `expand(size)`: dims of size 1 repeated, as a view.
    Expand,
    /// `repeat_interleave(repeats, dim)`: each element along `dim` repeated.
    RepeatInterleave,
    /// `stack([..], dim)`: tensors of one shape along a new dim.
    Stack,
    /// `t`, `permute`, `transpose`.
    Reorder,
    /// `narrow(dim, start, length)`.
    Narrow,
    /// `embedding(input, weight)`: rows of a table picked by integer ids.
    Embedding,
    /// `index_select(input, dim, index)`: positions along `dim` picked by
    /// a 1-D integer index.
    IndexSelect,
    /// `gather(input, dim, index)`: along `dim`, the element each entry of
    /// `index` names.
    Gather,
    /// `index_add(input, dim, index, source, alpha)`: entries of `source`
    /// added at the positions along `dim` that the 1-D `index` lists.
    IndexAdd,
    /// `scatter_add(input, dim, index, src)`: each entry of `src` added at
    /// the position along `dim` that `index` names.
    ScatterAdd,
    /// `cross_entropy(input, target, ..)`: the loss of class logits
    /// against class indices.
    CrossEntropy,
    /// `cumsum(input, dim)`: the cumulative sum along `dim`.
    Cumsum,
    /// `topk(input, k, dim, largest, sorted)`: the `k` largest (or
    /// smallest) elements along `dim` and their positions, a tuple
    /// `(values, indices)`.
    TopK,
    /// `multinomial(input, num_samples, replacement, seed)`: category
    /// indices drawn from rows of weights along the last dim.
    Multinomial,
    /// `max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d` over the last two
    /// dims of `[N, C, H, W]` or `[C, H, W]`.
    Pool(PoolKind),
    /// `dropout(input, p, training, seed)`: elements zeroed with
    /// probability `p` by a mask hashed from `seed`, the others scaled by
    /// `1 / (1 - p)`.
    Dropout,
    /// `flatten(input, start_dim, end_dim)`: dims `start_dim..=end_dim`
    /// merged into one (a view where the layout allows).
    Flatten,
    /// `conv2d(input, weight, bias, stride, padding, dilation, groups)`
    /// (`spatial: 2`) or `conv1d` (`spatial: 1`).
    Conv {
        /// The number of spatial dims.
        spatial: usize,
    },
    /// `arange(end)` or `arange(start, end)`: `start, .., end - 1` as `i64`.
    Arange,
    /// `tril` (`upper: false`) or `triu` of the last two dims.
    Triangle {
        /// True for `triu`.
        upper: bool,
    },
    /// `cast::<T>()`.
    Cast,
    /// `to_device::<D>()` and `to_cpu()`.
    ToDevice,
}

/// How a parameter is passed.
///
/// ```
/// use tensorfn_core::ops::{self, ParamKind};
/// assert_eq!(ops::function("cat").unwrap().params[0].kind, ParamKind::Tensors);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A tensor.
    Tensor,
    /// A tensor or a scalar (broadcast).
    TensorOrScalar,
    /// A list of tensors (`[a, b]`).
    Tensors,
    /// A scalar.
    Scalar,
    /// A dim index (`-1` is the last).
    Dim,
    /// A list of dims or sizes (`[B, T, C]`).
    Dims,
}

/// One parameter of an op, with PyTorch's name.
///
/// ```
/// use tensorfn_core::ops;
/// let p = &ops::function("leaky_relu").unwrap().params[1];
/// assert_eq!((p.name, p.default), ("negative_slope", Some("0.01")));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    /// PyTorch's name (usable as a keyword argument).
    pub name: &'static str,
    /// How it is passed.
    pub kind: ParamKind,
    /// Its default, for optional parameters.
    pub default: Option<&'static str>,
}

/// The dtype of the result.
///
/// ```
/// use tensorfn_core::ops::{self, DTypeRule};
/// assert_eq!(ops::method("eq").unwrap().dtype, DTypeRule::Bool);
/// assert_eq!(ops::method("sqrt").unwrap().dtype, DTypeRule::SameFloat);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DTypeRule {
    /// The operands' common dtype, any numeric one.
    Same,
    /// The operands' common dtype, which must be a float.
    SameFloat,
    /// `bool`, from operands of one dtype.
    Bool,
    /// `i64` positions.
    Index,
    /// The input's dtype for a float, `i64` for an integer (`cumsum`, as
    /// PyTorch's).
    FloatOrI64,
    /// The dtype named by the call (`cast::<T>()`).
    Named,
}

/// The shape rule: which function of [`rules`](crate::rules) gives the
/// result's dims (the macro applies it to symbolic dims, the runtime to
/// `usize`s).
///
/// ```
/// use tensorfn_core::ops::{self, ShapeRule};
/// assert_eq!(ops::function("where_").unwrap().shape, ShapeRule::Broadcast);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeRule {
    /// The input's dims.
    Same,
    /// The operands broadcast together ([`rules::broadcast`](crate::rules::broadcast)).
    Broadcast,
    /// The dim removed ([`rules::reduce`](crate::rules::reduce)).
    Reduce,
    /// [`rules::matmul`](crate::rules::matmul).
    MatMul,
    /// [`rules::mm`](crate::rules::mm).
    Mm,
    /// [`rules::bmm`](crate::rules::bmm).
    Bmm,
    /// [`rules::dot`](crate::rules::dot).
    Dot,
    /// [`rules::addmm`](crate::rules::addmm).
    AddMm,
    /// [`rules::cat`](crate::rules::cat).
    Cat,
    /// [`rules::attention`](crate::rules::attention).
    Attention,
    /// [`rules::reshape`](crate::rules::reshape).
    Reshape,
    /// [`rules::unsqueeze`](crate::rules::unsqueeze).
    Unsqueeze,
    /// [`rules::squeeze`](crate::rules::squeeze).
    Squeeze,
    /// [`rules::expand`](crate::rules::expand).
    Expand,
    /// [`rules::repeat_interleave`](crate::rules::repeat_interleave).
    RepeatInterleave,
    /// [`rules::stack`](crate::rules::stack).
    Stack,
    /// [`rules::permute`](crate::rules::permute), [`rules::t`](crate::rules::t), [`rules::transpose`](crate::rules::transpose).
    Reorder,
    /// [`rules::slice`](crate::rules::slice).
    Slice,
    /// [`rules::embedding`](crate::rules::embedding).
    Embedding,
    /// [`rules::index_select`](crate::rules::index_select).
    IndexSelect,
    /// [`rules::gather`](crate::rules::gather).
    Gather,
    /// [`rules::index_add`](crate::rules::index_add).
    IndexAdd,
    /// [`rules::scatter_add`](crate::rules::scatter_add).
    ScatterAdd,
    /// [`rules::cross_entropy`](crate::rules::cross_entropy).
    CrossEntropy,
    /// [`rules::topk`](crate::rules::topk).
    TopK,
    /// [`rules::multinomial`](crate::rules::multinomial).
    Multinomial,
    /// [`rules::conv`](crate::rules::conv).
    Conv,
    /// `[end]`.
    Arange,
    /// [`rules::triangle`](crate::rules::triangle).
    Triangle,
    /// [`rules::norm`](crate::rules::norm).
    Norm,
    /// [`rules::rope`](crate::rules::rope).
    Rope,
    /// [`rules::batch_norm`](crate::rules::batch_norm).
    BatchNorm,
    /// [`rules::pool2d`](crate::rules::pool2d).
    Pool,
    /// [`rules::flatten`](crate::rules::flatten).
    Flatten,
}

/// Whether an op has a derivative: the macro's `#[grad]` follows it
/// (`macros/impl/src/grad.rs` holds the rule of every op marked
/// [`Rule`](Derivative::Rule), written with the graph's own ops).
///
/// ```
/// use tensorfn_core::ops::{self, Derivative};
/// assert_eq!(ops::function("relu").unwrap().derivative, Derivative::Rule);
/// assert_eq!(ops::method("argmax").unwrap().derivative, Derivative::None);
/// assert_eq!(ops::function("embedding").unwrap().derivative, Derivative::Rule);
/// assert_eq!(ops::function("scaled_dot_product_attention").unwrap().derivative, Derivative::Rule);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Derivative {
    /// Differentiable: `#[grad]` passes through it.
    Rule,
    /// Not written yet: differentiating through the op is a compile error
    /// (no op of the catalogue is left in this state; a new op may start
    /// in it).
    Pending,
    /// Not differentiable (comparisons, `argmax`, `arange`): a compile
    /// error on the path to a differentiated parameter; a comparison used
    /// as a mask (`where_`'s condition) is fine.
    None,
}

/// The derivative of each kind of op (the row ops' come from their
/// table).
const fn derivative_of(kind: OpKind) -> Derivative {
    match kind {
        // A draw has no gradient. `topk`'s values pass theirs to the
        // picked positions (its indices, like `argmax`'s, have none).
        OpKind::Compare(_) | OpKind::Arange | OpKind::Multinomial => Derivative::None,
        OpKind::Reduce(ReduceOp::ArgMax | ReduceOp::ArgMin) => Derivative::None,
        _ => Derivative::Rule,
    }
}

/// One op of the catalogue.
///
/// ```
/// use tensorfn_core::ops;
/// let softmax = ops::method("softmax").unwrap();
/// assert!(softmax.function && softmax.method);
/// assert_eq!(softmax.signature(), "softmax(input, dim)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpDef {
    /// The name (`x.name(..)`, `name(x, ..)`).
    pub name: &'static str,
    /// What it is.
    pub kind: OpKind,
    /// True when written `name(x, ..)`.
    pub function: bool,
    /// True when written `x.name(..)` (the first parameter is the receiver).
    pub method: bool,
    /// The parameters, the receiver of the method form first.
    pub params: &'static [Param],
    /// The result's dtype.
    pub dtype: DTypeRule,
    /// The result's dims.
    pub shape: ShapeRule,
    /// Its derivative.
    pub derivative: Derivative,
    /// What it computes.
    pub summary: &'static str,
}

impl OpDef {
    /// The call as PyTorch documents it: `name(a, b=default)`.
    ///
    /// ```
    /// use tensorfn_core::ops;
    /// assert_eq!(ops::function("elu").unwrap().signature(), "elu(input, alpha=1.0)");
    /// ```
    pub fn signature(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| match p.default {
                Some(d) => format!("{}={d}", p.name),
                None => p.name.to_string(),
            })
            .collect();
        format!("{}({})", self.name, params.join(", "))
    }

    /// The number of parameters without a default.
    ///
    /// ```
    /// use tensorfn_core::ops;
    /// assert_eq!(ops::function("leaky_relu").unwrap().required(), 1);
    /// ```
    pub fn required(&self) -> usize {
        self.params.iter().filter(|p| p.default.is_none()).count()
    }
}

/// Which form a name is looked up in.
///
/// ```
/// use tensorfn_core::ops::{self, Form};
/// assert!(ops::lookup("view", Form::Method).is_some());
/// assert!(ops::lookup("view", Form::Function).is_none());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `name(x, ..)`.
    Function,
    /// `x.name(..)`.
    Method,
}

const fn p(name: &'static str, kind: ParamKind) -> Param {
    Param {
        name,
        kind,
        default: None,
    }
}

const fn opt(name: &'static str, kind: ParamKind, default: &'static str) -> Param {
    Param {
        name,
        kind,
        default: Some(default),
    }
}

const INPUT: Param = p("input", ParamKind::Tensor);

/// `conv1d`/`conv2d`: PyTorch's parameters (`stride`, `padding` and
/// `dilation` an int or, for `conv2d`, a pair `(h, w)`).
const CONV_PARAMS: &[Param] = &[
    INPUT,
    p("weight", ParamKind::Tensor),
    opt("bias", ParamKind::Tensor, "None"),
    opt("stride", ParamKind::Scalar, "1"),
    opt("padding", ParamKind::Scalar, "0"),
    opt("dilation", ParamKind::Scalar, "1"),
    opt("groups", ParamKind::Scalar, "1"),
];

const fn conv(name: &'static str, spatial: usize, summary: &'static str) -> OpDef {
    def(
        name,
        OpKind::Conv { spatial },
        true,
        false,
        CONV_PARAMS,
        DTypeRule::SameFloat,
        ShapeRule::Conv,
        summary,
    )
}
const INPUT_DIM: &[Param] = &[INPUT, p("dim", ParamKind::Dim)];
const OTHER: Param = p("other", ParamKind::TensorOrScalar);

#[allow(clippy::too_many_arguments)]
const fn def(
    name: &'static str,
    kind: OpKind,
    function: bool,
    method: bool,
    params: &'static [Param],
    dtype: DTypeRule,
    shape: ShapeRule,
    summary: &'static str,
) -> OpDef {
    OpDef {
        name,
        kind,
        function,
        method,
        params,
        dtype,
        shape,
        derivative: derivative_of(kind),
        summary,
    }
}

/// The unary ops' entries, from their table.
macro_rules! unary_defs {
    ($($(#[doc = $doc:literal])* $V:ident => $m:ident { ints: $ints:literal, $($field:tt)* })*) => {
        &[$(def(
            stringify!($m),
            OpKind::Unary(UnaryOp::$V),
            true,
            true,
            &[INPUT],
            if $ints { DTypeRule::Same } else { DTypeRule::SameFloat },
            ShapeRule::Same,
            [$($doc),*][0],
        )),*]
    };
}

/// The binary ops' entries, from their table.
macro_rules! binary_defs {
    ($($(#[doc = $doc:literal])* $V:ident => $m:ident {
        ints: $ints:literal, exact: $exact:literal, symbol: $symbol:expr, operand: $operand:literal, $($field:tt)*
    })*) => {
        &[$(def(
            stringify!($m),
            OpKind::Binary(BinaryOp::$V),
            true,
            true,
            const { &[INPUT, binary_operand($operand)] },
            if $ints { DTypeRule::Same } else { DTypeRule::SameFloat },
            ShapeRule::Broadcast,
            [$($doc),*][0],
        )),*]
    };
}

/// The row ops' entries, from their table: `name(input, dim)` and
/// `input.name(dim)`, like PyTorch's.
macro_rules! row_defs {
    ($($(#[doc = $doc:literal])* $V:ident => $m:ident { $($field:tt)* })*) => {
        &[$(row_def(RowOp::$V, [$($doc),*][0])),*]
    };
}

const fn row_def(op: RowOp, summary: &'static str) -> OpDef {
    OpDef {
        name: op.name(),
        kind: OpKind::Row(op),
        function: true,
        method: true,
        params: INPUT_DIM,
        dtype: op.dtype(),
        shape: match op.shape() {
            RowShape::Keep => ShapeRule::Same,
            RowShape::Reduce => ShapeRule::Reduce,
        },
        derivative: op.derivative(),
        summary,
    }
}

/// The second parameter of a binary op, with PyTorch's default where it
/// has one.
const fn binary_operand(name: &'static str) -> Param {
    match name.as_bytes() {
        b"negative_slope" => opt("negative_slope", ParamKind::TensorOrScalar, "0.01"),
        b"alpha" => opt("alpha", ParamKind::TensorOrScalar, "1.0"),
        _ => p(name, ParamKind::TensorOrScalar),
    }
}

static UNARY: &[OpDef] = crate::for_each_unary_op!(unary_defs);
static BINARY: &[OpDef] = crate::for_each_binary_op!(binary_defs);
static ROWS: &[OpDef] = crate::for_each_row_op!(row_defs);

const fn compare(name: &'static str, op: CmpOp, summary: &'static str) -> OpDef {
    def(
        name,
        OpKind::Compare(op),
        true,
        true,
        &[INPUT, OTHER],
        DTypeRule::Bool,
        ShapeRule::Broadcast,
        summary,
    )
}

/// A reduction's parameters: `dim` (none: every element) and `keepdim`.
const REDUCE_PARAMS: &[Param] = &[
    INPUT,
    opt("dim", ParamKind::Dim, "None"),
    opt("keepdim", SCALAR, "false"),
];

const fn reduce(
    name: &'static str,
    op: ReduceOp,
    dtype: DTypeRule,
    summary: &'static str,
) -> OpDef {
    def(
        name,
        OpKind::Reduce(op),
        false,
        true,
        REDUCE_PARAMS,
        dtype,
        ShapeRule::Reduce,
        summary,
    )
}

const RESHAPE_PARAMS: &[Param] = &[INPUT, p("shape", ParamKind::Dims)];

const fn reshape(name: &'static str, view: bool, unordered: bool, summary: &'static str) -> OpDef {
    def(
        name,
        OpKind::Reshape { view, unordered },
        false,
        true,
        RESHAPE_PARAMS,
        DTypeRule::Same,
        ShapeRule::Reshape,
        summary,
    )
}

const SCALAR: ParamKind = ParamKind::Scalar;
const TENSOR: ParamKind = ParamKind::Tensor;

/// The ops before the row ops, after the elementwise tables: comparisons,
/// selections and reductions (two lists, so that the catalogue's order,
/// which messages list names in, keeps each kind together).
static EARLIER: &[OpDef] = &[
    compare("eq", CmpOp::Eq, "`a == b`, elementwise, as `bool`."),
    compare(
        "ne",
        CmpOp::Ne,
        "`a != b`, elementwise, as `bool` (true where either is NaN).",
    ),
    compare("lt", CmpOp::Lt, "`a < b`, elementwise, as `bool`."),
    compare("le", CmpOp::Le, "`a <= b`, elementwise, as `bool`."),
    compare("gt", CmpOp::Gt, "`a > b`, elementwise, as `bool`."),
    compare("ge", CmpOp::Ge, "`a >= b`, elementwise, as `bool`."),
    def(
        "where_",
        OpKind::Where,
        true,
        false,
        &[
            p("condition", TENSOR),
            p("input", ParamKind::TensorOrScalar),
            OTHER,
        ],
        DTypeRule::Same,
        ShapeRule::Broadcast,
        "`input` where `condition` is true, else `other` (`torch.where`).",
    ),
    def(
        "masked_fill",
        OpKind::MaskedFill,
        true,
        true,
        &[INPUT, p("mask", TENSOR), p("value", SCALAR)],
        DTypeRule::Same,
        ShapeRule::Broadcast,
        "`value` where `mask` is true, else `input`.",
    ),
    def(
        "clamp",
        OpKind::Clamp,
        true,
        true,
        &[
            INPUT,
            opt("min", ParamKind::TensorOrScalar, "None"),
            opt("max", ParamKind::TensorOrScalar, "None"),
        ],
        DTypeRule::Same,
        ShapeRule::Broadcast,
        "`min(max(input, min), max)` (NaN stays NaN).",
    ),
    reduce("sum", ReduceOp::Sum, DTypeRule::Same, "Sum along `dim`."),
    reduce(
        "mean",
        ReduceOp::Mean,
        DTypeRule::SameFloat,
        "Mean along `dim`.",
    ),
    def(
        "var",
        OpKind::Var,
        false,
        true,
        &[
            INPUT,
            opt("dim", ParamKind::Dim, "None"),
            opt("correction", SCALAR, "1"),
            opt("keepdim", SCALAR, "false"),
        ],
        DTypeRule::SameFloat,
        ShapeRule::Reduce,
        "Variance along `dim`: `sum((x - mean)^2) / (n - correction)` (Bessel's correction by default, as PyTorch).",
    ),
    reduce(
        "max",
        ReduceOp::Max,
        DTypeRule::Same,
        "Largest element along `dim` (NaN propagates).",
    ),
    reduce(
        "min",
        ReduceOp::Min,
        DTypeRule::Same,
        "Smallest element along `dim` (NaN propagates).",
    ),
    reduce(
        "argmax",
        ReduceOp::ArgMax,
        DTypeRule::Index,
        "Position of the first largest element along `dim`.",
    ),
    reduce(
        "argmin",
        ReduceOp::ArgMin,
        DTypeRule::Index,
        "Position of the first smallest element along `dim`.",
    ),
];

/// The normalisations over the last dim and `rope`, after the row ops.
static NORMS: &[OpDef] = &[
    def(
        "layer_norm",
        OpKind::Norm(NormOp::LayerNorm),
        true,
        true,
        &[
            INPUT,
            p("weight", TENSOR),
            p("bias", TENSOR),
            opt("eps", SCALAR, "1e-05"),
        ],
        DTypeRule::SameFloat,
        ShapeRule::Norm,
        "`(input - mean) / sqrt(var + eps) * weight + bias` over the last dim.",
    ),
    def(
        "rms_norm",
        OpKind::Norm(NormOp::RmsNorm),
        true,
        true,
        &[INPUT, p("weight", TENSOR), opt("eps", SCALAR, "None")],
        DTypeRule::SameFloat,
        ShapeRule::Norm,
        "`input / sqrt(mean(input^2) + eps) * weight` over the last dim.",
    ),
    def(
        "batch_norm",
        OpKind::BatchNorm,
        true,
        false,
        &[
            INPUT,
            p("running_mean", TENSOR),
            p("running_var", TENSOR),
            opt("weight", TENSOR, "None"),
            opt("bias", TENSOR, "None"),
            opt("training", SCALAR, "false"),
            opt("momentum", SCALAR, "0.1"),
            opt("eps", SCALAR, "1e-05"),
        ],
        DTypeRule::SameFloat,
        ShapeRule::BatchNorm,
        "`(input - mean) / sqrt(var + eps) * weight + bias` per channel (dim 1): the running statistics, or with `training = true` the batch's (biased variance); the running statistics are not updated inside a `tensor_fn!` (see `BatchNorm`).",
    ),
    def(
        "rope",
        OpKind::Rope,
        true,
        false,
        &[INPUT, p("cos", TENSOR), p("sin", TENSOR)],
        DTypeRule::SameFloat,
        ShapeRule::Rope,
        "`input * cos + rotate_half(input) * sin` (rotary position embedding, Hugging Face's Llama convention).",
    ),
];

/// The pooling ops over the last two dims, after the normalisations.
static POOLS: &[OpDef] = &[
    def(
        "max_pool2d",
        OpKind::Pool(PoolKind::Max),
        true,
        false,
        &[
            INPUT,
            p("kernel_size", ParamKind::Dims),
            opt("stride", ParamKind::Dims, "None"),
            opt("padding", ParamKind::Dims, "0"),
            opt("dilation", ParamKind::Dims, "1"),
            opt("ceil_mode", SCALAR, "false"),
        ],
        DTypeRule::SameFloat,
        ShapeRule::Pool,
        "The largest element of each `kernel_size` window of the last two dims (NaN if the window has one), windows `stride` apart (`kernel_size` by default), `padding` of -inf, taps `dilation` apart.",
    ),
    def(
        "avg_pool2d",
        OpKind::Pool(PoolKind::Avg),
        true,
        false,
        &[
            INPUT,
            p("kernel_size", ParamKind::Dims),
            opt("stride", ParamKind::Dims, "None"),
            opt("padding", ParamKind::Dims, "0"),
            opt("ceil_mode", SCALAR, "false"),
            opt("count_include_pad", SCALAR, "true"),
            opt("divisor_override", SCALAR, "None"),
        ],
        DTypeRule::SameFloat,
        ShapeRule::Pool,
        "The mean of each `kernel_size` window of the last two dims, windows `stride` apart (`kernel_size` by default), `padding` of zeros counted in the divisor when `count_include_pad`.",
    ),
    def(
        "adaptive_avg_pool2d",
        OpKind::Pool(PoolKind::AdaptiveAvg),
        true,
        false,
        &[INPUT, p("output_size", ParamKind::Dims)],
        DTypeRule::SameFloat,
        ShapeRule::Pool,
        "The mean of windows that tile the last two dims into `output_size` (`floor(i * H / out)` to `ceil((i + 1) * H / out)`, as PyTorch).",
    ),
    def(
        "flatten",
        OpKind::Flatten,
        true,
        true,
        &[
            INPUT,
            opt("start_dim", ParamKind::Dim, "0"),
            opt("end_dim", ParamKind::Dim, "-1"),
        ],
        DTypeRule::Same,
        ShapeRule::Flatten,
        "Dims `start_dim..=end_dim` merged into one (a view when the layout allows; `nn.Flatten` is `start_dim = 1`).",
    ),
    def(
        "dropout",
        OpKind::Dropout,
        true,
        true,
        &[
            INPUT,
            opt("p", SCALAR, "0.5"),
            opt("training", SCALAR, "true"),
            opt("seed", SCALAR, "None"),
        ],
        DTypeRule::SameFloat,
        ShapeRule::Same,
        "Each element zeroed with probability `p` and the others scaled by `1 / (1 - p)` when `training`, by a mask hashed from the `usize` `seed` and the element's position (the same on every device; the identity when not `training`).",
    ),
    def(
        "topk",
        OpKind::TopK,
        true,
        true,
        &[
            INPUT,
            p("k", SCALAR),
            opt("dim", ParamKind::Dim, "-1"),
            opt("largest", SCALAR, "true"),
            opt("sorted", SCALAR, "true"),
        ],
        DTypeRule::Same,
        ShapeRule::TopK,
        "The `k` largest elements along `dim`, largest first (`largest = false`: the `k` smallest, smallest first), and their positions (`i64`): a tuple `(values, indices)` as `torch.topk` (NaN counts as larger than every number; ties in order of position; a `sorted = false` result is sorted too).",
    ),
    def(
        "multinomial",
        OpKind::Multinomial,
        true,
        true,
        &[
            INPUT,
            p("num_samples", SCALAR),
            opt("replacement", SCALAR, "false"),
            opt("seed", SCALAR, "None"),
        ],
        DTypeRule::Index,
        ShapeRule::Multinomial,
        "`num_samples` category indices (`i64`) per row drawn from the non-negative weights along the last dim, with or without `replacement`, by a generator hashed from the `usize` `seed` and the draw's position (the same on every device).",
    ),
];

/// Every op after the row ops: products, `cat`, views and conversions.
static LATER: &[OpDef] = &[
    def(
        "matmul",
        OpKind::MatMul,
        true,
        true,
        &[INPUT, p("other", TENSOR)],
        DTypeRule::SameFloat,
        ShapeRule::MatMul,
        "Matrix product, batched over leading dims.",
    ),
    def(
        "mm",
        OpKind::Mm,
        true,
        true,
        &[INPUT, p("other", TENSOR)],
        DTypeRule::SameFloat,
        ShapeRule::Mm,
        "Product of two matrices.",
    ),
    def(
        "bmm",
        OpKind::Bmm,
        true,
        true,
        &[INPUT, p("other", TENSOR)],
        DTypeRule::SameFloat,
        ShapeRule::Bmm,
        "Products of two batches of matrices.",
    ),
    def(
        "dot",
        OpKind::Dot,
        true,
        true,
        &[INPUT, p("other", TENSOR)],
        DTypeRule::SameFloat,
        ShapeRule::Dot,
        "Dot product of two vectors.",
    ),
    def(
        "addmm",
        OpKind::AddMm,
        true,
        false,
        &[
            INPUT,
            p("mat1", TENSOR),
            p("mat2", TENSOR),
            opt("beta", SCALAR, "1"),
            opt("alpha", SCALAR, "1"),
        ],
        DTypeRule::SameFloat,
        ShapeRule::AddMm,
        "`beta * input + alpha * (mat1 @ mat2)`, `input` broadcast.",
    ),
    def(
        "addcmul",
        OpKind::AddCmul,
        true,
        false,
        &[
            INPUT,
            p("tensor1", TENSOR),
            p("tensor2", TENSOR),
            opt("value", SCALAR, "1"),
        ],
        DTypeRule::Same,
        ShapeRule::Broadcast,
        "`input + value * tensor1 * tensor2`.",
    ),
    def(
        "cat",
        OpKind::Cat,
        true,
        false,
        &[p("tensors", ParamKind::Tensors), p("dim", ParamKind::Dim)],
        DTypeRule::Same,
        ShapeRule::Cat,
        "Joins tensors along `dim`.",
    ),
    def(
        "scaled_dot_product_attention",
        OpKind::Attention,
        true,
        false,
        &[
            p("query", TENSOR),
            p("key", TENSOR),
            p("value", TENSOR),
            opt("attn_mask", TENSOR, "None"),
            opt("is_causal", SCALAR, "false"),
            opt("scale", SCALAR, "None"),
            opt("enable_gqa", SCALAR, "false"),
        ],
        DTypeRule::SameFloat,
        ShapeRule::Attention,
        "`softmax(query @ key^T * scale + mask) @ value` (PyTorch's `scaled_dot_product_attention`).",
    ),
    reshape(
        "reshape",
        false,
        false,
        "The same elements in new dims (a copy if needed); the new dims split or merge the old ones in order.",
    ),
    reshape(
        "view",
        true,
        false,
        "The same elements in new dims, without a copy; the new dims split or merge the old ones in order.",
    ),
    reshape(
        "reshape_unordered",
        false,
        true,
        "`reshape` to dims that need not keep the old dims' order (mixing them is meant).",
    ),
    reshape(
        "view_unordered",
        true,
        true,
        "`view` to dims that need not keep the old dims' order (mixing them is meant).",
    ),
    def(
        "stack",
        OpKind::Stack,
        true,
        false,
        &[p("tensors", ParamKind::Tensors), opt("dim", ParamKind::Dim, "0")],
        DTypeRule::Same,
        ShapeRule::Stack,
        "Tensors of one shape joined along a new dim `dim`.",
    ),
    def(
        "expand",
        OpKind::Expand,
        false,
        true,
        &[INPUT, p("size", ParamKind::Dims)],
        DTypeRule::Same,
        ShapeRule::Expand,
        "A view with dims of size 1 repeated to `size` (`-1` keeps a dim), new dims leading.",
    ),
    def(
        "repeat_interleave",
        OpKind::RepeatInterleave,
        true,
        true,
        &[INPUT, p("repeats", SCALAR), p("dim", ParamKind::Dim)],
        DTypeRule::Same,
        ShapeRule::RepeatInterleave,
        "Each element along `dim` repeated `repeats` times in place (`[a, b]` to `[a, a, b, b]`).",
    ),
    def(
        "unsqueeze",
        OpKind::Unsqueeze,
        false,
        true,
        INPUT_DIM,
        DTypeRule::Same,
        ShapeRule::Unsqueeze,
        "A dim of size 1 inserted at `dim`.",
    ),
    def(
        "squeeze",
        OpKind::Squeeze,
        false,
        true,
        INPUT_DIM,
        DTypeRule::Same,
        ShapeRule::Squeeze,
        "The dim `dim`, of size 1, removed.",
    ),
    def(
        "t",
        OpKind::Reorder,
        false,
        true,
        &[INPUT],
        DTypeRule::Same,
        ShapeRule::Reorder,
        "Transpose of a matrix.",
    ),
    def(
        "permute",
        OpKind::Reorder,
        false,
        true,
        &[INPUT, p("dims", ParamKind::Dims)],
        DTypeRule::Same,
        ShapeRule::Reorder,
        "The dims reordered.",
    ),
    def(
        "transpose",
        OpKind::Reorder,
        false,
        true,
        &[INPUT, p("dim0", ParamKind::Dim), p("dim1", ParamKind::Dim)],
        DTypeRule::Same,
        ShapeRule::Reorder,
        "Two dims swapped.",
    ),
    def(
        "narrow",
        OpKind::Narrow,
        false,
        true,
        &[
            INPUT,
            p("dim", ParamKind::Dim),
            p("start", SCALAR),
            p("length", SCALAR),
        ],
        DTypeRule::Same,
        ShapeRule::Slice,
        "`length` elements along `dim` from `start`.",
    ),
    def(
        "embedding",
        OpKind::Embedding,
        true,
        false,
        &[INPUT, p("weight", TENSOR)],
        DTypeRule::Same,
        ShapeRule::Embedding,
        "Row `id` of the table `weight` [V, E] for every id of `input` (`i64` or `i32`): `[.., E]`.",
    ),
    def(
        "index_select",
        OpKind::IndexSelect,
        true,
        true,
        &[INPUT, p("dim", ParamKind::Dim), p("index", TENSOR)],
        DTypeRule::Same,
        ShapeRule::IndexSelect,
        "The positions along `dim` that the 1-D `index` (`i64` or `i32`) lists, in its order.",
    ),
    def(
        "gather",
        OpKind::Gather,
        true,
        true,
        &[INPUT, p("dim", ParamKind::Dim), p("index", TENSOR)],
        DTypeRule::Same,
        ShapeRule::Gather,
        "Along `dim`, the element each entry of `index` (`i64` or `i32`, `input`'s rank) names.",
    ),
    def(
        "index_add",
        OpKind::IndexAdd,
        true,
        true,
        &[
            INPUT,
            p("dim", ParamKind::Dim),
            p("index", TENSOR),
            p("source", TENSOR),
            opt("alpha", SCALAR, "1"),
        ],
        DTypeRule::SameFloat,
        ShapeRule::IndexAdd,
        "`input` with `alpha * source`'s entries along `dim` added at the positions the 1-D `index` (`i64` or `i32`) lists, repeats summed.",
    ),
    def(
        "scatter_add",
        OpKind::ScatterAdd,
        true,
        true,
        &[
            INPUT,
            p("dim", ParamKind::Dim),
            p("index", TENSOR),
            p("src", TENSOR),
        ],
        DTypeRule::SameFloat,
        ShapeRule::ScatterAdd,
        "`input` with each entry of `src` added, along `dim`, at the position `index` (`i64` or `i32`) names, repeats summed.",
    ),
    def(
        "cumsum",
        OpKind::Cumsum,
        true,
        true,
        INPUT_DIM,
        DTypeRule::FloatOrI64,
        ShapeRule::Same,
        "Cumulative sum along `dim` (floats keep their dtype, integers sum into `i64`, as PyTorch's).",
    ),
    def(
        "cross_entropy",
        OpKind::CrossEntropy,
        true,
        false,
        &[
            INPUT,
            p("target", TENSOR),
            opt("ignore_index", SCALAR, "-100"),
            opt("reduction", SCALAR, "'mean'"),
            opt("label_smoothing", SCALAR, "0.0"),
        ],
        DTypeRule::SameFloat,
        ShapeRule::CrossEntropy,
        "`log_softmax` loss of class logits `input` [N, C] against class indices `target` [N] (`i64` or `i32`), or PyTorch's K-dimensional form, `input` [N, C, d1, .., dk] (classes in dim 1) against `target` [N, d1, .., dk], fused with its reduction (PyTorch's `F.cross_entropy`; the backward is the runtime's `cross_entropy_backward`).",
    ),
    conv(
        "conv1d",
        1,
        "1-D convolution of `input` [N, C_in, L] with `weight` [C_out, C_in / groups, kL] plus `bias` [C_out] (PyTorch's `F.conv1d`).",
    ),
    conv(
        "conv2d",
        2,
        "2-D convolution of `input` [N, C_in, H, W] with `weight` [C_out, C_in / groups, kH, kW] plus `bias` [C_out] (PyTorch's `F.conv2d`); each output size is `(H + 2p - d(k-1) - 1) / s + 1`.",
    ),
    def(
        "arange",
        OpKind::Arange,
        true,
        false,
        &[p("end", SCALAR)],
        DTypeRule::Index,
        ShapeRule::Arange,
        "`0, 1, .., end - 1` as `i64` (`arange(start, end)`: from `start`), on the function's device; `start` and `end` are dims or literals.",
    ),
    def(
        "tril",
        OpKind::Triangle { upper: false },
        true,
        true,
        &[INPUT, opt("diagonal", SCALAR, "0")],
        DTypeRule::Same,
        ShapeRule::Triangle,
        "The lower triangle of the last two dims (`col - row <= diagonal`), zeros above.",
    ),
    def(
        "triu",
        OpKind::Triangle { upper: true },
        true,
        true,
        &[INPUT, opt("diagonal", SCALAR, "0")],
        DTypeRule::Same,
        ShapeRule::Triangle,
        "The upper triangle of the last two dims (`col - row >= diagonal`), zeros below.",
    ),
    def(
        "cast",
        OpKind::Cast,
        false,
        true,
        &[INPUT],
        DTypeRule::Named,
        ShapeRule::Same,
        "The elements converted to the named dtype: `x.cast::<f16>()`.",
    ),
    def(
        "to_device",
        OpKind::ToDevice,
        false,
        true,
        &[INPUT],
        DTypeRule::Same,
        ShapeRule::Same,
        "A copy on the named device: `x.to_device::<Cuda>()`.",
    ),
    def(
        "to_cpu",
        OpKind::ToDevice,
        false,
        true,
        &[INPUT],
        DTypeRule::Same,
        ShapeRule::Same,
        "A copy in host memory.",
    ),
];

/// Every op of the catalogue: unary, binary, comparisons, selections and
/// reductions, row ops, normalisations, then the others.
///
/// ```
/// use tensorfn_core::ops;
/// assert!(ops::all().any(|d| d.name == "erf"));
/// assert!(ops::all().all(|d| d.function || d.method));
/// ```
pub fn all() -> impl Iterator<Item = &'static OpDef> {
    UNARY
        .iter()
        .chain(BINARY)
        .chain(EARLIER)
        .chain(ROWS)
        .chain(NORMS)
        .chain(POOLS)
        .chain(LATER)
}

/// The op written `name` in `form`.
///
/// ```
/// use tensorfn_core::ops::{self, Form};
/// assert!(ops::lookup("relu", Form::Function).is_some());
/// assert!(ops::lookup("argmax", Form::Function).is_none()); // x.argmax(dim)
/// ```
pub fn lookup(name: &str, form: Form) -> Option<&'static OpDef> {
    all().find(|d| {
        d.name == name
            && match form {
                Form::Function => d.function,
                Form::Method => d.method,
            }
    })
}

/// The op written `name(..)`.
///
/// ```
/// assert!(tensorfn_core::ops::function("where_").is_some());
/// ```
pub fn function(name: &str) -> Option<&'static OpDef> {
    lookup(name, Form::Function)
}

/// The op written `x.name(..)`.
///
/// ```
/// assert!(tensorfn_core::ops::method("masked_fill").is_some());
/// ```
pub fn method(name: &str) -> Option<&'static OpDef> {
    lookup(name, Form::Method)
}

/// The names written in `form`, in catalogue order (for messages).
///
/// ```
/// use tensorfn_core::ops::{self, Form};
/// assert!(ops::names(Form::Method).contains(&"reshape"));
/// assert!(!ops::names(Form::Function).contains(&"reshape"));
/// ```
pub fn names(form: Form) -> Vec<&'static str> {
    all()
        .filter(|d| match form {
            Form::Function => d.function,
            Form::Method => d.method,
        })
        .map(|d| d.name)
        .collect()
}

/// The name in `form` closest to `name` (a typo's fix), if one is close:
/// at most a third of its letters differ.
///
/// ```
/// use tensorfn_core::ops::{self, Form};
/// assert_eq!(ops::closest("rleu", Form::Function), Some("relu"));
/// assert_eq!(ops::closest("transpos", Form::Method), Some("transpose"));
/// assert_eq!(ops::closest("frobnicate", Form::Function), None);
/// ```
pub fn closest(name: &str, form: Form) -> Option<&'static str> {
    let limit = (name.chars().count() / 3).max(1);
    names(form)
        .into_iter()
        .map(|n| (edit_distance(name, n), n))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, n)| n)
}

/// Levenshtein distance with transpositions of neighbours counted once.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_per_form() {
        for form in [Form::Function, Form::Method] {
            let names = names(form);
            for (i, a) in names.iter().enumerate() {
                assert!(!names[i + 1..].contains(a), "{a} twice");
            }
        }
    }

    #[test]
    fn every_op_has_its_receiver_first() {
        for d in all() {
            assert!(!d.params.is_empty() || d.kind == OpKind::Cat, "{}", d.name);
            assert!(!d.summary.is_empty(), "{}", d.name);
            // Optional parameters come last.
            let first_opt = d
                .params
                .iter()
                .position(|p| p.default.is_some())
                .unwrap_or(d.params.len());
            assert!(
                d.params[first_opt..].iter().all(|p| p.default.is_some()),
                "{}",
                d.name
            );
        }
    }
}
