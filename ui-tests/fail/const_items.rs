// `const` items in shapes: an item that is not in scope is one error on
// the dim that names it; a const generic marked `{N}` as an item is
// ambiguous.
use tensorfn::prelude::*;

tensor_fn! {
    pub fn scale(x: &Tensor<Cpu, f32, [SEQ_LEN, 4]>) -> Tensor<Cpu, f32, [SEQ_LEN, 4]> {
        x * 2.0
    }

    pub fn marked<const N: usize>(x: &Tensor<Cpu, f32, [{N}, 4]>) -> Tensor<Cpu, f32, [N, 4]> {
        x * 2.0
    }
}

fn main() {}
