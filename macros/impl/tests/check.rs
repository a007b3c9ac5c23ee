//! Every kind of error the checker reports, with the text the user sees.

use proc_macro2::TokenStream;
use quote::quote;

fn errors(input: TokenStream) -> Vec<String> {
    match tensorfn_macros_impl::analyse_tokens(input) {
        Ok(a) => a.errors.iter().map(|e| e.to_string()).collect(),
        Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
    }
}

fn one_error(input: TokenStream) -> String {
    let e = errors(input);
    assert_eq!(e.len(), 1, "expected one error, got {e:#?}");
    e.into_iter().next().expect("one error")
}

fn assert_ok(input: TokenStream) {
    let e = errors(input);
    assert!(e.is_empty(), "unexpected errors: {e:#?}");
}

#[test]
fn device_mix_in_addmm_names_operand_anchor_and_fix() {
    let e = one_error(quote! {
        fn f(bias: &Tensor<Cpu, f32, [10]>, m1: &Tensor<Cuda, f32, [4, 10]>, m2: &Tensor<Cuda, f32, [10, 10]>)
            -> Tensor<Cuda, f32, [4, 10]> { addmm(bias, m1, m2) }
    });
    assert_eq!(
        e,
        "`bias` is on Cpu but `addmm` runs on Cuda (m1: Cuda): move it with `bias.to_device::<Cuda>()`"
    );
}

#[test]
fn device_mix_in_cat_prefers_the_gpu() {
    let e = one_error(quote! {
        fn f(a: &Tensor<Cpu, f32, [2, 3]>, b: &Tensor<Cuda, f32, [2, 3]>) -> Tensor<Cuda, f32, [4, 3]> {
            cat([a, b], 0)
        }
    });
    assert!(
        e.starts_with("`a` is on Cpu but `cat` runs on Cuda (b: Cuda)"),
        "{e}"
    );
}

#[test]
fn two_gpu_ordinals() {
    let e = one_error(quote! {
        fn f(a: &Tensor<Cuda, f32, [8]>, b: &Tensor<Cuda<1>, f32, [8]>) -> Tensor<Cuda, f32, [8]> { a * b }
    });
    assert_eq!(
        e,
        "`b` is on Cuda<1> but `*` runs on Cuda (a: Cuda): move it with `b.to_device::<Cuda>()`"
    );
}

#[test]
fn dtype_mix_uses_the_majority_and_suggests_the_cast() {
    let e = one_error(quote! {
        fn f(b: &Tensor<Cuda, f16, [10, 10]>, m1: &Tensor<Cuda, f16, [10, 10]>, m2: &Tensor<Cuda, f32, [10, 10]>)
            -> Tensor<Cuda, f16, [10, 10]> { addmm(b, m1, m2) }
    });
    assert_eq!(
        e,
        "`m2` is f32 but `addmm` here is f16: cast with `m2.cast::<f16>()`"
    );
}

#[test]
fn int_operands_of_a_float_addcmul_get_the_cast_once() {
    let e = one_error(quote! {
        fn f(y: &Tensor<Cuda, f32, [5, 5]>, x: &Tensor<Cuda, i32, [5, 5]>) -> Tensor<Cuda, f32, [5, 5]> {
            addcmul(y, x, x, 1)
        }
    });
    assert_eq!(
        e,
        "`x` is i32 but `addcmul` here is f32: cast with `x.cast::<f32>()`"
    );
    let e = one_error(quote! {
        fn f(y: &Tensor<Cuda, f32, [5, 5]>, x: &Tensor<Cuda, f32, [5, 5]>) -> Tensor<Cuda, f32, [5, 5]> {
            addcmul(y, 1, x, x)
        }
    });
    assert!(e.contains("move the scalar `1` to the end"), "{e}");
}

#[test]
fn float_only_ops_on_integers() {
    for (body, op) in [
        (quote!(exp(x)), "exp"),
        (quote!(x.mean(0)), "mean"),
        (quote!(x.softmax(-1)), "softmax"),
        (quote!(matmul(x, x)), "matmul"),
    ] {
        let e = one_error(quote! {
            fn f(x: &Tensor<Cpu, i32, [4, 4]>) -> Tensor<Cpu, i32, [4]> { #body }
        });
        assert!(
            e.starts_with(&format!(
                "`{op}` needs a floating-point tensor but `x` is i32: cast with `x.cast::<f32>()`"
            )),
            "{e}"
        );
    }
}

#[test]
fn scalars_do_not_promote_tensors() {
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, i32, [4]>) -> Tensor<Cpu, i32, [4]> { x * 2.5 }
    });
    assert!(e.starts_with("`2.5` is a float but `x` is i32"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [4]>, a: f32, n: usize) -> Tensor<Cpu, f32, [4]> { x * (a * n) }
    });
    assert!(e.contains("mixes a f32 scalar with a usize scalar"), "{e}");
    assert_ok(quote! {
        fn f(x: &Tensor<Cpu, f16, [4]>, a: f32) -> Tensor<Cpu, f16, [4]> { x * a + 1 - 2.0 * x }
    });
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, u8, [4]>) -> Tensor<Cpu, u8, [4]> { x + 300 }
    });
    assert!(
        e.starts_with("`300` is out of range for `x`, which is u8 (0..=255)"),
        "{e}"
    );
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, u8, [4]>) -> Tensor<Cpu, u8, [4]> { x * -1 }
    });
    assert!(e.contains("out of range"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, bool, [4]>) -> Tensor<Cpu, bool, [4]> { x + x }
    });
    assert!(e.contains("needs numbers but `x` is bool"), "{e}");
}

