//! `stream_map`: a function of device tensors applied to a host array too
//! large for the device, in chunks of rows.
//!
//! The array is cut along dim 0. Each chunk is copied to the device, given
//! to the function as a `Tensor<D, T, (Dyn, ..)>`, and the result is copied
//! back into a host array. Copies and compute form a pipeline: while chunk
//! `i` is computed, chunk `i + 1` is copied in and result `i - 1` copied
//! out. At most two chunks and two results are alive at a time (double
//! buffering).
//!
//! On a GPU the copies run on streams of their own, ordered against the
//! compute by events: while the device computes chunk `i`, the host
//! gathers chunk `i + 1` into a pinned buffer and the DMA engine uploads
//! it, and result `i - 1` is downloaded into another pinned buffer and
//! written out by the host. Device buffers are never reused while a copy
//! stream still uses them. (Boolean inputs or results take the threaded
//! path, with the copies on the compute stream.) On the CPU three threads
//! form the pipeline: a load stage gathers chunk `i + 1` into row-major
//! order, the calling thread runs the function on chunk `i`, and a store
//! stage writes result `i - 1` out.
//!
//! The function must work row by row: a chunk of `n` rows gives a result of
//! `n` rows (`[n, 784] -> [n, 10]`, `[n, 3, 32, 32] -> [n]`, ...), so the
//! concatenated results equal the one-shot run on the whole array.
//!
//! The chunk size comes from the memory the device reports free, at most
//! 256 MiB of input or result per chunk (or is set with
//! [`StreamMap::chunk_rows`]); if the function runs out of device
//! memory on an automatically sized chunk, the chunk is halved and retried.
//!
//! ```
//! use ndarray::Array2;
//! use tensorfn_runtime::{stream_map, Cpu, Tensor, shape};
//!
//! let host = Array2::from_shape_fn((10_000, 4), |(i, j)| (i * 4 + j) as f32);
//! let out = stream_map(&host, |chunk: Tensor<Cpu, f32, shape![_, 4]>| {
//!     chunk.mul_scalar(2.0)?.add_scalar(1.0)
//! })
//! .unwrap();
//! assert_eq!(out, host.mapv(|x| 2.0 * x + 1.0));
//! ```

use crate::cpu::copy::parallel_copy;
use crate::device::{Device, DeviceKind};
use crate::dtype::{DType, DTypeKind};
use crate::error::{Error, Result};
use crate::interop::{check_host_dims, NdShape};
use crate::ops::dispatch::dispatch;
use crate::shape::{type_name, Dim, Dyn, Shape};
use crate::tensor::Tensor;
use ndarray::{Array, ArrayBase, ArrayView, ArrayViewMut, Axis, Data, DataMut, Dimension};
use std::sync::mpsc::sync_channel;

/// Host bytes per chunk on the CPU, where memory is not the limit but
/// cache-sized chunks keep the copy and the compute stages balanced.
const CPU_CHUNK_BYTES: usize = 16 << 20;

/// Largest input or result chunk on a GPU, in bytes, when the chunk size
/// is automatic: big enough that launches and copies run at full speed,
/// small enough that the first upload and the last download, which
/// nothing overlaps, are short.
const GPU_CHUNK_BYTES: usize = 256 << 20;

/// A shape whose first dim is [`Dyn`]: the chunk of rows `stream_map`
/// passes to the function, and the result it expects back.
///
/// ```
/// use tensorfn_runtime::{shape, ChunkShape};
/// fn rows<S: ChunkShape>() {}
/// rows::<shape![_, 784]>();
/// rows::<shape![_]>();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot hold a chunk of rows: its first dim is not a run-time dim",
    note = "`stream_map` passes chunks of a varying number of rows: write the shape as `shape![_, ..]`"
)]
pub trait ChunkShape: Shape {}

macro_rules! chunk_shape {
    ($($d:ident),*) => {
        impl<$($d: Dim),*> ChunkShape for (Dyn, $($d,)*) {}
    };
}
chunk_shape!();
chunk_shape!(B);
chunk_shape!(B, C);
chunk_shape!(B, C, E);
chunk_shape!(B, C, E, F);
chunk_shape!(B, C, E, F, G);

/// What a [`StreamMap`] run did: useful to check that the chunk size fits
/// the device and that copies overlapped enough chunks.
///
/// ```
/// use ndarray::Array2;
/// use tensorfn_runtime::{StreamMap, Cpu, Tensor, shape};
/// let host = Array2::<f32>::ones((100, 3));
/// let mut out = Array2::<f32>::zeros((100, 3));
/// let stats = StreamMap::new()
///     .chunk_rows(32)
///     .run_into(&host, &mut out, |x: Tensor<Cpu, f32, shape![_, 3]>| Ok(x))
///     .unwrap();
/// assert_eq!((stats.rows, stats.chunks, stats.chunk_rows), (100, 4, 32));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Rows processed.
    pub rows: usize,
    /// Calls of the function that succeeded.
    pub chunks: usize,
    /// Rows per chunk in the end (smaller than planned after a retry).
    pub chunk_rows: usize,
    /// Times a chunk ran out of device memory and was retried at half size.
    pub retries: usize,
}

