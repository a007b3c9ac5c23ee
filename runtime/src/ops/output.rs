//! Results of operations: new tensors around fresh buffers, and writes
//! into existing tensors, copy-on-write when their storage is shared.

use super::dispatch::dispatch;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::layout::Layout;
use crate::shape::Shape;
use crate::storage::Storage;
use crate::tensor::Tensor;
use std::sync::Arc;

/// A tensor of contiguous `dims` around a fresh buffer, checked against `S`.
pub(crate) fn output<D: Device, T: DType, S: Shape>(
    storage: Storage<T>,
    dims: &[usize],
) -> Result<Tensor<D, T, S>> {
    S::check(dims)?;
    Ok(Tensor::from_parts(
        Arc::new(storage),
        Layout::contiguous(dims),
    ))
}

/// A tensor viewing a fresh buffer through `layout` (a permutation of a
/// contiguous layout: an op that writes its result in another order),
/// checked against `S`.
pub(crate) fn output_in<D: Device, T: DType, S: Shape>(
    storage: Storage<T>,
    layout: Layout,
) -> Result<Tensor<D, T, S>> {
    S::check(layout.dims())?;
    Ok(Tensor::from_parts(Arc::new(storage), layout))
}

/// True when two positions of the view share one element (a broadcast
/// dim), so the view cannot be written in place.
pub(crate) fn overlaps(l: &Layout) -> bool {
    l.dims()
        .iter()
        .zip(l.strides())
        .any(|(&d, &s)| d > 1 && s == 0)
}

impl<D: Device, T: DType, S: Shape> Tensor<D, T, S> {
    /// The storage to write this tensor's elements into, unshared: a
    /// shared or self-overlapping view is first copied to a buffer of its
    /// own (copy-on-write), so no other tensor sees the write.
    pub(crate) fn make_unique(&mut self) -> Result<(&mut Storage<T>, &Layout)> {
        if Arc::get_mut(&mut self.storage).is_none() || overlaps(&self.layout) {
            let copy = dispatch!(D, |be| be
                .wrap(be.contiguous(be.buf(&self.storage), &self.layout)?));
            self.storage = Arc::new(copy);
            self.layout = Layout::contiguous(self.layout.dims());
        }
        let storage = Arc::get_mut(&mut self.storage).expect("unshared after copy-on-write");
        Ok((storage, &self.layout))
    }

    /// Makes the storage unshared without keeping its contents (the caller
    /// overwrites every element): a shared buffer is replaced by a new one.
    pub(crate) fn make_unique_for_overwrite(&mut self) -> Result<(&mut Storage<T>, &Layout)> {
        if Arc::get_mut(&mut self.storage).is_none() || overlaps(&self.layout) {
            let n = self.layout.numel();
            let fresh = dispatch!(D, |be| be.wrap(be.full(n, T::zero())?));
            self.storage = Arc::new(fresh);
            self.layout = Layout::contiguous(self.layout.dims());
        }
        let storage = Arc::get_mut(&mut self.storage).expect("unshared after replacement");
        Ok((storage, &self.layout))
    }
}

impl<D: Device, T: DType, S: Shape> Tensor<D, T, S> {
    /// Replaces every element with those of `result` (a contiguous buffer
    /// of this tensor's dims): written through an unshared buffer, or the
    /// buffer replaced when it is shared (copy-on-write).
    pub(crate) fn overwrite_with(&mut self, result: Storage<T>) -> Result<()> {
        let dims = self.layout.dims().to_vec();
        if Arc::get_mut(&mut self.storage).is_none() || overlaps(&self.layout) {
            self.storage = Arc::new(result);
            self.layout = Layout::contiguous(&dims);
            return Ok(());
        }
        let layout = self.layout.clone();
        let dst = Arc::get_mut(&mut self.storage).expect("checked unshared");
        dispatch!(D, |be| be.copy_into(
            be.buf(&result),
            &Layout::contiguous(&dims),
            be.buf_mut(dst),
            &layout
        ))
    }
}