#[test]
fn broadcasting_follows_pytorch() {
    assert_ok(quote! {
        fn f(a: &Tensor<Cpu, f32, [4, 1, 3]>, b: &Tensor<Cpu, f32, [1, 5, 1]>) -> Tensor<Cpu, f32, [4, 5, 3]> { a + b }
    });
    let e = one_error(quote! {
        fn f(a: &Tensor<Cpu, f32, [2, 3]>, b: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [2, 3]> { a + b }
    });
    assert!(e.contains("dim -1 is 3 in `a` and 4 in `b`"), "{e}");
}

#[test]
fn matrix_products() {
    let e = one_error(quote! {
        fn f(a: &Tensor<Cpu, f32, [100, 200]>, b: &Tensor<Cpu, f32, [300, 400]>) -> Tensor<Cpu, f32, [100, 400]> {
            matmul(a, b)
        }
    });
    assert!(e.contains("(k = 200)") && e.contains("(k = 300)"), "{e}");
    let e = one_error(quote! {
        fn f(r: &Tensor<Cpu, f32, [10, 10]>, m: &Tensor<Cpu, f32, [10, 10]>, v: &Tensor<Cpu, f32, [10]>)
            -> Tensor<Cpu, f32, [10, 10]> { addmm(r, m, v) }
    });
    assert!(
        e.starts_with("`addmm` needs a matrix (2-D) for `v`, found shape [10] (1-D)"),
        "{e}"
    );
    let e = one_error(quote! {
        fn f(a: &Tensor<Cpu, f32, [100, 200]>, b: &Tensor<Cpu, f32, [200, 300]>) -> Tensor<Cpu, f32, []> {
            dot(a.view(-1), b.view(-1))
        }
    });
    assert_eq!(
        e,
        "`dot` needs equal lengths: `a.view(-1)` has 20000 elements and `b.view(-1)` has 60000"
    );
    let e = one_error(quote! {
        fn f(a: &Tensor<Cpu, f32, [2, 3, 4]>, b: &Tensor<Cpu, f32, [3, 4, 5]>) -> Tensor<Cpu, f32, [2, 3, 5]> {
            bmm(a, b)
        }
    });
    assert!(e.contains("equal batch sizes"), "{e}");
    assert_ok(quote! {
        fn f<const B: usize>(a: &Tensor<Cpu, f32, [B, 3, 4]>, b: &Tensor<Cpu, f32, [4, 5]>, v: &Tensor<Cpu, f32, [5]>)
            -> Tensor<Cpu, f32, [B, 3]> { matmul(matmul(a, b), v) }
    });
}

#[test]
fn cat_rules() {
    let e = one_error(quote! {
        fn f(a: &Tensor<Cpu, f32, [2, 3, 4]>, b: &Tensor<Cpu, f32, [2, 5, 4]>) -> Tensor<Cpu, f32, [4, 3, 4]> {
            cat([a, b], 0)
        }
    });
    assert_eq!(
        e,
        "`cat` along dim 0 needs equal dims elsewhere: dim 1 is 3 in `a` and 5 in `b`"
    );
    assert_ok(quote! {
        fn f(a: &Tensor<Cpu, f32, [2, 3, 4]>, b: &Tensor<Cpu, f32, [2, 5, 4]>) -> Tensor<Cpu, f32, [2, 8, 4]> {
            cat([a, b], 1)
        }
    });
    assert_ok(quote! {
        fn f<const N: usize, const M: usize>(a: &Tensor<Cpu, f32, [N]>, b: &Tensor<Cpu, f32, [M]>)
            -> Tensor<Cpu, f32, [M + N]> { cat([a, b], -1) }
    });
    let e = one_error(quote! {
        fn f(a: &Tensor<Cpu, f32, [2]>, b: &Tensor<Cpu, f32, [2, 1]>) -> Tensor<Cpu, f32, [4]> { cat([a, b], 0) }
    });
    assert!(e.contains("equal rank"), "{e}");
    let e = one_error(quote! {
        fn f(a: &Tensor<Cpu, f32, [2]>) -> Tensor<Cpu, f32, [4]> { cat([a, a], 1) }
    });
    assert!(e.contains("got dim 1 for `a`, which has 1 dims"), "{e}");
}

#[test]
fn reshapes_and_views() {
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [1000, 1000]>) -> Tensor<Cpu, f32, [1000001]> { x.view([1000001]) }
    });
    assert_eq!(
        e,
        "`view` of `x` from [1000, 1000] (1000000 elements) to [1000001] (1000001 elements): the element counts must match"
    );
    assert_ok(quote! {
        fn f<const B: usize>(x: &Tensor<Cpu, f32, [B, 28, 28]>) -> Tensor<Cpu, f32, [B, 784]> { x.reshape([B, -1]) }
    });
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [10]>) -> Tensor<Cpu, f32, [3, 3]> { x.reshape([3, -1]) }
    });
    assert!(e.contains("cannot infer `-1`"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [10]>) -> Tensor<Cpu, f32, [10]> { x.reshape([-1, -1]) }
    });
    assert!(e.contains("only one dim can be `-1`"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [10]>) -> Tensor<Cpu, f32, [10]> { x.reshape([K]) }
    });
    assert!(e.starts_with("unknown dim `K`"), "{e}");
}