/// Settings of a chunked run; [`stream_map`] is `StreamMap::new().run(..)`.
///
/// ```
/// use ndarray::Array2;
/// use tensorfn_runtime::{StreamMap, Cpu, Tensor, shape};
///
/// let host = Array2::from_shape_fn((1_000, 2), |(i, j)| (i + j) as f64);
/// // Row sums: [n, 2] chunks give [n] results.
/// let sums = StreamMap::new()
///     .chunk_rows(128)
///     .run(&host, |x: Tensor<Cpu, f64, shape![_, 2]>| x.sum::<1>())
///     .unwrap();
/// assert_eq!(sums[999], 999.0 + 1000.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamMap {
    chunk_rows: Option<usize>,
    memory_fraction: f64,
}

impl Default for StreamMap {
    fn default() -> Self {
        StreamMap {
            chunk_rows: None,
            memory_fraction: 0.7,
        }
    }
}

/// How one pass of the pipeline ended.
enum Pass {
    /// Every row from the pass's start was processed.
    Done,
    /// The chunk starting at `row` failed with `error`; earlier rows are done.
    Failed { row: usize, error: Error },
}

impl StreamMap {
    /// Chunk size from free device memory, 70% of it at most (on the CPU,
    /// chunks of about 16 MB).
    ///
    /// ```
    /// use ndarray::Array2;
    /// use tensorfn_runtime::{StreamMap, Cpu, Tensor, shape};
    /// let host = Array2::<f32>::ones((1_000, 8));
    /// let mut out = Array2::<f32>::zeros((1_000, 8));
    /// let stats = StreamMap::new()
    ///     .run_into(&host, &mut out, |x: Tensor<Cpu, f32, shape![_, 8]>| x.mul_scalar(2.0))
    ///     .unwrap();
    /// assert_eq!(out, host.mapv(|v| 2.0 * v));
    /// assert_eq!((stats.chunks, stats.chunk_rows), (1, 1_000)); // 32 KB: one chunk
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses chunks of exactly `rows` rows (the last one may be shorter)
    /// instead of sizing them from free memory; a chunk that runs out of
    /// memory is then an error, not retried. `0` is rejected by `run`.
    ///
    /// ```
    /// use ndarray::Array2;
    /// use tensorfn_runtime::{StreamMap, Cpu, Tensor, shape};
    /// let host = Array2::<f32>::ones((1_000, 8));
    /// let mut out = Array2::<f32>::zeros((1_000, 8));
    /// let stats = StreamMap::new()
    ///     .chunk_rows(300)
    ///     .run_into(&host, &mut out, |x: Tensor<Cpu, f32, shape![_, 8]>| x.exp())
    ///     .unwrap();
    /// assert_eq!(stats.chunks, 4); // 300 + 300 + 300 + 100 rows
    /// ```
    pub fn chunk_rows(mut self, rows: usize) -> Self {
        self.chunk_rows = Some(rows);
        self
    }

    /// The share of the device's free memory the chunks and the function's
    /// temporaries may use (default 0.7); must be in `(0, 1]`.
    ///
    /// ```
    /// use ndarray::Array2;
    /// use tensorfn_runtime::{StreamMap, Cpu, Tensor, shape};
    /// let host = Array2::<f32>::ones((10, 8));
    /// let id = |x: Tensor<Cpu, f32, shape![_, 8]>| Ok(x);
    /// assert!(StreamMap::new().memory_fraction(0.5).run(&host, id).is_ok());
    /// assert!(StreamMap::new().memory_fraction(0.0).run(&host, id).is_err());
    /// ```
    pub fn memory_fraction(mut self, fraction: f64) -> Self {
        self.memory_fraction = fraction;
        self
    }

