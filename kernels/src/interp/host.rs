//! Host buffers of any dtype and strided views of them.

use crate::error::{Error, Result};
use crate::round;
use half::{bf16, f16};
use tensorfn_core::DTypeKind;

/// A host buffer of one dtype, in the device's memory format.
///
/// ```
/// use tensorfn_kernels::interp::HostData;
/// use tensorfn_kernels::DTypeKind;
/// let d = HostData::from_f64(DTypeKind::BF16, &[1.0, 1.00390625, 3.3]);
/// assert_eq!(d.dtype(), DTypeKind::BF16);
/// // bf16 keeps 8 bits: 1 + 2^-8 is a tie and rounds to even (1.0)
/// assert_eq!(d.to_f64_vec(), vec![1.0, 1.0, 3.296875]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    /// `f32` elements.
    F32(Vec<f32>),
    /// `f64` elements.
    F64(Vec<f64>),
    /// `f16` elements.
    F16(Vec<f16>),
    /// `bf16` elements.
    BF16(Vec<bf16>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `u8` elements.
    U8(Vec<u8>),
    /// `bool` elements.
    Bool(Vec<bool>),
}

impl HostData {
    /// The dtype of the elements.
    ///
    /// ```
    /// use tensorfn_kernels::{interp::HostData, DTypeKind};
    /// assert_eq!(HostData::U8(vec![1]).dtype(), DTypeKind::U8);
    /// ```
    pub fn dtype(&self) -> DTypeKind {
        match self {
            HostData::F32(_) => DTypeKind::F32,
            HostData::F64(_) => DTypeKind::F64,
            HostData::F16(_) => DTypeKind::F16,
            HostData::BF16(_) => DTypeKind::BF16,
            HostData::I32(_) => DTypeKind::I32,
            HostData::I64(_) => DTypeKind::I64,
            HostData::U8(_) => DTypeKind::U8,
            HostData::Bool(_) => DTypeKind::Bool,
        }
    }

    /// Number of elements.
    ///
    /// ```
    /// use tensorfn_kernels::interp::HostData;
    /// assert_eq!(HostData::Bool(vec![true, false]).len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::F64(v) => v.len(),
            HostData::F16(v) => v.len(),
            HostData::BF16(v) => v.len(),
            HostData::I32(v) => v.len(),
            HostData::I64(v) => v.len(),
            HostData::U8(v) => v.len(),
            HostData::Bool(v) => v.len(),
        }
    }

    /// True when there are no elements.
    ///
    /// ```
    /// use tensorfn_kernels::interp::HostData;
    /// assert!(HostData::F32(vec![]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `n` zeros (`false`) of `dtype`.
    ///
    /// ```
    /// use tensorfn_kernels::{interp::HostData, DTypeKind};
    /// assert_eq!(HostData::zeros(DTypeKind::I64, 2), HostData::I64(vec![0, 0]));
    /// ```
    pub fn zeros(dtype: DTypeKind, n: usize) -> HostData {
        match dtype {
            DTypeKind::F32 => HostData::F32(vec![0.0; n]),
            DTypeKind::F64 => HostData::F64(vec![0.0; n]),
            DTypeKind::F16 => HostData::F16(vec![f16::ZERO; n]),
            DTypeKind::BF16 => HostData::BF16(vec![bf16::ZERO; n]),
            DTypeKind::I32 => HostData::I32(vec![0; n]),
            DTypeKind::I64 => HostData::I64(vec![0; n]),
            DTypeKind::U8 => HostData::U8(vec![0; n]),
            DTypeKind::Bool => HostData::Bool(vec![false; n]),
        }
    }

    /// Converts `values` to `dtype` as a cast would (floats round to
    /// nearest even once; integers truncate toward zero and saturate; bool
    /// is `!= 0`).
    ///
    /// ```
    /// use tensorfn_kernels::{interp::HostData, DTypeKind};
    /// let d = HostData::from_f64(DTypeKind::U8, &[-3.0, 2.7, 300.0]);
    /// assert_eq!(d, HostData::U8(vec![0, 2, 255]));
    /// ```
    pub fn from_f64(dtype: DTypeKind, values: &[f64]) -> HostData {
        let v = values.iter().copied();
        match dtype {
            DTypeKind::F32 => HostData::F32(v.map(|x| x as f32).collect()),
            DTypeKind::F64 => HostData::F64(v.collect()),
            DTypeKind::F16 => HostData::F16(v.map(round::f64_to_f16).collect()),
            DTypeKind::BF16 => HostData::BF16(v.map(round::f64_to_bf16).collect()),
            DTypeKind::I32 => HostData::I32(v.map(|x| x as i32).collect()),
            DTypeKind::I64 => HostData::I64(v.map(|x| x as i64).collect()),
            DTypeKind::U8 => HostData::U8(v.map(|x| x as u8).collect()),
            DTypeKind::Bool => HostData::Bool(v.map(|x| x != 0.0).collect()),
        }
    }

    /// Every element as `f64` (exact but for `i64` beyond 2^53).
    ///
    /// ```
    /// use tensorfn_kernels::interp::HostData;
    /// assert_eq!(HostData::Bool(vec![true]).to_f64_vec(), vec![1.0]);
    /// ```
    pub fn to_f64_vec(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.get_f64(i)).collect()
    }

    /// Element `i` as `f64`.
    pub(crate) fn get_f64(&self, i: usize) -> f64 {
        match self {
            HostData::F32(v) => v[i] as f64,
            HostData::F64(v) => v[i],
            HostData::F16(v) => v[i].to_f64(),
            HostData::BF16(v) => v[i].to_f64(),
            HostData::I32(v) => v[i] as f64,
            HostData::I64(v) => v[i] as f64,
            HostData::U8(v) => v[i] as f64,
            HostData::Bool(v) => v[i] as u8 as f64,
        }
    }

    /// Element `i` in its register form (see `prim`): what a load puts in a
    /// register.
    pub(crate) fn reg_bits(&self, i: usize) -> u64 {
        match self {
            HostData::F32(v) => v[i].to_bits() as u64,
            HostData::F64(v) => v[i].to_bits(),
            HostData::F16(v) => v[i].to_f32().to_bits() as u64,
            HostData::BF16(v) => v[i].to_f32().to_bits() as u64,
            HostData::I32(v) => v[i] as u32 as u64,
            HostData::I64(v) => v[i] as u64,
            HostData::U8(v) => v[i] as u64,
            HostData::Bool(v) => v[i] as u64,
        }
    }

    /// Stores a register value (already a value of this dtype) at `i`.
    pub(crate) fn set_reg_bits(&mut self, i: usize, bits: u64) {
        match self {
            HostData::F32(v) => v[i] = f32::from_bits(bits as u32),
            HostData::F64(v) => v[i] = f64::from_bits(bits),
            HostData::F16(v) => v[i] = f16::from_f32(f32::from_bits(bits as u32)),
            HostData::BF16(v) => v[i] = bf16::from_bits((bits as u32 >> 16) as u16),
            HostData::I32(v) => v[i] = bits as u32 as i32,
            HostData::I64(v) => v[i] = bits as i64,
            HostData::U8(v) => v[i] = bits as u8,
            HostData::Bool(v) => v[i] = bits & 1 != 0,
        }
    }
}