#[test]
fn permutes_transposes_and_reductions() {
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [2, 3, 4]>) -> Tensor<Cpu, f32, [2, 3, 4]> { x.permute([0, 0, 1]) }
    });
    assert!(e.contains("needs a permutation of 0..3"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [2, 3, 4]>) -> Tensor<Cpu, f32, [4, 3, 2]> { x.t() }
    });
    assert!(e.contains("at most 2 dims"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [2, 3]>) -> Tensor<Cpu, f32, [2]> { x.sum(2) }
    });
    assert!(e.contains("got dim 2 for `x`, which has 2 dims"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [2, 3]>) -> Tensor<Cpu, i64, []> { x.argmax() }
    });
    assert!(e.contains("`argmax` needs a dim"), "{e}");
    assert_ok(quote! {
        fn f(x: &Tensor<Cpu, f32, [2, 3, 4]>) -> (Tensor<Cpu, i64, [2, 4]>, Tensor<Cpu, f32, [4, 2]>, Tensor<Cpu, f32, []>) {
            (x.argmax(1), x.max(-2).t(), x.transpose(0, 2).sum())
        }
    });
}

#[test]
fn indexing_and_narrowing() {
    let e = one_error(quote! {
        fn f(x: &Tensor<Cuda, f32, [10, 10]>) -> Tensor<Cuda, f32, [10]> { x[10] }
    });
    assert_eq!(
        e,
        "index 10 is out of range for dim 0 of `x`, which has size 10: valid indices are 0..=9"
    );
    let e = one_error(quote! {
        fn f(x: &Tensor<Cuda, f32, [10, 10]>) -> Tensor<Cuda, f32, []> { x[3, 10] }
    });
    assert!(e.contains("dim 1 of `x`"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cuda, f32, [10]>) -> Tensor<Cuda, f32, []> { x[-11] }
    });
    assert!(e.contains("out of range"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cuda, f32, [10]>, i: f32) -> Tensor<Cuda, f32, []> { x[i] }
    });
    assert!(e.contains("an index is a `usize`"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cuda, f32, [10]>) -> Tensor<Cuda, f32, []> { x[1, 2] }
    });
    assert!(e.contains("has 1 dims but 2 indices"), "{e}");
    assert_ok(quote! {
        fn f(x: &Tensor<Cuda, f32, [10, 4]>, i: usize, n: usize) -> (Tensor<Cuda, f32, [4]>, Tensor<Cuda, f32, []>, Tensor<Cuda, f32, [n, 4]>) {
            (x[i], x[-1, 3], x.narrow(0, i, n))
        }
    });
    let e = one_error(quote! {
        fn f(x: &Tensor<Cuda, f32, [10, 4]>) -> Tensor<Cuda, f32, [3, 4]> { x.narrow(0, 8, 3) }
    });
    assert!(
        e.contains("slice 8..11 is out of range for dim 0 of `x`, which has size 10"),
        "{e}"
    );
}

#[test]
fn results_must_match_the_declaration() {
    let e = errors(quote! {
        fn f(x: &Tensor<Cuda, f32, [4, 3]>) -> Tensor<Cpu, f16, [3, 4]> { x * 2.0 }
    });
    assert_eq!(e.len(), 3, "{e:#?}");
    assert!(
        e[0].contains(
            "is on Cuda but `f` declares Cpu: move it with `(x * 2.0).to_device::<Cpu>()`"
        ),
        "{}",
        e[0]
    );
    assert!(
        e[1].contains("is f32 but `f` declares f16: cast it with `(x * 2.0).cast::<f16>()`"),
        "{}",
        e[1]
    );
    assert!(
        e[2].contains("has shape [4, 3] but `f` declares [3, 4]: dim 0 is 4 but must be 3"),
        "{}",
        e[2]
    );
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [4]>) -> (Tensor<Cpu, f32, [4]>, Tensor<Cpu, f32, [4]>) { (x, x, x) }
    });
    assert!(e.contains("declares 2 results but the body gives 3"), "{e}");
}