    /// Applies `f` to `input` chunk by chunk on device `D` (inferred from
    /// `f`) and returns the results stacked along dim 0, equal to
    /// `f(whole input)`.
    ///
    /// `input` is any `ndarray` array or view whose dims fit `SI`; its
    /// layout may be strided. `Err` when the dims do not fit, when `f`
    /// fails or changes the number of rows, or when the device cannot hold
    /// even one row.
    ///
    /// ```
    /// use ndarray::Array2;
    /// use tensorfn_runtime::{StreamMap, Cpu, Tensor, shape};
    /// let host = Array2::from_shape_fn((50, 3), |(i, j)| (i * 3 + j) as i64);
    /// let out = StreamMap::new()
    ///     .chunk_rows(7)
    ///     .run(&host.view(), |x: Tensor<Cpu, i64, shape![_, 3]>| Ok(x))
    ///     .unwrap();
    /// assert_eq!(out, host);
    /// ```
    pub fn run<D, T, U, SI, SO, A, Di, F>(
        &self,
        input: &ArrayBase<A, Di>,
        mut f: F,
    ) -> Result<Array<U, SO::NdDim>>
    where
        D: Device,
        T: DType,
        U: DType,
        SI: ChunkShape,
        SO: ChunkShape + NdShape,
        A: Data<Elem = T>,
        Di: Dimension,
        F: FnMut(Tensor<D, T, SI>) -> Result<Tensor<D, U, SO>>,
    {
        check_host_dims::<SI>("stream_map input", input.shape())?;
        let rows = input.shape()[0];
        let chunk_rows = self.plan::<D, T, U, SO>(input.shape())?;
        let mut data: Vec<U> = Vec::new();
        let mut row_dims: Option<Vec<usize>> = None;
        self.drive(chunk_rows, |from, chunk_rows, stats| {
            let jobs = split_rows(input.view(), from, chunk_rows, |v, i| {
                v.split_at(Axis(0), i)
            });
            let mut sink = |_: ArrayView<'_, T, Di>, dims: &[usize], values: &[U]| {
                if row_dims.is_none() {
                    row_dims = Some(dims[1..].to_vec());
                    let per_row: usize = dims[1..].iter().product();
                    data.reserve_exact(per_row.saturating_mul(rows));
                }
                data.extend_from_slice(values);
                Ok(())
            };
            pipeline(jobs, |v| Tensor::from_ndarray(v), &mut f, &mut sink, stats)
        })?;
        let mut dims = vec![rows];
        dims.extend(row_dims.unwrap_or_default());
        let mut dim = SO::NdDim::zeros(dims.len());
        dim.slice_mut().copy_from_slice(&dims);
        Ok(Array::from_shape_vec(dim, data).expect("every row was written once"))
    }

    /// Like [`run`](Self::run) but writes the results into `output` (any
    /// layout, e.g. a slice of a larger array), whose dims must be the
    /// result's; returns what the run did.
    ///
    /// ```
    /// use ndarray::Array2;
    /// use tensorfn_runtime::{StreamMap, Cpu, Tensor, shape};
    /// let host = Array2::from_shape_fn((20, 2), |(i, j)| (i * 2 + j) as f32);
    /// let mut out = Array2::<f32>::zeros((2, 20));
    /// let stats = StreamMap::new()
    ///     .chunk_rows(8)
    ///     .run_into(&host, &mut out.view_mut().reversed_axes(), |x: Tensor<Cpu, f32, shape![_, 2]>| Ok(x))
    ///     .unwrap();
    /// assert_eq!(out, host.t());
    /// assert_eq!(stats.chunks, 3);
    /// ```
    pub fn run_into<D, T, U, SI, SO, A, Di, B, Do, F>(
        &self,
        input: &ArrayBase<A, Di>,
        output: &mut ArrayBase<B, Do>,
        mut f: F,
    ) -> Result<StreamStats>
    where
        D: Device,
        T: DType,
        U: DType,
        SI: ChunkShape,
        SO: ChunkShape,
        A: Data<Elem = T>,
        Di: Dimension,
        B: DataMut<Elem = U>,
        Do: Dimension,
        F: FnMut(Tensor<D, T, SI>) -> Result<Tensor<D, U, SO>>,
    {
        check_host_dims::<SI>("stream_map input", input.shape())?;
        check_host_dims::<SO>("stream_map output", output.shape())?;
        let rows = input.shape()[0];
        if output.shape()[0] != rows {
            return Err(Error::shape(
                "stream_map output",
                format!("{rows} rows, one per input row"),
                format!("dims {:?}", output.shape()),
            ));
        }
        let chunk_rows = self.plan::<D, T, U, SO>(input.shape())?;
        self.drive(chunk_rows, |from, chunk_rows, stats| {
            let inputs = split_rows(input.view(), from, chunk_rows, |v, i| {
                v.split_at(Axis(0), i)
            });
            let outputs = split_rows(output.view_mut(), from, chunk_rows, |v, i| {
                v.split_at(Axis(0), i)
            });
            let jobs = inputs
                .into_iter()
                .zip(outputs)
                .map(|((start, i), (_, o))| (start, (i, o)))
                .collect();
            let mut sink = |(_, out): (ArrayView<'_, T, Di>, ArrayViewMut<'_, U, Do>),
                            dims: &[usize],
                            values: &[U]| write_rows(out, dims, values);
            pipeline(
                jobs,
                |(v, _)| Tensor::from_ndarray(v),
                &mut f,
                &mut sink,
                stats,
            )
        })
    }

    /// Like [`run_into`](Self::run_into) with the input array as the
    /// output: each chunk of rows is replaced by `f` of it, so a host array
    /// is transformed without a second host copy. `f` keeps the dtype and
    /// the dims.
    ///
    /// ```
    /// use ndarray::Array2;
    /// use tensorfn_runtime::{StreamMap, Cpu, Tensor, shape};
    /// let mut host = Array2::from_shape_fn((30, 2), |(i, j)| (i * 2 + j) as f64);
    /// let before = host.clone();
    /// StreamMap::new()
    ///     .chunk_rows(4)
    ///     .run_in_place(&mut host, |mut x: Tensor<Cpu, f64, shape![_, 2]>| {
    ///         x.add_scalar_(0.5)?; // the chunk is the function's own: no copy
    ///         Ok(x)
    ///     })
    ///     .unwrap();
    /// assert_eq!(host, before.mapv(|v| v + 0.5));
    /// ```
    pub fn run_in_place<D, T, SI, SO, A, Di, F>(
        &self,
        array: &mut ArrayBase<A, Di>,
        mut f: F,
    ) -> Result<StreamStats>
    where
        D: Device,
        T: DType,
        SI: ChunkShape,
        SO: ChunkShape,
        A: DataMut<Elem = T>,
        Di: Dimension,
        F: FnMut(Tensor<D, T, SI>) -> Result<Tensor<D, T, SO>>,
    {
        check_host_dims::<SI>("stream_map input", array.shape())?;
        check_host_dims::<SO>("stream_map output", array.shape())?;
        let chunk_rows = self.plan::<D, T, T, SO>(array.shape())?;
        self.drive(chunk_rows, |from, chunk_rows, stats| {
            let jobs = split_rows(array.view_mut(), from, chunk_rows, |v, i| {
                v.split_at(Axis(0), i)
            });
            let mut sink = |out: ArrayViewMut<'_, T, Di>, dims: &[usize], values: &[T]| {
                write_rows(out, dims, values)
            };
            pipeline(jobs, |v| Tensor::from_ndarray(v), &mut f, &mut sink, stats)
        })
    }

    /// Runs passes until every row is done, halving automatically sized
    /// chunks that run out of device memory. `pass(from, chunk_rows,
    /// stats)` processes the rows from `from` on.
    fn drive(
        &self,
        chunk_rows: usize,
        mut pass: impl FnMut(usize, usize, &mut StreamStats) -> Pass,
    ) -> Result<StreamStats> {
        let mut stats = StreamStats {
            chunk_rows,
            ..StreamStats::default()
        };
        let mut from = 0;
        loop {
            match pass(from, stats.chunk_rows, &mut stats) {
                Pass::Done => return Ok(stats),
                Pass::Failed {
                    row,
                    error: Error::OutOfMemory { .. },
                } if self.chunk_rows.is_none() && stats.chunk_rows > 1 => {
                    from = row;
                    stats.chunk_rows /= 2;
                    stats.retries += 1;
                }
                Pass::Failed { error, .. } => return Err(error),
            }
        }
    }

    /// Rows per chunk: the explicit setting, or what the free memory of `D`
    /// holds for two chunks, two results and the function's temporaries.
    fn plan<D: Device, T: DType, U: DType, SO: Shape>(&self, dims: &[usize]) -> Result<usize> {
        if let Some(rows) = self.chunk_rows {
            if rows == 0 {
                return Err(Error::shape(
                    "stream_map",
                    "a chunk of at least one row",
                    "chunk_rows(0)",
                ));
            }
            return Ok(rows);
        }
        if !(self.memory_fraction > 0.0 && self.memory_fraction <= 1.0) {
            return Err(Error::shape(
                "stream_map",
                "a memory fraction in (0, 1]",
                format!("memory_fraction({})", self.memory_fraction),
            ));
        }
        let in_row = dims[1..].iter().product::<usize>() * std::mem::size_of::<T>();
        // A result row: from the type when its dims are static, else
        // assumed as many elements as an input row.
        let out_elems = SO::DIMS[1..SO::RANK]
            .iter()
            .copied()
            .collect::<Option<Vec<usize>>>()
            .map_or(dims[1..].iter().product(), |d| d.iter().product::<usize>());
        let out_row = out_elems * std::mem::size_of::<U>();
        let per_row = (2 * in_row + 2 * out_row + 2 * in_row.max(out_row)).max(1);
        // A device whose memory bounds the chunks (a GPU) reports it free.
        let free = dispatch!(D, |be| be.free_memory())?;
        let budget = free.map_or(CPU_CHUNK_BYTES, |free| {
            (free as f64 * self.memory_fraction) as usize
        });
        let mut rows = budget / per_row;
        if rows == 0 && free.is_some() {
            return Err(Error::OutOfMemory {
                requested: per_row,
                free: budget,
                total: budget,
            });
        }
        if free.is_some() {
            // Chunks are staged through pinned host buffers: bounded, so
            // the pipeline fills quickly and pins little host memory.
            rows = rows.min((GPU_CHUNK_BYTES / in_row.max(out_row).max(1)).max(1));
        }
        Ok(rows.clamp(1, dims[0].max(1)))
    }
}

