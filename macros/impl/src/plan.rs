//! From the typed graph to a plan: which nodes run as one fused
//! elementwise kernel, which are runtime calls (matmul, addmm, views,
//! reductions, ...), when each intermediate can be dropped, and the peak
//! bytes of live intermediates.
//!
//! A fused group's element program is a [`Kernel`] of the kernels crate,
//! built here value by value; expansion prints it as the CPU closure and
//! hands it to the PTX back-end, so both paths run one program.
//!
//! Fusion takes maximal elementwise chains: an elementwise node joins its
//! users' kernel when every user is elementwise and in one kernel, so a
//! value read by a matmul, by two kernels, or returned is materialised
//! once and everything else stays in registers.

use crate::check::CheckedFn;
use crate::graph::*;
use crate::shape::{numel, Dim};
use std::collections::HashMap;
use tensorfn_core::DTypeKind;
use tensorfn_kernels::ir::{ElementwiseBuilder, Kernel, Value};
use tensorfn_kernels::{BinaryOp, UnaryOp};

mod bias_grad;
mod gelu;
mod slots;
mod transposed;
pub use bias_grad::fold_bias_gradients;
pub use gelu::fold_gelu_backward;
pub use slots::fold_slot_sums;
pub use transposed::fold_transposed_products;

/// The most tensor inputs one fused kernel takes (`fused1`..`fused8`).
pub const MAX_FUSED_INPUTS: usize = 8;

/// An input of a fused kernel.
#[derive(Clone, Debug, PartialEq)]
pub enum GroupInput {
    /// A materialised tensor (a parameter or an earlier step).
    Tensor(NodeId),
    /// A run-time scalar, passed as a 0-d tensor of `dtype`.
    Scalar {
        /// The scalar node.
        node: NodeId,
        /// The dtype it is converted to.
        dtype: DTypeKind,
    },
}

/// One fused elementwise kernel.
#[derive(Clone, Debug)]
pub struct FusedGroup {
    /// The node whose value the kernel writes.
    pub out: NodeId,
    /// The nodes computed inside the kernel (including `out`).
    pub members: Vec<NodeId>,
    /// Its inputs, in parameter order.
    pub inputs: Vec<GroupInput>,
    /// The element program, or the kernel builder's error where the
    /// checked graph still gave an ill-typed program (a bug of the checker,
    /// reported when the group is expanded).
    pub kernel: Result<Kernel, tensorfn_kernels::Error>,
}

/// A row kernel (`Op::RowKernel`) with the elementwise work around it
/// folded in: groups computing its row arguments run as each row is
/// loaded, and a group reading its result runs before each row is
/// stored, so neither the arguments nor the row kernel's own result are
/// written to memory.
#[derive(Clone, Debug)]
pub struct RowStep {
    /// The row kernel node.
    pub node: NodeId,
    /// Groups computing row arguments, each with its argument's index.
    pub producers: Vec<(usize, FusedGroup)>,
    /// The group reading the result (its only reader); its value is the
    /// step's.
    pub consumer: Option<FusedGroup>,
}

impl RowStep {
    /// The node whose value the step writes.
    pub fn out(&self) -> NodeId {
        self.consumer.as_ref().map_or(self.node, |c| c.out)
    }
}

/// One step of the plan.
#[derive(Clone, Debug)]
pub enum Step {
    /// A fused elementwise kernel.
    Fused(FusedGroup),
    /// A row kernel and the elementwise work folded into it.
    Rows(RowStep),
    /// A node computed by one runtime call.
    Op(NodeId),
    /// The last use of a variable has passed.
    Drop(NodeId),
}

/// The plan of one function.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Steps in execution order.
    pub steps: Vec<Step>,
    /// Peak bytes of live intermediates, as the maximum of these
    /// candidates (`None` when a call outside the invocation hides it).
    pub peak: Option<Vec<Dim>>,
    /// Each buffer the steps allocate: the node that allocated it, and
    /// its bytes.
    pub buffers: Vec<(NodeId, Dim)>,
    /// The buffer each materialised node lives in (views share their
    /// source's); parameters have none.
    pub root_of: HashMap<NodeId, NodeId>,
}

/// The peak candidates of every function instance planned so far, by the
/// function's index and the instance's dtypes, for calls between
/// functions.
pub type Peaks = std::collections::HashMap<(usize, Vec<DTypeKind>), Option<Vec<Dim>>>;

