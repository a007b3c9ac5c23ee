//! GELU's backward in the products around it. A training step's
//! `h = gelu(p)`, `p = addmm(b, x, w)`, keeps `p` for the backward, which
//! multiplies the gradient of `h` (a product `g wᵀ`) by `gelu'(p)` in an
//! elementwise kernel and sums the result's columns for `b`'s gradient:
//! the product written and read back, `p` read, the result written and
//! read again by the sum. Folded, the forward writes `h` and `p` from one
//! product ([`Op::AddMmGeluAux`], cuBLASLt's `GELU_AUX_BIAS`) and the
//! backward's product applies `gelu'(p)` and sums the columns in its
//! epilogue ([`Op::MatMulDGelu`], `DGELU` / `DGELU_BGRAD`). The CPU (and
//! whatever cuBLASLt declines) runs the parts.

use crate::check::CheckedFn;
use crate::graph::*;
use tensorfn_core::DTypeKind;
use tensorfn_kernels::{BinaryOp, ReduceOp, UnaryOp};

/// Points where a candidate expression must equal GELU's derivative:
/// both signs, the flat tails, the bump near 1.5 and 0.
const PROBES: [f64; 8] = [-4.3, -1.7, -0.61, 0.0, 0.37, 1.2, 2.3, 6.1];

/// GELU's derivative (tanh form) in f64.
fn gelu_derivative(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let k = 0.044715;
    let t = (c * (x + k * x * x * x)).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * k * x * x)
}

/// The value of `n` at `p = x`, where `n` is an elementwise expression of
/// literals and `p` alone (`None` for anything else, or past `budget`
/// nodes: the derivative `#[grad]` writes has about twenty).
fn eval_of(g: &Graph, n: NodeId, p: NodeId, x: f64, budget: &mut usize) -> Option<f64> {
    if n == p {
        return Some(x);
    }
    *budget = budget.checked_sub(1)?;
    match g.nodes[n].op {
        Op::Lit { value, int: false } => Some(value),
        Op::Unary(op, a) => Some(op.eval_f64(eval_of(g, a, p, x, budget)?)),
        Op::Binary(op, a, b) => {
            let (a, b) = (eval_of(g, a, p, x, budget)?, eval_of(g, b, p, x, budget)?);
            Some(op.eval_f64(a, b))
        }
        _ => None,
    }
}

/// Whether `d` computes `gelu'(p)`: an elementwise expression of `p`
/// alone equal to it at every probe. Matching by value takes the
/// derivative however it is written (`#[grad]`'s, or a hand-written
/// backward), not one arrangement of its nodes.
fn is_gelu_derivative(g: &Graph, d: NodeId, p: NodeId) -> bool {
    PROBES.iter().all(|&x| {
        let mut budget = 64;
        eval_of(g, d, p, x, &mut budget)
            .is_some_and(|v| (v - gelu_derivative(x)).abs() <= 1e-9 * (1.0 + v.abs()))
    })
}

