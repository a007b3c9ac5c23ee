// Every error of a function is reported, each on its operand.
use tensorfn::prelude::*;

tensor_fn! {
    fn many(
        a: &Tensor<Cuda, f32, [4, 8]>,
        b: &Tensor<Cpu, f32, [8, 2]>,
        c: &Tensor<Cuda, f16, [4, 2]>,
        i: &Tensor<Cuda, i32, [4, 2]>,
    ) -> Tensor<Cuda, f32, [4, 2]> {
        let p = matmul(a, b);
        let q = p + c;
        let r = exp(i);
        let s = a.reshape([3, 10]);
        q + r
    }
}

fn main() {}
