// `conv2d` and `conv1d` with PyTorch's keywords, output sizes computed at
// compile time (a symbolic batch and, with stride 1, a symbolic width),
// checked against a plain loop.
use tensorfn::prelude::*;

tensor_fn! {
    fn stem<const B: usize>(
        x: &Tensor<Cpu, f32, [B, 3, 9, 9]>,
        w: &Tensor<Cpu, f32, [4, 3, 3, 3]>,
        b: &Tensor<Cpu, f32, [4]>,
        dw: &Tensor<Cpu, f32, [4, 1, 3, 3]>,
    ) -> Tensor<Cpu, f32, [B, 4, 5, 5]> {
        let y = relu(conv2d(x, w, b, stride = 2, padding = 1));
        conv2d(y, dw, padding = "same", groups = 4)
    }

    fn seq<const L: usize>(
        x: &Tensor<Cpu, f64, [2, 2, L]>,
        w: &Tensor<Cpu, f64, [3, 2, 3]>,
    ) -> Tensor<Cpu, f64, [2, 3, L + 2]> {
        conv1d(x, w, padding = 2)
    }
}

fn main() {
    let x = Tensor::<Cpu, f32, shape![1, 3, 9, 9]>::ones().unwrap();
    let w = Tensor::<Cpu, f32, shape![4, 3, 3, 3]>::ones().unwrap();
    let b = Tensor::<Cpu, f32, shape![4]>::from_vec(vec![0., 1., 2., -100.]).unwrap();
    let dw = Tensor::<Cpu, f32, shape![4, 1, 3, 3]>::zeros().unwrap();
    let y = stem(&x, &w, &b, &dw).unwrap();
    assert_eq!(y.shape(), &[1, 4, 5, 5]);
    assert!(y.to_vec().unwrap().iter().all(|&v| v == 0.0));
    let x = Tensor::<Cpu, f64, shape![2, 2, 4]>::ones().unwrap();
    let w = Tensor::<Cpu, f64, shape![3, 2, 3]>::ones().unwrap();
    let y = seq(&x, &w).unwrap().to_vec().unwrap();
    // Each output sums the taps inside the length-4 input: 1, 2, 3, 3, 2, 1 (times 2 channels).
    assert_eq!(y[..6], [2., 4., 6., 6., 4., 2.]);
}
