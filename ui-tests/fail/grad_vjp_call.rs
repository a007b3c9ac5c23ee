// `name::vjp`'s `grad_output` is typed like the result: one of another
// shape is an error at the call, as for any argument.
use tensorfn::prelude::*;

tensor_fn! {
    #[grad(x)]
    fn double(x: &Tensor<Cpu, f32, [4, 3]>) -> Tensor<Cpu, f32, [4, 3]> {
        x * 2.0
    }
}

fn main() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![4, 3]>::zeros()?;
    let g = Tensor::<Cpu, f32, shape![3, 4]>::zeros()?;
    let _ = double::vjp(&x, &g)?;
    Ok(())
}
