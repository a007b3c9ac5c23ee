//! Parameter structs: typed tensors gathered in structs, arrays and `Vec`s,
//! named the way Hugging Face checkpoints name them (`h.0.attn.c_attn.weight`),
//! loaded from and saved to safetensors files.
//!
//! [`Params`] is implemented for [`Tensor`], for arrays and `Vec`s of
//! parameters, and by `#[derive(Params)]` for structs (each field under its
//! name, or the name given by `#[params(rename = "..")]`).
//!
//! ```
//! use tensorfn_runtime::{Cpu, Params, Tensor, shape};
//! let layers: Vec<Tensor<Cpu, f32, shape![2, 3]>> = vec![Tensor::ones().unwrap(); 2];
//! let mut names = Vec::new();
//! layers.visit(&mut |name, t| { names.push(format!("{name} {:?}", t.dims())); Ok(()) }).unwrap();
//! assert_eq!(names, ["0 [2, 3]", "1 [2, 3]"]);
//! assert_eq!(layers.num_params(), 12);
//! ```

mod batch_norm;
mod mmap;
pub(crate) mod safetensors;

pub use self::batch_norm::{BatchNorm, RunningStats};
pub use self::safetensors::{LoadOptions, Loader};

use crate::dtype::{DType, DTypeKind};
use crate::storage::Storage;
use crate::{Device, DeviceKind, Result, Shape, Tensor};
use std::any::Any;
use std::path::Path;
use std::sync::Arc;

/// A tensor's elements seen without their dtype, contiguous from
/// `offset`: what an optimizer reads a gradient through. Not a stable API.
#[doc(hidden)]
pub struct ErasedRef {
    pub(crate) storage: Arc<dyn Any + Send + Sync>,
    pub(crate) offset: usize,
}

/// A tensor's unshared elements seen without their dtype, contiguous
/// from `offset`: what an optimizer updates a parameter through. Not a
/// stable API.
#[doc(hidden)]
pub struct ErasedMut<'a> {
    pub(crate) storage: &'a mut dyn Any,
    pub(crate) offset: usize,
}

/// A tensor of a parameter struct seen without its type: what a visit
/// gives for each name.
///
/// ```
/// use tensorfn_runtime::{AnyTensor, Cpu, DeviceKind, DTypeKind, Tensor, shape};
/// let t = Tensor::<Cpu, f32, shape![2, 3]>::zeros().unwrap();
/// let any: &dyn AnyTensor = &t;
/// assert_eq!((any.dtype(), any.dims()), (DTypeKind::F32, vec![2, 3]));
/// assert_eq!(any.device(), DeviceKind::Cpu);
/// assert_eq!(any.to_le_bytes().unwrap().len(), 24);
/// ```
pub trait AnyTensor {
    /// The dims.
    fn dims(&self) -> Vec<usize>;
    /// The dtype.
    fn dtype(&self) -> DTypeKind;
    /// The number of elements.
    fn numel(&self) -> usize {
        self.dims().iter().product()
    }
    /// The elements in row-major order as little-endian bytes (copied to
    /// the host), as a safetensors file stores them.
    fn to_le_bytes(&self) -> Result<Vec<u8>>;
    /// The device holding the elements.
    fn device(&self) -> DeviceKind;
    /// The elements, contiguous (a strided view is copied first).
    #[doc(hidden)]
    fn erased(&self) -> Result<ErasedRef>;
    /// The elements for writing in place, contiguous and unshared (a
    /// shared or strided tensor gets a buffer of its own first, as any
    /// in-place write does).
    #[doc(hidden)]
    fn erased_mut(&mut self) -> Result<ErasedMut<'_>>;
    /// The tensor as `Any`, for [`AnyTensor::add_from`].
    #[doc(hidden)]
    fn as_any(&self) -> &dyn Any;
    /// Adds `other`, a tensor of the same type and dims, in place (what
    /// [`Params::accumulate`] does for each tensor).
    #[doc(hidden)]
    fn add_from(&mut self, other: &dyn AnyTensor) -> Result<()>;
}

impl<D: Device, T: DType, S: Shape> AnyTensor for Tensor<D, T, S> {
    fn dims(&self) -> Vec<usize> {
        Tensor::dims(self).to_vec()
    }