/// A strided view of a [`HostData`]: element `(i_0, .., i_{r-1})` is at
/// `offset + Σ i_d * strides[d]` (stride 0 broadcasts a dim).
///
/// ```
/// use tensorfn_kernels::interp::{HostData, HostView};
/// let d = HostData::F32(vec![1.0, 2.0, 3.0]);
/// // a [2, 3] view repeating the row: stride 0 on dim 0
/// let v = HostView::strided(&d, 0, vec![0, 1]);
/// assert_eq!(v.offset, 0);
/// let c = HostView::contiguous(&d);
/// assert!(c.strides.is_none());
/// ```
#[derive(Clone, Debug)]
pub struct HostView<'a> {
    /// The elements.
    pub data: &'a HostData,
    /// Position of element `(0, .., 0)`.
    pub offset: usize,
    /// Elements to step per index of each dim; `None` means row-major
    /// contiguous for the dims of the launch.
    pub strides: Option<Vec<usize>>,
}

impl<'a> HostView<'a> {
    /// The whole buffer, row-major, with the launch's dims.
    ///
    /// ```
    /// use tensorfn_kernels::interp::{HostData, HostView};
    /// let d = HostData::I32(vec![1, 2]);
    /// assert_eq!(HostView::contiguous(&d).offset, 0);
    /// ```
    pub fn contiguous(data: &'a HostData) -> Self {
        HostView {
            data,
            offset: 0,
            strides: None,
        }
    }

    /// A view with explicit `offset` and `strides` (in elements).
    ///
    /// ```
    /// use tensorfn_kernels::interp::{HostData, HostView};
    /// let d = HostData::I32(vec![1, 2, 3, 4]);
    /// let col = HostView::strided(&d, 1, vec![2]); // [2, 4]
    /// assert_eq!(col.strides, Some(vec![2]));
    /// ```
    pub fn strided(data: &'a HostData, offset: usize, strides: Vec<usize>) -> Self {
        HostView {
            data,
            offset,
            strides: Some(strides),
        }
    }

    /// The strides for `dims`, checking that every element is in bounds.
    pub(crate) fn checked_strides(&self, operand: &str, dims: &[usize]) -> Result<Vec<usize>> {
        let strides = match &self.strides {
            Some(s) => s.clone(),
            None => contiguous_strides(dims),
        };
        if strides.len() != dims.len() {
            return Err(Error::Buffer {
                operand: operand.into(),
                message: format!(
                    "has {} strides for {} dims; give one stride per dim",
                    strides.len(),
                    dims.len()
                ),
            });
        }
        if dims.contains(&0) {
            return Ok(strides);
        }
        let mut last = self.offset as u128;
        for (&d, &s) in dims.iter().zip(&strides) {
            last += (d as u128 - 1) * s as u128;
        }
        if last >= self.data.len() as u128 {
            return Err(Error::Buffer {
                operand: operand.into(),
                message: format!(
                    "the view reaches element {last} of a buffer of {}; \
                     check its offset and strides",
                    self.data.len()
                ),
            });
        }
        Ok(strides)
    }
}

/// Row-major strides of `dims`.
pub(crate) fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![0; dims.len()];
    let mut acc = 1usize;
    for i in (0..dims.len()).rev() {
        s[i] = acc;
        acc = acc.saturating_mul(dims[i]);
    }
    s
}
