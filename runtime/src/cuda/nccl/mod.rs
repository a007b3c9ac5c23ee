//! NCCL, opened at run time: communicators over the contexts of this
//! process's GPUs and the collectives the typed API in
//! [`crate::collective`] queues on them.
//!
//! cudarc's bindings give the layouts (`ncclUniqueId`, `ncclConfig_t` of
//! NCCL 2.27, the first release PyTorch 2.11's `nvidia-nccl-cu12` and
//! `nvidia-nccl-cu13` wheels cover); the entry points are looked up here,
//! each by name, from `libnccl.so.2` (the wheels' name, which is not among
//! cudarc's candidates) or `libnccl.so`. A missing library or symbol is
//! `Error::NcclUnavailable` with the fix, never cudarc's panic, and statuses
//! are read as plain integers so that a newer library's codes (2.30's
//! `ncclTimeout`) are named, not undefined behaviour.
//!
//! Before the library is opened, `NCCL_NVLS_ENABLE=0` is put in the
//! process environment unless the user set it: NVLink multicast (NVLS)
//! stays off.
//!
//! Every communicator is non-blocking (`ncclConfig_t.blocking = 0`): calls
//! return at once and [`Comms`] polls `ncclCommGetAsyncError` and the
//! devices' streams until the work is done, an error comes back, or the
//! communicator's timeout passes; then every communicator of the group is
//! aborted (`ncclCommAbort`) and the call returns `Err`. A collective never
//! hangs the process on a peer that went away.
//!
//! Collectives run on a communication stream per device, not on the
//! context's stream: [`Comms::start`] records an event on the context's
//! stream (after every kernel that wrote the inputs) and makes the
//! communication stream wait for it, queues the NCCL calls, records a
//! second event after them and returns a [`Flight`] at once, so the
//! device keeps computing while the collective runs. [`Flight::wait`]
//! polls that event and the communicators' errors within the timeout;
//! the buffers the collective touches are kept alive by the flight until
//! then (dropping a flight waits too), so the context's stream-ordered
//! allocator never hands them out while NCCL still uses them.

#[cfg(test)]
mod tests;

use super::context::{context, lock, Context};
pub(crate) use super::context::{context as device, Context as Ctx};
use super::event::Event;
use super::overlap::Stream as CommStream;
use crate::error::{Error, Result};
use cudarc::nccl::sys as nc;
use std::any::Any;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// `ncclResult_t` as the library returns it.
type Status = c_int;
const SUCCESS: Status = 0;
const IN_PROGRESS: Status = 7;

/// `NCCL_VERSION(2, 27, 0)`: the `ncclConfig_t` layout cudarc binds.
const CONFIG_VERSION: u32 = 22700;
/// `NCCL_CONFIG_UNDEF_INT`: "use the library's default".
const UNDEF: c_int = c_int::MIN;

/// The names tried, in order.
pub(crate) const LIBRARY_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

type GetVersion = unsafe extern "C" fn(*mut c_int) -> Status;
type GetUniqueId = unsafe extern "C" fn(*mut nc::ncclUniqueId) -> Status;
type InitRankConfig = unsafe extern "C" fn(
    *mut nc::ncclComm_t,
    c_int,
    nc::ncclUniqueId,
    c_int,
    *mut nc::ncclConfig_t,
) -> Status;
type CommStatus = unsafe extern "C" fn(nc::ncclComm_t, *mut Status) -> Status;
type CommOp = unsafe extern "C" fn(nc::ncclComm_t) -> Status;
type ErrorString = unsafe extern "C" fn(Status) -> *const c_char;
type LastError = unsafe extern "C" fn(nc::ncclComm_t) -> *const c_char;
type Group = unsafe extern "C" fn() -> Status;
type Stream = *mut c_void;
type AllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    nc::ncclComm_t,
    Stream,
) -> Status;
type AllGather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    nc::ncclComm_t,
    Stream,
) -> Status;
type ReduceScatter = AllReduce;
type Broadcast = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    nc::ncclComm_t,
    Stream,
) -> Status;

