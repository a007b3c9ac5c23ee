//! Runs the generated PTX on a real GPU and compares every output with the
//! interpreter, bit for bit: every built-in elementwise kernel (contiguous
//! vectorised, contiguous misaligned and strided/broadcast entries, strided
//! outputs, the entry for inputs repeating every row), a set of fused kernels, and every reduction and row op; on
//! compute capability 8.0 and newer, also the sm_80 text of every kernel
//! that has one (those rounding to `bf16`).
//!
//! `cargo run -p tensorfn-kernels --example gpu_check` (exits 0 with a
//! note when no GPU is present; pass `--require-gpu` to fail instead).

#[path = "../src/test_support.rs"]
mod test_support;
use cudarc::driver::{result, sys};
use std::ffi::{c_void, CString};
use std::process::ExitCode;
use tensorfn_kernels::abi::StridedMeta;
use tensorfn_kernels::builtin::{self, BLOCK};
use tensorfn_kernels::interp::{self, run_elementwise, HostData, HostView};
use tensorfn_kernels::ir::{ElementwiseBuilder, Kernel};
use tensorfn_kernels::ptx::Target;
use tensorfn_kernels::{BinaryOp, CmpOp, DTypeKind, ReduceOp, RowOp, UnaryOp};
use test_support::Rng;

type Res<T> = Result<T, String>;

fn drv<T>(r: Result<T, result::DriverError>, what: &str) -> Res<T> {
    r.map_err(|e| format!("{what}: {e:?}"))
}

struct Gpu {
    _ctx: sys::CUcontext,
}

impl Gpu {
    fn new() -> Res<Gpu> {
        // cudarc panics on first use when the driver library is missing.
        if !unsafe { sys::is_culib_present() } {
            return Err("the CUDA driver library (libcuda) is not installed".into());
        }
        drv(result::init(), "cuInit")?;
        let dev = drv(result::device::get(0), "device 0")?;
        let ctx = drv(unsafe { result::primary_ctx::retain(dev) }, "context")?;
        drv(unsafe { result::ctx::set_current(ctx) }, "set context")?;
        Ok(Gpu { _ctx: ctx })
    }
}

/// The best PTX target of device 0.
fn device_target() -> Res<Target> {
    let dev = drv(result::device::get(0), "device 0")?;
    let attr = |a| {
        drv(
            unsafe { result::device::get_attribute(dev, a) },
            "attribute",
        )
    };
    let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    Ok(Target::for_compute_capability(major as u32, minor as u32))
}

/// A device buffer freed on drop.
struct DevBuf {
    ptr: sys::CUdeviceptr,
    len: usize,
}

impl DevBuf {
    fn from_bytes(bytes: &[u8]) -> Res<DevBuf> {
        let len = bytes.len().max(1);
        let ptr = drv(unsafe { result::malloc_sync(len + 64) }, "malloc")?;
        if !bytes.is_empty() {
            drv(unsafe { result::memcpy_htod_sync(ptr, bytes) }, "htod")?;
        }
        Ok(DevBuf { ptr, len })
    }
    fn read(&self, n: usize) -> Res<Vec<u8>> {
        let mut v = vec![0u8; n];
        if n > 0 {
            drv(
                unsafe { result::memcpy_dtoh_sync(&mut v, self.ptr) },
                "dtoh",
            )?;
        }
        let _ = self.len;
        Ok(v)
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        unsafe {
            let _ = result::free_sync(self.ptr);
        }
    }
}

struct Module {
    module: sys::CUmodule,
}

impl Module {
    fn load(ptx: &str) -> Res<Module> {
        let src = CString::new(ptx).map_err(|e| e.to_string())?;
        let module = drv(
            unsafe { result::module::load_data(src.as_ptr() as *const c_void) },
            "load PTX",
        )?;
        Ok(Module { module })
    }
    fn function(&self, name: &str) -> Res<sys::CUfunction> {
        let n = CString::new(name).map_err(|e| e.to_string())?;
        drv(
            unsafe { result::module::get_function(self.module, n) },
            name,
        )
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        unsafe {
            let _ = result::module::unload(self.module);
        }
    }
}

