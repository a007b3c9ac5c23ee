// User code passes a CPU tensor where the function takes a CUDA one: a
// type error from rustc, found by `cargo check`.
use tensorfn::prelude::*;

tensor_fn! {
    pub fn double(x: &Tensor<Cuda, f32, [2, 3]>) -> Tensor<Cuda, f32, [2, 3]> {
        x * 2.0
    }
}

fn main() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![2, 3]>::ones()?;
    let _y = double(&x)?;
    Ok(())
}
