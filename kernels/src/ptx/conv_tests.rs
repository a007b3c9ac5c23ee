//! The column kernels run on the host: a small PTX simulator executes
//! the emitted text of `im2col` and `col2im` (every instruction they use,
//! branches included) thread by thread over a grid-stride launch, and the
//! results are checked against plain Rust loops: `im2col` bit for bit,
//! `col2im` against the f64 sum of each element's taps rounded once.
//! Random shapes with stride, padding, dilation, NCHW and channels-last
//! inputs, NaN and infinities, in every float dtype.

use crate::builtin;
use half::{bf16, f16};
use std::collections::HashMap;
use tensorfn_core::DTypeKind;

/// Where the simulation places the output and input buffers.
const OUT_AT: u64 = 0x1000_0000;
const IN_AT: u64 = 0x4000_0000;

/// One entry's instructions and labels.
struct Program {
    lines: Vec<String>,
    labels: HashMap<String, usize>,
}

fn program(ptx: &str, entry: &str) -> Program {
    let start = ptx.find(&format!(".entry {entry}(")).expect("the entry");
    let body = &ptx[start..];
    let open = body.find('{').expect("body");
    let close = body.find("\n}").expect("end of body");
    let lines: Vec<String> = body[open + 1..close]
        .lines()
        .map(|l| l.trim().trim_end_matches(';').to_string())
        .filter(|l| !l.is_empty() && !l.starts_with(".reg") && !l.starts_with("//"))
        .collect();
    let labels = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.ends_with(':'))
        .map(|(i, l)| (l.trim_end_matches(':').to_string(), i))
        .collect();
    Program { lines, labels }
}

/// Flat memory: the output and the input buffer.
struct Memory {
    out: Vec<u8>,
    input: Vec<u8>,
}

impl Memory {
    fn slot(&mut self, addr: u64, bytes: usize) -> &mut [u8] {
        let (base, buf) = if addr >= IN_AT {
            (IN_AT, &mut self.input)
        } else {
            (OUT_AT, &mut self.out)
        };
        assert!(addr >= base, "access at {addr:#x} below its buffer");
        let at = (addr - base) as usize;
        assert_eq!(at % bytes, 0, "misaligned access at {addr:#x}");
        assert!(
            at + bytes <= buf.len(),
            "access of {bytes} bytes at {addr:#x} past the buffer ({} bytes)",
            buf.len()
        );
        &mut buf[at..at + bytes]
    }
}

struct Thread<'a> {
    regs: HashMap<String, u64>,
    special: [(&'static str, u64); 4],
    params: &'a HashMap<String, u64>,
}

fn imm(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0d").or_else(|| s.strip_prefix("0f")) {
        return u64::from_str_radix(h, 16).ok();
    }
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).ok();
    }
    s.parse::<i64>().ok().map(|v| v as u64)
}

