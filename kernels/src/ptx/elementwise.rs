//! The three entries of an elementwise kernel (see [`abi`](crate::abi)):
//! `NAME_contig`, vectorised when every pointer is 16-byte aligned,
//! `NAME_strided`, which walks the packed dims and strides, and
//! `NAME_cols`, the contiguous entry with some inputs repeating every row
//! of `cols` elements. All are grid-stride loops with 64-bit indices.

use super::body::{Body, Class};
use super::inst::emit_program;
use super::memory::{load, load_vector, store, store_vector};
use super::Target;
use crate::abi::MAX_RANK;
use crate::prim::{Op, Program};
use std::fmt::Write;
use tensorfn_core::DTypeKind;

/// Which inputs the program reads (unused ones are never loaded).
pub(super) fn used_inputs(prog: &Program) -> Vec<bool> {
    let live = prog.live();
    let mut used = vec![false; prog.params.len()];
    for (i, inst) in prog.insts.iter().enumerate() {
        if let Op::Param(n) = inst.op {
            used[n as usize] |= live[i];
        }
    }
    used
}

/// The parameters an entry takes after `n`.
enum Extra {
    /// None (`NAME_contig`).
    None,
    /// The strided entry's `meta` of this many bytes.
    Meta(usize),
    /// `cols` and `mask` (`NAME_cols`).
    Cols,
}

/// `.param` list: `out`, each input, `n` and the entry's `extra`.
fn params(inputs: usize, extra: Extra) -> String {
    let mut p = vec![".param .u64 p_out".to_string()];
    for i in 0..inputs {
        p.push(format!(".param .u64 p_in{i}"));
    }
    p.push(".param .u64 p_n".to_string());
    match extra {
        Extra::None => {}
        Extra::Meta(bytes) => p.push(format!(".param .align 8 .b8 p_meta[{bytes}]")),
        Extra::Cols => {
            p.push(".param .u64 p_cols".to_string());
            p.push(".param .u64 p_mask".to_string());
        }
    }
    let mut s = String::from("(\n");
    for (i, line) in p.iter().enumerate() {
        let sep = if i + 1 < p.len() { "," } else { "" };
        let _ = writeln!(s, "\t{line}{sep}");
    }
    s.push(')');
    s
}

/// Global pointers of `out` and each used input; `n`; the first index and
/// the grid stride.
struct Prologue {
    out: String,
    ins: Vec<Option<String>>,
    n: String,
    first: String,
    stride: String,
}

fn prologue(body: &mut Body, used: &[bool]) -> Prologue {
    let global = |body: &mut Body, param: &str| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [{param}]"));
        body.op(format!("cvta.to.global.u64 {r}, {r}"));
        r
    };
    let out = global(body, "p_out");
    let ins = used
        .iter()
        .enumerate()
        .map(|(i, &u)| u.then(|| global(body, &format!("p_in{i}"))))
        .collect();
    let n = body.reg(Class::B64);
    body.op(format!("ld.param.u64 {n}, [p_n]"));
    let (first, stride) = grid_stride(body);
    Prologue {
        out,
        ins,
        n,
        first,
        stride,
    }
}

/// The registers a strided entry walks a flat index's coordinates with:
/// the `MAX_RANK` dims, the predicates "dim `d` is 1" for `d` in
/// `1..MAX_RANK` (those dims are skipped), and the predicate that every
/// index fits in 32 bits (a 32-bit division then stands in for the 64-bit
/// one).
pub(crate) struct Coords<'a> {
    pub(crate) dims: &'a [String],
    pub(crate) unit: &'a [String],
    pub(crate) small: &'a str,
}

