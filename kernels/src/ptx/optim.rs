//! The multi-tensor optimizer entries: one launch updates every tensor of
//! one dtype. The host writes a table of chunk records, one per chunk of
//! at most a few tens of thousands of elements of one tensor; block `b`
//! takes records `b, b + nctaid.x, ...` and its threads stride over the
//! chunk's elements. A record is [`OPTIM_RECORD_WORDS`] `u64` words:
//! the addresses of the chunk's first parameter, gradient and state
//! elements (state buffers the variant does not use are 0), then its
//! element count.
//!
//! The update is computed in f32 (f64 for f64 parameters), the state is
//! f32 (f64), and the parameter is rounded to its dtype once, from the
//! f32 result (or the f32 master weight) to nearest even.

use super::body::{Body, Class};
use super::inst::round_bf16;
use super::memory::{load, store};
use crate::optim::OptimKernel;
use tensorfn_core::DTypeKind;

/// `u64` words of one chunk record: parameter, gradient, four state
/// buffers, element count, padding.
///
/// ```
/// assert_eq!(tensorfn_kernels::optim::OPTIM_RECORD_WORDS * 8, 64); // bytes
/// ```
pub const OPTIM_RECORD_WORDS: usize = 8;

/// Word of the element count in a record.
const COUNT_WORD: usize = 6;

/// The `f64` hyperparameters every optimizer entry takes after the table
/// and the record count (see [`OptimKernel`] for what each means).
///
/// ```
/// assert_eq!(tensorfn_kernels::optim::OPTIM_HYPER, 7);
/// ```
pub const OPTIM_HYPER: usize = 7;

fn params() -> String {
    let mut p = vec![
        "\t.param .u64 p_table".to_string(),
        "\t.param .u64 p_records".to_string(),
    ];
    for k in 0..OPTIM_HYPER {
        p.push(format!("\t.param .f64 p_h{k}"));
    }
    p.push("\t.param .u32 p_flags".to_string());
    p.push("\t.param .u64 p_norm_sq".to_string());
    p.push("\t.param .f64 p_clip".to_string());
    format!("(\n{}\n)", p.join(",\n"))
}

/// Arithmetic in the compute type of an entry (`f32` or `f64`), every
/// operation correctly rounded and never contracted.
struct Math<'a> {
    body: &'a mut Body,
    /// `f32` or `f64`.
    ty: &'static str,
    class: Class,
}

impl Math<'_> {
    fn bin(&mut self, op: &str, a: &str, b: &str) -> String {
        let d = self.body.reg(self.class);
        let rn = if op == "max" { "" } else { ".rn" };
        self.body.op(format!("{op}{rn}.{} {d}, {a}, {b}", self.ty));
        d
    }
    fn add(&mut self, a: &str, b: &str) -> String {
        self.bin("add", a, b)
    }
    fn sub(&mut self, a: &str, b: &str) -> String {
        self.bin("sub", a, b)
    }
    fn mul(&mut self, a: &str, b: &str) -> String {
        self.bin("mul", a, b)
    }
    fn div(&mut self, a: &str, b: &str) -> String {
        self.bin("div", a, b)
    }
    fn sqrt(&mut self, a: &str) -> String {
        let d = self.body.reg(self.class);
        self.body.op(format!("sqrt.rn.{} {d}, {a}", self.ty));
        d
    }
    /// `torch.maximum`: NaN when either is NaN.
    fn max_nan(&mut self, a: &str, b: &str) -> String {
        let m = self.bin("max", a, b);
        let nan = self.add(a, b);
        let p = self.body.reg(Class::Pred);
        self.body.op(format!("setp.nan.{} {p}, {a}, {b}", self.ty));
        let d = self.body.reg(self.class);
        self.body
            .op(format!("selp.{} {d}, {nan}, {m}, {p}", self.ty));
        d
    }
    /// `p ? a : b`.
    fn select(&mut self, p: &str, a: &str, b: &str) -> String {
        let d = self.body.reg(self.class);
        self.body.op(format!("selp.{} {d}, {a}, {b}, {p}", self.ty));
        d
    }
}

/// The element at `base + i * size`, for `i` in `idx`.
fn addr(body: &mut Body, base: &str, idx: &str, size: u32) -> String {
    let a = body.reg(Class::B64);
    body.op(format!("mad.lo.u64 {a}, {idx}, {size}, {base}"));
    a
}

