// A shard dim that does not divide by the number of GPUs: PyTorch's
// `reduce_scatter_tensor` raises at run time; with static shapes the call
// does not build.
use tensorfn::collective::{Comm, ReduceOp};
use tensorfn::prelude::*;

fn main() -> Result<()> {
    let comm = Comm::<(Cuda<0>, Cuda<1>)>::new()?;
    let a = Tensor::<Cuda<0>, f32, shape![5, 3]>::zeros()?;
    let b = Tensor::<Cuda<1>, f32, shape![5, 3]>::zeros()?;
    comm.reduce_scatter::<shape![2, 3], _>(&(a, b), ReduceOp::Sum)?;
    Ok(())
}