/// Splits a view into chunks of `rows` rows from row `from` on, with the
/// first row of each. An empty view gives one empty chunk, so the function
/// still runs once and tells the result's row dims.
fn split_rows<V>(
    view: V,
    from: usize,
    rows: usize,
    split: impl Fn(V, usize) -> (V, V),
) -> Vec<(usize, V)>
where
    V: HasRows,
{
    let total = view.rows();
    let (_, mut rest) = split(view, from.min(total));
    let mut jobs = Vec::new();
    let mut start = from;
    while rest.rows() > rows {
        let (head, tail) = split(rest, rows);
        jobs.push((start, head));
        start += rows;
        rest = tail;
    }
    if rest.rows() > 0 || jobs.is_empty() {
        jobs.push((start, rest));
    }
    jobs
}

/// Views whose dim 0 is the row count.
trait HasRows {
    fn rows(&self) -> usize;
}

impl<S: ndarray::RawData, Di: Dimension> HasRows for ArrayBase<S, Di> {
    fn rows(&self) -> usize {
        self.shape()[0]
    }
}

/// Copies a result's row-major values into the rows it belongs to.
fn write_rows<U: DType, Do: Dimension>(
    mut out: ArrayViewMut<'_, U, Do>,
    dims: &[usize],
    values: &[U],
) -> Result<()> {
    if dims != out.shape() {
        return Err(Error::shape(
            "stream_map output",
            format!("result chunks of dims {:?}", out.shape()),
            format!("the function returned dims {dims:?}"),
        ));
    }
    for (slot, v) in out.iter_mut().zip(values) {
        *slot = *v;
    }
    Ok(())
}

