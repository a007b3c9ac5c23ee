// `#[grad(.., recompute = ..)]` takes a bool.
use tensorfn::prelude::*;

tensor_fn! {
    #[grad(w, recompute = "yes")]
    fn loss(x: &Tensor<Cpu, f32, [4, 3]>, w: &Tensor<Cpu, f32, [3, 2]>) -> Tensor<Cpu, f32, []> {
        tanh(matmul(x, w)).sum()
    }
}

fn main() {}
