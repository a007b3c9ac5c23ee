//! Expansion time of a 50-operation tensor function through the library
//! entry point (parse, check, plan, PTX emission, code generation).

use criterion::{criterion_group, criterion_main, Criterion};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use std::hint::black_box;

const ACTIVATIONS: [&str; 10] = [
    "gelu", "sigmoid", "tanh", "silu", "relu", "exp", "sin", "cos", "abs", "neg",
];

/// A layer stack: per layer a matmul, a bias add, an activation mix and a
/// residual mix (5 operations), ten layers, then a softmax. With
/// `distinct`, every layer has its own activation and residual scale, so
/// no two fused kernels are equal.
fn fifty_ops(distinct: bool) -> TokenStream {
    let mut body = TokenStream::new();
    let mut prev = format_ident!("x");
    let mut params = vec![quote!(x: &Tensor<Cuda, f32, [B, 256]>)];
    for i in 0..10u32 {
        let (w, b) = (format_ident!("w{}", i), format_ident!("b{}", i));
        params.push(quote!(#w: &Tensor<Cuda, f32, [256, 256]>));
        params.push(quote!(#b: &Tensor<Cuda, f32, [256]>));
        let (h, a, y) = (
            format_ident!("h{}", i),
            format_ident!("a{}", i),
            format_ident!("y{}", i),
        );
        let (act, scale) = if distinct {
            (
                format_ident!("{}", ACTIVATIONS[i as usize]),
                0.1 + f64::from(i) / 100.0,
            )
        } else {
            (format_ident!("gelu"), 0.1)
        };
        body.extend(quote! {
            let #h = matmul(#prev, #w) + #b;
            let #a = #act(#h) * 0.5 + sigmoid(#h) * 0.5;
            let #y = #a + #prev * #scale;
        });
        prev = y;
    }
    quote! {
        pub fn stack<const B: usize>(#(#params),*) -> Tensor<Cuda, f32, [B, 256]> {
            #body
            #prev.softmax(-1)
        }
    }
}

fn bench(c: &mut Criterion) {
    let input = fifty_ops(false);
    let distinct = fifty_ops(true);
    for i in [&input, &distinct] {
        let out = tensorfn_macros_impl::expand(i.clone()).to_string();
        assert!(
            !out.contains("compile_error"),
            "the benchmark input must be valid"
        );
    }
    c.bench_function("expand 50-op function", |b| {
        b.iter(|| tensorfn_macros_impl::expand(black_box(input.clone())))
    });
    c.bench_function("expand 50-op function, every kernel distinct", |b| {
        b.iter(|| tensorfn_macros_impl::expand(black_box(distinct.clone())))
    });
    c.bench_function("check and plan 50-op function", |b| {
        b.iter(|| tensorfn_macros_impl::analyse_tokens(black_box(input.clone())))
    });
}

fn bench_ptx(c: &mut Criterion) {
    use tensorfn_core::DTypeKind::F32;
    use tensorfn_kernels::ir::ElementwiseBuilder;
    use tensorfn_kernels::{BinaryOp, UnaryOp};
    let mut k = ElementwiseBuilder::new();
    let x = k.input(F32);
    let g = k.unary(UnaryOp::Gelu, x);
    let s = k.unary(UnaryOp::Sigmoid, x);
    let y = k.binary(BinaryOp::Add, g, s);
    let kernel = k.output(y).expect("a well-typed kernel");
    c.bench_function("ptx of gelu + sigmoid", |b| {
        b.iter(|| tensorfn_macros_impl::expand::fused_ptx(black_box(&kernel), "tf_bench"))
    });
}

criterion_group!(benches, bench, bench_ptx);
criterion_main!(benches);
