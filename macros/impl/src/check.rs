//! Inference of the device, dtype and shape of every expression of a
//! tensor function, and the errors the user sees when they do not fit.
//!
//! Shapes go through the shared rules of `tensorfn_core::rules` on
//! symbolic [`Dim`]s; devices and dtypes are checked here. Every error of a
//! function is collected (an expression whose type is unknown because of an
//! earlier error does not report again), each spanned on the offending
//! operand and naming the fix.

use crate::ast::*;
use crate::graph::*;
use crate::ir::Ir;
use crate::shape::{fmt_shape, numel, Dim};
use crate::sig::{declared_ty, ParamSig, Signature, SymKind, Symbols};
use std::collections::{HashMap, HashSet};
use tensorfn_core::{rules, DTypeKind, RuleError};
use tensorfn_kernels::{BinaryOp, ReduceOp, UnaryOp};

/// A checked tensor function.
#[derive(Debug)]
pub struct CheckedFn {
    /// Its signature.
    pub sig: Signature,
    /// Every value of the body.
    pub graph: Graph,
    /// The node of each parameter.
    pub params: Vec<NodeId>,
    /// The result node(s).
    pub ret: Vec<NodeId>,
}

/// What the checker knows about the kernels of the invocation.
pub struct KernelSig<'a> {
    /// The kernel as written.
    pub ast: &'a KernelFn,
    /// Its element program (`None` if it has errors).
    pub ir: Option<Ir>,
}

/// Checks one function body against all signatures of the invocation.
pub fn check_fn(
    f: &TensorFn,
    index: usize,
    sigs: &[Option<Signature>],
    kernels: &[KernelSig<'_>],
) -> Result<CheckedFn, Vec<syn::Error>> {
    let sig = sigs[index].clone().expect("checked only with a signature");
    let mut c = Checker {
        fn_name: f.name.to_string(),
        sig: &sig,
        sigs,
        kernels,
        graph: Graph::default(),
        env: HashMap::new(),
        errors: Vec::new(),
    };
    let mut params = Vec::new();
    for (i, p) in f.params.iter().enumerate() {
        let ty = match &sig.params[i] {
            ParamSig::Tensor(t) => Ty::Tensor(t.clone()),
            ParamSig::Scalar(k) => Ty::Scalar(ScalarTy::Of(*k)),
        };
        let id = c.graph.push(Node {
            op: Op::Param(i),
            ty,
            sp: Sp::of(&p.name),
            text: p.name.to_string(),
        });
        c.env.insert(p.name.to_string(), Binding::Node(id));
        params.push(id);
    }
    for stmt in &f.body.stmts {
        c.let_stmt(stmt);
    }
    let ret = c.result(&f.body.ret, f);
    let Checker { graph, errors, .. } = c;
    if errors.is_empty() {
        Ok(CheckedFn {
            sig,
            graph,
            params,
            ret,
        })
    } else {
        Err(errors)
    }
}

#[derive(Clone)]
enum Binding {
    Node(NodeId),
}

struct Checker<'s, 'k> {
    fn_name: String,
    sig: &'s Signature,
    sigs: &'s [Option<Signature>],
    kernels: &'s [KernelSig<'k>],
    graph: Graph,
    env: HashMap<String, Binding>,
    errors: Vec<syn::Error>,
}

/// A tensor operand: its node, the expression that used it and its type.
#[derive(Clone)]
struct Operand<'e> {
    id: NodeId,
    ex: &'e Expr,
    ty: TensorTy,
}

/// The device and dtype an operation runs with.
struct Agreed {
    ok: bool,
    device: Device,
    dtype: DTypeKind,
}

/// The elementwise ops callable by name (besides the unary ones).
fn binary_fn(name: &str) -> Option<BinaryOp> {
    match name {
        "maximum" => Some(BinaryOp::Max),
        "minimum" => Some(BinaryOp::Min),
        "pow" => Some(BinaryOp::Pow),
        _ => None,
    }
}

fn bin_op(op: BinOp) -> BinaryOp {
    match op {
        BinOp::Add => BinaryOp::Add,
        BinOp::Sub => BinaryOp::Sub,
        BinOp::Mul => BinaryOp::Mul,
        BinOp::Div => BinaryOp::Div,
    }
}

fn op_label(op: BinaryOp) -> &'static str {
    op.symbol().unwrap_or(op.name())
}

/// The value most operands agree on; ties go to values `prefer` accepts,
/// then to the anchor operand's value, then to the first operand's.
fn pick<T: PartialEq + Copy>(values: &[T], anchor: usize, prefer: impl Fn(T) -> bool) -> T {
    let count = |v: T| values.iter().filter(|&&w| w == v).count();
    let best = values.iter().map(|&v| count(v)).max().unwrap_or(0);
    let mut cands: Vec<T> = Vec::new();
    for &v in values {
        if count(v) == best && !cands.contains(&v) {
            cands.push(v);
        }
    }
    if cands.iter().any(|&v| prefer(v)) {
        cands.retain(|&v| prefer(v));
    }
    if cands.contains(&values[anchor]) {
        values[anchor]
    } else {
        cands[0]
    }
}

fn dim_name(d: usize) -> String {
    format!("dim {d}")
}

impl<'s, 'k> Checker<'s, 'k> {
    fn error(&mut self, sp: &Sp, msg: impl std::fmt::Display) {
        self.errors.push(sp.error(msg));
    }

    fn push(&mut self, op: Op, ty: Ty, e: &Expr) -> NodeId {
        self.graph.push(Node {
            op,
            ty,
            sp: e.sp.clone(),
            text: e.to_string(),
        })
    }

    fn ty(&self, id: NodeId) -> &Ty {
        &self.graph.nodes[id].ty
    }

