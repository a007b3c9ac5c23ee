//! The bias gradient in the weight gradient's product: a linear layer's
//! backward multiplies `xᵀ g` (or `gᵀ x`) and sums `g` over the same rows
//! for the bias, two reads of `g`. Folded into one [`Op::MatMulSumK`],
//! the GPU runs both in one cuBLASLt call (the `BGRADA`/`BGRADB`
//! epilogue, `Tensor::matmul_sum_b`/`matmul_sum_a`); the CPU runs the
//! product and the sum as before.

use crate::check::CheckedFn;
use crate::graph::*;
use tensorfn_kernels::ReduceOp;

/// Rewrites each pair of a 2-D `matmul(a, g)` (or `matmul(gᵀ, b)`) and
/// the sum of the same `g` over dim 0, both of which the results use,
/// into one [`Op::MatMulSumK`] whose two parts the pair's nodes take
/// ([`Op::TupleGet`]). Runs after `#[grad]` has built the backward, on
/// each instance, like [`fold_activations`](super::fold_activations).
///
/// ```
/// let a = tensorfn_macros_impl::analyse_tokens(quote::quote! {
///     #[grad(w, b)]
///     fn loss(x: &Tensor<Cuda, bf16, [8, 64]>, w: &Tensor<Cuda, bf16, [64, 32]>,
///             b: &Tensor<Cuda, bf16, [32]>) -> Tensor<Cuda, bf16, []> {
///         addmm(b, x, w).sum()
///     }
/// }).unwrap();
/// let p = &a.joints[0].as_ref().unwrap()[0];
/// assert!(p.f.graph.nodes.iter().any(|n| matches!(
///     n.op,
///     tensorfn_macros_impl::graph::Op::MatMulSumK { of_b: true, .. }
/// )));
/// ```
pub fn fold_bias_gradients(f: &mut CheckedFn) {
    let g = &f.graph;
    let n = g.nodes.len();
    let (live, users) = super::live_and_readers(f);
    let rank2 = |x: NodeId| g.nodes[x].ty.tensor().is_some_and(|t| t.dims.len() == 2);
    // Fused products, by the product's node: (sum node, a, b, of_b).
    let mut folds: Vec<(NodeId, NodeId, NodeId, NodeId, bool)> = Vec::new();
    let mut taken = vec![false; n];
    for r in 0..n {
        let Op::Reduce {
            op: ReduceOp::Sum,
            x: s,
            dim: Some(0),
        } = g.nodes[r].op
        else {
            continue;
        };
        let float = g.nodes[s]
            .ty
            .tensor()
            .is_some_and(|t| t.dtype.kind().is_float());
        if !live[r] || !rank2(s) || !float {
            continue;
        }
        // `s` as a product's right operand (summed over its rows, the
        // product's `k`), or transposed as its left one.
        let product = |p: NodeId| match g.nodes[p].op {
            Op::MatMul(a, b) if rank2(a) && rank2(b) && live[p] && !taken[p] && p < r => {
                if b == s {
                    Some((a, b, true))
                } else if a != s && matches!(g.nodes[a].op, Op::T(x) if x == s) {
                    Some((a, b, false))
                } else {
                    None
                }
            }
            _ => None,
        };
        let found = users[s]
            .iter()
            .chain(users[s].iter().flat_map(|&u| {
                matches!(g.nodes[u].op, Op::T(_))
                    .then_some(&users[u])
                    .into_iter()
                    .flatten()
            }))
            .find_map(|&p| product(p).map(|x| (p, x)));
        if let Some((p, (a, b, of_b))) = found {
            taken[p] = true;
            folds.push((p, r, a, b, of_b));
        }
    }
    if folds.is_empty() {
        return;
    }
    folds.sort();
    // Each fused node goes just before its product, which becomes its
    // first part: later nodes move up by the folds before them.
    let shift = |old: NodeId| old + folds.partition_point(|fo| fo.0 <= old);
    let mut nodes = Vec::with_capacity(n + folds.len());
    let mut part = vec![None; n];
    for &(p, r, ..) in &folds {
        part[p] = Some((p, 0));
        part[r] = Some((p, 1));
    }
    for (old, node) in g.nodes.iter().enumerate() {
        let mut node = node.clone();
        if let Some(&(p, r, a, b, of_b)) = folds.iter().find(|fo| fo.0 == old) {
            let parts = [p, r].map(|x| g.nodes[x].ty.tensor().expect("tensors").clone());
            nodes.push(Node {
                op: Op::MatMulSumK {
                    a: shift(a),
                    b: shift(b),
                    of_b,
                },
                ty: Ty::Tuple(parts.to_vec()),
                ..node.clone()
            });
        }
        node.op = match part[old] {
            Some((p, i)) => Op::TupleGet(shift(p) - 1, i),
            None => crate::grad::map_op(&node.op, &shift),
        };
        nodes.push(node);
    }
    f.graph.nodes = nodes;
    for x in f.ret.iter_mut().chain(f.params.iter_mut()) {
        *x = shift(*x);
    }
}
