//! A small safe layer over the CUDA driver API (through `cudarc`'s raw bindings, loaded at run
//! time): opening a device, loading PTX (or a cubin), device memory, launches (on a stream) and
//! events; tensor maps are encoded in `maps.rs`. Every call returns a [`RuntimeError`]; nothing
//! here panics. The driver library is looked up before the first call, and every entry point
//! used is checked to exist, so a machine without a driver (or with one too old) gets an error
//! saying so instead of a panic inside the bindings.

use super::RuntimeError;
use crate::tensor_map::TENSOR_MAP_BYTES;
use cudarc::driver::sys::{self, CUresult};

/// A CUDA stream handle of the driver API (`CUstream`); null is the default stream.
pub use cudarc::driver::sys::CUstream;
use std::ffi::{c_void, CStr, CString};

/// Every driver entry point the runtime calls (checked at [`Gpu::open`]).
const SYMBOLS: [&str; 30] = [
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuModuleLoadDataEx",
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuFuncSetAttribute",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemsetD8_v2",
    "cuMemsetD16_v2",
    "cuMemsetD32_v2",
    "cuLaunchKernel",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuEventDestroy_v2",
    "cuGetErrorString",
    "cuGetErrorName",
];

/// Turns a driver status into a result; the error names the call and the driver's message.
pub(crate) fn check(r: CUresult, what: &str) -> Result<(), RuntimeError> {
    if r == CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (mut name, mut text) = (std::ptr::null(), std::ptr::null());
    // SAFETY: both calls only write a pointer to a static string (or leave it null).
    unsafe {
        sys::cuGetErrorName(r, &mut name);
        sys::cuGetErrorString(r, &mut text);
    }
    let cstr = |p: *const std::ffi::c_char| {
        if p.is_null() {
            format!("{r:?}")
        } else {
            // SAFETY: the driver returned a NUL-terminated static string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    Err(RuntimeError::Cuda(format!(
        "{what} failed: {} ({})",
        cstr(text),
        cstr(name)
    )))
}

/// An open CUDA device with its primary context current on this thread.
pub struct Gpu {
    device: sys::CUdevice,
    ctx: sys::CUcontext,
    /// The device's name (e.g. `NVIDIA H200`).
    pub name: String,
    /// The compute capability (major, minor).
    pub capability: (i32, i32),
    /// The driver's version as `cuDriverGetVersion` gives it (12080 for CUDA 12.8): a cubin the
    /// driver compiled is kept per driver version.
    pub driver_version: i32,
}

impl Gpu {
    /// Opens device `ordinal`. Fails with a clear message when no CUDA driver can be loaded,
    /// the driver lacks an entry point, or there is no such device.
    pub fn open(ordinal: usize) -> Result<Gpu, RuntimeError> {
        // SAFETY: probing for the library only tries to open it.
        if !unsafe { sys::is_culib_present() } {
            return Err(RuntimeError::NoDriver(
                "no CUDA driver found: libcuda.so could not be loaded (is the NVIDIA driver \
                 installed and its library on the loader path?); `--device cpu` runs the \
                 interpreter"
                    .into(),
            ));
        }
        // SAFETY: the library is present (checked above), so `culib` does not panic.
        let lib = unsafe { sys::culib() };
        for s in SYMBOLS {
            // SAFETY: only looks the symbol up; it is not called through this pointer.
            if unsafe { lib.get::<*const c_void>(s.as_bytes()) }.is_err() {
                return Err(RuntimeError::NoDriver(format!(
                    "the CUDA driver has no `{s}`: it is too old for kir's runtime"
                )));
            }
        }
        // SAFETY: plain driver calls with valid out-pointers.
        unsafe {
            let r = sys::cuInit(0);
            if r == CUresult::CUDA_ERROR_NO_DEVICE {
                return Err(RuntimeError::NoDriver(
                    "no CUDA device found: the driver is installed but reports no GPU".into(),
                ));
            }
            check(r, "cuInit (initializing the CUDA driver)")?;
            let mut driver_version = 0;
            check(
                sys::cuDriverGetVersion(&mut driver_version),
                "cuDriverGetVersion",
            )?;
            let mut n = 0;
            check(sys::cuDeviceGetCount(&mut n), "cuDeviceGetCount")?;
            if n <= 0 {
                return Err(RuntimeError::NoDriver(
                    "no CUDA device found: the driver reports none".into(),
                ));
            }
            if ordinal >= n as usize {
                return Err(RuntimeError::Cuda(format!(
                    "no CUDA device {ordinal} (the driver reports {n})"
                )));
            }
            let mut device = 0;
            check(sys::cuDeviceGet(&mut device, ordinal as i32), "cuDeviceGet")?;
            let mut buf = [0 as std::ffi::c_char; 256];
            check(
                sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, device),
                "cuDeviceGetName",
            )?;
            let name = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
            let attr = |a| -> Result<i32, RuntimeError> {
                let mut v = 0;
                check(
                    sys::cuDeviceGetAttribute(&mut v, a, device),
                    "cuDeviceGetAttribute",
                )?;
                Ok(v)
            };
            use sys::CUdevice_attribute as A;
            let capability = (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            );
            let mut ctx = std::ptr::null_mut();
            check(
                sys::cuDevicePrimaryCtxRetain(&mut ctx, device),
                "cuDevicePrimaryCtxRetain",
            )?;
            let gpu = Gpu {
                device,
                ctx,
                name,
                capability,
                driver_version,
            };
            check(sys::cuCtxSetCurrent(gpu.ctx), "cuCtxSetCurrent")?;
            Ok(gpu)
        }
    }

    /// Makes the device's primary context (the one the CUDA runtime, and so PyTorch, uses)
    /// current on the calling thread: a caller that launches from several threads (autograd's
    /// backward runs on a thread of its own) calls this before launching.
    pub fn make_current(&self) -> Result<(), RuntimeError> {
        // SAFETY: the context was retained in `open` and lives as long as `self`.
        check(unsafe { sys::cuCtxSetCurrent(self.ctx) }, "cuCtxSetCurrent")
    }

    /// Waits for all work on the device; a kernel fault shows here.
    pub fn synchronize(&self) -> Result<(), RuntimeError> {
        // SAFETY: the context is current (set in `open`).
        check(
            unsafe { sys::cuCtxSynchronize() },
            "running the kernels (cuCtxSynchronize)",
        )
    }
}

