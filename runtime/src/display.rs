//! `Display` for tensors, in the style of PyTorch's `print(tensor)`:
//! 4 decimals (or `1.` for integral floats, scientific notation for wide
//! ranges), aligned columns, rows wrapped at 80 characters, `...` past
//! 1000 elements, and the device and dtype when they are not the default.

use crate::device::{Device, DeviceKind};
use crate::dtype::{DType, DTypeKind};
use crate::shape::Shape;
use crate::tensor::Tensor;
use std::fmt;

/// PyTorch's print options: `precision`, `threshold`, `edgeitems`, `linewidth`.
const PRECISION: usize = 4;
const THRESHOLD: usize = 1000;
const EDGE_ITEMS: usize = 3;
const LINE_WIDTH: usize = 80;
const PREFIX: &str = "tensor(";

/// An element as the formatter sees it.
#[derive(Clone, Copy)]
enum Value {
    Float(f64),
    Int(i64),
    Bool(bool),
}

fn value<T: DType>(v: T) -> Value {
    match T::KIND {
        DTypeKind::Bool => Value::Bool(v.to_i64() != 0),
        k if k.is_float() => Value::Float(v.to_f64()),
        _ => Value::Int(v.to_i64()),
    }
}

fn non_finite(v: f64) -> Option<&'static str> {
    if v.is_nan() {
        Some("nan")
    } else if v.is_infinite() {
        Some(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        None
    }
}

/// `v` with `digits` decimals in scientific notation, as Python writes
/// it (`1.2346e+03`).
fn scientific(v: f64, digits: usize) -> String {
    if let Some(s) = non_finite(v) {
        return s.to_string();
    }
    let s = format!("{v:.digits$e}");
    let (mantissa, exp) = s.split_once('e').expect("`e` formatting has an exponent");
    let exp: i32 = exp.parse().expect("`e` formatting has an integer exponent");
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

/// How every element of one tensor is written, decided from the elements
/// shown (PyTorch's `_Formatter`).
struct Formatter {
    int_mode: bool,
    sci_mode: bool,
    width: usize,
}

impl Formatter {
    fn new(shown: &[Value]) -> Self {
        let mut f = Formatter {
            int_mode: true,
            sci_mode: false,
            width: 1,
        };
        let floats: Vec<f64> = shown
            .iter()
            .filter_map(|v| match v {
                Value::Float(x) if x.is_finite() && *x != 0.0 => Some(*x),
                Value::Float(_) => None,
                other => {
                    f.width = f.width.max(f.plain(*other).len());
                    None
                }
            })
            .collect();
        if floats.is_empty() {
            return f;
        }
        let max = floats.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let min = floats.iter().fold(f64::INFINITY, |m, v| m.min(v.abs()));
        f.int_mode = floats.iter().all(|v| v.ceil() == *v);
        let wide = max / min > 1000.0 || max > 1.0e8;
        f.sci_mode = if f.int_mode {
            wide
        } else {
            wide || min < 1.0e-4
        };
        for &v in &floats {
            let len = if f.sci_mode {
                scientific(v, PRECISION).len()
            } else if f.int_mode {
                format!("{v:.0}").len() + 1
            } else {
                format!("{v:.PRECISION$}").len()
            };
            f.width = f.width.max(len);
        }
        f
    }

    /// The element without padding.
    fn plain(&self, v: Value) -> String {
        match v {
            Value::Bool(b) => if b { "True" } else { "False" }.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(x) if self.sci_mode => scientific(x, PRECISION),
            Value::Float(x) => match non_finite(x) {
                Some(s) => s.to_string(),
                None if self.int_mode => format!("{x:.0}."),
                None => format!("{x:.PRECISION$}"),
            },
        }
    }

    /// The element right-aligned to the common width.
    fn format(&self, v: Value) -> String {
        format!("{:>width$}", self.plain(v), width = self.width)
    }
}

/// The positions printed along a dim of `size`: all, or the edges.
fn shown_positions(size: usize, summarize: bool) -> Vec<Option<usize>> {
    if summarize && size > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS)
            .map(Some)
            .chain([None])
            .chain((size - EDGE_ITEMS..size).map(Some))
            .collect()
    } else {
        (0..size).map(Some).collect()
    }
}

/// Writes nested lists of row-major `values` of `dims`.
struct Printer<'a> {
    values: &'a [Value],
    dims: &'a [usize],
    strides: Vec<usize>,
    summarize: bool,
}