    fn dtype(&self) -> DTypeKind {
        T::KIND
    }

    fn to_le_bytes(&self) -> Result<Vec<u8>> {
        Ok(safetensors::le_bytes(&self.to_vec()?))
    }

    fn device(&self) -> DeviceKind {
        D::KIND
    }

    fn erased(&self) -> Result<ErasedRef> {
        let t = match self.is_contiguous() {
            true => self.clone(),
            false => self.contiguous()?,
        };
        let storage: Arc<Storage<T>> = t.storage;
        Ok(ErasedRef {
            storage,
            offset: t.layout.offset(),
        })
    }

    fn erased_mut(&mut self) -> Result<ErasedMut<'_>> {
        if !self.is_contiguous() {
            *self = self.contiguous()?;
        }
        let (storage, layout) = self.make_unique()?;
        Ok(ErasedMut {
            offset: layout.offset(),
            storage,
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn add_from(&mut self, other: &dyn AnyTensor) -> Result<()> {
        let Some(other) = other.as_any().downcast_ref::<Self>() else {
            return Err(accumulate_error(format!(
                "a `{}` tensor on {:?} cannot take a `{}` tensor on {:?}",
                T::KIND,
                D::KIND,
                other.dtype(),
                other.device()
            )));
        };
        if self.dims() != other.dims() {
            return Err(accumulate_error(format!(
                "dims {:?} cannot take dims {:?}",
                self.dims(),
                other.dims()
            )));
        }
        /// `a += b` under the numeric dtype `U`, which is `T`.
        fn add<D: Device, T: DType, U: crate::dtype::NumDType, S: Shape>(
            a: &mut Tensor<D, T, S>,
            b: &Tensor<D, T, S>,
        ) -> Result<()> {
            let a = (a as &mut dyn Any)
                .downcast_mut::<Tensor<D, U, S>>()
                .expect("`U` is `T`");
            a.add_(crate::ops::retype::retype_ref(b)?)
        }
        match T::KIND {
            DTypeKind::F32 => add::<D, T, f32, S>(self, other),
            DTypeKind::F64 => add::<D, T, f64, S>(self, other),
            DTypeKind::F16 => add::<D, T, crate::f16, S>(self, other),
            DTypeKind::BF16 => add::<D, T, crate::bf16, S>(self, other),
            DTypeKind::I32 => add::<D, T, i32, S>(self, other),
            DTypeKind::I64 => add::<D, T, i64, S>(self, other),
            DTypeKind::U8 => add::<D, T, u8, S>(self, other),
            DTypeKind::Bool => Err(accumulate_error(
                "`bool` tensors cannot be added; keep them out of gradients".into(),
            )),
        }
    }
}

/// An `Err` of [`Params::accumulate`].
fn accumulate_error(message: String) -> crate::Error {
    crate::Error::InvalidArgument {
        op: "accumulate".into(),
        message,
    }
}

/// Named parameters: a tensor, an array or `Vec` of parameters, or a
/// struct with `#[derive(Params)]`.
///
/// ```
/// use tensorfn_runtime::{Cpu, Params, Tensor, shape};
/// let dir = std::env::temp_dir().join(format!("tf_params_doc_{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("w.safetensors");
/// let w = [Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1.0, 2.0]).unwrap(),
///          Tensor::<Cpu, f32, shape![2]>::from_vec(vec![3.0, 4.0]).unwrap()];
/// w.save_safetensors(&path).unwrap(); // keys "0" and "1"
/// let back = <[Tensor<Cpu, f32, shape![2]>; 2]>::load_safetensors(&path).unwrap();
/// assert_eq!(back[1].to_vec().unwrap(), vec![3.0, 4.0]);
/// // A file with a tensor of another shape is an error naming the key.
/// let e = <[Tensor<Cpu, f32, shape![3]>; 2]>::load_safetensors(&path).unwrap_err();
/// assert!(e.to_string().contains("`0`"), "{e}");
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not parameters",
    label = "not a tensor or parameters",
    note = "a field of a `#[derive(Params)]` struct is a `Tensor`, a struct deriving `Params`, or an array or `Vec` of those; keep other values outside the struct"
)]
pub trait Params: Sized {
    /// Calls `f` with the full name and the tensor of every parameter,
    /// in declaration order, each name prefixed by `prefix` and a dot.
    fn visit_named(
        &self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &dyn AnyTensor) -> Result<()>,
    ) -> Result<()>;

    /// Reads every parameter under `prefix` from `loader`.
    fn load_named(prefix: &str, loader: &mut Loader<'_>) -> Result<Self>;

    /// Parameters of the same type, shapes and device, every element zero:
    /// the starting point of gradients and of optimizer state.
    ///
    /// ```
    /// use tensorfn_runtime::{shape, Cpu, Params, Tensor};
    /// let w = Tensor::<Cpu, f32, shape![_, 3]>::ones_dims(&[2, 3]).unwrap();
    /// let layers = vec![w.clone(), w];
    /// let z = layers.zeros_like().unwrap();
    /// assert_eq!(z.len(), 2);
    /// assert_eq!(z[1].dims(), &[2, 3]);
    /// assert_eq!(z[1].to_vec().unwrap(), vec![0.0; 6]);
    /// ```
    fn zeros_like(&self) -> Result<Self>;

    /// Appends the full name and the tensor of every parameter, in
    /// declaration order, each name prefixed by `prefix` and a dot: the
    /// tensors of several values of one parameter type (parameters,
    /// gradients) side by side. See [`Params::tensors`].
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Params, Tensor, shape};
    /// let w = Tensor::<Cpu, f32, shape![2]>::ones().unwrap();
    /// let layers = vec![[w.clone(), w]];
    /// let mut out = Vec::new();
    /// layers.collect_named("h", &mut out);
    /// let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
    /// assert_eq!(names, ["h.0.0", "h.0.1"]);
    /// ```
    fn collect_named<'a>(&'a self, prefix: &str, out: &mut Vec<(String, &'a dyn AnyTensor)>);

    /// [`collect_named`](Params::collect_named) for writing: how an
    /// optimizer updates the tensors in place. See [`Params::tensors_mut`].
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Params, Tensor, shape};
    /// let mut w = [Tensor::<Cpu, f32, shape![3]>::ones().unwrap()];
    /// let mut out = Vec::new();
    /// w.collect_named_mut("", &mut out);
    /// assert_eq!((out[0].0.as_str(), out[0].1.dims()), ("0", vec![3]));
    /// ```
    fn collect_named_mut<'a>(
        &'a mut self,
        prefix: &str,
        out: &mut Vec<(String, &'a mut dyn AnyTensor)>,
    );

    /// The name and the tensor of every parameter, in declaration order.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Params, Tensor, shape};
    /// let p = [Tensor::<Cpu, f32, shape![2]>::ones().unwrap(), Tensor::zeros().unwrap()];
    /// let names: Vec<String> = p.tensors().into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names, ["0", "1"]);
    /// ```
    fn tensors(&self) -> Vec<(String, &dyn AnyTensor)> {
        let mut out = Vec::new();
        self.collect_named("", &mut out);
        out
    }

    /// The name and the tensor of every parameter for writing, in
    /// declaration order (an optimizer pairs them with the gradients'
    /// [`tensors`](Params::tensors)).
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, DTypeKind, Params, Tensor, shape};
    /// let mut p = vec![Tensor::<Cpu, f32, shape![2]>::ones().unwrap()];
    /// let ts = p.tensors_mut();
    /// assert_eq!((ts[0].0.as_str(), ts[0].1.dtype()), ("0", DTypeKind::F32));
    /// ```
    fn tensors_mut(&mut self) -> Vec<(String, &mut dyn AnyTensor)> {
        let mut out = Vec::new();
        self.collect_named_mut("", &mut out);
        out
    }

    /// Adds `other`, a value of the same type (gradients), tensor by
    /// tensor in place, on the tensors' device: how the gradients of a
    /// parameter used in several places are summed, such as a weight tied
    /// between two layers whose `vjp`s each give a gradient struct, or the
    /// gradients of several micro-batches. Dims that differ (possible with
    /// `Dyn` dims or `Vec`s of different lengths) are an `Err` naming the
    /// parameter.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, Params, Tensor, shape};
    /// let g1 = vec![Tensor::<Cpu, f32, shape![2]>::from_vec(vec![1.0, 2.0]).unwrap()];
    /// let g2 = vec![Tensor::<Cpu, f32, shape![2]>::from_vec(vec![0.5, -2.0]).unwrap()];
    /// let mut total = g1.zeros_like().unwrap();
    /// total.accumulate(&g1).unwrap();
    /// total.accumulate(&g2).unwrap();
    /// assert_eq!(total[0].to_vec().unwrap(), vec![1.5, 0.0]);
    /// // A `Vec` of another length is an `Err`.
    /// let e = total.accumulate(&vec![]).unwrap_err();
    /// assert!(e.to_string().contains("1 tensors"), "{e}");
    /// ```
    fn accumulate(&mut self, other: &Self) -> Result<()> {
        let theirs = other.tensors();
        let mut mine = self.tensors_mut();
        if mine.len() != theirs.len() {
            return Err(accumulate_error(format!(
                "the parameters have {} tensors and the value added {}",
                mine.len(),
                theirs.len()
            )));
        }
        for ((name, a), (_, b)) in mine.iter_mut().zip(theirs) {
            a.add_from(b).map_err(|e| match e {
                crate::Error::InvalidArgument { op, message } => crate::Error::InvalidArgument {
                    op,
                    message: format!("parameter `{name}`: {message}"),
                },
                e => e,
            })?;
        }
        Ok(())
    }

    /// Calls `f` with the name and the tensor of every parameter.
    fn visit(&self, f: &mut dyn FnMut(&str, &dyn AnyTensor) -> Result<()>) -> Result<()> {
        self.visit_named("", f)
    }

    /// The number of scalar parameters.
    fn num_params(&self) -> usize {
        let mut n = 0;
        self.visit(&mut |_, t| {
            n += t.numel();
            Ok(())
        })
        .expect("counting does not fail");
        n
    }

    /// Reads the parameters from a safetensors file (memory-mapped, not
    /// read into memory first), checking every tensor's dtype and shape
    /// against the types; a missing, mis-shaped or extra tensor is an
    /// `Err` naming its key.
    fn load_safetensors(path: impl AsRef<Path>) -> Result<Self> {
        let file = safetensors::File::open(path.as_ref())?;
        let mut loader = file.loader()?;
        let params = Self::load_named("", &mut loader)?;
        loader.finish()?;
        Ok(params)
    }

    /// Reads the parameters from a safetensors file written by another
    /// library: under a prefix (Hugging Face's `GPT2LMHeadModel` stores the
    /// GPT-2 body under `transformer.`), leaving the keys that
    /// [`LoadOptions::ignore`] names (buffers such as `h.*.attn.bias`, a tied
    /// `lm_head.weight`). Keys outside the prefix are left too; every other
    /// check of [`Params::load_safetensors`] holds.
    ///
    /// ```
    /// use tensorfn_runtime::{Cpu, LoadOptions, Params, Tensor, shape};
    /// let dir = std::env::temp_dir().join(format!("tf_load_with_doc_{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("m.safetensors");
    /// // A file with keys "0", "1" and "2": read "0" and "1" under no prefix,
    /// // leaving "2".
    /// vec![Tensor::<Cpu, f32, shape![1]>::ones().unwrap(); 3].save_safetensors(&path).unwrap();
    /// let opts = LoadOptions { prefix: "", ignore: &["2"] };
    /// let two = <[Tensor<Cpu, f32, shape![1]>; 2]>::load_safetensors_with(&path, &opts).unwrap();
    /// assert_eq!(two.len(), 2);
    /// // Without `ignore`, the key left over is an error naming it.
    /// let opts = LoadOptions { prefix: "", ignore: &[] };
    /// let e = <[Tensor<Cpu, f32, shape![1]>; 2]>::load_safetensors_with(&path, &opts).unwrap_err();
    /// assert!(e.to_string().contains("unexpected key `2`"), "{e}");
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    fn load_safetensors_with(path: impl AsRef<Path>, options: &LoadOptions<'_>) -> Result<Self> {
        let file = safetensors::File::open(path.as_ref())?;
        let mut loader = file.loader()?;
        let params = Self::load_named(options.prefix, &mut loader)?;
        loader.finish_with(options)?;
        Ok(params)
    }

    /// Writes the parameters to a safetensors file under their names.
    fn save_safetensors(&self, path: impl AsRef<Path>) -> Result<()> {
        let mut tensors = Vec::new();
        self.visit(&mut |name, t| {
            tensors.push((name.to_string(), t.dtype(), t.dims(), t.to_le_bytes()?));
            Ok(())
        })?;
        safetensors::save(path.as_ref(), tensors)
    }
}