/// A chunk's input rows, wherever they come from.
trait Rows<T> {
    /// The dims of the chunk (rows first).
    fn dims(&self) -> &[usize];
    /// Copies the elements row-major into `dst` (exactly as many).
    fn gather_into(&self, dst: &mut [T]);
}

/// Copies a view's elements row-major into `dst`.
fn gather_view<T: DType, Di: Dimension>(v: ArrayView<'_, T, Di>, dst: &mut [T]) {
    match v.as_slice() {
        Some(src) => parallel_copy(src, dst),
        None => {
            for (d, x) in dst.iter_mut().zip(v.iter()) {
                *d = *x;
            }
        }
    }
}

impl<T: DType, Di: Dimension> Rows<T> for ArrayView<'_, T, Di> {
    fn dims(&self) -> &[usize] {
        self.shape()
    }
    fn gather_into(&self, dst: &mut [T]) {
        gather_view(self.view(), dst)
    }
}

impl<T: DType, Di: Dimension> Rows<T> for ArrayViewMut<'_, T, Di> {
    fn dims(&self) -> &[usize] {
        self.shape()
    }
    fn gather_into(&self, dst: &mut [T]) {
        gather_view(self.view(), dst)
    }
}

impl<T: DType, U, Di: Dimension, Do: Dimension> Rows<T>
    for (ArrayView<'_, T, Di>, ArrayViewMut<'_, U, Do>)
{
    fn dims(&self) -> &[usize] {
        self.0.shape()
    }
    fn gather_into(&self, dst: &mut [T]) {
        gather_view(self.0.view(), dst)
    }
}

/// One pass over `jobs`: on a GPU with copy streams when the dtypes allow
/// it ([`overlapped`]), else with host threads ([`threaded`]).
fn pipeline<D, T, U, SI, SO, J, L, F, K>(
    jobs: Vec<(usize, J)>,
    load: L,
    f: &mut F,
    sink: &mut K,
    stats: &mut StreamStats,
) -> Pass
where
    D: Device,
    T: DType,
    U: DType,
    SI: ChunkShape,
    SO: ChunkShape,
    J: Rows<T> + Send,
    L: FnMut(&J) -> Result<Tensor<D, T, SI>> + Send,
    F: FnMut(Tensor<D, T, SI>) -> Result<Tensor<D, U, SO>>,
    K: FnMut(J, &[usize], &[U]) -> Result<()> + Send,
{
    match D::KIND {
        // Device booleans are read as bytes and checked, which the
        // threaded path's downloads do.
        DeviceKind::Cuda(ord) if T::KIND != DTypeKind::Bool && U::KIND != DTypeKind::Bool => {
            overlapped(ord, jobs, f, sink, stats)
        }
        _ => threaded(jobs, load, f, sink, stats),
    }
}

