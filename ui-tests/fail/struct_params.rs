// Parameter structs: a field of the wrong shape in a product, a field the
// struct does not have, an array index past the end, the struct used as a
// tensor, an array field used as a tensor, a field on a tensor, a field
// type whose shape is not written out (reported on the parameter's type),
// a struct without `#[derive(Params)]`, and calls passing structs: another
// struct than the callee takes, a struct of another dtype, a tensor where
// a struct is taken.
use tensorfn::prelude::*;

#[derive(Params)]
struct Mlp<D: Device, T: Float> {
    w1: Tensor<D, T, shape![784, 128]>,
    b1: Tensor<D, T, shape![128]>,
}

#[derive(Params)]
struct Stack {
    h: [Mlp<Cpu, f32>; 2],
}

type S3 = shape![3];

#[derive(Params)]
struct Aliased {
    w: Tensor<Cpu, f32, S3>,
}

struct Plain {
    w: Tensor<Cpu, f32, shape![3]>,
}

tensor_fn! {
    fn wrong_shape(x: &Tensor<Cpu, f32, [4, 100]>, p: &Mlp<Cpu, f32>) -> Tensor<Cpu, f32, [4, 128]> {
        addmm(p.b1, x, p.w1)
    }

    fn unknown_field(x: &Tensor<Cpu, f32, [4, 784]>, p: &Mlp<Cpu, f32>) -> Tensor<Cpu, f32, [4, 128]> {
        addmm(p.b1, x, p.w3)
    }

    fn past_the_end(x: &Tensor<Cpu, f32, [4, 784]>, s: &Stack) -> Tensor<Cpu, f32, [4, 128]> {
        addmm(s.h[2].b1, x, s.h[0].w1)
    }

    fn struct_as_tensor(p: &Mlp<Cpu, f32>) -> Tensor<Cpu, f32, [128]> {
        p.b1 + p
    }

    fn not_a_tensor(s: &Stack) -> Tensor<Cpu, f32, [128]> {
        s.h[1] + s.h
    }

    fn field_of_a_tensor(x: &Tensor<Cpu, f32, [3]>) -> Tensor<Cpu, f32, [3]> {
        x.w
    }

    fn alias(a: &Aliased) -> Tensor<Cpu, f32, [3]> {
        a.w * 2.0
    }
}

#[derive(Params)]
struct Norm<D: Device, T: Float> {
    w: Tensor<D, T, shape![4]>,
}

#[derive(Params)]
struct Layer<D: Device, T: Float> {
    ln: Norm<D, T>,
    mlp: Mlp<D, T>,
}

tensor_fn! {
    fn norm<D: Device, T: Float, const S: usize>(
        x: &Tensor<D, T, [S, 4]>,
        p: &Norm<D, T>,
    ) -> Tensor<D, T, [S, 4]> {
        x * p.w
    }

    fn wrong_struct<D: Device, T: Float>(x: &Tensor<D, T, [2, 4]>, p: &Layer<D, T>) -> Tensor<D, T, [2, 4]> {
        norm(x, p.mlp)
    }

    fn wrong_dtype<D: Device, T: Float>(x: &Tensor<D, T, [2, 4]>, p: &Norm<D, f32>) -> Tensor<D, T, [2, 4]> {
        norm(x, p)
    }

    fn tensor_for_struct<D: Device, T: Float>(x: &Tensor<D, T, [2, 4]>, p: &Layer<D, T>) -> Tensor<D, T, [2, 4]> {
        norm(x, p.ln.w)
    }
}

tensor_fn! {
    fn no_derive(p: &Plain) -> Tensor<Cpu, f32, [3]> {
        p.w * 2.0
    }
}

fn main() {}
