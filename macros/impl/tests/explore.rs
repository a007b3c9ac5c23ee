use quote::quote;

#[test]
fn show() {
    let out = tensorfn_macros_impl::expand(quote! {
        /// One dense layer.
        pub fn dense<const B: usize>(
            x: &Tensor<Cuda, f16, [B, 784]>,
            w: &Tensor<Cuda, f16, [784, 128]>,
            b: &Tensor<Cuda, f16, [128]>,
        ) -> Tensor<Cuda, f16, [B, 128]> {
            relu(addmm(b, x, w))
        }

        #[kernel]
        pub fn gelu(x: f32) -> f32 {
            0.5 * x * (1.0 + tanh(0.7978846 * (x + 0.044715 * x * x * x)))
        }

        fn bad(x: &Tensor<Cpu, f32, [10, 10]>, m: &Tensor<Cuda, f16, [10, 10]>, v: &Tensor<Cuda, f32, [10]>) -> Tensor<Cuda, f16, [10, 10]> {
            let y = x[10];
            addmm(x, m, v)
        }
    });
    println!("{out}");
}