/// A result whose download is queued: kept alive (with the contiguous
/// copy it was read from, if any) until the host has seen the download
/// finish.
struct Queued<D: Device, U: DType, SO: Shape, J> {
    start: usize,
    job: J,
    result: Tensor<D, U, SO>,
    _copy: Option<crate::cuda::CudaStorage<U>>,
    len: usize,
}

/// One pass on cuda:`ord` with copy streams (see `cuda::Overlap`): while
/// the device computes chunk `i`, the host gathers chunk `i + 1` into a
/// pinned buffer and the upload stream copies it, and the download stream
/// copies result `i - 1` into another pinned buffer, which the host then
/// writes out. The order of the calls below is what makes them overlap:
/// chunk `i + 1`'s device buffer is allocated before chunk `i`'s work is
/// queued, and its upload is queued right after.
fn overlapped<D, T, U, SI, SO, J, F, K>(
    ord: usize,
    jobs: Vec<(usize, J)>,
    f: &mut F,
    sink: &mut K,
    stats: &mut StreamStats,
) -> Pass
where
    D: Device,
    T: DType,
    U: DType,
    SI: ChunkShape,
    SO: ChunkShape,
    J: Rows<T>,
    F: FnMut(Tensor<D, T, SI>) -> Result<Tensor<D, U, SO>>,
    K: FnMut(J, &[usize], &[U]) -> Result<()>,
{
    let first_row = jobs.first().map_or(0, |j| j.0);
    let max_rows = jobs.iter().map(|j| j.1.dims()[0]).max().unwrap_or(0);
    let in_row: usize = jobs.first().map_or(0, |j| j.1.dims()[1..].iter().product());
    let in_capacity = max_rows * in_row;
    // Declared before `ov`, so dropped after it: dropping `ov` waits for
    // the copies that use these device buffers, whatever ends the pass.
    let mut queued: [Option<Queued<D, U, SO, J>>; 2] = [None, None];
    let mut next: Option<Staged<T, J>> = None;
    let mut ov = match crate::cuda::Overlap::<T, U>::new(ord) {
        Ok(ov) => ov,
        Err(error) => {
            return Pass::Failed {
                row: first_row,
                error,
            }
        }
    };

    // Waits for the queued download of `slot` and hands it to the sink.
    let mut finish = |ov: &mut crate::cuda::Overlap<T, U>,
                      q: Queued<D, U, SO, J>,
                      slot: usize,
                      stats: &mut StreamStats|
     -> std::result::Result<(), (usize, Error)> {
        let values = ov.downloaded(slot, q.len).map_err(|e| (q.start, e))?;
        let rows = q.result.shape()[0];
        sink(q.job, q.result.shape(), values).map_err(|e| (q.start, e))?;
        stats.chunks += 1;
        stats.rows += rows;
        Ok(())
    };

    let run = |queued: &mut [Option<Queued<D, U, SO, J>>; 2],
               next: &mut Option<Staged<T, J>>,
               stats: &mut StreamStats|
     -> std::result::Result<(), (usize, Error)> {
        let mut jobs = jobs.into_iter();
        // A chunk's device buffer, allocated (not yet filled) in `slot`.
        let stage = |ov: &mut crate::cuda::Overlap<T, U>,
                     slot: usize,
                     (start, job): (usize, J)|
         -> std::result::Result<Staged<T, J>, (usize, Error)> {
            let dims = job.dims().to_vec();
            let storage = ov
                .allocate(slot, dims.iter().product())
                .map_err(|e| (start, e))?;
            Ok(Staged {
                start,
                job,
                dims,
                storage,
            })
        };
        if let Some(job) = jobs.next() {
            let first = next.insert(stage(&mut ov, 0, job)?);
            ov.upload(0, &first.storage, in_capacity, |dst| {
                first.job.gather_into(dst)
            })
            .map_err(|e| (first.start, e))?;
        }
        let mut i = 0;
        while let Some(current) = next.take() {
            let slot = i % 2;
            // Chunk i + 1's buffer, before chunk i's work is queued.
            if let Some(job) = jobs.next() {
                *next = Some(stage(&mut ov, 1 - slot, job)?);
            }
            let Staged {
                start,
                job,
                dims,
                storage,
            } = current;
            ov.await_upload(slot).map_err(|e| (start, e))?;
            let rows = dims[0];
            let chunk = Tensor::<D, T, SI>::from_parts(
                std::sync::Arc::new(crate::storage::Storage::Cuda(storage)),
                crate::layout::Layout::contiguous(&dims),
            );
            let result = f(chunk)
                .and_then(|r| check_rows(r, rows))
                .map_err(|e| (start, e))?;
            let (ptr, copy) = crate::cuda::contiguous_ptr(result.storage.as_cuda(), &result.layout)
                .map_err(|e| (start, e))?;
            let len = result.numel();
            let out_capacity = len
                .checked_div(rows)
                .map_or(0, |per_row| per_row * max_rows);
            queued[slot] = Some(Queued {
                start,
                job,
                result,
                _copy: copy,
                len,
            });
            ov.download(slot, ptr, len, out_capacity)
                .map_err(|e| (start, e))?;
            // Gather and queue chunk i + 1 while the device computes chunk i.
            if let Some(n) = next.as_ref() {
                ov.upload(1 - slot, &n.storage, in_capacity, |dst| {
                    n.job.gather_into(dst)
                })
                .map_err(|e| (n.start, e))?;
            }
            // Result i - 1 has been downloading during chunk i's work.
            if let Some(q) = queued[1 - slot].take() {
                finish(&mut ov, q, 1 - slot, stats)?;
            }
            i += 1;
        }
        Ok(())
    };

    let mut outcome = run(&mut queued, &mut next, stats);
    if outcome.is_err() {
        // No copy may outlive the buffers dropped below.
        if let Err(e) = ov.drain() {
            outcome = Err((first_row, e));
        }
    }
    // Results queued before the failing row (or all of them) are written
    // out, oldest first, so the rows before the reported one are done.
    let mut order: Vec<usize> = (0..2).filter(|&s| queued[s].is_some()).collect();
    order.sort_by_key(|&s| queued[s].as_ref().map_or(0, |q| q.start));
    for slot in order {
        let Some(q) = queued[slot].take() else {
            continue;
        };
        if let Err((failed, _)) = &outcome {
            if q.start >= *failed {
                continue;
            }
        }
        if let Err(e) = finish(&mut ov, q, slot, stats) {
            outcome = Err(e);
        }
    }
    match outcome {
        Ok(()) => Pass::Done,
        Err((row, error)) => Pass::Failed { row, error },
    }
}

