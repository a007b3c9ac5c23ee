// `index_add` and `scatter_add` checked before they run. PyTorch reports
// each of these at run time: "index_add_(): Index is supposed to be a
// vector", "source tensor shape must match self tensor shape, excluding
// the specified dimension", "Expected index [4, 2] to be smaller than
// self [3, 5] apart from dimension 1", "scatter(): Expected self.dtype to
// be equal to src.dtype"; here they do not build.
use tensorfn::prelude::*;

tensor_fn! {
    fn adds(
        x: &Tensor<Cpu, f32, [3, 5]>,
        rows: &Tensor<Cpu, i64, [2, 2]>,
        idx: &Tensor<Cpu, i64, [4]>,
        src: &Tensor<Cpu, f32, [4, 6]>,
        short: &Tensor<Cpu, f32, [2, 5]>,
        big: &Tensor<Cpu, i64, [4, 2]>,
        small: &Tensor<Cpu, f32, [3, 1]>,
        half: &Tensor<Cpu, f16, [4, 5]>,
        fidx: &Tensor<Cpu, f32, [4]>,
        good: &Tensor<Cpu, f32, [4, 5]>,
    ) -> Tensor<Cpu, f32, [3, 5]> {
        let a = x.index_add(0, rows, src);
        let b = x.index_add(0, idx, src);
        let c = index_add(x, 0, idx, short, alpha = 2.0);
        let d = x.scatter_add(1, big, small);
        let e = x.index_add(0, idx, half);
        let f = x.scatter_add(0, fidx, src);
        x.index_add(0, idx, good, alpha = x)
    }
}

fn main() {}
