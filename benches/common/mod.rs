//! Shared harness of the benchmark binaries: arguments, timing, JSON-lines
//! output, random inputs and result checks.
//!
//! Every binary prints one JSON object per measured case on stdout (the
//! format `scripts/bench-report` reads) and progress on stderr. A case that
//! fails prints an `"error"` record instead and the run goes on.
// Each bench binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::time::Instant;
use tensorfn::prelude::*;
use tensorfn::DType;

/// Input sets of one case together span at least this many bytes, well
/// above the 50-60 MB L2 of an H100/H200, so that repeated launches read
/// device memory rather than cache.
pub const GPU_ROTATE_BYTES: usize = 256 << 20;
/// The same for the CPU: above any last-level cache of a desktop or server.
pub const CPU_ROTATE_BYTES: usize = 64 << 20;

/// Command-line options shared by every bench binary.
#[derive(Clone, Debug, Default)]
pub struct Args {
    /// A short pass: fewer sizes and runs.
    pub quick: bool,
    /// Only cases whose name contains this.
    pub filter: String,
}

impl Args {
    /// Parses `--quick` and `--filter SUBSTR`; ignores `--bench`, which
    /// `cargo bench` passes to every bench binary.
    pub fn parse() -> Args {
        let mut args = Args::default();
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            match a.as_str() {
                "--quick" => args.quick = true,
                "--filter" => args.filter = it.next().unwrap_or_default(),
                "--bench" => {}
                "-h" | "--help" => {
                    eprintln!("options: --quick (short pass), --filter SUBSTR (cases to run)");
                    std::process::exit(0);
                }
                other if !other.starts_with('-') && args.filter.is_empty() => {
                    // `cargo bench -- NAME` passes a bare filter.
                    args.filter = other.to_string();
                }
                other => eprintln!("ignoring unknown argument {other:?}"),
            }
        }
        args
    }

    /// True when the case is selected by `--filter`.
    pub fn wants(&self, case: &str) -> bool {
        case.contains(&self.filter)
    }

    /// Iteration counts for this pass.
    pub fn plan(&self) -> Plan {
        if self.quick {
            Plan {
                warmup: 3,
                warmup_s: 0.0,
                batch_s: 0.002,
                runs: 7,
                min_runs: 5,
                case_budget_s: 0.1,
            }
        } else {
            Plan {
                warmup: 5,
                warmup_s: 0.0,
                batch_s: 0.005,
                runs: 25,
                min_runs: 10,
                case_budget_s: 0.4,
            }
        }
    }

    /// Iteration counts for CPU cases, which run longer per call.
    pub fn cpu_plan(&self) -> Plan {
        if self.quick {
            Plan {
                warmup: 1,
                warmup_s: 0.2,
                batch_s: 0.01,
                runs: 5,
                min_runs: 3,
                case_budget_s: 0.3,
            }
        } else {
            Plan {
                warmup: 2,
                warmup_s: 1.0,
                batch_s: 0.02,
                runs: 15,
                min_runs: 5,
                case_budget_s: 1.5,
            }
        }
    }
}

/// How many times to run a case: warm-up calls, then `runs` batches of
/// calls, each batch lasting about `batch_s`, all of them within about
/// `case_budget_s` (but never fewer than `min_runs` batches).
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub warmup: usize,
    /// Warm-up goes on for at least this long: the first case after large
    /// inputs are allocated otherwise runs while the kernel is still busy
    /// with their pages (a 2^24 CPU case measured 2x slower first).
    pub warmup_s: f64,
    pub batch_s: f64,
    pub runs: usize,
    pub min_runs: usize,
    pub case_budget_s: f64,
}

/// The timing of one case.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Median over batches of the mean time per call.
    pub median_us: f64,
    /// Fastest batch's mean time per call.
    pub min_us: f64,
    /// Median over batches of the host time per call spent queuing it
    /// (the batch's calls, before the wait for the device): near
    /// `median_us`, the host is what limits the case, not the device.
    pub enqueue_us: f64,
    pub runs: usize,
    pub batch: usize,
}