/// The entry points of the NCCL this process opened.
pub(crate) struct Api {
    /// The name the loader opened.
    pub(crate) file: String,
    /// `ncclGetVersion`, e.g. `22705` for 2.27.5.
    pub(crate) version: i32,
    get_unique_id: GetUniqueId,
    init_rank_config: InitRankConfig,
    get_async_error: CommStatus,
    abort: CommOp,
    finalize: CommOp,
    destroy: CommOp,
    error_string: ErrorString,
    last_error: LastError,
    group_start: Group,
    group_end: Group,
    all_reduce: AllReduce,
    all_gather: AllGather,
    reduce_scatter: ReduceScatter,
    broadcast: Broadcast,
}

/// The error of a missing or unusable NCCL, with the fix.
pub(crate) fn unavailable(reason: impl Into<String>) -> Error {
    Error::NcclUnavailable {
        reason: reason.into(),
    }
}

/// Opens the first of `names` that loads and looks up every entry point;
/// `Err` names what is missing and how to install it.
pub(crate) fn load(names: &[&str]) -> Result<Api> {
    let mut handle = std::ptr::null_mut();
    let mut file = "";
    for name in names {
        let Ok(c) = CString::new(*name) else { continue };
        // SAFETY: dlopen with a valid C string; the handle stays open for
        // the life of the process.
        handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if !handle.is_null() {
            file = name;
            break;
        }
    }
    if handle.is_null() {
        return Err(unavailable(format!(
            "{} is not on the loader's path; install NCCL 2.27 or later (e.g. the pip wheel \
             nvidia-nccl-cu12) and add its lib folder (site-packages/nvidia/nccl/lib) to \
             LD_LIBRARY_PATH",
            names.join(" or ")
        )));
    }
    let sym = |name: &str| -> Result<*mut c_void> {
        let c = CString::new(name).expect("symbol names have no NUL");
        // SAFETY: `handle` is an open library; dlsym only reads it.
        let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
        if p.is_null() {
            Err(unavailable(format!(
                "{file} has no {name}; install NCCL 2.27 or later (e.g. the pip wheel \
                 nvidia-nccl-cu12)"
            )))
        } else {
            Ok(p)
        }
    };
    macro_rules! f {
        ($ty:ty, $name:literal) => {{
            let p = sym($name)?;
            // SAFETY: the symbol is NCCL's function of that name, whose C
            // signature `$ty` spells.
            unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
        }};
    }
    let get_version = f!(GetVersion, "ncclGetVersion");
    let mut version = 0;
    // SAFETY: writes one int.
    let s = unsafe { get_version(&mut version) };
    if s != SUCCESS || version < 22700 {
        return Err(unavailable(format!(
            "{file} is NCCL {}; tensorfn needs NCCL 2.27 or later (e.g. the pip wheel \
             nvidia-nccl-cu12)",
            version_text(version)
        )));
    }
    Ok(Api {
        file: file.to_string(),
        version,
        get_unique_id: f!(GetUniqueId, "ncclGetUniqueId"),
        init_rank_config: f!(InitRankConfig, "ncclCommInitRankConfig"),
        get_async_error: f!(CommStatus, "ncclCommGetAsyncError"),
        abort: f!(CommOp, "ncclCommAbort"),
        finalize: f!(CommOp, "ncclCommFinalize"),
        destroy: f!(CommOp, "ncclCommDestroy"),
        error_string: f!(ErrorString, "ncclGetErrorString"),
        last_error: f!(LastError, "ncclGetLastError"),
        group_start: f!(Group, "ncclGroupStart"),
        group_end: f!(Group, "ncclGroupEnd"),
        all_reduce: f!(AllReduce, "ncclAllReduce"),
        all_gather: f!(AllGather, "ncclAllGather"),
        reduce_scatter: f!(ReduceScatter, "ncclReduceScatter"),
        broadcast: f!(Broadcast, "ncclBroadcast"),
    })
}

/// `ncclGetVersion`'s number as `major.minor.patch`.
pub(crate) fn version_text(v: i32) -> String {
    if v >= 10000 {
        format!("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, v % 1000 / 100, v % 100)
    }
}

/// Keeps NVLink multicast off unless the user chose: NCCL reads
/// `NCCL_NVLS_ENABLE` when its first communicator is made.
pub(crate) fn nvls_off() {
    if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
        // SAFETY: runs once, when NCCL is first opened; writing the
        // environment races only with another thread reading it at that
        // moment (C's `getenv`), the risk `set_var` always had before it
        // became `unsafe` in edition 2024, and NCCL must see the variable.
        unsafe { std::env::set_var("NCCL_NVLS_ENABLE", "0") };
    }
}