/// Whether node `n` is a tensor computed by a generated elementwise
/// kernel (fused with its neighbours).
pub(crate) fn is_elementwise(g: &Graph, n: NodeId) -> bool {
    matches!(g.nodes[n].ty, Ty::Tensor(_))
        && matches!(
            g.nodes[n].op,
            Op::Unary(..)
                | Op::Binary(..)
                | Op::Compare(..)
                | Op::Where(..)
                | Op::Cast(..)
                | Op::AddCmul { .. }
                | Op::Kernel { .. }
        )
}

fn is_scalar(g: &Graph, n: NodeId) -> bool {
    matches!(g.nodes[n].ty, Ty::Scalar(_))
}

fn tensor_ty(g: &Graph, n: NodeId) -> &TensorTy {
    match &g.nodes[n].ty {
        Ty::Tensor(t) => t,
        other => unreachable!("node {n} is not a tensor: {other:?}"),
    }
}

/// Folds an activation into the product it reads, where the product has
/// no other use: `relu(addmm(b, x, w))` of any float dtype and
/// `gelu(addmm(b, x, w))` (the tanh form) of f16 and bf16 become one
/// [`Op::AddMmAct`], which the GPU runs in cuBLASLt's epilogue instead of
/// writing the product and reading it back. ReLU is exact either way; the
/// epilogue's GELU is applied to the f32 accumulator before rounding,
/// which is not bit for bit the separate kernel's result, so f32 and f64
/// keep the separate kernel (their GELU stays the one the parity checks
/// hold against PyTorch).
///
/// ```
/// let a = tensorfn_macros_impl::analyse_tokens(quote::quote! {
///     fn up(x: &Tensor<Cuda, bf16, [8, 64]>, w: &Tensor<Cuda, bf16, [64, 32]>,
///           b: &Tensor<Cuda, bf16, [32]>) -> Tensor<Cuda, bf16, [8, 32]> {
///         gelu(addmm(b, x, w))
///     }
/// }).unwrap();
/// let p = &a.planned[0].as_ref().unwrap()[0];
/// let last = *p.f.ret.last().unwrap();
/// assert!(matches!(p.f.graph.nodes[last].op, tensorfn_macros_impl::graph::Op::AddMmAct { .. }));
/// ```
pub fn fold_activations(f: &mut CheckedFn) {
    let n = f.graph.nodes.len();
    let mut uses = use_counts(f);
    for id in 0..n {
        let Op::Unary(act, a) = f.graph.nodes[id].op else {
            continue;
        };
        let Some(t) = f.graph.nodes[a].ty.tensor() else {
            continue;
        };
        let folds = match act {
            UnaryOp::Relu => t.dtype.kind().is_float(),
            UnaryOp::Gelu => matches!(t.dtype.kind(), DTypeKind::F16 | DTypeKind::BF16),
            _ => false,
        };
        if !folds || uses[a] != 1 || !matches!(f.graph.nodes[id].ty, Ty::Tensor(_)) {
            continue;
        }
        if let Op::AddMm {
            bias,
            m1,
            m2,
            beta: None,
            alpha: None,
        } = f.graph.nodes[a].op
        {
            f.graph.nodes[id].op = Op::AddMmAct { bias, m1, m2, act };
            uses[a] = 0;
        }
    }
}

/// How many times each node is read: as an operand of a node, or as a
/// result. The folds rewrite a node only where it has one reader.
fn use_counts(f: &CheckedFn) -> Vec<usize> {
    let mut uses = vec![0usize; f.graph.nodes.len()];
    for id in 0..f.graph.nodes.len() {
        for i in f.graph.inputs(id) {
            uses[i] += 1;
        }
    }
    for &r in &f.ret {
        uses[r] += 1;
    }
    uses
}

/// Each node's liveness (whether a returned value depends on it) and
/// every reader of it, dead ones included: what the epilogue folds need
/// to rewrite a node only where they know all its readers.
fn live_and_readers(f: &CheckedFn) -> (Vec<bool>, Vec<Vec<NodeId>>) {
    let g = &f.graph;
    let n = g.nodes.len();
    let mut live = vec![false; n];
    for &r in &f.ret {
        live[r] = true;
    }
    let mut readers: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    for id in (0..n).rev() {
        for i in g.inputs(id) {
            if live[id] {
                live[i] = true;
            }
            readers[i].push(id);
        }
    }
    (live, readers)
}

