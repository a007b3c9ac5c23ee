// `#[grad]` through `#[kernel]`s whose bodies have no gradient: a
// comparison used as a number, and integer arithmetic; a kernel that
// uses a comparison as an `if`'s condition is differentiated.
use tensorfn::prelude::*;

tensor_fn! {
    #[kernel]
    fn step(v: f32) -> f32 {
        (v > 0.0) as f32 * v
    }

    #[kernel]
    fn quantised(v: f32) -> f32 {
        ((v * 4.0) as i32 / 2) as f32
    }

    #[kernel]
    fn relu_like(v: f32) -> f32 {
        if v > 0.0 { v } else { 0.0 }
    }

    #[grad(x)]
    fn through_step(x: &Tensor<Cpu, f32, [4, 3]>) -> Tensor<Cpu, f32, []> {
        step(x).sum()
    }

    #[grad(x)]
    fn through_integers(x: &Tensor<Cpu, f32, [4, 3]>) -> Tensor<Cpu, f32, []> {
        quantised(x * 2.0).sum()
    }

    #[grad(x)]
    fn through_a_branch(x: &Tensor<Cpu, f32, [4, 3]>) -> Tensor<Cpu, f32, []> {
        relu_like(x).sum()
    }
}

fn main() {}
