//! One step of a plan: a fused kernel or a runtime call.

use super::*;
use tensorfn_core::ops::conv::ConvArgs;

/// A stable kernel entry prefix: the function and the program's
/// [`fingerprint`](Kernel::fingerprint) (equal programs get equal names and
/// share their PTX; the hash is the same on every machine and compiler).
///
/// ```
/// use tensorfn_kernels::ir::ElementwiseBuilder;
/// use tensorfn_kernels::{DTypeKind, UnaryOp};
/// let mut b = ElementwiseBuilder::new();
/// let x = b.input(DTypeKind::F32);
/// let y = b.unary(UnaryOp::Exp, x);
/// let kernel = b.output(y)?;
/// let name = tensorfn_macros_impl::expand::kernel_name("r#loop", &kernel);
/// assert_eq!(name, format!("tf_loop_{:016x}", kernel.fingerprint()));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn kernel_name(fn_name: &str, kernel: &Kernel) -> String {
    let clean: String = fn_name
        .trim_start_matches("r#")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("tf_{clean}_{:016x}", kernel.fingerprint())
}

/// `CrossEntropyArgs { .. }` of a `cross_entropy` node's options.
fn xent_args(reduction: &str, ignore_index: i64, label_smoothing: f64) -> TokenStream {
    let red = match reduction {
        "sum" => quote!(Sum),
        "none" => quote!(None),
        _ => quote!(Mean),
    };
    quote!(::tensorfn::CrossEntropyArgs {
        reduction: ::tensorfn::Reduction::#red,
        ignore_index: #ignore_index,
        label_smoothing: #label_smoothing,
    })
}

/// The variable holding the log-sum-exps that attention node `n` saves
/// for its backward.
fn lse_var(n: NodeId) -> proc_macro2::Ident {
    quote::format_ident!("__lse{}", n)
}