#[test]
fn symbolic_dims_are_compared_as_polynomials() {
    assert_ok(quote! {
        fn f<const N: usize, const M: usize, const B: usize>(x: &Tensor<Cpu, f32, [B, N * M]>) -> Tensor<Cpu, f32, [B, M * N]> { relu(x) }
    });
    let e = one_error(quote! {
        fn f<const B: usize>(x: &Tensor<Cpu, f32, [B, 784]>, w: &Tensor<Cpu, f32, [785, 10]>) -> Tensor<Cpu, f32, [B, 10]> {
            matmul(x, w)
        }
    });
    assert!(
        e.contains("`x` is [B, 784] (k = 784) but `w` is [785, 10] (k = 785)"),
        "{e}"
    );
}

#[test]
fn run_time_dims() {
    assert_ok(quote! {
        fn f(x: &Tensor<Cpu, f32, [B, 784]>, y: &Tensor<Cpu, f32, [B, 2 * B]>) -> Tensor<Cpu, f32, [B, 2 * B]> { y * 2.0 }
    });
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [2 * B]>) -> Tensor<Cpu, f32, [2 * B]> { x }
    });
    assert!(
        e.starts_with("run-time dim `B` appears only inside `2 * B`"),
        "{e}"
    );
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [B]>) -> Tensor<Cpu, f32, [C]> { x }
    });
    assert!(e.starts_with("unknown dim `C`"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [N]>, y: &Tensor<Cpu, f32, [M]>) -> Tensor<Cpu, f32, [N]> { x + y }
    });
    assert!(e.contains("dim -1 is N in `x` and M in `y`"), "{e}");
}

#[test]
fn strided_sizes_over_symbols_round_down() {
    // A stride dividing the symbol's coefficient keeps a polynomial.
    assert_ok(quote! {
        fn f<const H: usize>(x: &Tensor<Cpu, f32, [1, 3, 2 * H, 8]>, w: &Tensor<Cpu, f32, [4, 3, 7, 7]>) -> Tensor<Cpu, f32, [1, 4, H, 4]> {
            conv2d(x, w, stride = 2, padding = 3)
        }
    });
    // Otherwise the size is a run-time dim named by its formula: equal
    // wherever the same formula is computed again.
    assert_ok(quote! {
        fn f(x: &Tensor<Cpu, f32, [B, 3, H, W]>, w: &Tensor<Cpu, f32, [4, 3, 3, 3]>) -> Tensor<Cpu, f32, [B, 4]> {
            let a = conv2d(x, w, stride = 2, padding = 1);
            let b = max_pool2d(conv2d(x, w, stride = 2, padding = 1), 3, stride = 2, padding = 1);
            (a.flatten(2).sum(-1) + max_pool2d(a, 3, stride = 2, padding = 1).flatten(2).sum(-1)) * (b.flatten(2).sum(-1))
        }
    });
    let e = one_error(quote! {
        fn f<const H: usize>(x: &Tensor<Cpu, f32, [1, 3, H, 8]>, w: &Tensor<Cpu, f32, [4, 3, 3, 3]>) -> Tensor<Cpu, f32, [1, 4, H, 4]> {
            conv2d(x, w, stride = 2, padding = 1)
        }
    });
    assert!(e.contains("⌊(H - 1)/2⌋ + 1"), "{e}");
    // A flatten of the computed sizes into a literal `in_features`.
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [B, 3, H, H]>, w: &Tensor<Cpu, f32, [4, 3, 3, 3]>, fc: &Tensor<Cpu, f32, [64, 10]>) -> Tensor<Cpu, f32, [B, 10]> {
            matmul(conv2d(x, w, stride = 2).flatten(1), fc)
        }
    });
    assert!(e.contains("k = 4 * ⌊(H - 3)/2⌋ * ⌊(H - 3)/2⌋"), "{e}");
    // Pools share the rule; `ceil_mode` needs a number.
    assert_ok(quote! {
        fn f(x: &Tensor<Cpu, f32, [B, 3, H, W]>) -> Tensor<Cpu, f32, [B, 3]> {
            avg_pool2d(x, 2).flatten(2).sum(-1)
        }
    });
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [B, 3, H, 4]>) -> Tensor<Cpu, f32, [B, 3]> {
            max_pool2d(x, 2, ceil_mode = true).flatten(2).sum(-1)
        }
    });
    assert!(
        e.contains(
            "dim 2 of `x` ([B, 3, H, 4]), which is `H`, not a number: with `ceil_mode = true`"
        ),
        "{e}"
    );
}

