//! The typed expression graph the checker builds: one node per value, each
//! with its inferred device, dtype and symbolic shape.

use crate::ast::{Device, Dt, ScalarKind, Sp};
use crate::shape::Dim;
use std::fmt;
use tensorfn_core::ops::conv::ConvArgs;
use tensorfn_kernels::{BinaryOp, CmpOp, NormOp, ReduceOp, RowOp, UnaryOp};

/// Index of a node in [`Graph::nodes`].
pub type NodeId = usize;

/// What the checker knows about a tensor value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorTy {
    /// Where it lives.
    pub device: Device,
    /// Its element type.
    pub dtype: Dt,
    /// Its symbolic shape.
    pub dims: Vec<Dim>,
}

impl fmt::Display for TensorTy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor<{}, {}, {}>",
            self.device,
            self.dtype,
            crate::shape::fmt_shape(&self.dims)
        )
    }
}

/// The type of a scalar value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarTy {
    /// An unsuffixed float literal (or arithmetic of literals).
    FloatLit,
    /// An unsuffixed integer literal (or arithmetic of literals).
    IntLit,
    /// A scalar parameter's type.
    Of(ScalarKind),
}

impl ScalarTy {
    /// True for float literals and float parameters.
    pub fn is_float(self) -> bool {
        match self {
            ScalarTy::FloatLit => true,
            ScalarTy::IntLit => false,
            ScalarTy::Of(ScalarKind::DType(d)) => d.is_float(),
            ScalarTy::Of(ScalarKind::Usize) => false,
        }
    }
}

impl fmt::Display for ScalarTy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScalarTy::FloatLit => f.write_str("a float literal"),
            ScalarTy::IntLit => f.write_str("an integer literal"),
            ScalarTy::Of(k) => write!(f, "{k}"),
        }
    }
}

/// The type of a node.
#[derive(Clone, Debug, PartialEq)]
pub enum Ty {
    /// A tensor.
    Tensor(TensorTy),
    /// A scalar.
    Scalar(ScalarTy),
    /// Several tensors (a call to a function returning a tuple).
    Tuple(Vec<TensorTy>),
    /// Unknown because of an error already reported.
    Error,
}

