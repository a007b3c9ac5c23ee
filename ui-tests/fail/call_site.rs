// Calls of generated functions with the wrong tensor. A generated
// function takes its tensors as `&impl TensorArg<D, T, S>`, whose bounds
// compare the argument with the parameter part by part, so each error
// names what differs, in numbers where it can, and the conversion that
// fixes it: the dtype (`.cast`), a dim (3 against 784), the rank (1
// against 2), the GPU (`Cuda<1>` against `Cuda`, `.to_device`), and a
// static dim where the function takes a run-time one or the reverse
// (`.into_shape`). The fixes are in `tests/pass/call_site.rs`.
use tensorfn::prelude::*;

tensor_fn! {
    pub fn logits(x: &Tensor<Cpu, f32, [B, 784]>) -> Tensor<Cpu, f32, [B]> {
        x.sum(1)
    }

    pub fn on_gpu0(x: &Tensor<Cuda, f32, [8]>) -> Tensor<Cuda, f32, [8]> {
        x * 2.0
    }

    pub fn rows(x: &Tensor<Cpu, f64, [M, H]>) -> Tensor<Cpu, f64, [M]> {
        x.sum(1)
    }
}

fn main() -> Result<()> {
    let wrong_dtype = Tensor::<Cpu, f64, shape![_, 784]>::zeros_dims(&[2, 784])?;
    let _ = logits(&wrong_dtype)?;
    let wrong_dim = Tensor::<Cpu, f32, shape![_, 3]>::zeros_dims(&[2, 3])?;
    let _ = logits(&wrong_dim)?;
    let wrong_rank = Tensor::<Cpu, f32, shape![_]>::zeros_dims(&[784])?;
    let _ = logits(&wrong_rank)?;
    let second_gpu = Tensor::<Cuda<1>, f32, shape![8]>::zeros()?;
    let _ = on_gpu0(&second_gpu)?;
    // `M` and `H` are run-time dims of `rows`: a static tensor is converted
    // with `into_shape` (or `M` marked `{M}` as a `const` item).
    let static_shape = Tensor::<Cpu, f64, shape![5, 2]>::zeros()?;
    let _ = rows(&static_shape)?;
    let run_time = Tensor::<Cpu, f32, shape![_, _]>::zeros_dims(&[2, 784])?;
    let _ = logits(&run_time)?;
    Ok(())
}
