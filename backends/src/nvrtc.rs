//! NVRTC (CUDA C → PTX) and ptxas (PTX → SASS), used to check generated code on a machine
//! without a GPU.
//!
//! NVRTC is loaded at run time from the path in `KIR_NVRTC` (nothing CUDA is needed to build
//! kir); ptxas is run from the path in `KIR_PTXAS`. `scripts/install-tools.sh` installs both,
//! pinned, and `scripts/test.sh` sets the variables. NVRTC loads its companion library
//! `libnvrtc-builtins` by name, so the one found next to `KIR_NVRTC` is loaded first.

use libloading::Library;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

type Prog = *mut c_void;

/// A loaded NVRTC library.
pub struct Nvrtc {
    lib: Library,
    _builtins: Vec<Library>,
}

impl Nvrtc {
    /// Loads NVRTC from `path` (and the `libnvrtc-builtins*` next to it).
    pub fn load(path: &Path) -> Result<Nvrtc, String> {
        let mut builtins = Vec::new();
        if let Some(dir) = path.parent() {
            let mut found: Vec<_> = std::fs::read_dir(dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("libnvrtc-builtins.so"))
                })
                .collect();
            found.sort();
            for p in found {
                // SAFETY: loading a shared library runs its initializers; libnvrtc-builtins
                // is NVIDIA's plain data/code library with no unusual initialization.
                let l = unsafe {
                    libloading::os::unix::Library::open(
                        Some(&p),
                        libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
                    )
                }
                .map_err(|e| format!("cannot load {}: {e}", p.display()))?;
                builtins.push(Library::from(l));
            }
        }
        // SAFETY: as above, for libnvrtc itself.
        let lib = unsafe { Library::new(path) }
            .map_err(|e| format!("cannot load NVRTC from {}: {e}", path.display()))?;
        Ok(Nvrtc {
            lib,
            _builtins: builtins,
        })
    }

    /// Loads NVRTC from `$KIR_NVRTC`; the error says how to get it.
    pub fn from_env() -> Result<Nvrtc, String> {
        let p = std::env::var("KIR_NVRTC").map_err(|_| {
            "KIR_NVRTC is not set: run the tests with ./scripts/test.sh, which installs NVRTC \
             (nvidia-cuda-nvrtc==13.0.88) and sets it"
                .to_string()
        })?;
        Nvrtc::load(Path::new(&p))
    }

    /// NVRTC's version (major, minor).
    pub fn version(&self) -> Result<(i32, i32), String> {
        let (mut a, mut b) = (0, 0);
        // SAFETY: nvrtcVersion(int*, int*) writes two ints.
        let r = unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int>(b"nvrtcVersion\0")
                .map_err(|e| e.to_string())?;
            f(&mut a, &mut b)
        };
        if r != 0 {
            return Err(format!("nvrtcVersion failed ({r})"));
        }
        Ok((a, b))
    }

    /// Compiles CUDA C `src` with `options` (e.g. `--gpu-architecture=compute_90a`); returns
    /// the PTX, or the compile log.
    pub fn compile(&self, src: &str, name: &str, options: &[&str]) -> Result<String, String> {
        let csrc = CString::new(src).map_err(|_| "source contains a NUL byte".to_string())?;
        let cname = CString::new(name).map_err(|_| "name contains a NUL byte".to_string())?;
        let copts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(*o).map_err(|_| "option contains a NUL byte".to_string()))
            .collect::<Result<_, _>>()?;
        let optp: Vec<*const c_char> = copts.iter().map(|c| c.as_ptr()).collect();
        type Create = unsafe extern "C" fn(
            *mut Prog,
            *const c_char,
            *const c_char,
            c_int,
            *const *const c_char,
            *const *const c_char,
        ) -> c_int;
        type Compile = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
        type Size = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
        type Get = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
        type Destroy = unsafe extern "C" fn(*mut Prog) -> c_int;
        let sym = |n: &[u8]| -> Result<*const c_void, String> {
            // SAFETY: looking up a symbol by name; the pointer is cast to its documented type below.
            unsafe { self.lib.get::<*const c_void>(n) }
                .map(|s| *s)
                .map_err(|e| format!("NVRTC lacks {}: {e}", String::from_utf8_lossy(n)))
        };
        // SAFETY: every function pointer is NVRTC's documented C API (nvrtc.h) with the types
        // above; buffers are sized by the matching *Size call; the program is destroyed once.
        unsafe {
            let create: Create = std::mem::transmute(sym(b"nvrtcCreateProgram\0")?);
            let compile: Compile = std::mem::transmute(sym(b"nvrtcCompileProgram\0")?);
            let log_size: Size = std::mem::transmute(sym(b"nvrtcGetProgramLogSize\0")?);
            let get_log: Get = std::mem::transmute(sym(b"nvrtcGetProgramLog\0")?);
            let ptx_size: Size = std::mem::transmute(sym(b"nvrtcGetPTXSize\0")?);
            let get_ptx: Get = std::mem::transmute(sym(b"nvrtcGetPTX\0")?);
            let destroy: Destroy = std::mem::transmute(sym(b"nvrtcDestroyProgram\0")?);
            let mut prog: Prog = std::ptr::null_mut();
            let r = create(
                &mut prog,
                csrc.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            );
            if r != 0 {
                return Err(format!("nvrtcCreateProgram failed ({r})"));
            }
            let read = |size: Size, get: Get| -> String {
                let mut n = 0usize;
                if size(prog, &mut n) != 0 || n == 0 {
                    return String::new();
                }
                let mut buf = vec![0u8; n];
                if get(prog, buf.as_mut_ptr() as *mut c_char) != 0 {
                    return String::new();
                }
                String::from_utf8_lossy(&buf[..n - 1]).into_owned()
            };
            let r = compile(prog, optp.len() as c_int, optp.as_ptr());
            let out = if r == 0 {
                Ok(read(ptx_size, get_ptx))
            } else {
                Err(format!("NVRTC error {r}:\n{}", read(log_size, get_log)))
            };
            destroy(&mut prog);
            out
        }
    }
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Assembles `ptx` with `$KIR_PTXAS -arch=ARCH -v`; returns ptxas's report (registers, shared
/// memory, spills) or its error output.
pub fn ptxas(ptx: &str, arch: &str) -> Result<String, String> {
    let exe = std::env::var("KIR_PTXAS").map_err(|_| {
        "KIR_PTXAS is not set: run the tests with ./scripts/test.sh, which installs ptxas \
         (nvidia-cuda-nvcc==13.0.88) and sets it"
            .to_string()
    })?;
    assemble(&exe, ptx, arch).map(|(_, report)| report)
}

