//! Indexing and mask creation: `embedding`, `index_select`, `gather`,
//! `index_add`, `scatter_add`, `arange`, `tril` and `triu`.

use super::*;
use tensorfn_core::ops::xent::{Reduction, DEFAULT_IGNORE_INDEX};

impl<'s, 'k> Checker<'s, 'k> {
    /// A call of one of this file's ops, as a function (`recv` is `None`)
    /// or a method of `recv`.
    pub(super) fn indexing(
        &mut self,
        def: &'static OpDef,
        recv: Option<(&Expr, NodeId)>,
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let name = def.name;
        if def.kind == OpKind::Arange {
            return self.arange(args, e);
        }
        let Some(xs) = self.bind_with_receiver(def, recv, args, e) else {
            return self.error_node(e);
        };
        match def.kind {
            OpKind::Triangle { upper } => {
                let x = xs[0].expect("required");
                let id = self.operand_node(recv, x);
                let Some(o) = self.tensor(id, x, name) else {
                    return self.error_node(e);
                };
                let diagonal = match xs[1] {
                    Some(d) => match self.int_arg(d, &format!("the `diagonal` of `{name}`")) {
                        Some(v) => v as i64,
                        None => return self.error_node(e),
                    },
                    None => 0,
                };
                match self.ruled(
                    rules::triangle(name, (&x.to_string(), &o.ty.dims)),
                    &[&x.sp],
                ) {
                    Some(dims) => self.push(
                        Op::Triangle {
                            x: id,
                            upper,
                            diagonal,
                        },
                        Ty::Tensor(TensorTy { dims, ..o.ty }),
                        e,
                    ),
                    None => self.error_node(e),
                }
            }
            OpKind::Embedding => {
                let (ids_ex, w_ex) = (xs[0].expect("required"), xs[1].expect("required"));
                let ids = self.operand_node(recv, ids_ex);
                let w = self.expr(w_ex);
                let (Some(oi), Some(ow)) =
                    (self.tensor(ids, ids_ex, name), self.tensor(w, w_ex, name))
                else {
                    return self.error_node(e);
                };
                let mut ok = self.index_dtype(name, "input", &oi);
                ok &= self.same_device(name, &ow, &oi);
                let rule = rules::embedding(
                    name,
                    (&ids_ex.to_string(), &oi.ty.dims),
                    (&w_ex.to_string(), &ow.ty.dims),
                );
                match self.ruled(rule, &[&ids_ex.sp, &w_ex.sp]) {
                    Some(dims) if ok => self.push(
                        Op::Embedding { ids, weight: w },
                        Ty::Tensor(TensorTy { dims, ..ow.ty }),
                        e,
                    ),
                    _ => self.error_node(e),
                }
            }
            OpKind::IndexAdd | OpKind::ScatterAdd => self.scatter_add(def, recv, &xs, e),
            OpKind::CrossEntropy => self.cross_entropy(def, recv, &xs, e),
            OpKind::Cumsum => {
                let (x_ex, d_ex) = (xs[0].expect("required"), xs[1].expect("required"));
                let x = self.operand_node(recv, x_ex);
                let Some(o) = self.tensor(x, x_ex, name) else {
                    return self.error_node(e);
                };
                let Some(dim) = self.dim_arg(d_ex, name, &o) else {
                    return self.error_node(e);
                };
                let dtype = match o.ty.dtype {
                    Dt::Kind(k) if k.is_float() => Dt::Kind(k),
                    Dt::Kind(DTypeKind::I32 | DTypeKind::I64 | DTypeKind::U8) => {
                        Dt::Kind(DTypeKind::I64)
                    }
                    dt => {
                        self.error(
                            &x_ex.sp,
                            format!(
                                "`{name}` sums a float dtype into itself and an integer one into `i64`, but `{x_ex}` is {dt}: give it a concrete dtype, or cast it with `{}.cast::<i64>()`",
                                x_ex.receiver_text()
                            ),
                        );
                        return self.error_node(e);
                    }
                };
                self.push(
                    Op::Cumsum { x, dim },
                    Ty::Tensor(TensorTy { dtype, ..o.ty }),
                    e,
                )
            }
            _ => {
                // index_select and gather: (input, dim, index).
                let gather = def.kind == OpKind::Gather;
                let (x_ex, d_ex, i_ex) = (
                    xs[0].expect("required"),
                    xs[1].expect("required"),
                    xs[2].expect("required"),
                );
                let x = self.operand_node(recv, x_ex);
                let idx = self.expr(i_ex);
                let (Some(ox), Some(oi)) =
                    (self.tensor(x, x_ex, name), self.tensor(idx, i_ex, name))
                else {
                    return self.error_node(e);
                };
                let Some(dim) = self.dim_arg(d_ex, name, &ox) else {
                    return self.error_node(e);
                };
                let mut ok = self.index_dtype(name, "index", &oi);
                ok &= self.same_device(name, &ox, &oi);
                let operands = (
                    (x_ex.to_string(), &ox.ty.dims),
                    (i_ex.to_string(), &oi.ty.dims),
                );
                let rule = if gather {
                    rules::gather(
                        name,
                        (&operands.0 .0, operands.0 .1),
                        dim,
                        (&operands.1 .0, operands.1 .1),
                    )
                } else {
                    rules::index_select(
                        name,
                        (&operands.0 .0, operands.0 .1),
                        dim,
                        (&operands.1 .0, operands.1 .1),
                    )
                };
                match self.ruled(rule, &[&x_ex.sp, &d_ex.sp, &i_ex.sp]) {
                    Some(dims) if ok => self.push(
                        Op::Select {
                            x,
                            dim,
                            index: idx,
                            gather,
                        },
                        Ty::Tensor(TensorTy { dims, ..ox.ty }),
                        e,
                    ),
                    _ => self.error_node(e),
                }
            }
        }
    }