impl Printer<'_> {
    fn shown(&self, dim: usize, base: usize, out: &mut Vec<Value>) {
        if dim == self.dims.len() {
            out.push(self.values[base]);
            return;
        }
        for i in shown_positions(self.dims[dim], self.summarize)
            .into_iter()
            .flatten()
        {
            self.shown(dim + 1, base + i * self.strides[dim], out);
        }
    }

    fn write(&self, f: &Formatter, dim: usize, base: usize, indent: usize) -> String {
        let rank = self.dims.len();
        if dim == rank {
            return f.format(self.values[base]);
        }
        let positions = shown_positions(self.dims[dim], self.summarize);
        if dim + 1 == rank {
            let items: Vec<String> = positions
                .iter()
                .map(|p| match p {
                    Some(i) => f.format(self.values[base + i * self.strides[dim]]),
                    None => " ...".to_string(),
                })
                .collect();
            let per_line = ((LINE_WIDTH.saturating_sub(indent)) / (f.width + 2)).max(1);
            let lines: Vec<String> = items.chunks(per_line).map(|c| c.join(", ")).collect();
            let sep = format!(",\n{}", " ".repeat(indent + 1));
            return format!("[{}]", lines.join(&sep));
        }
        let parts: Vec<String> = positions
            .iter()
            .map(|p| match p {
                Some(i) => self.write(f, dim + 1, base + i * self.strides[dim], indent + 1),
                None => "...".to_string(),
            })
            .collect();
        let sep = format!(",{}{}", "\n".repeat(rank - dim - 1), " ".repeat(indent + 1));
        format!("[{}]", parts.join(&sep))
    }
}

/// PyTorch's `_add_suffixes`: `, suffix` on the last line, or on a new
/// line when it would pass the line width.
fn add_suffixes(body: String, suffixes: &[String]) -> String {
    let mut out = body;
    let mut last = match out.rfind('\n') {
        Some(p) => out.len() - p + 1,
        None => out.len() + 2,
    };
    let indent = PREFIX.len();
    for s in suffixes {
        if last + s.len() + 2 > LINE_WIDTH {
            out.push_str(&format!(",\n{}{s}", " ".repeat(indent)));
            last = indent + s.len();
        } else {
            out.push_str(&format!(", {s}"));
            last += s.len() + 2;
        }
    }
    out.push(')');
    out
}

