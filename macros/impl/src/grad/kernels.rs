//! The derivative of a scalar `#[kernel]` call: the chain rule over the
//! kernel's element IR, with the graph's own rules.
//!
//! The forward keeps its `Op::Kernel` node (one fused kernel, as without
//! `#[grad]`). The backward writes the kernel's instructions that lie on
//! the gradient's path again as ordinary elementwise graph nodes over the
//! call's arguments (an instruction becomes the `Unary`, `Binary`,
//! `Compare`, `Where` or `Cast` node it stands for), and sweeps them in
//! reverse with [`Deriver::rule`], the rules every built-in elementwise op
//! uses. Those recomputed values are elementwise nodes of the backward,
//! so they fuse into the backward's kernels; what the backward keeps from
//! the forward is the call's arguments.
//!
//! What has no gradient is refused, naming the kernel and the operation:
//! integer arithmetic or a cast to an integer on the path from a
//! differentiated value to the kernel's result, and a comparison of such
//! a value used as a number (`(x > 0.0) as f32`) rather than as the
//! condition of an `if`.

use super::Deriver;
use crate::ast::ScalarKind;
use crate::graph::*;
use std::collections::{HashMap, HashSet};
use tensorfn_core::DTypeKind;
use tensorfn_kernels::ir::{Inst, Kernel, Scalar};
use tensorfn_kernels::rowkernel::RowProgram;

/// The invocation's `#[kernel]`s as the backward reads them: each one's
/// name, element program (`None` for a row kernel or one with errors) and
/// row program (`None` for a scalar kernel or one with errors).
#[derive(Clone, Debug, Default)]
pub struct KernelBodies {
    /// The kernels' names, in the invocation's order.
    pub names: Vec<String>,
    /// Their element programs, in the same order.
    pub programs: Vec<Option<Kernel>>,
    /// Their row programs, in the same order.
    pub rows: Vec<Option<RowProgram>>,
}

/// One kernel's instructions being written as graph nodes.
struct Rewrite<'k> {
    k: &'k Kernel,
    /// The program's inputs as nodes: the call's arguments, one per
    /// kernel parameter (and a row kernel's statistics after them).
    args: &'k [NodeId],
    /// Which instructions carry a gradient ([`carrying`]).
    needs: &'k [bool],
    /// The graph node of each instruction built so far.
    node: Vec<Option<NodeId>>,
}

/// The values written again as graph nodes for one call's backward.
#[derive(Default)]
pub(super) struct Swept {
    /// The written values that carry a gradient, operands first.
    order: Vec<NodeId>,
    /// Those values and the arguments that need a gradient: the nodes
    /// the sweep passes gradients to.
    carries: HashSet<NodeId>,
    /// Row maxima and minima (their reduction node, its source), swept
    /// by PyTorch's `amax` rule rather than `max(dim)`'s.
    pub(super) extremes: HashMap<NodeId, NodeId>,
}

impl Swept {
    /// Marks `n`, a value built from one that needs a gradient.
    pub(super) fn carry(&mut self, n: NodeId) {
        if self.carries.insert(n) {
            self.order.push(n);
        }
    }
}

/// Which values of `k` carry a gradient, given which inputs do: those
/// computed from such an input through operands that carry it (not an
/// `if`'s condition, not a comparison).
pub(super) fn carrying(k: &Kernel, in_needs: &[bool]) -> Vec<bool> {
    let insts = k.insts();
    let mut needs = vec![false; insts.len()];
    for (v, inst) in insts.iter().enumerate() {
        needs[v] = match *inst {
            Inst::Input { index, .. } => in_needs[index],
            Inst::Const { .. } | Inst::Compare { .. } => false,
            Inst::Select {
                on_true, on_false, ..
            } => needs[on_true.index()] || needs[on_false.index()],
            _ => inst.operands().iter().any(|o| needs[o.index()]),
        };
    }
    needs
}

/// Which values of `k` its result is computed from.
pub(super) fn used_by_output(k: &Kernel) -> Vec<bool> {
    let insts = k.insts();
    let mut used = vec![false; insts.len()];
    used[k.output().index()] = true;
    for v in (0..insts.len()).rev() {
        if used[v] {
            for o in insts[v].operands() {
                used[o.index()] = true;
            }
        }
    }
    used
}

impl Deriver {
    /// Whether argument `a` of a kernel call needs a gradient.
    pub(super) fn arg_needs(&self, a: NodeId) -> bool {
        a < self.live.len() && self.live[a] && self.is_tensor(a)
    }

