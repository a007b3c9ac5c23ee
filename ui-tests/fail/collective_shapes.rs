// The per-device tensors of a collective disagree: PyTorch's
// `dist.all_reduce` on ranks holding [4, 8] and [4, 16] tensors hangs or
// fails inside NCCL at run time; here the call does not build.
use tensorfn::collective::{Comm, ReduceOp};
use tensorfn::prelude::*;

fn main() -> Result<()> {
    let comm = Comm::<(Cuda<0>, Cuda<1>)>::new()?;
    let a = Tensor::<Cuda<0>, f32, shape![4, 8]>::zeros()?;
    let b = Tensor::<Cuda<1>, f32, shape![4, 16]>::zeros()?;
    comm.all_reduce(&(a, b), ReduceOp::Sum)?;
    // A dtype that differs, and tensors in the wrong order.
    let c = Tensor::<Cuda<0>, f32, shape![4]>::zeros()?;
    let d = Tensor::<Cuda<1>, f16, shape![4]>::zeros()?;
    comm.broadcast(&(c.clone(), d), 0)?;
    let e = Tensor::<Cuda<1>, f32, shape![4]>::zeros()?;
    comm.all_gather::<shape![8], _>(&(e, c))?;
    Ok(())
}
