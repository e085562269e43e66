//! Which ptxas assembles the kir cache's cubins, so that a program's first launch does not go
//! through the driver's JIT wherever a CUDA toolkit, or a Python package that carries one, is
//! installed.
//!
//! For one kernel ptxas takes about as long as the JIT (on the H200's host, call U3:
//! attention_fwd 300–323 ms against 233–358 ms). What ptxas adds: a module's kernels assembled
//! on threads of their own (`nvrtc::assemble`), where the JIT compiles them one after another;
//! and a cubin the kir cache keeps for every later process, where the driver's own cache is per
//! user and off under `CUDA_CACHE_DISABLE=1`. Most machines that run PyTorch carry a ptxas
//! without it being on the `PATH`: Triton's wheel ships one, and the CUDA toolkit's PyPI wheel
//! (`nvidia-cuda-nvcc`) installs one under `site-packages/nvidia`.
//!
//! The order ([`find`]): `$KIR_PTXAS` as given (the user's choice, used even where it does not
//! exist, so that a typo is an error and not a silent fallback); else the first executable
//! file among `ptxas` on the `PATH`, `$CUDA_HOME/bin/ptxas`, `$CUDA_PATH/bin/ptxas`,
//! `/usr/local/cuda/bin/ptxas`, `$TRITON_PTXAS_PATH`, the wheels of the active Python
//! environment (`$VIRTUAL_ENV` or `$CONDA_PREFIX`: `lib/python3.*/site-packages/` with
//! `nvidia/cuda_nvcc/bin`, `nvidia/cu13/bin` or `triton/backends/nvidia/bin`, so `kirc` run
//! inside a PyTorch environment finds them too), then the candidates an embedder registers
//! ([`add_candidates`]: the Python package's wheels, wherever that Python keeps them); else
//! the bare name `ptxas`, whose run fails, so the PTX goes through the driver's JIT as before.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Candidates registered by an embedder, tried after every location of the environment.
static EXTRA: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Registers more places a ptxas may be (the Python package passes the ptxas of the CUDA
/// toolkit's wheel and of Triton's): tried in the order given, after the environment's, by every
/// later [`ptxas_exe`]. A path that is not an executable file is skipped when looked up.
pub fn add_candidates(paths: impl IntoIterator<Item = PathBuf>) {
    if let Ok(mut v) = EXTRA.lock() {
        for p in paths {
            if !v.contains(&p) {
                v.push(p);
            }
        }
    }
}

/// The ptxas that assembles cubins, as [`find`] chooses it from this process's environment and
/// the registered candidates; `None` when none is found.
pub fn located() -> Option<PathBuf> {
    let extra = EXTRA.lock().map(|v| v.clone()).unwrap_or_default();
    find(
        &|k| std::env::var_os(k),
        &extra,
        Path::new("/usr/local/cuda"),
    )
}

/// [`located`] as the program to run; the bare name `ptxas` when none is found (its run then
/// fails, and the caller falls back to the driver's JIT).
pub fn ptxas_exe() -> String {
    located()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "ptxas".to_string())
}

/// The ptxas to run, in the module doc's order, with the environment read through `env`,
/// `extra` the registered candidates and `default_toolkit` the toolkit directory tried after
/// `$CUDA_HOME` and `$CUDA_PATH` (`/usr/local/cuda`). `None` when no location holds an
/// executable file and `KIR_PTXAS` is unset or empty.
pub fn find(
    env: &dyn Fn(&str) -> Option<OsString>,
    extra: &[PathBuf],
    default_toolkit: &Path,
) -> Option<PathBuf> {
    if let Some(p) = env("KIR_PTXAS").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let mut tries: Vec<PathBuf> = Vec::new();
    if let Some(path) = env("PATH") {
        // An empty entry would mean the working directory: never run a ptxas found there.
        tries.extend(
            std::env::split_paths(&path)
                .filter(|d| !d.as_os_str().is_empty())
                .map(|d| d.join(exe_name())),
        );
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(d) = env(var).filter(|d| !d.is_empty()) {
            tries.push(Path::new(&d).join("bin").join(exe_name()));
        }
    }
    tries.push(default_toolkit.join("bin").join(exe_name()));
    if let Some(p) = env("TRITON_PTXAS_PATH").filter(|p| !p.is_empty()) {
        tries.push(PathBuf::from(p));
    }
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(prefix) = env(var).filter(|d| !d.is_empty()) {
            tries.extend(environment_wheels(Path::new(&prefix)));
        }
    }
    tries.extend(extra.iter().cloned());
    tries.into_iter().find(|p| is_executable(p))
}

/// Where the wheels of the Python environment at `prefix` keep a ptxas: under each
/// `lib/python3.*/site-packages` (sorted), the CUDA toolkit's wheel (CUDA 12 and 13 layouts),
/// then Triton's.
fn environment_wheels(prefix: &Path) -> Vec<PathBuf> {
    let mut site: Vec<PathBuf> = std::fs::read_dir(prefix.join("lib"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
                .map(|e| e.path().join("site-packages"))
                .collect()
        })
        .unwrap_or_default();
    site.sort();
    let tails: [&[&str]; 3] = [
        &["nvidia", "cuda_nvcc", "bin"],
        &["nvidia", "cu13", "bin"],
        &["triton", "backends", "nvidia", "bin"],
    ];
    site.iter()
        .flat_map(|s| {
            tails.iter().map(move |t| {
                t.iter()
                    .fold(s.clone(), |p, part| p.join(part))
                    .join(exe_name())
            })
        })
        .collect()
}

/// The file name of ptxas on this platform.
fn exe_name() -> &'static str {
    if cfg!(windows) {
        "ptxas.exe"
    } else {
        "ptxas"
    }
}

/// A regular file this user may execute (on Unix: any execute bit set).
fn is_executable(p: &Path) -> bool {
    let Ok(md) = std::fs::metadata(p) else {
        return false;
    };
    if !md.is_file() {
        return false;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        md.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        true
    }
}
