//! `kir.run`: a module's entry on the CPU interpreter, with the contract of `kirc run`.
//!
//! The front end runs with the constants (`-D NAME=VALUE`), the entry is the program, the single
//! kernel, or the kernel `kernel` names (`kir_compiler::internal::pipeline::entry_module`), and each
//! input becomes the argument `kirc run --arg` would make of it:
//! - a tensor arrives as the bytes of a C-order `.npy` (the Python side writes it with NumPy's
//!   own writer) and is read by `kir_compiler::internal::npy::parse`, the reader of `kirc run`; its shape
//!   binds the symbolic dims, and the interpreter rounds its values to the param's dtype (round
//!   to nearest even);
//! - a Python int is an exact integer ([`HostArg::Int`]), a float a float ([`HostArg::Scalar`]);
//!   a 0-d array given for a scalar param is its one value.
//!
//! Each `out` and `inout` tensor comes back as the bytes of the `.npy` file `kirc run` writes
//! (`NpyDtype::for_output`: float dtypes as `<f4` holding exactly the kernel dtype's values).
//!
//! The interpreter's errors are sorted by where they point: one at an entry param (a missing
//! or ill-shaped argument, dims that disagree, a value the param's dtype cannot hold) or at a
//! kernel's `requires` is an input error naming the param when there is one; any other is an
//! error of the run itself.

use crate::errors::{Class, Failure};
use kir_backends::interp::{self, HostArg, HostTensor, InterpError, RunOptions};
use kir_compiler::internal::npy::{self, NpyDtype};
use kir_compiler::internal::pass::PassManager;
use kir_compiler::internal::pipeline;
use kir_compiler::internal::source::Source;
use kir_ir::{Dtype, Module, Param, ParamKind, Span};
use std::collections::BTreeMap;

/// One input as the Python side hands it over.
pub enum Input {
    /// The bytes of a C-order `.npy` file.
    Tensor(Vec<u8>),
    /// An exact integer.
    Int(i64),
    /// A float.
    Float(f64),
}

/// One output: its name and the bytes of its `.npy` file.
pub type Output = (String, Vec<u8>);

/// Runs the entry of `src` specialized with `defines` on `inputs`; the outputs in the order of
/// the entry's params.
pub fn run(
    src: &Source,
    defines: &[(String, String)],
    kernel: Option<&str>,
    inputs: Vec<(String, Input)>,
) -> Result<Vec<Output>, Failure> {
    let front = PassManager::standard()
        .run_frontend(&src.text, defines, &mut |_, _| {})
        .map_err(|d| Failure::located(Class::Compile, src, &d))?;
    let m = pipeline::entry_module(front.output, kernel).map_err(|m| {
        let argument = kernel.map(|_| "kernel".to_string());
        Failure::plain(Class::Input, m).for_argument(argument)
    })?;
    let params = m.entry_params().unwrap_or(&[]);
    let args = host_args(params, inputs)?;
    let results = interp::run_with(&m, &args, &RunOptions::default())
        .map_err(|e| interp_failure(src, &m, &e))?;
    let mut outputs = Vec::new();
    for p in params {
        if let Some(t) = results.get(&p.name) {
            let dtype = NpyDtype::for_output(t.dtype);
            outputs.push((p.name.clone(), npy::to_bytes(dtype, &t.shape, &t.data)));
        }
    }
    Ok(outputs)
}

/// The interpreter's arguments of `inputs`. An input the entry has no param for is an error
/// naming the params; the rest (missing arguments, ranks, dims, values) the interpreter
/// checks when it binds them.
fn host_args(
    params: &[Param],
    inputs: Vec<(String, Input)>,
) -> Result<BTreeMap<String, HostArg>, Failure> {
    let mut args = BTreeMap::new();
    for (name, input) in inputs {
        let Some(p) = params.iter().find(|p| p.name == name) else {
            let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
            return Err(Failure::input(
                &name,
                format!(
                    "inputs['{name}']: the entry has no param `{name}` (the entry params are: {})",
                    names.join(", ")
                ),
            ));
        };
        let arg = match input {
            Input::Int(i) => HostArg::Int(i),
            Input::Float(x) => HostArg::Scalar(x),
            Input::Tensor(bytes) => {
                let a = npy::parse(&bytes, &format!("inputs['{name}']"))
                    .map_err(|e| Failure::input(&name, e.to_string()))?;
                match (&p.kind, a.shape.is_empty(), &a.data) {
                    // A 0-d array for a scalar param: its one value.
                    (ParamKind::Scalar(_), true, interp::HostData::I64(v)) => HostArg::Int(v[0]),
                    (ParamKind::Scalar(_), true, interp::HostData::F64(v)) => {
                        if matches!(a.dtype, NpyDtype::F64 | NpyDtype::F32 | NpyDtype::F16) {
                            HostArg::Scalar(v[0])
                        } else {
                            // Integers of the narrower dtypes are exact in f64.
                            HostArg::Int(v[0] as i64)
                        }
                    }
                    (kind, _, _) => {
                        let dtype = match kind {
                            ParamKind::Tensor(_, tt) => tt.elem.known().unwrap_or(Dtype::F32),
                            ParamKind::Scalar(_) => Dtype::F32,
                        };
                        HostArg::Tensor(HostTensor {
                            dtype,
                            shape: a.shape,
                            data: a.data,
                        })
                    }
                }
            }
        };
        args.insert(name, arg);
    }
    Ok(args)
}

/// An interpreter error as an input error (at an entry param, or at a kernel's `requires`) or
/// a run error (anywhere else).
fn interp_failure(src: &Source, m: &Module, e: &InterpError) -> Failure {
    let Some(span) = e.span else {
        return Failure::interp(Class::Run, src, e);
    };
    let params = m.entry_params().unwrap_or(&[]);
    if let Some(p) = params.iter().find(|p| within(span, p.span)) {
        return Failure::interp(Class::Input, src, e).for_argument(Some(p.name.clone()));
    }
    let at_requires = m
        .kernels
        .values()
        .any(|k| k.requires.iter().any(|r| within(span, r.span)));
    let class = if at_requires {
        Class::Input
    } else {
        Class::Run
    };
    Failure::interp(class, src, e)
}

/// True when `inner` lies within `outer` (and is a real place: not the empty span at 0).
fn within(inner: Span, outer: Span) -> bool {
    inner.end > 0 && outer.start <= inner.start && inner.end <= outer.end
}
