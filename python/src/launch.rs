//! The GPU launcher behind `kir.torch` (and `kir.Kernel.load`): a compiled module's PTX loaded
//! on a device with the CUDA driver (`kir_backends::runtime`, loaded at run time: the wheel
//! needs no CUDA to build or import), bound to the caller's device memory and launched on the
//! caller's stream. Nothing is allocated, copied or synchronized here: the caller (Python)
//! allocates the `out` tensors and temps that [`Loaded::buffer_specs`] lists, with its own
//! allocator on its own stream, and passes every tensor's address, dtype, shape and strides.
//!
//! - One [`Gpu`] per device ordinal per process, opened on first use (the device's primary
//!   context, the one PyTorch's CUDA runtime uses) and kept for the life of the process.
//! - Binding and launching run without the GIL; a launch makes the primary context current on
//!   the calling thread first (autograd's backward runs on a thread of its own).
//! - [`Loaded::prepare`] binds once (every check) and returns a [`Prepared`] binding whose
//!   `launch` takes only the tensors' addresses (a tuple of ints) and the stream: the hot path
//!   of `kir.torch`, which keeps one per shape key, and of scripts that time launches queued
//!   back to back.
//! - Errors: arguments the kernel cannot take (a shape, dtype or stride the entry refuses, a
//!   broken tensor-map rule) raise `kir.InputError` (a `ValueError`); driver failures raise
//!   `kir.RunError`; no CUDA driver is a `kir.RunError` saying so.

use crate::errors::{py_result, Class, Failure};
use crate::kernel::Compiled;
use kir_backends::runtime::{
    self, BufferRole, CUstream, DeviceArg, DeviceTensor, Gpu, Program, RuntimeError,
};
use kir_compiler::internal::cache;
use kir_compiler::internal::compile::Emit;
use kir_ir::Dtype;
use pyo3::prelude::*;
use pyo3::types::PyInt;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::{Mutex, OnceLock};

/// The opened devices, by ordinal; each is opened once and lives as long as the process.
static GPUS: OnceLock<Mutex<BTreeMap<usize, &'static Gpu>>> = OnceLock::new();

/// Device `ordinal`, opened on first use.
fn gpu(ordinal: usize) -> Result<&'static Gpu, Failure> {
    let map = GPUS.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut map = map
        .lock()
        .map_err(|_| Failure::plain(Class::Run, "the device table was poisoned by a panic"))?;
    if let Some(g) = map.get(&ordinal) {
        return Ok(g);
    }
    let g: &'static Gpu = Box::leak(Box::new(Gpu::open(ordinal).map_err(runtime_failure)?));
    map.insert(ordinal, g);
    Ok(g)
}

/// A runtime error as a Python failure: a binding error is the caller's input.
fn runtime_failure(e: RuntimeError) -> Failure {
    match e {
        RuntimeError::Bind(e) => Failure::plain(Class::Input, e.message.clone()),
        RuntimeError::Cuda(m) | RuntimeError::NoDriver(m) => Failure::plain(Class::Run, m),
    }
}

/// The dtype named `name` (`bf16`, `f32`, ...), or an input error naming `arg`.
fn dtype(arg: &str, name: &str) -> Result<Dtype, Failure> {
    Dtype::from_name(name)
        .ok_or_else(|| Failure::input(arg, format!("`{arg}`: unknown dtype `{name}`")))
}

/// One tensor as Python passes it: (name, address, dtype name, shape, element strides).
type TensorArg = (String, u64, String, Vec<usize>, Vec<usize>);

