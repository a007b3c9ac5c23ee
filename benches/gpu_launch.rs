//! Host time per queued GPU call: what tensorfn's checked calls cost the
//! host beside a bare driver launch of a kernel with the same parameters.
//!
//! Below about 2^22 elements an elementwise kernel takes the device a few
//! microseconds, about what queuing it takes the host, so the host's side
//! of a call decides those cases. Each case here queues batches of calls
//! on small tensors (1024 elements: the device is never the limit) and
//! reports the host time per call without the wait for the device
//! (`enqueue_us`, beside the usual `median_us` with it):
//!
//! - `launch_raw`: `cuLaunchKernel` of a kernel taking an output, an input
//!   and a length, on a stream of the same context (the floor);
//! - `launch_raw_bind`: the same with `cuCtxSetCurrent` before each
//!   launch, as a call that must make its context current does;
//! - `launch_raw_exp`: `cuLaunchKernel` of tensorfn's own built-in `exp`
//!   kernel (its sm_80 text, loaded the same way), so that what the
//!   driver's launch costs for that kernel is told apart from what
//!   tensorfn's call adds;
//! - `launch_fused`: a `tensor_fn!` function of one fused kernel
//!   (`sin(x) * 2 + 5`), its output allocated and dropped;
//! - `launch_builtin`: a built-in op (`x.exp()`), the same way.
//!
//! `scripts/bench-report` shows them with their ratio to `launch_raw`.
//! Run: `cargo bench --bench gpu_launch -- --quick`.

mod common;

use common::*;
use cudarc::driver::{result, sys};
use std::ffi::{c_void, CString};
use tensorfn::__kernels::{builtin, ptx::Target, UnaryOp};
use tensorfn::prelude::*;
use tensorfn::DTypeKind;

type Vector = Tensor<Cuda, f32, shape![_]>;

mod chains {
    use tensorfn::prelude::*;

    tensor_fn! {
        /// `sin(x) * 2 + 5`: one fused kernel.
        pub fn sin_affine(x: &Tensor<Cuda, f32, [N]>) -> Tensor<Cuda, f32, [N]> {
            sin(x) * 2.0 + 5.0
        }
    }
}

/// Elements of every tensor here: a few blocks, so the device finishes
/// each kernel faster than the host queues the next.
const N: usize = 1024;

/// A kernel with the parameters of a one-input elementwise kernel that
/// writes its output's first element.
const RAW_PTX: &str = "\
.version 7.0
.target sm_70
.address_size 64
.visible .entry raw(.param .u64 p_out, .param .u64 p_in, .param .u64 p_n)
{
\t.reg .b64 %rd<3>;
\t.reg .f32 %f<2>;
\tld.param.u64 %rd0, [p_out];
\tld.param.u64 %rd1, [p_in];
\tcvta.to.global.u64 %rd0, %rd0;
\tcvta.to.global.u64 %rd1, %rd1;
\tld.global.f32 %f0, [%rd1];
\tst.global.f32 [%rd0], %f0;
\tret;
}
";

/// A driver call's status as this crate's error.
fn driver(what: &str, e: result::DriverError) -> Error {
    Error::Driver {
        op: what.into(),
        message: format!("{e:?}"),
    }
}

/// A stream and a kernel taking `(out, in, n)`, in the context tensorfn
/// made current on this thread.
struct RawKernel {
    stream: sys::CUstream,
    function: sys::CUfunction,
}

