//! A call to a row kernel (`Op::RowKernel`): the program's PTX in a
//! static, and the CPU's loop over a row printed from the same element
//! programs ([`rust_code::emit_rust`]), one pass per statistic. A
//! [`RowStep`] folds its elementwise neighbours into the program first
//! ([`RowProgram::fuse_producer`], [`RowProgram::fuse_consumer`]), so the
//! PTX and the CPU loop both run them.

use super::*;
use crate::plan::{FusedGroup, GroupInput, RowStep};
use tensorfn_kernels::rowkernel::{RowParam, RowProgram, RowReduce};

/// Where a parameter of a (fused) row program comes from.
#[derive(Clone, Copy)]
enum Source {
    /// The rows of a tensor node.
    Rows(NodeId),
    /// A scalar node.
    Scalar(NodeId),
}

/// A fused group's inputs as row-program parameters and their sources.
fn group_params(gr: &FusedGroup) -> (Vec<RowParam>, Vec<Source>) {
    gr.inputs
        .iter()
        .map(|i| match i {
            GroupInput::Tensor(n) => (RowParam::Row, Source::Rows(*n)),
            GroupInput::Scalar { node, dtype } => (RowParam::Scalar(*dtype), Source::Scalar(*node)),
        })
        .unzip()
}

/// A stable entry name for row kernel `kernel` with program `prog`: the
/// kernel's name and a hash of its programs (equal programs share their
/// PTX).
///
/// ```
/// use tensorfn_kernels::ir::ElementwiseBuilder;
/// use tensorfn_kernels::rowkernel::{RowParam, RowProgram};
/// use tensorfn_kernels::DTypeKind::F32;
/// let mut b = ElementwiseBuilder::new();
/// let x = b.input(F32);
/// let prog = RowProgram { dtype: F32, params: vec![RowParam::Row], stats: vec![],
///     output: b.output(x)?, per_row: false };
/// let name = tensorfn_macros_impl::expand::row_kernel_name("norm", &prog);
/// assert!(name.starts_with("tf_rows_norm_"));
/// # Ok::<(), tensorfn_kernels::Error>(())
/// ```
pub fn row_kernel_name(kernel: &str, prog: &RowProgram) -> String {
    // FNV-1a over the programs' fingerprints and the reductions.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |x: u64| {
        for b in x.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    };
    for st in &prog.stats {
        mix(st.program.fingerprint());
        mix(st.reduce as u64);
    }
    mix(prog.output.fingerprint());
    mix(prog.per_row as u64);
    for p in &prog.params {
        mix(match p {
            RowParam::Row => 1000,
            RowParam::Scalar(d) => d.size_bytes() as u64 + 10 * d.is_float() as u64,
        });
    }
    let clean: String = kernel
        .trim_start_matches("r#")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("tf_rows_{clean}_{h:016x}")
}

