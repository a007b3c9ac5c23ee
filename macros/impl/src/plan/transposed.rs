//! Products whose result is only read transposed, written in that layout:
//! `(a b)ᵀ = bᵀ aᵀ`. A weight used transposed (`matmul(h, w.t())`, a tied
//! embedding as the output projection) gets its gradient as `(hᵀ g)ᵀ`, a
//! transposed view of a product that whatever reads it contiguously
//! copies; the swapped product writes it in the parameter's own layout.

use crate::check::CheckedFn;
use crate::graph::*;

/// Rewrites `T(matmul(a, b))` of 2-D operands, where the product has no
/// other use, into `matmul(T(b), T(a))`, when one operand is itself a
/// transpose (`a = T(x)`, then `T(a)` is `x`): the product's node becomes
/// the other operand's transposed view and the transpose's node the
/// swapped product, so no node is added. Runs on each instance before
/// [`fold_bias_gradients`](super::fold_bias_gradients), which then sees
/// the swapped product.
///
/// ```
/// let a = tensorfn_macros_impl::analyse_tokens(quote::quote! {
///     fn wgrad(h: &Tensor<Cpu, f32, [16, 4]>, g: &Tensor<Cpu, f32, [16, 8]>)
///         -> Tensor<Cpu, f32, [8, 4]> {
///         matmul(h.t(), g).t()
///     }
/// }).unwrap();
/// let p = &a.planned[0].as_ref().unwrap()[0];
/// let last = *p.f.ret.last().unwrap();
/// assert!(matches!(p.f.graph.nodes[last].op, tensorfn_macros_impl::graph::Op::MatMul(..)));
/// ```
pub fn fold_transposed_products(f: &mut CheckedFn) {
    let uses = super::use_counts(f);
    let g = &mut f.graph;
    let n = g.nodes.len();
    let rank2 = |g: &Graph, x: NodeId| g.nodes[x].ty.tensor().is_some_and(|t| t.dims.len() == 2);
    for t in 0..n {
        let Op::T(p) = g.nodes[t].op else { continue };
        let Op::MatMul(a, b) = g.nodes[p].op else {
            continue;
        };
        if uses[p] != 1 || !rank2(g, a) || !rank2(g, b) || !rank2(g, t) {
            continue;
        }
        let inner = |x: NodeId| match g.nodes[x].op {
            Op::T(y) if rank2(g, y) => Some(y),
            _ => None,
        };
        // (a b)ᵀ = bᵀ aᵀ: the transpose that exists reused, the other
        // one written in the product's slot.
        let (view_of, swapped) = match (inner(a), inner(b)) {
            (Some(x), _) => (b, Op::MatMul(p, x)),
            (None, Some(y)) => (a, Op::MatMul(y, p)),
            (None, None) => continue,
        };
        let Some(mut ty) = g.nodes[view_of].ty.tensor().cloned() else {
            continue;
        };
        ty.dims.reverse();
        g.nodes[p].op = Op::T(view_of);
        g.nodes[p].ty = Ty::Tensor(ty);
        g.nodes[t].op = swapped;
    }
}
