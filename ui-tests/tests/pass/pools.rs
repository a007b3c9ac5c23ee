// Pooling and `flatten` in a small conv-net head: every output size is
// computed at compile time.
use tensorfn::prelude::*;

tensor_fn! {
    fn head<D: Device, const N: usize>(
        x: &Tensor<D, f32, [N, 16, 10, 10]>,
        w: &Tensor<D, f32, [400, 10]>,
        b: &Tensor<D, f32, [10]>,
    ) -> (Tensor<D, f32, [N, 10]>, Tensor<D, f32, [N, 16]>) {
        let x = max_pool2d(x, kernel_size = 3, stride = 2, padding = 1, ceil_mode = true);
        let y = avg_pool2d(x, 2, stride = 1, count_include_pad = false);
        let z = adaptive_avg_pool2d(y, 1).flatten(1);
        (addmm(b, flatten(y, 1), w), z)
    }
}

#[test]
fn runs() -> Result<()> {
    let x = Tensor::<Cpu, f32, shape![2, 16, 10, 10]>::ones()?;
    let w = Tensor::<Cpu, f32, shape![400, 10]>::zeros()?;
    let b = Tensor::<Cpu, f32, shape![10]>::ones()?;
    let (y, z) = head(&x, &w, &b)?;
    assert_eq!((y.shape(), z.shape()), (&[2, 10][..], &[2, 16][..]));
    // Zero weights leave the bias; the pools of ones average to one.
    assert!(y.to_vec()?.iter().all(|&v| v == 1.0));
    assert!(z.to_vec()?.iter().all(|&v| v == 1.0));
    Ok(())
}