/// Per ptxas executable, whether it takes `--split-compile` (ptxas 13.0 does); absent until
/// its first run.
static SPLIT: OnceLock<Mutex<HashMap<String, bool>>> = OnceLock::new();

/// Assembles `ptx` into a cubin with the ptxas at `exe` (`-arch=ARCH -v`, a whole program, as
/// the driver's JIT compiles a module): the cubin and ptxas's report, or its error output.
///
/// The module's kernels are assembled on threads of their own (`--split-compile 0`: one per
/// CPU), so a program of several kernels takes about as long as its largest: attention_bwd's
/// three on sm_90a 0.26 s against 0.35 on two cores. The code is the same: with ptxas 13.0.88
/// every section of the cubins of every op's default PTX on the four targets is byte for byte
/// what it is without the option, but for the toolkit note that records the command line. A
/// ptxas that does not know the option is run again without it (and not asked again).
pub fn assemble(exe: &str, ptx: &str, arch: &str) -> Result<(Vec<u8>, String), String> {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let base = std::env::temp_dir().join(format!("kir-ptxas-{}-{n}", std::process::id()));
    let (ptx_path, out_path) = (base.with_extension("ptx"), base.with_extension("cubin"));
    std::fs::write(&ptx_path, ptx).map_err(|e| format!("{}: {e}", ptx_path.display()))?;
    let run = |split: bool| {
        let mut cmd = Command::new(exe);
        cmd.arg(format!("-arch={arch}")).arg("-v");
        if split {
            cmd.args(["--split-compile", "0"]);
        }
        cmd.arg(&ptx_path).arg("-o").arg(&out_path).output()
    };
    let known = SPLIT.get_or_init(Default::default);
    let takes = known
        .lock()
        .map(|m| m.get(exe).copied())
        .unwrap_or(Some(false));
    let mut res = run(takes != Some(false));
    if takes.is_none() {
        let refused = matches!(&res, Ok(o) if !o.status.success()
            && String::from_utf8_lossy(&o.stderr).contains("split-compile"));
        if let Ok(mut m) = known.lock() {
            m.insert(exe.to_string(), !refused);
        }
        if refused {
            res = run(false);
        }
    }
    let _ = std::fs::remove_file(&ptx_path);
    let cubin = std::fs::read(&out_path);
    let _ = std::fs::remove_file(&out_path);
    let out = res.map_err(|e| format!("cannot run {exe}: {e}"))?;
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("ptxas -arch={arch} failed:\n{text}"));
    }
    let cubin = cubin.map_err(|e| format!("ptxas wrote no cubin: {e}"))?;
    Ok((cubin, text))
}