/// Writes a tensor like PyTorch's `print`.
///
/// ```
/// use tensorfn_runtime::{Tensor, Cpu, f16, shape};
/// let x = Tensor::<Cpu, f32, shape![2, 2]>::from_vec(vec![1.0, -2.5, 3.0, 4.0]).unwrap();
/// assert_eq!(x.to_string(), "tensor([[ 1.0000, -2.5000],\n        [ 3.0000,  4.0000]])");
/// let i = Tensor::<Cpu, i32, shape![3]>::from_vec(vec![1, 20, 300]).unwrap();
/// assert_eq!(i.to_string(), "tensor([  1,  20, 300], dtype=i32)");
/// let h = Tensor::<Cpu, f16, shape![2]>::ones().unwrap();
/// assert_eq!(h.to_string(), "tensor([1., 1.], dtype=f16)");
/// ```
impl<D: Device, T: DType, S: Shape> fmt::Display for Tensor<D, T, S> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims = self.dims();
        let mut suffixes = Vec::new();
        if let DeviceKind::Cuda(_) = D::KIND {
            suffixes.push(format!("device={}", D::KIND));
        }
        let numel = self.numel();
        let default_dtype = matches!(T::KIND, DTypeKind::F32 | DTypeKind::I64 | DTypeKind::Bool);
        let data = match self.to_vec() {
            Ok(v) => v,
            Err(e) => {
                suffixes.push(format!("dtype={}", T::KIND.name()));
                let body = format!("{PREFIX}<the elements could not be read: {e}>");
                return out.write_str(&add_suffixes(body, &suffixes));
            }
        };
        if numel == 0 {
            if dims.len() != 1 {
                let inner: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
                suffixes.push(format!("size=({})", inner.join(", ")));
            }
            if T::KIND != DTypeKind::F32 {
                suffixes.push(format!("dtype={}", T::KIND.name()));
            }
            return out.write_str(&add_suffixes(format!("{PREFIX}[]"), &suffixes));
        }
        if !default_dtype {
            suffixes.push(format!("dtype={}", T::KIND.name()));
        }
        let values: Vec<Value> = data.into_iter().map(value).collect();
        let printer = Printer {
            values: &values,
            dims,
            strides: crate::layout::contiguous_strides(dims),
            summarize: numel > THRESHOLD,
        };
        let mut shown = Vec::new();
        printer.shown(0, 0, &mut shown);
        let formatter = Formatter::new(&shown);
        let body = format!("{PREFIX}{}", printer.write(&formatter, 0, 0, PREFIX.len()));
        out.write_str(&add_suffixes(body, &suffixes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{shape, Cpu};

    fn show<T: DType, S: Shape>(x: Tensor<Cpu, T, S>) -> String {
        x.to_string()
    }

    #[test]
    fn floats_like_pytorch() {
        let x = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1.5, -0.25, 100.0]).unwrap();
        assert_eq!(show(x), "tensor([  1.5000,  -0.2500, 100.0000])");
        let x = Tensor::<Cpu, f32, shape![3]>::from_vec(vec![1.0, 2.0, 3.0]).unwrap();
        assert_eq!(show(x), "tensor([1., 2., 3.])");
        let x = Tensor::<Cpu, f64, shape![2]>::from_vec(vec![1e-5, 1.0]).unwrap();
        assert_eq!(show(x), "tensor([1.0000e-05, 1.0000e+00], dtype=f64)");
        let x =
            Tensor::<Cpu, f32, shape![3]>::from_vec(vec![f32::NAN, f32::INFINITY, 1.5]).unwrap();
        assert_eq!(show(x), "tensor([   nan,    inf, 1.5000])");
        let x = Tensor::<Cpu, f32, shape![]>::full(2.0).unwrap();
        assert_eq!(show(x), "tensor(2.)");
    }

    #[test]
    fn integers_bools_and_empty() {
        let x = Tensor::<Cpu, i64, shape![2, 2]>::from_vec(vec![1, -20, 3, 4]).unwrap();
        assert_eq!(show(x), "tensor([[  1, -20],\n        [  3,   4]])");
        let x = Tensor::<Cpu, bool, shape![2]>::from_vec(vec![true, false]).unwrap();
        assert_eq!(show(x), "tensor([ True, False])");
        let x = Tensor::<Cpu, f32, shape![0]>::zeros().unwrap();
        assert_eq!(show(x), "tensor([])");
        let x = Tensor::<Cpu, u8, shape![2, 0]>::zeros().unwrap();
        assert_eq!(show(x), "tensor([], size=(2, 0), dtype=u8)");
    }

    #[test]
    fn long_rows_wrap_and_large_tensors_summarise() {
        let x = Tensor::<Cpu, f32, shape![10]>::arange(0.5, 1.0).unwrap();
        assert_eq!(
            show(x),
            "tensor([0.5000, 1.5000, 2.5000, 3.5000, 4.5000, 5.5000, 6.5000, 7.5000, 8.5000,\n        9.5000])"
        );
        let x = Tensor::<Cpu, i64, shape![2000]>::arange(0, 1).unwrap();
        assert_eq!(
            show(x),
            "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])"
        );
        let x = Tensor::<Cpu, f32, shape![40, 40]>::arange(1.0, 0.5).unwrap();
        let s = show(x);
        assert!(
            s.starts_with("tensor([[  1.0000,   1.5000,   2.0000,  ...,  19.5000,  20.0000,  20.5000],\n        [ 21.0000,"),
            "{s}"
        );
        assert!(s.contains("\n        ...,\n"), "{s}");
        assert!(
            s.ends_with("[781.0000, 781.5000, 782.0000,  ..., 799.5000, 800.0000, 800.5000]])"),
            "{s}"
        );
        // A range wider than 1000 switches to scientific notation.
        let x = Tensor::<Cpu, f32, shape![40, 40]>::arange(0.0, 1.0).unwrap();
        assert!(show(x).starts_with("tensor([[0.0000e+00, 1.0000e+00,"));
    }

    #[test]
    fn three_dims_separate_blocks_with_blank_lines() {
        let x = Tensor::<Cpu, i64, shape![2, 1, 2]>::arange(0, 1).unwrap();
        assert_eq!(show(x), "tensor([[[0, 1]],\n\n        [[2, 3]]])");
    }
}