impl Coords<'_> {
    /// Emits the walk over the coordinates of the flat index in `rem`
    /// (consumed), innermost dim first, adding each coordinate times
    /// `strides[d]` to `offset` for every `(offset, strides)` of `terms`;
    /// `prefix` starts the labels' names.
    pub(crate) fn emit(
        &self,
        body: &mut Body,
        prefix: &str,
        rem: &str,
        terms: &[(&String, &Vec<String>)],
    ) {
        let Coords { dims, unit, small } = *self;
        let (q, c) = (body.reg(Class::B64), body.reg(Class::B64));
        let (q32, r32, d32) = (
            body.reg(Class::B32),
            body.reg(Class::B32),
            body.reg(Class::B32),
        );
        for d in (0..MAX_RANK).rev() {
            let skip = body.label(&format!("{prefix}dim_skip"));
            if d > 0 {
                body.op(format!("@{} bra {skip}", unit[d - 1]));
                let div64 = body.label(&format!("{prefix}div64"));
                let divided = body.label(&format!("{prefix}divided"));
                body.op(format!("@!{small} bra {div64}"));
                body.op(format!("cvt.u32.u64 {r32}, {rem}"));
                body.op(format!("cvt.u32.u64 {d32}, {}", dims[d]));
                body.op(format!("div.u32 {q32}, {r32}, {d32}"));
                body.op(format!("cvt.u64.u32 {q}, {q32}"));
                body.op(format!("bra.uni {divided}"));
                body.place(&div64);
                body.op(format!("div.u64 {q}, {rem}, {}", dims[d]));
                body.place(&divided);
                body.op(format!("mul.lo.u64 {c}, {q}, {}", dims[d]));
                body.op(format!("sub.u64 {c}, {rem}, {c}"));
                body.op(format!("mov.u64 {rem}, {q}"));
            } else {
                body.op(format!("mov.u64 {c}, {rem}"));
            }
            for (off, strides) in terms {
                body.op(format!("mad.lo.u64 {off}, {c}, {}, {off}", strides[d]));
            }
            if d > 0 {
                body.place(&skip);
            }
        }
    }

    /// [`Self::emit`] in 32-bit arithmetic, for walks whose flat index
    /// (`rem`, a 32-bit register) and offsets (32-bit registers in
    /// `terms`, with the 64-bit strides) all fit in 32 bits: each dim
    /// costs one 32-bit division and one 32-bit multiply-add per operand.
    pub(crate) fn emit_narrow(
        &self,
        body: &mut Body,
        prefix: &str,
        rem: &str,
        terms: &[(&String, &Vec<String>)],
    ) {
        let Coords { dims, unit, .. } = *self;
        let (q, c, d32, s32) = (
            body.reg(Class::B32),
            body.reg(Class::B32),
            body.reg(Class::B32),
            body.reg(Class::B32),
        );
        for d in (0..MAX_RANK).rev() {
            let skip = body.label(&format!("{prefix}dim_skip"));
            if d > 0 {
                body.op(format!("@{} bra {skip}", unit[d - 1]));
                body.op(format!("cvt.u32.u64 {d32}, {}", dims[d]));
                body.op(format!("div.u32 {q}, {rem}, {d32}"));
                body.op(format!("mul.lo.u32 {c}, {q}, {d32}"));
                body.op(format!("sub.u32 {c}, {rem}, {c}"));
                body.op(format!("mov.u32 {rem}, {q}"));
            } else {
                body.op(format!("mov.u32 {c}, {rem}"));
            }
            for (off, strides) in terms {
                body.op(format!("cvt.u32.u64 {s32}, {}", strides[d]));
                body.op(format!("mad.lo.u32 {off}, {c}, {s32}, {off}"));
            }
            if d > 0 {
                body.place(&skip);
            }
        }
    }
}

/// `ctaid.x * ntid.x + tid.x` and `nctaid.x * ntid.x`, in 64 bits.
pub(crate) fn grid_stride(body: &mut Body) -> (String, String) {
    let ctaid = body.reg(Class::B32);
    let ntid = body.reg(Class::B32);
    let tid = body.reg(Class::B32);
    let nctaid = body.reg(Class::B32);
    body.op(format!("mov.u32 {ctaid}, %ctaid.x"));
    body.op(format!("mov.u32 {ntid}, %ntid.x"));
    body.op(format!("mov.u32 {tid}, %tid.x"));
    body.op(format!("mov.u32 {nctaid}, %nctaid.x"));
    let first = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {first}, {ctaid}, {ntid}"));
    let t64 = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {t64}, {tid}"));
    body.op(format!("add.u64 {first}, {first}, {t64}"));
    let stride = body.reg(Class::B64);
    body.op(format!("mul.wide.u32 {stride}, {nctaid}, {ntid}"));
    (first, stride)
}