/// The `Pool2d { .. }` of a pooling node's options.
fn pool_args(p: &tensorfn_core::ops::pool::Pool2d) -> TokenStream {
    use tensorfn_core::ops::pool::PoolKind;
    let kind = match p.kind {
        PoolKind::Max => quote!(Max),
        PoolKind::Avg => quote!(Avg),
        PoolKind::AdaptiveAvg => quote!(AdaptiveAvg),
    };
    let pair = |v: [usize; 2]| {
        let [a, b] = v;
        quote!([#a, #b])
    };
    let (k, s, pd, d, o) = (
        pair(p.kernel_size),
        pair(p.stride),
        pair(p.padding),
        pair(p.dilation),
        pair(p.output_size),
    );
    let (ceil, cip) = (p.ceil_mode, p.count_include_pad);
    let div = match p.divisor_override {
        Some(d) => quote!(::core::option::Option::Some(#d)),
        None => quote!(::core::option::Option::None),
    };
    quote!(::tensorfn::Pool2d {
        kind: ::tensorfn::PoolKind::#kind,
        kernel_size: #k,
        stride: #s,
        padding: #pd,
        dilation: #d,
        ceil_mode: #ceil,
        count_include_pad: #cip,
        divisor_override: #div,
        output_size: #o,
    })
}

/// The typed API's options of a convolution node: `ConvArgs { .. }`, or
/// `Conv1dArgs { .. }` (the width's entries) for `conv1d`.
fn conv_args(a: &ConvArgs, spatial: usize) -> TokenStream {
    let (s, p, d, g) = (a.stride, a.padding, a.dilation, a.groups);
    if spatial == 1 {
        let (s, p, d) = (s[1], p[1], d[1]);
        quote!(::tensorfn::Conv1dArgs { stride: #s, padding: #p, dilation: #d, groups: #g })
    } else {
        let ([s0, s1], [p0, p1], [d0, d1]) = (s, p, d);
        quote!(::tensorfn::ConvArgs {
            stride: [#s0, #s1],
            padding: [#p0, #p1],
            dilation: [#d0, #d1],
            groups: #g,
        })
    }
}

impl FnGen<'_> {
    /// Whether attention node `n` is differentiated: its forward then
    /// also returns the rows' log-sum-exps, which the backward reads
    /// instead of recomputing them.
    fn saves_lse(&self, n: NodeId) -> bool {
        matches!(self.g().nodes[n].op, Op::Attention { .. })
            && self
                .g()
                .nodes
                .iter()
                .any(|x| matches!(x.op, Op::AttentionBackward { out, .. } if out == n))
    }

    /// A norm's `weight` or `bias` as the typed methods take it: of the
    /// shape type of `x`'s last dim.
    fn norm_param(&self, x: NodeId, p: NodeId) -> TokenStream {
        let last = self.dim_tys(x).pop().expect("rank 1 or more");
        let r = self.reference(p);
        if self.dim_tys(p) == [last.clone()] {
            r
        } else {
            let s = shape_tokens(std::slice::from_ref(&last));
            quote!(&::core::clone::Clone::clone(#r).into_shape::<#s>()?)
        }
    }

    /// A norm's `eps` as the typed methods (forward and backward) take
    /// it: an `f64` for `layer_norm` (f32's default when not given), an
    /// `Option<f64>` for `rms_norm` (`None`: the dtype's default).
    fn norm_eps(&self, op: NormOp, eps: Option<NodeId>) -> TokenStream {
        let eps = eps.map(|e| self.scalar_f64(e));
        match op {
            NormOp::LayerNorm => eps.unwrap_or_else(|| {
                let d = op.default_eps(DTypeKind::F32);
                quote!(#d)
            }),
            NormOp::RmsNorm => match eps {
                Some(e) => quote!(::core::option::Option::Some(#e)),
                None => quote!(::core::option::Option::None),
            },
        }
    }

    /// The `AttentionArgs` of an attention node's optional arguments.
    fn attention_args(
        &self,
        mask: Option<NodeId>,
        causal: bool,
        scale: Option<NodeId>,
        gqa: bool,
    ) -> TokenStream {
        let mut args = quote!(::tensorfn::AttentionArgs::new());
        if gqa {
            args = quote!(#args.enable_gqa(true));
        }
        if let Some(m) = mask {
            let m = self.reference(m);
            args = quote!(#args.attn_mask(#m));
        }
        if causal {
            args = quote!(#args.is_causal(true));
        }
        if let Some(sc) = scale {
            let sc = self.scalar_as(sc, DTypeKind::F64);
            args = quote!(#args.scale(#sc));
        }
        args
    }

    /// The target of `cross_entropy` of logits `x` as the typed methods
    /// take it: of the type of the logits' first dim.
    fn rows_target(&self, x: NodeId, target: NodeId) -> TokenStream {
        let rows = vec![self.dim_tys(x)[0].clone()];
        let tr = self.reference(target);
        if self.dim_tys(target) == rows {
            tr
        } else {
            let s = shape_tokens(&rows);
            quote!(&::core::clone::Clone::clone(#tr).into_shape::<#s>()?)
        }
    }

    /// The bias of the product node `n` as `addmm` takes it: as it is when
    /// it is a scalar, a row of the product's columns or of its dims,
    /// else broadcast to the product.
    fn bias_for(&self, n: NodeId, bias: NodeId) -> TokenStream {
        // A product with a second result (`AddMmGeluAux`) is a tuple of
        // parts of the product's dims.
        let out = match &self.g().nodes[n].ty {
            Ty::Tuple(parts) => &parts[0].dims,
            _ => &self.tty(n).dims,
        };
        let bd = &self.tty(bias).dims;
        let direct = bd.is_empty() || (bd.len() == 1 && bd[0] == out[1]) || bd == out;
        let b = self.reference(bias);
        if direct {
            b
        } else {
            let dims = dims_array(out, self.symbols());
            let s = shape_tokens(&self.symbols().dim_tys(out));
            quote!(&#b.broadcast_to_dims::<#s>(&#dims)?)
        }
    }

    pub(super) fn step(&mut self, s: &Step) -> TokenStream {
        match s {
            Step::Drop(n) => {
                let v = var(*n);
                quote!(::core::mem::drop(#v);)
            }
            Step::Fused(gr) => self.fused(gr),
            Step::Rows(r) => self.row_step(r),
            Step::Op(n) => {
                let n = *n;
                let v = var(n);
                if let Op::AttentionBackward { out, .. } = self.g().nodes[n].op {
                    // The forward's log-sum-exps are used once: here.
                    let value = self.op(n);
                    let lse = lse_var(out);
                    return quote!(let #v = #value; ::core::mem::drop(#lse););
                }
                if let Ty::Tuple(_) = self.g().nodes[n].ty {
                    let value = self.op(n);
                    return quote!(let #v = #value;);
                }
                if self.saves_lse(n) {
                    // The forward of a differentiated attention: its
                    // result and the rows' log-sum-exps for the backward.
                    let ty = self.type_of(n);
                    let t = self.tty(n);
                    let dims = self.dim_tys(n);
                    let lse_ty =
                        tensor_tokens(t.device, Dt::Kind(DTypeKind::F32), &dims[..dims.len() - 1]);
                    let value = self.op(n);
                    let lse = lse_var(n);
                    return quote!(let (#v, #lse): (#ty, #lse_ty) = #value;);
                }
                let ty = self.type_of(n);
                let value = self.op(n);
                quote!(let #v: #ty = #value;)
            }
        }
    }

    pub(super) fn fused(&mut self, gr: &crate::plan::FusedGroup) -> TokenStream {
        let out = gr.out;
        let t = self.tty(out).clone();
        let v = var(out);
        let ty = self.type_of(out);
        let kernel = match &gr.kernel {
            Ok(k) => k,
            Err(e) => {
                let at = &self.g().nodes[out].sp;
                self.errors.push(at.error(format!(
                    "internal error of `tensor_fn!`: the fused kernel of `{}` is ill-typed: {e}",
                    self.g().nodes[out].text
                )));
                // The error above stops the build; the binding keeps the
                // rest of the function free of follow-on errors.
                return quote!(let #v: #ty = ::core::unreachable!(););
            }
        };
        let name = kernel_name(&self.f.sig.name, kernel);
        // Identical groups (repeated layers) share one static and one PTX.
        let (static_name, declare) = match self.kernels.get(&name) {
            Some(id) => (id.clone(), false),
            None => {
                let id = format_ident!("__TF_KERNEL_{}", self.kernels.len());
                self.kernels.insert(name.clone(), id.clone());
                (id, true)
            }
        };
        // A CPU group never launches: it needs no PTX.
        let (ptx, ptx_sm80) = if declare && t.device != Device::Cpu {
            match (self.ctx.ptx)(kernel, &name) {
                Ok(p) => p,
                Err(e) => {
                    let at = &self.g().nodes[out].sp;
                    self.errors.push(at.error(format!(
                        "internal error of `tensor_fn!`: the PTX emitter rejected the fused kernel of `{}`: {e}",
                        self.g().nodes[out].text
                    )));
                    (String::new(), None)
                }
            }
        } else {
            (String::new(), None)
        };
        let ptx_sm80 = match ptx_sm80 {
            Some(text) => quote!(::core::option::Option::Some(#text)),
            None => quote!(::core::option::Option::None),
        };
        let inputs = kernel.inputs().iter().map(|d| dtype_kind_tokens(*d));
        let output = dtype_kind_tokens(kernel.output_dtype());
        let args: Vec<TokenStream> = gr
            .inputs
            .iter()
            .map(|i| match i {
                GroupInput::Tensor(n) => self.reference(*n),
                GroupInput::Scalar { node, dtype } => {
                    let dev = device_tokens(t.device);
                    let dt = dtype_tokens(*dtype);
                    let v = self.scalar_as(*node, *dtype);
                    quote!(&::tensorfn::Tensor::<#dev, #dt, ()>::full(#v)?)
                }
            })
            .collect();
        let dims = dims_array(&t.dims, self.symbols());
        let f = format_ident!("fused{}", gr.inputs.len());
        let closure = rust_code::closure(kernel);
        let decl = declare.then(|| {
            quote! {
                static #static_name: ::tensorfn::__kernels::FusedKernel = ::tensorfn::__kernels::FusedKernel {
                    name: #name,
                    ptx: #ptx,
                    ptx_sm80: #ptx_sm80,
                    inputs: &[#(#inputs),*],
                    output: #output,
                };
            }
        });
        quote! {
            #decl
            let #v: #ty = ::tensorfn::__private::#f(#(#args,)* &#dims, &#static_name, #closure)?;
        }
    }

    /// Whether the runtime's `MatMulShape` pairs the operands' types: the
    /// same `K` type and, when both have batch dims, the same batch types.
    /// Other pairings the shared rule accepted (batch dims that broadcast)
    /// go through `matmul_broadcast`, so what the checker accepts compiles.
    fn matmul_pairs_in_types(&self, a: NodeId, b: NodeId) -> bool {
        let (ta, tb) = (self.dim_tys(a), self.dim_tys(b));
        let (ra, rb) = (ta.len(), tb.len());
        let k_b = if rb == 1 { &tb[0] } else { &tb[rb - 2] };
        ta.last() == Some(k_b) && (ra <= 2 || rb <= 2 || ta[..ra - 2] == tb[..rb - 2])
    }

    /// The expression computing a runtime-call node (without `let`).
    pub(super) fn op(&self, n: NodeId) -> TokenStream {
        let g = self.g();
        let node = &g.nodes[n];
        let so = || self.shape_of(n);
        match &node.op {
            Op::MatMul(a, b) => {
                let typed = self.matmul_pairs_in_types(*a, *b);
                let (a, b) = (self.reference(*a), self.reference(*b));
                if typed {
                    quote!(#a.matmul(#b)?)
                } else {
                    let s = so();
                    quote!(#a.matmul_broadcast::<#s>(#b)?)
                }
            }
            Op::Bmm(a, b) => {
                let (a, b) = (self.reference(*a), self.reference(*b));
                quote!(#a.bmm(#b)?)
            }
            Op::Dot(a, b) => {
                let (a, b) = (self.reference(*a), self.reference(*b));
                quote!(#a.dot(#b)?)
            }
            Op::MatMulSumK { a, b, of_b } => {
                let typed = self.matmul_pairs_in_types(*a, *b);
                let (ar, br) = (self.reference(*a), self.reference(*b));
                let Ty::Tuple(parts) = &node.ty else {
                    unreachable!("a fused product is a tuple")
                };
                if typed {
                    let m = if *of_b {
                        quote!(matmul_sum_b)
                    } else {
                        quote!(matmul_sum_a)
                    };
                    quote!(::tensorfn::Tensor::#m(#ar, #br)?)
                } else {
                    // Dims the types do not pair (`matmul_broadcast`'s
                    // case): the product and the sum one after the other.
                    let s = shape_tokens(&self.symbols().dim_tys(&parts[0].dims));
                    let sum = if *of_b {
                        quote!(#br.sum::<0>()?)
                    } else {
                        quote!(#ar.sum::<1>()?)
                    };
                    quote!((#ar.matmul_broadcast::<#s>(#br)?, #sum))
                }
            }
            Op::AddMmGeluAux { bias, m1, m2 } => {
                let bias_expr = self.bias_for(n, *bias);
                let (m1, m2) = (self.reference(*m1), self.reference(*m2));
                quote!(::tensorfn::Tensor::addmm_gelu_aux(#bias_expr, #m1, #m2)?)
            }
            Op::MatMulDGelu { a, b, pre, sums } => {
                let typed = self.matmul_pairs_in_types(*a, *b);
                let (ar, br, pr) = (self.reference(*a), self.reference(*b), self.reference(*pre));
                match (typed, sums) {
                    (true, false) => quote!(::tensorfn::Tensor::matmul_dgelu(#ar, #br, #pr)?),
                    (true, true) => quote!(::tensorfn::Tensor::matmul_dgelu_sum(#ar, #br, #pr)?),
                    (false, _) => {
                        // Dims the types do not pair (`matmul_broadcast`'s
                        // case): the product, then GELU's backward (and
                        // the column sums).
                        let s = self.shape_of(*pre);
                        let d = quote!(#ar.matmul_broadcast::<#s>(#br)?.gelu_backward(#pr)?);
                        if *sums {
                            quote!({
                                let d = #d;
                                let s = d.sum::<0>()?;
                                (d, s)
                            })
                        } else {
                            d
                        }
                    }
                }
            }
            Op::AddMmAct { bias, m1, m2, act } => {
                let bias_expr = self.bias_for(n, *bias);
                let (m1, m2) = (self.reference(*m1), self.reference(*m2));
                let act = match act {
                    UnaryOp::Relu => quote!(Relu),
                    _ => quote!(Gelu),
                };
                quote!(::tensorfn::Tensor::addmm_act(
                    #bias_expr,
                    #m1,
                    #m2,
                    ::tensorfn::__private::UnaryOp::#act
                )?)
            }
            Op::AddMm {
                bias,
                m1,
                m2,
                beta,
                alpha,
            } => {
                let bias_expr = self.bias_for(n, *bias);
                let (m1, m2) = (self.reference(*m1), self.reference(*m2));
                match (beta, alpha) {
                    (None, None) => quote!(::tensorfn::Tensor::addmm(#bias_expr, #m1, #m2)?),
                    _ => {
                        let d = self.tty(n).dtype.kind();
                        let one = |x: &Option<NodeId>| match x {
                            Some(s) => self.scalar_as(*s, d),
                            None => {
                                let t = dtype_tokens(d);
                                quote!(<#t as ::tensorfn::DType>::one())
                            }
                        };
                        let (be, al) = (one(beta), one(alpha));
                        quote!(::tensorfn::Tensor::addmm_scaled(#bias_expr, #m1, #m2, #be, #al)?)
                    }
                }
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
                let (q, k, v) = (self.reference(*q), self.reference(*k), self.reference(*v));
                let s = so();
                let args = self.attention_args(*mask, *causal, *scale, *gqa);
                if self.saves_lse(n) {
                    let dims = self.dim_tys(n);
                    let ls = shape_tokens(&dims[..dims.len() - 1]);
                    quote!(#q.scaled_dot_product_attention_with_lse_dims::<#s, #ls>(#k, #v, #args)?)
                } else {
                    quote!(#q.scaled_dot_product_attention_dims::<#s>(#k, #v, #args)?)
                }
            }
            Op::AttentionBackward {
                q,
                k,
                v,
                out,
                grad,
                mask,
                causal,
                scale,
                gqa,
            } => {
                let (q, k, v) = (self.reference(*q), self.reference(*k), self.reference(*v));
                let (o, g) = (self.reference(*out), self.reference(*grad));
                let lse = lse_var(*out);
                let args = self.attention_args(*mask, *causal, *scale, *gqa);
                quote!(#q.scaled_dot_product_attention_backward_dims(#k, #v, #o, #g, &#lse, #args)?)
            }
            Op::Reshape { x, view } => {
                let x = self.reference(*x);
                let s = so();
                let dims = &self.tty(n).dims;
                let is_static = self.dim_tys(n).iter().all(|d| *d != DimTy::Dyn);
                match (view, is_static) {
                    (true, true) => quote!(#x.view::<#s>()?),
                    (false, true) => quote!(#x.reshape::<#s>()?),
                    (true, false) => {
                        let d = dims_array(dims, self.symbols());
                        quote!(#x.view_dims::<#s>(&#d)?)
                    }
                    (false, false) => {
                        let d = dims_array(dims, self.symbols());
                        quote!(#x.reshape_dims::<#s>(&#d)?)
                    }
                }
            }
            Op::Expand(x) => {
                let x = self.reference(*x);
                let s = so();
                let d = dims_array(&self.tty(n).dims, self.symbols());
                quote!(#x.expand::<#s>(&#d)?)
            }
            Op::T(x) => {
                let x = self.reference(*x);
                quote!(#x.t()?)
            }
            Op::Permute(x, perm) => {
                let x = self.reference(*x);
                let s = so();
                quote!(#x.permute::<#s>(&[#(#perm),*])?)
            }
            Op::Transpose(x, d0, d1) => {
                let x = self.reference(*x);
                let s = so();
                quote!(#x.transpose::<#s>(#d0, #d1)?)
            }
            Op::Narrow { x, dim, start, len } => {
                let x = self.reference(*x);
                let s = so();
                let (st, ln) = (self.index_arg(start), self.index_arg(len));
                quote!(#x.narrow::<#dim, #s>(#st, #ln)?)
            }
            Op::Index { x, dim, index } => {
                let x = self.reference(*x);
                match index {
                    IndexArg::Const(i) => quote!(#x.at::<#dim, #i>()?),
                    IndexArg::Node(i) => {
                        let i = self.scalar_usize(*i);
                        quote!(#x.index::<#dim>(#i)?)
                    }
                }
            }
            Op::Reduce { op, x, dim } => {
                let x = self.reference(*x);
                match dim {
                    Some(d) => {
                        let m = format_ident!("{}", op.name());
                        quote!(#x.#m::<#d>()?)
                    }
                    None => {
                        let m = format_ident!("{}_all", op.name());
                        debug_assert!(!matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin));
                        quote!(#x.#m()?)
                    }
                }
            }
            Op::Row { op, x, dim } => {
                // The typed method named after the op (`x.softmax::<1>()`).
                let x = self.reference(*x);
                let m = format_ident!("{}", op.name());
                quote!(#x.#m::<#dim>()?)
            }
            Op::Norm {
                op,
                x,
                weight,
                bias,
                eps,
            } => {
                let xr = self.reference(*x);
                let w = self.norm_param(*x, *weight);
                let eps = self.norm_eps(*op, *eps);
                match op {
                    NormOp::LayerNorm => {
                        let b = self.norm_param(*x, bias.expect("layer_norm has a bias"));
                        quote!(#xr.layer_norm(#w, #b, #eps)?)
                    }
                    NormOp::RmsNorm => quote!(#xr.rms_norm(#w, #eps)?),
                }
            }
            Op::NormBackward {
                op,
                x,
                weight,
                grad,
                eps,
            } => {
                // `grad` as the typed method takes it: of `x`'s type.
                let xr = self.reference(*x);
                let w = self.norm_param(*x, *weight);
                let gr = self.reference(*grad);
                let gr = if self.dim_tys(*grad) == self.dim_tys(*x) {
                    gr
                } else {
                    let s = shape_tokens(&self.dim_tys(*x));
                    quote!(&::core::clone::Clone::clone(#gr).into_shape::<#s>()?)
                };
                let eps = self.norm_eps(*op, *eps);
                let m = format_ident!("{}_backward", op.name());
                quote!(#xr.#m(#w, #gr, #eps)?)
            }
            Op::Rope { x, cos, sin } => {
                // `cos` and `sin` as the typed method takes them: of the
                // shape types of `x`'s last two dims.
                let tys = self.dim_tys(*x);
                let last_two = tys[tys.len() - 2..].to_vec();
                let table = |p: NodeId| {
                    let r = self.reference(p);
                    if self.dim_tys(p) == last_two {
                        r
                    } else {
                        let s = shape_tokens(&last_two);
                        quote!(&::core::clone::Clone::clone(#r).into_shape::<#s>()?)
                    }
                };
                let xr = self.reference(*x);
                let (c, s) = (table(*cos), table(*sin));
                quote!(#xr.rope(#c, #s)?)
            }
            Op::Cat { xs, dim }
                if xs.len() > 2 && xs.iter().all(|&x| self.dim_tys(x) == self.dim_tys(xs[0])) =>
            {
                // Parts of one shape: one call that writes each part into
                // its slot once (pairwise, the first parts would be copied
                // again by every later step).
                let part = self.shape_of(xs[0]);
                let parts = xs.iter().map(|&x| {
                    let r = self.reference(x);
                    quote!(&::core::clone::Clone::clone(#r).into_shape::<#part>()?)
                });
                let s = so();
                quote!(::tensorfn::Tensor::cat_slice::<#dim, #s>(&[#(#parts),*])?)
            }
            Op::Cat { xs, dim } => {
                // Pairwise: each step's shape type has the joined dim so far.
                let first = self.tty(xs[0]).clone();
                let mut acc = self.reference(xs[0]);
                let mut sum = first.dims[*dim].clone();
                for (i, &x) in xs.iter().enumerate().skip(1) {
                    sum = sum.add(&self.tty(x).dims[*dim]);
                    let mut dims = first.dims.clone();
                    dims[*dim] = sum.clone();
                    let s = shape_tokens(&self.symbols().dim_tys(&dims));
                    let b = self.reference(x);
                    acc = if i == 1 {
                        quote!(#acc.cat::<#dim, #s>(#b)?)
                    } else {
                        quote!((&#acc).cat::<#dim, #s>(#b)?)
                    };
                }
                acc
            }
            Op::Cumsum { x, dim } => {
                let x = self.reference(*x);
                quote!(#x.cumsum::<#dim>()?)
            }
            Op::Pool { x, pool } => {
                let x = self.reference(*x);
                let s = so();
                let args = pool_args(pool);
                quote!(#x.pool2d::<#s>(#args)?)
            }
            Op::TopK { x, k, dim, largest } => self.topk(n, *x, k, *dim, *largest),
            Op::Multinomial {
                x,
                num_samples,
                replacement,
                seed,
            } => {
                let x = self.reference(*x);
                let s = so();
                let (k, seed) = (self.index_arg(num_samples), self.index_arg(seed));
                quote!(#x.multinomial::<#s>(#k, #replacement, #seed)?)
            }
            Op::Dropout { x, p, seed } => {
                let x = self.reference(*x);
                let seed = self.index_arg(seed);
                quote!(#x.dropout(#p, true, #seed)?)
            }
            Op::PoolBackward { x, grad, pool } => {
                let (x, g) = (self.reference(*x), self.reference(*grad));
                let args = pool_args(pool);
                quote!(#x.pool2d_backward(#g, #args)?)
            }
            Op::CrossEntropy {
                x,
                target,
                reduction,
                ignore_index,
                label_smoothing,
            } => {
                let (xr, t) = (self.reference(*x), self.rows_target(*x, *target));
                let s = so();
                let args = xent_args(reduction, *ignore_index, *label_smoothing);
                quote!(#xr.cross_entropy::<#s, _>(#t, #args)?)
            }
            Op::CrossEntropyBackward {
                x,
                target,
                grad,
                reduction,
                ignore_index,
                label_smoothing,
            } => {
                let (xr, t) = (self.reference(*x), self.rows_target(*x, *target));
                let g = self.reference(*grad);
                let args = xent_args(reduction, *ignore_index, *label_smoothing);
                quote!(#xr.cross_entropy_backward(#t, #g, #args)?)
            }
            Op::Conv {
                x,
                weight,
                bias,
                args,
                spatial,
            } => {
                let (xr, wr) = (self.reference(*x), self.reference(*weight));
                // The bias as the typed method takes it: of the type of
                // the weight's first dim.
                let b = match bias {
                    Some(b) => {
                        let co = vec![self.dim_tys(*weight)[0].clone()];
                        let r = self.reference(*b);
                        let r = if self.dim_tys(*b) == co {
                            r
                        } else {
                            let s = shape_tokens(&co);
                            quote!(&::core::clone::Clone::clone(#r).into_shape::<#s>()?)
                        };
                        quote!(::core::option::Option::Some(#r))
                    }
                    None => quote!(::core::option::Option::None),
                };
                let s = so();
                let a = conv_args(args, *spatial);
                let m = format_ident!("conv{}d", spatial);
                quote!({
                    let y: ::tensorfn::Tensor<_, _, #s> = #xr.#m(#wr, #b, #a)?;
                    y
                })
            }
            Op::ConvBackward {
                x,
                weight,
                grad,
                args,
                spatial,
                input,
            } => {
                let (xr, wr) = (self.reference(*x), self.reference(*weight));
                let g = self.reference(*grad);
                let a = conv_args(args, *spatial);
                let which = if *input { "input" } else { "weight" };
                let m = format_ident!("conv{}d_backward_{}", spatial, which);
                quote!(#xr.#m(#wr, #g, #a)?)
            }
            Op::Embedding { ids, weight } => {
                let (ids, w) = (self.reference(*ids), self.reference(*weight));
                let s = so();
                quote!(::tensorfn::Tensor::<_, _, #s>::embedding(#ids, #w)?)
            }
            Op::Select {
                x,
                dim,
                index,
                gather,
            } => {
                let (x, i) = (self.reference(*x), self.reference(*index));
                let s = so();
                if *gather {
                    quote!(#x.gather::<#dim, #s>(#i)?)
                } else {
                    quote!(#x.index_select::<#dim, #s>(#i)?)
                }
            }
            Op::ScatterAdd {
                x,
                dim,
                index,
                src,
                alpha,
                index_add,
            } => {
                let (i, s) = (self.reference(*index), self.reference(*src));
                if self.g().is_zero_block(*x) {
                    // Zeros are never written before the scatter.
                    let ty = self.type_of(n);
                    let d = dims_array(&self.tty(n).dims, self.symbols());
                    return if *index_add {
                        quote!(<#ty>::index_add_to_zeros::<#dim>(&#d, #i, #s, #alpha)?)
                    } else {
                        quote!(<#ty>::scatter_add_to_zeros::<#dim>(&#d, #i, #s)?)
                    };
                }
                let x = self.reference(*x);
                if *index_add {
                    quote!(#x.index_add::<#dim>(#i, #s, #alpha)?)
                } else {
                    quote!(#x.scatter_add::<#dim>(#i, #s)?)
                }
            }
            Op::Arange { start } => {
                let t = self.tty(n);
                let dev = device_tokens(t.device);
                let dims = dims_array(&t.dims, self.symbols());
                let first = dim_value(start, self.symbols());
                let s = so();
                quote!(::tensorfn::Tensor::<#dev, i64, #s>::arange_dims((#first) as i64, 1, &#dims)?)
            }
            Op::Triangle { x, upper, diagonal } => {
                let x = self.reference(*x);
                let m = if *upper { quote!(triu) } else { quote!(tril) };
                quote!(#x.#m(#diagonal)?)
            }
            Op::ToDevice(x, d) => {
                let x = self.reference(*x);
                let d = device_tokens(*d);
                quote!(#x.to_device::<#d>()?)
            }
            Op::Call {
                callee,
                args,
                generics,
                param_tys,
                ret_tys,
                structs,
                ..
            } => {
                let callee_ast = self.ctx.fns[*callee];
                let sig = self.ctx.sigs[*callee]
                    .as_ref()
                    .expect("called functions have signatures");
                let name = &callee_ast.name;
                let const_args: Vec<TokenStream> = generics
                    .iter()
                    .map(|d| dim_value(d, self.symbols()))
                    .collect();
                let turbofish = if const_args.is_empty() {
                    quote!()
                } else {
                    let const_args = generics.iter().map(|d| match d.as_constant() {
                        Some(c) => {
                            let l = Literal::usize_unsuffixed(c as usize);
                            quote!(#l)
                        }
                        None => {
                            let s = d.as_symbol().expect("a generic or a `const` item");
                            let i = types::sym_tokens(s);
                            match s.contains("::") {
                                true => quote!({ #i }),
                                false => quote!(#i),
                            }
                        }
                    });
                    // Type parameters are inferred from the arguments.
                    let types = sig.type_params.iter().map(|_| quote!(_));
                    quote!(::<#(#types,)* #(#const_args),*>)
                };
                // The used fields of parameter structs are the callee's to
                // bind: only the written parameters are passed.
                let argv: Vec<TokenStream> = args
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| sig.field_paths[*i].is_none())
                    .map(|(i, &a)| match (&sig.params[i], &param_tys[i]) {
                        (ParamSig::Tensor(_), Some(want)) => {
                            let r = self.reference(a);
                            if self.dim_tys(a) == *want {
                                r
                            } else {
                                let s = shape_tokens(want);
                                quote!(&::core::clone::Clone::clone(#r).into_shape::<#s>()?)
                            }
                        }
                        (ParamSig::Scalar(ScalarKind::Usize), _) => self.scalar_usize(a),
                        (ParamSig::Scalar(ScalarKind::DType(d)), _) => self.scalar_as(a, *d),
                        (ParamSig::Struct(_), _) => {
                            let (_, text) = structs
                                .iter()
                                .find(|(j, _)| *j == i)
                                .expect("the checker records every struct passed");
                            let v = crate::structs::struct_var(text);
                            quote!(#v)
                        }
                        (ParamSig::Tensor(_), None) => {
                            unreachable!("tensor parameters have types")
                        }
                    })
                    .collect();
                let call = quote!(#name #turbofish(#(#argv),*)?);
                match &node.ty {
                    Ty::Tuple(_) => call,
                    _ => {
                        if self.dim_tys(n) == ret_tys[0] {
                            call
                        } else {
                            let s = so();
                            quote!(#call.into_shape::<#s>()?)
                        }
                    }
                }
            }
            Op::External { path, args } => {
                let argv = args.iter().map(|&a| match &g.nodes[a].ty {
                    Ty::Scalar(_) => self.scalar_native(a),
                    _ => self.reference(a),
                });
                // The annotation fixes the result's shape type, whatever
                // shape type the function returns (checked at run time).
                let s = so();
                quote!(#path(#(#argv),*)?.into_shape::<#s>()?)
            }
            Op::TupleGet(x, i) => {
                let t = var(*x);
                let idx = syn::Index::from(*i);
                let Op::Call { ret_tys, .. } = &g.nodes[*x].op else {
                    // The gradients of an attention or a norm: typed like its
                    // operands' values, retyped to this node's shape.
                    let s = so();
                    return quote!(#t.#idx.into_shape::<#s>()?);
                };
                if self.dim_tys(n) == ret_tys[*i] {
                    quote!(#t.#idx)
                } else {
                    let s = so();
                    quote!(#t.#idx.into_shape::<#s>()?)
                }
            }
            Op::RowKernel { kernel, args } => self.row_kernel(n, *kernel, args),
            other => unreachable!("not a runtime call: {other:?}"),
        }
    }
}

impl FnGen<'_> {
    /// `topk` along `dim`: the typed `topk` (`topk_smallest` for
    /// `largest = false`) runs along the last dim, so another dim is
    /// swapped to the end and the results swapped back (and made
    /// contiguous, as the plan expects of a tuple's parts).
    fn topk(&self, n: NodeId, x: NodeId, k: &IndexArg, dim: usize, largest: bool) -> TokenStream {
        let Ty::Tuple(parts) = &self.g().nodes[n].ty else {
            unreachable!("topk is a tuple")
        };
        let shape = |dims: &[Dim]| shape_tokens(&self.symbols().dim_tys(dims));
        let xr = self.reference(x);
        let k = self.index_arg(k);
        let last = self.tty(x).dims.len() - 1;
        let pick = if largest {
            quote!(topk)
        } else {
            quote!(topk_smallest)
        };
        if dim == last {
            let s = shape(&parts[0].dims);
            return quote!(#xr.#pick::<#s>(#k)?);
        }
        let mut xd = self.tty(x).dims.clone();
        xd.swap(dim, last);
        let mut od = parts[0].dims.clone();
        od.swap(dim, last);
        let (sx, so, s) = (shape(&xd), shape(&od), shape(&parts[0].dims));
        quote!({
            let (v, i) = #xr.transpose::<#sx>(#dim, #last)?.#pick::<#so>(#k)?;
            (
                v.transpose::<#s>(#dim, #last)?.contiguous()?,
                i.transpose::<#s>(#dim, #last)?.contiguous()?,
            )
        })
    }
}