    /// `cross_entropy(input, target, ignore_index = -100, reduction =
    /// "mean", label_smoothing = 0.0)`: float logits `[N, C]`, `i64` or
    /// `i32` targets `[N]` on their device, literal keywords.
    fn cross_entropy(
        &mut self,
        def: &'static OpDef,
        recv: Option<(&Expr, NodeId)>,
        xs: &[Option<&Expr>],
        e: &Expr,
    ) -> NodeId {
        let name = def.name;
        let (x_ex, t_ex) = (xs[0].expect("required"), xs[1].expect("required"));
        let x = self.operand_node(recv, x_ex);
        let target = self.expr(t_ex);
        let (Some(ox), Some(ot)) = (self.tensor(x, x_ex, name), self.tensor(target, t_ex, name))
        else {
            return self.error_node(e);
        };
        let mut ok = self.need_float(name, &ox);
        ok &= self.index_dtype(name, "target", &ot);
        ok &= self.same_device(name, &ox, &ot);
        let ignore_index = match xs[2] {
            None => DEFAULT_IGNORE_INDEX,
            Some(v) => match self.int_arg(v, &format!("the `ignore_index` of `{name}`")) {
                Some(k) => k as i64,
                None => {
                    ok = false;
                    DEFAULT_IGNORE_INDEX
                }
            },
        };
        let reduction = match xs[3] {
            None => Reduction::Mean,
            Some(v) => match &v.kind {
                ExprKind::Str(r) if Reduction::from_name(r).is_some() => {
                    Reduction::from_name(r).expect("checked")
                }
                _ => {
                    self.error(
                        &v.sp,
                        format!("`{name}` takes `reduction = \"mean\"`, `\"sum\"` or `\"none\"` (one loss per row), found `{v}`"),
                    );
                    ok = false;
                    Reduction::Mean
                }
            },
        };
        let label_smoothing = match xs[4] {
            None => 0.0,
            Some(v) => {
                let s = match v.kind {
                    ExprKind::Float(s) => Some(s),
                    ExprKind::Int(n) => Some(n as f64),
                    _ => None,
                };
                match s {
                    Some(s) if (0.0..=1.0).contains(&s) => s,
                    _ => {
                        self.error(
                            &v.sp,
                            format!("`{name}` takes a literal between 0.0 and 1.0 for `label_smoothing` (the share of the target spread over every class), found `{v}`"),
                        );
                        ok = false;
                        0.0
                    }
                }
            }
        };
        let rule = rules::cross_entropy(
            name,
            (&x_ex.to_string(), &ox.ty.dims),
            (&t_ex.to_string(), &ot.ty.dims),
            reduction == Reduction::None,
        );
        let Some(dims) = self.ruled(rule, &[&x_ex.sp, &t_ex.sp]) else {
            return self.error_node(e);
        };
        if !ok {
            return self.error_node(e);
        }
        let k_dim = ox.ty.dims.len() > 2;
        let (x, target) = match k_dim {
            true => self.xent_rows(x, &ox.ty, target, &ot.ty, e),
            false => (x, target),
        };
        let rows = match &self.graph.nodes[target].ty {
            Ty::Tensor(t) => t.dims.clone(),
            _ => unreachable!("checked a tensor"),
        };
        let per_row = reduction == Reduction::None;
        let loss = self.push(
            Op::CrossEntropy {
                x,
                target,
                reduction: reduction.name(),
                ignore_index,
                label_smoothing,
            },
            Ty::Tensor(TensorTy {
                dims: if per_row { rows } else { Vec::new() },
                ..ox.ty.clone()
            }),
            e,
        );
        match per_row && k_dim {
            true => self.push(
                Op::Reshape {
                    x: loss,
                    view: false,
                },
                Ty::Tensor(TensorTy { dims, ..ox.ty }),
                e,
            ),
            false => loss,
        }
    }

