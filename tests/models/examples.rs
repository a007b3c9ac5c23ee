//! Runs every example's program: on the CPU always, on the GPU when there
//! is one. Each example checks its own numbers against f64 references and
//! returns an error when they differ.

// Every example is a program of its own with its own `mod common;`.
#![allow(clippy::duplicate_mod)]

macro_rules! examples {
    ($($name:ident = $path:literal),* $(,)?) => {
        $(
            #[allow(dead_code)]
            #[path = $path]
            pub(crate) mod $name;
        )*

        mod on_cpu {
            $(
                #[test]
                fn $name() {
                    if let Err(e) = super::$name::run::<tensorfn::Cpu>() {
                        panic!("{}: {e}", stringify!($name));
                    }
                }
            )*
        }

        mod on_gpu {
            $(
                #[test]
                fn $name() {
                    super::on_gpu_if_present(stringify!($name), super::$name::run::<tensorfn::Cuda>);
                }
            )*
        }
    };
}

examples!(
    quickstart = "../../examples/quickstart.rs",
    mlp_inference = "../../examples/mlp_inference.rs",
    gpt2_blocks = "../../examples/gpt2_blocks.rs",
    gpt2 = "../../examples/gpt2.rs",
    llama = "../../examples/llama.rs",
    train_mlp = "../../examples/train_mlp.rs",
    resnet18 = "../../examples/resnet18.rs",
    train_convnet = "../../examples/train_convnet.rs",
    train_gpt2 = "../../examples/train_gpt2.rs",
    addmm_device_and_dtype = "../../examples/addmm_device_and_dtype.rs",
    cuda_crash_causes = "../../examples/cuda_crash_causes.rs",
    cat_errors = "../../examples/cat_errors.rs",
    cublas_failures = "../../examples/cublas_failures.rs",
    numpy_pipelines = "../../examples/numpy_pipelines.rs",
);

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// Runs a GPU example; without a usable GPU the only accepted outcome is
/// `Error::CudaUnavailable`.
fn on_gpu_if_present(name: &str, run: fn() -> Result<(), AnyError>) {
    match run() {
        Ok(()) => {}
        Err(e) => match e.downcast_ref::<tensorfn::Error>() {
            Some(tensorfn::Error::CudaUnavailable { reason }) => {
                eprintln!("{name}: GPU part skipped: {reason}")
            }
            _ => panic!("{name} on the GPU: {e}"),
        },
    }
}