/// Predicate: bit `bit` of `flags` is set.
fn flag(body: &mut Body, flags: &str, bit: u32) -> String {
    let b = body.reg(Class::B32);
    body.op(format!("and.b32 {b}, {flags}, {}", 1u32 << bit));
    let p = body.reg(Class::Pred);
    body.op(format!("setp.ne.u32 {p}, {b}, 0"));
    p
}

/// Stores compute-type value `x` as parameter dtype `dtype`, rounded to
/// nearest even.
fn store_param(body: &mut Body, dtype: DTypeKind, at: &str, x: &str) {
    match dtype {
        DTypeKind::BF16 => {
            let r = body.reg(Class::F32);
            let last = round_bf16(body, x, &r);
            body.op(last);
            store(body, dtype, at, &r);
        }
        // `store` rounds f16 with `cvt.rn.f16.f32`.
        _ => store(body, dtype, at, x),
    }
}

/// Elements of a chunk a thread loads together before updating them.
const ELEM_GROUP: u32 = 4;

/// Resident blocks per SM the f32-compute entries without AMSGrad are
/// built for (at most 64 registers a thread): with [`ELEM_GROUP`] elements' loads in flight per thread,
/// enough bytes in flight to keep the memory busy.
const OPTIM_BLOCKS_PER_SM: u32 = 4;

/// What one element's update reads: its index and loaded values (the
/// stores' addresses are recomputed from the index, so that a group's
/// elements hold two registers of address each rather than ten).
struct Elem {
    /// The element's index in the chunk.
    i: String,
    /// The gradient, in the compute type.
    g: String,
    /// The parameter (or its f32 master weight), unless the kernel only
    /// reads gradients.
    x: Option<String>,
    /// The state buffers' values the update reads, in record order.
    st: Vec<String>,
}

/// How an entry loads and updates one element.
struct ElemOps<'a> {
    kernel: OptimKernel,
    dtype: DTypeKind,
    /// The state's dtype (f32, or f64 for f64 parameters).
    state: DTypeKind,
    class: Class,
    ty: &'static str,
    h: &'a [String],
    coef: &'a str,
    maximize: &'a str,
    flags: &'a str,
    /// The sum of squares' per-thread part.
    part: &'a str,
}