/// `f` of each element of `a`, the first error returned (what
/// `#[derive(Params)]` uses for array fields).
///
/// ```
/// use tensorfn_runtime::params::try_map_array;
/// let r: tensorfn_runtime::Result<[i32; 3]> = try_map_array(&[1, 2, 3], |x| Ok(x * 2));
/// assert_eq!(r.unwrap(), [2, 4, 6]);
/// ```
pub fn try_map_array<A, B, const N: usize>(
    a: &[A; N],
    f: impl FnMut(&A) -> Result<B>,
) -> Result<[B; N]> {
    let v = a.iter().map(f).collect::<Result<Vec<B>>>()?;
    Ok(v.try_into()
        .unwrap_or_else(|_| unreachable!("N elements were mapped")))
}

/// `prefix.name`, or `name` at the top.
///
/// ```
/// use tensorfn_runtime::params::join;
/// assert_eq!(join("", "w"), "w");
/// assert_eq!(join("h.0", "attn"), "h.0.attn");
/// ```
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

impl<D: Device, T: DType, S: Shape> Params for Tensor<D, T, S> {
    fn visit_named(
        &self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &dyn AnyTensor) -> Result<()>,
    ) -> Result<()> {
        f(prefix, self)
    }

    fn load_named(prefix: &str, loader: &mut Loader<'_>) -> Result<Self> {
        let (data, dims) = loader.take::<T, S>(prefix)?;
        // Straight to `D`: the host copy moves into a CPU tensor.
        Tensor::from_host(data, &dims)
    }

    fn zeros_like(&self) -> Result<Self> {
        Tensor::zeros_dims(self.dims())
    }

    fn collect_named<'a>(&'a self, prefix: &str, out: &mut Vec<(String, &'a dyn AnyTensor)>) {
        out.push((prefix.to_string(), self));
    }

    fn collect_named_mut<'a>(
        &'a mut self,
        prefix: &str,
        out: &mut Vec<(String, &'a mut dyn AnyTensor)>,
    ) {
        out.push((prefix.to_string(), self));
    }
}