/// Launches `f` with parameters given as byte images (each pushed by
/// pointer, as cuLaunchKernel expects), then synchronises.
fn launch(f: sys::CUfunction, grid: u32, block: u32, params: &mut [Vec<u8>]) -> Res<()> {
    let mut ptrs: Vec<*mut c_void> = params
        .iter_mut()
        .map(|p| p.as_mut_ptr() as *mut c_void)
        .collect();
    drv(
        unsafe {
            result::launch_kernel(
                f,
                (grid, 1, 1),
                (block, 1, 1),
                0,
                std::ptr::null_mut(),
                &mut ptrs,
            )
        },
        "launch",
    )?;
    drv(result::ctx::synchronize(), "synchronize")
}

fn u64_param(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

// ------------------------------------------------------------ host data

fn to_bytes(d: &HostData) -> Vec<u8> {
    match d {
        HostData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::F16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        HostData::BF16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        HostData::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        HostData::U8(v) => v.clone(),
        HostData::Bool(v) => v.iter().map(|&b| b as u8).collect(),
    }
}

fn from_bytes(dt: DTypeKind, b: &[u8]) -> HostData {
    let c = |n: usize| b.chunks_exact(n);
    match dt {
        DTypeKind::F32 => HostData::F32(
            c(4).map(|x| f32::from_le_bytes(x.try_into().unwrap()))
                .collect(),
        ),
        DTypeKind::F64 => HostData::F64(
            c(8).map(|x| f64::from_le_bytes(x.try_into().unwrap()))
                .collect(),
        ),
        DTypeKind::F16 => HostData::F16(
            c(2).map(|x| half::f16::from_bits(u16::from_le_bytes(x.try_into().unwrap())))
                .collect(),
        ),
        DTypeKind::BF16 => HostData::BF16(
            c(2).map(|x| half::bf16::from_bits(u16::from_le_bytes(x.try_into().unwrap())))
                .collect(),
        ),
        DTypeKind::I32 => HostData::I32(
            c(4).map(|x| i32::from_le_bytes(x.try_into().unwrap()))
                .collect(),
        ),
        DTypeKind::I64 => HostData::I64(
            c(8).map(|x| i64::from_le_bytes(x.try_into().unwrap()))
                .collect(),
        ),
        DTypeKind::U8 => HostData::U8(b.to_vec()),
        DTypeKind::Bool => HostData::Bool(b.iter().map(|&x| x != 0).collect()),
    }
}

/// Random elements of `dt`: ordinary values, raw bit patterns (subnormals,
/// NaN, huge), and the usual edge values.
fn random_data(rng: &mut Rng, dt: DTypeKind, n: usize) -> HostData {
    let vals: Vec<f64> = (0..n)
        .map(|_| match rng.below(10) {
            0 => [
                0.0,
                -0.0,
                1.0,
                -1.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
                65504.0,
                1e-40,
            ][rng.below(9)],
            1 | 2 => match dt {
                DTypeKind::F32 => f32::from_bits(rng.next() as u32) as f64,
                DTypeKind::F16 => half::f16::from_bits(rng.next() as u16).to_f64(),
                DTypeKind::BF16 => half::bf16::from_bits(rng.next() as u16).to_f64(),
                DTypeKind::F64 => f64::from_bits(rng.next()),
                _ => (rng.next() as i64) as f64,
            },
            _ => (rng.unit() - 0.5) * 40.0,
        })
        .collect();
    let mut d = HostData::from_f64(dt, &vals);
    if let HostData::I64(v) = &mut d {
        for x in v.iter_mut().step_by(4) {
            *x = rng.next() as i64;
        }
    }
    d
}

/// Equal bits, or both NaN.
fn same(a: &HostData, b: &HostData) -> Option<usize> {
    let (x, y) = (to_bytes(a), to_bytes(b));
    let size = a.dtype().size_bytes();
    let (fa, fb) = (a.to_f64_vec(), b.to_f64_vec());
    (0..fa.len()).find(|&i| {
        let bits_eq = x[i * size..(i + 1) * size] == y[i * size..(i + 1) * size];
        !(bits_eq || (fa[i].is_nan() && fb[i].is_nan()))
    })
}

// ------------------------------------------------------------ kernels

fn unary_ir(op: UnaryOp, dt: DTypeKind) -> Option<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let x = k.input(dt);
    let y = k.unary(op, x);
    k.output(y).ok()
}

fn binary_ir(op: BinaryOp, dt: DTypeKind) -> Option<Kernel> {
    let mut k = ElementwiseBuilder::new();
    let a = k.input(dt);
    let b = k.input(dt);
    let c = k.binary(op, a, b);
    k.output(c).ok()
}

