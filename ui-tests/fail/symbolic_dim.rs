// A batch of [B, 784] images where [B, 785] is expected.
use tensorfn::prelude::*;

tensor_fn! {
    fn classify<const B: usize>(
        x: &Tensor<Cpu, f32, [B, 785]>,
        w: &Tensor<Cpu, f32, [785, 10]>,
    ) -> Tensor<Cpu, f32, [B, 10]> {
        matmul(x, w)
    }

    fn pipeline<const B: usize>(
        images: &Tensor<Cpu, f32, [B, 784]>,
        w: &Tensor<Cpu, f32, [785, 10]>,
    ) -> Tensor<Cpu, f32, [B, 10]> {
        classify(images, w)
    }

    fn direct<const B: usize>(
        images: &Tensor<Cpu, f32, [B, 784]>,
        w: &Tensor<Cpu, f32, [785, 10]>,
    ) -> Tensor<Cpu, f32, [B, 10]> {
        matmul(images, w)
    }
}

fn main() {}