/// The items of an array or `Vec` under `prefix.0`, `prefix.1`, ...
fn visit_items<P: Params>(
    items: &[P],
    prefix: &str,
    f: &mut dyn FnMut(&str, &dyn AnyTensor) -> Result<()>,
) -> Result<()> {
    items
        .iter()
        .enumerate()
        .try_for_each(|(i, p)| p.visit_named(&join(prefix, &i.to_string()), f))
}

/// The tensors of the items of an array or `Vec` under `prefix.0`, ...
fn collect_items<'a, P: Params>(
    items: &'a [P],
    prefix: &str,
    out: &mut Vec<(String, &'a dyn AnyTensor)>,
) {
    for (i, p) in items.iter().enumerate() {
        p.collect_named(&join(prefix, &i.to_string()), out);
    }
}

/// [`collect_items`] for writing.
fn collect_items_mut<'a, P: Params>(
    items: &'a mut [P],
    prefix: &str,
    out: &mut Vec<(String, &'a mut dyn AnyTensor)>,
) {
    for (i, p) in items.iter_mut().enumerate() {
        p.collect_named_mut(&join(prefix, &i.to_string()), out);
    }
}

impl<P: Params, const N: usize> Params for [P; N] {
    fn visit_named(
        &self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &dyn AnyTensor) -> Result<()>,
    ) -> Result<()> {
        visit_items(self, prefix, f)
    }

    fn load_named(prefix: &str, loader: &mut Loader<'_>) -> Result<Self> {
        let items = (0..N)
            .map(|i| P::load_named(&join(prefix, &i.to_string()), loader))
            .collect::<Result<Vec<P>>>()?;
        Ok(items
            .try_into()
            .unwrap_or_else(|_| unreachable!("N items were read")))
    }

    fn zeros_like(&self) -> Result<Self> {
        try_map_array(self, P::zeros_like)
    }

    fn collect_named<'a>(&'a self, prefix: &str, out: &mut Vec<(String, &'a dyn AnyTensor)>) {
        collect_items(self, prefix, out)
    }

    fn collect_named_mut<'a>(
        &'a mut self,
        prefix: &str,
        out: &mut Vec<(String, &'a mut dyn AnyTensor)>,
    ) {
        collect_items_mut(self, prefix, out)
    }
}