impl ElemOps<'_> {
    fn master(&self) -> bool {
        matches!(self.kernel, OptimKernel::AdamW { master: true, .. })
            && matches!(self.dtype, DTypeKind::F16 | DTypeKind::BF16)
    }

    /// The addresses of element `i` of the parameter, the gradient and
    /// the state buffers at `ptrs`.
    fn addrs(&self, body: &mut Body, ptrs: &[String], i: &str) -> (String, String, Vec<String>) {
        let (psize, ssize) = (
            self.dtype.size_bytes() as u32,
            self.state.size_bytes() as u32,
        );
        let pa = addr(body, &ptrs[0], i, psize);
        let ga = addr(body, &ptrs[1], i, psize);
        let sa = ptrs[2..].iter().map(|p| addr(body, p, i, ssize)).collect();
        (pa, ga, sa)
    }

    /// Element `i`'s loads (nothing stored).
    fn load(&self, body: &mut Body, ptrs: &[String], i: &str) -> Elem {
        let bufs = self.kernel.state_buffers(self.dtype);
        let (pa, ga, sa) = self.addrs(body, ptrs, i);
        let g = load(body, self.dtype, &ga, true);
        let (x, reads) = match self.kernel {
            OptimKernel::AdamW { amsgrad, .. } => {
                let x = match self.master() {
                    true => load(body, self.state, &sa[bufs - 1], false),
                    false => load(body, self.dtype, &pa, false),
                };
                (Some(x), 2 + amsgrad as usize)
            }
            OptimKernel::Sgd { momentum } => {
                (Some(load(body, self.dtype, &pa, false)), momentum as usize)
            }
            OptimKernel::SquareSum => (None, 0),
        };
        let st = sa[..reads]
            .iter()
            .map(|a| load(body, self.state, a, false))
            .collect();
        Elem {
            i: i.to_string(),
            g,
            x,
            st,
        }
    }

    /// The update of an element loaded by [`Self::load`]: its state and
    /// parameter stored (or its square added to the thread's part).
    fn update(&self, body: &mut Body, ptrs: &[String], e: &Elem) {
        let (ty, class, dtype, state) = (self.ty, self.class, self.dtype, self.state);
        let (h, flags, g) = (self.h, self.flags, &e.g);
        if self.kernel == OptimKernel::SquareSum {
            body.op(format!("fma.rn.{ty} {p}, {g}, {g}, {p}", p = self.part));
            return;
        }
        let d = body.reg(class);
        body.op(format!("mul.rn.{ty} {d}, {g}, {}", self.coef));
        let g = d;
        let mut m = Math { body, ty, class };
        let neg = m.body.reg(class);
        m.body.op(format!("neg.{ty} {neg}, {g}"));
        let g = m.select(self.maximize, &neg, &g);
        let x = e.x.as_deref().expect("a parameter update loads it");
        let (pa, _, sa) = self.addrs(m.body, ptrs, &e.i);
        match self.kernel {
            OptimKernel::AdamW { amsgrad, .. } => {
                // h: decay, 1 - beta1, beta2, 1 - beta2, sqrt(1 - beta2^t), eps, lr / (1 - beta1^t).
                let x = m.mul(x, &h[0]);
                let mo = &e.st[0];
                let d = m.sub(&g, mo);
                let d = m.mul(&h[1], &d);
                let mo = m.add(mo, &d);
                store(m.body, state, &sa[0], &mo);
                let v = m.mul(&e.st[1], &h[2]);
                let gg = m.mul(&g, &g);
                let gg = m.mul(&h[3], &gg);
                let v = m.add(&v, &gg);
                store(m.body, state, &sa[1], &v);
                let second = match amsgrad {
                    true => {
                        let vm = m.max_nan(&e.st[2], &v);
                        store(m.body, state, &sa[2], &vm);
                        vm
                    }
                    false => v,
                };
                let s = m.sqrt(&second);
                let s = m.div(&s, &h[4]);
                let denom = m.add(&s, &h[5]);
                let u = m.div(&mo, &denom);
                let u = m.mul(&h[6], &u);
                let x = m.sub(&x, &u);
                if self.master() {
                    store(m.body, state, &sa[sa.len() - 1], &x);
                }
                store_param(m.body, dtype, &pa, &x);
            }
            OptimKernel::Sgd { momentum } => {
                // h: lr, momentum, 1 - dampening, weight_decay;
                // flags: 1 nesterov, 2 first step, 3 weight decay.
                let decay = flag(m.body, flags, 3);
                let wx = m.mul(&h[3], x);
                let gd = m.add(&g, &wx);
                let mut g = m.select(&decay, &gd, &g);
                if momentum {
                    let (nesterov, first) = (flag(m.body, flags, 1), flag(m.body, flags, 2));
                    let b = m.mul(&h[1], &e.st[0]);
                    let dg = m.mul(&h[2], &g);
                    let b = m.add(&b, &dg);
                    let b = m.select(&first, &g, &b);
                    store(m.body, state, &sa[0], &b);
                    let mb = m.mul(&h[1], &b);
                    let gn = m.add(&g, &mb);
                    g = m.select(&nesterov, &gn, &b);
                }
                let u = m.mul(&h[0], &g);
                let x = m.sub(x, &u);
                store_param(m.body, dtype, &pa, &x);
            }
            OptimKernel::SquareSum => unreachable!("handled above"),
        }
    }
}