/// Plans a checked function. `kernels` are the element programs of the
/// invocation's kernels (`None` for one with errors, which a checked
/// function does not call); `peaks` the candidates of earlier functions.
pub fn plan(f: &CheckedFn, kernels: &[Option<Kernel>], peaks: &Peaks) -> Plan {
    let g = &f.graph;
    let n = g.nodes.len();
    // Values the results do not depend on have no effect: they are not
    // computed (and do not keep their operands from fusing).
    let mut live = vec![false; n];
    for &r in &f.ret {
        live[r] = true;
    }
    for id in (0..n).rev() {
        if live[id] {
            for i in g.inputs(id) {
                live[i] = true;
            }
        }
    }
    let mut users: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    for id in (0..n).filter(|&id| live[id]) {
        for i in g.inputs(id) {
            users[i].push(id);
        }
    }
    let mut forced_root = vec![false; n];
    loop {
        let group_of = assign_groups(g, &users, &f.ret, &forced_root, &live);
        let groups = build_groups(g, &group_of, kernels);
        match groups.iter().find(|gr| gr.inputs.len() > MAX_FUSED_INPUTS) {
            Some(big) => {
                // Materialise the member reading the most inputs and retry.
                let split = big
                    .members
                    .iter()
                    .copied()
                    .filter(|&m| m != big.out)
                    .max_by_key(|&m| g.inputs(m).len())
                    .expect("a group with more than 8 inputs has several members");
                forced_root[split] = true;
            }
            None => return schedule(f, groups, &live, peaks),
        }
    }
}

/// For each elementwise node, the root of its kernel.
fn assign_groups(
    g: &Graph,
    users: &[Vec<NodeId>],
    ret: &[NodeId],
    forced: &[bool],
    live: &[bool],
) -> Vec<Option<NodeId>> {
    let n = g.nodes.len();
    let mut group_of: Vec<Option<NodeId>> = vec![None; n];
    for id in (0..n).rev() {
        if !live[id] || !is_elementwise(g, id) {
            continue;
        }
        let inline = !forced[id]
            && !ret.contains(&id)
            && !hoisted(g, users, id)
            && !users[id].is_empty()
            && users[id].iter().all(|&u| is_elementwise(g, u))
            && {
                let first = group_of[users[id][0]];
                first.is_some() && users[id].iter().all(|&u| group_of[u] == first)
            };
        group_of[id] = if inline {
            group_of[users[id][0]]
        } else {
            Some(id)
        };
    }
    group_of
}

/// Whether node `n` gets a kernel of its own although its users are
/// elementwise: a costly unary op (a square root, an exponential, a
/// division inside `recip`, ...) on a tensor that a user broadcasts to
/// more elements. Fused into the user, it would run once per element of
/// the larger result; on its own it runs once per element of its own, and
/// the user reads the result as it reads any broadcast operand. The eval
/// `batch_norm`'s `rsqrt(var + eps)` per channel is the case: inside the
/// `[N, C, H, W]` kernel it cost a correctly rounded square root and
/// division for every element. The values are the same either way (every
/// op rounds to the dtype as it would inside the kernel).
fn hoisted(g: &Graph, users: &[Vec<NodeId>], n: NodeId) -> bool {
    let costly = matches!(
        g.nodes[n].op,
        Op::Unary(op, _) if !matches!(op, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Square)
    );
    if !costly || !matches!(g.nodes[n].ty, Ty::Tensor(_)) {
        return false;
    }
    let dims = &tensor_ty(g, n).dims;
    users[n].iter().any(|&u| {
        matches!(g.nodes[u].ty, Ty::Tensor(_)) && broadcast_to_more(dims, &tensor_ty(g, u).dims)
    })
}

/// Whether `from`, broadcast to `to` (dims aligned on the right), is
/// repeated: `to` has a leading dim or a dim against `from`'s size-1 one
/// that is not the constant 1.
fn broadcast_to_more(from: &[Dim], to: &[Dim]) -> bool {
    let one = |d: &Dim| d.as_constant() == Some(1);
    let lead = to.len().saturating_sub(from.len());
    to[..lead].iter().any(|d| !one(d))
        || from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .any(|(f, t)| one(f) && !one(t))
}