/// A `Vec` holds as many items as the file has: `prefix.0`, `prefix.1`, ...
/// up to the first index with no key.
impl<P: Params> Params for Vec<P> {
    fn visit_named(
        &self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &dyn AnyTensor) -> Result<()>,
    ) -> Result<()> {
        visit_items(self, prefix, f)
    }

    fn load_named(prefix: &str, loader: &mut Loader<'_>) -> Result<Self> {
        let mut items = Vec::new();
        loop {
            let name = join(prefix, &items.len().to_string());
            if !loader.has(&name) {
                break;
            }
            items.push(P::load_named(&name, loader)?);
        }
        Ok(items)
    }

    fn zeros_like(&self) -> Result<Self> {
        self.iter().map(P::zeros_like).collect()
    }

    fn collect_named<'a>(&'a self, prefix: &str, out: &mut Vec<(String, &'a dyn AnyTensor)>) {
        collect_items(self, prefix, out)
    }

    fn collect_named_mut<'a>(
        &'a mut self,
        prefix: &str,
        out: &mut Vec<(String, &'a mut dyn AnyTensor)>,
    ) {
        collect_items_mut(self, prefix, out)
    }
}

#[cfg(test)]
mod accumulate_tests {
    use crate::{shape, Cpu, Dyn, Params, Tensor};