/// The NCCL of this process, opened on first use.
pub(crate) fn api() -> Result<&'static Api> {
    static API: OnceLock<Result<Api>> = OnceLock::new();
    API.get_or_init(|| {
        nvls_off();
        load(&LIBRARY_NAMES)
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// `ncclResult_t`'s name.
pub(crate) fn status_name(s: Status) -> String {
    match s {
        0 => "ncclSuccess".into(),
        1 => "ncclUnhandledCudaError".into(),
        2 => "ncclSystemError".into(),
        3 => "ncclInternalError".into(),
        4 => "ncclInvalidArgument".into(),
        5 => "ncclInvalidUsage".into(),
        6 => "ncclRemoteError".into(),
        7 => "ncclInProgress".into(),
        8 => "ncclTimeout".into(),
        other => format!("ncclResult_t {other}"),
    }
}

impl Api {
    /// `Error::Nccl` for status `s` of `op`, with NCCL's description and
    /// its last message about `comm` (or the process, for null).
    fn error(&self, op: &str, s: Status, comm: nc::ncclComm_t) -> Error {
        let text = |p: *const c_char| {
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: NCCL returns NUL-terminated static or per-thread
                // strings.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        };
        // SAFETY: both only read NCCL's tables; a null comm asks for the
        // process's last error.
        let described = text(unsafe { (self.error_string)(s) });
        let last = text(unsafe { (self.last_error)(comm) });
        let message = match (described.is_empty(), last.is_empty()) {
            (_, true) => described,
            (true, false) => last,
            (false, false) => format!("{described}: {last}"),
        };
        Error::Nccl {
            op: op.to_string(),
            status: status_name(s),
            message,
        }
    }

    /// A fresh `ncclUniqueId` (what rank 0 of a multi-process group makes
    /// and sends to the others).
    pub(crate) fn unique_id(&self) -> Result<[u8; 128]> {
        let mut id = nc::ncclUniqueId { internal: [0; 128] };
        // SAFETY: writes the 128-byte id.
        let s = unsafe { (self.get_unique_id)(&mut id) };
        if s != SUCCESS {
            return Err(self.error("ncclGetUniqueId", s, std::ptr::null_mut()));
        }
        Ok(id.internal.map(|c| c as u8))
    }

    fn group<R>(&self, op: &str, f: impl FnOnce() -> Result<R>) -> Result<R> {
        // SAFETY: group calls nest and only mark the thread's state.
        let s = unsafe { (self.group_start)() };
        if s != SUCCESS {
            return Err(self.error(&format!("{op} (ncclGroupStart)"), s, std::ptr::null_mut()));
        }
        let r = f();
        // SAFETY: closes the group opened above, also after an error.
        let s = unsafe { (self.group_end)() };
        let r = r?;
        if s != SUCCESS && s != IN_PROGRESS {
            return Err(self.error(&format!("{op} (ncclGroupEnd)"), s, std::ptr::null_mut()));
        }
        Ok(r)
    }
}

/// The default time a collective may take before its communicator is
/// aborted.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// One NCCL communicator per local device of a group, all made together.
pub(crate) struct Comms {
    api: &'static Api,
    members: Vec<Member>,
    /// Ranks in the whole communicator (all processes).
    pub(crate) world: usize,
    /// Ranks of the local devices: `first_rank ..`.
    pub(crate) first_rank: usize,
    /// Held for the whole of a call: NCCL communicators take one caller
    /// at a time.
    serial: Mutex<()>,
    /// The timeout, and the reason once the communicators were aborted.
    state: Mutex<State>,
}

struct State {
    timeout: Duration,
    aborted: Option<String>,
}

struct Member {
    comm: nc::ncclComm_t,
    ctx: Arc<Context>,
    /// The stream NCCL runs on, beside the context's.
    stream: CommStream,
}

// SAFETY: the communicators are only used with `state` locked; the
// contexts are bound on the calling thread before each call.
unsafe impl Send for Comms {}
unsafe impl Sync for Comms {}

/// What a member's call in a collective is given: its communicator, its
/// stream, and its index among the local devices.
pub(crate) type Call<'a> = &'a dyn Fn(usize, nc::ncclComm_t, Stream) -> Status;

impl Comms {
    /// Communicators for `ordinals` (ranks `first_rank ..` of `world`)
    /// from `id`, all initialised in one group.
    pub(crate) fn new(
        ordinals: &[usize],
        id: [u8; 128],
        first_rank: usize,
        world: usize,
        timeout: Duration,
    ) -> Result<Comms> {
        let api = api()?;
        if world == 0 || first_rank + ordinals.len() > world || world > c_int::MAX as usize {
            return Err(Error::InvalidArgument {
                op: "Comm::from_rank".into(),
                message: format!(
                    "ranks {first_rank}..{} of a world of {world}: each rank must be below \
                     `world`",
                    first_rank + ordinals.len()
                ),
            });
        }
        let ctxs = ordinals
            .iter()
            .map(|&o| context(o))
            .collect::<Result<Vec<_>>>()?;
        let id = nc::ncclUniqueId {
            internal: id.map(|b| b as c_char),
        };
        let mut raw = vec![std::ptr::null_mut(); ctxs.len()];
        let made = api.group("ncclCommInitRankConfig", || {
            for (i, ctx) in ctxs.iter().enumerate() {
                ctx.bind()?;
                let mut config = config();
                // SAFETY: `raw[i]` receives the communicator; the id and
                // config are read during the call (the config is copied).
                let s = unsafe {
                    (api.init_rank_config)(
                        &mut raw[i],
                        world as c_int,
                        id,
                        (first_rank + i) as c_int,
                        &mut config,
                    )
                };
                if s != SUCCESS && s != IN_PROGRESS {
                    return Err(api.error("ncclCommInitRankConfig", s, raw[i]));
                }
            }
            Ok(())
        });
        let mut members = Vec::new();
        let mut streams = Ok(());
        for (&comm, ctx) in raw.iter().zip(&ctxs).filter(|(c, _)| !c.is_null()) {
            let stream = ctx.bind().and_then(|()| CommStream::new());
            match stream {
                Ok(stream) => members.push(Member {
                    comm,
                    ctx: ctx.clone(),
                    stream,
                }),
                Err(e) => {
                    // Not a member: abort it here, the others below.
                    // SAFETY: a communicator made above, never used after.
                    unsafe { (api.abort)(comm) };
                    streams = Err(e);
                }
            }
        }
        let made = made.and(streams);
        let comms = Comms {
            api,
            members,
            world,
            first_rank,
            serial: Mutex::new(()),
            state: Mutex::new(State {
                timeout,
                aborted: None,
            }),
        };
        if let Err(e) = made {
            comms.abort(e.to_string());
            return Err(e);
        }
        if comms.members.len() != ctxs.len() {
            let e = api.error("ncclCommInitRankConfig", 3, std::ptr::null_mut());
            comms.abort(e.to_string());
            return Err(e);
        }
        let state = lock(&comms.state);
        let deadline = Instant::now() + state.timeout;
        drop(state);
        comms.until_ready("ncclCommInitRankConfig", deadline)?;
        Ok(comms)
    }

    /// The timeout of every later call.
    pub(crate) fn timeout(&self) -> Duration {
        lock(&self.state).timeout
    }

    /// Sets the timeout of every later call.
    pub(crate) fn set_timeout(&self, t: Duration) {
        lock(&self.state).timeout = t;
    }

    /// The library, as `libnccl.so.2 (NCCL 2.27.5)`.
    pub(crate) fn library(&self) -> String {
        format!(
            "{} (NCCL {})",
            self.api.file,
            version_text(self.api.version)
        )
    }

    /// Aborts every communicator (once); later calls return `Err` with
    /// `reason`.
    fn abort(&self, reason: String) {
        let mut state = lock(&self.state);
        self.abort_locked(&mut state, reason);
    }

    fn abort_locked(&self, state: &mut State, reason: String) {
        if state.aborted.is_some() {
            return;
        }
        for m in &self.members {
            let _ = m.ctx.bind();
            // SAFETY: each communicator is aborted once, and never used after.
            unsafe { (self.api.abort)(m.comm) };
        }
        state.aborted = Some(reason);
    }

    /// Whether every communicator has finished the calls queued so far;
    /// `Err` on an asynchronous error (a peer gone, a failed call).
    fn ready(&self, op: &str) -> Result<bool> {
        let mut all = true;
        for m in &self.members {
            let mut r = SUCCESS;
            // SAFETY: a query of a live communicator.
            let s = unsafe { (self.api.get_async_error)(m.comm, &mut r) };
            if s != SUCCESS {
                return Err(self
                    .api
                    .error(&format!("{op} (ncclCommGetAsyncError)"), s, m.comm));
            }
            match r {
                SUCCESS => {}
                IN_PROGRESS => all = false,
                other => return Err(self.api.error(op, other, m.comm)),
            }
        }
        Ok(all)
    }

    /// Polls `done` until it is true; an error or the deadline aborts the
    /// communicators.
    fn poll(
        &self,
        op: &str,
        deadline: Instant,
        mut done: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        let mut spins = 0u32;
        loop {
            match done() {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    self.abort(e.to_string());
                    return Err(e);
                }
            }
            if Instant::now() >= deadline {
                let timeout = self.timeout();
                let e = timeout_error(op, timeout);
                self.abort(e.to_string());
                return Err(e);
            }
            spins += 1;
            if spins < 2000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    fn until_ready(&self, op: &str, deadline: Instant) -> Result<()> {
        self.poll(op, deadline, || self.ready(op))
    }

    /// Queues one call per local device in one NCCL group (`call` gets the
    /// member's index, communicator and stream) on the communication
    /// streams, after the work already queued on the devices' own streams,
    /// and returns without waiting for it; `keep` (the buffers the calls
    /// read and write) lives until the flight is waited on or dropped.
    pub(crate) fn start(
        &self,
        op: &str,
        call: Call<'_>,
        keep: Vec<Box<dyn Any>>,
    ) -> Result<Flight<'_>> {
        let _serial = lock(&self.serial);
        let state = lock(&self.state);
        if let Some(reason) = &state.aborted {
            return Err(Error::Nccl {
                op: op.to_string(),
                status: "aborted".into(),
                message: format!(
                    "the communicator was aborted earlier ({reason}); make a new `Comm`"
                ),
            });
        }
        let deadline = Instant::now() + state.timeout;
        drop(state);
        // The communication streams wait for what the devices queued so
        // far (the kernels that wrote the inputs, the allocations).
        for m in &self.members {
            m.ctx.bind()?;
            let before = Event::new()?;
            before.record(m.ctx.stream)?;
            before.wait_on(m.stream.0)?;
        }
        let queued = self.api.group(op, || {
            for (i, m) in self.members.iter().enumerate() {
                m.ctx.bind()?;
                let s = call(i, m.comm, m.stream.0 as Stream);
                if s != SUCCESS && s != IN_PROGRESS {
                    return Err(self.api.error(op, s, m.comm));
                }
            }
            Ok(())
        });
        if let Err(e) = queued {
            self.abort(e.to_string());
            return Err(e);
        }
        // Non-blocking communicators may still be queueing the calls.
        self.until_ready(op, deadline)?;
        let mut done = Vec::with_capacity(self.members.len());
        for m in &self.members {
            let recorded = m.ctx.bind().and_then(|()| {
                let e = Event::new()?;
                e.record(m.stream.0)?;
                Ok(e)
            });
            match recorded {
                Ok(e) => done.push(e),
                Err(e) => {
                    self.abort(e.to_string());
                    return Err(e);
                }
            }
        }
        Ok(Flight {
            comms: self,
            op: op.to_string(),
            deadline,
            done,
            keep,
            waited: false,
        })
    }
}

/// A collective queued by [`Comms::start`] and not yet waited on.
pub(crate) struct Flight<'c> {
    comms: &'c Comms,
    op: String,
    deadline: Instant,
    /// One per member, recorded on its communication stream after the
    /// NCCL calls.
    done: Vec<Event>,
    keep: Vec<Box<dyn Any>>,
    waited: bool,
}

impl Flight<'_> {
    /// Whether the devices have finished the collective, without
    /// blocking; `Err` (and the communicators aborted) on an
    /// asynchronous error.
    pub(crate) fn is_done(&self) -> Result<bool> {
        let r = self.done_now();
        if let Err(e) = &r {
            self.comms.abort(e.to_string());
        }
        r
    }

    fn done_now(&self) -> Result<bool> {
        if !self.comms.ready(&self.op)? {
            return Ok(false);
        }
        for (m, e) in self.comms.members.iter().zip(&self.done) {
            m.ctx.bind()?;
            if !e.query(&self.op)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Polls until the devices have finished the collective; an error or
    /// the communicator's timeout (counted from the start) aborts every
    /// communicator of the group and returns `Err`.
    pub(crate) fn wait(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        if self.waited {
            return Ok(());
        }
        self.waited = true;
        let r = self.comms.poll(&self.op, self.deadline, || self.done_now());
        if r.is_err() {
            // Aborting stops NCCL's kernels; the buffers may be freed
            // once the streams have drained.
            for m in &self.comms.members {
                let _ = m.ctx.bind();
                let _ = m.stream.synchronize("ncclCommAbort");
            }
        }
        self.keep.clear();
        r
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

impl Drop for Comms {
    fn drop(&mut self) {
        let state = lock(&self.state);
        if state.aborted.is_some() || self.members.is_empty() {
            return;
        }
        let deadline = Instant::now() + state.timeout;
        drop(state);
        // Finalize (flushes outstanding work, non-blocking), then destroy;
        // on an error or the timeout, abort instead.
        let finalized = self.api.group("ncclCommFinalize", || {
            for m in &self.members {
                m.ctx.bind()?;
                // SAFETY: a live communicator, finalized once.
                let s = unsafe { (self.api.finalize)(m.comm) };
                if s != SUCCESS && s != IN_PROGRESS {
                    return Err(self.api.error("ncclCommFinalize", s, m.comm));
                }
            }
            Ok(())
        });
        if finalized.is_err() || self.until_ready("ncclCommFinalize", deadline).is_err() {
            // `poll` aborted them on its error; abort here otherwise.
            self.abort("dropped".into());
            return;
        }
        for m in &self.members {
            let _ = m.ctx.bind();
            // SAFETY: finalized above, destroyed once, never used after.
            unsafe { (self.api.destroy)(m.comm) };
        }
    }
}

/// The error of a call that did not finish within `timeout`.
pub(crate) fn timeout_error(op: &str, timeout: Duration) -> Error {
    Error::Nccl {
        op: op.to_string(),
        status: "timeout".into(),
        message: format!(
            "not finished after {:.1} s; the communicator was aborted (a peer may have gone \
             away or not called the same collective); raise the limit with \
             `Comm::set_timeout` if the work is that long",
            timeout.as_secs_f64()
        ),
    }
}

/// `NCCL_CONFIG_INITIALIZER` with `blocking = 0`.
fn config() -> nc::ncclConfig_t {
    nc::ncclConfig_t {
        size: std::mem::size_of::<nc::ncclConfig_t>(),
        magic: 0xcafe_beef,
        version: CONFIG_VERSION,
        blocking: 0,
        cgaClusterSize: UNDEF,
        minCTAs: UNDEF,
        maxCTAs: UNDEF,
        netName: std::ptr::null(),
        splitShare: UNDEF,
        trafficClass: UNDEF,
        commName: std::ptr::null(),
        collnetEnable: UNDEF,
        CTAPolicy: UNDEF,
        shrinkShare: UNDEF,
        nvlsCTAs: UNDEF,
    }
}

/// `ncclDataType_t` of a dtype (bool as bytes).
pub(crate) fn data_type(kind: tensorfn_core::DTypeKind) -> c_int {
    use tensorfn_core::DTypeKind as K;
    (match kind {
        K::U8 | K::Bool => nc::ncclDataType_t::ncclUint8,
        K::I32 => nc::ncclDataType_t::ncclInt32,
        K::I64 => nc::ncclDataType_t::ncclInt64,
        K::F16 => nc::ncclDataType_t::ncclFloat16,
        K::F32 => nc::ncclDataType_t::ncclFloat32,
        K::F64 => nc::ncclDataType_t::ncclFloat64,
        K::BF16 => nc::ncclDataType_t::ncclBfloat16,
    }) as c_int
}

/// `ncclRedOp_t` values.
pub(crate) mod red {
    use super::nc::ncclRedOp_t as R;
    use std::ffi::c_int;
    pub(crate) const SUM: c_int = R::ncclSum as c_int;
    pub(crate) const MAX: c_int = R::ncclMax as c_int;
    pub(crate) const MIN: c_int = R::ncclMin as c_int;
    pub(crate) const AVG: c_int = R::ncclAvg as c_int;
}

/// Which collective [`Comms::launch`] issues, with what it needs besides
/// the buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Collective {
    /// `ncclAllReduce` with an `ncclRedOp_t` ([`red`]): `count` elements
    /// in and out.
    AllReduce(c_int),
    /// `ncclAllGather`: `count` elements in, `count × world` out.
    AllGather,
    /// `ncclReduceScatter` with an `ncclRedOp_t`: `count × world` in,
    /// `count` out.
    ReduceScatter(c_int),
    /// `ncclBroadcast` of `count` elements from this rank.
    Broadcast(usize),
}

impl Collective {
    /// NCCL's name of the call, for errors.
    fn name(self) -> &'static str {
        match self {
            Collective::AllReduce(_) => "ncclAllReduce",
            Collective::AllGather => "ncclAllGather",
            Collective::ReduceScatter(_) => "ncclReduceScatter",
            Collective::Broadcast(_) => "ncclBroadcast",
        }
    }
}

impl Api {
    /// Queues `what` on one communicator and stream.
    ///
    /// # Safety
    ///
    /// `send` and `recv` hold the elements `what` reads and writes
    /// (`count`, or `count × world` as [`Collective`] says) on the
    /// communicator's device, alive until the stream has run the call.
    #[allow(clippy::too_many_arguments)]
    unsafe fn issue(
        &self,
        what: Collective,
        send: u64,
        recv: u64,
        count: usize,
        dtype: c_int,
        comm: nc::ncclComm_t,
        stream: Stream,
    ) -> Status {
        let (s, r) = (send as *const c_void, recv as *mut c_void);
        // SAFETY: the caller's contract.
        unsafe {
            match what {
                Collective::AllReduce(op) => {
                    (self.all_reduce)(s, r, count, dtype, op, comm, stream)
                }
                Collective::AllGather => (self.all_gather)(s, r, count, dtype, comm, stream),
                Collective::ReduceScatter(op) => {
                    (self.reduce_scatter)(s, r, count, dtype, op, comm, stream)
                }
                Collective::Broadcast(root) => {
                    (self.broadcast)(s, r, count, dtype, root as c_int, comm, stream)
                }
            }
        }
    }
}

impl Comms {
    /// Starts `what` over the members, `bufs[i] = (send, recv)` on member
    /// `i` (equal for in place), `count` elements as [`Collective`] says;
    /// `keep` holds the buffers alive until the flight is waited on.
    pub(crate) fn launch(
        &self,
        what: Collective,
        bufs: &[(u64, u64)],
        count: usize,
        dtype: c_int,
        keep: Vec<Box<dyn Any>>,
    ) -> Result<Flight<'_>> {
        let api = self.api;
        self.start(
            what.name(),
            &|i, comm, stream| {
                let (s, r) = bufs[i];
                // SAFETY: the callers pass buffers of member i's device
                // sized for `what`, kept alive by the flight until the
                // work is done.
                unsafe { api.issue(what, s, r, count, dtype, comm, stream) }
            },
            keep,
        )
    }
}

/// One buffer of a batched call: device address, element count and
/// `ncclDataType_t`.
pub(crate) type Buffer = (u64, usize, c_int);

impl Comms {
    /// Starts one in-place `ncclBroadcast` from rank `root` per buffer of
    /// each member (`bufs[i]`, the same counts and dtypes on every
    /// member), all in one group.
    pub(crate) fn broadcast_each(
        &self,
        bufs: &[Vec<Buffer>],
        root: usize,
        keep: Vec<Box<dyn Any>>,
    ) -> Result<Flight<'_>> {
        let (api, what) = (self.api, Collective::Broadcast(root));
        self.start(
            what.name(),
            &|i, comm, stream| {
                for &(p, count, dtype) in &bufs[i] {
                    // SAFETY: each buffer holds `count` elements on member
                    // i's device, alive until the flight is waited on.
                    let s = unsafe { api.issue(what, p, p, count, dtype, comm, stream) };
                    if s != SUCCESS && s != IN_PROGRESS {
                        return s;
                    }
                }
                SUCCESS
            },
            keep,
        )
    }
}

/// Queues a copy of `bytes` from `src` to `dst`, both on `ctx`'s device,
/// on its stream (ordered with the kernels that wrote `src` and read
/// `dst` later).
pub(crate) fn copy_on(ctx: &Arc<Context>, dst: u64, src: u64, bytes: usize) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    ctx.bind()?;
    // SAFETY: both ranges hold `bytes` bytes on the bound device, alive
    // until the stream has run the copy (the callers keep them).
    unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, ctx.stream) }
        .map_err(|e| super::error::driver("cuMemcpyDtoDAsync", e))
}