/// Elements per thread and iteration of the vector loop: 16 bytes of the
/// widest element.
fn vector_width(inputs: &[DTypeKind], used: &[bool], output: DTypeKind) -> usize {
    let widest = inputs
        .iter()
        .zip(used)
        .filter(|&(_, &u)| u)
        .map(|(d, _)| d.size_bytes())
        .chain(std::iter::once(output.size_bytes()))
        .max()
        .unwrap_or(1);
    16 / widest
}

/// The `NAME_contig` entry.
pub(crate) fn contig_entry(
    name: &str,
    prog: &Program,
    inputs: &[DTypeKind],
    output: DTypeKind,
    target: Target,
) -> String {
    vector_entry(name, prog, inputs, output, target, false)
}

/// The `NAME_cols` entry: the output and the full-size inputs contiguous,
/// the inputs whose bit is set in `p_mask` of length `p_cols`, repeating
/// every `p_cols` elements (a per-channel operand of a channels-last
/// tensor). It is the contiguous entry with each input's offset chosen per
/// access between the element's index `i` and its column `i mod cols`; the
/// column is carried from step to step by an addition, so the loops divide
/// only once per thread. Vectors need `cols` to be a multiple of the
/// vector width as well as aligned pointers.
pub(crate) fn cols_entry(
    name: &str,
    prog: &Program,
    inputs: &[DTypeKind],
    output: DTypeKind,
    target: Target,
) -> String {
    vector_entry(name, prog, inputs, output, target, true)
}

/// The column bookkeeping of [`cols_entry`]: the row length, each used
/// input's "repeats every row" predicate, and the current column with its
/// step.
struct Cols {
    len: String,
    per_col: Vec<Option<String>>,
    col: String,
    step: String,
}

impl Cols {
    fn new(body: &mut Body, used: &[bool]) -> Cols {
        let len = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {len}, [p_cols]"));
        let mask = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {mask}, [p_mask]"));
        let bit = body.reg(Class::B64);
        let per_col = used
            .iter()
            .enumerate()
            .map(|(k, &u)| {
                u.then(|| {
                    let p = body.reg(Class::Pred);
                    body.op(format!("and.b64 {bit}, {mask}, {}", 1u64 << k));
                    body.op(format!("setp.ne.u64 {p}, {bit}, 0"));
                    p
                })
            })
            .collect();
        let (col, step) = (body.reg(Class::B64), body.reg(Class::B64));
        Cols {
            len,
            per_col,
            col,
            step,
        }
    }

    /// Starts a loop at element `first` stepping by `stride` elements.
    fn start(&self, body: &mut Body, first: &str, stride: &str) {
        body.op(format!("rem.u64 {}, {first}, {}", self.col, self.len));
        body.op(format!("rem.u64 {}, {stride}, {}", self.step, self.len));
    }

    /// `base + size * (input k repeats ? col : index)`.
    fn address(&self, body: &mut Body, k: usize, index: &str, base: &str, size: usize) -> String {
        let p = self.per_col[k].as_ref().expect("a used input");
        let off = body.reg(Class::B64);
        body.op(format!("selp.b64 {off}, {}, {index}, {p}", self.col));
        let addr = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {addr}, {off}, {size}, {base}"));
        addr
    }

    /// Moves the column on by one step (both below `len`, so one
    /// subtraction wraps it).
    fn advance(&self, body: &mut Body) {
        let (col, len) = (&self.col, &self.len);
        body.op(format!("add.u64 {col}, {col}, {}", self.step));
        let wrap = body.reg(Class::Pred);
        body.op(format!("setp.ge.u64 {wrap}, {col}, {len}"));
        body.op(format!("@{wrap} sub.u64 {col}, {col}, {len}"));
    }
}