// SAFETY: the handles are the driver's, whose entry points are thread-safe; the primary
// context is valid on every thread and `make_current` makes it current on the caller's.
unsafe impl Send for Gpu {}
// SAFETY: as above; no method mutates the struct.
unsafe impl Sync for Gpu {}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: releases the retain taken in `open`.
        unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(self.device);
        }
    }
}

/// A loaded PTX module.
pub(crate) struct CuModule(sys::CUmodule);

impl CuModule {
    /// Loads `ptx` (the driver compiles it for the device). A JIT failure carries its log.
    pub(crate) fn load(_gpu: &Gpu, ptx: &str) -> Result<CuModule, RuntimeError> {
        let text = CString::new(ptx)
            .map_err(|_| RuntimeError::Cuda("the PTX contains a NUL byte".into()))?;
        let mut log = vec![0u8; 16384];
        let mut opts = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut vals = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
        let mut m = std::ptr::null_mut();
        // SAFETY: the options point at live buffers of the stated sizes.
        let r = unsafe {
            sys::cuModuleLoadDataEx(
                &mut m,
                text.as_ptr() as *const c_void,
                opts.len() as u32,
                opts.as_mut_ptr(),
                vals.as_mut_ptr(),
            )
        };
        check(r, "loading the PTX (cuModuleLoadDataEx)").map_err(|e| {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let log = String::from_utf8_lossy(&log[..end]);
            RuntimeError::Cuda(format!("{e}\n{}", log.trim_end()))
        })?;
        Ok(CuModule(m))
    }