fn cast_ir(from: DTypeKind, to: DTypeKind) -> Kernel {
    let mut k = ElementwiseBuilder::new();
    let x = k.input(from);
    let y = k.cast(x, to);
    k.output(y).expect("casts are total")
}

fn fused_irs() -> Vec<(String, Kernel)> {
    let mut out = Vec::new();
    for dt in [
        DTypeKind::F32,
        DTypeKind::F16,
        DTypeKind::F64,
        DTypeKind::BF16,
    ] {
        let mut k = ElementwiseBuilder::new();
        let x = k.input(dt);
        let s = k.unary(UnaryOp::Sin, x);
        let two = k.constant(2.0, dt);
        let m = k.binary(BinaryOp::Mul, s, two);
        let five = k.constant(5.0, dt);
        let y = k.binary(BinaryOp::Add, m, five);
        out.push((format!("fused_sin_{dt}"), k.output(y).unwrap()));
    }
    let mut k = ElementwiseBuilder::new();
    let mask = k.input(DTypeKind::Bool);
    let i = k.input(DTypeKind::I64);
    let x = k.input(DTypeKind::F64);
    let y = k.input(DTypeKind::BF16);
    let u = k.input(DTypeKind::U8);
    let fi = k.cast(i, DTypeKind::F64);
    let a = k.binary(BinaryOp::Mul, fi, x);
    let yb = k.cast(y, DTypeKind::F64);
    let fu = k.cast(u, DTypeKind::F64);
    let b = k.binary(BinaryOp::Add, yb, fu);
    let s = k.select(mask, a, b);
    let g = k.compare(CmpOp::Gt, s, x);
    let o = k.select(g, s, x);
    let out_v = k.cast(o, DTypeKind::BF16);
    out.push(("fused_mixed".into(), k.output(out_v).unwrap()));
    let mut k = ElementwiseBuilder::new();
    let c = k.constant(0.1, DTypeKind::BF16);
    out.push(("fused_fill".into(), k.output(c).unwrap()));
    out
}