impl Thread<'_> {
    fn value(&self, operand: &str) -> u64 {
        if let Some(&(_, v)) = self.special.iter().find(|(n, _)| *n == operand) {
            return v;
        }
        if operand.starts_with('%') {
            return *self
                .regs
                .get(operand)
                .unwrap_or_else(|| panic!("{operand} read before it is written"));
        }
        imm(operand).unwrap_or_else(|| panic!("operand {operand}"))
    }

    /// Runs the program to `ret`.
    fn run(&mut self, p: &Program, mem: &mut Memory) {
        let mut pc = 0;
        let mut steps = 0u64;
        while pc < p.lines.len() {
            steps += 1;
            assert!(steps < 10_000_000, "the simulated thread does not stop");
            let line = &p.lines[pc];
            pc += 1;
            if line.ends_with(':') {
                continue;
            }
            let (guard, inst) = match line.strip_prefix('@') {
                Some(rest) => {
                    let (g, inst) = rest.split_once(' ').expect("guarded instruction");
                    (Some(g), inst.trim())
                }
                None => (None, line.as_str()),
            };
            if let Some(g) = guard {
                let (neg, g) = g.strip_prefix('!').map_or((false, g), |g| (true, g));
                if (self.value(g) != 0) == neg {
                    continue;
                }
            }
            let (op, rest) = inst.split_once(' ').unwrap_or((inst, ""));
            if op == "ret" {
                return;
            }
            if op == "bra" || op == "bra.uni" {
                pc = p.labels[rest.trim()];
                continue;
            }
            self.step(op, rest, mem);
        }
    }

    fn step(&mut self, op: &str, rest: &str, mem: &mut Memory) {
        if op.starts_with("ld.") || op.starts_with("st.") {
            return self.access(op, rest, mem);
        }
        let args: Vec<&str> = rest.split(',').map(str::trim).collect();
        let v = |i: usize| self.value(args[i]);
        let s = |i: usize| self.value(args[i]) as i64;
        let m32 = |x: u64| x & 0xFFFF_FFFF;
        let f32_of = |x: u64| f32::from_bits(x as u32);
        let f64_of = f64::from_bits;
        let result = match op {
            "cvta.to.global.u64" | "mov.u64" | "mov.b64" | "mov.f64" => v(1),
            "mov.u32" | "mov.b32" => m32(v(1)),
            "mov.b16" | "cvt.u16.u32" => v(1) & 0xFFFF,
            "cvt.u64.u32" | "cvt.u32.u64" => m32(v(1)),
            "mul.wide.u32" => m32(v(1)) * m32(v(2)),
            "add.u64" | "add.s64" => v(1).wrapping_add(v(2)),
            "sub.u64" | "sub.s64" => v(1).wrapping_sub(v(2)),
            "mul.lo.u64" | "mul.lo.s64" => v(1).wrapping_mul(v(2)),
            "mad.lo.u64" | "mad.lo.s64" => v(1).wrapping_mul(v(2)).wrapping_add(v(3)),
            "add.s32" => m32(v(1).wrapping_add(v(2))),
            "max.s64" => s(1).max(s(2)) as u64,
            "min.s64" => s(1).min(s(2)) as u64,
            "div.u32" => m32(v(1)) / m32(v(2)),
            "div.u64" => v(1) / v(2),
            "or.b64" => v(1) | v(2),
            "or.b32" => m32(v(1) | v(2)),
            "and.b32" => m32(v(1) & v(2)),
            "and.pred" => v(1) & v(2),
            "shr.u64" => v(1) >> v(2),
            "shr.u32" => m32(v(1)) >> v(2),
            "shl.b32" => m32(v(1) << v(2)),
            "bfe.u32" => (m32(v(1)) >> v(2)) & ((1 << v(3)) - 1),
            "setp.eq.u64" => (v(1) == v(2)) as u64,
            "setp.ne.u64" => (v(1) != v(2)) as u64,
            "setp.ge.u64" => (v(1) >= v(2)) as u64,
            "setp.lt.u64" => (v(1) < v(2)) as u64,
            "setp.ge.s64" => (s(1) >= s(2)) as u64,
            "setp.lt.s64" => (s(1) < s(2)) as u64,
            "setp.equ.f64" => {
                let (a, b) = (f64_of(v(1)), f64_of(v(2)));
                (a == b || a.is_nan() || b.is_nan()) as u64
            }
            "setp.nan.f32" => (f32_of(v(1)).is_nan() || f32_of(v(2)).is_nan()) as u64,
            "selp.b32" | "selp.b64" | "selp.f64" => {
                if v(3) != 0 {
                    v(1)
                } else {
                    v(2)
                }
            }
            "add.rn.f64" => (f64_of(v(1)) + f64_of(v(2))).to_bits(),
            "cvt.f64.f32" => (f32_of(v(1)) as f64).to_bits(),
            "cvt.rn.f32.f64" => (f64_of(v(1)) as f32).to_bits() as u64,
            "cvt.rz.f32.f64" => rz(f64_of(v(1))).to_bits() as u64,
            "cvt.f32.f16" => f16::from_bits(v(1) as u16).to_f32().to_bits() as u64,
            "cvt.rn.f16.f32" => f16::from_f32(f32_of(v(1))).to_bits() as u64,
            _ => panic!("the simulation does not model `{op} {rest}`"),
        };
        self.regs.insert(args[0].to_string(), result);
    }

    fn access(&mut self, op: &str, rest: &str, mem: &mut Memory) {
        let open = rest.find('[').expect("an address");
        let close = rest.find(']').expect("an address");
        let inner = &rest[open + 1..close];
        if op == "ld.param.u64" {
            let reg = rest[..open].trim().trim_end_matches(',');
            let value = self.params[inner];
            self.regs.insert(reg.to_string(), value);
            return;
        }
        assert!(op.contains(".global"), "{op}");
        let addr = self.value(inner);
        let bytes = match op.rsplit('.').next().unwrap() {
            "b16" | "u16" => 2,
            "b32" | "f32" => 4,
            "b64" | "f64" => 8,
            other => panic!("access width {other}"),
        };
        let slot = mem.slot(addr, bytes);
        if op.starts_with("ld.") {
            let reg = rest[..open].trim().trim_end_matches(',');
            let mut w = [0u8; 8];
            w[..bytes].copy_from_slice(slot);
            self.regs.insert(reg.to_string(), u64::from_le_bytes(w));
        } else {
            let src = rest[close + 1..].trim().trim_start_matches(',').trim();
            let v = self.value(src).to_le_bytes();
            slot.copy_from_slice(&v[..bytes]);
        }
    }
}

