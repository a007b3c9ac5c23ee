//! Sums of slices placed into zeros, joined instead. The transpose of a
//! `narrow` is its gradient between zero blocks (`unslice` in `grad.rs`),
//! so a tensor cut into disjoint slices (GPT-2's `qkv` into `q`, `k`,
//! `v`) gets its gradient as a sum of `cat`s, each one slice's gradient
//! and zeros: every `cat` copies the whole tensor and the sum reads each
//! copy again. When the slices are disjoint and cover the tensor, the sum
//! is one `cat` of the slices' gradients, which writes each once.

use crate::check::CheckedFn;
use crate::graph::*;
use tensorfn_kernels::BinaryOp;

/// A slot of a placed value: its start along the joined dim, its length
/// and the node that fills it.
type Slot = (i64, i64, NodeId);

/// Rewrites a sum (`Binary(Add, ..)` trees) of `cat`s along one dim,
/// where each `cat` joins literal zero blocks and values at literal
/// offsets, into one `cat` of those values, when their slots are disjoint
/// and together cover the dim. Each `cat` and inner sum must have no
/// other reader and every node the result's type (no promotion, no
/// broadcast). The sum's node becomes the `cat`; the old `cat`s and zero
/// blocks are left unread, so the planner drops them. Anything else
/// (overlapping slots, a gap, a `cat` read elsewhere, a run-time length)
/// stays as it is.
///
/// ```
/// let a = tensorfn_macros_impl::analyse_tokens(quote::quote! {
///     #[grad(x)]
///     fn f(x: &Tensor<Cpu, f32, [4, 6]>) -> Tensor<Cpu, f32, []> {
///         (x.narrow(1, 0, 2) * x.narrow(1, 2, 2) + x.narrow(1, 4, 2)).sum()
///     }
/// }).unwrap();
/// let p = &a.joints[0].as_ref().unwrap()[0];
/// let grad = *p.f.ret.last().unwrap();
/// let tensorfn_macros_impl::graph::Op::Cat { xs, dim } = &p.f.graph.nodes[grad].op else {
///     panic!("{:?}", p.f.graph.nodes[grad].op)
/// };
/// assert_eq!((xs.len(), *dim), (3, 1));
/// ```
pub fn fold_slot_sums(f: &mut CheckedFn) {
    let uses = super::use_counts(f);
    let n = f.graph.nodes.len();
    for id in 0..n {
        let Op::Binary(BinaryOp::Add, ..) = f.graph.nodes[id].op else {
            continue;
        };
        let Some(ty) = f.graph.nodes[id].ty.tensor().cloned() else {
            continue;
        };
        let Some((dim, mut slots)) = placed(&f.graph, &uses, id, &ty, true) else {
            continue;
        };
        slots.sort_by_key(|s| s.0);
        let Some(total) = ty.dims[dim].as_constant() else {
            continue;
        };
        let mut at = 0;
        for &(start, len, _) in &slots {
            if start != at {
                break;
            }
            at += len;
        }
        if at != total || slots.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
            continue;
        }
        f.graph.nodes[id].op = Op::Cat {
            xs: slots.iter().map(|s| s.2).collect(),
            dim,
        };
    }
}

/// The dim and the slots of the values that `x` places into zeros, when
/// `x` (of type `ty`; the sum itself where `top`, else read only by it)
/// is such a `cat` or a sum of them along one dim with disjoint slots.
fn placed(
    g: &Graph,
    uses: &[usize],
    x: NodeId,
    ty: &TensorTy,
    top: bool,
) -> Option<(usize, Vec<Slot>)> {
    if g.nodes[x].ty.tensor() != Some(ty) || (!top && uses[x] != 1) {
        return None;
    }
    match &g.nodes[x].op {
        Op::Binary(BinaryOp::Add, a, b) => {
            let (da, mut sa) = placed(g, uses, *a, ty, false)?;
            let (db, sb) = placed(g, uses, *b, ty, false)?;
            let disjoint = sb
                .iter()
                .all(|&(s, l, _)| sa.iter().all(|&(t, m, _)| s + l <= t || t + m <= s));
            if da != db || !disjoint {
                return None;
            }
            sa.extend(sb);
            Some((da, sa))
        }
        Op::Cat { xs, dim } if !top => {
            let mut at = 0;
            let mut slots = Vec::new();
            for &p in xs {
                let len = g.nodes[p].ty.tensor()?.dims[*dim].as_constant()?;
                if !g.is_zero_block(p) {
                    slots.push((at, len, p));
                }
                at += len;
            }
            Some((*dim, slots))
        }
        _ => None,
    }
}