/// A constant of dtype `d` from a literal of the program: integers
/// truncate toward zero as Rust's `as` does (the checker has rejected
/// fractions and values out of range where they matter), a `bool` is
/// whether the value is not zero.
///
/// ```
/// use tensorfn_kernels::ir::{ElementwiseBuilder, Inst, Scalar};
/// use tensorfn_kernels::DTypeKind;
/// use tensorfn_macros_impl::plan::constant;
///
/// let mut b = ElementwiseBuilder::with_cse();
/// let c = constant(&mut b, -2.0, DTypeKind::I32);
/// let kernel = b.output(c)?;
/// assert_eq!(
///     kernel.insts()[0],
///     Inst::Const { value: Scalar::Int(-2), dtype: DTypeKind::I32 }
/// );
///
/// let mut b = ElementwiseBuilder::with_cse();
/// let c = constant(&mut b, 0.1, DTypeKind::F16);
/// assert_eq!(b.output(c)?.eval_f64(&[]), 0.0999755859375); // the nearest f16
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn constant(b: &mut ElementwiseBuilder, value: f64, d: DTypeKind) -> Value {
    if d == DTypeKind::Bool {
        b.constant((value != 0.0) as u8 as f64, d)
    } else if d.is_float() {
        b.constant(value, d)
    } else {
        b.constant_int(value as i64, d)
    }
}

struct Builder<'a> {
    g: &'a Graph,
    group_of: &'a [Option<NodeId>],
    root: NodeId,
    kernels: &'a [Option<Kernel>],
    /// Reuses identical instructions: a value used twice is computed once.
    b: ElementwiseBuilder,
    inputs: Vec<GroupInput>,
    /// The builder's value of each of `inputs`.
    input_values: Vec<Value>,
    memo: HashMap<(NodeId, DTypeKind), Value>,
    members: Vec<NodeId>,
}

impl Builder<'_> {
    /// The value of node `n` as an element of dtype `d` (scalars take the
    /// dtype of the tensor they combine with).
    fn value(&mut self, n: NodeId, d: DTypeKind) -> Value {
        if let Some(&v) = self.memo.get(&(n, d)) {
            return v;
        }
        let g = self.g;
        let v = if is_scalar(g, n) {
            match g.nodes[n].op {
                Op::Lit { value, .. } => constant(&mut self.b, value, d),
                _ => self.input(GroupInput::Scalar { node: n, dtype: d }, d),
            }
        } else if self.group_of[n] == Some(self.root) {
            self.members.push(n);
            let nd = tensor_ty(g, n).dtype.kind();
            match g.nodes[n].op.clone() {
                Op::Unary(op, a) => {
                    let a = self.value(a, nd);
                    self.b.unary(op, a)
                }
                Op::Binary(op, a, b) => {
                    let (a, b) = (self.value(a, nd), self.value(b, nd));
                    self.b.binary(op, a, b)
                }
                Op::Compare(op, a, b) => {
                    // The operands' shared dtype: a scalar takes the tensor's.
                    let od = if is_scalar(g, a) {
                        tensor_ty(g, b).dtype.kind()
                    } else {
                        tensor_ty(g, a).dtype.kind()
                    };
                    let (a, b) = (self.value(a, od), self.value(b, od));
                    self.b.compare(op, a, b)
                }
                Op::Where(c, a, b) => {
                    let c = self.value(c, DTypeKind::Bool);
                    let (a, b) = (self.value(a, nd), self.value(b, nd));
                    self.b.select(c, a, b)
                }
                Op::Cast(a, to) => {
                    let from = tensor_ty(g, a).dtype.kind();
                    let a = self.value(a, from);
                    self.b.cast(a, to.kind())
                }
                Op::AddCmul {
                    input,
                    t1,
                    t2,
                    value,
                } => {
                    let x = self.value(input, nd);
                    let (a, b) = (self.value(t1, nd), self.value(t2, nd));
                    let c = self.value(value, nd);
                    let ca = self.b.binary(BinaryOp::Mul, c, a);
                    let cab = self.b.binary(BinaryOp::Mul, ca, b);
                    self.b.binary(BinaryOp::Add, x, cab)
                }
                Op::Kernel { kernel, args } => {
                    let k = self.kernels[kernel]
                        .as_ref()
                        .expect("a checked function calls kernels without errors");
                    let vals: Vec<Value> = args
                        .iter()
                        .zip(k.inputs())
                        .map(|(&a, &pd)| self.value(a, pd))
                        .collect();
                    self.b.inline(k, &vals)
                }
                other => unreachable!("not elementwise: {other:?}"),
            }
        } else {
            let dt = tensor_ty(g, n).dtype.kind();
            self.input(GroupInput::Tensor(n), dt)
        };
        self.memo.insert((n, d), v);
        v
    }

    fn input(&mut self, i: GroupInput, d: DTypeKind) -> Value {
        match self.inputs.iter().position(|x| *x == i) {
            Some(k) => self.input_values[k],
            None => {
                self.inputs.push(i);
                let v = self.b.input(d);
                self.input_values.push(v);
                v
            }
        }
    }
}

