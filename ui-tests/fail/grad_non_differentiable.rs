// A gradient requested through ops that have none: `argmax`'s indices, a
// cast to an integer type, and a comparison as the only path (a
// `#[kernel]` whose body has none: `grad_kernel.rs`).
use tensorfn::prelude::*;

tensor_fn! {
    #[grad(x)]
    fn through_argmax(x: &Tensor<Cpu, f32, [4, 3]>) -> Tensor<Cpu, f32, []> {
        (x.argmax(1).cast::<f32>() * 2.0).sum()
    }

    #[grad(x)]
    fn through_int_cast(x: &Tensor<Cpu, f32, [4, 3]>) -> Tensor<Cpu, f32, []> {
        x.cast::<i64>().cast::<f32>().sum()
    }

    #[grad(x)]
    fn through_comparison(x: &Tensor<Cpu, f32, [4, 3]>, y: &Tensor<Cpu, f32, [4, 3]>) -> Tensor<Cpu, f32, []> {
        where_(x.gt(0.0), y, y * 2.0).sum()
    }
}

fn main() {}