/// Rewrites, on a joint graph, each `h = gelu(p)` of 2-D `p =
/// addmm(b, x, w)` (no scales; f16 or bf16, as
/// [`fold_activations`](super::fold_activations)) whose pre-activation
/// has other readers into one [`Op::AddMmGeluAux`] whose parts `h` and
/// `p` take; and each `matmul(a, c) * gelu'(p)` of such a `p` (the
/// product read only there) into one [`Op::MatMulDGelu`], with the
/// result's column sum (`sum(dim 0)`, a bias gradient) as its second
/// part where one is taken. Runs before
/// [`fold_bias_gradients`](super::fold_bias_gradients), which then finds
/// that bias gradient already summed.
///
/// ```
/// let a = tensorfn_macros_impl::analyse_tokens(quote::quote! {
///     #[grad(w1, b1, w2)]
///     fn loss(x: &Tensor<Cuda, bf16, [16, 8]>, w1: &Tensor<Cuda, bf16, [8, 32]>,
///             b1: &Tensor<Cuda, bf16, [32]>, w2: &Tensor<Cuda, bf16, [32, 8]>)
///             -> Tensor<Cuda, bf16, []> {
///         matmul(gelu(addmm(b1, x, w1)), w2).sum()
///     }
/// }).unwrap();
/// let p = &a.joints[0].as_ref().unwrap()[0];
/// use tensorfn_macros_impl::graph::Op;
/// let ops: Vec<_> = p.f.graph.nodes.iter().map(|n| &n.op).collect();
/// assert!(ops.iter().any(|o| matches!(o, Op::AddMmGeluAux { .. })));
/// assert!(ops.iter().any(|o| matches!(o, Op::MatMulDGelu { sums: true, .. })));
/// ```
pub fn fold_gelu_backward(f: &mut CheckedFn) {
    let g = &f.graph;
    let n = g.nodes.len();
    let uses = super::use_counts(f);
    let (live, users) = super::live_and_readers(f);
    let tensor = |x: NodeId| g.nodes[x].ty.tensor();
    let rank2 = |x: NodeId| tensor(x).is_some_and(|t| t.dims.len() == 2);
    // Pre-activations that fold, by their GELU node: (h, p).
    let mut forwards: Vec<(NodeId, NodeId)> = Vec::new();
    for (h, node) in g.nodes.iter().enumerate() {
        let Op::Unary(UnaryOp::Gelu, p) = node.op else {
            continue;
        };
        let half =
            tensor(p).is_some_and(|t| matches!(t.dtype.kind(), DTypeKind::F16 | DTypeKind::BF16));
        let plain = matches!(
            g.nodes[p].op,
            Op::AddMm {
                beta: None,
                alpha: None,
                ..
            }
        );
        if half && plain && rank2(p) && rank2(h) && live[h] && uses[p] >= 2 {
            forwards.push((h, p));
        }
    }
    // Each node that is changed: by its old id, its new op (old ids) or
    // the part of an inserted tuple node it becomes.
    let mut inserts: Vec<(NodeId, Node)> = Vec::new();
    let mut replaced: Vec<(NodeId, Op)> = Vec::new();
    let mut parts: Vec<(NodeId, NodeId, usize)> = Vec::new();
    for &(h, p) in &forwards {
        let Op::AddMm { bias, m1, m2, .. } = g.nodes[p].op else {
            unreachable!("checked above")
        };
        let ty = Ty::Tuple(vec![
            tensor(h).expect("tensor").clone(),
            tensor(p).expect("tensor").clone(),
        ]);
        let op = Op::AddMmGeluAux { bias, m1, m2 };
        inserts.push((
            p,
            Node {
                op,
                ty,
                ..g.nodes[p].clone()
            },
        ));
        parts.push((h, p, 0));
        parts.push((p, p, 1));
        // `product * gelu'(p)`, either way round, of the pre-activation's dims.
        for m in 0..n {
            let Op::Binary(BinaryOp::Mul, x, y) = g.nodes[m].op else {
                continue;
            };
            if !live[m] || tensor(m).map(|t| &t.dims) != tensor(p).map(|t| &t.dims) {
                continue;
            }
            let product = |c: NodeId| match g.nodes[c].op {
                Op::MatMul(a, b) if uses[c] == 1 && rank2(a) && rank2(b) => Some((a, b)),
                _ => None,
            };
            let found = [(x, y), (y, x)].into_iter().find_map(|(c, d)| {
                let same = tensor(c).map(|t| &t.dims) == tensor(m).map(|t| &t.dims);
                product(c).filter(|_| same && is_gelu_derivative(g, d, p))
            });
            let Some((a, b)) = found else { continue };
            // The column sum of the result: a bias gradient.
            let sum = users[m].iter().copied().find(|&r| {
                live[r]
                    && matches!(
                        g.nodes[r].op,
                        Op::Reduce {
                            op: ReduceOp::Sum,
                            dim: Some(0),
                            ..
                        }
                    )
            });
            match sum {
                None => replaced.push((
                    m,
                    Op::MatMulDGelu {
                        a,
                        b,
                        pre: p,
                        sums: false,
                    },
                )),
                Some(r) => {
                    let ty = Ty::Tuple(vec![
                        tensor(m).expect("tensor").clone(),
                        tensor(r).expect("tensor").clone(),
                    ]);
                    let op = Op::MatMulDGelu {
                        a,
                        b,
                        pre: p,
                        sums: true,
                    };
                    inserts.push((
                        m,
                        Node {
                            op,
                            ty,
                            ..g.nodes[m].clone()
                        },
                    ));
                    parts.push((m, m, 0));
                    parts.push((r, m, 1));
                }
            }
        }
    }
    if inserts.is_empty() && replaced.is_empty() {
        return;
    }
    inserts.sort_by_key(|x| x.0);
    // Each inserted node goes just before the node at its position, which
    // becomes one of its parts: later nodes move up by the inserts before
    // them.
    let shift = |old: NodeId| old + inserts.partition_point(|x| x.0 <= old);
    let mut nodes = Vec::with_capacity(n + inserts.len());
    for (old, node) in g.nodes.iter().enumerate() {
        if let Some((_, ins)) = inserts.iter().find(|x| x.0 == old) {
            let mut ins = ins.clone();
            ins.op = crate::grad::map_op(&ins.op, &shift);
            nodes.push(ins);
        }
        let mut node = node.clone();
        node.op = if let Some(&(_, at, i)) = parts.iter().find(|x| x.0 == old) {
            Op::TupleGet(shift(at) - 1, i)
        } else if let Some((_, op)) = replaced.iter().find(|x| x.0 == old) {
            crate::grad::map_op(op, &shift)
        } else {
            crate::grad::map_op(&node.op, &shift)
        };
        nodes.push(node);
    }
    f.graph.nodes = nodes;
    for x in f.ret.iter_mut().chain(f.params.iter_mut()) {
        *x = shift(*x);
    }
}
