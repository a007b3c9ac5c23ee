// Row kernels (`#[kernel]` over `Row<T>`): a row argument whose rows differ
// in length from the input's, a tensor where a scalar goes, a reduction of
// a per-row value, a row returned where one value per row is declared,
// and a row kernel under `#[grad]` whose result goes through an integer.
use tensorfn::prelude::*;

tensor_fn! {
    #[kernel]
    pub fn my_rms_norm(x: Row<f32>, w: Row<f32>, eps: f32) -> Row<f32> {
        let ms = mean(x * x);
        x * rsqrt(ms + eps) * w
    }

    #[kernel]
    fn twice_reduced(x: Row<f32>) -> Row<f32> {
        let s = sum(x);
        x / max(s)
    }

    #[kernel]
    fn not_reduced(x: Row<f32>) -> f32 {
        x * 2.0
    }

    fn wrong_weight<const B: usize>(x: &Tensor<Cpu, f32, [B, 768]>, w: &Tensor<Cpu, f32, [512]>) -> Tensor<Cpu, f32, [B, 768]> {
        my_rms_norm(x, w, 1e-6)
    }

    fn tensor_eps(x: &Tensor<Cpu, f32, [4, 8]>, w: &Tensor<Cpu, f32, [8]>, e: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4, 8]> {
        my_rms_norm(x, w, e)
    }

    #[kernel]
    fn quantised(x: Row<f32>) -> Row<f32> {
        x * ((max(x) * 4.0) as i32) as f32
    }

    #[grad(x)]
    fn trained(x: &Tensor<Cpu, f32, [4, 8]>) -> Tensor<Cpu, f32, []> {
        quantised(x).sum()
    }
}

fn main() {}
