// An all-gather output whose dim 0 is not N times the input's.
use tensorfn::collective::Comm;
use tensorfn::prelude::*;

fn main() -> Result<()> {
    let comm = Comm::<(Cuda<0>, Cuda<1>)>::new()?;
    let a = Tensor::<Cuda<0>, f32, shape![2, 3]>::zeros()?;
    let b = Tensor::<Cuda<1>, f32, shape![2, 3]>::zeros()?;
    comm.all_gather::<shape![6, 3], _>(&(a, b))?;
    Ok(())
}