fn build_groups(
    g: &Graph,
    group_of: &[Option<NodeId>],
    kernels: &[Option<Kernel>],
) -> Vec<FusedGroup> {
    let mut out = Vec::new();
    for root in 0..g.nodes.len() {
        if group_of[root] != Some(root) {
            continue;
        }
        let mut b = Builder {
            g,
            group_of,
            root,
            kernels,
            b: ElementwiseBuilder::with_cse(),
            inputs: vec![],
            input_values: vec![],
            memo: HashMap::new(),
            members: vec![],
        };
        let d = tensor_ty(g, root).dtype.kind();
        let o = b.value(root, d);
        b.members.sort_unstable();
        b.members.dedup();
        out.push(FusedGroup {
            out: root,
            members: b.members,
            inputs: b.inputs,
            kernel: b.b.output(o),
        });
    }
    out
}

/// Bytes of a node's value.
fn bytes(g: &Graph, n: NodeId) -> Dim {
    let t = tensor_ty(g, n);
    numel(&t.dims).mul(&Dim::constant(t.dtype.kind().size_bytes() as i64))
}

/// Where a value's storage comes from and whether it is row-major.
#[derive(Clone, Copy)]
struct Storage {
    /// The buffer (a node that allocated it), `None` for parameters.
    root: Option<NodeId>,
    /// Known to be contiguous.
    contiguous: bool,
}

/// Whether group `gr` can run inside a row kernel over rows of `cols`
/// elements of `dtype`: a well-typed program whose tensors are rows of
/// that dtype and length, and whose scalars a row kernel's scalar
/// parameters carry.
fn row_foldable(g: &Graph, gr: &FusedGroup, dtype: DTypeKind, cols: &Dim) -> bool {
    gr.kernel.is_ok()
        && tensor_ty(g, gr.out).dtype.kind() == dtype
        && gr.inputs.iter().all(|i| match i {
            GroupInput::Tensor(n) => {
                let t = tensor_ty(g, *n);
                t.dtype.kind() == dtype && t.dims.last() == Some(cols)
            }
            GroupInput::Scalar { dtype, .. } => matches!(
                dtype,
                DTypeKind::F32 | DTypeKind::F64 | DTypeKind::I32 | DTypeKind::I64
            ),
        })
}

/// The row kernels with elementwise groups folded in ([`RowStep`]), by
/// the node at whose place each runs (the consumer's, which follows
/// every value it reads); the groups folded are taken out of `by_root`.
fn row_steps(
    f: &CheckedFn,
    live: &[bool],
    by_root: &mut HashMap<NodeId, FusedGroup>,
) -> HashMap<NodeId, RowStep> {
    let g = &f.graph;
    let n = g.nodes.len();
    let mut users: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    for id in (0..n).filter(|&id| live[id]) {
        for i in g.inputs(id) {
            users[i].push(id);
        }
    }
    let only_use = |x: NodeId, by: NodeId| users[x] == [by] && !f.ret.contains(&x);
    let mut out = HashMap::new();
    for rk in (0..n).filter(|&id| live[id]) {
        let Op::RowKernel { args, .. } = &g.nodes[rk].op else {
            continue;
        };
        let Ty::Tensor(t) = &g.nodes[rk].ty else {
            continue;
        };
        let dtype = t.dtype.kind();
        let rows: Vec<(usize, NodeId)> = args
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, a)| !is_scalar(g, a))
            .collect();
        let Some(cols) = rows
            .first()
            .and_then(|&(_, a)| tensor_ty(g, a).dims.last().cloned())
        else {
            continue;
        };
        let mut producers = Vec::new();
        for &(i, a) in &rows {
            let fits = by_root
                .get(&a)
                .is_some_and(|gr| only_use(a, rk) && row_foldable(g, gr, dtype, &cols));
            if fits {
                producers.push((i, by_root.remove(&a).expect("the group just found")));
            }
        }
        // A result per column (a per-row result drops the rows' dim) read
        // by one group alone, of the result's dims.
        let rank = rows.iter().map(|&(_, a)| tensor_ty(g, a).dims.len()).max();
        let per_column = Some(t.dims.len()) == rank;
        let reader = (per_column && !f.ret.contains(&rk))
            .then(|| {
                by_root.values().find(|gr| {
                    gr.inputs.contains(&GroupInput::Tensor(rk))
                        && users[rk].iter().all(|u| gr.members.contains(u))
                        && tensor_ty(g, gr.out).dims == t.dims
                        && row_foldable(g, gr, dtype, &cols)
                })
            })
            .flatten()
            .map(|gr| gr.out);
        let consumer = reader.map(|c| by_root.remove(&c).expect("the group just found"));
        if producers.is_empty() && consumer.is_none() {
            continue;
        }
        let step = RowStep {
            node: rk,
            producers,
            consumer,
        };
        out.insert(step.out(), step);
    }
    out
}

