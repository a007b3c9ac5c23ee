//! Parameter structs reached every way within a crate: defined before the
//! function in the same module, by a path into another module (`nn::Head`,
//! `crate::struct_params::nn::Head`, its nested `Proj` found beside it), and through a
//! glob import; a field indexed as a tensor (`p.bias[0]`).

use super::common::{assert_close, f64s};
use tensorfn::prelude::*;

mod nn {
    use tensorfn::prelude::*;

    #[derive(Params)]
    pub struct Proj<D: Device> {
        pub w: Tensor<D, f32, shape![3, 2]>,
    }

    #[derive(Params)]
    pub struct Head<D: Device> {
        pub proj: Proj<D>,
        pub bias: Tensor<D, f32, shape![2]>,
    }
}

#[derive(Params)]
struct Local {
    scale: Tensor<Cpu, f32, shape![2]>,
}

tensor_fn! {
    fn by_path(x: &Tensor<Cpu, f32, [4, 3]>, p: &nn::Head<Cpu>, l: &Local) -> Tensor<Cpu, f32, [4, 2]> {
        addmm(p.bias, x, p.proj.w) * l.scale
    }

    fn by_crate_path(x: &Tensor<Cpu, f32, [4, 3]>, p: &crate::struct_params::nn::Head<Cpu>) -> Tensor<Cpu, f32, [4, 2]> {
        matmul(x, p.proj.w) + p.bias[0]
    }
}

mod user {
    use super::nn::*;
    use tensorfn::prelude::*;

    tensor_fn! {
        pub fn by_glob(x: &Tensor<Cpu, f32, [4, 3]>, p: &Head<Cpu>) -> Tensor<Cpu, f32, [4, 2]> {
            addmm(p.bias, x, p.proj.w)
        }
    }
}

#[test]
fn runs() -> Result<()> {
    let p = nn::Head::<Cpu> {
        proj: nn::Proj {
            w: Tensor::randn(1)?,
        },
        bias: Tensor::randn(2)?,
    };
    let l = Local {
        scale: Tensor::randn(3)?,
    };
    let x: Tensor<Cpu, f32, shape![4, 3]> = Tensor::randn(4)?;
    let (xs, w, b, s) = (f64s(&x), f64s(&p.proj.w), f64s(&p.bias), f64s(&l.scale));
    let product = |i: usize, j: usize| (0..3).map(|k| xs[i * 3 + k] * w[k * 2 + j]).sum::<f64>();
    let want =
        |f: &dyn Fn(usize, usize) -> f64| -> Vec<f64> { (0..8).map(|n| f(n / 2, n % 2)).collect() };
    let got = f64s(&by_path(&x, &p, &l)?);
    assert_close(
        "by_path",
        &got,
        &want(&|i, j| (b[j] + product(i, j)) * s[j]),
        1e-5,
    );
    let got = f64s(&by_crate_path(&x, &p)?);
    assert_close(
        "by_crate_path",
        &got,
        &want(&|i, j| product(i, j) + b[0]),
        1e-5,
    );
    let got = f64s(&user::by_glob(&x, &p)?);
    assert_close("by_glob", &got, &want(&|i, j| b[j] + product(i, j)), 1e-5);
    Ok(())
}
