//! Where each element of a tensor lives in its storage: dims, strides and
//! an offset. Views (transpose, permute, slice, broadcast) only change the
//! layout, never the data.

/// Dims, strides (in elements; 0 for a broadcast dim) and a start offset.
///
/// A tensor's layout is read with [`Tensor::layout`](crate::Tensor::layout);
/// views are made by the tensor's methods, which check their arguments, so
/// the public side of a layout only answers questions.
///
/// ```
/// use tensorfn_runtime::{shape, Cpu, Layout, Tensor};
/// let x = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
/// assert_eq!(x.layout().strides(), &[3, 1]);
/// let t = x.t().unwrap();
/// let l: &Layout = t.layout();
/// assert_eq!(l.dims(), &[3, 2]);
/// assert!(!l.is_contiguous());
/// assert_eq!(l.offsets().collect::<Vec<_>>(), vec![0, 3, 1, 4, 2, 5]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    dims: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

/// Row-major strides of a contiguous tensor of `dims`.
///
/// ```
/// use tensorfn_runtime::layout::contiguous_strides;
/// assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
/// assert_eq!(contiguous_strides(&[]), Vec::<usize>::new());
/// ```
pub fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1].max(1);
    }
    strides
}

/// The strides of `[N, C, H, W]` `dims` stored channels-last (NHWC
/// memory seen as NCHW, PyTorch's `torch.channels_last`): channels
/// fastest, then the width, the height and the batch.
///
/// ```
/// use tensorfn_runtime::layout::channels_last_strides;
/// assert_eq!(channels_last_strides([2, 3, 4, 5]), [60, 1, 15, 3]);
/// ```
pub fn channels_last_strides(dims: [usize; 4]) -> [usize; 4] {
    let [_, c, h, w] = dims.map(|d| d.max(1));
    [h * w * c, 1, w * c, c]
}

impl Layout {
    /// A channels-last layout of `[N, C, H, W]` `dims` (see
    /// [`channels_last_strides`]) starting at offset 0.
    ///
    /// ```
    /// use tensorfn_runtime::Layout;
    /// let l = Layout::channels_last([2, 3, 4, 5]);
    /// assert_eq!((l.dims(), l.strides()), (&[2, 3, 4, 5][..], &[60, 1, 15, 3][..]));
    /// assert!(l.is_channels_last() && !l.is_contiguous());
    /// ```
    pub fn channels_last(dims: [usize; 4]) -> Self {
        Layout {
            dims: dims.to_vec(),
            strides: channels_last_strides(dims).to_vec(),
            offset: 0,
        }
    }

    /// Whether this is a 4-D layout whose memory is channels-last (gap-free
    /// NHWC, any offset), as PyTorch's
    /// `is_contiguous(memory_format=torch.channels_last)`: the strides of
    /// size-1 dims do not matter, so `[N, C, 1, 1]` or `C = 1` can be both
    /// contiguous and channels-last.
    ///
    /// ```
    /// use tensorfn_runtime::Layout;
    /// assert!(Layout::channels_last([2, 3, 4, 5]).is_channels_last());
    /// assert!(!Layout::contiguous(&[2, 3, 4, 5]).is_channels_last());
    /// assert!(Layout::contiguous(&[2, 3, 1, 1]).is_channels_last());
    /// assert!(!Layout::contiguous(&[2, 3, 4]).is_channels_last());
    /// ```
    pub fn is_channels_last(&self) -> bool {
        let Ok(dims) = <[usize; 4]>::try_from(self.dims.as_slice()) else {
            return false;
        };
        if dims.contains(&0) {
            return true;
        }
        let want = channels_last_strides(dims);
        dims.iter()
            .zip(&self.strides)
            .zip(want)
            .all(|((&d, &s), w)| d == 1 || s == w)
    }

    /// Whether a result computed from an input of this layout is written
    /// channels-last: it is channels-last and not also contiguous (a
    /// tensor that is both, as `[N, C, 1, 1]`, stays row-major), as
    /// PyTorch's `suggest_memory_format`.
    pub(crate) fn prefers_channels_last(&self) -> bool {
        self.is_channels_last() && !self.is_contiguous()
    }

