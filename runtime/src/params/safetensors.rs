//! Reading and writing safetensors files: the keys a load takes, checked
//! against the types, and the ones it leaves, reported.

use super::mmap::Mapped;
use crate::dtype::{DType, DTypeKind};
use crate::{Error, Result, Shape};
use ::safetensors::{tensor::TensorView, Dtype, SafeTensors};
use std::collections::BTreeSet;
use std::path::Path;

/// An open file (memory-mapped).
pub(crate) struct File {
    path: String,
    mapped: Mapped,
}

impl File {
    pub(crate) fn open(path: &Path) -> Result<File> {
        Ok(File {
            path: path.display().to_string(),
            mapped: Mapped::open(path)?,
        })
    }

    /// A loader over the file's tensors; a file that is not safetensors
    /// (or is truncated) is an `Err` naming it.
    pub(crate) fn loader(&self) -> Result<Loader<'_>> {
        let file = SafeTensors::deserialize(self.mapped.bytes())
            .map_err(|e| Error::Load(format!("{}: not a safetensors file ({e})", self.path)))?;
        Ok(Loader {
            path: &self.path,
            file,
            taken: BTreeSet::new(),
        })
    }
}

/// The tensors of a safetensors file as a load takes them by name.
///
/// ```
/// use tensorfn_runtime::{Cpu, Params, Tensor, shape};
/// let dir = std::env::temp_dir().join(format!("tf_loader_doc_{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("two.safetensors");
/// vec![Tensor::<Cpu, f32, shape![1]>::ones().unwrap(); 2].save_safetensors(&path).unwrap();
/// // Reading one tensor of two leaves a key: an error naming it.
/// let e = <[Tensor<Cpu, f32, shape![1]>; 1]>::load_safetensors(&path).unwrap_err();
/// assert!(e.to_string().contains("unexpected key `1`"), "{e}");
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub struct Loader<'a> {
    path: &'a str,
    file: SafeTensors<'a>,
    taken: BTreeSet<String>,
}

/// Where a load reads in a file written by another library
/// ([`Params::load_safetensors_with`](super::Params::load_safetensors_with)).
///
/// ```
/// use tensorfn_runtime::LoadOptions;
/// let hf = LoadOptions { prefix: "transformer", ignore: &["h.*.attn.bias", "lm_head.weight"] };
/// assert!(hf.ignores("transformer.h.11.attn.bias"));
/// assert!(hf.ignores("lm_head.weight"));
/// assert!(!hf.ignores("transformer.h.0.attn.c_attn.bias"));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions<'a> {
    /// The parameters' names are read as `prefix.name` (none if empty);
    /// keys outside the prefix are left.
    pub prefix: &'a str,
    /// Keys left without an error, relative to the prefix (or whole, for a
    /// key outside it); `*` stands for any run of characters
    /// (`h.*.attn.bias`).
    pub ignore: &'a [&'a str],
}

impl LoadOptions<'_> {
    /// True if `key` is one the load leaves without an error.
    pub fn ignores(&self, key: &str) -> bool {
        let relative = match self.prefix {
            "" => key,
            p => key
                .strip_prefix(p)
                .and_then(|k| k.strip_prefix('.'))
                .unwrap_or(key),
        };
        self.ignore
            .iter()
            .any(|pattern| wildcard(pattern, relative))
    }

    /// True if a key no parameter took is an error: inside the prefix and
    /// not ignored.
    fn checks(&self, key: &str) -> bool {
        let inside = self.prefix.is_empty()
            || key
                .strip_prefix(self.prefix)
                .is_some_and(|k| k.starts_with('.'));
        inside && !self.ignores(key)
    }
}

/// True if `text` matches `pattern`, where `*` matches any run of
/// characters.
fn wildcard(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, rest)) => {
            let Some(text) = text.strip_prefix(head) else {
                return false;
            };
            (0..=text.len())
                .filter(|&i| text.is_char_boundary(i))
                .any(|i| wildcard(rest, &text[i..]))
        }
    }
}

/// The safetensors dtype of a tensorfn dtype.
fn dtype_of(kind: DTypeKind) -> Dtype {
    match kind {
        DTypeKind::F32 => Dtype::F32,
        DTypeKind::F64 => Dtype::F64,
        DTypeKind::F16 => Dtype::F16,
        DTypeKind::BF16 => Dtype::BF16,
        DTypeKind::I32 => Dtype::I32,
        DTypeKind::I64 => Dtype::I64,
        DTypeKind::U8 => Dtype::U8,
        DTypeKind::Bool => Dtype::BOOL,
    }
}

/// `[784, _]`: a shape type's dims, `_` where it takes any size.
fn fmt_type<S: Shape>() -> String {
    let dims: Vec<String> = S::DIMS[..S::RANK]
        .iter()
        .map(|d| d.map_or("_".to_string(), |d| d.to_string()))
        .collect();
    format!("[{}]", dims.join(", "))
}