/// Runs `ptx`'s elementwise entries on random data in several layouts and
/// compares with the interpreter. Returns the number of elements checked.
fn check_elementwise(rng: &mut Rng, name: &str, ptx: &str, kernel: &Kernel) -> Res<usize> {
    let module = Module::load(ptx)?;
    let contig = module.function(&format!("{name}_contig"))?;
    let strided = module.function(&format!("{name}_strided"))?;
    let cols_entry = module.function(&format!("{name}_cols"))?;
    let ins = kernel.inputs();
    let out_dt = kernel.output_dtype();
    let mut checked = 0;
    for case in 0..4 {
        let n = [1, 37, 1000 + rng.below(500), 70_001][case];
        let data: Vec<HostData> = ins.iter().map(|&d| random_data(rng, d, n + 1)).collect();
        // case 0, 2: aligned (vector path and tail); 1, 3: pointers one
        // element past an aligned base (scalar path).
        let shift = case % 2;
        let bufs: Vec<DevBuf> = data
            .iter()
            .map(|d| DevBuf::from_bytes(&to_bytes(d)))
            .collect::<Res<_>>()?;
        let osize = out_dt.size_bytes();
        let out = DevBuf::from_bytes(&vec![0u8; (n + 1) * osize])?;
        let mut params = vec![u64_param(out.ptr + (shift * osize) as u64)];
        for (b, &d) in bufs.iter().zip(ins) {
            params.push(u64_param(b.ptr + (shift * d.size_bytes()) as u64));
        }
        params.push(u64_param(n as u64));
        let grid = if case == 3 {
            5
        } else {
            (n as u32).div_ceil(BLOCK).clamp(1, 1024)
        };
        launch(contig, grid, BLOCK, &mut params)?;
        let got = from_bytes(
            out_dt,
            &out.read((n + 1) * osize)?[shift * osize..(shift + n) * osize],
        );
        let views: Vec<HostView> = data
            .iter()
            .map(|d| HostView::strided(d, shift, vec![1]))
            .collect();
        let want = run_elementwise(kernel, &views, &[n]).map_err(|e| e.to_string())?;
        if let Some(i) = same(&got, &want) {
            return Err(format!(
                "{name}_contig n={n} shift={shift}: element {i}: gpu {} interp {} (inputs {:?})",
                got.to_f64_vec()[i],
                want.to_f64_vec()[i],
                data.iter()
                    .map(|d| d.to_f64_vec()[i + shift])
                    .collect::<Vec<_>>()
            ));
        }
        checked += n;
    }
    // strided: dims [a, b, c]; inputs broadcast / permuted / spaced;
    // output transposed in a larger buffer
    for _ in 0..3 {
        let dims = [1 + rng.below(5), 1 + rng.below(40), 1 + rng.below(9)];
        let n: usize = dims.iter().product();
        let mut in_strides = Vec::new();
        let mut data = Vec::new();
        for &d in ins {
            let s: Vec<usize> = (0..3).map(|_| [0, 1, 3, 50, 400][rng.below(5)]).collect();
            let span: usize = dims.iter().zip(&s).map(|(&n, &s)| (n - 1) * s).sum();
            data.push(random_data(rng, d, span + 2));
            in_strides.push(s);
        }
        // output: dims stored as [c][b][a] (a transposed view)
        let out_strides = vec![1, dims[0], dims[0] * dims[1]];
        let bufs: Vec<DevBuf> = data
            .iter()
            .map(|d| DevBuf::from_bytes(&to_bytes(d)))
            .collect::<Res<_>>()?;
        let osize = out_dt.size_bytes();
        let out = DevBuf::from_bytes(&vec![0u8; n * osize])?;
        let in_refs: Vec<&[usize]> = in_strides.iter().map(|s| s.as_slice()).collect();
        let meta = StridedMeta::new(&dims, &out_strides, &in_refs);
        let mut params = vec![u64_param(out.ptr)];
        for (b, &d) in bufs.iter().zip(ins) {
            params.push(u64_param(b.ptr + d.size_bytes() as u64));
        }
        params.push(u64_param(n as u64));
        params.push(meta.words().iter().flat_map(|w| w.to_le_bytes()).collect());
        launch(strided, 3, BLOCK, &mut params)?;
        let raw = from_bytes(out_dt, &out.read(n * osize)?);
        let views: Vec<HostView> = data
            .iter()
            .zip(&in_strides)
            .map(|(d, s)| HostView::strided(d, 1, s.clone()))
            .collect();
        let want = run_elementwise(kernel, &views, &dims).map_err(|e| e.to_string())?;
        // gather the GPU's output back into row-major order
        let raw_bytes = to_bytes(&raw);
        let mut gathered = Vec::with_capacity(n * osize);
        for i in 0..n {
            let (a, b, c) = (
                i / (dims[1] * dims[2]),
                (i / dims[2]) % dims[1],
                i % dims[2],
            );
            let pos = a * out_strides[0] + b * out_strides[1] + c * out_strides[2];
            gathered.extend_from_slice(&raw_bytes[pos * osize..(pos + 1) * osize]);
        }
        let got = from_bytes(out_dt, &gathered);
        if let Some(i) = same(&got, &want) {
            return Err(format!(
                "{name}_strided dims {dims:?}: element {i}: gpu {} interp {}",
                got.to_f64_vec()[i],
                want.to_f64_vec()[i]
            ));
        }
        checked += n;
    }
    // cols: [rows, cols] with some inputs one row read by every row;
    // rows of a multiple of the vector width and not, an empty batch,
    // aligned and one-element-shifted pointers, grids short of the work.
    for case in 0..6 {
        let cols = [8, 13, 64, 1, 72, 3][case];
        let rows = [1 + rng.below(300), 1 + rng.below(40), 0, 37, 2000, 5][case];
        let n = rows * cols;
        let shift = case % 2;
        let mask: u64 = rng.below(1 << ins.len()) as u64;
        let data: Vec<HostData> = ins
            .iter()
            .enumerate()
            .map(|(k, &d)| {
                let len = if mask >> k & 1 == 1 { cols } else { n };
                random_data(rng, d, len + 1)
            })
            .collect();
        let bufs: Vec<DevBuf> = data
            .iter()
            .map(|d| DevBuf::from_bytes(&to_bytes(d)))
            .collect::<Res<_>>()?;
        let osize = out_dt.size_bytes();
        let out = DevBuf::from_bytes(&vec![0u8; (n + 1) * osize])?;
        let mut params = vec![u64_param(out.ptr + (shift * osize) as u64)];
        for (b, &d) in bufs.iter().zip(ins) {
            params.push(u64_param(b.ptr + (shift * d.size_bytes()) as u64));
        }
        params.extend([n as u64, cols as u64, mask].map(u64_param));
        let grid = [3, 1, 1, 2, 1024, 1][case];
        launch(cols_entry, grid, BLOCK, &mut params)?;
        let got = from_bytes(
            out_dt,
            &out.read((n + 1) * osize)?[shift * osize..(shift + n) * osize],
        );
        let views: Vec<HostView> = data
            .iter()
            .enumerate()
            .map(|(k, d)| {
                let row = if mask >> k & 1 == 1 { 0 } else { cols };
                HostView::strided(d, shift, vec![row, 1])
            })
            .collect();
        let want = run_elementwise(kernel, &views, &[rows, cols]).map_err(|e| e.to_string())?;
        if let Some(i) = same(&got, &want) {
            return Err(format!(
                "{name}_cols [{rows}, {cols}] mask {mask:#b} shift={shift}: element {i}: gpu {} interp {}",
                got.to_f64_vec()[i],
                want.to_f64_vec()[i]
            ));
        }
        checked += n;
    }
    Ok(checked)
}