/// `v` rounded toward zero to f32.
fn rz(v: f64) -> f32 {
    let r = v as f32;
    if r.is_nan() || (r as f64).abs() <= v.abs() {
        r
    } else {
        f32::from_bits(r.to_bits() - 1)
    }
}

/// Runs `entry` of `ptx` with `threads` threads of one block over the
/// given meta words; returns the output buffer.
fn launch(ptx: &str, entry: &str, meta: &[u64], out_bytes: usize, input: Vec<u8>) -> Vec<u8> {
    let p = program(ptx, entry);
    let mut params = HashMap::new();
    params.insert("p_out".to_string(), OUT_AT);
    params.insert("p_in".to_string(), IN_AT);
    for (i, &w) in meta.iter().enumerate() {
        params.insert(format!("p_meta+{}", 8 * i), w);
    }
    // Unwritten output bytes stay 0xEE, so a missed element shows.
    let mut mem = Memory {
        out: vec![0xEE; out_bytes],
        input,
    };
    let threads = 37;
    for tid in 0..threads {
        let mut t = Thread {
            regs: HashMap::new(),
            special: [
                ("%tid.x", tid),
                ("%ntid.x", threads),
                ("%ctaid.x", 0),
                ("%nctaid.x", 1),
            ],
            params: &params,
        };
        t.run(&p, &mut mem);
    }
    mem.out
}

/// A small deterministic generator (the tests' inputs vary per case).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn pick(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
    fn value(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
    }
}

/// `v` as `dtype`'s little-endian bytes, and back to f64.
fn encode(dtype: DTypeKind, v: f64) -> Vec<u8> {
    match dtype {
        DTypeKind::F64 => v.to_le_bytes().to_vec(),
        DTypeKind::F32 => (v as f32).to_le_bytes().to_vec(),
        DTypeKind::F16 => f16::from_f64(v).to_bits().to_le_bytes().to_vec(),
        _ => bf16::from_f64(v).to_bits().to_le_bytes().to_vec(),
    }
}

fn decode(dtype: DTypeKind, b: &[u8]) -> f64 {
    match dtype {
        DTypeKind::F64 => f64::from_le_bytes(b.try_into().unwrap()),
        DTypeKind::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
        DTypeKind::F16 => f16::from_bits(u16::from_le_bytes(b.try_into().unwrap())).to_f64(),
        _ => bf16::from_bits(u16::from_le_bytes(b.try_into().unwrap())).to_f64(),
    }
}

/// One random problem: dims, kernel, stride, padding, dilation.
#[derive(Debug)]
struct Case {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    k: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
    dil: [usize; 2],
    out: [usize; 2],
}

impl Case {
    fn random(rng: &mut Rng) -> Case {
        let k = [rng.pick(1, 3), rng.pick(1, 3)];
        let dil = [rng.pick(1, 2), rng.pick(1, 2)];
        let stride = [rng.pick(1, 3), rng.pick(1, 2)];
        let pad = [rng.pick(0, 2), rng.pick(0, 1)];
        let h = (k[0] - 1) * dil[0] + 1 + rng.pick(0, 4);
        let w = (k[1] - 1) * dil[1] + 1 + rng.pick(0, 4);
        let out = [
            (h + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) / stride[0] + 1,
            (w + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) / stride[1] + 1,
        ];
        Case {
            n: rng.pick(1, 2),
            c: rng.pick(1, 3),
            h,
            w,
            k,
            stride,
            pad,
            dil,
            out,
        }
    }

    fn meta(&self, total: usize, x_strides: [usize; 4]) -> Vec<u64> {
        super::ConvMeta {
            total,
            c: self.c,
            h: self.h,
            w: self.w,
            kh: self.k[0],
            kw: self.k[1],
            oh: self.out[0],
            ow: self.out[1],
            x_strides,
            stride: self.stride,
            padding: self.pad,
            dilation: self.dil,
        }
        .words()
        .map(|w| w as u64)
        .to_vec()
    }

    /// The input position tap `(r, s)` of output `(oh, ow)` reads, if any.
    fn source(&self, (oh, ow): (usize, usize), (r, s): (usize, usize)) -> Option<(usize, usize)> {
        let ih = (oh * self.stride[0] + r * self.dil[0]).checked_sub(self.pad[0])?;
        let iw = (ow * self.stride[1] + s * self.dil[1]).checked_sub(self.pad[1])?;
        (ih < self.h && iw < self.w).then_some((ih, iw))
    }
}