impl Loader<'_> {
    /// True if the file has `name` or keys below it (`name.0...`).
    pub fn has(&self, name: &str) -> bool {
        let below = format!("{name}.");
        self.file
            .names()
            .iter()
            .any(|k| *k == name || k.starts_with(&below))
    }

    /// The elements and dims of tensor `name`, checked against `T` and `S`.
    pub fn take<T: DType, S: Shape>(&mut self, name: &str) -> Result<(Vec<T>, Vec<usize>)> {
        let view = self.file.tensor(name).map_err(|_| {
            Error::Load(format!(
                "{}: missing key `{name}` (a {} {} tensor)",
                self.path,
                T::KIND.name(),
                fmt_type::<S>()
            ))
        })?;
        let want = dtype_of(T::KIND);
        if view.dtype() != want {
            return Err(Error::DType {
                op: format!("loading `{name}` from {}", self.path),
                expected: format!("{want:?}"),
                found: format!(
                    "{:?}; cast the file's tensors or load the struct as that dtype",
                    view.dtype()
                ),
            });
        }
        let dims = view.shape().to_vec();
        S::check(&dims).map_err(|_| {
            Error::shape(
                format!("loading `{name}` from {}", self.path),
                fmt_type::<S>(),
                format!("{dims:?}"),
            )
        })?;
        let data = from_le_bytes::<T>(name, view.data())?;
        self.taken.insert(name.to_string());
        Ok((data, dims))
    }

    /// The elements of tensor `name`, checked against dtype `T` and `dims`
    /// (for tensors whose shape is known only at run time: optimizer state).
    pub(crate) fn take_dims<T: DType>(&mut self, name: &str, dims: &[usize]) -> Result<Vec<T>> {
        let view = self.file.tensor(name).map_err(|_| {
            Error::Load(format!(
                "{}: missing key `{name}` (a {} {dims:?} tensor)",
                self.path,
                T::KIND.name(),
            ))
        })?;
        let want = dtype_of(T::KIND);
        if view.dtype() != want || view.shape() != dims {
            return Err(Error::shape(
                format!("loading `{name}` from {}", self.path),
                format!("a {want:?} {dims:?} tensor"),
                format!("a {:?} {:?} tensor", view.dtype(), view.shape()),
            ));
        }
        let data = from_le_bytes::<T>(name, view.data())?;
        self.taken.insert(name.to_string());
        Ok(data)
    }

    /// `Err` naming the keys no parameter took.
    pub fn finish(self) -> Result<()> {
        self.finish_with(&LoadOptions::default())
    }

    /// `Err` naming the keys no parameter took, but those outside
    /// `options.prefix` and those `options.ignore` names.
    pub fn finish_with(self, options: &LoadOptions<'_>) -> Result<()> {
        let mut left: Vec<&str> = self
            .file
            .names()
            .into_iter()
            .filter(|k| !self.taken.contains(*k) && options.checks(k))
            .collect();
        left.sort_unstable();
        match left.as_slice() {
            [] => Ok(()),
            keys => {
                let list: Vec<String> = keys.iter().take(8).map(|k| format!("`{k}`")).collect();
                let more = match keys.len() > 8 {
                    true => format!(" and {} more", keys.len() - 8),
                    false => String::new(),
                };
                let word = if keys.len() == 1 { "key" } else { "keys" };
                Err(Error::Load(format!(
                    "{}: unexpected {word} {}{more}: no parameter has that name (rename a field with `#[params(rename = \"..\")]`)",
                    self.path,
                    list.join(", ")
                )))
            }
        }
    }
}

/// Elements as the little-endian bytes a file stores.
pub(crate) fn le_bytes<T: DType>(data: &[T]) -> Vec<u8> {
    let size = std::mem::size_of::<T>();
    let mut out = Vec::with_capacity(std::mem::size_of_val(data));
    for v in data {
        // SAFETY: every dtype is a plain value of `size` bytes (`bool` is
        // one byte, 0 or 1, as safetensors stores it).
        let bytes = unsafe { std::slice::from_raw_parts(v as *const T as *const u8, size) };
        if cfg!(target_endian = "little") {
            out.extend_from_slice(bytes);
        } else {
            out.extend(bytes.iter().rev());
        }
    }
    out
}

/// Elements from a file's little-endian bytes; a `bool` other than 0 or 1
/// is an error (it would not be a valid `bool`).
fn from_le_bytes<T: DType>(name: &str, bytes: &[u8]) -> Result<Vec<T>> {
    let size = std::mem::size_of::<T>();
    if T::KIND == DTypeKind::Bool {
        if let Some(b) = bytes.iter().find(|&&b| b > 1) {
            return Err(Error::Load(format!(
                "`{name}`: a BOOL tensor holds the byte {b}, not 0 or 1"
            )));
        }
    }
    let mut out = vec![T::default(); bytes.len() / size];
    for (v, chunk) in out.iter_mut().zip(bytes.chunks_exact(size)) {
        // SAFETY: `size` bytes into a `T` whose every bit pattern is valid
        // (numbers) or was checked above (`bool`).
        let dst = unsafe { std::slice::from_raw_parts_mut(v as *mut T as *mut u8, size) };
        if cfg!(target_endian = "little") {
            dst.copy_from_slice(chunk);
        } else {
            dst.iter_mut()
                .zip(chunk.iter().rev())
                .for_each(|(d, s)| *d = *s);
        }
    }
    Ok(out)
}

/// Writes `(name, dtype, dims, bytes)` tensors to `path`.
pub(crate) fn save(
    path: &Path,
    tensors: Vec<(String, DTypeKind, Vec<usize>, Vec<u8>)>,
) -> Result<()> {
    let io = |e: &dyn std::fmt::Display| Error::Io(format!("{}: {e}", path.display()));
    let mut names = BTreeSet::new();
    let mut views = Vec::with_capacity(tensors.len());
    for (name, kind, dims, bytes) in &tensors {
        if !names.insert(name.as_str()) {
            return Err(Error::Load(format!(
                "{}: two parameters are named `{name}`",
                path.display()
            )));
        }
        let view = TensorView::new(dtype_of(*kind), dims.clone(), bytes).map_err(|e| io(&e))?;
        views.push((name.as_str(), view));
    }
    ::safetensors::serialize_to_file(views, None, path).map_err(|e| io(&e))
}