/// Times `call(i)` (which launches one operation on input set `i`), with
/// `sync` waiting for the device: warm-up, then a host timer around
/// batches of launches with a `sync` at both ends, median over batches.
pub fn time_call(
    plan: &Plan,
    sets: usize,
    mut call: impl FnMut(usize) -> Result<(), Error>,
    sync: &dyn Fn() -> Result<(), Error>,
) -> Result<Timing, Error> {
    let sets = sets.max(1);
    let warm = Instant::now();
    let mut i = 0;
    while i < plan.warmup || warm.elapsed().as_secs_f64() < plan.warmup_s {
        call(i % sets)?;
        i += 1;
    }
    sync()?;
    let probe = 3;
    let t0 = Instant::now();
    for i in 0..probe {
        call(i % sets)?;
    }
    sync()?;
    let est_s = (t0.elapsed().as_secs_f64() / probe as f64).max(1e-7);
    let batch = ((plan.batch_s / est_s).round() as usize).clamp(1, 2000);
    let runs = ((plan.case_budget_s / (batch as f64 * est_s)) as usize)
        .clamp(plan.min_runs, plan.runs.max(plan.min_runs));
    let mut times = Vec::with_capacity(runs);
    let mut queued = Vec::with_capacity(runs);
    let mut k = 0;
    for _ in 0..runs {
        let t0 = Instant::now();
        for _ in 0..batch {
            call(k % sets)?;
            k += 1;
        }
        queued.push(t0.elapsed().as_secs_f64() * 1e6 / batch as f64);
        sync()?;
        times.push(t0.elapsed().as_secs_f64() * 1e6 / batch as f64);
    }
    Ok(Timing {
        median_us: median(&times),
        min_us: times.iter().copied().fold(f64::INFINITY, f64::min),
        enqueue_us: median(&queued),
        runs,
        batch,
    })
}

/// The median of `values`; 0 when empty.
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[mid],
        _ => 0.5 * (v[mid - 1] + v[mid]),
    }
}

/// Waits until cuda:0 has finished all queued work; `Err` without a GPU.
pub fn sync_cuda() -> Result<(), Error> {
    tensorfn::synchronize::<Cuda>()
}

/// How many input sets of `set_bytes` make up at least `total` bytes.
pub fn n_sets(set_bytes: usize, total: usize, max: usize) -> usize {
    total.div_ceil(set_bytes.max(1)).clamp(1, max)
}

/// The identity of one case in the JSON output.
#[derive(Clone, Debug)]
pub struct Case {
    pub case: String,
    pub dtype: &'static str,
    pub size: String,
    pub bytes: u64,
    pub flops: u64,
}

impl Case {
    pub fn new(
        case: &str,
        dtype: &'static str,
        size: impl ToString,
        bytes: u64,
        flops: u64,
    ) -> Case {
        Case {
            case: case.to_string(),
            dtype,
            size: size.to_string(),
            bytes,
            flops,
        }
    }

    fn head(&self, imp: &str) -> String {
        format!(
            "{{\"case\": {}, \"dtype\": {}, \"size\": {}, \"impl\": {}",
            json_str(&self.case),
            json_str(self.dtype),
            json_str(&self.size),
            json_str(imp)
        )
    }

    /// Prints the record of a measured case; `rel_err` is the checked
    /// error of the result (`None` where no check ran).
    pub fn emit(&self, imp: &str, t: &Timing, check: Option<Check>) {
        let mut line = format!(
            "{}, \"median_us\": {:.3}, \"min_us\": {:.3}, \"enqueue_us\": {:.3}, \"runs\": {}, \"batch\": {}, \"bytes\": {}, \"flops\": {}",
            self.head(imp),
            t.median_us,
            t.min_us,
            t.enqueue_us,
            t.runs,
            t.batch,
            self.bytes,
            self.flops
        );
        if let Some(c) = check {
            line.push_str(&format!(
                ", \"rel_err\": {:.3e}, \"check\": \"{}\"",
                c.rel_err,
                if c.ok { "pass" } else { "fail" }
            ));
        }
        line.push('}');
        println!("{line}");
        eprintln!(
            "{:<18} {:<5} {:<22} {:<14} {:>12.2} us{}",
            self.case,
            self.dtype,
            self.size,
            imp,
            t.median_us,
            match check {
                Some(c) if !c.ok => format!("  WRONG RESULT (rel err {:.2e})", c.rel_err),
                _ => String::new(),
            }
        );
    }

    /// Prints an error record for a case that could not run.
    pub fn emit_error(&self, imp: &str, err: &dyn std::fmt::Display) {
        let msg: String = err.to_string().chars().take(300).collect();
        println!("{}, \"error\": {}}}", self.head(imp), json_str(&msg));
        eprintln!(
            "{:<18} {:<5} {:<22} {:<14} error: {msg}",
            self.case, self.dtype, self.size, imp
        );
    }
}

