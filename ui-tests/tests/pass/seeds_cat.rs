//! The `cat` seeds: [2, 3, 4] and [2, 5, 4] along dim 1 is valid and gives
//! [2, 8, 4]; tensors on two devices are moved first.
use super::common::*;
use tensorfn::prelude::*;

tensor_fn! {
    pub fn join(a: &Tensor<Cpu, f32, [2, 3, 4]>, b: &Tensor<Cpu, f32, [2, 5, 4]>) -> Tensor<Cpu, f32, [2, 8, 4]> {
        cat([a, b], 1)
    }

    pub fn join3(a: &Tensor<Cpu, i64, [2, 3]>, b: &Tensor<Cpu, i64, [1, 3]>, c: &Tensor<Cpu, i64, [4, 3]>) -> Tensor<Cpu, i64, [7, 3]> {
        cat([a, b, c], 0)
    }

    pub fn join_on_gpu(cpu_tensor: &Tensor<Cpu, f32, [2, 3]>, gpu_tensor: &Tensor<Cuda, f32, [2, 3]>) -> Tensor<Cuda, f32, [4, 3]> {
        cat([cpu_tensor.to_device::<Cuda>(), gpu_tensor], 0)
    }

    pub fn join_generic<const N: usize, const M: usize>(a: &Tensor<Cpu, f32, [N]>, b: &Tensor<Cpu, f32, [M]>) -> Tensor<Cpu, f32, [N + M]> {
        cat([a, b], 0)
    }
}

#[test]
fn runs() -> Result<()> {
    let a = Tensor::<Cpu, f32, shape![2, 3, 4]>::randn(1)?;
    let b = Tensor::<Cpu, f32, shape![2, 5, 4]>::randn(2)?;
    let c = join(&a, &b)?;
    assert_eq!(c.shape(), &[2, 8, 4]);
    let (av, bv, cv) = (f64s(&a), f64s(&b), f64s(&c));
    for i in 0..2 {
        for j in 0..8 {
            for k in 0..4 {
                let want = if j < 3 {
                    av[(i * 3 + j) * 4 + k]
                } else {
                    bv[(i * 5 + (j - 3)) * 4 + k]
                };
                assert_eq!(cv[(i * 8 + j) * 4 + k], want);
            }
        }
    }

    let x = Tensor::<Cpu, i64, shape![2, 3]>::arange(0, 1)?;
    let y = Tensor::<Cpu, i64, shape![1, 3]>::arange(100, 1)?;
    let z = Tensor::<Cpu, i64, shape![4, 3]>::arange(-50, 7)?;
    let j = join3(&x, &y, &z)?;
    let mut want = x.to_vec()?;
    want.extend(y.to_vec()?);
    want.extend(z.to_vec()?);
    assert_eq!(j.to_vec()?, want);

    let p = Tensor::<Cpu, f32, shape![3]>::randn(3)?;
    let q = Tensor::<Cpu, f32, shape![2]>::randn(4)?;
    let pq = join_generic::<3, 2>(&p, &q)?;
    let mut want = p.to_vec()?;
    want.extend(q.to_vec()?);
    assert_eq!(pq.to_vec()?, want);

    let cpu_tensor = Tensor::<Cpu, f32, shape![2, 3]>::randn(5)?;
    let other = Tensor::<Cpu, f32, shape![2, 3]>::randn(6)?;
    if let Some(g) = on_gpu(&other) {
        let r = join_on_gpu(&cpu_tensor, &g)?;
        let mut want = f64s(&cpu_tensor);
        want.extend(f64s(&other));
        assert_close("cat gpu", &f64s(&r), &want, 0.0);
    }
    Ok(())
}
