//! The planner: fusion groups, materialised values, drops and peak memory.

use proc_macro2::TokenStream;
use quote::quote;
use tensorfn_macros_impl::plan::{GroupInput, Plan, Step};
use tensorfn_macros_impl::shape::Dim;

fn plan(input: TokenStream) -> (Plan, tensorfn_macros_impl::check::CheckedFn) {
    let mut a = tensorfn_macros_impl::analyse_tokens(input).expect("parses");
    assert!(
        a.errors.is_empty(),
        "{:?}",
        a.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>()
    );
    let p = a.plans.pop().flatten().expect("a plan");
    let c = a.checked.pop().flatten().expect("checked");
    (p, c)
}

fn fused(p: &Plan) -> Vec<&tensorfn_macros_impl::plan::FusedGroup> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Fused(g) => Some(g),
            _ => None,
        })
        .collect()
}

fn ops(p: &Plan, c: &tensorfn_macros_impl::check::CheckedFn) -> Vec<String> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Op(n) => Some(
                format!("{:?}", c.graph.nodes[*n].op)
                    .split(['(', ' ', '{'])
                    .next()
                    .unwrap_or("")
                    .to_string(),
            ),
            _ => None,
        })
        .collect()
}

fn peak(p: &Plan) -> i64 {
    let c = p.peak.as_ref().expect("a known peak");
    assert_eq!(c.len(), 1, "{c:?}");
    c[0].as_constant().expect("static")
}

#[test]
fn an_elementwise_chain_is_one_kernel() {
    let (p, _) = plan(quote! {
        fn f(x: &Tensor<Cpu, f32, [8, 4]>) -> Tensor<Cpu, f32, [8, 4]> { sin(x) * 2.0 + 5.0 }
    });
    let g = fused(&p);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].inputs.len(), 1);
    assert_eq!(g[0].members.len(), 3);
    for x in [-1.5, 0.0, 0.3, 2.0] {
        assert!(
            (g[0].kernel.as_ref().unwrap().eval_f64(&[x]) - (f64::sin(x) * 2.0 + 5.0)).abs()
                < 1e-12
        );
    }
    assert_eq!(peak(&p), 8 * 4 * 4);
}

#[test]
fn broadcasts_casts_kernels_and_scalars_fuse_together() {
    let (p, _) = plan(quote! {
        #[kernel]
        fn leaky(x: f32, slope: f32) -> f32 { if x > 0.0 { x } else { x * slope } }
        fn f(a: &Tensor<Cpu, f16, [3, 1]>, b: &Tensor<Cpu, f32, [1, 4]>, s: f32) -> Tensor<Cpu, f16, [3, 4]> {
            (leaky(a.cast::<f32>() + b, 0.1) * s).cast::<f16>()
        }
    });
    let g = fused(&p);
    assert_eq!(g.len(), 1, "{:?}", p.steps);
    let inputs = &g[0].inputs;
    assert_eq!(inputs.len(), 3);
    assert!(matches!(inputs[2], GroupInput::Scalar { .. }));
    let want = |a: f64, b: f64, s: f64| {
        let x = a + b;
        (if x > 0.0 { x } else { x * 0.1 }) * s
    };
    for (a, b, s) in [(1.0, 2.0, 3.0), (-4.0, 1.0, 0.5), (0.0, -2.0, 2.0)] {
        assert!((g[0].kernel.as_ref().unwrap().eval_f64(&[a, b, s]) - want(a, b, s)).abs() < 1e-6);
    }
}

#[test]
fn values_read_by_other_operations_are_materialised() {
    let (p, c) = plan(quote! {
        fn f(x: &Tensor<Cpu, f32, [4, 4]>, w: &Tensor<Cpu, f32, [4, 4]>) -> Tensor<Cpu, f32, [4, 4]> {
            let h = relu(x);
            matmul(h, w) + h
        }
    });
    let g = fused(&p);
    assert_eq!(g.len(), 2, "{:?}", p.steps);
    assert_eq!(ops(&p, &c), vec!["MatMul"]);
    // relu(x) -> matmul -> add(matmul, relu): relu is an input of the add.
    assert_eq!(g[1].inputs.len(), 2);
    // h, the product and the sum (the product dies with the sum's write).
    assert_eq!(peak(&p), 3 * 64);
}

