//! Reverse-mode differentiation of a checked function, at compile time.
//!
//! `#[grad(p, ..)]` on a tensor function asks for `name::value_and_grad`.
//! [`derive`] appends the backward pass to a copy of the checked graph:
//! from the result (a 0-d float tensor, seeded with one) back to the
//! differentiated parameters, each node's rule emits ordinary graph nodes
//! (elementwise ops, products, views, reductions), so the joint graph is
//! planned and expanded like any function: elementwise backward chains
//! fuse into the generated kernels, products go to the matrix-product
//! calls. Which ops have a rule is stated by the catalogue
//! (`tensorfn_core::ops::Derivative`); the rules themselves are
//! [`Deriver::rule`]'s arms, one per op.
//!
//! A gradient flowing into a broadcast operand is summed back to that
//! operand's dims (leading dims, and dims of size 1).
//!
//! A function whose result is a float tensor of any shape gets
//! `name::vjp(args.., grad_output)` (a 0-d one as well as
//! `value_and_grad`): [`vjp_ast`] appends the parameter `grad_output`,
//! typed like the result, and [`derive_vjp`] seeds the backward with it.

use crate::ast::{Dt, ParamTy, TensorFn};
use crate::check::CheckedFn;
use crate::graph::*;
use crate::shape::{numel, Dim};
use crate::sig::ParamSig;
use tensorfn_core::DTypeKind;
use tensorfn_kernels::{BinaryOp, CmpOp, ReduceOp, RowOp, UnaryOp};

mod kernels;
mod rows;
pub use kernels::KernelBodies;

/// What `value_and_grad` (or `vjp`) gives back for one `#[grad]`
/// parameter.
#[derive(Clone, Debug)]
pub enum GradOut {
    /// A tensor parameter: result `ret` of the joint function.
    Tensor {
        /// The joint function's result index.
        ret: usize,
    },
    /// A parameter struct: `p.zeros_like()` with each field the result
    /// depends on replaced.
    Struct {
        /// The parameter's index.
        param: usize,
        /// The field's path after the parameter (`.w1`, `.h[3].w`) and
        /// the joint function's result index.
        fields: Vec<(String, usize)>,
    },
}

/// The joint function: its results are the value, then the gradients
/// [`GradOut`] names.
#[derive(Debug)]
pub struct Joint {
    /// The checked function computing `(value, grads..)`.
    pub f: CheckedFn,
    /// One entry per `#[grad]` name, in order.
    pub outs: Vec<GradOut>,
    /// How many results the value is (the elements of a tuple result
    /// for `vjp`, else one); the gradients follow them.
    pub values: usize,
}

/// The name of the parameter `name::vjp` takes after the function's own:
/// the gradient of the result, as PyTorch's `autograd.grad` calls it.
pub const GRAD_OUTPUT: &str = "grad_output";

/// Whether `f`'s result is one 0-d float tensor (a loss), whose `#[grad]`
/// gives `name::value_and_grad` as well as `name::vjp`.
pub fn scalar_result(f: &CheckedFn) -> bool {
    f.ret.len() == 1
        && matches!(&f.graph.nodes[f.ret[0]].ty, Ty::Tensor(t) if t.dims.is_empty() && t.dtype.is_float())
}

/// The function `name::vjp` computes the value of: `ast` with the
/// gradients of its results appended as parameters, typed like them
/// ([`GradOutput`](crate::ast::GradOutput)): one, [`GRAD_OUTPUT`], for a
/// tensor result; for a tuple result one per float element,
/// `grad_output_0`, `grad_output_1`, .. (by the element's position),
/// which `vjp` takes as the tuple `grad_output`, with `()` in the place
/// of an element that has no gradient (an index tensor).
pub fn vjp_ast(ast: &TensorFn) -> Result<TensorFn, syn::Error> {
    let tuple = ast.ret.tuple;
    let names: Vec<Option<String>> = ast
        .ret
        .tensors
        .iter()
        .enumerate()
        .map(|(k, t)| match (tuple, t.dtype.0.is_float()) {
            (false, _) => Some(GRAD_OUTPUT.to_string()),
            (true, true) => Some(format!("{GRAD_OUTPUT}_{k}")),
            (true, false) => None,
        })
        .collect();
    if tuple && names.iter().all(Option::is_none) {
        return Err(ast.ret.sp.error(format!(
            "`#[grad]` on `{}` gives `{}::vjp(args.., grad_output)`, which takes the gradients of the float elements of its result, but none of the elements of `{}`'s result is a float tensor; return a float tensor",
            ast.name, ast.name, ast.name
        )));
    }
    let taken = |p: &crate::ast::Param| {
        p.name == GRAD_OUTPUT || names.iter().flatten().any(|n| p.name == n)
    };
    if let Some(p) = ast.params.iter().find(|p| taken(p)) {
        return Err(syn::Error::new(
            p.name.span(),
            format!(
                "`#[grad]` on `{}` gives `{}::vjp(args.., grad_output)`, whose last parameter is `grad_output`; rename this parameter",
                ast.name, ast.name
            ),
        ));
    }
    let mut f = ast.clone();
    let mut slots = Vec::new();
    for (name, t) in names.iter().zip(&ast.ret.tensors) {
        slots.push(name.as_ref().map(|n| {
            f.params.push(crate::ast::Param {
                name: syn::Ident::new(n, ast.ret.sp.span()),
                ty: ParamTy::Tensor(t.clone()),
            });
            f.params.len() - 1
        }));
    }
    f.grad_output = Some(crate::ast::GradOutput { tuple, slots });
    Ok(f)
}

/// Derives the joint function of `f` for the parameters `names`, or the
/// errors that stop it (each spanned on what the user wrote).
pub fn derive(
    ast: &TensorFn,
    f: &CheckedFn,
    names: &[syn::Ident],
    checked: &[Option<CheckedFn>],
    kernels: &KernelBodies,
) -> Result<Joint, Vec<syn::Error>> {
    derive_seeded(ast, f, names, checked, kernels, None)
}

/// The joint function of `name::vjp`: `f` and `ast` as [`vjp_ast`] gives
/// them, the backward seeded with the gradient parameters it appended.
pub fn derive_vjp(
    ast: &TensorFn,
    f: &CheckedFn,
    names: &[syn::Ident],
    checked: &[Option<CheckedFn>],
    kernels: &KernelBodies,
) -> Result<Joint, Vec<syn::Error>> {
    let slots = ast.grad_output.as_ref().map(|g| g.slots.clone());
    derive_seeded(ast, f, names, checked, kernels, slots)
}

