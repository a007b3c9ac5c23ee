//! Where each element of a tensor lives in its storage: dims, strides and
//! an offset. Views (transpose, permute, slice, broadcast) only change the
//! layout, never the data.

/// Dims, strides (in elements; 0 for a broadcast dim) and a start offset.
///
/// ```
/// use tensorfn_runtime::Layout;
/// let l = Layout::contiguous(&[2, 3]);
/// assert_eq!(l.strides(), &[3, 1]);
/// let t = l.permute(&[1, 0]);
/// assert_eq!(t.dims(), &[3, 2]);
/// assert!(!t.is_contiguous());
/// assert_eq!(t.offsets().collect::<Vec<_>>(), vec![0, 3, 1, 4, 2, 5]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    dims: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

/// Row-major strides of a contiguous tensor of `dims`.
pub fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1].max(1);
    }
    strides
}

impl Layout {
    /// A row-major layout starting at offset 0.
    pub fn contiguous(dims: &[usize]) -> Self {
        Layout {
            dims: dims.to_vec(),
            strides: contiguous_strides(dims),
            offset: 0,
        }
    }

    /// A layout from its parts (no check: callers keep offsets in bounds).
    pub fn new(dims: Vec<usize>, strides: Vec<usize>, offset: usize) -> Self {
        debug_assert_eq!(dims.len(), strides.len());
        Layout {
            dims,
            strides,
            offset,
        }
    }

    /// The dims.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// Offset of the first element in the storage.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    /// True when the elements are stored row-major without gaps (the offset
    /// may be non-zero). Dims of size 1 may have any stride.
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1;
        for (&d, &s) in self.dims.iter().zip(&self.strides).rev() {
            if d != 1 && s != expected {
                return false;
            }
            expected *= d;
        }
        true
    }

    /// One past the largest storage index this layout touches (0 if empty).
    pub fn storage_extent(&self) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        self.offset
            + self
                .dims
                .iter()
                .zip(&self.strides)
                .map(|(&d, &s)| (d - 1) * s)
                .sum::<usize>()
            + 1
    }

    /// Reorders the dims (`perm` must be a permutation, checked by the caller).
    pub fn permute(&self, perm: &[usize]) -> Layout {
        Layout {
            dims: perm.iter().map(|&p| self.dims[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// Swaps two dims.
    pub fn transpose(&self, d0: usize, d1: usize) -> Layout {
        let mut l = self.clone();
        l.dims.swap(d0, d1);
        l.strides.swap(d0, d1);
        l
    }

    /// Keeps `start..end` of `dim`.
    pub fn slice(&self, dim: usize, start: usize, end: usize) -> Layout {
        let mut l = self.clone();
        l.offset += start * l.strides[dim];
        l.dims[dim] = end - start;
        l.forget_offset_if_empty();
        l
    }

    /// Selects `index` of `dim`, removing the dim.
    pub fn select(&self, dim: usize, index: usize) -> Layout {
        let mut l = self.clone();
        l.offset += index * l.strides[dim];
        l.dims.remove(dim);
        l.strides.remove(dim);
        l.forget_offset_if_empty();
        l
    }

    /// An empty view reads nothing; its offset could otherwise point past
    /// the end of its (possibly empty) buffer.
    fn forget_offset_if_empty(&mut self) {
        if self.numel() == 0 {
            self.offset = 0;
        }
    }

    /// Views the tensor as `dims` by broadcasting (stride 0 on new or size-1
    /// dims). The caller checked compatibility with the shared rule.
    pub fn broadcast_to(&self, dims: &[usize]) -> Layout {
        let pad = dims.len() - self.dims.len();
        let strides = (0..dims.len())
            .map(|i| {
                if i < pad || self.dims[i - pad] == 1 && dims[i] != 1 {
                    0
                } else {
                    self.strides[i - pad]
                }
            })
            .collect();
        Layout {
            dims: dims.to_vec(),
            strides,
            offset: self.offset,
        }
    }

    /// The same elements as `dims`, without a copy, when the layout allows
    /// it (contiguous); `None` when a copy is needed.
    pub fn reshape(&self, dims: &[usize]) -> Option<Layout> {
        self.is_contiguous().then(|| Layout {
            dims: dims.to_vec(),
            strides: contiguous_strides(dims),
            offset: self.offset,
        })
    }

    /// Storage index of every element, in row-major logical order.
    pub fn offsets(&self) -> StridedOffsets<'_> {
        StridedOffsets::new(self)
    }
}

/// Iterator over the storage index of each element of a [`Layout`], in
/// row-major order.
#[derive(Clone, Debug)]
pub struct StridedOffsets<'a> {
    layout: &'a Layout,
    index: Vec<usize>,
    next: Option<usize>,
    remaining: usize,
}

impl<'a> StridedOffsets<'a> {
    fn new(layout: &'a Layout) -> Self {
        let remaining = layout.numel();
        StridedOffsets {
            layout,
            index: vec![0; layout.rank()],
            next: (remaining > 0).then_some(layout.offset),
            remaining,
        }
    }
}

impl Iterator for StridedOffsets<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let current = self.next?;
        self.remaining -= 1;
        let mut pos = current;
        let mut dim = self.index.len();
        self.next = loop {
            if dim == 0 {
                break None;
            }
            dim -= 1;
            let (d, s) = (self.layout.dims[dim], self.layout.strides[dim]);
            self.index[dim] += 1;
            if self.index[dim] < d {
                break Some(pos + s);
            }
            pos -= (d - 1) * s;
            self.index[dim] = 0;
        };
        Some(current)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for StridedOffsets<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_of_views() {
        let l = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(l.offsets().collect::<Vec<_>>(), (0..24).collect::<Vec<_>>());
        let s = l.slice(1, 1, 3).select(2, 2);
        assert_eq!(s.dims(), &[2, 2]);
        assert_eq!(s.offsets().collect::<Vec<_>>(), vec![6, 10, 18, 22]);
        let b = Layout::contiguous(&[3]).broadcast_to(&[2, 3]);
        assert_eq!(b.offsets().collect::<Vec<_>>(), vec![0, 1, 2, 0, 1, 2]);
        let e = Layout::contiguous(&[2, 0, 3]);
        assert_eq!(e.offsets().count(), 0);
        let scalar = Layout::contiguous(&[]);
        assert_eq!(scalar.offsets().collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn contiguity() {
        assert!(Layout::contiguous(&[2, 3]).is_contiguous());
        assert!(!Layout::contiguous(&[2, 3]).transpose(0, 1).is_contiguous());
        assert!(Layout::contiguous(&[4, 3]).slice(0, 1, 3).is_contiguous());
        assert!(!Layout::contiguous(&[4, 3]).slice(1, 1, 3).is_contiguous());
        assert_eq!(
            Layout::contiguous(&[4, 3]).slice(0, 1, 3).storage_extent(),
            9
        );
        // Empty views never point past their buffer.
        assert_eq!(Layout::contiguous(&[4, 0]).slice(0, 2, 3).offset(), 0);
        assert_eq!(Layout::contiguous(&[4, 0]).select(0, 3).offset(), 0);
        assert_eq!(Layout::contiguous(&[4, 3]).slice(0, 4, 4).offset(), 0);
    }
}
