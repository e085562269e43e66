//! The CUDA runtime (feature `cuda`): loads the PTX of a compiled module and runs its program
//! from META.json, on one GPU, with the interpreter's argument contract.
//!
//! - **No CUDA at build time.** The driver (`libcuda.so`) is loaded when [`Gpu::open`] runs
//!   (`cudarc` with dynamic loading); a machine without a driver gets
//!   [`RuntimeError::NoDriver`], never a panic.
//! - **Loading.** `cuModuleLoadDataEx` (the driver JIT-compiles the PTX for the device; a JIT
//!   error carries the driver's log), or from a cubin ([`Image::Cubin`]: what [`cubin`] had ptxas
//!   assemble from the PTX, kept by kir's on-disk cache so that a later process
//!   loads it with `cuModuleLoadData` and no JIT), one function per META kernel by its `symbol`, with
//!   `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` raised when `shared_bytes` > 48 KB. The
//!   META params of each kernel are checked against the launch ABI of the module's kernel.
//! - **Binding.** The interpreter's own binding code (`interp::bind`) over device buffers: the
//!   same dims from the same shapes, the same errors, the same dtype conversion of inputs
//!   (round to nearest even from f64, exact for i64 data), `out` tensors and temps poisoned with the interpreter's
//!   poison values (NaN / −0x5A5A5A5A / 0xA5 / true), each launch's kernel params and dims
//!   checked, `requires` evaluated and the grid computed by the interpreter's `launch_grid`.
//! - **Tensor maps** (ABI item 4, sm_90a TMA rings). Encoded at bind time from the bound buffer
//!   (`crate::tensor_map` computes and checks the arguments, failing with the tensor's name on a
//!   broken driver rule; `cuTensorMapEncodeTiled` writes the 128 bytes), held by the [`Bound`]
//!   in 128-byte aligned storage for as long as its launches run. Launches with an empty grid
//!   encode nothing; an empty tensor in a launch that runs maps a zeroed stand-in.
//! - **Launching.** Every launch of the program in order on the default stream, parameters in
//!   ABI order (`abi.rs`; a tensor map passed by value, 128 bytes), block and dynamic shared
//!   memory from META; two consecutive launches that touch no common memory run together, the
//!   first on a stream of the program's own (`fork.rs`).
//! - **A caller's tensors and stream** (`external.rs`): [`Program::buffer_specs`],
//!   [`Program::bind_device`] and [`Program::launch_on`] bind device memory the caller owns
//!   (a framework's tensors) and launch on the caller's stream, with the same checks.
//! - **Timing.** [`bench`]: warm-up runs, then each run between two CUDA events; the median.

mod driver;
mod external;
mod fill;
mod fork;
mod kernels;
mod maps;
mod prepared;
mod program;

pub use driver::{CUstream, Gpu};
pub use external::{buffer_specs, launch_pairs, BufferRole, BufferSpec, DeviceArg, DeviceTensor};
pub use kernels::{check_meta, split_entries};
pub use prepared::Prepared;
pub use program::{Bound, Program};

use crate::interp::{HostArg, HostTensor, InterpError};
use crate::Target;
use kir_ir::Module;
use std::collections::{BTreeMap, BTreeSet};

/// Why the runtime failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No usable CUDA driver or device on this machine.
    #[error("{0}")]
    NoDriver(String),
    /// A CUDA call failed (the message names the call and the driver's explanation), or the
    /// metadata does not fit the module.
    #[error("{0}")]
    Cuda(String),
    /// The arguments do not fit the entry (the interpreter's binding error, with its span).
    #[error("{0}")]
    Bind(InterpError),
}

/// The PTX of the device fill kernels behind `kirc bench`'s random inputs (PTX 7.0, sm_80), for
/// checking it with ptxas.
pub fn fill_ptx() -> String {
    fill::ptx()
}