/// The CPU body of `prog` as a function
/// `fn(rows: &[&[T]], scalars: &[f64], out: &mut [T])`: a pass over the row
/// per statistic, then one computing the result.
fn cpu_fn(prog: &RowProgram, name: &syn::Ident) -> TokenStream {
    let t = rust_code::storage_type(prog.dtype);
    let c = prog.compute_dtype();
    let ct = rust_code::compute_type(c);
    let stat = |k: usize| format_ident!("__st{}", k);
    // The parameters' values at column `__j` (rows) or for every row.
    let params = |at_col: bool| -> Vec<TokenStream> {
        let (mut r, mut s) = (0usize, 0usize);
        prog.params
            .iter()
            .map(|p| match p {
                RowParam::Row => {
                    r += 1;
                    if at_col {
                        let k = r - 1;
                        rust_code::load(quote!(__rows[#k][__j]), prog.dtype)
                    } else {
                        rust_code::literal(0.0, prog.dtype)
                    }
                }
                RowParam::Scalar(d) => {
                    s += 1;
                    let k = s - 1;
                    let ty = rust_code::compute_type(*d);
                    quote!((__s[#k] as #ty))
                }
            })
            .collect()
    };
    let mut body = TokenStream::new();
    for (k, st) in prog.stats.iter().enumerate() {
        let mut inputs = params(true);
        inputs.extend((0..k).map(|i| {
            let s = stat(i);
            quote!(#s)
        }));
        let (vals, out) = rust_code::emit_rust(&st.program, &inputs);
        let comb = st.reduce.combine_kernel(c);
        let (cb, co) = rust_code::emit_rust(&comb, &[quote!(__acc), quote!(__v)]);
        let init = rust_code::literal(st.reduce.identity(), c);
        let s = stat(k);
        let finish = if st.reduce == RowReduce::Mean {
            quote!(__acc / (__cols as #ct))
        } else {
            quote!(__acc)
        };
        body.extend(quote! {
            let #s: #ct = {
                let mut __acc: #ct = #init;
                for __j in 0..__cols {
                    let __v: #ct = { #vals #out };
                    __acc = { #cb #co };
                }
                #finish
            };
        });
    }
    let all: Vec<TokenStream> = (0..prog.stats.len())
        .map(|i| {
            let s = stat(i);
            quote!(#s)
        })
        .collect();
    let store = |at_col: bool| {
        let mut inputs = params(at_col);
        inputs.extend(all.iter().cloned());
        let (vals, out) = rust_code::emit_rust(&prog.output, &inputs);
        let stored = rust_code::store(out, prog.dtype);
        quote!({ #vals #stored })
    };
    if prog.per_row {
        let v = store(false);
        body.extend(quote!(__out[0] = #v;));
    } else {
        let v = store(true);
        body.extend(quote! {
            for __j in 0..__cols {
                __out[__j] = #v;
            }
        });
    }
    quote! {
        #[allow(unused_variables, unused_mut, unused_parens, non_snake_case, clippy::all)]
        #[inline(never)]
        fn #name(__rows: &[&[#t]], __s: &[f64], __out: &mut [#t]) {
            let __cols = __rows[0].len();
            #body
        }
    }
}

impl FnGen<'_> {
    /// The expression computing row kernel `kernel` on `args` (node `n`).
    pub(super) fn row_kernel(&self, n: NodeId, kernel: usize, args: &[NodeId]) -> TokenStream {
        let step = RowStep {
            node: n,
            producers: Vec::new(),
            consumer: None,
        };
        self.row_call(&step, kernel, args)
    }

    /// The statement binding the value of row step `r`.
    pub(super) fn row_step(&self, r: &RowStep) -> TokenStream {
        let Op::RowKernel { kernel, args } = &self.g().nodes[r.node].op else {
            unreachable!("a row step of a row kernel")
        };
        let (kernel, args) = (*kernel, args.clone());
        let out = r.out();
        let v = var(out);
        let ty = self.type_of(out);
        let value = self.row_call(r, kernel, &args);
        quote!(let #v: #ty = #value;)
    }

    /// The expression computing row step `r` of row kernel `kernel` on
    /// `args`.
    fn row_call(&self, r: &RowStep, kernel: usize, args: &[NodeId]) -> TokenStream {
        let k = self.ctx.kernels[kernel];
        let Some(mut prog) = crate::kernel::build_row(self.ctx.kernels, kernel) else {
            // Its errors stop the build.
            return quote!(::core::unreachable!());
        };
        let mut sources: Vec<Source> = args
            .iter()
            .zip(&k.rows)
            .map(|(&a, &row)| {
                if row {
                    Source::Rows(a)
                } else {
                    Source::Scalar(a)
                }
            })
            .collect();
        // Last argument first: the earlier ones keep their places.
        let mut producers: Vec<&(usize, FusedGroup)> = r.producers.iter().collect();
        producers.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        let mut fused = Ok(());
        for (i, gr) in producers {
            let (params, srcs) = group_params(gr);
            fused = gr
                .kernel
                .clone()
                .and_then(|p| prog.fuse_producer(*i, &p, &params))
                .map(|p| {
                    prog = p;
                    sources.splice(*i..=*i, srcs);
                });
            if fused.is_err() {
                break;
            }
        }
        if let (Ok(()), Some(gr)) = (&fused, &r.consumer) {
            let at = gr
                .inputs
                .iter()
                .position(|i| *i == GroupInput::Tensor(r.node))
                .expect("the consumer reads the row kernel");
            let mut others = gr.clone();
            others.inputs.remove(at);
            let (params, srcs) = group_params(&others);
            fused = gr
                .kernel
                .clone()
                .and_then(|c| prog.fuse_consumer(&c, at, &params))
                .map(|p| {
                    prog = p;
                    sources.extend(srcs);
                });
        }
        if let Err(e) = fused {
            let msg = format!("internal error of `tensor_fn!`: row kernel `{}` could not take in its elementwise neighbours: {e}", k.name);
            return quote!(::core::compile_error!(#msg));
        }
        let t = self.tty(r.out()).clone();
        let name = row_kernel_name(&k.name.to_string(), &prog);
        let ptx = if t.device == Device::Cpu {
            String::new()
        } else {
            match tensorfn_kernels::ptx::row_kernel(&prog, &name) {
                Ok(p) => p,
                Err(e) => {
                    let msg = format!("internal error of `tensor_fn!`: the PTX emitter rejected row kernel `{}`: {e}", k.name);
                    return quote!(::core::compile_error!(#msg));
                }
            }
        };
        let per_row = prog.per_row;
        let rows: Vec<TokenStream> = sources
            .iter()
            .filter_map(|s| match s {
                Source::Rows(a) => {
                    let r = self.reference(*a);
                    Some(quote!(::tensorfn::__private::row_arg(#r)))
                }
                Source::Scalar(_) => None,
            })
            .collect();
        let scalars: Vec<TokenStream> = sources
            .iter()
            .filter_map(|s| match s {
                Source::Scalar(a) => Some(self.scalar_f64(*a)),
                Source::Rows(_) => None,
            })
            .collect();
        let dims = dims_array(&t.dims, self.symbols());
        let f = format_ident!("__tf_row_cpu");
        let cpu = cpu_fn(&prog, &f);
        quote!({
            static __TF_ROW_KERNEL: ::tensorfn::__private::RowKernelDef = ::tensorfn::__private::RowKernelDef {
                name: #name,
                ptx: #ptx,
                per_row: #per_row,
            };
            #cpu
            ::tensorfn::__private::row_kernel(
                &[#(#rows),*],
                &[#(#scalars),*],
                &#dims,
                &__TF_ROW_KERNEL,
                &#f,
            )?
        })
    }
}