    /// PyTorch's K-dimensional `cross_entropy`, logits `[N, C, d1, ..,
    /// dk]` against targets `[N, d1, .., dk]`, as the row kernels take
    /// it: the classes moved last and the other dims merged into rows,
    /// `x.permute([0, 2, .., k + 1, 1]).reshape([N * d1 * .. * dk, C])`
    /// (one copy of the logits, as the kernels read rows of contiguous
    /// classes), and the targets flattened (a view).
    fn xent_rows(
        &mut self,
        x: NodeId,
        xt: &TensorTy,
        target: NodeId,
        tt: &TensorTy,
        e: &Expr,
    ) -> (NodeId, NodeId) {
        let rank = xt.dims.len();
        let mut perm: Vec<usize> = vec![0];
        perm.extend(2..rank);
        perm.push(1);
        let moved: Vec<Dim> = perm.iter().map(|&d| xt.dims[d].clone()).collect();
        let rows = numel(&tt.dims);
        let px = self.push(
            Op::Permute(x, perm),
            Ty::Tensor(TensorTy {
                dims: moved,
                ..xt.clone()
            }),
            e,
        );
        let rx = self.push(
            Op::Reshape { x: px, view: false },
            Ty::Tensor(TensorTy {
                dims: vec![rows.clone(), xt.dims[1].clone()],
                ..xt.clone()
            }),
            e,
        );
        let rt = self.push(
            Op::Reshape {
                x: target,
                view: false,
            },
            Ty::Tensor(TensorTy {
                dims: vec![rows],
                ..tt.clone()
            }),
            e,
        );
        (rx, rt)
    }