/// What a [`Program`] is loaded from.
#[derive(Clone, Copy, Debug)]
pub enum Image<'a> {
    /// PTX text, JIT-compiled by the driver for the device (`cuModuleLoadDataEx`).
    Ptx(&'a str),
    /// A cubin ptxas assembled for this device's architecture (see [`cubin`]), loaded as it is
    /// (`cuModuleLoadData`).
    Cubin(&'a [u8]),
}

/// Assembles `ptx` (of `target`) for `gpu` into a cubin for [`Image::Cubin`], with the ptxas
/// [`crate::ptxas_path::ptxas_exe`] finds, as a whole program, for the GPU's own
/// architecture (`sm_90a` when the PTX is sm_90a's and the GPU is compute capability 9.0, else
/// `sm_XY` of the GPU). Not the driver's linker: `cuLinkAddData` compiles PTX as relocatable
/// code, which spilled 2,168 bytes in attention_fwd's d128 default that the whole-program JIT
/// keeps in registers, and ran it 8× slower on the H200 (docs/cache.md).
pub fn cubin(gpu: &Gpu, ptx: &str, target: Target) -> Result<Vec<u8>, RuntimeError> {
    let exe = crate::ptxas_path::ptxas_exe();
    crate::nvrtc::assemble(&exe, ptx, &cubin_arch(gpu.capability, target))
        .map(|(bin, _)| bin)
        .map_err(RuntimeError::Cuda)
}

/// The architecture [`cubin`] assembles `target`'s PTX for on a GPU of compute capability
/// `capability`: the target's own name (`sm_90a`) when the GPU is of that target, else
/// `sm_XY` of the GPU. What a cubin is looked up by in the kir cache.
pub fn cubin_arch(capability: (i32, i32), target: Target) -> String {
    let (major, minor) = capability;
    match Target::from_compute_capability(major, minor) {
        Some(t) if t == target => t.name().to_string(),
        _ => format!("sm_{major}{minor}"),
    }
}

/// The kir target matching a compute capability (`None` for devices kir does not target).
pub fn target_for(capability: (i32, i32)) -> Option<Target> {
    Target::from_compute_capability(capability.0, capability.1)
}

/// Runs `module`'s entry on `gpu` from its `ptx` and `meta` with `args` (by entry param name,
/// as [`crate::interp::run`] takes them) and returns every `out`/`inout` tensor, as the
/// interpreter does.
pub fn run(
    gpu: &Gpu,
    ptx: &str,
    meta: &serde_json::Value,
    module: &Module,
    args: &BTreeMap<String, HostArg>,
) -> Result<BTreeMap<String, HostTensor>, RuntimeError> {
    run_image(gpu, Image::Ptx(ptx), meta, module, args)
}

/// [`run`] from PTX or a cubin ([`Image`]).
pub fn run_image(
    gpu: &Gpu,
    image: Image<'_>,
    meta: &serde_json::Value,
    module: &Module,
    args: &BTreeMap<String, HostArg>,
) -> Result<BTreeMap<String, HostTensor>, RuntimeError> {
    let mut p = Program::load_image(gpu, image, meta, module)?;
    let mut b = p.bind(args, &BTreeSet::new(), 0)?;
    p.launch(&mut b)?;
    p.outputs(&b)
}

/// The times of a benchmark, in milliseconds per run of the whole program.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchTimes {
    /// The median over the timed runs.
    pub median_ms: f64,
    /// The fastest run.
    pub min_ms: f64,
    /// The slowest run.
    pub max_ms: f64,
    /// The number of timed runs.
    pub iters: usize,
}

/// Times the program bound in `b`: `warmup` untimed runs, then `iters` runs, each between two
/// CUDA events on the default stream (so each time covers every launch of the program and
/// nothing else). Fails if `iters` is 0 or a kernel fails.
pub fn bench(
    p: &Program<'_>,
    b: &mut Bound,
    warmup: usize,
    iters: usize,
) -> Result<BenchTimes, RuntimeError> {
    if iters == 0 {
        return Err(RuntimeError::Cuda("--iters must be at least 1".into()));
    }
    for _ in 0..warmup {
        p.launch(b)?;
    }
    p.synchronize()?;
    let (start, end) = (driver::Event::new()?, driver::Event::new()?);
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        start.record()?;
        p.launch(b)?;
        end.record()?;
        times.push(start.elapsed_ms(&end)? as f64);
    }
    p.synchronize()?;
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let median_ms = if n % 2 == 1 {
        times[n / 2]
    } else {
        (times[n / 2 - 1] + times[n / 2]) / 2.0
    };
    Ok(BenchTimes {
        median_ms,
        min_ms: times[0],
        max_ms: times[n - 1],
        iters: n,
    })
}