/// A chunk whose device buffer is allocated and whose upload is (or is
/// about to be) queued.
struct Staged<T: DType, J> {
    start: usize,
    job: J,
    dims: Vec<usize>,
    storage: crate::cuda::CudaStorage<T>,
}

/// One pass of the three-stage pipeline over `jobs`: a load thread copies
/// each chunk to the device, `f` runs on the calling thread, a store
/// thread copies each result back and gives it to `sink` with its job.
/// The channels hold nothing (rendezvous), so each stage works on one
/// chunk while handing over the previous one: double buffering.
fn threaded<D, T, U, SI, SO, J, L, F, K>(
    jobs: Vec<(usize, J)>,
    mut load: L,
    f: &mut F,
    sink: &mut K,
    stats: &mut StreamStats,
) -> Pass
where
    D: Device,
    T: DType,
    U: DType,
    SI: ChunkShape,
    SO: ChunkShape,
    J: Send,
    L: FnMut(&J) -> Result<Tensor<D, T, SI>> + Send,
    F: FnMut(Tensor<D, T, SI>) -> Result<Tensor<D, U, SO>>,
    K: FnMut(J, &[usize], &[U]) -> Result<()> + Send,
{
    type Handoff<D, E, S, J> = (usize, Result<Tensor<D, E, S>>, J);
    std::thread::scope(|scope| {
        let (chunk_tx, chunk_rx) = sync_channel::<Handoff<D, T, SI, J>>(0);
        let (result_tx, result_rx) = sync_channel::<(usize, Tensor<D, U, SO>, J)>(0);
        scope.spawn(move || {
            for (start, job) in jobs {
                let chunk = load(&job);
                let failed = chunk.is_err();
                if chunk_tx.send((start, chunk, job)).is_err() || failed {
                    return;
                }
            }
        });
        let store = scope.spawn(move || -> std::result::Result<(), (usize, Error)> {
            for (start, result, job) in result_rx {
                let values = result.to_vec().map_err(|e| (start, e))?;
                sink(job, result.shape(), &values).map_err(|e| (start, e))?;
            }
            Ok(())
        });

        let mut failure = None;
        for (start, chunk, job) in chunk_rx {
            let computed = chunk.and_then(|c| {
                let rows = c.shape()[0];
                check_rows(f(c)?, rows)
            });
            match computed {
                Ok(result) => {
                    let rows = result.shape()[0];
                    if result_tx.send((start, result, job)).is_err() {
                        // The store stage stopped; its error is reported below.
                        break;
                    }
                    stats.chunks += 1;
                    stats.rows += rows;
                }
                Err(error) => {
                    failure = Some(Pass::Failed { row: start, error });
                    break;
                }
            }
        }
        drop(result_tx);
        let stored = store
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match (failure, stored) {
            (_, Err((row, error))) => Pass::Failed { row, error },
            (Some(failed), Ok(())) => failed,
            (None, Ok(())) => Pass::Done,
        }
    })
}