    /// The node of the first operand: the receiver of a method, else the
    /// first argument, evaluated.
    /// `index_add(input, dim, index, source, alpha = 1)` and
    /// `scatter_add(input, dim, index, src)`: a float `input`, `i64` or
    /// `i32` indices and values of `input`'s dtype, all on one device;
    /// `alpha` a literal.
    fn scatter_add(
        &mut self,
        def: &'static OpDef,
        recv: Option<(&Expr, NodeId)>,
        xs: &[Option<&Expr>],
        e: &Expr,
    ) -> NodeId {
        let name = def.name;
        let index_add = def.kind == OpKind::IndexAdd;
        let (x_ex, d_ex, i_ex, s_ex) = (
            xs[0].expect("required"),
            xs[1].expect("required"),
            xs[2].expect("required"),
            xs[3].expect("required"),
        );
        let x = self.operand_node(recv, x_ex);
        let idx = self.expr(i_ex);
        let src = self.expr(s_ex);
        let (Some(ox), Some(oi), Some(os)) = (
            self.tensor(x, x_ex, name),
            self.tensor(idx, i_ex, name),
            self.tensor(src, s_ex, name),
        ) else {
            return self.error_node(e);
        };
        let Some(dim) = self.dim_arg(d_ex, name, &ox) else {
            return self.error_node(e);
        };
        let mut ok = self.need_float(name, &ox);
        ok &= self.index_dtype(name, "index", &oi);
        ok &= self.same_device(name, &ox, &oi);
        ok &= self.same_device(name, &ox, &os);
        let param = if index_add { "source" } else { "src" };
        if ok && os.ty.dtype != ox.ty.dtype {
            self.error(
                &s_ex.sp,
                format!(
                    "`{name}` adds `{param}` into `{x_ex}`, which is {}, but `{s_ex}` is {}: cast it with `{}.cast::<{}>()`",
                    ox.ty.dtype,
                    os.ty.dtype,
                    s_ex.receiver_text(),
                    ox.ty.dtype
                ),
            );
            ok = false;
        }
        let alpha = match xs.get(4).copied().flatten() {
            None => 1.0,
            Some(v) => {
                let a = match &v.kind {
                    ExprKind::Float(a) => Some(*a),
                    ExprKind::Int(n) => Some(*n as f64),
                    ExprKind::Neg(inner) => match inner.kind {
                        ExprKind::Float(a) => Some(-a),
                        ExprKind::Int(n) => Some(-(n as f64)),
                        _ => None,
                    },
                    _ => None,
                };
                match a {
                    Some(a) if a.is_finite() => a,
                    _ => {
                        self.error(
                            &v.sp,
                            format!("`{name}` takes a finite number literal for `alpha` (the scale of `source`), found `{v}`"),
                        );
                        ok = false;
                        1.0
                    }
                }
            }
        };
        let operands = (
            (x_ex.to_string(), &ox.ty.dims),
            (i_ex.to_string(), &oi.ty.dims),
            (s_ex.to_string(), &os.ty.dims),
        );
        let (xo, io, so) = (
            (operands.0 .0.as_str(), operands.0 .1.as_slice()),
            (operands.1 .0.as_str(), operands.1 .1.as_slice()),
            (operands.2 .0.as_str(), operands.2 .1.as_slice()),
        );
        let rule = if index_add {
            rules::index_add(name, xo, dim, io, so)
        } else {
            rules::scatter_add(name, xo, dim, io, so)
        };
        match self.ruled(rule, &[&x_ex.sp, &d_ex.sp, &i_ex.sp, &s_ex.sp]) {
            Some(dims) if ok => self.push(
                Op::ScatterAdd {
                    x,
                    dim,
                    index: idx,
                    src,
                    alpha,
                    index_add,
                },
                Ty::Tensor(TensorTy { dims, ..ox.ty }),
                e,
            ),
            _ => self.error_node(e),
        }
    }

    /// Index tensors hold `i64` or `i32`; anything else is an error on the
    /// operand naming the fix.
    fn index_dtype(&mut self, op: &str, param: &str, o: &Operand<'_>) -> bool {
        if matches!(o.ty.dtype, Dt::Kind(DTypeKind::I64 | DTypeKind::I32)) {
            return true;
        }
        let fix = match o.ty.dtype {
            Dt::Param(n, _) => format!(
                "a dtype parameter `{n}` may be a float: give `{}` the type `i64`",
                o.ex
            ),
            Dt::Kind(_) => format!("convert them with `{}.cast::<i64>()`", o.ex.receiver_text()),
        };
        let what = if param == "input" { "ids" } else { "indices" };
        self.error(
            &o.ex.sp,
            format!(
                "`{op}` takes `{param}` as `i64` or `i32` {what}, but `{}` is {}: {fix}",
                o.ex, o.ty.dtype
            ),
        );
        false
    }

