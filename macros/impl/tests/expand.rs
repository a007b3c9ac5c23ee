//! Code generation of fused kernels: the embedded PTX texts.

use quote::quote;

fn normalised(s: String) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A bf16 chain on the GPU embeds a second, sm_80 text; an f32 one does not.
#[test]
fn bf16_kernels_embed_an_sm80_text() {
    let bf16 = normalised(
        tensorfn_macros_impl::expand(quote! {
            fn f(x: &Tensor<Cuda, bf16, [8]>) -> Tensor<Cuda, bf16, [8]> { sin(x) * 2.0 + 5.0 }
        })
        .to_string(),
    );
    assert!(!bf16.contains("compile_error"), "{bf16}");
    assert!(bf16.contains("ptx_sm80 : :: core :: option :: Option :: Some ("));
    assert!(bf16.contains(".target sm_80"));
    assert!(bf16.contains("cvt.rn.bf16x2.f32"));
    assert!(bf16.contains(".target sm_70"));

    let f32 = normalised(
        tensorfn_macros_impl::expand(quote! {
            fn f(x: &Tensor<Cuda, f32, [8]>) -> Tensor<Cuda, f32, [8]> { sin(x) * 2.0 + 5.0 }
        })
        .to_string(),
    );
    assert!(!f32.contains("compile_error"), "{f32}");
    assert!(f32.contains("ptx_sm80 : :: core :: option :: Option :: None"));
    assert!(!f32.contains(".target sm_80"));
    assert!(f32.contains(".target sm_70"));
}

/// A function calling a row kernel whose body does not compile is not
/// generated: the kernel's error is reported, and the macro does not panic.
#[test]
fn a_call_to_a_broken_row_kernel_reports_the_kernel_error() {
    for grad in [quote!(), quote!(#[grad(x)])] {
        let out = tensorfn_macros_impl::expand(quote! {
            #[kernel]
            fn row_lse(x: Row<f64>, t: f64) -> f64 {
                let m = max(x * t);
                m + ln(sum(exp(x * t - m)))
            }
            #grad
            fn k(x: &Tensor<Cpu, f64, [4, 5]>) -> Tensor<Cpu, f64, []> { row_lse(x, 1.5).sum() }
        })
        .to_string();
        assert!(out.contains("compile_error"), "{out}");
        assert!(out.contains("ln"), "{out}");
    }
}
