// Functions generic over their device `D` and dtype `T`: `D` and `T` are
// symbols like dims, so a `Cpu` operand, an `f32` operand or an integer
// `T` is the same spanned error with the fix as a concrete mix.
use tensorfn::prelude::*;

tensor_fn! {
    // A bias kept on the CPU in a function for any device.
    pub fn cpu_operand<D: Device, T: Float, const B: usize>(
        x: &Tensor<D, T, [B, 4]>,
        w: &Tensor<D, T, [4, 3]>,
        bias: &Tensor<Cpu, T, [3]>,
    ) -> Tensor<D, T, [B, 3]> {
        addmm(bias, x, w)
    }

    // An f32 scale with tensors of any float dtype.
    pub fn f32_operand<D: Device, T: Float>(
        x: &Tensor<D, T, [4]>,
        scale: &Tensor<D, f32, [4]>,
    ) -> Tensor<D, T, [4]> {
        x * scale
    }

    // `T: DType` admits integers: no `exp`, no float literal.
    pub fn integer_t<D: Device, T: DType>(x: &Tensor<D, T, [4]>) -> Tensor<D, T, [4]> {
        x.exp()
    }
    pub fn integer_num<D: Device, T: NumDType>(x: &Tensor<D, T, [4]>) -> Tensor<D, T, [4]> {
        x * 0.5
    }

    // A float-only generic function called with integers.
    pub fn softmax_rows<D: Device, T: Float>(x: &Tensor<D, T, [2, 4]>) -> Tensor<D, T, [2, 4]> {
        x.softmax(1)
    }
    pub fn on_ids<D: Device>(ids: &Tensor<D, i64, [2, 4]>) -> Tensor<D, i64, [2, 4]> {
        softmax_rows(ids)
    }
}

fn main() {
    // The same function called with integers from outside the macro.
    let ids = Tensor::<Cpu, i64, shape![2, 4]>::zeros().unwrap();
    let _ = softmax_rows(&ids);
}