/// Prints a record saying bench binary `binary` measured nothing, and why.
pub fn emit_skipped(binary: &str, why: &dyn std::fmt::Display) {
    println!(
        "{{\"case\": \"skipped\", \"dtype\": \"-\", \"size\": \"-\", \"impl\": \"tensorfn\", \"binary\": {}, \"error\": {}}}",
        json_str(binary),
        json_str(&why.to_string())
    );
    eprintln!("{binary}: skipped: {why}");
}

/// Prints the machine record of a Rust bench binary.
pub fn emit_meta(binary: &str, args: &Args) {
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "unset".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    println!(
        "{{\"case\": \"meta\", \"dtype\": \"-\", \"size\": \"-\", \"impl\": \"tensorfn\", \"binary\": {}, \"rayon_threads\": {}, \"cpus\": {cpus}, \"loadavg\": {}, \"quick\": {}, \"unix_time\": {}}}",
        json_str(binary),
        json_str(&threads),
        json_str(&load),
        args.quick,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    );
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Uniform random values in `[lo, hi)` from a seeded generator, filled on
/// every core (inputs reach a gigabyte). Never all zeros: timing on zeros
/// hides unwritten outputs and can run faster than real data.
pub fn random_vec<T: DType>(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<T> {
    let mut out = vec![T::default(); n];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let chunk = n.div_ceil(threads).max(1 << 16);
    std::thread::scope(|s| {
        for (c, part) in out.chunks_mut(chunk).enumerate() {
            s.spawn(move || {
                let mut rng = SplitMix64(seed ^ (c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                for v in part {
                    *v = T::from_f64(lo + (hi - lo) * rng.uniform());
                }
            });
        }
    });
    out
}

/// SplitMix64: enough randomness for benchmark inputs, and fast.
struct SplitMix64(u64);

impl SplitMix64 {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The outcome of comparing a result with an f64 reference.
#[derive(Clone, Copy, Debug)]
pub struct Check {
    /// ‖out − ref‖ / ‖ref‖ over the compared elements.
    pub rel_err: f64,
    /// The error is under the dtype's tolerance and nothing is NaN.
    pub ok: bool,
}

/// Compares `(got, want)` pairs by relative L2 error against `tol`.
pub fn check_pairs(pairs: impl Iterator<Item = (f64, f64)>, tol: f64) -> Check {
    let (mut num, mut den, mut finite) = (0.0f64, 0.0f64, true);
    for (got, want) in pairs {
        finite &= got.is_finite() || !want.is_finite();
        num += (got - want) * (got - want);
        den += want * want;
    }
    let rel_err = if den > 0.0 {
        (num / den).sqrt()
    } else {
        num.sqrt()
    };
    Check {
        rel_err,
        ok: finite && rel_err.is_finite() && rel_err <= tol,
    }
}

/// Tolerance of the relative L2 error of elementwise results in `dtype`.
/// f16 and bf16 chains round after every op, as PyTorch eager does, so a
/// chain of several ops carries several roundings of 2^-11 (f16) or 2^-8
/// (bf16); f32 carries f32 arithmetic only.
pub fn elementwise_tol(dtype: &str) -> f64 {
    match dtype {
        "f16" => 5e-3,
        "bf16" => 3e-2,
        _ => 1e-5,
    }
}

/// Tolerance of matrix products. f32 is tight enough to catch TF32
/// (about 3e-4), which would make the comparison with PyTorch's exact f32
/// products unfair.
pub fn matmul_tol(dtype: &str) -> f64 {
    match dtype {
        "f16" => 5e-3,
        "bf16" => 2e-2,
        _ => 1e-4,
    }
}

/// About `count` indices spread evenly over `0..n`, always with the last.
pub fn sample_indices(n: usize, count: usize) -> impl Iterator<Item = usize> {
    let step = (n / count.max(1)).max(1);
    (0..n)
        .step_by(step)
        .chain((n > 0).then(|| n - 1))
        .take(count + 1)
}

/// `x` as f64.
pub fn f64s<T: DType>(x: &[T]) -> Vec<f64> {
    x.iter().map(|v| v.to_f64()).collect()
}

/// The dtype's name as the JSON records spell it.
pub fn dtype_name<T: DType>() -> &'static str {
    T::KIND.name()
}