#[test]
fn calls_between_functions() {
    let base = quote! {
        fn classify<const B: usize>(x: &Tensor<Cpu, f32, [B, 785]>, w: &Tensor<Cpu, f32, [785, 10]>) -> Tensor<Cpu, f32, [B, 10]> {
            matmul(x, w)
        }
    };
    let e = one_error(quote! {
        #base
        fn g<const B: usize>(x: &Tensor<Cpu, f32, [B, 784]>, w: &Tensor<Cpu, f32, [785, 10]>) -> Tensor<Cpu, f32, [B, 10]> {
            classify(x, w)
        }
    });
    assert_eq!(e, "`classify` takes `x` with shape [B, 785] but `x` is [B, 784]: dim 1 is 784 but must be 785");
    let e = one_error(quote! {
        #base
        fn g(x: &Tensor<Cuda, f32, [3, 785]>, w: &Tensor<Cpu, f32, [785, 10]>) -> Tensor<Cpu, f32, [3, 10]> {
            classify(x, w)
        }
    });
    assert!(
        e.contains(
            "`x` is on Cuda but `classify` takes `x` on Cpu: move it with `x.to_device::<Cpu>()`"
        ),
        "{e}"
    );
    let e = one_error(quote! {
        #base
        fn g(x: &Tensor<Cpu, f64, [3, 785]>, w: &Tensor<Cpu, f32, [785, 10]>) -> Tensor<Cpu, f32, [3, 10]> {
            classify(x, w)
        }
    });
    assert!(
        e.contains("`x` is f64 but `classify` takes `x` as f32: cast with `x.cast::<f32>()`"),
        "{e}"
    );
    let e = one_error(quote! {
        #base
        fn g(x: &Tensor<Cpu, f32, [N, 785]>, w: &Tensor<Cpu, f32, [785, 10]>) -> Tensor<Cpu, f32, [N, 10]> {
            classify(x, w)
        }
    });
    assert!(
        e.contains("needs its const generic `B` at compile time"),
        "{e}"
    );
    assert_ok(quote! {
        #base
        fn g(x: &Tensor<Cpu, f32, [3, 785]>, w: &Tensor<Cpu, f32, [785, 10]>) -> Tensor<Cpu, f32, [3, 10]> {
            classify(x, w)
        }
        fn h<const C: usize>(x: &Tensor<Cpu, f32, [C, 785]>, w: &Tensor<Cpu, f32, [785, 10]>) -> (Tensor<Cpu, f32, [C, 10]>, Tensor<Cpu, f32, [C, 10]>) {
            let y = classify(x, w);
            (y, relu(y))
        }
    });
}

#[test]
fn calls_outside_the_invocation_need_an_annotation() {
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> { let y = other(x); y * 2.0 }
    });
    assert!(
        e.contains("annotate its result: `let y: Tensor<Device, DType, [dims]> = other(x);`"),
        "{e}"
    );
    assert_ok(quote! {
        fn f(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> {
            let y: Tensor<Cpu, f32, [4]> = other::helper(x);
            y * 2.0
        }
    });
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> { let y: Tensor<Cpu, f32, [5]> = relu(x); x }
    });
    assert!(
        e.contains("annotated Tensor<Cpu, f32, [5]> but its value is Tensor<Cpu, f32, [4]>"),
        "{e}"
    );
}

#[test]
fn kernels_are_typed_per_parameter() {
    let e = one_error(quote! {
        #[kernel]
        fn gelu(x: f32) -> f32 { 0.5 * x * (1.0 + tanh(0.79788456 * (x + 0.044715 * x * x * x))) }
        fn f(h: &Tensor<Cpu, f16, [4]>) -> Tensor<Cpu, f32, [4]> { gelu(h) }
    });
    assert_eq!(
        e,
        "`h` is f16 but `gelu` takes f32 for `x`: cast with `h.cast::<f32>()`"
    );
    assert_ok(quote! {
        #[kernel]
        fn mix(a: f32, b: f16) -> f16 { (a * b as f32) as f16 }
        fn f(x: &Tensor<Cpu, f32, [3, 4]>, y: &Tensor<Cpu, f16, [4]>) -> Tensor<Cpu, f16, [3, 4]> { mix(x, y) }
    });
}

#[test]
fn every_error_of_a_function_is_reported() {
    let e = errors(quote! {
        fn many(a: &Tensor<Cuda, f32, [4, 8]>, b: &Tensor<Cpu, f32, [8, 2]>, c: &Tensor<Cuda, f16, [4, 2]>, i: &Tensor<Cuda, i32, [4, 2]>)
            -> Tensor<Cuda, f32, [4, 2]> {
            let p = matmul(a, b);
            let q = p + c;
            let r = exp(i);
            let s = a.reshape([3, 10]);
            q + r
        }
    });
    assert_eq!(e.len(), 4, "{e:#?}");
    assert!(e[0].starts_with("`b` is on Cpu"), "{}", e[0]);
    assert!(
        e[1].starts_with("`c` is f16 but `+` here is f32"),
        "{}",
        e[1]
    );
    assert!(
        e[2].starts_with("`exp` needs a floating-point tensor"),
        "{}",
        e[2]
    );
    assert!(e[3].starts_with("`reshape` of `a`"), "{}", e[3]);
}

