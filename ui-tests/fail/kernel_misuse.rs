// A `#[kernel]` on the wrong element type, and a kernel body that mixes types.
use tensorfn::prelude::*;

tensor_fn! {
    #[kernel]
    fn gelu(x: f32) -> f32 {
        0.5 * x * (1.0 + tanh(0.7978846 * (x + 0.044715 * x * x * x)))
    }

    #[kernel]
    fn mixed(x: f32, y: f64) -> f32 {
        x * y
    }

    fn act(h: &Tensor<Cpu, f16, [4, 4]>) -> Tensor<Cpu, f32, [4, 4]> {
        gelu(h)
    }
}

fn main() {}