/// [`derive`] from a 0-d result seeded with one (`seed` `None`), or from
/// each result `k` seeded with parameter `seed[k]` (none for a result
/// that takes no gradient).
fn derive_seeded(
    ast: &TensorFn,
    f: &CheckedFn,
    names: &[syn::Ident],
    checked: &[Option<CheckedFn>],
    kernels: &KernelBodies,
    seed: Option<Vec<Option<usize>>>,
) -> Result<Joint, Vec<syn::Error>> {
    let inlined = inline_calls(f, checked, 0);
    let f = &inlined;
    let mut errors = Vec::new();
    if seed.is_some() && !ast.ret.tuple {
        // The result: one float tensor.
        let ret = f.ret.first().map(|&r| &f.graph.nodes[r].ty);
        if let Some(Ty::Tensor(t)) = ret.filter(|_| f.ret.len() == 1) {
            if !t.dtype.is_float() {
                errors.push(ast.ret.sp.error(format!(
                    "`#[grad]` on `{}` gives `{}::vjp(args.., grad_output)`, but its result is a `{}` tensor, which has no gradient; return a float tensor",
                    ast.name, ast.name, t.dtype
                )));
            }
        }
    }
    // The result: one 0-d float tensor.
    let ok_ret = seed.is_some() || scalar_result(f);
    if !ok_ret {
        let found: Vec<String> = f.sig.ret.iter().map(|t| t.to_string()).collect();
        let found = if f.sig.tuple {
            format!("({})", found.join(", "))
        } else {
            found.join(", ")
        };
        errors.push(ast.ret.sp.error(format!(
            "`#[grad]` differentiates a scalar loss: the result must be a 0-d float tensor, `Tensor<D, f32, []>`, but `{}` returns `{found}`; reduce it first (`.sum()`, `.mean()`), as PyTorch's `backward()` needs",
            ast.name
        )));
    }
    // The differentiated parameters: the written ones and, for a struct,
    // the fields the body uses.
    let mut targets: Vec<(usize, Vec<usize>)> = Vec::new();
    for name in names {
        let user = |(i, p): &(usize, &crate::ast::Param)| {
            !matches!(p.ty, ParamTy::Field(_)) && !seed.iter().flatten().any(|s| *s == Some(*i))
        };
        let Some(i) = ast
            .params
            .iter()
            .enumerate()
            .filter(user)
            .find(|(_, p)| p.name == *name)
            .map(|(i, _)| i)
        else {
            let list: Vec<String> = ast
                .params
                .iter()
                .enumerate()
                .filter(user)
                .map(|(_, p)| p)
                .map(|p| format!("`{}`", p.name))
                .collect();
            errors.push(syn::Error::new(
                name.span(),
                format!(
                    "`#[grad({name})]`: `{}` has no parameter `{name}`; its parameters are {}",
                    ast.name,
                    list.join(", ")
                ),
            ));
            continue;
        };
        if targets.iter().any(|(j, _)| *j == i) {
            errors.push(syn::Error::new(
                name.span(),
                format!("`{name}` is named twice in `#[grad(..)]`"),
            ));
            continue;
        }
        match &f.sig.params[i] {
            ParamSig::Tensor(t) if !t.dtype.is_float() => errors.push(syn::Error::new(
                name.span(),
                format!("`#[grad({name})]`: `{name}` is a `{}` tensor, and only float tensors have gradients", t.dtype),
            )),
            ParamSig::Tensor(_) => targets.push((i, vec![f.params[i]])),
            ParamSig::Scalar(k) => errors.push(syn::Error::new(
                name.span(),
                format!("`#[grad({name})]`: `{name}` is a scalar ({k}); gradients are taken for tensors and parameter structs"),
            )),
            ParamSig::Struct(_) => {
                let fields: Vec<usize> = f
                    .sig
                    .field_paths
                    .iter()
                    .enumerate()
                    .filter(|(_, fp)| fp.as_ref().is_some_and(|fp| fp.root == i))
                    .map(|(j, _)| f.params[j])
                    .collect();
                targets.push((i, fields));
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // The seeded results and their seeds (the node of a one where `None`).
    let seeds: Vec<(NodeId, Option<NodeId>)> = match &seed {
        None => vec![(f.ret[0], None)],
        Some(slots) => f
            .ret
            .iter()
            .zip(slots)
            .filter_map(|(&r, s)| s.map(|p| (r, Some(f.params[p]))))
            .collect(),
    };
    let mut d = Deriver::new(f, seeds.iter().map(|s| s.0).collect(), kernels.clone());
    let all: Vec<NodeId> = targets
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .collect();
    d.mark(&all);
    // Every differentiated parameter must reach the result.
    for ((i, fields), name) in targets.iter().zip(names) {
        if !fields.iter().any(|&n| d.live[n]) {
            if let Some((blocker, why)) = d.blocked(fields) {
                let text = d.g.nodes[blocker].text.clone();
                let sp = d.g.nodes[blocker].sp.clone();
                errors.push(sp.error(format!(
                    "`{text}`: {why}, and it is the only path from `{name}` to the result of the `#[grad]` function `{}`, so `{name}` would get no gradient; remove `{name}` from `#[grad(..)]`, or let the result depend on `{name}` through differentiable ops",
                    ast.name
                )));
                continue;
            }
            errors.push(syn::Error::new(
                name.span(),
                format!(
                    "`#[grad({name})]`: the result of `{}` does not depend on `{name}`{}, so its gradient would be zero; remove it from `#[grad(..)]`",
                    ast.name,
                    if matches!(f.sig.params[*i], ParamSig::Struct(_)) { " (on none of its fields)" } else { "" }
                ),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    d.backward(&seeds);
    if !d.errors.is_empty() {
        return Err(d.errors);
    }
    // The results: the value (each element of a tuple), then the
    // gradients.
    let values = if seed.is_some() { f.ret.len() } else { 1 };
    let mut ret = f.ret[..values].to_vec();
    let mut rtys = f.sig.ret[..values].to_vec();
    let mut outs = Vec::new();
    for (i, fields) in &targets {
        let mut grad_of = |d: &mut Deriver, n: NodeId| -> NodeId {
            let g = match d.adj[n] {
                Some(g) => g,
                None => d.zeros(&d.tt(n), n),
            };
            ret.push(g);
            rtys.push(d.tt(n));
            ret.len() - 1
        };
        match &f.sig.params[*i] {
            ParamSig::Struct(_) => {
                let mut out = Vec::new();
                for &n in fields {
                    if d.adj[n].is_none() {
                        continue;
                    }
                    let Op::Param(j) = d.g.nodes[n].op else {
                        unreachable!()
                    };
                    let suffix = f.sig.field_paths[j]
                        .as_ref()
                        .map(|p| p.suffix.clone())
                        .unwrap_or_default();
                    out.push((suffix, grad_of(&mut d, n)));
                }
                outs.push(GradOut::Struct {
                    param: *i,
                    fields: out,
                });
            }
            _ => {
                let r = grad_of(&mut d, fields[0]);
                outs.push(GradOut::Tensor { ret: r });
            }
        }
    }
    let mut sig = f.sig.clone();
    sig.ret = rtys;
    sig.tuple = true;
    let graph = match ast.recompute {
        true => recompute_elementwise(&d.g, f.graph.nodes.len(), &mut ret),
        false => d.g,
    };
    Ok(Joint {
        f: CheckedFn {
            sig,
            graph,
            params: f.params.clone(),
            ret,
        },
        outs,
        values,
    })
}

/// The joint graph of `#[grad(.., recompute = true)]`: every elementwise
/// value of the forward (nodes `..forward`) that a backward node reads is
/// computed again just before that node, from the same operands, so the
/// forward's copy dies with its last forward use and the backward's is
/// fused into the backward's own kernels. What stays alive between the
/// two passes is then the inputs and the values of the other ops
/// (products, reductions, norms, ...), from which the elementwise chains
/// start. Each backward node gets copies of its own (the same value read
/// by several nodes of one backward kernel is computed in it once per
/// reader). The copies run the same operations on the same values, so
/// the gradients are the same bits. `ret` is renumbered to the new graph.
fn recompute_elementwise(g: &Graph, forward: usize, ret: &mut [NodeId]) -> Graph {
    struct Again<'a> {
        g: &'a Graph,
        forward: usize,
        out: Graph,
        /// A forward node's copy in `out`.
        copy: std::collections::HashMap<NodeId, NodeId>,
    }
    impl Again<'_> {
        fn recomputed(&self, n: NodeId) -> bool {
            n < self.forward && crate::plan::is_elementwise(self.g, n)
        }
        /// The copy of forward node `n` (made with the copies of its
        /// elementwise operands), or `n` itself for a kept value.
        fn again(&mut self, n: NodeId) -> NodeId {
            if !self.recomputed(n) {
                return n;
            }
            if let Some(&c) = self.copy.get(&n) {
                return c;
            }
            let operands: Vec<NodeId> = self.g.inputs(n);
            for i in operands {
                self.again(i);
            }
            let op = map_op(&self.g.nodes[n].op, &|i| {
                self.copy.get(&i).copied().unwrap_or(i)
            });
            let c = self.out.push(Node {
                op,
                ..self.g.nodes[n].clone()
            });
            self.copy.insert(n, c);
            c
        }
    }
    let mut a = Again {
        g,
        forward,
        out: Graph {
            nodes: g.nodes[..forward].to_vec(),
        },
        copy: Default::default(),
    };
    // Where each backward node went.
    let mut moved: Vec<NodeId> = (0..g.nodes.len()).collect();
    for n in forward..g.nodes.len() {
        // Copies of its own: a copy whose only user is `n` fuses into
        // `n`'s kernel, where one shared by several backward kernels
        // would be materialised and kept between them.
        a.copy.clear();
        for i in g.inputs(n) {
            if i < forward {
                a.again(i);
            }
        }
        let op = map_op(&g.nodes[n].op, &|i| match i < forward {
            true => a.copy.get(&i).copied().unwrap_or(i),
            false => moved[i],
        });
        moved[n] = a.out.push(Node {
            op,
            ..g.nodes[n].clone()
        });
    }
    for r in ret.iter_mut() {
        *r = moved[*r];
    }
    a.out
}

/// Builds the backward nodes.
struct Deriver {
    g: Graph,
    /// Nodes that depend on a differentiated parameter through operands
    /// that carry gradients.
    needs: Vec<bool>,
    /// The differentiated parameter a needing node depends on (for
    /// messages).
    from: Vec<Option<NodeId>>,
    /// Nodes the result depends on through such operands, among those
    /// that need a gradient.
    live: Vec<bool>,
    /// The gradient of each forward node so far.
    adj: Vec<Option<NodeId>>,
    /// The results the backward starts from.
    rets: Vec<NodeId>,
    /// The invocation's kernels, whose calls are differentiated through
    /// their element programs.
    kernels: KernelBodies,
    errors: Vec<syn::Error>,
}

/// Whether operand `k` of `op` carries a gradient: not a comparison's,
/// nor a `where_`'s condition, nor an index.
fn carries(op: &Op, k: usize) -> bool {
    match op {
        Op::Compare(..) | Op::Arange { .. } => false,
        Op::Where(..) => k > 0,
        Op::Select { .. } | Op::Embedding { .. } => {
            k == 0 || matches!(op, Op::Embedding { .. }) && k == 1
        }
        Op::ScatterAdd { .. } => k != 1,
        Op::Narrow { .. } | Op::Index { .. } | Op::Dropout { .. } => k == 0,
        Op::TopK { .. } | Op::Multinomial { .. } => k == 0,
        _ => true,
    }
}

/// The op as its error messages name it.
fn op_name(op: &Op) -> String {
    match op {
        Op::Unary(u, _) => format!("`{}`", u.name()),
        Op::Binary(b, ..) => format!("`{}`", b.name()),
        Op::Compare(c, ..) => format!("the comparison `{}`", c.symbol()),
        Op::Reduce { op, .. } => format!("`{}`", op.name()),
        Op::Row { op, .. } => format!("`{}`", op.name()),
        Op::Norm { op, .. } => format!("`{}`", op.name()),
        Op::Cast(..) => "the cast".into(),
        Op::Kernel { .. } => "the `#[kernel]`".into(),
        Op::RowKernel { .. } => "a row `#[kernel]`".into(),
        Op::Call { .. } => "the call".into(),
        Op::External { .. } => "a function outside `tensor_fn!`".into(),
        Op::Attention { .. } => "`scaled_dot_product_attention`".into(),
        Op::Rope { .. } => "`rope`".into(),
        Op::Embedding { .. } => "`embedding`".into(),
        Op::Select { gather: true, .. } => "`gather`".into(),
        Op::Select { .. } => "`index_select`".into(),
        Op::ScatterAdd {
            index_add: true, ..
        } => "`index_add`".into(),
        Op::ScatterAdd { .. } => "`scatter_add`".into(),
        Op::Triangle { upper: true, .. } => "`triu`".into(),
        Op::Triangle { .. } => "`tril`".into(),
        Op::Narrow { .. } => "`narrow`".into(),
        Op::Index { .. } => "indexing".into(),
        Op::Cat { .. } => "`cat`".into(),
        Op::CrossEntropy { .. } => "`cross_entropy`".into(),
        Op::Cumsum { .. } => "`cumsum`".into(),
        Op::Pool { pool, .. } => format!("`{}`", pool.kind.name()),
        Op::Dropout { .. } => "`dropout`".into(),
        Op::TopK { .. } => "`topk`".into(),
        Op::Multinomial { .. } => "`multinomial`".into(),
        Op::Conv { spatial: 1, .. } => "`conv1d`".into(),
        Op::Conv { .. } => "`conv2d`".into(),
        _ => "this op".into(),
    }
}

fn broadcast(a: &[Dim], b: &[Dim]) -> Vec<Dim> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|k| {
            let x = (k + a.len()).checked_sub(n).map(|i| &a[i]);
            let y = (k + b.len()).checked_sub(n).map(|i| &b[i]);
            match (x, y) {
                (Some(x), Some(y)) if x.as_constant() == Some(1) => y.clone(),
                (Some(x), _) => x.clone(),
                (None, Some(y)) => y.clone(),
                (None, None) => unreachable!(),
            }
        })
        .collect()
}

impl Deriver {
    fn new(f: &CheckedFn, rets: Vec<NodeId>, kernels: KernelBodies) -> Self {
        let n = f.graph.nodes.len();
        Deriver {
            g: f.graph.clone(),
            needs: vec![false; n],
            from: vec![None; n],
            live: vec![false; n],
            adj: vec![None; n],
            rets,
            kernels,
            errors: Vec::new(),
        }
    }

    /// Marks what needs a gradient (forward from the parameters) and
    /// what the result depends on (backward from it).
    fn mark(&mut self, targets: &[NodeId]) {
        let n = self.live.len();
        for &t in targets {
            self.needs[t] = true;
            self.from[t] = Some(t);
        }
        for id in 0..n {
            if self.needs[id] {
                continue;
            }
            let ins = self.g.inputs(id);
            for (k, &i) in ins.iter().enumerate() {
                if self.needs[i]
                    && carries(&self.g.nodes[id].op, k)
                    && !matches!(self.g.nodes[id].ty, Ty::Scalar(_))
                {
                    self.needs[id] = true;
                    self.from[id] = self.from[i];
                    break;
                }
            }
        }
        let mut live = vec![false; n];
        for &r in &self.rets {
            live[r] = self.needs[r];
        }
        for id in (0..n).rev() {
            if !live[id] {
                continue;
            }
            let ins = self.g.inputs(id);
            for (k, &i) in ins.iter().enumerate() {
                if self.needs[i] && carries(&self.g.nodes[id].op, k) {
                    live[i] = true;
                }
            }
        }
        self.live = live;
    }

    /// Where the result depends on `sources` only through operands that
    /// carry no gradient: the first such op and why.
    fn blocked(&self, sources: &[NodeId]) -> Option<(NodeId, String)> {
        let n = self.live.len();
        // Everything reached from the sources, through any operand.
        let mut reach = vec![false; n];
        for &s in sources {
            reach[s] = true;
        }
        for id in 0..n {
            if self.g.inputs(id).iter().any(|&i| reach[i]) {
                reach[id] = true;
            }
        }
        if !self.rets.iter().any(|&r| reach[r]) {
            return None;
        }
        let mut on_path = vec![false; n];
        for &r in &self.rets {
            on_path[r] = reach[r];
        }
        for id in (0..n).rev() {
            if on_path[id] {
                for i in self.g.inputs(id) {
                    if reach[i] {
                        on_path[i] = true;
                    }
                }
            }
        }
        (0..n).filter(|&id| on_path[id]).find_map(|id| {
            let op = &self.g.nodes[id].op;
            let ins = self.g.inputs(id);
            ins.iter()
                .enumerate()
                .any(|(k, &i)| on_path[i] && !carries(op, k))
                .then(|| {
                    let why = match op {
                        Op::Compare(..) => {
                            "a comparison gives a `bool` tensor, which carries no gradient"
                                .to_string()
                        }
                        Op::Where(..) => {
                            "the condition of `where_` carries no gradient".to_string()
                        }
                        _ => "an index carries no gradient".to_string(),
                    };
                    (id, why)
                })
        })
    }

    fn tt(&self, n: NodeId) -> TensorTy {
        match &self.g.nodes[n].ty {
            Ty::Tensor(t) => t.clone(),
            other => unreachable!("node {n} is not a tensor: {other:?}"),
        }
    }

    fn is_tensor(&self, n: NodeId) -> bool {
        matches!(self.g.nodes[n].ty, Ty::Tensor(_))
    }

    fn dims(&self, n: NodeId) -> Vec<Dim> {
        self.g.nodes[n]
            .ty
            .tensor()
            .map(|t| t.dims.clone())
            .unwrap_or_default()
    }

    fn push(&mut self, op: Op, ty: Ty, like: NodeId) -> NodeId {
        let node = &self.g.nodes[like];
        let (sp, text) = (node.sp.clone(), format!("the gradient of `{}`", node.text));
        self.g.push(Node { op, ty, sp, text })
    }

    fn tensor(&mut self, op: Op, ty: TensorTy, like: NodeId) -> NodeId {
        self.push(op, Ty::Tensor(ty), like)
    }

    fn lit(&mut self, value: f64, like: NodeId) -> NodeId {
        self.push(
            Op::Lit { value, int: false },
            Ty::Scalar(ScalarTy::FloatLit),
            like,
        )
    }

    /// The type of an elementwise result of these operands, with `dtype`
    /// (the first tensor's where `None`).
    fn elem_ty(&self, ops: &[NodeId], dtype: Option<Dt>) -> TensorTy {
        let mut dims: Vec<Dim> = Vec::new();
        let mut first: Option<TensorTy> = None;
        for &o in ops {
            if let Ty::Tensor(t) = &self.g.nodes[o].ty {
                dims = broadcast(&dims, &t.dims);
                if first.is_none() {
                    first = Some(t.clone());
                }
            }
        }
        let first = first.expect("an elementwise op has a tensor operand");
        TensorTy {
            device: first.device,
            dtype: dtype.unwrap_or(first.dtype),
            dims,
        }
    }

    /// The type of a scalar result of scalar operands (a rule's factor
    /// from a scalar operand, such as `b * b` for `a / b`): a float
    /// scalar's type, or a float literal's.
    fn scalar_ty(&self, ops: &[NodeId]) -> Ty {
        ops.iter()
            .map(|&o| &self.g.nodes[o].ty)
            .find(|t| matches!(t, Ty::Scalar(ScalarTy::Of(_))))
            .cloned()
            .unwrap_or(Ty::Scalar(ScalarTy::FloatLit))
    }

    fn un(&mut self, op: UnaryOp, a: NodeId) -> NodeId {
        if !self.is_tensor(a) {
            let ty = self.scalar_ty(&[a]);
            return self.push(Op::Unary(op, a), ty, a);
        }
        let ty = self.elem_ty(&[a], None);
        self.tensor(Op::Unary(op, a), ty, a)
    }

    fn bin(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
        if !self.is_tensor(a) && !self.is_tensor(b) {
            let ty = self.scalar_ty(&[a, b]);
            return self.push(Op::Binary(op, a, b), ty, a);
        }
        let ty = self.elem_ty(&[a, b], None);
        self.tensor(Op::Binary(op, a, b), ty, a)
    }

    fn mul(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.bin(BinaryOp::Mul, a, b)
    }

    fn mul_lit(&mut self, a: NodeId, v: f64) -> NodeId {
        let l = self.lit(v, a);
        self.mul(a, l)
    }

    fn cmp(&mut self, op: CmpOp, a: NodeId, b: NodeId) -> NodeId {
        let ty = self.elem_ty(&[a, b], Some(Dt::Kind(DTypeKind::Bool)));
        self.tensor(Op::Compare(op, a, b), ty, a)
    }

    fn cmp_lit(&mut self, op: CmpOp, a: NodeId, v: f64) -> NodeId {
        let l = self.lit(v, a);
        self.cmp(op, a, l)
    }

    /// `where_(c, a, b)`, typed like `like` where both branches are
    /// scalars.
    fn select(&mut self, c: NodeId, a: NodeId, b: NodeId, dtype: Dt) -> NodeId {
        let ty = self.elem_ty(&[c, a, b], Some(dtype));
        self.tensor(Op::Where(c, a, b), ty, c)
    }

    /// `g` where `c`, else zero.
    fn masked(&mut self, c: NodeId, g: NodeId) -> NodeId {
        let z = self.lit(0.0, g);
        let dt = self.tt(g).dtype;
        self.select(c, g, z, dt)
    }

    fn reshape(&mut self, a: NodeId, dims: Vec<Dim>) -> NodeId {
        if self.dims(a) == dims {
            return a;
        }
        let ty = TensorTy { dims, ..self.tt(a) };
        self.tensor(Op::Reshape { x: a, view: false }, ty, a)
    }

    fn expand(&mut self, a: NodeId, dims: Vec<Dim>) -> NodeId {
        if self.dims(a) == dims {
            return a;
        }
        let ty = TensorTy { dims, ..self.tt(a) };
        self.tensor(Op::Expand(a), ty, a)
    }

    fn reduce(&mut self, op: ReduceOp, a: NodeId, dim: Option<usize>) -> NodeId {
        let mut ty = self.tt(a);
        match dim {
            Some(d) => {
                ty.dims.remove(d);
            }
            None => ty.dims.clear(),
        }
        if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
            ty.dtype = Dt::Kind(DTypeKind::I64);
        }
        self.tensor(Op::Reduce { op, x: a, dim }, ty, a)
    }

    /// `a.sum(d, keepdim = true)`.
    fn sum_keep(&mut self, a: NodeId, d: usize) -> NodeId {
        let dims = self.dims(a);
        let s = self.reduce(ReduceOp::Sum, a, Some(d));
        let mut keep = dims;
        keep[d] = Dim::constant(1);
        self.reshape(s, keep)
    }

    fn cast(&mut self, a: NodeId, dtype: Dt) -> NodeId {
        let ty = TensorTy {
            dtype,
            ..self.tt(a)
        };
        self.tensor(Op::Cast(a, dtype), ty, a)
    }

    /// A tensor of `ty` filled with `value`: a 0-d `arange`, cast and
    /// expanded (a view).
    fn full(&mut self, ty: &TensorTy, value: i64, like: NodeId) -> NodeId {
        let a = self.tensor(
            Op::Arange {
                start: Dim::constant(value),
            },
            TensorTy {
                device: ty.device,
                dtype: Dt::Kind(DTypeKind::I64),
                dims: vec![],
            },
            like,
        );
        let c = self.cast(a, ty.dtype);
        self.expand(c, ty.dims.clone())
    }

    fn zeros(&mut self, ty: &TensorTy, like: NodeId) -> NodeId {
        self.full(ty, 0, like)
    }

    fn matmul(&mut self, a: NodeId, b: NodeId, like: NodeId) -> NodeId {
        let (x, y) = (self.dims(a), self.dims(b));
        let dims = match (x.len(), y.len()) {
            (1, 1) => vec![],
            (1, _) => {
                let mut d = y[..y.len() - 2].to_vec();
                d.push(y[y.len() - 1].clone());
                d
            }
            (_, 1) => x[..x.len() - 1].to_vec(),
            _ => {
                let mut d = broadcast(&x[..x.len() - 2], &y[..y.len() - 2]);
                d.push(x[x.len() - 2].clone());
                d.push(y[y.len() - 1].clone());
                d
            }
        };
        let ty = TensorTy { dims, ..self.tt(a) };
        self.tensor(Op::MatMul(a, b), ty, like)
    }

    /// The last two dims swapped.
    fn mt(&mut self, a: NodeId) -> NodeId {
        let mut ty = self.tt(a);
        let r = ty.dims.len();
        ty.dims.swap(r - 2, r - 1);
        if r == 2 {
            self.tensor(Op::T(a), ty, a)
        } else {
            self.tensor(Op::Transpose(a, r - 2, r - 1), ty, a)
        }
    }

    /// `g` summed back to `dims` (the operand of a broadcast).
    fn unbroadcast(&mut self, mut g: NodeId, dims: &[Dim]) -> NodeId {
        let extra = self.dims(g).len().saturating_sub(dims.len());
        if extra > 1 {
            // The leading dims merged into one (a view of a contiguous
            // gradient), summed by one reduction: summing them one at a
            // time made the first pass a reduction over rows of `B`
            // elements (a layer norm's `[B, S, C]` gradient), far slower
            // than one over `B * S` rows.
            let gd = self.dims(g);
            let merged = std::iter::once(numel(&gd[..extra]))
                .chain(gd[extra..].iter().cloned())
                .collect();
            g = self.reshape(g, merged);
        }
        if extra > 0 {
            g = self.reduce(ReduceOp::Sum, g, Some(0));
        }
        let gd = self.dims(g);
        for (k, d) in dims.iter().enumerate() {
            if d.as_constant() == Some(1) && gd[k].as_constant() != Some(1) {
                g = self.sum_keep(g, k);
            }
        }
        g
    }

    /// Adds `g` to the gradient of `n`.
    fn accumulate(&mut self, n: NodeId, g: NodeId) {
        if !self.live[n] || !self.is_tensor(n) {
            return;
        }
        let g = self.fit(n, g);
        self.adj[n] = Some(match self.adj[n] {
            Some(a) => self.bin(BinaryOp::Add, a, g),
            None => g,
        });
    }

    /// A gradient `g` for tensor `n`, computed with the dims of a
    /// broadcast result, summed back to `n`'s dims and moved to its
    /// device.
    fn fit(&mut self, n: NodeId, g: NodeId) -> NodeId {
        let dims = self.dims(n);
        let mut g = g;
        if self.dims(g) != dims {
            g = self.unbroadcast(g, &dims);
            if self.dims(g) != dims {
                // A size-1 dim written as a symbol that is 1 at run time:
                // the view gives it back its written dims.
                g = self.reshape(g, dims.clone());
            }
        }
        if self.tt(g).device != self.tt(n).device {
            let dev = self.tt(n).device;
            let ty = TensorTy {
                device: dev,
                ..self.tt(g)
            };
            g = self.tensor(Op::ToDevice(g, dev), ty, n);
        }
        g
    }

    fn error(&mut self, n: NodeId, msg: String) {
        let sp = self.g.nodes[n].sp.clone();
        self.errors.push(sp.error(msg));
    }

    fn param_name(&self, n: NodeId) -> String {
        match self.from[n] {
            Some(p) => self.g.nodes[p].text.clone(),
            None => "a differentiated parameter".into(),
        }
    }

    /// The backward pass from the results `seeds` name, each seeded with
    /// its gradient (a node of its type), or with one for a 0-d loss. A
    /// result given twice (`(y, y)`) gets the sum of its seeds.
    fn backward(&mut self, seeds: &[(NodeId, Option<NodeId>)]) {
        let fwd = self.g.nodes.len();
        for &(r, seed) in seeds {
            let seed = match seed {
                Some(s) => s,
                None => {
                    let ty = self.tt(r);
                    self.full(&ty, 1, r)
                }
            };
            self.accumulate(r, seed);
        }
        for n in (0..fwd).rev() {
            let Some(g) = self.adj[n] else { continue };
            let op = self.g.nodes[n].op.clone();
            if let Op::Param(_) = op {
                continue;
            }
            // The operands that need a gradient from here.
            let needing: Vec<(usize, NodeId)> = self
                .g
                .inputs(n)
                .into_iter()
                .enumerate()
                .filter(|&(k, i)| self.live[i] && carries(&op, k))
                .collect();
            if needing.is_empty() {
                continue;
            }
            let mut bad = false;
            for &(_, i) in &needing {
                if self.is_tensor(i) && !self.tt(i).dtype.is_float() {
                    let p = self.param_name(i);
                    let what = match &self.g.nodes[i].op {
                        Op::Cast(..) => "this cast to an integer type".to_string(),
                        Op::TupleGet(t, 1) if matches!(self.g.nodes[*t].op, Op::TopK { .. }) => {
                            "the index tensor of `topk`".to_string()
                        }
                        op => op_name(op),
                    };
                    let text = self.g.nodes[i].text.clone();
                    self.error(
                        i,
                        format!(
                            "`{text}` has no gradient: {what} gives `{}` values, which are not differentiable, on the path from `{p}` to the result of the `#[grad]` function; compute it from a value that does not need a gradient, or remove `{p}` from `#[grad(..)]`",
                            self.tt(i).dtype
                        ),
                    );
                    bad = true;
                }
            }
            if bad {
                continue;
            }
            match self.rule(n, &op, g) {
                Ok(grads) => {
                    for (i, gi) in grads {
                        self.accumulate(i, gi);
                    }
                }
                Err(why) => {
                    let p = self.param_name(needing[0].1);
                    let text = self.g.nodes[n].text.clone();
                    let name = op_name(&op);
                    self.error(
                        n,
                        format!(
                            "`{text}`: {name} {why}, and it lies on the path from `{p}` to the result of the `#[grad]` function; remove `{p}` from `#[grad(..)]` or compute this from values that need no gradient"
                        ),
                    );
                }
            }
        }
    }

    /// The gradients of node `n`'s operands given its gradient `g`, each
    /// with the dims of the node (broadcast operands are summed back by
    /// [`Self::accumulate`]), or why there is none.
    fn rule(&mut self, n: NodeId, op: &Op, g: NodeId) -> Result<Vec<(NodeId, NodeId)>, String> {
        let y = n;
        Ok(match *op {
            Op::Unary(u, x) => match self.unary(u, x, y, g) {
                Some(gx) => vec![(x, gx)],
                // Piecewise constant: zero wherever it is defined, as PyTorch.
                None if matches!(
                    u,
                    UnaryOp::Trunc
                        | UnaryOp::Round
                        | UnaryOp::Floor
                        | UnaryOp::Ceil
                        | UnaryOp::Sign
                ) =>
                {
                    vec![]
                }
                None => return Err("has no derivative rule".into()),
            },
            Op::Binary(b, x1, x2) => self.binary(b, x1, x2, y, g)?,
            Op::Where(c, a, b) => {
                let z = self.lit(0.0, g);
                let dt = self.tt(g).dtype;
                let ga = self.select(c, g, z, dt);
                let gb = self.select(c, z, g, dt);
                vec![(a, ga), (b, gb)]
            }
            Op::Cast(x, to) => {
                let from = self.tt(x).dtype;
                if !to.is_float() {
                    return Err(format!("casts to `{to}`, which has no gradient"));
                }
                let gx = if from == to { g } else { self.cast(g, from) };
                vec![(x, gx)]
            }
            Op::AddCmul {
                input,
                t1,
                t2,
                value,
            } => {
                let v1 = self.mul(g, value);
                let g1 = self.mul(v1, t2);
                let g2 = self.mul(v1, t1);
                vec![(input, g), (t1, g1), (t2, g2)]
            }
            Op::MatMul(a, b) => {
                let (ra, rb) = (self.dims(a).len(), self.dims(b).len());
                match (ra, rb) {
                    (1, 1) => {
                        let (ga, gb) = (self.mul(g, b), self.mul(g, a));
                        vec![(a, ga), (b, gb)]
                    }
                    (1, _) | (_, 1) => return Err("has no derivative rule for a vector operand yet (write the vector as a `[1, K]` or `[K, 1]` matrix)".into()),
                    _ => {
                        let bt = self.mt(b);
                        let ga = self.matmul(g, bt, a);
                        let at = self.mt(a);
                        let gb = self.matmul(at, g, b);
                        vec![(a, ga), (b, gb)]
                    }
                }
            }
            Op::Bmm(a, b) => {
                let bt = self.mt(b);
                let ga = self.bmm(g, bt, a);
                let at = self.mt(a);
                let gb = self.bmm(at, g, b);
                vec![(a, ga), (b, gb)]
            }
            Op::Dot(a, b) => {
                let (ga, gb) = (self.mul(g, b), self.mul(g, a));
                vec![(a, ga), (b, gb)]
            }
            Op::CrossEntropy {
                x,
                target,
                reduction,
                ignore_index,
                label_smoothing,
            } => {
                let gx = self.tensor(
                    Op::CrossEntropyBackward {
                        x,
                        target,
                        grad: g,
                        reduction,
                        ignore_index,
                        label_smoothing,
                    },
                    self.tt(x),
                    n,
                );
                vec![(x, gx)]
            }
            // y_i = x_0 + .. + x_i: dx_j = g_j + .. + g_last = sum(g) - cumsum(g)_j + g_j.
            Op::Cumsum { dim, x } => {
                if !self.tt(x).dtype.is_float() {
                    return Err("an integer `cumsum`".into());
                }
                let total = self.sum_keep(g, dim);
                let run = self.tensor(Op::Cumsum { x: g, dim }, self.tt(g), n);
                let rest = self.bin(BinaryOp::Sub, total, run);
                let gx = self.bin(BinaryOp::Add, rest, g);
                vec![(x, gx)]
            }
            // PyTorch's `convolution_backward`: the input's gradient is the
            // transposed convolution of `g`, the weight's the correlation
            // of the input with `g`, the bias's `g` summed over all but the
            // channels.
            Op::Conv {
                x,
                weight,
                bias,
                args,
                spatial,
            } => {
                let back = |this: &mut Self, input: bool| {
                    let like = if input { x } else { weight };
                    this.tensor(
                        Op::ConvBackward {
                            x,
                            weight,
                            grad: g,
                            args,
                            spatial,
                            input,
                        },
                        this.tt(like),
                        n,
                    )
                };
                let mut out = vec![(x, back(self, true)), (weight, back(self, false))];
                if let Some(b) = bias {
                    let mut gb = g;
                    for d in (2..2 + spatial).rev() {
                        gb = self.reduce(ReduceOp::Sum, gb, Some(d));
                    }
                    gb = self.reduce(ReduceOp::Sum, gb, Some(0));
                    out.push((b, gb));
                }
                out
            }
            Op::ConvBackward { .. } => {
                return Err("the gradient of a convolution (no second derivative)".into())
            }
            Op::CrossEntropyBackward { .. } => {
                return Err("the gradient of `cross_entropy` (no second derivative)".into())
            }
            // The windows recomputed from `x`; max sends each gradient to
            // its window's argmax (the first largest, as PyTorch).
            Op::Pool { x, pool } => {
                let gx = self.tensor(Op::PoolBackward { x, grad: g, pool }, self.tt(x), n);
                vec![(x, gx)]
            }
            // Linear in `x`: the same mask (drawn again from the seed and
            // the positions) and scale applied to the gradient.
            Op::Dropout { x, p, ref seed } => {
                let seed = seed.clone();
                let gx = self.tensor(Op::Dropout { x: g, p, seed }, self.tt(x), n);
                vec![(x, gx)]
            }
            Op::PoolBackward { pool, .. } => {
                return Err(format!(
                    "the gradient of `{}` (no second derivative)",
                    pool.kind.name()
                ))
            }
            // Folded by the planner after differentiation: never in a
            // checked body.
            Op::AddMmAct { .. } => return Err("a product with a folded activation".into()),
            Op::MatMulSumK { .. } => return Err("a product with a folded bias gradient".into()),
            Op::AddMmGeluAux { .. } | Op::MatMulDGelu { .. } => {
                return Err("a product with a folded GELU".into())
            }
            Op::AddMm {
                bias,
                m1,
                m2,
                beta,
                alpha,
            } => {
                let gbias = match beta {
                    Some(s) => self.mul(g, s),
                    None => g,
                };
                let gs = match alpha {
                    Some(s) => self.mul(g, s),
                    None => g,
                };
                let m2t = self.mt(m2);
                let g1 = self.matmul(gs, m2t, m1);
                let m1t = self.mt(m1);
                let g2 = self.matmul(m1t, gs, m2);
                vec![(bias, gbias), (m1, g1), (m2, g2)]
            }
            Op::Reshape { x, .. } => {
                let d = self.dims(x);
                vec![(x, self.reshape(g, d))]
            }
            // Summed back to the operand's dims by `accumulate`.
            Op::Expand(x) => vec![(x, g)],
            Op::T(x) => {
                let ty = self.tt(x);
                vec![(x, self.tensor(Op::T(g), ty, x))]
            }
            Op::Transpose(x, d0, d1) => {
                let ty = self.tt(x);
                vec![(x, self.tensor(Op::Transpose(g, d0, d1), ty, x))]
            }
            Op::Permute(x, ref perm) => {
                let mut inv = vec![0; perm.len()];
                for (k, &p) in perm.iter().enumerate() {
                    inv[p] = k;
                }
                let ty = self.tt(x);
                vec![(x, self.tensor(Op::Permute(g, inv), ty, x))]
            }
            Op::ToDevice(x, _) => vec![(x, g)],
            Op::Reduce { op: r, x, dim } => {
                let xd = self.dims(x);
                // The gradient with the reduced dim kept, broadcastable
                // against `x`.
                let (gk, yk) = match dim {
                    Some(d) => {
                        let mut keep = xd.clone();
                        keep[d] = Dim::constant(1);
                        (self.reshape(g, keep.clone()), self.reshape(y, keep))
                    }
                    None => (g, y),
                };
                match r {
                    ReduceOp::Sum => vec![(x, self.expand(gk, xd))],
                    ReduceOp::Mean => {
                        let count = match dim {
                            Some(d) => xd[d].clone(),
                            None => numel(&xd),
                        };
                        let scaled = match count.as_constant() {
                            Some(c) => self.mul_lit(gk, 1.0 / c as f64),
                            None => {
                                // The count as a tensor: ones summed.
                                let ty = self.tt(x);
                                let ones = self.full(&ty, 1, x);
                                let c = match dim {
                                    Some(d) => self.sum_keep(ones, d),
                                    None => self.reduce(ReduceOp::Sum, ones, None),
                                };
                                self.bin(BinaryOp::Div, gk, c)
                            }
                        };
                        vec![(x, self.expand(scaled, xd))]
                    }
                    ReduceOp::Max | ReduceOp::Min => match dim {
                        // PyTorch: the whole gradient to the index
                        // `max(dim)` returns (the first of ties).
                        Some(d) => {
                            let arg = if r == ReduceOp::Max {
                                ReduceOp::ArgMax
                            } else {
                                ReduceOp::ArgMin
                            };
                            let idx = self.reduce(arg, x, Some(d));
                            let mut keep = xd.clone();
                            keep[d] = Dim::constant(1);
                            let idx = self.reshape(idx, keep);
                            let ar = self.positions(Dim::constant(0), xd[d].clone(), None, x);
                            let mut along = vec![Dim::constant(1); xd.len() - d];
                            along[0] = xd[d].clone();
                            let ar = self.reshape(ar, along);
                            let hit = self.cmp(CmpOp::Eq, ar, idx);
                            let ge = self.expand(gk, xd);
                            vec![(x, self.masked(hit, ge))]
                        }
                        // PyTorch: evenly among the elements equal to
                        // the result.
                        None => {
                            let hit = self.cmp(CmpOp::Eq, x, yk);
                            let dt = self.tt(x).dtype;
                            let f = self.cast(hit, dt);
                            let count = self.reduce(ReduceOp::Sum, f, None);
                            let share = self.bin(BinaryOp::Div, gk, count);
                            vec![(x, self.masked(hit, share))]
                        }
                    },
                    ReduceOp::ArgMax | ReduceOp::ArgMin => {
                        return Err("gives indices, which have no gradient".into())
                    }
                }
            }
            Op::Row { op: r, x, dim } => match r {
                RowOp::Softmax => {
                    let gy = self.mul(g, y);
                    let s = self.sum_keep(gy, dim);
                    let d = self.bin(BinaryOp::Sub, g, s);
                    vec![(x, self.mul(y, d))]
                }
                RowOp::LogSoftmax => {
                    let s = self.sum_keep(g, dim);
                    let p = self.un(UnaryOp::Exp, y);
                    let ps = self.mul(p, s);
                    vec![(x, self.bin(BinaryOp::Sub, g, ps))]
                }
                RowOp::LogSumExp => {
                    let mut keep = self.dims(x);
                    keep[dim] = Dim::constant(1);
                    let gk = self.reshape(g, keep.clone());
                    let yk = self.reshape(y, keep);
                    let dx = self.bin(BinaryOp::Sub, x, yk);
                    let p = self.un(UnaryOp::Exp, dx);
                    vec![(x, self.mul(gk, p))]
                }
            },
            Op::Cat { ref xs, dim } => {
                let mut out = Vec::new();
                let mut start = Dim::constant(0);
                for &xi in xs {
                    let len = self.dims(xi)[dim].clone();
                    let ty = self.tt(xi);
                    let gi = match (start.as_constant(), len.as_constant()) {
                        (Some(s), Some(l)) => self.tensor(
                            Op::Narrow {
                                x: g,
                                dim,
                                start: IndexArg::Const(s as usize),
                                len: IndexArg::Const(l as usize),
                            },
                            ty,
                            xi,
                        ),
                        // An offset or length known only at run time is
                        // a dim (a sum of the operands' sizes), not a
                        // scalar node `narrow` could take: its positions
                        // are an `arange` from it, gathered.
                        _ => {
                            let at = self.positions(start.clone(), len.clone(), None, xi);
                            self.tensor(
                                Op::Select {
                                    x: g,
                                    dim,
                                    index: at,
                                    gather: false,
                                },
                                ty,
                                xi,
                            )
                        }
                    };
                    out.push((xi, gi));
                    start = start.add(&len);
                }
                out
            }
            Op::Narrow {
                x, dim, ref start, ..
            } => {
                let len = self.dims(n)[dim].clone();
                vec![(x, self.unslice(g, x, dim, start, len))]
            }
            Op::Index { x, dim, ref index } => {
                let mut keep = self.dims(x);
                keep[dim] = Dim::constant(1);
                let gk = self.reshape(g, keep);
                vec![(x, self.unslice(gk, x, dim, index, Dim::constant(1)))]
            }
            Op::Triangle { x, upper, diagonal } => {
                let ty = self.tt(x);
                vec![(
                    x,
                    self.tensor(
                        Op::Triangle {
                            x: g,
                            upper,
                            diagonal,
                        },
                        ty,
                        x,
                    ),
                )]
            }
            Op::Call { .. } => {
                return Err(
                    "is not differentiated yet: write the callee's body in this function".into(),
                )
            }
            Op::Kernel { kernel, ref args } => self.kernel_rule(kernel, args, g)?,
            Op::RowKernel { kernel, ref args } => self.row_kernel_rule(kernel, args, g)?,
            Op::Norm {
                op: nop,
                x,
                weight,
                bias,
                eps,
            } => {
                // One fused backward for the input, the weight and the
                // bias: `norm_backward` recomputes the rows' statistics
                // from `x`, so the forward saves nothing for it.
                let mut tys = vec![self.tt(x), self.tt(weight)];
                tys.extend(bias.map(|b| self.tt(b)));
                let b = self.push(
                    Op::NormBackward {
                        op: nop,
                        x,
                        weight,
                        grad: g,
                        eps,
                    },
                    Ty::Tuple(tys.clone()),
                    n,
                );
                let gx = self.tensor(Op::TupleGet(b, 0), tys[0].clone(), x);
                let gw = self.tensor(Op::TupleGet(b, 1), tys[1].clone(), weight);
                let mut out = vec![(x, gx), (weight, gw)];
                if let Some(bias) = bias {
                    let gb = self.tensor(Op::TupleGet(b, 2), tys[2].clone(), bias);
                    out.push((bias, gb));
                }
                out
            }
            Op::NormBackward { op, .. } => {
                return Err(format!(
                    "the gradient of `{}` (no second derivative)",
                    op.name()
                ))
            }
            Op::Rope { x, cos, sin } => {
                // y = x cos + rotate_half(x) sin, rotate_half(x) =
                // cat(-x2, x1); its transpose takes u to cat(u2, -u1).
                let xd = self.dims(x);
                let last = xd.len() - 1;
                let Some(d) = xd[last].as_constant() else {
                    return Err(
                        "has no derivative rule yet for a last dim known only at run time".into(),
                    );
                };
                let h = (d / 2) as usize;
                let u = self.mul(g, sin);
                let u1 = self.slice(u, last, 0, h);
                let u2 = self.slice(u, last, h, h);
                let nu1 = self.un(UnaryOp::Neg, u1);
                let rot_t = self.join(vec![u2, nu1], last, u);
                let gc = self.mul(g, cos);
                let gx = self.bin(BinaryOp::Add, gc, rot_t);
                let x1 = self.slice(x, last, 0, h);
                let x2 = self.slice(x, last, h, h);
                let nx2 = self.un(UnaryOp::Neg, x2);
                let rot = self.join(vec![nx2, x1], last, x);
                let gcos = self.mul(g, x);
                let gsin = self.mul(g, rot);
                vec![(x, gx), (cos, gcos), (sin, gsin)]
            }
            Op::Attention {
                q,
                k,
                v,
                mask,
                causal,
                scale,
                gqa,
            } => {
                if let Some(m) = mask {
                    if self.live[m] && self.is_tensor(m) {
                        return Err("has no derivative rule yet for an `attn_mask` that depends on a differentiated parameter".into());
                    }
                }
                // One fused backward for all three, from the log-sum-exps
                // the forward saves (see the expansion of `Attention`).
                let tys = [self.tt(q), self.tt(k), self.tt(v)];
                let b = self.push(
                    Op::AttentionBackward {
                        q,
                        k,
                        v,
                        out: n,
                        grad: g,
                        mask,
                        causal,
                        scale,
                        gqa,
                    },
                    Ty::Tuple(tys.to_vec()),
                    n,
                );
                let [tq, tk, tv] = tys;
                let gq = self.tensor(Op::TupleGet(b, 0), tq, q);
                let gk = self.tensor(Op::TupleGet(b, 1), tk, k);
                let gv = self.tensor(Op::TupleGet(b, 2), tv, v);
                vec![(q, gq), (k, gk), (v, gv)]
            }
            Op::AttentionBackward { .. } => {
                return Err(
                    "the gradient of `scaled_dot_product_attention` (no second derivative)".into(),
                )
            }
            // The rows of `weight` that ids picked get their gradients
            // summed (repeated ids add up): `zeros(weight).index_add(0,
            // ids.flatten(), g.reshape([-1, E]))`.
            Op::Embedding { ids, weight } => {
                let wt = self.tt(weight);
                let e = wt.dims[1].clone();
                let n = self
                    .dims(ids)
                    .iter()
                    .fold(Dim::constant(1), |a, d| a.mul(d));
                let flat = self.reshape(ids, vec![n.clone()]);
                let rows = self.reshape(g, vec![n, e]);
                let z = self.zeros(&wt, weight);
                let gw = self.scatter(z, 0, flat, rows, 1.0, true);
                vec![(weight, gw)]
            }
            // The inverse of the gather: `index_select`'s gradient is an
            // `index_add` into zeros, `gather`'s a `scatter_add`.
            Op::Select {
                x,
                dim,
                index,
                gather,
            } => {
                let xt = self.tt(x);
                let z = self.zeros(&xt, x);
                let gx = self.scatter(z, dim, index, g, 1.0, !gather);
                vec![(x, gx)]
            }
            // `x` passes `g` through; `src` gets `g` gathered back from
            // where its values went (times `alpha`), and zero where
            // `index` does not reach (a `src` larger than `index`).
            Op::ScatterAdd {
                x,
                dim,
                index,
                src,
                alpha,
                index_add,
            } => {
                let mut ty = self.tt(g);
                ty.dims = if index_add {
                    let mut d = ty.dims.clone();
                    d[dim] = self.dims(index)[0].clone();
                    d
                } else {
                    self.dims(index)
                };
                let mut gs = self.tensor(
                    Op::Select {
                        x: g,
                        dim,
                        index,
                        gather: !index_add,
                    },
                    ty,
                    src,
                );
                let want = self.dims(src);
                for (d, wd) in want.iter().enumerate() {
                    let have = self.dims(gs)[d].clone();
                    if have == *wd {
                        continue;
                    }
                    let (Some(h), Some(w)) = (have.as_constant(), wd.as_constant()) else {
                        return Err(format!(
                            "reaches `src` through an index whose dim {d} ({have}) may be smaller than `src`'s ({wd}), which the gradient needs known"
                        ));
                    };
                    let mut zt = self.tt(gs);
                    zt.dims[d] = Dim::constant(w - h);
                    let z = self.zeros(&zt, src);
                    let mut ct = self.tt(gs);
                    ct.dims[d] = wd.clone();
                    gs = self.tensor(
                        Op::Cat {
                            xs: vec![gs, z],
                            dim: d,
                        },
                        ct,
                        src,
                    );
                }
                if alpha != 1.0 {
                    gs = self.mul_lit(gs, alpha);
                }
                vec![(x, g), (src, gs)]
            }
            Op::External { .. } => {
                return Err("is opaque to `tensor_fn!`, which cannot differentiate it".into())
            }
            Op::Compare(..) | Op::Arange { .. } => return Err("has no gradient".into()),
            Op::Multinomial { .. } => return Err("draws indices and has no gradient".into()),
            // The tuple itself gets no gradient: its values' goes to `x`
            // below, its indices have none.
            Op::TopK { .. } => vec![],
            // PyTorch: the values' gradient goes to the picked positions,
            // a `scatter_add` of it into zeros at the indices (distinct
            // along `dim`, so nothing is summed).
            Op::TupleGet(t, 0) if matches!(self.g.nodes[t].op, Op::TopK { .. }) => {
                let Op::TopK { x, dim, .. } = self.g.nodes[t].op else {
                    unreachable!()
                };
                // The indices' node where there is one: a tuple's field is
                // moved out of it once.
                let existing = (0..self.g.nodes.len())
                    .find(|&i| matches!(self.g.nodes[i].op, Op::TupleGet(u, 1) if u == t));
                let idx = match existing {
                    Some(i) => i,
                    None => {
                        let idx_ty = TensorTy {
                            dtype: Dt::Kind(DTypeKind::I64),
                            ..self.tt(n)
                        };
                        self.tensor(Op::TupleGet(t, 1), idx_ty, n)
                    }
                };
                let xt = self.tt(x);
                let z = self.zeros(&xt, x);
                let gx = self.scatter(z, dim, idx, g, 1.0, false);
                vec![(x, gx)]
            }
            Op::TupleGet(t, _) if matches!(self.g.nodes[t].op, Op::TopK { .. }) => {
                return Err("gives `topk`'s indices, which have no gradient".into())
            }
            Op::TupleGet(..) | Op::Param(_) | Op::Lit { .. } => {
                return Err("has no derivative rule".into())
            }
        })
    }

    /// `x.index_add(dim, index, src, alpha)` (`index_add`) or
    /// `x.scatter_add(dim, index, src)`: `x`'s type.
    fn scatter(
        &mut self,
        x: NodeId,
        dim: usize,
        index: NodeId,
        src: NodeId,
        alpha: f64,
        index_add: bool,
    ) -> NodeId {
        let ty = self.tt(x);
        self.tensor(
            Op::ScatterAdd {
                x,
                dim,
                index,
                src,
                alpha,
                index_add,
            },
            ty,
            src,
        )
    }

    /// `a.narrow(dim, start, len)`.
    fn slice(&mut self, a: NodeId, dim: usize, start: usize, len: usize) -> NodeId {
        let mut ty = self.tt(a);
        ty.dims[dim] = Dim::constant(len as i64);
        self.tensor(
            Op::Narrow {
                x: a,
                dim,
                start: IndexArg::Const(start),
                len: IndexArg::Const(len),
            },
            ty,
            a,
        )
    }

    /// `cat(xs, dim)`, typed like `like`.
    fn join(&mut self, xs: Vec<NodeId>, dim: usize, like: NodeId) -> NodeId {
        let mut ty = self.tt(xs[0]);
        ty.dims[dim] = self.dims(like)[dim].clone();
        self.tensor(Op::Cat { xs, dim }, ty, like)
    }

    fn bmm(&mut self, a: NodeId, b: NodeId, like: NodeId) -> NodeId {
        let (x, y) = (self.dims(a), self.dims(b));
        let ty = TensorTy {
            dims: vec![x[0].clone(), x[1].clone(), y[2].clone()],
            ..self.tt(a)
        };
        self.tensor(Op::Bmm(a, b), ty, like)
    }

    /// The transpose of `x.narrow(dim, start, len)`: `g` (the slice)
    /// placed into zeros of `x`'s type at `start` along `dim`. With
    /// every size and the start literal, a `cat` of `g` between zero
    /// blocks; else an `index_add` of `g` at the slice's positions into
    /// zeros (a start computed at run time cannot size a zero block).
    fn unslice(&mut self, g: NodeId, x: NodeId, dim: usize, start: &IndexArg, len: Dim) -> NodeId {
        let ty = self.tt(x);
        let total = ty.dims[dim].clone();
        if let (IndexArg::Const(s), Some(l), Some(t)) =
            (start, len.as_constant(), total.as_constant())
        {
            let (s, l) = (*s as i64, l);
            let mut parts = Vec::new();
            for (at, size) in [(0, s), (s, l), (s + l, t - s - l)] {
                if size == 0 {
                    continue;
                }
                if at == s && size == l {
                    parts.push(g);
                } else {
                    let mut t = ty.clone();
                    t.dims[dim] = Dim::constant(size);
                    parts.push(self.zeros(&t, x));
                }
            }
            return match parts.len() {
                // An empty dim: nothing to place.
                0 => self.zeros(&ty, x),
                1 => parts[0],
                _ => self.tensor(Op::Cat { xs: parts, dim }, ty, x),
            };
        }
        let at = match start {
            IndexArg::Const(s) => self.positions(Dim::constant(*s as i64), len, None, x),
            IndexArg::Node(s) => self.positions(Dim::constant(0), len, Some(*s), x),
        };
        let z = self.zeros(&ty, x);
        self.scatter(z, dim, at, g, 1.0, true)
    }

    /// The `i64` positions `first + offset ..` (`len` of them) on
    /// `like`'s device: an `arange`, plus the run-time `offset` (a
    /// `usize` scalar node) where there is one.
    fn positions(&mut self, first: Dim, len: Dim, offset: Option<NodeId>, like: NodeId) -> NodeId {
        let ty = TensorTy {
            device: self.tt(like).device,
            dtype: Dt::Kind(DTypeKind::I64),
            dims: vec![len],
        };
        let at = self.tensor(Op::Arange { start: first }, ty, like);
        match offset {
            Some(o) => self.bin(BinaryOp::Add, at, o),
            None => at,
        }
    }

    /// The derivative of a unary op times `g` (`None` for an op whose
    /// derivative is zero wherever it is defined, or that has none).
    fn unary(&mut self, u: UnaryOp, x: NodeId, y: NodeId, g: NodeId) -> Option<NodeId> {
        use std::f64::consts::{FRAC_1_SQRT_2, PI};
        Some(match u {
            UnaryOp::Neg => self.un(UnaryOp::Neg, g),
            UnaryOp::Abs => {
                let s = self.un(UnaryOp::Sign, x);
                self.mul(g, s)
            }
            UnaryOp::Relu => {
                let pos = self.cmp_lit(CmpOp::Gt, x, 0.0);
                self.masked(pos, g)
            }
            UnaryOp::Sigmoid => {
                let one = self.lit(1.0, y);
                let q = self.bin(BinaryOp::Sub, one, y);
                let d = self.mul(y, q);
                self.mul(g, d)
            }
            UnaryOp::Tanh => {
                let one = self.lit(1.0, y);
                let yy = self.mul(y, y);
                let d = self.bin(BinaryOp::Sub, one, yy);
                self.mul(g, d)
            }
            UnaryOp::Exp => self.mul(g, y),
            UnaryOp::Expm1 => {
                let one = self.lit(1.0, y);
                let d = self.bin(BinaryOp::Add, y, one);
                self.mul(g, d)
            }
            UnaryOp::Log => self.bin(BinaryOp::Div, g, x),
            UnaryOp::Log1p => {
                let one = self.lit(1.0, x);
                let d = self.bin(BinaryOp::Add, x, one);
                self.bin(BinaryOp::Div, g, d)
            }
            UnaryOp::Sin => {
                let c = self.un(UnaryOp::Cos, x);
                self.mul(g, c)
            }
            UnaryOp::Cos => {
                let s = self.un(UnaryOp::Sin, x);
                let gs = self.mul(g, s);
                self.un(UnaryOp::Neg, gs)
            }
            UnaryOp::Sqrt => {
                let h = self.mul_lit(g, 0.5);
                self.bin(BinaryOp::Div, h, y)
            }
            UnaryOp::Rsqrt => {
                let yy = self.mul(y, y);
                let y3 = self.mul(yy, y);
                let h = self.mul_lit(g, -0.5);
                self.mul(h, y3)
            }
            UnaryOp::Square => {
                let x2 = self.mul_lit(x, 2.0);
                self.mul(g, x2)
            }
            UnaryOp::Recip => {
                let yy = self.mul(y, y);
                let d = self.un(UnaryOp::Neg, yy);
                self.mul(g, d)
            }
            UnaryOp::Gelu => {
                // u = c (x + k x^3), t = tanh(u):
                // 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 k x^2).
                let c = (2.0 / PI).sqrt();
                let k = 0.044715;
                let xx = self.mul(x, x);
                let x3 = self.mul(xx, x);
                let kx3 = self.mul_lit(x3, k);
                let inner = self.bin(BinaryOp::Add, x, kx3);
                let u = self.mul_lit(inner, c);
                let t = self.un(UnaryOp::Tanh, u);
                let one = self.lit(1.0, x);
                let a = self.bin(BinaryOp::Add, one, t);
                let a = self.mul_lit(a, 0.5);
                let tt = self.mul(t, t);
                let one2 = self.lit(1.0, x);
                let sech2 = self.bin(BinaryOp::Sub, one2, tt);
                let kxx = self.mul_lit(xx, 3.0 * k * c);
                let cc = self.lit(c, x);
                let du = self.bin(BinaryOp::Add, kxx, cc);
                let hx = self.mul_lit(x, 0.5);
                let b = self.mul(hx, sech2);
                let b = self.mul(b, du);
                let d = self.bin(BinaryOp::Add, a, b);
                self.mul(g, d)
            }
            UnaryOp::GeluErf => {
                // Phi(x) + x phi(x).
                let xs = self.mul_lit(x, FRAC_1_SQRT_2);
                let e = self.un(UnaryOp::Erf, xs);
                let one = self.lit(1.0, x);
                let cdf = self.bin(BinaryOp::Add, one, e);
                let cdf = self.mul_lit(cdf, 0.5);
                let xx = self.mul(x, x);
                let m = self.mul_lit(xx, -0.5);
                let pdf = self.un(UnaryOp::Exp, m);
                let pdf = self.mul_lit(pdf, 1.0 / (2.0 * PI).sqrt());
                let xp = self.mul(x, pdf);
                let d = self.bin(BinaryOp::Add, cdf, xp);
                self.mul(g, d)
            }
            UnaryOp::Silu => {
                // s (1 + x (1 - s)).
                let s = self.un(UnaryOp::Sigmoid, x);
                let one = self.lit(1.0, x);
                let q = self.bin(BinaryOp::Sub, one, s);
                let xq = self.mul(x, q);
                let one2 = self.lit(1.0, x);
                let r = self.bin(BinaryOp::Add, one2, xq);
                let d = self.mul(s, r);
                self.mul(g, d)
            }
            UnaryOp::Erf | UnaryOp::Erfc => {
                let xx = self.mul(x, x);
                let m = self.un(UnaryOp::Neg, xx);
                let e = self.un(UnaryOp::Exp, m);
                let c = 2.0 / PI.sqrt();
                let d = self.mul_lit(e, if u == UnaryOp::Erf { c } else { -c });
                self.mul(g, d)
            }
            UnaryOp::Softplus => {
                // PyTorch: 1 above the threshold 20, sigmoid(x) below.
                let s = self.un(UnaryOp::Sigmoid, x);
                let gs = self.mul(g, s);
                let above = self.cmp_lit(CmpOp::Gt, x, 20.0);
                let dt = self.tt(g).dtype;
                self.select(above, g, gs, dt)
            }
            _ => return None,
        })
    }

    fn binary(
        &mut self,
        b: BinaryOp,
        x1: NodeId,
        x2: NodeId,
        y: NodeId,
        g: NodeId,
    ) -> Result<Vec<(NodeId, NodeId)>, String> {
        let dt = self.tt(g).dtype;
        Ok(match b {
            BinaryOp::Add => vec![(x1, g), (x2, g)],
            BinaryOp::Sub => {
                let n = self.un(UnaryOp::Neg, g);
                vec![(x1, g), (x2, n)]
            }
            BinaryOp::Mul => {
                let (g1, g2) = (self.mul(g, x2), self.mul(g, x1));
                vec![(x1, g1), (x2, g2)]
            }
            BinaryOp::Div => {
                // PyTorch: -g a / (b b).
                let g1 = self.bin(BinaryOp::Div, g, x2);
                let bb = self.mul(x2, x2);
                let ab = self.bin(BinaryOp::Div, x1, bb);
                let gab = self.mul(g, ab);
                let g2 = self.un(UnaryOp::Neg, gab);
                vec![(x1, g1), (x2, g2)]
            }
            BinaryOp::Max | BinaryOp::Min => {
                // PyTorch: to the larger (smaller) operand, halved on ties.
                let wins = if b == BinaryOp::Max {
                    CmpOp::Gt
                } else {
                    CmpOp::Lt
                };
                let half = self.mul_lit(g, 0.5);
                let tie = self.cmp(CmpOp::Eq, x1, x2);
                let z = self.lit(0.0, g);
                let shared = self.select(tie, half, z, dt);
                let w1 = self.cmp(wins, x1, x2);
                let g1 = self.select(w1, g, shared, dt);
                let w2 = self.cmp(wins, x2, x1);
                let g2 = self.select(w2, g, shared, dt);
                vec![(x1, g1), (x2, g2)]
            }
            BinaryOp::Pow => {
                // PyTorch: g b a^(b - 1), zero where b == 0; g y ln(a),
                // zero where a == 0 (and b >= 0).
                let one = self.lit(1.0, x2);
                let bm1 = self.bin(BinaryOp::Sub, x2, one);
                let p = self.bin(BinaryOp::Pow, x1, bm1);
                let bp = self.mul(x2, p);
                let d1 = self.mul(g, bp);
                let b0 = self.cmp_lit(CmpOp::Eq, x2, 0.0);
                let z = self.lit(0.0, g);
                let g1 = self.select(b0, z, d1, dt);
                let l = self.un(UnaryOp::Log, x1);
                let yl = self.mul(y, l);
                let d2 = self.mul(g, yl);
                let a0 = self.cmp_lit(CmpOp::Eq, x1, 0.0);
                let z2 = self.lit(0.0, g);
                let g2 = self.select(a0, z2, d2, dt);
                vec![(x1, g1), (x2, g2)]
            }
            BinaryOp::LeakyRelu => {
                let pos = self.cmp_lit(CmpOp::Gt, x1, 0.0);
                let gs = self.mul(g, x2);
                let g1 = self.select(pos, g, gs, dt);
                let gx = self.mul(g, x1);
                let z = self.lit(0.0, g);
                let g2 = self.select(pos, z, gx, dt);
                vec![(x1, g1), (x2, g2)]
            }
            BinaryOp::Elu => {
                // Below zero: g (y + alpha) for x, g expm1(x) for alpha.
                let pos = self.cmp_lit(CmpOp::Gt, x1, 0.0);
                let ya = self.bin(BinaryOp::Add, y, x2);
                let gya = self.mul(g, ya);
                let g1 = self.select(pos, g, gya, dt);
                let e = self.un(UnaryOp::Expm1, x1);
                let ge = self.mul(g, e);
                let z = self.lit(0.0, g);
                let g2 = self.select(pos, z, ge, dt);
                vec![(x1, g1), (x2, g2)]
            }
            #[allow(unreachable_patterns)]
            _ => return Err("has no derivative rule".into()),
        })
    }
}

/// `op` with every operand `n` replaced by `m(n)`.
pub(crate) fn map_op(op: &Op, m: &dyn Fn(NodeId) -> NodeId) -> Op {
    let ia = |a: &IndexArg| match a {
        IndexArg::Node(n) => IndexArg::Node(m(*n)),
        c => c.clone(),
    };
    let mut op = op.clone();
    match &mut op {
        Op::Param(_) | Op::Lit { .. } | Op::Arange { .. } => {}
        Op::Unary(_, a) | Op::Cast(a, _) | Op::T(a) | Op::ToDevice(a, _) | Op::Expand(a) => {
            *a = m(*a)
        }
        Op::Permute(a, _) | Op::Transpose(a, ..) | Op::TupleGet(a, _) => *a = m(*a),
        Op::Binary(_, a, b)
        | Op::Compare(_, a, b)
        | Op::MatMul(a, b)
        | Op::Bmm(a, b)
        | Op::Dot(a, b) => {
            *a = m(*a);
            *b = m(*b);
        }
        Op::Where(c, a, b) => {
            *c = m(*c);
            *a = m(*a);
            *b = m(*b);
        }
        Op::AddCmul {
            input,
            t1,
            t2,
            value,
        } => {
            for x in [input, t1, t2, value] {
                *x = m(*x);
            }
        }
        Op::Kernel { args, .. }
        | Op::RowKernel { args, .. }
        | Op::Call { args, .. }
        | Op::External { args, .. } => {
            for a in args {
                *a = m(*a);
            }
        }
        Op::AddMmAct { bias, m1, m2, .. } => {
            for x in [bias, m1, m2] {
                *x = m(*x);
            }
        }
        Op::MatMulSumK { a, b, .. } => {
            *a = m(*a);
            *b = m(*b);
        }
        Op::AddMmGeluAux { bias, m1, m2 } => {
            for x in [bias, m1, m2] {
                *x = m(*x);
            }
        }
        Op::MatMulDGelu { a, b, pre, .. } => {
            for x in [a, b, pre] {
                *x = m(*x);
            }
        }
        Op::CrossEntropy { x, target, .. } => {
            *x = m(*x);
            *target = m(*target);
        }
        Op::CrossEntropyBackward {
            x, target, grad, ..
        } => {
            for a in [x, target, grad] {
                *a = m(*a);
            }
        }
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
            for x in [q, k, v, out, grad] {
                *x = m(*x);
            }
            for x in [mask, scale].into_iter().flatten() {
                *x = m(*x);
            }
        }
        Op::Cumsum { x, .. } | Op::Pool { x, .. } => *x = m(*x),
        Op::PoolBackward { x, grad, .. } => {
            *x = m(*x);
            *grad = m(*grad);
        }
        Op::Conv {
            x, weight, bias, ..
        } => {
            *x = m(*x);
            *weight = m(*weight);
            if let Some(b) = bias {
                *b = m(*b);
            }
        }
        Op::ConvBackward {
            x, weight, grad, ..
        } => {
            for a in [x, weight, grad] {
                *a = m(*a);
            }
        }
        Op::AddMm {
            bias,
            m1,
            m2,
            beta,
            alpha,
        } => {
            for x in [bias, m1, m2] {
                *x = m(*x);
            }
            for x in [beta, alpha].into_iter().flatten() {
                *x = m(*x);
            }
        }
        Op::Attention {
            q,
            k,
            v,
            mask,
            scale,
            ..
        } => {
            for x in [q, k, v] {
                *x = m(*x);
            }
            for x in [mask, scale].into_iter().flatten() {
                *x = m(*x);
            }
        }
        Op::Reshape { x, .. }
        | Op::Reduce { x, .. }
        | Op::Row { x, .. }
        | Op::Triangle { x, .. } => *x = m(*x),
        Op::Narrow { x, start, len, .. } => {
            *x = m(*x);
            *start = ia(start);
            *len = ia(len);
        }
        Op::Index { x, index, .. } => {
            *x = m(*x);
            *index = ia(index);
        }
        Op::Dropout { x, seed, .. } => {
            *x = m(*x);
            *seed = ia(seed);
        }
        Op::TopK { x, k, .. } => {
            *x = m(*x);
            *k = ia(k);
        }
        Op::Multinomial {
            x,
            num_samples,
            seed,
            ..
        } => {
            *x = m(*x);
            *num_samples = ia(num_samples);
            *seed = ia(seed);
        }
        Op::Norm {
            x,
            weight,
            bias,
            eps,
            ..
        } => {
            *x = m(*x);
            *weight = m(*weight);
            for y in [bias, eps].into_iter().flatten() {
                *y = m(*y);
            }
        }
        Op::Rope { x, cos, sin } => {
            for y in [x, cos, sin] {
                *y = m(*y);
            }
        }
        Op::NormBackward {
            x,
            weight,
            grad,
            eps,
            ..
        } => {
            for y in [x, weight, grad] {
                *y = m(*y);
            }
            if let Some(e) = eps {
                *e = m(*e);
            }
        }
        Op::Cat { xs, .. } => {
            for x in xs {
                *x = m(*x);
            }
        }
        Op::Embedding { ids, weight } => {
            *ids = m(*ids);
            *weight = m(*weight);
        }
        Op::Select { x, index, .. } => {
            *x = m(*x);
            *index = m(*index);
        }
        Op::ScatterAdd { x, index, src, .. } => {
            *x = m(*x);
            *index = m(*index);
            *src = m(*src);
        }
    }
    op
}

/// `f` with every call to a function of the invocation replaced by the
/// callee's body (its symbols, device and dtype parameters bound as at
/// the call), so that the backward passes through it.
fn inline_calls(f: &CheckedFn, checked: &[Option<CheckedFn>], depth: usize) -> CheckedFn {
    let mut g = Graph::default();
    let mut map: Vec<NodeId> = Vec::with_capacity(f.graph.nodes.len());
    let mut tuples: std::collections::HashMap<NodeId, Vec<NodeId>> = Default::default();
    for (id, node) in f.graph.nodes.iter().enumerate() {
        let callee = match &node.op {
            Op::Call { callee, .. } if depth < 64 => checked.get(*callee).and_then(|c| c.as_ref()),
            _ => None,
        };
        if let (
            Some(c),
            Op::Call {
                args,
                bindings,
                dtypes,
                ..
            },
        ) = (callee, &node.op)
        {
            let c = inline_calls(c, checked, depth + 1);
            let args: Vec<NodeId> = args.iter().map(|&a| map[a]).collect();
            let bind: std::collections::HashMap<&str, &Dim> =
                bindings.iter().map(|(s, d)| (s.as_str(), d)).collect();
            let mut devs: std::collections::HashMap<crate::ast::Name, crate::ast::Device> =
                Default::default();
            let mut dts: std::collections::HashMap<crate::ast::Name, Dt> = Default::default();
            for (i, p) in c.sig.params.iter().enumerate() {
                if let (ParamSig::Tensor(t), Some(Ty::Tensor(a))) =
                    (p, args.get(i).and_then(|&a| g.nodes.get(a)).map(|n| &n.ty))
                {
                    if let crate::ast::Device::Param(n) = t.device {
                        devs.entry(n).or_insert(a.device);
                    }
                    if let Dt::Param(n, _) = t.dtype {
                        dts.entry(n).or_insert(a.dtype);
                    }
                }
            }
            let dtype_params = c
                .sig
                .type_params
                .iter()
                .filter(|p| matches!(p.kind, crate::ast::TypeParamKind::DType(_)));
            for (p, d) in dtype_params.zip(dtypes) {
                dts.insert(p.name, *d);
            }
            let dim = |d: &Dim| {
                d.substitute(&|s| bind.get(s).map(|&d| d.clone()))
                    .unwrap_or_else(|| d.clone())
            };
            let dev = |d: crate::ast::Device| match d {
                crate::ast::Device::Param(n) => devs.get(&n).copied().unwrap_or(d),
                d => d,
            };
            let dt = |d: Dt| match d {
                Dt::Param(n, _) => dts.get(&n).copied().unwrap_or(d),
                d => d,
            };
            let tensor = |t: &TensorTy| TensorTy {
                device: dev(t.device),
                dtype: dt(t.dtype),
                dims: t.dims.iter().map(&dim).collect(),
            };
            let mut cmap: Vec<NodeId> = Vec::with_capacity(c.graph.nodes.len());
            for cn in &c.graph.nodes {
                if let Op::Param(i) = cn.op {
                    cmap.push(args.get(i).copied().unwrap_or(usize::MAX));
                    continue;
                }
                let mut op = map_op(&cn.op, &|n| cmap[n]);
                match &mut op {
                    Op::Cast(_, d) => *d = dt(*d),
                    Op::ToDevice(_, d) => *d = dev(*d),
                    Op::Arange { start } => *start = dim(start),
                    _ => {}
                }
                let ty = match &cn.ty {
                    Ty::Tensor(t) => Ty::Tensor(tensor(t)),
                    Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(&tensor).collect()),
                    t => t.clone(),
                };
                let id = g.push(Node {
                    op,
                    ty,
                    sp: cn.sp.clone(),
                    text: cn.text.clone(),
                });
                cmap.push(id);
            }
            let rets: Vec<NodeId> = c.ret.iter().map(|&r| cmap[r]).collect();
            if let Ty::Tuple(_) = node.ty {
                tuples.insert(id, rets);
                map.push(usize::MAX);
            } else {
                map.push(rets[0]);
            }
            continue;
        }
        if let Op::TupleGet(x, k) = node.op {
            if let Some(rets) = tuples.get(&x) {
                map.push(rets[k]);
                continue;
            }
        }
        let op = map_op(&node.op, &|n| map[n]);
        let new = g.push(Node { op, ..node.clone() });
        map.push(new);
    }
    CheckedFn {
        sig: f.sig.clone(),
        graph: g,
        params: f.params.iter().map(|&p| map[p]).collect(),
        ret: f.ret.iter().map(|&r| map[r]).collect(),
    }
}