    /// Loads each of `ptxs` as a module of its own, each on a thread of its own with the
    /// device's context current there, so that the driver JIT-compiles them at once (a
    /// program's kernels: attention_bwd's dK/dV, dQ and preprocess kernels). The modules come
    /// back in order; the first failure is the error.
    pub(crate) fn load_all(gpu: &Gpu, ptxs: &[&str]) -> Result<Vec<CuModule>, RuntimeError> {
        if let [one] = ptxs {
            return Ok(vec![CuModule::load(gpu, one)?]);
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = ptxs
                .iter()
                .map(|&p| {
                    s.spawn(move || {
                        gpu.make_current()?;
                        CuModule::load(gpu, p)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(RuntimeError::Cuda("a thread loading PTX panicked".into()))
                    })
                })
                .collect()
        })
    }

    /// Loads a `cubin` assembled for this device (`crate::runtime::cubin`): no JIT.
    pub(crate) fn load_cubin(_gpu: &Gpu, cubin: &[u8]) -> Result<CuModule, RuntimeError> {
        if cubin.is_empty() {
            return Err(RuntimeError::Cuda("the cubin is empty".into()));
        }
        // The image is copied into 8-byte aligned storage (an ELF file's headers are read in
        // place by the driver).
        let mut aligned = vec![0u64; cubin.len().div_ceil(8)];
        // SAFETY: `aligned` holds at least `cubin.len()` bytes; the regions do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                cubin.as_ptr(),
                aligned.as_mut_ptr() as *mut u8,
                cubin.len(),
            );
        }
        let mut m = std::ptr::null_mut();
        // SAFETY: the image is a whole cubin in live memory; `m` is a valid out-pointer.
        check(
            unsafe { sys::cuModuleLoadData(&mut m, aligned.as_ptr() as *const c_void) },
            "loading the cubin (cuModuleLoadData)",
        )?;
        Ok(CuModule(m))
    }

    /// The kernel `symbol`; above 48 KB of dynamic shared memory the function's limit is raised
    /// to `shared_bytes`.
    pub(crate) fn function(
        &self,
        symbol: &str,
        shared_bytes: u32,
    ) -> Result<sys::CUfunction, RuntimeError> {
        let name = CString::new(symbol)
            .map_err(|_| RuntimeError::Cuda(format!("bad symbol `{symbol}`")))?;
        let mut f = std::ptr::null_mut();
        // SAFETY: the module is loaded; `f` is a valid out-pointer.
        check(
            unsafe { sys::cuModuleGetFunction(&mut f, self.0, name.as_ptr()) },
            &format!("finding kernel `{symbol}` in the PTX"),
        )?;
        if shared_bytes > 48 * 1024 {
            let a = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            // SAFETY: `f` is a function of the loaded module.
            check(
                unsafe { sys::cuFuncSetAttribute(f, a, shared_bytes as i32) },
                &format!("allowing {shared_bytes} bytes of dynamic shared memory for `{symbol}`"),
            )?;
        }
        Ok(f)
    }
}

// SAFETY: a module handle is valid on any thread whose current context is the one it was
// loaded in (a launch with another context current fails with a driver error, it is not
// undefined behaviour); loading and unloading are thread-safe driver calls.
unsafe impl Send for CuModule {}
// SAFETY: as above; `function` only reads the handle.
unsafe impl Sync for CuModule {}

impl Drop for CuModule {
    fn drop(&mut self) {
        // SAFETY: the module was loaded by `load` and is unloaded once.
        unsafe {
            sys::cuModuleUnload(self.0);
        }
    }
}

/// A device allocation of `bytes` bytes (at least one byte is allocated, so the pointer is
/// always valid).
pub(crate) struct DevMem {
    pub ptr: sys::CUdeviceptr,
    pub bytes: usize,
}

impl DevMem {
    /// Allocates `bytes` bytes of uninitialized device memory.
    pub(crate) fn alloc(bytes: usize, what: &str) -> Result<DevMem, RuntimeError> {
        let mut ptr = 0;
        // SAFETY: `ptr` is a valid out-pointer.
        check(
            unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes.max(1)) },
            &format!("allocating {bytes} bytes for `{what}`"),
        )?;
        Ok(DevMem { ptr, bytes })
    }

    /// Copies `data` (exactly `bytes` long) to the device.
    pub(crate) fn upload(&self, data: &[u8]) -> Result<(), RuntimeError> {
        if data.len() != self.bytes {
            return Err(RuntimeError::Cuda(format!(
                "internal error: uploading {} bytes into {}",
                data.len(),
                self.bytes
            )));
        }
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the allocation holds `bytes` bytes and `data` as many.
        check(
            unsafe { sys::cuMemcpyHtoD_v2(self.ptr, data.as_ptr() as *const c_void, data.len()) },
            "copying to the device",
        )
    }

    /// Copies the whole allocation back to the host (waits for the device).
    pub(crate) fn download(&self) -> Result<Vec<u8>, RuntimeError> {
        let mut out = vec![0u8; self.bytes];
        if self.bytes > 0 {
            // SAFETY: `out` holds `bytes` bytes, as does the allocation.
            check(
                unsafe {
                    sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, self.ptr, self.bytes)
                },
                "copying from the device (a kernel may have faulted)",
            )?;
        }
        Ok(out)
    }

    /// Fills the allocation with `pattern` (1, 2 or 4 bytes, repeated; 8-byte patterns are
    /// uploaded).
    pub(crate) fn fill(&self, pattern: &[u8]) -> Result<(), RuntimeError> {
        let w = pattern.len();
        if w == 0 || !self.bytes.is_multiple_of(w) {
            return Err(RuntimeError::Cuda(format!(
                "internal error: fill pattern of {w} bytes over {}",
                self.bytes
            )));
        }
        let n = self.bytes / w;
        // SAFETY: `n` elements of `w` bytes cover the allocation exactly.
        let r = unsafe {
            match w {
                1 => sys::cuMemsetD8_v2(self.ptr, pattern[0], n),
                2 => sys::cuMemsetD16_v2(self.ptr, u16::from_le_bytes([pattern[0], pattern[1]]), n),
                4 => sys::cuMemsetD32_v2(
                    self.ptr,
                    u32::from_le_bytes([pattern[0], pattern[1], pattern[2], pattern[3]]),
                    n,
                ),
                _ => return self.upload(&pattern.repeat(n)),
            }
        };
        check(r, "filling device memory")
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        // SAFETY: the pointer came from cuMemAlloc and is freed once.
        unsafe {
            sys::cuMemFree_v2(self.ptr);
        }
    }
}

