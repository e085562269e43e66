//! `kir._kir`, the native module of the Python package `kir` (python/kir/__init__.py holds the
//! typed public API over it, docs/python.md describes it).
//!
//! It is a thin layer over the libraries `kirc` drives, with the same entry points, so Python
//! and the command line accept, refuse and produce the same things:
//! - `ops`: the built-in ops (`kir_compiler::internal::oplib`), as `kirc ops`;
//! - `constants`: one module's specialization constants, as `kirc ops NAME`;
//! - `compile`: `CompilePlan::resolve` + `kir_compiler::internal::cache::compile`, as `kirc compile`
//!   (kernel.rs);
//! - `run`: the front end and the CPU interpreter on `.npy` bytes, as `kirc run` (interpret.rs);
//! - `load`, `Loaded`: a compiled module on a GPU, launched on the caller's tensors and stream
//!   (launch.rs; the launcher of `kir.torch`).
//!
//! Sources load through `kir_compiler::internal::source` (a path, a built-in op's name, or the text of a
//! module), and errors render there too, so an exception's text is kirc's message (errors.rs).
//! Compilation and the interpreter run with the GIL released. Nothing here panics on user
//! input: every failure is a Python exception.

mod errors;
mod interpret;
mod kernel;
mod launch;

use errors::{py_result, Class, Failure};
use kir_compiler::internal::oplib;
use kir_compiler::internal::source::Source;
use kir_ir::{ConstKind, EvalVal};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

/// The name errors show for a module given as text.
const INLINE_NAME: &str = "<source>";

/// The module `source` names: its text when it holds a newline, else a path or a built-in op
/// (`kir_compiler::internal::source::Source::load`).
fn load(source: &str) -> Result<Source, Failure> {
    if source.contains('\n') {
        return Ok(Source {
            name: INLINE_NAME.to_string(),
            text: source.to_string(),
        });
    }
    Source::load(source).map_err(|m| Failure::input("source", m))
}

/// The names of the built-in ops, sorted.
#[pyfunction]
fn ops() -> Vec<&'static str> {
    oplib::builtins().map(|(n, _)| n).collect()
}

/// The first line of a module's header comment (`kirc ops`' summary), or "".
#[pyfunction]
fn summary(py: Python<'_>, source: &str) -> PyResult<String> {
    let src = py_result(py, load(source))?;
    Ok(oplib::summary(&src.text).to_string())
}

/// One dict per specialization constant of the module `source` names, in declaration order:
/// `kind` ("int" or "enum"), `values` (an enum's names, else None), `default` (its value with
/// the other constants at their defaults), `default_expr` (as written), `tune` (the values
/// `kirc tune` tries, or None), `where` (the condition every value must satisfy, or None) and
/// `doc` (the comment above the declaration).
#[pyfunction]
fn constants<'py>(py: Python<'py>, source: &str) -> PyResult<Bound<'py, PyDict>> {
    let src = py_result(py, load(source))?;
    let m = py_result(
        py,
        kir_ir::text::parse(&src.text).map_err(|d| Failure::located(Class::Compile, &src, &d)),
    )?;
    let values = py_result(
        py,
        kir_compiler::internal::passes::const_values(&m, &[])
            .map_err(|d| Failure::located(Class::Compile, &src, &d)),
    )?;
    let out = PyDict::new(py);
    for c in &m.consts {
        let d = PyDict::new(py);
        match &c.kind {
            ConstKind::Int => {
                d.set_item("kind", "int")?;
                d.set_item("values", py.None())?;
            }
            ConstKind::Enum(names) => {
                d.set_item("kind", "enum")?;
                d.set_item("values", PyList::new(py, names)?)?;
            }
        }
        let default = values.iter().find(|(n, _)| *n == c.name).map(|(_, v)| v);
        match default {
            Some(EvalVal::Int(i)) => d.set_item("default", i)?,
            Some(EvalVal::Float(x)) => d.set_item("default", x)?,
            Some(EvalVal::Bool(b)) => d.set_item("default", *b as i64)?,
            Some(EvalVal::Sym(s)) => d.set_item("default", s)?,
            None => d.set_item("default", py.None())?,
        }
        d.set_item("default_expr", c.default.to_string())?;
        match &c.tune {
            Some(t) => d.set_item("tune", PyList::new(py, &t.values)?)?,
            None => d.set_item("tune", py.None())?,
        }
        match &c.require {
            Some(w) => d.set_item("where", w.to_string())?,
            None => d.set_item("where", py.None())?,
        }
        d.set_item("doc", c.doc.join("\n"))?;
        out.set_item(&c.name, d)?;
    }
    Ok(out)
}

