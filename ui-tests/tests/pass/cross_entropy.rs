// `cross_entropy` of a classifier's logits, as PyTorch writes it, with
// its keywords; the loss of one batch checked against a plain loop.
use tensorfn::prelude::*;

tensor_fn! {
    fn loss<const B: usize>(
        x: &Tensor<Cpu, f32, [B, 4]>,
        w: &Tensor<Cpu, f32, [4, 3]>,
        y: &Tensor<Cpu, i64, [B]>,
    ) -> (Tensor<Cpu, f32, []>, Tensor<Cpu, f32, [B]>) {
        let logits = x.matmul(w);
        (
            cross_entropy(logits, y, label_smoothing = 0.1),
            cross_entropy(logits, y, reduction = "none", ignore_index = 2),
        )
    }
}

#[test]
fn runs() {
    let x =
        Tensor::<Cpu, f32, shape![2, 4]>::from_vec(vec![1., 0., 0., 0., 0., 1., 0., 0.]).unwrap();
    let w = Tensor::<Cpu, f32, shape![4, 3]>::from_vec((0..12).map(|i| i as f32 * 0.1).collect())
        .unwrap();
    let y = Tensor::<Cpu, i64, shape![2]>::from_vec(vec![0, 2]).unwrap();
    let (mean, rows) = loss(&x, &w, &y).unwrap();
    let rows = rows.to_vec().unwrap();
    // Row 0: logits [0, 0.1, 0.2], target 0.
    let l: Vec<f32> = vec![0.0, 0.1, 0.2];
    let lse = l.iter().map(|v| v.exp()).sum::<f32>().ln();
    assert!((rows[0] - (lse - l[0])).abs() < 1e-6);
    assert_eq!(rows[1], 0.0); // ignored
    assert!(mean.to_vec().unwrap()[0].is_finite());
}