#[test]
fn a_value_used_twice_inside_one_kernel_stays_inside() {
    let (p, _) = plan(quote! {
        fn f(x: &Tensor<Cpu, f32, [16]>) -> Tensor<Cpu, f32, [16]> {
            let h = sin(x);
            let g = h * 2.0;
            g + h * h
        }
    });
    let g = fused(&p);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].inputs.len(), 1);
}

#[test]
fn more_than_eight_inputs_are_split() {
    let (p, _) = plan(quote! {
        fn f(a: &Tensor<Cpu, f32, [4]>, b: &Tensor<Cpu, f32, [4]>, c: &Tensor<Cpu, f32, [4]>, d: &Tensor<Cpu, f32, [4]>,
             e: &Tensor<Cpu, f32, [4]>, f: &Tensor<Cpu, f32, [4]>, g: &Tensor<Cpu, f32, [4]>, h: &Tensor<Cpu, f32, [4]>,
             i: &Tensor<Cpu, f32, [4]>, j: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> {
            a + b + c + d + e + f + g + h + i + j
        }
    });
    let g = fused(&p);
    assert!(g.len() >= 2);
    assert!(g.iter().all(|g| g.inputs.len() <= 8));
}

#[test]
fn drops_follow_last_uses_and_views_keep_buffers_alive() {
    let (p, c) = plan(quote! {
        fn f(x: &Tensor<Cpu, f32, [4, 8]>, w: &Tensor<Cpu, f32, [8, 8]>) -> Tensor<Cpu, f32, [8]> {
            let y = matmul(x, w);
            let t = y.t();
            let z = exp(t);
            z.sum(1)
        }
    });
    let dropped: Vec<String> = p
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Drop(n) => Some(c.graph.nodes[*n].text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(dropped, vec!["matmul(x, w)", "y.t()", "exp(t)"]);
    // y (128) + exp (128) live together; then exp + sum (32).
    assert_eq!(peak(&p), 256);
}

#[test]
fn peak_of_generic_functions_is_a_polynomial() {
    let (p, _) = plan(quote! {
        fn dense<const B: usize>(x: &Tensor<Cuda, f16, [B, 784]>, w: &Tensor<Cuda, f16, [784, 128]>, b: &Tensor<Cuda, f16, [128]>)
            -> Tensor<Cuda, f16, [B, 128]> { relu(addmm(b, x, w)) }
    });
    let c = p.peak.expect("known");
    // The ReLU is the product's epilogue (`fold_activations`): the result
    // is the one buffer, B * 128 f16 values.
    assert_eq!(c, vec![Dim::sym("B").mul(&Dim::constant(256))]);
}

#[test]
fn calls_add_the_callee_peak() {
    let (p, c) = plan(quote! {
        fn inner(x: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N]> { let a = exp(x); matmul(a.reshape([N, 1]), a.reshape([1, N])).sum(0) }
        fn outer(x: &Tensor<Cpu, f32, [10]>) -> Tensor<Cpu, f32, [10]> { let y = x * 2.0; inner(y) }
    });
    assert!(ops(&p, &c).contains(&"Call".to_string()));
    // inner: exp (40) with the product (400), then the product with the
    // sum (40): 440. outer: y (40) stays alive during the call.
    assert_eq!(peak(&p), 40 + 440);
    let (p, _) = plan(quote! {
        fn outer(x: &Tensor<Cpu, f32, [10]>) -> Tensor<Cpu, f32, [10]> { let y: Tensor<Cpu, f32, [10]> = elsewhere(x); y }
    });
    assert!(p.peak.is_none());
}

#[test]
fn reshape_of_a_parameter_counts_a_possible_copy_but_views_do_not() {
    let (p, _) = plan(quote! {
        fn f(x: &Tensor<Cpu, f32, [4, 8]>) -> (Tensor<Cpu, f32, [32]>, Tensor<Cpu, f32, [32]>) {
            (x.reshape([32]), x.view([-1]))
        }
    });
    assert_eq!(peak(&p), 128);
}

#[test]
fn values_the_results_do_not_need_are_not_computed() {
    let (p, c) = plan(quote! {
        fn f(x: &Tensor<Cpu, f32, [4, 4]>, w: &Tensor<Cpu, f32, [4, 4]>) -> Tensor<Cpu, f32, [4, 4]> {
            let unused = matmul(x, w);
            let h = relu(x);
            let _also = exp(h);
            h * 2.0
        }
    });
    assert!(ops(&p, &c).is_empty());
    let g = fused(&p);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].members.len(), 2);
}