/// The contiguous entry, or with `cols` the [`cols_entry`]: a vector loop
/// of 16-byte steps where every pointer allows it, then a scalar loop.
fn vector_entry(
    name: &str,
    prog: &Program,
    inputs: &[DTypeKind],
    output: DTypeKind,
    target: Target,
    cols: bool,
) -> String {
    let used = used_inputs(prog);
    let w = vector_width(inputs, &used, output);
    let mut body = Body::for_target(target);
    let pro = prologue(&mut body, &used);
    let cols = cols.then(|| Cols::new(&mut body, &used));

    // Vector loop over n / w groups when every pointer is 16-byte aligned.
    body.comment(format!("{w} elements per thread per step when aligned"));
    let bits = body.reg(Class::B64);
    body.op(format!("mov.b64 {bits}, {}", pro.out));
    for r in pro.ins.iter().flatten() {
        body.op(format!("or.b64 {bits}, {bits}, {r}"));
    }
    body.op(format!("and.b64 {bits}, {bits}, 15"));
    if let Some(cols) = &cols {
        // A vector must not cross the end of a row.
        let rest = body.reg(Class::B64);
        body.op(format!("and.b64 {rest}, {}, {}", cols.len, w - 1));
        body.op(format!("or.b64 {bits}, {bits}, {rest}"));
    }
    let aligned = body.reg(Class::Pred);
    body.op(format!("setp.eq.u64 {aligned}, {bits}, 0"));
    let groups = body.reg(Class::B64);
    body.op(format!(
        "shr.u64 {groups}, {}, {}",
        pro.n,
        w.trailing_zeros()
    ));
    body.op(format!("selp.u64 {groups}, {groups}, 0, {aligned}"));

    let i = body.reg(Class::B64);
    body.op(format!("mov.u64 {i}, {}", pro.first));
    // The element index of vector `i` (`i * w`) and its step.
    let element = cols.as_ref().map(|cols| {
        let (e, step) = (body.reg(Class::B64), body.reg(Class::B64));
        body.op(format!("mul.lo.u64 {e}, {i}, {w}"));
        body.op(format!("mul.lo.u64 {step}, {}, {w}", pro.stride));
        cols.start(&mut body, &e, &step);
        e
    });
    let vec_loop = body.label("vec_loop");
    let vec_end = body.label("vec_end");
    body.place(&vec_loop);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {i}, {groups}"));
    body.op(format!("@{done} bra {vec_end}"));
    if let Some(e) = &element {
        body.op(format!("mul.lo.u64 {e}, {i}, {w}"));
    }
    let mut lanes: Vec<Vec<String>> = vec![Vec::new(); w];
    let mut args_per_input = Vec::new();
    for (k, base) in pro.ins.iter().enumerate() {
        let Some(base) = base else {
            args_per_input.push(None);
            continue;
        };
        let addr = match (&cols, &element) {
            (Some(cols), Some(e)) => cols.address(&mut body, k, e, base, inputs[k].size_bytes()),
            _ => {
                let addr = body.reg(Class::B64);
                let bytes = w * inputs[k].size_bytes();
                body.op(format!("mad.lo.u64 {addr}, {i}, {bytes}, {base}"));
                addr
            }
        };
        args_per_input.push(Some(load_vector(&mut body, inputs[k], w, &addr, true)));
    }
    for (lane, lane_args) in lanes.iter_mut().enumerate() {
        let args: Vec<String> = args_per_input
            .iter()
            .map(|a| a.as_ref().map(|v| v[lane].clone()).unwrap_or_default())
            .collect();
        *lane_args = emit_program(&mut body, prog, &args);
    }
    let results: Vec<String> = lanes.iter().map(|r| r[0].clone()).collect();
    let oaddr = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {oaddr}, {i}, {}, {}",
        w * output.size_bytes(),
        pro.out
    ));
    store_vector(&mut body, output, &oaddr, &results);
    if let Some(cols) = &cols {
        cols.advance(&mut body);
    }
    body.op(format!("add.u64 {i}, {i}, {}", pro.stride));
    body.op(format!("bra.uni {vec_loop}"));
    body.place(&vec_end);

    // Scalar loop over what the vector loop left (all of it when unaligned).
    let start = body.reg(Class::B64);
    body.op(format!("mul.lo.u64 {start}, {groups}, {w}"));
    body.op(format!("add.u64 {i}, {start}, {}", pro.first));
    if let Some(cols) = &cols {
        cols.start(&mut body, &i, &pro.stride);
    }
    let tail_loop = body.label("tail_loop");
    let tail_end = body.label("tail_end");
    body.place(&tail_loop);
    body.op(format!("setp.ge.u64 {done}, {i}, {}", pro.n));
    body.op(format!("@{done} bra {tail_end}"));
    let mut args = Vec::new();
    for (k, base) in pro.ins.iter().enumerate() {
        let Some(base) = base else {
            args.push(String::new());
            continue;
        };
        let addr = match &cols {
            Some(cols) => cols.address(&mut body, k, &i, base, inputs[k].size_bytes()),
            None => {
                let addr = body.reg(Class::B64);
                body.op(format!(
                    "mad.lo.u64 {addr}, {i}, {}, {base}",
                    inputs[k].size_bytes()
                ));
                addr
            }
        };
        args.push(load(&mut body, inputs[k], &addr, true));
    }
    let r = emit_program(&mut body, prog, &args);
    let oaddr = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {oaddr}, {i}, {}, {}",
        output.size_bytes(),
        pro.out
    ));
    store(&mut body, output, &oaddr, &r[0]);
    if let Some(cols) = &cols {
        cols.advance(&mut body);
    }
    body.op(format!("add.u64 {i}, {i}, {}", pro.stride));
    body.op(format!("bra.uni {tail_loop}"));
    body.place(&tail_end);
    body.op("ret");

    let (suffix, extra) = match cols {
        Some(_) => ("cols", Extra::Cols),
        None => ("contig", Extra::None),
    };
    format!(
        ".visible .entry {name}_{suffix}{}\n{{\n{}}}\n",
        params(inputs.len(), extra),
        body.finish()
    )
}

