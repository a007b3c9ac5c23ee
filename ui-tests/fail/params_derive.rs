// `#[derive(Params)]` on what cannot be parameters: a tuple struct (its
// fields have no names to be keys), an enum, an unknown option, and a
// field that is not a tensor or parameters.
use tensorfn::prelude::*;

#[derive(Params)]
struct Pair<D: Device>(Tensor<D, f32, shape![2]>, Tensor<D, f32, shape![2]>);

#[derive(Params)]
enum Either<D: Device> {
    A(Tensor<D, f32, shape![2]>),
}

#[derive(Params)]
struct Renamed<D: Device> {
    #[params(name = "w")]
    weight: Tensor<D, f32, shape![2]>,
}

#[derive(Params)]
struct WithCount<D: Device> {
    weight: Tensor<D, f32, shape![2]>,
    count: usize,
}

fn main() {}