    /// The gradients of the arguments of `kernel(args..)` given the
    /// call's gradient `g`.
    pub(super) fn kernel_rule(
        &mut self,
        kernel: usize,
        args: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<(NodeId, NodeId)>, String> {
        let name = self.kernels.names.get(kernel).cloned().unwrap_or_default();
        let Some(k) = self.kernels.programs.get(kernel).cloned().flatten() else {
            return Err(format!("`{name}` has no element program to differentiate"));
        };
        let in_needs: Vec<bool> = args.iter().map(|&a| self.arg_needs(a)).collect();
        let needs = carrying(&k, &in_needs);
        if let Some(why) = not_differentiable(&k, &needs, &used_by_output(&k)) {
            return Err(format!("`{name}` {why}"));
        }
        if !needs[k.output().index()] {
            return Ok(vec![]);
        }
        let mut swept = Swept::default();
        let y = self.write_program(&k, args, &needs, &mut swept)?;
        self.sweep(&swept, y, g, args)
    }

    /// The result of program `k` over the input nodes `ins` written as
    /// graph nodes; those that carry a gradient (`needs`, from
    /// [`carrying`]) are marked in `swept`.
    pub(super) fn write_program(
        &mut self,
        k: &Kernel,
        ins: &[NodeId],
        needs: &[bool],
        swept: &mut Swept,
    ) -> Result<NodeId, String> {
        let mut rw = Rewrite {
            k,
            args: ins,
            needs,
            node: vec![None; k.insts().len()],
        };
        self.rebuild(&mut rw, k.output().index(), swept)
    }

    /// The reverse sweep from `y` (written by [`Self::write_program`]),
    /// seeded with `g`, through [`Deriver::rule`]: the gradients of the
    /// call's arguments `args`, keyed by graph node (two parameters bound
    /// to one argument share it).
    pub(super) fn sweep(
        &mut self,
        swept: &Swept,
        y: NodeId,
        g: NodeId,
        args: &[NodeId],
    ) -> Result<Vec<(NodeId, NodeId)>, String> {
        let mut adj: HashMap<NodeId, NodeId> = HashMap::new();
        let g = self.fit(y, g);
        adj.insert(y, g);
        for &y in swept.order.iter().rev() {
            let Some(&gy) = adj.get(&y) else { continue };
            let grads = match swept.extremes.get(&y) {
                Some(&x) => vec![(x, self.split_among_extremes(x, y, gy))],
                None => {
                    let op = self.g.nodes[y].op.clone();
                    self.rule(y, &op, gy)?
                }
            };
            for (o, go) in grads {
                // Only the operands on the gradient's path.
                if !swept.carries.contains(&o) {
                    continue;
                }
                let go = self.fit(o, go);
                let sum = match adj.get(&o) {
                    Some(&a) => self.bin(tensorfn_kernels::BinaryOp::Add, a, go),
                    None => go,
                };
                adj.insert(o, sum);
            }
        }
        let mut grads = Vec::new();
        for &a in args {
            if let Some(ga) = adj.remove(&a) {
                grads.push((a, ga));
            }
        }
        Ok(grads)
    }

    /// Value `v` of the kernel as a graph node (its operands first).
    fn rebuild(&mut self, rw: &mut Rewrite, v: usize, swept: &mut Swept) -> Result<NodeId, String> {
        if let Some(id) = rw.node[v] {
            return Ok(id);
        }
        let inst = rw.k.insts()[v];
        let mut ops = Vec::new();
        for o in inst.operands() {
            ops.push(self.rebuild(rw, o.index(), swept)?);
        }
        let dtype = rw.k.types()[v];
        let any_tensor = ops.iter().any(|&o| self.is_tensor(o));
        let scalar_ty = Ty::Scalar(ScalarTy::Of(ScalarKind::DType(dtype)));
        let like = ops.first().copied().unwrap_or(rw.args[0]);
        let id = match inst {
            Inst::Input { index, .. } => rw.args[index],
            Inst::Const { value, .. } => {
                let (value, int) = match value {
                    Scalar::Float(f) => (f, false),
                    Scalar::Int(i) => (i as f64, true),
                    Scalar::Bool(_) => {
                        return Err(
                            "uses a `bool` constant on the gradient's path, which is not differentiated yet"
                                .into(),
                        )
                    }
                };
                let ty = match int {
                    true => ScalarTy::IntLit,
                    false => ScalarTy::FloatLit,
                };
                self.push(Op::Lit { value, int }, Ty::Scalar(ty), like)
            }
            Inst::Unary { op, .. } if any_tensor => self.un(op, ops[0]),
            Inst::Unary { op, .. } => self.push(Op::Unary(op, ops[0]), scalar_ty, like),
            Inst::Binary { op, .. } if any_tensor => self.bin(op, ops[0], ops[1]),
            Inst::Binary { op, .. } => self.push(Op::Binary(op, ops[0], ops[1]), scalar_ty, like),
            Inst::Compare { op, .. } if any_tensor => self.cmp(op, ops[0], ops[1]),
            Inst::Select { .. } if any_tensor => {
                self.select(ops[0], ops[1], ops[2], crate::ast::Dt::Kind(dtype))
            }
            Inst::Cast { to, .. } if rw.k.types()[inst.operands()[0].index()] == to => ops[0],
            Inst::Cast { to, .. } if any_tensor => self.cast(ops[0], crate::ast::Dt::Kind(to)),
            // Scalar arguments' values are computed in `f64`, where a
            // float-to-float cast changes nothing.
            Inst::Cast { to, .. } if to.is_float() && self.scalar_is_float(ops[0]) => ops[0],
            // Values of scalar arguments alone: scalar nodes, computed in
            // `f64` where the backward reads them (`expand/scalars.rs`).
            Inst::Compare { op, .. } => {
                let ty = Ty::Scalar(ScalarTy::Of(ScalarKind::DType(DTypeKind::Bool)));
                self.push(Op::Compare(op, ops[0], ops[1]), ty, like)
            }
            Inst::Select { .. } => self.push(Op::Where(ops[0], ops[1], ops[2]), scalar_ty, like),
            Inst::Cast { to, .. } => {
                self.push(Op::Cast(ops[0], crate::ast::Dt::Kind(to)), scalar_ty, like)
            }
        };
        rw.node[v] = Some(id);
        if rw.needs[v] {
            match inst {
                // An argument: the sweep's end, not a step of it.
                Inst::Input { .. } => {
                    swept.carries.insert(id);
                }
                _ => swept.carry(id),
            }
        }
        Ok(id)
    }

    fn scalar_is_float(&self, n: NodeId) -> bool {
        matches!(self.g.nodes[n].ty, Ty::Scalar(s) if s.is_float())
    }
}

/// Why the kernel's result has no gradient from the values `needs`
/// marks: the first integer value computed from one (naming the
/// operation), or a comparison of one used other than as a condition.
pub(super) fn not_differentiable(k: &Kernel, needs: &[bool], used: &[bool]) -> Option<String> {
    let insts = k.insts();
    let types = k.types();
    // Values computed from a differentiated value through any operand
    // but a condition.
    let mut from = needs.to_vec();
    for (v, inst) in insts.iter().enumerate() {
        from[v] = match *inst {
            Inst::Input { .. } | Inst::Const { .. } => needs[v],
            Inst::Select {
                on_true, on_false, ..
            } => from[on_true.index()] || from[on_false.index()],
            _ => inst.operands().iter().any(|o| from[o.index()]),
        };
    }
    for (v, inst) in insts.iter().enumerate() {
        if !used[v] || !from[v] {
            continue;
        }
        let dt = types[v];
        // A comparison read as anything but an `if`'s condition.
        if let Inst::Compare { op, .. } = *inst {
            let as_value = insts.iter().find(|i| {
                !matches!(i, Inst::Select { cond, .. } if cond.index() == v)
                    && i.operands().iter().any(|o| o.index() == v)
            });
            if let Some(user) = as_value {
                let how = match *user {
                    Inst::Cast { to, .. } => format!("`as {to}`"),
                    _ => "as an operand".to_string(),
                };
                return Some(format!(
                    "uses the comparison `{sym}` of a differentiated value as a number ({how}), which has no gradient (to choose a value by it, write an `if`: `if a {sym} b {{ a }} else {{ b }}`)",
                    sym = op.symbol()
                ));
            }
            continue;
        }
        if dt.is_float() || dt == DTypeKind::Bool {
            continue;
        }
        let what = match *inst {
            Inst::Cast { .. } => format!("casts a differentiated value to `{dt}`"),
            Inst::Unary { op, .. } => format!(
                "computes the `{dt}` `{}` of a differentiated value",
                op.name()
            ),
            Inst::Binary { op, .. } => format!(
                "computes the `{dt}` `{}` of a differentiated value",
                op.name()
            ),
            _ => format!("computes `{dt}` values from a differentiated value"),
        };
        return Some(format!(
            "{what}; integers have no gradient (compute in a float type)"
        ));
    }
    None
}