    /// The layout of a fresh result of `dims` computed from an input of
    /// this layout (a convolution's, a pooling's): channels-last where
    /// [`Layout::prefers_channels_last`] and `dims` are 4-D, else
    /// row-major. Backends write such results in this order and the ops
    /// view them through it.
    pub(crate) fn result_like(&self, dims: &[usize]) -> Layout {
        match <[usize; 4]>::try_from(dims) {
            Ok(d) if self.prefers_channels_last() => Layout::channels_last(d),
            _ => Layout::contiguous(dims),
        }
    }

    /// A row-major layout starting at offset 0.
    ///
    /// ```
    /// use tensorfn_runtime::Layout;
    /// let l = Layout::contiguous(&[4, 5]);
    /// assert_eq!((l.strides(), l.offset()), (&[5, 1][..], 0));
    /// assert!(l.is_contiguous());
    /// ```
    pub fn contiguous(dims: &[usize]) -> Self {
        Layout {
            dims: dims.to_vec(),
            strides: contiguous_strides(dims),
            offset: 0,
        }
    }

    /// A layout from its parts (no check: callers keep offsets in bounds).
    pub(crate) fn new(dims: Vec<usize>, strides: Vec<usize>, offset: usize) -> Self {
        debug_assert_eq!(dims.len(), strides.len());
        Layout {
            dims,
            strides,
            offset,
        }
    }