/// 16-bit values where one-instruction f16/bf16 arithmetic could part
/// from the f32 op rounded to 16 bits: every subnormal and the smallest
/// normals, values near 1 and near the overflow threshold, infinities and
/// NaN, and random bit patterns.
fn edge_halves(rng: &mut Rng, dt: DTypeKind) -> HostData {
    let mut bits: Vec<u16> = Vec::new();
    let (subnormals, one, max) = match dt {
        DTypeKind::F16 => (0x0400u16, 0x3C00u16, 0x7BFFu16),
        _ => (0x0080, 0x3F80, 0x7F7F),
    };
    for sign in [0u16, 0x8000] {
        let step = (subnormals as usize / 128).max(1);
        bits.extend((0..subnormals + 8).step_by(step).map(|b| b | sign));
        bits.extend((one - 4..one + 4).map(|b| b | sign));
        bits.extend((max - 4..=max + 1).map(|b| b | sign));
        bits.push((max + 2) | sign); // NaN
    }
    bits.extend((0..64).map(|_| rng.next() as u16));
    match dt {
        DTypeKind::F16 => HostData::F16(bits.into_iter().map(half::f16::from_bits).collect()),
        _ => HostData::BF16(bits.into_iter().map(half::bf16::from_bits).collect()),
    }
}

/// `a op b` for 16-bit `dt` over every pair of [`edge_halves`], on the
/// contig entry of `ptx`, against the interpreter. Returns the number of
/// pairs checked.
fn check_pairs(rng: &mut Rng, name: &str, ptx: &str, kernel: &Kernel, dt: DTypeKind) -> Res<usize> {
    let module = Module::load(ptx)?;
    let contig = module.function(&format!("{name}_contig"))?;
    let values = to_bytes(&edge_halves(rng, dt));
    let m = values.len() / 2;
    let (mut a, mut b) = (Vec::with_capacity(2 * m * m), Vec::with_capacity(2 * m * m));
    for i in 0..m {
        for j in 0..m {
            a.extend_from_slice(&values[2 * i..2 * i + 2]);
            b.extend_from_slice(&values[2 * j..2 * j + 2]);
        }
    }
    let n = m * m;
    let (da, db) = (DevBuf::from_bytes(&a)?, DevBuf::from_bytes(&b)?);
    let out = DevBuf::from_bytes(&vec![0u8; 2 * n])?;
    let mut params = vec![
        u64_param(out.ptr),
        u64_param(da.ptr),
        u64_param(db.ptr),
        u64_param(n as u64),
    ];
    launch(
        contig,
        (n as u32).div_ceil(BLOCK).min(1024),
        BLOCK,
        &mut params,
    )?;
    let got = from_bytes(dt, &out.read(2 * n)?);
    let (ha, hb) = (from_bytes(dt, &a), from_bytes(dt, &b));
    let views = [
        HostView::strided(&ha, 0, vec![1]),
        HostView::strided(&hb, 0, vec![1]),
    ];
    let want = run_elementwise(kernel, &views, &[n]).map_err(|e| e.to_string())?;
    match same(&got, &want) {
        Some(i) => Err(format!(
            "{name}: {:?} and {:?}: gpu {} interp {}",
            ha.to_f64_vec()[i],
            hb.to_f64_vec()[i],
            got.to_f64_vec()[i],
            want.to_f64_vec()[i]
        )),
        None => Ok(n),
    }
}