    /// `index` must be on `x`'s device.
    fn same_device(&mut self, op: &str, x: &Operand<'_>, index: &Operand<'_>) -> bool {
        if x.ty.device == index.ty.device {
            return true;
        }
        let dev = x.ty.device;
        self.error(
            &index.ex.sp,
            format!(
                "`{}` is on {} but `{op}` runs on {dev} (`{}`: {dev}): move it with `{}.to_device::<{dev}>()`",
                index.ex,
                index.ty.device,
                x.ex,
                index.ex.receiver_text()
            ),
        );
        false
    }

    /// `arange(end)` or `arange(start, end)` (also `start =`, `end =`):
    /// `[end - start]` of `i64` on the function's device (its result's,
    /// else its first tensor parameter's). `start` and `end` are dims
    /// (literals, names, `+`/`*` of those) with `start <= end`.
    fn arange(&mut self, args: &[Arg], e: &Expr) -> NodeId {
        let usage =
            "`arange` is `arange(end)` or `arange(start, end)`, each a literal or a dim name";
        let (start, end) = match args {
            [Arg { name: None, value }] => (None, value),
            [Arg {
                name: None,
                value: s,
            }, Arg {
                name: None,
                value: t,
            }] => (Some(s), t),
            _ => {
                let mut start = None;
                let mut end = None;
                for a in args {
                    match a.name.as_ref().map(|n| n.to_string()).as_deref() {
                        Some("start") if start.is_none() => start = Some(&a.value),
                        Some("end") if end.is_none() => end = Some(&a.value),
                        _ => {
                            self.error(&a.value.sp, usage);
                            return self.error_node(e);
                        }
                    }
                }
                match end {
                    Some(end) => (start, end),
                    None => {
                        self.error(&e.sp, usage);
                        return self.error_node(e);
                    }
                }
            }
        };
        let device = self.sig.ret.first().map(|t| t.device).or_else(|| {
            self.sig.params.iter().find_map(|p| match p {
                ParamSig::Tensor(t) => Some(t.device),
                _ => None,
            })
        });
        let Some(device) = device else {
            self.error(
                &e.sp,
                "`arange` makes its tensor on the function's device, but this function has no tensor to take it from",
            );
            return self.error_node(e);
        };
        let mut bound = |x: &Expr| match self.target_dim(x) {
            Some(Some(d)) => Some(d),
            Some(None) => {
                self.error(&x.sp, usage);
                None
            }
            None => None,
        };
        let start_dim = match start {
            Some(s) => bound(s),
            None => Some(Dim::constant(0)),
        };
        let end_dim = bound(end);
        let (Some(start_dim), Some(end_dim)) = (start_dim, end_dim) else {
            return self.error_node(e);
        };
        let len = end_dim.sub(&start_dim);
        if !len.is_non_negative() && len.as_constant() != Some(0) {
            let msg = match len.as_constant() {
                Some(n) => format!(
                    "`arange({start_dim}, {end_dim})` would have {n} elements: `start` must not pass `end`"
                ),
                None => format!(
                    "`arange({start_dim}, {end_dim})` has {len} elements, which `tensor_fn!` cannot show to be at least 0: write `end` as `start` plus a dim (`arange(S, S + K)` has K elements)"
                ),
            };
            self.error(&e.sp, msg);
            return self.error_node(e);
        }
        self.push(
            Op::Arange { start: start_dim },
            Ty::Tensor(TensorTy {
                device,
                dtype: Dt::Kind(DTypeKind::I64),
                dims: vec![len],
            }),
            e,
        )
    }
}