fn schedule(f: &CheckedFn, groups: Vec<FusedGroup>, live: &[bool], peaks: &Peaks) -> Plan {
    let g = &f.graph;
    let mut by_root: HashMap<NodeId, FusedGroup> =
        groups.into_iter().map(|gr| (gr.out, gr)).collect();
    let mut rows = row_steps(f, live, &mut by_root);
    // Row kernels that run at their consumer's place.
    let moved: Vec<NodeId> = rows.values().map(|r| r.node).collect();
    let mut steps: Vec<Step> = Vec::new();
    let mut step_of: HashMap<NodeId, usize> = HashMap::new();
    for (id, _) in live.iter().enumerate().filter(|&(_, &l)| l) {
        if is_scalar(g, id) || matches!(g.nodes[id].ty, Ty::Error) {
            continue;
        }
        if let Op::Param(_) = g.nodes[id].op {
            continue;
        }
        if let Some(r) = rows.remove(&id) {
            step_of.insert(id, steps.len());
            steps.push(Step::Rows(r));
            continue;
        }
        if moved.contains(&id) {
            continue;
        }
        if is_elementwise(g, id) {
            if let Some(gr) = by_root.remove(&id) {
                step_of.insert(id, steps.len());
                steps.push(Step::Fused(gr));
            }
            continue;
        }
        step_of.insert(id, steps.len());
        steps.push(Step::Op(id));
    }

    let reads = |s: &Step| step_reads(g, s);
    let mut last_use: HashMap<NodeId, usize> = HashMap::new();
    for (i, s) in steps.iter().enumerate() {
        for r in reads(s) {
            last_use.insert(r, i);
        }
    }
    let end = steps.len();
    for &r in &f.ret {
        last_use.insert(r, end);
    }

    // Storage and memory.
    let mut storage: HashMap<NodeId, Storage> = HashMap::new();
    for &p in &f.params {
        storage.insert(
            p,
            Storage {
                root: None,
                contiguous: false,
            },
        );
    }
    let mut buffers: Vec<(NodeId, Dim, usize)> = Vec::new(); // (root, bytes, created at)
    let mut call_extra: HashMap<usize, Vec<Dim>> = HashMap::new();
    let mut peak_known = true;
    for (i, s) in steps.iter().enumerate() {
        let (out, fresh, contiguous, alias): (NodeId, Option<Dim>, bool, Option<NodeId>) = match s {
            Step::Fused(gr) => {
                let scalars = gr
                    .inputs
                    .iter()
                    .filter_map(|x| match x {
                        GroupInput::Scalar { dtype, .. } => {
                            Some(Dim::constant(dtype.size_bytes() as i64))
                        }
                        GroupInput::Tensor(_) => None,
                    })
                    .fold(Dim::constant(0), |a, b| a.add(&b));
                (gr.out, Some(bytes(g, gr.out).add(&scalars)), true, None)
            }
            Step::Drop(_) => continue,
            Step::Rows(r) => (r.out(), Some(bytes(g, r.out())), true, None),
            Step::Op(n) => {
                let n = *n;
                let src = |x: NodeId| {
                    storage.get(&x).copied().unwrap_or(Storage {
                        root: None,
                        contiguous: false,
                    })
                };
                match &g.nodes[n].op {
                    Op::MatMul(..)
                    | Op::Bmm(..)
                    | Op::Dot(..)
                    | Op::AddMm { .. }
                    | Op::AddMmAct { .. }
                    | Op::Attention { .. } => (n, Some(bytes(g, n)), true, None),
                    Op::Reduce { .. }
                    | Op::Row { .. }
                    | Op::Cat { .. }
                    | Op::Norm { .. }
                    | Op::RowKernel { .. }
                    | Op::Embedding { .. }
                    | Op::CrossEntropy { .. }
                    | Op::CrossEntropyBackward { .. }
                    | Op::Cumsum { .. }
                    | Op::Pool { .. }
                    | Op::PoolBackward { .. }
                    | Op::Dropout { .. }
                    | Op::Multinomial { .. }
                    | Op::Conv { .. }
                    | Op::ConvBackward { .. }
                    | Op::Select { .. }
                    | Op::ScatterAdd { .. }
                    | Op::Arange { .. }
                    | Op::Rope { .. }
                    | Op::Triangle { .. } => (n, Some(bytes(g, n)), true, None),
                    Op::ToDevice(x, d) => {
                        if tensor_ty(g, *x).device == *d {
                            (n, None, src(*x).contiguous, Some(*x))
                        } else {
                            (n, Some(bytes(g, n)), true, None)
                        }
                    }
                    Op::Reshape { x, view } => {
                        if *view || src(*x).contiguous {
                            (n, None, true, Some(*x))
                        } else {
                            // A parameter or a strided view may be copied.
                            (n, Some(bytes(g, n)), true, None)
                        }
                    }
                    Op::T(x) | Op::Permute(x, _) | Op::Transpose(x, ..) | Op::Expand(x) => {
                        (n, None, false, Some(*x))
                    }
                    Op::Narrow { x, dim, .. } => {
                        (n, None, *dim == 0 && src(*x).contiguous, Some(*x))
                    }
                    Op::Index { x, .. } => (n, None, src(*x).contiguous, Some(*x)),
                    Op::TupleGet(x, _) => (n, None, true, Some(*x)),
                    Op::Call {
                        callee,
                        bindings,
                        dtypes,
                        ..
                    } => {
                        match f_sig_of(peaks, *callee, dtypes) {
                            Some(cands) => {
                                let bind: HashMap<&str, Dim> = bindings
                                    .iter()
                                    .map(|(k, v)| (k.as_str(), v.clone()))
                                    .collect();
                                let subst: Vec<Dim> = cands
                                    .iter()
                                    .filter_map(|c| c.substitute(&|s| bind.get(s).cloned()))
                                    .collect();
                                if subst.len() != cands.len() {
                                    peak_known = false;
                                }
                                call_extra.insert(i, subst);
                            }
                            None => peak_known = false,
                        }
                        let total = match &g.nodes[n].ty {
                            Ty::Tuple(ts) => ts.iter().fold(Dim::constant(0), |a, t| {
                                a.add(
                                    &numel(&t.dims)
                                        .mul(&Dim::constant(t.dtype.kind().size_bytes() as i64)),
                                )
                            }),
                            _ => bytes(g, n),
                        };
                        (n, Some(total), true, None)
                    }
                    Op::AttentionBackward { .. }
                    | Op::NormBackward { .. }
                    | Op::TopK { .. }
                    | Op::MatMulSumK { .. }
                    | Op::AddMmGeluAux { .. }
                    | Op::MatMulDGelu { .. } => {
                        let total = match &g.nodes[n].ty {
                            Ty::Tuple(ts) => ts.iter().fold(Dim::constant(0), |a, t| {
                                a.add(
                                    &numel(&t.dims)
                                        .mul(&Dim::constant(t.dtype.kind().size_bytes() as i64)),
                                )
                            }),
                            _ => bytes(g, n),
                        };
                        (n, Some(total), true, None)
                    }
                    Op::External { .. } => {
                        peak_known = false;
                        (n, Some(bytes(g, n)), true, None)
                    }
                    other => unreachable!("not a step: {other:?}"),
                }
            }
        };
        match (fresh, alias) {
            (Some(b), _) => {
                buffers.push((out, b, i));
                storage.insert(
                    out,
                    Storage {
                        root: Some(out),
                        contiguous,
                    },
                );
            }
            (None, Some(x)) => {
                let root = storage.get(&x).and_then(|s| s.root);
                storage.insert(out, Storage { root, contiguous });
            }
            (None, None) => unreachable!("a step allocates or aliases"),
        }
    }
    // A buffer lives until the last use of anything aliasing it.
    let mut buffer_end: HashMap<NodeId, usize> = HashMap::new();
    for (&node, &last) in &last_use {
        if let Some(Storage { root: Some(r), .. }) = storage.get(&node) {
            let e = buffer_end.entry(*r).or_insert(0);
            *e = (*e).max(last);
        }
    }
    let mut cands: Vec<Dim> = Vec::new();
    for i in 0..steps.len() {
        let live = buffers
            .iter()
            .filter(|(r, _, at)| *at <= i && buffer_end.get(r).copied().unwrap_or(*at) >= i)
            .fold(Dim::constant(0), |a, (_, b, _)| a.add(b));
        cands.push(live.clone());
        if let Some(extra) = call_extra.get(&i) {
            // During a call: the caller's live buffers before it plus the
            // callee's own peak.
            let before = buffers
                .iter()
                .find(|(_, _, at)| *at == i)
                .map(|(_, b, _)| live.sub(b))
                .unwrap_or_else(|| live.clone());
            for c in extra {
                cands.push(before.add(c));
            }
        }
    }
    let peak = peak_known.then(|| prune(cands));

    // Drops after last uses (never of results or of partially moved tuples).
    let mut out = Vec::new();
    for (i, s) in steps.into_iter().enumerate() {
        let mut r = reads(&s);
        // A step may read a value twice (`cat([h, h], 0)`): one drop.
        let mut seen = Vec::with_capacity(r.len());
        r.retain(|x| {
            !seen.contains(x) && {
                seen.push(*x);
                true
            }
        });
        out.push(s);
        for x in r {
            if last_use.get(&x) == Some(&i)
                && !f.params.contains(&x)
                && !matches!(g.nodes[x].ty, Ty::Tuple(_))
                && step_of.contains_key(&x)
            {
                out.push(Step::Drop(x));
            }
        }
    }
    let root_of = storage
        .iter()
        .filter_map(|(&n, s)| Some((n, s.root?)))
        .collect();
    let buffers = buffers.into_iter().map(|(r, b, _)| (r, b)).collect();
    Plan {
        steps: out,
        peak,
        buffers,
        root_of,
    }
}

