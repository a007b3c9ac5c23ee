//! Calls: the operations by name, other functions of the invocation,
//! functions outside it, and tensor methods.

use super::*;

impl<'s, 'k> Checker<'s, 'k> {
    pub(super) fn call(
        &mut self,
        func: &syn::Path,
        args: &[Arg],
        e: &Expr,
        hint: Option<&TensorTy>,
    ) -> NodeId {
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
                let x = a[0].expect("required");
                let id = self.expr(x);
                let Some(o) = self.tensor(id, x, &name) else {
                    return self.error_node(e);
                };
                self.softmax(&name, id, o, a[1].expect("required"), e)
            }
            _ => self.external(func, args, e, hint),
        }
    }

    pub(super) fn fn_call(&mut self, f: usize, args: &[Arg], e: &Expr) -> NodeId {
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
                            ScalarKind::Usize => {
                                matches!(s, ScalarTy::IntLit | ScalarTy::Of(ScalarKind::Usize))
                            }
                            ScalarKind::DType(d) => match s {
                                ScalarTy::Of(k) => k == *kind,
                                ScalarTy::IntLit => *d != DTypeKind::Bool,
                                ScalarTy::FloatLit => d.is_float(),
                            },
                        };
                        if !fits {
                            self.error(
                                &xs[i].sp,
                                format!(
                                    "`{}` takes {kind} for `{pname}`, `{}` is {s}",
                                    sig.name, xs[i]
                                ),
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
                            format!(
                                "`{}` takes the scalar {kind} for `{pname}`, `{}` is a tensor",
                                sig.name, xs[i]
                            ),
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
                        xs[i],
                        o.ty.dtype,
                        sig.name,
                        want.dtype,
                        xs[i].receiver_text(),
                        want.dtype
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
            let ParamSig::Tensor(want) = &sig.params[*i] else {
                unreachable!("a tensor parameter")
            };
            let pname = &sig.param_names[*i];
            for (k, (w, h)) in want.dims.iter().zip(&o.ty.dims).enumerate() {
                let expected = w.substitute(&|s| bind.get(s).cloned());
                if expected.as_ref() != Some(h) {
                    let exp_txt = expected
                        .map(|d| d.to_string())
                        .unwrap_or_else(|| w.to_string());
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
                Some(d)
                    if d.as_symbol()
                        .is_some_and(|s| self.sig.symbols.is_generic(s)) =>
                {
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
                        format!(
                            "cannot infer the const generic `{g}` of `{}` from its arguments",
                            sig.name
                        ),
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
        let ret_tys = sig
            .ret
            .iter()
            .map(|t| t.dims.iter().map(inst).collect())
            .collect();
        let rets: Vec<TensorTy> = sig
            .ret
            .iter()
            .map(|t| TensorTy {
                device: t.device,
                dtype: t.dtype,
                dims: t
                    .dims
                    .iter()
                    .map(|d| {
                        d.substitute(&|s| bind.get(s).cloned())
                            .expect("result dims are bound by parameters")
                    })
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

    pub(super) fn external(
        &mut self,
        func: &syn::Path,
        args: &[Arg],
        e: &Expr,
        hint: Option<&TensorTy>,
    ) -> NodeId {
        let mut ids = Vec::new();
        for a in args {
            if let Some(n) = &a.name {
                self.error(
                    &Sp::of(n),
                    "named arguments are only for tensorfn operations",
                );
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

    pub(super) fn method(
        &mut self,
        recv: &Expr,
        method: &syn::Ident,
        turbofish: &[syn::Type],
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
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
                if !matches!(
                    a.value.kind,
                    ExprKind::Array(_) | ExprKind::Int(_) | ExprKind::Neg(_)
                ) {
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
            "t" | "permute" | "transpose" => {
                no_turbofish(self);
                self.reorder(&name, rid, o, args, e)
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
                self.softmax(&name, rid, o, a[0].expect("required"), e)
            }
            "cast" => {
                if !args.is_empty() {
                    self.error(&e.sp, "`cast` takes no arguments: `x.cast::<f16>()`");
                }
                let d = match turbofish {
                    [syn::Type::Path(p)] => p
                        .path
                        .segments
                        .last()
                        .and_then(|s| DTypeKind::parse(&s.ident.to_string())),
                    _ => None,
                };
                match d {
                    Some(d) => self.push(
                        Op::Cast(rid, d),
                        Ty::Tensor(TensorTy { dtype: d, ..o.ty }),
                        e,
                    ),
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
                    Some(d) => self.push(
                        Op::ToDevice(rid, d),
                        Ty::Tensor(TensorTy { device: d, ..o.ty }),
                        e,
                    ),
                    None => {
                        self.error(
                            &e.sp,
                            "name the device: `x.to_device::<Cuda>()` (Cpu, Cuda, Cuda<N>)",
                        );
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
}