/// The entry `name` of optimizer `kernel` over parameters of `dtype`.
pub(crate) fn optim_entry(name: &str, kernel: OptimKernel, dtype: DTypeKind) -> String {
    let mut body = Body::new();
    let (ty, class, state) = match dtype {
        DTypeKind::F64 => ("f64", Class::F64, DTypeKind::F64),
        _ => ("f32", Class::F32, DTypeKind::F32),
    };
    let table = body.reg(Class::B64);
    body.op(format!("ld.param.u64 {table}, [p_table]"));
    body.op(format!("cvta.to.global.u64 {table}, {table}"));
    let records = body.reg(Class::B64);
    body.op(format!("ld.param.u64 {records}, [p_records]"));
    let mut h = Vec::new();
    for k in 0..OPTIM_HYPER {
        let d = body.reg(Class::F64);
        body.op(format!("ld.param.f64 {d}, [p_h{k}]"));
        if class == Class::F32 {
            let f = body.reg(Class::F32);
            body.op(format!("cvt.rn.f32.f64 {f}, {d}"));
            h.push(f);
        } else {
            h.push(d);
        }
    }
    let flags = body.reg(Class::B32);
    body.op(format!("ld.param.u32 {flags}, [p_flags]"));
    let maximize = flag(&mut body, &flags, 0);
    let square_sum = kernel == OptimKernel::SquareSum;
    let norm_sq = body.reg(Class::B64);
    body.op(format!("ld.param.u64 {norm_sq}, [p_norm_sq]"));
    // The clip coefficient of the updates: `p_clip`, or computed from the
    // squared total norm on the device.
    let coef = body.reg(Class::F64);
    body.op(format!("ld.param.f64 {coef}, [p_clip]"));
    if !square_sum {
        let have = body.label("optim_coef");
        let none = body.reg(Class::Pred);
        body.op(format!("setp.eq.u64 {none}, {norm_sq}, 0"));
        body.op(format!("@{none} bra {have}"));
        let a = body.reg(Class::B64);
        body.op(format!("cvta.to.global.u64 {a}, {norm_sq}"));
        let s = body.reg(Class::F64);
        body.op(format!("ld.global.f64 {s}, [{a}]"));
        body.op(format!("sqrt.rn.f64 {s}, {s}"));
        // + 1e-6, then `clamp(max=1)`, which keeps NaN.
        body.op(format!("add.rn.f64 {s}, {s}, 0d{:016X}", 1e-6f64.to_bits()));
        body.op(format!("div.rn.f64 {s}, {coef}, {s}"));
        let m = body.reg(Class::F64);
        body.op(format!("min.f64 {m}, {s}, 0d{:016X}", 1f64.to_bits()));
        let nan = body.reg(Class::Pred);
        body.op(format!("setp.nan.f64 {nan}, {s}, {s}"));
        body.op(format!("selp.f64 {coef}, {s}, {m}, {nan}"));
        body.place(&have);
    }
    let coef = match class {
        Class::F32 => {
            let f = body.reg(Class::F32);
            body.op(format!("cvt.rn.f32.f64 {f}, {coef}"));
            f
        }
        _ => coef,
    };
    // SquareSum: this thread's part of the sum of squares.
    let part = body.reg(class);
    let zero = match class {
        Class::F32 => "0f00000000",
        _ => "0d0000000000000000",
    };
    body.op(format!("mov.{ty} {part}, {zero}"));
    let (c, nc, t, nt) = (
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
        body.reg(Class::B32),
    );
    body.op(format!("mov.u32 {c}, %ctaid.x"));
    body.op(format!("mov.u32 {nc}, %nctaid.x"));
    body.op(format!("mov.u32 {t}, %tid.x"));
    body.op(format!("mov.u32 {nt}, %ntid.x"));
    let rec = body.reg(Class::B64);
    body.op(format!("cvt.u64.u32 {rec}, {c}"));
    let (step_rec, tid, step_i) = (
        body.reg(Class::B64),
        body.reg(Class::B64),
        body.reg(Class::B64),
    );
    body.op(format!("cvt.u64.u32 {step_rec}, {nc}"));
    body.op(format!("cvt.u64.u32 {tid}, {t}"));
    body.op(format!("cvt.u64.u32 {step_i}, {nt}"));

    let end = body.label("optim_end");
    let next = body.label("optim_next");
    let rec_loop = body.label("optim_records");
    body.place(&rec_loop);
    let done = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {done}, {rec}, {records}"));
    body.op(format!("@{done} bra {end}"));
    let at = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {at}, {rec}, {}, {table}",
        8 * OPTIM_RECORD_WORDS
    ));
    let word = |body: &mut Body, w: usize| {
        let r = body.reg(Class::B64);
        body.op(format!("ld.global.nc.u64 {r}, [{at}+{}]", 8 * w));
        r
    };
    let bufs = kernel.state_buffers(dtype);
    let mut ptrs = Vec::new();
    for w in 0..2 + bufs {
        let r = word(&mut body, w);
        body.op(format!("cvta.to.global.u64 {r}, {r}"));
        ptrs.push(r);
    }
    let n = word(&mut body, COUNT_WORD);
    let ops = ElemOps {
        kernel,
        dtype,
        state,
        class,
        ty,
        h: &h,
        coef: &coef,
        maximize: &maximize,
        flags: &flags,
        part: &part,
    };
    let i = body.reg(Class::B64);
    body.op(format!("mov.u64 {i}, {tid}"));
    // Groups of `ELEM_GROUP` elements (`i + k * ntid`) while the whole
    // group lies in the chunk: every load of the group issued before any
    // update, so a thread has that many elements' loads in flight.
    let group = body.label("optim_group");
    let tail = body.label("optim_tail");
    body.place(&group);
    let last = body.reg(Class::B64);
    body.op(format!(
        "mad.lo.u64 {last}, {step_i}, {}, {i}",
        ELEM_GROUP - 1
    ));
    let partial = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {partial}, {last}, {n}"));
    body.op(format!("@{partial} bra {tail}"));
    let mut elems = Vec::new();
    for k in 0..ELEM_GROUP {
        let ik = body.reg(Class::B64);
        body.op(format!("mad.lo.u64 {ik}, {step_i}, {k}, {i}"));
        elems.push(ops.load(&mut body, &ptrs, &ik));
    }
    for e in &elems {
        ops.update(&mut body, &ptrs, e);
    }
    body.op(format!("mad.lo.u64 {i}, {step_i}, {ELEM_GROUP}, {i}"));
    body.op(format!("bra.uni {group}"));
    body.place(&tail);
    // The chunk's last elements, one at a time.
    let elem = body.label("optim_elements");
    body.place(&elem);
    let out = body.reg(Class::Pred);
    body.op(format!("setp.ge.u64 {out}, {i}, {n}"));
    body.op(format!("@{out} bra {next}"));
    let e = ops.load(&mut body, &ptrs, &i);
    ops.update(&mut body, &ptrs, &e);
    body.op(format!("add.u64 {i}, {i}, {step_i}"));
    body.op(format!("bra.uni {elem}"));
    body.place(&next);
    body.op(format!("add.u64 {rec}, {rec}, {step_rec}"));
    body.op(format!("bra.uni {rec_loop}"));
    body.place(&end);
    if square_sum {
        // The warp's parts summed in f64 by shuffles, and one atomic add
        // per warp.
        let d = match class {
            Class::F32 => {
                let d = body.reg(Class::F64);
                body.op(format!("cvt.f64.f32 {d}, {part}"));
                d
            }
            _ => part,
        };
        for off in [16, 8, 4, 2, 1] {
            let (lo, hi) = (body.reg(Class::B32), body.reg(Class::B32));
            body.op(format!("mov.b64 {{{lo}, {hi}}}, {d}"));
            body.op(format!("shfl.sync.bfly.b32 {lo}, {lo}, {off}, 31, -1"));
            body.op(format!("shfl.sync.bfly.b32 {hi}, {hi}, {off}, 31, -1"));
            let o = body.reg(Class::F64);
            body.op(format!("mov.b64 {o}, {{{lo}, {hi}}}"));
            body.op(format!("add.rn.f64 {d}, {d}, {o}"));
        }
        let lane = body.reg(Class::B32);
        body.op(format!("and.b32 {lane}, {t}, 31"));
        let skip = body.reg(Class::Pred);
        body.op(format!("setp.ne.u32 {skip}, {lane}, 0"));
        let a = body.reg(Class::B64);
        body.op(format!("cvta.to.global.u64 {a}, {norm_sq}"));
        let old = body.reg(Class::F64);
        body.op(format!("@!{skip} atom.global.add.f64 {old}, [{a}], {d}"));
    }
    body.op("ret");
    // f64 and AMSGrad's extra state do not fit 64 registers without
    // spilling: those entries take what they need.
    let amsgrad = matches!(kernel, OptimKernel::AdamW { amsgrad: true, .. });
    let bounds = if dtype == DTypeKind::F64 || amsgrad {
        String::new()
    } else {
        format!(".minnctapersm {OPTIM_BLOCKS_PER_SM}\n")
    };
    format!(
        ".visible .entry {name}{}\n.maxntid {}, 1, 1\n{bounds}{{\n{}}}\n",
        params(),
        crate::abi::BLOCK,
        body.finish()
    )
}