fn check_rows(
    rng: &mut Rng,
    k: &builtin::Kernel,
    dt: DTypeKind,
    run: &dyn Fn(&HostData, usize, usize) -> HostData,
) -> Res<usize> {
    let module = Module::load(&k.ptx)?;
    let f = module.function(&k.name)?;
    let mut checked = 0;
    for (rows, cols) in [
        (1, 1),
        (3, 255),
        (2, 256),
        (5, 257),
        (300, 40),
        (4, 5000),
        (1, 0),
    ] {
        let x = random_data(rng, dt, rows * cols);
        let xb = DevBuf::from_bytes(&to_bytes(&x))?;
        let want = run(&x, rows, cols);
        let osize = want.dtype().size_bytes();
        let out = DevBuf::from_bytes(&vec![0u8; want.len() * osize])?;
        let mut params = vec![
            u64_param(out.ptr),
            u64_param(xb.ptr),
            u64_param(rows as u64),
            u64_param(cols as u64),
        ];
        let grid = (rows as u32).min(if rows > 100 { 7 } else { 65535 });
        launch(f, grid, BLOCK, &mut params)?;
        let got = from_bytes(want.dtype(), &out.read(want.len() * osize)?);
        if let Some(i) = same(&got, &want) {
            return Err(format!(
                "{} rows={rows} cols={cols}: element {i}: gpu {} interp {}",
                k.name,
                got.to_f64_vec()[i],
                want.to_f64_vec()[i]
            ));
        }
        checked += rows * cols;
    }
    Ok(checked)
}

fn run_all() -> Res<(usize, usize)> {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let mut kernels = 0;
    let mut elements = 0;
    let mut failures = Vec::new();
    let mut record = |name: &str, r: Res<usize>| match r {
        Ok(n) => {
            kernels += 1;
            elements += n;
        }
        Err(e) => {
            eprintln!("MISMATCH {name}: {e}");
            failures.push(name.to_string());
        }
    };
    for dt in DTypeKind::ALL {
        for op in UnaryOp::ALL {
            if let (Some(ir), Ok(k)) = (unary_ir(op, dt), builtin::try_unary(op, dt)) {
                let r = check_elementwise(&mut rng, &k.name, &k.ptx, &ir);
                record(&k.name, r);
            }
        }
        for op in BinaryOp::ALL {
            if let (Some(ir), Ok(k)) = (binary_ir(op, dt), builtin::try_binary(op, dt)) {
                let r = check_elementwise(&mut rng, &k.name, &k.ptx, &ir);
                record(&k.name, r);
            }
        }
        for to in DTypeKind::ALL {
            let k = builtin::cast(dt, to);
            let r = check_elementwise(&mut rng, &k.name, &k.ptx, &cast_ir(dt, to));
            record(&k.name, r);
        }
        for op in [
            ReduceOp::Sum,
            ReduceOp::Mean,
            ReduceOp::Max,
            ReduceOp::Min,
            ReduceOp::ArgMax,
            ReduceOp::ArgMin,
        ] {
            if let Ok(k) = builtin::try_reduce(op, dt) {
                let run =
                    move |x: &HostData, r: usize, c: usize| interp::reduce(op, x, r, c).unwrap();
                let res = check_rows(&mut rng, &k, dt, &run);
                record(&k.name, res);
            }
        }
        for op in RowOp::ALL {
            if let Ok(k) = builtin::try_row(op, dt) {
                let run = move |x: &HostData, r: usize, c: usize| interp::row(op, x, r, c).unwrap();
                let res = check_rows(&mut rng, &k, dt, &run);
                record(&k.name, res);
            }
        }
    }
    for (name, ir) in fused_irs() {
        let ptx = tensorfn_kernels::ptx::elementwise(&ir, &name).map_err(|e| e.to_string())?;
        let r = check_elementwise(&mut rng, &name, &ptx, &ir);
        record(&name, r);
    }
    let target = device_target()?;
    if target != Target::Sm70 {
        // The same checks on the text written for this device, where it
        // differs from the sm_70 one.
        let differs = |ir: &Kernel| tensorfn_kernels::ptx::differs_on(ir, target);
        let mut cases: Vec<(String, String, Kernel)> = Vec::new();
        for (name, ir) in fused_irs() {
            if differs(&ir) {
                let ptx = tensorfn_kernels::ptx::elementwise_for(&ir, &name, target)
                    .map_err(|e| e.to_string())?;
                cases.push((name, ptx, ir));
            }
        }
        for dt in DTypeKind::ALL {
            for op in UnaryOp::ALL {
                if let (Some(ir), Ok(k)) =
                    (unary_ir(op, dt), builtin::try_unary_for(op, dt, target))
                {
                    cases.extend(differs(&ir).then_some((k.name, k.ptx, ir)));
                }
            }
            for op in BinaryOp::ALL {
                if let (Some(ir), Ok(k)) =
                    (binary_ir(op, dt), builtin::try_binary_for(op, dt, target))
                {
                    cases.extend(differs(&ir).then_some((k.name, k.ptx, ir)));
                }
            }
            for to in DTypeKind::ALL {
                let (ir, k) = (cast_ir(dt, to), builtin::cast_for(dt, to, target));
                cases.extend(differs(&ir).then_some((k.name, k.ptx, ir)));
            }
        }
        for (name, ptx, ir) in cases {
            let r = check_elementwise(&mut rng, &name, &ptx, &ir);
            record(&format!("{name} ({})", target.arch()), r);
        }
    }
    // 16-bit `+ - *` computed in 16-bit registers, on every pair of edge
    // values (subnormal results included), in this device's text.
    for dt in [DTypeKind::F16, DTypeKind::BF16] {
        for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul] {
            if let (Some(ir), Ok(k)) = (binary_ir(op, dt), builtin::try_binary_for(op, dt, target))
            {
                let r = check_pairs(&mut rng, &k.name, &k.ptx, &ir, dt);
                record(&format!("{} pairs ({})", k.name, target.arch()), r);
            }
        }
    }
    if failures.is_empty() {
        Ok((kernels, elements))
    } else {
        Err(format!(
            "{} kernels differ from the interpreter: {}",
            failures.len(),
            failures.join(", ")
        ))
    }
}