    #[test]
    fn adds_every_dtype_and_names_the_parameter_on_a_mismatch() {
        let mut a =
            vec![Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1.0, -0.0, f32::INFINITY]).unwrap()];
        let b = vec![Tensor::<Cpu, f32, shape![3]>::from_vec(vec![0.5, 0.0, 1.0]).unwrap()];
        a.accumulate(&b).unwrap();
        assert_eq!(a[0].to_vec().unwrap(), vec![1.5, 0.0, f32::INFINITY]);

        let mut h = [Tensor::<Cpu, crate::bf16, shape![2]>::from_vec(vec![
            crate::bf16::from_f32(
                1.0
            );
            2
        ])
        .unwrap()];
        h.accumulate(&h.clone()).unwrap();
        assert_eq!(h[0].to_vec().unwrap(), vec![crate::bf16::from_f32(2.0); 2]);

        let mut i = vec![Tensor::<Cpu, i64, shape![2]>::from_vec(vec![1, 2]).unwrap()];
        i.accumulate(&i.clone()).unwrap();
        assert_eq!(i[0].to_vec().unwrap(), vec![2, 4]);

        // `Dyn` dims that differ: an `Err` naming the parameter, not a
        // broadcast.
        let mut d = vec![Tensor::<Cpu, f32, (Dyn,)>::zeros_dims(&[3]).unwrap()];
        let one = vec![Tensor::<Cpu, f32, (Dyn,)>::ones_dims(&[1]).unwrap()];
        let e = d.accumulate(&one).unwrap_err().to_string();
        assert!(
            e.contains("parameter `0`") && e.contains("[3]") && e.contains("[1]"),
            "{e}"
        );
        assert_eq!(d[0].to_vec().unwrap(), vec![0.0; 3], "unchanged");
    }

    #[test]
    fn a_shared_tensor_is_not_changed() {
        let w = Tensor::<Cpu, f64, shape![2]>::from_vec(vec![1.0, 2.0]).unwrap();
        let mut g = w.clone();
        g.accumulate(&w).unwrap();
        assert_eq!(g.to_vec().unwrap(), vec![2.0, 4.0]);
        assert_eq!(w.to_vec().unwrap(), vec![1.0, 2.0], "copy on write");
        // A transposed view accumulates element by element.
        let m =
            Tensor::<Cpu, f64, shape![2, 3]>::from_vec((0..6).map(f64::from).collect()).unwrap();
        let mut t = m.t().unwrap();
        t.accumulate(&m.t().unwrap()).unwrap();
        assert_eq!(t.to_vec().unwrap(), vec![0.0, 6.0, 2.0, 8.0, 4.0, 10.0]);
    }
}
