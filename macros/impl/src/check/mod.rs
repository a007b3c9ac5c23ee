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
use crate::shape::{fmt_shape, numel, Dim};
use crate::sig::{declared_ty, ParamSig, Signature, StructSig, SymKind, Symbols};
use std::collections::{HashMap, HashSet};
use tensorfn_core::ops::{self, Form, OpDef, OpKind, ParamKind};
use tensorfn_core::{rules, DTypeKind, RuleError};
use tensorfn_kernels::ir::Kernel;
use tensorfn_kernels::{BinaryOp, CmpOp, NormOp, ReduceOp, RowOp, RowShape, UnaryOp};

mod calls;
mod conv;
mod elementwise;
mod indexing;
mod linalg;
mod pool;
mod sampling;
mod views;

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
    /// Its element program (`None` if it has errors or is a row kernel).
    pub program: Option<Kernel>,
    /// A row kernel's program (`None` if it has errors or is a scalar
    /// kernel).
    pub row: Option<tensorfn_kernels::rowkernel::RowProgram>,
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
        struct_args: f.struct_args.clone(),
    };
    let mut params = Vec::new();
    for (i, p) in f.params.iter().enumerate() {
        let ty = match &sig.params[i] {
            ParamSig::Tensor(t) => Ty::Tensor(t.clone()),
            ParamSig::Scalar(k) => Ty::Scalar(ScalarTy::Of(*k)),
            // Not a value: `crate::structs` reports its uses.
            ParamSig::Struct(_) => Ty::Error,
        };
        // A used field is known by its path (`p.h[3].w`).
        let name = sig.param_names[i].clone();
        let id = c.graph.push(Node {
            op: Op::Param(i),
            ty,
            sp: Sp::of(&p.name),
            text: name.clone(),
        });
        c.env.insert(name, Binding::Node(id));
        params.push(id);
    }
    for stmt in &f.body.stmts {
        c.let_stmt(stmt);
    }
    let ret = c.result(&f.body.ret);
    let Checker { graph, errors, .. } = c;
    // A call to a kernel whose own body failed to build gives an error node
    // without an error of its own (the kernel's is reported once, on the
    // kernel): such a function is not generated either.
    let poisoned = graph
        .nodes
        .iter()
        .any(|n| matches!(n.ty, Ty::Error) && matches!(n.op, Op::Param(usize::MAX)));
    if errors.is_empty() && !poisoned {
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
    /// The parameter structs the body passes to functions of the
    /// invocation.
    struct_args: Vec<StructArgAst>,
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
    dtype: Dt,
}

