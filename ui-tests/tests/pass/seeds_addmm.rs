//! The corrected versions of the `addmm` seeds: operands on one device, one
//! dtype, and a matrix (not a vector) as the second factor.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    /// `bias + m1 @ m2` with every operand on the GPU.
    pub fn step_gpu(
        gpu_result: &Tensor<Cuda, f32, [10, 10]>,
        gpu_matrix: &Tensor<Cuda, f32, [10, 10]>,
        gpu_tensor: &Tensor<Cuda, f32, [10, 10]>,
    ) -> Tensor<Cuda, f32, [10, 10]> {
        addmm(gpu_result, gpu_matrix, gpu_tensor)
    }

    /// The same on the CPU, with `beta` and `alpha`.
    pub fn step_cpu(
        result: &Tensor<Cpu, f32, [10, 10]>,
        matrix: &Tensor<Cpu, f32, [10, 10]>,
        tensor: &Tensor<Cpu, f32, [10, 10]>,
    ) -> Tensor<Cpu, f32, [10, 10]> {
        addmm(result, matrix, tensor, beta = 0.5, alpha = 2.0)
    }

    /// f16 operands with the f32 one cast first.
    pub fn step_f16(
        result: &Tensor<Cpu, f16, [10, 10]>,
        matrix: &Tensor<Cpu, f16, [10, 10]>,
        tensor: &Tensor<Cpu, f32, [10, 10]>,
    ) -> Tensor<Cpu, f16, [10, 10]> {
        addmm(result, matrix, tensor.cast::<f16>())
    }

    /// A matrix times a vector is `matmul`; as `addmm` the vector becomes a column.
    pub fn matvec(
        result: &Tensor<Cpu, f32, [10, 1]>,
        matrix: &Tensor<Cpu, f32, [10, 10]>,
        vector: &Tensor<Cpu, f32, [10]>,
    ) -> (Tensor<Cpu, f32, [10]>, Tensor<Cpu, f32, [10, 1]>) {
        (matmul(matrix, vector), addmm(result, matrix, vector.reshape([10, 1])))
    }
}

#[test]
fn runs() -> Result<()> {
    let r = Tensor::<Cpu, f32, shape![10, 10]>::randn(11)?;
    let m = Tensor::<Cpu, f32, shape![10, 10]>::randn(12)?;
    let t = Tensor::<Cpu, f32, shape![10, 10]>::randn(13)?;
    let (rv, mv, tv) = (f64s(&r), f64s(&m), f64s(&t));
    let prod = matmul_ref(&mv, &tv, 10, 10, 10);

    let got = f64s(&step_cpu(&r, &m, &t)?);
    let want: Vec<f64> = rv
        .iter()
        .zip(&prod)
        .map(|(b, p)| 0.5 * b + 2.0 * p)
        .collect();
    assert_close("addmm scaled", &got, &want, 1e-5);

    let (r16, m16) = (r.cast::<f16>()?, m.cast::<f16>()?);
    let got = f64s(&step_f16(&r16, &m16, &t)?);
    let (r16v, m16v, t16v) = (f64s(&r16), f64s(&m16), f64s(&t.cast::<f16>()?));
    let p16 = matmul_ref(&m16v, &t16v, 10, 10, 10);
    let want: Vec<f64> = r16v.iter().zip(&p16).map(|(b, p)| b + p).collect();
    assert_close("addmm f16", &got, &want, 1e-2);

    let v = Tensor::<Cpu, f32, shape![10]>::randn(14)?;
    let col = Tensor::<Cpu, f32, shape![10, 1]>::randn(15)?;
    let (mv_out, addmm_out) = matvec(&col, &m, &v)?;
    let want_mv = matmul_ref(&mv, &f64s(&v), 10, 10, 1);
    assert_close("matmul", &f64s(&mv_out), &want_mv, 1e-5);
    let want: Vec<f64> = f64s(&col)
        .iter()
        .zip(&want_mv)
        .map(|(b, p)| b + p)
        .collect();
    assert_close("addmm column", &f64s(&addmm_out), &want, 1e-5);

    if let (Some(gr), Some(gm), Some(gt)) = (on_gpu(&r), on_gpu(&m), on_gpu(&t)) {
        let got = f64s(&step_gpu(&gr, &gm, &gt)?);
        let want: Vec<f64> = rv.iter().zip(&prod).map(|(b, p)| b + p).collect();
        assert_close("addmm gpu", &got, &want, 1e-4);
    }
    Ok(())
}