/// An operand's offset in elements, as the strided entry's walk left it.
enum Offset {
    U32(String),
    U64(String),
}

impl Offset {
    /// `base + offset * size` in a new 64-bit register.
    fn address(&self, body: &mut Body, base: &str, size: usize) -> String {
        let addr = body.reg(Class::B64);
        match self {
            Offset::U32(off) => body.op(format!("mad.wide.u32 {addr}, {off}, {size}, {base}")),
            Offset::U64(off) => body.op(format!("mad.lo.u64 {addr}, {off}, {size}, {base}")),
        }
        addr
    }
}

/// The strided entry's grid-stride loop over `[i, n)`, in one of its two
/// widths.
struct StridedLoop<'a> {
    pro: &'a Prologue,
    walk: &'a Coords<'a>,
    out_strides: &'a Vec<String>,
    in_strides: &'a [Option<Vec<String>>],
    prog: &'a Program,
    inputs: &'a [DTypeKind],
    output: DTypeKind,
    i: &'a str,
    done: &'a str,
    end: &'a str,
}

impl StridedLoop<'_> {
    /// Emits the loop: each element's coordinates walked in 32-bit
    /// (`narrow`) or 64-bit arithmetic, each used input loaded at its
    /// offset, the program run and its result stored at the output's.
    fn emit(&self, body: &mut Body, narrow: bool) {
        let (class, bits) = match narrow {
            true => (Class::B32, "u32"),
            false => (Class::B64, "u64"),
        };
        let offset = |o: &String| match narrow {
            true => Offset::U32(o.clone()),
            false => Offset::U64(o.clone()),
        };
        let lp = body.label(if narrow { "loop32" } else { "loop" });
        body.place(&lp);
        body.op(format!(
            "setp.ge.u64 {}, {}, {}",
            self.done, self.i, self.pro.n
        ));
        body.op(format!("@{} bra {}", self.done, self.end));
        let rem = body.reg(class);
        body.op(match narrow {
            true => format!("cvt.u32.u64 {rem}, {}", self.i),
            false => format!("mov.u64 {rem}, {}", self.i),
        });
        let zero = |body: &mut Body| {
            let r = body.reg(class);
            body.op(format!("mov.{bits} {r}, 0"));
            r
        };
        let out = zero(body);
        let ins: Vec<Option<String>> = self
            .in_strides
            .iter()
            .map(|st| st.as_ref().map(|_| zero(body)))
            .collect();
        let terms: Vec<(&String, &Vec<String>)> = std::iter::once((&out, self.out_strides))
            .chain(
                ins.iter()
                    .zip(self.in_strides)
                    .filter_map(|(off, st)| off.as_ref().zip(st.as_ref())),
            )
            .collect();
        match narrow {
            true => self.walk.emit_narrow(body, "n", &rem, &terms),
            false => self.walk.emit(body, "", &rem, &terms),
        }
        let mut args = Vec::new();
        for (k, (base, off)) in self.pro.ins.iter().zip(&ins).enumerate() {
            let (Some(base), Some(off)) = (base, off) else {
                args.push(String::new());
                continue;
            };
            let addr = offset(off).address(body, base, self.inputs[k].size_bytes());
            args.push(load(body, self.inputs[k], &addr, true));
        }
        let r = emit_program(body, self.prog, &args);
        let oaddr = offset(&out).address(body, &self.pro.out, self.output.size_bytes());
        store(body, self.output, &oaddr, &r[0]);
        body.op(format!(
            "add.u64 {}, {}, {}",
            self.i, self.i, self.pro.stride
        ));
        body.op(format!("bra.uni {lp}"));
    }
}