/// The catalogue's op for an infix arithmetic operator.
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
            devices
                .iter()
                .position(|&d| d == dev)
                .expect("picked from these")
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
        let dtypes: Vec<Dt> = ops.iter().map(|o| o.ty.dtype).collect();
        let any_float = dtypes.iter().any(|d| d.is_float());
        // Mixing ints and floats: the float side is what the user meant
        // (PyTorch would promote to it), so the ints get the cast.
        let floats: Vec<Dt> = if any_float {
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
        let fix = match o.ty.dtype {
            Dt::Param(n, b) => format!(
                "`{n}: {}` admits integer dtypes: bound it `{n}: Float`",
                b.trait_name()
            ),
            Dt::Kind(_) => format!("cast with `{}.cast::<f32>()`", o.ex.receiver_text()),
        };
        self.error(
            &o.ex.sp,
            format!(
                "`{op}` needs a floating-point tensor but `{}` is {}: {fix}",
                o.ex, o.ty.dtype,
            ),
        );
        false
    }

    fn need_numeric(&mut self, op: &str, o: &Operand<'_>) -> bool {
        if !o.ty.dtype.may_be_bool() {
            return true;
        }
        let fix = match o.ty.dtype {
            Dt::Param(n, _) => {
                format!("`{n}: DType` admits bool: bound it `{n}: NumDType` or `{n}: Float`")
            }
            Dt::Kind(_) => format!(
                "cast with `{}.cast::<u8>()` or `.cast::<f32>()`",
                o.ex.receiver_text()
            ),
        };
        self.error(
            &o.ex.sp,
            format!(
                "`{op}` needs numbers but `{}` is {}: {fix}",
                o.ex, o.ty.dtype
            ),
        );
        false
    }

    /// Reports a shape-rule error on the operand it names.
    /// The value of a shape rule, or `None` after reporting its error on
    /// the operand it names.
    fn ruled<R>(&mut self, rule: Result<R, RuleError>, spans: &[&Sp]) -> Option<R> {
        rule.map_err(|err| self.rule_error(err, spans)).ok()
    }

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

    fn result(&mut self, e: &Expr) -> Vec<NodeId> {
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
                    format!("dim {k} is {} but must be {}", o.ty.dims[k], want.dims[k])
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
                    let msg = if self.sig.symbols.is_static(&v.to_string()) {
                        format!("`{v}` is a dim, not a value: use a literal or a `usize` parameter")
                    } else {
                        format!("`{v}` is not a parameter or a `let` of `{}`", self.fn_name)
                    };
                    self.error(&e.sp, msg);
                    self.push(Op::Param(usize::MAX), Ty::Error, e)
                }
            },
            ExprKind::Item(p) => {
                self.error(
                    &e.sp,
                    format!("`{p}` is a dim, not a value: a path is only allowed in a shape"),
                );
                self.push(Op::Param(usize::MAX), Ty::Error, e)
            }
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
            ExprKind::Bool(b) => {
                self.error(
                    &e.sp,
                    format!("`{b}` is a flag of an operation (`is_causal = {b}`), not a value: a `bool` tensor comes from a comparison (`x > 0.0`)"),
                );
                self.push(Op::Param(usize::MAX), Ty::Error, e)
            }
            ExprKind::Str(s) => {
                self.error(
                    &e.sp,
                    format!("{s:?} is a choice of an operation (`reduction = {s:?}`), not a value"),
                );
                self.push(Op::Param(usize::MAX), Ty::Error, e)
            }
            ExprKind::Neg(x) => {
                let a = self.expr(x);
                self.unary(UnaryOp::Neg, a, x, e)
            }
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (self.expr(a), self.expr(b));
                self.binary(bin_op(*op), (x, a), (y, b), e)
            }
            ExprKind::Compare(op, a, b) => {
                let (x, y) = (self.expr(a), self.expr(b));
                self.compare(*op, (x, a), (y, b), e)
            }
            ExprKind::Call { func, args } => self.call(func, args, e, hint),
            ExprKind::Method {
                recv,
                method,
                turbofish,
                args,
            } => self.method(recv, method, turbofish, args, e),
            // A field path of a parameter struct: its parameter, or an
            // error `crate::structs` reported.
            ExprKind::Field { .. } => match self.env.get(&e.to_string()) {
                Some(Binding::Node(id)) => *id,
                None => self.error_node(e),
            },
            ExprKind::Index { base, indices } => {
                // An element of an array field (`p.h[3]`) where it is a
                // tensor; else indexing a tensor (`p.w[0]`, `x[i]`).
                let field = match crate::structs::is_field_path(base) {
                    true => self.env.get(&e.to_string()).cloned(),
                    false => None,
                };
                match field {
                    Some(Binding::Node(id)) => id,
                    None => self.index(base, indices, e),
                }
            }
            ExprKind::Array(_) => {
                self.error(
                    &e.sp,
                    "a list `[..]` is only an argument: `cat([a, b], dim)`, `x.reshape([..])`, `x.permute([..])`",
                );
                self.push(Op::Param(usize::MAX), Ty::Error, e)
            }
            ExprKind::Tuple(_) => {
                self.error(
                    &e.sp,
                    "a tuple is only the result of a function with several results",
                );
                self.push(Op::Param(usize::MAX), Ty::Error, e)
            }
        }
    }

    fn error_node(&mut self, e: &Expr) -> NodeId {
        self.push(Op::Param(usize::MAX), Ty::Error, e)
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
                            format!(
                                "`{op}` takes at most {} arguments ({})",
                                names.len(),
                                names.join(", ")
                            ),
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
                            format!(
                                "`{op}` has no argument `{n}`: its arguments are {}",
                                names.join(", ")
                            ),
                        );
                        ok = false;
                    }
                },
            }
        }
        for (i, n) in names.iter().enumerate().take(required) {
            if out[i].is_none() {
                self.error(
                    &e.sp,
                    format!(
                        "`{op}` is missing its argument `{n}` ({})",
                        names.join(", ")
                    ),
                );
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

    /// A flag argument (`keepdim = true`): `true` or `false`.
    fn flag_arg(&mut self, x: &Expr, op: &str, flag: &str) -> Option<bool> {
        match x.kind {
            ExprKind::Bool(b) => Some(b),
            _ => {
                self.error(
                    &x.sp,
                    format!("`{op}` takes `true` or `false` for `{flag}`, found `{x}`"),
                );
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

    /// A count that becomes a dim of the result (`k`, `num_samples`,
    /// `narrow`'s `length`): a
    /// literal or a `usize` parameter, with the dim it gives.
    fn size_arg(&mut self, x: &Expr, op: &str, what: &str) -> Option<(IndexArg, Dim)> {
        let arg = self.index_arg(x, &format!("the `{what}` of `{op}`"))?;
        let dim = match &arg {
            IndexArg::Const(n) => Dim::constant(*n as i64),
            IndexArg::Node(id) => match self.graph.nodes[*id].op {
                Op::Param(j) if sig_scalar_is_symbol(self.sig, j) => {
                    Dim::sym(&self.sig.param_names[j])
                }
                _ => {
                    self.error(
                        &x.sp,
                        format!("the `{what}` of `{op}` is a literal or a `usize` parameter (it becomes a dim of the result), found `{x}`"),
                    );
                    return None;
                }
            },
        };
        Some((arg, dim))
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
                    format!(
                        "{what} is a `usize` (a literal or a `usize` parameter), `{x}` is {found}"
                    ),
                );
                None
            }
        }
    }
}

fn sig_scalar_is_symbol(sig: &Signature, param: usize) -> bool {
    matches!(
        sig.params.get(param),
        Some(ParamSig::Scalar(ScalarKind::Usize))
    )
}

impl Checker<'_, '_> {
    /// The device a turbofish type names: `Cpu`, `Cuda`, `Cuda<N>` or a
    /// device parameter of the function.
    fn device_of(&self, t: &syn::Type) -> Option<Device> {
        let syn::Type::Path(p) = t else { return None };
        let seg = p.path.segments.last()?;
        let name = seg.ident.to_string();
        match name.as_str() {
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
            _ => self
                .sig
                .type_params
                .iter()
                .find(|p| p.name == Name::new(&name) && p.kind == TypeParamKind::Device)
                .map(|p| Device::Param(p.name)),
        }
    }

    /// The dtype a turbofish type names: a dtype or a dtype parameter of
    /// the function.
    fn dtype_of(&self, t: &syn::Type) -> Option<Dt> {
        let syn::Type::Path(p) = t else { return None };
        let name = p.path.segments.last()?.ident.to_string();
        if let Some(k) = tensorfn_core::DTypeKind::parse(&name) {
            return Some(Dt::Kind(k));
        }
        self.sig.type_params.iter().find_map(|p| match p.kind {
            TypeParamKind::DType(b) if p.name == Name::new(&name) => Some(Dt::Param(p.name, b)),
            _ => None,
        })
    }
}

/// Names `tensor_fn!` understands by itself.
pub fn is_builtin(name: &str) -> bool {
    ops::function(name).is_some()
}