#[test]
fn names_and_items() {
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> { y }
    });
    assert_eq!(e, "`y` is not a parameter or a `let` of `f`");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> { x }
        fn f(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> { x }
    });
    assert!(e.contains("defined twice"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> { x.frobnicate() }
    });
    assert!(e.contains("`frobnicate` is not a tensor method"), "{e}");
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> { let (a, b) = relu(x); a }
    });
    assert!(e.contains("is one value, not a tuple"), "{e}");
}

#[test]
fn strict_broadcasting_rejects_promotion_meeting_a_one() {
    let e = one_error(quote! {
        fn f<const N: usize>(pred: &Tensor<Cpu, f32, [N, 1]>, target: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N, N]> {
            pred - target
        }
    });
    assert!(
        e.starts_with("`-` would broadcast `pred` [N, 1] with `target` [N] to [N, N]"),
        "{e}"
    );
    assert!(
        e.contains("`target.unsqueeze(1)` or `pred.squeeze(1)`"),
        "{e}"
    );
    let e = one_error(quote! {
        fn f<const B: usize>(x: &Tensor<Cpu, f32, [B, 1, 8, 8]>, m: &Tensor<Cpu, f32, [B, 8, 8]>) -> Tensor<Cpu, f32, [B, B, 8, 8]> {
            x * m
        }
    });
    assert!(e.contains("to [B, B, 8, 8]"), "{e}");
    // The fixes compile: matching shapes, or the growth written out.
    assert_ok(quote! {
        fn f<const N: usize>(pred: &Tensor<Cpu, f32, [N, 1]>, target: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N, 1]> {
            pred - target.unsqueeze(1)
        }
        fn g<const N: usize>(pred: &Tensor<Cpu, f32, [N, 1]>, target: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N]> {
            pred.squeeze(1) - target
        }
        fn h<const N: usize>(pred: &Tensor<Cpu, f32, [N, 1]>, target: &Tensor<Cpu, f32, [N]>) -> Tensor<Cpu, f32, [N, N]> {
            pred - target.unsqueeze(0)
        }
        fn bias<const B: usize>(x: &Tensor<Cpu, f32, [B, 8]>, b: &Tensor<Cpu, f32, [8]>) -> Tensor<Cpu, f32, [B, 8]> {
            x + b + 1.0
        }
        fn rotary<const B: usize, const T: usize>(a: &Tensor<Cpu, f32, [1, 64, 1]>, b: &Tensor<Cpu, f32, [B, 1, T]>) -> Tensor<Cpu, f32, [B, 64, T]> {
            a * b
        }
    });
}

#[test]
fn squeeze_needs_a_one() {
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [4, 3]>) -> Tensor<Cpu, f32, [3]> { x.squeeze(0) }
    });
    assert!(e.contains("dim 0 of `x` [4, 3] has size 4"), "{e}");
    assert_ok(quote! {
        fn f(x: &Tensor<Cpu, f32, [4, 3]>) -> Tensor<Cpu, f32, [4, 3, 1]> { x.unsqueeze(-1) }
    });
}

#[test]
fn reductions_over_a_size_one_dim() {
    let e = one_error(quote! {
        fn f<const B: usize>(logits: &Tensor<Cpu, f32, [B, 1]>) -> Tensor<Cpu, i64, [B]> { logits.argmax(1) }
    });
    assert!(e.starts_with("`argmax` along dim 1, but dim 1 of `logits` [B, 1] has size 1, so every index it returns is 0"), "{e}");
    assert!(
        e.contains("did you mean dim 0 (size B)?") && e.contains("`logits.squeeze(1)`"),
        "{e}"
    );
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [1, 10]>) -> Tensor<Cpu, f32, [1, 10]> { x.softmax(0) }
    });
    assert!(
        e.contains("every value it returns is 1") && e.contains("did you mean dim 1 (size 10)?"),
        "{e}"
    );
    let e = one_error(quote! {
        fn f(x: &Tensor<Cpu, f32, [3, 1]>) -> Tensor<Cpu, f32, [3]> { x.sum(-1) }
    });
    assert!(e.contains("returns the input's values unchanged"), "{e}");
    // A run-time dim may be 1 or not: no error.
    assert_ok(quote! {
        fn f(x: &Tensor<Cpu, f32, [N, K]>) -> Tensor<Cpu, i64, [N]> { x.argmax(1) }
    });
}

