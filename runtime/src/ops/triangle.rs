//! `tril` and `triu`: the triangles of the last two dims, the rest zero.
//!
//! The mask of one matrix (`[rows, cols]` of `bool`) is made on the host
//! and applied with `where_`, broadcast over the leading dims, so every
//! dtype (`bool` included) and device takes the same path.

use super::select::where_;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::shape::{Dyn, Shape};
use crate::tensor::Tensor;
use tensorfn_core::rules;

impl<D: Device, T: DType, S: Shape> Tensor<D, T, S> {
    /// The lower triangle of the last two dims (PyTorch's `tril`): the
    /// elements with `col - row <= diagonal`, zeros (`false`) elsewhere.
    /// `diagonal = 0` keeps the main diagonal, `-1` starts below it, `1`
    /// above. Tensors of fewer than 2 dims do not build.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, i32, shape![2, 3]>::from_vec(vec![1, 2, 3, 4, 5, 6]).unwrap();
    /// assert_eq!(x.tril(0).unwrap().to_vec().unwrap(), vec![1, 0, 0, 4, 5, 0]);
    /// assert_eq!(x.tril(1).unwrap().to_vec().unwrap(), vec![1, 2, 0, 4, 5, 6]);
    /// let causal = Tensor::<Cpu, bool, shape![3, 3]>::ones().unwrap().tril(0).unwrap();
    /// assert_eq!(causal.to_vec().unwrap()[..3], [true, false, false]);
    /// ```
    pub fn tril(&self, diagonal: i64) -> Result<Self> {
        self.triangle(false, diagonal)
    }

    /// The upper triangle of the last two dims (PyTorch's `triu`): the
    /// elements with `col - row >= diagonal`, zeros (`false`) elsewhere.
    ///
    /// ```
    /// use tensorfn_runtime::{Tensor, Cpu, shape};
    /// let x = Tensor::<Cpu, f32, shape![1, 2, 2]>::from_vec(vec![1., 2., 3., 4.]).unwrap();
    /// assert_eq!(x.triu(0).unwrap().to_vec().unwrap(), vec![1., 2., 0., 4.]);
    /// assert_eq!(x.triu(1).unwrap().to_vec().unwrap(), vec![0., 2., 0., 0.]);
    /// ```
    pub fn triu(&self, diagonal: i64) -> Result<Self> {
        self.triangle(true, diagonal)
    }

    fn triangle(&self, upper: bool, diagonal: i64) -> Result<Self> {
        const {
            assert!(
                S::RANK >= 2,
                "tril/triu work on the last two dims: the tensor needs at least 2 dims"
            )
        };
        let op = if upper { "triu" } else { "tril" };
        let dims = rules::triangle(op, ("self", self.dims()))?;
        let (rows, cols) = (dims[dims.len() - 2], dims[dims.len() - 1]);
        let keep: Vec<bool> = (0..rows * cols)
            .map(|i| {
                let d = (i % cols) as i64 - (i / cols) as i64;
                if upper {
                    d >= diagonal
                } else {
                    d <= diagonal
                }
            })
            .collect();
        let mask = Tensor::<D, bool, (Dyn, Dyn)>::from_vec_dims(keep, &[rows, cols])?;
        where_(&mask, self, &Tensor::<D, T, ()>::zeros()?)
    }
}