    /// The dims.
    ///
    /// ```
    /// use tensorfn_runtime::Layout;
    /// assert_eq!(Layout::contiguous(&[2, 3]).dims(), &[2, 3]);
    /// ```
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The strides, in elements.
    ///
    /// ```
    /// use tensorfn_runtime::{shape, Cpu, Tensor};
    /// let row = Tensor::<Cpu, f32, shape![3]>::zeros().unwrap();
    /// let b = row.broadcast_to::<shape![2, 3]>().unwrap();
    /// assert_eq!(b.layout().strides(), &[0, 1]); // the new dim re-reads the same row
    /// ```
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// Offset of the first element in the storage.
    ///
    /// ```
    /// use tensorfn_runtime::{shape, Cpu, Tensor};
    /// let x = Tensor::<Cpu, f32, shape![4, 3]>::zeros().unwrap();
    /// let rows = x.narrow::<0, shape![2, 3]>(2, 2).unwrap(); // rows 2 and 3
    /// assert_eq!(rows.layout().offset(), 6);
    /// ```
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Number of dims.
    ///
    /// ```
    /// use tensorfn_runtime::Layout;
    /// assert_eq!(Layout::contiguous(&[2, 3, 4]).rank(), 3);
    /// assert_eq!(Layout::contiguous(&[]).rank(), 0);
    /// ```
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements.
    ///
    /// ```
    /// use tensorfn_runtime::Layout;
    /// assert_eq!(Layout::contiguous(&[2, 3, 4]).numel(), 24);
    /// assert_eq!(Layout::contiguous(&[]).numel(), 1); // a scalar
    /// assert_eq!(Layout::contiguous(&[5, 0]).numel(), 0);
    /// ```
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    /// True when the elements are stored row-major without gaps (the offset
    /// may be non-zero). Dims of size 1 may have any stride.
    ///
    /// ```
    /// use tensorfn_runtime::{shape, Cpu, Tensor};
    /// let x = Tensor::<Cpu, f32, shape![4, 3]>::zeros().unwrap();
    /// let rows = x.narrow::<0, shape![2, 3]>(1, 2).unwrap();
    /// let cols = x.narrow::<1, shape![4, 2]>(1, 2).unwrap();
    /// assert!(rows.layout().is_contiguous()); // whole rows
    /// assert!(!cols.layout().is_contiguous()); // part of each row
    /// assert!(!x.t().unwrap().layout().is_contiguous());
    /// ```
    pub fn is_contiguous(&self) -> bool {
        // An empty tensor has no element out of place (as in PyTorch).
        if self.dims.contains(&0) {
            return true;
        }
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
    ///
    /// ```
    /// use tensorfn_runtime::{shape, Cpu, Layout, Tensor};
    /// // Rows 1..3 of a 4x3 matrix end at storage index 8.
    /// let x = Tensor::<Cpu, f32, shape![4, 3]>::zeros().unwrap();
    /// let rows = x.narrow::<0, shape![2, 3]>(1, 2).unwrap();
    /// assert_eq!(rows.layout().storage_extent(), 9);
    /// assert_eq!(Layout::contiguous(&[4, 0]).storage_extent(), 0);
    /// ```
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

    /// Reorders the dims. `perm` must be a permutation of `0..rank`, checked
    /// by the caller with [`rules::permute`](tensorfn_core::rules::permute):
    /// this panics on an index past the rank.
    pub(crate) fn permute(&self, perm: &[usize]) -> Layout {
        Layout {
            dims: perm.iter().map(|&p| self.dims[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// Swaps two dims. Panics if either is not below the rank (callers check
    /// with [`rules::transpose`](tensorfn_core::rules::transpose)).
    pub(crate) fn transpose(&self, d0: usize, d1: usize) -> Layout {
        let mut l = self.clone();
        l.dims.swap(d0, d1);
        l.strides.swap(d0, d1);
        l
    }

    /// Keeps `start..end` of `dim`. The caller checks
    /// `start <= end <= size` with [`rules::slice`](tensorfn_core::rules::slice);
    /// a `dim` past the rank panics, and `start > end` is a caller bug.
    pub(crate) fn slice(&self, dim: usize, start: usize, end: usize) -> Layout {
        let mut l = self.clone();
        l.offset += start * l.strides[dim];
        l.dims[dim] = end - start;
        l.forget_offset_if_empty();
        l
    }

    /// Selects `index` of `dim`, removing the dim. The caller checks the
    /// index with [`rules::index`](tensorfn_core::rules::index); this panics
    /// when `dim` is past the rank.
    pub(crate) fn select(&self, dim: usize, index: usize) -> Layout {
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
    /// dims). The caller checks compatibility with
    /// [`rules::broadcast_to`](tensorfn_core::rules::broadcast_to); this panics
    /// when `dims` has fewer dims than the layout.
    pub(crate) fn broadcast_to(&self, dims: &[usize]) -> Layout {
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
    /// it; `None` when a copy is needed. As PyTorch's `view`: every run of
    /// old dims that the new dims split or merge must be one strided block
    /// (a row of a narrowed matrix splits into heads; the dims of a
    /// transpose do not merge). The element count is not checked here:
    /// callers check it with [`rules::reshape`](tensorfn_core::rules::reshape).
    ///
    /// ```
    /// use tensorfn_runtime::{shape, Cpu, Tensor};
    /// // Columns 2..6 of an [8, 12] matrix, as [8, 2, 2]: a view.
    /// let x = Tensor::<Cpu, f32, shape![8, 12]>::zeros().unwrap();
    /// let cols = x.narrow::<1, shape![8, 4]>(2, 4).unwrap();
    /// let heads = cols.view::<shape![8, 2, 2]>().unwrap();
    /// assert_eq!(heads.layout().strides(), &[12, 2, 1]);
    /// // A transpose's dims do not merge without a copy.
    /// assert!(x.t().unwrap().view::<shape![96]>().is_err());
    /// ```
    pub(crate) fn reshape(&self, dims: &[usize]) -> Option<Layout> {
        if self.is_contiguous() {
            return Some(Layout {
                dims: dims.to_vec(),
                strides: contiguous_strides(dims),
                offset: self.offset,
            });
        }
        view_strides(&self.dims, &self.strides, dims).map(|strides| Layout {
            dims: dims.to_vec(),
            strides,
            offset: self.offset,
        })
    }

    /// Storage index of every element, in row-major logical order.
    ///
    /// ```
    /// use tensorfn_runtime::{shape, Cpu, Tensor};
    /// let x = Tensor::<Cpu, f32, shape![2, 2]>::zeros().unwrap();
    /// let t = x.t().unwrap();
    /// assert_eq!(t.layout().offsets().collect::<Vec<_>>(), vec![0, 2, 1, 3]);
    /// assert_eq!(t.layout().offsets().len(), 4);
    /// ```
    pub fn offsets(&self) -> StridedOffsets<'_> {
        StridedOffsets::new(self)
    }
}

/// The strides of `new` over the elements of a layout `(dims, strides)` of
/// the same count, without moving them, if there are any (PyTorch's
/// `computeStride`): walking the old dims from the last, each run of dims
/// that forms one strided block (each dim's stride the next one's times
/// its size) must be covered exactly by a run of new dims.
fn view_strides(dims: &[usize], strides: &[usize], new: &[usize]) -> Option<Vec<usize>> {
    if dims.iter().product::<usize>() == 0 || dims.is_empty() {
        return Some(contiguous_strides(new));
    }
    let mut out = vec![0; new.len()];
    let mut view_d = new.len() as isize - 1;
    let mut chunk_base = *strides.last().expect("a dim");
    let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
    for d in (0..dims.len()).rev() {
        tensor_numel *= dims[d];
        let block_ends =
            d == 0 || (dims[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base);
        if block_ends {
            while view_d >= 0 && (view_numel < tensor_numel || new[view_d as usize] == 1) {
                out[view_d as usize] = view_numel * chunk_base;
                view_numel *= new[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if d > 0 {
                chunk_base = strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(out)
}

/// The dims and per-operand strides of an elementwise walk with size-1
/// dims dropped and neighbours merged wherever every operand steps over the
/// pair as over one dim (`strides[d] == strides[d + 1] * dims[d + 1]` in
/// each): the same elements in the same order, with fewer index divisions
/// per element in the strided kernels.
pub(crate) fn coalesce(dims: &[usize], strides: &[&[usize]]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut out_dims: Vec<usize> = Vec::with_capacity(dims.len());
    let mut out_strides: Vec<Vec<usize>> = vec![Vec::with_capacity(dims.len()); strides.len()];
    for (d, &n) in dims.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let merges = !out_dims.is_empty()
            && strides
                .iter()
                .zip(&out_strides)
                .all(|(s, o)| *o.last().expect("a kept dim") == s[d] * n);
        if merges {
            *out_dims.last_mut().expect("a kept dim") *= n;
            for (s, o) in strides.iter().zip(&mut out_strides) {
                *o.last_mut().expect("a kept dim") = s[d];
            }
        } else {
            out_dims.push(n);
            for (s, o) in strides.iter().zip(&mut out_strides) {
                o.push(s[d]);
            }
        }
    }
    (out_dims, out_strides)
}

/// The same walk over elements `k` times as wide: each run of `k`
/// neighbours along the last dim becomes one element. `None` unless every
/// operand steps by 1 along the last dim and by multiples of `k` along the
/// others, and the last dim is a multiple of `k`. (Alignment of the base
/// addresses is the caller's to check.)
pub(crate) fn widen(
    dims: &[usize],
    strides: &[Vec<usize>],
    k: usize,
) -> Option<(Vec<usize>, Vec<Vec<usize>>)> {
    let (&last, outer) = dims.split_last()?;
    if last % k != 0 {
        return None;
    }
    let fits = |s: &Vec<usize>| {
        s.last() == Some(&1) && outer.iter().zip(s).all(|(&n, &st)| n == 1 || st % k == 0)
    };
    if !strides.iter().all(fits) {
        return None;
    }
    let mut wide_dims = dims.to_vec();
    *wide_dims.last_mut().expect("a dim") = last / k;
    let wide_strides = strides
        .iter()
        .map(|s| {
            let mut w: Vec<usize> = s.iter().map(|&st| st / k).collect();
            *w.last_mut().expect("a dim") = 1;
            w
        })
        .collect();
    Some((wide_dims, wide_strides))
}

/// Iterator over the storage index of each element of a [`Layout`], in
/// row-major order.
///
/// ```
/// use tensorfn_runtime::{shape, Cpu, Tensor};
/// let x = Tensor::<Cpu, i32, shape![2, 3]>::from_vec(vec![10, 11, 12, 20, 21, 22]).unwrap();
/// let cols = x.narrow::<1, shape![2, 2]>(1, 2).unwrap();
/// let data = [10, 11, 12, 20, 21, 22];
/// let picked: Vec<i32> = cols.layout().offsets().map(|i| data[i]).collect();
/// assert_eq!(picked, vec![11, 12, 21, 22]);
/// ```
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

    /// Every element's storage index, by walking `dims` with `strides`.
    fn walk(dims: &[usize], strides: &[usize]) -> Vec<usize> {
        Layout::new(dims.to_vec(), strides.to_vec(), 0)
            .offsets()
            .collect()
    }

    #[test]
    fn coalesced_walks_visit_the_same_elements_in_order() {
        // A head split: [B, H, T, D] read from [B, T, 3, H, D] against a
        // contiguous output; size-1 dims and a broadcast dim mixed in.
        let cases: Vec<(Vec<usize>, Vec<Vec<usize>>)> = vec![
            (
                vec![2, 3, 4, 8],
                vec![vec![96, 32, 8, 1], vec![288, 8, 72, 1]],
            ),
            (vec![2, 1, 3, 4], vec![vec![12, 12, 4, 1], vec![0, 5, 4, 1]]),
            (vec![5, 6], vec![vec![6, 1], vec![1, 5]]),
            (vec![1, 1], vec![vec![1, 1], vec![7, 3]]),
            (vec![4, 2, 2], vec![vec![4, 2, 1], vec![4, 2, 1]]),
        ];
        for (dims, strides) in cases {
            let refs: Vec<&[usize]> = strides.iter().map(|s| &s[..]).collect();
            let (cd, cs) = coalesce(&dims, &refs);
            assert!(cd.len() <= dims.len());
            for (s, c) in strides.iter().zip(&cs) {
                assert_eq!(
                    walk(&dims, s),
                    walk(&cd, c),
                    "{dims:?} {s:?} -> {cd:?} {c:?}"
                );
            }
        }
        let (d, s) = coalesce(&[4, 2, 2], &[&[4, 2, 1], &[4, 2, 1]]);
        assert_eq!((d, s), (vec![16], vec![vec![1], vec![1]]));
    }

    #[test]
    fn widened_walks_move_whole_runs_of_the_last_dim() {
        let dims = vec![2, 3, 8];
        let strides = vec![vec![24, 8, 1], vec![64, 16, 1]];
        let (wd, ws) = widen(&dims, &strides, 4).unwrap();
        assert_eq!(wd, vec![2, 3, 2]);
        for (s, w) in strides.iter().zip(&ws) {
            let wide: Vec<usize> = walk(&wd, w);
            let narrow: Vec<usize> = walk(&dims, s);
            let expanded: Vec<usize> = wide
                .iter()
                .flat_map(|&i| (0..4).map(move |j| 4 * i + j))
                .collect();
            assert_eq!(expanded, narrow);
        }
        // A last dim that is not a multiple, a strided last dim, an outer
        // stride that is not a multiple: no widening.
        assert!(widen(&[2, 6], &[vec![6, 1]], 4).is_none());
        assert!(widen(&[2, 8], &[vec![16, 2]], 4).is_none());
        assert!(widen(&[2, 8], &[vec![10, 1]], 4).is_none());
        assert!(widen(&[], &[vec![]], 4).is_none());
    }

    #[test]
    fn views_change_dims_strides_and_offset() {
        let p = Layout::contiguous(&[2, 3, 4]).permute(&[2, 0, 1]);
        assert_eq!((p.dims(), p.strides()), (&[4, 2, 3][..], &[1, 12, 4][..]));
        let t = Layout::contiguous(&[2, 3]).transpose(0, 1);
        assert_eq!((t.dims(), t.strides()), (&[3, 2][..], &[1, 3][..]));
        let s = Layout::contiguous(&[2, 4]).slice(1, 1, 3);
        assert_eq!(s.offsets().collect::<Vec<_>>(), vec![1, 2, 5, 6]);
        let col = Layout::contiguous(&[3, 4]).select(1, 2);
        assert_eq!(col.offsets().collect::<Vec<_>>(), vec![2, 6, 10]);
        assert_eq!(
            Layout::new(vec![3], vec![4], 1)
                .offsets()
                .collect::<Vec<_>>(),
            vec![1, 5, 9]
        );
        let b = Layout::contiguous(&[3, 1]).broadcast_to(&[2, 3, 4]);
        assert_eq!(b.strides(), &[0, 1, 0]);
        assert_eq!(b.offsets().take(5).collect::<Vec<_>>(), vec![0, 0, 0, 0, 1]);
        assert_eq!(
            Layout::contiguous(&[2, 6])
                .reshape(&[3, 4])
                .unwrap()
                .strides(),
            &[4, 1]
        );
        assert!(Layout::contiguous(&[2, 6])
            .transpose(0, 1)
            .reshape(&[12])
            .is_none());
    }

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

    /// Every view `reshape` gives reads the elements in the order of the
    /// layout it came from, over random permutes, slices and broadcasts
    /// and random regroupings (and splits of a narrowed row into heads are
    /// views, merges of a transpose's dims are not).
    #[test]
    fn reshaped_views_keep_the_element_order() {
        let mut rng = crate::random::SplitMix64::new(7);
        let mut below = |n: usize| (rng.next_u64() % n as u64) as usize;
        let mut views = 0;
        for _ in 0..3000 {
            let rank = 1 + below(4);
            let dims: Vec<usize> = (0..rank).map(|_| 1 + below(4)).collect();
            let mut l = Layout::contiguous(&dims);
            match below(4) {
                0 => {
                    let mut perm: Vec<usize> = (0..rank).collect();
                    perm.rotate_left(below(rank));
                    l = l.permute(&perm);
                }
                1 => {
                    let d = below(rank);
                    let start = below(l.dims()[d]);
                    l = l.slice(d, start, l.dims()[d]);
                }
                2 => l = l.broadcast_to(&[2].iter().chain(l.dims()).copied().collect::<Vec<_>>()),
                _ => {}
            }
            // A regrouping of the same count: merge or split neighbours.
            let n: usize = l.dims().iter().product();
            let mut new: Vec<usize> = Vec::new();
            let mut left = n;
            while left > 1 {
                let f = (2..=left)
                    .find(|f| left % f == 0 && below(2) == 0)
                    .unwrap_or(left);
                new.push(f);
                left /= f;
            }
            if below(3) == 0 {
                new.insert(below(new.len() + 1), 1);
            }
            if let Some(v) = l.reshape(&new) {
                views += 1;
                assert_eq!(v.dims(), &new[..]);
                let want: Vec<usize> = l.offsets().collect();
                let got: Vec<usize> = v.offsets().collect();
                assert_eq!(
                    got,
                    want,
                    "{:?}/{:?} as {new:?}: strides {:?}",
                    l.dims(),
                    l.strides(),
                    v.strides()
                );
            }
        }
        assert!(views > 1000, "{views} views");
        // The head split of a narrowed [tokens, 3 * 768] row is a view.
        let q = Layout::contiguous(&[64, 2304]).slice(1, 768, 1536);
        let heads = q.reshape(&[2, 32, 12, 64]).expect("a view");
        assert_eq!(heads.strides(), &[32 * 2304, 2304, 64, 1]);
        assert!(Layout::contiguous(&[3, 4])
            .transpose(0, 1)
            .reshape(&[12])
            .is_none());
    }
}