/// The arguments of a binding: tensors and scalars by name.
fn device_args(
    tensors: Vec<TensorArg>,
    scalars: &[(String, Bound<'_, PyAny>)],
) -> Result<BTreeMap<String, DeviceArg>, Failure> {
    let mut args = BTreeMap::new();
    for (name, ptr, dt, shape, strides) in tensors {
        if shape.len() != strides.len() {
            return Err(Failure::input(
                &name,
                format!(
                    "`{name}`: {} dims but {} strides",
                    shape.len(),
                    strides.len()
                ),
            ));
        }
        let dtype = dtype(&name, &dt)?;
        args.insert(
            name,
            DeviceArg::Tensor(DeviceTensor {
                ptr,
                dtype,
                shape,
                strides,
            }),
        );
    }
    for (name, value) in scalars {
        let arg = if value.is_instance_of::<PyInt>() {
            DeviceArg::Int(value.extract::<i64>().map_err(|_| {
                Failure::input(
                    name,
                    format!("`{name}`: an integer out of the range of i64"),
                )
            })?)
        } else {
            DeviceArg::Scalar(
                value
                    .extract::<f64>()
                    .map_err(|_| Failure::input(name, format!("`{name}`: expected a number")))?,
            )
        };
        args.insert(name.clone(), arg);
    }
    Ok(args)
}

/// A compiled module loaded on a GPU (`kir._kir.Loaded`).
#[pyclass(frozen, module = "kir._kir", name = "Loaded")]
pub struct Loaded {
    program: Arc<Program<'static>>,
    ordinal: usize,
}

#[pymethods]
impl Loaded {
    /// The device ordinal the module is loaded on.
    #[getter]
    fn device(&self) -> usize {
        self.ordinal
    }

    /// The `out` tensors and temps to provide for these inputs: a list of `(name, dtype,
    /// shape, strides, role)`, role `"out"` or `"temp"`.
    fn buffer_specs(
        &self,
        py: Python<'_>,
        tensors: Vec<TensorArg>,
        scalars: Vec<(String, Bound<'_, PyAny>)>,
    ) -> PyResult<Vec<(String, &'static str, Vec<usize>, Vec<usize>, &'static str)>> {
        let args = py_result(py, device_args(tensors, &scalars))?;
        let specs = py_result(
            py,
            self.program.buffer_specs(&args).map_err(runtime_failure),
        )?;
        Ok(specs
            .into_iter()
            .map(|s| {
                let role = match s.role {
                    BufferRole::Out => "out",
                    BufferRole::Temp => "temp",
                };
                (s.name, s.dtype.name(), s.shape, s.strides, role)
            })
            .collect())
    }

    /// Binds `tensors` (every param's and temp's device memory) and `scalars`, then launches
    /// the program on `stream` (a `CUstream` as an int; 0 is the default stream). Returns when
    /// the launches are queued.
    fn launch(
        &self,
        py: Python<'_>,
        tensors: Vec<TensorArg>,
        scalars: Vec<(String, Bound<'_, PyAny>)>,
        stream: u64,
    ) -> PyResult<()> {
        let args = py_result(py, device_args(tensors, &scalars))?;
        let r = py.detach(|| -> Result<(), Failure> {
            let mut bound = self.program.bind_device(&args).map_err(runtime_failure)?;
            self.program
                .launch_on(&mut bound, stream as usize as CUstream)
                .map_err(runtime_failure)
        });
        py_result(py, r)
    }

    /// Binds `tensors` and `scalars` as `launch` does (every check) without launching, and
    /// returns the binding, to be launched again and again with new addresses of tensors of
    /// the same dtypes, shapes and strides ([`Prepared::launch`]).
    fn prepare(
        &self,
        py: Python<'_>,
        tensors: Vec<TensorArg>,
        scalars: Vec<(String, Bound<'_, PyAny>)>,
    ) -> PyResult<Prepared> {
        let order: Vec<String> = tensors.iter().map(|t| t.0.clone()).collect();
        if let Some(i) = (1..order.len()).find(|&i| order[..i].contains(&order[i])) {
            let name = &order[i];
            return py_result(
                py,
                Err(Failure::input(name, format!("`{name}`: given twice"))),
            );
        }
        let args = py_result(py, device_args(tensors, &scalars))?;
        let program = Arc::clone(&self.program);
        let r = py.detach(|| program.prepare(&args, &order).map_err(runtime_failure));
        let prepared = py_result(py, r)?;
        Ok(Prepared {
            program,
            prepared: Mutex::new(prepared),
            names: order,
        })
    }

    fn __repr__(&self) -> String {
        format!("<kir._kir.Loaded on cuda:{}>", self.ordinal)
    }
}

/// A binding prepared by [`Loaded::prepare`] (`kir._kir.Prepared`).
#[pyclass(frozen, module = "kir._kir", name = "Prepared")]
pub struct Prepared {
    program: Arc<Program<'static>>,
    prepared: Mutex<runtime::Prepared>,
    names: Vec<String>,
}

#[pymethods]
impl Prepared {
    /// The tensors' names, in the order `launch` takes their addresses.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.names.clone()
    }

    /// Launches the binding on `stream` (a `CUstream` as an int) with the tensors at `ptrs`
    /// (one address per name, in the order of `names`), which must have the dtypes, shapes
    /// and strides of the tensors it was prepared with. Returns when the launches are queued.
    fn launch(&self, py: Python<'_>, ptrs: Vec<u64>, stream: u64) -> PyResult<()> {
        let r = py.detach(|| -> Result<(), Failure> {
            let mut p = self.prepared.lock().map_err(|_| {
                Failure::plain(Class::Run, "the prepared binding was poisoned by a panic")
            })?;
            self.program
                .launch_prepared(&mut p, &ptrs, stream as usize as CUstream)
                .map_err(runtime_failure)
        });
        py_result(py, r)
    }

    fn __repr__(&self) -> String {
        format!("<kir._kir.Prepared of {}>", self.names.join(", "))
    }
}

/// The target kir compiles for on a GPU of compute capability `(major, minor)`, or None.
#[pyfunction]
pub fn target_for(major: i32, minor: i32) -> Option<&'static str> {
    runtime::target_for((major, minor)).map(|t| t.name())
}

/// Loads `compiled` (PTX) on device `device`: when it was compiled through the on-disk cache,
/// from the cubin of its PTX for the GPU's architecture that the cache (or its prebuilt
/// directory) holds, or that ptxas assembles now (then cached); else the driver JIT-compiles
/// the PTX (`kir_compiler::internal::cache::load_program`).
#[pyfunction]
pub fn load(py: Python<'_>, compiled: &Compiled, device: usize) -> PyResult<Loaded> {
    if compiled.emit_kind() != Emit::Ptx {
        return py_result(
            py,
            Err(Failure::input(
                "emit",
                "only a kernel compiled to PTX (emit=\"ptx\") can be loaded on a GPU",
            )),
        );
    }
    let (cached, target) = (compiled.cached(), compiled.target_kind());
    let r = py.detach(|| -> Result<Program<'static>, Failure> {
        let g = gpu(device)?;
        if cached.compiled.meta.is_none() {
            return Err(Failure::plain(
                Class::Run,
                "the compilation has no META.json to launch from",
            ));
        }
        let store = match cached.outcome {
            cache::Outcome::Off => None,
            _ => cache::Cache::from_env(),
        };
        cache::load_program(g, &cached.compiled, target, store.as_ref())
            .map(|(p, _)| p)
            .map_err(runtime_failure)
    });
    let program = py_result(py, r)?;
    Ok(Loaded {
        program: Arc::new(program),
        ordinal: device,
    })
}