#[test]
fn reshapes_must_keep_the_order_of_dims() {
    let e = one_error(quote! {
        fn f<const B: usize, const H: usize, const T: usize, const Dh: usize>(y: &Tensor<Cpu, f32, [B, H, T, Dh]>)
            -> Tensor<Cpu, f32, [B, T, H * Dh]> { y.reshape([B, T, H * Dh]) }
    });
    assert!(e.starts_with("`reshape` of `y` [B, H, T, Dh] to [B, T, H * Dh] does not keep the order of its dims: dim 1 of the target needs T, but `y` has H (dim 1) before it (T is dim 2)"), "{e}");
    assert!(
        e.contains("`y.transpose(1, 2).reshape([B, T, H * Dh])`"),
        "{e}"
    );
    assert!(e.contains("`y.reshape_unordered([..])`"), "{e}");
    let e = one_error(quote! {
        fn f<const B: usize, const H: usize, const T: usize, const Dh: usize>(x: &Tensor<Cpu, f32, [B, T, H * Dh]>)
            -> Tensor<Cpu, f32, [B, H, T, Dh]> { x.view([B, H, T, Dh]) }
    });
    assert!(e.contains("`x.view([B, T, H, Dh]).transpose(1, 2)`"), "{e}");
    assert!(e.contains("`x.view_unordered([..])`"), "{e}");
    let e = one_error(quote! {
        fn f<const H: usize, const B: usize, const L: usize, const D: usize>(x: &Tensor<Cpu, f32, [H, B, L, D]>)
            -> Tensor<Cpu, f32, [B, L, H * D]> { x.view([B, L, -1]) }
    });
    assert!(
        e.contains("`x.permute([1, 2, 0, 3]).reshape([B, L, -1])` (a copy, so not `view`)"),
        "{e}"
    );
    // Literal factors that can be told apart.
    let e = one_error(quote! {
        fn f<const B: usize, const T: usize>(y: &Tensor<Cpu, f32, [B, 12, T, 64]>)
            -> Tensor<Cpu, f32, [B, T, 768]> { y.reshape([B, T, 768]) }
    });
    assert!(
        e.contains("needs T, but `y` has 12 (dim 1) before it"),
        "{e}"
    );
    // In-order regroupings, silence where literals are ambiguous, the opt-out.
    assert_ok(quote! {
        fn split<const B: usize, const H: usize, const T: usize, const Dh: usize>(x: &Tensor<Cpu, f32, [B, T, H * Dh]>)
            -> Tensor<Cpu, f32, [B, T, H, Dh]> { x.view([B, T, H, Dh]) }
        fn merge<const B: usize, const H: usize, const T: usize, const Dh: usize>(y: &Tensor<Cpu, f32, [B, H, T, Dh]>)
            -> Tensor<Cpu, f32, [B, T, H * Dh]> { y.transpose(1, 2).reshape([B, T, H * Dh]) }
        fn flat<const B: usize>(x: &Tensor<Cpu, f32, [B, 28, 28]>) -> Tensor<Cpu, f32, [B, 784]> { x.reshape([B, -1]) }
        fn ones<const N: usize>(x: &Tensor<Cpu, f32, [1, N]>) -> Tensor<Cpu, f32, [N, 1]> { x.view([N, 1]) }
        fn lits(x: &Tensor<Cpu, f32, [4, 6]>) -> Tensor<Cpu, f32, [6, 4]> { x.reshape([6, 4]) }
        fn twos<const N: usize>(x: &Tensor<Cpu, f32, [2 * N]>) -> Tensor<Cpu, f32, [N, 2]> { x.reshape([N, 2]) }
        fn same<const T: usize>(x: &Tensor<Cpu, f32, [T, T]>) -> Tensor<Cpu, f32, [T, T]> { x.view([T, T]) }
        fn meant<const B: usize, const H: usize, const T: usize, const Dh: usize>(y: &Tensor<Cpu, f32, [B, H, T, Dh]>)
            -> Tensor<Cpu, f32, [B, T, H * Dh]> { y.reshape_unordered([B, T, H * Dh]) }
    });
}

#[test]
fn generic_device_and_dtype_are_symbols() {
    assert_ok(quote! {
        fn mlp<D: Device, T: Float, const B: usize>(
            x: &Tensor<D, T, [B, 4]>, w: &Tensor<D, T, [4, 3]>, b: &Tensor<D, T, [3]>,
        ) -> Tensor<D, T, [B, 3]> {
            let h = relu(addmm(b, x, w)) * 0.5;
            (h + 1.0).softmax(1)
        }
        fn caller<D: Device, U: Float>(x: &Tensor<D, U, [2, 4]>, w: &Tensor<D, U, [4, 3]>, b: &Tensor<D, U, [3]>)
            -> (Tensor<D, U, [2, 3]>, Tensor<D, f32, [2, 3]>) {
            let y = mlp(x, w, b);
            (y, y.cast::<f32>())
        }
        fn concrete(x: &Tensor<Cuda, bf16, [2, 4]>, w: &Tensor<Cuda, bf16, [4, 3]>, b: &Tensor<Cuda, bf16, [3]>)
            -> Tensor<Cuda, bf16, [2, 3]> { mlp(x, w, b) }
        fn back<D: Device, T: Float>(x: &Tensor<D, f32, [2]>) -> Tensor<D, T, [2]> { x.cast::<T>() }
        fn moved<D: Device, T: DType>(x: &Tensor<Cpu, T, [2]>) -> Tensor<D, T, [2]> { x.to_device::<D>() }
    });
}

