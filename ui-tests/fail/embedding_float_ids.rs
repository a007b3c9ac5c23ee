// Ids that are floats: PyTorch's `F.embedding(x, wte)` with `x` a float
// tensor is "Expected tensor for argument #1 'indices' to have one of the
// following scalar types: Long, Int" at run time; here it does not build.
use tensorfn::prelude::*;

tensor_fn! {
    fn embed<const B: usize, const T: usize>(
        ids: &Tensor<Cuda, f32, [B, T]>,
        wte: &Tensor<Cuda, f32, [50257, 768]>,
    ) -> Tensor<Cuda, f32, [B, T, 768]> {
        embedding(ids, wte)
    }

    // The same for the index of `index_select` and `gather`, and an index
    // on another device.
    fn pick(
        x: &Tensor<Cuda, f32, [4, 5]>,
        rows: &Tensor<Cuda, f64, [3]>,
        cols: &Tensor<Cpu, i64, [4, 2]>,
    ) -> (Tensor<Cuda, f32, [3, 5]>, Tensor<Cuda, f32, [4, 2]>) {
        (x.index_select(0, rows), x.gather(1, cols))
    }

    // A table that is not [V, E], an index that is not 1-D, one larger
    // than the input off the gathered dim, a backwards `arange`, and
    // `tril` of a vector.
    fn shapes(
        ids: &Tensor<Cpu, i64, [8]>,
        table: &Tensor<Cpu, f32, [100]>,
        x: &Tensor<Cpu, f32, [4, 5]>,
        idx: &Tensor<Cpu, i64, [2, 2]>,
        big: &Tensor<Cpu, i64, [6, 1]>,
        v: &Tensor<Cpu, f32, [5]>,
    ) -> Tensor<Cpu, f32, [5]> {
        let a = embedding(ids, table);
        let b = x.index_select(1, idx);
        let c = x.gather(1, big);
        let d = arange(5, 2);
        v.tril()
    }
}

fn main() {}