/// The `NAME_strided` entry.
pub(crate) fn strided_entry(
    name: &str,
    prog: &Program,
    inputs: &[DTypeKind],
    output: DTypeKind,
    target: Target,
) -> String {
    let used = used_inputs(prog);
    let mut body = Body::for_target(target);
    let pro = prologue(&mut body, &used);

    // meta: dims[MAX_RANK], out strides[MAX_RANK], in_k strides[MAX_RANK]...
    let word = |body: &mut Body, index: usize| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.param.u64 {r}, [p_meta+{}]", 8 * index));
        r
    };
    let dims: Vec<String> = (0..MAX_RANK).map(|d| word(&mut body, d)).collect();
    let out_strides: Vec<String> = (0..MAX_RANK)
        .map(|d| word(&mut body, MAX_RANK + d))
        .collect();
    let in_strides: Vec<Option<Vec<String>>> = used
        .iter()
        .enumerate()
        .map(|(k, &u)| {
            u.then(|| {
                (0..MAX_RANK)
                    .map(|d| word(&mut body, MAX_RANK * (2 + k) + d))
                    .collect()
            })
        })
        .collect();
    // Dims of size 1 need no division (uniform branch); indices below 2^32
    // divide in 32 bits.
    let unit: Vec<String> = (1..MAX_RANK)
        .map(|d| {
            let p = body.reg(Class::Pred);
            body.op(format!("setp.eq.u64 {p}, {}, 1", dims[d]));
            p
        })
        .collect();
    let small = body.reg(Class::Pred);
    body.op(format!("setp.le.u64 {small}, {}, 4294967295", pro.n));
    let walk = Coords {
        dims: &dims,
        unit: &unit,
        small: &small,
    };

    // Where n and every operand's largest offset fit in 32 bits (all but
    // the largest tensors), the walk runs in 32-bit arithmetic: a 64-bit
    // multiply-add is several instructions, and the walk does one per dim
    // and operand for every element, which bounds these kernels.
    let narrow = body.reg(Class::Pred);
    body.op(format!("mov.pred {narrow}, {small}"));
    let (span, top) = (body.reg(Class::B64), body.reg(Class::B64));
    let fits = body.reg(Class::Pred);
    for strides in std::iter::once(&out_strides).chain(in_strides.iter().flatten()) {
        body.op(format!("mov.u64 {span}, 0"));
        for (dim, stride) in dims.iter().zip(strides) {
            body.op(format!("sub.u64 {top}, {dim}, 1"));
            body.op(format!("mad.lo.u64 {span}, {top}, {stride}, {span}"));
        }
        body.op(format!("setp.le.u64 {fits}, {span}, 4294967295"));
        body.op(format!("and.pred {narrow}, {narrow}, {fits}"));
    }

    let i = body.reg(Class::B64);
    let done = body.reg(Class::Pred);
    let end = body.label("end");
    let wide = body.label("wide");
    body.op(format!("mov.u64 {i}, {}", pro.first));
    body.op(format!("@!{narrow} bra.uni {wide}"));

    let each = StridedLoop {
        pro: &pro,
        walk: &walk,
        out_strides: &out_strides,
        in_strides: &in_strides,
        prog,
        inputs,
        output,
        i: &i,
        done: &done,
        end: &end,
    };
    each.emit(&mut body, true);
    body.place(&wide);
    each.emit(&mut body, false);
    body.place(&end);
    body.op("ret");

    format!(
        ".visible .entry {name}_strided{}\n{{\n{}}}\n",
        params(
            inputs.len(),
            Extra::Meta(crate::abi::meta_bytes(inputs.len()))
        ),
        body.finish()
    )
}
