//! Two GPU ordinals: one tensor is moved before they meet. A CPU tensor is
//! moved to the GPU explicitly before a CUDA function (the fix of
//! fail/cpu_to_cuda_param.rs).
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn add(a: &Tensor<Cuda, f32, [8]>, b: &Tensor<Cuda<1>, f32, [8]>) -> Tensor<Cuda, f32, [8]> {
        a + b.to_device::<Cuda>()
    }

    pub fn double(x: &Tensor<Cuda, f32, [2, 3]>) -> Tensor<Cuda, f32, [2, 3]> {
        x * 2.0
    }
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![2, 3]>::randn(81)?;
    match x.to_device::<Cuda>() {
        Ok(g) => {
            let y = double(&g)?.to_cpu()?;
            let want: Vec<f64> = f64s(&x).iter().map(|v| v * 2.0).collect();
            assert_close("double", &f64s(&y), &want, 0.0);
        }
        Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. }), "{e}"),
    }
    let a = Tensor::<Cpu, f32, shape![8]>::randn(82)?;
    if let (Some(ga), Ok(gb)) = (on_gpu(&a), a.to_device::<Cuda<1>>()) {
        let s = add(&ga, &gb)?.to_cpu()?;
        let want: Vec<f64> = f64s(&a).iter().map(|v| v * 2.0).collect();
        assert_close("add", &f64s(&s), &want, 0.0);
    }
    Ok(())
}