#[test]
fn im2col_and_col2im_match_the_reference_loops() {
    let mut rng = Rng(0x5eed);
    for dtype in [
        DTypeKind::F32,
        DTypeKind::F64,
        DTypeKind::F16,
        DTypeKind::BF16,
    ] {
        let k = builtin::conv2d(dtype).unwrap();
        let size = dtype.size_bytes();
        for case in 0..10 {
            let cs = Case::random(&mut rng);
            let Case { n, c, h, w, .. } = cs;
            let [kh, kw] = cs.k;
            let [oh, ow] = cs.out;
            let (p, rows) = (oh * ow, c * kh * kw);
            // x in NCHW or channels-last memory, with NaN and infinities.
            let channels_last = case % 2 == 1;
            let xs = if channels_last {
                [h * w * c, 1, w * c, c]
            } else {
                [c * h * w, h * w, w, 1]
            };
            let mut xv: Vec<f64> = (0..n * c * h * w).map(|_| rng.value()).collect();
            xv[0] = f64::NAN;
            if xv.len() > 2 {
                xv[1] = f64::INFINITY;
                xv[2] = f64::NEG_INFINITY;
            }
            let x_bytes: Vec<u8> = xv.iter().flat_map(|&v| encode(dtype, v)).collect();
            let at = |(b, ch, i, j): (usize, usize, usize, usize)| {
                b * xs[0] + ch * xs[1] + i * xs[2] + j * xs[3]
            };
            let total = n * rows * p;
            let got = launch(
                &k.ptx,
                &format!("{}_im2col", k.name),
                &cs.meta(total, xs),
                total * size,
                x_bytes.clone(),
            );
            for b in 0..n {
                for ch in 0..c {
                    for (r, s) in (0..kh).flat_map(|r| (0..kw).map(move |s| (r, s))) {
                        for (o1, o2) in (0..oh).flat_map(|a| (0..ow).map(move |b| (a, b))) {
                            let row = ch * kh * kw + r * kw + s;
                            let i = (b * rows + row) * p + o1 * ow + o2;
                            let want = match cs.source((o1, o2), (r, s)) {
                                Some((ih, iw)) => {
                                    let e = at((b, ch, ih, iw));
                                    x_bytes[e * size..(e + 1) * size].to_vec()
                                }
                                None => vec![0; size],
                            };
                            assert_eq!(
                                &got[i * size..(i + 1) * size],
                                &want[..],
                                "{dtype} im2col {cs:?} element {i}"
                            );
                        }
                    }
                }
            }
            // col2im of random columns: each input element's taps summed.
            let colv: Vec<f64> = (0..total).map(|_| rng.value()).collect();
            let col_bytes: Vec<u8> = colv.iter().flat_map(|&v| encode(dtype, v)).collect();
            let dx_total = n * c * h * w;
            let got = launch(
                &k.ptx,
                &format!("{}_col2im", k.name),
                &cs.meta(dx_total, [0; 4]),
                dx_total * size,
                col_bytes.clone(),
            );
            let mut sums = vec![0.0f64; dx_total];
            for b in 0..n {
                for ch in 0..c {
                    for (r, s) in (0..kh).flat_map(|r| (0..kw).map(move |s| (r, s))) {
                        for (o1, o2) in (0..oh).flat_map(|a| (0..ow).map(move |b| (a, b))) {
                            if let Some((ih, iw)) = cs.source((o1, o2), (r, s)) {
                                let row = ch * kh * kw + r * kw + s;
                                let i = (b * rows + row) * p + o1 * ow + o2;
                                let v = decode(dtype, &col_bytes[i * size..(i + 1) * size]);
                                sums[((b * c + ch) * h + ih) * w + iw] += v;
                            }
                        }
                    }
                }
            }
            for (i, &s) in sums.iter().enumerate() {
                let want = encode(dtype, s);
                assert_eq!(
                    &got[i * size..(i + 1) * size],
                    &want[..],
                    "{dtype} col2im {cs:?} element {i}: got {}, want {s}",
                    decode(dtype, &got[i * size..(i + 1) * size])
                );
            }
        }
    }
}

#[test]
fn simulation_catches_a_wrong_tap() {
    // A kernel whose padding offset is off by one reads the wrong column:
    // the check above must see it.
    let k = builtin::conv2d(DTypeKind::F32).unwrap();
    let cs = Case {
        n: 1,
        c: 1,
        h: 3,
        w: 3,
        k: [3, 3],
        stride: [1, 1],
        pad: [1, 1],
        dil: [1, 1],
        out: [3, 3],
    };
    let x: Vec<u8> = (0..9)
        .flat_map(|v| (v as f32 + 1.0).to_le_bytes())
        .collect();
    let mut meta = cs.meta(81, [9, 9, 3, 1]);
    meta[14] = 0; // padding 0 along h instead of 1
    let got = launch(&k.ptx, &format!("{}_im2col", k.name), &meta, 81 * 4, x);
    // Tap (0, 1) at output (0, 0) is padding with padding 1; without it,
    // it reads x[0, 0] = 1.
    assert_eq!(&got[36..40], &1f32.to_le_bytes());
}
