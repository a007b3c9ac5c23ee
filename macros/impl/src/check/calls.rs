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
        match ops::function(&name) {
            Some(def) => self.op_call(def, None, &[], args, e),
            None => self.external(func, args, e, hint),
        }
    }

    /// A call of catalogue op `def`, as a function (`recv` is `None`) or a
    /// method of `recv`.
    fn op_call(
        &mut self,
        def: &'static OpDef,
        recv: Option<(&Expr, NodeId)>,
        turbofish: &[syn::Type],
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let name = def.name;
        if !matches!(def.kind, OpKind::Cast | OpKind::ToDevice) {
            if let Some(t) = turbofish.first() {
                self.error(&Sp::of(t), format!("`{name}` takes no type argument"));
            }
        }
        // Ops that read their own arguments (dims, lists, names).
        match (def.kind, recv) {
            (OpKind::AddMm, _) => return self.addmm(args, e),
            (OpKind::AddCmul, _) => return self.addcmul(args, e),
            (OpKind::Cat, _) => return self.cat(args, e),
            (OpKind::Stack, _) => return self.stack(args, e),
            (OpKind::RepeatInterleave, _) => return self.repeat_interleave(recv, args, e),
            (
                OpKind::Embedding
                | OpKind::CrossEntropy
                | OpKind::Cumsum
                | OpKind::IndexSelect
                | OpKind::Gather
                | OpKind::IndexAdd
                | OpKind::ScatterAdd
                | OpKind::Arange
                | OpKind::Triangle { .. },
                _,
            ) => return self.indexing(def, recv, args, e),
            (OpKind::Norm(op), _) => return self.norm(def, op, recv, args, e),
            (OpKind::Attention, _) => return self.attention(def, args, e),
            (OpKind::Rope, _) => return self.rope(def, args, e),
            (OpKind::BatchNorm, _) => return self.batch_norm(def, args, e),
            (OpKind::Pool(kind), _) => return self.pool(def, kind, args, e),
            (OpKind::Flatten, _) => return self.flatten(def, recv, args, e),
            (OpKind::Dropout, _) => return self.dropout(def, recv, args, e),
            (OpKind::TopK | OpKind::Multinomial, _) => return self.sampling(def, recv, args, e),
            (OpKind::Conv { spatial }, _) => return self.conv(def, spatial, args, e),
            (
                OpKind::Reduce(_)
                | OpKind::Var
                | OpKind::Reshape { .. }
                | OpKind::Unsqueeze
                | OpKind::Squeeze
                | OpKind::Expand
                | OpKind::Reorder
                | OpKind::Narrow
                | OpKind::Cast
                | OpKind::ToDevice,
                Some((x, id)),
            ) => return self.view_op(def, x, id, turbofish, args, e),
            _ => {}
        }
        let Some(a) = self.bind_op(def, recv.is_some(), args, e) else {
            return self.error_node(e);
        };
        // The operands in the catalogue's order, the receiver first;
        // tensors and scalars are evaluated, dims are read by the op.
        let mut operands: Vec<Option<(&Expr, NodeId)>> = Vec::with_capacity(def.params.len());
        if let Some(r) = recv {
            operands.push(Some(r));
        }
        for i in operands.len()..def.params.len() {
            let v = a[i - usize::from(recv.is_some())];
            let value = matches!(
                def.params[i].kind,
                ParamKind::Tensor | ParamKind::TensorOrScalar | ParamKind::Scalar
            );
            operands.push(match v {
                Some(x) if value => Some((x, self.expr(x))),
                _ => None,
            });
        }
        let tensor = |i: usize| operands[i].expect("a required operand");
        match def.kind {
            OpKind::Unary(op) => {
                let (x, id) = tensor(0);
                self.unary(op, id, x, e)
            }
            OpKind::Binary(op) => {
                let (x, ix) = tensor(0);
                let (y, iy) = match operands[1] {
                    Some(y) => y,
                    None => self.default_operand(def, 1, e),
                };
                self.binary(op, (ix, x), (iy, y), e)
            }
            OpKind::Compare(op) => {
                let ((x, ix), (y, iy)) = (tensor(0), tensor(1));
                self.compare(op, (ix, x), (iy, y), e)
            }
            OpKind::Where => {
                let ((c, ic), (x, ix), (y, iy)) = (tensor(0), tensor(1), tensor(2));
                self.where_(name, (ic, c), (ix, x), (iy, y), e)
            }
            OpKind::MaskedFill => {
                let ((x, ix), (m, im), (v, iv)) = (tensor(0), tensor(1), tensor(2));
                self.masked_fill((ix, x), (im, m), (iv, v), e)
            }
            OpKind::Clamp => {
                let (x, ix) = tensor(0);
                let (lo, hi) = (operands[1], operands[2]);
                self.clamp((ix, x), lo, hi, e)
            }
            OpKind::MatMul | OpKind::Mm | OpKind::Bmm | OpKind::Dot => {
                let ((x, ix), (y, iy)) = (tensor(0), tensor(1));
                self.matmul(name, (ix, x), (iy, y), e)
            }
            OpKind::Row(op) => {
                let (x, id) = tensor(0);
                let Some(o) = self.tensor(id, x, name) else {
                    return self.error_node(e);
                };
                let dim = a.last().copied().flatten().expect("required");
                self.row_op(op, id, o, dim, e)
            }
            other => unreachable!("{other:?} reads its own arguments"),
        }
    }

    /// Binds the arguments of `def` (after the receiver of a method).
    pub(super) fn bind_op<'e>(
        &mut self,
        def: &OpDef,
        method: bool,
        args: &'e [Arg],
        e: &Expr,
    ) -> Option<Vec<Option<&'e Expr>>> {
        let params = if method { &def.params[1..] } else { def.params };
        let names: Vec<&str> = params.iter().map(|p| p.name).collect();
        let required = params.iter().filter(|p| p.default.is_none()).count();
        self.bind_args(def.name, args, &names, required, e)
    }

    /// The arguments of `def` in the catalogue's order, the receiver of a
    /// method first (each `None` where an optional one was not given).
    pub(super) fn bind_with_receiver<'e>(
        &mut self,
        def: &OpDef,
        recv: Option<(&'e Expr, NodeId)>,
        args: &'e [Arg],
        e: &Expr,
    ) -> Option<Vec<Option<&'e Expr>>> {
        let a = self.bind_op(def, recv.is_some(), args, e)?;
        let mut xs: Vec<Option<&Expr>> = Vec::with_capacity(def.params.len());
        if let Some((r, _)) = recv {
            xs.push(Some(r));
        }
        xs.extend(a);
        Some(xs)
    }

    /// The node of an op's first operand: the receiver of a method, else
    /// the expression `x` evaluated.
    pub(super) fn operand_node(&mut self, recv: Option<(&Expr, NodeId)>, x: &Expr) -> NodeId {
        match recv {
            Some((_, id)) => id,
            None => self.expr(x),
        }
    }

    /// The default of parameter `i` of `def`, as a literal node.
    fn default_operand<'e>(&mut self, def: &OpDef, i: usize, e: &'e Expr) -> (&'e Expr, NodeId) {
        let value: f64 = def.params[i]
            .default
            .and_then(|d| d.parse().ok())
            .expect("a numeric default");
        let id = self.push(
            Op::Lit { value, int: false },
            Ty::Scalar(ScalarTy::FloatLit),
            e,
        );
        (e, id)
    }

    pub(super) fn fn_call(&mut self, f: usize, args: &[Arg], e: &Expr) -> NodeId {
        let sig = self.sigs[f].clone().expect("found by signature");
        let written = sig.written();
        let pref: Vec<&str> = sig.param_names[..written]
            .iter()
            .map(|s| s.as_str())
            .collect();
        let Some(a) = self.bind_args(&sig.name, args, &pref, pref.len(), e) else {
            return self.error_node(e);
        };
        let mut xs: Vec<&Expr> = a.iter().map(|x| x.expect("required")).collect();
        // The fields the callee uses of a struct it takes, as paths of the
        // caller (`p.ln_1.weight` for `p.weight` of `layer_norm(x, p.ln_1)`).
        let mut field_exprs = Vec::new();
        for fp in sig.field_paths[written..].iter() {
            let fp = fp.as_ref().expect("fields follow the written parameters");
            let arg = xs[fp.root];
            let path = format!("{arg}{}", fp.suffix);
            field_exprs.push(
                crate::structs::path_expr(&path, arg.sp.span()).unwrap_or_else(|_| Expr {
                    kind: ExprKind::Var(syn::Ident::new("__tf_field", arg.sp.span())),
                    sp: arg.sp.clone(),
                }),
            );
        }
        xs.extend(field_exprs.iter());
        let mut ids: Vec<NodeId> = Vec::with_capacity(xs.len());
        let mut structs: Vec<(usize, String)> = Vec::new();
        for (i, x) in xs.iter().enumerate() {
            let id = match (&sig.params[i], i < written) {
                (ParamSig::Struct(_), _) => {
                    let text = x.to_string();
                    match self.struct_args.iter().any(|s| s.text == text) {
                        true => {
                            let end = text.find(['.', '[']).unwrap_or(text.len());
                            structs.push((i, text.clone()));
                            match self.env.get(&text[..end]) {
                                Some(Binding::Node(id)) => *id,
                                None => self.error_node(x),
                            }
                        }
                        false => self.expr(x),
                    }
                }
                (_, true) => self.expr(x),
                // A field of a struct that is not one the callee takes
                // (reported at the struct) has no node.
                (_, false) => match self.env.get(&x.to_string()) {
                    Some(Binding::Node(id)) => *id,
                    None => self.push(Op::Param(usize::MAX), Ty::Error, x),
                },
            };
            ids.push(id);
        }
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
        let mut devices: HashMap<Name, Device> = HashMap::new();
        let mut dtypes: HashMap<Name, Dt> = HashMap::new();
        let mut bad_structs: Vec<usize> = Vec::new();
        for (i, p) in sig.params.iter().enumerate() {
            if let ParamSig::Struct(want) = p {
                if !self.struct_arg(
                    &sig,
                    i,
                    want,
                    xs[i],
                    ids[i],
                    (&mut devices, &mut dtypes, &mut bind),
                ) {
                    ok = false;
                    bad_structs.push(i);
                }
                continue;
            }
            let ParamSig::Tensor(want) = p else { continue };
            if let Some(fp) = &sig.field_paths[i] {
                if bad_structs.contains(&fp.root) {
                    continue;
                }
            }
            let Some(o) = self.tensor(ids[i], xs[i], &sig.name) else {
                ok = false;
                continue;
            };
            let pname = &sig.param_names[i];
            // The callee's device and dtype parameters take what their
            // first tensor has; the others must agree with it.
            let want_device = match want.device {
                Device::Param(n) => *devices.entry(n).or_insert(o.ty.device),
                d => d,
            };
            if o.ty.device != want_device {
                self.error(
                    &xs[i].sp,
                    format!(
                        "`{}` is on {} but `{}` takes `{pname}` on {want_device}: move it with `{}.to_device::<{want_device}>()`",
                        xs[i], o.ty.device, sig.name, xs[i].receiver_text()
                    ),
                );
                ok = false;
            }
            let want_dtype = match want.dtype {
                Dt::Param(n, b) => match dtypes.get(&n) {
                    Some(d) => *d,
                    None if admits(b, o.ty.dtype) => *dtypes.entry(n).or_insert(o.ty.dtype),
                    None => {
                        let fix = match o.ty.dtype {
                            Dt::Param(m, mb) => format!(
                                "`{m}` is bounded `{m}: {}`: bound it `{m}: {}`",
                                mb.trait_name(),
                                b.trait_name()
                            ),
                            Dt::Kind(_) => format!(
                                "cast with `{}.cast::<{}>()`",
                                xs[i].receiver_text(),
                                b.dtypes()[0]
                            ),
                        };
                        self.error(
                            &xs[i].sp,
                            format!(
                                "`{}` takes `{pname}` as `{n}: {}` but `{}` is {}: {fix}",
                                sig.name,
                                b.trait_name(),
                                xs[i],
                                o.ty.dtype
                            ),
                        );
                        ok = false;
                        continue;
                    }
                },
                d => d,
            };
            if o.ty.dtype != want_dtype {
                self.error(
                    &xs[i].sp,
                    format!(
                        "`{}` is {} but `{}` takes `{pname}` as {want_dtype}: cast with `{}.cast::<{want_dtype}>()`",
                        xs[i],
                        o.ty.dtype,
                        sig.name,
                        xs[i].receiver_text(),
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
                    // A `const` item is itself in every function of the scope.
                    let v = match sig.symbols.is_const_item(s) {
                        true => w.clone(),
                        false => h.clone(),
                    };
                    bind.entry(s.to_string()).or_insert(v);
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
                Some(d) if d.as_symbol().is_some_and(|s| self.sig.symbols.is_static(s)) => {
                    generics.push(d.clone())
                }
                Some(d) => {
                    self.error(
                        &e.sp,
                        format!(
                            "`{}` needs its const generic `{g}` at compile time, but here it is `{d}`, which is not a literal, a `const` item or a const generic of `{}`: make it one (`<const {d}: usize>`) if it is a single name",
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
                Some(s) if sig.symbols.is_const_item(s) => DimTy::Const(d.clone()),
                _ => DimTy::Dyn,
            }
        };
        let param_tys = sig
            .params
            .iter()
            .map(|p| match p {
                ParamSig::Tensor(t) => Some(t.dims.iter().map(inst).collect()),
                ParamSig::Scalar(_) | ParamSig::Struct(_) => None,
            })
            .collect();
        let ret_tys = sig
            .ret
            .iter()
            .map(|t| t.dims.iter().map(inst).collect())
            .collect();
        // A type parameter only in the results cannot be inferred.
        let mut type_args = Vec::new();
        for p in &sig.type_params {
            let bound = match p.kind {
                TypeParamKind::Device => devices.contains_key(&p.name),
                TypeParamKind::DType(_) => match dtypes.get(&p.name) {
                    Some(d) => {
                        type_args.push(*d);
                        true
                    }
                    None => false,
                },
            };
            if !bound {
                self.error(
                    &e.sp,
                    format!(
                        "cannot infer the type parameter `{}` of `{}` from its arguments: name it in a tensor parameter's type or a parameter struct's arguments",
                        p.name, sig.name
                    ),
                );
                return self.error_node(e);
            }
        }
        let rets: Vec<TensorTy> = sig
            .ret
            .iter()
            .map(|t| TensorTy {
                device: match t.device {
                    Device::Param(n) => devices[&n],
                    d => d,
                },
                dtype: match t.dtype {
                    Dt::Param(n, _) => dtypes[&n],
                    d => d,
                },
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
                dtypes: type_args,
                bindings: {
                    let mut b: Vec<(String, Dim)> = bind.into_iter().collect();
                    b.sort_by(|x, y| x.0.cmp(&y.0));
                    b
                },
                param_tys,
                ret_tys,
                structs,
            },
            ty,
            e,
        )
    }

    /// Checks the argument `x` of the struct parameter `i` of `sig` (a
    /// `want`) and binds the callee's device, dtype and const generics
    /// from the struct's arguments; false after an error.
    #[allow(clippy::type_complexity)]
    fn struct_arg(
        &mut self,
        sig: &Signature,
        i: usize,
        want: &StructSig,
        x: &Expr,
        id: NodeId,
        (devices, dtypes, bind): (
            &mut HashMap<Name, Device>,
            &mut HashMap<Name, Dt>,
            &mut HashMap<String, Dim>,
        ),
    ) -> bool {
        let pname = &sig.param_names[i];
        let callee = &sig.name;
        let text = x.to_string();
        let Some(found) = self.struct_args.iter().find(|s| s.text == text).cloned() else {
            let what = match self.ty(id) {
                Ty::Error => return false,
                Ty::Tensor(t) => {
                    format!("a tensor ({} {} {})", t.device, t.dtype, fmt_shape(&t.dims))
                }
                Ty::Tuple(_) => "a tuple of tensors".to_string(),
                Ty::Scalar(s) => format!("a scalar ({s})"),
            };
            self.error(
                &x.sp,
                format!(
                    "`{callee}` takes the parameter struct `&{}` for `{pname}`, but `{x}` is {what}: pass a `{}` (a parameter `&{}`, or a field of a parameter struct)",
                    want.ty_text, want.name, want.name
                ),
            );
            return false;
        };
        if found.name != want.name || found.args.len() != want.args.len() {
            self.error(
                &x.sp,
                format!(
                    "`{callee}` takes `{pname}` as `&{}`, but `{x}` is a `{}`: pass a `{}`",
                    want.ty_text,
                    found.ty_text(),
                    want.name
                ),
            );
            return false;
        }
        let mut ok = true;
        for (w, h) in want.args.iter().zip(&found.args) {
            let w_name = single_ident(w);
            let h_ty = syn::parse2::<syn::Type>(h.clone()).ok();
            let param = w_name
                .as_ref()
                .and_then(|n| sig.type_params.iter().find(|p| p.name == Name::new(n)));
            let (expected, fits) = match (param.map(|p| p.kind), w_name.as_deref()) {
                (Some(TypeParamKind::Device), Some(n)) => {
                    let n = Name::new(n);
                    match h_ty.as_ref().and_then(|t| self.device_of(t)) {
                        Some(d) => match devices.get(&n) {
                            Some(b) if *b != d => (Some(b.to_string()), false),
                            Some(_) => (None, true),
                            None => {
                                devices.insert(n, d);
                                (None, true)
                            }
                        },
                        None => (None, false),
                    }
                }
                (Some(TypeParamKind::DType(b)), Some(n)) => {
                    let n = Name::new(n);
                    match h_ty.as_ref().and_then(|t| self.dtype_of(t)) {
                        Some(d) => match dtypes.get(&n) {
                            Some(prev) if *prev != d => (Some(prev.to_string()), false),
                            Some(_) => (None, true),
                            None if admits(b, d) => {
                                dtypes.insert(n, d);
                                (None, true)
                            }
                            None => (Some(format!("bound `{n}: {}`", b.trait_name())), false),
                        },
                        None => (None, false),
                    }
                }
                (None, Some(n)) if sig.generics.iter().any(|g| g == n) => {
                    let v = match (int_literal(h), single_ident(h)) {
                        (Some(v), _) => Some(Dim::constant(v)),
                        (None, Some(s)) if self.sig.symbols.is_static(&s) => Some(Dim::sym(&s)),
                        _ => None,
                    };
                    match v {
                        Some(v) => match bind.get(n) {
                            Some(prev) if *prev != v => (Some(prev.to_string()), false),
                            Some(_) => (None, true),
                            None => {
                                bind.insert(n.to_string(), v);
                                (None, true)
                            }
                        },
                        None => (None, false),
                    }
                }
                // A concrete argument of the callee: the caller's must be it.
                _ => {
                    let same = match (syn::parse2::<syn::Type>(w.clone()).ok(), &h_ty) {
                        (Some(wt), Some(ht)) => match (self.dtype_of(&wt), self.dtype_of(ht)) {
                            (Some(a), Some(b)) => a == b,
                            _ => match (self.device_of(&wt), self.device_of(ht)) {
                                (Some(a), Some(b)) => a == b,
                                _ => generic_text(w) == generic_text(h),
                            },
                        },
                        _ => generic_text(w) == generic_text(h),
                    };
                    (None, same)
                }
            };
            if fits {
                continue;
            }
            let w_text = generic_text(w);
            let h_text = generic_text(h);
            let (here, want_text) = match &expected {
                Some(v) if v.starts_with("bound ") => {
                    (String::new(), format!("a dtype its {v} admits"))
                }
                Some(v) => (
                    format!(" (its `{w_text}` is `{v}` here, from the arguments before it)"),
                    format!("`{v}`"),
                ),
                None => (String::new(), format!("`{w_text}`")),
            };
            self.error(
                &x.sp,
                format!(
                    "`{callee}` takes `{pname}` as `&{}`{here}, but `{x}` is a `{}`: its argument `{h_text}` must be {want_text}; give the struct that type where it is declared, or convert it before the call",
                    want.ty_text,
                    found.ty_text(),
                ),
            );
            ok = false;
            break;
        }
        ok
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
        let Some(def) = ops::method(&name) else {
            let hint = match ops::closest(&name, Form::Method) {
                Some(n) => format!("did you mean `{n}`? "),
                None => String::new(),
            };
            self.error(
                &Sp::of(method),
                format!(
                    "`{name}` is not a tensor method of `tensor_fn!`: {hint}the methods are {}",
                    ops::names(Form::Method).join(", ")
                ),
            );
            return self.error_node(e);
        };
        if let OpKind::Unary(op) = def.kind {
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
        self.op_call(def, Some((recv, rid)), turbofish, args, e)
    }

    /// The methods that read their own arguments (dims, lists, names):
    /// views, reductions, casts and moves.
    fn view_op(
        &mut self,
        def: &'static OpDef,
        recv: &Expr,
        rid: NodeId,
        turbofish: &[syn::Type],
        args: &[Arg],
        e: &Expr,
    ) -> NodeId {
        let name = def.name;
        let Some(o) = self.tensor(rid, recv, name) else {
            return self.error_node(e);
        };
        match def.kind {
            OpKind::Reshape { view, unordered } => {
                self.reshape(name, (view, unordered), rid, o, args, e)
            }
            OpKind::Unsqueeze | OpKind::Squeeze => self.unsqueeze(name, rid, o, args, e),
            OpKind::Expand => self.expand(rid, o, args, e),
            OpKind::Reorder => self.reorder(name, rid, o, args, e),
            OpKind::Reduce(_) => self.reduce(name, rid, o, args, e),
            OpKind::Var => self.var(rid, o, args, e),
            OpKind::Narrow => self.narrow(rid, o, args, e),
            OpKind::Cast => {
                if !args.is_empty() {
                    self.error(&e.sp, "`cast` takes no arguments: `x.cast::<f16>()`");
                }
                let d = match turbofish {
                    [t] => self.dtype_of(t),
                    _ => None,
                };
                match d {
                    Some(d) => self.push(
                        Op::Cast(rid, d),
                        Ty::Tensor(TensorTy { dtype: d, ..o.ty }),
                        e,
                    ),
                    None => {
                        self.error(&e.sp, "name the dtype: `x.cast::<f16>()` (f32, f64, f16, bf16, i32, i64, u8, bool, or a parameter `T`)");
                        self.error_node(e)
                    }
                }
            }
            OpKind::ToDevice => {
                if !args.is_empty() {
                    self.error(&e.sp, format!("`{name}` takes no arguments"));
                }
                let d = if name == "to_cpu" {
                    Some(Device::Cpu)
                } else {
                    match turbofish {
                        [t] => self.device_of(t),
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
                            "name the device: `x.to_device::<Cuda>()` (Cpu, Cuda, Cuda<N>, or a parameter `D`)",
                        );
                        self.error_node(e)
                    }
                }
            }
            other => unreachable!("{other:?} is checked by op_call"),
        }
    }
}

/// True if a dtype parameter bounded by `b` may stand for `d` (every
/// dtype `d` may be, for a parameter of the caller).
fn admits(b: Bound, d: Dt) -> bool {
    match d {
        Dt::Kind(k) => b.dtypes().contains(&k),
        Dt::Param(_, db) => db.dtypes().iter().all(|k| b.dtypes().contains(k)),
    }
}

/// The identifier a generic argument is, if it is one.
fn single_ident(t: &proc_macro2::TokenStream) -> Option<String> {
    let mut it = t.clone().into_iter();
    match (it.next(), it.next()) {
        (Some(proc_macro2::TokenTree::Ident(i)), None) => Some(i.to_string()),
        _ => None,
    }
}

/// The integer a generic argument is, if it is a literal.
fn int_literal(t: &proc_macro2::TokenStream) -> Option<i64> {
    match syn::parse2::<syn::LitInt>(t.clone()) {
        Ok(l) => l.base10_parse().ok(),
        Err(_) => None,
    }
}
