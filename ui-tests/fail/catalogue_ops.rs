// Misuses of the catalogue's newer ops: a `where_` condition that is not
// `bool`, a comparison across dtypes, a float-only op on integers, a mask
// that would grow the tensor, a `clamp` without bounds, a misspelt method.
use tensorfn::prelude::*;

tensor_fn! {
    fn pick(x: &Tensor<Cpu, f32, [8]>, c: &Tensor<Cpu, f32, [8]>) -> Tensor<Cpu, f32, [8]> {
        where_(c, x, 0.0)
    }

    fn mixed(a: &Tensor<Cpu, f16, [8]>, b: &Tensor<Cpu, f32, [8]>) -> Tensor<Cpu, bool, [8]> {
        a < b
    }

    fn ints(x: &Tensor<Cpu, i32, [8]>) -> Tensor<Cpu, i32, [8]> {
        erf(x)
    }

    fn grow(x: &Tensor<Cpu, f32, [4]>, m: &Tensor<Cpu, bool, [3, 4]>) -> Tensor<Cpu, f32, [4]> {
        x.masked_fill(m, 0.0)
    }

    fn unbounded(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> {
        x.clamp()
    }

    fn typo(x: &Tensor<Cpu, f32, [4]>) -> Tensor<Cpu, f32, [4]> {
        x.sofplus()
    }
}

fn main() {}
