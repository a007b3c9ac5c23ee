// `#[grad]` on a function with a tensor result gives `name::vjp`: a tuple
// result without a float element, an integer result, a parameter named
// `grad_output`, and a parameter the result does not depend on.
use tensorfn::prelude::*;

tensor_fn! {
    #[grad(x)]
    fn pair(x: &Tensor<Cpu, f32, [4, 3]>) -> (Tensor<Cpu, i64, [4]>, Tensor<Cpu, i64, [3]>) {
        (x.argmax(1), x.argmax(0))
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