/// The materialised nodes step `s` reads (scalars and values folded
/// into it not counted).
pub(crate) fn step_reads(g: &Graph, s: &Step) -> Vec<NodeId> {
    match s {
        Step::Fused(gr) => gr
            .inputs
            .iter()
            .filter_map(|i| match i {
                GroupInput::Tensor(n) => Some(*n),
                GroupInput::Scalar { .. } => None,
            })
            .collect(),
        Step::Op(n) => g
            .inputs(*n)
            .into_iter()
            .filter(|&i| !is_scalar(g, i))
            .collect(),
        Step::Rows(r) => {
            let folded: Vec<NodeId> = r.producers.iter().map(|(_, p)| p.out).collect();
            let mut v: Vec<NodeId> = g
                .inputs(r.node)
                .into_iter()
                .filter(|&i| !is_scalar(g, i) && !folded.contains(&i))
                .collect();
            let groups = r.producers.iter().map(|(_, p)| p).chain(&r.consumer);
            for gr in groups {
                v.extend(gr.inputs.iter().filter_map(|i| match i {
                    GroupInput::Tensor(n) if *n != r.node => Some(*n),
                    _ => None,
                }));
            }
            v
        }
        Step::Drop(_) => vec![],
    }
}

fn f_sig_of(peaks: &Peaks, callee: usize, dtypes: &[crate::ast::Dt]) -> Option<Vec<Dim>> {
    let key = (callee, crate::instance::Instance::concrete(dtypes));
    peaks.get(&key).cloned().flatten()
}

/// Drops candidates that another candidate bounds from above for every
/// non-negative value of the symbols.
fn prune(cands: Vec<Dim>) -> Vec<Dim> {
    let mut keep: Vec<Dim> = Vec::new();
    for c in cands {
        if keep.iter().any(|k| k.sub(&c).is_non_negative() || *k == c) {
            continue;
        }
        keep.retain(|k| !c.sub(k).is_non_negative());
        keep.push(c);
    }
    if keep.is_empty() {
        keep.push(Dim::constant(0));
    }
    keep
}