/// The 128 bytes of one encoded tensor map (`CUtensorMap`), 128-byte aligned: the kernel
/// parameter is `.align 64`, and CUDA 13's headers align the type to 128, so this suits both.
#[repr(C, align(128))]
#[derive(Clone, Copy)]
pub(crate) struct TensorMapBytes(pub [u8; TENSOR_MAP_BYTES]);

/// One kernel parameter's value, where the driver copies it from at launch.
pub(crate) enum KernelArg {
    /// A value of at most 8 bytes, little-endian (the driver reads the param's size from the
    /// kernel: 1, 2, 4 or 8 bytes of it).
    Word(u64),
    /// A tensor map passed by value (128 bytes). Boxed, so its address stays put while the
    /// bound launch lives.
    Map(Box<TensorMapBytes>),
}

/// Launches `f` on `stream` (null: the default stream) with one value per kernel param, in
/// order.
pub(crate) fn launch(
    f: sys::CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    args: &mut [KernelArg],
    stream: sys::CUstream,
    what: &str,
) -> Result<(), RuntimeError> {
    let mut ptrs: Vec<*mut c_void> = args
        .iter_mut()
        .map(|a| match a {
            KernelArg::Word(w) => w as *mut u64 as *mut c_void,
            KernelArg::Map(m) => m.0.as_mut_ptr() as *mut c_void,
        })
        .collect();
    // SAFETY: one pointer per kernel parameter, each to live bytes of at least the param's size
    // (8 for a scalar, pointer or dim; 128 for a tensor map), all alive until the call returns
    // (the driver copies the values at launch).
    let r = unsafe {
        sys::cuLaunchKernel(
            f,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            shared_bytes,
            stream,
            ptrs.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    // The message is formatted only on failure: a launch is on every call's hot path.
    if r == CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    check(
        r,
        &format!("launching `{what}` (grid {grid:?}, block {block:?}, {shared_bytes} B shared)"),
    )
}

/// A CUDA event on the default stream, for timing.
pub(crate) struct Event(sys::CUevent);

impl Event {
    /// A new event.
    pub(crate) fn new() -> Result<Event, RuntimeError> {
        let mut e = std::ptr::null_mut();
        // SAFETY: `e` is a valid out-pointer.
        check(unsafe { sys::cuEventCreate(&mut e, 0) }, "cuEventCreate")?;
        Ok(Event(e))
    }

    /// Records the event on the default stream.
    pub(crate) fn record(&self) -> Result<(), RuntimeError> {
        // SAFETY: the event is live.
        check(
            unsafe { sys::cuEventRecord(self.0, std::ptr::null_mut()) },
            "cuEventRecord",
        )
    }

    /// Milliseconds from `self` to `end` (waits for `end`).
    pub(crate) fn elapsed_ms(&self, end: &Event) -> Result<f32, RuntimeError> {
        let mut ms = 0f32;
        // SAFETY: both events are live and recorded.
        unsafe {
            check(
                sys::cuEventSynchronize(end.0),
                "running the kernels (cuEventSynchronize)",
            )?;
            check(
                sys::cuEventElapsedTime(&mut ms, self.0, end.0),
                "cuEventElapsedTime",
            )?;
        }
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event was created by `new` and is destroyed once.
        unsafe {
            sys::cuEventDestroy_v2(self.0);
        }
    }
}