#[test]
fn generic_device_mix_names_the_parameter() {
    let e = one_error(quote! {
        fn f<D: Device, T: Float>(x: &Tensor<D, T, [3]>, c: &Tensor<Cpu, T, [3]>) -> Tensor<D, T, [3]> { x + c }
    });
    assert_eq!(
        e,
        "`c` is on Cpu but `+` runs on D (x: D): move it with `c.to_device::<D>()`"
    );
    let e = one_error(quote! {
        fn f<D: Device, T: Float>(x: &Tensor<D, T, [3]>, c: &Tensor<D, f32, [3]>) -> Tensor<D, T, [3]> { x * c }
    });
    assert_eq!(e, "`c` is f32 but `*` here is T: cast with `c.cast::<T>()`");
}

#[test]
fn dtype_bounds_decide_what_an_op_takes() {
    let e = one_error(quote! {
        fn f<D: Device, T: DType>(x: &Tensor<D, T, [3]>) -> Tensor<D, T, [3]> { x.exp() }
    });
    assert_eq!(
        e,
        "`exp` needs a floating-point tensor but `x` is T: `T: DType` admits integer dtypes: bound it `T: Float`"
    );
    let e = one_error(quote! {
        fn f<D: Device, T: NumDType>(x: &Tensor<D, T, [3]>) -> Tensor<D, T, [3]> { x * 2.0 }
    });
    assert!(
        e.contains("`T: NumDType` admits integer dtypes: bound it `T: Float`"),
        "{e}"
    );
    let e = one_error(quote! {
        fn f<D: Device, T: DType>(x: &Tensor<D, T, [3]>) -> Tensor<D, T, [3]> { x + x }
    });
    assert!(e.contains("`T: DType` admits bool"), "{e}");
    assert_ok(quote! {
        fn f<D: Device, T: NumDType>(x: &Tensor<D, T, [3]>) -> Tensor<D, T, [3]> { x * 2 + x }
    });
}

#[test]
fn calls_bind_type_parameters_within_their_bounds() {
    let e = one_error(quote! {
        fn g<D: Device, T: Float>(x: &Tensor<D, T, [3]>) -> Tensor<D, T, [3]> { x.exp() }
        fn f<D: Device>(i: &Tensor<D, i64, [3]>) -> Tensor<D, i64, [3]> { g(i) }
    });
    assert_eq!(
        e,
        "`g` takes `x` as `T: Float` but `i` is i64: cast with `i.cast::<f32>()`"
    );
    let e = one_error(quote! {
        fn g<D: Device, T: Float>(x: &Tensor<D, T, [3]>, y: &Tensor<D, T, [3]>) -> Tensor<D, T, [3]> { x + y }
        fn f<D: Device>(a: &Tensor<D, f32, [3]>, b: &Tensor<D, f16, [3]>) -> Tensor<D, f32, [3]> { g(a, b) }
    });
    assert_eq!(
        e,
        "`b` is f16 but `g` takes `y` as f32: cast with `b.cast::<f32>()`"
    );
    let e = one_error(quote! {
        fn g<D: Device, T: Float>(x: &Tensor<D, f32, [3]>) -> Tensor<D, T, [3]> { x.cast::<T>() }
        fn f(a: &Tensor<Cpu, f32, [3]>) -> Tensor<Cpu, f32, [3]> { g(a) }
    });
    assert!(
        e.starts_with("cannot infer the type parameter `T` of `g`"),
        "{e}"
    );
}

#[test]
fn generic_functions_plan_one_instance_per_dtype() {
    let a = tensorfn_macros_impl::analyse_tokens(quote! {
        fn f<D: Device, T: Float>(x: &Tensor<D, T, [4]>) -> Tensor<D, T, [4]> { (x * 2.0).exp() + 1.0 }
    })
    .expect("parses");
    assert!(a.errors.is_empty());
    let planned = a.planned[0].as_ref().expect("planned");
    let dtypes: Vec<String> = planned
        .iter()
        .map(|p| p.instance.dtypes[0].1.to_string())
        .collect();
    assert_eq!(dtypes, ["f32", "f64", "f16", "bf16"]);
    // Each instance's fused kernel reads and writes its own dtype.
    for p in planned {
        let k = p.plan.steps.iter().find_map(|s| match s {
            tensorfn_macros_impl::plan::Step::Fused(g) => g.kernel.as_ref().ok(),
            _ => None,
        });
        let k = k.expect("one fused group");
        assert_eq!(k.inputs(), &[p.instance.dtypes[0].1]);
        assert_eq!(k.output_dtype(), p.instance.dtypes[0].1);
    }
}
