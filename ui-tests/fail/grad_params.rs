// `#[grad]` names: a parameter the result does not depend on, an unknown
// name, an integer tensor, a scalar. (A result that is not a 0-d loss
// gives `name::vjp`: see `grad_vjp.rs`.)
use tensorfn::prelude::*;

tensor_fn! {
    #[grad(w, b)]
    fn unused(x: &Tensor<Cpu, f32, [4, 3]>, w: &Tensor<Cpu, f32, [3, 2]>, b: &Tensor<Cpu, f32, [2]>) -> Tensor<Cpu, f32, []> {
        matmul(x, w).sum()
    }

    #[grad(weight, ids, scale)]
    fn names(x: &Tensor<Cpu, f32, [4, 3]>, ids: &Tensor<Cpu, i64, [4]>, scale: f32) -> Tensor<Cpu, f32, []> {
        (x * scale).sum() + ids.cast::<f32>().sum()
    }
}

fn main() {}