/// The function's result must keep one row per input row.
fn check_rows<D: Device, U: DType, SO: Shape>(
    result: Tensor<D, U, SO>,
    rows: usize,
) -> Result<Tensor<D, U, SO>> {
    if result.shape()[0] != rows {
        return Err(Error::shape(
            "stream_map",
            format!(
                "a result of {rows} rows for a chunk of {rows} rows ({}): the function must map rows independently",
                type_name::<SO>()
            ),
            format!("dims {:?}", result.shape()),
        ));
    }
    Ok(result)
}

/// Applies `f` to `input` in chunks of rows on device `D` (taken from `f`'s
/// argument type) and returns the results stacked along dim 0: the same
/// array as `f` applied to the whole input, for inputs larger than the
/// device's memory. Chunk size from free memory; see [`StreamMap`] to set
/// it, to write into an existing array, or to get [`StreamStats`].
///
/// ```
/// use ndarray::Array2;
/// use tensorfn_runtime::{stream_map, Cpu, Cuda, Device, Tensor, shape, Result};
///
/// // The per-chunk work, written once for every device.
/// fn scaled<D: Device>(x: Tensor<D, f32, shape![_, 3]>) -> Result<Tensor<D, f32, shape![_, 3]>> {
///     x.mul_scalar(3.0)
/// }
///
/// let host = Array2::from_shape_fn((5_000, 3), |(i, j)| (i + j) as f32);
/// let out = stream_map(&host, scaled::<Cpu>).unwrap();
/// assert_eq!(out, host.mapv(|v| v * 3.0));
/// if let Ok(gpu) = stream_map(&host, scaled::<Cuda>) {
///     assert_eq!(gpu, out);
/// }
/// ```
pub fn stream_map<D, T, U, SI, SO, A, Di, F>(
    input: &ArrayBase<A, Di>,
    f: F,
) -> Result<Array<U, SO::NdDim>>
where
    D: Device,
    T: DType,
    U: DType,
    SI: ChunkShape,
    SO: ChunkShape + NdShape,
    A: Data<Elem = T> + Sync,
    Di: Dimension,
    F: FnMut(Tensor<D, T, SI>) -> Result<Tensor<D, U, SO>>,
{
    StreamMap::new().run(input, f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array3};

    #[test]
    fn rows_gather_row_major_from_any_layout() {
        let a = Array3::from_shape_fn((5, 3, 4), |(i, j, k)| (i * 100 + j * 10 + k) as i64);
        // Contiguous, sliced, transposed inner dims, and a mutable view.
        let views = [
            a.slice(s![1..4, .., ..]).to_owned(),
            a.slice(s![.., 1.., ..;2]).to_owned(),
        ];
        for v in &views {
            let mut dst = vec![0i64; v.len()];
            v.view().gather_into(&mut dst);
            assert_eq!(dst, v.iter().copied().collect::<Vec<_>>());
            assert_eq!(Rows::<i64>::dims(&v.view()), v.shape());
        }
        let strided = a.slice(s![.., 1.., ..;2]);
        let mut dst = vec![0i64; strided.len()];
        strided.gather_into(&mut dst);
        assert_eq!(dst, views[1].iter().copied().collect::<Vec<_>>());
        let mut b = a.clone();
        let t = b.view_mut().permuted_axes([0, 2, 1]);
        let mut dst = vec![0i64; t.len()];
        t.gather_into(&mut dst);
        let want: Vec<i64> = a.view().permuted_axes([0, 2, 1]).iter().copied().collect();
        assert_eq!(dst, want);
        let mut out = ndarray::Array2::<f32>::zeros((5, 2));
        let pair = (a.slice(s![.., 0, ..]), out.view_mut());
        let mut dst = vec![0i64; 20];
        pair.gather_into(&mut dst);
        assert_eq!(
            dst,
            a.slice(s![.., 0, ..]).iter().copied().collect::<Vec<_>>()
        );
        assert_eq!(Rows::<i64>::dims(&pair), &[5, 4]);
    }

    #[test]
    fn automatic_gpu_chunks_are_bounded_by_the_staging_size() {
        // The CPU budget is fixed; the bound applies on GPUs only.
        let rows = StreamMap::new()
            .plan::<crate::Cpu, f32, f32, (Dyn, crate::Const<1024>)>(&[1 << 20, 1024])
            .unwrap();
        assert_eq!(rows, CPU_CHUNK_BYTES / (6 * 4096));
        if let Ok(rows) = StreamMap::new()
            .plan::<crate::Cuda, f32, f32, (Dyn, crate::Const<1024>)>(&[1 << 20, 1024])
        {
            assert!(rows * 4096 <= GPU_CHUNK_BYTES && rows >= 1, "{rows}");
        }
    }
}