fn row_steps(p: &Plan) -> Vec<&tensorfn_macros_impl::plan::RowStep> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Rows(r) => Some(r),
            _ => None,
        })
        .collect()
}

#[test]
fn elementwise_neighbours_fold_into_a_row_kernel() {
    let (p, c) = plan(quote! {
        #[kernel]
        fn rms(x: Row<f32>, w: Row<f32>, eps: f32) -> Row<f32> { x * rsqrt(mean(x * x) + eps) * w }
        fn f(x: &Tensor<Cpu, f32, [4, 8]>, r: &Tensor<Cpu, f32, [4, 8]>, w: &Tensor<Cpu, f32, [8]>,
             g: &Tensor<Cpu, f32, [4, 8]>, v: &Tensor<Cpu, f32, [8, 8]>, s: f32) -> Tensor<Cpu, f32, [4, 8]> {
            let m = matmul(x, v);
            rms(x + r * s, w, 1e-6) * g + m
        }
    });
    // The matmul, then one step for the sum, the norm and the gate.
    assert!(fused(&p).is_empty(), "{:?}", p.steps);
    let rows = row_steps(&p);
    assert_eq!(rows.len(), 1, "{:?}", p.steps);
    let r = rows[0];
    assert_eq!(r.producers.len(), 1);
    assert_eq!(r.producers[0].0, 0);
    assert_eq!(r.producers[0].1.inputs.len(), 3);
    let consumer = r.consumer.as_ref().expect("the gate folded in");
    assert_eq!(consumer.inputs.len(), 3, "{consumer:?}");
    assert_eq!(Some(&r.out()), c.ret.last());
    // The row step runs after the matmul its consumer reads.
    let at = |want: &dyn Fn(&Step) -> bool| p.steps.iter().position(want).unwrap();
    assert!(at(&|s| matches!(s, Step::Op(_))) < at(&|s| matches!(s, Step::Rows(_))));
}

#[test]
fn row_kernel_neighbours_read_elsewhere_stay_apart() {
    let (p, _) = plan(quote! {
        #[kernel]
        fn rms(x: Row<f32>, w: Row<f32>, eps: f32) -> Row<f32> { x * rsqrt(mean(x * x) + eps) * w }
        #[kernel]
        fn total(x: Row<f32>) -> f32 { sum(x) }
        fn f(x: &Tensor<Cpu, f32, [4, 8]>, w: &Tensor<Cpu, f32, [8]>, b: &Tensor<Cpu, f16, [4, 8]>)
            -> (Tensor<Cpu, f32, [4, 8]>, Tensor<Cpu, f32, [4, 8]>, Tensor<Cpu, f32, [4]>) {
            let h = x + 1.0;
            let y = rms(h, w, 1e-6);
            // A row of another dtype, and a per-row result: not folded.
            (y, h * 2.0, total(x * b.cast::<f32>()) * 3.0)
        }
    });
    // `h`, `h * 2`, the product of mixed dtypes and the scaled totals.
    assert_eq!(fused(&p).len(), 4, "{:?}", p.steps);
    assert!(row_steps(&p).is_empty(), "{:?}", p.steps);
}

