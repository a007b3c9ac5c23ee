// A tuple result's `grad_output` is a tuple with one gradient per element,
// `()` in the place of an integer element: a gradient of another shape in
// its place, or a tuple of another length, is an error at the call.
use tensorfn::prelude::*;

tensor_fn! {
    #[grad(x)]
    fn top2(x: &Tensor<Cpu, f32, [4, 5]>) -> (Tensor<Cpu, f32, [4, 2]>, Tensor<Cpu, i64, [4, 2]>) {
        x.topk(2)
    }
}

fn main() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![4, 5]>::zeros()?;
    let g = Tensor::<Cpu, f32, shape![4, 5]>::zeros()?;
    let _ = top2::vjp(&x, (&g, ()))?;
    let right = Tensor::<Cpu, f32, shape![4, 2]>::zeros()?;
    let _ = top2::vjp(&x, (&right,))?;
    Ok(())
}