/// Times `reps` launches after a warm-up; returns seconds per launch.
fn time_launch(f: sys::CUfunction, grid: u32, params: &mut [Vec<u8>], reps: u32) -> Res<f64> {
    launch(f, grid, BLOCK, params)?;
    let t = std::time::Instant::now();
    for _ in 0..reps {
        let mut ptrs: Vec<*mut c_void> = params
            .iter_mut()
            .map(|p| p.as_mut_ptr() as *mut c_void)
            .collect();
        drv(
            unsafe {
                result::launch_kernel(
                    f,
                    (grid, 1, 1),
                    (BLOCK, 1, 1),
                    0,
                    std::ptr::null_mut(),
                    &mut ptrs,
                )
            },
            "launch",
        )?;
    }
    drv(result::ctx::synchronize(), "synchronize")?;
    Ok(t.elapsed().as_secs_f64() / reps as f64)
}

/// Effective bandwidth (bytes read + written per second) of a few kernels
/// on 2^26-element tensors.
fn bench() -> Res<()> {
    let n: usize = 1 << 26;
    let grid = 132 * 16;
    let cases: Vec<(String, builtin::Kernel, Vec<DTypeKind>, DTypeKind)> = vec![
        (
            "add f32".into(),
            builtin::binary(BinaryOp::Add, DTypeKind::F32),
            vec![DTypeKind::F32; 2],
            DTypeKind::F32,
        ),
        (
            "sin f32".into(),
            builtin::unary(UnaryOp::Sin, DTypeKind::F32),
            vec![DTypeKind::F32],
            DTypeKind::F32,
        ),
        (
            "exp f32".into(),
            builtin::unary(UnaryOp::Exp, DTypeKind::F32),
            vec![DTypeKind::F32],
            DTypeKind::F32,
        ),
        (
            "gelu f16".into(),
            builtin::unary(UnaryOp::Gelu, DTypeKind::F16),
            vec![DTypeKind::F16],
            DTypeKind::F16,
        ),
        (
            "gelu f32".into(),
            builtin::unary(UnaryOp::Gelu, DTypeKind::F32),
            vec![DTypeKind::F32],
            DTypeKind::F32,
        ),
        (
            "sin f64".into(),
            builtin::unary(UnaryOp::Sin, DTypeKind::F64),
            vec![DTypeKind::F64],
            DTypeKind::F64,
        ),
        (
            "cast f32->bf16".into(),
            builtin::cast(DTypeKind::F32, DTypeKind::BF16),
            vec![DTypeKind::F32],
            DTypeKind::BF16,
        ),
    ];
    for (what, k, ins, out_dt) in cases {
        let module = Module::load(&k.ptx)?;
        let mut rng = Rng(5);
        let bufs: Vec<DevBuf> = ins
            .iter()
            .map(|&d| {
                let data = HostData::from_f64(
                    d,
                    &(0..n).map(|_| (rng.unit() - 0.5) * 8.0).collect::<Vec<_>>(),
                );
                DevBuf::from_bytes(&to_bytes(&data))
            })
            .collect::<Res<_>>()?;
        let out = DevBuf::from_bytes(&vec![0u8; n * out_dt.size_bytes()])?;
        let bytes = (ins.iter().map(|d| d.size_bytes()).sum::<usize>() + out_dt.size_bytes()) * n;
        // contiguous
        let mut params = vec![u64_param(out.ptr)];
        params.extend(bufs.iter().map(|b| u64_param(b.ptr)));
        params.push(u64_param(n as u64));
        let t = time_launch(module.function(&k.contig_entry())?, grid, &mut params, 20)?;
        // strided: the same elements as a [2^13, 2^13] transposed view
        let side = 1 << 13;
        let in_strides: Vec<Vec<usize>> = ins.iter().map(|_| vec![1, side]).collect();
        let refs: Vec<&[usize]> = in_strides.iter().map(|s| s.as_slice()).collect();
        let meta = StridedMeta::new(&[side, side], &[side, 1], &refs);
        let mut sparams = vec![u64_param(out.ptr)];
        sparams.extend(bufs.iter().map(|b| u64_param(b.ptr)));
        sparams.push(u64_param(n as u64));
        sparams.push(meta.words().iter().flat_map(|w| w.to_le_bytes()).collect());
        let ts = time_launch(module.function(&k.strided_entry())?, grid, &mut sparams, 5)?;
        println!(
            "bench {what:16} contig {:7.1} us {:6.0} GB/s | strided (transposed) {:7.1} us {:6.0} GB/s",
            t * 1e6,
            bytes as f64 / t / 1e9,
            ts * 1e6,
            bytes as f64 / ts / 1e9
        );
    }
    // row kernels: 8192 rows of 8192 f32
    let (rows, cols) = (8192usize, 8192usize);
    let x = HostData::F32(
        (0..rows * cols)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.01)
            .collect(),
    );
    let xb = DevBuf::from_bytes(&to_bytes(&x))?;
    let out = DevBuf::from_bytes(&vec![0u8; rows * cols * 4])?;
    for k in [
        builtin::reduce(ReduceOp::Sum, DTypeKind::F32),
        builtin::reduce(ReduceOp::ArgMax, DTypeKind::F32),
        builtin::row(RowOp::Softmax, DTypeKind::F32),
    ] {
        let module = Module::load(&k.ptx)?;
        let mut params = vec![
            u64_param(out.ptr),
            u64_param(xb.ptr),
            u64_param(rows as u64),
            u64_param(cols as u64),
        ];
        let t = time_launch(module.function(&k.name)?, rows as u32, &mut params, 10)?;
        let bytes = if k.name.contains("softmax") {
            2 * rows * cols * 4
        } else {
            rows * cols * 4
        };
        println!(
            "bench {:24} {:7.1} us {:6.0} GB/s (reads + writes once)",
            k.name,
            t * 1e6,
            bytes as f64 / t / 1e9
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let require = std::env::args().any(|a| a == "--require-gpu");
    let run_bench = std::env::args().any(|a| a == "--bench");
    let _gpu = match Gpu::new() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("gpu-check: no usable GPU ({e})");
            return if require {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run_all() {
        Ok((k, n)) => {
            println!("gpu-check: {k} kernels, {n} elements: GPU output equals the interpreter bit for bit");
            if run_bench {
                if let Err(e) = bench() {
                    eprintln!("gpu-check: benchmark failed: {e}");
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpu-check: {e}");
            ExitCode::FAILURE
        }
    }
}