#[test]
fn a_costly_op_on_a_broadcast_operand_runs_once_per_element_of_its_own() {
    // The eval batch norm's `rsqrt(var + eps)` is per channel: a kernel of
    // 64 elements, read broadcast by the `[N, 64, 56, 56]` kernel, instead
    // of a square root and a division for every element of the input.
    let (p, c) = plan(quote! {
        fn f(x: &Tensor<Cuda, bf16, [N, 64, 56, 56]>, m: &Tensor<Cuda, bf16, [64]>,
             v: &Tensor<Cuda, bf16, [64]>, w: &Tensor<Cuda, bf16, [64]>,
             b: &Tensor<Cuda, bf16, [64]>) -> Tensor<Cuda, bf16, [N, 64, 56, 56]> {
            relu(batch_norm(x, m, v, w, b))
        }
    });
    let g = fused(&p);
    assert_eq!(g.len(), 2, "{:?}", p.steps);
    let dims = |gr: &tensorfn_macros_impl::plan::FusedGroup| match &c.graph.nodes[gr.out].ty {
        tensorfn_macros_impl::graph::Ty::Tensor(t) => t.dims.clone(),
        other => panic!("{other:?}"),
    };
    let per_channel = [Dim::constant(64), Dim::constant(1), Dim::constant(1)];
    assert_eq!(dims(g[0]), per_channel);
    assert_eq!(g[0].members.len(), 2, "var + eps, then rsqrt");
    assert_eq!(dims(g[1]).len(), 4);
    // 1 / sqrt(0.25 + eps) per channel, and the same value through both.
    let k = g[0].kernel.as_ref().unwrap();
    let want = 1.0 / (0.25f64 + 1e-5).sqrt();
    assert!((k.eval_f64(&[0.25]) - want).abs() < want * 2f64.powi(-7));

    // A cheap op on a broadcast operand still fuses.
    let (p, _) = plan(quote! {
        fn f(x: &Tensor<Cpu, f32, [8, 4]>, b: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [8, 4]> {
            x + (-b)
        }
    });
    assert_eq!(fused(&p).len(), 1, "{:?}", p.steps);
}

/// The fused products (`Op::MatMulSumK`, as `of_b`) of every planned
/// instance: of the plain functions, or of the `#[grad]` joints.
fn sum_k_folds(input: TokenStream, joint: bool) -> Vec<bool> {
    use tensorfn_macros_impl::graph::Op;
    let a = tensorfn_macros_impl::analyse_tokens(input).expect("parses");
    assert!(
        a.errors.is_empty(),
        "{:?}",
        a.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>()
    );
    let all = if joint { &a.joints } else { &a.planned };
    let p = &all.iter().flatten().next().expect("a plan")[0];
    // Both parts are taken from the tuple, in order after it.
    for (id, n) in p.f.graph.nodes.iter().enumerate() {
        if let Op::TupleGet(t, _) = n.op {
            assert!(t < id);
        }
    }
    p.f.graph
        .nodes
        .iter()
        .filter_map(|n| match n.op {
            Op::MatMulSumK { of_b, .. } => Some(of_b),
            _ => None,
        })
        .collect()
}

#[test]
fn a_linear_layers_bias_gradient_joins_its_weight_gradient() {
    // GPT-2's `addmm(b, x, w)` with `w` `[in, out]`: `xᵀ g` and the
    // column sums of `g`, in any float dtype.
    for dt in [quote!(bf16), quote!(f32)] {
        let folds = sum_k_folds(
            quote! {
                #[grad(w, b)]
                fn loss(x: &Tensor<Cuda, #dt, [8, 64]>, w: &Tensor<Cuda, #dt, [64, 32]>,
                        b: &Tensor<Cuda, #dt, [32]>) -> Tensor<Cuda, #dt, []> {
                    gelu(addmm(b, x, w)).sum()
                }
            },
            true,
        );
        assert_eq!(folds, vec![true]);
    }
    // Written out, and in the `gᵀ x` order (a weight stored `[out, in]`).
    let src = |w_grad: TokenStream| {
        quote! {
            fn grads(x: &Tensor<Cpu, f32, [16, 4]>, g: &Tensor<Cpu, f32, [16, 8]>)
                -> (Tensor<Cpu, f32, [8, 4]>, Tensor<Cpu, f32, [8]>, Tensor<Cpu, f32, [4, 8]>) {
                (#w_grad, g.sum(0), matmul(x.t(), g))
            }
        }
    };
    assert_eq!(
        sum_k_folds(src(quote!(matmul(g.t(), x))), false),
        vec![false]
    );
}

#[test]
fn bias_gradients_stay_apart_where_no_product_shares_their_rows() {
    // No bias to differentiate: the sum is never computed.
    let none = quote! {
        #[grad(w)]
        fn loss(x: &Tensor<Cuda, bf16, [8, 64]>, w: &Tensor<Cuda, bf16, [64, 32]>,
                b: &Tensor<Cuda, bf16, [32]>) -> Tensor<Cuda, bf16, []> {
            addmm(b, x, w).sum()
        }
    };
    assert!(sum_k_folds(none, true).is_empty());
    // A sum over the other dim, and a product of another tensor.
    let apart = quote! {
        fn f(x: &Tensor<Cpu, f32, [16, 4]>, g: &Tensor<Cpu, f32, [16, 8]>, h: &Tensor<Cpu, f32, [16, 8]>)
            -> (Tensor<Cpu, f32, [4, 8]>, Tensor<Cpu, f32, [16]>, Tensor<Cpu, f32, [8]>) {
            (matmul(x.t(), g), g.sum(1), h.sum(0))
        }
    };
    assert!(sum_k_folds(apart, false).is_empty());
    // A batched product (a `[B, S, C]` input) is not one matrix.
    let batched = quote! {
        #[grad(w, b)]
        fn loss(x: &Tensor<Cuda, bf16, [2, 8, 64]>, w: &Tensor<Cuda, bf16, [64, 32]>,
                b: &Tensor<Cuda, bf16, [32]>) -> Tensor<Cuda, bf16, []> {
            (matmul(x, w) + b).sum()
        }
    };
    assert!(sum_k_folds(batched, true).is_empty());
}

#[test]
fn a_product_read_only_transposed_is_written_in_that_layout() {
    use tensorfn_macros_impl::graph::Op;
    // A tied output projection (`matmul(h, head.t())`): the weight's
    // gradient `(hᵀ g)ᵀ` is the product `gᵀ h`, not a transposed view.
    let a = tensorfn_macros_impl::analyse_tokens(quote! {
        #[grad(head)]
        fn loss(h: &Tensor<Cuda, bf16, [16, 4]>, head: &Tensor<Cuda, bf16, [8, 4]>)
            -> Tensor<Cuda, bf16, []> {
            matmul(h, head.t()).sum()
        }
    })
    .unwrap();
    assert!(a.errors.is_empty());
    let p = &a.joints[0].as_ref().unwrap()[0];
    let g = &p.f.graph;
    let transposed_products = |g: &tensorfn_macros_impl::graph::Graph| {
        g.nodes
            .iter()
            .filter(|n| matches!(n.op, Op::T(x) if matches!(g.nodes[x].op, Op::MatMul(..))))
            .count()
    };
    assert_eq!(transposed_products(g), 0);
    let grad = *p.f.ret.last().unwrap();
    assert!(
        matches!(g.nodes[grad].op, Op::MatMul(..)),
        "{:?}",
        g.nodes[grad].op
    );
    assert_eq!(g.nodes[grad].ty.tensor().unwrap().dims.len(), 2);
    // A product also read as it is stays one product and a view.
    let a = tensorfn_macros_impl::analyse_tokens(quote! {
        fn both(h: &Tensor<Cpu, f32, [16, 4]>, g: &Tensor<Cpu, f32, [16, 8]>)
            -> (Tensor<Cpu, f32, [8, 4]>, Tensor<Cpu, f32, [4, 8]>) {
            let p = matmul(h.t(), g);
            (p.t(), p)
        }
    })
    .unwrap();
    let planned = &a.planned[0].as_ref().unwrap()[0];
    assert_eq!(transposed_products(&planned.f.graph), 1);
    // Alone, it is swapped.
    let a = tensorfn_macros_impl::analyse_tokens(quote! {
        fn one(h: &Tensor<Cpu, f32, [16, 4]>, g: &Tensor<Cpu, f32, [16, 8]>) -> Tensor<Cpu, f32, [8, 4]> {
            matmul(h.t(), g).t()
        }
    })
    .unwrap();
    let planned = &a.planned[0].as_ref().unwrap()[0];
    assert_eq!(transposed_products(&planned.f.graph), 0);
}

/// The nodes of the first `#[grad]` joint's plan that run as their own
/// call, with the joint.
fn joint_ops(input: TokenStream) -> (Vec<String>, tensorfn_macros_impl::Planned) {
    let mut a = tensorfn_macros_impl::analyse_tokens(input).expect("parses");
    assert!(
        a.errors.is_empty(),
        "{:?}",
        a.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>()
    );
    let p = a.joints.swap_remove(0).expect("a joint").swap_remove(0);
    (ops(&p.plan, &p.f), p)
}

#[test]
fn slices_gradients_that_cover_their_tensor_are_joined_once() {
    use tensorfn_macros_impl::graph::Op;
    // GPT-2's attention: `q`, `k`, `v` cut out of one `[B, T, 3, H, D]`
    // projection; its gradient is one `cat` of the three slots.
    let (ops, p) = joint_ops(quote! {
        #[grad(x, w)]
        fn block(x: &Tensor<Cuda, bf16, [2, 16, 64]>, w: &Tensor<Cuda, bf16, [64, 192]>)
            -> Tensor<Cuda, bf16, []> {
            let qkv = matmul(x.reshape([32, 64]), w).reshape([2, 16, 3, 4, 16]);
            let q = qkv.narrow(2, 0, 1).reshape([2, 16, 4, 16]).permute([0, 2, 1, 3]);
            let k = qkv.narrow(2, 1, 1).reshape([2, 16, 4, 16]).permute([0, 2, 1, 3]);
            let v = qkv.narrow(2, 2, 1).reshape([2, 16, 4, 16]).permute([0, 2, 1, 3]);
            let heads = scaled_dot_product_attention(q, k, v, is_causal = true);
            heads.permute([0, 2, 1, 3]).reshape([32, 64]).sum()
        }
    });
    assert_eq!(ops.iter().filter(|o| *o == "Cat").count(), 1, "{ops:?}");
    let cat = p
        .plan
        .steps
        .iter()
        .find_map(|s| match s {
            Step::Op(n) if matches!(p.f.graph.nodes[*n].op, Op::Cat { .. }) => Some(*n),
            _ => None,
        })
        .unwrap();
    let Op::Cat { xs, dim } = &p.f.graph.nodes[cat].op else {
        unreachable!()
    };
    assert_eq!((xs.len(), *dim), (3, 2));
    // No sum of whole gradients is left (the one kernel casts the seed).
    assert!(
        fused(&p.plan).iter().all(|g| g.inputs.len() == 1),
        "{:?}",
        p.plan.steps
    );
    // The slots in `cat` order: `q`'s gradient first, though it was
    // accumulated last.
    let slot_of = |x: usize| {
        let mut x = x;
        loop {
            match p.f.graph.nodes[x].op {
                Op::TupleGet(_, i) => return i,
                Op::Reshape { x: y, .. } | Op::Permute(y, _) => x = y,
                ref op => panic!("{op:?}"),
            }
        }
    };
    assert_eq!(
        xs.iter().map(|&x| slot_of(x)).collect::<Vec<_>>(),
        [0, 1, 2]
    );
}

#[test]
fn slices_gradients_with_overlaps_gaps_or_other_readers_stay_sums() {
    // The number of `cat` calls in the joint.
    let cats = |body: TokenStream| {
        let (ops, _) = joint_ops(quote! {
            #[grad(x)]
            fn f(x: &Tensor<Cpu, f32, [4, 6]>) -> Tensor<Cpu, f32, []> { #body }
        });
        ops.iter().filter(|o| *o == "Cat").count()
    };
    // Disjoint and covering: one `cat`.
    assert_eq!(
        cats(quote!((x.narrow(1, 0, 2) * x.narrow(1, 2, 2)
            + x.narrow(1, 4, 2))
        .sum())),
        1
    );
    // Overlapping slices are added.
    assert_eq!(
        cats(quote!((x.narrow(1, 0, 3) * x.narrow(1, 2, 3)).sum())),
        2
    );
    // A gap: columns 2 and 3 get zeros.
    assert_eq!(
        cats(quote!((x.narrow(1, 0, 2) * x.narrow(1, 4, 2)).sum())),
        2
    );
    // `x` also read whole: its gradient adds `g` to the slices'.
    assert_eq!(
        cats(quote!(
            (x.narrow(1, 0, 3) * x.narrow(1, 3, 3)).sum() + x.sum()
        )),
        2
    );
    // Slices of slices: the inner ones (rows) keep their zero blocks,
    // the outer halves (columns) cover `x` and are joined (3 `cat`s, not
    // 4 and a sum).
    assert_eq!(
        cats(quote!((x.narrow(1, 0, 3).narrow(0, 0, 2)
            * x.narrow(1, 3, 3).narrow(0, 2, 2))
        .sum())),
        3
    );
}

#[test]
fn scatters_into_zeros_do_not_compute_the_zeros() {
    use tensorfn_macros_impl::graph::Op;
    // An embedding's gradient is an `index_add` into zeros, and
    // `gather`'s a `scatter_add` into zeros: the zero block (a 0-d
    // `arange` cast and expanded) is not an operand, so it is neither
    // computed nor copied, and expansion allocates the output.
    for body in [
        quote!(embedding(ids, w).sum()),
        quote!(w
            .gather(1, ids.reshape([4, 1]).expand([4, 1]).narrow(0, 0, 4))
            .sum()),
    ] {
        let (ops, p) = joint_ops(quote! {
            #[grad(w)]
            fn f(ids: &Tensor<Cuda, i64, [4]>, w: &Tensor<Cuda, bf16, [9, 6]>)
                -> Tensor<Cuda, bf16, []> { #body }
        });
        assert_eq!(
            ops.iter().filter(|o| *o == "ScatterAdd").count(),
            1,
            "{ops:?}"
        );
        let scatter = scatter_node(&p.f.graph);
        let Op::ScatterAdd { x, index, src, .. } = p.f.graph.nodes[scatter].op else {
            unreachable!()
        };
        assert!(p.f.graph.is_zero_block(x));
        assert_eq!(p.f.graph.inputs(scatter), vec![index, src]);
        // No step computes the zero block or the scalar it expands (the
        // `arange` left is the seed's 1 of the `sum`).
        let Op::Expand(c) = p.f.graph.nodes[x].op else {
            unreachable!()
        };
        let run = |n: usize| {
            p.plan.steps.iter().any(|s| match s {
                Step::Op(m) => *m == n,
                Step::Fused(g) => g.members.contains(&n),
                _ => false,
            })
        };
        assert!(!run(x) && !run(c), "{:?}", p.plan.steps);
    }
    // A scatter into a value it was given reads that value.
    let (ops, p) = joint_ops(quote! {
        #[grad(x)]
        fn f(ids: &Tensor<Cpu, i64, [4]>, x: &Tensor<Cpu, f32, [9, 6]>, s: &Tensor<Cpu, f32, [4, 6]>)
            -> Tensor<Cpu, f32, []> { x.index_add(0, ids, s).sum() }
    });
    assert_eq!(
        p.f.graph.inputs(scatter_node(&p.f.graph)).len(),
        3,
        "{ops:?}"
    );
}

/// The graph's one `ScatterAdd` node.
fn scatter_node(g: &tensorfn_macros_impl::graph::Graph) -> usize {
    g.nodes
        .iter()
        .position(|n| matches!(n.op, tensorfn_macros_impl::graph::Op::ScatterAdd { .. }))
        .expect("a scatter")
}

/// The folded GELU products of the first `#[grad]` joint:
/// (`AddMmGeluAux` count, each `MatMulDGelu`'s `sums`, each
/// `MatMulSumK`'s `of_b`).
fn gelu_folds(input: TokenStream) -> (usize, Vec<bool>, Vec<bool>) {
    use tensorfn_macros_impl::graph::Op;
    let a = tensorfn_macros_impl::analyse_tokens(input).expect("parses");
    assert!(
        a.errors.is_empty(),
        "{:?}",
        a.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>()
    );
    let p = &a.joints.iter().flatten().next().expect("a joint")[0];
    for (id, n) in p.f.graph.nodes.iter().enumerate() {
        if let Op::TupleGet(t, _) = n.op {
            assert!(t < id);
        }
    }
    let nodes = &p.f.graph.nodes;
    (
        nodes
            .iter()
            .filter(|n| matches!(n.op, Op::AddMmGeluAux { .. }))
            .count(),
        nodes
            .iter()
            .filter_map(|n| match n.op {
                Op::MatMulDGelu { sums, .. } => Some(sums),
                _ => None,
            })
            .collect(),
        nodes
            .iter()
            .filter_map(|n| match n.op {
                Op::MatMulSumK { of_b, .. } => Some(of_b),
                _ => None,
            })
            .collect(),
    )
}

/// A GPT-2 MLP: `gelu(addmm(b1, x, w1))` then `addmm(b2, h, w2)`, with
/// the activation and dtype given and the parameters `grads` asks for.
fn mlp(act: TokenStream, dt: TokenStream, grads: TokenStream) -> TokenStream {
    quote! {
        #[grad(#grads)]
        fn loss(x: &Tensor<Cuda, #dt, [16, 8]>, w1: &Tensor<Cuda, #dt, [8, 32]>,
                b1: &Tensor<Cuda, #dt, [32]>, w2: &Tensor<Cuda, #dt, [32, 8]>,
                b2: &Tensor<Cuda, #dt, [8]>) -> Tensor<Cuda, #dt, []> {
            addmm(b2, #act(addmm(b1, x, w1)), w2).sum()
        }
    }
}

#[test]
fn gelus_backward_joins_the_product_of_its_upstream_gradient() {
    // The forward keeps the pre-activation from the product; the
    // backward's `(g w2ᵀ) * gelu'(p)` is one product, and with b1's
    // gradient its column sum too: b1's sum leaves the weight gradient's
    // product (only b2's `BGRADA` is left there).
    for dt in [quote!(bf16), quote!(f16)] {
        let all = quote!(w1, b1, w2, b2);
        assert_eq!(
            gelu_folds(mlp(quote!(gelu), dt.clone(), all)),
            (1, vec![true], vec![true])
        );
        // No bias gradient asked: no sums.
        let no_bias = quote!(w1, w2);
        assert_eq!(
            gelu_folds(mlp(quote!(gelu), dt, no_bias)),
            (1, vec![false], vec![])
        );
    }
}

#[test]
fn gelus_backward_stays_apart_where_the_epilogue_does_not_match() {
    let all = || quote!(w1, b1, w2, b2);
    // f32 and f64 keep the separate GELU kernels (as `fold_activations`).
    for dt in [quote!(f32), quote!(f64)] {
        assert_eq!(
            gelu_folds(mlp(quote!(gelu), dt, all())),
            (0, vec![], vec![true, true])
        );
    }
    // The erf form is not cuBLASLt's GELU.
    assert_eq!(
        gelu_folds(mlp(quote!(gelu_erf), quote!(bf16), all())),
        (0, vec![], vec![true, true])
    );
    // No gradient through the activation: nothing reads the
    // pre-activation but the GELU, and no backward multiplies it.
    assert_eq!(
        gelu_folds(mlp(quote!(gelu), quote!(bf16), quote!(w2, b2))),
        (0, vec![], vec![true])
    );
    // The upstream gradient is not a product (the GELU's result summed
    // directly): the forward folds, the backward's kernel stays.
    let direct = quote! {
        #[grad(w, b)]
        fn loss(x: &Tensor<Cuda, bf16, [8, 64]>, w: &Tensor<Cuda, bf16, [64, 32]>,
                b: &Tensor<Cuda, bf16, [32]>) -> Tensor<Cuda, bf16, []> {
            gelu(addmm(b, x, w)).sum()
        }
    };
    assert_eq!(gelu_folds(direct), (1, vec![], vec![true]));
}
