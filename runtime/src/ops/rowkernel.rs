//! The entry point for row kernels `tensor_fn!` generates (`#[kernel]`
//! functions over `Row<T>` parameters): the rows of the last dim of each
//! row argument, broadcast over the leading dims, on the CPU through the
//! generated Rust loop and on CUDA through its PTX.

use super::dispatch::dispatch;
use super::output::output;
use crate::device::Device;
use crate::dtype::FloatDType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::shape::Shape;
use crate::storage::Storage;
use crate::tensor::Tensor;
use std::marker::PhantomData;
use tensorfn_core::rules;
use tensorfn_kernels::rowkernel::RowKernelDef;

/// The CPU body of a row kernel: the row arguments' rows (each of `cols`
/// elements), the scalar arguments, and the output row (`cols` elements,
/// or one for a per-row result).
pub type RowCpu<'a, T> = dyn Fn(&[&[T]], &[f64], &mut [T]) + Sync + 'a;

/// One row argument of [`row_kernel`]: a tensor of any shape type.
pub struct RowArg<'a, D: Device, T: FloatDType> {
    storage: &'a Storage<T>,
    layout: &'a Layout,
    device: PhantomData<D>,
}

/// `x` as a row argument of [`row_kernel`].
pub fn row_arg<D: Device, T: FloatDType, S: Shape>(x: &Tensor<D, T, S>) -> RowArg<'_, D, T> {
    RowArg {
        storage: &x.storage,
        layout: &x.layout,
        device: PhantomData,
    }
}

/// A buffer borrowed from a tensor or copied from it.
enum Held<'a, B> {
    Borrowed(&'a B),
    Owned(B),
}

impl<B> Held<'_, B> {
    fn get(&self) -> &B {
        match self {
            Held::Borrowed(b) => b,
            Held::Owned(b) => b,
        }
    }
}

/// Runs a generated row kernel over the rows of the last dim of `rows`
/// (all of one length; their leading dims broadcast to the result's),
/// with `scalars` (each converted to its parameter's dtype): a tensor of
/// `out_dims`, the broadcast leading dims followed by the row's length
/// (or without it for a per-row result). On the CPU `cpu` runs per row;
/// on CUDA the kernel's PTX.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, shape, __private::{row_arg, row_kernel}};
/// use tensorfn_kernels::rowkernel::RowKernelDef;
/// static K: RowKernelDef = RowKernelDef { name: "tf_rows_sum", ptx: "", per_row: true };
/// let x = Tensor::<Cpu, f32, shape![2, 3]>::from_vec(vec![1., 2., 3., 4., 5., 6.]).unwrap();
/// let y: Tensor<Cpu, f32, shape![2]> = row_kernel(&[row_arg(&x)], &[], &[2], &K,
///     &|rows: &[&[f32]], _: &[f64], out: &mut [f32]| out[0] = rows[0].iter().sum()).unwrap();
/// assert_eq!(y.to_vec().unwrap(), vec![6., 15.]);
/// ```
pub fn row_kernel<D: Device, T: FloatDType, SO: Shape>(
    rows: &[RowArg<'_, D, T>],
    scalars: &[f64],
    out_dims: &[usize],
    kernel: &'static RowKernelDef,
    cpu: &RowCpu<'_, T>,
) -> Result<Tensor<D, T, SO>> {
    let name = kernel.name;
    let cols = match rows.first().map(|r| r.layout.dims()) {
        Some([.., c]) => *c,
        _ => {
            return Err(Error::shape(
                name,
                "a first row argument of rank 1 or more",
                "none",
            ))
        }
    };
    let lead: Vec<usize> = if kernel.per_row {
        out_dims.to_vec()
    } else {
        match out_dims {
            [lead @ .., c] if *c == cols => lead.to_vec(),
            _ => {
                return Err(Error::shape(
                    name,
                    format!("a result whose last dim is the rows' {cols}"),
                    format!("dims {out_dims:?}"),
                ))
            }
        }
    };
    let mut full = lead.clone();
    full.push(cols);
    for (i, r) in rows.iter().enumerate() {
        let dims = r.layout.dims();
        if dims.last() != Some(&cols) {
            return Err(Error::shape(
                name,
                format!("row argument {i} with rows of {cols} elements"),
                format!("dims {dims:?}"),
            ));
        }
        let what = format!("row argument {i}");
        rules::broadcast_to(name, (&what, dims), &full)?;
    }
    let nrows: usize = lead.iter().product();
    let storage = dispatch!(D, |be| {
        let mut held = Vec::with_capacity(rows.len());
        for r in rows {
            let buf = be.buf(r.storage);
            // One row for every row, or a row per row of the result.
            let (layout, step) = if r.layout.numel() == cols {
                (r.layout.clone(), 0)
            } else {
                (r.layout.broadcast_to(&full), cols)
            };
            let h = if layout.is_contiguous() && layout.offset() == 0 {
                Held::Borrowed(buf)
            } else {
                Held::Owned(be.contiguous(buf, &layout)?)
            };
            held.push((h, step));
        }
        let ins: Vec<(&_, usize)> = held.iter().map(|(h, s)| (h.get(), *s)).collect();
        be.wrap(be.row_kernel(kernel, &ins, scalars, (nrows, cols), cpu)?)
    });
    output(storage, out_dims)
}