/// Compiles the module `source` names with the `-D` pairs `defines` for `target`, emitting
/// `emit` (`ptx`, `cuda` or `ir`); `kernel` compiles one kernel alone as the entry; `cache`
/// allows the on-disk cache where the environment enables it; `shapes` holds `(param,
/// extents)` of entry tensors the caller will pass, for the configurations by shape.
#[pyfunction]
#[pyo3(signature = (source, target, emit, defines, kernel = None, cache = true, shapes = Vec::new()))]
#[allow(clippy::too_many_arguments)]
fn compile(
    py: Python<'_>,
    source: &str,
    target: &str,
    emit: &str,
    defines: Vec<(String, String)>,
    kernel: Option<String>,
    cache: bool,
    shapes: Vec<(String, Vec<usize>)>,
) -> PyResult<kernel::Compiled> {
    let target = py_result(py, kernel::target(target))?;
    let emit = py_result(py, kernel::emit(emit))?;
    let src = py_result(py, load(source))?;
    let r = py.detach(|| kernel::compile(src, &defines, target, emit, kernel, cache, &shapes));
    py_result(py, r)
}

/// The identity of compiling the module `source` names with `defines` for `target` (PTX) and
/// the entry tensors' `shapes` (`(param, extents)`): two calls with equal identities compile to
/// the same code (`CompilePlan::identity`).
#[pyfunction]
fn plan_identity(
    py: Python<'_>,
    source: &str,
    target: &str,
    defines: Vec<(String, String)>,
    shapes: Vec<(String, Vec<usize>)>,
) -> PyResult<String> {
    let target = py_result(py, kernel::target(target))?;
    let src = py_result(py, load(source))?;
    py_result(py, kernel::plan_identity(&src, &defines, target, &shapes))
}

/// Runs the entry of the module `source` names on the CPU interpreter, specialized with the
/// `-D` pairs `defines`. `inputs` holds `(name, kind, value)`: kind "npy" with the bytes of a
/// C-order `.npy` file, "int" with an int, "float" with a float. Returns `(name, npy bytes)` for
/// every `out` and `inout` tensor, in the entry's param order.
#[pyfunction]
#[pyo3(signature = (source, inputs, defines, kernel = None))]
fn run<'py>(
    py: Python<'py>,
    source: &str,
    inputs: Vec<(String, String, Bound<'py, PyAny>)>,
    defines: Vec<(String, String)>,
    kernel: Option<String>,
) -> PyResult<Vec<(String, Bound<'py, PyBytes>)>> {
    let src = py_result(py, load(source))?;
    if let Some(name) = &kernel {
        py_result(py, kernel::check_kernel(&src, name))?;
    }
    let mut args = Vec::with_capacity(inputs.len());
    for (name, kind, value) in inputs {
        let bad = |what: &str| Failure::input(&name, format!("inputs['{name}']: {what}"));
        let input = match kind.as_str() {
            "npy" => interpret::Input::Tensor(
                value
                    .extract::<Vec<u8>>()
                    .map_err(|_| bad("expected the bytes of an .npy file").into_py(py))?,
            ),
            "int" => interpret::Input::Int(value.extract::<i64>().map_err(|_| {
                bad("an integer out of the range of i64 (-2**63 to 2**63 - 1)").into_py(py)
            })?),
            "float" => interpret::Input::Float(
                value
                    .extract::<f64>()
                    .map_err(|_| bad("expected a float").into_py(py))?,
            ),
            other => return Err(bad(&format!("unknown input kind `{other}`")).into_py(py)),
        };
        args.push((name, input));
    }
    let r = py.detach(|| interpret::run(&src, &defines, kernel.as_deref(), args));
    let outputs = py_result(py, r)?;
    Ok(outputs
        .into_iter()
        .map(|(name, bytes)| (name, PyBytes::new(py, &bytes)))
        .collect())
}

/// Registers more places a ptxas may be (`kir_backends::ptxas_path::add_candidates`), tried
/// after the environment's: the package passes the ptxas of the CUDA toolkit's wheel and of
/// Triton's wheel, so that a program's first launch is assembled by ptxas, not the driver's JIT.
#[pyfunction]
fn add_ptxas_candidates(paths: Vec<String>) {
    kir_backends::ptxas_path::add_candidates(paths.into_iter().map(std::path::PathBuf::from));
}

/// The ptxas that assembles the kir cache's cubins (`kir_backends::ptxas_path::located`), or
/// None where none is found (the PTX then goes through the driver's JIT).
#[pyfunction]
fn ptxas() -> Option<String> {
    kir_backends::ptxas_path::located().map(|p| p.to_string_lossy().into_owned())
}

/// The native module `kir._kir`.
#[pymodule]
fn _kir(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ops, m)?)?;
    m.add_function(wrap_pyfunction!(summary, m)?)?;
    m.add_function(wrap_pyfunction!(constants, m)?)?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(plan_identity, m)?)?;
    m.add_function(wrap_pyfunction!(kernel::from_ptx, m)?)?;
    m.add_function(wrap_pyfunction!(launch::load, m)?)?;
    m.add_function(wrap_pyfunction!(launch::target_for, m)?)?;
    m.add_function(wrap_pyfunction!(add_ptxas_candidates, m)?)?;
    m.add_function(wrap_pyfunction!(ptxas, m)?)?;
    m.add_class::<kernel::Compiled>()?;
    m.add_class::<launch::Loaded>()?;
    m.add_class::<launch::Prepared>()?;
    m.add("KIR_VERSION", kir_compiler::internal::cache::KIR_VERSION)?;
    Ok(())
}