impl Ty {
    /// The tensor type, if this is a tensor.
    pub fn tensor(&self) -> Option<&TensorTy> {
        match self {
            Ty::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

/// A compile-time-known or run-time scalar argument (`narrow`, indexing).
#[derive(Clone, Debug, PartialEq)]
pub enum IndexArg {
    /// A literal.
    Const(usize),
    /// A scalar node computing the value at run time.
    Node(NodeId),
}

/// The Rust shape type of one dim: `Const<N>` or `Dyn`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimTy {
    /// `Const<dim>`: the dim is a literal or a const generic.
    Const(Dim),
    /// `Dyn`: known at run time only.
    Dyn,
}

/// What a node computes.
#[derive(Clone, Debug)]
pub enum Op {
    /// Parameter `i` of the function (tensor or scalar).
    Param(usize),
    /// A literal (`int` for integer literals).
    Lit {
        /// The value.
        value: f64,
        /// True for integer literals.
        int: bool,
    },
    /// `op(x)` elementwise (or on a scalar).
    Unary(UnaryOp, NodeId),
    /// `op(a, b)` elementwise with broadcasting (or on scalars).
    Binary(BinaryOp, NodeId, NodeId),
    /// `a op b` elementwise with broadcasting, a `bool` tensor.
    Compare(CmpOp, NodeId, NodeId),
    /// `where_(cond, a, b)` elementwise with broadcasting (also
    /// `x.masked_fill(mask, v)`, which is `where_(mask, v, x)`).
    Where(NodeId, NodeId, NodeId),
    /// `x.cast::<T>()`.
    Cast(NodeId, Dt),
    /// `input + value * t1 * t2`.
    AddCmul {
        /// The added tensor.
        input: NodeId,
        /// First factor.
        t1: NodeId,
        /// Second factor.
        t2: NodeId,
        /// The scalar factor.
        value: NodeId,
    },
    /// A `#[kernel]` applied elementwise (or to scalars).
    Kernel {
        /// Index in the invocation's kernels.
        kernel: usize,
        /// One node per kernel parameter.
        args: Vec<NodeId>,
    },
    /// A row kernel (a `#[kernel]` over `Row<T>` parameters) applied to
    /// the rows of the last dim.
    RowKernel {
        /// Index in the invocation's kernels.
        kernel: usize,
        /// One node per kernel parameter (tensors for rows, scalars).
        args: Vec<NodeId>,
    },
    /// `matmul(a, b)`.
    MatMul(NodeId, NodeId),
    /// `bmm(a, b)`.
    Bmm(NodeId, NodeId),
    /// `dot(a, b)`.
    Dot(NodeId, NodeId),
    /// `addmm(bias, m1, m2, beta = .., alpha = ..)`.
    AddMm {
        /// Broadcast to the product.
        bias: NodeId,
        /// Left matrix.
        m1: NodeId,
        /// Right matrix.
        m2: NodeId,
        /// Scale of `bias` (scalar node).
        beta: Option<NodeId>,
        /// Scale of the product (scalar node).
        alpha: Option<NodeId>,
    },
    /// `act(addmm(bias, m1, m2))` with the activation in the product's
    /// epilogue: not written by users, folded by the planner
    /// ([`fold_activations`](crate::plan::fold_activations)).
    AddMmAct {
        /// Broadcast to the product.
        bias: NodeId,
        /// Left matrix.
        m1: NodeId,
        /// Right matrix.
        m2: NodeId,
        /// `Relu` or `Gelu`.
        act: UnaryOp,
    },
    /// `(a @ b, s)` of 2-D operands, `s` the sum over the product's `k` of
    /// `b` (`of_b`) or of `a`: a weight gradient and its bias gradient, as
    /// a tuple. Not written by users, folded by the planner
    /// ([`fold_bias_gradients`](crate::plan::fold_bias_gradients)).
    MatMulSumK {
        /// Left matrix.
        a: NodeId,
        /// Right matrix.
        b: NodeId,
        /// Whether the sums are of `b`'s rows (else of `a`'s columns).
        of_b: bool,
    },
    /// `(gelu(p), p)` for `p = addmm(bias, m1, m2)`: a GELU layer whose
    /// backward reads the pre-activation `p`, both written by one
    /// product (cuBLASLt's `GELU_AUX_BIAS`), as a tuple. Not written by
    /// users, folded by the planner
    /// ([`fold_gelu_backward`](crate::plan::fold_gelu_backward)).
    AddMmGeluAux {
        /// Broadcast to the product.
        bias: NodeId,
        /// Left matrix.
        m1: NodeId,
        /// Right matrix.
        m2: NodeId,
    },
    /// `(a @ b) * gelu'(pre)` of 2-D operands: GELU's backward in the
    /// product that computes its upstream gradient (cuBLASLt's `DGELU`),
    /// and with `sums` the tuple of that and its column sums, a bias
    /// gradient (`DGELU_BGRAD`). Not written by users, folded by the
    /// planner ([`fold_gelu_backward`](crate::plan::fold_gelu_backward)).
    MatMulDGelu {
        /// Left matrix.
        a: NodeId,
        /// Right matrix.
        b: NodeId,
        /// The pre-activation, of the product's dims.
        pre: NodeId,
        /// Whether the column sums are a second result.
        sums: bool,
    },
    /// `scaled_dot_product_attention(q, k, v, attn_mask = .., is_causal =
    /// .., scale = .., enable_gqa = ..)`.
    Attention {
        /// `[.., L, E]`.
        q: NodeId,
        /// `[.., S, E]`.
        k: NodeId,
        /// `[.., S, Ev]`.
        v: NodeId,
        /// `bool` or of the tensors' dtype, broadcast to `[.., L, S]`.
        mask: Option<NodeId>,
        /// Keys `j <= i` only.
        causal: bool,
        /// `enable_gqa = true`: keys and values of fewer heads, each
        /// shared by a group of query heads.
        gqa: bool,
        /// The factor of the scores (scalar node); `1 / sqrt(E)` if absent.
        scale: Option<NodeId>,
    },
    /// `x.reshape([..])` or `x.view([..])` (target dims in the node type).
    Reshape {
        /// The source.
        x: NodeId,
        /// True for `view` (no copy; `Err` if not contiguous).
        view: bool,
    },
    /// `x.expand([..])`: a broadcast view (target dims in the node type).
    Expand(NodeId),
    /// `x.t()`.
    T(NodeId),
    /// `x.permute([..])`.
    Permute(NodeId, Vec<usize>),
    /// `x.transpose(d0, d1)`.
    Transpose(NodeId, usize, usize),
    /// `x.narrow(dim, start, len)`.
    Narrow {
        /// The source.
        x: NodeId,
        /// The sliced dim.
        dim: usize,
        /// First index.
        start: IndexArg,
        /// Length.
        len: IndexArg,
    },
    /// `x[i]` along `dim` (the dim disappears).
    Index {
        /// The source.
        x: NodeId,
        /// The indexed dim.
        dim: usize,
        /// The index.
        index: IndexArg,
    },
    /// `x.sum(dim)` and friends; `dim: None` reduces everything.
    Reduce {
        /// The reduction.
        op: ReduceOp,
        /// The source.
        x: NodeId,
        /// The reduced dim.
        dim: Option<usize>,
    },
    /// A row op along a dim: `x.softmax(dim)`, ...
    Row {
        /// The op.
        op: RowOp,
        /// The source.
        x: NodeId,
        /// The normalised dim.
        dim: usize,
    },
    /// `layer_norm(x, weight, bias, eps)` or `rms_norm(x, weight, eps)`
    /// over the last dim.
    Norm {
        /// The op.
        op: NormOp,
        /// The normalised tensor.
        x: NodeId,
        /// The scale, of the last dim's length.
        weight: NodeId,
        /// The shift (`layer_norm`), of the last dim's length.
        bias: Option<NodeId>,
        /// `eps` (scalar node), or the op's default.
        eps: Option<NodeId>,
    },
    /// The gradients of an [`Op::Norm`] with respect to its input, weight
    /// and (`layer_norm`) bias, given the gradient of its result (written
    /// by `#[grad]`, not by users): a tuple of `x`'s, `weight`'s and
    /// (`layer_norm`) `weight`'s types again, from the fused
    /// `layer_norm_backward` / `rms_norm_backward`, which recompute the
    /// rows' statistics from `x` (the forward saves nothing for them).
    NormBackward {
        /// The op.
        op: NormOp,
        /// The forward's input.
        x: NodeId,
        /// The forward's scale.
        weight: NodeId,
        /// The gradient of the forward's result.
        grad: NodeId,
        /// As the forward took it.
        eps: Option<NodeId>,
    },
    /// `rope(x, cos, sin)`: rotary position embedding.
    Rope {
        /// The rotated tensor, `[.., T, D]`.
        x: NodeId,
        /// `[T, D]`.
        cos: NodeId,
        /// `[T, D]`.
        sin: NodeId,
    },
    /// `cat([..], dim)`.
    Cat {
        /// The tensors.
        xs: Vec<NodeId>,
        /// The joined dim.
        dim: usize,
    },
    /// `cumsum(x, dim)`.
    Cumsum {
        /// The summed tensor.
        x: NodeId,
        /// The dim summed along.
        dim: usize,
    },
    /// `max_pool2d`, `avg_pool2d` or `adaptive_avg_pool2d` of `x` (the
    /// kind and options in `pool`).
    Pool {
        /// The pooled tensor, `[N, C, H, W]` or `[C, H, W]`.
        x: NodeId,
        /// The pooling and its options.
        pool: tensorfn_core::ops::pool::Pool2d,
    },
    /// The gradient of a pooling with respect to its input `x`, given the
    /// gradient of its result (written by `#[grad]`, not by users): the
    /// windows recomputed from `x` (max: its argmax).
    PoolBackward {
        /// The pooled tensor.
        x: NodeId,
        /// The gradient of the pooling's result.
        grad: NodeId,
        /// The pooling and its options.
        pool: tensorfn_core::ops::pool::Pool2d,
    },
    /// `dropout(x, p, seed = seed)` in training (the mask hashed from the
    /// seed and each element's position).
    Dropout {
        /// The input.
        x: NodeId,
        /// The probability of dropping, in (0, 1].
        p: f64,
        /// The seed.
        seed: IndexArg,
    },
    /// `cross_entropy(x, target, ..)`.
    CrossEntropy {
        /// The logits, `[N, C]`.
        x: NodeId,
        /// The class indices, `[N]` (`i64` or `i32`).
        target: NodeId,
        /// `reduction`, as PyTorch names it.
        reduction: &'static str,
        /// `ignore_index`.
        ignore_index: i64,
        /// `label_smoothing`.
        label_smoothing: f64,
    },
    /// The gradient of `cross_entropy` with respect to its logits, given
    /// the gradient of its result (written by `#[grad]`, not by users):
    /// the fused `cross_entropy_backward`.
    CrossEntropyBackward {
        /// The logits, `[N, C]`.
        x: NodeId,
        /// The class indices, `[N]`.
        target: NodeId,
        /// The gradient of the loss: `[]`, or `[N]` for `reduction = "none"`.
        grad: NodeId,
        /// `reduction`, as PyTorch names it.
        reduction: &'static str,
        /// `ignore_index`.
        ignore_index: i64,
        /// `label_smoothing`.
        label_smoothing: f64,
    },
    /// The gradients of an [`Op::Attention`] node `out` with respect to
    /// its query, key and value, given the gradient of its result
    /// (written by `#[grad]`, not by users): a tuple of three tensors of
    /// `q`'s, `k`'s and `v`'s types, from the fused
    /// `scaled_dot_product_attention_backward` and the log-sum-exps that
    /// the forward `out` saves for it.
    AttentionBackward {
        /// `[.., L, E]`.
        q: NodeId,
        /// `[.., S, E]`.
        k: NodeId,
        /// `[.., S, Ev]`.
        v: NodeId,
        /// The forward's [`Op::Attention`] node.
        out: NodeId,
        /// The gradient of `out`.
        grad: NodeId,
        /// As the forward took it.
        mask: Option<NodeId>,
        /// As the forward took it.
        causal: bool,
        /// As the forward took it.
        scale: Option<NodeId>,
        /// As the forward took it.
        gqa: bool,
    },
    /// `conv2d(x, weight, bias, ..)` (`spatial: 2`) or `conv1d`.
    Conv {
        /// The input, `[N, C_in, H, W]` (`[N, C_in, L]`).
        x: NodeId,
        /// `[C_out, C_in / groups, kH, kW]` (`[C_out, C_in / groups, kL]`).
        weight: NodeId,
        /// `[C_out]`.
        bias: Option<NodeId>,
        /// The options.
        args: ConvArgs,
        /// The number of spatial dims.
        spatial: usize,
    },
    /// A gradient of a convolution (written by `#[grad]`, not by users):
    /// with respect to its input (`input: true`, of `x`'s shape) or its
    /// weight (of `weight`'s shape), given the gradient `grad` of its
    /// result.
    ConvBackward {
        /// The convolution's input.
        x: NodeId,
        /// Its weight.
        weight: NodeId,
        /// The gradient of its result.
        grad: NodeId,
        /// The options.
        args: ConvArgs,
        /// The number of spatial dims.
        spatial: usize,
        /// True for the input's gradient, false for the weight's.
        input: bool,
    },
    /// `embedding(ids, weight)`.
    Embedding {
        /// The ids (`i64` or `i32`).
        ids: NodeId,
        /// The table `[V, E]`.
        weight: NodeId,
    },
    /// `index_select(x, dim, index)` or (`gather: true`) `gather(x, dim, index)`.
    Select {
        /// The source.
        x: NodeId,
        /// The indexed dim.
        dim: usize,
        /// The index tensor (`i64` or `i32`).
        index: NodeId,
        /// True for `gather`.
        gather: bool,
    },
    /// `index_add(x, dim, index, src, alpha)` or (`index_add: false`)
    /// `scatter_add(x, dim, index, src)`.
    ScatterAdd {
        /// The input added to.
        x: NodeId,
        /// The dim the indices pick along.
        dim: usize,
        /// The index tensor (`i64` or `i32`).
        index: NodeId,
        /// The values added.
        src: NodeId,
        /// The scale of `src` (1 for `scatter_add`).
        alpha: f64,
        /// True for `index_add` (a 1-D index).
        index_add: bool,
    },
    /// `topk(x, k, dim, largest)`: a tuple of the `k` largest (or
    /// smallest) elements along `dim` and their `i64` positions.
    TopK {
        /// The source.
        x: NodeId,
        /// How many (the picked dim's size in the node type).
        k: IndexArg,
        /// The dim picked along.
        dim: usize,
        /// The largest (`true`) or the smallest elements.
        largest: bool,
    },
    /// `multinomial(x, num_samples, replacement, seed)`: `i64` category
    /// indices drawn from the weights along the last dim.
    Multinomial {
        /// The weights.
        x: NodeId,
        /// Draws per row (the last dim's size in the node type).
        num_samples: IndexArg,
        /// True to draw with replacement.
        replacement: bool,
        /// The generator's seed.
        seed: IndexArg,
    },
    /// `arange(start, end)` (the length in the node type).
    Arange {
        /// The first value.
        start: Dim,
    },
    /// `tril(x, diagonal)` or (`upper: true`) `triu(x, diagonal)`.
    Triangle {
        /// The source.
        x: NodeId,
        /// True for `triu`.
        upper: bool,
        /// The diagonal's offset.
        diagonal: i64,
    },
    /// `x.to_device::<D>()`.
    ToDevice(NodeId, Device),
    /// A call to a tensor function of the same invocation.
    Call {
        /// Index of the callee in the invocation.
        callee: usize,
        /// One node per parameter.
        args: Vec<NodeId>,
        /// The callee's const generics, as dims of the caller.
        generics: Vec<Dim>,
        /// The callee's dtype parameters, as dtypes of the caller.
        dtypes: Vec<Dt>,
        /// Every callee symbol bound at this call, as a dim of the caller.
        bindings: Vec<(String, Dim)>,
        /// The callee's tensor parameter types as instantiated (for
        /// conversions where the caller's type differs).
        param_tys: Vec<Option<Vec<DimTy>>>,
        /// The callee's result types as instantiated.
        ret_tys: Vec<Vec<DimTy>>,
        /// The parameter structs passed: the callee's parameter index and
        /// the path of the caller's struct (`p.ln_1`).
        structs: Vec<(usize, String)>,
    },
    /// A call to a function outside the invocation (rustc checks it).
    External {
        /// The callee path.
        path: syn::Path,
        /// The arguments.
        args: Vec<NodeId>,
    },
    /// Element `i` of a tuple-valued node.
    TupleGet(NodeId, usize),
}

/// A node: what it computes, its type and the input it came from.
#[derive(Clone, Debug)]
pub struct Node {
    /// The operation.
    pub op: Op,
    /// The inferred type.
    pub ty: Ty,
    /// The expression's span.
    pub sp: Sp,
    /// The expression as the user wrote it (for messages).
    pub text: String,
}

/// Every value of one function body.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Nodes in creation order: operands before users.
    pub nodes: Vec<Node>,
}

impl Graph {
    /// Adds a node and returns its id.
    pub fn push(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// Whether `x` is a zero block as `#[grad]` writes one: a 0-d `arange`
    /// from 0, perhaps cast, expanded. Its value is known without running
    /// it, so a `cat` of it or a scatter into it need not read it.
    ///
    /// ```
    /// let a = tensorfn_macros_impl::analyse_tokens(quote::quote! {
    ///     #[grad(w)]
    ///     fn f(ids: &Tensor<Cpu, i64, [3]>, w: &Tensor<Cpu, f32, [5, 2]>) -> Tensor<Cpu, f32, []> {
    ///         embedding(ids, w).sum()
    ///     }
    /// }).unwrap();
    /// let g = &a.joints[0].as_ref().unwrap()[0].f.graph;
    /// use tensorfn_macros_impl::graph::Op;
    /// let x = g.nodes.iter().find_map(|n| match n.op {
    ///     Op::ScatterAdd { x, .. } => Some(x),
    ///     _ => None,
    /// }).unwrap();
    /// assert!(g.is_zero_block(x));
    /// ```
    pub fn is_zero_block(&self, x: NodeId) -> bool {
        let Op::Expand(c) = self.nodes[x].op else {
            return false;
        };
        let a = match self.nodes[c].op {
            Op::Cast(a, _) => a,
            _ => c,
        };
        let scalar = self.nodes[a].ty.tensor().is_some_and(|t| t.dims.is_empty());
        scalar
            && matches!(&self.nodes[a].op, Op::Arange { start } if start.as_constant() == Some(0))
    }

    /// The operands of a node, in order.
    pub fn inputs(&self, id: NodeId) -> Vec<NodeId> {
        match &self.nodes[id].op {
            Op::Param(_) | Op::Lit { .. } | Op::Arange { .. } => vec![],
            Op::Embedding { ids, weight } => vec![*ids, *weight],
            Op::CrossEntropy { x, target, .. } => vec![*x, *target],
            Op::CrossEntropyBackward {
                x, target, grad, ..
            } => vec![*x, *target, *grad],
            Op::AttentionBackward {
                q,
                k,
                v,
                out,
                grad,
                mask,
                scale,
                ..
            } => {
                let mut r = vec![*q, *k, *v, *out, *grad];
                r.extend(mask.iter().chain(scale.iter()));
                r
            }
            Op::Cumsum { x, .. } | Op::Pool { x, .. } => vec![*x],
            Op::PoolBackward { x, grad, .. } => vec![*x, *grad],
            Op::TopK { x, k, .. } => {
                let mut v = vec![*x];
                if let IndexArg::Node(n) = k {
                    v.push(*n);
                }
                v
            }
            Op::Multinomial {
                x,
                num_samples,
                seed,
                ..
            } => {
                let mut v = vec![*x];
                for a in [num_samples, seed] {
                    if let IndexArg::Node(n) = a {
                        v.push(*n);
                    }
                }
                v
            }
            Op::Dropout { x, seed, .. } => {
                let mut v = vec![*x];
                if let IndexArg::Node(n) = seed {
                    v.push(*n);
                }
                v
            }
            Op::Conv {
                x, weight, bias, ..
            } => {
                let mut v = vec![*x, *weight];
                v.extend(bias.iter());
                v
            }
            Op::ConvBackward {
                x, weight, grad, ..
            } => vec![*x, *weight, *grad],
            Op::Select { x, index, .. } => vec![*x, *index],
            // A scatter into a zero block reads only its index and values:
            // expansion allocates the zeros (`index_add_to_zeros`).
            Op::ScatterAdd { x, index, src, .. } if self.is_zero_block(*x) => vec![*index, *src],
            Op::ScatterAdd { x, index, src, .. } => vec![*x, *index, *src],
            Op::Triangle { x, .. } => vec![*x],
            Op::Unary(_, a) | Op::Cast(a, _) | Op::T(a) | Op::ToDevice(a, _) => vec![*a],
            Op::Expand(a) => vec![*a],
            Op::Permute(a, _) | Op::Transpose(a, ..) | Op::TupleGet(a, _) => vec![*a],
            Op::Binary(_, a, b)
            | Op::Compare(_, a, b)
            | Op::MatMul(a, b)
            | Op::Bmm(a, b)
            | Op::Dot(a, b) => {
                vec![*a, *b]
            }
            Op::Where(c, a, b) => vec![*c, *a, *b],
            Op::AddMmAct { bias, m1, m2, .. } => vec![*bias, *m1, *m2],
            Op::MatMulSumK { a, b, .. } => vec![*a, *b],
            Op::AddMmGeluAux { bias, m1, m2 } => vec![*bias, *m1, *m2],
            Op::MatMulDGelu { a, b, pre, .. } => vec![*a, *b, *pre],
            Op::AddCmul {
                input,
                t1,
                t2,
                value,
            } => vec![*input, *t1, *t2, *value],
            Op::Kernel { args, .. }
            | Op::RowKernel { args, .. }
            | Op::Call { args, .. }
            | Op::External { args, .. } => args.clone(),
            Op::AddMm {
                bias,
                m1,
                m2,
                beta,
                alpha,
            } => {
                let mut v = vec![*bias, *m1, *m2];
                v.extend(beta.iter().chain(alpha.iter()));
                v
            }
            Op::Reshape { x, .. } | Op::Reduce { x, .. } | Op::Row { x, .. } => vec![*x],
            Op::Narrow { x, start, len, .. } => {
                let mut v = vec![*x];
                for a in [start, len] {
                    if let IndexArg::Node(n) = a {
                        v.push(*n);
                    }
                }
                v
            }
            Op::Index { x, index, .. } => {
                let mut v = vec![*x];
                if let IndexArg::Node(n) = index {
                    v.push(*n);
                }
                v
            }
            Op::Cat { xs, .. } => xs.clone(),
            Op::Rope { x, cos, sin } => vec![*x, *cos, *sin],
            Op::NormBackward {
                x,
                weight,
                grad,
                eps,
                ..
            } => {
                let mut v = vec![*x, *weight, *grad];
                v.extend(eps.iter());
                v
            }
            Op::Norm {
                x,
                weight,
                bias,
                eps,
                ..
            } => {
                let mut v = vec![*x, *weight];
                v.extend(bias.iter().chain(eps.iter()));
                v
            }
            Op::Attention {
                q,
                k,
                v,
                mask,
                scale,
                ..
            } => {
                let mut out = vec![*q, *k, *v];
                out.extend(mask.iter().chain(scale.iter()));
                out
            }
        }
    }
}
