//! From the typed graph to a plan: which nodes run as one fused
//! elementwise kernel, which are runtime calls (matmul, addmm, views,
//! reductions, ...), when each intermediate can be dropped, and the peak
//! bytes of live intermediates.
//!
//! Fusion takes maximal elementwise chains: an elementwise node joins its
//! users' kernel when every user is elementwise and in one kernel, so a
//! value read by a matmul, by two kernels, or returned is materialised
//! once and everything else stays in registers.

use crate::check::CheckedFn;
use crate::graph::*;
use crate::ir::{Inst, Ir, Val};
use crate::shape::{numel, Dim};
use std::collections::HashMap;
use tensorfn_core::DTypeKind;
use tensorfn_kernels::BinaryOp;

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
    /// The element program.
    pub ir: Ir,
}

/// One step of the plan.
#[derive(Clone, Debug)]
pub enum Step {
    /// A fused elementwise kernel.
    Fused(FusedGroup),
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
}

/// The peak candidates of every function planned so far, by index, for
/// calls between functions.
pub type Peaks = [Option<Vec<Dim>>];

fn is_elementwise(g: &Graph, n: NodeId) -> bool {
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

/// Plans a checked function. `kernels` are the element programs of the
/// invocation's kernels; `peaks` the candidates of earlier functions.
pub fn plan(f: &CheckedFn, kernels: &[Ir], peaks: &Peaks) -> Plan {
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

struct Builder<'a> {
    g: &'a Graph,
    group_of: &'a [Option<NodeId>],
    root: NodeId,
    kernels: &'a [Ir],
    ir: Ir,
    inputs: Vec<GroupInput>,
    memo: HashMap<(NodeId, DTypeKind), Val>,
    members: Vec<NodeId>,
}

impl Builder<'_> {
    /// The value of node `n` as an element of dtype `d` (scalars take the
    /// dtype of the tensor they combine with).
    fn value(&mut self, n: NodeId, d: DTypeKind) -> Val {
        if let Some(&v) = self.memo.get(&(n, d)) {
            return v;
        }
        let g = self.g;
        let v = if is_scalar(g, n) {
            match g.nodes[n].op {
                Op::Lit { value, .. } => self.ir.push(Inst::Const(value), d),
                _ => self.input(GroupInput::Scalar { node: n, dtype: d }, d),
            }
        } else if self.group_of[n] == Some(self.root) {
            self.members.push(n);
            let nd = tensor_ty(g, n).dtype;
            match g.nodes[n].op.clone() {
                Op::Unary(op, a) => {
                    let a = self.value(a, nd);
                    self.ir.push(Inst::Unary(op, a), nd)
                }
                Op::Binary(op, a, b) => {
                    let (a, b) = (self.value(a, nd), self.value(b, nd));
                    self.ir.push(Inst::Binary(op, a, b), nd)
                }
                Op::Compare(op, a, b) => {
                    // The operands' shared dtype: a scalar takes the tensor's.
                    let od = if is_scalar(g, a) {
                        tensor_ty(g, b).dtype
                    } else {
                        tensor_ty(g, a).dtype
                    };
                    let (a, b) = (self.value(a, od), self.value(b, od));
                    self.ir.push(Inst::Cmp(op, a, b), nd)
                }
                Op::Where(c, a, b) => {
                    let c = self.value(c, DTypeKind::Bool);
                    let (a, b) = (self.value(a, nd), self.value(b, nd));
                    self.ir.push(Inst::Select(c, a, b), nd)
                }
                Op::Cast(a, to) => {
                    let from = tensor_ty(g, a).dtype;
                    let a = self.value(a, from);
                    self.ir.push(Inst::Cast(a), to)
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
                    let ca = self.ir.push(Inst::Binary(BinaryOp::Mul, c, a), nd);
                    let cab = self.ir.push(Inst::Binary(BinaryOp::Mul, ca, b), nd);
                    self.ir.push(Inst::Binary(BinaryOp::Add, x, cab), nd)
                }
                Op::Kernel { kernel, args } => {
                    let k = &self.kernels[kernel];
                    let vals: Vec<Val> = args
                        .iter()
                        .zip(k.inputs.clone())
                        .map(|(&a, pd)| self.value(a, pd))
                        .collect();
                    let k = self.kernels[kernel].clone();
                    self.ir.inline(&k, &vals)
                }
                other => unreachable!("not elementwise: {other:?}"),
            }
        } else {
            let dt = tensor_ty(g, n).dtype;
            self.input(GroupInput::Tensor(n), dt)
        };
        self.memo.insert((n, d), v);
        v
    }

    fn input(&mut self, i: GroupInput, d: DTypeKind) -> Val {
        let k = match self.inputs.iter().position(|x| *x == i) {
            Some(k) => k,
            None => {
                self.inputs.push(i);
                self.ir.inputs.push(d);
                self.inputs.len() - 1
            }
        };
        self.ir.push(Inst::Input(k), d)
    }
}