    /// The tensor type of an operand, or an error if it is not a tensor.
    fn tensor<'e>(&mut self, id: NodeId, ex: &'e Expr, op: &str) -> Option<Operand<'e>> {
        match self.ty(id).clone() {
            Ty::Tensor(ty) => Some(Operand { id, ex, ty }),
            Ty::Error => None,
            Ty::Scalar(s) => {
                self.error(
                    &ex.sp,
                    format!("`{op}` needs a tensor here, but `{ex}` is a scalar ({s})"),
                );
                None
            }
            Ty::Tuple(ts) => {
                self.error(
                    &ex.sp,
                    format!(
                        "`{ex}` returns {} tensors: bind them first with `let ({}) = {ex};`",
                        ts.len(),
                        (0..ts.len())
                            .map(|i| format!("r{i}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
                None
            }
        }
    }

    /// Checks that tensor operands share one device and one dtype; returns
    /// whether they do and the device and dtype the operation runs with
    /// (what most operands have), so that checking goes on after an error.
    fn agree(&mut self, op: &str, ops: &[Operand<'_>], anchor: usize) -> Agreed {
        if ops.len() < 2 {
            return Agreed {
                ok: true,
                device: ops[0].ty.device,
                dtype: ops[0].ty.dtype,
            };
        }
        let mut ok = true;
        let devices: Vec<Device> = ops.iter().map(|o| o.ty.device).collect();
        let dev = pick(&devices, anchor, |d| d != Device::Cpu);
        let dev_witness = if devices[anchor] == dev {
            anchor
        } else {
            devices.iter().position(|&d| d == dev).expect("picked from these")
        };
        let mut seen = HashSet::new();
        for o in ops {
            if o.ty.device != dev && seen.insert((o.id, o.ex.to_string())) {
                ok = false;
                self.error(
                    &o.ex.sp,
                    format!(
                        "`{}` is on {} but `{op}` runs on {dev} ({}: {dev}): move it with `{}.to_device::<{dev}>()`",
                        o.ex,
                        o.ty.device,
                        ops[dev_witness].ex,
                        o.ex.receiver_text()
                    ),
                );
            }
        }
        let dtypes: Vec<DTypeKind> = ops.iter().map(|o| o.ty.dtype).collect();
        let any_float = dtypes.iter().any(|d| d.is_float());
        // Mixing ints and floats: the float side is what the user meant
        // (PyTorch would promote to it), so the ints get the cast.
        let floats: Vec<DTypeKind> = if any_float {
            dtypes.iter().copied().filter(|d| d.is_float()).collect()
        } else {
            dtypes.clone()
        };
        let anchor_f = if dtypes[anchor].is_float() || !any_float {
            floats
                .iter()
                .position(|&d| d == dtypes[anchor])
                .unwrap_or(0)
        } else {
            0
        };
        let dt = pick(&floats, anchor_f, |_| true);
        let mut seen = HashSet::new();
        for o in ops {
            if o.ty.dtype != dt && seen.insert((o.id, o.ex.to_string())) {
                ok = false;
                self.error(
                    &o.ex.sp,
                    format!(
                        "`{}` is {} but `{op}` here is {dt}: cast with `{}.cast::<{dt}>()`",
                        o.ex,
                        o.ty.dtype,
                        o.ex.receiver_text()
                    ),
                );
            }
        }
        Agreed {
            ok,
            device: dev,
            dtype: dt,
        }
    }

    /// The output type of an operation whose operands agreed (or were
    /// reported): their device and dtype with `dims`.
    fn out_ty(a: &Agreed, dims: Vec<Dim>) -> Ty {
        Ty::Tensor(TensorTy {
            device: a.device,
            dtype: a.dtype,
            dims,
        })
    }

    fn need_float(&mut self, op: &str, o: &Operand<'_>) -> bool {
        if o.ty.dtype.is_float() {
            return true;
        }
        self.error(
            &o.ex.sp,
            format!(
                "`{op}` needs a floating-point tensor but `{}` is {}: cast with `{}.cast::<f32>()`",
                o.ex,
                o.ty.dtype,
                o.ex.receiver_text()
            ),
        );
        false
    }

    fn need_numeric(&mut self, op: &str, o: &Operand<'_>) -> bool {
        if o.ty.dtype != DTypeKind::Bool {
            return true;
        }
        self.error(
            &o.ex.sp,
            format!(
                "`{op}` needs numbers but `{}` is bool: cast with `{}.cast::<u8>()` or `.cast::<f32>()`",
                o.ex,
                o.ex.receiver_text()
            ),
        );
        false
    }

    /// Reports a shape-rule error on the operand it names.
    fn rule_error(&mut self, e: RuleError, spans: &[&Sp]) {
        let sp = spans
            .get(e.operand)
            .or(spans.last())
            .copied()
            .cloned()
            .expect("at least one span");
        self.error(&sp, e.message);
    }

    // ----- statements -------------------------------------------------

    fn let_stmt(&mut self, stmt: &Let) {
        let annot = match &stmt.ty {
            Some(t) => match declared_ty(t, &self.sig.symbols) {
                Ok(ty) => Some(ty),
                Err(e) => {
                    self.errors.push(e);
                    None
                }
            },
            None => None,
        };
        let id = self.expr_hint(&stmt.init, annot.as_ref());
        if let (Some(want), Ty::Tensor(have)) = (&annot, self.ty(id).clone()) {
            if *want != have {
                let name = match &stmt.pat {
                    Pat::Ident(i) => i.to_string(),
                    Pat::Tuple(..) => stmt.init.to_string(),
                };
                self.error(
                    &stmt.init.sp,
                    format!("`{name}` is annotated {want} but its value is {have}"),
                );
            }
        }
        match &stmt.pat {
            Pat::Ident(i) => {
                if i != "_" {
                    self.env.insert(i.to_string(), Binding::Node(id));
                }
            }
            Pat::Tuple(names, sp) => {
                let n = match self.ty(id).clone() {
                    Ty::Tuple(ts) => ts,
                    Ty::Error => {
                        for n in names {
                            let e = self.push(Op::TupleGet(id, 0), Ty::Error, &stmt.init);
                            self.env.insert(n.to_string(), Binding::Node(e));
                        }
                        return;
                    }
                    _ => {
                        self.error(sp, format!("`{}` is one value, not a tuple", stmt.init));
                        for n in names {
                            self.env.insert(n.to_string(), Binding::Node(id));
                        }
                        return;
                    }
                };
                if n.len() != names.len() {
                    self.error(
                        sp,
                        format!(
                            "`{}` returns {} tensors but the pattern names {}",
                            stmt.init,
                            n.len(),
                            names.len()
                        ),
                    );
                }
                for (i, name) in names.iter().enumerate() {
                    let ty = n.get(i).cloned().map(Ty::Tensor).unwrap_or(Ty::Error);
                    let node = self.graph.push(Node {
                        op: Op::TupleGet(id, i),
                        ty,
                        sp: Sp::of(name),
                        text: name.to_string(),
                    });
                    if name != "_" {
                        self.env.insert(name.to_string(), Binding::Node(node));
                    }
                }
            }
        }
    }

    fn result(&mut self, e: &Expr, f: &TensorFn) -> Vec<NodeId> {
        let declared = self.sig.ret.clone();
        let parts: Vec<(NodeId, Expr)> = match (&e.kind, self.sig.tuple) {
            (ExprKind::Tuple(xs), true) => xs.iter().map(|x| (self.expr(x), x.clone())).collect(),
            (_, true) => {
                let id = self.expr(e);
                match self.ty(id).clone() {
                    Ty::Tuple(ts) => (0..ts.len())
                        .map(|i| {
                            let n = self.push(Op::TupleGet(id, i), Ty::Tensor(ts[i].clone()), e);
                            (n, e.clone())
                        })
                        .collect(),
                    Ty::Error => return vec![],
                    _ => {
                        self.error(
                            &e.sp,
                            format!(
                                "`{}` declares {} results: end the body with a tuple `(a, b, ..)`",
                                self.fn_name,
                                declared.len()
                            ),
                        );
                        return vec![];
                    }
                }
            }
            (_, false) => {
                let hint = declared.first();
                vec![(self.expr_hint(e, hint), e.clone())]
            }
        };
        if parts.len() != declared.len() {
            self.error(
                &e.sp,
                format!(
                    "`{}` declares {} results but the body gives {}",
                    self.fn_name,
                    declared.len(),
                    parts.len()
                ),
            );
            return vec![];
        }
        let mut ids = Vec::new();
        for ((id, ex), want) in parts.iter().zip(&declared) {
            ids.push(*id);
            let name = self.fn_name.clone();
            let Some(o) = self.tensor(*id, ex, &name) else {
                continue;
            };
            let mut msgs = Vec::new();
            if o.ty.device != want.device {
                msgs.push(format!(
                    "the result `{ex}` is on {} but `{name}` declares {}: move it with `{}.to_device::<{}>()` or change the return type",
                    o.ty.device, want.device, ex.receiver_text(), want.device
                ));
            }
            if o.ty.dtype != want.dtype {
                msgs.push(format!(
                    "the result `{ex}` is {} but `{name}` declares {}: cast it with `{}.cast::<{}>()` or change the return type",
                    o.ty.dtype, want.dtype, ex.receiver_text(), want.dtype
                ));
            }
            if o.ty.dims != want.dims {
                let detail = if o.ty.dims.len() != want.dims.len() {
                    format!("{} dims instead of {}", o.ty.dims.len(), want.dims.len())
                } else {
                    let k = (0..want.dims.len())
                        .find(|&k| o.ty.dims[k] != want.dims[k])
                        .expect("dims differ somewhere");
                    format!(
                        "dim {k} is {} but must be {}",
                        o.ty.dims[k], want.dims[k]
                    )
                };
                msgs.push(format!(
                    "the result `{ex}` has shape {} but `{name}` declares {}: {detail}",
                    fmt_shape(&o.ty.dims),
                    fmt_shape(&want.dims)
                ));
            }
            for m in msgs {
                self.error(&ex.sp, m);
            }
        }
        let _ = f;
        ids
    }

    // ----- expressions ------------------------------------------------

    fn expr(&mut self, e: &Expr) -> NodeId {
        self.expr_hint(e, None)
    }

    /// `hint`: the declared type of a `let` or of the result, which gives
    /// calls to functions outside the invocation their type.
    fn expr_hint(&mut self, e: &Expr, hint: Option<&TensorTy>) -> NodeId {
        match &e.kind {
            ExprKind::Var(v) => match self.env.get(&v.to_string()) {
                Some(Binding::Node(id)) => *id,
                None => {
                    let msg = if self.sig.symbols.is_generic(&v.to_string()) {
                        format!("`{v}` is a dim, not a value: use a literal or a `usize` parameter")
                    } else {
                        format!("`{v}` is not a parameter or a `let` of `{}`", self.fn_name)
                    };
                    self.error(&e.sp, msg);
                    self.push(Op::Param(usize::MAX), Ty::Error, e)
                }
            },
            ExprKind::Int(n) => self.push(
                Op::Lit {
                    value: *n as f64,
                    int: true,
                },
                Ty::Scalar(ScalarTy::IntLit),
                e,
            ),
            ExprKind::Float(x) => self.push(
                Op::Lit {
                    value: *x,
                    int: false,
                },
                Ty::Scalar(ScalarTy::FloatLit),
                e,
            ),
            ExprKind::Neg(x) => {
                let a = self.expr(x);
                self.unary(UnaryOp::Neg, a, x, e)
            }
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (self.expr(a), self.expr(b));
                self.binary(bin_op(*op), (x, a), (y, b), e)
            }
            ExprKind::Call { func, args } => self.call(func, args, e, hint),
            ExprKind::Method {
                recv,
                method,
                turbofish,
                args,
            } => self.method(recv, method, turbofish, args, e),
            ExprKind::Index { base, indices } => self.index(base, indices, e),
            ExprKind::Array(_) => {
                self.error(
                    &e.sp,
                    "a list `[..]` is only an argument: `cat([a, b], dim)`, `x.reshape([..])`, `x.permute([..])`",
                );
                self.push(Op::Param(usize::MAX), Ty::Error, e)
            }
            ExprKind::Tuple(_) => {
                self.error(&e.sp, "a tuple is only the result of a function with several results");
                self.push(Op::Param(usize::MAX), Ty::Error, e)
            }
        }
    }

    fn error_node(&mut self, e: &Expr) -> NodeId {
        self.push(Op::Param(usize::MAX), Ty::Error, e)
    }

    /// The common type of two scalars.
    fn scalar_join(&mut self, a: ScalarTy, b: ScalarTy, e: &Expr) -> Option<ScalarTy> {
        use ScalarTy::*;
        Some(match (a, b) {
            (FloatLit, FloatLit) | (FloatLit, IntLit) | (IntLit, FloatLit) => FloatLit,
            (IntLit, IntLit) => IntLit,
            (Of(k), IntLit) | (IntLit, Of(k)) => Of(k),
            (Of(k), FloatLit) | (FloatLit, Of(k)) if ScalarTy::Of(k).is_float() => Of(k),
            (Of(k), FloatLit) | (FloatLit, Of(k)) => {
                self.error(
                    &e.sp,
                    format!("a float literal with a {k} scalar in `{e}`: use an integer literal"),
                );
                return None;
            }
            (Of(x), Of(y)) if x == y => Of(x),
            (Of(x), Of(y)) => {
                self.error(
                    &e.sp,
                    format!("`{e}` mixes a {x} scalar with a {y} scalar: tensorfn never converts silently; give both parameters one type"),
                );
                return None;
            }
        })
    }

    /// Checks that a scalar can join a tensor of dtype `d` (converted to it).
    fn scalar_fits(&mut self, s: ScalarTy, sx: &Expr, t: &Operand<'_>, op: &str) -> bool {
        if t.ty.dtype == DTypeKind::Bool {
            self.error(
                &t.ex.sp,
                format!(
                    "`{op}` needs numbers but `{}` is bool: cast with `{}.cast::<f32>()`",
                    t.ex,
                    t.ex.receiver_text()
                ),
            );
            return false;
        }
        if s.is_float() && !t.ty.dtype.is_float() {
            self.error(
                &sx.sp,
                format!(
                    "`{sx}` is a float but `{}` is {}: tensorfn never converts silently; cast the tensor with `{}.cast::<f32>()` or use an integer",
                    t.ex,
                    t.ty.dtype,
                    t.ex.receiver_text()
                ),
            );
            return false;
        }
        if s == ScalarTy::Of(ScalarKind::DType(DTypeKind::Bool)) {
            self.error(&sx.sp, format!("`{sx}` is a bool: arithmetic needs a number"));
            return false;
        }
        true
    }

    fn unary(&mut self, op: UnaryOp, a: NodeId, ax: &Expr, e: &Expr) -> NodeId {
        match self.ty(a).clone() {
            Ty::Error => self.error_node(e),
            Ty::Scalar(s) => {
                if let Op::Lit { value, int } = self.graph.nodes[a].op {
                    let int = int && op == UnaryOp::Neg;
                    let v = op.eval_f64(value);
                    let ty = if int { ScalarTy::IntLit } else { ScalarTy::FloatLit };
                    return self.push(Op::Lit { value: v, int }, Ty::Scalar(ty), e);
                }
                if op.needs_float() && !s.is_float() {
                    self.error(&ax.sp, format!("`{}` needs a float, `{ax}` is {s}", op.name()));
                    return self.error_node(e);
                }
                self.push(Op::Unary(op, a), Ty::Scalar(s), e)
            }
            _ => {
                let Some(o) = self.tensor(a, ax, op.name()) else {
                    return self.error_node(e);
                };
                let ok = if op.needs_float() {
                    self.need_float(op.name(), &o)
                } else {
                    self.need_numeric(op.name(), &o)
                };
                if !ok {
                    return self.error_node(e);
                }
                self.push(Op::Unary(op, a), Ty::Tensor(o.ty), e)
            }
        }
    }

    fn binary(&mut self, op: BinaryOp, a: (NodeId, &Expr), b: (NodeId, &Expr), e: &Expr) -> NodeId {
        let label = op_label(op);
        let (ta, tb) = (self.ty(a.0).clone(), self.ty(b.0).clone());
        match (&ta, &tb) {
            (Ty::Error, _) | (_, Ty::Error) => self.error_node(e),
            (Ty::Scalar(sa), Ty::Scalar(sb)) => {
                let Some(s) = self.scalar_join(*sa, *sb, e) else {
                    return self.error_node(e);
                };
                if let (Op::Lit { value: x, int: ix }, Op::Lit { value: y, int: iy }) =
                    (&self.graph.nodes[a.0].op, &self.graph.nodes[b.0].op)
                {
                    let int = *ix && *iy && op != BinaryOp::Pow;
                    let mut v = op.eval_f64(*x, *y);
                    if int {
                        v = if op == BinaryOp::Div && *y == 0.0 { 0.0 } else { v.trunc() };
                    }
                    return self.push(Op::Lit { value: v, int }, Ty::Scalar(s), e);
                }
                self.push(Op::Binary(op, a.0, b.0), Ty::Scalar(s), e)
            }
            (Ty::Scalar(s), _) | (_, Ty::Scalar(s)) => {
                let (sx, tx, tid) = if matches!(ta, Ty::Scalar(_)) {
                    (a.1, b.1, b.0)
                } else {
                    (b.1, a.1, a.0)
                };
                let Some(o) = self.tensor(tid, tx, label) else {
                    return self.error_node(e);
                };
                if !self.scalar_fits(*s, sx, &o, label) {
                    return self.error_node(e);
                }
                if op == BinaryOp::Pow && !self.need_float("pow", &o) {
                    return self.error_node(e);
                }
                self.push(Op::Binary(op, a.0, b.0), Ty::Tensor(o.ty), e)
            }
            _ => {
                let (Some(oa), Some(ob)) = (self.tensor(a.0, a.1, label), self.tensor(b.0, b.1, label))
                else {
                    return self.error_node(e);
                };
                let agreed = self.agree(label, &[oa.clone(), ob.clone()], 0);
                let mut ok = true;
                if agreed.ok && oa.ty.dtype == DTypeKind::Bool {
                    ok = self.need_numeric(label, &oa);
                }
                if agreed.ok && ok && op == BinaryOp::Pow {
                    ok = self.need_float("pow", &oa);
                }
                let sa = a.1.to_string();
                let sb = b.1.to_string();
                let dims = match rules::broadcast(label, &[(&sa, &oa.ty.dims), (&sb, &ob.ty.dims)]) {
                    Ok(d) => Some(d),
                    Err(err) => {
                        self.rule_error(err, &[&a.1.sp, &b.1.sp]);
                        None
                    }
                };
                match (ok, dims) {
                    (true, Some(dims)) => {
                        self.push(Op::Binary(op, a.0, b.0), Self::out_ty(&agreed, dims), e)
                    }
                    _ => self.error_node(e),
                }
            }
        }
    }

    /// Evaluates positional and `name = value` arguments against a list of
    /// parameter names; `required` of them must be present.
    fn bind_args<'e>(
        &mut self,
        op: &str,
        args: &'e [Arg],
        names: &[&str],
        required: usize,
        e: &Expr,
    ) -> Option<Vec<Option<&'e Expr>>> {
        let mut out: Vec<Option<&Expr>> = vec![None; names.len()];
        let mut ok = true;
        let mut pos = 0;
        for a in args {
            match &a.name {
                None => {
                    if pos >= names.len() {
                        self.error(
                            &a.value.sp,
                            format!("`{op}` takes at most {} arguments ({})", names.len(), names.join(", ")),
                        );
                        ok = false;
                    } else {
                        out[pos] = Some(&a.value);
                    }
                    pos += 1;
                }
                Some(n) => match names.iter().position(|x| n == x) {
                    Some(i) if out[i].is_none() => out[i] = Some(&a.value),
                    Some(_) => {
                        self.error(&a.value.sp, format!("`{n}` is given twice"));
                        ok = false;
                    }
                    None => {
                        self.error(
                            &Sp::of(n),
                            format!("`{op}` has no argument `{n}`: its arguments are {}", names.join(", ")),
                        );
                        ok = false;
                    }
                },
            }
        }
        for (i, n) in names.iter().enumerate().take(required) {
            if out[i].is_none() {
                self.error(&e.sp, format!("`{op}` is missing its argument `{n}` ({})", names.join(", ")));
                ok = false;
            }
        }
        ok.then_some(out)
    }

    /// An integer literal argument (a dim number), possibly negative.
    fn int_arg(&mut self, x: &Expr, what: &str) -> Option<isize> {
        match &x.kind {
            ExprKind::Int(n) => Some(*n as isize),
            ExprKind::Neg(inner) => match inner.kind {
                ExprKind::Int(n) => Some(-(n as isize)),
                _ => {
                    self.error(&x.sp, format!("{what} is an integer literal"));
                    None
                }
            },
            _ => {
                self.error(&x.sp, format!("{what} is an integer literal"));
                None
            }
        }
    }

    fn dim_arg(&mut self, x: &Expr, op: &str, o: &Operand<'_>) -> Option<usize> {
        let d = self.int_arg(x, &format!("the dim of `{op}`"))?;
        match rules::normalize_dim(op, &o.ex.to_string(), d, o.ty.dims.len()) {
            Ok(d) => Some(d),
            Err(err) => {
                self.error(&x.sp, err.message);
                None
            }
        }
    }

    /// A scalar argument that must be a `usize` at run time (an index, a
    /// start, a length): a literal or a `usize` expression.
    fn index_arg(&mut self, x: &Expr, what: &str) -> Option<IndexArg> {
        if let ExprKind::Int(n) = x.kind {
            return Some(IndexArg::Const(n as usize));
        }
        let id = self.expr(x);
        match self.ty(id).clone() {
            Ty::Error => None,
            Ty::Scalar(ScalarTy::Of(ScalarKind::Usize)) => Some(IndexArg::Node(id)),
            Ty::Scalar(ScalarTy::IntLit) => match self.graph.nodes[id].op {
                Op::Lit { value, .. } if value >= 0.0 => Some(IndexArg::Const(value as usize)),
                _ => {
                    self.error(&x.sp, format!("{what} cannot be negative here"));
                    None
                }
            },
            other => {
                let found = match other {
                    Ty::Scalar(s) => s.to_string(),
                    _ => "a tensor".to_string(),
                };
                self.error(
                    &x.sp,
                    format!("{what} is a `usize` (a literal or a `usize` parameter), `{x}` is {found}"),
                );
                None
            }
        }
    }

    fn call(&mut self, func: &syn::Path, args: &[Arg], e: &Expr, hint: Option<&TensorTy>) -> NodeId {
        let name = match func.get_ident() {
            Some(i) => i.to_string(),
            None => return self.external(func, args, e, hint),
        };
        if let Some(k) = self.kernels.iter().position(|k| k.ast.name == name) {
            return self.kernel_call(k, args, e);
        }
        if let Some(f) = self
            .sigs
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.name == name))
        {
            return self.fn_call(f, args, e);
        }
        if self.sigs.iter().any(|s| s.is_none()) && !is_builtin(&name) {
            // A function of this invocation whose signature has errors:
            // those are reported already.
            return self.error_node(e);
        }
        if let Some(op) = UnaryOp::from_name(&name) {
            let Some(a) = self.bind_args(&name, args, &["input"], 1, e) else {
                return self.error_node(e);
            };
            let x = a[0].expect("required");
            let id = self.expr(x);
            return self.unary(op, id, x, e);
        }
        if let Some(op) = binary_fn(&name) {
            let Some(a) = self.bind_args(&name, args, &["input", "other"], 2, e) else {
                return self.error_node(e);
            };
            let (x, y) = (a[0].expect("required"), a[1].expect("required"));
            let (ix, iy) = (self.expr(x), self.expr(y));
            return self.binary(op, (ix, x), (iy, y), e);
        }
        match name.as_str() {
            "matmul" | "mm" | "bmm" | "dot" => {
                let Some(a) = self.bind_args(&name, args, &["input", "other"], 2, e) else {
                    return self.error_node(e);
                };
                let (x, y) = (a[0].expect("required"), a[1].expect("required"));
                let (ix, iy) = (self.expr(x), self.expr(y));
                self.matmul(&name, (ix, x), (iy, y), e)
            }
            "addmm" => self.addmm(args, e),
            "cat" => self.cat(args, e),
            "addcmul" => self.addcmul(args, e),
            "softmax" | "log_softmax" => {
                let Some(a) = self.bind_args(&name, args, &["input", "dim"], 2, e) else {
                    return self.error_node(e);
                };
                self.softmax(&name, a[0].expect("required"), a[1].expect("required"), e)
            }
            _ => self.external(func, args, e, hint),
        }
    }

    fn matmul(&mut self, name: &str, (ix, x): (NodeId, &Expr), (iy, y): (NodeId, &Expr), e: &Expr) -> NodeId {
        let (Some(a), Some(b)) = (self.tensor(ix, x, name), self.tensor(iy, y, name)) else {
            return self.error_node(e);
        };
        let agreed = self.agree(name, &[a.clone(), b.clone()], 0);
        let ok = !agreed.ok || self.need_float(name, &a);
        let (sa, sb) = (x.to_string(), y.to_string());
        let (da, db) = ((sa.as_str(), &a.ty.dims[..]), (sb.as_str(), &b.ty.dims[..]));
        let rule = match name {
            "mm" => rules::mm(name, da, db),
            "bmm" => rules::bmm(name, da, db),
            "dot" => rules::dot(name, da, db),
            _ => rules::matmul(name, da, db),
        };
        let dims = match rule {
            Ok(d) => d,
            Err(err) => {
                self.rule_error(err, &[&x.sp, &y.sp]);
                return self.error_node(e);
            }
        };
        if !ok {
            return self.error_node(e);
        }
        let op = match name {
            "bmm" => Op::Bmm(ix, iy),
            "dot" => Op::Dot(ix, iy),
            _ => Op::MatMul(ix, iy),
        };
        self.push(op, Self::out_ty(&agreed, dims), e)
    }

    fn scalar_operand(&mut self, x: &Expr, t: &Operand<'_>, op: &str) -> Option<NodeId> {
        let id = self.expr(x);
        match self.ty(id).clone() {
            Ty::Scalar(s) => self.scalar_fits(s, x, t, op).then_some(id),
            Ty::Error => None,
            _ => {
                self.error(&x.sp, format!("`{op}` takes a scalar here, `{x}` is a tensor"));
                None
            }
        }
    }

    fn addmm(&mut self, args: &[Arg], e: &Expr) -> NodeId {
        let Some(a) = self.bind_args("addmm", args, &["input", "mat1", "mat2", "beta", "alpha"], 3, e)
        else {
            return self.error_node(e);
        };
        let xs = [a[0].expect("required"), a[1].expect("required"), a[2].expect("required")];
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        let ops: Vec<Option<Operand>> = (0..3).map(|i| self.tensor(ids[i], xs[i], "addmm")).collect();
        if ops.iter().any(|o| o.is_none()) {
            return self.error_node(e);
        }
        let ops: Vec<Operand> = ops.into_iter().map(|o| o.expect("checked")).collect();
        let agreed = self.agree("addmm", &ops, 1);
        let ok = !agreed.ok || self.need_float("addmm", &ops[1]);
        let names: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        let dims = match rules::addmm(
            "addmm",
            (&names[0], &ops[0].ty.dims),
            (&names[1], &ops[1].ty.dims),
            (&names[2], &ops[2].ty.dims),
        ) {
            Ok(d) => Some(d),
            Err(err) => {
                self.rule_error(err, &[&xs[0].sp, &xs[1].sp, &xs[2].sp]);
                None
            }
        };
        let scale = |i: usize, me: &mut Self| -> Result<Option<NodeId>, ()> {
            match a[i] {
                None => Ok(None),
                Some(x) => me.scalar_operand(x, &ops[1], "addmm").map(Some).ok_or(()),
            }
        };
        let beta = scale(3, self);
        let alpha = scale(4, self);
        match (ok, dims, beta, alpha) {
            (true, Some(dims), Ok(beta), Ok(alpha)) => self.push(
                Op::AddMm {
                    bias: ids[0],
                    m1: ids[1],
                    m2: ids[2],
                    beta,
                    alpha,
                },
                Self::out_ty(&agreed, dims),
                e,
            ),
            _ => self.error_node(e),
        }
    }

    fn cat(&mut self, args: &[Arg], e: &Expr) -> NodeId {
        let Some(a) = self.bind_args("cat", args, &["tensors", "dim"], 1, e) else {
            return self.error_node(e);
        };
        let list = a[0].expect("required");
        let ExprKind::Array(xs) = &list.kind else {
            self.error(&list.sp, "`cat` takes a list of tensors: `cat([a, b], dim)`");
            return self.error_node(e);
        };
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        let ops: Vec<Option<Operand>> = ids
            .iter()
            .zip(xs)
            .map(|(&id, x)| self.tensor(id, x, "cat"))
            .collect();
        if ops.is_empty() {
            self.error(&list.sp, "`cat` needs at least one tensor");
            return self.error_node(e);
        }
        if ops.iter().any(|o| o.is_none()) {
            return self.error_node(e);
        }
        let ops: Vec<Operand> = ops.into_iter().map(|o| o.expect("checked")).collect();
        let agreed = self.agree("cat", &ops, 0);
        let dim = match a[1] {
            None => Some(0),
            Some(d) => self.dim_arg(d, "cat", &ops[0]),
        };
        let Some(dim) = dim else {
            return self.error_node(e);
        };
        let names: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        let operands: Vec<(&str, &[Dim])> = names
            .iter()
            .zip(&ops)
            .map(|(n, o)| (n.as_str(), &o.ty.dims[..]))
            .collect();
        let spans: Vec<&Sp> = xs.iter().map(|x| &x.sp).collect();
        match rules::cat("cat", &operands, dim) {
            Ok(dims) => self.push(Op::Cat { xs: ids, dim }, Self::out_ty(&agreed, dims), e),
            Err(err) => {
                self.rule_error(err, &spans);
                self.error_node(e)
            }
        }
    }

    fn addcmul(&mut self, args: &[Arg], e: &Expr) -> NodeId {
        let Some(a) = self.bind_args("addcmul", args, &["input", "tensor1", "tensor2", "value"], 3, e)
        else {
            return self.error_node(e);
        };
        let xs = [a[0].expect("required"), a[1].expect("required"), a[2].expect("required")];
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        // The old PyTorch order `addcmul(input, value, t1, t2)`.
        if matches!(self.ty(ids[1]), Ty::Scalar(_)) {
            self.error(
                &xs[1].sp,
                format!("`addcmul` takes (input, tensor1, tensor2, value): move the scalar `{}` to the end", xs[1]),
            );
            return self.error_node(e);
        }
        let ops: Vec<Option<Operand>> = (0..3).map(|i| self.tensor(ids[i], xs[i], "addcmul")).collect();
        if ops.iter().any(|o| o.is_none()) {
            return self.error_node(e);
        }
        let ops: Vec<Operand> = ops.into_iter().map(|o| o.expect("checked")).collect();
        let agreed = self.agree("addcmul", &ops, 0);
        let ok = !agreed.ok || self.need_numeric("addcmul", &ops[0]);
        let value = match a[3] {
            Some(v) => self.scalar_operand(v, &ops[0], "addcmul"),
            None => Some(self.push(
                Op::Lit {
                    value: 1.0,
                    int: true,
                },
                Ty::Scalar(ScalarTy::IntLit),
                e,
            )),
        };
        let names: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
        let dims = match rules::broadcast(
            "addcmul",
            &[
                (&names[0], &ops[0].ty.dims),
                (&names[1], &ops[1].ty.dims),
                (&names[2], &ops[2].ty.dims),
            ],
        ) {
            Ok(d) => Some(d),
            Err(err) => {
                self.rule_error(err, &[&xs[0].sp, &xs[1].sp, &xs[2].sp]);
                None
            }
        };
        match (ok, dims, value) {
            (true, Some(dims), Some(value)) => self.push(
                Op::AddCmul {
                    input: ids[0],
                    t1: ids[1],
                    t2: ids[2],
                    value,
                },
                Self::out_ty(&agreed, dims),
                e,
            ),
            _ => self.error_node(e),
        }
    }

    fn softmax(&mut self, name: &str, x: &Expr, d: &Expr, e: &Expr) -> NodeId {
        let id = self.expr(x);
        let Some(o) = self.tensor(id, x, name) else {
            return self.error_node(e);
        };
        let Some(dim) = self.dim_arg(d, name, &o) else {
            return self.error_node(e);
        };
        if !self.need_float(name, &o) {
            return self.error_node(e);
        }
        let log = name == "log_softmax";
        self.push(Op::Softmax { x: id, dim, log }, Ty::Tensor(o.ty), e)
    }

    fn kernel_call(&mut self, k: usize, args: &[Arg], e: &Expr) -> NodeId {
        let kernel = self.kernels[k].ast;
        let name = kernel.name.to_string();
        let pnames: Vec<String> = kernel.params.iter().map(|p| p.0.to_string()).collect();
        let pref: Vec<&str> = pnames.iter().map(|s| s.as_str()).collect();
        let Some(a) = self.bind_args(&name, args, &pref, pref.len(), e) else {
            return self.error_node(e);
        };
        let xs: Vec<&Expr> = a.iter().map(|x| x.expect("required")).collect();
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        let mut ok = self.kernels[k].ir.is_some();
        let mut tensors: Vec<Operand> = Vec::new();
        for (i, (&id, x)) in ids.iter().zip(&xs).enumerate() {
            let want = kernel.params[i].1;
            match self.ty(id).clone() {
                Ty::Error => ok = false,
                Ty::Scalar(s) => {
                    if s.is_float() && !want.is_float() || s == ScalarTy::Of(ScalarKind::DType(DTypeKind::Bool)) {
                        self.error(&x.sp, format!("`{name}` takes {want} for `{}`, `{x}` is {s}", pnames[i]));
                        ok = false;
                    } else if let ScalarTy::Of(ScalarKind::DType(d)) = s {
                        if d != want {
                            self.error(
                                &x.sp,
                                format!("`{x}` is {d} but `{name}` takes {want} for `{}`", pnames[i]),
                            );
                            ok = false;
                        }
                    }
                }
                _ => {
                    let Some(o) = self.tensor(id, x, &name) else {
                        ok = false;
                        continue;
                    };
                    if o.ty.dtype != want {
                        self.error(
                            &x.sp,
                            format!(
                                "`{x}` is {} but `{name}` takes {want} for `{}`: cast with `{}.cast::<{want}>()`",
                                o.ty.dtype,
                                pnames[i],
                                x.receiver_text()
                            ),
                        );
                        ok = false;
                    }
                    tensors.push(o);
                }
            }
        }
        let ret = kernel.ret.0;
        if tensors.is_empty() {
            if !ok {
                return self.error_node(e);
            }
            return self.push(
                Op::Kernel { kernel: k, args: ids },
                Ty::Scalar(ScalarTy::Of(ScalarKind::DType(ret))),
                e,
            );
        }
        // Dtypes are fixed per parameter; only devices must agree.
        let devices: Vec<Device> = tensors.iter().map(|o| o.ty.device).collect();
        let dev = pick(&devices, 0, |d| d != Device::Cpu);
        for o in &tensors {
            if o.ty.device != dev {
                self.error(
                    &o.ex.sp,
                    format!(
                        "`{}` is on {} but `{name}` runs on {dev}: move it with `{}.to_device::<{dev}>()`",
                        o.ex,
                        o.ty.device,
                        o.ex.receiver_text()
                    ),
                );
                ok = false;
            }
        }
        let names: Vec<String> = tensors.iter().map(|o| o.ex.to_string()).collect();
        let operands: Vec<(&str, &[Dim])> = names
            .iter()
            .zip(&tensors)
            .map(|(n, o)| (n.as_str(), &o.ty.dims[..]))
            .collect();
        let spans: Vec<&Sp> = tensors.iter().map(|o| &o.ex.sp).collect();
        let dims = match rules::broadcast(&name, &operands) {
            Ok(d) => d,
            Err(err) => {
                self.rule_error(err, &spans);
                return self.error_node(e);
            }
        };
        if !ok {
            return self.error_node(e);
        }
        self.push(
            Op::Kernel { kernel: k, args: ids },
            Ty::Tensor(TensorTy {
                device: dev,
                dtype: ret,
                dims,
            }),
            e,
        )
    }

    fn fn_call(&mut self, f: usize, args: &[Arg], e: &Expr) -> NodeId {
        let sig = self.sigs[f].clone().expect("found by signature");
        let pref: Vec<&str> = sig.param_names.iter().map(|s| s.as_str()).collect();
        let Some(a) = self.bind_args(&sig.name, args, &pref, pref.len(), e) else {
            return self.error_node(e);
        };
        let xs: Vec<&Expr> = a.iter().map(|x| x.expect("required")).collect();
        let ids: Vec<NodeId> = xs.iter().map(|x| self.expr(x)).collect();
        let mut ok = true;
        let mut bind: HashMap<String, Dim> = HashMap::new();
        // `usize` parameters that size dims bind their names first.
        for (i, p) in sig.params.iter().enumerate() {
            if let ParamSig::Scalar(kind) = p {
                let pname = &sig.param_names[i];
                match self.ty(ids[i]).clone() {
                    Ty::Error => ok = false,
                    Ty::Scalar(s) => {
                        let fits = match kind {
                            ScalarKind::Usize => matches!(s, ScalarTy::IntLit | ScalarTy::Of(ScalarKind::Usize)),
                            ScalarKind::DType(d) => match s {
                                ScalarTy::Of(k) => k == *kind,
                                ScalarTy::IntLit => *d != DTypeKind::Bool,
                                ScalarTy::FloatLit => d.is_float(),
                            },
                        };
                        if !fits {
                            self.error(
                                &xs[i].sp,
                                format!("`{}` takes {kind} for `{pname}`, `{}` is {s}", sig.name, xs[i]),
                            );
                            ok = false;
                            continue;
                        }
                        if *kind == ScalarKind::Usize {
                            match &self.graph.nodes[ids[i]].op {
                                Op::Lit { value, .. } => {
                                    bind.insert(pname.clone(), Dim::constant(*value as i64));
                                }
                                Op::Param(j) if sig_scalar_is_symbol(self.sig, *j) => {
                                    bind.insert(pname.clone(), Dim::sym(&self.sig.param_names[*j]));
                                }
                                _ => {}
                            }
                        }
                    }
                    _ => {
                        self.error(
                            &xs[i].sp,
                            format!("`{}` takes the scalar {kind} for `{pname}`, `{}` is a tensor", sig.name, xs[i]),
                        );
                        ok = false;
                    }
                }
            }
        }
        let mut tensor_args: Vec<(usize, Operand)> = Vec::new();
        for (i, p) in sig.params.iter().enumerate() {
            let ParamSig::Tensor(want) = p else { continue };
            let Some(o) = self.tensor(ids[i], xs[i], &sig.name) else {
                ok = false;
                continue;
            };
            let pname = &sig.param_names[i];
            if o.ty.device != want.device {
                self.error(
                    &xs[i].sp,
                    format!(
                        "`{}` is on {} but `{}` takes `{pname}` on {}: move it with `{}.to_device::<{}>()`",
                        xs[i], o.ty.device, sig.name, want.device, xs[i].receiver_text(), want.device
                    ),
                );
                ok = false;
            }
            if o.ty.dtype != want.dtype {
                self.error(
                    &xs[i].sp,
                    format!(
                        "`{}` is {} but `{}` takes `{pname}` as {}: cast with `{}.cast::<{}>()`",
                        xs[i], o.ty.dtype, sig.name, want.dtype, xs[i].receiver_text(), want.dtype
                    ),
                );
                ok = false;
            }
            if o.ty.dims.len() != want.dims.len() {
                self.error(
                    &xs[i].sp,
                    format!(
                        "`{}` takes `{pname}` with shape {} ({} dims) but `{}` is {} ({} dims)",
                        sig.name,
                        fmt_shape(&want.dims),
                        want.dims.len(),
                        xs[i],
                        fmt_shape(&o.ty.dims),
                        o.ty.dims.len()
                    ),
                );
                ok = false;
                continue;
            }
            for (w, h) in want.dims.iter().zip(&o.ty.dims) {
                if let Some(s) = w.as_symbol() {
                    bind.entry(s.to_string()).or_insert_with(|| h.clone());
                }
            }
            tensor_args.push((i, o));
        }
        for (i, o) in &tensor_args {
            let ParamSig::Tensor(want) = &sig.params[*i] else { unreachable!("a tensor parameter") };
            let pname = &sig.param_names[*i];
            for (k, (w, h)) in want.dims.iter().zip(&o.ty.dims).enumerate() {
                let expected = w.substitute(&|s| bind.get(s).cloned());
                if expected.as_ref() != Some(h) {
                    let exp_txt = expected.map(|d| d.to_string()).unwrap_or_else(|| w.to_string());
                    let binds: Vec<String> = w
                        .symbols()
                        .iter()
                        .filter_map(|s| bind.get(&**s).map(|v| format!("{s} = {v}")))
                        .collect();
                    let note = if binds.is_empty() || w.as_symbol().is_some() {
                        String::new()
                    } else {
                        format!(" (with {})", binds.join(", "))
                    };
                    self.error(
                        &o.ex.sp,
                        format!(
                            "`{}` takes `{pname}` with shape {} but `{}` is {}: {} is {} but must be {exp_txt}{note}",
                            sig.name,
                            fmt_shape(&want.dims),
                            o.ex,
                            fmt_shape(&o.ty.dims),
                            dim_name(k),
                            h
                        ),
                    );
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            return self.error_node(e);
        }
        // Const generics become turbofish arguments: a literal or one of
        // the caller's own const generics.
        let mut generics = Vec::new();
        for g in &sig.generics {
            match bind.get(g) {
                Some(d) if d.as_constant().is_some() => generics.push(d.clone()),
                Some(d) if d.as_symbol().is_some_and(|s| self.sig.symbols.is_generic(s)) => {
                    generics.push(d.clone())
                }
                Some(d) => {
                    self.error(
                        &e.sp,
                        format!(
                            "`{}` needs its const generic `{g}` at compile time, but here it is `{d}`, which is not a literal or a const generic of `{}`: make it one (`<const {d}: usize>`) if it is a single name",
                            sig.name, self.fn_name
                        ),
                    );
                    return self.error_node(e);
                }
                None => {
                    self.error(
                        &e.sp,
                        format!("cannot infer the const generic `{g}` of `{}` from its arguments", sig.name),
                    );
                    return self.error_node(e);
                }
            }
        }
        let inst = |d: &Dim| -> DimTy {
            if d.as_constant().is_some() {
                return DimTy::Const(d.clone());
            }
            match d.as_symbol() {
                Some(s) if sig.symbols.is_generic(s) => DimTy::Const(bind[s].clone()),
                _ => DimTy::Dyn,
            }
        };
        let param_tys = sig
            .params
            .iter()
            .map(|p| match p {
                ParamSig::Tensor(t) => Some(t.dims.iter().map(inst).collect()),
                ParamSig::Scalar(_) => None,
            })
            .collect();
        let ret_tys = sig.ret.iter().map(|t| t.dims.iter().map(inst).collect()).collect();
        let rets: Vec<TensorTy> = sig
            .ret
            .iter()
            .map(|t| TensorTy {
                device: t.device,
                dtype: t.dtype,
                dims: t
                    .dims
                    .iter()
                    .map(|d| d.substitute(&|s| bind.get(s).cloned()).expect("result dims are bound by parameters"))
                    .collect(),
            })
            .collect();
        let ty = if sig.tuple {
            Ty::Tuple(rets)
        } else {
            Ty::Tensor(rets.into_iter().next().expect("one result"))
        };
        self.push(
            Op::Call {
                callee: f,
                args: ids,
                generics,
                bindings: {
                    let mut b: Vec<(String, Dim)> = bind.into_iter().collect();
                    b.sort_by(|x, y| x.0.cmp(&y.0));
                    b
                },
                param_tys,
                ret_tys,
            },
            ty,
            e,
        )
    }

    fn external(&mut self, func: &syn::Path, args: &[Arg], e: &Expr, hint: Option<&TensorTy>) -> NodeId {
        let mut ids = Vec::new();
        for a in args {
            if let Some(n) = &a.name {
                self.error(&Sp::of(n), "named arguments are only for tensorfn operations");
            }
            ids.push(self.expr(&a.value));
        }
        match hint {
            Some(t) => self.push(
                Op::External {
                    path: func.clone(),
                    args: ids,
                },
                Ty::Tensor(t.clone()),
                e,
            ),
            None => {
                let name = path_text(func);
                self.error(
                    &e.sp,
                    format!(
                        "`{name}` is not a tensorfn operation or a function of this `tensor_fn!`: if it is a tensor function defined elsewhere, annotate its result: `let y: Tensor<Device, DType, [dims]> = {e};`"
                    ),
                );
                self.error_node(e)
            }
        }
    }

    fn method(&mut self, recv: &Expr, method: &syn::Ident, turbofish: &[syn::Type], args: &[Arg], e: &Expr) -> NodeId {
        let name = method.to_string();
        let rid = self.expr(recv);
        if let Some(op) = UnaryOp::from_name(&name) {
            if !args.is_empty() {
                self.error(&e.sp, format!("`{name}` takes no arguments"));
            }
            return self.unary(op, rid, recv, e);
        }
        if matches!(self.ty(rid), Ty::Error) {
            // Still evaluate the arguments for their own errors.
            for a in args {
                if !matches!(a.value.kind, ExprKind::Array(_) | ExprKind::Int(_) | ExprKind::Neg(_)) {
                    self.expr(&a.value);
                }
            }
            return self.error_node(e);
        }
        let Some(o) = self.tensor(rid, recv, &name) else {
            return self.error_node(e);
        };
        let no_turbofish = |me: &mut Self| {
            if let Some(t) = turbofish.first() {
                me.error(&Sp::of(t), format!("`{name}` takes no type argument"));
            }
        };
        match name.as_str() {
            "reshape" | "view" => {
                no_turbofish(self);
                self.reshape(&name, rid, o, args, e)
            }
            "t" => {
                no_turbofish(self);
                match rules::t("t", (&recv.to_string(), &o.ty.dims)) {
                    Ok(dims) => self.push(Op::T(rid), Ty::Tensor(TensorTy { dims, ..o.ty }), e),
                    Err(err) => {
                        self.error(&e.sp, err.message);
                        self.error_node(e)
                    }
                }
            }
            "permute" => {
                no_turbofish(self);
                let list: Vec<&Expr> = match args {
                    [Arg { name: None, value }] if matches!(value.kind, ExprKind::Array(_)) => match &value.kind {
                        ExprKind::Array(xs) => xs.iter().collect(),
                        _ => unreachable!("matched an array"),
                    },
                    _ => args.iter().map(|a| &a.value).collect(),
                };
                let mut perm = Vec::new();
                for x in list {
                    match self.dim_arg(x, "permute", &o) {
                        Some(d) => perm.push(d),
                        None => return self.error_node(e),
                    }
                }
                match rules::permute("permute", (&recv.to_string(), &o.ty.dims), &perm) {
                    Ok(dims) => self.push(Op::Permute(rid, perm), Ty::Tensor(TensorTy { dims, ..o.ty }), e),
                    Err(err) => {
                        self.error(&e.sp, err.message);
                        self.error_node(e)
                    }
                }
            }
            "transpose" => {
                no_turbofish(self);
                let Some(a) = self.bind_args("transpose", args, &["dim0", "dim1"], 2, e) else {
                    return self.error_node(e);
                };
                let d0 = self.dim_arg(a[0].expect("required"), "transpose", &o);
                let d1 = self.dim_arg(a[1].expect("required"), "transpose", &o);
                let (Some(d0), Some(d1)) = (d0, d1) else {
                    return self.error_node(e);
                };
                match rules::transpose("transpose", (&recv.to_string(), &o.ty.dims), d0, d1) {
                    Ok(dims) => self.push(Op::Transpose(rid, d0, d1), Ty::Tensor(TensorTy { dims, ..o.ty }), e),
                    Err(err) => {
                        self.error(&e.sp, err.message);
                        self.error_node(e)
                    }
                }
            }
            "sum" | "mean" | "max" | "min" | "argmax" | "argmin" => {
                no_turbofish(self);
                self.reduce(&name, rid, o, args, e)
            }
            "maximum" | "minimum" | "pow" => {
                let Some(a) = self.bind_args(&name, args, &["other"], 1, e) else {
                    return self.error_node(e);
                };
                let y = a[0].expect("required");
                let iy = self.expr(y);
                let op = binary_fn(&name).expect("a binary op");
                self.binary(op, (rid, recv), (iy, y), e)
            }
            "softmax" | "log_softmax" => {
                let Some(a) = self.bind_args(&name, args, &["dim"], 1, e) else {
                    return self.error_node(e);
                };
                let d = a[0].expect("required");
                let Some(dim) = self.dim_arg(d, &name, &o) else {
                    return self.error_node(e);
                };
                if !self.need_float(&name, &o) {
                    return self.error_node(e);
                }
                let log = name == "log_softmax";
                self.push(Op::Softmax { x: rid, dim, log }, Ty::Tensor(o.ty), e)
            }
            "cast" => {
                if !args.is_empty() {
                    self.error(&e.sp, "`cast` takes no arguments: `x.cast::<f16>()`");
                }
                let d = match turbofish {
                    [t] => match t {
                        syn::Type::Path(p) => p.path.segments.last().and_then(|s| DTypeKind::parse(&s.ident.to_string())),
                        _ => None,
                    },
                    _ => None,
                };
                match d {
                    Some(d) => self.push(Op::Cast(rid, d), Ty::Tensor(TensorTy { dtype: d, ..o.ty }), e),
                    None => {
                        self.error(&e.sp, "name the dtype: `x.cast::<f16>()` (f32, f64, f16, bf16, i32, i64, u8, bool)");
                        self.error_node(e)
                    }
                }
            }
            "to_device" | "to_cpu" => {
                if !args.is_empty() {
                    self.error(&e.sp, format!("`{name}` takes no arguments"));
                }
                let d = if name == "to_cpu" {
                    Some(Device::Cpu)
                } else {
                    match turbofish {
                        [t] => device_of(t),
                        _ => None,
                    }
                };
                match d {
                    Some(d) => self.push(Op::ToDevice(rid, d), Ty::Tensor(TensorTy { device: d, ..o.ty }), e),
                    None => {
                        self.error(&e.sp, "name the device: `x.to_device::<Cuda>()` (Cpu, Cuda, Cuda<N>)");
                        self.error_node(e)
                    }
                }
            }
            "narrow" => self.narrow(rid, o, args, e),
            "matmul" | "mm" | "bmm" | "dot" => {
                let Some(a) = self.bind_args(&name, args, &["other"], 1, e) else {
                    return self.error_node(e);
                };
                let y = a[0].expect("required");
                let iy = self.expr(y);
                self.matmul(&name, (rid, recv), (iy, y), e)
            }
            _ => {
                self.error(
                    &Sp::of(method),
                    format!("`{name}` is not a tensor method of `tensor_fn!`: use reshape, view, t, permute, transpose, narrow, sum, mean, max, min, argmax, argmin, softmax, log_softmax, cast, to_device, to_cpu, matmul, dot or a math function"),
                );
                self.error_node(e)
            }
        }
    }

    /// A dim of a reshape target, with `-1` allowed.
    fn target_dim(&mut self, x: &Expr) -> Option<Option<Dim>> {
        fn go(x: &Expr, symbols: &Symbols) -> Result<Option<Dim>, String> {
            match &x.kind {
                ExprKind::Int(n) => Ok(Some(Dim::constant(*n as i64))),
                ExprKind::Neg(inner) if matches!(inner.kind, ExprKind::Int(1)) => Ok(None),
                ExprKind::Var(v) => {
                    let s = v.to_string();
                    match symbols.map.get(&s) {
                        Some(SymKind::Generic) | Some(SymKind::Runtime(Some(_))) => Ok(Some(Dim::sym(&s))),
                        _ => Err(format!(
                            "unknown dim `{s}`: use a literal, a const generic, a dim named in a parameter's shape, or `-1`"
                        )),
                    }
                }
                ExprKind::Binary(op @ (BinOp::Add | BinOp::Mul), a, b) => {
                    let (Some(a), Some(b)) = (go(a, symbols)?, go(b, symbols)?) else {
                        return Err("`-1` stands alone".to_string());
                    };
                    Ok(Some(if *op == BinOp::Add { a.add(&b) } else { a.mul(&b) }))
                }
                _ => Err("a dim is a literal, a name, `+`/`*` of those, or `-1`".to_string()),
            }
        }
        match go(x, &self.sig.symbols) {
            Ok(d) => Some(d),
            Err(m) => {
                self.error(&x.sp, m);
                None
            }
        }
    }

    fn reshape(&mut self, name: &str, rid: NodeId, o: Operand<'_>, args: &[Arg], e: &Expr) -> NodeId {
        let (list, list_sp): (Vec<&Expr>, Sp) = match args {
            [Arg { name: None, value }] => match &value.kind {
                ExprKind::Array(xs) => (xs.iter().collect(), value.sp.clone()),
                _ => (vec![value], value.sp.clone()),
            },
            [] => {
                self.error(&e.sp, format!("`{name}` needs the new shape: `x.{name}([..])`"));
                return self.error_node(e);
            }
            _ => {
                let sp = Sp::join(&args[0].value.sp, &args[args.len() - 1].value.sp);
                (args.iter().map(|a| &a.value).collect(), sp)
            }
        };
        let mut dims: Vec<Option<Dim>> = Vec::new();
        for x in &list {
            match self.target_dim(x) {
                Some(d) => dims.push(d),
                None => return self.error_node(e),
            }
        }
        let infer: Vec<usize> = (0..dims.len()).filter(|&i| dims[i].is_none()).collect();
        if infer.len() > 1 {
            self.error(&list[infer[1]].sp, "only one dim can be `-1`");
            return self.error_node(e);
        }
        let total = numel(&o.ty.dims);
        if let Some(&i) = infer.first() {
            let known: Vec<Dim> = dims.iter().flatten().cloned().collect();
            let rest = numel(&known);
            match total.div_exact(&rest) {
                Some(d) => dims[i] = Some(d),
                None => {
                    self.error(
                        &list[i].sp,
                        format!(
                            "`{name}` of `{}` {} ({total} elements) cannot infer `-1`: {total} is not a multiple of {rest}",
                            o.ex,
                            fmt_shape(&o.ty.dims),
                        ),
                    );
                    return self.error_node(e);
                }
            }
        }
        let dims: Vec<Dim> = dims.into_iter().map(|d| d.expect("inferred")).collect();
        if dims.len() > 6 {
            self.error(&list_sp, "tensors have at most 6 dims");
            return self.error_node(e);
        }
        match rules::reshape(name, (&o.ex.to_string(), &o.ty.dims), &dims) {
            Ok(()) => self.push(
                Op::Reshape {
                    x: rid,
                    view: name == "view",
                },
                Ty::Tensor(TensorTy { dims, ..o.ty }),
                e,
            ),
            Err(err) => {
                self.error(&list_sp, err.message);
                self.error_node(e)
            }
        }
    }

    fn reduce(&mut self, name: &str, rid: NodeId, o: Operand<'_>, args: &[Arg], e: &Expr) -> NodeId {
        let op = match name {
            "sum" => ReduceOp::Sum,
            "mean" => ReduceOp::Mean,
            "max" => ReduceOp::Max,
            "min" => ReduceOp::Min,
            "argmax" => ReduceOp::ArgMax,
            _ => ReduceOp::ArgMin,
        };
        // `a.max(b)` with a tensor or scalar is the elementwise maximum.
        if let ([Arg { name: None, value }], ReduceOp::Max | ReduceOp::Min) = (args, op) {
            if !matches!(value.kind, ExprKind::Int(_) | ExprKind::Neg(_)) {
                let iy = self.expr(value);
                let bop = if op == ReduceOp::Max { BinaryOp::Max } else { BinaryOp::Min };
                return self.binary(bop, (rid, o.ex), (iy, value), e);
            }
        }
        let Some(a) = self.bind_args(name, args, &["dim"], 0, e) else {
            return self.error_node(e);
        };
        let ok = if op == ReduceOp::Mean {
            self.need_float(name, &o)
        } else {
            self.need_numeric(name, &o)
        };
        let dim = match a[0] {
            None if op.returns_index() => {
                self.error(&e.sp, format!("`{name}` needs a dim: `x.{name}(1)`"));
                return self.error_node(e);
            }
            None => None,
            Some(d) => match self.dim_arg(d, name, &o) {
                Some(d) => Some(d),
                None => return self.error_node(e),
            },
        };
        if !ok {
            return self.error_node(e);
        }
        let dims = match dim {
            None => vec![],
            Some(d) => match rules::reduce(name, (&o.ex.to_string(), &o.ty.dims), d, false) {
                Ok(dims) => dims,
                Err(err) => {
                    self.error(&e.sp, err.message);
                    return self.error_node(e);
                }
            },
        };
        let dtype = if op.returns_index() { DTypeKind::I64 } else { o.ty.dtype };
        self.push(
            Op::Reduce { op, x: rid, dim },
            Ty::Tensor(TensorTy {
                device: o.ty.device,
                dtype,
                dims,
            }),
            e,
        )
    }

    fn narrow(&mut self, rid: NodeId, o: Operand<'_>, args: &[Arg], e: &Expr) -> NodeId {
        let Some(a) = self.bind_args("narrow", args, &["dim", "start", "length"], 3, e) else {
            return self.error_node(e);
        };
        let (dx, sx, lx) = (a[0].expect("required"), a[1].expect("required"), a[2].expect("required"));
        let dim = self.dim_arg(dx, "narrow", &o);
        let start = self.index_arg(sx, "the start of `narrow`");
        let len = self.index_arg(lx, "the length of `narrow`");
        let (Some(dim), Some(start), Some(len)) = (dim, start, len) else {
            return self.error_node(e);
        };
        let len_dim = match &len {
            IndexArg::Const(n) => Dim::constant(*n as i64),
            IndexArg::Node(id) => match self.graph.nodes[*id].op {
                Op::Param(j) if sig_scalar_is_symbol(self.sig, j) => Dim::sym(&self.sig.param_names[j]),
                _ => {
                    self.error(&lx.sp, "the length of `narrow` is a literal or a `usize` parameter (it becomes a dim)");
                    return self.error_node(e);
                }
            },
        };
        if let (IndexArg::Const(s), IndexArg::Const(l)) = (&start, &len) {
            if let Err(err) = rules::slice("narrow", (&o.ex.to_string(), &o.ty.dims), dim, *s, s + l) {
                self.error(&e.sp, err.message);
                return self.error_node(e);
            }
        }
        let mut dims = o.ty.dims.clone();
        dims[dim] = len_dim;
        self.push(
            Op::Narrow { x: rid, dim, start, len },
            Ty::Tensor(TensorTy { dims, ..o.ty }),
            e,
        )
    }

    fn index(&mut self, base: &Expr, indices: &[Expr], e: &Expr) -> NodeId {
        let bid = self.expr(base);
        let Some(o) = self.tensor(bid, base, "index") else {
            for i in indices {
                self.expr(i);
            }
            return self.error_node(e);
        };
        if indices.len() > o.ty.dims.len() {
            self.error(
                &e.sp,
                format!(
                    "`{base}` has {} dims but {} indices are given",
                    o.ty.dims.len(),
                    indices.len()
                ),
            );
            return self.error_node(e);
        }
        let mut args = Vec::new();
        let mut ok = true;
        for (k, ix) in indices.iter().enumerate() {
            let arg = match &ix.kind {
                ExprKind::Neg(inner) => match (&inner.kind, o.ty.dims[k].to_usize()) {
                    (ExprKind::Int(n), Some(size)) => {
                        if (*n as usize) > size {
                            self.error(
                                &ix.sp,
                                format!("index {ix} is out of range for dim {k} of `{base}`, which has size {size}: valid indices are -{size}..={}", size as i64 - 1),
                            );
                            ok = false;
                            continue;
                        }
                        Some(IndexArg::Const(size - *n as usize))
                    }
                    (ExprKind::Int(_), None) => {
                        self.error(
                            &ix.sp,
                            format!("a negative index needs a dim known at compile time, and dim {k} of `{base}` is {}", o.ty.dims[k]),
                        );
                        None
                    }
                    _ => self.index_arg(ix, "an index"),
                },
                _ => self.index_arg(ix, "an index"),
            };
            let Some(arg) = arg else {
                ok = false;
                continue;
            };
            if let IndexArg::Const(i) = arg {
                if let Err(err) = rules::index("index", (&base.to_string(), &o.ty.dims), k, i) {
                    self.error(&ix.sp, err.message);
                    ok = false;
                    continue;
                }
            }
            args.push(arg);
        }
        if !ok {
            return self.error_node(e);
        }
        let mut cur = bid;
        let mut dims = o.ty.dims.clone();
        for arg in args {
            dims.remove(0);
            cur = self.push(
                Op::Index {
                    x: cur,
                    dim: 0,
                    index: arg,
                },
                Ty::Tensor(TensorTy {
                    dims: dims.clone(),
                    ..o.ty.clone()
                }),
                e,
            );
        }
        cur
    }
}

fn sig_scalar_is_symbol(sig: &Signature, param: usize) -> bool {
    matches!(sig.params.get(param), Some(ParamSig::Scalar(ScalarKind::Usize)))
}

/// The device a turbofish type names.
fn device_of(t: &syn::Type) -> Option<Device> {
    let syn::Type::Path(p) = t else { return None };
    let seg = p.path.segments.last()?;
    match seg.ident.to_string().as_str() {
        "Cpu" => Some(Device::Cpu),
        "Cuda" => match &seg.arguments {
            syn::PathArguments::None => Some(Device::Cuda(0)),
            syn::PathArguments::AngleBracketed(a) => match a.args.first()? {
                syn::GenericArgument::Const(syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Int(i),
                    ..
                })) => i.base10_parse().ok().map(Device::Cuda),
                syn::GenericArgument::Type(syn::Type::Verbatim(v)) => {
                    v.to_string().parse().ok().map(Device::Cuda)
                }
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// Names `tensor_fn!` understands by itself.
pub fn is_builtin(name: &str) -> bool {
    UnaryOp::from_name(name).is_some()
        || binary_fn(name).is_some()
        || matches!(
            name,
            "matmul" | "mm" | "bmm" | "dot" | "addmm" | "cat" | "addcmul" | "softmax" | "log_softmax"
        )
}
