// `#[grad]` on a function with a tensor result gives `name::vjp`, which
// takes one `grad_output`: a tuple result, an integer result, a parameter
// named `grad_output`, and a parameter the result does not depend on.
use tensorfn::prelude::*;

tensor_fn! {
    #[grad(x)]
    fn pair(x: &Tensor<Cpu, f32, [4, 3]>) -> (Tensor<Cpu, f32, [4, 3]>, Tensor<Cpu, f32, [4]>) {
        (x * 2.0, x.sum(1))
    }

    #[grad(x)]
    fn ints(x: &Tensor<Cpu, f32, [4, 3]>) -> Tensor<Cpu, i64, [4]> {
        x.argmax(1)
    }

    #[grad(x)]
    fn named(x: &Tensor<Cpu, f32, [4, 3]>, grad_output: &Tensor<Cpu, f32, [4, 3]>) -> Tensor<Cpu, f32, [4, 3]> {
        x * grad_output
    }

    #[grad(x, b)]
    fn unused(x: &Tensor<Cpu, f32, [4, 3]>, b: &Tensor<Cpu, f32, [3]>) -> Tensor<Cpu, f32, [4, 3]> {
        x * 2.0
    }
}

fn main() {}