fn build_groups(g: &Graph, group_of: &[Option<NodeId>], kernels: &[Ir]) -> Vec<FusedGroup> {
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
            ir: Ir::new(vec![]),
            inputs: vec![],
            memo: HashMap::new(),
            members: vec![],
        };
        let d = tensor_ty(g, root).dtype;
        let o = b.value(root, d);
        b.ir.output = o;
        b.members.sort_unstable();
        b.members.dedup();
        out.push(FusedGroup {
            out: root,
            members: b.members,
            inputs: b.inputs,
            ir: b.ir,
        });
    }
    out
}

/// Bytes of a node's value.
fn bytes(g: &Graph, n: NodeId) -> Dim {
    let t = tensor_ty(g, n);
    numel(&t.dims).mul(&Dim::constant(t.dtype.size_bytes() as i64))
}

/// Where a value's storage comes from and whether it is row-major.
#[derive(Clone, Copy)]
struct Storage {
    /// The buffer (a node that allocated it), `None` for parameters.
    root: Option<NodeId>,
    /// Known to be contiguous.
    contiguous: bool,
}

fn schedule(f: &CheckedFn, groups: Vec<FusedGroup>, live: &[bool], peaks: &Peaks) -> Plan {
    let g = &f.graph;
    let mut by_root: HashMap<NodeId, FusedGroup> =
        groups.into_iter().map(|gr| (gr.out, gr)).collect();
    let mut steps: Vec<Step> = Vec::new();
    let mut step_of: HashMap<NodeId, usize> = HashMap::new();
    for (id, _) in live.iter().enumerate().filter(|(_, &l)| l) {
        if is_scalar(g, id) || matches!(g.nodes[id].ty, Ty::Error) {
            continue;
        }
        if let Op::Param(_) = g.nodes[id].op {
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

    // Which materialised nodes each step reads.
    let reads = |s: &Step| -> Vec<NodeId> {
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
            Step::Drop(_) => vec![],
        }
    };
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
            Step::Op(n) => {
                let n = *n;
                let src = |x: NodeId| {
                    storage.get(&x).copied().unwrap_or(Storage {
                        root: None,
                        contiguous: false,
                    })
                };
                match &g.nodes[n].op {
                    Op::MatMul(..) | Op::Bmm(..) | Op::Dot(..) | Op::AddMm { .. } => {
                        (n, Some(bytes(g, n)), true, None)
                    }
                    Op::Reduce { .. } | Op::Softmax { .. } | Op::Cat { .. } => {
                        (n, Some(bytes(g, n)), true, None)
                    }
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
                    Op::T(x) | Op::Permute(x, _) | Op::Transpose(x, ..) => {
                        (n, None, false, Some(*x))
                    }
                    Op::Narrow { x, dim, .. } => {
                        (n, None, *dim == 0 && src(*x).contiguous, Some(*x))
                    }
                    Op::Index { x, .. } => (n, None, src(*x).contiguous, Some(*x)),
                    Op::TupleGet(x, _) => (n, None, true, Some(*x)),
                    Op::Call {
                        callee, bindings, ..
                    } => {
                        match f_sig_of(peaks, *callee) {
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
                                        .mul(&Dim::constant(t.dtype.size_bytes() as i64)),
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
        let r = reads(&s);
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
    Plan { steps: out, peak }
}

fn f_sig_of(peaks: &Peaks, callee: usize) -> Option<Vec<Dim>> {
    peaks.get(callee).cloned().flatten()
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