impl RawKernel {
    /// Entry `entry` of the PTX module `ptx`.
    fn new(ptx: &str, entry: &str) -> Result<RawKernel> {
        let text = CString::new(ptx).expect("no NUL in the PTX");
        // SAFETY: the text is NUL-terminated PTX.
        let module = unsafe { result::module::load_data(text.as_ptr() as *const c_void) }
            .map_err(|e| driver("cuModuleLoadData", e))?;
        let entry = CString::new(entry).expect("no NUL in the entry name");
        // SAFETY: the module is loaded and kept for the process.
        let function = unsafe { result::module::get_function(module, entry) }
            .map_err(|e| driver("cuModuleGetFunction", e))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| driver("cuStreamCreate", e))?;
        Ok(RawKernel { stream, function })
    }

    /// Makes the current context current again, as a per-call bind does.
    fn bind(&self) -> Result<()> {
        let ctx = result::ctx::get_current()
            .map_err(|e| driver("cuCtxGetCurrent", e))?
            .ok_or_else(|| {
                driver(
                    "cuCtxGetCurrent",
                    result::DriverError(sys::CUresult::CUDA_ERROR_INVALID_CONTEXT),
                )
            })?;
        // SAFETY: the context is tensorfn's, retained for the process.
        unsafe { result::ctx::set_current(ctx) }.map_err(|e| driver("cuCtxSetCurrent", e))
    }

    fn launch(&self, out: u64, input: u64) -> Result<()> {
        let (mut out, mut input, mut n) = (out, input, N as u64);
        let mut params = [
            &mut out as *mut u64 as *mut c_void,
            &mut input as *mut u64 as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
        ];
        // SAFETY: three u64 parameters, as the entry declares; both
        // addresses hold at least one f32 of live device memory.
        unsafe {
            result::launch_kernel(
                self.function,
                (1, 1, 1),
                (256, 1, 1),
                0,
                self.stream,
                &mut params,
            )
        }
        .map_err(|e| driver("cuLaunchKernel", e))
    }

    fn sync(&self) -> Result<()> {
        // SAFETY: the stream is live.
        unsafe { result::stream::synchronize(self.stream) }
            .map_err(|e| driver("cuStreamSynchronize", e))
    }
}

/// Two live device buffers of at least one f32 each, from the driver.
fn raw_buffers() -> Result<(u64, u64)> {
    // SAFETY: plain allocations, kept for the process.
    let alloc = || unsafe { result::malloc_sync(N * 4) }.map_err(|e| driver("cuMemAlloc", e));
    Ok((alloc()?, alloc()?))
}

fn bench(args: &Args, name: &str, run: impl FnOnce(&Plan) -> Result<Timing>) {
    if !args.wants(name) {
        return;
    }
    let case = Case::new(name, "f32", N, (2 * N * 4) as u64, 0);
    match run(&args.plan()) {
        Ok(t) => case.emit("tensorfn", &t, None),
        Err(e) => case.emit_error("tensorfn", &e),
    }
}

fn main() {
    let args = Args::parse();
    emit_meta("gpu_launch", &args);
    if let Err(e) = sync_cuda() {
        emit_skipped("gpu_launch", &e);
        return;
    }
    let x = match Vector::rand_dims(1, &[N]) {
        Ok(x) => x,
        Err(e) => return emit_skipped("gpu_launch", &e),
    };
    bench(&args, "launch_raw", |plan| {
        let raw = RawKernel::new(RAW_PTX, "raw")?;
        let (out, input) = raw_buffers()?;
        time_call(plan, 1, |_| raw.launch(out, input), &|| raw.sync())
    });
    bench(&args, "launch_raw_bind", |plan| {
        let raw = RawKernel::new(RAW_PTX, "raw")?;
        let (out, input) = raw_buffers()?;
        time_call(
            plan,
            1,
            |_| raw.bind().and_then(|()| raw.launch(out, input)),
            &|| raw.sync(),
        )
    });
    bench(&args, "launch_raw_exp", |plan| {
        let k =
            builtin::try_unary_for(UnaryOp::Exp, DTypeKind::F32, Target::Sm80).map_err(|e| {
                Error::Driver {
                    op: "generating the exp kernel".into(),
                    message: e.to_string(),
                }
            })?;
        let raw = RawKernel::new(&k.ptx, &format!("{}_contig", k.name))?;
        let (out, input) = raw_buffers()?;
        time_call(plan, 1, |_| raw.launch(out, input), &|| raw.sync())
    });
    bench(&args, "launch_fused", |plan| {
        time_call(plan, 1, |_| chains::sin_affine(&x).map(drop), &sync_cuda)
    });
    bench(&args, "launch_builtin", |plan| {
        time_call(plan, 1, |_| x.exp().map(drop), &sync_cuda)
    });
}
