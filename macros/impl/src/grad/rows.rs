//! The derivative of a row `#[kernel]` call (`Row<T>` parameters): the
//! chain rule over the kernel's row program, with the graph's own rules.
//!
//! As for a scalar kernel ([`super::kernels`]), the forward keeps its
//! `Op::RowKernel` node and the backward writes the program again as
//! graph nodes over the call's arguments: each statistic's element
//! program, then its reduction over the last dim (`sum`, `mean`, `max`,
//! `min` as a `Reduce` node, the dim kept as size 1 so that it broadcasts
//! back over the row), then the result's program over the arguments and
//! those statistics. The reverse sweep gives every node the rule of its
//! catalogue op, except a row's `max` and `min`, which split the gradient
//! evenly among the elements equal to the extreme (PyTorch's `amax`
//! rule) where the graph's `max(dim)` gives it all to the first.
//!
//! The statistics are computed again in the backward (a recomputed
//! graph, planned and fused like any, not one fused backward row kernel),
//! so the backward keeps the call's arguments and nothing else.

use super::kernels::{carrying, not_differentiable, used_by_output, Swept};
use super::Deriver;
use crate::graph::*;
use crate::shape::Dim;
use tensorfn_kernels::ir::{Inst, Kernel};
use tensorfn_kernels::rowkernel::RowReduce;
use tensorfn_kernels::{BinaryOp, CmpOp, ReduceOp};

impl Deriver {
    /// The gradients of the arguments of row kernel `kernel(args..)`
    /// given the call's gradient `g`.
    pub(super) fn row_kernel_rule(
        &mut self,
        kernel: usize,
        args: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<(NodeId, NodeId)>, String> {
        let name = self.kernels.names.get(kernel).cloned().unwrap_or_default();
        let Some(p) = self.kernels.rows.get(kernel).cloned().flatten() else {
            return Err(format!("`{name}` has no row program to differentiate"));
        };
        let nparams = p.params.len();
        // The statistics the result reads, directly or through later ones.
        let mut wanted = vec![false; p.stats.len()];
        let mark = |k: &Kernel, wanted: &mut [bool]| {
            let used = used_by_output(k);
            for (v, inst) in k.insts().iter().enumerate() {
                if let Inst::Input { index, .. } = *inst {
                    if used[v] && index >= nparams {
                        wanted[index - nparams] = true;
                    }
                }
            }
        };
        mark(&p.output, &mut wanted);
        for s in (0..p.stats.len()).rev() {
            if wanted[s] {
                mark(&p.stats[s].program, &mut wanted);
            }
        }
        let mut ins: Vec<NodeId> = args.to_vec();
        let mut in_needs: Vec<bool> = args.iter().map(|&a| self.arg_needs(a)).collect();
        let mut swept = Swept::default();
        for (s, stat) in p.stats.iter().enumerate() {
            if !wanted[s] {
                // Never read: any node stands in its input slot.
                ins.push(args[0]);
                in_needs.push(false);
                continue;
            }
            let k = &stat.program;
            let needs = carrying(k, &in_needs);
            if let Some(why) = not_differentiable(k, &needs, &used_by_output(k)) {
                return Err(format!("`{name}` {why}"));
            }
            let v = self.write_program(k, &ins, &needs, &mut swept)?;
            if !self.is_tensor(v) {
                // `kernel::build_all` refuses a reduction of a value that
                // is no row ("reduces a row, and `s` is one value per row").
                return Err(format!(
                    "`{name}` reduces a value of scalars alone, which has no row to reduce"
                ));
            }
            let carried = needs[k.output().index()];
            let kept = self.row_stat(stat.reduce, v, carried, &mut swept);
            ins.push(kept);
            in_needs.push(carried);
        }
        let k = &p.output;
        let needs = carrying(k, &in_needs);
        if let Some(why) = not_differentiable(k, &needs, &used_by_output(k)) {
            return Err(format!("`{name}` {why}"));
        }
        if !needs[k.output().index()] {
            return Ok(vec![]);
        }
        let y = self.write_program(k, &ins, &needs, &mut swept)?;
        // One value per row: the gradient gets the row's dim back, as the
        // statistics it flows into have it.
        let g = match p.per_row {
            true => {
                let mut d = self.dims(g);
                d.push(Dim::constant(1));
                self.reshape(g, d)
            }
            false => g,
        };
        self.sweep(&swept, y, g, args)
    }

    /// `reduce` of `v` over its last dim, the dim kept as size 1.
    fn row_stat(
        &mut self,
        reduce: RowReduce,
        v: NodeId,
        carried: bool,
        swept: &mut Swept,
    ) -> NodeId {
        let op = match reduce {
            RowReduce::Sum => ReduceOp::Sum,
            RowReduce::Mean => ReduceOp::Mean,
            RowReduce::Max => ReduceOp::Max,
            RowReduce::Min => ReduceOp::Min,
        };
        let mut keep = self.dims(v);
        let last = keep.len() - 1;
        let r = self.reduce(op, v, Some(last));
        keep[last] = Dim::constant(1);
        let kept = self.reshape(r, keep);
        if carried {
            swept.carry(r);
            swept.carry(kept);
            if matches!(reduce, RowReduce::Max | RowReduce::Min) {
                swept.extremes.insert(r, v);
            }
        }
        kept
    }

    /// The gradient of `x` from that of `r`, the max or min of `x` over
    /// its last dim: `g` split evenly among the elements equal to it
    /// (PyTorch's `amax` backward, `g / count * (x == r)`; a NaN extreme
    /// equals nothing, so its row gets NaN as PyTorch's does).
    pub(super) fn split_among_extremes(&mut self, x: NodeId, r: NodeId, g: NodeId) -> NodeId {
        let mut keep = self.dims(x);
        let last = keep.len() - 1;
        keep[last] = Dim::constant(1);
        let rk = self.reshape(r, keep.clone());
        let gk = self.reshape(g, keep);
        let hit = self.cmp(CmpOp::Eq, x, rk);
        let dt = self.tt(x).dtype;
        let mask = self.cast(hit, dt);
        let count = self.sum_keep(mask, last);
        let share = self.bin(BinaryOp::Div, gk, count);
        self.mul(share, mask)
    }
}
